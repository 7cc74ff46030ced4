//! Prometheus text exposition of cluster counters, served for `--metrics ADDR` by
//! [`super::http`].
//!
//! The server answers every request with the latest text, which the statistics printer
//! replaces once per interval. Nothing here touches the data path.

use super::http::{auth_note, serve, Endpoint};
use crate::port::cluster::ClusterStats;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

/// Prometheus text for a cluster: master counters, per-queue counters and drops by reason, and
/// per-thread counters of consumer threads (`threads[q] = (packets, bytes)`).
pub fn cluster_text(id: u32, s: &ClusterStats, threads: &[(u64, u64)]) -> String {
    let mut o = String::with_capacity(2048);
    let c = |o: &mut String, name: &str, help: &str| {
        let _ = writeln!(o, "# HELP linerate_cluster_{name} {help}");
        let _ = writeln!(o, "# TYPE linerate_cluster_{name} counter");
    };
    c(&mut o, "rx_packets_total", "Packets the master received.");
    let _ = writeln!(
        o,
        "linerate_cluster_rx_packets_total{{cluster=\"{id}\"}} {}",
        s.rx_packets
    );
    c(&mut o, "rx_bytes_total", "Bytes the master received.");
    let _ = writeln!(
        o,
        "linerate_cluster_rx_bytes_total{{cluster=\"{id}\"}} {}",
        s.rx_bytes
    );
    c(
        &mut o,
        "filtered_total",
        "Packets no queue wanted (filter).",
    );
    let _ = writeln!(
        o,
        "linerate_cluster_filtered_total{{cluster=\"{id}\"}} {}",
        s.filtered
    );
    c(
        &mut o,
        "tx_packets_total",
        "Packets consumers transmitted, sent out of -o.",
    );
    let _ = writeln!(
        o,
        "linerate_cluster_tx_packets_total{{cluster=\"{id}\"}} {}",
        s.tx_packets
    );
    c(
        &mut o,
        "tx_dropped_total",
        "Packets consumers transmitted that -o did not take.",
    );
    let _ = writeln!(
        o,
        "linerate_cluster_tx_dropped_total{{cluster=\"{id}\"}} {}",
        s.tx_dropped
    );
    c(&mut o, "delivered_total", "Packets delivered to a queue.");
    for (q, x) in s.queues.iter().enumerate() {
        let _ = writeln!(
            o,
            "linerate_cluster_delivered_total{{cluster=\"{id}\",queue=\"{q}\",app=\"{}\"}} {}",
            x.app, x.delivered
        );
    }
    c(
        &mut o,
        "dropped_total",
        "Packets meant for a queue and dropped, by reason.",
    );
    for (q, x) in s.queues.iter().enumerate() {
        for (reason, v) in [
            ("ring_full", x.ring_full),
            ("consumer_gone", x.consumer_gone),
            ("no_frame", x.no_frame),
            ("unread", x.unread),
        ] {
            let _ = writeln!(
                o,
                "linerate_cluster_dropped_total{{cluster=\"{id}\",queue=\"{q}\",app=\"{}\",reason=\"{reason}\"}} {v}",
                x.app
            );
        }
    }
    let _ = writeln!(
        o,
        "# HELP linerate_cluster_backlog Descriptors waiting in a queue."
    );
    let _ = writeln!(o, "# TYPE linerate_cluster_backlog gauge");
    for (q, x) in s.queues.iter().enumerate() {
        let _ = writeln!(
            o,
            "linerate_cluster_backlog{{cluster=\"{id}\",queue=\"{q}\"}} {}",
            x.backlog
        );
    }
    if !threads.is_empty() {
        c(
            &mut o,
            "thread_packets_total",
            "Packets a consumer thread received.",
        );
        for (q, (p, _)) in threads.iter().enumerate() {
            let _ = writeln!(
                o,
                "linerate_cluster_thread_packets_total{{cluster=\"{id}\",thread=\"{q}\"}} {p}"
            );
        }
        c(
            &mut o,
            "thread_bytes_total",
            "Bytes a consumer thread received.",
        );
        for (q, (_, b)) in threads.iter().enumerate() {
            let _ = writeln!(
                o,
                "linerate_cluster_thread_bytes_total{{cluster=\"{id}\",thread=\"{q}\"}} {b}"
            );
        }
    }
    o
}

/// The text a metrics server serves; replace it with [`MetricsServer::set`] (once per
/// statistics interval). Serving is [`super::http::serve`]'s: its own thread, many clients.
#[derive(Clone)]
pub struct MetricsServer {
    text: Arc<Mutex<Arc<String>>>,
    endpoint: Endpoint,
}

impl MetricsServer {
    /// Listens on `addr` (e.g. 127.0.0.1:9100) and serves on a background thread.
    pub fn start(addr: &str) -> std::io::Result<MetricsServer> {
        let text = Arc::new(Mutex::new(Arc::new(String::new())));
        let t = text.clone();
        // The lock is held only to copy a pointer, on either side.
        let endpoint = serve(addr, move || {
            let s = t.lock().map(|s| s.clone()).unwrap_or_default();
            String::clone(&s)
        })?;
        Ok(MetricsServer { text, endpoint })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.endpoint.addr()
    }

    /// The note to print when the address is not loopback (no authentication), if any.
    pub fn auth_note(&self) -> Option<String> {
        auth_note(&self.endpoint.addr())
    }

    /// Replaces the served text.
    pub fn set(&self, text: String) {
        let text = Arc::new(text);
        if let Ok(mut s) = self.text.lock() {
            *s = text;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::port::cluster::QueueStats;
    use std::io::{Read, Write};

    #[test]
    fn text_and_server() {
        let s = ClusterStats {
            rx_packets: 10,
            queues: vec![QueueStats {
                delivered: 7,
                ring_full: 3,
                ..Default::default()
            }],
            ..Default::default()
        };
        let t = cluster_text(5, &s, &[(7, 448)]);
        assert!(
            t.contains("linerate_cluster_rx_packets_total{cluster=\"5\"} 10"),
            "{t}"
        );
        assert!(t.contains("reason=\"ring_full\"} 3"), "{t}");
        assert!(t.contains("linerate_cluster_thread_bytes_total{cluster=\"5\",thread=\"0\"} 448"));
        let m = MetricsServer::start("127.0.0.1:0").unwrap();
        m.set(t.clone());
        let mut c = std::net::TcpStream::connect(m.addr()).unwrap();
        c.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
        let mut got = String::new();
        c.read_to_string(&mut got).unwrap();
        assert!(got.starts_with("HTTP/1.1 200 OK"), "{got}");
        assert!(got.ends_with(&t));
    }
}

//! Prometheus text exposition of cluster counters, and a tiny HTTP server for `--metrics ADDR`.
//!
//! The server is one thread on std::net: it answers every request with the latest text, which
//! the statistics printer replaces once per interval. Nothing here touches the data path.

use crate::port::cluster::ClusterStats;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
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

/// The text a metrics server serves; replace it with [`MetricsServer::set`].
#[derive(Clone)]
pub struct MetricsServer {
    text: Arc<Mutex<String>>,
    addr: SocketAddr,
}

impl MetricsServer {
    /// Listens on `addr` (e.g. 127.0.0.1:9100) and serves on a background thread.
    pub fn start(addr: &str) -> std::io::Result<MetricsServer> {
        let listener = TcpListener::bind(addr)?;
        let addr = listener.local_addr()?;
        let text = Arc::new(Mutex::new(String::new()));
        let t = text.clone();
        std::thread::Builder::new()
            .name("metrics".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    let Ok(mut conn) = conn else { continue };
                    let _ = conn.set_read_timeout(Some(std::time::Duration::from_secs(2)));
                    let mut req = [0u8; 2048];
                    let n = conn.read(&mut req).unwrap_or(0);
                    let head = std::str::from_utf8(&req[..n]).unwrap_or("");
                    let ok = head.starts_with("GET /metrics") || head.starts_with("GET / ");
                    let body = if ok {
                        t.lock().map(|s| s.clone()).unwrap_or_default()
                    } else {
                        "see /metrics\n".to_string()
                    };
                    let status = if ok { "200 OK" } else { "404 Not Found" };
                    let _ = write!(
                        conn,
                        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                }
            })?;
        Ok(MetricsServer { text, addr })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Replaces the served text.
    pub fn set(&self, text: String) {
        if let Ok(mut s) = self.text.lock() {
            *s = text;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::port::cluster::QueueStats;

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

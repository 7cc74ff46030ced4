//! The cluster's Prometheus families (`linerate_cluster_*`), beside the common ones of
//! [`crate::stats::prom`]; listed in docs/metrics.md.

use super::ClusterStats;
use std::fmt::Write as _;

/// Prometheus text for a cluster: master counters, per-queue counters and drops by reason, and
/// per-thread counters of consumer threads (`threads[q] = (packets, bytes)`).
pub fn prom_text(id: u32, s: &ClusterStats, threads: &[(u64, u64)]) -> String {
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
            ("too_big", x.too_big),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::QueueStats;

    #[test]
    fn cluster_families() {
        let s = ClusterStats {
            rx_packets: 10,
            queues: vec![QueueStats {
                delivered: 7,
                ring_full: 3,
                ..Default::default()
            }],
            ..Default::default()
        };
        let t = prom_text(5, &s, &[(7, 448)]);
        assert!(
            t.contains("linerate_cluster_rx_packets_total{cluster=\"5\"} 10"),
            "{t}"
        );
        assert!(t.contains("reason=\"ring_full\"} 3"), "{t}");
        assert!(t.contains("linerate_cluster_thread_bytes_total{cluster=\"5\",thread=\"0\"} 448"));
    }
}

//! Counters, rates and their output: pfcount-style text, JSON lines.

pub mod counters;
mod fmt;
pub mod http;
pub mod prom;

pub use counters::{DropReason, Drops, PortStats};
pub use fmt::{group, group_f};

/// Totals at one instant.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Snapshot {
    /// Monotonic time of the snapshot (ns).
    pub t_ns: u64,
    /// Packets delivered.
    pub pkts: u64,
    /// Bytes delivered (wire lengths).
    pub bytes: u64,
    /// Packets dropped, by reason.
    pub drops: Drops,
}

/// Rates between two snapshots, or since the start.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Rates {
    /// Packets in the span.
    pub pkts: u64,
    /// Bytes in the span.
    pub bytes: u64,
    /// Drops in the span (all reasons but `filter`).
    pub drops: u64,
    /// Span in ms.
    pub ms: f64,
    /// Packets per second.
    pub pps: f64,
    /// Megabits per second (of frame bytes, without preamble and gap).
    pub mbps: f64,
    /// Dropped share of (delivered + dropped), in %.
    pub drop_pct: f64,
}

impl Rates {
    /// Rates from `a` to `b`.
    pub fn between(a: &Snapshot, b: &Snapshot) -> Rates {
        let pkts = b.pkts.saturating_sub(a.pkts);
        let bytes = b.bytes.saturating_sub(a.bytes);
        let drops = lost(&b.drops).saturating_sub(lost(&a.drops));
        let ns = b.t_ns.saturating_sub(a.t_ns).max(1) as f64;
        let total = pkts + drops;
        Rates {
            pkts,
            bytes,
            drops,
            ms: ns / 1e6,
            pps: pkts as f64 * 1e9 / ns,
            mbps: bytes as f64 * 8.0 * 1e3 / ns,
            drop_pct: if total == 0 {
                0.0
            } else {
                drops as f64 * 100.0 / total as f64
            },
        }
    }
}

/// Drops that are losses (everything but packets a filter rejected on purpose).
pub fn lost(d: &Drops) -> u64 {
    d.total() - d.get(DropReason::Filter)
}

/// pfcount's statistics block: absolute since `start`, actual since `prev`.
pub fn pfcount_block(start: &Snapshot, prev: &Snapshot, now: &Snapshot) -> String {
    let abs = Rates::between(start, now);
    let act = Rates::between(prev, now);
    let filtered = now.drops.since(&start.drops).get(DropReason::Filter);
    let mut s = String::with_capacity(512);
    s.push_str("=========================\n");
    s.push_str(&format!(
        "Absolute Stats: [{} pkts rcvd][{} pkts dropped]",
        group(abs.pkts),
        group(abs.drops)
    ));
    if filtered > 0 {
        s.push_str(&format!("[{} pkts rejected by filter]", group(filtered)));
    }
    s.push('\n');
    s.push_str(&format!(
        "Total Pkts={}/Dropped={:.1} %\n",
        group(abs.pkts + abs.drops),
        abs.drop_pct
    ));
    s.push_str(&format!(
        "{} pkts - {} bytes [{} pkt/sec - {} Mbit/sec]\n",
        group(abs.pkts),
        group(abs.bytes),
        group_f(abs.pps, 2),
        group_f(abs.mbps, 2)
    ));
    let reasons = breakdown(&losses(start, now));
    if !reasons.is_empty() {
        s.push_str(&format!("Drops by reason: {reasons}\n"));
    }
    s.push_str("=========================\n");
    s.push_str(&format!(
        "Actual Stats: {} pkts [{} ms][{} pps/{:.2} Gbps][{} drops ({:.1} %)]\n",
        group(act.pkts),
        group_f(act.ms, 2),
        group_f(act.pps, 2),
        act.mbps / 1e3,
        group(act.drops),
        act.drop_pct
    ));
    s.push_str("=========================\n");
    s
}

/// The drops between two snapshots that are losses (filtered packets apart), by reason: what
/// [`Rates::between`] sums as `drops`.
pub fn losses(a: &Snapshot, b: &Snapshot) -> Drops {
    b.drops.since(&a.drops).without(DropReason::Filter)
}

/// `reason=N` pairs for the non-zero drop counters.
pub fn breakdown(d: &Drops) -> String {
    DropReason::ALL
        .iter()
        .filter(|r| d.get(**r) > 0)
        .map(|r| format!("{}={}", r.name(), group(d.get(*r))))
        .collect::<Vec<_>>()
        .join(" ")
}

/// A JSON line with absolute and actual figures.
pub fn json_line(kind: &str, start: &Snapshot, prev: &Snapshot, now: &Snapshot) -> String {
    let abs = Rates::between(start, now);
    let act = Rates::between(prev, now);
    // Since the start, like "drops" (which is their sum without "filter").
    let mut drops = serde_json::Map::new();
    let since = now.drops.since(&start.drops);
    for r in DropReason::ALL {
        drops.insert(r.name().into(), since.get(r).into());
    }
    serde_json::json!({
        "type": kind,
        "elapsed_ms": abs.ms,
        "pkts": abs.pkts,
        "bytes": abs.bytes,
        "drops": abs.drops,
        "drop_pct": abs.drop_pct,
        "drops_by_reason": drops,
        "pps": abs.pps,
        "mbps": abs.mbps,
        "actual": {
            "ms": act.ms,
            "pkts": act.pkts,
            "bytes": act.bytes,
            "drops": act.drops,
            "pps": act.pps,
            "mbps": act.mbps,
        }
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_has_pfcount_shape() {
        let a = Snapshot::default();
        let mut d = Drops::default();
        d.add(DropReason::Kernel, 10);
        d.add(DropReason::Filter, 5);
        let b = Snapshot {
            t_ns: 1_000_000_000,
            pkts: 14_881_605,
            bytes: 14_881_605 * 60,
            drops: d,
        };
        let s = pfcount_block(&a, &a, &b);
        assert!(
            s.contains("Absolute Stats: [14'881'605 pkts rcvd][10 pkts dropped][5 pkts rejected by filter]"),
            "{s}"
        );
        assert!(s.contains("Total Pkts=14'881'615/Dropped=0.0 %"), "{s}");
        assert!(
            s.contains("[14'881'605.00 pkt/sec - 7'143.17 Mbit/sec]"),
            "{s}"
        );
        assert!(
            s.contains("Actual Stats: 14'881'605 pkts [1'000.00 ms][14'881'605.00 pps/7.14 Gbps]"),
            "{s}"
        );
        // "dropped" is the sum of the reasons listed (filtered packets are shown apart).
        assert!(s.contains("Drops by reason: kernel=10\n"), "{s}");
        let j: serde_json::Value = serde_json::from_str(&json_line("stats", &a, &a, &b)).unwrap();
        assert_eq!(j["pkts"], 14_881_605);
        assert_eq!(j["drops"], 10);
        assert_eq!(j["drops_by_reason"]["filter"], 5);
    }

    #[test]
    fn drops_and_their_reasons_count_from_the_same_start() {
        // A port whose counters did not start at 0 (a cluster queue that overflowed before its
        // consumer attached): the reasons listed are the drops since the start, like the total.
        let mut d0 = Drops::default();
        d0.add(DropReason::RingFull, 495_896);
        let a = Snapshot {
            drops: d0,
            ..Default::default()
        };
        let mut d1 = d0;
        d1.add(DropReason::RingFull, 3);
        let b = Snapshot {
            t_ns: 1_000_000_000,
            pkts: 100,
            bytes: 6_400,
            drops: d1,
        };
        let s = pfcount_block(&a, &a, &b);
        assert!(s.contains("[3 pkts dropped]"), "{s}");
        assert!(s.contains("Drops by reason: ring_full=3\n"), "{s}");
        assert_eq!(breakdown(&losses(&a, &b)), "ring_full=3");
        let j: serde_json::Value = serde_json::from_str(&json_line("summary", &a, &a, &b)).unwrap();
        assert_eq!(j["drops"], 3);
        assert_eq!(j["drops_by_reason"]["ring_full"], 3);
    }
}

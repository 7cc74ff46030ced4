//! What `watch` prints: sar-like tables per interval, a summary, JSON lines and Prometheus
//! text, all from [`Interval`]s.

use super::{CpuSource, HopDelta, Interval, NapiDelta, Segment, EGRESS_DROPS};
use crate::port::xdp::napi::HIST_BOUNDS;
use crate::stats::prom::{self, Exposition};
use crate::stats::{group, group_f};
use serde_json::{json, Map, Value};
use std::fmt::Write as _;

/// Width of the hop column: the longest label, at least 8.
fn hop_width(i: &Interval) -> usize {
    i.hops
        .iter()
        .map(|h| h.label.len())
        .max()
        .unwrap_or(0)
        .max(8)
}

fn avg(bytes: u64, pkts: u64) -> Option<f64> {
    (pkts > 0).then(|| bytes as f64 / pkts as f64)
}

fn avg_text(bytes: u64, pkts: u64) -> String {
    avg(bytes, pkts).map_or_else(|| "-".into(), |a| format!("{a:.1}"))
}

fn mbps(i: &Interval, bytes: u64) -> f64 {
    i.rate(bytes) * 8.0 / 1e6
}

/// The non-zero drop counters of a hop as `name=N` (per second when `per_s`).
fn drop_list(i: &Interval, h: &HopDelta, per_s: bool) -> String {
    let v: Vec<String> = h
        .drops
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(name, n)| {
            if per_s {
                format!("{name}={}", group_f(i.rate(*n), 0))
            } else {
                format!("{name}={}", group(*n))
            }
        })
        .collect();
    if v.is_empty() {
        "-".into()
    } else {
        v.join(" ")
    }
}

/// Where the packets of the marked hop vanished, in words.
pub fn mark_text(i: &Interval) -> Option<String> {
    let k = i.most_lost?;
    let h = &i.hops[k];
    let lost = h.lost_before.unwrap_or(0).max(0) as u64;
    let through = k > 0 && matches!(i.path.segments.get(k), Some(Segment::Through));
    let egress_named: Vec<String> = EGRESS_DROPS
        .iter()
        .filter(|n| h.drop(n) > 0)
        .map(|n| format!("{n} {}", group(h.drop(n))))
        .collect();
    // Through a namespace the egress drops are among the packets lost (a few more or fewer
    // in an interval: packets that waited in the queue across its edge); elsewhere they add.
    let egress = if through {
        0
    } else {
        h.vanished.saturating_sub(lost)
    };
    let mut parts = Vec::new();
    if lost > 0 && k > 0 {
        let prev = &i.hops[k - 1].label;
        let left = match i.path.segments.get(k) {
            Some(Segment::Through) => i.hops[k - 1].rx_packets,
            _ => i.hops[k - 1].tx_packets,
        };
        let share = if left > 0 {
            format!(
                " of {} ({:.2} %)",
                group(left),
                lost as f64 * 100.0 / left as f64
            )
        } else {
            String::new()
        };
        let how = match i.path.segments.get(k) {
            Some(Segment::Through) => format!(
                "inside {}: received by {prev}, not sent by {}",
                i.path.hops[k]
                    .hop
                    .netns
                    .as_deref()
                    .unwrap_or("this namespace"),
                h.label
            ),
            Some(Segment::Pair) => {
                format!("on the veth: sent by {prev}, not received by {}", h.label)
            }
            _ => format!("on the link: sent by {prev}, not received by {}", h.label),
        };
        let within = if through && !egress_named.is_empty() {
            format!(" (its egress counters: {})", egress_named.join(", "))
        } else {
            String::new()
        };
        parts.push(format!("{}{share} {how}{within}", group(lost)));
    }
    if egress > 0 {
        parts.push(format!(
            "{} dropped on the way out of {} ({})",
            group(egress),
            h.label,
            egress_named.join(", ")
        ));
    }
    Some(format!(
        "most packets vanished at {}: {}",
        h.label,
        parts.join("; ")
    ))
}

fn softnet_cpus(h: &HopDelta) -> String {
    let list = h
        .softnet
        .cpus
        .iter()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join(",");
    match h.softnet.source {
        CpuSource::Irq => list,
        CpuSource::All => format!("all({list})"),
    }
}

/// The interval's tables: traffic per hop (rates, sizes, loss, drop counters), then receive
/// work per hop (interrupts, softnet of its CPUs).
pub fn interval_text(i: &Interval) -> String {
    let w = hop_width(i);
    let mut o = String::with_capacity(256 * (i.hops.len() + 4));
    let t = format!("{:>7.1}s", i.end_secs);
    let pad = " ".repeat(t.len());
    let _ = writeln!(
        o,
        "{t}  {:<w$} {:>11} {:>11} {:>10} {:>10} {:>7} {:>7} {:>11}  drop counters/s",
        "hop", "rx pkt/s", "tx pkt/s", "rx Mbit/s", "tx Mbit/s", "rx avg", "tx avg", "lost/s"
    );
    for (k, h) in i.hops.iter().enumerate() {
        let lost = match h.lost_before {
            None => "-".to_string(),
            Some(l) => group_f(l as f64 / i.secs.max(1e-9), 0),
        };
        let mark = if i.most_lost == Some(k) {
            "  <== most lost"
        } else {
            ""
        };
        let _ = writeln!(
            o,
            "{pad}  {:<w$} {:>11} {:>11} {:>10} {:>10} {:>7} {:>7} {:>11}  {}{mark}",
            h.label,
            group_f(i.rate(h.rx_packets), 0),
            group_f(i.rate(h.tx_packets), 0),
            group_f(mbps(i, h.rx_bytes), 2),
            group_f(mbps(i, h.tx_bytes), 2),
            avg_text(h.rx_bytes, h.rx_packets),
            avg_text(h.tx_bytes, h.tx_packets),
            lost,
            drop_list(i, h, true),
        );
    }
    if let Some(m) = mark_text(i) {
        let _ = writeln!(o, "{pad}  {m}");
    }
    let _ = writeln!(
        o,
        "{pad}  {:<w$} {:>9} {:>9} {:>9} {:>9} {:>7} {:>6} {:>8} {:>14} {:>12}  softnet cpus",
        "hop",
        "polls/s",
        "pkt/poll",
        "min-max",
        "irq/s",
        "pkt/irq",
        "full%",
        "qdisc q",
        "softnet drop/s",
        "squeeze/s"
    );
    for h in &i.hops {
        let (polls, per, mm, full) = napi_cols(i, h.napi.as_ref(), h.rx_packets);
        let (irq, irq_per) = match h.irqs {
            None => ("none".to_string(), "-".to_string()),
            Some(n) => (
                group_f(i.rate(n), 0),
                if n > 0 {
                    format!("{:.1}", h.rx_packets as f64 / n as f64)
                } else {
                    "-".into()
                },
            ),
        };
        let _ = writeln!(
            o,
            "{pad}  {:<w$} {:>9} {:>9} {:>9} {:>9} {:>7} {:>6} {:>8} {:>14} {:>12}  {}",
            h.label,
            polls,
            per,
            mm,
            irq,
            irq_per,
            full,
            group(h.qdisc_backlog),
            group_f(i.rate(h.softnet.dropped), 0),
            group_f(i.rate(h.softnet.time_squeeze), 0),
            softnet_cpus(h),
        );
    }
    if let Some(b) = &i.backlog {
        if b.polls > 0 {
            let (polls, per, mm, full) = napi_cols(i, Some(b), b.packets);
            let _ = writeln!(
                o,
                "{pad}  {:<w$} {:>9} {:>9} {:>9} {:>9} {:>7} {:>6}  (netif_rx: devices without NAPI, all namespaces)",
                "backlog", polls, per, mm, "-", "-", full
            );
        }
    }
    if let Some(why) = &i.path.napi_off {
        let _ = writeln!(o, "{pad}  polls: not counted: {why}");
    }
    o
}

/// The poll columns of a hop: polls/s, packets per poll, min-max, share of full polls.
fn napi_cols(i: &Interval, n: Option<&NapiDelta>, rx: u64) -> (String, String, String, String) {
    match n {
        None => ("n/a".into(), "n/a".into(), "n/a".into(), "n/a".into()),
        Some(n) if n.polls == 0 => (
            "0".into(),
            if rx > 0 { "no NAPI" } else { "-" }.into(),
            "-".into(),
            "-".into(),
        ),
        Some(n) => (
            group_f(i.rate(n.polls), 0),
            format!("{:.1}", n.avg().unwrap_or(0.0)),
            n.min_max
                .map_or_else(|| "-".into(), |(a, b)| format!("{a}-{b}")),
            format!("{:.1}", n.full_pct().unwrap_or(0.0)),
        ),
    }
}

/// The histogram of packets per poll as `0:N 1:N 2-3:N ... 64+:N`.
pub fn hist_text(n: &NapiDelta) -> String {
    let mut v = Vec::with_capacity(8);
    for (k, c) in n.hist.iter().enumerate() {
        let lo = HIST_BOUNDS[k];
        let label = match HIST_BOUNDS.get(k + 1) {
            None => format!("{lo}+"),
            Some(&hi) if hi == lo + 1 => format!("{lo}"),
            Some(&hi) => format!("{lo}-{}", hi - 1),
        };
        v.push(format!("{label}:{}", group(*c)));
    }
    v.join(" ")
}

fn napi_json(n: &Option<NapiDelta>) -> Value {
    match n {
        None => Value::Null,
        Some(n) => json!({
            "polls": n.polls,
            "packets": n.packets,
            "per_poll_avg": n.avg(),
            "per_poll_min": n.min_max.map(|m| m.0),
            "per_poll_max": n.min_max.map(|m| m.1),
            "full_budget": n.full,
            "full_budget_pct": n.full_pct(),
            "hist": n.hist,
        }),
    }
}

/// The summary over the whole run: totals per hop.
pub fn summary_text(i: &Interval) -> String {
    let w = hop_width(i);
    let mut o = String::with_capacity(256 * (i.hops.len() + 4));
    let _ = writeln!(o, "Summary over {:.1} s:", i.secs);
    let _ = writeln!(
        o,
        "  {:<w$} {:>14} {:>14} {:>16} {:>16} {:>7} {:>7} {:>12}  drop counters",
        "hop",
        "rx packets",
        "tx packets",
        "rx bytes",
        "tx bytes",
        "rx avg",
        "tx avg",
        "lost before"
    );
    for (k, h) in i.hops.iter().enumerate() {
        let lost = h
            .lost_before
            .map_or_else(|| "-".to_string(), |l| group_f(l as f64, 0));
        let mark = if i.most_lost == Some(k) {
            "  <== most lost"
        } else {
            ""
        };
        let _ = writeln!(
            o,
            "  {:<w$} {:>14} {:>14} {:>16} {:>16} {:>7} {:>7} {:>12}  {}{mark}",
            h.label,
            group(h.rx_packets),
            group(h.tx_packets),
            group(h.rx_bytes),
            group(h.tx_bytes),
            avg_text(h.rx_bytes, h.rx_packets),
            avg_text(h.tx_bytes, h.tx_packets),
            lost,
            drop_list(i, h, false),
        );
    }
    match mark_text(i) {
        Some(m) => {
            let _ = writeln!(o, "  {m}");
        }
        None => {
            let _ = writeln!(o, "  no packet vanished along the path");
        }
    }
    let mut polls: Vec<(&str, &NapiDelta)> = i
        .hops
        .iter()
        .filter_map(|h| Some((h.label.as_str(), h.napi.as_ref()?)))
        .collect();
    if let Some(b) = &i.backlog {
        polls.push(("backlog", b));
    }
    if !polls.is_empty() {
        let _ = writeln!(o, "  Packets per NAPI poll (napi:napi_poll):");
        for (label, n) in polls {
            if n.polls == 0 {
                let _ = writeln!(o, "  {label:<w$} no polls");
                continue;
            }
            let (lo, hi) = n.min_max.unwrap_or((0, 0));
            let _ = writeln!(
                o,
                "  {label:<w$} {} polls, {:.1} packets/poll (min {lo}, max {hi}), {:.1} % full budget; {}",
                group(n.polls),
                n.avg().unwrap_or(0.0),
                n.full_pct().unwrap_or(0.0),
                hist_text(n),
            );
        }
    }
    if let Some(why) = &i.path.napi_off {
        let _ = writeln!(o, "  packets per poll: not counted: {why}");
    }
    o
}

fn hop_json(i: &Interval, h: &HopDelta) -> Value {
    let mut drops = Map::new();
    for (n, v) in &h.drops {
        drops.insert(n.clone(), (*v).into());
    }
    json!({
        "hop": h.label,
        "rx_packets": h.rx_packets,
        "tx_packets": h.tx_packets,
        "rx_bytes": h.rx_bytes,
        "tx_bytes": h.tx_bytes,
        "rx_pps": i.rate(h.rx_packets),
        "tx_pps": i.rate(h.tx_packets),
        "rx_mbps": mbps(i, h.rx_bytes),
        "tx_mbps": mbps(i, h.tx_bytes),
        "rx_avg_size": avg(h.rx_bytes, h.rx_packets),
        "tx_avg_size": avg(h.tx_bytes, h.tx_packets),
        "drops": drops,
        "lost_before": h.lost_before.unwrap_or(0),
        "vanished": h.vanished,
        "qdisc_backlog": h.qdisc_backlog,
        "irqs": h.irqs,
        "polls": napi_json(&h.napi),
        "softnet": {
            "cpus": h.softnet.cpus,
            "cpus_from": match h.softnet.source {
                CpuSource::Irq => "irq",
                CpuSource::All => "all",
            },
            "dropped": h.softnet.dropped,
            "time_squeeze": h.softnet.time_squeeze,
        },
    })
}

fn json_of(kind: &str, i: &Interval) -> String {
    json!({
        "type": kind,
        "t": i.end_secs,
        "secs": i.secs,
        "hops": i.hops.iter().map(|h| hop_json(i, h)).collect::<Vec<_>>(),
        "most_lost": i.most_lost.map(|k| i.hops[k].label.clone()),
        "backlog_polls": napi_json(&i.backlog),
        "polls_off": i.path.napi_off,
    })
    .to_string()
}

/// An interval as one JSON line (`"type":"interval"`).
pub fn interval_json(i: &Interval) -> String {
    json_of("interval", i)
}

/// The summary as one JSON line (`"type":"summary"`): per hop `hop`, `rx_packets`,
/// `tx_packets`, `rx_bytes`, `tx_bytes`, `drops` (every counter by name), `lost_before`
/// (packets that left the previous hop and did not arrive here; 0 for the first hop), and
/// more.
pub fn summary_json(i: &Interval) -> String {
    json_of("summary", i)
}

/// The `dir` of a drop counter: `rx` or `tx` from its name, empty when it has neither.
fn drop_dir(name: &str) -> &'static str {
    let n = name.strip_prefix("ethtool_").unwrap_or(name);
    if n.starts_with("rx") || n.starts_with("ingress") {
        "rx"
    } else if n.starts_with("tx") || n.starts_with("qdisc") {
        "tx"
    } else {
        ""
    }
}

/// Prometheus text for the totals since the watch began (`i` from the first snapshot to the
/// latest), with the families every linerate tool uses (docs/metrics.md), each hop labelled
/// `port` and `hop` (`B:vB1`): `linerate_packets_total` and `linerate_bytes_total{dir}`,
/// `linerate_drops_total{dir,reason}` (every drop counter of the hop by its kernel name), and
/// watch's own `linerate_watch_lost_before{hop}` and `linerate_watch_polls_total`,
/// `linerate_watch_poll_packets_total`, `linerate_watch_full_polls_total{hop}`.
pub fn prometheus_text(i: &Interval) -> String {
    let mut e = Exposition::new("watch");
    for h in &i.hops {
        let p = h.label.as_str();
        for (d, pk, by) in [
            ("rx", h.rx_packets, h.rx_bytes),
            ("tx", h.tx_packets, h.tx_bytes),
        ] {
            let l = [("port", p), ("hop", p), ("dir", d)];
            e.counter(
                prom::PACKETS,
                "Packets a port (here: a hop of the path) received (dir=rx) or sent (dir=tx).",
                &l,
                pk,
            );
            e.counter(
                prom::BYTES,
                "Bytes of those packets (frame lengths, without CRC).",
                &l,
                by,
            );
        }
    }
    for h in &i.hops {
        let p = h.label.as_str();
        for (n, v) in &h.drops {
            e.counter(
                prom::DROPS,
                "Packets lost at a port, by reason (watch: the kernel's counter names).",
                &[("port", p), ("hop", p), ("dir", drop_dir(n)), ("reason", n)],
                *v,
            );
        }
    }
    for h in i.hops.iter().skip(1) {
        e.gauge(
            "linerate_watch_lost_before",
            "Packets that left the previous hop of the path and did not arrive at this one, since the watch began.",
            &[("hop", &h.label)],
            h.lost_before.unwrap_or(0) as f64,
        );
    }
    let polls: Vec<(&str, &NapiDelta)> = i
        .hops
        .iter()
        .filter_map(|h| Some((h.label.as_str(), h.napi.as_ref()?)))
        .chain(i.backlog.as_ref().map(|b| ("backlog", b)))
        .collect();
    for (p, n) in polls {
        e.counter(
            "linerate_watch_polls_total",
            "NAPI polls of the hop's device (hop=backlog: the per-CPU backlogs).",
            &[("hop", p)],
            n.polls,
        );
        e.counter(
            "linerate_watch_poll_packets_total",
            "Packets processed by those polls.",
            &[("hop", p)],
            n.packets,
        );
        e.counter(
            "linerate_watch_full_polls_total",
            "Polls that used their whole budget.",
            &[("hop", p)],
            n.full,
        );
    }
    e.render()
}

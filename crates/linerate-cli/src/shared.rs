//! What several commands share beyond flags and signals (those are in `common`): opening a
//! pair of ports for forwarding (the library's `open_pair`, its errors named by flag), the
//! latency and histogram outputs, the cluster's accounting and per-thread text. Commands import this module, never each other.

use linerate::apps::balance::{self, BalanceTick, ThreadFigures};
use linerate::apps::gen::latency::{hist_csv, hist_svg, Tracker};
use linerate::cluster::ClusterStats;
use linerate::port::file::Inputs;
use linerate::port::xdp::{self, XdpConfig};
use linerate::port::{self, Port, PortOptions, Uri};
use linerate::stats::{group, group_f};
use linerate::Side;

/// The interface and queues of a single `xdp:` port (not a list).
pub fn xdp_of(uri: &str) -> Option<(String, xdp::Queues)> {
    match Uri::parse(uri).ok()? {
        Uri::Xdp { iface, queues } => Some((iface, queues)),
        _ => None,
    }
}

/// Opens a port, with the AF_XDP settings for `xdp:` ports; bad names are usage errors.
pub fn open_port(
    flag: &str,
    uri: &str,
    opts: &PortOptions,
    xdp: &XdpConfig,
) -> anyhow::Result<Box<dyn Port>> {
    // -i is read; -o is written (a capture file is created).
    let dir = if flag == "-o" {
        port::Direction::Tx
    } else {
        port::Direction::Rx
    };
    let opts = PortOptions {
        xdp: *xdp,
        ..opts.clone()
    };
    linerate::open(uri, &opts, dir).map_err(|e| crate::common::port_error(flag, uri, e))
}

/// Input port, output port, whether they share one UMEM, and the input's counters per
/// interface read when it opened, before the output ([`linerate::Pair::input_start`]).
pub type PortPair = (
    Box<dyn Port>,
    Box<dyn Port>,
    bool,
    Vec<linerate::port::PortStats>,
);

/// Opens the input and output ports with [`linerate::open_pair`]: two `xdp:` ports share one
/// UMEM when the kernel allows (then a received frame is sent without a copy); the returned
/// flag says whether they do. A port that fails is named by its flag (-i, -o).
pub fn open_pair(
    input: &str,
    output: &str,
    opts: &PortOptions,
    xdp: &XdpConfig,
) -> anyhow::Result<PortPair> {
    let opts = PortOptions {
        xdp: *xdp,
        ..opts.clone()
    };
    let p = linerate::open_pair(input, output, &opts).map_err(pair_error)?;
    Ok((p.input, p.output, p.shared_umem, p.input_start))
}

/// A forwarding pair's port that did not open, named by its flag (-i, -o).
pub fn pair_error(e: linerate::PairError) -> anyhow::Error {
    let flag = match e.side {
        Side::Input => "-i",
        Side::Output => "-o",
    };
    crate::common::port_error(flag, &e.uri, e.source)
}

/// Writes the histogram as CSV at `path` and as SVG beside it (same name, .svg).
/// Neither may be one of `inputs`.
pub fn write_hist(path: &str, t: &Tracker, title: &str, inputs: &Inputs) -> anyhow::Result<String> {
    let h = t.merged();
    crate::common::write_file("--hist-out", path, hist_csv(&h).as_bytes(), inputs)?;
    let svg = std::path::Path::new(path).with_extension("svg");
    let svg = svg.display().to_string();
    crate::common::write_file("--hist-out", &svg, hist_svg(&h, title).as_bytes(), inputs)?;
    Ok(svg)
}

/// `--hist-out` files opened (created) at start, before privileges are dropped and outputs
/// start, as tcpdump opens -w: a run never ends on a file it cannot write.
pub struct HistFiles {
    csv: std::fs::File,
    svg: std::fs::File,
    svg_path: String,
}

/// Creates `--hist-out PATH` and its `.svg` now (refusing an input, as [`write_hist`] does).
pub fn open_hist(path: &str, inputs: &Inputs) -> anyhow::Result<HistFiles> {
    let create = |p: &str| {
        linerate::port::file::create(p, inputs)
            .map_err(|e| crate::common::usage(format!("--hist-out: {e}")))
    };
    let svg_path = std::path::Path::new(path)
        .with_extension("svg")
        .display()
        .to_string();
    Ok(HistFiles {
        csv: create(path)?,
        svg: create(&svg_path)?,
        svg_path,
    })
}

/// Writes the histogram of `t` into files opened by [`open_hist`]; returns the SVG's path.
pub fn write_hist_into(
    files: HistFiles,
    path: &str,
    t: &Tracker,
    title: &str,
) -> anyhow::Result<String> {
    use std::io::Write;
    let h = t.merged();
    let HistFiles {
        mut csv,
        mut svg,
        svg_path,
    } = files;
    csv.write_all(hist_csv(&h).as_bytes())
        .map_err(|e| anyhow::anyhow!("--hist-out {path}: {e}"))?;
    svg.write_all(hist_svg(&h, title).as_bytes())
        .map_err(|e| anyhow::anyhow!("--hist-out {svg_path}: {e}"))?;
    Ok(svg_path)
}

/// Latency table rows as JSON.
pub fn latency_json(t: &Tracker, sent: impl Fn(u16) -> Option<u64>) -> serde_json::Value {
    let rows: Vec<serde_json::Value> = t
        .streams()
        .map(|s| {
            let l = s.summary();
            serde_json::json!({
                "stream": s.id, "rx": s.rx, "lost": s.lost(sent(s.id)), "dups": s.dups,
                "reordered": s.reordered, "negative": s.negative, "min_ns": l.min, "avg_ns": l.avg, "p50_ns": l.p50,
                "p90_ns": l.p90, "p99_ns": l.p99, "p999_ns": l.p999, "max_ns": l.max,
            })
        })
        .collect();
    rows.into()
}

/// `rx = filtered + routed; destinations = delivered + drops by reason (+ still in queues)`.
pub fn accounting_line(s: &ClusterStats) -> String {
    let ring_full: u64 = s.queues.iter().map(|q| q.ring_full).sum();
    let gone: u64 = s.queues.iter().map(|q| q.consumer_gone).sum();
    let nf: u64 = s.queues.iter().map(|q| q.no_frame).sum();
    let big: u64 = s.queues.iter().map(|q| q.too_big).sum();
    let unread: u64 = s.queues.iter().map(|q| q.unread).sum();
    let backlog = s.backlog();
    format!(
        "Accounting: rx {} = filtered {} + distributed {}; destinations {} = delivered {} + ring_full {} + consumer_gone {} + no_frame {}{} + unread {}{} [{}]",
        group(s.rx_packets),
        group(s.filtered),
        group(s.routed),
        group(s.copies),
        group(s.delivered()),
        group(ring_full),
        group(gone),
        group(nf),
        if big > 0 {
            format!(" + too_big {} (longer than --max-pkt-len)", group(big))
        } else {
            String::new()
        },
        group(unread),
        if backlog > 0 {
            format!(" + in queues {}", group(backlog))
        } else {
            String::new()
        },
        if s.check_invariant().is_ok() { "ok" } else { "VIOLATED" }
    )
}

pub fn secs(a: u64, b: u64) -> f64 {
    (b.saturating_sub(a)).max(1) as f64 / 1e9
}

/// Per-thread blocks and the aggregate line, as pfdnacluster_multithread prints them.
/// Queues in `egress` go to ports, not threads: they count as Sent.
pub fn threads_text(
    t: &BalanceTick,
    prev: &[(u64, u64)],
    now: &[(u64, u64)],
    egress: &[usize],
) -> String {
    let mut s = String::new();
    let abs_s = secs(t.start.t_ns, t.now.t_ns);
    let act_s = secs(t.prev.t_ns, t.now.t_ns);
    let mut processed = 0u64;
    let mut sent = 0u64;
    for (q, &(p, b)) in now.iter().enumerate() {
        if egress.contains(&q) {
            let d = |s: &ClusterStats| s.queues.get(q).map_or(0, |x| x.delivered);
            sent += d(&t.now.stats).saturating_sub(d(&t.prev.stats));
            continue;
        }
        let qs = t.now.stats.queues.get(q).copied().unwrap_or_default();
        let q0 = t.start.stats.queues.get(q).copied().unwrap_or_default();
        let prev_p = prev.get(q).map_or(0, |x| x.0);
        processed += p - prev_p.min(p);
        s.push_str(&balance::thread_block(
            q,
            &ThreadFigures {
                pkts: p,
                bytes: b,
                drops: qs.drops().saturating_sub(q0.drops()),
                act_pkts: p - prev_p.min(p),
                secs: abs_s,
                act_ms: act_s * 1e3,
            },
        ));
    }
    let captured = t
        .now
        .stats
        .rx_packets
        .saturating_sub(t.prev.stats.rx_packets);
    s.push_str("=========================\n");
    s.push_str(&format!(
        "Aggregate Actual stats: [Captured {} pkt/sec][Processed {} pkt/sec][Sent {} pkt/sec]\n",
        group_f(captured as f64 / act_s, 2),
        group_f(processed as f64 / act_s, 2),
        group_f(sent as f64 / act_s, 2)
    ));
    s.push_str("=========================\n");
    s
}

//! `linerate watch`: per-hop rates, sizes and drops along a path of interfaces, and where the
//! packets vanish (sar -n DEV, ip -s link, tc -s qdisc, ethtool -S and softnet_stat at once).

use crate::common::{flags, stop_flag, usage};
use clap::Parser;
use linerate::apps::watch::{self, report, Watch, WatchError};
use linerate::stats::prom::MetricsServer;
use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Flags of `linerate watch`.
#[derive(Parser, Debug)]
pub struct Args {
    /// The path: hops in path order, comma separated, each IFACE (this namespace) or
    /// NETNS:IFACE (a namespace of `ip netns`), e.g. A:vA,B:vB0,B:vB1,C:vC.
    #[arg(value_name = "PATH")]
    path: String,
    /// Seconds between reports (or with a unit: 500ms).
    #[arg(long, value_name = "SECONDS", default_value = "1", value_parser = flags::duration(flags::INTERVAL))]
    interval: Duration,
    /// `-i` is the input port in linerate; watch's interval is `--interval`.
    #[allow(dead_code)]
    #[arg(short = 'i', hide = true, value_name = "VALUE", num_args = 0..=1, default_missing_value = "",
          value_parser = flags::retired("watch -i: the interval is --interval SECONDS (-i is the input port in linerate's tools; watch reads the interfaces of PATH)"))]
    old_i: Option<String>,
    /// Stop after this long and print the summary (default: until Ctrl-C).
    #[arg(short = 't', long, value_name = "SECONDS", value_parser = flags::duration(flags::RUN))]
    duration: Option<Duration>,
    /// Print each interval and the summary as JSON lines instead of tables.
    #[arg(long)]
    json: bool,
    /// Serve the totals since the start in Prometheus' text format on this address (e.g.
    /// 127.0.0.1:9100); it has no authentication: keep it on loopback.
    #[arg(long, value_name = "ADDR")]
    metrics: Option<String>,
    /// Do not count packets per NAPI poll (they need root: a BPF program on the
    /// napi:napi_poll tracepoint).
    #[arg(long)]
    no_polls: bool,
    /// Print only the summary (no report per interval).
    #[arg(short = 'q', long)]
    quiet: bool,
}

fn watch_error(e: WatchError) -> anyhow::Error {
    if e.is_usage() {
        usage(e.to_string())
    } else {
        anyhow::Error::new(e)
    }
}

/// The Prometheus endpoint of --metrics.
fn start_metrics(a: &Args) -> anyhow::Result<Option<MetricsServer>> {
    Ok(match &a.metrics {
        Some(addr) => {
            let m =
                MetricsServer::start(addr).map_err(|e| usage(format!("--metrics {addr}: {e}")))?;
            if let Some(note) = m.auth_note() {
                eprintln!("linerate: {note}");
            }
            Some(m)
        }
        None => None,
    })
}

/// The start line (or JSON record): the path's hops, its notes, the metrics address.
fn announce(out: &mut dyn Write, a: &Args, path: &watch::Path, metrics: Option<&MetricsServer>) {
    if a.json {
        let start = serde_json::json!({
            "type": "start",
            "path": path.hops.iter().map(|h| serde_json::json!({
                "hop": h.label,
                "ifindex": h.ifindex,
                "driver": h.driver,
                "kind": h.kind,
                "irqs": h.irqs,
            })).collect::<Vec<_>>(),
            "notes": path.notes,
            "polls_off": path.napi_off,
            "metrics": metrics.map(|m| m.addr().to_string()),
        });
        let _ = writeln!(out, "{start}");
    } else {
        let hops: Vec<String> = path
            .hops
            .iter()
            .map(|h| {
                let what = h.kind.as_deref().unwrap_or(&h.driver);
                if what.is_empty() {
                    h.label.clone()
                } else {
                    format!("{} ({what})", h.label)
                }
            })
            .collect();
        let _ = writeln!(out, "Watching {}", hops.join(" -> "));
        for n in &path.notes {
            let _ = writeln!(out, "note: {n}");
        }
        if let Some(why) = &path.napi_off {
            let _ = writeln!(out, "note: packets per poll are not counted: {why}");
        }
        if let Some(m) = metrics {
            let _ = writeln!(out, "Metrics on http://{}/metrics", m.addr());
        }
    }
    let _ = out.flush();
}

/// Sleeps until the next interval (or the end of -t), in short steps so that a signal or
/// the end of -t is seen at once. False: a signal stopped the run.
fn wait_until_tick(
    a: &Args,
    stop: &std::sync::atomic::AtomicBool,
    started: Instant,
    next: Instant,
) -> bool {
    loop {
        if stop.load(Ordering::Relaxed) {
            return false;
        }
        let now = Instant::now();
        let end = a.duration.map(|d| started + d);
        let wake = match end {
            Some(e) if e < next => e,
            _ => next,
        };
        if now >= wake {
            return true;
        }
        std::thread::sleep((wake - now).min(Duration::from_millis(50)));
    }
}

/// Runs `linerate watch`.
pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    let stop = stop_flag()?;
    let hops = watch::parse_path(&a.path).map_err(watch_error)?;
    let mut w = Watch::new(hops, !a.no_polls).map_err(watch_error)?;
    let metrics = start_metrics(&a)?;
    let mut out = std::io::stdout().lock();
    let path = w.path().clone();
    announce(&mut out, &a, &path, metrics.as_ref());
    let first = w.sample().map_err(watch_error)?;
    let started = Instant::now();
    let mut prev = first.clone();
    let mut last = first.clone();
    let mut failure = None;
    let mut next = started + a.interval;
    loop {
        if !wait_until_tick(&a, &stop, started, next) {
            break;
        }
        let ending = a.duration.is_some_and(|d| started.elapsed() >= d);
        match w.sample() {
            Ok(s) => {
                let i = watch::diff(&prev, &s).since_start(&first, &s);
                if !a.quiet {
                    let text = if a.json {
                        report::interval_json(&i) + "\n"
                    } else {
                        report::interval_text(&i)
                    };
                    let _ = out.write_all(text.as_bytes());
                    let _ = out.flush();
                }
                if let Some(m) = &metrics {
                    m.set(report::prometheus_text(
                        &watch::diff(&first, &s).since_start(&first, &s),
                    ));
                }
                prev = s.clone();
                last = s;
            }
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
        if ending {
            break;
        }
        next += a.interval;
        let now = Instant::now();
        if next < now {
            // Printing fell behind (a stopped terminal): skip the missed ticks.
            next = now + a.interval;
        }
    }
    // A last sample for the summary, unless one was just taken or the hops are gone.
    if failure.is_none() && prev.t_ns + 1_000_000 < linerate::time::mono_ns() {
        match w.sample() {
            Ok(s) => last = s,
            Err(e) => failure = Some(e),
        }
    }
    let sum = watch::diff(&first, &last).since_start(&first, &last);
    if a.json {
        let _ = writeln!(out, "{}", report::summary_json(&sum));
    } else {
        let _ = write!(out, "{}", report::summary_text(&sum));
    }
    let _ = out.flush();
    if let Some(m) = &metrics {
        m.set(report::prometheus_text(&sum));
    }
    match failure {
        Some(e) => Err(anyhow::Error::new(e).context("watch stopped")),
        None => Ok(ExitCode::SUCCESS),
    }
}

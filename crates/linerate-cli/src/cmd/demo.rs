//! `linerate demo`: PF_RING ZC's cluster tests 1, 2, 3 and 10 on this machine, no NIC, no root,
//! with a verdict per test: does it keep up with PF_RING's 14.88 Mpps here, and if not, what
//! limits it.
//!
//! A built-in source (64 B frames, 60 + CRC, consecutive packets of rotating flows) feeds the
//! balancer; tests 1-3 use consumer threads (pfdnacluster_multithread), test 10 uses consumer
//! processes (`linerate count -i cluster:ID@Q`, pfdnacluster_master + pfcount). Each test runs
//! paced at 10 GbE line rate (14.88 Mpps) first, then as fast as the master takes packets
//! (unpaced), then a few short paced runs search the highest rate without a drop.

use crate::common::stop_flag;
use crate::shared::{accounting_line, threads_text};
use anyhow::Context;
use clap::Parser;
use linerate::apps::balance::source::SourcePort;
use linerate::apps::balance::{self, BalanceOptions, BalanceTick, Distributor, Mode, Threads};
use linerate::cluster::{ClusterConfig, ClusterStats, Master};
use linerate::port::LinkType;
use linerate::stats::{group, group_f};
use std::io::Write;
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Flags of `linerate demo`.
#[derive(Parser, Debug)]
pub struct Args {
    /// How long each test's run at line rate and its unpaced run last.
    #[arg(short = 't', long, value_name = "SECONDS", default_value = "1", value_parser = crate::common::flags::duration(crate::common::flags::RUN))]
    duration: Duration,
    /// Number of rotating flows in the generated traffic.
    #[arg(long, default_value = "4096", value_parser = crate::common::flags::int(1u32, 1_000_000))]
    flows: u32,
    /// Run only these tests (e.g. 1,3).
    #[arg(long, value_delimiter = ',', value_parser = ["1", "2", "3", "10"])]
    only: Vec<String>,
    /// Rate of each test's first run and ceiling of the search (e.g. 14.88Mpps, 10Gbps: 64 B
    /// frames at 10 GbE line rate, PF_RING's figure, the default; 50%: of 10 GbE).
    #[arg(long, value_name = "RATE", default_value = "10Gbps", value_parser = crate::common::flags::rate)]
    rate: linerate::units::Rate,
    /// Short paced runs searching each test's highest rate without a drop (0: no search).
    #[arg(long, value_name = "N", default_value = "5", value_parser = crate::common::flags::int(0u32, 20))]
    steps: u32,
    /// How long each run of the search lasts.
    #[arg(long, value_name = "SECONDS", default_value = "250ms", value_parser = crate::common::flags::duration(crate::common::flags::RUN))]
    step_time: Duration,
    /// Print only the tables and verdicts (no header, progress or closing notes).
    #[arg(short = 'q', long, conflicts_with = "verbose")]
    quiet: bool,
    /// Print every run's per-thread blocks and accounting too.
    #[arg(short = 'v', long)]
    verbose: bool,
}

/// 10 GbE line rate in 64 B frames (84 B on the wire with preamble and gap): 14.88 Mpps.
const LINE_RATE: f64 = 10e9 / (84.0 * 8.0);

/// A test: number, title, PF_RING command, queues per application, mode, in processes.
type Spec = (u32, &'static str, &'static str, &'static [u32], Mode, bool);

const SPECS: [Spec; 4] = [
    (1, "Hash incoming packets and read them on 1 thread", "pfdnacluster_multithread -i dna0 -c 1 -n 1", &[1], Mode::Ip, false),
    (2, "Hash incoming packets and read them on 2 threads", "pfdnacluster_multithread -i dna0 -c 1 -n 2", &[2], Mode::Ip, false),
    (3, "Deliver each incoming packet to all threads (fan-out, zero copy)", "pfdnacluster_multithread -i dna0 -c 1 -n 2 -m 2", &[2], Mode::Fanout, false),
    (10, "Balance over 2 instances of one application, a full copy to another (processes)", "pfdnacluster_master -i dna0 -c 10 -n 2,1 ; pfcount -i dnacluster:10@0 ; @1 ; tcpdump -i dnacluster:10@2", &[2, 1], Mode::Ip, true),
];

/// PF_RING's published figures per test, one cell per row of our table (label, figure), and a
/// note on where they come from when not from the test itself.
fn published(
    test: u32,
) -> (
    &'static [(&'static str, &'static str)],
    Option<&'static str>,
) {
    match test {
        1 => (
            &[
                ("captured pps", "14'881'605.27"),
                ("thread 0 pps", "14'881'605.27"),
                ("processed pps", "14'881'771.26"),
                ("drops", "0 (0.0 %)"),
            ],
            None,
        ),
        2 => (
            &[
                ("captured pps", "14'881'406.51"),
                ("thread 0 pps", "7'440'559.77"),
                ("thread 1 pps", "7'440'571.77"),
                ("processed pps", "14'881'497.50"),
                ("drops", "0 (0.0 %)"),
            ],
            None,
        ),
        3 => (
            &[
                ("captured pps", "14'880'469.80"),
                ("thread 0 pps", "14'880'263.81"),
                ("thread 1 pps", "14'880'307.81"),
                ("processed pps", "29'761'006.59"),
                ("drops", "0 (0.0 %)"),
            ],
            None,
        ),
        _ => (
            &[
                ("captured pps", "14'880'912.21"),
                ("app 0 instance 0 pps", "7'440'590.93"),
                ("app 0 instance 1 pps", "7'440'223.34"),
                ("app 1 (full copy) pps", "not published"),
                ("processed pps", "14'881'092.20"),
                ("drops", "0 (0.0 %)"),
            ],
            Some(
                "PF_RING published no figures for test 10; its column holds test 4's: the same \
                 master, 2 pfcount instances, no full copy",
            ),
        ),
    }
}

struct Measured {
    secs: f64,
    stats: ClusterStats,
    per_consumer: Vec<u64>,
    text: String,
}

/// One run of a test: the rate asked of the source (None: unpaced) and what was measured.
struct Run {
    asked: Option<f64>,
    m: Measured,
}

impl Run {
    /// Packets per second the master received: the rate achieved.
    fn achieved(&self) -> f64 {
        self.m.stats.rx_packets as f64 / self.m.secs.max(1e-9)
    }

    fn drops(&self) -> u64 {
        self.m.stats.queues.iter().map(|q| q.drops()).sum()
    }

    fn lossless(&self) -> bool {
        self.m.stats.rx_packets > 0 && self.drops() == 0
    }

    /// The input rate every queue's consumer kept up with: each queue's delivered share of
    /// what it was offered, times the rate achieved; the lowest of them.
    fn capacity(&self) -> f64 {
        let share = self
            .m
            .stats
            .queues
            .iter()
            .filter(|q| q.offered() > 0)
            .map(|q| q.delivered as f64 / q.offered() as f64)
            .fold(1.0, f64::min);
        share * self.achieved()
    }

    /// Our column: achieved (captured), each consumer, processed, drops.
    fn cells(&self) -> Vec<String> {
        let secs = self.m.secs.max(1e-9);
        let mut c = vec![group_f(self.achieved(), 0)];
        c.extend(
            self.m
                .per_consumer
                .iter()
                .map(|p| group_f(*p as f64 / secs, 0)),
        );
        let processed: u64 = self.m.per_consumer.iter().sum();
        c.push(group_f(processed as f64 / secs, 0));
        c.push(drops_str(&self.m.stats));
        c
    }
}

/// A rate asked, for the verdict and the column head: `14.88 Mpps`, or `50'000 pps`.
fn rate_text(pps: f64) -> String {
    if pps >= 1e6 {
        format!("{} Mpps", group_f(pps / 1e6, 2))
    } else {
        format!("{} pps", group_f(pps, 0))
    }
}

fn drops_str(s: &ClusterStats) -> String {
    let d: u64 = s.queues.iter().map(|q| q.drops()).sum();
    let pct = if s.copies == 0 {
        0.0
    } else {
        d as f64 * 100.0 / s.copies as f64
    };
    format!("{} ({:.1} %)", group(d), pct)
}

fn run_threads(
    apps: &[u32],
    mode: Mode,
    mut src: SourcePort,
    dur: Duration,
    stop: &AtomicBool,
) -> anyhow::Result<Measured> {
    let cfg = ClusterConfig {
        apps: apps.to_vec(),
        ..Default::default()
    };
    let mut master = Master::anon(&cfg)?;
    let threads = Threads::spawn(&master, 0, None)?;
    let mut dist = Distributor::new(mode, apps, LinkType::ETHERNET);
    let opts = BalanceOptions {
        duration: Some(dur),
        interval: Duration::from_secs(3600),
        ..Default::default()
    };
    let r = balance::run(&mut src, &mut master, &mut dist, &opts, stop, |_| {});
    let fin = balance::finish(
        &mut master,
        Some(threads),
        &r.tick,
        opts.interval,
        stop,
        |_, _| {},
    );
    let secs = (r.tick.now.t_ns - r.tick.start.t_ns) as f64 / 1e9;
    let got = fin.threads.unwrap_or(Ok(Vec::new()))?;
    let stats = fin.now.stats;
    let mut t: BalanceTick = r.tick.clone();
    t.now.stats = stats.clone();
    t.now.t_ns = fin.now.t_ns;
    t.prev = t.start.clone();
    let text = threads_text(&t, &vec![(0, 0); got.len()], &got, &[]);
    Ok(Measured {
        secs,
        stats,
        per_consumer: got.iter().map(|g| g.0).collect(),
        text,
    })
}

/// Starts one `linerate count -i cluster:ID@Q` per queue and waits until each attached (at
/// most 5 s).
fn start_consumers(master: &mut Master, id: u32, nq: usize) -> anyhow::Result<Vec<Child>> {
    let exe = std::env::current_exe()?;
    let mut kids = Vec::new();
    for q in 0..nq {
        let child = Command::new(&exe)
            .args(["count", "-i", &format!("cluster:{id}@{q}"), "--json", "-q"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .context("starting a consumer process")?;
        kids.push(child);
    }
    let t0 = Instant::now();
    while master
        .stats()
        .queues
        .iter()
        .any(|q| q.consumer_pid.is_none())
    {
        if t0.elapsed() > Duration::from_secs(5) {
            for k in &mut kids {
                let _ = k.kill();
                let _ = k.wait();
            }
            anyhow::bail!("consumer processes did not attach within 5 s");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(kids)
}

/// Waits for a consumer process (at most 10 s, then kills it) and reads the packets its JSON
/// summary counted.
fn consumer_count(mut k: Child) -> anyhow::Result<u64> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while k.try_wait()?.is_none() {
        if Instant::now() > deadline {
            let _ = k.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let out = k.wait_with_output()?;
    let s = String::from_utf8_lossy(&out.stdout);
    Ok(s.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|j| j["type"] == "summary")
        .and_then(|j| j["pkts"].as_u64())
        .unwrap_or(0))
}

fn run_processes(
    apps: &[u32],
    mode: Mode,
    mut src: SourcePort,
    dur: Duration,
    stop: &AtomicBool,
) -> anyhow::Result<Measured> {
    let id = 40_000 + std::process::id() % 20_000;
    let cfg = ClusterConfig {
        apps: apps.to_vec(),
        ..Default::default()
    };
    let mut master = Master::create(id, &cfg).context("creating the demo cluster")?;
    let kids = start_consumers(&mut master, id, cfg.queues())?;
    let mut dist = Distributor::new(mode, apps, LinkType::ETHERNET);
    let opts = BalanceOptions {
        duration: Some(dur),
        interval: Duration::from_secs(3600),
        ..Default::default()
    };
    let r = balance::run(&mut src, &mut master, &mut dist, &opts, stop, |_| {});
    let secs = (r.tick.now.t_ns - r.tick.start.t_ns) as f64 / 1e9;
    let fin = balance::finish(&mut master, None, &r.tick, opts.interval, stop, |_, _| {});
    let per = kids
        .into_iter()
        .map(consumer_count)
        .collect::<anyhow::Result<Vec<u64>>>()?;
    let stats = fin.now.stats;
    let mut text = String::new();
    for (q, p) in per.iter().enumerate() {
        let qs = stats.queues[q];
        text.push_str(&format!(
            "  consumer process {q} (linerate count -i cluster:{id}@{q}, app {}): {} pkts [{} pkt/sec], queue drops {}\n",
            qs.app,
            group(*p),
            group_f(*p as f64 / secs.max(1e-9), 2),
            group(qs.drops())
        ));
    }
    Ok(Measured {
        secs,
        stats,
        per_consumer: per,
        text,
    })
}

/// One run of test `spec` at `rate` packets per second (None: unpaced) for `dur`.
fn run_once(
    spec: &Spec,
    flows: u32,
    rate: Option<f64>,
    dur: Duration,
    stop: &AtomicBool,
) -> anyhow::Result<Run> {
    let (_, _, _, apps, mode, procs) = *spec;
    let src = SourcePort::new(flows, None)?.with_rate(rate.map(linerate::units::Rate::Pps));
    let m = if procs {
        run_processes(apps, mode, src, dur, stop)?
    } else {
        run_threads(apps, mode, src, dur, stop)?
    };
    Ok(Run { asked: rate, m })
}

/// The search for the highest rate without a drop, below `ceiling` (a rate known to drop or
/// out of the master's reach), starting under `guess`: a probe that drops lowers the ceiling,
/// one that does not raises the floor; the next probe is halfway (or half the ceiling while no
/// probe was lossless). Returns the fastest lossless run, and every run.
fn search(
    spec: &Spec,
    a: &Args,
    guess: f64,
    ceiling: f64,
    stop: &AtomicBool,
) -> anyhow::Result<(Option<Run>, Vec<Run>)> {
    let (mut lo, mut hi) = (0.0f64, ceiling);
    let mut probe = (guess * 0.9).min(ceiling * 0.95).max(1000.0);
    let mut best: Option<Run> = None;
    let mut runs = Vec::new();
    for _ in 0..a.steps {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let r = run_once(spec, a.flows, Some(probe), a.step_time, stop)?;
        // A probe cut short by a stop signal is no measurement: it is not judged.
        if stop.load(Ordering::Relaxed) {
            break;
        }
        if r.lossless() {
            lo = probe;
            // A master that could not reach the asked rate cannot go faster.
            if r.achieved() < probe * 0.98 {
                hi = probe;
            }
            if best.as_ref().is_none_or(|b| r.achieved() > b.achieved()) {
                best = Some(r);
            } else {
                runs.push(r);
            }
        } else {
            hi = probe;
            runs.push(r);
        }
        if hi - lo < hi * 0.02 {
            break;
        }
        probe = if lo == 0.0 { hi * 0.5 } else { (lo + hi) / 2.0 };
    }
    Ok((best, runs))
}

/// Busy and own CPU time (clock ticks) of the machine: /proc/stat's total, busy, and this
/// process's with its waited-for children.
#[derive(Clone, Copy, Default)]
struct Cpu {
    total: u64,
    busy: u64,
    own: u64,
}

fn cpu_now() -> Cpu {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let f: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let total: u64 = f.iter().sum();
    let idle = f.get(3).copied().unwrap_or(0) + f.get(4).copied().unwrap_or(0);
    let me = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command's closing parenthesis: utime, stime, cutime, cstime are the
    // 12th to 15th.
    let own = me
        .rsplit_once(')')
        .map(|(_, r)| {
            r.split_whitespace()
                .skip(11)
                .take(4)
                .filter_map(|x| x.parse::<u64>().ok())
                .sum()
        })
        .unwrap_or(0);
    Cpu {
        total,
        busy: total.saturating_sub(idle),
        own,
    }
}

/// Cores' worth of CPU that other programs took between `a` and `b` (of the CPUs /proc/stat
/// counts: the machine's, which may be more than this process may use).
fn others_cores(a: Cpu, b: Cpu) -> f64 {
    let total = b.total.saturating_sub(a.total);
    if total == 0 {
        return 0.0;
    }
    let cpus = std::fs::read_to_string("/proc/stat")
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit))
        .count()
        .max(1);
    let others = (b.busy.saturating_sub(a.busy)).saturating_sub(b.own.saturating_sub(a.own));
    others as f64 / total as f64 * cpus as f64
}

/// A test's runs and what limited it.
struct Outcome {
    spec: Spec,
    line: Run,
    unpaced: Run,
    best: Option<Run>,
    search: Vec<Run>,
    others: f64,
    /// The run a stop signal cut short: "the run at the asked rate", "the unpaced run" or
    /// "the search".
    interrupted: Option<&'static str>,
}

/// The verdict line of a test: does it keep up with the asked rate, up to which rate it is
/// lossless, and what limits it here, computed from its busy threads against the cores, which
/// side dropped, what other programs took and the build.
fn verdict(o: &Outcome, asked: f64, cores: usize) -> String {
    let (_, _, _, apps, _, procs) = o.spec;
    let consumers: u32 = apps.iter().sum();
    let line = &o.line;
    match o.interrupted {
        Some("the search") | None => {}
        Some(cut) => {
            return format!(
                "Verdict: none: interrupted during {cut} (its figures cover only the time it ran)"
            )
        }
    }
    let cut = if o.interrupted.is_some() {
        " (interrupted: the search's run under way was not judged)"
    } else {
        ""
    };
    if line.lossless() && line.achieved() >= asked * 0.995 {
        return format!(
            "Verdict: keeps up with {}: {} pps achieved, no drop{cut}",
            rate_text(asked),
            group_f(line.achieved(), 0)
        );
    }
    let held = match &o.best {
        None if line.lossless() => format!(
            "no drop at the {} pps the master reached",
            group_f(line.achieved(), 0)
        ),
        Some(b) => format!(
            "lossless up to {} pps ({} % of it)",
            group_f(b.achieved(), 0),
            group_f(b.achieved() / asked * 100.0, 1)
        ),
        None => match o.search.iter().map(|r| r.achieved()).reduce(f64::min) {
            Some(low) => format!("drops even at {} pps", group_f(low, 0)),
            None => "no lossless rate searched (--steps 0)".to_string(),
        },
    };
    let busy = 1 + consumers as usize;
    let (them, kind) = match (consumers, procs) {
        (1, false) => ("it", "consumer thread".to_string()),
        (1, true) => ("it", "consumer process".to_string()),
        (n, false) => ("them", format!("{n} consumer threads")),
        (n, true) => ("them", format!("{n} consumer processes")),
    };
    let mut limits = vec![if busy > cores {
        format!("{cores} cores shared by the source and master (1 thread) and {kind}")
    } else if o.unpaced.drops() > 0 {
        format!("the {kind} (the master outruns {them}; {busy} busy threads on {cores} cores)")
    } else {
        format!("the master (source and distribution in 1 thread; {busy} busy threads on {cores} cores)")
    }];
    if o.others >= 0.2 {
        limits.push(format!(
            "other programs took {:.1} of the {cores} cores",
            o.others
        ));
    }
    if cfg!(debug_assertions) {
        limits.push("a debug build (unoptimised: build with --release)".to_string());
    }
    format!(
        "Verdict: does not keep up with {} here; {held}{cut}. Limit: {}",
        rate_text(asked),
        limits.join("; ")
    )
}

/// Runs test `spec`: at the asked rate, unpaced, then the search for the lossless rate.
fn run_test(spec: Spec, a: &Args, asked: f64, stop: &AtomicBool) -> anyhow::Result<Outcome> {
    let c0 = cpu_now();
    let stopped = || stop.load(Ordering::Relaxed);
    let line = run_once(&spec, a.flows, Some(asked), a.duration, stop)?;
    let mut interrupted = stopped().then_some("the run at the asked rate");
    let unpaced = run_once(&spec, a.flows, None, a.duration, stop)?;
    interrupted = interrupted.or(stopped().then_some("the unpaced run"));
    // Lossless at the asked rate, or at all the master could reach: nothing to search.
    let (best, search) = if line.lossless() || interrupted.is_some() {
        (None, Vec::new())
    } else {
        let ceiling = asked.min(line.achieved().max(unpaced.achieved()));
        let guess = line.capacity().max(unpaced.capacity());
        search(&spec, a, guess, ceiling, stop)?
    };
    let others = others_cores(c0, cpu_now());
    interrupted = interrupted.or(stopped().then_some("the search"));
    Ok(Outcome {
        spec,
        line,
        unpaced,
        best,
        search,
        others,
        interrupted,
    })
}

/// The header: the source, the rate, the runs, the machine.
fn header(a: &Args, asked: f64, cores: usize) -> String {
    format!(
        "linerate demo: PF_RING ZC's cluster tests (DNA/libzero examples) 1, 2, 3 and 10 on this machine\n\
         source: built-in, 64 B frames (60 + CRC), {} rotating flows; each test paced at {} pps for {} s,\n\
         unpaced for {} s, then up to {} runs of {} s searching the highest rate without a drop\n\
         this machine: {} cores, load average {}, {} build\n\
         PF_RING's figures: Xeon E3-1230 3.2 GHz, 82599 10 GbE, line rate 14.88 Mpps (64 B)\n",
        a.flows,
        group_f(asked, 0),
        a.duration.as_secs_f64(),
        a.duration.as_secs_f64(),
        a.steps,
        a.step_time.as_secs_f64(),
        cores,
        std::fs::read_to_string("/proc/loadavg")
            .ok()
            .and_then(|l| l.split(' ').next().map(str::to_string))
            .unwrap_or_else(|| "?".into()),
        if cfg!(debug_assertions) {
            "debug (unoptimised)"
        } else {
            "release"
        }
    )
}

/// The table of a test: PF_RING's figures, then ours at the asked rate, at the highest
/// lossless rate and unpaced, each rate measured beside the one asked; then the verdict.
fn table(o: &Outcome, asked: f64, cores: usize) -> String {
    let (test, title, pf_cmd, apps, mode, procs) = o.spec;
    let n = apps
        .iter()
        .map(|n| n.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let ours_cmd = if procs {
        format!(
            "linerate balance -i SOURCE -c ID -n {n} -m {} ; linerate count -i cluster:ID@0|1|2",
            mode.name()
        )
    } else {
        format!(
            "linerate balance --threads -i SOURCE -n {n} -m {}",
            mode.name()
        )
    };
    let mut s =
        format!("=== Test {test}. {title}\n    PF_RING:  {pf_cmd}\n    linerate: {ours_cmd}\n");
    let (pf, note) = published(test);
    let paced = if (asked - LINE_RATE).abs() < 1.0 {
        "paced at line rate".to_string()
    } else {
        format!("paced at {}", rate_text(asked))
    };
    s.push_str(&format!(
        "    {:<21} {:>20} {paced:>20} {:>20} {:>20}\n",
        "", "PF_RING (10 GbE)", "highest lossless", "unpaced maximum"
    ));
    let asked_cell = |r: Option<&Run>| match r {
        Some(Run { asked: Some(p), .. }) => group_f(*p, 0),
        Some(_) => "as fast as taken".to_string(),
        None => "-".to_string(),
    };
    let line_cells = o.line.cells();
    // Lossless at the asked rate (or all the master reached): that run is the fastest lossless.
    let best = o.best.as_ref().or(o.line.lossless().then_some(&o.line));
    let best_cells = best.map(Run::cells);
    let unpaced_cells = o.unpaced.cells();
    s.push_str(&format!(
        "    {:<21} {:>20} {:>20} {:>20} {:>20}\n",
        "asked pps",
        "line rate",
        asked_cell(Some(&o.line)),
        asked_cell(best),
        asked_cell(Some(&o.unpaced))
    ));
    for (i, (label, figure)) in pf.iter().enumerate() {
        let best = best_cells
            .as_ref()
            .and_then(|c| c.get(i).cloned())
            .unwrap_or_else(|| "-".into());
        s.push_str(&format!(
            "    {label:<21} {figure:>20} {:>20} {best:>20} {:>20}\n",
            line_cells.get(i).map_or("-", String::as_str),
            unpaced_cells.get(i).map_or("-", String::as_str),
        ));
    }
    if let Some(note) = note {
        s.push_str(&format!("    ({note})\n"));
    }
    s.push_str(&format!(
        "    {} (first run)\n",
        accounting_line(&o.line.m.stats)
    ));
    s.push_str(&format!("    {}\n", verdict(o, asked, cores)));
    s
}

/// What a run was asked and achieved, over how long.
fn run_title(r: &Run) -> String {
    match r.asked {
        Some(p) => format!(
            "  run paced at {} pps: achieved {} pps over {:.3} s\n",
            group_f(p, 0),
            group_f(r.achieved(), 0),
            r.m.secs
        ),
        None => format!(
            "  run unpaced: achieved {} pps over {:.3} s\n",
            group_f(r.achieved(), 0),
            r.m.secs
        ),
    }
}

/// Every run's per-thread blocks and accounting (`-v`).
fn verbose_text(o: &Outcome) -> String {
    let mut s = String::new();
    let runs = [&o.line, &o.unpaced]
        .into_iter()
        .chain(o.best.iter())
        .chain(o.search.iter());
    for r in runs {
        s.push_str(&run_title(r));
        s.push_str(&r.m.text);
        s.push_str(&format!("  {}\n", accounting_line(&r.m.stats)));
    }
    s
}

/// Runs `linerate demo`.
pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    let stop = stop_flag()?;
    let want = |t: u32| a.only.is_empty() || a.only.iter().any(|o| *o == t.to_string());
    let mut out = std::io::stdout();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let asked = SourcePort::pps_of(a.rate);
    if !a.quiet {
        let _ = writeln!(out, "{}", header(&a, asked, cores));
    }
    let mut outcomes = Vec::new();
    for spec in SPECS {
        if !want(spec.0) {
            continue;
        }
        if !a.quiet {
            let _ = writeln!(out, "Test {}. {} ... running", spec.0, spec.1);
            let _ = out.flush();
        }
        let o = run_test(spec, &a, asked, &stop)?;
        if a.verbose {
            let _ = out.write_all(verbose_text(&o).as_bytes());
        } else if spec.5 && !a.quiet {
            let _ = out.write_all(run_title(&o.line).as_bytes());
            let _ = out.write_all(o.line.m.text.as_bytes());
        }
        outcomes.push(o);
        if stop.load(Ordering::Relaxed) {
            break;
        }
    }
    if !a.quiet {
        let _ = writeln!(out);
    }
    for o in &outcomes {
        let _ = out.write_all(table(o, asked, cores).as_bytes());
    }
    if !a.quiet {
        let _ = writeln!(
            out,
            "\nFigures are packets per second over each whole run; \"asked\" is the rate the source was\n\
             paced at, the others are measured. Drops are queue drops (ring full) when consumers fall\n\
             behind the master, never a stall of the master. PF_RING's are bounded by its 10 GbE line;\n\
             ours by the CPU of this machine, shared by the source, the master and the consumers."
        );
    }
    // As rfc2544's: a run cut short by a stop signal is no result.
    if stop.load(Ordering::Relaxed) {
        let _ = out.flush();
        eprintln!("linerate demo: interrupted before the end: the results are incomplete");
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

//! `linerate demo`: PF_RING ZC's cluster tests 1, 2, 3 and 10 on this machine, no NIC, no root.
//!
//! A built-in source (64 B frames, 60 + CRC, consecutive packets of rotating flows)
//! feeds the balancer as fast as it can take packets; tests 1-3 use consumer threads
//! (pfdnacluster_multithread), test 10 uses consumer processes (`linerate count -i
//! cluster:ID@Q`, pfdnacluster_master + pfcount).

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
use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

/// Flags of `linerate demo`.
#[derive(Parser, Debug)]
pub struct Args {
    /// How long each test runs.
    #[arg(short = 't', long, value_name = "SECONDS", default_value = "2", value_parser = crate::common::flags::duration(crate::common::flags::RUN))]
    duration: Duration,
    /// Number of rotating flows in the generated traffic.
    #[arg(long, default_value = "4096", value_parser = crate::common::flags::int(1u32, 1_000_000))]
    flows: u32,
    /// Run only these tests (e.g. 1,3).
    #[arg(long, value_delimiter = ',', value_parser = ["1", "2", "3", "10"])]
    only: Vec<String>,
    /// Pace the source (e.g. 14.88Mpps or 10Gbps: 64 B frames at 10 GbE line rate); default:
    /// as fast as the master takes packets.
    #[arg(long, value_name = "RATE", value_parser = crate::common::flags::rate)]
    rate: Option<linerate::units::Rate>,
    /// Print every test's full per-thread blocks too.
    #[arg(short = 'v', long)]
    verbose: bool,
}

/// A test: number, title, PF_RING command, queues per application, mode, in processes.
type Spec = (u32, &'static str, &'static str, &'static [u32], Mode, bool);

/// One test: what PF_RING ran and measured, and what we ran and measured.
struct Row {
    test: u32,
    title: &'static str,
    pf_cmd: &'static str,
    ours_cmd: String,
    /// (label, PF_RING figure, our figure)
    lines: Vec<(String, String, String)>,
    accounting: String,
}

struct Measured {
    secs: f64,
    stats: ClusterStats,
    per_consumer: Vec<u64>,
    text: String,
}

fn pps(n: u64, secs: f64) -> String {
    group_f(n as f64 / secs.max(1e-9), 2)
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
    let secs = (fin.now.t_ns - r.tick.start.t_ns) as f64 / 1e9;
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
    let exe = std::env::current_exe()?;
    let nq = cfg.queues();
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
    // Wait until every consumer attached (at most 5 s).
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
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut dist = Distributor::new(mode, apps, LinkType::ETHERNET);
    let opts = BalanceOptions {
        duration: Some(dur),
        interval: Duration::from_secs(3600),
        ..Default::default()
    };
    let r = balance::run(&mut src, &mut master, &mut dist, &opts, stop, |_| {});
    let secs = (r.tick.now.t_ns - r.tick.start.t_ns) as f64 / 1e9;
    let fin = balance::finish(&mut master, None, &r.tick, opts.interval, stop, |_, _| {});
    let mut per = Vec::new();
    for mut k in kids {
        let deadline = Instant::now() + Duration::from_secs(10);
        while k.try_wait()?.is_none() {
            if Instant::now() > deadline {
                let _ = k.kill();
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let out = k.wait_with_output()?;
        let s = String::from_utf8_lossy(&out.stdout);
        let pkts = s
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|j| j["type"] == "summary")
            .and_then(|j| j["pkts"].as_u64())
            .unwrap_or(0);
        per.push(pkts);
    }
    let stats = fin.now.stats;
    let mut text = String::new();
    for (q, p) in per.iter().enumerate() {
        let qs = stats.queues[q];
        text.push_str(&format!(
            "  consumer process {q} (linerate count -i cluster:{id}@{q}, app {}): {} pkts [{} pkt/sec], queue drops {}\n",
            qs.app,
            group(*p),
            pps(*p, secs),
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

fn drops_str(s: &ClusterStats) -> String {
    let d: u64 = s.queues.iter().map(|q| q.drops()).sum();
    let pct = if s.copies == 0 {
        0.0
    } else {
        d as f64 * 100.0 / s.copies as f64
    };
    format!("{} ({:.1} %)", group(d), pct)
}

fn source(a: &Args) -> anyhow::Result<SourcePort> {
    Ok(SourcePort::new(a.flows, None)?.with_rate(a.rate))
}

/// Runs `linerate demo`.
pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    let stop = stop_flag()?;
    let want = |t: u32| a.only.is_empty() || a.only.iter().any(|o| *o == t.to_string());
    let mut out = std::io::stdout();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let _ = writeln!(
        out,
        "linerate demo: PF_RING ZC's cluster tests (DNA/libzero examples) 1, 2, 3 and 10 on this machine\n\
         source: built-in, 64 B frames (60 + CRC), {} rotating flows, {}; {} s per test; {} cores, load average {}\n\
         PF_RING's figures: Xeon E3-1230 3.2 GHz, 82599 10 GbE, line rate 14.88 Mpps (64 B)\n",
        a.flows,
        match a.rate {
            None => "as fast as the balancer takes them".to_string(),
            Some(linerate::units::Rate::Pps(p)) => format!("paced at {} pps", group_f(p, 0)),
            Some(linerate::units::Rate::Bps(b)) => format!("paced at {} bit/s", group_f(b, 0)),
            Some(linerate::units::Rate::Percent(x)) => format!("paced at {x} % of 10 GbE"),
        },
        a.duration.as_secs_f64(),
        cores,
        std::fs::read_to_string("/proc/loadavg")
            .ok()
            .and_then(|l| l.split(' ').next().map(str::to_string))
            .unwrap_or_else(|| "?".into())
    );
    let mut rows = Vec::new();
    let specs: [Spec; 4] = [
        (1, "Hash incoming packets and read them on 1 thread", "pfdnacluster_multithread -i dna0 -c 1 -n 1", &[1], Mode::Ip, false),
        (2, "Hash incoming packets and read them on 2 threads", "pfdnacluster_multithread -i dna0 -c 1 -n 2", &[2], Mode::Ip, false),
        (3, "Deliver each incoming packet to all threads (fan-out, zero copy)", "pfdnacluster_multithread -i dna0 -c 1 -n 2 -m 2", &[2], Mode::Fanout, false),
        (10, "Balance over 2 instances of one application, a full copy to another (processes)", "pfdnacluster_master -i dna0 -c 10 -n 2,1 ; pfcount -i dnacluster:10@0 ; @1 ; tcpdump -i dnacluster:10@2", &[2, 1], Mode::Ip, true),
    ];
    let published: [(u32, &[(&str, &str)]); 4] = [
        (
            1,
            &[
                ("captured pps", "14'881'605.27"),
                ("thread 0 pps", "14'881'605.27"),
                ("processed pps", "14'881'771.26"),
                ("drops", "0 (0.0 %)"),
            ],
        ),
        (
            2,
            &[
                ("captured pps", "14'881'406.51"),
                ("thread 0 pps", "7'440'559.77"),
                ("thread 1 pps", "7'440'571.77"),
                ("processed pps", "14'881'497.50"),
                ("drops", "0 (0.0 %)"),
            ],
        ),
        (
            3,
            &[
                ("captured pps", "14'880'469.80"),
                ("thread 0 pps", "14'880'263.81"),
                ("thread 1 pps", "14'880'307.81"),
                ("processed pps", "29'761'006.59"),
                ("drops", "0 (0.0 %)"),
            ],
        ),
        (
            10,
            &[
                ("captured pps", "(line rate)"),
                ("app 0 instance 0 pps", "(not given;"),
                ("app 0 instance 1 pps", " test 4: 7'440'590"),
                ("app 1 (full copy) pps", " per instance)"),
                ("processed pps", "-"),
                ("drops", "-"),
            ],
        ),
    ];
    for (test, title, pf_cmd, apps, mode, procs) in specs {
        if !want(test) {
            continue;
        }
        let _ = writeln!(out, "Test {test}. {title} ... running");
        let _ = out.flush();
        let m = if procs {
            run_processes(apps, mode, source(&a)?, a.duration, &stop)?
        } else {
            run_threads(apps, mode, source(&a)?, a.duration, &stop)?
        };
        if a.verbose || test == 10 {
            let _ = out.write_all(m.text.as_bytes());
        }
        let s = &m.stats;
        let mut ours: Vec<String> = vec![pps(s.rx_packets, m.secs)];
        ours.extend(m.per_consumer.iter().map(|p| pps(*p, m.secs)));
        ours.push(pps(m.per_consumer.iter().sum(), m.secs));
        ours.push(drops_str(s));
        let published_lines = published
            .iter()
            .find(|(t, _)| *t == test)
            .map(|(_, l)| *l)
            .unwrap_or(&[]);
        let lines = published_lines
            .iter()
            .zip(ours)
            .map(|((l, f), o)| (l.to_string(), f.to_string(), o))
            .collect();
        let n = apps
            .iter()
            .map(|n| n.to_string())
            .collect::<Vec<_>>()
            .join(",");
        let ours_cmd = if procs {
            format!("linerate balance -i SOURCE -c ID -n {n} -m {} ; linerate count -i cluster:ID@0|1|2", mode.name())
        } else {
            format!(
                "linerate balance --threads -i SOURCE -n {n} -m {}",
                mode.name()
            )
        };
        rows.push(Row {
            test,
            title,
            pf_cmd,
            ours_cmd,
            lines,
            accounting: accounting_line(s),
        });
        if stop.load(std::sync::atomic::Ordering::Relaxed) {
            break;
        }
    }
    let _ = writeln!(out);
    for r in &rows {
        let _ = writeln!(out, "=== Test {}. {}", r.test, r.title);
        let _ = writeln!(out, "    PF_RING:  {}", r.pf_cmd);
        let _ = writeln!(out, "    linerate: {}", r.ours_cmd);
        let _ = writeln!(
            out,
            "    {:<24} {:>22} {:>22}",
            "", "PF_RING (10 GbE)", "linerate, this machine"
        );
        for (l, f, o) in &r.lines {
            let _ = writeln!(out, "    {l:<24} {f:>22} {o:>22}");
        }
        let _ = writeln!(out, "    {}", r.accounting);
    }
    let _ = writeln!(
        out,
        "\nFigures are packets per second over each whole test; drops are queue drops (ring full) when\n\
         consumers fall behind the master, never a stall of the master. PF_RING's are bounded by its\n\
         10 GbE line (14.88 Mpps); ours by the CPU of this machine, shared by the source, the master\n\
         and the consumers."
    );
    Ok(ExitCode::SUCCESS)
}

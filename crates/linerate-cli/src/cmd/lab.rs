//! `linerate lab`: the DPDK l2fwd lab's set-up (pktgen on one VM, l2fwd on another) or pfdnabounce, on
//! network namespaces of this machine, in one command.
//!
//! The lab creates two namespaces (`lr-lab-PID-gen`, `lr-lab-PID-fwd`) and veth pairs, runs a
//! generator and a receiver in the first and the forwarder in the second (threads that entered
//! the namespaces), prints what the lab's report shows, and deletes everything: on return, on
//! error, on the first SIGINT/SIGTERM (the run stops, then cleans up), on a second one (the
//! signal thread cleans up and exits), and at the next start for namespaces of a lab whose
//! process is gone (SIGKILL).
//!
//! The generator is `linerate gen`'s worker (`apps::gen`): 64-byte UDP frames (60 bytes + CRC)
//! at full speed (or `--rate`) through the afpacket (or xdp) transmit path, bounded by `-c` and
//! `-t`, each with gen's probe signature; the receiver runs gen's latency tracker, so the report
//! has one-way latency percentiles through the forwarder (send stamp and the receiver port's
//! per-packet kernel receive time, both CLOCK_REALTIME; the l2fwd receiver is an xdp port, the
//! bounce receiver afpacket with a 1 ms block timeout), duplicates and reordering.

use crate::common::flags;
use clap::{Parser, ValueEnum};
use linerate::apps::fwd::{self, FwdOptions, FwdStats, MacRewrite, Ports};
use linerate::apps::gen::latency::Tracker;
use linerate::apps::lab::{self, Topology, FWD_MAC, GEN_MAC};
use linerate::os::{enter_netns, iface_mac};
use linerate::port::xdp::{AttachMode, XdpConfig, XdpMode};
use linerate::port::{Port, PortOptions};
use linerate::stats::{group, group_f};
use std::process::{Command, ExitCode};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Which experiment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Kind {
    /// The DPDK l2fwd lab: generator → forwarder port 0 → forwarder port 1 → back to the generator.
    L2fwd,
    /// pfdnabounce: the forwarder sends every packet back out of the port it came in on.
    Bounce,
    /// pfdnacluster: the cluster master (`linerate balance`) in the second namespace reads f0 and
    /// distributes round-robin to `--queues` consumer threads.
    Cluster,
}

/// Port kind for the forwarder or the generator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PortKind {
    /// AF_XDP.
    Xdp,
    /// AF_PACKET.
    Afpacket,
}

impl PortKind {
    fn uri(self, iface: &str) -> String {
        match self {
            PortKind::Xdp => format!("xdp:{iface}"),
            PortKind::Afpacket => format!("afpacket:{iface}"),
        }
    }
}

/// Flags of `linerate lab`.
#[derive(Parser, Debug)]
pub struct Args {
    /// The experiment.
    #[arg(value_enum, default_value = "l2fwd")]
    kind: Kind,
    /// How long the generator sends.
    #[arg(short = 't', long, value_name = "SECONDS", default_value = "5", value_parser = flags::duration(flags::RUN))]
    duration: Duration,
    /// Stop the generator after this many packets.
    #[arg(short = 'c', long, value_name = "COUNT", value_parser = flags::count(1, flags::MAX_PACKETS))]
    count: Option<u64>,
    /// Generator rate in packets per second (default: as fast as it can).
    #[arg(short = 'r', long, value_name = "PPS", value_parser = flags::count(1, flags::MAX_PPS as u64))]
    rate: Option<u64>,
    /// The forwarder's ports.
    #[arg(long, value_enum, default_value = "xdp")]
    fwd_port: PortKind,
    /// The generator's and receiver's ports.
    #[arg(long, value_enum, default_value = "afpacket")]
    gen_port: PortKind,
    /// AF_XDP socket mode of xdp ports.
    #[arg(long, value_name = "copy|zerocopy|auto", default_value = "auto")]
    xdp_mode: XdpMode,
    /// Forwarder core (the generator takes another one if there is one).
    #[arg(short = 'g', long, value_name = "CORE", value_parser = flags::int(0, flags::MAX_CORE))]
    core: Option<usize>,
    /// Consumer threads of `lab cluster`.
    #[arg(long, value_name = "N", default_value = "2", value_parser = flags::int(1u32, 64))]
    queues: u32,
    /// Print the result as one JSON object.
    #[arg(long)]
    json: bool,
}

/// The cluster master child process, for the signal thread (0: none).
static CHILD: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// `lab cluster`: generator on g0, `linerate balance -i PORT:f0 --threads` in the second
/// namespace (a child process of this binary), round-robin over `--queues` consumer threads.
fn run_cluster(a: &Args, gns: &str, fns: &str, stop: &AtomicBool) -> anyhow::Result<ExitCode> {
    let exe = std::env::current_exe()?;
    let id = 1000 + std::process::id() % 50_000;
    let port = a.fwd_port.uri("f0");
    let mut child = Command::new("ip")
        .args(["netns", "exec", fns])
        .arg(&exe)
        .args(["balance", "-i", &port, "-c", &id.to_string()])
        .args([
            "-n",
            &a.queues.to_string(),
            "-m",
            "round-robin",
            "--threads",
            "--json",
        ])
        .args(["--interval", "3600"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| anyhow::anyhow!("cannot start the cluster master: {e}"))?;
    CHILD.store(child.id(), Ordering::Relaxed);
    // Ready when the master's XDP program is on f0 (xdp) or after a moment (afpacket).
    let t0 = Instant::now();
    loop {
        if let Some(st) = child.try_wait()? {
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                use std::io::Read;
                let _ = e.read_to_string(&mut err);
            }
            CHILD.store(0, Ordering::Relaxed);
            anyhow::bail!("the cluster master exited ({st}): {}", err.trim());
        }
        let attached = a.fwd_port == PortKind::Afpacket
            || Command::new("ip")
                .args(["-n", fns, "link", "show", "dev", "f0"])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).contains("xdp"))
                .unwrap_or(false);
        if (attached && t0.elapsed() > Duration::from_millis(300))
            || t0.elapsed() > Duration::from_secs(5)
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let popts = PortOptions::default();
    let xdp = XdpConfig {
        mode: a.xdp_mode,
        ..Default::default()
    };
    let t_start = Instant::now();
    let sent = generate_in(a, gns, None, &popts, &xdp, stop);
    let secs = t_start.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_millis(300));
    // Our own child (ip netns exec runs the master in its place): it stops cleanly on SIGINT.
    let _ = linerate::os::interrupt(child.id());
    let deadline = Instant::now() + Duration::from_secs(10);
    while child.try_wait()?.is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    if child.try_wait()?.is_none() {
        let _ = child.kill();
    }
    let out = child.wait_with_output()?;
    CHILD.store(0, Ordering::Relaxed);
    let sent = sent?;
    let text = String::from_utf8_lossy(&out.stdout);
    let summary: serde_json::Value = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|j| j["type"] == "summary")
        .ok_or_else(|| {
            anyhow::anyhow!(
                "the cluster master gave no summary: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )
        })?;
    let n = |v: &serde_json::Value| v.as_u64().unwrap_or(0);
    let rx = n(&summary["rx"]);
    let queues: Vec<(u64, u64)> = summary["queues"]
        .as_array()
        .map(|qs| {
            qs.iter()
                .map(|q| {
                    let d = &q["drops"];
                    (
                        n(&q["delivered"]),
                        n(&d["ring_full"])
                            + n(&d["consumer_gone"])
                            + n(&d["no_frame"])
                            + n(&d["too_big"])
                            + n(&d["unread"]),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let delivered: u64 = queues.iter().map(|q| q.0).sum();
    let qdrops: u64 = queues.iter().map(|q| q.1).sum();
    let lost = sent.saturating_sub(delivered);
    let interrupted = stop.load(Ordering::Relaxed);
    if a.json {
        let j = serde_json::json!({
            "lab": "cluster",
            "seconds": secs,
            "frame_bytes": 64,
            "generator": {"sent": sent},
            "cluster": {"received": rx, "delivered": delivered, "dropped": qdrops,
                        "queues": queues.iter().map(|q| serde_json::json!({"delivered": q.0, "dropped": q.1})).collect::<Vec<_>>()},
            "lost": lost,
            "loss_rate": if sent == 0 { 0.0 } else { lost as f64 / sent as f64 },
            "lost_before_cluster": sent.saturating_sub(rx),
            "interrupted": interrupted,
        });
        println!("{j}");
        return Ok(ExitCode::SUCCESS);
    }
    let pps = |x: u64| group_f(x as f64 / secs.max(1e-9), 0);
    println!("linerate lab cluster: namespaces {gns} (generator) and {fns} (cluster)");
    println!(
        "  cluster: linerate balance -i {port} -n {} -m round-robin --threads (cluster {id})",
        a.queues
    );
    println!("  generator: {}, 64-byte UDP frames", a.gen_port.uri("g0"));
    println!(
        "Lab report ({secs:.2} s{})",
        if interrupted { ", interrupted" } else { "" }
    );
    println!(
        "  generator sent:        {:>15} packets ({} pps)",
        group(sent),
        pps(sent)
    );
    println!("  cluster received:      {:>15} packets", group(rx));
    for (q, (d, x)) in queues.iter().enumerate() {
        println!(
            "  queue {q}: delivered {:>15}, dropped {}",
            group(*d),
            group(*x)
        );
    }
    println!(
        "  loss: {} of {} ({:.4} %): {} on the way to the cluster, {} in it",
        group(lost),
        group(sent),
        if sent == 0 {
            0.0
        } else {
            lost as f64 * 100.0 / sent as f64
        },
        group(sent.saturating_sub(rx)),
        group(rx.saturating_sub(delivered))
    );
    println!("  latency: not measured for a cluster (consumers do not send back)");
    Ok(ExitCode::SUCCESS)
}

/// Runs `linerate lab`.
pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    if !linerate::os::is_root() {
        anyhow::bail!(
            "linerate lab needs root: it creates network namespaces and veth pairs and attaches \
             XDP programs (run: sudo linerate lab {})",
            format!("{:?}", a.kind).to_lowercase()
        );
    }
    let stop = Arc::new(AtomicBool::new(false));
    let signals = Arc::new(AtomicU64::new(0));
    {
        // The stop signals of every tool (SIGHUP too: a closed terminal ends the lab and
        // removes its namespaces, unless it was started under nohup).
        let mut sigs = signal_hook::iterator::Signals::new(crate::common::stop_signals())?;
        let stop = stop.clone();
        let signals = signals.clone();
        std::thread::spawn(move || {
            for _ in sigs.forever() {
                stop.store(true, Ordering::Relaxed);
                if signals.fetch_add(1, Ordering::Relaxed) >= 1 {
                    // Second signal: clean up from here and leave.
                    let child = CHILD.load(Ordering::Relaxed);
                    if child != 0 {
                        let _ = linerate::os::kill(child);
                    }
                    Topology::remove_own();
                    eprintln!("linerate lab: interrupted twice; namespaces removed");
                    std::process::exit(130);
                }
            }
        });
    }
    let stale = lab::remove_stale();
    if !stale.is_empty() {
        eprintln!(
            "linerate lab: removed namespaces of an earlier lab that did not end cleanly: {}",
            stale.join(", ")
        );
    }
    let pairs = if a.kind == Kind::L2fwd { 2 } else { 1 };
    let topo = Topology::create(pairs)?;
    let (gns, fns) = (topo.gen_ns().to_string(), topo.fwd_ns().to_string());
    let r = if a.kind == Kind::Cluster {
        run_cluster(&a, &gns, &fns, &stop)
    } else {
        run_lab(&a, &gns, &fns, &stop)
    };
    let leftover = topo.remove();
    if leftover > 0 {
        eprintln!("linerate lab: warning: {leftover} namespace(s) could not be removed");
    }
    r
}

/// The lab's generator: a thread in namespace `gns` (pinned to `core`) sending on g0 through
/// `a.gen_port` until the count, the duration or `stop`; returns how many it sent.
fn generate_in(
    a: &Args,
    gns: &str,
    core: Option<usize>,
    popts: &PortOptions,
    xdp: &XdpConfig,
    stop: &AtomicBool,
) -> anyhow::Result<u64> {
    std::thread::scope(|s| {
        s.spawn(|| -> anyhow::Result<u64> {
            enter_netns(gns)?;
            lab::pin_quiet(core);
            let mut port = crate::shared::open_port("-o", &a.gen_port.uri("g0"), popts, xdp)?;
            Ok(lab::generate(
                port.as_mut(),
                FWD_MAC,
                GEN_MAC,
                a.count,
                a.duration,
                a.rate,
                stop,
            )?)
        })
        .join()
        .unwrap_or_else(|_| Err(anyhow::anyhow!("generator panicked")))
    })
}

/// The forwarder's ports and rewrite.
type FwdSetup = (Box<dyn Port>, Option<Box<dyn Port>>, MacRewrite, bool);

struct Outcome {
    sent: u64,
    received: u64,
    fwd: FwdStats,
    fwd_desc: String,
    lat: Option<[f64; 5]>,
    lat_n: usize,
    /// Where the receive times come from.
    lat_time: &'static str,
    dups: u64,
    reordered: u64,
    secs: f64,
}

fn run_lab(a: &Args, gns: &str, fns: &str, stop: &AtomicBool) -> anyhow::Result<ExitCode> {
    let l2fwd = a.kind == Kind::L2fwd;
    let (fwd_core, gen_core) = lab::cores(a.core);
    let popts = PortOptions::default();
    let xdp = XdpConfig {
        mode: a.xdp_mode,
        attach: AttachMode::Auto,
        ..Default::default()
    };
    let fwd_stop = AtomicBool::new(false);
    let rx_stop = AtomicBool::new(false);
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<anyhow::Result<String>>();
    let t_start = Instant::now();
    let outcome = std::thread::scope(|s| -> anyhow::Result<Outcome> {
        // The forwarder.
        let ready = ready_tx.clone();
        let (fwd_stop, popts, xdp) = (&fwd_stop, &popts, &xdp);
        let fwd_h = s.spawn(move || -> anyhow::Result<FwdStats> {
            let setup = || -> anyhow::Result<FwdSetup> {
                enter_netns(fns)?;
                lab::pin_quiet(Some(fwd_core));
                let (p0, p1, shared) = if l2fwd {
                    let (p0, p1, shared) = crate::shared::open_pair(
                        &a.fwd_port.uri("f0"),
                        &a.fwd_port.uri("f1"),
                        popts,
                        xdp,
                    )?;
                    (p0, Some(p1), shared)
                } else {
                    let p0 = crate::shared::open_port("-i", &a.fwd_port.uri("f0"), popts, xdp)?;
                    (p0, None, false)
                };
                // l2fwd's rewrite: src = the output port's MAC, dst = 02:00:00:00:00:TX_PORT.
                // The generator's receiver captures in promiscuous mode; its stack drops these
                // frames early (not its MAC), as a NIC without the address would.
                let f0 = iface_mac("f0")?;
                let f1 = if l2fwd { iface_mac("f1")? } else { f0 };
                let mac = MacRewrite::L2fwd {
                    port_macs: [f0, f1],
                };
                Ok((p0, p1, mac, shared))
            };
            let (mut p0, mut p1, mac, shared) = match setup() {
                Ok(x) => x,
                Err(e) => {
                    let msg = format!("{e:#}");
                    let _ = ready.send(Err(e));
                    anyhow::bail!("forwarder: {msg}");
                }
            };
            let _ = ready.send(Ok(format!(
                "{} -> {}{}",
                p0.name(),
                p1.as_ref()
                    .map_or("itself (bounce)".to_string(), |p| p.name().to_string()),
                if shared {
                    " (one shared UMEM: no copy)"
                } else {
                    ""
                }
            )));
            let opts = FwdOptions {
                mac,
                interval: Duration::from_secs(3600),
                ..Default::default()
            };
            let ports = match p1.as_mut() {
                Some(p1) => Ports::Two(p0.as_mut(), p1.as_mut()),
                None => Ports::One(p0.as_mut()),
            };
            let r = fwd::run(ports, &opts, fwd_stop, |_| {});
            if let Some(e) = r.error {
                return Err(anyhow::Error::new(e).context("forwarder"));
            }
            Ok(r.stats)
        });
        // The receiver (on g1 for l2fwd, g0 for bounce).
        let ready = ready_tx.clone();
        let rx_if = if l2fwd { "g1" } else { "g0" };
        let rx_stop = &rx_stop;
        let rx_h = s.spawn(move || -> anyhow::Result<(u64, Tracker, &'static str)> {
            let port = enter_netns(gns)
                .map_err(anyhow::Error::from)
                .and_then(|()| {
                    // l2fwd: an xdp receiver on g1 hands packets over at once. Bounce: g0 also
                    // sends, so afpacket, with a 1 ms block timeout to bound its delay.
                    if l2fwd {
                        crate::shared::open_port("-i", &PortKind::Xdp.uri(rx_if), popts, xdp)
                    } else {
                        let o = PortOptions {
                            block_timeout_ms: 1,
                            ..popts.clone()
                        };
                        crate::shared::open_port("-i", &PortKind::Afpacket.uri(rx_if), &o, xdp)
                    }
                });
            let mut port = match port {
                Ok(p) => p,
                Err(e) => {
                    let msg = format!("{e:#}");
                    let _ = ready.send(Err(e));
                    anyhow::bail!("receiver: {msg}");
                }
            };
            let _ = ready.send(Ok(String::new()));
            let (got, lat) = lab::receive(port.as_mut(), rx_stop)?;
            Ok((got, lat, port.rx_time().describe()))
        });
        drop(ready_tx);
        let mut fwd_desc = String::new();
        let mut setup_err = None;
        for _ in 0..2 {
            match ready_rx.recv() {
                Ok(Ok(d)) if !d.is_empty() => fwd_desc = d,
                Ok(Ok(_)) => {}
                Ok(Err(e)) => setup_err = Some(e),
                Err(_) => break,
            }
        }
        let gen_res = if setup_err.is_none() {
            generate_in(a, gns, gen_core, popts, xdp, stop)
        } else {
            Ok(0)
        };
        let secs = t_start.elapsed().as_secs_f64();
        // Let what is in flight arrive, then stop the receiver and the forwarder.
        rx_stop.store(true, Ordering::Relaxed);
        let rx = rx_h
            .join()
            .unwrap_or_else(|_| Err(anyhow::anyhow!("receiver panicked")));
        fwd_stop.store(true, Ordering::Relaxed);
        let fwd_r = fwd_h
            .join()
            .unwrap_or_else(|_| Err(anyhow::anyhow!("forwarder panicked")));
        if let Some(e) = setup_err {
            return Err(e);
        }
        let sent = gen_res?;
        let (received, lat, lat_time) = rx?;
        let fwd = fwd_r?;
        let st = lat.stream(0);
        let lat_n = st.map_or(0, |s| s.hist.len() as usize);
        let pct = st.filter(|_| lat_n > 0).map(|s| {
            let x = s.summary();
            [x.p50, x.p90, x.p99, x.p999, x.max].map(|v| v as f64 / 1e3)
        });
        Ok(Outcome {
            sent,
            received,
            fwd,
            fwd_desc,
            lat: pct,
            lat_n,
            lat_time,
            dups: st.map_or(0, |s| s.dups),
            reordered: st.map_or(0, |s| s.reordered),
            secs,
        })
    })?;
    print(a, gns, fns, &outcome, stop.load(Ordering::Relaxed));
    Ok(ExitCode::SUCCESS)
}

fn print(a: &Args, gns: &str, fns: &str, o: &Outcome, interrupted: bool) {
    let t = o.fwd.total();
    let fwd_rx = o.fwd.ports[0].received;
    let forwarded = t.sent;
    let fwd_drop = t.dropped;
    let lost = o.sent.saturating_sub(o.received);
    let loss = if o.sent == 0 {
        0.0
    } else {
        lost as f64 * 100.0 / o.sent as f64
    };
    // On the way in (veth, the forwarder's socket ring), in the forwarder (not sent), on the
    // way back.
    let before = o.sent.saturating_sub(fwd_rx);
    let inside = fwd_rx.saturating_sub(forwarded + t.filtered);
    let after = forwarded.saturating_sub(o.received);
    if a.json {
        let j = serde_json::json!({
            "lab": format!("{:?}", a.kind).to_lowercase(),
            "seconds": o.secs,
            "frame_bytes": 64,
            "generator": {"sent": o.sent, "received": o.received},
            "forwarder": {"received": fwd_rx, "forwarded": forwarded, "dropped": fwd_drop,
                          "ports": o.fwd.ports[..o.fwd.nports].iter().map(|p| serde_json::json!({
                              "sent": p.sent, "received": p.received, "dropped": p.dropped}))
                              .collect::<Vec<_>>()},
            "lost": lost,
            "loss_rate": if o.sent == 0 { 0.0 } else { lost as f64 / o.sent as f64 },
            "lost_before_forwarder": before,
            "lost_in_forwarder": inside,
            "lost_after_forwarder": after,
            "latency_us": o.lat.map(|l| serde_json::json!({
                "p50": l[0], "p90": l[1], "p99": l[2], "p99_9": l[3], "max": l[4],
                "samples": o.lat_n, "receive_time": o.lat_time})),
            "duplicates": o.dups,
            "reordered": o.reordered,
            "interrupted": interrupted,
        });
        println!("{j}");
        return;
    }
    let kind = format!("{:?}", a.kind).to_lowercase();
    println!("linerate lab {kind}: namespaces {gns} (generator) and {fns} (forwarder)");
    println!("  forwarder: {}", o.fwd_desc);
    println!(
        "  generator: {}, 64-byte UDP frames{}; MAC rewrite as l2fwd (dst 02:00:00:00:00:TX_PORT)",
        a.gen_port.uri("g0"),
        a.rate.map_or(" at full speed".to_string(), |r| format!(
            " at {} pps",
            group(r)
        ))
    );
    print!("{}", fwd::l2fwd_block(&o.fwd));
    let pps = |n: u64| group_f(n as f64 / o.secs.max(1e-9), 0);
    println!(
        "Lab report ({:.2} s{})",
        o.secs,
        if interrupted { ", interrupted" } else { "" }
    );
    println!(
        "  generator sent:        {:>15} packets ({} pps)",
        group(o.sent),
        pps(o.sent)
    );
    println!("  forwarder received:    {:>15} packets", group(fwd_rx));
    println!(
        "  forwarder forwarded:   {:>15} packets ({} pps)",
        group(forwarded),
        pps(forwarded)
    );
    println!("  forwarder dropped:     {:>15} packets", group(fwd_drop));
    println!(
        "  generator received:    {:>15} packets ({} pps)",
        group(o.received),
        pps(o.received)
    );
    println!(
        "  loss: {} of {} ({:.4} %): {} on the way to the forwarder, {} in it, {} on the way back",
        group(lost),
        group(o.sent),
        loss,
        group(before),
        group(inside),
        group(after)
    );
    match o.lat {
        Some(l) => println!(
            "  latency (us, send stamp to receive time ({}), {} samples): p50 {:.1}  p90 {:.1}  p99 {:.1}  p99.9 {:.1}  max {:.1}",
            o.lat_time,
            group(o.lat_n as u64),
            l[0], l[1], l[2], l[3], l[4]
        ),
        None => println!("  latency: no packet came back"),
    }
    if o.dups > 0 || o.reordered > 0 {
        println!(
            "  duplicates {}, reordered {}",
            group(o.dups),
            group(o.reordered)
        );
    }
}

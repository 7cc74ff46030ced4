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
use linerate::apps::fwd;
use linerate::apps::lab::{self, Forwarding, FwdLabReport, LabError, LabOptions, Topology};
use linerate::port::xdp::XdpMode;
use linerate::stats::{group, group_f};
use std::ffi::OsString;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

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

impl From<PortKind> for lab::PortKind {
    fn from(k: PortKind) -> lab::PortKind {
        match k {
            PortKind::Xdp => lab::PortKind::Xdp,
            PortKind::Afpacket => lab::PortKind::Afpacket,
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
    /// Generator rate, as gen --rate takes it: 50kpps, 1Mpps, 5Gbps (of its 64 B frames,
    /// 84 B on the wire), 80% (of the veth's 10 Gbit/s) (default: as fast as it can).
    #[arg(long, value_name = "RATE", value_parser = lab_rate)]
    rate: Option<f64>,
    /// `-r` is balance's egress (zbalance_ipc's -r) in linerate; the rate is `--rate`.
    #[allow(dead_code)]
    #[arg(short = 'r', hide = true, value_name = "VALUE", num_args = 0..=1, default_missing_value = "",
          value_parser = flags::retired("lab -r: the generator's rate is --rate RATE, as in gen and sweep (-r is balance's egress queue, zbalance_ipc's -r)"))]
    old_r: Option<String>,
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
    /// Print only the lab report: not the forwarder's per-port statistics block before it.
    #[arg(short = 'q', long)]
    quiet: bool,
}

/// The speed a veth reports (`/sys/class/net/vethX/speed`: 10000): what `-r 80%` is of.
const VETH_BPS: f64 = 10e9;

/// `--rate`: gen's rate syntax (a unit always: 50kpps, 5Gbps, 80%), in packets per second of
/// the lab's 64-byte frames.
fn lab_rate(s: &str) -> Result<f64, String> {
    let r = flags::check_rate(s)?;
    let pps = r.pps(64.0, Some(VETH_BPS))?;
    if pps > flags::MAX_PPS || matches!(r, linerate::units::Rate::Percent(p) if p > 100.0) {
        return Err(format!("'{s}' is out of range: at most 10Gpps or 100%"));
    }
    Ok(pps)
}

/// The cluster master child process, for the signal thread (0: none).
static CHILD: AtomicU32 = AtomicU32::new(0);

/// A lab error: a port that did not open is named as the other commands name theirs.
fn lab_error(e: LabError) -> anyhow::Error {
    match e {
        LabError::Port { flag, uri, source } => crate::common::port_error(flag, &uri, source),
        e => anyhow::Error::new(e),
    }
}

/// The library's options of the lab's flags.
fn options(a: &Args) -> LabOptions {
    LabOptions {
        fwd_port: a.fwd_port.into(),
        gen_port: a.gen_port.into(),
        xdp_mode: a.xdp_mode,
        core: a.core,
        count: a.count,
        duration: a.duration,
        rate: a.rate,
    }
}

/// `lab cluster`: generator on g0, `linerate balance -i PORT:f0 --threads` in the second
/// namespace (a child process of this binary), round-robin over `--queues` consumer threads.
fn run_cluster(a: &Args, topo: &Topology, stop: &AtomicBool) -> anyhow::Result<ExitCode> {
    let exe = std::env::current_exe()?;
    let id = lab::cluster_id();
    let port = lab::PortKind::from(a.fwd_port).uri("f0");
    let mut master: Vec<OsString> = vec![exe.into()];
    master.extend(
        [
            "balance",
            "-i",
            &port,
            "-c",
            &id.to_string(),
            "-n",
            &a.queues.to_string(),
            "-m",
            "round-robin",
            "--threads",
            "--json",
            "--interval",
            "3600",
        ]
        .map(OsString::from),
    );
    let r = lab::run_cluster(&options(a), topo, &master, &CHILD, stop).map_err(lab_error)?;
    let (gns, fns) = (topo.gen_ns(), topo.fwd_ns());
    let (sent, rx, secs) = (r.sent, r.received, r.secs);
    let delivered = r.delivered();
    let lost = r.lost();
    let interrupted = r.interrupted;
    if a.json {
        let j = serde_json::json!({
            "lab": "cluster",
            "seconds": secs,
            "frame_bytes": 64,
            "generator": {"sent": sent},
            "cluster": {"received": rx, "delivered": delivered, "dropped": r.dropped(),
                        "queues": r.queues.iter().map(|q| serde_json::json!({"delivered": q.delivered, "dropped": q.dropped})).collect::<Vec<_>>()},
            "lost": lost,
            "loss_rate": if sent == 0 { 0.0 } else { lost as f64 / sent as f64 },
            "lost_before_cluster": r.lost_before_cluster(),
            "interrupted": interrupted,
        });
        println!("{j}");
        return Ok(ExitCode::SUCCESS);
    }
    let pps = |x: u64| group_f(r.pps(x), 0);
    println!("linerate lab cluster: namespaces {gns} (generator) and {fns} (cluster)");
    println!(
        "  cluster: linerate balance -i {port} -n {} -m round-robin --threads (cluster {id})",
        a.queues
    );
    println!(
        "  generator: {}, 64-byte UDP frames",
        lab::PortKind::from(a.gen_port).uri("g0")
    );
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
    for (q, c) in r.queues.iter().enumerate() {
        println!(
            "  queue {q}: delivered {:>15}, dropped {}",
            group(c.delivered),
            group(c.dropped)
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
        group(r.lost_before_cluster()),
        group(r.lost_in_cluster())
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
    {
        // The stop signals of every tool (SIGHUP too: a closed terminal ends the lab and
        // removes its namespaces, unless it was started under nohup).
        // Each delivery counted in the handler (`count_signals`): the iterator merges two
        // signals that come before its thread runs into one wake-up, and a second signal must
        // still end the lab.
        let list = crate::common::stop_signals();
        linerate::os::count_signals(&list)?;
        let first = linerate::os::signal_count();
        let mut sigs = signal_hook::iterator::Signals::new(list)?;
        let stop = stop.clone();
        std::thread::spawn(move || {
            for _ in sigs.forever() {
                stop.store(true, Ordering::Relaxed);
                let seen = linerate::os::signal_count().saturating_sub(first);
                if seen >= 2 {
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
    let r = match a.kind {
        Kind::Cluster => run_cluster(&a, &topo, &stop),
        Kind::L2fwd => run_lab(&a, Forwarding::L2fwd, &topo, &stop),
        Kind::Bounce => run_lab(&a, Forwarding::Bounce, &topo, &stop),
    };
    let leftover = topo.remove();
    if leftover > 0 {
        eprintln!("linerate lab: warning: {leftover} namespace(s) could not be removed");
    }
    r
}

/// `lab l2fwd` and `lab bounce`: the library runs the lab, this prints its report.
fn run_lab(
    a: &Args,
    kind: Forwarding,
    topo: &Topology,
    stop: &AtomicBool,
) -> anyhow::Result<ExitCode> {
    let report = lab::run_fwd(kind, &options(a), topo, stop).map_err(lab_error)?;
    print(a, topo.gen_ns(), topo.fwd_ns(), &report);
    Ok(ExitCode::SUCCESS)
}

fn print(a: &Args, gns: &str, fns: &str, o: &FwdLabReport) {
    let interrupted = o.interrupted;
    let fwd_rx = o.fwd_received();
    let forwarded = o.forwarded();
    let fwd_drop = o.fwd_dropped();
    // l2fwd's `dropped` holds both ends of the forwarder: what its receive rings dropped before
    // it read them (part of the loss on the way to it) and what it could not send (in it).
    let ports = &o.fwd.ports[..o.fwd.nports];
    let no_filter =
        |d: &linerate::port::Drops| d.without(linerate::port::DropReason::Filter).total();
    let drop_rx: u64 = ports.iter().map(|p| no_filter(&p.rx_drops)).sum();
    let drop_tx: u64 = ports.iter().map(|p| no_filter(&p.tx_drops)).sum();
    let lost = o.lost();
    let loss = if o.sent == 0 {
        0.0
    } else {
        lost as f64 * 100.0 / o.sent as f64
    };
    // On the way in (veth, the forwarder's socket ring), in the forwarder (not sent), on the
    // way back.
    let before = o.lost_before_forwarder();
    let inside = o.lost_in_forwarder();
    let after = o.lost_after_forwarder();
    if a.json {
        let j = serde_json::json!({
            "lab": format!("{:?}", a.kind).to_lowercase(),
            "seconds": o.secs,
            "frame_bytes": 64,
            "rate_pps": a.rate,
            "generator": {"sent": o.sent, "received": o.received, "sent_pps": o.pps(o.sent)},
            "forwarder": {"received": fwd_rx, "forwarded": forwarded, "dropped": fwd_drop,
                          "dropped_on_receive": drop_rx, "dropped_on_send": drop_tx,
                          "ports": o.fwd.ports[..o.fwd.nports].iter().map(|p| serde_json::json!({
                              "sent": p.sent, "received": p.received, "dropped": p.dropped}))
                              .collect::<Vec<_>>()},
            "lost": lost,
            "loss_rate": if o.sent == 0 { 0.0 } else { lost as f64 / o.sent as f64 },
            "lost_before_forwarder": before,
            "lost_in_forwarder": inside,
            "lost_after_forwarder": after,
            "latency_us": o.latency.map(|l| serde_json::json!({
                "p50": l.p50, "p90": l.p90, "p99": l.p99, "p99_9": l.p999, "max": l.max,
                "samples": l.samples, "receive_time": o.receive_time})),
            "duplicates": o.duplicates,
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
        lab::PortKind::from(a.gen_port).uri("g0"),
        a.rate.map_or(" at full speed".to_string(), |r| format!(
            " at {} pps",
            group_f(r, 0)
        ))
    );
    if !a.quiet {
        print!("{}", fwd::l2fwd_block(&o.fwd));
    }
    let pps = |n: u64| group_f(o.pps(n), 0);
    println!(
        "Lab report ({:.2} s of sending{})",
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
    println!(
        "  forwarder dropped:     {:>15} packets ({} by its receive rings before it read them, \
         {} not sent)",
        group(fwd_drop),
        group(drop_rx),
        group(drop_tx)
    );
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
    match o.latency {
        Some(l) => println!(
            "  latency (us, send stamp to receive time ({}), {} samples): p50 {:.1}  p90 {:.1}  p99 {:.1}  p99.9 {:.1}  max {:.1}",
            o.receive_time,
            group(l.samples as u64),
            l.p50, l.p90, l.p99, l.p999, l.max
        ),
        None => println!("  latency: no packet came back"),
    }
    if o.duplicates > 0 || o.reordered > 0 {
        println!(
            "  duplicates {}, reordered {}",
            group(o.duplicates),
            group(o.reordered)
        );
    }
}

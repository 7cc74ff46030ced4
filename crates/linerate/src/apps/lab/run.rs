//! The lab's run: the threads that enter the namespaces ([`run_fwd`]: the forwarder and the
//! receiver are ready before the generator starts; [`run_cluster`]: the cluster master is a
//! child process in the forwarder's namespace), joined into a plain report that the CLI only
//! prints.

use super::{generate, pin_quiet, receive, LabError, Sent, Topology, FWD_MAC, GEN_MAC};
use crate::apps::fwd::{self, FwdOptions, FwdStats, MacRewrite, Ports};
use crate::apps::gen::latency::Tracker;
use crate::apps::worker::Ended;
use crate::open::Side;
use crate::port::xdp::{XdpConfig, XdpMode};
use crate::port::{Direction, Port, PortOptions};
use std::ffi::OsString;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// The kind of the forwarder's or the generator's ports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortKind {
    /// AF_XDP.
    Xdp,
    /// AF_PACKET.
    Afpacket,
}

impl PortKind {
    /// The URI of interface `iface` with this kind (`xdp:f0`, `afpacket:g0`).
    pub fn uri(self, iface: &str) -> String {
        match self {
            PortKind::Xdp => format!("xdp:{iface}"),
            PortKind::Afpacket => format!("afpacket:{iface}"),
        }
    }
}

/// Which forwarding experiment [`run_fwd`] runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Forwarding {
    /// The DPDK l2fwd lab: generator g0 → forwarder f0 → f1 → receiver g1 (two veth pairs).
    L2fwd,
    /// pfdnabounce: the forwarder sends every packet back out of f0, the receiver is g0.
    Bounce,
}

/// What a lab run is asked to do.
#[derive(Clone, Debug)]
pub struct LabOptions {
    /// The forwarder's (or the cluster master's) ports.
    pub fwd_port: PortKind,
    /// The generator's ports (the receiver's are fixed: xdp for l2fwd, afpacket for bounce).
    pub gen_port: PortKind,
    /// AF_XDP socket mode of xdp ports.
    pub xdp_mode: XdpMode,
    /// The forwarder's core (the generator takes the next one, see [`super::cores`]).
    pub core: Option<usize>,
    /// Packets the generator sends at most (`-c`).
    pub count: Option<u64>,
    /// How long the generator sends (`-t`).
    pub duration: Duration,
    /// The generator's rate, packets per second (None: as fast as it can).
    pub rate: Option<f64>,
}

impl LabOptions {
    fn xdp(&self) -> XdpConfig {
        XdpConfig {
            mode: self.xdp_mode,
            ..Default::default()
        }
    }
}

/// Latency percentiles through the forwarder, in microseconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LatencyUs {
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Largest.
    pub max: f64,
    /// How many packets were measured.
    pub samples: usize,
}

/// What a forwarding lab ([`run_fwd`]) measured.
#[derive(Clone, Debug)]
pub struct FwdLabReport {
    /// Packets the generator sent.
    pub sent: u64,
    /// The generator's packets the receiver got back.
    pub received: u64,
    /// The forwarder's counters.
    pub fwd: FwdStats,
    /// Why the forwarder ended (it is stopped once the receiver is done).
    pub fwd_ended: Ended,
    /// The forwarder's ports: `IN -> OUT` (or `-> itself (bounce)`), and whether they share
    /// one UMEM.
    pub fwd_desc: String,
    /// One-way latency through the forwarder; None when no packet came back.
    pub latency: Option<LatencyUs>,
    /// Where the receive times come from (the receiver port's clock).
    pub receive_time: &'static str,
    /// Packets received twice.
    pub duplicates: u64,
    /// Packets received after a later one.
    pub reordered: u64,
    /// The generator's sending period (from its first packet to the port taking its last,
    /// the start-up left out): the rates are over it.
    pub secs: f64,
    /// A stop request (a signal) ended the run before its count or time.
    pub interrupted: bool,
}

impl FwdLabReport {
    /// Packets the forwarder received (on its first port).
    pub fn fwd_received(&self) -> u64 {
        self.fwd.ports[0].received
    }

    /// Packets the forwarder sent.
    pub fn forwarded(&self) -> u64 {
        self.fwd.total().sent
    }

    /// Packets the forwarder dropped.
    pub fn fwd_dropped(&self) -> u64 {
        self.fwd.total().dropped
    }

    /// Sent but not received back.
    pub fn lost(&self) -> u64 {
        self.sent.saturating_sub(self.received)
    }

    /// Lost on the way in (veth, the forwarder's socket ring).
    pub fn lost_before_forwarder(&self) -> u64 {
        self.sent.saturating_sub(self.fwd_received())
    }

    /// Lost in the forwarder (received, neither sent nor filtered).
    pub fn lost_in_forwarder(&self) -> u64 {
        let t = self.fwd.total();
        self.fwd_received().saturating_sub(t.sent + t.filtered)
    }

    /// Lost on the way back (forwarded, not received).
    pub fn lost_after_forwarder(&self) -> u64 {
        self.forwarded().saturating_sub(self.received)
    }

    /// `n` packets over the run's seconds.
    pub fn pps(&self, n: u64) -> f64 {
        n as f64 / self.secs.max(1e-9)
    }
}

/// One consumer queue of the cluster lab.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueCount {
    /// Packets delivered to the consumer.
    pub delivered: u64,
    /// Packets dropped on their way to it (every reason).
    pub dropped: u64,
}

/// What the cluster lab ([`run_cluster`]) measured.
#[derive(Clone, Debug, Default)]
pub struct ClusterLabReport {
    /// Packets the generator sent.
    pub sent: u64,
    /// Packets the cluster master received.
    pub received: u64,
    /// Its consumer queues.
    pub queues: Vec<QueueCount>,
    /// The generator's sending period (its start-up left out): the rates are over it.
    pub secs: f64,
    /// A stop request (a signal) ended the run before its count or time.
    pub interrupted: bool,
}

impl ClusterLabReport {
    /// Packets delivered to the consumers.
    pub fn delivered(&self) -> u64 {
        self.queues.iter().map(|q| q.delivered).sum()
    }

    /// Packets the cluster dropped on their way to a consumer.
    pub fn dropped(&self) -> u64 {
        self.queues.iter().map(|q| q.dropped).sum()
    }

    /// Sent but not delivered.
    pub fn lost(&self) -> u64 {
        self.sent.saturating_sub(self.delivered())
    }

    /// Lost on the way to the cluster master.
    pub fn lost_before_cluster(&self) -> u64 {
        self.sent.saturating_sub(self.received)
    }

    /// Received by the master, not delivered.
    pub fn lost_in_cluster(&self) -> u64 {
        self.received.saturating_sub(self.delivered())
    }

    /// `n` packets over the run's seconds.
    pub fn pps(&self, n: u64) -> f64 {
        n as f64 / self.secs.max(1e-9)
    }
}

/// Opens `uri` for `dir` with the xdp settings `xdp`; a failure names `flag` and the URI.
fn open(
    flag: &'static str,
    uri: &str,
    opts: &PortOptions,
    xdp: &XdpConfig,
    dir: Direction,
) -> Result<Box<dyn Port>, LabError> {
    let opts = PortOptions {
        xdp: *xdp,
        ..opts.clone()
    };
    crate::open(uri, &opts, dir).map_err(|source| LabError::Port {
        flag,
        uri: uri.to_string(),
        source,
    })
}

/// The lab's generator: a thread in namespace `gns` (pinned to `core`) sending on g0 until
/// the count, the duration or `stop`; returns how many it sent and over what period.
fn generate_in(
    o: &LabOptions,
    gns: &str,
    core: Option<usize>,
    xdp: &XdpConfig,
    stop: &AtomicBool,
) -> Result<Sent, LabError> {
    std::thread::scope(|s| {
        s.spawn(|| -> Result<Sent, LabError> {
            crate::sys::netns::enter(gns)?;
            pin_quiet(core);
            let popts = PortOptions::default();
            let uri = o.gen_port.uri("g0");
            let mut port = open("-o", &uri, &popts, xdp, Direction::Tx)?;
            Ok(generate(
                port.as_mut(),
                FWD_MAC,
                GEN_MAC,
                o.count,
                o.duration,
                o.rate,
                stop,
            )?)
        })
        .join()
        .unwrap_or(Err(LabError::Panicked("generator")))
    })
}

/// The forwarder's ports, MAC rewrite and whether they share one UMEM.
type FwdSetup = (Box<dyn Port>, Option<Box<dyn Port>>, MacRewrite, bool);

/// Opens the forwarder's ports in namespace `fns` (the calling thread enters it and is
/// pinned to `core`).
fn fwd_setup(
    kind: Forwarding,
    o: &LabOptions,
    fns: &str,
    core: usize,
    xdp: &XdpConfig,
) -> Result<FwdSetup, LabError> {
    let l2fwd = kind == Forwarding::L2fwd;
    crate::sys::netns::enter(fns)?;
    pin_quiet(Some(core));
    // afpacket: forward each packet as soon as it is in, as `linerate fwd` does (no block
    // timeout); the ports take only what arrives, so a bounce never reads its own output.
    let popts = PortOptions {
        immediate: true,
        ..Default::default()
    };
    let (p0, p1, shared) = if l2fwd {
        let opts = PortOptions { xdp: *xdp, ..popts };
        let p =
            crate::open_pair(&o.fwd_port.uri("f0"), &o.fwd_port.uri("f1"), &opts).map_err(|e| {
                LabError::Port {
                    flag: match e.side {
                        Side::Input => "-i",
                        Side::Output => "-o",
                    },
                    uri: e.uri,
                    source: e.source,
                }
            })?;
        (p.input, Some(p.output), p.shared_umem)
    } else {
        let p0 = open("-i", &o.fwd_port.uri("f0"), &popts, xdp, Direction::Rx)?;
        (p0, None, false)
    };
    // l2fwd's rewrite: src = the output port's MAC, dst = 02:00:00:00:00:TX_PORT. The
    // generator's receiver captures in promiscuous mode; its stack drops these frames early
    // (not its MAC), as a NIC without the address would.
    let f0 = crate::port::iface_mac("f0").map_err(LabError::PortFailed)?;
    let f1 = if l2fwd {
        crate::port::iface_mac("f1").map_err(LabError::PortFailed)?
    } else {
        f0
    };
    let mac = MacRewrite::L2fwd {
        port_macs: [f0, f1],
    };
    Ok((p0, p1, mac, shared))
}

/// Runs a forwarding lab on `topo` (made with 2 veth pairs for l2fwd, 1 for bounce): the
/// forwarder in the forwarder's namespace (pinned to its core), the receiver and then the
/// generator in the generator's; the generator starts once both are ready and ends at the
/// count, the duration or `stop`; the receiver then waits for what is in flight, and the
/// forwarder stops last. A port that does not open ends the run with its error before
/// anything is sent.
pub fn run_fwd(
    kind: Forwarding,
    o: &LabOptions,
    topo: &Topology,
    stop: &AtomicBool,
) -> Result<FwdLabReport, LabError> {
    let (gns, fns) = (topo.gen_ns(), topo.fwd_ns());
    let l2fwd = kind == Forwarding::L2fwd;
    let (fwd_core, gen_core) = super::cores(o.core);
    let xdp = o.xdp();
    let fwd_stop = AtomicBool::new(false);
    let rx_stop = AtomicBool::new(false);
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<String, LabError>>();
    let t_start = Instant::now();
    let report = std::thread::scope(|s| -> Result<FwdLabReport, LabError> {
        // The forwarder: None when its set-up failed (the error went to `ready`).
        let ready = ready_tx.clone();
        let (fwd_stop, xdp) = (&fwd_stop, &xdp);
        let fwd_h = s.spawn(move || -> Result<Option<(FwdStats, Ended)>, LabError> {
            let (mut p0, mut p1, mac, shared) = match fwd_setup(kind, o, fns, fwd_core, xdp) {
                Ok(x) => x,
                Err(e) => {
                    let _ = ready.send(Err(e));
                    return Ok(None);
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
            // Said: if the receiver dies before it speaks, the wait for it ends (no sender
            // left) instead of lasting as long as this forwarder, which runs until told to stop.
            drop(ready);
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
                return Err(LabError::Forwarder(e));
            }
            Ok(Some((r.stats, r.ended)))
        });
        // The receiver (on g1 for l2fwd, g0 for bounce).
        let ready = ready_tx.clone();
        let rx_stop = &rx_stop;
        let rx_h = s.spawn(
            move || -> Result<Option<(u64, Tracker, &'static str)>, LabError> {
                let port = crate::sys::netns::enter(gns)
                    .map_err(LabError::from)
                    .and_then(|()| {
                        let popts = PortOptions::default();
                        // l2fwd: an xdp receiver on g1 hands packets over at once. Bounce: g0 also
                        // sends, so afpacket, with a 1 ms block timeout to bound its delay.
                        if l2fwd {
                            open("-i", &PortKind::Xdp.uri("g1"), &popts, xdp, Direction::Rx)
                        } else {
                            let o = PortOptions {
                                block_timeout_ms: 1,
                                ..popts
                            };
                            open("-i", &PortKind::Afpacket.uri("g0"), &o, xdp, Direction::Rx)
                        }
                    });
                let mut port = match port {
                    Ok(p) => p,
                    Err(e) => {
                        let _ = ready.send(Err(e));
                        return Ok(None);
                    }
                };
                let _ = ready.send(Ok(String::new()));
                // Only the forwarder may still send: if it dies before it does, the wait for
                // it ends (no sender left) instead of lasting as long as this receiver.
                drop(ready);
                let (got, lat) = receive(port.as_mut(), rx_stop).map_err(LabError::PortFailed)?;
                Ok(Some((got, lat, port.rx_time().describe())))
            },
        );
        drop(ready_tx);
        let (fwd_desc, setup_err) = match await_ready(&ready_rx) {
            Ok(d) => (d, None),
            Err(e) => (String::new(), Some(e)),
        };
        let gen_res = if setup_err.is_none() {
            generate_in(o, gns, gen_core, xdp, stop)
        } else {
            Ok(Sent::default())
        };
        let wall = t_start.elapsed().as_secs_f64();
        // Let what is in flight arrive, then stop the receiver and the forwarder.
        rx_stop.store(true, Ordering::Relaxed);
        let rx = rx_h.join().unwrap_or(Err(LabError::Panicked("receiver")));
        fwd_stop.store(true, Ordering::Relaxed);
        let fwd_r = fwd_h.join().unwrap_or(Err(LabError::Panicked("forwarder")));
        if let Some(e) = setup_err {
            return Err(e);
        }
        let Sent {
            pkts: sent, secs, ..
        } = gen_res?;
        // The rates are over the sending period (the start-up of the generator's port is no
        // part of it); the wall time if the generator sent too little to have one.
        let secs = if secs > 0.0 { secs } else { wall };
        let (received, lat, receive_time) = rx?.ok_or(LabError::Panicked("receiver"))?;
        let (fwd, fwd_ended) = fwd_r?.ok_or(LabError::Panicked("forwarder"))?;
        let st = lat.stream(0);
        let samples = st.map_or(0, |s| s.hist.len() as usize);
        let latency = st.filter(|_| samples > 0).map(|s| {
            let x = s.summary();
            let us = |v: u64| v as f64 / 1e3;
            LatencyUs {
                p50: us(x.p50),
                p90: us(x.p90),
                p99: us(x.p99),
                p999: us(x.p999),
                max: us(x.max),
                samples,
            }
        });
        Ok(FwdLabReport {
            sent,
            received,
            fwd,
            fwd_ended,
            fwd_desc,
            latency,
            receive_time,
            duplicates: st.map_or(0, |s| s.dups),
            reordered: st.map_or(0, |s| s.reordered),
            secs,
            interrupted: false,
        })
    })?;
    Ok(FwdLabReport {
        interrupted: stop.load(Ordering::Relaxed),
        ..report
    })
}

/// Waits for the forwarder's word (its description, never empty) and the receiver's (empty)
/// that they are ready, or for why one is not. Returns the forwarder's description, the first
/// set-up error, or, when every sender is gone before both spoke (a thread died before it said
/// anything; each thread drops its sender once it has spoken), which one is missing; it never
/// waits on a thread that is gone.
fn await_ready(
    ready: &std::sync::mpsc::Receiver<Result<String, LabError>>,
) -> Result<String, LabError> {
    let (mut fwd, mut rx) = (None, false);
    while fwd.is_none() || !rx {
        match ready.recv() {
            Ok(Ok(d)) if !d.is_empty() => fwd = Some(d),
            Ok(Ok(_)) => rx = true,
            Ok(Err(e)) => return Err(e),
            Err(_) => {
                return Err(LabError::Panicked(if fwd.is_none() {
                    "forwarder"
                } else {
                    "receiver"
                }))
            }
        }
    }
    Ok(fwd.unwrap_or_default())
}

/// The cluster id of this process's cluster lab (1000 and up, from the process id).
pub fn cluster_id() -> u32 {
    1000 + std::process::id() % 50_000
}

/// Runs the cluster lab on `topo` (one veth pair): `master` (a program and its arguments:
/// a cluster master on `o.fwd_port` f0 that prints JSON lines, the last one
/// `{"type":"summary","rx":N,"queues":[{"delivered":N,"drops":{REASON:N,...}},...]}`, and
/// stops cleanly on SIGINT, as `linerate balance --json` does) runs in the forwarder's
/// namespace as a child process, whose id is in `child` while it runs (0 otherwise: a
/// signal handler may kill it); once it is ready (its XDP program is on f0, or after a
/// moment for afpacket) the generator sends on g0 until the count, the duration or `stop`,
/// then the master is interrupted and its summary read.
pub fn run_cluster(
    o: &LabOptions,
    topo: &Topology,
    master: &[OsString],
    child: &AtomicU32,
    stop: &AtomicBool,
) -> Result<ClusterLabReport, LabError> {
    let mut proc = Command::new("ip")
        .args(["netns", "exec", topo.fwd_ns()])
        .args(master)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(LabError::MasterStart)?;
    child.store(proc.id(), Ordering::Relaxed);
    let r = drive_cluster(o, topo, &mut proc, stop);
    if r.is_err() {
        // Never leave the master behind (a failed wait, a generator that failed): it is our
        // own child.
        let _ = proc.kill();
        let _ = proc.wait();
        child.store(0, Ordering::Relaxed);
    }
    let (sent, secs) = r?;
    let out = proc.wait_with_output();
    child.store(0, Ordering::Relaxed);
    let out = out?;
    let (received, queues) =
        master_summary(&String::from_utf8_lossy(&out.stdout)).ok_or_else(|| {
            LabError::MasterNoSummary(String::from_utf8_lossy(&out.stderr).trim().to_string())
        })?;
    Ok(ClusterLabReport {
        sent,
        received,
        queues,
        secs,
        interrupted: stop.load(Ordering::Relaxed),
    })
}

/// [`run_cluster`] while the master runs: waits until it is ready, runs the generator, then
/// interrupts the master (killed if it has not ended 10 s later). The packets sent and the
/// generator's seconds; on an error the caller ends the master.
fn drive_cluster(
    o: &LabOptions,
    topo: &Topology,
    proc: &mut std::process::Child,
    stop: &AtomicBool,
) -> Result<(u64, f64), LabError> {
    let (gns, fns) = (topo.gen_ns(), topo.fwd_ns());
    // Ready when the master's XDP program is on f0 (xdp) or after a moment (afpacket).
    let t0 = Instant::now();
    loop {
        if let Some(st) = proc.try_wait()? {
            let mut err = String::new();
            if let Some(mut e) = proc.stderr.take() {
                use std::io::Read;
                let _ = e.read_to_string(&mut err);
            }
            return Err(LabError::MasterExited {
                status: st.to_string(),
                stderr: err.trim().to_string(),
            });
        }
        let attached = o.fwd_port == PortKind::Afpacket
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
    let xdp = o.xdp();
    let t_start = Instant::now();
    let sent = generate_in(o, gns, None, &xdp, stop);
    let wall = t_start.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_millis(300));
    // Our own child (ip netns exec runs the master in its place): it stops cleanly on SIGINT.
    let _ = crate::sys::process::signal(proc.id(), libc::SIGINT);
    let deadline = Instant::now() + Duration::from_secs(10);
    while proc.try_wait()?.is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    if proc.try_wait()?.is_none() {
        let _ = proc.kill();
    }
    let sent = sent?;
    Ok((sent.pkts, if sent.secs > 0.0 { sent.secs } else { wall }))
}

/// The packets received and the queues of the master's first summary line in `text` (JSON
/// lines); None without one. A missing number is 0; a queue's drops are the sum of its
/// `drops` object, whatever reasons it names.
fn master_summary(text: &str) -> Option<(u64, Vec<QueueCount>)> {
    let summary = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|j| j["type"] == "summary")?;
    let n = |v: &serde_json::Value| v.as_u64().unwrap_or(0);
    let queues = summary["queues"]
        .as_array()
        .map(|qs| {
            qs.iter()
                .map(|q| QueueCount {
                    delivered: n(&q["delivered"]),
                    // Every reason the master names, so that a new one is counted too.
                    dropped: q["drops"]
                        .as_object()
                        .map_or(0, |d| d.values().map(n).sum()),
                })
                .collect()
        })
        .unwrap_or_default();
    Some((n(&summary["rx"]), queues))
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn the_ready_wait_ends_when_a_thread_dies_without_a_word() {
        use std::sync::mpsc::channel;
        // Both speak, in either order: the forwarder's description.
        let (tx, rx) = channel();
        tx.send(Ok(String::new())).unwrap();
        tx.send(Ok("f0 -> f1".to_string())).unwrap();
        assert_eq!(await_ready(&rx).unwrap(), "f0 -> f1");
        // The receiver spoke and let its sender go; the forwarder died before it spoke: the
        // wait ends at once (it used to last until a signal) and names the forwarder.
        // (A panicking thread drops its sender as it unwinds: dropped here.)
        let (tx, rx) = channel();
        let fwd = tx.clone();
        tx.send(Ok(String::new())).unwrap();
        drop(tx);
        drop(fwd);
        assert!(matches!(
            await_ready(&rx),
            Err(LabError::Panicked("forwarder"))
        ));
        // The forwarder spoke, the receiver died: the receiver is named.
        let (tx, rx) = channel();
        tx.send(Ok("f0".to_string())).unwrap();
        drop(tx);
        assert!(matches!(
            await_ready(&rx),
            Err(LabError::Panicked("receiver"))
        ));
        // A set-up error is returned as it is.
        let (tx, rx) = channel();
        tx.send(Err(LabError::Panicked("x"))).unwrap();
        assert!(matches!(await_ready(&rx), Err(LabError::Panicked("x"))));
    }

    #[test]
    fn the_master_summary_is_read_from_its_json_lines() {
        let text = "{\"type\":\"start\"}\nnot json\n{\"type\":\"summary\",\"rx\":10,\"queues\":[\
                    {\"delivered\":4,\"drops\":{\"ring_full\":1,\"unread\":2}},\
                    {\"delivered\":3}]}\n";
        let (rx, q) = master_summary(text).unwrap();
        assert_eq!(rx, 10);
        assert_eq!(
            q,
            vec![
                QueueCount {
                    delivered: 4,
                    dropped: 3
                },
                QueueCount {
                    delivered: 3,
                    dropped: 0
                }
            ]
        );
        assert_eq!(master_summary("{\"type\":\"tick\"}\n"), None);
        let r = ClusterLabReport {
            sent: 12,
            received: 10,
            queues: q,
            secs: 0.0,
            interrupted: false,
        };
        assert_eq!(
            (
                r.delivered(),
                r.dropped(),
                r.lost(),
                r.lost_before_cluster(),
                r.lost_in_cluster()
            ),
            (7, 3, 5, 2, 3)
        );
    }

    #[test]
    fn port_kinds_name_their_uris() {
        assert_eq!(PortKind::Xdp.uri("f0"), "xdp:f0");
        assert_eq!(PortKind::Afpacket.uri("g1"), "afpacket:g1");
    }
}

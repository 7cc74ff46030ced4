//! The XDP live-frames engine of `gen` (`--engine live`): the kernel builds, runs and sends the
//! packets itself. `BPF_PROG_RUN` with `BPF_F_TEST_XDP_LIVE_FRAMES` initialises frames of a page
//! pool from the template (once per frame: recycled frames keep their bytes), runs
//! `bpf/xdp_gen.o` on each, and sends every frame the program returns `XDP_TX` for on the
//! interface given as the run's `ingress_ifindex`, in batches of up to 256 frames. No packet
//! crosses into user space; a thread makes one system call per chunk of packets.
//!
//! The program varies the addresses and ports (increment or random over a range) from a
//! per-CPU map, rewriting each field from the value its frame holds with incremental checksum
//! updates, and counts the frames it sent per CPU: that count is the number of packets, exact
//! also when a run is cut short by a signal (the kernel stops after a whole batch).
//!
//! * As fast as possible: one long run per thread (up to 2^30 frames); a stop or the end of
//!   `duration` interrupts it with a signal (SIGURG, caught by a no-op handler; the worker
//!   threads block every other signal).
//! * `count`: runs of exactly the packets left.
//! * A rate: every run sends the packets due on the TSC clock since the start, so the mean rate
//!   is exact and the departures come in bursts, one per run: the granularity is the time
//!   between runs ([`LiveReport::run_gap_ns`]), at least the fixed cost of a run (the kernel sets
//!   up and tears down a page pool per run: about 25 ms of waiting on Linux 6.18 here). After a
//!   stall the owed packets go within the bounds of `gen`'s catch-up ([`CountPacer`]), a run
//!   holding at most a tenth of a second's worth.
//!
//! What a device could not send is read from its counters (`tx_dropped`, before and after).

use super::control::Control;
use super::sched::{CountPacer, OnStall};
use super::template::{Template, Vals, L4};
use super::vary::{Seq, SizeSpec};
use super::{GenError, StreamSpec};
use crate::apps::worker::{Limits, Ticker};
use crate::port::xdp::{obj, sys};
use crate::port::PortError;
use crate::time::Clock;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The compiled program (rebuilt by `bpf/build.sh`, checked by `tests/xdp_object.rs`).
pub const OBJECT: &[u8] = include_bytes!("../../../../../bpf/xdp_gen.o");
/// The program's name in the kernel.
pub const PROG_NAME: &str = "lr_gen";
/// Default frames per kernel batch.
pub const DEFAULT_BATCH: u32 = 64;
/// Largest run of an unpaced thread (a signal ends it earlier).
const LONG_RUN: u64 = 1 << 30;
/// Below this rate a thread (packets per second), `gen --engine auto` takes the xsk engine:
/// a run costs the kernel a page pool set up and torn down, ~10 to 30 ms of waiting per run
/// here ([`TYPICAL_RUN_GAP_NS`]), so a paced live thread sends its packets in runs of that
/// much time's worth, back to back at the device's speed: at 100 kpps, runs of ~2'500 frames,
/// more than a receiver's ring holds (an `xdp:` receiver dropped 19.8 %). The xsk engine
/// paces per packet.
pub const PACED_MIN_PPS: f64 = 1e6;
/// A run's usual cost on Linux 6.18 with one thread (measured: 10 to 30 ms).
pub const TYPICAL_RUN_GAP_NS: u64 = 25_000_000;

/// Size of `struct lr_gen` in bpf/xdp_gen.c.
const STATE_LEN: usize = 120;

/// What the live engine sends and for how long.
#[derive(Clone, Debug)]
pub struct LiveOptions {
    /// Interface to send on (in the calling thread's network namespace).
    pub iface: String,
    /// The stream: its template, varied fields and fixed size (no probes).
    pub stream: StreamSpec,
    /// Packets in all (split over the threads).
    pub count: Option<u64>,
    /// Stop after this long.
    pub duration: Option<Duration>,
    /// Packets per second in all (None: as fast as possible).
    pub pps: Option<f64>,
    /// Threads, one run loop each.
    pub threads: usize,
    /// Pin thread i to core `core + i`; None: to the i-th core the process may run on.
    pub core: Option<usize>,
    /// Frames per kernel batch (1..=256).
    pub batch: u32,
    /// Seed of the random fields.
    pub seed: u64,
    /// What a paced thread does after a stall.
    pub on_stall: OnStall,
    /// Steering while it runs (gen's commands): `start`, `stop` and the rate (`pps` of each
    /// thread) are followed; size, MAC and count changes are not (the kernel sends copies of
    /// the one template built at the start), and callers refuse them.
    pub control: Option<Arc<Control>>,
}

impl Default for LiveOptions {
    fn default() -> Self {
        LiveOptions {
            iface: String::new(),
            stream: StreamSpec {
                probe: false,
                ..Default::default()
            },
            count: None,
            duration: None,
            pps: None,
            threads: 1,
            core: None,
            batch: DEFAULT_BATCH,
            seed: 1,
            on_stall: OnStall::default(),
            control: None,
        }
    }
}

/// What the live engine reports about every interval.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LiveTick {
    /// When it was read (clock ns).
    pub t_ns: u64,
    /// Frames the program sent so far.
    pub pkts: u64,
    /// What the device counted as dropped on transmit since the start (None: unreadable).
    pub tx_dropped: Option<u64>,
}

/// Results of a live run.
#[derive(Clone, Debug, Default)]
pub struct LiveReport {
    /// Frames the program sent (returned XDP_TX for).
    pub pkts: u64,
    /// Their bytes (without CRC).
    pub bytes: u64,
    /// Start of the first run and end of the last (clock ns).
    pub first_ns: u64,
    /// End of the last run.
    pub last_ns: u64,
    /// System calls (runs) made.
    pub runs: u64,
    /// The largest run, frames: the longest burst the receiver saw.
    pub max_run: u64,
    /// What the device counted as dropped on transmit meanwhile (None: counters unreadable).
    pub tx_dropped: Option<u64>,
    /// Packets the device counted as sent meanwhile.
    pub tx_packets: Option<u64>,
    /// The rate asked, packets per second in all (None: as fast as possible).
    pub rate_pps: Option<f64>,
    /// With a rate: the rate of the runs, each thread's packets up to its last run over the
    /// time from its start to that run's start (when they were due), summed over the threads.
    /// A run's packets leave in a burst, so the span up to the end of the last run would count
    /// that run's time on top of the schedule's.
    pub paced_pps: Option<f64>,
    /// Times the schedule moved later (stalls longer than the catch-up window), and by how
    /// much in all (ns).
    pub slips: u64,
    /// Time given up, ns.
    pub slipped_ns: u64,
    /// Whether commands changed the settings during the run (the rate asked then changed).
    pub steered: bool,
}

impl LiveReport {
    /// Mean time between the starts of two runs of a thread (the pacing granularity).
    pub fn run_gap_ns(&self, threads: usize) -> u64 {
        let per = self.runs / threads.max(1) as u64;
        if per == 0 {
            return 0;
        }
        self.last_ns.saturating_sub(self.first_ns) / per
    }

    /// Packets per second that left: with a rate, the rate of the runs
    /// ([`LiveReport::paced_pps`]); without, between the start and the end. Frames the device
    /// dropped on transmit meanwhile did not leave: the rate is cut by their share.
    pub fn pps(&self) -> f64 {
        let p = if let Some(p) = self.paced_pps {
            p
        } else {
            let dt = self.last_ns.saturating_sub(self.first_ns);
            if dt == 0 {
                return 0.0;
            }
            self.pkts as f64 * 1e9 / dt as f64
        };
        if self.pkts == 0 {
            return p;
        }
        p * self.taken() as f64 / self.pkts as f64
    }

    /// Mean frames per run (0 without a run): with a rate, the size of the bursts.
    pub fn mean_run(&self) -> f64 {
        if self.runs == 0 {
            0.0
        } else {
            self.pkts as f64 / self.runs as f64
        }
    }

    /// Frames that left: those the program sent less what the device dropped on transmit
    /// meanwhile.
    pub fn taken(&self) -> u64 {
        self.pkts.saturating_sub(self.tx_dropped.unwrap_or(0))
    }
}

/// Why the live engine cannot send `s`, if it cannot (the xsk engine can).
pub fn unsupported(s: &StreamSpec) -> Option<String> {
    if !matches!(s.size, SizeSpec::Fixed(_)) {
        return Some("live frames have one size: give --size N".into());
    }
    let list = |q: Option<&Seq>| matches!(q, Some(Seq::List { .. }));
    if list(s.src_ip.as_ref().map(|a| &a.seq))
        || list(s.dst_ip.as_ref().map(|a| &a.seq))
        || list(s.sport.as_ref())
        || list(s.dport.as_ref())
    {
        return Some("live frames vary fields over ranges, not lists".into());
    }
    if s.size.bounds().1 > 1518 {
        // BPF_PROG_RUN's live frames are one page each: no jumbo frame.
        return Some("live frames are at most 1518 B (the xsk engine sends jumbo frames)".into());
    }
    None
}

/// One varied field for the program.
struct Field {
    seq: Seq,
    off: usize,
    width: u8,
    l3: bool,
}

/// The template frame and the program's state (one CPU's value of `gen_map`).
fn build(s: &StreamSpec, seed: u64) -> Result<(Vec<u8>, Vec<u8>), GenError> {
    let spec_err = |why: String| GenError::Spec { stream: s.id, why };
    if let Some(why) = unsupported(s) {
        return Err(spec_err(why));
    }
    let mut t = s.template.clone();
    if let Some(a) = &s.src_ip {
        t.src_ip = a.base;
    }
    if let Some(a) = &s.dst_ip {
        t.dst_ip = a.base;
    }
    if let Some(q) = &s.sport {
        t.sport = q.first() as u16;
    }
    if let Some(q) = &s.dport {
        t.dport = q.first() as u16;
    }
    let tpl = Template::new(&t).map_err(|why| GenError::Template { stream: s.id, why })?;
    let (size, _) = s.size.bounds();
    let len = tpl
        .check_size(size)
        .map_err(|why| GenError::Template { stream: s.id, why })?;
    let lay = *tpl.layout();
    let mut v: Vals = tpl.base();
    v.len = len;
    // The frame starts at each field's first value (the template's own).
    let mut frame = vec![0u8; len];
    let n = tpl.write(&mut frame, &v);
    frame.truncate(n);
    let mut fields = Vec::new();
    let mut add = |q: Option<&Seq>, off: usize, width: u8, l3: bool| {
        if let Some(q) = q {
            if !matches!(q, Seq::Fixed(_)) && q.distinct() > 1 {
                fields.push(Field {
                    seq: q.clone(),
                    off,
                    width,
                    l3,
                });
            }
        }
    };
    add(s.src_ip.as_ref().map(|a| &a.seq), lay.src_ip(), 4, !lay.v6);
    add(s.dst_ip.as_ref().map(|a| &a.seq), lay.dst_ip(), 4, !lay.v6);
    add(s.sport.as_ref(), lay.l4, 2, false);
    add(s.dport.as_ref(), lay.l4 + 2, 2, false);
    let mut st = vec![0u8; STATE_LEN];
    let mut rng = (seed ^ (seed >> 32)) as u32;
    if rng == 0 {
        rng = 0x9e37_79b9;
    }
    st[8..12].copy_from_slice(&rng.to_ne_bytes());
    let l3c = if lay.v6 { 0u16 } else { (lay.l3 + 10) as u16 };
    st[12..14].copy_from_slice(&l3c.to_ne_bytes());
    st[14..16].copy_from_slice(&(lay.l4_csum() as u16).to_ne_bytes());
    st[16] = fields.len() as u8;
    st[17] = u8::from(lay.proto == L4::Udp);
    for (i, f) in fields.iter().enumerate() {
        let b = &mut st[24 + 24 * i..48 + 24 * i];
        let (lo, span, mode) = match f.seq {
            Seq::Inc { lo, span, .. } => (lo, span, 1u8),
            Seq::Random { lo, span } => (lo, span, 2u8),
            _ => (f.seq.first(), 1, 1),
        };
        b[0..8].copy_from_slice(&span.to_ne_bytes());
        b[8..12].copy_from_slice(&(lo as u32).to_ne_bytes());
        b[16..18].copy_from_slice(&(f.off as u16).to_ne_bytes());
        b[18] = f.width;
        b[19] = mode;
        b[20] = u8::from(f.l3);
    }
    Ok((frame, st))
}

fn os(iface: &str, op: &'static str, e: std::io::Error) -> GenError {
    GenError::Port(PortError::Os {
        iface: iface.to_string(),
        op,
        hint: match e.raw_os_error() {
            Some(libc::EPERM) | Some(libc::EACCES) => " (needs root, or CAP_BPF + CAP_NET_ADMIN)",
            Some(libc::EINVAL) => " (the kernel has no XDP live frames: Linux 5.18+)",
            Some(libc::ENXIO) | Some(libc::EOPNOTSUPP) => {
                " (the device cannot send XDP frames; a veth needs an XDP program on its peer)"
            }
            _ => "",
        }
        .into(),
        source: e,
    })
}

/// The per-CPU packet counters of the program, summed.
fn sent(map: &OwnedFd, ncpu: usize) -> u64 {
    let mut v = vec![0u8; STATE_LEN * ncpu];
    if sys::map_lookup(map, 0, &mut v).is_err() {
        return 0;
    }
    v.chunks(STATE_LEN)
        .map(|c| u64::from_ne_bytes(c[..8].try_into().unwrap_or([0; 8])))
        .sum()
}

use crate::sys::affinity::{allowed_cores, pin_current_thread as pin};
use crate::sys::signals::{block_all_but_wake as block_signals, install_wake, thread_id, wake};

/// What one worker thread did.
#[derive(Default)]
struct Worker {
    runs: u64,
    max_run: u64,
    first: u64,
    last: u64,
    /// Start of the last whole run, and the packets asked up to and with it.
    last_start: u64,
    upto_last: u64,
    slips: u64,
    slipped_ns: u64,
    /// The settings changed during the run.
    steered: bool,
}

/// Validates `o` as [`run`] would, without loading anything.
pub fn validate(o: &LiveOptions) -> Result<(), GenError> {
    build(&o.stream, o.seed).map(|_| ())
}

/// Runs the live engine until the count, the duration or `stop`. `on_tick` gets the packets
/// sent so far and the device's transmit drops about every `interval`.
pub fn run(
    o: &LiveOptions,
    clock: &dyn Clock,
    stop: &AtomicBool,
    interval: Duration,
    mut on_tick: impl FnMut(&LiveTick),
) -> Result<LiveReport, GenError> {
    let iface = o.iface.as_str();
    let threads = o.threads.max(1);
    let batch = o.batch.clamp(1, sys::TEST_XDP_MAX_BATCH);
    let ifindex = sys::ifindex(iface)?;
    let ncpu = sys::possible_cpus().map_err(|e| os(iface, "reading the CPU count", e))?;
    let (frame, state) = build(&o.stream, o.seed)?;
    let map = state_map(iface, &state, ncpu)?;
    let prog = obj::parse(OBJECT, "bpf/xdp_gen.o")?.load(iface, PROG_NAME, &[("gen_map", &map)])?;
    let before = sys::link_stats(ifindex).ok();
    let first = probe_veth(o, &prog, &frame, ifindex, before)?;
    install_wake();
    let cores = allowed_cores();
    let core_of = |i: usize| match o.core {
        Some(c) => Some(c + i),
        None => cores.get(i % cores.len().max(1)).copied(),
    };
    let per = |i: usize, n: u64| n / threads as u64 + u64::from((i as u64) < n % threads as u64);
    let pps_t = o.pps.map(|p| p / threads as f64);
    let t0 = clock.now_ns();
    // -t for every thread; each one's share of -c is its own limit.
    let limits = Limits::new(None, o.duration, t0);
    let deadline = limits.deadline;
    let done: Vec<AtomicBool> = (0..threads).map(|_| AtomicBool::new(false)).collect();
    let tids: Vec<AtomicU64> = (0..threads).map(|_| AtomicU64::new(0)).collect();
    let halt = AtomicBool::new(false);
    let results = std::thread::scope(|sc| {
        let mut hs = Vec::new();
        for i in 0..threads {
            let (prog, frame, done, tid, halt) = (&prog, &frame, &done[i], &tids[i], &halt);
            let control = o.control.as_deref();
            // The probe frames are part of the count.
            let count = o.count.map(|c| per(i, c - first));
            let core = core_of(i);
            hs.push(sc.spawn(move || -> Result<Worker, GenError> {
                block_signals();
                tid.store(thread_id(), Ordering::Release);
                if let Some(c) = core {
                    if !pin(c) {
                        done.store(true, Ordering::Release);
                        return Err(GenError::Spec {
                            stream: 0,
                            why: format!("cannot pin a live-frames thread to core {c}"),
                        });
                    }
                }
                let limits = Limits { count, deadline };
                let r = work(
                    prog, frame, ifindex, batch, limits, pps_t, o.on_stall, clock, halt, control,
                );
                done.store(true, Ordering::Release);
                r.map_err(|e| os(iface, "bpf(BPF_PROG_RUN)", e))
            }));
        }
        // Control: ticks, the deadline and stops (a signal ends the workers' long runs).
        let mut ticker = Ticker::new(t0, interval);
        let tick = ticker.interval_ns();
        let mut version = o.control.as_ref().map(|c| c.version());
        loop {
            if done.iter().all(|d| d.load(Ordering::Acquire)) {
                break;
            }
            let now = clock.now_ns();
            let end =
                stop.load(Ordering::Relaxed) || halt.load(Ordering::Relaxed) || limits.time_up(now);
            if end {
                halt.store(true, Ordering::Release);
                for (d, t) in done.iter().zip(&tids) {
                    let t = t.load(Ordering::Acquire);
                    if !d.load(Ordering::Acquire) && t != 0 {
                        // The thread has not returned (not done), so its id is valid.
                        wake(t);
                    }
                }
            }
            // A command: an unpaced thread in a long run is woken to take it (not with a
            // count, whose runs must end whole to stay exact; they take it at their next run).
            let v = o.control.as_ref().map(|c| c.version());
            if v != version {
                version = v;
                if o.count.is_none() {
                    for (d, t) in done.iter().zip(&tids) {
                        let t = t.load(Ordering::Acquire);
                        if !d.load(Ordering::Acquire) && t != 0 {
                            wake(t);
                        }
                    }
                }
            }
            if ticker.due(now) {
                let dropped = match (before, sys::link_stats(ifindex).ok()) {
                    (Some(b), Some(a)) => Some(a.tx_dropped.wrapping_sub(b.tx_dropped)),
                    _ => None,
                };
                on_tick(&LiveTick {
                    t_ns: now,
                    pkts: sent(&map, ncpu),
                    tx_dropped: dropped,
                });
            }
            let wait = match deadline {
                Some(d) if d > now && !end => (d - now).min(tick.min(10_000_000)),
                _ if end => 2_000_000,
                _ => tick.min(10_000_000),
            };
            std::thread::sleep(Duration::from_nanos(wait));
        }
        hs.into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(GenError::Spec {
                        stream: 0,
                        why: "a live-frames thread panicked".into(),
                    })
                })
            })
            .collect::<Vec<_>>()
    });
    let after = sys::link_stats(ifindex).ok();
    let mut rep = LiveReport {
        pkts: sent(&map, ncpu),
        rate_pps: o.pps,
        ..Default::default()
    };
    rep.bytes = rep.pkts * frame.len() as u64;
    if let (Some(b), Some(a)) = (before, after) {
        rep.tx_dropped = Some(a.tx_dropped.wrapping_sub(b.tx_dropped));
        rep.tx_packets = Some(a.tx_packets.wrapping_sub(b.tx_packets));
    }
    add_workers(rep, results, o.pps.is_some())
}

/// The per-CPU state map of the generator program: `state` for every CPU, each with its own
/// random seed.
fn state_map(iface: &str, state: &[u8], ncpu: usize) -> Result<OwnedFd, GenError> {
    let map = obj::create_map(
        iface,
        sys::BPF_MAP_TYPE_PERCPU_ARRAY,
        4,
        STATE_LEN as u32,
        1,
        "lr_gen",
    )?;
    let mut all = Vec::with_capacity(STATE_LEN * ncpu);
    for c in 0..ncpu {
        let mut s = state.to_vec();
        let mut r = u32::from_ne_bytes([s[8], s[9], s[10], s[11]]);
        r = r.wrapping_add((c as u32).wrapping_mul(0x9e37_79b9)) | 1;
        s[8..12].copy_from_slice(&r.to_ne_bytes());
        all.extend_from_slice(&s);
    }
    sys::map_update(&map, 0, &all).map_err(|e| os(iface, "bpf(BPF_MAP_UPDATE_ELEM)", e))?;
    Ok(map)
}

/// A veth silently discards XDP frames when its peer has no XDP program: sends a few frames
/// first and checks that the device sent or dropped them (the program counts them). Returns
/// how many were sent (part of the count).
fn probe_veth(
    o: &LiveOptions,
    prog: &OwnedFd,
    frame: &[u8],
    ifindex: u32,
    before: Option<sys::LinkStats>,
) -> Result<u64, GenError> {
    let iface = o.iface.as_str();
    let mut first = 0;
    if sys::iface_driver(iface).is_ok_and(|d| d == "veth") && o.count != Some(0) {
        // Up to 64 frames, so that a few packets of the stack's own (neighbour discovery on a
        // fresh link) cannot pass for them; the peer counts them when its NAPI runs, which may
        // be a thread on another core: give it up to 200 ms.
        let probe = o.count.unwrap_or(64).min(64);
        sys::xdp_run_live(prog, frame, ifindex, probe as u32, probe as u32)
            .map_err(|e| os(iface, "bpf(BPF_PROG_RUN)", e))?;
        first = probe;
        if let Some(b) = before {
            let counted = || {
                sys::link_stats(ifindex).ok().map(|a| {
                    (a.tx_packets + a.tx_dropped).saturating_sub(b.tx_packets + b.tx_dropped)
                })
            };
            let mut n = counted();
            for _ in 0..20 {
                if n.is_none_or(|n| n >= probe) {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
                n = counted();
            }
            if n.is_some_and(|n| n < probe) {
                return Err(GenError::Spec {
                    stream: o.stream.id,
                    why: format!(
                        "{iface} did not send its first {probe} XDP frames: its veth peer needs \
                         an XDP program (e.g. ip link set dev PEER xdpdrv obj bpf/xdp_drop.o \
                         sec xdp)"
                    ),
                });
            }
        }
    }
    Ok(first)
}

/// Adds what each worker thread did to `rep` (`paced`: a rate was asked); the first error of
/// a worker is the run's.
fn add_workers(
    mut rep: LiveReport,
    results: Vec<Result<Worker, GenError>>,
    paced: bool,
) -> Result<LiveReport, GenError> {
    let mut err = None;
    for r in results {
        match r {
            Ok(w) => {
                rep.runs += w.runs;
                rep.max_run = rep.max_run.max(w.max_run);
                rep.slips += w.slips;
                rep.slipped_ns += w.slipped_ns;
                rep.steered |= w.steered;
                if paced {
                    let span = w.last_start.saturating_sub(w.first);
                    let p = if span > 0 && w.upto_last > 0 {
                        (w.upto_last - 1) as f64 * 1e9 / span as f64
                    } else {
                        0.0
                    };
                    *rep.paced_pps.get_or_insert(0.0) += p;
                }
                if w.first != 0 && (rep.first_ns == 0 || w.first < rep.first_ns) {
                    rep.first_ns = w.first;
                }
                rep.last_ns = rep.last_ns.max(w.last);
            }
            Err(e) => {
                err.get_or_insert(e);
            }
        }
    }
    match err {
        Some(e) => Err(e),
        None => Ok(rep),
    }
}

/// One thread's run loop.
#[allow(clippy::too_many_arguments)]
fn work(
    prog: &OwnedFd,
    frame: &[u8],
    ifindex: u32,
    batch: u32,
    limits: Limits,
    pps: Option<f64>,
    on_stall: OnStall,
    clock: &dyn Clock,
    halt: &AtomicBool,
    control: Option<&Control>,
) -> std::io::Result<Worker> {
    let mut w = Worker::default();
    // Packets sent so far.
    let mut asked = 0u64;
    let start = clock.now_ns();
    w.first = start;
    // A run holds at most a tenth of a second's worth of packets, on schedule or catching up.
    let run_cap = |p: f64| (p / 10.0).max(1.0) as u64;
    let mut pps = pps;
    let mut pacer = pps.map(|p| CountPacer::new(p, start, on_stall, run_cap(p)));
    // The settings applied (commands change them: one load per run).
    let mut applied = control.map(|c| c.version());
    let mut sending = true;
    while !limits.count_reached(asked) && !halt.load(Ordering::Acquire) {
        let now = clock.now_ns();
        if limits.time_up(now) {
            break;
        }
        if let Some(c) = control {
            let v = c.version();
            if Some(v) != applied {
                applied = Some(v);
                let s = c.get();
                sending = s.sending;
                pps = s.pps;
                // The schedule starts again from now at the new rate.
                if let Some(pc) = &pacer {
                    let (n, ns) = pc.slipped();
                    w.slips += n;
                    w.slipped_ns += ns;
                }
                pacer = pps.map(|p| CountPacer::new(p, now, on_stall, run_cap(p)));
                w.steered = true;
            }
            if !sending {
                std::thread::sleep(Duration::from_millis(2));
                continue;
            }
        }
        // A rate comes with its pacer (both are set together above).
        let n = match (pps, pacer.as_mut()) {
            (Some(p), Some(pacer)) => {
                // The packets due since the start, within the catch-up bounds, at most a
                // tenth of a second's worth.
                let n = pacer.allowed(now).min(run_cap(p));
                if n == 0 {
                    let mut wait = pacer.next_at().saturating_sub(now);
                    if control.is_some() {
                        // A command is taken within 50 ms even at a low rate.
                        wait = wait.min(50_000_000);
                    }
                    if wait > 200_000 {
                        std::thread::sleep(Duration::from_nanos(wait - 100_000));
                    }
                    continue;
                }
                limits.room(asked, n as usize) as u64
            }
            _ => limits.room(asked, LONG_RUN as usize) as u64,
        };
        let r = sys::xdp_run_live(prog, frame, ifindex, n as u32, batch);
        let t1 = clock.now_ns();
        w.runs += 1;
        w.last = t1;
        match r {
            Ok(()) => {
                asked += n;
                w.max_run = w.max_run.max(n);
                if let Some(pc) = pacer.as_mut() {
                    pc.took(n, now);
                }
                w.last_start = now;
                w.upto_last = asked;
            }
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => {
                if halt.load(Ordering::Acquire) {
                    break;
                }
            }
            Err(e) => return Err(e),
        }
    }
    if let Some(pc) = &pacer {
        let (n, ns) = pc.slipped();
        w.slips += n;
        w.slipped_ns += ns;
    }
    Ok(w)
}

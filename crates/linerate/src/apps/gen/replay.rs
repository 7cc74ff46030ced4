//! pcap replay: packets of a capture sent at their recorded spacing, sped up or slowed down
//! (`speed`), or as fast as the port takes them, once or several times.
//!
//! A replay always stops on time: a long gap between two recorded timestamps (or a slow
//! `speed`) is waited for in slices that look at the stop flag and the time limit, and a capture
//! with no packet ends the replay after one loop, whatever `loops` asks.
//!
//! At a rate of its own (`rate`: tcpreplay's -p and -M) the packets leave at that rate
//! whatever their recorded spacing, and each is stamped with its scheduled time.
//!
//! With a [`Rewrite`] every packet is copied into a frame of the replay's own and edited on
//! the way (tcprewrite's edits), and packets of other link types are put in Ethernet frames
//! (see [`rewrite`]); one that cannot be is counted, by reason, in
//! [`ReplayReport::refused`].

pub mod rewrite;

use super::sched::{self, OnStall, Pacer, Precision};
use crate::apps::worker::{Limits, Ticker};
use crate::mem::{Batch, Desc, Pool, PoolConfig, BATCH, DEFAULT_BIG_FRAMES};
use crate::port::{Port, PortError, PortStats};
use crate::time::Clock;
use crate::wire::LinkType;
pub use rewrite::{RefusedCounts, Rewrite};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How to replay.
#[derive(Clone, Debug)]
pub struct ReplayOptions {
    /// Multiply the recorded rate by this (2.0 = twice as fast); None: as fast as possible.
    pub speed: Option<f64>,
    /// Times to play the capture; 0: forever (tcpreplay's `--loop 0`), until the count, the
    /// time limit or a stop.
    pub loops: u64,
    /// A rate of its own instead of the capture's spacing (`speed` is then not used).
    pub rate: Option<ReplayRate>,
    /// Edits, and the conversion of every link type onto Ethernet; None: packets as recorded.
    pub rewrite: Option<Rewrite>,
    /// Stop after this many packets in all.
    pub count: Option<u64>,
    /// Stop after this long.
    pub duration: Option<Duration>,
    /// Sleep instead of spinning when the next departure is further away than this.
    pub sleep_above: Duration,
    /// What a replay that fell behind its recorded spacing does (as gen's own pacing): catch
    /// up within bounds (peak rate, burst, window; beyond the window the schedule moves later),
    /// or move the schedule at once.
    pub on_stall: OnStall,
}

impl Default for ReplayOptions {
    fn default() -> Self {
        ReplayOptions {
            speed: Some(1.0),
            loops: 1,
            rate: None,
            rewrite: None,
            count: None,
            duration: None,
            sleep_above: Duration::from_millis(2),
            on_stall: OnStall::default(),
        }
    }
}

/// A replay's own rate.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ReplayRate {
    /// Packets per second (tcpreplay -p).
    Pps(f64),
    /// Bits per second, of each packet's bytes on the wire plus `per_frame` bytes (tcpreplay's
    /// -M counts the packet's bytes alone: 0; gen's `--rate 5Gbps` the CRC, preamble and
    /// gap: 24).
    Bps {
        /// Bits per second.
        bps: f64,
        /// Bytes counted per frame beyond its own.
        per_frame: u32,
    },
}

impl ReplayRate {
    /// Nanoseconds from a packet of `wire` bytes on the wire to the next one.
    #[inline]
    fn gap_ns(self, wire: u32) -> f64 {
        match self {
            ReplayRate::Pps(p) => 1e9 / p.max(1e-9),
            ReplayRate::Bps { bps, per_frame } => {
                f64::from(wire.saturating_add(per_frame)) * 8.0 * 1e9 / bps.max(1e-9)
            }
        }
    }
}

/// Results of a replay.
#[derive(Clone, Debug, Default)]
pub struct ReplayReport {
    /// Packets handed to the output.
    pub pkts: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Loops completed.
    pub loops: u64,
    /// First and last departure (clock ns).
    pub first_ns: u64,
    /// Last departure.
    pub last_ns: u64,
    /// How well the recorded gaps were kept (timed replay only).
    pub precision: Precision,
    /// The output's counters.
    pub port: PortStats,
    /// Why the replay ended.
    pub ended: ReplayEnd,
    /// Packets read but not sent: the port took nothing for a long while, or the replay
    /// stopped while it was full.
    pub unsent: u64,
    /// Packets read but not sent because they could not be put on Ethernet (or rewritten),
    /// by reason.
    pub refused: RefusedCounts,
}

impl ReplayReport {
    /// Packets the output took: those handed to it less those it dropped on transmit.
    pub fn taken(&self) -> u64 {
        super::taken_by(self.pkts, self.bytes, &self.port).0
    }

    /// Bytes the output took (see [`super::taken_by`]).
    pub fn taken_bytes(&self) -> u64 {
        super::taken_by(self.pkts, self.bytes, &self.port).1
    }
}

/// Why a replay ended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReplayEnd {
    /// Every loop was played.
    #[default]
    Done,
    /// The packet count was reached.
    Count,
    /// The time limit was reached.
    Duration,
    /// The stop flag was set (a signal).
    Stopped,
    /// The capture has no packet: further loops would send nothing.
    Empty,
    /// No packet of the capture could be put on Ethernet (see [`ReplayReport::refused`]).
    NothingSendable,
    /// The output takes no more ([`Port::tx_ended`]): tcpdump's `-W` file limit with `-G`.
    FileLimit,
}

impl ReplayEnd {
    /// How the summary says it.
    pub fn text(self) -> &'static str {
        match self {
            ReplayEnd::Done => "every loop played",
            ReplayEnd::Count => "count reached",
            ReplayEnd::Duration => "time limit",
            ReplayEnd::Stopped => "interrupted",
            ReplayEnd::Empty => "the capture has no packet",
            ReplayEnd::NothingSendable => "no packet of the capture could be sent",
            ReplayEnd::FileLimit => "file limit (-W)",
        }
    }
}

/// Longest sleep between two looks at the stop flag and the time limit.
const SLICE_NS: u64 = 20_000_000;

/// Replays the captures `open()` returns (called once per loop) on `out`.
pub fn run(
    open: impl FnMut() -> Result<Box<dyn Port>, PortError>,
    out: &mut dyn Port,
    opts: &ReplayOptions,
    clock: &dyn Clock,
    stop: &AtomicBool,
) -> Result<ReplayReport, PortError> {
    run_observed(open, out, opts, clock, stop, Duration::MAX, |_| {})
}

/// A replay's progress, given about every interval by [`run_observed`].
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ReplayTick {
    /// When it was read (clock ns).
    pub t_ns: u64,
    /// Packets and bytes sent so far (as [`ReplayReport`] counts them).
    pub pkts: u64,
    /// Bytes sent so far.
    pub bytes: u64,
    /// Loops of the capture played whole so far.
    pub loops: u64,
    /// At the capture's pace: how late the last packet left after its scheduled time (ns);
    /// 0 as fast as possible.
    pub late_ns: u64,
    /// The output port's counters (its drops by reason).
    pub port: PortStats,
}

/// As [`run`], calling `on_tick` about every `interval` (between batches: one comparison of
/// the clock already read per batch, and a wait for the capture's pace ticks too).
pub fn run_observed(
    mut open: impl FnMut() -> Result<Box<dyn Port>, PortError>,
    out: &mut dyn Port,
    opts: &ReplayOptions,
    clock: &dyn Clock,
    stop: &AtomicBool,
    interval: Duration,
    mut on_tick: impl FnMut(&ReplayTick),
) -> Result<ReplayReport, PortError> {
    let mut rep = ReplayReport::default();
    let t0 = clock.now_ns();
    let mut ticker = Ticker::new(t0, interval);
    // -c and -t: the count is of packets handed to the output.
    let limits = Limits::new(opts.count, opts.duration, t0);
    let mut late_ns = 0u64;
    let tick = |rep: &ReplayReport, out: &mut dyn Port, now: u64, late_ns: u64| ReplayTick {
        t_ns: now,
        pkts: rep.pkts,
        bytes: rep.bytes,
        loops: rep.loops,
        late_ns,
        port: out.stats(),
    };
    let mut batch = Batch::new();
    let mut send = Batch::new();
    let sleep_above = opts.sleep_above.as_nanos() as u64;
    // The departure time of the previous loop's end: loops follow each other at the recorded
    // spacing of their first packets.
    let mut base: Option<(u64, u64)> = None; // (clock at loop start, first capture ts)
    let mut offset = 0u64;
    // The catch-up bounds, set up at the first batch from its mean recorded gap.
    let mut pacer: Option<Pacer> = None;
    // Why to stop now, if it is time to.
    let halt = |now: u64| {
        if stop.load(Ordering::Relaxed) {
            Some(ReplayEnd::Stopped)
        } else if limits.time_up(now) {
            Some(ReplayEnd::Duration)
        } else {
            None
        }
    };
    // Rewriting: packets are copied into frames of the replay's own.
    let own = match &opts.rewrite {
        Some(_) => Some(rewrite_pool()?),
        None => None,
    };
    // At a rate of its own: the first recorded time, and the next packet's scheduled time
    // after it (ns, a fraction kept; apart, as an f64 holds today's ns since the epoch only to
    // 256 ns).
    let mut vnext: Option<(u64, f64)> = None;
    // At the capture's spacing, what is added to the recorded times of this loop's packets so
    // that a written capture's times go on from the previous loop's (never back).
    let mut ts_shift = 0u64;
    let mut played = 0u64;
    'outer: while opts.loops == 0 || played < opts.loops {
        played += 1;
        let mut input = open()?;
        let links: Vec<LinkType> = input.interfaces().iter().map(|i| i.link).collect();
        let mut last_ts = 0u64;
        let mut first_ts: Option<u64> = None;
        let pkts_before = rep.pkts;
        loop {
            if let Some(e) = halt(clock.now_ns()) {
                rep.ended = e;
                break 'outer;
            }
            if limits.count.is_some() {
                if limits.count_reached(rep.pkts) {
                    rep.ended = ReplayEnd::Count;
                    break 'outer;
                }
                batch.set_limit(limits.room(rep.pkts, BATCH));
            }
            let n = input.rx(&mut batch)?;
            if n == 0 {
                if input.is_finished() {
                    break;
                }
                std::hint::spin_loop();
                continue;
            }
            match &own {
                Some(p) => send.bind(p),
                None => send.bind(batch.pool().ok_or(PortError::Unsupported {
                    port: input.name().to_string(),
                    op: "replay from a port without a pool",
                })?),
            }
            if let Some(r) = opts.rate {
                at_rate(&mut batch, n, r, &mut vnext);
            }
            let mut k = 0;
            while k < n {
                let mut m = n - k;
                let mut now = clock.now_ns();
                if let Some(speed) = opts.speed.or(opts.rate.map(|_| 1.0)) {
                    let ts = batch.descs()[k].ts;
                    let (c0, ts0) = *base.get_or_insert((now, ts));
                    // Saturating: a gap of centuries waits (in slices) until a stop, never wraps.
                    let at = |ts: u64, offset: u64| {
                        c0.saturating_add(offset).saturating_add(
                            (ts.saturating_sub(ts0) as f64 / speed.max(1e-9)) as u64,
                        )
                    };
                    let pacer = pacer.get_or_insert_with(|| {
                        first_pacer(&batch.descs()[k..n], speed, opts.on_stall, &mut rep)
                    });
                    // Later than the catch-up window allows: the rest of the schedule moves.
                    let ex = pacer.excess(at(ts, offset), now);
                    if ex > 0 {
                        offset = offset.saturating_add(ex);
                        pacer.shift(ex);
                        rep.precision.slip(ex);
                    }
                    let t = pacer.earliest(at(ts, offset));
                    while now < t {
                        if let Some(e) = halt(now) {
                            rep.ended = e;
                            break 'outer;
                        }
                        if ticker.due(now) {
                            on_tick(&tick(&rep, &mut *out, now, late_ns));
                        }
                        if t - now > sleep_above {
                            let ns = (t - now - sleep_above / 2).min(SLICE_NS);
                            std::thread::sleep(Duration::from_nanos(ns));
                        } else {
                            std::hint::spin_loop();
                        }
                        now = clock.now_ns();
                    }
                    // The packets that may leave now: due, and within the peak rate and burst
                    // while catching up.
                    m = 0;
                    for d in &batch.descs()[k..n] {
                        let s = at(d.ts, offset);
                        if m > 0 && (pacer.earliest(s) > now || pacer.excess(s, now) > 0) {
                            break;
                        }
                        pacer.depart(s, now);
                        rep.precision.record(s, now);
                        late_ns = now.saturating_sub(s);
                        m += 1;
                    }
                }
                let times = (&mut last_ts, &mut first_ts);
                let sent = match &opts.rewrite {
                    None => stage_copy(&batch, k..k + m, &mut send, ts_shift, &mut rep, times),
                    Some(rw) => {
                        let staged = (&batch, k..k + m, &mut send);
                        stage_rewritten(rw, staged, &links, ts_shift, &mut rep, times)
                    }
                };
                if rep.first_ns == 0 {
                    rep.first_ns = now;
                }
                rep.last_ns = now;
                rep.pkts += sent as u64;
                transmit(out, &mut send, &mut rep, &|| halt(clock.now_ns()).is_some())?;
                if out.tx_ended() {
                    break 'outer; // tcpdump's -W file limit: the output takes no more.
                }
                k += m;
                out.tick(now)?;
                if ticker.due(now) {
                    on_tick(&tick(&rep, &mut *out, now, late_ns));
                }
            }
            if opts.rewrite.is_some() {
                // Copied: the input's frames go back to it.
                batch.clear();
            } else {
                batch.forget();
            }
        }
        rep.loops += 1;
        if rep.pkts == pkts_before {
            // Nothing in this loop: nothing in the next ones either.
            rep.ended = if rep.refused.total() > 0 {
                ReplayEnd::NothingSendable
            } else {
                ReplayEnd::Empty
            };
            break;
        }
        if opts.rate.is_none() {
            let this = (first_ts, last_ts, rep.pkts - pkts_before);
            next_loop(this, &rep, opts, (&mut ts_shift, &mut offset), &mut base);
        }
    }
    batch.clear();
    if out.tx_ended() {
        // The output's -W file limit stopped the replay (through the stop flag or at once).
        rep.ended = ReplayEnd::FileLimit;
    }
    out.tx_finish()?;
    rep.port = out.stats();
    Ok(rep)
}

/// The pool rewritten packets are copied into (big frames for long ones).
fn rewrite_pool() -> Result<Arc<Pool>, PortError> {
    Ok(Arc::new(Pool::new(&PoolConfig {
        big_frames: DEFAULT_BIG_FRAMES,
        ..Default::default()
    })?))
}

/// The catch-up bounds, set up at the first batch `d` from its mean recorded gap (at `speed`).
fn first_pacer(d: &[Desc], speed: f64, on_stall: OnStall, rep: &mut ReplayReport) -> Pacer {
    let span = d.last().map_or(0, |l| l.ts.saturating_sub(d[0].ts));
    let gap = (span as f64 / (d.len().max(2) - 1) as f64 / speed.max(1e-9)).max(1.0);
    let behind = sched::behind_above(gap);
    rep.precision = Precision::with_behind_above(behind);
    Pacer::new(on_stall, gap, behind)
}

/// At a rate of its own: each of the `n` packets' time becomes its place in the schedule of rate `r`
/// (`vnext`: the first recorded time and the next scheduled time after it).
fn at_rate(batch: &mut Batch, n: usize, r: ReplayRate, vnext: &mut Option<(u64, f64)>) {
    for i in 0..n {
        let d = batch.descs()[i];
        let (v0, v) = *vnext.get_or_insert((d.ts, 0.0));
        batch.set_ts(i, v0.saturating_add(v as u64));
        *vnext = Some((v0, v + r.gap_ns(d.wire_len)));
    }
}

/// At the capture's spacing, after a loop that sent `this` (its first and last recorded
/// times, its packets): the next loop's recorded times go on one mean gap after this loop's
/// last packet (`ts_shift`), and it starts one mean gap after it (`offset` from `base`).
fn next_loop(
    (first_ts, last_ts, sent): (Option<u64>, u64, u64),
    rep: &ReplayReport,
    opts: &ReplayOptions,
    (ts_shift, offset): (&mut u64, &mut u64),
    base: &mut Option<(u64, u64)>,
) {
    if let Some(t0) = first_ts {
        let span = last_ts.saturating_sub(t0);
        let n = sent;
        let gap = if n > 1 { span / (n - 1) } else { 0 };
        *ts_shift = ts_shift.saturating_add(span.saturating_add(gap));
    }
    if let Some((_, ts0)) = *base {
        let span = last_ts.saturating_sub(ts0);
        let n = rep.pkts / rep.loops;
        let gap = if n > 1 { span / (n - 1) } else { 0 };
        *offset = offset.saturating_add(
            (span.saturating_add(gap) as f64 / opts.speed.unwrap_or(1.0).max(1e-9)) as u64,
        );
        *base = base.map(|(c, _)| (c, ts0));
    }
}

/// The link type of `d`'s interface (the first one's, else Ethernet).
fn link_of(links: &[LinkType], d: &Desc) -> LinkType {
    links
        .get(usize::from(d.port))
        .or(links.first())
        .copied()
        .unwrap_or(LinkType::ETHERNET)
}

/// Puts the packets `range` of `batch` into `send` as they are (their recorded times moved on
/// by `ts_shift`), counting their bytes and the times they span; returns how many.
fn stage_copy(
    batch: &Batch,
    range: std::ops::Range<usize>,
    send: &mut Batch,
    ts_shift: u64,
    rep: &mut ReplayReport,
    (last_ts, first_ts): (&mut u64, &mut Option<u64>),
) -> usize {
    for d in &batch.descs()[range.clone()] {
        rep.bytes += u64::from(d.len);
        *last_ts = (*last_ts).max(d.ts);
        first_ts.get_or_insert(d.ts);
    }
    let from = send.len();
    send.extend(&batch.descs()[range.clone()]);
    if ts_shift > 0 {
        for d in &mut send.descs_mut()[from..] {
            d.ts = d.ts.saturating_add(ts_shift);
        }
    }
    range.len()
}

/// Copies the packets `range` of `batch` into fresh frames of `send`, rewritten by `rw`
/// (their recorded times moved on by `ts_shift`); what cannot be rewritten is counted as
/// refused. Returns how many were staged.
fn stage_rewritten(
    rw: &Rewrite,
    (batch, range, send): (&Batch, std::ops::Range<usize>, &mut Batch),
    links: &[LinkType],
    ts_shift: u64,
    rep: &mut ReplayReport,
    (last_ts, first_ts): (&mut u64, &mut Option<u64>),
) -> usize {
    let mut sent = 0;
    for i in range {
        let d = batch.descs()[i];
        *last_ts = (*last_ts).max(d.ts);
        first_ts.get_or_insert(d.ts);
        let data = batch.data(i);
        let fresh = if data.len() + 18 <= send.frame_room().0 as usize {
            send.alloc()
        } else {
            send.alloc_big()
        };
        let Some(mut f) = fresh else {
            rep.refused.add(rewrite::Refused::TooLong);
            continue;
        };
        match rw.apply(link_of(links, &d), data, d.wire_len, f.buf()) {
            Ok((len, wire_len)) => {
                f.push(Desc {
                    ts: d.ts.saturating_add(ts_shift),
                    len: len as u32,
                    wire_len,
                    // Its interface, for a pcapng output.
                    port: d.port,
                    flags: d.flags & (Desc::F_INBOUND | Desc::F_OUTBOUND),
                    ..Desc::default()
                });
                rep.bytes += len as u64;
                sent += 1;
            }
            Err(why) => rep.refused.add(why),
        }
    }
    sent
}

/// Sends what is staged in `send` to `out`. A port that takes nothing for long (or a stop
/// meanwhile, `halted`) leaves the rest unsent, counted as such.
fn transmit(
    out: &mut dyn Port,
    send: &mut Batch,
    rep: &mut ReplayReport,
    halted: &dyn Fn() -> bool,
) -> Result<(), PortError> {
    let mut tries = 0u32;
    while !send.is_empty() {
        out.tx(send)?;
        if !send.is_empty() && out.tx_ended() {
            // tcpdump's -W file limit: the rest will never be taken.
            break;
        }
        tries += 1;
        if tries.is_multiple_of(1024) && (tries >= 1 << 20 || halted()) {
            break;
        }
    }
    if !send.is_empty() {
        rep.unsent += send.len() as u64;
        rep.pkts -= send.len() as u64;
        rep.bytes -= send.descs().iter().map(|d| u64::from(d.len)).sum::<u64>();
        send.clear();
    }
    Ok(())
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::port::pcap::PcapPort;
    use crate::port::PortOptions;
    use std::sync::atomic::AtomicU64;
    use std::sync::{Arc, Mutex};

    /// A clock that moves 1 µs at every reading (and as the port says).
    struct Fake(Arc<AtomicU64>);

    impl Clock for Fake {
        fn now_ns(&self) -> u64 {
            self.0.fetch_add(1_000, Ordering::Relaxed)
        }
    }

    /// Takes every packet, notes when, and stalls the clock 5 s at its first call.
    struct Stalls {
        clock: Arc<AtomicU64>,
        sent: Arc<Mutex<Vec<(u64, usize)>>>,
    }

    impl Port for Stalls {
        fn name(&self) -> &str {
            "stalls"
        }
        fn rx(&mut self, _: &mut Batch) -> Result<usize, PortError> {
            Ok(0)
        }
        fn tx(&mut self, b: &mut Batch) -> Result<usize, PortError> {
            let mut s = self.sent.lock().unwrap();
            s.push((self.clock.load(Ordering::Relaxed), b.len()));
            if s.len() == 1 {
                self.clock.fetch_add(5_000_000_000, Ordering::Relaxed);
            }
            let n = b.len();
            b.clear();
            Ok(n)
        }
        fn stats(&mut self) -> PortStats {
            PortStats::default()
        }
    }

    /// A capture of `n` 60 B packets 1 ms apart.
    fn capture(n: u32) -> Vec<u8> {
        let mut v = Vec::new();
        for x in [0xa1b2_c3d4u32.to_le_bytes().to_vec(), vec![2, 0, 4, 0]] {
            v.extend(x);
        }
        v.extend([0u8; 8]);
        v.extend(65535u32.to_le_bytes());
        v.extend(1u32.to_le_bytes());
        for i in 0..n {
            v.extend((i / 1000).to_le_bytes());
            v.extend((i % 1000 * 1000).to_le_bytes());
            v.extend(60u32.to_le_bytes());
            v.extend(60u32.to_le_bytes());
            v.extend([0u8; 60]);
        }
        v
    }

    #[test]
    fn a_replay_that_fell_behind_catches_up_within_gens_bounds() {
        let now = Arc::new(AtomicU64::new(1_000_000_000));
        let sent = Arc::new(Mutex::new(Vec::new()));
        let mut out = Stalls {
            clock: now.clone(),
            sent: sent.clone(),
        };
        let file = capture(2000);
        let open = || -> Result<Box<dyn Port>, PortError> {
            Ok(Box::new(PcapPort::from_reader(
                "t",
                Box::new(std::io::Cursor::new(file.clone())),
                &PortOptions::default(),
            )?))
        };
        let stop = AtomicBool::new(false);
        let opts = ReplayOptions::default();
        let r = run(open, &mut out, &opts, &Fake(now), &stop).unwrap();
        assert_eq!(r.pkts, 2000);
        // 5 s late: the second beyond the catch-up window is caught up, the rest given up.
        assert_eq!(r.precision.slips, 1, "{}", r.precision.slipped_ns);
        let slipped = r.precision.slipped_ns;
        assert!(
            (3_990_000_000..=4_010_000_000).contains(&slipped),
            "{slipped}"
        );
        // Never more than the burst at once, and at most 8x the recorded rate beyond it: in
        // any millisecond, 32 + 8 packets (and one for the edges).
        let s = sent.lock().unwrap();
        let mut times = Vec::new();
        for &(t, n) in s.iter().skip(1) {
            times.extend(std::iter::repeat_n(t, n));
        }
        let mut worst = 0;
        let mut lo = 0;
        for hi in 0..times.len() {
            while times[hi] - times[lo] >= 1_000_000 {
                lo += 1;
            }
            worst = worst.max(hi - lo + 1);
        }
        assert!(worst <= 41, "{worst} packets in a millisecond");
    }
}

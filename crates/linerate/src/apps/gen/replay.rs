//! pcap replay: packets of a capture sent at their recorded spacing, sped up or slowed down
//! (`speed`), or as fast as the port takes them, once or several times.
//!
//! A replay always stops on time: a long gap between two recorded timestamps (or a slow
//! `speed`) is waited for in slices that look at the stop flag and the time limit, and a capture
//! with no packet ends the replay after one loop, whatever `loops` asks.

use super::sched::Precision;
use crate::mem::{Batch, BATCH};
use crate::port::{Port, PortError, PortStats};
use crate::time::Clock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// How to replay.
#[derive(Clone, Debug)]
pub struct ReplayOptions {
    /// Multiply the recorded rate by this (2.0 = twice as fast); None: as fast as possible.
    pub speed: Option<f64>,
    /// Times to play the capture (≥ 1).
    pub loops: u64,
    /// Stop after this many packets in all.
    pub count: Option<u64>,
    /// Stop after this long.
    pub duration: Option<Duration>,
    /// Sleep instead of spinning when the next departure is further away than this.
    pub sleep_above: Duration,
}

impl Default for ReplayOptions {
    fn default() -> Self {
        ReplayOptions {
            speed: Some(1.0),
            loops: 1,
            count: None,
            duration: None,
            sleep_above: Duration::from_millis(2),
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
        }
    }
}

/// Longest sleep between two looks at the stop flag and the time limit.
const SLICE_NS: u64 = 20_000_000;

/// Replays the captures `open()` returns (called once per loop) on `out`.
pub fn run(
    mut open: impl FnMut() -> Result<Box<dyn Port>, PortError>,
    out: &mut dyn Port,
    opts: &ReplayOptions,
    clock: &dyn Clock,
    stop: &AtomicBool,
) -> Result<ReplayReport, PortError> {
    let mut rep = ReplayReport::default();
    let mut batch = Batch::new();
    let mut send = Batch::new();
    let sleep_above = opts.sleep_above.as_nanos() as u64;
    // The departure time of the previous loop's end: loops follow each other at the recorded
    // spacing of their first packets.
    let mut base: Option<(u64, u64)> = None; // (clock at loop start, first capture ts)
    let mut offset = 0u64;
    let deadline = opts.duration.map(|d| {
        clock
            .now_ns()
            .saturating_add(d.as_nanos().min(u64::MAX as u128) as u64)
    });
    // Why to stop now, if it is time to.
    let halt = |now: u64| {
        if stop.load(Ordering::Relaxed) {
            Some(ReplayEnd::Stopped)
        } else if deadline.is_some_and(|d| now >= d) {
            Some(ReplayEnd::Duration)
        } else {
            None
        }
    };
    'outer: for _ in 0..opts.loops.max(1) {
        let mut input = open()?;
        let mut last_ts = 0u64;
        let pkts_before = rep.pkts;
        loop {
            if let Some(e) = halt(clock.now_ns()) {
                rep.ended = e;
                break 'outer;
            }
            if let Some(c) = opts.count {
                let left = c.saturating_sub(rep.pkts);
                if left == 0 {
                    rep.ended = ReplayEnd::Count;
                    break 'outer;
                }
                batch.set_limit(left.min(BATCH as u64) as usize);
            }
            let n = input.rx(&mut batch)?;
            if n == 0 {
                if input.is_finished() {
                    break;
                }
                std::hint::spin_loop();
                continue;
            }
            send.bind(batch.pool().ok_or(PortError::Unsupported {
                port: input.name().to_string(),
                op: "replay from a port without a pool",
            })?);
            let mut k = 0;
            while k < n {
                let mut m = n - k;
                let mut now = clock.now_ns();
                if let Some(speed) = opts.speed {
                    let ts = batch.descs()[k].ts;
                    let (c0, ts0) = *base.get_or_insert((now, ts));
                    // Saturating: a gap of centuries waits (in slices) until a stop, never wraps.
                    let at = |ts: u64| {
                        c0.saturating_add(offset).saturating_add(
                            (ts.saturating_sub(ts0) as f64 / speed.max(1e-9)) as u64,
                        )
                    };
                    let t = at(ts);
                    while now < t {
                        if let Some(e) = halt(now) {
                            rep.ended = e;
                            break 'outer;
                        }
                        if t - now > sleep_above {
                            let ns = (t - now - sleep_above / 2).min(SLICE_NS);
                            std::thread::sleep(Duration::from_nanos(ns));
                        } else {
                            std::hint::spin_loop();
                        }
                        now = clock.now_ns();
                    }
                    m = batch.descs()[k..n]
                        .iter()
                        .take_while(|d| at(d.ts) <= now)
                        .count()
                        .max(1);
                    for d in &batch.descs()[k..k + m] {
                        rep.precision.record(at(d.ts), now);
                    }
                }
                for d in &batch.descs()[k..k + m] {
                    rep.bytes += u64::from(d.len);
                    last_ts = last_ts.max(d.ts);
                }
                send.extend(&batch.descs()[k..k + m]);
                if rep.first_ns == 0 {
                    rep.first_ns = now;
                }
                rep.last_ns = now;
                rep.pkts += m as u64;
                // A port that takes nothing for long (or a stop meanwhile) leaves the rest
                // unsent, counted as such.
                let mut tries = 0u32;
                while !send.is_empty() {
                    out.tx(&mut send)?;
                    tries += 1;
                    if tries.is_multiple_of(1024)
                        && (tries >= 1 << 20 || halt(clock.now_ns()).is_some())
                    {
                        break;
                    }
                }
                if !send.is_empty() {
                    rep.unsent += send.len() as u64;
                    rep.pkts -= send.len() as u64;
                    rep.bytes -= send.descs().iter().map(|d| u64::from(d.len)).sum::<u64>();
                    send.clear();
                }
                k += m;
            }
            batch.forget();
        }
        rep.loops += 1;
        if rep.pkts == pkts_before {
            // Nothing in this loop: nothing in the next ones either.
            rep.ended = ReplayEnd::Empty;
            break;
        }
        // The next loop starts one mean gap after this one's last packet.
        if let Some((_, ts0)) = base {
            let span = last_ts.saturating_sub(ts0);
            let n = rep.pkts / rep.loops;
            let gap = if n > 1 { span / (n - 1) } else { 0 };
            offset = offset.saturating_add(
                (span.saturating_add(gap) as f64 / opts.speed.unwrap_or(1.0).max(1e-9)) as u64,
            );
            base = base.map(|(c, _)| (c, ts0));
        }
    }
    batch.clear();
    out.flush()?;
    rep.port = out.stats();
    Ok(rep)
}

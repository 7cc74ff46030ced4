//! pcap replay: packets of a capture sent at their recorded spacing, sped up or slowed down
//! (`speed`), or as fast as the port takes them, once or several times.

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
    /// Sleep instead of spinning when the next departure is further away than this.
    pub sleep_above: Duration,
}

impl Default for ReplayOptions {
    fn default() -> Self {
        ReplayOptions {
            speed: Some(1.0),
            loops: 1,
            count: None,
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
}

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
    'outer: for _ in 0..opts.loops.max(1) {
        let mut input = open()?;
        let mut last_ts = 0u64;
        loop {
            if stop.load(Ordering::Relaxed) {
                break 'outer;
            }
            if let Some(c) = opts.count {
                let left = c.saturating_sub(rep.pkts);
                if left == 0 {
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
                    let at = |ts: u64| {
                        c0 + offset + (ts.saturating_sub(ts0) as f64 / speed.max(1e-9)) as u64
                    };
                    let t = at(ts);
                    while now < t {
                        if t - now > sleep_above {
                            std::thread::sleep(Duration::from_nanos(t - now - sleep_above / 2));
                            if stop.load(Ordering::Relaxed) {
                                break 'outer;
                            }
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
                let mut tries = 0u32;
                while !send.is_empty() {
                    out.tx(&mut send)?;
                    tries += 1;
                    if tries > 1_000_000 {
                        send.clear();
                    }
                }
                k += m;
            }
            batch.forget();
        }
        rep.loops += 1;
        // The next loop starts one mean gap after this one's last packet.
        if let Some((_, ts0)) = base {
            let span = last_ts.saturating_sub(ts0);
            let n = rep.pkts / rep.loops;
            let gap = if n > 1 { span / (n - 1) } else { 0 };
            offset += ((span + gap) as f64 / opts.speed.unwrap_or(1.0).max(1e-9)) as u64;
            base = base.map(|(c, _)| (c, ts0));
        }
    }
    batch.clear();
    out.flush()?;
    rep.port = out.stats();
    Ok(rep)
}

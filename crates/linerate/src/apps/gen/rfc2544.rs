//! RFC 2544 benchmarks between two ports: throughput (binary search for the highest rate
//! without loss), latency at that rate, frame loss from 100% down to 10% of the line rate, and
//! back-to-back bursts, for each frame size.
//!
//! Each trial sends probes of a stream id of its own (so late frames of an earlier trial are
//! not counted) from one thread while another receives and tracks them.

use super::latency::{LatSummary, Tracker};
use super::sched::Pattern;
use super::template::TemplateSpec;
use super::vary::SizeSpec;
use super::{GenError, GenOptions, StreamSpec};
use crate::mem::Batch;
use crate::port::{Port, PortError};
use crate::time::Clock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The frame sizes of RFC 2544 for Ethernet.
pub const SIZES: [u32; 7] = [64, 128, 256, 512, 1024, 1280, 1518];

/// What to measure.
#[derive(Clone, Debug)]
pub struct Rfc2544Options {
    /// Frame sizes with CRC.
    pub sizes: Vec<u32>,
    /// Length of one trial.
    pub trial: Duration,
    /// Wait for late frames after a trial.
    pub settle: Duration,
    /// Stop the throughput search when the interval is narrower than this (% of line rate).
    pub resolution_pct: f64,
    /// Line rate, bits per second (frames plus 20 B preamble and gap).
    pub line_bps: f64,
    /// Rates of the frame-loss test, % of line rate.
    pub loss_steps: Vec<f64>,
    /// Longest burst of the back-to-back test (0: skip it).
    pub b2b_max: u64,
    /// Headers of the test frames.
    pub template: TemplateSpec,
}

impl Default for Rfc2544Options {
    fn default() -> Self {
        Rfc2544Options {
            sizes: SIZES.to_vec(),
            trial: Duration::from_secs(1),
            settle: Duration::from_millis(100),
            resolution_pct: 1.0,
            line_bps: 10e9,
            loss_steps: (1..=10).rev().map(|k| f64::from(k) * 10.0).collect(),
            b2b_max: 65_536,
            template: TemplateSpec::default(),
        }
    }
}

/// What one trial found.
#[derive(Clone, Debug, PartialEq)]
pub struct Trial {
    /// Which test: "throughput", "latency", "loss" or "back-to-back".
    pub kind: &'static str,
    /// Frame size with CRC.
    pub size: u32,
    /// Offered rate, % of line rate (100 for back-to-back).
    pub rate_pct: f64,
    /// Offered packets per second.
    pub offered_pps: f64,
    /// Packets per second the generator achieved.
    pub achieved_pps: f64,
    /// Frames sent.
    pub sent: u64,
    /// Frames received (distinct).
    pub received: u64,
    /// Latency of the received frames.
    pub latency: LatSummary,
}

impl Trial {
    /// Frames lost, % of those sent.
    pub fn loss_pct(&self) -> f64 {
        if self.sent == 0 {
            return 0.0;
        }
        100.0 * self.sent.saturating_sub(self.received) as f64 / self.sent as f64
    }
}

/// Results for one frame size.
#[derive(Clone, Debug, PartialEq)]
pub struct SizeResult {
    /// Frame size with CRC.
    pub size: u32,
    /// The highest zero-loss trial (None if even the lowest rate lost frames).
    pub throughput: Option<Trial>,
    /// Latency measured at the throughput rate.
    pub latency: Option<Trial>,
    /// Frame loss per step.
    pub loss: Vec<Trial>,
    /// Longest burst at line rate without loss, frames.
    pub back_to_back: Option<u64>,
}

/// Line-rate packets per second at `size` (with CRC).
pub fn line_pps(line_bps: f64, size: u32) -> f64 {
    line_bps / ((f64::from(size) + 20.0) * 8.0)
}

/// Binary search for the highest rate (in % of line rate, within `resolution`) at which
/// `lossless(rate)` holds. Tries 100% first. Returns the highest lossless rate tried, if any.
pub fn search(resolution: f64, mut lossless: impl FnMut(f64) -> bool) -> Option<f64> {
    if lossless(100.0) {
        return Some(100.0);
    }
    let (mut lo, mut hi) = (0.0f64, 100.0f64);
    let mut best = None;
    while hi - lo > resolution.max(0.001) {
        let mid = (lo + hi) / 2.0;
        if lossless(mid) {
            lo = mid;
            best = Some(mid);
        } else {
            hi = mid;
        }
    }
    best
}

/// Runs the benchmark: frames leave on `tx` and are expected back on `rx`. `progress` sees
/// every trial.
pub fn run(
    tx: &mut dyn Port,
    rx: &mut dyn Port,
    opts: &Rfc2544Options,
    clock: &dyn Clock,
    stop: &AtomicBool,
    mut progress: impl FnMut(&Trial),
) -> Result<Vec<SizeResult>, GenError> {
    let mut next_id = 0u16;
    let mut results = Vec::new();
    for &size in &opts.sizes {
        let line = line_pps(opts.line_bps, size);
        let mut trial = |kind: &'static str, pct: f64, count: Option<u64>| {
            let id = next_id;
            next_id = next_id.wrapping_add(1);
            let t = one_trial(tx, rx, opts, clock, stop, kind, size, pct, line, count, id)?;
            progress(&t);
            Ok::<Trial, GenError>(t)
        };
        let mut err = None;
        let mut best: Option<Trial> = None;
        search(opts.resolution_pct, |pct| {
            if err.is_some() || stop.load(Ordering::Relaxed) {
                return false;
            }
            match trial("throughput", pct, None) {
                Ok(t) => {
                    let ok = t.sent > 0 && t.received >= t.sent;
                    if ok && best.as_ref().is_none_or(|b| b.rate_pct < t.rate_pct) {
                        best = Some(t);
                    }
                    ok
                }
                Err(e) => {
                    err = Some(e);
                    false
                }
            }
        });
        if let Some(e) = err {
            return Err(e);
        }
        let latency = match &best {
            Some(b) => Some(trial("latency", b.rate_pct, None)?),
            None => None,
        };
        let mut loss = Vec::new();
        for &pct in &opts.loss_steps {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            loss.push(trial("loss", pct, None)?);
        }
        let back_to_back = if opts.b2b_max > 0 && !stop.load(Ordering::Relaxed) {
            // Largest burst (frames) with no loss, by binary search on the burst length.
            let (mut lo, mut hi) = (0u64, opts.b2b_max);
            let full = trial("back-to-back", 100.0, Some(hi))?;
            if full.received >= full.sent {
                lo = hi;
            }
            while hi - lo > (opts.b2b_max / 64).max(1) && !stop.load(Ordering::Relaxed) {
                let mid = lo + (hi - lo) / 2;
                let t = trial("back-to-back", 100.0, Some(mid))?;
                if t.received >= t.sent {
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
            Some(lo)
        } else {
            None
        };
        results.push(SizeResult {
            size,
            throughput: best,
            latency,
            loss,
            back_to_back,
        });
    }
    Ok(results)
}

#[allow(clippy::too_many_arguments)]
fn one_trial(
    tx: &mut dyn Port,
    rx: &mut dyn Port,
    opts: &Rfc2544Options,
    clock: &dyn Clock,
    stop: &AtomicBool,
    kind: &'static str,
    size: u32,
    pct: f64,
    line: f64,
    count: Option<u64>,
    id: u16,
) -> Result<Trial, GenError> {
    let pps = line * pct / 100.0;
    let gopts = GenOptions {
        streams: vec![StreamSpec {
            id,
            template: opts.template.clone(),
            size: SizeSpec::Fixed(size),
            // Back-to-back bursts go as fast as the port takes them.
            pps: if count.is_some() { None } else { Some(pps) },
            pattern: Pattern::Cbr,
            probe: true,
            ..Default::default()
        }],
        count,
        duration: if count.is_some() {
            None
        } else {
            Some(opts.trial)
        },
        ..Default::default()
    };
    let done = AtomicBool::new(false);
    let link = rx.link_type();
    let settle = opts.settle.as_nanos() as u64;
    let (rep, tracker) = std::thread::scope(|sc| {
        let h = sc.spawn(|| -> Result<Tracker, PortError> {
            let mut t = Tracker::new();
            let mut b = Batch::new();
            let mut last = clock.now_ns();
            loop {
                let n = rx.rx(&mut b)?;
                let now = clock.now_ns();
                if n > 0 {
                    t.observe(&b, link, now);
                    b.clear();
                    last = now;
                } else if stop.load(Ordering::Relaxed)
                    || rx.is_finished()
                    || (done.load(Ordering::Acquire) && now.saturating_sub(last) > settle)
                {
                    return Ok(t);
                } else {
                    std::hint::spin_loop();
                }
            }
        });
        let rep = super::run(tx, &gopts, clock, stop, None, |_| {});
        done.store(true, Ordering::Release);
        let t = h.join();
        (rep, t)
    });
    let rep = rep?;
    let tracker = match tracker {
        Ok(Ok(t)) => t,
        Ok(Err(e)) => return Err(e.into()),
        Err(_) => {
            return Err(GenError::Spec {
                stream: id,
                why: "the receive thread panicked".into(),
            })
        }
    };
    let (received, latency) = match tracker.stream(id) {
        Some(s) => (s.rx, s.summary()),
        None => (0, LatSummary::default()),
    };
    Ok(Trial {
        kind,
        size,
        rate_pct: pct,
        offered_pps: if count.is_some() { line } else { pps },
        achieved_pps: rep.pps(),
        sent: rep.pkts,
        received,
        latency,
    })
}

/// The results as CSV, one line per trial.
pub fn csv(results: &[SizeResult]) -> String {
    let mut s = String::from(
        "test,size,rate_pct,offered_pps,achieved_pps,sent,received,loss_pct,lat_min_ns,lat_avg_ns,lat_p50_ns,lat_p99_ns,lat_max_ns\n",
    );
    let mut row = |t: &Trial, kind: &str| {
        s += &format!(
            "{kind},{},{:.3},{:.0},{:.0},{},{},{:.4},{},{:.0},{},{},{}\n",
            t.size,
            t.rate_pct,
            t.offered_pps,
            t.achieved_pps,
            t.sent,
            t.received,
            t.loss_pct(),
            t.latency.min,
            t.latency.avg,
            t.latency.p50,
            t.latency.p99,
            t.latency.max
        );
    };
    for r in results {
        if let Some(t) = &r.throughput {
            row(t, "throughput");
        }
        if let Some(t) = &r.latency {
            row(t, "latency");
        }
        for t in &r.loss {
            row(t, "loss");
        }
    }
    for r in results {
        if let Some(b) = r.back_to_back {
            s += &format!("back-to-back,{},100,,,{b},{b},0,,,,,\n", r.size);
        }
    }
    s
}

/// The results as text tables: throughput and latency, then frame loss.
pub fn table(results: &[SizeResult]) -> String {
    let mut s = String::from(
        "RFC 2544 throughput and latency\n  size   rate %     offered pps    achieved pps   lat min     avg     p99     max (ns)   back-to-back\n",
    );
    for r in results {
        let b2b = r.back_to_back.map_or("-".to_string(), |b| b.to_string());
        match (&r.throughput, &r.latency) {
            (Some(t), l) => {
                let l = l.as_ref().map_or(t.latency, |l| l.latency);
                s += &format!(
                    "{:>6} {:>8.2} {:>15.0} {:>15.0} {:>9} {:>7.0} {:>7} {:>7}   {:>12}\n",
                    r.size,
                    t.rate_pct,
                    t.offered_pps,
                    t.achieved_pps,
                    l.min,
                    l.avg,
                    l.p99,
                    l.max,
                    b2b
                );
            }
            (None, _) => {
                s += &format!("{:>6}   no rate without loss {:>48}\n", r.size, b2b);
            }
        }
    }
    s += "RFC 2544 frame loss (% of frames sent)\n  size";
    if let Some(r) = results.first() {
        for t in &r.loss {
            s += &format!(" {:>6.0}%", t.rate_pct);
        }
    }
    s.push('\n');
    for r in results {
        s += &format!("{:>6}", r.size);
        for t in &r.loss {
            s += &format!(" {:>7.2}", t.loss_pct());
        }
        s.push('\n');
    }
    s
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn search_finds_the_threshold() {
        let mut tried = Vec::new();
        let r = search(0.5, |p| {
            tried.push(p);
            p <= 37.3
        });
        let r = r.unwrap();
        assert!(r <= 37.3 && r > 37.3 - 0.5, "{r}");
        assert_eq!(tried[0], 100.0);
        assert!(tried.len() <= 10, "{tried:?}");
        assert_eq!(search(1.0, |_| true), Some(100.0));
        assert_eq!(search(1.0, |_| false), None);
    }

    #[test]
    fn line_rate() {
        assert!((line_pps(10e9, 64) - 14_880_952.38).abs() < 1.0);
        assert!((line_pps(1e9, 1518) - 81_274.38).abs() < 1.0);
    }
}

//! RFC 2544 benchmarks between two ports: throughput (binary search for the highest rate
//! without loss), latency at that rate, frame loss from 100% down to 10% of the line rate, and
//! back-to-back bursts, for each frame size.
//!
//! Each trial sends probes of a stream id of its own (so late frames of an earlier trial are
//! not counted) from one thread while another receives and tracks them.
//!
//! A trial is only as good as its generator: one whose achieved rate falls more than
//! [`RATE_TOLERANCE`] short of the offered one is *generator-limited* and never passes (it did
//! not test the offered load). For each size the generator's own ceiling on the port is
//! measured first by an unpaced trial, and reported.

use super::latency::{receive_probes, LatSummary, ReceiveOptions};
use super::sched::Pattern;
use super::template::TemplateSpec;
use super::vary::SizeSpec;
use super::{GenError, GenOptions, StreamSpec, RATE_TOLERANCE};
use crate::port::Port;
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

    /// The generator achieved less than the offered rate (by more than [`RATE_TOLERANCE`]):
    /// the trial did not test the offered load.
    pub fn generator_limited(&self) -> bool {
        self.achieved_pps < self.offered_pps * (1.0 - RATE_TOLERANCE)
    }

    /// Every frame sent came back.
    pub fn lossless(&self) -> bool {
        self.sent > 0 && self.received >= self.sent
    }

    /// No loss at the offered load: lossless and not generator-limited.
    pub fn passed(&self) -> bool {
        self.lossless() && !self.generator_limited()
    }

    /// `pass`, `loss`, `generator-limited` (or both), for reports.
    pub fn verdict(&self) -> &'static str {
        match (self.lossless(), self.generator_limited()) {
            (true, false) => "pass",
            (true, true) => "generator-limited",
            (false, false) => "loss",
            (false, true) => "loss, generator-limited",
        }
    }
}

/// Results for one frame size.
#[derive(Clone, Debug, PartialEq)]
pub struct SizeResult {
    /// Frame size with CRC.
    pub size: u32,
    /// Line rate at this size, packets per second.
    pub line_pps: f64,
    /// The generator's own ceiling on the port at this size: the highest rate it achieved,
    /// unpaced (a trial of its own) or in any trial, packets per second.
    pub ceiling_pps: f64,
    /// The highest trial that passed: no loss and the offered rate achieved (None if no trial
    /// passed).
    pub throughput: Option<Trial>,
    /// Latency measured at the throughput rate.
    pub latency: Option<Trial>,
    /// Frame loss per step.
    pub loss: Vec<Trial>,
    /// Longest burst at line rate without loss, frames.
    pub back_to_back: Option<u64>,
    /// The back-to-back bursts left below line rate (the generator's ceiling): the bursts
    /// were not at line rate.
    pub back_to_back_limited: bool,
}

impl SizeResult {
    /// The ceiling in % of line rate.
    pub fn ceiling_pct(&self) -> f64 {
        if self.line_pps > 0.0 {
            100.0 * self.ceiling_pps / self.line_pps
        } else {
            0.0
        }
    }
}

/// Line-rate packets per second at `size` (with CRC).
pub fn line_pps(line_bps: f64, size: u32) -> f64 {
    line_bps / ((f64::from(size) + 20.0) * 8.0)
}

/// Binary search for the highest rate (in % of line rate, within `resolution`) at which
/// `lossless(rate)` holds (a trial passes). Tries 100% first. Returns the highest passing
/// rate tried, if any.
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
        // The generator's own ceiling on this port: an unpaced trial.
        let mut ceiling = if stop.load(Ordering::Relaxed) {
            0.0
        } else {
            trial("ceiling", 100.0, None)?.achieved_pps
        };
        let mut err = None;
        let mut best: Option<Trial> = None;
        search(opts.resolution_pct, |pct| {
            if err.is_some() || stop.load(Ordering::Relaxed) {
                return false;
            }
            match trial("throughput", pct, None) {
                Ok(t) => {
                    ceiling = ceiling.max(t.achieved_pps);
                    let ok = t.passed();
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
            let t = trial("loss", pct, None)?;
            ceiling = ceiling.max(t.achieved_pps);
            loss.push(t);
        }
        let mut b2b_limited = false;
        let back_to_back = if opts.b2b_max > 0 && !stop.load(Ordering::Relaxed) {
            // Largest burst (frames) with no loss, by binary search on the burst length.
            let (mut lo, mut hi) = (0u64, opts.b2b_max);
            let full = trial("back-to-back", 100.0, Some(hi))?;
            b2b_limited |= full.generator_limited();
            if full.received >= full.sent {
                lo = hi;
            }
            while hi - lo > (opts.b2b_max / 64).max(1) && !stop.load(Ordering::Relaxed) {
                let mid = lo + (hi - lo) / 2;
                let t = trial("back-to-back", 100.0, Some(mid))?;
                b2b_limited |= t.generator_limited();
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
            line_pps: line,
            ceiling_pps: ceiling,
            throughput: best,
            latency,
            loss,
            back_to_back,
            back_to_back_limited: b2b_limited,
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
    // Back-to-back bursts and the ceiling go as fast as the port takes them.
    let unpaced = count.is_some() || kind == "ceiling";
    let gopts = GenOptions {
        streams: vec![StreamSpec {
            id,
            template: opts.template.clone(),
            size: SizeSpec::Fixed(size),
            pps: if unpaced { None } else { Some(pps) },
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
    let ropts = ReceiveOptions {
        quiet: opts.settle,
        ..Default::default()
    };
    let (rep, got) = std::thread::scope(|sc| {
        let h = sc.spawn(|| receive_probes(rx, clock, &ropts, &done, stop, |_, _| {}));
        let rep = super::run(tx, &gopts, clock, stop, None, |_| {});
        done.store(true, Ordering::Release);
        let got = h.join();
        (rep, got)
    });
    let rep = rep?;
    let tracker = match got {
        Ok(Ok(got)) => got.tracker,
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
        offered_pps: if unpaced { line } else { pps },
        achieved_pps: rep.pps(),
        sent: rep.pkts,
        received,
        latency,
    })
}

/// The results as CSV, one line per trial (the throughput trial that passed, the latency
/// trial, the loss steps), a `ceiling` line per size (the generator's ceiling on the port) and
/// a back-to-back line per size. `verdict` is `pass`, `loss`, `generator-limited` or both.
pub fn csv(results: &[SizeResult]) -> String {
    let mut s = String::from(
        "test,size,rate_pct,offered_pps,achieved_pps,sent,received,loss_pct,lat_min_ns,lat_avg_ns,lat_p50_ns,lat_p99_ns,lat_max_ns,verdict\n",
    );
    let mut row = |t: &Trial, kind: &str| {
        s += &format!(
            "{kind},{},{:.3},{:.0},{:.0},{},{},{:.4},{},{:.0},{},{},{},{}\n",
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
            t.latency.max,
            t.verdict()
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
        s += &format!(
            "ceiling,{},{:.3},{:.0},{:.0},,,,,,,,,\n",
            r.size,
            r.ceiling_pct(),
            r.line_pps,
            r.ceiling_pps
        );
    }
    for r in results {
        if let Some(b) = r.back_to_back {
            s += &format!(
                "back-to-back,{},100,,,{b},{b},0,,,,,,{}\n",
                r.size,
                if r.back_to_back_limited {
                    "generator-limited"
                } else {
                    "pass"
                }
            );
        }
    }
    s
}

/// The results as text tables: throughput and latency, the generator's ceiling, then frame
/// loss (a `*` marks a step the generator did not reach).
pub fn table(results: &[SizeResult]) -> String {
    let mut s = String::from(
        "RFC 2544 throughput (no loss, offered rate achieved) and latency\n  size   rate %     offered pps    achieved pps   lat min     avg     p99     max (ns)   back-to-back\n",
    );
    for r in results {
        let b2b = r.back_to_back.map_or("-".to_string(), |b| {
            if r.back_to_back_limited {
                format!("{b}*")
            } else {
                b.to_string()
            }
        });
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
                s += &format!(
                    "{:>6}   no rate passed (without loss and at the offered rate) {:>22}\n",
                    r.size, b2b
                );
            }
        }
    }
    s += "Generator ceiling on the output port (unpaced, or the best any trial achieved)\n  size     line pps     ceiling pps  % of line\n";
    for r in results {
        s += &format!(
            "{:>6} {:>12.0} {:>15.0} {:>10.2}{}\n",
            r.size,
            r.line_pps,
            r.ceiling_pps,
            r.ceiling_pct(),
            if r.ceiling_pct() < 100.0 * (1.0 - RATE_TOLERANCE) {
                "  generator-limited: rates above it were not tested"
            } else {
                ""
            }
        );
    }
    s += "RFC 2544 frame loss (% of frames sent; * the generator did not reach the step)\n  size";
    if let Some(r) = results.first() {
        for t in &r.loss {
            s += &format!(" {:>7.0}%", t.rate_pct);
        }
    }
    s.push('\n');
    for r in results {
        s += &format!("{:>6}", r.size);
        for t in &r.loss {
            s += &format!(
                " {:>7.2}{}",
                t.loss_pct(),
                if t.generator_limited() { "*" } else { " " }
            );
        }
        s.push('\n');
    }
    if results.iter().any(|r| r.back_to_back_limited) {
        s += "* back-to-back: the generator did not reach line rate, the bursts were slower\n";
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

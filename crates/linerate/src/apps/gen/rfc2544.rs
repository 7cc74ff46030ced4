//! RFC 2544 benchmarks between two ports (section 26): throughput (a binary search in packets
//! per second for the highest rate without loss, the NDR, and with `--loss-tolerance` the
//! highest rate whose loss stays within it, the PDR), latency and jitter (RFC 3393 IPDV) at
//! that rate, frame loss from 100% down to 10% of the line rate, and back-to-back bursts, for
//! each frame size. The throughput search can be repeated: the median and the spread of the
//! repetitions are reported, with a warning when they disagree.
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

/// Repetitions of a size disagree when their NDRs (or PDRs) spread over more than this % of
/// the median, or twice the search's resolution if that is more.
pub const SPREAD_WARN_PCT: f64 = 5.0;

/// The search ends below this rate (packets per second) when nothing passed.
const MIN_PPS: f64 = 1.0;

/// What to measure.
#[derive(Clone, Debug)]
pub struct Rfc2544Options {
    /// Frame sizes with CRC.
    pub sizes: Vec<u32>,
    /// Length of one trial.
    pub trial: Duration,
    /// Wait for late frames after a trial.
    pub settle: Duration,
    /// Stop the throughput search when the interval between the highest passing and the
    /// lowest failing rate is narrower than this % of the passing one (relative to the
    /// result, whatever the line).
    pub resolution_pct: f64,
    /// Line rate, bits per second (frames plus 20 B preamble and gap).
    pub line_bps: f64,
    /// Rates of the frame-loss test, % of line rate.
    pub loss_steps: Vec<f64>,
    /// Longest burst of the back-to-back test (0: skip it).
    pub b2b_max: u64,
    /// Headers of the test frames.
    pub template: TemplateSpec,
    /// Loss allowed for the PDR (partial drop rate), % of the frames sent; 0: the NDR only.
    pub loss_tolerance_pct: f64,
    /// Throughput searches per size (at least 1).
    pub repeat: u32,
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
            loss_tolerance_pct: 0.0,
            repeat: 1,
        }
    }
}

/// What one trial found.
#[derive(Clone, Debug, PartialEq)]
pub struct Trial {
    /// Which test: "ceiling", "throughput" (the NDR search), "pdr", "latency", "loss" or
    /// "back-to-back".
    pub kind: &'static str,
    /// Frame size with CRC.
    pub size: u32,
    /// Which repetition of the throughput search (0 for the other tests).
    pub repeat: u32,
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
    /// Mean absolute IPDV of consecutive frames (RFC 3393), ns: the jitter.
    pub jitter_ns: f64,
    /// Largest absolute IPDV, ns.
    pub ipdv_max_ns: u64,
    /// The run was interrupted during this trial: it is no verdict.
    pub interrupted: bool,
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
        self.passed_within(0.0)
    }

    /// At most `tolerance_pct` % lost at the offered load, not generator-limited, not
    /// interrupted.
    pub fn passed_within(&self, tolerance_pct: f64) -> bool {
        self.sent > 0
            && !self.interrupted
            && !self.generator_limited()
            && (self.received >= self.sent || self.loss_pct() <= tolerance_pct)
    }

    /// The latency of the frames that came back; None when none did (a latency of 0 would be
    /// a figure that did not happen).
    pub fn measured_latency(&self) -> Option<LatSummary> {
        (self.received > 0).then_some(self.latency)
    }

    /// The jitter (mean absolute IPDV) of the frames that came back; None with fewer than two.
    pub fn measured_jitter(&self) -> Option<f64> {
        (self.received >= 2).then_some(self.jitter_ns)
    }

    /// `pass`, `loss`, `generator-limited` (or both), `interrupted`, for reports.
    pub fn verdict(&self) -> &'static str {
        if self.interrupted {
            return "interrupted";
        }
        match (self.lossless(), self.generator_limited()) {
            (true, false) => "pass",
            (true, true) => "generator-limited",
            (false, false) => "loss",
            (false, true) => "loss, generator-limited",
        }
    }
}

/// One repetition of the throughput search of a size.
#[derive(Clone, Debug, PartialEq)]
pub struct SearchRun {
    /// The highest trial without loss (NDR), if any passed.
    pub ndr: Option<Trial>,
    /// The highest trial within the loss tolerance (PDR); the NDR's trial when the tolerance
    /// is 0.
    pub pdr: Option<Trial>,
    /// Latency and jitter at the NDR.
    pub latency: Option<Trial>,
}

/// Median, lowest and highest of the repetitions of a figure.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spread {
    /// Median: the lower of the two middle values for an even count, a value one repetition
    /// gave (the mean of NDRs of 358 and 81'274 pps would be a rate no trial tested), and the
    /// repetition [`SizeResult::throughput`] and its latency come from.
    pub median: f64,
    /// Lowest.
    pub min: f64,
    /// Highest.
    pub max: f64,
    /// Repetitions that gave a value.
    pub n: usize,
}

impl Spread {
    /// Of `v` (None when empty).
    pub fn of(mut v: Vec<f64>) -> Option<Spread> {
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = v[(n - 1) / 2];
        Some(Spread {
            median,
            min: v[0],
            max: v[n - 1],
            n,
        })
    }

    /// `max - min` in % of the median.
    pub fn spread_pct(&self) -> f64 {
        if self.median > 0.0 {
            100.0 * (self.max - self.min) / self.median
        } else if self.max > 0.0 {
            f64::INFINITY
        } else {
            0.0
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
    /// Every repetition of the throughput search.
    pub runs: Vec<SearchRun>,
    /// The NDR trial of the median repetition (None if no trial passed in it).
    pub throughput: Option<Trial>,
    /// Latency measured at the median repetition's NDR.
    pub latency: Option<Trial>,
    /// Frame loss per step.
    pub loss: Vec<Trial>,
    /// Longest burst at line rate without loss, frames.
    pub back_to_back: Option<u64>,
    /// The back-to-back bursts left below line rate (the generator's ceiling): the bursts
    /// were not at line rate.
    pub back_to_back_limited: bool,
    /// The run was interrupted while this size was measured: its figures are incomplete (an
    /// NDR found so far is only a lower bound).
    pub interrupted: bool,
}

impl SizeResult {
    /// The ceiling in % of line rate, at most 100 (a port that takes more than the line is
    /// not that line: [`SizeResult::above_line`]).
    pub fn ceiling_pct(&self) -> f64 {
        if self.line_pps > 0.0 {
            (100.0 * self.ceiling_pps / self.line_pps).min(100.0)
        } else {
            0.0
        }
    }

    /// The generator sent faster than the line rate: the port is not a line of that speed (a
    /// `mem:` wire, a wrong `--link-speed`).
    pub fn above_line(&self) -> bool {
        self.ceiling_pps > self.line_pps * (1.0 + RATE_TOLERANCE)
    }

    fn spread(&self, f: impl Fn(&SearchRun) -> Option<f64>) -> Option<Spread> {
        // A repetition where nothing passed counts as 0: it disagrees with one that passed.
        if self.runs.iter().all(|r| f(r).is_none()) {
            return None;
        }
        Spread::of(self.runs.iter().map(|r| f(r).unwrap_or(0.0)).collect())
    }

    /// NDR over the repetitions, packets per second.
    pub fn ndr(&self) -> Option<Spread> {
        self.spread(|r| r.ndr.as_ref().map(|t| t.offered_pps))
    }

    /// PDR over the repetitions, packets per second.
    pub fn pdr(&self) -> Option<Spread> {
        self.spread(|r| r.pdr.as_ref().map(|t| t.offered_pps))
    }

    /// Jitter (mean absolute IPDV) of the latency trials at the NDR, ns (of those where at
    /// least two frames came back).
    pub fn jitter(&self) -> Option<Spread> {
        // Only the repetitions that measured one: a repetition where no rate passed has no
        // latency trial, and its jitter is no 0 ns.
        Spread::of(
            self.runs
                .iter()
                .filter_map(|r| r.latency.as_ref().and_then(Trial::measured_jitter))
                .collect(),
        )
    }

    /// The median repetition's latency trial at the NDR lost frames (it passed at that rate
    /// in the search: the path changed, a link went down, the device is unsteady), as % lost.
    pub fn latency_loss_pct(&self) -> Option<f64> {
        self.latency
            .as_ref()
            .filter(|t| !t.interrupted && t.received < t.sent)
            .map(Trial::loss_pct)
    }

    /// The repetitions' NDRs or PDRs spread over more than [`SPREAD_WARN_PCT`] % of their
    /// median (or twice `resolution_pct`).
    pub fn disagree(&self, resolution_pct: f64) -> bool {
        let limit = SPREAD_WARN_PCT.max(2.0 * resolution_pct);
        self.runs.len() > 1
            && [self.ndr(), self.pdr()]
                .iter()
                .flatten()
                .any(|s| s.spread_pct() > limit)
    }
}

/// A trial the search tries once more: every frame came back but the generator fell short
/// of the offered rate, a rate below what it achieved before (`ceiling_pps`): the host's
/// hiccup, not the device's limit nor the generator's.
pub fn hiccup(t: &Trial, ceiling_pps: f64) -> bool {
    !t.interrupted
        && t.lossless()
        && t.generator_limited()
        && t.offered_pps < ceiling_pps * (1.0 - RATE_TOLERANCE)
}

/// Line-rate packets per second at `size` (with CRC).
pub fn line_pps(line_bps: f64, size: u32) -> f64 {
    line_bps / ((f64::from(size) + 20.0) * 8.0)
}

/// Binary search in packets per second for the highest rate at which `pass(rate)` holds:
/// `top` (the line rate) first; when it fails, the interval is `known_pass` (a rate known to
/// pass, 0 if none) to `cap.min(top)` (`cap`: the generator's ceiling, above which nothing
/// can pass), halved until it is narrower than `resolution_pct` % of the passing end (or,
/// with nothing passing, its top is below 1 pps). `pass` returns None when the run is
/// interrupted, which ends the search. Returns the highest passing rate tried (or
/// `known_pass`).
pub fn search(
    known_pass: f64,
    top: f64,
    cap: f64,
    resolution_pct: f64,
    mut pass: impl FnMut(f64) -> Option<bool>,
) -> Option<f64> {
    let res = resolution_pct.max(0.001) / 100.0;
    let mut best = (known_pass > 0.0).then_some(known_pass);
    if top <= known_pass {
        return best;
    }
    match pass(top) {
        Some(true) => return Some(top),
        None => return best,
        Some(false) => {}
    }
    let (mut lo, mut hi) = (known_pass.max(0.0), top.min(cap.max(known_pass)));
    if hi <= lo {
        hi = top;
    }
    for _ in 0..64 {
        if (lo > 0.0 && hi - lo <= lo * res) || (lo == 0.0 && hi < MIN_PPS) {
            break;
        }
        let mid = (lo + hi) / 2.0;
        match pass(mid) {
            Some(true) => {
                lo = mid;
                best = Some(mid);
            }
            Some(false) => hi = mid,
            None => break,
        }
    }
    best
}

/// Runs the benchmark: frames leave on `tx` and are expected back on `rx`. `progress` sees
/// every trial. When `stop` is set the run ends after the trial under way (marked
/// `interrupted`) and returns what it has: the caller says so.
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
    let stopped = || stop.load(Ordering::Relaxed);
    for &size in &opts.sizes {
        if stopped() {
            break;
        }
        let line = line_pps(opts.line_bps, size);
        let mut trial = |kind: &'static str, pps: f64, count: Option<u64>, repeat: u32| {
            let id = next_id;
            next_id = next_id.wrapping_add(1);
            let mut t = one_trial(tx, rx, opts, clock, stop, kind, size, pps, line, count, id)?;
            t.repeat = repeat;
            progress(&t);
            Ok::<Trial, GenError>(t)
        };
        // The generator's own ceiling on this port: an unpaced trial.
        let mut ceiling = trial("ceiling", line, None, 0)?.achieved_pps;
        let mut runs = Vec::new();
        for rep in 0..opts.repeat.max(1) {
            if stopped() {
                break;
            }
            let mut err = None;
            // One search: the highest trial that passes within `tol`.
            let mut find = |kind: &'static str,
                            known: Option<Trial>,
                            tol: f64,
                            ceiling: &mut f64| {
                let mut best = known.clone();
                let cap = if *ceiling >= line * (1.0 - RATE_TOLERANCE) {
                    line
                } else {
                    *ceiling
                };
                search(
                    known.as_ref().map_or(0.0, |t| t.offered_pps),
                    line,
                    cap,
                    opts.resolution_pct,
                    |pps| {
                        if err.is_some() || stopped() {
                            return None;
                        }
                        let mut got = trial(kind, pps, None, rep);
                        // A lossless trial short of a rate the generator has made is a
                        // hiccup of the host (a late tail on a loaded machine), not the
                        // device's failure: tried once more before the search goes below.
                        if got.as_ref().is_ok_and(|t| hiccup(t, *ceiling)) && !stopped() {
                            got = trial(kind, pps, None, rep);
                        }
                        match got {
                            Ok(t) if t.interrupted => None,
                            Ok(t) => {
                                *ceiling = ceiling.max(t.achieved_pps);
                                let ok = t.passed_within(tol);
                                if ok && best.as_ref().is_none_or(|b| b.offered_pps < t.offered_pps)
                                {
                                    best = Some(t);
                                }
                                Some(ok)
                            }
                            Err(e) => {
                                err = Some(e);
                                None
                            }
                        }
                    },
                );
                best
            };
            let ndr = find("throughput", None, 0.0, &mut ceiling);
            let pdr = if opts.loss_tolerance_pct > 0.0 && !stopped() {
                find("pdr", ndr.clone(), opts.loss_tolerance_pct, &mut ceiling)
            } else {
                ndr.clone()
            };
            if let Some(e) = err {
                return Err(e);
            }
            let latency = match &ndr {
                Some(b) if !stopped() => Some(trial("latency", b.offered_pps, None, rep)?),
                _ => None,
            };
            runs.push(SearchRun { ndr, pdr, latency });
        }
        // The repetition of the median NDR stands for the size in the single-rate fields.
        let mut order: Vec<usize> = (0..runs.len()).collect();
        order.sort_by(|&a, &b| {
            let v = |i: usize| runs[i].ndr.as_ref().map_or(0.0, |t| t.offered_pps);
            v(a).total_cmp(&v(b))
        });
        let median = order
            .get(order.len().saturating_sub(1) / 2)
            .map(|&i| &runs[i]);
        let throughput = median.and_then(|r| r.ndr.clone());
        let latency = median.and_then(|r| r.latency.clone());
        let mut loss = Vec::new();
        for &pct in &opts.loss_steps {
            if stopped() {
                break;
            }
            let t = trial("loss", line * pct / 100.0, None, 0)?;
            ceiling = ceiling.max(t.achieved_pps);
            loss.push(t);
        }
        let mut b2b_limited = false;
        let back_to_back = if opts.b2b_max > 0 && !stopped() {
            // Largest burst (frames) with no loss, by binary search on the burst length.
            let (mut lo, mut hi) = (0u64, opts.b2b_max);
            let full = trial("back-to-back", line, Some(hi), 0)?;
            b2b_limited |= full.generator_limited();
            if full.received >= full.sent {
                lo = hi;
            }
            while hi - lo > (opts.b2b_max / 64).max(1) && !stopped() {
                let mid = lo + (hi - lo) / 2;
                let t = trial("back-to-back", line, Some(mid), 0)?;
                b2b_limited |= t.generator_limited();
                if t.received >= t.sent {
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
            (!stopped()).then_some(lo)
        } else {
            None
        };
        results.push(SizeResult {
            size,
            line_pps: line,
            ceiling_pps: ceiling,
            runs,
            throughput,
            latency,
            loss,
            back_to_back,
            back_to_back_limited: b2b_limited,
            interrupted: stopped(),
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
    pps: f64,
    line: f64,
    count: Option<u64>,
    id: u16,
) -> Result<Trial, GenError> {
    // Back-to-back bursts and the ceiling go as fast as the port takes them.
    let unpaced = count.is_some() || kind == "ceiling";
    let pps = if unpaced { line } else { pps };
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
    let interrupted = stop.load(Ordering::Relaxed);
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
    let (received, latency, ipdv) = match tracker.stream(id) {
        Some(s) => (s.rx, s.summary(), s.ipdv),
        None => (0, LatSummary::default(), Default::default()),
    };
    Ok(Trial {
        kind,
        size,
        repeat: 0,
        // Rounded to 1e-9 %: `line * 10 / 100` read back is 10 %, not 9.999999999999998.
        rate_pct: if line > 0.0 {
            (100.0 * pps / line * 1e9).round() / 1e9
        } else {
            0.0
        },
        offered_pps: pps,
        achieved_pps: rep.pps(),
        sent: rep.pkts,
        received,
        latency,
        jitter_ns: ipdv.mean(),
        ipdv_max_ns: ipdv.max,
        interrupted,
    })
}

/// The results as CSV, one line per trial (each repetition's NDR trial as `throughput`, its
/// PDR trial as `pdr`, its latency trial, the loss steps), a `ceiling` line per size (the
/// generator's ceiling on the port), a back-to-back line per size, and an `interrupted` line
/// for a size the run was interrupted in. `verdict` is `pass`, `loss`, `generator-limited` or
/// both, or `interrupted`.
pub fn csv(results: &[SizeResult]) -> String {
    let mut s = String::from(
        "test,size,rate_pct,offered_pps,achieved_pps,sent,received,loss_pct,lat_min_ns,lat_avg_ns,lat_p50_ns,lat_p99_ns,lat_max_ns,verdict,jitter_ns,ipdv_max_ns,repeat\n",
    );
    let mut row = |t: &Trial, kind: &str| {
        s += &format!(
            "{kind},{},{:.3},{:.0},{:.0},{},{},{:.4},{},{:.0},{},{},{},{},{:.0},{},{}\n",
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
            t.verdict(),
            t.jitter_ns,
            t.ipdv_max_ns,
            t.repeat,
        );
    };
    for r in results {
        for run in &r.runs {
            if let Some(t) = &run.ndr {
                row(t, "throughput");
            }
            if let Some(t) = run.pdr.as_ref().filter(|p| Some(*p) != run.ndr.as_ref()) {
                row(t, "pdr");
            }
            if let Some(t) = &run.latency {
                row(t, "latency");
            }
        }
        for t in &r.loss {
            row(t, "loss");
        }
    }
    // The ceiling's verdict says what its capped percentage cannot: below the line
    // (`generator-limited`), or above it (`above-line`: the port is not that line).
    for r in results {
        s += &format!(
            "ceiling,{},{:.3},{:.0},{:.0},,,,,,,,,{},,,\n",
            r.size,
            r.ceiling_pct(),
            r.line_pps,
            r.ceiling_pps,
            if r.above_line() {
                "above-line"
            } else if r.ceiling_pct() < 100.0 * (1.0 - RATE_TOLERANCE) {
                "generator-limited"
            } else {
                "line"
            }
        );
    }
    // A size the run was interrupted in says so: its rows above are not its result (an NDR
    // found so far is only a lower bound), and a reader of the file alone must see it.
    for r in results.iter().filter(|r| r.interrupted) {
        let mut f = vec![String::new(); 17];
        f[0] = "interrupted".into();
        f[1] = r.size.to_string();
        f[13] = "interrupted".into();
        s += &f.join(",");
        s.push('\n');
    }
    for r in results {
        if let Some(b) = r.back_to_back {
            s += &format!(
                "back-to-back,{},100,,,{b},{b},0,,,,,,{},,,\n",
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

fn pct_of(line: f64, pps: f64) -> f64 {
    if line > 0.0 {
        100.0 * pps / line
    } else {
        0.0
    }
}

/// The results as text tables: throughput (NDR, and the PDR with a loss tolerance), latency
/// and jitter at the NDR, the repetitions' spread, the generator's ceiling, then frame loss
/// (a `*` marks a step the generator did not reach). `opts` gives the tolerance and the
/// resolution the spread is judged by.
pub fn table(results: &[SizeResult], opts: &Rfc2544Options) -> String {
    let pdr = opts.loss_tolerance_pct > 0.0;
    let mut s = String::from(
        "RFC 2544 throughput (NDR: no loss, offered rate achieved), latency and jitter at the NDR\n",
    );
    if pdr {
        s += &format!(
            "  (PDR: at most {} % of the frames lost)\n",
            opts.loss_tolerance_pct
        );
    }
    s += "  size          NDR pps   % line";
    if pdr {
        s += "          PDR pps   % line";
    }
    s += "   lat min     avg     p99     max   jitter (ns)   back-to-back\n";
    let mut warn = Vec::new();
    let mut lat_warn = Vec::new();
    for r in results {
        let b2b = r.back_to_back.map_or("-".to_string(), |b| {
            if r.back_to_back_limited {
                format!("{b}*")
            } else {
                b.to_string()
            }
        });
        let Some(ndr) = r.ndr() else {
            if r.interrupted {
                s += &format!(
                    "{:>6}   interrupted before a rate passed {:>43}\n",
                    r.size, b2b
                );
            } else {
                s += &format!(
                    "{:>6}   no rate passed (without loss and at the offered rate) {:>22}\n",
                    r.size, b2b
                );
            }
            continue;
        };
        s += &format!(
            "{:>6} {:>16.0} {:>8.2}",
            r.size,
            ndr.median,
            pct_of(r.line_pps, ndr.median)
        );
        if pdr {
            let p = r.pdr().map_or(0.0, |p| p.median);
            s += &format!(" {:>16.0} {:>8.2}", p, pct_of(r.line_pps, p));
        }
        let (lmin, lavg, lp99, lmax) = match r.latency.as_ref().and_then(Trial::measured_latency) {
            Some(l) => (
                l.min.to_string(),
                format!("{:.0}", l.avg),
                l.p99.to_string(),
                l.max.to_string(),
            ),
            None => ("-".into(), "-".into(), "-".into(), "-".into()),
        };
        let j = r
            .jitter()
            .map_or("-".to_string(), |j| format!("{:.0}", j.median));
        if let Some(lost) = r.latency_loss_pct() {
            lat_warn.push((r.size, lost));
        }
        s += &format!(
            " {:>9} {:>7} {:>7} {:>7} {:>12}   {:>12}{}\n",
            lmin,
            lavg,
            lp99,
            lmax,
            j,
            b2b,
            if r.interrupted {
                "  interrupted: a lower bound"
            } else {
                ""
            }
        );
        if r.runs.len() > 1 {
            let mut line = format!("        {} trials: NDR", r.runs.len());
            line += &format!(
                " median {:.0} pps, {:.0}..{:.0} (spread {:.2} %)",
                ndr.median,
                ndr.min,
                ndr.max,
                ndr.spread_pct()
            );
            if let (true, Some(p)) = (pdr, r.pdr()) {
                line += &format!(
                    "; PDR median {:.0} pps, {:.0}..{:.0} (spread {:.2} %)",
                    p.median,
                    p.min,
                    p.max,
                    p.spread_pct()
                );
            }
            s += &line;
            s.push('\n');
            if r.disagree(opts.resolution_pct) {
                warn.push(r.size);
            }
        }
    }
    for (size, lost) in lat_warn {
        s += &format!(
            "warning: {size} B: the latency trial at the NDR lost {lost:.3} % of its frames (the path changed: a link down, an unsteady device): its latency and jitter are of the frames that came back\n"
        );
    }
    for size in warn {
        s += &format!(
            "warning: {size} B: the trials disagree by more than {:.1} % (a loaded machine or an unsteady device): use more --repeat or longer --trial\n",
            SPREAD_WARN_PCT.max(2.0 * opts.resolution_pct)
        );
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
            } else if r.above_line() {
                "  faster than the line rate: the port is not a line of that speed (--link-speed?)"
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
    fn search_finds_the_threshold_to_a_resolution_of_the_result() {
        let mut tried = Vec::new();
        let r = search(0.0, 1_000_000.0, f64::MAX, 0.5, |p| {
            tried.push(p);
            Some(p <= 37_300.0)
        });
        let r = r.unwrap();
        // Within 0.5 % of the result, not of the line (which would be 5 kpps here).
        assert!(r <= 37_300.0 && r > 37_300.0 * (1.0 - 0.005), "{r}");
        assert_eq!(tried[0], 1_000_000.0);
        assert!(tried.len() <= 20, "{tried:?}");
        assert_eq!(search(0.0, 10.0, f64::MAX, 1.0, |_| Some(true)), Some(10.0));
        assert_eq!(search(0.0, 1e6, f64::MAX, 1.0, |_| Some(false)), None);
        // The ceiling bounds the search once the line rate failed.
        let mut tried = Vec::new();
        search(0.0, 1e6, 2e5, 1.0, |p| {
            tried.push(p);
            Some(p <= 150_000.0)
        });
        assert_eq!(tried[1], 1e5, "{tried:?}");
        // Starting from a known pass (the PDR from the NDR), never below it.
        let r = search(100.0, 1000.0, f64::MAX, 1.0, |p| Some(p <= 500.0)).unwrap();
        assert!((495.0..=500.0).contains(&r), "{r}");
        assert_eq!(
            search(100.0, 1000.0, f64::MAX, 1.0, |_| Some(false)),
            Some(100.0)
        );
        // Interrupted: what passed so far.
        let mut n = 0;
        let r = search(0.0, 1000.0, f64::MAX, 1.0, |p| {
            n += 1;
            (n < 4).then_some(p <= 300.0)
        });
        assert_eq!((r, n), (Some(250.0), 4));
    }

    #[test]
    fn spread_is_the_median_and_the_range() {
        let s = Spread::of(vec![3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.median, s.min, s.max, s.n), (2.0, 1.0, 3.0, 3));
        assert!((s.spread_pct() - 100.0).abs() < 1e-9);
        // Even: the lower middle, a rate a repetition passed, not one no trial tested.
        assert_eq!(Spread::of(vec![81_274.0, 358.0]).unwrap().median, 358.0);
        assert_eq!(Spread::of(vec![4.0, 1.0, 3.0, 2.0]).unwrap().median, 2.0);
        assert!(Spread::of(vec![]).is_none());
    }

    fn size_result(size: u32, interrupted: bool) -> SizeResult {
        SizeResult {
            size,
            line_pps: line_pps(1e9, size),
            ceiling_pps: 0.0,
            runs: Vec::new(),
            throughput: None,
            latency: None,
            loss: Vec::new(),
            back_to_back: None,
            back_to_back_limited: false,
            interrupted,
        }
    }

    fn trial(kind: &'static str, pps: f64, sent: u64, received: u64) -> Trial {
        Trial {
            kind,
            size: 1518,
            repeat: 0,
            rate_pct: 10.0,
            offered_pps: pps,
            achieved_pps: pps,
            sent,
            received,
            latency: LatSummary::default(),
            jitter_ns: 0.0,
            ipdv_max_ns: 0,
            interrupted: false,
        }
    }

    #[test]
    fn a_latency_trial_where_nothing_came_back_has_no_latency() {
        // The NDR passed, then the link went down: the latency trial at it got nothing back.
        let ndr = trial("throughput", 8_000.0, 8_000, 8_000);
        let lat = trial("latency", 8_000.0, 8_000, 0);
        assert!(lat.measured_latency().is_none() && lat.measured_jitter().is_none());
        let mut r = size_result(1518, false);
        r.runs = vec![SearchRun {
            ndr: Some(ndr.clone()),
            pdr: Some(ndr.clone()),
            latency: Some(lat.clone()),
        }];
        r.throughput = Some(ndr);
        r.latency = Some(lat);
        assert!(r.jitter().is_none());
        assert_eq!(r.latency_loss_pct(), Some(100.0));
        let t = table(&[r], &Rfc2544Options::default());
        let row = t
            .lines()
            .find(|l| l.trim_start().starts_with("1518"))
            .unwrap();
        // No 0 ns latency nor 0 ns jitter: nothing was measured.
        let f: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(&f[3..8], ["-", "-", "-", "-", "-"], "{t}");
        assert!(
            t.contains("warning: 1518 B: the latency trial at the NDR lost 100.000 %"),
            "{t}"
        );
    }

    #[test]
    fn a_generator_hiccup_below_its_ceiling_is_tried_again() {
        // 1'170 of 1'202 pps offered, all back, the generator made 96'153 pps before: a late
        // tail on a loaded host; the search went down to 0.85 % of the line on it.
        let mut t = trial("throughput", 1_202.0, 240, 240);
        t.achieved_pps = 1_170.0;
        assert!(t.generator_limited() && hiccup(&t, 96_153.0));
        // Not: above what the generator ever made, a loss, a pass, an interrupted trial.
        assert!(!hiccup(&t, 1_100.0));
        let mut lost = t.clone();
        lost.received = 200;
        assert!(!hiccup(&lost, 96_153.0));
        assert!(!hiccup(&trial("throughput", 1_202.0, 240, 240), 96_153.0));
        let mut int = t.clone();
        int.interrupted = true;
        assert!(!hiccup(&int, 96_153.0));
    }

    #[test]
    fn jitter_is_of_the_repetitions_that_measured_one() {
        // Two repetitions: one found no rate (no latency trial), one a jitter of 5'000 ns.
        let ndr = trial("throughput", 8_000.0, 8_000, 8_000);
        let mut lat = trial("latency", 8_000.0, 8_000, 8_000);
        lat.jitter_ns = 5_000.0;
        let mut r = size_result(64, false);
        r.runs = vec![
            SearchRun {
                ndr: None,
                pdr: None,
                latency: None,
            },
            SearchRun {
                ndr: Some(ndr.clone()),
                pdr: Some(ndr),
                latency: Some(lat),
            },
        ];
        let j = r.jitter().unwrap();
        assert_eq!((j.median, j.n), (5_000.0, 1), "{j:?}");
    }

    #[test]
    fn csv_says_which_size_was_interrupted() {
        let c = csv(&[size_result(64, false), size_result(128, true)]);
        let header = c.lines().next().unwrap().split(',').count();
        for l in c.lines() {
            assert_eq!(l.split(',').count(), header, "{l}");
        }
        let rows: Vec<&str> = c
            .lines()
            .filter(|l| l.starts_with("interrupted,"))
            .collect();
        assert_eq!(rows.len(), 1, "{c}");
        let f: Vec<&str> = rows[0].split(',').collect();
        assert_eq!((f[1], f[13]), ("128", "interrupted"), "{c}");
        assert!(!csv(&[size_result(64, false)]).contains("interrupted"));
    }

    #[test]
    fn csv_ceiling_says_above_or_below_the_line() {
        let verdict = |ceiling: f64| {
            let mut r = size_result(1518, false);
            r.ceiling_pps = ceiling;
            let c = csv(&[r]);
            let row = c
                .lines()
                .find(|l| l.starts_with("ceiling,"))
                .unwrap()
                .to_string();
            assert_eq!(row.split(',').count(), 17, "{row}");
            row.split(',').nth(13).unwrap().to_string()
        };
        // 1518 B at 1 Gbit/s: 81'274 pps. 175'227 pps is no such line (a mem: wire), though
        // its percentage is capped at 100.
        assert_eq!(verdict(175_227.0), "above-line");
        assert_eq!(verdict(40_000.0), "generator-limited");
        assert_eq!(verdict(81_274.0), "line");
    }

    #[test]
    fn line_rate() {
        assert!((line_pps(10e9, 64) - 14_880_952.38).abs() < 1.0);
        assert!((line_pps(1e9, 1518) - 81_274.38).abs() < 1.0);
    }
}

//! The scheduler and the worker on an injected clock: CBR departures exact, Poisson gaps with
//! the right mean and variance and an exponential distribution (Kolmogorov-Smirnov), bursts,
//! and what the worker does after a stall of its clock.

use linerate::apps::gen::sched::{Pattern, Schedule};
use linerate::apps::gen::template::read_sig;
use linerate::apps::gen::vary::SizeSpec;
use linerate::apps::gen::{self, GenOptions, StreamSpec};
use linerate::mem::Batch;
use linerate::port::mem::wire;
use linerate::port::{LinkType, Port, PortOptions};
use linerate::time::{Clock, FakeClock};
use linerate::wire::parse;
use std::sync::atomic::AtomicBool;

fn ks_exponential(gaps: &mut [f64], mean: f64) -> f64 {
    gaps.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = gaps.len() as f64;
    let mut d: f64 = 0.0;
    for (i, &g) in gaps.iter().enumerate() {
        let f = 1.0 - (-g / mean).exp();
        d = d
            .max((f - i as f64 / n).abs())
            .max(((i + 1) as f64 / n - f).abs());
    }
    d
}

#[test]
fn poisson_gaps_are_exponential() {
    let n = 200_000;
    let mean = 1000.0; // 1 Mpps
    let mut s = Schedule::new(Pattern::Poisson, 1e6, 0, 42);
    let mut prev = s.advance();
    let mut gaps: Vec<f64> = (0..n)
        .map(|_| {
            let t = s.advance();
            let g = (t - prev) as f64;
            prev = t;
            g
        })
        .collect();
    let m = gaps.iter().sum::<f64>() / n as f64;
    let var = gaps.iter().map(|g| (g - m) * (g - m)).sum::<f64>() / (n - 1) as f64;
    assert!((m - mean).abs() / mean < 0.01, "mean {m}");
    // An exponential distribution's variance is its mean squared.
    assert!(
        (var - mean * mean).abs() / (mean * mean) < 0.03,
        "variance {var}"
    );
    // KS at a 1% significance level: D < 1.63 / sqrt(n). Rounding to whole ns is far below.
    let d = ks_exponential(&mut gaps, mean);
    assert!(d < 1.63 / (n as f64).sqrt(), "KS D = {d}");
    // And CBR gaps are not exponential: the test has power.
    let mut cbr = vec![mean; 10_000];
    assert!(ks_exponential(&mut cbr, mean) > 0.3);
}

/// Runs the worker with `opts` on `clock` into a mem wire called `name`; returns the send times
/// stamped into the probes (checking their sequence) and the report.
fn run_on(name: &str, opts: &GenOptions, clock: &dyn Clock) -> (Vec<u64>, gen::GenReport) {
    let (mut a, mut b) = wire(name, &PortOptions::default()).unwrap();
    let stop = AtomicBool::new(false);
    let rep = gen::run(&mut a, opts, clock, &stop, None, |_| {}).unwrap();
    let mut ts = Vec::new();
    let mut batch = Batch::new();
    while b.rx(&mut batch).unwrap() > 0 {
        for p in batch.iter() {
            let parsed = parse(p.data, LinkType::ETHERNET);
            let sig = read_sig(&p.data[parsed.payload.unwrap() as usize..]).unwrap();
            assert_eq!(sig.seq as usize, ts.len());
            ts.push(sig.ts);
        }
        batch.clear();
    }
    (ts, rep)
}

/// One stream of 64 B packets at `pps`, `n` packets.
fn one_stream(pattern: Pattern, pps: f64, n: u64) -> GenOptions {
    GenOptions {
        streams: vec![StreamSpec {
            pps: Some(pps),
            pattern,
            size: SizeSpec::Fixed(64),
            ..Default::default()
        }],
        count: Some(n),
        ..Default::default()
    }
}

/// Runs the worker on a fake clock that advances 1 ns per reading, so a busy-wait ends exactly
/// at the scheduled time; returns the send times stamped into the probes.
fn stamped(pattern: Pattern, pps: f64, n: u64) -> (Vec<u64>, gen::GenReport) {
    let clock = FakeClock::new(5_000_000, 1);
    run_on(
        &format!("gen-sched-{pattern:?}"),
        &one_stream(pattern, pps, n),
        &clock,
    )
}

#[test]
fn worker_cbr_departures_are_exact_on_a_fake_clock() {
    let (ts, rep) = stamped(Pattern::Cbr, 1e6, 3000);
    assert_eq!(ts.len(), 3000);
    for w in ts.windows(2) {
        assert_eq!(w[1] - w[0], 1000);
    }
    assert_eq!(rep.precision.gaps, 2999);
    assert_eq!(rep.precision.within[0], 2999, "{}", rep.precision.table());
    assert_eq!(rep.precision.max_dev, 0);
}

#[test]
fn worker_bursts_leave_together() {
    let (ts, _) = stamped(Pattern::Burst(8), 1e6, 800);
    for (i, w) in ts.windows(2).enumerate() {
        let want = if (i + 1) % 8 == 0 { 8000 } else { 0 };
        assert_eq!(w[1] - w[0], want, "gap {i}");
    }
}

#[test]
fn worker_poisson_mean_rate() {
    let (ts, rep) = stamped(Pattern::Poisson, 2e6, 20_000);
    let mean = (ts[ts.len() - 1] - ts[0]) as f64 / (ts.len() - 1) as f64;
    assert!((mean - 500.0).abs() < 10.0, "{mean}");
    // The fake clock is exact, so the achieved gaps are the scheduled ones.
    assert_eq!(rep.precision.within[0], rep.precision.gaps);
}

/// A fake clock (1 ns per reading) that jumps `jump` ns ahead at its `at`-th reading, as when
/// the worker loses its CPU.
struct StallingClock {
    inner: FakeClock,
    reads: std::sync::atomic::AtomicU64,
    at: u64,
    jump: u64,
}

impl Clock for StallingClock {
    fn now_ns(&self) -> u64 {
        if self
            .reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            == self.at
        {
            self.inner.advance(self.jump);
        }
        self.inner.now_ns()
    }
}

/// Sends 3000 packets at 1 Mpps on a clock that stalls 1 ms once; returns the send times.
fn stalled(catch_up: bool) -> (Vec<u64>, gen::GenReport) {
    let clock = StallingClock {
        inner: FakeClock::new(5_000_000, 1),
        reads: Default::default(),
        at: 200_000,
        jump: 1_000_000,
    };
    let opts = GenOptions {
        catch_up,
        ..one_stream(Pattern::Cbr, 1e6, 3000)
    };
    run_on(&format!("gen-sched-stall-{catch_up}"), &opts, &clock)
}

#[test]
fn worker_moves_the_schedule_after_a_stall_instead_of_bunching() {
    let (ts, rep) = stalled(false);
    assert_eq!(ts.len(), 3000, "every packet is still sent");
    let long: Vec<u64> = ts
        .windows(2)
        .map(|w| w[1] - w[0])
        .filter(|&g| g != 1000)
        .collect();
    // One long gap (the stall) and no bunch of back-to-back packets after it.
    assert_eq!(long.len(), 1, "{long:?}");
    assert!(long[0] > 1_000_000, "{long:?}");
    assert_eq!(rep.precision.slips, 1);
    assert!(
        rep.precision.slipped_ns >= 999_000,
        "{}",
        rep.precision.slipped_ns
    );
    assert_eq!(rep.precision.gaps, 2999);
    assert_eq!(rep.precision.within[3], 2998, "{}", rep.precision.table());
    assert!(rep
        .precision
        .table()
        .contains("schedule moved later 1 times"));
}

#[test]
fn worker_catches_up_after_a_stall_when_asked() {
    let (ts, rep) = stalled(true);
    assert_eq!(ts.len(), 3000);
    // The late packets leave together, and the last one leaves on the unmoved schedule.
    let bunched = ts.windows(2).filter(|w| w[1] == w[0]).count();
    assert!(bunched >= 900, "{bunched}");
    assert_eq!(ts[2999] - ts[0], 2999 * 1000);
    assert_eq!(rep.precision.slips, 0);
}

//! The scheduler and the worker on an injected clock: CBR departures exact, Poisson gaps with
//! the right mean and variance and an exponential distribution (Kolmogorov-Smirnov), bursts,
//! and what the worker does after a stall of its clock.
#![deny(unsafe_code)]

use linerate::apps::gen::sched::{CatchUp, OnStall, Pattern, Schedule};
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

/// A fake clock (1 ns per reading) that loses `stall` ns every `period` ns: the CPU taken away
/// for a share `stall / (period + stall)` of the time, again and again.
struct PeriodicStalls {
    now: std::sync::atomic::AtomicU64,
    next: std::sync::atomic::AtomicU64,
    period: u64,
    stall: u64,
}

impl PeriodicStalls {
    fn new(start: u64, period: u64, stall: u64) -> PeriodicStalls {
        PeriodicStalls {
            now: start.into(),
            next: (start + period).into(),
            period,
            stall,
        }
    }
}

impl Clock for PeriodicStalls {
    fn now_ns(&self) -> u64 {
        use std::sync::atomic::Ordering::Relaxed;
        let t = self.now.fetch_add(1, Relaxed);
        let next = self.next.load(Relaxed);
        if t >= next {
            self.next.store(t + self.stall + self.period, Relaxed);
            return self.now.fetch_add(self.stall, Relaxed) + self.stall;
        }
        t
    }
}

/// Sends 3000 packets at 1 Mpps on a clock that stalls `jump` ns once; returns the send times.
fn stalled(on_stall: OnStall, jump: u64) -> (Vec<u64>, gen::GenReport) {
    let clock = StallingClock {
        inner: FakeClock::new(5_000_000, 1),
        reads: Default::default(),
        at: 200_000,
        jump,
    };
    let opts = GenOptions {
        on_stall,
        ..one_stream(Pattern::Cbr, 1e6, 3000)
    };
    run_on(
        &format!("gen-sched-stall-{}-{jump}", std::process::id()),
        &opts,
        &clock,
    )
}

/// Checks the catch-up bounds on departures `ts` of a stream of gap `gap`: at most `burst`
/// packets at one time, and over any span at most `burst` more than `peak` times the rate
/// allows.
fn assert_bounded(ts: &[u64], gap: u64, peak: u64, burst: u64) {
    let peak_gap = gap / peak;
    let mut same = 1;
    for w in ts.windows(2) {
        same = if w[1] == w[0] { same + 1 } else { 1 };
        assert!(same <= burst, "more than {burst} back to back");
    }
    for i in 0..ts.len() {
        for j in i + 1..ts.len() {
            let n = (j - i + 1) as u64;
            let allowed = (ts[j] - ts[i]) / peak_gap + burst;
            if n > allowed {
                panic!(
                    "packets {i}..={j}: {n} in {} ns, more than {allowed}",
                    ts[j] - ts[i]
                );
            }
        }
    }
}

#[test]
fn worker_moves_the_schedule_after_a_stall_with_on_stall_shift() {
    let (ts, rep) = stalled(OnStall::Shift, 1_000_000);
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
    assert_eq!(rep.precision.catch_up.gaps, 0);
    assert_eq!(rep.precision.within[3], 2998, "{}", rep.precision.table());
    assert!(rep
        .precision
        .table()
        .contains("schedule moved later 1 times"));
    // The mean rate fell by the stall, and the report says why.
    assert!(rep.pps() < 0.8e6, "{}", rep.pps());
    assert_eq!(rep.shortfall(rep.pps()), Some(gen::Shortfall::Shifted));
}

#[test]
fn worker_catches_up_a_stall_within_bounds_by_default() {
    let (ts, rep) = stalled(OnStall::default(), 1_000_000);
    assert_eq!(ts.len(), 3000);
    // The owed packets leave at most 32 at once, then at most 8x the rate: never the whole
    // millisecond's worth back to back.
    assert_bounded(&ts, 1000, 8, 32);
    let bunched = ts.windows(2).filter(|w| w[1] == w[0]).count();
    assert!((25..=40).contains(&bunched), "{bunched}");
    // The catch-up ends and the last packet leaves on the unmoved schedule: the mean rate is
    // the asked one, exactly on this clock.
    assert_eq!(ts[2999] - ts[0], 2999 * 1000);
    assert_eq!(rep.precision.slips, 0);
    assert!((rep.pps() - 1e6).abs() < 1.0, "{}", rep.pps());
    assert_eq!(rep.shortfall(rep.pps()), None);
    assert_eq!(rep.rate_pps, Some(1e6));
    // The table: the stall's gap counts with the gaps on schedule, which are otherwise exact;
    // the catch-up window's gaps are counted apart.
    let p = &rep.precision;
    assert_eq!(p.gaps + p.catch_up.gaps, 2999);
    assert!(p.catch_up.gaps > 300, "{}", p.table());
    // (at most one more gap on schedule deviates: the one after the catch-up ends, when the
    // last owed packet left less than 512 ns late)
    assert!(p.within[0] >= p.gaps - 2, "{}", p.table());
    assert!(p.max_dev >= 1_000_000, "{}", p.table());
    assert_eq!(p.behind, 1);
    assert!(p.table().contains("catching up"), "{}", p.table());
}

#[test]
fn worker_gives_up_lateness_beyond_the_catch_up_window() {
    let window = 1_000_000;
    let (ts, rep) = stalled(
        OnStall::CatchUp(CatchUp {
            window_ns: window,
            ..Default::default()
        }),
        5_000_000,
    );
    assert_eq!(ts.len(), 3000);
    assert_bounded(&ts, 1000, 8, 32);
    // 5 ms late: 1 ms is caught up, the rest is given up (the schedule moves by it), once.
    let p = &rep.precision;
    assert_eq!(p.slips, 1, "{}", p.table());
    assert!(p.slipped_ns.abs_diff(4_000_000) < 2_000, "{}", p.slipped_ns);
    assert_eq!(ts[2999] - ts[0], 2999 * 1000 + p.slipped_ns);
    assert_eq!(
        rep.shortfall(rep.pps()),
        Some(gen::Shortfall::Generator),
        "{}",
        rep.pps()
    );
}

#[test]
fn worker_keeps_the_mean_rate_when_the_cpu_is_taken_again_and_again() {
    // 60 us away in every 260 us (23 % of the time), for 4 ms at 1 Mpps (the wire holds the
    // 4000 packets until they are read after the run).
    let run = |on_stall: OnStall| {
        let clock = PeriodicStalls::new(5_000_000, 200_000, 60_000);
        let opts = GenOptions {
            on_stall,
            ..one_stream(Pattern::Cbr, 1e6, 4000)
        };
        let name = format!("gen-sched-periodic-{on_stall:?}-{}", std::process::id());
        run_on(&name.replace([' ', '{', '}', ':', ','], ""), &opts, &clock)
    };
    let (ts, rep) = run(OnStall::default());
    assert_eq!(ts.len(), 4000);
    assert_bounded(&ts, 1000, 8, 32);
    assert!(rep.precision.behind >= 10, "{}", rep.precision.table());
    let pps = rep.pps();
    assert!((pps / 1e6 - 1.0).abs() < 0.005, "{pps}");
    assert_eq!(rep.shortfall(pps), None);
    // Moving the schedule instead loses the stalls' time, and says so.
    let (_, rep) = run(OnStall::Shift);
    let pps = rep.pps();
    assert!(pps < 0.85e6, "{pps}");
    assert_eq!(rep.shortfall(pps), Some(gen::Shortfall::Shifted));
}

#[test]
fn a_duration_sends_the_packets_scheduled_in_it_after_a_stall() {
    let opts = |d: u64| GenOptions {
        duration: Some(std::time::Duration::from_nanos(d)),
        count: None,
        ..one_stream(Pattern::Cbr, 1e6, 0)
    };
    let quiet = FakeClock::new(5_000_000, 1);
    let (want, _) = run_on(
        &format!("gen-sched-dur-a-{}", std::process::id()),
        &opts(3_000_000),
        &quiet,
    );
    // A 500 us stall 2 ms into a 3 ms run: caught up before the end, nothing missing.
    let clock = StallingClock {
        inner: FakeClock::new(5_000_000, 1),
        reads: Default::default(),
        at: 1_800_000,
        jump: 500_000,
    };
    let (ts, rep) = run_on(
        &format!("gen-sched-dur-b-{}", std::process::id()),
        &opts(3_000_000),
        &clock,
    );
    assert!(rep.precision.behind >= 1, "{}", rep.precision.table());
    assert_eq!(ts.len(), want.len());
    assert_eq!(rep.shortfall(rep.pps()), None, "{}", rep.pps());
    // A stall across the end: the owed packets go in the grace after it, and none scheduled
    // after the end.
    for at in [2_960_000, 2_975_000, 2_990_000] {
        // The clock starts at 5 ms: the run's schedule at 5.02 ms, its end at 8 ms.
        let clock = PeriodicStalls::new(5_000_000, at, 250_000);
        let (ts, rep) = run_on(
            &format!("gen-sched-dur-c-{at}-{}", std::process::id()),
            &opts(3_000_000),
            &clock,
        );
        assert!(rep.precision.behind >= 1, "{}", rep.precision.table());
        assert_eq!(ts.len(), want.len(), "stall {at} ns in");
    }
}

//! Clocks: wall time for packet timestamps, monotonic time for rates and timers.

use std::sync::atomic::{AtomicU64, Ordering};

/// Nanoseconds since the Unix epoch (CLOCK_REALTIME).
#[inline]
pub fn wall_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// Nanoseconds of a monotonic clock with an arbitrary origin (CLOCK_MONOTONIC).
#[inline]
pub fn mono_ns() -> u64 {
    use std::sync::OnceLock;
    use std::time::Instant;
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// [`mono_ns`] as a [`Clock`].
#[derive(Clone, Copy, Debug, Default)]
pub struct MonoClock;

impl Clock for MonoClock {
    #[inline]
    fn now_ns(&self) -> u64 {
        mono_ns()
    }
}

/// [`wall_ns`] as a [`Clock`]: send stamps that a receiver in any thread (or a kernel receive
/// timestamp, CLOCK_REALTIME too) compares directly, where a TSC clock anchored once drifts
/// from it by more than a latency through a forwarder.
#[derive(Clone, Copy, Debug, Default)]
pub struct WallClock;

impl Clock for WallClock {
    #[inline]
    fn now_ns(&self) -> u64 {
        wall_ns()
    }
}

/// A source of nanoseconds, injected into schedulers and generators so that their tests are
/// deterministic. Readings only need to be monotonic and comparable within one process.
pub trait Clock: Send + Sync {
    /// Nanoseconds since an origin fixed by the clock.
    fn now_ns(&self) -> u64;
}

/// The TSC (through `quanta`), kept on the wall clock: readings are nanoseconds since the Unix
/// epoch (CLOCK_REALTIME), so that two processes on one machine can compare them (send
/// stamps of latency probes against the kernel's receive timestamps, which are CLOCK_REALTIME).
///
/// quanta's start-up calibration of the TSC rate is off by some parts per million (17 ppm on a
/// KVM guest here, 17 µs per second; thousands when its thread is preempted mid-way), which
/// alone would make one-way latencies wrong by hundreds of microseconds after a few seconds.
/// So the clock starts from a rate it measures itself (two paired readings of the wall clock
/// 2 ms apart) and disciplines itself: every [`DISCIPLINE_NS`] (more often in its first 50 ms,
/// from [`FIRST_PERIOD_NS`] on) the first reader to notice reads CLOCK_REALTIME once and sets
/// the rate for the next period so that the
/// clock meets the wall clock at its end (rate measured over the whole life of the clock, with
/// a correction of at most [`MAX_SLEW_PPM`]). Readings stay continuous and never go back; they
/// stay within about 100 ns of CLOCK_REALTIME (±60 ns measured on a KVM guest, start-up
/// included). A step of the wall clock (settimeofday, an NTP step) is followed by slewing at
/// the maximum rate, or by a jump when the wall clock moved forward by more than [`STEP_NS`].
///
/// Reading costs ~10 ns and no system call (a TSC read, a seqlock read of the mapping).
pub struct TscClock {
    clock: quanta::Clock,
    /// Writers make it odd while they change the mapping.
    seq: AtomicU64,
    /// Raw reading at which the mapping starts.
    raw_base: AtomicU64,
    /// Nanoseconds at `raw_base`.
    ns_base: AtomicU64,
    /// Nanoseconds per raw tick, 32.32 fixed point.
    mult: AtomicU64,
    /// Raw reading after which the next reader disciplines the clock.
    next: AtomicU64,
    /// Long-run anchor of the rate: a raw reading, the wall clock then, the rate to use
    /// until the baseline is a period long.
    raw0: AtomicU64,
    wall0: AtomicU64,
    rate0: AtomicU64,
}

/// How often a [`TscClock`] compares itself with CLOCK_REALTIME.
pub const DISCIPLINE_NS: u64 = 50_000_000;
/// The first period of a [`TscClock`] (then each is as long as the clock's life so far, up
/// to [`DISCIPLINE_NS`]).
pub const FIRST_PERIOD_NS: u64 = 2_000_000;
/// Largest rate correction a [`TscClock`] applies for one period, parts per million.
pub const MAX_SLEW_PPM: u64 = 500;
/// A wall clock ahead of a [`TscClock`] by more than this was stepped: the clock jumps to it.
pub const STEP_NS: i64 = 50_000_000;
/// Widest pair of TSC reads around a wall clock reading that a [`TscClock`] trusts.
pub const PAIR_MAX_NS: u64 = 400;

/// The mapping of raw ticks to nanoseconds for one period.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Mapping {
    raw_base: u64,
    ns_base: u64,
    mult: u64,
    next: u64,
}

impl Mapping {
    #[inline(always)]
    fn ns(&self, raw: u64) -> u64 {
        if raw >= self.raw_base {
            let d = ((raw - self.raw_base) as u128 * self.mult as u128) >> 32;
            self.ns_base.wrapping_add(d as u64)
        } else {
            // A reading older than the mapping (another thread moved it on meanwhile).
            let d = ((self.raw_base - raw) as u128 * self.mult as u128) >> 32;
            self.ns_base.wrapping_sub(d as u64)
        }
    }

    /// The mapping for the period that starts at `raw`, when the wall clock reads `wall`.
    /// `base` is the long-run rate anchor: a raw reading, the wall clock then, and the last
    /// good rate (used while the baseline is shorter than a period). Returns the mapping and
    /// the anchor from here on (restarted after a step of the wall clock).
    fn discipline(&self, raw: u64, wall: u64, base: Anchor) -> (Mapping, Anchor) {
        let now = self.ns(raw);
        let err = wall as i64 - now as i64;
        // Periods grow with the baseline, from FIRST_PERIOD_NS to DISCIPLINE_NS: early on the
        // rate is the start-up calibration's, whose error a short period keeps small.
        let age = wall.saturating_sub(base.wall);
        let period = age.clamp(FIRST_PERIOD_NS, DISCIPLINE_NS) as i128;
        // A wall clock off by more than slewing explains was stepped: restart the baseline
        // (a rate over it would carry the step) and keep the last good rate.
        let max_drift = (period * 2 * MAX_SLEW_PPM as i128 / 1_000_000).max(10_000);
        let (rate, anchor) = if err.unsigned_abs() as i128 > max_drift {
            (base.rate, Anchor { raw, wall, ..base })
        } else if raw > base.raw && age >= FIRST_PERIOD_NS {
            // Long-run rate, ns per tick (32.32), over the whole baseline.
            let r = ((((wall - base.wall) as u128) << 32) / (raw - base.raw) as u128) as u64;
            (r, Anchor { rate: r, ..base })
        } else {
            (base.rate, base)
        };
        let rate = rate.max(1);
        let next = raw.saturating_add(((period as u128) << 32).div_ceil(rate as u128) as u64);
        if err > STEP_NS {
            // The wall clock jumped forward: follow it.
            let m = Mapping {
                raw_base: raw,
                ns_base: wall,
                mult: rate,
                next,
            };
            return (m, anchor);
        }
        // Meet the wall clock at the end of the next period, within the slew bound.
        let max = period * MAX_SLEW_PPM as i128 / 1_000_000;
        let corr = (err as i128).clamp(-max, max);
        let mult = (rate as i128 * (period + corr) / period).max(1) as u64;
        let m = Mapping {
            raw_base: raw,
            ns_base: now,
            mult,
            next,
        };
        (m, anchor)
    }
}

/// Where the long-run rate of a [`TscClock`] is measured from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Anchor {
    raw: u64,
    wall: u64,
    /// ns per tick (32.32) to use until the baseline is a period long.
    rate: u64,
}

/// A raw reading and the wall clock at that tick: of 16 tries (wall clock read between two
/// raw reads), the narrowest, if it is at most [`PAIR_MAX_NS`] wide. The error of the pairing
/// is at most half its width.
fn pair(clock: &quanta::Clock) -> Option<(u64, u64)> {
    let mut best: Option<(u64, u64, u64)> = None;
    for _ in 0..16 {
        let a = clock.raw();
        let w = wall_ns();
        let b = clock.raw();
        if b < a {
            continue;
        }
        let d = clock.delta_as_nanos(a, b);
        if best.is_none_or(|(_, _, bd)| d < bd) {
            best = Some((a + (b - a) / 2, w, d));
        }
    }
    best.filter(|&(_, _, d)| d <= PAIR_MAX_NS)
        .map(|(r, w, _)| (r, w))
}

/// How long [`start_rate`] measures the TSC against the wall clock.
const START_RATE_NS: u64 = 2_000_000;

/// The first rate of a [`TscClock`], ns for 2^32 ticks: measured once a process between two
/// paired readings of the wall clock [`START_RATE_NS`] apart (each pairing off by at most half
/// of [`PAIR_MAX_NS`], so at most 200 ppm off, a few ppm usually), not quanta's start-up
/// calibration: that one reads the TSC and the monotonic clock one after the other without
/// pairing them, and a thread preempted between the two reads on a busy machine leaves it
/// thousands of ppm off; the clock would run microseconds ahead of the wall clock for its first
/// periods (a latency probe stamped then would look older than its kernel receive stamp) or,
/// past 5000 ppm, never meet it. quanta's rate is the fallback when no pairing is narrow enough.
fn start_rate(clock: &quanta::Clock) -> u64 {
    use std::sync::OnceLock;
    static RATE: OnceLock<u64> = OnceLock::new();
    *RATE.get_or_init(|| {
        let quanta = clock.delta_as_nanos(0, 1 << 32).max(1);
        let paired = || (0..8).find_map(|_| pair(clock));
        let Some((r0, w0)) = paired() else {
            return quanta;
        };
        while wall_ns() < w0 + START_RATE_NS {
            std::hint::spin_loop();
        }
        match paired() {
            Some((r1, w1)) if r1 > r0 && w1 > w0 => {
                ((((w1 - w0) as u128) << 32) / (r1 - r0) as u128).max(1) as u64
            }
            _ => quanta,
        }
    })
}

impl TscClock {
    /// Calibrates (the first one in a process takes a few ms: quanta's calibration, then
    /// its own measure of the TSC's rate) and anchors to the wall clock.
    pub fn new() -> TscClock {
        let clock = quanta::Clock::new();
        // Anchor between two close raw reads so that the wall reading sits in the middle.
        let (raw0, wall0) = pair(&clock).unwrap_or_else(|| (clock.raw(), wall_ns()));
        let mult = start_rate(&clock);
        let period_raw = (((FIRST_PERIOD_NS as u128) << 32) / mult as u128) as u64;
        TscClock {
            clock,
            seq: AtomicU64::new(0),
            raw_base: AtomicU64::new(raw0),
            ns_base: AtomicU64::new(wall0),
            mult: AtomicU64::new(mult),
            next: AtomicU64::new(raw0.saturating_add(period_raw)),
            raw0: AtomicU64::new(raw0),
            wall0: AtomicU64::new(wall0),
            rate0: AtomicU64::new(mult),
        }
    }

    #[inline(always)]
    fn mapping(&self) -> Mapping {
        loop {
            let s1 = self.seq.load(Ordering::Acquire);
            let m = Mapping {
                raw_base: self.raw_base.load(Ordering::Relaxed),
                ns_base: self.ns_base.load(Ordering::Relaxed),
                mult: self.mult.load(Ordering::Relaxed),
                next: self.next.load(Ordering::Relaxed),
            };
            std::sync::atomic::fence(Ordering::Acquire);
            if s1 & 1 == 0 && self.seq.load(Ordering::Relaxed) == s1 {
                return m;
            }
            std::hint::spin_loop();
        }
    }

    /// A raw reading and the wall clock at that tick: the wall clock read between two raw
    /// reads at most [`PAIR_MAX_NS`] apart (a few tries), or None.
    fn paired_reading(&self) -> Option<(u64, u64)> {
        pair(&self.clock)
    }

    /// Moves the mapping on at `raw` (one thread; others keep the current one meanwhile).
    #[cold]
    fn discipline(&self, m: Mapping, raw: u64) {
        let s = self.seq.load(Ordering::Relaxed);
        if s & 1 == 1
            || self
                .seq
                .compare_exchange(s, s + 1, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        std::sync::atomic::fence(Ordering::Release);
        // Re-read under the lock: another thread may have moved it on since `m` was read.
        let cur = Mapping {
            raw_base: self.raw_base.load(Ordering::Relaxed),
            ns_base: self.ns_base.load(Ordering::Relaxed),
            mult: self.mult.load(Ordering::Relaxed),
            next: self.next.load(Ordering::Relaxed),
        };
        if cur == m && raw >= m.next {
            // A wall reading between two close raw ones (a thread preempted in between would
            // tie the wall clock to the wrong tick and put the clock off by the stall).
            let Some((raw, wall)) = self.paired_reading() else {
                // Not now (a busy machine): try again in a tenth of a period.
                let later = m.next.saturating_add(
                    (((DISCIPLINE_NS / 10) as u128) << 32).div_ceil(m.mult as u128) as u64,
                );
                self.next.store(later, Ordering::Relaxed);
                self.seq.store(s + 2, Ordering::Release);
                return;
            };
            let base = Anchor {
                raw: self.raw0.load(Ordering::Relaxed),
                wall: self.wall0.load(Ordering::Relaxed),
                rate: self.rate0.load(Ordering::Relaxed),
            };
            let (n, anchor) = m.discipline(raw, wall, base);
            self.raw_base.store(n.raw_base, Ordering::Relaxed);
            self.ns_base.store(n.ns_base, Ordering::Relaxed);
            self.mult.store(n.mult, Ordering::Relaxed);
            self.next.store(n.next, Ordering::Relaxed);
            self.raw0.store(anchor.raw, Ordering::Relaxed);
            self.wall0.store(anchor.wall, Ordering::Relaxed);
            self.rate0.store(anchor.rate, Ordering::Relaxed);
        }
        self.seq.store(s + 2, Ordering::Release);
    }
}

impl Default for TscClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for TscClock {
    #[inline(always)]
    fn now_ns(&self) -> u64 {
        let r = self.clock.raw();
        let m = self.mapping();
        if r >= m.next {
            self.discipline(m, r);
            return self.mapping().ns(r);
        }
        m.ns(r)
    }
}

/// A clock for tests: every reading advances it by `step` ns (0 = frozen); [`FakeClock::set`]
/// and [`FakeClock::advance`] move it by hand.
#[derive(Debug, Default)]
pub struct FakeClock {
    now: std::sync::atomic::AtomicU64,
    step: u64,
}

impl FakeClock {
    /// Starts at `start`, advancing by `step` ns per reading.
    pub fn new(start: u64, step: u64) -> FakeClock {
        FakeClock {
            now: std::sync::atomic::AtomicU64::new(start),
            step,
        }
    }
    /// Sets the time.
    pub fn set(&self, t: u64) {
        self.now.store(t, std::sync::atomic::Ordering::Relaxed);
    }
    /// Moves the time forward.
    pub fn advance(&self, d: u64) {
        self.now.fetch_add(d, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Clock for FakeClock {
    fn now_ns(&self) -> u64 {
        self.now
            .fetch_add(self.step, std::sync::atomic::Ordering::Relaxed)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// A TSC running `ppm` fast at 3 GHz nominal against a wall clock, with the mapping
    /// started from a calibration that believed the nominal rate.
    fn run(ppm: f64, step_at: Option<(u64, i64)>, periods: u64) -> Vec<(u64, i64)> {
        let ghz = 3.0 * (1.0 + ppm * 1e-6);
        let wall_of = |raw: u64, shift: i64| (1e18_f64 + raw as f64 / ghz) as i64 + shift;
        let raw0 = 1_000_000u64;
        let wall0 = wall_of(raw0, 0) as u64;
        let mult = ((1u128 << 32) as f64 / 3.0) as u64; // nominal: 1/3 ns per tick
        let mut m = Mapping {
            raw_base: raw0,
            ns_base: wall0,
            mult,
            next: raw0 + 150_000_000,
        };
        let mut base = Anchor {
            raw: raw0,
            wall: wall0,
            rate: mult,
        };
        let mut out = Vec::new();
        let mut last = 0u64;
        let mut shift = 0i64;
        let mut raw = raw0;
        // Read every 1 ms of raw time; discipline whenever due.
        let end = raw0 + periods * 150_000_000;
        while raw < end {
            raw += 3_000_000;
            if let Some((at, by)) = step_at {
                if raw >= at && shift == 0 {
                    shift = by;
                }
            }
            if raw >= m.next {
                (m, base) = m.discipline(raw, wall_of(raw, shift) as u64, base);
            }
            let ns = m.ns(raw);
            assert!(ns >= last, "went back at raw {raw}");
            last = ns;
            out.push((raw, ns as i64 - wall_of(raw, shift)));
        }
        out
    }

    #[test]
    fn a_tsc_rate_off_by_ppm_stays_on_the_wall_clock() {
        for ppm in [-40.0, -17.0, 0.0, 17.0, 100.0] {
            let errs = run(ppm, None, 200);
            // After a second (20 periods) the error stays within a microsecond.
            let worst = errs[1000..].iter().map(|(_, e)| e.abs()).max().unwrap();
            assert!(worst < 1_000, "{ppm} ppm: worst error {worst} ns after 1 s");
        }
    }

    #[test]
    fn wall_clock_steps_are_followed_without_going_back() {
        // Forward by 1 s: jump. Backward by 10 ms: slew (500 ppm: 20 s to absorb 10 ms).
        let errs = run(17.0, Some((3_000_000_000, 1_000_000_000)), 60);
        let worst = errs[1500..].iter().map(|(_, e)| e.abs()).max().unwrap();
        assert!(worst < 1_000, "after a forward step: {worst} ns");
        let errs = run(17.0, Some((3_000_000_000, -10_000_000)), 60);
        let (_, last) = *errs.last().unwrap();
        assert!(last > 0 && last < 10_000_000, "slewing back: {last} ns");
    }

    #[test]
    fn the_start_rate_is_the_tscs_rate_against_the_wall_clock() {
        let clock = quanta::Clock::new();
        let rate = start_rate(&clock);
        // The rate over 50 ms between two paired readings (each off by at most 200 ns).
        let paired = || {
            (0..64)
                .find_map(|_| pair(&clock))
                .expect("a narrow pairing")
        };
        let (r0, w0) = paired();
        std::thread::sleep(std::time::Duration::from_millis(50));
        let (r1, w1) = paired();
        let long = (((w1 - w0) as u128) << 32) / (r1 - r0) as u128;
        let ppm = (rate as f64 / long as f64 - 1.0) * 1e6;
        // start_rate is off by at most 200 ppm, this measure by 8.
        assert!(
            ppm.abs() < 210.0,
            "start rate {ppm:.1} ppm off the TSC's rate"
        );
    }

    #[test]
    fn real_clock_is_on_the_wall_clock_across_threads() {
        let c = TscClock::new();
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    let mut last = 0;
                    let end = std::time::Instant::now() + std::time::Duration::from_millis(300);
                    while std::time::Instant::now() < end {
                        let a = c.now_ns();
                        let w = wall_ns();
                        let b = c.now_ns();
                        // (A thread moved to the other core may read its TSC a little
                        // behind: allow a microsecond.)
                        assert!(
                            a + 1_000 >= last && b + 1_000 >= a,
                            "monotonic in a thread: {last} {a} {b}"
                        );
                        last = b;
                        // Loose bound: a loaded machine can stall between the reads.
                        assert!(w + 5_000_000 > a && b + 5_000_000 > w, "{a} {w} {b}");
                    }
                });
            }
        });
    }
}

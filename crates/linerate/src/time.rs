//! Clocks: wall time for packet timestamps, monotonic time for rates and timers.

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

/// A source of nanoseconds, injected into schedulers and generators so that their tests are
/// deterministic. Readings only need to be monotonic and comparable within one process.
pub trait Clock: Send + Sync {
    /// Nanoseconds since an origin fixed by the clock.
    fn now_ns(&self) -> u64;
}

/// The TSC (through `quanta`, calibrated against the monotonic clock), anchored to the wall
/// clock at creation: readings are nanoseconds since the Unix epoch, so that two processes on
/// one machine can compare them (send and receive timestamps of latency probes). Reading costs
/// ~10 ns and no system call.
pub struct TscClock {
    clock: quanta::Clock,
    raw0: u64,
    wall0: u64,
}

impl TscClock {
    /// Calibrates (the first one in a process takes ~10 ms) and anchors to the wall clock.
    pub fn new() -> TscClock {
        let clock = quanta::Clock::new();
        // Anchor between two raw reads so that the wall reading sits in the middle.
        let a = clock.raw();
        let wall0 = wall_ns();
        let b = clock.raw();
        let raw0 = a + (b.wrapping_sub(a)) / 2;
        TscClock { clock, raw0, wall0 }
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
        if r >= self.raw0 {
            self.wall0 + self.clock.delta_as_nanos(self.raw0, r)
        } else {
            self.wall0 - self.clock.delta_as_nanos(r, self.raw0)
        }
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

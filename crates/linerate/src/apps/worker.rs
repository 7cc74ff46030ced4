//! What every worker loop shares: why it ended ([`Ended`], with its text), how it waits for
//! packets ([`Backoff`]), where it stops by itself ([`Limits`]) and its statistics clock
//! ([`Ticker`]). count, balance, fwd, flows and gen use them, so that their reports, JSON
//! and exit reasons read alike and no worker imports another for them.

use std::time::Duration;

/// Why a worker's loop ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    /// `-c` packets were counted (or sent).
    Count,
    /// `-t` elapsed.
    Duration,
    /// A finite input was exhausted (every input is a finished file).
    EndOfInput,
    /// A signal (or the caller) asked to stop.
    Stopped,
    /// A port (or a script) failed.
    Error,
}

impl Ended {
    /// What the summaries print: "count reached", "time limit", "end of input", "interrupted",
    /// "error" (a tool that knows which port or script failed says so instead).
    pub fn text(self) -> &'static str {
        match self {
            Ended::Count => "count reached",
            Ended::Duration => "time limit",
            Ended::EndOfInput => "end of input",
            Ended::Stopped => "interrupted",
            Ended::Error => "error",
        }
    }

    /// A small number for an atomic shared by threads ([`Ended::from_code`] reads it back).
    pub fn code(self) -> u8 {
        match self {
            Ended::Count => 0,
            Ended::Duration => 1,
            Ended::EndOfInput => 2,
            Ended::Stopped => 3,
            Ended::Error => 4,
        }
    }

    /// The [`Ended`] of a [`Ended::code`] (anything unknown is an error).
    pub fn from_code(c: u8) -> Ended {
        match c {
            0 => Ended::Count,
            1 => Ended::Duration,
            2 => Ended::EndOfInput,
            3 => Ended::Stopped,
            _ => Ended::Error,
        }
    }
}

impl std::fmt::Display for Ended {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.text())
    }
}

/// How a polling consumer waits for packets. An empty poll spins 64 times, then gives the core
/// away with `sched_yield` (a consumer sharing the core runs at once, and one alone on its core
/// is back after a syscall) for about a millisecond of idleness, and only then sleeps 50 µs
/// per poll. A sleeping consumer misses what arrives meanwhile (at 60 Mpps a 4096-slot queue
/// fills in 70 µs, less than a sleep plus the kernel's 50 µs timer slack), so it sleeps only
/// when the traffic stopped. A busy consumer also yields every `busy_every` batches (0: never),
/// so that two consumers on one core take turns within a scheduler slice instead of one
/// leaving the other's queue to overflow for milliseconds.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    idle: u32,
    busy: u32,
    busy_every: u32,
}

impl Backoff {
    /// Empty polls that spin before yielding.
    const SPINS: u32 = 64;
    /// Empty polls that yield before sleeping (~1 ms).
    const YIELDS: u32 = 2048;
    /// What consumers use: a yield every 32 batches (≤ 2048 packets, ~40 µs at 50 Mpps) costs
    /// about 1 % when the consumer is alone on its core.
    pub const BUSY_EVERY: u32 = 32;

    /// A backoff that yields every `busy_every` non-empty batches too (0: never).
    pub fn new(busy_every: u32) -> Backoff {
        Backoff {
            idle: 0,
            busy: 0,
            busy_every,
        }
    }

    /// After a poll that returned packets.
    #[inline]
    pub fn got(&mut self) {
        self.idle = 0;
        if self.busy_every > 0 {
            self.busy += 1;
            if self.busy >= self.busy_every {
                self.busy = 0;
                std::thread::yield_now();
            }
        }
    }

    /// After an empty poll: spin, yield or sleep.
    #[inline]
    pub fn wait(&mut self) {
        self.idle = self.idle.saturating_add(1);
        if self.idle <= Self::SPINS {
            std::hint::spin_loop();
        } else if self.idle <= Self::SPINS + Self::YIELDS {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_go_both_ways() {
        for e in [
            Ended::Count,
            Ended::Duration,
            Ended::EndOfInput,
            Ended::Stopped,
            Ended::Error,
        ] {
            assert_eq!(Ended::from_code(e.code()), e);
            assert!(!e.to_string().is_empty());
        }
        assert_eq!(Ended::from_code(200), Ended::Error);
    }
}

/// Where a worker stops by itself: after `count` packets (`-c`) or at the time limit (`-t`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Limits {
    /// Packets after which the worker stops.
    pub count: Option<u64>,
    /// Monotonic ns at which it stops.
    pub deadline: Option<u64>,
}

impl Limits {
    /// The limits of a run that started at `t0` (monotonic ns).
    pub fn new(count: Option<u64>, duration: Option<Duration>, t0: u64) -> Limits {
        Limits {
            count,
            deadline: duration
                .map(|d| t0.saturating_add(d.as_nanos().min(u64::MAX as u128) as u64)),
        }
    }

    /// Whether `done` packets reach the count.
    #[inline(always)]
    pub fn count_reached(&self, done: u64) -> bool {
        self.count.is_some_and(|c| done >= c)
    }

    /// How many more packets the next batch may take (at most `max`; `max` without a count).
    #[inline(always)]
    pub fn room(&self, done: u64, max: usize) -> usize {
        match self.count {
            Some(c) => c.saturating_sub(done).min(max as u64) as usize,
            None => max,
        }
    }

    /// Whether the time limit has passed at `now` (monotonic ns).
    #[inline(always)]
    pub fn time_up(&self, now: u64) -> bool {
        self.deadline.is_some_and(|d| now >= d)
    }
}

/// The statistics clock of a worker: [`Ticker::due`] is true once per interval.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ticker {
    next: u64,
    interval: u64,
}

impl Ticker {
    /// Ticks every `interval` (at least 1 ns) after `t0` (monotonic ns).
    pub fn new(t0: u64, interval: Duration) -> Ticker {
        let interval = (interval.as_nanos().min(u64::MAX as u128) as u64).max(1);
        Ticker {
            next: t0.saturating_add(interval),
            interval,
        }
    }

    /// Whether a tick is due at `now`; the next one is an interval after `now`.
    #[inline(always)]
    pub fn due(&mut self, now: u64) -> bool {
        if now < self.next {
            return false;
        }
        self.next = now.saturating_add(self.interval);
        true
    }

    /// When the next tick is due (monotonic ns).
    pub fn next(&self) -> u64 {
        self.next
    }

    /// The interval in ns.
    pub fn interval_ns(&self) -> u64 {
        self.interval
    }
}

#[cfg(all(test, not(loom)))]
mod limits_tests {
    use super::*;

    #[test]
    fn limits_and_ticks() {
        let l = Limits::new(Some(100), Some(Duration::from_millis(5)), 1_000);
        assert!(!l.count_reached(99) && l.count_reached(100));
        assert_eq!(
            (l.room(90, 64), l.room(10, 64), l.room(100, 64)),
            (10, 64, 0)
        );
        assert!(!l.time_up(5_000_999) && l.time_up(5_001_000));
        let none = Limits::new(None, None, 0);
        assert!(!none.count_reached(u64::MAX) && !none.time_up(u64::MAX));
        assert_eq!(none.room(5, 64), 64);
        // A huge duration saturates instead of wrapping.
        assert!(!Limits::new(None, Some(Duration::MAX), 10).time_up(u64::MAX - 1));
        let mut t = Ticker::new(0, Duration::from_nanos(10));
        assert!(!t.due(9) && t.due(10) && !t.due(15) && t.due(25));
        assert_eq!(t.next(), 35);
        assert!(Ticker::new(0, Duration::ZERO).due(1), "at least 1 ns");
    }
}

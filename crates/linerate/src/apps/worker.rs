//! What every worker loop shares: why it ended ([`Ended`], with its text) and how it waits for
//! packets ([`Backoff`]). count, balance, fwd and flows use them, so that their reports, JSON
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

//! One statistics interval of a generator's threads ([`Interval::of`] two readings of each
//! thread's [`GenTick`]), and what it was doing when its rate missed the asked one
//! ([`Interval::status`]: port-limited, generator-limited, stalled, catching up).

use super::{GenTick, RATE_TOLERANCE};
use crate::stats::{group, group_f};

/// One interval of all threads.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Interval {
    /// Packets the ports took so far.
    pub pkts: u64,
    /// Their bytes so far.
    pub bytes: u64,
    /// Packets in the interval.
    pub interval_pkts: u64,
    /// Bytes in the interval.
    pub interval_bytes: u64,
    /// Packets per second in the interval, summed over the threads (each over its own
    /// readings).
    pub pps: f64,
    /// Mbit/s in the interval (with 4 bytes of CRC a packet), summed over the threads.
    pub mbps: f64,
    /// Largest lateness now (ns).
    pub behind_ns: u64,
    /// A thread is behind its schedule now.
    pub behind: bool,
    /// A thread was behind at the start of the interval too and fell further behind (or by
    /// more than half the interval).
    pub falling: bool,
    /// The schedule moved later in the interval.
    pub slipped: bool,
    /// A port was full in the interval.
    pub port_full: bool,
    /// Packets the ports dropped in the interval.
    pub port_dropped: u64,
}

impl Interval {
    /// The interval between `prev` and `cur`, one reading per thread each (a thread with no
    /// newer reading adds its totals only).
    pub fn of(prev: &[GenTick], cur: &[GenTick]) -> Interval {
        let mut iv = Interval::default();
        for (p, c) in prev.iter().zip(cur) {
            // What the port took: a packet it dropped was not sent.
            let (cp, cb, pp, pb) = (c.taken(), c.taken_bytes(), p.taken(), p.taken_bytes());
            iv.pkts += cp;
            iv.bytes += cb;
            if c.t_ns > p.t_ns {
                let dt = (c.t_ns - p.t_ns) as f64 / 1e9;
                let dp = cp.saturating_sub(pp) as f64;
                iv.interval_pkts += cp.saturating_sub(pp);
                iv.interval_bytes += cb.saturating_sub(pb);
                iv.pps += dp / dt;
                iv.mbps += (cb.saturating_sub(pb) as f64 + 4.0 * dp) * 8.0 / dt / 1e6;
                iv.slipped |= c.slipped_ns > p.slipped_ns;
                iv.port_full |= c.port_full > p.port_full;
                iv.port_dropped += c.drops.total().saturating_sub(p.drops.total());
                // Falling behind: behind at both ends and later at the end, or behind by more
                // than half the interval (longer than a stall of a loaded machine).
                iv.falling |= c.behind
                    && ((p.behind && (c.behind_ns > p.behind_ns || c.slipped_ns > p.slipped_ns))
                        || c.behind_ns > (c.t_ns - p.t_ns) / 2);
            }
            iv.behind_ns = iv.behind_ns.max(c.behind_ns);
            iv.behind |= c.behind;
        }
        iv
    }

    /// What an interval whose rate differs from `asked` by more than the tolerance was
    /// doing: below the rate and falling further behind through it, the generator (or the
    /// port) could not keep up; below it and behind after a stall, it stalled; behind and
    /// above it, it was catching up; on schedule again and above it, it caught up. None
    /// within the tolerance.
    pub fn status(&self, asked: f64) -> Option<String> {
        if (self.pps - asked).abs() <= asked * RATE_TOLERANCE {
            return None;
        }
        let behind = format!("{} ms behind", group_f(self.behind_ns as f64 / 1e6, 3));
        Some(match (self.behind, self.pps < asked) {
            (_, true) if self.port_dropped > 0 => {
                format!("port-limited, it dropped {}", group(self.port_dropped))
            }
            (true, true) if self.falling && self.port_full => format!("port-limited, {behind}"),
            (true, true) if self.falling => format!("generator-limited, {behind}"),
            (true, true) => format!("stalled, {behind}"),
            (true, false) => format!("catching up, {behind}"),
            (false, false) => "caught up".into(),
            (false, true) if self.slipped => "schedule moved later".into(),
            (false, true) => "stalled".into(),
        })
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn tick(t_ns: u64, pkts: u64, behind_ns: u64) -> GenTick {
        GenTick {
            t_ns,
            pkts,
            bytes: pkts * 60,
            behind_ns,
            behind: behind_ns > 0,
            ..Default::default()
        }
    }

    #[test]
    fn an_interval_sums_its_threads_and_says_why_it_missed_the_rate() {
        // Two threads, 1000 packets each in 1 s, neither behind: 2000 pps, on the rate.
        let prev = [tick(0, 0, 0), tick(0, 0, 0)];
        let cur = [tick(1_000_000_000, 1000, 0), tick(1_000_000_000, 1000, 0)];
        let iv = Interval::of(&prev, &cur);
        assert_eq!(
            (iv.pkts, iv.interval_pkts, iv.interval_bytes),
            (2000, 2000, 120_000)
        );
        assert!((iv.pps - 2000.0).abs() < 1e-6);
        assert!((iv.mbps - 2000.0 * 64.0 * 8.0 / 1e6).abs() < 1e-9);
        assert_eq!(iv.status(2000.0), None);
        // Behind at both ends and later at the end: the generator did not keep up.
        let prev = [tick(0, 0, 1_000_000)];
        let cur = [tick(1_000_000_000, 500, 3_000_000)];
        let iv = Interval::of(&prev, &cur);
        assert!(iv.falling && iv.behind);
        assert_eq!(
            iv.status(1000.0).as_deref(),
            Some("generator-limited, 3.000 ms behind")
        );
        // Above the rate and still behind: catching up; on schedule again: caught up.
        assert_eq!(
            iv.status(100.0).as_deref(),
            Some("catching up, 3.000 ms behind")
        );
        let iv = Interval::of(&[tick(0, 0, 0)], &[tick(1_000_000_000, 500, 0)]);
        assert_eq!(iv.status(100.0).as_deref(), Some("caught up"));
        assert_eq!(iv.status(1000.0).as_deref(), Some("stalled"));
        // A thread with no newer reading adds its totals, not a rate.
        let iv = Interval::of(&[tick(5, 10, 0)], &[tick(5, 10, 0)]);
        assert_eq!((iv.pkts, iv.interval_pkts, iv.pps), (10, 0, 0.0));
    }
}

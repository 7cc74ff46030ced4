//! Departure schedules (CBR, Poisson, bursts) and the precision of the departures achieved.
//!
//! A [`Schedule`] has no clock of its own: it turns a start time into the ideal departure time
//! of each packet, and the worker waits on an injected [`crate::time::Clock`] until then. CBR
//! times are computed as `start + i * 1e9 / rate` (no accumulated rounding drift).

use super::rng::Rng;

/// How packets are spaced.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Pattern {
    /// Constant bit rate: equal gaps.
    Cbr,
    /// Exponential gaps of the same mean (a Poisson process).
    Poisson,
    /// Bursts of N packets back to back, the bursts spaced to give the mean rate.
    Burst(u32),
}

impl std::str::FromStr for Pattern {
    type Err = String;
    fn from_str(s: &str) -> Result<Pattern, String> {
        match s {
            "cbr" => Ok(Pattern::Cbr),
            "poisson" => Ok(Pattern::Poisson),
            _ => match s.strip_prefix("burst:") {
                Some(n) => match n.parse::<u32>() {
                    Ok(n) if n > 0 => Ok(Pattern::Burst(n)),
                    _ => Err(format!("'{s}': burst size must be a positive integer")),
                },
                None => Err(format!("'{s}': use cbr, poisson or burst:N")),
            },
        }
    }
}

/// The departure times of one stream.
#[derive(Clone, Debug)]
pub struct Schedule {
    pattern: Pattern,
    start: u64,
    /// Mean gap in ns.
    gap: f64,
    /// Packets scheduled so far.
    i: u64,
    /// Poisson: the running time as f64 ns since start.
    acc: f64,
    next: u64,
    rng: Rng,
}

impl Schedule {
    /// A schedule of `pps` packets per second from `start` (ns).
    pub fn new(pattern: Pattern, pps: f64, start: u64, seed: u64) -> Schedule {
        let gap = if pps > 0.0 { 1e9 / pps } else { f64::INFINITY };
        let mut s = Schedule {
            pattern,
            start,
            gap,
            i: 0,
            acc: 0.0,
            next: start,
            rng: Rng::new(seed),
        };
        s.next = s.compute(0);
        s
    }

    fn compute(&mut self, i: u64) -> u64 {
        let off = match self.pattern {
            Pattern::Cbr => i as f64 * self.gap,
            Pattern::Burst(n) => (i / u64::from(n)) as f64 * self.gap * f64::from(n),
            Pattern::Poisson => {
                if i > 0 {
                    self.acc += -self.rng.unit_open().ln() * self.gap;
                }
                self.acc
            }
        };
        self.start.saturating_add(off.round() as u64)
    }

    /// The departure time of the next packet.
    #[inline(always)]
    pub fn peek(&self) -> u64 {
        self.next
    }

    /// Takes the next departure time and moves on.
    #[inline]
    pub fn advance(&mut self) -> u64 {
        let t = self.next;
        self.i += 1;
        self.next = self.compute(self.i);
        t
    }

    /// Moves the rest of the schedule `d` ns later (after the worker lost the CPU).
    pub fn shift(&mut self, d: u64) {
        self.start = self.start.saturating_add(d);
        self.next = self.next.saturating_add(d);
    }

    /// Mean gap in ns.
    pub fn mean_gap(&self) -> f64 {
        self.gap
    }
}

/// Bounds of the precision table, in ns (MoonGen's table).
pub const PRECISION_BOUNDS: [u64; 4] = [64, 128, 256, 512];

/// How close the achieved gaps between departures came to the scheduled ones.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Precision {
    /// Gaps measured.
    pub gaps: u64,
    /// Gaps within ±64, ±128, ±256, ±512 ns of the schedule.
    pub within: [u64; 4],
    /// Largest deviation seen, ns.
    pub max_dev: u64,
    /// Sum of |deviation| (for the mean).
    pub sum_dev: u64,
    /// Times the schedule was moved later because a departure was too late to catch up.
    pub slips: u64,
    /// The time the schedule was moved by, in all (ns).
    pub slipped_ns: u64,
    last: Option<(u64, u64)>,
}

impl Precision {
    /// Records a departure at `actual` of a packet scheduled at `sched`.
    #[inline]
    pub fn record(&mut self, sched: u64, actual: u64) {
        if let Some((ls, la)) = self.last {
            let want = sched as i64 - ls as i64;
            let got = actual as i64 - la as i64;
            let dev = (got - want).unsigned_abs();
            self.gaps += 1;
            for (w, b) in self.within.iter_mut().zip(PRECISION_BOUNDS) {
                *w += u64::from(dev <= b);
            }
            self.max_dev = self.max_dev.max(dev);
            self.sum_dev += dev;
        }
        self.last = Some((sched, actual));
    }

    /// Notes that the schedule moved `d` ns later from the next departure on: that departure's
    /// gap is still compared with the unmoved schedule (its lateness is a deviation), the later
    /// ones with the moved schedule.
    pub fn slip(&mut self, d: u64) {
        self.slips += 1;
        self.slipped_ns += d;
        if let Some((ls, la)) = self.last {
            self.last = Some((ls.saturating_add(d), la));
        }
    }

    /// Forgets the last departure (after a pause that is not part of the schedule).
    pub fn reset_last(&mut self) {
        self.last = None;
    }

    /// Adds another table (from another thread).
    pub fn merge(&mut self, o: &Precision) {
        self.gaps += o.gaps;
        for i in 0..4 {
            self.within[i] += o.within[i];
        }
        self.max_dev = self.max_dev.max(o.max_dev);
        self.sum_dev += o.sum_dev;
        self.slips += o.slips;
        self.slipped_ns += o.slipped_ns;
    }

    /// Share (0..=1) of gaps within bound `i` of [`PRECISION_BOUNDS`].
    pub fn share(&self, i: usize) -> f64 {
        if self.gaps == 0 {
            return 0.0;
        }
        self.within[i] as f64 / self.gaps as f64
    }

    /// The table as text, one line per bound.
    pub fn table(&self) -> String {
        let mut s = format!(
            "Departure precision ({} gaps, mean |dev| {:.1} ns, max {} ns):\n",
            self.gaps,
            if self.gaps > 0 {
                self.sum_dev as f64 / self.gaps as f64
            } else {
                0.0
            },
            self.max_dev
        );
        for (i, b) in PRECISION_BOUNDS.iter().enumerate() {
            s += &format!("  ±{b:>3} ns  {:>7.3} %\n", 100.0 * self.share(i));
        }
        if self.slips > 0 {
            s += &format!(
                "  schedule moved later {} times ({:.3} ms in all): the CPU was taken away \
                 for longer than the worker may catch up by bunching\n",
                self.slips,
                self.slipped_ns as f64 / 1e6
            );
        }
        s
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn cbr_gaps_are_exact_and_do_not_drift() {
        let mut s = Schedule::new(Pattern::Cbr, 1e6, 1_000, 1);
        let mut prev = s.advance();
        assert_eq!(prev, 1_000);
        for _ in 0..10_000 {
            let t = s.advance();
            assert_eq!(t - prev, 1_000);
            prev = t;
        }
        // 3 Mpps: gaps of 333 or 334 ns, and packet 3'000'000 leaves exactly 1 s after the first.
        let mut s = Schedule::new(Pattern::Cbr, 3e6, 0, 1);
        let mut prev = s.advance();
        for _ in 1..3_000_000u64 {
            let t = s.advance();
            assert!((333..=334).contains(&(t - prev)), "{}", t - prev);
            prev = t;
        }
        assert_eq!(s.peek(), 1_000_000_000);
    }

    #[test]
    fn bursts_leave_together() {
        let mut s = Schedule::new(Pattern::Burst(4), 1e6, 0, 1);
        let t: Vec<u64> = (0..12).map(|_| s.advance()).collect();
        assert_eq!(
            t,
            [0, 0, 0, 0, 4000, 4000, 4000, 4000, 8000, 8000, 8000, 8000]
        );
    }

    #[test]
    fn patterns_parse() {
        assert_eq!("cbr".parse::<Pattern>().unwrap(), Pattern::Cbr);
        assert_eq!("burst:8".parse::<Pattern>().unwrap(), Pattern::Burst(8));
        assert!("burst:0".parse::<Pattern>().is_err());
        assert!("x".parse::<Pattern>().is_err());
    }

    #[test]
    fn precision_counts_deviations() {
        let mut p = Precision::default();
        p.record(0, 0);
        p.record(1000, 1050); // +50
        p.record(2000, 2000); // -50
        p.record(3000, 3300); // +300
        assert_eq!(p.gaps, 3);
        assert_eq!(p.within, [2, 2, 2, 3]);
        assert_eq!(p.max_dev, 300);
    }
}

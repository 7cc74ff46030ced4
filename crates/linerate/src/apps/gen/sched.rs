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

/// What a paced sender does when it falls behind its schedule (the CPU was taken away, the
/// port was slow to take packets).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum OnStall {
    /// Send the owed packets faster, within the bounds of [`CatchUp`], so that the mean rate
    /// over the run stays the asked one (the default).
    CatchUp(CatchUp),
    /// Move the rest of the schedule later by the lateness: the gaps after a stall keep their
    /// length and the mean rate falls by the time lost (the sender of a stall is a few gaps
    /// late at most before it moves).
    Shift,
}

impl Default for OnStall {
    fn default() -> Self {
        OnStall::CatchUp(CatchUp::default())
    }
}

/// Bounds of catching up after a stall. Owed packets leave at most `peak` times the asked rate
/// (their scheduled gaps divided by `peak`), at most `burst` of them back to back, and no more
/// than `window_ns` of lateness is caught up: beyond it the schedule moves later by the excess
/// (counted as given up). Over any span, a sender catching up sends at most `burst` packets
/// more than `peak` times the asked rate allows (a token bucket in the sense of tc's tbf
/// `peakrate`, checked per departure as the GCRA of ATM does).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CatchUp {
    /// Largest multiple of the asked rate while catching up (above 1).
    pub peak: f64,
    /// Most packets that leave back to back while catching up (at least 1).
    pub burst: u32,
    /// Most lateness caught up, ns; a longer stall gives up the excess.
    pub window_ns: u64,
}

/// Default [`CatchUp::peak`]: owed packets at up to eight times the asked rate, so that a
/// sender that gets an eighth of a CPU (in the slices a busy machine gives it) still keeps
/// its mean rate.
pub const CATCH_UP_PEAK: f64 = 8.0;
/// Default [`CatchUp::burst`]: pktgen-dpdk's burst of 32.
pub const CATCH_UP_BURST: u32 = 32;
/// Default [`CatchUp::window_ns`]: one second of owed packets.
pub const CATCH_UP_WINDOW_NS: u64 = 1_000_000_000;

impl Default for CatchUp {
    fn default() -> Self {
        CatchUp {
            peak: CATCH_UP_PEAK,
            burst: CATCH_UP_BURST,
            window_ns: CATCH_UP_WINDOW_NS,
        }
    }
}

/// Lateness (ns) up to which a sender of mean gap `gap` ns counts as on schedule: two gaps,
/// at least 2 µs. A gap after a departure later than this is inside a catch-up window (the
/// precision table shows it apart); in [`OnStall::Shift`] such lateness moves the schedule.
pub fn behind_above(gap: f64) -> u64 {
    (2.0 * gap).max(2_000.0).min(u64::MAX as f64 / 2.0) as u64
}

/// Where a late departure may go: the catch-up bounds applied to one sender's departures, one
/// at a time, with no clock of its own (the caller passes the times).
///
/// On schedule the bounds never hold a packet back: a packet may leave at its scheduled time,
/// and the peak rate only spaces packets that are already late.
#[derive(Clone, Debug)]
pub struct Pacer {
    on: OnStall,
    /// 1 / peak.
    inv_peak: f64,
    /// Burst tolerance, ns: (burst - 1) mean gaps at the peak rate.
    tol: u64,
    /// Theoretical departure time at the peak rate of the next packet (GCRA).
    tat: u64,
    /// Scheduled time of the last departure.
    last_sched: Option<u64>,
    /// Lateness above which [`OnStall::Shift`] moves the schedule.
    shift_above: u64,
}

impl Pacer {
    /// Bounds for a sender whose packets are `gap` ns apart on average (all its streams) and
    /// that is behind once a departure is more than `behind` ns late ([`behind_above`] of its
    /// fastest stream's gap).
    pub fn new(on: OnStall, gap: f64, behind: u64) -> Pacer {
        let (inv_peak, tol) = match on {
            OnStall::CatchUp(c) => {
                let peak = c.peak.max(1.0);
                let t = f64::from(c.burst.max(1) - 1) * gap / peak;
                (1.0 / peak, t.min(u64::MAX as f64 / 4.0) as u64)
            }
            OnStall::Shift => (0.0, 0),
        };
        Pacer {
            on,
            inv_peak,
            tol,
            tat: 0,
            last_sched: None,
            shift_above: behind,
        }
    }

    /// The policy.
    pub fn on_stall(&self) -> OnStall {
        self.on
    }

    /// The earliest time a packet scheduled at `s` may leave.
    #[inline(always)]
    pub fn earliest(&self, s: u64) -> u64 {
        match self.on {
            OnStall::CatchUp(_) => s.max(self.tat.saturating_sub(self.tol)),
            OnStall::Shift => s,
        }
    }

    /// How much later (ns) the rest of the schedule must move before a packet scheduled at `s`
    /// leaves at `now`: the lateness beyond the catch-up window, or with [`OnStall::Shift`]
    /// the whole lateness once it is more than a few gaps.
    #[inline]
    pub fn excess(&self, s: u64, now: u64) -> u64 {
        let late = now.saturating_sub(s);
        match self.on {
            OnStall::CatchUp(c) => late.saturating_sub(c.window_ns),
            OnStall::Shift if late > self.shift_above => late,
            OnStall::Shift => 0,
        }
    }

    /// The schedule moved `d` ns later.
    pub fn shift(&mut self, d: u64) {
        if let Some(l) = &mut self.last_sched {
            *l = l.saturating_add(d);
        }
    }

    /// A packet scheduled at `s` left at `now` (schedules in order).
    #[inline(always)]
    pub fn depart(&mut self, s: u64, now: u64) {
        let g = s.saturating_sub(self.last_sched.unwrap_or(s));
        self.tat = self.tat.max(now) + (g as f64 * self.inv_peak) as u64;
        self.last_sched = Some(s);
    }
}

/// The count form of the same bounds, for senders that hand out packets in batches with no
/// time per packet (balance's built-in source, gen's live-frames engine): how many packets
/// of a constant rate may go now. No clock of its own: every call takes the time.
#[derive(Clone, Debug)]
pub struct CountPacer {
    on: OnStall,
    /// Mean gap, ns.
    gap: f64,
    /// Gap at the peak rate, ns.
    peak_gap: f64,
    /// Burst tolerance, ns.
    tol: f64,
    /// Start of the schedule (moves later when the schedule moves).
    start: u64,
    /// Packets handed out.
    sent: u64,
    /// Theoretical time at the peak rate of the next packet (GCRA).
    tat: f64,
    shift_above: u64,
    /// Times the schedule moved later, and by how much in all (ns).
    slips: u64,
    slipped_ns: u64,
}

impl CountPacer {
    /// `pps` packets per second from `start` (ns); while catching up, batches of up to
    /// `max(burst, batch)` packets may leave at once (`batch`: what the sender hands out in one
    /// go on schedule, e.g. the packets of one kernel run).
    pub fn new(pps: f64, start: u64, on: OnStall, batch: u64) -> CountPacer {
        let gap = if pps > 0.0 { 1e9 / pps } else { f64::INFINITY };
        let (peak_gap, tol) = match on {
            OnStall::CatchUp(c) => {
                let pg = gap / c.peak.max(1.0);
                let b = u64::from(c.burst.max(1)).max(batch.max(1));
                (pg, (b - 1) as f64 * pg)
            }
            OnStall::Shift => (0.0, 0.0),
        };
        CountPacer {
            on,
            gap,
            peak_gap,
            tol,
            start,
            sent: 0,
            tat: 0.0,
            // A batch may be late by its own length without moving the schedule.
            shift_above: behind_above(gap)
                .max((batch as f64 * gap).min(u64::MAX as f64 / 2.0) as u64),
            slips: 0,
            slipped_ns: 0,
        }
    }

    /// Scheduled time of the next packet.
    pub fn next_at(&self) -> u64 {
        let t = self.start as f64 + self.sent as f64 * self.gap;
        t.min(u64::MAX as f64) as u64
    }

    /// How many packets may go at `now` (0 before the next one is due). Moves the schedule
    /// later first if the sender is later than the window allows (or, with
    /// [`OnStall::Shift`], later than a few gaps).
    pub fn allowed(&mut self, now: u64) -> u64 {
        let next = self.next_at();
        if now < next {
            return 0;
        }
        let late = now - next;
        let d = match self.on {
            OnStall::CatchUp(c) => late.saturating_sub(c.window_ns),
            OnStall::Shift if late > self.shift_above => late,
            OnStall::Shift => 0,
        };
        if d > 0 {
            self.start = self.start.saturating_add(d);
            self.slips += 1;
            self.slipped_ns += d;
        }
        let due = ((now - self.start) as f64 / self.gap) as u64 + 1;
        let due = due.saturating_sub(self.sent);
        match self.on {
            OnStall::Shift => due,
            OnStall::CatchUp(_) => {
                let room = now as f64 + self.tol - self.tat;
                if room < 0.0 {
                    return 0;
                }
                let peak = if self.peak_gap > 0.0 {
                    (room / self.peak_gap) as u64 + 1
                } else {
                    u64::MAX
                };
                due.min(peak)
            }
        }
    }

    /// `n` packets went at `now`.
    pub fn took(&mut self, n: u64, now: u64) {
        self.sent += n;
        self.tat = self.tat.max(now as f64) + n as f64 * self.peak_gap;
    }

    /// Packets handed out so far.
    pub fn sent(&self) -> u64 {
        self.sent
    }

    /// Times the schedule moved later and the time it moved by in all (ns).
    pub fn slipped(&self) -> (u64, u64) {
        (self.slips, self.slipped_ns)
    }
}

/// Bounds of the precision table, in ns (MoonGen's table).
pub const PRECISION_BOUNDS: [u64; 4] = [64, 128, 256, 512];

/// Achieved gaps between consecutive departures compared with the scheduled ones.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Gaps {
    /// Gaps measured.
    pub gaps: u64,
    /// Gaps within ±64, ±128, ±256, ±512 ns of the schedule.
    pub within: [u64; 4],
    /// Largest deviation seen, ns.
    pub max_dev: u64,
    /// Sum of |deviation| (for the mean).
    pub sum_dev: u64,
}

impl Gaps {
    #[inline(always)]
    fn add(&mut self, dev: u64) {
        self.gaps += 1;
        for (w, b) in self.within.iter_mut().zip(PRECISION_BOUNDS) {
            *w += u64::from(dev <= b);
        }
        self.max_dev = self.max_dev.max(dev);
        self.sum_dev += dev;
    }

    fn merge(&mut self, o: &Gaps) {
        self.gaps += o.gaps;
        for i in 0..4 {
            self.within[i] += o.within[i];
        }
        self.max_dev = self.max_dev.max(o.max_dev);
        self.sum_dev += o.sum_dev;
    }

    /// Share (0..=1) of gaps within bound `i` of [`PRECISION_BOUNDS`].
    pub fn share(&self, i: usize) -> f64 {
        if self.gaps == 0 {
            return 0.0;
        }
        self.within[i] as f64 / self.gaps as f64
    }

    /// Mean |deviation|, ns.
    pub fn mean_dev(&self) -> f64 {
        if self.gaps == 0 {
            return 0.0;
        }
        self.sum_dev as f64 / self.gaps as f64
    }
}

/// How close the achieved gaps between departures came to the scheduled ones. A catch-up
/// window opens at a departure more than [`behind_above`] late and closes at a departure at
/// most 512 ns late (the table's widest bound); the gaps that follow a departure inside it
/// (where owed packets leave faster on purpose) are counted apart in [`Precision::catch_up`].
/// The gap of the stall itself counts with the others, and so does the gap after the window
/// closes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Precision {
    /// Gaps measured on schedule.
    pub gaps: u64,
    /// Gaps on schedule within ±64, ±128, ±256, ±512 ns of the schedule.
    pub within: [u64; 4],
    /// Largest deviation seen on schedule, ns.
    pub max_dev: u64,
    /// Sum of |deviation| on schedule (for the mean).
    pub sum_dev: u64,
    /// Gaps inside catch-up windows.
    pub catch_up: Gaps,
    /// Times the sender fell behind (a departure later than the bound) and had to catch up.
    pub behind: u64,
    /// Largest lateness of a departure, ns.
    pub max_late_ns: u64,
    /// Times the schedule was moved later (lateness given up).
    pub slips: u64,
    /// The time the schedule was moved by, in all (ns).
    pub slipped_ns: u64,
    /// Lateness above which a departure is behind (u64::MAX: never).
    behind_above: u64,
    last: Option<(u64, u64)>,
    /// Inside a catch-up window.
    late: bool,
}

impl Default for Precision {
    fn default() -> Self {
        Precision {
            gaps: 0,
            within: [0; 4],
            max_dev: 0,
            sum_dev: 0,
            catch_up: Gaps::default(),
            behind: 0,
            max_late_ns: 0,
            slips: 0,
            slipped_ns: 0,
            behind_above: u64::MAX,
            last: None,
            late: false,
        }
    }
}

impl Precision {
    /// A table that counts the gaps after a departure later than `behind_above` ns apart.
    pub fn with_behind_above(behind_above: u64) -> Precision {
        Precision {
            behind_above,
            ..Default::default()
        }
    }

    /// Records a departure at `actual` of a packet scheduled at `sched`.
    #[inline]
    pub fn record(&mut self, sched: u64, actual: u64) {
        if let Some((ls, la)) = self.last {
            let want = sched as i64 - ls as i64;
            let got = actual as i64 - la as i64;
            let dev = (got - want).unsigned_abs();
            if self.late {
                self.catch_up.add(dev);
            } else {
                self.gaps += 1;
                for (w, b) in self.within.iter_mut().zip(PRECISION_BOUNDS) {
                    *w += u64::from(dev <= b);
                }
                self.max_dev = self.max_dev.max(dev);
                self.sum_dev += dev;
            }
        }
        let late = actual.saturating_sub(sched);
        self.max_late_ns = self.max_late_ns.max(late);
        if late > self.behind_above {
            self.behind += u64::from(!self.late);
            self.late = true;
        } else if late <= PRECISION_BOUNDS[3] {
            self.late = false;
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
        self.late = false;
    }

    /// Adds another table (from another thread).
    pub fn merge(&mut self, o: &Precision) {
        self.gaps += o.gaps;
        for i in 0..4 {
            self.within[i] += o.within[i];
        }
        self.max_dev = self.max_dev.max(o.max_dev);
        self.sum_dev += o.sum_dev;
        self.catch_up.merge(&o.catch_up);
        self.behind += o.behind;
        self.max_late_ns = self.max_late_ns.max(o.max_late_ns);
        self.slips += o.slips;
        self.slipped_ns += o.slipped_ns;
    }

    /// The gaps on schedule.
    pub fn on_schedule(&self) -> Gaps {
        Gaps {
            gaps: self.gaps,
            within: self.within,
            max_dev: self.max_dev,
            sum_dev: self.sum_dev,
        }
    }

    /// Share (0..=1) of gaps on schedule within bound `i` of [`PRECISION_BOUNDS`].
    pub fn share(&self, i: usize) -> f64 {
        self.on_schedule().share(i)
    }

    /// The table as text, one line per bound; a second column for the gaps inside catch-up
    /// windows when there were any.
    pub fn table(&self) -> String {
        let on = self.on_schedule();
        let cu = self.catch_up;
        let mut s;
        if cu.gaps == 0 {
            s = format!(
                "Departure precision ({} gaps, mean |dev| {:.1} ns, max {} ns):\n",
                on.gaps,
                on.mean_dev(),
                on.max_dev
            );
            for (i, b) in PRECISION_BOUNDS.iter().enumerate() {
                s += &format!("  ±{b:>3} ns  {:>7.3} %\n", 100.0 * on.share(i));
            }
        } else {
            s = format!(
                "Departure precision (gaps against the schedule; while catching up, owed \
                 packets leave closer on purpose):\n  {:<10} {:>14} {:>14}\n",
                "", "on schedule", "catching up"
            );
            s += &format!("  {:<10} {:>14} {:>14}\n", "gaps", on.gaps, cu.gaps);
            for (i, b) in PRECISION_BOUNDS.iter().enumerate() {
                s += &format!(
                    "  ±{b:>3} ns    {:>12.3} % {:>12.3} %\n",
                    100.0 * on.share(i),
                    100.0 * cu.share(i)
                );
            }
            s += &format!(
                "  {:<10} {:>11.1} ns {:>11.1} ns\n",
                "mean |dev|",
                on.mean_dev(),
                cu.mean_dev()
            );
            s += &format!(
                "  {:<10} {:>11} ns {:>11} ns\n",
                "max |dev|", on.max_dev, cu.max_dev
            );
        }
        if self.behind > 0 {
            s += &format!(
                "  behind the schedule {} times (at most {:.3} ms late)\n",
                self.behind,
                self.max_late_ns as f64 / 1e6
            );
        }
        if self.slips > 0 {
            s += &format!(
                "  schedule moved later {} times ({:.3} ms in all): the packets of that time \
                 were not caught up\n",
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

    /// 100 kpps for 1 s read every 100 µs, a 5 s stop, then 2 s more: returns the packets
    /// handed out in each 100 ms after the stop and the pacer.
    fn paced_stop(on: OnStall) -> (Vec<u64>, CountPacer) {
        let mut p = CountPacer::new(100_000.0, 0, on, 64);
        let mut t = 0u64;
        let take = |p: &mut CountPacer, t: u64| {
            // As a reader that asks again at once until nothing is due (64 at a time).
            let mut got = 0;
            loop {
                let n = p.allowed(t).min(64);
                if n == 0 {
                    return got;
                }
                p.took(n, t);
                got += n;
            }
        };
        while t <= 1_000_000_000 {
            take(&mut p, t);
            t += 100_000;
        }
        assert_eq!(p.sent(), 100_001, "on schedule before the stop");
        t += 5_000_000_000;
        let mut slots = vec![0u64; 20];
        for slot in slots.iter_mut() {
            for _ in 0..1000 {
                *slot += take(&mut p, t);
                t += 100_000;
            }
        }
        (slots, p)
    }

    #[test]
    fn count_pacer_catches_up_within_the_bounds_after_a_long_stop() {
        let (slots, p) = paced_stop(OnStall::default());
        // One second owed (the window), paid at no more than 8x the rate: 80'000 per 100 ms
        // at most (plus one batch), never the whole 5 s at once.
        for (i, &n) in slots.iter().enumerate() {
            assert!(n <= 80_000 + 64, "slot {i}: {n} {slots:?}");
        }
        assert!(slots[0] > 30_000, "it does catch up: {slots:?}");
        // The excess over the window was given up, once, and the rate holds after: 3 s of
        // schedule minus the 4 s given up... i.e. every packet of the last 2 s plus the
        // second owed.
        let (slips, slipped) = p.slipped();
        assert_eq!(slips, 1);
        assert!(slipped.abs_diff(4_000_000_000) <= 100_000, "{slipped}");
        assert!(
            p.sent().abs_diff(100_001 + 100_000 + 200_000) <= 20,
            "{}",
            p.sent()
        );
        assert!(slots[19].abs_diff(10_000) <= 1, "{slots:?}");
    }

    #[test]
    fn count_pacer_shift_moves_the_schedule() {
        let (slots, p) = paced_stop(OnStall::Shift);
        assert!(slots.iter().all(|&n| n.abs_diff(10_000) <= 10), "{slots:?}");
        assert_eq!(p.slipped().0, 1);
    }

    #[test]
    fn count_pacer_on_schedule_is_never_held_back() {
        for on in [OnStall::default(), OnStall::Shift] {
            let mut p = CountPacer::new(1e6, 1000, on, 64);
            assert_eq!(p.allowed(999), 0);
            let mut t = 1000;
            for _ in 0..10_000 {
                let n = p.allowed(t);
                assert_eq!(n, 1, "{on:?} at {t}");
                p.took(n, t);
                t += 1000;
            }
            assert_eq!(p.next_at(), t);
        }
    }

    #[test]
    fn pacer_spaces_only_late_packets() {
        let mut p = Pacer::new(OnStall::default(), 1000.0, 2000);
        // On schedule: each packet may leave at its time.
        for i in 0..100u64 {
            assert_eq!(p.earliest(i * 1000), i * 1000);
            p.depart(i * 1000, i * 1000);
        }
        // 1 ms late: 32 leave at once, then one every 125 ns (8x).
        let now = 100_000 + 1_000_000;
        let mut sent = Vec::new();
        let mut t = now;
        for i in 100..1000u64 {
            let s = i * 1000;
            let e = p.earliest(s);
            t = t.max(e);
            p.depart(s, t);
            sent.push(t);
        }
        assert!(sent[..32].iter().all(|&x| x == now), "{:?}", &sent[..40]);
        assert_eq!(sent[32] - sent[31], 125);
        assert_eq!(sent[100] - sent[99], 125);
        assert_eq!(p.excess(100_000, now), 0);
        assert_eq!(p.excess(0, 2_000_000_000), 1_000_000_000);
        let shift = Pacer::new(OnStall::Shift, 1000.0, 2000);
        assert_eq!(shift.excess(0, 2000), 0);
        assert_eq!(shift.excess(0, 2001), 2001);
    }

    #[test]
    fn precision_counts_catch_up_gaps_apart() {
        let mut p = Precision::with_behind_above(2000);
        p.record(0, 0);
        p.record(1000, 1000);
        p.record(2000, 12_000); // the stall: 10 us late, with the others
        p.record(3000, 12_250); // catching up: apart
        p.record(4000, 12_500); // apart
        p.record(5000, 5_000); // after a late one: apart
        p.record(6000, 6_000); // on schedule
        assert_eq!(p.gaps, 3);
        assert_eq!(p.within[0], 2);
        assert_eq!(p.max_dev, 10_000);
        assert_eq!(p.catch_up.gaps, 3);
        assert_eq!(p.behind, 1);
        assert_eq!(p.max_late_ns, 10_000);
        assert!(p.table().contains("catching up"), "{}", p.table());
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

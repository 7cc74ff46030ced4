//! Latency, loss, duplicates and reordering of probe packets (those carrying the signature of
//! [`super::template::put_sig`]), per stream, with one-way latency in an HdrHistogram.
//!
//! Sequence numbers are 32-bit on the wire and extended to 64 bits on receipt. A window of the
//! last 65'536 sequence numbers tells duplicates from late (reordered) packets.
//!
//! [`receive_probes`] is the receiving side of a latency measurement: the loop that reads a
//! port while a generator sends, tracks every probe and ends once the generator is done and
//! the packets in flight have arrived (`gen --rx`, RFC 2544's trials and `lab` use it).

use super::template::read_sig;
use crate::apps::worker::Ticker;
use crate::mem::Batch;
use crate::port::{LinkType, Port, PortError, RxTime};
use crate::time::Clock;
use crate::wire;
use hdrhistogram::Histogram;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

const WINDOW: u64 = 1 << 16;

/// State and counters of one stream.
#[derive(Clone, Debug)]
pub struct StreamLat {
    /// Stream id.
    pub id: u16,
    /// Distinct probes received.
    pub rx: u64,
    /// Probes received again.
    pub dups: u64,
    /// Probes that arrived after a later one (sequence below the highest seen).
    pub reordered: u64,
    /// Probes whose send time was after their receive time (clocks out of step); counted as 0.
    pub negative: u64,
    /// Lowest and highest (extended) sequence numbers seen.
    pub first_seq: u64,
    /// Highest sequence seen.
    pub max_seq: u64,
    /// One-way latency, ns.
    pub hist: Histogram<u64>,
    /// Delay variation of consecutive probes (RFC 3393's IPDV: the difference between the
    /// one-way delays of probes `n` and `n + 1`, both received).
    pub ipdv: Ipdv,
    seen: Box<[u64]>,
}

/// IPDV (RFC 3393) of one stream: for each pair of consecutive sequence numbers both
/// received, `delay(n + 1) - delay(n)`; summarised as the mean and the largest absolute value.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Ipdv {
    /// Pairs measured.
    pub pairs: u64,
    /// Sum of the absolute differences, ns.
    pub abs_sum: u64,
    /// Largest absolute difference, ns.
    pub max: u64,
    prev: Option<(u64, i64)>,
}

impl Ipdv {
    /// Mean absolute IPDV, ns (0 without a pair): the jitter figure of RFC 2544 testers.
    pub fn mean(&self) -> f64 {
        if self.pairs == 0 {
            0.0
        } else {
            self.abs_sum as f64 / self.pairs as f64
        }
    }

    #[inline]
    fn record(&mut self, seq: u64, lat: i64) {
        if let Some((s, l)) = self.prev {
            if s.wrapping_add(1) == seq {
                let d = lat.abs_diff(l);
                self.pairs += 1;
                self.abs_sum = self.abs_sum.saturating_add(d);
                self.max = self.max.max(d);
            }
        }
        self.prev = Some((seq, lat));
    }
}

impl StreamLat {
    fn new(id: u16, seq: u64) -> StreamLat {
        StreamLat {
            id,
            rx: 0,
            dups: 0,
            reordered: 0,
            negative: 0,
            first_seq: seq,
            max_seq: seq,
            // 1 ns .. 100 s at 3 significant digits.
            hist: new_hist(),
            ipdv: Ipdv::default(),
            seen: vec![0u64; (WINDOW / 64) as usize].into_boxed_slice(),
        }
    }

    #[inline]
    fn bit(&mut self, s: u64) -> (&mut u64, u64) {
        let i = ((s % WINDOW) / 64) as usize;
        let m = 1u64 << (s % 64);
        (&mut self.seen[i], m)
    }

    #[inline]
    fn record(&mut self, seq32: u32, lat: i64) {
        // Extend around the highest sequence seen.
        let d = i64::from(seq32.wrapping_sub(self.max_seq as u32) as i32);
        let s = (self.max_seq as i64 + d).max(0) as u64;
        if self.rx == 0 && self.dups == 0 {
            self.first_seq = s;
            self.max_seq = s;
        } else if s > self.max_seq {
            if s - self.max_seq >= WINDOW {
                self.seen.fill(0);
            } else {
                for x in self.max_seq + 1..s {
                    let (w, m) = self.bit(x);
                    *w &= !m;
                }
            }
            self.max_seq = s;
        } else if s < self.first_seq {
            self.first_seq = s;
            self.reordered += 1;
        } else if s < self.max_seq {
            if self.max_seq - s >= WINDOW {
                // Too old to tell: count it as late.
                self.reordered += 1;
                self.rx += 1;
                self.lat(lat);
                return;
            }
            let (w, m) = self.bit(s);
            if *w & m != 0 {
                self.dups += 1;
                return;
            }
            self.reordered += 1;
        } else if self.rx > 0 {
            // s == max_seq again.
            self.dups += 1;
            return;
        }
        let (w, m) = self.bit(s);
        *w |= m;
        self.rx += 1;
        self.lat(lat);
        self.ipdv.record(s, lat);
    }

    #[inline]
    fn lat(&mut self, lat: i64) {
        if lat < 0 {
            self.negative += 1;
            self.hist.saturating_record(0);
        } else {
            self.hist.saturating_record(lat as u64);
        }
    }

    /// Probes lost: `sent` (when the sender's count is known) or the gaps in the sequence
    /// numbers seen, less what arrived.
    pub fn lost(&self, sent: Option<u64>) -> u64 {
        let expected = sent.unwrap_or(if self.rx == 0 {
            0
        } else {
            self.max_seq - self.first_seq + 1
        });
        expected.saturating_sub(self.rx)
    }

    /// min, mean, p50, p90, p99, p99.9, max in ns.
    pub fn summary(&self) -> LatSummary {
        let h = &self.hist;
        LatSummary {
            min: h.min(),
            avg: h.mean(),
            p50: h.value_at_quantile(0.5),
            p90: h.value_at_quantile(0.9),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            max: h.max(),
        }
    }
}

/// An empty latency histogram: 1 ns .. 100 s at 3 significant digits.
pub fn new_hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 100_000_000_000, 3).expect("constant bounds are valid")
}

/// Latency percentiles, ns.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LatSummary {
    /// Minimum.
    pub min: u64,
    /// Mean.
    pub avg: f64,
    /// Median.
    pub p50: u64,
    /// 90th percentile.
    pub p90: u64,
    /// 99th percentile.
    pub p99: u64,
    /// 99.9th percentile.
    pub p999: u64,
    /// Maximum.
    pub max: u64,
}

/// Tracks every stream seen in received batches.
#[derive(Debug, Default)]
pub struct Tracker {
    streams: Vec<Option<Box<StreamLat>>>,
    /// Packets without a signature.
    pub other: u64,
}

impl Tracker {
    /// An empty tracker.
    pub fn new() -> Tracker {
        Tracker::default()
    }

    /// Looks at every packet of `batch`, received at `now` (ns since the epoch).
    pub fn observe(&mut self, batch: &Batch, link: LinkType, now: u64) {
        for p in batch.iter() {
            self.observe_one(p.data, link, now);
        }
    }

    /// Looks at every packet of `batch`, each received at its own timestamp (`Desc::ts`,
    /// ns since the epoch): for ports whose [`crate::port::RxTime`] is `Arrival`.
    pub fn observe_stamped(&mut self, batch: &Batch, link: LinkType) {
        for p in batch.iter() {
            self.observe_one(p.data, link, p.desc.ts);
        }
    }

    /// Looks at `batch` the way `rx` says: per-packet arrival stamps when the port has
    /// them, else `now` (ns since the epoch) for every packet.
    #[inline]
    pub fn observe_as(&mut self, batch: &Batch, link: LinkType, rx: RxTime, now: impl Fn() -> u64) {
        if rx == RxTime::Arrival {
            self.observe_stamped(batch, link);
        } else {
            self.observe(batch, link, now());
        }
    }

    /// Looks at one packet.
    #[inline]
    pub fn observe_one(&mut self, data: &[u8], link: LinkType, now: u64) {
        let parsed = wire::parse(data, link);
        let sig = parsed
            .payload
            .and_then(|o| data.get(o as usize..))
            .and_then(read_sig)
            .or_else(|| deep_sig(data, link));
        let Some(sig) = sig else {
            self.other += 1;
            return;
        };
        let i = usize::from(sig.stream);
        if self.streams.len() <= i {
            self.streams.resize_with(i + 1, || None);
        }
        let st = self.streams[i]
            .get_or_insert_with(|| Box::new(StreamLat::new(sig.stream, u64::from(sig.seq))));
        st.record(sig.seq, now as i64 - sig.ts as i64);
    }

    /// The streams seen, by id.
    pub fn streams(&self) -> impl Iterator<Item = &StreamLat> {
        self.streams.iter().filter_map(|s| s.as_deref())
    }

    /// One stream.
    pub fn stream(&self, id: u16) -> Option<&StreamLat> {
        self.streams.get(usize::from(id)).and_then(|s| s.as_deref())
    }

    /// All streams' latencies in one histogram.
    pub fn merged(&self) -> Histogram<u64> {
        let mut h = new_hist();
        for s in self.streams() {
            let _ = h.add(&s.hist);
        }
        h
    }

    /// A table: one line per stream. `sent(id)` gives the sender's count when known.
    pub fn table(&self, sent: impl Fn(u16) -> Option<u64>) -> String {
        let mut out = String::from(
            "stream        rx      lost      dups   reorder      min      avg      p50      p90      p99    p99.9      max  (ns)\n",
        );
        for s in self.streams() {
            let l = s.summary();
            out += &format!(
                "{:>6} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8.0} {:>8} {:>8} {:>8} {:>8} {:>8}\n",
                s.id,
                s.rx,
                s.lost(sent(s.id)),
                s.dups,
                s.reordered,
                l.min,
                l.avg,
                l.p50,
                l.p90,
                l.p99,
                l.p999,
                l.max
            );
        }
        out
    }
}

/// When [`receive_probes`] ends, and how often it reports while it runs.
#[derive(Clone, Copy, Debug)]
pub struct ReceiveOptions {
    /// Once the sender is done, this long without a packet ends the receive: the time left
    /// for the packets still in flight (RFC 2544's wait after a trial). It counts from the
    /// later of the last packet and the moment the receiver saw the sender done.
    pub quiet: Duration,
    /// How often `on_tick` is called while packets are read (it is called once more at
    /// the end); `Duration::MAX`: only at the end.
    pub tick: Duration,
}

impl Default for ReceiveOptions {
    /// 100 ms of quiet, no tick but the last.
    fn default() -> ReceiveOptions {
        ReceiveOptions {
            quiet: Duration::from_millis(100),
            tick: Duration::MAX,
        }
    }
}

/// What [`receive_probes`] read.
#[derive(Debug, Default)]
pub struct Received {
    /// Every probe tracked, and the count of packets without one (`tracker.other`).
    pub tracker: Tracker,
    /// Packets read, with a probe or without.
    pub packets: u64,
}

impl Received {
    /// Packets that carried a probe, duplicates included.
    pub fn probes(&self) -> u64 {
        self.packets.saturating_sub(self.tracker.other)
    }
}

/// Reads `port` and tracks the probes in what arrives until `done` (the sender finished)
/// and then [`ReceiveOptions::quiet`] without a packet, or until `stop`, or until the port
/// is finished (the end of a file, a wire whose other end is gone).
///
/// A packet's receive time is its arrival stamp when the port has them
/// ([`RxTime::Arrival`]), else `clock` when its batch was read: `clock` must then be the
/// clock the sender stamped with. The quiet is timed on `clock` too. `on_tick` is called
/// about every [`ReceiveOptions::tick`] and once at the end, with the port (to read its
/// counters) and the probes tracked so far.
pub fn receive_probes<C: Clock + ?Sized>(
    port: &mut dyn Port,
    clock: &C,
    opts: &ReceiveOptions,
    done: &AtomicBool,
    stop: &AtomicBool,
    mut on_tick: impl FnMut(&mut dyn Port, &Tracker),
) -> Result<Received, PortError> {
    let link = port.link_type();
    let rxt = port.rx_time();
    let quiet = u64::try_from(opts.quiet.as_nanos()).unwrap_or(u64::MAX);
    let mut got = Received::default();
    let mut b = Batch::new();
    // The last packet's time, or when the sender was first seen done if later.
    let mut last = clock.now_ns();
    let mut sender_done = false;
    let mut ticker = Ticker::new(last, opts.tick);
    loop {
        // Read before receiving: an empty receive counts towards the end only if the sender
        // had finished before it (else the last packets, sent while this thread was between
        // its receive and its check, would be left unread).
        let sent_all = done.load(Ordering::Acquire);
        port.rx(&mut b)?;
        let now = clock.now_ns();
        if sent_all && !sender_done {
            sender_done = true;
            last = now;
        }
        if !b.is_empty() {
            got.tracker.observe_as(&b, link, rxt, || now);
            got.packets += b.len() as u64;
            b.clear();
            last = now;
        } else if stop.load(Ordering::Relaxed)
            || port.is_finished()
            || (sender_done && now.saturating_sub(last) > quiet)
        {
            break;
        } else {
            std::hint::spin_loop();
        }
        if ticker.due(now) {
            on_tick(port, &got.tracker);
        }
    }
    on_tick(port, &got.tracker);
    Ok(got)
}

/// The histogram as CSV: `low_ns,high_ns,count,cumulative_percent`, one line per recorded
/// bucket.
pub fn hist_csv(h: &Histogram<u64>) -> String {
    let mut s = String::from("low_ns,high_ns,count,cumulative_percent\n");
    let total = h.len().max(1) as f64;
    let mut cum = 0u64;
    for v in h.iter_recorded() {
        let x = v.value_iterated_to();
        cum += v.count_at_value();
        s += &format!(
            "{},{},{},{:.4}\n",
            h.lowest_equivalent(x),
            h.highest_equivalent(x),
            v.count_at_value(),
            100.0 * cum as f64 / total
        );
    }
    s
}

/// The histogram as an SVG bar chart: 100 linear bins from the minimum to the 99.9th
/// percentile (the tail beyond in a last bar), counts on a linear axis, with labels.
pub fn hist_svg(h: &Histogram<u64>, title: &str) -> String {
    const W: f64 = 840.0;
    const H: f64 = 420.0;
    const L: f64 = 70.0;
    const B: f64 = 50.0;
    const T: f64 = 40.0;
    const BINS: usize = 100;
    let lo = h.min();
    let hi = h.value_at_quantile(0.999).max(lo + 1);
    let width = ((hi - lo) as f64 / BINS as f64).max(1.0);
    let mut counts = [0u64; BINS + 1];
    for v in h.iter_recorded() {
        let x = v.value_iterated_to();
        let i = if x > hi {
            BINS
        } else {
            (((x - lo) as f64 / width) as usize).min(BINS - 1)
        };
        counts[i] += v.count_at_value();
    }
    let maxc = counts.iter().copied().max().unwrap_or(1).max(1) as f64;
    let pw = W - L - 60.0;
    let ph = H - T - B;
    let bw = pw / (BINS + 1) as f64;
    let esc = |s: &str| {
        s.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
    };
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\" viewBox=\"0 0 {W} {H}\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n<text x=\"{}\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">{}</text>\n",
        W / 2.0,
        esc(title)
    );
    for (i, &c) in counts.iter().enumerate() {
        if c == 0 {
            continue;
        }
        let bh = ph * c as f64 / maxc;
        let x = L + i as f64 * bw;
        let fill = if i == BINS { "#c0392b" } else { "#2e86c1" };
        s += &format!(
            "<rect x=\"{x:.2}\" y=\"{:.2}\" width=\"{:.2}\" height=\"{bh:.2}\" fill=\"{fill}\"><title>{} ns: {c}</title></rect>\n",
            T + ph - bh,
            (bw - 0.5).max(0.5),
            lo + (i as f64 * width) as u64
        );
    }
    // Axes, ticks and labels.
    s += &format!(
        "<line x1=\"{L}\" y1=\"{y}\" x2=\"{}\" y2=\"{y}\" stroke=\"black\"/>\n<line x1=\"{L}\" y1=\"{T}\" x2=\"{L}\" y2=\"{y}\" stroke=\"black\"/>\n",
        L + pw,
        y = T + ph
    );
    for k in 0..=5 {
        let f = k as f64 / 5.0;
        let x = L + f * BINS as f64 * bw;
        let v = lo as f64 + f * (hi - lo) as f64;
        s += &format!(
            "<line x1=\"{x:.1}\" y1=\"{y}\" x2=\"{x:.1}\" y2=\"{}\" stroke=\"black\"/><text x=\"{x:.1}\" y=\"{}\" text-anchor=\"middle\">{v:.0}</text>\n",
            T + ph + 5.0,
            T + ph + 18.0,
            y = T + ph
        );
        let y = T + ph - f * ph;
        s += &format!(
            "<line x1=\"{}\" y1=\"{y:.1}\" x2=\"{L}\" y2=\"{y:.1}\" stroke=\"black\"/><text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{:.0}</text>\n",
            L - 5.0,
            L - 8.0,
            y + 4.0,
            f * maxc
        );
    }
    s += &format!(
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">one-way latency (ns); last bar: above p99.9 = {hi} ns; n = {}</text>\n<text x=\"16\" y=\"{}\" transform=\"rotate(-90 16 {})\" text-anchor=\"middle\">packets</text>\n</svg>\n",
        L + pw / 2.0,
        H - 12.0,
        h.len(),
        T + ph / 2.0,
        T + ph / 2.0
    );
    s
}

/// The probe signature of a packet whose transport payload is not at the first layer: below
/// MPLS labels, or inside a GRE or VXLAN tunnel (gen's `--mpls`, `--encap`). Only packets
/// without a probe at the first layer get here.
#[cold]
fn deep_sig(data: &[u8], link: LinkType) -> Option<super::template::Sig> {
    let (q, base, _) = wire::parse_deep(data, link).ok()?;
    let d = data.get(base..)?;
    if base > 0 {
        if let Some(s) = q
            .payload
            .and_then(|o| d.get(o as usize..))
            .and_then(read_sig)
        {
            return Some(s);
        }
    }
    let inner = wire::tunnel_inner(d, &q)?;
    inner
        .payload
        .and_then(|o| d.get(o as usize..))
        .and_then(read_sig)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::apps::gen::{self, GenOptions, StreamSpec};
    use crate::port::mem::wire;
    use crate::port::PortOptions;
    use crate::time::FakeClock;

    /// Sends `count` packets of stream `id` on `tx`, probes or not.
    fn send(tx: &mut dyn Port, id: u16, count: u64, probe: bool) {
        let opts = GenOptions {
            streams: vec![StreamSpec {
                id,
                probe,
                ..Default::default()
            }],
            count: Some(count),
            ..Default::default()
        };
        let clock = FakeClock::new(1_000_000_000, 10);
        let rep = gen::run(tx, &opts, &clock, &AtomicBool::new(false), None, |_| {}).unwrap();
        assert_eq!(rep.pkts, count);
    }

    #[test]
    fn ipdv_is_the_delay_difference_of_consecutive_probes() {
        let mut st = StreamLat::new(1, 0);
        // Delays 100, 130, 90; then 2 lost; then 95, 95 (RFC 3393: pairs n, n+1 only).
        for (seq, lat) in [(0, 100), (1, 130), (2, 90), (5, 95), (6, 95)] {
            st.record(seq, lat);
        }
        // Pairs: |130-100| = 30, |90-130| = 40, |95-95| = 0 (2..5 is not a pair).
        assert_eq!(st.ipdv.pairs, 3);
        assert_eq!(st.ipdv.abs_sum, 70);
        assert_eq!(st.ipdv.max, 40);
        assert!((st.ipdv.mean() - 70.0 / 3.0).abs() < 1e-9);
        // A duplicate is no pair.
        st.record(6, 500);
        assert_eq!(st.ipdv.pairs, 3);
    }

    #[test]
    fn receive_probes_counts_probes_and_others_then_ends_after_the_quiet() {
        let (mut tx, mut rx) = wire("latency-recv", &PortOptions::default()).unwrap();
        send(&mut tx, 4, 300, true);
        send(&mut tx, 5, 7, false);
        // The sender is done before the receiver starts: it reads everything, then waits
        // out the quiet on its clock (10 ns a reading) and ends.
        let clock = FakeClock::new(2_000_000_000, 10);
        let opts = ReceiveOptions {
            quiet: Duration::from_micros(5),
            tick: Duration::from_nanos(1),
        };
        let (mut ticks, mut last_seen) = (0, 0);
        let got = receive_probes(
            &mut rx,
            &clock,
            &opts,
            &AtomicBool::new(true),
            &AtomicBool::new(false),
            |port, t| {
                ticks += 1;
                last_seen = t.stream(4).map_or(0, |s| s.rx);
                assert_eq!(port.link_type(), LinkType::ETHERNET);
            },
        )
        .unwrap();
        assert_eq!(got.packets, 307);
        assert_eq!(got.tracker.other, 7);
        assert_eq!(got.probes(), 300);
        let s = got.tracker.stream(4).unwrap();
        assert_eq!(
            (s.rx, s.dups, s.reordered, s.lost(Some(300))),
            (300, 0, 0, 0)
        );
        // 1 s between the sender's and the receiver's clock.
        assert!(s.summary().min >= 999_000_000, "{:?}", s.summary());
        // Ticked while reading and once at the end, which saw every probe.
        assert!(ticks >= 2, "{ticks}");
        assert_eq!(last_seen, 300);
        // The quiet of 5 us is 500 readings of the clock: it was waited out, not skipped.
        assert!(
            clock.now_ns() >= 2_000_000_000 + 5_000,
            "{}",
            clock.now_ns()
        );
    }

    #[test]
    fn receive_probes_waits_for_the_sender_or_stops_at_once() {
        let (_tx, mut rx) = wire("latency-stop", &PortOptions::default()).unwrap();
        // Not done and stopped: ends at the first empty read, with nothing read.
        let clock = FakeClock::new(0, 10);
        let got = receive_probes(
            &mut rx,
            &clock,
            &ReceiveOptions::default(),
            &AtomicBool::new(false),
            &AtomicBool::new(true),
            |_, _| {},
        )
        .unwrap();
        assert_eq!((got.packets, got.probes()), (0, 0));
        assert!(clock.now_ns() < 1_000, "{}", clock.now_ns());
    }

    #[test]
    fn dups_reorder_and_loss() {
        let mut s = StreamLat::new(3, 0);
        for q in [0u32, 1, 2, 4, 3, 3, 6, 7, 7, 9] {
            s.record(q, 100);
        }
        // distinct 0,1,2,3,4,6,7,9 = 8; dups: 3 and 7; late: 3; lost: 5 and 8
        assert_eq!(s.rx, 8);
        assert_eq!(s.dups, 2);
        assert_eq!(s.reordered, 1);
        assert_eq!(s.lost(None), 2);
        assert_eq!(s.lost(Some(12)), 4);
        assert_eq!(s.summary().p50, 100);
    }

    #[test]
    fn sequence_wraps() {
        let mut s = StreamLat::new(0, u64::from(u32::MAX - 1));
        for q in [u32::MAX - 1, u32::MAX, 0, 1] {
            s.record(q, 5);
        }
        assert_eq!(s.rx, 4);
        assert_eq!(s.lost(None), 0);
        assert_eq!(s.reordered, 0);
    }
}

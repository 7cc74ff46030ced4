//! `count`: receive, filter, count and optionally record packets (pfcount / zcount).
//!
//! The loop has l2fwd's shape: receive a batch, filter it, count it, hand it to the writer,
//! and every interval take a snapshot for the statistics printer. The clock is read once per
//! batch; nothing is done per packet but the filter and the byte sum.

pub use crate::apps::worker::Ended;
use crate::apps::worker::{Backoff, Limits, Ticker};
use crate::filter::Filter;
use crate::mem::{Batch, BATCH};
use crate::port::{DropReason, Drops, LinkType, Port, PortError, PortStats, RxTime};
use crate::stats::Snapshot;
use crate::sys::poll::PollSet;
use crate::time::mono_ns;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// What to count and when to stop.
#[derive(Debug, Default)]
pub struct CountOptions {
    /// Stop after this many packets (after filtering).
    pub count: Option<u64>,
    /// Stop after this long.
    pub duration: Option<Duration>,
    /// Filter to run in user space (None when the port runs it in the kernel).
    pub filter: Option<Filter>,
    /// Interval between statistics snapshots.
    pub interval: Duration,
    /// The input's per-interface counters ([`Port::interface_stats`]) read when it opened: the
    /// run's starting point. An output opened after the input may wait (a FIFO `-w` blocks
    /// until its reader opens it) while the input drops what it cannot hold; those drops are
    /// the run's, as tcpdump's counters start at `pcap_activate`, before it opens `-w`. None:
    /// read when the loop starts. [`run_threads`] reads each thread's own.
    pub start: Option<Vec<PortStats>>,
}

/// Statistics handed to the printer: since the start, at the previous tick and now.
#[derive(Clone, Copy, Debug)]
pub struct Tick {
    /// At start.
    pub start: Snapshot,
    /// At the previous tick.
    pub prev: Snapshot,
    /// Now.
    pub now: Snapshot,
}

/// How a count ended.
#[derive(Debug)]
pub struct Report {
    /// Final statistics.
    pub tick: Tick,
    /// Why the input stopped early, after everything before it was counted and written.
    pub error: Option<PortError>,
    /// Why the output (the writer) failed or was closed (a pipe whose reader left); the loop
    /// then ended with [`Ended::Error`].
    pub output_error: Option<PortError>,
    /// Why the loop ended.
    pub ended: Ended,
    /// The input's counters per interface ([`Port::interface_stats`]) when the loop started
    /// and when it ended: the readings `tick.start` and `tick.now` sum up.
    pub interfaces: (Vec<PortStats>, Vec<PortStats>),
}

/// Runs the count loop on `port` until a limit, the end of the input, an error, or `stop`.
/// `writer` receives every counted packet (a pcap file, say). `on_tick` is called every
/// interval.
pub fn run(
    port: &mut dyn Port,
    writer: Option<&mut dyn Port>,
    opts: &CountOptions,
    stop: &AtomicBool,
    on_tick: impl FnMut(&Tick),
) -> Report {
    run_observed(port, writer, opts, stop, on_tick, |_| {})
}

/// [`run`], with `observe` called on every counted batch (after filtering) as soon as it
/// is received (the latency tracker of `count --latency` reads its own clock).
pub fn run_observed(
    port: &mut dyn Port,
    mut writer: Option<&mut dyn Port>,
    opts: &CountOptions,
    stop: &AtomicBool,
    mut on_tick: impl FnMut(&Tick),
    mut observe: impl FnMut(&Batch),
) -> Report {
    // The loop only reads packets (filter, observer, a writer that copies them out) and clears
    // the batch before the next `rx`: a file can be read in place, with no copy.
    port.read_in_place();
    let mut batch = Batch::new();
    let mut pkts = 0u64;
    let mut bytes = 0u64;
    let mut filtered = 0u64;
    let mut write_drops = Drops::default();
    let t0 = mono_ns();
    let snap_of = |rx_drops: Drops, t, pkts, bytes, filtered, wd: &Drops| {
        let mut drops = rx_drops.merged(wd);
        drops.add(DropReason::Filter, filtered);
        Snapshot {
            t_ns: t,
            pkts,
            bytes,
            drops,
        }
    };
    let snap = |port: &mut dyn Port, t, pkts, bytes, filtered, wd: &Drops| {
        snap_of(port.stats().rx_drops, t, pkts, bytes, filtered, wd)
    };
    // The first and last snapshots come from the per-interface readings, so that what each
    // interface did adds up to the summary exactly (kernel counters move between two reads).
    let if_start = match &opts.start {
        Some(s) => s.clone(),
        None => port.interface_stats(),
    };
    let start = snap_of(
        PortStats::sum(&if_start).rx_drops,
        t0,
        0,
        0,
        0,
        &write_drops,
    );
    let mut prev = start;
    let mut ticker = Ticker::new(t0, opts.interval);
    let limits = Limits::new(opts.count, opts.duration, t0);
    // Spin, then yield, then sleep when idle; yield now and then when busy (a consumer that
    // shares its core with another one lets it run before its queue overflows). A recording
    // (a capture file) has no queue to overflow: reading it never yields while busy (on a
    // loaded machine each yield can cost a scheduler slice of wall time).
    let busy_every = if port.rx_time() == RxTime::Recorded {
        0
    } else {
        Backoff::BUSY_EVERY
    };
    let mut backoff = Backoff::new(busy_every);
    let mut error = None;
    let mut output_error = None;
    let ended = loop {
        if stop.load(Ordering::Relaxed) {
            break Ended::Stopped;
        }
        if limits.count_reached(pkts) {
            break Ended::Count;
        }
        if limits.count.is_some() {
            batch.set_limit(limits.room(pkts, 64));
        }
        let n = match port.rx(&mut batch) {
            Ok(n) => n,
            Err(e) => {
                error = Some(e);
                break Ended::Error;
            }
        };
        let now = mono_ns();
        if n > 0 {
            backoff.got();
            if let Some(f) = &opts.filter {
                filtered += batch.retain(|p| f.matches_pkt(p)) as u64;
            }
            observe(&batch);
            pkts += batch.len() as u64;
            bytes += batch.descs().iter().map(|d| d.wire_len as u64).sum::<u64>();
            if let Some(w) = writer.as_deref_mut() {
                while !batch.is_empty() {
                    match w.tx(&mut batch) {
                        Ok(0) => break,
                        Ok(_) => {}
                        Err(e) => {
                            output_error = Some(e);
                            break;
                        }
                    }
                }
                if output_error.is_none() && w.tx_ended() {
                    // tcpdump's -W file limit: the writer takes no more and the run ends
                    // here. The rest of the batch was counted, not written, and not dropped
                    // (the caller tells them apart with the writer's own count).
                    batch.clear();
                    break Ended::Stopped;
                }
                if output_error.is_none() {
                    write_drops.add(DropReason::RingFull, batch.len() as u64);
                }
                if output_error.is_some() {
                    // Counted, not written: the caller tells them apart with the writer's own
                    // count of what it wrote.
                    batch.clear();
                    break Ended::Error;
                }
            }
            batch.clear();
        } else if port.is_finished() {
            break Ended::EndOfInput;
        } else {
            backoff.wait();
        }
        // The writer's own clock work (--flush-interval, -G), busy or idle.
        if let Some(w) = writer.as_deref_mut() {
            if let Err(e) = w.tick(now) {
                output_error = Some(e);
                break Ended::Error;
            }
        }
        if ticker.due(now) {
            let s = snap(port, now, pkts, bytes, filtered, &write_drops);
            on_tick(&Tick {
                start,
                prev,
                now: s,
            });
            prev = s;
        }
        if limits.time_up(now) {
            break Ended::Duration;
        }
    };
    if let Some(w) = writer {
        if output_error.is_none() {
            if let Err(e) = w.flush() {
                output_error = Some(e);
            }
        }
    }
    let if_end = port.interface_stats();
    let now = snap_of(
        PortStats::sum(&if_end).rx_drops,
        mono_ns(),
        pkts,
        bytes,
        filtered,
        &write_drops,
    );
    Report {
        tick: Tick { start, prev, now },
        error,
        output_error,
        ended,
        interfaces: (if_start, if_end),
    }
}

/// One thread's share of a run on several threads ([`run_threads`]): the ports it owns and
/// reads itself (one NIC queue, or several read round-robin when there are more queues than
/// threads).
pub struct Share {
    /// What the thread reads, in words (the ports' names).
    pub name: String,
    /// The thread's input: one port, or an [`crate::port::Aggregate`] of its parts.
    /// Opened not to wait in `rx` (the thread waits on its descriptor between batches).
    pub port: Box<dyn Port>,
}

/// What a run on several threads did: each thread's report, in the order of the shares, and
/// their sum.
#[derive(Debug)]
pub struct ThreadsReport {
    /// The sum of the threads' figures; `ended` says why the run ended (the first thread that
    /// ended it, or the count), `error` the first input error.
    pub total: Report,
    /// Each thread's own report (its `interfaces` are empty).
    pub threads: Vec<Report>,
}

/// The sum of several snapshots taken at about the same time (the latest time).
pub fn sum_snapshots<'a>(list: impl IntoIterator<Item = &'a Snapshot>) -> Snapshot {
    let mut s = Snapshot::default();
    for x in list {
        s.t_ns = s.t_ns.max(x.t_ns);
        s.pkts += x.pkts;
        s.bytes += x.bytes;
        s.drops = s.drops.merged(&x.drops);
    }
    s
}

/// How the threads of a run share `-c` and end together.
struct Shared {
    /// Packets not yet claimed by a thread: a thread claims at most a batch before a receive
    /// that does not wait, and gives back what it did not count, so that the threads together
    /// count exactly `count` packets and never take one from a queue without counting it.
    budget: AtomicU64,
    /// Packets counted by all threads.
    counted: AtomicU64,
    /// Set when a thread ended the run (the count was reached, or its input failed).
    end: AtomicBool,
    /// Why the run ended, by the thread that set `end` (an [`Ended`] as u8).
    why: AtomicU8,
}

/// Runs the count loop on several threads, one per share, with no dispatcher in between (as
/// PF_RING's pfcount_multichannel runs one thread per RX channel): each thread receives from its
/// own queues, filters with its own copy of the filter and keeps its own counters. `-c` is
/// shared (exactly `count` packets are counted in all, see `Shared`), `-t`, `stop` and an
/// input error end every thread. `on_tick` is called on the calling thread every interval with
/// the total and each thread's figures (each thread publishes its counters a few times per
/// interval; nothing is read across threads per packet). `filter` (libpcap syntax, for
/// packets of link type `link`) is compiled by each thread for itself (a compiled filter stays
/// on its thread); `opts.filter` is not used.
pub fn run_threads(
    shares: Vec<Share>,
    opts: &CountOptions,
    filter: Option<(&str, LinkType)>,
    stop: &AtomicBool,
    mut on_tick: impl FnMut(&Tick, &[Tick]),
) -> ThreadsReport {
    let n = shares.len();
    let limits = ThreadLimits {
        count: opts.count,
        duration: opts.duration,
        interval: opts.interval,
    };
    let shared = Shared {
        budget: AtomicU64::new(opts.count.unwrap_or(u64::MAX)),
        counted: AtomicU64::new(0),
        end: AtomicBool::new(false),
        why: AtomicU8::new(Ended::code(Ended::Stopped)),
    };
    let t0 = mono_ns();
    let slots: Vec<Mutex<(Snapshot, Snapshot)>> = (0..n)
        .map(|_| Mutex::new((Snapshot::default(), Snapshot::default())))
        .collect();
    let running = AtomicUsize::new(n);
    let interval = opts.interval.as_nanos().max(1) as u64;
    let reports: Vec<Report> = std::thread::scope(|s| {
        let handles: Vec<_> = shares
            .into_iter()
            .enumerate()
            .map(|(i, share)| {
                let (shared, slot, running, limits) = (&shared, &slots[i], &running, &limits);
                std::thread::Builder::new()
                    .name(format!("count-{i}"))
                    .spawn_scoped(s, move || {
                        // Checked by the caller: it compiles here as it did there.
                        let filter = filter.and_then(|(e, l)| Filter::compile(e, l).ok());
                        let r = thread_loop(share.port, filter, limits, t0, shared, stop, slot);
                        running.fetch_sub(1, Ordering::Release);
                        r
                    })
                    .expect("spawn a count thread")
            })
            .collect();
        // The printer: every interval, the threads' latest counters.
        let mut prev: Vec<Snapshot> = vec![Snapshot::default(); n];
        let mut started = false;
        let mut next_tick = t0 + interval;
        while running.load(Ordering::Acquire) > 0 {
            let now = mono_ns();
            if now < next_tick {
                let ms = ((next_tick - now) / 1_000_000).clamp(1, 20);
                std::thread::sleep(Duration::from_millis(ms));
                continue;
            }
            next_tick = now + interval;
            let read: Vec<(Snapshot, Snapshot)> = slots
                .iter()
                .map(|m| *m.lock().unwrap_or_else(|e| e.into_inner()))
                .collect();
            if !started {
                for (p, r) in prev.iter_mut().zip(&read) {
                    *p = r.0;
                }
                started = true;
            }
            let ticks: Vec<Tick> = read
                .iter()
                .zip(&prev)
                .map(|(r, p)| Tick {
                    start: r.0,
                    prev: *p,
                    now: Snapshot { t_ns: now, ..r.1 },
                })
                .collect();
            let total = Tick {
                start: sum_snapshots(ticks.iter().map(|t| &t.start)),
                prev: sum_snapshots(ticks.iter().map(|t| &t.prev)),
                now: sum_snapshots(ticks.iter().map(|t| &t.now)),
            };
            on_tick(&total, &ticks);
            for (p, t) in prev.iter_mut().zip(&ticks) {
                *p = t.now;
            }
        }
        handles
            .into_iter()
            .map(|h| h.join().expect("count thread panicked"))
            .collect()
    });
    let total_tick = Tick {
        start: sum_snapshots(reports.iter().map(|r| &r.tick.start)),
        prev: sum_snapshots(reports.iter().map(|r| &r.tick.prev)),
        now: sum_snapshots(reports.iter().map(|r| &r.tick.now)),
    };
    let ended = if shared.end.load(Ordering::Acquire) {
        Ended::from_code(shared.why.load(Ordering::Acquire))
    } else if reports.iter().all(|r| r.ended == Ended::EndOfInput) {
        Ended::EndOfInput
    } else if reports.iter().any(|r| r.ended == Ended::Stopped) {
        Ended::Stopped
    } else if reports.iter().any(|r| r.ended == Ended::Duration) {
        Ended::Duration
    } else {
        Ended::EndOfInput
    };
    let mut reports = reports;
    let error = reports.iter_mut().find_map(|r| r.error.take());
    ThreadsReport {
        total: Report {
            tick: total_tick,
            error,
            output_error: None,
            ended,
            interfaces: (Vec::new(), Vec::new()),
        },
        threads: reports,
    }
}

/// The limits of [`CountOptions`], shared by the threads.
struct ThreadLimits {
    count: Option<u64>,
    duration: Option<Duration>,
    interval: Duration,
}

/// How long a thread waits on its queues' descriptors when they are empty.
const WAIT_MS: i32 = 100;

/// One thread of [`run_threads`].
fn thread_loop(
    mut port: Box<dyn Port>,
    filter: Option<Filter>,
    opts: &ThreadLimits,
    t0: u64,
    shared: &Shared,
    stop: &AtomicBool,
    slot: &Mutex<(Snapshot, Snapshot)>,
) -> Report {
    // Each thread only counts what it reads and clears the batch before the next `rx`.
    port.read_in_place();
    let mut batch = Batch::new();
    let (mut pkts, mut bytes, mut filtered) = (0u64, 0u64, 0u64);
    let snap = |port: &mut dyn Port, t, pkts, bytes, filtered| {
        let mut drops = port.stats().rx_drops;
        drops.add(DropReason::Filter, filtered);
        Snapshot {
            t_ns: t,
            pkts,
            bytes,
            drops,
        }
    };
    let start = snap(port.as_mut(), t0, 0, 0, 0);
    *slot.lock().unwrap_or_else(|e| e.into_inner()) = (start, start);
    let mut poll = port.poll_fd().and_then(|fd| PollSet::new(&[fd]));
    // Counters go to the printer a few times per interval (a lock, not per packet).
    let publish_every = (opts.interval.as_nanos() as u64 / 4).clamp(10_000_000, 250_000_000);
    let mut publish = Ticker::new(t0, Duration::from_nanos(publish_every));
    let limits = Limits::new(None, opts.duration, t0);
    let mut backoff = Backoff::new(Backoff::BUSY_EVERY);
    let mut error = None;
    let ended = loop {
        if stop.load(Ordering::Relaxed) {
            break Ended::Stopped;
        }
        if shared.end.load(Ordering::Acquire) {
            break Ended::from_code(shared.why.load(Ordering::Acquire));
        }
        let mut claim = BATCH as u64;
        if let Some(c) = opts.count {
            claim = match shared
                .budget
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |r| {
                    (r > 0).then(|| r - r.min(BATCH as u64))
                }) {
                Ok(r) => r.min(BATCH as u64),
                Err(_) => 0,
            };
            if claim == 0 {
                if shared.counted.load(Ordering::Acquire) >= c {
                    end_run(shared, Ended::Count);
                    break Ended::Count;
                }
                // Another thread holds what is left for a moment.
                backoff.wait();
                continue;
            }
            batch.set_limit(claim as usize);
        }
        let mut counted = 0u64;
        let mut idle = false;
        let got = port.rx(&mut batch);
        let now = mono_ns();
        match got {
            Ok(n) if n > 0 => {
                backoff.got();
                if let Some(f) = &filter {
                    filtered += batch.retain(|p| f.matches_pkt(p)) as u64;
                }
                counted = batch.len() as u64;
                pkts += counted;
                bytes += batch.descs().iter().map(|d| d.wire_len as u64).sum::<u64>();
                batch.clear();
            }
            Ok(_) => idle = true,
            Err(e) => {
                error = Some(e);
            }
        }
        if let Some(c) = opts.count {
            shared.budget.fetch_add(claim - counted, Ordering::AcqRel);
            if counted > 0 && shared.counted.fetch_add(counted, Ordering::AcqRel) + counted >= c {
                end_run(shared, Ended::Count);
                break Ended::Count;
            }
        }
        if error.is_some() {
            end_run(shared, Ended::Error);
            break Ended::Error;
        }
        if idle {
            if port.is_finished() {
                break Ended::EndOfInput;
            }
            // Wait without holding a claim on the count.
            match poll.as_mut() {
                Some(p) => {
                    let left = publish.next().saturating_sub(now) / 1_000_000;
                    p.wait((left as i32).clamp(1, WAIT_MS));
                }
                None => backoff.wait(),
            }
        }
        let now = mono_ns();
        if publish.due(now) {
            let s = snap(port.as_mut(), now, pkts, bytes, filtered);
            slot.lock().unwrap_or_else(|e| e.into_inner()).1 = s;
        }
        if limits.time_up(now) {
            break Ended::Duration;
        }
    };
    let end = snap(port.as_mut(), mono_ns(), pkts, bytes, filtered);
    slot.lock().unwrap_or_else(|e| e.into_inner()).1 = end;
    Report {
        tick: Tick {
            start,
            prev: start,
            now: end,
        },
        error,
        output_error: None,
        ended,
        interfaces: (Vec::new(), Vec::new()),
    }
}

/// Ends every thread of a run, for `why` (the first reason set stays).
fn end_run(shared: &Shared, why: Ended) {
    if !shared.end.swap(true, Ordering::AcqRel) {
        shared.why.store(Ended::code(why), Ordering::Release);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::mem::Desc;
    use crate::port::mem::wire;
    use crate::port::{LinkType, PortOptions};

    #[test]
    fn counts_filters_and_stops_at_count() {
        let (mut a, mut b) = wire("count-t", &PortOptions::default()).unwrap();
        let mut tx = Batch::with_pool(a.pool().unwrap());
        for i in 0..100u32 {
            let mut fr = tx.alloc().unwrap();
            let f = fr.buf();
            f[..60].fill(0);
            f[12] = 0x08; // IPv4
            f[14] = 0x45;
            f[23] = if i % 4 == 0 { 6 } else { 17 };
            fr.push(Desc {
                len: 60,
                wire_len: 60,
                ..Default::default()
            });
            if tx.is_full() {
                a.tx(&mut tx).unwrap();
            }
        }
        a.tx(&mut tx).unwrap();
        let opts = CountOptions {
            count: Some(50),
            filter: Some(Filter::compile("udp", LinkType::ETHERNET).unwrap()),
            interval: Duration::from_secs(1),
            ..Default::default()
        };
        let stop = AtomicBool::new(false);
        let r = run(&mut b, None, &opts, &stop, |_| {});
        assert_eq!(r.ended, Ended::Count);
        assert_eq!(r.tick.now.pkts, 50);
        assert_eq!(r.tick.now.bytes, 50 * 60);
        // 50 UDP packets are 2 of every 3 of the first ~67 packets; the TCP ones were filtered.
        let filtered = r.tick.now.drops.get(DropReason::Filter);
        assert!((16..=17).contains(&filtered), "{filtered}");
        // the rest are still on the wire, nothing lost
        let rest = run(
            &mut b,
            None,
            &CountOptions {
                duration: Some(Duration::from_millis(50)),
                ..Default::default()
            },
            &stop,
            |_| {},
        );
        assert_eq!(r.tick.now.pkts + filtered + rest.tick.now.pkts, 100);
    }

    /// Sends `n` 60-byte IPv4 packets (every fourth TCP, the rest UDP) into `a`.
    fn send(a: &mut dyn Port, n: u32) {
        let mut tx = Batch::with_pool(a.pool().unwrap());
        for i in 0..n {
            let mut fr = tx.alloc().unwrap();
            let f = fr.buf();
            f[..60].fill(0);
            f[12] = 0x08;
            f[14] = 0x45;
            f[23] = if i % 4 == 0 { 6 } else { 17 };
            fr.push(Desc {
                len: 60,
                wire_len: 60,
                ..Default::default()
            });
            if tx.is_full() {
                a.tx(&mut tx).unwrap();
            }
        }
        a.tx(&mut tx).unwrap();
    }

    #[test]
    fn count_on_an_aggregate_takes_no_more_than_the_count() {
        let (mut a1, b1) = wire("count-agg1", &PortOptions::default()).unwrap();
        let (mut a2, b2) = wire("count-agg2", &PortOptions::default()).unwrap();
        send(&mut a1, 100);
        send(&mut a2, 100);
        let mut agg = crate::port::Aggregate::new("agg", vec![Box::new(b1), Box::new(b2)]);
        let stop = AtomicBool::new(false);
        let opts = CountOptions {
            count: Some(10),
            interval: Duration::from_secs(1),
            ..Default::default()
        };
        let r = run(&mut agg, None, &opts, &stop, |_| {});
        assert_eq!((r.ended, r.tick.now.pkts), (Ended::Count, 10));
        let rest = run(
            &mut agg,
            None,
            &CountOptions {
                duration: Some(Duration::from_millis(50)),
                ..Default::default()
            },
            &stop,
            |_| {},
        );
        assert_eq!(
            rest.tick.now.pkts, 190,
            "nothing taken without being counted"
        );
    }

    #[test]
    fn threads_share_the_count_exactly() {
        let (mut a1, b1) = wire("count-thr1", &PortOptions::default()).unwrap();
        let (mut a2, b2) = wire("count-thr2", &PortOptions::default()).unwrap();
        send(&mut a1, 400);
        send(&mut a2, 400);
        let shares = vec![
            Share {
                name: "b1".into(),
                port: Box::new(b1),
            },
            Share {
                name: "b2".into(),
                port: Box::new(b2),
            },
        ];
        let opts = CountOptions {
            count: Some(301),
            interval: Duration::from_millis(10),
            ..Default::default()
        };
        let stop = AtomicBool::new(false);
        let mut ticks = 0;
        let r = run_threads(
            shares,
            &opts,
            Some(("udp", LinkType::ETHERNET)),
            &stop,
            |t, per| {
                ticks += 1;
                assert_eq!(t.now.pkts, per.iter().map(|p| p.now.pkts).sum::<u64>());
            },
        );
        assert_eq!(r.total.ended, Ended::Count);
        assert_eq!(r.total.tick.now.pkts, 301);
        let per: Vec<u64> = r.threads.iter().map(|t| t.tick.now.pkts).collect();
        assert_eq!(per.iter().sum::<u64>(), 301, "{per:?}");
        let filtered: u64 = r
            .threads
            .iter()
            .map(|t| t.tick.now.drops.get(DropReason::Filter))
            .sum();
        assert_eq!(filtered, r.total.tick.now.drops.get(DropReason::Filter));
        assert!(ticks <= 1000);
    }
}

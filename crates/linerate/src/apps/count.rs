//! `count`: receive, filter, count and optionally record packets (pfcount / zcount).
//!
//! The loop has l2fwd's shape: receive a batch, filter it, count it, hand it to the writer,
//! and every interval take a snapshot for the statistics printer. The clock is read once per
//! batch; nothing is done per packet but the filter and the byte sum.

use crate::apps::balance::Backoff;
use crate::filter::Filter;
use crate::mem::Batch;
use crate::port::{DropReason, Drops, Port, PortError, PortStats};
use crate::stats::Snapshot;
use crate::time::mono_ns;
use std::sync::atomic::{AtomicBool, Ordering};
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

/// Why the loop ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    /// `-c` packets were counted.
    Count,
    /// `-t` elapsed.
    Duration,
    /// A finite input was exhausted.
    EndOfInput,
    /// A signal (or the caller) asked to stop.
    Stopped,
    /// The input failed.
    Error,
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
    let if_start = port.interface_stats();
    let start = snap_of(
        PortStats::sum(&if_start).rx_drops,
        t0,
        0,
        0,
        0,
        &write_drops,
    );
    let mut prev = start;
    let interval = opts.interval.as_nanos().max(1) as u64;
    let mut next_tick = t0 + interval;
    let deadline = opts.duration.map(|d| t0 + d.as_nanos() as u64);
    // Spin, then yield, then sleep when idle; yield now and then when busy (a consumer that
    // shares its core with another one lets it run before its queue overflows).
    let mut backoff = Backoff::new(Backoff::BUSY_EVERY);
    let mut error = None;
    let mut output_error = None;
    let ended = loop {
        if stop.load(Ordering::Relaxed) {
            break Ended::Stopped;
        }
        if let Some(c) = opts.count {
            if pkts >= c {
                break Ended::Count;
            }
            batch.set_limit((c - pkts).min(64) as usize);
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
                filtered += batch.retain(|p| f.matches(p.data)) as u64;
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
        if now >= next_tick {
            let s = snap(port, now, pkts, bytes, filtered, &write_drops);
            on_tick(&Tick {
                start,
                prev,
                now: s,
            });
            prev = s;
            next_tick = now + interval;
        }
        if deadline.is_some_and(|d| now >= d) {
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
            let addr = tx.alloc().unwrap();
            let f = tx.frame_mut(addr);
            f[..60].fill(0);
            f[12] = 0x08; // IPv4
            f[14] = 0x45;
            f[23] = if i % 4 == 0 { 6 } else { 17 };
            tx.push(Desc {
                addr,
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
}

//! `flows`: an Argus-style flow monitor: bidirectional flow records keyed by the canonical
//! 5-tuple and VLAN, with idle, status (active), end-of-connection, forced and lack-of-resources
//! reports, text/CSV/JSON-lines output, IPFIX export and export into Apache Kafka.
//!
//! One thread: the loop receives a batch, reads each packet's headers ([`key::extract`]), counts
//! it in the [`table::FlowTable`] and hands the records the batch produced to the sink. With
//! `threads > 1` ([`threads`]) every thread reads its own share of the input (queues of a NIC,
//! members of a list, sockets of a fanout group, or every n-th group of records of a capture
//! file), parses it and counts the flows it owns in its own table; a packet of a flow another
//! thread owns crosses over an SPSC ring as parsed headers (no packet bytes, no frame). Flows are
//! owned by address pair, so a datagram's fragments meet its first fragment. Time is the
//! packets' time (offline captures expire flows as live traffic would).

pub mod extra;
pub mod frag;
pub mod ipfix;
pub mod kafka;
pub mod key;
pub mod record;
mod run;
pub mod table;
pub mod threads;

use crate::filter::Filter;
use crate::mem::{Batch, BATCH};
use crate::port::{LinkType, Port, PortError, PortStats};
use frag::FragCache;
pub use key::Tunnels;
use key::{extract_fragment_in, extract_in, NotFlow, PktInfo, E_FRAG};
use record::FlowRecord;
pub use run::run;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use table::{FlowTable, TableConfig, TableStats};

/// How to run the monitor.
#[derive(Clone, Debug)]
pub struct FlowOptions {
    /// Table size and timeouts (per thread).
    pub table: TableConfig,
    /// Worker threads (1: everything in the calling thread).
    pub threads: usize,
    /// Also advance flow time with the wall clock (live ports, so idle flows expire when no
    /// packet comes).
    pub wall_clock: bool,
    /// Descriptors each worker's ring holds.
    pub ring_size: usize,
    /// Where the reading threads publish their packet and byte counts for a reader on another
    /// thread (`--metrics`): an atomic add per batch, nothing per packet.
    pub live: Option<Arc<FlowLive>>,
    /// Which header keys a tunnelled packet (GRE, IPIP, 6in4, VXLAN): the outer one (default)
    /// or the packet inside.
    pub tunnels: Tunnels,
    /// A BPF filter (libpcap syntax) run before flow accounting: what it rejects is counted
    /// `filtered` and put in no flow. Each thread compiles it for itself (as `count` does).
    pub filter: Option<String>,
    /// Read each packet's Ethernet addresses and TTL for the records (`--fields smac,...`).
    pub extras: bool,
    /// Stop once this many packets passed the filter (`-c`, as count's), exactly: the port is
    /// asked for no more than are left. One thread only (`threads` 1); the threaded paths do
    /// not read it.
    pub count: Option<u64>,
}

/// Counters the reading threads publish while they run: packets and bytes received so far.
#[derive(Debug, Default)]
pub struct FlowLive {
    /// Packets received.
    pub packets: AtomicU64,
    /// Their bytes (on the wire).
    pub bytes: AtomicU64,
}

impl FlowLive {
    /// Adds what a thread received since it last added.
    #[inline]
    pub(crate) fn add(&self, packets: u64, bytes: u64) {
        self.packets.fetch_add(packets, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
    }
}

impl Default for FlowOptions {
    fn default() -> Self {
        FlowOptions {
            table: TableConfig::default(),
            threads: 1,
            wall_clock: false,
            ring_size: 1024,
            live: None,
            tunnels: Tunnels::Outer,
            filter: None,
            extras: false,
            count: None,
        }
    }
}

/// Where records go. Called once per batch that produced records, never per packet.
pub trait RecordSink {
    /// Takes records.
    fn records(&mut self, recs: &[FlowRecord]);
    /// The packets are over: what comes next is the final flush of every open flow, off the
    /// packet path (a sink may now wait for room instead of dropping).
    fn ending(&mut self) {}
    /// Called from the monitor's loop every few milliseconds at most, whether or not packets
    /// or records come (per batch while they do): a sink that holds records (a partly filled
    /// IPFIX message, a file buffer) sends them here once they have waited long enough.
    fn tick(&mut self) {}
    /// When all the sink does with records is write them as lines: the formatter of its lines.
    /// With threads, each thread then formats the records it made and the sink gets the lines
    /// ([`RecordSink::lines`]) instead of the records (formatting is then not one thread's work
    /// at the end of a capture file). None (the default): records go to
    /// [`RecordSink::records`].
    fn formatter(&self) -> Option<record::RecordFormat> {
        None
    }
    /// Takes `lines`, records formatted by [`RecordSink::formatter`]'s formatter (a sink that
    /// gives one must take them).
    fn lines(&mut self, lines: &[u8]) {
        let _ = lines;
    }
}

impl<F: FnMut(&[FlowRecord])> RecordSink for F {
    fn records(&mut self, recs: &[FlowRecord]) {
        self(recs)
    }
}

/// Why the loop ended (one [`Ended`] for every worker).
pub use crate::apps::worker::Ended;

/// What the monitor did.
#[derive(Debug)]
pub struct FlowReport {
    /// Packets received.
    pub packets: u64,
    /// Bytes received (on the wire).
    pub bytes: u64,
    /// Packets not put in a flow, by [`NotFlow`] reason.
    pub not_flow: [u64; NotFlow::COUNT],
    /// Packets the filter rejected (put in no flow, not in `not_flow`).
    pub filtered: u64,
    /// Flow table counters (summed over threads).
    pub table: TableStats,
    /// Input port counters.
    pub port: PortStats,
    /// Table memory per flow slot, bytes.
    pub bytes_per_flow: usize,
    /// Table memory in all, bytes (all threads).
    pub table_bytes: usize,
    /// Wall time the loop ran.
    pub elapsed: Duration,
    /// Threads that kept tables.
    pub threads: usize,
    /// Why it stopped.
    pub ended: Ended,
    /// The input's error, if it failed.
    pub error: Option<PortError>,
}

impl FlowReport {
    /// Packets not put in a flow, all reasons.
    pub fn not_flow_total(&self) -> u64 {
        self.not_flow.iter().sum()
    }
}

/// Datagrams whose first fragment was seen, per thread.
const FRAG_SLOTS: usize = 4096;

/// Parses one packet; a later fragment gets its first fragment's flow (or is `Fragment`).
#[inline(always)]
fn classify(
    data: &[u8],
    link: LinkType,
    tunnels: Tunnels,
    frags: &mut FragCache,
) -> Result<PktInfo, NotFlow> {
    match extract_in(data, link, tunnels) {
        Ok(p) => {
            if p.encap & E_FRAG != 0 {
                frags.first(&p);
            }
            Ok(p)
        }
        Err(NotFlow::Fragment) => match extract_fragment_in(data, link, tunnels) {
            Ok(mut p) => {
                if frags.later(&mut p) {
                    Ok(p)
                } else {
                    Err(NotFlow::Fragment)
                }
            }
            Err(_) => Err(NotFlow::Fragment),
        },
        Err(r) => Err(r),
    }
}

/// One table and what it needs to count a batch.
struct Worker {
    table: FlowTable,
    frags: FragCache,
    out: Vec<FlowRecord>,
    not_flow: [u64; NotFlow::COUNT],
    link: LinkType,
    tunnels: Tunnels,
    filter: Option<Filter>,
    filtered: u64,
    extras: bool,
}

impl Worker {
    /// A worker for packets of `link`, keying tunnels as `tunnels` says, with the filter
    /// `filter` if any (an expression that does not compile was refused before: the caller
    /// compiles it once to check it).
    fn new(cfg: TableConfig, link: LinkType, tunnels: Tunnels, filter: Option<&str>) -> Worker {
        Worker {
            table: FlowTable::new(cfg),
            frags: FragCache::new(FRAG_SLOTS),
            out: Vec::with_capacity(4 * BATCH),
            not_flow: [0; NotFlow::COUNT],
            link,
            tunnels,
            filter: filter.and_then(|e| Filter::compile(e, link).ok()),
            filtered: 0,
            extras: false,
        }
    }

    /// The packet's addresses and TTL when records carry them.
    #[inline(always)]
    fn extra(&self, data: &[u8]) -> extra::Extra {
        if self.extras {
            extra::extract_extra(data, self.link, self.tunnels)
        } else {
            extra::Extra::default()
        }
    }

    /// Whether the packet passes the filter (counted `filtered` when it does not); `len`,
    /// `less` and `greater` test `wire_len`, the length on the wire, as libpcap's do.
    #[inline(always)]
    fn pass(&mut self, data: &[u8], wire_len: u32) -> bool {
        match &self.filter {
            Some(f) if !f.matches_wire(data, wire_len) => {
                self.filtered += 1;
                false
            }
            _ => true,
        }
    }

    /// Parses every packet of the batch (touching all their headers first: with threads the
    /// frames were written by another core, and independent loads let cache misses overlap),
    /// then counts the flow packets.
    #[inline]
    fn batch(&mut self, batch: &Batch) {
        let n = batch.len();
        let mut acc = 0u8;
        for i in 0..n {
            let d = batch.data(i);
            acc ^= d.get(14).copied().unwrap_or(0) ^ d.get(40).copied().unwrap_or(0);
        }
        std::hint::black_box(acc);
        let mut items = [Item::default(); BATCH];
        let mut k = 0;
        for (i, desc) in batch.descs().iter().enumerate() {
            if !self.pass(batch.data(i), desc.filter_len()) {
                continue;
            }
            match classify(batch.data(i), self.link, self.tunnels, &mut self.frags) {
                Ok(p) => {
                    items[k] = Item {
                        ts: desc.ts,
                        clock: 0,
                        wire_len: desc.wire_len,
                        hash: p.key.hash(),
                        info: p,
                        extra: self.extra(batch.data(i)),
                    };
                    k += 1;
                }
                Err(r) => self.not_flow[r as usize] += 1,
            }
        }
        self.count(&items[..k]);
    }

    /// Counts parsed packets, then expires what their time made due. Two passes: load every
    /// bucket head and first entry (independent loads whose cache misses overlap), then count.
    #[inline]
    fn count(&mut self, items: &[Item]) {
        self.count_only(items, None);
        self.table.advance(0, &mut self.out);
    }

    /// Counts parsed packets without expiring anything after them; with `clock`, each packet is
    /// counted at the time `max(clock, its item.clock)` (a share of a capture counted at the
    /// time the whole capture has reached at that packet).
    #[inline]
    fn count_only(&mut self, items: &[Item], clock: Option<u64>) {
        let mut head = [0u32; BATCH];
        for (h, it) in head.iter_mut().zip(items) {
            *h = self.table.warm_bucket(it.hash);
        }
        let mut acc = 0u32;
        for &h in head.iter().take(items.len()) {
            acc ^= self.table.warm_entry(h);
        }
        std::hint::black_box(acc);
        for it in items {
            if let Some(c) = clock {
                self.table.clock_to(c.max(it.clock));
            }
            let len = it.wire_len.saturating_sub(it.info.pseudo as u32);
            self.table
                .packet_extra(&it.info, it.hash, it.ts, len, &it.extra, &mut self.out);
        }
    }
}

/// A parsed packet: when it was seen, its length on the wire, what its headers say, and its
/// flow hash. Threads hand each other these, never packet bytes.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Item {
    ts: u64,
    /// With threads on a capture file: the latest time of the file up to this packet within its
    /// group of records (the owner adds the groups before).
    clock: u64,
    wire_len: u32,
    hash: u32,
    info: PktInfo,
    /// Ethernet addresses and TTL (when asked for).
    extra: extra::Extra,
}

/// Runs the monitor in the calling thread ([`run`] with one thread): on `port` until the end of
/// the input, an error, or `stop`; every record goes to `sink`, and every open flow is reported
/// (reason forced) at the end.
pub(crate) fn run_in_this_thread(
    port: &mut dyn Port,
    opts: &FlowOptions,
    stop: &AtomicBool,
    sink: &mut dyn RecordSink,
) -> FlowReport {
    let t0 = Instant::now();
    let mut w = Worker::new(
        opts.table,
        port.link_type(),
        opts.tunnels,
        opts.filter.as_deref(),
    );
    w.extras = opts.extras;
    let mut batch = Batch::new();
    let (mut packets, mut bytes) = (0u64, 0u64);
    let mut idle = 0u32;
    let mut error = None;
    let ended = loop {
        if stop.load(Ordering::Relaxed) {
            break Ended::Stopped;
        }
        if let Some(c) = opts.count {
            // What passed the filter so far; no more is read than would reach `c`.
            let left = c.saturating_sub(packets - w.filtered);
            if left == 0 {
                break Ended::Count;
            }
            batch.set_limit(left.min(64) as usize);
        }
        let n = match port.rx(&mut batch) {
            Ok(n) => n,
            Err(e) => {
                error = Some(e);
                break Ended::Error;
            }
        };
        if n > 0 {
            idle = 0;
            packets += batch.len() as u64;
            let before = bytes;
            bytes += batch.descs().iter().map(|d| d.wire_len as u64).sum::<u64>();
            if let Some(l) = &opts.live {
                l.add(batch.len() as u64, bytes - before);
            }
            w.batch(&batch);
            batch.clear();
        } else if port.is_finished() {
            break Ended::EndOfInput;
        } else {
            idle += 1;
            if idle > 64 {
                std::thread::sleep(Duration::from_micros(50));
            } else {
                std::hint::spin_loop();
            }
        }
        if opts.wall_clock {
            w.table.advance(crate::time::wall_ns(), &mut w.out);
        }
        if !w.out.is_empty() {
            sink.records(&w.out);
            w.out.clear();
        }
        sink.tick();
    };
    sink.ending();
    w.table.flush(&mut w.out);
    if !w.out.is_empty() {
        sink.records(&w.out);
        w.out.clear();
    }
    FlowReport {
        packets,
        bytes,
        not_flow: w.not_flow,
        filtered: w.filtered,
        table: w.table.stats(),
        port: port.stats(),
        bytes_per_flow: w.table.bytes_per_flow(),
        table_bytes: w.table.memory_bytes(),
        elapsed: t0.elapsed(),
        threads: 1,
        ended,
        error,
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::key::tests::eth_v4;
    use super::key::{TCP_ACK, TCP_SYN};
    use super::record::EndReason;
    use super::*;
    use crate::mem::Desc;
    use crate::port::mem::wire;
    use crate::port::PortOptions;

    /// Sends `frames` (with timestamps) into one end of a fresh memory wire; returns the other.
    fn feed(name: &str, frames: &[(Vec<u8>, u64)]) -> crate::port::mem::MemPort {
        let (mut a, b) = wire(name, &PortOptions::default()).unwrap();
        let mut tx = Batch::with_pool(a.pool().unwrap());
        for (f, ts) in frames {
            let mut fr = tx.alloc().unwrap();
            fr.buf()[..f.len()].copy_from_slice(f);
            fr.push(Desc {
                ts: *ts,
                len: f.len() as u32,
                wire_len: f.len() as u32,
                ..Default::default()
            });
            if tx.is_full() {
                assert_eq!(a.tx(&mut tx).unwrap(), BATCH);
            }
        }
        a.tx(&mut tx).unwrap();
        assert!(tx.is_empty());
        b
    }

    fn traffic() -> Vec<(Vec<u8>, u64)> {
        let mut v = Vec::new();
        let s = 1_000_000_000u64;
        for c in 0..200u16 {
            let a = [10, 1, (c >> 8) as u8, c as u8];
            let b = [192, 168, 0, 1];
            v.push((eth_v4(a, b, 6, 1000 + c, 443, TCP_SYN, 0), s + c as u64));
            v.push((
                eth_v4(b, a, 6, 443, 1000 + c, TCP_SYN | TCP_ACK, 0),
                s + c as u64 + 1,
            ));
            v.push((
                eth_v4([10, 9, 9, 9], b, 17, 5000, 53, 0, c as usize),
                s + c as u64 + 2,
            ));
        }
        let mut arp = eth_v4([1, 1, 1, 1], [2, 2, 2, 2], 17, 1, 1, 0, 0);
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        v.push((arp, 5 * s));
        v
    }

    struct Stop(AtomicBool);

    fn run_on(name: &str, threads: usize) -> (FlowReport, Vec<FlowRecord>) {
        let mut port = feed(name, &traffic());
        let stop = Stop(AtomicBool::new(false));
        let mut recs = Vec::new();
        let opts = FlowOptions {
            threads,
            ..Default::default()
        };
        // A memory port never finishes: stop when every packet came in.
        let mut sink = |r: &[FlowRecord]| recs.extend_from_slice(r);
        let stop_after = std::thread::scope(|s| {
            let h = s.spawn(|| {
                std::thread::sleep(Duration::from_millis(300));
                stop.0.store(true, Ordering::Relaxed);
            });
            let rep = run(&mut port, &opts, &stop.0, &mut sink);
            h.join().unwrap();
            rep
        });
        (stop_after, recs)
    }

    #[test]
    fn one_and_two_threads_agree() {
        for threads in [1, 2] {
            let (rep, recs) = run_on(&format!("flow-t{threads}"), threads);
            assert_eq!(rep.packets, 601);
            assert_eq!(rep.not_flow[NotFlow::NonIp as usize], 1);
            assert_eq!(rep.table.flows, 201, "200 TCP flows and one UDP flow");
            assert_eq!(recs.len(), 201);
            assert!(recs.iter().all(|r| r.reason == EndReason::Forced));
            let tcp: Vec<_> = recs.iter().filter(|r| r.proto == 6).collect();
            assert!(tcp
                .iter()
                .all(|r| r.src_pkts == 1 && r.dst_pkts == 1 && r.dport == 443));
            let udp = recs.iter().find(|r| r.proto == 17).unwrap();
            assert_eq!(udp.src_pkts, 200);
            assert_eq!(rep.table.packets + rep.not_flow_total(), rep.packets);
            assert!(rep.bytes_per_flow <= 200);
        }
    }
}

//! The flow monitor on several threads, one share of the input each, no dispatcher in between
//! where the input can be split (as Argus on netmap reads one NIC queue per thread).
//!
//! - **Sources** ([`FlowInput::open`]): the queues of `xdp:IFACE` and the members of `a,b` are
//!   spread over the threads (thread t takes parts t, t + n, ...); `afpacket:IFACE` becomes one
//!   socket per thread in a `PACKET_FANOUT_HASH` group (the kernel's symmetric flow hash); a
//!   capture file is read by every thread through its own descriptor, each taking every n-th
//!   group of 64 records ([`PcapShard`]). An input that cannot be split (`mem:`, a cluster
//!   queue, standard input) is read by thread 0 alone, which then acts as a dispatcher.
//! - **Owners**: a flow belongs to the thread its address pair (with VLAN and protocol) hashes
//!   to, so both directions and every fragment of a datagram meet in one table. A thread parses
//!   what it reads, counts what it owns, and sends the parsed headers of the rest ([`Item`], no
//!   bytes, no frame: its frames are freed by the thread that read them) over an SPSC ring to
//!   the owner. Fragments are matched to their first fragment by the owner.
//! - **Order**: with a capture file the groups carry their number in the file, and an owner
//!   counts them strictly in that order (its own and those of the others), so every table sees
//!   its packets in file order and the records are those one thread makes. A thread parses at
//!   most [`AHEAD`] of its groups past what it has counted, which bounds what its rings hold
//!   (they never fill, so the order never deadlocks). Live sources have no order across
//!   queues (no tool has it); a full ring there makes its producer count what others sent it
//!   while it waits.
//! - **End**: a thread that will read no more says so; when every thread has, each takes what is
//!   left in its rings, flushes its table and returns its counters. A stop (signal) or an input
//!   error ends reading everywhere, and what was read is still counted.

use super::key::{extract, extract_fragment, FlowKey, NotFlow, E_FRAG, E_LATER};
use super::record::FlowRecord;
use super::table::TableStats;
use super::{Ended, FlowLive, FlowOptions, FlowReport, Item, RecordSink, Worker};
use crate::mem::{Batch, BATCH};
use crate::port::pcap::{Chunk, PcapSplit, SplitReader, SPLIT_GROUP};
use crate::port::{self, Direction, LinkType, Port, PortError, PortOptions, PortStats};
use crate::ring::{ring, Consumer, Producer};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Groups a thread may parse past the group it is counting (per thread).
pub const AHEAD: u64 = 8;

/// Where one thread's packets come from.
enum Source<'a> {
    /// A port (a NIC queue, a list member, a fanout socket), read as it comes.
    Port(Box<dyn Port + 'a>),
    /// A reader of a split capture file, whose groups are counted in file order.
    Split(Box<SplitReader>),
}

enum Kind {
    One(Box<dyn Port>),
    Parts(Vec<Box<dyn Port>>),
    Split(Vec<SplitReader>),
}

/// The input of a run, opened for its threads.
pub struct FlowInput {
    kind: Kind,
    link: LinkType,
    threads: usize,
    plan: String,
    live: bool,
}

/// Whether `uri` names one regular capture file (which every thread can open on its own).
fn capture_file(uri: &str) -> Option<&str> {
    if uri.contains(',') {
        return None;
    }
    let path = match uri.split_once(':') {
        Some(("pcap", p)) => p,
        Some((s, _)) if ["mem", "afpacket", "xdp", "cluster"].contains(&s) => return None,
        _ => uri,
    };
    if path == "-" {
        return None;
    }
    std::fs::metadata(path)
        .ok()
        .filter(|m| m.is_file())
        .map(|_| path)
}

/// A fanout group id unlikely to be another process's (ids are per network namespace).
fn fanout_id() -> u16 {
    let pid = std::process::id();
    ((pid ^ (pid >> 16)) as u16) | 1
}

impl FlowInput {
    /// Opens `uri` for `threads` threads (see the module's description of how each input is
    /// split); `opts` as for any port.
    pub fn open(uri: &str, opts: &PortOptions, threads: usize) -> Result<FlowInput, PortError> {
        let threads = threads.max(1);
        let live = uri
            .split(',')
            .any(|p| p.starts_with("afpacket:") || p.starts_with("xdp:"));
        if threads == 1 {
            let p = port::open_rx(uri, opts)?;
            let link = p.link_type();
            return Ok(FlowInput {
                kind: Kind::One(p),
                link,
                threads,
                plan: "1 thread".into(),
                live,
            });
        }
        if let Some(file) = capture_file(uri) {
            let Some(split) = PcapSplit::open(file, opts)? else {
                // A pcapng file's blocks depend on those before (interfaces, time units): it
                // is read in order by one thread.
                let p = port::open_rx(uri, opts)?;
                let link = p.link_type();
                return Ok(FlowInput {
                    kind: Kind::One(p),
                    link,
                    threads: 1,
                    plan: format!(
                        "1 thread, not {threads}: a pcapng file is read in order by one thread \
                         (a classic pcap file is split between threads)"
                    ),
                    live,
                });
            };
            {
                let readers = (0..threads).map(|_| split.reader()).collect();
                return Ok(FlowInput {
                    kind: Kind::Split(readers),
                    link: split.link_type(),
                    threads,
                    plan: format!(
                        "{threads} threads, each reading the next group of up to {SPLIT_GROUP} \
                         records of the file when it is free (no dispatcher); flows counted in \
                         file order"
                    ),
                    live,
                });
            }
        }
        // Parts never wait in rx: a thread serves its parts and its rings in one loop.
        let part_opts = PortOptions {
            rx_wait_ms: 0,
            ..opts.clone()
        };
        let parts = match uri.strip_prefix("afpacket:") {
            Some(iface) if !uri.contains(',') => {
                let fo = PortOptions {
                    fanout_group: Some(fanout_id()),
                    ..part_opts
                };
                (0..threads)
                    .map(|_| {
                        port::afpacket::AfPacket::open(iface, &fo)
                            .map(|p| Box::new(p) as Box<dyn Port>)
                    })
                    .collect::<Result<Vec<_>, _>>()?
            }
            _ => port::open_parts(uri, &part_opts, Direction::Rx)?,
        };
        let link = parts[0].link_type();
        let plan = plan(uri, &parts, threads);
        Ok(FlowInput {
            kind: Kind::Parts(parts),
            link,
            threads,
            plan,
            live,
        })
    }

    /// Link type of the input's packets.
    pub fn link_type(&self) -> LinkType {
        self.link
    }

    /// Threads the run uses.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Which thread reads what, in words.
    pub fn plan(&self) -> &str {
        &self.plan
    }

    /// Whether the input is a live interface (flows then also expire by the wall clock).
    pub fn is_live(&self) -> bool {
        self.live
    }
}

/// Which thread reads which parts, in words.
fn plan(uri: &str, parts: &[Box<dyn Port>], threads: usize) -> String {
    let n = parts.len();
    if n == 1 {
        return format!(
            "{threads} threads: {uri} cannot be split, thread 0 reads it and hands each flow to \
             the thread that owns it"
        );
    }
    let what = if uri.starts_with("xdp:") && !uri.contains(',') {
        "queues"
    } else if uri.starts_with("afpacket:") && !uri.contains(',') {
        "fanout sockets"
    } else {
        "inputs"
    };
    let mut s = format!("{n} {what} over {threads} threads");
    if !n.is_multiple_of(threads) {
        s.push_str(if n < threads {
            " (the threads without one only count flows they own)"
        } else {
            " (some threads read one more)"
        });
    }
    s.push(':');
    for t in 0..threads {
        let mine: Vec<&str> = (t..n).step_by(threads).map(|i| parts[i].name()).collect();
        let list = if mine.is_empty() {
            "nothing".to_string()
        } else {
            mine.join(", ")
        };
        s.push_str(&format!(" thread {t} reads {list};"));
    }
    s.pop();
    s
}

/// Runs the monitor on `input` (on the calling thread if it has one thread, else on
/// `input.threads()` threads while the calling thread hands records to `sink`).
pub fn run_input(
    input: FlowInput,
    opts: &FlowOptions,
    stop: &AtomicBool,
    sink: &mut dyn RecordSink,
) -> FlowReport {
    let nt = input.threads;
    let link = input.link;
    let (sources, ordered): (Vec<Vec<Source<'static>>>, bool) = match input.kind {
        Kind::One(mut p) => {
            let o = FlowOptions {
                threads: 1,
                ..opts.clone()
            };
            return super::run(p.as_mut(), &o, stop, sink);
        }
        Kind::Split(readers) => (
            readers
                .into_iter()
                .map(|r| vec![Source::Split(Box::new(r))])
                .collect(),
            true,
        ),
        Kind::Parts(parts) => {
            let mut v: Vec<Vec<Source<'static>>> = (0..nt).map(|_| Vec::new()).collect();
            for (i, p) in parts.into_iter().enumerate() {
                v[i % nt].push(Source::Port(p));
            }
            (v, false)
        }
    };
    run_sources(sources, ordered, link, opts, stop, sink)
}

/// The multi-thread path for a single port (`flow::run` with `threads > 1`): thread 0 reads it
/// and routes flows to their owners.
pub(super) fn run_one_port(
    port: &mut dyn Port,
    opts: &FlowOptions,
    stop: &AtomicBool,
    sink: &mut dyn RecordSink,
) -> FlowReport {
    let link = port.link_type();
    let nt = opts.threads.max(1);
    let mut sources: Vec<Vec<Source<'_>>> = (0..nt).map(|_| Vec::new()).collect();
    sources[0].push(Source::Port(Box::new(Borrowed(port))));
    run_sources(sources, false, link, opts, stop, sink)
}

/// A borrowed port as a boxed one (for [`run_one_port`]).
struct Borrowed<'a>(&'a mut dyn Port);

impl Port for Borrowed<'_> {
    fn name(&self) -> &str {
        self.0.name()
    }
    fn rx(&mut self, batch: &mut Batch) -> Result<usize, PortError> {
        self.0.rx(batch)
    }
    fn tx(&mut self, batch: &mut Batch) -> Result<usize, PortError> {
        self.0.tx(batch)
    }
    fn stats(&mut self) -> PortStats {
        self.0.stats()
    }
    fn link_type(&self) -> LinkType {
        self.0.link_type()
    }
    fn is_finished(&self) -> bool {
        self.0.is_finished()
    }
}

/// A message between threads: a packet for its owner ([`ITEM`]), or a mark of a group of a
/// capture file (`ts` = the group's number, `clock` = the file's latest time within the group at
/// the mark). An item's `hash` is free in flight (its owner computes it), so it says which.
type Msg = Item;
/// `hash` of a packet in flight.
const ITEM: u32 = 0;
/// `hash` of a group's start mark.
const START: u32 = 1;
/// `hash` of a group's end mark.
const END: u32 = 2;
/// `hash` of a tick: where one thread would expire flows (every 64 packets of the file, as its
/// loop does after each batch, and after the last one).
const TICK: u32 = 3;

fn mark(kind: u32, group: u64, clock: u64) -> Msg {
    Item {
        ts: group,
        clock,
        hash: kind,
        ..Default::default()
    }
}

/// What every thread sees.
struct Shared<'a> {
    stop: &'a AtomicBool,
    /// An input failed: every thread stops reading.
    halt: AtomicBool,
    /// Threads that will read no more.
    done: AtomicUsize,
    /// Groups in the capture file, once a shard reached its end (u64::MAX before).
    groups: AtomicU64,
    /// Live and unsplit inputs: the latest packet time any thread has read and handed over
    /// (stored after the items went into the rings, so a thread that loads it and then empties
    /// its rings has counted every packet read before it).
    clock: AtomicU64,
    /// Where threads add what they read (`--metrics`).
    live: Option<&'a FlowLive>,
}

/// What a thread hands back.
struct ThreadEnd {
    packets: u64,
    bytes: u64,
    not_flow: [u64; NotFlow::COUNT],
    table: TableStats,
    bytes_per_flow: usize,
    table_bytes: usize,
    port: PortStats,
    error: Option<PortError>,
    stopped: bool,
}

/// The thread that owns a flow of `k`: by address pair, VLAN and protocol, so that both
/// directions and all fragments of a datagram go to one thread. Symmetric by construction (the
/// two addresses are summed), so no comparison is needed.
#[inline(always)]
fn owner(k: &FlowKey, nt: usize) -> usize {
    #[inline(always)]
    fn fold(x: &[u8; 16]) -> u64 {
        let (lo, hi) = x.split_at(8);
        let lo = u64::from_le_bytes(lo.try_into().unwrap_or([0; 8]));
        let hi = u64::from_le_bytes(hi.try_into().unwrap_or([0; 8]));
        lo ^ hi.rotate_left(29)
    }
    let s = fold(&k.a).wrapping_add(fold(&k.b)) ^ ((k.vlan as u64) << 8 | k.proto as u64);
    let mut h = s.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    h ^= h >> 31;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    (((h >> 32) * nt as u64) >> 32) as usize
}

/// Reads a packet's headers; a later fragment keeps `E_LATER` for its owner to complete.
#[inline(always)]
fn parse(data: &[u8], link: LinkType) -> Result<super::key::PktInfo, NotFlow> {
    match extract(data, link) {
        Ok(p) => Ok(p),
        Err(NotFlow::Fragment) => extract_fragment(data, link).map_err(|_| NotFlow::Fragment),
        Err(r) => Err(r),
    }
}

/// A thread's incoming ring with what was popped but not counted yet (the next group's).
struct Inbox {
    c: Consumer<Msg>,
    buf: Vec<Msg>,
    pos: usize,
}

impl Inbox {
    fn is_empty(&self) -> bool {
        self.pos == self.buf.len() && self.c.is_empty()
    }

    /// The next message, if one is there, left in place.
    #[inline]
    fn peek(&mut self) -> Option<&Msg> {
        if self.pos == self.buf.len() {
            self.buf.resize(BATCH, Msg::default());
            let n = self.c.pop_burst(&mut self.buf);
            self.buf.truncate(n);
            self.pos = 0;
        }
        self.buf.get(self.pos)
    }

    /// The next message, if one is there.
    #[inline]
    fn next(&mut self) -> Option<Msg> {
        let m = *self.peek()?;
        self.pos += 1;
        Some(m)
    }
}

/// One thread: its sources, its rings, its table.
struct Thread<'a> {
    t: usize,
    nt: usize,
    w: Worker,
    outs: Vec<Option<Producer<Msg>>>,
    ins: Vec<Option<Inbox>>,
    sh: &'a Shared<'a>,
    records: mpsc::Sender<Vec<FlowRecord>>,
    /// Items to count here, gathered before counting (fragments completed first).
    mine: Vec<Item>,
    stage: Vec<Vec<Msg>>,
    /// Ordered messages a full ring could not take yet, per owner, sent before any new one.
    overflow: Vec<std::collections::VecDeque<Msg>>,
    packets: u64,
    bytes: u64,
    /// Packets and bytes already added to the shared live counters.
    published: (u64, u64),
    /// The latest packet time of the group being parsed.
    gclock: u64,
}

impl Thread<'_> {
    /// Adds what was read since the last call to the live counters (once per loop turn).
    #[inline]
    fn publish_live(&mut self) {
        if let Some(l) = self.sh.live {
            if self.packets != self.published.0 {
                l.add(
                    self.packets - self.published.0,
                    self.bytes - self.published.1,
                );
                self.published = (self.packets, self.bytes);
            }
        }
    }

    /// Parses one packet: an item this thread owns goes to `mine`, others to `stage`.
    #[inline(always)]
    fn route(&mut self, data: &[u8], ts: u64, wire_len: u32, group: u64, ordered: bool) {
        self.bytes += wire_len as u64;
        self.packets += 1;
        match parse(data, self.w.link) {
            Ok(info) => {
                self.gclock = self.gclock.max(ts);
                let item = Item {
                    ts,
                    clock: self.gclock,
                    wire_len,
                    hash: ITEM,
                    info,
                };
                let o = owner(&info.key, self.nt);
                if o == self.t {
                    self.mine.push(item);
                } else {
                    if self.stage[o].is_empty() && ordered {
                        self.stage[o].push(mark(START, group, 0));
                    }
                    self.stage[o].push(item);
                }
            }
            Err(r) => self.w.not_flow[r as usize] += 1,
        }
    }

    /// A tick for every thread (this one's own list and the others' stages).
    fn tick(&mut self, group: u64) {
        let m = mark(TICK, group, self.gclock);
        self.mine.push(m);
        for o in 0..self.nt {
            if o != self.t {
                if self.stage[o].is_empty() {
                    self.stage[o].push(mark(START, group, 0));
                }
                self.stage[o].push(m);
            }
        }
    }

    /// Counts a group's messages in file order, as one thread would have: each packet at the
    /// file's time at that packet (`mprev` = the time the groups before reached), flows expired
    /// at each tick.
    fn count_ordered(w: &mut Worker, msgs: &mut [Msg], mprev: u64) {
        let mut from = 0;
        for i in 0..=msgs.len() {
            let tick = msgs.get(i).map(|m| m.hash);
            if tick == Some(ITEM) {
                continue;
            }
            Self::resolve_and(w, &mut msgs[from..i], |w, items| {
                w.count_only(items, Some(mprev))
            });
            if tick == Some(TICK) {
                w.table.clock_to(mprev.max(msgs[i].clock));
                w.table.advance(0, &mut w.out);
            }
            from = i + 1;
        }
    }

    /// Parses `batch` (see [`Thread::route`]).
    fn split(&mut self, batch: &Batch, group: u64) {
        for (i, d) in batch.descs().iter().enumerate() {
            self.route(batch.data(i), d.ts, d.wire_len, group, false);
        }
    }

    /// Counts `items` (owned by this thread): fragments completed, hashes taken, then counted.
    fn count(w: &mut Worker, items: &mut [Item]) {
        Self::resolve_and(w, items, |w, items| w.count(items));
    }

    /// Completes fragments and takes hashes of `items` (marks dropped), then hands them to `f`
    /// by batches.
    fn resolve_and(w: &mut Worker, items: &mut [Item], f: impl Fn(&mut Worker, &[Item])) {
        for chunk in items.chunks_mut(BATCH) {
            let mut k = 0;
            for i in 0..chunk.len() {
                let mut it = chunk[i];
                if it.hash != ITEM {
                    continue;
                }
                if it.info.encap & E_LATER != 0 {
                    if !w.frags.later(&mut it.info) {
                        w.not_flow[NotFlow::Fragment as usize] += 1;
                        continue;
                    }
                } else if it.info.encap & E_FRAG != 0 {
                    w.frags.first(&it.info);
                }
                it.hash = it.info.key.hash();
                chunk[k] = it;
                k += 1;
            }
            if k > 0 {
                f(w, &chunk[..k]);
            }
        }
    }

    /// Sends the staged messages to their owners. Ordered (`group` Some): each owner also gets
    /// an end-of-group mark, and what a full ring cannot take waits in this thread's overflow
    /// (sent first, in order, later), so no thread ever waits for another to make room.
    /// Unordered (`group` None): while a ring is full, counts what this thread was sent, so
    /// that two threads sending to each other never wait on each other.
    fn send(&mut self, group: Option<u64>) {
        for o in 0..self.nt {
            if o == self.t {
                continue;
            }
            if let Some(g) = group {
                if self.stage[o].is_empty() {
                    self.stage[o].push(mark(START, g, 0));
                }
                self.stage[o].push(mark(END, g, self.gclock));
                self.flush_overflow(o);
                let Some(p) = self.outs[o].as_mut() else {
                    continue;
                };
                let off = if self.overflow[o].is_empty() {
                    p.push_burst(&self.stage[o])
                } else {
                    0
                };
                self.overflow[o].extend(&self.stage[o][off..]);
                self.stage[o].clear();
                continue;
            }
            let mut off = 0;
            let mut spins = 0u32;
            while off < self.stage[o].len() {
                let Some(p) = self.outs[o].as_mut() else {
                    break;
                };
                off += p.push_burst(&self.stage[o][off..]);
                if off < self.stage[o].len() {
                    self.drain_unordered();
                    spins += 1;
                    if spins > 16 {
                        std::thread::sleep(Duration::from_micros(20));
                    } else {
                        std::hint::spin_loop();
                    }
                }
            }
            self.stage[o].clear();
        }
    }

    /// Sends what waits in the overflow toward `o`, as far as its ring takes it.
    fn flush_overflow(&mut self, o: usize) {
        let (Some(p), q) = (self.outs[o].as_mut(), &mut self.overflow[o]) else {
            return;
        };
        while !q.is_empty() {
            let (a, _) = q.as_slices();
            let len = a.len();
            let n = p.push_burst(a);
            q.drain(..n);
            if n < len {
                break;
            }
        }
    }

    /// Counts whatever the other threads sent, in arrival order; returns how many messages.
    fn drain_unordered(&mut self) -> usize {
        let mut n = 0;
        let mut got: Vec<Item> = std::mem::take(&mut self.mine);
        let base = got.len();
        for i in 0..self.nt {
            let Some(inbox) = self.ins[i].as_mut() else {
                continue;
            };
            while let Some(m) = inbox.next() {
                n += 1;
                if m.hash == ITEM {
                    got.push(m);
                }
            }
        }
        if got.len() > base {
            Self::count(&mut self.w, &mut got[base..]);
        }
        got.truncate(base);
        self.mine = got;
        n
    }

    /// Hands the records made so far to the calling thread.
    fn flush_records(&mut self) {
        if !self.w.out.is_empty() {
            let v = std::mem::replace(&mut self.w.out, Vec::with_capacity(1024 + 4 * BATCH));
            let _ = self.records.send(v);
        }
    }
}

fn thread_main(
    mut th: Thread<'_>,
    mut sources: Vec<Source<'_>>,
    ordered: bool,
    wall_clock: bool,
) -> ThreadEnd {
    let (t, nt) = (th.t, th.nt);
    let mut batch = Batch::new();
    let mut error = None;
    let mut producing = !sources.is_empty();
    // Ordered threads say they are done once their overflow is sent too.
    let mut said_done = !ordered;
    if !producing && !ordered {
        th.sh.done.fetch_add(1, Ordering::AcqRel);
    }
    // Ordered (capture file): groups parsed and not yet counted, ours.
    // (group, its messages for this thread, the file's latest time within it)
    let mut local: std::collections::VecDeque<(u64, Vec<Item>, u64)> = Default::default();
    // The file's latest time over the groups counted so far.
    let mut mprev = 0u64;
    let mut spare: Vec<Vec<Item>> = (0..AHEAD).map(|_| Vec::with_capacity(BATCH)).collect();
    let mut count_pos = 0u64;
    let mut group_items: Vec<Item> = Vec::with_capacity(BATCH);
    // The ring whose group is being counted (its end not arrived yet).
    let mut reading: Option<usize> = None;
    let mut next_src = 0usize;
    let mut idle = 0u32;
    let mut stopped = false;
    loop {
        th.publish_live();
        let mut work = false;
        let stopping = th.sh.stop.load(Ordering::Relaxed) || th.sh.halt.load(Ordering::Relaxed);
        stopped |= th.sh.stop.load(Ordering::Relaxed);
        // Read.
        if producing && stopping {
            producing = false;
            if !ordered {
                th.sh.done.fetch_add(1, Ordering::AcqRel);
            }
        } else if producing && ordered {
            for o in 0..nt {
                if o != t && !th.overflow[o].is_empty() {
                    th.flush_overflow(o);
                }
            }
            let Some(Source::Split(reader)) = sources.first_mut() else {
                unreachable!("ordered threads read a split file")
            };
            // Claim only while this thread's backlog and the file's position stay within reach
            // of what it has counted.
            if (local.len() as u64) < AHEAD && reader.next_claim() < count_pos + AHEAD * nt as u64 {
                match reader.next_group() {
                    Chunk::NotYet => {}
                    Chunk::Group(g) => {
                        th.mine.clear();
                        th.gclock = 0;
                        let first = reader.first_record();
                        let n = reader.records().len() as u64;
                        for (i, r) in reader.records().enumerate() {
                            th.route(r.data, r.ts, r.wire_len, g, true);
                            let i = i as u64;
                            if (first + i + 1).is_multiple_of(BATCH as u64)
                                || (reader.is_last() && i + 1 == n)
                            {
                                th.tick(g);
                            }
                        }
                        let fresh = spare.pop().unwrap_or_else(|| Vec::with_capacity(BATCH));
                        let gclock = th.gclock;
                        local.push_back((g, std::mem::replace(&mut th.mine, fresh), gclock));
                        th.send(Some(g));
                        work = true;
                    }
                    Chunk::End => {
                        if let Some(g) = reader.groups() {
                            th.sh.groups.store(g, Ordering::Release);
                        }
                        if let Some(e) = reader.take_error() {
                            error = Some(e);
                        }
                        // Ends once what waits in the overflow went out.
                        producing = false;
                        work = true;
                    }
                }
            }
        } else if producing {
            let ns = sources.len();
            let mut all_finished = true;
            for k in 0..ns {
                let i = (next_src + k) % ns;
                let Source::Port(p) = &mut sources[i] else {
                    continue;
                };
                if p.is_finished() {
                    continue;
                }
                all_finished = false;
                match p.rx(&mut batch) {
                    Ok(0) => {}
                    Ok(_) => {
                        th.split(&batch, 0);
                        let maxts = batch.descs().iter().map(|d| d.ts).max().unwrap_or(0);
                        batch.clear();
                        let mut mine = std::mem::take(&mut th.mine);
                        Thread::count(&mut th.w, &mut mine);
                        th.mine = mine;
                        th.mine.clear();
                        th.send(None);
                        th.sh.clock.fetch_max(maxts, Ordering::Release);
                        next_src = (i + 1) % ns;
                        work = true;
                        break;
                    }
                    Err(e) => {
                        error = Some(e);
                        th.sh.halt.store(true, Ordering::Relaxed);
                        break;
                    }
                }
            }
            if all_finished {
                producing = false;
                th.sh.done.fetch_add(1, Ordering::AcqRel);
            }
        }
        if ordered && !producing && !said_done {
            for o in 0..nt {
                if o != t {
                    th.flush_overflow(o);
                }
            }
            if th.overflow.iter().all(|q| q.is_empty()) {
                said_done = true;
                th.sh.done.fetch_add(1, Ordering::AcqRel);
            }
        }
        // Count.
        let total = th.sh.groups.load(Ordering::Acquire);
        if ordered && !stopping {
            while count_pos < total {
                if reading.is_none() && local.front().is_some_and(|(g, _, _)| *g == count_pos) {
                    let (_, mut v, gclock) = local.pop_front().unwrap_or_default();
                    Thread::count_ordered(&mut th.w, &mut v, mprev);
                    mprev = mprev.max(gclock);
                    v.clear();
                    spare.push(v);
                    count_pos += 1;
                    work = true;
                    continue;
                }
                // The group is another thread's: find the ring whose next message is its start.
                if reading.is_none() {
                    reading = th.ins.iter_mut().position(|i| {
                        i.as_mut().is_some_and(|i| {
                            i.peek()
                                .is_some_and(|m| m.hash == START && m.ts == count_pos)
                        })
                    });
                    let Some(i) = reading else { break };
                    th.ins[i].as_mut().and_then(|i| i.next());
                }
                let Some(inbox) = reading.and_then(|i| th.ins[i].as_mut()) else {
                    break;
                };
                let mut complete = false;
                let mut end_clock = 0;
                while let Some(m) = inbox.next() {
                    if m.hash == END {
                        debug_assert_eq!(m.ts, count_pos);
                        end_clock = m.clock;
                        complete = true;
                        break;
                    }
                    group_items.push(m);
                    if group_items.len() == 4 * BATCH {
                        Thread::count_ordered(&mut th.w, &mut group_items, mprev);
                        group_items.clear();
                    }
                }
                if !complete {
                    break; // the rest of the group is on its way
                }
                Thread::count_ordered(&mut th.w, &mut group_items, mprev);
                group_items.clear();
                mprev = mprev.max(end_clock);
                reading = None;
                count_pos += 1;
                work = true;
            }
        } else {
            // Everything read before `c` is in the rings: once they are empty, this table's
            // clock may move to it (flows of a quiet thread expire as one thread's would).
            let c = th.sh.clock.load(Ordering::Acquire);
            if th.drain_unordered() > 0 {
                work = true;
            }
            if !ordered && th.ins.iter().flatten().all(|i| i.is_empty()) {
                th.w.table.advance(c, &mut th.w.out);
            }
        }
        if !group_items.is_empty() && (stopping || !ordered) {
            Thread::count(&mut th.w, &mut group_items);
            group_items.clear();
        }
        if wall_clock {
            th.w.table.advance(crate::time::wall_ns(), &mut th.w.out);
        }
        // Records go out in lots (one allocation and one wake-up of the printing thread per
        // lot), and at once when this thread has nothing else to do (live traffic).
        // Records go out in lots (one allocation and one wake-up of the printing thread per
        // lot), and at once when this thread has nothing else to do (live traffic).
        if th.w.out.len() >= 512 || !work {
            th.flush_records();
        }
        // End: nobody reads any more and everything sent here was counted.
        if !producing && th.sh.done.load(Ordering::Acquire) == nt {
            let ordered_done = !ordered || stopping || count_pos >= total;
            if ordered_done {
                // Every thread has stopped sending: take what is left, in any order.
                while let Some((_, mut v, _)) = local.pop_front() {
                    Thread::count(&mut th.w, &mut v);
                }
                th.drain_unordered();
                if !group_items.is_empty() {
                    Thread::count(&mut th.w, &mut group_items);
                    group_items.clear();
                }
                if th.ins.iter().flatten().all(|i| i.is_empty()) {
                    break;
                }
                continue;
            }
        }
        if work {
            idle = 0;
        } else {
            // A file's groups come within microseconds: spin longer before sleeping there; a
            // live input may stay idle, so sleep sooner.
            idle += 1;
            if idle > if ordered { 4096 } else { 64 } {
                std::thread::sleep(Duration::from_micros(50));
            } else if idle.is_multiple_of(16) {
                // Let a thread waiting for a core (the one printing records) have it.
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
    }
    th.publish_live();
    th.w.table.flush(&mut th.w.out);
    th.flush_records();
    let mut port = PortStats::default();
    for s in &mut sources {
        let o = match s {
            Source::Port(p) => p.stats(),
            Source::Split(r) => r.stats(),
        };
        port.rx_packets += o.rx_packets;
        port.rx_bytes += o.rx_bytes;
        port.rx_drops = port.rx_drops.merged(&o.rx_drops);
    }
    batch.clear();
    ThreadEnd {
        packets: th.packets,
        bytes: th.bytes,
        not_flow: th.w.not_flow,
        table: th.w.table.stats(),
        bytes_per_flow: th.w.table.bytes_per_flow(),
        table_bytes: th.w.table.memory_bytes(),
        port,
        error,
        stopped,
    }
}

/// Runs one thread per element of `sources` (its sources may be none).
fn run_sources(
    sources: Vec<Vec<Source<'_>>>,
    ordered: bool,
    link: LinkType,
    opts: &FlowOptions,
    stop: &AtomicBool,
    sink: &mut dyn RecordSink,
) -> FlowReport {
    let t0 = Instant::now();
    let nt = sources.len();
    let sh = Shared {
        stop,
        halt: AtomicBool::new(false),
        done: AtomicUsize::new(0),
        groups: AtomicU64::new(if ordered { u64::MAX } else { 0 }),
        clock: AtomicU64::new(0),
        live: opts.live.as_deref(),
    };
    // Rings hold 2 × AHEAD groups of each producer (the bound of the ordered protocol).
    let ring_size = opts
        .ring_size
        .max(2 * AHEAD as usize * (BATCH + 1))
        .next_power_of_two();
    let mut outs: Vec<Vec<Option<Producer<Msg>>>> = (0..nt).map(|_| Vec::new()).collect();
    let mut ins: Vec<Vec<Option<Inbox>>> = (0..nt).map(|_| Vec::new()).collect();
    for (from, out) in outs.iter_mut().enumerate() {
        for (to, inb) in ins.iter_mut().enumerate() {
            if from == to {
                out.push(None);
                inb.push(None);
                continue;
            }
            let (p, c) = ring::<Msg>(ring_size);
            out.push(Some(p));
            inb.push(Some(Inbox {
                c,
                buf: Vec::with_capacity(BATCH),
                pos: 0,
            }));
        }
    }
    // `ins[to][from]`: each thread's inboxes, indexed by sender.
    let (rtx, rrx) = mpsc::channel::<Vec<FlowRecord>>();
    let ends: Vec<ThreadEnd> = std::thread::scope(|s| {
        let mut handles = Vec::with_capacity(nt);
        for (t, (srcs, (out, inb))) in sources
            .into_iter()
            .zip(outs.into_iter().zip(ins))
            .enumerate()
        {
            let th = Thread {
                t,
                nt,
                w: Worker::new(opts.table, link),
                outs: out,
                ins: inb,
                sh: &sh,
                records: rtx.clone(),
                mine: Vec::with_capacity(BATCH),
                gclock: 0,
                stage: (0..nt).map(|_| Vec::with_capacity(BATCH + 1)).collect(),
                overflow: (0..nt).map(|_| Default::default()).collect(),
                packets: 0,
                bytes: 0,
                published: (0, 0),
            };
            let wall = opts.wall_clock;
            handles.push(s.spawn(move || thread_main(th, srcs, ordered, wall)));
        }
        drop(rtx);
        let mut ends = Vec::with_capacity(nt);
        let mut ending = false;
        for h in handles {
            while !h.is_finished() {
                // Woken by records (or every 10 ms), not by a timer: on a machine with as many
                // cores as threads the reading threads keep them.
                match rrx.recv_timeout(Duration::from_millis(10)) {
                    Ok(v) => {
                        sink.records(&v);
                        drain(&rrx, sink);
                    }
                    Err(mpsc::RecvTimeoutError::Timeout) => {}
                    Err(mpsc::RecvTimeoutError::Disconnected) => {
                        std::thread::sleep(Duration::from_millis(1))
                    }
                }
                // Every thread has stopped reading: what follows is the final flush.
                if !ending && sh.done.load(Ordering::Acquire) == nt {
                    ending = true;
                    sink.ending();
                }
            }
            if let Ok(e) = h.join() {
                ends.push(e);
            }
        }
        drain(&rrx, sink);
        if !ending {
            sink.ending();
        }
        ends
    });
    let mut r = FlowReport {
        packets: 0,
        bytes: 0,
        not_flow: [0; NotFlow::COUNT],
        table: TableStats::default(),
        port: PortStats::default(),
        bytes_per_flow: 0,
        table_bytes: 0,
        elapsed: t0.elapsed(),
        threads: nt,
        ended: Ended::EndOfInput,
        error: None,
    };
    let mut stopped = false;
    for e in ends {
        r.packets += e.packets;
        r.bytes += e.bytes;
        for (a, b) in r.not_flow.iter_mut().zip(e.not_flow) {
            *a += b;
        }
        r.table = r.table.merged(&e.table);
        r.bytes_per_flow = e.bytes_per_flow;
        r.table_bytes += e.table_bytes;
        r.port.rx_packets += e.port.rx_packets;
        r.port.rx_bytes += e.port.rx_bytes;
        r.port.rx_drops = r.port.rx_drops.merged(&e.port.rx_drops);
        if r.error.is_none() {
            r.error = e.error;
        }
        stopped |= e.stopped;
    }
    r.ended = if r.error.is_some() {
        Ended::Error
    } else if stopped {
        Ended::Stopped
    } else {
        Ended::EndOfInput
    };
    r
}

fn drain(rx: &mpsc::Receiver<Vec<FlowRecord>>, sink: &mut dyn RecordSink) {
    while let Ok(v) = rx.try_recv() {
        sink.records(&v);
    }
}

//! The flow monitor on several threads, one share of the input each, no dispatcher in between
//! where the input can be split (as Argus on netmap reads one NIC queue per thread).
//!
//! - **Sources** ([`FlowInput::open`]): the queues of `xdp:IFACE` and the members of `a,b` are
//!   spread over the threads (thread t takes parts t, t + n, ...); `afpacket:IFACE` becomes one
//!   socket per thread in a `PACKET_FANOUT_HASH` group (the kernel's symmetric flow hash); a
//!   classic pcap file is cut into pieces ([`PcapSplit`]), piece k read by thread k mod n in
//!   place from the file mapped read-only (with its own `pread` where mapping is not safe), no
//!   lock. An input that cannot be split (`mem:`, a cluster queue, standard
//!   input) is read by thread 0 alone, which then hands flows on; a pcapng file by one thread.
//! - **Owners**: a flow belongs to the thread its address pair (with VLAN and protocol) hashes
//!   to, so both directions and every fragment of a datagram meet in one table. A thread parses
//!   what it reads, once, counts what it owns, and hands the parsed headers of the rest (`Item`,
//!   no bytes, no frame) to the owner. Fragments are matched to their first fragment by the
//!   owner.
//! - **Live inputs** hand packets over through an SPSC ring per thread pair; there is no order
//!   across queues (no tool has it); a full ring makes its producer count what others sent it
//!   while it waits.
//! - **A capture file**: the thread that parses a piece sorts its packets into one part per owner
//!   (with a tick every 64 packets of the file, where one thread expires flows) and moves each
//!   other thread's part to it as a vector through a bounded channel; the owner counts the parts
//!   of every piece in file order, each packet at the file's time at that packet, and gives the
//!   vector back empty. So every table sees its packets in file order and the records are those
//!   one thread makes. [`AHEAD`] vectors per thread pair bound how far a thread parses ahead (no
//!   allocation once they have grown; they never block: a thread without one counts meanwhile).
//! - **Records** go to the calling thread, which hands them to the sink; a sink that only writes
//!   lines ([`RecordSink::formatter`]) gets them formatted by the threads that made them.
//! - **End**: a thread that will read no more says so; when every thread has, each counts what
//!   is left, flushes its table and returns its counters. A stop (signal) or an input error ends
//!   reading everywhere, and what was read is still counted.

use super::key::{FlowKey, NotFlow, E_FRAG, E_LATER};
use super::record::{FlowRecord, RecordFormat};
use super::table::TableStats;
use super::{Ended, FlowLive, FlowOptions, FlowReport, Item, RecordSink, Worker};
use crate::mem::{Batch, BATCH};
use crate::port::pcap::{Chunk, PcapSplit, SplitReader, SPLIT_BYTES};
use crate::port::{self, Direction, LinkType, Port, PortError, PortOptions, PortStats, Uri};
use crate::ring::{ring, Consumer, Producer};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Groups of a capture file a thread may have parsed and not yet counted, and parts it may have
/// handed to each other thread and not got back (per thread).
pub const AHEAD: usize = 8;

/// Where one thread's packets come from: a port (a NIC queue, a list member, a fanout socket),
/// read as it comes.
type Source<'a> = Box<dyn Port + 'a>;

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
fn capture_file(uri: &Uri) -> Option<&str> {
    let path = match uri {
        Uri::File { path, .. } | Uri::Bare(path) => path.as_str(),
        _ => return None,
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
        Self::open_pieces(uri, opts, threads, SPLIT_BYTES)
    }

    /// [`FlowInput::open`] with a classic pcap file split in pieces of `piece` bytes (see
    /// [`PcapSplit::open_pieces`]).
    pub fn open_pieces(
        uri: &str,
        opts: &PortOptions,
        threads: usize,
        piece: usize,
    ) -> Result<FlowInput, PortError> {
        Self::open_split(uri, opts, threads, piece, true)
    }

    /// [`FlowInput::open_pieces`]; with `map` false a split file is copied with `pread` even
    /// where it could be mapped ([`PcapSplit::open_with`]).
    pub fn open_split(
        uri: &str,
        opts: &PortOptions,
        threads: usize,
        piece: usize,
        map: bool,
    ) -> Result<FlowInput, PortError> {
        let threads = threads.max(1);
        let parsed = Uri::parse(uri)?;
        let live = parsed.is_live();
        if threads == 1 {
            let p = crate::open_rx(uri, opts)?;
            let link = p.link_type();
            return Ok(FlowInput {
                kind: Kind::One(p),
                link,
                threads,
                plan: "1 thread".into(),
                live,
            });
        }
        if let Some(file) = capture_file(&parsed) {
            let Some(split) = PcapSplit::open_with(file, opts, piece, map)? else {
                // A pcapng file's blocks depend on those before (interfaces, time units): it
                // is read in order by one thread.
                let p = crate::open_rx(uri, opts)?;
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
                let readers = (0..threads).map(|t| split.reader(t, threads)).collect();
                return Ok(FlowInput {
                    kind: Kind::Split(readers),
                    link: split.link_type(),
                    threads,
                    plan: format!(
                        "{threads} threads, each reading its own {} KiB pieces of the file \
                         (piece k by thread k mod {threads}, no dispatcher; {}); flows counted \
                         in file order",
                        piece.max(1) >> 10,
                        if split.is_mapped() {
                            "the file mapped read-only, no copy"
                        } else if !map {
                            "copied with pread, as asked"
                        } else {
                            "copied with pread: the file is not one that only its owner can \
                             shorten while it is mapped, or could not be mapped"
                        }
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
        let parts = match &parsed {
            Uri::AfPacket(iface) => {
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
            _ => crate::open_uri_parts(&parsed, &part_opts, Direction::Rx)?,
        };
        let link = parts[0].link_type();
        let plan = plan(&parsed, &parts, threads);
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
fn plan(uri: &Uri, parts: &[Box<dyn Port>], threads: usize) -> String {
    let n = parts.len();
    if n == 1 {
        return format!(
            "{threads} threads: {uri} cannot be split, thread 0 reads it and hands each flow to \
             the thread that owns it"
        );
    }
    let what = match uri {
        Uri::Xdp { .. } => "queues",
        Uri::AfPacket(_) => "fanout sockets",
        _ => "inputs",
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
    let sources: Vec<Vec<Source<'static>>> = match input.kind {
        Kind::One(mut p) => {
            let o = FlowOptions {
                threads: 1,
                ..opts.clone()
            };
            return super::run_in_this_thread(p.as_mut(), &o, stop, sink);
        }
        Kind::Split(readers) => return run_split(readers, link, opts, stop, sink),
        Kind::Parts(parts) => {
            let mut v: Vec<Vec<Source<'static>>> = (0..nt).map(|_| Vec::new()).collect();
            for (i, p) in parts.into_iter().enumerate() {
                v[i % nt].push(p);
            }
            v
        }
    };
    run_sources(sources, link, opts, stop, sink)
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
    sources[0].push(Box::new(Borrowed(port)));
    run_sources(sources, link, opts, stop, sink)
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
    fn tx_ended(&self) -> bool {
        self.0.tx_ended()
    }
    fn tx_end_note(&self) -> Option<String> {
        self.0.tx_end_note()
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

/// A packet handed to its owner (`hash` is free in flight: its owner computes it), or, in a
/// capture file's parts, a tick ([`TICK`]).
type Msg = Item;
/// `hash` of a packet in flight.
const ITEM: u32 = 0;
/// `hash` of a tick: where one thread would expire flows (every 64 packets of the file, as its
/// loop does after each batch, and after the last one), `clock` = the file's latest time within
/// the group at the tick.
const TICK: u32 = 3;

fn tick_mark(clock: u64) -> Msg {
    Item {
        clock,
        hash: TICK,
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
    filtered: u64,
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
fn parse(data: &[u8], w: &Worker) -> Result<super::key::PktInfo, NotFlow> {
    let (link, t) = (w.link, w.tunnels);
    match super::key::extract_in(data, link, t) {
        Ok(p) => Ok(p),
        Err(NotFlow::Fragment) => {
            super::key::extract_fragment_in(data, link, t).map_err(|_| NotFlow::Fragment)
        }
        Err(r) => Err(r),
    }
}

/// Counts a part of a capture file's group (owned by this thread) in file order, as one thread
/// would have: each packet at the file's time at that packet (`mprev` = the time the groups
/// before reached), flows expired at each tick.
fn count_ordered(w: &mut Worker, msgs: &mut [Msg], mprev: u64) {
    let mut from = 0;
    for i in 0..=msgs.len() {
        let tick = msgs.get(i).map(|m| m.hash);
        if tick == Some(ITEM) {
            continue;
        }
        resolve_and(w, &mut msgs[from..i], |w, items| {
            w.count_only(items, Some(mprev))
        });
        if tick == Some(TICK) {
            w.table.clock_to(mprev.max(msgs[i].clock));
            w.table.advance(0, &mut w.out);
        }
        from = i + 1;
    }
}

/// Counts `items` (owned by this thread): fragments completed, hashes taken, then counted.
fn count(w: &mut Worker, items: &mut [Item]) {
    resolve_and(w, items, |w, items| w.count(items));
}

/// Completes fragments and takes hashes of `items` (ticks left out), then hands them to `f` by
/// batches.
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

/// A thread's incoming ring.
struct Inbox {
    c: Consumer<Msg>,
    buf: Vec<Msg>,
    pos: usize,
}

impl Inbox {
    fn is_empty(&self) -> bool {
        self.pos == self.buf.len() && self.c.is_empty()
    }

    /// The next message, if one is there.
    #[inline]
    fn next(&mut self) -> Option<Msg> {
        if self.pos == self.buf.len() {
            self.buf.resize(BATCH, Msg::default());
            let n = self.c.pop_burst(&mut self.buf);
            self.buf.truncate(n);
            self.pos = 0;
        }
        let m = *self.buf.get(self.pos)?;
        self.pos += 1;
        Some(m)
    }
}

/// One thread of a live or unsplit input: its sources, its rings, its table.
struct Thread<'a> {
    t: usize,
    nt: usize,
    w: Worker,
    outs: Vec<Option<Producer<Msg>>>,
    ins: Vec<Option<Inbox>>,
    sh: &'a Shared<'a>,
    records: RecordOut,
    /// Items to count here, gathered before counting (fragments completed first).
    mine: Vec<Item>,
    stage: Vec<Vec<Msg>>,
    packets: u64,
    bytes: u64,
    /// Packets and bytes already added to the shared live counters.
    published: (u64, u64),
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

    /// Parses `batch`: an item this thread owns goes to `mine`, others to `stage`.
    fn split(&mut self, batch: &Batch) {
        for (i, d) in batch.descs().iter().enumerate() {
            self.bytes += d.wire_len as u64;
            self.packets += 1;
            if !self.w.pass(batch.data(i), d.wire_len) {
                continue;
            }
            match parse(batch.data(i), &self.w) {
                Ok(info) => {
                    let item = Item {
                        ts: d.ts,
                        clock: 0,
                        wire_len: d.wire_len,
                        hash: ITEM,
                        info,
                        extra: self.w.extra(batch.data(i)),
                    };
                    let o = owner(&info.key, self.nt);
                    if o == self.t {
                        self.mine.push(item);
                    } else {
                        self.stage[o].push(item);
                    }
                }
                Err(r) => self.w.not_flow[r as usize] += 1,
            }
        }
    }

    /// Sends the staged messages to their owners; while a ring is full, counts what this
    /// thread was sent, so that two threads sending to each other never wait on each other.
    fn send(&mut self) {
        for o in 0..self.nt {
            if o == self.t {
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
                    self.drain();
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

    /// Counts whatever the other threads sent, in arrival order; returns how many messages.
    fn drain(&mut self) -> usize {
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
            count(&mut self.w, &mut got[base..]);
        }
        got.truncate(base);
        self.mine = got;
        n
    }

    /// Hands the records made so far to the calling thread.
    fn flush_records(&mut self) {
        flush_records(&mut self.w, &mut self.records);
    }
}

/// What a thread hands the calling thread: records, or their lines when the sink takes lines.
enum Recs {
    Records(Vec<FlowRecord>),
    Lines(Vec<u8>),
}

/// Where a thread's records go: to the calling thread, formatted first when the sink has a
/// formatter ([`RecordSink::formatter`]).
#[derive(Clone)]
struct RecordOut {
    tx: mpsc::Sender<Recs>,
    fmt: Option<RecordFormat>,
}

/// Hands the records `w` made so far to the calling thread.
fn flush_records(w: &mut Worker, records: &mut RecordOut) {
    if w.out.is_empty() {
        return;
    }
    if let Some(f) = &mut records.fmt {
        let mut lines = Vec::with_capacity(w.out.len() * 128);
        for r in &w.out {
            f.line(r, &mut lines);
        }
        w.out.clear();
        let _ = records.tx.send(Recs::Lines(lines));
    } else {
        let v = std::mem::replace(&mut w.out, Vec::with_capacity(1024 + 4 * BATCH));
        let _ = records.tx.send(Recs::Records(v));
    }
}

/// Gives what a thread handed over to `sink`.
fn give(sink: &mut dyn RecordSink, r: Recs) {
    match r {
        Recs::Records(v) => sink.records(&v),
        Recs::Lines(l) => sink.lines(&l),
    }
}

/// A thread's end: its table flushed and its counters.
fn thread_end(
    w: &mut Worker,
    records: &mut RecordOut,
    (packets, bytes): (u64, u64),
    port: PortStats,
    error: Option<PortError>,
    stopped: bool,
) -> ThreadEnd {
    w.table.flush(&mut w.out);
    flush_records(w, records);
    ThreadEnd {
        packets,
        bytes,
        not_flow: w.not_flow,
        filtered: w.filtered,
        table: w.table.stats(),
        bytes_per_flow: w.table.bytes_per_flow(),
        table_bytes: w.table.memory_bytes(),
        port,
        error,
        stopped,
    }
}

/// Sleeps a little after a while without work: spins first, yields now and then (to a thread
/// waiting for a core, such as the one printing records), then sleeps.
#[inline]
fn idle_wait(idle: &mut u32, spins: u32) {
    *idle += 1;
    if *idle > spins {
        std::thread::sleep(Duration::from_micros(50));
    } else if idle.is_multiple_of(16) {
        std::thread::yield_now();
    } else {
        std::hint::spin_loop();
    }
}

/// The longest a record waits in a busy live thread's lot before it goes to the sink.
const LOT_WAIT_NS: u64 = 50_000_000;

fn thread_main(mut th: Thread<'_>, mut sources: Vec<Source<'_>>, wall_clock: bool) -> ThreadEnd {
    let mut batch = Batch::new();
    let mut error = None;
    let mut producing = !sources.is_empty();
    if !producing {
        th.sh.done.fetch_add(1, Ordering::AcqRel);
    }
    let mut next_src = 0usize;
    let mut idle = 0u32;
    let mut stopped = false;
    // When the records waiting in this thread's lot began to wait (wall ns; 0: none wait).
    let mut out_since = 0u64;
    loop {
        th.publish_live();
        let mut work = false;
        let stopping = th.sh.stop.load(Ordering::Relaxed) || th.sh.halt.load(Ordering::Relaxed);
        stopped |= th.sh.stop.load(Ordering::Relaxed);
        // Read.
        if producing && stopping {
            producing = false;
            th.sh.done.fetch_add(1, Ordering::AcqRel);
        } else if producing {
            let ns = sources.len();
            let mut all_finished = true;
            for k in 0..ns {
                let i = (next_src + k) % ns;
                let p = &mut sources[i];
                if p.is_finished() {
                    continue;
                }
                all_finished = false;
                match p.rx(&mut batch) {
                    Ok(0) => {}
                    Ok(_) => {
                        th.split(&batch);
                        let maxts = batch.descs().iter().map(|d| d.ts).max().unwrap_or(0);
                        batch.clear();
                        let mut mine = std::mem::take(&mut th.mine);
                        count(&mut th.w, &mut mine);
                        th.mine = mine;
                        th.mine.clear();
                        th.send();
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
        // Count. Everything read before `c` is in the rings: once they are empty, this table's
        // clock may move to it (flows of a quiet thread expire as one thread's would).
        let c = th.sh.clock.load(Ordering::Acquire);
        if th.drain() > 0 {
            work = true;
        }
        if th.ins.iter().flatten().all(|i| i.is_empty()) {
            th.w.table.advance(c, &mut th.w.out);
        }
        // Live: records wait here at most LOT_WAIT, however busy the thread (the sink's own
        // flush interval, `--ipfix-flush`, counts from when it gets them).
        let mut waited = false;
        if wall_clock {
            let now = crate::time::wall_ns();
            th.w.table.advance(now, &mut th.w.out);
            if th.w.out.is_empty() {
                out_since = 0;
            } else if out_since == 0 {
                out_since = now;
            } else {
                waited = now.saturating_sub(out_since) >= LOT_WAIT_NS;
            }
        }
        // Records go out in lots (one allocation and one wake-up of the printing thread per
        // lot), and at once when this thread has nothing else to do (live traffic).
        if th.w.out.len() >= 512 || !work || waited {
            th.flush_records();
            out_since = 0;
        }
        // End: nobody reads any more and everything sent here was counted.
        if !producing && th.sh.done.load(Ordering::Acquire) == th.nt {
            th.drain();
            if th.ins.iter().flatten().all(|i| i.is_empty()) {
                break;
            }
            continue;
        }
        if work {
            idle = 0;
        } else {
            idle_wait(&mut idle, 64);
        }
    }
    th.publish_live();
    let mut port = PortStats::default();
    for p in &mut sources {
        let o = p.stats();
        port.rx_packets += o.rx_packets;
        port.rx_bytes += o.rx_bytes;
        port.rx_drops = port.rx_drops.merged(&o.rx_drops);
    }
    batch.clear();
    thread_end(
        &mut th.w,
        &mut th.records,
        (th.packets, th.bytes),
        port,
        error,
        stopped,
    )
}

/// The shared state of a run.
fn shared<'a>(stop: &'a AtomicBool, opts: &'a FlowOptions) -> Shared<'a> {
    Shared {
        stop,
        halt: AtomicBool::new(false),
        done: AtomicUsize::new(0),
        clock: AtomicU64::new(0),
        live: opts.live.as_deref(),
    }
}

/// Runs one thread per element of `sources` (its sources may be none).
fn run_sources(
    sources: Vec<Vec<Source<'_>>>,
    link: LinkType,
    opts: &FlowOptions,
    stop: &AtomicBool,
    sink: &mut dyn RecordSink,
) -> FlowReport {
    let t0 = Instant::now();
    let nt = sources.len();
    let sh = shared(stop, opts);
    let ring_size = opts.ring_size.max(2 * BATCH).next_power_of_two();
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
    let (rtx, rrx) = mpsc::channel::<Recs>();
    let rtx = RecordOut {
        tx: rtx,
        fmt: sink.formatter(),
    };
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
                w: Worker {
                    extras: opts.extras,
                    ..Worker::new(opts.table, link, opts.tunnels, opts.filter.as_deref())
                },
                outs: out,
                ins: inb,
                sh: &sh,
                records: rtx.clone(),
                mine: Vec::with_capacity(BATCH),
                stage: (0..nt).map(|_| Vec::with_capacity(BATCH)).collect(),
                packets: 0,
                bytes: 0,
                published: (0, 0),
            };
            let wall = opts.wall_clock;
            handles.push(s.spawn(move || thread_main(th, srcs, wall)));
        }
        drop(rtx);
        pump(handles, &rrx, &sh, nt, sink)
    });
    report(ends, t0, nt)
}

/// A part of a capture file's group for one owner: its packets and ticks in file order, and the
/// file's latest time within the group.
struct Part {
    group: u64,
    clock: u64,
    items: Vec<Item>,
}

/// One thread of a split capture file: it reads and parses its groups, keeps the part it owns,
/// hands each other thread its part (a vector moved over a bounded channel, no copy, given back
/// empty once counted), and counts the parts it owns of every group in file order.
struct SplitThread<'a> {
    t: usize,
    nt: usize,
    w: Worker,
    sh: &'a Shared<'a>,
    records: RecordOut,
    /// The parts of the group being parsed, by owner.
    stage: Vec<Vec<Item>>,
    /// Empty vectors for parts, by owner (its own parts come back to this thread).
    free: Vec<Vec<Vec<Item>>>,
    /// Parts for each other thread.
    to: Vec<Option<mpsc::SyncSender<Part>>>,
    /// Parts from each other thread.
    from: Vec<Option<mpsc::Receiver<Part>>>,
    /// Emptied vectors back to the thread that filled them.
    back_to: Vec<Option<mpsc::SyncSender<Vec<Item>>>>,
    /// Emptied vectors from each other thread.
    back_from: Vec<Option<mpsc::Receiver<Vec<Item>>>>,
    /// Parts of this thread's own groups for itself, not counted yet.
    local: std::collections::VecDeque<Part>,
    packets: u64,
    bytes: u64,
    published: (u64, u64),
    /// The file's latest time within the group being parsed.
    gclock: u64,
}

impl SplitThread<'_> {
    /// Whether this thread has room to parse a group: a vector for every owner's part.
    fn room(&mut self) -> bool {
        if self.local.len() >= AHEAD {
            return false;
        }
        for o in 0..self.nt {
            if self.free[o].is_empty() {
                if let Some(Ok(v)) = self.back_from[o].as_ref().map(|r| r.try_recv()) {
                    self.free[o].push(v);
                } else {
                    return false;
                }
            }
        }
        true
    }

    /// Parses one packet into its owner's part.
    #[inline(always)]
    fn route(&mut self, data: &[u8], ts: u64, wire_len: u32) {
        self.bytes += wire_len as u64;
        self.packets += 1;
        if !self.w.pass(data, wire_len) {
            return;
        }
        match parse(data, &self.w) {
            Ok(info) => {
                self.gclock = self.gclock.max(ts);
                let o = owner(&info.key, self.nt);
                self.stage[o].push(Item {
                    ts,
                    clock: self.gclock,
                    wire_len,
                    hash: ITEM,
                    info,
                    extra: self.w.extra(data),
                });
            }
            Err(r) => self.w.not_flow[r as usize] += 1,
        }
    }

    /// Parses group `g` (just read) and hands its parts out; [`SplitThread::room`] was true.
    fn parse_group(&mut self, reader: &SplitReader, g: u64) {
        for o in 0..self.nt {
            let v = self.free[o].pop().unwrap_or_default();
            self.stage[o] = v;
        }
        self.gclock = 0;
        let first = reader.first_record();
        for (i, r) in reader.records().enumerate() {
            self.route(r.data, r.ts, r.wire_len);
            if (first + i as u64 + 1).is_multiple_of(BATCH as u64) {
                let m = tick_mark(self.gclock);
                self.stage.iter_mut().for_each(|p| p.push(m));
            }
        }
        if reader.is_last() {
            // One thread expires flows after its last batch, however short.
            let m = tick_mark(self.gclock);
            self.stage.iter_mut().for_each(|p| p.push(m));
        }
        for o in 0..self.nt {
            let part = Part {
                group: g,
                clock: self.gclock,
                items: std::mem::take(&mut self.stage[o]),
            };
            if o == self.t {
                self.local.push_back(part);
            } else if let Some(tx) = &self.to[o] {
                // Never full: as many parts are in flight toward `o` as vectors were made.
                let _ = tx.try_send(part);
            }
        }
    }

    /// Gives an emptied vector back to the thread that filled it (`p`).
    fn give_back(&mut self, p: usize, mut v: Vec<Item>) {
        v.clear();
        if p == self.t {
            self.free[p].push(v);
        } else if let Some(tx) = &self.back_to[p] {
            let _ = tx.try_send(v);
        }
    }
}

fn split_main(
    mut th: SplitThread<'_>,
    mut reader: SplitReader,
    groups: &AtomicU64,
    wall_clock: bool,
) -> ThreadEnd {
    let (t, nt) = (th.t, th.nt);
    let mut error = None;
    let mut producing = true;
    // The next group to count, and the file's latest time over the groups counted.
    let mut count_pos = 0u64;
    let mut mprev = 0u64;
    let mut idle = 0u32;
    let mut stopped = false;
    loop {
        if let Some(l) = th.sh.live {
            if th.packets != th.published.0 {
                l.add(th.packets - th.published.0, th.bytes - th.published.1);
                th.published = (th.packets, th.bytes);
            }
        }
        let mut work = false;
        let stopping = th.sh.stop.load(Ordering::Relaxed);
        stopped |= stopping;
        // Read and parse this thread's next group, while there is room for its parts.
        if producing && stopping {
            producing = false;
            th.sh.done.fetch_add(1, Ordering::AcqRel);
        } else if producing && th.room() {
            match reader.next_group() {
                Chunk::NotYet => {}
                Chunk::Group(g) => {
                    th.parse_group(&reader, g);
                    work = true;
                }
                Chunk::End => {
                    if let Some(g) = reader.groups() {
                        groups.store(g, Ordering::Release);
                    }
                    if let Some(e) = reader.take_error() {
                        error = Some(e);
                    }
                    producing = false;
                    th.sh.done.fetch_add(1, Ordering::AcqRel);
                    work = true;
                }
            }
        }
        // Count the parts this thread owns, group after group in file order.
        let total = groups.load(Ordering::Acquire);
        while !stopping && count_pos < total {
            let p = (count_pos % nt as u64) as usize;
            let part = if p == t {
                match th.local.front() {
                    Some(part) if part.group == count_pos => th.local.pop_front(),
                    _ => None,
                }
            } else {
                th.from[p].as_ref().and_then(|r| r.try_recv().ok())
            };
            let Some(mut part) = part else { break };
            debug_assert_eq!(part.group, count_pos);
            count_ordered(&mut th.w, &mut part.items, mprev);
            mprev = mprev.max(part.clock);
            th.give_back(p, part.items);
            count_pos += 1;
            work = true;
            if th.w.out.len() >= 512 {
                flush_records(&mut th.w, &mut th.records);
            }
        }
        if wall_clock {
            th.w.table.advance(crate::time::wall_ns(), &mut th.w.out);
        }
        if th.w.out.len() >= 512 || !work {
            flush_records(&mut th.w, &mut th.records);
        }
        // End: nobody reads any more, and every group was counted (or a stop came: what was
        // read is counted, in any order).
        if !producing
            && th.sh.done.load(Ordering::Acquire) == nt
            && (stopping || count_pos >= groups.load(Ordering::Acquire))
        {
            while let Some(mut part) = th.local.pop_front() {
                count(&mut th.w, &mut part.items);
            }
            for p in 0..nt {
                while let Some(mut part) = th.from[p].as_ref().and_then(|r| r.try_recv().ok()) {
                    count(&mut th.w, &mut part.items);
                }
            }
            break;
        }
        if work {
            idle = 0;
        } else {
            idle_wait(&mut idle, 4096);
        }
    }
    if let Some(l) = th.sh.live {
        l.add(th.packets - th.published.0, th.bytes - th.published.1);
    }
    thread_end(
        &mut th.w,
        &mut th.records,
        (th.packets, th.bytes),
        reader.stats(),
        error,
        stopped,
    )
}

/// Runs one thread per reader of a split capture file.
fn run_split(
    readers: Vec<SplitReader>,
    link: LinkType,
    opts: &FlowOptions,
    stop: &AtomicBool,
    sink: &mut dyn RecordSink,
) -> FlowReport {
    let t0 = Instant::now();
    let nt = readers.len();
    let sh = shared(stop, opts);
    let groups = AtomicU64::new(u64::MAX);
    let mut ths: Vec<SplitThread<'_>> = Vec::with_capacity(nt);
    let (rtx, rrx) = mpsc::channel::<Recs>();
    let rtx = RecordOut {
        tx: rtx,
        fmt: sink.formatter(),
    };
    for t in 0..nt {
        ths.push(SplitThread {
            t,
            nt,
            w: Worker {
                extras: opts.extras,
                ..Worker::new(opts.table, link, opts.tunnels, opts.filter.as_deref())
            },
            sh: &sh,
            records: rtx.clone(),
            stage: (0..nt).map(|_| Vec::new()).collect(),
            // AHEAD vectors per owner: the bound on parts in flight from this thread to it.
            free: (0..nt)
                .map(|_| {
                    (0..AHEAD)
                        .map(|_| Vec::with_capacity(SPLIT_BYTES / 64 / nt + BATCH))
                        .collect()
                })
                .collect(),
            to: (0..nt).map(|_| None).collect(),
            from: (0..nt).map(|_| None).collect(),
            back_to: (0..nt).map(|_| None).collect(),
            back_from: (0..nt).map(|_| None).collect(),
            local: Default::default(),
            packets: 0,
            bytes: 0,
            published: (0, 0),
            gclock: 0,
        });
    }
    for a in 0..nt {
        for b in 0..nt {
            if a == b {
                continue;
            }
            // Parts from a to b, and their vectors back.
            let (tx, rx) = mpsc::sync_channel::<Part>(AHEAD);
            let (btx, brx) = mpsc::sync_channel::<Vec<Item>>(AHEAD);
            ths[a].to[b] = Some(tx);
            ths[b].from[a] = Some(rx);
            ths[b].back_to[a] = Some(btx);
            ths[a].back_from[b] = Some(brx);
        }
    }
    drop(rtx);
    let ends: Vec<ThreadEnd> = std::thread::scope(|s| {
        let mut handles = Vec::with_capacity(nt);
        for (th, r) in ths.into_iter().zip(readers) {
            let wall = opts.wall_clock;
            let groups = &groups;
            handles.push(s.spawn(move || split_main(th, r, groups, wall)));
        }
        pump(handles, &rrx, &sh, nt, sink)
    });
    report(ends, t0, nt)
}

/// Hands the threads' records to `sink` until every thread ended; their ends.
fn pump(
    handles: Vec<std::thread::ScopedJoinHandle<'_, ThreadEnd>>,
    rrx: &mpsc::Receiver<Recs>,
    sh: &Shared<'_>,
    nt: usize,
    sink: &mut dyn RecordSink,
) -> Vec<ThreadEnd> {
    let mut ends = Vec::with_capacity(nt);
    let mut ending = false;
    for h in handles {
        while !h.is_finished() {
            // Woken by records (or every 10 ms), not by a timer: on a machine with as many
            // cores as threads the reading threads keep them.
            match rrx.recv_timeout(Duration::from_millis(10)) {
                Ok(v) => {
                    give(sink, v);
                    drain(rrx, sink);
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    std::thread::sleep(Duration::from_millis(1))
                }
            }
            sink.tick();
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
    drain(rrx, sink);
    if !ending {
        sink.ending();
    }
    ends
}

/// The run's report from its threads' ends.
fn report(ends: Vec<ThreadEnd>, t0: Instant, nt: usize) -> FlowReport {
    let mut r = FlowReport {
        packets: 0,
        bytes: 0,
        not_flow: [0; NotFlow::COUNT],
        filtered: 0,
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
        r.filtered += e.filtered;
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

fn drain(rx: &mpsc::Receiver<Recs>, sink: &mut dyn RecordSink) {
    while let Ok(v) = rx.try_recv() {
        give(sink, v);
    }
}

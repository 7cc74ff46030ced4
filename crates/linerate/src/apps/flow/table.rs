//! The flow table: preallocated, bounded, with O(1) expiry.
//!
//! Entries live in one vector allocated up front (`max_flows` of them); a power-of-two bucket
//! array of `u32` heads indexes them by hash, with chains through the entries. Expiry uses three
//! intrusive FIFO lists, each ordered by construction so that only its head is ever examined:
//! open flows by last activity (idle timeout), closed TCP flows by last activity (linger time),
//! and every flow by the time its next status record is due. Time is the table's clock, the
//! largest packet timestamp seen (or a time the caller advances it to), so offline captures
//! expire exactly as live traffic would.
//!
//! Nothing here allocates after [`FlowTable::new`]: records go into a caller's vector whose
//! capacity the caller keeps.

use super::extra::Extra;
use super::key::{
    is_echo_request, PktInfo, E_LATER, K_ICMP_OTHER, TCP_ACK, TCP_FIN, TCP_RST, TCP_SYN,
};
use super::record::{EndReason, FlowRecord, RecordExtra, State};

const NIL: u32 = u32::MAX;

// TCP (and ICMP) state bits of an entry.
const SYN_A: u8 = 1; // SYN without ACK from side a (SYN_A << 1: from side b)
const SA_A: u8 = 4; // SYN+ACK from side a (<< 1: from side b)
const FIN_A: u8 = 16; // FIN from side a (<< 1: from side b)
const RST: u8 = 64;
const ESTAB: u8 = 128; // the initiator acknowledged the SYN-ACK
const ECHO_REQ: u8 = 1; // ICMP: a request seen
const ECHO_REP: u8 = 2; // ICMP: a reply seen

/// Timeouts and size of a table.
#[derive(Clone, Copy, Debug)]
pub struct TableConfig {
    /// Most flows held at once (preallocated).
    pub max_flows: u32,
    /// A flow with no packet for this long is reported and removed (ns).
    pub idle_ns: u64,
    /// A TCP flow closed by FIN both ways or RST is kept this long for stragglers (ns).
    pub linger_ns: u64,
    /// Status records every this often for flows that go on (ns; 0 = none).
    pub status_ns: u64,
}

impl Default for TableConfig {
    fn default() -> Self {
        TableConfig {
            max_flows: 1 << 18,
            idle_ns: 60_000_000_000,
            linger_ns: 5_000_000_000,
            status_ns: 60_000_000_000,
        }
    }
}

/// Counters of a table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TableStats {
    /// Flows created.
    pub flows: u64,
    /// Packets counted in flows.
    pub packets: u64,
    /// Bytes counted in flows.
    pub bytes: u64,
    /// Records emitted, by [`EndReason::index`].
    pub records: [u64; EndReason::COUNT],
    /// Flows removed early because the table was full.
    pub evicted: u64,
    /// Flows in the table now.
    pub active: u64,
    /// Most flows in the table at once.
    pub max_active: u64,
}

impl TableStats {
    /// Sum of two tables' counters (active and max_active are summed too).
    pub fn merged(&self, o: &TableStats) -> TableStats {
        let mut r = *self;
        r.flows += o.flows;
        r.packets += o.packets;
        r.bytes += o.bytes;
        for i in 0..EndReason::COUNT {
            r.records[i] += o.records[i];
        }
        r.evicted += o.evicted;
        r.active += o.active;
        r.max_active += o.max_active;
        r
    }
}

#[derive(Clone, Copy, Default)]
struct Entry {
    key: super::key::FlowKey,
    hash: u32,
    /// Next entry in the bucket chain, or in the free list.
    chain: u32,
    /// prev, next in the open or closed list.
    lru: [u32; 2],
    /// prev, next in the status list.
    st: [u32; 2],
    /// First and last packet of side a, side b (valid where that side counted packets).
    first: [u64; 2],
    last: [u64; 2],
    /// Table clock when the entry last moved to its list's tail.
    touched: u64,
    status_due: u64,
    /// Packets from side a, side b.
    pkts: [u64; 2],
    bytes: [u64; 2],
    tcp: [u8; 2],
    icmp_type: u8,
    icmp_code: u8,
    /// ICMP type and code of the first packet of side a, side b.
    icmp_side: [[u8; 2]; 2],
    bits: u8,
    encap: u8,
    init_b: bool,
    certain: bool,
    closed: bool,
    /// Counters were reset by a status record and no packet came since.
    fresh: bool,
    /// Ethernet address of side a, side b (from the flow's first packet: its source and its
    /// destination), when the link has them.
    mac: [[u8; 6]; 2],
    has_mac: bool,
    /// Smallest and largest TTL of side a's packets, side b's (min > max: none yet).
    ttl: [[u8; 2]; 2],
}

/// No TTL seen yet: min above max.
const NO_TTL: [[u8; 2]; 2] = [[u8::MAX, 0]; 2];

#[derive(Clone, Copy)]
struct List {
    head: u32,
    tail: u32,
}

const EMPTY: List = List {
    head: NIL,
    tail: NIL,
};
const OPEN: usize = 0;
const CLOSED: usize = 1;
const STATUS: usize = 2;

/// A bounded flow table owned by one thread.
pub struct FlowTable {
    entries: Vec<Entry>,
    buckets: Vec<u32>,
    mask: u32,
    free: u32,
    lists: [List; 3],
    now: u64,
    cfg: TableConfig,
    stats: TableStats,
}

impl FlowTable {
    /// A table with room for `cfg.max_flows` flows, all memory allocated now.
    pub fn new(cfg: TableConfig) -> FlowTable {
        let n = cfg.max_flows.clamp(1, NIL - 1);
        let nb = (n as usize).next_power_of_two().max(1024);
        // All the entries' memory is reserved now; pages are touched as flows first use them
        // (pushing within the capacity never reallocates).
        let entries = Vec::with_capacity(n as usize);
        FlowTable {
            entries,
            buckets: vec![NIL; nb],
            mask: nb as u32 - 1,
            free: NIL,
            lists: [EMPTY; 3],
            now: 0,
            cfg: TableConfig {
                max_flows: n,
                ..cfg
            },
            stats: TableStats::default(),
        }
    }

    /// Bytes of table memory per flow slot (entry plus its share of the bucket array).
    pub fn bytes_per_flow(&self) -> usize {
        std::mem::size_of::<Entry>()
            + self.buckets.len() * std::mem::size_of::<u32>() / self.cfg.max_flows.max(1) as usize
    }

    /// Total bytes of table memory (reserved at start).
    pub fn memory_bytes(&self) -> usize {
        self.cfg.max_flows as usize * std::mem::size_of::<Entry>()
            + self.buckets.len() * std::mem::size_of::<u32>()
    }

    /// The table's clock (ns since the epoch).
    pub fn now(&self) -> u64 {
        self.now
    }

    /// Moves the clock to `now` if that is later, without reporting anything (a thread that
    /// counts a share of a capture keeps the clock the whole capture has; see `threads`).
    #[inline]
    pub fn clock_to(&mut self, now: u64) {
        self.now = self.now.max(now);
    }

    /// Counters so far.
    pub fn stats(&self) -> TableStats {
        self.stats
    }

    /// Flows held now.
    pub fn len(&self) -> usize {
        self.stats.active as usize
    }

    /// Whether no flow is held.
    pub fn is_empty(&self) -> bool {
        self.stats.active == 0
    }

    #[inline(always)]
    fn links(&mut self, i: u32, list: usize) -> &mut [u32; 2] {
        let e = &mut self.entries[i as usize];
        if list == STATUS {
            &mut e.st
        } else {
            &mut e.lru
        }
    }

    #[inline(always)]
    fn push_back(&mut self, list: usize, i: u32) {
        let tail = self.lists[list].tail;
        *self.links(i, list) = [tail, NIL];
        if tail == NIL {
            self.lists[list].head = i;
        } else {
            self.links(tail, list)[1] = i;
        }
        self.lists[list].tail = i;
    }

    #[inline(always)]
    fn unlink(&mut self, list: usize, i: u32) {
        let [p, n] = *self.links(i, list);
        if p == NIL {
            self.lists[list].head = n;
        } else {
            self.links(p, list)[1] = n;
        }
        if n == NIL {
            self.lists[list].tail = p;
        } else {
            self.links(n, list)[0] = p;
        }
    }

    #[inline(always)]
    fn lookup(&self, h: u32, key: &super::key::FlowKey) -> Option<u32> {
        let mut i = self.buckets[(h & self.mask) as usize];
        while i != NIL {
            let e = &self.entries[i as usize];
            if e.hash == h && e.key == *key {
                return Some(i);
            }
            i = e.chain;
        }
        None
    }

    fn unchain(&mut self, i: u32) {
        let b = (self.entries[i as usize].hash & self.mask) as usize;
        let next = self.entries[i as usize].chain;
        if self.buckets[b] == i {
            self.buckets[b] = next;
            return;
        }
        let mut j = self.buckets[b];
        while j != NIL {
            let c = self.entries[j as usize].chain;
            if c == i {
                self.entries[j as usize].chain = next;
                return;
            }
            j = c;
        }
    }

    /// Builds the record of entry `i` (None when it counted nothing since the last record).
    fn record(&self, i: u32, reason: EndReason) -> Option<FlowRecord> {
        let e = &self.entries[i as usize];
        if e.fresh || e.pkts[0] + e.pkts[1] == 0 {
            return None;
        }
        let s = e.init_b as usize;
        let r = 1 - s;
        let (src, dst, sp, dp) = if s == 0 {
            (e.key.a, e.key.b, e.key.pa, e.key.pb)
        } else {
            (e.key.b, e.key.a, e.key.pb, e.key.pa)
        };
        let icmp = e.key.proto == 1 || e.key.proto == 58;
        let (sport, dport) = if icmp {
            if e.key.flags & K_ICMP_OTHER != 0 {
                (e.icmp_type as u16, e.icmp_code as u16)
            } else {
                (e.icmp_type as u16, dp)
            }
        } else {
            (sp, dp)
        };
        // Each side's times count where it sent packets; the flow spans both.
        let side_ns = [s, r].map(|k| {
            if e.pkts[k] > 0 {
                [e.first[k], e.last[k]]
            } else {
                [0, 0]
            }
        });
        let start_ns = match (e.pkts[s] > 0, e.pkts[r] > 0) {
            (true, true) => e.first[s].min(e.first[r]),
            (true, false) => e.first[s],
            _ => e.first[r],
        };
        let last_ns = side_ns[0][1].max(side_ns[1][1]);
        Some(FlowRecord {
            start_ns,
            last_ns,
            src,
            dst,
            sport,
            dport,
            proto: e.key.proto,
            v6: e.key.is_v6(),
            vlan: e.key.vlan,
            src_pkts: e.pkts[s],
            dst_pkts: e.pkts[r],
            src_bytes: e.bytes[s],
            dst_bytes: e.bytes[r],
            src_tcp_flags: e.tcp[s],
            dst_tcp_flags: e.tcp[r],
            icmp_type: e.icmp_type,
            icmp_code: e.icmp_code,
            state: state(e),
            reason,
            dir_certain: e.certain,
            encap: e.encap,
            side_ns,
            side_icmp: [e.icmp_side[s], e.icmp_side[r]],
            extra: RecordExtra {
                src_mac: e.mac[s],
                dst_mac: e.mac[r],
                has_mac: e.has_mac,
                src_ttl: e.ttl[s],
                dst_ttl: e.ttl[r],
            },
        })
    }

    fn emit(&mut self, i: u32, reason: EndReason, out: &mut Vec<FlowRecord>) {
        if let Some(r) = self.record(i, reason) {
            self.stats.records[reason.index()] += 1;
            out.push(r);
        }
    }

    /// Reports entry `i` and removes it.
    fn finish(&mut self, i: u32, reason: EndReason, out: &mut Vec<FlowRecord>) {
        self.emit(i, reason, out);
        if reason == EndReason::Resources {
            self.stats.evicted += 1;
        }
        let closed = self.entries[i as usize].closed;
        self.unlink(if closed { CLOSED } else { OPEN }, i);
        if self.cfg.status_ns > 0 {
            self.unlink(STATUS, i);
        }
        self.unchain(i);
        self.entries[i as usize].chain = self.free;
        self.free = i;
        self.stats.active -= 1;
    }

    /// Emits a status record of entry `i` and starts its next interval.
    fn status(&mut self, i: u32, out: &mut Vec<FlowRecord>) {
        self.emit(i, EndReason::Active, out);
        let now = self.now;
        let due = now + self.cfg.status_ns;
        let e = &mut self.entries[i as usize];
        e.pkts = [0; 2];
        e.bytes = [0; 2];
        e.tcp = [0; 2];
        e.ttl = NO_TTL;
        e.fresh = true;
        e.status_due = due;
        self.unlink(STATUS, i);
        self.push_back(STATUS, i);
    }

    /// Advances the clock to `now` (if later) and reports every flow whose time has come.
    pub fn advance(&mut self, now: u64, out: &mut Vec<FlowRecord>) {
        self.now = self.now.max(now);
        let now = self.now;
        loop {
            let h = self.lists[OPEN].head;
            if h == NIL || self.entries[h as usize].touched + self.cfg.idle_ns > now {
                break;
            }
            self.finish(h, EndReason::Idle, out);
        }
        loop {
            let h = self.lists[CLOSED].head;
            if h == NIL || self.entries[h as usize].touched + self.cfg.linger_ns > now {
                break;
            }
            self.finish(h, EndReason::End, out);
        }
        if self.cfg.status_ns > 0 {
            loop {
                let h = self.lists[STATUS].head;
                if h == NIL || self.entries[h as usize].status_due > now {
                    break;
                }
                self.status(h, out);
            }
        }
    }

    /// Reports and removes every flow (end of input, shutdown).
    pub fn flush(&mut self, out: &mut Vec<FlowRecord>) {
        for list in [OPEN, CLOSED] {
            while self.lists[list].head != NIL {
                let h = self.lists[list].head;
                self.finish(h, EndReason::Forced, out);
            }
        }
    }

    fn alloc(&mut self, out: &mut Vec<FlowRecord>) -> u32 {
        if self.free == NIL && self.entries.len() < self.cfg.max_flows as usize {
            self.entries.push(Entry::default());
            return self.entries.len() as u32 - 1;
        }
        if self.free == NIL {
            // Full: a closed flow is done anyway; otherwise the least recently seen goes.
            let c = self.lists[CLOSED].head;
            if c != NIL {
                self.finish(c, EndReason::End, out);
            } else {
                let o = self.lists[OPEN].head;
                self.finish(o, EndReason::Resources, out);
            }
        }
        let i = self.free;
        self.free = self.entries[i as usize].chain;
        i
    }

    /// Loads the bucket head for hash `h` (a batch loads all its heads first, so that their cache
    /// misses overlap); returns it for [`FlowTable::warm_entry`].
    #[inline(always)]
    pub fn warm_bucket(&self, h: u32) -> u32 {
        self.buckets[(h & self.mask) as usize]
    }

    /// Loads the first entry of a bucket chain (see [`FlowTable::warm_bucket`]).
    #[inline(always)]
    pub fn warm_entry(&self, i: u32) -> u32 {
        match self.entries.get(i as usize) {
            Some(e) => e.hash,
            None => 0,
        }
    }

    /// Counts one packet; may emit records (an expired or reused flow, a due status record, an
    /// eviction).
    #[inline]
    pub fn packet(&mut self, p: &PktInfo, ts: u64, wire_len: u32, out: &mut Vec<FlowRecord>) {
        self.packet_hashed(p, p.key.hash(), ts, wire_len, out)
    }

    /// [`FlowTable::packet`] with the key's hash already computed.
    #[inline]
    pub fn packet_hashed(
        &mut self,
        p: &PktInfo,
        h: u32,
        ts: u64,
        wire_len: u32,
        out: &mut Vec<FlowRecord>,
    ) {
        self.packet_extra(p, h, ts, wire_len, &Extra::default(), out)
    }

    /// [`FlowTable::packet_hashed`] with the packet's Ethernet addresses and TTL (`x`).
    #[inline]
    pub fn packet_extra(
        &mut self,
        p: &PktInfo,
        h: u32,
        ts: u64,
        wire_len: u32,
        x: &Extra,
        out: &mut Vec<FlowRecord>,
    ) {
        self.now = self.now.max(ts);
        let now = self.now;
        let side = (!p.from_a) as usize;
        let tcp = p.key.proto == 6;
        let syn_only = tcp && p.tcp_flags & (TCP_SYN | TCP_ACK) == TCP_SYN;
        let mut found = self.lookup(h, &p.key);
        if let Some(i) = found {
            let e = &self.entries[i as usize];
            // A new SYN after a FIN or RST opens a new connection on the same ports (as Argus).
            let ending = e.closed || e.bits & (FIN_A | FIN_A << 1 | RST) != 0;
            if (e.closed && now >= e.touched + self.cfg.linger_ns) || (syn_only && ending) {
                self.finish(i, EndReason::End, out);
                found = None;
            } else if !e.closed && now >= e.touched + self.cfg.idle_ns {
                self.finish(i, EndReason::Idle, out);
                found = None;
            } else if self.cfg.status_ns > 0 && e.status_due <= now {
                self.status(i, out);
            }
        }
        let i = match found {
            Some(i) => {
                let list = if self.entries[i as usize].closed {
                    CLOSED
                } else {
                    OPEN
                };
                self.unlink(list, i);
                self.push_back(list, i);
                i
            }
            None => {
                let i = self.alloc(out);
                let due = now + self.cfg.status_ns;
                let e = &mut self.entries[i as usize];
                *e = Entry {
                    key: p.key,
                    hash: h,
                    chain: NIL,
                    status_due: due,
                    init_b: side == 1,
                    certain: !tcp,
                    fresh: false,
                    icmp_type: p.icmp_type,
                    icmp_code: p.icmp_code,
                    ttl: NO_TTL,
                    ..Entry::default()
                };
                if x.has_mac {
                    e.mac[side] = x.smac;
                    e.mac[1 - side] = x.dmac;
                    e.has_mac = true;
                }
                let b = (h & self.mask) as usize;
                e.chain = self.buckets[b];
                self.buckets[b] = i;
                self.push_back(OPEN, i);
                if self.cfg.status_ns > 0 {
                    self.push_back(STATUS, i);
                }
                self.stats.flows += 1;
                self.stats.active += 1;
                self.stats.max_active = self.stats.max_active.max(self.stats.active);
                i
            }
        };
        self.stats.packets += 1;
        self.stats.bytes += wire_len as u64;
        let e = &mut self.entries[i as usize];
        e.touched = now;
        e.fresh = false;
        if e.pkts[side] == 0 {
            // This side's first packet (of the flow, or since the last status record).
            e.first[side] = ts;
            e.last[side] = ts;
            e.icmp_side[side] = [p.icmp_type, p.icmp_code];
        } else {
            e.first[side] = e.first[side].min(ts);
            e.last[side] = e.last[side].max(ts);
        }
        e.pkts[side] += 1;
        e.bytes[side] += wire_len as u64;
        if x.has_ttl {
            let t = &mut e.ttl[side];
            t[0] = t[0].min(x.ttl);
            t[1] = t[1].max(x.ttl);
        }
        e.encap |= p.encap & !E_LATER;
        let whole = p.encap & E_LATER == 0;
        if tcp && whole {
            let f = p.tcp_flags;
            e.tcp[side] |= f;
            let sh = side as u8;
            if syn_only {
                e.bits |= SYN_A << sh;
                if !e.certain {
                    e.init_b = side == 1;
                    e.certain = true;
                }
            } else if f & (TCP_SYN | TCP_ACK) == (TCP_SYN | TCP_ACK) {
                e.bits |= SA_A << sh;
                if !e.certain {
                    e.init_b = side == 0;
                    e.certain = true;
                }
            } else if f & TCP_ACK != 0
                && (e.init_b as usize == side)
                && e.bits & (SA_A << (1 - sh)) != 0
            {
                e.bits |= ESTAB;
            }
            if f & TCP_FIN != 0 {
                e.bits |= FIN_A << sh;
            }
            if f & TCP_RST != 0 {
                e.bits |= RST;
            }
            let done = e.bits & RST != 0 || e.bits & (FIN_A | FIN_A << 1) == (FIN_A | FIN_A << 1);
            if done && !e.closed {
                e.closed = true;
                self.unlink(OPEN, i);
                self.push_back(CLOSED, i);
            }
        } else if whole && (p.key.proto == 1 || p.key.proto == 58) {
            if is_echo_request(p.key.proto, p.icmp_type) {
                if e.bits & ECHO_REQ == 0 && e.pkts[1 - side] > 0 && e.bits & ECHO_REP != 0 {
                    // The capture began with replies: the requester is the initiator.
                    e.init_b = side == 1;
                    e.icmp_type = p.icmp_type;
                }
                e.bits |= ECHO_REQ;
            } else if p.key.flags & K_ICMP_OTHER == 0 {
                e.bits |= ECHO_REP;
            }
        }
    }
}

fn state(e: &Entry) -> State {
    let both = e.pkts[0] > 0 && e.pkts[1] > 0 || e.fresh;
    match e.key.proto {
        6 => {
            if e.bits & RST != 0 {
                State::Rst
            } else if e.bits & (FIN_A | FIN_A << 1) != 0 {
                State::Fin
            } else if e.bits & ESTAB != 0 {
                State::Con
            } else if e.bits & (SA_A | SA_A << 1) != 0 {
                State::Acc
            } else if e.bits & (SYN_A | SYN_A << 1) != 0 {
                State::Req
            } else if both {
                State::Con
            } else {
                State::Int
            }
        }
        1 | 58 => {
            let v6 = e.key.proto == 58;
            if e.key.flags & K_ICMP_OTHER == 0 {
                if e.bits & ECHO_REP != 0 {
                    State::Ecr
                } else {
                    State::Eco
                }
            } else if (!v6 && e.icmp_type == 3) || (v6 && e.icmp_type == 1) {
                State::Unr
            } else if (!v6 && e.icmp_type == 11) || (v6 && e.icmp_type == 3) {
                State::Txd
            } else if both {
                State::Con
            } else {
                State::Int
            }
        }
        _ => {
            if both {
                State::Con
            } else {
                State::Int
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::super::key::tests::eth_v4;
    use super::super::key::{extract, TCP_ACK, TCP_FIN, TCP_PSH, TCP_RST, TCP_SYN};
    use super::*;
    use crate::port::LinkType;

    const S: u64 = 1_000_000_000;
    const A: [u8; 4] = [10, 0, 0, 9];
    const B: [u8; 4] = [10, 0, 0, 1];

    fn tcp(t: &mut FlowTable, from_a: bool, flags: u8, ts: u64, out: &mut Vec<FlowRecord>) {
        let f = if from_a {
            eth_v4(A, B, 6, 40000, 80, flags, 10)
        } else {
            eth_v4(B, A, 6, 80, 40000, flags, 10)
        };
        let p = extract(&f, LinkType::ETHERNET).unwrap();
        t.packet(&p, ts, f.len() as u32, out);
    }

    fn udp(t: &mut FlowTable, sport: u16, ts: u64, out: &mut Vec<FlowRecord>) {
        let f = eth_v4(A, B, 17, sport, 53, 0, 20);
        let p = extract(&f, LinkType::ETHERNET).unwrap();
        t.packet(&p, ts, f.len() as u32, out);
    }

    #[test]
    fn tcp_connection_initiator_state_and_end() {
        let mut t = FlowTable::new(TableConfig {
            max_flows: 16,
            ..Default::default()
        });
        let mut out = Vec::new();
        // The capture begins after the SYN: the first packet seen is the server's SYN-ACK; the
        // initiator must still be A (10.0.0.9, the higher address).
        tcp(&mut t, false, TCP_SYN | TCP_ACK, S, &mut out);
        tcp(&mut t, true, TCP_ACK, S + 1, &mut out);
        tcp(&mut t, true, TCP_PSH | TCP_ACK, S + 2, &mut out);
        tcp(&mut t, false, TCP_ACK, S + 3, &mut out);
        tcp(&mut t, true, TCP_FIN | TCP_ACK, S + 4, &mut out);
        tcp(&mut t, false, TCP_FIN | TCP_ACK, S + 5, &mut out);
        tcp(&mut t, true, TCP_ACK, S + 6, &mut out);
        assert!(out.is_empty());
        assert_eq!(t.len(), 1);
        // Linger 5 s, then the record.
        t.advance(S + 6 + 4 * S, &mut out);
        assert!(out.is_empty());
        t.advance(S + 6 + 5 * S, &mut out);
        assert_eq!(out.len(), 1);
        let r = out[0];
        assert_eq!(r.src_ip().to_string(), "10.0.0.9");
        assert_eq!((r.sport, r.dport), (40000, 80));
        assert_eq!((r.src_pkts, r.dst_pkts), (4, 3));
        assert_eq!(r.src_bytes, 4 * 64);
        assert_eq!(r.state, State::Fin);
        assert_eq!(r.reason, EndReason::End);
        assert_eq!(r.dir(), "<->");
        assert_eq!(r.start_ns, S);
        assert_eq!(r.last_ns, S + 6);
        assert!(t.is_empty());
        assert_eq!(t.stats().records[EndReason::End.index()], 1);
    }

    /// RFC 7012's uniflows: each direction keeps its own first and last packet and its own
    /// ICMP type (an echo flow's replies are 0.0, its requests 8.0), and a status record's
    /// next interval starts each side afresh.
    #[test]
    fn each_direction_keeps_its_own_times_and_icmp_type() {
        let mut t = FlowTable::new(TableConfig {
            max_flows: 16,
            status_ns: 10 * S,
            ..Default::default()
        });
        let mut out = Vec::new();
        let pk = |t: &mut FlowTable, f: Vec<u8>, ts: u64, out: &mut Vec<FlowRecord>| {
            let p = extract(&f, LinkType::ETHERNET).unwrap();
            t.packet(&p, ts, f.len() as u32, out);
        };
        // UDP: query at S, the reply at S + 5, another query at S + 3.
        pk(&mut t, eth_v4(A, B, 17, 5353, 53, 0, 4), S, &mut out);
        pk(&mut t, eth_v4(B, A, 17, 53, 5353, 0, 4), S + 5, &mut out);
        pk(&mut t, eth_v4(A, B, 17, 5353, 53, 0, 4), S + 3, &mut out);
        // ICMP echo: request at S + 1, reply at S + 2.
        pk(&mut t, eth_v4(A, B, 1, 8, 0x1234, 0, 8), S + 1, &mut out);
        pk(&mut t, eth_v4(B, A, 1, 0, 0x1234, 0, 8), S + 2, &mut out);
        t.flush(&mut out);
        let udp = out.iter().find(|r| r.proto == 17).unwrap();
        assert_eq!((udp.start_ns, udp.last_ns), (S, S + 5));
        assert_eq!(udp.side_ns, [[S, S + 3], [S + 5, S + 5]]);
        let icmp = out.iter().find(|r| r.proto == 1).unwrap();
        assert_eq!(icmp.side_icmp, [[8, 0], [0, 0]]);
        assert_eq!(icmp.side_ns, [[S + 1, S + 1], [S + 2, S + 2]]);
        assert_eq!((icmp.icmp_type, icmp.src_pkts, icmp.dst_pkts), (8, 1, 1));
        // A status record, then only the responder speaks: the initiator's side is empty.
        out.clear();
        pk(&mut t, eth_v4(A, B, 17, 7000, 53, 0, 4), 100 * S, &mut out);
        t.advance(110 * S, &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].side_ns, [[100 * S, 100 * S], [0, 0]]);
        out.clear();
        pk(&mut t, eth_v4(B, A, 17, 53, 7000, 0, 4), 112 * S, &mut out);
        t.flush(&mut out);
        assert_eq!(out.len(), 1);
        let r = out[0];
        assert_eq!((r.src_pkts, r.dst_pkts), (0, 1));
        assert_eq!(r.side_ns, [[0, 0], [112 * S, 112 * S]]);
        assert_eq!((r.start_ns, r.last_ns), (112 * S, 112 * S));
    }

    #[test]
    fn a_record_gives_back_its_flow_key_whichever_side_began() {
        // (frame of the first packet, frame of the answer): TCP both ways round, UDP, ICMP echo
        // begun by the reply, ICMP unreachable.
        let mut unr = eth_v4(A, B, 1, 3, 0, 0, 8);
        unr[14 + 21] = 1; // code 1
        let cases = [
            eth_v4(A, B, 6, 40000, 80, TCP_SYN, 0),
            eth_v4(B, A, 6, 80, 40000, TCP_SYN, 0),
            eth_v4(B, A, 17, 53, 5353, 0, 4),
            eth_v4(A, B, 17, 5353, 53, 0, 4),
            eth_v4(B, A, 1, 0, 0x1234, 0, 8),
            eth_v4(A, B, 1, 8, 0x1234, 0, 8),
            unr,
        ];
        for f in cases {
            let mut t = FlowTable::new(TableConfig {
                max_flows: 16,
                ..Default::default()
            });
            let mut out = Vec::new();
            let p = extract(&f, LinkType::ETHERNET).unwrap();
            t.packet(&p, S, f.len() as u32, &mut out);
            t.flush(&mut out);
            assert_eq!(out.len(), 1);
            assert_eq!(out[0].key(), p.key, "{:?}", out[0]);
        }
    }

    #[test]
    fn new_syn_after_close_starts_a_new_flow() {
        let mut t = FlowTable::new(TableConfig {
            max_flows: 16,
            ..Default::default()
        });
        let mut out = Vec::new();
        tcp(&mut t, true, TCP_SYN, S, &mut out);
        tcp(&mut t, false, TCP_RST | TCP_ACK, S + 1, &mut out);
        tcp(&mut t, true, TCP_SYN, S + 2, &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].state, State::Rst);
        assert_eq!(out[0].reason, EndReason::End);
        t.flush(&mut out);
        assert_eq!(out.len(), 2);
        assert_eq!(out[1].state, State::Req);
        assert_eq!(out[1].dir(), "->");
        assert_eq!(out[1].reason, EndReason::Forced);
    }

    #[test]
    fn idle_expiry_is_ordered_and_status_records_split_long_flows() {
        let cfg = TableConfig {
            max_flows: 64,
            idle_ns: 10 * S,
            status_ns: 4 * S,
            ..Default::default()
        };
        let mut t = FlowTable::new(cfg);
        let mut out = Vec::new();
        // flow 1 sends every second for 10 s; flow 2 sends once at 0.
        udp(&mut t, 2, 0, &mut out);
        for k in 0..10 {
            udp(&mut t, 1, k * S, &mut out);
            t.advance(k * S, &mut out);
        }
        // status at 4 s and 8 s for flow 1 (flow 2 has no packet after its first interval)
        let status: Vec<_> = out
            .iter()
            .filter(|r| r.reason == EndReason::Active)
            .collect();
        assert_eq!(status.len(), 3, "{out:?}");
        assert_eq!(status.iter().map(|r| r.src_pkts).sum::<u64>(), 9);
        t.advance(10 * S, &mut out);
        let idle: Vec<_> = out.iter().filter(|r| r.reason == EndReason::Idle).collect();
        assert!(
            idle.is_empty(),
            "flow 2 was reported in its status record: {out:?}"
        );
        t.advance(19 * S + 1, &mut out);
        t.flush(&mut out);
        let total: u64 = out
            .iter()
            .filter(|r| r.sport == 1)
            .map(|r| r.src_pkts)
            .sum();
        assert_eq!(total, 10);
        assert!(out.iter().all(|r| r.src_pkts + r.dst_pkts > 0));
        assert_eq!(out.iter().filter(|r| r.sport == 2).count(), 1);
    }

    #[test]
    fn full_table_evicts_least_recent_and_counts_it() {
        let mut t = FlowTable::new(TableConfig {
            max_flows: 4,
            status_ns: 0,
            ..Default::default()
        });
        let mut out = Vec::new();
        for p in 0..4u16 {
            udp(&mut t, p, p as u64, &mut out);
        }
        udp(&mut t, 0, 10, &mut out); // flow 0 is now the most recent
        udp(&mut t, 9, 11, &mut out); // evicts flow 1
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].sport, 1);
        assert_eq!(out[0].reason, EndReason::Resources);
        assert_eq!(t.stats().evicted, 1);
        assert_eq!(t.len(), 4);
        t.flush(&mut out);
        assert_eq!(out.len(), 5);
        assert_eq!(t.stats().packets, 6);
        let big = FlowTable::new(TableConfig {
            max_flows: 1 << 16,
            ..Default::default()
        });
        assert!(big.bytes_per_flow() <= 200, "{}", big.bytes_per_flow());
    }

    #[test]
    fn many_flows_and_chains_stay_consistent() {
        let mut t = FlowTable::new(TableConfig {
            max_flows: 5000,
            idle_ns: 100,
            status_ns: 0,
            ..Default::default()
        });
        let mut out = Vec::new();
        for round in 0..3u64 {
            for p in 0..6000u16 {
                udp(&mut t, p, round * 1000 + (p as u64 / 100), &mut out);
            }
        }
        t.flush(&mut out);
        let pkts: u64 = out.iter().map(|r| r.src_pkts + r.dst_pkts).sum();
        assert_eq!(pkts, 18000);
        assert!(t.is_empty());
        let s = t.stats();
        assert_eq!(s.records.iter().sum::<u64>(), out.len() as u64);
    }
}

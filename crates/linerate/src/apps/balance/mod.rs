//! `balance`: the cluster master (zbalance_ipc / pfdnacluster_master) and its consumer threads
//! (pfdnacluster_multithread).
//!
//! The master loop has l2fwd's shape: receive a batch from the input, decide each packet's
//! destination queues (one bit per queue in a 64-bit mask), hand the batch to the cluster
//! [`Master`], which publishes descriptors of the segment frames the packets are in (an input
//! that reads in place was lent those frames before the receive; other inputs' packets are
//! copied once); every ~100 ms check consumers; every interval take a snapshot for the printer.
//!
//! Applications: `-n 2,1` makes application 0 with queues 0 and 1 and application 1 with queue 2.
//! Every application sees every packet (a full copy); inside an application the mode picks one
//! queue. `fanout` sends every packet to every queue.

pub mod lua;
pub mod source;

use crate::cluster::{ClusterPort, ClusterStats, Master};
use crate::filter::Filter;
use crate::mem::{Batch, BATCH};
use crate::port::{LinkType, Port, PortError};
use crate::time::mono_ns;
use crate::wire;
pub use crate::wire::Tunnels;
use crossbeam_utils::CachePadded;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

pub use crate::apps::worker::{Backoff, Ended};
use crate::apps::worker::{Limits, Ticker};

/// How the master picks queues.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Packets go to the queues of each application in turn.
    RoundRobin,
    /// Every packet goes to every queue.
    Fanout,
    /// Symmetric hash of the source and destination IP addresses (both directions alike).
    Ip,
    /// Symmetric hash of the source and destination MAC addresses.
    Mac,
    /// Hash of the IP protocol number.
    Proto,
    /// Symmetric hash of addresses, ports and protocol.
    FiveTuple,
    /// RSS Toeplitz hash with a symmetric key (0x6d5a repeated) over addresses and ports.
    Toeplitz,
    /// Hash of the outermost VLAN id.
    Vlan,
    /// Symmetric IP hash of the packet inside a GRE tunnel (outer header when not GRE).
    GreInner,
    /// Symmetric IP hash of the packet inside a GTP-U tunnel (outer header when not GTP-U).
    GtpInner,
    /// A Lua function decides (`-m lua:FILE`, see [`lua`]).
    Lua,
}

impl Mode {
    /// All modes with their names.
    pub const NAMES: [(&'static str, Mode); 10] = [
        ("round-robin", Mode::RoundRobin),
        ("fanout", Mode::Fanout),
        ("ip", Mode::Ip),
        ("mac", Mode::Mac),
        ("proto", Mode::Proto),
        ("5tuple", Mode::FiveTuple),
        ("toeplitz", Mode::Toeplitz),
        ("vlan", Mode::Vlan),
        ("gre", Mode::GreInner),
        ("gtp", Mode::GtpInner),
    ];

    /// The mode's name as `-m` takes it.
    pub fn name(self) -> &'static str {
        if self == Mode::Lua {
            return "lua";
        }
        Self::NAMES
            .iter()
            .find(|(_, m)| *m == self)
            .map_or("?", |(n, _)| n)
    }

    /// Whether the mode computes a hash of the packet.
    pub fn hashes(self) -> bool {
        !matches!(self, Mode::RoundRobin | Mode::Fanout | Mode::Lua)
    }
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Mode, String> {
        let alias = match s {
            "rr" | "0" => "round-robin",
            "fan-out" | "2" => "fanout",
            "1" => "ip",
            "5-tuple" | "five-tuple" => "5tuple",
            "rss" => "toeplitz",
            "gre-inner" => "gre",
            "gtp-inner" => "gtp",
            o => o,
        };
        Self::NAMES
            .iter()
            .find(|(n, _)| *n == alias)
            .map(|(_, m)| *m)
            .ok_or_else(|| {
                format!(
                    "unknown mode '{s}'; modes: {}",
                    Self::NAMES.map(|(n, _)| n).join(", ")
                )
            })
    }
}

/// Decides the destination queues of packets.
#[derive(Debug)]
pub struct Distributor {
    mode: Mode,
    link: LinkType,
    /// (first queue, number of queues) of each application.
    apps: Vec<(u32, u32)>,
    rr: Vec<u32>,
    all: u64,
    script: Option<lua::LuaScript>,
    error: Option<lua::LuaError>,
    tunnels: Tunnels,
}

impl Distributor {
    /// A distributor for applications of `apps[a]` queues each.
    pub fn new(mode: Mode, apps: &[u32], link: LinkType) -> Distributor {
        let mut first = 0;
        let apps: Vec<(u32, u32)> = apps
            .iter()
            .map(|&n| {
                let a = (first, n.max(1));
                first += n.max(1);
                a
            })
            .collect();
        let all = if first >= 64 {
            u64::MAX
        } else {
            (1u64 << first) - 1
        };
        Distributor {
            mode,
            link,
            rr: vec![0; apps.len()],
            apps,
            all,
            script: None,
            error: None,
            tunnels: Tunnels::Outer,
        }
    }

    /// Which header of a tunnel (GRE, IPIP, 6in4, VXLAN) the `ip`, `5tuple`, `toeplitz` and
    /// `proto` modes hash: the outer one (default) or the packet inside (`--tunnels inner`).
    pub fn set_tunnels(&mut self, tunnels: Tunnels) {
        self.tunnels = tunnels;
    }

    /// A distributor whose decisions a Lua script makes (`-m lua:FILE`).
    pub fn with_script(script: lua::LuaScript, apps: &[u32], link: LinkType) -> Distributor {
        let mut d = Self::new(Mode::Lua, apps, link);
        d.script = Some(script);
        d
    }

    /// The error the script raised, if it failed (its batch was dropped as filtered).
    pub fn take_error(&mut self) -> Option<lua::LuaError> {
        self.error.take()
    }

    /// The mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The hash the mode computes for a packet (0 for the modes that do not hash).
    #[inline]
    pub fn hash(&self, data: &[u8]) -> u32 {
        if self.tunnels == Tunnels::Inner {
            if let Some(h) = hash_inner(self.mode, data, self.link) {
                return h;
            }
        }
        hash(self.mode, data, self.link)
    }

    /// Fills `out[i]` with the destination mask of packet `i` of `batch` (0: filtered out).
    #[inline]
    ///
    /// Hashing modes also store each packet's hash in its descriptor (`Desc::hash`), which
    /// consumers receive.
    pub fn masks(&mut self, batch: &mut Batch, filter: Option<&Filter>, out: &mut [u64; BATCH]) {
        let n = batch.len().min(BATCH);
        // Bit i set: packet i passed the filter.
        let mut keep = if n == 64 { u64::MAX } else { (1u64 << n) - 1 };
        if let Some(f) = filter {
            for i in 0..n {
                if !f.matches_wire(batch.data(i), batch.descs()[i].filter_len()) {
                    keep &= !(1 << i);
                }
            }
        }
        match self.mode {
            Mode::Fanout => out[..n].fill(self.all),
            Mode::Lua => {
                let r = match self.script.as_mut() {
                    Some(s) => s.decide(batch, keep, out),
                    None => Err(lua::LuaError::Lua("no script loaded".into())),
                };
                if let Err(e) = r {
                    out[..n].fill(0);
                    self.error.get_or_insert(e);
                }
            }
            Mode::RoundRobin => {
                for (i, o) in out[..n].iter_mut().enumerate() {
                    if keep & (1 << i) == 0 {
                        continue;
                    }
                    let mut m = 0u64;
                    for (a, &(first, nq)) in self.apps.iter().enumerate() {
                        let r = &mut self.rr[a];
                        m |= 1 << (first + *r);
                        *r += 1;
                        if *r == nq {
                            *r = 0;
                        }
                    }
                    *o = m;
                }
            }
            mode => {
                // Hash the whole batch first (one loop per mode, no per-packet dispatch), then
                // turn hashes into queue bits application by application.
                let mut hs = [0u32; BATCH];
                hash_batch(mode, self.link, batch, keep, &mut hs[..n]);
                if self.tunnels == Tunnels::Inner {
                    // Tunnelled packets again, by the packet inside (others keep their hash).
                    for (i, h) in hs[..n].iter_mut().enumerate() {
                        if keep >> i & 1 != 0 {
                            if let Some(x) = hash_inner(mode, batch.data(i), self.link) {
                                *h = x;
                            }
                        }
                    }
                }
                for (d, &h) in batch.descs_mut().iter_mut().zip(&hs[..n]) {
                    d.hash = h;
                    d.flags &= !crate::mem::Desc::F_ORIG_SHORT;
                }
                out[..n].fill(0);
                for &(first, nq) in &self.apps {
                    queue_bits(&mut out[..n], &hs[..n], first, nq);
                }
            }
        }
        if keep != u64::MAX {
            for (i, o) in out[..n].iter_mut().enumerate() {
                if keep & (1 << i) == 0 {
                    *o = 0;
                }
            }
        }
    }
}

/// The hash `mode` computes over `data` (a packet of link type `link`), from the one-pass header
/// parser ([`crate::wire::parse()`]); packets without the headers a mode needs hash to 0 (the
/// application's first queue). Exactly:
/// - `ip`: [`wire::hash_ip_symmetric`]: MurmurHash3 of the source address XOR that of the
///   destination (IPv4 or IPv6, after any VLAN tags): both directions alike;
/// - `mac`: [`wire::hash_mac`]: symmetric over source and destination MAC;
/// - `proto`: [`wire::hash_proto`]: the upper-layer protocol number (after IPv6 extension headers);
/// - `5tuple`: [`wire::hash_5tuple_symmetric`]: addresses, ports (TCP, UDP, SCTP; 0 for other
///   protocols and for fragments, so all fragments of a datagram stay together) and protocol,
///   symmetric;
/// - `toeplitz`: [`wire::hash_toeplitz_symmetric`]: the RSS Toeplitz hash with the key 0x6d5a
///   repeated (symmetric) over addresses and ports, as a NIC with that key computes it;
/// - `vlan`: [`wire::hash_vlan`]: the outermost VLAN id (0 untagged);
/// - `gre` / `gtp`: the `ip` hash of the packet inside a GRE (IP protocol 47) or GTP-U (UDP port
///   2152) tunnel, so traffic of one inner conversation (one subscriber for GTP) stays together;
///   packets not in such a tunnel use the `ip` hash of their outer header.
pub fn hash(mode: Mode, data: &[u8], link: LinkType) -> u32 {
    if !mode.hashes() {
        return 0;
    }
    if link == LinkType::ETHERNET {
        let fast = match mode {
            Mode::Ip => wire::hash_ip_symmetric_eth_v4(data),
            Mode::FiveTuple => wire::hash_5tuple_symmetric_eth_v4(data),
            Mode::Toeplitz => wire::hash_toeplitz_symmetric_eth_v4(data),
            _ => None,
        };
        if let Some(h) = fast {
            return h;
        }
    }
    hash_parsed(mode, data, link)
}

/// Whether an untagged Ethernet/IPv4 frame cannot be a tunnel [`hash_inner`] reads (so the
/// others cost a few loads, not a parse).
#[inline(always)]
fn surely_not_tunnel(data: &[u8], link: LinkType) -> bool {
    if link != LinkType::ETHERNET || data.get(12..14) != Some(&[0x08, 0x00][..]) {
        return false;
    }
    let (Some(&vh), Some(&pr)) = (data.get(14), data.get(23)) else {
        return true;
    };
    match pr {
        wire::proto::GRE | wire::proto::IPIP | wire::proto::IPV6_IN_IP => false,
        wire::proto::UDP => {
            let dport = 14 + usize::from(vh & 0x0f) * 4 + 2;
            data.get(dport..dport + 2) != Some(&wire::parse::VXLAN_PORT.to_be_bytes()[..])
        }
        _ => true,
    }
}

/// `mode`'s hash of the packet inside a GRE, IPIP, 6in4 or VXLAN tunnel (`--tunnels inner`), or
/// None when `data` is not such a tunnel (or the mode does not look at IP headers).
fn hash_inner(mode: Mode, data: &[u8], link: LinkType) -> Option<u32> {
    if !matches!(
        mode,
        Mode::Ip | Mode::FiveTuple | Mode::Toeplitz | Mode::Proto
    ) || surely_not_tunnel(data, link)
    {
        return None;
    }
    let (outer, base, _) = wire::parse_deep(data, link).ok()?;
    let i = wire::tunnel_inner(data.get(base..).unwrap_or_default(), &outer)?;
    Some(match mode {
        Mode::Ip => wire::hash_ip_symmetric(&i),
        Mode::FiveTuple => wire::hash_5tuple_symmetric(&i),
        Mode::Toeplitz => wire::hash_toeplitz_symmetric(&i),
        _ => wire::hash_proto(&i),
    })
}

/// [`hash`] through the header parser (no fast path), down through MPLS label stacks, PPPoE
/// sessions, LLC/SNAP and PPP links to the IP header ([`wire::parse_deep`]).
fn hash_parsed(mode: Mode, data: &[u8], link: LinkType) -> u32 {
    let (p, base) = match wire::parse_deep(data, link) {
        Ok((p, base, _)) => (p, base),
        Err(_) => (wire::parse(data, link), 0),
    };
    let data = data.get(base..).unwrap_or_default();
    match mode {
        Mode::RoundRobin | Mode::Fanout | Mode::Lua => 0,
        Mode::Ip => wire::hash_ip_symmetric(&p),
        Mode::Mac => wire::hash_mac(&p),
        Mode::Proto => wire::hash_proto(&p),
        Mode::FiveTuple => wire::hash_5tuple_symmetric(&p),
        Mode::Toeplitz => wire::hash_toeplitz_symmetric(&p),
        Mode::Vlan => wire::hash_vlan(&p),
        Mode::GreInner | Mode::GtpInner => {
            let tunnel = if mode == Mode::GreInner {
                p.ip_version != 0 && p.proto == wire::proto::GRE
            } else {
                p.ip_version != 0
                    && p.proto == wire::proto::UDP
                    && (p.dport == GTP_U_PORT || p.sport == GTP_U_PORT)
            };
            match wire::inner(data, &p) {
                Some(i) if tunnel && i.ip_version != 0 => wire::hash_ip_symmetric(&i),
                _ => wire::hash_ip_symmetric(&p),
            }
        }
    }
}

/// The hashes of the packets of `batch` whose bit is set in `keep` (others: 0), into `out`
/// (one per packet): [`hash`] of each, with the mode chosen once for the batch so that each
/// mode's loop is compiled on its own, with its fast path inlined.
#[inline]
fn hash_batch(mode: Mode, link: LinkType, batch: &Batch, keep: u64, out: &mut [u32]) {
    #[inline(always)]
    fn each(batch: &Batch, keep: u64, out: &mut [u32], f: impl Fn(&[u8]) -> u32) {
        for (i, o) in out.iter_mut().enumerate() {
            *o = if keep >> i & 1 != 0 {
                f(batch.data(i))
            } else {
                0
            };
        }
    }
    match (mode, link == LinkType::ETHERNET) {
        (Mode::Ip, true) => two_pass(
            batch,
            keep,
            out,
            link,
            Mode::Ip,
            wire::eth_v4_addrs,
            |(s, d)| wire::hash_ip_symmetric_v4(s, d),
        ),
        (Mode::FiveTuple, true) => two_pass(
            batch,
            keep,
            out,
            link,
            Mode::FiveTuple,
            wire::eth_v4_tuple,
            wire::hash_5tuple_symmetric_v4,
        ),
        (Mode::Toeplitz, true) => two_pass(
            batch,
            keep,
            out,
            link,
            Mode::Toeplitz,
            wire::eth_v4_tuple,
            wire::hash_toeplitz_symmetric_v4,
        ),
        _ => each(batch, keep, out, |d| hash(mode, d, link)),
    }
}

/// Hashes a batch in three passes: the keys of the frames `key` reads (untagged Ethernet/IPv4),
/// the hashes of all of them side by side (no branch, no load: the packets' multiply chains
/// overlap), then the other frames through the parser (`mode`'s full hash) and 0 for packets not
/// kept.
#[inline(always)]
fn two_pass<K: Copy + Default>(
    batch: &Batch,
    keep: u64,
    out: &mut [u32],
    link: LinkType,
    mode: Mode,
    key: impl Fn(&[u8]) -> Option<K>,
    hash: impl Fn(K) -> u32,
) {
    let n = out.len().min(BATCH);
    let mut keys = [K::default(); BATCH];
    let mut slow = 0u64;
    // The pool's bounds looked up once for the batch (`Batch::frames`), not once a packet.
    for ((i, k), data) in keys[..n].iter_mut().enumerate().zip(batch.frames()) {
        match key(data) {
            Some(v) => *k = v,
            None => slow |= 1 << i,
        }
    }
    // Compiled for AVX2 too, chosen at run time: eight packets' multiply chains at once.
    crate::sys::cpu::with_avx2(
        #[inline(always)]
        || {
            for (o, &k) in out[..n].iter_mut().zip(&keys[..n]) {
                *o = hash(k);
            }
        },
    );
    let all = if n == 64 { u64::MAX } else { (1u64 << n) - 1 };
    let mut m = (slow | !keep) & all;
    while m != 0 {
        let i = m.trailing_zeros() as usize;
        m &= m - 1;
        out[i] = if keep >> i & 1 != 0 {
            hash_parsed(mode, batch.data(i), link)
        } else {
            0
        };
    }
}

/// Or-s into `out[i]` the bit of the queue that hash `hs[i]` picks among an application's `nq`
/// queues starting at `first`: one loop for a power of two (a mask) and one for any other
/// count (a multiply), so that the choice is made once a batch rather than once a packet.
#[inline(always)]
fn queue_bits(out: &mut [u64], hs: &[u32], first: u32, nq: u32) {
    let r = FastMod::new(nq);
    if r.d.is_power_of_two() {
        let m = r.d - 1;
        for (o, &h) in out.iter_mut().zip(hs) {
            *o |= 1 << (first + (h & m));
        }
    } else {
        for (o, &h) in out.iter_mut().zip(hs) {
            *o |= 1 << (first + r.rem_any(h));
        }
    }
}

/// `h % d` for a fixed `d` without a division (Lemire, Kaser and Kurz, "Faster remainder by
/// direct computation", 2019: exact for every 32-bit `h`); [`queue_bits`] masks instead when `d`
/// is a power of two.
#[derive(Clone, Copy, Debug)]
struct FastMod {
    d: u32,
    m: u64,
}

impl FastMod {
    fn new(d: u32) -> FastMod {
        let d = d.max(1);
        FastMod {
            d,
            m: (u64::MAX / d as u64).wrapping_add(1),
        }
    }

    /// `h % d` by the multiply (exact for any `d`, a power of two included; [`queue_bits`]
    /// masks instead when `d` is one).
    #[inline(always)]
    fn rem_any(self, h: u32) -> u32 {
        ((self.m.wrapping_mul(h as u64) as u128 * self.d as u128) >> 64) as u32
    }
}

/// GTP-U's UDP port.
const GTP_U_PORT: u16 = 2152;

/// What the master does and when it stops.
#[derive(Debug, Default)]
pub struct BalanceOptions {
    /// Stop after this many packets received.
    pub count: Option<u64>,
    /// Stop after this long.
    pub duration: Option<Duration>,
    /// Filter run in user space before distribution (rejected packets count as `filtered`).
    pub filter: Option<Filter>,
    /// Interval between statistics snapshots.
    pub interval: Duration,
}

/// Cluster statistics at one instant.
#[derive(Clone, Debug, Default)]
pub struct Snap {
    /// Monotonic time (ns).
    pub t_ns: u64,
    /// The cluster's counters.
    pub stats: ClusterStats,
}

/// Statistics handed to the printer: at start, at the previous tick, now.
#[derive(Clone, Debug)]
pub struct BalanceTick {
    /// At start.
    pub start: Snap,
    /// At the previous tick.
    pub prev: Snap,
    /// Now.
    pub now: Snap,
}

/// How the master loop ended.
#[derive(Debug)]
pub struct BalanceReport {
    /// Final statistics.
    pub tick: BalanceTick,
    /// Why the input stopped early.
    pub error: Option<PortError>,
    /// Why the loop ended.
    pub ended: Ended,
}

/// Runs the master loop: `input` → `dist` → `master`, until a limit, the end of the input, an
/// error or `stop`. The cluster stays open: [`finish`] it (or drop the master) to end consumers.
pub fn run(
    input: &mut dyn Port,
    master: &mut Master,
    dist: &mut Distributor,
    opts: &BalanceOptions,
    stop: &AtomicBool,
    on_tick: impl FnMut(&BalanceTick),
) -> BalanceReport {
    run_with(input, master, dist, opts, &mut [], None, stop, on_tick)
}

/// A queue replaced by an egress port (`-r Q:PORT`): the master itself drains the queue into
/// the port after each batch (zero copy up to the port, which copies into its own memory: a
/// pcap file, a kernel ring).
pub struct Egress {
    queue: usize,
    port: ClusterPort,
    out: Box<dyn Port>,
    batch: Batch,
    /// Packets the egress port did not take (its ring or wire was full).
    pub dropped: u64,
}

impl Egress {
    /// Makes queue `queue` of `master`'s cluster an egress to `out`.
    pub fn new(master: &Master, queue: usize, out: Box<dyn Port>) -> Result<Egress, PortError> {
        Ok(Egress {
            queue,
            port: master.consumer(queue)?,
            out,
            batch: Batch::new(),
            dropped: 0,
        })
    }

    /// The queue it replaces.
    pub fn queue(&self) -> usize {
        self.queue
    }

    /// The egress port.
    pub fn out(&mut self) -> &mut dyn Port {
        self.out.as_mut()
    }

    /// Moves what waits in the queue to the port (a few batches at most).
    pub fn pump(&mut self) -> Result<usize, PortError> {
        let mut moved = 0;
        for _ in 0..8 {
            let n = self.port.rx(&mut self.batch)?;
            if n == 0 {
                break;
            }
            moved += n;
            while !self.batch.is_empty() {
                if self.out.tx(&mut self.batch)? == 0 {
                    break;
                }
            }
            self.dropped += self.batch.len() as u64;
            self.batch.clear();
        }
        Ok(moved)
    }

    /// Drains the queue completely and flushes the port.
    pub fn finish(&mut self) -> Result<(), PortError> {
        while self.pump()? > 0 {}
        self.out.flush()
    }
}

/// [`run`] with queues replaced by egress ports, and `tx_out` receiving what consumers transmit
/// into the cluster (`-o`).
#[allow(clippy::too_many_arguments)]
pub fn run_with(
    input: &mut dyn Port,
    master: &mut Master,
    dist: &mut Distributor,
    opts: &BalanceOptions,
    egress: &mut [Egress],
    mut tx_out: Option<&mut dyn Port>,
    stop: &AtomicBool,
    mut on_tick: impl FnMut(&BalanceTick),
) -> BalanceReport {
    let mut batch = Batch::new();
    let mut masks = [0u64; BATCH];
    let mut pkts = 0u64;
    let t0 = mono_ns();
    let start = Snap {
        t_ns: t0,
        stats: master.stats(),
    };
    let mut prev = start.clone();
    let mut ticker = Ticker::new(t0, opts.interval);
    let mut maint = Ticker::new(t0, Duration::from_millis(100));
    // The outputs' clock work (a capture file's --flush-interval, -G): every 10 ms at most.
    let mut out_tick = Ticker::new(t0, Duration::from_millis(10));
    let limits = Limits::new(opts.count, opts.duration, t0);
    let mut idle = 0u32;
    let mut error = None;
    // An input that writes into the frames it is given receives straight into the segment.
    // Only when every packet the input can hold in its own frames, up to what any cluster
    // carries (a 128 KiB big frame), fits a frame this master carries: otherwise
    // (`--max-pkt-len` below it) the input is copied, so that the master sees the long packets
    // and counts them as too_big. Longer than any cluster carries, an input reading in place
    // drops a packet itself (as too_big, in its own counters).
    let ceiling = (crate::cluster::MAX_BIG_FRAME - crate::mem::DEFAULT_HEADROOM) as usize;
    let in_place = input.fills_lent_frames()
        && input
            .max_rx_packet()
            .is_some_and(|most| most.min(ceiling) <= master.max_packet());
    if in_place && input.fills_lent_frames_of_any_pool() {
        if let Some(most) = input.max_rx_packet() {
            master.stagger_lent_frames(most);
        }
    }
    let input_fd = input.poll_fd();
    // The input's descriptor was readable at the last idle poll (and `rx` still found nothing).
    let mut was_ready = false;
    // Full batches since the clock was last read (see below).
    let mut unclocked = 0u32;
    let ended = loop {
        if stop.load(Ordering::Relaxed) {
            break Ended::Stopped;
        }
        if limits.count_reached(pkts) {
            break Ended::Count;
        }
        if limits.count.is_some() {
            batch.set_limit(limits.room(pkts, BATCH));
        }
        if in_place {
            // No frame to lend: this batch is received into the input's own memory (and what
            // finds no frame is counted as no_frame).
            master.lend_frames(&mut batch);
        }
        let n = match input.rx(&mut batch) {
            Ok(n) => n,
            Err(e) => {
                error = Some(e);
                break Ended::Error;
            }
        };
        // A full batch: the input keeps up with nothing to spare, and the clock waits (below).
        let full = n == BATCH;
        if n > 0 {
            idle = 0;
            was_ready = false;
            dist.masks(&mut batch, opts.filter.as_ref(), &mut masks);
            let len = batch.len();
            master.distribute(&mut batch, &masks[..len]);
            pkts += len as u64;
            batch.clear();
            if let Some(e) = dist.take_error() {
                error = Some(PortError::Gone {
                    port: format!("-m lua:{}", dist.script.as_ref().map_or("?", |s| s.name())),
                    why: e.to_string(),
                });
                break Ended::Error;
            }
            if let Err(e) = egress.iter_mut().try_for_each(|e| e.pump().map(|_| ())) {
                error = Some(e);
                break Ended::Error;
            }
        } else if input.is_finished() {
            break Ended::EndOfInput;
        } else if tx_out.is_some() && master.tx_pending() {
            idle = 0;
        } else {
            idle += 1;
            // An input wire's writer may be waiting for the frames consumers released.
            master.idle();
            if idle > 64 {
                // An input with a descriptor (afpacket:, xdp:) and no egress to pump: wait in
                // poll for its next packets, at most 1 ms (the stop flag, the maintenance
                // tick), rather than waking every 20 µs. A descriptor readable while `rx`
                // finds nothing (no frame to lend it) gets the short sleep.
                match input_fd {
                    Some(fd) if tx_out.is_none() && !was_ready => {
                        was_ready = crate::sys::poll::poll_readable(fd, 1).unwrap_or(true);
                    }
                    _ => std::thread::sleep(Duration::from_micros(20)),
                }
            } else {
                std::hint::spin_loop();
            }
        }
        if let Some(out) = tx_out.as_deref_mut() {
            if let Err(e) = master.pump_tx(out) {
                error = Some(e);
                break Ended::Error;
            }
        }
        // The clock is read once per idle poll, per batch short of full, and once per
        // CLOCK_EVERY full batches in a row: a read costs ~45 ns here alone and several times
        // that after a batch's slot stores (the vDSO's ordered TSC read waits for them), and
        // 16 full batches are 1024 packets, ~20 µs at 50 Mpps: the stats tick, `-t`, the
        // maintenance and the outputs' clock work stay on time to well under a millisecond.
        if full && unclocked + 1 < CLOCK_EVERY {
            unclocked += 1;
            continue;
        }
        unclocked = 0;
        let now = mono_ns();
        if maint.due(now) {
            master.maintain();
        }
        if out_tick.due(now) {
            for e in egress.iter_mut() {
                if let Err(err) = e.out.tick(now) {
                    error = Some(err);
                    break;
                }
            }
            if let Some(out) = tx_out.as_deref_mut() {
                if let Err(err) = out.tick(now) {
                    error.get_or_insert(err);
                }
            }
            if error.is_some() {
                break Ended::Error;
            }
        }
        if ticker.due(now) {
            let s = Snap {
                t_ns: now,
                stats: master.stats(),
            };
            on_tick(&BalanceTick {
                start: start.clone(),
                prev: prev.clone(),
                now: s.clone(),
            });
            prev = s;
        }
        if limits.time_up(now) {
            break Ended::Duration;
        }
    };
    master.unlend_frames(&mut batch);
    for e in egress.iter_mut() {
        if let Err(err) = e.finish() {
            error.get_or_insert(err);
        }
    }
    if let Some(out) = tx_out {
        let drained = (|| {
            while master.pump_tx(out)? > 0 {}
            out.flush()
        })();
        if let Err(err) = drained {
            error.get_or_insert(err);
        }
    }
    master.maintain();
    let now = Snap {
        t_ns: mono_ns(),
        stats: master.stats(),
    };
    BalanceReport {
        tick: BalanceTick { start, prev, now },
        error,
        ended,
    }
}

/// Full batches in a row the master loop ([`run_with`]) goes through between two clock reads.
const CLOCK_EVERY: u32 = 16;

/// How long consumer processes that stopped reading are waited for at the end.
const STALL: Duration = Duration::from_millis(500);
/// How long consumers still get after a stop signal.
const GRACE_AFTER_STOP: Duration = Duration::from_millis(500);

/// How the cluster's end went ([`finish`]).
#[derive(Debug)]
pub struct Finished {
    /// Statistics at the end of the drain: final, nothing in the queues.
    pub now: Snap,
    /// The consumer threads' (packets, bytes) at the end, or the first thread's error.
    pub threads: Option<Result<Vec<(u64, u64)>, PortError>>,
    /// Time the drain took.
    pub drain: Duration,
}

/// Ends a cluster after the master loop ([`run_with`]): closes it, lets consumers drain their
/// queues, then takes back what they did not read ([`Master::take_back`]: `unread`), so the
/// accounting is final. Consumer threads are waited for until they are done (a simulated
/// workload may take a while); consumer processes while they make progress (a stalled one is
/// given up after half a second). After `stop` is set (a signal), consumers get half a second.
/// `on_tick` is called every `interval` meanwhile, with `last` (the loop's final tick) as the
/// start and the previous tick.
pub fn finish(
    master: &mut Master,
    threads: Option<Threads>,
    last: &BalanceTick,
    interval: Duration,
    stop: &AtomicBool,
    mut on_tick: impl FnMut(&BalanceTick, &[(u64, u64)]),
) -> Finished {
    master.close();
    let t0 = mono_ns();
    let mut ticker = Ticker::new(last.now.t_ns, interval);
    let mut prev = last.now.clone();
    let mut progress = master.progress();
    let mut moved_at = t0;
    let mut stopped_at = None;
    loop {
        master.maintain();
        let now = mono_ns();
        let done = match &threads {
            Some(t) => t.all_finished() && master.drained(),
            None => master.drained(),
        };
        if done {
            break;
        }
        let p = master.progress();
        if p != progress {
            progress = p;
            moved_at = now;
        }
        if threads.is_none() && now - moved_at > STALL.as_nanos() as u64 {
            break;
        }
        if stop.load(Ordering::Relaxed) {
            let at = *stopped_at.get_or_insert(now);
            if now - at > GRACE_AFTER_STOP.as_nanos() as u64 {
                break;
            }
        }
        if ticker.due(now) {
            let s = Snap {
                t_ns: now,
                stats: master.stats(),
            };
            let figures = threads.as_ref().map(|t| t.figures()).unwrap_or_default();
            on_tick(
                &BalanceTick {
                    start: last.start.clone(),
                    prev: prev.clone(),
                    now: s.clone(),
                },
                &figures,
            );
            prev = s;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    // What is left was not read: take it back (consumers still attached end after what they
    // were handed); threads then return.
    master.take_back();
    let threads = threads.map(|t| t.join());
    let end = mono_ns();
    Finished {
        now: Snap {
            t_ns: end,
            stats: master.stats(),
        },
        threads,
        drain: Duration::from_nanos(end - t0),
    }
}

/// Counters of one consumer thread (single writer).
#[derive(Debug, Default)]
pub struct ThreadCounters {
    /// Packets received.
    pub pkts: CachePadded<AtomicU64>,
    /// Bytes received (wire lengths).
    pub bytes: CachePadded<AtomicU64>,
}

impl ThreadCounters {
    /// (packets, bytes) now.
    pub fn get(&self) -> (u64, u64) {
        (
            self.pkts.load(Ordering::Relaxed),
            self.bytes.load(Ordering::Relaxed),
        )
    }
}

/// A consumer thread's loop (pfdnacluster_multithread's packet consumer): receive from its
/// queue, count, release; until the master closes the cluster and the queue is drained (or
/// taken back). `work_ns` simulates per-packet processing cost (busy wait), to test overload.
pub fn consume(
    port: &mut ClusterPort,
    counters: &ThreadCounters,
    work_ns: u64,
) -> Result<(), PortError> {
    let mut batch = Batch::new();
    let (mut pkts, mut bytes) = (0u64, 0u64);
    let mut backoff = Backoff::new(Backoff::BUSY_EVERY);
    loop {
        match port.rx(&mut batch) {
            Ok(0) if port.is_finished() => {
                counters.pkts.store(pkts, Ordering::Relaxed);
                counters.bytes.store(bytes, Ordering::Relaxed);
                return Ok(());
            }
            Ok(0) => backoff.wait(),
            Ok(n) => {
                backoff.got();
                pkts += n as u64;
                bytes += batch.descs().iter().map(|d| d.wire_len as u64).sum::<u64>();
                if work_ns > 0 {
                    let until = mono_ns() + work_ns * n as u64;
                    while mono_ns() < until {
                        std::hint::spin_loop();
                    }
                }
                batch.clear();
                counters.pkts.store(pkts, Ordering::Relaxed);
                counters.bytes.store(bytes, Ordering::Relaxed);
            }
            Err(e) => {
                counters.pkts.store(pkts, Ordering::Relaxed);
                counters.bytes.store(bytes, Ordering::Relaxed);
                return Err(e);
            }
        }
    }
}

/// Consumer threads of an in-process cluster, one per queue, each counting what it receives.
pub struct Threads {
    counters: std::sync::Arc<Vec<ThreadCounters>>,
    handles: Vec<std::thread::JoinHandle<Result<(), PortError>>>,
}

impl Threads {
    /// Starts one consumer thread per queue of `master`'s cluster; each first calls
    /// `on_start(queue)` (to pin itself to a core, say). `work_ns` is a simulated per-packet
    /// cost.
    pub fn spawn(
        master: &Master,
        work_ns: u64,
        on_start: Option<std::sync::Arc<dyn Fn(usize) + Send + Sync>>,
    ) -> Result<Threads, PortError> {
        let all: Vec<usize> = (0..master.segment().queues()).collect();
        Self::spawn_some(master, &all, work_ns, on_start)
    }

    /// As [`Threads::spawn`], for the queues in `queues` only (the others' counters stay 0).
    pub fn spawn_some(
        master: &Master,
        queues: &[usize],
        work_ns: u64,
        on_start: Option<std::sync::Arc<dyn Fn(usize) + Send + Sync>>,
    ) -> Result<Threads, PortError> {
        let n = master.segment().queues();
        let counters: std::sync::Arc<Vec<ThreadCounters>> =
            std::sync::Arc::new((0..n).map(|_| ThreadCounters::default()).collect());
        let mut handles = Vec::with_capacity(n);
        for &q in queues {
            let mut port = master.consumer(q)?;
            let c = counters.clone();
            let on_start = on_start.clone();
            let h = std::thread::Builder::new()
                .name(format!("consumer-{q}"))
                .spawn(move || {
                    if let Some(f) = on_start {
                        f(q);
                    }
                    consume(&mut port, &c[q], work_ns)
                })
                .map_err(|source| PortError::Io {
                    path: format!("consumer thread {q}"),
                    source,
                })?;
            handles.push(h);
        }
        Ok(Threads { counters, handles })
    }

    /// The threads' counters, by queue.
    pub fn counters(&self) -> &[ThreadCounters] {
        &self.counters
    }

    /// Whether every thread has returned.
    pub fn all_finished(&self) -> bool {
        self.handles.iter().all(|h| h.is_finished())
    }

    /// (packets, bytes) of every queue now.
    pub fn figures(&self) -> Vec<(u64, u64)> {
        self.counters.iter().map(|c| c.get()).collect()
    }

    /// Waits for every thread (close the cluster first); returns the first error.
    pub fn join(self) -> Result<Vec<(u64, u64)>, PortError> {
        let mut first = None;
        for h in self.handles {
            match h.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    first.get_or_insert(e);
                }
                Err(_) => {
                    first.get_or_insert(PortError::Io {
                        path: "consumer thread".into(),
                        source: std::io::Error::other("panicked"),
                    });
                }
            }
        }
        match first {
            Some(e) => Err(e),
            None => Ok(self.counters.iter().map(|c| c.get()).collect()),
        }
    }
}

/// A consumer thread's figures between two instants, for [`thread_block`].
#[derive(Clone, Copy, Debug, Default)]
pub struct ThreadFigures {
    /// Packets received since the start.
    pub pkts: u64,
    /// Bytes since the start.
    pub bytes: u64,
    /// Drops of its queue since the start.
    pub drops: u64,
    /// Packets received since the previous tick.
    pub act_pkts: u64,
    /// Seconds since the start.
    pub secs: f64,
    /// Milliseconds since the previous tick.
    pub act_ms: f64,
}

/// pfdnacluster_multithread's per-thread block.
pub fn thread_block(t: usize, f: &ThreadFigures) -> String {
    use crate::stats::group_f;
    let total = f.pkts + f.drops;
    let pct = if total == 0 {
        0.0
    } else {
        f.drops as f64 * 100.0 / total as f64
    };
    let secs = f.secs.max(1e-9);
    let act_s = (f.act_ms / 1e3).max(1e-9);
    format!(
        "=========================\n\
         Thread {t}\n\
         Absolute Stats: [{} pkts rcvd][{} bytes rcvd]\n\
         \x20               [{} total pkts][{} pkts dropped ({:.1} %)]\n\
         \x20               [{} pkt/sec][{:.2} Mbit/sec]\n\
         Actual   Stats: [{} pkts][{:.1} ms][{} pkt/sec]\n",
        f.pkts,
        f.bytes,
        total,
        f.drops,
        pct,
        group_f(f.pkts as f64 / secs, 2),
        f.bytes as f64 * 8.0 / secs / 1e6,
        f.act_pkts,
        f.act_ms,
        group_f(f.act_pkts as f64 / act_s, 2),
    )
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::mem::{Desc, Pool, PoolConfig};
    use std::sync::Arc;

    fn batch_of(n: usize) -> Batch {
        let pool = Arc::new(Pool::new(&PoolConfig::default()).unwrap());
        let mut b = Batch::with_pool(&pool);
        for i in 0..n {
            let mut fr = b.alloc().unwrap();
            fr.buf()[..60].fill(i as u8);
            fr.push(Desc {
                len: 60,
                wire_len: 64,
                ..Default::default()
            });
        }
        b
    }

    #[test]
    fn modes_parse_and_name() {
        for (n, m) in Mode::NAMES {
            assert_eq!(n.parse::<Mode>().unwrap(), m);
            assert_eq!(m.name(), n);
        }
        assert_eq!("rr".parse::<Mode>().unwrap(), Mode::RoundRobin);
        assert!("nope".parse::<Mode>().unwrap_err().contains("round-robin"));
    }

    #[test]
    fn round_robin_and_fanout_masks_with_two_apps() {
        let mut b = batch_of(4);
        let mut out = [0u64; BATCH];
        let mut d = Distributor::new(Mode::RoundRobin, &[2, 1], LinkType::ETHERNET);
        d.masks(&mut b, None, &mut out);
        // app 0 alternates queues 0 and 1, app 1 (queue 2) gets everything
        assert_eq!(&out[..4], &[0b101, 0b110, 0b101, 0b110]);
        let mut d = Distributor::new(Mode::Fanout, &[2, 1], LinkType::ETHERNET);
        d.masks(&mut b, None, &mut out);
        assert!(out[..4].iter().all(|&m| m == 0b111));
    }

    #[test]
    fn fast_remainder_equals_the_remainder() {
        let mut h = 0x1234_5678u32;
        for d in 1..=64u32 {
            let r = FastMod::new(d);
            for x in [0, 1, d - 1, d, d + 1, u32::MAX, u32::MAX - 1, u32::MAX / 2] {
                assert_eq!(r.rem_any(x), x % d, "{x} % {d}");
            }
            for _ in 0..10_000 {
                h ^= h << 13;
                h ^= h >> 17;
                h ^= h << 5;
                assert_eq!(r.rem_any(h), h % d, "{h} % {d}");
            }
        }
    }

    #[test]
    fn batched_hash_masks_equal_per_packet_hashes() {
        // Frames of the built-in source: each packet's mask has, per application, the queue
        // first + hash % queues, and its descriptor carries the hash.
        let pool = Arc::new(Pool::new(&PoolConfig::default()).unwrap());
        let mut b = Batch::with_pool(&pool);
        for i in 0..64 {
            let mut fr = b.alloc().unwrap();
            fr.buf()[..60].copy_from_slice(&source::frame(i * 7919, 1 << 20));
            fr.push(Desc {
                len: 60,
                wire_len: 64,
                ..Default::default()
            });
        }
        for mode in [Mode::Ip, Mode::FiveTuple, Mode::Mac, Mode::Toeplitz] {
            let mut d = Distributor::new(mode, &[3, 1, 5], LinkType::ETHERNET);
            let mut out = [0u64; BATCH];
            d.masks(&mut b, None, &mut out);
            let mut seen = 0u64;
            for (i, &got) in out.iter().enumerate() {
                let h = hash(mode, b.data(i), LinkType::ETHERNET);
                assert_eq!(b.descs()[i].hash, h);
                let want = 1 << (h % 3) | 1 << 3 | 1 << (4 + h % 5);
                assert_eq!(got, want, "{mode:?} packet {i}");
                seen |= got;
            }
            if mode != Mode::Mac {
                // (the source's frames all share one pair of MACs)
                assert_eq!(seen, 0b1_1111_1111, "{mode:?} spreads over every queue");
            }
            // Powers of two (a mask rather than the multiply): 4 queues, then 2.
            let mut d = Distributor::new(mode, &[4, 2], LinkType::ETHERNET);
            d.masks(&mut b, None, &mut out);
            for (i, &got) in out.iter().enumerate() {
                let h = b.descs()[i].hash;
                assert_eq!(got, 1 << (h % 4) | 1 << (4 + h % 2), "{mode:?} packet {i}");
            }
        }
    }

    #[test]
    fn batched_hashes_of_mixed_frames_equal_the_parsers_and_filtered_packets_get_none() {
        // The ip, 5tuple and toeplitz modes hash untagged IPv4 from the bytes and the rest through the
        // parser: a batch mixing both (tagged, IPv6, fragments, IP options, cut short), with a
        // filter that drops some, must give every packet the parser's hash, and 0 when dropped.
        let pool = Arc::new(Pool::new(&PoolConfig::default()).unwrap());
        let mut frames: Vec<Vec<u8>> = Vec::new();
        for i in 0..64u32 {
            let mut f = source::frame(i * 104_729, 1 << 20).to_vec();
            match i % 8 {
                1 => {
                    // 802.1Q tag
                    f.splice(12..12, [0x81, 0x00, 0x00, 0x07]);
                }
                2 => f[20] = 0x20, // more fragments: ports do not count
                3 => f.truncate(20),
                4 => {
                    // IPv6/UDP
                    let mut v6 = f[..12].to_vec();
                    v6.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0, 0, 8, 17, 64]);
                    v6.extend((0..32u8).map(|b| b.wrapping_mul(i as u8 | 1)));
                    v6.extend_from_slice(&[0x30, 0x39, 0x00, 0x35, 0, 8, 0, 0]);
                    f = v6;
                }
                5 => {
                    // IPv4 with 4 bytes of options (IHL 6)
                    f[14] = 0x46;
                    f.splice(34..34, [1, 1, 1, 0]);
                    let total = u16::from_be_bytes([f[16], f[17]]) + 4;
                    f[16..18].copy_from_slice(&total.to_be_bytes());
                }
                6 => f[23] = 6, // TCP
                _ => {}
            }
            frames.push(f);
        }
        let filter = Filter::compile("udp", LinkType::ETHERNET).unwrap();
        for mode in [Mode::Ip, Mode::FiveTuple, Mode::Toeplitz] {
            let mut b = Batch::with_pool(&pool);
            for f in &frames {
                assert!(b.push_copy(f, 0));
            }
            let mut d = Distributor::new(mode, &[7], LinkType::ETHERNET);
            let mut out = [0u64; BATCH];
            d.masks(&mut b, Some(&filter), &mut out);
            let mut dropped = 0;
            for (i, f) in frames.iter().enumerate() {
                let want = hash_parsed(mode, f, LinkType::ETHERNET);
                if filter.matches(f) {
                    assert_eq!(b.descs()[i].hash, want, "{mode:?} packet {i}");
                    assert_eq!(out[i], 1 << (want % 7), "{mode:?} packet {i}");
                } else {
                    dropped += 1;
                    assert_eq!(out[i], 0, "{mode:?} packet {i} filtered");
                }
            }
            assert!(
                dropped > 0 && dropped < 64,
                "the filter dropped some ({dropped})"
            );
        }
    }

    #[test]
    fn thread_block_has_pf_ring_zcs_shape() {
        let s = thread_block(
            0,
            &ThreadFigures {
                pkts: 1000,
                bytes: 64000,
                drops: 0,
                act_pkts: 500,
                secs: 2.0,
                act_ms: 1000.1,
            },
        );
        assert!(
            s.contains("Thread 0\nAbsolute Stats: [1000 pkts rcvd][64000 bytes rcvd]"),
            "{s}"
        );
        assert!(
            s.contains("                [1000 total pkts][0 pkts dropped (0.0 %)]"),
            "{s}"
        );
        assert!(s.contains("[500.00 pkt/sec][0.26 Mbit/sec]"), "{s}");
        assert!(
            s.contains("Actual   Stats: [500 pkts][1000.1 ms][499.95 pkt/sec]"),
            "{s}"
        );
    }

    #[test]
    fn hash_modes_step_over_mpls_and_pppoe() {
        // Each flow's frame wrapped in an MPLS stack of two labels and in a PPPoE session (2-
        // and 1-byte PPP protocol) hashes as the plain frame does, so flows spread over queues.
        for mode in [Mode::Ip, Mode::FiveTuple, Mode::Toeplitz] {
            let mut queues = std::collections::HashSet::new();
            for i in 0..64u32 {
                let f = source::frame(i * 104_729, 1 << 20).to_vec();
                let plain = hash(mode, &f, LinkType::ETHERNET);
                let ip = &f[14..];
                let mut mpls = f[..12].to_vec();
                mpls.extend_from_slice(&[0x88, 0x47, 0, 0x01, 0x00, 64, 0, 0x02, 0x01, 64]);
                mpls.extend_from_slice(ip);
                let mut pppoe = f[..12].to_vec();
                pppoe.extend_from_slice(&[0x88, 0x64, 0x11, 0, 0, 1]);
                pppoe.extend_from_slice(&((ip.len() + 2) as u16).to_be_bytes());
                let mut pppoe1 = pppoe.clone();
                pppoe.extend_from_slice(&[0x00, 0x21]);
                pppoe.extend_from_slice(ip);
                pppoe1.push(0x21);
                pppoe1.extend_from_slice(ip);
                for g in [&mpls, &pppoe, &pppoe1] {
                    assert_eq!(
                        hash(mode, g, LinkType::ETHERNET),
                        plain,
                        "{mode:?} {g:02x?}"
                    );
                }
                queues.insert(hash(mode, &mpls, LinkType::ETHERNET) % 4);
            }
            assert_eq!(
                queues.len(),
                4,
                "{mode:?}: MPLS frames spread over every queue"
            );
        }
    }

    #[test]
    fn tunnels_inner_spreads_one_gre_tunnel_and_outer_keeps_it_together() {
        // 64 inner flows in one GRE tunnel, one IPIP tunnel and one VXLAN tunnel (same outer
        // endpoints): outer puts each tunnel on one queue, inner spreads its flows.
        let pool = Arc::new(Pool::new(&PoolConfig::default()).unwrap());
        for wrap in 0..3 {
            for mode in [Mode::Ip, Mode::FiveTuple, Mode::Toeplitz] {
                let mut b = Batch::with_pool(&pool);
                for i in 0..64u32 {
                    let f = source::frame(i * 104_729, 1 << 20).to_vec();
                    let mut t = f[..14].to_vec();
                    let (pr, body) = match wrap {
                        0 => (47u8, [&[0u8, 0, 0x08, 0x00][..], &f[14..]].concat()),
                        1 => (4, f[14..].to_vec()),
                        _ => {
                            let mut u = vec![0xc0, 0x01, 0x12, 0xb5, 0, 0, 0, 0];
                            let n = (8 + 8 + f.len()) as u16;
                            u[4..6].copy_from_slice(&n.to_be_bytes());
                            u.extend_from_slice(&[0x08, 0, 0, 0, 0, 0, 1, 0]);
                            u.extend_from_slice(&f);
                            (17, u)
                        }
                    };
                    let total = (20 + body.len()) as u16;
                    t.extend_from_slice(&[0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, pr, 0, 0]);
                    t[16..18].copy_from_slice(&total.to_be_bytes());
                    t.extend_from_slice(&[192, 0, 2, 1, 192, 0, 2, 2]);
                    t.extend_from_slice(&body);
                    let mut fr = b.alloc().unwrap();
                    fr.buf()[..t.len()].copy_from_slice(&t);
                    fr.push(Desc {
                        len: t.len() as u32,
                        wire_len: t.len() as u32,
                        ..Default::default()
                    });
                }
                let mut d = Distributor::new(mode, &[4], LinkType::ETHERNET);
                let mut out = [0u64; BATCH];
                d.masks(&mut b, None, &mut out);
                let queues: std::collections::HashSet<u64> = out.iter().copied().collect();
                assert_eq!(queues.len(), 1, "{mode:?} outer, tunnel {wrap}");
                d.set_tunnels(Tunnels::Inner);
                d.masks(&mut b, None, &mut out);
                let queues: std::collections::HashSet<u64> = out.iter().copied().collect();
                assert_eq!(queues.len(), 4, "{mode:?} inner, tunnel {wrap}");
                // The batch path and the one-packet path agree.
                for (i, &m) in out.iter().enumerate() {
                    assert_eq!(1u64 << (d.hash(b.data(i)) % 4), m, "{mode:?} packet {i}");
                }
            }
        }
    }
}

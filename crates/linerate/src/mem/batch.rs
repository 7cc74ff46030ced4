//! Descriptors and batches.

use super::pool::{Chunk, CHUNK};
use super::Pool;
use std::sync::Arc;

/// Most descriptors a batch holds: the unit of every call on the data path.
pub const BATCH: usize = 64;
const _: () = assert!(
    BATCH.is_power_of_two(),
    "Batch::desc masks indices by BATCH - 1"
);

/// One packet: where its bytes are in the pool, and what we know about it. 32 bytes, `Copy`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Desc {
    /// Byte offset of the packet's first byte in the pool's region.
    pub addr: u64,
    /// Receive (or send) time, ns since the Unix epoch.
    pub ts: u64,
    /// Bytes captured (present in the frame).
    pub len: u32,
    /// Bytes on the wire (≥ len; larger when the capture was truncated).
    pub wire_len: u32,
    /// Hash computed by a balancer (0 if none).
    pub hash: u32,
    /// Ingress port number (for aggregated inputs).
    pub port: u16,
    /// Flags (see the `F_*` constants).
    pub flags: u16,
}

impl Desc {
    /// The frame is shared by several consumers (fan-out) and must not be written.
    pub const F_SHARED: u16 = 1;
    /// The record's length on the wire (a pcap record's `orig_len`) is smaller than its captured
    /// length: `wire_len` was raised to `len`, and `hash` holds the record's own wire length for
    /// the filter until a balancer hashes the packet ([`Desc::filter_len`]).
    pub const F_ORIG_SHORT: u16 = 1 << 1;
    /// The packet was received by the interface it was captured on (AF_PACKET; pcapng's
    /// `epb_flags` inbound).
    pub const F_INBOUND: u16 = 1 << 8;
    /// The packet was sent by the host on the interface it was captured on (AF_PACKET's
    /// PACKET_OUTGOING; pcapng's `epb_flags` outbound). Neither bit: direction unknown.
    pub const F_OUTBOUND: u16 = 1 << 9;

    /// `self` with the record's own length on the wire `orig` kept for the filter when it is
    /// smaller than the captured length (a malformed pcap record: `wire_len` stays at least
    /// `len` everywhere else).
    #[inline(always)]
    pub fn with_orig_len(mut self, orig: u32) -> Desc {
        if orig < self.len {
            self.flags |= Self::F_ORIG_SHORT;
            self.hash = orig;
        }
        self
    }

    /// The length BPF's `len`, `less` and `greater` test: the length on the wire as the record
    /// gave it, as libpcap passes `orig_len` to its filter even when it is below the captured
    /// length.
    #[inline(always)]
    pub fn filter_len(&self) -> u32 {
        if self.flags & Self::F_ORIG_SHORT != 0 {
            self.hash
        } else {
            self.wire_len
        }
    }

    /// The packet's direction as tcpdump words it (`In`/`Out` with -e on `any`, `-Q in|out`):
    /// "in", "out", or None when the port cannot tell (pcap files, `mem:`, `xdp:`; a pcapng
    /// file tells with `epb_flags`). For printers and JSON that describe packets.
    #[inline]
    pub fn direction(&self) -> Option<&'static str> {
        if self.flags & Self::F_OUTBOUND != 0 {
            Some("out")
        } else if self.flags & Self::F_INBOUND != 0 {
            Some("in")
        } else {
            None
        }
    }
}

/// A packet seen through a batch: its descriptor and bytes.
#[derive(Clone, Copy, Debug)]
pub struct Pkt<'a> {
    /// The descriptor.
    pub desc: &'a Desc,
    /// The captured bytes.
    pub data: &'a [u8],
}

/// Up to 64 descriptors of one pool, plus a private cache of free frames of that pool.
///
/// **Ownership invariant** (what makes [`Batch::data_mut`] sound): a batch owns the frame of each
/// of its descriptors exclusively (unless the descriptor is marked [`Desc::F_SHARED`], which is
/// then never written), and each descriptor's bytes lie inside its frame. [`Batch::clear`] (or
/// drop) returns the frames to the pool, a port's `tx` takes them over. Safe code can only add a
/// descriptor through a [`Fresh`] frame this batch handed out (or a port's `rx`), so it cannot
/// name a frame someone else owns: the old `frame_mut(addr)` taking any address is gone.
///
/// ```
/// use linerate::mem::{Batch, Desc, Pool, PoolConfig};
/// use std::sync::Arc;
///
/// let pool = Arc::new(Pool::new(&PoolConfig::default()).unwrap());
/// let mut b = Batch::with_pool(&pool);
/// let mut f = b.alloc().expect("a free frame");
/// f.buf()[..5].copy_from_slice(b"hello");
/// f.push(Desc { len: 5, wire_len: 5, ..Default::default() }); // the address is the frame's
/// assert!(b.push_copy(b"world", 0));
/// assert_eq!(b.data(0), b"hello");
/// assert_eq!(b.data(1), b"world");
/// ```
///
/// Writing into a frame by address does not compile:
///
/// ```compile_fail
/// use linerate::mem::{Batch, Pool, PoolConfig};
/// let pool = std::sync::Arc::new(Pool::new(&PoolConfig::default()).unwrap());
/// let mut b = Batch::with_pool(&pool);
/// let bytes = b.frame_mut(4096); // any address: someone else's frame
/// ```
///
/// Nor does pushing a descriptor made up by hand:
///
/// ```compile_fail
/// use linerate::mem::{Batch, Desc};
/// let mut b = Batch::new();
/// b.push(Desc { addr: 4096, len: 64, ..Default::default() });
/// ```
pub struct Batch {
    descs: [Desc; BATCH],
    len: usize,
    limit: usize,
    pool: Option<Arc<Pool>>,
    cache: Vec<u64>,
    /// Bytes of room in each frame another owner lent this batch (see [`Batch::lend`]); 0: the
    /// batch allocates from its pool's free list.
    lent: u32,
    /// Lent big frames (packet addresses), their room, and where they start (addresses from
    /// there on are big frames).
    lent_big: Vec<u64>,
    lent_big_room: u32,
    lent_big_from: u64,
}

impl Default for Batch {
    fn default() -> Self {
        Self::new()
    }
}

impl Batch {
    /// An empty batch bound to no pool.
    pub fn new() -> Batch {
        Batch {
            descs: [Desc::default(); BATCH],
            len: 0,
            limit: BATCH,
            pool: None,
            cache: Vec::with_capacity(4 * CHUNK),
            lent: 0,
            lent_big: Vec::new(),
            lent_big_room: 0,
            lent_big_from: u64::MAX,
        }
    }

    /// An empty batch bound to `pool`.
    pub fn with_pool(pool: &Arc<Pool>) -> Batch {
        let mut b = Batch::new();
        b.bind(pool);
        b
    }

    /// Binds the batch to `pool`, returning what it held of another pool first.
    #[inline]
    pub fn bind(&mut self, pool: &Arc<Pool>) {
        if let Some(p) = &self.pool {
            if Arc::ptr_eq(p, pool) {
                return;
            }
        }
        if self.lent > 0 {
            // A port that does not take lent frames rebinds: the lender's frames must not be
            // handed out as the new pool's. They stay lost to their owner (who lends only to
            // ports that say they take lent frames, `Port::fills_lent_frames`).
            debug_assert!(false, "a lent batch rebound to another pool");
            self.len = 0;
            self.cache.clear();
            self.lent_big.clear();
            self.lent = 0;
        }
        self.clear();
        self.flush_cache();
        self.pool = Some(pool.clone());
    }

    /// Binds the batch to frames of `pool` that their owner lends it, `room` bytes each (from
    /// the packet address): [`Batch::alloc`] then hands out only the frames given with
    /// [`Batch::lend_frame`], a frame dropped unpushed or cleared goes back to that list, and the
    /// owner takes the batch's packets over (then [`Batch::forget`]s them) and the unused frames
    /// back with [`Batch::unlend`]. This is how a port that writes packets into whatever frames
    /// a batch gives it (the built-in source) receives straight into a cluster's segment: no
    /// copy.
    /// `big`: where the lender's big frames start and their room, if it lends any.
    pub(crate) fn lend(&mut self, pool: &Arc<Pool>, room: u32, big: Option<(u64, u32)>) {
        if self.lent == 0 {
            self.bind(pool);
            self.clear();
            self.flush_cache();
        }
        debug_assert!(self.pool.as_ref().is_some_and(|p| Arc::ptr_eq(p, pool)));
        self.lent = room.max(1);
        (self.lent_big_from, self.lent_big_room) = big.unwrap_or((u64::MAX, 0));
    }

    /// Gives a lent batch one more free big frame (its packet address).
    #[inline(always)]
    pub(crate) fn lend_big_frame(&mut self, addr: u64) {
        debug_assert!(self.lent > 0 && addr >= self.lent_big_from);
        self.lent_big.push(addr);
    }

    /// The free lent big frames the batch holds.
    #[inline(always)]
    pub(crate) fn lent_big_frames(&self) -> usize {
        self.lent_big.len()
    }

    /// The longest packet a regular frame and a big frame of this batch hold (0: no big frames).
    pub fn frame_room(&self) -> (u32, u32) {
        if self.lent > 0 {
            return (self.lent, self.lent_big_room);
        }
        self.pool
            .as_ref()
            .map_or((0, 0), |p| (p.max_packet(), p.max_big_packet()))
    }

    /// Gives a lent batch one more free frame (its packet address).
    #[inline(always)]
    pub(crate) fn lend_frame(&mut self, addr: u64) {
        debug_assert!(self.lent > 0);
        self.cache.push(addr);
    }

    /// Gives a lent batch free frames (their packet addresses), as [`Batch::lend_frame`] each.
    #[inline(always)]
    pub(crate) fn lend_frames(&mut self, addrs: impl ExactSizeIterator<Item = u64>) {
        debug_assert!(self.lent > 0);
        self.cache.extend(addrs);
    }

    /// Takes one free lent regular frame out of the batch (its packet address), for a port
    /// whose kernel writes into lent frames later (an AF_XDP fill ring on a lent UMEM): the
    /// frame comes back to its owner in a later batch of this loan, as a packet's address.
    #[inline(always)]
    pub(crate) fn take_lent_frame(&mut self) -> Option<u64> {
        if self.lent > 0 {
            self.cache.pop()
        } else {
            None
        }
    }

    /// The free lent frames the batch holds.
    #[inline(always)]
    pub(crate) fn lent_frames(&self) -> usize {
        if self.lent > 0 {
            self.cache.len()
        } else {
            0
        }
    }

    /// Room of the lent frame at `addr`.
    #[inline(always)]
    fn lent_room(&self, addr: u64) -> u32 {
        if addr >= self.lent_big_from {
            self.lent_big_room
        } else {
            self.lent
        }
    }

    /// Whether the batch's frames are lent by their owner (a cluster master's `lend_frames`).
    #[inline(always)]
    pub fn is_lent(&self) -> bool {
        self.lent > 0
    }

    /// Ends a loan: the free lent frames go back to their owner (each passed to `back`); the
    /// batch is unbound. Packets still in it go back first (the owner did not take them).
    pub(crate) fn unlend(&mut self, mut back: impl FnMut(u64)) {
        if self.lent == 0 {
            return;
        }
        self.clear();
        for a in self.cache.drain(..).chain(self.lent_big.drain(..)) {
            back(a);
        }
        self.lent = 0;
        (self.lent_big_from, self.lent_big_room) = (u64::MAX, 0);
        self.pool = None;
    }

    /// The pool the descriptors point into.
    #[inline(always)]
    pub fn pool(&self) -> Option<&Arc<Pool>> {
        self.pool.as_ref()
    }

    /// Number of descriptors.
    #[inline(always)]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the batch holds nothing.
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether no more descriptors fit.
    #[inline(always)]
    pub fn is_full(&self) -> bool {
        self.len >= self.limit
    }

    /// Room left (ports receive at most this many).
    #[inline(always)]
    pub fn room(&self) -> usize {
        self.limit.saturating_sub(self.len)
    }

    /// Caps how many descriptors the batch takes (1..=64), e.g. to stop exactly at a count.
    #[inline(always)]
    pub fn set_limit(&mut self, limit: usize) {
        self.limit = limit.clamp(1, BATCH);
    }

    /// The descriptor of packet `i`, if the batch has one (no slice of the batch made: one
    /// comparison with its length, no panic path: the length is never above `BATCH`, a power
    /// of two, so the index masked by `BATCH - 1` is `i` and in bounds).
    #[inline(always)]
    pub fn desc(&self, i: usize) -> Option<&Desc> {
        if i < self.len {
            Some(&self.descs[i & (BATCH - 1)])
        } else {
            None
        }
    }

    /// The address of slot `i`'s descriptor, with no comparison: packet `i`'s when `i` is
    /// below the length, otherwise whatever the slot (`i` masked by `BATCH - 1`) last held,
    /// or 0. Only for hints (a prefetch), never to reach a packet's bytes.
    #[inline(always)]
    pub fn addr_hint(&self, i: usize) -> u64 {
        self.descs[i & (BATCH - 1)].addr
    }

    /// The descriptors.
    #[inline(always)]
    pub fn descs(&self) -> &[Desc] {
        &self.descs[..self.len]
    }

    /// The descriptors, to change hashes, ports, times or flags (crate code only: a changed
    /// address or a longer length would break the ownership invariant).
    #[inline(always)]
    pub(crate) fn descs_mut(&mut self) -> &mut [Desc] {
        &mut self.descs[..self.len]
    }

    /// Sets packet `i`'s hash (what a balancer computed).
    #[inline(always)]
    pub fn set_hash(&mut self, i: usize, hash: u32) {
        if i < self.len {
            self.descs[i].hash = hash;
            self.descs[i].flags &= !Desc::F_ORIG_SHORT;
        }
    }

    /// Sets packet `i`'s timestamp (ns).
    #[inline(always)]
    pub fn set_ts(&mut self, i: usize, ts: u64) {
        if i < self.len {
            self.descs[i].ts = ts;
        }
    }

    /// Appends a descriptor whose frame this batch now owns exclusively, its bytes inside the
    /// frame (the ownership invariant: crate code only; others push through [`Fresh`]).
    /// Returns false when full.
    #[inline(always)]
    pub(crate) fn push(&mut self, d: Desc) -> bool {
        if self.len >= self.limit {
            return false;
        }
        self.descs[self.len] = d;
        self.len += 1;
        true
    }

    /// Appends descriptors from a slice (as many as fit); returns how many. As [`Batch::push`]:
    /// the caller hands their frames over.
    #[inline]
    pub(crate) fn extend(&mut self, ds: &[Desc]) -> usize {
        let n = ds.len().min(self.room());
        self.descs[self.len..self.len + n].copy_from_slice(&ds[..n]);
        self.len += n;
        n
    }

    /// The bytes of each packet in order, as [`Batch::data`] gives them, the pool looked up
    /// once for the batch rather than once a packet.
    #[inline(always)]
    pub fn frames(&self) -> impl Iterator<Item = &[u8]> + '_ {
        let region = self.pool.as_deref().map(|p| p.region().bounds());
        self.descs[..self.len]
            .iter()
            .map(move |d| region.and_then(|r| r.bytes(d.addr, d.len)).unwrap_or(&[]))
    }

    /// The bytes of packet `i` (empty if the descriptor is out of the region's bounds).
    #[inline(always)]
    pub fn data(&self, i: usize) -> &[u8] {
        if i >= self.len {
            // Past the batch's packets: slots there are stale (consumed, cleared, given to a
            // port) and their frames may be someone else's now.
            return &[];
        }
        let d = &self.descs[i];
        match &self.pool {
            Some(p) => p.region().bytes(d.addr, d.len).unwrap_or(&[]),
            None => &[],
        }
    }

    /// The bytes of packet `i`, writable (empty if shared or out of bounds).
    #[inline(always)]
    pub fn data_mut(&mut self, i: usize) -> &mut [u8] {
        if i >= self.len {
            return &mut []; // a stale slot (see `data`): its frame is not ours
        }
        let d = self.descs[i];
        match &self.pool {
            // SAFETY: the batch owns the frame of each of its descriptors exclusively unless it
            // is marked shared (fan-out), which we refuse; `&mut self` prevents aliasing.
            Some(p) if d.flags & Desc::F_SHARED == 0 => unsafe {
                p.region().bytes_mut(d.addr, d.len).unwrap_or(&mut [])
            },
            _ => &mut [],
        }
    }

    /// [`Batch::frame_mut_at`]'s frame, with its length known (the room after `addr` to the
    /// frame's end), so that it is not computed again.
    ///
    /// # Safety
    /// As [`Batch::frame_mut_at`]; `len` is at most the room from `addr` to its frame's end.
    #[inline(always)]
    pub(crate) unsafe fn frame_mut_len(&mut self, addr: u64, len: u32) -> &mut [u8] {
        match &self.pool {
            Some(p) if p.allocates() || self.lent > 0 => {
                // SAFETY: as for `frame_mut_at`; the caller passes at most the frame's room.
                unsafe { p.region().bytes_mut(addr, len).unwrap_or(&mut []) }
            }
            _ => &mut [],
        }
    }

    /// The whole frame from `addr` to the frame's end, to fill in.
    ///
    /// # Safety
    /// `addr` was allocated from this batch's pool by [`Batch::alloc_addr`] (or `alloc_big_addr`)
    /// and nobody else holds its frame: no descriptor anywhere names it.
    #[inline(always)]
    pub(crate) unsafe fn frame_mut_at(&mut self, addr: u64) -> &mut [u8] {
        match &self.pool {
            Some(p) if self.lent > 0 => {
                let room = self.lent_room(addr);
                // SAFETY: a lent frame is the batch's alone until its owner takes it back
                // (the lender's contract, `lend`), `room` bytes from its packet address;
                // `&mut self` prevents aliasing through this batch.
                unsafe { p.region().bytes_mut(addr, room).unwrap_or(&mut []) }
            }
            Some(p) if p.allocates() => {
                let end = p.frame_start(addr) + p.frame_size_at(addr);
                // SAFETY: per the contract the frame is exclusively ours; `&mut self` prevents
                // aliasing through this batch.
                unsafe {
                    p.region()
                        .bytes_mut(addr, (end - addr) as u32)
                        .unwrap_or(&mut [])
                }
            }
            _ => &mut [],
        }
    }

    /// Packets with their bytes.
    #[inline]
    pub fn iter(&self) -> impl Iterator<Item = Pkt<'_>> + '_ {
        (0..self.len).map(move |i| Pkt {
            desc: &self.descs[i],
            data: self.data(i),
        })
    }

    /// Takes a free frame of the pool (from the local cache, refilled 64 at a time) to fill in
    /// and append: None when the batch is full, it has no pool that allocates, or the pool is
    /// exhausted. Dropping the [`Fresh`] without pushing it gives the frame back.
    #[inline(always)]
    pub fn alloc(&mut self) -> Option<Fresh<'_>> {
        if self.is_full() {
            return None;
        }
        let addr = self.alloc_addr()?;
        Some(Fresh::new(self, addr))
    }

    /// Takes a free big frame of the pool (see [`Pool`]'s big frames), for a packet longer than
    /// a regular frame; None as [`Batch::alloc`], or when the pool has no free big frame.
    #[inline]
    pub fn alloc_big(&mut self) -> Option<Fresh<'_>> {
        if self.is_full() {
            return None;
        }
        let addr = self.alloc_big_addr()?;
        Some(Fresh::new(self, addr))
    }

    /// Copies `data` into a fresh frame and appends it (length and wire length `data.len()`,
    /// time `ts`); false when the batch is full, the pool is exhausted or `data` does not fit a
    /// frame.
    #[inline]
    pub fn push_copy(&mut self, data: &[u8], ts: u64) -> bool {
        let Some(mut f) = self.alloc() else {
            return false;
        };
        let Some(buf) = f.buf().get_mut(..data.len()) else {
            return false; // too long for a frame; `f` gives its frame back
        };
        buf.copy_from_slice(data);
        f.push(Desc {
            len: data.len() as u32,
            wire_len: data.len() as u32,
            ts,
            ..Desc::default()
        });
        true
    }

    /// A free frame's packet address (after the headroom), or None when the pool is exhausted;
    /// the caller now owns the frame (and must push it, hand it to a kernel ring, or free it).
    #[inline(always)]
    pub(crate) fn alloc_addr(&mut self) -> Option<u64> {
        if let Some(a) = self.cache.pop() {
            return Some(a);
        }
        let c = self.pool.as_ref()?.take_chunk()?;
        self.cache.extend_from_slice(&c.addrs[..c.n as usize]);
        self.cache.pop()
    }

    /// A free big frame's packet address, as [`Batch::alloc_addr`].
    #[inline]
    pub(crate) fn alloc_big_addr(&mut self) -> Option<u64> {
        if self.lent > 0 {
            return self.lent_big.pop();
        }
        self.pool.as_ref()?.take_big()
    }

    /// Returns a frame to the pool (through the local cache; a big frame directly). The caller
    /// owned it (crate code: freeing a frame someone still uses would hand it out twice).
    #[inline(always)]
    pub(crate) fn free_addr(&mut self, addr: u64) {
        if self.lent > 0 {
            // back to the lent frames
            if addr >= self.lent_big_from {
                self.lent_big.push(addr);
            } else {
                self.cache.push(addr);
            }
            return;
        }
        let Some(pool) = &self.pool else { return };
        if !pool.allocates() {
            return;
        }
        if pool.is_big(addr) {
            pool.give_big(addr);
            return;
        }
        self.cache
            .push(pool.frame_start(addr) + pool.headroom() as u64);
        spill(&mut self.cache, pool);
    }

    /// Frees every packet's frame and empties the batch.
    #[inline]
    pub fn clear(&mut self) {
        if self.lent == 0 {
            if let Some(pool) = self.pool.as_ref().filter(|p| p.allocates()) {
                // The common case, in one pass: frames of the batch's own pool go back to its
                // local cache (a big frame to the pool), a chunk to the pool when it is full.
                let hr = u64::from(pool.headroom());
                for d in &self.descs[..self.len] {
                    if d.flags & Desc::F_SHARED != 0 {
                        continue;
                    }
                    if pool.is_big(d.addr) {
                        pool.give_big(d.addr);
                    } else {
                        self.cache.push(pool.frame_start(d.addr) + hr);
                    }
                }
                spill(&mut self.cache, pool);
            }
        } else {
            for i in 0..self.len {
                let a = self.descs[i].addr;
                if self.descs[i].flags & Desc::F_SHARED == 0 {
                    self.free_addr(a);
                }
            }
        }
        self.len = 0;
    }

    /// Drops the first `n` descriptors without freeing them (a port took their frames).
    #[inline]
    pub fn consume(&mut self, n: usize) {
        let n = n.min(self.len);
        self.descs.copy_within(n..self.len, 0);
        self.len -= n;
    }

    /// Forgets the descriptors from `len` on without freeing them (they were never this
    /// batch's to free: a port takes back what it just appended).
    #[inline]
    pub fn forget_from(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// Forgets all descriptors without freeing them (a port took their frames).
    #[inline(always)]
    pub fn forget(&mut self) {
        self.len = 0;
    }

    /// Frees the first `n` packets' frames and removes them.
    #[inline]
    pub fn free_front(&mut self, n: usize) {
        let n = n.min(self.len);
        for i in 0..n {
            let d = self.descs[i];
            if d.flags & Desc::F_SHARED == 0 {
                self.free_addr(d.addr);
            }
        }
        self.consume(n);
    }

    /// Keeps the packets for which `keep` says true, frees the others; returns how many it freed.
    #[inline]
    pub fn retain(&mut self, mut keep: impl FnMut(Pkt<'_>) -> bool) -> usize {
        let mut w = 0;
        let mut dropped = 0;
        for i in 0..self.len {
            let k = keep(Pkt {
                desc: &self.descs[i],
                data: self.data(i),
            });
            if k {
                self.descs[w] = self.descs[i];
                w += 1;
            } else {
                let d = self.descs[i];
                if d.flags & Desc::F_SHARED == 0 {
                    self.free_addr(d.addr);
                }
                dropped += 1;
            }
        }
        self.len = w;
        dropped
    }

    /// Returns the local cache of free frames to the pool.
    pub fn flush_cache(&mut self) {
        if self.lent > 0 {
            return; // lent frames go back to their owner only (`unlend`)
        }
        let Some(pool) = &self.pool else {
            self.cache.clear();
            return;
        };
        while !self.cache.is_empty() {
            let n = self.cache.len().min(CHUNK);
            let mut c = Chunk {
                n: n as u32,
                addrs: [0; CHUNK],
            };
            let from = self.cache.len() - n;
            c.addrs[..n].copy_from_slice(&self.cache[from..]);
            self.cache.truncate(from);
            pool.give_chunk(c);
        }
    }
}

/// A free frame taken by [`Batch::alloc`], not yet a packet: write the packet into
/// [`Fresh::buf`], then [`Fresh::push`] it onto the batch (its descriptor gets the frame's
/// address). Dropped without pushing, it gives the frame back. It borrows the batch, so the frame
/// can be nobody else's.
pub struct Fresh<'a> {
    batch: &'a mut Batch,
    addr: u64,
    room: u32,
}

impl<'a> Fresh<'a> {
    #[inline(always)]
    fn new(batch: &'a mut Batch, addr: u64) -> Fresh<'a> {
        if batch.lent > 0 {
            let room = batch.lent_room(addr);
            return Fresh { batch, addr, room };
        }
        let room = batch.pool.as_ref().map_or(0, |p| {
            (p.frame_start(addr) + p.frame_size_at(addr) - addr).min(u32::MAX as u64) as u32
        });
        Fresh { batch, addr, room }
    }

    /// The frame's packet address in the pool's region.
    #[inline(always)]
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// Bytes a packet may take in this frame (from the address to the frame's end).
    #[inline(always)]
    pub fn room(&self) -> u32 {
        self.room
    }

    /// The frame's bytes from the packet address on, to write the packet into.
    #[inline(always)]
    pub fn buf(&mut self) -> &mut [u8] {
        let (addr, room) = (self.addr, self.room);
        // SAFETY: `addr` came from this batch's `alloc_addr`/`alloc_big_addr` and is held only by
        // this guard (no descriptor names it until `push`); the guard borrows the batch mutably;
        // `room` (computed once at `alloc`) is what lies between `addr` and the frame's end.
        unsafe { self.batch.frame_mut_len(addr, room) }
    }

    /// Appends the packet: `d` with the frame's address, its length cut to the frame's room and
    /// its wire length at least that. (The batch had room: `alloc` refuses on a full batch.)
    #[inline(always)]
    pub fn push(self, mut d: Desc) {
        d.addr = self.addr;
        d.len = d.len.min(self.room);
        d.wire_len = d.wire_len.max(d.len);
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: `this` is never used or dropped again; the reference is moved out once.
        let batch: &mut Batch = unsafe { std::ptr::read(&this.batch) };
        let _ = batch.push(d);
    }
}

impl Fresh<'_> {
    /// The descriptor `d` with the frame's address, for crate code that moves it on without this
    /// batch (onto a wire's ring): the frame's ownership goes with the descriptor.
    #[inline(always)]
    pub(crate) fn into_desc(self, mut d: Desc) -> Desc {
        d.addr = self.addr;
        d.len = d.len.min(self.room);
        d.wire_len = d.wire_len.max(d.len);
        std::mem::forget(self);
        d
    }
}

impl Drop for Fresh<'_> {
    fn drop(&mut self) {
        self.batch.free_addr(self.addr);
    }
}

/// Gives whole chunks of a batch's local frame cache back to `pool` while it holds three or more
/// (the cache keeps two chunks and room for a batch's frees, so it never reallocates).
#[inline(always)]
fn spill(cache: &mut Vec<u64>, pool: &Pool) {
    while cache.len() >= 3 * CHUNK {
        let mut c = Chunk {
            n: CHUNK as u32,
            addrs: [0; CHUNK],
        };
        let from = cache.len() - CHUNK;
        c.addrs.copy_from_slice(&cache[from..]);
        cache.truncate(from);
        pool.give_chunk(c);
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        self.clear();
        self.flush_cache();
    }
}

impl std::fmt::Debug for Batch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batch")
            .field("len", &self.len)
            .field("descs", &self.descs())
            .finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::mem::PoolConfig;

    #[test]
    fn direction_words_follow_the_flags() {
        let mut d = Desc::default();
        assert_eq!(d.direction(), None);
        d.flags = Desc::F_INBOUND | Desc::F_SHARED;
        assert_eq!(d.direction(), Some("in"));
        d.flags = Desc::F_OUTBOUND;
        assert_eq!(d.direction(), Some("out"));
    }

    #[test]
    fn alloc_fill_free_roundtrip() {
        let pool = Arc::new(
            Pool::new(&PoolConfig {
                frames: 128,
                ..Default::default()
            })
            .unwrap(),
        );
        assert_eq!(pool.free_frames(), 128);
        let mut b = Batch::with_pool(&pool);
        for i in 0..BATCH {
            let mut f = b.alloc().unwrap();
            f.buf()[..4].copy_from_slice(&(i as u32).to_be_bytes());
            f.push(Desc {
                len: 4,
                wire_len: 4,
                ..Default::default()
            });
        }
        assert!(b.is_full());
        assert!(b.alloc().is_none(), "a full batch hands out no frame");
        assert!(!b.push_copy(b"x", 0));
        for (i, p) in b.iter().enumerate() {
            assert_eq!(p.data, (i as u32).to_be_bytes());
        }
        let freed = b.retain(|p| p.data[3] % 2 == 0);
        assert_eq!(freed, 32);
        assert_eq!(b.len(), 32);
        b.clear();
        drop(b);
        assert_eq!(pool.free_frames(), 128);
    }

    #[test]
    fn pool_exhaustion_is_reported() {
        let pool = Arc::new(
            Pool::new(&PoolConfig {
                frames: 64,
                ..Default::default()
            })
            .unwrap(),
        );
        let mut b = Batch::with_pool(&pool);
        let mut got = Vec::new();
        while let Some(a) = b.alloc_addr() {
            got.push(a);
        }
        assert_eq!(got.len(), 64);
        got.sort();
        got.dedup();
        assert_eq!(got.len(), 64);
        for a in got {
            b.free_addr(a);
        }
        drop(b);
        assert_eq!(pool.free_frames(), 64);
    }

    #[test]
    fn a_fresh_frame_dropped_unpushed_goes_back_and_lengths_stay_in_the_frame() {
        let pool = Arc::new(
            Pool::new(&PoolConfig {
                frames: 64,
                ..Default::default()
            })
            .unwrap(),
        );
        let mut b = Batch::with_pool(&pool);
        for _ in 0..1000 {
            let mut f = b.alloc().unwrap();
            f.buf()[0] = 1; // written, then abandoned: the frame returns
        }
        let f = b.alloc().unwrap();
        let room = f.room();
        f.push(Desc {
            len: 1 << 20, // longer than the frame: cut to it
            ..Default::default()
        });
        assert_eq!(b.descs()[0].len, room);
        assert!(b.descs()[0].wire_len >= room);
        assert_eq!(b.data_mut(0).len(), room as usize);
        assert!(
            !b.push_copy(&vec![0u8; room as usize + 1], 0),
            "too long for a frame"
        );
        b.clear();
        drop(b);
        assert_eq!(pool.free_frames(), 64);
    }

    #[test]
    fn slots_past_the_batch_give_no_bytes() {
        let pool = Arc::new(Pool::new(&PoolConfig::default()).unwrap());
        let mut b = Batch::with_pool(&pool);
        assert!(b.push_copy(b"hello", 0));
        b.consume(1); // a port took the frame: the slot is stale
        assert!(b.data(0).is_empty());
        assert!(b.data_mut(0).is_empty());
        assert!(b.push_copy(b"again", 0));
        b.clear();
        assert!(b.data_mut(0).is_empty());
        assert!(b.data(63).is_empty());
    }

    #[test]
    fn bad_config_is_an_error() {
        assert!(Pool::new(&PoolConfig {
            frame_size: 1000,
            ..Default::default()
        })
        .is_err());
        assert!(Pool::new(&PoolConfig {
            headroom: 1024,
            ..Default::default()
        })
        .is_err());
    }
}

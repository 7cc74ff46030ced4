//! Descriptors and batches.

use super::pool::{Chunk, CHUNK};
use super::Pool;
use std::sync::Arc;

/// Most descriptors a batch holds: the unit of every call on the data path.
pub const BATCH: usize = 64;

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
/// A batch owns the frames its descriptors name: [`Batch::clear`] (or drop) returns them to the
/// pool, a port's `tx` takes them over. Frames are traded with the pool 64 at a time.
pub struct Batch {
    descs: [Desc; BATCH],
    len: usize,
    limit: usize,
    pool: Option<Arc<Pool>>,
    cache: Vec<u64>,
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
        self.clear();
        self.flush_cache();
        self.pool = Some(pool.clone());
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

    /// The descriptors.
    #[inline(always)]
    pub fn descs(&self) -> &[Desc] {
        &self.descs[..self.len]
    }

    /// The descriptors, to change lengths, hashes or flags.
    #[inline(always)]
    pub fn descs_mut(&mut self) -> &mut [Desc] {
        &mut self.descs[..self.len]
    }

    /// Appends a descriptor whose frame this batch now owns. Returns false when full.
    #[inline(always)]
    pub fn push(&mut self, d: Desc) -> bool {
        if self.len >= self.limit {
            return false;
        }
        self.descs[self.len] = d;
        self.len += 1;
        true
    }

    /// Appends descriptors from a slice (as many as fit); returns how many.
    #[inline]
    pub fn extend(&mut self, ds: &[Desc]) -> usize {
        let n = ds.len().min(self.room());
        self.descs[self.len..self.len + n].copy_from_slice(&ds[..n]);
        self.len += n;
        n
    }

    /// The bytes of packet `i` (empty if the descriptor is out of the region's bounds).
    #[inline(always)]
    pub fn data(&self, i: usize) -> &[u8] {
        let d = &self.descs[i];
        match &self.pool {
            Some(p) => p.region().bytes(d.addr, d.len).unwrap_or(&[]),
            None => &[],
        }
    }

    /// The bytes of packet `i`, writable (empty if shared or out of bounds).
    #[inline(always)]
    pub fn data_mut(&mut self, i: usize) -> &mut [u8] {
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

    /// The whole frame of a fresh descriptor, to fill in (from the address to the frame's end).
    #[inline(always)]
    pub fn frame_mut(&mut self, addr: u64) -> &mut [u8] {
        match &self.pool {
            Some(p) if p.allocates() => {
                let end = p.frame_start(addr) + p.frame_size_at(addr);
                // SAFETY: `addr` was just allocated to this batch (see alloc), nobody else holds
                // its frame; `&mut self` prevents aliasing.
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

    /// Takes a free frame of the pool (from the local cache, refilled 64 at a time); returns its
    /// packet address (after the headroom), or None when the pool is exhausted.
    #[inline(always)]
    pub fn alloc(&mut self) -> Option<u64> {
        if let Some(a) = self.cache.pop() {
            return Some(a);
        }
        let c = self.pool.as_ref()?.take_chunk()?;
        self.cache.extend_from_slice(&c.addrs[..c.n as usize]);
        self.cache.pop()
    }

    /// Takes a free big frame of the pool (see [`Pool`]'s big frames), for a packet longer than
    /// a regular frame; None when none is free or the pool has none.
    #[inline]
    pub fn alloc_big(&mut self) -> Option<u64> {
        self.pool.as_ref()?.take_big()
    }

    /// Returns a frame to the pool (through the local cache; a big frame directly).
    #[inline(always)]
    pub fn free_addr(&mut self, addr: u64) {
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
        if self.cache.len() >= 3 * CHUNK {
            let mut c = Chunk {
                n: CHUNK as u32,
                addrs: [0; CHUNK],
            };
            let from = self.cache.len() - CHUNK;
            c.addrs.copy_from_slice(&self.cache[from..]);
            self.cache.truncate(from);
            pool.give_chunk(c);
        }
    }

    /// Frees every packet's frame and empties the batch.
    #[inline]
    pub fn clear(&mut self) {
        if self.pool.as_ref().is_some_and(|p| p.allocates()) {
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
            let a = b.alloc().unwrap();
            b.frame_mut(a)[..4].copy_from_slice(&(i as u32).to_be_bytes());
            assert!(b.push(Desc {
                addr: a,
                len: 4,
                wire_len: 4,
                ..Default::default()
            }));
        }
        assert!(b.is_full());
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
        while let Some(a) = b.alloc() {
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

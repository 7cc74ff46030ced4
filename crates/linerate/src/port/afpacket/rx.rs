//! The TPACKET_V3 receive ring: blocks of packets the kernel hands to user space and back.
//!
//! The ring is one mapping cut into `blocks` blocks of `block_size` bytes. The kernel fills a
//! block with variable-size packets, then flips its status to `TP_STATUS_USER`; we read packets in
//! place (descriptors point into the mapping: zero copy) and flip the status back to
//! `TP_STATUS_KERNEL` once nobody needs them. The rule: a block whose packets were all handed out
//! is released at the start of the next `fill` that the caller allows (see [`RxBlocks::release`]),
//! so a batch's bytes stay valid until the next receive on the same port.

use crate::mem::{Batch, Desc, Pool};
use crate::port::{DropReason, Drops};
use std::mem::{offset_of, size_of};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// Offset of `block_status` in a block (`tpacket_block_desc.hdr.bh1.block_status`).
const STATUS_OFF: usize =
    offset_of!(libc::tpacket_block_desc, hdr) + offset_of!(libc::tpacket_hdr_v1, block_status);
/// Offset of `num_pkts` in a block.
const NUM_OFF: usize =
    offset_of!(libc::tpacket_block_desc, hdr) + offset_of!(libc::tpacket_hdr_v1, num_pkts);
/// Offset of `offset_to_first_pkt` in a block.
const FIRST_OFF: usize = offset_of!(libc::tpacket_block_desc, hdr)
    + offset_of!(libc::tpacket_hdr_v1, offset_to_first_pkt);
/// Size of a packet header.
const HDR3: usize = size_of::<libc::tpacket3_hdr>();
/// Size of a block header.
const BLOCK_HDR: usize = size_of::<libc::tpacket_block_desc>();

/// A cursor over the blocks of a mapped TPACKET_V3 ring.
pub(super) struct RxBlocks {
    pool: Arc<Pool>,
    block_size: usize,
    blocks: usize,
    snaplen: u32,
    /// Block being read.
    cur: usize,
    /// Packets of `cur` not yet handed out (0: `cur` not opened yet).
    left: u32,
    /// Offset in `cur` of the next packet's header.
    off: usize,
    /// First block fully handed out and not yet given back.
    release_from: usize,
    /// Blocks fully handed out and not yet given back (`release_from..cur`).
    to_release: usize,
}

impl RxBlocks {
    /// A cursor over `pool`'s region, which must hold `blocks` blocks of `block_size` bytes
    /// laid out by the kernel (or by a test acting as one).
    pub(super) fn new(pool: Arc<Pool>, block_size: usize, blocks: usize, snaplen: u32) -> Self {
        assert!(block_size >= 4096 && block_size.is_power_of_two() && blocks > 0);
        assert!(pool.region().len() >= block_size * blocks);
        RxBlocks {
            pool,
            block_size,
            blocks,
            snaplen,
            cur: 0,
            left: 0,
            off: 0,
            release_from: 0,
            to_release: 0,
        }
    }

    /// The pool that names the ring.
    pub(super) fn pool(&self) -> &Arc<Pool> {
        &self.pool
    }

    #[inline(always)]
    fn status(&self, blk: usize) -> &AtomicU32 {
        debug_assert!(blk < self.blocks);
        // SAFETY: the block header lies inside the mapping (blk < blocks, checked at creation
        // that blocks * block_size fit); blocks are page aligned so the u32 at offset 8 is
        // aligned; the kernel writes it concurrently, hence atomic access only. The mapping
        // lives as long as `self.pool`.
        unsafe {
            &*(self
                .pool
                .region()
                .as_ptr()
                .add(blk * self.block_size + STATUS_OFF) as *const AtomicU32)
        }
    }

    #[inline(always)]
    fn header_u32(&self, blk: usize, off: usize) -> u32 {
        // SAFETY: as in `status`; the caller saw TP_STATUS_USER with acquire ordering, so the
        // kernel no longer writes this block and its writes are visible.
        unsafe {
            std::ptr::read_volatile(
                self.pool.region().as_ptr().add(blk * self.block_size + off) as *const u32
            )
        }
    }

    #[inline(always)]
    fn finish_block(&mut self) {
        self.left = 0;
        self.to_release += 1;
        self.cur = if self.cur + 1 == self.blocks {
            0
        } else {
            self.cur + 1
        };
    }

    /// Gives back to the kernel the blocks that were fully handed out, except those that
    /// packets still in `batch` (about to be appended to) point into.
    #[inline]
    pub(super) fn release(&mut self, batch: &Batch) {
        let mut n = self.to_release;
        if n == 0 {
            return;
        }
        if !batch.is_empty() && batch.pool().is_some_and(|p| Arc::ptr_eq(p, &self.pool)) {
            for d in batch.descs() {
                let blk = (d.addr as usize / self.block_size) % self.blocks;
                let dist = (blk + self.blocks - self.release_from) % self.blocks;
                n = n.min(dist);
            }
        }
        for _ in 0..n {
            self.status(self.release_from)
                .store(libc::TP_STATUS_KERNEL, Ordering::Release);
            self.release_from = if self.release_from + 1 == self.blocks {
                0
            } else {
                self.release_from + 1
            };
        }
        self.to_release -= n;
    }

    /// Appends ready packets to `batch` (bound to the ring's pool) until it is full or no block
    /// is ready; returns (packets, wire bytes). Inconsistent headers are skipped and counted.
    #[inline]
    pub(super) fn fill(&mut self, batch: &mut Batch, drops: &mut Drops) -> (usize, u64) {
        let base = self.pool.region().as_ptr();
        let bs = self.block_size;
        let room = batch.room();
        let mut n = 0;
        let mut bytes = 0u64;
        while n < room {
            if self.left == 0 {
                // Every block handed out and none given back yet: nothing new can be there.
                if self.to_release >= self.blocks {
                    break;
                }
                let st = self.status(self.cur).load(Ordering::Acquire);
                if st & libc::TP_STATUS_USER == 0 {
                    break;
                }
                let num = self.header_u32(self.cur, NUM_OFF);
                let first = self.header_u32(self.cur, FIRST_OFF) as usize;
                if num == 0 {
                    self.finish_block();
                    continue;
                }
                if first < BLOCK_HDR {
                    drops.add(DropReason::Malformed, num as u64);
                    self.finish_block();
                    continue;
                }
                self.left = num;
                self.off = first;
            }
            if self.off + HDR3 > bs {
                drops.add(DropReason::Malformed, self.left as u64);
                self.finish_block();
                continue;
            }
            let blk_start = self.cur * bs;
            // SAFETY: the header lies inside the block (checked above), the block inside the
            // mapping; the block is owned by user space (TP_STATUS_USER seen with acquire).
            let h: libc::tpacket3_hdr =
                unsafe { std::ptr::read_unaligned(base.add(blk_start + self.off) as *const _) };
            let data = self.off + h.tp_mac as usize;
            if data + h.tp_snaplen as usize <= bs {
                batch.push(Desc {
                    addr: (blk_start + data) as u64,
                    ts: h.tp_sec as u64 * 1_000_000_000 + h.tp_nsec as u64,
                    len: h.tp_snaplen.min(self.snaplen),
                    wire_len: h.tp_len,
                    hash: 0,
                    port: 0,
                    flags: 0,
                });
                n += 1;
                bytes += h.tp_len as u64;
            } else {
                drops.add(DropReason::Malformed, 1);
            }
            self.left -= 1;
            if self.left == 0 {
                self.finish_block();
            } else if h.tp_next_offset == 0 {
                drops.add(DropReason::Malformed, self.left as u64);
                self.finish_block();
            } else {
                self.off += h.tp_next_offset as usize;
            }
        }
        (n, bytes)
    }

    /// Gives every block back to the kernel, discarding what was not handed out yet; returns
    /// how many packets were discarded. Packets handed out before are invalid afterwards.
    pub(super) fn discard_all(&mut self) -> u64 {
        let mut discarded = 0u64;
        loop {
            self.to_release = self.to_release.min(self.blocks);
            let empty = Batch::new();
            self.release(&empty);
            if self.left > 0 {
                discarded += self.left as u64;
                self.finish_block();
                continue;
            }
            if self.status(self.cur).load(Ordering::Acquire) & libc::TP_STATUS_USER == 0 {
                return discarded;
            }
            discarded += self.header_u32(self.cur, NUM_OFF) as u64;
            self.finish_block();
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::mem::Region;

    const BS: usize = 8192;

    /// Acts as the kernel: writes a block of packets `sizes` into block `blk` and hands it over.
    fn kernel_fill(pool: &Pool, blk: usize, sizes: &[u32], tag: u8) {
        let base = pool.region().as_ptr();
        let start = blk * BS;
        let first = 48usize;
        let mut off = first;
        for (i, &len) in sizes.iter().enumerate() {
            let next = if i + 1 == sizes.len() {
                0
            } else {
                (HDR3 + 2 + len as usize).div_ceil(16) * 16
            };
            let h = libc::tpacket3_hdr {
                tp_next_offset: next as u32,
                tp_sec: 7,
                tp_nsec: 9,
                tp_snaplen: len,
                tp_len: len + 100,
                tp_status: libc::TP_STATUS_USER,
                tp_mac: (HDR3 + 2) as u16,
                tp_net: 0,
                hv1: libc::tpacket_hdr_variant1 {
                    tp_rxhash: 0,
                    tp_vlan_tci: 0,
                    tp_vlan_tpid: 0,
                    tp_padding: 0,
                },
                tp_padding: [0; 8],
            };
            // SAFETY: test memory, in bounds of the region (sizes chosen to fit a block).
            unsafe {
                std::ptr::write_unaligned(base.add(start + off) as *mut libc::tpacket3_hdr, h);
                std::ptr::write_bytes(
                    base.add(start + off + HDR3 + 2),
                    tag + i as u8,
                    len as usize,
                );
                std::ptr::write(base.add(start + NUM_OFF) as *mut u32, sizes.len() as u32);
                std::ptr::write(base.add(start + FIRST_OFF) as *mut u32, first as u32);
            }
            off += next;
        }
        if sizes.is_empty() {
            // SAFETY: as above.
            unsafe { std::ptr::write(base.add(start + NUM_OFF) as *mut u32, 0) };
        }
        status_of(pool, blk).store(libc::TP_STATUS_USER, Ordering::Release);
    }

    fn status_of(pool: &Pool, blk: usize) -> &AtomicU32 {
        // SAFETY: test memory, aligned and in bounds.
        unsafe { &*(pool.region().as_ptr().add(blk * BS + STATUS_OFF) as *const AtomicU32) }
    }

    fn ring(blocks: usize) -> (Arc<Pool>, RxBlocks) {
        let pool = Arc::new(Pool::external(Region::anon(BS * blocks).unwrap()));
        let rx = RxBlocks::new(pool.clone(), BS, blocks, 65535);
        (pool, rx)
    }

    #[test]
    fn reads_packets_across_blocks_and_releases_on_next_call() {
        let (pool, mut rx) = ring(4);
        kernel_fill(&pool, 0, &[60, 61, 62], 10);
        kernel_fill(&pool, 1, &[], 0);
        kernel_fill(&pool, 2, &[100, 200], 20);
        let mut b = Batch::new();
        b.bind(&pool);
        let mut drops = Drops::default();
        rx.release(&b);
        let (n, bytes) = rx.fill(&mut b, &mut drops);
        assert_eq!(n, 5);
        assert_eq!(bytes, 60 + 61 + 62 + 100 + 200 + 500);
        let lens: Vec<u32> = b.descs().iter().map(|d| d.len).collect();
        assert_eq!(lens, [60, 61, 62, 100, 200]);
        for (i, p) in b.iter().enumerate() {
            let tag = [10u8, 11, 12, 20, 21][i];
            assert!(p.data.iter().all(|&x| x == tag));
            assert_eq!(p.desc.ts, 7_000_000_009);
        }
        // Blocks are still user-owned while the caller may look at the batch.
        assert_eq!(
            status_of(&pool, 0).load(Ordering::Relaxed),
            libc::TP_STATUS_USER
        );
        b.clear();
        rx.release(&b);
        for blk in 0..3 {
            assert_eq!(
                status_of(&pool, blk).load(Ordering::Relaxed),
                libc::TP_STATUS_KERNEL
            );
        }
        assert_eq!(rx.fill(&mut b, &mut drops).0, 0);
        assert_eq!(drops.total(), 0);
    }

    #[test]
    fn batch_limit_splits_a_block_and_keeps_referenced_blocks() {
        let (pool, mut rx) = ring(2);
        let sizes = [40u32; 70];
        kernel_fill(&pool, 0, &sizes, 0);
        let mut b = Batch::new();
        b.bind(&pool);
        let mut drops = Drops::default();
        assert_eq!(rx.fill(&mut b, &mut drops).0, 64);
        b.consume(60);
        // Four packets of block 0 are still in the batch: block 0 stays ours.
        assert_eq!(rx.fill(&mut b, &mut drops).0, 6);
        rx.release(&b);
        assert_eq!(
            status_of(&pool, 0).load(Ordering::Relaxed),
            libc::TP_STATUS_USER
        );
        b.clear();
        rx.release(&b);
        assert_eq!(
            status_of(&pool, 0).load(Ordering::Relaxed),
            libc::TP_STATUS_KERNEL
        );
    }

    #[test]
    fn wrapped_ring_never_rereads_unreleased_blocks() {
        let (pool, mut rx) = ring(2);
        kernel_fill(&pool, 0, &[50], 1);
        kernel_fill(&pool, 1, &[50], 2);
        let mut b = Batch::new();
        b.bind(&pool);
        let mut drops = Drops::default();
        assert_eq!(rx.fill(&mut b, &mut drops).0, 2);
        // Both blocks handed out, none released: the stale USER status of block 0 is ignored.
        assert_eq!(rx.fill(&mut b, &mut drops).0, 0);
    }

    #[test]
    fn inconsistent_headers_are_counted_not_followed() {
        let (pool, mut rx) = ring(2);
        kernel_fill(&pool, 0, &[50, 50], 1);
        // Corrupt the first packet's snaplen so it runs past the block.
        // SAFETY: test memory in bounds.
        unsafe {
            let h = pool.region().as_ptr().add(48) as *mut libc::tpacket3_hdr;
            (*h).tp_snaplen = 10_000;
        }
        let mut b = Batch::new();
        b.bind(&pool);
        let mut drops = Drops::default();
        assert_eq!(rx.fill(&mut b, &mut drops).0, 1);
        assert_eq!(drops.get(DropReason::Malformed), 1);
    }

    #[test]
    fn discard_all_gives_everything_back() {
        let (pool, mut rx) = ring(4);
        kernel_fill(&pool, 0, &[40; 70], 0);
        kernel_fill(&pool, 1, &[40; 3], 0);
        let mut b = Batch::new();
        b.bind(&pool);
        let mut drops = Drops::default();
        assert_eq!(rx.fill(&mut b, &mut drops).0, 64);
        assert_eq!(rx.discard_all(), 6 + 3);
        for blk in 0..4 {
            assert_eq!(
                status_of(&pool, blk).load(Ordering::Relaxed),
                libc::TP_STATUS_KERNEL
            );
        }
        b.clear();
        kernel_fill(&pool, 2, &[40], 5);
        assert_eq!(rx.fill(&mut b, &mut drops).0, 1);
        assert_eq!(b.data(0)[0], 5);
    }
}

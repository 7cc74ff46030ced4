//! The TPACKET_V3 receive ring: blocks of packets the kernel hands to user space and back.
//!
//! The ring is one mapping cut into `blocks` blocks of `block_size` bytes. The kernel fills a
//! block with variable-size packets, then flips its status to `TP_STATUS_USER`; we read packets in
//! place (descriptors point into the mapping: zero copy) and flip the status back to
//! `TP_STATUS_KERNEL` once nobody needs them. The rule: a block whose packets were all handed out
//! is released at the start of the next `fill` that the caller allows (see [`RxBlocks::release`]),
//! so a batch's bytes stay valid until the next receive on the same port.
//!
//! **VLAN tags.** The kernel takes the outer 802.1Q/802.1ad tag out of a received frame and
//! reports it in the packet header (`TP_STATUS_VLAN_VALID`, `tp_vlan_tci`, and the TPID with
//! `TP_STATUS_VLAN_TPID_VALID`); inner tags of QinQ stay in the frame. As libpcap does, the port
//! asks for [`VLAN_HEADROOM`] spare bytes in front of each packet (`PACKET_RESERVE`) and puts the
//! tag back in place: the two MAC addresses move 4 bytes earlier and the tag goes between them
//! and the EtherType. The frame is then byte for byte what was on the wire. Only tagged frames
//! pay (a 12-byte move and a 4-byte store in the block they already occupy); nothing is copied.

use crate::mem::{Batch, Desc, Pool};
use crate::port::{Capture, DropReason, Drops};
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
/// Spare bytes asked in front of each packet (`PACKET_RESERVE`): room for one VLAN tag.
pub(super) const VLAN_HEADROOM: u32 = 4;
/// Bytes of the two MAC addresses, which move in front of a re-inserted tag.
const MACS: usize = 12;
/// The 802.1Q TPID, for kernels that report a tag without its TPID.
const TPID_8021Q: u16 = 0x8100;
/// Offset of the `sockaddr_ll` the kernel writes after each packet header (TPACKET_ALIGN).
const SLL_OFF: usize = (HDR3 + 15) & !15;
/// Size of a TPACKET_V2 frame header.
const HDR2: usize = size_of::<libc::tpacket2_hdr>();
/// Offset of the `sockaddr_ll` after a TPACKET_V2 frame header.
const SLL_OFF2: usize = (HDR2 + 15) & !15;

/// A packet header of either ring version, as the reader needs it.
struct Hdr {
    next: u32,
    sec: u32,
    nsec: u32,
    snaplen: u32,
    len: u32,
    status: u32,
    mac: u16,
    tci: u32,
    tpid: u16,
}
/// Size of a `sockaddr_ll`.
const SLL_LEN: usize = size_of::<libc::sockaddr_ll>();
/// Size of a Linux cooked v2 (LINKTYPE_LINUX_SLL2) header.
pub(super) const SLL2_LEN: usize = 20;
/// `sll_pkttype` of a packet the host sent.
const PACKET_OUTGOING: u8 = 4;

/// What the port does with each packet's `sockaddr_ll`: which direction it takes, and
/// whether it builds a cooked header from it.
#[derive(Clone, Copy, Debug)]
pub(super) struct Meta {
    /// Packets of which direction are handed out (the others are skipped, as if the kernel
    /// had not delivered them: the kernel does so itself for `Capture::In`).
    pub(super) dir: Capture,
    /// The loopback interface's index: a packet sent on it is seen twice (sent, then
    /// received); its sent copy is skipped, as libpcap does.
    pub(super) lo_ifindex: i32,
    /// The socket is SOCK_DGRAM (`afpacket:any`): put a LINUX_SLL2 header in front of each
    /// packet, built from its `sockaddr_ll`, in the room the kernel leaves before it.
    pub(super) cooked: bool,
}

impl Default for Meta {
    fn default() -> Self {
        Meta {
            dir: Capture::InOut,
            lo_ifindex: -1,
            cooked: false,
        }
    }
}

/// A cursor over the blocks of a mapped TPACKET_V3 ring, or over the frames of a TPACKET_V2
/// ring (each frame then is a "block" of one packet, whose header starts the frame: the
/// kernel hands each frame over as soon as its packet is in, with no block timeout).
pub(super) struct RxBlocks {
    /// TPACKET_V2 frames (`block_size` is then the frame size).
    v2: bool,
    pool: Arc<Pool>,
    block_size: usize,
    blocks: usize,
    snaplen: u32,
    /// Put stripped VLAN tags back (Ethernet links).
    vlan: bool,
    /// Direction and cooked headers.
    meta: Meta,
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
    /// laid out by the kernel (or by a test acting as one). `vlan`: put tags the kernel took
    /// out of Ethernet frames back in (the ring must have [`VLAN_HEADROOM`] reserved).
    pub(super) fn new(
        pool: Arc<Pool>,
        block_size: usize,
        blocks: usize,
        snaplen: u32,
        vlan: bool,
    ) -> Self {
        Self::with_version(pool, block_size, blocks, snaplen, vlan, false)
    }

    /// As [`RxBlocks::new`]; `v2`: the ring is TPACKET_V2 frames of `block_size` bytes
    /// (at least 2048, a power of two).
    pub(super) fn with_version(
        pool: Arc<Pool>,
        block_size: usize,
        blocks: usize,
        snaplen: u32,
        vlan: bool,
        v2: bool,
    ) -> Self {
        let least = if v2 { 2048 } else { 4096 };
        assert!(block_size >= least && block_size.is_power_of_two() && blocks > 0);
        assert!(pool.region().len() >= block_size * blocks);
        RxBlocks {
            v2,
            pool,
            block_size,
            blocks,
            snaplen,
            vlan,
            meta: Meta::default(),
            cur: 0,
            left: 0,
            off: 0,
            release_from: 0,
            to_release: 0,
        }
    }

    /// Sets which direction is taken and whether headers are cooked.
    pub(super) fn set_meta(&mut self, meta: Meta) {
        self.meta = meta;
    }

    /// The pool that names the ring.
    pub(super) fn pool(&self) -> &Arc<Pool> {
        &self.pool
    }

    #[inline(always)]
    fn status(&self, blk: usize) -> &AtomicU32 {
        debug_assert!(blk < self.blocks);
        // A TPACKET_V2 frame's status is its first word (`tp_status`).
        let off = if self.v2 { 0 } else { STATUS_OFF };
        // SAFETY: the block (or V2 frame) header lies inside the mapping (blk < blocks,
        // checked at creation that blocks * block_size fit); blocks are page aligned and V2
        // frames at least 2048-byte aligned, so the u32 at offset 8 (or 0) is aligned; the
        // kernel writes it concurrently, hence atomic access only. The mapping lives as long
        // as `self.pool`.
        unsafe {
            &*(self.pool.region().as_ptr().add(blk * self.block_size + off) as *const AtomicU32)
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

    /// Whether a packet is of a direction not asked for (`-Q`), from its address: an outgoing
    /// one also when it is loopback's (it comes back as incoming). Such packets are never
    /// counted, as those the kernel does not deliver.
    #[inline]
    fn not_asked(&self, sll: Option<&libc::sockaddr_ll>) -> bool {
        match sll.map(|a| a.sll_pkttype == PACKET_OUTGOING) {
            Some(true) => {
                !self.meta.dir.takes(true)
                    || sll.is_some_and(|a| a.sll_ifindex == self.meta.lo_ifindex)
            }
            Some(false) => !self.meta.dir.takes(false),
            None => self.meta.dir == Capture::Out,
        }
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
                if self.v2 {
                    self.left = 1;
                    self.off = 0;
                    continue;
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
            let (hdr_len, sll_off) = if self.v2 {
                (HDR2, SLL_OFF2)
            } else {
                (HDR3, SLL_OFF)
            };
            if self.off + sll_off + SLL_LEN > bs {
                drops.add(DropReason::Malformed, self.left as u64);
                self.finish_block();
                continue;
            }
            let blk_start = self.cur * bs;
            let h = if self.v2 {
                // SAFETY: the header starts the frame, inside it (checked above), the frame
                // inside the mapping; the frame is owned by user space (TP_STATUS_USER seen
                // with acquire).
                let h: libc::tpacket2_hdr =
                    unsafe { std::ptr::read_unaligned(base.add(blk_start) as *const _) };
                Hdr {
                    next: 0,
                    sec: h.tp_sec,
                    nsec: h.tp_nsec,
                    snaplen: h.tp_snaplen,
                    len: h.tp_len,
                    status: h.tp_status,
                    mac: h.tp_mac,
                    tci: h.tp_vlan_tci as u32,
                    tpid: h.tp_vlan_tpid,
                }
            } else {
                // SAFETY: the header lies inside the block (checked above), the block inside
                // the mapping; the block is owned by user space (TP_STATUS_USER seen with
                // acquire).
                let h: libc::tpacket3_hdr =
                    unsafe { std::ptr::read_unaligned(base.add(blk_start + self.off) as *const _) };
                Hdr {
                    next: h.tp_next_offset,
                    sec: h.tp_sec,
                    nsec: h.tp_nsec,
                    snaplen: h.tp_snaplen,
                    len: h.tp_len,
                    status: h.tp_status,
                    mac: h.tp_mac,
                    tci: h.hv1.tp_vlan_tci,
                    tpid: h.hv1.tp_vlan_tpid,
                }
            };
            let mut data = self.off + h.mac as usize;
            let mut snap = h.snaplen;
            let mut wire = h.len;
            // The packet's address, which the kernel writes between its header and its bytes
            // (absent in headers of a fake kernel that puts the bytes right after the header).
            let sll = if h.mac as usize >= sll_off + SLL_LEN {
                // SAFETY: the sockaddr_ll lies between the header and the packet (tp_mac is
                // past it), inside the block when the packet is (checked just below before
                // any use of the result); the block is user-owned as above.
                Some(unsafe {
                    std::ptr::read_unaligned(
                        base.add(blk_start + self.off + sll_off) as *const libc::sockaddr_ll
                    )
                })
            } else {
                None
            };
            let outgoing = sll.as_ref().map(|a| a.sll_pkttype == PACKET_OUTGOING);
            let skip = self.not_asked(sll.as_ref());
            if data + snap as usize > bs {
                drops.add(DropReason::Malformed, 1);
            } else if skip {
                // Not asked for: never counted, as what the kernel does not deliver.
            } else if self.v2 && snap < wire {
                // Longer than a frame (sized for the MTU: a GRO aggregate, say): a forwarding
                // port must not send it cut; the V3 path would refuse it on transmit.
                drops.add(DropReason::TooBig, 1);
            } else if self.meta.cooked
                && (data < self.off + sll_off + SLL_LEN + SLL2_LEN || sll.is_none())
            {
                drops.add(DropReason::Malformed, 1);
            } else {
                if let (true, Some(a)) = (self.meta.cooked, sll.as_ref()) {
                    let mut hdr = [0u8; SLL2_LEN];
                    // sll_protocol is in network order already: its bytes as they lie.
                    hdr[..2].copy_from_slice(&a.sll_protocol.to_ne_bytes());
                    hdr[4..8].copy_from_slice(&(a.sll_ifindex as u32).to_be_bytes());
                    hdr[8..10].copy_from_slice(&a.sll_hatype.to_be_bytes());
                    hdr[10] = a.sll_pkttype;
                    hdr[11] = a.sll_halen;
                    hdr[12..20].copy_from_slice(&a.sll_addr);
                    // SAFETY: data - 20 .. data lies after the sockaddr_ll (checked above) and
                    // before the packet, inside this packet's room in the user-owned block.
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            hdr.as_ptr(),
                            base.add(blk_start + data - SLL2_LEN),
                            SLL2_LEN,
                        );
                    }
                    data -= SLL2_LEN;
                    snap += SLL2_LEN as u32;
                    wire += SLL2_LEN as u32;
                }
                // Kernels before 3.0 set no flag: a non-zero TCI is a tag there too (as libpcap).
                if self.vlan
                    && (h.status & libc::TP_STATUS_VLAN_VALID != 0 || h.tci != 0)
                    && snap as usize >= MACS
                    && h.mac as usize >= hdr_len + VLAN_HEADROOM as usize
                {
                    let tpid = if h.status & libc::TP_STATUS_VLAN_TPID_VALID != 0 || h.tpid != 0 {
                        h.tpid
                    } else {
                        TPID_8021Q
                    };
                    let mut tag = [0u8; VLAN_HEADROOM as usize];
                    tag[..2].copy_from_slice(&tpid.to_be_bytes());
                    tag[2..].copy_from_slice(&(h.tci as u16).to_be_bytes());
                    // SAFETY: the packet (data .. data + snap, snap >= 12) lies inside the
                    // block (checked above) and the 4 bytes before it lie after this packet's
                    // header (tp_mac >= header + 4), so both ranges are inside the block, which
                    // user space owns (TP_STATUS_USER seen with acquire) and nobody else reads
                    // until the packet is handed out below. `copy` allows the overlap.
                    unsafe {
                        let p = base.add(blk_start + data);
                        let to = p.sub(VLAN_HEADROOM as usize);
                        std::ptr::copy(p, to, MACS);
                        std::ptr::copy_nonoverlapping(tag.as_ptr(), to.add(MACS), tag.len());
                    }
                    data -= VLAN_HEADROOM as usize;
                    snap += VLAN_HEADROOM;
                    wire += VLAN_HEADROOM;
                }
                batch.push(Desc {
                    addr: (blk_start + data) as u64,
                    ts: h.sec as u64 * 1_000_000_000 + h.nsec as u64,
                    len: snap.min(self.snaplen),
                    wire_len: wire,
                    hash: 0,
                    port: 0,
                    flags: match outgoing {
                        Some(true) => Desc::F_OUTBOUND,
                        Some(false) => Desc::F_INBOUND,
                        None => 0,
                    },
                });
                n += 1;
                bytes += wire as u64;
            }
            self.left -= 1;
            if self.left == 0 {
                self.finish_block();
            } else if h.next == 0 {
                drops.add(DropReason::Malformed, self.left as u64);
                self.finish_block();
            } else {
                self.off += h.next as usize;
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
            discarded += if self.v2 {
                1
            } else {
                self.header_u32(self.cur, NUM_OFF) as u64
            };
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

    /// One packet as the kernel reports it: bytes (tag taken out), status bits, TCI, TPID.
    struct KPkt {
        bytes: Vec<u8>,
        status: u32,
        tci: u16,
        tpid: u16,
    }

    /// Acts as the kernel with `PACKET_RESERVE` = 4: each packet's data starts 4 bytes later
    /// than without, and the tag, if any, is in the header.
    fn kernel_fill_pkts(pool: &Pool, blk: usize, pkts: &[KPkt]) {
        let base = pool.region().as_ptr();
        let start = blk * BS;
        let first = 48usize;
        let mac = HDR3 + 2 + VLAN_HEADROOM as usize;
        let mut off = first;
        for (i, p) in pkts.iter().enumerate() {
            let len = p.bytes.len();
            let next = if i + 1 == pkts.len() {
                0
            } else {
                (mac + len).div_ceil(16) * 16
            };
            let h = libc::tpacket3_hdr {
                tp_next_offset: next as u32,
                tp_sec: 1,
                tp_nsec: 2,
                tp_snaplen: len as u32,
                tp_len: len as u32,
                tp_status: libc::TP_STATUS_USER | p.status,
                tp_mac: mac as u16,
                tp_net: 0,
                hv1: libc::tpacket_hdr_variant1 {
                    tp_rxhash: 0,
                    tp_vlan_tci: p.tci.into(),
                    tp_vlan_tpid: p.tpid,
                    tp_padding: 0,
                },
                tp_padding: [0; 8],
            };
            // SAFETY: test memory, in bounds of the region (sizes chosen to fit a block).
            unsafe {
                // Garbage where the kernel leaves the reserved room, to see it overwritten.
                std::ptr::write_bytes(base.add(start + off + HDR3), 0xee, mac - HDR3);
                std::ptr::write_unaligned(base.add(start + off) as *mut libc::tpacket3_hdr, h);
                std::ptr::copy_nonoverlapping(p.bytes.as_ptr(), base.add(start + off + mac), len);
            }
            off += next;
        }
        // SAFETY: as above.
        unsafe {
            std::ptr::write(base.add(start + NUM_OFF) as *mut u32, pkts.len() as u32);
            std::ptr::write(base.add(start + FIRST_OFF) as *mut u32, first as u32);
        }
        status_of(pool, blk).store(libc::TP_STATUS_USER, Ordering::Release);
    }

    fn eth(ethertype: u16, fill: u8, len: usize) -> Vec<u8> {
        let mut f = vec![fill; len];
        f[..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
        f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
        f[12..14].copy_from_slice(&ethertype.to_be_bytes());
        f
    }

    /// `f` with a tag (TPID, TCI) inserted after the MAC addresses.
    fn tagged(f: &[u8], tpid: u16, tci: u16) -> Vec<u8> {
        let mut t = f[..12].to_vec();
        t.extend_from_slice(&tpid.to_be_bytes());
        t.extend_from_slice(&tci.to_be_bytes());
        t.extend_from_slice(&f[12..]);
        t
    }

    #[test]
    fn stripped_vlan_tags_are_put_back_in_place() {
        let (pool, mut rx) = ring(2);
        let plain = eth(0x0800, 0x11, 60);
        let dot1q = eth(0x86dd, 0x22, 80);
        // QinQ: the kernel took the outer 802.1ad tag out; the inner 802.1Q tag stays.
        let inner = tagged(&eth(0x0800, 0x33, 70), 0x8100, 20);
        let prio0 = eth(0x0806, 0x44, 60);
        let old_kernel = eth(0x0800, 0x55, 64);
        let pkts = [
            KPkt {
                bytes: plain.clone(),
                status: 0,
                tci: 0,
                tpid: 0,
            },
            KPkt {
                bytes: dot1q.clone(),
                status: libc::TP_STATUS_VLAN_VALID | libc::TP_STATUS_VLAN_TPID_VALID,
                tci: 0x2064,
                tpid: 0x8100,
            },
            KPkt {
                bytes: inner.clone(),
                status: libc::TP_STATUS_VLAN_VALID | libc::TP_STATUS_VLAN_TPID_VALID,
                tci: 10,
                tpid: 0x88a8,
            },
            // VLAN 0, priority 0: only the flag tells it is tagged.
            KPkt {
                bytes: prio0.clone(),
                status: libc::TP_STATUS_VLAN_VALID,
                tci: 0,
                tpid: 0,
            },
            // A kernel that reports the TCI but neither flag: 802.1Q assumed.
            KPkt {
                bytes: old_kernel.clone(),
                status: 0,
                tci: 7,
                tpid: 0,
            },
        ];
        kernel_fill_pkts(&pool, 0, &pkts);
        let mut b = Batch::new();
        b.bind(&pool);
        let mut drops = Drops::default();
        let (n, bytes) = rx.fill(&mut b, &mut drops);
        assert_eq!(n, 5);
        let want = [
            plain.clone(),
            tagged(&dot1q, 0x8100, 0x2064),
            tagged(&inner, 0x88a8, 10),
            tagged(&prio0, 0x8100, 0),
            tagged(&old_kernel, 0x8100, 7),
        ];
        for (i, w) in want.iter().enumerate() {
            assert_eq!(b.data(i), &w[..], "packet {i}");
            assert_eq!(b.descs()[i].wire_len as usize, w.len(), "packet {i}");
        }
        assert_eq!(bytes, want.iter().map(|w| w.len() as u64).sum::<u64>());
        assert_eq!(drops.total(), 0);
    }

    #[test]
    fn tags_are_left_alone_on_links_without_ethernet_headers() {
        let pool = Arc::new(Pool::external(Region::anon(BS * 2).unwrap()));
        let mut rx = RxBlocks::new(pool.clone(), BS, 2, 65535, false);
        let ip = eth(0x0800, 0x66, 40);
        kernel_fill_pkts(
            &pool,
            0,
            &[KPkt {
                bytes: ip.clone(),
                status: libc::TP_STATUS_VLAN_VALID,
                tci: 5,
                tpid: 0,
            }],
        );
        let mut b = Batch::new();
        b.bind(&pool);
        let mut drops = Drops::default();
        assert_eq!(rx.fill(&mut b, &mut drops).0, 1);
        assert_eq!(b.data(0), &ip[..]);
    }

    #[test]
    fn snaplen_applies_after_the_tag_is_back() {
        let pool = Arc::new(Pool::external(Region::anon(BS * 2).unwrap()));
        let mut rx = RxBlocks::new(pool.clone(), BS, 2, 64, true);
        let f = eth(0x0800, 0x77, 100);
        kernel_fill_pkts(
            &pool,
            0,
            &[KPkt {
                bytes: f.clone(),
                status: libc::TP_STATUS_VLAN_VALID,
                tci: 9,
                tpid: 0,
            }],
        );
        let mut b = Batch::new();
        b.bind(&pool);
        let mut drops = Drops::default();
        assert_eq!(rx.fill(&mut b, &mut drops).0, 1);
        assert_eq!(b.data(0), &tagged(&f, 0x8100, 9)[..64]);
        assert_eq!(b.descs()[0].wire_len, 104);
    }

    fn status_of(pool: &Pool, blk: usize) -> &AtomicU32 {
        // SAFETY: test memory, aligned and in bounds.
        unsafe { &*(pool.region().as_ptr().add(blk * BS + STATUS_OFF) as *const AtomicU32) }
    }

    fn ring(blocks: usize) -> (Arc<Pool>, RxBlocks) {
        let pool = Arc::new(Pool::external(Region::anon(BS * blocks).unwrap()));
        let rx = RxBlocks::new(pool.clone(), BS, blocks, 65535, true);
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

    /// Acts as the kernel on a TPACKET_V2 ring: frame `i` gets `bytes` with a sockaddr_ll of
    /// packet type `pkttype` on interface `ifindex`, and is handed over.
    fn kernel_v2(pool: &Pool, i: usize, bytes: &[u8], pkttype: u8, ifindex: i32) {
        const FS: usize = 2048;
        let base = pool.region().as_ptr();
        let mac = 96usize;
        let h = libc::tpacket2_hdr {
            tp_status: 0,
            tp_len: bytes.len() as u32,
            tp_snaplen: bytes.len() as u32,
            tp_mac: mac as u16,
            tp_net: mac as u16,
            tp_sec: 3,
            tp_nsec: 4,
            tp_vlan_tci: 0,
            tp_vlan_tpid: 0,
            tp_padding: [0; 4],
        };
        // SAFETY: zeroed plain data.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = 0x0800u16.to_be();
        sll.sll_ifindex = ifindex;
        sll.sll_hatype = libc::ARPHRD_ETHER;
        sll.sll_pkttype = pkttype;
        sll.sll_halen = 6;
        sll.sll_addr[..6].copy_from_slice(&[2, 0, 0, 0, 0, 9]);
        // SAFETY: test memory, frame i inside the region.
        unsafe {
            let f = base.add(i * FS);
            std::ptr::write_unaligned(f as *mut libc::tpacket2_hdr, h);
            std::ptr::write_unaligned(f.add(SLL_OFF2) as *mut libc::sockaddr_ll, sll);
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), f.add(mac), bytes.len());
            (*(f as *const AtomicU32)).store(libc::TP_STATUS_USER, Ordering::Release);
        }
    }

    #[test]
    fn v2_frames_carry_their_direction_and_the_direction_filter_applies() {
        let pool = Arc::new(Pool::external(Region::anon(2048 * 4).unwrap()));
        for (dir, want) in [
            (
                Capture::InOut,
                vec![(0x11, Desc::F_INBOUND), (0x22, Desc::F_OUTBOUND)],
            ),
            (Capture::In, vec![(0x11, Desc::F_INBOUND)]),
            (Capture::Out, vec![(0x22, Desc::F_OUTBOUND)]),
        ] {
            let mut rx = RxBlocks::with_version(pool.clone(), 2048, 4, 65535, true, true);
            rx.set_meta(Meta {
                dir,
                lo_ifindex: 1,
                cooked: false,
            });
            kernel_v2(&pool, 0, &eth(0x0800, 0x11, 60), 0, 5);
            kernel_v2(&pool, 1, &eth(0x0800, 0x22, 60), PACKET_OUTGOING, 5);
            // A loopback's sent copy: skipped whatever the direction.
            kernel_v2(&pool, 2, &eth(0x0800, 0x33, 60), PACKET_OUTGOING, 1);
            let mut b = Batch::new();
            b.bind(&pool);
            let mut drops = Drops::default();
            let (n, _) = rx.fill(&mut b, &mut drops);
            let got: Vec<(u8, u16)> = b.iter().map(|p| (p.data[20], p.desc.flags)).collect();
            assert_eq!(n, want.len(), "{dir:?}");
            assert_eq!(got, want, "{dir:?}");
            assert!(b.iter().all(|p| p.desc.ts == 3_000_000_004));
            b.clear();
            rx.release(&b);
            for f in 0..3 {
                assert_eq!(
                    status_of_frame(&pool, f).load(Ordering::Relaxed),
                    libc::TP_STATUS_KERNEL,
                    "{dir:?}: frame {f} given back"
                );
            }
        }
    }

    #[test]
    fn v2_frames_cut_by_the_ring_are_too_big_not_handed_out() {
        let pool = Arc::new(Pool::external(Region::anon(2048 * 2).unwrap()));
        let mut rx = RxBlocks::with_version(pool.clone(), 2048, 2, 65535, true, true);
        kernel_v2(&pool, 0, &eth(0x0800, 0x11, 60), 0, 5);
        // SAFETY: test memory: frame 0's tp_len, as a kernel that cut a 9000-byte packet.
        unsafe {
            let h = pool.region().as_ptr() as *mut libc::tpacket2_hdr;
            (*h).tp_len = 9000;
        }
        kernel_v2(&pool, 1, &eth(0x0800, 0x22, 60), 0, 5);
        let mut b = Batch::new();
        b.bind(&pool);
        let mut drops = Drops::default();
        assert_eq!(rx.fill(&mut b, &mut drops).0, 1);
        assert_eq!(b.data(0)[20], 0x22);
        assert_eq!(drops.get(DropReason::TooBig), 1);
    }

    #[test]
    fn cooked_frames_get_a_linux_sll2_header() {
        let pool = Arc::new(Pool::external(Region::anon(2048 * 2).unwrap()));
        let mut rx = RxBlocks::with_version(pool.clone(), 2048, 2, 65535, false, true);
        rx.set_meta(Meta {
            dir: Capture::InOut,
            lo_ifindex: -1,
            cooked: true,
        });
        let ip = vec![0x45u8; 40];
        kernel_v2(&pool, 0, &ip, PACKET_OUTGOING, 7);
        let mut b = Batch::new();
        b.bind(&pool);
        let mut drops = Drops::default();
        assert_eq!(rx.fill(&mut b, &mut drops).0, 1);
        let d = b.data(0);
        assert_eq!(d.len(), SLL2_LEN + 40);
        assert_eq!(&d[..2], &[0x08, 0x00], "protocol");
        assert_eq!(&d[2..4], &[0, 0], "reserved");
        assert_eq!(&d[4..8], &7u32.to_be_bytes(), "interface index");
        assert_eq!(&d[8..10], &1u16.to_be_bytes(), "ARPHRD_ETHER");
        assert_eq!(d[10], PACKET_OUTGOING);
        assert_eq!(d[11], 6);
        assert_eq!(&d[12..18], &[2, 0, 0, 0, 0, 9]);
        assert_eq!(&d[SLL2_LEN..], &ip[..]);
        assert_eq!(b.descs()[0].wire_len, 60);
        assert_eq!(b.descs()[0].flags, Desc::F_OUTBOUND);
    }

    fn status_of_frame(pool: &Pool, f: usize) -> &AtomicU32 {
        // SAFETY: test memory, aligned and in bounds.
        unsafe { &*(pool.region().as_ptr().add(f * 2048) as *const AtomicU32) }
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

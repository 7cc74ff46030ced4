//! The transmit ring: TPACKET_V2 frames on a socket of its own, bypassing the qdisc.
//!
//! Each packet of a batch is copied into the next free frame (`TP_STATUS_AVAILABLE`), marked
//! `TP_STATUS_SEND_REQUEST`, and one `sendto(fd, NULL, 0, MSG_DONTWAIT)` per batch asks the
//! kernel to send every requested frame (frames built in place: one per ring, see
//! [`TxRing::build`]). The socket is bound with protocol 0, so it receives
//! nothing. PACKET_LOSS makes the kernel skip a frame it cannot send instead of stalling the ring.

use super::sys;
use crate::mem::{prefetch_write, Batch, Region, BATCH};
use crate::port::{DropReason, PortError, PortStats, TxFill};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};

/// Offset of the packet in a frame: the kernel's default for TPACKET_V2 transmit
/// (`TPACKET2_HDRLEN - sizeof(struct sockaddr_ll)`).
const DATA_OFF: usize = libc::TPACKET2_HDRLEN - std::mem::size_of::<libc::sockaddr_ll>();
/// Most bytes a transmit ring maps: 512 frames of 2 KiB. Like trafgen's ring (256 frames of
/// 2 KiB on a veth) it stays in the core's L2 cache and TLB, where a ring of 8 MiB (4,096
/// frames) had each frame's status line and page fetched again a ring later, ~30 ns a packet
/// in user space (BENCHMARKS.md, "gen afpacket: a ring of 512 frames kicked when full").
const MAX_RING_BYTES: usize = 1 << 20;
/// Frames a transmit ring has at most.
const MAX_FRAMES: usize = 4096;
/// Frames a transmit ring has at least, whatever their size: a burst.
const MIN_FRAMES: usize = BATCH;

/// The ring for frames of up to `max_len` bytes and up to `frames` frames: (frame size, block
/// size, blocks). Frames of a power of two (2 KiB at least) hold the packet after
/// [`DATA_OFF`]; blocks of 64 KiB (one frame at least) hold whole frames; at most
/// [`MAX_RING_BYTES`], and [`MIN_FRAMES`] frames whatever their size.
fn geometry(max_len: usize, frames: u32) -> (usize, usize, usize) {
    let frame_size = (max_len + DATA_OFF).next_power_of_two().max(2048);
    let block_size = frame_size.max(1 << 16);
    let frames = (frames as usize)
        .clamp(MIN_FRAMES, MAX_FRAMES)
        .min((MAX_RING_BYTES / frame_size).max(MIN_FRAMES));
    let per_block = block_size / frame_size;
    (frame_size, block_size, frames.div_ceil(per_block))
}
/// An 802.1Q tag.
const VLAN_LEN: usize = 4;

/// Longest frame the kernel sends on a link of `mtu` (as `tpacket_snd` checks: the MTU and
/// the link header, and 4 bytes more for a frame with an 802.1Q tag).
pub(super) fn max_frame(mtu: u32, link: crate::port::LinkType, tagged: bool) -> usize {
    let hdr = if link == crate::port::LinkType::ETHERNET {
        14 + if tagged { VLAN_LEN } else { 0 }
    } else {
        0
    };
    mtu as usize + hdr
}

/// A mapped TPACKET_V2 transmit ring.
pub(super) struct TxRing {
    iface: String,
    map: Region,
    fd: OwnedFd,
    frame_size: usize,
    frames: usize,
    head: usize,
    /// Longest frame with an 802.1Q tag the kernel sends, and longest without one.
    max_len: usize,
    max_plain: usize,
    /// The kernel did not take every requested frame on the last kick.
    unsent: bool,
    /// Frames [`TxRing::build`] requested since the last kick.
    since_kick: usize,
}

impl TxRing {
    /// Sets up a ring of up to `frames` frames sized for `mtu` on `fd` (a fresh packet socket,
    /// opened in the interface's network namespace) and binds it to `iface` for sending only.
    pub(super) fn open(
        fd: OwnedFd,
        iface: &str,
        ifindex: i32,
        mtu: u32,
        link: crate::port::LinkType,
        frames: u32,
    ) -> Result<Self, PortError> {
        let v = libc::tpacket_versions::TPACKET_V2 as i32;
        sys::packet_opt(&fd, iface, libc::PACKET_VERSION, "PACKET_VERSION", &v)?;
        sys::packet_opt(&fd, iface, libc::PACKET_LOSS, "PACKET_LOSS", &1i32)?;
        // Older kernels lack it; sending through the qdisc still works.
        let _ = sys::setopt(&fd, libc::SOL_PACKET, libc::PACKET_QDISC_BYPASS, &1i32);
        let max_len = max_frame(mtu, link, true);
        let max_plain = max_frame(mtu, link, false);
        let (frame_size, block_size, blocks) = geometry(max_len, frames);
        let frames = blocks * (block_size / frame_size);
        let req = libc::tpacket_req {
            tp_block_size: block_size as u32,
            tp_block_nr: blocks as u32,
            tp_frame_size: frame_size as u32,
            tp_frame_nr: frames as u32,
        };
        sys::packet_opt(&fd, iface, libc::PACKET_TX_RING, "PACKET_TX_RING", &req)?;
        let len = block_size * blocks;
        let ptr = sys::map_ring(&fd, iface, len)?;
        // SAFETY: `ptr` is the start of a fresh mapping of exactly `len` bytes, owned from here.
        let map = unsafe { Region::from_raw_mapping(ptr, len) };
        sys::bind(&fd, iface, ifindex, 0)?;
        Ok(TxRing {
            iface: iface.to_string(),
            map,
            fd,
            frame_size,
            frames,
            head: 0,
            max_len,
            max_plain,
            unsent: false,
            since_kick: 0,
        })
    }

    #[inline(always)]
    fn status(&self, i: usize) -> &AtomicU32 {
        // SAFETY: frame `i < frames` lies inside the mapping (frames are contiguous: the block
        // size is a multiple of the frame size); tp_status is the first u32 of a 16-byte
        // aligned frame; the kernel writes it concurrently, hence atomic access only.
        unsafe { &*(self.map.as_ptr().add(i * self.frame_size) as *const AtomicU32) }
    }

    /// Asks the kernel to send the requested frames without waiting.
    pub(super) fn kick(&mut self) -> Result<(), PortError> {
        // SAFETY: sendto with no buffer and no address on our socket: the kernel sends the
        // frames marked TP_STATUS_SEND_REQUEST in the ring.
        let r = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                std::ptr::null(),
                0,
                libc::MSG_DONTWAIT,
                std::ptr::null(),
                0,
            )
        };
        self.since_kick = 0;
        if r >= 0 {
            self.unsent = false;
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EAGAIN) | Some(libc::ENOBUFS) | Some(libc::EINTR) => {
                self.unsent = true;
                Ok(())
            }
            _ => Err(sys::err_of(&self.iface, "sendto", e)),
        }
    }

    /// Copies packets from the front of `batch` into free frames and sends them; returns how
    /// many it took (sent, or dropped as too big or malformed and counted in `stats`).
    #[inline]
    pub(super) fn send(
        &mut self,
        batch: &mut Batch,
        stats: &mut PortStats,
    ) -> Result<usize, PortError> {
        let mut taken = 0;
        let mut queued = 0;
        let mut bytes = 0u64;
        while taken < batch.len() {
            let data = batch.data(taken);
            if data.len() < 14 {
                stats.tx_drops.add(DropReason::Malformed, 1);
                taken += 1;
                continue;
            }
            // The kernel allows the 4 bytes of a tag only to a frame that has one (802.1Q):
            // an untagged frame that long would be skipped by PACKET_LOSS without a count.
            if data.len() > self.max_len
                || (data.len() > self.max_plain && data[12..14] != [0x81, 0x00])
            {
                stats.tx_drops.add(DropReason::TooBig, 1);
                taken += 1;
                continue;
            }
            let st = self.status(self.head).load(Ordering::Acquire);
            if st & (libc::TP_STATUS_SEND_REQUEST | libc::TP_STATUS_SENDING) != 0 {
                break;
            }
            let frame = self.head * self.frame_size;
            // SAFETY: the frame is ours (status AVAILABLE or WRONG_FORMAT, seen with acquire)
            // until we mark it SEND_REQUEST; the copy fits (len <= max_len <= frame_size -
            // DATA_OFF) and lies inside the mapping.
            unsafe {
                let p = self.map.as_ptr().add(frame);
                std::ptr::copy_nonoverlapping(data.as_ptr(), p.add(DATA_OFF), data.len());
                let h = p as *mut libc::tpacket2_hdr;
                std::ptr::addr_of_mut!((*h).tp_len).write(data.len() as u32);
                std::ptr::addr_of_mut!((*h).tp_snaplen).write(data.len() as u32);
            }
            self.status(self.head)
                .store(libc::TP_STATUS_SEND_REQUEST, Ordering::Release);
            self.head = if self.head + 1 == self.frames {
                0
            } else {
                self.head + 1
            };
            bytes += data.len() as u64;
            queued += 1;
            taken += 1;
        }
        if queued > 0 || self.unsent {
            self.kick()?;
        }
        self.prefetch_next();
        stats.tx_packets += queued as u64;
        stats.tx_bytes += bytes;
        batch.free_front(taken);
        Ok(taken)
    }

    /// Bytes a frame lends to [`TxRing::build`]: the longest frame the kernel sends.
    pub(super) fn build_room(&self) -> usize {
        self.max_len
    }

    /// Lends up to `want` free frames (at most [`BATCH`]) to `fill`, which writes packets
    /// straight into them and their lengths, and returns how many it wrote; those frames are
    /// requested and sent with one kick, as [`TxRing::send`] does with copies. A length the
    /// link does not take is counted in `stats` and its frame not requested (the frames after
    /// it move down: the kernel sends the ring's requested frames in order and stops at the
    /// first one that is not). Returns how many packets were sent or dropped; 0 when the
    /// ring has no free frame (`fill` not called).
    #[inline]
    pub(super) fn build(
        &mut self,
        want: usize,
        fill: &mut TxFill<'_>,
        stats: &mut PortStats,
    ) -> Result<usize, PortError> {
        let want = want.min(BATCH).min(self.frames);
        let mut free = 0;
        let mut i = self.head;
        while free < want {
            let st = self.status(i).load(Ordering::Acquire);
            if st & (libc::TP_STATUS_SEND_REQUEST | libc::TP_STATUS_SENDING) != 0 {
                break;
            }
            free += 1;
            i = if i + 1 == self.frames { 0 } else { i + 1 };
        }
        if free == 0 {
            if self.unsent || self.since_kick > 0 {
                self.kick()?;
            }
            return Ok(0);
        }
        let base = self.map.as_ptr();
        let room = self.max_len;
        let mut lens = [0u32; BATCH];
        let n = {
            let mut bufs: [&mut [u8]; BATCH] = std::array::from_fn(|_| <&mut [u8]>::default());
            let mut i = self.head;
            for b in bufs.iter_mut().take(free) {
                // SAFETY: frame `i` is ours (its status, read with acquire above, is neither
                // SEND_REQUEST nor SENDING) until we request it; `room` = max_len <=
                // frame_size - DATA_OFF, so the slice lies inside frame `i`, inside the
                // mapping; the frames are distinct, so no two slices overlap, and they live
                // until `fill` returns (the end of this block).
                *b = unsafe {
                    std::slice::from_raw_parts_mut(base.add(i * self.frame_size + DATA_OFF), room)
                };
                i = if i + 1 == self.frames { 0 } else { i + 1 };
            }
            fill(&mut bufs[..free], &mut lens[..free]).min(free)
        };
        let mut queued = 0;
        let mut bytes = 0u64;
        for (k, &len) in lens.iter().enumerate().take(n) {
            let len = len as usize;
            let at = |j: usize| {
                let f = self.head + j;
                base.wrapping_add(
                    if f >= self.frames { f - self.frames } else { f } * self.frame_size,
                )
            };
            let p = at(k);
            // SAFETY: frame k is one of the `free` frames lent above, still ours; the 14
            // bytes read lie inside it (len <= room checked first).
            let tag = len <= room
                && len >= 14
                && unsafe { *p.add(DATA_OFF + 12) == 0x81 && *p.add(DATA_OFF + 13) == 0x00 };
            if len < 14 {
                stats.tx_drops.add(DropReason::Malformed, 1);
                continue;
            }
            if len > self.max_len || (len > self.max_plain && !tag) {
                stats.tx_drops.add(DropReason::TooBig, 1);
                continue;
            }
            let q = at(queued);
            // SAFETY: frames `queued <= k` are both ours (lent above, not yet requested);
            // when distinct, their packets do not overlap; len <= room fits either.
            unsafe {
                if queued != k {
                    std::ptr::copy_nonoverlapping(p.add(DATA_OFF), q.add(DATA_OFF), len);
                }
                let h = q as *mut libc::tpacket2_hdr;
                std::ptr::addr_of_mut!((*h).tp_len).write(len as u32);
                std::ptr::addr_of_mut!((*h).tp_snaplen).write(len as u32);
            }
            bytes += len as u64;
            queued += 1;
        }
        for _ in 0..queued {
            self.status(self.head)
                .store(libc::TP_STATUS_SEND_REQUEST, Ordering::Release);
            self.head = if self.head + 1 == self.frames {
                0
            } else {
                self.head + 1
            };
        }
        // One kick for the whole ring, as trafgen does: a sendto for each 64-frame batch cost
        // the kernel ~60 ns a packet more on a veth (BENCHMARKS.md, "gen afpacket: a ring of
        // 512 frames kicked when full"). A short batch (the end of a count, the ring's end,
        // the kernel still holding frames) is sent at once, and so are the requested frames
        // when the ring has no free one left (above) or the caller flushes (the end of a run).
        self.since_kick += queued;
        if self.unsent || (self.since_kick > 0 && (self.since_kick >= self.frames || n < BATCH)) {
            self.kick()?;
        }
        self.prefetch_next();
        stats.tx_packets += queued as u64;
        stats.tx_bytes += bytes;
        Ok(n)
    }

    /// Asks for the lines the next batch writes: each frame's status word, header and first
    /// bytes of the packet (its first two lines). The kernel wrote the status last, a whole
    /// ring ago, and on a ring of thousands of frames the line has left the cache by then.
    /// Fetching the next batch's lines while it is built overlaps those misses, rather than
    /// taking one per packet when its status is read (BENCHMARKS.md, "gen afpacket: the
    /// transmit ring's next frames fetched ahead").
    #[inline]
    fn prefetch_next(&self) {
        let base = self.map.as_ptr();
        let mut i = self.head;
        for _ in 0..BATCH.min(self.frames) {
            let f = base.wrapping_add(i * self.frame_size);
            prefetch_write(f);
            prefetch_write(f.wrapping_add(64));
            i = if i + 1 == self.frames { 0 } else { i + 1 };
        }
    }

    /// Sends what an earlier kick left behind.
    pub(super) fn flush(&mut self) -> Result<(), PortError> {
        if self.unsent || self.since_kick > 0 {
            self.kick()?;
        }
        Ok(())
    }

    /// The end of a run: sends what is still requested, waiting a bounded time for the kernel
    /// to take it (a link whose peer is down keeps every frame requested: the kernel drops
    /// each try and leaves the frame for the next kick), then takes back the frames it never
    /// took and counts them as dropped (ring_full) rather than sent: they were counted in
    /// `tx_packets` when requested, and closing the ring would lose them without a word.
    pub(super) fn finish(&mut self, stats: &mut PortStats) -> Result<(), PortError> {
        let start = std::time::Instant::now();
        while self.pending() > 0 {
            if self.kick().is_err() || self.pending() == 0 {
                break;
            }
            if start.elapsed() >= std::time::Duration::from_millis(500) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let (mut n, mut bytes) = (0u64, 0u64);
        for i in 0..self.frames {
            // After our last sendto returned the kernel no longer looks at a frame that is
            // still SEND_REQUEST (it walks the ring only inside sendto): taking it back is ours.
            if self
                .status(i)
                .compare_exchange(
                    libc::TP_STATUS_SEND_REQUEST,
                    libc::TP_STATUS_AVAILABLE,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_ok()
            {
                // SAFETY: frame `i < frames` lies inside the mapping; its header is ours (its
                // status was just taken back from SEND_REQUEST); tp_len is a u32 of it.
                let len = unsafe {
                    let h = self.map.as_ptr().add(i * self.frame_size) as *const libc::tpacket2_hdr;
                    std::ptr::addr_of!((*h).tp_len).read()
                };
                n += 1;
                bytes += u64::from(len);
            }
        }
        self.unsent = false;
        self.since_kick = 0;
        stats.tx_packets = stats.tx_packets.saturating_sub(n);
        stats.tx_bytes = stats.tx_bytes.saturating_sub(bytes);
        stats.tx_drops.add(DropReason::RingFull, n);
        Ok(())
    }

    /// Frames requested but not taken by the kernel yet.
    fn pending(&self) -> usize {
        (0..self.frames)
            .filter(|&i| self.status(i).load(Ordering::Acquire) & libc::TP_STATUS_SEND_REQUEST != 0)
            .count()
    }
}

impl Drop for TxRing {
    fn drop(&mut self) {
        // Give the kernel a bounded chance to take what is still requested before we close.
        for _ in 0..100 {
            if self.pending() == 0 || self.kick().is_err() {
                break;
            }
            if self.pending() == 0 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_geometry_stays_small_and_holds_a_burst() {
        // A 1500 B MTU (1518 B with a tag): 512 frames of 2 KiB in 64 KiB blocks, 1 MiB.
        let (fs, bs, blocks) =
            geometry(max_frame(1500, crate::port::LinkType::ETHERNET, true), 4096);
        assert_eq!((fs, bs, blocks), (2048, 1 << 16, 16));
        assert_eq!(blocks * bs, MAX_RING_BYTES);
        // Fewer frames asked: as many, rounded up to whole blocks, never under a burst.
        assert_eq!(geometry(1518, 100), (2048, 1 << 16, 4));
        assert_eq!(geometry(1518, 1), (2048, 1 << 16, 2));
        // Jumbo frames: a burst of frames of 16 KiB, past the byte budget rather than under a
        // burst; a 64 KiB frame is a block of its own.
        let (fs, bs, blocks) = geometry(9018, 4096);
        assert_eq!((fs, bs), (16384, 1 << 16));
        assert_eq!(blocks * (bs / fs), BATCH);
        let (fs, bs, blocks) = geometry(65536 + 18, 4096);
        assert_eq!((fs, bs, blocks), (1 << 17, 1 << 17, BATCH));
        for len in [60, 1518, 9018, 65554] {
            let (fs, bs, blocks) = geometry(len, 4096);
            assert!(len + DATA_OFF <= fs && bs % fs == 0 && blocks * (bs / fs) >= BATCH);
        }
    }
}

//! The segment's layout: header, queue areas (cursors, control block, slots), frames, big
//! frames, transmit lanes; and the sizes a master asks for ([`ClusterConfig`]).

use crate::mem::{Desc, BATCH};
use std::sync::atomic::{AtomicU32, AtomicU64};

/// `LRCLUST1`.
pub(super) const MAGIC: u64 = u64::from_le_bytes(*b"LRCLUST1");
/// 4: a queue's control block has the sleeping reader's futex word ([`QueueCtl::sleeping`]);
/// a version 3 master would never wake a reader that sleeps on it.
pub(super) const VERSION: u32 = 4;
pub(super) const HEADER_SIZE: usize = 4096;
/// Most queues a cluster has (a destination set is a 64-bit mask).
pub const MAX_QUEUES: usize = 64;
/// Default slots per queue.
pub const DEFAULT_SLOTS: u32 = 4096;

pub(super) const STATE_RUNNING: u32 = 1;
pub(super) const STATE_CLOSED: u32 = 2;
/// Owner pid value while the master reclaims a queue.
pub(super) const RECLAIMING: u32 = u32::MAX;
/// Longest wire length a descriptor may claim (a garbage one is a corrupted segment).
pub(super) const MAX_WIRE_LEN: u32 = 1 << 24;

/// Largest big frame (a packet of up to 128 KiB minus the headroom: 65535 B and more).
pub const MAX_BIG_FRAME: u32 = 128 << 10;

/// Tag of a shadow entry whose frame went to one queue only (no reference count kept).
/// Frame indexes are below 2^31 (the segment would be 4 TiB otherwise).
pub(super) const SOLE: u32 = crate::ring::shared::Holds::SOLE;

/// Master counters in the header (written by the master only).
#[repr(C)]
#[derive(Debug)]
pub(super) struct MasterCounters {
    pub(super) rx_packets: AtomicU64,
    pub(super) rx_bytes: AtomicU64,
    /// Packets no destination wanted (filter, or a policy that drops).
    pub(super) filtered: AtomicU64,
    /// Packets lost for want of a free frame.
    pub(super) no_frame: AtomicU64,
    /// Packets with at least one destination.
    pub(super) routed: AtomicU64,
    /// Destinations asked for, summed over packets (a fan-out packet to 3 queues counts 3).
    pub(super) copies: AtomicU64,
    /// Packets consumers transmitted that the master sent to the egress port (`-o`).
    pub(super) tx_packets: AtomicU64,
    pub(super) tx_bytes: AtomicU64,
    /// Packets consumers transmitted that the egress port did not take.
    pub(super) tx_dropped: AtomicU64,
    /// Transmitted descriptors with an impossible length (a corrupted lane), dropped.
    pub(super) tx_malformed: AtomicU64,
    /// Packets longer than a frame holds (see `--max-pkt-len`), dropped whole (counted once,
    /// also per queue). After the fields above: a segment without it reads 0 here.
    pub(super) too_big: AtomicU64,
}

#[repr(C)]
#[derive(Debug)]
pub(super) struct Header {
    pub(super) magic: AtomicU64,
    pub(super) version: u32,
    pub(super) queues: u32,
    pub(super) slots: u32,
    pub(super) frames: u32,
    pub(super) frame_size: u32,
    pub(super) headroom: u32,
    pub(super) master_pid: u32,
    pub(super) cluster_id: u32,
    pub(super) master_start: u64,
    pub(super) state: AtomicU32,
    pub(super) _pad: u32,
    pub(super) queue_off: u64,
    pub(super) queue_stride: u64,
    pub(super) refcnt_off: u64,
    pub(super) frames_off: u64,
    pub(super) total_len: u64,
    /// Transmit lanes (consumers → master → `-o` port), slots per lane, where they are.
    pub(super) tx_lanes: u32,
    pub(super) tx_slots: u32,
    pub(super) tx_off: u64,
    pub(super) tx_stride: u64,
    /// Application index of each queue.
    pub(super) app_of: [u8; MAX_QUEUES],
    pub(super) counters: MasterCounters,
    /// Big frames (0: none), their size, where they are.
    pub(super) big_frames: u32,
    pub(super) big_frame_size: u32,
    pub(super) big_off: u64,
    /// Packets the master copied into a frame; the others were received in place (a source
    /// writing into the segment's frames). Last: a segment without it reads 0 here.
    pub(super) copied: AtomicU64,
}

/// Per-queue control block, at the start of each queue's area.
#[repr(C, align(64))]
#[derive(Debug)]
pub(super) struct QueueCtl {
    /// `generation << 32 | pid` of the attached consumer; pid 0: none; generation 0: never.
    pub(super) owner: AtomicU64,
    /// Times a consumer attached.
    pub(super) attaches: AtomicU64,
    /// The consumer's last sign of life: wall-clock ms, written every 64 receive calls.
    pub(super) heartbeat: AtomicU64,
    /// The consumer's read cursor: slots up to here were handed out to it (written at every
    /// receive call that returns packets; read by the master when it takes the queue back).
    pub(super) handed: AtomicU64,
    /// Keeps the consumer's words above off the line of the master's counters below.
    pub(super) _line: [u64; 4],
    /// Descriptors the master put in the ring.
    pub(super) enqueued: AtomicU64,
    pub(super) enqueued_bytes: AtomicU64,
    /// Dropped: the ring was full.
    pub(super) ring_full: AtomicU64,
    /// Dropped: no consumer (left or died), including packets reclaimed from the ring.
    pub(super) consumer_gone: AtomicU64,
    /// Enqueued packets the master took back from a dead consumer's ring (part of
    /// `consumer_gone`, to be subtracted from `enqueued`).
    pub(super) reclaimed: AtomicU64,
    /// Dropped: no free frame.
    pub(super) no_frame: AtomicU64,
    /// Dropped: still in the queue, never read, when the master ended.
    pub(super) unread: AtomicU64,
    /// Released by the consumer (or handed to it when the master ended).
    pub(super) delivered: AtomicU64,
    /// When the master took the queue back: how far the consumer's reads count as delivered
    /// (the consumer keeps nothing past it). Written before the owner word is released.
    pub(super) taken_at: AtomicU64,
    /// Dropped: longer than a frame holds (was padding: a segment without it reads 0).
    pub(super) too_big: AtomicU64,
    /// The consumer sleeps on this futex word (0: awake): how many packets the queue must
    /// hold before the master wakes it ([`crate::cluster::ClusterPort::wait`]). Written by the
    /// consumer before it sleeps, cleared by the master when it wakes it; on the master's
    /// counter line, so that the master's one load per batch is a hit while nobody sleeps.
    pub(super) sleeping: AtomicU32,
    pub(super) _pad: u32,
    pub(super) _line2: [u64; 5],
}

/// A queue's (or a lane's) head and tail cursors, the first 256 bytes of its area.
pub(super) type Cursors = crate::ring::shared::Cursors<AtomicU64>;

/// Inside a queue's area (4096-aligned): the cursors, the control block, the slots.
pub(super) const CTL_OFF: usize = std::mem::size_of::<Cursors>();
pub(super) const SLOTS_OFF: usize = (CTL_OFF + std::mem::size_of::<QueueCtl>()).div_ceil(128) * 128;
const _: () = assert!(CTL_OFF.is_multiple_of(64) && std::mem::align_of::<Cursors>() <= 4096);

/// Sizes of a cluster.
#[derive(Clone, Debug)]
pub struct ClusterConfig {
    /// Queues per application (`-n 2,1` is `[2, 1]`); at most 64 queues in all.
    pub apps: Vec<u32>,
    /// Slots per queue (a power of two).
    pub slots: u32,
    /// Frames in the segment (0: enough for every queue full, plus `kernel_frames`).
    pub frames: u32,
    /// Frames the input's kernel holds at most (an `xdp:` input on the segment's frames keeps
    /// up to its fill rings' worth, [`crate::cluster::Master::umem_area`]): added to the
    /// default `frames`, so that full queues still leave the kernel its share.
    pub kernel_frames: u32,
    /// Transmit lanes for consumers (`-o`: 0 when the master has no egress).
    pub tx_lanes: u32,
    /// Slots (and private frames) per transmit lane.
    pub tx_slots: u32,
    /// Bytes per frame.
    pub frame_size: u32,
    /// Big frames, for packets longer than a frame (0: none; such packets are `too_big`).
    pub big_frames: u32,
    /// Bytes per big frame: a power of two from 4 KiB to 128 KiB, above `frame_size`.
    pub big_frame_size: u32,
    /// Longest packet carried (0: what the largest frame holds); longer ones are `too_big`.
    pub max_len: u32,
    /// Where a process cluster's segment goes: huge pages when it can (the default), a given
    /// hugetlbfs, or 4 KiB pages ([`super::Master::create`]; thread clusters ignore it).
    pub pages: super::HugePages,
    /// The user the master becomes once its segment is made (tcpdump's `-Z`), who must then
    /// remove it at exit: the segment goes only where that user may (None: the master's own
    /// user, who made it there).
    pub owner: Option<super::SegmentOwner>,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            apps: vec![1],
            slots: DEFAULT_SLOTS,
            frames: 0,
            kernel_frames: 0,
            tx_lanes: 0,
            tx_slots: 1024,
            frame_size: crate::mem::DEFAULT_FRAME_SIZE,
            big_frames: 0,
            big_frame_size: 0,
            max_len: 0,
            pages: super::HugePages::Auto,
            owner: None,
        }
    }
}

impl ClusterConfig {
    /// Sizes the cluster for packets of up to `max` bytes (at most [`MAX_BIG_FRAME`] minus the
    /// headroom): regular frames stay as they are (small packets keep small frames, the 64 B
    /// path is unchanged); longer packets get big frames of the next power of two, one for
    /// every 8 regular frames (64 to 2048). Only address space until written. Packets longer
    /// than `max` are `too_big`, even where a frame would hold them.
    pub fn fit_packets(&mut self, max: u32) {
        let room = self.frame_size - crate::mem::DEFAULT_HEADROOM.min(self.frame_size / 4);
        self.max_len = max;
        if max <= room {
            self.big_frames = 0;
            self.big_frame_size = 0;
            return;
        }
        let frames = if self.frames == 0 {
            self.queues() * (self.slots.max(64) as usize).next_power_of_two()
                + 2 * BATCH
                + self.kernel_frames as usize
        } else {
            self.frames as usize
        };
        self.big_frames = (frames / 8).clamp(64, 2048) as u32;
        self.big_frame_size = (max + crate::mem::DEFAULT_HEADROOM)
            .next_power_of_two()
            .clamp(4096, MAX_BIG_FRAME)
            .max(self.frame_size * 2);
    }

    /// Total number of queues.
    pub fn queues(&self) -> usize {
        self.apps.iter().map(|&n| n as usize).sum()
    }
}

pub(super) struct Layout {
    pub(super) queues: usize,
    pub(super) slots: usize,
    pub(super) frames: usize,
    pub(super) frame_size: usize,
    pub(super) queue_off: usize,
    pub(super) queue_stride: usize,
    pub(super) refcnt_off: usize,
    pub(super) frames_off: usize,
    pub(super) big_frames: usize,
    pub(super) big_size: usize,
    pub(super) big_off: usize,
    pub(super) tx_lanes: usize,
    pub(super) tx_slots: usize,
    pub(super) tx_off: usize,
    pub(super) tx_stride: usize,
    pub(super) total: usize,
}

/// Inside a transmit lane: cursors, control block, slots, then the lane's own frames here.
pub(super) fn tx_frames_off(tx_slots: usize) -> usize {
    (SLOTS_OFF + tx_slots * std::mem::size_of::<Desc>()).div_ceil(4096) * 4096
}

impl Layout {
    pub(super) fn new(
        queues: usize,
        slots: usize,
        frames: usize,
        frame_size: usize,
        (big_frames, big_size): (usize, usize),
        tx_lanes: usize,
        tx_slots: usize,
    ) -> Layout {
        let up = |n: usize, a: usize| n.div_ceil(a) * a;
        let queue_off = HEADER_SIZE;
        let queue_stride = up(SLOTS_OFF + slots * std::mem::size_of::<Desc>(), 4096);
        // Reference counts live in the master's own memory (nothing a consumer writes can
        // free a frame); the field stays in the header, equal to frames_off.
        let refcnt_off = queue_off + queues * queue_stride;
        let frames_off = up(refcnt_off, 4096);
        let big_off = up(frames_off + frames * frame_size, 4096);
        let tx_off = up(big_off + big_frames * big_size, 4096);
        let tx_stride = up(tx_frames_off(tx_slots) + tx_slots * frame_size, 4096);
        let total = tx_off + tx_lanes * tx_stride;
        Layout {
            tx_lanes,
            tx_slots,
            tx_off,
            tx_stride,
            queues,
            slots,
            frames,
            frame_size,
            queue_off,
            queue_stride,
            refcnt_off,
            frames_off,
            big_frames,
            big_size,
            big_off,
            total,
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// The offsets `tests/hostile_cluster.rs` writes garbage at (a version 4 segment: version 2
    /// plus big frames after the master counters (3), plus the queue's futex word (4), in what
    /// was padding).
    #[test]
    fn layout_of_a_version_4_segment() {
        assert_eq!(VERSION, 4);
        assert_eq!(std::mem::offset_of!(Header, version), 8);
        assert_eq!(std::mem::offset_of!(Header, state), 48);
        assert_eq!(std::mem::offset_of!(Header, queue_off), 56);
        assert_eq!(std::mem::offset_of!(Header, queue_stride), 64);
        assert_eq!(std::mem::offset_of!(Header, counters), 184);
        assert!(std::mem::size_of::<Header>() <= HEADER_SIZE);
        assert_eq!(std::mem::offset_of!(Cursors, tail), 128);
        assert_eq!(CTL_OFF, 256);
        assert_eq!(std::mem::offset_of!(QueueCtl, handed), 24);
        assert_eq!(std::mem::offset_of!(QueueCtl, enqueued), 64);
        assert_eq!(std::mem::offset_of!(QueueCtl, sleeping), 144);
        assert_eq!(std::mem::size_of::<QueueCtl>(), 192);
        assert_eq!(SLOTS_OFF, 512);
    }
}

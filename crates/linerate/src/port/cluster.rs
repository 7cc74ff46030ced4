//! `cluster:ID@Q`: a zero-copy cluster (PF_RING ZC / libzero style): one master distributes
//! packets to queues that consumer threads or processes read.
//!
//! # The segment
//! A cluster is one memory segment: a shared-memory file `/dev/shm/linerate-cluster-ID`
//! (created owner-only, 0600) for processes, or anonymous memory for threads. Its layout:
//!
//! ```text
//! Header (4 KiB)   magic, version, state, master pid + start time, sizes, offsets, master counters
//! Queue q (×N)     head | tail | QueueCtl (owner word, counters) | slots: [Desc; SLOTS]
//! frames           FRAMES × frame_size bytes
//! big frames       BIG × big_frame_size bytes (jumbo frames and longer: see below)
//! tx lanes (×L)    head | tail | QueueCtl | slots | the lane's own frames
//! ```
//!
//! Only the master writes packet bytes: it copies each received packet once into a frame of the
//! segment, and from then on only 32-byte descriptors move. A packet sent to several queues
//! (fan-out) sits in one frame with a reference count (kept in the master's own memory) and is
//! marked [`Desc::F_SHARED`] (read-only). Offsets, never pointers, are stored, so the segment can be mapped anywhere.
//!
//! A packet longer than a frame goes whole into one of a few **big frames** (a power of two
//! up to 128 KiB each, [`ClusterConfig::big_frame_size`]); small packets keep small frames.
//! Big frames are only address space (a sparse file) until written. A packet longer than a big
//! frame, or than a frame when the cluster has none, is dropped whole and counted `too_big`:
//! never cut.
//!
//! # Queues
//! Each queue is a single-producer single-consumer ring of descriptors. The consumer does not
//! copy descriptors out: like a kernel ring, it hands out the slots `[tail, read)` in a batch and
//! releases them (moves `tail`) at its next receive call, so the master learns which frames came
//! back by watching `tail` and looking up its own record of what it put in each slot. No return
//! ring, and nothing a consumer writes can make the master free a frame it did not send.
//!
//! # Faults
//! - The master never waits: a queue without room gets `ring_full` drops, for that queue only.
//! - A queue whose consumer left or died (its pid is gone or a zombie) gets `consumer_gone`
//!   drops; the master reclaims the frames still in that queue. A consumer that restarts
//!   re-attaches to the same queue and resumes. A queue that was never attached buffers up to its
//!   size, then counts `ring_full` (consumers usually start after the master).
//! - When the master ends it marks the segment closed; consumers drain what is left and end
//!   normally ([`Port::is_finished`], "cluster ID ended: master stopped"). What no consumer read
//!   by then is taken back and counted as `unread` ([`Master::take_back`]). A master killed
//!   with SIGKILL is noticed differently (its pid and start time no longer match a running
//!   process): its consumers stop with an error saying it died, and the next master replaces
//!   its stale segment.
//! - Nothing read from the segment is trusted: the master's figures are its own (kept in its
//!   memory, published for others to read), every cursor a consumer writes is clamped, and a
//!   consumer checks the master's head cursor and every descriptor (inside a frame of the
//!   segment, a plausible length) before handing it out: a corrupted segment stops it with an
//!   error, the bad batch counted as `malformed`.

use super::{DropReason, Port, PortError, PortStats};
use crate::mem::{Batch, Desc, Pool, Region, BATCH};
use crossbeam_utils::CachePadded;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

/// `LRCLUST1`.
const MAGIC: u64 = u64::from_le_bytes(*b"LRCLUST1");
const VERSION: u32 = 3;
const HEADER_SIZE: usize = 4096;
/// Most queues a cluster has (a destination set is a 64-bit mask).
pub const MAX_QUEUES: usize = 64;
/// Default slots per queue.
pub const DEFAULT_SLOTS: u32 = 4096;

const STATE_RUNNING: u32 = 1;
const STATE_CLOSED: u32 = 2;
/// Owner pid value while the master reclaims a queue.
const RECLAIMING: u32 = u32::MAX;
/// Longest wire length a descriptor may claim (a garbage one is a corrupted segment).
const MAX_WIRE_LEN: u32 = 1 << 24;

/// Where cluster segments live.
pub fn segment_path(id: u32) -> PathBuf {
    let dir = std::env::var_os("LINERATE_SHM_DIR").unwrap_or_else(|| "/dev/shm".into());
    Path::new(&dir).join(format!("linerate-cluster-{id}"))
}

/// Master counters in the header (written by the master only).
#[repr(C)]
#[derive(Debug)]
struct MasterCounters {
    rx_packets: AtomicU64,
    rx_bytes: AtomicU64,
    /// Packets no destination wanted (filter, or a policy that drops).
    filtered: AtomicU64,
    /// Packets lost for want of a free frame.
    no_frame: AtomicU64,
    /// Packets with at least one destination.
    routed: AtomicU64,
    /// Destinations asked for, summed over packets (a fan-out packet to 3 queues counts 3).
    copies: AtomicU64,
    /// Packets consumers transmitted that the master sent to the egress port (`-o`).
    tx_packets: AtomicU64,
    tx_bytes: AtomicU64,
    /// Packets consumers transmitted that the egress port did not take.
    tx_dropped: AtomicU64,
    /// Transmitted descriptors with an impossible length (a corrupted lane), dropped.
    tx_malformed: AtomicU64,
    /// Packets longer than a frame holds (see `--max-pkt-len`), dropped whole (counted once,
    /// also per queue). After the fields above: a segment without it reads 0 here.
    too_big: AtomicU64,
}

#[repr(C)]
#[derive(Debug)]
struct Header {
    magic: AtomicU64,
    version: u32,
    queues: u32,
    slots: u32,
    frames: u32,
    frame_size: u32,
    headroom: u32,
    master_pid: u32,
    cluster_id: u32,
    master_start: u64,
    state: AtomicU32,
    _pad: u32,
    queue_off: u64,
    queue_stride: u64,
    refcnt_off: u64,
    frames_off: u64,
    total_len: u64,
    /// Transmit lanes (consumers → master → `-o` port), slots per lane, where they are.
    tx_lanes: u32,
    tx_slots: u32,
    tx_off: u64,
    tx_stride: u64,
    /// Application index of each queue.
    app_of: [u8; MAX_QUEUES],
    counters: MasterCounters,
    /// Big frames (0: none), their size, where they are.
    big_frames: u32,
    big_frame_size: u32,
    big_off: u64,
}

/// Per-queue control block, at the start of each queue's area.
#[repr(C, align(64))]
#[derive(Debug)]
struct QueueCtl {
    /// `generation << 32 | pid` of the attached consumer; pid 0: none; generation 0: never.
    owner: AtomicU64,
    /// Times a consumer attached.
    attaches: AtomicU64,
    /// The consumer's last sign of life: wall-clock ms, written every 64 receive calls.
    heartbeat: AtomicU64,
    /// The consumer's read cursor: slots up to here were handed out to it (written at every
    /// receive call that returns packets; read by the master when it takes the queue back).
    handed: AtomicU64,
    /// Keeps the consumer's words above off the line of the master's counters below.
    _line: [u64; 4],
    /// Descriptors the master put in the ring.
    enqueued: AtomicU64,
    enqueued_bytes: AtomicU64,
    /// Dropped: the ring was full.
    ring_full: AtomicU64,
    /// Dropped: no consumer (left or died), including packets reclaimed from the ring.
    consumer_gone: AtomicU64,
    /// Enqueued packets the master took back from a dead consumer's ring (part of
    /// `consumer_gone`, to be subtracted from `enqueued`).
    reclaimed: AtomicU64,
    /// Dropped: no free frame.
    no_frame: AtomicU64,
    /// Dropped: still in the queue, never read, when the master ended.
    unread: AtomicU64,
    /// Released by the consumer (or handed to it when the master ended).
    delivered: AtomicU64,
    /// When the master took the queue back: how far the consumer's reads count as delivered
    /// (the consumer keeps nothing past it). Written before the owner word is released.
    taken_at: AtomicU64,
    /// Dropped: longer than a frame holds (was padding: a segment without it reads 0).
    too_big: AtomicU64,
    _line2: [u64; 6],
}

#[repr(C)]
struct Cursors {
    head: CachePadded<AtomicU64>,
    tail: CachePadded<AtomicU64>,
}

/// Inside a queue's area (4096-aligned): the cursors, the control block, the slots.
const CTL_OFF: usize = std::mem::size_of::<Cursors>();
const SLOTS_OFF: usize = (CTL_OFF + std::mem::size_of::<QueueCtl>()).div_ceil(128) * 128;
const _: () = assert!(CTL_OFF.is_multiple_of(64) && std::mem::align_of::<Cursors>() <= 4096);

/// Sizes of a cluster.
#[derive(Clone, Debug)]
pub struct ClusterConfig {
    /// Queues per application (`-n 2,1` is `[2, 1]`); at most 64 queues in all.
    pub apps: Vec<u32>,
    /// Slots per queue (a power of two).
    pub slots: u32,
    /// Frames in the segment (0: enough for every queue full).
    pub frames: u32,
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
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            apps: vec![1],
            slots: DEFAULT_SLOTS,
            frames: 0,
            tx_lanes: 0,
            tx_slots: 1024,
            frame_size: crate::mem::DEFAULT_FRAME_SIZE,
            big_frames: 0,
            big_frame_size: 0,
            max_len: 0,
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
            self.queues() * (self.slots.max(64) as usize).next_power_of_two() + 2 * BATCH
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

struct Layout {
    queues: usize,
    slots: usize,
    frames: usize,
    frame_size: usize,
    queue_off: usize,
    queue_stride: usize,
    refcnt_off: usize,
    frames_off: usize,
    big_frames: usize,
    big_size: usize,
    big_off: usize,
    tx_lanes: usize,
    tx_slots: usize,
    tx_off: usize,
    tx_stride: usize,
    total: usize,
}

/// Inside a transmit lane: cursors, control block, slots, then the lane's own frames here.
fn tx_frames_off(tx_slots: usize) -> usize {
    (SLOTS_OFF + tx_slots * std::mem::size_of::<Desc>()).div_ceil(4096) * 4096
}

impl Layout {
    fn new(
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

/// A mapped cluster segment (master or consumer side).
pub struct Segment {
    pool: Arc<Pool>,
    id: u32,
    path: Option<PathBuf>,
    queues: usize,
    slots: usize,
    frames: usize,
    frame_size: usize,
    headroom: usize,
    queue_off: usize,
    queue_stride: usize,
    frames_off: usize,
    big_frames: usize,
    big_size: usize,
    big_off: usize,
    tx_lanes: usize,
    tx_slots: usize,
    tx_off: usize,
    tx_stride: usize,
}

impl std::fmt::Debug for Segment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Segment")
            .field("id", &self.id)
            .field("path", &self.path)
            .field("queues", &self.queues)
            .field("slots", &self.slots)
            .field("frames", &self.frames)
            .finish()
    }
}

fn err(path: &str, msg: String) -> PortError {
    PortError::Gone {
        port: path.to_string(),
        why: msg,
    }
}

impl Segment {
    fn base(&self) -> *mut u8 {
        self.pool.region().as_ptr()
    }

    fn header(&self) -> &Header {
        // SAFETY: the region is at least HEADER_SIZE bytes (checked when mapped), page aligned,
        // and Header (< 4 KiB, only integers and atomics) is valid for any bit pattern.
        unsafe { &*(self.base() as *const Header) }
    }

    fn ctl(&self, q: usize) -> &QueueCtl {
        debug_assert!(q < self.queues);
        // SAFETY: q < queues; each queue area starts 4096-aligned inside the region (layout
        // checked when mapped) and holds a QueueCtl made of atomics at CTL_OFF (64-aligned).
        unsafe {
            &*(self
                .base()
                .add(self.queue_off + q * self.queue_stride + CTL_OFF)
                as *const QueueCtl)
        }
    }

    fn cursors(&self, q: usize) -> &Cursors {
        // SAFETY: as for ctl; the cursors start the queue area (4096-aligned), atomics only.
        unsafe { &*(self.base().add(self.queue_off + q * self.queue_stride) as *const Cursors) }
    }

    #[inline(always)]
    fn slot(&self, q: usize, cursor: u64) -> *mut Desc {
        let i = (cursor as usize) & (self.slots - 1);
        // SAFETY: i < slots, and the slot array (slots × 32 bytes) starts at SLOTS_OFF inside
        // the queue's area (layout checked when mapped).
        unsafe {
            (self
                .base()
                .add(self.queue_off + q * self.queue_stride + SLOTS_OFF) as *mut Desc)
                .add(i)
        }
    }

    fn lane_base(&self, l: usize) -> *mut u8 {
        debug_assert!(l < self.tx_lanes);
        // SAFETY: l < tx_lanes: the lane's area lies inside the region (layout checked when
        // mapped).
        unsafe { self.base().add(self.tx_off + l * self.tx_stride) }
    }

    fn lane_cursors(&self, l: usize) -> &Cursors {
        // SAFETY: the cursors start the lane's 4096-aligned area; atomics only.
        unsafe { &*(self.lane_base(l) as *const Cursors) }
    }

    fn lane_ctl(&self, l: usize) -> &QueueCtl {
        // SAFETY: a QueueCtl (atomics) at CTL_OFF inside the lane's area, 64-aligned.
        unsafe { &*(self.lane_base(l).add(CTL_OFF) as *const QueueCtl) }
    }

    #[inline(always)]
    fn lane_slot(&self, l: usize, cursor: u64) -> *mut Desc {
        let i = (cursor as usize) & (self.tx_slots - 1);
        // SAFETY: i < tx_slots; the lane's slot array starts at SLOTS_OFF in its area.
        unsafe { (self.lane_base(l).add(SLOTS_OFF) as *mut Desc).add(i) }
    }

    /// Address (in the region) of the packet in the lane frame that goes with slot `cursor`.
    #[inline(always)]
    fn lane_frame_addr(&self, l: usize, cursor: u64) -> u64 {
        let i = (cursor as usize) & (self.tx_slots - 1);
        (self.tx_off
            + l * self.tx_stride
            + tx_frames_off(self.tx_slots)
            + i * self.frame_size
            + self.headroom) as u64
    }

    #[inline(always)]
    fn frame_addr(&self, frame: u32) -> u64 {
        (self.frames_off + frame as usize * self.frame_size + self.headroom) as u64
    }

    /// Packet address in frame `frame` (an index past the regular frames: a big frame).
    #[inline]
    fn big_frame_addr(&self, frame: u32) -> u64 {
        let i = frame as usize - self.frames;
        (self.big_off + i * self.big_size + self.headroom) as u64
    }

    /// The pool whose region is this segment (descriptors' addresses point into it).
    pub fn pool(&self) -> &Arc<Pool> {
        &self.pool
    }

    /// Number of queues.
    pub fn queues(&self) -> usize {
        self.queues
    }

    /// Cluster id.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The application (index in `-n`) queue `q` belongs to.
    pub fn app_of(&self, q: usize) -> usize {
        self.header().app_of.get(q).copied().unwrap_or(0) as usize
    }

    /// Whether the master closed the cluster.
    pub fn is_closed(&self) -> bool {
        self.header().state.load(Ordering::Acquire) == STATE_CLOSED
    }

    /// The master's pid.
    pub fn master_pid(&self) -> u32 {
        self.header().master_pid
    }

    /// Statistics of the whole cluster, as the master last published them (from another
    /// process: the master's own [`Master::stats`] is exact).
    pub fn stats(&self) -> ClusterStats {
        let c = &self.header().counters;
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let queues = (0..self.queues)
            .map(|q| {
                let k = self.ctl(q);
                let (enq, delivered, reclaimed, unread) = (
                    r(&k.enqueued),
                    r(&k.delivered),
                    r(&k.reclaimed),
                    r(&k.unread),
                );
                QueueStats {
                    app: self.app_of(q),
                    enqueued: enq,
                    delivered,
                    bytes: r(&k.enqueued_bytes),
                    ring_full: r(&k.ring_full),
                    consumer_gone: r(&k.consumer_gone),
                    no_frame: r(&k.no_frame),
                    too_big: r(&k.too_big),
                    unread,
                    backlog: enq.saturating_sub(delivered + reclaimed + unread),
                    consumer_pid: self.consumer_pid(q),
                    attaches: r(&k.attaches),
                }
            })
            .collect();
        ClusterStats {
            rx_packets: r(&c.rx_packets),
            rx_bytes: r(&c.rx_bytes),
            filtered: r(&c.filtered),
            no_frame: r(&c.no_frame),
            too_big: r(&c.too_big),
            routed: r(&c.routed),
            copies: r(&c.copies),
            tx_packets: r(&c.tx_packets),
            tx_bytes: r(&c.tx_bytes),
            tx_dropped: r(&c.tx_dropped),
            tx_malformed: r(&c.tx_malformed),
            queues,
        }
    }

    /// The consumer attached to queue `q`, if any.
    fn consumer_pid(&self, q: usize) -> Option<u32> {
        match self.ctl(q).owner.load(Ordering::Relaxed) as u32 {
            0 | RECLAIMING => None,
            p => Some(p),
        }
    }

    fn map(
        region: Region,
        id: u32,
        path: Option<PathBuf>,
        who: &str,
    ) -> Result<Segment, PortError> {
        if region.len() < HEADER_SIZE {
            return Err(err(who, "segment too small to be a cluster".into()));
        }
        // SAFETY: the region holds at least HEADER_SIZE bytes; Header is plain integers and
        // atomics, valid for any bytes.
        let h = unsafe { &*(region.as_ptr() as *const Header) };
        if h.magic.load(Ordering::Acquire) != MAGIC || h.version != VERSION {
            return Err(err(
                who,
                "not a linerate cluster segment (or another version)".into(),
            ));
        }
        let l = Layout::new(
            h.queues as usize,
            h.slots as usize,
            h.frames as usize,
            h.frame_size as usize,
            (h.big_frames as usize, h.big_frame_size as usize),
            h.tx_lanes as usize,
            h.tx_slots as usize,
        );
        let sane = (1..=MAX_QUEUES).contains(&l.queues)
            && l.slots.is_power_of_two()
            && (64..=1 << 24).contains(&l.slots)
            && (1..SOLE as usize).contains(&(l.frames + l.big_frames))
            && (l.big_frames == 0
                || (l.big_size.is_power_of_two()
                    && l.big_size > l.frame_size
                    && l.big_size <= MAX_BIG_FRAME as usize))
            && l.big_off as u64 == h.big_off
            && l.frame_size.is_power_of_two()
            && (256..=65536).contains(&l.frame_size)
            && (h.headroom as usize) < l.frame_size
            && l.queue_off as u64 == h.queue_off
            && l.queue_stride as u64 == h.queue_stride
            && l.refcnt_off as u64 == h.refcnt_off
            && l.frames_off as u64 == h.frames_off
            && l.tx_lanes <= MAX_QUEUES
            && (l.tx_lanes == 0
                || (l.tx_slots.is_power_of_two() && (64..=1 << 24).contains(&l.tx_slots)))
            && l.tx_off as u64 == h.tx_off
            && l.tx_stride as u64 == h.tx_stride
            && l.total as u64 == h.total_len
            && l.total <= region.len();
        if !sane {
            return Err(err(who, "cluster segment header is inconsistent".into()));
        }
        let headroom = h.headroom as usize;
        Ok(Segment {
            pool: Arc::new(Pool::external(region)),
            id,
            path,
            queues: l.queues,
            slots: l.slots,
            frames: l.frames,
            frame_size: l.frame_size,
            headroom,
            queue_off: l.queue_off,
            queue_stride: l.queue_stride,
            frames_off: l.frames_off,
            big_frames: l.big_frames,
            big_size: l.big_size,
            big_off: l.big_off,
            tx_lanes: l.tx_lanes,
            tx_slots: l.tx_slots,
            tx_off: l.tx_off,
            tx_stride: l.tx_stride,
        })
    }

    /// Maps the running cluster `id` (a consumer attaching). The file must be a segment of
    /// ours: a regular file (not a link) owned by root or by this user, writable by its owner
    /// only; anything else is refused, whatever it holds.
    pub fn open(id: u32) -> Result<Arc<Segment>, PortError> {
        let path = segment_path(id);
        let who = format!("cluster:{id}");
        let (region, meta) = Region::open_shared(&path).map_err(|e| match e {
            crate::mem::MemError::Shm { source, .. }
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                err(
                    &who,
                    format!(
                        "no cluster {id} ({} does not exist): start its master first, e.g. \
                         `linerate balance -i PORT -c {id} -n 1`",
                        path.display()
                    ),
                )
            }
            crate::mem::MemError::Shm { source, .. } => err(&who, not_ours(&path, &source)),
            other => PortError::Mem(other),
        })?;
        check_owner(&meta, &path, &who, false)?;
        let seg = Segment::map(region, id, Some(path), &who)?;
        let h = seg.header();
        if h.cluster_id != id {
            return Err(err(
                &who,
                format!(
                    "{} holds cluster {}, not {id}: refusing it",
                    segment_path(id).display(),
                    h.cluster_id
                ),
            ));
        }
        if h.state.load(Ordering::Acquire) != STATE_RUNNING
            || !same_process(h.master_pid, h.master_start)
        {
            return Err(err(
                &who,
                format!(
                    "cluster {id} is not running (its master, pid {}, has exited): start it again",
                    h.master_pid
                ),
            ));
        }
        Ok(Arc::new(seg))
    }
}

use crate::sys::process::euid;

/// What to say when the segment's name could not be opened (other than "not there").
fn not_ours(path: &Path, source: &std::io::Error) -> String {
    use std::os::unix::fs::MetadataExt;
    let lst = std::fs::symlink_metadata(path);
    match source.raw_os_error() {
        Some(libc::ELOOP) => format!(
            "{} is a symbolic link, not a cluster segment: refusing to follow it (remove it \
             if it is not yours to keep)",
            path.display()
        ),
        Some(libc::EACCES | libc::EPERM) => format!(
            "{}: permission denied: the cluster belongs to another user (uid {}); run as that \
             user",
            path.display(),
            lst.map_or("?".to_string(), |m| m.uid().to_string())
        ),
        _ => format!("{}: {source}", path.display()),
    }
}

/// Refuses a segment file that is not ours: owned by someone other than this user (or root,
/// when `master` is false: consumers may attach to a root master's cluster), or writable by
/// anyone but its owner.
fn check_owner(
    meta: &std::fs::Metadata,
    path: &Path,
    who: &str,
    master: bool,
) -> Result<(), PortError> {
    use std::os::unix::fs::MetadataExt;
    let (uid, mode) = (meta.uid(), meta.mode() & 0o7777);
    let owner_ok = uid == euid() || (!master && uid == 0);
    if owner_ok && mode & 0o022 == 0 {
        return Ok(());
    }
    Err(err(
        who,
        format!(
            "{} is owned by uid {uid} with mode {mode:o}: not a segment of ours (a cluster \
             segment belongs to {} and only its owner may write it); refusing it. Remove it if \
             it is stale: rm {}",
            path.display(),
            if master {
                "the master's user"
            } else {
                "root or you"
            },
            path.display()
        ),
    ))
}

/// Segment names this process published and still holds (removed by [`Master`]'s drop, or by
/// [`remove_published_segments`] on a forced exit): (path, device, inode).
static PUBLISHED: std::sync::Mutex<Vec<(PathBuf, u64, u64)>> = std::sync::Mutex::new(Vec::new());

/// Removes `path` if it still names the file (device, inode) we published.
fn unlink_if_ours(path: &Path, dev: u64, ino: u64) {
    use std::os::unix::fs::MetadataExt;
    if let Ok(m) = std::fs::symlink_metadata(path) {
        if m.dev() == dev && m.ino() == ino {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Removes the names of every cluster segment this process created and still owns: for a
/// forced exit (a repeated signal), where the masters' destructors do not run. Consumers keep
/// their mappings and see the master gone. A name that now points elsewhere is left alone.
/// Call it from a normal thread (it takes a lock), not from inside a signal handler.
pub fn remove_published_segments() {
    let list = match PUBLISHED.lock() {
        Ok(mut l) => std::mem::take(&mut *l),
        Err(p) => std::mem::take(&mut *p.into_inner()),
    };
    for (path, dev, ino) in list {
        unlink_if_ours(&path, dev, ino);
    }
}

/// Counters of one queue.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// Application the queue belongs to.
    pub app: usize,
    /// Descriptors put in the ring.
    pub enqueued: u64,
    /// Packets delivered: released by the consumer (read and done with), or handed to it
    /// when the master ended. Only grows.
    pub delivered: u64,
    /// Bytes enqueued (wire lengths).
    pub bytes: u64,
    /// Dropped because the ring was full.
    pub ring_full: u64,
    /// Dropped because no consumer was attached (left or died), reclaimed ones included.
    pub consumer_gone: u64,
    /// Dropped for want of a free frame.
    pub no_frame: u64,
    /// Dropped: longer than the cluster's frames hold (raise `--max-pkt-len`); never cut.
    pub too_big: u64,
    /// Dropped: still in the queue, never read, when the master ended (no consumer, or one that
    /// did not read them in time).
    pub unread: u64,
    /// Descriptors in the ring not yet released by the consumer (neither delivered nor
    /// dropped yet; 0 once the master ended).
    pub backlog: u64,
    /// The attached consumer.
    pub consumer_pid: Option<u32>,
    /// Times a consumer attached.
    pub attaches: u64,
}

impl QueueStats {
    /// Drops of this queue (all reasons).
    pub fn drops(&self) -> u64 {
        self.ring_full + self.consumer_gone + self.no_frame + self.too_big + self.unread
    }

    /// Packets meant for this queue: delivered + in the queue + drops.
    pub fn offered(&self) -> u64 {
        self.delivered + self.backlog + self.drops()
    }
}

/// Counters of a cluster. Every received packet is filtered or routed; every destination a
/// routed packet had is delivered, still in its queue (backlog), or dropped under a reason on
/// that queue: `rx_packets = filtered + routed` and `copies = Σ_q (delivered + backlog +
/// ring_full + consumer_gone + no_frame + too_big + unread)`; once the master ended, backlog is 0. With one
/// queue per application per packet (every mode but fan-out), each application's queues add up
/// to `routed`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterStats {
    /// Packets the master received.
    pub rx_packets: u64,
    /// Bytes the master received.
    pub rx_bytes: u64,
    /// Packets no queue wanted (filter or policy).
    pub filtered: u64,
    /// Packets lost for want of a free frame (counted once, also per queue).
    pub no_frame: u64,
    /// Packets longer than a frame holds, dropped whole (counted once, also per queue).
    pub too_big: u64,
    /// Packets with at least one destination.
    pub routed: u64,
    /// Destinations asked for, over all packets.
    pub copies: u64,
    /// Packets consumers transmitted that went out of the egress port.
    pub tx_packets: u64,
    /// Their bytes.
    pub tx_bytes: u64,
    /// Packets consumers transmitted that the egress port did not take.
    pub tx_dropped: u64,
    /// Transmitted descriptors with an impossible length (a corrupted lane), dropped.
    pub tx_malformed: u64,
    /// Per queue.
    pub queues: Vec<QueueStats>,
}

impl ClusterStats {
    /// Number of applications.
    pub fn apps(&self) -> usize {
        self.queues.iter().map(|q| q.app + 1).max().unwrap_or(0)
    }

    /// Checks the accounting invariant for every application; returns a description of the
    /// first violation.
    pub fn check_invariant(&self) -> Result<(), String> {
        if self.rx_packets != self.filtered + self.routed {
            return Err(format!(
                "rx {} != filtered {} + routed {}",
                self.rx_packets, self.filtered, self.routed
            ));
        }
        let sum: u64 = self.queues.iter().map(|q| q.offered()).sum();
        if sum != self.copies {
            return Err(format!(
                "destinations asked {} != Σ delivered + backlog + drops {}",
                self.copies, sum
            ));
        }
        Ok(())
    }

    /// Packets meant for application `a` (delivered + backlog + drops over its queues).
    pub fn app_offered(&self, a: usize) -> u64 {
        self.queues
            .iter()
            .filter(|q| q.app == a)
            .map(|q| q.offered())
            .sum()
    }

    /// Packets delivered over all queues.
    pub fn delivered(&self) -> u64 {
        self.queues.iter().map(|q| q.delivered).sum()
    }

    /// Drops by reason over all queues (and the filter), as port counters.
    pub fn drops(&self) -> crate::port::Drops {
        let mut d = crate::port::Drops::default();
        d.add(DropReason::Filter, self.filtered);
        for q in &self.queues {
            d.add(DropReason::RingFull, q.ring_full);
            d.add(DropReason::ConsumerGone, q.consumer_gone);
            d.add(DropReason::NoFrame, q.no_frame);
            d.add(DropReason::TooBig, q.too_big);
            d.add(DropReason::Unread, q.unread);
        }
        d
    }

    /// Packets still in queues (neither delivered nor dropped yet).
    pub fn backlog(&self) -> u64 {
        self.queues.iter().map(|q| q.backlog).sum()
    }
}

/// /proc/PID/stat: (state, start time in clock ticks since boot) of a process.
fn proc_stat(pid: u32) -> Option<(u8, u64)> {
    if pid == 0 || pid == RECLAIMING {
        return None;
    }
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 1..];
    let mut f = rest.split_ascii_whitespace();
    let state = f.next()?.bytes().next()?;
    // Fields after the state: ppid(4) … starttime is field 22, the 20th after the state.
    let start = f.nth(18)?.parse().ok()?;
    Some((state, start))
}

/// Whether `pid` is a running (not zombie) process.
pub fn alive(pid: u32) -> bool {
    matches!(proc_stat(pid), Some((s, _)) if s != b'Z' && s != b'X')
}

fn same_process(pid: u32, start: u64) -> bool {
    matches!(proc_stat(pid), Some((s, st)) if s != b'Z' && s != b'X' && st == start)
}

/// Wall-clock milliseconds (comparable between processes, unlike a per-process monotonic clock).
fn now_ms() -> u64 {
    crate::time::wall_ns() / 1_000_000
}

fn my_pid() -> u32 {
    std::process::id()
}

/// Per-queue state the master keeps in its own memory.
struct MasterQueue {
    head: u64,
    reclaimed: u64,
    cached_tail: u64,
    /// Frame index in each slot, as the master put it there.
    shadow: Vec<u32>,
    /// Descriptors written for this batch, not yet published.
    nstaged: usize,
    /// Packets of this batch for this queue lost for want of a frame.
    nf_batch: u64,
    /// This batch's descriptors for the queue, copied into the ring at once.
    stage: Box<[Desc; BATCH]>,
    /// Local copies of the counters, published once per batch.
    enqueued: u64,
    enqueued_bytes: u64,
    ring_full: u64,
    consumer_gone: u64,
    reclaimed_pkts: u64,
    no_frame: u64,
    too_big: u64,
    /// Packets taken back unread when the master ended.
    unread: u64,
    /// The queue had a consumer that left or died: drop for it until one attaches.
    gone: bool,
}

impl MasterQueue {
    /// Released by the consumer (or handed to it at the end): every slot given back that was
    /// not taken from a dead consumer or left unread. Only grows.
    fn delivered(&self) -> u64 {
        self.reclaimed - self.reclaimed_pkts - self.unread
    }
}

/// The master side of a cluster: owns the segment, copies packets into frames and distributes
/// descriptors. Dropping it closes the cluster (consumers stop) and removes the file.
pub struct Master {
    seg: Arc<Segment>,
    q: Vec<MasterQueue>,
    free: Frees,
    /// Longest packet carried in a regular frame, and in any frame.
    cap: usize,
    big_cap: usize,
    /// Reference count of each frame sent to several queues (fan-out), in the master's own
    /// memory: nothing a consumer writes can make the master free a frame.
    refcnt: Vec<u32>,
    rx_packets: u64,
    rx_bytes: u64,
    filtered: u64,
    no_frame: u64,
    too_big: u64,
    routed: u64,
    copies: u64,
    space: [u32; MAX_QUEUES],
    tx_tail: Vec<u64>,
    tx_packets: u64,
    tx_bytes: u64,
    tx_dropped: u64,
    tx_malformed: u64,
    tx_batch: Batch,
    batches: u32,
    consumer_timeout_ms: Option<u64>,
    /// The name this master gave its segment, and the file's (device, inode).
    published: Option<(PathBuf, u64, u64)>,
}

impl Master {
    /// Creates cluster `id` in shared memory for consumer processes. An existing segment of a
    /// running master is an error; a stale one (its master gone) is replaced.
    pub fn create(id: u32, cfg: &ClusterConfig) -> Result<Master, PortError> {
        let path = segment_path(id);
        let who = format!("cluster:{id}");
        match Region::open_shared(&path) {
            Ok((old, meta)) => {
                // Something is there: only a stale segment of ours is replaced.
                check_owner(&meta, &path, &who, true)?;
                if let Ok(seg) = Segment::map(old, id, None, &who) {
                    let h = seg.header();
                    if h.state.load(Ordering::Acquire) == STATE_RUNNING
                        && same_process(h.master_pid, h.master_start)
                    {
                        return Err(err(
                            &who,
                            format!(
                                "cluster {id} is in use by its master, pid {} ({})",
                                h.master_pid,
                                path.display()
                            ),
                        ));
                    }
                }
                // Stale (its master died without closing it): replace it. Consumers still
                // mapping the old file keep the old inode and see a dead master.
                use std::os::unix::fs::MetadataExt;
                unlink_if_ours(&path, meta.dev(), meta.ino());
            }
            Err(crate::mem::MemError::Shm { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound => {}
            Err(crate::mem::MemError::Shm { source, .. }) => {
                return Err(err(&who, not_ours(&path, &source)))
            }
            Err(e) => return Err(e.into()),
        }
        let l = Self::layout(cfg)?;
        let dir = path.parent().unwrap_or(Path::new("/dev/shm"));
        let (region, mut shm) = Region::create_shared(dir, l.total)?;
        let mut m = Self::init(region, id, Some(path.clone()), cfg, &l, &who)?;
        // Publish only a fully built segment: consumers never see a half-initialised one. The
        // link fails if the name exists (a file, a link, another master's segment), so of two
        // masters started at once only one wins, and nothing planted there is followed.
        let ident = shm.identity();
        match shm.publish(&path).and(ident) {
            Ok((dev, ino)) => {
                m.published = Some((path.clone(), dev, ino));
                if let Ok(mut l) = PUBLISHED.lock() {
                    l.push((path, dev, ino));
                }
                Ok(m)
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(err(
                &who,
                format!(
                    "cluster {id} was just created by another master, or something else took \
                     its name ({})",
                    path.display()
                ),
            )),
            Err(source) => Err(PortError::Io {
                path: path.display().to_string(),
                source,
            }),
        }
    }

    /// Creates a cluster in anonymous memory, for consumer threads of this process.
    pub fn anon(cfg: &ClusterConfig) -> Result<Master, PortError> {
        let l = Self::layout(cfg)?;
        let region = Region::anon(l.total)?;
        // Big frames are written sparsely: a huge page there would make 2 MiB resident.
        region.advise_no_huge(l.big_off, l.big_frames * l.big_size);
        Self::init(region, 0, None, cfg, &l, "cluster")
    }

    fn layout(cfg: &ClusterConfig) -> Result<Layout, PortError> {
        let nq = cfg.queues();
        if nq == 0 || nq > MAX_QUEUES || cfg.apps.contains(&0) {
            return Err(PortError::BadUri {
                uri: format!("-n {:?}", cfg.apps),
                why: format!("1 to {MAX_QUEUES} queues in all, each application at least one"),
            });
        }
        let slots = (cfg.slots.max(64) as usize).next_power_of_two();
        if !cfg.frame_size.is_power_of_two() || !(256..=65536).contains(&cfg.frame_size) {
            return Err(PortError::Mem(crate::mem::MemError::Config(format!(
                "frame size {} must be a power of two from 256 to 65536",
                cfg.frame_size
            ))));
        }
        let frames = if cfg.frames == 0 {
            nq * slots + 2 * BATCH
        } else {
            (cfg.frames as usize).max(2 * BATCH)
        };
        let big = cfg.big_frames as usize;
        if big > 0
            && (!cfg.big_frame_size.is_power_of_two()
                || cfg.big_frame_size <= cfg.frame_size
                || cfg.big_frame_size > MAX_BIG_FRAME)
        {
            return Err(PortError::Mem(crate::mem::MemError::Config(format!(
                "big frame size {} must be a power of two above the frame size {} and at most                  {MAX_BIG_FRAME}",
                cfg.big_frame_size, cfg.frame_size
            ))));
        }
        let big_size = if big > 0 {
            cfg.big_frame_size as usize
        } else {
            0
        };
        if frames + big >= SOLE as usize {
            return Err(PortError::Mem(crate::mem::MemError::Config(format!(
                "{frames} frames: at most {} (-b, or fewer slots per queue)",
                SOLE - 1
            ))));
        }
        let tx_lanes = (cfg.tx_lanes as usize).min(MAX_QUEUES);
        let tx_slots = (cfg.tx_slots.max(64) as usize).next_power_of_two();
        Ok(Layout::new(
            nq,
            slots,
            frames,
            cfg.frame_size as usize,
            (big, big_size),
            tx_lanes,
            tx_slots,
        ))
    }

    fn init(
        region: Region,
        id: u32,
        path: Option<PathBuf>,
        cfg: &ClusterConfig,
        l: &Layout,
        who: &str,
    ) -> Result<Master, PortError> {
        let base = region.as_ptr();
        let mut app_of = [0u8; MAX_QUEUES];
        let mut q = 0;
        for (a, &n) in cfg.apps.iter().enumerate() {
            for _ in 0..n {
                app_of[q] = a as u8;
                q += 1;
            }
        }
        let headroom = crate::mem::DEFAULT_HEADROOM.min(l.frame_size as u32 / 4);
        let max = if cfg.max_len == 0 {
            usize::MAX
        } else {
            cfg.max_len as usize
        };
        let cap = (l.frame_size - headroom as usize).min(max);
        let big_cap = if l.big_frames > 0 {
            (l.big_size - headroom as usize).min(max)
        } else {
            cap
        };
        let pid = my_pid();
        let start = proc_stat(pid).map_or(0, |s| s.1);
        // SAFETY: the region is fresh (zeroed), ours alone, page aligned and at least
        // HEADER_SIZE bytes; we write the header once before anyone else can map it (the file
        // gets its name only afterwards, anonymous memory is private).
        unsafe {
            (base as *mut Header).write(Header {
                magic: AtomicU64::new(0),
                version: VERSION,
                queues: l.queues as u32,
                slots: l.slots as u32,
                frames: l.frames as u32,
                frame_size: l.frame_size as u32,
                headroom,
                master_pid: pid,
                cluster_id: id,
                master_start: start,
                state: AtomicU32::new(STATE_RUNNING),
                _pad: 0,
                queue_off: l.queue_off as u64,
                queue_stride: l.queue_stride as u64,
                refcnt_off: l.refcnt_off as u64,
                frames_off: l.frames_off as u64,
                total_len: l.total as u64,
                tx_lanes: l.tx_lanes as u32,
                tx_slots: l.tx_slots as u32,
                tx_off: l.tx_off as u64,
                tx_stride: l.tx_stride as u64,
                app_of,
                counters: MasterCounters {
                    rx_packets: AtomicU64::new(0),
                    rx_bytes: AtomicU64::new(0),
                    filtered: AtomicU64::new(0),
                    no_frame: AtomicU64::new(0),
                    routed: AtomicU64::new(0),
                    copies: AtomicU64::new(0),
                    tx_packets: AtomicU64::new(0),
                    tx_bytes: AtomicU64::new(0),
                    tx_dropped: AtomicU64::new(0),
                    tx_malformed: AtomicU64::new(0),
                    too_big: AtomicU64::new(0),
                },
                big_frames: l.big_frames as u32,
                big_frame_size: l.big_size as u32,
                big_off: l.big_off as u64,
            });
            // Queue control blocks and cursors are all-zero atomics: the fresh mapping already
            // holds them.
            (*(base as *const Header))
                .magic
                .store(MAGIC, Ordering::Release);
        }
        let seg = Arc::new(Segment::map(region, id, path, who)?);
        let q = (0..l.queues)
            .map(|_| MasterQueue {
                head: 0,
                reclaimed: 0,
                cached_tail: 0,
                shadow: vec![0; l.slots],
                nstaged: 0,
                nf_batch: 0,
                stage: Box::new([Desc::default(); BATCH]),
                enqueued: 0,
                enqueued_bytes: 0,
                ring_full: 0,
                consumer_gone: 0,
                reclaimed_pkts: 0,
                no_frame: 0,
                too_big: 0,
                unread: 0,
                gone: false,
            })
            .collect();
        Ok(Master {
            free: Frees {
                small: (0..l.frames as u32).rev().collect(),
                big: (l.frames as u32..(l.frames + l.big_frames) as u32)
                    .rev()
                    .collect(),
                nsmall: l.frames as u32,
            },
            refcnt: vec![0; l.frames + l.big_frames],
            cap,
            big_cap,
            seg,
            q,
            rx_packets: 0,
            rx_bytes: 0,
            filtered: 0,
            no_frame: 0,
            too_big: 0,
            routed: 0,
            copies: 0,
            space: [0; MAX_QUEUES],
            tx_tail: vec![0; l.tx_lanes],
            tx_packets: 0,
            tx_bytes: 0,
            tx_dropped: 0,
            tx_malformed: 0,
            tx_batch: Batch::new(),
            batches: 0,
            consumer_timeout_ms: None,
            published: None,
        })
    }

    /// The segment.
    pub fn segment(&self) -> &Arc<Segment> {
        &self.seg
    }

    /// Declares a consumer gone when it has not called `rx` for longer than `t` (None: only
    /// when its process is gone). Its queue is reclaimed; the consumer's next `rx` fails.
    pub fn set_consumer_timeout(&mut self, t: Option<std::time::Duration>) {
        self.consumer_timeout_ms = t.map(|d| d.as_millis().max(1) as u64);
    }

    /// A consumer port for queue `q` in this process (threaded mode).
    pub fn consumer(&self, q: usize) -> Result<ClusterPort, PortError> {
        ClusterPort::attach(self.seg.clone(), q)
    }

    /// A port of this process attached to nothing yet: its first `tx` takes a transmit lane,
    /// its first `rx` the first free queue (what `cluster:ID` opens).
    pub fn port(&self) -> ClusterPort {
        ClusterPort::unattached(self.seg.clone())
    }

    /// Whether a transmit lane has packets waiting.
    pub fn tx_pending(&self) -> bool {
        (0..self.seg.tx_lanes)
            .any(|l| self.seg.lane_cursors(l).head.load(Ordering::Relaxed) != self.tx_tail[l])
    }

    /// Sends what consumers transmitted into the cluster to `out` (the `-o` port), a few
    /// batches per lane at most; what `out` does not take is counted as `tx_dropped`. Never
    /// blocks. Returns the number of packets taken from the lanes.
    pub fn pump_tx(&mut self, out: &mut dyn Port) -> Result<usize, PortError> {
        let seg = self.seg.clone();
        let mut moved = 0;
        for l in 0..seg.tx_lanes {
            let head = seg.lane_cursors(l).head.load(Ordering::Acquire);
            let mut tail = self.tx_tail[l];
            // A lane's producer can only publish what fits.
            let head = head.clamp(tail, tail + seg.tx_slots as u64);
            let mut rounds = 0;
            while tail < head && rounds < 8 {
                rounds += 1;
                let n = ((head - tail) as usize).min(BATCH);
                self.tx_batch.bind(&seg.pool);
                let cap = (seg.frame_size - seg.headroom) as u32;
                for i in 0..n {
                    let c = tail + i as u64;
                    // SAFETY: slots [tail, head) were written by the lane's producer before its
                    // release store of head (acquired above); it reuses them only after we move
                    // the lane's tail.
                    let d = unsafe { seg.lane_slot(l, c).read() };
                    if d.len > cap {
                        // No producer of ours writes that: the lane is corrupted.
                        self.tx_malformed += 1;
                        continue;
                    }
                    // The address is ours to compute: a producer cannot point us elsewhere.
                    self.tx_batch.push(Desc {
                        addr: seg.lane_frame_addr(l, c),
                        len: d.len,
                        wire_len: d.wire_len.clamp(d.len, MAX_WIRE_LEN),
                        flags: Desc::F_SHARED,
                        ..d
                    });
                }
                let pushed = self.tx_batch.len();
                let wire = |b: &Batch| b.descs().iter().map(|d| d.wire_len as u64).sum::<u64>();
                let bytes = wire(&self.tx_batch);
                while !self.tx_batch.is_empty() {
                    match out.tx(&mut self.tx_batch) {
                        Ok(0) => break,
                        Ok(_) => {}
                        Err(e) => {
                            self.tx_batch.forget();
                            return Err(e);
                        }
                    }
                }
                let left = self.tx_batch.len();
                let left_bytes = wire(&self.tx_batch);
                self.tx_batch.forget();
                self.tx_packets += (pushed - left) as u64;
                self.tx_bytes += bytes - left_bytes;
                self.tx_dropped += left as u64;
                tail += n as u64;
                moved += n;
                seg.lane_cursors(l).tail.store(tail, Ordering::Release);
            }
            self.tx_tail[l] = tail;
        }
        if moved > 0 {
            self.publish();
        }
        Ok(moved)
    }

    /// Frames free now (not in any queue).
    pub fn free_frames(&self) -> usize {
        self.free.small.len() + self.free.big.len()
    }

    /// Takes back the frames consumers released.
    #[inline]
    fn reclaim(&mut self) {
        let seg = &*self.seg;
        let mask = seg.slots - 1;
        for (qi, q) in self.q.iter_mut().enumerate() {
            if q.reclaimed == q.head {
                // Nothing outstanding: leave the consumer's cache line alone.
                continue;
            }
            let tail = seg.cursors(qi).tail.load(Ordering::Acquire);
            // A consumer can only release what it was given.
            let tail = tail.clamp(q.reclaimed, q.head);
            q.cached_tail = tail;
            while q.reclaimed < tail {
                let f = q.shadow[(q.reclaimed as usize) & mask];
                release(&mut self.refcnt, &mut self.free, f);
                q.reclaimed += 1;
            }
        }
    }

    /// Distributes a batch: packet `i` goes to the queues set in `masks[i]` (bit q = queue q;
    /// 0 = filtered). Each packet is copied once into a frame of the segment; queues without
    /// room or without a consumer count drops. Never blocks.
    ///
    /// Work is per batch wherever it can be: each queue's free space is computed once, drops
    /// are counted per queue from how many packets asked for it and how many it took, counters
    /// and cursors are published once per queue, and the per-packet loop only copies the
    /// packet and writes one descriptor per destination.
    pub fn distribute(&mut self, batch: &Batch, masks: &[u64]) {
        self.reclaim();
        let nq = self.q.len();
        let all = if nq == 64 { u64::MAX } else { (1u64 << nq) - 1 };
        let total = batch.len();
        let n = total.min(masks.len()).min(BATCH);
        let descs = batch.descs();

        // Per-batch: which queues can take packets, and how many.
        let mut avail = 0u64;
        let mut gone = 0u64;
        for (qi, q) in self.q.iter_mut().enumerate() {
            q.nstaged = 0;
            q.nf_batch = 0;
            let free = self.seg.slots as u64 - (q.head - q.cached_tail);
            let s = if q.gone {
                gone |= 1 << qi;
                0
            } else {
                free.min(BATCH as u64) as u32
            };
            self.space[qi] = s;
            if s > 0 {
                avail |= 1 << qi;
            }
        }

        // Per-batch: destination sets, and the receive counters.
        let mut wants = [0u64; BATCH];
        let mut any = 0u64;
        let mut filtered = 0u64;
        let mut bytes = 0u64;
        for (i, d) in descs.iter().enumerate() {
            bytes += d.wire_len as u64;
            let w = if i < n { masks[i] & all } else { 0 };
            if i < BATCH {
                wants[i] = w;
            }
            any |= w;
            filtered += (w == 0) as u64;
        }
        self.rx_packets += total as u64;
        self.rx_bytes += bytes;
        self.filtered += filtered;
        self.routed += total as u64 - filtered;

        let seg = &*self.seg;
        let (cap, big_cap) = (self.cap, self.big_cap);
        let smask = seg.slots - 1;
        let region = seg.pool.region();
        for i in 0..n {
            let long = descs[i].len as usize > cap;
            if long && descs[i].len as usize > big_cap {
                // Longer than any frame: dropped whole for every queue that wanted it, never
                // cut.
                let mut m = wants[i];
                if m != 0 {
                    self.too_big += 1;
                }
                while m != 0 {
                    let qi = m.trailing_zeros() as usize;
                    m &= m - 1;
                    self.q[qi].too_big += 1;
                    self.q[qi].nf_batch += 1;
                }
                continue;
            }
            let ok = wants[i] & avail;
            if ok == 0 {
                continue;
            }
            let frame = if long {
                self.free.big.pop()
            } else {
                self.free.small.pop()
            };
            let Some(frame) = frame else {
                self.no_frame += 1;
                let mut m = ok;
                while m != 0 {
                    let qi = m.trailing_zeros() as usize;
                    m &= m - 1;
                    self.q[qi].no_frame += 1;
                    self.q[qi].nf_batch += 1;
                }
                continue;
            };
            let src = &descs[i];
            let data = batch.data(i);
            let addr = if long {
                seg.big_frame_addr(frame)
            } else {
                seg.frame_addr(frame)
            };
            let len = data.len();
            // SAFETY: the frame was on the master's free list: no queue holds it and no
            // consumer can read it until its descriptor is published below.
            if let Some(dst) = unsafe { region.bytes_mut(addr, len as u32) } {
                copy_packet(dst, &data[..len]);
            }
            let single = ok & (ok - 1) == 0;
            // A frame for one queue needs no reference count: its slot's shadow entry says so
            // and the release frees it directly.
            let held = if single {
                frame | SOLE
            } else {
                // (frame < frames: it came from the free list)
                self.refcnt[frame as usize] = ok.count_ones();
                frame
            };
            let d = Desc {
                addr,
                len: len as u32,
                flags: if single { 0 } else { Desc::F_SHARED },
                ..*src
            };
            let mut m = ok;
            while m != 0 {
                let qi = m.trailing_zeros() as usize;
                m &= m - 1;
                let q = &mut self.q[qi];
                let c = q.head + q.nstaged as u64;
                q.shadow[(c as usize) & smask] = held;
                // Staged in the master's memory; copied into the ring once per batch below.
                q.stage[q.nstaged & (BATCH - 1)] = d;
                q.enqueued_bytes += d.wire_len as u64;
                q.nstaged += 1;
                let s = &mut self.space[qi];
                *s -= 1;
                if *s == 0 {
                    avail &= !(1 << qi);
                }
            }
        }

        // Per queue: drops are what asked for it and was not taken; one cursor store.
        let mut m = any;
        let mut copies = 0u64;
        while m != 0 {
            let qi = m.trailing_zeros() as usize;
            m &= m - 1;
            let offered = wants[..n].iter().filter(|&&w| w >> qi & 1 != 0).count() as u64;
            copies += offered;
            let q = &mut self.q[qi];
            let dropped = offered - q.nstaged as u64 - q.nf_batch;
            if gone >> qi & 1 != 0 {
                q.consumer_gone += dropped;
            } else {
                q.ring_full += dropped;
            }
        }
        self.copies += copies;
        for (qi, q) in self.q.iter_mut().enumerate() {
            if q.nstaged > 0 {
                // One copy of the batch's descriptors into the ring (at most two runs): each
                // slot line is written whole at once rather than a descriptor at a time while
                // the consumer may be reading its neighbours.
                let n = q.nstaged;
                let at = (q.head as usize) & smask;
                let first = n.min(seg.slots - at);
                // SAFETY: slots [head, head + n) are free: the space check keeps
                // head - tail + n ≤ slots, so the consumer is not reading them; they become
                // visible only with the release store of head below. Both runs lie inside
                // the slot array (at + first ≤ slots, n - first < slots) and do not overlap
                // the master's own staging array.
                unsafe {
                    std::ptr::copy_nonoverlapping(q.stage.as_ptr(), seg.slot(qi, q.head), first);
                    if first < n {
                        std::ptr::copy_nonoverlapping(
                            q.stage.as_ptr().add(first),
                            seg.slot(qi, 0),
                            n - first,
                        );
                    }
                }
                q.head += q.nstaged as u64;
                q.enqueued += q.nstaged as u64;
                seg.cursors(qi).head.store(q.head, Ordering::Release);
            }
            if gone >> qi & 1 == 0 {
                // Ask now for the slot lines the next batch writes (in exclusive state): their
                // last reader was the consumer, and fetching them while the next batch is
                // received and hashed keeps the slot stores from waiting on them.
                let room = seg.slots as u64 - (q.head - q.cached_tail);
                let n = room.min(BATCH as u64);
                let mut c = q.head;
                while c < q.head + n {
                    prefetch_write(seg.slot(qi, c) as *const u8);
                    c = (c | 1) + 1; // two 32-byte slots per 64-byte line
                }
            }
        }
        // Counters go to the segment every 8 batches (and at every maintain, stats, close).
        self.batches = self.batches.wrapping_add(1);
        if self.batches.is_multiple_of(8) {
            self.publish();
        }
    }

    /// Publishes the local counters into the segment (single writer), for consumers and
    /// other readers; the master's own figures never come back from the segment.
    fn publish(&self) {
        let h = &self.seg.header().counters;
        h.rx_packets.store(self.rx_packets, Ordering::Relaxed);
        h.rx_bytes.store(self.rx_bytes, Ordering::Relaxed);
        h.filtered.store(self.filtered, Ordering::Relaxed);
        h.no_frame.store(self.no_frame, Ordering::Relaxed);
        h.routed.store(self.routed, Ordering::Relaxed);
        h.copies.store(self.copies, Ordering::Relaxed);
        h.tx_packets.store(self.tx_packets, Ordering::Relaxed);
        h.tx_bytes.store(self.tx_bytes, Ordering::Relaxed);
        h.tx_dropped.store(self.tx_dropped, Ordering::Relaxed);
        h.tx_malformed.store(self.tx_malformed, Ordering::Relaxed);
        h.too_big.store(self.too_big, Ordering::Relaxed);
        for (qi, q) in self.q.iter().enumerate() {
            let k = self.seg.ctl(qi);
            k.enqueued.store(q.enqueued, Ordering::Relaxed);
            k.enqueued_bytes.store(q.enqueued_bytes, Ordering::Relaxed);
            k.ring_full.store(q.ring_full, Ordering::Relaxed);
            k.consumer_gone.store(q.consumer_gone, Ordering::Relaxed);
            k.reclaimed.store(q.reclaimed_pkts, Ordering::Relaxed);
            k.no_frame.store(q.no_frame, Ordering::Relaxed);
            k.too_big.store(q.too_big, Ordering::Relaxed);
            k.unread.store(q.unread, Ordering::Relaxed);
            k.delivered.store(q.delivered(), Ordering::Relaxed);
        }
    }

    /// Checks consumers (call every ~100 ms, not per batch: it reads /proc): takes back what
    /// consumers released; a queue whose consumer left or died is reclaimed and its packets
    /// dropped as `consumer_gone` until a consumer attaches again.
    pub fn maintain(&mut self) {
        self.reclaim();
        let seg = self.seg.clone();
        for qi in 0..self.q.len() {
            let ctl = seg.ctl(qi);
            let owner = ctl.owner.load(Ordering::Acquire);
            let (gen, pid) = ((owner >> 32) as u32, owner as u32);
            if gen == 0 || pid == RECLAIMING {
                continue; // never attached (buffer), or being handled
            }
            let silent = self.consumer_timeout_ms.is_some_and(|t| {
                now_ms().saturating_sub(ctl.heartbeat.load(Ordering::Relaxed)) > t
            });
            if pid != 0 && !silent && alive(pid) {
                self.q[qi].gone = false;
                continue;
            }
            // Left (pid 0) or dead: take the queue back, unless a consumer attaches meanwhile.
            let busy = (gen as u64) << 32 | RECLAIMING as u64;
            if ctl
                .owner
                .compare_exchange(owner, busy, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
            {
                continue;
            }
            self.reclaim();
            let q = &mut self.q[qi];
            // Everything still in the ring (read by the dead consumer or not) comes back.
            ctl.taken_at.store(q.reclaimed, Ordering::Relaxed);
            while q.reclaimed < q.head {
                let f = q.shadow[(q.reclaimed as usize) & (seg.slots - 1)];
                release(&mut self.refcnt, &mut self.free, f);
                q.reclaimed += 1;
                q.reclaimed_pkts += 1;
                q.consumer_gone += 1;
            }
            q.cached_tail = q.head;
            seg.cursors(qi).tail.store(q.head, Ordering::Release);
            q.gone = true;
            ctl.owner.store((gen as u64) << 32, Ordering::Release);
        }
        self.publish();
    }

    /// Whether every queue is empty or has nobody left to read it (no consumer attached, or a
    /// dead one): after [`Master::close`], nothing more will be delivered.
    pub fn drained(&self) -> bool {
        self.q.iter().enumerate().all(|(qi, q)| {
            q.reclaimed == q.head || {
                let pid = self.seg.ctl(qi).owner.load(Ordering::Acquire) as u32;
                pid == 0 || pid == RECLAIMING || !alive(pid)
            }
        })
    }

    /// A figure that moves while consumers read: the sum over queues of what they released
    /// and were handed (to tell a draining consumer from a stalled one).
    pub fn progress(&self) -> u64 {
        self.q
            .iter()
            .enumerate()
            .map(|(qi, q)| {
                q.reclaimed
                    .wrapping_add(self.seg.ctl(qi).handed.load(Ordering::Relaxed))
            })
            .fold(0u64, u64::wrapping_add)
    }

    /// Statistics of the cluster, from the master's own counters (exact, whatever is written
    /// into the segment), after taking back what consumers released.
    pub fn stats(&mut self) -> ClusterStats {
        self.reclaim();
        self.publish();
        let queues = self
            .q
            .iter()
            .enumerate()
            .map(|(qi, q)| QueueStats {
                app: self.seg.app_of(qi),
                enqueued: q.enqueued,
                delivered: q.delivered(),
                bytes: q.enqueued_bytes,
                ring_full: q.ring_full,
                consumer_gone: q.consumer_gone,
                no_frame: q.no_frame,
                too_big: q.too_big,
                unread: q.unread,
                backlog: q.head - q.reclaimed,
                consumer_pid: self.seg.consumer_pid(qi),
                attaches: self.seg.ctl(qi).attaches.load(Ordering::Relaxed),
            })
            .collect();
        ClusterStats {
            rx_packets: self.rx_packets,
            rx_bytes: self.rx_bytes,
            filtered: self.filtered,
            no_frame: self.no_frame,
            too_big: self.too_big,
            routed: self.routed,
            copies: self.copies,
            tx_packets: self.tx_packets,
            tx_bytes: self.tx_bytes,
            tx_dropped: self.tx_dropped,
            tx_malformed: self.tx_malformed,
            queues,
        }
    }

    /// Marks the cluster closed: consumers drain their queues and end. Call
    /// [`Master::take_back`] once they had their chance (see `apps::balance::finish`).
    pub fn close(&mut self) {
        self.publish();
        self.seg
            .header()
            .state
            .store(STATE_CLOSED, Ordering::Release);
    }

    /// After [`Master::close`]: takes back every queue that still holds packets, so that the
    /// accounting is final (no backlog). What a live consumer was handed counts as delivered
    /// (it ends after those), the rest as `unread`; a dead consumer's queue is reclaimed as
    /// `consumer_gone`. Every frame is free afterwards.
    pub fn take_back(&mut self) {
        self.close();
        self.reclaim();
        let seg = self.seg.clone();
        let mask = seg.slots - 1;
        for qi in 0..self.q.len() {
            if self.q[qi].reclaimed == self.q[qi].head {
                continue;
            }
            let ctl = seg.ctl(qi);
            // Own the queue: a consumer attaching or leaving meanwhile makes the swap fail.
            let (gen, pid) = loop {
                let owner = ctl.owner.load(Ordering::Acquire);
                let (gen, pid) = ((owner >> 32) as u32, owner as u32);
                let busy = (gen as u64) << 32 | RECLAIMING as u64;
                if ctl
                    .owner
                    .compare_exchange(owner, busy, Ordering::SeqCst, Ordering::Acquire)
                    .is_ok()
                {
                    break (gen, pid);
                }
            };
            // Pairs with the consumer's fence between its `handed` store and its owner load
            // (made once it sees the cluster closed): either it sees the queue is ours now and
            // keeps only what `taken_at` says, or we see everything it handed out.
            std::sync::atomic::fence(Ordering::SeqCst);
            self.reclaim();
            let q = &mut self.q[qi];
            let live = pid != 0 && alive(pid);
            let handed = if live {
                ctl.handed
                    .load(Ordering::Relaxed)
                    .clamp(q.reclaimed, q.head)
            } else {
                q.reclaimed
            };
            ctl.taken_at.store(handed, Ordering::Relaxed);
            while q.reclaimed < q.head {
                let f = q.shadow[(q.reclaimed as usize) & mask];
                release(&mut self.refcnt, &mut self.free, f);
                if q.reclaimed >= handed {
                    if pid != 0 && !live {
                        q.reclaimed_pkts += 1;
                        q.consumer_gone += 1;
                    } else {
                        q.unread += 1;
                    }
                }
                q.reclaimed += 1;
            }
            q.cached_tail = q.head;
            seg.cursors(qi).tail.store(q.head, Ordering::Release);
            q.gone = true;
            ctl.owner.store((gen as u64) << 32, Ordering::Release);
        }
        self.publish();
    }
}

/// Prefetches the cache line at `p` for writing (a hint: no effect where unsupported).
#[inline(always)]
fn prefetch_write(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHW is a hint: it never faults, whatever the address, and writes nothing
    // (CPUs without it, Intel before Broadwell, execute it as a no-op). `_mm_prefetch` with
    // `_MM_HINT_ET0` would compile to a read prefetch without the `prfchw` target feature.
    unsafe {
        std::arch::asm!("prefetchw [{0}]", in(reg) p, options(nostack, preserves_flags, readonly));
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Largest big frame (a packet of up to 128 KiB minus the headroom: 65535 B and more).
pub const MAX_BIG_FRAME: u32 = 128 << 10;

/// The master's free frames: regular ones and big ones (indexes from `nsmall` on).
struct Frees {
    small: Vec<u32>,
    big: Vec<u32>,
    nsmall: u32,
}

impl Frees {
    #[inline(always)]
    fn push(&mut self, f: u32) {
        if f < self.nsmall {
            self.small.push(f);
        } else {
            self.big.push(f);
        }
    }
}

/// Tag of a shadow entry whose frame went to one queue only (no reference count kept).
/// Frame indexes are below 2^31 (the segment would be 4 TiB otherwise).
const SOLE: u32 = 1 << 31;

/// Copies a packet into its frame. Packets of 32 to 64 bytes (minimum-size frames) are two
/// overlapping 32-byte moves inlined here rather than a call to `memcpy` per packet.
#[inline(always)]
fn copy_packet(dst: &mut [u8], src: &[u8]) {
    let n = src.len();
    if dst.len() == n && (32..=64).contains(&n) {
        dst[..32].copy_from_slice(&src[..32]);
        dst[n - 32..].copy_from_slice(&src[n - 32..]);
    } else {
        dst.copy_from_slice(src);
    }
}

/// Releases a slot's hold on its frame: a frame held by one queue (`SOLE`) is free at once,
/// a shared one when its count reaches 0.
#[inline(always)]
fn release(refcnt: &mut [u32], free: &mut Frees, f: u32) {
    if f & SOLE != 0 {
        free.push(f & !SOLE);
        return;
    }
    if let Some(rc) = refcnt.get_mut(f as usize) {
        *rc = rc.saturating_sub(1);
        if *rc == 0 {
            free.push(f);
        }
    }
}

impl Drop for Master {
    fn drop(&mut self) {
        self.take_back();
        if let Some((path, dev, ino)) = self.published.take() {
            // Consumers keep their mapping; the name is free for the next master.
            unlink_if_ours(&path, dev, ino);
            if let Ok(mut l) = PUBLISHED.lock() {
                l.retain(|(p, d, i)| !(p == &path && *d == dev && *i == ino));
            }
        }
    }
}

/// Claims an owner word for this process: Ok(new value), or Err(Some(pid)) when a live
/// process holds it, Err(None) when the master kept it busy (reclaiming) for too long.
fn claim(owner: &AtomicU64) -> Result<u64, Option<u32>> {
    let me = my_pid();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    loop {
        let cur = owner.load(Ordering::Acquire);
        let (gen, pid) = ((cur >> 32) as u32, cur as u32);
        if pid == RECLAIMING {
            if std::time::Instant::now() > deadline {
                return Err(None);
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
            continue;
        }
        if pid != 0 && (pid == me || alive(pid)) {
            return Err(Some(pid));
        }
        // Free, or its holder died and the master has not noticed yet: take it.
        let new = (gen.wrapping_add(1).max(1) as u64) << 32 | me as u64;
        if owner
            .compare_exchange(cur, new, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            return Ok(new);
        }
    }
}

fn unclaim(owner: &AtomicU64, mine: u64) {
    let gen = mine >> 32;
    let _ = owner.compare_exchange(mine, gen << 32, Ordering::AcqRel, Ordering::Relaxed);
}

/// This port's transmit lane.
struct TxLane {
    lane: usize,
    head: u64,
    cached_tail: u64,
    owner: u64,
}

/// A consumer of a cluster: `cluster:ID@Q` reads queue Q; `cluster:ID` reads the first free
/// queue (taken at the first `rx`). Either may transmit into the cluster (a transmit lane is
/// taken at the first `tx`) when the master has an egress port (`-o`).
///
/// `rx` hands out descriptors that point into the segment (zero copy) and releases the ones it
/// handed out at the previous call, like a kernel ring: process (or copy) a batch before
/// receiving the next. Frames marked [`Desc::F_SHARED`] are read-only. `tx` copies each packet
/// once into a frame of its lane.
pub struct ClusterPort {
    name: String,
    seg: Arc<Segment>,
    /// The queue, once attached.
    rx_q: Option<usize>,
    read: u64,
    /// The master's head cursor as last read.
    cached_head: u64,
    released: u64,
    owner: u64,
    tx: Option<TxLane>,
    stats: PortStats,
    idle: u32,
    polls: u32,
    master_gone: bool,
    /// The master ended normally and this queue is done: nothing more to read.
    finished: bool,
    /// The queue's drop counters when this port attached (its figures start there), and the
    /// last ones seen (counters only grow, whatever is written into the segment).
    drops_base: [u64; 5],
    drops_seen: [u64; 5],
}

impl ClusterPort {
    /// Opens `ID@Q` (a queue) or `ID` (any free queue, and transmit).
    pub fn open(spec: &str) -> Result<ClusterPort, PortError> {
        let bad = |why: &str| PortError::BadUri {
            uri: format!("cluster:{spec}"),
            why: why.into(),
        };
        let (id, q) = match spec.split_once('@') {
            Some((id, q)) => (id, Some(q)),
            None => (spec, None),
        };
        let id: u32 = id
            .parse()
            .map_err(|_| bad("the cluster id is a number: cluster:ID or cluster:ID@QUEUE"))?;
        let seg = Segment::open(id)?;
        match q {
            Some(q) => {
                let q: usize = q
                    .parse()
                    .map_err(|_| bad("the queue is a number: cluster:ID@QUEUE"))?;
                Self::attach(seg, q)
            }
            None => Ok(Self::unattached(seg)),
        }
    }

    fn unattached(seg: Arc<Segment>) -> ClusterPort {
        ClusterPort {
            name: format!("cluster:{}", seg.id),
            seg,
            rx_q: None,
            read: 0,
            cached_head: 0,
            released: 0,
            owner: 0,
            tx: None,
            stats: PortStats::default(),
            idle: 0,
            polls: 0,
            master_gone: false,
            finished: false,
            drops_base: [0; 5],
            drops_seen: [0; 5],
        }
    }

    /// Attaches to queue `q` of a mapped segment.
    pub fn attach(seg: Arc<Segment>, q: usize) -> Result<ClusterPort, PortError> {
        let mut p = Self::unattached(seg);
        p.name = format!("cluster:{}@{}", p.seg.id, q);
        p.attach_rx(Some(q))?;
        Ok(p)
    }

    fn attach_rx(&mut self, want: Option<usize>) -> Result<(), PortError> {
        let seg = self.seg.clone();
        let queues: Vec<usize> = match want {
            Some(q) if q >= seg.queues => {
                return Err(PortError::BadUri {
                    uri: self.name.clone(),
                    why: format!("cluster {} has queues 0..{}", seg.id, seg.queues - 1),
                })
            }
            Some(q) => vec![q],
            None => (0..seg.queues).collect(),
        };
        let mut last = None;
        for &q in &queues {
            match claim(&seg.ctl(q).owner) {
                Ok(owner) => {
                    seg.ctl(q).attaches.fetch_add(1, Ordering::Relaxed);
                    self.drops_base = queue_drops(seg.ctl(q));
                    self.drops_seen = self.drops_base;
                    seg.ctl(q).heartbeat.store(now_ms(), Ordering::Relaxed);
                    // Resume at the first descriptor not released: anything a dead predecessor
                    // held and did not release is delivered again (at least once).
                    let tail = seg.cursors(q).tail.load(Ordering::Acquire);
                    self.rx_q = Some(q);
                    self.owner = owner;
                    self.read = tail;
                    self.cached_head = tail;
                    self.released = tail;
                    if want.is_none() {
                        self.name = format!("cluster:{}@{}", seg.id, q);
                    }
                    return Ok(());
                }
                Err(e) => last = Some(e),
            }
        }
        Err(match (want, last) {
            (Some(q), Some(Some(pid))) => err(
                &self.name,
                format!("queue {q} already has a consumer (pid {pid})"),
            ),
            (None, Some(Some(_))) => err(
                &self.name,
                format!(
                    "all {} queues of cluster {} have a consumer",
                    seg.queues, seg.id
                ),
            ),
            _ => err(
                &self.name,
                "the master is busy reclaiming this queue".into(),
            ),
        })
    }

    fn attach_tx(&mut self) -> Result<(), PortError> {
        let seg = self.seg.clone();
        if seg.tx_lanes == 0 {
            return Err(err(
                &self.name,
                format!(
                    "cluster {} takes no transmitted packets: start its master with -o PORT",
                    seg.id
                ),
            ));
        }
        for l in 0..seg.tx_lanes {
            if let Ok(owner) = claim(&seg.lane_ctl(l).owner) {
                seg.lane_ctl(l).attaches.fetch_add(1, Ordering::Relaxed);
                let c = seg.lane_cursors(l);
                // Continue after what a previous producer published.
                let head = c.head.load(Ordering::Acquire);
                self.tx = Some(TxLane {
                    lane: l,
                    head,
                    cached_tail: c.tail.load(Ordering::Acquire),
                    owner,
                });
                return Ok(());
            }
        }
        Err(err(
            &self.name,
            format!(
                "all {} transmit lanes of cluster {} are taken",
                seg.tx_lanes, seg.id
            ),
        ))
    }

    /// The queue number, once attached.
    pub fn queue(&self) -> Option<usize> {
        self.rx_q
    }

    /// The segment.
    pub fn segment(&self) -> &Arc<Segment> {
        &self.seg
    }

    /// Releases what was handed out once at least `release_at` descriptors are pending (or
    /// `all`): one store of `tail` (the master reads that line) per few batches rather than
    /// per batch while a backlog lasts.
    #[inline(always)]
    fn release_some(&mut self, all: bool) {
        if all || self.read - self.released >= self.release_at() {
            self.release();
        }
    }

    /// A quarter of the ring, at most 256 descriptors (4 batches).
    #[inline(always)]
    fn release_at(&self) -> u64 {
        (self.seg.slots as u64 / 4).min(4 * crate::mem::BATCH as u64)
    }

    #[inline(always)]
    fn release(&mut self) {
        if let Some(q) = self.rx_q {
            if self.read != self.released {
                self.seg.cursors(q).tail.store(self.read, Ordering::Release);
                self.released = self.read;
            }
        }
    }

    /// Whether the master ended (closed the cluster, or died: its pid is looked up when
    /// `look_at_pid`). A state word that is neither running nor closed is a corrupted segment.
    fn check_master(&mut self, look_at_pid: bool) -> Result<bool, PortError> {
        let h = self.seg.header();
        match h.state.load(Ordering::Acquire) {
            STATE_CLOSED => self.master_gone = true,
            STATE_RUNNING => {}
            other => {
                return Err(self.corrupted(format!("its state word is {other:#x}")));
            }
        }
        if look_at_pid && !same_process(h.master_pid, h.master_start) {
            self.master_gone = true;
        }
        Ok(self.master_gone)
    }

    /// The master is gone and this queue has nothing more: a normal end when it closed the
    /// cluster (Ok(0), then [`Port::is_finished`]), an error when it died.
    fn end(&mut self, q: usize) -> Result<usize, PortError> {
        self.release();
        // The master may have published more just before it ended (after our last look at
        // head): the caller's acquire load of the state word saw the close, which the master
        // stored after its last head, so this load sees everything it enqueued.
        let head = self.seg.cursors(q).head.load(Ordering::Acquire);
        if head > self.read && head - self.released <= self.seg.slots as u64 {
            self.cached_head = head;
            return Ok(0);
        }
        let h = self.seg.header();
        if h.state.load(Ordering::Acquire) == STATE_CLOSED {
            self.finished = true;
            return Ok(0);
        }
        Err(err(
            &self.name,
            format!(
                "cluster {} ended: its master (pid {}) died without closing the cluster (killed \
                 or crashed); {} packets received from this queue",
                self.seg.id,
                h.master_pid,
                crate::stats::group(self.stats.rx_packets)
            ),
        ))
    }

    /// The segment holds something its master never wrote.
    fn corrupted(&self, what: String) -> PortError {
        err(
            &self.name,
            format!(
                "cluster {} segment is corrupted ({what}): stopping rather than reading garbage; \
                 {} packets received from this queue",
                self.seg.id,
                crate::stats::group(self.stats.rx_packets)
            ),
        )
    }

    /// The master took our queue back: the cluster ended (keep nothing past `taken_at`), or
    /// it thought us dead (an error).
    fn taken_back(&mut self) -> Result<usize, PortError> {
        if self.seg.header().state.load(Ordering::Acquire) == STATE_CLOSED {
            self.finished = true;
            return Ok(0);
        }
        Err(err(
            &self.name,
            "the master reclaimed this queue (consumer considered dead); reattach".into(),
        ))
    }

    /// After the master took the queue back at its end: how far our reads count (its word).
    fn taken_at(&self, q: usize) -> u64 {
        let ctl = self.seg.ctl(q);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        while ctl.owner.load(Ordering::Acquire) as u32 == RECLAIMING
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
        ctl.taken_at.load(Ordering::Acquire)
    }
}

/// A queue's drop counters (ring_full, consumer_gone, no_frame, unread, too_big), as published.
fn queue_drops(k: &QueueCtl) -> [u64; 5] {
    [
        k.ring_full.load(Ordering::Relaxed),
        k.consumer_gone.load(Ordering::Relaxed),
        k.no_frame.load(Ordering::Relaxed),
        k.unread.load(Ordering::Relaxed),
        k.too_big.load(Ordering::Relaxed),
    ]
}

impl Port for ClusterPort {
    fn name(&self) -> &str {
        &self.name
    }

    #[inline]
    fn rx(&mut self, batch: &mut Batch) -> Result<usize, PortError> {
        if self.finished {
            return Ok(0);
        }
        let q = match self.rx_q {
            Some(q) => q,
            None => {
                self.attach_rx(None)?;
                self.rx_q.unwrap_or(0)
            }
        };
        batch.bind(&self.seg.pool);
        self.release_some(false);
        let slots = self.seg.slots as u64;
        // The master's cursor is read only when what we already know is published ran out: no
        // cache-line transfer per call while a backlog lasts.
        if self.read >= self.cached_head {
            let head = self.seg.cursors(q).head.load(Ordering::Acquire);
            // The master only moves head forward, at most a ring ahead of what we released.
            if head < self.read || head - self.released > slots {
                return Err(self.corrupted(format!(
                    "queue {q}'s head cursor is {head}, with {} read and {slots} slots",
                    self.read
                )));
            }
            self.cached_head = head;
        }
        let avail = (self.cached_head - self.read) as usize;
        // The master took the queue back (we were thought dead, or silent for longer than its
        // consumer timeout, or it ended): stop rather than read frames that are no longer ours.
        // The owner word has a cache line of its own that changes only then, so this load is
        // cheap.
        self.polls = self.polls.wrapping_add(1);
        let ctl = self.seg.ctl(q);
        if self.polls.is_multiple_of(64) {
            ctl.heartbeat.store(now_ms(), Ordering::Relaxed);
        }
        if ctl.owner.load(Ordering::Acquire) != self.owner {
            self.release();
            return self.taken_back();
        }
        let mut n = avail.min(batch.room());
        if n == 0 {
            // Nothing to read: give back everything handed out (the master frees it).
            self.release();
            self.idle = self.idle.wrapping_add(1);
            // The closed flag is one load; the master's pid is looked up now and then.
            if self.master_gone || self.check_master(self.idle.is_multiple_of(1024))? {
                return self.end(q);
            }
            return Ok(0);
        }
        self.idle = 0;
        // Slots [read, read + n) lie in at most two runs of the ring: copy them as slices.
        let at = (self.read as usize) & (self.seg.slots - 1);
        let first = n.min(self.seg.slots - at);
        let before = batch.len();
        // SAFETY: slots [read, head) were written by the master before its release store of
        // head (our acquire load, now or at an earlier call); it does not rewrite them until we
        // move tail past them. Both runs lie inside the slot array (at + first ≤ slots, and the
        // second starts at slot 0 with n - first < slots descriptors: n ≤ head - read ≤ slots).
        unsafe {
            batch.extend(std::slice::from_raw_parts(
                self.seg.slot(q, self.read),
                first,
            ));
            if first < n {
                batch.extend(std::slice::from_raw_parts(self.seg.slot(q, 0), n - first));
            }
        }
        // Every descriptor must name a frame of the segment with a length that fits, and a
        // plausible wire length: checked branch-free in the byte count's loop, one branch per
        // batch.
        // A packet is in a regular frame or in a big one (with none, `bspan` is 0: never).
        let seg = &*self.seg;
        let (base, span, fmask, cap) = (
            (seg.frames_off + seg.headroom) as u64,
            (seg.frames * seg.frame_size) as u64,
            seg.frame_size as u64 - 1,
            (seg.frame_size - seg.headroom) as u32,
        );
        let (bbase, bspan, bmask, bcap) = (
            (seg.big_off + seg.headroom) as u64,
            (seg.big_frames * seg.big_size) as u64,
            (seg.big_size as u64).saturating_sub(1),
            seg.big_size.saturating_sub(seg.headroom) as u32,
        );
        let bad_desc = |d: &Desc| -> bool {
            let off = d.addr.wrapping_sub(base);
            let small = (off & fmask) | (off >= span) as u64 | (d.len > cap) as u64;
            let boff = d.addr.wrapping_sub(bbase);
            let big = (boff & bmask) | (boff >= bspan) as u64 | (d.len > bcap) as u64;
            (small != 0) & (big != 0) | (d.wire_len > MAX_WIRE_LEN)
        };
        let mut bytes = 0u64;
        let mut bad = false;
        for d in &batch.descs()[before..] {
            bad |= bad_desc(d);
            bytes += d.wire_len as u64;
        }
        if bad {
            let (i, d) = batch.descs()[before..]
                .iter()
                .enumerate()
                .find(|(_, d)| bad_desc(d))
                .map(|(i, d)| (i, *d))
                .unwrap_or_default();
            batch.forget_from(before);
            self.stats.rx_drops.add(DropReason::Malformed, n as u64);
            return Err(self.corrupted(format!(
                "queue {q} slot {}: descriptor at offset {:#x}, length {}, wire length {} is \
                 not a packet in a frame of the segment; {n} descriptors dropped as malformed",
                (self.read + i as u64) & (slots - 1),
                d.addr,
                d.len,
                d.wire_len
            )));
        }
        ctl.handed.store(self.read + n as u64, Ordering::Relaxed);
        if self.seg.header().state.load(Ordering::Relaxed) == STATE_CLOSED {
            // The master is ending and may take the queue back at any moment: make our
            // `handed` store visible before looking at the owner word (it fences likewise
            // between its swap of the owner word and its load of `handed`).
            std::sync::atomic::fence(Ordering::SeqCst);
            if ctl.owner.load(Ordering::Relaxed) != self.owner {
                // It did: keep only what it counted as delivered to us.
                let keep = self.taken_at(q).saturating_sub(self.read).min(n as u64) as usize;
                if keep < n {
                    bytes = batch.descs()[before..before + keep]
                        .iter()
                        .map(|d| d.wire_len as u64)
                        .sum();
                    batch.forget_from(before + keep);
                    n = keep;
                }
                self.finished = true;
            }
        }
        self.read += n as u64;
        self.stats.rx_packets += n as u64;
        self.stats.rx_bytes += bytes;
        Ok(n)
    }

    /// Copies packets from the front of `batch` into frames of this port's transmit lane and
    /// publishes them to the master; returns how many it took (the rest stay in the batch when
    /// the lane is full).
    fn tx(&mut self, batch: &mut Batch) -> Result<usize, PortError> {
        if self.check_master(false)? {
            return Err(err(
                &self.name,
                format!(
                    "cluster {} ended: its master (pid {}) stopped; nothing more can be sent \
                     into it",
                    self.seg.id,
                    self.seg.master_pid()
                ),
            ));
        }
        if self.tx.is_none() {
            self.attach_tx()?;
        }
        let seg = self.seg.clone();
        let Some(t) = self.tx.as_mut() else {
            return Ok(0);
        };
        let cap = seg.tx_slots as u64;
        let want = batch.len() as u64;
        if cap - (t.head - t.cached_tail) < want {
            t.cached_tail = seg.lane_cursors(t.lane).tail.load(Ordering::Acquire);
        }
        let n = (cap - (t.head - t.cached_tail)).min(want) as usize;
        let room = (seg.frame_size - seg.headroom) as u32;
        let mut bytes = 0u64;
        // Slots used (packets longer than a frame take none: dropped whole, never cut).
        let mut k = 0u64;
        for i in 0..n {
            let c = t.head + k;
            let src = batch.data(i);
            let d = batch.descs()[i];
            let len = src.len() as u32;
            if len > room {
                self.stats.tx_drops.add(DropReason::TooBig, 1);
                continue;
            }
            let addr = seg.lane_frame_addr(t.lane, c);
            // SAFETY: the frame of slot c belongs to this lane's producer (us: the lane's owner
            // word is ours) until the master moves the lane's tail past c, and c < tail + cap.
            if let Some(dst) = unsafe { seg.pool.region().bytes_mut(addr, len) } {
                dst.copy_from_slice(src);
            }
            let out = Desc {
                addr,
                len,
                wire_len: d.wire_len.max(len),
                flags: 0,
                ..d
            };
            bytes += out.wire_len as u64;
            // SAFETY: slot c is free (c < tail + cap) and only this producer writes the lane.
            unsafe { seg.lane_slot(t.lane, c).write(out) };
            k += 1;
        }
        if n > 0 {
            t.head += k;
            seg.lane_cursors(t.lane)
                .head
                .store(t.head, Ordering::Release);
            self.stats.tx_packets += k;
            self.stats.tx_bytes += bytes;
            batch.free_front(n);
        }
        Ok(n)
    }

    fn stats(&mut self) -> PortStats {
        let mut s = self.stats;
        if let Some(q) = self.rx_q {
            // The queue's drops since we attached; a counter seen lower than before (written
            // over in the segment) stays where it was.
            let now = queue_drops(self.seg.ctl(q));
            for (seen, v) in self.drops_seen.iter_mut().zip(now) {
                *seen = (*seen).max(v);
            }
            let d = |i: usize| self.drops_seen[i].saturating_sub(self.drops_base[i]);
            s.rx_drops.add(DropReason::RingFull, d(0));
            s.rx_drops.add(DropReason::ConsumerGone, d(1));
            s.rx_drops.add(DropReason::NoFrame, d(2));
            s.rx_drops.add(DropReason::Unread, d(3));
            s.rx_drops.add(DropReason::TooBig, d(4));
        }
        s
    }

    fn is_finished(&self) -> bool {
        self.finished
    }

    fn end_note(&self) -> Option<String> {
        self.finished
            .then(|| format!("cluster {} ended: master stopped", self.seg.id))
    }

    fn pool(&self) -> Option<&Arc<Pool>> {
        Some(&self.seg.pool)
    }
}

impl Drop for ClusterPort {
    fn drop(&mut self) {
        self.release();
        if let Some(q) = self.rx_q {
            unclaim(&self.seg.ctl(q).owner, self.owner);
        }
        if let Some(t) = &self.tx {
            unclaim(&self.seg.lane_ctl(t.lane).owner, t.owner);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// The offsets `tests/hostile_cluster.rs` writes garbage at (a version 3 segment: version 2
    /// plus big frames after the master counters).
    #[test]
    fn layout_of_a_version_3_segment() {
        assert_eq!(VERSION, 3);
        assert_eq!(std::mem::offset_of!(Header, state), 48);
        assert_eq!(std::mem::offset_of!(Header, queue_off), 56);
        assert_eq!(std::mem::offset_of!(Header, queue_stride), 64);
        assert_eq!(std::mem::offset_of!(Header, counters), 184);
        assert!(std::mem::size_of::<Header>() <= HEADER_SIZE);
        assert_eq!(std::mem::offset_of!(Cursors, tail), 128);
        assert_eq!(CTL_OFF, 256);
        assert_eq!(std::mem::offset_of!(QueueCtl, handed), 24);
        assert_eq!(std::mem::offset_of!(QueueCtl, enqueued), 64);
        assert_eq!(std::mem::size_of::<QueueCtl>(), 192);
        assert_eq!(SLOTS_OFF, 512);
    }
}

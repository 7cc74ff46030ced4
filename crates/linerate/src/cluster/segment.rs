//! A mapped segment (master or consumer side): where each part of it is, opening and
//! checking a segment file, and the names this process published.

use super::err;
use super::layout::*;
use super::liveness::same_process;
use crate::mem::{Desc, Pool, Region};
use crate::port::PortError;
use crate::ring::shared::RegionQueue;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Where cluster segments on 4 KiB pages live: the shared-memory directory.
pub fn segment_path(id: u32) -> PathBuf {
    shm_dir().join(segment_name(id))
}

/// The shared-memory directory (`/dev/shm`; `LINERATE_SHM_DIR` for tests).
pub(super) fn shm_dir() -> PathBuf {
    std::env::var_os("LINERATE_SHM_DIR")
        .unwrap_or_else(|| "/dev/shm".into())
        .into()
}

/// A cluster's segment file name, in whichever directory holds it.
pub(super) fn segment_name(id: u32) -> String {
    format!("linerate-cluster-{id}")
}

/// Every place cluster `id`'s segment may be: the shared-memory directory, then each mounted
/// hugetlbfs (a master puts it on huge pages when it can, docs/cluster.md).
pub fn segment_paths(id: u32) -> Vec<PathBuf> {
    let mut v = vec![segment_path(id)];
    for d in super::pages::hugetlbfs_mounts() {
        let p = d.join(segment_name(id));
        if !v.contains(&p) {
            v.push(p);
        }
    }
    v
}

/// The directories [`segment_paths`] looks in.
pub fn segment_dirs() -> Vec<PathBuf> {
    let mut v = vec![shm_dir()];
    for d in super::pages::hugetlbfs_mounts() {
        if !v.contains(&d) {
            v.push(d);
        }
    }
    v
}

/// A mapped cluster segment (master or consumer side).
pub struct Segment {
    pub(super) pool: Arc<Pool>,
    pub(super) id: u32,
    pub(super) path: Option<PathBuf>,
    pub(super) queues: usize,
    pub(super) slots: usize,
    pub(super) frames: usize,
    pub(super) frame_size: usize,
    pub(super) headroom: usize,
    pub(super) queue_off: usize,
    pub(super) queue_stride: usize,
    pub(super) frames_off: usize,
    pub(super) big_frames: usize,
    pub(super) big_size: usize,
    pub(super) big_off: usize,
    pub(super) tx_lanes: usize,
    pub(super) tx_slots: usize,
    pub(super) tx_off: usize,
    pub(super) tx_stride: usize,
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

impl Segment {
    pub(super) fn base(&self) -> *mut u8 {
        self.pool.region().as_ptr()
    }

    pub(super) fn header(&self) -> &Header {
        // SAFETY: the region is at least HEADER_SIZE bytes (checked when mapped), page aligned,
        // and Header (< 4 KiB, only integers and atomics) is valid for any bit pattern.
        unsafe { &*(self.base() as *const Header) }
    }

    pub(super) fn ctl(&self, q: usize) -> &QueueCtl {
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

    /// The memory of queue `q`'s ring (its cursors and slots), keeping the segment mapped.
    pub(super) fn queue_mem(self: &Arc<Self>, q: usize) -> RegionQueue<Desc> {
        assert!(q < self.queues);
        let area = self.queue_off + q * self.queue_stride;
        // SAFETY: q < queues: the queue's area lies inside the region (layout checked when
        // mapped), 4096-aligned, and starts with its cursors (atomics, zeroed by the master);
        // `slots` (a power of two, checked when mapped) descriptors follow at SLOTS_OFF, and
        // any bytes are a valid `Desc` (integers). The Arc keeps the region mapped.
        unsafe {
            RegionQueue::new(
                self.base().add(area),
                self.base().add(area + SLOTS_OFF),
                self.slots,
                self.clone(),
            )
        }
    }

    /// The memory of transmit lane `l`'s ring (its cursors and slots), keeping the segment
    /// mapped.
    pub(super) fn lane_mem(self: &Arc<Self>, l: usize) -> RegionQueue<Desc> {
        assert!(l < self.tx_lanes);
        // SAFETY: l < tx_lanes: the lane's area lies inside the region (layout checked when
        // mapped), 4096-aligned, laid out as a queue's: its cursors (atomics, zeroed by the
        // master), then `tx_slots` (a power of two, checked when mapped) descriptors at
        // SLOTS_OFF; any bytes are a valid `Desc` (integers). The Arc keeps the region mapped.
        unsafe {
            RegionQueue::new(
                self.lane_base(l),
                self.lane_base(l).add(SLOTS_OFF),
                self.tx_slots,
                self.clone(),
            )
        }
    }

    pub(super) fn lane_base(&self, l: usize) -> *mut u8 {
        debug_assert!(l < self.tx_lanes);
        // SAFETY: l < tx_lanes: the lane's area lies inside the region (layout checked when
        // mapped).
        unsafe { self.base().add(self.tx_off + l * self.tx_stride) }
    }

    pub(super) fn lane_ctl(&self, l: usize) -> &QueueCtl {
        // SAFETY: a QueueCtl (atomics) at CTL_OFF inside the lane's area, 64-aligned.
        unsafe { &*(self.lane_base(l).add(CTL_OFF) as *const QueueCtl) }
    }

    /// Address (in the region) of the packet in the lane frame that goes with slot `cursor`.
    #[inline(always)]
    pub(super) fn lane_frame_addr(&self, l: usize, cursor: u64) -> u64 {
        let i = (cursor as usize) & (self.tx_slots - 1);
        (self.tx_off
            + l * self.tx_stride
            + tx_frames_off(self.tx_slots)
            + i * self.frame_size
            + self.headroom) as u64
    }

    /// The frame (index; big frames from `frames` on) whose packet address is `addr`, if
    /// `addr` is one. In a regular frame the packet may start anywhere past the headroom (an
    /// AF_XDP UMEM on the segment's frames puts it 256 bytes into the frame).
    #[inline(always)]
    pub(super) fn frame_of(&self, addr: u64) -> Option<u32> {
        let off = (addr as usize).checked_sub(self.frames_off)?;
        let f = off >> self.frame_size.trailing_zeros();
        if f < self.frames && off & (self.frame_size - 1) >= self.headroom {
            return Some(f as u32);
        }
        let off = (addr as usize).checked_sub(self.big_off + self.headroom)?;
        let b = off / self.big_size.max(1);
        (self.big_size > 0 && b < self.big_frames && off % self.big_size == 0)
            .then_some((self.frames + b) as u32)
    }

    #[inline(always)]
    pub(super) fn frame_addr(&self, frame: u32) -> u64 {
        (self.frames_off + frame as usize * self.frame_size + self.headroom) as u64
    }

    /// Packet address in frame `frame` (an index past the regular frames: a big frame).
    #[inline]
    pub(super) fn big_frame_addr(&self, frame: u32) -> u64 {
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

    /// The consumer attached to queue `q`, if any.
    pub(super) fn consumer_pid(&self, q: usize) -> Option<u32> {
        match self.ctl(q).owner.load(Ordering::Relaxed) as u32 {
            0 | RECLAIMING => None,
            p => Some(p),
        }
    }

    pub(super) fn map(
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
        if h.magic.load(Ordering::Acquire) != MAGIC {
            return Err(err(who, "not a linerate cluster segment".into()));
        }
        if h.version != VERSION {
            // Another build's layout: its words are elsewhere (a version 3 master would never
            // wake a consumer that sleeps on its queue's futex word).
            return Err(err(
                who,
                format!(
                    "the cluster's segment has layout version {}, this linerate reads version \
                     {VERSION} only: its master is another linerate build; run the master and \
                     its consumers (and liblinerate_pcap.so) from the same build",
                    h.version
                ),
            ));
        }
        // Each size read once and bounded before the layout's arithmetic uses it (a damaged
        // header's sizes near 2^32 would overflow it); the layout is then checked below.
        let (queues, slots, frames, frame_size) = (
            h.queues as usize,
            h.slots as usize,
            h.frames as usize,
            h.frame_size as usize,
        );
        let (big_frames, big_size) = (h.big_frames as usize, h.big_frame_size as usize);
        let (tx_lanes, tx_slots) = (h.tx_lanes as usize, h.tx_slots as usize);
        let bounded = (1..=MAX_QUEUES).contains(&queues)
            && slots <= 1 << 24
            && frames < SOLE as usize
            && big_frames < SOLE as usize
            && frame_size <= 65536
            && big_size <= MAX_BIG_FRAME as usize
            && tx_lanes <= MAX_QUEUES
            && tx_slots <= 1 << 24;
        if !bounded {
            return Err(err(who, "cluster segment header is inconsistent".into()));
        }
        let l = Layout::new(
            queues,
            slots,
            frames,
            frame_size,
            (big_frames, big_size),
            tx_lanes,
            tx_slots,
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

    /// Maps the running cluster `id` (a consumer attaching), wherever its master put it (the
    /// shared-memory directory or a hugetlbfs, [`segment_paths`]). The file must be a segment
    /// of ours: a regular file (not a link) owned by root or by this user, writable by its
    /// owner only; anything else is refused, whatever it holds. Where several places hold one
    /// (a stale segment beside a running one), the running one is taken.
    pub fn open(id: u32) -> Result<Arc<Segment>, PortError> {
        let who = format!("cluster:{id}");
        let paths = segment_paths(id);
        let mut first: Option<PortError> = None;
        for path in &paths {
            match Self::open_at(id, path, &who) {
                Ok(Some(seg)) => return Ok(seg),
                Ok(None) => {}
                Err(e) => {
                    first.get_or_insert(e);
                }
            }
        }
        Err(first.unwrap_or_else(|| {
            let places: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
            err(
                &who,
                format!(
                    "no cluster {id} ({} does not exist): start its master first, e.g. \
                     `linerate balance -i PORT -c {id} -n 1`",
                    places.join(" nor ")
                ),
            )
        }))
    }

    /// The running segment at `path`; None when nothing is there.
    fn open_at(id: u32, path: &Path, who: &str) -> Result<Option<Arc<Segment>>, PortError> {
        let (region, meta) = match Region::open_shared(path) {
            Ok(r) => r,
            Err(crate::mem::MemError::Shm { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                return Ok(None)
            }
            Err(crate::mem::MemError::Shm { source, .. }) => {
                return Err(err(who, not_ours(path, &source)))
            }
            Err(other) => return Err(PortError::Mem(other)),
        };
        check_owner(&meta, path, who, false)?;
        let seg = Segment::map(region, id, Some(path.to_path_buf()), who)?;
        let h = seg.header();
        if h.cluster_id != id {
            return Err(err(
                who,
                format!(
                    "{} holds cluster {}, not {id}: refusing it",
                    path.display(),
                    h.cluster_id
                ),
            ));
        }
        if h.state.load(Ordering::Acquire) != STATE_RUNNING
            || !same_process(h.master_pid, h.master_start)
        {
            return Err(err(
                who,
                format!(
                    "cluster {id} is not running (its master, pid {}, has exited): start it again",
                    h.master_pid
                ),
            ));
        }
        Ok(Some(Arc::new(seg)))
    }
}

use crate::sys::process::euid;

/// What to say when the segment's name could not be opened (other than "not there").
pub(super) fn not_ours(path: &Path, source: &std::io::Error) -> String {
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
pub(super) fn check_owner(
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
pub(super) static PUBLISHED: std::sync::Mutex<Vec<(PathBuf, u64, u64)>> =
    std::sync::Mutex::new(Vec::new());

/// Removes `path` if it still names the file (device, inode) we published.
pub(super) fn unlink_if_ours(path: &Path, dev: u64, ino: u64) {
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

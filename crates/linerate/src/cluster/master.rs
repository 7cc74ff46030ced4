//! The master: creates the segment, lends its frames to inputs that read in place and copies
//! other inputs' packets once into a frame, distributes descriptors to queues, takes back what
//! consumers released, and watches its consumers.

use super::consumer::ClusterPort;
use super::err;
use super::layout::*;
use super::liveness::{alive, my_pid, now_ms, proc_stat, same_process};
use super::segment::{
    check_owner, not_ours, segment_name, segment_paths, shm_dir, unlink_if_ours, Segment, PUBLISHED,
};
use super::stats::{ClusterStats, QueueStats};
use crate::mem::{copy_packet, prefetch_write, Batch, Chunk, Desc, Pool, Region, BATCH, CHUNK};
use crate::port::mem::MemPort;
use crate::port::xdp::UmemArea;
use crate::port::PortError;
use crate::ring::shared::{Borrower, Holds, Lender, RegionQueue};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

/// Per-queue state the master keeps in its own memory.
pub(super) struct MasterQueue {
    /// The queue's ring (release by tail), with the frame each slot holds in the master's
    /// own memory.
    pub(super) ring: Lender<Desc, RegionQueue<Desc>>,
    /// Descriptors written for this batch, not yet published.
    pub(super) nstaged: usize,
    /// Packets of this batch for this queue lost for want of a frame.
    pub(super) nf_batch: u64,
    /// This batch's descriptors for the queue, copied into the ring at once.
    pub(super) stage: Box<[Desc; BATCH]>,
    /// This batch's descriptors for the queue are the master's `out[..nstaged]` (not staged).
    pub(super) direct: bool,
    /// Local copies of the counters, published once per batch.
    pub(super) enqueued: u64,
    pub(super) enqueued_bytes: u64,
    pub(super) ring_full: u64,
    pub(super) consumer_gone: u64,
    pub(super) reclaimed_pkts: u64,
    pub(super) no_frame: u64,
    pub(super) too_big: u64,
    /// Packets taken back unread when the master ended.
    pub(super) unread: u64,
    /// The queue had a consumer that left or died: drop for it until one attaches.
    pub(super) gone: bool,
}

impl MasterQueue {
    /// Released by the consumer (or handed to it at the end): every slot given back that was
    /// not taken from a dead consumer or left unread. Only grows.
    pub(super) fn delivered(&self) -> u64 {
        self.ring.reclaimed() - self.reclaimed_pkts - self.unread
    }
}

/// The master side of a cluster: owns the segment, copies packets into frames and distributes
/// descriptors. Dropping it closes the cluster (consumers stop) and removes the file.
pub struct Master {
    pub(super) seg: Arc<Segment>,
    pub(super) q: Vec<MasterQueue>,
    pub(super) free: Frees,
    /// Longest packet carried in a regular frame, and in any frame.
    pub(super) cap: usize,
    pub(super) big_cap: usize,
    /// Lent regular frames are staggered over this many 64-byte steps (a power of two; 1: not
    /// at all), [`Master::stagger_lent_frames`].
    pub(super) lent_stagger: u32,
    /// Reference count of each frame sent to several queues (fan-out), in the master's own
    /// memory: nothing a consumer writes can make the master free a frame.
    pub(super) holds: Holds,
    pub(super) rx_packets: u64,
    pub(super) rx_bytes: u64,
    pub(super) filtered: u64,
    pub(super) no_frame: u64,
    pub(super) too_big: u64,
    pub(super) routed: u64,
    pub(super) copies: u64,
    /// Packets copied into a segment frame (the rest were received in place).
    pub(super) copied: u64,
    pub(super) space: [u32; MAX_QUEUES],
    /// This batch's descriptors (packet i's, for every queue that took it) and slot tags.
    pub(super) out: Box<[Desc; BATCH]>,
    pub(super) out_tags: [u32; BATCH],
    /// The packets each queue took of this batch (bit i: packet i); 0 between batches.
    pub(super) took: [u64; MAX_QUEUES],
    /// The master's side of each transmit lane (it reads what consumers send).
    pub(super) tx_rings: Vec<Borrower<Desc, RegionQueue<Desc>>>,
    /// Lanes seen with a `head` that is not their producer's (counted once as malformed).
    pub(super) tx_bad: Vec<bool>,
    pub(super) tx_packets: u64,
    pub(super) tx_bytes: u64,
    pub(super) tx_dropped: u64,
    pub(super) tx_malformed: u64,
    pub(super) tx_batch: Batch,
    pub(super) batches: u32,
    /// The batch being distributed filled its input's batch (see [`Master::wake_readers`]).
    pub(super) full_batch: bool,
    /// Queues published since their sleepers were last looked at after a fence (see
    /// [`Master::wake_readers`]).
    pub(super) unfenced: u64,
    pub(super) consumer_timeout_ms: Option<u64>,
    /// The name this master gave its segment, and the file's (device, inode).
    pub(super) published: Option<(PathBuf, u64, u64)>,
    /// Which pages the segment got (process clusters).
    pub(super) placement: Option<super::Placement>,
    /// This master's claim of its id (process clusters): dropped after the segment's name.
    pub(super) claim: Option<super::claim::Claim>,
}

impl Master {
    /// Creates cluster `id` in shared memory for consumer processes: on huge pages in a
    /// hugetlbfs when `cfg.pages` allows and one has enough free, else in the shared-memory
    /// directory ([`Master::placement`] says which, and why). An existing segment of a running
    /// master, in any of the places consumers look, is an error; a stale one (its master gone)
    /// is replaced.
    pub fn create(id: u32, cfg: &ClusterConfig) -> Result<Master, PortError> {
        let who = format!("cluster:{id}");
        // One claim for the id, whatever directory the segment goes to: of two masters of one
        // id, however started, only one gets past here.
        let claim = super::claim::claim(id, cfg.owner.as_ref(), &who)?;
        for old in segment_paths(id) {
            Self::clear_stale(id, &old, &who)?;
        }
        let l = Self::layout(cfg)?;
        let (region, mut shm, placement) =
            super::pages::create(&cfg.pages, &shm_dir(), l.total, cfg.owner.as_ref())?;
        let path = placement.dir.join(segment_name(id));
        let mut m = Self::init(region, id, Some(path.clone()), cfg, &l, &who)?;
        m.placement = Some(placement);
        m.claim = Some(claim);
        // Publish only a fully built segment: consumers never see a half-initialised one. The
        // link fails if the name exists (a file, a link, another master's segment), so of two
        // masters started at once only one wins, and nothing planted there is followed.
        let ident = shm.identity();
        match shm.publish(&path).and(ident) {
            Ok((dev, ino)) => {
                m.published = Some((path.clone(), dev, ino));
                if let Ok(mut l) = PUBLISHED.lock() {
                    l.push((path.clone(), dev, ino));
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

    /// Refuses cluster `id` when a running master's segment is at `path`; removes a stale one
    /// of ours (its master died without closing it). Consumers still mapping the old file keep
    /// the old inode and see a dead master.
    fn clear_stale(id: u32, path: &Path, who: &str) -> Result<(), PortError> {
        match Region::open_shared(path) {
            Ok((old, meta)) => {
                // Something is there: only a stale segment of ours is replaced.
                check_owner(&meta, path, who, true)?;
                if let Ok(seg) = Segment::map(old, id, None, who) {
                    let h = seg.header();
                    if h.state.load(Ordering::Acquire) == STATE_RUNNING
                        && same_process(h.master_pid, h.master_start)
                    {
                        return Err(err(
                            who,
                            format!(
                                "cluster {id} is in use by its master, pid {} ({})",
                                h.master_pid,
                                path.display()
                            ),
                        ));
                    }
                }
                use std::os::unix::fs::MetadataExt;
                unlink_if_ours(path, meta.dev(), meta.ino());
                Ok(())
            }
            Err(crate::mem::MemError::Shm { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                Ok(())
            }
            Err(crate::mem::MemError::Shm { source, .. }) => Err(err(who, not_ours(path, &source))),
            Err(e) => Err(e.into()),
        }
    }

    /// The name this master gave its segment file (None: a thread cluster).
    pub fn segment_file(&self) -> Option<PathBuf> {
        self.published.as_ref().map(|p| p.0.clone())
    }

    /// Which pages this process cluster's segment got, and where (None: a thread cluster).
    pub fn placement(&self) -> Option<&super::Placement> {
        self.placement.as_ref()
    }

    /// Creates a cluster in anonymous memory, for consumer threads of this process.
    pub fn anon(cfg: &ClusterConfig) -> Result<Master, PortError> {
        let l = Self::layout(cfg)?;
        let region = Region::anon(l.total)?;
        // Big frames are written sparsely: a huge page there would make 2 MiB resident.
        region.advise_no_huge(l.big_off, l.big_frames * l.big_size);
        Self::init(region, 0, None, cfg, &l, "cluster")
    }

    pub(super) fn layout(cfg: &ClusterConfig) -> Result<Layout, PortError> {
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
            nq * slots + 2 * BATCH + cfg.kernel_frames.min(1 << 24) as usize
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

    pub(super) fn init(
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
                copied: AtomicU64::new(0),
            });
            // Queue control blocks and cursors are all-zero atomics: the fresh mapping already
            // holds them.
            (*(base as *const Header))
                .magic
                .store(MAGIC, Ordering::Release);
        }
        let seg = Arc::new(Segment::map(region, id, path, who)?);
        let q = (0..l.queues)
            .map(|qi| MasterQueue {
                ring: Lender::new(seg.queue_mem(qi)),
                nstaged: 0,
                nf_batch: 0,
                stage: Box::new([Desc::default(); BATCH]),
                direct: false,
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
        let tx_rings = (0..l.tx_lanes)
            .map(|t| Borrower::attach(seg.lane_mem(t)))
            .collect();
        Ok(Master {
            free: Frees {
                small: (0..l.frames as u32).rev().collect(),
                big: (l.frames as u32..(l.frames + l.big_frames) as u32)
                    .rev()
                    .collect(),
                nsmall: l.frames as u32,
                share_lo: 0,
                share_n: 0,
                big_share_lo: 0,
                big_share_n: 0,
                share: None,
            },
            holds: Holds::new(l.frames + l.big_frames),
            cap,
            big_cap,
            lent_stagger: 1,
            seg,
            q,
            rx_packets: 0,
            rx_bytes: 0,
            filtered: 0,
            no_frame: 0,
            too_big: 0,
            routed: 0,
            copies: 0,
            copied: 0,
            space: [0; MAX_QUEUES],
            out: Box::new([Desc::default(); BATCH]),
            out_tags: [0; BATCH],
            took: [0; MAX_QUEUES],
            tx_rings,
            tx_bad: vec![false; l.tx_lanes],
            tx_packets: 0,
            tx_bytes: 0,
            tx_dropped: 0,
            tx_malformed: 0,
            tx_batch: Batch::new(),
            batches: 0,
            full_batch: false,
            unfenced: 0,
            consumer_timeout_ms: None,
            published: None,
            placement: None,
            claim: None,
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

    /// Frames free now (not in any queue).
    pub fn free_frames(&self) -> usize {
        self.free.small.len() + self.free.big.len()
    }

    /// Takes back the frames consumers released.
    #[inline]
    pub(super) fn reclaim(&mut self) {
        let (holds, free) = (&mut self.holds, &mut self.free);
        for q in self.q.iter_mut() {
            q.ring.reclaim_runs(|tags| release_run(holds, free, tags));
        }
        free.flush_share(false);
    }

    /// Call when the input had nothing to read: a `mem:` input wire's writer that found no free
    /// frame ([`Master::input_wire`]) cannot send until the master takes back what consumers
    /// released, so this takes it back now (rather than at the next [`Master::maintain`]) when
    /// the wire's pool has no free chunk. Does nothing otherwise.
    #[inline]
    pub fn idle(&mut self) {
        self.wake_unfenced();
        if self
            .free
            .share
            .as_ref()
            .is_some_and(|s| s.pool.no_free_chunk())
        {
            self.reclaim();
        }
    }

    /// A `mem:` wire into this master whose writer allocates from the segment's own frames, so
    /// that what it writes is published as it is, with no copy (as an input reading into lent
    /// frames is). Returns the writer's end and the master's end (read it with
    /// [`crate::apps::balance::run_with`]); [`crate::open_cluster_input`] opens `mem:NAME` this
    /// way and leaves the writer's end for the next `mem:NAME` open.
    ///
    /// The wire gets the segment's regular frames but two batches' worth (rounded down to a
    /// multiple of 64) and half its big frames; the master keeps the rest for packets it must
    /// copy (a packet longer than `--max-pkt-len` allows in a regular frame). Frames consumers
    /// release go back to the wire's pool. When consumers hold them all, the writer finds no
    /// free frame and waits (its `tx` takes nothing new), rather than the master dropping.
    ///
    /// Err, with the reason (the caller then copies and says so), when the master has
    /// distributed packets already (its frames are not all free), has such a wire already, or
    /// its frames do not start at a multiple of their size (a frame size above 4 KiB).
    pub fn input_wire(&mut self, name: &str) -> Result<(MemPort, MemPort), String> {
        let seg = self.seg.clone();
        if self.free.share.is_some() {
            return Err("the cluster has an input wire already".into());
        }
        let nsmall = self.free.nsmall;
        if self.free.small.len() != nsmall as usize || self.free.big.len() != seg.big_frames {
            return Err("the master has distributed packets already (call before it reads)".into());
        }
        if !seg.frames_off.is_multiple_of(seg.frame_size) {
            return Err(format!(
                "the cluster's {}-byte frames do not start at a multiple of their size",
                seg.frame_size
            ));
        }
        let n = (nsmall as usize).saturating_sub(2 * BATCH) / CHUNK * CHUNK;
        if n < 2 * BATCH {
            return Err(format!(
                "{nsmall} frames are too few to share with a writer (-b: at least {})",
                4 * BATCH
            ));
        }
        let nbig = seg.big_frames / 2;
        let (lo, big_lo) = (nsmall - n as u32, nsmall + (seg.big_frames - nbig) as u32);
        let small: Vec<u64> = (lo..nsmall).map(|f| seg.frame_addr(f)).collect();
        let big: Vec<u64> = (0..nbig as u32)
            .map(|b| seg.big_frame_addr(big_lo + b))
            .collect();
        let pool = Arc::new(Pool::share_of(
            seg.pool.clone(),
            seg.frame_size as u32,
            seg.headroom as u32,
            &small,
            &big,
            (seg.big_off as u64, seg.big_size as u64),
        ));
        let f = &mut self.free;
        f.small.retain(|&x| x < lo);
        f.big.retain(|&x| x < big_lo);
        (f.share_lo, f.share_n) = (lo, n as u32);
        (f.big_share_lo, f.big_share_n) = (big_lo, nbig as u32);
        f.share = Some(Box::new(Share {
            pool: pool.clone(),
            back: Chunk {
                n: 0,
                addrs: [0; CHUNK],
            },
            small_base: seg.frame_addr(0),
            frame_size: seg.frame_size as u64,
            big_base: if seg.big_frames > 0 {
                seg.big_frame_addr(nsmall)
            } else {
                0
            },
            big_size: seg.big_size as u64,
        }));
        let (writer, ours) = crate::port::mem::wire_over(name, pool);
        Ok((writer, ours))
    }

    /// The longest packet the cluster carries (in a regular or a big frame).
    pub fn max_packet(&self) -> usize {
        self.big_cap.max(self.cap)
    }

    /// Lends `batch` free frames of the segment (up to a batch of them), so that an input port
    /// that writes into the frames it is given ([`crate::port::Port::fills_lent_frames`], the
    /// built-in source) receives straight into the segment: [`Master::distribute`] then
    /// publishes those frames as they are, with no copy. Call before each receive; end the
    /// loan with [`Master::unlend_frames`].
    ///
    /// Returns false, with the batch not lent, when no regular frame (or, in a cluster with big
    /// frames, no big frame) is free even after taking back what consumers released: the input
    /// then receives into its own memory and the master drops what it cannot place as
    /// `no_frame`, as for any input. The master never waits for frames (nor makes its input
    /// wait: a finite input with no consumer still ends).
    pub fn lend_frames(&mut self, batch: &mut Batch) -> bool {
        let (have, have_big) = (batch.lent_frames(), batch.lent_big_frames());
        let bigs = self.seg.big_frames > 0;
        if self.free.small.len() + have < BATCH || (bigs && have_big == 0) {
            // Short of frames: take back what consumers released now, not at the next batch.
            self.reclaim();
        }
        // Without a regular frame, or (in a cluster with big frames) without a big one: a
        // reader holding a long record would wait for it.
        if (have == 0 && self.free.small.is_empty())
            || (bigs && have_big == 0 && self.free.big.is_empty())
        {
            self.unlend_frames(batch);
            return false;
        }
        let seg = &self.seg;
        let k = self.lent_stagger;
        let room = (seg.frame_size - seg.headroom) as u32 - (k - 1) * STAGGER_STEP as u32;
        let big = (seg.big_frames > 0).then(|| {
            let first = seg.big_frame_addr(seg.frames as u32) - seg.headroom as u64;
            (first, (seg.big_size - seg.headroom) as u32)
        });
        batch.lend(&seg.pool, room, big);
        let base = seg.pool.region().as_ptr();
        // The top of the free stack in one go (the order `pop` would give): one bound check
        // and one length update for the run, not one per frame.
        let small = &mut self.free.small;
        let from = small.len() - (BATCH - have.min(BATCH)).min(small.len());
        batch.lend_frames(small[from..].iter().rev().map(|&f| {
            let a = seg.frame_addr(f) + stagger(f, k);
            // The input writes each frame's first line next: asking for all of them now (in
            // exclusive state) overlaps the misses instead of taking one per packet's store.
            prefetch_write(base.wrapping_add(a as usize));
            a
        }));
        small.truncate(from);
        // Big frames are few (one for every 8 regular ones): a handful at a time.
        while big.is_some() && batch.lent_big_frames() < LENT_BIG {
            let Some(f) = self.free.big.pop() else {
                break;
            };
            batch.lend_big_frame(seg.big_frame_addr(f));
        }
        true
    }

    /// Staggers the regular frames [`Master::lend_frames`] lends to an input whose packets are
    /// at most `longest` bytes and that copies each into whatever frame it is handed
    /// ([`crate::port::Port::fills_lent_frames_of_any_pool`]: the built-in source, a file
    /// reader; never an AF_XDP socket, whose kernel places packets itself): frame `f`'s packet
    /// starts `(f % k) * 64` bytes past the headroom, `k` up to 16, as far as the frame's room
    /// less that still holds `longest` (the lent room shrinks by as much). Each 64-byte
    /// packet otherwise sits at the same offset of its own 2 KiB frame, so that a batch's 64
    /// first lines fall in 2 of the L1 cache's 64 sets and evict each other between the input's
    /// write, the hash's read and the consumer's; staggered, they spread over 32 sets.
    /// Consumers are unaffected: a packet in a regular frame may start anywhere past the
    /// headroom (as an AF_XDP input's does) and ends inside its frame.
    pub fn stagger_lent_frames(&mut self, longest: usize) {
        let room = self.seg.frame_size - self.seg.headroom;
        let slack = room - longest.min(room);
        let mut k = 1u32;
        while k < MAX_STAGGER && (2 * k as usize - 1) * STAGGER_STEP <= slack {
            k *= 2;
        }
        self.lent_stagger = k;
    }

    /// The segment's regular frames as an AF_XDP UMEM, for an `xdp:` input of `sockets` queues
    /// ([`crate::port::xdp::open_in_area`]): the kernel then writes each packet into a frame
    /// this master lent ([`Master::lend_frames`]) and [`Master::distribute`] publishes it with
    /// no copy. Each socket keeps at most half the frames (shared among the sockets) in its
    /// fill ring (a cluster sized with [`ClusterConfig::kernel_frames`] has room for them); those frames are the kernel's until it has written a packet into
    /// them, and [`Master::free_frames`] does not count them. Big frames stay out: a packet
    /// longer than a frame's room past the kernel's 256-byte headroom is dropped by the
    /// kernel and counted by the port (`too_big`).
    ///
    /// Err, with the reason, when the kernel cannot take the frames as they are laid out
    /// (aligned UMEM chunks are 2048 or 4096 bytes): the input then reads into its own memory
    /// and is copied.
    pub fn umem_area(&self, sockets: usize) -> Result<UmemArea, String> {
        let seg = &self.seg;
        if !matches!(seg.frame_size, 2048 | 4096) {
            return Err(format!(
                "the cluster's {}-byte frames are not an AF_XDP UMEM's (2048 or 4096 bytes)",
                seg.frame_size
            ));
        }
        if seg.headroom > XDP_PACKET_HEADROOM || !seg.frames_off.is_multiple_of(4096) {
            return Err("the cluster's frames are not laid out as a UMEM's".into());
        }
        // Besides its fill ring, a socket holds the packets in its receive ring that the
        // master has not read yet (up to a batch more than the ring it was given: each read
        // refills with at most a batch's lent frames). The master reads only with frames to
        // lend: were every frame in the kernel, none would ever come back. Half the frames
        // for the fill rings, each at least two batches, keep a quarter out of the kernel.
        let sockets = sockets.max(1);
        let per = seg.frames / (2 * sockets);
        if per < 2 * BATCH {
            return Err(format!(
                "{} frames are too few for the fill rings of {sockets} queue(s) (-b: at least \
                 {} per queue)",
                seg.frames,
                4 * BATCH
            ));
        }
        Ok(UmemArea {
            pool: seg.pool.clone(),
            off: seg.frames_off as u64,
            len: (seg.frames * seg.frame_size) as u64,
            chunk: seg.frame_size as u32,
            fill_max: per.min(1 << 16) as u32,
        })
    }

    /// Takes back the free frames lent to `batch` (and any packets still in it).
    pub fn unlend_frames(&mut self, batch: &mut Batch) {
        let seg = &self.seg;
        let free = &mut self.free;
        batch.unlend(|a| {
            if let Some(f) = seg.frame_of(a) {
                free.push(f);
            }
        });
    }

    /// Distributes a batch: packet `i` goes to the queues set in `masks[i]` (bit q = queue q;
    /// 0 = filtered). Each packet is copied once into a frame of the segment, unless the batch
    /// was received into frames the master lent it ([`Master::lend_frames`]): those frames are
    /// published as they are, and the batch is left empty (the master owns them again). Queues
    /// without room or without a consumer count drops. Never blocks.
    ///
    /// Work is per batch wherever it can be: each queue's free space is computed once, drops
    /// are counted per queue from how many packets asked for it and how many it took, counters
    /// and cursors are published once per queue, and the per-packet loop only copies the
    /// packet and writes one descriptor per destination.
    pub fn distribute(&mut self, batch: &mut Batch, masks: &[u64]) {
        self.reclaim();
        // Frames lent to the input, or an input wire's (its writer allocated them from the
        // segment): published as they are.
        let lent = batch.is_lent() || self.free.is_share_batch(batch);
        let nq = self.q.len();
        let all = if nq == 64 { u64::MAX } else { (1u64 << nq) - 1 };
        let total = batch.len();
        self.full_batch = total >= BATCH;
        let n = total.min(masks.len()).min(BATCH);
        let descs = batch.descs();

        let (mut avail, gone) = self.queue_space();

        let mut wants = [0u64; BATCH];
        let any = self.destinations(descs, &masks[..n], all, &mut wants);

        if lent && n == total && self.distribute_in_place(batch, &wants[..n], any, gone) {
            self.publish_staged(gone, Some(batch.descs()));
            batch.forget();
            self.end_batch();
            return;
        }
        let descs = batch.descs();

        let seg = &*self.seg;
        let (cap, big_cap) = (self.cap, self.big_cap);
        let room = (seg.frame_size - seg.headroom) as u64;
        let region = seg.pool.region();
        // A lent batch's packets are in the master's own frames: each is published as it is or
        // given back to the free list (bit i set: taken over).
        let mut kept = 0u64;
        // Queues that took packets of this batch (their packets: `took`).
        let mut taken = 0u64;
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
            // Received in place when it lies in the kind of frame its length needs (a packet
            // cut short by `--max-pkt-len` below a regular frame's room goes to a big frame).
            let own = if lent {
                seg.frame_of(descs[i].addr)
                    .filter(|&f| (f >= self.free.nsmall) == long)
            } else {
                None
            };
            let frame = if let Some(f) = own {
                kept |= 1 << i;
                Some(f)
            } else if long {
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
            let (addr, len) = if own.is_some() {
                (src.addr, src.len as usize) // received in place: no copy
            } else {
                let data = batch.data(i);
                let len = data.len();
                let addr = if long {
                    seg.big_frame_addr(frame)
                } else {
                    // Staggered when the packet fits past the step (see `stagger`).
                    let s = stagger(frame, COPY_STAGGER);
                    seg.frame_addr(frame) + if len as u64 + s <= room { s } else { 0 }
                };
                // SAFETY: the frame was on the master's free list: no queue holds it and no
                // consumer can read it until its descriptor is published below.
                if let Some(dst) = unsafe { region.bytes_mut(addr, len as u32) } {
                    copy_packet(dst, &data[..len]);
                }
                self.copied += 1;
                (addr, len)
            };
            let single = ok & (ok - 1) == 0;
            // A frame for one queue needs no reference count: its slot's shadow entry says so
            // and the release frees it directly.
            // (frame < frames: it came from the free list)
            let held = self.holds.lend(frame, ok.count_ones());
            let d = Desc {
                addr,
                len: len as u32,
                flags: if single { 0 } else { Desc::F_SHARED },
                ..*src
            };
            // Written once for the batch; each queue takes its packets from here below.
            self.out[i] = d;
            self.out_tags[i] = held;
            taken |= ok;
            let mut m = ok;
            while m != 0 {
                let qi = m.trailing_zeros() as usize;
                m &= m - 1;
                self.took[qi] |= 1 << i;
                let s = &mut self.space[qi];
                *s -= 1;
                if *s == 0 {
                    avail &= !(1 << qi);
                }
            }
        }
        self.stage_queues(taken);

        if lent {
            self.give_back_unkept(descs, kept);
        }

        self.count_queue_drops(&wants[..n], any, gone);
        self.publish_staged(gone, None);
        if lent {
            batch.forget();
        }
        self.end_batch();
    }

    /// Counters go to the segment every 8 batches (and at every maintain, stats, close).
    #[inline]
    fn end_batch(&mut self) {
        self.batches = self.batches.wrapping_add(1);
        if self.batches.is_multiple_of(8) {
            self.publish();
        }
    }

    /// The common lent batch in one pass, when every packet of it (`wants`, one per packet of
    /// `batch`) goes to exactly one queue, lies in a regular frame the master lent and fits it:
    /// no copy, no reference count. Each packet's frame index and queue are read once; per
    /// queue, the first packets that fit its room are taken (as the general loop takes them)
    /// and the rest dropped (`ring_full`, or `consumer_gone` for a queue in `gone`) with their
    /// frames given back; its slots are tagged and its descriptors staged in one run, and a
    /// queue that takes the batch's first packets (one queue taking all of them) publishes
    /// straight from the batch's descriptors ([`Master::publish_staged`] with them), with no
    /// copy into `out` at all.
    ///
    /// Returns false, having changed nothing but the descriptors' flags (which
    /// [`Master::distribute`]'s general loop sets again for every packet it publishes), when
    /// the batch is not such a batch: the general loop then handles it.
    #[inline]
    fn distribute_in_place(
        &mut self,
        batch: &mut Batch,
        wants: &[u64],
        any: u64,
        gone: u64,
    ) -> bool {
        let n = wants.len();
        let seg = &*self.seg;
        let (cap, nsmall) = (self.cap, self.free.nsmall);
        // The regular frames' layout in locals: the loop below stores into the descriptors,
        // which the compiler cannot tell apart from the segment's fields (it reloaded them
        // for every packet).
        let (off0, shift, head, fmask) = (
            seg.frames_off as u64,
            seg.frame_size.trailing_zeros(),
            seg.headroom as u64,
            seg.frame_size as u64 - 1,
        );
        let nsmall64 = nsmall as u64;
        let mut frames = [0u32; BATCH];
        for ((d, &w), f) in batch.descs_mut().iter_mut().zip(wants).zip(&mut frames) {
            // One queue (a single bit), short enough for a regular frame, in one of them
            // (`Segment::frame_of`'s regular case; a big frame's address fails `fr < nsmall`
            // or the headroom test, and then the general loop takes the batch).
            let off = d.addr.wrapping_sub(off0);
            let fr = off >> shift;
            if w == 0
                || w & (w - 1) != 0
                || d.len as usize > cap
                || d.addr < off0
                || fr >= nsmall64
                || off & fmask < head
            {
                return false;
            }
            *f = fr as u32;
            // A frame for one queue: not shared (what the general loop writes too).
            d.flags = 0;
        }
        if any.count_ones() <= 4 {
            // Few queues: each one's packets gathered in a register, with no store per packet
            // (the store loop below chains every packet of one queue through one word).
            let mut m = any;
            while m != 0 {
                let qi = m.trailing_zeros() as usize;
                let b = m & m.wrapping_neg();
                m &= m - 1;
                let mut t = 0u64;
                for (i, &w) in wants.iter().enumerate() {
                    t |= u64::from(w == b) << i;
                }
                self.took[qi] = t;
            }
        } else {
            for (i, &w) in wants.iter().enumerate() {
                self.took[w.trailing_zeros() as usize] |= 1 << i;
            }
        }
        let descs = batch.descs();
        // Packets no queue had room for: their frames go back.
        let mut dropped = 0u64;
        let mut m = any;
        while m != 0 {
            let qi = m.trailing_zeros() as usize;
            m &= m - 1;
            let mut took = std::mem::take(&mut self.took[qi]);
            let q = &mut self.q[qi];
            let room = self.space[qi];
            if took.count_ones() > room {
                // The queue's first `room` packets fit; the others are dropped.
                let mut rest = took;
                for _ in 0..room {
                    rest &= rest - 1;
                }
                took &= !rest;
                dropped |= rest;
                let k = u64::from(rest.count_ones());
                if gone >> qi & 1 != 0 {
                    q.consumer_gone += k;
                } else {
                    q.ring_full += k;
                }
            }
            let k = took.count_ones() as usize;
            let mut bytes = 0u64;
            q.direct = took & took.wrapping_add(1) == 0; // packets 0..k
            if q.direct {
                q.ring.tag_run(&frames[..k], Holds::SOLE);
                bytes = descs[..k].iter().map(|d| u64::from(d.wire_len)).sum();
            } else {
                let mut b = took;
                let mut j = 0;
                while b != 0 {
                    let i = b.trailing_zeros() as usize;
                    b &= b - 1;
                    q.ring.tag(j, frames[i] | Holds::SOLE);
                    let d = descs[i];
                    q.stage[j & (BATCH - 1)] = d;
                    bytes += d.wire_len as u64;
                    j += 1;
                }
            }
            q.nstaged = k;
            q.enqueued_bytes += bytes;
        }
        while dropped != 0 {
            let i = dropped.trailing_zeros() as usize;
            dropped &= dropped - 1;
            self.free.push(frames[i]);
        }
        // Each packet was offered to its one queue.
        self.copies += n as u64;
        true
    }

    /// Per queue that took packets of this batch (`taken`; which ones: `took`): tags their slots
    /// and stages their descriptors (from `out`) in order, with the queue's state at hand for
    /// the whole run rather than looked up per packet. A queue that took the batch's first
    /// packets and no other (a single queue taking every packet) publishes straight from `out`,
    /// with no staging copy.
    #[inline]
    fn stage_queues(&mut self, taken: u64) {
        let mut t = taken;
        while t != 0 {
            let qi = t.trailing_zeros() as usize;
            t &= t - 1;
            let m = std::mem::take(&mut self.took[qi]);
            let q = &mut self.q[qi];
            let k = m.count_ones() as usize;
            let mut bytes = 0u64;
            q.direct = m & m.wrapping_add(1) == 0; // packets 0..k
            if q.direct {
                q.ring.tag_run(&self.out_tags[..k], 0);
                bytes = self.out[..k].iter().map(|d| u64::from(d.wire_len)).sum();
            } else {
                let mut b = m;
                let mut j = 0;
                while b != 0 {
                    let i = b.trailing_zeros() as usize;
                    b &= b - 1;
                    q.ring.tag(j, self.out_tags[i]);
                    let d = self.out[i];
                    q.stage[j & (BATCH - 1)] = d;
                    bytes += d.wire_len as u64;
                    j += 1;
                }
            }
            q.nstaged = k;
            q.enqueued_bytes += bytes;
        }
    }

    /// Per batch: which queues can take packets (`avail`, bit q) and which have no consumer
    /// (`gone`); each queue's room for this batch goes to `space`, its batch counters to 0.
    #[inline]
    fn queue_space(&mut self) -> (u64, u64) {
        let mut avail = 0u64;
        let mut gone = 0u64;
        for (qi, q) in self.q.iter_mut().enumerate() {
            q.nstaged = 0;
            q.nf_batch = 0;
            let free = q.ring.room();
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
        (avail, gone)
    }

    /// Per batch: each packet's destination set (`masks` & `all`, 0 past the masks: filtered)
    /// into `wants`, and the receive counters. Returns the union of the destinations.
    #[inline]
    fn destinations(
        &mut self,
        descs: &[Desc],
        masks: &[u64],
        all: u64,
        wants: &mut [u64; BATCH],
    ) -> u64 {
        let (total, n) = (descs.len(), masks.len());
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
        any
    }

    /// A lent batch: frames no queue took (filtered, dropped, a long packet copied into a big
    /// frame; bit i of `kept` clear) go back to the free list; the batch no longer names any
    /// of them.
    #[inline]
    fn give_back_unkept(&mut self, descs: &[Desc], kept: u64) {
        let seg = &*self.seg;
        for (i, d) in descs.iter().enumerate() {
            if kept >> i & 1 == 0 {
                if let Some(f) = seg.frame_of(d.addr) {
                    self.free.push(f);
                }
            }
        }
    }

    /// Per queue: drops are what asked for it (`wants`) and was not taken, counted as
    /// `consumer_gone` on a queue without a consumer (`gone`), else `ring_full`.
    #[inline]
    fn count_queue_drops(&mut self, wants: &[u64], any: u64, gone: u64) {
        let n = wants.len();
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
    }

    /// Per queue: the batch's staged descriptors go into the ring in one copy (one cursor
    /// store), and the slot lines of the next batch are fetched early. A queue marked `direct`
    /// publishes from `direct` when given (the batch's own descriptors), else from `out`.
    #[inline]
    fn publish_staged(&mut self, gone: u64, direct: Option<&[Desc]>) {
        let mut published = 0u64;
        let out = direct.unwrap_or(&*self.out);
        for (qi, q) in self.q.iter_mut().enumerate() {
            if q.nstaged > 0 {
                // One copy of the batch's descriptors into the ring (at most two runs): each
                // slot line is written whole at once rather than a descriptor at a time while
                // the consumer may be reading its neighbours.
                q.ring.publish(if q.direct {
                    &out[..q.nstaged]
                } else {
                    &q.stage[..q.nstaged]
                });
                q.enqueued += q.nstaged as u64;
                published |= 1 << qi;
            }
            if gone >> qi & 1 == 0 {
                // Ask now for the slot lines the next batch writes (in exclusive state): their
                // last reader was the consumer, and fetching them while the next batch is
                // received and hashed keeps the slot stores from waiting on them.
                let n = q.ring.room().min(BATCH as u64);
                let head = q.ring.head();
                let mut c = head;
                while c < head + n {
                    prefetch_write(q.ring.slot_ptr(c) as *const u8);
                    c = (c | 1) + 1; // two 32-byte slots per 64-byte line
                }
            }
        }
        if published | self.unfenced != 0 {
            self.wake_readers(published);
        }
    }

    /// Wakes the consumers of the queues in `published` (their heads were just stored) that
    /// sleep in [`ClusterPort::wait`] and whose queue now holds what they wait for: one fence
    /// and one load per queue while nobody sleeps, a FUTEX_WAKE only for a sleeper.
    ///
    /// No lost wake-up: the consumer stores its futex word, fences (SeqCst), then loads head;
    /// we stored head (Release, in `publish`), fence (SeqCst), then load the word. The two
    /// fences are ordered one way or the other: if the consumer's comes first, our load sees
    /// its word (or the 0 it wrote after waking) and we wake it when the queue holds enough;
    /// if ours comes first, its load of head sees what we published and it does not sleep
    /// when that is enough. A wake between its check and its FUTEX_WAIT is not lost either:
    /// we clear the word before FUTEX_WAKE, and the kernel's FUTEX_WAIT returns at once when
    /// the word no longer holds the value it slept on. Our count (`outstanding`: published
    /// and not taken back) is at least what the consumer has left to read, so we never wake it
    /// later than it asked.
    ///
    /// The fence (an `mfence`: it waits until the batch's slot and head stores, lines the
    /// consumer's core last held, have reached the cache) is paid once per 8 batches while
    /// the input fills every batch: after a full batch another follows at once, and a reader
    /// that went to sleep without seeing this one (its load of head before our store was
    /// seen) has its word looked at again after a fence at most 8 batches later, at the first
    /// batch short of full, at the loop's next idle poll ([`Master::idle`]), at
    /// [`Master::maintain`] or at [`Master::close`]; and its sleep is at most its wait's cap
    /// (20 ms) anyway. The looks in between, without the fence, wake whoever they see asleep.
    #[inline]
    fn wake_readers(&mut self, published: u64) {
        let mut m = published;
        if self.full_batch && !self.batches.wrapping_add(1).is_multiple_of(8) {
            self.unfenced |= published;
        } else {
            std::sync::atomic::fence(Ordering::SeqCst);
            m |= std::mem::take(&mut self.unfenced);
        }
        while m != 0 {
            let qi = m.trailing_zeros() as usize;
            m &= m - 1;
            self.wake_reader(qi);
        }
    }

    /// [`Master::wake_readers`] after the fence, for the queues published without it since
    /// the last look (none: nothing to do).
    fn wake_unfenced(&mut self) {
        if self.unfenced != 0 {
            std::sync::atomic::fence(Ordering::SeqCst);
            let mut m = std::mem::take(&mut self.unfenced);
            while m != 0 {
                let qi = m.trailing_zeros() as usize;
                m &= m - 1;
                self.wake_reader(qi);
            }
        }
    }

    /// Wakes queue `qi`'s reader if it sleeps and the queue holds what it waits for.
    #[inline]
    fn wake_reader(&self, qi: usize) {
        let word = &self.seg.ctl(qi).sleeping;
        let want = word.load(Ordering::Relaxed);
        if want != 0
            && self.q[qi].ring.outstanding() >= want as u64
            && word.swap(0, Ordering::Relaxed) != 0
        {
            crate::sys::futex::wake(word, 1);
        }
    }

    /// Wakes every sleeping consumer whatever its queue holds (the cluster closes).
    fn wake_all(&mut self) {
        self.unfenced = 0;
        std::sync::atomic::fence(Ordering::SeqCst);
        for qi in 0..self.q.len() {
            let word = &self.seg.ctl(qi).sleeping;
            if word.swap(0, Ordering::Relaxed) != 0 {
                crate::sys::futex::wake(word, 1);
            }
        }
    }

    /// Publishes the local counters into the segment (single writer), for consumers and
    /// other readers; the master's own figures never come back from the segment.
    pub(super) fn publish(&self) {
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
        self.seg
            .header()
            .copied
            .store(self.copied, Ordering::Relaxed);
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
        self.wake_unfenced();
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
            if self.q[qi].gone {
                // Taken back already: keep its tail where the master left it.
                self.q[qi].ring.repair_tail();
                if pid == 0 {
                    continue;
                }
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
            ctl.taken_at.store(q.ring.reclaimed(), Ordering::Relaxed);
            let (holds, free) = (&mut self.holds, &mut self.free);
            let (mut n, ring) = (0, &mut q.ring);
            ring.take_back(|_, f| {
                release(holds, free, f);
                n += 1;
            });
            q.reclaimed_pkts += n;
            q.consumer_gone += n;
            q.gone = true;
            ctl.owner.store((gen as u64) << 32, Ordering::Release);
        }
        self.publish();
    }

    /// Whether every queue is empty or has nobody left to read it (no consumer attached, or a
    /// dead one): after [`Master::close`], nothing more will be delivered.
    pub fn drained(&self) -> bool {
        self.q.iter().enumerate().all(|(qi, q)| {
            q.ring.outstanding() == 0 || {
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
                q.ring
                    .reclaimed()
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
                backlog: q.ring.outstanding(),
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
            copied_packets: self.copied,
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
        // Sleeping consumers see the close now rather than at their wait's end (the fence in
        // `wake_all` orders the state store before the loads of their words, as for head).
        self.wake_all();
    }

    /// After [`Master::close`]: takes back every queue that still holds packets, so that the
    /// accounting is final (no backlog). What a live consumer was handed counts as delivered
    /// (it ends after those), the rest as `unread`; a dead consumer's queue is reclaimed as
    /// `consumer_gone`. Every frame is free afterwards.
    pub fn take_back(&mut self) {
        self.close();
        self.reclaim();
        let seg = self.seg.clone();
        for qi in 0..self.q.len() {
            if self.q[qi].ring.outstanding() == 0 {
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
                    .clamp(q.ring.reclaimed(), q.ring.head())
            } else {
                q.ring.reclaimed()
            };
            ctl.taken_at.store(handed, Ordering::Relaxed);
            let (holds, free) = (&mut self.holds, &mut self.free);
            let (mut gone, mut unread) = (0, 0);
            q.ring.take_back(|c, f| {
                release(holds, free, f);
                if c >= handed {
                    if pid != 0 && !live {
                        gone += 1;
                    } else {
                        unread += 1;
                    }
                }
            });
            q.reclaimed_pkts += gone;
            q.consumer_gone += gone;
            q.unread += unread;
            q.gone = true;
            ctl.owner.store((gen as u64) << 32, Ordering::Release);
        }
        self.free.flush_share(true);
        self.publish();
    }
}

/// One step of a frame's stagger: a cache line.
const STAGGER_STEP: usize = 64;

/// Most steps of stagger ([`Master::stagger_lent_frames`]): 16 lines of each 2 KiB frame's 32.
const MAX_STAGGER: u32 = 16;

/// Steps of stagger of a packet the master copies into a regular frame (when it fits past
/// them: a long packet starts right after the headroom).
const COPY_STAGGER: u32 = 16;

/// Where frame `f`'s packet starts past the headroom, over `k` steps (a power of two).
#[inline(always)]
fn stagger(f: u32, k: u32) -> u64 {
    u64::from(f & (k - 1)) * STAGGER_STEP as u64
}

/// Bytes the kernel leaves in front of a packet it writes into an AF_XDP UMEM chunk.
const XDP_PACKET_HEADROOM: usize = 256;

/// Big frames lent to an input at a time ([`Master::lend_frames`]).
const LENT_BIG: usize = 4;

/// The master's free frames: regular ones and big ones (indexes from `nsmall` on).
pub(super) struct Frees {
    pub(super) small: Vec<u32>,
    pub(super) big: Vec<u32>,
    pub(super) nsmall: u32,
    /// Frames `share_lo..share_lo + share_n` and `big_share_lo..big_share_lo + big_share_n`
    /// belong to the pool of an input wire ([`Master::input_wire`]): freed, they go back there.
    pub(super) share_lo: u32,
    pub(super) share_n: u32,
    pub(super) big_share_lo: u32,
    pub(super) big_share_n: u32,
    pub(super) share: Option<Box<Share>>,
}

/// The pool a `mem:` input wire allocates from ([`Master::input_wire`]), with the frames the
/// master gives back to it, 64 at a time.
pub(super) struct Share {
    pool: Arc<Pool>,
    back: Chunk,
    /// Packet address of regular frame 0, and the frame size.
    small_base: u64,
    frame_size: u64,
    /// Packet address of big frame 0 (index `nsmall`), and the big frame size.
    big_base: u64,
    big_size: u64,
}

impl Frees {
    #[inline(always)]
    pub(super) fn push(&mut self, f: u32) {
        if f.wrapping_sub(self.share_lo) < self.share_n
            || f.wrapping_sub(self.big_share_lo) < self.big_share_n
        {
            self.give_to_share(f);
        } else if f < self.nsmall {
            self.small.push(f);
        } else {
            self.big.push(f);
        }
    }

    /// Gives a frame of the input wire's share back to its pool (a regular one through a chunk
    /// of 64, a big one at once).
    #[inline(always)]
    fn give_to_share(&mut self, f: u32) {
        let Some(s) = self.share.as_mut() else {
            return;
        };
        if f >= self.nsmall {
            s.pool
                .give_big(s.big_base + u64::from(f - self.nsmall) * s.big_size);
            return;
        }
        s.back.addrs[s.back.n as usize] = s.small_base + u64::from(f) * s.frame_size;
        s.back.n += 1;
        if s.back.n as usize == CHUNK {
            s.pool.give_chunk(s.back);
            s.back.n = 0;
        }
    }

    /// Gives the input wire's pool the frames waiting for a full chunk: always, or only when
    /// its writer would find none free (so it never waits on frames the master sits on).
    #[inline]
    pub(super) fn flush_share(&mut self, always: bool) {
        if let Some(s) = self.share.as_mut() {
            if s.back.n > 0 && (always || s.pool.no_free_chunk()) {
                s.pool.give_chunk(s.back);
                s.back.n = 0;
            }
        }
    }

    /// Whether `batch`'s frames are the input wire's (its pool is the share's).
    #[inline(always)]
    fn is_share_batch(&self, batch: &Batch) -> bool {
        match (&self.share, batch.pool()) {
            (Some(s), Some(p)) => Arc::ptr_eq(&s.pool, p),
            _ => false,
        }
    }
}

/// Releases a slot's hold on its frame: a frame held by one queue (`Holds::SOLE`) is free at
/// once, a shared one when its count reaches 0.
#[inline(always)]
pub(super) fn release(holds: &mut Holds, free: &mut Frees, f: u32) {
    if let Some(f) = holds.release(f) {
        free.push(f);
    }
}

/// [`release`] of a run of slots' tags. The common run, every frame a regular one held by one
/// queue in a cluster without an input wire, goes back to the free stack in one copy (the
/// order the one-by-one pushes would give), with one bound check rather than a look at each
/// frame's kind.
#[inline]
pub(super) fn release_run(holds: &mut Holds, free: &mut Frees, tags: &[u32]) {
    let sole_small = free.share.is_none()
        && tags.iter().fold(true, |ok, &t| {
            ok & (t & Holds::SOLE != 0) & (t & !Holds::SOLE < free.nsmall)
        });
    if sole_small {
        free.small.extend(tags.iter().map(|&t| t & !Holds::SOLE));
    } else {
        for &t in tags {
            release(holds, free, t);
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

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn umem_area_is_the_regular_frames_and_a_kernel_packet_address_names_its_frame() {
        let cfg = ClusterConfig {
            apps: vec![2],
            slots: 64,
            kernel_frames: 512,
            ..ClusterConfig::default()
        };
        let m = Master::anon(&cfg).unwrap();
        let seg = &m.seg;
        assert_eq!(
            seg.frames,
            2 * 64 + 2 * BATCH + 512,
            "the kernel's share added"
        );
        let a = m.umem_area(2).unwrap();
        assert_eq!((a.off, a.off % 4096), (seg.frames_off as u64, 0));
        assert_eq!(a.chunk, 2048);
        assert_eq!(a.len, (seg.frames * 2048) as u64);
        assert_eq!(
            a.fill_max() as usize,
            seg.frames / 4,
            "half the frames over 2 sockets"
        );
        // The kernel writes a packet 256 bytes into its chunk; the master's own frames put it
        // after the headroom: both name the frame. Inside the headroom or past the regular
        // frames (this cluster has no big ones) is no packet address.
        let chunk5 = a.off + 5 * 2048;
        assert_eq!(seg.frame_of(chunk5 + 256), Some(5));
        assert_eq!(seg.frame_of(seg.frame_addr(5)), Some(5));
        assert_eq!(seg.frame_of(chunk5 + seg.headroom as u64 - 1), None);
        assert_eq!(seg.frame_of(chunk5), None);
        assert_eq!(seg.frame_of(a.off + a.len + seg.headroom as u64), None);
        assert_eq!(seg.frame_of(a.off - 2048 + 256), None);

        // Frames the kernel cannot take as UMEM chunks: refused, with the reason.
        let small = ClusterConfig {
            frame_size: 1024,
            ..ClusterConfig::default()
        };
        let why = Master::anon(&small).unwrap().umem_area(1).unwrap_err();
        assert!(why.contains("1024-byte frames"), "{why}");
    }

    #[test]
    fn umem_area_leaves_frames_out_of_the_kernel_or_is_refused() {
        // A socket holds its fill ring and up to a batch more in its receive ring: the
        // sockets together must never hold every frame (the master reads only with frames to
        // lend, so none would come back). -b 128 over 8 queues gave each socket 16 frames:
        // all 128 in the kernel, and the input stopped for good.
        for (frames, sockets) in [(128u32, 8usize), (128, 1), (256, 1), (256, 2), (4096, 16)] {
            let cfg = ClusterConfig {
                frames,
                ..ClusterConfig::default()
            };
            let m = Master::anon(&cfg).unwrap();
            let total = m.seg.frames;
            match m.umem_area(sockets) {
                Ok(a) => {
                    let held = sockets * (a.fill_max() as usize + BATCH);
                    assert!(
                        held < total,
                        "{sockets} sockets may hold {held} of {total} frames"
                    );
                }
                Err(why) => assert!(why.contains("too few"), "{why}"),
            }
        }
        let m = Master::anon(&ClusterConfig {
            frames: 128,
            ..ClusterConfig::default()
        })
        .unwrap();
        let why = m.umem_area(8).unwrap_err();
        assert!(
            why.contains("128 frames") && why.contains("8 queue"),
            "{why}"
        );
        let m = Master::anon(&ClusterConfig {
            frames: 512,
            ..ClusterConfig::default()
        })
        .unwrap();
        assert_eq!(m.umem_area(2).unwrap().fill_max(), 128);
    }
}

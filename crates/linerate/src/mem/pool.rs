//! A pool: a region cut into fixed-size frames, with a lock-free free list of frame chunks.
//!
//! Workers never take frames one by one from the shared list: each [`Batch`](super::Batch)
//! keeps a local cache and trades whole chunks of 64 frames with the pool, so allocation and
//! freeing cost one atomic operation per 64 packets and no lock.
//!
//! A pool may also hold a few **big frames** after the regular ones ([`PoolConfig::big_frames`]),
//! for the occasional packet longer than a regular frame (jumbo frames, a capture's 64 KiB
//! records): taken and returned one at a time, so that a file or a wire carries every packet
//! whole while small packets keep small frames. Big frames are only address space until a
//! packet is written into them (no transparent huge pages there): a jumbo frame makes 3 pages
//! resident, not the frame's size.

use super::{MemError, Region};
use crossbeam_queue::ArrayQueue;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Default frame size (bytes), as netmap, AF_XDP and DPDK use.
pub const DEFAULT_FRAME_SIZE: u32 = 2048;
/// Default headroom before the packet inside a frame (room to push headers).
pub const DEFAULT_HEADROOM: u32 = 128;
/// Largest packet a big frame holds: the longest record a pcap reader accepts (libpcap's
/// limit for Ethernet, 256 KiB).
pub const BIG_PACKET: u32 = 262_144;
/// Big frames a port's pool keeps by default (see [`PoolConfig::big_frames`]).
pub const DEFAULT_BIG_FRAMES: u32 = 128;

pub(crate) const CHUNK: usize = 64;

/// Up to 64 free frame addresses.
#[derive(Clone, Copy)]
pub(crate) struct Chunk {
    pub(crate) n: u32,
    pub(crate) addrs: [u64; CHUNK],
}

/// How to build a pool.
#[derive(Clone, Debug)]
pub struct PoolConfig {
    /// Number of frames (rounded up to a multiple of 64).
    pub frames: u32,
    /// Bytes per frame (a power of two, 256..=65536).
    pub frame_size: u32,
    /// Bytes left free before the packet in each frame.
    pub headroom: u32,
    /// Big frames after the regular ones, each holding [`BIG_PACKET`] bytes after the
    /// headroom (0: none). Reserved address space: ~260 KiB each, resident only as written.
    pub big_frames: u32,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            frames: 4096,
            frame_size: DEFAULT_FRAME_SIZE,
            headroom: DEFAULT_HEADROOM,
            big_frames: 0,
        }
    }
}

/// Bytes of one big frame for `headroom` (rounded to pages).
const fn big_frame_size(headroom: u32) -> u64 {
    (BIG_PACKET as u64 + headroom as u64).div_ceil(4096) * 4096
}

/// Frames in a region. Frames of an allocating pool are handed out and returned through
/// batches; a pool without a free list describes memory whose frames a kernel ring manages.
pub struct Pool {
    region: Region,
    frame_size: u32,
    frames: u32,
    headroom: u32,
    free: Option<ArrayQueue<Chunk>>,
    /// Where the big frames start (the end of the regular ones; `u64::MAX` without any).
    big_base: u64,
    big_size: u64,
    /// Free big frames (packet addresses).
    big_free: Option<ArrayQueue<u64>>,
    /// Free frames given back in a chunk the free list had no room for: it holds as many
    /// chunks as full ones fill the pool, and batches dropped (or flushed) with a few frames
    /// left give back partly filled chunks, so that it can fill before every frame is in it.
    /// Taken when the free list runs dry; the lock is only taken then.
    spill: Mutex<Vec<u64>>,
    /// Frames in `spill` (read without its lock).
    spilled: AtomicUsize,
}

impl Pool {
    /// A pool of anonymous memory.
    pub fn new(cfg: &PoolConfig) -> Result<Pool, MemError> {
        let (frames, bytes) = Self::check(cfg)?;
        let big = cfg.big_frames as u64 * big_frame_size(cfg.headroom);
        let region = Region::anon(bytes + big as usize)?;
        if big > 0 {
            // Big frames are sparse: a huge page there would make 2 MiB resident per touch.
            region.advise_no_huge(bytes, big as usize);
        }
        let mut p = Self::with_region(region, frames, cfg.frame_size, cfg.headroom);
        if cfg.big_frames > 0 {
            let q = ArrayQueue::new(cfg.big_frames as usize);
            let size = big_frame_size(cfg.headroom);
            for i in 0..cfg.big_frames as u64 {
                let _ = q.push(bytes as u64 + i * size + cfg.headroom as u64);
            }
            p.big_base = bytes as u64;
            p.big_size = size;
            p.big_free = Some(q);
        }
        Ok(p)
    }

    /// A pool over an existing region, every frame free.
    pub fn from_region(region: Region, cfg: &PoolConfig) -> Result<Pool, MemError> {
        let (frames, bytes) = Self::check(cfg)?;
        if region.len() < bytes {
            return Err(MemError::Config(format!(
                "region of {} bytes is smaller than {} frames of {}",
                region.len(),
                frames,
                cfg.frame_size
            )));
        }
        Ok(Self::with_region(
            region,
            frames,
            cfg.frame_size,
            cfg.headroom,
        ))
    }

    /// A pool that only names memory (no free list): frames are managed by whoever maps it.
    pub fn external(region: Region) -> Pool {
        Pool {
            region,
            frame_size: 0,
            frames: 0,
            headroom: 0,
            free: None,
            big_base: u64::MAX,
            big_size: 0,
            big_free: None,
            spill: Mutex::new(Vec::new()),
            spilled: AtomicUsize::new(0),
        }
    }

    /// A pool of some frames of `owner`'s memory, which stays mapped while this pool lives:
    /// `small` are the packet addresses of regular frames of `frame_size` bytes (each frame
    /// starting at a multiple of `frame_size`) with `headroom` before the packet; `big` those of
    /// big frames of `big_size` bytes laid out from `big_base`. The caller gives up those
    /// frames: from now on they are allocated and freed through this pool (what
    /// [`crate::cluster::Master::input_wire`] does with a share of a segment's frames).
    pub(crate) fn share_of(
        owner: std::sync::Arc<Pool>,
        frame_size: u32,
        headroom: u32,
        small: &[u64],
        big: &[u64],
        (big_base, big_size): (u64, u64),
    ) -> Pool {
        // Room for twice the chunks the frames fill: chunks given back partly full (a writer's
        // batch dropped, the master's flush) seldom find it full (then they spill, `give_chunk`).
        let q = ArrayQueue::new(2 * small.len().div_ceil(CHUNK) + 2);
        for part in small.chunks(CHUNK) {
            let mut chunk = Chunk {
                n: part.len() as u32,
                addrs: [0; CHUNK],
            };
            chunk.addrs[..part.len()].copy_from_slice(part);
            let _ = q.push(chunk);
        }
        let big_free = (!big.is_empty()).then(|| {
            let bq = ArrayQueue::new(big.len());
            for &a in big {
                let _ = bq.push(a);
            }
            bq
        });
        Pool {
            region: Region::view_of(owner.region(), owner.clone()),
            frame_size,
            frames: small.len() as u32,
            headroom,
            free: Some(q),
            big_base: if big.is_empty() { u64::MAX } else { big_base },
            big_size,
            big_free,
            spill: Mutex::new(Vec::new()),
            spilled: AtomicUsize::new(0),
        }
    }

    /// Whether no chunk of free frames waits in the shared list (a taker would find none).
    #[inline]
    pub(crate) fn no_free_chunk(&self) -> bool {
        self.free
            .as_ref()
            .is_none_or(|q| q.is_empty() && self.spilled.load(Ordering::Acquire) == 0)
    }

    fn check(cfg: &PoolConfig) -> Result<(u32, usize), MemError> {
        if !cfg.frame_size.is_power_of_two() || !(256..=65536).contains(&cfg.frame_size) {
            return Err(MemError::Config(format!(
                "frame size {} must be a power of two from 256 to 65536",
                cfg.frame_size
            )));
        }
        if cfg.headroom >= cfg.frame_size / 2 {
            return Err(MemError::Config(format!(
                "headroom {} must be under half the frame size {}",
                cfg.headroom, cfg.frame_size
            )));
        }
        let frames = (cfg.frames.max(CHUNK as u32)).div_ceil(CHUNK as u32) * CHUNK as u32;
        let bytes = frames as usize * cfg.frame_size as usize;
        Ok((frames, bytes))
    }

    fn with_region(region: Region, frames: u32, frame_size: u32, headroom: u32) -> Pool {
        let q = ArrayQueue::new(frames as usize / CHUNK);
        for c in 0..frames as usize / CHUNK {
            let mut chunk = Chunk {
                n: CHUNK as u32,
                addrs: [0; CHUNK],
            };
            for (i, a) in chunk.addrs.iter_mut().enumerate() {
                *a = ((c * CHUNK + i) as u64) * frame_size as u64 + headroom as u64;
            }
            // Cannot fail: the queue holds exactly frames / 64 chunks.
            let _ = q.push(chunk);
        }
        Pool {
            region,
            frame_size,
            frames,
            headroom,
            free: Some(q),
            big_base: u64::MAX,
            big_size: 0,
            big_free: None,
            spill: Mutex::new(Vec::new()),
            spilled: AtomicUsize::new(0),
        }
    }

    /// The memory.
    #[inline(always)]
    pub fn region(&self) -> &Region {
        &self.region
    }

    /// Frame size in bytes (0 for an external pool).
    pub fn frame_size(&self) -> u32 {
        self.frame_size
    }

    /// Number of frames (0 for an external pool).
    pub fn frames(&self) -> u32 {
        self.frames
    }

    /// Headroom before the packet in a frame.
    pub fn headroom(&self) -> u32 {
        self.headroom
    }

    /// Largest packet a regular frame holds.
    pub fn max_packet(&self) -> u32 {
        self.frame_size.saturating_sub(self.headroom)
    }

    /// Largest packet any frame of the pool holds (a big frame's, if it has some).
    pub fn max_big_packet(&self) -> u32 {
        if self.big_free.is_some() {
            BIG_PACKET
        } else {
            self.max_packet()
        }
    }

    /// Whether `addr` lies in a big frame.
    #[inline(always)]
    pub fn is_big(&self, addr: u64) -> bool {
        addr >= self.big_base
    }

    /// Takes a free big frame; its packet address, or None (none free, or none at all).
    #[inline]
    pub(crate) fn take_big(&self) -> Option<u64> {
        self.big_free.as_ref()?.pop()
    }

    /// Returns a big frame (any address inside it).
    #[inline]
    pub(crate) fn give_big(&self, addr: u64) {
        if let Some(q) = &self.big_free {
            let _ = q.push(self.frame_start(addr) + self.headroom as u64);
        }
    }

    /// Bytes of the frame that holds `addr` (regular or big).
    #[inline(always)]
    pub fn frame_size_at(&self, addr: u64) -> u64 {
        if self.is_big(addr) {
            self.big_size
        } else {
            self.frame_size as u64
        }
    }

    /// Whether frames are allocated and freed through this pool.
    #[inline(always)]
    pub fn allocates(&self) -> bool {
        self.free.is_some()
    }

    /// Frames sitting in the shared free list now (not counting batch caches).
    pub fn free_frames(&self) -> usize {
        self.free.as_ref().map_or(0, |q| {
            // Approximate under concurrency; exact when quiescent.
            let mut n = 0;
            let mut tmp = Vec::with_capacity(q.len());
            while let Some(c) = q.pop() {
                n += c.n as usize;
                tmp.push(c);
            }
            // Before the chunks go back: one that spills then is counted once.
            n += self.spilled.load(Ordering::Acquire);
            for c in tmp {
                self.give_chunk(c);
            }
            n
        })
    }

    #[inline]
    pub(crate) fn take_chunk(&self) -> Option<Chunk> {
        let q = self.free.as_ref()?;
        match q.pop() {
            Some(c) => Some(c),
            None => self.take_spilled(),
        }
    }

    /// Up to 64 frames of the spill (`give_chunk`), when the free list ran dry.
    #[cold]
    fn take_spilled(&self) -> Option<Chunk> {
        if self.spilled.load(Ordering::Acquire) == 0 {
            return None;
        }
        let mut s = self.spill.lock().unwrap_or_else(|e| e.into_inner());
        let n = s.len().min(CHUNK);
        if n == 0 {
            return None;
        }
        let mut c = Chunk {
            n: n as u32,
            addrs: [0; CHUNK],
        };
        let from = s.len() - n;
        c.addrs[..n].copy_from_slice(&s[from..]);
        s.truncate(from);
        self.spilled.store(s.len(), Ordering::Release);
        Some(c)
    }

    #[inline]
    pub(crate) fn give_chunk(&self, c: Chunk) {
        if let Some(q) = &self.free {
            if let Err(c) = q.push(c) {
                self.spill_chunk(c);
            }
        }
    }

    /// Keeps the frames of a chunk the free list had no room for (it holds as many chunks as
    /// full ones fill the pool, partly filled ones can outnumber them): never lost.
    #[cold]
    fn spill_chunk(&self, c: Chunk) {
        let mut s = self.spill.lock().unwrap_or_else(|e| e.into_inner());
        s.extend_from_slice(&c.addrs[..c.n as usize]);
        self.spilled.store(s.len(), Ordering::Release);
    }

    /// Start of the frame that holds `addr`.
    #[inline(always)]
    pub fn frame_start(&self, addr: u64) -> u64 {
        if self.frame_size == 0 {
            addr
        } else if self.is_big(addr) {
            addr - (addr - self.big_base) % self.big_size
        } else {
            // Frames are a power of two (2 KiB by default) almost always: a mask, not a 64-bit
            // division, per packet.
            let fs = self.frame_size as u64;
            if fs & (fs - 1) == 0 {
                addr & !(fs - 1)
            } else {
                addr - addr % fs
            }
        }
    }
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("region", &self.region)
            .field("frame_size", &self.frame_size)
            .field("frames", &self.frames)
            .finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// Frames given back a few at a time (batches dropped with a few cached frames) make more
    /// chunks than the free list holds full ones: none may be lost.
    #[test]
    fn frames_given_back_one_at_a_time_are_all_kept() {
        let pool = Pool::new(&PoolConfig {
            frames: 128,
            ..Default::default()
        })
        .unwrap();
        let mut all = Vec::new();
        while let Some(c) = pool.take_chunk() {
            all.extend_from_slice(&c.addrs[..c.n as usize]);
        }
        assert_eq!(all.len(), 128);
        assert!(pool.no_free_chunk());
        for &a in &all {
            let mut c = Chunk {
                n: 1,
                addrs: [0; CHUNK],
            };
            c.addrs[0] = a;
            pool.give_chunk(c);
        }
        assert!(!pool.no_free_chunk());
        assert_eq!(pool.free_frames(), 128);
        let mut again = Vec::new();
        while let Some(c) = pool.take_chunk() {
            again.extend_from_slice(&c.addrs[..c.n as usize]);
        }
        again.sort_unstable();
        all.sort_unstable();
        assert_eq!(again, all, "each frame once, none lost");
        assert_eq!(pool.free_frames(), 0);
    }
}

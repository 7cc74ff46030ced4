//! A pool: a region cut into fixed-size frames, with a lock-free free list of frame chunks.
//!
//! Workers never take frames one by one from the shared list: each [`Batch`](super::Batch)
//! keeps a local cache and trades whole chunks of 64 frames with the pool, so allocation and
//! freeing cost one atomic operation per 64 packets and no lock.

use super::{MemError, Region};
use crossbeam_queue::ArrayQueue;

/// Default frame size (bytes), as netmap, AF_XDP and DPDK use.
pub const DEFAULT_FRAME_SIZE: u32 = 2048;
/// Default headroom before the packet inside a frame (room to push headers).
pub const DEFAULT_HEADROOM: u32 = 128;

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
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            frames: 4096,
            frame_size: DEFAULT_FRAME_SIZE,
            headroom: DEFAULT_HEADROOM,
        }
    }
}

/// Frames in a region. Frames of an allocating pool are handed out and returned through
/// batches; a pool without a free list describes memory whose frames a kernel ring manages.
pub struct Pool {
    region: Region,
    frame_size: u32,
    frames: u32,
    headroom: u32,
    free: Option<ArrayQueue<Chunk>>,
}

impl Pool {
    /// A pool of anonymous memory.
    pub fn new(cfg: &PoolConfig) -> Result<Pool, MemError> {
        let (frames, bytes) = Self::check(cfg)?;
        Ok(Self::with_region(
            Region::anon(bytes)?,
            frames,
            cfg.frame_size,
            cfg.headroom,
        ))
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
        }
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

    /// Largest packet a frame holds.
    pub fn max_packet(&self) -> u32 {
        self.frame_size.saturating_sub(self.headroom)
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
            for c in tmp {
                let _ = q.push(c);
            }
            n
        })
    }

    #[inline]
    pub(crate) fn take_chunk(&self) -> Option<Chunk> {
        self.free.as_ref()?.pop()
    }

    #[inline]
    pub(crate) fn give_chunk(&self, c: Chunk) {
        if let Some(q) = &self.free {
            // The queue has room for every frame of the pool; a push can only fail if frames
            // were freed twice, which the frame ownership rules exclude.
            let _ = q.push(c);
        }
    }

    /// Start of the frame that holds `addr`.
    #[inline(always)]
    pub fn frame_start(&self, addr: u64) -> u64 {
        if self.frame_size == 0 {
            addr
        } else {
            addr - addr % self.frame_size as u64
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

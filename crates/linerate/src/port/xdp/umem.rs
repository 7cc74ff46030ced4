//! The UMEM: a [`Pool`] of 2 KiB frames over anonymous memory, registered with an AF_XDP socket.
//!
//! The kernel writes received packets straight into the pool's frames, so a received batch is
//! bound to this pool like any other and its frames return to the pool's free list when the
//! batch is cleared; the port refills the kernel's fill ring from the same free list.

use super::sys::{self, UmemReg};
use crate::mem::{Pool, PoolConfig, Region, DEFAULT_FRAME_SIZE, DEFAULT_HEADROOM};
use crate::port::PortError;
use std::os::fd::OwnedFd;
use std::sync::Arc;

/// A pool of `frames` frames (rounded up to a multiple of 64) for a UMEM.
pub(super) fn pool(frames: u32) -> Result<Arc<Pool>, PortError> {
    let cfg = PoolConfig {
        frames,
        frame_size: DEFAULT_FRAME_SIZE,
        headroom: DEFAULT_HEADROOM,
        big_frames: 0,
    };
    let bytes = cfg.frames.div_ceil(64) as usize * 64 * cfg.frame_size as usize;
    let region = Region::anon(bytes)?;
    Ok(Arc::new(Pool::from_region(region, &cfg)?))
}

/// Registers `pool`'s memory as the UMEM of socket `fd` (aligned chunks of one frame each, no
/// extra headroom: the pool's headroom is inside the frame).
pub(super) fn register(fd: &OwnedFd, iface: &str, pool: &Pool) -> Result<(), PortError> {
    let reg = UmemReg {
        addr: pool.region().as_ptr() as u64,
        len: pool.frames() as u64 * pool.frame_size() as u64,
        chunk_size: pool.frame_size(),
        headroom: 0,
        flags: 0,
        tx_metadata_len: 0,
    };
    sys::setopt(fd, iface, sys::XDP_UMEM_REG, "XDP_UMEM_REG", &reg)
}

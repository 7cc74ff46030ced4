//! The UMEM: a [`Pool`] of 2 KiB frames over anonymous memory, registered with an AF_XDP socket.
//!
//! The kernel writes received packets straight into the pool's frames, so a received batch is
//! bound to this pool like any other and its frames return to the pool's free list when the
//! batch is cleared; the port refills the kernel's fill ring from the same free list.

use super::sys::{self, UmemReg};
use crate::mem::{Pool, PoolConfig, DEFAULT_BIG_FRAMES, DEFAULT_FRAME_SIZE, DEFAULT_HEADROOM};
use crate::port::PortError;
use std::os::fd::OwnedFd;
use std::sync::Arc;

/// Bytes of a frame of the port's own UMEM.
pub(super) const FRAME: u32 = DEFAULT_FRAME_SIZE;

/// A pool of `frames` frames of `frame_size` bytes (rounded up to a multiple of 64) for a
/// UMEM, with big frames after them (outside the UMEM) into which the pieces of a
/// multi-buffer frame are gathered, and from which a frame longer than a UMEM frame is sent
/// in pieces.
pub(super) fn pool(frames: u32, frame_size: u32) -> Result<Arc<Pool>, PortError> {
    let cfg = PoolConfig {
        frames,
        frame_size,
        headroom: DEFAULT_HEADROOM,
        big_frames: DEFAULT_BIG_FRAMES,
    };
    Ok(Arc::new(Pool::new(&cfg)?))
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

/// Memory that another owner lends to be a UMEM: frames `chunk` bytes each from byte `off` of
/// `pool`'s region, `len` bytes in all (a cluster segment's regular frames, so that the kernel
/// writes received packets straight into the frames consumers read). The port puts into its
/// fill ring only the frames a batch was lent ([`crate::mem::Batch`]'s loan), never more than
/// `fill_max` at a time, and its packets go back to the lender in the batch.
///
/// Made by the lender ([`crate::cluster::Master::umem_area`]), which checks what the kernel
/// needs of an aligned UMEM: `off` page aligned, `chunk` 2048 or 4096, `len` a multiple of it.
#[derive(Clone, Debug)]
pub struct UmemArea {
    pub(crate) pool: Arc<Pool>,
    pub(crate) off: u64,
    pub(crate) len: u64,
    pub(crate) chunk: u32,
    pub(crate) fill_max: u32,
}

impl UmemArea {
    /// Most frames each socket keeps in its fill ring.
    pub fn fill_max(&self) -> u32 {
        self.fill_max
    }
}

/// Registers `area` as the UMEM of socket `fd` (aligned chunks, no extra headroom: the kernel
/// writes a packet 256 bytes into its chunk, `XDP_PACKET_HEADROOM`).
pub(super) fn register_area(fd: &OwnedFd, iface: &str, area: &UmemArea) -> Result<(), PortError> {
    let region = area.pool.region();
    let end = area.off.checked_add(area.len);
    if !area.off.is_multiple_of(4096)
        || !matches!(area.chunk, 2048 | 4096)
        || area.len == 0
        || !area.len.is_multiple_of(u64::from(area.chunk))
        || end.is_none_or(|e| e > region.len() as u64)
    {
        return Err(PortError::Unsupported {
            port: format!("xdp:{iface}"),
            op: "a UMEM in this memory (not page aligned or not 2048/4096-byte frames)",
        });
    }
    let reg = UmemReg {
        // off + len lies inside the region (checked above).
        addr: region.as_ptr() as u64 + area.off,
        len: area.len,
        chunk_size: area.chunk,
        headroom: 0,
        flags: 0,
        tx_metadata_len: 0,
    };
    sys::setopt(fd, iface, sys::XDP_UMEM_REG, "XDP_UMEM_REG", &reg)
}

//! Packet memory: regions, pools of fixed-size frames, descriptors and batches.
//!
//! Bytes stay in one [`Pool`]; only [`Desc`]s move. A [`Batch`] of up to [`BATCH`] descriptors is
//! the unit of every port and worker call.

mod batch;
mod pool;
mod region;

pub use batch::{Batch, Desc, Fresh, Pkt, BATCH};
pub(crate) use pool::{Chunk, CHUNK};
pub use pool::{
    Pool, PoolConfig, BIG_PACKET, DEFAULT_BIG_FRAMES, DEFAULT_FRAME_SIZE, DEFAULT_HEADROOM,
};
pub use region::{Region, ShmFile};

/// Copies a packet into its frame: `src` into `dst[..src.len()]` (nothing when `dst` is
/// shorter). Packets of 16 to 128 bytes, the common small ones, are two overlapping moves of
/// a fixed size inlined here rather than a call to `memcpy` per packet.
#[inline(always)]
pub fn copy_packet(dst: &mut [u8], src: &[u8]) {
    let n = src.len();
    let Some(dst) = dst.get_mut(..n) else {
        return;
    };
    #[inline(always)]
    fn two<const K: usize>(dst: &mut [u8], src: &[u8]) {
        let n = src.len();
        if let (Some(d), Some(s)) = (dst.first_chunk_mut::<K>(), src.first_chunk::<K>()) {
            *d = *s;
        }
        if let (Some(d), Some(s)) = (dst.last_chunk_mut::<K>(), src.last_chunk::<K>()) {
            *d = *s;
        }
        debug_assert!(n >= K && n <= 2 * K);
    }
    match n {
        16..=32 => two::<16>(dst, src),
        33..=64 => two::<32>(dst, src),
        65..=128 => two::<64>(dst, src),
        _ => dst.copy_from_slice(src),
    }
}

/// Prefetches the cache line at `p` for writing (a hint: no effect where unsupported).
#[inline(always)]
pub(crate) fn prefetch_write(p: *const u8) {
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

/// Errors of packet memory.
#[derive(Debug, thiserror::Error)]
pub enum MemError {
    /// The operating system refused memory.
    #[error("cannot allocate {bytes} bytes of packet memory: {source}")]
    Alloc {
        /// Bytes asked for.
        bytes: usize,
        /// The OS error.
        source: std::io::Error,
    },
    /// A shared-memory file could not be created or mapped.
    #[error("shared memory {path}: {source}")]
    Shm {
        /// The file.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// A pool parameter is out of range.
    #[error("bad pool configuration: {0}")]
    Config(String),
}

#[cfg(test)]
mod tests {
    #[test]
    fn copy_packet_copies_every_length_exactly() {
        // The fixed-size moves (16 to 128 bytes) and memcpy around them: the packet's bytes
        // land at the start of the frame and nothing after them is touched.
        let src: Vec<u8> = (0..300u32).map(|i| (i * 7 + 1) as u8).collect();
        for n in 0..=300 {
            let mut dst = vec![0xeeu8; 320];
            super::copy_packet(&mut dst, &src[..n]);
            assert_eq!(&dst[..n], &src[..n], "length {n}");
            assert!(
                dst[n..].iter().all(|&b| b == 0xee),
                "length {n}: wrote past the packet"
            );
        }
        // A frame shorter than the packet is left alone (no panic).
        let mut short = [0u8; 8];
        super::copy_packet(&mut short, &src[..20]);
        assert_eq!(short, [0; 8]);
    }
}

//! Packet memory: regions, pools of fixed-size frames, descriptors and batches.
//!
//! Bytes stay in one [`Pool`]; only [`Desc`]s move. A [`Batch`] of up to [`BATCH`] descriptors is
//! the unit of every port and worker call.

mod batch;
mod pool;
mod region;

pub use batch::{Batch, Desc, Fresh, Pkt, BATCH};
pub use pool::{
    Pool, PoolConfig, BIG_PACKET, DEFAULT_BIG_FRAMES, DEFAULT_FRAME_SIZE, DEFAULT_HEADROOM,
};
pub use region::{Region, ShmFile};

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

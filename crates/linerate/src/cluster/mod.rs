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
//! marked [`Desc::F_SHARED`](crate::mem::Desc::F_SHARED) (read-only). Offsets, never pointers, are stored, so the segment can be mapped anywhere.
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
//!   normally ([`Port::is_finished`](crate::port::Port::is_finished), "cluster ID ended: master stopped"). What no consumer read
//!   by then is taken back and counted as `unread` ([`Master::take_back`]). A master killed
//!   with SIGKILL is noticed differently (its pid and start time no longer match a running
//!   process): its consumers stop with an error saying it died, and the next master replaces
//!   its stale segment.
//! - Nothing read from the segment is trusted: the master's figures are its own (kept in its
//!   memory, published for others to read), every cursor a consumer writes is clamped, and a
//!   consumer checks the master's head cursor and every descriptor (inside a frame of the
//!   segment, a plausible length) before handing it out: a corrupted segment stops it with an
//!   error, the bad batch counted as `malformed`.

mod claim;
mod consumer;
mod lane;
mod layout;
mod liveness;
mod master;
mod pages;
mod prom;
mod segment;
mod stats;
mod tx;

pub use claim::claim_path;
pub use consumer::{ClusterPort, WAIT_CAP};
pub use layout::{ClusterConfig, DEFAULT_SLOTS, MAX_BIG_FRAME, MAX_QUEUES};
pub use liveness::alive;
pub use master::Master;
pub use pages::{
    check_huge_dir, free_huge_pages, hugetlbfs_mounts, hugetlbfs_page_size, HugePages, Placement,
    SegmentOwner,
};
pub use prom::prom_text;
pub use segment::{remove_published_segments, segment_dirs, segment_path, segment_paths, Segment};
pub use stats::{ClusterStats, QueueStats};

use crate::port::PortError;

pub(crate) fn err(path: &str, msg: String) -> PortError {
    PortError::Gone {
        port: path.to_string(),
        why: msg,
    }
}

//! A cluster segment as a hostile writer sees it: the offsets of a version 4 segment's header
//! and of a queue's area (pinned by a unit test beside the layout in linerate's
//! `cluster/layout.rs`), and a queue slot's descriptor as bytes. For tests that write into a
//! running cluster's segment what its master never would.

/// Offsets in a version 4 segment: the header's words, the queues' place, and inside a queue's
/// area the head and tail cursors, the consumer's words and the slots.
pub mod layout {
    pub const VERSION: u64 = 8;
    pub const HEADROOM: u64 = 28;
    pub const STATE: u64 = 48;
    pub const QUEUE_OFF: u64 = 56;
    pub const QUEUE_STRIDE: u64 = 64;
    pub const FRAMES_OFF: u64 = 80;
    pub const TOTAL_LEN: u64 = 88;
    pub const COUNTERS: u64 = 184;
    /// The number of big frames (u32), then their size (u32).
    pub const BIG_FRAMES: u64 = 272;
    pub const BIG_OFF: u64 = 280;
    pub const HEAD: u64 = 0;
    pub const TAIL: u64 = 128;
    pub const HANDED: u64 = 256 + 24;
    pub const SLOTS: u64 = 512;
}

/// One descriptor as a queue's slot holds it (32 bytes): address, time (a fixed one),
/// length, wire length, padding.
pub fn descriptor(addr: u64, len: u32, wire_len: u32) -> [u8; 32] {
    let mut d = [0u8; 32];
    d[..8].copy_from_slice(&addr.to_le_bytes());
    d[8..16].copy_from_slice(&1_700_000_000_000_000_000u64.to_le_bytes());
    d[16..20].copy_from_slice(&len.to_le_bytes());
    d[20..24].copy_from_slice(&wire_len.to_le_bytes());
    d
}

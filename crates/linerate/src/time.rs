//! Clocks: wall time for packet timestamps, monotonic time for rates and timers.

/// Nanoseconds since the Unix epoch (CLOCK_REALTIME).
#[inline]
pub fn wall_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// Nanoseconds of a monotonic clock with an arbitrary origin (CLOCK_MONOTONIC).
#[inline]
pub fn mono_ns() -> u64 {
    use std::sync::OnceLock;
    use std::time::Instant;
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

//! Who is alive: processes looked up in /proc (pid and start time), wall-clock heartbeats, and
//! the owner words consumers and transmit lanes claim.

use super::layout::RECLAIMING;
use std::sync::atomic::{AtomicU64, Ordering};

/// /proc/PID/stat: (state, start time in clock ticks since boot) of a process.
pub(super) fn proc_stat(pid: u32) -> Option<(u8, u64)> {
    if pid == 0 || pid == RECLAIMING {
        return None;
    }
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 1..];
    let mut f = rest.split_ascii_whitespace();
    let state = f.next()?.bytes().next()?;
    // Fields after the state: ppid(4) … starttime is field 22, the 20th after the state.
    let start = f.nth(18)?.parse().ok()?;
    Some((state, start))
}

/// Whether `pid` is a running (not zombie) process.
pub fn alive(pid: u32) -> bool {
    matches!(proc_stat(pid), Some((s, _)) if s != b'Z' && s != b'X')
}

pub(super) fn same_process(pid: u32, start: u64) -> bool {
    matches!(proc_stat(pid), Some((s, st)) if s != b'Z' && s != b'X' && st == start)
}

/// Wall-clock milliseconds (comparable between processes, unlike a per-process monotonic clock).
pub(super) fn now_ms() -> u64 {
    crate::time::wall_ns() / 1_000_000
}

pub(super) fn my_pid() -> u32 {
    std::process::id()
}

/// Claims an owner word for this process: Ok(new value), or Err(Some(pid)) when a live
/// process holds it, Err(None) when the master kept it busy (reclaiming) for too long.
pub(super) fn claim(owner: &AtomicU64) -> Result<u64, Option<u32>> {
    let me = my_pid();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    loop {
        let cur = owner.load(Ordering::Acquire);
        let (gen, pid) = ((cur >> 32) as u32, cur as u32);
        if pid == RECLAIMING {
            if std::time::Instant::now() > deadline {
                return Err(None);
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
            continue;
        }
        if pid != 0 && (pid == me || alive(pid)) {
            return Err(Some(pid));
        }
        // Free, or its holder died and the master has not noticed yet: take it.
        let new = (gen.wrapping_add(1).max(1) as u64) << 32 | me as u64;
        if owner
            .compare_exchange(cur, new, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            return Ok(new);
        }
    }
}

pub(super) fn unclaim(owner: &AtomicU64, mine: u64) {
    let gen = mine >> 32;
    let _ = owner.compare_exchange(mine, gen << 32, Ordering::AcqRel, Ordering::Relaxed);
}

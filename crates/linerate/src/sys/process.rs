//! Processes: who we run as, signals to another process.

use std::io;

/// The effective user id of this process.
pub(crate) fn euid() -> u32 {
    // SAFETY: geteuid takes no arguments and cannot fail.
    unsafe { libc::geteuid() }
}

/// Sends `sig` to process `pid` (> 0: a single process, never a group or "every process").
pub(crate) fn signal(pid: u32, sig: i32) -> io::Result<()> {
    let pid = i32::try_from(pid)
        .ok()
        .filter(|&p| p > 0)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "not a single process id"))?;
    // SAFETY: kill(2) with a positive pid addresses that one process; no memory is passed.
    if unsafe { libc::kill(pid, sig) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn signal_refuses_process_groups_and_checks_existence() {
        assert!(signal(0, 0).is_err());
        assert!(signal(u32::MAX, 0).is_err()); // -1 would be "every process"
        signal(std::process::id(), 0).unwrap(); // signal 0: only checks we may signal ourselves
    }
}

//! Safe operating-system helpers for tools built on the library (the CLI has no `unsafe`): whether
//! the process runs as root, signals to a child process, the cores it may run on, pinning.

use std::io;

/// Whether the process runs with effective user id 0.
pub fn is_root() -> bool {
    crate::sys::process::euid() == 0
}

/// The effective user id of the process.
pub fn euid() -> u32 {
    crate::sys::process::euid()
}

/// Sends SIGINT to process `pid` (a child that stops cleanly on Ctrl-C).
pub fn interrupt(pid: u32) -> io::Result<()> {
    crate::sys::process::signal(pid, libc::SIGINT)
}

/// Sends SIGKILL to process `pid`.
pub fn kill(pid: u32) -> io::Result<()> {
    crate::sys::process::signal(pid, libc::SIGKILL)
}

/// The cores the process may run on.
pub fn allowed_cores() -> Vec<usize> {
    crate::sys::affinity::allowed_cores()
}

/// Pins the calling thread to `core`; false if the kernel refused.
pub fn pin_current_thread(core: usize) -> bool {
    crate::sys::affinity::pin_current_thread(core)
}

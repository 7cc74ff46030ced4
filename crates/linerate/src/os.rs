//! Safe operating-system helpers for tools built on the library (the CLI and the test harness
//! have no `unsafe`): whether the process runs as root, signals to a child process, the cores it
//! may run on, pinning, a terminal's input, interfaces (index, MAC), network namespaces, a
//! plain packet socket, a tc egress program.

use std::io;

/// The user id and primary group of user `name`, None when there is no such user.
pub fn user_ids(name: &str) -> io::Result<Option<(u32, u32)>> {
    crate::sys::process::user_ids(name)
}

/// The groups user `name` (primary group `gid`) is in: the primary one and its supplementary
/// ones, as it has them once [`become_user`] made it that user.
pub fn user_groups(name: &str, gid: u32) -> io::Result<Vec<u32>> {
    crate::sys::process::user_groups(name, gid)
}

/// Becomes user `name` for good (tcpdump's `-Z`): setgid to `gid`, initgroups, setuid to `uid`
/// (ids from [`user_ids`]). Sockets, mappings and files opened before stay open.
pub fn become_user(name: &str, uid: u32, gid: u32) -> io::Result<()> {
    crate::sys::process::become_user(name, uid, gid)
}

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

/// Sends signal `sig` to process `pid` (one process: never a group or every process).
pub fn signal(pid: u32, sig: i32) -> io::Result<()> {
    crate::sys::process::signal(pid, sig)
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

/// What waiting on an input descriptor found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InputState {
    /// Something can be read.
    Ready,
    /// Nothing came within the wait.
    Idle,
    /// The other end is gone (a hung-up terminal, a closed pipe): reading will never block
    /// again and never give anything.
    Gone,
}

/// Waits up to `timeout` for `fd` to be readable, telling a hangup apart (a terminal library
/// that only asks "readable?" sees a hung-up terminal as ready forever and spins).
pub fn wait_input(
    fd: std::os::fd::BorrowedFd<'_>,
    timeout: std::time::Duration,
) -> io::Result<InputState> {
    use std::os::fd::AsRawFd;
    let mut p = [libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    }];
    let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    if crate::sys::poll::poll(&mut p, ms)? == 0 {
        return Ok(InputState::Idle);
    }
    let r = p[0].revents;
    Ok(
        if r & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
            InputState::Gone
        } else if r & libc::POLLIN != 0 {
            InputState::Ready
        } else {
            InputState::Idle
        },
    )
}

/// Whether `sig` is ignored now (SIG_IGN), as `nohup` leaves SIGHUP for the programs it starts.
pub fn signal_ignored(sig: i32) -> bool {
    crate::sys::signals::signal_ignored(sig)
}

/// Blocks the signals `sigs` on the calling thread: one that comes stays pending until
/// [`unblock_signals`] (installing several handlers of one signal: none is missed).
pub fn block_signals(sigs: &[i32]) {
    crate::sys::signals::block(sigs)
}

/// Unblocks the signals `sigs` on the calling thread (threads it starts later inherit that): a
/// process started with them blocked would otherwise never see them. One that came while they
/// were blocked is delivered now, to its handler.
pub fn unblock_signals(sigs: &[i32]) {
    crate::sys::signals::unblock(sigs)
}

/// Counts every delivery of the signals `sigs` from now on (the first call decides which; later
/// calls do nothing), each one even when two come at once, unlike a flag or signal-hook's
/// iterator, which merge them.
pub fn count_signals(sigs: &[i32]) -> io::Result<()> {
    crate::sys::signals::count_signals(sigs)
}

/// How many signals [`count_signals`] has counted so far.
pub fn signal_count() -> u64 {
    crate::sys::signals::signal_count()
}

/// The MAC address of interface `name` (in the calling thread's network namespace).
pub fn iface_mac(name: &str) -> Result<[u8; 6], crate::port::PortError> {
    crate::port::iface_mac(name)
}

/// The index of interface `name` in the calling thread's network namespace; None when there is
/// no such interface.
pub fn ifindex(name: &str) -> Option<u32> {
    crate::sys::iface::ifindex(name)
}

/// Moves the calling thread into network namespace `name` (`/run/netns/NAME`, as `ip netns`
/// names them); the thread's later sockets and interfaces are the namespace's. A missing name
/// is `NotFound`; a name with a '/' (or `.`, `..`) is `InvalidInput`.
pub fn enter_netns(name: &str) -> io::Result<()> {
    crate::sys::netns::enter(name)
}

pub use crate::sys::packet::PacketSocket;

/// Loads `code` (eBPF instructions, 8 bytes each, GPL) as a tc classifier and attaches it at
/// the tcx egress hook of interface `iface` (calling thread's namespace; kernel 6.6+): every
/// frame leaving the interface runs it until the returned link descriptor is closed. The
/// kernel's verifier checks the program.
pub fn attach_tc_egress(iface: &str, code: &[u8]) -> io::Result<std::os::fd::OwnedFd> {
    let ifindex = ifindex(iface)
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("no interface {iface}")))?;
    crate::port::xdp::sys::attach_tc_egress(ifindex, code)
}

/// Bytes free (for unprivileged users) and the size of the file system holding `path`.
pub fn disk_space(path: &std::path::Path) -> io::Result<(u64, u64)> {
    crate::sys::fs::space(path)
}

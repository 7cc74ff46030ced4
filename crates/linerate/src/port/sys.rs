//! What the kernel ports and the metrics endpoint share: an owned fd, setsockopt, poll.

/// An owned file descriptor, closed on drop.
#[derive(Debug)]
pub(crate) struct Fd(pub(crate) i32);

impl Drop for Fd {
    fn drop(&mut self) {
        // SAFETY: the descriptor is owned by this value and closed once.
        unsafe { libc::close(self.0) };
    }
}

/// setsockopt(fd, level, opt, &val).
pub(crate) fn setopt<T>(fd: &Fd, level: i32, opt: i32, val: &T) -> std::io::Result<()> {
    // SAFETY: `val` points to a live `T` of the size given; the kernel copies it.
    let r = unsafe {
        libc::setsockopt(
            fd.0,
            level,
            opt,
            val as *const T as *const libc::c_void,
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// The effective user id of this process.
pub(crate) fn euid() -> u32 {
    // SAFETY: geteuid takes no arguments and cannot fail.
    unsafe { libc::geteuid() }
}

/// poll(2) on `fds` for up to `ms` milliseconds (-1: no limit); returns how many have events
/// (`revents` set). EINTR counts as none ready.
pub(crate) fn poll(fds: &mut [libc::pollfd], ms: i32) -> std::io::Result<usize> {
    // SAFETY: `fds` is a valid, exclusively borrowed slice of pollfd of the length given.
    let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
    if r < 0 {
        let e = std::io::Error::last_os_error();
        if e.kind() == std::io::ErrorKind::Interrupted {
            return Ok(0);
        }
        return Err(e);
    }
    Ok(r as usize)
}

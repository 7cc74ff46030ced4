//! What the kernel ports share: an owned file descriptor and setsockopt.

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

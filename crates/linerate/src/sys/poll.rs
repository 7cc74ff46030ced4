//! Waiting on descriptors: poll(2) on a few, an epoll set over many (an aggregate of ports, a
//! worker waiting on its input), one descriptor until it is readable.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

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

/// A set of descriptors polled together for readability, through an epoll instance (an
/// aggregate of ports waits on all its members at once, so that no member's traffic waits while
/// another member blocks; the epoll descriptor itself polls readable when a member is, so an
/// aggregate can be polled like any port).
#[derive(Debug)]
pub(crate) struct PollSet {
    ep: OwnedFd,
}

impl PollSet {
    /// A set over `fds`; None if the kernel refuses (no epoll, or a descriptor it cannot poll).
    pub(crate) fn new(fds: &[i32]) -> Option<PollSet> {
        // SAFETY: plain epoll_create1 call; the result is checked.
        let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if ep < 0 {
            return None;
        }
        let set = PollSet {
            // SAFETY: `ep` is a new descriptor that nothing else owns.
            ep: unsafe { OwnedFd::from_raw_fd(ep) },
        };
        for (i, &fd) in fds.iter().enumerate() {
            let mut ev = libc::epoll_event {
                events: libc::EPOLLIN as u32,
                u64: i as u64,
            };
            // SAFETY: `ev` is a valid epoll_event the kernel copies; `fd` is the caller's open
            // descriptor (a failure is reported, not undefined).
            let r =
                unsafe { libc::epoll_ctl(set.ep.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) };
            if r < 0 {
                return None;
            }
        }
        Some(set)
    }

    /// Waits up to `ms` for any descriptor to be readable (or in error, so the next read reports
    /// it); returns whether one is.
    pub(crate) fn wait(&mut self, ms: i32) -> bool {
        let mut ev = libc::epoll_event { events: 0, u64: 0 };
        // SAFETY: room for one event, which the kernel may write.
        let r = unsafe { libc::epoll_wait(self.ep.as_raw_fd(), &mut ev, 1, ms) };
        r > 0
    }

    /// The epoll descriptor (readable when a member is).
    pub(crate) fn fd(&self) -> i32 {
        self.ep.as_raw_fd()
    }
}

/// Waits up to `ms` (-1: without end) for `fd` to be readable or hung up. Returns whether it is
/// (an interrupted wait counts as not ready).
pub(crate) fn poll_readable(fd: i32, ms: i32) -> std::io::Result<bool> {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd that lives across the call.
    let r = unsafe { libc::poll(&mut p, 1, ms) };
    if r < 0 {
        let e = std::io::Error::last_os_error();
        if e.kind() == std::io::ErrorKind::Interrupted {
            return Ok(false);
        }
        return Err(e);
    }
    Ok(r > 0 && p.revents != 0)
}

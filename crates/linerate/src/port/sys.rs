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

pub(crate) use crate::sys::process::euid;

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
    ep: Fd,
}

impl PollSet {
    /// A set over `fds`; None if the kernel refuses (no epoll, or a descriptor it cannot poll).
    pub(crate) fn new(fds: &[i32]) -> Option<PollSet> {
        // SAFETY: plain epoll_create1 call; the result is checked.
        let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if ep < 0 {
            return None;
        }
        let set = PollSet { ep: Fd(ep) };
        for (i, &fd) in fds.iter().enumerate() {
            let mut ev = libc::epoll_event {
                events: libc::EPOLLIN as u32,
                u64: i as u64,
            };
            // SAFETY: `ev` is a valid epoll_event the kernel copies; `fd` is the caller's open
            // descriptor (a failure is reported, not undefined).
            let r = unsafe { libc::epoll_ctl(set.ep.0, libc::EPOLL_CTL_ADD, fd, &mut ev) };
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
        let r = unsafe { libc::epoll_wait(self.ep.0, &mut ev, 1, ms) };
        r > 0
    }

    /// The epoll descriptor (readable when a member is).
    pub(crate) fn fd(&self) -> i32 {
        self.ep.0
    }
}

/// Asks the kernel to queue every error of datagram socket `fd` (ICMP port unreachable, local
/// errors) with the start of the datagram it is about: IP_RECVERR, or IPV6_RECVERR when `v6`.
pub(crate) fn set_recverr(fd: std::os::fd::RawFd, v6: bool) -> std::io::Result<()> {
    let (level, opt) = if v6 {
        (libc::SOL_IPV6, libc::IPV6_RECVERR)
    } else {
        (libc::SOL_IP, libc::IP_RECVERR)
    };
    let on: libc::c_int = 1;
    // SAFETY: `on` is a live c_int of the size given; the kernel copies it.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            opt,
            &on as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Takes one entry of `fd`'s error queue without waiting (see [`set_recverr`]): the error
/// (errno) and how many bytes of the datagram it is about were copied into `buf`. `None` when
/// the queue is empty.
pub(crate) fn recv_err(
    fd: std::os::fd::RawFd,
    buf: &mut [u8],
) -> std::io::Result<Option<(i32, usize)>> {
    // Room for a sock_extended_err and the offender's address, 8-byte aligned.
    let mut control = [0u64; 64];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: msghdr is plain data; all-zero is a valid empty value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
    msg.msg_controllen = std::mem::size_of_val(&control) as _;
    // SAFETY: `msg` points to one iovec over `buf` and to `control`, both live and writable for
    // the lengths given, for the duration of the call.
    let n = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT) };
    if n < 0 {
        let e = std::io::Error::last_os_error();
        return match e.kind() {
            std::io::ErrorKind::WouldBlock => Ok(None),
            std::io::ErrorKind::Interrupted => Ok(None),
            _ => Err(e),
        };
    }
    let mut errno = 0;
    // SAFETY: the CMSG_* walk stays within `msg.msg_control`/`msg_controllen`, which recvmsg
    // set to the part of `control` it filled; each header is checked before its data is read,
    // and the data is read unaligned.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            let (level, ty) = ((*c).cmsg_level, (*c).cmsg_type);
            if (level == libc::SOL_IP && ty == libc::IP_RECVERR)
                || (level == libc::SOL_IPV6 && ty == libc::IPV6_RECVERR)
            {
                let e =
                    std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const libc::sock_extended_err);
                errno = e.ee_errno as i32;
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok(Some((errno, (n as usize).min(buf.len()))))
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

/// Whether `sig` is ignored now (SIG_IGN), as `nohup` leaves SIGHUP for the programs it starts.
pub fn signal_ignored(sig: i32) -> bool {
    // SAFETY: a zeroed sigaction is a valid place for sigaction(2) to write the current one;
    // a null new action only reads.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(sig, std::ptr::null(), &mut old) == 0 && old.sa_sigaction == libc::SIG_IGN
    }
}

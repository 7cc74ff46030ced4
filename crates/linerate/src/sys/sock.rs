//! Sockets: creating one (owned from the moment the kernel returns it), setsockopt, and the
//! error queue of a datagram socket (IP_RECVERR): what the kernel ports and the UDP port share.
//! Descriptors are `std::os::fd::OwnedFd` everywhere in the crate.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// socket(domain, ty | SOCK_CLOEXEC, proto): a new socket, closed when the value drops.
pub(crate) fn socket(domain: i32, ty: i32, proto: i32) -> std::io::Result<OwnedFd> {
    // SAFETY: plain socket(2) call with no pointers; the result is checked below.
    let fd = unsafe { libc::socket(domain, ty | libc::SOCK_CLOEXEC, proto) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned `fd`, a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// setsockopt(fd, level, opt, &val).
pub(crate) fn setopt<T>(fd: &OwnedFd, level: i32, opt: i32, val: &T) -> std::io::Result<()> {
    // SAFETY: `val` points to a live `T` of the size given; the kernel copies it.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
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

/// Bytes the socket's send queue still holds (SIOCOUTQ): for UDP, datagrams not yet gone, such
/// as those waiting for the next hop's address (ARP or neighbour discovery).
pub(crate) fn send_queue(fd: std::os::fd::RawFd) -> std::io::Result<u32> {
    let mut n: libc::c_int = 0;
    // SAFETY: SIOCOUTQ (TIOCOUTQ) writes one int to the pointer given, a live local.
    let r = unsafe { libc::ioctl(fd, libc::TIOCOUTQ, &mut n as *mut libc::c_int) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(n.max(0) as u32)
}

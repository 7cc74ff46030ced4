//! System calls on packet sockets: an owned descriptor, socket options, mappings and errors.

use crate::port::PortError;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

/// What to tell the user about an OS error on `op`.
fn hint(op: &'static str, e: &io::Error) -> &'static str {
    match e.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => " (needs root or CAP_NET_RAW)",
        Some(libc::ENOMEM) if op.contains("RING") || op == "mmap" => {
            " (ring too large: lower the block size or the number of blocks)"
        }
        Some(libc::EINVAL) if op == "PACKET_FANOUT" => {
            " (the fanout group is in use with another mode or interface: pick another id)"
        }
        Some(libc::ENETDOWN) => " (bring the interface up: ip link set IFACE up)",
        Some(libc::EAFNOSUPPORT) => " (the kernel has no AF_PACKET support)",
        _ => "",
    }
}

/// Turns the last OS error of `op` on `iface` into a port error.
pub(super) fn os_err(iface: &str, op: &'static str) -> PortError {
    err_of(iface, op, io::Error::last_os_error())
}

/// Turns an OS error of `op` on `iface` into a port error.
pub(super) fn err_of(iface: &str, op: &'static str, source: io::Error) -> PortError {
    match source.raw_os_error() {
        Some(libc::ENODEV) | Some(libc::ENXIO) => PortError::NoInterface(iface.to_string()),
        _ => PortError::Os {
            iface: iface.to_string(),
            op,
            hint: hint(op, &source).into(),
            source,
        },
    }
}

/// A new packet socket that receives nothing until bound with a protocol: link-layer frames
/// (`cooked` false) or packets with the link header taken off (SOCK_DGRAM).
pub(super) fn packet_socket(iface: &str, cooked: bool) -> Result<OwnedFd, PortError> {
    let ty = if cooked {
        libc::SOCK_DGRAM
    } else {
        libc::SOCK_RAW
    };
    crate::port::sys::socket(libc::AF_PACKET, ty, 0)
        .map_err(|e| err_of(iface, "socket(AF_PACKET)", e))
}

pub(super) use crate::port::sys::setopt;

/// setsockopt at SOL_PACKET, mapped to a port error naming `op`.
pub(super) fn packet_opt<T>(
    fd: &OwnedFd,
    iface: &str,
    opt: i32,
    op: &'static str,
    val: &T,
) -> Result<(), PortError> {
    setopt(fd, libc::SOL_PACKET, opt, val).map_err(|e| err_of(iface, op, e))
}

/// Binds a packet socket to interface `ifindex` for `proto` (host order; 0 = transmit only).
pub(super) fn bind(fd: &OwnedFd, iface: &str, ifindex: i32, proto: u16) -> Result<(), PortError> {
    // SAFETY: sockaddr_ll is plain data; all-zero is a valid value.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = proto.to_be();
    sll.sll_ifindex = ifindex;
    // SAFETY: `sll` is a valid sockaddr_ll of the size given.
    let r = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            &sll as *const libc::sockaddr_ll as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(os_err(iface, "bind"));
    }
    Ok(())
}

/// Maps `len` bytes of the socket's rings (shared with the kernel).
pub(super) fn map_ring(fd: &OwnedFd, iface: &str, len: usize) -> Result<*mut u8, PortError> {
    // SAFETY: a fresh shared mapping of the socket's ring, no address hint; checked below.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(os_err(iface, "mmap"));
    }
    Ok(p as *mut u8)
}

/// The interface's MTU.
pub(super) fn mtu(iface: &str) -> Result<u32, PortError> {
    crate::sys::iface::mtu(iface).map_err(|e| err_of(iface, "SIOCGIFMTU", e))
}

/// The interface's ARPHRD_ hardware type.
pub(super) fn hw_type(iface: &str) -> Result<u16, PortError> {
    crate::sys::iface::hw_addr(iface)
        .map(|(ty, _)| ty)
        .map_err(|e| err_of(iface, "SIOCGIFHWADDR", e))
}

/// Waits up to `ms` for the socket to be readable. Returns whether it is, or the socket's
/// pending error (SO_ERROR, read and so cleared) when poll reports one (POLLERR: ENETDOWN
/// when the interface went down or went away).
pub(super) fn poll_in(fd: &OwnedFd, ms: i32) -> Result<bool, i32> {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN | libc::POLLERR,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let r = unsafe { libc::poll(&mut p, 1, ms) };
    if r > 0 && p.revents & libc::POLLERR != 0 {
        let mut err: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: `err` and `len` are valid for writes of the sizes given.
        let got = unsafe {
            libc::getsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_ERROR,
                (&mut err as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        if got == 0 && err != 0 {
            return Err(err);
        }
    }
    Ok(r > 0)
}

/// Attaches a classic BPF program (laid out as `struct sock_filter`) to the socket.
pub(super) fn attach_bpf(
    fd: &OwnedFd,
    iface: &str,
    prog: &[crate::filter::Insn],
) -> Result<(), PortError> {
    let len = u16::try_from(prog.len()).map_err(|_| PortError::Os {
        iface: iface.to_string(),
        op: "SO_ATTACH_FILTER",
        source: io::Error::from_raw_os_error(libc::EINVAL),
        hint: " (filter program too long)".into(),
    })?;
    let fprog = libc::sock_fprog {
        len,
        // The kernel only reads the program; Insn has the layout of sock_filter.
        filter: prog.as_ptr() as *mut libc::sock_filter,
    };
    setopt(fd, libc::SOL_SOCKET, libc::SO_ATTACH_FILTER, &fprog)
        .map_err(|e| err_of(iface, "SO_ATTACH_FILTER", e))
}

/// Reads (and so resets) the socket's TPACKET_V3 counters.
pub(super) fn packet_stats(fd: &OwnedFd) -> io::Result<libc::tpacket_stats_v3> {
    let mut st = libc::tpacket_stats_v3 {
        tp_packets: 0,
        tp_drops: 0,
        tp_freeze_q_cnt: 0,
    };
    let mut len = std::mem::size_of::<libc::tpacket_stats_v3>() as libc::socklen_t;
    // SAFETY: `st` is writable for `len` bytes; the kernel writes at most that.
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_PACKET,
            libc::PACKET_STATISTICS,
            &mut st as *mut libc::tpacket_stats_v3 as *mut libc::c_void,
            &mut len,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st)
}

//! A plain AF_PACKET socket that sends whole frames one send(2) at a time through the qdisc
//! layer (taps and tc egress programs see them): for tests and tools that put a few crafted
//! frames on a link. The AF_PACKET port (`port/afpacket`) is the fast path and bypasses the qdisc.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

/// A raw packet socket bound to one interface, for sending; closed on drop.
#[derive(Debug)]
pub struct PacketSocket {
    fd: OwnedFd,
}

impl PacketSocket {
    /// A socket bound to interface `iface` (of the calling thread's network namespace) that
    /// receives nothing (protocol 0) and sends frames as given, link header included. A missing
    /// interface is `NotFound`.
    pub fn open(iface: &str) -> io::Result<PacketSocket> {
        let ifindex = super::iface::ifindex(iface)
            .and_then(|i| i32::try_from(i).ok())
            .ok_or_else(|| {
                io::Error::new(io::ErrorKind::NotFound, format!("no interface {iface}"))
            })?;
        let fd = super::sock::socket(libc::AF_PACKET, libc::SOCK_RAW, 0)?;
        // SAFETY: sockaddr_ll is plain data; all-zero is a valid value.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_ifindex = ifindex;
        // SAFETY: `sll` is a live sockaddr_ll of the size given; the kernel only reads it.
        let r = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                &sll as *const libc::sockaddr_ll as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(PacketSocket { fd })
    }

    /// Sends `frame` (link header included) as one packet; returns the bytes sent.
    pub fn send(&self, frame: &[u8]) -> io::Result<usize> {
        // SAFETY: `frame` is a live buffer of the length given; the kernel only reads it.
        let n = unsafe {
            libc::send(
                self.fd.as_raw_fd(),
                frame.as_ptr() as *const libc::c_void,
                frame.len(),
                0,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(n as usize)
    }
}

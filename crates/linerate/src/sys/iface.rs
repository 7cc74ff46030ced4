//! Interfaces by name, in the calling thread's network namespace: their index
//! (if_nametoindex), and what the `SIOCGIF*` ioctls tell (IPv4 address, hardware address and
//! type, flags, MTU), each asked here once through a datagram socket of that namespace.

use std::io;
use std::net::Ipv4Addr;

/// The index of interface `name` in the calling thread's network namespace; None when there is
/// no such interface or `name` cannot be one (empty, too long, a NUL byte).
pub(crate) fn ifindex(name: &str) -> Option<u32> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ {
        return None;
    }
    let c = std::ffi::CString::new(name).ok()?;
    // SAFETY: `c` is a valid NUL-terminated string for the duration of the call; the kernel
    // only reads it.
    let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
    (idx != 0).then_some(idx)
}

/// An `ifreq` naming `name`; ENODEV for a name no interface can have (empty, too long, a NUL
/// byte).
fn ifreq(name: &str) -> io::Result<libc::ifreq> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains('\0') {
        return Err(io::Error::from_raw_os_error(libc::ENODEV));
    }
    // SAFETY: ifreq is plain data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in req.ifr_name.iter_mut().zip(name.bytes()) {
        *d = s as libc::c_char;
    }
    Ok(req)
}

/// Which `SIOCGIF*` query to make: each fills one member of the `ifreq` union.
#[derive(Clone, Copy)]
enum Query {
    /// `SIOCGIFADDR`: `ifru_addr`.
    Addr,
    /// `SIOCGIFHWADDR`: `ifru_hwaddr`.
    HwAddr,
    /// `SIOCGIFFLAGS`: `ifru_flags`.
    Flags,
    /// `SIOCGIFMTU`: `ifru_mtu`.
    Mtu,
}

/// Asks the kernel `q` about interface `name` through a socket of the calling thread's network
/// namespace; the answer is in the union member of `q`.
fn query(name: &str, q: Query) -> io::Result<libc::ifreq> {
    let mut req = ifreq(name)?;
    let fd = super::sock::socket(libc::AF_INET, libc::SOCK_DGRAM, 0)?;
    let op = match q {
        Query::Addr => libc::SIOCGIFADDR,
        Query::HwAddr => libc::SIOCGIFHWADDR,
        Query::Flags => libc::SIOCGIFFLAGS,
        Query::Mtu => libc::SIOCGIFMTU,
    };
    use std::os::fd::AsRawFd;
    // SAFETY: `req` is a live ifreq with a NUL-terminated name (shorter than the zeroed array);
    // each of these requests reads the name and writes one member of the union, inside `req`.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), op, &mut req) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(req)
}

/// The first IPv4 address of interface `name` (SIOCGIFADDR); None when it has none.
pub(crate) fn ipv4_addr(name: &str) -> io::Result<Option<Ipv4Addr>> {
    let req = match query(name, Query::Addr) {
        Ok(r) => r,
        Err(e) if e.raw_os_error() == Some(libc::EADDRNOTAVAIL) => return Ok(None),
        Err(e) => return Err(e),
    };
    // SAFETY: after SIOCGIFADDR the union holds a sockaddr; for AF_INET it is a sockaddr_in,
    // read unaligned from the union's bytes (it fits: the union is larger).
    let sa: libc::sockaddr_in = unsafe {
        std::ptr::read_unaligned(
            &req.ifr_ifru.ifru_addr as *const libc::sockaddr as *const libc::sockaddr_in,
        )
    };
    if i32::from(sa.sin_family) != libc::AF_INET {
        return Ok(None);
    }
    Ok(Some(Ipv4Addr::from(u32::from_be(sa.sin_addr.s_addr))))
}

/// The hardware address of interface `name` and its `ARPHRD_*` type (SIOCGIFHWADDR): the
/// first six bytes of the address (a MAC for Ethernet, zeros for loopback).
pub(crate) fn hw_addr(name: &str) -> io::Result<(u16, [u8; 6])> {
    let req = query(name, Query::HwAddr)?;
    // SAFETY: after SIOCGIFHWADDR the union holds a sockaddr: the type in sa_family, the
    // address at the start of sa_data.
    let sa = unsafe { req.ifr_ifru.ifru_hwaddr };
    let mut m = [0u8; 6];
    for (d, s) in m.iter_mut().zip(sa.sa_data.iter()) {
        *d = *s as u8;
    }
    Ok((sa.sa_family, m))
}

/// The `IFF_*` flags of interface `name` (SIOCGIFFLAGS).
pub(crate) fn flags(name: &str) -> io::Result<i32> {
    let req = query(name, Query::Flags)?;
    // SAFETY: after SIOCGIFFLAGS the union holds the flags.
    let f = unsafe { req.ifr_ifru.ifru_flags };
    Ok(i32::from(f) & 0xffff)
}

/// The MTU of interface `name` (SIOCGIFMTU).
pub(crate) fn mtu(name: &str) -> io::Result<u32> {
    let req = query(name, Query::Mtu)?;
    // SAFETY: after SIOCGIFMTU the union holds the MTU.
    let m = unsafe { req.ifr_ifru.ifru_mtu };
    Ok(m.max(0) as u32)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn names_that_cannot_be_interfaces_have_no_index() {
        for n in ["", "a\0b", "sixteen-bytes-ab", "lr-no-such-if"] {
            assert_eq!(ifindex(n), None, "{n:?}");
        }
        assert!(ifindex("lo").is_some_and(|i| i > 0));
    }

    #[test]
    fn loopback_answers_every_query_and_bad_names_none() {
        assert_eq!(ipv4_addr("lo").unwrap(), Some(Ipv4Addr::LOCALHOST));
        assert_eq!(hw_addr("lo").unwrap(), (libc::ARPHRD_LOOPBACK, [0u8; 6]));
        assert!(flags("lo").unwrap() & libc::IFF_LOOPBACK != 0);
        assert!(mtu("lo").unwrap() >= 1280);
        for n in ["", "a\0b", "sixteen-bytes-ab", "lr-no-such-if"] {
            assert_eq!(
                mtu(n).unwrap_err().raw_os_error(),
                Some(libc::ENODEV),
                "{n:?}"
            );
            assert!(ipv4_addr(n).is_err() && hw_addr(n).is_err() && flags(n).is_err());
        }
    }
}

//! UDP sockets for `linerate sweep` (netperf's UDP_STREAM through the kernel's UDP stack): a
//! connected sender that hands the kernel a batch of datagrams per `sendmmsg(2)`, a receiver
//! that takes a batch per `recvmmsg(2)` (with MSG_TRUNC: only the first bytes are copied, the
//! length is the datagram's), socket buffer sizes asked and granted, the datagrams a socket
//! dropped (SO_MEMINFO), and an interface's IPv4 address, MAC, loopback flag and MTU (asked
//! of the system layer, `sys/iface.rs`).

use super::sys::setopt;
use std::io;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::{AsRawFd, OwnedFd};

/// Largest UDP payload over IPv4 (65535 less the IP and UDP headers).
pub const MAX_UDP_PAYLOAD: usize = 65_507;
/// Most datagrams per sendmmsg/recvmmsg call (the kernel's UIO_MAXIOV).
pub const MAX_BATCH: usize = 1024;
/// Bytes of each received datagram copied out (enough for a tag at its start).
pub const RX_COPY: usize = 64;

fn sockaddr(a: SocketAddrV4) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: a.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(*a.ip()).to_be(),
        },
        sin_zero: [0; 8],
    }
}

fn udp_socket() -> io::Result<OwnedFd> {
    super::sys::socket(libc::AF_INET, libc::SOCK_DGRAM, 0)
}

/// The IPv4 address a socket is bound to (getsockname).
fn sock_name(fd: &OwnedFd) -> io::Result<SocketAddrV4> {
    // SAFETY: sockaddr_in is plain data; all-zero is a valid value.
    let mut sa: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: `sa` and `len` are live and writable; the kernel writes at most `len` bytes.
    let r = unsafe {
        libc::getsockname(
            fd.as_raw_fd(),
            &mut sa as *mut libc::sockaddr_in as *mut libc::sockaddr,
            &mut len,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(SocketAddrV4::new(
        Ipv4Addr::from(u32::from_be(sa.sin_addr.s_addr)),
        u16::from_be(sa.sin_port),
    ))
}

fn getopt_int(fd: &OwnedFd, level: i32, opt: i32) -> io::Result<i32> {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `v` and `len` are live and writable; the kernel writes at most `len` bytes.
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            opt,
            &mut v as *mut libc::c_int as *mut libc::c_void,
            &mut len,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(v)
    }
}

/// Sets a socket buffer (`SO_SNDBUF`/`SO_RCVBUF`) to `bytes`: through the FORCE option first
/// (root may go beyond net.core.[rw]mem_max), else the plain one (capped by the sysctl). The
/// kernel doubles the value for its bookkeeping; what it granted is read back by the caller.
fn set_buf(fd: &OwnedFd, force: i32, plain: i32, bytes: usize) -> io::Result<()> {
    let v = bytes.min(i32::MAX as usize / 2) as libc::c_int;
    if setopt(fd, libc::SOL_SOCKET, force, &v).is_ok() {
        return Ok(());
    }
    setopt(fd, libc::SOL_SOCKET, plain, &v)
}

/// The datagrams the kernel dropped on this socket since it was made (a full receive buffer,
/// a checksum error): `SK_MEMINFO_DROPS` of SO_MEMINFO.
fn socket_drops(fd: &OwnedFd) -> io::Result<u64> {
    let mut v = [0u32; 16];
    let mut len = std::mem::size_of_val(&v) as libc::socklen_t;
    // SAFETY: `v` holds `len` writable bytes; the kernel writes at most that many.
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_MEMINFO,
            v.as_mut_ptr() as *mut libc::c_void,
            &mut len,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    // SK_MEMINFO_DROPS is the ninth value (kernel 4.12 and later).
    if (len as usize) < 9 * 4 {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "SO_MEMINFO has no drop counter on this kernel",
        ));
    }
    Ok(u64::from(v[8]))
}

/// A UDP socket connected to one receiver, sending batches of equal datagrams.
#[derive(Debug)]
pub struct UdpSender {
    fd: OwnedFd,
    payload: Vec<u8>,
}

impl UdpSender {
    /// A socket connected to `dst`, its send buffer set to `sndbuf` bytes when given. Local
    /// errors (a full queue: ENOBUFS) and ICMP errors are reported by the sending call
    /// (IP_RECVERR), not hidden.
    pub fn connect(dst: SocketAddrV4, sndbuf: Option<usize>) -> io::Result<UdpSender> {
        let fd = udp_socket()?;
        if let Some(b) = sndbuf {
            set_buf(&fd, libc::SO_SNDBUFFORCE, libc::SO_SNDBUF, b)?;
        }
        super::sys::set_recverr(fd.as_raw_fd(), false)?;
        let sa = sockaddr(dst);
        // SAFETY: `sa` is a live sockaddr_in of the size given.
        let r = unsafe {
            libc::connect(
                fd.as_raw_fd(),
                &sa as *const libc::sockaddr_in as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(UdpSender {
            fd,
            payload: vec![0; MAX_UDP_PAYLOAD],
        })
    }

    /// The send buffer the kernel granted (bytes, as `getsockopt(SO_SNDBUF)` says).
    pub fn sndbuf(&self) -> io::Result<usize> {
        Ok(getopt_int(&self.fd, libc::SOL_SOCKET, libc::SO_SNDBUF)? as usize)
    }

    /// The local address (the source of the datagrams).
    pub fn local_addr(&self) -> io::Result<SocketAddrV4> {
        sock_name(&self.fd)
    }

    /// Writes `head` at the start of every datagram sent from now on (the rest is zero).
    pub fn set_head(&mut self, head: &[u8]) {
        let n = head.len().min(self.payload.len());
        self.payload[..n].copy_from_slice(&head[..n]);
    }

    /// Sends `n` (1..=[`MAX_BATCH`]) datagrams of `len` bytes (at most [`MAX_UDP_PAYLOAD`]) in
    /// one sendmmsg call. Returns how many the kernel took (from the first; fewer than `n` when
    /// it refused one: the next call reports why), or the error that refused the first.
    pub fn send(&mut self, n: usize, len: usize) -> io::Result<usize> {
        let n = n.clamp(1, MAX_BATCH);
        let len = len.min(MAX_UDP_PAYLOAD);
        let mut iov = libc::iovec {
            iov_base: self.payload.as_mut_ptr() as *mut libc::c_void,
            iov_len: len,
        };
        // SAFETY: mmsghdr is plain data; all-zero is a valid empty value.
        let mut msgs: [libc::mmsghdr; 64] = unsafe { std::mem::zeroed() };
        let mut sent = 0;
        while sent < n {
            let k = (n - sent).min(msgs.len());
            for m in msgs.iter_mut().take(k) {
                m.msg_hdr.msg_iov = &mut iov;
                m.msg_hdr.msg_iovlen = 1;
            }
            // SAFETY: `msgs[..k]` are valid headers, each pointing to the one iovec over
            // `self.payload` (live, at least `len` bytes); the kernel only reads the payload.
            let r = unsafe { libc::sendmmsg(self.fd.as_raw_fd(), msgs.as_mut_ptr(), k as u32, 0) };
            if r < 0 {
                let e = io::Error::last_os_error();
                if sent > 0 {
                    return Ok(sent);
                }
                return Err(e);
            }
            sent += r as usize;
            if (r as usize) < k {
                break;
            }
        }
        Ok(sent)
    }

    /// Empties the socket's error queue (errors already reported by [`UdpSender::send`]); returns
    /// how many entries it held.
    pub fn clear_errors(&self) -> usize {
        let mut buf = [0u8; 64];
        let mut n = 0;
        while let Ok(Some(_)) = super::sys::recv_err(self.fd.as_raw_fd(), &mut buf) {
            n += 1;
            if n > 100_000 {
                break;
            }
        }
        n
    }
}

/// A UDP socket bound to one address and port, receiving in batches.
#[derive(Debug)]
pub struct UdpReceiver {
    fd: OwnedFd,
}

/// Buffers for [`UdpReceiver::recv`]: the first [`RX_COPY`] bytes of up to 64 datagrams.
pub type RxBufs = [[u8; RX_COPY]; 64];

impl UdpReceiver {
    /// A socket bound to `addr` (port 0: one the kernel picks), its receive buffer set to
    /// `rcvbuf` bytes when given; each receive call waits at most `wait_ms` (1..=10000).
    pub fn bind(addr: SocketAddrV4, rcvbuf: Option<usize>, wait_ms: u32) -> io::Result<Self> {
        let fd = udp_socket()?;
        // No SO_REUSEADDR: on Linux it would let another socket, of any user, bind the same
        // address and port and take the datagrams (a fake 100 % loss); a second bind fails.
        if let Some(b) = rcvbuf {
            set_buf(&fd, libc::SO_RCVBUFFORCE, libc::SO_RCVBUF, b)?;
        }
        let ms = wait_ms.clamp(1, 10_000);
        let tv = libc::timeval {
            tv_sec: (ms / 1000) as libc::time_t,
            tv_usec: ((ms % 1000) * 1000) as libc::suseconds_t,
        };
        setopt(&fd, libc::SOL_SOCKET, libc::SO_RCVTIMEO, &tv)?;
        let sa = sockaddr(addr);
        // SAFETY: `sa` is a live sockaddr_in of the size given.
        let r = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                &sa as *const libc::sockaddr_in as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(UdpReceiver { fd })
    }

    /// Sets the receive buffer now (see [`UdpReceiver::bind`]).
    pub fn set_rcvbuf(&self, bytes: usize) -> io::Result<()> {
        set_buf(&self.fd, libc::SO_RCVBUFFORCE, libc::SO_RCVBUF, bytes)
    }

    /// The receive buffer the kernel granted (bytes, as `getsockopt(SO_RCVBUF)` says).
    pub fn rcvbuf(&self) -> io::Result<usize> {
        Ok(getopt_int(&self.fd, libc::SOL_SOCKET, libc::SO_RCVBUF)? as usize)
    }

    /// Datagrams the kernel dropped on this socket since it was made (receive buffer full).
    pub fn drops(&self) -> io::Result<u64> {
        socket_drops(&self.fd)
    }

    /// The bound address.
    pub fn local_addr(&self) -> io::Result<SocketAddrV4> {
        sock_name(&self.fd)
    }

    /// Receives up to 64 datagrams in one recvmmsg call, waiting for the first at most the
    /// socket's wait. For each, `f(length, first bytes)` (the length is the datagram's, even
    /// beyond the [`RX_COPY`] bytes copied). Returns how many; 0 when none came in time.
    pub fn recv(&self, bufs: &mut RxBufs, mut f: impl FnMut(usize, &[u8])) -> io::Result<usize> {
        let k = bufs.len();
        // SAFETY: iovec and mmsghdr are plain data; all-zero are valid empty values.
        let mut iovs: [libc::iovec; 64] = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut msgs: [libc::mmsghdr; 64] = unsafe { std::mem::zeroed() };
        for i in 0..k {
            iovs[i].iov_base = bufs[i].as_mut_ptr() as *mut libc::c_void;
            iovs[i].iov_len = RX_COPY;
            msgs[i].msg_hdr.msg_iov = &mut iovs[i];
            msgs[i].msg_hdr.msg_iovlen = 1;
        }
        // SAFETY: `msgs[..k]` each point to one iovec over a live, writable RX_COPY-byte
        // buffer of `bufs`; no timeout pointer (the socket's SO_RCVTIMEO bounds the wait).
        let r = unsafe {
            libc::recvmmsg(
                self.fd.as_raw_fd(),
                msgs.as_mut_ptr(),
                k as u32,
                libc::MSG_WAITFORONE | libc::MSG_TRUNC,
                std::ptr::null_mut(),
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(0),
                _ => Err(e),
            };
        }
        let r = r as usize;
        for i in 0..r {
            let len = msgs[i].msg_len as usize;
            f(len, &bufs[i][..len.min(RX_COPY)]);
        }
        Ok(r)
    }
}

/// `iface` as an interface name, or InvalidInput naming it.
fn iface_name(iface: &str) -> io::Result<&str> {
    if iface.is_empty() || iface.len() >= libc::IFNAMSIZ || iface.contains('\0') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("'{iface}' is not an interface name"),
        ));
    }
    Ok(iface)
}

/// The first IPv4 address of interface `iface` in the calling thread's network namespace
/// (SIOCGIFADDR). `Ok(None)` when it has none.
pub fn ipv4_of(iface: &str) -> io::Result<Option<Ipv4Addr>> {
    crate::sys::iface::ipv4_addr(iface_name(iface)?)
}

/// The hardware address of interface `iface` in the calling thread's network namespace
/// (SIOCGIFHWADDR).
pub fn mac_of(iface: &str) -> io::Result<[u8; 6]> {
    crate::sys::iface::hw_addr(iface_name(iface)?).map(|(_, mac)| mac)
}

/// What [`link_of`] tells of an interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkInfo {
    /// A loopback interface (IFF_LOOPBACK).
    pub loopback: bool,
    /// Its MTU (bytes of the IP packet a frame carries).
    pub mtu: u32,
}

/// Whether interface `iface` (in the calling thread's network namespace) is a loopback, and
/// its MTU (SIOCGIFFLAGS, SIOCGIFMTU).
pub fn link_of(iface: &str) -> io::Result<LinkInfo> {
    let iface = iface_name(iface)?;
    Ok(LinkInfo {
        loopback: crate::sys::iface::flags(iface)? & libc::IFF_LOOPBACK != 0,
        mtu: crate::sys::iface::mtu(iface)?,
    })
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn nobody_else_can_bind_the_receivers_port() {
        // Another socket asking for SO_REUSEADDR must not share the receiver's address (it would
        // take its datagrams): the receiver does not set it, so the second bind fails.
        let r = UdpReceiver::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0), None, 10).unwrap();
        let at = r.local_addr().unwrap();
        let fd = udp_socket().unwrap();
        let on: libc::c_int = 1;
        setopt(&fd, libc::SOL_SOCKET, libc::SO_REUSEADDR, &on).unwrap();
        let sa = sockaddr(at);
        // SAFETY: `sa` is a valid sockaddr_in of the size given.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                &sa as *const libc::sockaddr_in as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_in>() as u32,
            )
        };
        assert_eq!(rc, -1, "a second socket bound the receiver's port");
        assert_eq!(
            io::Error::last_os_error().raw_os_error(),
            Some(libc::EADDRINUSE)
        );
    }

    #[test]
    fn loopback_batches_arrive_with_their_lengths_and_drops_are_counted() {
        let rx = UdpReceiver::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0), None, 200).unwrap();
        let mut bufs: RxBufs = [[0; RX_COPY]; 64];
        let dst = rx.local_addr().unwrap();
        let mut tx = UdpSender::connect(dst, None).unwrap();
        tx.set_head(b"LRSW");
        assert_eq!(tx.send(10, 1000).unwrap(), 10);
        let mut got = Vec::new();
        while got.len() < 10 {
            let n = rx
                .recv(&mut bufs, |len, head| got.push((len, head[..4].to_vec())))
                .unwrap();
            assert!(n > 0, "datagrams lost on loopback");
        }
        assert!(got.iter().all(|(l, h)| *l == 1000 && h == b"LRSW"));
        assert_eq!(rx.drops().unwrap(), 0);
        // A tiny receive buffer drops what does not fit, and says so.
        rx.set_rcvbuf(1).unwrap();
        assert!(rx.rcvbuf().unwrap() < 10_000);
        let mut sent = 0;
        for _ in 0..20 {
            sent += tx.send(64, 1400).unwrap();
        }
        let mut n = 0;
        loop {
            let k = rx.recv(&mut bufs, |_, _| {}).unwrap();
            if k == 0 {
                break;
            }
            n += k;
        }
        let drops = rx.drops().unwrap();
        assert!(drops > 0, "no drops with a tiny buffer");
        assert_eq!(n as u64 + drops, sent as u64);
        assert_eq!(ipv4_of("lo").unwrap(), Some(Ipv4Addr::LOCALHOST));
        assert!(ipv4_of("lr-no-such-if").is_err());
        assert_eq!(mac_of("lo").unwrap(), [0; 6]);
    }
}

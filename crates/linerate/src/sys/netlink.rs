//! rtnetlink: one route netlink socket for the crate (link counters and queueing disciplines
//! for `linerate watch`, queue counts, XDP attach, query and removal, veth peers), with its
//! sequence numbers, replies read whole (a larger one is an error, never cut), error replies
//! turned into `io::Error`, and dumps read to `NLMSG_DONE`; and the byte work every request
//! shares (header, `ifinfomsg`, attributes, the attribute walk). What each request asks and how
//! its answer is read stays with the caller.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

/// Flag of a nested attribute's type.
pub(crate) const NLA_F_NESTED: u16 = 1 << 15;
/// Length of `struct nlmsghdr`.
pub(crate) const NLMSG_HDRLEN: usize = 16;
/// Largest reply read at once (a dump part is at most a page or two; a link with many VFs
/// can be larger, and a larger one is reported as truncated, never cut silently).
const RECV_BUF: usize = 1 << 16;

/// A route netlink socket, in the network namespace of the thread that opened it; it stays
/// there whatever that thread does later, so one socket per namespace serves every query.
#[derive(Debug)]
pub(crate) struct Netlink {
    fd: OwnedFd,
    seq: std::sync::atomic::AtomicU32,
}

impl Netlink {
    /// A new socket in the calling thread's network namespace, with a one-second receive
    /// timeout (a kernel that never answers cannot hang the caller).
    pub(crate) fn open() -> io::Result<Netlink> {
        let fd = super::sock::socket(libc::AF_NETLINK, libc::SOCK_RAW, libc::NETLINK_ROUTE)?;
        let tv = libc::timeval {
            tv_sec: 1,
            tv_usec: 0,
        };
        super::sock::setopt(&fd, libc::SOL_SOCKET, libc::SO_RCVTIMEO, &tv)?;
        Ok(Netlink {
            fd,
            seq: std::sync::atomic::AtomicU32::new(1),
        })
    }

    /// The next sequence number, written into `msg` (which starts with a header).
    fn stamp(&self, msg: &mut [u8]) -> u32 {
        let s = self
            .seq
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            .wrapping_add(1)
            .max(1);
        if msg.len() >= NLMSG_HDRLEN {
            msg[8..12].copy_from_slice(&s.to_ne_bytes());
        }
        s
    }

    fn send(&self, msg: &[u8]) -> io::Result<()> {
        // SAFETY: `msg` is a readable buffer of its length.
        let r = unsafe {
            libc::send(
                self.fd.as_raw_fd(),
                msg.as_ptr() as *const libc::c_void,
                msg.len(),
                0,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Reads one datagram into `buf` (resized to what came); a datagram larger than the buffer
    /// is an error, not a silent cut.
    fn recv(&self, buf: &mut Vec<u8>) -> io::Result<()> {
        buf.resize(RECV_BUF, 0);
        loop {
            // SAFETY: `buf` is writable for its length.
            let n = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr() as *mut libc::c_void,
                    buf.len(),
                    libc::MSG_TRUNC,
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                if e.kind() == io::ErrorKind::WouldBlock {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the kernel did not answer a netlink request within 1 s",
                    ));
                }
                return Err(e);
            }
            let n = n as usize;
            if n > buf.len() {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("netlink reply of {n} bytes is larger than {RECV_BUF}"),
                ));
            }
            buf.truncate(n);
            return Ok(());
        }
    }

    /// Sends one request and returns the first reply message of its sequence number (an error
    /// reply becomes Err).
    pub(crate) fn request(&self, msg: &[u8]) -> io::Result<Vec<u8>> {
        let mut msg = msg.to_vec();
        let seq = self.stamp(&mut msg);
        self.send(&msg)?;
        let mut buf = Vec::new();
        loop {
            self.recv(&mut buf)?;
            let mut found = None;
            for_each_msg(&buf, |ty, s, m| {
                if s == seq && found.is_none() {
                    found = Some((ty, m.to_vec()));
                }
            });
            let Some((ty, m)) = found else {
                continue; // a stale reply of an earlier request: skip it
            };
            if ty == libc::NLMSG_ERROR as u16 {
                let code = m
                    .get(NLMSG_HDRLEN..NLMSG_HDRLEN + 4)
                    .map(|b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
                    .unwrap_or(0);
                if code != 0 {
                    return Err(io::Error::from_raw_os_error(-code));
                }
            }
            return Ok(m);
        }
    }

    /// Sends a dump request (`NLM_F_DUMP` is added) and calls `f(type, message)` for every
    /// message of the answer until `NLMSG_DONE`.
    pub(crate) fn dump(&self, msg: &[u8], mut f: impl FnMut(u16, &[u8])) -> io::Result<()> {
        let mut msg = msg.to_vec();
        if msg.len() >= NLMSG_HDRLEN {
            let flags = u16::from_ne_bytes([msg[6], msg[7]]) | libc::NLM_F_DUMP as u16;
            msg[6..8].copy_from_slice(&flags.to_ne_bytes());
        }
        let seq = self.stamp(&mut msg);
        self.send(&msg)?;
        let mut buf = Vec::new();
        loop {
            self.recv(&mut buf)?;
            let mut done = false;
            let mut err = 0;
            for_each_msg(&buf, |ty, s, m| {
                if s != seq || done {
                    return;
                }
                if ty == libc::NLMSG_DONE as u16 {
                    done = true;
                } else if ty == libc::NLMSG_ERROR as u16 {
                    err = m
                        .get(NLMSG_HDRLEN..NLMSG_HDRLEN + 4)
                        .map(|b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
                        .unwrap_or(0);
                    done = true;
                } else {
                    f(ty, m);
                }
            });
            if err != 0 {
                return Err(io::Error::from_raw_os_error(-err));
            }
            if done {
                return Ok(());
            }
        }
    }
}

/// Calls `f(type, seq, message)` for each whole message in a datagram.
pub(crate) fn for_each_msg(mut b: &[u8], mut f: impl FnMut(u16, u32, &[u8])) {
    while b.len() >= NLMSG_HDRLEN {
        let len = u32::from_ne_bytes([b[0], b[1], b[2], b[3]]) as usize;
        if len < NLMSG_HDRLEN || len > b.len() {
            return;
        }
        let ty = u16::from_ne_bytes([b[4], b[5]]);
        let seq = u32::from_ne_bytes([b[8], b[9], b[10], b[11]]);
        f(ty, seq, &b[..len]);
        b = b.get(len.div_ceil(4) * 4..).unwrap_or(&[]);
    }
}

/// Starts a message of type `ty` with `flags` (length patched by [`nl_finish`]).
pub(crate) fn nl_header(buf: &mut Vec<u8>, ty: u16, flags: u16) {
    buf.extend_from_slice(&0u32.to_ne_bytes()); // length, patched at the end
    buf.extend_from_slice(&ty.to_ne_bytes());
    buf.extend_from_slice(&flags.to_ne_bytes());
    buf.extend_from_slice(&1u32.to_ne_bytes()); // seq (set when sent)
    buf.extend_from_slice(&0u32.to_ne_bytes()); // pid
}

/// Appends a `struct ifinfomsg` for interface `ifindex` (0: by name or all).
pub(crate) fn ifinfomsg(buf: &mut Vec<u8>, ifindex: u32) {
    buf.push(libc::AF_UNSPEC as u8);
    buf.push(0);
    buf.extend_from_slice(&0u16.to_ne_bytes()); // type
    buf.extend_from_slice(&(ifindex as i32).to_ne_bytes());
    buf.extend_from_slice(&0u32.to_ne_bytes()); // flags
    buf.extend_from_slice(&0u32.to_ne_bytes()); // change
}

/// Appends attribute `ty` with payload `p`, padded to 4 bytes.
pub(crate) fn nl_attr(buf: &mut Vec<u8>, ty: u16, p: &[u8]) {
    buf.extend_from_slice(&((4 + p.len()) as u16).to_ne_bytes());
    buf.extend_from_slice(&ty.to_ne_bytes());
    buf.extend_from_slice(p);
    while !buf.len().is_multiple_of(4) {
        buf.push(0);
    }
}

/// Patches the message length.
pub(crate) fn nl_finish(buf: &mut [u8]) {
    let len = buf.len() as u32;
    buf[..4].copy_from_slice(&len.to_ne_bytes());
}

/// Walks netlink attributes in `b`, calling `f(type, payload)`; stops at a malformed one.
pub(crate) fn attrs(mut b: &[u8], mut f: impl FnMut(u16, &[u8])) {
    while b.len() >= 4 {
        let len = u16::from_ne_bytes([b[0], b[1]]) as usize;
        let ty = u16::from_ne_bytes([b[2], b[3]]) & !NLA_F_NESTED;
        if len < 4 || len > b.len() {
            return;
        }
        f(ty, &b[4..len]);
        let step = len.div_ceil(4) * 4;
        b = b.get(step..).unwrap_or(&[]);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn attribute_walk_stops_on_malformed_input() {
        let mut seen = Vec::new();
        attrs(&[8, 0, 1, 0, 1, 2, 3, 4, 200, 0, 2, 0], |t, p| {
            seen.push((t, p.to_vec()))
        });
        assert_eq!(seen, vec![(1, vec![1, 2, 3, 4])]);
        attrs(&[0, 0, 0, 0, 1], |_, _| {
            panic!("zero-length attribute must stop the walk")
        });
    }

    #[test]
    fn a_request_is_answered_in_the_callers_namespace() {
        // RTM_GETLINK of the loopback device (index 1 in every namespace), and an error reply
        // for an index no device has.
        let nl = Netlink::open().unwrap();
        let mut m = Vec::new();
        nl_header(&mut m, libc::RTM_GETLINK, libc::NLM_F_REQUEST as u16);
        ifinfomsg(&mut m, 1);
        nl_finish(&mut m);
        let reply = nl.request(&m).unwrap();
        assert_eq!(u16::from_ne_bytes([reply[4], reply[5]]), libc::RTM_NEWLINK);
        let mut m = Vec::new();
        nl_header(&mut m, libc::RTM_GETLINK, libc::NLM_F_REQUEST as u16);
        ifinfomsg(&mut m, i32::MAX as u32);
        nl_finish(&mut m);
        assert_eq!(
            nl.request(&m).unwrap_err().raw_os_error(),
            Some(libc::ENODEV)
        );
    }
}

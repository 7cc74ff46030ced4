//! rtnetlink: a route netlink socket (in the network namespace of the thread that opened it),
//! message building, attribute walks, and the two queries `linerate watch` makes of every hop:
//! an interface's link (`RTM_GETLINK`: name, index, peer, kind, counters `IFLA_STATS64`) and its
//! queueing disciplines (`RTM_GETQDISC`: `TCA_STATS2` packets, drops, backlog).

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

/// Flag of a nested attribute's type.
pub(crate) const NLA_F_NESTED: u16 = 1 << 15;
/// Length of `struct nlmsghdr`.
const NLMSG_HDRLEN: usize = 16;
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
        let fd = super::socket(libc::AF_NETLINK, libc::SOCK_RAW, libc::NETLINK_ROUTE)?;
        let tv = libc::timeval {
            tv_sec: 1,
            tv_usec: 0,
        };
        super::setopt(&fd, libc::SOL_SOCKET, libc::SO_RCVTIMEO, &tv)?;
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
fn for_each_msg(mut b: &[u8], mut f: impl FnMut(u16, u32, &[u8])) {
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

fn u32_of(p: &[u8]) -> Option<u32> {
    Some(u32::from_ne_bytes(p.get(..4)?.try_into().ok()?))
}

fn cstring(p: &[u8]) -> String {
    let end = p.iter().position(|&b| b == 0).unwrap_or(p.len());
    String::from_utf8_lossy(&p[..end]).into_owned()
}

const IFLA_IFNAME: u16 = 3;
const IFLA_MTU: u16 = 4;
const IFLA_LINK: u16 = 5;
const IFLA_STATS64: u16 = 23;
const IFLA_LINKINFO: u16 = 18;
const IFLA_INFO_KIND: u16 = 1;
const IFLA_XDP: u16 = 43;
const IFLA_XDP_ATTACHED: u16 = 2;
const IFLA_OPERSTATE: u16 = 16;

/// The fields of `struct rtnl_link_stats64`, in order.
pub(crate) const STATS64_NAMES: [&str; 25] = [
    "rx_packets",
    "tx_packets",
    "rx_bytes",
    "tx_bytes",
    "rx_errors",
    "tx_errors",
    "rx_dropped",
    "tx_dropped",
    "multicast",
    "collisions",
    "rx_length_errors",
    "rx_over_errors",
    "rx_crc_errors",
    "rx_frame_errors",
    "rx_fifo_errors",
    "rx_missed_errors",
    "tx_aborted_errors",
    "tx_carrier_errors",
    "tx_fifo_errors",
    "tx_heartbeat_errors",
    "tx_window_errors",
    "rx_compressed",
    "tx_compressed",
    "rx_nohandler",
    "rx_otherhost_dropped",
];

/// What `RTM_GETLINK` says about one interface.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Link {
    /// Interface index (in its namespace).
    pub ifindex: u32,
    /// Name.
    pub name: String,
    /// `IFLA_LINK`: the peer's index (a veth's other end, in the peer's namespace), if any.
    pub link: Option<u32>,
    /// `IFLA_INFO_KIND` ("veth", "bridge", ...), if the device has one.
    pub kind: Option<String>,
    /// MTU.
    pub mtu: u32,
    /// `IF_OPER_*` (6 = up).
    pub operstate: u8,
    /// `XDP_ATTACHED_*` (0 = no XDP program).
    pub xdp: u8,
    /// `struct rtnl_link_stats64`, as many fields as the kernel sent (see [`STATS64_NAMES`]).
    pub stats: Vec<u64>,
}

/// Parses an `RTM_NEWLINK` message (header included).
pub(crate) fn parse_link(m: &[u8]) -> Option<Link> {
    let body = m.get(NLMSG_HDRLEN..)?;
    let ifindex = i32::from_ne_bytes(body.get(4..8)?.try_into().ok()?) as u32;
    let mut l = Link {
        ifindex,
        ..Default::default()
    };
    attrs(body.get(16..)?, |ty, p| match ty {
        IFLA_IFNAME => l.name = cstring(p),
        IFLA_MTU => l.mtu = u32_of(p).unwrap_or(0),
        IFLA_LINK => l.link = u32_of(p),
        IFLA_OPERSTATE => l.operstate = p.first().copied().unwrap_or(0),
        IFLA_STATS64 => {
            l.stats = p
                .chunks_exact(8)
                .take(STATS64_NAMES.len())
                .map(|c| u64::from_ne_bytes(c.try_into().unwrap_or([0; 8])))
                .collect();
        }
        IFLA_LINKINFO => attrs(p, |t, v| {
            if t == IFLA_INFO_KIND {
                l.kind = Some(cstring(v));
            }
        }),
        IFLA_XDP => attrs(p, |t, v| {
            if t == IFLA_XDP_ATTACHED {
                l.xdp = v.first().copied().unwrap_or(0);
            }
        }),
        _ => {}
    });
    Some(l)
}

/// The link `ifindex`, or (with `ifindex` 0) the one called `name`, in the socket's namespace.
/// ENODEV when there is none.
pub(crate) fn get_link(nl: &Netlink, ifindex: u32, name: &str) -> io::Result<Link> {
    let mut m = Vec::with_capacity(64);
    nl_header(&mut m, libc::RTM_GETLINK, libc::NLM_F_REQUEST as u16);
    ifinfomsg(&mut m, ifindex);
    if ifindex == 0 {
        if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains('\0') {
            return Err(io::Error::from_raw_os_error(libc::ENODEV));
        }
        let mut n = name.as_bytes().to_vec();
        n.push(0);
        nl_attr(&mut m, IFLA_IFNAME, &n);
    }
    nl_finish(&mut m);
    let reply = nl.request(&m)?;
    parse_link(&reply)
        .filter(|l| l.ifindex != 0)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "malformed RTM_NEWLINK"))
}

const TCA_KIND: u16 = 1;
const TCA_STATS2: u16 = 7;
const TCA_STATS_BASIC: u16 = 1;
const TCA_STATS_QUEUE: u16 = 3;
/// `TC_H_ROOT`: the parent of a device's root (egress) qdisc.
pub(crate) const TC_H_ROOT: u32 = 0xffff_ffff;
/// `TC_H_INGRESS`: the parent of its ingress (or clsact) qdisc.
pub(crate) const TC_H_INGRESS: u32 = 0xffff_fff1;

/// One queueing discipline's counters (`TCA_STATS2`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Qdisc {
    /// Kind ("noqueue", "fq_codel", "mq", "clsact", ...).
    pub kind: String,
    /// Handle.
    pub handle: u32,
    /// Parent ([`TC_H_ROOT`] for the root, [`TC_H_INGRESS`] for ingress/clsact).
    pub parent: u32,
    /// Packets it passed (`gnet_stats_basic`, 32 bits in the kernel's structure).
    pub packets: u32,
    /// Bytes it passed.
    pub bytes: u64,
    /// Packets queued now.
    pub qlen: u32,
    /// Bytes queued now.
    pub backlog: u32,
    /// Packets dropped (32 bits: wraps).
    pub drops: u32,
    /// Packets requeued.
    pub requeues: u32,
    /// Times it was over its limit.
    pub overlimits: u32,
}

/// Parses an `RTM_NEWQDISC` message; returns its interface index and counters.
pub(crate) fn parse_qdisc(m: &[u8]) -> Option<(u32, Qdisc)> {
    // struct tcmsg: family u8, pad u8, pad u16, ifindex i32, handle u32, parent u32, info u32.
    let body = m.get(NLMSG_HDRLEN..)?;
    let ifindex = i32::from_ne_bytes(body.get(4..8)?.try_into().ok()?) as u32;
    let mut q = Qdisc {
        handle: u32_of(body.get(8..)?)?,
        parent: u32_of(body.get(12..)?)?,
        ..Default::default()
    };
    attrs(body.get(20..)?, |ty, p| match ty {
        TCA_KIND => q.kind = cstring(p),
        TCA_STATS2 => attrs(p, |t, v| match t {
            TCA_STATS_BASIC if v.len() >= 12 => {
                q.bytes = u64::from_ne_bytes(v[..8].try_into().unwrap_or([0; 8]));
                q.packets = u32_of(&v[8..]).unwrap_or(0);
            }
            TCA_STATS_QUEUE if v.len() >= 20 => {
                let w = |i: usize| u32_of(&v[i * 4..]).unwrap_or(0);
                q.qlen = w(0);
                q.backlog = w(1);
                q.drops = w(2);
                q.requeues = w(3);
                q.overlimits = w(4);
            }
            _ => {}
        }),
        _ => {}
    });
    Some((ifindex, q))
}

/// The queueing disciplines of interface `ifindex` in the socket's namespace.
pub(crate) fn qdiscs(nl: &Netlink, ifindex: u32) -> io::Result<Vec<Qdisc>> {
    let mut m = Vec::with_capacity(48);
    nl_header(&mut m, libc::RTM_GETQDISC, libc::NLM_F_REQUEST as u16);
    m.push(libc::AF_UNSPEC as u8);
    m.extend_from_slice(&[0, 0, 0]);
    m.extend_from_slice(&(ifindex as i32).to_ne_bytes());
    m.extend_from_slice(&[0u8; 12]); // handle, parent, info
    nl_finish(&mut m);
    let mut out = Vec::new();
    nl.dump(&m, |ty, msg| {
        if ty == libc::RTM_NEWQDISC {
            if let Some((i, q)) = parse_qdisc(msg) {
                if i == ifindex {
                    out.push(q);
                }
            }
        }
    })?;
    Ok(out)
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

    fn link_msg() -> Vec<u8> {
        let mut m = Vec::new();
        nl_header(&mut m, libc::RTM_NEWLINK, 0);
        ifinfomsg(&mut m, 7);
        nl_attr(&mut m, IFLA_IFNAME, b"vB0\0");
        nl_attr(&mut m, IFLA_LINK, &9u32.to_ne_bytes());
        let stats: Vec<u8> = (1..=25u64).flat_map(|v| v.to_ne_bytes()).collect();
        nl_attr(&mut m, IFLA_STATS64, &stats);
        let mut info = Vec::new();
        nl_attr(&mut info, IFLA_INFO_KIND, b"veth\0");
        nl_attr(&mut m, IFLA_LINKINFO | NLA_F_NESTED, &info);
        nl_finish(&mut m);
        m
    }

    #[test]
    fn links_parse_and_damaged_ones_do_not_panic() {
        let m = link_msg();
        let l = parse_link(&m).unwrap();
        assert_eq!(l.ifindex, 7);
        assert_eq!(l.name, "vB0");
        assert_eq!(l.link, Some(9));
        assert_eq!(l.kind.as_deref(), Some("veth"));
        assert_eq!(l.stats.len(), 25);
        assert_eq!(l.stats[6], 7); // rx_dropped
        for cut in 0..m.len() {
            let _ = parse_link(&m[..cut]);
        }
        let mut x = 5u32;
        for _ in 0..2000 {
            let mut c = m.clone();
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            let i = (x as usize >> 8) % c.len();
            c[i] ^= (x >> 3) as u8 | 1;
            let _ = parse_link(&c);
        }
    }

    #[test]
    fn qdisc_counters_parse() {
        let mut m = Vec::new();
        nl_header(&mut m, libc::RTM_NEWQDISC, 0);
        m.push(0);
        m.extend_from_slice(&[0, 0, 0]);
        m.extend_from_slice(&3i32.to_ne_bytes());
        m.extend_from_slice(&0x8001_0000u32.to_ne_bytes());
        m.extend_from_slice(&TC_H_ROOT.to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes());
        nl_attr(&mut m, TCA_KIND, b"fq_codel\0");
        let mut st = Vec::new();
        let mut basic = 1000u64.to_ne_bytes().to_vec();
        basic.extend_from_slice(&10u32.to_ne_bytes());
        basic.extend_from_slice(&0u32.to_ne_bytes());
        nl_attr(&mut st, TCA_STATS_BASIC, &basic);
        let q: Vec<u8> = [2u32, 128, 5, 1, 3]
            .iter()
            .flat_map(|v| v.to_ne_bytes())
            .collect();
        nl_attr(&mut st, TCA_STATS_QUEUE, &q);
        nl_attr(&mut m, TCA_STATS2 | NLA_F_NESTED, &st);
        nl_finish(&mut m);
        let (i, q) = parse_qdisc(&m).unwrap();
        assert_eq!(i, 3);
        assert_eq!(q.kind, "fq_codel");
        assert_eq!((q.packets, q.bytes), (10, 1000));
        assert_eq!((q.qlen, q.backlog, q.drops), (2, 128, 5));
        assert_eq!(q.parent, TC_H_ROOT);
        for cut in 0..m.len() {
            let _ = parse_qdisc(&m[..cut]);
        }
    }

    #[test]
    fn messages_of_a_datagram_are_split() {
        let mut d = link_msg();
        while !d.len().is_multiple_of(4) {
            d.push(0);
        }
        d.extend_from_slice(&link_msg());
        let mut n = 0;
        for_each_msg(&d, |ty, _, m| {
            assert_eq!(ty, libc::RTM_NEWLINK);
            assert!(parse_link(m).is_some());
            n += 1;
        });
        assert_eq!(n, 2);
    }
}

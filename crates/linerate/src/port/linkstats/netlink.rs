//! rtnetlink for `linerate watch`: the two queries it makes of every hop, an interface's link
//! (`RTM_GETLINK`: name, index, peer, kind, counters `IFLA_STATS64`) and its queueing
//! disciplines (`RTM_GETQDISC`: `TCA_STATS2` packets, drops, backlog), built and parsed here
//! (safe byte work); the socket and the message helpers are [`crate::sys::netlink`]'s.

pub(crate) use crate::sys::netlink::Netlink;
use crate::sys::netlink::{attrs, ifinfomsg, nl_attr, nl_finish, nl_header, NLMSG_HDRLEN};
#[cfg(all(test, not(loom)))]
use crate::sys::netlink::{for_each_msg, NLA_F_NESTED};
use std::io;

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

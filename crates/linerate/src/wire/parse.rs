//! One-pass header parsing: link → VLANs → IP (with IPv6 extension headers) → transport, and the
//! inner headers of GRE, GTP-U and VXLAN tunnels.
//!
//! [`parse`] never allocates, never formats and never panics; whatever it could not read is
//! reported in [`Parsed::stop`] and every field it did not reach keeps its default (zero/`None`).

use super::ethernet::{walk_vlans, MAX_VLANS};
use super::ipv6::walk_ext;
use super::LinkType;
use super::{arr, be16, ethertype, proto, Layer, WireError};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub use super::ipv6::FragInfo as Fragment;

/// UDP port of GTP-U.
pub const GTPU_PORT: u16 = 2152;
/// UDP port of VXLAN.
pub const VXLAN_PORT: u16 = 4789;
/// The most GTP-U extension headers [`inner`] steps over.
pub const MAX_GTP_EXT: usize = 8;

/// What [`parse`] found in one packet. Offsets are from the start of the buffer parsed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Parsed {
    /// The link type the packet was parsed as (pcap LINKTYPE_ value).
    pub link: u32,
    /// Offset of the link-layer header (Ethernet, SLL, SLL2, NULL), if there is one.
    pub l2: Option<u32>,
    /// Offset of the IPv4/IPv6 header.
    pub l3: Option<u32>,
    /// Offset of the upper-layer header (after IPv6 extension headers), if the packet is not a
    /// non-first fragment.
    pub l4: Option<u32>,
    /// Offset of the transport payload, when the transport header (TCP, UDP, SCTP, ICMP) was read.
    pub payload: Option<u32>,
    /// End of the IP datagram in the buffer: the IP length field bounded by the capture (trailing
    /// link padding excluded). Zero without IP.
    pub l3_end: u32,
    /// Destination MAC (zero when the link has none).
    pub dst_mac: [u8; 6],
    /// Source MAC (zero when the link has none; SLL/SLL2 give it when the address is 6 bytes).
    pub src_mac: [u8; 6],
    /// VLAN ids, outermost first; the first `vlan_count` are valid (see [`Parsed::vlans`]).
    pub vlan_ids: [u16; MAX_VLANS],
    /// Number of VLAN tags.
    pub vlan_count: u8,
    /// The ethertype of the network layer (after any VLAN tags; derived from the family or the
    /// version nibble on links without one).
    pub ethertype: u16,
    /// 4, 6, or 0 without IP.
    pub ip_version: u8,
    /// Source address: IPv4 in the first 4 bytes and zeros after, or IPv6.
    pub src: [u8; 16],
    /// Destination address, as `src`.
    pub dst: [u8; 16],
    /// TTL or hop limit.
    pub ttl: u8,
    /// Upper-layer protocol (after IPv6 extension headers).
    pub proto: u8,
    /// Source port (TCP, UDP, SCTP), else 0.
    pub sport: u16,
    /// Destination port (TCP, UDP, SCTP), else 0.
    pub dport: u16,
    /// ICMP/ICMPv6 type.
    pub icmp_type: u8,
    /// ICMP/ICMPv6 code.
    pub icmp_code: u8,
    /// TCP flags (9 bits; see [`super::l4::tcp_flags`]).
    pub tcp_flags: u16,
    /// Fragment information if the packet is a fragment (IPv4 MF/offset, IPv6 Fragment header).
    pub fragment: Option<Fragment>,
    /// Why parsing stopped before the transport payload; `None` when every header was read or
    /// the upper-layer protocol is one without a header parsed here (GRE, ESP, ...).
    pub stop: Option<WireError>,
}

impl Parsed {
    /// VLAN ids, outermost first.
    pub fn vlans(&self) -> &[u16] {
        &self.vlan_ids[..usize::from(self.vlan_count).min(MAX_VLANS)]
    }

    /// The outermost VLAN id, 0 when untagged.
    pub fn outer_vlan(&self) -> u16 {
        self.vlans().first().copied().unwrap_or(0)
    }

    /// Whether the transport header was read (ports or ICMP type/code are valid).
    pub fn has_l4(&self) -> bool {
        self.payload.is_some()
    }

    /// Whether this is a fragment other than the first.
    pub fn is_later_fragment(&self) -> bool {
        self.fragment.is_some_and(|f| !f.is_first())
    }

    fn addr(&self, a: &[u8; 16]) -> Option<IpAddr> {
        match self.ip_version {
            4 => Some(IpAddr::V4(Ipv4Addr::new(a[0], a[1], a[2], a[3]))),
            6 => Some(IpAddr::V6(Ipv6Addr::from(*a))),
            _ => None,
        }
    }

    /// Source IP address, if the packet reached IP.
    pub fn src_ip(&self) -> Option<IpAddr> {
        self.addr(&self.src)
    }

    /// Destination IP address, if the packet reached IP.
    pub fn dst_ip(&self) -> Option<IpAddr> {
        self.addr(&self.dst)
    }
}

/// Parses the headers of one packet captured on a link of type `link`.
///
/// Link types: Ethernet (1, with 802.1Q/QinQ tags), raw IP (101, 12, 14: version from the first
/// nibble; 228: IPv4; 229: IPv6), Linux SLL (113) and SLL2 (276), BSD NULL (0, host-order family:
/// 2 is IPv4, 24/28/30 are IPv6) and OpenBSD LOOP (108, network-order family).
pub fn parse(data: &[u8], link: LinkType) -> Parsed {
    let mut p = Parsed {
        link: link.0,
        ..Parsed::default()
    };
    if let Err(e) = parse_link(data, link.0, &mut p) {
        p.stop = Some(e);
    }
    p
}

#[inline(always)]
fn off32(o: usize) -> u32 {
    u32::try_from(o).unwrap_or(u32::MAX)
}

fn parse_link(d: &[u8], link: u32, p: &mut Parsed) -> Result<(), WireError> {
    match link {
        1 => ethernet(d, 0, p),
        101 | 12 | 14 => ip(d, 0, p, None),
        228 => ip(d, 0, p, Some(4)),
        229 => ip(d, 0, p, Some(6)),
        113 => {
            // Packet type 2, ARPHRD 2, address length 2, address 8, protocol 2.
            p.l2 = Some(0);
            let (Some(alen), Some(et)) = (be16(d, 4), be16(d, 14)) else {
                return Err(WireError::Truncated(Layer::Link));
            };
            if alen == 6 {
                p.src_mac = arr(d, 6).unwrap_or_default();
            }
            after_ethertype(d, 16, et, p)
        }
        276 => {
            // Protocol 2, reserved 2, ifindex 4, ARPHRD 2, packet type 1, address length 1,
            // address 8.
            p.l2 = Some(0);
            let (Some(et), Some(&alen)) = (be16(d, 0), d.get(11)) else {
                return Err(WireError::Truncated(Layer::Link));
            };
            if d.len() < 20 {
                return Err(WireError::Truncated(Layer::Link));
            }
            if alen == 6 {
                p.src_mac = arr(d, 12).unwrap_or_default();
            }
            after_ethertype(d, 20, et, p)
        }
        0 | 108 => {
            p.l2 = Some(0);
            let Some(raw) = arr::<4>(d, 0) else {
                return Err(WireError::Truncated(Layer::Link));
            };
            let fam = if link == 108 {
                u32::from_be_bytes(raw)
            } else {
                // Host order of the capturing machine: a family fits in the low 16 bits, so a
                // value with high bits set was written big-endian.
                let le = u32::from_le_bytes(raw);
                if le > 0xffff {
                    le.swap_bytes()
                } else {
                    le
                }
            };
            match fam {
                2 => {
                    p.ethertype = ethertype::IPV4;
                    ip(d, 4, p, Some(4))
                }
                24 | 28 | 30 => {
                    p.ethertype = ethertype::IPV6;
                    ip(d, 4, p, Some(6))
                }
                _ => Err(WireError::NotIp),
            }
        }
        other => Err(WireError::UnsupportedLink(other)),
    }
}

fn ethernet(d: &[u8], off: usize, p: &mut Parsed) -> Result<(), WireError> {
    p.l2 = Some(off32(off));
    let (Some(dst), Some(src), Some(et)) = (arr(d, off), arr(d, off + 6), be16(d, off + 12)) else {
        return Err(WireError::Truncated(Layer::Link));
    };
    p.dst_mac = dst;
    p.src_mac = src;
    after_ethertype(d, off + 14, et, p)
}

fn after_ethertype(d: &[u8], off: usize, et: u16, p: &mut Parsed) -> Result<(), WireError> {
    let (et, off) = if ethertype::is_vlan(et) {
        let (ids, n, et, off) = walk_vlans(d, off, et)?;
        p.vlan_ids = ids;
        p.vlan_count = n;
        (et, off)
    } else {
        (et, off)
    };
    p.ethertype = et;
    match et {
        ethertype::IPV4 => ip(d, off, p, Some(4)),
        ethertype::IPV6 => ip(d, off, p, Some(6)),
        _ => Err(WireError::NotIp),
    }
}

fn ip(d: &[u8], off: usize, p: &mut Parsed, want: Option<u8>) -> Result<(), WireError> {
    let Some(&b0) = d.get(off) else {
        return Err(WireError::Truncated(if want == Some(6) {
            Layer::Ipv6
        } else {
            Layer::Ipv4
        }));
    };
    let v = b0 >> 4;
    if want.is_some_and(|w| w != v) {
        return Err(WireError::BadVersion);
    }
    match v {
        4 => ipv4(d, off, b0, p),
        6 => ipv6(d, off, p),
        _ => Err(WireError::BadVersion),
    }
}

fn ipv4(d: &[u8], off: usize, b0: u8, p: &mut Parsed) -> Result<(), WireError> {
    p.l3 = Some(off32(off));
    p.ip_version = 4;
    if p.ethertype == 0 {
        p.ethertype = ethertype::IPV4;
    }
    let hl = usize::from(b0 & 0x0f) * 4;
    if hl < 20 {
        return Err(WireError::BadHeaderLength(Layer::Ipv4));
    }
    let Some(h) = d.get(off..off + hl) else {
        return Err(WireError::Truncated(Layer::Ipv4));
    };
    let total = usize::from(be16(h, 2).unwrap_or_default());
    if total < hl {
        return Err(WireError::BadLength(Layer::Ipv4));
    }
    let mut a = [0u8; 16];
    a[..4].copy_from_slice(h.get(12..16).unwrap_or(&[0; 4]));
    p.src = a;
    a[..4].copy_from_slice(h.get(16..20).unwrap_or(&[0; 4]));
    p.dst = a;
    p.ttl = h.get(8).copied().unwrap_or_default();
    p.proto = h.get(9).copied().unwrap_or_default();
    let fw = be16(h, 6).unwrap_or_default();
    let frag = Fragment {
        id: u32::from(be16(h, 4).unwrap_or_default()),
        offset: (fw & 0x1fff) << 3,
        more: fw & 0x2000 != 0,
    };
    let end = (off + total).min(d.len());
    p.l3_end = off32(end);
    if frag.more || frag.offset != 0 {
        p.fragment = Some(frag);
        if frag.offset != 0 {
            return Err(WireError::NonFirstFragment);
        }
    }
    // Authentication headers (RFC 4302) are stepped over, as in IPv6 (`walk_ext`): the flow is
    // the transport header's after them, as argus and tshark show it.
    let (mut at, mut pr) = (off + hl, p.proto);
    for _ in 0..4 {
        if pr != proto::AH {
            break;
        }
        let (Some(&nh), Some(&len)) = (d.get(at), d.get(at + 1)) else {
            return Err(WireError::Truncated(Layer::Ipv4));
        };
        pr = nh;
        at += (usize::from(len) + 2) * 4;
        // An AH longer than the packet: cut, the transport offset never past its end.
        if at > end {
            return Err(WireError::Truncated(Layer::Ipv4));
        }
    }
    transport(d, at, end, pr, p)
}

fn ipv6(d: &[u8], off: usize, p: &mut Parsed) -> Result<(), WireError> {
    p.l3 = Some(off32(off));
    p.ip_version = 6;
    if p.ethertype == 0 {
        p.ethertype = ethertype::IPV6;
    }
    let Some(h) = d.get(off..off + 40) else {
        return Err(WireError::Truncated(Layer::Ipv6));
    };
    p.src = arr(h, 8).unwrap_or_default();
    p.dst = arr(h, 24).unwrap_or_default();
    p.ttl = h.get(7).copied().unwrap_or_default();
    let nh = h.get(6).copied().unwrap_or_default();
    p.proto = nh;
    let pl = usize::from(be16(h, 4).unwrap_or_default());
    let end = if pl == 0 {
        d.len()
    } else {
        (off + 40 + pl).min(d.len())
    };
    p.l3_end = off32(end);
    let w = walk_ext(d.get(..end).unwrap_or(d), off + 40, nh);
    p.proto = w.proto;
    p.fragment = w.fragment;
    if let Some(s) = w.stop {
        return Err(s);
    }
    transport(d, w.offset, end, w.proto, p)
}

fn transport(d: &[u8], off: usize, end: usize, pr: u8, p: &mut Parsed) -> Result<(), WireError> {
    p.proto = pr;
    p.l4 = Some(off32(off));
    let t = d.get(off..end).unwrap_or_default();
    let ports = |p: &mut Parsed| {
        if let (Some(s), Some(dp)) = (be16(t, 0), be16(t, 2)) {
            p.sport = s;
            p.dport = dp;
        }
    };
    match pr {
        proto::TCP => {
            ports(p);
            if let Some(f) = be16(t, 12) {
                p.tcp_flags = f & 0x01ff;
            }
            if t.len() < 20 {
                return Err(WireError::Truncated(Layer::Tcp));
            }
            let hl = usize::from(t.get(12).copied().unwrap_or_default() >> 4) * 4;
            if hl < 20 {
                return Err(WireError::BadHeaderLength(Layer::Tcp));
            }
            if t.len() < hl {
                return Err(WireError::Truncated(Layer::Tcp));
            }
            p.payload = Some(off32(off + hl));
        }
        proto::UDP => {
            ports(p);
            if t.len() < 8 {
                return Err(WireError::Truncated(Layer::Udp));
            }
            p.payload = Some(off32(off + 8));
        }
        proto::SCTP => {
            ports(p);
            if t.len() < 12 {
                return Err(WireError::Truncated(Layer::Sctp));
            }
            p.payload = Some(off32(off + 12));
        }
        proto::ICMP | proto::ICMPV6 => {
            if let (Some(&ty), Some(&code)) = (t.first(), t.get(1)) {
                p.icmp_type = ty;
                p.icmp_code = code;
            }
            if t.len() < 8 {
                return Err(WireError::Truncated(Layer::Icmp));
            }
            p.payload = Some(off32(off + 8));
        }
        _ => {}
    }
    Ok(())
}

/// Which header of a tunnel (GRE, IPIP, 6in4, VXLAN) keys a packet: the outer one (as argus
/// and NetFlow meters do by default) or the one inside (as tshark's last `ip.src` shows).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Tunnels {
    /// The tunnel's own header: a GRE flow between the tunnel endpoints.
    #[default]
    Outer,
    /// The packet inside the tunnel.
    Inner,
}

impl std::str::FromStr for Tunnels {
    type Err = String;
    fn from_str(s: &str) -> Result<Tunnels, String> {
        match s {
            "outer" => Ok(Tunnels::Outer),
            "inner" => Ok(Tunnels::Inner),
            _ => Err(format!("'{s}': expected outer or inner")),
        }
    }
}

/// The IP packet inside `outer` (parsed from `data`) when `outer` is a GRE, IPIP, 6in4 or VXLAN
/// (UDP 4789) tunnel and the inner IP header was read whole; offsets from the start of `data`.
/// An inner header cut short or malformed gives `None`: such a tunnel keeps its outer key, as
/// argus keys it.
pub fn tunnel_inner(data: &[u8], outer: &Parsed) -> Option<Parsed> {
    let tunnel = match outer.proto {
        proto::GRE | proto::IPIP | proto::IPV6_IN_IP => true,
        proto::UDP => outer.dport == VXLAN_PORT,
        _ => false,
    };
    if !tunnel || outer.ip_version == 0 {
        return None;
    }
    inner(data, outer).filter(ip_header_whole)
}

/// Whether `p` read an IP header (and its IPv6 extension headers) whole: a stop in the transport
/// header, at a later fragment or at "no next header" still names a flow.
pub fn ip_header_whole(p: &Parsed) -> bool {
    if p.ip_version != 4 && p.ip_version != 6 {
        return false;
    }
    match p.stop {
        None | Some(WireError::NonFirstFragment | WireError::NoNextHeader) => true,
        Some(WireError::Truncated(l) | WireError::BadHeaderLength(l) | WireError::BadLength(l)) => {
            !matches!(
                l,
                Layer::Link | Layer::Vlan | Layer::Ipv4 | Layer::Ipv6 | Layer::Ipv6Ext
            )
        }
        Some(_) => false,
    }
}

/// Encapsulation bits of [`parse_deep`]: what it stepped over to reach the IP header.
pub mod encap {
    /// An MPLS label stack (ethertype 0x8847/0x8848).
    pub const MPLS: u8 = 1;
    /// A PPPoE session (ethertype 0x8864) and its PPP protocol field.
    pub const PPPOE: u8 = 2;
    /// An 802.2 LLC/SNAP header (802.3 length field, then AA AA 03 00 00 00 and an ethertype).
    pub const LLC: u8 = 4;
    /// A PPP (9, 50) or Cisco HDLC (104) link header.
    pub const PPP: u8 = 8;
}

/// Why [`parse_deep`] could not reach an IP header below what [`parse`] stops at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepError {
    /// A header is cut short.
    Truncated,
    /// Something else than IP is carried.
    NotIp,
    /// An MPLS stack without a bottom label within 16, or headers nested too deep.
    Malformed,
}

/// [`parse`], then through what it stops at: PPP (with the 1-byte protocol field of
/// protocol-field compression) and Cisco HDLC links, MPLS label stacks (the IP version guessed
/// from the first nibble below the bottom label, as everyone does), PPPoE sessions and 802.2
/// LLC/SNAP. Returns the parsed headers, whose offsets are from `data[base..]` (MACs and VLANs are
/// the outer frame's), `base`, and the [`encap`] bits. A packet [`parse`] reads whole comes back as
/// it (base 0, no bits), cheaply.
pub fn parse_deep(data: &[u8], link: LinkType) -> Result<(Parsed, usize, u8), StepError> {
    let p = parse(data, link);
    let (off, et, mut bits) = match p.stop {
        Some(WireError::UnsupportedLink(9 | 50 | 104)) => {
            if link.0 == 104 {
                let et = be16(data, 2).ok_or(StepError::Truncated)?;
                (4, et, encap::PPP)
            } else {
                let at = if data.get(0..2) == Some(&[0xff, 0x03][..]) {
                    2
                } else {
                    0
                };
                let (pr, n) = ppp_proto(data, at).ok_or(StepError::Truncated)?;
                (at + n, ppp_ethertype(pr)?, encap::PPP)
            }
        }
        Some(WireError::NotIp) if p.ethertype <= 1500 || is_deep(p.ethertype) => {
            let hdr = match link.0 {
                1 => 14,
                113 => 16,
                276 => 20,
                _ => return Err(StepError::NotIp),
            };
            (hdr + 4 * usize::from(p.vlan_count), p.ethertype, 0)
        }
        _ => return Ok((p, 0, 0)),
    };
    let (base, inner_link, more) = step_over(data, off, et)?;
    if base > data.len() {
        return Err(StepError::Truncated);
    }
    bits |= more;
    let mut q = parse(data.get(base..).unwrap_or_default(), inner_link);
    q.link = p.link;
    q.dst_mac = p.dst_mac;
    q.src_mac = p.src_mac;
    q.vlan_ids = p.vlan_ids;
    q.vlan_count = p.vlan_count;
    Ok((q, base, bits))
}

/// Ethertypes [`parse_deep`] steps through.
#[inline]
fn is_deep(et: u16) -> bool {
    matches!(et, 0x8847 | 0x8848 | 0x8864)
}

/// A PPP protocol field at `at`: one byte when its first byte is odd (protocol-field
/// compression, RFC 1661), else two. Returns the protocol and the field's length.
fn ppp_proto(d: &[u8], at: usize) -> Option<(u16, usize)> {
    let b = *d.get(at)?;
    if b & 1 == 1 {
        Some((u16::from(b), 1))
    } else {
        Some((be16(d, at)?, 2))
    }
}

fn ppp_ethertype(pr: u16) -> Result<u16, StepError> {
    match pr {
        0x0021 => Ok(ethertype::IPV4),
        0x0057 => Ok(ethertype::IPV6),
        _ => Err(StepError::NotIp),
    }
}

/// Steps from a header of protocol `et` at `off` to the IP header: the offset, the link type to
/// parse it as (raw IP guessed by its version nibble below MPLS, IPv4 or IPv6 otherwise), and
/// the [`encap`] bits.
fn step_over(d: &[u8], mut off: usize, mut et: u16) -> Result<(usize, LinkType, u8), StepError> {
    let mut bits = 0u8;
    for _ in 0..4 {
        match et {
            0x8847 | 0x8848 => {
                bits |= encap::MPLS;
                for _ in 0..16 {
                    let label = d.get(off..off + 4).ok_or(StepError::Truncated)?;
                    let b = label[2];
                    off += 4;
                    if b & 1 == 1 {
                        return Ok((off, LinkType::RAW, bits));
                    }
                }
                return Err(StepError::Malformed);
            }
            0x8864 => {
                bits |= encap::PPPOE;
                if d.len() < off + 6 {
                    return Err(StepError::Truncated);
                }
                let (pr, n) = ppp_proto(d, off + 6).ok_or(StepError::Truncated)?;
                off += 6 + n;
                if off > d.len() {
                    return Err(StepError::Truncated);
                }
                et = ppp_ethertype(pr)?;
            }
            ethertype::IPV4 => return Ok((off, LinkType::IPV4, bits)),
            ethertype::IPV6 => return Ok((off, LinkType::IPV6, bits)),
            n if n <= 1500 => {
                // 802.3 length field: only LLC/SNAP with an ethertype carries IP.
                let h = d.get(off..off + 8).ok_or(StepError::Truncated)?;
                if h[..6] != [0xaa, 0xaa, 0x03, 0, 0, 0] {
                    return Err(StepError::NotIp);
                }
                bits |= encap::LLC;
                et = u16::from_be_bytes([h[6], h[7]]);
                off += 8;
            }
            _ => return Err(StepError::NotIp),
        }
    }
    Err(StepError::Malformed)
}

/// The headers inside a tunnel, if `outer` (parsed from `data`) carries one:
/// - GRE (IP protocol 47, version 0, optional checksum/key/sequence words; no RFC 1701 routing)
///   with protocol type 0x0800 (IPv4), 0x86dd (IPv6) or 0x6558 (Ethernet);
/// - IPIP (IP protocol 4) and 6in4 (41): the inner IPv4/IPv6 header right after the outer one;
/// - GTP-U (UDP port 2152, version 1, T-PDU): the 8-byte header, the 4 optional bytes when any of
///   E/S/PN is set, and up to [`MAX_GTP_EXT`] extension headers, then IPv4 or IPv6;
/// - VXLAN (UDP destination port 4789, I flag set): 8 bytes, then Ethernet.
///
/// Offsets in the result are from the start of `data`. A tunnel header cut short gives
/// `Some` with `stop` = `Truncated(Gre)` / `Truncated(Gtp)`; no tunnel gives `None`.
pub fn inner(data: &[u8], outer: &Parsed) -> Option<Parsed> {
    let mut p = Parsed {
        link: LinkType::RAW.0,
        ..Parsed::default()
    };
    let r = if outer.proto == proto::GRE {
        let o = usize::try_from(outer.l4?).ok()?;
        let (Some(flags), Some(pt)) = (be16(data, o), be16(data, o + 2)) else {
            p.stop = Some(WireError::Truncated(Layer::Gre));
            return Some(p);
        };
        if flags & 0x0007 != 0 || flags & 0x4000 != 0 {
            return None;
        }
        let words = [0x8000u16, 0x2000, 0x1000]
            .iter()
            .filter(|&&b| flags & b != 0)
            .count();
        let start = o + 4 + 4 * words;
        if data.len() < start {
            p.stop = Some(WireError::Truncated(Layer::Gre));
            return Some(p);
        }
        match pt {
            ethertype::IPV4 => ip(data, start, &mut p, Some(4)),
            ethertype::IPV6 => ip(data, start, &mut p, Some(6)),
            ethertype::TEB => {
                p.link = LinkType::ETHERNET.0;
                ethernet(data, start, &mut p)
            }
            _ => return None,
        }
    } else if outer.proto == proto::IPIP || outer.proto == proto::IPV6_IN_IP {
        // IPIP (RFC 2003) and 6in4 (RFC 4213): the inner header right after the outer one.
        let o = usize::try_from(outer.l4?).ok()?;
        let v = if outer.proto == proto::IPIP { 4 } else { 6 };
        ip(data, o, &mut p, Some(v))
    } else if outer.proto == proto::UDP && (outer.dport == GTPU_PORT || outer.sport == GTPU_PORT) {
        let o = usize::try_from(outer.payload?).ok()?;
        let (Some(&flags), Some(&mt)) = (data.get(o), data.get(o + 1)) else {
            p.stop = Some(WireError::Truncated(Layer::Gtp));
            return Some(p);
        };
        if flags >> 5 != 1 || flags & 0x10 == 0 || mt != 0xff {
            return None;
        }
        match gtp_header_len(data, o, flags) {
            Ok(hl) => ip(data, o + hl, &mut p, None),
            Err(e) => Err(e),
        }
    } else if outer.proto == proto::UDP && outer.dport == VXLAN_PORT {
        let o = usize::try_from(outer.payload?).ok()?;
        let Some(&flags) = data.get(o) else {
            p.stop = Some(WireError::Truncated(Layer::Udp));
            return Some(p);
        };
        if flags & 0x08 == 0 {
            return None;
        }
        p.link = LinkType::ETHERNET.0;
        ethernet(data, o + 8, &mut p)
    } else {
        return None;
    };
    if let Err(e) = r {
        p.stop = Some(e);
    }
    Some(p)
}

fn gtp_header_len(d: &[u8], o: usize, flags: u8) -> Result<usize, WireError> {
    if d.len() < o + 8 {
        return Err(WireError::Truncated(Layer::Gtp));
    }
    if flags & 0x07 == 0 {
        return Ok(8);
    }
    if d.len() < o + 12 {
        return Err(WireError::Truncated(Layer::Gtp));
    }
    let mut hl = 12;
    if flags & 0x04 == 0 {
        return Ok(hl);
    }
    let mut next = d.get(o + 11).copied().unwrap_or_default();
    let mut n = 0;
    while next != 0 {
        if n == MAX_GTP_EXT {
            return Err(WireError::BadLength(Layer::Gtp));
        }
        n += 1;
        // Each extension header: length in 4-byte units (never 0), content, next type.
        let len = usize::from(d.get(o + hl).copied().unwrap_or_default()) * 4;
        if len == 0 {
            return Err(WireError::BadLength(Layer::Gtp));
        }
        if d.len() < o + hl + len {
            return Err(WireError::Truncated(Layer::Gtp));
        }
        next = d.get(o + hl + len - 1).copied().unwrap_or_default();
        hl += len;
    }
    Ok(hl)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::wire::checksum;

    fn ipv4(pr: u8, l4: &[u8]) -> Vec<u8> {
        let total = (20 + l4.len()) as u16;
        let mut h = vec![
            0x45, 0, 0, 0, 0x12, 0x34, 0x40, 0, 64, pr, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ];
        h[2..4].copy_from_slice(&total.to_be_bytes());
        let c = checksum::checksum(&h);
        h[10..12].copy_from_slice(&c.to_be_bytes());
        h.extend_from_slice(l4);
        h
    }

    fn ipv6(nh: u8, rest: &[u8]) -> Vec<u8> {
        let mut h = vec![0x60, 0, 0, 0];
        h.extend_from_slice(&(rest.len() as u16).to_be_bytes());
        h.extend_from_slice(&[nh, 255]);
        h.extend_from_slice(&"2001:db8::1".parse::<Ipv6Addr>().unwrap().octets());
        h.extend_from_slice(&"2001:db8::2".parse::<Ipv6Addr>().unwrap().octets());
        h.extend_from_slice(rest);
        h
    }

    fn udp(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
        let mut u = Vec::new();
        u.extend_from_slice(&sport.to_be_bytes());
        u.extend_from_slice(&dport.to_be_bytes());
        u.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
        u.extend_from_slice(&[0, 0]);
        u.extend_from_slice(payload);
        u
    }

    fn tcp(flags: u8) -> Vec<u8> {
        let mut t = vec![
            0x1f, 0x90, 0xc3, 0x50, 0, 0, 0, 1, 0, 0, 0, 0, 0x60, flags, 0xff, 0xff,
        ];
        t.extend_from_slice(&[0, 0, 0, 0, 1, 1, 1, 0]);
        t.extend_from_slice(b"data");
        t
    }

    fn eth(tags: &[(u16, u16)], et: u16, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11];
        for (tpid, id) in tags {
            f.extend_from_slice(&tpid.to_be_bytes());
            f.extend_from_slice(&id.to_be_bytes());
        }
        f.extend_from_slice(&et.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    #[test]
    fn ethernet_ipv4_udp() {
        let mut f = eth(&[], 0x0800, &ipv4(17, &udp(5353, 53, b"query")));
        f.resize(f.len() + 7, 0); // link padding after the datagram
        let p = parse(&f, LinkType::ETHERNET);
        assert_eq!(p.stop, None);
        assert_eq!(
            (p.l2, p.l3, p.l4, p.payload),
            (Some(0), Some(14), Some(34), Some(42))
        );
        assert_eq!(p.l3_end as usize, f.len() - 7);
        assert_eq!(
            (p.dst_mac, p.src_mac),
            ([0, 1, 2, 3, 4, 5], [6, 7, 8, 9, 10, 11])
        );
        assert_eq!(
            (p.ethertype, p.ip_version, p.proto, p.ttl),
            (0x0800, 4, 17, 64)
        );
        assert_eq!(p.src_ip().unwrap().to_string(), "10.0.0.1");
        assert_eq!(p.dst_ip().unwrap().to_string(), "10.0.0.2");
        assert_eq!((p.sport, p.dport), (5353, 53));
        assert!(p.has_l4());
        assert_eq!(p.fragment, None);
    }

    #[test]
    fn qinq_ipv6_ext_tcp() {
        let mut rest = vec![60, 0, 1, 4, 0, 0, 0, 0]; // Hop-by-Hop → Destination options
        rest.extend_from_slice(&[6, 0, 1, 4, 0, 0, 0, 0]); // Destination options → TCP
        rest.extend_from_slice(&tcp(0x12));
        let f = eth(
            &[(0x88a8, 0x0064), (0x8100, 0x20c8)],
            0x86dd,
            &ipv6(0, &rest),
        );
        let p = parse(&f, LinkType::ETHERNET);
        assert_eq!(p.stop, None);
        assert_eq!(p.vlans(), &[100, 200]);
        assert_eq!(p.ethertype, 0x86dd);
        assert_eq!(
            (p.l3, p.l4, p.payload),
            (Some(22), Some(22 + 40 + 16), Some(22 + 40 + 16 + 24))
        );
        assert_eq!(
            (p.proto, p.sport, p.dport, p.tcp_flags),
            (6, 8080, 50000, 0x12)
        );
        assert_eq!(p.ttl, 255);
        assert_eq!(p.dst_ip().unwrap().to_string(), "2001:db8::2");
    }

    #[test]
    fn fragments() {
        let mut d = ipv4(17, &udp(1, 2, &[0; 16]));
        d[6] = 0x20; // MF, offset 0
        let p = parse(&d, LinkType::RAW);
        assert_eq!(
            p.fragment,
            Some(Fragment {
                id: 0x1234,
                offset: 0,
                more: true
            })
        );
        assert!(p.fragment.unwrap().is_first());
        assert_eq!((p.sport, p.dport, p.stop), (1, 2, None));
        d[6] = 0x00;
        d[7] = 0x03; // offset 24
        let p = parse(&d, LinkType::IPV4);
        assert_eq!(p.stop, Some(WireError::NonFirstFragment));
        assert!(p.is_later_fragment());
        assert_eq!((p.l3, p.l4, p.sport), (Some(0), None, 0));
        // IPv6 fragment header with offset 8: ports unknown, protocol known.
        let f6 = ipv6(44, &[17, 0, 0, 8, 0, 0, 0, 9, 1, 2, 3, 4]);
        let p = parse(&f6, LinkType::IPV6);
        assert_eq!(p.stop, Some(WireError::NonFirstFragment));
        assert_eq!(p.proto, 17);
        assert_eq!(
            p.fragment,
            Some(Fragment {
                id: 9,
                offset: 8,
                more: false
            })
        );
    }

    #[test]
    fn link_types() {
        let ip = ipv4(1, &[8, 0, 0, 0, 0, 1, 0, 1]);
        // SLL: packet type, ARPHRD_ETHER, address length 6, address, protocol.
        let mut sll = vec![
            0, 0, 0, 1, 0, 6, 0xa, 0xb, 0xc, 0xd, 0xe, 0xf, 0, 0, 0x08, 0x00,
        ];
        sll.extend_from_slice(&ip);
        let p = parse(&sll, LinkType::LINUX_SLL);
        assert_eq!((p.l3, p.icmp_type, p.stop), (Some(16), 8, None));
        assert_eq!(p.src_mac, [0xa, 0xb, 0xc, 0xd, 0xe, 0xf]);
        // SLL2: protocol, reserved, ifindex, ARPHRD, packet type, address length, address.
        let mut sll2 = vec![
            0x08, 0x00, 0, 0, 0, 0, 0, 2, 0, 1, 0, 6, 1, 2, 3, 4, 5, 6, 0, 0,
        ];
        sll2.extend_from_slice(&ip);
        let p = parse(&sll2, LinkType::LINUX_SLL2);
        assert_eq!((p.l3, p.proto, p.stop), (Some(20), 1, None));
        assert_eq!(p.src_mac, [1, 2, 3, 4, 5, 6]);
        // NULL, little- and big-endian family; LOOP is network order.
        for fam in [[2u8, 0, 0, 0], [0, 0, 0, 2]] {
            let mut n = fam.to_vec();
            n.extend_from_slice(&ip);
            let p = parse(&n, LinkType::NULL);
            assert_eq!((p.l3, p.ethertype, p.stop), (Some(4), 0x0800, None));
        }
        for fam in [24u32, 28, 30] {
            let mut n = fam.to_le_bytes().to_vec();
            n.extend_from_slice(&ipv6(59, &[]));
            let p = parse(&n, LinkType::NULL);
            assert_eq!((p.ip_version, p.stop), (6, Some(WireError::NoNextHeader)));
        }
        let mut lo = vec![0, 0, 0, 2];
        lo.extend_from_slice(&ip);
        assert_eq!(parse(&lo, LinkType(108)).stop, None);
        assert_eq!(
            parse(&[7, 0, 0, 0, 0x45], LinkType::NULL).stop,
            Some(WireError::NotIp)
        );
        // Raw: version nibble must match.
        assert_eq!(parse(&ip, LinkType(14)).stop, None);
        assert_eq!(parse(&ip, LinkType::IPV6).stop, Some(WireError::BadVersion));
        assert_eq!(
            parse(&[0x55], LinkType::RAW).stop,
            Some(WireError::BadVersion)
        );
        assert_eq!(
            parse(&ip, LinkType(9999)).stop,
            Some(WireError::UnsupportedLink(9999))
        );
        // ARP over Ethernet.
        let p = parse(&eth(&[], 0x0806, &[0; 28]), LinkType::ETHERNET);
        assert_eq!((p.ethertype, p.stop), (0x0806, Some(WireError::NotIp)));
    }

    #[test]
    fn malformed_headers() {
        let mut d = ipv4(6, &tcp(2));
        d[0] = 0x44;
        assert_eq!(
            parse(&d, LinkType::RAW).stop,
            Some(WireError::BadHeaderLength(Layer::Ipv4))
        );
        let mut d = ipv4(6, &tcp(2));
        d[2] = 0;
        d[3] = 10;
        assert_eq!(
            parse(&d, LinkType::RAW).stop,
            Some(WireError::BadLength(Layer::Ipv4))
        );
        let mut d = ipv4(6, &tcp(2));
        d[32] = 0x30;
        assert_eq!(
            parse(&d, LinkType::RAW).stop,
            Some(WireError::BadHeaderLength(Layer::Tcp))
        );
        let f = eth(&[(0x8100, 1); 5], 0x0800, &ipv4(6, &tcp(2)));
        assert_eq!(
            parse(&f, LinkType::ETHERNET).stop,
            Some(WireError::TooManyVlans)
        );
    }

    #[test]
    fn every_truncation_stops_with_a_reason() {
        let mut rest = vec![6, 0, 1, 4, 0, 0, 0, 0];
        rest.extend_from_slice(&tcp(0x18));
        let cases: Vec<(LinkType, Vec<u8>)> = vec![
            (
                LinkType::ETHERNET,
                eth(&[(0x8100, 5)], 0x0800, &ipv4(17, &udp(1, 2, b"x"))),
            ),
            (
                LinkType::ETHERNET,
                eth(&[(0x88a8, 5), (0x8100, 6)], 0x86dd, &ipv6(60, &rest)),
            ),
            (LinkType::RAW, ipv4(1, &[0, 0, 0, 0, 0, 1, 0, 1])),
            (LinkType::RAW, ipv6(58, &[128, 0, 0, 0, 0, 1, 0, 1])),
            (LinkType::RAW, ipv4(132, &[0; 12])),
        ];
        for (link, full) in cases {
            let whole = parse(&full, link);
            assert_eq!(whole.stop, None);
            assert!(whole.has_l4());
            // Every capture that ends before the transport payload stops with a reason.
            for n in 0..whole.payload.unwrap() as usize {
                let p = parse(&full[..n], link);
                assert!(
                    matches!(p.stop, Some(WireError::Truncated(_))),
                    "{link:?} len {n}: {:?}",
                    p.stop
                );
                assert!(!p.has_l4());
                let _ = inner(&full[..n], &p);
            }
        }
    }

    #[test]
    fn gre_gtp_vxlan_inner() {
        let inner_ip = ipv4(6, &tcp(0x02));
        // GRE with key: flags 0x2000, protocol 0x0800, key.
        let mut gre = vec![0x20, 0x00, 0x08, 0x00, 0, 0, 0, 7];
        gre.extend_from_slice(&inner_ip);
        let outer = eth(&[], 0x0800, &ipv4(47, &gre));
        let o = parse(&outer, LinkType::ETHERNET);
        assert_eq!((o.proto, o.stop, o.payload), (47, None, None));
        let i = inner(&outer, &o).unwrap();
        assert_eq!(i.stop, None);
        assert_eq!(i.l3, Some(14 + 20 + 8));
        assert_eq!((i.proto, i.sport, i.dport), (6, 8080, 50000));
        // GRE carrying Ethernet (TEB) with an IPv6 inner.
        let mut gre_eth = vec![0x00, 0x00, 0x65, 0x58];
        gre_eth.extend_from_slice(&eth(&[(0x8100, 9)], 0x86dd, &ipv6(17, &udp(3, 4, &[]))));
        let outer = ipv4(47, &gre_eth);
        let i = inner(&outer, &parse(&outer, LinkType::RAW)).unwrap();
        assert_eq!(
            (i.l2, i.vlans(), i.ip_version, i.dport),
            (Some(24), &[9u16][..], 6, 4)
        );
        // GTP-U with sequence number and one extension header (PDU session container).
        let mut gtp = vec![0x36, 0xff, 0, 0, 0, 0, 0, 1, 0, 1, 0, 0x85];
        gtp.extend_from_slice(&[1, 0x10, 0x01, 0x00]);
        gtp.extend_from_slice(&ipv6(17, &udp(1000, 2000, b"in")));
        let outer = eth(&[], 0x0800, &ipv4(17, &udp(2152, 2152, &gtp)));
        let o = parse(&outer, LinkType::ETHERNET);
        let i = inner(&outer, &o).unwrap();
        assert_eq!(i.stop, None);
        assert_eq!(i.l3, Some(42 + 16));
        assert_eq!((i.ip_version, i.sport, i.dport), (6, 1000, 2000));
        // GTP-U without optional fields.
        let mut gtp = vec![0x30, 0xff, 0, 0, 0, 0, 0, 1];
        gtp.extend_from_slice(&inner_ip);
        let outer = ipv4(17, &udp(40000, 2152, &gtp));
        let i = inner(&outer, &parse(&outer, LinkType::RAW)).unwrap();
        assert_eq!((i.l3, i.proto, i.stop), (Some(36), 6, None));
        // GTP-C (version 2) is not a tunnel.
        let outer = ipv4(17, &udp(2152, 2152, &[0x48, 0x20, 0, 0, 0, 0, 0, 0]));
        assert_eq!(inner(&outer, &parse(&outer, LinkType::RAW)), None);
        // VXLAN.
        let mut vx = vec![0x08, 0, 0, 0, 0, 0, 0x2a, 0];
        vx.extend_from_slice(&eth(&[], 0x0800, &inner_ip));
        let outer = ipv4(17, &udp(55555, 4789, &vx));
        let i = inner(&outer, &parse(&outer, LinkType::RAW)).unwrap();
        assert_eq!(
            (i.l2, i.l3, i.sport, i.stop),
            (Some(36), Some(50), 8080, None)
        );
        // Plain UDP has no inner headers.
        let outer = ipv4(17, &udp(1, 2, &[]));
        assert_eq!(inner(&outer, &parse(&outer, LinkType::RAW)), None);
    }

    #[test]
    fn ipv4_authentication_header_is_stepped_over() {
        // AH: next header UDP, payload length 4 → (4 + 2) * 4 = 24 bytes.
        let mut ah = vec![17, 4, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1];
        ah.resize(24, 0xab);
        ah.extend_from_slice(&udp(5353, 53, b"q"));
        let f = eth(&[], 0x0800, &ipv4(51, &ah));
        let p = parse(&f, LinkType::ETHERNET);
        assert_eq!((p.stop, p.proto, p.sport, p.dport), (None, 17, 5353, 53));
        assert_eq!(p.l4, Some(14 + 20 + 24));
        // Cut inside the AH: a reason, no panic.
        let p = parse(&f[..14 + 21], LinkType::ETHERNET);
        assert!(p.stop.is_some());
        // An AH whose length runs past the packet (the fuzzer's find): cut, and the transport
        // offset stays inside the packet.
        let mut long = ipv4(51, &[17, 200, 0, 0, 0, 0, 0, 1]);
        long.extend_from_slice(&[0; 8]);
        let p = parse(&long, LinkType::RAW);
        assert!(p.stop.is_some());
        assert!(p.l4.is_none_or(|o| o as usize <= long.len()));
    }

    #[test]
    fn deep_through_mpls_pppoe_llc_and_ppp() {
        let v4 = ipv4(17, &udp(1111, 2222, b"x"));
        let v6 = ipv6(6, &tcp(0x02));
        let mpls = |labels: usize, ip: &[u8]| {
            let mut m = Vec::new();
            for i in 0..labels {
                let bos = u8::from(i + 1 == labels);
                m.extend_from_slice(&[0, 0x10 + i as u8, bos, 64]);
            }
            m.extend_from_slice(ip);
            m
        };
        let pppoe = |proto: &[u8], ip: &[u8]| {
            let mut m = vec![0x11, 0, 0x12, 0x34];
            m.extend_from_slice(&((proto.len() + ip.len()) as u16).to_be_bytes());
            m.extend_from_slice(proto);
            m.extend_from_slice(ip);
            m
        };
        let mut llc = vec![0xaa, 0xaa, 0x03, 0, 0, 0, 0x08, 0x00];
        llc.extend_from_slice(&v4);
        let cases: Vec<(Vec<u8>, LinkType, u8, u8)> = vec![
            (
                eth(&[], 0x8847, &mpls(3, &v4)),
                LinkType::ETHERNET,
                encap::MPLS,
                4,
            ),
            (
                eth(&[(0x8100, 5)], 0x8847, &mpls(1, &v6)),
                LinkType::ETHERNET,
                encap::MPLS,
                6,
            ),
            (
                eth(&[], 0x8864, &pppoe(&[0, 0x21], &v4)),
                LinkType::ETHERNET,
                encap::PPPOE,
                4,
            ),
            (
                eth(&[], 0x8864, &pppoe(&[0x57], &v6)),
                LinkType::ETHERNET,
                encap::PPPOE,
                6,
            ),
            (
                eth(&[], (llc.len()) as u16, &llc),
                LinkType::ETHERNET,
                encap::LLC,
                4,
            ),
            (
                [&[0xff, 0x03, 0x21][..], &v4].concat(),
                LinkType(9),
                encap::PPP,
                4,
            ),
            (
                [&[0x00, 0x57][..], &v6].concat(),
                LinkType(9),
                encap::PPP,
                6,
            ),
        ];
        for (f, link, bits, ver) in cases {
            assert_eq!(parse(&f, link).ip_version, 0, "parse alone stops: {f:02x?}");
            let (p, base, b) = parse_deep(&f, link).unwrap();
            assert_eq!((b, p.ip_version, p.stop), (bits, ver, None), "{f:02x?}");
            let ports = if ver == 4 {
                (1111, 2222)
            } else {
                (0x1f90, 0xc350)
            };
            assert_eq!((p.sport, p.dport), ports);
            assert!(base > 0);
            // Every cut gives a reason or a result, never a panic.
            for n in 0..f.len() {
                let _ = parse_deep(&f[..n], link);
            }
        }
        // An 802.3 frame without SNAP, PPPoE discovery, a stack without a bottom label.
        let stp = eth(&[], 38, &[0x42, 0x42, 0x03, 0, 0, 0, 0, 0]);
        assert_eq!(
            parse_deep(&stp, LinkType::ETHERNET).unwrap_err(),
            StepError::NotIp
        );
        let lcp = eth(&[], 0x8864, &pppoe(&[0xc0, 0x21], &[1, 2, 3, 4]));
        assert_eq!(
            parse_deep(&lcp, LinkType::ETHERNET).unwrap_err(),
            StepError::NotIp
        );
        let endless = eth(&[], 0x8847, &[0u8; 80]);
        assert_eq!(
            parse_deep(&endless, LinkType::ETHERNET).unwrap_err(),
            StepError::Malformed
        );
        // Plain IP goes through untouched.
        let f = eth(&[], 0x0800, &v4);
        assert_eq!(
            parse_deep(&f, LinkType::ETHERNET).unwrap(),
            (parse(&f, LinkType::ETHERNET), 0, 0)
        );
    }

    #[test]
    fn deep_and_tunnel_parses_of_noise_stay_in_bounds() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut rnd = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let heads: [&[u8]; 6] = [
            &[0x88, 0x47],
            &[0x88, 0x64, 0x11, 0, 0, 1, 0, 40],
            &[0, 40, 0xaa, 0xaa, 3, 0, 0, 0, 8, 0],
            &[8, 0, 0x45, 0, 0, 60, 0, 0, 0, 0, 64, 47],
            &[8, 0, 0x45, 0, 0, 60, 0, 0, 0, 0, 64, 4],
            &[8, 0, 0x45, 0, 0, 60, 0, 0, 0, 0, 64, 17],
        ];
        for round in 0..20_000 {
            let mut f: Vec<u8> = (0..12).map(|_| rnd() as u8).collect();
            f.extend_from_slice(heads[round % heads.len()]);
            let n = (rnd() % 120) as usize;
            f.extend((0..n).map(|_| rnd() as u8));
            for link in [1u32, 9, 50, 104, 113, 101] {
                if let Ok((p, base, _)) = parse_deep(&f, LinkType(link)) {
                    assert!(base <= f.len());
                    let rest = &f[base..];
                    for o in [p.l3, p.l4, p.payload].into_iter().flatten() {
                        assert!(o as usize <= rest.len());
                    }
                    if let Some(i) = tunnel_inner(rest, &p) {
                        for o in [i.l2, i.l3, i.l4, i.payload].into_iter().flatten() {
                            assert!(o as usize <= rest.len());
                        }
                    }
                }
            }
        }
    }
}

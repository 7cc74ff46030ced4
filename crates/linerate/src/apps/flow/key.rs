//! Packet to flow key: the one place where the flow monitor reads headers.
//!
//! [`extract`] takes a captured frame and its link type and returns the canonical flow key
//! (lower endpoint first, so both directions of a conversation give the same key), which side
//! sent the packet, and the few per-packet facts the flow table keeps (TCP flags, ICMP type and
//! code, encapsulation). Packets that cannot be put in a flow come back as a [`NotFlow`] reason.
//! Every read is bounds-checked; no input makes it panic.

use crate::port::LinkType;
pub use crate::wire::Tunnels;
use crate::wire::{self, Layer, WireError};

/// Why a packet was not put in a flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(usize)]
pub enum NotFlow {
    /// Not IPv4 or IPv6 (ARP, STP, LLDP, ...).
    NonIp = 0,
    /// A non-first IP fragment (no transport header to key it by).
    Fragment,
    /// A header is cut short by the capture length.
    Truncated,
    /// A header is inconsistent (bad version, header length, ...).
    Malformed,
    /// The capture's link type is not one the flow monitor reads.
    UnsupportedLink,
}

impl NotFlow {
    /// Number of reasons.
    pub const COUNT: usize = 5;
    /// All reasons, in counter order.
    pub const ALL: [NotFlow; Self::COUNT] = [
        NotFlow::NonIp,
        NotFlow::Fragment,
        NotFlow::Truncated,
        NotFlow::Malformed,
        NotFlow::UnsupportedLink,
    ];
    /// The name used in output.
    pub fn name(self) -> &'static str {
        match self {
            NotFlow::NonIp => "non_ip",
            NotFlow::Fragment => "fragment",
            NotFlow::Truncated => "truncated",
            NotFlow::Malformed => "malformed",
            NotFlow::UnsupportedLink => "unsupported_link",
        }
    }
}

/// Key flag: the addresses are IPv6.
pub const K_V6: u8 = 1;
/// Key flag: an ICMP flow keyed by type and code (not an echo keyed by identifier).
pub const K_ICMP_OTHER: u8 = 2;

/// Encapsulation bit: Ethernet framing.
pub const E_ETH: u8 = 1;
/// Encapsulation bit: 802.1Q / 802.1ad tag.
pub const E_VLAN: u8 = 2;
/// Encapsulation bit: MPLS label stack.
pub const E_MPLS: u8 = 4;
/// Encapsulation bit: the packet was a first IP fragment.
pub const E_FRAG: u8 = 8;
/// Encapsulation bit: PPPoE session.
pub const E_PPPOE: u8 = 16;
/// Encapsulation bit: a non-first fragment (only from [`extract_fragment`]; never shown).
pub const E_LATER: u8 = 32;

/// A canonical flow key: endpoint `a` sorts before endpoint `b` (address, then port), so both
/// directions of a conversation have the same key. IPv4 addresses use the first 4 bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(C)]
pub struct FlowKey {
    /// Lower endpoint's address.
    pub a: [u8; 16],
    /// Higher endpoint's address.
    pub b: [u8; 16],
    /// Lower endpoint's port (ICMP: echo identifier, or type<<8|code).
    pub pa: u16,
    /// Higher endpoint's port.
    pub pb: u16,
    /// Outer VLAN id (0: untagged).
    pub vlan: u16,
    /// IP protocol number.
    pub proto: u8,
    /// `K_*` bits.
    pub flags: u8,
}

impl FlowKey {
    /// Whether the addresses are IPv6.
    #[inline(always)]
    pub fn is_v6(&self) -> bool {
        self.flags & K_V6 != 0
    }

    /// A symmetric hash (the key is canonical, so any hash of it is the same both ways).
    #[inline(always)]
    pub fn hash(&self) -> u32 {
        const M: u64 = 0x9E37_79B9_7F4A_7C15;
        let w = |s: &[u8; 16], i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&s[i..i + 8]);
            u64::from_le_bytes(b)
        };
        let tail = (self.pa as u64)
            | (self.pb as u64) << 16
            | (self.vlan as u64) << 32
            | (self.proto as u64) << 48
            | (self.flags as u64) << 56;
        let mut h = 0u64;
        for x in [
            w(&self.a, 0),
            w(&self.a, 8),
            w(&self.b, 0),
            w(&self.b, 8),
            tail,
        ] {
            h = (h.rotate_left(5) ^ x).wrapping_mul(M);
        }
        (h ^ (h >> 32)) as u32
    }
}

/// What one packet contributes to its flow.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PktInfo {
    /// The canonical key.
    pub key: FlowKey,
    /// The packet's source is the key's endpoint `a`.
    pub from_a: bool,
    /// TCP flags (0 for other protocols).
    pub tcp_flags: u8,
    /// ICMP type.
    pub icmp_type: u8,
    /// ICMP code.
    pub icmp_code: u8,
    /// `E_*` bits.
    pub encap: u8,
    /// Bytes of link header that are not on the wire (cooked, PPP, loopback headers): Argus
    /// counts bytes from the IP header on these links and from the Ethernet header on Ethernet.
    pub pseudo: u8,
    /// IP identification of a fragment (first or later), 0 otherwise.
    pub frag_id: u32,
}

/// TCP FIN.
pub const TCP_FIN: u8 = 0x01;
/// TCP SYN.
pub const TCP_SYN: u8 = 0x02;
/// TCP RST.
pub const TCP_RST: u8 = 0x04;
/// TCP PSH.
pub const TCP_PSH: u8 = 0x08;
/// TCP ACK.
pub const TCP_ACK: u8 = 0x10;

#[inline(always)]
fn be16(d: &[u8], at: usize) -> Option<u16> {
    d.get(at..at + 2).map(|b| u16::from_be_bytes([b[0], b[1]]))
}

/// ICMP types that are echoes (request, reply), v4 and v6.
#[inline(always)]
pub fn is_echo(proto: u8, t: u8) -> bool {
    match proto {
        1 => t == 8 || t == 0,
        58 => t == 128 || t == 129,
        _ => false,
    }
}

/// Whether an ICMP type is the request side of an echo.
#[inline(always)]
pub fn is_echo_request(proto: u8, t: u8) -> bool {
    (proto == 1 && t == 8) || (proto == 58 && t == 128)
}

/// Reads the link, network and transport headers of one captured frame. A non-first IP fragment
/// is `Err(NotFlow::Fragment)`: see [`extract_fragment`].
#[inline]
pub fn extract(data: &[u8], link: LinkType) -> Result<PktInfo, NotFlow> {
    read(data, link, false, Tunnels::Outer)
}

/// [`extract`], with tunnels (GRE, IPIP, 6in4, VXLAN) keyed by their outer header or by the
/// packet inside (`--tunnels inner`).
#[inline]
pub fn extract_in(data: &[u8], link: LinkType, tunnels: Tunnels) -> Result<PktInfo, NotFlow> {
    read(data, link, false, tunnels)
}

/// Reads a non-first IP fragment: its key has the addresses (lower first) and protocol, ports 0,
/// `frag_id` set and `E_FRAG | E_LATER` in `encap`; a [`super::frag::FragCache`] completes it
/// from its first fragment. Anything else is an error.
pub fn extract_fragment(data: &[u8], link: LinkType) -> Result<PktInfo, NotFlow> {
    extract_fragment_in(data, link, Tunnels::Outer)
}

/// [`extract_fragment`] with a choice of tunnel header ([`extract_in`]).
pub fn extract_fragment_in(
    data: &[u8],
    link: LinkType,
    tunnels: Tunnels,
) -> Result<PktInfo, NotFlow> {
    let info = read(data, link, true, tunnels)?;
    if info.encap & E_LATER == 0 {
        return Err(NotFlow::Malformed);
    }
    Ok(info)
}

/// The one function that turns a frame into a flow key: `linerate::wire::parse_deep` reads the
/// headers, stepping over PPP (2- or 1-byte protocol field), Cisco HDLC, MPLS, PPPoE and
/// LLC/SNAP to the IP packet inside.
fn read(data: &[u8], link: LinkType, later: bool, tunnels: Tunnels) -> Result<PktInfo, NotFlow> {
    let mut info = PktInfo::default();
    let (outer, base, bits) = wire::parse_deep(data, link).map_err(|e| match e {
        wire::StepError::Truncated => NotFlow::Truncated,
        wire::StepError::NotIp => NotFlow::NonIp,
        wire::StepError::Malformed => NotFlow::Malformed,
    })?;
    if bits & wire::parse::encap::MPLS != 0 {
        info.encap |= E_MPLS;
    }
    if bits & wire::parse::encap::PPPOE != 0 {
        info.encap |= E_PPPOE;
    }
    // Link-level facts (VLAN, link header bytes) are the outer frame's; the key is the tunnel's
    // inner packet's with `--tunnels inner`.
    let p = match tunnels {
        Tunnels::Inner => {
            wire::tunnel_inner(data.get(base..).unwrap_or_default(), &outer).unwrap_or(outer)
        }
        Tunnels::Outer => outer,
    };
    if link.0 == 1 {
        info.encap |= E_ETH;
    }
    if outer.vlan_count > 0 {
        info.encap |= E_VLAN;
        info.key.vlan = outer.outer_vlan() & 0x0fff;
    }
    if let Some(f) = p.fragment {
        info.encap |= E_FRAG;
        info.frag_id = f.id;
    }
    // Bytes of link header not on a wire (cooked, PPP, HDLC, loopback headers).
    if link.0 != 1 {
        info.pseudo = (base + outer.l3.unwrap_or(0) as usize).min(255) as u8;
    }
    let l4len = match p.l4 {
        Some(l4) => (p.l3_end as usize).saturating_sub(l4 as usize),
        None => 0,
    };
    match p.stop {
        None | Some(WireError::NoNextHeader) => {}
        Some(WireError::NonFirstFragment) => {
            return later_fragment(
                p.proto,
                p.src,
                p.dst,
                if p.ip_version == 6 { K_V6 } else { 0 },
                &mut info,
                later,
            );
        }
        // A transport header cut short (or with a bad length) still names its flow when its ports
        // (or ICMP type) were read.
        Some(WireError::Truncated(Layer::Tcp | Layer::Udp | Layer::Sctp))
        | Some(WireError::BadHeaderLength(Layer::Tcp))
            if l4len >= 4 => {}
        Some(WireError::Truncated(Layer::Icmp)) if l4len >= 1 => {}
        Some(WireError::Truncated(_)) => return Err(NotFlow::Truncated),
        Some(WireError::NotIp) => return Err(NotFlow::NonIp),
        Some(WireError::UnsupportedLink(_)) => return Err(NotFlow::UnsupportedLink),
        Some(_) => return Err(NotFlow::Malformed),
    }
    if p.ip_version != 4 && p.ip_version != 6 {
        return Err(NotFlow::NonIp);
    }
    let kflags = if p.ip_version == 6 { K_V6 } else { 0 };
    let proto = p.proto;
    let mut flags = kflags;
    let (sport, dport) = match proto {
        6 | 17 | 132 => {
            if proto == 6 {
                info.tcp_flags = p.tcp_flags as u8;
            }
            (p.sport, p.dport)
        }
        // UDP-Lite and DCCP: ports where UDP and TCP have them.
        136 | 33 => {
            let l4 = base + p.l4.unwrap_or(0) as usize;
            let s = be16(data, l4).ok_or(NotFlow::Truncated)?;
            let d = be16(data, l4 + 2).ok_or(NotFlow::Truncated)?;
            (s, d)
        }
        1 | 58 => {
            let (t, c) = (p.icmp_type, p.icmp_code);
            info.icmp_type = t;
            info.icmp_code = c;
            if is_echo(proto, t) {
                let id = if l4len >= 6 {
                    be16(data, base + p.l4.unwrap_or(0) as usize + 4).unwrap_or(0)
                } else {
                    0
                };
                (id, id)
            } else {
                flags |= K_ICMP_OTHER;
                let tc = (t as u16) << 8 | c as u16;
                (tc, tc)
            }
        }
        _ => (0, 0),
    };
    info.key.proto = proto;
    info.key.flags = flags;
    let (src, dst) = (p.src, p.dst);
    if (src, sport) <= (dst, dport) {
        info.key.a = src;
        info.key.b = dst;
        info.key.pa = sport;
        info.key.pb = dport;
        info.from_a = true;
    } else {
        info.key.a = dst;
        info.key.b = src;
        info.key.pa = dport;
        info.key.pb = sport;
        info.from_a = false;
    }
    Ok(info)
}

fn later_fragment(
    proto: u8,
    src: [u8; 16],
    dst: [u8; 16],
    kflags: u8,
    info: &mut PktInfo,
    later: bool,
) -> Result<PktInfo, NotFlow> {
    if !later {
        return Err(NotFlow::Fragment);
    }
    info.encap |= E_LATER;
    info.key.proto = proto;
    info.key.flags = kflags;
    info.from_a = src <= dst;
    (info.key.a, info.key.b) = if info.from_a { (src, dst) } else { (dst, src) };
    Ok(*info)
}

#[cfg(all(test, not(loom)))]
pub(crate) mod tests {
    use super::*;

    /// An Ethernet/IPv4 frame with a transport header (TCP: flags; UDP; ICMP: type, id).
    pub(crate) fn eth_v4(
        src: [u8; 4],
        dst: [u8; 4],
        proto: u8,
        sport: u16,
        dport: u16,
        tcp_flags: u8,
        payload: usize,
    ) -> Vec<u8> {
        let l4len = match proto {
            6 => 20,
            17 => 8,
            _ => 8,
        };
        let total = 20 + l4len + payload;
        let mut f = vec![0u8; 14 + total];
        f[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
        f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        let ip = &mut f[14..];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        ip[8] = 64;
        ip[9] = proto;
        ip[12..16].copy_from_slice(&src);
        ip[16..20].copy_from_slice(&dst);
        let l4 = &mut ip[20..];
        match proto {
            6 | 17 => {
                l4[0..2].copy_from_slice(&sport.to_be_bytes());
                l4[2..4].copy_from_slice(&dport.to_be_bytes());
                if proto == 6 {
                    l4[12] = 0x50;
                    l4[13] = tcp_flags;
                } else {
                    l4[4..6].copy_from_slice(&((8 + payload) as u16).to_be_bytes());
                }
            }
            1 => {
                l4[0] = sport as u8; // type
                l4[1] = 0;
                l4[4..6].copy_from_slice(&dport.to_be_bytes()); // id
            }
            _ => {}
        }
        f
    }

    #[test]
    fn both_directions_give_one_key() {
        let a = eth_v4([10, 0, 0, 1], [10, 0, 0, 2], 6, 40000, 80, TCP_SYN, 0);
        let b = eth_v4(
            [10, 0, 0, 2],
            [10, 0, 0, 1],
            6,
            80,
            40000,
            TCP_SYN | TCP_ACK,
            0,
        );
        let ka = extract(&a, LinkType::ETHERNET).unwrap();
        let kb = extract(&b, LinkType::ETHERNET).unwrap();
        assert_eq!(ka.key, kb.key);
        assert_eq!(ka.key.hash(), kb.key.hash());
        assert!(ka.from_a && !kb.from_a);
        assert_eq!(ka.tcp_flags, TCP_SYN);
        assert_eq!(kb.tcp_flags, TCP_SYN | TCP_ACK);
        assert_eq!(ka.key.pa, 40000);
        assert_eq!(ka.key.proto, 6);
    }

    #[test]
    fn icmp_echo_request_and_reply_share_a_key() {
        let q = eth_v4([10, 0, 0, 1], [10, 0, 0, 2], 1, 8, 0x1234, 0, 56);
        let r = eth_v4([10, 0, 0, 2], [10, 0, 0, 1], 1, 0, 0x1234, 0, 56);
        let kq = extract(&q, LinkType::ETHERNET).unwrap();
        let kr = extract(&r, LinkType::ETHERNET).unwrap();
        assert_eq!(kq.key, kr.key);
        assert_eq!((kq.icmp_type, kr.icmp_type), (8, 0));
    }

    #[test]
    fn vlan_fragments_and_non_ip() {
        let mut f = eth_v4([10, 0, 0, 1], [10, 0, 0, 2], 17, 1, 2, 0, 10);
        // insert a VLAN tag 42
        let mut v = f[..12].to_vec();
        v.extend_from_slice(&[0x81, 0x00, 0x00, 42]);
        v.extend_from_slice(&f[12..]);
        let k = extract(&v, LinkType::ETHERNET).unwrap();
        assert_eq!(k.key.vlan, 42);
        assert_ne!(k.encap & E_VLAN, 0);
        // non-first fragment
        f[14 + 6] = 0x00;
        f[14 + 7] = 0x10;
        assert_eq!(extract(&f, LinkType::ETHERNET), Err(NotFlow::Fragment));
        // ARP
        f[12] = 0x08;
        f[13] = 0x06;
        assert_eq!(extract(&f, LinkType::ETHERNET), Err(NotFlow::NonIp));
        assert_eq!(
            extract(&f[..10], LinkType::ETHERNET),
            Err(NotFlow::Truncated)
        );
        assert_eq!(extract(&f, LinkType(147)), Err(NotFlow::UnsupportedLink));
    }

    #[test]
    fn ipv6_raw_with_extension_header() {
        let mut p = vec![0u8; 40 + 8 + 8];
        p[0] = 0x60;
        p[4..6].copy_from_slice(&16u16.to_be_bytes());
        p[6] = 0; // hop-by-hop
        p[8] = 0x20;
        p[24] = 0xfe;
        p[40] = 17; // next: UDP
        p[41] = 0;
        p[48..50].copy_from_slice(&53u16.to_be_bytes());
        p[50..52].copy_from_slice(&5353u16.to_be_bytes());
        let k = extract(&p, LinkType::RAW).unwrap();
        assert!(k.key.is_v6());
        assert_eq!(k.key.proto, 17);
        // 0x20.. < 0xfe.. so the source is a
        assert!(k.from_a);
        assert_eq!((k.key.pa, k.key.pb), (53, 5353));
    }

    #[test]
    fn never_panics_on_prefixes_and_noise() {
        let f = eth_v4([10, 0, 0, 1], [10, 0, 0, 2], 6, 1, 2, TCP_SYN, 4);
        for n in 0..f.len() {
            for lt in [1u32, 0, 9, 50, 104, 101, 113, 276, 228, 229, 108] {
                let _ = extract(&f[..n], LinkType(lt));
            }
        }
        let mut x = 0x1234_5678u32;
        let mut buf = [0u8; 96];
        for _ in 0..20000 {
            for b in buf.iter_mut() {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                *b = x as u8;
            }
            buf[12] = 0x08;
            buf[13] = if x & 1 == 0 { 0x00 } else { 0xdd };
            buf[14] = if x & 2 == 0 { 0x45 } else { 0x60 };
            let _ = extract(&buf[..(x as usize % 96)], LinkType::ETHERNET);
        }
    }

    #[test]
    fn through_ipv4_ah_llc_snap_and_compressed_ppp() {
        let f = eth_v4([10, 0, 0, 1], [10, 0, 0, 2], 17, 1111, 53, 0, 10);
        let plain = extract(&f, LinkType::ETHERNET).unwrap().key;
        let ip = &f[14..];
        // IPv4 AH (next header UDP, 16 bytes) between the IP and UDP headers.
        let mut ah = f.clone();
        ah[14 + 9] = 51;
        ah.splice(34..34, [17, 2, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 9, 9, 9, 9]);
        let total = u16::from_be_bytes([ah[16], ah[17]]) + 16;
        ah[16..18].copy_from_slice(&total.to_be_bytes());
        assert_eq!(extract(&ah, LinkType::ETHERNET).unwrap().key, plain);
        // 802.3 + LLC/SNAP.
        let mut llc = f[..12].to_vec();
        llc.extend_from_slice(&((8 + ip.len()) as u16).to_be_bytes());
        llc.extend_from_slice(&[0xaa, 0xaa, 0x03, 0, 0, 0, 0x08, 0x00]);
        llc.extend_from_slice(ip);
        assert_eq!(extract(&llc, LinkType::ETHERNET).unwrap().key, plain);
        // PPPoE session with the 1-byte PPP protocol, and PPP links with it.
        let mut pppoe = f[..12].to_vec();
        pppoe.extend_from_slice(&[0x88, 0x64, 0x11, 0, 0, 1]);
        pppoe.extend_from_slice(&((1 + ip.len()) as u16).to_be_bytes());
        pppoe.push(0x21);
        pppoe.extend_from_slice(ip);
        let k = extract(&pppoe, LinkType::ETHERNET).unwrap();
        assert_eq!((k.key, k.encap & E_PPPOE), (plain, E_PPPOE));
        for link in [9, 50] {
            let ppp = [&[0xff, 0x03, 0x21][..], ip].concat();
            assert_eq!(extract(&ppp, LinkType(link)).unwrap().key, plain);
            let ppp = [&[0x21][..], ip].concat();
            assert_eq!(extract(&ppp, LinkType(link)).unwrap().key, plain);
        }
    }
}

//! Packet templates, built once with their checksums: Ethernet (an 802.1Q tag, or two for
//! QinQ: 802.1ad outside), MPLS labels, a GRE or VXLAN tunnel (outer IPv4), then IPv4 or IPv6 with
//! UDP, TCP or an ICMP/ICMPv6 echo request; or an ARP request. Each packet is a copy whose varied
//! fields (addresses, ports, length, the probe signature) are written and whose checksums are
//! updated incrementally (RFC 1624), not recomputed.

use crate::wire::checksum::{self, update16, update32};
use crate::wire::emit::{
    fill_transport_checksum_v4, fill_transport_checksum_v6, EthernetRepr, Ipv4Repr, Ipv6Repr,
    TcpRepr, UdpRepr, VlanTag,
};
use crate::wire::{ethertype, proto, WireError};
use std::net::{IpAddr, Ipv4Addr};

/// Transport protocol of a template.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum L4 {
    /// UDP.
    Udp,
    /// TCP (a bare segment with the flags given).
    Tcp,
    /// ICMP echo request (ICMPv6 echo request over IPv6): the identifier is the source port,
    /// the sequence number the destination port.
    Icmp,
    /// ARP request (IPv4 only; no transport, no ports): who has the destination address, tell
    /// the source address.
    Arp,
}

impl L4 {
    /// Its name in flags and messages.
    pub fn name(self) -> &'static str {
        match self {
            L4::Udp => "udp",
            L4::Tcp => "tcp",
            L4::Icmp => "icmp",
            L4::Arp => "arp",
        }
    }
}

impl std::str::FromStr for L4 {
    type Err = String;
    fn from_str(s: &str) -> Result<L4, String> {
        match s {
            "udp" => Ok(L4::Udp),
            "tcp" => Ok(L4::Tcp),
            "icmp" | "icmp6" | "icmpv6" => Ok(L4::Icmp),
            "arp" => Ok(L4::Arp),
            _ => Err(format!("unknown protocol '{s}': use udp, tcp, icmp or arp")),
        }
    }
}

/// A tunnel around the template's IP packet (outer addresses IPv4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encap {
    /// GRE (RFC 2784, protocol 47) carrying the IP packet.
    Gre {
        /// Outer source.
        src: Ipv4Addr,
        /// Outer destination.
        dst: Ipv4Addr,
    },
    /// VXLAN (RFC 7348, UDP port 4789) carrying the whole inner Ethernet frame (same MACs).
    Vxlan {
        /// VXLAN network identifier (24 bits).
        vni: u32,
        /// Outer source.
        src: Ipv4Addr,
        /// Outer destination.
        dst: Ipv4Addr,
    },
}

/// VXLAN's UDP port (IANA).
pub const VXLAN_PORT: u16 = 4789;
/// Source port of the outer UDP header of VXLAN (from the dynamic range).
pub const VXLAN_SPORT: u16 = 49152;
/// MPLS unicast ethertype.
pub const MPLS_UNICAST: u16 = 0x8847;
/// What a template's packets look like.
#[derive(Clone, Debug)]
pub struct TemplateSpec {
    /// Source MAC.
    pub src_mac: [u8; 6],
    /// Destination MAC.
    pub dst_mac: [u8; 6],
    /// An 802.1Q tag with this VLAN id (1..=4094).
    pub vlan: Option<u16>,
    /// An 802.1ad (QinQ) service tag with this VLAN id outside the 802.1Q tag (1..=4094;
    /// needs `vlan`).
    pub svlan: Option<u16>,
    /// MPLS labels after the Ethernet header, outermost first (at most 8, each below 2^20).
    pub mpls: Vec<u32>,
    /// A tunnel around the IP packet.
    pub encap: Option<Encap>,
    /// Source address (its family picks IPv4 or IPv6; both addresses must be of one family).
    pub src_ip: IpAddr,
    /// Destination address.
    pub dst_ip: IpAddr,
    /// Transport protocol.
    pub l4: L4,
    /// Source port.
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
    /// TTL or hop limit.
    pub ttl: u8,
    /// TCP flags (ignored for UDP).
    pub tcp_flags: u8,
}

impl Default for TemplateSpec {
    fn default() -> Self {
        TemplateSpec {
            src_mac: [0x02, 0, 0, 0, 0, 0x01],
            dst_mac: [0x02, 0, 0, 0, 0, 0x02],
            vlan: None,
            svlan: None,
            mpls: Vec::new(),
            encap: None,
            src_ip: IpAddr::from([198, 18, 0, 1]),
            dst_ip: IpAddr::from([198, 18, 0, 2]),
            l4: L4::Udp,
            sport: 1024,
            dport: 9,
            ttl: 64,
            tcp_flags: 0x02,
        }
    }
}

/// Errors building a template.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TemplateError {
    /// Source and destination are of different families.
    #[error("source and destination addresses must both be IPv4 or both IPv6")]
    MixedFamilies,
    /// A VLAN id outside 1..=4094 (0 means no VLAN, 4095 is reserved: IEEE 802.1Q).
    #[error(
        "VLAN id {0} is outside 1..4094 (802.1Q: 0 means priority-tagged without a VLAN, \
         4095 is reserved)"
    )]
    BadVlan(u16),
    /// Headers that do not go together.
    #[error("{0}")]
    Unsupported(String),
    /// A frame size too small for the headers or too big for a frame.
    #[error("frame size {size} B is outside {min}..={max} B for these headers")]
    BadSize {
        /// Asked for (including the 4 B CRC).
        size: u32,
        /// Smallest possible.
        min: u32,
        /// Largest possible.
        max: u32,
    },
    /// A header could not be written (does not happen at the template's size).
    #[error("cannot build the headers: {0}")]
    Wire(#[from] WireError),
}

/// Where the headers are in a template's packets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Offset of the IP header.
    pub l3: usize,
    /// Offset of the transport header.
    pub l4: usize,
    /// Offset of the transport payload.
    pub payload: usize,
    /// IPv6 (else IPv4).
    pub v6: bool,
    /// Transport protocol.
    pub proto: L4,
    /// Offset of the outer IPv4 header of a tunnel.
    pub outer_ip: Option<usize>,
    /// Offset of the outer UDP header of a VXLAN tunnel.
    pub outer_udp: Option<usize>,
}

impl Layout {
    /// Offset of the transport checksum (ARP has none: [`Layout::has_l4_csum`]).
    pub fn l4_csum(&self) -> usize {
        self.l4
            + match self.proto {
                L4::Udp => 6,
                L4::Tcp => 16,
                L4::Icmp | L4::Arp => 2,
            }
    }
    /// Whether the packets have a transport checksum (all but ARP).
    pub fn has_l4_csum(&self) -> bool {
        self.proto != L4::Arp
    }
    /// Whether the transport checksum covers a pseudo-header with the addresses and length
    /// (UDP, TCP, ICMPv6; not ICMP over IPv4).
    pub fn pseudo(&self) -> bool {
        match self.proto {
            L4::Udp | L4::Tcp => true,
            L4::Icmp => self.v6,
            L4::Arp => false,
        }
    }
    /// Offset of the source port (the echo identifier of ICMP).
    pub fn sport(&self) -> usize {
        self.l4 + if self.proto == L4::Icmp { 4 } else { 0 }
    }
    /// Offset of the destination port (the echo sequence number of ICMP).
    pub fn dport(&self) -> usize {
        self.l4 + if self.proto == L4::Icmp { 6 } else { 2 }
    }
    /// Offset of the low 32 bits of the source address (ARP: the sender's address).
    pub fn src_ip(&self) -> usize {
        if self.proto == L4::Arp {
            self.l3 + 14
        } else if self.v6 {
            self.l3 + 20
        } else {
            self.l3 + 12
        }
    }
    /// Offset of the low 32 bits of the destination address (ARP: the target's address).
    pub fn dst_ip(&self) -> usize {
        if self.proto == L4::Arp {
            self.l3 + 24
        } else if self.v6 {
            self.l3 + 36
        } else {
            self.l3 + 16
        }
    }
}

/// Bytes of the probe signature at the start of the payload: magic (2), stream (2), sequence
/// (4), send time in ns since the epoch (8), all big-endian.
pub const SIG_LEN: usize = 16;
/// Magic of the probe signature ("LR").
pub const SIG_MAGIC: u16 = 0x4c52;

/// Values of the varied fields of one packet. Fields equal to the template's cost nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Vals {
    /// Frame length in the buffer (without the CRC).
    pub len: usize,
    /// Source IPv4 address, or the low 32 bits of the IPv6 one.
    pub src_ip: u32,
    /// Destination, as `src_ip`.
    pub dst_ip: u32,
    /// Source port.
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
    /// Source MAC.
    pub src_mac: [u8; 6],
    /// Destination MAC.
    pub dst_mac: [u8; 6],
}

/// A built template.
#[derive(Clone, Debug)]
pub struct Template {
    bytes: Vec<u8>,
    layout: Layout,
    base: Vals,
    ip_csum: u16,
    l4_csum: u16,
    outer_csum: u16,
    /// Its largest frame (without CRC): the length it is built at.
    max: usize,
}

/// Largest frame (without CRC) of a template built with [`Template::new`]: a standard
/// 1518-byte Ethernet frame.
pub const MAX_FRAME: usize = 1514;
/// Largest frame (without CRC) any template makes ([`Template::with_max`]): a jumbo frame
/// carrying a 9000-byte IP packet with an 802.1Q tag (9022 B with the CRC).
pub const MAX_JUMBO_FRAME: usize = 9018;

/// Checks what a template cannot be built from (a size outside the frame sizes, mixed
/// address families, a bad VLAN, MPLS label or VNI, ARP where it cannot go); whether it is
/// IPv6.
fn check_spec(spec: &TemplateSpec, max: usize) -> Result<bool, TemplateError> {
    if !(MAX_FRAME..=MAX_JUMBO_FRAME).contains(&max) {
        return Err(TemplateError::BadSize {
            size: max as u32 + 4,
            min: MAX_FRAME as u32 + 4,
            max: MAX_JUMBO_FRAME as u32 + 4,
        });
    }
    let v6 = match (spec.src_ip, spec.dst_ip) {
        (IpAddr::V4(_), IpAddr::V4(_)) => false,
        (IpAddr::V6(_), IpAddr::V6(_)) => true,
        _ => return Err(TemplateError::MixedFamilies),
    };
    let un = |s: &str| Err(TemplateError::Unsupported(s.to_string()));
    for v in [spec.vlan, spec.svlan].into_iter().flatten() {
        if !(1..=4094).contains(&v) {
            return Err(TemplateError::BadVlan(v));
        }
    }
    if spec.svlan.is_some() && spec.vlan.is_none() {
        return un("an 802.1ad service tag needs an inner 802.1Q tag (--vlan OUTER,INNER)");
    }
    if spec.mpls.len() > 8 {
        return un("at most 8 MPLS labels");
    }
    if let Some(l) = spec.mpls.iter().find(|&&l| l >= 1 << 20) {
        return Err(TemplateError::Unsupported(format!(
            "MPLS label {l} is above 1048575 (20 bits)"
        )));
    }
    if spec.l4 == L4::Arp {
        if v6 {
            return un("ARP is IPv4's: IPv6 finds neighbours with ICMPv6 (use IPv4 addresses)");
        }
        if spec.encap.is_some() || !spec.mpls.is_empty() {
            return un("ARP is not carried in a tunnel or under MPLS labels");
        }
    }
    if let Some(Encap::Vxlan { vni, .. }) = spec.encap {
        if vni >= 1 << 24 {
            return Err(TemplateError::Unsupported(format!(
                "VXLAN VNI {vni} is above 16777215 (24 bits)"
            )));
        }
    }
    Ok(v6)
}

/// The rest of an ARP request's template, its link-layer headers in `b` up to `l3`.
fn arp(
    spec: &TemplateSpec,
    mut b: Vec<u8>,
    l3: usize,
    max: usize,
) -> Result<Template, TemplateError> {
    let (IpAddr::V4(s), IpAddr::V4(d)) = (spec.src_ip, spec.dst_ip) else {
        return Err(TemplateError::MixedFamilies);
    };
    let a = &mut b[l3..l3 + 28];
    a[0..2].copy_from_slice(&1u16.to_be_bytes());
    a[2..4].copy_from_slice(&ethertype::IPV4.to_be_bytes());
    a[4] = 6;
    a[5] = 4;
    a[6..8].copy_from_slice(&1u16.to_be_bytes());
    a[8..14].copy_from_slice(&spec.src_mac);
    a[14..18].copy_from_slice(&s.octets());
    a[24..28].copy_from_slice(&d.octets());
    let layout = Layout {
        l3,
        l4: l3 + 28,
        payload: l3 + 28,
        v6: false,
        proto: L4::Arp,
        outer_ip: None,
        outer_udp: None,
    };
    let base = Vals {
        len: max,
        src_ip: u32::from(s),
        dst_ip: u32::from(d),
        sport: spec.sport,
        dport: spec.dport,
        src_mac: spec.src_mac,
        dst_mac: spec.dst_mac,
    };
    Ok(Template {
        bytes: b,
        layout,
        base,
        ip_csum: 0,
        l4_csum: 0,
        outer_csum: 0,
        max,
    })
}

impl Template {
    /// Builds the template for frames up to [`MAX_FRAME`] (1518 B with the CRC); packets are
    /// cut to their length.
    pub fn new(spec: &TemplateSpec) -> Result<Template, TemplateError> {
        Self::with_max(spec, MAX_FRAME)
    }

    /// Builds the template for frames up to `max` bytes without the CRC (at least
    /// [`MAX_FRAME`], at most [`MAX_JUMBO_FRAME`]: jumbo frames). A template built at
    /// [`MAX_FRAME`] writes the same bytes as [`Template::new`]'s.
    pub fn with_max(spec: &TemplateSpec, max: usize) -> Result<Template, TemplateError> {
        let v6 = check_spec(spec, max)?;
        let mut b = vec![0u8; max];
        let tags: Vec<VlanTag> = spec
            .svlan
            .map(|v| VlanTag {
                tpid: ethertype::QINQ,
                tci: v,
            })
            .into_iter()
            .chain(spec.vlan.map(VlanTag::dot1q))
            .collect();
        let inner_type = match (spec.l4, v6) {
            (L4::Arp, _) => ethertype::ARP,
            (_, true) => ethertype::IPV6,
            (_, false) => ethertype::IPV4,
        };
        let outer_type = if !spec.mpls.is_empty() {
            MPLS_UNICAST
        } else if spec.encap.is_some() {
            ethertype::IPV4
        } else {
            inner_type
        };
        let eth = EthernetRepr::new(spec.dst_mac, spec.src_mac, outer_type).with_vlans(&tags);
        let mut o = eth.emit(&mut b)?;
        for (i, l) in spec.mpls.iter().enumerate() {
            // Label (20 bits), traffic class 0, bottom of stack on the last, TTL 64.
            let bos = u32::from(i + 1 == spec.mpls.len());
            let w = l << 12 | bos << 8 | 64;
            b[o..o + 4].copy_from_slice(&w.to_be_bytes());
            o += 4;
        }
        let (mut outer_ip, mut outer_udp) = (None, None);
        if let Some(e) = spec.encap {
            let (src, dst, p) = match e {
                Encap::Gre { src, dst } => (src, dst, proto::GRE),
                Encap::Vxlan { src, dst, .. } => (src, dst, proto::UDP),
            };
            let inner_len = max - o - Ipv4Repr::HEADER_LEN;
            let ip = Ipv4Repr::new(src.octets(), dst.octets(), p, inner_len as u16);
            outer_ip = Some(o);
            o += ip.emit(&mut b[o..])?;
            match e {
                Encap::Gre { .. } => {
                    // No checksum, key or sequence: flags and version 0, then the protocol.
                    b[o + 2..o + 4].copy_from_slice(&inner_type.to_be_bytes());
                    o += 4;
                }
                Encap::Vxlan { vni, .. } => {
                    outer_udp = Some(o);
                    b[o..o + 2].copy_from_slice(&VXLAN_SPORT.to_be_bytes());
                    b[o + 2..o + 4].copy_from_slice(&VXLAN_PORT.to_be_bytes());
                    b[o + 4..o + 6].copy_from_slice(&((max - o) as u16).to_be_bytes());
                    // UDP checksum 0 over IPv4: none (RFC 7348 recommends it).
                    o += 8;
                    b[o] = 0x08;
                    b[o + 4..o + 8].copy_from_slice(&(vni << 8).to_be_bytes());
                    o += 8;
                    o += EthernetRepr::new(spec.dst_mac, spec.src_mac, inner_type)
                        .emit(&mut b[o..])?;
                }
            }
        }
        let l3 = o;
        if spec.l4 == L4::Arp {
            return arp(spec, b, l3, max);
        }
        let l4 = l3
            + if v6 {
                Ipv6Repr::HEADER_LEN
            } else {
                Ipv4Repr::HEADER_LEN
            };
        let proto = match (spec.l4, v6) {
            (L4::Udp, _) => proto::UDP,
            (L4::Tcp, _) => proto::TCP,
            (_, true) => proto::ICMPV6,
            (_, false) => proto::ICMP,
        };
        let l4_len = (max - l4) as u16;
        match (spec.src_ip, spec.dst_ip) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                let mut ip = Ipv4Repr::new(s.octets(), d.octets(), proto, l4_len);
                ip.ttl = spec.ttl;
                ip.emit(&mut b[l3..])?;
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                let mut ip = Ipv6Repr::new(s.octets(), d.octets(), proto, l4_len);
                ip.hop_limit = spec.ttl;
                ip.emit(&mut b[l3..])?;
            }
            _ => return Err(TemplateError::MixedFamilies),
        }
        let payload = l4
            + match spec.l4 {
                L4::Udp => {
                    UdpRepr::new(spec.sport, spec.dport, l4_len - UdpRepr::HEADER_LEN as u16)
                        .emit(&mut b[l4..])?
                }
                L4::Tcp => {
                    TcpRepr::new(spec.sport, spec.dport, spec.tcp_flags).emit(&mut b[l4..])?
                }
                _ => {
                    // Echo request: type 8 (ICMPv6: 128), code 0, identifier, sequence.
                    b[l4] = if v6 { 128 } else { 8 };
                    b[l4 + 4..l4 + 6].copy_from_slice(&spec.sport.to_be_bytes());
                    b[l4 + 6..l4 + 8].copy_from_slice(&spec.dport.to_be_bytes());
                    8
                }
            };
        let layout = Layout {
            l3,
            l4,
            payload,
            v6,
            proto: spec.l4,
            outer_ip,
            outer_udp,
        };
        match (spec.src_ip, spec.dst_ip) {
            (_, _) if spec.l4 == L4::Icmp && !v6 => {
                let c = checksum::checksum(&b[l4..]);
                b[l4 + 2..l4 + 4].copy_from_slice(&c.to_be_bytes());
            }
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                fill_transport_checksum_v4(s.octets(), d.octets(), proto, &mut b[l4..])?
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                if spec.l4 == L4::Icmp {
                    let c = checksum::transport_v6(&s.octets(), &d.octets(), proto, &b[l4..]);
                    b[l4 + 2..l4 + 4].copy_from_slice(&c.to_be_bytes());
                } else {
                    fill_transport_checksum_v6(&s.octets(), &d.octets(), proto, &mut b[l4..])?
                }
            }
            _ => return Err(TemplateError::MixedFamilies),
        }
        let cs = layout.l4_csum();
        let c = u16::from_be_bytes([b[cs], b[cs + 1]]);
        let rd32 = |o: usize| u32::from_be_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let ip_csum = if v6 {
            0
        } else {
            u16::from_be_bytes([b[l3 + 10], b[l3 + 11]])
        };
        let outer_csum = outer_ip.map_or(0, |o| u16::from_be_bytes([b[o + 10], b[o + 11]]));
        let base = Vals {
            len: max,
            src_ip: rd32(layout.src_ip()),
            dst_ip: rd32(layout.dst_ip()),
            sport: spec.sport,
            dport: spec.dport,
            src_mac: spec.src_mac,
            dst_mac: spec.dst_mac,
        };
        Ok(Template {
            bytes: b,
            layout,
            base,
            ip_csum,
            l4_csum: c,
            outer_csum,
            max,
        })
    }

    /// Where the headers are.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The template's own field values (at the largest size).
    pub fn base(&self) -> Vals {
        self.base
    }

    /// Smallest frame length (without CRC) for these headers: 60 B, or the headers if longer.
    pub fn min_len(&self) -> usize {
        self.layout.payload.max(60)
    }

    /// Largest frame length (without CRC) it writes.
    pub fn max_len(&self) -> usize {
        self.max
    }

    /// Checks a frame size given with its CRC (64..=1518, or up to its largest with
    /// [`Template::with_max`]) and returns the buffer length.
    pub fn check_size(&self, size_with_crc: u32) -> Result<usize, TemplateError> {
        let min = self.min_len() as u32 + 4;
        let max = self.max as u32 + 4;
        if size_with_crc < min || size_with_crc > max {
            return Err(TemplateError::BadSize {
                size: size_with_crc,
                min,
                // Too small: the range a template can be built for, not this one's (built
                // only as large as the sizes asked).
                max: if size_with_crc < min {
                    MAX_JUMBO_FRAME as u32 + 4
                } else {
                    max
                },
            });
        }
        Ok(size_with_crc as usize - 4)
    }

    /// Writes one packet into `out` (at least `v.len` bytes, `v.len` within the template's
    /// sizes) and returns its length. Checksums are updated incrementally from the template's.
    #[inline(always)]
    pub fn write(&self, out: &mut [u8], v: &Vals) -> usize {
        let len = v.len.clamp(self.min_len(), self.max).min(out.len());
        let out = &mut out[..len];
        out.copy_from_slice(&self.bytes[..len]);
        let lay = &self.layout;
        let b = &self.base;
        let mut ip = self.ip_csum;
        let mut l4 = self.l4_csum;
        if v.dst_mac != b.dst_mac {
            out[0..6].copy_from_slice(&v.dst_mac);
        }
        if v.src_mac != b.src_mac {
            out[6..12].copy_from_slice(&v.src_mac);
        }
        if len != self.max {
            if let Some(o) = lay.outer_ip {
                let old = (self.max - o) as u16;
                let new = (len - o) as u16;
                out[o + 2..o + 4].copy_from_slice(&new.to_be_bytes());
                let c = update16(self.outer_csum, old, new);
                out[o + 10..o + 12].copy_from_slice(&c.to_be_bytes());
            }
            if let Some(o) = lay.outer_udp {
                out[o + 4..o + 6].copy_from_slice(&((len - o) as u16).to_be_bytes());
            }
            if lay.proto != L4::Arp {
                let old_l4 = (self.max - lay.l4) as u16;
                let new_l4 = (len.max(lay.payload) - lay.l4) as u16;
                if lay.v6 {
                    out[lay.l3 + 4..lay.l3 + 6].copy_from_slice(&new_l4.to_be_bytes());
                } else {
                    let old = (self.max - lay.l3) as u16;
                    let new = (len - lay.l3) as u16;
                    out[lay.l3 + 2..lay.l3 + 4].copy_from_slice(&new.to_be_bytes());
                    ip = update16(ip, old, new);
                }
                // The pseudo-header length, and UDP's own length field.
                if lay.pseudo() {
                    l4 = update16(l4, old_l4, new_l4);
                }
                if lay.proto == L4::Udp {
                    out[lay.l4 + 4..lay.l4 + 6].copy_from_slice(&new_l4.to_be_bytes());
                    l4 = update16(l4, old_l4, new_l4);
                }
            }
        }
        let (l3sum, pseudo) = (!lay.v6 && lay.proto != L4::Arp, lay.pseudo());
        if v.src_ip != b.src_ip {
            let o = lay.src_ip();
            out[o..o + 4].copy_from_slice(&v.src_ip.to_be_bytes());
            if l3sum {
                ip = update32(ip, b.src_ip, v.src_ip);
            }
            if pseudo {
                l4 = update32(l4, b.src_ip, v.src_ip);
            }
        }
        if v.dst_ip != b.dst_ip {
            let o = lay.dst_ip();
            out[o..o + 4].copy_from_slice(&v.dst_ip.to_be_bytes());
            if l3sum {
                ip = update32(ip, b.dst_ip, v.dst_ip);
            }
            if pseudo {
                l4 = update32(l4, b.dst_ip, v.dst_ip);
            }
        }
        if lay.proto == L4::Arp {
            if v.src_mac != b.src_mac {
                // The sender's hardware address follows the Ethernet source.
                out[lay.l3 + 8..lay.l3 + 14].copy_from_slice(&v.src_mac);
            }
            return len;
        }
        if v.sport != b.sport {
            let o = lay.sport();
            out[o..o + 2].copy_from_slice(&v.sport.to_be_bytes());
            l4 = update16(l4, b.sport, v.sport);
        }
        if v.dport != b.dport {
            let o = lay.dport();
            out[o..o + 2].copy_from_slice(&v.dport.to_be_bytes());
            l4 = update16(l4, b.dport, v.dport);
        }
        if l3sum {
            out[lay.l3 + 10..lay.l3 + 12].copy_from_slice(&ip.to_be_bytes());
        }
        put_l4_csum(out, lay, l4);
        len
    }

    /// Whether packets of length `len` have room for the probe signature.
    pub fn has_sig_room(&self, len: usize) -> bool {
        self.layout.has_l4_csum() && len >= self.layout.payload + SIG_LEN
    }
}

#[inline(always)]
fn put_l4_csum(out: &mut [u8], lay: &Layout, mut c: u16) {
    if !lay.has_l4_csum() {
        return;
    }
    if c == 0 && lay.proto == L4::Udp {
        c = 0xffff;
    }
    let o = lay.l4_csum();
    if let Some(d) = out.get_mut(o..o + 2) {
        d.copy_from_slice(&c.to_be_bytes());
    }
}

#[inline(always)]
fn get16(out: &[u8], o: usize) -> u16 {
    match out.get(o..o + 2) {
        Some(s) => u16::from_be_bytes([s[0], s[1]]),
        None => 0,
    }
}

/// Writes the probe signature (stream, sequence; time left zero) into a packet written from a
/// template with a zero payload, updating the transport checksum. No-op when it does not fit.
#[inline(always)]
pub fn put_sig(out: &mut [u8], lay: &Layout, stream: u16, seq: u32) {
    if !lay.has_l4_csum() {
        return;
    }
    let p = lay.payload;
    let Some(s) = out.get_mut(p..p + SIG_LEN) else {
        return;
    };
    s[0..2].copy_from_slice(&SIG_MAGIC.to_be_bytes());
    s[2..4].copy_from_slice(&stream.to_be_bytes());
    s[4..8].copy_from_slice(&seq.to_be_bytes());
    let mut c = get16(out, lay.l4_csum());
    c = update16(c, 0, SIG_MAGIC);
    c = update16(c, 0, stream);
    c = update32(c, 0, seq);
    put_l4_csum(out, lay, c);
}

/// Writes the send time into a packet that carries a signature (its time field zero),
/// updating the transport checksum. No-op when it does not fit.
#[inline(always)]
pub fn put_time(out: &mut [u8], lay: &Layout, ts: u64) {
    if !lay.has_l4_csum() {
        return;
    }
    let p = lay.payload + 8;
    let Some(s) = out.get_mut(p..p + 8) else {
        return;
    };
    s.copy_from_slice(&ts.to_be_bytes());
    let mut c = get16(out, lay.l4_csum());
    c = update32(c, 0, (ts >> 32) as u32);
    c = update32(c, 0, ts as u32);
    put_l4_csum(out, lay, c);
}

/// A probe signature read from a payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sig {
    /// Stream id.
    pub stream: u16,
    /// Sequence number within the stream.
    pub seq: u32,
    /// Send time, ns since the epoch.
    pub ts: u64,
}

/// Reads a signature at the start of `payload`, if the magic is there.
#[inline]
pub fn read_sig(payload: &[u8]) -> Option<Sig> {
    let s = payload.get(..SIG_LEN)?;
    if u16::from_be_bytes([s[0], s[1]]) != SIG_MAGIC {
        return None;
    }
    let mut ts = [0u8; 8];
    ts.copy_from_slice(&s[8..16]);
    Some(Sig {
        stream: u16::from_be_bytes([s[2], s[3]]),
        seq: u32::from_be_bytes([s[4], s[5], s[6], s[7]]),
        ts: u64::from_be_bytes(ts),
    })
}

/// Recomputes every checksum of a packet from scratch (after a script wrote raw bytes).
pub fn fix_checksums(out: &mut [u8], lay: &Layout) {
    let len = out.len();
    if len < lay.payload {
        return;
    }
    if let Some(o) = lay.outer_ip {
        out[o + 10..o + 12].fill(0);
        let c = checksum::checksum(&out[o..o + Ipv4Repr::HEADER_LEN]);
        out[o + 10..o + 12].copy_from_slice(&c.to_be_bytes());
    }
    if lay.proto == L4::Arp {
        return;
    }
    let proto = match (lay.proto, lay.v6) {
        (L4::Udp, _) => proto::UDP,
        (L4::Tcp, _) => proto::TCP,
        (_, true) => proto::ICMPV6,
        (_, false) => proto::ICMP,
    };
    let cs = lay.l4_csum();
    out[cs..cs + 2].fill(0);
    let c = if lay.v6 {
        let mut s = [0u8; 16];
        let mut d = [0u8; 16];
        s.copy_from_slice(&out[lay.l3 + 8..lay.l3 + 24]);
        d.copy_from_slice(&out[lay.l3 + 24..lay.l3 + 40]);
        let end = (lay.l4 + usize::from(get16(out, lay.l3 + 4))).min(len);
        checksum::transport_v6(&s, &d, proto, &out[lay.l4..end])
    } else {
        out[lay.l3 + 10..lay.l3 + 12].fill(0);
        let ic = checksum::checksum(&out[lay.l3..lay.l4]);
        out[lay.l3 + 10..lay.l3 + 12].copy_from_slice(&ic.to_be_bytes());
        let mut s = [0u8; 4];
        let mut d = [0u8; 4];
        s.copy_from_slice(&out[lay.l3 + 12..lay.l3 + 16]);
        d.copy_from_slice(&out[lay.l3 + 16..lay.l3 + 20]);
        let end = (lay.l3 + usize::from(get16(out, lay.l3 + 2))).min(len);
        if lay.proto == L4::Icmp {
            checksum::checksum(&out[lay.l4..end.max(lay.l4)])
        } else {
            checksum::transport_v4(s, d, proto, &out[lay.l4..end.max(lay.l4)])
        }
    };
    put_l4_csum(out, lay, c);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn specs() -> Vec<TemplateSpec> {
        let v4 = TemplateSpec::default();
        let v6 = TemplateSpec {
            src_ip: "2001:db8::1".parse().unwrap(),
            dst_ip: "2001:db8::2".parse().unwrap(),
            ..Default::default()
        };
        let tun = [
            None,
            Some(Encap::Gre {
                src: Ipv4Addr::new(10, 0, 0, 1),
                dst: Ipv4Addr::new(10, 0, 0, 2),
            }),
            Some(Encap::Vxlan {
                vni: 42,
                src: Ipv4Addr::new(10, 0, 0, 1),
                dst: Ipv4Addr::new(10, 0, 0, 2),
            }),
        ];
        let mut v = vec![TemplateSpec {
            l4: L4::Arp,
            vlan: Some(7),
            ..v4.clone()
        }];
        for base in [v4, v6] {
            for l4 in [L4::Udp, L4::Tcp, L4::Icmp] {
                for encap in tun {
                    v.push(TemplateSpec {
                        l4,
                        encap,
                        vlan: Some(20),
                        svlan: Some(10),
                        mpls: vec![100, 200],
                        ..base.clone()
                    });
                }
            }
        }
        v
    }

    #[test]
    fn incremental_checksums_equal_recomputed_ones_for_every_kind() {
        for spec in specs() {
            let t = Template::new(&spec).unwrap();
            let lay = *t.layout();
            let mut a = vec![0u8; MAX_FRAME];
            for (i, len) in [t.min_len(), 100, 333, 1000, MAX_FRAME]
                .into_iter()
                .enumerate()
            {
                let mut v = t.base();
                v.len = len;
                v.src_ip ^= 0x0101_0101 * i as u32;
                v.dst_ip = v.dst_ip.wrapping_add(77 * i as u32);
                if lay.proto != L4::Arp {
                    v.sport = 1000 + i as u16;
                    v.dport = 65535 - i as u16;
                }
                v.src_mac[5] = i as u8;
                let n = t.write(&mut a, &v);
                assert_eq!(n, len.max(t.min_len()));
                if t.has_sig_room(n) {
                    put_sig(&mut a[..n], &lay, 3, 99);
                    put_time(&mut a[..n], &lay, 0x1234_5678_9abc_def0);
                }
                let mut b = a[..n].to_vec();
                fix_checksums(&mut b, &lay);
                assert_eq!(&a[..n], &b[..], "{spec:?} at {len}");
            }
        }
    }

    #[test]
    fn vlan_ids_outside_1_to_4094_and_bad_mixes_are_refused() {
        for v in [0, 4095] {
            let s = TemplateSpec {
                vlan: Some(v),
                ..Default::default()
            };
            assert_eq!(Template::new(&s).unwrap_err(), TemplateError::BadVlan(v));
        }
        let bad = [
            TemplateSpec {
                svlan: Some(10),
                ..Default::default()
            },
            TemplateSpec {
                mpls: vec![1 << 20],
                ..Default::default()
            },
            TemplateSpec {
                l4: L4::Arp,
                src_ip: "2001:db8::1".parse().unwrap(),
                dst_ip: "2001:db8::2".parse().unwrap(),
                ..Default::default()
            },
        ];
        for s in bad {
            assert!(Template::new(&s).is_err(), "{s:?}");
        }
    }
}

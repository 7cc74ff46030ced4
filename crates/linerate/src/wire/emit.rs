//! Header builders, the inverse of the views: a `*Repr` holds a header's fields and `emit` writes
//! it at the start of a buffer, returning the header's length.
//!
//! Each `emit` fills what the header alone determines (lengths, the IPv4 header checksum) and
//! leaves transport checksums at zero, because they cover the payload: once the payload is in
//! place, [`fill_transport_checksum_v4`] / [`fill_transport_checksum_v6`] (TCP, UDP, ICMPv6) or
//! [`fill_icmp_checksum`] (ICMPv4) complete the packet. A buffer too short for the header is an
//! error ([`WireError::Truncated`]), never a panic.
//!
//! ```
//! use linerate::wire::emit::{fill_transport_checksum_v4, EthernetRepr, Ipv4Repr, UdpRepr};
//! use linerate::wire::{ethertype, parse, proto};
//!
//! let payload = b"hello";
//! let mut f = [0u8; 60];
//! let mut o = EthernetRepr::new([2, 0, 0, 0, 0, 2], [2, 0, 0, 0, 0, 1], ethertype::IPV4)
//!     .emit(&mut f)
//!     .unwrap();
//! let ip = Ipv4Repr::new([10, 0, 0, 1], [10, 0, 0, 2], proto::UDP, (8 + payload.len()) as u16);
//! let l4 = o + ip.emit(&mut f[o..]).unwrap();
//! o = l4 + UdpRepr::new(1024, 53, payload.len() as u16).emit(&mut f[l4..]).unwrap();
//! f[o..o + payload.len()].copy_from_slice(payload);
//! fill_transport_checksum_v4(ip.src, ip.dst, proto::UDP, &mut f[l4..o + payload.len()]).unwrap();
//!
//! let p = parse(&f, linerate::port::LinkType::ETHERNET);
//! assert_eq!((p.sport, p.dport, p.stop), (1024, 53, None));
//! ```

use super::{checksum, ethertype, proto, Layer, WireError, MAX_VLANS};

/// One VLAN tag: its tag protocol identifier (0x8100, 0x88a8, ...) and tag control information
/// (priority, DEI, VLAN id).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VlanTag {
    /// Tag protocol identifier.
    pub tpid: u16,
    /// Tag control information: PCP (3 bits), DEI (1), VLAN id (12).
    pub tci: u16,
}

impl VlanTag {
    /// An 802.1Q tag with VLAN id `vid` (priority 0).
    pub fn dot1q(vid: u16) -> VlanTag {
        VlanTag {
            tpid: ethertype::VLAN,
            tci: vid & 0x0fff,
        }
    }
}

/// An Ethernet header with up to [`MAX_VLANS`] tags, outermost first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EthernetRepr<'a> {
    /// Destination MAC.
    pub dst: [u8; 6],
    /// Source MAC.
    pub src: [u8; 6],
    /// VLAN tags, outermost first.
    pub vlans: &'a [VlanTag],
    /// The ethertype after the tags.
    pub ethertype: u16,
}

impl<'a> EthernetRepr<'a> {
    /// An untagged header.
    pub fn new(dst: [u8; 6], src: [u8; 6], ethertype: u16) -> EthernetRepr<'static> {
        EthernetRepr {
            dst,
            src,
            vlans: &[],
            ethertype,
        }
    }

    /// The same header with these tags.
    pub fn with_vlans(self, vlans: &'a [VlanTag]) -> EthernetRepr<'a> {
        EthernetRepr { vlans, ..self }
    }

    /// Bytes this header takes: 14 plus 4 per tag.
    pub fn header_len(&self) -> usize {
        14 + 4 * self.vlans.len()
    }

    /// Writes the header at the start of `buf`; returns its length.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        if self.vlans.len() > MAX_VLANS {
            return Err(WireError::TooManyVlans);
        }
        let n = self.header_len();
        let h = buf
            .get_mut(..n)
            .ok_or(WireError::Truncated(if self.vlans.is_empty() {
                Layer::Link
            } else {
                Layer::Vlan
            }))?;
        h[0..6].copy_from_slice(&self.dst);
        h[6..12].copy_from_slice(&self.src);
        let mut o = 12;
        for t in self.vlans {
            h[o..o + 2].copy_from_slice(&t.tpid.to_be_bytes());
            h[o + 2..o + 4].copy_from_slice(&t.tci.to_be_bytes());
            o += 4;
        }
        h[o..o + 2].copy_from_slice(&self.ethertype.to_be_bytes());
        Ok(n)
    }
}

/// An IPv4 header without options (20 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv4Repr {
    /// Source address.
    pub src: [u8; 4],
    /// Destination address.
    pub dst: [u8; 4],
    /// Protocol of the payload (see [`proto`]).
    pub protocol: u8,
    /// Bytes after this header (the total length is 20 more).
    pub payload_len: u16,
    /// Time to live.
    pub ttl: u8,
    /// DSCP and ECN.
    pub tos: u8,
    /// Identification.
    pub ident: u16,
    /// The don't-fragment flag.
    pub dont_frag: bool,
}

impl Ipv4Repr {
    /// Length of the header this writes.
    pub const HEADER_LEN: usize = 20;

    /// A header with TTL 64, DF set, TOS and identification 0.
    pub fn new(src: [u8; 4], dst: [u8; 4], protocol: u8, payload_len: u16) -> Ipv4Repr {
        Ipv4Repr {
            src,
            dst,
            protocol,
            payload_len,
            ttl: 64,
            tos: 0,
            ident: 0,
            dont_frag: true,
        }
    }

    /// Writes the header (with its checksum) at the start of `buf`; returns 20.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        let total = (Self::HEADER_LEN as u16)
            .checked_add(self.payload_len)
            .ok_or(WireError::BadLength(Layer::Ipv4))?;
        let h = buf
            .get_mut(..Self::HEADER_LEN)
            .ok_or(WireError::Truncated(Layer::Ipv4))?;
        h[0] = 0x45;
        h[1] = self.tos;
        h[2..4].copy_from_slice(&total.to_be_bytes());
        h[4..6].copy_from_slice(&self.ident.to_be_bytes());
        h[6..8].copy_from_slice(&(if self.dont_frag { 0x4000u16 } else { 0 }).to_be_bytes());
        h[8] = self.ttl;
        h[9] = self.protocol;
        h[10..12].copy_from_slice(&[0, 0]);
        h[12..16].copy_from_slice(&self.src);
        h[16..20].copy_from_slice(&self.dst);
        let c = checksum::checksum(h);
        h[10..12].copy_from_slice(&c.to_be_bytes());
        Ok(Self::HEADER_LEN)
    }
}

/// An IPv6 fixed header (40 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv6Repr {
    /// Source address.
    pub src: [u8; 16],
    /// Destination address.
    pub dst: [u8; 16],
    /// Next header (see [`proto`]).
    pub next_header: u8,
    /// Bytes after this header.
    pub payload_len: u16,
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Flow label (20 bits).
    pub flow_label: u32,
}

impl Ipv6Repr {
    /// Length of the header this writes.
    pub const HEADER_LEN: usize = 40;

    /// A header with hop limit 64, traffic class and flow label 0.
    pub fn new(src: [u8; 16], dst: [u8; 16], next_header: u8, payload_len: u16) -> Ipv6Repr {
        Ipv6Repr {
            src,
            dst,
            next_header,
            payload_len,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
        }
    }

    /// Writes the header at the start of `buf`; returns 40.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        let h = buf
            .get_mut(..Self::HEADER_LEN)
            .ok_or(WireError::Truncated(Layer::Ipv6))?;
        let first =
            (6u32 << 28) | (u32::from(self.traffic_class) << 20) | (self.flow_label & 0xfffff);
        h[0..4].copy_from_slice(&first.to_be_bytes());
        h[4..6].copy_from_slice(&self.payload_len.to_be_bytes());
        h[6] = self.next_header;
        h[7] = self.hop_limit;
        h[8..24].copy_from_slice(&self.src);
        h[24..40].copy_from_slice(&self.dst);
        Ok(Self::HEADER_LEN)
    }
}

/// A UDP header (8 bytes); its checksum is left 0 (none) until a `fill_*` function computes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdpRepr {
    /// Source port.
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
    /// Bytes after this header (the UDP length is 8 more).
    pub payload_len: u16,
}

impl UdpRepr {
    /// Length of the header this writes.
    pub const HEADER_LEN: usize = 8;

    /// A header for `payload_len` bytes of payload.
    pub fn new(sport: u16, dport: u16, payload_len: u16) -> UdpRepr {
        UdpRepr {
            sport,
            dport,
            payload_len,
        }
    }

    /// Writes the header at the start of `buf`; returns 8.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        let len = (Self::HEADER_LEN as u16)
            .checked_add(self.payload_len)
            .ok_or(WireError::BadLength(Layer::Udp))?;
        let h = buf
            .get_mut(..Self::HEADER_LEN)
            .ok_or(WireError::Truncated(Layer::Udp))?;
        h[0..2].copy_from_slice(&self.sport.to_be_bytes());
        h[2..4].copy_from_slice(&self.dport.to_be_bytes());
        h[4..6].copy_from_slice(&len.to_be_bytes());
        h[6..8].copy_from_slice(&[0, 0]);
        Ok(Self::HEADER_LEN)
    }
}

/// A TCP header without options (20 bytes); checksum 0 until a `fill_*` function computes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpRepr {
    /// Source port.
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgement number.
    pub ack: u32,
    /// Flags (FIN 0x01, SYN 0x02, RST 0x04, PSH 0x08, ACK 0x10, URG 0x20, ECE 0x40, CWR 0x80).
    pub flags: u8,
    /// Receive window.
    pub window: u16,
}

impl TcpRepr {
    /// Length of the header this writes.
    pub const HEADER_LEN: usize = 20;

    /// A header with these ports and flags, sequence and acknowledgement 0, window 8192.
    pub fn new(sport: u16, dport: u16, flags: u8) -> TcpRepr {
        TcpRepr {
            sport,
            dport,
            seq: 0,
            ack: 0,
            flags,
            window: 8192,
        }
    }

    /// Writes the header at the start of `buf`; returns 20.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        let h = buf
            .get_mut(..Self::HEADER_LEN)
            .ok_or(WireError::Truncated(Layer::Tcp))?;
        h[0..2].copy_from_slice(&self.sport.to_be_bytes());
        h[2..4].copy_from_slice(&self.dport.to_be_bytes());
        h[4..8].copy_from_slice(&self.seq.to_be_bytes());
        h[8..12].copy_from_slice(&self.ack.to_be_bytes());
        h[12] = 5 << 4;
        h[13] = self.flags;
        h[14..16].copy_from_slice(&self.window.to_be_bytes());
        h[16..20].copy_from_slice(&[0, 0, 0, 0]);
        Ok(Self::HEADER_LEN)
    }
}

/// An ICMP or ICMPv6 header (8 bytes: type, code, checksum, and the 4 bytes that depend on the
/// type, e.g. identifier and sequence of an echo).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IcmpRepr {
    /// Type (8 echo request, 0 echo reply; ICMPv6 128 and 129).
    pub ty: u8,
    /// Code.
    pub code: u8,
    /// The rest of the header.
    pub rest: [u8; 4],
}

impl IcmpRepr {
    /// Length of the header this writes.
    pub const HEADER_LEN: usize = 8;

    /// An echo request (`v6` selects ICMPv6's type 128 instead of 8).
    pub fn echo_request(v6: bool, ident: u16, seq: u16) -> IcmpRepr {
        let mut rest = [0u8; 4];
        rest[0..2].copy_from_slice(&ident.to_be_bytes());
        rest[2..4].copy_from_slice(&seq.to_be_bytes());
        IcmpRepr {
            ty: if v6 { 128 } else { 8 },
            code: 0,
            rest,
        }
    }

    /// Writes the header at the start of `buf`; returns 8.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        let h = buf
            .get_mut(..Self::HEADER_LEN)
            .ok_or(WireError::Truncated(Layer::Icmp))?;
        h[0] = self.ty;
        h[1] = self.code;
        h[2..4].copy_from_slice(&[0, 0]);
        h[4..8].copy_from_slice(&self.rest);
        Ok(Self::HEADER_LEN)
    }
}

/// Offset of the checksum field in a transport header of protocol `p`.
fn csum_offset(p: u8) -> Option<(usize, Layer)> {
    match p {
        proto::TCP => Some((16, Layer::Tcp)),
        proto::UDP => Some((6, Layer::Udp)),
        proto::ICMPV6 => Some((2, Layer::Icmp)),
        _ => None,
    }
}

/// Stores `c` as the checksum of `segment` (protocol `p`); UDP's 0 is sent as 0xffff.
fn store(segment: &mut [u8], p: u8, off: usize, mut c: u16) {
    if c == 0 && p == proto::UDP {
        c = 0xffff;
    }
    segment[off..off + 2].copy_from_slice(&c.to_be_bytes());
}

/// Computes and stores the checksum of a TCP, UDP or ICMPv6 `segment` (header and payload) sent
/// over IPv4 from `src` to `dst` with protocol `p`.
pub fn fill_transport_checksum_v4(
    src: [u8; 4],
    dst: [u8; 4],
    p: u8,
    segment: &mut [u8],
) -> Result<(), WireError> {
    let (off, layer) = csum_offset(p).ok_or(WireError::NotIp)?;
    if segment.len() < off + 2 {
        return Err(WireError::Truncated(layer));
    }
    segment[off..off + 2].copy_from_slice(&[0, 0]);
    let c = checksum::transport_v4(src, dst, p, segment);
    store(segment, p, off, c);
    Ok(())
}

/// Computes and stores the checksum of a TCP, UDP or ICMPv6 `segment` (header and payload) sent
/// over IPv6 from `src` to `dst` with next header `p`.
pub fn fill_transport_checksum_v6(
    src: &[u8; 16],
    dst: &[u8; 16],
    p: u8,
    segment: &mut [u8],
) -> Result<(), WireError> {
    let (off, layer) = csum_offset(p).ok_or(WireError::NotIp)?;
    if segment.len() < off + 2 {
        return Err(WireError::Truncated(layer));
    }
    segment[off..off + 2].copy_from_slice(&[0, 0]);
    let c = checksum::transport_v6(src, dst, p, segment);
    store(segment, p, off, c);
    Ok(())
}

/// Computes and stores the checksum of an ICMPv4 message (header and payload; no pseudo-header).
pub fn fill_icmp_checksum(message: &mut [u8]) -> Result<(), WireError> {
    if message.len() < IcmpRepr::HEADER_LEN {
        return Err(WireError::Truncated(Layer::Icmp));
    }
    message[2..4].copy_from_slice(&[0, 0]);
    let c = checksum::checksum(message);
    message[2..4].copy_from_slice(&c.to_be_bytes());
    Ok(())
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::wire::LinkType;
    use crate::wire::{parse, Ipv4Packet};
    const LINKTYPE_ETHERNET: LinkType = LinkType::ETHERNET;

    fn udp4(vlans: &[VlanTag], payload: &[u8]) -> Vec<u8> {
        let eth = EthernetRepr::new([2, 0, 0, 0, 0, 2], [2, 0, 0, 0, 0, 1], ethertype::IPV4)
            .with_vlans(vlans);
        let ip = Ipv4Repr::new(
            [10, 1, 2, 3],
            [192, 168, 0, 9],
            proto::UDP,
            8 + payload.len() as u16,
        );
        let mut f = vec![0u8; eth.header_len() + 28 + payload.len()];
        let l3 = eth.emit(&mut f).unwrap();
        let l4 = l3 + ip.emit(&mut f[l3..]).unwrap();
        let pl = l4
            + UdpRepr::new(4000, 53, payload.len() as u16)
                .emit(&mut f[l4..])
                .unwrap();
        f[pl..].copy_from_slice(payload);
        fill_transport_checksum_v4(ip.src, ip.dst, proto::UDP, &mut f[l4..]).unwrap();
        f
    }

    #[test]
    fn an_emitted_udp_frame_parses_back_with_valid_checksums() {
        let tags = [
            VlanTag {
                tpid: ethertype::QINQ,
                tci: 100,
            },
            VlanTag::dot1q(7),
        ];
        let f = udp4(&tags, b"payload!");
        let p = parse(&f, LINKTYPE_ETHERNET);
        assert_eq!(p.stop, None);
        assert_eq!(p.vlans(), &[100, 7]);
        assert_eq!((p.sport, p.dport), (4000, 53));
        let ip = Ipv4Packet::new_checked(&f[22..]).unwrap();
        assert_eq!(ip.checksum(), ip.compute_checksum());
        assert_eq!(ip.total_len() as usize, f.len() - 22);
        // The transport checksum over pseudo-header and segment verifies to 0.
        let seg = &f[42..];
        assert_eq!(
            checksum::transport_v4([10, 1, 2, 3], [192, 168, 0, 9], 17, seg),
            0
        );
    }

    #[test]
    fn tcp_and_icmp_over_ipv6_verify() {
        let s = [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        let d = [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
        for (p, hl) in [(proto::TCP, 20usize), (proto::ICMPV6, 8)] {
            let mut f = vec![0u8; 14 + 40 + hl + 5];
            let l3 = EthernetRepr::new([2; 6], [4; 6], ethertype::IPV6)
                .emit(&mut f)
                .unwrap();
            let ip = Ipv6Repr::new(s, d, p, (hl + 5) as u16);
            let l4 = l3 + ip.emit(&mut f[l3..]).unwrap();
            if p == proto::TCP {
                TcpRepr::new(1, 2, 0x02).emit(&mut f[l4..]).unwrap();
            } else {
                IcmpRepr::echo_request(true, 9, 1)
                    .emit(&mut f[l4..])
                    .unwrap();
            }
            f[l4 + hl..].copy_from_slice(b"abcde");
            fill_transport_checksum_v6(&s, &d, p, &mut f[l4..]).unwrap();
            assert_eq!(checksum::transport_v6(&s, &d, p, &f[l4..]), 0);
            let parsed = parse(&f, LINKTYPE_ETHERNET);
            assert_eq!(parsed.stop, None, "{p}");
        }
    }

    #[test]
    fn icmp4_checksum_verifies_and_short_buffers_are_errors() {
        let mut m = [0u8; 12];
        IcmpRepr::echo_request(false, 1, 2).emit(&mut m).unwrap();
        m[8..].copy_from_slice(b"ping");
        fill_icmp_checksum(&mut m).unwrap();
        assert_eq!(checksum::checksum(&m), 0);

        let mut short = [0u8; 10];
        assert_eq!(
            Ipv4Repr::new([0; 4], [0; 4], 17, 0).emit(&mut short),
            Err(WireError::Truncated(Layer::Ipv4))
        );
        assert_eq!(
            UdpRepr::new(1, 2, u16::MAX).emit(&mut short),
            Err(WireError::BadLength(Layer::Udp))
        );
        let many = [VlanTag::dot1q(1); MAX_VLANS + 1];
        assert_eq!(
            EthernetRepr::new([0; 6], [0; 6], 0x0800)
                .with_vlans(&many)
                .emit(&mut [0u8; 64]),
            Err(WireError::TooManyVlans)
        );
        assert!(fill_transport_checksum_v4([0; 4], [0; 4], proto::UDP, &mut [0u8; 4]).is_err());
    }
}

//! Packet templates: Ethernet (+ one 802.1Q tag) / IPv4 or IPv6 / UDP or TCP, built once with
//! their checksums; each packet is a copy whose varied fields (addresses, ports, length, the
//! probe signature) are written and whose checksums are updated incrementally (RFC 1624), not
//! recomputed.

use crate::wire::checksum::{self, update16, update32};
use crate::wire::emit::{
    fill_transport_checksum_v4, fill_transport_checksum_v6, EthernetRepr, Ipv4Repr, Ipv6Repr,
    TcpRepr, UdpRepr, VlanTag,
};
use crate::wire::{ethertype, proto, WireError};
use std::net::IpAddr;

/// Transport protocol of a template.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum L4 {
    /// UDP.
    Udp,
    /// TCP (a bare segment with the flags given).
    Tcp,
}

/// What a template's packets look like.
#[derive(Clone, Debug)]
pub struct TemplateSpec {
    /// Source MAC.
    pub src_mac: [u8; 6],
    /// Destination MAC.
    pub dst_mac: [u8; 6],
    /// An 802.1Q tag with this VLAN id (0..4095).
    pub vlan: Option<u16>,
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
    /// A VLAN id above 4095.
    #[error("VLAN id {0} is above 4095")]
    BadVlan(u16),
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
}

impl Layout {
    /// Offset of the transport checksum.
    pub fn l4_csum(&self) -> usize {
        self.l4 + if self.proto == L4::Udp { 6 } else { 16 }
    }
    /// Offset of the low 32 bits of the source address.
    pub fn src_ip(&self) -> usize {
        if self.v6 {
            self.l3 + 20
        } else {
            self.l3 + 12
        }
    }
    /// Offset of the low 32 bits of the destination address.
    pub fn dst_ip(&self) -> usize {
        if self.v6 {
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
    /// Its largest frame (without CRC): the length it is built at.
    max: usize,
}

/// Largest frame (without CRC) of a template built with [`Template::new`]: a standard
/// 1518-byte Ethernet frame.
pub const MAX_FRAME: usize = 1514;
/// Largest frame (without CRC) any template makes ([`Template::with_max`]): a jumbo frame
/// carrying a 9000-byte IP packet with an 802.1Q tag (9022 B with the CRC).
pub const MAX_JUMBO_FRAME: usize = 9018;

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
        if let Some(v) = spec.vlan {
            if v > 4095 {
                return Err(TemplateError::BadVlan(v));
            }
        }
        let mut b = vec![0u8; max];
        let tag = spec.vlan.map(VlanTag::dot1q);
        let eth = EthernetRepr::new(
            spec.dst_mac,
            spec.src_mac,
            if v6 { ethertype::IPV6 } else { ethertype::IPV4 },
        )
        .with_vlans(tag.as_slice());
        let l3 = eth.emit(&mut b)?;
        let l4 = l3
            + if v6 {
                Ipv6Repr::HEADER_LEN
            } else {
                Ipv4Repr::HEADER_LEN
            };
        let proto = if spec.l4 == L4::Udp {
            proto::UDP
        } else {
            proto::TCP
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
            };
        let layout = Layout {
            l3,
            l4,
            payload,
            v6,
            proto: spec.l4,
        };
        match (spec.src_ip, spec.dst_ip) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                fill_transport_checksum_v4(s.octets(), d.octets(), proto, &mut b[l4..])?
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                fill_transport_checksum_v6(&s.octets(), &d.octets(), proto, &mut b[l4..])?
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
            l4 = update16(l4, old_l4, new_l4);
            if lay.proto == L4::Udp {
                out[lay.l4 + 4..lay.l4 + 6].copy_from_slice(&new_l4.to_be_bytes());
                l4 = update16(l4, old_l4, new_l4);
            }
        }
        if v.src_ip != b.src_ip {
            let o = lay.src_ip();
            out[o..o + 4].copy_from_slice(&v.src_ip.to_be_bytes());
            if !lay.v6 {
                ip = update32(ip, b.src_ip, v.src_ip);
            }
            l4 = update32(l4, b.src_ip, v.src_ip);
        }
        if v.dst_ip != b.dst_ip {
            let o = lay.dst_ip();
            out[o..o + 4].copy_from_slice(&v.dst_ip.to_be_bytes());
            if !lay.v6 {
                ip = update32(ip, b.dst_ip, v.dst_ip);
            }
            l4 = update32(l4, b.dst_ip, v.dst_ip);
        }
        if v.sport != b.sport {
            out[lay.l4..lay.l4 + 2].copy_from_slice(&v.sport.to_be_bytes());
            l4 = update16(l4, b.sport, v.sport);
        }
        if v.dport != b.dport {
            out[lay.l4 + 2..lay.l4 + 4].copy_from_slice(&v.dport.to_be_bytes());
            l4 = update16(l4, b.dport, v.dport);
        }
        if !lay.v6 {
            out[lay.l3 + 10..lay.l3 + 12].copy_from_slice(&ip.to_be_bytes());
        }
        put_l4_csum(out, lay, l4);
        len
    }

    /// Whether packets of length `len` have room for the probe signature.
    pub fn has_sig_room(&self, len: usize) -> bool {
        len >= self.layout.payload + SIG_LEN
    }
}

#[inline(always)]
fn put_l4_csum(out: &mut [u8], lay: &Layout, mut c: u16) {
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
    let proto = if lay.proto == L4::Udp { 17 } else { 6 };
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
        checksum::transport_v4(s, d, proto, &out[lay.l4..end.max(lay.l4)])
    };
    put_l4_csum(out, lay, c);
}

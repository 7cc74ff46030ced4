//! tcprewrite's edits on replayed packets, and the link-type conversion onto Ethernet.
//!
//! Every replayed packet leaves as an Ethernet frame: raw IP (LINKTYPE_RAW 101, DLT_RAW 12/14,
//! LINKTYPE_IPV4/IPV6 228/229), BSD loopback (0, 108) and Linux cooked captures (SLL 113,
//! SLL2 276) get an Ethernet header, its MACs from `--dst-mac`/`--src-mac`, else a cooked
//! header's own address as the source, else [`DEFAULT_SRC_MAC`]/[`DEFAULT_DST_MAC`]. Then, in
//! this order: VLAN tags stripped, a tag added or the outer one retagged, MACs set, IP
//! addresses mapped, TCP/UDP ports mapped, TTL / hop limit set; the IPv4 header checksum is
//! computed again and the TCP/UDP/ICMPv6 checksum updated for the changed addresses and ports
//! (RFC 1624: it stays right on a packet the capture cut short; a UDP checksum of 0, none, is
//! kept).
//!
//! A packet that cannot be put on Ethernet (a raw packet that is not IP, a cooked frame without
//! an ethertype, an unknown link type) is refused with a [`Refused`] reason, which the replay
//! counts.

use crate::wire::checksum;
use crate::wire::LinkType;
use std::net::IpAddr;

/// Source MAC of a frame built for a packet whose capture had none (gen's own default).
pub const DEFAULT_SRC_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
/// Destination MAC of a frame built for a packet whose capture had none (gen's own default).
pub const DEFAULT_DST_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];

/// One address map (tcprewrite's `--srcipmap`/`--pnat`): addresses inside `from` get `to`'s
/// network bits, keeping their low (host) bits below `to`'s prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpMap {
    from: IpAddr,
    from_len: u8,
    to: IpAddr,
    to_len: u8,
}

fn bits(a: &IpAddr) -> u8 {
    if a.is_ipv4() {
        32
    } else {
        128
    }
}

fn to_u128(a: &IpAddr) -> u128 {
    match a {
        IpAddr::V4(v) => u128::from(u32::from(*v)),
        IpAddr::V6(v) => u128::from(*v),
    }
}

/// The mask of the `len` high bits of a `width`-bit address.
fn net_mask(len: u8, width: u8) -> u128 {
    let all = if width == 128 {
        u128::MAX
    } else {
        (1u128 << width) - 1
    };
    if len == 0 {
        0
    } else {
        all & !((1u128 << (width - len)) - 1) & all
    }
}

fn prefix(s: &str) -> Result<(IpAddr, u8), String> {
    let (a, l) = match s.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (s, None),
    };
    let addr: IpAddr = a
        .trim()
        .parse()
        .map_err(|_| format!("'{a}' is not an IPv4 or IPv6 address"))?;
    let len = match l {
        None => bits(&addr),
        Some(l) => l
            .parse::<u8>()
            .ok()
            .filter(|&n| n <= bits(&addr))
            .ok_or_else(|| format!("'/{l}': a prefix length is 0..{}", bits(&addr)))?,
    };
    Ok((addr, len))
}

impl IpMap {
    /// Parses a list of maps separated by commas: `NEW` (every address of NEW's family becomes
    /// NEW), `OLD:NEW` (one address), `OLD/len:NEW/len` (a network onto another). IPv6
    /// addresses take the CIDR form with brackets: `[2001:db8::/32]:[fd00::/32]`.
    pub fn parse_list(s: &str) -> Result<Vec<IpMap>, String> {
        let mut v = Vec::new();
        for part in s.split(',').map(str::trim) {
            if part.is_empty() {
                return Err(format!("'{s}': an empty map"));
            }
            let (from, to) = split_map(part);
            let m = match to {
                None => {
                    let (to, to_len) = prefix(from)?;
                    let any: IpAddr = if to.is_ipv4() {
                        [0u8; 4].into()
                    } else {
                        [0u8; 16].into()
                    };
                    IpMap {
                        from: any,
                        from_len: 0,
                        to,
                        to_len,
                    }
                }
                Some(to) => {
                    let (from, from_len) = prefix(from)?;
                    let (to, to_len) = prefix(to)?;
                    if from.is_ipv4() != to.is_ipv4() {
                        return Err(format!(
                            "'{part}': both sides of a map are IPv4, or both IPv6"
                        ));
                    }
                    IpMap {
                        from,
                        from_len,
                        to,
                        to_len,
                    }
                }
            };
            v.push(m);
        }
        Ok(v)
    }

    /// The address `a` (4 or 16 bytes) maps to, if this map takes it.
    fn map(&self, a: &[u8]) -> Option<u128> {
        let width = bits(&self.from);
        let old = match (width, a.len()) {
            (32, 4) => u128::from(u32::from_be_bytes(a.try_into().ok()?)),
            (128, 16) => u128::from_be_bytes(a.try_into().ok()?),
            _ => return None,
        };
        let fm = net_mask(self.from_len, width);
        if old & fm != to_u128(&self.from) & fm {
            return None;
        }
        let tm = net_mask(self.to_len, width);
        let all = net_mask(width, width);
        Some((to_u128(&self.to) & tm) | (old & !tm & all))
    }
}

/// `OLD:NEW` split at the colon between them: IPv4 has no colon, IPv6 goes in brackets
/// (`[2001:db8::/32]:[fd00::/32]`); one bare IPv6 address is a `NEW` alone.
fn split_map(s: &str) -> (&str, Option<&str>) {
    if let Some(rest) = s.strip_prefix('[') {
        if let Some(i) = rest.find(']') {
            let from = &rest[..i];
            let after = &rest[i + 1..];
            return match after.strip_prefix(':') {
                Some(t) => {
                    let t = t.trim();
                    let t = t
                        .strip_prefix('[')
                        .and_then(|x| x.strip_suffix(']'))
                        .unwrap_or(t);
                    (from, Some(t))
                }
                None if after.is_empty() => (from, None),
                // Something after the brackets: not an address, said so by the parser.
                None => (s, None),
            };
        }
    }
    match s.split_once(':') {
        Some((a, b)) if !b.contains(':') => (a, Some(b)),
        _ => (s, None),
    }
}

/// A port map (tcprewrite's `--portmap`): ports `lo..=hi` become `to`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortMap {
    lo: u16,
    hi: u16,
    to: u16,
}

impl PortMap {
    /// Parses `A:B` and `A-B:C` maps separated by commas.
    pub fn parse_list(s: &str) -> Result<Vec<PortMap>, String> {
        let port = |x: &str| -> Result<u16, String> {
            x.trim()
                .parse::<u16>()
                .map_err(|_| format!("'{x}' is not a port (0..65535)"))
        };
        let mut v = Vec::new();
        for part in s.split(',') {
            let (from, to) = part
                .split_once(':')
                .ok_or_else(|| format!("'{part}': a port map is FROM:TO or LO-HI:TO"))?;
            let (lo, hi) = match from.split_once('-') {
                Some((a, b)) => (port(a)?, port(b)?),
                None => (port(from)?, port(from)?),
            };
            if lo > hi {
                return Err(format!("'{part}': {lo} is above {hi}"));
            }
            v.push(PortMap {
                lo,
                hi,
                to: port(to)?,
            });
        }
        Ok(v)
    }
}

/// What to change on each replayed packet (nothing by default: the link-type conversion only).
#[derive(Clone, Debug, Default)]
pub struct Rewrite {
    /// Destination MAC of every frame.
    pub dst_mac: Option<[u8; 6]>,
    /// Source MAC of every frame.
    pub src_mac: Option<[u8; 6]>,
    /// Source address maps (the first that takes an address applies).
    pub src_ip: Vec<IpMap>,
    /// Destination address maps.
    pub dst_ip: Vec<IpMap>,
    /// TCP/UDP port maps, on both ports.
    pub ports: Vec<PortMap>,
    /// Strip every 802.1Q/802.1ad tag.
    pub vlan_strip: bool,
    /// Tag untagged frames with this VLAN id, or retag the outer tag (its priority kept).
    pub vlan: Option<u16>,
    /// TTL / hop limit of every IP packet.
    pub ttl: Option<u8>,
}

/// Why a packet could not be replayed onto Ethernet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// A raw-IP or loopback packet that is not IPv4 or IPv6 (its version nibble).
    NotIp,
    /// A cooked frame whose protocol is no ethertype (802.3/802.2 frames, below 0x0600), or
    /// cut before it.
    NoEthertype,
    /// A link type that has no Ethernet form here.
    LinkType,
    /// Longer than the largest frame once rewritten.
    TooLong,
}

/// Counts of packets not replayed, by reason.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RefusedCounts {
    /// [`Refused::NotIp`].
    pub not_ip: u64,
    /// [`Refused::NoEthertype`].
    pub no_ethertype: u64,
    /// [`Refused::LinkType`].
    pub link_type: u64,
    /// [`Refused::TooLong`].
    pub too_long: u64,
}

impl RefusedCounts {
    /// Counts one.
    pub fn add(&mut self, r: Refused) {
        match r {
            Refused::NotIp => self.not_ip += 1,
            Refused::NoEthertype => self.no_ethertype += 1,
            Refused::LinkType => self.link_type += 1,
            Refused::TooLong => self.too_long += 1,
        }
    }

    /// All of them.
    pub fn total(&self) -> u64 {
        self.not_ip + self.no_ethertype + self.link_type + self.too_long
    }

    /// Each non-zero reason with its count, for the summary.
    pub fn reasons(&self) -> Vec<(&'static str, u64)> {
        [
            ("not_ip", self.not_ip),
            ("no_ethertype", self.no_ethertype),
            ("link_type", self.link_type),
            ("too_long", self.too_long),
        ]
        .into_iter()
        .filter(|r| r.1 > 0)
        .collect()
    }
}

/// Whether packets of link type `lt` can be replayed onto Ethernet.
pub fn converts(lt: LinkType) -> bool {
    matches!(lt.0, 1 | 101 | 12 | 14 | 228 | 229 | 113 | 276 | 0 | 108)
}

#[inline]
fn be16(d: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*d.get(at)?, *d.get(at + 1)?]))
}

fn version_type(d: &[u8], at: usize) -> Result<u16, Refused> {
    match d.get(at).map(|b| b >> 4) {
        Some(4) => Ok(0x0800),
        Some(6) => Ok(0x86dd),
        _ => Err(Refused::NotIp),
    }
}

const TAGS: [u16; 2] = [0x8100, 0x88a8];

impl Rewrite {
    /// Whether it changes anything beyond the link-type conversion.
    pub fn is_noop(&self) -> bool {
        self.dst_mac.is_none()
            && self.src_mac.is_none()
            && self.src_ip.is_empty()
            && self.dst_ip.is_empty()
            && self.ports.is_empty()
            && !self.vlan_strip
            && self.vlan.is_none()
            && self.ttl.is_none()
    }

    /// Writes the Ethernet frame of the packet `data` (link type `link`, `wire_len` bytes on
    /// the wire) into `out`, rewritten; returns its captured and wire lengths.
    pub fn apply(
        &self,
        link: LinkType,
        data: &[u8],
        wire_len: u32,
        out: &mut [u8],
    ) -> Result<(usize, u32), Refused> {
        let dst = self.dst_mac.unwrap_or(DEFAULT_DST_MAC);
        let src = self.src_mac;
        // The header to take off, the ethertype and a source MAC the capture gives.
        let (off, et, cap_src) = match link.0 {
            1 => (0, None, None),
            101 | 12 | 14 => (0, Some(version_type(data, 0)?), None),
            228 => (0, Some(0x0800), None),
            229 => (0, Some(0x86dd), None),
            0 | 108 => (4, Some(version_type(data, 4)?), None),
            113 => {
                let et = be16(data, 14)
                    .filter(|&e| e >= 0x0600)
                    .ok_or(Refused::NoEthertype)?;
                let mac = (be16(data, 4) == Some(6))
                    .then(|| data[6..12].try_into().ok())
                    .flatten();
                (16, Some(et), mac)
            }
            276 => {
                let et = be16(data, 0)
                    .filter(|&e| e >= 0x0600 && data.len() >= 20)
                    .ok_or(Refused::NoEthertype)?;
                let mac = (data[11] == 6)
                    .then(|| data[12..18].try_into().ok())
                    .flatten();
                (20, Some(et), mac)
            }
            _ => return Err(Refused::LinkType),
        };
        let body = &data[off..];
        let hdr = if et.is_some() { 14 } else { 0 };
        let mut n = hdr + body.len();
        // Room for a tag added.
        let extra = if self.vlan.is_some() { 4 } else { 0 };
        if n + extra > out.len() {
            return Err(Refused::TooLong);
        }
        let mut wire = wire_len.saturating_sub(off as u32) + hdr as u32;
        if let Some(et) = et {
            out[0..6].copy_from_slice(&dst);
            out[6..12].copy_from_slice(&src.or(cap_src).unwrap_or(DEFAULT_SRC_MAC));
            out[12..14].copy_from_slice(&et.to_be_bytes());
        }
        out[hdr..n].copy_from_slice(body);
        if n < 14 {
            // A runt: no Ethernet header to edit; it goes as it was.
            return Ok((n, wire.max(n as u32)));
        }
        let f = &mut out[..];
        if self.vlan_strip {
            while n >= 18 && TAGS.contains(&be16(f, 12).unwrap_or(0)) {
                f.copy_within(16..n, 12);
                n -= 4;
                wire = wire.saturating_sub(4);
            }
        }
        if let Some(id) = self.vlan {
            if n >= 16 && TAGS.contains(&be16(f, 12).unwrap_or(0)) {
                let tci = (be16(f, 14).unwrap_or(0) & 0xf000) | (id & 0x0fff);
                f[14..16].copy_from_slice(&tci.to_be_bytes());
            } else {
                f.copy_within(12..n, 16);
                f[12..14].copy_from_slice(&0x8100u16.to_be_bytes());
                f[14..16].copy_from_slice(&(id & 0x0fff).to_be_bytes());
                n += 4;
                wire += 4;
            }
        }
        if let Some(m) = self.dst_mac {
            f[0..6].copy_from_slice(&m);
        }
        if let Some(m) = self.src_mac {
            f[6..12].copy_from_slice(&m);
        }
        if !self.src_ip.is_empty()
            || !self.dst_ip.is_empty()
            || !self.ports.is_empty()
            || self.ttl.is_some()
        {
            let mut at = 12;
            while at + 6 <= n && TAGS.contains(&be16(f, at).unwrap_or(0)) {
                at += 4;
            }
            match be16(f, at) {
                Some(0x0800) => self.ipv4(&mut f[..n], at + 2),
                Some(0x86dd) => self.ipv6(&mut f[..n], at + 2),
                _ => {}
            }
        }
        Ok((n, wire.max(n as u32)))
    }

    fn map_addr(maps: &[IpMap], f: &mut [u8], at: usize, len: usize) -> bool {
        let Some(a) = f.get(at..at + len) else {
            return false;
        };
        let Some(new) = maps.iter().find_map(|m| m.map(a)) else {
            return false;
        };
        if len == 4 {
            f[at..at + 4].copy_from_slice(&(new as u32).to_be_bytes());
        } else {
            f[at..at + 16].copy_from_slice(&new.to_be_bytes());
        }
        true
    }

    fn map_port(&self, p: u16) -> u16 {
        self.ports
            .iter()
            .find(|m| (m.lo..=m.hi).contains(&p))
            .map_or(p, |m| m.to)
    }

    /// Addresses, ports, TTL of the IPv4 packet at `l3`; checksums after.
    fn ipv4(&self, f: &mut [u8], l3: usize) {
        let Some(&vihl) = f.get(l3) else { return };
        let ihl = usize::from(vihl & 0x0f) * 4;
        if vihl >> 4 != 4 || ihl < 20 || f.len() < l3 + ihl {
            return;
        }
        if let Some(t) = self.ttl {
            f[l3 + 8] = t;
        }
        let old: [u8; 8] = f[l3 + 12..l3 + 20].try_into().unwrap_or_default();
        Self::map_addr(&self.src_ip, f, l3 + 12, 4);
        Self::map_addr(&self.dst_ip, f, l3 + 16, 4);
        let new: [u8; 8] = f[l3 + 12..l3 + 20].try_into().unwrap_or_default();
        f[l3 + 10..l3 + 12].copy_from_slice(&[0, 0]);
        let c = checksum::checksum(&f[l3..l3 + ihl]);
        f[l3 + 10..l3 + 12].copy_from_slice(&c.to_be_bytes());
        let first = be16(f, l3 + 6).unwrap_or(1) & 0x1fff == 0;
        let proto = f[l3 + 9];
        if first {
            self.l4(f, proto, l3 + ihl, &old, &new);
        }
    }

    /// Addresses, ports, hop limit of the IPv6 packet at `l3`; checksums after.
    fn ipv6(&self, f: &mut [u8], l3: usize) {
        if f.len() < l3 + 40 || f[l3] >> 4 != 6 {
            return;
        }
        if let Some(t) = self.ttl {
            f[l3 + 7] = t;
        }
        let old: [u8; 32] = f[l3 + 8..l3 + 40].try_into().unwrap_or([0; 32]);
        Self::map_addr(&self.src_ip, f, l3 + 8, 16);
        Self::map_addr(&self.dst_ip, f, l3 + 24, 16);
        let new: [u8; 32] = f[l3 + 8..l3 + 40].try_into().unwrap_or([0; 32]);
        // Hop-by-hop, routing, destination options; a fragment header (a later fragment has
        // no transport header).
        let (mut nh, mut at) = (f[l3 + 6], l3 + 40);
        for _ in 0..8 {
            match nh {
                0 | 43 | 60 => {
                    let (Some(&next), Some(&len)) = (f.get(at), f.get(at + 1)) else {
                        return;
                    };
                    nh = next;
                    at += (usize::from(len) + 1) * 8;
                }
                44 => {
                    let (Some(&next), Some(fo)) = (f.get(at), be16(f, at + 2)) else {
                        return;
                    };
                    if fo & 0xfff8 != 0 {
                        return;
                    }
                    nh = next;
                    at += 8;
                }
                _ => break,
            }
        }
        self.l4(f, nh, at, &old, &new);
    }

    /// Ports of a TCP/UDP header at `l4`, and its checksum (or ICMPv6's) updated for the
    /// address bytes `old` → `new` and the ports changed.
    fn l4(&self, f: &mut [u8], proto: u8, l4: usize, old: &[u8], new: &[u8]) {
        let at = match proto {
            6 => 16,
            17 => 6,
            58 => 2,
            _ => return,
        };
        let mut ports_old = [0u8; 4];
        let mut ports_new = [0u8; 4];
        if proto != 58 && !self.ports.is_empty() {
            if let Some(p) = f.get_mut(l4..l4 + 4) {
                ports_old.copy_from_slice(p);
                for i in [0, 2] {
                    let v = self.map_port(u16::from_be_bytes([p[i], p[i + 1]]));
                    p[i..i + 2].copy_from_slice(&v.to_be_bytes());
                }
                ports_new.copy_from_slice(p);
            }
        }
        let Some(mut c) = be16(f, l4 + at) else {
            return;
        };
        if proto == 17 && c == 0 && old.len() == 8 {
            return; // UDP over IPv4 without a checksum stays without
        }
        c = checksum::update_bytes(c, old, new);
        c = checksum::update_bytes(c, &ports_old, &ports_new);
        if proto == 17 && c == 0 {
            c = 0xffff;
        }
        f[l4 + at..l4 + at + 2].copy_from_slice(&c.to_be_bytes());
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn udp4() -> Vec<u8> {
        let mut f = vec![0u8; 14 + 20 + 8 + 4];
        f[12..14].copy_from_slice(&[0x08, 0]);
        let ip = &mut f[14..];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&32u16.to_be_bytes());
        ip[8] = 64;
        ip[9] = 17;
        ip[12..16].copy_from_slice(&[10, 1, 2, 3]);
        ip[16..20].copy_from_slice(&[192, 0, 2, 1]);
        let c = checksum::checksum(&ip[..20]);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        ip[20..22].copy_from_slice(&1234u16.to_be_bytes());
        ip[22..24].copy_from_slice(&53u16.to_be_bytes());
        ip[24..26].copy_from_slice(&12u16.to_be_bytes());
        ip[28..32].copy_from_slice(b"abcd");
        let c = checksum::transport_v4([10, 1, 2, 3], [192, 0, 2, 1], 17, &ip[20..32]);
        ip[26..28].copy_from_slice(&c.to_be_bytes());
        f
    }

    fn ok_v4(f: &[u8]) -> bool {
        let ip = &f[f.len() - 32..];
        let src: [u8; 4] = ip[12..16].try_into().unwrap();
        let dst: [u8; 4] = ip[16..20].try_into().unwrap();
        checksum::checksum(&ip[..20]) == 0 && checksum::transport_v4(src, dst, 17, &ip[20..32]) == 0
    }

    #[test]
    fn maps_parse_as_tcprewrite_writes_them() {
        let m = IpMap::parse_list("10.0.0.0/8:192.168.0.0/16").unwrap();
        assert_eq!(m[0].map(&[10, 1, 2, 3]), Some(u128::from(0xc0a8_0203u32)));
        assert_eq!(m[0].map(&[11, 1, 2, 3]), None);
        let m = IpMap::parse_list("198.18.0.9").unwrap();
        assert_eq!(m[0].map(&[1, 2, 3, 4]), Some(u128::from(0xc612_0009u32)));
        assert_eq!(m[0].map(&[0; 16]), None, "an IPv4 map leaves IPv6 alone");
        let m = IpMap::parse_list("1.2.3.4:5.6.7.8,9.9.9.9").unwrap();
        assert_eq!(m.len(), 2);
        let m = IpMap::parse_list("[2001:db8::/32]:[fd00::/16]").unwrap();
        let a: std::net::Ipv6Addr = "2001:db8::7".parse().unwrap();
        let b: std::net::Ipv6Addr = "fd00:db8::7".parse().unwrap();
        assert_eq!(m[0].map(&a.octets()), Some(u128::from(b)));
        assert!(IpMap::parse_list("fd00::1").is_ok());
        assert!(IpMap::parse_list("10.0.0.0/33:1.1.1.1").is_err());
        assert!(IpMap::parse_list("10.0.0.1:[fd00::1]").is_err());
        assert!(IpMap::parse_list("banana").is_err());
        assert_eq!(
            PortMap::parse_list("53:5353,1-10:9").unwrap(),
            [
                PortMap {
                    lo: 53,
                    hi: 53,
                    to: 5353
                },
                PortMap {
                    lo: 1,
                    hi: 10,
                    to: 9
                }
            ]
        );
        assert!(PortMap::parse_list("53").is_err());
        assert!(PortMap::parse_list("9-1:3").is_err());
    }

    #[test]
    fn edits_keep_checksums_right() {
        let rw = Rewrite {
            dst_mac: Some([0xaa; 6]),
            src_ip: IpMap::parse_list("10.0.0.0/8:172.16.0.0/12").unwrap(),
            dst_ip: IpMap::parse_list("198.51.100.7").unwrap(),
            ports: PortMap::parse_list("53:5353").unwrap(),
            ttl: Some(9),
            vlan: Some(42),
            ..Default::default()
        };
        let f = udp4();
        assert!(ok_v4(&f));
        let mut out = [0u8; 128];
        let (n, w) = rw.apply(LinkType::ETHERNET, &f, 60, &mut out).unwrap();
        assert_eq!((n, w), (f.len() + 4, 64));
        let g = &out[..n];
        assert_eq!(&g[0..6], &[0xaa; 6]);
        assert_eq!(&g[12..16], &[0x81, 0, 0, 42]);
        assert_eq!(&g[18 + 12..18 + 20], &[172, 17, 2, 3, 198, 51, 100, 7]);
        assert_eq!(g[18 + 8], 9);
        assert_eq!(&g[18 + 22..18 + 24], &5353u16.to_be_bytes());
        assert!(ok_v4(g));
        // Strip the tag again, retag an existing one.
        let strip = Rewrite {
            vlan_strip: true,
            ..Default::default()
        };
        let mut back = [0u8; 128];
        let (m, _) = strip
            .apply(LinkType::ETHERNET, g, n as u32, &mut back)
            .unwrap();
        assert_eq!(m, f.len());
        let retag = Rewrite {
            vlan: Some(7),
            ..Default::default()
        };
        let mut t = g.to_vec();
        t[14] |= 0xe0; // priority 7
        let (m, _) = retag.apply(LinkType::ETHERNET, &t, 0, &mut back).unwrap();
        assert_eq!((m, &back[12..16]), (n, &[0x81, 0, 0xe0, 7][..]));
    }

    #[test]
    fn raw_and_cooked_packets_get_an_ethernet_header() {
        let f = udp4();
        let ip = &f[14..];
        let rw = Rewrite::default();
        let mut out = [0u8; 128];
        for lt in [101, 12, 14, 228] {
            let (n, w) = rw.apply(LinkType(lt), ip, 32, &mut out).unwrap();
            assert_eq!((n, w), (14 + ip.len(), 46));
            assert_eq!(&out[0..6], &DEFAULT_DST_MAC);
            assert_eq!(&out[6..12], &DEFAULT_SRC_MAC);
            assert_eq!(&out[12..n], &f[12..]);
        }
        let mut sll = vec![0, 0, 0, 1, 0, 6, 1, 2, 3, 4, 5, 6, 0, 0, 0x08, 0];
        sll.extend_from_slice(ip);
        let (n, _) = rw.apply(LinkType::LINUX_SLL, &sll, 0, &mut out).unwrap();
        assert_eq!(&out[6..12], &[1, 2, 3, 4, 5, 6]);
        assert_eq!(&out[12..n], &f[12..]);
        let mut sll2 = vec![
            0x08, 0, 0, 0, 0, 0, 0, 1, 0, 1, 0, 6, 9, 9, 9, 9, 9, 9, 0, 0,
        ];
        sll2.extend_from_slice(ip);
        let with_mac = Rewrite {
            src_mac: Some([7; 6]),
            ..Default::default()
        };
        let (n, _) = with_mac
            .apply(LinkType::LINUX_SLL2, &sll2, 0, &mut out)
            .unwrap();
        assert_eq!(&out[6..12], &[7; 6]);
        assert_eq!(&out[12..n], &f[12..]);
        let mut null = vec![2, 0, 0, 0];
        null.extend_from_slice(ip);
        assert!(rw.apply(LinkType::NULL, &null, 0, &mut out).is_ok());
        // What cannot go on Ethernet is refused, with its reason; bad input never panics.
        assert_eq!(
            rw.apply(LinkType::RAW, &[0x15, 0], 2, &mut out),
            Err(Refused::NotIp)
        );
        assert_eq!(
            rw.apply(LinkType::RAW, &[], 0, &mut out),
            Err(Refused::NotIp)
        );
        assert_eq!(
            rw.apply(LinkType::LINUX_SLL, &sll[..10], 0, &mut out),
            Err(Refused::NoEthertype)
        );
        assert_eq!(
            rw.apply(LinkType::LINUX_SLL2, &sll2[..19], 0, &mut out),
            Err(Refused::NoEthertype)
        );
        assert_eq!(
            rw.apply(LinkType(127), ip, 0, &mut out),
            Err(Refused::LinkType)
        );
        assert_eq!(
            rw.apply(LinkType::RAW, ip, 0, &mut out[..20]),
            Err(Refused::TooLong)
        );
    }

    #[test]
    fn ipv6_addresses_and_hop_limit_keep_the_udp_checksum() {
        let mut ip = vec![0u8; 40 + 8 + 2];
        ip[0] = 0x60;
        ip[4..6].copy_from_slice(&10u16.to_be_bytes());
        ip[6] = 17;
        ip[7] = 64;
        let a: std::net::Ipv6Addr = "2001:db8::1".parse().unwrap();
        let b: std::net::Ipv6Addr = "2001:db8::2".parse().unwrap();
        ip[8..24].copy_from_slice(&a.octets());
        ip[24..40].copy_from_slice(&b.octets());
        ip[40..42].copy_from_slice(&7u16.to_be_bytes());
        ip[42..44].copy_from_slice(&9u16.to_be_bytes());
        ip[44..46].copy_from_slice(&10u16.to_be_bytes());
        let c = checksum::transport_v6(&a.octets(), &b.octets(), 17, &ip[40..50]);
        ip[46..48].copy_from_slice(&c.to_be_bytes());
        let rw = Rewrite {
            src_ip: IpMap::parse_list("[2001:db8::/32]:[fd00::/16]").unwrap(),
            ports: PortMap::parse_list("9:99").unwrap(),
            ttl: Some(3),
            ..Default::default()
        };
        let mut out = [0u8; 128];
        let (n, _) = rw.apply(LinkType::IPV6, &ip, 50, &mut out).unwrap();
        let g = &out[14..n];
        assert_eq!(g[7], 3);
        let s: [u8; 16] = g[8..24].try_into().unwrap();
        let d: [u8; 16] = g[24..40].try_into().unwrap();
        assert_eq!(
            std::net::Ipv6Addr::from(s),
            "fd00:db8::1".parse::<std::net::Ipv6Addr>().unwrap()
        );
        assert_eq!(&g[42..44], &99u16.to_be_bytes());
        assert_eq!(checksum::transport_v6(&s, &d, 17, &g[40..50]), 0);
    }
}

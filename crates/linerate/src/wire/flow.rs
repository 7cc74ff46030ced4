//! Flow keys and the hashes balancers use to spread packets over queues.
//!
//! Every hash here is a pure function of named header fields of a [`Parsed`] packet. Addresses
//! are always taken as the 16-byte fields of [`Parsed`] (IPv4 in the first 4 bytes, zeros after),
//! read as four big-endian 32-bit words. The mixing function, `mm(words)`, is the MurmurHash3
//! x86_32 block/finalisation structure (seed 0, length `4 * n`) applied to those 32-bit words;
//! it is fixed and will not change, so hashes are stable across runs and machines.
//!
//! The symmetric hashes combine a per-endpoint hash with XOR, so swapping source and
//! destination gives the same value and both directions of a conversation reach the same queue.

use super::parse::Parsed;
use super::proto;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The Microsoft RSS verification key (the default key of most NICs).
pub const RSS_KEY_MICROSOFT: [u8; 40] = [
    0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0,
    0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30, 0xf2, 0x0c,
    0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
];

/// A key made of 0x6d5a repeated: its bit pattern has period 16, so the Toeplitz hash of
/// (src, dst, sport, dport) equals that of (dst, src, dport, sport) (Woo and Park, "Scalable
/// TCP session monitoring with symmetric receive-side scaling").
pub const RSS_KEY_SYMMETRIC: [u8; 40] = {
    let mut k = [0u8; 40];
    let mut i = 0;
    while i < 40 {
        k[i] = if i % 2 == 0 { 0x6d } else { 0x5a };
        i += 1;
    }
    k
};

#[inline(always)]
fn fmix32(mut h: u32) -> u32 {
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^ (h >> 16)
}

/// MurmurHash3 x86_32 over 32-bit words (seed 0).
#[inline(always)]
fn mm(words: &[u32]) -> u32 {
    let mut h: u32 = 0;
    for &w in words {
        let k = w
            .wrapping_mul(0xcc9e_2d51)
            .rotate_left(15)
            .wrapping_mul(0x1b87_3593);
        h = (h ^ k)
            .rotate_left(13)
            .wrapping_mul(5)
            .wrapping_add(0xe654_6b64);
    }
    fmix32(h ^ (words.len() as u32 * 4))
}

#[inline(always)]
fn words(a: &[u8; 16]) -> [u32; 4] {
    let w = |i: usize| u32::from_be_bytes([a[i], a[i + 1], a[i + 2], a[i + 3]]);
    [w(0), w(4), w(8), w(12)]
}

#[inline(always)]
fn addr_hash(a: &[u8; 16]) -> u32 {
    mm(&words(a))
}

#[inline(always)]
fn endpoint_hash(a: &[u8; 16], port: u16) -> u32 {
    let [w0, w1, w2, w3] = words(a);
    mm(&[w0, w1, w2, w3, u32::from(port)])
}

/// The ports of `p` when they may be used: a transport with ports (TCP, UDP, SCTP) whose header
/// was reached, in a packet that is not a fragment (so every fragment of a datagram hashes alike).
#[inline(always)]
fn ports_of(p: &Parsed) -> Option<(u16, u16)> {
    let with_ports = matches!(p.proto, proto::TCP | proto::UDP | proto::SCTP);
    (with_ports && p.l4.is_some() && p.fragment.is_none()).then_some((p.sport, p.dport))
}

/// Symmetric IP hash: `mm(src words) ^ mm(dst words)` over the two 16-byte address fields.
/// Packets without IP hash to 0.
pub fn hash_ip_symmetric(p: &Parsed) -> u32 {
    if p.ip_version == 0 {
        return 0;
    }
    addr_hash(&p.src) ^ addr_hash(&p.dst)
}

/// [`hash_ip_symmetric`] read straight from the bytes of an untagged Ethernet/IPv4 frame, without
/// a full parse (the common case of a balancer's hot path); the same value the parser path gives.
/// None for any other frame: parse it, then hash.
#[inline]
pub fn hash_ip_symmetric_eth_v4(data: &[u8]) -> Option<u32> {
    let (src, dst) = eth_v4_addrs(data)?;
    Some(hash_ip_symmetric_v4(src, dst))
}

/// The IPv4 source and destination addresses (big-endian words) of an untagged Ethernet/IPv4
/// frame whose header [`hash_ip_symmetric_eth_v4`] takes; None for any other frame.
#[inline(always)]
pub fn eth_v4_addrs(data: &[u8]) -> Option<(u32, u32)> {
    let (h, _, _) = eth_v4_header(data)?;
    Some((be32(h, 26), be32(h, 30)))
}

/// The first 34 bytes of an untagged Ethernet/IPv4 frame whose header length and total length
/// are sane, with the header length and the total length; None for any other frame.
#[inline(always)]
fn eth_v4_header(data: &[u8]) -> Option<(&[u8], usize, usize)> {
    let h = data.get(..34)?;
    if h[12] != 0x08 || h[13] != 0x00 || h[14] >> 4 != 4 {
        return None;
    }
    let hl = usize::from(h[14] & 0x0f) * 4;
    let total = usize::from(u16::from_be_bytes([h[16], h[17]]));
    if hl < 20 || data.len() < 14 + hl || total < hl {
        return None;
    }
    Some((h, hl, total))
}

/// The big-endian word at `h[i..i + 4]`.
#[inline(always)]
fn be32(h: &[u8], i: usize) -> u32 {
    u32::from_be_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]])
}

/// [`hash_ip_symmetric`] of IPv4 addresses given as big-endian words ([`eth_v4_addrs`]): no
/// branch and no memory access, so that a loop over a batch's addresses runs packets side by
/// side.
#[inline(always)]
pub fn hash_ip_symmetric_v4(src: u32, dst: u32) -> u32 {
    mm(&[src, 0, 0, 0]) ^ mm(&[dst, 0, 0, 0])
}

/// Symmetric 5-tuple hash: `fmix32(mm(src words, sport) ^ mm(dst words, dport) ^ proto)`, where
/// each endpoint hashes its four address words then the port as a fifth word. The ports are 0
/// for protocols other than TCP, UDP and SCTP, for fragments (first included) and when the
/// transport header was not read. Packets without IP hash to 0.
pub fn hash_5tuple_symmetric(p: &Parsed) -> u32 {
    if p.ip_version == 0 {
        return 0;
    }
    let (sp, dp) = ports_of(p).unwrap_or((0, 0));
    fmix32(endpoint_hash(&p.src, sp) ^ endpoint_hash(&p.dst, dp) ^ u32::from(p.proto))
}

/// [`hash_5tuple_symmetric`] read straight from the bytes of an untagged Ethernet/IPv4 frame,
/// without a full parse; the same value the parser path gives (ports 0 for fragments, for
/// protocols without ports and when fewer than 4 transport bytes lie inside the IP total
/// length). None for any other frame: parse it, then hash.
#[inline]
pub fn hash_5tuple_symmetric_eth_v4(data: &[u8]) -> Option<u32> {
    eth_v4_tuple(data).map(hash_5tuple_symmetric_v4)
}

/// The 5-tuple of an untagged Ethernet/IPv4 frame whose headers [`hash_5tuple_symmetric_eth_v4`]
/// takes: source and destination addresses (big-endian words), the ports as they hash (0 for
/// fragments, protocols without ports and a transport header cut short) and the protocol.
/// None for any other frame.
#[inline(always)]
pub fn eth_v4_tuple(data: &[u8]) -> Option<V4Tuple> {
    let (h, hl, total) = eth_v4_header(data)?;
    let pr = h[23];
    if pr == proto::AH {
        // The parser steps over authentication headers to the transport header.
        return None;
    }
    // More-fragments flag or a fragment offset: every fragment hashes without ports.
    let fragment = u16::from_be_bytes([h[20], h[21]]) & 0x3fff != 0;
    let (sp, dp) = if !fragment && matches!(pr, proto::TCP | proto::UDP | proto::SCTP) {
        let off = 14 + hl;
        let end = (14 + total).min(data.len());
        match data.get(off..end) {
            Some(t) if t.len() >= 4 => (
                u16::from_be_bytes([t[0], t[1]]),
                u16::from_be_bytes([t[2], t[3]]),
            ),
            _ => (0, 0),
        }
    } else {
        (0, 0)
    };
    Some(V4Tuple {
        src: be32(h, 26),
        dst: be32(h, 30),
        sport: sp,
        dport: dp,
        proto: pr,
    })
}

/// An IPv4 5-tuple as [`hash_5tuple_symmetric_v4`] hashes it ([`eth_v4_tuple`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct V4Tuple {
    /// Source address, big-endian word.
    pub src: u32,
    /// Destination address, big-endian word.
    pub dst: u32,
    /// Source port (0 where ports do not count).
    pub sport: u16,
    /// Destination port (0 where ports do not count).
    pub dport: u16,
    /// IP protocol.
    pub proto: u8,
}

/// [`hash_5tuple_symmetric`] of an IPv4 5-tuple: no branch and no memory access, so that a loop
/// over a batch's tuples runs packets side by side.
#[inline(always)]
pub fn hash_5tuple_symmetric_v4(t: V4Tuple) -> u32 {
    let src = mm(&[t.src, 0, 0, 0, u32::from(t.sport)]);
    let dst = mm(&[t.dst, 0, 0, 0, u32::from(t.dport)]);
    fmix32(src ^ dst ^ u32::from(t.proto))
}

/// Symmetric MAC hash: `mm(s0, s1) ^ mm(d0, d1)` where `x0` is the first four bytes of the MAC
/// as a big-endian word and `x1` the last two bytes as the high half of a word. Links without
/// MACs (raw IP, NULL) hash the zero MAC.
pub fn hash_mac(p: &Parsed) -> u32 {
    let m = |a: &[u8; 6]| {
        mm(&[
            u32::from_be_bytes([a[0], a[1], a[2], a[3]]),
            u32::from_be_bytes([a[4], a[5], 0, 0]),
        ])
    };
    m(&p.src_mac) ^ m(&p.dst_mac)
}

/// Protocol hash: `fmix32(proto)` of the upper-layer protocol number (0 without IP).
pub fn hash_proto(p: &Parsed) -> u32 {
    fmix32(u32::from(p.proto))
}

/// VLAN hash: `fmix32(id)` of the outermost VLAN id (0 when untagged).
pub fn hash_vlan(p: &Parsed) -> u32 {
    fmix32(u32::from(p.outer_vlan()))
}

/// The 32 key bits starting at bit `8 * i + bit` (bits past the end of the key are zero).
#[inline(always)]
const fn key_window(key: &[u8], i: usize, bit: u32) -> u32 {
    let mut k40: u64 = 0;
    let mut j = 0;
    while j < 5 {
        let b = if i + j < key.len() { key[i + j] } else { 0 };
        k40 = (k40 << 8) | b as u64;
        j += 1;
    }
    (k40 >> (8 - bit)) as u32
}

/// What input byte value `b` at position `i` contributes to the Toeplitz hash (the hash is
/// linear: the XOR of its bytes' contributions).
const fn byte_contribution(key: &[u8], i: usize, b: u8) -> u32 {
    let mut h = 0;
    let mut bit = 0;
    while bit < 8 {
        if b & (0x80 >> bit) != 0 {
            h ^= key_window(key, i, bit);
        }
        bit += 1;
    }
    h
}

/// The Toeplitz hash of `input` under `key` (bits of the key past its end count as zero): for
/// every set bit `i` of the input (most significant bit of byte 0 first), XOR the 32 key bits
/// starting at bit `i`. Bit by bit; [`Toeplitz`] is the table-driven form for a fixed key.
pub fn toeplitz(key: &[u8], input: &[u8]) -> u32 {
    input
        .iter()
        .enumerate()
        .fold(0, |h, (i, &b)| h ^ byte_contribution(key, i, b))
}

/// Longest input [`Toeplitz`] has tables for (IPv6 addresses and ports).
pub const TOEPLITZ_MAX_INPUT: usize = 36;

/// A Toeplitz hasher for one key with a 256-entry table per input position (36 KiB): one lookup
/// and one XOR per input byte.
pub struct Toeplitz {
    key: Vec<u8>,
    table: Box<[[u32; 256]; TOEPLITZ_MAX_INPUT]>,
}

impl Toeplitz {
    /// Builds the tables for `key`.
    pub fn new(key: &[u8]) -> Self {
        let mut table = Box::new([[0u32; 256]; TOEPLITZ_MAX_INPUT]);
        for (i, row) in table.iter_mut().enumerate() {
            for (b, e) in row.iter_mut().enumerate() {
                *e = byte_contribution(key, i, b as u8);
            }
        }
        Toeplitz {
            key: key.to_vec(),
            table,
        }
    }

    /// The same value as [`toeplitz`] with this key.
    pub fn hash(&self, input: &[u8]) -> u32 {
        let mut h = 0;
        for (i, &b) in input.iter().enumerate() {
            h ^= match self.table.get(i) {
                Some(row) => row[usize::from(b)],
                None => byte_contribution(&self.key, i, b),
            };
        }
        h
    }

    /// The same value as [`hash_toeplitz`] with this key.
    pub fn hash_parsed(&self, p: &Parsed) -> u32 {
        if p.ip_version == 0 {
            return 0;
        }
        let (b, n) = rss_input(p);
        self.hash(b.get(..n).unwrap_or_default())
    }
}

/// Tables for [`RSS_KEY_SYMMETRIC`]: its period is 16 bits, so a byte's contribution depends only
/// on the parity of its position (for inputs up to 36 bytes, where the 40-byte key never runs out).
static SYM_TABLE: [[u32; 256]; 2] = {
    let mut t = [[0u32; 256]; 2];
    let mut p = 0;
    while p < 2 {
        let mut b = 0;
        while b < 256 {
            t[p][b] = byte_contribution(&RSS_KEY_SYMMETRIC, p, b as u8);
            b += 1;
        }
        p += 1;
    }
    t
};

/// The RSS input of a packet: src address, dst address (4 or 16 bytes each), then, when ports
/// are used (see [`hash_5tuple_symmetric`]), src port and dst port; returns the buffer and the
/// length used.
fn rss_input(p: &Parsed) -> ([u8; 36], usize) {
    let mut b = [0u8; 36];
    let alen = if p.ip_version == 6 { 16 } else { 4 };
    b[..alen].copy_from_slice(&p.src[..alen]);
    b[alen..2 * alen].copy_from_slice(&p.dst[..alen]);
    if let Some((sp, dp)) = ports_of(p) {
        b[2 * alen..2 * alen + 2].copy_from_slice(&sp.to_be_bytes());
        b[2 * alen + 2..2 * alen + 4].copy_from_slice(&dp.to_be_bytes());
        (b, 2 * alen + 4)
    } else {
        (b, 2 * alen)
    }
}

/// The RSS Toeplitz hash of a packet under `key`, over src IP, dst IP and, for TCP/UDP/SCTP
/// non-fragments, src port and dst port (network byte order), as NICs compute it. Packets
/// without IP hash to 0.
pub fn hash_toeplitz(p: &Parsed, key: &[u8]) -> u32 {
    if p.ip_version == 0 {
        return 0;
    }
    let (b, n) = rss_input(p);
    toeplitz(key, b.get(..n).unwrap_or_default())
}

/// [`hash_toeplitz`] with [`RSS_KEY_SYMMETRIC`]: both directions give the same value.
/// Table-driven (two 1 KiB tables).
pub fn hash_toeplitz_symmetric(p: &Parsed) -> u32 {
    if p.ip_version == 0 {
        return 0;
    }
    let (b, n) = rss_input(p);
    toeplitz_symmetric_bytes(b.get(..n).unwrap_or_default())
}

/// The Toeplitz hash under [`RSS_KEY_SYMMETRIC`] of `b`, through its two tables.
#[inline(always)]
fn toeplitz_symmetric_bytes(b: &[u8]) -> u32 {
    let mut h = 0;
    for (i, &x) in b.iter().enumerate() {
        h ^= SYM_TABLE[i & 1][usize::from(x)];
    }
    h
}

/// [`hash_toeplitz_symmetric`] read straight from the bytes of an untagged Ethernet/IPv4 frame,
/// without a full parse; the same value the parser path gives. None for any other frame: parse
/// it, then hash.
#[inline]
pub fn hash_toeplitz_symmetric_eth_v4(data: &[u8]) -> Option<u32> {
    eth_v4_tuple(data).map(hash_toeplitz_symmetric_v4)
}

/// [`hash_toeplitz_symmetric`] of an IPv4 5-tuple ([`eth_v4_tuple`]): addresses then ports, 12
/// bytes through the two tables. Ports that do not count are 0 there, and a zero byte adds
/// nothing to a Toeplitz hash, so this equals the 8-byte input without ports.
#[inline(always)]
pub fn hash_toeplitz_symmetric_v4(t: V4Tuple) -> u32 {
    let mut b = [0u8; 12];
    b[..4].copy_from_slice(&t.src.to_be_bytes());
    b[4..8].copy_from_slice(&t.dst.to_be_bytes());
    b[8..10].copy_from_slice(&t.sport.to_be_bytes());
    b[10..].copy_from_slice(&t.dport.to_be_bytes());
    toeplitz_symmetric_bytes(&b)
}

/// Which way a packet went relative to its [`FlowKey::canonical`] key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    /// The packet's source is the canonical key's source.
    Forward,
    /// The packet's source is the canonical key's destination.
    Reverse,
}

/// A flow key: VLAN, protocol, addresses and ports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FlowKey {
    /// Outermost VLAN id (0 when untagged).
    pub vlan: u16,
    /// Upper-layer protocol.
    pub proto: u8,
    /// IP version, 4 or 6.
    pub version: u8,
    /// Source address (IPv4 in the first 4 bytes, zeros after).
    pub src: [u8; 16],
    /// Destination address.
    pub dst: [u8; 16],
    /// Source port (TCP/UDP/SCTP); 0 for ICMP.
    pub sport: u16,
    /// Destination port (TCP/UDP/SCTP); `type << 8 | code` for ICMP/ICMPv6, as IPFIX flow
    /// meters record it.
    pub dport: u16,
}

impl FlowKey {
    /// The key of a parsed packet, if it reached IP. Ports are 0 when the transport header was
    /// not read (non-first fragments, truncation, protocols without ports).
    pub fn from_parsed(p: &Parsed) -> Option<FlowKey> {
        if p.ip_version == 0 {
            return None;
        }
        let (sport, dport) = match p.proto {
            proto::ICMP | proto::ICMPV6 if p.l4.is_some() => {
                (0, u16::from(p.icmp_type) << 8 | u16::from(p.icmp_code))
            }
            proto::TCP | proto::UDP | proto::SCTP if p.l4.is_some() => (p.sport, p.dport),
            _ => (0, 0),
        };
        Some(FlowKey {
            vlan: p.outer_vlan(),
            proto: p.proto,
            version: p.ip_version,
            src: p.src,
            dst: p.dst,
            sport,
            dport,
        })
    }

    fn has_ports(&self) -> bool {
        !matches!(self.proto, proto::ICMP | proto::ICMPV6)
    }

    /// The key with source and destination swapped (addresses and, when it has ports, ports).
    pub fn reversed(&self) -> FlowKey {
        let mut k = *self;
        k.src = self.dst;
        k.dst = self.src;
        if self.has_ports() {
            k.sport = self.dport;
            k.dport = self.sport;
        }
        k
    }

    /// The key both directions of a conversation share: the one whose (source address, source
    /// port) is the lesser of the two endpoints (addresses only for ICMP), and which way this
    /// packet went relative to it.
    pub fn canonical(&self) -> (FlowKey, Direction) {
        let forward = if self.has_ports() {
            (self.src, self.sport) <= (self.dst, self.dport)
        } else {
            self.src <= self.dst
        };
        if forward {
            (*self, Direction::Forward)
        } else {
            (self.reversed(), Direction::Reverse)
        }
    }

    fn ip(&self, a: &[u8; 16]) -> IpAddr {
        if self.version == 4 {
            IpAddr::V4(Ipv4Addr::new(a[0], a[1], a[2], a[3]))
        } else {
            IpAddr::V6(Ipv6Addr::from(*a))
        }
    }

    /// Source address.
    pub fn src_ip(&self) -> IpAddr {
        self.ip(&self.src)
    }

    /// Destination address.
    pub fn dst_ip(&self) -> IpAddr {
        self.ip(&self.dst)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// The fast Ethernet/IPv4 path gives the parsed path's hash for every frame it takes, over
    /// every truncation and many single-byte mutations of tagged and untagged frames.
    #[test]
    fn fast_ipv4_hash_equals_parsed_hash() {
        let mut f = vec![0u8; 60];
        f[12] = 0x08;
        f[14] = 0x45;
        f[16..18].copy_from_slice(&46u16.to_be_bytes());
        f[23] = 17;
        f[26..30].copy_from_slice(&[10, 1, 2, 3]);
        f[30..34].copy_from_slice(&[192, 0, 2, 9]);
        let mut taken = 0;
        let mut seed = 0x2545_f491_u32;
        for round in 0..20_000usize {
            let mut g = f.clone();
            if round > 0 {
                seed ^= seed << 13;
                seed ^= seed >> 17;
                seed ^= seed << 5;
                let at = 12 + (seed as usize >> 8) % 24;
                g[at] = (seed & 0xff) as u8;
            }
            let g = &g[..g.len() - round % 30];
            let parsed = hash_ip_symmetric(&parse(g, LinkType::ETHERNET));
            if let Some(h) = hash_ip_symmetric_eth_v4(g) {
                assert_eq!(h, parsed, "frame {g:02x?}");
                taken += 1;
            }
        }
        assert!(taken > 10_000, "{taken}");
    }

    /// The fast Ethernet/IPv4 5-tuple hash gives the parsed path's value for every frame it
    /// takes: TCP, UDP, SCTP, ICMP and other protocols, fragments, options, short total
    /// lengths, every truncation and many single-byte mutations of the IP and transport headers.
    #[test]
    fn fast_5tuple_hash_equals_parsed_hash() {
        let mut taken = 0;
        let mut with_ports = 0;
        let mut seed = 0x9e37_79b9_u32;
        for (base, pr) in [(0usize, 6u8), (1, 17), (2, 132), (3, 1), (4, 47)] {
            let mut f = vec![0u8; 74];
            f[12] = 0x08;
            f[14] = if base == 2 { 0x46 } else { 0x45 }; // one with 4 bytes of options
            f[16..18].copy_from_slice(&60u16.to_be_bytes());
            f[23] = pr;
            f[26..30].copy_from_slice(&[10, 1, 2, 3]);
            f[30..34].copy_from_slice(&[192, 0, 2, 9]);
            let l4 = 14 + usize::from(f[14] & 0x0f) * 4;
            f[l4..l4 + 4].copy_from_slice(&[0x04, 0x00, 0x00, 0x35]);
            f[l4 + 12] = 0x50;
            for round in 0..8_000usize {
                let mut g = f.clone();
                if round > 0 {
                    for _ in 0..1 + round % 3 {
                        seed ^= seed << 13;
                        seed ^= seed >> 17;
                        seed ^= seed << 5;
                        let at = 12 + (seed as usize >> 8) % 36;
                        g[at] = (seed & 0xff) as u8;
                    }
                }
                let g = &g[..g.len() - round % 45];
                let p = parse(g, LinkType::ETHERNET);
                if let Some(h) = hash_5tuple_symmetric_eth_v4(g) {
                    assert_eq!(h, hash_5tuple_symmetric(&p), "frame {g:02x?}");
                    taken += 1;
                    with_ports += usize::from(ports_of(&p).is_some_and(|x| x != (0, 0)));
                }
            }
        }
        assert!(taken > 20_000 && with_ports > 5_000, "{taken} {with_ports}");
    }
    use crate::wire::parse;
    use crate::wire::LinkType;

    fn v4(a: [u8; 4]) -> [u8; 16] {
        let mut b = [0; 16];
        b[..4].copy_from_slice(&a);
        b
    }

    fn v6(s: &str) -> [u8; 16] {
        s.parse::<Ipv6Addr>().unwrap().octets()
    }

    fn flow(version: u8, src: [u8; 16], dst: [u8; 16], sport: u16, dport: u16, pr: u8) -> Parsed {
        Parsed {
            ip_version: version,
            src,
            dst,
            sport,
            dport,
            proto: pr,
            l4: Some(34),
            ..Parsed::default()
        }
    }

    fn swap(p: &Parsed) -> Parsed {
        let mut q = *p;
        q.src = p.dst;
        q.dst = p.src;
        q.sport = p.dport;
        q.dport = p.sport;
        q.src_mac = p.dst_mac;
        q.dst_mac = p.src_mac;
        q
    }

    // Microsoft "Verifying the RSS Hash Calculation" (windows-driver-docs, network/
    // verifying-the-rss-hash-calculation.md): (dst, dport, src, sport, IP-only, with TCP).
    type V4Row = ([u8; 4], u16, [u8; 4], u16, u32, u32);
    const V4: [V4Row; 5] = [
        (
            [161, 142, 100, 80],
            1766,
            [66, 9, 149, 187],
            2794,
            0x323e8fc2,
            0x51ccc178,
        ),
        (
            [65, 69, 140, 83],
            4739,
            [199, 92, 111, 2],
            14230,
            0xd718262a,
            0xc626b0ea,
        ),
        (
            [12, 22, 207, 184],
            38024,
            [24, 19, 198, 95],
            12898,
            0xd2d0a5de,
            0x5c2b394a,
        ),
        (
            [209, 142, 163, 6],
            2217,
            [38, 27, 205, 30],
            48228,
            0x82989176,
            0xafc7327f,
        ),
        (
            [202, 188, 127, 2],
            1303,
            [153, 39, 163, 191],
            44251,
            0x5d1809c5,
            0x10e828a2,
        ),
    ];
    type V6Row = (&'static str, u16, &'static str, u16, u32, u32);
    const V6: [V6Row; 3] = [
        (
            "3ffe:2501:200:3::1",
            1766,
            "3ffe:2501:200:1fff::7",
            2794,
            0x2cc18cd5,
            0x40207d3d,
        ),
        (
            "ff02::1",
            4739,
            "3ffe:501:8::260:97ff:fe40:efab",
            14230,
            0x0f0c461c,
            0xdde51bbf,
        ),
        (
            "fe80::200:f8ff:fe21:67cf",
            38024,
            "3ffe:1900:4545:3:200:f8ff:fe21:67cf",
            44251,
            0x4b61e985,
            0x02d1feef,
        ),
    ];

    #[test]
    fn toeplitz_microsoft_vectors() {
        for (dst, dport, src, sport, ip_only, with_tcp) in V4 {
            let tcp = flow(4, v4(src), v4(dst), sport, dport, 6);
            assert_eq!(hash_toeplitz(&tcp, &RSS_KEY_MICROSOFT), with_tcp);
            let other = flow(4, v4(src), v4(dst), 0, 0, 47);
            assert_eq!(hash_toeplitz(&other, &RSS_KEY_MICROSOFT), ip_only);
        }
        for (dst, dport, src, sport, ip_only, with_tcp) in V6 {
            let tcp = flow(6, v6(src), v6(dst), sport, dport, 6);
            assert_eq!(hash_toeplitz(&tcp, &RSS_KEY_MICROSOFT), with_tcp, "{src}");
            let other = flow(6, v6(src), v6(dst), 0, 0, 47);
            assert_eq!(hash_toeplitz(&other, &RSS_KEY_MICROSOFT), ip_only, "{src}");
        }
    }

    #[test]
    fn table_forms_match_the_bitwise_hash() {
        let ms = Toeplitz::new(&RSS_KEY_MICROSOFT);
        for (dst, dport, src, sport, _, with_tcp) in V4 {
            let tcp = flow(4, v4(src), v4(dst), sport, dport, 6);
            assert_eq!(ms.hash_parsed(&tcp), with_tcp);
        }
        let mut r = Rng(7);
        for n in 0..=40 {
            let input: Vec<u8> = (0..n).map(|_| r.next() as u8).collect();
            assert_eq!(
                ms.hash(&input),
                toeplitz(&RSS_KEY_MICROSOFT, &input),
                "len {n}"
            );
            if n <= TOEPLITZ_MAX_INPUT {
                let mut h = 0;
                for (i, &b) in input.iter().enumerate() {
                    h ^= SYM_TABLE[i & 1][usize::from(b)];
                }
                assert_eq!(h, toeplitz(&RSS_KEY_SYMMETRIC, &input), "len {n}");
            }
        }
        let p = flow(6, v6("2001:db8::1"), v6("2001:db8::2"), 1, 2, 17);
        assert_eq!(
            hash_toeplitz_symmetric(&p),
            hash_toeplitz(&p, &RSS_KEY_SYMMETRIC)
        );
    }

    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            // xorshift64*
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
    }

    #[test]
    fn symmetric_hashes_on_random_flows() {
        let mut r = Rng(0x1234_5678_9abc_def1);
        let mut distinct = std::collections::HashSet::new();
        for i in 0..10_000 {
            let version = if i % 3 == 0 { 6 } else { 4 };
            let mut src = [0u8; 16];
            let mut dst = [0u8; 16];
            let n = if version == 4 { 4 } else { 16 };
            for b in src.iter_mut().take(n) {
                *b = r.next() as u8;
            }
            for b in dst.iter_mut().take(n) {
                *b = r.next() as u8;
            }
            let pr = [6u8, 17, 132, 1][i % 4];
            let mut p = flow(version, src, dst, r.next() as u16, r.next() as u16, pr);
            p.src_mac = [r.next() as u8, 1, 2, 3, 4, r.next() as u8];
            p.dst_mac = [r.next() as u8, 5, 6, 7, 8, r.next() as u8];
            let q = swap(&p);
            assert_eq!(hash_ip_symmetric(&p), hash_ip_symmetric(&q));
            assert_eq!(hash_5tuple_symmetric(&p), hash_5tuple_symmetric(&q));
            assert_eq!(hash_mac(&p), hash_mac(&q));
            assert_eq!(hash_toeplitz_symmetric(&p), hash_toeplitz_symmetric(&q));
            assert_eq!(hash_proto(&p), hash_proto(&q));
            let k = FlowKey::from_parsed(&p).unwrap();
            let kq = FlowKey::from_parsed(&q).unwrap();
            let (c1, d1) = k.canonical();
            let (c2, d2) = kq.canonical();
            assert_eq!(c1, c2);
            assert_ne!(d1, d2);
            distinct.insert(hash_5tuple_symmetric(&p));
        }
        // A balancing hash must spread: 10 000 random flows give (almost) 10 000 values.
        assert!(distinct.len() > 9_990, "{}", distinct.len());
    }

    #[test]
    fn five_tuple_spreads_over_queues() {
        // Flows between hosts of one /24 (the case an XOR of raw addresses gets wrong).
        let mut queues = [0u32; 8];
        for a in 1..=64u8 {
            for b in 65..=80u8 {
                let p = flow(4, v4([10, 0, 0, a]), v4([10, 0, 0, b]), 1000, 80, 6);
                queues[(hash_ip_symmetric(&p) % 8) as usize] += 1;
            }
        }
        // 1024 flows, 128 expected per queue.
        assert!(
            queues.iter().all(|&q| (80..=176).contains(&q)),
            "{queues:?}"
        );
    }

    #[test]
    fn fragments_and_icmp_keys() {
        let mut p = flow(4, v4([1, 2, 3, 4]), v4([5, 6, 7, 8]), 1, 2, 17);
        let whole = hash_5tuple_symmetric(&p);
        p.fragment = Some(crate::wire::Fragment {
            id: 1,
            offset: 0,
            more: true,
        });
        let first = hash_5tuple_symmetric(&p);
        let mut later = p;
        later.sport = 0;
        later.dport = 0;
        later.l4 = None;
        later.fragment = Some(crate::wire::Fragment {
            id: 1,
            offset: 1480,
            more: false,
        });
        assert_eq!(first, hash_5tuple_symmetric(&later));
        assert_ne!(whole, first);

        let mut icmp = flow(4, v4([9, 9, 9, 9]), v4([1, 1, 1, 1]), 0, 0, 1);
        icmp.icmp_type = 8;
        let k = FlowKey::from_parsed(&icmp).unwrap();
        assert_eq!((k.sport, k.dport), (0, 0x0800));
        let (c, d) = k.canonical();
        assert_eq!(d, Direction::Reverse);
        assert_eq!(
            (c.src_ip().to_string(), c.dport),
            ("1.1.1.1".to_string(), 0x0800)
        );
    }

    #[test]
    fn hashes_of_parsed_vlan_packet() {
        let mut f = vec![0xff; 6];
        f.extend_from_slice(&[2, 0, 0, 0, 0, 1]);
        f.extend_from_slice(&[0x81, 0x00, 0x00, 0x2a, 0x08, 0x06]);
        f.extend_from_slice(&[0; 28]);
        let p = parse(&f, LinkType::ETHERNET);
        assert_eq!(p.outer_vlan(), 42);
        assert_eq!(hash_vlan(&p), fmix32(42));
        assert_eq!(hash_ip_symmetric(&p), 0);
        assert_eq!(hash_toeplitz_symmetric(&p), 0);
        assert_ne!(hash_mac(&p), 0);
        assert_eq!(FlowKey::from_parsed(&p), None);
    }
}

//! The Internet checksum (RFC 1071): one's-complement sums, TCP/UDP pseudo-headers for IPv4 and
//! IPv6, and incremental update (RFC 1624) for rewriting a field without summing the packet again.
//!
//! A *sum* is an unfolded 32-bit accumulator; [`fold`] reduces it to 16 bits and [`finish`] gives
//! the value to store in a header (the complement of the folded sum). A header whose checksum
//! field is correct sums (with [`sum`]) to 0xffff, so `finish(...) == 0` verifies it.

/// Adds the bytes of `data`, as big-endian 16-bit words (an odd last byte is padded with a zero
/// byte), to the running sum `initial`.
pub fn sum(data: &[u8], initial: u32) -> u32 {
    let mut acc: u64 = u64::from(initial);
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_be_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        // Add the four 16-bit words through two 32-bit halves to keep the carries.
        acc += (w >> 32) + (w & 0xffff_ffff);
    }
    let mut rest = chunks.remainder().chunks_exact(2);
    for c in &mut rest {
        acc += u64::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = rest.remainder() {
        acc += u64::from(*last) << 8;
    }
    // Fold 64 → 32 bits (the result still has the same one's-complement value mod 0xffff).
    while acc > 0xffff_ffff {
        acc = (acc >> 32) + (acc & 0xffff_ffff);
    }
    acc as u32
}

/// Folds a 32-bit sum to 16 bits with end-around carry.
#[inline]
pub fn fold(mut s: u32) -> u16 {
    while s > 0xffff {
        s = (s >> 16) + (s & 0xffff);
    }
    s as u16
}

/// The checksum to store for a running sum: the complement of the folded sum.
#[inline]
pub fn finish(s: u32) -> u16 {
    !fold(s)
}

/// The Internet checksum of `data` (what goes in an IPv4 header checksum field when `data` is
/// the header with that field zeroed). Verifying a header with its checksum in place gives 0.
pub fn checksum(data: &[u8]) -> u16 {
    finish(sum(data, 0))
}

/// The sum of the IPv4 pseudo-header: source, destination, zero, protocol, and the transport
/// length (header + payload).
pub fn pseudo_v4(src: [u8; 4], dst: [u8; 4], proto: u8, len: u16) -> u32 {
    let mut b = [0u8; 12];
    b[..4].copy_from_slice(&src);
    b[4..8].copy_from_slice(&dst);
    b[9] = proto;
    b[10..12].copy_from_slice(&len.to_be_bytes());
    sum(&b, 0)
}

/// The sum of the IPv6 pseudo-header (RFC 8200 8.1): source, destination, 32-bit upper-layer
/// length, three zero bytes and the next-header value.
pub fn pseudo_v6(src: &[u8; 16], dst: &[u8; 16], proto: u8, len: u32) -> u32 {
    let mut b = [0u8; 40];
    b[..16].copy_from_slice(src);
    b[16..32].copy_from_slice(dst);
    b[32..36].copy_from_slice(&len.to_be_bytes());
    b[39] = proto;
    sum(&b, 0)
}

/// The TCP/UDP/ICMPv6-style checksum of `segment` (transport header with its checksum field
/// zeroed, plus payload) over IPv4. Verifying a segment with its checksum in place gives 0.
/// Segments longer than 65535 bytes cannot be carried by IPv4; the length is truncated.
pub fn transport_v4(src: [u8; 4], dst: [u8; 4], proto: u8, segment: &[u8]) -> u16 {
    let len = segment.len() as u16;
    finish(sum(segment, pseudo_v4(src, dst, proto, len)))
}

/// The transport checksum of `segment` over IPv6 (see [`transport_v4`]).
pub fn transport_v6(src: &[u8; 16], dst: &[u8; 16], proto: u8, segment: &[u8]) -> u16 {
    let len = segment.len() as u32;
    finish(sum(segment, pseudo_v6(src, dst, proto, len)))
}

/// Incremental update (RFC 1624, eqn. 3: `HC' = ~(~HC + ~m + m')`) of checksum `hc` when a
/// 16-bit word of the covered data changes from `old` to `new`.
#[inline]
pub fn update16(hc: u16, old: u16, new: u16) -> u16 {
    let s = u32::from(!hc) + u32::from(!old) + u32::from(new);
    !fold(s)
}

/// Incremental update of checksum `hc` when a 32-bit field (an IPv4 address, a sequence number)
/// changes from `old` to `new`.
#[inline]
pub fn update32(hc: u16, old: u32, new: u32) -> u16 {
    let s = u32::from(!hc)
        + u32::from(!(old >> 16) as u16)
        + u32::from(!(old as u16))
        + (new >> 16)
        + (new & 0xffff);
    !fold(s)
}

/// Incremental update of checksum `hc` when `old` bytes are replaced by `new` bytes of the same
/// even length at an even offset (an IPv6 address, a MAC-sized field in a covered header).
pub fn update_bytes(hc: u16, old: &[u8], new: &[u8]) -> u16 {
    // ~HC + ~m + m' where ~m of a multi-word field is the complement of its folded sum.
    let s = u32::from(!hc) + u32::from(!fold(sum(old, 0))) + u32::from(fold(sum(new, 0)));
    !fold(s)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    // RFC 1071 section 3 example: words 0001 f203 f4f5 f6f7 sum to ddf2 (folded).
    #[test]
    fn rfc1071_example() {
        let d = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold(sum(&d, 0)), 0xddf2);
        assert_eq!(checksum(&d), !0xddf2);
    }

    // A well-known IPv4 header (from the Wikipedia "IPv4 header checksum" example):
    // 4500 0073 0000 4000 4011 [b861] c0a8 0001 c0a8 00c7.
    #[test]
    fn ipv4_header_known_value() {
        let mut h = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(checksum(&h), 0xb861);
        h[10] = 0xb8;
        h[11] = 0x61;
        assert_eq!(checksum(&h), 0);
    }

    #[test]
    fn odd_length_and_chunking_agree() {
        // Sum of every length from 0 to 40 equals a naive word-by-word sum.
        let d: Vec<u8> = (0u8..41)
            .map(|i| i.wrapping_mul(37).wrapping_add(11))
            .collect();
        for n in 0..=d.len() {
            let mut naive: u32 = 0;
            for c in d[..n].chunks(2) {
                let w = if c.len() == 2 {
                    u16::from_be_bytes([c[0], c[1]])
                } else {
                    u16::from(c[0]) << 8
                };
                naive += u32::from(w);
            }
            assert_eq!(fold(sum(&d[..n], 0)), fold(naive), "len {n}");
        }
    }

    #[test]
    fn incremental_matches_full() {
        let mut h = [
            0x45, 0x00, 0x00, 0x73, 0x12, 0x34, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        let c0 = checksum(&h);
        // Change the TTL/protocol word.
        let old = u16::from_be_bytes([h[8], h[9]]);
        h[8] = 0x3f;
        let new = u16::from_be_bytes([h[8], h[9]]);
        let c1 = update16(c0, old, new);
        assert_eq!(c1, checksum(&h));
        // Change the source address.
        let olda = u32::from_be_bytes([h[12], h[13], h[14], h[15]]);
        h[12..16].copy_from_slice(&[10, 1, 2, 3]);
        let c2 = update32(c1, olda, 0x0a01_0203);
        assert_eq!(c2, checksum(&h));
        let oldb = h[16..20].to_vec();
        h[16..20].copy_from_slice(&[172, 16, 255, 254]);
        assert_eq!(update_bytes(c2, &oldb, &h[16..20]), checksum(&h));
    }

    #[test]
    fn udp_over_v4_and_v6_verify() {
        // UDP 1234 -> 53, payload "abc"; checksum computed then verified in place.
        let mut seg = [
            0x04, 0xd2, 0x00, 0x35, 0x00, 0x0b, 0x00, 0x00, b'a', b'b', b'c',
        ];
        let s4 = [192, 0, 2, 1];
        let d4 = [198, 51, 100, 7];
        let c = transport_v4(s4, d4, 17, &seg);
        seg[6..8].copy_from_slice(&c.to_be_bytes());
        assert_eq!(transport_v4(s4, d4, 17, &seg), 0);
        // Hand computation: pseudo c000+0201+c633+6407+0011+000b, header 04d2+0035+000b,
        // payload 6162+6300 = 0x2b5cb → folded 0xb5cd; checksum !0xb5cd = 0x4a32.
        assert_eq!(c, 0x4a32);
        seg[6] = 0;
        seg[7] = 0;
        let mut s6 = [0u8; 16];
        s6[0] = 0x20;
        s6[1] = 0x01;
        s6[15] = 1;
        let mut d6 = s6;
        d6[15] = 2;
        let c6 = transport_v6(&s6, &d6, 17, &seg);
        seg[6..8].copy_from_slice(&c6.to_be_bytes());
        assert_eq!(transport_v6(&s6, &d6, 17, &seg), 0);
    }
}

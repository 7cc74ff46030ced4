//! IPv4 headers (RFC 791).

use super::{arr, be16, checksum, Layer, WireError};

/// Length of the IPv4 header without options.
pub const MIN_HEADER_LEN: usize = 20;
/// "More fragments" flag in the flags/offset word.
pub const FLAG_MF: u16 = 0x2000;
/// "Don't fragment" flag in the flags/offset word.
pub const FLAG_DF: u16 = 0x4000;

/// A checked view of an IPv4 packet: the version is 4, the header (with its options) is present
/// and the total length covers at least the header. The buffer may end before the total length
/// (a capture snapped short); [`Ipv4Packet::payload`] is then shorter than announced.
#[derive(Clone, Copy, Debug)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// Checks version, header length and total length once.
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        let d = buf.as_ref();
        let Some(&b0) = d.first() else {
            return Err(WireError::Truncated(Layer::Ipv4));
        };
        if b0 >> 4 != 4 {
            return Err(WireError::BadVersion);
        }
        let hl = usize::from(b0 & 0x0f) * 4;
        if hl < MIN_HEADER_LEN {
            return Err(WireError::BadHeaderLength(Layer::Ipv4));
        }
        if d.len() < hl {
            return Err(WireError::Truncated(Layer::Ipv4));
        }
        if usize::from(be16(d, 2).unwrap_or_default()) < hl {
            return Err(WireError::BadLength(Layer::Ipv4));
        }
        Ok(Ipv4Packet { buf })
    }

    fn d(&self) -> &[u8] {
        self.buf.as_ref()
    }

    fn b(&self, off: usize) -> u8 {
        self.d().get(off).copied().unwrap_or_default()
    }

    fn w(&self, off: usize) -> u16 {
        be16(self.d(), off).unwrap_or_default()
    }

    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buf
    }

    /// IP version (always 4 for a checked view).
    pub fn version(&self) -> u8 {
        self.b(0) >> 4
    }

    /// Header length field in 32-bit words.
    pub fn ihl(&self) -> u8 {
        self.b(0) & 0x0f
    }

    /// Header length in bytes (20..=60).
    pub fn header_len(&self) -> usize {
        usize::from(self.ihl()) * 4
    }

    /// DSCP and ECN byte.
    pub fn tos(&self) -> u8 {
        self.b(1)
    }

    /// Total length (header + payload) announced.
    pub fn total_len(&self) -> u16 {
        self.w(2)
    }

    /// Identification.
    pub fn ident(&self) -> u16 {
        self.w(4)
    }

    /// The three flag bits (reserved, DF, MF) in the low bits.
    pub fn flags(&self) -> u8 {
        (self.w(6) >> 13) as u8
    }

    /// Don't-fragment flag.
    pub fn dont_frag(&self) -> bool {
        self.w(6) & FLAG_DF != 0
    }

    /// More-fragments flag.
    pub fn more_frags(&self) -> bool {
        self.w(6) & FLAG_MF != 0
    }

    /// Fragment offset in bytes.
    pub fn frag_offset(&self) -> u16 {
        (self.w(6) & 0x1fff) << 3
    }

    /// Whether this is a fragment (MF set or offset non-zero).
    pub fn is_fragment(&self) -> bool {
        self.more_frags() || self.frag_offset() != 0
    }

    /// Whether this is the first fragment of a fragmented datagram (MF set, offset zero).
    pub fn is_first_fragment(&self) -> bool {
        self.more_frags() && self.frag_offset() == 0
    }

    /// Time to live.
    pub fn ttl(&self) -> u8 {
        self.b(8)
    }

    /// Protocol of the payload.
    pub fn protocol(&self) -> u8 {
        self.b(9)
    }

    /// Header checksum field.
    pub fn checksum(&self) -> u16 {
        self.w(10)
    }

    /// Source address.
    pub fn src(&self) -> [u8; 4] {
        arr(self.d(), 12).unwrap_or_default()
    }

    /// Destination address.
    pub fn dst(&self) -> [u8; 4] {
        arr(self.d(), 16).unwrap_or_default()
    }

    /// The options (header bytes after the first 20).
    pub fn options(&self) -> &[u8] {
        self.d()
            .get(MIN_HEADER_LEN..self.header_len())
            .unwrap_or_default()
    }

    /// Whether the header checksum is correct.
    pub fn verify_checksum(&self) -> bool {
        checksum::checksum(self.d().get(..self.header_len()).unwrap_or_default()) == 0
    }

    /// The checksum the header should carry (computed with the checksum field taken as zero).
    pub fn compute_checksum(&self) -> u16 {
        let d = self.d();
        let before = d.get(..10).unwrap_or_default();
        let after = d.get(12..self.header_len()).unwrap_or_default();
        checksum::finish(checksum::sum(after, checksum::sum(before, 0)))
    }

    /// The payload, bounded by the total length and by the buffer.
    pub fn payload(&self) -> &[u8] {
        let end = usize::from(self.total_len()).min(self.d().len());
        self.d().get(self.header_len()..end).unwrap_or_default()
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    /// Recomputes and stores the header checksum.
    pub fn fill_checksum(&mut self) {
        let c = self.compute_checksum();
        if let Some(f) = self.buf.as_mut().get_mut(10..12) {
            f.copy_from_slice(&c.to_be_bytes());
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// 192.168.0.1 → 192.168.0.199, UDP, total 0x73, DF, checksum 0xb861 (a known value).
    const H: [u8; 20] = [
        0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8, 0x00,
        0x01, 0xc0, 0xa8, 0x00, 0xc7,
    ];

    #[test]
    fn fields_and_checksum() {
        let mut p = H.to_vec();
        p.resize(0x73 + 10, 0xee); // trailing Ethernet-style padding past the total length
        let v = Ipv4Packet::new_checked(&p[..]).unwrap();
        assert_eq!(v.version(), 4);
        assert_eq!(v.header_len(), 20);
        assert_eq!(v.total_len(), 0x73);
        assert!(v.dont_frag());
        assert!(!v.is_fragment());
        assert_eq!(v.ttl(), 64);
        assert_eq!(v.protocol(), 17);
        assert_eq!(v.src(), [192, 168, 0, 1]);
        assert_eq!(v.dst(), [192, 168, 0, 199]);
        assert!(v.verify_checksum());
        assert_eq!(v.compute_checksum(), 0xb861);
        assert_eq!(v.payload().len(), 0x73 - 20);
        assert!(v.options().is_empty());
    }

    #[test]
    fn options_and_fragments() {
        let mut p = H.to_vec();
        p[0] = 0x46;
        p[6] = 0x20; // MF, offset 0
        p[7] = 0x00;
        p.splice(20..20, [0x01, 0x01, 0x01, 0x00]);
        p.resize(0x73, 0);
        let mut v = Ipv4Packet::new_checked(&mut p[..]).unwrap();
        v.fill_checksum();
        assert!(v.verify_checksum());
        assert_eq!(v.options(), &[1, 1, 1, 0]);
        assert!(v.is_fragment());
        assert!(v.is_first_fragment());
        p[6] = 0x00;
        p[7] = 0x10; // offset 16 * 8
        let v = Ipv4Packet::new_checked(&p[..]).unwrap();
        assert!(v.is_fragment());
        assert!(!v.is_first_fragment());
        assert_eq!(v.frag_offset(), 128);
        assert!(!v.verify_checksum());
    }

    #[test]
    fn malformed() {
        let mut p = H.to_vec();
        p[0] = 0x65;
        assert_eq!(
            Ipv4Packet::new_checked(&p[..]).err(),
            Some(WireError::BadVersion)
        );
        p[0] = 0x44;
        assert_eq!(
            Ipv4Packet::new_checked(&p[..]).err(),
            Some(WireError::BadHeaderLength(Layer::Ipv4))
        );
        p[0] = 0x45;
        p[2] = 0;
        p[3] = 19;
        assert_eq!(
            Ipv4Packet::new_checked(&p[..]).err(),
            Some(WireError::BadLength(Layer::Ipv4))
        );
    }

    #[test]
    fn every_truncation() {
        let mut p = H.to_vec();
        p[0] = 0x47; // 28-byte header
        p.resize(0x73, 0);
        for n in 0..p.len() {
            match Ipv4Packet::new_checked(&p[..n]) {
                Ok(v) => {
                    assert!(n >= 28);
                    assert_eq!(v.payload().len(), n - 28);
                    let _ = (
                        v.options(),
                        v.verify_checksum(),
                        v.compute_checksum(),
                        v.flags(),
                    );
                }
                Err(e) => {
                    assert!(n < 28);
                    assert_eq!(e, WireError::Truncated(Layer::Ipv4));
                }
            }
        }
    }
}

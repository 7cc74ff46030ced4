//! Transport headers: TCP (RFC 9293), UDP (RFC 768), ICMP (RFC 792) and ICMPv6 (RFC 4443).

use super::{be16, be32, checksum, proto, Layer, WireError};

/// TCP flag bits as in the 13th header byte (plus NS, bit 8, from the 12th).
pub mod tcp_flags {
    /// FIN.
    pub const FIN: u16 = 0x001;
    /// SYN.
    pub const SYN: u16 = 0x002;
    /// RST.
    pub const RST: u16 = 0x004;
    /// PSH.
    pub const PSH: u16 = 0x008;
    /// ACK.
    pub const ACK: u16 = 0x010;
    /// URG.
    pub const URG: u16 = 0x020;
    /// ECE.
    pub const ECE: u16 = 0x040;
    /// CWR.
    pub const CWR: u16 = 0x080;
    /// NS (historic ECN nonce).
    pub const NS: u16 = 0x100;
}

/// Minimum TCP header length.
pub const TCP_MIN_HEADER_LEN: usize = 20;
/// UDP header length.
pub const UDP_HEADER_LEN: usize = 8;
/// ICMP / ICMPv6 header length (type, code, checksum, 4 bytes of rest-of-header).
pub const ICMP_HEADER_LEN: usize = 8;

/// A checked view of a TCP segment: the header with its options is present.
#[derive(Clone, Copy, Debug)]
pub struct TcpSegment<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> TcpSegment<T> {
    /// Checks the data offset and that the header with its options is present.
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        let d = buf.as_ref();
        let Some(&b12) = d.get(12) else {
            return Err(WireError::Truncated(Layer::Tcp));
        };
        let hl = usize::from(b12 >> 4) * 4;
        if hl < TCP_MIN_HEADER_LEN {
            return Err(WireError::BadHeaderLength(Layer::Tcp));
        }
        if d.len() < hl {
            return Err(WireError::Truncated(Layer::Tcp));
        }
        Ok(TcpSegment { buf })
    }

    fn d(&self) -> &[u8] {
        self.buf.as_ref()
    }

    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buf
    }

    /// Source port.
    pub fn src_port(&self) -> u16 {
        be16(self.d(), 0).unwrap_or_default()
    }

    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        be16(self.d(), 2).unwrap_or_default()
    }

    /// Sequence number.
    pub fn seq(&self) -> u32 {
        be32(self.d(), 4).unwrap_or_default()
    }

    /// Acknowledgment number.
    pub fn ack(&self) -> u32 {
        be32(self.d(), 8).unwrap_or_default()
    }

    /// Data offset in 32-bit words.
    pub fn data_offset(&self) -> u8 {
        self.d().get(12).copied().unwrap_or_default() >> 4
    }

    /// Header length in bytes (20..=60).
    pub fn header_len(&self) -> usize {
        usize::from(self.data_offset()) * 4
    }

    /// The nine flag bits (see [`tcp_flags`]).
    pub fn flags(&self) -> u16 {
        be16(self.d(), 12).unwrap_or_default() & 0x01ff
    }

    /// Whether every bit of `f` is set in [`Self::flags`].
    pub fn has(&self, f: u16) -> bool {
        self.flags() & f == f
    }

    /// Receive window.
    pub fn window(&self) -> u16 {
        be16(self.d(), 14).unwrap_or_default()
    }

    /// Checksum field.
    pub fn checksum(&self) -> u16 {
        be16(self.d(), 16).unwrap_or_default()
    }

    /// Urgent pointer.
    pub fn urgent(&self) -> u16 {
        be16(self.d(), 18).unwrap_or_default()
    }

    /// The options (header bytes after the first 20).
    pub fn options(&self) -> &[u8] {
        self.d()
            .get(TCP_MIN_HEADER_LEN..self.header_len())
            .unwrap_or_default()
    }

    /// The payload (the rest of the buffer; bound the buffer by the IP length first).
    pub fn payload(&self) -> &[u8] {
        self.d().get(self.header_len()..).unwrap_or_default()
    }

    /// Whether the checksum is right for the whole buffer as the segment, over IPv4.
    pub fn verify_checksum_v4(&self, src: [u8; 4], dst: [u8; 4]) -> bool {
        checksum::transport_v4(src, dst, proto::TCP, self.d()) == 0
    }

    /// Whether the checksum is right for the whole buffer as the segment, over IPv6.
    pub fn verify_checksum_v6(&self, src: &[u8; 16], dst: &[u8; 16]) -> bool {
        checksum::transport_v6(src, dst, proto::TCP, self.d()) == 0
    }
}

/// A checked view of a UDP datagram: the 8-byte header is present and its length field is
/// at least 8.
#[derive(Clone, Copy, Debug)]
pub struct UdpDatagram<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> UdpDatagram<T> {
    /// Checks that the header is present and the length field covers it.
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        let d = buf.as_ref();
        let Some(len) = be16(d, 4) else {
            return Err(WireError::Truncated(Layer::Udp));
        };
        if d.len() < UDP_HEADER_LEN {
            return Err(WireError::Truncated(Layer::Udp));
        }
        if usize::from(len) < UDP_HEADER_LEN {
            return Err(WireError::BadLength(Layer::Udp));
        }
        Ok(UdpDatagram { buf })
    }

    fn d(&self) -> &[u8] {
        self.buf.as_ref()
    }

    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buf
    }

    /// Source port.
    pub fn src_port(&self) -> u16 {
        be16(self.d(), 0).unwrap_or_default()
    }

    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        be16(self.d(), 2).unwrap_or_default()
    }

    /// Length field (header + payload).
    pub fn len(&self) -> u16 {
        be16(self.d(), 4).unwrap_or_default()
    }

    /// Whether the length field announces no payload.
    pub fn is_empty(&self) -> bool {
        usize::from(self.len()) <= UDP_HEADER_LEN
    }

    /// Checksum field (0: none, over IPv4).
    pub fn checksum(&self) -> u16 {
        be16(self.d(), 6).unwrap_or_default()
    }

    /// The payload, bounded by the length field and the buffer.
    pub fn payload(&self) -> &[u8] {
        let end = usize::from(self.len()).min(self.d().len());
        self.d().get(UDP_HEADER_LEN..end).unwrap_or_default()
    }

    fn datagram(&self) -> &[u8] {
        let end = usize::from(self.len()).min(self.d().len());
        self.d().get(..end).unwrap_or_default()
    }

    /// Whether the checksum is right over IPv4 (a zero checksum means "none" and passes).
    pub fn verify_checksum_v4(&self, src: [u8; 4], dst: [u8; 4]) -> bool {
        self.checksum() == 0 || checksum::transport_v4(src, dst, proto::UDP, self.datagram()) == 0
    }

    /// Whether the checksum is right over IPv6 (where it is mandatory).
    pub fn verify_checksum_v6(&self, src: &[u8; 16], dst: &[u8; 16]) -> bool {
        checksum::transport_v6(src, dst, proto::UDP, self.datagram()) == 0
    }
}

/// A checked view of an ICMP or ICMPv6 message: the 8-byte header is present.
#[derive(Clone, Copy, Debug)]
pub struct IcmpPacket<T: AsRef<[u8]>> {
    buf: T,
}

/// ICMPv6 messages have the same first 8 bytes as ICMP.
pub type Icmpv6Packet<T> = IcmpPacket<T>;

impl<T: AsRef<[u8]>> IcmpPacket<T> {
    /// Checks that the 8-byte header is present.
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        if buf.as_ref().len() < ICMP_HEADER_LEN {
            return Err(WireError::Truncated(Layer::Icmp));
        }
        Ok(IcmpPacket { buf })
    }

    fn d(&self) -> &[u8] {
        self.buf.as_ref()
    }

    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buf
    }

    /// Message type.
    pub fn msg_type(&self) -> u8 {
        self.d().first().copied().unwrap_or_default()
    }

    /// Message code.
    pub fn code(&self) -> u8 {
        self.d().get(1).copied().unwrap_or_default()
    }

    /// Checksum field.
    pub fn checksum(&self) -> u16 {
        be16(self.d(), 2).unwrap_or_default()
    }

    /// The 4 type-specific bytes after the checksum (identifier and sequence for echo).
    pub fn rest_of_header(&self) -> u32 {
        be32(self.d(), 4).unwrap_or_default()
    }

    /// The message body after the 8-byte header.
    pub fn payload(&self) -> &[u8] {
        self.d().get(ICMP_HEADER_LEN..).unwrap_or_default()
    }

    /// Whether an ICMP (v4) checksum over the whole buffer is right.
    pub fn verify_checksum(&self) -> bool {
        checksum::checksum(self.d()) == 0
    }

    /// Whether an ICMPv6 checksum (with the IPv6 pseudo-header) over the whole buffer is right.
    pub fn verify_checksum_v6(&self, src: &[u8; 16], dst: &[u8; 16]) -> bool {
        checksum::transport_v6(src, dst, proto::ICMPV6, self.d()) == 0
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn tcp() -> Vec<u8> {
        let mut t = vec![
            0x30, 0x39, 0x00, 0x50, 0, 0, 0, 1, 0, 0, 0, 2, 0x60, 0x12, 0xff, 0xff, 0, 0, 0, 0,
        ];
        t.extend_from_slice(&[2, 4, 0x05, 0xb4]); // MSS option
        t.extend_from_slice(b"hello");
        let c = checksum::transport_v4([10, 0, 0, 1], [10, 0, 0, 2], 6, &t);
        t[16..18].copy_from_slice(&c.to_be_bytes());
        t
    }

    #[test]
    fn tcp_fields() {
        let t = tcp();
        let s = TcpSegment::new_checked(&t[..]).unwrap();
        assert_eq!((s.src_port(), s.dst_port()), (12345, 80));
        assert_eq!((s.seq(), s.ack()), (1, 2));
        assert_eq!(s.header_len(), 24);
        assert_eq!(s.flags(), tcp_flags::SYN | tcp_flags::ACK);
        assert!(s.has(tcp_flags::SYN));
        assert!(!s.has(tcp_flags::FIN));
        assert_eq!(s.window(), 0xffff);
        assert_eq!(s.urgent(), 0);
        assert_eq!(s.options(), &[2, 4, 5, 0xb4]);
        assert_eq!(s.payload(), b"hello");
        assert!(s.verify_checksum_v4([10, 0, 0, 1], [10, 0, 0, 2]));
        assert!(!s.verify_checksum_v4([10, 0, 0, 1], [10, 0, 0, 3]));
    }

    #[test]
    fn tcp_truncations() {
        let t = tcp();
        for n in 0..t.len() {
            match TcpSegment::new_checked(&t[..n]) {
                Ok(s) => {
                    assert!(n >= 24);
                    let _ = (s.flags(), s.options(), s.payload(), s.checksum());
                }
                Err(e) => {
                    assert!(n < 24);
                    assert_eq!(e, WireError::Truncated(Layer::Tcp));
                }
            }
        }
        let mut bad = t.clone();
        bad[12] = 0x40;
        assert_eq!(
            TcpSegment::new_checked(&bad[..]).err(),
            Some(WireError::BadHeaderLength(Layer::Tcp))
        );
    }

    #[test]
    fn udp_fields_and_truncations() {
        let mut u = vec![
            0x04, 0xd2, 0x00, 0x35, 0x00, 0x0b, 0, 0, b'a', b'b', b'c', 0xee, 0xee,
        ];
        let c = checksum::transport_v4([192, 0, 2, 1], [198, 51, 100, 7], 17, &u[..11]);
        u[6..8].copy_from_slice(&c.to_be_bytes());
        let d = UdpDatagram::new_checked(&u[..]).unwrap();
        assert_eq!((d.src_port(), d.dst_port(), d.len()), (1234, 53, 11));
        assert_eq!(d.payload(), b"abc");
        assert!(!d.is_empty());
        assert_eq!(d.checksum(), 0x4a32);
        assert!(d.verify_checksum_v4([192, 0, 2, 1], [198, 51, 100, 7]));
        for n in 0..8 {
            assert_eq!(
                UdpDatagram::new_checked(&u[..n]).err(),
                Some(WireError::Truncated(Layer::Udp))
            );
        }
        for n in 8..u.len() {
            let d = UdpDatagram::new_checked(&u[..n]).unwrap();
            assert_eq!(d.payload().len(), (n - 8).min(3));
        }
        u[5] = 7;
        assert_eq!(
            UdpDatagram::new_checked(&u[..]).err(),
            Some(WireError::BadLength(Layer::Udp))
        );
    }

    #[test]
    fn icmp_echo() {
        // Echo request id 1 seq 1 "ab": checksum computed, then verified.
        let mut m = vec![8, 0, 0, 0, 0, 1, 0, 1, b'a', b'b'];
        let c = checksum::checksum(&m);
        m[2..4].copy_from_slice(&c.to_be_bytes());
        let p = IcmpPacket::new_checked(&m[..]).unwrap();
        assert_eq!((p.msg_type(), p.code()), (8, 0));
        assert_eq!(p.rest_of_header(), 0x0001_0001);
        assert_eq!(p.payload(), b"ab");
        assert!(p.verify_checksum());
        for n in 0..8 {
            assert_eq!(
                IcmpPacket::new_checked(&m[..n]).err(),
                Some(WireError::Truncated(Layer::Icmp))
            );
        }
    }
}

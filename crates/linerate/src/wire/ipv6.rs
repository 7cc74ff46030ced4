//! IPv6 fixed header (RFC 8200) and a bounded walk over its extension headers.

use super::{arr, be16, be32, proto, Layer, WireError};

/// Length of the IPv6 fixed header.
pub const HEADER_LEN: usize = 40;
/// The most extension headers [`walk_ext`] steps over before giving up.
pub const MAX_EXT_HEADERS: usize = 8;

/// Fragment information from an IPv4 header or an IPv6 Fragment header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FragInfo {
    /// Identification (16 bits for IPv4, 32 for IPv6).
    pub id: u32,
    /// Offset of this fragment's data in bytes.
    pub offset: u16,
    /// More fragments follow.
    pub more: bool,
}

impl FragInfo {
    /// The first fragment (offset 0): the only one that carries the transport header.
    pub fn is_first(&self) -> bool {
        self.offset == 0
    }
}

/// The result of walking IPv6 extension headers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ipv6Walk {
    /// The upper-layer protocol (the last next-header value seen).
    pub proto: u8,
    /// Offset of the upper-layer header, relative to the slice walked.
    pub offset: usize,
    /// The Fragment header's content, if there was one.
    pub fragment: Option<FragInfo>,
    /// Why the walk stopped before an upper-layer header, if it did: truncated extension header,
    /// too many headers, a non-first fragment, or "no next header".
    pub stop: Option<WireError>,
}

/// Whether `nh` is an extension header [`walk_ext`] steps over.
pub fn is_ext_header(nh: u8) -> bool {
    matches!(
        nh,
        proto::HOPOPT
            | proto::IPV6_ROUTE
            | proto::IPV6_FRAG
            | proto::IPV6_OPTS
            | proto::AH
            | proto::MOBILITY
            | proto::HIP
            | proto::SHIM6
    )
}

/// Walks the extension headers of `d` starting at `off`, where `next` is the next-header value
/// that announced them. Hop-by-Hop, Routing, Destination Options, Mobility, HIP and Shim6 are
/// `(len + 1) * 8` bytes; AH is `(len + 2) * 4`; Fragment is 8. At most [`MAX_EXT_HEADERS`] are
/// stepped over. The walk never reads past `d`.
pub fn walk_ext(d: &[u8], mut off: usize, mut next: u8) -> Ipv6Walk {
    let mut w = Ipv6Walk::default();
    let mut steps = 0;
    loop {
        w.proto = next;
        w.offset = off;
        if next == proto::IPV6_NONXT {
            w.stop = Some(WireError::NoNextHeader);
            return w;
        }
        if !is_ext_header(next) {
            return w;
        }
        if steps == MAX_EXT_HEADERS {
            w.stop = Some(WireError::TooManyExtHeaders);
            return w;
        }
        steps += 1;
        let (Some(&nh), Some(&len)) = (d.get(off), d.get(off + 1)) else {
            w.stop = Some(WireError::Truncated(Layer::Ipv6Ext));
            return w;
        };
        let hlen = match next {
            proto::IPV6_FRAG => 8,
            proto::AH => (usize::from(len) + 2) * 4,
            _ => (usize::from(len) + 1) * 8,
        };
        if d.len() < off + hlen {
            w.stop = Some(WireError::Truncated(Layer::Ipv6Ext));
            return w;
        }
        if next == proto::IPV6_FRAG {
            let fo = be16(d, off + 2).unwrap_or_default();
            let f = FragInfo {
                id: be32(d, off + 4).unwrap_or_default(),
                offset: fo & 0xfff8,
                more: fo & 1 != 0,
            };
            w.fragment = Some(f);
            if !f.is_first() {
                w.proto = nh;
                w.offset = off + hlen;
                w.stop = Some(WireError::NonFirstFragment);
                return w;
            }
        }
        next = nh;
        off += hlen;
    }
}

/// A checked view of an IPv6 packet: the version is 6 and the 40-byte header is present.
/// The buffer may end before the payload length announced.
#[derive(Clone, Copy, Debug)]
pub struct Ipv6Packet<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    /// Checks the version and that the fixed header is present.
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        let d = buf.as_ref();
        let Some(&b0) = d.first() else {
            return Err(WireError::Truncated(Layer::Ipv6));
        };
        if b0 >> 4 != 6 {
            return Err(WireError::BadVersion);
        }
        if d.len() < HEADER_LEN {
            return Err(WireError::Truncated(Layer::Ipv6));
        }
        Ok(Ipv6Packet { buf })
    }

    fn d(&self) -> &[u8] {
        self.buf.as_ref()
    }

    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buf
    }

    /// IP version (always 6 for a checked view).
    pub fn version(&self) -> u8 {
        self.d().first().copied().unwrap_or_default() >> 4
    }

    /// Traffic class.
    pub fn traffic_class(&self) -> u8 {
        (be16(self.d(), 0).unwrap_or_default() >> 4) as u8
    }

    /// Flow label (20 bits).
    pub fn flow_label(&self) -> u32 {
        be32(self.d(), 0).unwrap_or_default() & 0x000f_ffff
    }

    /// Payload length announced (extension headers included).
    pub fn payload_len(&self) -> u16 {
        be16(self.d(), 4).unwrap_or_default()
    }

    /// The first next-header value.
    pub fn next_header(&self) -> u8 {
        self.d().get(6).copied().unwrap_or_default()
    }

    /// Hop limit.
    pub fn hop_limit(&self) -> u8 {
        self.d().get(7).copied().unwrap_or_default()
    }

    /// Source address.
    pub fn src(&self) -> [u8; 16] {
        arr(self.d(), 8).unwrap_or_default()
    }

    /// Destination address.
    pub fn dst(&self) -> [u8; 16] {
        arr(self.d(), 24).unwrap_or_default()
    }

    /// The payload (extension headers included), bounded by the payload length and the buffer.
    /// A payload length of zero (a jumbogram) takes the rest of the buffer.
    pub fn payload(&self) -> &[u8] {
        let pl = usize::from(self.payload_len());
        let end = if pl == 0 {
            self.d().len()
        } else {
            (HEADER_LEN + pl).min(self.d().len())
        };
        self.d().get(HEADER_LEN..end).unwrap_or_default()
    }

    /// Walks the extension headers; offsets in the result are relative to [`Self::payload`].
    pub fn walk(&self) -> Ipv6Walk {
        walk_ext(self.payload(), 0, self.next_header())
    }

    /// The upper-layer header and what follows it, if the walk reached it.
    pub fn upper_layer(&self) -> Option<(u8, &[u8])> {
        let w = self.walk();
        if w.stop.is_some() {
            return None;
        }
        Some((w.proto, self.payload().get(w.offset..).unwrap_or_default()))
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn header(next: u8, payload: &[u8]) -> Vec<u8> {
        let mut p = vec![0x60, 0x12, 0x34, 0x56];
        p.extend_from_slice(&(payload.len() as u16).to_be_bytes());
        p.push(next);
        p.push(64);
        let mut src = [0u8; 16];
        src[0] = 0x20;
        src[1] = 0x01;
        src[15] = 1;
        let mut dst = src;
        dst[15] = 2;
        p.extend_from_slice(&src);
        p.extend_from_slice(&dst);
        p.extend_from_slice(payload);
        p
    }

    fn chain() -> Vec<u8> {
        let mut pl = Vec::new();
        // Hop-by-Hop (next: Routing), 8 bytes.
        pl.extend_from_slice(&[43, 0, 1, 4, 0, 0, 0, 0]);
        // Routing (next: AH), len 1 → 16 bytes.
        pl.extend_from_slice(&[51, 1, 0, 0, 0, 0, 0, 0]);
        pl.extend_from_slice(&[0; 8]);
        // AH (next: Fragment), len 4 → (4+2)*4 = 24 bytes.
        pl.extend_from_slice(&[44, 4, 0, 0]);
        pl.extend_from_slice(&[0; 20]);
        // Fragment (next: Destination options), first fragment with M set, id 0xdeadbeef.
        pl.extend_from_slice(&[60, 0, 0x00, 0x01, 0xde, 0xad, 0xbe, 0xef]);
        // Destination options (next: UDP), 8 bytes.
        pl.extend_from_slice(&[17, 0, 1, 4, 0, 0, 0, 0]);
        // UDP header.
        pl.extend_from_slice(&[0x12, 0x34, 0x00, 0x35, 0x00, 0x08, 0x00, 0x00]);
        header(0, &pl)
    }

    #[test]
    fn fixed_fields() {
        let p = header(17, &[0; 8]);
        let v = Ipv6Packet::new_checked(&p[..]).unwrap();
        assert_eq!(v.version(), 6);
        assert_eq!(v.traffic_class(), 0x01);
        assert_eq!(v.flow_label(), 0x23456);
        assert_eq!(v.payload_len(), 8);
        assert_eq!(v.next_header(), 17);
        assert_eq!(v.hop_limit(), 64);
        assert_eq!(v.src()[15], 1);
        assert_eq!(v.dst()[15], 2);
        assert_eq!(v.upper_layer(), Some((17, &[0u8; 8][..])));
    }

    #[test]
    fn extension_chain() {
        let p = chain();
        let v = Ipv6Packet::new_checked(&p[..]).unwrap();
        let w = v.walk();
        assert_eq!(w.stop, None);
        assert_eq!(w.proto, 17);
        assert_eq!(w.offset, 8 + 16 + 24 + 8 + 8);
        assert_eq!(
            w.fragment,
            Some(FragInfo {
                id: 0xdeadbeef,
                offset: 0,
                more: true
            })
        );
    }

    #[test]
    fn non_first_fragment_stops() {
        let p = header(44, &[17, 0, 0x05, 0x48, 0, 0, 0, 7, 1, 2, 3, 4]);
        let w = Ipv6Packet::new_checked(&p[..]).unwrap().walk();
        assert_eq!(w.stop, Some(WireError::NonFirstFragment));
        assert_eq!(w.proto, 17);
        assert_eq!(
            w.fragment,
            Some(FragInfo {
                id: 7,
                offset: 0x548,
                more: false
            })
        );
    }

    #[test]
    fn bounded_loop() {
        // Twelve Destination options headers in a row.
        let mut pl = Vec::new();
        for _ in 0..12 {
            pl.extend_from_slice(&[60, 0, 1, 4, 0, 0, 0, 0]);
        }
        let p = header(60, &pl);
        let w = Ipv6Packet::new_checked(&p[..]).unwrap().walk();
        assert_eq!(w.stop, Some(WireError::TooManyExtHeaders));
        let p = header(59, &[]);
        let w = Ipv6Packet::new_checked(&p[..]).unwrap().walk();
        assert_eq!(w.stop, Some(WireError::NoNextHeader));
    }

    #[test]
    fn every_truncation() {
        let p = chain();
        for n in 0..p.len() {
            match Ipv6Packet::new_checked(&p[..n]) {
                Err(e) => {
                    assert!(n < 40);
                    assert_eq!(e, WireError::Truncated(Layer::Ipv6));
                }
                Ok(v) => {
                    let w = v.walk();
                    // The UDP header starts at 40 + 64: every shorter capture stops in the chain.
                    if n < 104 {
                        assert_eq!(
                            w.stop,
                            Some(WireError::Truncated(Layer::Ipv6Ext)),
                            "len {n}"
                        );
                    } else {
                        assert_eq!(w.stop, None);
                        assert_eq!(w.proto, 17);
                    }
                }
            }
        }
    }
}

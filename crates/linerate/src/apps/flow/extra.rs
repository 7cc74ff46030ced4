//! What `flows --fields` may ask beyond the flow key: the Ethernet addresses and the IP TTL (hop
//! limit) of a packet. Read only when such a field is asked for, apart from the key's parsing.

use crate::wire::LinkType;

/// A packet's Ethernet addresses and outer IP TTL, where it has them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Extra {
    /// Ethernet source address.
    pub smac: [u8; 6],
    /// Ethernet destination address.
    pub dmac: [u8; 6],
    /// The outer IPv4 TTL or IPv6 hop limit.
    pub ttl: u8,
    /// The link is Ethernet (the addresses are real).
    pub has_mac: bool,
    /// An IP header was found (`ttl` is real).
    pub has_ttl: bool,
}

/// Reads the Ethernet addresses (Ethernet links) and the TTL of the first IP header (past
/// 802.1Q/802.1ad tags; Linux cooked, BSD loopback and raw IP links too). Never panics.
pub fn extract_extra(d: &[u8], link: LinkType) -> Extra {
    let mut x = Extra::default();
    let be16 = |o: usize| d.get(o..o + 2).map(|b| u16::from_be_bytes([b[0], b[1]]));
    let ip_at = match link {
        LinkType::ETHERNET => {
            if let (Some(dst), Some(src)) = (d.get(0..6), d.get(6..12)) {
                x.dmac.copy_from_slice(dst);
                x.smac.copy_from_slice(src);
                x.has_mac = true;
            }
            let mut off = 12;
            let mut t = be16(off);
            while matches!(t, Some(0x8100 | 0x88a8 | 0x9100)) {
                off += 4;
                t = be16(off);
            }
            match t {
                Some(0x0800 | 0x86dd) => Some(off + 2),
                _ => None,
            }
        }
        LinkType::RAW | LinkType::IPV4 | LinkType::IPV6 => Some(0),
        LinkType::LINUX_SLL => Some(16),
        LinkType::LINUX_SLL2 => Some(20),
        LinkType::NULL => Some(4),
        _ => None,
    };
    if let Some(o) = ip_at {
        match d.get(o).map(|b| b >> 4) {
            Some(4) => {
                if let Some(&t) = d.get(o + 8) {
                    x.ttl = t;
                    x.has_ttl = true;
                }
            }
            Some(6) => {
                if let Some(&t) = d.get(o + 7) {
                    x.ttl = t;
                    x.has_ttl = true;
                }
            }
            _ => {}
        }
    }
    x
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn macs_and_ttl_past_tags() {
        let mut f = vec![
            1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 0x81, 0, 0, 5, 0x08, 0,
        ];
        f.extend_from_slice(&[0x45, 0, 0, 20, 0, 0, 0, 0, 63, 17]);
        let x = extract_extra(&f, LinkType::ETHERNET);
        assert_eq!(x.dmac, [1, 2, 3, 4, 5, 6]);
        assert_eq!(x.smac, [7, 8, 9, 10, 11, 12]);
        assert!(x.has_mac && x.has_ttl);
        assert_eq!(x.ttl, 63);
        for n in 0..f.len() {
            let _ = extract_extra(&f[..n], LinkType::ETHERNET);
        }
        assert!(!extract_extra(&f[..20], LinkType::ETHERNET).has_ttl);
        let v6 = [0x60u8, 0, 0, 0, 0, 0, 17, 9];
        assert_eq!(extract_extra(&v6, LinkType::RAW).ttl, 9);
    }
}

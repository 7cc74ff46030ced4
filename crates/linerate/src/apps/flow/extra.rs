//! What `flows --fields` may ask beyond the flow key: the Ethernet addresses and the IP TTL (hop
//! limit) of a packet. Read only when such a field is asked for, apart from the key's parsing.

use crate::wire::{self, LinkType, Tunnels};

/// A packet's Ethernet addresses and outer IP TTL, where it has them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Extra {
    /// Ethernet source address.
    pub smac: [u8; 6],
    /// Ethernet destination address.
    pub dmac: [u8; 6],
    /// The IPv4 TTL or IPv6 hop limit of the header that keys the flow.
    pub ttl: u8,
    /// The link is Ethernet (the addresses are real).
    pub has_mac: bool,
    /// An IP header was found (`ttl` is real).
    pub has_ttl: bool,
}

/// Reads the Ethernet addresses (Ethernet links) and the TTL of the IP header that keys the flow:
/// [`wire::parse_deep`] steps over 802.1Q/802.1ad tags, MPLS, PPPoE, LLC/SNAP and PPP/HDLC links
/// as the key's parser does, and with `--tunnels inner` the TTL is the inner packet's (the outer
/// one's when the tunnel keeps its outer key). Never panics.
pub fn extract_extra(d: &[u8], link: LinkType, tunnels: Tunnels) -> Extra {
    let mut x = Extra::default();
    if link == LinkType::ETHERNET {
        if let (Some(dst), Some(src)) = (d.get(0..6), d.get(6..12)) {
            x.dmac.copy_from_slice(dst);
            x.smac.copy_from_slice(src);
            x.has_mac = true;
        }
    }
    if let Ok((outer, base, _)) = wire::parse_deep(d, link) {
        let p = match tunnels {
            Tunnels::Inner => {
                wire::tunnel_inner(d.get(base..).unwrap_or_default(), &outer).unwrap_or(outer)
            }
            Tunnels::Outer => outer,
        };
        if wire::ip_header_whole(&p) {
            x.ttl = p.ttl;
            x.has_ttl = true;
        }
    }
    x
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// An IPv4 header (TTL `ttl`) carrying 8 bytes of UDP.
    fn ipv4(ttl: u8) -> Vec<u8> {
        let mut h = vec![
            0x45, 0, 0, 28, 0, 0, 0, 0, ttl, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ];
        h.extend_from_slice(&[0, 53, 0, 53, 0, 8, 0, 0]);
        h
    }

    #[test]
    fn macs_and_ttl_past_tags() {
        let mut f = vec![
            1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 0x81, 0, 0, 5, 0x08, 0,
        ];
        f.extend_from_slice(&ipv4(63));
        let x = extract_extra(&f, LinkType::ETHERNET, Tunnels::Outer);
        assert_eq!(x.dmac, [1, 2, 3, 4, 5, 6]);
        assert_eq!(x.smac, [7, 8, 9, 10, 11, 12]);
        assert!(x.has_mac && x.has_ttl);
        assert_eq!(x.ttl, 63);
        for n in 0..f.len() {
            let _ = extract_extra(&f[..n], LinkType::ETHERNET, Tunnels::Outer);
        }
        assert!(!extract_extra(&f[..30], LinkType::ETHERNET, Tunnels::Outer).has_ttl);
        let mut v6 = vec![0x60u8, 0, 0, 0, 0, 0, 59, 9];
        v6.resize(40, 0);
        assert_eq!(extract_extra(&v6, LinkType::RAW, Tunnels::Outer).ttl, 9);
    }

    /// The TTL is found where the flow key is (tshark's ip.ttl): past PPPoE, MPLS and LLC/SNAP,
    /// and inside a tunnel with `--tunnels inner`.
    #[test]
    fn ttl_past_pppoe_mpls_llc_and_in_tunnels() {
        let mac = [1u8, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12];
        let eth = |rest: &[u8]| {
            let mut f = mac.to_vec();
            f.extend_from_slice(rest);
            f
        };
        let mut pppoe = vec![0x88, 0x64, 0x11, 0, 0, 1, 0, 30, 0, 0x21];
        pppoe.extend_from_slice(&ipv4(64));
        let mut mpls = vec![0x88, 0x47, 0, 0x01, 0x01, 0xff];
        mpls.extend_from_slice(&ipv4(61));
        let mut llc = vec![0, 36, 0xaa, 0xaa, 3, 0, 0, 0, 8, 0];
        llc.extend_from_slice(&ipv4(62));
        for (f, ttl) in [(eth(&pppoe), 64), (eth(&mpls), 61), (eth(&llc), 62)] {
            let x = extract_extra(&f, LinkType::ETHERNET, Tunnels::Outer);
            assert!(x.has_mac && x.has_ttl, "{f:?}");
            assert_eq!(x.ttl, ttl, "{f:?}");
        }
        // IPIP: the outer TTL 40 by default, the inner 64 with --tunnels inner; an inner header
        // cut short keeps the outer key and so the outer TTL.
        let mut ipip = vec![
            0x08, 0, 0x45, 0, 0, 48, 0, 0, 0, 0, 40, 4, 0, 0, 192, 0, 2, 1,
        ];
        ipip.extend_from_slice(&[192, 0, 2, 2]);
        ipip.extend_from_slice(&ipv4(64));
        let f = eth(&ipip);
        assert_eq!(
            extract_extra(&f, LinkType::ETHERNET, Tunnels::Outer).ttl,
            40
        );
        assert_eq!(
            extract_extra(&f, LinkType::ETHERNET, Tunnels::Inner).ttl,
            64
        );
        let cut = &f[..f.len() - 20];
        assert_eq!(
            extract_extra(cut, LinkType::ETHERNET, Tunnels::Inner).ttl,
            40
        );
    }
}

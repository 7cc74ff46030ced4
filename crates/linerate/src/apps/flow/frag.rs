//! Non-first IP fragments carry no ports: a small cache remembers, for each datagram whose first
//! fragment was seen (addresses, protocol, IP identification), the flow it belongs to, so that
//! its later fragments are counted in that flow, as Argus counts them. The cache is direct-mapped
//! and preallocated; a later fragment whose first fragment was not seen (or was overwritten) is
//! counted as not in a flow (`fragment`).

use super::key::{FlowKey, PktInfo, E_LATER, K_V6};

#[derive(Clone, Copy, Default)]
struct Slot {
    tag: FlowKey,
    key: FlowKey,
    /// The first fragment's source was endpoint `a` of `key`.
    from_a: bool,
    /// The first fragment's source, to orient later fragments.
    src: [u8; 16],
    valid: bool,
}

/// Where the datagrams of recent first fragments belong.
pub struct FragCache {
    slots: Vec<Slot>,
    mask: usize,
}

/// The datagram's identity: addresses (lower first), protocol, IP version and identification.
fn tag(p: &PktInfo, src: [u8; 16], dst: [u8; 16]) -> FlowKey {
    let (a, b) = if src <= dst { (src, dst) } else { (dst, src) };
    FlowKey {
        a,
        b,
        pa: p.frag_id as u16,
        pb: (p.frag_id >> 16) as u16,
        vlan: p.key.vlan,
        proto: p.key.proto,
        flags: p.key.flags & K_V6,
    }
}

fn src_dst(p: &PktInfo) -> ([u8; 16], [u8; 16]) {
    if p.from_a {
        (p.key.a, p.key.b)
    } else {
        (p.key.b, p.key.a)
    }
}

impl FragCache {
    /// A cache of `slots` datagrams (rounded up to a power of two).
    pub fn new(slots: usize) -> FragCache {
        let n = slots.max(16).next_power_of_two();
        FragCache {
            slots: vec![Slot::default(); n],
            mask: n - 1,
        }
    }

    /// Remembers the flow of a first fragment.
    #[inline]
    pub fn first(&mut self, p: &PktInfo) {
        let (src, dst) = src_dst(p);
        let t = tag(p, src, dst);
        let i = t.hash() as usize & self.mask;
        self.slots[i] = Slot {
            tag: t,
            key: p.key,
            from_a: p.from_a,
            src,
            valid: true,
        };
    }

    /// Completes a later fragment (from `key::extract_fragment`) with its datagram's flow key and
    /// direction; false when its first fragment is not known.
    #[inline]
    pub fn later(&self, p: &mut PktInfo) -> bool {
        let (src, dst) = src_dst(p);
        let t = tag(p, src, dst);
        let s = &self.slots[t.hash() as usize & self.mask];
        if !s.valid || s.tag != t {
            return false;
        }
        p.key = s.key;
        p.from_a = if src == s.src { s.from_a } else { !s.from_a };
        p.encap |= E_LATER;
        p.tcp_flags = 0;
        true
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::super::key::tests::eth_v4;
    use super::super::key::{extract, extract_fragment, NotFlow, E_FRAG};
    use super::*;
    use crate::port::LinkType;

    #[test]
    fn later_fragments_join_the_first_ones_flow() {
        let mut first = eth_v4([10, 0, 0, 9], [10, 0, 0, 1], 17, 5000, 53, 0, 100);
        first[14 + 4..14 + 6].copy_from_slice(&0x1234u16.to_be_bytes());
        first[14 + 6] = 0x20; // MF
        let mut later = first.clone();
        later[14 + 6] = 0x00;
        later[14 + 7] = 0x10; // offset 16 x 8, last fragment
        let p1 = extract(&first, LinkType::ETHERNET).unwrap();
        assert_ne!(p1.encap & E_FRAG, 0);
        assert_eq!(p1.frag_id, 0x1234);
        assert_eq!(extract(&later, LinkType::ETHERNET), Err(NotFlow::Fragment));
        let mut p2 = extract_fragment(&later, LinkType::ETHERNET).unwrap();
        let mut c = FragCache::new(64);
        assert!(!c.later(&mut p2.clone()));
        c.first(&p1);
        assert!(c.later(&mut p2));
        assert_eq!(p2.key, p1.key);
        assert_eq!(p2.from_a, p1.from_a);
        // another datagram id is not known
        later[14 + 4] = 0x99;
        let mut p3 = extract_fragment(&later, LinkType::ETHERNET).unwrap();
        assert!(!c.later(&mut p3));
        // a whole packet is not a later fragment
        assert!(extract_fragment(
            &eth_v4([1, 1, 1, 1], [2, 2, 2, 2], 6, 1, 2, 0, 0),
            LinkType::ETHERNET
        )
        .is_err());
    }
}

//! Arbitrary bytes and a link-type selector through `wire::parse`, `wire::inner`,
//! `wire::parse_deep`, `wire::tunnel_inner`, every hash,
//! flow keys and every accessor of every checked view: nothing may panic, and offsets stay inside
//! the packet.
#![no_main]

use libfuzzer_sys::fuzz_target;
use linerate::port::LinkType;
use linerate::wire::{self, checksum, EthernetFrame, FlowKey, IcmpPacket, Ipv4Packet, Ipv6Packet};
use linerate::wire::{TcpSegment, UdpDatagram};

const LINKS: [u32; 12] = [1, 101, 228, 229, 113, 276, 0, 108, 12, 14, 147, 9];

fn hashes(p: &wire::Parsed) {
    let _ = wire::hash_ip_symmetric(p);
    let _ = wire::hash_5tuple_symmetric(p);
    let _ = wire::hash_mac(p);
    let _ = wire::hash_proto(p);
    let _ = wire::hash_vlan(p);
    let _ = wire::hash_toeplitz_symmetric(p);
    let _ = wire::hash_toeplitz(p, &wire::RSS_KEY_MICROSOFT);
    if let Some(k) = FlowKey::from_parsed(p) {
        let (c, _) = k.canonical();
        assert_eq!(c, k.reversed().canonical().0);
        let _ = (k.src_ip(), k.dst_ip());
    }
    let _ = (
        p.src_ip(),
        p.dst_ip(),
        p.vlans(),
        p.outer_vlan(),
        p.is_later_fragment(),
    );
}

fn in_bounds(p: &wire::Parsed, len: usize) {
    for o in [p.l2, p.l3, p.l4, p.payload].into_iter().flatten() {
        assert!(o as usize <= len);
    }
    assert!(p.l3_end as usize <= len);
}

fn views(d: &[u8]) {
    if let Ok(e) = EthernetFrame::new_checked(d) {
        let _ = (e.dst(), e.src(), e.ethertype(), e.payload().len());
        if let Ok(v) = e.vlans() {
            let _ = (v.ids(), v.inner_ethertype, v.header_len);
        }
        let _ = e.inner_payload();
    }
    if let Ok(v) = Ipv4Packet::new_checked(d) {
        let _ = (
            v.version(),
            v.ihl(),
            v.header_len(),
            v.tos(),
            v.total_len(),
            v.ident(),
        );
        let _ = (
            v.flags(),
            v.dont_frag(),
            v.more_frags(),
            v.frag_offset(),
            v.is_fragment(),
        );
        let _ = (
            v.is_first_fragment(),
            v.ttl(),
            v.protocol(),
            v.checksum(),
            v.src(),
            v.dst(),
        );
        let _ = (
            v.options().len(),
            v.verify_checksum(),
            v.compute_checksum(),
            v.payload().len(),
        );
    }
    if let Ok(v) = Ipv6Packet::new_checked(d) {
        let _ = (
            v.version(),
            v.traffic_class(),
            v.flow_label(),
            v.payload_len(),
        );
        let _ = (
            v.next_header(),
            v.hop_limit(),
            v.src(),
            v.dst(),
            v.payload().len(),
        );
        let w = v.walk();
        assert!(w.offset <= v.payload().len() || w.stop.is_some());
        let _ = v.upper_layer();
    }
    if let Ok(t) = TcpSegment::new_checked(d) {
        let _ = (
            t.src_port(),
            t.dst_port(),
            t.seq(),
            t.ack(),
            t.data_offset(),
            t.header_len(),
        );
        let _ = (
            t.flags(),
            t.window(),
            t.checksum(),
            t.urgent(),
            t.options(),
            t.payload(),
        );
        let _ = (
            t.verify_checksum_v4([1, 2, 3, 4], [5, 6, 7, 8]),
            t.verify_checksum_v6(&[1; 16], &[2; 16]),
        );
    }
    if let Ok(u) = UdpDatagram::new_checked(d) {
        let _ = (
            u.src_port(),
            u.dst_port(),
            u.len(),
            u.is_empty(),
            u.checksum(),
            u.payload(),
        );
        let _ = (
            u.verify_checksum_v4([1, 2, 3, 4], [5, 6, 7, 8]),
            u.verify_checksum_v6(&[1; 16], &[2; 16]),
        );
    }
    if let Ok(i) = IcmpPacket::new_checked(d) {
        let _ = (
            i.msg_type(),
            i.code(),
            i.checksum(),
            i.rest_of_header(),
            i.payload(),
        );
        let _ = (
            i.verify_checksum(),
            i.verify_checksum_v6(&[1; 16], &[2; 16]),
        );
    }
    let _ = checksum::checksum(d);
    if let (Some(&a), Some(&b)) = (d.first(), d.get(1)) {
        let _ = checksum::update16(u16::from(a), u16::from(b), 7);
        let _ = checksum::update32(u16::from(b), u32::from(a), 0xdead_beef);
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, pkt)) = data.split_first() else {
        return;
    };
    let link = LINKS[usize::from(sel) % LINKS.len()];
    let p = wire::parse(pkt, LinkType(link));
    in_bounds(&p, pkt.len());
    hashes(&p);
    if let Some(i) = wire::inner(pkt, &p) {
        in_bounds(&i, pkt.len());
        hashes(&i);
    }
    // Through MPLS, PPPoE, LLC/SNAP and PPP, then into a tunnel.
    if let Ok((d, base, _)) = wire::parse_deep(pkt, LinkType(link)) {
        assert!(base <= pkt.len());
        let rest = pkt.get(base..).unwrap_or_default();
        in_bounds(&d, rest.len());
        hashes(&d);
        if let Some(i) = wire::tunnel_inner(rest, &d) {
            in_bounds(&i, rest.len());
            hashes(&i);
        }
    }
    views(pkt);
    // Each view also on the bytes the parser located.
    for o in [p.l3, p.l4].into_iter().flatten() {
        views(pkt.get(o as usize..).unwrap_or_default());
    }
});

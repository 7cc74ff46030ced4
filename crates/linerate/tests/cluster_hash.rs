//! Hash modes: symmetric modes put both directions of 10 000 flows on the same queue and spread
//! flows over queues; tunnel modes hash the inner packet; every mode runs over every capture of
//! the corpus without panicking.
#![deny(unsafe_code)]

use linerate::apps::balance::{hash, Distributor, Mode};
use linerate::mem::{Batch, Desc, Pool, PoolConfig, BATCH};
use linerate::port::pcap::PcapPort;
use linerate::port::{LinkType, Port, PortOptions};
use std::path::PathBuf;
use std::sync::Arc;

fn csum(h: &[u8]) -> u16 {
    let mut s = 0u32;
    for c in h.chunks(2) {
        s += u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]) as u32;
    }
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

/// IPv4 header + payload.
fn ipv4(src: [u8; 4], dst: [u8; 4], proto: u8, payload: &[u8]) -> Vec<u8> {
    let mut h = vec![0u8; 20];
    h[0] = 0x45;
    h[2..4].copy_from_slice(&((20 + payload.len()) as u16).to_be_bytes());
    h[8] = 64;
    h[9] = proto;
    h[12..16].copy_from_slice(&src);
    h[16..20].copy_from_slice(&dst);
    let c = csum(&h);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    h.extend_from_slice(payload);
    h
}

fn ipv6(src: [u8; 16], dst: [u8; 16], proto: u8, payload: &[u8]) -> Vec<u8> {
    let mut h = vec![0u8; 40];
    h[0] = 0x60;
    h[4..6].copy_from_slice(&(payload.len() as u16).to_be_bytes());
    h[6] = proto;
    h[7] = 64;
    h[8..24].copy_from_slice(&src);
    h[24..40].copy_from_slice(&dst);
    h.extend_from_slice(payload);
    h
}

fn l4(proto: u8, sport: u16, dport: u16) -> Vec<u8> {
    let mut l = vec![0u8; if proto == 6 { 20 } else { 8 }];
    l[0..2].copy_from_slice(&sport.to_be_bytes());
    l[2..4].copy_from_slice(&dport.to_be_bytes());
    if proto == 6 {
        l[12] = 0x50;
        l[13] = 0x10;
    } else {
        l[4..6].copy_from_slice(&(8u16).to_be_bytes());
    }
    l
}

fn eth(src: [u8; 6], dst: [u8; 6], vlan: Option<u16>, ethertype: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(18 + payload.len());
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    if let Some(v) = vlan {
        f.extend_from_slice(&0x8100u16.to_be_bytes());
        f.extend_from_slice(&v.to_be_bytes());
    }
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// Both directions of flow `i`: (forward, reverse).
fn flow(i: u32) -> (Vec<u8>, Vec<u8>) {
    let a = [10, (i >> 16) as u8, (i >> 8) as u8, i as u8];
    let b = [172, 16 + (i % 16) as u8, (i >> 3) as u8, (i * 7) as u8];
    let (sp, dp) = (
        1024 + (i % 60000) as u16,
        [80u16, 443, 53, 8080][(i % 4) as usize],
    );
    let proto = if i.is_multiple_of(3) { 17 } else { 6 };
    let ma = [2, 0, 0, (i >> 16) as u8, (i >> 8) as u8, i as u8];
    let mb = [2, 1, 1, 1, 1, (i % 5) as u8];
    let vlan = if i.is_multiple_of(5) {
        Some((i % 4000) as u16 + 1)
    } else {
        None
    };
    if i.is_multiple_of(7) {
        let mut s6 = [0u8; 16];
        let mut d6 = [0u8; 16];
        s6[0] = 0x20;
        s6[1] = 0x01;
        s6[12..16].copy_from_slice(&a);
        d6[0] = 0xfd;
        d6[12..16].copy_from_slice(&b);
        (
            eth(
                ma,
                mb,
                vlan,
                0x86dd,
                &ipv6(s6, d6, proto, &l4(proto, sp, dp)),
            ),
            eth(
                mb,
                ma,
                vlan,
                0x86dd,
                &ipv6(d6, s6, proto, &l4(proto, dp, sp)),
            ),
        )
    } else {
        (
            eth(ma, mb, vlan, 0x0800, &ipv4(a, b, proto, &l4(proto, sp, dp))),
            eth(mb, ma, vlan, 0x0800, &ipv4(b, a, proto, &l4(proto, dp, sp))),
        )
    }
}

fn batch_of(pool: &Arc<Pool>, pkts: &[Vec<u8>]) -> Batch {
    let mut b = Batch::with_pool(pool);
    for p in pkts {
        let mut fr = b.alloc().unwrap();
        fr.buf()[..p.len()].copy_from_slice(p);
        fr.push(Desc {
            len: p.len() as u32,
            wire_len: p.len() as u32,
            ..Default::default()
        });
    }
    b
}

#[test]
fn symmetric_modes_keep_both_directions_of_10000_flows_together_and_spread_them() {
    let pool = Arc::new(
        Pool::new(&PoolConfig {
            frames: 256,
            ..Default::default()
        })
        .unwrap(),
    );
    for mode in [Mode::Ip, Mode::FiveTuple, Mode::Toeplitz, Mode::Mac] {
        let mut d = Distributor::new(mode, &[4], LinkType::ETHERNET);
        let mut per_queue = [0u32; 4];
        let (mut mf, mut mr) = ([0u64; BATCH], [0u64; BATCH]);
        for chunk in (0..10_000u32).collect::<Vec<_>>().chunks(32) {
            let (fwd, rev): (Vec<_>, Vec<_>) = chunk.iter().map(|&i| flow(i)).unzip();
            let mut bf = batch_of(&pool, &fwd);
            let mut br = batch_of(&pool, &rev);
            d.masks(&mut bf, None, &mut mf);
            d.masks(&mut br, None, &mut mr);
            for k in 0..chunk.len() {
                assert_eq!(
                    mf[k], mr[k],
                    "{mode:?}: flow {} split across queues",
                    chunk[k]
                );
                assert_eq!(mf[k].count_ones(), 1);
                assert_eq!(
                    bf.descs()[k].hash,
                    br.descs()[k].hash,
                    "the hash travels in the descriptor"
                );
                per_queue[mf[k].trailing_zeros() as usize] += 1;
            }
        }
        for (q, n) in per_queue.iter().enumerate() {
            assert!(
                *n > 1_000,
                "{mode:?}: queue {q} got only {n} of 10 000 flows: {per_queue:?}"
            );
        }
    }
}

#[test]
fn proto_and_vlan_modes_hash_what_they_say() {
    let (tcp, _) = flow(1);
    let (udp, _) = flow(3);
    let (tcp2, _) = flow(2);
    assert_eq!(
        hash(Mode::Proto, &tcp, LinkType::ETHERNET),
        hash(Mode::Proto, &tcp2, LinkType::ETHERNET)
    );
    assert_ne!(
        hash(Mode::Proto, &tcp, LinkType::ETHERNET),
        hash(Mode::Proto, &udp, LinkType::ETHERNET)
    );
    let (v5, _) = flow(5); // tagged
    let (v10, _) = flow(10); // tagged, another id
    assert_eq!(
        hash(Mode::Vlan, &tcp, LinkType::ETHERNET),
        hash(Mode::Vlan, &tcp2, LinkType::ETHERNET)
    );
    assert_ne!(
        hash(Mode::Vlan, &v5, LinkType::ETHERNET),
        hash(Mode::Vlan, &v10, LinkType::ETHERNET)
    );
}

fn gre(inner: &[u8]) -> Vec<u8> {
    let mut g = vec![0, 0, 0x08, 0x00]; // no flags, version 0, IPv4 inside
    g.extend_from_slice(inner);
    eth(
        [2, 0, 0, 0, 0, 1],
        [2, 0, 0, 0, 0, 2],
        None,
        0x0800,
        &ipv4([198, 18, 0, 1], [198, 18, 0, 2], 47, &g),
    )
}

fn gtp(inner: &[u8]) -> Vec<u8> {
    let mut g = vec![0x30, 0xff];
    g.extend_from_slice(&(inner.len() as u16).to_be_bytes());
    g.extend_from_slice(&[0, 0, 0, 1]); // TEID
    g.extend_from_slice(inner);
    let mut u = l4(17, 2152, 2152);
    u[4..6].copy_from_slice(&((8 + g.len()) as u16).to_be_bytes());
    u.extend_from_slice(&g);
    eth(
        [2, 0, 0, 0, 0, 1],
        [2, 0, 0, 0, 0, 2],
        None,
        0x0800,
        &ipv4([198, 18, 0, 1], [198, 18, 0, 2], 17, &u),
    )
}

#[test]
fn tunnel_modes_hash_the_inner_packet() {
    for (mode, wrap) in [
        (Mode::GreInner, gre as fn(&[u8]) -> Vec<u8>),
        (Mode::GtpInner, gtp),
    ] {
        let mut seen = std::collections::HashSet::new();
        for i in 0..64u32 {
            let a = [10, 0, 0, i as u8];
            let b = [10, 1, 0, (i * 3) as u8];
            let f = wrap(&ipv4(a, b, 17, &l4(17, 1000, 2000)));
            let r = wrap(&ipv4(b, a, 17, &l4(17, 2000, 1000)));
            let hf = hash(mode, &f, LinkType::ETHERNET);
            assert_eq!(
                hf,
                hash(mode, &r, LinkType::ETHERNET),
                "{mode:?}: inner directions differ"
            );
            seen.insert(hf);
        }
        // Same outer header for all: only the inner addresses can make these differ.
        assert!(
            seen.len() > 32,
            "{mode:?}: inner flows hash alike ({} values)",
            seen.len()
        );
        // Not a tunnel: the outer IP hash.
        let (plain, _) = flow(9);
        assert_eq!(
            hash(mode, &plain, LinkType::ETHERNET),
            hash(Mode::Ip, &plain, LinkType::ETHERNET)
        );
    }
}

fn corpus() -> Option<PathBuf> {
    linerate_test_support::corpus()
}

#[test]
fn every_mode_over_the_corpus_without_panic() {
    let Some(dir) = corpus() else { return };
    let modes: Vec<Mode> = Mode::NAMES.iter().map(|(_, m)| *m).collect();
    let mut files = 0;
    let mut packets = 0u64;
    let mut entries: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    entries.sort();
    for path in entries {
        let Ok(mut port) = PcapPort::open(
            path.to_str().unwrap_or(""),
            &PortOptions {
                frames: 512,
                ..Default::default()
            },
        ) else {
            continue;
        };
        files += 1;
        let link = port.link_type();
        let mut dists: Vec<Distributor> = modes
            .iter()
            .map(|&m| Distributor::new(m, &[3, 1], link))
            .collect();
        let mut b = Batch::new();
        let mut masks = [0u64; BATCH];
        while !port.is_finished() {
            match port.rx(&mut b) {
                Ok(n) => packets += n as u64,
                Err(_) => break,
            }
            for d in &mut dists {
                d.masks(&mut b, None, &mut masks);
                for m in &masks[..b.len()] {
                    // app 0: one of queues 0..3 (or all three for fan-out); app 1: queue 3
                    assert!(
                        m & 0b1000 != 0 && (m & 0b111).count_ones() >= 1,
                        "{}: {m:b}",
                        path.display()
                    );
                }
            }
            b.clear();
        }
    }
    assert!(files > 100, "only {files} captures read");
    assert!(packets > 1000);
}

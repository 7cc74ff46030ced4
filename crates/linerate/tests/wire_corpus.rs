//! Runs the header parser and every hash over each packet of the tcpdump test corpus
//! (`tests/corpus/tcpdump-tests/` in the repository, or `LINERATE_CORPUS`): no panic, offsets inside the
//! packet, symmetric hashes equal for the reversed packet. Prints a tally.
//!
//! The pcap/pcapng reader here is a minimal, bounds-checked record walker of its own (stops at the
//! first malformed record) so this test does not depend on the pcap port.
#![deny(unsafe_code)]

use linerate::port::LinkType;
use linerate::wire::{self, FlowKey, Parsed};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const MAX_RECORD: usize = 1 << 20;

fn u16_at(d: &[u8], o: usize, be: bool) -> Option<u16> {
    let b: [u8; 2] = d.get(o..o + 2)?.try_into().ok()?;
    Some(if be {
        u16::from_be_bytes(b)
    } else {
        u16::from_le_bytes(b)
    })
}

fn u32_at(d: &[u8], o: usize, be: bool) -> Option<u32> {
    let b: [u8; 4] = d.get(o..o + 4)?.try_into().ok()?;
    Some(if be {
        u32::from_be_bytes(b)
    } else {
        u32::from_le_bytes(b)
    })
}

/// Calls `f(link, packet)` for every record of a pcap or pcapng file; returns false when the file
/// is neither.
fn walk(d: &[u8], f: &mut dyn FnMut(u32, &[u8])) -> bool {
    let Some(magic) = u32_at(d, 0, false) else {
        return false;
    };
    match magic {
        0xa1b2_c3d4 | 0xa1b2_3c4d | 0xd4c3_b2a1 | 0x4d3c_b2a1 => {
            let be = matches!(magic, 0xd4c3_b2a1 | 0x4d3c_b2a1);
            let Some(link) = u32_at(d, 20, be) else {
                return true;
            };
            let link = link & 0xffff;
            let mut o = 24;
            while let Some(incl) = u32_at(d, o + 8, be) {
                let incl = incl as usize;
                if incl > MAX_RECORD {
                    break;
                }
                let Some(pkt) = d.get(o + 16..o + 16 + incl) else {
                    break;
                };
                f(link, pkt);
                o += 16 + incl;
            }
            true
        }
        0x0a0d_0d0a => {
            let mut be = false;
            let mut links: Vec<u32> = Vec::new();
            let mut o = 0;
            while let Some(ty) = u32_at(d, o, be) {
                if ty == 0x0a0d_0d0a {
                    // Section header: the byte-order magic decides the endianness.
                    match u32_at(d, o + 8, false) {
                        Some(0x1a2b_3c4d) => be = false,
                        Some(0x4d3c_2b1a) => be = true,
                        _ => break,
                    }
                    links.clear();
                }
                let Some(len) = u32_at(d, o + 4, be) else {
                    break;
                };
                let len = len as usize;
                if len < 12 || !len.is_multiple_of(4) || len > MAX_RECORD {
                    break;
                }
                let Some(block) = d.get(o..o + len) else {
                    break;
                };
                match ty {
                    1 => links.push(u32::from(u16_at(block, 8, be).unwrap_or(0))),
                    6 => {
                        let (Some(ifc), Some(cap)) = (u32_at(block, 8, be), u32_at(block, 20, be))
                        else {
                            break;
                        };
                        let Some(&link) = links.get(ifc as usize) else {
                            break;
                        };
                        let Some(pkt) = block.get(28..28 + cap as usize) else {
                            break;
                        };
                        f(link, pkt);
                    }
                    3 => {
                        let Some(&link) = links.first() else { break };
                        let Some(orig) = u32_at(block, 8, be) else {
                            break;
                        };
                        let cap = (orig as usize).min(len.saturating_sub(16));
                        let Some(pkt) = block.get(12..12 + cap) else {
                            break;
                        };
                        f(link, pkt);
                    }
                    2 => {
                        let (Some(ifc), Some(cap)) = (u16_at(block, 8, be), u32_at(block, 20, be))
                        else {
                            break;
                        };
                        let Some(&link) = links.get(usize::from(ifc)) else {
                            break;
                        };
                        let Some(pkt) = block.get(28..28 + cap as usize) else {
                            break;
                        };
                        f(link, pkt);
                    }
                    _ => {}
                }
                o += len;
            }
            true
        }
        _ => false,
    }
}

#[derive(Default)]
struct Tally {
    files: usize,
    packets: u64,
    ip: u64,
    l4: u64,
    inner: u64,
    fast: u64,
    fast5: u64,
    stops: BTreeMap<String, u64>,
    links: BTreeMap<u32, u64>,
}

fn reversed(p: &Parsed) -> Parsed {
    let mut q = *p;
    q.src = p.dst;
    q.dst = p.src;
    q.sport = p.dport;
    q.dport = p.sport;
    q.src_mac = p.dst_mac;
    q.dst_mac = p.src_mac;
    q
}

fn check(link: u32, pkt: &[u8], t: &mut Tally) {
    let p = wire::parse(pkt, LinkType(link));
    t.packets += 1;
    *t.links.entry(link).or_default() += 1;
    let len = pkt.len() as u32;
    for o in [p.l2, p.l3, p.l4, p.payload].into_iter().flatten() {
        assert!(o <= len, "offset {o} past packet of {len} bytes");
    }
    if let (Some(l3), Some(l4)) = (p.l3, p.l4) {
        assert!(l3 < l4);
    }
    assert!(p.l3_end <= len);
    if p.ip_version != 0 {
        t.ip += 1;
    }
    if p.has_l4() {
        t.l4 += 1;
    }
    let key = match p.stop {
        None => "complete".to_string(),
        Some(e) => format!("{e:?}"),
    };
    *t.stops.entry(key).or_default() += 1;

    if link == 1 {
        if let Some(h) = wire::hash_ip_symmetric_eth_v4(pkt) {
            assert_eq!(
                h,
                wire::hash_ip_symmetric(&p),
                "fast IPv4 hash differs from the parsed one"
            );
            t.fast += 1;
        }
        if let Some(h) = wire::hash_5tuple_symmetric_eth_v4(pkt) {
            assert_eq!(
                h,
                wire::hash_5tuple_symmetric(&p),
                "fast IPv4 5-tuple hash differs from the parsed one"
            );
            t.fast5 += 1;
        }
        if let Some(h) = wire::hash_toeplitz_symmetric_eth_v4(pkt) {
            assert_eq!(
                h,
                wire::hash_toeplitz_symmetric(&p),
                "fast IPv4 Toeplitz hash differs from the parsed one"
            );
        }
    }
    let q = reversed(&p);
    assert_eq!(wire::hash_ip_symmetric(&p), wire::hash_ip_symmetric(&q));
    assert_eq!(
        wire::hash_5tuple_symmetric(&p),
        wire::hash_5tuple_symmetric(&q)
    );
    assert_eq!(wire::hash_mac(&p), wire::hash_mac(&q));
    assert_eq!(
        wire::hash_toeplitz_symmetric(&p),
        wire::hash_toeplitz_symmetric(&q)
    );
    let _ = (wire::hash_proto(&p), wire::hash_vlan(&p));
    let _ = wire::hash_toeplitz(&p, &wire::RSS_KEY_MICROSOFT);
    if let Some(k) = FlowKey::from_parsed(&p) {
        let (c, _) = k.canonical();
        assert_eq!(c, k.reversed().canonical().0);
    }
    if let Some(i) = wire::inner(pkt, &p) {
        t.inner += 1;
        for o in [i.l2, i.l3, i.l4, i.payload].into_iter().flatten() {
            assert!(o <= len);
        }
        let _ = (
            wire::hash_5tuple_symmetric(&i),
            wire::hash_toeplitz_symmetric(&i),
        );
    }
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|r| {
            r.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.is_file())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
fn parse_and_hash_every_corpus_packet() {
    let Some(dir) = linerate_test_support::corpus() else {
        return;
    };
    let list = files(&dir);
    assert!(!list.is_empty(), "no capture files in {}", dir.display());
    let mut t = Tally::default();
    for path in &list {
        let Ok(d) = std::fs::read(path) else { continue };
        if walk(&d, &mut |link, pkt| check(link, pkt, &mut t)) {
            t.files += 1;
        }
    }
    eprintln!(
        "corpus {}: {} capture files, {} packets, {} reached IP, {} parsed to L4, {} tunnelled",
        dir.display(),
        t.files,
        t.packets,
        t.ip,
        t.l4,
        t.inner
    );
    eprintln!("fast IPv4 hash path taken (and equal): {}", t.fast);
    assert!(t.fast > 100, "the fast IPv4 hash path was never compared");
    eprintln!("fast IPv4 5-tuple hash path taken (and equal): {}", t.fast5);
    assert!(
        t.fast5 > 100,
        "the fast 5-tuple hash path was never compared"
    );
    eprintln!("stopped: {:?}", t.stops);
    eprintln!("link types: {:?}", t.links);
    assert!(
        t.files > 0 && t.packets > 0,
        "no packets read from {}",
        dir.display()
    );
    assert!(t.l4 > 0);
}

#[test]
fn walker_reads_hand_made_files() {
    // pcap, little-endian, Ethernet, two records (the second cut by the end of the file).
    let mut f = Vec::new();
    f.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    f.extend_from_slice(&[
        2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 1, 0, 0, 0,
    ]);
    let pkt = [0u8; 20];
    for _ in 0..2 {
        f.extend_from_slice(&[0; 8]);
        f.extend_from_slice(&20u32.to_le_bytes());
        f.extend_from_slice(&20u32.to_le_bytes());
        f.extend_from_slice(&pkt);
    }
    f.truncate(f.len() - 1);
    let mut n = Vec::new();
    assert!(walk(&f, &mut |l, p| n.push((l, p.len()))));
    assert_eq!(n, vec![(1, 20)]);

    // pcapng: section header, one interface (raw IP), one enhanced packet block.
    let mut g = Vec::new();
    g.extend_from_slice(&0x0a0d_0d0au32.to_le_bytes());
    g.extend_from_slice(&28u32.to_le_bytes());
    g.extend_from_slice(&0x1a2b_3c4du32.to_le_bytes());
    g.extend_from_slice(&[1, 0, 0, 0]);
    g.extend_from_slice(&u64::MAX.to_le_bytes());
    g.extend_from_slice(&28u32.to_le_bytes());
    g.extend_from_slice(&1u32.to_le_bytes());
    g.extend_from_slice(&20u32.to_le_bytes());
    g.extend_from_slice(&[101, 0, 0, 0, 0, 0, 0, 0]);
    g.extend_from_slice(&20u32.to_le_bytes());
    g.extend_from_slice(&6u32.to_le_bytes());
    g.extend_from_slice(&36u32.to_le_bytes());
    g.extend_from_slice(&[0; 12]);
    g.extend_from_slice(&3u32.to_le_bytes());
    g.extend_from_slice(&3u32.to_le_bytes());
    g.extend_from_slice(&[0x45, 0, 0, 0]);
    g.extend_from_slice(&36u32.to_le_bytes());
    let mut m = Vec::new();
    assert!(walk(&g, &mut |l, p| m.push((l, p.to_vec()))));
    assert_eq!(m, vec![(101, vec![0x45, 0, 0])]);
    assert!(!walk(b"not a capture", &mut |_, _| {}));
}

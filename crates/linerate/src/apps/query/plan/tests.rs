use super::*;
use crate::filter::Filter;
use crate::wire::LinkType;
use std::collections::BTreeSet;

/// A brute-force index: one block per packet, each posting every key a packet could be matched
/// by (what a capture file's index promises); an unparsed packet matches every term.
struct Brute {
    keys: Vec<Option<Vec<Term>>>,
}

impl Postings for Brute {
    type Set = BTreeSet<usize>;
    fn all(&self) -> Self::Set {
        (0..self.keys.len()).collect()
    }
    fn term(&self, t: &Term) -> Self::Set {
        let mut s = BTreeSet::new();
        for (i, k) in self.keys.iter().enumerate() {
            let Some(k) = k else {
                s.insert(i);
                continue;
            };
            let hit = k.iter().any(|x| match (t, x) {
                (Term::Net4 { addr, mask }, Term::Ip4(a)) => Term::net4_holds(*addr, *mask, *a),
                (Term::Net6 { addr, bits }, Term::Ip6(a)) => Term::net6_holds(*addr, *bits, *a),
                _ => x == t,
            });
            if hit {
                s.insert(i);
            }
        }
        s
    }
    fn and(&self, a: Self::Set, b: Self::Set) -> Self::Set {
        a.intersection(&b).copied().collect()
    }
    fn or(&self, a: Self::Set, b: Self::Set) -> Self::Set {
        a.union(&b).copied().collect()
    }
}

/// The keys of an Ethernet frame, walking VLAN tags, IPv4 (ports of first fragments only),
/// IPv6 with its extension headers, ARP.
fn keys_of(f: &[u8]) -> Option<Vec<Term>> {
    let mut k = Vec::new();
    let mut at = 12;
    let mut et = u16::from_be_bytes([*f.get(at)?, *f.get(at + 1)?]);
    k.push(Term::EtherType(et));
    while et == 0x8100 || et == 0x88a8 {
        k.push(Term::Tagged);
        let tci = u16::from_be_bytes([*f.get(at + 2)?, *f.get(at + 3)?]);
        k.push(Term::Vlan(tci & 0x0fff));
        at += 4;
        et = u16::from_be_bytes([*f.get(at)?, *f.get(at + 1)?]);
        k.push(Term::EtherType(et));
    }
    let l3 = at + 2;
    let ports = |k: &mut Vec<Term>, p: usize| -> Option<()> {
        k.push(Term::Port(u16::from_be_bytes([*f.get(p)?, *f.get(p + 1)?])));
        k.push(Term::Port(u16::from_be_bytes([
            *f.get(p + 2)?,
            *f.get(p + 3)?,
        ])));
        Some(())
    };
    match et {
        0x0800 => {
            let ihl = usize::from(f.get(l3)? & 0x0f) * 4;
            let proto = *f.get(l3 + 9)?;
            k.push(Term::Proto(proto));
            k.push(Term::Ip4(f.get(l3 + 12..l3 + 16)?.try_into().ok()?));
            k.push(Term::Ip4(f.get(l3 + 16..l3 + 20)?.try_into().ok()?));
            let frag = u16::from_be_bytes([*f.get(l3 + 6)?, *f.get(l3 + 7)?]) & 0x1fff;
            if frag == 0 && matches!(proto, 6 | 17 | 132) {
                ports(&mut k, l3 + ihl)?;
            }
        }
        0x86dd => {
            k.push(Term::Ip6(f.get(l3 + 8..l3 + 24)?.try_into().ok()?));
            k.push(Term::Ip6(f.get(l3 + 24..l3 + 40)?.try_into().ok()?));
            let mut nh = *f.get(l3 + 6)?;
            let mut p = l3 + 40;
            let mut first = true;
            loop {
                k.push(Term::Proto(nh));
                match nh {
                    0 | 43 | 60 => {
                        nh = *f.get(p)?;
                        p += (usize::from(*f.get(p + 1)?) + 1) * 8;
                    }
                    44 => {
                        first = u16::from_be_bytes([*f.get(p + 2)?, *f.get(p + 3)?]) >> 3 == 0;
                        nh = *f.get(p)?;
                        p += 8;
                    }
                    6 | 17 | 132 if first => {
                        ports(&mut k, p)?;
                        break;
                    }
                    _ => break,
                }
            }
        }
        0x0806 => {
            k.push(Term::Ip4(f.get(l3 + 14..l3 + 18)?.try_into().ok()?));
            k.push(Term::Ip4(f.get(l3 + 24..l3 + 28)?.try_into().ok()?));
        }
        _ => {}
    }
    Some(k)
}

/// A small deterministic generator (xorshift).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn pick<'a, T>(&mut self, v: &'a [T]) -> &'a T {
        &v[(self.next() % v.len() as u64) as usize]
    }
}

const V4: [[u8; 4]; 4] = [
    [10, 0, 0, 1],
    [10, 0, 0, 2],
    [10, 1, 2, 3],
    [192, 168, 1, 9],
];
const V6: [&str; 3] = ["2001:db8::1", "2001:db8::2", "fe80::9"];
const PORTS: [u16; 5] = [53, 80, 443, 1234, 5353];

fn frame(r: &mut Rng) -> Vec<u8> {
    let mut f = vec![0xaa; 12];
    for _ in 0..(r.next() % 3) {
        f.extend_from_slice(&[0x81, 0x00]);
        f.extend_from_slice(&r.pick(&[10u16, 100, 200]).to_be_bytes());
    }
    let l4 = |r: &mut Rng, proto: u8| -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&r.pick(&PORTS).to_be_bytes());
        v.extend_from_slice(&r.pick(&PORTS).to_be_bytes());
        if proto == 6 {
            v.extend_from_slice(&[0; 8]);
            v.extend_from_slice(&[0x50, 0x02, 0, 0, 0, 0, 0, 0]);
        } else {
            v.extend_from_slice(&[0, 8, 0, 0]);
        }
        v
    };
    match r.next() % 4 {
        0 | 1 => {
            f.extend_from_slice(&[0x08, 0x00]);
            let proto = *r.pick(&[6u8, 17, 1, 132]);
            let frag: u16 = *r.pick(&[0u16, 0, 0x2000, 0x0010]);
            let body = if frag & 0x1fff == 0 {
                l4(r, proto)
            } else {
                vec![0; 16]
            };
            let mut ip = vec![0x45, 0];
            ip.extend_from_slice(&((20 + body.len()) as u16).to_be_bytes());
            ip.extend_from_slice(&[0, 1]);
            ip.extend_from_slice(&frag.to_be_bytes());
            ip.extend_from_slice(&[64, proto, 0, 0]);
            ip.extend_from_slice(&r.pick(&V4)[..]);
            ip.extend_from_slice(&r.pick(&V4)[..]);
            f.extend_from_slice(&ip);
            f.extend_from_slice(&body);
        }
        2 => {
            f.extend_from_slice(&[0x86, 0xdd]);
            let proto = *r.pick(&[6u8, 17, 58]);
            let ext = *r.pick(&[None, Some(0u8), Some(44u8), Some(60u8)]);
            let mut body = Vec::new();
            let first = match ext {
                None => proto,
                Some(44) => {
                    let off: u16 = *r.pick(&[0u16, 0x00a8]);
                    body.extend_from_slice(&[proto, 0]);
                    body.extend_from_slice(&off.to_be_bytes());
                    body.extend_from_slice(&[0, 0, 0, 7]);
                    44
                }
                Some(e) => {
                    body.extend_from_slice(&[proto, 0, 1, 4, 0, 0, 0, 0]);
                    e
                }
            };
            body.extend_from_slice(&l4(r, proto));
            let mut ip = vec![0x60, 0, 0, 0];
            ip.extend_from_slice(&(body.len() as u16).to_be_bytes());
            ip.extend_from_slice(&[first, 64]);
            let a: std::net::Ipv6Addr = r.pick(&V6).parse().unwrap();
            let b: std::net::Ipv6Addr = r.pick(&V6).parse().unwrap();
            ip.extend_from_slice(&a.octets());
            ip.extend_from_slice(&b.octets());
            f.extend_from_slice(&ip);
            f.extend_from_slice(&body);
        }
        _ => {
            f.extend_from_slice(&[0x08, 0x06, 0, 1, 8, 0, 6, 4, 0, 1]);
            f.extend_from_slice(&[0xbb; 6]);
            f.extend_from_slice(&r.pick(&V4)[..]);
            f.extend_from_slice(&[0; 6]);
            f.extend_from_slice(&r.pick(&V4)[..]);
        }
    }
    f
}

const ATOMS: &[&str] = &[
    "host 10.0.0.1",
    "src host 10.0.0.2",
    "dst 10.1.2.3",
    "ip host 192.168.1.9",
    "arp host 10.0.0.1",
    "host 2001:db8::1",
    "ip6 host fe80::9",
    "net 10.0.0.0/24",
    "net 10",
    "net 192.168.0.0 mask 255.255.0.0",
    "ip6 net 2001:db8::/32",
    "port 53",
    "src port 80",
    "dst port 5353",
    "tcp port 443",
    "udp port 53",
    "udp dst port 1234",
    "sctp port 80",
    "portrange 50-90",
    "tcp",
    "udp",
    "icmp",
    "icmp6",
    "sctp",
    "proto 17",
    "ip proto 6",
    "ip6 proto 58",
    "ip proto \\udp",
    "vlan",
    "vlan 100",
    "vlan 200",
    "ip",
    "ip6",
    "arp",
    "less 70",
    "ether host aa:aa:aa:aa:aa:aa",
    "ip[6:2] & 0x1fff != 0",
    "src or dst port 53",
    "host 10.0.0.1 or 10.0.0.2",
    "tcp port 80 or 443",
    "ip6 and tcp",
];

fn random_expr(r: &mut Rng, depth: u32) -> String {
    if depth == 0 || r.next().is_multiple_of(3) {
        return r.pick(ATOMS).to_string();
    }
    let a = random_expr(r, depth - 1);
    let b = random_expr(r, depth - 1);
    match r.next() % 6 {
        0 => format!("{a} and {b}"),
        1 => format!("{a} or {b}"),
        2 => format!("({a}) && not ({b})"),
        3 => format!("({a}) || ({b})"),
        4 => format!("!({a}) and ({b})"),
        _ => format!("({a} or {b}) and {b}"),
    }
}

/// Property: over many expressions and packets, every packet libpcap's filter matches is in a
/// block the plan reads.
#[test]
fn plan_is_a_superset_of_libpcap() {
    let mut r = Rng(0x9e37_79b9_7f4a_7c15);
    let frames: Vec<Vec<u8>> = (0..400).map(|_| frame(&mut r)).collect();
    let idx = Brute {
        keys: frames.iter().map(|f| keys_of(f)).collect(),
    };
    let mut exprs: Vec<String> = ATOMS.iter().map(|s| s.to_string()).collect();
    for _ in 0..400 {
        exprs.push(random_expr(&mut r, 3));
    }
    let mut narrowed = 0;
    let mut compiled = 0;
    for e in &exprs {
        let Ok(filter) = Filter::compile(e, LinkType::ETHERNET) else {
            continue;
        };
        compiled += 1;
        let plan = Plan::parse(e);
        let set = plan.eval(&idx);
        if set.len() < frames.len() {
            narrowed += 1;
        }
        for (i, f) in frames.iter().enumerate() {
            if filter.matches(f) {
                assert!(
                    set.contains(&i),
                    "'{e}' ({plan:?}) leaves out packet {i}: {f:02x?}"
                );
            }
        }
    }
    assert!(compiled > 300, "{compiled}");
    assert!(narrowed > 100, "{narrowed}");
}

/// The same property over the recorder's own index (one packet per block): the plan of every
/// expression, or the opaque blocks, holds every packet libpcap matches.
#[test]
fn plan_over_the_recorders_index_is_a_superset() {
    use crate::apps::record::IndexWriter;
    let mut r = Rng(0x1234_5678_9abc_def1);
    let frames: Vec<Vec<u8>> = (0..300).map(|_| frame(&mut r)).collect();
    let mut w = IndexWriter::with_blocks(LinkType::ETHERNET, 1 << 20, 1);
    let mut off = 24u64;
    for (i, f) in frames.iter().enumerate() {
        w.on_packet(off, 16 + f.len() as u64, i as u64, f);
        off += 16 + f.len() as u64;
    }
    let idx = w.finish();
    let post = super::super::index::Idx(&idx);
    let mut exprs: Vec<String> = ATOMS.iter().map(|s| s.to_string()).collect();
    for _ in 0..400 {
        exprs.push(random_expr(&mut r, 3));
    }
    let mut narrowed = 0;
    for e in &exprs {
        let Ok(filter) = Filter::compile(e, LinkType::ETHERNET) else {
            continue;
        };
        let set = Plan::parse(e).eval(&post).or(&idx.opaque());
        if set.count() < frames.len() {
            narrowed += 1;
        }
        for (i, f) in frames.iter().enumerate() {
            if filter.matches(f) {
                assert!(set.contains(i), "'{e}' leaves out packet {i}: {f:02x?}");
            }
        }
    }
    assert!(narrowed > 100, "{narrowed}");
}

#[test]
fn plans_of_common_filters() {
    let t = |t: Term| Plan::Term(t);
    let and = |a, b| Plan::And(Box::new(a), Box::new(b));
    let or = |a, b| Plan::Or(Box::new(a), Box::new(b));
    let cases: Vec<(&str, Plan)> = vec![
        ("host 10.0.0.1", t(Term::Ip4([10, 0, 0, 1]))),
        ("udp and not port 53", t(Term::Proto(17))),
        ("ip6", t(Term::EtherType(0x86dd))),
        ("vlan and tcp", and(t(Term::Tagged), t(Term::Proto(6)))),
        (
            "host 10.0.0.1 or 10.0.0.2",
            or(t(Term::Ip4([10, 0, 0, 1])), t(Term::Ip4([10, 0, 0, 2]))),
        ),
        (
            "tcp port 80 or 443",
            or(
                and(t(Term::Proto(6)), t(Term::Port(80))),
                and(t(Term::Proto(6)), t(Term::Port(443))),
            ),
        ),
        // Left to right, one precedence: (a or b) and c.
        (
            "port 1 or port 2 and vlan 7",
            and(or(t(Term::Port(1)), t(Term::Port(2))), t(Term::Vlan(7))),
        ),
        ("src or dst port 53", t(Term::Port(53))),
        (
            "net 10.1 && !tcp",
            t(Term::Net4 {
                addr: 0x0a01_0000,
                mask: 0xffff_0000,
            }),
        ),
        ("ip proto \\tcp", t(Term::Proto(6))),
        ("not host 10.0.0.1", Plan::All),
        ("tcp[13] & 2 != 0 and host 10.0.0.1", Plan::All),
        ("host example.com", Plan::All),
        ("host 10.0.0.1 or ether host 1:2:3:4:5:6", Plan::All),
        ("(host 10.0.0.1", Plan::All),
        ("", Plan::All),
        ("port domain", Plan::All),
        ("mpls and host 10.0.0.1", Plan::All),
        // After a `vlan`, libpcap's offsets move for every later primitive: only a chain of
        // `and`s keeps them where the index's keys are.
        (
            "vlan 10 and vlan 20 and udp",
            and(
                and(t(Term::Vlan(10)), t(Term::Vlan(20))),
                t(Term::Proto(17)),
            ),
        ),
        ("vlan or vlan or ip", Plan::All),
        (
            "tcp or vlan and host 10.0.0.1",
            or(t(Term::Proto(6)), t(Term::Tagged)),
        ),
    ];
    for (e, want) in cases {
        assert_eq!(Plan::parse(e), want, "{e}");
    }
}

//! The XDP live-frames engine of `gen` over a veth pair between two network namespaces, received
//! by linerate's own `xdp:` port on the other side (a veth that XDP frames are redirected to
//! needs an XDP program on its receiving side): exactly `count` frames arrive, every IPv4, IPv6,
//! UDP and TCP checksum is valid after the program's incremental updates, the varied fields
//! cover their ranges, a run cut short by its duration accounts for every frame (delivered or
//! counted as dropped), and no XDP program is left behind. Needs root; skips otherwise (see
//! `netns::require_priv`).
#![deny(unsafe_code)]

use linerate_test_support::netns;

use linerate::apps::gen::live::{self, LiveOptions};
use linerate::apps::gen::template::{TemplateSpec, L4};
use linerate::apps::gen::vary::{parse_addr, parse_seq, port_value, SizeSpec};
use linerate::apps::gen::StreamSpec;
use linerate::mem::Batch;
use linerate::port::xdp::{XdpConfig, XdpPort};
use linerate::port::{LinkType, Port, PortOptions};
use linerate::time::TscClock;
use linerate::wire::checksum::{finish, pseudo_v4, pseudo_v6, sum};
use linerate::wire::{parse, Ipv4Packet};
use netns::{NetnsPair, Side};
use std::collections::HashSet;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Tests of this file run one at a time (each pins to a core and sends as fast as it may).
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Checks the IP and transport checksums of an Ethernet frame.
fn checksums_ok(data: &[u8]) -> bool {
    let p = parse(data, LinkType::ETHERNET);
    let (Some(l3), Some(l4)) = (p.l3, p.l4) else {
        return false;
    };
    let seg = &data[l4 as usize..p.l3_end as usize];
    let init = if p.ip_version == 4 {
        let ip = Ipv4Packet::new_checked(&data[l3 as usize..]).unwrap();
        if !ip.verify_checksum() {
            return false;
        }
        pseudo_v4(ip.src(), ip.dst(), p.proto, seg.len() as u16)
    } else {
        pseudo_v6(&p.src, &p.dst, p.proto, seg.len() as u32)
    };
    finish(sum(seg, init)) == 0
}

/// What the receiver saw: frames, and the fields of each (src low 32 bits, dst, sport, dport).
struct Seen {
    frames: usize,
    bad: usize,
    fields: Vec<(u32, u32, u16, u16)>,
}

/// Receives on `vB` through linerate's xdp port until `want` frames or `quiet` without one.
fn receive(port: &mut XdpPort, want: usize, quiet: Duration) -> Seen {
    let mut b = Batch::new();
    let mut s = Seen {
        frames: 0,
        bad: 0,
        fields: Vec::new(),
    };
    let mut last = Instant::now();
    let end = Instant::now() + Duration::from_secs(20);
    while s.frames < want && last.elapsed() < quiet && Instant::now() < end {
        let n = port.rx(&mut b).unwrap();
        if n == 0 {
            std::thread::sleep(Duration::from_micros(50));
            continue;
        }
        last = Instant::now();
        for i in 0..b.len() {
            let d = b.data(i);
            let p = parse(d, LinkType::ETHERNET);
            if p.proto != 17 && p.proto != 6 {
                continue; // the stack's own (IPv6 neighbour discovery)
            }
            s.frames += 1;
            if !checksums_ok(d) {
                s.bad += 1;
            }
            let p = parse(d, LinkType::ETHERNET);
            let l4 = p.l4.unwrap_or(0) as usize;
            let low = |a: &[u8; 16]| {
                if p.ip_version == 4 {
                    u32::from_be_bytes([a[0], a[1], a[2], a[3]])
                } else {
                    u32::from_be_bytes([a[12], a[13], a[14], a[15]])
                }
            };
            let port_at = |o: usize| u16::from_be_bytes([d[o], d[o + 1]]);
            s.fields
                .push((low(&p.src), low(&p.dst), port_at(l4), port_at(l4 + 2)));
        }
        b.clear();
    }
    s
}

fn xdp_attached(pair: &NetnsPair, side: Side, iface: &str) -> bool {
    pair.ip_in(side, &["link", "show", iface])
        .unwrap()
        .contains("prog/xdp")
}

/// vB's rx_packets (XDP frames included), from `ip -s -j`.
fn rx_packets(pair: &NetnsPair) -> u64 {
    let j = pair
        .ip_in(Side::B, &["-s", "-j", "link", "show", "vB"])
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&j).unwrap();
    v[0]["stats64"]["rx"]["packets"].as_u64().unwrap()
}

/// Runs the live engine in A with `opts` while vB receives through an xdp port; returns the
/// report and what arrived.
fn send_and_receive(
    pair: &NetnsPair,
    opts: LiveOptions,
    want: usize,
) -> (live::LiveReport, Seen, u64) {
    let (ready_tx, ready_rx) = mpsc::channel();
    let rx0 = rx_packets(pair);
    std::thread::scope(|sc| {
        let rx = sc.spawn(|| {
            pair.run_in(Side::B, || {
                let cfg = XdpConfig {
                    ring_size: 8192,
                    ..Default::default()
                };
                let mut port = XdpPort::open("vB", &PortOptions::default(), &cfg).unwrap();
                ready_tx.send(()).unwrap();
                receive(&mut port, want, Duration::from_secs(2))
            })
        });
        ready_rx.recv_timeout(Duration::from_secs(10)).unwrap();
        let rep = pair.run_in(Side::A, || {
            let stop = AtomicBool::new(false);
            live::run(
                &opts,
                &TscClock::new(),
                &stop,
                Duration::from_millis(50),
                |_| {},
            )
            .unwrap()
        });
        let seen = rx.join().unwrap();
        let delivered = rx_packets(pair) - rx0;
        (rep, seen, delivered)
    })
}

fn stream(pair: &NetnsPair) -> StreamSpec {
    StreamSpec {
        template: TemplateSpec {
            dst_mac: pair.mac_b,
            src_mac: pair.mac_a,
            ..Default::default()
        },
        size: SizeSpec::Fixed(64),
        probe: false,
        ..Default::default()
    }
}

#[test]
fn live_frames_arrive_exactly_with_valid_checksums_covering_the_ranges() {
    if !netns::require_priv() {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    const N: u64 = 6000;
    let pair = NetnsPair::new().expect("create namespaces");
    let s = StreamSpec {
        src_ip: Some(parse_addr("10.1.0.1-10.1.0.50").unwrap()),
        dst_ip: Some(parse_addr("random:10.2.0.0-10.2.0.255").unwrap()),
        sport: Some(parse_seq("random:1000-1999", port_value).unwrap()),
        dport: Some(parse_seq("5000-5099", port_value).unwrap()),
        ..stream(&pair)
    };
    let opts = LiveOptions {
        iface: "vA".into(),
        stream: s,
        count: Some(N),
        ..Default::default()
    };
    let (rep, seen, _) = send_and_receive(&pair, opts, N as usize);
    assert_eq!(rep.pkts, N, "{rep:?}");
    assert_eq!(rep.tx_dropped, Some(0), "{rep:?}");
    assert_eq!(seen.frames, N as usize, "frames received");
    assert_eq!(seen.bad, 0, "frames with a bad checksum");
    let src: HashSet<u32> = seen.fields.iter().map(|f| f.0).collect();
    let dst: HashSet<u32> = seen.fields.iter().map(|f| f.1).collect();
    let sport: HashSet<u16> = seen.fields.iter().map(|f| f.2).collect();
    let dport: HashSet<u16> = seen.fields.iter().map(|f| f.3).collect();
    let base = |a: [u8; 4]| u32::from_be_bytes(a);
    assert_eq!(
        src,
        (base([10, 1, 0, 1])..=base([10, 1, 0, 50])).collect(),
        "increment covers the range"
    );
    assert_eq!(dport, (5000..=5099).collect(), "increment covers the range");
    assert!(dst
        .iter()
        .all(|&d| (base([10, 2, 0, 0])..=base([10, 2, 0, 255])).contains(&d)));
    assert!(dst.len() > 240, "random dst: {} of 256 values", dst.len());
    assert!(sport.iter().all(|p| (1000..=1999).contains(p)));
    assert!(
        sport.len() > 900,
        "random sport: {} of 1000 values",
        sport.len()
    );
    drop(pair);
}

#[test]
fn live_frames_ipv6_tcp_and_vlan_checksums() {
    if !netns::require_priv() {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    const N: u64 = 3000;
    let pair = NetnsPair::new().expect("create namespaces");
    let mut s = StreamSpec {
        src_ip: Some(parse_addr("2001:db8::1-2001:db8::400").unwrap()),
        dst_ip: Some(parse_addr("random:2001:db8::1:0-2001:db8::1:ffff").unwrap()),
        dport: Some(parse_seq("random:20000-29999", port_value).unwrap()),
        size: SizeSpec::Fixed(128),
        ..stream(&pair)
    };
    s.template.l4 = L4::Tcp;
    s.template.vlan = Some(100);
    s.template.src_ip = "2001:db8::1".parse().unwrap();
    s.template.dst_ip = "2001:db8::2".parse().unwrap();
    let opts = LiveOptions {
        iface: "vA".into(),
        stream: s,
        count: Some(N),
        ..Default::default()
    };
    let (rep, seen, _) = send_and_receive(&pair, opts, N as usize);
    assert_eq!(rep.pkts, N, "{rep:?}");
    assert_eq!(seen.frames, N as usize);
    assert_eq!(seen.bad, 0, "frames with a bad checksum");
    let src: HashSet<u32> = seen.fields.iter().map(|f| f.0).collect();
    assert_eq!(src, (1..=0x400).collect());
}

#[test]
fn a_timed_run_accounts_for_every_frame_and_leaves_nothing_behind() {
    if !netns::require_priv() {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let pair = NetnsPair::new().expect("create namespaces");
    let opts = LiveOptions {
        iface: "vA".into(),
        stream: stream(&pair),
        duration: Some(Duration::from_millis(300)),
        ..Default::default()
    };
    let t = Instant::now();
    let (rep, _, delivered) = send_and_receive(&pair, opts, usize::MAX);
    assert!(t.elapsed() < Duration::from_secs(15));
    assert!(rep.pkts > 0, "{rep:?}");
    // Whatever the receiver's socket had no room for, vB took every frame off the veth, or vA
    // counted it as dropped.
    let dropped = rep.tx_dropped.expect("device counters");
    // vB also counts a few frames of the stack (IPv6 neighbour discovery).
    assert!(
        delivered + dropped >= rep.pkts && delivered + dropped <= rep.pkts + 20,
        "{delivered} delivered + {dropped} dropped for {rep:?}"
    );
    assert!(
        !xdp_attached(&pair, Side::A, "vA"),
        "vA keeps an XDP program"
    );
    assert!(
        !xdp_attached(&pair, Side::B, "vB"),
        "vB keeps an XDP program"
    );
}

#[test]
fn a_veth_whose_peer_has_no_xdp_program_is_refused() {
    if !netns::require_priv() {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let pair = NetnsPair::new().expect("create namespaces");
    let opts = LiveOptions {
        iface: "vA".into(),
        stream: stream(&pair),
        count: Some(1000),
        ..Default::default()
    };
    let e = pair.run_in(Side::A, || {
        live::run(
            &opts,
            &TscClock::new(),
            &AtomicBool::new(false),
            Duration::from_millis(50),
            |_| {},
        )
        .unwrap_err()
        .to_string()
    });
    assert!(e.contains("needs an XDP program"), "{e}");
}

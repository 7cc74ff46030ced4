//! `afpacket:` over a veth pair between two network namespaces: every frame sent by our transmit
//! ring arrives once and byte-identical on the receive ring, kernel filters apply, and missing
//! interfaces are reported. Needs root; skips otherwise (see `netns::require_priv`).
#![deny(unsafe_code)]

use linerate_test_support::netns;

use linerate::filter::Filter;
use linerate::mem::{Batch, Desc, Pool, PoolConfig};
use linerate::port::afpacket::AfPacket;
use linerate::port::{DropReason, LinkType, Port, PortError, PortOptions};
use netns::{NetnsPair, Side};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

const MAGIC: &[u8; 8] = b"LRAFPKT1";

fn csum(data: &[u8]) -> u16 {
    let mut s: u32 = 0;
    for c in data.chunks(2) {
        let w = if c.len() == 2 {
            u16::from_be_bytes([c[0], c[1]])
        } else {
            u16::from_be_bytes([c[0], 0])
        };
        s += w as u32;
    }
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

/// Ethernet/IPv4/UDP frame number `seq` to `dport`, with a payload of varying length.
fn frame(p: &NetnsPair, seq: u32, dport: u16) -> Vec<u8> {
    let payload_len = MAGIC.len() + 4 + (seq as usize * 7) % 300;
    let mut payload = Vec::with_capacity(payload_len);
    payload.extend_from_slice(MAGIC);
    payload.extend_from_slice(&seq.to_be_bytes());
    while payload.len() < payload_len {
        payload.push((seq as usize + payload.len()) as u8);
    }
    let udp_len = 8 + payload.len();
    let ip_len = 20 + udp_len;
    let mut f = Vec::with_capacity(14 + ip_len);
    f.extend_from_slice(&p.mac_b);
    f.extend_from_slice(&p.mac_a);
    f.extend_from_slice(&0x0800u16.to_be_bytes());
    let mut iph = [0u8; 20];
    iph[0] = 0x45;
    iph[2..4].copy_from_slice(&(ip_len as u16).to_be_bytes());
    iph[4..6].copy_from_slice(&(seq as u16).to_be_bytes());
    iph[8] = 64;
    iph[9] = 17;
    iph[12..16].copy_from_slice(&p.ip_a);
    iph[16..20].copy_from_slice(&p.ip_b);
    let c = csum(&iph);
    iph[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&iph);
    f.extend_from_slice(&(40000 + (seq % 1000) as u16).to_be_bytes());
    f.extend_from_slice(&dport.to_be_bytes());
    f.extend_from_slice(&(udp_len as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]); // no UDP checksum
    f.extend_from_slice(&payload);
    f
}

/// The sequence number of one of our frames, if it is one.
fn seq_of(data: &[u8]) -> Option<u32> {
    let pl = data.get(42..)?;
    if pl.get(..8)? != MAGIC {
        return None;
    }
    let s = pl.get(8..12)?;
    Some(u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
}

/// Sends `frames` through `port` in batches of up to 64 from our own pool, within `deadline`.
fn send_all(port: &mut AfPacket, frames: &[Vec<u8>], deadline: Instant) -> usize {
    let pool = Arc::new(
        Pool::new(&PoolConfig {
            frames: 1024,
            ..Default::default()
        })
        .unwrap(),
    );
    let mut batch = Batch::with_pool(&pool);
    let mut next = 0;
    let mut sent = 0;
    while sent < frames.len() && Instant::now() < deadline {
        while !batch.is_full() && next < frames.len() {
            let mut fr = batch.alloc().expect("pool has frames");
            let f = &frames[next];
            fr.buf()[..f.len()].copy_from_slice(f);
            fr.push(Desc {
                len: f.len() as u32,
                wire_len: f.len() as u32,
                ..Default::default()
            });
            next += 1;
        }
        let n = port.tx(&mut batch).expect("tx");
        sent += n;
        if n == 0 {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
    port.flush().expect("flush");
    sent
}

fn rx_opts() -> PortOptions {
    PortOptions::default()
}

fn tx_opts() -> PortOptions {
    // The sending side receives nothing of interest: a small receive ring.
    PortOptions {
        ring_blocks: 4,
        ..Default::default()
    }
}

#[test]
fn veth_delivers_every_frame_once_and_byte_identical() {
    if !netns::require_priv() {
        return;
    }
    const N: u32 = 10_000;
    let pair = NetnsPair::new().expect("create namespaces");
    let mut rx = pair
        .run_in(Side::B, || AfPacket::open(&pair.if_b, &rx_opts()))
        .expect("open vB");
    let mut tx = pair
        .run_in(Side::A, || AfPacket::open(&pair.if_a, &tx_opts()))
        .expect("open vA");
    let frames: Vec<Vec<u8>> = (0..N).map(|s| frame(&pair, s, 7777)).collect();

    let deadline = Instant::now() + Duration::from_secs(10);
    let (sent, tx_stats) = std::thread::scope(|s| {
        let h = s.spawn(|| {
            let sent = send_all(&mut tx, &frames, deadline);
            (sent, tx.stats())
        });
        let mut seen = HashSet::new();
        let mut dups = 0;
        let mut mismatched = 0;
        let mut batch = Batch::new();
        while seen.len() < N as usize && Instant::now() < deadline {
            rx.rx(&mut batch).expect("rx");
            for p in batch.iter() {
                let Some(seq) = seq_of(p.data) else { continue };
                if p.data != frames.get(seq as usize).map_or(&[][..], |f| &f[..])
                    || p.desc.wire_len != p.desc.len
                {
                    mismatched += 1;
                } else if !seen.insert(seq) {
                    dups += 1;
                }
            }
            batch.clear();
        }
        // A little longer: anything extra (a duplicate) would show up now.
        let extra_end = Instant::now() + Duration::from_millis(50);
        while Instant::now() < extra_end {
            rx.rx(&mut batch).expect("rx");
            for p in batch.iter() {
                if let Some(seq) = seq_of(p.data) {
                    if !seen.insert(seq) {
                        dups += 1;
                    }
                }
            }
            batch.clear();
        }
        let r = h.join().expect("sender");
        assert_eq!(dups, 0, "duplicated frames");
        assert_eq!(mismatched, 0, "frames not byte-identical to what was sent");
        let st = rx.stats();
        let kdrops = st.rx_drops.get(DropReason::Kernel);
        if kdrops == 0 {
            assert_eq!(seen.len(), N as usize, "frames received");
        } else {
            eprintln!("note: {kdrops} kernel drops observed; checking received + drops = sent");
            assert_eq!(seen.len() as u64 + kdrops, N as u64);
        }
        assert!(st.rx_packets >= seen.len() as u64);
        r
    });
    assert_eq!(sent, N as usize, "frames taken by tx");
    assert_eq!(tx_stats.tx_packets, N as u64);
    assert_eq!(
        tx_stats.tx_bytes,
        frames.iter().map(|f| f.len() as u64).sum::<u64>()
    );
    assert_eq!(tx_stats.tx_drops.total(), 0);
}

#[test]
fn kernel_filter_passes_only_matching_frames() {
    if !netns::require_priv() {
        return;
    }
    const N: u32 = 1_000;
    let pair = NetnsPair::new().expect("create namespaces");
    let mut rx = pair
        .run_in(Side::B, || AfPacket::open(&pair.if_b, &rx_opts()))
        .expect("open vB");
    let mut tx = pair
        .run_in(Side::A, || AfPacket::open(&pair.if_a, &tx_opts()))
        .expect("open vA");
    let filter = Filter::compile("udp dst port 9", LinkType::ETHERNET).expect("compile");
    assert!(
        rx.attach_filter(&filter).expect("attach"),
        "filter runs in the kernel"
    );
    // Even numbers to port 9, odd ones to 7777.
    let frames: Vec<Vec<u8>> = (0..N)
        .map(|s| frame(&pair, s, if s % 2 == 0 { 9 } else { 7777 }))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    assert_eq!(send_all(&mut tx, &frames, deadline), N as usize);

    let mut seen = HashSet::new();
    let mut others = 0;
    let mut batch = Batch::new();
    let mut quiet_until = None;
    while Instant::now() < deadline {
        rx.rx(&mut batch).expect("rx");
        for p in batch.iter() {
            assert!(
                filter.matches(p.data),
                "a frame the filter rejects got through"
            );
            match seq_of(p.data) {
                Some(s) if s % 2 == 0 && p.data == &frames[s as usize][..] => {
                    assert!(seen.insert(s), "duplicate {s}");
                }
                _ => others += 1,
            }
        }
        batch.clear();
        if seen.len() == N as usize / 2 {
            // Keep listening for a few block timeouts: nothing else may arrive.
            let q = *quiet_until.get_or_insert(Instant::now() + Duration::from_millis(50));
            if Instant::now() >= q {
                break;
            }
        }
    }
    assert_eq!(seen.len(), N as usize / 2, "matching frames received");
    assert_eq!(others, 0, "frames that are not ours to port 9");
    assert_eq!(rx.stats().rx_drops.get(DropReason::Kernel), 0);
}

#[test]
fn fanout_group_splits_traffic_without_loss_or_duplicates() {
    if !netns::require_priv() {
        return;
    }
    const N: u32 = 4_000;
    let pair = NetnsPair::new().expect("create namespaces");
    let opts = PortOptions {
        fanout_group: Some(7),
        ring_blocks: 8,
        ..Default::default()
    };
    let mut rxs: Vec<AfPacket> = (0..2)
        .map(|_| {
            pair.run_in(Side::B, || AfPacket::open(&pair.if_b, &opts))
                .expect("open vB in a fanout group")
        })
        .collect();
    let mut tx = pair
        .run_in(Side::A, || AfPacket::open(&pair.if_a, &tx_opts()))
        .expect("open vA");
    let frames: Vec<Vec<u8>> = (0..N).map(|s| frame(&pair, s, 7777)).collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    assert_eq!(send_all(&mut tx, &frames, deadline), N as usize);
    let mut seen = HashSet::new();
    let mut per_port = [0usize; 2];
    let mut batch = Batch::new();
    while seen.len() < N as usize && Instant::now() < deadline {
        for (i, rx) in rxs.iter_mut().enumerate() {
            rx.rx(&mut batch).expect("rx");
            for p in batch.iter() {
                if let Some(seq) = seq_of(p.data) {
                    assert!(seen.insert(seq), "{seq} delivered twice");
                    assert_eq!(p.data, &frames[seq as usize][..]);
                    per_port[i] += 1;
                }
            }
            batch.clear();
        }
    }
    assert_eq!(seen.len(), N as usize, "frames received by the group");
    assert!(
        per_port.iter().all(|&n| n > 0),
        "both members got a share: {per_port:?}"
    );
}

#[test]
fn missing_interface_is_reported_by_name() {
    // Outside any namespace of ours: no privilege needed.
    match AfPacket::open("lr-missing0", &PortOptions::default()) {
        Err(PortError::NoInterface(n)) => assert_eq!(n, "lr-missing0"),
        Err(e) => panic!("unexpected error: {e}"),
        Ok(_) => panic!("opened a missing interface"),
    }
    match linerate::open_rx("afpacket:lr-missing0", &PortOptions::default()) {
        Err(PortError::NoInterface(n)) => assert_eq!(n, "lr-missing0"),
        Err(e) => panic!("unexpected error: {e}"),
        Ok(_) => panic!("opened a missing interface"),
    }
    if !netns::require_priv() {
        return;
    }
    // vB exists, but in the other namespace: from A it is missing.
    let pair = NetnsPair::new().expect("create namespaces");
    let r = pair.run_in(Side::A, || {
        AfPacket::open(&pair.if_b, &rx_opts()).map(|_| ())
    });
    match r {
        Err(PortError::NoInterface(n)) => assert_eq!(n, pair.if_b),
        other => panic!("expected NoInterface, got {other:?}"),
    }
    // And the one that is there opens.
    pair.run_in(Side::A, || AfPacket::open(&pair.if_a, &tx_opts()))
        .expect("open vA in its namespace");
}

/// Receives on `rx` until `want` of our frames came (or the deadline); returns them by seq.
fn collect(rx: &mut AfPacket, want: usize, deadline: Instant) -> Vec<(u32, Vec<u8>)> {
    let mut got = Vec::new();
    let mut batch = Batch::new();
    while got.len() < want && Instant::now() < deadline {
        rx.rx(&mut batch).expect("rx");
        for p in batch.iter() {
            // The sequence number sits after the tags: find the magic.
            if let Some(i) = p.data.windows(MAGIC.len()).position(|w| w == MAGIC) {
                let s = &p.data[i + 8..i + 12];
                got.push((
                    u32::from_be_bytes([s[0], s[1], s[2], s[3]]),
                    p.data.to_vec(),
                ));
            }
        }
        batch.clear();
    }
    got
}

/// Frames tagged on their way out the way a VLAN device on a NIC with transmit VLAN offload
/// does it (the outer tag in the packet's metadata, not in its bytes: here a tc egress program
/// on vA, since this kernel has no 8021q module) must be shown as they are on the wire, both
/// when captured as outgoing on vA (`direction: Capture::InOut`) and as incoming on vB: 802.1Q, 802.1ad,
/// and QinQ (802.1ad outside, 802.1Q inside, which stays in the bytes).
#[test]
fn tags_in_packet_metadata_are_on_captured_frames_both_ways() {
    if !netns::require_priv() {
        return;
    }
    const PER_CASE: u32 = 300;
    let pair = NetnsPair::new().expect("create namespaces");
    pair.no_ipv6().unwrap();
    let out_opts = PortOptions {
        direction: linerate::port::Capture::InOut,
        ..Default::default()
    };
    let cases: [Vec<(u16, u16)>; 3] = [
        vec![(0x8100, 0x200a)],
        vec![(0x88a8, 20)],
        vec![(0x88a8, 0xe014), (0x8100, 30)],
    ];
    let deadline = Instant::now() + Duration::from_secs(15);
    for tags in &cases {
        let push = pair
            .egress_tags(Side::A, "vA", tags)
            .expect("tc egress program");
        let mut out = pair
            .run_in(Side::A, || AfPacket::open("vA", &out_opts))
            .expect("open vA");
        let mut inc = pair
            .run_in(Side::B, || AfPacket::open("vB", &rx_opts()))
            .expect("open vB");
        let frames: Vec<Vec<u8>> = (0..PER_CASE).map(|i| frame(&pair, i, 7777)).collect();
        // Through the qdisc layer (linerate's transmit ring bypasses it, and tc with it).
        pair.run_in(Side::A, || netns::send_raw("vA", &frames));
        drop(push);
        let want: Vec<Vec<u8>> = frames.iter().map(|f| netns::with_tags(f, tags)).collect();
        for (what, rx) in [("outgoing on vA", &mut out), ("incoming on vB", &mut inc)] {
            let mut got = collect(rx, want.len(), deadline);
            got.sort_by_key(|(s, _)| *s);
            assert_eq!(
                got.len(),
                want.len(),
                "tags {tags:x?}, {what}: frames captured"
            );
            for (s, f) in &got {
                let w = &want[*s as usize];
                assert!(
                    f == w,
                    "tags {tags:x?}, {what}: frame {s} differs from the wire: got {:02x?}, \
                     want {:02x?}",
                    &f[..f.len().min(24)],
                    &w[..24]
                );
            }
        }
    }
}

/// A filter attached in the kernel judges tagged frames as they were on the wire (the kernel
/// takes the outer tag out before its filter runs): `vlan 10` passes VLAN 10 only, `udp dst
/// port 9` no tagged frame, exactly as the same filter on the frames in user space.
#[test]
fn kernel_filter_judges_tagged_frames_as_on_the_wire() {
    if !netns::require_priv() {
        return;
    }
    const N: u32 = 600;
    let pair = NetnsPair::new().expect("create namespaces");
    pair.no_ipv6().unwrap();
    let frames: Vec<Vec<u8>> = (0..N)
        .map(|s| {
            let f = frame(&pair, s, if s % 2 == 0 { 9 } else { 7777 });
            match s % 5 {
                0 => netns::with_tags(&f, &[(0x8100, 10)]),
                1 => netns::with_tags(&f, &[(0x8100, 11)]),
                2 => netns::with_tags(&f, &[(0x88a8, 10), (0x8100, 12)]),
                _ => f,
            }
        })
        .collect();
    for expr in [
        "vlan 10",
        "udp dst port 9",
        "vlan and vlan 12 and udp",
        "not vlan",
    ] {
        let filter = Filter::compile(expr, LinkType::ETHERNET).expect("compile");
        let mut rx = pair
            .run_in(Side::B, || AfPacket::open(&pair.if_b, &rx_opts()))
            .expect("open vB");
        assert!(rx.attach_filter(&filter).expect("attach"));
        let want: Vec<&Vec<u8>> = frames.iter().filter(|f| filter.matches(f)).collect();
        assert!(!want.is_empty() && want.len() < frames.len(), "{expr}");
        pair.run_in(Side::A, || netns::send_raw("vA", &frames));
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut got = collect(&mut rx, want.len(), deadline);
        // A little longer: nothing else may come.
        let more = collect(
            &mut rx,
            usize::MAX,
            Instant::now() + Duration::from_millis(100),
        );
        got.extend(more);
        got.sort_by_key(|(s, _)| *s);
        let got: Vec<&Vec<u8>> = got.iter().map(|(_, f)| f).collect();
        assert_eq!(got, want, "{expr}: frames passed");
        let st = rx.stats();
        assert_eq!(st.rx_packets, want.len() as u64, "{expr}");
    }
}

#[test]
fn an_untagged_frame_past_the_mtu_is_counted_too_big_not_skipped_by_the_kernel() {
    if !netns::require_priv() {
        return;
    }
    let pair = NetnsPair::new().expect("create namespaces");
    let mut tx = pair
        .run_in(Side::A, || AfPacket::open(&pair.if_a, &tx_opts()))
        .expect("open vA");
    // MTU 1500: 1514 bytes untagged, 4 more with an 802.1Q tag (as the kernel allows).
    assert_eq!(tx.max_tx_frame(false), Some(1514));
    assert_eq!(tx.max_tx_frame(true), Some(1518));
    let mut plain = frame(&pair, 1, 7777);
    plain.resize(1514, 0);
    let mut long = plain.clone();
    long.resize(1518, 0);
    let mut tagged = long.clone();
    tagged[12..14].copy_from_slice(&[0x81, 0x00]);
    let frames = [plain, long, tagged];
    let deadline = Instant::now() + Duration::from_secs(5);
    assert_eq!(send_all(&mut tx, &frames, deadline), 3);
    let st = tx.stats();
    // The untagged 1518-byte frame: the kernel would skip it (PACKET_LOSS) without a count.
    assert_eq!(st.tx_drops.get(DropReason::TooBig), 1, "{st:?}");
    assert_eq!(st.tx_packets, 2, "{st:?}");
}

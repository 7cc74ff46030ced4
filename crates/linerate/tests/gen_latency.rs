//! Latency, loss, duplicates and reordering on a mem wire: the generator sends probes through
//! a middle stage that drops, duplicates and reorders packets on a second wire; the tracker
//! must count exactly what was done.
#![deny(unsafe_code)]

use linerate::apps::gen::latency::{hist_csv, hist_svg, Tracker};
use linerate::apps::gen::vary::SizeSpec;
use linerate::apps::gen::{self, GenOptions, StreamSpec};
use linerate::mem::{Batch, Desc};
use linerate::port::mem::wire;
use linerate::port::{LinkType, Port, PortOptions};
use linerate::time::FakeClock;
use std::sync::atomic::AtomicBool;

#[test]
fn loss_duplicates_reordering_and_latency_are_counted() {
    let (mut g, mut mid_in) = wire("lat-a", &PortOptions::default()).unwrap();
    let (mut mid_out, mut rx) = wire("lat-b", &PortOptions::default()).unwrap();
    let n = 2000u64;
    let opts = GenOptions {
        streams: (0..2)
            .map(|id| StreamSpec {
                id,
                size: SizeSpec::Fixed(128),
                ..Default::default()
            })
            .collect(),
        count: Some(n),
        ..Default::default()
    };
    let clock = FakeClock::new(1_000_000_000, 10);
    let stop = AtomicBool::new(false);
    let rep = gen::run(&mut g, &opts, &clock, &stop, None, |_| {}).unwrap();
    assert_eq!(rep.per_stream, vec![1000, 1000]);

    // The middle: per stream, drop seq % 10 == 3, duplicate seq % 100 == 11, and hold back
    // seq % 50 == 7 until 5 more packets of any stream have passed.
    let mut inb = Batch::new();
    let mut outb = Batch::with_pool(mid_out.pool().unwrap());
    let mut held: Vec<(usize, Vec<u8>)> = Vec::new();
    let mut passed = 0usize;
    let (mut dropped, mut duped, mut late) = ([0u64; 2], [0u64; 2], [0u64; 2]);
    let send = |outb: &mut Batch, bytes: &[u8], mid_out: &mut dyn Port| {
        let mut fr = outb.alloc().unwrap();
        fr.buf()[..bytes.len()].copy_from_slice(bytes);
        fr.push(Desc {
            len: bytes.len() as u32,
            wire_len: bytes.len() as u32,
            ..Default::default()
        });
        if outb.is_full() {
            mid_out.tx(outb).unwrap();
        }
    };
    while mid_in.rx(&mut inb).unwrap() > 0 {
        for p in inb.iter() {
            let d = p.data.to_vec();
            // The signature is right after Ethernet + IPv4 + UDP.
            let stream = u16::from_be_bytes([d[44], d[45]]) as usize;
            let seq = u32::from_be_bytes([d[46], d[47], d[48], d[49]]);
            if seq % 10 == 3 {
                dropped[stream] += 1;
                continue;
            }
            if seq % 50 == 7 {
                late[stream] += 1;
                held.push((passed + 5, d));
                continue;
            }
            send(&mut outb, &d, &mut mid_out);
            passed += 1;
            if seq % 100 == 11 {
                duped[stream] += 1;
                send(&mut outb, &d, &mut mid_out);
            }
            while let Some(i) = held.iter().position(|(at, _)| *at <= passed) {
                let (_, h) = held.remove(i);
                send(&mut outb, &h, &mut mid_out);
            }
        }
        inb.clear();
    }
    for (_, h) in held.drain(..) {
        send(&mut outb, &h, &mut mid_out);
    }
    mid_out.tx(&mut outb).unwrap();

    // The receiver: a fake clock 2 µs after the generator's.
    let mut t = Tracker::new();
    let rclock = 1_000_002_000u64;
    let mut b = Batch::new();
    while rx.rx(&mut b).unwrap() > 0 {
        t.observe(&b, LinkType::ETHERNET, rclock + 50_000);
        b.clear();
    }
    assert_eq!(t.other, 0);
    for id in 0..2u16 {
        let s = t.stream(id).unwrap();
        let i = id as usize;
        assert_eq!(dropped[i], 100);
        assert_eq!(s.rx, 1000 - dropped[i], "stream {id}");
        assert_eq!(s.dups, duped[i]);
        assert_eq!(s.reordered, late[i]);
        assert_eq!(s.lost(Some(rep.per_stream[i])), dropped[i]);
        assert_eq!(s.lost(None), dropped[i]);
        let l = s.summary();
        assert!(l.min >= 2_000 && l.max <= 2_000 + 50_000 + 100, "{l:?}");
        assert!(l.p50 <= l.p90 && l.p90 <= l.p99 && l.p99 <= l.p999 && l.p999 <= l.max);
    }
    let table = t.table(|id| Some(rep.per_stream[id as usize]));
    assert_eq!(table.lines().count(), 3, "{table}");
    let h = t.merged();
    assert_eq!(h.len(), 1800);
    let csv = hist_csv(&h);
    assert!(csv.starts_with("low_ns,high_ns,count,cumulative_percent\n"));
    let total: u64 = csv
        .lines()
        .skip(1)
        .map(|l| l.split(',').nth(2).unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(total, 1800);
    assert!(csv.trim_end().ends_with(",100.0000"));
    let svg = hist_svg(&h, "test <latency>");
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert!(svg.contains("test &lt;latency&gt;") && svg.matches("<rect").count() > 2);
}

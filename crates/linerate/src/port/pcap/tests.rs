use super::*;
use crate::port::Interface;
use std::io::Cursor;

/// A packet as read back: timestamp, bytes, wire length.
type Got = (u64, Vec<u8>, u32);

fn port(bytes: Vec<u8>) -> Result<PcapPort, PortError> {
    PcapPort::from_reader("mem.pcap", Box::new(Cursor::new(bytes)), &small())
}

fn small() -> PortOptions {
    PortOptions {
        frames: 256,
        ..Default::default()
    }
}

/// Reads everything; returns the packets and the error that ended the file, if any.
fn read_all(p: &mut PcapPort) -> (Vec<Got>, Option<PortError>) {
    let mut out = Vec::new();
    let mut b = Batch::new();
    for _ in 0..10_000 {
        if p.is_finished() {
            return (out, None);
        }
        match p.rx(&mut b) {
            Ok(_) => {
                for x in b.iter() {
                    out.push((x.desc.ts, x.data.to_vec(), x.desc.wire_len));
                }
                b.clear();
            }
            Err(e) => {
                assert!(p.is_finished(), "finished after an error");
                return (out, Some(e));
            }
        }
    }
    panic!("reader did not finish");
}

fn read_bytes(bytes: Vec<u8>) -> (Vec<Got>, Option<PortError>) {
    match port(bytes) {
        Ok(mut p) => read_all(&mut p),
        Err(e) => (Vec::new(), Some(e)),
    }
}

fn offset_of(e: &PortError) -> u64 {
    match e {
        PortError::Format { offset, .. } => *offset,
        other => panic!("expected a format error, got {other}"),
    }
}

fn pkt(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|k| (i * 7 + k) as u8).collect()
}

// ---- hand-built files ----

fn u16b(v: u16, be: bool) -> [u8; 2] {
    if be {
        v.to_be_bytes()
    } else {
        v.to_le_bytes()
    }
}

fn u32b(v: u32, be: bool) -> [u8; 4] {
    if be {
        v.to_be_bytes()
    } else {
        v.to_le_bytes()
    }
}

fn pcap_file(be: bool, nanos: bool, link: u32, recs: &[(u32, u32, Vec<u8>, u32)]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend(u32b(if nanos { 0xa1b2_3c4d } else { 0xa1b2_c3d4 }, be));
    f.extend(u16b(2, be));
    f.extend(u16b(4, be));
    f.extend([0; 8]);
    f.extend(u32b(65535, be));
    f.extend(u32b(link, be));
    for (s, frac, data, orig) in recs {
        f.extend(u32b(*s, be));
        f.extend(u32b(*frac, be));
        f.extend(u32b(data.len() as u32, be));
        f.extend(u32b(*orig, be));
        f.extend(data);
    }
    f
}

fn block(be: bool, btype: u32, body: &[u8]) -> Vec<u8> {
    let pad = body.len().div_ceil(4) * 4 - body.len();
    let len = (12 + body.len() + pad) as u32;
    let mut b = Vec::new();
    b.extend(u32b(btype, be));
    b.extend(u32b(len, be));
    b.extend(body);
    b.extend(vec![0u8; pad]);
    b.extend(u32b(len, be));
    b
}

fn shb(be: bool) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend(u32b(0x1a2b_3c4d, be));
    body.extend(u16b(1, be));
    body.extend(u16b(0, be));
    body.extend([0xff; 8]);
    block(be, 0x0a0d_0d0a, &body)
}

fn idb(be: bool, link: u16, snaplen: u32, tsresol: Option<u8>) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend(u16b(link, be));
    body.extend(u16b(0, be));
    body.extend(u32b(snaplen, be));
    // An unknown option first, to check option walking.
    body.extend(u16b(2, be));
    body.extend(u16b(3, be));
    body.extend(b"ab\0\0");
    if let Some(r) = tsresol {
        body.extend(u16b(9, be));
        body.extend(u16b(1, be));
        body.extend([r, 0, 0, 0]);
    }
    body.extend([0; 4]);
    block(be, 1, &body)
}

fn epb(be: bool, iface: u32, ts: u64, data: &[u8], orig: u32) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend(u32b(iface, be));
    body.extend(u32b((ts >> 32) as u32, be));
    body.extend(u32b(ts as u32, be));
    body.extend(u32b(data.len() as u32, be));
    body.extend(u32b(orig, be));
    body.extend(data);
    body.extend(vec![0u8; data.len().div_ceil(4) * 4 - data.len()]);
    block(be, 6, &body)
}

fn pb(be: bool, iface: u16, ts: u64, data: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend(u16b(iface, be));
    body.extend(u16b(0, be));
    body.extend(u32b((ts >> 32) as u32, be));
    body.extend(u32b(ts as u32, be));
    body.extend(u32b(data.len() as u32, be));
    body.extend(u32b(data.len() as u32, be));
    body.extend(data);
    block(be, 2, &body)
}

fn spb(be: bool, data: &[u8], orig: u32) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend(u32b(orig, be));
    body.extend(data);
    block(be, 3, &body)
}

fn small_ng(be: bool) -> Vec<u8> {
    let mut f = shb(be);
    f.extend(block(be, 0x0bad, b"skip me please!!"));
    f.extend(idb(be, 1, 0, Some(9)));
    f.extend(epb(be, 0, 1_700_000_000_123_456_789, &pkt(0, 60), 60));
    f.extend(spb(be, &pkt(1, 61), 61));
    f.extend(pb(be, 0, 5, &pkt(2, 40)));
    f
}

// ---- classic pcap ----

#[test]
fn writer_round_trip_micro_and_nano() {
    for precision in [Precision::Micro, Precision::Nano] {
        let mut w =
            PcapWriter::with_precision(Vec::new(), LinkType::ETHERNET, 0, precision).unwrap();
        let ts = 1_700_000_000_123_456_789u64;
        for i in 0..100 {
            w.write_packet(ts + i as u64, &pkt(i, 60 + i), 60 + i as u32 + 4)
                .unwrap();
        }
        assert_eq!(w.packets(), 100);
        let mut p = port(w.into_inner()).unwrap();
        assert_eq!(p.link_type(), LinkType::ETHERNET);
        assert_eq!(
            p.format(),
            Some(FileFormat::Pcap {
                nanos: precision == Precision::Nano,
                big_endian: cfg!(target_endian = "big"),
            })
        );
        let (got, err) = read_all(&mut p);
        assert!(err.is_none());
        assert_eq!(got.len(), 100);
        for (i, (t, d, wl)) in got.iter().enumerate() {
            let want_ts = match precision {
                Precision::Micro => (ts + i as u64) / 1000 * 1000,
                Precision::Nano => ts + i as u64,
            };
            assert_eq!(*t, want_ts);
            assert_eq!(d, &pkt(i, 60 + i));
            assert_eq!(*wl, 64 + i as u32);
        }
        let s = p.stats();
        assert_eq!(s.rx_packets, 100);
        assert_eq!(s.rx_bytes, (0..100u64).map(|i| 64 + i).sum::<u64>());
        assert_eq!(p.rx(&mut Batch::new()).unwrap(), 0);
    }
}

#[test]
fn writer_truncates_to_snaplen() {
    let mut w = PcapWriter::new(Vec::new(), LinkType::RAW, 50).unwrap();
    w.write_packet(0, &pkt(0, 80), 80).unwrap();
    let (got, err) = read_bytes(w.into_inner());
    assert!(err.is_none());
    assert_eq!(got, vec![(0, pkt(0, 50), 80)]);
}

#[test]
fn big_endian_and_nanosecond_pcap() {
    for be in [false, true] {
        for nanos in [false, true] {
            let recs = vec![(10, 20, pkt(0, 42), 42), (11, 999_999, pkt(1, 100), 1500)];
            let f = pcap_file(be, nanos, 113, &recs);
            let mut p = port(f).unwrap();
            assert_eq!(p.link_type(), LinkType::LINUX_SLL);
            assert_eq!(
                p.format(),
                Some(FileFormat::Pcap {
                    nanos,
                    big_endian: be
                })
            );
            let (got, err) = read_all(&mut p);
            assert!(err.is_none(), "{err:?}");
            let unit = if nanos { 1 } else { 1000 };
            assert_eq!(
                got,
                vec![
                    (10_000_000_000 + 20 * unit, pkt(0, 42), 42),
                    (11_000_000_000 + 999_999 * unit, pkt(1, 100), 1500),
                ]
            );
        }
    }
}

#[test]
fn link_types_pass_through() {
    for lt in [1u32, 101, 228, 229, 113, 276, 0, 147, 0x1234] {
        let p = port(pcap_file(false, false, lt, &[])).unwrap();
        assert_eq!(p.link_type(), LinkType(lt));
    }
}

#[test]
fn long_packets_are_delivered_whole() {
    // Jumbo frames and a 70 000 B record among small ones; more long records than the pool
    // has big frames, held by the reader (a record waits in the port, never cut or dropped).
    let sizes = [60, 3000, 9014, 16_000, 70_000, 1514, 262_144];
    let mut recs = Vec::new();
    for i in 0..300 {
        let n = sizes[i % sizes.len()];
        recs.push((1, i as u32, pkt(i, n), n as u32));
    }
    let f = pcap_file(false, false, 1, &recs);
    let mut p = port(f).unwrap();
    assert!(p.pool().unwrap().max_packet() < 3000);
    let mut b = Batch::new();
    let mut kept: Vec<Batch> = Vec::new();
    let mut got = Vec::new();
    // Hold every batch until the big frames run out, then let go: the reader waits, then
    // goes on.
    for _ in 0..100_000 {
        if p.is_finished() {
            break;
        }
        let n = p.rx(&mut b).unwrap();
        for x in b.iter() {
            got.push((x.data.to_vec(), x.desc.wire_len));
        }
        if n == 0 {
            kept.clear();
        } else {
            kept.push(std::mem::take(&mut b));
        }
    }
    assert!(p.is_finished());
    assert_eq!(got.len(), 300);
    for (i, (d, w)) in got.iter().enumerate() {
        let n = sizes[i % sizes.len()];
        assert_eq!(*w as usize, n);
        assert!(
            d == &pkt(i, n),
            "record {i} of {n} B not whole ({} B)",
            d.len()
        );
    }
    assert_eq!(p.stats().rx_drops.total(), 0);
}

#[test]
fn good_packets_come_before_the_error() {
    let recs: Vec<_> = (0..3).map(|i| (1, 0, pkt(i, 60), 60)).collect();
    let mut f = pcap_file(false, false, 1, &recs);
    let bad_at = f.len() as u64;
    f.extend(u32b(1, false));
    f.extend(u32b(0, false));
    f.extend(u32b(300_000, false)); // absurd caplen
    f.extend(u32b(60, false));
    f.extend([0u8; 64]);
    let mut p = port(f).unwrap();
    let mut b = Batch::new();
    assert_eq!(p.rx(&mut b).unwrap(), 3);
    assert!(!p.is_finished());
    let e = p.rx(&mut b).unwrap_err();
    assert_eq!(offset_of(&e), bad_at);
    let msg = e.to_string();
    assert!(msg.contains("mem.pcap") && msg.contains("offset") && msg.contains("absurd"));
    assert!(p.is_finished());
    assert_eq!(p.rx(&mut b).unwrap(), 0);
}

#[test]
fn bad_headers_are_errors_at_offset_zero() {
    for f in [
        vec![],
        vec![0xd4, 0xc3],
        vec![0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0],
        b"GIF89a-this-is-not-a-capture-file".to_vec(),
    ] {
        let e = port(f).err().expect("error");
        assert_eq!(offset_of(&e), 0, "{e}");
    }
    let mut f = pcap_file(false, false, 1, &[]);
    f[4] = 1; // version 1.4
    assert_eq!(offset_of(&port(f).err().unwrap()), 4);
}

#[test]
fn every_prefix_reads_some_packets_then_errors_or_ends_cleanly() {
    let recs: Vec<_> = (0..4).map(|i| (i as u32, 0, pkt(i, 20 + i), 30)).collect();
    let files = [
        pcap_file(false, false, 1, &recs),
        pcap_file(true, true, 1, &recs),
        small_ng(false),
        small_ng(true),
    ];
    for full in files {
        let (all, err) = read_bytes(full.clone());
        assert!(err.is_none());
        let mut clean_ends = 0;
        for cut in 0..full.len() {
            let (got, err) = read_bytes(full[..cut].to_vec());
            assert!(got.len() <= all.len());
            assert_eq!(got[..], all[..got.len()], "cut {cut}");
            match err {
                Some(e) => assert!(offset_of(&e) <= cut as u64, "cut {cut}: {e}"),
                None => clean_ends += 1,
            }
        }
        // Clean ends are exactly the record boundaries (pcapng also ends cleanly after blocks
        // that carry no packet).
        assert!(clean_ends >= all.len(), "{clean_ends}");
    }
}

// ---- pcapng ----

#[test]
fn pcapng_both_byte_orders() {
    for be in [false, true] {
        let mut p = port(small_ng(be)).unwrap();
        assert_eq!(p.format(), Some(FileFormat::PcapNg { big_endian: be }));
        assert_eq!(p.link_type(), LinkType::ETHERNET);
        let (got, err) = read_all(&mut p);
        assert!(err.is_none(), "{err:?}");
        assert_eq!(
            got,
            vec![
                (1_700_000_000_123_456_789, pkt(0, 60), 60),
                (0, pkt(1, 61), 61),
                (5, pkt(2, 40), 40),
            ]
        );
    }
}

#[test]
fn pcapng_timestamp_resolutions() {
    for (resol, units, want) in [
        (None, 1_500_000u64, 1_500_000_000u64),
        (Some(6), 1_500_000, 1_500_000_000),
        (Some(3), 1_500, 1_500_000_000),
        (Some(12), 1_500_000_000_000, 1_500_000_000),
        (Some(0x80 | 10), 1024 * 3 + 512, 3_500_000_000),
    ] {
        let mut f = shb(false);
        f.extend(idb(false, 101, 65535, resol));
        f.extend(epb(false, 0, units, &pkt(0, 20), 20));
        let (got, err) = read_bytes(f);
        assert!(err.is_none());
        assert_eq!(got[0].0, want, "{resol:?}");
    }
}

#[test]
fn pcapng_other_link_types_are_dropped_as_malformed() {
    let mut f = shb(false);
    f.extend(idb(false, 1, 0, None));
    f.extend(idb(false, 101, 0, None));
    f.extend(epb(false, 0, 1, &pkt(0, 60), 60));
    f.extend(epb(false, 1, 2, &pkt(1, 30), 30));
    f.extend(epb(false, 0, 3, &pkt(2, 60), 60));
    // A new section (big-endian) resets the interfaces.
    f.extend(shb(true));
    f.extend(idb(true, 1, 0, None));
    f.extend(epb(true, 0, 4, &pkt(3, 60), 60));
    let mut p = port(f).unwrap();
    let (got, err) = read_all(&mut p);
    assert!(err.is_none(), "{err:?}");
    assert_eq!(got.len(), 3);
    assert_eq!(got[2].1, pkt(3, 60));
    let s = p.stats();
    assert_eq!(s.rx_packets, 3);
    assert_eq!(s.rx_drops.get(DropReason::Malformed), 1);
}

#[test]
fn pcapng_corrupt_blocks_name_their_offset() {
    let base = {
        let mut f = shb(false);
        f.extend(idb(false, 1, 0, None));
        f
    };
    let at = base.len() as u64;
    let with = |blk: Vec<u8>| {
        let mut f = base.clone();
        f.extend(epb(false, 0, 1, &pkt(0, 60), 60));
        f.extend(blk);
        f
    };
    let pkt_len = epb(false, 0, 1, &pkt(0, 60), 60).len() as u64;
    let mut cases = Vec::new();
    // length not a multiple of 4
    let mut b = block(false, 6, &[0u8; 24]);
    b[4..8].copy_from_slice(&38u32.to_le_bytes());
    cases.push(b);
    // length below 12
    let mut b = block(false, 0x99, &[]);
    b[4..8].copy_from_slice(&8u32.to_le_bytes());
    cases.push(b);
    // unknown block running past the end of the file
    let mut b = block(false, 0x99, &[0; 8]);
    b[4..8].copy_from_slice(&4000u32.to_le_bytes());
    cases.push(b);
    // huge packet block
    let mut b = block(false, 6, &[0; 8]);
    b[4..8].copy_from_slice(&0xffff_fff0u32.to_le_bytes());
    cases.push(b);
    // caplen larger than the block
    let mut b = epb(false, 0, 1, &pkt(0, 60), 60);
    b[20..24].copy_from_slice(&200u32.to_le_bytes());
    cases.push(b);
    // unknown interface
    cases.push(epb(false, 7, 1, &pkt(0, 60), 60));
    // trailing length mismatch
    let mut b = epb(false, 0, 1, &pkt(0, 60), 60);
    let n = b.len();
    b[n - 4] ^= 4;
    cases.push(b);
    for (i, c) in cases.into_iter().enumerate() {
        let (got, err) = read_bytes(with(c));
        assert_eq!(got.len(), 1, "case {i}");
        let e = err.unwrap_or_else(|| panic!("case {i}: no error"));
        assert_eq!(offset_of(&e), at + pkt_len, "case {i}: {e}");
    }
    // Bad byte-order magic, and a packet before any interface.
    let mut f = shb(false);
    f[8] = 0;
    assert_eq!(offset_of(&port(f).err().unwrap()), 8);
    let mut f = shb(false);
    let at = f.len() as u64;
    f.extend(epb(false, 0, 1, &pkt(0, 60), 60));
    assert_eq!(offset_of(&port(f).err().unwrap()), at);
}

#[test]
fn pcapng_without_interfaces_is_empty() {
    let mut p = port(shb(true)).unwrap();
    assert!(p.is_finished());
    assert_eq!(p.rx(&mut Batch::new()).unwrap(), 0);
}

#[test]
fn large_unknown_blocks_are_skipped_unbuffered() {
    let mut f = shb(false);
    f.extend(idb(false, 1, 0, None));
    f.extend(block(false, 0x77, &vec![1u8; 5 << 20]));
    f.extend(epb(false, 0, 9, &pkt(0, 60), 60));
    let (got, err) = read_bytes(f);
    assert!(err.is_none(), "{err:?}");
    assert_eq!(got, vec![(9000, pkt(0, 60), 60)]);
}

#[test]
fn many_packets_span_buffer_refills() {
    let mut w = PcapWriter::new(Vec::new(), LinkType::ETHERNET, 0).unwrap();
    let n = 20_000;
    for i in 0..n {
        w.write_packet(
            i as u64 * 1000,
            &pkt(i, 64 + i % 1400),
            64 + (i % 1400) as u32,
        )
        .unwrap();
    }
    let mut p = port(w.into_inner()).unwrap();
    let mut b = Batch::new();
    let mut i = 0;
    while !p.is_finished() {
        p.rx(&mut b).unwrap();
        for x in b.iter() {
            assert_eq!(x.data, &pkt(i, 64 + i % 1400)[..], "packet {i}");
            assert_eq!(x.desc.ts, i as u64 * 1000);
            i += 1;
        }
        b.clear();
    }
    assert_eq!(i, n);
}

#[test]
fn open_reads_existing_files_and_never_creates_one() {
    let dir = std::env::temp_dir().join(format!("linerate-pcap-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("out.pcap");
    let path = path.to_str().unwrap();
    let _ = std::fs::remove_file(path);
    // A missing input is an error, and nothing is created (not even through a dangling link).
    let e = PcapPort::open(path, &small()).err().expect("missing input");
    assert!(
        matches!(&e, PortError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound),
        "{e}"
    );
    let link = dir.join("dangling.pcap");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(path, &link).unwrap();
    assert!(PcapPort::open(link.to_str().unwrap(), &small()).is_err());
    assert!(!std::path::Path::new(path).exists());
    {
        let mut w = PcapPort::create_with(path, LinkType::ETHERNET, 65535).unwrap();
        assert!(w.is_writer());
        assert_eq!(w.link_type(), LinkType::ETHERNET);
        let mut src = port(pcap_file(false, false, 1, &[(1, 2, pkt(0, 70), 70)])).unwrap();
        let mut b = Batch::new();
        src.rx(&mut b).unwrap();
        assert_eq!(w.tx(&mut b).unwrap(), 1);
        assert!(b.is_empty());
        assert_eq!(w.packets_written(), Some(0));
        w.flush().unwrap();
        assert_eq!(w.packets_written(), Some(1));
        let s = w.stats();
        assert_eq!((s.tx_packets, s.tx_bytes), (1, 70));
        assert!(w.rx(&mut b).is_ok_and(|n| n == 0));
    }
    let mut r = PcapPort::open(path, &small()).unwrap();
    assert!(!r.is_writer());
    let (got, err) = read_all(&mut r);
    assert!(err.is_none());
    assert_eq!(got, vec![(1_000_002_000, pkt(0, 70), 70)]);
    let mut b = Batch::new();
    assert!(matches!(r.tx(&mut b), Err(PortError::Unsupported { .. })));
    let mut c = PcapPort::create(path, LinkType::RAW).unwrap();
    c.flush().unwrap();
    drop(c);
    let r = PcapPort::open(path, &small()).unwrap();
    assert_eq!(r.link_type(), LinkType::RAW);
    // The input of a run is never written.
    let mut inputs = crate::port::file::Inputs::default();
    inputs.add_path(path);
    let e = PcapPort::create_protected(link.to_str().unwrap(), LinkType::RAW, 0, &inputs)
        .err()
        .expect("refused");
    assert!(e.to_string().contains("refusing to overwrite"), "{e}");
    assert!(std::fs::metadata(path).unwrap().len() > 0);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn records_larger_than_the_initial_buffer_are_read_whole() {
    let big = pkt(5, INITIAL_BUF * 3);
    let f = pcap_file(
        true,
        false,
        1,
        &[(1, 0, pkt(0, 60), 60), (2, 0, big.clone(), 1)],
    );
    let mut r = PcapReader::new(Cursor::new(f), "big").unwrap();
    assert_eq!(r.next_packet().unwrap().unwrap().data, &pkt(0, 60)[..]);
    let rec = r.next_packet().unwrap().unwrap();
    assert!(rec.data == &big[..]);
    assert_eq!(rec.offset, 24 + 16 + 60);
    assert!(r.next_packet().unwrap().is_none());
    assert!(r.is_done());

    let mut f = shb(false);
    f.extend(idb(false, 1, 0, None));
    f.extend(epb(false, 0, 1, &big, big.len() as u32));
    let mut r = PcapReader::new(Cursor::new(f), "big").unwrap();
    assert!(r.next_packet().unwrap().unwrap().data == &big[..]);
    assert!(r.next_packet().unwrap().is_none());
}

#[test]
fn many_pcapng_blocks_span_buffer_refills() {
    for be in [false, true] {
        let mut f = shb(be);
        f.extend(idb(be, 1, 0, Some(9)));
        let n = 12_000;
        for i in 0..n {
            if i % 1000 == 0 {
                f.extend(block(be, 0x55, &pkt(i, 333)));
            }
            f.extend(epb(be, 0, i as u64, &pkt(i, 64 + i % 1400), 9000));
        }
        let mut p = port(f).unwrap();
        let mut b = Batch::new();
        let mut i = 0;
        while !p.is_finished() {
            p.rx(&mut b).unwrap();
            for x in b.iter() {
                assert!(x.data == &pkt(i, 64 + i % 1400)[..], "packet {i}");
                assert_eq!((x.desc.ts, x.desc.wire_len), (i as u64, 9000));
                i += 1;
            }
            b.clear();
        }
        assert_eq!(i, n);
    }
}

/// A source that gives at most `chunk` bytes a call and says WouldBlock every other call, as a
/// FIFO with a slow writer does.
struct Trickle {
    data: Vec<u8>,
    at: usize,
    chunk: usize,
    turn: bool,
}

impl Read for Trickle {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.turn = !self.turn;
        if self.turn && self.at < self.data.len() {
            return Err(std::io::ErrorKind::WouldBlock.into());
        }
        let n = self.chunk.min(buf.len()).min(self.data.len() - self.at);
        buf[..n].copy_from_slice(&self.data[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

#[test]
fn a_source_with_nothing_now_is_waited_for_not_cut() {
    let mut big_ng = shb(false);
    big_ng.extend(idb(false, 1, 0, None));
    big_ng.extend(block(false, 0x77, &vec![1u8; 200_000]));
    big_ng.extend(epb(false, 0, 9, &pkt(0, 60), 60));
    let files = [
        pcap_file(
            false,
            false,
            1,
            &[(1, 2, pkt(0, 70), 70), (3, 4, pkt(1, 1500), 1500)],
        ),
        small_ng(false),
        small_ng(true),
        big_ng,
    ];
    for f in files {
        let (want, err) = read_bytes(f.clone());
        assert!(err.is_none());
        for chunk in [1, 7, 4096] {
            let src = Trickle {
                data: f.clone(),
                at: 0,
                chunk,
                turn: false,
            };
            let mut p = PcapPort::from_reader("trickle", Box::new(src), &small()).unwrap();
            let mut got = Vec::new();
            let mut b = Batch::new();
            let mut idle = 0;
            while !p.is_finished() {
                let n = p.rx(&mut b).unwrap();
                idle = if n == 0 { idle + 1 } else { 0 };
                assert!(idle < 1_000_000, "stuck");
                for x in b.iter() {
                    got.push((x.desc.ts, x.data.to_vec(), x.desc.wire_len));
                }
                b.clear();
            }
            assert_eq!(got, want, "chunk {chunk}");
        }
    }
}

// ---- interfaces and pcapng output ----

/// (interface, timestamp) of every packet read.
fn ports_of(p: &mut PcapPort) -> Vec<(u16, u64)> {
    let mut out = Vec::new();
    let mut b = Batch::new();
    while !p.is_finished() {
        p.rx(&mut b).unwrap();
        out.extend(b.descs().iter().map(|d| (d.port, d.ts)));
        b.clear();
    }
    out
}

#[test]
fn pcapng_packets_keep_their_interface_across_sections() {
    let mut f = shb(false);
    f.extend(idb(false, 1, 0, None)); // named "ab" (see idb)
    f.extend(idb(false, 101, 0, None));
    f.extend(idb(false, 1, 0, None));
    f.extend(epb(false, 2, 1, &pkt(0, 60), 60));
    f.extend(epb(false, 0, 2, &pkt(1, 60), 60));
    f.extend(epb(false, 1, 3, &pkt(2, 30), 30)); // other link type: dropped
    f.extend(shb(true));
    f.extend(idb(true, 1, 0, None));
    f.extend(epb(true, 0, 4, &pkt(3, 60), 60));
    let mut p = port(f).unwrap();
    assert_eq!(p.interfaces().len(), 3, "those before the first packet");
    assert_eq!(
        ports_of(&mut p),
        vec![(2, 1000), (0, 2000), (3, 4000)],
        "µs"
    );
    let ifs = p.interfaces();
    let names: Vec<&str> = ifs.iter().map(|i| i.name.as_str()).collect();
    assert_eq!(names, vec!["ab", "ab", "ab", "ab"]);
    assert_eq!(ifs[1].link, LinkType::RAW);
    let st = p.interface_stats();
    let rx: Vec<u64> = st.iter().map(|s| s.rx_packets).collect();
    assert_eq!(rx, vec![1, 0, 1, 1]);
    assert_eq!(st[1].rx_drops.get(DropReason::Malformed), 1);
    assert_eq!(p.stats().rx_packets, 3);
}

#[test]
fn classic_pcap_is_one_interface_named_after_the_port() {
    let mut p = port(pcap_file(false, false, 1, &[(1, 2, pkt(0, 70), 70)])).unwrap();
    assert_eq!(
        p.interfaces(),
        vec![Interface::new("pcap:mem.pcap", LinkType::ETHERNET).with_snaplen(65535)]
    );
    assert_eq!(ports_of(&mut p), vec![(0, 1_000_002_000)]);
    assert_eq!(p.interface_stats()[0].rx_packets, 1);
}

#[test]
fn pcapng_is_written_by_name_and_ends_with_statistics() {
    let dir = std::env::temp_dir().join(format!("linerate-pcapng-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    assert_eq!(WriteFormat::for_path("a.PcapNG"), WriteFormat::PcapNg);
    assert_eq!(WriteFormat::for_path("a.pcap"), WriteFormat::Pcap);
    assert_eq!(WriteFormat::for_path("-"), WriteFormat::Pcap);
    let path = dir.join("out.pcapng");
    let path = path.to_str().unwrap();
    let mut src = port(pcap_file(
        false,
        true,
        1,
        &[(1, 2, pkt(0, 70), 70), (3, 4, pkt(1, 1500), 9000)],
    ))
    .unwrap();
    {
        let mut w =
            PcapPort::create_protected(path, LinkType::ETHERNET, 0, &Default::default()).unwrap();
        assert_eq!(w.write_format(), Some(WriteFormat::PcapNg));
        w.describe(&src.interfaces()).unwrap();
        let mut b = Batch::new();
        src.rx(&mut b).unwrap();
        assert_eq!(w.tx(&mut b).unwrap(), 2);
        assert_eq!(w.packets_by_interface(), vec![2]);
        // Dropped without finish: the writer's own statistics end the file.
    }
    let bytes = std::fs::read(path).unwrap();
    assert!(bytes.starts_with(&0x0a0d_0d0au32.to_le_bytes()));
    // The last block is an interface statistics block.
    let n = bytes.len();
    let last_len = u32::from_le_bytes(bytes[n - 4..].try_into().unwrap()) as usize;
    assert_eq!(
        u32::from_le_bytes(bytes[n - last_len..n - last_len + 4].try_into().unwrap()),
        5
    );
    let mut r = PcapPort::open(path, &small()).unwrap();
    assert_eq!(r.format(), Some(FileFormat::PcapNg { big_endian: false }));
    assert_eq!(r.interfaces()[0].name, "pcap:mem.pcap");
    let (got, err) = read_all(&mut r);
    assert!(err.is_none());
    assert_eq!(
        got,
        vec![
            (1_000_000_002, pkt(0, 70), 70),
            (3_000_000_004, pkt(1, 1500), 9000)
        ]
    );
    // pcapng: in a URI, pcapng whatever the name.
    let other = dir.join("other.cap");
    let mut o = crate::open_tx(
        &format!("pcapng:{}", other.display()),
        &PortOptions::default(),
    )
    .unwrap();
    o.finish(&[]).unwrap();
    drop(o);
    let r = PcapPort::open(other.to_str().unwrap(), &small()).unwrap();
    assert_eq!(r.format(), Some(FileFormat::PcapNg { big_endian: false }));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A record as the writer of the previous release wrote it: a 16-byte header and the data, two
/// parts of one `write_vectored` call.
fn two_part_record(ts: u64, data: &[u8], wire_len: u32, cut: usize, nano: bool) -> Vec<u8> {
    let cap = data.len().min(cut);
    let wire = wire_len.max(data.len().min(u32::MAX as usize) as u32);
    let sec = u32::try_from(ts / 1_000_000_000).unwrap_or(u32::MAX);
    let sub = (ts % 1_000_000_000) as u32;
    let frac = if nano { sub } else { sub / 1000 };
    let mut h = [0u8; 16];
    h[0..4].copy_from_slice(&sec.to_ne_bytes());
    h[4..8].copy_from_slice(&frac.to_ne_bytes());
    h[8..12].copy_from_slice(&(cap as u32).to_ne_bytes());
    h[12..16].copy_from_slice(&wire.to_ne_bytes());
    [&h[..], &data[..cap]].concat()
}

#[test]
fn records_built_in_place_are_byte_identical_to_the_two_part_writer() {
    use crate::port::file::{create, RecordFile};
    let d = std::env::temp_dir().join(format!("linerate-pcap-same-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let p = d.join("s.pcap");
    for (precision, snaplen, whole, buf) in [
        (Precision::Micro, 0u32, false, 4096usize),
        (Precision::Nano, 100, false, 1 << 20),
        (Precision::Micro, 64, true, 1),
    ] {
        let f = create(p.to_str().unwrap(), &Default::default()).unwrap();
        let out = RecordFile::new(f, buf);
        let mut w =
            PcapWriter::with_precision(out, LinkType::ETHERNET, snaplen, precision).unwrap();
        if whole {
            w.keep_whole();
        }
        let cut = match (whole, snaplen) {
            (true, _) => usize::MAX,
            (false, 0) => DEFAULT_SNAPLEN as usize,
            (false, s) => s as usize,
        };
        let nano = precision == Precision::Nano;
        let mut want = Vec::new();
        for i in 0..3000usize {
            let len = match i % 7 {
                0 => 9014,
                1 => 0,
                _ => 14 + (i * 37) % 1500,
            };
            let data: Vec<u8> = (0..len).map(|k| (i * 13 + k) as u8).collect();
            let wire = [0u32, 60, 65_535, u32::MAX][i % 4];
            let ts = u64::MAX - i as u64 * 999_999_937;
            w.write_packet(ts, &data, wire).unwrap();
            want.extend_from_slice(&two_part_record(ts, &data, wire, cut, nano));
        }
        w.flush().unwrap();
        drop(w);
        let got = std::fs::read(&p).unwrap();
        assert!(
            got[24..] == want[..],
            "{precision:?} {snaplen}: the records differ"
        );
    }
    std::fs::remove_dir_all(&d).unwrap();
}

/// Every record of `bytes` as the reader's general path gives it (`next_packet` only), and the
/// error that ended it.
fn read_slow(bytes: Vec<u8>) -> (Vec<Got>, Option<String>) {
    let mut r = PcapReader::new(Cursor::new(bytes), "mem.pcap").unwrap();
    let mut out = Vec::new();
    loop {
        match r.next_packet() {
            Ok(Some(rec)) => out.push((
                rec.ts,
                rec.data.to_vec(),
                rec.wire_len.max(rec.data.len() as u32),
            )),
            Ok(None) => return (out, None),
            Err(e) => return (out, Some(e.to_string())),
        }
    }
}

#[test]
fn buffered_records_read_as_the_general_path_reads_them() {
    // Lengths from 0 to 3000 (regular frames, big frames, the copy's 16/32/64-byte cases and
    // memcpy), over many buffer refills, in both byte orders and both precisions, the last
    // record cut short: the port's fast path for records already in the buffer gives exactly
    // the packets, times, lengths and error of the reader's general path.
    for (be, nanos) in [(false, false), (true, true), (false, true), (true, false)] {
        let mut seed = 0x2545_f491_u32 ^ u32::from(be) ^ (u32::from(nanos) << 1);
        let recs: Vec<_> = (0..30_000usize)
            .map(|i| {
                seed ^= seed << 13;
                seed ^= seed >> 17;
                seed ^= seed << 5;
                let len = match seed % 10 {
                    0 => (seed >> 8) as usize % 3001,
                    1..=3 => (seed >> 8) as usize % 130,
                    _ => 60 + (seed >> 8) as usize % 5,
                };
                let frac = (seed >> 4) % if nanos { 1_000_000_000 } else { 1_000_000 };
                (i as u32, frac, pkt(i, len), len as u32 + (seed & 3))
            })
            .collect();
        let mut file = pcap_file(be, nanos, 1, &recs);
        file.truncate(file.len() - 7);
        let (want, want_err) = read_slow(file.clone());
        let (got, got_err) = read_bytes(file);
        assert_eq!(want.len(), recs.len() - 1, "be {be} nanos {nanos}");
        assert_eq!(got.len(), want.len(), "be {be} nanos {nanos}");
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g, w, "packet {i}, be {be} nanos {nanos}");
        }
        assert_eq!(got_err.map(|e| e.to_string()), want_err);
    }
}

// ---- reading in place ----

/// A file read in place gives the records the copying reader gives (a jumbo one too, and the
/// error at the cut-short last record), as read-only descriptors; a file someone else could
/// shorten, a stream and pcapng are read by copying.
#[test]
fn read_in_place_only_files_nobody_else_can_shorten() {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("lr-inplace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let recs: Vec<_> = (0..300u32)
        .map(|i| {
            (
                i,
                i * 3,
                pkt(i as usize, if i == 7 { 9000 } else { 60 + i as usize }),
                1514,
            )
        })
        .collect();
    let mut bytes = pcap_file(false, false, 1, &recs);
    bytes.truncate(bytes.len() - 10); // the last record is cut short
    let f = dir.join("a.pcap");
    std::fs::write(&f, &bytes).unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
    let path = f.to_str().unwrap();
    let (want, want_err) = read_bytes(bytes.clone());
    assert_eq!(want.len(), 299);
    let mut p = PcapPort::open(path, &small()).unwrap();
    assert!(p.read_in_place(), "a file of ours, 0644");
    assert!(!p.read_in_place(), "once");
    let mut b = Batch::new();
    assert_eq!(p.rx(&mut b).unwrap(), 64);
    assert!(b.descs().iter().all(|d| d.flags & Desc::F_SHARED != 0));
    assert!(
        b.data_mut(0).is_empty(),
        "a mapped record cannot be written"
    );
    drop(b);
    let mut p = PcapPort::open(path, &small()).unwrap();
    assert!(p.read_in_place());
    let (got, err) = read_all(&mut p);
    assert!(got == want, "the same records, read in place");
    assert_eq!(offset_of(&err.unwrap()), offset_of(&want_err.unwrap()));
    assert_eq!(p.stats().rx_packets, 299);

    for mode in [0o664, 0o646, 0o666] {
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(mode)).unwrap();
        let mut p = PcapPort::open(path, &small()).unwrap();
        assert!(!p.read_in_place(), "mode {mode:o}: others may shorten it");
        assert!(read_all(&mut p).0 == want, "read by copying");
    }
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
    if crate::sys::process::euid() == 0 {
        // Another user's file.
        std::os::unix::fs::chown(&f, Some(65534), None).unwrap();
        let mut p = PcapPort::open(path, &small()).unwrap();
        assert!(!p.read_in_place(), "another user's file");
        assert!(read_all(&mut p).0 == want);
    }
    let mut s = port(bytes).unwrap();
    assert!(!s.read_in_place(), "a stream is not mapped");
    let ng = dir.join("b.pcapng");
    std::fs::write(&ng, small_ng(false)).unwrap();
    std::fs::set_permissions(&ng, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut p = PcapPort::open(ng.to_str().unwrap(), &small()).unwrap();
    assert!(!p.read_in_place(), "pcapng is read by copying");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A pcapng packet's direction (`epb_flags` bits 0-1: 1 inbound, 2 outbound) is carried in its
/// descriptor's flags, so a pcapng written from it marks it again; none: direction unknown.
#[test]
fn pcapng_epb_flags_direction_is_carried() {
    for be in [false, true] {
        let with_flags = |flags: Option<u32>| {
            let data = pkt(0, 61);
            let mut body = Vec::new();
            body.extend(u32b(0, be));
            body.extend(u32b(0, be));
            body.extend(u32b(1, be));
            body.extend(u32b(data.len() as u32, be));
            body.extend(u32b(data.len() as u32, be));
            body.extend(&data);
            body.extend(vec![0u8; data.len().div_ceil(4) * 4 - data.len()]);
            if let Some(f) = flags {
                // A comment first (code 1, 5 bytes, padded), then epb_flags, then the end.
                body.extend(u16b(1, be));
                body.extend(u16b(5, be));
                body.extend(b"hello\0\0\0");
                body.extend(u16b(2, be));
                body.extend(u16b(4, be));
                body.extend(u32b(f, be));
                body.extend([0u8; 4]);
            }
            block(be, 6, &body)
        };
        let mut f = shb(be);
        f.extend(idb(be, 1, 0, None));
        f.extend(with_flags(Some(1)));
        f.extend(with_flags(Some(2)));
        f.extend(with_flags(None));
        f.extend(with_flags(Some(0)));
        let mut p = port(f).unwrap();
        let mut b = Batch::new();
        let mut dirs = Vec::new();
        for _ in 0..100 {
            if p.is_finished() {
                break;
            }
            p.rx(&mut b).unwrap();
            dirs.extend(b.iter().map(|x| x.desc.direction()));
            b.clear();
        }
        assert_eq!(dirs, vec![Some("in"), Some("out"), None, None], "be {be}");
    }
}

// ---- writing from the mapping ----

/// A file read in place and written through a [`RecordFile`] (records that are already what
/// the writer would write go out as runs straight from the mapping) gives the bytes the
/// copying writer gives, whatever the input: foreign byte order, nanoseconds, a microsecond
/// field past a second, `orig_len` below the captured length, records longer than the
/// snapshot length, packets dropped between kept ones, a small output buffer.
#[test]
fn records_written_from_the_mapping_are_the_copying_writers_bytes() {
    use crate::port::file::RecordFile;
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("lr-runs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut rnd = move |m: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % m
    };
    let mut from_mapping = 0;
    for case in 0..32u64 {
        let be = case % 4 == 3;
        let nanos = case % 5 == 4;
        let n = 20 + rnd(500) as usize;
        let recs: Vec<_> = (0..n)
            .map(|i| {
                let len = if rnd(40) == 0 {
                    1000 + rnd(9000) as usize
                } else {
                    1 + rnd(200) as usize
                };
                let frac = match rnd(60) {
                    0 => 1_000_000 + rnd(5_000_000) as u32,
                    _ if nanos => rnd(1_000_000_000) as u32,
                    _ => rnd(1_000_000) as u32,
                };
                let orig = match rnd(30) {
                    0 => len as u32 / 2,
                    1 => len as u32,
                    _ => len as u32 + rnd(100) as u32,
                };
                (1_600_000_000 + i as u32, frac, pkt(i, len), orig)
            })
            .collect();
        let f = dir.join(format!("in{case}.pcap"));
        std::fs::write(&f, pcap_file(be, nanos, 1, &recs)).unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        let keep_every = 1 + rnd(4);
        let cut = [0, 0, 128, 5000][rnd(4) as usize];
        let cap = [256, 4096, 1 << 20][rnd(3) as usize];
        let out = dir.join(format!("out{case}.pcap"));
        let mut p = PcapPort::open(f.to_str().unwrap(), &small()).unwrap();
        assert!(p.read_in_place());
        let file = std::fs::File::create(&out).unwrap();
        let mut w = PcapWriter::new(RecordFile::new(file, cap), LinkType(1), cut).unwrap();
        let mut want = PcapWriter::new(Vec::new(), LinkType(1), cut).unwrap();
        let mut b = Batch::new();
        let mut k = 0u64;
        while !p.is_finished() {
            p.rx(&mut b).unwrap();
            b.retain(|_| {
                k += 1;
                !k.is_multiple_of(keep_every) || rnd(3) == 0
            });
            assert_eq!(w.write_batch(&b).unwrap(), b.len());
            want.write_batch(&b).unwrap();
            b.clear();
        }
        w.flush().unwrap();
        assert_eq!(w.packets(), want.packets());
        assert_eq!(w.bytes(), want.bytes());
        assert_eq!(
            w.get_ref().records_written(),
            w.packets() + 1,
            "case {case}"
        );
        let got = std::fs::read(&out).unwrap();
        assert!(got == *want.get_ref(), "case {case}: the same bytes");
        if !be && !nanos {
            from_mapping += 1;
        }
    }
    assert!(from_mapping > 0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// How many whole records a cut-short write of a run left: those that end inside it.
#[test]
fn whole_records_of_a_run_cut_short() {
    let recs: Vec<_> = (0..5u32)
        .map(|i| (i, 0, pkt(i as usize, 10 + i as usize), 100))
        .collect();
    let f = pcap_file(cfg!(target_endian = "big"), false, 1, &recs);
    let body = &f[24..];
    assert_eq!(writer::whole_records(body), (5, body.len()));
    assert_eq!(
        writer::whole_records(&body[..body.len() - 1]),
        (4, body.len() - 30)
    );
    assert_eq!(writer::whole_records(&body[..26]), (1, 26));
    assert_eq!(writer::whole_records(&body[..25]), (0, 0));
    assert_eq!(writer::whole_records(&[]), (0, 0));
}

/// A run that cannot be written (a full disk) is an error, and what follows too; nothing is
/// counted as written.
#[test]
fn a_failed_write_of_a_run_is_an_error() {
    use crate::port::file::RecordFile;
    use std::os::unix::fs::PermissionsExt;
    let Ok(full) = std::fs::OpenOptions::new().write(true).open("/dev/full") else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("lr-runs-full-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let recs: Vec<_> = (0..100u32)
        .map(|i| (i, 0, pkt(i as usize, 60), 60))
        .collect();
    let f = dir.join("in.pcap");
    std::fs::write(&f, pcap_file(cfg!(target_endian = "big"), false, 1, &recs)).unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut p = PcapPort::open(f.to_str().unwrap(), &small()).unwrap();
    assert!(p.read_in_place());
    let mut w = PcapWriter::new(RecordFile::new(full, 1 << 20), LinkType(1), 0).unwrap();
    let mut b = Batch::new();
    p.rx(&mut b).unwrap();
    // The file header goes out before the run, and fails.
    assert!(w.write_batch(&b).and_then(|_| w.flush()).is_err());
    assert!(w.write_batch(&b).is_err(), "after a failed write");
    assert!(w.flush().is_err());
    assert_eq!(w.get_ref().records_written(), 0);
    let _ = std::fs::remove_dir_all(&dir);
}

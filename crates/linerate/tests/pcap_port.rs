//! `pcap:FILE` through the generic port API: write with one port, read with another, and check
//! that tcpdump (when installed) reads what we write.
#![deny(unsafe_code)]

use linerate::mem::{Batch, Desc};
use linerate::port::pcap::{PcapPort, PcapWriter, Precision};
use linerate::port::{LinkType, Port, PortOptions};
use std::path::PathBuf;
use std::process::Command;

struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let d = std::env::temp_dir().join(format!("linerate-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&d).expect("temp dir");
        TempDir(d)
    }
    fn file(&self, name: &str) -> String {
        self.0.join(name).to_str().expect("utf-8").to_string()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn payload(i: usize) -> Vec<u8> {
    let len = 60 + (i * 37) % 1400;
    (0..len).map(|k| (i + k) as u8).collect()
}

/// Fills a batch of `src`'s pool with packets `from..from + n`.
fn fill(b: &mut Batch, from: usize, n: usize) {
    for i in from..from + n {
        let mut fr = b.alloc().expect("frame");
        let data = payload(i);
        fr.buf()[..data.len()].copy_from_slice(&data);
        fr.push(Desc {
            ts: 1_600_000_000_000_000_000 + i as u64 * 1_000_000,
            len: data.len() as u32,
            wire_len: data.len() as u32,
            ..Default::default()
        });
    }
}

fn tcpdump_count(path: &str) -> Option<(u64, bool)> {
    let out = Command::new("tcpdump")
        .args(["--count", "-r", path])
        .output()
        .ok()?;
    let n = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .and_then(|w| w.parse().ok())?;
    Some((n, out.status.success()))
}

#[test]
fn write_then_read_through_port_uris() {
    let dir = TempDir::new("pcap-port");
    let path = dir.file("t.pcap");
    let opts = PortOptions::default();
    let n = 1000;
    {
        let mut w = linerate::open_tx(&format!("pcap:{path}"), &opts).expect("create");
        assert!(w.is_finished(), "a writer gives nothing");
        let pool = linerate::mem::Pool::new(&Default::default()).expect("pool");
        let mut b = Batch::with_pool(&std::sync::Arc::new(pool));
        let mut i = 0;
        while i < n {
            let k = 64.min(n - i);
            fill(&mut b, i, k);
            assert_eq!(w.tx(&mut b).expect("tx"), k);
            assert!(b.is_empty());
            i += k;
        }
        w.flush().expect("flush");
        let s = w.stats();
        assert_eq!(s.tx_packets, n as u64);
        assert_eq!(
            s.tx_bytes,
            (0..n).map(|i| payload(i).len() as u64).sum::<u64>()
        );
    }
    // A bare path that exists is read.
    let mut r = linerate::open_rx(&path, &opts).expect("open for reading");
    assert_eq!(r.link_type(), LinkType::ETHERNET);
    let mut b = Batch::new();
    let mut i = 0;
    while !r.is_finished() {
        r.rx(&mut b).expect("rx");
        for p in b.iter() {
            assert_eq!(p.data, &payload(i)[..]);
            assert_eq!(p.desc.ts, 1_600_000_000_000_000_000 + i as u64 * 1_000_000);
            i += 1;
        }
        b.clear();
    }
    assert_eq!(i, n);
    assert_eq!(r.stats().rx_packets, n as u64);
    if let Some((count, ok)) = tcpdump_count(&path) {
        assert!(ok, "tcpdump failed on our file");
        assert_eq!(count, n as u64);
    } else {
        println!("tcpdump not installed: interoperability not checked");
    }
}

#[test]
fn standalone_writer_files_are_read_by_tcpdump() {
    let dir = TempDir::new("pcap-writer");
    for (name, precision, link) in [
        ("us.pcap", Precision::Micro, LinkType::RAW),
        ("ns.pcap", Precision::Nano, LinkType::LINUX_SLL2),
    ] {
        let path = dir.file(name);
        let f = std::fs::File::create(&path).expect("create");
        let mut w = PcapWriter::with_precision(
            linerate::port::file::RecordFile::new(f, 4096),
            link,
            128,
            precision,
        )
        .expect("header");
        for i in 0..10 {
            w.write_packet(i * 1_000_000_007, &payload(i as usize), 0)
                .expect("write");
        }
        w.flush().expect("flush");
        drop(w);
        let mut r = PcapPort::open(&path, &PortOptions::default()).expect("open");
        assert_eq!(r.link_type(), link);
        let mut b = Batch::new();
        let mut got = 0;
        while !r.is_finished() {
            r.rx(&mut b).expect("rx");
            for p in b.iter() {
                assert_eq!(p.desc.len, 128.min(payload(got).len() as u32));
                assert_eq!(p.desc.wire_len, payload(got).len() as u32);
                let want_ts = got as u64 * 1_000_000_007;
                let want_ts = match precision {
                    Precision::Micro => want_ts / 1000 * 1000,
                    Precision::Nano => want_ts,
                };
                assert_eq!(p.desc.ts, want_ts);
                got += 1;
            }
            b.clear();
        }
        assert_eq!(got, 10);
        if let Some((count, ok)) = tcpdump_count(&path) {
            assert!(
                ok && count == 10,
                "tcpdump read {count} (ok: {ok}) of {name}"
            );
        }
    }
}

#[test]
fn bad_files_are_named_with_their_offset() {
    let dir = TempDir::new("pcap-bad");
    let path = dir.file("bad.pcap");
    std::fs::write(&path, b"this is not a capture").expect("write");
    let e = linerate::open_rx(&format!("pcap:{path}"), &PortOptions::default())
        .err()
        .expect("bad magic");
    let msg = e.to_string();
    assert!(msg.contains(&path) && msg.contains("offset 0"), "{msg}");
}

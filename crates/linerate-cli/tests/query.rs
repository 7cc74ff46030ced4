//! `linerate query` against Debian's tcpdump: a directory of captures of two writers with
//! interleaved times (VLAN and QinQ, IPv6 with extension headers, fragments, ARP; one file in
//! pcapng, one cut mid-record as a file being written is), queried with several filters and
//! time bounds, must give byte for byte what `tcpdump -r FILE -w - EXPR` gives over each file,
//! merged stably by time. Also: bad filters and times (exit 2), links and other files in the
//! directory, and `--serve` over curl. Every child process is killed by its PID when the test
//! ends.
#![deny(unsafe_code)]

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_linerate");

/// A scratch directory removed at the end.
struct Scratch(PathBuf);
impl Scratch {
    fn new(tag: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!("lr-query-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Scratch(d)
    }
}
impl Drop for Scratch {
    fn drop(&mut self) {
        if std::env::var_os("KEEP").is_none() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// A child killed (by its PID) when dropped.
struct Kid(Child);
impl Drop for Kid {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn pick<T: Copy>(&mut self, v: &[T]) -> T {
        v[(self.next() % v.len() as u64) as usize]
    }
}

const V4: [[u8; 4]; 5] = [
    [10, 0, 0, 1],
    [10, 0, 0, 2],
    [10, 1, 2, 3],
    [192, 168, 1, 9],
    [172, 16, 0, 5],
];
const V6: [[u8; 16]; 3] = [
    [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
    [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
    [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9],
];
const PORTS: [u16; 5] = [53, 80, 443, 1234, 5353];

/// One Ethernet frame of mixed traffic.
fn frame(r: &mut Rng) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1];
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
            v.extend_from_slice(&[0, 12, 0, 0, 1, 2, 3, 4]);
        }
        v
    };
    match r.next() % 5 {
        0..=2 => {
            f.extend_from_slice(&[0x08, 0x00]);
            let proto = r.pick(&[6u8, 17, 17, 1]);
            let frag: u16 = r.pick(&[0u16, 0, 0, 0x2000, 0x0010]);
            let body = if frag & 0x1fff == 0 {
                l4(r, proto)
            } else {
                vec![0x55; 16]
            };
            let mut ip = vec![0x45, 0];
            ip.extend_from_slice(&((20 + body.len()) as u16).to_be_bytes());
            ip.extend_from_slice(&[0, 1]);
            ip.extend_from_slice(&frag.to_be_bytes());
            ip.extend_from_slice(&[64, proto, 0, 0]);
            ip.extend_from_slice(&r.pick(&V4));
            ip.extend_from_slice(&r.pick(&V4));
            f.extend_from_slice(&ip);
            f.extend_from_slice(&body);
        }
        3 => {
            f.extend_from_slice(&[0x86, 0xdd]);
            let proto = r.pick(&[6u8, 17, 58]);
            let ext = r.pick(&[None, Some(0u8), Some(44u8), Some(60u8)]);
            let mut body = Vec::new();
            let first = match ext {
                None => proto,
                Some(44) => {
                    let off: u16 = r.pick(&[0u16, 0x00a8]);
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
            ip.extend_from_slice(&r.pick(&V6));
            ip.extend_from_slice(&r.pick(&V6));
            f.extend_from_slice(&ip);
            f.extend_from_slice(&body);
        }
        _ => {
            f.extend_from_slice(&[0x08, 0x06, 0, 1, 8, 0, 6, 4, 0, 1]);
            f.extend_from_slice(&[0x02, 0, 0, 0, 0, 1]);
            f.extend_from_slice(&r.pick(&V4));
            f.extend_from_slice(&[0; 6]);
            f.extend_from_slice(&r.pick(&V4));
        }
    }
    // Ethernet's minimum.
    while f.len() < 60 {
        f.push(0);
    }
    f
}

const SNAPLEN: u32 = 262_144;

fn pcap_header() -> Vec<u8> {
    let mut h = Vec::new();
    h.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    h.extend_from_slice(&2u16.to_le_bytes());
    h.extend_from_slice(&4u16.to_le_bytes());
    h.extend_from_slice(&[0; 8]);
    h.extend_from_slice(&SNAPLEN.to_le_bytes());
    h.extend_from_slice(&1u32.to_le_bytes());
    h
}

fn pcap_record(out: &mut Vec<u8>, ts_us: u64, data: &[u8]) {
    out.extend_from_slice(&((ts_us / 1_000_000) as u32).to_le_bytes());
    out.extend_from_slice(&((ts_us % 1_000_000) as u32).to_le_bytes());
    out.extend_from_slice(&(data.len() as u32).to_le_bytes());
    out.extend_from_slice(&(data.len() as u32).to_le_bytes());
    out.extend_from_slice(data);
}

/// The start of the captures: 2025-11-27T16:00:00Z.
const T0_US: u64 = 1_764_259_200_000_000;

/// Writes the directory: writers 0 and 1, three files each of 60 packets, times interleaved
/// (every 10th packet of writer 1 at the same microsecond as writer 0's); writer 1's second
/// file is pcapng, its last is cut in the middle of a record. Plus a link to a capture outside,
/// and a file that is not a capture.
fn make_dir(d: &Path, outside: &Path) {
    let mut r = Rng(0x2545_f491_4f6c_dd1d);
    for w in 0..2u64 {
        for file in 0..3u64 {
            let start = T0_US + file * 60_000;
            let name = format!(
                "20251127T1600{:02}.{:06}Z-w{w}",
                start / 1_000_000 % 60,
                start % 1_000_000
            );
            let mut pkts = Vec::new();
            for i in 0..60u64 {
                let ts = start + i * 1000 + if w == 1 && i % 10 != 0 { 500 } else { 0 };
                let mut f = frame(&mut r);
                if w == 0 && file == 2 && i == 33 {
                    f = rare_frame();
                }
                pkts.push((ts, f));
            }
            if w == 1 && file == 1 {
                let mut ng = linerate::port::pcap::PcapNgWriter::new(
                    Vec::new(),
                    linerate::port::LinkType::ETHERNET,
                    SNAPLEN,
                )
                .unwrap();
                for (ts, f) in &pkts {
                    ng.write_packet(0, ts * 1000, f, f.len() as u32).unwrap();
                }
                ng.flush().unwrap();
                std::fs::write(d.join(format!("{name}.pcapng")), ng.into_inner()).unwrap();
            } else {
                let mut b = pcap_header();
                for (ts, f) in &pkts {
                    pcap_record(&mut b, *ts, f);
                }
                if w == 1 && file == 2 {
                    // Being written: the last record only half there.
                    b.truncate(b.len() - 30);
                }
                std::fs::write(d.join(format!("{name}.pcap")), b).unwrap();
            }
        }
    }
    // A capture outside the directory, linked into it: never read.
    let mut b = pcap_header();
    for i in 0..5 {
        pcap_record(&mut b, T0_US + i, &frame(&mut r));
    }
    std::fs::write(outside, b).unwrap();
    std::os::unix::fs::symlink(outside, d.join("20251127T160000.000000Z-w9.pcap")).unwrap();
    std::fs::write(d.join("notes.txt"), "not a capture").unwrap();
}

/// The one packet of host 10.9.9.9 (UDP to 10.0.0.2 port 53).
fn rare_frame() -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1, 0x08, 0x00];
    f.extend_from_slice(&[0x45, 0, 0, 36, 0, 1, 0, 0, 64, 17, 0, 0]);
    f.extend_from_slice(&[10, 9, 9, 9, 10, 0, 0, 2]);
    f.extend_from_slice(&[0x30, 0x39, 0, 53, 0, 16, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8]);
    while f.len() < 60 {
        f.push(0);
    }
    f
}

/// Indexes a capture as the recorder does, in blocks of 4 packets, the first `upto` packets
/// (all: None), and saves the index beside it.
fn index(path: &Path, upto: Option<usize>) {
    use linerate::apps::record::IndexWriter;
    let f = std::fs::File::open(path).unwrap();
    let mut r = linerate::port::pcap::PcapReader::new(f, "capture").unwrap();
    let mut w = IndexWriter::with_blocks(r.link_type(), 1 << 20, 4);
    let mut k = 0;
    while let Ok(Some(p)) = r.next_packet() {
        if upto.is_some_and(|u| k >= u) {
            break;
        }
        let (off, ts, data, link) = (p.offset, p.ts, p.data.to_vec(), p.link);
        let end = r.offset();
        w.on_packet_link(off, end - off, ts, &data, link);
        k += 1;
    }
    w.finish().save(path).unwrap();
}

/// How the directory's captures are indexed.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Indexes {
    /// None.
    None,
    /// In blocks of 4 packets, but for one file without an index, one with a corrupt index,
    /// and the file being written indexed only up to its 40th packet.
    Mostly,
}

/// Indexes the directory [`make_dir`] wrote.
fn add_indexes(d: &Path) {
    for e in std::fs::read_dir(d).unwrap() {
        let e = e.unwrap();
        let n = e.file_name().to_string_lossy().into_owned();
        if !e.file_type().unwrap().is_file() || !(n.ends_with(".pcap") || n.ends_with(".pcapng")) {
            continue;
        }
        let p = e.path();
        if n.starts_with("20251127T160000.060000Z-w0") {
            continue;
        }
        if n.starts_with("20251127T160000.120000Z-w1") {
            index(&p, Some(40));
        } else {
            index(&p, None);
        }
        if n.starts_with("20251127T160000.000000Z-w1") {
            let idx = linerate::apps::record::index_path(&p);
            let mut b = std::fs::read(&idx).unwrap();
            let k = b.len() / 2;
            b[k] ^= 0xff;
            std::fs::write(&idx, b).unwrap();
        }
    }
}

/// The records of a pcap file: (ts seconds, ts µs, the record's bytes).
fn records(pcap: &[u8]) -> Vec<(u64, Vec<u8>)> {
    let mut v = Vec::new();
    let mut at = 24;
    while at + 16 <= pcap.len() {
        let sec = u32::from_le_bytes(pcap[at..at + 4].try_into().unwrap()) as u64;
        let us = u32::from_le_bytes(pcap[at + 4..at + 8].try_into().unwrap()) as u64;
        let cap = u32::from_le_bytes(pcap[at + 8..at + 12].try_into().unwrap()) as usize;
        let end = (at + 16 + cap).min(pcap.len());
        v.push((sec * 1_000_000 + us, pcap[at..end].to_vec()));
        at = end;
    }
    v
}

/// tcpdump's answer: `tcpdump -r FILE -w - EXPR` over each capture (regular files only, in the
/// files' order), merged stably by time, with the header tcpdump writes.
fn tcpdump_answer(dir: &Path, expr: &str, from_us: u64, to_us: u64) -> Vec<u8> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().unwrap().is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".pcap") || n.ends_with(".pcapng"))
        .collect();
    // Start time, then writer: the names sort so.
    names.sort();
    let mut all = Vec::new();
    let mut header = None;
    for n in names {
        let mut c = Command::new("tcpdump");
        c.args(["-r"]).arg(dir.join(&n)).args(["-w", "-"]);
        if !expr.is_empty() {
            c.arg(expr);
        }
        let o = c.stderr(Stdio::null()).output().unwrap();
        assert!(o.stdout.len() >= 24, "tcpdump -r {n} '{expr}'");
        header.get_or_insert_with(|| o.stdout[..24].to_vec());
        all.extend(
            records(&o.stdout)
                .into_iter()
                .filter(|(t, _)| *t >= from_us && *t < to_us),
        );
    }
    all.sort_by_key(|(t, _)| *t);
    let mut out = header.unwrap();
    for (_, r) in all {
        out.extend_from_slice(&r);
    }
    out
}

fn query(args: &[&str]) -> std::process::Output {
    Command::new(BIN).arg("query").args(args).output().unwrap()
}

fn have_tcpdump() -> bool {
    linerate_test_support::require_tool(
        "tcpdump",
        "apt-get install tcpdump; scripts/setup.sh --tests installs it",
    )
}

const FILTERS: &[&str] = &[
    "",
    "host 10.9.9.9",
    "host 10.0.0.1",
    "udp and not port 53",
    "ip6",
    "vlan and tcp",
    "host 2001:db8::2 and tcp port 80",
    "net 10.0.0.0/24 or arp",
    "ip[6:2] & 0x1fff != 0",
    "icmp6 or (vlan 200 and udp)",
];

#[test]
fn query_equals_tcpdump_over_the_files() {
    equals_tcpdump(Indexes::None);
}

#[test]
fn query_through_indexes_equals_tcpdump() {
    equals_tcpdump(Indexes::Mostly);
}

fn equals_tcpdump(mode: Indexes) {
    if !have_tcpdump() {
        return;
    }
    let d = Scratch::new(&format!("eq{mode:?}"));
    let outside = std::env::temp_dir().join(format!(
        "lr-query-outside-{mode:?}-{}.pcap",
        std::process::id()
    ));
    let dir = d.0.join("captures");
    std::fs::create_dir(&dir).unwrap();
    make_dir(&dir, &outside);
    if mode == Indexes::Mostly {
        add_indexes(&dir);
    }
    let dirs = dir.to_str().unwrap();
    // Time bounds: none; from 30 ms in (inclusive) to 150 ms in (exclusive), where packets are.
    let a = T0_US + 30_000;
    let b = T0_US + 150_000;
    let bounds: [(Option<String>, Option<String>, u64, u64); 3] = [
        (None, None, 0, u64::MAX),
        (
            Some(format!("{}.{:06}", a / 1_000_000, a % 1_000_000)),
            Some("2025-11-27T16:00:00.15Z".into()),
            a,
            b,
        ),
        (
            Some("2025-11-27T17:00:00.1+01:00".into()),
            None,
            T0_US + 100_000,
            u64::MAX,
        ),
    ];
    for expr in FILTERS {
        for (from, to, fu, tu) in &bounds {
            let want = tcpdump_answer(&dir, expr, *fu, *tu);
            let out = d.0.join("out.pcap");
            let mut args = vec![dirs, "-w", out.to_str().unwrap(), "--json"];
            if let Some(f) = from {
                args.extend(["--from", f]);
            }
            if let Some(t) = to {
                args.extend(["--to", t]);
            }
            if !expr.is_empty() {
                args.extend(["-f", expr]);
            }
            let o = query(&args);
            assert!(
                o.status.success(),
                "{args:?}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            let got = std::fs::read(&out).unwrap();
            assert_eq!(
                records(&got).len(),
                records(&want).len(),
                "'{expr}' {from:?} {to:?}"
            );
            assert!(got == want, "'{expr}' {from:?} {to:?}: not tcpdump's bytes");
            let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
            assert_eq!(j["files"], 6, "{j}");
            assert_eq!(j["files_cut"], 1, "{j}");
            assert_eq!(j["packets_matched"], records(&want).len() as u64, "{j}");
            if mode == Indexes::Mostly {
                assert_eq!(
                    j["files_indexed"].as_u64().unwrap() + j["files_skipped"].as_u64().unwrap(),
                    4,
                    "{j}"
                );
                assert_eq!(j["files_scanned"], 2, "{j}");
                let notes = j["notes"].to_string();
                assert!(
                    notes.contains("no index") && notes.contains("corrupt"),
                    "{notes}"
                );
                if *expr == "host 10.9.9.9" && from.is_none() {
                    // One block of 4 packets of the indexed files, and the two read whole.
                    assert_eq!(j["blocks_read"], 1, "{j}");
                    assert!(
                        j["bytes_read"].as_u64() < Some(j["bytes_total"].as_u64().unwrap() / 2),
                        "{j}"
                    );
                }
            } else {
                assert_eq!(j["files_scanned"], 6, "{j}");
            }
        }
    }
    if mode == Indexes::Mostly {
        // --no-index: the same answer, every file read whole.
        let o = query(&[dirs, "-w", "-", "--no-index", "-q", "host 10.9.9.9"]);
        assert_eq!(o.stdout, tcpdump_answer(&dir, "host 10.9.9.9", 0, u64::MAX));
        assert_eq!(records(&o.stdout).len(), 1);
        // --reindex indexes the two files without a good index; then no note is left.
        let o = query(&[dirs, "-w", "/dev/null", "--reindex", "udp"]);
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(e.matches(": indexed (").count(), 2, "{e}");
        assert!(
            e.contains("it had no index") && e.contains("corrupt"),
            "{e}"
        );
        assert_eq!(o.stdout.len(), 0);
        let o = query(&[dirs, "-w", "/dev/null", "--json", "udp"]);
        let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(j["files_indexed"], 6, "{j}");
        // Only the file being written is still noted (its last record is not whole yet), and
        // the link planted under a capture's name (passed over).
        let notes: Vec<&str> = j["notes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_str().unwrap())
            .collect();
        assert_eq!(notes.len(), 2, "{j}");
        assert!(notes.iter().any(|n| n.contains("truncated")), "{j}");
        assert!(
            notes
                .iter()
                .any(|n| n.ends_with("a symbolic link: passed over")),
            "{j}"
        );
    }
    // The filter as words, flags after them too (as the synopsis writes them), output on
    // standard output, and -c.
    let o = query(&[
        dirs, "-c", "7", "udp", "and", "not", "port", "53", "-w", "-", "-q",
    ]);
    assert!(o.status.success());
    let want = tcpdump_answer(&dir, "udp and not port 53", 0, u64::MAX);
    let want7: Vec<_> = records(&want).into_iter().take(7).collect();
    assert_eq!(records(&o.stdout), want7);
    assert!(
        o.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // pcapng by name: tshark reads it, same packets.
    let ng = d.0.join("out.pcapng");
    let o = query(&[dirs, "-w", ng.to_str().unwrap(), "-q", "ip6"]);
    assert!(o.status.success());
    let t = Command::new("tcpdump")
        .arg("-r")
        .arg(&ng)
        .args(["-w", "-"])
        .stderr(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(
        records(&t.stdout),
        records(&tcpdump_answer(&dir, "ip6", 0, u64::MAX))
    );
    let _ = std::fs::remove_file(&outside);
}

#[test]
fn bad_filters_times_and_dirs_are_usage_errors() {
    let d = Scratch::new("bad");
    let outside =
        std::env::temp_dir().join(format!("lr-query-outside2-{}.pcap", std::process::id()));
    make_dir(&d.0, &outside);
    let dir = d.0.to_str().unwrap();
    let out = d.0.join("x.out");
    let o = out.to_str().unwrap();
    for (args, needle) in [
        (vec![dir, "-w", o, "udp port banana"], "banana"),
        (
            vec![dir, "-w", o, "--from", "yesterday"],
            "--from 'yesterday'",
        ),
        (vec![dir, "-w", o, "--to", "2025-02-30T00:00:00Z"], "--to"),
        (
            vec![dir, "-w", o, "--from", "-1h", "--to", "-2h"],
            "--from is not before --to",
        ),
        (vec!["/nonexistent-lr-dir", "-w", o], "nonexistent-lr-dir"),
        (vec![dir, "--serve", "10.1.2.3:9"], "loopback"),
        (vec![dir], "--write"),
    ] {
        let r = query(&args);
        let err = String::from_utf8_lossy(&r.stderr);
        assert_eq!(r.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(!out.exists(), "{args:?} wrote its output");
    }
    // -w never names one of the captures.
    let cap = d.0.join("20251127T160000.000000Z-w0.pcap");
    let before = std::fs::read(&cap).unwrap();
    let r = query(&[dir, "-w", cap.to_str().unwrap()]);
    assert_eq!(r.status.code(), Some(2));
    assert_eq!(std::fs::read(&cap).unwrap(), before);
    let _ = std::fs::remove_file(&outside);
}

/// Reads the port the server says it listens on from its standard error.
fn served_port(kid: &mut Kid) -> u16 {
    let mut err = kid.0.stderr.take().unwrap();
    let mut buf = Vec::new();
    let t = Instant::now();
    let mut b = [0u8; 256];
    while t.elapsed() < Duration::from_secs(20) {
        let n = err.read(&mut b).unwrap();
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&b[..n]);
        let s = String::from_utf8_lossy(&buf);
        if let Some(i) = s.find("http://127.0.0.1:") {
            let rest = &s[i + 17..];
            if let Some(j) = rest.find('/') {
                // Keep draining its log so that it never blocks on a full pipe.
                std::thread::spawn(move || {
                    let mut sink = Vec::new();
                    let _ = err.read_to_end(&mut sink);
                });
                return rest[..j].parse().unwrap();
            }
        }
    }
    panic!("no address: {}", String::from_utf8_lossy(&buf));
}

fn curl(args: &[&str]) -> std::process::Output {
    Command::new("curl")
        .args(["-s", "--max-time", "30"])
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn serve_answers_as_the_file_query_does() {
    if !have_tcpdump()
        || !linerate_test_support::require_tool(
            "curl",
            "apt-get install curl; scripts/setup.sh --tests installs it",
        )
    {
        return;
    }
    let d = Scratch::new("serve");
    let outside =
        std::env::temp_dir().join(format!("lr-query-outside3-{}.pcap", std::process::id()));
    make_dir(&d.0, &outside);
    let dir = d.0.to_str().unwrap();
    let mut kid = Kid(Command::new(BIN)
        .args(["query", "--serve", "127.0.0.1:0", dir])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap());
    let port = served_port(&mut kid);
    let url = format!("http://127.0.0.1:{port}/query");
    for expr in ["vlan and tcp", "host 10.0.0.1", ""] {
        let want = query(&[dir, "-w", "-", "-q", "-f", expr]).stdout;
        assert_eq!(want, tcpdump_answer(&d.0, expr, 0, u64::MAX));
        let get = curl(&["-G", "--data-urlencode", &format!("filter={expr}"), &url]);
        assert!(get.stdout == want, "GET '{expr}'");
        let post = curl(&["--data-binary", expr, &url]);
        if !expr.is_empty() {
            assert!(post.stdout == want, "POST '{expr}'");
        }
        // tcpdump reads the stream as it is.
        let mut t = Command::new("tcpdump")
            .args(["-r", "-", "-w", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        use std::io::Write;
        t.stdin.take().unwrap().write_all(&get.stdout).unwrap();
        let back = t.wait_with_output().unwrap();
        assert_eq!(
            records(&back.stdout),
            records(&want),
            "tcpdump -r - '{expr}'"
        );
    }
    // Time bounds in the query string.
    let want = query(&[
        dir,
        "-w",
        "-",
        "-q",
        "--from",
        "1764259200.03",
        "--to",
        "1764259200.1",
        "udp",
    ])
    .stdout;
    let got = curl(&[&format!(
        "{url}?filter=udp&from=1764259200.03&to=1764259200.1"
    )]);
    assert!(got.stdout == want && records(&want).len() > 3);
    let ct = curl(&[
        "-o",
        "/dev/null",
        "-w",
        "%{http_code} %{content_type}",
        &url,
    ]);
    assert_eq!(
        String::from_utf8_lossy(&ct.stdout),
        "200 application/vnd.tcpdump.pcap"
    );
    // A bad filter: 400 with libpcap's message; another path 404; a huge body 413.
    let bad = curl(&[
        "-w",
        "\n%{http_code}",
        "--data-binary",
        "udp port banana",
        &url,
    ]);
    let s = String::from_utf8_lossy(&bad.stdout);
    assert!(s.ends_with("\n400") && s.contains("banana"), "{s}");
    let nf = curl(&[
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        &format!("http://127.0.0.1:{port}/x"),
    ]);
    assert_eq!(String::from_utf8_lossy(&nf.stdout), "404");
    let big = "a".repeat(100_000);
    let tl = curl(&[
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "--data-binary",
        &big,
        &url,
    ]);
    assert_eq!(String::from_utf8_lossy(&tl.stdout), "413");
    let bt = curl(&[
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        &format!("{url}?from=soon"),
    ]);
    assert_eq!(String::from_utf8_lossy(&bt.stdout), "400");
    drop(kid);
    let _ = std::fs::remove_file(&outside);
}

/// `linerate record --serve`: a query over HTTP while the recorder writes (its open file read
/// up to its last whole record) equals `linerate query` over the directory and tcpdump -r's
/// answer over its files.
#[test]
fn record_serve_answers_while_recording() {
    if !have_tcpdump()
        || !linerate_test_support::require_tool(
            "curl",
            "apt-get install curl; scripts/setup.sh --tests installs it",
        )
    {
        return;
    }
    let d = Scratch::new("recserve");
    let fifo = d.0.join("fifo");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let dir = d.0.join("rec");
    let mut kid = Kid(Command::new(BIN)
        .args([
            "record",
            "--sync-every",
            "100ms",
            "--file-size",
            "64KiB",
            "-i",
        ])
        .arg(format!("pcap:{}", fifo.display()))
        .arg(&dir)
        .args(["--serve", "127.0.0.1:0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap());
    let mut w = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
    let mut r = Rng(0x5151_7777_0123_4567);
    let mut b = pcap_header();
    for i in 0..3000u64 {
        pcap_record(&mut b, T0_US + i * 100, &frame(&mut r));
    }
    use std::io::Write;
    w.write_all(&b).unwrap();
    w.flush().unwrap();
    let port = served_port(&mut kid);
    let dirs = dir.to_str().unwrap();
    let t = Instant::now();
    loop {
        let o = query(&[dirs, "-w", "-", "-q"]);
        if records(&o.stdout).len() == 3000 {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the recorder did not write 3000 packets"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let files = std::fs::read_dir(&dir)
        .unwrap()
        .filter(|e| {
            let n = e
                .as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .into_owned();
            n.ends_with(".pcap")
        })
        .count();
    assert!(files >= 3, "{files} files");
    for expr in ["udp and not port 53", "vlan and tcp", "host 10.0.0.1"] {
        let want = query(&[dirs, "-w", "-", "-q", "-f", expr]).stdout;
        assert_eq!(
            records(&want),
            records(&tcpdump_answer(&dir, expr, 0, u64::MAX)),
            "'{expr}'"
        );
        assert!(records(&want).len() > 10, "'{expr}'");
        let got = curl(&[
            "-G",
            "--data-urlencode",
            &format!("filter={expr}"),
            &format!("http://127.0.0.1:{port}/query"),
        ]);
        assert!(got.stdout == want, "GET '{expr}' while recording");
    }
    drop(w);
    drop(kid);
}

/// A pcapng capture whose second interface is described after the first packet (as a writer
/// that meets a new interface describes it then) and that ends with interface statistics
/// blocks (as dumpcap's files and `linerate record --format pcapng`'s do).
fn late_idb_pcapng() -> Vec<u8> {
    use linerate::port::pcap::PcapNgWriter;
    use linerate::port::{Interface, InterfaceStats};
    use linerate::wire::LinkType;
    let mut r = Rng(0x9e37_79b9_7f4a_7c15);
    let mut w = PcapNgWriter::new(Vec::new(), LinkType::ETHERNET, SNAPLEN).unwrap();
    w.describe(&[Interface::new("eth0", LinkType::ETHERNET)])
        .unwrap();
    for i in 0..200u64 {
        let f = if i == 150 {
            rare_frame()
        } else {
            frame(&mut r)
        };
        // Interface 1 first appears at packet 10: its description comes then.
        let iface = u16::from(i >= 10 && i % 3 == 0);
        w.write_packet(iface, T0_US * 1000 + i * 1_000_000, &f, f.len() as u32)
            .unwrap();
    }
    let st = InterfaceStats {
        start_ns: T0_US * 1000,
        end_ns: T0_US * 1000 + 200_000_000,
        accepted: 100,
        ..Default::default()
    };
    w.write_stats(&[st, st]).unwrap();
    w.into_inner()
}

#[test]
fn pcapng_with_a_late_interface_and_statistics_reads_as_tcpdump_does() {
    if !have_tcpdump() {
        return;
    }
    let s = Scratch::new("late-idb");
    let dir = s.0.join("d");
    std::fs::create_dir_all(&dir).unwrap();
    let cap = dir.join("20251127T160000.000000Z-w0.pcapng");
    std::fs::write(&cap, late_idb_pcapng()).unwrap();
    let dirs = dir.to_str().unwrap();
    for indexed in [false, true] {
        if indexed {
            // Blocks of 4 packets: a block past the late description is read on its own.
            index(&cap, None);
        }
        for expr in ["", "host 10.9.9.9", "udp", "tcp port 80"] {
            let o = query(&[dirs, "-w", "-", "-q", "--json", expr]);
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            let want = tcpdump_answer(&dir, expr, 0, u64::MAX);
            assert_eq!(
                records(&o.stdout).len(),
                records(&want).len(),
                "'{expr}' indexed {indexed}"
            );
            assert!(
                o.stdout == want,
                "'{expr}' indexed {indexed}: not tcpdump's bytes"
            );
            let j: serde_json::Value = serde_json::from_slice(&o.stderr).unwrap();
            assert_eq!(j["files_cut"], 0, "{j}");
            // No note but the missing index's when there is none.
            let notes = j["notes"].as_array().unwrap();
            assert_eq!(notes.len(), usize::from(!indexed), "{j}");
            assert!(
                notes.iter().all(|n| n.to_string().contains("no index")),
                "{j}"
            );
            assert_eq!(j["files_indexed"], u64::from(indexed), "{j}");
        }
    }
}

/// A directory of `n` captures of 60 packets each (writer 0, one minute apart), for the tests
/// below.
fn small_dir(d: &Path, n: u64) {
    let mut r = Rng(0x0bad_cafe_1234_5678);
    for file in 0..n {
        let start = T0_US + file * 60_000_000;
        let mut b = pcap_header();
        for i in 0..60u64 {
            pcap_record(&mut b, start + i * 1000, &frame(&mut r));
        }
        let name = format!("20251127T16{:02}00.000000Z-w0.pcap", file);
        std::fs::write(d.join(name), b).unwrap();
    }
}

/// A capture the query cannot open (permission denied, the query run as user nobody) is named
/// on standard error, the other files still answer (the same packets as a query over them
/// alone), and the run exits 1 at its end, after the answer, as grep -r goes on past a file it
/// cannot read.
#[test]
fn an_unreadable_file_is_named_and_the_others_still_answer() {
    use std::os::unix::fs::PermissionsExt;
    if !linerate::os::is_root() {
        linerate_test_support::skip("needs root to run the query as another user");
        return;
    }
    let d = Scratch::new("eacces");
    std::fs::set_permissions(&d.0, std::fs::Permissions::from_mode(0o755)).unwrap();
    let all = d.0.join("all");
    let some = d.0.join("some");
    for x in [&all, &some] {
        std::fs::create_dir(x).unwrap();
        small_dir(x, 3);
        std::fs::set_permissions(x, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let locked = all.join("20251127T160100.000000Z-w0.pcap");
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::remove_file(some.join("20251127T160100.000000Z-w0.pcap")).unwrap();
    let want = query(&[some.to_str().unwrap(), "-w", "-", "-q"]);
    assert!(want.status.success());
    assert_eq!(records(&want.stdout).len(), 120);
    let o = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", BIN])
        .args(["query", all.to_str().unwrap(), "-w", "-", "--json"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(o.stdout == want.stdout, "the other files' answer: {err}");
    assert!(
        err.contains(&format!("error: {}: ", locked.display())) && err.contains("ermission"),
        "{err}"
    );
    let j: serde_json::Value = err
        .lines()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no JSON: {err}"));
    assert_eq!(j["files_unreadable"], 1, "{j}");
    assert_eq!(j["files"], 3, "{j}");
    assert_eq!(j["packets_matched"], 120, "{j}");
    // -q keeps the error.
    let o = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", BIN])
        .args(["query", all.to_str().unwrap(), "-w", "-", "-q"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains(&locked.display().to_string()));
}

/// A capture holding its header and a cut record, no whole one (a file just begun, or cut by
/// a crash), is said on standard error, naming it; the others answer, exit 0.
#[test]
fn a_file_of_only_a_cut_record_is_said() {
    let d = Scratch::new("cutonly");
    small_dir(&d.0, 2);
    let cut = d.0.join("20251127T160500.000000Z-w0.pcap");
    let mut b = pcap_header();
    pcap_record(&mut b, T0_US + 300_000_000, &frame(&mut Rng(7)));
    b.truncate(b.len() - 10);
    std::fs::write(&cut, b).unwrap();
    let o = query(&[d.0.to_str().unwrap(), "-w", "-", "--json"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert_eq!(records(&o.stdout).len(), 120);
    assert!(
        err.lines()
            .any(|l| l.contains(&cut.display().to_string()) && l.contains("no whole record")),
        "{err}"
    );
    let j: serde_json::Value = err
        .lines()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no JSON: {err}"));
    assert_eq!(j["files_cut"], 1, "{j}");
}

/// A capture holding only its file header, no record at all (a file just begun: the recorder
/// writes the header first, tcpdump -w a quiet link's file), is named in a note on standard
/// error, as docs/record.md says; the others answer, exit 0. With -q, nothing is said.
#[test]
fn a_file_of_only_its_header_is_named() {
    let d = Scratch::new("headeronly");
    small_dir(&d.0, 2);
    let bare = d.0.join("20251127T160500.000000Z-w0.pcap");
    std::fs::write(&bare, pcap_header()).unwrap();
    let o = query(&[d.0.to_str().unwrap(), "-w", "-", "--json"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert_eq!(records(&o.stdout).len(), 120);
    assert!(
        err.lines().any(|l| l.contains(&bare.display().to_string())
            && l.contains("only its file header, no record")),
        "{err}"
    );
    let j: serde_json::Value = err
        .lines()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no JSON: {err}"));
    assert_eq!(j["files"], 3, "{j}");
    assert_eq!(j["files_cut"], 0, "not cut: {j}");
    let o = query(&[d.0.to_str().unwrap(), "-w", "-", "-q"]);
    assert!(o.status.success());
    assert!(
        o.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// An empty capture file (the recorder or tcpdump -w created it and has not written its
/// header yet) is named in a note too, as one holding only its header is: no file of DIR goes
/// unmentioned; the others answer, exit 0; with -q nothing is said.
#[test]
fn an_empty_file_is_named() {
    let d = Scratch::new("emptyfile");
    small_dir(&d.0, 2);
    let empty = d.0.join("20251127T160500.000000Z-w0.pcap");
    std::fs::write(&empty, b"").unwrap();
    let o = query(&[d.0.to_str().unwrap(), "-w", "-", "--json"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert_eq!(records(&o.stdout).len(), 120);
    assert!(
        err.lines()
            .any(|l| l.contains(&empty.display().to_string()) && l.contains("empty")),
        "{err}"
    );
    let o = query(&[d.0.to_str().unwrap(), "-w", "-", "-q"]);
    assert!(o.status.success());
    assert!(
        o.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// SIGINT in the middle of a long one-shot query (-w OUT): the output ends on whole records,
/// the summary says how many were written (that many records in OUT), exit 0 as a query that
/// ended (tcpdump -w's habit on Ctrl-C).
#[test]
fn sigint_leaves_the_output_whole_and_says_what_was_written() {
    let d = Scratch::new("sigint");
    let dir = d.0.join("caps");
    std::fs::create_dir(&dir).unwrap();
    // 12 files of 20 000 packets of 1 000 bytes (240 MB to write): far more than a query
    // writes in the time before the signal.
    let payload = vec![0x5au8; 1000];
    for file in 0..12u64 {
        let start = T0_US + file * 60_000_000;
        let mut b = pcap_header();
        for i in 0..20_000u64 {
            pcap_record(&mut b, start + i, &payload);
        }
        std::fs::write(
            dir.join(format!("20251127T16{file:02}00.000000Z-w0.pcap")),
            b,
        )
        .unwrap();
    }
    let out = d.0.join("out.pcap");
    let mut kid = Kid(Command::new(BIN)
        .args([
            "query",
            dir.to_str().unwrap(),
            "-w",
            out.to_str().unwrap(),
            "--json",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap());
    let t = Instant::now();
    while std::fs::metadata(&out).map_or(0, |m| m.len()) < 4 << 20 {
        assert!(t.elapsed() < Duration::from_secs(30), "no output");
        assert!(
            kid.0.try_wait().unwrap().is_none(),
            "ended before the signal"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    linerate::os::interrupt(kid.0.id()).unwrap();
    let t = Instant::now();
    let status = loop {
        if let Some(s) = kid.0.try_wait().unwrap() {
            break s;
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "SIGINT did not stop it"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut so = String::new();
    kid.0
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut so)
        .unwrap();
    let mut se = String::new();
    kid.0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut se)
        .unwrap();
    assert_eq!(status.code(), Some(0), "{status} {se}");
    let j: serde_json::Value = serde_json::from_str(so.trim()).unwrap_or_else(|_| panic!("{so}"));
    assert_eq!(j["interrupted"], true, "{j}");
    let f = std::fs::read(&out).unwrap();
    let recs = records(&f);
    // Whole records only: the last one ends at the end of the file.
    assert!(
        recs.iter().all(|(_, r)| r.len() == 16 + 1000),
        "a cut record"
    );
    assert_eq!(24 + recs.len() * 1016, f.len());
    assert_eq!(
        j["packets_matched"].as_u64().unwrap(),
        recs.len() as u64,
        "{j}"
    );
    assert!(recs.len() < 240_000, "the query ran to its end: {j}");
}

/// A request whose lines end in LF alone (`printf 'GET /query HTTP/1.0\n\n' | nc`) is answered
/// at once, as one in CRLF, not after the 10 s a request has to arrive.
#[test]
fn a_request_with_lf_only_line_ends_is_answered_at_once() {
    use std::io::Write;
    let d = Scratch::new("lfonly");
    small_dir(&d.0, 2);
    let dir = d.0.to_str().unwrap();
    let mut kid = Kid(Command::new(BIN)
        .args(["query", "--serve", "127.0.0.1:0", dir])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap());
    let port = served_port(&mut kid);
    let want = query(&[dir, "-w", "-", "-q", "-f", "udp"]).stdout;
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let t = Instant::now();
    // The connection stays open for writing, as nc's does.
    s.write_all(b"GET /query?filter=udp HTTP/1.0\nHost: x\n\n")
        .unwrap();
    let mut got = Vec::new();
    s.read_to_end(&mut got).unwrap();
    let took = t.elapsed();
    let head_end = got
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("{}", String::from_utf8_lossy(&got)));
    assert!(
        got.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&got)
    );
    assert!(got[head_end + 4..] == want[..], "the answer differs");
    assert!(records(&want).len() > 5);
    assert!(took < Duration::from_secs(5), "answered after {took:?}");
}

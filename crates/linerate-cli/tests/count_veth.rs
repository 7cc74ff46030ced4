//! `linerate count` on a veth between two network namespaces: a known number of frames is sent
//! from one namespace, `count` on the other side reports exactly that number, and its `-w` output
//! holds exactly the frames sent, byte for byte. Needs root (skips otherwise, fails instead under
//! LINERATE_REQUIRE_PRIV=1).
#![deny(unsafe_code)]

use linerate_test_support::netns;

use linerate::mem::{Batch, Desc, Pool, PoolConfig};
use linerate::port::afpacket::AfPacket;
use linerate::port::{Port, PortOptions};
use netns::{NetnsPair, Side};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn frame(p: &NetnsPair, seq: u32, dport: u16) -> Vec<u8> {
    let payload = 18 + (seq as usize * 13) % 200;
    let mut f = Vec::new();
    f.extend_from_slice(&p.mac_b);
    f.extend_from_slice(&p.mac_a);
    f.extend_from_slice(&[0x08, 0x00]);
    let ip_len = (20 + 8 + payload) as u16;
    f.extend_from_slice(&[
        0x45,
        0,
        (ip_len >> 8) as u8,
        ip_len as u8,
        0,
        0,
        0x40,
        0,
        64,
        17,
        0,
        0,
    ]);
    f.extend_from_slice(&p.ip_a);
    f.extend_from_slice(&p.ip_b);
    f.extend_from_slice(&1024u16.to_be_bytes());
    f.extend_from_slice(&dport.to_be_bytes());
    f.extend_from_slice(&((8 + payload) as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(&seq.to_be_bytes());
    while f.len() < 14 + ip_len as usize {
        f.push(seq as u8);
    }
    f
}

/// Reads a classic little-endian pcap into its records' bytes.
fn records(path: &std::path::Path) -> Vec<Vec<u8>> {
    let d = std::fs::read(path).expect("pcap written");
    assert!(d.len() >= 24, "pcap header missing");
    let mut off = 24;
    let mut out = Vec::new();
    while off + 16 <= d.len() {
        let cap = u32::from_le_bytes(d[off + 8..off + 12].try_into().unwrap()) as usize;
        assert!(off + 16 + cap <= d.len(), "truncated record at {off}");
        out.push(d[off + 16..off + 16 + cap].to_vec());
        off += 16 + cap;
    }
    assert_eq!(off, d.len(), "trailing bytes in pcap");
    out
}

#[test]
fn count_reports_exactly_what_was_sent_and_records_it() {
    if !netns::require_priv() {
        return;
    }
    const N: u32 = 5000;
    let pair = NetnsPair::new().expect("netns pair");
    let dir = std::env::temp_dir().join(format!("linerate-veth-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("veth.pcap");
    let mut child = Command::new("ip")
        .args([
            "netns",
            "exec",
            pair.ns(Side::B),
            env!("CARGO_BIN_EXE_linerate"),
            "count",
        ])
        .args([
            "-i",
            "afpacket:vB",
            "-c",
            &N.to_string(),
            "-t",
            "30",
            "--json",
        ])
        .args(["-f", "udp dst port 9", "-w", out.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn linerate");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().expect("start line").expect("read");
    assert!(first.contains("\"type\":\"start\""), "{first}");
    assert!(first.contains("\"filter_in_kernel\":true"), "{first}");

    // Send N frames to port 9 interleaved with N/5 frames to port 10 that the filter drops.
    let sent = send(&pair, N);
    assert_eq!(sent.len(), N as usize);
    finish_and_check(child, lines, N, &out, &sent, "count reached");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Sends `n` frames to UDP port 9 and n/5 to port 10 from namespace A; returns the port-9 ones.
fn send(pair: &NetnsPair, n: u32) -> Vec<Vec<u8>> {
    let mut sent = Vec::new();
    pair.run_in(Side::A, || {
        let mut tx = AfPacket::open("vA", &PortOptions::default()).expect("open vA");
        let pool = Arc::new(Pool::new(&PoolConfig::default()).unwrap());
        let mut b = Batch::with_pool(&pool);
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut seq = 0u32;
        while seq < n + n / 5 && Instant::now() < deadline {
            while !b.is_full() && seq < n + n / 5 {
                let dport = if seq % 6 == 5 { 10 } else { 9 };
                let f = frame(pair, seq, dport);
                let mut fr = b.alloc().unwrap();
                fr.buf()[..f.len()].copy_from_slice(&f);
                fr.push(Desc {
                    len: f.len() as u32,
                    wire_len: f.len() as u32,
                    ..Default::default()
                });
                if dport == 9 {
                    sent.push(f);
                }
                seq += 1;
            }
            while !b.is_empty() && Instant::now() < deadline {
                if tx.tx(&mut b).unwrap() == 0 {
                    std::thread::sleep(Duration::from_micros(100));
                }
            }
            // pace a little so a 2-core machine under test load does not overflow the ring
            std::thread::sleep(Duration::from_micros(200));
        }
        tx.flush().unwrap();
    });
    sent
}

type Lines = std::io::Lines<BufReader<std::process::ChildStdout>>;

/// Waits for `count` to end, then checks its summary and its pcap against what was sent.
fn finish_and_check(
    mut child: std::process::Child,
    lines: Lines,
    n: u32,
    out: &std::path::Path,
    sent: &[Vec<u8>],
    ended: &str,
) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("linerate count did not finish");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(status.success(), "count failed: {err}");
    let summary: serde_json::Value = rest
        .iter()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|j| j["type"] == "summary")
        .expect("summary");
    assert_eq!(summary["pkts"], n, "{summary}");
    assert_eq!(summary["drops_by_reason"]["kernel"], 0, "{summary}");
    assert_eq!(summary["ended"], ended);
    let got = records(out);
    assert_eq!(got.len(), n as usize);
    for (i, (g, s)) in got.iter().zip(sent).enumerate() {
        assert!(g == s, "frame {i} differs");
    }
}

/// Spawns `linerate count` in namespace B with a kernel filter, writing to `out`; returns it
/// once its start line says the port is open.
fn spawn_count(
    pair: &NetnsPair,
    extra: &[&str],
    out: &std::path::Path,
) -> (std::process::Child, Lines) {
    let mut child = Command::new("ip")
        .args([
            "netns",
            "exec",
            pair.ns(Side::B),
            env!("CARGO_BIN_EXE_linerate"),
            "count",
        ])
        .args(["-i", "afpacket:vB", "-t", "30", "--json"])
        .args(extra)
        .args(["-f", "udp dst port 9", "-w", out.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn linerate");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().expect("start line").expect("read");
    assert!(first.contains("\"type\":\"start\""), "{first}");
    assert!(first.contains("\"filter_in_kernel\":true"), "{first}");
    (child, lines)
}

#[test]
fn sigint_prints_the_summary_and_completes_the_pcap() {
    if !netns::require_priv() {
        return;
    }
    let pair = NetnsPair::new().expect("netns pair");
    let dir = std::env::temp_dir().join(format!("linerate-veth-int-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("int.pcap");
    let (child, lines) = spawn_count(&pair, &[], &out);
    let sent = send(&pair, 700);
    // let the last block retire (block timeout 10 ms), then interrupt
    std::thread::sleep(Duration::from_millis(300));
    // The PID of the child we spawned.
    let _ = linerate::os::signal(child.id(), libc::SIGINT);
    finish_and_check(child, lines, 700, &out, &sent, "interrupted");
    let _ = std::fs::remove_dir_all(&dir);
}

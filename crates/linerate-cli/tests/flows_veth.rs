//! `linerate flows` live on a veth between two network namespaces: 40 UDP flows of 100 frames each
//! are sent from one namespace; on the other side `flows -i afpacket:vB --idle-timeout 1` must
//! report each of them, with the exact packets and bytes, with reason `idle` while it is still
//! running (time moves on with the wall clock on live ports), then stop on SIGINT with its
//! summary and no kernel drop; with one and with two worker threads. Needs root (skips otherwise, fails under LINERATE_REQUIRE_PRIV=1).
#![deny(unsafe_code)]

use linerate_test_support::netns;

use linerate::mem::{Batch, Desc, Pool, PoolConfig};
use linerate::port::afpacket::AfPacket;
use linerate::port::{Port, PortOptions};
use netns::{NetnsPair, Side};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

const FLOWS: u16 = 40;
const PER_FLOW: u32 = 100;

fn frame(p: &NetnsPair, seq: u32, sport: u16) -> Vec<u8> {
    let payload = 18 + (seq as usize * 13) % 200;
    let ip_len = (20 + 8 + payload) as u16;
    let mut f = Vec::new();
    f.extend_from_slice(&p.mac_b);
    f.extend_from_slice(&p.mac_a);
    f.extend_from_slice(&[0x08, 0x00, 0x45, 0]);
    f.extend_from_slice(&ip_len.to_be_bytes());
    f.extend_from_slice(&[0, 0, 0x40, 0, 64, 17, 0, 0]);
    f.extend_from_slice(&p.ip_a);
    f.extend_from_slice(&p.ip_b);
    f.extend_from_slice(&sport.to_be_bytes());
    f.extend_from_slice(&9u16.to_be_bytes());
    f.extend_from_slice(&((8 + payload) as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.resize(14 + ip_len as usize, seq as u8);
    f
}

/// Sends every flow's frames, interleaved; returns the bytes sent per source port.
fn send(pair: &NetnsPair) -> BTreeMap<u16, u64> {
    let mut bytes = BTreeMap::new();
    pair.run_in(Side::A, || {
        let mut tx = AfPacket::open("vA", &PortOptions::default()).expect("open vA");
        let pool = Arc::new(Pool::new(&PoolConfig::default()).unwrap());
        let mut b = Batch::with_pool(&pool);
        let deadline = Instant::now() + Duration::from_secs(10);
        let total = FLOWS as u32 * PER_FLOW;
        let mut seq = 0u32;
        while seq < total && Instant::now() < deadline {
            while !b.is_full() && seq < total {
                let sport = 2000 + (seq % FLOWS as u32) as u16;
                let f = frame(pair, seq, sport);
                *bytes.entry(sport).or_insert(0) += f.len() as u64;
                let mut fr = b.alloc().unwrap();
                fr.buf()[..f.len()].copy_from_slice(&f);
                fr.push(Desc {
                    len: f.len() as u32,
                    wire_len: f.len() as u32,
                    ..Default::default()
                });
                seq += 1;
            }
            while !b.is_empty() && Instant::now() < deadline {
                if tx.tx(&mut b).unwrap() == 0 {
                    std::thread::sleep(Duration::from_micros(100));
                }
            }
            // a 2-core machine under test load: do not overflow the receiver's ring
            std::thread::sleep(Duration::from_micros(200));
        }
        tx.flush().unwrap();
    });
    bytes
}

#[test]
fn live_flows_expire_on_the_wall_clock_and_stop_on_sigint() {
    if !netns::require_priv() {
        return;
    }
    live("1", None);
    live("2", None);
}

/// `-f` on a live port: the flows of source ports 2000-2019 only; the other 20 flows' packets
/// (and whatever else crosses the veth) are counted `filtered`.
#[test]
fn live_filter_keeps_half_the_flows_and_counts_the_rest() {
    if !netns::require_priv() {
        return;
    }
    live("1", Some("udp src portrange 2000-2019"));
    live("2", Some("udp src portrange 2000-2019"));
}

fn live(threads: &str, filter: Option<&str>) {
    let expected = if filter.is_some() { 20 } else { FLOWS as usize };
    let pair = NetnsPair::new().expect("netns pair");
    let mut child = Command::new("ip")
        .args([
            "netns",
            "exec",
            pair.ns(Side::B),
            env!("CARGO_BIN_EXE_linerate"),
            "flows",
        ])
        .args([
            "-i",
            "afpacket:vB",
            "--idle-timeout",
            "1",
            "--json",
            "-w",
            "-",
            "--format",
            "csv",
        ])
        .args(["--threads", threads])
        .args(filter.map(|f| ["-f", f]).into_iter().flatten())
        .args([
            "--fields",
            "proto,saddr,sport,daddr,dport,spkts,dpkts,sbytes,dbytes,reason",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn linerate");
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut first = String::new();
    err.read_line(&mut first).unwrap();
    assert!(first.contains("\"type\":\"start\""), "{first}");
    let (ltx, lrx) = mpsc::channel::<String>();
    let out = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        for l in BufReader::new(out).lines().map_while(Result::ok) {
            if ltx.send(l).is_err() {
                break;
            }
        }
    });

    let sent = send(&pair);
    assert_eq!(sent.len(), FLOWS as usize);
    let src = format!(
        "{}.{}.{}.{}",
        pair.ip_a[0], pair.ip_a[1], pair.ip_a[2], pair.ip_a[3]
    );
    // The records come while linerate still runs: idle flows expire on the wall clock.
    let mut got: BTreeMap<u16, Vec<String>> = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(15);
    while got.len() < expected && Instant::now() < deadline {
        if let Ok(l) = lrx.recv_timeout(Duration::from_millis(200)) {
            let c: Vec<String> = l.split(',').map(String::from).collect();
            if c.len() == 10 && c[0] == "udp" && c[1] == src && c[4] == "9" {
                got.insert(c[2].parse().unwrap(), c);
            }
        }
    }
    // The PID of the child we started (ip netns exec execs linerate).
    let _ = linerate::os::signal(child.id(), libc::SIGINT);
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t0.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            panic!("linerate flows did not stop on SIGINT");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut rest = String::new();
    err.read_to_string(&mut rest).unwrap();
    let _ = reader.join();
    assert!(status.success(), "{rest}");
    assert_eq!(got.len(), expected, "records seen before SIGINT: {got:?}");
    if filter.is_some() {
        assert!(got.keys().all(|&p| p < 2020), "{got:?}");
        let j: serde_json::Value = serde_json::from_str(rest.lines().last().unwrap()).unwrap();
        assert!(
            j["filtered"].as_u64().unwrap() >= 20 * PER_FLOW as u64,
            "{j}"
        );
        assert_eq!(j["records_by_reason"]["idle"], 20, "{j}");
        return;
    }
    for (sport, c) in &got {
        assert_eq!(c[5], PER_FLOW.to_string(), "{c:?}");
        assert_eq!(c[6], "0");
        assert_eq!(c[7], sent[sport].to_string(), "{c:?}");
        assert_eq!(c[9], "idle", "{c:?}");
    }
    let j: serde_json::Value = serde_json::from_str(rest.lines().last().unwrap()).unwrap();
    assert_eq!(j["ended"], "interrupted", "{j}");
    assert!(
        j["flow_packets"].as_u64().unwrap() >= (FLOWS as u64) * PER_FLOW as u64,
        "{j}"
    );
    assert_eq!(j["input_drops"]["kernel"], 0, "{j}");
    assert!(
        j["records_by_reason"]["idle"].as_u64().unwrap() >= FLOWS as u64,
        "{j}"
    );
}

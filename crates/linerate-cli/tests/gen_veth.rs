//! `linerate gen` on AF_PACKET over a veth between two network namespaces, with `linerate
//! count --latency` on the other side: every probe arrives once, in order, with a one-way
//! latency. Needs root (skips otherwise, fails instead under LINERATE_REQUIRE_PRIV=1).
#![deny(unsafe_code)]

use linerate_test_support::netns;

use netns::{NetnsPair, Side};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn mac(m: &[u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

fn ip(a: &[u8; 4]) -> String {
    format!("{}.{}.{}.{}", a[0], a[1], a[2], a[3])
}

fn summary(lines: &[String]) -> serde_json::Value {
    lines
        .iter()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|j| j["type"] == "summary")
        .unwrap_or_else(|| panic!("no summary in {lines:?}"))
}

#[test]
fn probes_cross_a_veth_with_latency() {
    if !netns::require_priv() {
        return;
    }
    const N: u64 = 4000;
    let pair = NetnsPair::new().expect("netns pair");
    let mut count = Command::new("ip")
        .args([
            "netns",
            "exec",
            pair.ns(Side::B),
            env!("CARGO_BIN_EXE_linerate"),
        ])
        .args([
            "count",
            "-i",
            "afpacket:vB",
            "-c",
            &N.to_string(),
            "-t",
            "30",
        ])
        .args(["-f", "udp dst port 9", "--latency", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn count");
    let mut lines = BufReader::new(count.stdout.take().unwrap()).lines();
    let first = lines.next().expect("start line").expect("read");
    assert!(first.contains("\"type\":\"start\""), "{first}");

    let gen = Command::new("ip")
        .args([
            "netns",
            "exec",
            pair.ns(Side::A),
            env!("CARGO_BIN_EXE_linerate"),
        ])
        .args([
            "gen",
            "-o",
            "afpacket:vA",
            "-c",
            &N.to_string(),
            "--rate",
            "40kpps",
        ])
        .args([
            "--dst-mac",
            &mac(&pair.mac_b),
            "--src-mac",
            &mac(&pair.mac_a),
        ])
        .args(["--src-ip", &ip(&pair.ip_a), "--dst-ip", &ip(&pair.ip_b)])
        .args(["--dport", "9", "--size", "128", "--json"])
        .output()
        .expect("run gen");
    let gout = String::from_utf8_lossy(&gen.stdout).into_owned();
    assert!(
        gen.status.success(),
        "gen failed: {}",
        String::from_utf8_lossy(&gen.stderr)
    );
    let g = summary(&gout.lines().map(String::from).collect::<Vec<_>>());
    assert_eq!(g["pkts"], N);
    assert_eq!(g["port_drops"], 0, "{g}");

    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = count.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = count.kill();
            panic!("count did not finish");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert!(status.success());
    let c = summary(&rest);
    assert_eq!(c["pkts"], N, "{c}");
    let lat = c["latency"].as_array().unwrap();
    assert_eq!(lat.len(), 1, "{c}");
    let l = &lat[0];
    assert_eq!(l["rx"], N);
    assert_eq!(l["lost"], 0);
    assert_eq!(l["dups"], 0);
    assert_eq!(l["reordered"], 0);
    // Both processes anchor their TSC clocks to the wall clock: latencies are positive and
    // (veth, one machine) far below a second.
    assert!(l["max_ns"].as_u64().unwrap() < 1_000_000_000, "{l}");
    assert!(l["p50_ns"].as_u64().unwrap() > 0, "{l}");
}

/// vA's transmit packet counter (what the kernel put on the wire from it).
fn tx_packets(pair: &NetnsPair) -> u64 {
    let out = pair
        .ip_in(Side::A, &["-s", "-j", "link", "show", "vA"])
        .expect("ip -s link");
    let j: serde_json::Value = serde_json::from_str(&out).expect("ip -j");
    j[0]["stats64"]["tx"]["packets"]
        .as_u64()
        .unwrap_or_else(|| panic!("no tx packets in {out}"))
}

/// gen on afpacket: whose peer goes down mid-run: the kernel drops each try and leaves the
/// transmit ring's frames requested; at the end, what the kernel never took is counted as
/// dropped (ring_full), not sent. Every packet the summary calls sent is one vA's counter
/// says left it (it said a whole ring, 512 frames, more: left in the ring at exit).
#[test]
fn packets_left_in_the_ring_when_the_peer_is_down_are_not_counted_sent() {
    if !netns::require_priv() {
        return;
    }
    let pair = NetnsPair::new().expect("netns pair");
    pair.no_ipv6().expect("no ipv6");
    let before = tx_packets(&pair);
    let gen = Command::new("ip")
        .args([
            "netns",
            "exec",
            pair.ns(Side::A),
            env!("CARGO_BIN_EXE_linerate"),
        ])
        .args([
            "gen",
            "-o",
            "afpacket:vA",
            "-t",
            "1.2",
            "--rate",
            "50kpps",
            "--json",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn gen");
    std::thread::sleep(Duration::from_millis(400));
    pair.ip_in(Side::B, &["link", "set", "vB", "down"])
        .expect("vB down");
    let out = gen.wait_with_output().expect("gen");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<String> = text.lines().map(str::to_string).collect();
    let j = summary(&lines);
    let sent = j["pkts"].as_u64().unwrap_or_else(|| panic!("{j}"));
    let wire = tx_packets(&pair) - before;
    assert!(sent > 0, "{j}");
    assert_eq!(sent, wire, "sent per the summary vs vA's tx counter: {j}");
    let handed = j["handed_to_port"]
        .as_u64()
        .unwrap_or_else(|| panic!("{j}"));
    let dropped = j["port_drops"].as_u64().unwrap_or_else(|| panic!("{j}"));
    assert_eq!(sent + dropped, handed, "{j}");
    assert!(dropped > 0, "vB was down for most of the run: {j}");
}

//! One-way latency on a veth between two network namespaces, `linerate gen` at 50 kpps into
//! `linerate count --latency`: on `afpacket:` the receive time is the kernel's per-packet
//! stamp, so the median must be within 3× of what tcpdump's own nanosecond stamps of the same
//! packets give (both against the send stamp in the probe), and no probe may look older than
//! its send stamp (clocks out of step). On `xdp:` the XDP program stamps packets at the driver's
//! receive hook; tcpdump cannot see the redirected packets, so its median of an afpacket run on
//! the same path is the reference. Needs root and tcpdump (skips otherwise, fails under
//! LINERATE_REQUIRE_PRIV=1).
#![deny(unsafe_code)]

use linerate_test_support::netns;

use netns::{NetnsPair, Side};
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_linerate");
const N: u32 = 20_000;

fn mac(m: &[u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

fn finish(mut c: Child, limit: Duration, what: &str) -> Output {
    let t0 = Instant::now();
    while c.try_wait().unwrap().is_none() {
        if t0.elapsed() > limit {
            let _ = c.kill();
            panic!("{what} did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    c.wait_with_output().unwrap()
}

/// tcpdump on vB writing nanosecond stamps to `out`, once it says it listens.
fn tcpdump(pair: &NetnsPair, out: &std::path::Path) -> Child {
    let mut c = Command::new("ip")
        .args([
            "netns",
            "exec",
            pair.ns(Side::B),
            "tcpdump",
            "-i",
            "vB",
            "-n",
        ])
        .args([
            "--immediate-mode",
            "-s",
            "0",
            "-B",
            "32768",
            "--time-stamp-precision",
            "nano",
            "-w",
        ])
        .arg(out)
        .arg("udp")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run tcpdump");
    let mut err = BufReader::new(c.stderr.take().unwrap());
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    assert!(line.contains("listening"), "tcpdump: {line}");
    // Keep draining its standard error so that it never blocks.
    std::thread::spawn(move || {
        let mut rest = String::new();
        let _ = err.read_to_string(&mut rest);
    });
    c
}

/// Latencies (ns) of the probes in a nanosecond pcap: receive stamp minus the send stamp that
/// gen wrote after Ethernet + IPv4 + UDP (signature 2, stream 2, sequence 4, time 8 bytes).
fn pcap_latencies(path: &std::path::Path) -> Vec<i64> {
    let d = std::fs::read(path).unwrap();
    assert!(d.len() >= 24);
    assert_eq!(
        u32::from_le_bytes(d[..4].try_into().unwrap()),
        0xa1b2_3c4d,
        "nanosecond pcap"
    );
    let mut off = 24;
    let mut out = Vec::new();
    while off + 16 <= d.len() {
        let w = |o: usize| u32::from_le_bytes(d[off + o..off + o + 4].try_into().unwrap());
        let (sec, nsec, cap) = (w(0) as i64, w(4) as i64, w(8) as usize);
        let p = &d[off + 16..(off + 16 + cap).min(d.len())];
        off += 16 + cap;
        if let Some(s) = p.get(42 + 8..42 + 16) {
            let sent = u64::from_be_bytes(s.try_into().unwrap()) as i64;
            out.push(sec * 1_000_000_000 + nsec - sent);
        }
    }
    out.sort();
    out
}

/// `count --latency` on `port` in B while gen sends N probes at 50 kpps from A (and tcpdump
/// records them, if asked); returns count's latency row and tcpdump's sorted latencies.
fn run(port: &str, with_tcpdump: bool) -> (serde_json::Value, Vec<i64>) {
    let pair = NetnsPair::new().expect("netns pair");
    pair.no_ipv6().unwrap();
    let dir = std::env::temp_dir().join(format!("lr-lat-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let td_out = dir.join(format!("{}.pcap", port.replace(':', "-")));
    let td = with_tcpdump.then(|| tcpdump(&pair, &td_out));
    let mut count = Command::new("ip")
        .args(["netns", "exec", pair.ns(Side::B), BIN, "count", "-i", port])
        .args([
            "--latency",
            "--json",
            "-q",
            "-c",
            &N.to_string(),
            "-t",
            "30",
            "-f",
            "udp",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(count.stdout.take().unwrap()).lines();
    let first = lines.next().expect("start line").unwrap();
    assert!(first.contains("\"start\""), "{first}");
    let gen = Command::new("ip")
        .args([
            "netns",
            "exec",
            pair.ns(Side::A),
            BIN,
            "gen",
            "-o",
            "afpacket:vA",
        ])
        .args([
            "--dst-mac",
            &mac(&pair.mac_b),
            "--rate",
            "50kpps",
            "-c",
            &N.to_string(),
        ])
        .args(["-q", "--size", "64"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let g = finish(gen, Duration::from_secs(30), "gen");
    assert!(g.status.success(), "{}", String::from_utf8_lossy(&g.stderr));
    let c = finish(count, Duration::from_secs(30), "count");
    assert!(c.status.success(), "{}", String::from_utf8_lossy(&c.stderr));
    let summary: serde_json::Value = lines
        .map_while(Result::ok)
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(&l).ok())
        .find(|j| j["type"] == "summary")
        .expect("summary");
    // Every probe received or counted dropped (a burst the copy-mode receiver cannot keep up
    // with on a loaded machine shows as kernel drops, never as a silent gap).
    let (pkts, drops) = (summary["pkts"].as_u64(), summary["drops"].as_u64());
    assert_eq!(
        pkts.zip(drops).map(|(p, d)| p + d),
        Some(u64::from(N)),
        "{summary}"
    );
    assert_eq!(summary["latency"][0]["rx"], summary["pkts"], "{summary}");
    assert_eq!(
        summary["latency_receive_time"], "kernel receive timestamps, per packet",
        "{port}: {summary}"
    );
    let row = summary["latency"][0].clone();
    let mut td_lat = Vec::new();
    if let Some(td) = td {
        std::thread::sleep(Duration::from_millis(200));
        // The PID of the tcpdump we started (ip netns exec execs it).
        let _ = linerate::os::signal(td.id(), libc::SIGINT);
        let _ = finish(td, Duration::from_secs(10), "tcpdump");
        td_lat = pcap_latencies(&td_out);
    }
    let _ = std::fs::remove_dir_all(&dir);
    (row, td_lat)
}

fn tcpdump_runs() -> bool {
    let ok = Command::new("tcpdump").arg("--version").output().is_ok();
    if !ok {
        linerate_test_support::skip("tcpdump is not installed (apt-get install tcpdump)");
    }
    ok
}

#[test]
fn latency_from_kernel_stamps_matches_tcpdump_on_afpacket_and_xdp() {
    if !netns::require_priv() || !tcpdump_runs() {
        return;
    }
    let (af, td) = run("afpacket:vB", true);
    // tcpdump may lose some to its buffer on a loaded machine (its median is over what it
    // kept); it needs enough for a median.
    assert!(td.len() >= 1000, "tcpdump recorded {} probes", td.len());
    let td_p50 = td[td.len() / 2];
    assert!(td_p50 > 0, "tcpdump median {td_p50} ns");
    let p50 = af["p50_ns"].as_i64().unwrap();
    eprintln!("afpacket: {af}; tcpdump: min {} p50 {td_p50} ns", td[0]);
    let (rx, lost) = (af["rx"].as_u64().unwrap(), af["lost"].as_u64().unwrap());
    assert!(rx + lost <= u64::from(N), "{af}");
    assert!(rx >= u64::from(N) / 2, "too few probes for a median: {af}");
    assert_eq!(
        af["negative"], 0,
        "probes older than their send stamp: {af}"
    );
    assert!(af["min_ns"].as_i64().unwrap() > 0, "{af}");
    assert!(
        p50 <= 3 * td_p50 && 3 * p50 >= td_p50,
        "afpacket median {p50} ns, tcpdump's {td_p50} ns: not within 3x"
    );
    let (xdp, _) = run("xdp:vB", false);
    eprintln!("xdp: {xdp}");
    let p50 = xdp["p50_ns"].as_i64().unwrap();
    let (rx, lost) = (xdp["rx"].as_u64().unwrap(), xdp["lost"].as_u64().unwrap());
    assert!(rx + lost <= u64::from(N), "{xdp}");
    assert!(rx >= u64::from(N) / 2, "too few probes for a median: {xdp}");
    assert_eq!(
        xdp["negative"], 0,
        "probes older than their send stamp: {xdp}"
    );
    assert!(xdp["min_ns"].as_i64().unwrap() > 0, "{xdp}");
    assert!(
        p50 <= 3 * td_p50 && 3 * p50 >= td_p50,
        "xdp median {p50} ns, tcpdump's on afpacket {td_p50} ns: not within 3x"
    );
}

//! IPFIX on time on a live veth: `linerate flows -i afpacket:vB --idle-timeout 1 --ipfix ...`
//! on a quiet link, where nothing after a flow's last packet would push its record out.
//!
//! - a lone 5-packet flow's message reaches a UDP listener within 3 s of its last packet, and
//!   its Export Time (RFC 7011 §3.1: when the message leaves) is within 1 s of its arrival;
//!   over several lone flows, tshark's IPFIX dissector shows in every message an Export Time
//!   no earlier than every record's end (at the header's one-second resolution);
//! - nfcapd (Debian's nfdump) receives a lone flow's record within 2 s of its idle timeout (seen
//!   through its repeater, `-R`), and nfdump then shows the flow with its 5 packets.
//!
//! Needs root (skips otherwise, fails under LINERATE_REQUIRE_PRIV=1); without tshark or nfdump
//! their part is skipped the same way.
#![deny(unsafe_code)]

use linerate_test_support::netns::{self, NetnsPair, Side};
use std::io::{BufRead, BufReader, Write};
use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

fn have(tool: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool}"))
        .output()
        .is_ok_and(|o| o.status.success())
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// A child we started, stopped by its PID (SIGINT, then SIGKILL) when dropped.
struct Proc(Child);

impl Proc {
    fn stop(&mut self, sig: i32) -> std::process::ExitStatus {
        let _ = linerate::os::signal(self.0.id(), sig);
        let t0 = Instant::now();
        loop {
            if let Some(s) = self.0.try_wait().unwrap() {
                return s;
            }
            if t0.elapsed() > Duration::from_secs(10) {
                let _ = self.0.kill();
                return self.0.wait().unwrap();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            let _ = linerate::os::signal(self.0.id(), libc::SIGINT);
            std::thread::sleep(Duration::from_millis(300));
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// `linerate flows` on vB in namespace B, exporting to 127.0.0.1:`port` there; returns when
/// its input is open.
fn flows(pair: &NetnsPair, port: u16) -> Proc {
    let mut child = Command::new("ip")
        .args(["netns", "exec", pair.ns(Side::B)])
        .arg(env!("CARGO_BIN_EXE_linerate"))
        .args([
            "flows",
            "-i",
            "afpacket:vB",
            "--idle-timeout",
            "1",
            "--json",
        ])
        .args(["--ipfix", &format!("127.0.0.1:{port}")])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn linerate flows");
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut first = String::new();
    err.read_line(&mut first).unwrap();
    assert!(first.contains("\"type\":\"start\""), "{first}");
    // Keep reading its standard error so that it never blocks on it.
    std::thread::spawn(move || for _ in err.lines() {});
    Proc(child)
}

/// Sends a lone 5-packet UDP flow (source port 10000 + `flow`) from A; returns the wall time
/// (ns) right after its last packet.
fn lone_flow(pair: &NetnsPair, flow: u16) -> u64 {
    let frames: Vec<Vec<u8>> = (0..5)
        .map(|s| netns::udp_frame(pair.mac_b, pair.mac_a, flow, s))
        .collect();
    pair.run_in(Side::A, || netns::send_raw("vA", &frames));
    now_ns()
}

/// A UDP socket bound to 127.0.0.1 in namespace B.
fn listener(pair: &NetnsPair) -> UdpSocket {
    let s = pair.run_in(Side::B, || UdpSocket::bind("127.0.0.1:0").unwrap());
    s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    s
}

fn u32_at(m: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([m[at], m[at + 1], m[at + 2], m[at + 3]])
}

/// Waits up to `within` for a message with data; (message, arrival time in ns).
fn next_message(s: &UdpSocket, within: Duration) -> Option<(Vec<u8>, u64)> {
    let t0 = Instant::now();
    let mut buf = [0u8; 65536];
    while t0.elapsed() < within {
        if let Ok(n) = s.recv(&mut buf) {
            return Some((buf[..n].to_vec(), now_ns()));
        }
    }
    None
}

/// The messages as a pcap file (Ethernet/IPv4/UDP to `port`) for tshark.
fn pcap_of(msgs: &[(Vec<u8>, u64)], port: u16, path: &Path) {
    // Header: magic, version 2.4, zone, sigfigs, snaplen, link type Ethernet.
    let mut f = Vec::new();
    f.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    f.extend_from_slice(&2u16.to_le_bytes());
    f.extend_from_slice(&4u16.to_le_bytes());
    for v in [0u32, 0, 65535, 1] {
        f.extend_from_slice(&v.to_le_bytes());
    }
    for (m, at) in msgs {
        let mut p = vec![0u8; 12];
        p.extend_from_slice(&[0x08, 0x00]);
        let ip_len = (20 + 8 + m.len()) as u16;
        p.extend_from_slice(&[0x45, 0]);
        p.extend_from_slice(&ip_len.to_be_bytes());
        p.extend_from_slice(&[0, 0, 0x40, 0, 64, 17, 0, 0, 127, 0, 0, 1, 127, 0, 0, 1]);
        p.extend_from_slice(&4739u16.to_be_bytes());
        p.extend_from_slice(&port.to_be_bytes());
        p.extend_from_slice(&((8 + m.len()) as u16).to_be_bytes());
        p.extend_from_slice(&[0, 0]);
        p.extend_from_slice(m);
        f.extend_from_slice(&((at / 1_000_000_000) as u32).to_le_bytes());
        f.extend_from_slice(&((at % 1_000_000_000 / 1000) as u32).to_le_bytes());
        f.extend_from_slice(&(p.len() as u32).to_le_bytes());
        f.extend_from_slice(&(p.len() as u32).to_le_bytes());
        f.extend_from_slice(&p);
    }
    std::fs::File::create(path).unwrap().write_all(&f).unwrap();
}

#[test]
fn a_lone_flow_leaves_on_time_with_its_export_time() {
    if !netns::require_priv() {
        return;
    }
    let pair = NetnsPair::new().expect("netns pair");
    pair.no_ipv6().expect("no ipv6");
    let rx = listener(&pair);
    let port = rx.local_addr().unwrap().port();
    let mut f = flows(&pair, port);
    let mut msgs = Vec::new();
    // Four lone flows on a quiet link, each alone in its message.
    for flow in 0..4u16 {
        let last = lone_flow(&pair, flow);
        let (m, at) = next_message(&rx, Duration::from_secs(6))
            .unwrap_or_else(|| panic!("flow {flow}: no IPFIX message within 6 s"));
        let export_ns = u64::from(u32_at(&m, 4)) * 1_000_000_000;
        println!(
            "flow {flow}: message {:.3} s after the last packet, export time {:.3} s before \
             arrival",
            (at - last) as f64 / 1e9,
            (at as f64 - export_ns as f64) / 1e9
        );
        assert!(at - last < 3_000_000_000, "flow {flow}: {} ns", at - last);
        // Export Time counts whole seconds: within 1 s of arrival (and a loopback hop).
        assert!(
            export_ns <= at && at - export_ns < 1_050_000_000,
            "flow {flow}: export {export_ns}, arrival {at}"
        );
        msgs.push((m, at));
        // A pause of its own length between flows: no record may wait for the next one.
        std::thread::sleep(Duration::from_millis(700 * (flow as u64 % 2) + 300));
    }
    assert!(f.stop(libc::SIGINT).success());
    if !have("tshark") {
        linerate_test_support::skip("tshark not installed (apt-get install tshark)");
        return;
    }
    let tmp = std::env::temp_dir().join(format!("linerate-ipfix-veth-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let cap = tmp.join("ipfix.pcap");
    pcap_of(&msgs, port, &cap);
    let o = Command::new("tshark")
        .arg("-r")
        .arg(&cap)
        .args(["-d", &format!("udp.port=={port},cflow"), "-T", "fields"])
        .args(["-E", "separator=;", "-E", "aggregator=|"])
        .args(["-e", "cflow.exporttime", "-e", "cflow.abstimeend"])
        .args(["-e", "_ws.expert.severity"])
        .env("TZ", "UTC")
        .output()
        .expect("tshark");
    let _ = std::fs::remove_dir_all(&tmp);
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), msgs.len(), "{text}");
    for (l, (m, _)) in lines.iter().zip(&msgs) {
        let c: Vec<&str> = l.split(';').collect();
        assert_eq!(c.len(), 3, "{l}");
        assert!(c[2].is_empty(), "tshark expert info: {l}");
        // tshark's own decoding, compared with the bytes we put there.
        let export = epoch_of(c[0]);
        assert_eq!(export, u64::from(u32_at(m, 4)), "{l}");
        let ends: Vec<u64> = c[1].split('|').map(epoch_of).collect();
        assert!(!ends.is_empty(), "{l}");
        for e in ends {
            assert!(
                export >= e,
                "export time {export} before a record's end {e}: {l}"
            );
        }
    }
}

/// Whole seconds since the epoch of tshark's "Nov 27, 2026 06:21:08.123000000 UTC" (or of a
/// number of seconds, as it shows the Export Time).
fn epoch_of(s: &str) -> u64 {
    if let Ok(n) = s.trim().parse() {
        return n;
    }
    let o = Command::new("date")
        .args(["-u", "-d"])
        .arg(s.trim().split('.').next().unwrap().to_string() + " UTC")
        .arg("+%s")
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("tshark time '{s}'"))
}

/// nfcapd started in namespace B, repeating every datagram it receives to `repeat` there.
fn nfcapd(pair: &NetnsPair, dir: &Path, repeat: u16) -> (Proc, u16) {
    let port = pair.run_in(Side::B, || {
        UdpSocket::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    });
    std::fs::create_dir_all(dir).unwrap();
    let child = Command::new("ip")
        .args(["netns", "exec", pair.ns(Side::B), "nfcapd", "-w"])
        .arg(dir)
        .args(["-b", "127.0.0.1", "-p", &port.to_string()])
        .args(["-R", &format!("127.0.0.1/{repeat}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start nfcapd");
    let p = Proc(child);
    // Ready when its socket shows in B's /proc/net/udp.
    let hex = format!(":{port:04X} ");
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(5) {
        let udp = pair.run_in(Side::B, || {
            std::fs::read_to_string("/proc/thread-self/net/udp").unwrap_or_default()
        });
        if udp.contains(&hex) {
            return (p, port);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("nfcapd did not listen on 127.0.0.1:{port}");
}

fn nfcapd_file(dir: &Path) -> PathBuf {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("nfcapd.20"))
        })
        .collect();
    files.sort();
    files.pop().expect("no nfcapd file")
}

#[test]
fn nfcapd_receives_a_lone_flow_within_2_s_of_its_idle_timeout() {
    if !netns::require_priv() {
        return;
    }
    if !(have("nfcapd") && have("nfdump")) {
        linerate_test_support::skip("nfcapd/nfdump not installed (apt-get install nfdump)");
        return;
    }
    let pair = NetnsPair::new().expect("netns pair");
    pair.no_ipv6().expect("no ipv6");
    let dir = std::env::temp_dir().join(format!("linerate-nfcapd-veth-{}", std::process::id()));
    let rep = listener(&pair);
    let (mut col, port) = nfcapd(&pair, &dir, rep.local_addr().unwrap().port());
    let mut f = flows(&pair, port);
    let last = lone_flow(&pair, 7);
    let (_, at) = next_message(&rep, Duration::from_secs(6))
        .expect("nfcapd received no IPFIX message within 6 s");
    let after_idle = (at - last) as f64 / 1e9 - 1.0;
    println!("nfcapd received the record {after_idle:.3} s after the flow's idle timeout");
    assert!(after_idle < 2.0, "{after_idle} s");
    assert!(f.stop(libc::SIGINT).success());
    assert!(col.stop(libc::SIGTERM).success());
    let o = Command::new("nfdump")
        .arg("-r")
        .arg(nfcapd_file(&dir))
        .args(["-q", "-N", "-o", "fmt:%pr,%sp,%dp,%ipkt"])
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let text = String::from_utf8_lossy(&o.stdout).replace(' ', "");
    assert!(
        text.lines()
            .any(|l| l == "UDP,10007,9,5" || l == "17,10007,9,5"),
        "nfdump shows: {text}"
    );
}

/// A dead collector on the link (198.18.0.9: no host answers its ARP): the messages wait in the
/// socket's queue for an address that never comes. At the end flows waits for the kernel to
/// give up on them and counts their records failed (exit 1), instead of exiting 0 with every
/// record lost.
#[test]
fn a_dead_on_link_collector_counts_its_records_failed() {
    if !netns::require_priv() {
        return;
    }
    let pair = NetnsPair::new().expect("netns pair");
    pair.no_ipv6().expect("no ipv6");
    let o = Command::new("ip")
        .args(["netns", "exec", pair.ns(Side::B)])
        .arg(env!("CARGO_BIN_EXE_linerate"))
        .args(["flows", "--json", "-i"])
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/sample.pcap"))
        .args(["--ipfix", "198.18.0.9:4739"])
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{e}");
    let summary: serde_json::Value = e
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .find(|v: &serde_json::Value| v["type"] == "summary")
        .unwrap_or_else(|| panic!("no summary: {e}"));
    let x = &summary["ipfix"];
    assert!(x["records"].as_u64().unwrap() > 0, "{x}");
    assert_eq!(x["failed_records"], x["records"], "{x}");
}

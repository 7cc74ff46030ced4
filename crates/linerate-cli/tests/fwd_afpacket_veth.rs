//! `linerate fwd` on `afpacket:` forwards each packet as soon as it is in (DPDK's l2fwd and
//! netmap's bridge do; a TPACKET_V3 block timeout would hold it for milliseconds): on the line
//! A –vA/vB0– B –vB1/vC– C, 400 frames sent from A at 2 kpps through `fwd -i afpacket:vB0 -o
//! afpacket:vB1` in B; the added latency is C's kernel arrival stamp minus A's kernel stamp of
//! the same frame leaving vA. The median must be below 500 µs: a wide margin for a loaded
//! machine, a check that nothing waits for a timer, not a speed claim. The figures are printed
//! (`--nocapture`); `LINERATE_BIN=path` measures another build. Needs root (skips otherwise,
//! fails instead under LINERATE_REQUIRE_PRIV=1).
#![deny(unsafe_code)]

use linerate::port::afpacket::AfPacket;
use linerate::port::{Capture, Port, PortOptions};
use linerate_test_support::line::{NetnsLine, Node};
use linerate_test_support::netns;
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const N: u32 = 400;

/// Kernel stamps (ns) by sequence number of the test's frames `port` receives until `stop`.
fn stamps(port: &mut AfPacket, stop: &AtomicBool) -> HashMap<u32, u64> {
    let mut b = linerate::mem::Batch::new();
    let mut got = HashMap::new();
    let end = Instant::now() + Duration::from_secs(30);
    while !stop.load(Ordering::Relaxed) && Instant::now() < end {
        port.rx(&mut b).expect("rx");
        for p in b.iter() {
            if let Some(s) = netns::udp_seq(p.data) {
                got.insert(s, p.desc.ts);
            }
        }
        b.clear();
    }
    got
}

#[test]
fn fwd_on_afpacket_forwards_at_once() {
    if !netns::require_priv() {
        return;
    }
    let bin =
        std::env::var("LINERATE_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_linerate").into());
    let l = NetnsLine::new().expect("netns line");
    let mut fwd = Command::new("ip")
        .args(["netns", "exec", l.ns(Node::B), &bin])
        .args([
            "fwd",
            "-i",
            "afpacket:vB0",
            "-o",
            "afpacket:vB1",
            "--no-mac-updating",
        ])
        .args(["--json", "--period", "0", "-t", "30"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn linerate fwd");
    let mut lines = BufReader::new(fwd.stdout.take().unwrap()).lines();
    let first = lines.next().expect("start line").expect("read");
    assert!(first.contains("\"type\":\"start\""), "{first}");
    let frames: Vec<Vec<u8>> = (0..N)
        .map(|s| netns::udp_frame(l.mac_b0, l.mac_a, 1, s))
        .collect();
    let stop = AtomicBool::new(false);
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let (sent, arrived) = std::thread::scope(|s| {
        let out_opts = PortOptions {
            direction: Capture::Out,
            ..Default::default()
        };
        let (stop, r1, r2, l) = (&stop, ready_tx.clone(), ready_tx, &l);
        let a = s.spawn(move || {
            l.run_in(Node::A, move || {
                let mut p = AfPacket::open("vA", &out_opts).expect("open vA");
                r1.send(()).unwrap();
                stamps(&mut p, stop)
            })
        });
        let c = s.spawn(move || {
            l.run_in(Node::C, move || {
                let mut p = AfPacket::open("vC", &PortOptions::default()).expect("open vC");
                r2.send(()).unwrap();
                stamps(&mut p, stop)
            })
        });
        ready_rx.recv().unwrap();
        ready_rx.recv().unwrap();
        l.run_in(Node::A, || {
            let sock = linerate::os::PacketSocket::open("vA").expect("packet socket on vA");
            let t0 = Instant::now();
            for (i, f) in frames.iter().enumerate() {
                // 2 kpps: frame i leaves at i × 500 µs.
                let due = t0 + Duration::from_micros(500 * i as u64);
                if let Some(d) = due.checked_duration_since(Instant::now()) {
                    std::thread::sleep(d);
                }
                sock.send(f).expect("send on vA");
            }
        });
        std::thread::sleep(Duration::from_millis(300));
        stop.store(true, Ordering::Relaxed);
        (a.join().unwrap(), c.join().unwrap())
    });
    let _ = linerate::os::signal(fwd.id(), libc::SIGINT);
    let t0 = Instant::now();
    while fwd.try_wait().unwrap().is_none() {
        if t0.elapsed() > Duration::from_secs(10) {
            let _ = fwd.kill();
            let _ = fwd.wait();
            panic!("fwd did not stop on SIGINT");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(sent.len(), N as usize, "frames seen leaving vA");
    assert_eq!(arrived.len(), N as usize, "frames forwarded to vC");
    let mut lat: Vec<u64> = arrived
        .iter()
        .map(|(s, t)| t.saturating_sub(sent[s]))
        .collect();
    lat.sort_unstable();
    let q = |f: f64| lat[((lat.len() - 1) as f64 * f) as usize] as f64 / 1000.0;
    println!(
        "fwd afpacket added latency at 2 kpps, {N} frames: median {:.1} µs, p90 {:.1} µs, p99 {:.1} µs, max {:.1} µs",
        q(0.5),
        q(0.9),
        q(0.99),
        q(1.0)
    );
    assert!(
        q(0.5) < 500.0,
        "median {:.1} µs: fwd waits before forwarding",
        q(0.5)
    );
}

/// At MTU 9000 a TPACKET_V2 ring of frames sized for the MTU held only 4096 of them (64 MiB):
/// fwd at 150 kpps lost what fell behind by more, where the old TPACKET_V3 ring lost nothing.
/// The forwarding (immediate) port at MTU 9000 must hold a backlog of 10000 small frames sent
/// while it is not read, as the V3 ring does, and hand over every one.
#[test]
fn an_immediate_port_at_jumbo_mtu_holds_a_backlog_as_v3_did() {
    if !netns::require_priv() {
        return;
    }
    const BACKLOG: u32 = 10_000;
    let l = NetnsLine::new().expect("netns line");
    for (n, i) in [(Node::A, "vA"), (Node::B, "vB0")] {
        l.ip_in(n, &["link", "set", i, "mtu", "9000"])
            .expect("set mtu 9000");
    }
    let frames: Vec<Vec<u8>> = (0..BACKLOG)
        .map(|s| netns::udp_frame(l.mac_b0, l.mac_a, 1, s))
        .collect();
    let (tx_ready, rx_ready) = std::sync::mpsc::channel();
    let (tx_sent, rx_sent) = std::sync::mpsc::channel::<()>();
    let got = std::thread::scope(|s| {
        let l2 = &l;
        let b = s.spawn(move || {
            l2.run_in(Node::B, move || {
                let opts = PortOptions {
                    immediate: true,
                    ..Default::default()
                };
                let mut p = AfPacket::open("vB0", &opts).expect("open vB0");
                tx_ready.send(()).unwrap();
                // Not read until every frame is sent: the ring holds the backlog.
                rx_sent.recv().unwrap();
                std::thread::sleep(Duration::from_millis(200));
                let mut b = linerate::mem::Batch::new();
                let mut seqs = std::collections::HashSet::new();
                let end = Instant::now() + Duration::from_secs(10);
                let mut idle = 0;
                while Instant::now() < end && idle < 50 {
                    p.rx(&mut b).expect("rx");
                    if b.is_empty() {
                        idle += 1;
                    } else {
                        idle = 0;
                    }
                    for q in b.iter() {
                        if let Some(s) = netns::udp_seq(q.data) {
                            seqs.insert(s);
                        }
                    }
                    b.clear();
                }
                seqs.len()
            })
        });
        rx_ready.recv().unwrap();
        l.run_in(Node::A, || {
            let sock = linerate::os::PacketSocket::open("vA").expect("packet socket on vA");
            for f in &frames {
                sock.send(f).expect("send on vA");
            }
        });
        tx_sent.send(()).unwrap();
        b.join().unwrap()
    });
    assert_eq!(got, BACKLOG as usize, "frames the port handed over");
}

/// vB1's transmit packet counter (what the kernel put on the wire from it).
fn tx_packets_b1(l: &NetnsLine) -> u64 {
    let out = l
        .ip_in(Node::B, &["-s", "-j", "link", "show", "vB1"])
        .expect("ip -s link");
    let j: serde_json::Value = serde_json::from_str(&out).expect("ip -j");
    j[0]["stats64"]["tx"]["packets"]
        .as_u64()
        .unwrap_or_else(|| panic!("no tx packets in {out}"))
}

/// fwd whose output's peer (vC) goes down mid-run: the kernel leaves the transmit ring's
/// frames requested; at the end those it never took are counted dropped (ring_full), not sent.
/// Every packet the summary calls sent on port 1 left vB1 (it said a whole ring, 512 frames,
/// more, left in the ring at exit).
#[test]
fn packets_left_in_the_ring_when_the_peer_is_down_are_not_counted_forwarded() {
    if !netns::require_priv() {
        return;
    }
    let bin = env!("CARGO_BIN_EXE_linerate");
    let l = NetnsLine::new().expect("netns line");
    let before = tx_packets_b1(&l);
    let mut fwd = Command::new("ip")
        .args(["netns", "exec", l.ns(Node::B), bin])
        .args(["fwd", "-i", "afpacket:vB0", "-o", "afpacket:vB1"])
        .args(["--json", "--period", "0", "-t", "2.5"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn linerate fwd");
    let mut lines = BufReader::new(fwd.stdout.take().unwrap()).lines();
    let first = lines.next().expect("start line").expect("read");
    assert!(first.contains("\"type\":\"start\""), "{first}");
    let gen = Command::new("ip")
        .args(["netns", "exec", l.ns(Node::A), bin])
        .args(["gen", "-o", "afpacket:vA", "-t", "1.2", "--rate", "50kpps"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn gen");
    std::thread::sleep(Duration::from_millis(400));
    l.ip_in(Node::C, &["link", "set", "vC", "down"])
        .expect("vC down");
    let g = gen.wait_with_output().expect("gen");
    assert!(g.status.success());
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert!(fwd.wait().expect("fwd").success(), "{rest:?}");
    let j: serde_json::Value = rest
        .iter()
        .filter_map(|s| serde_json::from_str::<serde_json::Value>(s).ok())
        .find(|j| j["type"] == "summary")
        .unwrap_or_else(|| panic!("no summary in {rest:?}"));
    let sent = j["ports"][1]["sent"]
        .as_u64()
        .unwrap_or_else(|| panic!("{j}"));
    let wire = tx_packets_b1(&l) - before;
    assert!(sent > 0, "{j}");
    assert_eq!(sent, wire, "sent per the summary vs vB1's tx counter: {j}");
    assert!(
        j["ports"][1]["drops_by_reason"]["ring_full"]
            .as_u64()
            .is_some_and(|d| d > 0),
        "vC was down for most of the run: {j}"
    );
}

//! `linerate fwd -i xdp:vB0 -o xdp:vB1` on an A — B — C line of network namespaces, C's veth
//! without an XDP program and with GRO off (the usual lab): the kernel engine would have every
//! frame discarded by the kernel (a veth whose peer has no NAPI drops XDP frames), so
//! `--engine kernel` is refused with the reason (exit 2) and `--engine auto` uses the xsk engine,
//! says why on standard error, and C receives every frame A sent. With GRO on in C, auto picks
//! the kernel engine and C again receives every frame. Needs root (skips otherwise, fails
//! instead under LINERATE_REQUIRE_PRIV=1).
#![deny(unsafe_code)]

use linerate_test_support::{line, netns};

use line::{NetnsLine, Node};
use linerate::mem::Batch;
use linerate::port::PortOptions;
use std::collections::HashSet;
use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const N: u32 = 2000;

/// Runs `linerate ARGS` in B to completion (bounded); returns (exit code, stdout, stderr).
fn run_b(l: &NetnsLine, args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new("timeout")
        .args(["20", "ip", "netns", "exec", l.ns(Node::B)])
        .arg(env!("CARGO_BIN_EXE_linerate"))
        .args(args)
        .output()
        .expect("run linerate");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Forwards vB0 → vB1 with `args` (the engine, ...) while A sends N frames and C captures them; returns the
/// start line, the summary line, fwd's standard error and the sequence numbers C received.
fn forward(
    l: &NetnsLine,
    args: &[&str],
) -> (serde_json::Value, serde_json::Value, String, HashSet<u32>) {
    let mut child = Command::new("ip")
        .args([
            "netns",
            "exec",
            l.ns(Node::B),
            env!("CARGO_BIN_EXE_linerate"),
        ])
        .args(["fwd", "-i", "xdp:vB0", "-o", "xdp:vB1", "--no-mac-updating"])
        .args(args)
        .args(["--json", "-t", "30", "--period", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn linerate fwd");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().expect("start line").expect("read");
    let start: serde_json::Value = serde_json::from_str(&first).expect("start JSON");
    let frames: Vec<Vec<u8>> = (0..N)
        .map(|s| netns::udp_frame(l.mac_b0, l.mac_a, (s % 16) as u16, s))
        .collect();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let got = std::thread::scope(|s| {
        let c = s.spawn(|| {
            l.run_in(Node::C, || {
                let mut p = linerate::open_rx("afpacket:vC", &PortOptions::default()).unwrap();
                ready_tx.send(()).unwrap();
                let mut got = HashSet::new();
                let mut b = Batch::new();
                let (mut last, end) = (Instant::now(), Instant::now() + Duration::from_secs(20));
                loop {
                    let quiet = if got.len() >= N as usize { 300 } else { 3000 };
                    if last.elapsed() >= Duration::from_millis(quiet) || Instant::now() >= end {
                        break;
                    }
                    if p.rx(&mut b).unwrap() > 0 {
                        last = Instant::now();
                    }
                    got.extend(b.iter().filter_map(|x| netns::udp_seq(x.data)));
                    b.clear();
                }
                got
            })
        });
        ready_rx.recv().unwrap();
        l.run_in(Node::A, || netns::send_raw("vA", &frames));
        c.join().unwrap()
    });
    // The PID of the child we started (ip netns exec execs linerate).
    let _ = linerate::os::signal(child.id(), libc::SIGINT);
    let t0 = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t0.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("fwd did not stop on SIGINT");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let summary = lines
        .map_while(Result::ok)
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(&l).ok())
        .find(|j| j["type"] == "summary")
        .expect("summary line");
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    (start, summary, err, got)
}

#[test]
fn fwd_never_picks_a_kernel_engine_whose_egress_discards() {
    if !netns::require_priv() {
        return;
    }
    let l = NetnsLine::new().expect("netns line");
    // Forced kernel engine: refused, naming the veth peer and what it lacks.
    let (code, _, err) = run_b(
        &l,
        &[
            "fwd", "-i", "xdp:vB0", "-o", "xdp:vB1", "--engine", "kernel", "-t", "5",
        ],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("vC") && err.contains("neither an XDP program nor GRO") && err.contains("xsk"),
        "{err}"
    );

    // auto: the xsk engine, with the reason on standard error; every frame arrives.
    let (start, summary, err, got) = forward(&l, &["--engine", "auto"]);
    assert_eq!(start["engine"], "xsk", "{start}");
    assert!(
        err.contains("--engine auto") && err.contains("vC") && err.contains("GRO"),
        "{err}"
    );
    assert_eq!(got.len(), N as usize, "C received every frame (xsk engine)");
    assert!(
        summary["ports"][1]["sent"].as_u64() >= Some(N as u64),
        "{summary}"
    );
    assert_eq!(summary["ports"][0]["dropped"], 0, "{summary}");

    // GRO on in C: the peer's NAPI takes XDP frames; auto picks the kernel engine.
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            l.ns(Node::C),
            "ethtool",
            "-K",
            "vC",
            "gro",
            "on",
        ])
        .output()
        .expect("ethtool");
    assert!(out.status.success(), "ethtool -K vC gro on: {out:?}");
    // One statistics line per -T interval (it printed every 10 ms once the first had passed).
    let (code, out, err) = run_b(
        &l,
        &[
            "fwd", "-i", "xdp:vB0", "-o", "xdp:vB1", "--engine", "kernel", "--json", "--period",
            "1", "-t", "3.5",
        ],
    );
    assert_eq!(code, Some(0), "{err}");
    let ticks = out
        .lines()
        .filter(|l| l.contains("\"type\":\"stats\""))
        .count();
    assert!(
        (2..=4).contains(&ticks),
        "{ticks} statistics lines in 3.5 s at -T 1: {out}"
    );
    let (start, summary, err, got) = forward(&l, &["--engine", "auto"]);
    assert_eq!(start["engine"], "kernel", "{start} {err}");
    assert_eq!(
        got.len(),
        N as usize,
        "C received every frame (kernel engine)"
    );
    assert!(
        summary["ports"][1]["sent"].as_u64() >= Some(N as u64),
        "{summary}"
    );
    assert_eq!(summary["ports"][0]["dropped"], 0, "{summary}");
}

/// A setting of vB0 in /sys/class/net, as B sees it.
fn napi_setting(l: &NetnsLine, file: &str) -> String {
    let out = Command::new("ip")
        .args(["netns", "exec", l.ns(Node::B), "cat"])
        .arg(format!("/sys/class/net/vB0/{file}"))
        .output()
        .expect("cat");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn busy_polling_forwards_every_frame_and_puts_the_device_back() {
    if !netns::require_priv() {
        return;
    }
    let l = NetnsLine::new().expect("netns line");
    let before = (
        napi_setting(&l, "napi_defer_hard_irqs"),
        napi_setting(&l, "gro_flush_timeout"),
    );
    assert_eq!(before, ("0".to_string(), "0".to_string()), "a fresh veth");
    // Busy polling is for AF_XDP sockets: the kernel engine refuses it, saying so.
    let (code, _, err) = run_b(
        &l,
        &[
            "fwd",
            "-i",
            "xdp:vB0",
            "-o",
            "xdp:vB1",
            "--engine",
            "kernel",
            "--busy-poll",
            "20",
        ],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--busy-poll") && err.contains("xsk"), "{err}");
    let (code, _, err) = run_b(
        &l,
        &[
            "fwd",
            "-i",
            "xdp:vB0",
            "-o",
            "xdp:vB1",
            "--busy-poll",
            "5000",
        ],
    );
    assert_eq!(code, Some(2), "out of range: {err}");
    let (start, summary, err, got) = forward(&l, &["--engine", "xsk", "--busy-poll", "20"]);
    assert_eq!(start["engine"], "xsk", "{start}");
    assert_eq!(got.len(), N as usize, "C received every frame: {err}");
    assert_eq!(summary["ports"][0]["received"], N as u64, "{summary}");
    assert_eq!(summary["ports"][0]["dropped"], 0, "{summary}");
    // The device's settings are back as they were.
    let after = (
        napi_setting(&l, "napi_defer_hard_irqs"),
        napi_setting(&l, "gro_flush_timeout"),
    );
    assert_eq!(after, before);
}

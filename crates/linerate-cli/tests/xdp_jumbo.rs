//! Jumbo frames through `xdp:` ports (AF_XDP multi-buffer) on veths of MTU 9000 between network
//! namespaces:
//! - `count -i xdp:vB -w` holds the same frames as tcpdump captured of the same sending (one
//!   after the other: an AF_XDP socket takes frames from the kernel's taps), byte for byte,
//!   no too_big, in native and generic attach, with 2 and 4 KiB UMEM frames;
//! - `fwd -i xdp:vB0 -o xdp:vB1` carries them whole, xsk and kernel engines, to C;
//! - `gen -o xdp:vA --size 9018` sends them whole;
//! - `--xdp-frame-size` other than 2048 or 4096, or with no xdp: port, is refused (exit 2).
//!
//! Needs root and tcpdump (skips otherwise; under LINERATE_REQUIRE_PRIV=1 a skip fails).
#![deny(unsafe_code)]

use linerate_test_support::{line, netns};

use line::{NetnsLine, Node};
use linerate::mem::Batch;
use linerate::port::PortOptions;
use netns::{NetnsPair, Side};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_linerate");

/// 50 frames of 9 014 B and 50 of 60 B, interleaved, from `src` to `dst` (an experimental
/// EtherType: no stack answers them).
fn frames(dst: [u8; 6], src: [u8; 6]) -> Vec<Vec<u8>> {
    let mut v = Vec::new();
    for i in 0..50u32 {
        for len in [9014usize, 60] {
            let mut f = Vec::with_capacity(len);
            f.extend_from_slice(&dst);
            f.extend_from_slice(&src);
            f.extend_from_slice(&[0x88, 0xb5]);
            f.extend_from_slice(&i.to_be_bytes());
            while f.len() < len {
                f.push((f.len() as u32 ^ i.wrapping_mul(7)) as u8);
            }
            v.push(f);
        }
    }
    v
}

/// The records of a pcap file (ours: 24-byte header, 16-byte record headers).
fn records(path: &Path) -> Vec<Vec<u8>> {
    let d = std::fs::read(path).unwrap_or_default();
    let mut out = Vec::new();
    let mut off = 24;
    while off + 16 <= d.len() {
        let incl = u32::from_le_bytes(d[off + 8..off + 12].try_into().unwrap()) as usize;
        let Some(r) = d.get(off + 16..off + 16 + incl) else {
            break;
        };
        out.push(r.to_vec());
        off += 16 + incl;
    }
    out
}

/// Only our frames (EtherType 0x88b5), in order.
fn ours(v: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    v.into_iter()
        .filter(|f| f.get(12..14) == Some(&[0x88, 0xb5][..]))
        .collect()
}

/// Where two lists of frames first differ: (index, length of each frame there), or None when
/// they are equal (never the frames themselves: 9 KiB each).
fn diff(got: &[Vec<u8>], want: &[Vec<u8>]) -> Option<(usize, Option<usize>, Option<usize>)> {
    (0..got.len().max(want.len()))
        .find(|&i| got.get(i) != want.get(i))
        .map(|i| (i, got.get(i).map(Vec::len), want.get(i).map(Vec::len)))
}

/// Children killed if the test ends early.
struct Kid(Option<Child>);

impl Drop for Kid {
    fn drop(&mut self) {
        if let Some(c) = &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// SIGINT to a child we started (ip netns exec execs the tool), then its output (bounded).
fn stop(mut k: Kid, what: &str) -> Output {
    let mut c = k.0.take().unwrap();
    let _ = linerate::os::signal(c.id(), libc::SIGINT);
    let t0 = Instant::now();
    while c.try_wait().unwrap().is_none() {
        if t0.elapsed() > Duration::from_secs(10) {
            let _ = c.kill();
            let _ = c.wait();
            panic!("{what} did not stop on SIGINT");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    c.wait_with_output().unwrap()
}

/// Runs `prog args` in namespace `ns` (None: ours), returned once its standard error or output has a line
/// containing `ready` (tcpdump's "listening", count's start line).
fn start(ns: Option<&str>, prog: &str, args: &[&str], ready: &str, on_stderr: bool) -> Kid {
    let mut cmd = match ns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns, prog]);
            c
        }
        None => Command::new(prog),
    };
    let mut c = cmd
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    let mut pipe: Box<dyn Read + Send> = if on_stderr {
        Box::new(c.stderr.take().unwrap())
    } else {
        Box::new(c.stdout.take().unwrap())
    };
    while pipe.read(&mut byte).unwrap_or(0) == 1 && byte[0] != b'\n' {
        line.push(byte[0]);
    }
    let line = String::from_utf8_lossy(&line).into_owned();
    assert!(line.contains(ready), "{prog} {args:?}: {line}");
    // The rest of the pipe is read (and dropped) by a thread so the child never blocks on it.
    std::thread::spawn(move || {
        let mut rest = Vec::new();
        let _ = pipe.read_to_end(&mut rest);
    });
    Kid(Some(c))
}

/// Waits until `path` stops growing (bounded), as a capture written packet by packet (1.3 s
/// quiet: tcpdump retires a ring block after its 1 s timeout).
fn settle(path: &Path) {
    let size = || std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    let t0 = Instant::now();
    let (mut last, mut since) = (size(), Instant::now());
    while since.elapsed() < Duration::from_millis(1300) && t0.elapsed() < Duration::from_secs(15) {
        std::thread::sleep(Duration::from_millis(50));
        let s = size();
        if s != last {
            (last, since) = (s, Instant::now());
        }
    }
}

struct Tmp(PathBuf);

impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tmp(tag: &str) -> Tmp {
    let d = std::env::temp_dir().join(format!("lr-xdp-jumbo-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    Tmp(d)
}

fn tcpdump_ok() -> bool {
    if Command::new("tcpdump").arg("--version").output().is_err() {
        linerate_test_support::skip("tcpdump is not installed (apt-get install tcpdump)");
        return false;
    }
    true
}

/// The bar: on a 9000-MTU veth, 50 frames of 9 014 B and 50 of 60 B sent to B; tcpdump on vB
/// captures them; the same sending again, and `count -i xdp:vB -w` holds the same 100 frames,
/// byte for byte, nothing dropped; native and generic attach, 2 and 4 KiB UMEM frames.
#[test]
fn count_on_xdp_holds_the_jumbo_frames_tcpdump_captured() {
    if !netns::require_priv() || !tcpdump_ok() {
        return;
    }
    let pair = NetnsPair::new().expect("netns pair");
    pair.no_ipv6().unwrap();
    for (side, i) in [(Side::A, "vA"), (Side::B, "vB")] {
        pair.ip_in(side, &["link", "set", i, "mtu", "9000"])
            .unwrap();
    }
    let t = tmp("count");
    let sent = frames(pair.mac_b, pair.mac_a);

    let td = t.0.join("tcpdump.pcap");
    let k = start(
        Some(pair.ns(Side::B)),
        "tcpdump",
        &[
            "-i", "vB", "-Q", "in", "-s", "0", "-U", "-B", "65536", "-n", "-w",
        ]
        .into_iter()
        .chain([td.to_str().unwrap()])
        .collect::<Vec<_>>(),
        "listening",
        true,
    );
    pair.run_in(Side::A, || netns::send_raw("vA", &sent));
    settle(&td);
    let o = stop(k, "tcpdump");
    assert!(o.status.success(), "tcpdump: {o:?}");
    let wire = ours(records(&td));
    assert_eq!(
        diff(&wire, &sent),
        None,
        "tcpdump captured what was sent ({} of {} frames)",
        wire.len(),
        sent.len()
    );

    for (attach, shown) in [("native", "xdp "), ("generic", "xdpgeneric")] {
        for fs in ["2048", "4096"] {
            let what = format!("count -i xdp:vB --xdp-attach {attach} --xdp-frame-size {fs}");
            let w = t.0.join(format!("xdp-{attach}-{fs}.pcap"));
            let args = [
                "count",
                "-i",
                "xdp:vB",
                "--xdp-attach",
                attach,
                "--xdp-frame-size",
                fs,
                "--json",
                "-q",
                "-t",
                "30",
                "-w",
                w.to_str().unwrap(),
            ];
            let k = start(Some(pair.ns(Side::B)), BIN, &args, "\"start\"", false);
            let link = pair.ip_in(Side::B, &["link", "show", "dev", "vB"]).unwrap();
            assert!(link.contains(shown), "{what}: {link}");
            pair.run_in(Side::A, || netns::send_raw("vA", &sent));
            settle(&w);
            let o = stop(k, &what);
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(!err.contains("no multi-buffer"), "{what}: {err}");
            let got = ours(records(&w));
            assert_eq!(
                diff(&got, &wire),
                None,
                "{what}: the frames tcpdump captured, byte for byte ({} of {}): {err}",
                got.len(),
                wire.len()
            );
        }
    }

    // A filter sees the whole length: `greater 9000` (libpcap's `len >= 9000`) keeps the 50
    // jumbo frames, `less 100` the 50 short ones.
    for (f, want) in [("greater 9000", 9014usize), ("less 100", 60)] {
        let w = t.0.join(format!("xdp-filter-{want}.pcap"));
        let args = [
            "count", "-i", "xdp:vB", "-f", f, "--json", "-q", "-t", "30", "-w",
        ];
        let args: Vec<&str> = args.into_iter().chain([w.to_str().unwrap()]).collect();
        let k = start(Some(pair.ns(Side::B)), BIN, &args, "\"start\"", false);
        pair.run_in(Side::A, || netns::send_raw("vA", &sent));
        settle(&w);
        stop(k, "count -f");
        let got = ours(records(&w));
        let keep: Vec<Vec<u8>> = wire.iter().filter(|x| x.len() == want).cloned().collect();
        assert_eq!(diff(&got, &keep), None, "count -i xdp:vB -f '{f}'");
    }
}

/// Frames C receives on afpacket:vC while A sends `sent` and B forwards with `args`; the
/// forwarder's summary line.
fn forward(l: &NetnsLine, args: &[&str], sent: &[Vec<u8>]) -> (Vec<Vec<u8>>, serde_json::Value) {
    let mut child = Command::new("ip")
        .args(["netns", "exec", l.ns(Node::B), BIN])
        .args(["fwd", "-i", "xdp:vB0", "-o", "xdp:vB1", "--no-mac-updating"])
        .args(args)
        .args(["--json", "-t", "30", "--period", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn linerate fwd");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().expect("start line").expect("read");
    assert!(first.contains("\"start\""), "{first}");
    let kid = Kid(Some(child));
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let got = std::thread::scope(|s| {
        let c = s.spawn(|| {
            l.run_in(Node::C, || {
                let mut p = linerate::open_rx("afpacket:vC", &PortOptions::default()).unwrap();
                ready_tx.send(()).unwrap();
                let mut got = Vec::new();
                let mut b = Batch::new();
                let (mut last, end) = (Instant::now(), Instant::now() + Duration::from_secs(15));
                loop {
                    let quiet = if got.len() >= sent.len() { 300 } else { 3000 };
                    if last.elapsed() >= Duration::from_millis(quiet) || Instant::now() >= end {
                        break;
                    }
                    if p.rx(&mut b).unwrap() > 0 {
                        last = Instant::now();
                    }
                    got.extend(b.iter().map(|x| x.data.to_vec()));
                    b.clear();
                }
                got
            })
        });
        ready_rx.recv().unwrap();
        l.run_in(Node::A, || netns::send_raw("vA", sent));
        c.join().unwrap()
    });
    let o = stop(kid, "fwd");
    let summary = String::from_utf8_lossy(&o.stdout)
        .lines()
        .chain(
            lines
                .map_while(Result::ok)
                .collect::<Vec<_>>()
                .iter()
                .map(|s| s.as_str()),
        )
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|j| j["type"] == "summary")
        .unwrap_or_default();
    (ours(got), summary)
}

/// fwd between xdp: ports carries jumbo frames whole: the xsk engine (gathered on receive,
/// sent in pieces) and the kernel engine (a frags-aware program redirecting through a DEVMAP;
/// GRO on in C so that C's veth takes XDP frames).
#[test]
fn fwd_between_xdp_ports_carries_jumbo_frames() {
    if !netns::require_priv() {
        return;
    }
    let l = NetnsLine::new().expect("netns line");
    for (n, i) in [
        (Node::A, "vA"),
        (Node::B, "vB0"),
        (Node::B, "vB1"),
        (Node::C, "vC"),
    ] {
        l.ip_in(n, &["link", "set", i, "mtu", "9000"]).unwrap();
    }
    let sent = frames(l.mac_b0, l.mac_a);
    let (got, summary) = forward(&l, &["--engine", "xsk"], &sent);
    assert_eq!(
        diff(&got, &sent),
        None,
        "xsk engine: C received every frame, byte for byte: {summary}"
    );

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
    let (got, summary) = forward(&l, &["--engine", "kernel"], &sent);
    assert_eq!(
        diff(&got, &sent),
        None,
        "kernel engine: C received every frame, byte for byte: {summary}"
    );
}

/// gen on an xdp: port sends 9 018-byte frames (with the CRC) whole, and 9 022-byte ones with
/// an 802.1Q tag (the MTU + 18: the tag's 4 bytes beyond it): the xsk engine (auto takes it:
/// live frames are one page each), at a --rate, exactly -c of them (gen's count = tcpdump's).
#[test]
fn gen_on_xdp_sends_jumbo_frames_whole() {
    if !netns::require_priv() || !tcpdump_ok() {
        return;
    }
    let pair = NetnsPair::new().expect("netns pair");
    pair.no_ipv6().unwrap();
    for (side, i) in [(Side::A, "vA"), (Side::B, "vB")] {
        pair.ip_in(side, &["link", "set", i, "mtu", "9000"])
            .unwrap();
    }
    let t = tmp("gen");
    let cases: [(&[&str], usize, bool); 2] = [
        (&["--size", "9018"], 9014, false),
        (&["--size", "9022", "--vlan", "10"], 9018, true),
    ];
    for (run, (args, len, tagged)) in cases.into_iter().enumerate() {
        let td = t.0.join(format!("tcpdump{run}.pcap"));
        let k = start(
            Some(pair.ns(Side::B)),
            "tcpdump",
            &[
                "-i", "vB", "-Q", "in", "-s", "0", "-U", "-B", "65536", "-n", "-w",
            ]
            .into_iter()
            .chain([td.to_str().unwrap(), "udp or (vlan and udp)"])
            .collect::<Vec<_>>(),
            "listening",
            true,
        );
        let o = Command::new("ip")
            .args(["netns", "exec", pair.ns(Side::A), BIN])
            .args([
                "gen", "-o", "xdp:vA", "-c", "40", "--rate", "2kpps", "--json",
            ])
            .args(args)
            .output()
            .unwrap();
        assert!(o.status.success(), "gen {args:?}: {o:?}");
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(out.contains("\"pkts\":40,"), "gen {args:?} sent 40: {out}");
        settle(&td);
        let o = stop(k, "tcpdump");
        assert!(o.status.success(), "tcpdump: {o:?}");
        let got = records(&td);
        assert_eq!(got.len(), 40, "{args:?}: tcpdump saw every frame");
        assert!(
            got.iter().all(|f| f.len() == len),
            "{args:?}: whole {len}-byte frames"
        );
        // The frames of one stream differ only in what gen varies: headers parse as UDP.
        let ip = if tagged { 16 } else { 12 };
        assert!(
            got.iter()
                .all(|f| f[ip..ip + 2] == [0x08, 0x00] && f[ip + 11] == 17),
            "{args:?}: UDP"
        );
        if tagged {
            assert!(got.iter().all(|f| f[12..16] == [0x81, 0x00, 0x00, 10]));
        }
    }
}

/// --xdp-frame-size takes 2048 or 4096 and applies to xdp: ports only (exit 2 otherwise).
#[test]
fn xdp_frame_size_is_refused_where_it_cannot_apply() {
    for (args, want) in [
        (
            &[
                "count",
                "-i",
                "mem:x",
                "--xdp-frame-size",
                "4096",
                "-c",
                "1",
            ][..],
            "applies to xdp: ports",
        ),
        (
            &["count", "-i", "xdp:lo", "--xdp-frame-size", "3000"][..],
            "2048 or 4096",
        ),
    ] {
        let o = Command::new(BIN).args(args).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

/// The cluster with an xdp: input (its UMEM is the segment's frames) carries jumbo frames
/// whole: `balance -i xdp:vB` gathers their pieces into the segment's big frames, and a
/// consumer's `count -i cluster:ID@0 -w` holds every frame sent, byte for byte, in order.
#[test]
fn cluster_with_an_xdp_input_carries_jumbo_frames() {
    if !netns::require_priv() {
        return;
    }
    let pair = NetnsPair::new().expect("netns pair");
    pair.no_ipv6().unwrap();
    for (side, i) in [(Side::A, "vA"), (Side::B, "vB")] {
        pair.ip_in(side, &["link", "set", i, "mtu", "9000"])
            .unwrap();
    }
    let t = tmp("cluster");
    let sent = frames(pair.mac_b, pair.mac_a);
    let id = (430_000 + std::process::id() % 10_000).to_string();
    let seg = || linerate_test_support::cluster_segment(&id);
    let master = Kid(Some(
        Command::new("ip")
            .args(["netns", "exec", pair.ns(Side::B), BIN, "balance"])
            .args(["-i", "xdp:vB", "-c", &id, "-n", "1", "--wait-consumers"])
            .args(["--json", "-q", "-t", "30"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn balance"),
    ));
    let t0 = Instant::now();
    while !seg().exists() {
        assert!(t0.elapsed() < Duration::from_secs(10), "no cluster segment");
        std::thread::sleep(Duration::from_millis(20));
    }
    // The consumer needs no namespace: the segment is in /dev/shm (or a hugetlbfs).
    let w = t.0.join("q0.pcap");
    let consumer = start(
        None,
        BIN,
        &[
            "count",
            "-i",
            &format!("cluster:{id}@0"),
            "--json",
            "-q",
            "-w",
        ]
        .into_iter()
        .chain([w.to_str().unwrap()])
        .collect::<Vec<_>>(),
        "\"start\"",
        false,
    );
    // The master puts its sockets in the XDP program's map once a consumer lends frames.
    std::thread::sleep(Duration::from_millis(500));
    pair.run_in(Side::A, || netns::send_raw("vA", &sent));
    settle(&w);
    let mo = stop(master, "balance");
    let co = stop(consumer, "count -i cluster:");
    let got = ours(records(&w));
    assert_eq!(
        diff(&got, &sent),
        None,
        "count -i cluster:{id}@0 holds every frame, byte for byte: {} {}",
        String::from_utf8_lossy(&mo.stdout),
        String::from_utf8_lossy(&co.stderr)
    );
}

//! Multi-queue interfaces, end to end through the `linerate` binary: on a veth with 4 receive
//! queues and traffic spread over all of them (sent through the qdisc layer, so the kernel's flow
//! hash picks the queue), `count -i xdp:IF` counts every frame of every queue. Needs root (skips
//! otherwise, fails instead under LINERATE_REQUIRE_PRIV=1).
#![deny(unsafe_code)]

use linerate_test_support::netns;

use netns::{NetnsPair, Side};
use std::collections::HashSet;
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

type Lines = std::io::Lines<BufReader<std::process::ChildStdout>>;

/// `n` UDP frames to port 9 over 64 flows, A → B.
fn frames(p: &NetnsPair, n: u32) -> Vec<Vec<u8>> {
    (0..n)
        .map(|s| netns::udp_frame(p.mac_b, p.mac_a, (s % 64) as u16, s))
        .collect()
}

/// Spawns `linerate ARGS` in namespace `side`, stdout piped.
fn spawn(p: &NetnsPair, side: Side, args: &[&str]) -> (Child, Lines) {
    let mut child = Command::new("ip")
        .args(["netns", "exec", p.ns(side), env!("CARGO_BIN_EXE_linerate")])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn linerate");
    let lines = BufReader::new(child.stdout.take().unwrap()).lines();
    (child, lines)
}

/// Waits (bounded) for `child` to end; returns its exit status and standard error.
fn finish(mut child: Child, secs: u64) -> (std::process::ExitStatus, String) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("linerate did not finish in {secs} s");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    (status, err)
}

/// Reads a classic pcap's records.
fn records(path: &std::path::Path) -> Vec<Vec<u8>> {
    let d = std::fs::read(path).expect("pcap written");
    let mut off = 24;
    let mut out = Vec::new();
    while off + 16 <= d.len() {
        let cap = u32::from_le_bytes(d[off + 8..off + 12].try_into().unwrap()) as usize;
        out.push(d[off + 16..off + 16 + cap].to_vec());
        off += 16 + cap;
    }
    out
}

fn tmp(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("linerate-queues-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

#[test]
fn count_on_xdp_iface_counts_every_queue() {
    if !netns::require_priv() {
        return;
    }
    const N: u32 = 3200;
    let p = NetnsPair::with_queues(4).expect("netns pair");
    let out = tmp("count.pcap");
    let n = N.to_string();
    let (child, mut lines) = spawn(
        &p,
        Side::B,
        &[
            "count",
            "-i",
            "xdp:vB",
            "-c",
            &n,
            "-t",
            "30",
            "--json",
            "-f",
            "udp dst port 9",
            "-w",
            out.to_str().unwrap(),
        ],
    );
    let first = lines.next().expect("start line").expect("read");
    assert!(first.contains("\"type\":\"start\""), "{first}");
    p.run_in(Side::A, || netns::send_raw("vA", &frames(&p, N)));
    let (status, err) = finish(child, 30);
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert!(status.success(), "count failed: {err}");
    let per_queue = netns::xdp_queue_packets(&p, Side::B, "vB");
    assert!(
        per_queue.len() == 4 && per_queue.iter().all(|&q| q > 0),
        "traffic on every queue: {per_queue:?}"
    );
    let summary: serde_json::Value = rest
        .iter()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|j| j["type"] == "summary")
        .expect("summary");
    assert_eq!(summary["pkts"], N, "{summary} (per queue {per_queue:?})");
    assert_eq!(summary["ended"], "count reached", "{summary}");
    let seqs: HashSet<u32> = records(&out)
        .iter()
        .filter_map(|f| netns::udp_seq(f))
        .collect();
    assert_eq!(seqs.len(), N as usize, "every frame once in the pcap");
    let _ = std::fs::remove_file(&out);
}

/// Frame `seq` of 256 UDP flows (source port 10000 + flow to port 9), every third one of a flow
/// sent back the other way (addresses and ports swapped), so both directions of a flow arrive,
/// often on different queues.
fn two_way_frames(p: &NetnsPair, n: u32) -> Vec<Vec<u8>> {
    (0..n)
        .map(|s| {
            let mut f = netns::udp_frame(p.mac_b, p.mac_a, (s % 256) as u16, s);
            if (s / 256) % 3 == 2 {
                let (ip, port) = (f[26..30].to_vec(), f[34..36].to_vec());
                f.copy_within(30..34, 26);
                f[30..34].copy_from_slice(&ip);
                f.copy_within(36..38, 34);
                f[36..38].copy_from_slice(&port);
            }
            f
        })
        .collect()
}

/// Writes `frames` as a classic pcap file (Ethernet), 1 µs apart.
fn write_pcap(path: &std::path::Path, frames: &[Vec<u8>]) {
    let mut d = 0xa1b2_c3d4u32.to_le_bytes().to_vec();
    d.extend_from_slice(&2u16.to_le_bytes());
    d.extend_from_slice(&4u16.to_le_bytes());
    for w in [0u32, 0, 65535, 1] {
        d.extend_from_slice(&w.to_le_bytes());
    }
    for (i, f) in frames.iter().enumerate() {
        let t = 1_700_000_000u64 * 1_000_000 + i as u64;
        for w in [
            (t / 1_000_000) as u32,
            (t % 1_000_000) as u32,
            f.len() as u32,
            f.len() as u32,
        ] {
            d.extend_from_slice(&w.to_le_bytes());
        }
        d.extend_from_slice(f);
    }
    std::fs::write(path, d).unwrap();
}

const FIELDS: &str = "proto,saddr,sport,daddr,dport,spkts,dpkts,sbytes,dbytes";

/// The UDP records of a CSV file, each with its lower endpoint first (a live capture may see a
/// flow's first packet in the other direction than the file), sorted.
fn canonical(path: &std::path::Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).expect("records written");
    let mut v: Vec<String> = text
        .lines()
        .filter_map(|l| {
            let c: Vec<&str> = l.split(',').collect();
            if c.len() != 9 || c[0] != "udp" {
                return None;
            }
            let (a, b) = ((c[1], c[2]), (c[3], c[4]));
            Some(if a <= b {
                c.join(",")
            } else {
                [c[0], c[3], c[4], c[1], c[2], c[6], c[5], c[8], c[7]].join(",")
            })
        })
        .collect();
    v.sort();
    v
}

/// `flows --threads 2` on a 4-queue veth reads the queues (xdp:) or a fanout group's sockets
/// (afpacket:) itself, one share per thread: every frame of every queue is counted and the
/// records equal those of one thread reading the same frames from a file.
#[test]
fn flows_threads_read_every_queue_and_give_the_records_of_one_thread() {
    if !netns::require_priv() {
        return;
    }
    const N: u32 = 6144;
    let p = NetnsPair::with_queues(4).expect("netns pair");
    p.no_ipv6().expect("no IPv6 chatter");
    let frames = two_way_frames(&p, N);
    let file = tmp("two-way.pcap");
    write_pcap(&file, &frames);
    let reference = tmp("reference.csv");
    let out = Command::new(env!("CARGO_BIN_EXE_linerate"))
        .args([
            "flows",
            "-i",
            file.to_str().unwrap(),
            "-q",
            "--fields",
            FIELDS,
        ])
        .args(["-w", reference.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let want = canonical(&reference);
    assert_eq!(want.len(), 256, "{want:?}");

    for (input, what) in [
        ("xdp:vB", "4 queues over 2 threads"),
        ("afpacket:vB", "fanout"),
    ] {
        let csv = tmp("live.csv");
        let mut child = Command::new("ip")
            .args([
                "netns",
                "exec",
                p.ns(Side::B),
                env!("CARGO_BIN_EXE_linerate"),
            ])
            .args([
                "flows",
                "-i",
                input,
                "--threads",
                "2",
                "--json",
                "--fields",
                FIELDS,
            ])
            .args(["-w", csv.to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn linerate");
        let mut err = BufReader::new(child.stderr.take().unwrap());
        let mut first = String::new();
        err.read_line(&mut first).unwrap();
        let start: serde_json::Value = serde_json::from_str(&first).expect("start line");
        assert!(
            start["plan"].as_str().is_some_and(|s| s.contains(what)),
            "{input}: {start}"
        );
        p.run_in(Side::A, || netns::send_raw("vA", &frames));
        // Until every frame was seen by the receiving side's queues, then a little more.
        let deadline = Instant::now() + Duration::from_secs(10);
        if input.starts_with("xdp:") {
            while netns::xdp_queue_packets(&p, Side::B, "vB")
                .iter()
                .sum::<u64>()
                < N as u64
                && Instant::now() < deadline
            {
                std::thread::sleep(Duration::from_millis(50));
            }
            let per_queue = netns::xdp_queue_packets(&p, Side::B, "vB");
            assert!(
                per_queue.len() == 4 && per_queue.iter().all(|&q| q > 0),
                "traffic on every queue: {per_queue:?}"
            );
        }
        std::thread::sleep(Duration::from_millis(500));
        // The PID of the child we started (ip netns exec execs linerate).
        let _ = linerate::os::signal(child.id(), libc::SIGINT);
        let t0 = Instant::now();
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if t0.elapsed() > Duration::from_secs(10) {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{input}: linerate flows did not stop on SIGINT");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut rest = String::new();
        err.read_to_string(&mut rest).unwrap();
        assert!(status.success(), "{input}: {rest}");
        let summary: serde_json::Value = rest
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|j| j["type"] == "summary")
            .unwrap_or_else(|| panic!("{input}: no summary in {rest}"));
        assert_eq!(summary["input_drops"]["kernel"], 0, "{input}: {summary}");
        let got = canonical(&csv);
        assert_eq!(
            got, want,
            "{input}: records of 2 threads differ from one thread's"
        );
        let _ = std::fs::remove_file(&csv);
    }
    let _ = std::fs::remove_file(&file);
    let _ = std::fs::remove_file(&reference);
}

/// The JSON lines `lines` gives until its end.
fn json_lines(lines: Lines) -> Vec<serde_json::Value> {
    lines
        .map_while(Result::ok)
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(&l).ok())
        .collect()
}

/// Each thread's packets in a summary or stats line, checked to add up to its total.
fn thread_pkts(j: &serde_json::Value) -> Vec<u64> {
    let per: Vec<u64> = j["threads"]
        .as_array()
        .unwrap_or_else(|| panic!("no per-thread figures in {j}"))
        .iter()
        .map(|t| t["pkts"].as_u64().expect("pkts"))
        .collect();
    assert_eq!(per.iter().sum::<u64>(), j["pkts"].as_u64().unwrap(), "{j}");
    per
}

/// `count -i xdp:IF` on a 4-queue veth runs one thread per queue (as pfcount_multichannel), each
/// reading its own queue: `-c N` stops every thread at exactly N packets in all, each thread
/// counted what its queue received, and the per-thread figures add up to the totals.
#[test]
fn count_runs_one_thread_per_queue_and_stops_at_count() {
    if !netns::require_priv() {
        return;
    }
    const N: u32 = 3200;
    let p = NetnsPair::with_queues(4).expect("netns pair");
    p.no_ipv6().expect("no IPv6 chatter");
    let n = N.to_string();
    let (child, mut lines) = spawn(
        &p,
        Side::B,
        &[
            "count",
            "-i",
            "xdp:vB",
            "-c",
            &n,
            "-t",
            "30",
            "--json",
            "--interval",
            "100ms",
            "-f",
            "udp dst port 9",
        ],
    );
    let first: serde_json::Value =
        serde_json::from_str(&lines.next().expect("start line").expect("read")).unwrap();
    assert_eq!(first["threads"], 4, "{first}");
    assert_eq!(
        first["thread_ports"],
        serde_json::json!(["xdp:vB@0", "xdp:vB@1", "xdp:vB@2", "xdp:vB@3"]),
        "{first}"
    );
    p.run_in(Side::A, || netns::send_raw("vA", &frames(&p, N)));
    let (status, err) = finish(child, 30);
    assert!(status.success(), "count failed: {err}");
    let all = json_lines(lines);
    let per_queue = netns::xdp_queue_packets(&p, Side::B, "vB");
    assert!(
        per_queue.len() == 4 && per_queue.iter().all(|&q| q > 0),
        "traffic on every queue: {per_queue:?}"
    );
    let summary = all
        .iter()
        .find(|j| j["type"] == "summary")
        .expect("summary");
    assert_eq!(summary["pkts"], N, "{summary} (per queue {per_queue:?})");
    assert_eq!(summary["ended"], "count reached", "{summary}");
    let per = thread_pkts(summary);
    assert_eq!(per.len(), 4, "{summary}");
    assert!(
        per.iter().all(|&t| t > 0),
        "every thread counted: {summary}"
    );
    // Each thread read its own queue: what it counted (and filtered) is what its queue got.
    for (i, t) in summary["threads"].as_array().unwrap().iter().enumerate() {
        let seen = t["pkts"].as_u64().unwrap() + t["filtered"].as_u64().unwrap();
        assert_eq!(seen, per_queue[i], "queue {i}: {summary} vs {per_queue:?}");
    }
    for j in all.iter().filter(|j| j["type"] == "stats") {
        thread_pkts(j);
    }
}

/// `count --threads 2` over 4 queues: each thread reads two queues; a time limit ends both;
/// every frame sent is counted: as many as tcpdump saw leave the other end of the veth (on the
/// receiving end the XDP program takes them before libpcap could see them).
#[test]
fn count_threads_share_queues_and_miss_nothing() {
    if !netns::require_priv() {
        return;
    }
    if !linerate_test_support::require_tool("tcpdump", "apt-get install tcpdump") {
        return;
    }
    const N: u32 = 4000;
    let p = NetnsPair::with_queues(4).expect("netns pair");
    p.no_ipv6().expect("no IPv6 chatter");
    let dump = tmp("threads-tcpdump.pcap");
    let mut tcpdump = Command::new("ip")
        .args([
            "netns",
            "exec",
            p.ns(Side::A),
            "tcpdump",
            "-i",
            "vA",
            "-n",
            "-U",
        ])
        .args(["-w", dump.to_str().unwrap(), "udp dst port 9"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tcpdump");
    let mut terr = BufReader::new(tcpdump.stderr.take().unwrap());
    let mut l = String::new();
    terr.read_line(&mut l).unwrap(); // "listening on vB ..."
    let (child, mut lines) = spawn(
        &p,
        Side::B,
        &[
            "count",
            "-i",
            "xdp:vB",
            "--threads",
            "2",
            "-t",
            "4",
            "--json",
            "-f",
            "udp dst port 9",
        ],
    );
    let first: serde_json::Value =
        serde_json::from_str(&lines.next().expect("start line").expect("read")).unwrap();
    assert_eq!(first["threads"], 2, "{first}");
    assert_eq!(
        first["thread_ports"],
        serde_json::json!(["xdp:vB@0,xdp:vB@2", "xdp:vB@1,xdp:vB@3"]),
        "{first}"
    );
    p.run_in(Side::A, || netns::send_raw("vA", &frames(&p, N)));
    let (status, err) = finish(child, 30);
    std::thread::sleep(Duration::from_millis(300));
    // The PID of the child we started.
    let _ = linerate::os::signal(tcpdump.id(), libc::SIGINT);
    let _ = tcpdump.wait();
    assert!(status.success(), "count failed: {err}");
    let all = json_lines(lines);
    let summary = all
        .iter()
        .find(|j| j["type"] == "summary")
        .expect("summary");
    assert_eq!(summary["ended"], "time limit", "{summary}");
    let per = thread_pkts(summary);
    assert!(per.len() == 2 && per.iter().all(|&t| t > 0), "{summary}");
    let seen_by_tcpdump = records(&dump).len() as u64;
    assert_eq!(seen_by_tcpdump, N as u64, "tcpdump saw every frame");
    assert_eq!(summary["pkts"], N, "{summary}");
    assert_eq!(summary["drops"], 0, "{summary}");
    let _ = std::fs::remove_file(&dump);
}

/// `fwd -i xdp:vB0 -o xdp:vB1 --engine xsk` on an A — B — C line of 4-queue veths runs one
/// forwarding thread per queue pair (as DPDK l2fwd with one lcore per queue): every thread
/// receives from its own input queue, C receives every frame A sent (tcpdump in C counts them),
/// and each thread's figures add up to the ports' totals.
#[test]
fn fwd_xsk_runs_one_thread_per_queue_pair_and_misses_nothing() {
    use linerate_test_support::line::{NetnsLine, Node};
    if !netns::require_priv() {
        return;
    }
    if !linerate_test_support::require_tool("tcpdump", "apt-get install tcpdump") {
        return;
    }
    const N: u32 = 4000;
    let l = NetnsLine::with_queues(4).expect("netns line");
    let dump = tmp("fwd-threads.pcap");
    let mut tcpdump = Command::new("ip")
        .args([
            "netns",
            "exec",
            l.ns(Node::C),
            "tcpdump",
            "-i",
            "vC",
            "-n",
            "-U",
        ])
        .args(["-w", dump.to_str().unwrap(), "udp dst port 9"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tcpdump");
    let mut terr = BufReader::new(tcpdump.stderr.take().unwrap());
    let mut listening = String::new();
    terr.read_line(&mut listening).unwrap();
    let mut child = Command::new("ip")
        .args([
            "netns",
            "exec",
            l.ns(Node::B),
            env!("CARGO_BIN_EXE_linerate"),
        ])
        .args(["fwd", "-i", "xdp:vB0", "-o", "xdp:vB1", "--no-mac-updating"])
        .args(["--engine", "xsk", "--json", "-t", "30", "--period", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn linerate fwd");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let start: serde_json::Value =
        serde_json::from_str(&lines.next().expect("start line").expect("read")).unwrap();
    assert_eq!(start["threads"], 4, "{start}");
    let frames: Vec<Vec<u8>> = (0..N)
        .map(|s| netns::udp_frame(l.mac_b0, l.mac_a, (s % 64) as u16, s))
        .collect();
    l.run_in(Node::A, || netns::send_raw("vA", &frames));
    // Until C saw every frame (bounded), then a little more.
    let deadline = Instant::now() + Duration::from_secs(15);
    let count_c = || {
        std::fs::read(&dump).map_or(0, |d| {
            let mut off = 24;
            let mut n = 0;
            while off + 16 <= d.len() {
                off += 16 + u32::from_le_bytes(d[off + 8..off + 12].try_into().unwrap()) as usize;
                n += 1;
            }
            n
        })
    };
    while count_c() < N as usize && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(300));
    // The children we started, by PID.
    let _ = linerate::os::signal(child.id(), libc::SIGINT);
    let _ = linerate::os::signal(tcpdump.id(), libc::SIGINT);
    let _ = tcpdump.wait();
    let (status, err) = finish(child, 15);
    assert!(status.success(), "fwd failed: {err}");
    let summary = json_lines(lines)
        .into_iter()
        .find(|j| j["type"] == "summary")
        .expect("summary");
    let seen_in_c: HashSet<u32> = records(&dump)
        .iter()
        .filter_map(|f| netns::udp_seq(f))
        .collect();
    assert_eq!(
        seen_in_c.len(),
        N as usize,
        "C received every frame: {summary}"
    );
    let threads = summary["threads"].as_array().expect("per-thread figures");
    assert_eq!(threads.len(), 4, "{summary}");
    let per: Vec<u64> = threads
        .iter()
        .map(|t| t["ports"][0]["received"].as_u64().unwrap())
        .collect();
    assert!(
        per.iter().all(|&r| r > 0),
        "every thread forwarded: {summary}"
    );
    for (k, what) in [(0, "received"), (1, "sent")] {
        let sum: u64 = threads
            .iter()
            .map(|t| t["ports"][k][what].as_u64().unwrap())
            .sum();
        assert_eq!(summary["ports"][k][what], sum, "{what}: {summary}");
    }
    assert!(
        summary["ports"][0]["received"].as_u64() >= Some(N as u64),
        "{summary}"
    );
    assert_eq!(summary["ports"][0]["dropped"], 0, "{summary}");
    assert_eq!(summary["ports"][1]["dropped"], 0, "{summary}");
    for k in 0..2 {
        let why: u64 = summary["ports"][k]["drops_by_reason"]
            .as_object()
            .expect("drops by reason")
            .values()
            .map(|v| v.as_u64().unwrap())
            .sum();
        assert_eq!(summary["ports"][k]["dropped"], why, "{summary}");
    }
    assert_eq!(summary["ended"], "interrupted", "{summary}");
    for (i, t) in threads.iter().enumerate() {
        assert_eq!(t["input"], format!("xdp:vB0@{i}"), "{summary}");
        assert_eq!(t["output"], format!("xdp:vB1@{i}"), "{summary}");
    }
    let _ = std::fs::remove_file(&dump);
}

/// `balance -i xdp:vB` on a 4-queue veth: the master (the distributor, as zbalance_ipc's) reads
/// every queue; every frame sent is distributed and delivered to the consumer threads.
#[test]
fn balance_master_reads_every_queue() {
    if !netns::require_priv() {
        return;
    }
    const N: u32 = 3200;
    let p = NetnsPair::with_queues(4).expect("netns pair");
    p.no_ipv6().expect("no IPv6 chatter");
    let (child, mut lines) = spawn(
        &p,
        Side::B,
        &[
            "balance",
            "--threads",
            "-i",
            "xdp:vB",
            "-n",
            "2",
            "-t",
            "4",
            "--json",
            "-f",
            "udp dst port 9",
            "-c",
            &(10_000 + std::process::id() % 50_000).to_string(),
        ],
    );
    // The first statistics line says the master runs.
    let _ = lines.next();
    p.run_in(Side::A, || netns::send_raw("vA", &frames(&p, N)));
    let (status, err) = finish(child, 30);
    assert!(status.success(), "balance failed: {err}");
    let per_queue = netns::xdp_queue_packets(&p, Side::B, "vB");
    assert!(
        per_queue.len() == 4 && per_queue.iter().all(|&q| q > 0),
        "traffic on every queue: {per_queue:?}"
    );
    let summary = json_lines(lines)
        .into_iter()
        .find(|j| j["type"] == "summary")
        .expect("summary");
    assert_eq!(summary["distributed"], N, "{summary}");
    assert_eq!(summary["delivered"], N, "{summary}");
}

//! Multi-queue interfaces, end to end through the `linerate` binary: on a veth with 4 receive
//! queues and traffic spread over all of them (sent through the qdisc layer, so the kernel's flow
//! hash picks the queue), `count -i xdp:IF` counts every frame of every queue. Needs root (skips
//! otherwise, fails instead under LINERATE_REQUIRE_PRIV=1).

#[path = "../../linerate/tests/netns/mod.rs"]
mod netns;

use netns::{NetnsPair, Side};
use std::collections::HashSet;
use std::io::{BufRead, BufReader};
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

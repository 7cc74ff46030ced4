//! `gen -o xdp:vA --rate R` as a receiver sees it: the XDP live-frames engine sends a rate in
//! runs (one every ~25 ms, the kernel's cost of a run), bursts an `xdp:` receiver's ring
//! drops (19.8 % of 100 kpps), so `--engine auto` sends a rate below 1 Mpps a thread on the
//! xsk engine (paced per packet) and says why; a live run states its run size. Needs root
//! (skips otherwise, fails instead under LINERATE_REQUIRE_PRIV=1).
#![deny(unsafe_code)]

use linerate_test_support::netns::{self, NetnsPair, Side};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

fn json_lines(out: &[u8]) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(out)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .collect()
}

fn in_ns(pair: &NetnsPair, side: Side) -> Command {
    let mut c = Command::new("ip");
    c.args([
        "netns",
        "exec",
        pair.ns(side),
        env!("CARGO_BIN_EXE_linerate"),
    ]);
    c
}

/// `in_ns`, at nice -19 (see [`through`]).
fn niced(pair: &NetnsPair, side: Side) -> Command {
    let mut c = Command::new("ip");
    c.args([
        "netns",
        "exec",
        pair.ns(side),
        "nice",
        "-n",
        "-19",
        env!("CARGO_BIN_EXE_linerate"),
    ]);
    c
}

/// Runs `count -i xdp:vB` in B for `n` frames of `udp dst port 9` (at most 8 s) while `gen`
/// (`gen_args`) sends from A; returns gen's JSON lines and count's summary.
///
/// The receiver runs at nice -19: what these tests measure is how gen spaces its frames, and
/// a receiver starved of CPU by the machine's other work (a 2-core CI runner compiling) lets
/// its 2 048-entry ring fill whatever the spacing: the kernel then drops frames (counted,
/// `kernel` in count's summary), up to 4 % of 50 000 seen under two busy loops at load 15.
fn through(
    pair: &NetnsPair,
    n: u64,
    gen_args: &[&str],
) -> (Vec<serde_json::Value>, serde_json::Value) {
    let mut count = niced(pair, Side::B)
        .args([
            "count",
            "-i",
            "xdp:vB",
            "-f",
            "udp dst port 9",
            "-c",
            &n.to_string(),
        ])
        .args(["-t", "8", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn count");
    let mut lines = BufReader::new(count.stdout.take().unwrap()).lines();
    let first = lines.next().expect("start line").expect("read");
    assert!(first.contains("\"type\":\"start\""), "{first}");
    let gen = in_ns(pair, Side::A)
        .args(["gen", "-o", "xdp:vA", "-c", &n.to_string(), "--json"])
        .args(gen_args)
        .output()
        .expect("run gen");
    assert!(
        gen.status.success(),
        "gen: {}",
        String::from_utf8_lossy(&gen.stderr)
    );
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let _ = count.wait();
    let summary = rest
        .iter()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|j| j["type"] == "summary")
        .unwrap_or_else(|| panic!("no count summary in {rest:?}"));
    (json_lines(&gen.stdout), summary)
}

#[test]
fn a_rate_reaches_an_xdp_receiver_without_loss() {
    if !netns::require_priv() {
        return;
    }
    let pair = NetnsPair::new().expect("netns pair");
    pair.no_ipv6().expect("no ipv6");
    const N: u64 = 50_000;
    // A loss that the sender's spacing causes comes back on every run (the live engine's
    // bursts lost 19.8 % each time); one from a receiver the machine's load starved of CPU
    // (kernel drops, up to 12 % seen at load 18, even at nice -19) comes and goes. So a run
    // that lost frames is measured again, at most three times in all: the claim is that a run
    // reaches the receiver whole, and every frame of every run is delivered or counted.
    let mut runs = Vec::new();
    for _ in 0..3 {
        let (gen, count) = through(&pair, N, &["--rate", "100kpps"]);
        let start = gen.iter().find(|j| j["type"] == "start").expect("start");
        assert_eq!(start["engine"], "xsk", "{start}");
        assert!(
            start["engine_why"].as_str().unwrap().contains("runs of"),
            "{start}"
        );
        let got = count["pkts"].as_u64().unwrap();
        let kernel = count["drops_by_reason"]["kernel"].as_u64().unwrap();
        // Nothing lost without a count: each frame was delivered or dropped by the kernel
        // (its ring full); nothing is dropped for another reason.
        assert_eq!(got + kernel, N, "{count}");
        assert_eq!(count["drops"].as_u64().unwrap(), kernel, "{count}");
        // The receiver's side: every frame (today's live engine lost 19.8 % of them).
        if got as f64 >= N as f64 * 0.999 {
            return;
        }
        runs.push(format!("{got} of {N}: {count}"));
    }
    panic!(
        "no run of three reached count -i xdp:vB whole:\n{}",
        runs.join("\n")
    );
}

#[test]
fn a_live_run_states_its_run_size() {
    if !netns::require_priv() {
        return;
    }
    let pair = NetnsPair::new().expect("netns pair");
    pair.no_ipv6().expect("no ipv6");
    const N: u64 = 20_000;
    let (gen, count) = through(&pair, N, &["--engine", "live", "--rate", "20kpps"]);
    let s = gen
        .iter()
        .find(|j| j["type"] == "summary")
        .expect("summary");
    assert_eq!(s["engine"], "live", "{s}");
    let runs = s["runs"].as_u64().unwrap();
    let mean = s["run_frames_mean"].as_f64().unwrap();
    let max = s["run_frames_max"].as_u64().unwrap();
    assert!(runs > 1, "{s}");
    // The mean is the frames over the runs; no run is above the largest.
    assert!(
        (mean * runs as f64 - s["program_sent"].as_f64().unwrap()).abs() < 1.0,
        "{s}"
    );
    assert!(max as f64 >= mean && max <= N, "{s}");
    // What arrived is counted, never more than was sent.
    assert!(count["pkts"].as_u64().unwrap() <= N, "{count}");
}

#[test]
fn auto_xsk_with_more_threads_than_queues_is_refused_with_both_ways_out() {
    if !netns::require_priv() {
        return;
    }
    let pair = NetnsPair::new().expect("netns pair");
    // A veth has one queue: two xsk threads cannot both bind it.
    let o = in_ns(&pair, Side::A)
        .args([
            "gen",
            "-o",
            "xdp:vA",
            "--rate",
            "100kpps",
            "--threads",
            "2",
            "-t",
            "200ms",
        ])
        .output()
        .expect("run gen");
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--threads 1"), "{err}");
    assert!(err.contains("--engine live"), "{err}");
    assert!(!err.contains("another AF_XDP socket"), "{err}");
    assert!(o.stdout.is_empty(), "{o:?}");
}

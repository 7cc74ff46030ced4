//! `linerate balance --threads` and `linerate demo` output: PF_RING ZC's per-thread format, JSON
//! lines, Prometheus text, egress to a pcap file, usage errors. Bounded in time; only processes
//! started here are killed.
#![deny(unsafe_code)]

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_linerate");

/// The JSON summary (the last line) of a run that ends within 30 s.
fn json_summary(args: &[&str]) -> serde_json::Value {
    let out = run(args, Duration::from_secs(30));
    let text = String::from_utf8_lossy(&out.stdout);
    let last = text.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| panic!("{e}: {text}"))
}

fn run(args: &[&str], limit: Duration) -> std::process::Output {
    let mut c = Command::new(BIN)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while c.try_wait().unwrap().is_none() {
        if t0.elapsed() > limit {
            let _ = c.kill();
            let _ = c.wait();
            panic!("linerate {args:?} did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    c.wait_with_output().unwrap()
}

#[test]
fn threads_print_pf_ring_zc_thread_blocks_and_the_accounting() {
    let out = run(
        &[
            "balance",
            "--threads",
            "-i",
            "source:300000",
            "-n",
            "2",
            "-m",
            "ip",
            "--interval",
            "50ms",
        ],
        Duration::from_secs(30),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(
        s.contains("=========================\nThread 0\nAbsolute Stats: ["),
        "{s}"
    );
    assert!(s.contains("Thread 1\nAbsolute Stats: ["), "{s}");
    assert!(s.contains(" pkts rcvd]["), "{s}");
    assert!(s.contains(" total pkts]["), "{s}");
    assert!(s.contains("Actual   Stats: ["), "{s}");
    assert!(s.contains("Aggregate Actual stats: [Captured "), "{s}");
    assert!(
        s.contains("Accounting: rx 300'000 = filtered 0 + distributed 300'000"),
        "{s}"
    );
    assert!(s.contains("[ok]"), "{s}");
}

#[test]
fn json_lines_parse_and_the_summary_accounts_for_everything() {
    let out = run(
        &[
            "balance",
            "--threads",
            "-i",
            "source:2000000",
            "-n",
            "2,1",
            "-m",
            "5tuple",
            "--json",
            "--interval",
            "10ms",
            "-f",
            "udp",
        ],
        Duration::from_secs(30),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("every line is JSON"))
        .collect();
    let sum = lines.last().unwrap();
    // Interval lines came before the summary: its rates are then not the only ones there were
    // (a summary that took the last interval's rate would differ from the run's below).
    assert!(
        lines.len() >= 2 && lines[0]["type"] != "summary",
        "no interval line in a 2 M packet run at 10 ms intervals: {} lines",
        lines.len()
    );
    assert_eq!(sum["type"], "summary");
    assert_eq!(sum["rx"], 2_000_000);
    assert_eq!(sum["invariant_ok"], true);
    assert_eq!(sum["filtered"], 0, "the source sends UDP only");
    assert_eq!(sum["queues"].as_array().unwrap().len(), 3);
    // The summary's rates are the whole run's, not its last interval's.
    let whole = 2_000_000.0 / (sum["elapsed_ms"].as_f64().unwrap() / 1e3);
    let pps = sum["rx_pps"].as_f64().unwrap();
    assert!(
        (pps - whole).abs() <= whole * 1e-6,
        "summary rx_pps {pps}, the run's {whole}"
    );
    let secs = sum["elapsed_ms"].as_f64().unwrap() / 1e3;
    for x in sum["queues"].as_array().unwrap() {
        let (pps, run) = (
            x["pps"].as_f64().unwrap(),
            x["delivered"].as_f64().unwrap() / secs,
        );
        assert!(
            (pps - run).abs() <= run * 1e-6,
            "queue {}: summary pps {pps}, the run's {run}",
            x["queue"]
        );
    }
    let t = sum["threads"].as_array().unwrap();
    let q = sum["queues"].as_array().unwrap();
    let offered = |x: &serde_json::Value| {
        x["delivered"].as_u64().unwrap()
            + ["ring_full", "consumer_gone", "no_frame", "unread"]
                .iter()
                .map(|r| x["drops"][r].as_u64().unwrap())
                .sum::<u64>()
    };
    for k in 0..3 {
        assert_eq!(
            t[k]["pkts"], q[k]["delivered"],
            "thread {k} got what was delivered to it"
        );
    }
    assert_eq!(
        offered(&q[2]),
        2_000_000,
        "application 1 is offered a full copy"
    );
    assert_eq!(
        offered(&q[0]) + offered(&q[1]),
        2_000_000,
        "application 0 is offered each packet once"
    );
}

#[test]
fn metrics_are_served_as_prometheus_text() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let addr = format!("127.0.0.1:{port}");
    let mut child = Command::new(BIN)
        .args([
            "balance",
            "--threads",
            "-i",
            "source",
            "-n",
            "2",
            "-t",
            "4",
            "--quiet",
            "--interval",
            "100ms",
        ])
        .args(["--metrics", &addr, "--metrics-linger", "0"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    let mut body = String::new();
    while t0.elapsed() < Duration::from_secs(4) {
        std::thread::sleep(Duration::from_millis(300));
        let Ok(mut c) = std::net::TcpStream::connect(&addr) else {
            continue;
        };
        c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        body.clear();
        let _ = c.read_to_string(&mut body);
        if body.contains("linerate_cluster_delivered_total") {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(body.starts_with("HTTP/1.1 200 OK"), "{body}");
    assert!(
        body.contains("# TYPE linerate_cluster_rx_packets_total counter"),
        "{body}"
    );
    assert!(body.contains("linerate_cluster_dropped_total{cluster=\"10\",queue=\"1\",app=\"0\",reason=\"ring_full\"}"), "{body}");
    assert!(
        body.contains("linerate_cluster_thread_packets_total{cluster=\"10\",thread=\"0\"}"),
        "{body}"
    );
}

#[test]
fn egress_queue_to_a_pcap_file() {
    let dir = std::env::temp_dir().join(format!("lr-egress-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("q1.pcap");
    let spec = format!("1:{}", f.display());
    let out = run(
        &[
            "balance",
            "--threads",
            "-i",
            "source:10000",
            "-n",
            "2",
            "-m",
            "round-robin",
            "-r",
            &spec,
            "--quiet",
        ],
        Duration::from_secs(30),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(s.contains("Egress Q 1 -> pcap:"), "{s}");
    assert!(s.contains("[Sent "), "{s}");
    let c = run(
        &["count", "-i", f.to_str().unwrap(), "--json", "-q"],
        Duration::from_secs(20),
    );
    let j: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&c.stdout).lines().last().unwrap()).unwrap();
    assert_eq!(j["pkts"], 5000);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn usage_errors_exit_2() {
    for args in [
        &["balance", "-i", "source", "-n", "0"][..],
        &["balance", "-i", "source", "-m", "nope"][..],
        &[
            "balance",
            "--threads",
            "-i",
            "source",
            "-n",
            "2",
            "-r",
            "5:x.pcap",
        ][..],
    ] {
        let out = run(args, Duration::from_secs(20));
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The demo's short form: every run bounded (0.2 s at line rate, 0.2 s unpaced, at most 2
/// search runs of 0.1 s per test).
const DEMO_SHORT: [&str; 6] = ["-t", "200ms", "--steps", "2", "--step-time", "100ms"];

#[test]
fn demo_prints_pf_ring_zcs_four_cluster_tests_side_by_side_with_a_verdict_each() {
    let mut args = vec!["demo"];
    args.extend(DEMO_SHORT);
    let out = run(&args, Duration::from_secs(90));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = String::from_utf8_lossy(&out.stdout);
    for t in ["=== Test 1.", "=== Test 2.", "=== Test 3.", "=== Test 10."] {
        assert!(s.contains(t), "{t} missing:\n{s}");
    }
    // The columns: PF_RING's, ours paced at line rate, at the highest lossless rate, unpaced.
    let heads: Vec<&str> = s
        .lines()
        .filter(|l| l.contains("PF_RING (10 GbE)"))
        .collect();
    assert_eq!(heads.len(), 4, "{s}");
    for h in heads {
        let cols: Vec<&str> = h
            .split("  ")
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .collect();
        assert_eq!(
            cols,
            [
                "PF_RING (10 GbE)",
                "paced at line rate",
                "highest lossless",
                "unpaced maximum"
            ],
            "{s}"
        );
    }
    // Each rate asked beside the one achieved: 14.88 Mpps asked (10 GbE line rate in 64 B
    // frames), then the captured figures measured, one cell per column.
    let asked: Vec<&str> = s
        .lines()
        .filter(|l| l.trim_start().starts_with("asked pps"))
        .collect();
    assert_eq!(asked.len(), 4, "{s}");
    for l in &asked {
        assert!(l.contains("line rate") && l.contains("14'880'952"), "{l}");
        assert!(l.contains("as fast as taken"), "{l}");
    }
    let captured: Vec<&str> = s
        .lines()
        .filter(|l| l.trim_start().starts_with("captured pps"))
        .collect();
    assert_eq!(captured.len(), 4, "{s}");
    for l in &captured {
        assert_eq!(l.split_whitespace().count(), 2 + 4, "{l}");
    }
    assert!(s.contains("14'881'605.27"), "{s}");
    // The PF_RING column fits its rows: every row has its own five cells (label aside).
    for l in s.lines().filter(|l| l.trim_start().starts_with("app ")) {
        assert!(l.ends_with(|c: char| c.is_ascii_digit() || c == '-'), "{l}");
    }
    assert!(!s.contains("(not given;"), "{s}");
    // One verdict per test, each naming what limits it when it does not keep up.
    let verdicts: Vec<&str> = s
        .lines()
        .filter(|l| l.trim_start().starts_with("Verdict: "))
        .collect();
    assert_eq!(verdicts.len(), 4, "{s}");
    for v in &verdicts {
        assert!(
            v.contains("keeps up with 14.88 Mpps")
                || (v.contains("does not keep up with 14.88 Mpps") && v.contains("Limit: ")),
            "{v}"
        );
    }
    assert_eq!(s.matches("[ok]").count(), 4, "{s}");
    assert!(
        s.contains("consumer process 2 (linerate count -i cluster:"),
        "{s}"
    );
}

#[test]
fn demo_quiet_prints_only_the_tables_and_verdicts() {
    let mut args = vec!["demo", "-q", "--only", "1"];
    args.extend(DEMO_SHORT);
    let out = run(&args, Duration::from_secs(60));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(s.starts_with("=== Test 1."), "{s}");
    assert!(
        !s.contains("running") && !s.contains("linerate demo:"),
        "{s}"
    );
    assert!(!s.contains("=== Test 2."), "{s}");
    assert_eq!(
        s.lines()
            .filter(|l| l.trim_start().starts_with("Verdict: "))
            .count(),
        1,
        "{s}"
    );
    assert!(
        s.trim_end()
            .lines()
            .last()
            .unwrap()
            .trim_start()
            .starts_with("Verdict: "),
        "{s}"
    );
}

#[test]
fn demo_paced_at_another_rate_shows_it_beside_what_was_achieved() {
    let out = run(
        &[
            "demo", "-q", "--only", "2", "-t", "200ms", "--rate", "1kpps", "--steps", "0",
        ],
        Duration::from_secs(60),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(s.contains("paced at 1'000 pps"), "{s}");
    let asked = s
        .lines()
        .find(|l| l.trim_start().starts_with("asked pps"))
        .unwrap();
    assert!(asked.contains(" 1'000 "), "{asked}");
    assert_eq!(
        s.lines()
            .filter(|l| l.trim_start().starts_with("Verdict: "))
            .count(),
        1,
        "{s}"
    );
}

#[test]
fn a_lua_function_picks_queues_drops_and_fans_out() {
    let dir = std::env::temp_dir().join(format!("lr-lua-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("b.lua");
    // byte 30 is the last byte of the source address: 0 → drop, odd → queue 1 and the copy
    // application (fan-out), even → queue 0 and the copy application.
    std::fs::write(
        &f,
        "function balance(pkts, n)\n  local r = {}\n  for i = 1, n do\n    local b = pkts[i]:getByte(29)\n    if b == 0 then r[i] = false\n    else r[i] = { b % 2, 2 } end\n  end\n  return r\nend\n",
    )
    .unwrap();
    let out = run(
        &[
            "balance",
            "--threads",
            "-i",
            "source:25600",
            "-n",
            "2,1",
            "-m",
            &format!("lua:{}", f.display()),
            "--json",
            "--slots",
            "65536",
        ],
        Duration::from_secs(60),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().last().unwrap()).unwrap();
    assert_eq!(j["invariant_ok"], true, "{j}");
    // the source's 4096 flows: source addresses 10.0.x.y cycle y through 0..255
    assert_eq!(j["filtered"], 100, "one packet in 256 has y = 0");
    assert_eq!(j["distributed"], 25_500);
    assert_eq!(j["destinations"], 51_000);
    let bad = dir.join("bad.lua");
    std::fs::write(&bad, "function balance(p, n)\n  return nil + 1\nend\n").unwrap();
    let out = run(
        &[
            "balance",
            "--threads",
            "-i",
            "source:1000",
            "-m",
            &format!("lua:{}", bad.display()),
        ],
        Duration::from_secs(30),
    );
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.lua:2:") && err.lines().count() == 1,
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `balance -i source --source-rate R`: the summary gives the rate achieved next to the one
/// asked, and says when it fell short (1 Gpps cannot be reached by one master).
#[test]
fn the_source_rate_asked_is_shown_with_the_rate_achieved() {
    let args = [
        "balance",
        "--threads",
        "-i",
        "source:100000",
        "--source-rate",
        "1Gpps",
        "-n",
        "1",
    ];
    let out = run(&[&args[..], &["--json"]].concat(), Duration::from_secs(30));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let sum: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(sum["rx"], 100_000, "{sum}");
    let r = &sum["source_rate"];
    assert_eq!(r["asked_pps"], 1e9, "{sum}");
    let got = r["achieved_pps"].as_f64().expect("achieved_pps");
    // At least what the summary's own figures give (its time also holds the consumers' drain,
    // after the master stopped reading the source).
    let floor = 100_000.0 / (sum["elapsed_ms"].as_f64().unwrap() / 1e3);
    assert!(got < 1e9, "{sum}");
    assert!(got >= floor * 0.99, "{got} vs {floor}: {sum}");
    let out = run(&args, Duration::from_secs(30));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines().any(
            |l| l.starts_with("Source rate: asked 1'000'000'000 pps, achieved")
                && l.contains("less than asked")
        ),
        "{text}"
    );
}

/// How packets reached the segment is said: the built-in source and a pcap file are read
/// straight into its frames ("Copies: none"), a lower `--max-pkt-len` makes the master copy
/// (and count the long packets as too_big), and a record longer than any cluster carries is an
/// input drop, printed, never silent.
#[test]
fn the_summary_says_what_was_copied_and_what_the_input_dropped() {
    let dir = std::env::temp_dir().join(format!("lr-copies-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("mixed.pcap");
    let mut file = Vec::new();
    for w in [0xa1b2_c3d4u32, 0x0004_0002, 0, 0, 262_144, 1] {
        file.extend_from_slice(&w.to_le_bytes());
    }
    for (i, n) in [60usize, 200_000, 60, 9000, 1514].into_iter().enumerate() {
        for w in [i as u32, 0, n as u32, n as u32] {
            file.extend_from_slice(&w.to_le_bytes());
        }
        file.extend(std::iter::repeat_n(i as u8, n));
    }
    std::fs::write(&f, &file).unwrap();
    let path = f.to_str().unwrap();
    let text = |args: &[&str]| {
        let out = run(args, Duration::from_secs(30));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let s = text(&["balance", "--threads", "-i", "source:5000", "-n", "2", "-q"]);
    assert!(
        s.contains("Copies: none, the input wrote into the segment's frames"),
        "{s}"
    );
    assert!(!s.contains("Input drops"), "{s}");

    let s = text(&["balance", "--threads", "-i", path, "-n", "1", "-q"]);
    assert!(s.contains("rx 4 = filtered 0 + distributed 4"), "{s}");
    assert!(s.contains("delivered 4"), "{s}");
    assert!(s.contains("Copies: none"), "{s}");
    assert!(
        s.contains("Input drops (before the master): too_big=1"),
        "{s}"
    );

    let s = text(&[
        "balance",
        "--threads",
        "-i",
        path,
        "-n",
        "1",
        "-q",
        "--max-pkt-len",
        "1500",
    ]);
    assert!(s.contains("rx 5 = filtered 0 + distributed 5"), "{s}");
    assert!(s.contains("delivered 2"), "{s}");
    assert!(s.contains("too_big 3"), "{s}");
    assert!(
        s.contains("Copies: 2 packets copied into the segment"),
        "{s}"
    );

    let j = json_summary(&[
        "balance",
        "--threads",
        "-i",
        path,
        "-n",
        "1",
        "-q",
        "--json",
    ]);
    assert_eq!(j["copied"], 0, "{j}");
    assert_eq!(j["input_drops"], 1, "{j}");
    assert_eq!(j["delivered"], 4, "{j}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A classic pcap file of records `sizes` (record `k` is `sizes[k]` bytes of `fill + k`,
/// recorded at second `k + 1` and microsecond `fill`), records up to 256 KiB.
fn pcap_of(sizes: &[usize], fill: u8) -> Vec<u8> {
    let mut file = Vec::new();
    for w in [0xa1b2_c3d4u32, 0x0004_0002, 0, 0, 262_144, 1] {
        file.extend_from_slice(&w.to_le_bytes());
    }
    for (k, &n) in sizes.iter().enumerate() {
        for w in [k as u32 + 1, u32::from(fill), n as u32, n as u32] {
            file.extend_from_slice(&w.to_le_bytes());
        }
        file.extend(std::iter::repeat_n(fill.wrapping_add(k as u8), n));
    }
    file
}

/// The enhanced packet blocks of a little-endian pcapng file: (interface id, timestamp in the
/// writer's nanoseconds, bytes).
fn pcapng_packets(file: &[u8]) -> Vec<(u32, u64, Vec<u8>)> {
    let word = |o: usize| u32::from_le_bytes(file[o..o + 4].try_into().unwrap());
    let mut v = Vec::new();
    let mut o = 0;
    while o + 12 <= file.len() {
        let (kind, len) = (word(o), word(o + 4) as usize);
        assert!(
            len >= 12 && o + len <= file.len(),
            "block at {o}: length {len}"
        );
        if kind == 6 {
            let ts = u64::from(word(o + 12)) << 32 | u64::from(word(o + 16));
            let cap = word(o + 20) as usize;
            v.push((word(o + 8), ts, file[o + 28..o + 28 + cap].to_vec()));
        }
        o += len;
    }
    v
}

/// Several pcap files read as one (`-i a.pcap,b.pcap`) are read straight into the segment's
/// frames, as one file is: no copy, a record past a regular frame in a big frame, one longer
/// than any cluster carries dropped by the reader and printed; and what reaches the queue is
/// what the copying path delivers (a lower `--max-pkt-len` makes the master copy), byte for
/// byte, in the same order, with the same interface of each file.
#[test]
fn several_pcap_files_read_as_one_are_not_copied() {
    let dir = std::env::temp_dir().join(format!("lr-aggfiles-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (a, b) = (dir.join("a.pcap"), dir.join("b.pcap"));
    let a_sizes = [60usize, 9000, 200_000, 1514, 60];
    let b_sizes = [100usize, 60, 9000, 128];
    std::fs::write(&a, pcap_of(&a_sizes, 0x10)).unwrap();
    std::fs::write(&b, pcap_of(&b_sizes, 0x40)).unwrap();
    let input = format!("{},{}", a.display(), b.display());
    let balance = |out: &str, more: &[&str]| {
        let spec = format!("0:{}", dir.join(out).display());
        let mut args = vec!["balance", "--threads", "-i", &input, "-n", "1", "-q"];
        args.extend_from_slice(&["-r", &spec]);
        args.extend_from_slice(more);
        let out = run(&args, Duration::from_secs(30));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };

    let s = balance("lent.pcapng", &[]);
    assert!(
        s.contains("Copies: none, the input wrote into the segment's frames"),
        "{s}"
    );
    assert!(s.contains("rx 8 = filtered 0 + distributed 8"), "{s}");
    assert!(s.contains("delivered 8"), "{s}");
    assert!(s.contains("Egress Q 0 -> pcap:"), "{s}");
    assert!(s.contains("8 pkts sent"), "{s}");
    assert!(
        s.contains("Input drops (before the master): too_big=1"),
        "{s}"
    );

    let s = balance("copied.pcapng", &["--max-pkt-len", "16000"]);
    assert!(
        s.contains("Copies: 8 packets copied into the segment"),
        "{s}"
    );
    assert!(s.contains("delivered 8"), "{s}");

    let lent = pcapng_packets(&std::fs::read(dir.join("lent.pcapng")).unwrap());
    let copied = pcapng_packets(&std::fs::read(dir.join("copied.pcapng")).unwrap());
    // Each file's records in its order (one batch holds a whole file), `a` first; the
    // 200,000-byte record is the one dropped.
    let want: Vec<(u32, u64, Vec<u8>)> = [(0u32, &a_sizes[..], 0x10u8), (1, &b_sizes[..], 0x40)]
        .into_iter()
        .flat_map(|(iface, sizes, fill)| {
            sizes
                .iter()
                .enumerate()
                .filter(|(_, &n)| n < 200_000)
                .map(move |(k, &n)| {
                    let ts = (k as u64 + 1) * 1_000_000_000 + u64::from(fill) * 1000;
                    (iface, ts, vec![fill.wrapping_add(k as u8); n])
                })
        })
        .collect();
    assert_eq!(lent.len(), 8);
    assert!(lent == want, "lent: {:?}", summary(&lent));
    assert!(lent == copied, "copied: {:?}", summary(&copied));

    let j = json_summary(&[
        "balance",
        "--threads",
        "-i",
        &input,
        "-n",
        "1",
        "-q",
        "--json",
    ]);
    assert_eq!(j["copied"], 0, "{j}");
    assert_eq!(j["input_drops"], 1, "{j}");
    assert_eq!(j["delivered"], 8, "{j}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// (interface, timestamp, length) of each packet, for a failure message.
fn summary(p: &[(u32, u64, Vec<u8>)]) -> Vec<(u32, u64, usize)> {
    p.iter().map(|(i, t, d)| (*i, *t, d.len())).collect()
}

#[test]
fn demo_stopped_by_sigint_prints_what_it_measured_judges_no_cut_run_and_exits_1() {
    // A search long enough that the signal lands in it or in a run before it.
    let mut c = Command::new(BIN)
        .args([
            "demo",
            "-q",
            "--only",
            "1",
            // The line-rate run itself lasts 5 s, so that the signal at 1.5 s lands in it: with
            // a short run, a machine that keeps up at line rate skips the search and finishes
            // before the signal (it failed a clean-clone run that way).
            "-t",
            "5s",
            "--steps",
            "20",
            "--step-time",
            "3s",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    // The PID of a child this test started and has not reaped.
    let _ = linerate::os::signal(c.id(), 2);
    let t0 = Instant::now();
    while c.try_wait().unwrap().is_none() {
        if t0.elapsed() > Duration::from_secs(10) {
            let _ = c.kill();
            let _ = c.wait();
            panic!("demo did not stop within 10 s of one SIGINT");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = c.wait_with_output().unwrap();
    let s = String::from_utf8_lossy(&out.stdout);
    let e = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{s}\n{e}");
    assert!(e.contains("interrupted before the end"), "{s}\n{e}");
    let verdict = s
        .lines()
        .find(|l| l.trim_start().starts_with("Verdict: "))
        .unwrap_or_else(|| panic!("no verdict: {s}"));
    assert!(verdict.contains("interrupted"), "{verdict}");
}

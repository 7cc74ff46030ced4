//! `linerate watch` along a line of namespaces A — B — C, B forwarding (ip_forward) and
//! dropping one UDP packet in ten at its input (bpf/test_drop_nth.o on vB0's tc ingress): the
//! loss is found inside B and marked, within 1 % of the truth (what `gen` sent in A less what
//! `count` received in C); the summary's JSON has its documented shape; a missing namespace or
//! interface is a usage error (exit 2); one SIGINT stops the watch with its summary. Needs root
//! for the namespaces (skips otherwise, fails under LINERATE_REQUIRE_PRIV=1); the error and
//! signal tests on this namespace's loopback run anywhere.
#![deny(unsafe_code)]

use linerate_test_support::{line, netns};

use line::{mac_str, NetnsLine, Node};
use serde_json::Value;
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_linerate")
}

/// A child process killed (by its PID) if the test ends before it does.
struct Reaped(Option<Child>);

impl Reaped {
    fn spawn(cmd: &mut Command) -> Reaped {
        Reaped(Some(
            cmd.stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}")),
        ))
    }

    fn child(&mut self) -> &mut Child {
        self.0.as_mut().unwrap()
    }

    /// Waits at most `limit` for the end; returns (exit code, stdout, stderr).
    fn finish(mut self, limit: Duration) -> (Option<i32>, String, String) {
        let mut c = self.0.take().unwrap();
        let t0 = Instant::now();
        let status = loop {
            if let Some(s) = c.try_wait().unwrap() {
                break Some(s);
            }
            if t0.elapsed() > limit {
                let _ = c.kill();
                let _ = c.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut out = String::new();
        let mut err = String::new();
        if let Some(mut o) = c.stdout.take() {
            let _ = o.read_to_string(&mut out);
        }
        if let Some(mut e) = c.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        assert!(
            status.is_some(),
            "still running after {limit:?}: {out}\n{err}"
        );
        (status.and_then(|s| s.code()), out, err)
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        if let Some(c) = &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn sigint(c: &Child) {
    // The PID of a child this test started and has not reaped.
    let r = if linerate::os::signal(c.id(), libc::SIGINT).is_ok() {
        0
    } else {
        -1
    };
    assert_eq!(r, 0);
}

fn lines(out: &str) -> Vec<Value> {
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn summary(out: &str) -> Value {
    lines(out)
        .into_iter()
        .find(|j| j["type"] == "summary")
        .unwrap_or_else(|| panic!("no summary in {out}"))
}

fn hop<'a>(s: &'a Value, label: &str) -> &'a Value {
    s["hops"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["hop"] == label)
        .unwrap_or_else(|| panic!("no hop {label} in {s}"))
}

/// A — B — C with addresses, B forwarding 198.18.0.0/24 → 198.19.0.0/24 to C's MAC (a
/// permanent neighbour: no ARP on the way), C with no route back (no ICMP errors either).
fn forwarding_line() -> NetnsLine {
    let l = NetnsLine::new().expect("namespaces");
    let ip = |n: Node, args: &[&str]| {
        l.ip_in(n, args).unwrap_or_else(|e| panic!("{e}"));
    };
    ip(Node::A, &["addr", "add", "198.18.0.1/24", "dev", "vA"]);
    ip(Node::B, &["addr", "add", "198.18.0.2/24", "dev", "vB0"]);
    ip(Node::B, &["addr", "add", "198.19.0.1/24", "dev", "vB1"]);
    ip(Node::C, &["addr", "add", "198.19.0.2/24", "dev", "vC"]);
    ip(
        Node::B,
        &[
            "neigh",
            "replace",
            "198.19.0.2",
            "lladdr",
            &mac_str(&l.mac_c),
            "dev",
            "vB1",
            "nud",
            "permanent",
        ],
    );
    let st = Command::new("ip")
        .args(["netns", "exec", l.ns(Node::B), "sysctl", "-qw"])
        .arg("net.ipv4.ip_forward=1")
        .status()
        .unwrap();
    assert!(st.success());
    l
}

fn ethtool_k(l: &NetnsLine, n: Node, dev: &str, what: &[&str]) {
    let out = Command::new("ip")
        .args(["netns", "exec", l.ns(n), "ethtool", "-K", dev])
        .args(what)
        .output()
        .expect("run ethtool");
    assert!(
        out.status.success(),
        "ethtool -K {dev} {what:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn tc(l: &NetnsLine, n: Node, args: &[&str]) {
    let out = Command::new("tc")
        .arg("-n")
        .arg(l.ns(n))
        .args(args)
        .output()
        .expect("run tc");
    assert!(
        out.status.success(),
        "tc {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Starts `linerate watch PATH --json` and waits for its start line; the rest of its output
/// comes from the thread returned.
fn start_watch(path: &str, extra: &[&str]) -> (Reaped, Value, std::thread::JoinHandle<String>) {
    let mut w = Reaped::spawn(
        Command::new(bin())
            .args(["watch", path, "--json"])
            .args(extra),
    );
    let mut first = String::new();
    let out = w.child().stdout.take().unwrap();
    let mut r = BufReader::new(out);
    r.read_line(&mut first).unwrap();
    let start: Value = serde_json::from_str(&first).unwrap_or_else(|e| {
        let mut err = String::new();
        let _ = w.child().stderr.take().unwrap().read_to_string(&mut err);
        panic!("{e}: '{first}' {err}")
    });
    assert_eq!(start["type"], "start", "{start}");
    let rest = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = r.read_to_string(&mut s);
        s
    });
    (w, start, rest)
}

#[test]
fn loss_inside_the_middle_box_is_found_and_marked() {
    if !netns::require_priv() {
        return;
    }
    let l = forwarding_line();
    let obj = concat!(env!("CARGO_MANIFEST_DIR"), "/../../bpf/test_drop_nth.o");
    tc(&l, Node::B, &["qdisc", "add", "dev", "vB0", "clsact"]);
    tc(
        &l,
        Node::B,
        &[
            "filter",
            "add",
            "dev",
            "vB0",
            "ingress",
            "bpf",
            "direct-action",
            "object-file",
            obj,
            "section",
            "tc",
        ],
    );
    // A veth with GRO has a NAPI context, and receives every frame through it when the
    // sender has no TSO (otherwise it hands frames to netif_rx: the per-CPU backlog polls them).
    ethtool_k(&l, Node::B, "vB0", &["gro", "on"]);
    ethtool_k(&l, Node::C, "vC", &["gro", "on"]);
    ethtool_k(&l, Node::A, "vA", &["tso", "off"]);
    ethtool_k(&l, Node::B, "vB1", &["tso", "off"]);
    let [a, b, c] = &l.ns;
    let path = format!("{a}:vA,{b}:vB0,{b}:vB1,{c}:vC");
    let (mut w, start, rest) = start_watch(&path, &["--interval", "500ms", "-t", "30"]);
    assert!(start["polls_off"].is_null(), "{start}");
    let hops: Vec<&str> = start["path"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["hop"].as_str().unwrap())
        .collect();
    assert_eq!(
        hops,
        [
            format!("{a}:vA"),
            format!("{b}:vB0"),
            format!("{b}:vB1"),
            format!("{c}:vC")
        ]
    );
    // The receiver: every UDP packet to port 9 that reaches C.
    let count = Reaped::spawn(
        Command::new("ip")
            .args(["netns", "exec", c, bin(), "count", "-i", "afpacket:vC"])
            .args(["-t", "6", "--json", "-q", "-f", "udp dst port 9"]),
    );
    std::thread::sleep(Duration::from_millis(700));
    const N: u64 = 20_000;
    let gen = Reaped::spawn(
        Command::new("ip")
            .args(["netns", "exec", a, bin(), "gen", "-o", "afpacket:vA"])
            .args(["--dst-mac", &mac_str(&l.mac_b0)])
            .args(["--src-ip", "198.18.0.1", "--dst-ip", "198.19.0.2"])
            .args(["--sport", "1000-1099", "--dport", "9"])
            .args(["--rate", "10kpps", "-c", &N.to_string(), "--json", "-q"]),
    );
    let (code, gout, gerr) = gen.finish(Duration::from_secs(30));
    assert_eq!(code, Some(0), "gen: {gout} {gerr}");
    let sent = summary(&gout)["pkts"].as_u64().unwrap();
    assert_eq!(sent, N, "{gout}");
    let (code, cout, cerr) = count.finish(Duration::from_secs(30));
    assert_eq!(code, Some(0), "count: {cout} {cerr}");
    let received = summary(&cout)["pkts"].as_u64().unwrap();
    let truth = sent - received;
    // The drop program takes exactly the source ports that are multiples of 10.
    assert_eq!(truth, N / 10, "sent {sent}, received {received}");
    sigint(w.child());
    let (code, _, err) = w.finish(Duration::from_secs(10));
    let out = rest.join().unwrap();
    assert_eq!(code, Some(0), "watch: {err}\n{out}");
    let all = lines(&out);
    assert!(
        all.iter().filter(|j| j["type"] == "interval").count() >= 4,
        "{out}"
    );
    let s = summary(&out);
    // The summary's shape: per hop the counters, every drop counter by name, lost_before.
    for h in s["hops"].as_array().unwrap() {
        for k in [
            "rx_packets",
            "tx_packets",
            "rx_bytes",
            "tx_bytes",
            "lost_before",
        ] {
            assert!(h[k].is_u64() || h[k].is_i64(), "{k} in {h}");
        }
        let d = h["drops"].as_object().unwrap();
        for k in [
            "rx_dropped",
            "tx_dropped",
            "rx_missed_errors",
            "qdisc_drops",
        ] {
            assert!(d[k].is_u64(), "{k} in {h}");
        }
    }
    assert_eq!(s["hops"].as_array().unwrap().len(), 4);
    let b0 = hop(&s, &format!("{b}:vB0"));
    let b1 = hop(&s, &format!("{b}:vB1"));
    let vc = hop(&s, &format!("{c}:vC"));
    let va = hop(&s, &format!("{a}:vA"));
    assert!(va["tx_packets"].as_u64().unwrap() >= N, "{va}");
    assert!(vc["rx_packets"].as_u64().unwrap() >= received, "{vc}");
    let lost = b1["lost_before"].as_i64().unwrap();
    let diff = (lost - truth as i64).unsigned_abs();
    assert!(
        diff * 100 <= truth,
        "watch says {lost} lost inside B, the truth is {truth}: {s}"
    );
    assert_eq!(s["most_lost"], format!("{b}:vB1"), "{s}");
    // The drop counter that says where: B's ingress classifier on vB0.
    let q = b0["drops"]["ingress_qdisc_drops"].as_u64().unwrap();
    assert!(
        (q as i64 - truth as i64).unsigned_abs() * 100 <= truth,
        "{q} vs {truth}"
    );
    // Packets per poll at vB0 (the napi:napi_poll tracepoint through bpf/napi_poll.o): every
    // packet vB0 received came through a poll of its NAPI context, each poll took between
    // 0 and the budget (64), and the histogram holds every poll.
    let p = &b0["polls"];
    let polls = p["polls"].as_u64().unwrap();
    let pkts = p["packets"].as_u64().unwrap();
    let rx = b0["rx_packets"].as_u64().unwrap();
    assert!(polls > 0, "{p}");
    assert!(
        pkts.abs_diff(rx) <= 64 + rx / 100,
        "{pkts} packets in polls, {rx} received: {p}"
    );
    let (min, max) = (
        p["per_poll_min"].as_u64().unwrap(),
        p["per_poll_max"].as_u64().unwrap(),
    );
    let avg = p["per_poll_avg"].as_f64().unwrap();
    assert!(
        (min as f64..=max as f64).contains(&avg) && (1..=64).contains(&max),
        "{p}"
    );
    let hist: Vec<u64> = p["hist"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    assert_eq!(hist.iter().sum::<u64>(), polls, "{p}");
    assert!(p["full_budget"].as_u64().unwrap() <= hist[7], "{p}");
    // Every interval's range lies within the run's.
    for j in all.iter().filter(|j| j["type"] == "interval") {
        let q = &j["hops"][1]["polls"];
        if q["polls"].as_u64().unwrap_or(0) > 0 {
            let (lo, hi) = (
                q["per_poll_min"].as_u64().unwrap(),
                q["per_poll_max"].as_u64().unwrap(),
            );
            assert!(min <= lo && hi <= max && lo <= hi, "{q} vs {p}");
        }
    }
    // A and B's vB1 receive nothing from the path: no polls of theirs.
    assert_eq!(va["polls"]["polls"], 0, "{va}");
    // Nothing lost on the veths.
    assert!(b0["lost_before"].as_i64().unwrap().abs() <= 2, "{b0}");
    assert!(vc["lost_before"].as_i64().unwrap().abs() <= 2, "{vc}");
    // The intervals mark the same hop while traffic flows.
    let marked: Vec<&Value> = all
        .iter()
        .filter(|j| j["type"] == "interval" && j["hops"][2]["lost_before"].as_i64() > Some(100))
        .collect();
    assert!(!marked.is_empty(), "{out}");
    for j in marked {
        assert_eq!(j["most_lost"], format!("{b}:vB1"), "{j}");
    }
}

#[test]
fn text_tables_mark_the_hop_and_name_the_counter() {
    if !netns::require_priv() {
        return;
    }
    let l = forwarding_line();
    let obj = concat!(env!("CARGO_MANIFEST_DIR"), "/../../bpf/test_drop_nth.o");
    tc(&l, Node::B, &["qdisc", "add", "dev", "vB0", "clsact"]);
    tc(
        &l,
        Node::B,
        &[
            "filter", "add", "dev", "vB0", "ingress", "bpf", "da", "obj", obj, "sec", "tc",
        ],
    );
    let [a, b, c] = &l.ns;
    let path = format!("{a}:vA,{b}:vB0,{b}:vB1,{c}:vC");
    let w =
        Reaped::spawn(Command::new(bin()).args(["watch", &path, "--interval", "300ms", "-t", "3"]));
    std::thread::sleep(Duration::from_millis(500));
    let gen = Reaped::spawn(
        Command::new("ip")
            .args(["netns", "exec", a, bin(), "gen", "-o", "afpacket:vA"])
            .args(["--dst-mac", &mac_str(&l.mac_b0)])
            .args(["--src-ip", "198.18.0.1", "--dst-ip", "198.19.0.2"])
            .args(["--sport", "1000-1099", "--dport", "9"])
            .args(["--rate", "5kpps", "-c", "5000", "-q"]),
    );
    let (code, _, gerr) = gen.finish(Duration::from_secs(30));
    assert_eq!(code, Some(0), "{gerr}");
    let (code, out, err) = w.finish(Duration::from_secs(20));
    assert_eq!(code, Some(0), "{err}\n{out}");
    assert!(out.contains("Summary over"), "{out}");
    let sum = &out[out.find("Summary over").unwrap()..];
    let row = sum
        .lines()
        .find(|r| r.trim_start().starts_with(&format!("{b}:vB1")))
        .unwrap();
    assert!(row.ends_with("<== most lost"), "{row}");
    assert!(row.contains("500"), "{row}");
    let row0 = sum
        .lines()
        .find(|r| r.trim_start().starts_with(&format!("{b}:vB0")))
        .unwrap();
    assert!(row0.contains("ingress_qdisc_drops=500"), "{row0}");
    assert!(
        sum.contains(&format!(
            "most packets vanished at {b}:vB1: 500 of 5'000 (10.00 %) inside {b}"
        )),
        "{sum}"
    );
    // Interval tables: one row per hop, in path order.
    let first = out.lines().position(|r| r.contains("rx pkt/s")).unwrap();
    let rows: Vec<&str> = out.lines().skip(first + 1).take(4).collect();
    for (r, h) in rows.iter().zip(["vA", "vB0", "vB1", "vC"]) {
        assert!(r.trim_start().contains(&format!(":{h} ")), "{r}");
    }
}

#[test]
fn a_missing_namespace_or_interface_is_a_usage_error() {
    let out = Command::new(bin())
        .args(["watch", "lr-no-such-namespace-xyz:eth0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        e.contains("no network namespace 'lr-no-such-namespace-xyz'") && e.contains("ip netns"),
        "{e}"
    );
    let out = Command::new(bin())
        .args(["watch", "lo,lr-no-such-if0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        e.contains("no interface 'lr-no-such-if0' in this namespace"),
        "{e}"
    );
    for bad in [",lo", "lo,lo", "a/b:lo", "lo:"] {
        let out = Command::new(bin()).args(["watch", bad]).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("bad path"),
            "{bad}"
        );
    }
    for (flag, v) in [
        ("--interval", "0"),
        ("--interval", "1e30"),
        ("-t", "0"),
        ("-t", "nan"),
    ] {
        let out = Command::new(bin())
            .args(["watch", "lo", flag, v])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{flag} {v}");
    }
    if !netns::require_priv() {
        return;
    }
    let l = NetnsLine::new().expect("namespaces");
    let b = l.ns(Node::B);
    let out = Command::new(bin())
        .args(["watch", &format!("{b}:vB0,{b}:vB7")])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        e.contains(&format!("no interface 'vB7' in namespace {b}"))
            && e.contains(&format!("ip -n {b} link")),
        "{e}"
    );
}

#[test]
fn one_sigint_stops_with_the_summary() {
    let (mut w, _, rest) = start_watch("lo", &["--interval", "100ms"]);
    std::thread::sleep(Duration::from_millis(600));
    let t0 = Instant::now();
    sigint(w.child());
    let (code, _, err) = w.finish(Duration::from_secs(5));
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    assert_eq!(code, Some(0), "{err}");
    let out = rest.join().unwrap();
    let all = lines(&out);
    assert!(all.iter().any(|j| j["type"] == "interval"), "{out}");
    let s = all.last().unwrap();
    assert_eq!(s["type"], "summary");
    assert_eq!(s["hops"][0]["hop"], "lo");
    assert!(s["secs"].as_f64().unwrap() > 0.3, "{s}");
}

#[test]
fn metrics_are_served_while_watching() {
    let mut w = Reaped::spawn(Command::new(bin()).args([
        "watch",
        "lo",
        "--interval",
        "100ms",
        "-t",
        "20",
        "--metrics",
        "127.0.0.1:0",
    ]));
    let mut r = BufReader::new(w.child().stdout.take().unwrap());
    let mut addr = None;
    for _ in 0..5 {
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        if let Some(a) = line.trim().strip_prefix("Metrics on http://") {
            addr = Some(a.trim_end_matches("/metrics").to_string());
            break;
        }
    }
    let addr = addr.expect("metrics address printed");
    std::thread::sleep(Duration::from_millis(400));
    let mut c = std::net::TcpStream::connect(&addr).unwrap();
    use std::io::Write;
    c.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    let mut got = String::new();
    c.read_to_string(&mut got).unwrap();
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
    assert!(
        got.contains("linerate_packets_total{port=\"lo\",hop=\"lo\",dir=\"rx\"}"),
        "{got}"
    );
    assert!(
        got.contains(
            "linerate_drops_total{port=\"lo\",hop=\"lo\",dir=\"rx\",reason=\"rx_dropped\"}"
        ),
        "{got}"
    );
    sigint(w.child());
    let (code, _, err) = w.finish(Duration::from_secs(5));
    assert_eq!(code, Some(0), "{err}");
}

#[test]
fn without_root_the_poll_columns_say_why_and_the_rest_works() {
    // As an unprivileged user (setpriv from root; as is otherwise): no BPF, so no polls.
    let mut cmd = if euid_is_root() {
        let mut c = Command::new("setpriv");
        c.args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
        ])
        .arg(bin());
        c
    } else {
        Command::new(bin())
    };
    let out = cmd
        .args(["watch", "lo", "--interval", "200ms", "-t", "1", "--json"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let all = lines(&String::from_utf8_lossy(&out.stdout));
    let why = all[0]["polls_off"]
        .as_str()
        .unwrap_or_else(|| panic!("{}", all[0]));
    assert!(why.contains("needs root"), "{why}");
    let s = all.last().unwrap();
    assert_eq!(s["type"], "summary");
    assert!(s["hops"][0]["polls"].is_null(), "{s}");
    assert!(s["hops"][0]["rx_packets"].is_u64(), "{s}");
    // And as text: the columns say n/a and the note says why.
    let out = Command::new(bin())
        .args([
            "watch",
            "lo",
            "--interval",
            "200ms",
            "-t",
            "1",
            "--no-polls",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let t = String::from_utf8_lossy(&out.stdout);
    assert!(
        t.contains("packets per poll are not counted: not asked for (--no-polls)"),
        "{t}"
    );
    let row = t
        .lines()
        .find(|r| r.trim_start().starts_with("lo ") && r.contains("n/a"))
        .unwrap_or_else(|| panic!("{t}"));
    assert!(row.contains("n/a"), "{row}");
}

fn euid_is_root() -> bool {
    linerate::os::is_root()
}

//! `linerate sweep` (netperf's UDP_STREAM by message size): through a veth pair to a receiver
//! it starts in the far namespace (one row per size, received ≤ sent, rates consistent with
//! counts and time); a tiny receive buffer whose drops the row names; a forwarding box
//! (A — B — C) whose slow egress loses messages, named by `--watch`; against `sweep --serve`
//! on loopback, and Ctrl-C there; bad flags exit 2. The namespace tests need root (skip
//! otherwise, fail under LINERATE_REQUIRE_PRIV=1); the loopback and flag tests run anywhere.
#![deny(unsafe_code)]

use linerate_test_support::{line, netns};

use line::{mac_str, NetnsLine, Node};
use netns::{NetnsPair, Side};
use serde_json::Value;
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Output, Stdio};
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

fn run_in_ns(ns: &str, args: &[&str]) -> Output {
    let r = Reaped::spawn(
        Command::new("ip")
            .args(["netns", "exec", ns, bin(), "sweep"])
            .args(args),
    );
    let (code, out, err) = r.finish(Duration::from_secs(40));
    Output {
        status: std::os::unix::process::ExitStatusExt::from_raw(code.unwrap_or(1) << 8),
        stdout: out.into_bytes(),
        stderr: err.into_bytes(),
    }
}

fn lines(out: &str) -> Vec<Value> {
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn rows(out: &str) -> Vec<Value> {
    lines(out)
        .into_iter()
        .filter(|j| j["type"] == "size")
        .collect()
}

fn u(v: &Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or_else(|| panic!("no {k} in {v}"))
}

fn f(v: &Value, k: &str) -> f64 {
    v[k].as_f64().unwrap_or_else(|| panic!("no {k} in {v}"))
}

/// The figures of a row agree with each other: rates times time are the counts, nothing is
/// received that was not sent, lost is sent less received.
fn consistent(r: &Value) {
    let (sent, recv, size) = (u(r, "sent"), u(r, "received"), u(r, "size"));
    let secs = f(r, "elapsed");
    assert!(recv <= sent, "{r}");
    assert_eq!(u(r, "lost"), sent - recv, "{r}");
    assert_eq!(u(r, "received_bytes"), recv * size, "{r}");
    for (rate, n) in [("tx_pps", sent), ("rx_pps", recv)] {
        let back = f(r, rate) * secs;
        assert!(
            (back - n as f64).abs() <= 1.0 + n as f64 * 0.001,
            "{rate} * elapsed = {back}, counted {n}: {r}"
        );
    }
    let mbps = f(r, "tx_mbps");
    assert!(
        (mbps - f(r, "tx_pps") * size as f64 * 8.0 / 1e6).abs() <= 0.01 + mbps * 1e-6,
        "{r}"
    );
    let pct = f(r, "loss_pct");
    if sent > 0 {
        assert!(
            (pct - (sent - recv) as f64 * 100.0 / sent as f64).abs() < 1e-6,
            "{r}"
        );
    }
}

#[test]
fn a_row_per_size_through_a_veth_pair() {
    if !netns::require_priv() {
        return;
    }
    let p = NetnsPair::new().expect("namespaces");
    let to = format!("{}:{}", p.b, p.if_b);
    let o = run_in_ns(
        &p.a,
        &[
            "--to",
            &to,
            "--sizes",
            "64,512,1472",
            "--time",
            "1",
            "--json",
        ],
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let all = lines(&out);
    assert_eq!(all[0]["type"], "start", "{out}");
    assert_eq!(all[0]["dst"], "198.18.0.2:12866", "{out}");
    let r = rows(&out);
    let sizes: Vec<u64> = r.iter().map(|x| u(x, "size")).collect();
    assert_eq!(sizes, [64, 512, 1472], "{out}");
    for x in &r {
        consistent(x);
        assert!(u(x, "received") > 0, "{x}");
        let secs = f(x, "elapsed");
        assert!((0.99..1.5).contains(&secs), "{x}");
        assert_eq!(x["stopped"], false);
    }
    let s = all.last().unwrap();
    assert_eq!(s["type"], "summary", "{out}");
    assert_eq!(s["sizes"].as_array().unwrap().len(), 3);
    assert_eq!(s["stopped"], false);
    // The table: a header and one row per size, its first column the size.
    let o = run_in_ns(
        &p.a,
        &["--to", &to, "--sizes", "18,1000", "--time", "200ms"],
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}");
    assert!(out.contains("UDP_STREAM to 198.18.0.2:12866"), "{out}");
    for size in ["18", "1000"] {
        let row = out
            .lines()
            .find(|l| l.split_whitespace().next() == Some(size))
            .unwrap_or_else(|| panic!("no row for {size}: {out}"));
        assert_eq!(row.split_whitespace().count(), 11, "{row}");
    }
}

#[test]
fn a_tiny_receive_buffer_drops_and_the_row_says_so() {
    if !netns::require_priv() {
        return;
    }
    let p = NetnsPair::new().expect("namespaces");
    let to = format!("{}:{}", p.b, p.if_b);
    let path = format!("{}:{},{}:{}", p.a, p.if_a, p.b, p.if_b);
    let o = run_in_ns(
        &p.a,
        &[
            "--to", &to, "--sizes", "1472", "--time", "1", "--rcvbuf", "1", "--watch", &path,
            "--json",
        ],
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let start = &lines(&out)[0];
    assert_eq!(start["rcvbuf_asked"], 1, "{start}");
    // The kernel's smallest buffer, not what was asked: the granted one is shown.
    assert!(
        u(start, "rcvbuf") > 1 && u(start, "rcvbuf") < 10_000,
        "{start}"
    );
    let r = &rows(&out)[0];
    consistent(r);
    let drops = u(r, "socket_drops");
    assert!(drops > 0, "{r}");
    assert!(u(r, "lost") >= drops, "{r}");
    // What the socket dropped is the loss, but for what the veth's backlog dropped (seen by
    // watch as link drops).
    assert!(r["watch"].is_object(), "{r}");
    let o = run_in_ns(
        &p.a,
        &[
            "--to", &to, "--sizes", "1472", "--time", "300ms", "--rcvbuf", "1",
        ],
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("dropped by the receiving socket (its receive buffer was full"),
        "{out}"
    );
}

#[test]
fn frames_over_a_linerate_port_are_counted_by_a_port_on_the_far_end() {
    if !netns::require_priv() {
        return;
    }
    let p = NetnsPair::new().expect("namespaces");
    p.no_ipv6().unwrap();
    let to = format!("{}:{}", p.b, p.if_b);
    let path = format!("{}:{},{}:{}", p.a, p.if_a, p.b, p.if_b);
    for port in ["afpacket:vA", "xdp:vA"] {
        let o = run_in_ns(
            &p.a,
            &[
                "--raw", port, "--to", &to, "--sizes", "60,1514", "--time", "500ms", "--watch",
                &path, "--json",
            ],
        );
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success(),
            "{out}\n{}",
            String::from_utf8_lossy(&o.stderr)
        );
        let start = &lines(&out)[0];
        assert_eq!(start["test"], "RAW", "{start}");
        assert_eq!(start["dst"], "198.18.0.2:12866", "{start}");
        let r = rows(&out);
        let sizes: Vec<u64> = r.iter().map(|x| u(x, "size")).collect();
        // With the CRC, as gen's and rfc2544's; 60 can only be without it: taken as 64.
        assert_eq!(sizes, [64, 1514], "{out}");
        for x in &r {
            consistent(x);
            assert!(u(x, "received") > 0, "{x}");
            // The watched link agrees: what vA sent, vB received (ARP aside).
            assert!(x["watch"].is_object(), "{x}");
        }
    }
    // A paced run: the rate asked next to the one achieved, every frame counted.
    let o = run_in_ns(
        &p.a,
        &[
            "--raw",
            "afpacket:vA",
            "--to",
            &to,
            "--sizes",
            "124",
            "--time",
            "500ms",
            "--rate",
            "10kpps",
            "--json",
        ],
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}");
    let r = &rows(&out)[0];
    consistent(r);
    assert_eq!(f(r, "rate_pps"), 10_000.0, "{r}");
    assert!((2_500..=5_001).contains(&u(r, "sent")), "{r}");
    assert_eq!(u(r, "received"), u(r, "sent"), "{r}");
}

/// A — B — C with addresses, B forwarding 198.18.0.0/24 ↔ 198.19.0.0/24, its way out to C
/// (vB1) a token bucket far slower than the sweep: B drops what does not fit.
fn slow_forwarding_line() -> NetnsLine {
    let l = NetnsLine::new().expect("namespaces");
    let ip = |n: Node, args: &[&str]| {
        l.ip_in(n, args).unwrap_or_else(|e| panic!("{e}"));
    };
    ip(Node::A, &["addr", "add", "198.18.0.1/24", "dev", "vA"]);
    ip(Node::B, &["addr", "add", "198.18.0.2/24", "dev", "vB0"]);
    ip(Node::B, &["addr", "add", "198.19.0.1/24", "dev", "vB1"]);
    ip(Node::C, &["addr", "add", "198.19.0.2/24", "dev", "vC"]);
    ip(
        Node::A,
        &["route", "add", "198.19.0.0/24", "via", "198.18.0.2"],
    );
    ip(
        Node::C,
        &["route", "add", "198.18.0.0/24", "via", "198.19.0.1"],
    );
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
    let out = Command::new("tc")
        .args(["-n", l.ns(Node::B), "qdisc", "add", "dev", "vB1", "root"])
        .args(["tbf", "rate", "20mbit", "burst", "16kb", "limit", "16kb"])
        .output()
        .expect("run tc");
    assert!(
        out.status.success(),
        "tc tbf: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    l
}

#[test]
fn loss_in_a_forwarding_box_is_named_by_watch() {
    if !netns::require_priv() {
        return;
    }
    let l = slow_forwarding_line();
    let [a, b, c] = &l.ns;
    let to = format!("{c}:vC");
    let path = format!("{a}:vA,{b}:vB0,{b}:vB1,{c}:vC");
    let o = run_in_ns(
        a,
        &[
            "--to", &to, "--sizes", "512,1024", "--time", "1", "--watch", &path, "--json",
        ],
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    for r in rows(&out) {
        consistent(&r);
        let lost = u(&r, "lost");
        assert!(lost > 0 && u(&r, "received") > 0, "{r}");
        // Nothing refused at the sender; the loss is on the way, in B, but for the few
        // messages the receiving socket may drop when its reader is starved of CPU.
        assert!(r["send_errors"].as_object().unwrap().is_empty(), "{r}");
        let sd = u(&r, "socket_drops");
        assert!(sd * 10 < lost, "{r}");
        let lost = lost - sd;
        let w = &r["watch"];
        assert_eq!(w["most_lost"], format!("{b}:vB1"), "{r}");
        let q = w["drops"]["qdisc_drops"].as_u64().unwrap_or(0);
        let vanished = u(w, "vanished");
        // watch counts every packet through B (ARP included): within 1 % and a few of the
        // messages the sweep lost on the way.
        for (what, n) in [("qdisc_drops", q), ("vanished", vanished)] {
            assert!(
                n.abs_diff(lost) <= 5 + lost / 100,
                "watch {what} {n}, sweep lost {lost}: {r}"
            );
        }
        assert!(
            w["text"].as_str().unwrap().contains(&format!("inside {b}")),
            "{w}"
        );
    }
    // The table names it under the row.
    let o = run_in_ns(
        a,
        &[
            "--to", &to, "--sizes", "1024", "--time", "300ms", "--watch", &path,
        ],
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains(&format!("watch: most packets vanished at {b}:vB1")),
        "{out}"
    );
    assert!(out.contains("qdisc_drops"), "{out}");
}

/// Starts `sweep --serve` on loopback (a port the kernel picks) and returns it and its port.
fn server() -> (Reaped, u16, std::thread::JoinHandle<String>) {
    let mut s = Reaped::spawn(Command::new(bin()).args([
        "sweep",
        "--serve",
        "--bind",
        "127.0.0.1",
        "--port",
        "0",
        "--json",
    ]));
    let mut r = BufReader::new(s.child().stdout.take().unwrap());
    let mut first = String::new();
    r.read_line(&mut first).unwrap();
    let j: Value = serde_json::from_str(&first).unwrap_or_else(|e| panic!("{e}: {first}"));
    assert_eq!(j["type"], "listening", "{j}");
    let port: u16 = j["addr"]
        .as_str()
        .unwrap()
        .rsplit(':')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let rest = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = r.read_to_string(&mut s);
        s
    });
    (s, port, rest)
}

#[test]
fn a_server_on_loopback_answers_and_ctrl_c_keeps_what_was_measured() {
    let (mut srv, port, log) = server();
    let port_s = port.to_string();
    let c = Reaped::spawn(Command::new(bin()).args([
        "sweep",
        "--to",
        "127.0.0.1",
        "--port",
        &port_s,
        "--sizes",
        "64,1472",
        "--time",
        "300ms",
        "--json",
    ]));
    let (code, out, err) = c.finish(Duration::from_secs(20));
    assert_eq!(code, Some(0), "{out}\n{err}");
    let r = rows(&out);
    assert_eq!(r.len(), 2, "{out}");
    for x in &r {
        consistent(x);
        assert!(u(x, "received") > 0, "{x}");
        assert!(x["socket_drops"].is_u64(), "{x}");
    }
    // Ctrl-C in the middle of the first size: its row (cut short) and the summary, exit 0.
    let mut c = Reaped::spawn(Command::new(bin()).args([
        "sweep",
        "--to",
        "127.0.0.1",
        "--port",
        &port_s,
        "--sizes",
        "64,128,256",
        "--time",
        "5",
        "--json",
    ]));
    std::thread::sleep(Duration::from_millis(1000));
    sigint(c.child());
    let t0 = Instant::now();
    let (code, out, err) = c.finish(Duration::from_secs(10));
    assert!(t0.elapsed() < Duration::from_secs(6), "{:?}", t0.elapsed());
    assert_eq!(code, Some(0), "{out}\n{err}");
    let r = rows(&out);
    assert_eq!(r.len(), 1, "{out}");
    assert_eq!(r[0]["stopped"], true);
    assert!(u(&r[0], "sent") > 0 && f(&r[0], "elapsed") < 4.0, "{out}");
    consistent(&r[0]);
    let s = lines(&out).pop().unwrap();
    assert_eq!(s["type"], "summary");
    assert_eq!(s["stopped"], true);
    assert_eq!(s["sizes_done"], 1);
    // The server stops on Ctrl-C too, having logged both clients.
    sigint(srv.child());
    let (code, _, err) = srv.finish(Duration::from_secs(5));
    assert_eq!(code, Some(0), "{err}");
    let log = log.join().unwrap();
    assert_eq!(log.matches("done\"").count(), 2, "{log}");
}

#[test]
fn no_server_is_a_clear_error_and_bad_flags_exit_2() {
    // A port nobody listens on (bound, then let go).
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = free.local_addr().unwrap().port().to_string();
    drop(free);
    let t0 = Instant::now();
    let o = Command::new(bin())
        .args([
            "sweep",
            "--to",
            "127.0.0.1",
            "--port",
            &port,
            "--time",
            "100ms",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("no `linerate sweep --serve` answers on 127.0.0.1:"),
        "{err}"
    );
    assert!(t0.elapsed() < Duration::from_secs(5));
    for (args, flag) in [
        (&["--sizes", "0"][..], "--sizes"),
        (&["--sizes", "11"], "--sizes"), // shorter than the tag that tells sweep's messages apart
        (&["--sizes", "65508"], "--sizes"),
        (&["--sizes", "64,x"], "--sizes"),
        (&["--time", "0"], "--time"),
        (&["--time", "2h"], "--time"),
        (&["--batch", "0"], "--batch"),
        (&["--batch", "1025"], "--batch"),
        (&["--rate", "0"], "--rate"),
        (&["--rate", "50%"], "--rate"),
        (&["--port", "65536"], "--port"),
        (&["--rcvbuf", "0"], "--rcvbuf"),
        (&["--sndbuf", "2GiB"], "--sndbuf"),
        (&["--watch", "a:,b"], "--watch"),
        (&["--raw", "mem:x"], "--raw"),
        (&["--raw", "pcap:/tmp/x.pcap"], "--raw"),
        (&["--raw", "afpacket:lo", "--sizes", "59"], "--sizes"),
        (&["--raw", "afpacket:lo", "--sizes", "9023"], "--sizes"),
        (&["--raw", "afpacket:lo"], "--to"),
        (&["--raw", "afpacket:lo", "--rcvbuf", "4096"], "--rcvbuf"),
        // Only a server listens on an address of its choosing.
        (&["--bind", "127.0.0.1"], "--bind"),
    ] {
        let o = Command::new(bin())
            .args(["sweep", "--to", "127.0.0.1", "--port", &port])
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(flag), "{args:?}: {err}");
    }
    let too_many: Vec<String> = (1..=65).map(|n| n.to_string()).collect();
    for args in [
        vec!["--to".to_string(), "lr-no-such-ns-sweep:eth0".into()],
        vec!["--to".into(), ":eth0".into()],
        vec![
            "--to".into(),
            "127.0.0.1".into(),
            "--port".into(),
            "0".into(),
        ],
        vec![],
        vec!["--serve".into(), "--to".into(), "127.0.0.1".into()],
        vec![
            "--to".into(),
            "127.0.0.1".into(),
            "--sizes".into(),
            too_many.join(","),
        ],
    ] {
        let o = Command::new(bin())
            .arg("sweep")
            .args(&args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
    }
}

#[test]
fn an_interface_without_an_address_is_a_usage_error() {
    if !netns::require_priv() {
        return;
    }
    let p = NetnsPair::new().expect("namespaces");
    p.ip_in(Side::B, &["addr", "flush", "dev", &p.if_b])
        .unwrap();
    for (to, what) in [
        (format!("{}:{}", p.b, p.if_b), "has no IPv4 address"),
        (format!("{}:nosuchif", p.b), "no such interface"),
    ] {
        let o = run_in_ns(&p.a, &["--to", &to, "--time", "100ms"]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(err.contains(what), "{err}");
    }
}

#[test]
fn a_loopback_of_another_namespace_is_refused_with_the_reason() {
    if !netns::require_priv() {
        return;
    }
    let p = NetnsPair::new().expect("namespaces");
    let to = format!("{}:lo", p.b);
    for raw in [false, true] {
        let mut args = vec!["--to", &to, "--time", "100ms"];
        if raw {
            args.extend(["--raw", "afpacket:vA"]);
        }
        let o = run_in_ns(&p.a, &args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "raw {raw}: {err}");
        assert!(
            err.contains("is the loopback interface of namespace") && err.contains("veth"),
            "raw {raw}: {err}"
        );
    }
    // From inside that namespace, its loopback is a fine target.
    let o = run_in_ns(
        &p.b,
        &["--to", &to, "--time", "100ms", "--sizes", "64", "--json"],
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(u(&rows(&out)[0], "received") > 0, "{out}");
}

/// A stand-in for `sweep --serve` on loopback that answers each line of its first client with
/// `answer(line, its port)` (None: close); its UDP socket on that port swallows the datagrams.
fn fake_server(
    answer: impl Fn(&str, u16) -> Option<String> + Send + 'static,
) -> (u16, std::thread::JoinHandle<()>) {
    use std::io::Write;
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let udp = std::net::UdpSocket::bind(("127.0.0.1", port)).unwrap();
    let t = std::thread::spawn(move || {
        let (s, _) = l.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut w = s.try_clone().unwrap();
        let mut r = BufReader::new(s);
        let mut line = String::new();
        while r.read_line(&mut line).unwrap_or(0) > 0 {
            match answer(line.trim(), port) {
                Some(a) => {
                    let _ = w.write_all(a.as_bytes());
                }
                None => break,
            }
            line.clear();
        }
        drop(udp);
    });
    (port, t)
}

/// A fake server's answers: `result(sent)` for each END.
fn answers(l: &str, port: u16, result: impl Fn(u64) -> String) -> Option<String> {
    Some(if l.starts_with("LINERATE-SWEEP") {
        format!("OK port={port} rcvbuf=1000\n")
    } else if l.starts_with("BEGIN") {
        "READY\n".into()
    } else if let Some(n) = l.strip_prefix("END sent=") {
        result(n.parse().unwrap())
    } else {
        return None;
    })
}

fn client(port: u16, extra: &[&str]) -> (Option<i32>, String, String) {
    let port = port.to_string();
    let c = Reaped::spawn(
        Command::new(bin())
            .args([
                "sweep",
                "--to",
                "127.0.0.1",
                "--port",
                &port,
                "--sizes",
                "64",
            ])
            .args(["--time", "100ms", "--rate", "1kpps"])
            .args(extra),
    );
    c.finish(Duration::from_secs(20))
}

#[test]
fn more_received_than_sent_is_an_anomaly_not_zero_loss() {
    let excess = |sent: u64| {
        format!(
            "RESULT received={} bytes={} other=0 span_ns=1000 drops=0\n",
            sent + 50,
            (sent + 50) * 64
        )
    };
    let (port, t) = fake_server(move |l, p| answers(l, p, excess));
    let (code, out, err) = client(port, &["--json"]);
    t.join().unwrap();
    assert_eq!(code, Some(0), "{out}\n{err}");
    let r = &rows(&out)[0];
    let sent = u(r, "sent");
    assert!(sent > 0, "{r}");
    assert_eq!(u(r, "received"), sent + 50, "{r}");
    assert_eq!(u(r, "excess"), 50, "{r}");
    assert!(r["lost"].is_null() && r["loss_pct"].is_null(), "{r}");
    assert!(
        r["anomaly"]
            .as_str()
            .unwrap()
            .contains("received more than sent"),
        "{r}"
    );
    // The table: no loss figure, and a note with the figures.
    let (port, t) = fake_server(move |l, p| answers(l, p, excess));
    let (code, out, err) = client(port, &[]);
    t.join().unwrap();
    assert_eq!(code, Some(0), "{out}\n{err}");
    let row = out
        .lines()
        .find(|l| l.split_whitespace().next() == Some("64"))
        .unwrap_or_else(|| panic!("{out}"));
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cols.len(), 12, "{row}");
    assert_eq!((cols[5], cols[6]), ("-", "-"), "{row}");
    assert!(out.contains("anomaly: received"), "{out}");
    assert!(out.contains("50 more than sent"), "{out}");
}

#[test]
fn what_a_server_says_reaches_the_terminal_made_safe() {
    // An ERR full of escape sequences and far too long.
    let evil = format!(
        "ERR \x1b]0;pwned\x07\x1b[2J\x1b[31mred\u{202e}\r{}txt\n",
        "A".repeat(200)
    );
    let (port, t) = fake_server(move |_, _| Some(evil.clone()));
    let (code, out, err) = client(port, &[]);
    t.join().unwrap();
    assert_eq!(code, Some(1), "{out}\n{err}");
    assert!(err.contains("sweep server 127.0.0.1"), "{err}");
    for c in err.chars() {
        assert!(
            c == '\n' || !(c.is_control() || ('\u{202a}'..='\u{202e}').contains(&c)),
            "control character {c:?} in {err:?}"
        );
    }
    assert!(err.contains("\\u{1b}]0;pwned"), "{err}");
    assert!(err.contains("[cut]"), "{err}");
    assert!(err.len() < 600, "{}: {err}", err.len());
    // The same in a RESULT the client cannot read.
    let (port, t) =
        fake_server(move |l, p| answers(l, p, |_| "RESULT \x1b[2Jreceived=x\n".to_string()));
    let (code, out, err) = client(port, &[]);
    t.join().unwrap();
    assert_eq!(code, Some(1), "{out}\n{err}");
    assert!(
        !err.contains('\x1b') && err.contains("\\u{1b}[2J"),
        "{err:?}"
    );
}

/// Reads one line from a raw control connection.
fn ctl_line(s: &std::net::TcpStream) -> String {
    let mut r = BufReader::new(s);
    let mut l = String::new();
    let _ = r.read_line(&mut l);
    l
}

#[test]
fn a_server_says_busy_drops_the_silent_and_bounds_what_clients_ask() {
    use std::io::Write;
    let (mut srv, port, log) = server();
    let port_s = port.to_string();
    // One client in the middle of a run (said hello, then thinks).
    let mut first = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    first.write_all(b"LINERATE-SWEEP 1 rcvbuf=0\n").unwrap();
    let ok = ctl_line(&first);
    assert!(ok.starts_with("OK port="), "{ok}");
    assert!(
        ok.contains("max_secs=300") && ok.contains("max_sizes=64"),
        "{ok}"
    );
    // A second one gets a clear busy, soon.
    let t0 = Instant::now();
    let (code, out, err) = client(port, &[]);
    assert_eq!(code, Some(1), "{out}\n{err}");
    assert!(err.contains("busy"), "{err}");
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
    drop(first);
    std::thread::sleep(Duration::from_millis(300));
    // A client that says nothing is told so and dropped.
    let silent = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    silent
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let t0 = Instant::now();
    let l = ctl_line(&silent);
    assert!(l.starts_with("ERR dropped: nothing said"), "{l:?}");
    assert!(t0.elapsed() < Duration::from_secs(6), "{:?}", t0.elapsed());
    drop(silent);
    // Limits: a receive buffer past 64 MiB is refused by the server; a time past its limit
    // by the client, from the server's announcement, before anything is sent.
    for (args, code, what) in [
        (&["--rcvbuf", "1GiB"][..], 1, "above this server's limit"),
        (&["--time", "10m"], 2, "allows at most 300 s per size"),
    ] {
        let o = Command::new(bin())
            .args([
                "sweep",
                "--to",
                "127.0.0.1",
                "--port",
                &port_s,
                "--sizes",
                "64",
            ])
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(code), "{args:?}: {err}");
        assert!(err.contains(what), "{args:?}: {err}");
    }
    // A real client still gets its rows.
    let (code, out, err) = client(port, &["--json"]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    consistent(&rows(&out)[0]);
    sigint(srv.child());
    let (code, _, err) = srv.finish(Duration::from_secs(5));
    assert_eq!(code, Some(0), "{err}");
    let log = log.join().unwrap();
    assert!(log.contains("refused: busy with 127.0.0.1:"), "{log}");
}

#[test]
fn jumbo_frames_cross_whole_and_sizes_a_port_cannot_carry_are_refused() {
    if !netns::require_priv() {
        return;
    }
    let p = NetnsPair::new().expect("namespaces");
    p.no_ipv6().unwrap();
    p.ip_in(Side::A, &["link", "set", "vA", "mtu", "9000"])
        .unwrap();
    p.ip_in(Side::B, &["link", "set", "vB", "mtu", "9000"])
        .unwrap();
    let to = format!("{}:{}", p.b, p.if_b);
    let o = run_in_ns(
        &p.a,
        &[
            "--raw",
            "afpacket:vA",
            "--to",
            &to,
            "--sizes",
            "64,1518,4000,9000,9018",
            "--time",
            "300ms",
            "--rate",
            "20kpps",
            "--json",
        ],
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let r = rows(&out);
    let sizes: Vec<u64> = r.iter().map(|x| u(x, "size")).collect();
    assert_eq!(sizes, [64, 1518, 4000, 9000, 9018], "{out}");
    for x in &r {
        consistent(x);
        // Every frame arrived, whole (the receiver counts only frames of the size sent).
        assert!(u(x, "sent") > 1000, "{x}");
        assert_eq!(u(x, "received"), u(x, "sent"), "{x}");
        assert!(x["send_errors"].as_object().unwrap().is_empty(), "{x}");
    }
    // Sizes a port or the far interface cannot carry: refused before sending, with the limit.
    for (port, size, what) in [
        ("afpacket:vA", "9019", "at most 9018 bytes"),
        // xdp: sends a frame longer than a UMEM frame as a chain (multi-buffer AF_XDP): its
        // limit is the link's, as afpacket's.
        ("xdp:vA", "9019", "at most 9018 bytes"),
    ] {
        let o = run_in_ns(
            &p.a,
            &[
                "--raw", port, "--to", &to, "--sizes", size, "--time", "100ms",
            ],
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{port} {size}: {err}");
        assert!(err.contains("--sizes") && err.contains(what), "{err}");
    }
    p.ip_in(Side::B, &["link", "set", "vB", "mtu", "1500"])
        .unwrap();
    let o = run_in_ns(
        &p.a,
        &[
            "--raw",
            "afpacket:vA",
            "--to",
            &to,
            "--sizes",
            "1519",
            "--time",
            "100ms",
        ],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("takes frames of at most 1518 bytes") && err.contains("MTU 1500"),
        "{err}"
    );
}

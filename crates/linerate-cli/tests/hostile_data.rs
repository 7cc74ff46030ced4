//! Hostile and careless data: a Lua script over its memory bound, a metrics endpoint beside
//! idle connections and oversize requests, jumbo frames through every file path, IPFIX export
//! that cannot be delivered. Each case says what the tool must do instead of failing silently.
//! Bounded in time and packets; only processes started here are stopped, by PID.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_linerate");

/// Runs linerate to its end, killing it (by PID) after `limit`.
fn run(args: &[&str], limit: Duration) -> Output {
    run_prog(BIN, args, limit)
}

/// Runs `prog` to its end, killing it (by PID) after `limit`.
fn run_prog(prog: &str, args: &[&str], limit: Duration) -> Output {
    let mut c = Command::new(prog)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Read the pipes meanwhile: a full pipe would stall the tool.
    let mut so = c.stdout.take().unwrap();
    let mut se = c.stderr.take().unwrap();
    let ho = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = so.read_to_end(&mut v);
        v
    });
    let he = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = se.read_to_end(&mut v);
        v
    });
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = c.try_wait().unwrap() {
            break s;
        }
        if t0.elapsed() > limit {
            let _ = c.kill();
            let _ = c.wait();
            panic!("linerate {args:?} did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Output {
        status,
        stdout: ho.join().unwrap(),
        stderr: he.join().unwrap(),
    }
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("linerate-hostile-data-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

fn json_summary(out: &str) -> serde_json::Value {
    out.lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("json"))
        .find(|j| j["type"] == "summary")
        .unwrap_or_else(|| panic!("no summary in {out}"))
}

/// A cluster id no other test process uses.
fn cluster_id(k: u32) -> String {
    (std::process::id() % 100_000 * 10 + 3_000_000 + k).to_string()
}

// ---------------------------------------------------------------------------------------------
// Lua: a script past its memory bound stops with a clear error naming it, exit code 1, and
// what was sent or received until then is counted.

const GROW_GEN: &str = "local t = {}\nfunction modify(pkts, n)\n  for i = 1, 5000 do t[#t + 1] = string.rep('x', 100) .. #t end\nend\n";
const GROW_BALANCE: &str = "local t = {}\nfunction balance(pkts, n)\n  local r = {}\n  for i = 1, n do t[#t + 1] = string.rep('x', 4000) .. #t; r[i] = 0 end\n  return r\nend\n";
const GROW_FWD: &str = "local t = {}\nfunction filter(n)\n  for i = 1, 5000 do t[#t + 1] = string.rep('y', 100) .. #t end\nend\n";

#[test]
fn lua_gen_script_over_its_memory_bound_stops_with_exit_1() {
    let script = tmp("grow_gen.lua");
    std::fs::write(&script, GROW_GEN).unwrap();
    let s = script.display().to_string();
    let out = format!("mem:hostile-lua-{}", std::process::id());
    let o = run(
        &[
            "gen",
            "-o",
            &out,
            "--script",
            &s,
            "--lua-mem",
            "16MiB",
            "-t",
            "60s",
            "--json",
        ],
        Duration::from_secs(60),
    );
    let (so, se) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{so}{se}");
    assert!(
        se.contains("grow_gen.lua") && se.contains("memory bound of 16 MiB"),
        "{se}"
    );
    let j = json_summary(&so);
    assert!(j["pkts"].as_u64().unwrap() > 0, "{j}");
    assert!(j["error"].as_str().unwrap().contains("memory bound"), "{j}");
}

#[test]
fn lua_balance_and_fwd_scripts_over_their_memory_bound_stop_with_exit_1() {
    let script = tmp("grow_balance.lua");
    std::fs::write(&script, GROW_BALANCE).unwrap();
    let m = format!("lua:{}", script.display());
    let id = cluster_id(1);
    let o = run(
        &[
            "balance",
            "--threads",
            "-i",
            "source:10000000",
            "-c",
            &id,
            "-n",
            "1",
            "-m",
            &m,
            "--lua-mem",
            "8MiB",
            "-t",
            "60s",
        ],
        Duration::from_secs(60),
    );
    let (so, se) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{so}{se}");
    assert!(
        se.contains("grow_balance.lua") && se.contains("memory bound of 8 MiB"),
        "{se}"
    );
    assert!(so.contains("Ended: script error"), "{so}");
    assert!(so.contains("[ok]"), "the accounting holds: {so}");

    let script = tmp("grow_fwd.lua");
    std::fs::write(&script, GROW_FWD).unwrap();
    let s = script.display().to_string();
    let pcap = tmp("fwd_in.pcap");
    let g = run(
        &[
            "gen",
            "-o",
            &format!("pcap:{}", pcap.display()),
            "-c",
            "200000",
            "-q",
        ],
        Duration::from_secs(60),
    );
    assert!(g.status.success(), "{:?}", text(&g));
    let p = pcap.display().to_string();
    let o = run(
        &[
            "fwd",
            "-i",
            &p,
            "-o",
            &format!("mem:hostile-fwd-{}", std::process::id()),
            "--script",
            &s,
            "--lua-mem",
            "8MiB",
            "-T",
            "0",
            "--json",
        ],
        Duration::from_secs(60),
    );
    let (so, se) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{so}{se}");
    assert!(
        se.contains("grow_fwd.lua") && se.contains("memory bound of 8 MiB"),
        "{se}"
    );
    let j = json_summary(&so);
    let rx = j["ports"][0]["received"].as_u64().unwrap();
    assert!(rx > 0 && rx < 200_000, "{j}");
    // Every packet received is sent or filtered (the failed burst counts as filtered).
    assert_eq!(
        rx,
        j["ports"][1]["sent"].as_u64().unwrap() + j["ports"][0]["filtered"].as_u64().unwrap(),
        "{j}"
    );
}

#[test]
fn lua_mem_flag_is_range_checked() {
    for v in ["1KiB", "100GiB", "lots"] {
        let o = run(
            &["gen", "-o", "mem:x", "-c", "1", "--lua-mem", v],
            Duration::from_secs(20),
        );
        let (_, se) = text(&o);
        assert_eq!(o.status.code(), Some(2), "{v}: {se}");
        assert!(
            se.contains("--lua-mem") && se.contains("between 1MiB and 64GiB"),
            "{se}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Metrics: idle and oversize clients never keep a scrape from being answered.

#[path = "../../linerate/tests/netns/mod.rs"]
mod netns;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One request on a fresh connection; the whole answer, or what came within `limit`.
fn http(addr: &str, req: &[u8], limit: Duration) -> std::io::Result<String> {
    let mut c = std::net::TcpStream::connect(addr)?;
    c.set_read_timeout(Some(limit))?;
    c.set_write_timeout(Some(limit))?;
    // A refused oversize request may close before all of it is written.
    let _ = c.write_all(req);
    let mut got = Vec::new();
    match c.read_to_end(&mut got) {
        Ok(_) => {}
        Err(e) if got.is_empty() => return Err(e),
        Err(_) => {}
    }
    Ok(String::from_utf8_lossy(&got).into_owned())
}

/// A running process of ours, stopped by SIGINT (by its PID) when dropped or [`Running::stop`]ped.
struct Running(std::process::Child);

impl Running {
    /// SIGINT, then waits up to 10 s (then SIGKILL); the exit status.
    fn stop(&mut self) -> std::process::ExitStatus {
        if let Some(s) = self.0.try_wait().ok().flatten() {
            return s;
        }
        let _ = Command::new("kill")
            .args(["-INT", &self.0.id().to_string()])
            .status();
        let t0 = Instant::now();
        while self.0.try_wait().ok().flatten().is_none() {
            if t0.elapsed() > Duration::from_secs(10) {
                let _ = self.0.kill();
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.0.wait().unwrap()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop();
    }
}

#[test]
fn metrics_answer_beside_130_idle_connections_and_refuse_oversize_requests() {
    let addr = format!("127.0.0.1:{}", free_port());
    let id = cluster_id(2);
    let child = Command::new(BIN)
        .args([
            "balance",
            "--threads",
            "-i",
            "source",
            "--source-rate",
            "2kpps",
            "-n",
            "1",
            "-c",
            &id,
            "--metrics",
            &addr,
            "-t",
            "60s",
            "--quiet",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut bal = Running(child);
    let get = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
    // Wait for the endpoint and its first text.
    let t0 = Instant::now();
    loop {
        if let Ok(s) = http(&addr, get, Duration::from_secs(2)) {
            if s.contains("linerate_cluster_rx_packets_total") {
                break;
            }
        }
        assert!(bal.0.try_wait().unwrap().is_none(), "balance ended early");
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "no metrics on {addr}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // 130 idle clients: some silent, some with half a request.
    let idle: Vec<std::net::TcpStream> = (0..130)
        .map(|i| {
            let mut s = std::net::TcpStream::connect(&addr).unwrap();
            if i % 2 == 0 {
                let _ = s.write_all(b"GET /metr");
            }
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    for _ in 0..3 {
        let t = Instant::now();
        let s = http(&addr, get, Duration::from_secs(1)).expect("scrape beside idle clients");
        assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
        assert!(s.starts_with("HTTP/1.1 200 OK"), "{s}");
        assert!(s.contains("linerate_cluster_rx_packets_total"), "{s}");
    }
    // An oversize request head is refused, and the next scrape still answers.
    let big = format!(
        "GET /metrics HTTP/1.1\r\nX-Pad: {}\r\n\r\n",
        "a".repeat(16 << 10)
    );
    let s = http(&addr, big.as_bytes(), Duration::from_secs(2)).unwrap();
    assert!(s.starts_with("HTTP/1.1 431"), "{s}");
    let s = http(&addr, get, Duration::from_secs(1)).unwrap();
    assert!(s.starts_with("HTTP/1.1 200 OK"), "{s}");
    drop(idle);
    let st = bal.stop();
    let mut err = String::new();
    let _ = bal.0.stderr.take().unwrap().read_to_string(&mut err);
    assert!(st.success(), "{st:?}: {err}");
    // Loopback: no note about authentication.
    assert!(!err.contains("no authentication"), "{err}");
}

#[test]
fn metrics_off_loopback_print_a_note() {
    if !netns::require_priv() {
        return;
    }
    let pair = netns::NetnsPair::new().expect("netns pair");
    let a = &pair.ip_a;
    // A non-loopback address, reachable only inside the test's namespace.
    let addr = format!("{}.{}.{}.{}:{}", a[0], a[1], a[2], a[3], free_port());
    let id = cluster_id(3);
    let o = run_prog(
        "ip",
        &[
            "netns",
            "exec",
            &pair.a,
            BIN,
            "balance",
            "--threads",
            "-i",
            "source:1000",
            "-n",
            "1",
            "-c",
            &id,
            "--metrics",
            &addr,
            "--quiet",
        ],
        Duration::from_secs(30),
    );
    let (so, se) = text(&o);
    assert!(o.status.success(), "{so}{se}");
    assert!(
        se.contains("no authentication") && se.contains(&addr),
        "{se}"
    );
}

// ---------------------------------------------------------------------------------------------
// IPFIX: failed messages are counted and make the exit code non-zero; no message is larger
// than --ipfix-mtu, which cannot go below one record with the templates; a real collector
// (nfcapd, from Debian's nfdump) gets every record.

/// A capture of `flows` one-way UDP flows, 10 packets each (made once per name).
fn flows_pcap(name: &str, flows: u32) -> String {
    let p = tmp(name);
    if !p.exists() {
        let o = run(
            &[
                "gen",
                "-o",
                &format!("pcap:{}", p.display()),
                "-c",
                &(flows * 10).to_string(),
                "--flows",
                &flows.to_string(),
                "-q",
            ],
            Duration::from_secs(60),
        );
        assert!(o.status.success(), "{:?}", text(&o));
    }
    p.display().to_string()
}

/// A loopback UDP port nobody listens on (bound, read, released).
fn free_udp_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The JSON summary of `flows --json` (on standard error).
fn flows_summary(o: &Output) -> serde_json::Value {
    json_summary(&String::from_utf8_lossy(&o.stderr))
}

#[test]
fn ipfix_to_no_listener_counts_every_failed_message_and_exits_1() {
    let input = flows_pcap("ipfix_fail.pcap", 500);
    let dest = format!("127.0.0.1:{}", free_udp_port());
    let o = run(
        &["flows", "-i", &input, "--ipfix", &dest, "--json"],
        Duration::from_secs(60),
    );
    let (_, se) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{se}");
    let j = flows_summary(&o)["ipfix"].clone();
    assert_eq!(j["flows"], 500, "{j}");
    assert_eq!(j["records"], 500, "{j}");
    assert!(j["messages"].as_u64().unwrap() > 1, "{j}");
    assert_eq!(j["failed_messages"], j["messages"], "{j}");
    assert_eq!(j["failed_records"], 500, "{j}");
    assert!(j["error"].as_str().unwrap().contains("refused"), "{j}");
    assert!(
        se.contains("IPFIX export to")
            && se.contains("500 of 500 records")
            && se.contains("failed"),
        "{se}"
    );
    // Port 0: refused as a usage error, or every message counted as failed.
    let o = run(
        &["flows", "-i", &input, "--ipfix", "127.0.0.1:0", "--json"],
        Duration::from_secs(60),
    );
    let (_, se) = text(&o);
    match o.status.code() {
        Some(2) => assert!(se.contains("--ipfix"), "{se}"),
        Some(1) => {
            let j = flows_summary(&o)["ipfix"].clone();
            assert_eq!(j["failed_records"], 500, "{j}");
        }
        c => panic!("exit {c:?}: {se}"),
    }
}

#[test]
fn ipfix_mtu_below_one_record_is_a_usage_error() {
    let input = flows_pcap("ipfix_mtu_small.pcap", 10);
    for (mtu, uni, min) in [
        ("100", false, "285"),
        ("284", false, "285"),
        ("219", true, "220"),
    ] {
        let mut args = vec![
            "flows",
            "-i",
            &input,
            "--ipfix",
            "127.0.0.1:4739",
            "--ipfix-mtu",
            mtu,
        ];
        if uni {
            args.push("--ipfix-uniflow");
        }
        let o = run(&args, Duration::from_secs(30));
        let (_, se) = text(&o);
        assert_eq!(o.status.code(), Some(2), "{mtu}: {se}");
        assert!(se.contains("--ipfix-mtu") && se.contains(min), "{se}");
    }
}

/// nfcapd on a free loopback port writing into its own folder, stopped by its PID.
struct Nfcapd {
    run: Running,
    dir: PathBuf,
    port: u16,
}

impl Nfcapd {
    fn start(dir: PathBuf) -> Nfcapd {
        let port = free_udp_port();
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let child = Command::new("nfcapd")
            .arg("-w")
            .arg(&dir)
            .args(["-b", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nfcapd (Debian's nfdump, installed by scripts/setup.sh)");
        let n = Nfcapd {
            run: Running(child),
            dir,
            port,
        };
        // Ready when its socket shows in /proc/net/udp.
        let hex = format!(":{port:04X} ");
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(10) {
            if std::fs::read_to_string("/proc/net/udp").is_ok_and(|s| s.contains(&hex)) {
                return n;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("nfcapd did not open port {port}");
    }

    /// Stops nfcapd (it writes its file on a signal) and counts the records with nfdump.
    fn records(mut self) -> usize {
        self.run.stop();
        let o = Command::new("nfdump")
            .arg("-R")
            .arg(&self.dir)
            .args(["-q", "-o", "csv"])
            .output()
            .expect("nfdump");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter(|l| !l.trim().is_empty())
            .count()
    }
}

#[test]
fn ipfix_messages_respect_the_mtu_and_nfcapd_gets_every_record() {
    let input = flows_pcap("ipfix_mtu.pcap", 500);
    for (mtu, uni) in [(285usize, false), (220, true), (600, false)] {
        let m = mtu.to_string();
        let mut extra = vec!["--ipfix-mtu", m.as_str()];
        if uni {
            extra.push("--ipfix-uniflow");
        }
        // Our own socket first: every datagram, its size.
        let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        let dest = sock.local_addr().unwrap().to_string();
        let reader = std::thread::spawn(move || {
            let mut sizes = Vec::new();
            let mut buf = vec![0u8; 70_000];
            // Until 500 ms of quiet after the first datagram (or 30 s without one).
            let t0 = Instant::now();
            loop {
                match sock.recv(&mut buf) {
                    Ok(n) => {
                        assert_eq!(u16::from_be_bytes([buf[0], buf[1]]), 10);
                        assert_eq!(u16::from_be_bytes([buf[2], buf[3]]) as usize, n);
                        sizes.push(n);
                    }
                    Err(_) if !sizes.is_empty() || t0.elapsed() > Duration::from_secs(30) => break,
                    Err(_) => {}
                }
            }
            sizes
        });
        let mut args = vec!["flows", "-i", &input, "--ipfix", &dest, "--json"];
        args.extend_from_slice(&extra);
        let o = run(&args, Duration::from_secs(60));
        let (_, se) = text(&o);
        assert!(o.status.success(), "{se}");
        let j = flows_summary(&o)["ipfix"].clone();
        let sizes = reader.join().unwrap();
        assert_eq!(sizes.len() as u64, j["messages"].as_u64().unwrap(), "{j}");
        assert!(
            sizes.iter().all(|&n| n <= mtu),
            "--ipfix-mtu {mtu}: largest {}",
            sizes.iter().max().unwrap()
        );
        assert_eq!(j["failed_messages"], 0, "{j}");
        // Then nfcapd: every record arrives.
        let nf = Nfcapd::start(tmp(&format!("nfcapd-{mtu}")));
        let dest = format!("127.0.0.1:{}", nf.port);
        let mut args = vec!["flows", "-i", &input, "--ipfix", &dest, "--json"];
        args.extend_from_slice(&extra);
        let o = run(&args, Duration::from_secs(60));
        let (_, se) = text(&o);
        assert!(o.status.success(), "{se}");
        let j = flows_summary(&o)["ipfix"].clone();
        assert_eq!(j["records"], 500, "{j}");
        assert_eq!(nf.records(), 500, "--ipfix-mtu {mtu} uniflow {uni}: {j}");
    }
}

//! Hostile and careless data: a Lua script over its memory bound, a metrics endpoint beside
//! idle connections and oversize requests, jumbo frames through every file path, IPFIX export
//! that cannot be delivered. Each case says what the tool must do instead of failing silently.
//! Bounded in time and packets; only processes started here are stopped, by PID.
#![deny(unsafe_code)]

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
const GROW_FWD: &str = "local t = {}\nfunction filter(pkts, n)\n  for i = 1, 5000 do t[#t + 1] = string.rep('y', 100) .. #t end\nend\n";

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
            "--period",
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

use linerate_test_support::netns;

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
    /// Waits up to `limit` for the process to end by itself, then stops it ([`Running::stop`]).
    fn wait_end(&mut self, limit: Duration) -> std::process::ExitStatus {
        let t0 = Instant::now();
        while t0.elapsed() < limit {
            if let Some(s) = self.0.try_wait().ok().flatten() {
                return s;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.stop()
    }

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
            "--metrics-linger",
            "0",
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
            "--metrics-linger",
            "0",
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
            .expect("nfcapd (Debian's nfdump, installed by scripts/setup.sh --tests)");
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

// ---------------------------------------------------------------------------------------------
// Jumbo frames: every path from a file carries them whole (9014 B, 65535 B), byte for byte, or
// drops them whole and counts them as too_big; none is ever cut (they were cut to 1920 B).

/// Frame sizes of the jumbo capture: small ones, 5 042, 9 014, 16 000 and 65 535 B.
const JUMBO: [usize; 8] = [60, 1514, 5042, 9014, 16_000, 65_535, 64, 1500];

/// An Ethernet frame of `n` bytes, different for each `i`.
fn frame(i: usize, n: usize) -> Vec<u8> {
    let mut d = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00];
    d.extend((0..n - 14).map(|k| (i * 7 + k * 13) as u8));
    d
}

/// Writes a microsecond pcap of `frames` with `snaplen` in its header.
fn write_pcap(path: &std::path::Path, snaplen: u32, frames: &[Vec<u8>]) {
    let mut f = Vec::new();
    f.extend(0xa1b2_c3d4u32.to_le_bytes());
    f.extend(2u16.to_le_bytes());
    f.extend(4u16.to_le_bytes());
    f.extend([0u8; 8]);
    f.extend(snaplen.to_le_bytes());
    f.extend(1u32.to_le_bytes());
    for (i, d) in frames.iter().enumerate() {
        f.extend((1_700_000_000u32 + i as u32).to_le_bytes());
        f.extend((i as u32).to_le_bytes());
        f.extend((d.len() as u32).to_le_bytes());
        f.extend((d.len() as u32).to_le_bytes());
        f.extend(d);
    }
    std::fs::write(path, f).unwrap();
}

/// Records of a capture: (captured bytes, wire length).
type Records = Vec<(Vec<u8>, u32)>;

/// The records of a little-endian pcap.
fn read_pcap(path: &std::path::Path) -> Records {
    let b = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(&b[..4], &0xa1b2_c3d4u32.to_le_bytes(), "{}", path.display());
    let mut out = Vec::new();
    let mut off = 24;
    while off < b.len() {
        let cap = u32::from_le_bytes(b[off + 8..off + 12].try_into().unwrap()) as usize;
        let wire = u32::from_le_bytes(b[off + 12..off + 16].try_into().unwrap());
        out.push((b[off + 16..off + 16 + cap].to_vec(), wire));
        off += 16 + cap;
    }
    out
}

/// 80 frames: 10 of each size in [`JUMBO`].
fn jumbo_frames() -> Vec<Vec<u8>> {
    (0..80).map(|i| frame(i, JUMBO[i % JUMBO.len()])).collect()
}

/// Frames for a capture whose header says 262144, with a 70 000 B record among others.
fn huge_frames() -> Vec<Vec<u8>> {
    [60usize, 70_000, 9014, 65_535, 1500]
        .iter()
        .enumerate()
        .map(|(i, &n)| frame(i, n))
        .collect()
}

/// Checks that `got` holds exactly the frames of `want` whose length passes `keep`, whole and
/// in order.
fn whole(got: &[(Vec<u8>, u32)], want: &[Vec<u8>], keep: impl Fn(usize) -> bool, what: &str) {
    let want: Vec<&Vec<u8>> = want.iter().filter(|d| keep(d.len())).collect();
    assert_eq!(got.len(), want.len(), "{what}: records");
    for (k, ((d, w), x)) in got.iter().zip(&want).enumerate() {
        assert_eq!(*w as usize, x.len(), "{what}: record {k} wire length");
        assert!(
            d == *x,
            "{what}: record {k} of {} B came out as {} B",
            x.len(),
            d.len()
        );
    }
}

/// The captures of the jumbo tests: (name, header snaplen, frames). The last one says 65535
/// in its header but holds a 70 000 B record (libpcap would cut it; tshark keeps it).
fn jumbo_captures() -> Vec<(&'static str, u32, Vec<Vec<u8>>)> {
    vec![
        ("jumbo.pcap", 65_535, jumbo_frames()),
        ("huge.pcap", 262_144, huge_frames()),
        ("liar.pcap", 65_535, huge_frames()),
    ]
}

#[test]
fn jumbo_frames_through_count_w_are_byte_for_byte_the_input() {
    for (name, snap, frames) in jumbo_captures() {
        let input = tmp(name);
        write_pcap(&input, snap, &frames);
        let out = tmp(&format!("count-{name}"));
        let o = run(
            &[
                "count",
                "-i",
                input.to_str().unwrap(),
                "-w",
                out.to_str().unwrap(),
                "--json",
                "-q",
            ],
            Duration::from_secs(30),
        );
        let (so, se) = text(&o);
        assert!(o.status.success(), "{so}{se}");
        let j = json_summary(&so);
        assert_eq!(j["pkts"], frames.len() as u64, "{j}");
        assert_eq!(j["drops"], 0, "{j}");
        let wire: usize = frames.iter().map(Vec::len).sum();
        assert_eq!(j["bytes"], wire as u64, "{j}");
        whole(&read_pcap(&out), &frames, |_| true, "count -w");
        assert!(
            std::fs::read(&out).unwrap() == std::fs::read(&input).unwrap(),
            "count -w of {name}: not byte for byte the input"
        );
    }
    // libpcap reads the copy as it reads the input: every jumbo frame whole.
    let copy = tmp("count-jumbo.pcap");
    if let Ok(t) = Command::new("tcpdump")
        .args(["-nr", copy.to_str().unwrap(), "-e"])
        .output()
    {
        let lens: Vec<usize> = String::from_utf8_lossy(&t.stdout)
            .lines()
            .map(|l| {
                let k = l.find("length ").expect("length") + 7;
                l[k..]
                    .split(|c: char| !c.is_ascii_digit())
                    .next()
                    .unwrap()
                    .parse()
                    .unwrap()
            })
            .collect();
        let want: Vec<usize> = jumbo_frames().iter().map(Vec::len).collect();
        assert_eq!(lens, want, "tcpdump -r of count's copy");
    }
}

#[test]
fn jumbo_frames_through_gen_replay_and_fwd_are_whole() {
    for (name, snap, frames) in jumbo_captures() {
        let input = tmp(&format!("gf-{name}"));
        write_pcap(&input, snap, &frames);
        let i = input.display().to_string();
        // gen --pcap replay to a file
        let out = tmp(&format!("gen-{name}"));
        let o = run(
            &[
                "gen",
                "--pcap",
                &i,
                "--topspeed",
                "-o",
                &format!("pcap:{}", out.display()),
                "--json",
            ],
            Duration::from_secs(30),
        );
        let (so, se) = text(&o);
        assert!(o.status.success(), "{so}{se}");
        let j = json_summary(&so);
        assert_eq!(j["port_drops"], 0, "{so}");
        assert_eq!(j["pkts"], frames.len() as u64, "{so}");
        whole(&read_pcap(&out), &frames, |_| true, "gen --pcap");
        // fwd from a file to a file, as l2fwd with --no-mac-updating
        let out = tmp(&format!("fwd-{name}"));
        let o = run(
            &[
                "fwd",
                "-i",
                &i,
                "-o",
                &format!("pcap:{}", out.display()),
                "--no-mac-updating",
                "--json",
                "--period",
                "0",
            ],
            Duration::from_secs(30),
        );
        let (so, se) = text(&o);
        assert!(o.status.success(), "{so}{se}");
        let j = json_summary(&so);
        assert_eq!(j["ports"][0]["received"], frames.len() as u64, "{j}");
        assert_eq!(j["ports"][1]["sent"], frames.len() as u64, "{j}");
        assert_eq!(j["ports"][1]["dropped"], 0, "{j}");
        whole(&read_pcap(&out), &frames, |_| true, "fwd");
    }
}

#[test]
fn jumbo_frames_through_a_mem_wire_are_whole() {
    use linerate::apps::gen::replay::{self, ReplayOptions};
    use linerate::mem::Batch;
    use linerate::port::PortOptions;
    for (name, snap, frames) in jumbo_captures() {
        let input = tmp(&format!("mem-{name}"));
        write_pcap(&input, snap, &frames);
        let i = input.display().to_string();
        let wire = format!("mem:hostile-jumbo-{name}-{}", std::process::id());
        let opts = PortOptions::default();
        let mut a = linerate::open_tx(&wire, &opts).unwrap();
        let mut b = linerate::open_rx(&wire, &opts).unwrap();
        let clock = linerate::time::MonoClock;
        let stop = std::sync::atomic::AtomicBool::new(false);
        let r = replay::run(
            || linerate::open_rx(&i, &opts),
            a.as_mut(),
            &ReplayOptions {
                speed: None,
                ..Default::default()
            },
            &clock,
            &stop,
        )
        .unwrap();
        assert_eq!(r.pkts, frames.len() as u64);
        assert_eq!(a.stats().tx_drops.total(), 0, "{:?}", a.stats().tx_drops);
        let mut got = Vec::new();
        let mut batch = Batch::new();
        while b.rx(&mut batch).unwrap() > 0 {
            for p in batch.iter() {
                got.push((p.data.to_vec(), p.desc.wire_len));
            }
            batch.clear();
        }
        whole(&got, &frames, |_| true, "mem wire");
    }
}

/// Runs `balance` on `input` with `-n 2,1`, queue 0 replaced by a pcap file (`-r`), queues 1
/// and 2 read by `count -w` consumer processes; returns the master's JSON summary and the three
/// files' records.
fn balance_jumbo(
    input: &std::path::Path,
    k: u32,
    extra: &[&str],
) -> (serde_json::Value, [Records; 3]) {
    let id = cluster_id(k);
    let files: Vec<PathBuf> = (0..3)
        .map(|q| tmp(&format!("balance-{k}-q{q}.pcap")))
        .collect();
    let r0 = format!("0:{}", files[0].display());
    let mut args = vec![
        "balance",
        "-i",
        input.to_str().unwrap(),
        "-c",
        &id,
        "-n",
        "2,1",
        "-r",
        &r0,
        "--wait-consumers",
        "-t",
        "30",
        "--json",
        "--quiet",
    ];
    args.extend_from_slice(extra);
    let master = Command::new(BIN)
        .args(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut master = Running(master);
    let seg = || linerate_test_support::cluster_segment(&id);
    let t0 = Instant::now();
    while !seg().exists() {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "no segment {}",
            seg().display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let consumers: Vec<Running> = (1..3)
        .map(|q| {
            Running(
                Command::new(BIN)
                    .args([
                        "count",
                        "-i",
                        &format!("cluster:{id}@{q}"),
                        "-w",
                        files[q].to_str().unwrap(),
                        "-q",
                    ])
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap(),
            )
        })
        .collect();
    // The master ends at the end of the file, its consumers when they read all.
    let st = master.wait_end(Duration::from_secs(40));
    let mut mo = String::new();
    let _ = master.0.stdout.take().unwrap().read_to_string(&mut mo);
    assert!(st.success(), "{st:?}: {mo}");
    for mut c in consumers {
        let st = c.wait_end(Duration::from_secs(20));
        let mut e = String::new();
        let _ = c.0.stderr.take().unwrap().read_to_string(&mut e);
        assert!(st.success(), "consumer {st:?}: {e}");
    }
    let j = json_summary(&mo);
    (
        j,
        [
            read_pcap(&files[0]),
            read_pcap(&files[1]),
            read_pcap(&files[2]),
        ],
    )
}

#[test]
fn jumbo_frames_through_the_cluster_to_consumers_are_whole() {
    for (k, (name, snap, frames)) in jumbo_captures().into_iter().enumerate() {
        let input = tmp(&format!("cl-{name}"));
        write_pcap(&input, snap, &frames);
        let (j, [q0, q1, q2]) = balance_jumbo(&input, 20 + k as u32, &[]);
        assert_eq!(j["invariant_ok"], true, "{j}");
        for q in j["queues"].as_array().unwrap() {
            for (r, v) in q["drops"].as_object().unwrap() {
                assert_eq!(v, 0, "{name}: drops {r}: {j}");
            }
        }
        // Application 1 (queue 2) gets every frame in order, whole.
        whole(
            &q2,
            &frames,
            |_| true,
            &format!("{name}: consumer of queue 2"),
        );
        // Application 0's two queues share them: together every frame once, each whole.
        let mut got: Vec<Vec<u8>> = q0.iter().chain(&q1).map(|(d, _)| d.clone()).collect();
        assert!(q0.iter().chain(&q1).all(|(d, w)| d.len() == *w as usize));
        let mut want = frames.clone();
        got.sort();
        want.sort();
        assert!(
            got == want,
            "{name}: queues 0 (-r) and 1 (consumer) differ from the input"
        );
    }
}

#[test]
fn jumbo_frames_longer_than_the_cluster_carries_are_counted_too_big() {
    let frames = jumbo_frames();
    let input = tmp("cl-small.pcap");
    write_pcap(&input, 65_535, &frames);
    for (k, max) in [(30u32, 1920usize), (31, 9216)] {
        let m = max.to_string();
        let (j, [q0, q1, q2]) = balance_jumbo(&input, k, &["--max-pkt-len", &m]);
        assert_eq!(j["invariant_ok"], true, "{j}");
        let big = frames.iter().filter(|d| d.len() > max).count() as u64;
        assert!(big > 0);
        // Every queue that wanted a frame too long counts it (application 1 wants them all).
        assert_eq!(j["queues"][2]["drops"]["too_big"], big, "{j}");
        let b01 = j["queues"][0]["drops"]["too_big"].as_u64().unwrap()
            + j["queues"][1]["drops"]["too_big"].as_u64().unwrap();
        assert_eq!(b01, big, "{j}");
        whole(&q2, &frames, |n| n <= max, "queue 2, the rest whole");
        assert_eq!(q0.len() + q1.len(), frames.len() - big as usize);
        assert!(q0
            .iter()
            .chain(&q1)
            .all(|(d, w)| d.len() == *w as usize && d.len() <= max));
    }
}

// ---------------------------------------------------------------------------------------------
// Lua views over records past 65 535 B (the Rust parse leaves them to packets.lua's, its
// offsets being 16-bit) and malformed small frames, in fwd --script and balance -m lua:.

/// Reads every layer of each packet and raw bytes at its end; drops UDP to port 53 in fwd and
/// sends packet i to queue i % 2 in balance; writes what it saw, one line per packet, to the
/// file named by the global `out_path` set on the first line.
const VIEWS_SCRIPT: &str = r#"
local seen = {}
local function look(p)
  local L = p:len()
  local r = { L, tostring(p.eth and p.eth.type), tostring(p.vlan and p.vlan.id),
    tostring(p.ip4 and p.ip4.len), tostring(p.ip6 and p.ip6.proto), tostring(p.ip and p.ip.version),
    tostring(p.udp and p.udp.dport), tostring(p.tcp and p.tcp.flags), tostring(p.icmp and p.icmp.type),
    tostring(select(2, pcall(p.payloadOffset, p))) }
  if L > 0 then r[#r + 1] = p:getByte(L - 1) end
  if L > 1 then r[#r + 1] = p:getU16(L - 2) end
  r[#r + 1] = tostring(pcall(p.getByte, p, L))
  seen[#seen + 1] = table.concat(r, " ")
  local f = assert(io.open(out_path, "w"))
  f:write(table.concat(seen, "\n"), "\n")
  f:close()
end
function filter(pkts, n)
  for i = 1, n do
    local p = pkts[i]
    look(p)
    if p.udp and p.udp.dport == 53 then p:drop() end
  end
end
function balance(pkts, n, q)
  for i = 1, n do
    look(pkts[i])
    q[i] = (i - 1) % 2
  end
end
"#;

/// Frames of every size up to 100 000 B (records of a capture whose header says 262144): IPv4
/// and UDP to port 53 saying 65 535 B, IPv6 in QinQ with a zero payload length (a jumbogram)
/// and UDP, IPv4 and TCP; then malformed small ones (empty, cut in the Ethernet header, cut in
/// a VLAN tag, IPv4 with IHL 4, TCP with a data offset of 4).
fn lua_view_frames() -> Vec<Vec<u8>> {
    let fill = |mut f: Vec<u8>, n: usize| {
        f.resize(n, 0xbb);
        f
    };
    let mut frames = Vec::new();
    for n in [100usize, 9000, 65_535, 65_536, 70_000, 100_000] {
        let mut u = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00];
        u.extend_from_slice(&[0x45, 0, 0xff, 0xff, 0, 1, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1]);
        u.extend_from_slice(&[10, 0, 0, 2, 0x10, 0, 0, 53, 0xff, 0xff, 0, 0]);
        frames.push(fill(u, n));
        let mut v = vec![
            2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x88, 0xa8, 0, 5, 0x81, 0, 0, 7,
        ];
        v.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0, 0, 0, 17, 64]);
        v.extend_from_slice(&[0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        v.extend_from_slice(&[0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        v.extend_from_slice(&[0x10, 0, 0x1f, 0x90, 0, 0, 0, 0]);
        frames.push(fill(v, n));
        let mut t = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00];
        t.extend_from_slice(&[0x45, 0, 0xff, 0xff, 0, 1, 0, 0, 64, 6, 0, 0, 10, 0, 0, 1]);
        t.extend_from_slice(&[
            10, 0, 0, 2, 0, 80, 0, 81, 0, 0, 0, 1, 0, 0, 0, 2, 0x50, 0x12,
        ]);
        t.extend_from_slice(&[1, 0, 0, 0, 0, 0]);
        frames.push(fill(t, n));
    }
    let ip = frames[0][..42].to_vec();
    frames.push(Vec::new());
    frames.push(ip[..13].to_vec());
    let mut tag = ip[..12].to_vec();
    tag.extend_from_slice(&[0x81, 0, 0]);
    frames.push(tag);
    let mut ihl4 = ip.clone();
    ihl4[14] = 0x44;
    frames.push(ihl4);
    let mut doff4 = frames[2][..54].to_vec();
    doff4[46] = 0x40;
    frames.push(doff4);
    frames
}

/// What [`VIEWS_SCRIPT`] should see of [`lua_view_frames`]: one line per frame.
fn lua_view_lines() -> Vec<String> {
    let mut want = Vec::new();
    for n in [100usize, 9000, 65_535, 65_536, 70_000, 100_000] {
        let po = |p: usize| if n >= p { p.to_string() } else { "nil".into() };
        want.push(format!(
            "{n} 2048 nil 65535 nil 4 53 nil nil {} 187 48059 false",
            po(42)
        ));
        want.push(format!(
            "{n} 34525 5 nil 17 6 8080 nil nil {} 187 48059 false",
            po(70)
        ));
        want.push(format!(
            "{n} 2048 nil 65535 nil 4 nil 18 nil {} 187 48059 false",
            po(54)
        ));
    }
    want.push("0 nil nil nil nil nil nil nil nil the packet has no UDP or TCP header false".into());
    want
}

#[test]
fn lua_views_over_records_past_65535_bytes_and_malformed_frames() {
    let frames = lua_view_frames();
    let input = tmp("lua-views.pcap");
    write_pcap(&input, 262_144, &frames);
    let i = format!("pcap:{}", input.display());
    let script = tmp("lua-views.lua");
    for (tool, seen) in [
        ("fwd", tmp("lua-views-fwd.txt")),
        ("balance", tmp("lua-views-bal.txt")),
    ] {
        let head = format!("out_path = {:?}\n", seen.display().to_string());
        std::fs::write(&script, head + VIEWS_SCRIPT).unwrap();
        let s = script.display().to_string();
        let out = tmp("lua-views-out.pcap");
        let o = match tool {
            "fwd" => run(
                &[
                    "fwd",
                    "-i",
                    &i,
                    "-o",
                    &format!("pcap:{}", out.display()),
                    "--no-mac-updating",
                    "--script",
                    &s,
                ],
                Duration::from_secs(60),
            ),
            _ => run(
                &[
                    "balance",
                    "-i",
                    &i,
                    "-m",
                    &format!("lua:{s}"),
                    "--threads",
                    "2",
                    "-q",
                ],
                Duration::from_secs(60),
            ),
        };
        let (so, se) = text(&o);
        assert!(o.status.success(), "{tool}: {so}{se}");
        let got = std::fs::read_to_string(&seen).unwrap();
        let got: Vec<&str> = got.lines().collect();
        assert_eq!(got.len(), frames.len(), "{tool}: {got:#?}");
        let want = lua_view_lines();
        assert_eq!(got[..want.len() - 1], want[..want.len() - 1], "{tool}");
        assert!(
            got[want.len() - 1].starts_with("0 nil"),
            "{tool}: {}",
            got[want.len() - 1]
        );
        // The malformed ones: Ethernet cut (13 B) and a cut tag (its TPID the type, no VLAN
        // layer) have no IP; IHL 4 has no IPv4 layer; a TCP data offset of 4 has IPv4 but no
        // TCP layer.
        let small: Vec<Vec<&str>> = got[want.len()..]
            .iter()
            .map(|l| l.split(' ').take(9).collect())
            .collect();
        assert_eq!(
            small[0],
            ["13", "nil", "nil", "nil", "nil", "nil", "nil", "nil", "nil"]
        );
        assert_eq!(small[1][..3], ["15", "33024", "nil"], "{tool}");
        assert_eq!(small[2][..4], ["42", "2048", "nil", "nil"], "{tool}");
        assert_eq!(
            small[3][..8],
            ["54", "2048", "nil", "65535", "nil", "4", "nil", "nil"]
        );
        if tool == "fwd" {
            // Every frame but the UDP to port 53 ones goes out whole.
            let keep: Vec<Vec<u8>> = frames
                .iter()
                .filter(|f| !(f.len() >= 42 && f[12..14] == [8, 0] && f[23] == 17 && f[14] == 0x45))
                .cloned()
                .collect();
            whole(&read_pcap(&out), &keep, |_| true, "fwd --script");
        }
    }
}

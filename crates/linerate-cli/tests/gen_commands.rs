//! `linerate gen --commands -` steered line by line from standard input, as a script steers
//! pktgen-dpdk: each command's effect in the next interval line (asked `rate_pps`, achieved
//! `pps`, frame size), `stop`/`start`/`count` exact in packets, `dst-mac` in the frames written,
//! a refused command said and nothing changed, `quit` ending it with a summary; the metrics
//! scraped while stopped equal that summary. The XDP live-frames engine (root, a veth) follows
//! rate, stop and start and refuses size with the reason.
#![deny(unsafe_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn tmp(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("linerate-cmds-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

/// The JSON lines of a running gen, as they come.
struct Lines(mpsc::Receiver<serde_json::Value>);

impl Lines {
    fn next(&self) -> serde_json::Value {
        self.0
            .recv_timeout(Duration::from_secs(15))
            .expect("a line from gen within 15 s")
    }

    /// The next line of `kind`.
    fn next_of(&self, kind: &str) -> serde_json::Value {
        loop {
            let j = self.next();
            if j["type"] == kind {
                return j;
            }
        }
    }

    /// Sends `cmd` and waits for its acknowledgement; returns the second interval line after it
    /// (the first whole interval with the new settings).
    fn steer(&self, stdin: &mut ChildStdin, cmd: &str) -> serde_json::Value {
        writeln!(stdin, "{cmd}").unwrap();
        stdin.flush().unwrap();
        loop {
            let j = self.next();
            if j["type"] == "command" {
                assert_eq!(j["command"], cmd, "{j}");
                assert_eq!(j["ok"], true, "{j}");
                break;
            }
        }
        let _first = self.next_of("stats");
        let second = self.next_of("stats");
        // The first interval after the acknowledgement may hold the change; the second does
        // not mix.
        assert_ne!(second["status"], "settings changed", "{second}");
        second
    }
}

fn scrape(addr: &str, key: &str) -> f64 {
    let mut c = TcpStream::connect(addr).unwrap();
    write!(
        c,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut r = String::new();
    c.read_to_string(&mut r).unwrap();
    r.lines()
        .find_map(|l| l.strip_prefix(key)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {key} in {r}"))
}

/// (dst MAC, length) of every record of a classic pcap file.
fn records(path: &std::path::Path) -> Vec<([u8; 6], usize)> {
    let d = std::fs::read(path).unwrap();
    let mut off = 24;
    let mut v = Vec::new();
    while off + 16 <= d.len() {
        let cap = u32::from_le_bytes(d[off + 8..off + 12].try_into().unwrap()) as usize;
        let f = &d[off + 16..off + 16 + cap];
        v.push((f[..6].try_into().unwrap(), cap));
        off += 16 + cap;
    }
    v
}

#[test]
fn gen_steered_by_commands_changes_rate_size_mac_and_count_within_one_interval() {
    let out = tmp("steered.pcap");
    let mut child = Command::new(env!("CARGO_BIN_EXE_linerate"))
        .args([
            "gen",
            "-o",
            out.to_str().unwrap(),
            "--rate",
            "500pps",
            "-t",
            "60",
        ])
        .args(["--json", "--commands", "-", "--metrics", "127.0.0.1:0"])
        .args(["--metrics-linger", "0"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn gen");
    let mut stdin = child.stdin.take().unwrap();
    let (tx, rx) = mpsc::channel();
    let so = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for l in BufReader::new(so).lines().map_while(Result::ok) {
            if let Ok(j) = serde_json::from_str::<serde_json::Value>(&l) {
                let _ = tx.send(j);
            }
        }
    });
    let (etx, erx) = mpsc::channel();
    let se = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for l in BufReader::new(se).lines().map_while(Result::ok) {
            let _ = etx.send(l);
        }
    });
    let addr = loop {
        let l = erx
            .recv_timeout(Duration::from_secs(10))
            .expect("metrics line");
        if let Some(a) = l.strip_prefix("Metrics on http://") {
            break a.trim_end_matches("/metrics").to_string();
        }
    };
    let lines = Lines(rx);
    let start = lines.next_of("start");
    assert_eq!(start["rate_pps"], 500.0);
    let before = lines.next_of("stats");
    assert_eq!(before["rate_pps"], 500.0, "{before}");
    assert!(before["pps"].as_f64().unwrap() < 1000.0, "{before}");

    // rate: asked and achieved move within one interval.
    let j = lines.steer(&mut stdin, "rate 2000pps");
    assert_eq!(j["rate_pps"], 2000.0, "{j}");
    assert!(j["pps"].as_f64().unwrap() > 1200.0, "{j}");

    // size: the frames of the next interval are 512 B on the wire (508 without CRC).
    let j = lines.steer(&mut stdin, "size 512");
    assert_eq!(j["size"], "512", "{j}");
    let (p, b) = (
        j["interval_pkts"].as_u64().unwrap(),
        j["interval_bytes"].as_u64().unwrap(),
    );
    assert!(p > 0 && b == p * 508, "{j}");

    let j = lines.steer(&mut stdin, "dst-mac 02:00:00:00:00:09");
    assert!(j["interval_pkts"].as_u64().unwrap() > 0, "{j}");

    // A refused command changes nothing and says why.
    writeln!(stdin, "size 10").unwrap();
    let j = lines.next_of("command");
    assert_eq!(j["ok"], false, "{j}");
    assert!(j["error"].as_str().unwrap().contains("size 10"), "{j}");

    // stop: nothing leaves, the asked rate is 0; the metrics then equal what was sent.
    let j = lines.steer(&mut stdin, "stop");
    assert_eq!(j["sending"], false, "{j}");
    assert_eq!(j["rate_pps"], 0.0, "{j}");
    assert_eq!(j["interval_pkts"], 0, "{j}");
    let key = format!(
        "linerate_packets_total{{port=\"{}\",dir=\"tx\"}}",
        out.display()
    );
    let stopped = scrape(&addr, &key) as u64;
    assert_eq!(stopped, j["pkts"].as_u64().unwrap(), "{j}");

    // count: exactly that many more after a start, then it waits again.
    writeln!(stdin, "count 300").unwrap();
    assert_eq!(lines.next_of("command")["ok"], true);
    lines.steer(&mut stdin, "start");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let j = lines.next_of("stats");
        if j["interval_pkts"] == 0 {
            assert_eq!(j["pkts"].as_u64().unwrap(), stopped + 300, "{j}");
            assert_eq!(j["sending"], false, "waiting after the count: {j}");
            assert_eq!(j["rate_pps"], 0.0, "{j}");
            break;
        }
        assert!(Instant::now() < deadline, "count 300 never finished: {j}");
    }
    writeln!(stdin, "quit").unwrap();
    let sum = lines.next_of("summary");
    assert!(child.wait().unwrap().success());
    assert_eq!(sum["pkts"].as_u64().unwrap(), stopped + 300, "{sum}");
    assert_eq!(sum["steered"], true, "{sum}");

    // The file: 60 B frames, then 508 B ones, the last 300 + some to the new MAC.
    let recs = records(&out);
    assert_eq!(recs.len() as u64, stopped + 300);
    let first_big = recs.iter().position(|r| r.1 == 508).expect("512 B frames");
    assert!(recs[..first_big].iter().all(|r| r.1 == 60));
    assert!(recs[first_big..].iter().all(|r| r.1 == 508));
    let first_mac = recs
        .iter()
        .position(|r| r.0 == [2, 0, 0, 0, 0, 9])
        .expect("frames to 02:00:00:00:00:09");
    assert!(first_mac > first_big);
    assert!(recs[first_mac..].iter().all(|r| r.0 == [2, 0, 0, 0, 0, 9]));
    let _ = std::fs::remove_dir_all(out.parent().unwrap());
}

/// (destination IPv4 address, VLAN id) of every record of a classic pcap file, in order.
fn dst_and_vlan(path: &std::path::Path) -> Vec<([u8; 4], Option<u16>)> {
    let d = std::fs::read(path).unwrap();
    let mut off = 24;
    let mut v = Vec::new();
    while off + 16 <= d.len() {
        let cap = u32::from_le_bytes(d[off + 8..off + 12].try_into().unwrap()) as usize;
        let f = &d[off + 16..off + 16 + cap];
        let (vlan, l3) = if f[12..14] == [0x81, 0x00] {
            (Some(u16::from_be_bytes([f[14], f[15]]) & 0x0fff), 18)
        } else {
            (None, 14)
        };
        v.push((f[l3 + 16..l3 + 20].try_into().unwrap(), vlan));
        off += 16 + cap;
    }
    v
}

#[test]
fn dst_ip_and_vlan_commands_change_the_packets_after_them_and_an_unknown_one_changes_nothing() {
    let out = tmp("fields.pcap");
    let child = Command::new(env!("CARGO_BIN_EXE_linerate"))
        .args(["gen", "-o", out.to_str().unwrap(), "--rate", "1000pps"])
        .args(["-t", "60", "--json", "--commands", "-", "--interval", "0.2"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn gen");
    let mut child = Kill(child);
    let mut stdin = child.0.stdin.take().unwrap();
    let (tx, rx) = mpsc::channel();
    let so = child.0.stdout.take().unwrap();
    std::thread::spawn(move || {
        for l in BufReader::new(so).lines().map_while(Result::ok) {
            if let Ok(j) = serde_json::from_str::<serde_json::Value>(&l) {
                let _ = tx.send(j);
            }
        }
    });
    let lines = Lines(rx);
    lines.next_of("stats");
    let j = lines.steer(&mut stdin, "dst-ip 10.0.0.2");
    assert!(j["interval_pkts"].as_u64().unwrap() > 0, "{j}");
    // pktgen-dpdk's spelling of a VLAN id.
    let j = lines.steer(&mut stdin, "set 0 vlanid 42");
    assert!(j["interval_pkts"].as_u64().unwrap() > 0, "{j}");
    // Unknown: said, and the run goes on sending.
    writeln!(stdin, "jump 3").unwrap();
    let j = lines.next_of("command");
    assert_eq!(j["ok"], false, "{j}");
    assert!(
        j["error"]
            .as_str()
            .unwrap()
            .contains("unknown command 'jump'"),
        "{j}"
    );
    let a = lines.next_of("stats")["pkts"].as_u64().unwrap();
    let b = lines.next_of("stats")["pkts"].as_u64().unwrap();
    assert!(
        b > a,
        "still sending after an unknown command: {a} then {b}"
    );
    writeln!(stdin, "quit").unwrap();
    let sum = lines.next_of("summary");
    assert!(child.0.wait().unwrap().success());
    // In order: the old address untagged, then the new one untagged, then the new one in
    // VLAN 42, and never back.
    let recs = dst_and_vlan(&out);
    assert_eq!(recs.len() as u64, sum["pkts"].as_u64().unwrap());
    let old = ([198, 18, 0, 2], None);
    let new = ([10, 0, 0, 2], None);
    let tagged = ([10, 0, 0, 2], Some(42));
    let p1 = recs
        .iter()
        .position(|r| *r != old)
        .expect("a changed packet");
    let p2 = recs
        .iter()
        .position(|r| *r == tagged)
        .expect("a tagged packet");
    assert!(p1 > 0 && p2 > p1, "{p1} {p2}");
    assert!(recs[p1..p2].iter().all(|r| *r == new));
    assert!(recs[p2..].iter().all(|r| *r == tagged));
    // Their checksums hold (tshark).
    let o = Command::new("tshark")
        .args(["-r", out.to_str().unwrap(), "-n"])
        .args([
            "-o",
            "ip.check_checksum:TRUE",
            "-o",
            "udp.check_checksum:TRUE",
        ])
        .args([
            "-Y",
            "ip.checksum.status==2 || udp.checksum.status==2 || vlan.id!=42 && vlan",
        ])
        .output()
        .expect("tshark is installed by scripts/setup.sh --tests");
    assert!(o.status.success());
    assert_eq!(String::from_utf8_lossy(&o.stdout).lines().count(), 0);
    let _ = std::fs::remove_file(&out);
}

#[test]
fn commands_flag_is_checked() {
    let o = Command::new(env!("CARGO_BIN_EXE_linerate"))
        .args(["gen", "-o", "mem:x", "-c", "10", "--commands", "file.txt"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--commands file.txt"));
}

/// Kills a child left running by a failed test.
struct Kill(std::process::Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `gen --engine live --commands -` on a veth (root): the XDP live-frames engine follows
/// `rate` (asked and achieved move), `stop` (an interval with nothing sent) and `start`, and
/// refuses `size` with the reason and nothing changed; `quit` ends it with a summary that says
/// the rate was steered.
#[test]
fn live_engine_follows_rate_stop_and_start_and_refuses_size() {
    use linerate_test_support::netns::{self, NetnsPair, Side};
    if !netns::require_priv() {
        return;
    }
    let p = NetnsPair::new().expect("netns pair");
    let obj = linerate_test_support::repo_root().join("bpf/xdp_drop.o");
    p.ip_in(
        Side::B,
        &[
            "link",
            "set",
            "dev",
            "vB",
            "xdpdrv",
            "obj",
            obj.to_str().unwrap(),
            "sec",
            "xdp",
        ],
    )
    .expect("XDP program on the peer");
    let mut child = Command::new("ip")
        .args([
            "netns",
            "exec",
            p.ns(Side::A),
            env!("CARGO_BIN_EXE_linerate"),
        ])
        .args([
            "gen", "-o", "xdp:vA", "--engine", "live", "--rate", "20kpps", "-t", "40",
        ])
        .args(["--json", "--commands", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn gen");
    let mut stdin = child.stdin.take().unwrap();
    let so = child.stdout.take().unwrap();
    let child = Kill(child);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(so).lines().map_while(Result::ok) {
            if let Ok(j) = serde_json::from_str::<serde_json::Value>(&l) {
                let _ = tx.send(j);
            }
        }
    });
    let lines = Lines(rx);
    let start = lines.next_of("start");
    assert_eq!(start["engine"], "live", "{start}");
    let before = lines.next_of("stats");
    assert_eq!(before["rate_pps"], 20_000.0, "{before}");

    let j = lines.steer(&mut stdin, "rate 60kpps");
    assert_eq!(j["rate_pps"], 60_000.0, "{j}");
    // Whole runs of a tenth of a second: well above the 20 kpps first asked.
    assert!(j["pps"].as_f64().unwrap() > 40_000.0, "{j}");

    writeln!(stdin, "size 128").unwrap();
    stdin.flush().unwrap();
    let r = lines.next_of("command");
    assert_eq!(r["ok"], false, "{r}");
    assert!(
        r["error"].as_str().unwrap().contains("live-frames engine"),
        "{r}"
    );

    let j = lines.steer(&mut stdin, "stop");
    assert_eq!(j["sending"], false, "{j}");
    assert_eq!(j["rate_pps"], 0.0, "{j}");
    assert_eq!(j["pps"], 0.0, "nothing sent while stopped: {j}");
    let j = lines.steer(&mut stdin, "start");
    assert_eq!(j["sending"], true, "{j}");
    assert!(j["pps"].as_f64().unwrap() > 40_000.0, "{j}");

    writeln!(stdin, "quit").unwrap();
    stdin.flush().unwrap();
    let s = lines.next_of("summary");
    assert_eq!(s["steered"], true, "{s}");
    assert!(s.get("achieved_pct").is_none(), "{s}");
    drop(child);
}

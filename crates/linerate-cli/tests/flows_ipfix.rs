//! IPFIX export proven against a real collector: nfcapd (Debian's nfdump) listens on a loopback
//! port in a temporary folder, `linerate flows --ipfix` exports a known capture (and writes its
//! own CSV in the same run), and `nfdump -r` must show the same flows with the same packets and
//! bytes each way, and the initiator's TCP flags: as RFC 5103 biflows (nfdump stores the reverse
//! counters as out packets/bytes) and, with `--ipfix-uniflow`, as two uniflow records per flow.
//!
//! Without nfdump the test prints why and passes, unless LINERATE_REQUIRE_PRIV=1.
#![deny(unsafe_code)]

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn have(tool: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool}"))
        .output()
        .is_ok_and(|o| o.status.success())
}

/// nfcapd, stopped (SIGTERM, then SIGKILL) by its PID when dropped.
struct Collector {
    child: Child,
    dir: PathBuf,
    port: u16,
}

impl Collector {
    fn start(dir: &Path) -> Collector {
        // A free loopback UDP port: bind, read it, release it.
        let port = std::net::UdpSocket::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        std::fs::create_dir_all(dir).unwrap();
        let child = Command::new("nfcapd")
            .arg("-w")
            .arg(dir)
            .args(["-b", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start nfcapd");
        let c = Collector {
            child,
            dir: dir.to_path_buf(),
            port,
        };
        // Ready when its socket shows in /proc/net/udp.
        let hex = format!(":{:04X} ", port);
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(5) {
            if std::fs::read_to_string("/proc/net/udp").is_ok_and(|s| s.contains(&hex)) {
                return c;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("nfcapd did not open port {port}");
    }

    /// Stops nfcapd (it writes its file on SIGTERM) and returns the file.
    fn finish(mut self) -> PathBuf {
        // The PID of the child we started and have not reaped.
        let _ = linerate::os::signal(self.child.id(), libc::SIGTERM);
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(10) {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let files: Vec<PathBuf> = std::fs::read_dir(&self.dir)
            .unwrap()
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.file_name().is_some_and(|n| {
                    let n = n.to_string_lossy();
                    n.starts_with("nfcapd.") && !n.contains("current")
                })
            })
            .collect();
        assert_eq!(files.len(), 1, "nfcapd files: {files:?}");
        files[0].clone()
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// (proto, src, sport, dst, dport) -> (records, packets, bytes, reverse packets, reverse bytes,
/// OR of the source's TCP flags)
type Flows = BTreeMap<(String, IpAddr, u16, IpAddr, u16), [u64; 6]>;

/// TCP flags from our letters (`SAFRPUEC`, `-`) or nfdump's positions (`CEUAPRSF`, `.`).
fn flags(s: &str) -> u64 {
    let s = s.trim();
    if s.len() == 8 && s.chars().all(|c| c == '.' || c.is_ascii_uppercase()) && s.contains('.') {
        return s
            .chars()
            .rev()
            .enumerate()
            .filter(|(_, c)| *c != '.')
            .map(|(i, _)| 1 << i)
            .sum();
    }
    s.chars()
        .map(|c| match c {
            'F' => 0x01,
            'S' => 0x02,
            'R' => 0x04,
            'P' => 0x08,
            'A' => 0x10,
            'U' => 0x20,
            'E' => 0x40,
            'C' => 0x80,
            _ => 0,
        })
        .sum()
}

fn norm_proto(p: &str) -> String {
    match p.trim().to_ascii_lowercase().as_str() {
        "icmp6" | "ipv6-icmp" | "58" => "icmp6".into(),
        "1" => "icmp".into(),
        "6" => "tcp".into(),
        "17" => "udp".into(),
        other => other.into(),
    }
}

fn add(m: &mut Flows, c: &[&str]) {
    let proto = norm_proto(c[0]);
    let icmp = proto.starts_with("icmp");
    let port = |s: &str| {
        if icmp {
            0
        } else {
            s.trim().parse().unwrap_or(0)
        }
    };
    let ip = |s: &str| {
        s.trim()
            .parse::<IpAddr>()
            .unwrap_or_else(|_| panic!("address {s}"))
    };
    let n = |s: &str| {
        s.trim()
            .parse::<u64>()
            .unwrap_or_else(|_| panic!("number {s} in {c:?}"))
    };
    let k = (proto, ip(c[1]), port(c[2]), ip(c[3]), port(c[4]));
    let v = m.entry(k).or_default();
    v[0] += 1;
    v[1] += n(c[5]);
    v[2] += n(c[6]);
    v[3] += n(c[7]);
    v[4] += n(c[8]);
    v[5] |= flags(c[9]);
}

/// Our CSV (proto,saddr,sport,daddr,dport,spkts,sbytes,dpkts,dbytes,sflags,dflags), as biflows
/// or split into uniflows.
fn ours(csv: &str, uniflow: bool) -> Flows {
    let mut m = Flows::new();
    for line in csv.lines().skip(1) {
        let c: Vec<&str> = line.split(',').collect();
        if uniflow {
            add(
                &mut m,
                &[c[0], c[1], c[2], c[3], c[4], c[5], c[6], "0", "0", c[9]],
            );
            if c[7] != "0" {
                add(
                    &mut m,
                    &[c[0], c[3], c[4], c[1], c[2], c[7], c[8], "0", "0", c[10]],
                );
            }
        } else {
            add(&mut m, &c[..10]);
        }
    }
    m
}

fn theirs(file: &Path) -> Flows {
    let o = Command::new("nfdump")
        .arg("-r")
        .arg(file)
        .args([
            "-q",
            "-N",
            "-o",
            "fmt:%pr,%sa,%sp,%da,%dp,%ipkt,%ibyt,%opkt,%obyt,%flg",
        ])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "nfdump: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let mut m = Flows::new();
    for line in String::from_utf8_lossy(&o.stdout).lines() {
        let c: Vec<&str> = line.split(',').collect();
        if c.len() == 10 {
            add(&mut m, &c);
        }
    }
    m
}

fn export(cap: &Path, tmp: &Path, uniflow: bool) {
    let dir = tmp.join(if uniflow { "uni" } else { "bi" });
    let col = Collector::start(&dir);
    let csv = dir.join("ours.csv");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_linerate"));
    cmd.args(["flows", "-q", "-i"])
        .arg(cap)
        .arg("-w")
        .arg(&csv)
        .args([
            "--fields",
            "proto,saddr,sport,daddr,dport,spkts,sbytes,dpkts,dbytes,sflags,dflags",
        ])
        .args(["--ipfix", &format!("127.0.0.1:{}", col.port)]);
    if uniflow {
        cmd.arg("--ipfix-uniflow");
    }
    assert!(cmd.status().unwrap().success());
    // Let nfcapd take the last datagrams before it is told to stop.
    std::thread::sleep(Duration::from_millis(300));
    let file = col.finish();
    let a = ours(&std::fs::read_to_string(&csv).unwrap(), uniflow);
    let b = theirs(&file);
    let total = |m: &Flows| {
        m.values().fold([0u64; 5], |mut s, v| {
            for i in 0..5 {
                s[i] += v[i];
            }
            s
        })
    };
    println!(
        "{} ({}): ours {:?}, nfdump {:?} (records, pkts, bytes, rev pkts, rev bytes)",
        cap.display(),
        if uniflow { "uniflow" } else { "biflow" },
        total(&a),
        total(&b)
    );
    assert!(!a.is_empty());
    let diff: Vec<String> = a
        .iter()
        .filter(|(k, v)| b.get(*k) != Some(*v))
        .map(|(k, v)| format!("{k:?}: ours {v:?} nfdump {:?}", b.get(k)))
        .chain(
            b.keys()
                .filter(|k| !a.contains_key(*k))
                .map(|k| format!("{k:?}: only in nfdump")),
        )
        .collect();
    assert!(
        diff.is_empty(),
        "{} differences:\n{}",
        diff.len(),
        diff.join("\n")
    );
}

#[test]
fn nfcapd_stores_what_we_export() {
    if !(have("nfcapd") && have("nfdump")) {
        linerate_test_support::skip("nfcapd/nfdump not installed (apt-get install nfdump)");
        return;
    }
    let cap = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/sample.pcap");
    let tmp = std::env::temp_dir().join(format!("linerate-flows-ipfix-{}", std::process::id()));
    export(&cap, &tmp, false);
    export(&cap, &tmp, true);
    let _ = std::fs::remove_dir_all(&tmp);
}

/// Records due leave within `--ipfix-flush` whatever the output: a Kafka `linger.ms` longer
/// than that is refused before anything is read or connected (exit 2, naming both).
#[test]
fn kafka_linger_longer_than_the_flush_is_refused() {
    let cap = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/sample.pcap");
    let o = Command::new(env!("CARGO_BIN_EXE_linerate"))
        .args(["flows", "-q", "-i"])
        .arg(&cap)
        .args([
            "--kafka",
            "127.0.0.1:1/flows",
            "--kafka-opt",
            "linger.ms=1500",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("linger.ms=1500") && err.contains("--ipfix-flush"),
        "{err}"
    );
    // With a longer flush it is taken (and then the broker, which is not there, is the error).
    let o = Command::new(env!("CARGO_BIN_EXE_linerate"))
        .args(["flows", "-q", "-i"])
        .arg(&cap)
        .args([
            "--kafka",
            "127.0.0.1:1/flows",
            "--kafka-opt",
            "linger.ms=1500",
        ])
        .args(["--ipfix-flush", "2", "--kafka-timeout", "200ms"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("--ipfix-flush"), "{err}");
}

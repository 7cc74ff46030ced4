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

/// Ethernet/IPv4 frame from `src` to `dst` carrying `l4` with protocol `proto`.
fn ipv4_frame(src: [u8; 4], dst: [u8; 4], proto: u8, l4: &[u8]) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00];
    let len = (20 + l4.len()) as u16;
    f.extend_from_slice(&[0x45, 0]);
    f.extend_from_slice(&len.to_be_bytes());
    f.extend_from_slice(&[0, 1, 0x40, 0, 64, proto, 0, 0]);
    f.extend_from_slice(&src);
    f.extend_from_slice(&dst);
    let mut sum = 0u32;
    for k in (14..34).step_by(2) {
        sum += u16::from_be_bytes([f[k], f[k + 1]]) as u32;
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    f[24..26].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    f.extend_from_slice(l4);
    f
}

/// A pcap (µs) of `frames` with their times (ns).
fn write_pcap(path: &Path, frames: &[(u64, Vec<u8>)]) {
    let mut f = Vec::new();
    f.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    f.extend_from_slice(&2u16.to_le_bytes());
    f.extend_from_slice(&4u16.to_le_bytes());
    for v in [0u32, 0, 65535, 1] {
        f.extend_from_slice(&v.to_le_bytes());
    }
    for (ts, p) in frames {
        f.extend_from_slice(&((ts / 1_000_000_000) as u32).to_le_bytes());
        f.extend_from_slice(&((ts % 1_000_000_000 / 1000) as u32).to_le_bytes());
        f.extend_from_slice(&(p.len() as u32).to_le_bytes());
        f.extend_from_slice(&(p.len() as u32).to_le_bytes());
        f.extend_from_slice(p);
    }
    std::fs::write(path, f).unwrap();
}

/// Milliseconds since the epoch of tshark's "Nov 14, 2023 22:13:21.250000000 UTC".
fn tshark_ms(s: &str) -> u64 {
    let months = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let w: Vec<&str> = s.split_whitespace().collect();
    assert!(w.len() >= 4, "tshark time '{s}'");
    let m = months.iter().position(|x| *x == w[0]).unwrap() as i64 + 1;
    let d: i64 = w[1].trim_end_matches(',').parse().unwrap();
    let y: i64 = w[2].parse().unwrap();
    let (hms, frac) = w[3].split_once('.').unwrap_or((w[3], "0"));
    let t: Vec<i64> = hms.split(':').map(|x| x.parse().unwrap()).collect();
    // Days from the civil date (proleptic Gregorian).
    let (y2, m2) = if m <= 2 { (y - 1, m + 9) } else { (y, m - 3) };
    let era = y2.div_euclid(400);
    let yoe = y2 - era * 400;
    let doy = (153 * m2 + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let ms: i64 = format!("{frac:0<3}")[..3].parse().unwrap();
    ((days * 86_400 + t[0] * 3600 + t[1] * 60 + t[2]) * 1000 + ms) as u64
}

/// `--ipfix-uniflow` as RFC 7012 counts flows, read back by tshark's IPFIX dissector: each
/// record's start and end are its own direction's first and last packet, its ICMP type/code its
/// own packets' (an echo flow's reverse record: 0.0, replies), its packets its own.
#[test]
fn tshark_reads_uniflow_records_with_each_directions_own_figures() {
    if !have("tshark") {
        linerate_test_support::skip("tshark not installed (apt-get install tshark)");
        return;
    }
    let tmp = std::env::temp_dir().join(format!("linerate-uniflow-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let (a, b) = ([10, 0, 0, 1], [10, 0, 0, 2]);
    let echo = |t: u8| {
        let mut l4 = vec![t, 0, 0, 0, 0, 7, 0, 1];
        l4.extend_from_slice(&[0x55; 8]);
        l4
    };
    let udp = |sp: u16, dp: u16| {
        let mut l4 = Vec::new();
        for v in [sp, dp, 16, 0] {
            l4.extend_from_slice(&v.to_be_bytes());
        }
        l4.extend_from_slice(&[0xaa; 8]);
        l4
    };
    let s = 1_700_000_000_000_000_000u64;
    let ms = 1_000_000u64;
    let frames = vec![
        (s + 1000 * ms, ipv4_frame(a, b, 1, &echo(8))),
        (s + 1100 * ms, ipv4_frame(a, b, 17, &udp(5353, 53))),
        (s + 1250 * ms, ipv4_frame(b, a, 1, &echo(0))),
        (s + 1400 * ms, ipv4_frame(a, b, 17, &udp(5353, 53))),
        (s + 1700 * ms, ipv4_frame(b, a, 17, &udp(53, 5353))),
        (s + 1900 * ms, ipv4_frame(b, a, 17, &udp(53, 5353))),
        (s + 2000 * ms, ipv4_frame(a, b, 1, &echo(8))),
        (s + 2300 * ms, ipv4_frame(b, a, 1, &echo(0))),
    ];
    let cap = tmp.join("exchange.pcap");
    write_pcap(&cap, &frames);
    let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    rx.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let port = rx.local_addr().unwrap().port();
    let st = Command::new(env!("CARGO_BIN_EXE_linerate"))
        .args(["flows", "-q", "-i"])
        .arg(&cap)
        .args(["--ipfix", &format!("127.0.0.1:{port}"), "--ipfix-uniflow"])
        .status()
        .unwrap();
    assert!(st.success());
    let mut msgs = Vec::new();
    let mut buf = [0u8; 65536];
    while let Ok(n) = rx.recv(&mut buf) {
        msgs.push((s, buf[..n].to_vec()));
    }
    assert!(!msgs.is_empty());
    // The messages as UDP datagrams to `port`, for tshark.
    let frames: Vec<(u64, Vec<u8>)> = msgs
        .iter()
        .map(|(t, m)| {
            let mut l4 = Vec::new();
            for v in [4739u16, port, (8 + m.len()) as u16, 0] {
                l4.extend_from_slice(&v.to_be_bytes());
            }
            l4.extend_from_slice(m);
            (*t, ipv4_frame([127, 0, 0, 1], [127, 0, 0, 1], 17, &l4))
        })
        .collect();
    let ipfix = tmp.join("ipfix.pcap");
    write_pcap(&ipfix, &frames);
    let o = Command::new("tshark")
        .arg("-r")
        .arg(&ipfix)
        .args(["-d", &format!("udp.port=={port},cflow"), "-T", "fields"])
        .args(["-E", "separator=;", "-E", "aggregator=|"])
        .args(["-e", "cflow.srcaddr", "-e", "cflow.protocol"])
        .args(["-e", "cflow.abstimestart", "-e", "cflow.abstimeend"])
        .args(["-e", "cflow.icmp_type_code_ipv4", "-e", "cflow.packets"])
        .args(["-e", "_ws.expert.severity"])
        .env("TZ", "UTC")
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&tmp);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    // (source, protocol) -> (start ms, end ms, ICMP type/code, packets), by tshark.
    let mut got = BTreeMap::new();
    for l in text.lines() {
        let c: Vec<Vec<&str>> = l.split(';').map(|f| f.split('|').collect()).collect();
        assert_eq!(c.len(), 7, "{l}");
        assert!(c[6] == vec![""], "tshark expert info: {l}");
        for (i, src) in c[0].iter().enumerate() {
            // tshark shows the type/code as 0x0800.
            let code = c[4][i].trim_start_matches("0x");
            let code = u64::from_str_radix(code, 16)
                .unwrap_or_else(|_| panic!("ICMP type/code '{}'", c[4][i]));
            got.insert(
                (src.to_string(), c[1][i].parse::<u8>().unwrap()),
                (
                    tshark_ms(c[2][i]),
                    tshark_ms(c[3][i]),
                    code,
                    c[5][i].parse::<u64>().unwrap(),
                ),
            );
        }
    }
    let base = s / ms;
    println!("tshark: {got:?}");
    let want = [
        (("10.0.0.1", 1), (1000, 2000, 0x0800, 2)),
        (("10.0.0.2", 1), (1250, 2300, 0x0000, 2)),
        (("10.0.0.1", 17), (1100, 1400, 0, 2)),
        (("10.0.0.2", 17), (1700, 1900, 0, 2)),
    ];
    assert_eq!(got.len(), want.len(), "{text}");
    for ((src, proto), (t0, t1, code, pkts)) in want {
        let g = got[&(src.to_string(), proto)];
        assert_eq!(
            g,
            (base + t0, base + t1, code, pkts),
            "{src} proto {proto}: {text}"
        );
    }
}

/// A collector the socket cannot be connected to (the limited broadcast address without
/// SO_BROADCAST: refused by connect(2), as an unreachable network is) fails the run before any
/// output is started: the -w file keeps its content, no metrics textfile is written and the
/// endpoint does not linger.
#[test]
fn an_ipfix_start_up_failure_touches_no_output() {
    let dir = std::env::temp_dir().join(format!("linerate-ipfix-start-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let keep = dir.join("keep.csv");
    std::fs::write(&keep, "precious\n").unwrap();
    let prom = dir.join("keep.prom");
    let t0 = Instant::now();
    let o = Command::new(env!("CARGO_BIN_EXE_linerate"))
        .args(["flows", "-i"])
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/sample.pcap"))
        .args(["--ipfix", "255.255.255.255", "-w"])
        .arg(&keep)
        .arg("--metrics-textfile")
        .arg(&prom)
        .args(["--metrics", "127.0.0.1:0", "--metrics-linger", "5"])
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(e.contains("--ipfix 255.255.255.255"), "{e}");
    assert!(
        t0.elapsed() < Duration::from_secs(4),
        "lingered: {:?}",
        t0.elapsed()
    );
    assert_eq!(std::fs::read_to_string(&keep).unwrap(), "precious\n");
    assert!(!prom.exists());
    let _ = std::fs::remove_dir_all(&dir);
}

/// --ipfix-uniflow shapes IPFIX records: without --ipfix it cannot apply and is refused.
#[test]
fn ipfix_uniflow_without_ipfix_is_refused() {
    let o = Command::new(env!("CARGO_BIN_EXE_linerate"))
        .args(["flows", "-q", "--ipfix-uniflow", "-i"])
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/sample.pcap"))
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(
        e.contains("--ipfix-uniflow") && e.contains("--ipfix HOST"),
        "{e}"
    );
    assert!(o.stdout.is_empty());
}

/// A collector that refuses every message (a closed port on loopback): exit 1, and the final
/// metrics say so, with the IPFIX export's counters in the textfile.
#[test]
fn ipfix_failures_are_in_the_final_metrics() {
    let dir = std::env::temp_dir().join(format!("linerate-ipfix-prom-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let prom = dir.join("fi.prom");
    let o = Command::new(env!("CARGO_BIN_EXE_linerate"))
        .args(["flows", "-q", "-i"])
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/sample.pcap"))
        .args(["--ipfix", "127.0.0.1:9", "--metrics-textfile"])
        .arg(&prom)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let text = std::fs::read_to_string(&prom).unwrap();
    let value = |family: &str| -> u64 {
        text.lines()
            .find(|l| l.starts_with(&format!("{family}{{collector=\"127.0.0.1:9\"}}")))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {family}: {text}"))
    };
    let records = value("linerate_flows_ipfix_records_total");
    assert!(records > 0);
    assert_eq!(value("linerate_flows_ipfix_failed_records_total"), records);
    assert_eq!(
        value("linerate_flows_ipfix_failed_messages_total"),
        value("linerate_flows_ipfix_messages_total")
    );
    let _ = std::fs::remove_dir_all(&dir);
}

//! `linerate flows --kafka` against a real broker: Apache Kafka 3.9, started once for this test
//! binary by the project's own `scripts/kafka.sh` (single-node KRaft on loopback, topics created
//! on first use with 4 partitions) and read back with a real consumer (librdkafka's, through the
//! rdkafka crate). One test runs the broker scenarios in order, the last of which stops the
//! broker: a known capture exported and compared record by record with the `-w` output of the
//! same run (keys canonical, every flow on one partition, several partitions used); two probes
//! into one topic; a frozen broker, whose unacknowledged records are counted failed and whose
//! wait a SIGINT ends within a second; and the broker stopped mid-export, where the failed count
//! is exactly what the consumer never saw. Other tests need no broker (unreachable broker, flag
//! errors).
//!
//! Without Java 17 or Maven (or Maven Central) the broker test prints why and passes, unless
//! LINERATE_REQUIRE_PRIV=1 (as in CI), where it fails.
#![deny(unsafe_code)]

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn tmpdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("linerate-kafka-test-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

// ---------------------------------------------------------------------------------------------
// The broker

/// A broker started by scripts/kafka.sh; stopped (by its PID, through the script) when dropped,
/// and by the script's watcher if this process dies first.
struct Broker {
    addr: String,
    dir: String,
    pid: u32,
}

impl Broker {
    fn start() -> Result<Broker, String> {
        let o = Command::new("bash")
            .arg(root().join("scripts/kafka.sh"))
            .args(["start", "--owner", &std::process::id().to_string()])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run scripts/kafka.sh: {e}"))?;
        let out = String::from_utf8_lossy(&o.stdout);
        let var = |k: &str| {
            out.lines()
                .find_map(|l| l.strip_prefix(&format!("{k}=")))
                .map(str::to_string)
        };
        match (
            o.status.success(),
            var("KAFKA_BROKER"),
            var("KAFKA_DIR"),
            var("KAFKA_PID"),
        ) {
            (true, Some(addr), Some(dir), Some(pid)) => Ok(Broker {
                addr,
                dir,
                pid: pid.parse().map_err(|_| format!("bad KAFKA_PID {pid}"))?,
            }),
            _ => Err(format!(
                "scripts/kafka.sh start failed: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            )),
        }
    }

    fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([sig, &self.pid.to_string()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill {sig} {}", self.pid);
    }

    fn stop(&mut self) {
        if self.dir.is_empty() {
            return;
        }
        // A frozen broker must run again to stop.
        let _ = Command::new("kill")
            .args(["-CONT", &self.pid.to_string()])
            .status();
        let st = Command::new("bash")
            .arg(root().join("scripts/kafka.sh"))
            .args(["stop", &self.dir])
            .status();
        assert!(st.is_ok_and(|s| s.success()), "kafka.sh stop {}", self.dir);
        assert!(
            !Path::new(&format!("/proc/{}", self.pid)).exists(),
            "the broker still runs after kafka.sh stop"
        );
        self.dir.clear();
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        if !self.dir.is_empty() {
            let _ = Command::new("kill")
                .args(["-CONT", &self.pid.to_string()])
                .status();
            let _ = Command::new("bash")
                .arg(root().join("scripts/kafka.sh"))
                .args(["stop", &self.dir])
                .status();
        }
    }
}

/// Starts the broker, or explains why not: a skip, or a failure under LINERATE_REQUIRE_PRIV=1.
fn broker_or_skip() -> Option<Broker> {
    match Broker::start() {
        Ok(b) => Some(b),
        Err(e) => {
            linerate_test_support::skip(&format!(
                "the Kafka broker cannot start (bash scripts/setup.sh --tests installs Java 17 and Maven): {e}"
            ));
            None
        }
    }
}

/// One message read back.
#[derive(Debug, Clone)]
struct Msg {
    partition: i32,
    key: String,
    value: Value,
}

/// Every message of `topic`, read from the beginning of each partition to its end.
fn consume(broker: &str, topic: &str) -> Vec<Msg> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", broker)
        .set("group.id", format!("linerate-test-{}", std::process::id()))
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false")
        .create()
        .unwrap();
    let t = Duration::from_secs(20);
    let md = c.fetch_metadata(Some(topic), t).unwrap();
    let parts: Vec<i32> = md
        .topics()
        .iter()
        .find(|x| x.name() == topic)
        .map(|x| x.partitions().iter().map(|p| p.id()).collect())
        .unwrap_or_default();
    assert!(!parts.is_empty(), "topic {topic} has no partitions");
    let mut want = BTreeMap::new();
    let mut tpl = TopicPartitionList::new();
    for &p in &parts {
        let (lo, hi) = c.fetch_watermarks(topic, p, t).unwrap();
        want.insert(p, hi);
        if hi > lo {
            tpl.add_partition_offset(topic, p, Offset::Beginning)
                .unwrap();
        }
    }
    let mut got = Vec::new();
    if tpl.count() == 0 {
        return got;
    }
    c.assign(&tpl).unwrap();
    let mut next: BTreeMap<i32, i64> = BTreeMap::new();
    let t0 = Instant::now();
    while want
        .iter()
        .any(|(p, hi)| next.get(p).copied().unwrap_or(0) < *hi)
    {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "reading {topic}: got {} messages, positions {next:?} of {want:?}",
            got.len()
        );
        let Some(m) = c.poll(Duration::from_millis(200)) else {
            continue;
        };
        let m = m.unwrap();
        next.insert(m.partition(), m.offset() + 1);
        let key = String::from_utf8(m.key().unwrap_or_default().to_vec()).unwrap();
        let value: Value = serde_json::from_slice(m.payload().unwrap_or_default())
            .unwrap_or_else(|e| panic!("message at {}/{}: {e}", m.partition(), m.offset()));
        got.push(Msg {
            partition: m.partition(),
            key,
            value,
        });
    }
    got
}

// ---------------------------------------------------------------------------------------------
// Captures

/// A classic pcap file (Ethernet, µs timestamps) built in memory.
struct Pcap(Vec<u8>);

impl Pcap {
    fn new() -> Pcap {
        let mut v = Vec::new();
        v.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
        v.extend_from_slice(&2u16.to_le_bytes());
        v.extend_from_slice(&4u16.to_le_bytes());
        v.extend_from_slice(&[0; 8]);
        v.extend_from_slice(&65535u32.to_le_bytes());
        v.extend_from_slice(&1u32.to_le_bytes());
        Pcap(v)
    }
    fn push(&mut self, us: u64, frame: &[u8]) {
        self.0
            .extend_from_slice(&((us / 1_000_000) as u32).to_le_bytes());
        self.0
            .extend_from_slice(&((us % 1_000_000) as u32).to_le_bytes());
        self.0
            .extend_from_slice(&(frame.len() as u32).to_le_bytes());
        self.0
            .extend_from_slice(&(frame.len() as u32).to_le_bytes());
        self.0.extend_from_slice(frame);
    }
    fn body(&self) -> &[u8] {
        &self.0[24..]
    }
    fn write(&self, p: &Path) {
        std::fs::write(p, &self.0).unwrap();
    }
}

#[derive(Clone, Copy)]
enum Ip {
    V4([u8; 4]),
    V6([u8; 16]),
}

/// Ethernet (with an 802.1Q tag when `vlan` > 0), IPv4 or IPv6, then `l4` with protocol `proto`.
fn frame(vlan: u16, src: Ip, dst: Ip, proto: u8, l4: &[u8]) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];
    if vlan > 0 {
        f.extend_from_slice(&[0x81, 0x00]);
        f.extend_from_slice(&vlan.to_be_bytes());
    }
    match (src, dst) {
        (Ip::V4(s), Ip::V4(d)) => {
            f.extend_from_slice(&[0x08, 0x00]);
            let total = 20 + l4.len() as u16;
            f.extend_from_slice(&[0x45, 0]);
            f.extend_from_slice(&total.to_be_bytes());
            f.extend_from_slice(&[0, 0, 0x40, 0, 64, proto, 0, 0]);
            f.extend_from_slice(&s);
            f.extend_from_slice(&d);
        }
        (Ip::V6(s), Ip::V6(d)) => {
            f.extend_from_slice(&[0x86, 0xdd]);
            f.extend_from_slice(&[0x60, 0, 0, 0]);
            f.extend_from_slice(&(l4.len() as u16).to_be_bytes());
            f.extend_from_slice(&[proto, 64]);
            f.extend_from_slice(&s);
            f.extend_from_slice(&d);
        }
        _ => unreachable!(),
    }
    f.extend_from_slice(l4);
    f
}

fn tcp(sp: u16, dp: u16, flags: u8, payload: usize) -> Vec<u8> {
    let mut t = vec![0u8; 20 + payload];
    t[0..2].copy_from_slice(&sp.to_be_bytes());
    t[2..4].copy_from_slice(&dp.to_be_bytes());
    t[12] = 0x50;
    t[13] = flags;
    t
}

fn udp(sp: u16, dp: u16, payload: usize) -> Vec<u8> {
    let mut u = vec![0u8; 8 + payload];
    u[0..2].copy_from_slice(&sp.to_be_bytes());
    u[2..4].copy_from_slice(&dp.to_be_bytes());
    u[4..6].copy_from_slice(&((8 + payload) as u16).to_be_bytes());
    u
}

fn echo(ty: u8, id: u16) -> Vec<u8> {
    let mut e = vec![0u8; 16];
    e[0] = ty;
    e[4..6].copy_from_slice(&id.to_be_bytes());
    e
}

const SYN: u8 = 0x02;
const ACK: u8 = 0x10;
const FIN: u8 = 0x01;
const PSH: u8 = 0x08;

const T0: u64 = 1_700_000_000_000_000; // µs

/// A TCP connection from `c` to `s`: handshake, data both ways, FIN both ways.
fn tcp_conn(p: &mut Pcap, at: u64, c: [u8; 4], cp: u16, s: [u8; 4]) {
    let (c, s) = (Ip::V4(c), Ip::V4(s));
    let steps: [(bool, u8, usize); 7] = [
        (true, SYN, 0),
        (false, SYN | ACK, 0),
        (true, ACK, 0),
        (true, PSH | ACK, 100),
        (false, PSH | ACK, 1000),
        (true, FIN | ACK, 0),
        (false, FIN | ACK, 0),
    ];
    for (i, (fwd, fl, n)) in steps.into_iter().enumerate() {
        let f = if fwd {
            frame(0, c, s, 6, &tcp(cp, 443, fl, n))
        } else {
            frame(0, s, c, 6, &tcp(443, cp, fl, n))
        };
        p.push(at + i as u64 * 100, &f);
    }
}

/// The east probe's view: TCP connections (half of them from the higher address), VLAN-tagged
/// UDP, ICMP echoes, IPv6 UDP, and UDP conversations begun by one side and, 200 s later (after
/// the idle timeout), by the other: the same flow key in both orientations.
fn east() -> Pcap {
    let mut p = Pcap::new();
    for i in 0..60u16 {
        let at = T0 + i as u64 * 1000;
        if i % 2 == 0 {
            tcp_conn(&mut p, at, [10, 1, 0, i as u8], 40000 + i, [192, 0, 2, 10]);
        } else {
            tcp_conn(
                &mut p,
                at,
                [198, 51, 100, i as u8],
                40000 + i,
                [10, 0, 0, 10],
            );
        }
    }
    for i in 0..40u16 {
        let at = T0 + 100_000 + i as u64 * 1000;
        let (a, b) = (Ip::V4([10, 2, 0, i as u8]), Ip::V4([10, 2, 1, 1]));
        p.push(at, &frame(100, a, b, 17, &udp(5000 + i, 53, 30)));
        p.push(at + 50, &frame(100, b, a, 17, &udp(53, 5000 + i, 90)));
    }
    for i in 0..10u16 {
        let at = T0 + 200_000 + i as u64 * 1000;
        let (a, b) = (Ip::V4([10, 3, 0, i as u8]), Ip::V4([10, 3, 1, 1]));
        p.push(at, &frame(0, a, b, 1, &echo(8, 0x100 + i)));
        p.push(at + 50, &frame(0, b, a, 1, &echo(0, 0x100 + i)));
    }
    for i in 0..10u16 {
        let at = T0 + 300_000 + i as u64 * 1000;
        let mut s = [0u8; 16];
        s[..2].copy_from_slice(&[0x20, 0x01]);
        s[15] = i as u8 + 1;
        let mut d = s;
        d[14] = 0xff;
        p.push(
            at,
            &frame(0, Ip::V6(s), Ip::V6(d), 17, &udp(6000 + i, 443, 40)),
        );
        p.push(
            at + 50,
            &frame(0, Ip::V6(d), Ip::V6(s), 17, &udp(443, 6000 + i, 400)),
        );
    }
    for i in 0..10u16 {
        let at = T0 + 400_000 + i as u64 * 1000;
        let (a, b) = (Ip::V4([10, 4, 0, i as u8]), Ip::V4([10, 4, 1, 1]));
        p.push(at, &frame(0, a, b, 17, &udp(7000 + i, 123, 48)));
        p.push(at + 50, &frame(0, b, a, 17, &udp(123, 7000 + i, 48)));
    }
    for i in 0..10u16 {
        let at = T0 + 200_000_000 + i as u64 * 1000;
        let (a, b) = (Ip::V4([10, 4, 0, i as u8]), Ip::V4([10, 4, 1, 1]));
        p.push(at, &frame(0, b, a, 17, &udp(123, 7000 + i, 48)));
        p.push(at + 50, &frame(0, a, b, 17, &udp(7000 + i, 123, 48)));
    }
    p
}

/// The west probe's view: the same TCP connections (a tap on the same link), the VLAN UDP
/// conversations seen from their answers on (the queries missed), and flows of its own.
fn west() -> Pcap {
    let mut p = Pcap::new();
    for i in 0..60u16 {
        let at = T0 + i as u64 * 1000;
        if i % 2 == 0 {
            tcp_conn(&mut p, at, [10, 1, 0, i as u8], 40000 + i, [192, 0, 2, 10]);
        } else {
            tcp_conn(
                &mut p,
                at,
                [198, 51, 100, i as u8],
                40000 + i,
                [10, 0, 0, 10],
            );
        }
    }
    for i in 0..40u16 {
        let at = T0 + 100_000 + i as u64 * 1000;
        let (a, b) = (Ip::V4([10, 2, 0, i as u8]), Ip::V4([10, 2, 1, 1]));
        p.push(at + 50, &frame(100, b, a, 17, &udp(53, 5000 + i, 90)));
    }
    for i in 0..25u16 {
        let at = T0 + 500_000 + i as u64 * 1000;
        let (a, b) = (Ip::V4([10, 5, 0, i as u8]), Ip::V4([10, 5, 1, 1]));
        p.push(at, &frame(0, a, b, 17, &udp(8000 + i, 514, 200)));
    }
    p
}

// ---------------------------------------------------------------------------------------------
// Running flows

fn linerate() -> Command {
    Command::new(env!("CARGO_BIN_EXE_linerate"))
}

fn run(args: &[&str]) -> Output {
    linerate().arg("flows").args(args).output().unwrap()
}

fn summary(stderr: &str) -> Value {
    let l = stderr
        .lines()
        .rev()
        .find(|l| l.contains("\"type\":\"summary\""))
        .unwrap_or_else(|| panic!("no JSON summary in: {stderr}"));
    serde_json::from_str(l).unwrap()
}

fn jsonl(p: &Path) -> Vec<Value> {
    std::fs::read_to_string(p)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn proto_number(v: &Value) -> u8 {
    match v["proto"].as_str().unwrap() {
        "tcp" => 6,
        "udp" => 17,
        "icmp" => 1,
        "ipv6-icmp" => 58,
        p => p.parse().unwrap(),
    }
}

/// The key a record's flow must have: VLAN|PROTO|lower endpoint|higher endpoint, endpoints
/// ordered by address bytes then port (ICMP echo: the identifier as both ports).
fn expected_key(v: &Value) -> String {
    let proto = proto_number(v);
    let addr = |k: &str| -> std::net::IpAddr { v[k].as_str().unwrap().parse().unwrap() };
    let bytes = |a: std::net::IpAddr| -> [u8; 16] {
        match a {
            std::net::IpAddr::V4(x) => {
                let mut b = [0u8; 16];
                b[..4].copy_from_slice(&x.octets());
                b
            }
            std::net::IpAddr::V6(x) => x.octets(),
        }
    };
    let port = |k: &str| v[k].as_u64().unwrap_or(0) as u16;
    let (s, d) = (addr("saddr"), addr("daddr"));
    let (sp, dp) = if proto == 1 || proto == 58 {
        (port("dport"), port("dport"))
    } else {
        (port("sport"), port("dport"))
    };
    let (a, pa, b, pb) = if (bytes(s), sp) <= (bytes(d), dp) {
        (s, sp, d, dp)
    } else {
        (d, dp, s, sp)
    };
    format!("{}|{proto}|{a}|{pa}|{b}|{pb}", v["vlan"].as_u64().unwrap())
}

fn without_probe(v: &Value) -> Value {
    let mut v = v.clone();
    v.as_object_mut().unwrap().remove("probe");
    v
}

/// A `-w` record as the Kafka record carries it: the Ethernet addresses and TTL ranges that
/// `--fields all` adds are not sent (docs/flows.md, the Kafka record).
fn without_extras(v: &Value) -> Value {
    let mut v = v.clone();
    let o = v.as_object_mut().unwrap();
    for k in ["smac", "dmac", "sminttl", "smaxttl", "dminttl", "dmaxttl"] {
        o.remove(k);
    }
    v
}

/// The records as sorted JSON texts (a multiset, to compare).
fn multiset<'a>(vs: impl Iterator<Item = &'a Value>) -> Vec<String> {
    let mut v: Vec<String> = vs.map(|x| x.to_string()).collect();
    v.sort();
    v
}

/// Keys are canonical, every record of a key is on one partition; returns the partitions used.
fn check_keys(msgs: &[Msg]) -> BTreeSet<i32> {
    let mut part: BTreeMap<&str, i32> = BTreeMap::new();
    for m in msgs {
        assert_eq!(m.key, expected_key(&m.value), "{:?}", m.value);
        let p = *part.entry(&m.key).or_insert(m.partition);
        assert_eq!(
            p, m.partition,
            "flow {} on partitions {p} and {}",
            m.key, m.partition
        );
    }
    msgs.iter().map(|m| m.partition).collect()
}

/// A flows process reading a capture from its standard input, with its standard error read
/// line by line on a thread.
struct Streaming {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Streaming {
    fn spawn(args: &[&str]) -> Streaming {
        let mut child = linerate()
            .arg("flows")
            .args(["-i", "-"])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let err = child.stderr.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(err).lines() {
                let Ok(l) = l else { break };
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        Streaming {
            child,
            stdin,
            lines,
            seen: Vec::new(),
        }
    }

    /// Waits for a line of standard error containing `what`.
    fn wait_line(&mut self, what: &str, limit: Duration) -> String {
        let t0 = Instant::now();
        loop {
            if let Some(l) = self.seen.iter().find(|l| l.contains(what)) {
                return l.clone();
            }
            let left = limit.saturating_sub(t0.elapsed());
            match self.lines.recv_timeout(left) {
                Ok(l) => self.seen.push(l),
                Err(_) => panic!(
                    "no '{what}' on standard error in {limit:?}: {:?}",
                    self.seen
                ),
            }
        }
    }

    fn write(&mut self, b: &[u8]) {
        self.stdin.as_mut().unwrap().write_all(b).unwrap();
        self.stdin.as_mut().unwrap().flush().unwrap();
    }

    fn close(&mut self) {
        self.stdin.take();
    }

    fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok);
    }

    /// Waits for the end (at most `limit`); returns the exit code and all of standard error.
    fn finish(mut self, limit: Duration) -> (Option<i32>, String, Duration) {
        let t0 = Instant::now();
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            if t0.elapsed() > limit {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("flows did not end within {limit:?}: {:?}", self.seen);
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let took = t0.elapsed();
        while let Ok(l) = self.lines.recv_timeout(Duration::from_secs(2)) {
            self.seen.push(l);
        }
        (status.code(), self.seen.join("\n"), took)
    }
}

impl Drop for Streaming {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// One scrape of a Prometheus endpoint: the value of the sample whose line starts with `name`.
fn scrape(addr: &str, name: &str) -> Option<u64> {
    let mut c = std::net::TcpStream::connect(addr).ok()?;
    c.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    c.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").ok()?;
    let mut s = String::new();
    c.read_to_string(&mut s).ok()?;
    s.lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

// ---------------------------------------------------------------------------------------------
// Scenarios with the broker

/// The east capture into a topic: what the consumer reads is, record for record, what `-w`
/// wrote in the same run plus the probe; keys canonical; flows on one partition each; several
/// partitions used; both orientations of one flow key under one key.
fn round_trip(b: &Broker, dir: &Path) {
    let cap = dir.join("east.pcap");
    east().write(&cap);
    let out = dir.join("east.jsonl");
    let target = format!("{}/rt", b.addr);
    let o = run(&[
        "-i",
        cap.to_str().unwrap(),
        "-w",
        out.to_str().unwrap(),
        "--fields",
        "all",
        "--kafka",
        &target,
        "--probe-id",
        "east-1",
        // A queue far smaller than the records of the final flush: a file waits for the
        // producer instead of dropping (nothing may fail).
        "--kafka-queue",
        "8",
        "--json",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let s = summary(&err);
    let written = jsonl(&out);
    assert_eq!(written.len(), 140, "records of the east capture");
    assert_eq!(s["kafka"]["records"], written.len() as u64, "{s}");
    assert_eq!(s["kafka"]["acked"], written.len() as u64, "{s}");
    assert_eq!(s["kafka"]["failed"], 0, "{s}");
    let msgs = consume(&b.addr, "rt");
    assert_eq!(msgs.len(), written.len());
    assert!(msgs.iter().all(|m| m.value["probe"] == "east-1"));
    assert_eq!(
        multiset(
            msgs.iter()
                .map(|m| without_probe(&m.value))
                .collect::<Vec<_>>()
                .iter()
        ),
        multiset(
            written
                .iter()
                .map(without_extras)
                .collect::<Vec<_>>()
                .iter()
        ),
        "the topic holds exactly the -w records (less the fields a Kafka record does not carry)"
    );
    let parts = check_keys(&msgs);
    assert!(parts.len() > 1, "one partition used: {parts:?}");
    // The NTP-like flows were begun by each side in turn: two records per key, opposite
    // orientations, one partition.
    let mut by_key: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for m in &msgs {
        by_key
            .entry(&m.key)
            .or_default()
            .insert(m.value["saddr"].as_str().unwrap().to_string());
    }
    let both = by_key.values().filter(|s| s.len() == 2).count();
    assert_eq!(both, 10, "flows seen begun from both ends");
}

/// Two probes at once into one topic: the consumer gets the union, each record attributable to
/// its probe, and the flows both probes saw have the same key (and partition) from both.
fn two_probes(b: &Broker, dir: &Path) {
    let target = format!("{}/probes", b.addr);
    let (ce, cw) = (dir.join("e.pcap"), dir.join("w.pcap"));
    east().write(&ce);
    west().write(&cw);
    let (oe, ow) = (dir.join("e.jsonl"), dir.join("w.jsonl"));
    let spawn = |cap: &Path, out: &Path, probe: &str| {
        linerate()
            .arg("flows")
            .args(["-i", cap.to_str().unwrap(), "-w", out.to_str().unwrap()])
            .args([
                "--fields",
                "all",
                "--kafka",
                &target,
                "--probe-id",
                probe,
                "--json",
            ])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (e, w) = (spawn(&ce, &oe, "east"), spawn(&cw, &ow, "west"));
    for c in [e, w] {
        let o = c.wait_with_output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let (re, rw) = (jsonl(&oe), jsonl(&ow));
    let msgs = consume(&b.addr, "probes");
    assert_eq!(msgs.len(), re.len() + rw.len(), "the union of both probes");
    for (probe, recs) in [("east", &re), ("west", &rw)] {
        let mine: Vec<Value> = msgs
            .iter()
            .filter(|m| m.value["probe"] == probe)
            .map(|m| without_probe(&m.value))
            .collect();
        assert_eq!(
            multiset(mine.iter()),
            multiset(recs.iter().map(without_extras).collect::<Vec<_>>().iter()),
            "probe {probe}"
        );
    }
    check_keys(&msgs);
    let keys = |p: &str| -> BTreeSet<&str> {
        msgs.iter()
            .filter(|m| m.value["probe"] == p)
            .map(|m| m.key.as_str())
            .collect()
    };
    let shared = keys("east").intersection(&keys("west")).count();
    assert_eq!(
        shared, 100,
        "TCP and VLAN UDP flows seen by both probes, one key each"
    );
}

/// A frozen broker (SIGSTOP after flows connected): nothing is acknowledged, flows waits, a
/// SIGINT in the wait ends it within a second, every record counted failed (timed_out: the
/// broker's connection was up), exit code 1 with the broker named.
fn frozen_broker_and_sigint(b: &Broker, dir: &Path) {
    let out = dir.join("frozen.jsonl");
    let target = format!("{}/frozen", b.addr);
    let mut f = Streaming::spawn(&[
        "-w",
        out.to_str().unwrap(),
        "--kafka",
        &target,
        "--kafka-timeout",
        "60s",
        "--json",
    ]);
    // flows reads the capture's header before it prints its start line.
    let p = east();
    f.write(&p.0[..24]);
    f.wait_line("\"type\":\"start\"", Duration::from_secs(30));
    b.signal("-STOP");
    f.write(p.body());
    f.close();
    f.wait_line("\"type\":\"kafka_wait\"", Duration::from_secs(30));
    std::thread::sleep(Duration::from_millis(500));
    f.signal("-INT");
    let (code, err, took) = f.finish(Duration::from_secs(10));
    b.signal("-CONT");
    assert!(
        took < Duration::from_millis(1500),
        "SIGINT during the wait took {took:?} to end flows"
    );
    assert_eq!(code, Some(1), "{err}");
    let s = summary(&err);
    let n = jsonl(&out).len() as u64;
    assert_eq!(s["kafka"]["records"], n, "{s}");
    assert_eq!(s["kafka"]["acked"], 0, "{s}");
    assert_eq!(s["kafka"]["failed"], n, "{s}");
    assert_eq!(s["kafka"]["failed_by_reason"]["timed_out"], n, "{s}");
    assert!(err.contains(&b.addr), "the error names the broker: {err}");
}

/// `--ipfix-flush`'s rule holds for Kafka: a record due while the input stays open (a pipe
/// whose packets moved time past a flow's idle timeout, then nothing more) reaches the topic
/// within the flush interval, not at the end.
fn due_record_reaches_the_topic_while_the_input_stays_open(b: &Broker) {
    let target = format!("{}/flush", b.addr);
    let mut f = Streaming::spawn(&["-w", "/dev/null", "--kafka", &target, "--json"]);
    let mut p = Pcap::new();
    let (c, s) = (Ip::V4([10, 0, 0, 1]), Ip::V4([10, 0, 0, 2]));
    p.push(
        1_700_000_000_000_000,
        &frame(0, c, s, 17, &udp(1000, 53, 8)),
    );
    p.push(
        1_700_000_100_000_000,
        &frame(0, c, s, 17, &udp(2000, 53, 8)),
    );
    f.write(&p.0);
    f.wait_line("\"type\":\"start\"", Duration::from_secs(30));
    let t0 = Instant::now();
    let mut seen = Vec::new();
    while seen.is_empty() && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(200));
        let md_ok = {
            let c: BaseConsumer = ClientConfig::new()
                .set("bootstrap.servers", &b.addr)
                .create()
                .unwrap();
            c.fetch_metadata(Some("flush"), Duration::from_secs(5))
                .is_ok_and(|m| {
                    m.topics()
                        .iter()
                        .any(|t| t.name() == "flush" && !t.partitions().is_empty())
                })
        };
        if md_ok {
            seen = consume(&b.addr, "flush");
        }
    }
    let took = t0.elapsed();
    println!("the due record was in the topic {took:?} after the packets were written");
    // The pipe is still open: the second flow has not ended.
    assert!(f.child.try_wait().unwrap().is_none());
    assert_eq!(
        seen.len(),
        1,
        "{:?}",
        seen.iter().map(|m| &m.value).collect::<Vec<_>>()
    );
    assert_eq!(seen[0].value["sport"], 1000, "{}", seen[0].value);
    assert_eq!(seen[0].value["reason"], "idle", "{}", seen[0].value);
    assert!(took < Duration::from_secs(3), "{took:?}");
    f.close();
    let (code, err, _) = f.finish(Duration::from_secs(30));
    assert_eq!(code, Some(0), "{err}");
}

/// The broker stopped mid-export: the first part's records are acknowledged (seen on the
/// metrics endpoint) and read back, then the broker stops and the rest fail. The failed count
/// is exactly the records of the `-w` output the consumer did not see; exit code 1.
fn broker_stopped_mid_export(b: &mut Broker, dir: &Path) {
    let out = dir.join("stop.jsonl");
    let target = format!("{}/stopped", b.addr);
    let mut f = Streaming::spawn(&[
        "-w",
        out.to_str().unwrap(),
        "--fields",
        "all",
        "--kafka",
        &target,
        "--kafka-timeout",
        "3s",
        "--metrics",
        "127.0.0.1:0",
        "--metrics-linger",
        "0",
        "--json",
    ]);
    f.write(&Pcap::new().0);
    let start: Value =
        serde_json::from_str(&f.wait_line("\"type\":\"start\"", Duration::from_secs(30))).unwrap();
    let metrics = start["metrics"].as_str().unwrap().to_string();
    // Part one: 40 one-packet UDP flows, then 24 packets of a flow 1000 s later, which expire
    // the 40 (idle timeout 60 s). The pcap reader hands packets over 64 at a time and waits for
    // more, so part one is exactly one batch.
    let mut p = Pcap::new();
    for i in 0..40u16 {
        let (a, b) = (Ip::V4([10, 6, 0, i as u8]), Ip::V4([10, 6, 1, 1]));
        p.push(
            T0 + i as u64 * 1000,
            &frame(0, a, b, 17, &udp(9000 + i, 53, 20)),
        );
    }
    let (ta, tb) = (Ip::V4([10, 7, 0, 1]), Ip::V4([10, 7, 0, 2]));
    for i in 0..24u64 {
        p.push(
            T0 + 1_000_000_000 + i,
            &frame(0, ta, tb, 17, &udp(1, 2, 20)),
        );
    }
    f.write(p.body());
    let t0 = Instant::now();
    while scrape(&metrics, "linerate_flows_kafka_acked_total") != Some(40) {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the first 40 records were not acknowledged: {:?}",
            scrape(&metrics, "linerate_flows_kafka_acked_total")
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let seen = consume(&b.addr, "stopped");
    assert_eq!(seen.len(), 40);
    b.stop();
    // Part two: 30 more flows, then the end of the input.
    let mut q = Pcap::new();
    for i in 0..30u16 {
        let (a, b) = (Ip::V4([10, 8, 0, i as u8]), Ip::V4([10, 8, 1, 1]));
        q.push(
            T0 + 1_000_001_000 + i as u64 * 1000,
            &frame(0, a, b, 17, &udp(9500 + i, 53, 20)),
        );
    }
    f.write(q.body());
    f.close();
    let (code, err, _) = f.finish(Duration::from_secs(30));
    assert_eq!(code, Some(1), "{err}");
    let written = jsonl(&out);
    let s = summary(&err);
    assert_eq!(written.len(), 40 + 30 + 1, "{err}");
    assert_eq!(s["kafka"]["records"], written.len() as u64, "{s}");
    assert_eq!(s["kafka"]["acked"], 40, "{s}");
    // Exactly the records the consumer did not see failed.
    let seen_set = multiset(
        seen.iter()
            .map(|m| without_probe(&m.value))
            .collect::<Vec<_>>()
            .iter(),
    );
    let unseen = written
        .iter()
        .filter(|w| !seen_set.contains(&without_extras(w).to_string()))
        .count() as u64;
    assert_eq!(unseen, 31);
    assert_eq!(s["kafka"]["failed"], unseen, "{s}");
    assert!(err.contains(&b.addr), "the error names the broker: {err}");
    assert!(err.contains("did not reach the topic"), "{err}");
}

#[test]
fn export_into_a_real_broker() {
    let Some(mut b) = broker_or_skip() else {
        return;
    };
    let dir = tmpdir("broker");
    round_trip(&b, &dir);
    two_probes(&b, &dir);
    frozen_broker_and_sigint(&b, &dir);
    due_record_reaches_the_topic_while_the_input_stays_open(&b);
    broker_stopped_mid_export(&mut b, &dir);
    let _ = std::fs::remove_dir_all(&dir);
}

// ---------------------------------------------------------------------------------------------
// Without a broker

#[test]
fn an_unreachable_broker_fails_within_the_timeout_naming_it() {
    let dir = tmpdir("unreachable");
    let cap = dir.join("e.pcap");
    east().write(&cap);
    let t0 = Instant::now();
    // Port 1 on loopback: nothing listens there.
    let o = run(&[
        "-i",
        cap.to_str().unwrap(),
        "--kafka",
        "127.0.0.1:1/flows",
        "--kafka-timeout",
        "2s",
    ]);
    let took = t0.elapsed();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(took < Duration::from_secs(6), "took {took:?}");
    assert!(err.contains("127.0.0.1:1"), "{err}");
    assert!(err.contains("no broker"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn kafka_flag_errors_exit_2() {
    for (args, want) in [
        (vec!["--kafka", "127.0.0.1:9092"], "--kafka"),
        (vec!["--kafka", "127.0.0.1:9092/bad topic"], "topic"),
        (vec!["--kafka", "host/flows"], "--kafka"),
        (
            vec!["--kafka", "127.0.0.1:1/t", "--kafka-opt", "acks"],
            "--kafka-opt",
        ),
        (
            vec!["--kafka", "127.0.0.1:1/t", "--kafka-opt", "no.such.thing=1"],
            "no.such.thing",
        ),
        (
            vec!["--kafka", "127.0.0.1:1/t", "--probe-id", ""],
            "--probe-id",
        ),
        (
            vec!["--kafka", "127.0.0.1:1/t", "--kafka-timeout", "0s"],
            "--kafka-timeout",
        ),
        (vec!["--kafka-opt", "acks=1"], "--kafka"),
        (
            vec!["--kafka", "127.0.0.1:1/t", "--kafka-queue", "0"],
            "--kafka-queue",
        ),
        (
            vec!["--kafka", "127.0.0.1:1/t", "--kafka-queue", "17M"],
            "--kafka-queue",
        ),
    ] {
        let mut a = vec!["-i", "examples/sample.pcap"];
        a.extend(args.iter());
        let o = linerate()
            .current_dir(root())
            .arg("flows")
            .args(&a)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{a:?}: {err}");
        assert!(err.contains(want), "{a:?}: {err}");
    }
}

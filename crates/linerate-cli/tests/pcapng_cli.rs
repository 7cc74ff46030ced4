//! pcapng output end to end: `-w FILE.pcapng` (and `--format pcapng`) on the commands that
//! write packets. tshark and capinfos read the files; frames are byte for byte those of a
//! classic pcap written from the same input; `-i a,b` keeps each packet's interface; the
//! interface statistics blocks at the end equal the printed summary; reading a pcapng back
//! keeps interfaces and names; a stop by signal still ends the file with its statistics.
//! The files are also parsed here block by block (lengths, trailers, options), so what is
//! checked does not depend on what a Wireshark version shows.
#![deny(unsafe_code)]

use linerate_test_support::netns;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_linerate");

fn sample() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/sample.pcap")
}

/// A folder of this test's own (tests run on threads named after them), removed when the
/// test's thread ends.
struct TmpDir(PathBuf);

impl Drop for TmpDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

thread_local! {
    static DIR: TmpDir = {
        let test = std::thread::current()
            .name()
            .unwrap_or("test")
            .replace("::", "-");
        let d = std::env::temp_dir().join(format!(
            "linerate-pcapng-{}-{test}",
            std::process::id()
        ));
        std::fs::create_dir_all(&d).unwrap();
        TmpDir(d)
    };
}

fn tmp(name: &str) -> PathBuf {
    DIR.with(|d| d.0.join(name))
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn run(args: &[&str]) -> Output {
    let o = Command::new(BIN).args(args).output().expect("run linerate");
    assert!(
        o.status.success(),
        "linerate {args:?} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

fn summary_of(text: &[u8]) -> serde_json::Value {
    String::from_utf8_lossy(text)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|j| j["type"] == "summary")
        .unwrap_or_else(|| panic!("no summary in {}", String::from_utf8_lossy(text)))
}

fn tool(cmd: &str, args: &[&str]) -> Option<Output> {
    match Command::new(cmd).args(args).output() {
        Ok(o) => Some(o),
        Err(e) => {
            linerate_test_support::skip(&format!("{cmd} is not installed ({e})"));
            None
        }
    }
}

// ---- a pcapng parser of its own ----

type Opts = Vec<(u16, Vec<u8>)>;

#[derive(Debug, Default)]
struct Ng {
    shb: Opts,
    /// (link type, snaplen, options)
    ifaces: Vec<(u16, u32, Opts)>,
    /// (interface, timestamp ns, wire length, bytes)
    packets: Vec<(u32, u64, u32, Vec<u8>)>,
    /// (interface, options)
    stats: Vec<(u32, Opts)>,
    /// Block types in file order.
    order: Vec<u32>,
}

fn rd32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

fn rd16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(b[at..at + 2].try_into().unwrap())
}

fn options(body: &[u8], mut at: usize) -> Opts {
    let mut v = Vec::new();
    while at + 4 <= body.len() {
        let (code, len) = (rd16(body, at), rd16(body, at + 2) as usize);
        if code == 0 {
            break;
        }
        v.push((code, body[at + 4..at + 4 + len].to_vec()));
        at += 4 + len.div_ceil(4) * 4;
    }
    v
}

fn opt(o: &Opts, code: u16) -> Option<&[u8]> {
    o.iter().find(|x| x.0 == code).map(|x| &x.1[..])
}

fn opt_str(o: &Opts, code: u16) -> String {
    String::from_utf8_lossy(opt(o, code).unwrap_or_default()).into_owned()
}

fn opt_u64(o: &Opts, code: u16) -> u64 {
    u64::from_le_bytes(opt(o, code).expect("option").try_into().unwrap())
}

fn opt_ts(o: &Opts, code: u16) -> u64 {
    let b = opt(o, code).expect("timestamp option");
    (u64::from(rd32(b, 0)) << 32) | u64::from(rd32(b, 4))
}

/// Parses a little-endian pcapng file, checking that every block is whole.
fn parse_ng(f: &[u8]) -> Ng {
    let mut ng = Ng::default();
    assert!(f.len() >= 28, "too short for pcapng: {} bytes", f.len());
    assert_eq!(rd32(f, 0), 0x0a0d_0d0a, "not pcapng");
    assert_eq!(rd32(f, 8), 0x1a2b_3c4d, "byte-order magic");
    let mut at = 0;
    while at < f.len() {
        assert!(at + 12 <= f.len(), "cut block header at {at}");
        let (t, len) = (rd32(f, at), rd32(f, at + 4) as usize);
        assert!(len >= 12 && len % 4 == 0, "block length {len} at {at}");
        assert!(at + len <= f.len(), "cut block at {at} (length {len})");
        assert_eq!(rd32(f, at + len - 4) as usize, len, "trailer at {at}");
        let body = &f[at + 8..at + len - 4];
        match t {
            0x0a0d_0d0a => ng.shb = options(body, 16),
            1 => ng
                .ifaces
                .push((rd16(body, 0), rd32(body, 4), options(body, 8))),
            6 => {
                let cap = rd32(body, 12) as usize;
                let ts = (u64::from(rd32(body, 4)) << 32) | u64::from(rd32(body, 8));
                ng.packets.push((
                    rd32(body, 0),
                    ts,
                    rd32(body, 16),
                    body[20..20 + cap].to_vec(),
                ));
            }
            5 => ng.stats.push((rd32(body, 0), options(body, 12))),
            _ => {}
        }
        ng.order.push(t);
        at += len;
    }
    ng
}

/// Packets of a classic little-endian pcap: (timestamp ns, wire length, bytes).
fn parse_pcap(f: &[u8]) -> Vec<(u64, u32, Vec<u8>)> {
    let nanos = rd32(f, 0) == 0xa1b2_3c4d;
    assert!(nanos || rd32(f, 0) == 0xa1b2_c3d4, "not pcap");
    let mut at = 24;
    let mut v = Vec::new();
    while at + 16 <= f.len() {
        let cap = rd32(f, at + 8) as usize;
        let frac = u64::from(rd32(f, at + 4));
        let ts = u64::from(rd32(f, at)) * 1_000_000_000 + if nanos { frac } else { frac * 1000 };
        v.push((ts, rd32(f, at + 12), f[at + 16..at + 16 + cap].to_vec()));
        at += 16 + cap;
    }
    assert_eq!(at, f.len(), "pcap ends on a whole record");
    v
}

const IF_NAME: u16 = 2;
const IF_TSRESOL: u16 = 9;
const ISB_START: u16 = 2;
const ISB_END: u16 = 3;
const ISB_IFRECV: u16 = 4;
const ISB_IFDROP: u16 = 5;
const ISB_ACCEPT: u16 = 6;
const ISB_OSDROP: u16 = 7;
const ISB_USRDELIV: u16 = 8;

/// The interface statistics blocks, one per interface in order, close the file and add up to
/// the JSON summary `j`.
fn check_stats_equal_summary(ng: &Ng, j: &serde_json::Value) {
    let n = ng.ifaces.len();
    assert!(n >= 1);
    let tail: Vec<u32> = ng.order[ng.order.len() - n..].to_vec();
    assert_eq!(
        tail,
        vec![5; n],
        "the file ends with one statistics block per interface"
    );
    let ids: Vec<u32> = ng.stats.iter().map(|x| x.0).collect();
    assert_eq!(ids, (0..n as u32).collect::<Vec<_>>());
    let sum = |code| ng.stats.iter().map(|x| opt_u64(&x.1, code)).sum::<u64>();
    let by = |r: &str| j["drops_by_reason"][r].as_u64().unwrap();
    let (pkts, drops, kernel, filter) = (
        j["pkts"].as_u64().unwrap(),
        j["drops"].as_u64().unwrap(),
        by("kernel"),
        by("filter"),
    );
    assert_eq!(sum(ISB_ACCEPT), pkts, "filteraccept = pkts rcvd: {j}");
    assert_eq!(sum(ISB_IFDROP), kernel, "ifdrop = kernel drops: {j}");
    assert_eq!(
        sum(ISB_OSDROP),
        drops - kernel,
        "osdrop = linerate's drops: {j}"
    );
    assert_eq!(
        sum(ISB_IFRECV),
        pkts + drops + filter,
        "ifrecv = all seen: {j}"
    );
    // Each interface's packets in the file are what it accepted.
    for (id, o) in &ng.stats {
        let in_file = ng.packets.iter().filter(|p| p.0 == *id).count() as u64;
        assert_eq!(opt_u64(o, ISB_USRDELIV), in_file, "interface {id}");
        assert!(opt_ts(o, ISB_END) >= opt_ts(o, ISB_START));
        let c = opt_str(o, 1);
        assert!(c.starts_with("linerate: received "), "{c}");
    }
}

fn tshark_fields(file: &str, fields: &[&str]) -> Option<Vec<String>> {
    let mut args = vec!["-r", file, "-T", "fields"];
    for f in fields {
        args.extend(["-e", f]);
    }
    let o = tool("tshark", &args)?;
    assert!(
        o.status.success(),
        "tshark: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    Some(
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(str::to_string)
            .collect(),
    )
}

/// A second capture unlike the sample: frames of known bytes and of the lengths given.
fn other_capture(path: &Path, lens: &[usize]) -> Vec<Vec<u8>> {
    let frames: Vec<Vec<u8>> = lens
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let mut f: Vec<u8> = (0..n).map(|k| (i * 31 + k * 7) as u8).collect();
            f[12] = 0x86; // not IPv4: a `udp` filter rejects them
            f[13] = 0xdd;
            f
        })
        .collect();
    let mut b = Vec::new();
    for v in [0xa1b2_3c4du32, 0x0004_0002, 0, 0, 262_144, 1] {
        b.extend(v.to_le_bytes());
    }
    for (i, f) in frames.iter().enumerate() {
        for v in [
            1_800_000_000 + i as u32,
            123_456_789,
            f.len() as u32,
            f.len() as u32,
        ] {
            b.extend(v.to_le_bytes());
        }
        b.extend(f);
    }
    std::fs::write(path, b).unwrap();
    frames
}

#[test]
fn count_writes_pcapng_that_tshark_and_capinfos_read_with_the_same_frames_as_pcap() {
    let ng_path = tmp("one.pcapng");
    let pcap_path = tmp("one.pcap");
    let o = run(&[
        "count",
        "-i",
        s(&sample()),
        "-w",
        s(&ng_path),
        "--json",
        "-q",
    ]);
    let j = summary_of(&o.stdout);
    run(&["count", "-i", s(&sample()), "-w", s(&pcap_path), "-q"]);
    let ng = parse_ng(&std::fs::read(&ng_path).unwrap());
    let pcap = parse_pcap(&std::fs::read(&pcap_path).unwrap());
    // Frames byte for byte, wire lengths and timestamps (µs in the sample).
    assert_eq!(ng.packets.len(), 2000);
    assert_eq!(ng.packets.len(), pcap.len());
    for (k, (a, b)) in ng.packets.iter().zip(&pcap).enumerate() {
        assert!(
            a.0 == 0 && a.1 == b.0 && a.2 == b.1 && a.3 == b.2,
            "packet {k}"
        );
    }
    // Section header: application and OS; one interface named after the input port.
    assert_eq!(
        opt_str(&ng.shb, 4),
        format!("linerate {}", env!("CARGO_PKG_VERSION"))
    );
    assert!(opt_str(&ng.shb, 3).starts_with("Linux "));
    assert_eq!(ng.ifaces.len(), 1);
    let (link, snaplen, o0) = &ng.ifaces[0];
    assert_eq!((*link, *snaplen), (1, 65535));
    assert_eq!(opt_str(o0, IF_NAME), format!("pcap:{}", sample().display()));
    assert_eq!(opt(o0, IF_TSRESOL), Some(&[9u8][..]));
    check_stats_equal_summary(&ng, &j);
    // tshark and capinfos read it.
    if let Some(c) = tool("capinfos", &["-M", s(&ng_path)]) {
        let text = String::from_utf8_lossy(&c.stdout);
        assert!(c.status.success(), "{text}");
        assert!(text.contains("File type:           pcapng"), "{text}");
        assert!(text.contains("Number of packets:   2000"), "{text}");
        assert!(text.contains("Capture application: linerate"), "{text}");
        assert!(text.contains("Number of interfaces in file: 1"), "{text}");
        assert!(text.contains("Time precision = nanoseconds (9)"), "{text}");
        assert!(text.contains("Number of stat entries = 1"), "{text}");
    }
    if let Some(lines) = tshark_fields(s(&ng_path), &["frame.interface_id", "frame.len"]) {
        assert_eq!(lines.len(), 2000);
        for (l, p) in lines.iter().zip(&pcap) {
            assert_eq!(l, &format!("0\t{}", p.1));
        }
    }
}

#[test]
fn two_inputs_give_two_interfaces_with_their_own_packets_and_statistics() {
    let b = tmp("other.pcap");
    let frames = other_capture(&b, &[70, 1400, 1514]);
    let out = tmp("two.pcapng");
    let input = format!("{},pcap:{}", s(&sample()), s(&b));
    let o = run(&[
        "count",
        "-i",
        &input,
        "-w",
        s(&out),
        "--json",
        "-q",
        "-f",
        "udp or ip6",
    ]);
    let j = summary_of(&o.stdout);
    let ng = parse_ng(&std::fs::read(&out).unwrap());
    let names: Vec<String> = ng.ifaces.iter().map(|i| opt_str(&i.2, IF_NAME)).collect();
    assert_eq!(
        names,
        vec![format!("pcap:{}", s(&sample())), format!("pcap:{}", s(&b))]
    );
    // Interface 0 holds the sample's UDP packets in order, interface 1 the other file's.
    let udp = tmp("two-udp.pcap");
    run(&[
        "count",
        "-i",
        s(&sample()),
        "-w",
        s(&udp),
        "-q",
        "-f",
        "udp or ip6",
    ]);
    let sample_udp: Vec<Vec<u8>> = parse_pcap(&std::fs::read(&udp).unwrap())
        .into_iter()
        .map(|p| p.2)
        .collect();
    assert!(!sample_udp.is_empty() && sample_udp.len() < 2000);
    let of = |id: u32| -> Vec<Vec<u8>> {
        ng.packets
            .iter()
            .filter(|p| p.0 == id)
            .map(|p| p.3.clone())
            .collect()
    };
    assert!(of(0) == sample_udp, "interface 0: the sample's packets");
    assert!(of(1) == frames, "interface 1: the other file's packets");
    let one = ng.packets.iter().find(|p| p.0 == 1).unwrap();
    assert_eq!(one.1, 1_800_000_000_123_456_789, "nanoseconds kept");
    // Per interface: the sample's non-UDP packets were filtered, the other file's accepted.
    let st = |id: usize, code| opt_u64(&ng.stats[id].1, code);
    assert_eq!(st(0, ISB_IFRECV), 2000);
    assert_eq!(st(0, ISB_ACCEPT), sample_udp.len() as u64);
    assert_eq!((st(1, ISB_IFRECV), st(1, ISB_ACCEPT)), (3, 3));
    check_stats_equal_summary(&ng, &j);
    if let Some(lines) = tshark_fields(s(&out), &["frame.interface_id", "frame.cap_len"]) {
        let ones: Vec<&String> = lines.iter().filter(|l| l.starts_with("1\t")).collect();
        assert_eq!(ones, ["1\t70", "1\t1400", "1\t1514"]);
        assert_eq!(lines.len(), sample_udp.len() + 3);
    }
}

#[test]
fn drops_travel_with_the_file() {
    // A pcapng input with two interfaces, the second of another link type: its packets are
    // dropped as malformed (linerate's own drops), and the statistics say so.
    let first = tmp("mixed-src.pcapng");
    let frames = other_capture(&tmp("mixed.pcap"), &[70, 1400, 1514]);
    let mut f = Vec::new();
    let block = |t: u32, body: &[u8]| {
        let mut b = Vec::new();
        let len = (12 + body.len().div_ceil(4) * 4) as u32;
        b.extend(t.to_le_bytes());
        b.extend(len.to_le_bytes());
        b.extend(body);
        b.resize(len as usize - 4, 0);
        b.extend(len.to_le_bytes());
        b
    };
    f.extend(block(
        0x0a0d_0d0a,
        &[&0x1a2b_3c4du32.to_le_bytes()[..], &[1, 0, 0, 0], &[0xff; 8]].concat(),
    ));
    let idb = |link: u16, name: &str| {
        let mut b = vec![];
        b.extend(link.to_le_bytes());
        b.extend([0, 0]);
        b.extend(0u32.to_le_bytes());
        b.extend(2u16.to_le_bytes());
        b.extend((name.len() as u16).to_le_bytes());
        b.extend(name.as_bytes());
        b.resize(b.len().div_ceil(4) * 4, 0);
        b.extend([0; 4]);
        block(1, &b)
    };
    f.extend(idb(1, "eth0"));
    f.extend(idb(101, "tun0"));
    for (i, fr) in frames.iter().chain(frames.iter()).enumerate() {
        let mut b = vec![];
        b.extend(((i % 2) as u32).to_le_bytes());
        b.extend(0u32.to_le_bytes());
        b.extend((i as u32 * 1000).to_le_bytes());
        b.extend((fr.len() as u32).to_le_bytes());
        b.extend((fr.len() as u32).to_le_bytes());
        b.extend(fr);
        f.extend(block(6, &b));
    }
    std::fs::write(&first, &f).unwrap();
    let out = tmp("mixed-out.pcapng");
    let o = run(&["count", "-i", s(&first), "-w", s(&out), "--json", "-q"]);
    let j = summary_of(&o.stdout);
    assert_eq!(j["drops_by_reason"]["malformed"], 3, "{j}");
    let ng = parse_ng(&std::fs::read(&out).unwrap());
    let names: Vec<String> = ng.ifaces.iter().map(|i| opt_str(&i.2, IF_NAME)).collect();
    assert_eq!(names, ["eth0", "tun0"], "names kept");
    assert_eq!(
        (ng.ifaces[0].0, ng.ifaces[1].0),
        (1, 101),
        "link types kept"
    );
    let st = |id: usize, code| opt_u64(&ng.stats[id].1, code);
    assert_eq!(
        (st(0, ISB_IFRECV), st(0, ISB_ACCEPT), st(0, ISB_OSDROP)),
        (3, 3, 0)
    );
    assert_eq!(
        (st(1, ISB_IFRECV), st(1, ISB_ACCEPT), st(1, ISB_OSDROP)),
        (3, 0, 3)
    );
    assert!(opt_str(&ng.stats[1].1, 1).contains("dropped 3 (malformed=3)"));
    check_stats_equal_summary(&ng, &j);
}

#[test]
fn reading_pcapng_back_keeps_each_packets_interface_and_name() {
    let b = tmp("back-b.pcap");
    other_capture(&b, &[70, 1400, 1514]);
    let first = tmp("back-1.pcapng");
    let second = tmp("back-2.pcapng");
    let input = format!("{},{}", s(&sample()), s(&b));
    run(&["count", "-i", &input, "-w", s(&first), "-q"]);
    let o = run(&["count", "-i", s(&first), "-w", s(&second), "--json", "-q"]);
    let j = summary_of(&o.stdout);
    let (x, y) = (
        parse_ng(&std::fs::read(&first).unwrap()),
        parse_ng(&std::fs::read(&second).unwrap()),
    );
    assert_eq!(x.packets.len(), 2003);
    assert!(
        x.packets == y.packets,
        "same packets on the same interfaces"
    );
    let names =
        |n: &Ng| -> Vec<String> { n.ifaces.iter().map(|i| opt_str(&i.2, IF_NAME)).collect() };
    assert_eq!(names(&x), names(&y));
    assert_eq!(names(&y)[1], format!("pcap:{}", s(&b)));
    check_stats_equal_summary(&y, &j);
    // And through the pcap port URI, as any command takes it.
    let third = tmp("back-3.pcapng");
    let uri = format!("pcap:{}", s(&second));
    run(&["count", "-i", &uri, "-w", s(&third), "-q"]);
    assert!(parse_ng(&std::fs::read(&third).unwrap()).packets == y.packets);
}

#[test]
fn standard_output_in_pcapng_pipes_into_tshark() {
    let o = run(&[
        "count",
        "-i",
        s(&sample()),
        "-w",
        "-",
        "--format",
        "pcapng",
        "-q",
    ]);
    let ng = parse_ng(&o.stdout);
    assert_eq!(ng.packets.len(), 2000);
    // The statistics went to standard error.
    assert!(String::from_utf8_lossy(&o.stderr).contains("Summary: 2'000 pkts"));
    let Some(mut t) = Command::new("tshark")
        .args(["-r", "-", "-T", "fields", "-e", "frame.interface_id"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .ok()
    else {
        assert!(std::env::var_os("CI").is_none(), "tshark missing");
        return;
    };
    let mut count = Command::new(BIN)
        .args([
            "count",
            "-i",
            s(&sample()),
            "-w",
            "-",
            "--format",
            "pcapng",
            "-q",
        ])
        .stdout(t.stdin.take().unwrap())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(count.wait().unwrap().success());
    let out = t.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&[u8]> = out
        .stdout
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();
    assert_eq!(lines.len(), 2000);
    assert!(lines.iter().all(|l| *l == b"0"));
    // --format pcap writes classic pcap under a .pcapng name; a bad format is a usage error.
    let p = tmp("classic.pcapng");
    run(&[
        "count",
        "-i",
        s(&sample()),
        "-w",
        s(&p),
        "--format",
        "pcap",
        "-q",
    ]);
    assert_eq!(parse_pcap(&std::fs::read(&p).unwrap()).len(), 2000);
    let bad = Command::new(BIN)
        .args(["count", "-i", s(&sample()), "-w", "-", "--format", "ng"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--format"));
}

// ---- a stop by signal ----

/// Children killed (SIGKILL, by PID) and reaped when the test ends, however it ends.
struct Procs(Vec<Child>);

impl Drop for Procs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn spawn(args: &[&str]) -> Child {
    Command::new(BIN)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start linerate")
}

fn signal(c: &Child, sig: i32) {
    // The PID of a child we spawned and have not reaped.
    let r = if linerate::os::signal(c.id(), sig).is_ok() {
        0
    } else {
        -1
    };
    assert_eq!(r, 0);
}

#[test]
fn a_stop_by_signal_ends_the_file_with_its_statistics() {
    // A cluster consumer reading a paced built-in source: a run that only a signal ends.
    for (k, sig) in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP]
        .into_iter()
        .enumerate()
    {
        let id = 200_000 + (std::process::id() % 10_000) * 10 + k as u32;
        let ids = id.to_string();
        let mut procs = Procs(vec![spawn(&[
            "balance",
            "-i",
            "source",
            "--source-rate",
            "20kpps",
            "-c",
            &ids,
            "-n",
            "1",
            "-t",
            "30",
            "--quiet",
        ])]);
        let seg = || linerate_test_support::cluster_segment(id);
        let t0 = Instant::now();
        while !seg().exists() {
            assert!(t0.elapsed() < Duration::from_secs(10), "no cluster segment");
            std::thread::sleep(Duration::from_millis(10));
        }
        let out = tmp(&format!("sig{k}.pcapng"));
        let consumer = spawn(&[
            "count",
            "-i",
            &format!("cluster:{id}@0"),
            "-w",
            s(&out),
            "--json",
            "--interval",
            "100ms",
        ]);
        // Stop it while packets flow into the file.
        std::thread::sleep(Duration::from_millis(700));
        signal(&consumer, sig);
        let t0 = Instant::now();
        let mut consumer = consumer;
        while consumer.try_wait().unwrap().is_none() {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "signal {sig} did not stop count"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        let o = consumer.wait_with_output().unwrap();
        let j = summary_of(&o.stdout);
        assert_eq!(j["ended"], "interrupted", "signal {sig}");
        assert!(j["pkts"].as_u64().unwrap() > 0, "{j}");
        let ng = parse_ng(&std::fs::read(&out).unwrap());
        assert_eq!(ng.ifaces.len(), 1);
        assert_eq!(opt_str(&ng.ifaces[0].2, IF_NAME), format!("cluster:{id}@0"));
        assert_eq!(ng.packets.len() as u64, j["pkts"].as_u64().unwrap());
        check_stats_equal_summary(&ng, &j);
        signal(&procs.0[0], libc::SIGINT);
        let _ = procs.0.pop().unwrap().wait_with_output();
    }
}

// ---- kernel drops (root, in network namespaces) ----

/// `count` on AF_PACKET, stopped (SIGSTOP) while more frames arrive than its ring holds: the
/// kernel drops the rest (PACKET_STATISTICS), and the file's statistics carry that count.
#[test]
fn kernel_drops_are_in_the_statistics_blocks() {
    if !netns::require_priv() {
        return;
    }
    let pair = netns::NetnsPair::new().expect("netns pair");
    let out = tmp("kernel.pcapng");
    let mut procs = Procs(vec![Command::new("ip")
        .args(["netns", "exec", pair.ns(netns::Side::B), BIN, "count"])
        .args(["-i", "afpacket:vB", "-t", "60", "--json", "-q", "-f", "udp"])
        .args(["-w", s(&out)])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn linerate")]);
    // Let it open its ring, then freeze it.
    std::thread::sleep(Duration::from_millis(800));
    signal(&procs.0[0], libc::SIGSTOP);
    // 64 blocks of 1 MiB hold about 40'000 frames of 1500 bytes: send 60'000.
    let frames: Vec<Vec<u8>> = (0..60_000u32)
        .map(|i| {
            let mut f = netns::udp_frame(pair.mac_b, pair.mac_a, (i % 16) as u16, i);
            f.resize(1500, 0);
            let ip_len = (1500 - 14) as u16;
            f[16..18].copy_from_slice(&ip_len.to_be_bytes());
            let udp_len = ip_len - 20;
            f[38..40].copy_from_slice(&udp_len.to_be_bytes());
            f
        })
        .collect();
    pair.run_in(netns::Side::A, || netns::send_raw("vA", &frames));
    signal(&procs.0[0], libc::SIGCONT);
    std::thread::sleep(Duration::from_millis(1500));
    signal(&procs.0[0], libc::SIGINT);
    let child = procs.0.pop().unwrap();
    let o = child.wait_with_output().unwrap();
    let j = summary_of(&o.stdout);
    let kernel = j["drops_by_reason"]["kernel"].as_u64().unwrap();
    assert!(kernel > 0, "the ring overflowed: {j}");
    let ng = parse_ng(&std::fs::read(&out).unwrap());
    // One interface, named by the port URI, with the ring's drops in its statistics.
    assert_eq!(ng.ifaces.len(), 1);
    assert_eq!(opt_str(&ng.ifaces[0].2, IF_NAME), "afpacket:vB");
    assert_eq!(opt(&ng.ifaces[0].2, IF_TSRESOL), Some(&[9u8][..]));
    assert_eq!(opt_u64(&ng.stats[0].1, ISB_IFDROP), kernel);
    assert_eq!(ng.packets.len() as u64, j["pkts"].as_u64().unwrap());
    check_stats_equal_summary(&ng, &j);
    if let Some(c) = tool("capinfos", &["-M", s(&out)]) {
        assert!(c.status.success());
    }
}

// ---- the other commands that write packets ----

#[test]
fn fwd_gen_and_balance_write_pcapng() {
    let b = tmp("cmds-b.pcap");
    let frames = other_capture(&b, &[70, 1400, 1514]);
    let input = format!("{},{}", s(&sample()), s(&b));
    // fwd: by name, the input's two interfaces, statistics equal to fwd's summary.
    let f = tmp("fwd.pcapng");
    let o = run(&[
        "fwd",
        "-i",
        &input,
        "-o",
        s(&f),
        "--no-mac-updating",
        "-f",
        "udp or ip6",
        "--json",
    ]);
    let j = summary_of(&o.stdout);
    let ng = parse_ng(&std::fs::read(&f).unwrap());
    assert_eq!(ng.ifaces.len(), 2);
    assert_eq!(opt_str(&ng.ifaces[1].2, IF_NAME), format!("pcap:{}", s(&b)));
    let sent = j["ports"][1]["sent"].as_u64().unwrap();
    assert_eq!(ng.packets.len() as u64, sent);
    assert!(ng
        .packets
        .iter()
        .filter(|p| p.0 == 1)
        .map(|p| &p.3)
        .eq(frames.iter()));
    let sum = |code| ng.stats.iter().map(|x| opt_u64(&x.1, code)).sum::<u64>();
    let p0 = &j["ports"][0];
    assert_eq!(sum(ISB_IFRECV), p0["received"].as_u64().unwrap(), "{j}");
    assert_eq!(sum(ISB_ACCEPT), sent, "{j}");
    assert_eq!(
        sum(ISB_IFRECV) - sum(ISB_ACCEPT),
        p0["filtered"].as_u64().unwrap(),
        "{j}"
    );
    // --format pcapng whatever the name, and pcapng: in a URI.
    let f2 = tmp("fwd.out");
    run(&[
        "fwd",
        "-i",
        s(&b),
        "-o",
        s(&f2),
        "--format",
        "pcapng",
        "--no-mac-updating",
    ]);
    assert_eq!(parse_ng(&std::fs::read(&f2).unwrap()).packets.len(), 3);
    // gen: generated packets on one described interface; a replay keeps the capture's.
    let g = tmp("gen.pcapng");
    run(&["gen", "-o", &format!("pcapng:{}", s(&g)), "-c", "500", "-q"]);
    let ng = parse_ng(&std::fs::read(&g).unwrap());
    assert_eq!(ng.packets.len(), 500);
    assert_eq!(opt_str(&ng.ifaces[0].2, IF_NAME), "linerate gen");
    assert_eq!(opt_u64(&ng.stats[0].1, ISB_USRDELIV), 500);
    assert_eq!(*ng.order.last().unwrap(), 5);
    let two = tmp("gen-two.pcapng");
    run(&["count", "-i", &input, "-w", s(&two), "-q"]);
    let r = tmp("replay.pcapng");
    run(&["gen", "--pcap", s(&two), "--topspeed", "-o", s(&r), "-q"]);
    let (x, y) = (
        parse_ng(&std::fs::read(&two).unwrap()),
        parse_ng(&std::fs::read(&r).unwrap()),
    );
    let ids = |n: &Ng| n.packets.iter().map(|p| p.0).collect::<Vec<_>>();
    assert_eq!(ids(&x), ids(&y), "a replay keeps each packet's interface");
    assert_eq!(y.ifaces.len(), 2);
    // balance: each egress file keeps the input interface of its packets.
    let id = (300_000 + std::process::id() % 10_000).to_string();
    let (e0, e1) = (tmp("egress0.pcapng"), tmp("egress1.out"));
    let o = run(&[
        "balance",
        "-i",
        &input,
        "-n",
        "2",
        "-m",
        "round-robin",
        "-c",
        &id,
        "-r",
        &format!("0:{}", s(&e0)),
        "-r",
        &format!("1:pcapng:{}", s(&e1)),
        "--json",
        "--quiet",
    ]);
    let j = summary_of(&o.stdout);
    let (a, c) = (
        parse_ng(&std::fs::read(&e0).unwrap()),
        parse_ng(&std::fs::read(&e1).unwrap()),
    );
    assert_eq!(a.packets.len() + c.packets.len(), 2003, "{j}");
    let mut got: Vec<Vec<u8>> = a
        .packets
        .iter()
        .chain(&c.packets)
        .filter(|p| p.0 == 1)
        .map(|p| p.3.clone())
        .collect();
    got.sort();
    let mut want = frames.clone();
    want.sort();
    assert!(got == want, "interface 1 holds the second input's packets");
    for n in [&a, &c] {
        assert_eq!(n.ifaces.len(), 2);
        assert_eq!(opt_u64(&n.stats[0].1, ISB_IFRECV), 2000);
        assert_eq!(opt_u64(&n.stats[1].1, ISB_IFRECV), 3);
    }
}

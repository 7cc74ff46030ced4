//! Conformance with libpcap: a corpus of realistic frames is put on a veth (MTU 9000) between two
//! network namespaces, unchanged, by a plain packet socket, and captured at the same time by
//! tcpdump and by linerate. Every capture must hold the same multiset of frames, byte for byte,
//! and the same count; a frame a port cannot carry must be counted as dropped with its reason,
//! never cut.
//!
//! The corpus: 802.1Q (priority, TCI 0), QinQ (802.1ad + 802.1Q), two 802.1Q, IPv6 with
//! hop-by-hop, routing, fragment and destination options headers, IPv6 and IPv4 fragments, ICMP
//! and ICMPv6 errors, 42 B and 60 B runts, ARP, frames from 1 514 B to 9 018 B, and the Ethernet
//! frames of the tcpdump test captures in `tests/corpus` (whole frames of 14 to 9 018 bytes,
//! at most 10 per file).
//!
//! Rounds (each sends the corpus once):
//! 1. `tcpdump -i vB -Q in -s 0 -U`, `tcpdump -i vA -Q out` and `linerate count -i afpacket:vB -w`;
//! 2. `linerate count -i xdp:vB -w` (copy mode), generic then native XDP (a frags-aware
//!    program: veth takes it at MTU 9000); the XDP program takes the frames from the stack, so
//!    tcpdump on vB would see none: the reference is `tcpdump -i vA -Q out`. Frames longer than
//!    a UMEM frame (2 048 B less 256 B of XDP headroom) come in pieces (AF_XDP multi-buffer)
//!    and must be whole in the capture; then the same in native mode on a second veth pair of
//!    MTU 1500 with the frames it forwards;
//! 3. and 4. `linerate balance -i afpacket:vB -n 2,1` in each hash mode (five masters per round,
//!    three `count -i cluster:ID@Q -w` consumers each) beside `tcpdump -i vB -Q in`: application 1's
//!    queue holds every frame, application 0's two queues together too (each of them for
//!    `fanout`).
//!
//! Needs root, tcpdump and the corpus (skips otherwise; under LINERATE_REQUIRE_PRIV=1 each is a
//! failure naming what is missing).
#![deny(unsafe_code)]

use linerate_test_support::netns;

use linerate::mem::Batch;
use linerate::port::pcap::PcapPort;
use linerate::port::{LinkType, Port, PortOptions};
use netns::{NetnsPair, Side};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_linerate");
/// Frames per corpus file at most, and in all from the corpus.
const PER_FILE: usize = 10;
const FROM_CORPUS: usize = 2500;
/// Largest frame on the veth: MTU 9000 + Ethernet header + one VLAN tag.
const MAX_FRAME: usize = 9018;
/// Bytes a small frame of a cluster holds (2 048 B less 128 B of headroom); longer packets take
/// its big frames.
const CLUSTER_MAX: usize = 1920;
const MODES: [&str; 10] = [
    "round-robin",
    "fanout",
    "ip",
    "mac",
    "proto",
    "5tuple",
    "toeplitz",
    "vlan",
    "gre",
    "gtp",
];

fn require(what: &str, ok: bool) -> bool {
    if !ok {
        linerate_test_support::skip(what);
    }
    ok
}

// ---------------------------------------------------------------- frames

const SRC: [u8; 6] = [0x02, 0x43, 0x46, 0, 0, 1];
const DST: [u8; 6] = [0x02, 0x43, 0x46, 0, 0, 2];

fn csum(data: &[u8]) -> u16 {
    let mut s: u32 = 0;
    for c in data.chunks(2) {
        s += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
    }
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

/// Ethernet header with VLAN tags (TPID, TCI), outermost first, then `ethertype`.
fn eth(tags: &[(u16, u16)], ethertype: u16) -> Vec<u8> {
    let mut f = DST.to_vec();
    f.extend_from_slice(&SRC);
    for (tpid, tci) in tags {
        f.extend_from_slice(&tpid.to_be_bytes());
        f.extend_from_slice(&tci.to_be_bytes());
    }
    f.extend_from_slice(&ethertype.to_be_bytes());
    f
}

/// IPv4 header (TEST-NET addresses, which the receiving stack ignores).
fn ipv4(proto: u8, payload_len: usize, id: u16, frag: u16) -> Vec<u8> {
    let mut h = vec![0x45, 0];
    h.extend_from_slice(&((20 + payload_len) as u16).to_be_bytes());
    h.extend_from_slice(&id.to_be_bytes());
    h.extend_from_slice(&frag.to_be_bytes());
    h.extend_from_slice(&[64, proto, 0, 0, 192, 0, 2, 1, 192, 0, 2, 99]);
    let c = csum(&h);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    h
}

fn udp(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut u = sport.to_be_bytes().to_vec();
    u.extend_from_slice(&dport.to_be_bytes());
    u.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    u.extend_from_slice(&[0, 0]);
    u.extend_from_slice(payload);
    u
}

fn payload(seq: u32, len: usize) -> Vec<u8> {
    let mut p = b"LRconf".to_vec();
    p.extend_from_slice(&seq.to_be_bytes());
    while p.len() < len {
        p.push((seq as usize * 7 + p.len()) as u8);
    }
    p.truncate(len);
    p
}

/// IPv4/UDP in Ethernet with `tags`, `len` bytes in all (at least 42 + 4 × tags).
fn v4_udp(tags: &[(u16, u16)], seq: u32, len: usize) -> Vec<u8> {
    let mut f = eth(tags, 0x0800);
    let pl = payload(seq, len.saturating_sub(f.len() + 28));
    let u = udp(4000 + (seq % 97) as u16, 9, &pl);
    f.extend_from_slice(&ipv4(17, u.len(), seq as u16, 0x4000));
    f.extend_from_slice(&u);
    f
}

/// IPv6 header (documentation addresses) with next header `nh`.
fn ipv6(nh: u8, payload_len: usize) -> Vec<u8> {
    let mut h = vec![0x60, 0, 0, 0];
    h.extend_from_slice(&(payload_len as u16).to_be_bytes());
    h.extend_from_slice(&[nh, 64]);
    h.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    h.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
    h
}

/// The synthetic part of the corpus.
fn synthetic() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for seq in 0..12u32 {
        // Runts: 42 B (no padding at all) and 60 B, untagged and tagged.
        out.push(v4_udp(&[], seq, 42));
        out.push(v4_udp(&[], seq, 60));
        out.push(v4_udp(&[(0x8100, 0xa000 | (seq as u16 + 1))], seq, 60));
        // 802.1Q with priority, 802.1Q TCI 0, QinQ, two 802.1Q, 802.1ad alone.
        out.push(v4_udp(&[(0x8100, 0x6000 | 100)], seq, 128));
        out.push(v4_udp(&[(0x8100, 0)], seq, 90));
        out.push(v4_udp(
            &[(0x88a8, 200), (0x8100, 300 + seq as u16)],
            seq,
            300,
        ));
        out.push(v4_udp(&[(0x8100, 10), (0x8100, 20)], seq, 200));
        out.push(v4_udp(&[(0x88a8, 0x2000 | 7)], seq, 100));
        // IPv6 with hop-by-hop, routing (type 4), fragment and destination options.
        let pl = payload(seq, 40 + seq as usize);
        let u = udp(5000, 53, &pl);
        let mut ext = vec![43, 0, 0x01, 0x04, 0, 0, 0, 0]; // HBH: PadN
        ext.extend_from_slice(&[44, 2, 4, 1, 0, 0, 0, 0]); // routing hdr, 1 segment
        ext.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3]);
        ext.extend_from_slice(&[60, 0, 0, 0, 0, 0, 0, seq as u8]); // fragment, offset 0, M=0
        ext.extend_from_slice(&[17, 0, 0x01, 0x04, 0, 0, 0, 0]); // dest opts
        let mut f = eth(&[], 0x86dd);
        f.extend_from_slice(&ipv6(0, ext.len() + u.len()));
        f.extend_from_slice(&ext);
        f.extend_from_slice(&u);
        out.push(f.clone());
        // The same, tagged.
        let mut t = eth(&[(0x8100, 42)], 0x86dd);
        t.extend_from_slice(&f[14..]);
        out.push(t);
        // IPv6 fragments: first (M=1) and a later one.
        for (off_m, body) in [(0x0001u16, 64usize), (0x0008 << 3, 24)] {
            let mut f = eth(&[], 0x86dd);
            let mut fr = vec![17, 0];
            fr.extend_from_slice(&off_m.to_be_bytes());
            fr.extend_from_slice(&(0x1000 + seq).to_be_bytes());
            let b = payload(seq, body);
            f.extend_from_slice(&ipv6(44, fr.len() + b.len()));
            f.extend_from_slice(&fr);
            f.extend_from_slice(&b);
            out.push(f);
        }
        // IPv4 fragments: first (MF), middle, last.
        for (frag, body) in [(0x2000u16, 64usize), (0x2000 | 8, 64), (16, 20)] {
            let mut f = eth(&[], 0x0800);
            f.extend_from_slice(&ipv4(17, body, 0x7000 + seq as u16, frag));
            f.extend_from_slice(&payload(seq, body));
            out.push(f);
        }
        // ICMP errors quoting a UDP packet: port unreachable, time exceeded (tagged).
        for (ty, code, tags) in [(3u8, 3u8, vec![]), (11, 0, vec![(0x8100u16, 5u16)])] {
            let inner_udp = udp(4000, 33434 + seq as u16, &payload(seq, 12));
            let mut quoted = ipv4(17, inner_udp.len(), 1, 0);
            quoted.extend_from_slice(&inner_udp);
            let mut icmp = vec![ty, code, 0, 0, 0, 0, 0, 0];
            icmp.extend_from_slice(&quoted);
            let c = csum(&icmp);
            icmp[2..4].copy_from_slice(&c.to_be_bytes());
            let mut f = eth(&tags, 0x0800);
            f.extend_from_slice(&ipv4(1, icmp.len(), 0x100 + seq as u16, 0));
            f.extend_from_slice(&icmp);
            out.push(f);
        }
        // ICMPv6 packet too big quoting an IPv6/UDP packet.
        let inner = {
            let u = udp(6000, 7000, &payload(seq, 20));
            let mut p = ipv6(17, u.len());
            p.extend_from_slice(&u);
            p
        };
        let mut icmp6 = vec![2, 0, 0, 0, 0, 0, 0x05, 0xdc];
        icmp6.extend_from_slice(&inner);
        let mut f = eth(&[], 0x86dd);
        f.extend_from_slice(&ipv6(58, icmp6.len()));
        f.extend_from_slice(&icmp6);
        out.push(f);
        // ARP request.
        let mut a = eth(&[], 0x0806);
        a[..6].copy_from_slice(&[0xff; 6]);
        a.extend_from_slice(&[0, 1, 8, 0, 6, 4, 0, 1]);
        a.extend_from_slice(&SRC);
        a.extend_from_slice(&[192, 0, 2, 1, 0, 0, 0, 0, 0, 0, 192, 0, 2, seq as u8 + 10]);
        out.push(a);
    }
    // Large frames: around the 1 514/1 518 B and the xdp limits, and jumbo frames up to the
    // largest the veth forwards (9 000 + 14, 9 018 tagged).
    for (i, &len) in [
        1514usize, 1518, 1519, 1600, 1791, 1792, 1793, 2048, 3000, 4096, 6000, 8000, 9000, 9014,
    ]
    .iter()
    .enumerate()
    {
        out.push(v4_udp(&[], 100 + i as u32, len));
    }
    for (i, &len) in [1518usize, 1796, 4000, 9018].iter().enumerate() {
        out.push(v4_udp(&[(0x8100, 0x4000 | 33)], 200 + i as u32, len));
    }
    out
}

/// Whole Ethernet frames of the tcpdump test captures (at most PER_FILE per file).
fn corpus_frames(dir: &Path) -> Vec<Vec<u8>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    let mut out = Vec::new();
    let opts = PortOptions {
        frames: 256,
        ..Default::default()
    };
    for f in files {
        let Ok(mut port) = PcapPort::open(f.to_str().unwrap(), &opts) else {
            continue;
        };
        if port.link_type() != LinkType::ETHERNET {
            continue;
        }
        let mut b = Batch::new();
        let mut taken = 0;
        let t0 = Instant::now();
        while taken < PER_FILE && t0.elapsed() < Duration::from_secs(2) {
            match port.rx(&mut b) {
                Ok(0) if port.is_finished() => break,
                Ok(_) => {}
                Err(_) => break,
            }
            for p in b.iter() {
                let n = p.data.len();
                if taken < PER_FILE
                    && n == p.desc.wire_len as usize
                    && (14..=MAX_FRAME).contains(&n)
                    // a frame longer than 1 514 B must fit the MTU by its tags.
                    && n <= 9014 + 4 * usize::from(matches!(u16::from_be_bytes([p.data[12], p.data[13]]), 0x8100 | 0x88a8))
                {
                    out.push(p.data.to_vec());
                    taken += 1;
                }
            }
            b.clear();
        }
        if out.len() >= FROM_CORPUS {
            break;
        }
    }
    out.truncate(FROM_CORPUS);
    out
}

// ---------------------------------------------------------------- captures

/// Reads a classic pcap (either precision, little-endian) into its records; every record must
/// be whole.
fn records(path: &Path) -> Vec<Vec<u8>> {
    let d = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(d.len() >= 24, "{}: no pcap header", path.display());
    let mut off = 24;
    let mut out = Vec::new();
    while off + 16 <= d.len() {
        let cap = u32::from_le_bytes(d[off + 8..off + 12].try_into().unwrap()) as usize;
        let len = u32::from_le_bytes(d[off + 12..off + 16].try_into().unwrap()) as usize;
        assert!(
            off + 16 + cap <= d.len(),
            "{}: truncated record",
            path.display()
        );
        assert_eq!(
            cap,
            len,
            "{}: a record cut to {cap} of {len} B",
            path.display()
        );
        out.push(d[off + 16..off + 16 + cap].to_vec());
        off += 16 + cap;
    }
    out
}

type Multiset = BTreeMap<Vec<u8>, usize>;

fn multiset<'a>(frames: impl IntoIterator<Item = &'a Vec<u8>>) -> Multiset {
    let mut m = Multiset::new();
    for f in frames {
        *m.entry(f.clone()).or_insert(0) += 1;
    }
    m
}

/// Checks that `got` is `want` as multisets; the error says how they differ.
fn same(what: &str, got: &Multiset, want: &Multiset) -> Result<(), String> {
    if got == want {
        return Ok(());
    }
    let n = |m: &Multiset| m.values().sum::<usize>();
    let mut missing = Vec::new();
    let mut extra = Vec::new();
    for (f, &c) in want {
        let g = got.get(f).copied().unwrap_or(0);
        if g < c {
            missing.push((f, c - g));
        }
    }
    for (f, &c) in got {
        let w = want.get(f).copied().unwrap_or(0);
        if c > w {
            extra.push((f, c - w));
        }
    }
    let show = |v: &[(&Vec<u8>, usize)]| {
        v.iter()
            .take(3)
            .map(|(f, c)| format!("{c}× {} B {:02x?}", f.len(), &f[..f.len().min(20)]))
            .collect::<Vec<_>>()
            .join("; ")
    };
    Err(format!(
        "{what}: {} frames, libpcap {}; {} missing ({}); {} extra ({})",
        n(got),
        n(want),
        missing.iter().map(|x| x.1).sum::<usize>(),
        show(&missing),
        extra.iter().map(|x| x.1).sum::<usize>(),
        show(&extra)
    ))
}

fn finish(mut c: Child, limit: Duration, what: &str) -> Output {
    let t0 = Instant::now();
    while c.try_wait().unwrap().is_none() {
        if t0.elapsed() > limit {
            let _ = c.kill();
            let _ = c.wait();
            panic!("{what} did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    c.wait_with_output().unwrap()
}

fn interrupt(c: &Child) {
    // The PID of a child we started (ip netns exec execs the tool).
    let _ = linerate::os::signal(c.id(), libc::SIGINT);
}

/// Children killed if the test ends early.
struct Kids(Vec<Child>);

impl Drop for Kids {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A running tcpdump: the process, its output file, and its standard error once it ends.
struct Tcpdump {
    child: Child,
    out: PathBuf,
    err: std::thread::JoinHandle<String>,
}

/// tcpdump on `iface` in `side`, direction `dir` (in/out), writing `out` packet by packet;
/// returned once it listens. Not in immediate mode: then libpcap retires a ring block every
/// millisecond, and a tcpdump starved of CPU on a loaded machine ran out of blocks (it
/// reported 730 of 1 753 packets dropped by the kernel); with the default 1 s block timeout
/// its 64 MiB buffer holds the whole corpus.
fn tcpdump(pair: &NetnsPair, side: Side, iface: &str, dir: &str, out: &Path) -> Tcpdump {
    let mut c = Command::new("ip")
        .args([
            "netns",
            "exec",
            pair.ns(side),
            "tcpdump",
            "-i",
            iface,
            "-Q",
            dir,
        ])
        .args(["-U", "-s", "0", "-B", "65536", "-n", "-w"])
        .arg(out)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run tcpdump");
    let mut err = BufReader::new(c.stderr.take().unwrap());
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    assert!(line.contains("listening"), "tcpdump: {line}");
    let err = std::thread::spawn(move || {
        let mut rest = String::new();
        let _ = err.read_to_string(&mut rest);
        rest
    });
    Tcpdump {
        child: c,
        out: out.to_path_buf(),
        err,
    }
}

/// Stops a tcpdump once its file has stopped growing (it writes each packet as it reads it:
/// on a loaded machine it can be seconds behind), and returns what it recorded. It must say
/// that the kernel dropped nothing, or it is no reference.
fn tcpdump_done(t: Tcpdump) -> Vec<Vec<u8>> {
    let size = || std::fs::metadata(&t.out).map(|m| m.len()).unwrap_or(0);
    let t0 = Instant::now();
    let (mut last, mut since) = (size(), Instant::now());
    // (A block retires when full or after tcpdump's 1 s timeout.)
    while since.elapsed() < Duration::from_millis(1300) && t0.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(50));
        let s = size();
        if s != last {
            (last, since) = (s, Instant::now());
        }
    }
    interrupt(&t.child);
    let o = finish(t.child, Duration::from_secs(10), "tcpdump");
    let err = t.err.join().unwrap_or_default();
    assert!(o.status.success(), "tcpdump: {err}");
    assert!(
        err.lines()
            .any(|l| l.trim() == "0 packets dropped by kernel"),
        "tcpdump lost packets, so it is no reference: {err}"
    );
    records(&t.out)
}

/// `count -i PORT -w OUT --json` in B, returned once its start line is out.
fn count(pair: &NetnsPair, port: &str, out: &Path) -> Child {
    count_with(pair, port, &[], out)
}

/// [`count`] with more flags.
fn count_with(pair: &NetnsPair, port: &str, more: &[&str], out: &Path) -> Child {
    let mut c = Command::new("ip")
        .args(["netns", "exec", pair.ns(Side::B), BIN, "count", "-i", port])
        .args(more)
        .args(["--json", "-q", "-t", "60", "-w"])
        .arg(out)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    let mut so = c.stdout.take().unwrap();
    // Read the start line byte by byte, leaving the rest for wait_with_output.
    let mut byte = [0u8; 1];
    while so.read(&mut byte).unwrap_or(0) == 1 && byte[0] != b'\n' {
        first.push(byte[0] as char);
    }
    assert!(first.contains("\"start\""), "count -i {port}: {first}");
    c.stdout = Some(so);
    c
}

fn summary(o: &Output, what: &str) -> serde_json::Value {
    let all = format!(
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    all.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|j| j["type"] == "summary")
        .unwrap_or_else(|| panic!("{what}: no summary in {all}"))
}

/// Sends the corpus from A, then waits for the receivers to take it in.
fn send(pair: &NetnsPair, frames: &[Vec<u8>]) {
    pair.run_in(Side::A, || netns::send_raw("vA", frames));
}

// ---------------------------------------------------------------- the test

#[test]
fn every_port_captures_what_libpcap_captures() {
    if !netns::require_priv()
        || !require(
            "tcpdump is not installed (apt-get install tcpdump)",
            Command::new("tcpdump").arg("--version").output().is_ok(),
        )
    {
        return;
    }
    let Some(dir) = linerate_test_support::corpus() else {
        return;
    };
    let t0 = Instant::now();
    let mut frames = synthetic();
    let nsyn = frames.len();
    frames.extend(corpus_frames(&dir));
    eprintln!(
        "corpus: {} frames ({nsyn} synthetic, {} from {}), {} to {} B",
        frames.len(),
        frames.len() - nsyn,
        dir.display(),
        frames.iter().map(Vec::len).min().unwrap(),
        frames.iter().map(Vec::len).max().unwrap()
    );
    assert!(frames.len() - nsyn > 1000, "the corpus gave too few frames");

    let pair = NetnsPair::new().expect("netns pair");
    pair.no_ipv6().unwrap();
    for side in [Side::A, Side::B] {
        let i = if side == Side::A { "vA" } else { "vB" };
        pair.ip_in(side, &["link", "set", i, "mtu", "9000"])
            .unwrap();
    }
    let tmp = std::env::temp_dir().join(format!("lr-conf-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let mut failures = Vec::new();

    // Round 1: tcpdump on both ends, count on afpacket:vB.
    {
        let (tb, ta, cw) = (
            tmp.join("td-b.pcap"),
            tmp.join("td-a.pcap"),
            tmp.join("af.pcap"),
        );
        let td_b = tcpdump(&pair, Side::B, "vB", "in", &tb);
        let td_a = tcpdump(&pair, Side::A, "vA", "out", &ta);
        let c = count(&pair, "afpacket:vB", &cw);
        send(&pair, &frames);
        // tcpdump first: once it has everything, so has count (or it is behind: a failure).
        let wire_b = multiset(&tcpdump_done(td_b));
        let wire_a = multiset(&tcpdump_done(td_a));
        interrupt(&c);
        let o = finish(c, Duration::from_secs(10), "count afpacket");
        let s = summary(&o, "count -i afpacket:vB");
        // The sender's frames are the wire (tcpdump on vA) and arrive (tcpdump on vB).
        let sent = multiset(&frames);
        let ours: Multiset = wire_a
            .iter()
            .filter(|(f, _)| sent.contains_key(*f))
            .map(|(f, c)| (f.clone(), *c))
            .collect();
        if let Err(e) = same("tcpdump -i vA -Q out (the sender's frames)", &ours, &sent) {
            failures.push(e);
        }
        let got = multiset(&records(&cw));
        if let Err(e) = same("count -i afpacket:vB -w", &got, &wire_b) {
            failures.push(e);
        }
        let n: usize = wire_b.values().sum();
        if s["pkts"] != n || s["drops"] != 0 {
            failures.push(format!(
                "count -i afpacket:vB: summary {s}, libpcap {n} frames"
            ));
        }
        eprintln!("afpacket: {} frames, as tcpdump", s["pkts"]);
    }

    // Round 2: count on xdp:vB, generic then native attach; the reference is the wire seen
    // on vA. Jumbo frames come in several UMEM frames and are gathered whole.
    for (attach, shown) in [("generic", "xdpgeneric"), ("native", "xdp ")] {
        let (ta, cw) = (
            tmp.join(format!("td-a2-{attach}.pcap")),
            tmp.join(format!("xdp-{attach}.pcap")),
        );
        let td_a = tcpdump(&pair, Side::A, "vA", "out", &ta);
        let c = count_with(&pair, "xdp:vB", &["--xdp-attach", attach], &cw);
        let link = pair.ip_in(Side::B, &["link", "show", "dev", "vB"]).unwrap();
        assert!(
            link.contains(shown),
            "{attach} XDP on vB at MTU 9000: {link}"
        );
        send(&pair, &frames);
        let wire = multiset(&tcpdump_done(td_a));
        interrupt(&c);
        let o = finish(c, Duration::from_secs(10), "count xdp");
        let s = summary(&o, "count -i xdp:vB");
        let got = multiset(&records(&cw));
        if let Err(e) = same(&format!("count -i xdp:vB -w ({attach})"), &got, &wire) {
            failures.push(e);
        }
        if s["drops"] != 0 {
            failures.push(format!(
                "count -i xdp:vB ({attach}): every frame whole, none dropped: summary {s}"
            ));
        }
        eprintln!("xdp ({attach}, MTU 9000): {} frames as tcpdump", s["pkts"]);
    }

    // Round 2b: xdp in native mode (the driver's hook, the metadata program) on a veth of the
    // usual MTU, with the frames it forwards.
    {
        let pair = NetnsPair::new().expect("netns pair");
        pair.no_ipv6().unwrap();
        let fit: Vec<Vec<u8>> = frames
            .iter()
            .filter(|f| {
                let tagged = matches!(u16::from_be_bytes([f[12], f[13]]), 0x8100 | 0x88a8);
                f.len() <= 1514 + 4 * usize::from(tagged)
            })
            .cloned()
            .collect();
        let (ta, cw) = (tmp.join("td-a3.pcap"), tmp.join("xdp-native.pcap"));
        let td_a = tcpdump(&pair, Side::A, "vA", "out", &ta);
        let c = count(&pair, "xdp:vB", &cw);
        let link = pair.ip_in(Side::B, &["link", "show", "dev", "vB"]).unwrap();
        assert!(
            link.contains("xdp") && !link.contains("xdpgeneric"),
            "native XDP on vB: {link}"
        );
        send(&pair, &fit);
        let wire = multiset(&tcpdump_done(td_a));
        interrupt(&c);
        let o = finish(c, Duration::from_secs(10), "count xdp (native)");
        let s = summary(&o, "count -i xdp:vB (MTU 1500)");
        let got = multiset(&records(&cw));
        if let Err(e) = same("count -i xdp:vB -w (MTU 1500, native XDP)", &got, &wire) {
            failures.push(e);
        }
        if s["drops"] != 0 {
            failures.push(format!("count -i xdp:vB (MTU 1500): summary {s}"));
        }
        eprintln!("xdp (native, MTU 1500): {} frames as tcpdump", s["pkts"]);
    }

    // Rounds 3 and 4: balance in every mode, five masters at a time, with the whole corpus:
    // frames longer than a cluster frame's CLUSTER_MAX bytes (jumbo frames) go whole into the
    // segment's big frames.
    let big = frames.iter().filter(|f| f.len() > CLUSTER_MAX).count();
    assert!(
        big > 0,
        "the corpus has no frame longer than {CLUSTER_MAX} B"
    );
    let base = 400_000 + (std::process::id() % 5_000) * 16;
    for (round, modes) in MODES.chunks(5).enumerate() {
        let tb = tmp.join(format!("td-bal{round}.pcap"));
        let td_b = tcpdump(&pair, Side::B, "vB", "in", &tb);
        let mut masters = Kids(vec![]);
        let mut consumers = Kids(vec![]);
        for (k, mode) in modes.iter().enumerate() {
            let id = base + (round * 5 + k) as u32;
            let seg = || linerate_test_support::cluster_segment(id);
            masters.0.push(
                Command::new("ip")
                    .args(["netns", "exec", pair.ns(Side::B), BIN, "balance"])
                    .args(["-i", "afpacket:vB", "-c", &id.to_string(), "-n", "2,1"])
                    .args(["-m", mode, "--wait-consumers", "--json", "--quiet"])
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap(),
            );
            let t = Instant::now();
            while !seg().exists() {
                assert!(t.elapsed() < Duration::from_secs(10), "{mode}: no segment");
                std::thread::sleep(Duration::from_millis(20));
            }
            for q in 0..3 {
                consumers.0.push(
                    Command::new(BIN)
                        .args(["count", "-i", &format!("cluster:{id}@{q}"), "--json", "-q"])
                        .arg("-w")
                        .arg(tmp.join(format!("{mode}-q{q}.pcap")))
                        .stdout(Stdio::piped())
                        .stderr(Stdio::piped())
                        .spawn()
                        .unwrap(),
                );
            }
        }
        // Every master has its consumers and reads its input.
        std::thread::sleep(Duration::from_millis(700));
        send(&pair, &frames);
        let wire = multiset(&tcpdump_done(td_b));
        let n: usize = wire.values().sum();
        for m in &masters.0 {
            interrupt(m);
        }
        let outs: Vec<Output> = masters
            .0
            .drain(..)
            .zip(modes)
            .map(|(m, mode)| finish(m, Duration::from_secs(15), mode))
            .collect();
        for c in consumers.0.drain(..) {
            let _ = finish(c, Duration::from_secs(15), "consumer");
        }
        for (o, mode) in outs.iter().zip(modes) {
            let s = summary(o, &format!("balance -m {mode}"));
            let q: Vec<Vec<Vec<u8>>> = (0..3)
                .map(|k| records(&tmp.join(format!("{mode}-q{k}.pcap"))))
                .collect();
            let app0: Vec<&Vec<u8>> = q[0].iter().chain(&q[1]).collect();
            let checks = if *mode == "fanout" {
                vec![
                    ("queue 0", multiset(&q[0])),
                    ("queue 1", multiset(&q[1])),
                    ("queue 2", multiset(&q[2])),
                ]
            } else {
                vec![
                    ("queues 0+1", multiset(app0.iter().copied())),
                    ("queue 2", multiset(&q[2])),
                ]
            };
            for (which, got) in checks {
                if let Err(e) = same(&format!("balance -m {mode} -n 2,1, {which}"), &got, &wire) {
                    failures.push(format!("{e}; master: {s}"));
                }
            }
            if s["distributed"] != n {
                failures.push(format!("balance -m {mode}: libpcap {n} frames, master {s}"));
            }
        }
        eprintln!("balance {modes:?}: checked against {n} frames");
    }
    let _ = std::fs::remove_dir_all(&tmp);
    eprintln!("conformance: {:.1} s", t0.elapsed().as_secs_f64());
    assert!(
        failures.is_empty(),
        "{} differences from libpcap:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

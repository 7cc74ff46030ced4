//! VLAN-tagged traffic on a veth between two network namespaces: 5 005 frames of which 28 % carry
//! 802.1Q, 802.1ad or QinQ tags. The kernel takes the outer tag out of received frames into
//! the packet's metadata; every linerate port must hand the frame on as it was on the wire:
//! `count -w` on `afpacket:` and on `xdp:` records exactly what was sent, a `balance -m vlan`
//! cluster with `-n 2,1` spreads by VLAN id and its consumers hold the wire frames, and `flows`
//! reports each flow's VLAN id. Needs root (skips otherwise, fails under
//! LINERATE_REQUIRE_PRIV=1).
#![deny(unsafe_code)]

use linerate_test_support::netns;

use linerate::mem::{Batch, Desc, Pool, PoolConfig};
use linerate::port::afpacket::AfPacket;
use linerate::port::{Port, PortOptions};
use netns::{NetnsPair, Side};
use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_linerate");
const N: u32 = 5005;
/// The payload starts with this, so a capture can tell the test's frames from anything else.
const MAGIC: &[u8; 4] = b"LRvl";

/// Frame `seq`: UDP from A to B; 7 in 25 carry tags (802.1Q with priority, 802.1Q with TCI 0,
/// QinQ 802.1ad + 802.1Q, two 802.1Q, one 802.1ad, one 0x9100).
fn frame(p: &NetnsPair, seq: u32) -> Vec<u8> {
    let payload = 22 + (seq as usize * 13) % 300;
    let ip_len = (20 + 8 + payload) as u16;
    let mut f = Vec::new();
    f.extend_from_slice(&p.mac_b);
    f.extend_from_slice(&p.mac_a);
    let vid = (seq % 100) as u16 + 1;
    let tags: Vec<(u16, u16)> = match seq % 25 {
        0 | 1 => vec![(0x8100, ((seq % 8) as u16) << 13 | vid)],
        2 => vec![(0x8100, 0)],
        3 => vec![(0x88a8, 100 + vid % 7), (0x8100, 10)],
        4 => vec![(0x8100, vid), (0x8100, 30)],
        5 => vec![(0x88a8, 200 + vid % 5)],
        6 => vec![(0x9100, 300)],
        _ => vec![],
    };
    for (tpid, tci) in &tags {
        f.extend_from_slice(&tpid.to_be_bytes());
        f.extend_from_slice(&tci.to_be_bytes());
    }
    f.extend_from_slice(&[0x08, 0x00, 0x45, 0]);
    f.extend_from_slice(&ip_len.to_be_bytes());
    f.extend_from_slice(&[0, 0, 0x40, 0, 64, 17, 0, 0]);
    f.extend_from_slice(&p.ip_a);
    f.extend_from_slice(&p.ip_b);
    f.extend_from_slice(&(1000 + (seq % 50) as u16).to_be_bytes());
    f.extend_from_slice(&9u16.to_be_bytes());
    f.extend_from_slice(&((8 + payload) as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(MAGIC);
    f.extend_from_slice(&seq.to_be_bytes());
    f.resize(f.len() + payload - 8, seq as u8);
    f
}

fn is_ours(f: &[u8]) -> bool {
    f.windows(4).any(|w| w == MAGIC)
}

/// The outermost VLAN id of a frame (TPID 0x8100, 0x88a8 or 0x9100), if tagged.
fn outer_vid(f: &[u8]) -> Option<u16> {
    match u16::from_be_bytes([f[12], f[13]]) {
        0x8100 | 0x88a8 | 0x9100 => Some(u16::from_be_bytes([f[14], f[15]]) & 0x0fff),
        _ => None,
    }
}

fn frames(pair: &NetnsPair) -> Vec<Vec<u8>> {
    (0..N).map(|s| frame(pair, s)).collect()
}

/// Sends `frames` from namespace A through an AF_PACKET transmit ring (frames go on the wire
/// as they are), paced so that a loaded 2-core machine keeps up.
fn send(pair: &NetnsPair, frames: &[Vec<u8>]) {
    pair.run_in(Side::A, || {
        let mut tx = AfPacket::open("vA", &PortOptions::default()).expect("open vA");
        let pool = Arc::new(Pool::new(&PoolConfig::default()).unwrap());
        let mut b = Batch::with_pool(&pool);
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut it = frames.iter().peekable();
        while it.peek().is_some() && Instant::now() < deadline {
            while !b.is_full() {
                let Some(f) = it.next() else { break };
                let mut fr = b.alloc().unwrap();
                fr.buf()[..f.len()].copy_from_slice(f);
                fr.push(Desc {
                    len: f.len() as u32,
                    wire_len: f.len() as u32,
                    ..Default::default()
                });
            }
            while !b.is_empty() && Instant::now() < deadline {
                if tx.tx(&mut b).unwrap() == 0 {
                    std::thread::sleep(Duration::from_micros(100));
                }
            }
            std::thread::sleep(Duration::from_micros(300));
        }
        tx.flush().unwrap();
        assert!(it.peek().is_none(), "sender timed out");
    });
}

/// Reads a classic little-endian pcap into its records' bytes.
fn records(path: &std::path::Path) -> Vec<Vec<u8>> {
    let d = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(d.len() >= 24, "pcap header missing");
    let mut off = 24;
    let mut out = Vec::new();
    while off + 16 <= d.len() {
        let cap = u32::from_le_bytes(d[off + 8..off + 12].try_into().unwrap()) as usize;
        let len = u32::from_le_bytes(d[off + 12..off + 16].try_into().unwrap()) as usize;
        assert!(off + 16 + cap <= d.len(), "truncated record at {off}");
        assert_eq!(cap, len, "record at {off} cut ({cap} of {len} bytes)");
        out.push(d[off + 16..off + 16 + cap].to_vec());
        off += 16 + cap;
    }
    assert_eq!(off, d.len(), "trailing bytes in pcap");
    out
}

struct Kill(Vec<Child>);

impl Drop for Kill {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn finish(mut c: Child, limit: Duration) -> Output {
    let t0 = Instant::now();
    while c.try_wait().unwrap().is_none() {
        if t0.elapsed() > limit {
            let _ = c.kill();
            panic!("did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    c.wait_with_output().unwrap()
}

fn json_of(out: &Output, ty: &str) -> serde_json::Value {
    let all = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    all.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|j| j["type"] == ty)
        .unwrap_or_else(|| panic!("no {ty} line in: {all}"))
}

fn tmpdir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("lr-vlan-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `count -i PORT -c N -w F` in namespace B while the frames are sent: the file must hold
/// exactly the frames sent, in order, byte for byte.
fn count_records_the_wire(port: &str) {
    let pair = NetnsPair::new().expect("netns pair");
    pair.no_ipv6().unwrap();
    let dir = tmpdir(port.split(':').next().unwrap());
    let out = dir.join("count.pcap");
    let mut child = Command::new("ip")
        .args(["netns", "exec", pair.ns(Side::B), BIN, "count"])
        .args(["-i", port, "-c", &N.to_string(), "-t", "40", "--json"])
        .arg("-w")
        .arg(&out)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn linerate");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().expect("start line").expect("read");
    assert!(first.contains("\"type\":\"start\""), "{first}");
    let sent = frames(&pair);
    send(&pair, &sent);
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("count on {port} did not finish");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(status.success(), "count on {port} failed: {err}");
    let summary: serde_json::Value = rest
        .iter()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|j| j["type"] == "summary")
        .expect("summary");
    assert_eq!(summary["pkts"], N, "{port}: {summary}");
    assert_eq!(summary["drops"], 0, "{port}: {summary}");
    let got = records(&out);
    assert_eq!(got.len(), N as usize, "{port}");
    let differ: Vec<usize> = (0..got.len()).filter(|&i| got[i] != sent[i]).collect();
    assert!(
        differ.is_empty(),
        "{port}: {} of {N} frames differ from what was sent (first: #{}, {} bytes captured, {} sent)",
        differ.len(),
        differ[0],
        got[differ[0]].len(),
        sent[differ[0]].len()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn afpacket_count_records_vlan_and_qinq_frames_as_sent() {
    if !netns::require_priv() {
        return;
    }
    count_records_the_wire("afpacket:vB");
}

#[test]
fn xdp_count_records_vlan_and_qinq_frames_as_sent() {
    if !netns::require_priv() {
        return;
    }
    count_records_the_wire("xdp:vB");
}

/// `balance -i afpacket:vB -m vlan -n 2,1` with three consumer processes writing pcaps: the
/// consumers hold the wire frames, application 0 splits by outer VLAN id (one queue per VLAN),
/// application 1 has every frame.
#[test]
fn balance_by_vlan_sees_the_tags() {
    if !netns::require_priv() {
        return;
    }
    let pair = NetnsPair::new().expect("netns pair");
    pair.no_ipv6().unwrap();
    let id = 300_000 + std::process::id() % 10_000;
    let seg = || linerate_test_support::cluster_segment(id);
    let dir = tmpdir("balance");
    let master = Command::new("ip")
        .args(["netns", "exec", pair.ns(Side::B), BIN, "balance"])
        .args(["-i", "afpacket:vB", "-c", &id.to_string(), "-n", "2,1"])
        // Each queue holds the whole run (N < 8192): what is checked here is where the tags
        // send frames, not a consumer's pace, and a pcap writer paused for 20 ms on a loaded
        // CI machine would otherwise see its 4096 slots fill (counted as ring_full, as it should).
        .args(["-m", "vlan", "-t", "8", "--slots", "8192"])
        .args(["--wait-consumers", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut kids = Kill(vec![]);
    let t0 = Instant::now();
    while !seg().exists() {
        assert!(t0.elapsed() < Duration::from_secs(10), "no segment");
        std::thread::sleep(Duration::from_millis(20));
    }
    for q in 0..3 {
        let w = dir.join(format!("q{q}.pcap"));
        kids.0.push(
            Command::new(BIN)
                .args(["count", "-i", &format!("cluster:{id}@{q}"), "--json", "-q"])
                .arg("-w")
                .arg(&w)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap(),
        );
    }
    std::thread::sleep(Duration::from_millis(500));
    let sent = frames(&pair);
    send(&pair, &sent);
    let m = finish(master, Duration::from_secs(30));
    assert!(m.status.success(), "{}", String::from_utf8_lossy(&m.stderr));
    let ms = json_of(&m, "summary");
    assert_eq!(ms["distributed"], N, "{ms}");
    let mut per_queue = vec![];
    for (k, c) in kids.0.drain(..).enumerate() {
        // (Its exit status when the master ends is another matter; what it wrote is checked.)
        let _ = finish(c, Duration::from_secs(20));
        per_queue.push(records(&dir.join(format!("q{k}.pcap"))));
    }
    let sorted = |v: &[Vec<u8>]| {
        let mut v: Vec<Vec<u8>> = v.iter().filter(|f| is_ours(f)).cloned().collect();
        v.sort();
        v
    };
    let want = sorted(&sent);
    let counts: Vec<usize> = per_queue.iter().map(|q| q.len()).collect();
    let qs = &ms["queues"];
    assert!(
        sorted(&per_queue[2]) == want,
        "application 1's copy: {} frames, want {}; per queue {counts:?}; master {qs}",
        per_queue[2].len(),
        want.len()
    );
    let mut app0 = per_queue[0].clone();
    app0.extend(per_queue[1].iter().cloned());
    assert!(
        sorted(&app0) == want,
        "application 0's two queues together: per queue {counts:?}; master {qs}"
    );
    // One VLAN, one queue; untagged frames (VLAN 0) together too.
    let mut home: HashMap<u16, usize> = HashMap::new();
    for (q, fs) in per_queue[..2].iter().enumerate() {
        for f in fs.iter().filter(|f| is_ours(f)) {
            let v = outer_vid(f).unwrap_or(0);
            assert_eq!(*home.entry(v).or_insert(q), q, "VLAN {v} on two queues");
        }
    }
    let mut ids: Vec<u16> = sent.iter().map(|f| outer_vid(f).unwrap_or(0)).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(home.len(), ids.len(), "outer VLAN ids seen by the balancer");
    assert!(
        !per_queue[0].is_empty() && !per_queue[1].is_empty(),
        "VLANs are spread"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `flows -i afpacket:vB` keeps each flow's outer VLAN id.
#[test]
fn flows_report_vlan_ids() {
    if !netns::require_priv() {
        return;
    }
    let pair = NetnsPair::new().expect("netns pair");
    pair.no_ipv6().unwrap();
    let child = Command::new("ip")
        .args(["netns", "exec", pair.ns(Side::B), BIN, "flows"])
        .args(["-i", "afpacket:vB", "--json", "-w", "-", "--format", "csv"])
        .args(["--fields", "vlan,proto,sport,dport,spkts"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn linerate");
    let sent = frames(&pair);
    std::thread::sleep(Duration::from_millis(300));
    send(&pair, &sent);
    std::thread::sleep(Duration::from_millis(500));
    // The PID of the child we started (ip netns exec execs linerate).
    let _ = linerate::os::signal(child.id(), libc::SIGINT);
    let out = finish(child, Duration::from_secs(15));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Expected: packets per (outer VLAN id, source port).
    let mut want: BTreeMap<(u16, u16), u64> = BTreeMap::new();
    for (seq, f) in sent.iter().enumerate() {
        let sport = 1000 + (seq % 50) as u16;
        *want.entry((outer_vid(f).unwrap_or(0), sport)).or_insert(0) += 1;
    }
    let mut got: BTreeMap<(u16, u16), u64> = BTreeMap::new();
    for l in String::from_utf8_lossy(&out.stdout).lines() {
        let c: Vec<&str> = l.split(',').collect();
        if c.len() == 5 && c[1] == "udp" && c[3] == "9" {
            let k = (c[0].parse().unwrap(), c[2].parse().unwrap());
            *got.entry(k).or_insert(0) += c[4].parse::<u64>().unwrap();
        }
    }
    assert_eq!(got, want);
}

//! A cluster master reading `xdp:vB` (every receive queue of a two-queue veth) in one network
//! namespace while frames of many UDP flows are sent from the other, some with 802.1Q or QinQ
//! tags, some of 1514 B: every frame sent is distributed once, the queues' readers (consumer
//! processes writing pcaps, or `--threads` with queues replaced by `-r` capture files) hold
//! exactly the frames sent, byte for byte with their tags, and the master copied none of them:
//! the AF_XDP sockets received into the cluster segment's own frames (zero copy). Needs root
//! (skips otherwise, fails instead under LINERATE_REQUIRE_PRIV=1).
#![deny(unsafe_code)]

use linerate_test_support::netns;

use netns::{NetnsPair, Side};
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_linerate");
/// The payload starts with this, so that a frame can be named in a failure message.
const MAGIC: &[u8; 4] = b"LRcx";

/// Frame `seq` from A to B: UDP flow `seq % 97` (source address and port vary with the flow),
/// one in four with an 802.1Q tag, one in eight with QinQ (802.1ad outside, 802.1Q inside),
/// one in 150 of 1514 B on the wire (tags included), the others of 64 to 370 B.
fn frame(p: &NetnsPair, seq: u32) -> Vec<u8> {
    let flow = seq % 97;
    let vid = (seq % 50) as u16 + 1;
    let tags: Vec<(u16, u16)> = match seq % 8 {
        1 | 5 => vec![(0x8100, vid)],
        3 => vec![(0x88a8, 100 + vid), (0x8100, 7)],
        _ => vec![],
    };
    let big = seq % 150 == 77;
    let payload = if big {
        1514 - 42 - 4 * tags.len()
    } else {
        22 + (seq as usize * 13) % 300
    };
    let mut f = Vec::with_capacity(42 + payload);
    f.extend_from_slice(&p.mac_b);
    f.extend_from_slice(&p.mac_a);
    f.extend_from_slice(&[0x08, 0x00]);
    f.extend_from_slice(&[0x45, 0]);
    f.extend_from_slice(&((20 + 8 + payload) as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0, 0x40, 0, 64, 17, 0, 0]);
    f.extend_from_slice(&[198, 18, 1, flow as u8]);
    f.extend_from_slice(&p.ip_b);
    let mut sum = 0u32;
    for k in (14..34).step_by(2) {
        sum += u32::from(u16::from_be_bytes([f[k], f[k + 1]]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    f[24..26].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    f.extend_from_slice(&(20_000 + flow as u16).to_be_bytes());
    f.extend_from_slice(&9u16.to_be_bytes());
    f.extend_from_slice(&((8 + payload) as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(MAGIC);
    f.extend_from_slice(&seq.to_be_bytes());
    while f.len() < 42 + payload {
        f.push(seq as u8 ^ f.len() as u8);
    }
    netns::with_tags(&f, &tags)
}

fn frames(p: &NetnsPair, n: u32) -> Vec<Vec<u8>> {
    (0..n).map(|s| frame(p, s)).collect()
}

/// The sequence number in a frame of [`frame`], wherever its tags put it.
fn seq_of(f: &[u8]) -> Option<u32> {
    let at = f.windows(4).position(|w| w == MAGIC)? + 4;
    Some(u32::from_be_bytes(f.get(at..at + 4)?.try_into().ok()?))
}

/// Sends `frames` from A's `vA` on a plain packet socket, through the qdisc layer: the kernel's
/// flow hash picks vA's transmit queue, and a veth delivers transmit queue i to the peer's
/// receive queue i, so the flows spread over vB's two receive queues. Paced (0.5 ms every 32
/// frames) so that a loaded 2-core machine keeps up.
fn send(p: &NetnsPair, frames: &[Vec<u8>]) {
    p.run_in(Side::A, || {
        let sock = linerate::os::PacketSocket::open("vA").expect("packet socket on vA");
        for (i, f) in frames.iter().enumerate() {
            let n = sock.send(f).expect("send on vA");
            assert_eq!(n, f.len(), "send on vA: short write");
            if i % 32 == 31 {
                std::thread::sleep(Duration::from_micros(500));
            }
        }
    });
}

/// Reads a classic little-endian pcap into its records' bytes; every record whole.
fn records(path: &std::path::Path) -> Vec<Vec<u8>> {
    let d = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(d.len() >= 24, "{}: pcap header missing", path.display());
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
    assert_eq!(off, d.len(), "{}: trailing bytes", path.display());
    out
}

/// Asserts that `got` (every queue's records together) is exactly the multiset `sent`.
fn assert_same_frames(sent: &[Vec<u8>], got: Vec<Vec<u8>>) {
    let mut want = sent.to_vec();
    want.sort();
    let mut got = got;
    got.sort();
    if got == want {
        return;
    }
    let (mut missing, mut extra) = (Vec::new(), Vec::new());
    let (mut i, mut j) = (0, 0);
    while i < want.len() || j < got.len() {
        match (want.get(i), got.get(j)) {
            (Some(w), Some(g)) if w == g => {
                i += 1;
                j += 1;
            }
            (Some(w), Some(g)) if w < g => {
                missing.push(seq_of(w));
                i += 1;
            }
            (Some(w), None) => {
                missing.push(seq_of(w));
                i += 1;
            }
            (_, Some(g)) => {
                extra.push((seq_of(g), g.len()));
                j += 1;
            }
            (None, None) => unreachable!(),
        }
    }
    panic!(
        "the queues hold {} frames, {} were sent; {} sent frames missing or changed (seq {:?}), \
         {} records not sent as such ((seq, len) {:?})",
        got.len(),
        want.len(),
        missing.len(),
        &missing[..missing.len().min(10)],
        extra.len(),
        &extra[..extra.len().min(10)]
    );
}

/// Children killed (by their PIDs) and waited for when a test ends, also on a panic.
struct Kill(Vec<Child>);

impl Drop for Kill {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A `linerate balance` run in namespace B, its stdout read line by line on a thread.
struct Balance {
    kid: Kill,
    lines: Receiver<String>,
    seen: Vec<String>,
}

impl Balance {
    fn spawn(p: &NetnsPair, args: &[&str]) -> Balance {
        let mut child = Command::new("ip")
            .args(["netns", "exec", p.ns(Side::B), BIN, "balance"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn linerate balance");
        let out = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        Balance {
            kid: Kill(vec![child]),
            lines,
            seen: Vec::new(),
        }
    }

    fn stderr(&mut self) -> String {
        let mut s = String::new();
        if let Some(e) = self.kid.0[0].stderr.as_mut() {
            let _ = e.read_to_string(&mut s);
        }
        s
    }

    /// Waits for a stdout line that `ready` accepts: one printed by the distribution loop, so
    /// the input is open and read. Panics (with the master's stderr) if the master ends first.
    fn wait_line(&mut self, what: &str, ready: impl Fn(&str) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    let hit = ready(&l);
                    self.seen.push(l);
                    if hit {
                        return;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    panic!("balance printed no {what} in 20 s: {:?}", self.seen)
                }
                Err(RecvTimeoutError::Disconnected) => {
                    let _ = self.kid.0[0].wait();
                    let err = self.stderr();
                    panic!(
                        "balance ended before its {what}: {err}\nstdout: {:?}",
                        self.seen
                    )
                }
            }
        }
    }

    /// Waits (at most `limit`) for the master to end successfully; returns its stdout lines.
    fn finish(mut self, limit: Duration) -> Vec<String> {
        let t0 = Instant::now();
        let status = loop {
            if let Some(s) = self.kid.0[0].try_wait().unwrap() {
                break s;
            }
            assert!(
                t0.elapsed() < limit,
                "balance did not finish within {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        let err = self.stderr();
        while let Ok(l) = self.lines.recv_timeout(Duration::from_secs(5)) {
            self.seen.push(l);
        }
        assert!(status.success(), "balance failed: {err}");
        std::mem::take(&mut self.seen)
    }
}

fn summary(lines: &[String]) -> serde_json::Value {
    lines
        .iter()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|j| j["type"] == "summary")
        .unwrap_or_else(|| panic!("no summary: {lines:?}"))
}

fn is_stats_tick(l: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(l).is_ok_and(|j| j["type"] == "stats")
}

fn tmpdir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("lr-cxdp-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A veth pair with two receive queues on vB and no IPv6 (so nothing but the test's frames
/// reaches vB's receive queues).
fn two_queue_pair() -> NetnsPair {
    let p = NetnsPair::with_queues(2).expect("netns pair");
    p.no_ipv6().expect("no IPv6 chatter");
    p
}

/// Asserts that both receive queues of vB carried frames, and `n` frames in all.
fn assert_both_queues(p: &NetnsPair, n: u32) {
    let per_queue = netns::xdp_queue_packets(p, Side::B, "vB");
    assert!(
        per_queue.len() == 2 && per_queue.iter().all(|&q| q > 0),
        "vB's two receive queues both carried frames: {per_queue:?}"
    );
    assert_eq!(
        per_queue.iter().sum::<u64>(),
        u64::from(n),
        "vB's XDP program saw exactly the frames sent: {per_queue:?}"
    );
}

/// The master's summary says it received and distributed all `n` frames sent and nothing was
/// dropped anywhere (input, queues).
fn assert_took_all(ms: &serde_json::Value, n: u32) {
    assert_eq!(ms["invariant_ok"], true, "{ms}");
    assert_eq!(ms["rx"], n, "the master received every frame sent: {ms}");
    assert_eq!(
        ms["distributed"], n,
        "every frame sent was distributed: {ms}"
    );
    assert_eq!(ms["input_drops"], 0, "{ms}");
    for (k, x) in ms["queues"].as_array().unwrap().iter().enumerate() {
        for (what, d) in x["drops"].as_object().unwrap() {
            assert_eq!(d, 0, "queue {k} dropped ({what}): {ms}");
        }
    }
}

#[test]
fn xdp_input_processes_zero_copy() {
    if !netns::require_priv() {
        return;
    }
    const N: u32 = 4000;
    let p = two_queue_pair();
    let id = 210_000 + std::process::id() % 10_000;
    let dir = tmpdir("procs");
    let sent = frames(&p, N);
    let n = N.to_string();
    let mut master = Balance::spawn(
        &p,
        &[
            "-i",
            "xdp:vB",
            "-c",
            &id.to_string(),
            "-n",
            "2",
            "-m",
            "5tuple",
            "--packets",
            &n,
            "-t",
            "40",
            "--interval",
            "100ms",
            "--wait-consumers",
            "--json",
        ],
    );
    let seg = || linerate_test_support::cluster_segment(id);
    let t0 = Instant::now();
    while !seg().exists() {
        assert!(t0.elapsed() < Duration::from_secs(10), "no segment");
        if master.kid.0[0].try_wait().unwrap().is_some() {
            let err = master.stderr();
            panic!("balance ended before creating its cluster: {err}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // Consumers need no namespace: the segment is in /dev/shm (or a hugetlbfs).
    let mut consumers = Kill(vec![]);
    for q in 0..2 {
        consumers.0.push(
            Command::new(BIN)
                .args(["count", "-i", &format!("cluster:{id}@{q}")])
                .args(["--json", "-q", "-w"])
                .arg(dir.join(format!("q{q}.pcap")))
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn linerate count"),
        );
    }
    // Both consumers attached and the distribution loop runs once a stats line is out.
    master.wait_line("stats line", is_stats_tick);
    send(&p, &sent);
    let ms = summary(&master.finish(Duration::from_secs(45)));
    assert_took_all(&ms, N);
    let q = ms["queues"].as_array().unwrap();
    let mut got = Vec::new();
    let mut lens = Vec::new();
    for (k, c) in consumers.0.drain(..).enumerate() {
        let mut c = c;
        let t0 = Instant::now();
        while c.try_wait().unwrap().is_none() {
            if t0.elapsed() > Duration::from_secs(20) {
                let _ = c.kill();
                let _ = c.wait();
                panic!("consumer {k} did not finish");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = c.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "consumer {k}: {err}");
        let cs = summary(
            &String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(str::to_string)
                .collect::<Vec<_>>(),
        );
        assert_eq!(cs["pkts"], q[k]["delivered"], "consumer {k}: {cs} vs {ms}");
        let recs = records(&dir.join(format!("q{k}.pcap")));
        assert_eq!(
            serde_json::Value::from(recs.len()),
            q[k]["delivered"],
            "queue {k}'s pcap"
        );
        lens.push(recs.len());
        got.extend(recs);
    }
    assert!(lens.iter().all(|&l| l > 0), "flows spread: {lens:?}");
    assert_same_frames(&sent, got);
    assert_both_queues(&p, N);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(
        ms["copied"], 0,
        "the AF_XDP sockets received into the segment's frames: the master copied none: {ms}"
    );
}

#[test]
fn xdp_input_threads_zero_copy() {
    if !netns::require_priv() {
        return;
    }
    const N: u32 = 1500;
    let p = two_queue_pair();
    let dir = tmpdir("threads");
    let sent = frames(&p, N);
    let (q0, q1) = (dir.join("q0.pcap"), dir.join("q1.pcap"));
    let r0 = format!("0:{}", q0.display());
    let r1 = format!("1:{}", q1.display());
    let n = N.to_string();
    // Application 0's two queues are written to capture files; application 1's one queue
    // (a full copy) is read by a consumer thread.
    let mut master = Balance::spawn(
        &p,
        &[
            "-i",
            "xdp:vB",
            "--threads",
            "-n",
            "2,1",
            "-m",
            "5tuple",
            "-r",
            &r0,
            "-r",
            &r1,
            "--packets",
            &n,
            "-t",
            "40",
            "--interval",
            "100ms",
            "--json",
        ],
    );
    master.wait_line("stats line", is_stats_tick);
    send(&p, &sent);
    let ms = summary(&master.finish(Duration::from_secs(45)));
    assert_took_all(&ms, N);
    let q = ms["queues"].as_array().unwrap();
    let (a, b) = (records(&q0), records(&q1));
    assert_eq!(serde_json::Value::from(a.len()), q[0]["delivered"], "{ms}");
    assert_eq!(serde_json::Value::from(b.len()), q[1]["delivered"], "{ms}");
    assert!(
        !a.is_empty() && !b.is_empty(),
        "flows spread: {} and {}",
        a.len(),
        b.len()
    );
    let mut got = a;
    got.extend(b);
    assert_same_frames(&sent, got);
    // The thread of queue 2 read every frame, and all their bytes.
    let bytes: usize = sent.iter().map(Vec::len).sum();
    let th = &ms["threads"][2];
    assert_eq!(th["pkts"], N, "{ms}");
    assert_eq!(th["bytes"], bytes, "{ms}");
    assert_eq!(q[2]["delivered"], N, "{ms}");
    assert_both_queues(&p, N);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(
        ms["copied"], 0,
        "the AF_XDP sockets received into the segment's frames: the master copied none: {ms}"
    );
}

/// The human-readable summary says how packets reached the segment.
#[test]
fn xdp_input_summary_says_zero_copy() {
    if !netns::require_priv() {
        return;
    }
    const N: u32 = 300;
    let p = two_queue_pair();
    let sent = frames(&p, N);
    let n = N.to_string();
    let mut master = Balance::spawn(
        &p,
        &[
            "-i",
            "xdp:vB",
            "--threads",
            "-n",
            "2",
            "--packets",
            &n,
            "-t",
            "40",
            "--interval",
            "100ms",
            "--no-console",
        ],
    );
    // The banner comes before the loop; any line after it is the loop's statistics.
    master.wait_line("statistics", |l| {
        !l.starts_with("Balancing") && !l.trim().is_empty()
    });
    send(&p, &sent);
    let out = master.finish(Duration::from_secs(45));
    let copies: Vec<&String> = out.iter().filter(|l| l.starts_with("Copies:")).collect();
    assert_eq!(copies.len(), 1, "one Copies line: {out:#?}");
    assert_eq!(
        copies[0], "Copies: none, the input wrote into the segment's frames (zero copy)",
        "{out:#?}"
    );
}

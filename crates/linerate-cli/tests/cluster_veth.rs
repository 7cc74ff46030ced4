//! PF_RING ZC's cluster test 10 with a kernel port: a cluster master reads `afpacket:vB` in one network
//! namespace, frames of 200 flows (both directions) are sent from the other, and three consumer
//! processes (`-n 2,1 -m 5tuple`) record their queues: application 0's two queues split the flows
//! with both directions of each flow on one queue, application 1 gets every frame. Needs root
//! (skips otherwise, fails instead under LINERATE_REQUIRE_PRIV=1).
#![deny(unsafe_code)]

use linerate_test_support::netns;

use linerate::mem::{Batch, Desc, Pool, PoolConfig};
use linerate::port::afpacket::AfPacket;
use linerate::port::{Port, PortOptions};
use netns::{NetnsPair, Side};
use std::collections::HashMap;
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_linerate");

/// Frame `seq` of flow `seq % 200`, in the forward direction when `seq / 200` is even.
fn frame(p: &NetnsPair, seq: u32) -> Vec<u8> {
    let k = seq % 200;
    let (mut a, mut b) = ([198, 18, 1, k as u8], [198, 19, 2, (k * 7) as u8]);
    let (mut sp, mut dp) = (1000 + k as u16, 53u16);
    if (seq / 200) % 2 == 1 {
        std::mem::swap(&mut a, &mut b);
        std::mem::swap(&mut sp, &mut dp);
    }
    let mut f = Vec::with_capacity(64);
    f.extend_from_slice(&p.mac_b);
    f.extend_from_slice(&p.mac_a);
    f.extend_from_slice(&[0x08, 0x00, 0x45, 0, 0, 46, 0, 0, 0x40, 0, 64, 17, 0, 0]);
    f.extend_from_slice(&a);
    f.extend_from_slice(&b);
    f.extend_from_slice(&sp.to_be_bytes());
    f.extend_from_slice(&dp.to_be_bytes());
    f.extend_from_slice(&26u16.to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(&seq.to_be_bytes());
    f.resize(60, 0);
    f
}

/// The flow of a recorded frame, direction-free: (low address, high address).
fn flow_of(f: &[u8]) -> ([u8; 4], [u8; 4]) {
    let a: [u8; 4] = f[26..30].try_into().unwrap();
    let b: [u8; 4] = f[30..34].try_into().unwrap();
    if a < b {
        (a, b)
    } else {
        (b, a)
    }
}

/// Reads a classic pcap into its records' bytes.
fn records(path: &std::path::Path) -> Vec<Vec<u8>> {
    let d = std::fs::read(path).expect("pcap written");
    let mut off = 24;
    let mut out = Vec::new();
    while off + 16 <= d.len() {
        let cap = u32::from_le_bytes(d[off + 8..off + 12].try_into().unwrap()) as usize;
        out.push(d[off + 16..off + 16 + cap].to_vec());
        off += 16 + cap;
    }
    out
}

fn send(pair: &NetnsPair, n: u32) {
    pair.run_in(Side::A, || {
        let mut tx = AfPacket::open("vA", &PortOptions::default()).expect("open vA");
        let pool = Arc::new(Pool::new(&PoolConfig::default()).unwrap());
        let mut b = Batch::with_pool(&pool);
        let deadline = Instant::now() + Duration::from_secs(15);
        let mut seq = 0u32;
        while seq < n && Instant::now() < deadline {
            while !b.is_full() && seq < n {
                let f = frame(pair, seq);
                let mut fr = b.alloc().unwrap();
                fr.buf()[..f.len()].copy_from_slice(&f);
                fr.push(Desc {
                    len: f.len() as u32,
                    wire_len: f.len() as u32,
                    ..Default::default()
                });
                seq += 1;
            }
            while !b.is_empty() && Instant::now() < deadline {
                if tx.tx(&mut b).unwrap() == 0 {
                    std::thread::sleep(Duration::from_micros(100));
                }
            }
            // paced so that a loaded 2-core machine keeps up
            std::thread::sleep(Duration::from_micros(300));
        }
        tx.flush().unwrap();
    });
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

fn summary(out: &Output) -> serde_json::Value {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|j| j["type"] == "summary")
        .unwrap_or_else(|| panic!("no summary: {}", String::from_utf8_lossy(&out.stderr)))
}

#[test]
fn kernel_port_master_two_applications_symmetric_5tuple() {
    if !netns::require_priv() {
        return;
    }
    const N: u32 = 4000;
    let pair = NetnsPair::new().expect("netns pair");
    let id = 200_000 + std::process::id() % 10_000;
    let seg = || linerate_test_support::cluster_segment(id);
    let dir = std::env::temp_dir().join(format!("lr-cveth-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let master = Command::new("ip")
        .args([
            "netns",
            "exec",
            pair.ns(Side::B),
            BIN,
            "balance",
            "-i",
            "afpacket:vB",
        ])
        .args([
            "-c",
            &id.to_string(),
            "-n",
            "2,1",
            "-m",
            "5tuple",
            "-f",
            "udp",
            "-t",
            "8",
        ])
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
    // Consumers need no namespace: the segment is in /dev/shm (or a hugetlbfs).
    for q in 0..3 {
        let w = dir.join(format!("q{q}.pcap"));
        kids.0.push(
            Command::new(BIN)
                .args([
                    "count",
                    "-i",
                    &format!("cluster:{id}@{q}"),
                    "--json",
                    "-q",
                    "-w",
                ])
                .arg(&w)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap(),
        );
    }
    std::thread::sleep(Duration::from_millis(500)); // consumers attach, the master starts reading
    send(&pair, N);
    let m = finish(master, Duration::from_secs(30));
    assert!(m.status.success(), "{}", String::from_utf8_lossy(&m.stderr));
    let ms = summary(&m);
    assert_eq!(ms["invariant_ok"], true, "{ms}");
    assert_eq!(
        ms["distributed"], N,
        "every UDP frame sent was distributed: {ms}"
    );
    let q = ms["queues"].as_array().unwrap();
    let mut per_queue = vec![];
    for (k, c) in kids.0.drain(..).enumerate() {
        let out = finish(c, Duration::from_secs(20));
        assert_eq!(summary(&out)["pkts"], q[k]["delivered"], "consumer {k}");
        per_queue.push(records(&dir.join(format!("q{k}.pcap"))));
    }
    let drops: u64 = q
        .iter()
        .map(|x| x["drops"]["ring_full"].as_u64().unwrap())
        .sum();
    assert_eq!(drops, 0, "paced traffic, consumers kept up: {ms}");
    assert_eq!(
        per_queue[2].len(),
        N as usize,
        "application 1 has a full copy"
    );
    assert_eq!(per_queue[0].len() + per_queue[1].len(), N as usize);
    assert!(
        !per_queue[0].is_empty() && !per_queue[1].is_empty(),
        "flows are spread"
    );
    let mut home: HashMap<([u8; 4], [u8; 4]), usize> = HashMap::new();
    for (k, frames) in per_queue[..2].iter().enumerate() {
        for f in frames {
            let prev = *home.entry(flow_of(f)).or_insert(k);
            assert_eq!(prev, k, "both directions of a flow on one queue");
        }
    }
    assert_eq!(home.len(), 200);
    let _ = std::fs::remove_dir_all(&dir);
}

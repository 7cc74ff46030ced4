//! The library's examples (crates/linerate/examples) run and do what their text says: the
//! capture loop counts the sample capture, the cluster delivers every packet, the flow counter
//! accounts for every packet, and l2fwd forwards a file and, across three namespaces, a veth
//! line (that part needs root). `cargo test` builds the examples before running this.
#![deny(unsafe_code)]

use linerate::mem::Batch;
use linerate::open_rx;
use linerate::port::PortOptions;
use linerate_test_support::line::{NetnsLine, Node};
use linerate_test_support::netns::{require_priv, send_raw, udp_frame, udp_seq};
use linerate_test_support::repo_root;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

fn example(name: &str) -> PathBuf {
    // This test runs from target/<profile>/deps; cargo puts examples in target/<profile>/examples.
    let exe = std::env::current_exe().unwrap();
    let p = exe
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("examples")
        .join(name);
    assert!(
        p.exists(),
        "{} is missing: run `cargo test` for the whole package (it builds the examples) or \
         `cargo build --release -p linerate --examples` first",
        p.display()
    );
    p
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

fn sample() -> String {
    format!(
        "pcap:{}",
        repo_root().join("examples/sample.pcap").display()
    )
}

/// Packets in a capture, read with the library's own pcap port.
fn packets_in(uri: &str) -> Vec<Vec<u8>> {
    let mut p = open_rx(uri, &PortOptions::default()).unwrap();
    let mut b = Batch::new();
    let mut all = Vec::new();
    while !p.is_finished() {
        p.rx(&mut b).unwrap();
        all.extend(b.iter().map(|k| k.data.to_vec()));
        b.clear();
    }
    all
}

#[test]
fn capture_counts_every_packet_of_the_sample() {
    let n = packets_in(&sample()).len();
    let out = run(Command::new(example("capture")).arg(sample()));
    assert!(out.contains(&format!(": {n} packets,")), "{out}");
    assert!(out.contains("dropped: 0"), "{out}");
}

#[test]
fn cluster_delivers_every_packet_to_its_queues() {
    let n = packets_in(&sample()).len();
    let out = run(Command::new(example("cluster")).args([&sample(), "3"]));
    let per_queue: u64 = out
        .lines()
        .filter_map(|l| l.strip_prefix("queue "))
        .map(|l| l.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(
        out.lines().filter(|l| l.starts_with("queue ")).count(),
        3,
        "{out}"
    );
    assert_eq!(per_queue, n as u64, "{out}");
    assert!(
        out.contains(&format!("read {n}, delivered {n}, dropped 0")),
        "{out}"
    );
}

#[test]
fn the_flow_counter_accounts_for_every_packet() {
    let n = packets_in(&sample()).len() as u64;
    let out = run(Command::new(example("flows")).args([&sample(), "100000"]));
    let head = out.lines().next().unwrap();
    let words: Vec<&str> = head.split_whitespace().collect();
    let flows: usize = words[0].parse().unwrap();
    let not_ip: u64 = words[2].trim_start_matches('(').parse().unwrap();
    let rows: Vec<Vec<&str>> = out
        .lines()
        .skip(2)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len(), flows, "{out}");
    assert!(flows > 1, "{out}");
    let in_flows: u64 = rows
        .iter()
        .map(|r| r[3].parse::<u64>().unwrap() + r[4].parse::<u64>().unwrap())
        .sum();
    assert_eq!(in_flows + not_ip, n, "{out}");
}

#[test]
fn l2fwd_forwards_a_capture_file_with_rewritten_macs() {
    let dir = std::env::temp_dir().join(format!("lr-ex-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out_file = dir.join("out.pcap");
    let out =
        run(Command::new(example("l2fwd"))
            .args([&sample(), &format!("pcap:{}", out_file.display())]));
    let input = packets_in(&sample());
    let got = packets_in(&format!("pcap:{}", out_file.display()));
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(got.len(), input.len(), "{out}");
    for (a, b) in input.iter().zip(&got) {
        assert_eq!(&b[..6], &[2, 0, 0, 0, 0, 1]);
        assert_eq!(&b[6..12], &[2, 0, 0, 0, 0xff, 1]);
        assert_eq!(&a[12..], &b[12..]);
    }
    assert!(
        out.contains(&format!("Total packets received: {:>14}", input.len())),
        "{out}"
    );
    assert!(
        out.contains("Total packets dropped:               0"),
        "{out}"
    );
}

#[test]
fn l2fwd_forwards_across_a_veth_line() {
    if !require_priv() {
        return;
    }
    const N: u32 = 2000;
    let line = NetnsLine::new().unwrap();
    let mut fwd = Command::new("ip")
        .args(["netns", "exec", line.ns(Node::B)])
        .arg(example("l2fwd"))
        .args(["afpacket:vB0", "afpacket:vB1", "5"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let got = std::thread::scope(|s| {
        let capture = s.spawn(|| {
            line.run_in(Node::C, || {
                let mut p = open_rx("afpacket:vC", &PortOptions::default()).unwrap();
                let mut b = Batch::new();
                let mut seqs = Vec::new();
                let until = Instant::now() + Duration::from_secs(5);
                while seqs.len() < N as usize && Instant::now() < until {
                    if p.rx(&mut b).unwrap() == 0 {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    for k in b.iter() {
                        if let Some(q) = udp_seq(k.data) {
                            assert_eq!(&k.data[..6], &[2, 0, 0, 0, 0, 1]);
                            seqs.push(q);
                        }
                    }
                    b.clear();
                }
                seqs
            })
        });
        std::thread::sleep(Duration::from_millis(700)); // l2fwd and the capture are up
        let frames: Vec<Vec<u8>> = (0..N)
            .map(|i| udp_frame(line.mac_b0, line.mac_a, (i % 16) as u16, i))
            .collect();
        line.run_in(Node::A, || send_raw("vA", &frames));
        capture.join().unwrap()
    });
    let status = fwd.wait().unwrap();
    let mut text = String::new();
    std::io::Read::read_to_string(fwd.stdout.as_mut().unwrap(), &mut text).unwrap();
    assert!(status.success(), "{text}");
    let mut sorted = got.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(
        sorted,
        (0..N).collect::<Vec<_>>(),
        "C got {} of {N}\n{text}",
        got.len()
    );
    assert!(
        text.contains("Total packets dropped:               0"),
        "{text}"
    );
}

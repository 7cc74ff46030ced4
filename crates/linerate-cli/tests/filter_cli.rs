//! Filters as libpcap means them: `len`, `less` and `greater` test the length on the wire (a cut
//! record's `orig_len`, a frame captured with `-s`), `--user-filter` runs the filter in user
//! space, and a program the kernel refuses (`protochain`'s backward jump) runs in user space with
//! a warning, as libpcap does. Counts are checked against tcpdump on the same packets.
#![deny(unsafe_code)]

use linerate_test_support::netns::{self, NetnsPair, Side};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_linerate")
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("linerate-filter-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

/// Copies the classic pcap `from` into `to` with every record cut to `snap` bytes (its wire
/// length kept), as `editcap -s` or `tcpdump -s` capture would leave it.
fn cut_pcap(from: &Path, to: &Path, snap: usize) -> usize {
    let d = std::fs::read(from).unwrap();
    assert_eq!(
        d[..4],
        [0xd4, 0xc3, 0xb2, 0xa1],
        "little-endian µs pcap expected"
    );
    let mut out = d[..24].to_vec();
    let mut off = 24;
    let mut cut = 0;
    while off + 16 <= d.len() {
        let cap = u32::from_le_bytes(d[off + 8..off + 12].try_into().unwrap()) as usize;
        let keep = cap.min(snap);
        cut += (keep < cap) as usize;
        out.extend_from_slice(&d[off..off + 8]);
        out.extend_from_slice(&(keep as u32).to_le_bytes());
        out.extend_from_slice(&d[off + 12..off + 16]);
        out.extend_from_slice(&d[off + 16..off + 16 + keep]);
        off += 16 + cap;
    }
    std::fs::write(to, out).unwrap();
    cut
}

fn tcpdump_count(file: &Path, expr: &str) -> Option<u64> {
    let o = Command::new("tcpdump")
        .args(["-nr", file.to_str().unwrap(), expr])
        .output()
        .ok()?;
    assert!(
        o.status.success(),
        "tcpdump '{expr}': {}",
        String::from_utf8_lossy(&o.stderr)
    );
    Some(String::from_utf8_lossy(&o.stdout).lines().count() as u64)
}

fn json_lines(stdout: &[u8]) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

#[test]
fn wire_length_filters_match_tcpdump_on_cut_records() {
    let sample = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/sample.pcap");
    let cut = tmp("cut.pcap");
    assert!(
        cut_pcap(&sample, &cut, 50) > 500,
        "the sample has records longer than 50 bytes"
    );
    for expr in [
        "less 60",
        "greater 100",
        "len > 80",
        "len <= 50 or udp",
        "vlan and greater 64",
    ] {
        let o = Command::new(bin())
            .args(["count", "-i", cut.to_str().unwrap(), "-f", expr, "--json"])
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{expr}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let j = json_lines(&o.stdout);
        let s = j.iter().find(|j| j["type"] == "summary").expect("summary");
        let pkts = s["pkts"].as_u64().unwrap();
        assert_eq!(
            pkts + s["drops_by_reason"]["filter"].as_u64().unwrap(),
            2000
        );
        match tcpdump_count(&cut, expr) {
            Some(n) => assert_eq!(pkts, n, "'{expr}': linerate {pkts}, tcpdump {n}"),
            None => linerate_test_support::skip("tcpdump is not installed"),
        }
        if expr == "greater 100" {
            // Every record is at most 50 bytes: only the wire length can pass this.
            assert!(pkts > 0);
        }
    }
    let _ = std::fs::remove_file(&cut);
}

/// Runs `linerate count` in namespace B on afpacket:vB with `args` for `secs` seconds while
/// `frames` are sent from A; returns the JSON lines and stderr.
fn count_while_sending(
    pair: &NetnsPair,
    args: &[&str],
    frames: &[Vec<u8>],
) -> (Vec<serde_json::Value>, String) {
    let mut child = Command::new("ip")
        .args([
            "netns",
            "exec",
            pair.ns(Side::B),
            bin(),
            "count",
            "-i",
            "afpacket:vB",
        ])
        .args(["-t", "4", "--json"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn linerate");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().expect("start line").expect("read");
    let mut got = vec![serde_json::from_str::<serde_json::Value>(&first).expect("start json")];
    pair.run_in(Side::A, || netns::send_raw("vA", frames));
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("linerate count did not finish");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    got.extend(
        lines
            .map_while(Result::ok)
            .filter_map(|l| serde_json::from_str(&l).ok()),
    );
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(status.success(), "count {args:?} failed: {err}");
    (got, err)
}

fn summary_pkts(j: &[serde_json::Value]) -> u64 {
    let s = j.iter().find(|j| j["type"] == "summary").expect("summary");
    assert_eq!(s["drops_by_reason"]["kernel"], 0, "{s}");
    s["pkts"].as_u64().unwrap()
}

#[test]
fn afpacket_user_filter_snaplen_and_protochain() {
    if !netns::require_priv() {
        return;
    }
    let pair = NetnsPair::new().expect("netns pair");
    pair.no_ipv6().expect("no IPv6 chatter");
    // 150 untagged UDP frames and 150 tagged ones (VLAN 7), 60 to 364 bytes.
    let mut frames = Vec::new();
    for seq in 0..300u32 {
        let f = netns::udp_frame(pair.mac_b, pair.mac_a, 1, seq);
        frames.push(if seq % 2 == 1 {
            netns::with_tags(&f, &[(0x8100, 7)])
        } else {
            f
        });
    }
    let tagged_long = frames
        .iter()
        .filter(|f| f[12..14] == [0x81, 0x00] && f.len() >= 100)
        .count() as u64;
    let untagged = frames.iter().filter(|f| f[12..14] == [0x08, 0x00]).count() as u64;

    // -s 64: the kernel passes tagged frames, user space judges them on their wire length.
    let out = tmp("snap.pcap");
    let (j, _) = count_while_sending(
        &pair,
        &[
            "-s",
            "64",
            "-f",
            "vlan and greater 100",
            "-w",
            out.to_str().unwrap(),
        ],
        &frames,
    );
    assert_eq!(j[0]["filter_in_kernel"], true, "{}", j[0]);
    assert_eq!(summary_pkts(&j), tagged_long);
    if let Some(n) = tcpdump_count(&out, "vlan and greater 100") {
        assert_eq!(n, tagged_long, "tcpdump on the cut records linerate wrote");
    }

    // --user-filter: the filter runs in user space, and says so.
    let (j, _) = count_while_sending(&pair, &["--user-filter", "-f", "udp"], &frames);
    assert_eq!(j[0]["filter_in_kernel"], false, "{}", j[0]);
    assert_eq!(summary_pkts(&j), untagged);

    // protochain: the kernel refuses the program; it runs in user space with a warning.
    let out = tmp("chain.pcap");
    let (j, err) = count_while_sending(
        &pair,
        &["-f", "ip protochain 17", "-w", out.to_str().unwrap()],
        &frames,
    );
    assert!(err.contains("kernel filter failed"), "{err}");
    assert_eq!(j[0]["filter_in_kernel"], false, "{}", j[0]);
    assert_eq!(summary_pkts(&j), untagged);
    if let Some(n) = tcpdump_count(&out, "ip protochain 17") {
        assert_eq!(n, untagged, "tcpdump on what linerate kept");
    }
    let _ = std::fs::remove_dir_all(out.parent().unwrap());
}

/// Records whose length on the wire (`orig_len`) is below their captured length, as fuzzed or
/// broken captures hold them: libpcap gives the filter `orig_len` as it is, and so does linerate
/// (`len`, `less`, `greater`), in count and flows alike; every other use keeps the wire length at
/// least the captured one.
#[test]
fn wire_length_below_the_captured_length_is_filtered_as_tcpdump_does() {
    let sample = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/sample.pcap");
    let d = std::fs::read(sample).unwrap();
    let mut out = d[..24].to_vec();
    let (mut off, mut n) = (24, 0u64);
    while off + 16 <= d.len() {
        let cap = u32::from_le_bytes(d[off + 8..off + 12].try_into().unwrap());
        // Every third record says it was 0, a tenth or half of its captured length long.
        let orig = match n % 3 {
            0 => 0,
            1 => cap / 10,
            _ => cap / 2,
        };
        out.extend_from_slice(&d[off..off + 12]);
        out.extend_from_slice(&orig.to_le_bytes());
        out.extend_from_slice(&d[off + 16..off + 16 + cap as usize]);
        off += 16 + cap as usize;
        n += 1;
    }
    let f = tmp("short-orig.pcap");
    std::fs::write(&f, out).unwrap();
    for expr in ["less 60", "len < 30", "len == 0", "greater 200"] {
        let o = Command::new(bin())
            .args(["count", "-i", f.to_str().unwrap(), "-f", expr, "--json"])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let j = json_lines(&o.stdout);
        let s = j.iter().find(|j| j["type"] == "summary").expect("summary");
        let pkts = s["pkts"].as_u64().unwrap();
        let o = Command::new(bin())
            .args(["flows", "--json", "-w", "/dev/null", "-f", expr, "-i"])
            .arg(&f)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let j = json_lines(&o.stderr);
        let s = j
            .iter()
            .find(|j| j["type"] == "summary")
            .expect("flows summary");
        let flows_pass = n - s["filtered"].as_u64().unwrap();
        assert_eq!(
            pkts, flows_pass,
            "'{expr}': count {pkts}, flows {flows_pass}"
        );
        match tcpdump_count(&f, expr) {
            Some(t) => assert_eq!(pkts, t, "'{expr}': linerate {pkts}, tcpdump {t}"),
            None => linerate_test_support::skip("tcpdump is not installed"),
        }
    }
    let _ = std::fs::remove_file(&f);
}

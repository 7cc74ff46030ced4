//! `linerate flows --fields smac,dmac,sminttl,smaxttl,dminttl,dmaxttl,sflags,dflags` against
//! what tshark shows for the same frames: per flow (one record per 5-tuple, no status
//! records), each side's TTL range and OR of TCP flags, and the Ethernet addresses of the flow's
//! first packet oriented to the initiator.
//!
//! Without tshark the test prints why and passes, unless LINERATE_REQUIRE_PRIV=1.
#![deny(unsafe_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn have_tshark() -> bool {
    let ok = Command::new("tshark")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        linerate_test_support::skip("tshark not installed (apt-get install tshark)");
    }
    ok
}

/// One direction of a TCP conversation: (src, sport, dst, dport).
type Dir = (String, String, String, String);

#[derive(Default, Debug)]
struct Side {
    ttl: Option<(u8, u8)>,
    flags: u8,
    /// Ethernet source and destination of this side's first frame, and its frame number.
    first: Option<(u64, String, String)>,
}

fn tshark(cap: &Path) -> BTreeMap<Dir, Side> {
    let o = Command::new("tshark")
        .arg("-r")
        .arg(cap)
        .args([
            "-Y",
            "tcp && !icmp",
            "-T",
            "fields",
            "-E",
            "separator=,",
            "-E",
            "occurrence=f",
        ])
        .args(["-e", "frame.number", "-e", "eth.src", "-e", "eth.dst"])
        .args(["-e", "ip.src", "-e", "ip.dst", "-e", "tcp.srcport"])
        .args(["-e", "tcp.dstport", "-e", "ip.ttl", "-e", "tcp.flags"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut m: BTreeMap<Dir, Side> = BTreeMap::new();
    for l in String::from_utf8_lossy(&o.stdout).lines() {
        let c: Vec<&str> = l.split(',').collect();
        if c.len() < 9 || c[7].is_empty() {
            continue;
        }
        let n: u64 = c[0].parse().unwrap();
        let ttl: u8 = c[7].parse().unwrap();
        let flags = u16::from_str_radix(c[8].trim_start_matches("0x"), 16).unwrap() as u8;
        let s = m
            .entry((c[3].into(), c[5].into(), c[4].into(), c[6].into()))
            .or_default();
        s.ttl = Some(s.ttl.map_or((ttl, ttl), |(a, b)| (a.min(ttl), b.max(ttl))));
        s.flags |= flags;
        s.first.get_or_insert((n, c[1].into(), c[2].into()));
    }
    m
}

/// Our letters (`SAFRPUEC`) from the OR of the flags.
fn letters(f: u8) -> String {
    let mut s = String::new();
    for (b, c) in [
        (0x02, 'S'),
        (0x10, 'A'),
        (0x01, 'F'),
        (0x04, 'R'),
        (0x08, 'P'),
        (0x20, 'U'),
        (0x40, 'E'),
        (0x80, 'C'),
    ] {
        if f & b != 0 {
            s.push(c);
        }
    }
    s
}

fn check(cap: &Path) -> usize {
    let fields =
        "proto,saddr,sport,daddr,dport,smac,dmac,sminttl,smaxttl,dminttl,dmaxttl,sflags,dflags";
    let o = Command::new(env!("CARGO_BIN_EXE_linerate"))
        .args([
            "flows",
            "-q",
            "--status-interval",
            "0",
            "--format",
            "csv",
            "-f",
            "tcp",
        ])
        .args(["--fields", fields, "-i"])
        .arg(cap)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    let rows: Vec<Vec<&str>> = out
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect())
        .collect();
    let t = tshark(cap);
    let mut keys: BTreeMap<(String, String, String, String), usize> = BTreeMap::new();
    for r in &rows {
        *keys
            .entry((r[1].into(), r[2].into(), r[3].into(), r[4].into()))
            .or_default() += 1;
    }
    let mut checked = 0;
    for r in &rows {
        let fwd: Dir = (r[1].into(), r[2].into(), r[3].into(), r[4].into());
        if keys[&fwd] > 1 {
            continue; // the 5-tuple was reused: records split it, tshark's sums do not
        }
        let rev: Dir = (r[3].into(), r[4].into(), r[1].into(), r[2].into());
        let (s, d) = (t.get(&fwd), t.get(&rev));
        let range = |x: Option<&Side>| match x.and_then(|x| x.ttl) {
            Some((a, b)) => (a.to_string(), b.to_string()),
            None => (String::new(), String::new()),
        };
        assert_eq!((r[7].into(), r[8].into()), range(s), "sttl of {r:?}");
        assert_eq!((r[9].into(), r[10].into()), range(d), "dttl of {r:?}");
        let fl = |x: Option<&Side>| x.map_or(String::new(), |x| letters(x.flags));
        assert_eq!(r[11], fl(s), "sflags of {r:?}");
        assert_eq!(r[12], fl(d), "dflags of {r:?}");
        // The first frame of the flow: the initiator's source and destination, or the
        // responder's destination and source.
        let first = [s, d]
            .iter()
            .enumerate()
            .filter_map(|(i, x)| x.and_then(|x| x.first.clone()).map(|f| (f, i)))
            .min()
            .unwrap();
        let ((_, src, dst), side) = first;
        let want = if side == 0 { (src, dst) } else { (dst, src) };
        assert_eq!((r[5].to_string(), r[6].to_string()), want, "macs of {r:?}");
        checked += 1;
    }
    checked
}

#[test]
fn macs_ttl_ranges_and_flags_equal_tshark() {
    if !have_tshark() {
        return;
    }
    // (The sample's TCP 5-tuples are each reused by several connections: nothing to compare.)
    // TTL 63 one way and 64 the other; OpenFlow over TCP with real MACs.
    for (name, flows) in [("mptcp-v0.pcap", 2), ("of10_s4810.pcap", 2)] {
        let p = linerate_test_support::corpus_dir().join(name);
        if p.is_file() {
            assert_eq!(check(&p), flows, "{name}");
        } else {
            linerate_test_support::skip(&format!(
                "{name} is not in the corpus (set LINERATE_CORPUS)"
            ));
        }
    }
}

/// Without the fields asked for, nothing is read for them and the columns are not there; with
/// `all` they are.
#[test]
fn all_includes_the_new_fields() {
    let o = Command::new(env!("CARGO_BIN_EXE_linerate"))
        .args(["flows", "-q", "--format", "jsonl", "--fields", "all", "-i"])
        .arg(root().join("examples/sample.pcap"))
        .output()
        .unwrap();
    assert!(o.status.success());
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    let one_way = out
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|j| j["dpkts"] == 0)
        .unwrap();
    assert_eq!(one_way["smac"], "02:00:00:00:00:01");
    assert_eq!(one_way["dmac"], "02:00:00:00:00:02");
    assert_eq!(one_way["sminttl"], 64);
    assert_eq!(one_way["smaxttl"], 64);
    // The responder sent nothing: no TTL range.
    assert_eq!(one_way["dminttl"], serde_json::Value::Null);
}

/// Receives the IPFIX messages `flows --ipfix` sends for examples/sample.pcap with `fields`,
/// and returns tshark's decoding of them (each put in a raw IPv4/UDP frame to port 4739).
fn ipfix_through_tshark(fields: &str) -> String {
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_read_timeout(Some(std::time::Duration::from_millis(500)))
        .unwrap();
    let to = sock.local_addr().unwrap().to_string();
    let st = Command::new(env!("CARGO_BIN_EXE_linerate"))
        .args(["flows", "-q", "--ipfix", &to, "--fields", fields, "-i"])
        .arg(root().join("examples/sample.pcap"))
        .status()
        .unwrap();
    assert!(st.success());
    let mut pcap = Vec::new();
    for w in [0xa1b2_c3d4u32, 0x0004_0002, 0, 0, 65535, 101] {
        if w == 0x0004_0002 {
            pcap.extend_from_slice(&2u16.to_le_bytes());
            pcap.extend_from_slice(&4u16.to_le_bytes());
        } else {
            pcap.extend_from_slice(&w.to_le_bytes());
        }
    }
    let mut buf = [0u8; 65536];
    while let Ok(n) = sock.recv(&mut buf) {
        let udp_len = (8 + n) as u16;
        let mut f = vec![0x45, 0];
        f.extend_from_slice(&(20 + udp_len).to_be_bytes());
        f.extend_from_slice(&[0, 0, 0, 0, 64, 17, 0, 0, 127, 0, 0, 1, 127, 0, 0, 1]);
        f.extend_from_slice(&4739u16.to_be_bytes());
        f.extend_from_slice(&4739u16.to_be_bytes());
        f.extend_from_slice(&udp_len.to_be_bytes());
        f.extend_from_slice(&[0, 0]);
        f.extend_from_slice(&buf[..n]);
        for w in [1_700_000_000u32, 0, f.len() as u32, f.len() as u32] {
            pcap.extend_from_slice(&w.to_le_bytes());
        }
        pcap.extend_from_slice(&f);
    }
    let path = std::env::temp_dir().join(format!(
        "linerate-ipfix-fields-{}-{}.pcap",
        std::process::id(),
        fields.len()
    ));
    std::fs::write(&path, pcap).unwrap();
    let o = Command::new("tshark")
        .arg("-r")
        .arg(&path)
        .args(["-d", "udp.port==4739,cflow", "-V"])
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&path);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into()
}

/// IPFIX carries the addresses and TTL ranges as sourceMacAddress (56), destinationMacAddress
/// (80), minimumTTL (52), maximumTTL (53) and their reverse elements, only when --fields asks
/// for them; tshark decodes them.
#[test]
fn ipfix_carries_macs_and_ttls_when_asked() {
    if !have_tshark() {
        return;
    }
    let with = ipfix_through_tshark("default,smac,dmac,sminttl,smaxttl,dminttl,dmaxttl");
    let count = |t: &str, s: &str| t.lines().filter(|l| l.trim_start().starts_with(s)).count();
    // 72 biflow records (the summary's flows).
    assert_eq!(
        count(&with, "Source Mac Address: 02:00:00:00:00:0"),
        72,
        "{with}"
    );
    assert_eq!(
        count(&with, "Destination Mac Address: 02:00:00:00:00:0"),
        72
    );
    assert_eq!(
        count(&with, "MinTTL: 64"),
        72 + count(&with, "MinTTL: 64 (Reverse")
    );
    assert!(count(&with, "MaxTTL: 64 (Reverse") > 0);
    let without = ipfix_through_tshark("default");
    assert_eq!(count(&without, "Source Mac Address"), 0);
    assert_eq!(count(&without, "MinTTL"), 0);
    assert!(count(&without, "Flow 1") > 0, "{without}");
}

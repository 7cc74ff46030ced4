//! `linerate flows` against Debian's argus + ra on the same captures: per flow (canonical
//! 5-tuple; ICMP by address pair), the packets and bytes of each side must be equal for TCP, UDP
//! and ICMP. Both tools split a 5-tuple into several records (a new SYN after FIN, status
//! records); records are summed per key, so the comparison does not depend on how each tool
//! splits, only on what it counts. Where the record counts differ it is printed.
//!
//! Without argus the test prints why and passes, unless LINERATE_REQUIRE_PRIV=1 (CI installs
//! argus-server and argus-client with scripts/setup.sh --tests).
#![deny(unsafe_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn corpus(name: &str) -> Option<PathBuf> {
    let p = linerate_test_support::corpus_dir().join(name);
    p.is_file().then_some(p)
}

fn have(tool: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool}"))
        .output()
        .is_ok_and(|o| o.status.success())
}

fn argus_present() -> bool {
    if have("argus") && have("ra") {
        return true;
    }
    linerate_test_support::skip(
        "argus or ra not installed (apt-get install argus-server argus-client)",
    );
    false
}

/// (proto, endpoint a, endpoint b) with a <= b; ICMP endpoints have no port.
type Key = (String, String, String);
/// packets and bytes of side a, of side b, and the number of records.
type Val = [u64; 5];

fn endpoint(addr: &str, port: &str, icmp: bool) -> String {
    if icmp {
        addr.to_string()
    } else {
        format!("{addr}|{port}")
    }
}

fn sort_key(e: &str) -> (Option<std::net::IpAddr>, u32) {
    let (a, p) = e.split_once('|').unwrap_or((e, "0"));
    (a.parse().ok(), p.parse().unwrap_or(0))
}

/// Sums CSV rows (proto,saddr,sport,daddr,dport,spkts,dpkts,sbytes,dbytes) per canonical key.
fn aggregate(csv: &str) -> BTreeMap<Key, Val> {
    let mut m: BTreeMap<Key, Val> = BTreeMap::new();
    for line in csv.lines().skip(1) {
        let c: Vec<&str> = line.split(',').map(str::trim).collect();
        if c.len() < 9 {
            continue;
        }
        let proto = c[0].to_ascii_lowercase();
        let icmp = proto == "icmp" || proto == "ipv6-icmp";
        if !(icmp || proto == "tcp" || proto == "udp") {
            continue;
        }
        let s = endpoint(c[1], c[2], icmp);
        let d = endpoint(c[3], c[4], icmp);
        let n = |i: usize| {
            c[i].parse::<u64>()
                .unwrap_or_else(|_| panic!("bad number in {line}"))
        };
        let (sp, dp, sb, db) = (n(5), n(6), n(7), n(8));
        let swap = sort_key(&s) > sort_key(&d);
        let key = if swap { (proto, d, s) } else { (proto, s, d) };
        let v = m.entry(key).or_default();
        let (pa, pb, ba, bb) = if swap {
            (dp, sp, db, sb)
        } else {
            (sp, dp, sb, db)
        };
        v[0] += pa;
        v[1] += ba;
        v[2] += pb;
        v[3] += bb;
        v[4] += 1;
    }
    m
}

fn ours(cap: &Path, dir: &Path, filter: &[&str]) -> BTreeMap<Key, Val> {
    let out = dir.join("ours.csv");
    let mut f = Vec::new();
    if !filter.is_empty() {
        f = vec!["-f".to_string(), filter.join(" ")];
    }
    let st = Command::new(env!("CARGO_BIN_EXE_linerate"))
        .args(["flows", "-q", "--status-interval", "0", "-i"])
        .arg(cap)
        .args(&f)
        .arg("-w")
        .arg(&out)
        .args([
            "--fields",
            "proto,saddr,sport,daddr,dport,spkts,dpkts,sbytes,dbytes",
        ])
        .status()
        .unwrap();
    assert!(st.success(), "linerate flows failed on {}", cap.display());
    aggregate(&std::fs::read_to_string(out).unwrap())
}

fn theirs(cap: &Path, dir: &Path, filter: &[&str]) -> BTreeMap<Key, Val> {
    let out = dir.join("out.argus");
    let mut f = Vec::new();
    if !filter.is_empty() {
        f.push("-");
        f.extend_from_slice(filter);
    }
    let st = Command::new("argus")
        .arg("-r")
        .arg(cap)
        .arg("-w")
        .arg(&out)
        .args(&f)
        .status()
        .unwrap();
    assert!(st.success(), "argus failed on {}", cap.display());
    let o = Command::new("ra")
        .arg("-r")
        .arg(&out)
        .args([
            "-n", "-c", ",", "-s", "proto", "saddr", "sport", "daddr", "dport", "spkts", "dpkts",
        ])
        .args(["sbytes", "dbytes"])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "ra failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    aggregate(&String::from_utf8_lossy(&o.stdout))
}

fn compare(cap: &Path) {
    compare_filtered(cap, &[]);
}

/// Compares the flows of the packets `filter` (libpcap syntax, as words) passes.
fn compare_filtered(cap: &Path, filter: &[&str]) -> BTreeMap<Key, Val> {
    let dir = std::env::temp_dir().join(format!(
        "linerate-flows-argus-{}-{}-{}",
        std::process::id(),
        cap.file_name().unwrap().to_string_lossy(),
        filter.join("_")
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let a = ours(cap, &dir, filter);
    let b = theirs(cap, &dir, filter);
    let _ = std::fs::remove_dir_all(&dir);
    let mut bad = Vec::new();
    let mut split = Vec::new();
    for (k, vb) in &b {
        match a.get(k) {
            None => bad.push(format!("{k:?}: only argus {vb:?}")),
            Some(va) if va[..4] != vb[..4] => bad.push(format!("{k:?}: ours {va:?} argus {vb:?}")),
            Some(va) if va[4] != vb[4] => {
                split.push(format!("{k:?} {} here, {} argus", va[4], vb[4]))
            }
            _ => {}
        }
    }
    if !split.is_empty() {
        // ICMP echoes (argus: one record per sequence number), argus's 5 s status records.
        println!(
            "{}: {} keys in a different number of records, e.g. {}",
            cap.display(),
            split.len(),
            split[..split.len().min(2)].join("; ")
        );
    }
    for (k, va) in &a {
        if !b.contains_key(k) {
            bad.push(format!("{k:?}: only ours {va:?}"));
        }
    }
    let per_proto = |m: &BTreeMap<Key, Val>, p: &str| m.keys().filter(|k| k.0 == p).count();
    println!(
        "{}: {} flow keys agree (tcp {}, udp {}, icmp {})",
        cap.display(),
        a.len(),
        per_proto(&a, "tcp"),
        per_proto(&a, "udp"),
        per_proto(&a, "icmp")
    );
    assert!(
        bad.is_empty(),
        "{}: {} differences:\n{}",
        cap.display(),
        bad.len(),
        bad.join("\n")
    );
    a
}

/// `flows -f udp`: argus given the same filter finds the same 24 UDP conversations of the
/// sample (tshark's conv,udp lists 28: it adds the UDP headers quoted in ICMP errors, which
/// the filter `udp` does not pass).
#[test]
fn filtered_flows_agree_with_argus() {
    if !argus_present() {
        return;
    }
    let sample = root().join("examples/sample.pcap");
    let a = compare_filtered(&sample, &["udp"]);
    assert_eq!(a.len(), 24);
    assert!(a.keys().all(|k| k.0 == "udp"), "{a:?}");
    let a = compare_filtered(&sample, &["tcp", "and", "port", "80"]);
    assert!(!a.is_empty() && a.keys().all(|k| k.0 == "tcp"), "{a:?}");
}

#[test]
fn flows_agree_with_argus() {
    if !argus_present() {
        return;
    }
    let sample = root().join("examples/sample.pcap");
    compare(&sample);
    // 600 conversations, 200 open at a time (70% TCP with handshakes and FINs, 20% UDP, 10%
    // ICMP echo), made by the benchmark's generator.
    if have("python3") {
        let gen =
            std::env::temp_dir().join(format!("linerate-flows-gen-{}.pcap", std::process::id()));
        let st = Command::new("python3")
            .arg(root().join("bench/mkflows.py"))
            .arg(&gen)
            .args(["30000", "600", "200"])
            .status()
            .unwrap();
        assert!(st.success());
        compare(&gen);
        let _ = std::fs::remove_file(&gen);
    } else {
        println!("skipped the generated capture: python3 missing");
    }
    // TCP over Ethernet (MPTCP, OpenFlow), Linux cooked v1 (redis on loopback; BGP over IPv6,
    // pcapng), PPP (ICMP), Cisco HDLC (ICMP echo), BSD loopback (DNS), UDP and ICMP (DHCP, AFS).
    for name in [
        "mptcp-v0.pcap",
        "of10_s4810.pcap",
        "resp_3_malicious.pcap",
        "bgp-orf.pcapng",
        "icmp-rfc5837.pcap",
        "HDLC.pcap",
        "dns-badcookie.pcap",
        "dhcp-rfc4388.pcap",
        "eapon1.pcap",
        "afs.pcap", // UDP fragments: later fragments are counted in their datagram's flow
    ] {
        match corpus(name) {
            Some(p) => compare(&p),
            None => linerate_test_support::skip(&format!(
                "{name} is not in the corpus (set LINERATE_CORPUS)"
            )),
        }
    }
}

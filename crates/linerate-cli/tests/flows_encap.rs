//! `linerate flows` steps over what users carry (IPv4 AH, 802.3 LLC/SNAP, PPPoE with the 1-byte
//! PPP protocol field, MPLS) and keys the flows tshark decodes on the same capture.
#![deny(unsafe_code)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// `name` in a directory of its own (each test removes its directory while others run).
fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "linerate-flows-encap-{}-{name}",
        std::process::id()
    ));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

fn ipv4(src: [u8; 4], dst: [u8; 4], proto: u8, l4: &[u8]) -> Vec<u8> {
    let mut h = vec![0x45, 0, 0, 0, 0, 1, 0x40, 0, 64, proto, 0, 0];
    h[2..4].copy_from_slice(&((20 + l4.len()) as u16).to_be_bytes());
    h.extend_from_slice(&src);
    h.extend_from_slice(&dst);
    let mut sum = 0u32;
    for k in (0..20).step_by(2) {
        sum += u32::from(u16::from_be_bytes([h[k], h[k + 1]]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    h[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    h.extend_from_slice(l4);
    h
}

fn udp(sport: u16, dport: u16) -> Vec<u8> {
    let mut u = sport.to_be_bytes().to_vec();
    u.extend_from_slice(&dport.to_be_bytes());
    u.extend_from_slice(&[0, 12, 0, 0, 1, 2, 3, 4]);
    u
}

fn tcp(sport: u16, dport: u16) -> Vec<u8> {
    let mut t = sport.to_be_bytes().to_vec();
    t.extend_from_slice(&dport.to_be_bytes());
    t.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x02, 0xff, 0xff, 0, 0, 0, 0]);
    t
}

fn eth(et: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];
    f.extend_from_slice(&et.to_be_bytes());
    f.extend_from_slice(payload);
    while f.len() < 60 {
        f.push(0);
    }
    f
}

/// The capture: one flow per way of carrying IP, each address pair telling which.
fn frames() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    // IPv4 AH (next header UDP, 16 bytes).
    let mut ah = vec![17, 2, 0, 0, 0, 0, 0x10, 0, 0, 0, 0, 1, 7, 7, 7, 7];
    ah.extend_from_slice(&udp(1111, 53));
    out.push(eth(0x0800, &ipv4([10, 1, 0, 1], [10, 1, 0, 2], 51, &ah)));
    // 802.3 + LLC/SNAP + IPv4/TCP.
    let ip = ipv4([10, 2, 0, 1], [10, 2, 0, 2], 6, &tcp(2222, 80));
    let mut llc = vec![0xaa, 0xaa, 0x03, 0, 0, 0, 0x08, 0x00];
    llc.extend_from_slice(&ip);
    out.push(eth(llc.len() as u16, &llc));
    // PPPoE session, PPP protocol compressed to one byte (0x21: IPv4).
    let ip = ipv4([10, 3, 0, 1], [10, 3, 0, 2], 17, &udp(3333, 4444));
    let mut s = vec![0x11, 0, 0x00, 0x07];
    s.extend_from_slice(&((1 + ip.len()) as u16).to_be_bytes());
    s.push(0x21);
    s.extend_from_slice(&ip);
    out.push(eth(0x8864, &s));
    // PPPoE session, 2-byte protocol.
    let ip = ipv4([10, 4, 0, 1], [10, 4, 0, 2], 17, &udp(5555, 6666));
    let mut s = vec![0x11, 0, 0x00, 0x07];
    s.extend_from_slice(&((2 + ip.len()) as u16).to_be_bytes());
    s.extend_from_slice(&[0x00, 0x21]);
    s.extend_from_slice(&ip);
    out.push(eth(0x8864, &s));
    // MPLS, two labels.
    let mut m = vec![0, 0x01, 0x00, 64, 0, 0x02, 0x01, 64];
    m.extend_from_slice(&ipv4([10, 5, 0, 1], [10, 5, 0, 2], 6, &tcp(7777, 443)));
    out.push(eth(0x8847, &m));
    out
}

fn write_pcap(path: &Path, frames: &[Vec<u8>]) {
    let mut d = vec![0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    d.extend_from_slice(&65535u32.to_le_bytes());
    d.extend_from_slice(&1u32.to_le_bytes());
    for (i, f) in frames.iter().enumerate() {
        d.extend_from_slice(&(1_700_000_000u32 + i as u32).to_le_bytes());
        d.extend_from_slice(&0u32.to_le_bytes());
        d.extend_from_slice(&(f.len() as u32).to_le_bytes());
        d.extend_from_slice(&(f.len() as u32).to_le_bytes());
        d.extend_from_slice(f);
    }
    std::fs::write(path, d).unwrap();
}

#[test]
fn flows_through_ah_llc_pppoe_and_mpls_equal_tsharks() {
    let pcap = tmp("encap.pcap");
    write_pcap(&pcap, &frames());
    let csv = tmp("encap.csv");
    let o = Command::new(env!("CARGO_BIN_EXE_linerate"))
        .args(["flows", "-q", "-i", pcap.to_str().unwrap(), "-w"])
        .arg(&csv)
        .args(["--fields", "proto,saddr,sport,daddr,dport"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read_to_string(&csv).unwrap();
    let ours: BTreeSet<String> = text.lines().skip(1).map(str::to_string).collect();
    let want: BTreeSet<String> = [
        "udp,10.1.0.1,1111,10.1.0.2,53",
        "tcp,10.2.0.1,2222,10.2.0.2,80",
        "udp,10.3.0.1,3333,10.3.0.2,4444",
        "udp,10.4.0.1,5555,10.4.0.2,6666",
        "tcp,10.5.0.1,7777,10.5.0.2,443",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    assert_eq!(ours, want, "{text}");

    let Ok(t) = Command::new("tshark")
        .args([
            "-r",
            pcap.to_str().unwrap(),
            "-T",
            "fields",
            "-E",
            "separator=,",
        ])
        .args(["-e", "ip.src", "-e", "tcp.srcport", "-e", "udp.srcport"])
        .args(["-e", "ip.dst", "-e", "tcp.dstport", "-e", "udp.dstport"])
        .output()
    else {
        linerate_test_support::skip("tshark is not installed (apt-get install tshark)");
        return;
    };
    assert!(t.status.success(), "{}", String::from_utf8_lossy(&t.stderr));
    let theirs: BTreeSet<String> = String::from_utf8_lossy(&t.stdout)
        .lines()
        .map(|l| {
            let c: Vec<&str> = l.split(',').collect();
            let proto = if c[1].is_empty() { "udp" } else { "tcp" };
            let sp = if c[1].is_empty() { c[2] } else { c[1] };
            let dp = if c[4].is_empty() { c[5] } else { c[4] };
            format!("{proto},{},{sp},{},{dp}", c[0], c[3])
        })
        .collect();
    assert_eq!(ours, theirs, "linerate vs tshark");
    let _ = std::fs::remove_dir_all(pcap.parent().unwrap());
}

fn ipv6(src: u16, dst: u16, nh: u8, l4: &[u8]) -> Vec<u8> {
    let mut h = vec![0x60, 0, 0, 0];
    h.extend_from_slice(&(l4.len() as u16).to_be_bytes());
    h.extend_from_slice(&[nh, 64]);
    for a in [src, dst] {
        h.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        h.extend_from_slice(&a.to_be_bytes());
    }
    h.extend_from_slice(l4);
    h
}

/// Tunnels: GRE (IPv4 inside), IPIP, 6in4 and VXLAN (Ethernet/IPv4 inside), one outer pair of
/// endpoints for all, two inner flows each.
fn tunnel_frames() -> Vec<Vec<u8>> {
    let (a, b) = ([192, 0, 2, 1], [192, 0, 2, 2]);
    let mut out = Vec::new();
    for k in 0..2u8 {
        let inner = ipv4([10, 6, k, 1], [10, 6, k, 2], 17, &udp(1000 + k as u16, 53));
        let mut gre = vec![0, 0, 0x08, 0x00];
        gre.extend_from_slice(&inner);
        out.push(eth(0x0800, &ipv4(a, b, 47, &gre)));
        let inner = ipv4([10, 7, k, 1], [10, 7, k, 2], 6, &tcp(2000 + k as u16, 80));
        out.push(eth(0x0800, &ipv4(a, b, 4, &inner)));
        let inner = ipv6(0x10 + k as u16, 0x20, 17, &udp(3000 + k as u16, 53));
        out.push(eth(0x0800, &ipv4(a, b, 41, &inner)));
        let inner = eth(
            0x0800,
            &ipv4([10, 8, k, 1], [10, 8, k, 2], 17, &udp(4000, 5000)),
        );
        let mut vx = 4789u16.to_be_bytes().to_vec();
        vx.splice(0..0, [0xc0, 0x01]); // source port 49153
        vx.extend_from_slice(&[0, 0, 0, 0]);
        vx[4..6].copy_from_slice(&((16 + inner.len()) as u16).to_be_bytes());
        vx.extend_from_slice(&[0x08, 0, 0, 0, 0, 0, 0x2a, 0]);
        vx.extend_from_slice(&inner);
        out.push(eth(0x0800, &ipv4(a, b, 17, &vx)));
    }
    out
}

fn flow_rows(pcap: &Path, extra: &[&str]) -> BTreeSet<String> {
    let csv = pcap.with_extension(format!("{}.csv", extra.len()));
    let o = Command::new(env!("CARGO_BIN_EXE_linerate"))
        .args(["flows", "-q", "-i", pcap.to_str().unwrap(), "-w"])
        .arg(&csv)
        .args(["--fields", "proto,saddr,sport,daddr,dport"])
        .args(extra)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read_to_string(&csv).unwrap();
    text.lines().skip(1).map(str::to_string).collect()
}

#[test]
fn tunnels_outer_and_inner_equal_tsharks() {
    let pcap = tmp("tunnels.pcap");
    write_pcap(&pcap, &tunnel_frames());
    // Outer (default): the tunnels between the endpoints, as argus keys them.
    let outer = flow_rows(&pcap, &[]);
    assert_eq!(outer, flow_rows(&pcap, &["--tunnels", "outer"]));
    let want: BTreeSet<String> = [
        "gre,192.0.2.1,,192.0.2.2,",
        "4,192.0.2.1,,192.0.2.2,",
        "41,192.0.2.1,,192.0.2.2,",
        "udp,192.0.2.1,49153,192.0.2.2,4789",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    assert_eq!(outer, want);
    // Inner: the packets inside, as tshark's last ip.src/ipv6.src and ports show them.
    let inner = flow_rows(&pcap, &["--tunnels", "inner"]);
    assert_eq!(inner.len(), 8, "{inner:?}");
    let Ok(t) = Command::new("tshark")
        .args([
            "-r",
            pcap.to_str().unwrap(),
            "-T",
            "fields",
            "-E",
            "separator=,",
        ])
        .args(["-E", "occurrence=l", "-e", "ip.src", "-e", "ipv6.src"])
        .args(["-e", "tcp.srcport", "-e", "udp.srcport"])
        .args([
            "-e",
            "ip.dst",
            "-e",
            "ipv6.dst",
            "-e",
            "tcp.dstport",
            "-e",
            "udp.dstport",
        ])
        .output()
    else {
        linerate_test_support::skip("tshark is not installed (apt-get install tshark)");
        return;
    };
    assert!(t.status.success(), "{}", String::from_utf8_lossy(&t.stderr));
    let theirs: BTreeSet<String> = String::from_utf8_lossy(&t.stdout)
        .lines()
        .map(|l| {
            let c: Vec<&str> = l.split(',').collect();
            let v6 = !c[1].is_empty();
            let tcp = !c[2].is_empty();
            let proto = if tcp { "tcp" } else { "udp" };
            let (src, dst) = if v6 { (c[1], c[5]) } else { (c[0], c[4]) };
            let sp = if tcp { c[2] } else { c[3] };
            let dp = if tcp { c[6] } else { c[7] };
            format!("{proto},{src},{sp},{dst},{dp}")
        })
        .collect();
    assert_eq!(inner, theirs, "linerate --tunnels inner vs tshark");
    let _ = std::fs::remove_dir_all(pcap.parent().unwrap());
}

/// A tunnel whose inner IP header is cut short or malformed keeps its outer key with
/// `--tunnels inner` (docs/flows.md; argus keys such packets by the outer header too): no packet
/// is lost to `not_flow`.
#[test]
fn tunnels_inner_with_a_bad_inner_header_keeps_the_outer_key() {
    let (a, b) = ([192, 0, 2, 1], [192, 0, 2, 2]);
    let whole = ipv4([10, 6, 0, 1], [10, 6, 0, 2], 17, &udp(1000, 53));
    // GRE with the record cut 10 bytes into the inner IPv4 header.
    let mut gre = vec![0, 0, 0x08, 0x00];
    gre.extend_from_slice(&whole);
    let mut f1 = eth(0x0800, &ipv4(a, b, 47, &gre));
    f1.truncate(14 + 20 + 4 + 10);
    // IPIP whose inner header length (IHL 3) is smaller than an IPv4 header.
    let mut bad = whole.clone();
    bad[0] = 0x43;
    let f2 = eth(0x0800, &ipv4(a, b, 4, &bad));
    // VXLAN whose inner Ethernet frame holds 10 bytes of IPv4 header.
    let mut vx = vec![0xc0, 0x01, 0x12, 0xb5, 0, 40, 0, 0];
    vx.extend_from_slice(&[0x08, 0, 0, 0, 0, 0, 0x2a, 0]);
    let mut inner = vec![2, 0, 0, 0, 0, 4, 2, 0, 0, 0, 0, 3, 0x08, 0x00];
    inner.extend_from_slice(&whole[..10]);
    vx.extend_from_slice(&inner);
    let f3 = eth(0x0800, &ipv4(a, b, 17, &vx));
    let pcap = tmp("tunnels-bad-inner.pcap");
    write_pcap(&pcap, &[f1, f2, f3]);
    let want: BTreeSet<String> = [
        "gre,192.0.2.1,,192.0.2.2,",
        "4,192.0.2.1,,192.0.2.2,",
        "udp,192.0.2.1,49153,192.0.2.2,4789",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    assert_eq!(flow_rows(&pcap, &["--tunnels", "inner"]), want);
    let o = Command::new(env!("CARGO_BIN_EXE_linerate"))
        .args([
            "flows",
            "--json",
            "--tunnels",
            "inner",
            "-w",
            "/dev/null",
            "-i",
        ])
        .arg(&pcap)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    let summary: serde_json::Value = err
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .find(|v: &serde_json::Value| v["type"] == "summary")
        .expect("summary");
    assert_eq!(summary["flow_packets"], 3, "{err}");
    let _ = std::fs::remove_dir_all(pcap.parent().unwrap());
}

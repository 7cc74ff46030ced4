//! Jumbo frames from `gen`: `--size` up to 9022 (a 9000-byte IP packet with an 802.1Q tag's
//! room, with the CRC) gives frames whose bytes are exactly the template's (checked against
//! frames built here, by hand, with their checksums), standard sizes stay the same bytes, a
//! size past the range is a usage error, and on an interface the frames arrive whole when its
//! MTU allows them and are refused before sending when it does not. The veth test needs root
//! (skips otherwise, fails under LINERATE_REQUIRE_PRIV=1).
#![deny(unsafe_code)]

use linerate_test_support::netns::{self, NetnsPair, Side};
use std::process::Command;

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_linerate")
}

fn csum(data: &[u8], mut sum: u32) -> u16 {
    for c in data.chunks(2) {
        sum += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// The frame gen's default template makes at `len` bytes without the CRC (no probe): from
/// 02:00:00:00:00:01 / 198.18.0.1:1024 to 02:00:00:00:00:02 / 198.18.0.2:9, TTL 64, DF, a
/// zero payload.
fn expected(len: usize) -> Vec<u8> {
    let mut f = vec![0u8; len];
    f[..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    let ip_len = (len - 14) as u16;
    let ip = &mut f[14..34];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&ip_len.to_be_bytes());
    ip[6] = 0x40;
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&[198, 18, 0, 1]);
    ip[16..20].copy_from_slice(&[198, 18, 0, 2]);
    let c = csum(ip, 0);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    let udp_len = ip_len - 20;
    f[34..36].copy_from_slice(&1024u16.to_be_bytes());
    f[36..38].copy_from_slice(&9u16.to_be_bytes());
    f[38..40].copy_from_slice(&udp_len.to_be_bytes());
    let pseudo: u32 = [0xc612u32, 0x0001, 0xc612, 0x0002, 17, u32::from(udp_len)]
        .iter()
        .sum();
    let mut c = csum(&f[34..], pseudo);
    if c == 0 {
        c = 0xffff;
    }
    f[40..42].copy_from_slice(&c.to_be_bytes());
    f
}

/// The records of a classic pcap file.
fn records(path: &std::path::Path) -> Vec<Vec<u8>> {
    let b = std::fs::read(path).unwrap();
    assert_eq!(&b[..4], &[0xd4, 0xc3, 0xb2, 0xa1], "{path:?}: not a pcap");
    let mut o = 24;
    let mut r = Vec::new();
    while o + 16 <= b.len() {
        let incl = u32::from_le_bytes(b[o + 8..o + 12].try_into().unwrap()) as usize;
        let orig = u32::from_le_bytes(b[o + 12..o + 16].try_into().unwrap()) as usize;
        assert_eq!(incl, orig, "a record cut short");
        r.push(b[o + 16..o + 16 + incl].to_vec());
        o += 16 + incl;
    }
    r
}

fn tmp(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("linerate-gen-jumbo-{}-{name}", std::process::id()))
}

#[test]
fn jumbo_sizes_give_the_templates_frames_whole_and_standard_sizes_are_unchanged() {
    for (size, len) in [
        (9018, 9014),
        (9022, 9018),
        (64, 60),
        (1518, 1514),
        (4000, 3996),
    ] {
        let path = tmp(&format!("{size}.pcap"));
        let o = Command::new(bin())
            .args([
                "gen",
                "--size",
                &size.to_string(),
                "--no-probe",
                "-c",
                "5",
                "-q",
            ])
            .arg("-o")
            .arg(&path)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "--size {size}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let r = records(&path);
        let _ = std::fs::remove_file(&path);
        assert_eq!(r.len(), 5, "--size {size}");
        let want = expected(len);
        for f in &r {
            assert_eq!(f.len(), len, "--size {size}");
            assert!(
                f == &want,
                "--size {size}: the frame differs from the template's"
            );
        }
    }
    // Past the range: a usage error naming the flag and the range.
    for size in ["9023", "64-9100"] {
        let path = tmp("bad.pcap");
        let o = Command::new(bin())
            .args(["gen", "--size", size, "-c", "1", "-q"])
            .arg("-o")
            .arg(&path)
            .output()
            .unwrap();
        let _ = std::fs::remove_file(&path);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{size}: {err}");
        assert!(err.contains("--size") && err.contains("64..=9022"), "{err}");
    }
}

#[test]
fn jumbo_frames_leave_whole_on_an_interface_whose_mtu_allows_them() {
    if !netns::require_priv() {
        return;
    }
    let p = NetnsPair::new().expect("namespaces");
    p.no_ipv6().unwrap();
    let gen = |size: &str| {
        Command::new("ip")
            .args(["netns", "exec", &p.a, bin(), "gen", "-o", "afpacket:vA"])
            .args([
                "--size",
                size,
                "--no-probe",
                "-c",
                "200",
                "--rate",
                "20kpps",
            ])
            .args(["--json", "-q"])
            .output()
            .unwrap()
    };
    // MTU 1500: a 9018-byte frame cannot leave; refused before sending, with the limit.
    let o = gen("9018");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--size") && err.contains("at most 1518 B with the CRC"),
        "{err}"
    );
    for (side, ifname) in [(Side::A, &p.if_a), (Side::B, &p.if_b)] {
        p.ip_in(side, &["link", "set", ifname, "mtu", "9000"])
            .unwrap();
    }
    let rx_before = rx_counts(&p);
    let o = gen("9018");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let (pk, by) = rx_counts(&p);
    // The far end received the 200 frames whole (ARP or the like aside).
    let (pk, by) = (pk - rx_before.0, by - rx_before.1);
    assert!((200..=205).contains(&pk), "{pk} packets: {out}");
    assert!(by >= 200 * 9014, "{by} bytes for {pk} packets: {out}");
}

/// vB's received packets and bytes (the kernel's counters).
fn rx_counts(p: &NetnsPair) -> (u64, u64) {
    let s = |f: &str| -> u64 {
        let o = Command::new("ip")
            .args(["netns", "exec", &p.b, "cat"])
            .arg(format!("/sys/class/net/vB/statistics/{f}"))
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).trim().parse().unwrap()
    };
    (s("rx_packets"), s("rx_bytes"))
}

//! `linerate gen` as fast as possible on an `afpacket:` port and on an `xdp:` port with the xsk
//! engine builds its packets straight into the port's transmit frames (the TX ring's frames,
//! the UMEM's frames); a pcap file gets them built in pool frames. The frames tcpdump captures
//! on the veth's other end are the file's, byte for byte and in order: several streams, an
//! 802.1Q tag, random and incremented fields, size ranges and IMIX, and a stream with nothing
//! varied (sent as one prebuilt frame).
//!
//! Needs root and tcpdump (skips otherwise; under LINERATE_REQUIRE_PRIV=1 a skip fails).
#![deny(unsafe_code)]

use linerate_test_support::netns;

use netns::{NetnsPair, Side};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_linerate");
/// Frames of each sending.
const N: usize = 1500;

/// The records of a pcap file (microsecond or nanosecond, little-endian as written here).
fn records(path: &Path) -> Vec<Vec<u8>> {
    let d = std::fs::read(path).unwrap_or_default();
    let mut out = Vec::new();
    let mut off = 24;
    while off + 16 <= d.len() {
        let incl = u32::from_le_bytes(d[off + 8..off + 12].try_into().unwrap()) as usize;
        let Some(r) = d.get(off + 16..off + 16 + incl) else {
            break;
        };
        out.push(r.to_vec());
        off += 16 + incl;
    }
    out
}

struct Tmp(PathBuf);

impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A child killed (by its PID) when dropped.
struct Kid(Child);

impl Drop for Kid {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn mac(m: &[u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// gen's flags of each case (to a MAC that is not vB's: the stack there ignores them).
fn cases(src_mac: &str) -> Vec<(&'static str, Vec<String>)> {
    let common = |v: &[&str]| {
        let mut a: Vec<String> = [
            "--src-mac",
            src_mac,
            "--dst-mac",
            "02:00:00:00:00:02",
            "--no-probe",
            "--seed",
            "7",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        a.extend(v.iter().map(|s| s.to_string()));
        a
    };
    vec![
        (
            "streams, tag, random fields, size range",
            common(&[
                "--streams",
                "3",
                "--vlan",
                "10",
                "--src-ip",
                "random:10.0.0.1-10.0.3.250",
                "--dst-ip",
                "198.18.0.2",
                "--dport",
                "1000-1100",
                "--sport",
                "random:1-65535",
                "--size",
                "64-1518",
            ]),
        ),
        (
            "streams of their own, IMIX, TCP, QinQ",
            common(&[
                "--src-ip",
                "198.18.0.1",
                "--dst-ip",
                "198.18.0.2",
                "--stream",
                "size=imix,dport=9",
                "--stream",
                "size=128,proto=tcp,vlan=20,sport=random:1-65535",
                "--stream",
                "size=200-300,vlan=30,dst-ip=198.18.1.1-198.18.1.9",
            ]),
        ),
        (
            "nothing varied",
            common(&[
                "--src-ip",
                "198.18.0.1",
                "--dst-ip",
                "198.18.0.2",
                "--size",
                "64",
            ]),
        ),
    ]
}

/// Runs tcpdump on vB (ready once it listens), then gen on vA with `out` and `args`, and
/// returns the frames captured.
fn capture(p: &NetnsPair, dir: &Path, tag: &str, out: &[&str], args: &[String]) -> Vec<Vec<u8>> {
    let cap = dir.join(format!("{tag}.pcap"));
    let filter = format!("ether src {}", mac(&p.mac_a));
    let mut c = Command::new("ip")
        .args(["netns", "exec", p.ns(Side::B), "tcpdump", "-i", "vB", "-U"])
        .args(["-B", "32768", "-s", "0", "-c", &N.to_string(), "-w"])
        .arg(&cap)
        .arg(&filter)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tcpdump");
    let mut err = c.stderr.take().unwrap();
    let kid = Kid(c);
    let mut line = Vec::new();
    let mut b = [0u8; 1];
    while err.read(&mut b).unwrap_or(0) == 1 && b[0] != b'\n' {
        line.push(b[0]);
    }
    let line = String::from_utf8_lossy(&line).into_owned();
    assert!(line.contains("listening"), "tcpdump: {line}");
    std::thread::spawn(move || {
        let mut rest = Vec::new();
        let _ = err.read_to_end(&mut rest);
    });
    let g = Command::new("ip")
        .args(["netns", "exec", p.ns(Side::A), BIN, "gen"])
        .args(out)
        .args(["-c", &N.to_string(), "-q"])
        .args(args)
        .output()
        .expect("run gen");
    assert!(
        g.status.success(),
        "gen {out:?} {args:?}: {}",
        String::from_utf8_lossy(&g.stderr)
    );
    let mut kid = kid;
    let t0 = Instant::now();
    while kid.0.try_wait().unwrap().is_none() && t0.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(kid);
    records(&cap)
}

#[test]
fn frames_built_in_the_tx_frames_equal_the_pool_built_ones() {
    if !netns::require_priv() {
        return;
    }
    if Command::new("tcpdump").arg("--version").output().is_err() {
        linerate_test_support::skip("tcpdump is not installed (apt-get install tcpdump)");
        return;
    }
    let p = NetnsPair::new().expect("netns pair");
    // The namespaces' own IPv6 traffic (MLD reports, router solicitations) would land in the
    // capture beside gen's frames.
    p.no_ipv6().expect("no IPv6 in the namespaces");
    let dir = Tmp(std::env::temp_dir().join(format!("lr-gen-inplace-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).unwrap();
    for (i, (what, args)) in cases(&mac(&p.mac_a)).into_iter().enumerate() {
        let file = dir.0.join(format!("ref{i}.pcap"));
        let g = Command::new(BIN)
            .args(["gen", "-o"])
            .arg(format!("pcap:{}", file.display()))
            .args(["-c", &N.to_string(), "-q"])
            .args(&args)
            .output()
            .expect("run gen -o pcap:");
        assert!(
            g.status.success(),
            "gen -o pcap: {}",
            String::from_utf8_lossy(&g.stderr)
        );
        let want = records(&file);
        assert_eq!(want.len(), N, "{what}: the file");
        let outs: [(&str, Vec<&str>); 2] = [
            ("afpacket", vec!["-o", "afpacket:vA"]),
            ("xsk", vec!["-o", "xdp:vA", "--engine", "xsk"]),
        ];
        for (name, out) in outs {
            let got = capture(&p, &dir.0, &format!("{name}{i}"), &out, &args);
            assert_eq!(got.len(), N, "{what}, {name}: frames captured");
            for (k, (a, b)) in want.iter().zip(&got).enumerate() {
                assert_eq!(a, b, "{what}, {name}: frame {k} differs");
            }
        }
    }
}

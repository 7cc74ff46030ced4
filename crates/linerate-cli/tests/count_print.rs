//! `linerate count -v` / `-e` against tcpdump -n / -n -e: the same line for every packet of
//! examples/sample.pcap and of crafted frames (TCP with options and relative sequence numbers,
//! HTTP, ICMP and ICMPv6 echo, ARP reply, IPv6 TCP, 802.1Q, QinQ, an unknown ethertype). Both
//! run with the same TZ (UTC, and one other zone for the local time); nothing else is normalised.
//!
//! Without tcpdump the test prints why and passes, unless LINERATE_REQUIRE_PRIV=1 (CI installs
//! tcpdump with scripts/setup.sh --tests).
#![deny(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

fn sample() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/sample.pcap")
}

fn have_tcpdump() -> bool {
    let ok = Command::new("tcpdump")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        linerate_test_support::skip("tcpdump not installed (apt-get install tcpdump)");
    }
    ok
}

fn tcpdump(file: &Path, extra: &[&str], tz: &str) -> String {
    let o = Command::new("tcpdump")
        .arg("-n")
        .args(extra)
        .arg("-r")
        .arg(file)
        .env("TZ", tz)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap()
}

fn ours(file: &Path, extra: &[&str], tz: &str) -> (String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_linerate"))
        .args(["count", "--no-console", "-i"])
        .arg(file)
        .args(extra)
        .env("TZ", tz)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    (
        String::from_utf8_lossy(&o.stdout).into(),
        String::from_utf8_lossy(&o.stderr).into(),
    )
}

fn same(file: &Path, ours_flags: &[&str], tcpdump_flags: &[&str], tz: &str) -> usize {
    let want = tcpdump(file, tcpdump_flags, tz);
    let (got, err) = ours(file, ours_flags, tz);
    let (w, g): (Vec<&str>, Vec<&str>) = (want.lines().collect(), got.lines().collect());
    for (i, (a, b)) in w.iter().zip(&g).enumerate() {
        assert_eq!(a, b, "{}: line {} of {ours_flags:?}", file.display(), i + 1);
    }
    assert_eq!(w.len(), g.len(), "{}: {ours_flags:?}", file.display());
    // The statistics went to standard error.
    assert!(err.contains("Summary:"), "{err}");
    // Packets: hex dump lines (tab first) belong to the line before.
    g.iter().filter(|l| !l.starts_with('\t')).count()
}

#[test]
fn sample_lines_equal_tcpdump() {
    if !have_tcpdump() {
        return;
    }
    let s = sample();
    assert_eq!(same(&s, &["-v"], &[], "UTC"), 2000);
    assert_eq!(same(&s, &["-e"], &["-e"], "UTC"), 2000);
    assert_eq!(same(&s, &["-v", "-e"], &["-e"], "Asia/Kolkata"), 2000);
    assert_eq!(same(&s, &["-v", "--tt"], &["-tt"], "UTC"), 2000);
    // After the filter, as tcpdump's expression.
    assert_eq!(
        same(&s, &["-v", "-f", "tcp or arp"], &["tcp or arp"], "UTC"),
        400
    );
}

/// A classic pcap file of Ethernet frames, one millisecond apart.
fn pcap(path: &Path, frames: &[Vec<u8>]) {
    let mut b = Vec::new();
    b.extend_from_slice(&0xa1b2c3d4u32.to_le_bytes());
    b.extend_from_slice(&2u16.to_le_bytes());
    b.extend_from_slice(&4u16.to_le_bytes());
    for w in [0u32, 0, 65535, 1] {
        b.extend_from_slice(&w.to_le_bytes());
    }
    for (i, f) in frames.iter().enumerate() {
        let ts = [1_700_000_000u32, 1000 * i as u32];
        for w in ts {
            b.extend_from_slice(&w.to_le_bytes());
        }
        let len = (f.len() as u32).to_le_bytes();
        b.extend_from_slice(&len);
        b.extend_from_slice(&len);
        b.extend_from_slice(f);
    }
    std::fs::write(path, b).unwrap();
}

const A: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0a];
const B: [u8; 6] = [0x3c, 0xfd, 0xfe, 0x12, 0x34, 0x56];

fn eth(dst: [u8; 6], src: [u8; 6], tags: &[(u16, u16)], ty: u16, p: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    for (tpid, tci) in tags {
        f.extend_from_slice(&tpid.to_be_bytes());
        f.extend_from_slice(&tci.to_be_bytes());
    }
    f.extend_from_slice(&ty.to_be_bytes());
    f.extend_from_slice(p);
    while f.len() < 60 {
        f.push(0);
    }
    f
}

fn ip4(src: [u8; 4], dst: [u8; 4], proto: u8, p: &[u8]) -> Vec<u8> {
    let len = (20 + p.len()) as u16;
    let mut h = vec![0x45, 0];
    h.extend_from_slice(&len.to_be_bytes());
    h.extend_from_slice(&[0x12, 0x34, 0x40, 0, 64, proto, 0, 0]);
    h.extend_from_slice(&src);
    h.extend_from_slice(&dst);
    h.extend_from_slice(p);
    h
}

fn ip6(src: u8, dst: u8, next: u8, p: &[u8]) -> Vec<u8> {
    let mut h = vec![0x60, 0, 0, 0];
    h.extend_from_slice(&(p.len() as u16).to_be_bytes());
    h.extend_from_slice(&[next, 64]);
    for last in [src, dst] {
        h.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
        h.extend_from_slice(&[0; 11]);
        h.push(last);
    }
    h.extend_from_slice(p);
    h
}

#[allow(clippy::too_many_arguments)]
fn tcp(sp: u16, dp: u16, seq: u32, ack: u32, flags: u8, opts: &[u8], data: &[u8]) -> Vec<u8> {
    let mut h = Vec::new();
    h.extend_from_slice(&sp.to_be_bytes());
    h.extend_from_slice(&dp.to_be_bytes());
    h.extend_from_slice(&seq.to_be_bytes());
    h.extend_from_slice(&ack.to_be_bytes());
    h.push((((20 + opts.len()) / 4) as u8) << 4);
    h.push(flags);
    h.extend_from_slice(&[0xfa, 0xf0, 0, 0, 0, 0]);
    h.extend_from_slice(opts);
    h.extend_from_slice(data);
    h
}

fn udp(sp: u16, dp: u16, data: &[u8]) -> Vec<u8> {
    let mut h = Vec::new();
    h.extend_from_slice(&sp.to_be_bytes());
    h.extend_from_slice(&dp.to_be_bytes());
    h.extend_from_slice(&((8 + data.len()) as u16).to_be_bytes());
    h.extend_from_slice(&[0, 0]);
    h.extend_from_slice(data);
    h
}

fn crafted() -> Vec<Vec<u8>> {
    let (c, s) = ([10, 1, 2, 3], [192, 168, 7, 9]);
    let syn_opts = [
        2, 4, 5, 0xb4, 4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0, 1, 3, 3, 7,
    ];
    let ts_opts = [1, 1, 8, 10, 0, 0, 0, 2, 0, 0, 0, 9];
    let get = b"GET /index.html HTTP/1.1\r\nHost: x\r\n\r\n";
    let ok = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
    let v4 = |p: Vec<u8>| eth(B, A, &[], 0x0800, &p);
    let mut arp_reply = vec![0, 1, 8, 0, 6, 4, 0, 2];
    arp_reply.extend_from_slice(&B);
    arp_reply.extend_from_slice(&s);
    arp_reply.extend_from_slice(&A);
    arp_reply.extend_from_slice(&c);
    let echo = |ty: u8| {
        let mut e = vec![ty, 0, 0, 0, 0x12, 0x34, 0, 7];
        e.extend_from_slice(&[0x61; 32]);
        e
    };
    let mut later_fragment = ip4(c, s, 17, &[7; 24]);
    later_fragment[6..8].copy_from_slice(&[0, 3]);
    let quoted = ip4(s, [10, 9, 9, 9], 17, &udp(1234, 9, &[]));
    let mut unreachable = vec![3, 3, 0, 0, 0, 0, 0, 0];
    unreachable.extend_from_slice(&quoted);
    let mut exceeded = vec![11, 0, 0, 0, 0, 0, 0, 0];
    exceeded.extend_from_slice(&quoted);
    vec![
        // Fallbacks tcpdump prints the same way: an ethertype it does not know (hex dump), an
        // IP protocol it does not know, a later fragment, a cut TCP header, a bad UDP length.
        eth(B, A, &[], 0x1234, b"abcdefghabcdefghabcdefgh"),
        v4(ip4(c, s, 253, &[0x7a; 20])),
        v4(later_fragment),
        v4(ip4(c, s, 6, &[0, 80, 0, 80, 0, 80])),
        v4(ip4(c, s, 17, &[0x14, 0xe9, 0x14, 0xe9, 0, 3, 0, 0])),
        v4(ip4(c, s, 1, &unreachable)),
        v4(ip4(c, s, 1, &exceeded)),
        v4(ip4(
            c,
            s,
            6,
            &tcp(40000, 80, 1_000_000, 0, 0x02, &syn_opts, &[]),
        )),
        v4(ip4(
            s,
            c,
            6,
            &tcp(80, 40000, 7_777_777, 1_000_001, 0x12, &syn_opts, &[]),
        )),
        v4(ip4(
            c,
            s,
            6,
            &tcp(40000, 80, 1_000_001, 7_777_778, 0x10, &ts_opts, &[]),
        )),
        v4(ip4(
            c,
            s,
            6,
            &tcp(40000, 80, 1_000_001, 7_777_778, 0x18, &ts_opts, get),
        )),
        v4(ip4(
            s,
            c,
            6,
            &tcp(
                80,
                40000,
                7_777_778,
                1_000_001 + get.len() as u32,
                0x18,
                &ts_opts,
                ok,
            ),
        )),
        v4(ip4(
            c,
            s,
            6,
            &tcp(
                40000,
                80,
                1_000_001 + get.len() as u32,
                7_777_778 + ok.len() as u32,
                0x11,
                &[],
                &[],
            ),
        )),
        v4(ip4(s, c, 6, &tcp(80, 40000, 5, 0, 0x04, &[], &[]))),
        v4(ip4(c, s, 1, &echo(8))),
        v4(ip4(s, c, 1, &echo(0))),
        v4(ip4(c, s, 17, &udp(33333, 44444, &[1; 100]))),
        eth(A, B, &[], 0x0806, &arp_reply),
        eth(B, A, &[], 0x86dd, &ip6(1, 2, 58, &echo(128))),
        eth(A, B, &[], 0x86dd, &ip6(2, 1, 58, &echo(129))),
        eth(
            B,
            A,
            &[],
            0x86dd,
            &ip6(1, 2, 6, &tcp(5555, 6666, 42, 0, 0x02, &[], &[])),
        ),
        eth(
            B,
            A,
            &[(0x8100, 0x2005)],
            0x0800,
            &ip4(c, s, 17, &udp(1111, 2222, &[0; 3])),
        ),
        eth(
            B,
            A,
            &[(0x88a8, 100), (0x8100, 0xe00c)],
            0x86dd,
            &ip6(3, 4, 17, &udp(7, 1234, &[9; 20])),
        ),
    ]
}

#[test]
fn crafted_frames_equal_tcpdump() {
    if !have_tcpdump() {
        return;
    }
    let path = std::env::temp_dir().join(format!("linerate-print-{}.pcap", std::process::id()));
    pcap(&path, &crafted());
    let n = crafted().len();
    assert_eq!(same(&path, &["-v"], &[], "UTC"), n);
    assert_eq!(same(&path, &["-e"], &["-e"], "UTC"), n);
    if std::env::var_os("KEEP").is_none() {
        let _ = std::fs::remove_file(&path);
    }
}

/// What tcpdump prints for an 802.3 frame too short for its LLC header (` [|llc]`, the length
/// the wire has after the header), and for a raw IP link with -e (`ip: ` then the line without
/// `IP `).
#[test]
fn short_llc_and_raw_ip_with_e_equal_tcpdump() {
    if !have_tcpdump() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("linerate-print-llc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // 802.3, length field 41, two bytes of LLC captured and on the wire.
    let mut llc = B.to_vec();
    llc.extend_from_slice(&A);
    llc.extend_from_slice(&[0, 41, 0xaa, 0xaa]);
    let path = dir.join("llc.pcap");
    pcap(&path, &[llc]);
    assert_eq!(same(&path, &["-v"], &[], "UTC"), 1);
    assert_eq!(same(&path, &["-e"], &["-e"], "UTC"), 1);
    // A raw IPv4 link (LINKTYPE_RAW 101).
    let raw = ip4([10, 0, 0, 1], [10, 0, 0, 2], 17, &udp(1111, 2222, &[0; 5]));
    let mut b = Vec::new();
    for w in [0xa1b2c3d4u32, 0x0004_0002, 0, 0, 65535, 101] {
        b.extend_from_slice(&w.to_le_bytes());
    }
    for w in [1_700_000_000u32, 0, raw.len() as u32, raw.len() as u32] {
        b.extend_from_slice(&w.to_le_bytes());
    }
    b.extend_from_slice(&raw);
    let path = dir.join("raw.pcap");
    std::fs::write(&path, b).unwrap();
    assert_eq!(same(&path, &["-v"], &[], "UTC"), 1);
    assert_eq!(same(&path, &["-e"], &["-e"], "UTC"), 1);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `-w -` holds standard output: the lines go to standard error with the statistics.
#[test]
fn lines_go_to_stderr_when_stdout_holds_the_pcap() {
    let (out, err) = ours(&sample(), &["-v", "-c", "3", "-w", "-"], "UTC");
    // The pcap stream: 24 bytes of header and 3 records.
    assert!(out.len() > 24 + 3 * 16, "{out}");
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("22:13:20.")).collect();
    assert_eq!(lines.len(), 3, "{err}");
    assert_eq!(
        lines[0],
        "22:13:20.000000 IP 10.0.0.1.1024 > 192.0.2.1.4000: UDP, length 18"
    );
}

/// Whole files of the tcpdump test corpus that print the same, with and without -e: Ethernet,
/// QinQ, BSD loopback (NULL), Linux cooked links (no link address: `Out ethertype`); every TCP flag, a cut TCP header, HTTP, ICMP, ICMPv6.
#[test]
fn corpus_files_equal_tcpdump() {
    if !have_tcpdump() {
        return;
    }
    for name in [
        "quic_vn.pcap",
        "tcp_rst_diag_payload.pcap",
        "bfd-sbfd.pcap",
        "print-flags.pcap",
        "802.1ad_QinQ.pcap",
        "icmp-rfc8335.pcap",
        "tcp_eight_lowest_weight_flags_set.pcap",
        "tcp_header_heapoverflow.pcap",
        "ipv4_tcp_http_xml.pcap",
        "icmpv6-ra-pref64.pcap",
        "tcp-handshake-nano.pcap",
    ] {
        let p = linerate_test_support::corpus_dir().join(name);
        if !p.is_file() {
            linerate_test_support::skip(&format!(
                "{name} is not in the corpus (set LINERATE_CORPUS)"
            ));
            continue;
        }
        assert!(same(&p, &["-v"], &[], "UTC") > 0, "{name}");
        assert!(same(&p, &["-e"], &["-e"], "UTC") > 0, "{name}");
    }
}

/// -v prints packets in the order they are read: asking for several threads is refused (exit 2)
/// before any output.
#[test]
fn verbose_with_threads_is_a_usage_error() {
    let o = Command::new(env!("CARGO_BIN_EXE_linerate"))
        .args(["count", "-v", "-T", "2", "-i"])
        .arg(sample())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(o.stdout.is_empty());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("drop -v/-e"), "{e}");
}

/// A live port: `count -v -i afpacket:lo` prints the datagrams sent to a port of 127.0.0.1 as
/// tcpdump does (the filter keeps the test's own), then the count ends it. Needs root.
#[test]
fn live_lines_on_loopback() {
    use std::io::{BufRead, BufReader, Read};
    if !linerate_test_support::netns::require_priv() {
        return;
    }
    let port = 20_000 + (std::process::id() % 20_000) as u16;
    let mut child = Command::new(env!("CARGO_BIN_EXE_linerate"))
        .args([
            "count",
            "-v",
            "--no-console",
            "-i",
            "afpacket:lo",
            "-c",
            "3",
            "-t",
            "10",
        ])
        .args(["-f", &format!("udp dst port {port}")])
        .env("TZ", "UTC")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut first = String::new();
    err.read_line(&mut first).unwrap();
    assert!(first.starts_with("Capturing from afpacket:lo"), "{first}");
    let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let from = s.local_addr().unwrap().port();
    for n in [10usize, 11, 12] {
        s.send_to(&vec![0x55; n], ("127.0.0.1", port)).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let status = child.wait().unwrap();
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    let mut rest = String::new();
    err.read_to_string(&mut rest).unwrap();
    assert!(status.success(), "{rest}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    for (l, n) in lines.iter().zip([10, 11, 12]) {
        // HH:MM:SS.ffffff, then tcpdump's line.
        let b = l.as_bytes();
        assert!(
            b.len() > 15 && b[2] == b':' && b[5] == b':' && b[8] == b'.',
            "{l}"
        );
        assert_eq!(
            &l[15..],
            format!(" IP 127.0.0.1.{from} > 127.0.0.1.{port}: UDP, length {n}"),
            "{out}"
        );
    }
    assert!(rest.contains("Summary: 3 pkts"), "{rest}");
}

//! `linerate gen --pcap` as tcpreplay/tcprewrite users work: its own rate (the scheduled
//! times written), rewrites seen by tcpdump -e and tshark, raw-IP and cooked captures replayed
//! onto Ethernet, filters on those captures against tcpdump -r, and refusals.
#![deny(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_linerate")
}

fn sample() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/sample.pcap")
}

fn run(args: &[&str]) -> Output {
    Command::new(bin())
        .args(args)
        .output()
        .expect("run linerate")
}

fn ok(o: &Output) -> String {
    assert!(
        o.status.success(),
        "exit {:?}: {}{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn summary(out: &str) -> serde_json::Value {
    out.lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("json"))
        .find(|j| j["type"] == "summary")
        .unwrap_or_else(|| panic!("no summary in {out}"))
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("linerate-gen-replay-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A classic pcap's records: (ts ns, captured bytes, wire length), and its link type.
fn read_pcap(p: &Path) -> (u32, Vec<(u64, Vec<u8>, u32)>) {
    let d = std::fs::read(p).unwrap();
    let magic = u32::from_le_bytes(d[0..4].try_into().unwrap());
    assert!(
        magic == 0xa1b2c3d4 || magic == 0xa1b23c4d,
        "little-endian pcap"
    );
    let nanos = magic == 0xa1b23c4d;
    let rd = |o: usize| u32::from_le_bytes(d[o..o + 4].try_into().unwrap());
    let link = rd(20);
    let (mut v, mut o) = (Vec::new(), 24);
    while o + 16 <= d.len() {
        let (sec, frac, cl, wl) = (rd(o), rd(o + 4), rd(o + 8) as usize, rd(o + 12));
        let ts = u64::from(sec) * 1_000_000_000 + u64::from(frac) * if nanos { 1 } else { 1000 };
        v.push((ts, d[o + 16..o + 16 + cl].to_vec(), wl));
        o += 16 + cl;
    }
    (link, v)
}

fn write_pcap(p: &Path, link: u32, recs: &[(u64, Vec<u8>, u32)]) {
    let mut v = Vec::new();
    v.extend(0xa1b2c3d4u32.to_le_bytes());
    v.extend([2, 0, 4, 0]);
    v.extend([0u8; 8]);
    v.extend(65535u32.to_le_bytes());
    v.extend(link.to_le_bytes());
    for (ts, data, wl) in recs {
        v.extend(((ts / 1_000_000_000) as u32).to_le_bytes());
        v.extend(((ts % 1_000_000_000 / 1000) as u32).to_le_bytes());
        v.extend((data.len() as u32).to_le_bytes());
        v.extend(wl.to_le_bytes());
        v.extend(data);
    }
    std::fs::write(p, v).unwrap();
}

/// The IP packets of examples/sample.pcap as a capture of link type `link`: raw IP (101, 12,
/// 228/229 not used here), Linux cooked v1 (113) or v2 (276).
fn ip_capture(name: &str, link: u32) -> PathBuf {
    let (_, recs) = read_pcap(&sample());
    let mut out = Vec::new();
    for (ts, d, wl) in recs {
        // Past 802.1Q tags: cooked and raw captures have none.
        let mut at = 12;
        while d[at..at + 2] == [0x81, 0x00] {
            at += 4;
        }
        let et = [d[at], d[at + 1]];
        if et != [0x08, 0x00] && et != [0x86, 0xdd] {
            continue;
        }
        let ip = &d[at + 2..];
        let wl = wl - (at as u32 - 12);
        let mut f = match link {
            113 => {
                let mut h = vec![0, 0, 0, 1, 0, 6];
                h.extend(&d[6..12]);
                h.extend([0, 0]);
                h.extend(et);
                h
            }
            276 => {
                let mut h = et.to_vec();
                h.extend([0, 0, 0, 0, 0, 2, 0, 1, 0, 6]);
                h.extend(&d[6..12]);
                h.extend([0, 0]);
                h
            }
            _ => Vec::new(),
        };
        let hl = f.len() as u32;
        f.extend(ip);
        out.push((ts, f, wl - 14 + hl));
    }
    let p = tmp(name);
    write_pcap(&p, link, &out);
    p
}

fn tcpdump_count(file: &Path, expr: &str) -> usize {
    let o = Command::new("tcpdump")
        .args(["-n", "-r", s(file), expr])
        .output()
        .expect("tcpdump is installed by scripts/setup.sh --tests");
    assert!(
        o.status.success(),
        "tcpdump {expr}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).lines().count()
}

fn tshark_fields(path: &Path, filter: &str, fields: &[&str]) -> Vec<String> {
    let mut c = Command::new("tshark");
    c.args(["-r", s(path), "-n", "-Y", filter, "-T", "fields"]);
    for f in fields {
        c.args(["-e", f]);
    }
    let o = c
        .output()
        .expect("tshark is installed by scripts/setup.sh --tests");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(String::from)
        .collect()
}

/// The rate asked, from the timestamps written (the scheduled times, not the wall clock).
fn written_pps(p: &Path) -> f64 {
    let (_, r) = read_pcap(p);
    let span = (r.last().unwrap().0 - r[0].0) as f64 / 1e9;
    (r.len() - 1) as f64 / span
}

#[test]
fn replay_at_its_own_rate_schedules_the_packets_at_it() {
    let f = tmp("rate.pcap");
    let smp = sample();
    for rate in [
        &["--rate", "100kpps"][..],
        &["--pps", "100000"],
        &["--pps", "100k"],
    ] {
        let mut args = vec!["gen", "--pcap", s(&smp), "-o", s(&f), "--json"];
        args.extend(rate);
        let j = summary(&ok(&run(&args)));
        assert_eq!(j["pkts"], 2000, "{rate:?}");
        let pps = written_pps(&f);
        assert!((pps - 100_000.0).abs() < 5_000.0, "{rate:?}: {pps} pps");
    }
    // tcpreplay -M: megabits per second of the packets' bytes.
    ok(&run(&[
        "gen",
        "--pcap",
        s(&sample()),
        "-o",
        s(&f),
        "--mbps",
        "8",
        "-q",
    ]));
    let (_, r) = read_pcap(&f);
    let bits: u64 = r[..r.len() - 1].iter().map(|x| u64::from(x.2) * 8).sum();
    let bps = bits as f64 / ((r.last().unwrap().0 - r[0].0) as f64 / 1e9);
    assert!((bps - 8e6).abs() < 0.05 * 8e6, "{bps} bit/s");
    // --multiplier 4: the capture's 1 ms spacing at 250 µs.
    ok(&run(&[
        "gen",
        "--pcap",
        s(&sample()),
        "-o",
        s(&f),
        "--multiplier",
        "4",
        "-c",
        "100",
        "-q",
    ]));
    let (_, r) = read_pcap(&f);
    assert_eq!(r.len(), 100);
    // --loop 0: forever, ended by -c; the schedule goes on across the loops.
    let j = summary(&ok(&run(&[
        "gen",
        "--pcap",
        s(&sample()),
        "-o",
        s(&f),
        "--loop",
        "0",
        "--pps",
        "1M",
        "-c",
        "5000",
        "--json",
    ])));
    assert_eq!(j["pkts"], 5000);
    assert!(j["loops"].as_u64().unwrap() >= 2, "{j}");
    let pps = written_pps(&f);
    assert!((pps - 1e6).abs() < 5e4, "{pps}");
}

#[test]
fn rewrites_reach_every_replayed_frame() {
    let f = tmp("rewritten.pcap");
    let j = summary(&ok(&run(&[
        "gen",
        "--pcap",
        s(&sample()),
        "-o",
        s(&f),
        "--topspeed",
        "--json",
        "--dst-mac",
        "0a:0b:0c:0d:0e:0f",
        "--src-mac",
        "0a:00:00:00:00:01",
        "--src-ip",
        "10.0.0.0/8:172.16.0.0/12",
        "--dst-ip",
        "192.0.2.0/24:198.51.100.0/24",
        "--portmap",
        "4000:5000",
        "--vlan",
        "42",
        "--ttl",
        "9",
    ])));
    assert_eq!(j["pkts"], 2000);
    let o = Command::new("tcpdump")
        .args(["-n", "-e", "-r", s(&f)])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(text.lines().count(), 2000);
    for l in text.lines() {
        assert!(
            l.contains("0a:00:00:00:00:01 > 0a:0b:0c:0d:0e:0f") && l.contains("vlan 42"),
            "{l}"
        );
    }
    // Addresses, ports, TTL as asked; every checksum right (tshark checks them).
    let ip = tshark_fields(&f, "ip", &["ip.src", "ip.dst", "ip.ttl", "udp.port"]);
    assert!(!ip.is_empty());
    for l in &ip {
        let v: Vec<&str> = l.split('\t').collect();
        assert!(!v[0].starts_with("10."), "{l}");
        assert!(!v[1].starts_with("192.0.2."), "{l}");
        assert!(l.contains("\t9\t") || l.ends_with("\t9"), "{l}");
        assert!(!l.contains("4000"), "{l}");
    }
    assert!(ip.iter().any(|l| l.starts_with("172.16.")));
    assert!(ip.iter().any(|l| l.contains("198.51.100.")));
    assert!(ip.iter().any(|l| l.contains("5000")));
    let bad = Command::new("tshark")
        .args(["-r", s(&f), "-n", "-o", "ip.check_checksum:TRUE"])
        .args([
            "-o",
            "udp.check_checksum:TRUE",
            "-o",
            "tcp.check_checksum:TRUE",
        ])
        .args([
            "-Y",
            "ip.checksum.status==2 || udp.checksum.status==2 || tcp.checksum.status==2",
        ])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&bad.stdout).lines().count(), 0);
    // --vlan-strip takes the tag off again.
    let g = tmp("stripped.pcap");
    ok(&run(&[
        "gen",
        "--pcap",
        s(&f),
        "-o",
        s(&g),
        "--topspeed",
        "--vlan-strip",
        "-q",
    ]));
    assert_eq!(tcpdump_count(&g, "vlan"), 0);
    assert_eq!(tcpdump_count(&g, ""), 2000);
}

#[test]
fn raw_ip_and_cooked_replays_carry_every_ip_packet_on_ethernet() {
    let fields = [
        "ip.src",
        "ip.dst",
        "ip.len",
        "ipv6.src",
        "ipv6.dst",
        "ipv6.plen",
        "udp.srcport",
        "udp.dstport",
        "tcp.srcport",
        "tcp.dstport",
    ];
    let want = tshark_fields(&sample(), "ip or ipv6", &fields);
    assert!(want.len() > 1000);
    for (name, link) in [
        ("raw.pcap", 101),
        ("dltraw.pcap", 12),
        ("sll.pcap", 113),
        ("sll2.pcap", 276),
    ] {
        let src = ip_capture(name, link);
        let out = tmp(&format!("eth-{name}"));
        let j = summary(&ok(&run(&[
            "gen",
            "--pcap",
            s(&src),
            "-o",
            s(&out),
            "--topspeed",
            "--json",
            "--dst-mac",
            "0a:0b:0c:0d:0e:0f",
        ])));
        assert_eq!(j["pkts"].as_u64(), Some(want.len() as u64), "{name}: {j}");
        assert_eq!(j["refused"], 0);
        let (lt, recs) = read_pcap(&out);
        assert_eq!(lt, 1, "{name}: written as Ethernet");
        assert_eq!(recs.len(), want.len());
        assert_eq!(tshark_fields(&out, "ip or ipv6", &fields), want, "{name}");
        for (_, d, _) in &recs {
            assert_eq!(&d[0..6], &[0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f]);
        }
        // Cooked captures give their source address as the source MAC.
        if link == 113 || link == 276 {
            let (_, orig) = read_pcap(&sample());
            assert!(orig.iter().any(|(_, d, _)| d[6..12] == recs[0].1[6..12]));
        }
    }
    // A raw capture with a packet that is not IP: counted, not sent.
    let (_, mut recs) = read_pcap(&ip_capture("raw2.pcap", 101));
    recs.push((recs[0].0, vec![0x15, 0, 0, 0], 4));
    let p = tmp("raw-bad.pcap");
    write_pcap(&p, 101, &recs);
    let j = summary(&ok(&run(&[
        "gen",
        "--pcap",
        s(&p),
        "-o",
        s(&tmp("raw-bad-out.pcap")),
        "--topspeed",
        "--json",
    ])));
    assert_eq!(j["refused_by_reason"]["not_ip"], 1, "{j}");
    assert_eq!(j["pkts"].as_u64(), Some(recs.len() as u64 - 1));
}

#[test]
fn filters_on_raw_ip_and_cooked_captures_match_tcpdump() {
    let mut files = vec![
        ip_capture("f-raw.pcap", 101),
        ip_capture("f-dltraw.pcap", 12),
        ip_capture("f-sll.pcap", 113),
        ip_capture("f-sll2.pcap", 276),
    ];
    if let Some(c) = linerate_test_support::corpus() {
        for f in [
            "LINKTYPE_RAW_ipv4.pcap",
            "LINKTYPE_RAW_ipv6.pcap",
            "gquic.pcap",
            "mptcp-tcprst.pcap",
            "bgp-addpath.pcap",
            "mptcp-v1.pcap",
            "tcp-handshake-nano.pcap",
        ] {
            files.push(c.join(f));
        }
    }
    let exprs = [
        "udp",
        "tcp",
        "udp port 4000",
        "src net 10.0.0.0/8",
        "ip6",
        "ip[8] > 60",
        "tcp port 179",
    ];
    let mut hits = 0;
    for f in &files {
        for e in exprs {
            let want = tcpdump_count(f, e);
            let j = summary(&ok(&run(&["count", "-i", s(f), "-f", e, "-q", "--json"])));
            assert_eq!(
                j["pkts"].as_u64(),
                Some(want as u64),
                "{} '{e}'",
                f.display()
            );
            hits += want;
            // flows takes the same filter, compiled for the same link type.
            ok(&run(&["flows", "-i", s(f), "-f", e, "-q"]));
        }
    }
    assert!(hits > 1000, "{hits}");
}

/// `--loop 0` goes on until a signal: SIGINT ends it, exit 0, the summary says so.
#[test]
fn loop_0_plays_until_a_signal() {
    let child = Command::new(bin())
        .args([
            "gen",
            "--pcap",
            s(&sample()),
            "-o",
            "mem:gr-forever",
            "--loop",
            "0",
        ])
        .args(["--speed", "100", "--json", "-q"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(600));
    let k = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(k.success());
    let o = child.wait_with_output().unwrap();
    let j = summary(&ok(&o));
    assert_eq!(j["ended"], "interrupted", "{j}");
    assert!(j["handed_to_port"].as_u64().unwrap() > 0, "{j}");
}

#[test]
fn flags_a_replay_cannot_apply_are_refused_before_anything_is_opened() {
    let out = tmp("never.pcap");
    let radiotap = linerate_test_support::corpus_dir().join("ieee802.11_exthdr.pcap");
    let smp = sample();
    let base = ["gen", "--pcap", s(&smp), "-o", s(&out), "-c", "10"];
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--size", "128"], "--size"),
        (vec!["--proto", "tcp"], "--proto"),
        (vec!["--sport", "9"], "--portmap"),
        (vec!["--pattern", "poisson"], "--pattern"),
        (vec!["--vlan", "4095"], "1..4094"),
        (vec!["--vlan", "0"], "1..4094"),
        (vec!["--src-ip", "10.0.0.1-10.0.0.9"], "--src-ip"),
        (vec!["--dst-ip", "10.0.0.0/8:[fd00::/8]"], "IPv6"),
        (vec!["--portmap", "80"], "--portmap"),
        (vec!["--rate", "100kpps", "--speed", "2"], "--rate"),
        (vec!["--pps", "0"], "--pps"),
        (vec!["--pps", "2Gbps"], "--pps"),
        (vec!["--ttl", "0"], "--ttl"),
        (vec!["--streams", "2"], "--streams"),
        (vec!["--link-speed", "1Gbps"], "--link-speed"),
    ];
    for (extra, want) in cases {
        let mut args = base.to_vec();
        args.extend(&extra);
        let o = run(&args);
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {e}");
        assert!(e.contains(want), "{extra:?}: {e}");
        assert!(!out.exists(), "{extra:?} created the output");
    }
    // A capture whose link type has no Ethernet form: refused naming it, no output made.
    if radiotap.exists() {
        let o = run(&["gen", "--pcap", s(&radiotap), "-o", s(&out), "-c", "10"]);
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{e}");
        assert!(e.contains("link type 127"), "{e}");
        assert!(!out.exists());
    }
    // Forever into a file needs a limit.
    let o = run(&["gen", "--pcap", s(&smp), "-o", s(&out), "--loop", "0"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(!out.exists());
}

/// A raw-IP capture replayed at 20 kpps onto a veth (root, its own namespaces) with
/// `--dst-mac`: `count` on the peer receives every IP packet in an Ethernet frame to that MAC,
/// field for field as tshark reads the capture.
#[test]
fn a_raw_ip_replay_crosses_a_veth_as_ethernet() {
    use linerate_test_support::netns::{self, NetnsPair, Side};
    if !netns::require_priv() {
        return;
    }
    let src = ip_capture("veth-raw.pcap", 101);
    let (_, recs) = read_pcap(&src);
    let n = recs.len().to_string();
    let got = tmp("veth-got.pcap");
    let pair = NetnsPair::new().expect("netns pair");
    let count = Command::new("ip")
        .args(["netns", "exec", pair.ns(Side::B), bin()])
        .args(["count", "-i", "afpacket:vB", "-c", &n, "-t", "30", "-q"])
        .args(["-f", "ether dst 0a:0b:0c:0d:0e:0f", "-w", s(&got)])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn count");
    // count's socket is open once the file exists (written at start).
    let t0 = std::time::Instant::now();
    while !got.exists() && t0.elapsed() < std::time::Duration::from_secs(10) {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::thread::sleep(std::time::Duration::from_millis(200));
    let j = summary(&ok(&Command::new("ip")
        .args(["netns", "exec", pair.ns(Side::A), bin()])
        .args([
            "gen",
            "--pcap",
            s(&src),
            "-o",
            "afpacket:vA",
            "--rate",
            "20kpps",
        ])
        .args(["--dst-mac", "0a:0b:0c:0d:0e:0f", "--json", "-q"])
        .output()
        .unwrap()));
    assert_eq!(j["pkts"].as_u64(), Some(recs.len() as u64), "{j}");
    let o = count.wait_with_output().unwrap();
    assert!(o.status.success());
    let fields = [
        "ip.src", "ip.dst", "ip.len", "ipv6.src", "ipv6.dst", "udp.port", "tcp.port",
    ];
    assert_eq!(
        tshark_fields(&got, "ip or ipv6", &fields),
        tshark_fields(&src, "ip or ipv6", &fields)
    );
    assert_eq!(
        tcpdump_count(&got, "ether dst 0a:0b:0c:0d:0e:0f"),
        recs.len()
    );
}

/// `fwd` of a raw-IP or cooked capture to a file keeps the input's link type and bytes: l2fwd's
/// MAC updating does not write MACs over the IP header, and `--mac` is refused (exit 2, no
/// output written) since those frames have no MAC addresses.
#[test]
fn fwd_keeps_a_raw_ip_or_cooked_capture_as_it_is() {
    for link in [101u32, 113, 276] {
        let src = ip_capture(&format!("fwd-{link}.pcap"), link);
        let (_, want) = read_pcap(&src);
        let dst = tmp(&format!("fwd-{link}-out.pcap"));
        let out = ok(&run(&["fwd", "-i", s(&src), "-o", s(&dst)]));
        assert!(out.contains("MAC addresses not updated"), "{out}");
        let (got_link, got) = read_pcap(&dst);
        assert_eq!(got_link, link, "the output keeps the input's link type");
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(g.1, w.1, "link type {link}: bytes unchanged");
        }
        let refused = tmp(&format!("fwd-{link}-mac.pcap"));
        let o = run(&[
            "fwd",
            "-i",
            s(&src),
            "-o",
            s(&refused),
            "--mac",
            "02:00:00:00:00:01,02:00:00:00:00:02",
        ]);
        assert_eq!(o.status.code(), Some(2), "{o:?}");
        assert!(String::from_utf8_lossy(&o.stderr).contains("no MAC addresses"));
        assert!(std::fs::metadata(&refused).map_or(true, |m| m.len() == 0));
    }
}

/// A looped replay at the capture's spacing (as recorded, sped up, or at top speed; with or
/// without edits) writes times that go on from one loop to the next, one mean gap after the
/// last packet, as its departures do: never back to the capture's first time.
#[test]
fn a_looped_replay_writes_times_that_never_go_back() {
    let sample = sample();
    let (_, src) = read_pcap(&sample);
    let n = src.len();
    let span = src[n - 1].0 - src[0].0;
    let gap = span / (n as u64 - 1);
    for (i, extra) in [
        &["--topspeed"][..],
        &["--topspeed", "--ttl", "9"][..],
        &["--speed", "50"][..],
    ]
    .iter()
    .enumerate()
    {
        let dst = tmp(&format!("loops-{i}.pcap"));
        let mut a = vec!["gen", "--pcap", s(&sample), "-o", s(&dst), "--loop", "3"];
        a.extend_from_slice(extra);
        ok(&run(&a));
        let (_, got) = read_pcap(&dst);
        assert_eq!(got.len(), 3 * n, "{extra:?}");
        for w in got.windows(2) {
            assert!(w[1].0 >= w[0].0, "{extra:?}: time goes back");
        }
        for (k, r) in got.iter().enumerate() {
            let shift = (k / n) as u64 * (span + gap);
            assert_eq!(r.0, src[k % n].0 + shift, "{extra:?}: record {k}");
        }
    }
}

/// Jumbo frames replayed onto a veth of MTU 1500 (root, its own namespaces): each one the port
/// could not send is counted as a port drop with its reason, in the text and in --json.
#[test]
fn jumbo_frames_replayed_onto_a_smaller_mtu_are_drops_with_their_reason() {
    use linerate_test_support::netns::{self, NetnsPair, Side};
    if !netns::require_priv() {
        return;
    }
    let jumbo = tmp("jumbo.pcap");
    ok(&run(&["gen", "-o", s(&jumbo), "-c", "5", "--size", "9018"]));
    let pair = NetnsPair::new().expect("netns pair");
    let gen = |json: bool| {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", pair.ns(Side::A), bin()]).args([
            "gen",
            "--pcap",
            s(&jumbo),
            "-o",
            "afpacket:vA",
            "--topspeed",
        ]);
        if json {
            c.arg("--json");
        }
        ok(&c.output().unwrap())
    };
    let j = summary(&gen(true));
    let drops = j["port_drops"].as_u64().unwrap();
    assert_eq!(j["pkts"].as_u64().unwrap() + drops, 5, "{j}");
    assert!(drops > 0, "{j}");
    let by: u64 = j["port_drops_by_reason"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert_eq!(by, drops, "{j}");
    let text = gen(false);
    let line = text.lines().find(|l| l.starts_with("Replayed")).unwrap();
    assert!(line.contains("port drops: 5 ("), "{line}");
}

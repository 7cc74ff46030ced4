//! gen's packet kinds read back by tshark: ICMP and ICMPv6 echo requests, ARP requests, QinQ,
//! MPLS, GRE and VXLAN around the template; every checksum right (tshark checks them), every
//! field where it was asked, at every size of a range; `--size` defaulting to the template's
//! smallest frame; VLAN ids 0 and 4095 refused with the reason. And `--stream`: streams of
//! their own rate, size and fields, counted per stream in the summary and in the latency table.
#![deny(unsafe_code)]

use std::process::{Command, Output};

fn tmp(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("linerate-tpl-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_linerate"))
        .args(args)
        .output()
        .expect("run linerate")
}

fn ok(o: &Output) {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// Packets of `path` that match the display filter `f`, with every checksum checked.
fn matching(path: &str, f: &str) -> usize {
    let o = Command::new("tshark")
        .args(["-r", path, "-n"])
        .args(["-o", "ip.check_checksum:TRUE"])
        .args(["-o", "udp.check_checksum:TRUE"])
        .args(["-o", "tcp.check_checksum:TRUE"])
        .args(["-Y", f])
        .output()
        .expect("tshark is installed by scripts/setup.sh --tests");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).lines().count()
}

/// Any checksum tshark finds wrong, or a packet it cannot decode.
const BAD: &str = "ip.checksum.status==2 || udp.checksum.status==2 || tcp.checksum.status==2 \
                   || icmp.checksum.status==2 || icmpv6.checksum.status==2 || _ws.malformed \
                   || _ws.expert.severity>=error";

/// Generates 40 packets with `args` into a fresh file; checks that none is bad and that all
/// match `want`.
fn check(name: &str, args: &[&str], want: &str) {
    let f = tmp(name);
    let p = f.to_str().unwrap();
    let mut a = vec!["gen", "-o", p, "-c", "40", "-q"];
    a.extend_from_slice(args);
    ok(&run(&a));
    assert_eq!(matching(p, BAD), 0, "{name}: bad packets");
    assert_eq!(matching(p, want), 40, "{name}: not all match {want}");
    let _ = std::fs::remove_file(&f);
}

#[test]
fn icmp_echo_requests_over_ipv4_and_ipv6() {
    check(
        "icmp.pcap",
        &[
            "--proto", "icmp", "--size", "64-1518", "--sport", "7", "--dport", "1-1000",
        ],
        "icmp.type==8 && icmp.code==0 && icmp.ident==7 && icmp.checksum.status==1 && \
         ip.proto==1",
    );
    check(
        "icmp-varied.pcap",
        &[
            "--proto",
            "icmp",
            "--dst-ip",
            "random:10.0.0.1-10.0.255.254",
            "--size",
            "imix",
        ],
        "icmp.type==8 && icmp.checksum.status==1 && ip.checksum.status==1",
    );
    check(
        "icmp6.pcap",
        &[
            "--proto",
            "icmp",
            "--dst-ip",
            "2001:db8::1-2001:db8::ff",
            "--sport",
            "9",
            "--size",
            "66-300",
        ],
        "icmpv6.type==128 && icmpv6.echo.identifier==9 && icmpv6.checksum.status==1",
    );
}

#[test]
fn arp_requests_are_broadcast_from_the_source_for_the_destination() {
    check(
        "arp.pcap",
        &[
            "--proto",
            "arp",
            "--src-ip",
            "10.0.0.1",
            "--dst-ip",
            "10.0.0.2-10.0.0.9",
        ],
        "arp.opcode==1 && eth.dst==ff:ff:ff:ff:ff:ff && arp.src.proto_ipv4==10.0.0.1 && \
         arp.dst.proto_ipv4>=10.0.0.2 && arp.dst.proto_ipv4<=10.0.0.9 && \
         arp.src.hw_mac==02:00:00:00:00:01 && frame.len==60",
    );
    let o = run(&[
        "gen",
        "-o",
        "mem:a",
        "-c",
        "1",
        "--proto",
        "arp",
        "--dst-ip",
        "2001:db8::1",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("ARP is IPv4's"));
    let o = run(&[
        "gen", "-o", "mem:a", "-c", "1", "--proto", "arp", "--dport", "9",
    ]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn qinq_puts_an_802_1ad_tag_outside_the_802_1q_one() {
    check(
        "qinq.pcap",
        &["--vlan", "10,20", "--size", "64-1518", "--proto", "tcp"],
        "eth.type==0x88a8 && ieee8021ad.id==10 && vlan.id==20 && tcp.checksum.status==1",
    );
    check(
        "vlan.pcap",
        &["--vlan", "4094"],
        "eth.type==0x8100 && vlan.id==4094",
    );
    for (v, why) in [
        ("4095", "reserved"),
        ("0", "priority"),
        ("1,2,3", "OUTER,INNER"),
    ] {
        let o = run(&["gen", "-o", "mem:v", "-c", "1", "--vlan", v]);
        assert_eq!(o.status.code(), Some(2), "--vlan {v}");
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(e.contains(why), "--vlan {v}: {e}");
    }
}

#[test]
fn mpls_gre_and_vxlan_carry_the_inner_template() {
    check(
        "mpls.pcap",
        &["--mpls", "100,200", "--size", "64-1518"],
        "mpls.label==200 && mpls.bottom==1 && udp.checksum.status==1 && ip.checksum.status==1",
    );
    check(
        "gre.pcap",
        &[
            "--encap",
            "gre:10.0.0.1-10.0.0.2",
            "--proto",
            "tcp",
            "--size",
            "80-1518",
        ],
        "gre.proto==0x0800 && ip.src==10.0.0.1 && ip.src==198.18.0.1 && \
         tcp.checksum.status==1",
    );
    check(
        "vxlan.pcap",
        &[
            "--encap",
            "vxlan:42",
            "--size",
            "imix",
            "--dst-ip",
            "2001:db8::1-2001:db8::ff",
        ],
        "vxlan.vni==42 && udp.dstport==4789 && ipv6.dst==2001:db8::1/120 && \
         udp.checksum.status==1",
    );
    for (f, why) in [
        ("--mpls=1048576", "MPLS label"),
        ("--encap=vxlan:16777216", "VNI"),
        ("--encap=ipip", "gre:SRC-DST"),
    ] {
        let o = run(&["gen", "-o", "mem:e", "-c", "1", f]);
        assert_eq!(o.status.code(), Some(2), "{f}");
        assert!(String::from_utf8_lossy(&o.stderr).contains(why), "{f}");
    }
}

#[test]
fn the_default_size_is_the_templates_smallest_frame() {
    // 64 B (60 without the CRC) for IPv4; IPv6/UDP 66 B, IPv6/TCP 78 B: no longer refused.
    check("v4.pcap", &[], "frame.len==60");
    check(
        "v6.pcap",
        &["--dst-ip", "2001:db8::2"],
        "frame.len==62 && udp",
    );
    check(
        "v6tcp.pcap",
        &["--dst-ip", "2001:db8::2", "--proto", "tcp"],
        "frame.len==74 && tcp",
    );
    check("vx.pcap", &["--encap", "vxlan:1"], "frame.len==92");
    // The start line says which (JSON: `size`), and the text start line why.
    let o = run(&[
        "gen",
        "-o",
        "mem:s",
        "-c",
        "1",
        "--dst-ip",
        "2001:db8::2",
        "--json",
    ]);
    ok(&o);
    let start: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&o.stdout).lines().next().unwrap()).unwrap();
    assert_eq!(start["size"], "66", "{start}");
    let o = run(&[
        "gen",
        "-o",
        "mem:s",
        "-c",
        "1",
        "--dst-ip",
        "2001:db8::2",
        "--proto",
        "tcp",
    ]);
    ok(&o);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("Frames of 78 B: the smallest for these headers (--size not given)"),
        "{out}"
    );
    // A size given is still checked against the headers.
    let o = run(&[
        "gen",
        "-o",
        "mem:s",
        "-c",
        "1",
        "--dst-ip",
        "2001:db8::2",
        "--size",
        "64",
    ]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn streams_of_their_own_rate_size_and_fields() {
    let f = tmp("streams.pcap");
    let p = f.to_str().unwrap();
    let o = run(&[
        "gen",
        "-o",
        p,
        "-t",
        "2",
        "--json",
        "--stream",
        "rate=1500pps,size=128,dport=9",
        "--stream",
        "rate=500pps,dport=7,proto=icmp",
        "--stream",
        "rate=250pps,size=64-100,dst-ip=10.0.0.1,10.0.0.2,vlan=5",
    ]);
    ok(&o);
    let out = String::from_utf8_lossy(&o.stdout);
    let s: serde_json::Value = out
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|j| j["type"] == "summary")
        .expect("a summary");
    let st = s["streams"].as_array().unwrap();
    assert_eq!(st.len(), 3, "{s}");
    let n: Vec<u64> = st.iter().map(|x| x["pkts"].as_u64().unwrap()).collect();
    assert_eq!(st[0]["rate_pps"], 1500.0);
    assert_eq!(st[2]["rate_pps"], 250.0);
    // The packets keep the rates' proportions (6:2:1), whatever the machine's load.
    let total: u64 = n.iter().sum();
    assert_eq!(total, s["pkts"].as_u64().unwrap());
    for (i, share) in [(0, 6.0 / 9.0), (1, 2.0 / 9.0), (2, 1.0 / 9.0)] {
        let got = n[i] as f64 / total as f64;
        assert!(
            (got - share).abs() < 0.02,
            "stream {i}: {got} of {total}: {n:?}"
        );
    }
    // The file holds each stream's packets as it asked.
    assert_eq!(matching(p, BAD), 0);
    assert_eq!(matching(p, "udp.dstport==9 && frame.len==124") as u64, n[0]);
    assert_eq!(matching(p, "icmp.type==8 && icmp.seq==7") as u64, n[1]);
    assert_eq!(
        matching(
            p,
            "vlan.id==5 && (ip.dst==10.0.0.1 || ip.dst==10.0.0.2) && frame.len<=96"
        ) as u64,
        n[2]
    );
    let _ = std::fs::remove_file(&f);
    // Latency per stream, through a mem wire; a stream without rate shares the rest of --rate.
    let o = run(&[
        "gen",
        "-o",
        "mem:st",
        "--rx",
        "mem:st",
        "-c",
        "3000",
        "--rate",
        "30kpps",
        "--json",
        "--stream",
        "rate=20kpps,size=200",
        "--stream",
        "dport=7",
    ]);
    ok(&o);
    let out = String::from_utf8_lossy(&o.stdout);
    let s: serde_json::Value = out
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|j| j["type"] == "summary")
        .expect("a summary");
    assert_eq!(s["streams"][1]["rate_pps"], 10_000.0, "{s}");
    let lat = s["latency"].as_array().unwrap();
    assert_eq!(lat.len(), 2, "{s}");
    for (l, st) in lat.iter().zip(s["streams"].as_array().unwrap()) {
        assert_eq!(
            l["rx"].as_u64().unwrap() + l["lost"].as_u64().unwrap(),
            st["pkts"].as_u64().unwrap(),
            "{l} {st}"
        );
    }
    // Refused: rates that leave nothing for the others, an unknown key, --streams beside.
    for args in [
        &[
            "--rate",
            "1kpps",
            "--stream",
            "rate=2kpps",
            "--stream",
            "size=64",
        ][..],
        &["--stream", "rate=2kpps", "--stream", "size=64"][..],
        &["--stream", "speed=2"][..],
        &["--streams", "2", "--stream", "size=64"][..],
    ] {
        let mut a = vec!["gen", "-o", "mem:r", "-c", "1"];
        a.extend_from_slice(args);
        let o = run(&a);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(!o.stderr.is_empty());
    }
}

#[test]
fn probes_are_read_under_mpls_labels_and_inside_tunnels() {
    for args in [
        &["--encap", "vxlan:1"][..],
        &["--encap", "gre", "--dst-ip", "2001:db8::4"][..],
        &["--mpls", "5,6"][..],
        &["--mpls", "5", "--encap", "vxlan:3", "--proto", "icmp"][..],
    ] {
        let mut a = vec![
            "gen", "-o", "mem:p", "--rx", "mem:p", "-c", "500", "--size", "200", "--json",
        ];
        a.extend_from_slice(args);
        let o = run(&a);
        ok(&o);
        let out = String::from_utf8_lossy(&o.stdout);
        let s: serde_json::Value = out
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|j| j["type"] == "summary")
            .expect("a summary");
        assert_eq!(s["rx_other"], 0, "{args:?}: {s}");
        let l = &s["latency"][0];
        assert_eq!(
            l["rx"].as_u64().unwrap() + l["lost"].as_u64().unwrap(),
            s["handed_to_port"].as_u64().unwrap(),
            "{args:?}: {s}"
        );
    }
}

#[test]
fn a_scripts_config_streams_are_streams_of_their_own() {
    let lua = tmp("qos.lua");
    std::fs::write(
        &lua,
        "config = { streams = { \"rate=3kpps,size=64,dport=9\",\n\
         { rate = \"1kpps\", size = 1518, dport = 5001 } } }\n\
         function modify(pkts, n) end\n",
    )
    .unwrap();
    let f = tmp("qos.pcap");
    let p = f.to_str().unwrap();
    ok(&run(&[
        "gen",
        "-o",
        p,
        "--script",
        lua.to_str().unwrap(),
        "-c",
        "400",
        "-q",
    ]));
    assert_eq!(matching(p, BAD), 0);
    assert_eq!(matching(p, "udp.dstport==9 && frame.len==60"), 300);
    assert_eq!(matching(p, "udp.dstport==5001 && frame.len==1514"), 100);
    // --stream given on the command line wins over the script's.
    ok(&run(&[
        "gen",
        "-o",
        p,
        "--script",
        lua.to_str().unwrap(),
        "-c",
        "10",
        "-q",
        "--stream",
        "dport=7",
    ]));
    assert_eq!(matching(p, "udp.dstport==7"), 10);
    std::fs::write(
        &lua,
        "config = { streams = { true } }\nfunction modify(pkts, n) end\n",
    )
    .unwrap();
    let o = run(&[
        "gen",
        "-o",
        "mem:q",
        "--script",
        lua.to_str().unwrap(),
        "-c",
        "1",
    ]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("config.streams"));
    let _ = std::fs::remove_file(&f);
}

#[test]
fn the_live_frames_engine_refuses_the_kinds_it_cannot_send_before_opening_anything() {
    for (args, why) in [
        (&["--proto", "icmp"][..], "live frames are UDP or TCP"),
        (&["--vlan", "10,20"][..], "one tag"),
        (&["--encap", "vxlan:1"][..], "one tag"),
        (
            &["--stream", "dport=1", "--stream", "dport=2"][..],
            "one stream",
        ),
    ] {
        let mut a = vec!["gen", "-o", "xdp:lo", "--engine", "live", "-c", "1"];
        a.extend_from_slice(args);
        let o = run(&a);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(
            e.contains(why) && e.contains("--engine xsk"),
            "{args:?}: {e}"
        );
    }
}

/// A `--stream` key given twice, or a `--rate` beside streams that all have their own rate
/// (so it would be ignored), is refused (exit 2) rather than one value silently dropped.
#[test]
fn a_streams_key_twice_or_a_rate_no_stream_takes_is_refused() {
    for (args, why) in [
        (&["--stream", "rate=1kpps,rate=2kpps"][..], "given twice"),
        (&["--stream", "size=64,dport=9,size=128"][..], "given twice"),
        (
            &[
                "--rate",
                "1Mpps",
                "--stream",
                "rate=600kpps",
                "--stream",
                "rate=600kpps",
            ][..],
            "differ",
        ),
        (
            &["--rate", "1Mpps", "--stream", "rate=200kpps"][..],
            "differ",
        ),
    ] {
        let mut a = vec!["gen", "-o", "mem:twice", "-c", "1"];
        a.extend_from_slice(args);
        let o = run(&a);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(
            String::from_utf8_lossy(&o.stderr).contains(why),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    // A --rate equal to the streams' sum says the same thing twice: taken.
    let mut a = vec!["gen", "-o", "mem:twice", "-c", "4", "--rate", "2kpps"];
    a.extend_from_slice(&["--stream", "rate=1kpps", "--stream", "rate=1kpps"]);
    ok(&run(&a));
}

#[test]
fn more_than_255_streams_are_refused_before_the_output_is_touched() {
    // A worker numbers its streams in a byte: 256 --stream flags used to pass the flag checks,
    // truncate the capture file to a bare header and fail at run time with exit 1.
    let path = tmp("streams256.pcap");
    std::fs::write(&path, b"keep me").unwrap();
    let out = format!("pcap:{}", path.display());
    let ports: Vec<String> = (1..=256).map(|i| format!("dport={i}")).collect();
    let mut args = vec!["gen", "-c", "600", "-o", &out];
    for p in &ports {
        args.push("--stream");
        args.push(p);
    }
    let o = run(&args);
    assert_eq!(
        o.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("255"));
    assert_eq!(
        std::fs::read(&path).unwrap(),
        b"keep me",
        "the output was touched"
    );
    let _ = std::fs::remove_file(&path);
}

//! `linerate gen` end to end: packets on a written pcap checked by tshark, the Lua examples on
//! a mem port, latency through `--rx` and `count --latency`, pcap replay, usage errors.
#![deny(unsafe_code)]

use std::path::PathBuf;
use std::process::{Command, Output};

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_linerate")
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
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
    let d = std::env::temp_dir().join(format!("linerate-gen-cli-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

fn tshark_bad(path: &str) -> usize {
    let o = Command::new("tshark")
        .args(["-r", path, "-n"])
        .args(["-o", "ip.check_checksum:TRUE"])
        .args(["-o", "udp.check_checksum:TRUE"])
        .args(["-o", "tcp.check_checksum:TRUE"])
        .args([
            "-Y",
            "ip.checksum.status==2 || udp.checksum.status==2 || tcp.checksum.status==2",
        ])
        .output()
        .expect("tshark is installed by scripts/setup.sh --tests");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).lines().count()
}

fn tshark_fields(path: &str, fields: &[&str]) -> Vec<String> {
    let mut c = Command::new("tshark");
    c.args(["-r", path, "-n", "-T", "fields"]);
    for f in fields {
        c.args(["-e", f]);
    }
    let o = c.output().expect("tshark");
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(String::from)
        .collect()
}

#[test]
fn flags_shape_the_packets() {
    let f = tmp("flags.pcap");
    let fs = f.to_str().unwrap();
    let out = ok(&run(&[
        "gen",
        "-o",
        fs,
        "-c",
        "3000",
        "--size",
        "64-1518",
        "--src-ip",
        "10.1.0.1-10.1.0.10",
        "--dst-ip",
        "random:172.16.0.1-172.16.0.254",
        "--sport",
        "1000,2000",
        "--dport",
        "random:5000-5009",
        "--vlan",
        "7",
        "--dst-mac",
        "02:00:00:00:00:0b",
        "--json",
    ]));
    assert_eq!(summary(&out)["pkts"], 3000);
    assert_eq!(tshark_bad(fs), 0);
    let rows = tshark_fields(
        fs,
        &[
            "vlan.id",
            "ip.src",
            "ip.dst",
            "udp.srcport",
            "udp.dstport",
            "frame.len",
            "eth.dst",
        ],
    );
    assert_eq!(rows.len(), 3000);
    let mut srcs = std::collections::BTreeSet::new();
    for (i, r) in rows.iter().enumerate() {
        let c: Vec<&str> = r.split('\t').collect();
        assert_eq!(c[0], "7");
        srcs.insert(c[1].to_string());
        assert!(c[2].starts_with("172.16.0."), "{r}");
        assert_eq!(c[3], if i % 2 == 0 { "1000" } else { "2000" });
        let dp: u16 = c[4].parse().unwrap();
        assert!((5000..=5009).contains(&dp));
        let len: u32 = c[5].parse().unwrap();
        assert!((60..=1514).contains(&len), "{len}");
        assert_eq!(c[6], "02:00:00:00:00:0b");
    }
    assert_eq!(srcs.len(), 10);

    // IPv6 / TCP / IMIX, two streams, flows.
    let f = tmp("v6.pcap");
    let fs = f.to_str().unwrap();
    ok(&run(&[
        "gen",
        "-o",
        fs,
        "-c",
        "1200",
        "--size",
        "imix",
        "--proto",
        "tcp",
        "--src-ip",
        "2001:db8::1",
        "--dst-ip",
        "2001:db8::2",
        "--flows",
        "100",
        "--streams",
        "2",
        "-q",
    ]));
    assert_eq!(tshark_bad(fs), 0);
    let rows = tshark_fields(fs, &["ipv6.src", "tcp.dstport", "frame.len"]);
    assert_eq!(rows.len(), 1200);
    let srcs: std::collections::BTreeSet<&str> =
        rows.iter().map(|r| r.split('\t').next().unwrap()).collect();
    assert_eq!(srcs.len(), 100);
    let big = rows.iter().filter(|r| r.ends_with("\t1514")).count();
    assert_eq!(big, 100, "one in 12 IMIX frames is 1518 B");
}

#[test]
fn every_lua_example_runs_on_a_mem_port() {
    let mut n = 0;
    for e in std::fs::read_dir(root().join("examples")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().and_then(|x| x.to_str()) != Some("lua") {
            continue;
        }
        let ps = p.to_str().unwrap();
        // Rates of the examples apply; two streams for the QoS one.
        let out = ok(&run(&[
            "gen",
            "-o",
            "mem:ex",
            "--rx",
            "mem:ex",
            "--script",
            ps,
            "-c",
            "2000",
            "--streams",
            "2",
            "--json",
        ]));
        let s = summary(&out);
        assert_eq!(s["pkts"], 2000, "{ps}");
        // What the receiver got is what was sent, less what the wire dropped.
        let lat = s["latency"].as_array().unwrap();
        let rx: u64 = lat.iter().map(|l| l["rx"].as_u64().unwrap()).sum();
        let lost: u64 = lat.iter().map(|l| l["lost"].as_u64().unwrap()).sum();
        let dups: u64 = lat.iter().map(|l| l["dups"].as_u64().unwrap()).sum();
        let no_probe = s["rx_other"].as_u64().unwrap();
        let drops = s["port_drops"].as_u64().unwrap();
        assert_eq!(dups, 0);
        if no_probe == 0 {
            assert_eq!(rx + lost, 2000, "{ps}: {s}");
            assert_eq!(lost, drops, "{ps}: {s}");
        } else {
            // 64 B TCP frames have no room for a probe.
            assert_eq!(no_probe + drops, 2000, "{ps}: {s}");
        }
        // And the packets are valid.
        let f = tmp("ex.pcap");
        ok(&run(&[
            "gen",
            "-o",
            f.to_str().unwrap(),
            "--script",
            ps,
            "-c",
            "500",
            "-q",
        ]));
        assert_eq!(tshark_bad(f.to_str().unwrap()), 0, "{ps}");
        n += 1;
    }
    assert!(n >= 5, "{n} examples");
}

#[test]
fn script_errors_name_file_and_line() {
    let f = tmp("bad.lua");
    std::fs::write(&f, "function modify(pkts, n)\n  for i = 1, n do\n    pkts[i]:udp():setSrcPort(nil)\n  end\nend\n").unwrap();
    let o = run(&[
        "gen",
        "-o",
        "mem:bad",
        "--script",
        f.to_str().unwrap(),
        "-c",
        "10",
    ]);
    assert_eq!(o.status.code(), Some(1));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("bad.lua:3:"), "{e}");
    std::fs::write(&f, "function modify(pkts, n)\n  x = = 1\nend\n").unwrap();
    let o = run(&[
        "gen",
        "-o",
        "mem:bad2",
        "--script",
        f.to_str().unwrap(),
        "-c",
        "10",
    ]);
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("bad.lua:2:"), "{e}");
}

/// A script's writes reach the frames; linerate recomputes the checksums after `modify()` unless
/// the script sets `checksums = false` (MoonGen's offloadUdpChecksums): tcpdump -vv checks them.
#[test]
fn script_writes_the_frames_and_checksums_are_fixed_unless_the_script_says_not() {
    let f = tmp("ck.lua");
    for (off, bad) in [(false, false), (true, true)] {
        let pcap = tmp(&format!("ck-{off}.pcap"));
        std::fs::write(
            &f,
            format!(
                "{}function modify(pkts, n)\n  for i = 1, n do\n    local p = pkts[i]\n    \
                 p.udp.dport = 4000 + i\n    p.ip4.saddr = 0x0a000000 + i\n  end\nend\n",
                if off { "checksums = false\n" } else { "" }
            ),
        )
        .unwrap();
        let o = run(&[
            "gen",
            "-o",
            &format!("pcap:{}", pcap.display()),
            "--script",
            f.to_str().unwrap(),
            "-c",
            "20",
        ]);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        let td = Command::new("tcpdump")
            .args(["-nr", pcap.to_str().unwrap(), "-vv"])
            .output()
            .unwrap();
        let t = String::from_utf8_lossy(&td.stdout);
        assert!(t.contains("10.0.0.1.") && t.contains(".4001:"), "{t}");
        assert_eq!(t.matches("bad udp cksum").count() > 0, bad, "{t}");
        assert_eq!(t.matches("bad cksum").count() > 0, bad, "{t}");
    }
}

#[test]
fn latency_through_rx_and_count() {
    let csv = tmp("lat.csv");
    let out = ok(&run(&[
        "gen",
        "-o",
        "mem:lat",
        "--rx",
        "mem:lat",
        "--rate",
        "100kpps",
        "-c",
        "5000",
        "--streams",
        "2",
        "--size",
        "128",
        "--hist-out",
        csv.to_str().unwrap(),
        "--json",
    ]));
    let s = summary(&out);
    // All 5'000 handed to the wire; a loaded machine may leave the reader behind and the wire
    // full, and what it dropped is not sent (and is lost in the latency table).
    assert_eq!(s["handed_to_port"], 5000, "{s}");
    assert_eq!(
        s["pkts"].as_u64().unwrap() + s["port_drops"].as_u64().unwrap(),
        5000,
        "{s}"
    );
    // Every gap is measured: on schedule, or inside a catch-up (all of them when a loaded
    // machine held the sender back for the whole 50 ms run).
    let p = &s["precision"];
    assert!(
        p["gaps"].as_u64().unwrap() + p["catch_up"]["gaps"].as_u64().unwrap() > 0,
        "{p}"
    );
    let lat = s["latency"].as_array().unwrap();
    assert_eq!(lat.len(), 2);
    for l in lat {
        assert_eq!(l["dups"], 0);
        assert_eq!(
            l["rx"].as_u64().unwrap() + l["lost"].as_u64().unwrap(),
            2500,
            "{l}"
        );
        assert!(l["min_ns"].as_u64().unwrap() <= l["p50_ns"].as_u64().unwrap());
        assert!(l["p999_ns"].as_u64().unwrap() <= l["max_ns"].as_u64().unwrap());
    }
    let c = std::fs::read_to_string(&csv).unwrap();
    assert!(c.starts_with("low_ns,high_ns,count,cumulative_percent"));
    let svg = std::fs::read_to_string(csv.with_extension("svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("</svg>"));

    // count --latency on a capture of probes.
    let f = tmp("probes.pcap");
    ok(&run(&[
        "gen",
        "-o",
        f.to_str().unwrap(),
        "-c",
        "3000",
        "--streams",
        "3",
        "-q",
    ]));
    let out = ok(&run(&[
        "count",
        "-i",
        f.to_str().unwrap(),
        "--latency",
        "--hist-out",
        tmp("count.csv").to_str().unwrap(),
        "--json",
        "-q",
    ]));
    let s = summary(&out);
    let lat = s["latency"].as_array().unwrap();
    assert_eq!(lat.len(), 3);
    for l in lat {
        assert_eq!(l["rx"], 1000);
        assert_eq!(l["lost"], 0);
        assert_eq!(l["reordered"], 0);
    }
    assert!(tmp("count.svg").exists());
}

#[test]
fn replays_a_capture() {
    let sample = root().join("examples/sample.pcap");
    let f = tmp("replay.pcap");
    let out = ok(&run(&[
        "gen",
        "-o",
        f.to_str().unwrap(),
        "--pcap",
        sample.to_str().unwrap(),
        "--topspeed",
        "--loop",
        "2",
        "--json",
    ]));
    let s = summary(&out);
    assert_eq!(s["pkts"], 4000);
    assert_eq!(s["loops"], 2);
    let o = ok(&run(&["count", "-i", f.to_str().unwrap(), "--json", "-q"]));
    assert_eq!(summary(&o)["pkts"], 4000);
    // Timed replay, 1000 times faster than recorded.
    let out = ok(&run(&[
        "gen",
        "-o",
        "mem:replay",
        "--pcap",
        sample.to_str().unwrap(),
        "--speed",
        "1000",
        "-c",
        "500",
        "--json",
    ]));
    let s = summary(&out);
    assert_eq!(s["pkts"], 500);
    assert!(s["precision"]["gaps"].as_u64().unwrap() > 0);
}

#[test]
fn usage_errors_exit_2() {
    for args in [
        &["gen", "-o", "mem:u", "--rate", "fast"][..],
        &["gen", "-o", "mem:u", "--size", "40"],
        &["gen", "-o", "mem:u", "--pattern", "burst:0"],
        &[
            "gen",
            "-o",
            "mem:u",
            "--src-ip",
            "10.0.0.1",
            "--dst-ip",
            "2001:db8::1",
            "-c",
            "1",
        ],
        &["gen", "-o", "mem:u", "--sport", "70000"],
        &["gen", "-o", "mem:u", "--threads", "2"],
        &["gen", "-o", "nosuch:x", "-c", "10"],
        &["gen", "-o", "/nonexistent-dir/x.pcap", "-c", "10"],
        &["gen", "-o", "unlimited.pcap"],
        &["gen", "-o", "mem:u", "--hist-out", "x.csv"],
    ] {
        let o = run(args);
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {e}");
        assert!(e.starts_with("linerate: error:"), "{e}");
    }
}

#[test]
fn live_engine_refusals_name_the_fix() {
    let script = root().join("examples/udp_flows.lua");
    let script = script.to_str().unwrap();
    for (args, want) in [
        (
            &[
                "gen", "-o", "xdp:lo", "--engine", "live", "--script", script, "-c", "1",
            ][..],
            "--engine xsk",
        ),
        (
            &[
                "gen", "-o", "xdp:lo", "--engine", "live", "--size", "64-128", "-c", "1",
            ],
            "--engine xsk",
        ),
        (
            &[
                "gen", "-o", "xdp:lo", "--engine", "live", "--sport", "1,2,3", "-c", "1",
            ],
            "--engine xsk",
        ),
        (
            &["gen", "-o", "mem:u", "--engine", "live", "-c", "1"],
            "xdp:IFACE",
        ),
        (
            &["gen", "-o", "mem:u", "--engine", "xsk", "-c", "1"],
            "xdp:IFACE",
        ),
        (
            &["gen", "-o", "xdp:lo", "--engine", "fast", "-c", "1"],
            "auto, live or xsk",
        ),
        (
            &["gen", "-o", "xdp:lo", "--batch", "512", "-c", "1"],
            "between 1 and 256",
        ),
    ] {
        let o = run(args);
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {e}");
        assert!(e.starts_with("linerate: error:"), "{e}");
        assert_eq!(e.trim().lines().count(), 1, "{e}");
        assert!(e.contains(want), "{args:?}: {e}");
    }
    // --engine auto with --commands takes the engine that can be steered instead of refusing
    // (whether xdp:lo then opens depends on the machine: it is not a usage error either way).
    let o = run(&["gen", "-o", "xdp:lo", "--commands", "-", "-c", "1"]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert_ne!(o.status.code(), Some(2), "{e}");
    assert!(!e.contains("steer"), "{e}");
    // --engine live follows start, stop and rate from --commands -: not refused either.
    let o = run(&[
        "gen",
        "-o",
        "xdp:lo",
        "--engine",
        "live",
        "--commands",
        "-",
        "-c",
        "1",
    ]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert_ne!(o.status.code(), Some(2), "{e}");
}

#[test]
fn rfc2544_on_a_mem_wire() {
    let csv = tmp("rfc.csv");
    let out = ok(&run(&[
        "rfc2544",
        "-o",
        "mem:rfc",
        "-i",
        "mem:rfc",
        "--sizes",
        "64,1518",
        "--trial",
        "20ms",
        "--settle",
        "10ms",
        "--resolution",
        "10",
        "--link-speed",
        "100Mbps",
        "--b2b-max",
        "1024",
        "--loss-steps",
        "100,50,10",
        "--csv",
        csv.to_str().unwrap(),
        "--json",
    ]));
    check_rfc2544_json(&out);
    let s = summary(&out);
    let res = s["results"].as_array().unwrap();
    assert_eq!(res.len(), 2);
    for r in res {
        assert_eq!(r["loss_pct"].as_array().unwrap().len(), 3);
        if let Some(p) = r["throughput_pct"].as_f64() {
            assert!(p > 0.0 && p <= 100.0);
        }
        let b = r["back_to_back"].as_u64().unwrap();
        assert!(b <= 1024);
    }
    // Every trial line: received never exceeds sent; the throughput trials kept all frames.
    let trials: Vec<serde_json::Value> = out
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|j| j["type"] == "trial")
        .collect();
    assert!(trials.len() >= 2 * (1 + 3 + 1));
    for t in &trials {
        assert!(t["received"].as_u64() <= t["sent"].as_u64(), "{t}");
    }
    let c = std::fs::read_to_string(&csv).unwrap();
    assert!(c.starts_with("test,size,rate_pct,"));
    assert_eq!(c.lines().filter(|l| l.starts_with("loss,")).count(), 6);
    assert_eq!(
        c.lines().filter(|l| l.starts_with("back-to-back,")).count(),
        2
    );
    for l in c.lines().filter(|l| l.starts_with("throughput,")) {
        let f: Vec<&str> = l.split(',').collect();
        assert_eq!(f[5], f[6], "a throughput trial lost nothing: {l}");
        assert_eq!(f[13], "pass", "{l}");
    }
    assert_eq!(c.lines().filter(|l| l.starts_with("ceiling,")).count(), 2);
}

/// The summary and the trials of an rfc2544 run describe one rate: throughput_pps is the
/// offered rate of throughput_pct, a passing trial achieved its offered rate, and the
/// generator's ceiling is stated.
fn check_rfc2544_json(out: &str) {
    let s = summary(out);
    for r in s["results"].as_array().unwrap() {
        let line = r["line_pps"].as_f64().unwrap();
        let ceiling = r["generator_ceiling_pps"].as_f64().unwrap();
        assert!(ceiling > 0.0, "{r}");
        assert_eq!(
            r["generator_limited"].as_bool().unwrap(),
            ceiling < 0.995 * line,
            "{r}"
        );
        if let Some(pct) = r["throughput_pct"].as_f64() {
            let pps = r["throughput_pps"].as_f64().unwrap();
            assert!((pps - line * pct / 100.0).abs() <= 1.0, "{r}");
            let achieved = r["throughput_achieved_pps"].as_f64().unwrap();
            assert!(achieved >= 0.995 * pps, "{r}");
            assert!(pps <= ceiling * 1.005, "{r}");
        }
    }
    for t in out
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|j| j["type"] == "trial")
    {
        let offered = t["offered_pps"].as_f64().unwrap();
        let achieved = t["achieved_pps"].as_f64().unwrap();
        let limited = achieved < 0.995 * offered;
        assert_eq!(t["generator_limited"].as_bool().unwrap(), limited, "{t}");
        let lossless = t["sent"].as_u64().unwrap() > 0 && t["received"] == t["sent"];
        assert_eq!(t["passed"].as_bool().unwrap(), lossless && !limited, "{t}");
    }
}

#[test]
fn rfc2544_throughput_is_one_rate_and_the_ceiling_is_stated() {
    // 64 B at 10 GbE (14.88 Mpps): more than this generator and receiver reach on a mem wire
    // on a small machine, so the top trials are generator-limited and must not pass.
    let out = ok(&run(&[
        "rfc2544",
        "-o",
        "mem:rfc-ceiling",
        "-i",
        "mem:rfc-ceiling",
        "--link-speed",
        "10Gbps",
        "--sizes",
        "64",
        "--trial",
        "50ms",
        "--settle",
        "10ms",
        "--resolution",
        "5",
        "--b2b-max",
        "0",
        "--loss-steps",
        "100",
        "--json",
    ]));
    check_rfc2544_json(&out);
    let text = ok(&run(&[
        "rfc2544",
        "-o",
        "mem:rfc-ceiling-t",
        "-i",
        "mem:rfc-ceiling-t",
        "--link-speed",
        "10Gbps",
        "--sizes",
        "64",
        "--trial",
        "20ms",
        "--settle",
        "10ms",
        "--resolution",
        "10",
        "--b2b-max",
        "0",
        "--loss-steps",
        "100",
    ]));
    assert!(
        text.contains("Generator ceiling on the output port"),
        "{text}"
    );
    assert!(
        text.contains("ceiling    64 B at unpaced: achieved"),
        "{text}"
    );
    assert!(text.contains("offered; sent "), "{text}");
}

#[test]
fn rfc2544_reports_ndr_pdr_jitter_and_each_repetition() {
    let out = ok(&run(&[
        "rfc2544",
        "-o",
        "mem:rfc-pdr",
        "-i",
        "mem:rfc-pdr",
        "--link-speed",
        "100Mbps",
        "--sizes",
        "64",
        "--trial",
        "20ms",
        "--settle",
        "10ms",
        "--resolution",
        "10",
        "--b2b-max",
        "0",
        "--loss-steps",
        "50%",
        "--loss-tolerance",
        "0.1",
        "--repeat",
        "3",
        "--src-ip",
        "10.1.0.1",
        "--dst-ip",
        "10.2.0.1",
        "--sport",
        "1234",
        "--dport",
        "4321",
        "--json",
    ]));
    check_rfc2544_json(&out);
    let s = summary(&out);
    assert_eq!(s["ended"], "complete", "{s}");
    assert_eq!(s["link_speed_from"], "--link-speed", "{s}");
    assert_eq!(s["loss_tolerance_pct"].as_f64(), Some(0.1), "{s}");
    let r = &s["results"][0];
    // On a loaded machine a debug build may pass no rate on a mem: wire (generator-limited
    // trials); the fields are there whatever, and consistent when a rate passed.
    for k in [
        "ndr_pps",
        "pdr_pps",
        "jitter_ns",
        "ndr_min_pps",
        "ndr_max_pps",
    ] {
        assert!(r.get(k).is_some(), "{k} missing: {r}");
    }
    let line = r["line_pps"].as_f64().unwrap();
    let trials = r["trials"].as_array().unwrap();
    assert_eq!(trials.len(), 3, "{r}");
    if let Some(ndr) = r["ndr_pps"].as_f64() {
        let pdr = r["pdr_pps"].as_f64().expect("a PDR where an NDR passed");
        assert!(ndr <= line && pdr <= line, "{r}");
        assert!(
            (r["ndr_pct"].as_f64().unwrap() - 100.0 * ndr / line).abs() < 1e-6,
            "{r}"
        );
        let (lo, hi) = (
            r["ndr_min_pps"].as_f64().unwrap(),
            r["ndr_max_pps"].as_f64().unwrap(),
        );
        assert!(lo <= ndr && ndr <= hi, "{r}");
        assert!(r["jitter_ns"].as_f64().is_some(), "{r}");
        for t in trials {
            if let Some(n) = t["ndr_pps"].as_f64() {
                assert!(n >= lo && n <= hi, "{r}");
                // The PDR search starts at the NDR: never below it.
                assert!(t["pdr_pps"].as_f64().unwrap() >= n, "{r}");
                assert!(t["jitter_ns"].as_f64().is_some(), "{r}");
            }
        }
    }
    // Every trial names its repetition; every frame carried the asked addresses and ports
    // (the receiver counted them as probes of the trial's stream).
    let kinds: Vec<(String, u64)> = out
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|j| j["type"] == "trial" && j["test"] == "throughput")
        .map(|j| {
            (
                j["test"].as_str().unwrap().to_string(),
                j["repeat"].as_u64().unwrap(),
            )
        })
        .collect();
    for rep in 0..3 {
        assert!(kinds.iter().any(|(_, r)| *r == rep), "{kinds:?}");
    }
    // The text: NDR and PDR columns, the repetitions' spread.
    let text = ok(&run(&[
        "rfc2544",
        "-o",
        "mem:rfc-pdr-t",
        "-i",
        "mem:rfc-pdr-t",
        "--link-speed",
        "100Mbps",
        "--sizes",
        "64",
        "--trial",
        "20ms",
        "--settle",
        "10ms",
        "--resolution",
        "10",
        "--b2b-max",
        "0",
        "--loss-steps",
        "50",
        "--loss-tolerance",
        "0.1",
        "--repeat",
        "2",
    ]));
    assert!(
        text.contains("NDR pps") && text.contains("PDR pps"),
        "{text}"
    );
    assert!(
        text.contains("2 trials: NDR median") || text.contains("no rate passed"),
        "{text}"
    );
}

#[test]
fn rfc2544_without_a_line_rate_is_refused_not_assumed() {
    // A mem: wire has no link speed: the percentages would be of a line that is not there.
    let o = run(&[
        "rfc2544",
        "-o",
        "mem:rfc-nl",
        "-i",
        "mem:rfc-nl",
        "--trial",
        "10ms",
    ]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--link-speed"), "{err}");
    assert!(o.stdout.is_empty());
    // Addresses of two families.
    let o = run(&[
        "rfc2544",
        "-o",
        "mem:rfc-nl",
        "-i",
        "mem:rfc-nl",
        "--link-speed",
        "1Gbps",
        "--src-ip",
        "10.0.0.1",
        "--dst-ip",
        "2001:db8::1",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("one family"));
    // IPv6 test frames do not fit 64 B: refused before any trial, not at the first one.
    let o = run(&[
        "rfc2544",
        "-o",
        "mem:rfc-nl",
        "-i",
        "mem:rfc-nl",
        "--link-speed",
        "1Gbps",
        "--sizes",
        "64,128",
        "--dst-ip",
        "2001:db8::2",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--sizes 64"));
    assert!(o.stdout.is_empty());
}

#[test]
fn rfc2544_refuses_a_size_twice_a_line_too_slow_and_a_tolerance_of_everything() {
    let base = [
        "rfc2544",
        "-o",
        "mem:rfc-dup",
        "-i",
        "mem:rfc-dup",
        "--link-speed",
        "1Gbps",
        "--trial",
        "10ms",
    ];
    // A size twice would run its search twice and print two rows of it.
    let o = run(&[&base[..], &["--sizes", "64,128,64"]].concat());
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("64 is named twice"), "{err}");
    assert!(err.contains("--repeat"), "{err}");
    assert!(o.stdout.is_empty());
    // A line too slow for a trial to carry frames measures nothing (1bps: line pps 0).
    for (speed, trial) in [("1bps", "1s"), ("1Mbps", "10ms")] {
        let o = run(&[
            "rfc2544",
            "-o",
            "mem:rfc-dup",
            "-i",
            "mem:rfc-dup",
            "--link-speed",
            speed,
            "--trial",
            trial,
        ]);
        assert_eq!(o.status.code(), Some(2), "{speed}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("longer --trial"), "{err}");
        assert!(o.stdout.is_empty());
    }
    // At 100 % loss tolerated every rate passes, one where nothing came back too.
    for tol in ["100", "100.0"] {
        let o = run(&[&base[..], &["--loss-tolerance", tol]].concat());
        assert_eq!(o.status.code(), Some(2), "{tol}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("--loss-tolerance"), "{err}");
        assert!(o.stdout.is_empty());
    }
}

#[test]
fn rfc2544_loss_steps_are_the_percentages_asked() {
    // At 100 Mbit/s and 1518 B, 10 % of the line read back is 9.999999999999998 %.
    let steps = ["10", "20", "40", "80"];
    let out = ok(&run(&[
        "rfc2544",
        "-o",
        "mem:rfc-steps",
        "-i",
        "mem:rfc-steps",
        "--link-speed",
        "100Mbps",
        "--sizes",
        "1518",
        "--trial",
        "10ms",
        "--settle",
        "5ms",
        "--resolution",
        "50",
        "--b2b-max",
        "0",
        "--loss-steps",
        &steps.join(","),
        "--json",
    ]));
    let s = summary(&out);
    let got: Vec<f64> = s["results"][0]["loss_pct"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p[0].as_f64().unwrap())
        .collect();
    let want: Vec<f64> = steps.iter().map(|p| p.parse().unwrap()).collect();
    // Exactly: 10, not 9.999999999999998.
    assert_eq!(got, want, "{s}");
}

#[test]
fn rfc2544_where_nothing_comes_back_says_so_and_fails() {
    // -i is not the other end of -o's wire: every frame is lost.
    let args = [
        "rfc2544",
        "-o",
        "mem:rfc-void-out",
        "-i",
        "mem:rfc-void-in",
        "--link-speed",
        "100Mbps",
        "--sizes",
        "1518",
        "--trial",
        "10ms",
        "--settle",
        "5ms",
        "--resolution",
        "50",
        "--b2b-max",
        "0",
        "--loss-steps",
        "10",
    ];
    let o = run(&args);
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{out}{err}");
    assert!(out.contains("no rate passed"), "{out}");
    assert!(
        out.contains("no test frame came back on -i mem:rfc-void-in"),
        "{out}"
    );
    assert!(err.contains("no test frame came back"), "{err}");
    let o = run(&[&args[..], &["--json"]].concat());
    assert_eq!(o.status.code(), Some(1));
    let s = summary(&String::from_utf8_lossy(&o.stdout));
    assert_eq!(s["nothing_received"], true, "{s}");
    assert_eq!(s["frames_received"], 0, "{s}");
    assert!(s["frames_sent"].as_u64().unwrap() > 0, "{s}");
    assert_eq!(s["ended"], "complete", "{s}");
    assert!(s["results"][0]["ndr_pps"].is_null(), "{s}");
}

#[test]
fn rfc2544_interrupted_says_so_and_fails() {
    let child = Command::new(bin())
        .args([
            "rfc2544",
            "-o",
            "mem:rfc-int",
            "-i",
            "mem:rfc-int",
            "--link-speed",
            "1Gbps",
            "--trial",
            "300ms",
            "--settle",
            "10ms",
            "--b2b-max",
            "0",
            "--json",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(700));
    let k = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(k.success());
    let o = child.wait_with_output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{out}");
    let s = summary(&out);
    assert_eq!(s["ended"], "interrupted", "{s}");
    assert_eq!(s["results"][0]["interrupted"], true, "{s}");
    assert!(String::from_utf8_lossy(&o.stderr).contains("interrupted"));
    // The trial under way is no pass.
    let last = out
        .lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|j| j["type"] == "trial")
        .expect("a trial ran");
    assert_eq!(last["verdict"], "interrupted", "{last}");
    assert_eq!(last["passed"], false, "{last}");
}

#[test]
fn an_unreachable_rate_is_reported_as_such() {
    // No machine makes 1 Gpps on one thread: the summary, every interval and the JSON say so.
    // The output is /dev/null as a capture file, which takes every packet at once (a `mem:`
    // wire with no reader drops what does not fit, and then the port, not the generator,
    // limits the rate; a file on disk can block on writing, a stall).
    let sink_uri = "pcap:/dev/null".to_string();
    let out = ok(&run(&[
        "gen",
        "-o",
        &sink_uri,
        "--rate",
        "1000Mpps",
        "-t",
        "600ms",
        "--interval",
        "200ms",
        "--json",
    ]));
    let s = summary(&out);
    assert_eq!(s["rate_pps"].as_f64(), Some(1e9), "{s}");
    let pps = s["pps"].as_f64().unwrap();
    assert!(pps > 0.0 && pps < 0.995e9, "{s}");
    assert_eq!(s["limited"], "generator-limited", "{s}");
    assert!(s["achieved_pct"].as_f64().unwrap() < 99.5, "{s}");
    assert_eq!(s["on_stall"], "catch-up", "{s}");
    assert!(s["precision"]["catch_up"]["gaps"].as_u64().is_some(), "{s}");
    let stats: Vec<serde_json::Value> = out
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|j| j["type"] == "stats")
        .collect();
    assert!(!stats.is_empty(), "{out}");
    for j in &stats {
        assert_eq!(j["rate_pps"].as_f64(), Some(1e9), "{j}");
        let st = j["status"].as_str().unwrap_or_default();
        assert!(st.starts_with("generator-limited"), "{j}");
    }
    let text = ok(&run(&[
        "gen", "-o", &sink_uri, "--rate", "1000Mpps", "-c", "200k",
    ]));
    let rate = text
        .lines()
        .find(|l| l.starts_with("Rate: achieved "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        rate.contains(" of 1000.000 Mpps asked (") && rate.ends_with("): generator-limited"),
        "{rate}"
    );
    assert!(text.contains("lower --rate"), "{text}");
}

#[test]
fn packets_the_port_dropped_are_not_achieved() {
    // A `mem:` wire nobody reads holds a few thousand frames and drops the rest: the run sent
    // only what the port took, and the rate achieved is that, not what was handed to it.
    let out = ok(&run(&[
        "gen",
        "-o",
        "mem:dropper",
        "--rate",
        "50kpps",
        "-c",
        "20000",
        "--json",
    ]));
    let s = summary(&out);
    let (sent, handed, drops) = (
        s["pkts"].as_u64().unwrap(),
        s["handed_to_port"].as_u64().unwrap(),
        s["port_drops"].as_u64().unwrap(),
    );
    assert_eq!(handed, 20_000, "{s}");
    assert!(drops > 0 && sent < handed, "{s}");
    assert_eq!(sent + drops, handed, "{s}");
    assert_eq!(s["limited"], "port-limited", "{s}");
    let pct = s["achieved_pct"].as_f64().unwrap();
    let taken_share = 100.0 * sent as f64 / handed as f64;
    assert!(pct < 99.5 && pct < taken_share + 5.0, "{s}");
    // Every interval that saw drops says so, and the text summary names them.
    for j in out
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|j| j["type"] == "stats")
    {
        assert!(j["pkts"].as_u64().unwrap() <= sent, "{j}");
    }
    let text = ok(&run(&[
        "gen",
        "-o",
        "mem:dropper-t",
        "--rate",
        "50kpps",
        "-c",
        "20000",
    ]));
    let line = text
        .lines()
        .find(|l| l.starts_with("Sent "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains("(of 20'000 handed to the port)"), "{line}");
    assert!(!line.starts_with("Sent 20'000 "), "{line}");
    assert!(text.contains("port-limited"), "{text}");
    assert!(text.contains("it dropped "), "{text}");
}

#[test]
fn rate_fields_agree_with_each_other() {
    // Whatever this machine achieves, the verdict matches the figures: no word when within
    // 0.5 % of the rate, the reason when not.
    for (extra, mode) in [
        (&[][..], "catch-up"),
        (&["--catch-up"][..], "catch-up"),
        (&["--no-catch-up"][..], "shift"),
        (&["--on-stall", "shift"][..], "shift"),
        (
            &[
                "--catch-up-peak",
                "8",
                "--catch-up-burst",
                "4",
                "--catch-up-window",
                "50ms",
            ][..],
            "catch-up",
        ),
    ] {
        let mut args = vec![
            "gen",
            "-o",
            "mem:agree",
            "--rate",
            "20kpps",
            "-c",
            "2000",
            "--json",
        ];
        args.extend_from_slice(extra);
        let out = ok(&run(&args));
        let s = summary(&out);
        assert_eq!(s["on_stall"], mode, "{extra:?}: {s}");
        let (asked, pps) = (s["rate_pps"].as_f64().unwrap(), s["pps"].as_f64().unwrap());
        assert_eq!(asked, 20_000.0);
        assert_eq!(s["limited"].is_null(), pps >= 0.995 * asked, "{s}");
        assert!(pps <= asked * 1.0001, "never above the asked rate: {s}");
        let start = out
            .lines()
            .find_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .unwrap();
        assert_eq!(start["type"], "start");
        assert_eq!(start["rate_pps"].as_f64(), Some(20_000.0));
    }
    // Without a rate there is nothing to fall short of.
    let s = summary(&ok(&run(&[
        "gen",
        "-o",
        "mem:agree2",
        "-c",
        "1000",
        "--json",
    ])));
    assert!(s["rate_pps"].is_null() && s["limited"].is_null(), "{s}");
}

#[test]
fn stall_flags_are_range_checked() {
    for (args, want) in [
        (&["--catch-up-peak", "1"][..], "--catch-up-peak"),
        (&["--catch-up-peak", "nan"], "--catch-up-peak"),
        (&["--catch-up-peak", "2000"], "--catch-up-peak"),
        (&["--catch-up-burst", "0"], "--catch-up-burst"),
        (&["--catch-up-burst", "1M"], "--catch-up-burst"),
        (&["--catch-up-window", "0s"], "--catch-up-window"),
        (&["--catch-up-window", "2h"], "--catch-up-window"),
        (&["--on-stall", "wait"], "--on-stall"),
        (
            &["--on-stall", "shift", "--catch-up-peak", "3"],
            "--on-stall shift",
        ),
        (
            &["--no-catch-up", "--catch-up-window", "1s"],
            "--on-stall shift",
        ),
        (&["--catch-up", "--no-catch-up"], "--no-catch-up"),
    ] {
        let mut a = vec!["gen", "-o", "mem:u", "--rate", "1kpps", "-c", "1"];
        a.extend_from_slice(args);
        let o = run(&a);
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {e}");
        assert!(e.starts_with("linerate: error:"), "{e}");
        assert!(e.contains(want), "{args:?}: {e}");
    }
}

#[test]
fn gen_balance_and_lab_read_a_rate_alike() {
    // Taken by all three: a unit in capitals, a space before it, bits per second spelled out.
    let pcap = tmp("rate-syntax.pcap");
    let pcap = format!("pcap:{}", pcap.display());
    for r in ["50KPPS", "100 kpps", "1.5Mpps", "100Mbit/s"] {
        let g = run(&["gen", "-o", &pcap, "-c", "2", "-q", "--rate", r]);
        assert!(g.status.success(), "gen {r}: {g:?}");
        let b = run(&["balance", "-i", "source:1", "--source-rate", r, "--help"]);
        assert!(b.status.success(), "balance {r}: {b:?}");
        let l = run(&["lab", "--rate", r, "--help"]);
        assert!(l.status.success(), "lab {r}: {l:?}");
    }
    // Bytes or bits: refused by all three with the same reason, not read 8 times off.
    for args in [
        &["gen", "-o", &pcap, "-c", "2", "--rate", "5GBPS"][..],
        &[
            "balance",
            "-i",
            "source:1",
            "--source-rate",
            "5GBPS",
            "--help",
        ],
        &["lab", "--rate", "5GBPS", "--help"],
    ] {
        let o = run(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("small b"), "{args:?}: {err}");
    }
    // A bare number: gen and lab name the units it lacks (packets or bits?).
    for args in [
        &["gen", "-o", &pcap, "-c", "2", "--rate", "50000"][..],
        &["lab", "--rate", "50000", "--help"],
    ] {
        let o = run(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("50000pps"), "{args:?}: {err}");
    }
}

#[test]
fn gen_a_percentage_needs_a_line() {
    // A mem: port has no link speed: 80 % of an assumed 10 Gbit/s was sent as 11.9 Mpps.
    let o = run(&["gen", "-o", "mem:pct", "--rate", "80%", "-c", "10"]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("--link-speed") && err.contains("no link speed"),
        "{err}"
    );
    assert!(o.stdout.is_empty());
    // With the line named it is a rate: 80 % of 1 Gbit/s at 64 B is 1'190'476 pps.
    let out = ok(&run(&[
        "gen",
        "-o",
        "mem:pct",
        "--rate",
        "80%",
        "--link-speed",
        "1Gbps",
        "-c",
        "10",
        "--json",
    ]));
    let start: serde_json::Value = out
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|j| j["type"] == "start")
        .expect("start line");
    let pps = start["rate_pps"].as_f64().unwrap();
    assert!((pps - 1_190_476.19).abs() < 1.0, "{start}");
}

//! `linerate flows` end to end on examples/sample.pcap: output formats, fields, the summary,
//! status records and a full table (records still add up to the totals), threads giving the same
//! records as one thread, and usage errors.
#![deny(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn sample() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/sample.pcap")
}

fn flows(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_linerate"))
        .arg("flows")
        .args(args)
        .output()
        .unwrap()
}

fn ok(args: &[&str]) -> (String, String) {
    let o = flows(args);
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    (
        String::from_utf8_lossy(&o.stdout).into(),
        String::from_utf8_lossy(&o.stderr).into(),
    )
}

fn summary(stderr: &str) -> serde_json::Value {
    serde_json::from_str(stderr.lines().last().unwrap()).unwrap()
}

/// Sum of spkts+dpkts and sbytes+dbytes over CSV rows whose first columns are those four.
fn totals(csv: &str) -> (u64, u64, usize) {
    let mut p = 0;
    let mut b = 0;
    let mut n = 0;
    for l in csv.lines().skip(1) {
        let c: Vec<u64> = l.split(',').take(4).map(|x| x.parse().unwrap()).collect();
        p += c[0] + c[1];
        b += c[2] + c[3];
        n += 1;
    }
    (p, b, n)
}

#[test]
fn text_csv_and_jsonl() {
    let s = sample();
    let s = s.to_str().unwrap();
    let (out, err) = ok(&["-i", s]);
    let mut lines = out.lines();
    let header = lines.next().unwrap();
    for h in [
        "StartTime",
        "Flgs",
        "Proto",
        "SrcAddr",
        "Sport",
        "Dir",
        "DstAddr",
        "Dport",
        "SrcPkts",
    ] {
        assert!(header.contains(h), "{header}");
    }
    for h in [
        "DstPkts",
        "SrcBytes",
        "DstBytes",
        "State",
        "Dur",
        "SrcTCPFlags",
        "IcmpType",
        "EndReason",
    ] {
        assert!(header.contains(h), "{header}");
    }
    assert_eq!(lines.count(), 72);
    assert!(out.contains(" tcp ") && out.contains(" FIN ") && out.contains(" ECO "));
    assert!(err.contains("Summary: 2'000 pkts"), "{err}");
    assert!(err.contains("non_ip 200"), "{err}");

    let dir = std::env::temp_dir().join(format!("linerate-flows-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let csv = dir.join("f.csv");
    ok(&[
        "-q",
        "-i",
        s,
        "-w",
        csv.to_str().unwrap(),
        "--fields",
        "proto,saddr,daddr,spkts,state",
    ]);
    let text = std::fs::read_to_string(&csv).unwrap();
    assert_eq!(text.lines().next(), Some("proto,saddr,daddr,spkts,state"));
    assert!(
        text.lines().any(|l| l == "tcp,15.0.5.1,192.0.2.6,4,FIN"),
        "{text}"
    );

    let jl = dir.join("f.jsonl");
    ok(&["-q", "-i", s, "-w", jl.to_str().unwrap(), "--fields", "all"]);
    let text = std::fs::read_to_string(&jl).unwrap();
    let mut pk = 0;
    for l in text.lines() {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        pk += v["spkts"].as_u64().unwrap() + v["dpkts"].as_u64().unwrap();
        assert!(v["stime"].as_f64().unwrap() >= 1.7e9);
        assert!(["idle", "active", "end", "forced", "resources"]
            .contains(&v["reason"].as_str().unwrap()));
    }
    assert_eq!(pk, 1800);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn json_summary_accounts_for_every_packet() {
    let s = sample();
    let (_, err) = ok(&["-i", s.to_str().unwrap(), "-w", "/dev/null", "--json"]);
    let j = summary(&err);
    assert_eq!(j["packets"], 2000);
    assert_eq!(j["not_flow"]["non_ip"], 200);
    assert_eq!(j["flow_packets"], 1800);
    assert_eq!(j["flows"], 72);
    assert_eq!(j["records"], 72);
    assert!(j["bytes_per_flow"].as_u64().unwrap() <= 200);
    assert_eq!(j["ended"], "end of input");
}

/// `-f udp`: the filter runs before flow accounting; what it rejects is counted `filtered`, and
/// the records are the UDP ones of an unfiltered run, on one thread and on three.
#[test]
fn filter_keeps_udp_flows_and_counts_the_rest_filtered() {
    let s = sample();
    let s = s.to_str().unwrap();
    let f = [
        "--fields",
        "proto,saddr,sport,daddr,dport,spkts,dpkts,sbytes,dbytes",
    ];
    let (all, _) = ok(&[&["-q", "-i", s, "--format", "csv"][..], &f].concat());
    // Unfiltered, the UDP headers quoted in ICMP port unreachables make 4 more UDP records
    // (as in tshark's conv,udp); the filter `udp` passes no ICMP.
    let udp: Vec<&str> = all.lines().filter(|l| l.starts_with("udp,")).collect();
    assert_eq!(udp.len(), 28);
    for threads in ["1", "3"] {
        let (out, err) = ok(&[
            &[
                "-i",
                s,
                "--format",
                "csv",
                "--json",
                "-f",
                "udp",
                "--threads",
                threads,
            ][..],
            &f,
        ]
        .concat());
        let got: Vec<&str> = out.lines().skip(1).collect();
        assert_eq!(got.len(), 24, "--threads {threads}: {out}");
        assert!(
            got.iter().all(|l| udp.contains(l)),
            "--threads {threads}: {out}"
        );
        let j = summary(&err);
        assert_eq!(j["packets"], 2000);
        // tcpdump -r sample.pcap udp: 1200 packets.
        assert_eq!(j["filtered"], 800);
        assert_eq!(j["flow_packets"], 1200);
        assert_eq!(j["flows"], 24);
    }
    let (_, err) = ok(&["-i", s, "-w", "/dev/null", "-f", "udp"]);
    assert!(err.contains("Filtered: 800 pkts"), "{err}");
    let (_, err) = ok(&["-i", s, "-w", "/dev/null", "--json"]);
    assert_eq!(summary(&err)["filtered"], 0);
}

#[test]
fn status_records_and_a_full_table_keep_the_totals() {
    let s = sample();
    let s = s.to_str().unwrap();
    let f = [
        "--fields",
        "spkts,dpkts,sbytes,dbytes,reason",
        "-w",
        "-",
        "--format",
        "csv",
        "--json",
    ];
    let (base, _) = ok(&[&["-i", s][..], &f].concat());
    let (bp, bb, bn) = totals(&base);
    assert_eq!((bp, bn), (1800, 72));

    let (st, err) = ok(&[&["-i", s, "--status-interval", "500ms"][..], &f].concat());
    let (p, b, n) = totals(&st);
    assert_eq!((p, b), (bp, bb));
    assert!(n > bn, "status records cut the long flows: {n} records");
    assert!(st.contains(",active"));
    assert!(
        summary(&err)["records_by_reason"]["active"]
            .as_u64()
            .unwrap()
            > 0
    );

    let (full, err) = ok(&[&["-i", s, "--max-flows", "8"][..], &f].concat());
    let (p, b, _) = totals(&full);
    assert_eq!((p, b), (bp, bb));
    let j = summary(&err);
    assert!(j["evicted"].as_u64().unwrap() > 0);
    assert!(full.contains(",resources"));
    assert!(j["max_active"].as_u64().unwrap() <= 8);

    let (idle, _) = ok(&[&["-i", s, "--idle-timeout", "20ms"][..], &f].concat());
    let (p, b, _) = totals(&idle);
    assert_eq!((p, b), (bp, bb));
    assert!(idle.contains(",idle"));
}

#[test]
fn two_threads_give_the_same_records() {
    let s = sample();
    let s = s.to_str().unwrap();
    let f = [
        "--fields",
        "stime,ltime,proto,saddr,sport,daddr,dport,spkts,dpkts,sbytes,dbytes,state,reason",
    ];
    let sorted = |t: String| {
        let mut v: Vec<String> = t.lines().map(String::from).collect();
        v.sort();
        v
    };
    let (one, _) = ok(&[&["-q", "-i", s, "--format", "csv"][..], &f].concat());
    let (two, _) = ok(&[
        &["-q", "-i", s, "--format", "csv", "--threads", "2"][..],
        &f,
    ]
    .concat());
    let (three, _) = ok(&[
        &["-q", "-i", s, "--format", "csv", "--threads", "3"][..],
        &f,
    ]
    .concat());
    assert_eq!(sorted(one.clone()), sorted(two));
    assert_eq!(sorted(one), sorted(three));
}

/// With threads, each thread formats its own records' lines (the writer only writes them): in
/// every format and with every field, the lines are those of one thread, the header first and
/// once.
#[test]
fn threads_format_their_records_as_one_thread_does() {
    let s = sample();
    let s = s.to_str().unwrap();
    for format in ["text", "csv", "jsonl"] {
        let args = ["-q", "-i", s, "--format", format, "--fields", "all"];
        let (one, _) = ok(&args);
        let (two, _) = ok(&[&args[..], &["--threads", "2"]].concat());
        assert!(one.lines().count() > 5, "{format}: {one}");
        if format != "jsonl" {
            assert_eq!(one.lines().next(), two.lines().next(), "{format}: header");
        }
        let mut a: Vec<&str> = one.lines().collect();
        let mut b: Vec<&str> = two.lines().collect();
        a.sort_unstable();
        b.sort_unstable();
        assert_eq!(a, b, "{format}");
    }
}

#[test]
fn usage_errors_exit_2() {
    let s = sample();
    let s = s.to_str().unwrap();
    for args in [
        vec!["-i", s, "--fields", "saddr,nope"],
        vec!["-i", s, "--threads", "0"],
        vec!["-i", s, "--format", "xml"],
        vec!["-i", "/nonexistent/x.pcap"],
        vec!["-i", s, "--ipfix", "no-such-host.invalid:4739"],
        vec!["-i", s, "-g", "4095"],
        vec!["-i", s, "-g", "4096"],
        vec!["-i", s, "-g", "0", "--threads", "2"],
        vec!["-i", s, "-f", "udp or"],
        vec!["-i", s, "-f", "no_such_keyword"],
    ] {
        let o = flows(&args);
        assert_eq!(
            o.status.code(),
            Some(2),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(e.starts_with("linerate: error:"), "{e}");
    }
}

/// A filter libpcap cannot parse is a usage error found before any output is touched: the `-w`
/// file a user already had keeps its bytes (tcpdump refuses `-f 'udp and and'` the same way).
#[test]
fn bad_filter_leaves_an_existing_output() {
    let s = sample();
    let s = s.to_str().unwrap();
    let d = std::env::temp_dir().join(format!("linerate-flows-badf-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    let keep = d.join("keep.csv");
    std::fs::write(&keep, b"precious\n").unwrap();
    for f in ["udp and and", "no_such_keyword"] {
        let o = flows(&["-i", s, "-w", keep.to_str().unwrap(), "-f", f]);
        assert_eq!(o.status.code(), Some(2), "{f}");
        assert_eq!(
            std::fs::read(&keep).unwrap(),
            b"precious\n",
            "-f '{f}' changed -w"
        );
    }
    std::fs::remove_dir_all(&d).unwrap();
}

/// `-g CORE` pins the packet thread: the records are the same as unpinned (a core that does
/// not exist, or -g with --threads, is a usage error: `usage_errors_exit_2`).
#[test]
fn pinned_packet_thread_gives_the_same_records() {
    let s = sample();
    let s = s.to_str().unwrap();
    let (free, _) = ok(&["-i", s, "--format", "csv"]);
    let (pinned, _) = ok(&["-i", s, "--format", "csv", "-g", "0"]);
    assert_eq!(free, pinned);
    assert!(free.lines().count() > 1);
}

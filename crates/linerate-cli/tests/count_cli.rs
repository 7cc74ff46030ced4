//! `linerate count` end to end on capture files: statistics, limits, filters, recording,
//! truncated input and usage errors.
#![deny(unsafe_code)]

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

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

fn summary(o: &Output) -> serde_json::Value {
    let out = String::from_utf8_lossy(&o.stdout);
    let line = out
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("json"))
        .find(|j| j["type"] == "summary")
        .unwrap_or_else(|| panic!("no summary in {out}"));
    line
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("linerate-cli-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

#[test]
fn counts_every_packet_of_the_sample() {
    let o = run(&["count", "-i", sample().to_str().unwrap(), "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s = summary(&o);
    assert_eq!(s["pkts"], 2000);
    assert_eq!(s["drops"], 0);
    assert_eq!(s["ended"], "end of input");
    let bytes: u64 = std::fs::metadata(sample()).unwrap().len() - 24 - 2000 * 16;
    assert_eq!(s["bytes"], bytes);
}

#[test]
fn text_output_has_pfcount_blocks() {
    let o = run(&["count", "-i", &format!("pcap:{}", sample().display())]);
    assert!(o.status.success());
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("Absolute Stats: [2'000 pkts rcvd][0 pkts dropped]"),
        "{out}"
    );
    assert!(out.contains("Total Pkts=2'000/Dropped=0.0 %"), "{out}");
    assert!(out.contains("Actual Stats:"), "{out}");
    assert!(out.contains("Summary: 2'000 pkts"), "{out}");
}

#[test]
fn stops_at_count() {
    let o = run(&[
        "count",
        "-i",
        sample().to_str().unwrap(),
        "-c",
        "123",
        "--json",
    ]);
    assert!(o.status.success());
    let s = summary(&o);
    assert_eq!(s["pkts"], 123);
    assert_eq!(s["ended"], "count reached");
}

#[test]
fn filter_matches_tcpdump() {
    for expr in ["udp", "tcp and port 80", "icmp", "ip6", "vlan", "arp"] {
        let o = run(&[
            "count",
            "-i",
            sample().to_str().unwrap(),
            "-f",
            expr,
            "--json",
        ]);
        assert!(
            o.status.success(),
            "{expr}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let s = summary(&o);
        let pkts = s["pkts"].as_u64().unwrap();
        assert_eq!(
            pkts + s["drops_by_reason"]["filter"].as_u64().unwrap(),
            2000,
            "{expr}"
        );
        if let Ok(t) = Command::new("tcpdump")
            .args(["-nr", sample().to_str().unwrap(), expr])
            .output()
        {
            let n = String::from_utf8_lossy(&t.stdout).lines().count() as u64;
            assert_eq!(pkts, n, "filter '{expr}': linerate {pkts}, tcpdump {n}");
        }
    }
}

#[test]
fn records_the_same_bytes() {
    let out = tmp("rec.pcap");
    let o = run(&[
        "count",
        "-i",
        sample().to_str().unwrap(),
        "-q",
        "-w",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // same link type, snap length and microsecond timestamps: the file is byte-identical
    assert!(
        std::fs::read(&out).unwrap() == std::fs::read(sample()).unwrap(),
        "recorded pcap differs"
    );
    let o = run(&[
        "count",
        "-i",
        sample().to_str().unwrap(),
        "-q",
        "-f",
        "udp",
        "-w",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success());
    if let Ok(t) = Command::new("tcpdump")
        .args(["-nr", out.to_str().unwrap()])
        .output()
    {
        let n = String::from_utf8_lossy(&t.stdout).lines().count();
        let want = String::from_utf8_lossy(
            &Command::new("tcpdump")
                .args(["-nr", sample().to_str().unwrap(), "udp"])
                .output()
                .unwrap()
                .stdout,
        )
        .lines()
        .count();
        assert_eq!(n, want);
    }
}

/// A file of ours that only we can write is read in place (mapped, no copy: its records are
/// written from the mapping); a group-writable one is read by copying: both record the input
/// byte for byte, filtered or not, cut by -c or -s, packet-buffered (-U) or not.
#[test]
fn records_the_same_bytes_read_in_place_or_by_copying() {
    use std::os::unix::fs::PermissionsExt;
    let input = tmp("in-place.pcap");
    std::fs::write(&input, std::fs::read(sample()).unwrap()).unwrap();
    let extras: [&[&str]; 4] = [&[], &["-c", "7"], &["-s", "64"], &["-U"]];
    let mut outs = Vec::new();
    for mode in [0o644, 0o664] {
        std::fs::set_permissions(&input, std::fs::Permissions::from_mode(mode)).unwrap();
        for (k, extra) in extras.iter().enumerate() {
            for filter in [None, Some("udp")] {
                let out = tmp(&format!("in-place-{mode:o}-{k}-{}.pcap", filter.is_some()));
                let mut args = vec!["count", "-i", input.to_str().unwrap(), "-q", "--json"];
                args.extend(["-w", out.to_str().unwrap()]);
                args.extend(extra.iter());
                if let Some(f) = filter {
                    args.extend(["-f", f]);
                }
                let o = run(&args);
                assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
                let s = summary(&o);
                outs.push((filter, s["pkts"].clone(), std::fs::read(&out).unwrap()));
            }
        }
    }
    assert!(
        outs[0].2 == std::fs::read(sample()).unwrap(),
        "read in place: a copy"
    );
    assert_eq!(outs[0].1, 2000);
    let half = outs.len() / 2;
    for i in 0..half {
        assert!(outs[i] == outs[i + half], "run {i}: the same either way");
    }
    assert!(outs[1].2.len() < outs[0].2.len(), "the filter kept fewer");
    assert_eq!(outs[2].1, 7, "-c 7");
    assert!(outs[4].2.len() < outs[0].2.len(), "-s 64 cut records");
    assert!(outs[6] == outs[0], "-U: the same file");
}

#[test]
fn pcap_to_stdout_pipes_into_tcpdump() {
    if Command::new("tcpdump").arg("--version").output().is_err() {
        linerate_test_support::skip("tcpdump is not installed (apt-get install tcpdump)");
        return;
    }
    let mut lr = Command::new(bin())
        .args(["count", "-i", sample().to_str().unwrap(), "-w", "-"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let td = Command::new("tcpdump")
        .args(["-nr", "-"])
        .stdin(lr.stdout.take().unwrap())
        .output()
        .unwrap();
    let st = lr.wait_with_output().unwrap();
    assert!(st.status.success());
    assert_eq!(String::from_utf8_lossy(&td.stdout).lines().count(), 2000);
    // statistics went to stderr
    assert!(String::from_utf8_lossy(&st.stderr).contains("Summary: 2'000 pkts"));
}

#[test]
fn truncated_file_counts_what_it_read_then_names_file_and_offset() {
    let data = std::fs::read(sample()).unwrap();
    // cut in the middle of the 11th record
    let mut off = 24usize;
    for _ in 0..10 {
        let caplen = u32::from_le_bytes(data[off + 8..off + 12].try_into().unwrap()) as usize;
        off += 16 + caplen;
    }
    let cut = tmp("cut.pcap");
    std::fs::write(&cut, &data[..off + 20]).unwrap();
    let o = run(&["count", "-i", cut.to_str().unwrap(), "--json"]);
    assert_eq!(o.status.code(), Some(1));
    let s = summary(&o);
    assert_eq!(s["pkts"], 10);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(cut.to_str().unwrap()) && err.contains("offset"),
        "{err}"
    );
    assert!(
        err.contains(&off.to_string()),
        "offset {off} not named: {err}"
    );
}

#[test]
fn usage_errors_exit_2_with_one_line() {
    for args in [
        vec!["count"],
        vec!["count", "-i", sample().to_str().unwrap(), "-c", "lots"],
        vec!["count", "-i", "/nonexistent/file.pcap"],
        vec!["count", "-i", "afpacket:nosuchif0"],
        vec!["count", "-i", "bogus:thing"],
        vec![
            "count",
            "-i",
            sample().to_str().unwrap(),
            "-f",
            "udp port banana",
        ],
        vec!["count", "-i", sample().to_str().unwrap(), "--no-such-flag"],
    ] {
        let o = run(&args);
        assert_eq!(
            o.status.code(),
            Some(2),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!err.trim().is_empty(), "{args:?}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

/// `linerate count -i pcap:F` on every capture of tcpdump's test suite, whole and cut short:
/// never a panic or a hang; a clean file exits 0, a broken one exits 1 naming file and offset.
#[test]
fn gets_through_the_tcpdump_corpus() {
    let Some(dir) = linerate_test_support::corpus() else {
        return;
    };
    let rd = std::fs::read_dir(&dir).expect("read the corpus folder");
    let mut files: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
    files.sort();
    let cut = tmp("cut-corpus.pcap");
    let (mut clean, mut broken) = (0, 0);
    for f in &files {
        let data = std::fs::read(f).unwrap();
        std::fs::write(&cut, &data[..data.len() * 2 / 3]).unwrap();
        for (path, whole) in [(f.clone(), true), (cut.clone(), false)] {
            let t = std::time::Instant::now();
            let o = run(&["count", "-q", "-i", &format!("pcap:{}", path.display())]);
            assert!(
                t.elapsed().as_secs() < 10,
                "{} took {:?}",
                f.display(),
                t.elapsed()
            );
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(!err.contains("panicked"), "{}: {err}", f.display());
            match o.status.code() {
                Some(0) => clean += 1,
                Some(1) => {
                    assert!(
                        err.contains(path.to_str().unwrap()) && err.contains("offset"),
                        "{err}"
                    );
                    // a file broken inside its header fails at open; otherwise what was read is
                    // summed up before the error
                    assert!(
                        err.contains("opening")
                            || String::from_utf8_lossy(&o.stdout).contains("Summary:"),
                        "{err}"
                    );
                    broken += 1;
                }
                c => panic!("{} (whole: {whole}): exit {c:?}: {err}", f.display()),
            }
        }
    }
    eprintln!(
        "corpus through the CLI: {} files, {clean} clean runs, {broken} ended with an error",
        files.len()
    );
    assert!(files.len() >= 830);
    assert!(clean >= files.len(), "every whole file reads clean");
}

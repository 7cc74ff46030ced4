//! Capture and record outputs as tcpdump and dumpcap users expect them: an existing file is
//! left byte for byte when a flag or an input is wrong; packets reach the file as they are
//! captured (`--flush-interval`, `-U`); files rotate with `-C`, `-G`, `-W`, `-z`, `-b` and
//! `--disk-budget`.
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

/// A fresh directory of this test.
fn dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("linerate-out-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A file holding the sample's bytes, which a failed run must leave as they are.
fn precious(d: &Path) -> (PathBuf, Vec<u8>) {
    let p = d.join("keep.pcap");
    let bytes = std::fs::read(sample()).unwrap();
    std::fs::write(&p, &bytes).unwrap();
    (p, bytes)
}

/// Runs `args` (where `KEEP` stands for the precious file) and checks the usage error left the
/// file byte for byte.
fn refused_and_kept(tag: &str, args: &[&str]) {
    let d = dir(tag);
    let (keep, bytes) = precious(&d);
    let k = keep.to_str().unwrap();
    let args: Vec<&str> = args
        .iter()
        .map(|a| if *a == "KEEP" { k } else { a })
        .collect();
    let o = run(&args);
    assert_eq!(
        o.status.code(),
        Some(2),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(
        std::fs::read(&keep).unwrap(),
        bytes,
        "{args:?} changed KEEP"
    );
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn gen_leaves_an_existing_output_when_a_flag_is_wrong() {
    refused_and_kept("gen", &["gen", "-o", "KEEP", "-c", "5", "--vlan", "99999"]);
    // An output that did not exist is not left behind either.
    let d = dir("gen-new");
    let new = d.join("new.pcap");
    let o = run(&[
        "gen",
        "-o",
        new.to_str().unwrap(),
        "-c",
        "5",
        "--vlan",
        "99999",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(!new.exists(), "a refused run left {}", new.display());
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn count_leaves_an_existing_output_when_a_flag_is_wrong() {
    let s = sample();
    let s = s.to_str().unwrap();
    refused_and_kept(
        "count",
        &["count", "-i", s, "-w", "KEEP", "--metrics", "nonsense"],
    );
    refused_and_kept(
        "count-in",
        &["count", "-i", "/nonexistent.pcap", "-w", "KEEP"],
    );
}

#[test]
fn balance_leaves_existing_outputs_when_a_flag_is_wrong() {
    let s = sample();
    let s = s.to_str().unwrap();
    let id = (std::process::id() % 1000 + 3000).to_string();
    refused_and_kept(
        "balance-r",
        &[
            "balance",
            "-i",
            s,
            "-n",
            "2",
            "-c",
            &id,
            "-r",
            "0:KEEP",
            "-r",
            "5:other.pcap",
        ],
    );
    refused_and_kept(
        "balance-o",
        &[
            "balance",
            "-i",
            s,
            "-n",
            "2",
            "-c",
            &id,
            "-o",
            "KEEP",
            "--metrics",
            "nonsense",
        ],
    );
}

#[test]
fn fwd_leaves_an_existing_output_when_a_flag_is_wrong() {
    let s = sample();
    let s = s.to_str().unwrap();
    refused_and_kept(
        "fwd",
        &["fwd", "-i", s, "-o", "KEEP", "--metrics", "nonsense"],
    );
}

#[test]
fn flows_leaves_an_existing_output_when_a_flag_is_wrong() {
    let s = sample();
    let s = s.to_str().unwrap();
    refused_and_kept(
        "flows",
        &["flows", "-i", s, "-w", "KEEP", "--ipfix", "127.0.0.1:0"],
    );
}

/// The records of a classic pcap file (native byte order, as linerate writes): each record's
/// bytes, header included; None when the file is not whole.
fn records(bytes: &[u8]) -> Option<Vec<Vec<u8>>> {
    if bytes.len() < 24 {
        return None;
    }
    let mut v = Vec::new();
    let mut at = 24;
    while at < bytes.len() {
        let h = bytes.get(at..at + 16)?;
        let cap = u32::from_ne_bytes(h[8..12].try_into().unwrap()) as usize;
        v.push(bytes.get(at..at + 16 + cap)?.to_vec());
        at += 16 + cap;
    }
    Some(v)
}

/// Packets tcpdump reads from `path` (None when tcpdump refuses the file).
fn tcpdump_count(path: &Path) -> Option<usize> {
    let o = Command::new("tcpdump")
        .args(["-n", "-r"])
        .arg(path)
        .output()
        .expect("tcpdump (scripts/setup.sh --tests installs it)");
    o.status
        .success()
        .then(|| String::from_utf8_lossy(&o.stdout).lines().count())
}

/// A paced source (`gen` at 10 pps on standard output) piped into `count -w FILE` with
/// `extra` flags on both; returns both children.
fn paced_capture(file: &Path, extra: &[&str]) -> (std::process::Child, std::process::Child) {
    use std::process::Stdio;
    let mut g = Command::new(bin())
        .args(["gen", "-o", "-", "--rate", "10pps", "-t", "8s", "-q"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("run gen");
    let c = Command::new(bin())
        .args(["count", "-i", "-", "-q", "-w", file.to_str().unwrap()])
        .args(extra)
        .stdin(g.stdout.take().unwrap())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("run count");
    (g, c)
}

#[test]
fn a_slow_capture_reaches_the_file_every_second_and_survives_kill_9() {
    let d = dir("live");
    let f1 = d.join("flush.pcap");
    let f2 = d.join("unbuffered.pcap");
    let (mut g1, mut c1) = paced_capture(&f1, &[]);
    let (mut g2, mut c2) = paced_capture(&f2, &["-U"]);
    std::thread::sleep(std::time::Duration::from_millis(3200));
    let n1 = records(&std::fs::read(&f1).unwrap()).map(|r| r.len());
    let n2 = records(&std::fs::read(&f2).unwrap()).map(|r| r.len());
    // kill -9: what reached the file stays readable.
    c1.kill().unwrap();
    c2.kill().unwrap();
    let _ = c1.wait();
    let _ = c2.wait();
    let _ = g1.kill();
    let _ = g2.kill();
    let _ = g1.wait();
    let _ = g2.wait();
    let n1 = n1.expect("the file is whole while written");
    let n2 = n2.expect("the file is whole while written");
    assert!(
        n1 >= 15,
        "--flush-interval 1s: {n1} packets after 3 s at 10 pps"
    );
    assert!(n2 >= 25, "-U: {n2} packets after 3 s at 10 pps");
    for f in [&f1, &f2] {
        let n = tcpdump_count(f).expect("tcpdump reads a capture killed with SIGKILL");
        assert!(n >= 15, "{}: {n} packets after kill -9", f.display());
    }
    std::fs::remove_dir_all(&d).unwrap();
}

/// A capture of `n` packets of 1000 bytes to rotate.
fn big_input(d: &Path, n: &str) -> PathBuf {
    let p = d.join("input.pcap");
    let o = run(&[
        "gen",
        "-o",
        p.to_str().unwrap(),
        "-c",
        n,
        "--size",
        "64-1518",
        "-q",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    p
}

/// The files of `d` whose names start with `prefix`, by name.
fn files(d: &Path, prefix: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_str().unwrap().starts_with(prefix))
        .collect();
    v.sort();
    v
}

#[test]
fn count_c_rotates_into_whole_files_that_add_up_to_the_input() {
    let d = dir("rot-c");
    let input = big_input(&d, "3000");
    let want = records(&std::fs::read(&input).unwrap()).unwrap();
    let out = d.join("r.pcap");
    let o = run(&[
        "count",
        "-i",
        input.to_str().unwrap(),
        "-w",
        out.to_str().unwrap(),
        "-C",
        "1",
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // tcpdump's names: r.pcap, r.pcap1, r.pcap2, ...
    let mut names = vec![out.clone()];
    let mut k = 1;
    while d.join(format!("r.pcap{k}")).exists() {
        names.push(d.join(format!("r.pcap{k}")));
        k += 1;
    }
    assert!(names.len() >= 2, "{names:?}");
    assert_eq!(files(&d, "r.pcap").len(), names.len());
    let mut got = Vec::new();
    for f in &names {
        let bytes = std::fs::read(f).unwrap();
        let recs = records(&bytes).expect("every file whole");
        let last = recs.last().map_or(0, |r| r.len());
        assert!(
            bytes.len() as u64 <= 1_000_000 + last as u64,
            "{}",
            f.display()
        );
        assert_eq!(tcpdump_count(f), Some(recs.len()), "{}", f.display());
        got.extend(recs);
    }
    assert_eq!(got.len(), want.len());
    assert!(got == want, "the files in order are the input");
    // Each rotation is in the --json output.
    let out = String::from_utf8_lossy(&o.stdout);
    let rotations = out
        .lines()
        .filter(|l| l.contains("\"type\":\"rotate\""))
        .count();
    assert_eq!(rotations, names.len() - 1, "{out}");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn count_c_w_keeps_a_ring_of_files_and_b_is_dumpcaps() {
    let d = dir("rot-w");
    let input = big_input(&d, "6000");
    let o = run(&[
        "count",
        "-i",
        input.to_str().unwrap(),
        "-w",
        d.join("w.pcap").to_str().unwrap(),
        "-C",
        "1",
        "-W",
        "3",
        "-q",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let got = files(&d, "w.pcap");
    let names: Vec<_> = got
        .iter()
        .map(|p| p.file_name().unwrap().to_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["w.pcap0", "w.pcap1", "w.pcap2"]);
    for f in &got {
        assert!(tcpdump_count(f).is_some_and(|n| n > 0), "{}", f.display());
    }
    // dumpcap's -b filesize (kB) and files.
    let o = run(&[
        "count",
        "-i",
        input.to_str().unwrap(),
        "-w",
        d.join("b.pcap").to_str().unwrap(),
        "-b",
        "filesize:500",
        "-b",
        "files:2",
        "-q",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // dumpcap's names, a new one for each file: b_NNNNN_YYYYmmddHHMMSS.pcap; the last 2 stay.
    let names: Vec<_> = files(&d, "b")
        .iter()
        .map(|p| p.file_name().unwrap().to_str().unwrap().to_string())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    for n in &names {
        assert!(dumpcap_named(n, "b", ".pcap"), "{n}");
    }
    assert!(!names[0].starts_with("b_00001_"), "{names:?}");
    std::fs::remove_dir_all(&d).unwrap();
}

/// Whether `name` is dumpcap's PREFIX_NNNNN_YYYYmmddHHMMSS.EXT.
fn dumpcap_named(name: &str, prefix: &str, ext: &str) -> bool {
    let Some(mid) = name
        .strip_prefix(prefix)
        .and_then(|r| r.strip_suffix(ext))
        .and_then(|r| r.strip_prefix('_'))
    else {
        return false;
    };
    let b = mid.as_bytes();
    b.len() == 5 + 1 + 14
        && b[5] == b'_'
        && b[..5].iter().chain(&b[6..]).all(|c| c.is_ascii_digit())
}

#[test]
fn b_duration_names_each_file_as_dumpcap_and_files_keeps_the_last_ones() {
    use std::process::Stdio;
    let d = dir("rot-b");
    let mut g = Command::new(bin())
        .args(["gen", "-o", "-", "--rate", "20pps", "-t", "4s", "-q", "-U"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("run gen");
    let out = d.join("r.pcap");
    let c = Command::new(bin())
        .args(["count", "-i", "-", "-w", out.to_str().unwrap()])
        .args(["-b", "duration:1", "-b", "files:2", "--json"])
        .stdin(g.stdout.take().unwrap())
        .stderr(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run count");
    let o = c.wait_with_output().unwrap();
    g.wait().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let stdout = String::from_utf8_lossy(&o.stdout);
    // The capture went on to the end of the source (4 s: 4 or 5 files, each a new name).
    let rotations: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains("\"type\":\"rotate\""))
        .collect();
    assert!(rotations.len() >= 3, "{stdout}");
    assert!(!out.exists(), "no file under the bare name");
    let names: Vec<_> = files(&d, "r")
        .iter()
        .map(|p| p.file_name().unwrap().to_str().unwrap().to_string())
        .collect();
    assert_eq!(names.len(), 2, "files:2 keeps the last two: {names:?}");
    for n in &names {
        assert!(dumpcap_named(n, "r", ".pcap"), "{n}");
    }
    // Their numbers are the last ones of the run, and together they hold packets.
    let last: u64 = names[1][2..7].parse().unwrap();
    assert_eq!(last as usize, rotations.len() + 1, "{names:?}");
    let total: usize = files(&d, "r")
        .iter()
        .map(|f| tcpdump_count(f).expect("whole file"))
        .sum();
    assert!(total >= 20, "{total}");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn pcapng_files_rotate_whole_and_z_runs_on_each() {
    let d = dir("rot-ng");
    let input = big_input(&d, "3000");
    let log = d.join("z.log");
    let script = d.join("post.sh");
    std::fs::write(
        &script,
        format!("#!/bin/sh\necho \"$1\" >> {}\n", log.display()),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let o = run(&[
        "count",
        "-i",
        input.to_str().unwrap(),
        "-w",
        // A name a shell would split: -z runs the program directly, never through a shell.
        d.join("n x;.pcapng").to_str().unwrap(),
        "-C",
        "1",
        "-z",
        script.to_str().unwrap(),
        "-q",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let got = files(&d, "n x;.pcapng");
    assert!(got.len() >= 2, "{got:?}");
    let mut total = 0;
    for f in &got {
        let c = Command::new("capinfos")
            .args(["-c", "-M"])
            .arg(f)
            .output()
            .expect("capinfos (scripts/setup.sh --tests installs it)");
        assert!(
            c.status.success(),
            "{}: {}",
            f.display(),
            String::from_utf8_lossy(&c.stderr)
        );
        let t = Command::new("tshark")
            .arg("-r")
            .arg(f)
            .output()
            .expect("tshark");
        assert!(t.status.success(), "{}", f.display());
        total += String::from_utf8_lossy(&t.stdout).lines().count();
    }
    assert_eq!(total, 3000);
    // -z ran on every closed file, the last one included.
    let ran = std::fs::read_to_string(&log).unwrap();
    let mut ran: Vec<&str> = ran.lines().collect();
    ran.sort();
    let want: Vec<String> = got.iter().map(|p| p.display().to_string()).collect();
    assert_eq!(ran, want);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn g_rotates_on_the_clock_into_strftime_names() {
    let d = dir("rot-g");
    let pattern = d.join("g-%H%M%S.pcap");
    let o = run(&[
        "gen",
        "-o",
        pattern.to_str().unwrap(),
        "--rate",
        "50pps",
        "-t",
        "3500ms",
        "-G",
        "1",
        "-q",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let got = files(&d, "g-");
    assert!(got.len() >= 3, "{got:?}");
    let mut total = 0;
    for f in &got {
        total += tcpdump_count(f).expect("each file whole");
    }
    assert!(total >= 150, "{total} packets in {got:?}");
    // -G with -W stops after N files (tcpdump's meaning), with status 0.
    let e = dir("rot-gw");
    let pattern = e.join("w-%H%M%S.pcap");
    let t0 = std::time::Instant::now();
    let o = run(&[
        "gen",
        "-o",
        pattern.to_str().unwrap(),
        "--rate",
        "50pps",
        "-t",
        "20s",
        "-G",
        "1",
        "-W",
        "2",
        "-q",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(t0.elapsed() < std::time::Duration::from_secs(10));
    assert_eq!(files(&e, "w-").len(), 2);
    std::fs::remove_dir_all(&d).unwrap();
    std::fs::remove_dir_all(&e).unwrap();
}

/// The summary record of a `--json` run's standard output.
fn json_summary(o: &Output) -> serde_json::Value {
    let out = String::from_utf8_lossy(&o.stdout);
    let line = out
        .lines()
        .rfind(|l| l.contains("\"type\":\"summary\""))
        .unwrap_or_else(|| panic!("no summary in {out}"));
    serde_json::from_str(line).unwrap()
}

#[test]
fn gen_g_w_ends_at_the_file_limit_and_sent_is_what_the_files_hold() {
    // tcpdump's -W with -G ends the run after the second file: the packets the writer no
    // longer took are not sent, not a drop of the port, and the rate is not port-limited.
    let d = dir("gen-gw-sent");
    let pattern = d.join("w-%H%M%S.pcap");
    let t0 = std::time::Instant::now();
    let o = run(&[
        "gen",
        "-o",
        pattern.to_str().unwrap(),
        "--rate",
        "50pps",
        "-t",
        "20s",
        "-G",
        "1",
        "-W",
        "2",
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(t0.elapsed() < std::time::Duration::from_secs(10));
    let got = files(&d, "w-");
    assert_eq!(got.len(), 2, "{got:?}");
    let in_files: usize = got
        .iter()
        .map(|f| tcpdump_count(f).expect("each file whole"))
        .sum();
    let j = json_summary(&o);
    assert_eq!(j["pkts"].as_u64(), Some(in_files as u64), "{j}");
    assert_eq!(j["handed_to_port"].as_u64(), Some(in_files as u64), "{j}");
    assert_eq!(j["port_drops"].as_u64(), Some(0), "{j}");
    assert_eq!(j["port_full"].as_u64(), Some(0), "{j}");
    assert_eq!(j["stopped"], "file limit (-W 2) reached", "{j}");
    assert!(j["not_sent"].is_u64(), "{j}");
    assert_ne!(j["limited"], "port-limited", "{j}");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn gen_replay_g_w_ends_at_the_file_limit() {
    // A replay looping forever onto -G 1 -W 2 ends with the second file: said as the file
    // limit (not "interrupted"), what it replayed is what the files hold, no drop.
    let d = dir("replay-gw");
    let pattern = d.join("r-%H%M%S.pcap");
    let sample = sample();
    let t0 = std::time::Instant::now();
    let o = run(&[
        "gen",
        "--pcap",
        sample.to_str().unwrap(),
        "--pps",
        "200",
        "--loop",
        "0",
        "-t",
        "20s",
        "-o",
        pattern.to_str().unwrap(),
        "-G",
        "1",
        "-W",
        "2",
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(t0.elapsed() < std::time::Duration::from_secs(10));
    let got = files(&d, "r-");
    assert_eq!(got.len(), 2, "{got:?}");
    let in_files: usize = got
        .iter()
        .map(|f| tcpdump_count(f).expect("each file whole"))
        .sum();
    let j = json_summary(&o);
    assert_eq!(j["ended"], "file limit (-W)", "{j}");
    assert_eq!(j["pkts"].as_u64(), Some(in_files as u64), "{j}");
    assert_eq!(j["port_drops"].as_u64(), Some(0), "{j}");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn count_g_w_counts_no_drop_at_the_file_limit() {
    // A source fast enough that the batch which reaches the limit holds more packets: those
    // the writer no longer took are counted, not written, and not dropped.
    use std::process::Stdio;
    let d = dir("count-gw-drop");
    let mut g = Command::new(bin())
        .args(["gen", "-o", "-", "--rate", "20kpps", "-t", "8s", "-q"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("run gen");
    let c = Command::new(bin())
        .args([
            "count", "-i", "-", "--json", "-q", "-G", "1", "-W", "2", "-w",
        ])
        .arg(d.join("c-%s.pcap"))
        .stdin(g.stdout.take().unwrap())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("run count");
    let o = c.wait_with_output().unwrap();
    let _ = g.kill();
    let _ = g.wait();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let got = files(&d, "c-");
    assert_eq!(got.len(), 2, "{got:?}");
    let in_files: u64 = got
        .iter()
        .map(|f| tcpdump_count(f).expect("each file whole") as u64)
        .sum();
    let j = json_summary(&o);
    assert_eq!(j["ended"], "file limit (-W)", "{j}");
    assert_eq!(j["drops"].as_u64(), Some(0), "{j}");
    assert_eq!(j["written"].as_u64(), Some(in_files), "{j}");
    let not_written = j["not_written"]["file_limit"].as_u64().expect("file_limit");
    assert_eq!(j["pkts"].as_u64(), Some(in_files + not_written), "{j}");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn disk_budget_deletes_the_oldest_files_of_the_run() {
    let d = dir("budget");
    let input = big_input(&d, "6000");
    let o = run(&[
        "count",
        "-i",
        input.to_str().unwrap(),
        "-w",
        d.join("k.pcap").to_str().unwrap(),
        "-C",
        "0.5",
        "--disk-budget",
        "1.6MB",
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let got = files(&d, "k.pcap");
    let total: u64 = got
        .iter()
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum();
    assert!(total <= 1_600_000 + 2000, "{total} bytes in {got:?}");
    // The first file went first.
    assert!(!d.join("k.pcap").exists());
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("\"deleted\":[\""), "{out}");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn disk_budget_at_the_end_keeps_every_newest_file_that_fits() {
    let d = dir("budget-end");
    let input = big_input(&d, "6000");
    let o = run(&[
        "count",
        "-i",
        input.to_str().unwrap(),
        "-w",
        d.join("e.pcap").to_str().unwrap(),
        "-C",
        "1",
        "--disk-budget",
        "2.5MB",
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // Every file of the run, in order, with its size: the closed ones from the rotation log,
    // the last one from the disk.
    let out = String::from_utf8_lossy(&o.stdout);
    let mut all: Vec<(String, u64)> = Vec::new();
    for l in out.lines().filter(|l| l.contains("\"type\":\"rotate\"")) {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        all.push((
            v["closed"].as_str().unwrap().to_string(),
            v["bytes"].as_u64().unwrap(),
        ));
        if let Some(n) = v["opened"].as_str() {
            if all.iter().all(|(a, _)| a != n) && !out.contains(&format!("\"closed\":\"{n}\"")) {
                let len = std::fs::metadata(n).map_or(0, |m| m.len());
                all.push((n.to_string(), len));
            }
        }
    }
    assert!(all.len() >= 4, "{out}");
    // The newest files whose sum fits the budget all stay, the older ones go.
    let mut want = Vec::new();
    let mut sum = 0;
    for (n, b) in all.iter().rev() {
        if sum + b > 2_500_000 {
            break;
        }
        sum += b;
        want.push(n.clone());
    }
    want.sort();
    let got: Vec<String> = files(&d, "e.pcap")
        .iter()
        .map(|p| p.to_str().unwrap().to_string())
        .collect();
    assert!(want.len() >= 2, "{all:?}");
    assert_eq!(got, want, "{all:?}");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn rotation_flags_that_cannot_apply_are_refused() {
    let s = sample();
    let s = s.to_str().unwrap();
    for args in [
        vec!["count", "-i", s, "-w", "KEEP", "-W", "3"],
        vec!["count", "-i", s, "-w", "KEEP", "-z", "/bin/true"],
        vec![
            "count",
            "-i",
            s,
            "-w",
            "KEEP",
            "-C",
            "1",
            "-z",
            "/nonexistent/cmd",
        ],
        vec!["count", "-i", s, "-w", "KEEP", "-b", "packets:10"],
        vec!["count", "-i", s, "-w", "KEEP", "-C", "0"],
        vec!["count", "-i", s, "-w", "KEEP", "--flush-interval", "1ms"],
        vec![
            "count",
            "-i",
            s,
            "-w",
            "KEEP",
            "-C",
            "1",
            "--disk-budget",
            "1MB",
        ],
        vec!["count", "-i", s, "-C", "1"],
        vec!["count", "-i", s, "-w", "-", "-C", "1"],
    ] {
        refused_and_kept("refused", &args);
    }
}

#[test]
fn every_capture_output_rotates() {
    let s = sample();
    let s = s.to_str().unwrap();
    let d = dir("rot-all");
    let id = (std::process::id() % 1000 + 4000).to_string();
    let e = d.join("e.pcap");
    let f = d.join("f.pcap");
    let g = d.join("g.pcap");
    let eq = format!("0:{}", e.display());
    for (args, name) in [
        (
            vec![
                "balance", "-i", s, "-n", "1", "-c", &id, "-r", &eq, "-C", "0.05", "-q",
            ],
            "e.pcap",
        ),
        (
            vec![
                "fwd",
                "-i",
                s,
                "-o",
                f.to_str().unwrap(),
                "-C",
                "0.05",
                "-q",
            ],
            "f.pcap",
        ),
        (
            vec![
                "gen",
                "-o",
                g.to_str().unwrap(),
                "-c",
                "2000",
                "--size",
                "64-1518",
                "-C",
                "0.5",
                "-q",
            ],
            "g.pcap",
        ),
    ] {
        let o = run(&args);
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let got = files(&d, name);
        assert!(got.len() >= 2, "{args:?}: {got:?}");
        // Each rotation on standard error.
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(
            err.matches("rotated (size)").count(),
            got.len() - 1,
            "{err}"
        );
        let total: usize = got
            .iter()
            .map(|f| tcpdump_count(f).expect("each file whole"))
            .sum();
        assert_eq!(total, 2000, "{args:?}");
    }
    std::fs::remove_dir_all(&d).unwrap();
}

/// Runs `args` with standard input read from the precious file (`KEEP` stands for its path):
/// a usage error, the file byte for byte.
fn stdin_refused_and_kept(tag: &str, args: &[&str], rotated: Option<&str>) {
    let d = dir(tag);
    let (keep, bytes) = precious(&d);
    // With a rotation name: standard input is that later file, the output is its first one.
    let input = match rotated {
        Some(n) => {
            let p = d.join(n);
            std::fs::write(&p, &bytes).unwrap();
            p
        }
        None => keep.clone(),
    };
    let k = keep.to_str().unwrap();
    let args: Vec<String> = args.iter().map(|a| a.replace("KEEP", k)).collect();
    let o = Command::new(bin())
        .args(&args)
        .stdin(std::fs::File::open(&input).unwrap())
        .output()
        .expect("run linerate");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
    assert!(err.contains("standard input"), "{args:?}: {err}");
    assert_eq!(
        std::fs::read(&input).unwrap(),
        bytes,
        "{args:?} changed stdin's file"
    );
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn an_output_that_is_the_file_on_standard_input_is_refused() {
    stdin_refused_and_kept("stdin-count", &["count", "-i", "-", "-w", "KEEP"], None);
    stdin_refused_and_kept("stdin-fwd", &["fwd", "-i", "-", "-o", "KEEP"], None);
    stdin_refused_and_kept("stdin-gen", &["gen", "--pcap", "-", "-o", "KEEP"], None);
    stdin_refused_and_kept("stdin-flows", &["flows", "-i", "-", "-w", "KEEP"], None);
    stdin_refused_and_kept(
        "stdin-balance",
        &["balance", "-i", "-", "-n", "1", "-r", "0:KEEP"],
        None,
    );
    // A rotation name (tcpdump's FILE1) is an output too.
    stdin_refused_and_kept(
        "stdin-rot",
        &["count", "-i", "-", "-w", "KEEP", "-C", "0.0001"],
        Some("keep.pcap1"),
    );
}

#[test]
fn a_hist_out_that_cannot_be_written_is_refused_before_the_capture() {
    let s = sample();
    let s = s.to_str().unwrap();
    let bad = "/nonexistent-dir-linerate/h.csv";
    refused_and_kept(
        "hist-count",
        &[
            "count",
            "-i",
            s,
            "-w",
            "KEEP",
            "--latency",
            "--hist-out",
            bad,
        ],
    );
    refused_and_kept(
        "hist-gen",
        &[
            "gen",
            "-o",
            "KEEP",
            "-c",
            "5",
            "--rx",
            "mem:hist-x",
            "--hist-out",
            bad,
        ],
    );
    // A --hist-out that can be written is not left behind by the check when the run fails.
    let d = dir("hist-new");
    let h = d.join("h.csv");
    let o = run(&[
        "count",
        "-i",
        "/nonexistent.pcap",
        "--latency",
        "--hist-out",
        h.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(!h.exists());
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_z_command_that_never_ends_does_not_hold_the_run() {
    use std::os::unix::fs::PermissionsExt;
    use std::process::Stdio;
    let d = dir("z-hang");
    let input = big_input(&d, "3000");
    let script = d.join("hang.sh");
    std::fs::write(&script, "#!/bin/sh\nexec sleep 30\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut c = Command::new(bin())
        .args(["count", "-i", input.to_str().unwrap(), "-q", "-C", "1"])
        .args(["-w", d.join("h.pcap").to_str().unwrap()])
        .args(["-z", script.to_str().unwrap()])
        .stdout(Stdio::null())
        // A file, not a pipe: the commands left running hold what they inherited.
        .stderr(std::fs::File::create(d.join("err")).unwrap())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(s) = c.try_wait().unwrap() {
            break Some(s);
        }
        if start.elapsed() > std::time::Duration::from_secs(15) {
            let _ = c.kill();
            let _ = c.wait();
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let err = std::fs::read_to_string(d.join("err")).unwrap();
    // The commands left running (our children's children now): ended by their pids.
    let mut left = 0;
    for l in err.lines().filter(|l| l.contains("not waited for")) {
        if let Some(pid) = l.split("pid ").nth(1).and_then(|r| r.split(' ').next()) {
            let _ = Command::new("kill").arg(pid).status();
            left += 1;
        }
    }
    let status = status.expect("the run ended by itself");
    assert!(status.success(), "{err}");
    assert!(left >= 1, "each command left running is logged: {err}");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn fwd_c_forwards_exactly_n_packets() {
    let d = dir("fwd-c");
    let input = big_input(&d, "3000");
    for n in ["1", "10", "1000"] {
        let out = d.join(format!("f{n}.pcap"));
        let o = run(&[
            "fwd",
            "-i",
            input.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
            "-c",
            n,
            "-q",
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let recs = records(&std::fs::read(&out).unwrap()).expect("whole file");
        assert_eq!(recs.len(), n.parse::<usize>().unwrap(), "fwd -c {n}");
    }
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_failed_rotation_counts_each_written_packet_once() {
    let d = dir("rot-fail");
    let out = d.join("r.pcap");
    // The second file cannot be created: a directory holds its name.
    std::fs::create_dir(d.join("r.pcap1")).unwrap();
    let o = run(&[
        "count",
        "-i",
        sample().to_str().unwrap(),
        "-w",
        out.to_str().unwrap(),
        "-C",
        "0.05",
        "-q",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    let held = records(&std::fs::read(&out).unwrap()).expect("whole").len();
    let written: usize = err
        .split(" written")
        .next()
        .and_then(|s| s.rsplit(", ").next())
        .map(|n| n.replace('\'', ""))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no written figure: {err}"));
    assert_eq!(written, held, "{err}");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn g_w_file_limit_is_the_reason_the_run_ended() {
    use std::process::Stdio;
    let d = dir("gw-ended");
    let mut g = Command::new(bin())
        .args(["gen", "-o", "-", "--rate", "20pps", "-t", "6s", "-q", "-U"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("run gen");
    let c = Command::new(bin())
        .args(["count", "-i", "-", "--json", "-G", "1", "-W", "2", "-w"])
        .arg(d.join("g-%s.pcap"))
        .stdin(g.stdout.take().unwrap())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run count");
    let o = c.wait_with_output().unwrap();
    let _ = g.kill();
    let _ = g.wait();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("\"ended\":\"file limit (-W)\""), "{out}");
    assert_eq!(files(&d, "g-").len(), 2, "{:?} {out}", files(&d, "g-"));
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn c_sizes_parse_as_tcpdump_and_refuse_what_is_not_a_size() {
    let d = dir("c-parse");
    let input = big_input(&d, "1500");
    let i = input.to_str().unwrap();
    // Spaces around a bare number: still millions of bytes (one file of the ~1.2 MB input,
    // plus one), never 1 byte (a file per packet).
    for (k, c) in [" 1", "1 "].iter().enumerate() {
        let w = d.join(format!("s{k}.pcap"));
        let o = run(&["count", "-i", i, "-q", "-w", w.to_str().unwrap(), "-C", c]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert_eq!(files(&d, &format!("s{k}.pcap")).len(), 2, "-C '{c}'");
    }
    for bad in ["1e-6", "1E3", "0.0000001", "0", "0.0000004MB", "5XB"] {
        let w = d.join("bad.pcap");
        let o = run(&["count", "-i", i, "-q", "-w", w.to_str().unwrap(), "-C", bad]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "-C {bad}: {err}");
        assert!(!w.exists(), "-C {bad}");
        if bad == "5XB" {
            assert!(err.contains("kB") && err.contains("MiB"), "{err}");
        }
    }
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn c_with_g_and_w_makes_no_ring_as_tcpdump() {
    let d = dir("c-g-w");
    let input = big_input(&d, "3000");
    let o = run(&[
        "count",
        "-i",
        input.to_str().unwrap(),
        "-q",
        "-w",
        d.join("x-%Y.pcap").to_str().unwrap(),
        // One period for the whole run (a year).
        "-G",
        "31536000",
        "-C",
        "0.5",
        "-W",
        "3",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // One period: every -C file kept (no ring of 3 overwriting), numbers padded for -W 3.
    let got = files(&d, "x-");
    assert!(got.len() >= 4, "{got:?}");
    let total: usize = got
        .iter()
        .map(|f| records(&std::fs::read(f).unwrap()).unwrap().len())
        .sum();
    assert_eq!(total, 3000, "{got:?}");
    std::fs::remove_dir_all(&d).unwrap();
}

/// The whole records of a classic pcap file and whether a cut record follows them (a file
/// whose header is whole); None when the header itself is not.
fn whole_prefix(bytes: &[u8]) -> Option<(usize, bool)> {
    if bytes.len() < 24 {
        return None;
    }
    let (mut n, mut at) = (0, 24);
    while at < bytes.len() {
        let Some(h) = bytes.get(at..at + 16) else {
            return Some((n, true));
        };
        let cap = u32::from_ne_bytes(h[8..12].try_into().unwrap()) as usize;
        if cap > 262_144 {
            return None; // not a record header: the file is not a prefix of whole records
        }
        if at + 16 + cap > bytes.len() {
            return Some((n, true));
        }
        at += 16 + cap;
        n += 1;
    }
    Some((n, false))
}

#[test]
fn kill_9_during_a_large_write_leaves_whole_records_but_possibly_the_last() {
    use std::process::Stdio;
    let d = dir("kill9");
    let input = big_input(&d, "20000");
    let i = input.to_str().unwrap();
    let list = [i; 8].join(",");
    for k in 0..4 {
        let f = d.join(format!("k{k}.pcap"));
        let mut c = Command::new(bin())
            .args(["count", "-i", &list, "-q", "-w", f.to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Killed while it writes: once its file has the header (a debug build at load 20
        // took more than 40 ms to create it: the file was not there to read), then 40 to 130
        // ms into the writes.
        let t0 = std::time::Instant::now();
        while std::fs::metadata(&f).map_or(0, |m| m.len()) < 24 {
            assert!(
                t0.elapsed() < std::time::Duration::from_secs(30),
                "count wrote no header"
            );
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        std::thread::sleep(std::time::Duration::from_millis(40 + 30 * k));
        let _ = c.kill();
        let _ = c.wait();
        let bytes = std::fs::read(&f).unwrap();
        // What holds after SIGKILL: the header and every record whole, but possibly the last
        // one, cut where the kill stopped a write of many pages.
        let (whole, _cut) = whole_prefix(&bytes).expect("a header, then whole records");
        // tcpdump -r prints every whole record (then says "truncated dump file" if cut).
        let o = Command::new("tcpdump")
            .args(["-n", "-r"])
            .arg(&f)
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&o.stdout).lines().count(), whole);
        // editcap copies them into a clean file.
        let clean = d.join(format!("c{k}.pcap"));
        let o = Command::new("editcap")
            .args(["-F", "pcap"])
            .arg(&f)
            .arg(&clean)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let r = records(&std::fs::read(&clean).unwrap()).map(|r| r.len());
        if whole > 0 {
            assert_eq!(r, Some(whole), "editcap of {}", f.display());
        }
    }
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn rotation_of_a_list_of_outputs_is_refused_by_its_name() {
    let d = dir("list-c");
    let a = d.join("a.pcap");
    let b = d.join("b.pcap");
    let list = format!("{},{}", a.display(), b.display());
    let o = run(&["gen", "-o", &list, "--threads", "2", "-c", "5", "-C", "1"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("not a list of files"), "{err}");
    assert!(!a.exists() && !b.exists());
    std::fs::remove_dir_all(&d).unwrap();
}

/// tcpdump's `-G` with a file name without a time field writes the one file again each
/// period: the summary says what is on disk now beside what was written in all (`Written to
/// g.pcap: N pkts (M in g.pcap now; K overwritten by -G)`, `--json` `written`, `on_disk`,
/// `overwritten: {packets, by}`), and the figures match the file; a `-C -W` ring gone round
/// says the same of its files.
#[test]
fn overwritten_files_are_told_apart_from_what_is_on_disk() {
    use std::process::Stdio;
    let d = dir("overwritten");
    let g_file = d.join("g.pcap");
    let capture = |json: bool| -> Output {
        let _ = std::fs::remove_file(&g_file);
        let mut g = Command::new(bin())
            .args([
                "gen", "-o", "-", "--rate", "1kpps", "-t", "3.5s", "-q", "-U",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("run gen");
        let mut c = Command::new(bin());
        c.args(["count", "-i", "-", "-G", "1", "-w"]).arg(&g_file);
        if json {
            c.args(["--json", "-q"]);
        }
        let o = c
            .stdin(g.stdout.take().unwrap())
            .output()
            .expect("run count");
        let _ = g.wait();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        o
    };
    let o = capture(false);
    let text = String::from_utf8_lossy(&o.stdout);
    let on_disk = tcpdump_count(&g_file).expect("the file whole");
    let line = text
        .lines()
        .find(|l| l.starts_with("Written to "))
        .unwrap_or_else(|| panic!("no Written line: {text}"));
    let total: usize = text
        .lines()
        .find_map(|l| l.strip_prefix("Summary: "))
        .and_then(|l| l.split(' ').next())
        .map(|n| n.replace('\'', "").parse().unwrap())
        .unwrap_or_else(|| panic!("no Summary line: {text}"));
    assert!(total > on_disk, "a period was overwritten: {text}");
    let g = g_file.display();
    let want = format!(
        "Written to {g}: {} pkts ({} in {g} now; {} overwritten by -G)",
        group(total),
        group(on_disk),
        group(total - on_disk)
    );
    assert_eq!(line, want, "{text}");
    let o = capture(true);
    let j = json_summary(&o);
    let on_disk = tcpdump_count(&g_file).expect("the file whole") as u64;
    let total = j["pkts"].as_u64().unwrap();
    assert_eq!(j["written"].as_u64(), Some(total), "{j}");
    assert_eq!(j["on_disk"].as_u64(), Some(on_disk), "{j}");
    assert_eq!(
        j["overwritten"]["packets"].as_u64(),
        Some(total - on_disk),
        "{j}"
    );
    assert_eq!(j["overwritten"]["by"], "-G", "{j}");
    // A -C -W ring gone round.
    let input = big_input(&d, "6000");
    let o = run(&[
        "count",
        "-i",
        input.to_str().unwrap(),
        "-w",
        d.join("w.pcap").to_str().unwrap(),
        "-C",
        "1",
        "-W",
        "2",
        "--json",
        "-q",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let j = json_summary(&o);
    let in_ring: u64 = files(&d, "w.pcap")
        .iter()
        .map(|f| tcpdump_count(f).expect("each file whole") as u64)
        .sum();
    assert_eq!(j["on_disk"].as_u64(), Some(in_ring), "{j}");
    assert_eq!(
        j["overwritten"]["packets"].as_u64(),
        Some(j["written"].as_u64().unwrap() - in_ring),
        "{j}"
    );
    assert_eq!(j["overwritten"]["by"], "the -W ring", "{j}");
    // Nothing overwritten: no such figure.
    let o = run(&[
        "count",
        "-i",
        input.to_str().unwrap(),
        "-w",
        d.join("one.pcap").to_str().unwrap(),
        "--json",
        "-q",
    ]);
    let j = json_summary(&o);
    assert!(
        j.get("overwritten").is_none() && j.get("on_disk").is_none(),
        "{j}"
    );
    std::fs::remove_dir_all(&d).unwrap();
}

/// 1'234'567: thousands grouped as the summaries group them.
fn group(n: usize) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push('\'');
        }
        out.push(c);
    }
    out
}

/// With a `-W` limit in force (`-G` alone: the run stops after N files), each rotation line
/// says which file of the N it was, and the last one names the limit with its number, as the
/// other figures show what was asked beside what was done: `opened F (file 2 of -W 3)`,
/// `file limit (-W 3) reached (3 files)`; `--json` rotation lines carry `file` and
/// `file_limit`.
#[test]
fn rotation_lines_show_the_w_limit_in_force() {
    let d = dir("w-lines");
    let run_gen = |json: bool| -> Output {
        let mut args = vec!["gen", "--rate", "1kpps", "-t", "20s", "-G", "1", "-W", "3"];
        if json {
            args.extend_from_slice(&["--json", "-q"]);
        }
        let o = Command::new(bin())
            .args(&args)
            .arg("-o")
            .arg(d.join(if json { "j-%s.pcap" } else { "t-%s.pcap" }))
            .output()
            .expect("run gen");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        o
    };
    let o = run_gen(false);
    let err = String::from_utf8_lossy(&o.stderr);
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("linerate: rotated"))
        .collect();
    assert_eq!(lines.len(), 3, "{err}");
    assert!(lines[0].contains("(file 2 of -W 3)"), "{err}");
    assert!(lines[1].contains("(file 3 of -W 3)"), "{err}");
    assert!(
        lines[2].ends_with("file limit (-W 3) reached (3 files)"),
        "{err}"
    );
    let o = run_gen(true);
    let rot: Vec<serde_json::Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|j| j["type"] == "rotate")
        .collect();
    assert_eq!(rot.len(), 3, "{rot:?}");
    // The file opened (2, 3), then at the limit the last one closed (3).
    for (j, file) in rot.iter().zip([2u64, 3, 3]) {
        assert_eq!(j["file"].as_u64(), Some(file), "{j}");
        assert_eq!(j["file_limit"].as_u64(), Some(3), "{j}");
    }
    // No limit in force (a -C -W ring): the lines say nothing of one.
    let input = big_input(&d, "3000");
    let o = run(&[
        "count",
        "-i",
        input.to_str().unwrap(),
        "-w",
        d.join("r.pcap").to_str().unwrap(),
        "-C",
        "1",
        "-W",
        "2",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("linerate: rotated (size)"), "{err}");
    assert!(!err.contains(" of -W "), "{err}");
    std::fs::remove_dir_all(&d).unwrap();
}

/// gen's summary says the same as count's when `-G` wrote one name again: `Written to g.pcap:
/// N pkts (M in g.pcap now; K overwritten by -G)`, M being what the file holds, N what was sent;
/// `--json` `on_disk` and `overwritten`.
#[test]
fn gen_says_what_g_overwrote() {
    let d = dir("gen-overwritten");
    let g_file = d.join("g.pcap");
    let gen = |json: bool| -> Output {
        let _ = std::fs::remove_file(&g_file);
        let mut c = Command::new(bin());
        c.args(["gen", "--rate", "1kpps", "-t", "2.5s", "-G", "1", "-o"])
            .arg(&g_file);
        if json {
            c.args(["--json", "-q"]);
        }
        let o = c.output().expect("run gen");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        o
    };
    let o = gen(false);
    let text = String::from_utf8_lossy(&o.stdout);
    let on_disk = tcpdump_count(&g_file).expect("the file whole");
    // What gen sent (2'500 but on a machine too loaded to catch up).
    let sent: usize = text
        .lines()
        .find_map(|l| l.strip_prefix("Sent "))
        .and_then(|l| l.split(' ').next())
        .map(|n| n.replace('\'', "").parse().unwrap())
        .unwrap_or_else(|| panic!("no Sent line: {text}"));
    let g = g_file.display();
    let want = format!(
        "Written to {g}: {} pkts ({} in {g} now; {} overwritten by -G)",
        group(sent),
        group(on_disk),
        group(sent - on_disk)
    );
    assert!(text.lines().any(|l| l == want), "{want}\n{text}");
    let o = gen(true);
    let j = json_summary(&o);
    let on_disk = tcpdump_count(&g_file).expect("the file whole") as u64;
    let sent = j["pkts"].as_u64().unwrap();
    assert_eq!(j["on_disk"].as_u64(), Some(on_disk), "{j}");
    assert_eq!(
        j["overwritten"]["packets"].as_u64(),
        Some(sent - on_disk),
        "{j}"
    );
    assert_eq!(j["overwritten"]["by"], "-G", "{j}");
    std::fs::remove_dir_all(&d).unwrap();
}

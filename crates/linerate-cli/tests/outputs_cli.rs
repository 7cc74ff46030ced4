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

//! pcapng written from capture file inputs keeps what the input said: each interface
//! description has the input's snaplen (65535 for examples/sample.pcap, not the writer's 262144)
//! and link type, as capinfos reads them, and each interface statistics block's start and end
//! are the first and last packet's times (as tshark reads them from the input), not the run's
//! wall clock; read with scripts/pcapng-isb.py, the block dump the README points to.
//!
//! Without capinfos/tshark the test prints why and passes, unless LINERATE_REQUIRE_PRIV=1.
#![deny(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

fn have(tool: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool}"))
        .output()
        .is_ok_and(|o| o.status.success())
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn run(args: &[&str]) {
    let o = Command::new(env!("CARGO_BIN_EXE_linerate"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

fn stdout(cmd: &mut Command) -> String {
    let o = cmd.output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).to_string()
}

#[test]
fn pcapng_from_files_keeps_their_snaplen_and_packet_times() {
    if !(have("capinfos") && have("tshark") && have("python3")) {
        linerate_test_support::skip(
            "capinfos/tshark/python3 not installed (apt-get install tshark)",
        );
        return;
    }
    let sample = root().join("examples/sample.pcap");
    let s = sample.to_str().unwrap();
    // The input's own figures, by tshark: first and last packet, "YYYY-mm-dd HH:MM:SS.fff".
    let times = stdout(
        Command::new("tshark")
            .args(["-r", s, "-T", "fields", "-e", "frame.time_epoch"])
            .env("TZ", "UTC"),
    );
    let secs: Vec<&str> = times.lines().collect();
    let utc = |epoch: &str| {
        let (sec, frac) = epoch.split_once('.').unwrap();
        let d = stdout(
            Command::new("date")
                .args(["-u", "-d", &format!("@{sec}")])
                .arg("+%Y-%m-%d %H:%M:%S"),
        );
        format!("{}.{frac:0<9}", d.trim())
    };
    let (first, last) = (utc(secs[0]), utc(secs[secs.len() - 1]));
    assert!(stdout(Command::new("capinfos").args(["-l", s])).contains("65535"));
    let tmp = std::env::temp_dir().join(format!("linerate-pcapng-files-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let fwd = tmp.join("fwd.pcapng");
    let agg = tmp.join("agg.pcapng");
    run(&["fwd", "-q", "-i", s, "-o", fwd.to_str().unwrap()]);
    run(&[
        "count",
        "-q",
        "-i",
        &format!("{s},{s}"),
        "-w",
        agg.to_str().unwrap(),
    ]);
    for (f, n) in [(&fwd, 1), (&agg, 2)] {
        let info = stdout(Command::new("capinfos").arg(f));
        assert_eq!(info.matches("Capture length = 65535").count(), n, "{info}");
        assert_eq!(
            info.matches("Encapsulation = Ethernet (1 - ether)").count(),
            n,
            "{info}"
        );
        assert!(!info.contains("262144"), "{info}");
        let isb = stdout(
            Command::new("python3")
                .arg(root().join("scripts/pcapng-isb.py"))
                .arg(f),
        );
        let lines: Vec<serde_json::Value> = isb
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), n, "{isb}");
        for j in lines {
            assert_eq!(j["start"], first.as_str(), "{j}");
            assert_eq!(j["end"], last.as_str(), "{j}");
            assert_eq!(j["snaplen"], 65535);
            assert_eq!(j["usrdeliv"], 2000);
        }
    }
    let _ = std::fs::remove_dir_all(&tmp);
}

//! `linerate rfc2544` as an RFC 2544 tester over a real link: both ends of a veth pair in one
//! network namespace (frames leave on vA and come back on vB), the link speed read from the
//! interface, NDR and PDR (`--loss-tolerance`), three repetitions (`--repeat`) and the jitter
//! of each. Needs root (skips otherwise, fails instead under LINERATE_REQUIRE_PRIV=1).
#![deny(unsafe_code)]

use linerate_test_support::netns::{self, NetnsPair, Side};
use std::process::Command;

/// A pair whose both ends are in namespace A: the tester's loop.
fn looped() -> NetnsPair {
    let pair = NetnsPair::new().expect("netns pair");
    pair.ip_in(Side::B, &["link", "set", "vB", "netns", pair.ns(Side::A)])
        .expect("move vB");
    pair.ip_in(Side::A, &["link", "set", "vB", "up"])
        .expect("vB up");
    let _ = Command::new("ip")
        .args(["netns", "exec", pair.ns(Side::A), "sysctl", "-qw"])
        .args([
            "net.ipv6.conf.all.disable_ipv6=1",
            "net.ipv6.conf.default.disable_ipv6=1",
        ])
        .status();
    pair
}

fn rfc2544(pair: &NetnsPair, args: &[&str]) -> std::process::Output {
    Command::new("ip")
        .args([
            "netns",
            "exec",
            pair.ns(Side::A),
            env!("CARGO_BIN_EXE_linerate"),
        ])
        .args(["rfc2544", "-o", "afpacket:vA", "-i", "afpacket:vB"])
        .args(args)
        .output()
        .expect("run rfc2544")
}

#[test]
fn rfc2544_on_a_veth_reports_ndr_pdr_jitter_and_three_trials() {
    if !netns::require_priv() {
        return;
    }
    let pair = looped();
    let o = rfc2544(
        &pair,
        &[
            "--sizes",
            "64,1518",
            "--trial",
            "100ms",
            "--settle",
            "20ms",
            "--resolution",
            "10",
            "--b2b-max",
            "0",
            "--loss-steps",
            "10",
            "--loss-tolerance",
            "0.1",
            "--repeat",
            "3",
            "--dst-ip",
            "198.18.0.2",
            "--dport",
            "7",
            "--json",
        ],
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "exit {:?}: {out}{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stderr)
    );
    let s = out
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|j| j["type"] == "summary")
        .unwrap_or_else(|| panic!("no summary in {out}"));
    assert_eq!(s["ended"], "complete", "{s}");
    // The veth's own speed (10 Gbit/s), not an assumed one.
    assert_eq!(s["link_speed_from"], "interface", "{s}");
    assert_eq!(s["link_speed_bps"].as_f64(), Some(10e9), "{s}");
    let res = s["results"].as_array().unwrap();
    assert_eq!(res.len(), 2);
    for r in res {
        let line = r["line_pps"].as_f64().unwrap();
        let ndr = r["ndr_pps"]
            .as_f64()
            .unwrap_or_else(|| panic!("no NDR: {r}"));
        let pdr = r["pdr_pps"]
            .as_f64()
            .unwrap_or_else(|| panic!("no PDR: {r}"));
        assert!(ndr > 0.0 && ndr <= line, "{r}");
        assert!(pdr > 0.0 && pdr <= line, "{r}");
        let pct = r["ndr_pct"].as_f64().unwrap();
        assert!(pct > 0.0 && pct <= 100.0, "{r}");
        assert!(r["jitter_ns"].as_f64().is_some(), "{r}");
        let trials = r["trials"].as_array().unwrap();
        assert_eq!(trials.len(), 3, "{r}");
        for t in trials {
            if let (Some(n), Some(p)) = (t["ndr_pps"].as_f64(), t["pdr_pps"].as_f64()) {
                assert!(p >= n, "the PDR search starts at the NDR: {r}");
                assert!(t["jitter_ns"].as_f64().is_some(), "{r}");
            }
        }
    }
}

#[test]
fn rfc2544_on_a_link_down_asks_for_the_link_speed() {
    if !netns::require_priv() {
        return;
    }
    let pair = looped();
    pair.ip_in(Side::A, &["link", "set", "vA", "down"])
        .expect("vA down");
    let o = rfc2544(&pair, &["--trial", "10ms"]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--link-speed") && err.contains("vA"), "{err}");
    assert!(o.stdout.is_empty());
}

#[test]
fn rfc2544_stops_when_the_link_goes_down_and_says_so() {
    if !netns::require_priv() {
        return;
    }
    let pair = looped();
    let child = Command::new("ip")
        .args([
            "netns",
            "exec",
            pair.ns(Side::A),
            env!("CARGO_BIN_EXE_linerate"),
        ])
        .args(["rfc2544", "-o", "afpacket:vA", "-i", "afpacket:vB"])
        .args([
            "--sizes",
            "64,128,256,512,1024,1280,1518",
            "--trial",
            "100ms",
            "--settle",
            "20ms",
            "--b2b-max",
            "0",
            "--loss-steps",
            "50",
            "--json",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run rfc2544");
    std::thread::sleep(std::time::Duration::from_millis(1500));
    pair.ip_in(Side::A, &["link", "set", "vB", "down"])
        .expect("vB down");
    let o = child.wait_with_output().expect("rfc2544 ends");
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{out}{err}");
    let s: serde_json::Value = out
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|j| j["type"] == "summary")
        .unwrap_or_else(|| panic!("no summary: {out}{err}"));
    assert_eq!(s["ended"], "link-down", "{s}");
    assert!(
        s["link_down"].as_str().unwrap().contains("went down"),
        "{s}"
    );
    // Stopped there: not every size was measured, the last one begun says it is incomplete.
    let results = s["results"].as_array().unwrap();
    assert!(results.len() < 7, "{s}");
    assert_eq!(results.last().unwrap()["interrupted"], true, "{s}");
    assert!(err.contains("went down"), "{err}");
}

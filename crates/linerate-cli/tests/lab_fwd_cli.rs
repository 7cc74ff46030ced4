//! `linerate fwd` from the command line on ports that need no root: a pcap file in, a `mem:`
//! wire out. BPF filter and Lua script decide what is forwarded; the statistics add up; flag and
//! script errors are one-line usage errors.
#![deny(unsafe_code)]

use std::path::PathBuf;
use std::process::Command;

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_linerate")
}

fn sample() -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/sample.pcap")
        .display()
        .to_string()
}

fn tmp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("lr-fwd-cli-{}-{name}", std::process::id()))
}

/// Runs fwd with --json; returns (start line, summary line).
fn fwd_json(extra: &[&str]) -> (serde_json::Value, serde_json::Value) {
    let s = sample();
    let mut args = vec![
        "fwd",
        "-i",
        &s,
        "-o",
        "mem:fwd-cli-out",
        "--period",
        "0",
        "--json",
        "-t",
        "20",
    ];
    args.extend_from_slice(extra);
    let out = Command::new(bin()).args(&args).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(lines.first().unwrap()["type"], "start");
    assert_eq!(lines.last().unwrap()["type"], "summary");
    (lines[0].clone(), lines.last().unwrap().clone())
}

/// Runs fwd with `--script` on a script of `body` (the loop body of filter(pkts, n), with `p`
/// the packet); returns the summary line.
fn fwd_script(name: &str, body: &str) -> serde_json::Value {
    let script = tmp(name);
    std::fs::write(
        &script,
        format!("function filter(pkts, n)\n  for i = 1, n do\n    local p = pkts[i]\n    {body}\n  end\nend\n"),
    )
    .unwrap();
    let sp = script.display().to_string();
    let (_, s) = fwd_json(&["--script", &sp]);
    let _ = std::fs::remove_file(&script);
    s
}

#[test]
fn bpf_filter_and_lua_script_forward_the_same_packets() {
    // Untagged IPv4 carrying UDP: raw offsets (ethertype at 12, protocol byte at 23) against
    // BPF's `ip proto 17`; the sample also has VLAN-tagged UDP, which the packet's fields see
    // (pkt.ip4 is the IPv4 header after any tags) as BPF's `vlan and ip proto 17` does.
    let (start, bpf) = fwd_json(&["-f", "ip proto 17"]);
    assert_eq!(start["filter_in_kernel"], false);
    let (_, bpf_all) = fwd_json(&["-f", "ip proto 17 or (vlan and ip proto 17)"]);
    let offsets = fwd_script(
        "off.lua",
        "if p:len() < 34 or p:getU16(12) ~= 0x0800 or p:getByte(23) ~= 17 then p:drop() end",
    );
    let fields = fwd_script(
        "fields.lua",
        "if not (p.ip4 and p.ip4.proto == 17 and p.udp) then p:drop() end",
    );
    for s in [&bpf, &bpf_all, &offsets, &fields] {
        let p0 = &s["ports"][0];
        let p1 = &s["ports"][1];
        assert_eq!(p0["received"], 2000, "{s}");
        assert_eq!(
            p0["received"].as_u64().unwrap(),
            p0["filtered"].as_u64().unwrap() + p1["sent"].as_u64().unwrap(),
            "{s}"
        );
        assert_eq!(p1["dropped"], 0);
    }
    let sent = |s: &serde_json::Value| s["ports"][1]["sent"].as_u64().unwrap();
    assert_eq!(sent(&bpf), 1000);
    assert_eq!(sent(&offsets), sent(&bpf));
    assert!(
        sent(&bpf_all) > sent(&bpf),
        "the sample has tagged UDP: {bpf_all}"
    );
    assert_eq!(sent(&fields), sent(&bpf_all));
}

#[test]
fn script_errors_name_the_file_and_line() {
    let bad = tmp("bad.lua");
    std::fs::write(
        &bad,
        "function filter(pkts, n)\n  local x = nil\n  return x.y\nend\n",
    )
    .unwrap();
    let none = tmp("none.lua");
    std::fs::write(&none, "-- no filter here\n").unwrap();
    let syntax = tmp("syntax.lua");
    std::fs::write(&syntax, "function filter(pkts, n\n").unwrap();
    let s = sample();
    let run = |p: &PathBuf| {
        let ps = p.display().to_string();
        Command::new(bin())
            .args([
                "fwd",
                "-i",
                &s,
                "-o",
                "mem:fwd-cli-err",
                "--period",
                "0",
                "--script",
                &ps,
            ])
            .output()
            .unwrap()
    };
    let o = run(&bad);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("bad.lua:3"), "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    let o = run(&none);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("defines no function filter"), "{err}");
    let o = run(&syntax);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("syntax.lua"), "{err}");
    for p in [bad, none, syntax] {
        let _ = std::fs::remove_file(p);
    }
}

#[test]
fn fwd_flag_errors_are_usage_errors() {
    for (args, want) in [
        (
            &["fwd", "-i", "mem:a", "-o", "mem:b", "--mac", "1,2"][..],
            "not a MAC address",
        ),
        (
            &["fwd", "-i", "xdp:lr-nope0", "-o", "mem:b"][..],
            "not found",
        ),
        (&["fwd", "-i", "xdp:lo@x", "-o", "mem:b"][..], "queue 'x'"),
        (
            &["fwd", "-i", "mem:a", "-o", "mem:b", "--xdp-mode", "fast"][..],
            "fast",
        ),
        (
            &[
                "fwd",
                "-i",
                "mem:a",
                "-o",
                "mem:b",
                "--no-mac-updating",
                "--mac",
                "a,b",
            ][..],
            "cannot be used with",
        ),
    ] {
        let out = Command::new(bin()).args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "one line: {err}");
    }
}

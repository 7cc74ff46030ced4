//! One flag vocabulary (docs/DESIGN.md, "One flag vocabulary"): a letter a tool used for
//! something else before is refused with the flag to write (exit 2, nothing run or written),
//! the letters that now mean one thing work where they were added, and the errors name the fix:
//! the subcommand's help, afpacket:/xdp: for a bare interface, the scheme nearest a typo.

use std::path::PathBuf;
use std::process::{Command, Output};

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_linerate")
}

fn sample() -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/sample.pcap")
        .display()
        .to_string()
}

fn run(args: &[&str]) -> Output {
    Command::new(bin()).args(args).output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `args` is refused with exit 2, one line on standard error naming each of `names`, and
/// nothing on standard output.
fn refused(args: &[&str], names: &[&str]) {
    let o = run(args);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
    for n in names {
        assert!(err.contains(n), "{args:?}: names {n}: {err}");
    }
    assert!(o.stdout.is_empty(), "{args:?}: printed {:?}", o.stdout);
    assert_eq!(err.lines().count(), 1, "{args:?}: one line: {err}");
}

#[test]
fn watch_i_is_refused_naming_interval() {
    refused(&["watch", "lo", "-i", "2", "-t", "1"], &["--interval"]);
    refused(&["watch", "lo", "-t", "1", "-i"], &["--interval"]);
    // The new spelling runs (no root needed without the NAPI counts).
    let o = run(&[
        "watch",
        "lo",
        "--interval",
        "200ms",
        "-t",
        "0.3",
        "--no-polls",
        "-q",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn sweep_t_is_refused_naming_time() {
    refused(&["sweep", "--to", "127.0.0.1", "-t", "1"], &["--time"]);
}

#[test]
fn sweep_raw_sizes_60_and_64_together_are_refused_not_run_twice() {
    // 60 to 63 are read without the CRC (60 is 64): beside 64 the list would measure 64 twice.
    for sizes in ["60,64", "64,128,60", "63,67"] {
        refused(
            &[
                "sweep",
                "--to",
                "lrnone:x",
                "--raw",
                "afpacket:lo",
                "--sizes",
                sizes,
            ],
            &["--sizes", "with the CRC", "in the list too"],
        );
    }
}

#[test]
fn fwd_t_upper_is_refused_naming_period_and_threads() {
    let s = sample();
    refused(
        &["fwd", "-i", &s, "-o", "mem:voc-fwd", "-T", "0"],
        &["--period", "--threads"],
    );
    // --interval is --period, as in the other tools.
    let o = run(&[
        "fwd",
        "-i",
        &s,
        "-o",
        "mem:voc-fwd2",
        "--interval",
        "0",
        "-q",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout)
            .matches("Port statistics")
            .count(),
        1
    );
}

#[test]
fn lab_r_is_refused_naming_rate_and_a_bare_rate_names_its_units() {
    refused(&["lab", "l2fwd", "-r", "50kpps"], &["--rate"]);
    // One rate syntax: gen's (a unit always); a bare number could be packets or bits.
    refused(
        &["lab", "l2fwd", "--rate", "20000"],
        &["20000pps", "20000bps"],
    );
    refused(
        &["gen", "-o", "mem:voc", "-c", "1", "--rate", "20000"],
        &["20000pps"],
    );
}

#[test]
fn balance_b_is_the_ring_buffer_and_a_bare_number_names_buffers() {
    refused(
        &["balance", "-i", "source:10", "--threads", "-b", "4096"],
        &["--buffers", "filesize:KB"],
    );
    // -b KEY:VALUE is dumpcap's ring buffer, as in count (it needs a file to rotate).
    let o = run(&["balance", "-i", "source:10", "--threads", "-b", "files:2"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        !stderr(&o).contains("unexpected argument"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn balance_threads_takes_an_optional_number() {
    let cid = (40_000 + std::process::id() % 20_000).to_string();
    // --threads N alone: N queues, one thread each.
    let o = run(&[
        "balance",
        "-i",
        "source:100",
        "--cluster",
        &cid,
        "--threads",
        "2",
        "-m",
        "round-robin",
        "--json",
        "-q",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    let last: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert_eq!(last["queues"].as_array().map(Vec::len), Some(2), "{last}");
    // With -n, N must be its number of queues.
    refused(
        &["balance", "-i", "source:10", "-n", "2", "--threads", "3"],
        &["--threads 3", "-n 2"],
    );
    // Zero threads, or an empty number, is no way of saying `--threads` alone: refused, as
    // count -T 0 is, never run with one thread per queue.
    for zero in [
        &["--threads", "0"][..],
        &["--threads="],
        &["-T0"],
        &["-T", "0"],
    ] {
        let mut args = vec!["balance", "-i", "source:10", "-n", "2"];
        args.extend(zero);
        refused(&args, &["--threads", "1 and 64", "--threads alone"]);
    }
    // -T is --threads, as in count.
    let o = run(&[
        "balance",
        "-i",
        "source:10",
        "--cluster",
        &cid,
        "-n",
        "1",
        "-T",
        "-q",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    // --count is balance's --packets, as the other tools spell a packet count.
    let o = run(&[
        "balance",
        "-i",
        "source",
        "--cluster",
        &cid,
        "--threads",
        "--count",
        "50",
        "-q",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn flows_and_gen_take_t_upper_for_threads() {
    let s = sample();
    let o = run(&["flows", "-i", &s, "-T", "2", "-q"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = run(&[
        "gen",
        "-o",
        "mem:voc-g1,mem:voc-g2",
        "-T",
        "2",
        "-c",
        "10",
        "-q",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn a_flag_error_points_at_the_subcommands_help() {
    let o = run(&["count", "-i", "x", "--no-such-flag"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("(see linerate count --help)"),
        "{}",
        stderr(&o)
    );
    let o = run(&["nosuchtool"]);
    assert!(
        stderr(&o).contains("(see linerate --help)"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_bare_interface_is_offered_afpacket_and_xdp() {
    // lo is in every network namespace.
    let o = run(&["count", "-i", "lo", "-c", "1"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("did you mean afpacket:lo"), "{err}");
    assert!(err.contains("xdp:lo"), "{err}");
}

#[test]
fn a_misspelt_scheme_is_offered_the_nearest() {
    let o = run(&["count", "-i", "afpakcet:lo", "-c", "1"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("did you mean afpacket:lo?"),
        "{}",
        stderr(&o)
    );
    let o = run(&["gen", "-o", "xpd:lo", "-c", "1"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("did you mean xdp:lo?"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn counts_help_lists_every_port_kind() {
    let o = run(&["count", "--help"]);
    let help = String::from_utf8_lossy(&o.stdout);
    for kind in ["afpacket:", "xdp:", "cluster:", "pcap:", "mem:"] {
        assert!(help.contains(kind), "{kind}: {help}");
    }
}

#[test]
fn lab_and_sweep_take_q() {
    for tool in ["lab", "sweep"] {
        let o = run(&[tool, "--help"]);
        assert!(
            String::from_utf8_lossy(&o.stdout).contains("-q, --quiet"),
            "{tool}"
        );
    }
}

#[test]
fn flows_t_ends_a_live_run_with_its_summary() {
    // lo is in every network namespace; nothing needs to arrive on it.
    let t0 = std::time::Instant::now();
    let o = run(&[
        "flows",
        "-i",
        "afpacket:lo",
        "-t",
        "0.5",
        "-w",
        "/dev/null",
        "--json",
    ]);
    if o.status.code() == Some(1) && stderr(&o).contains("needs root") {
        linerate_test_support::skip("afpacket:lo needs root");
        return;
    }
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(t0.elapsed() < std::time::Duration::from_secs(10));
    let err = stderr(&o);
    let last: serde_json::Value = serde_json::from_str(err.lines().last().unwrap()).unwrap();
    assert_eq!(last["ended"], "time limit", "{last}");
}

#[test]
fn flows_c_stops_after_count_packets_as_count_does() {
    let s = sample();
    for (filter, want) in [(None, 100u64), (Some("udp"), 100)] {
        let mut args = vec!["flows", "-i", &s, "-c", "100", "-w", "/dev/null", "--json"];
        if let Some(f) = filter {
            args.extend(["-f", f]);
        }
        let o = run(&args);
        assert!(o.status.success(), "{}", stderr(&o));
        let err = stderr(&o);
        let last: serde_json::Value = serde_json::from_str(err.lines().last().unwrap()).unwrap();
        assert_eq!(last["ended"], "count reached", "{last}");
        // Packets that passed the filter: what count -c counts.
        let passed = last["packets"].as_u64().unwrap() - last["filtered"].as_u64().unwrap();
        assert_eq!(passed, want, "{filter:?}: {last}");
        let mut count = vec!["count", "-i", &s, "-c", "100", "--json", "-q"];
        if let Some(f) = filter {
            count.extend(["-f", f]);
        }
        let c = run(&count);
        let out = String::from_utf8_lossy(&c.stdout);
        let sum: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
        assert_eq!(sum["pkts"].as_u64(), Some(passed), "count: {sum}");
    }
    refused(
        &["flows", "-i", &s, "-c", "10", "-T", "2"],
        &["-c", "--threads", "-t"],
    );
}

#[test]
fn gen_o_with_a_bare_interface_is_offered_afpacket_and_xdp_not_a_new_file() {
    let dir = std::env::temp_dir().join(format!("lr-voc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let o = Command::new(bin())
        .current_dir(&dir)
        .args(["gen", "-o", "lo", "-c", "1"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("did you mean afpacket:lo"),
        "{}",
        stderr(&o)
    );
    assert!(!dir.join("lo").exists(), "a file named lo was written");
    let _ = std::fs::remove_dir_all(&dir);
}

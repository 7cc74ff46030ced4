//! Hostile and careless use of the command: inputs that do not exist (never created, also
//! through a dangling link), outputs onto an input or through a link another user planted,
//! absurd flag values (a usage error naming the flag and its range, never a panic), stops that
//! must come within a second or two whatever the input does (a stalled FIFO, stdin held open, a
//! long gap in a replayed capture, a script that never returns), signals that end the tool like
//! SIGTERM (SIGHUP, SIGQUIT) with whole outputs, a closed output pipe, and the double SIGINT of
//! timeout(1). Every case is bounded to a few seconds.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_linerate")
}

fn sample() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/sample.pcap")
}

fn run(args: &[&str]) -> Output {
    Command::new(bin())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run linerate")
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A directory of its own for one test, removed on drop.
struct Dir(PathBuf);

impl Dir {
    fn new(tag: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("lr-hostile-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }
    fn path(&self, name: &str) -> String {
        self.0.join(name).to_str().unwrap().to_string()
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

// ---------------------------------------------------------------------------------------------
// Inputs are never created.

/// Every command that reads a file, with `IN` where the input goes.
fn readers() -> Vec<Vec<&'static str>> {
    vec![
        vec!["count", "-i", "IN"],
        vec!["count", "-i", "pcap:IN"],
        vec!["flows", "-i", "IN"],
        vec!["gen", "--pcap", "IN", "-o", "mem:hostile-gen"],
        vec!["fwd", "-i", "IN", "-o", "mem:hostile-fwd", "-t", "1"],
        vec!["balance", "-i", "IN", "--threads", "-t", "1"],
    ]
}

fn with_input(args: &[&str], input: &str) -> Vec<String> {
    args.iter()
        .map(|a| match *a {
            "IN" => input.to_string(),
            "pcap:IN" => format!("pcap:{input}"),
            other => other.to_string(),
        })
        .collect()
}

#[test]
fn a_missing_input_is_an_error_and_is_never_created() {
    let d = Dir::new("missing");
    for args in readers() {
        let missing = d.path("typo.pcap");
        let a = with_input(&args, &missing);
        let o = Command::new(bin()).args(&a).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{a:?}: {}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("no such file"), "{a:?}: {err}");
        assert!(!Path::new(&missing).exists(), "{a:?} created its input");
    }
}

#[test]
fn a_dangling_link_as_input_does_not_create_its_target() {
    let d = Dir::new("dangling");
    // A shared directory (sticky, writable by all) as /tmp is, with a link to a file that does
    // not exist; as root the link belongs to nobody, as a hostile user would plant it.
    let shared = d.0.join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(
        &shared,
        std::os::unix::fs::PermissionsExt::from_mode(0o1777),
    )
    .unwrap();
    let target = d.path("victim.pcap");
    let link = shared.join("capture.pcap");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    if is_root() {
        std::os::unix::fs::lchown(&link, Some(65534), Some(65534)).unwrap();
    }
    for args in readers() {
        let a = with_input(&args, link.to_str().unwrap());
        let o = Command::new(bin()).args(&a).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{a:?}: {}", text(&o));
        assert!(
            !Path::new(&target).exists(),
            "{a:?} created the link's target"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Outputs never overwrite an input, and do not follow links planted by another user.

#[test]
fn an_output_onto_an_input_is_refused_and_the_input_is_intact() {
    let d = Dir::new("self");
    let input = d.path("in.pcap");
    std::fs::copy(sample(), &input).unwrap();
    let before = std::fs::read(&input).unwrap();
    let link = d.path("link.pcap");
    std::os::unix::fs::symlink(&input, &link).unwrap();
    let hard = d.path("hard.pcap");
    std::fs::hard_link(&input, &hard).unwrap();
    let script = d.path("s.lua");
    std::fs::write(&script, "function modify(pkts, n) end\n").unwrap();
    let script_before = std::fs::read(&script).unwrap();
    for out in [&input, &link, &hard] {
        let cases: Vec<Vec<String>> = vec![
            vec!["count", "-i", &input, "-w", out],
            vec!["flows", "-i", &input, "-w", out],
            vec!["gen", "--pcap", &input, "-o", out],
            vec!["fwd", "-i", &input, "-o", &format!("pcap:{out}"), "-t", "1"],
            vec![
                "balance",
                "-i",
                &input,
                "--threads",
                "-r",
                &format!("0:{out}"),
            ],
            vec![
                "balance",
                "-i",
                &input,
                "--threads",
                "-o",
                &format!("pcap:{out}"),
            ],
            vec!["count", "-i", &input, "--latency", "--hist-out", out],
        ]
        .into_iter()
        .map(|v| v.into_iter().map(String::from).collect())
        .collect();
        for a in cases {
            let o = Command::new(bin()).args(&a).output().unwrap();
            assert_eq!(o.status.code(), Some(2), "{a:?}: {}", text(&o));
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(
                err.contains("refusing to overwrite an input"),
                "{a:?}: {err}"
            );
            assert!(
                std::fs::read(&input).unwrap() == before,
                "{a:?} changed the input"
            );
        }
    }
    // A script is an input too.
    let o = run(&["gen", "--script", &script, "-c", "10", "-o", &script]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert_eq!(std::fs::read(&script).unwrap(), script_before);
    // Two egress queues cannot write one file.
    let out = d.path("out.pcap");
    let o = run(&[
        "balance",
        "-i",
        &input,
        "--threads",
        "-n",
        "2",
        "-r",
        &format!("0:{out}"),
        "-r",
        &format!("1:{out}"),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
}

#[test]
fn an_output_link_planted_by_another_user_is_not_followed() {
    if !is_root() {
        eprintln!("SKIP: planting a file of another user needs root");
        return;
    }
    let d = Dir::new("planted");
    let shared = d.0.join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(
        &shared,
        std::os::unix::fs::PermissionsExt::from_mode(0o1777),
    )
    .unwrap();
    // A root file the planted link points to, and a planted world-writable file.
    let victim = d.path("victim");
    std::fs::write(&victim, b"root's data").unwrap();
    let link = shared.join("out.pcap");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    std::os::unix::fs::lchown(&link, Some(65534), Some(65534)).unwrap();
    let planted = shared.join("planted.pcap");
    std::fs::write(&planted, b"").unwrap();
    std::os::unix::fs::chown(&planted, Some(65534), Some(65534)).unwrap();
    let s = sample();
    let s = s.to_str().unwrap();
    for out in [link.to_str().unwrap(), planted.to_str().unwrap()] {
        let o = run(&["count", "-i", s, "-w", out]);
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("refusing"), "{err}");
    }
    assert_eq!(std::fs::read(&victim).unwrap(), b"root's data");
    assert_eq!(std::fs::metadata(&planted).unwrap().len(), 0);
    // Our own link in the same place is followed, as the shell's `>` would.
    let mine = shared.join("mine.pcap");
    let target = d.path("target.pcap");
    std::os::unix::fs::symlink(&target, &mine).unwrap();
    let o = run(&["count", "-i", s, "-w", mine.to_str().unwrap(), "-q"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        std::fs::metadata(&target).unwrap().len(),
        std::fs::metadata(s).unwrap().len()
    );
}

// ---------------------------------------------------------------------------------------------
// Every numeric flag is range-checked: a usage error naming the flag and its range.

#[test]
fn absurd_flag_values_are_usage_errors_naming_the_flag_and_range() {
    let d = Dir::new("flags");
    let s = sample();
    let s = s.to_str().unwrap();
    let big = "18446744073709551616"; // 2^64 seconds: Duration::from_secs_f64 panicked on it
    let script = d.path("long.lua");
    std::fs::write(
        &script,
        format!("config = {{ duration = \"{big}\" }}\nfunction modify(pkts, n) end\n"),
    )
    .unwrap();
    #[rustfmt::skip]
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["count", "-i", s, "-t", big], "--duration"),
        (vec!["count", "-i", s, "--interval", big], "--interval"),
        (vec!["count", "-i", s, "--interval", "0"], "--interval"),
        (vec!["count", "-i", s, "-c", "1.5"], "--count"),
        (vec!["count", "-i", s, "-c", "0"], "--count"),
        (vec!["count", "-i", s, "-s", "10"], "--snaplen"),
        (vec!["count", "-i", s, "-g", "99999"], "--core"),
        (vec!["balance", "-i", "source:10", "--threads", "-t", big], "--duration"),
        (vec!["balance", "-i", "source:10", "--threads", "--interval", big], "--interval"),
        (vec!["balance", "-i", "source:10", "--threads", "--consumer-timeout", big], "--consumer-timeout"),
        (vec!["balance", "-i", "source:10", "--threads", "-q", "0"], "--slots"),
        (vec!["balance", "-i", "source:10", "--threads", "-b", "5"], "--buffers"),
        (vec!["balance", "-i", "source:10", "--threads", "--packets", "1.5"], "--packets"),
        (vec!["balance", "-i", "source:1.5", "--threads"], "-i source:1.5"),
        (vec!["balance", "-i", "source:10", "--threads", "--source-rate", "0pps"], "--source-rate"),
        (vec!["balance", "-i", "source:10", "--threads", "--work-ns", "1e12"], "--work-ns"),
        (vec!["gen", "-o", "mem:h", "-t", big], "--duration"),
        (vec!["gen", "-o", "mem:h", "-c", "10", "--interval", big], "--interval"),
        (vec!["gen", "-o", "mem:h", "-c", "10", "--interval", "0"], "--interval"),
        (vec!["gen", "-o", "mem:h", "-c", "10", "--rx-wait", big], "--rx-wait"),
        (vec!["gen", "-o", "mem:h", "-c", "1.5"], "--count"),
        (vec!["gen", "-o", "mem:h", "-c", "10", "--batch", "0"], "--batch"),
        (vec!["gen", "-o", "mem:h", "-c", "10", "--streams", "0"], "--streams"),
        (vec!["gen", "-o", "mem:h", "-c", "10", "--streams", "300"], "--streams"),
        (vec!["gen", "-o", "mem:h", "-c", "10", "--streams", "70000"], "--streams"),
        (vec!["gen", "-o", "mem:h", "-c", "10", "--threads", "0"], "--threads"),
        (vec!["gen", "-o", "mem:h", "-c", "10", "--rate", "0pps"], "--rate"),
        (vec!["gen", "-o", "mem:h", "-c", "10", "--flows", "0"], "--flows"),
        (vec!["gen", "--pcap", s, "-o", "mem:h", "--loop", "0"], "--loop"),
        (vec!["gen", "--pcap", s, "-o", "mem:h", "--speed", "nan"], "--speed"),
        (vec!["gen", "--pcap", s, "-o", "mem:h", "--speed", "0"], "--speed"),
        (vec!["gen", "-o", "mem:h", "--script", &script], "config.duration"),
        (vec!["fwd", "-i", "mem:h1", "-o", "mem:h2", "-t", big], "--duration"),
        (vec!["fwd", "-i", "mem:h1", "-o", "mem:h2", "-T", big], "--period"),
        (vec!["fwd", "-i", "mem:h1", "-o", "mem:h2", "-c", "1.5"], "--count"),
        (vec!["flows", "-i", s, "--idle-timeout", big], "--idle-timeout"),
        (vec!["flows", "-i", s, "--idle-timeout", "0"], "--idle-timeout"),
        (vec!["flows", "-i", s, "--linger", big], "--linger"),
        (vec!["flows", "-i", s, "--status-interval", big], "--status-interval"),
        (vec!["flows", "-i", s, "--threads", "0"], "--threads"),
        (vec!["flows", "-i", s, "--max-flows", "0"], "--max-flows"),
        (vec!["flows", "-i", s, "--ipfix", "127.0.0.1:0"], "--ipfix"),
        (vec!["rfc2544", "-o", "mem:h3", "-i", "mem:h3", "--trial", big], "--trial"),
        (vec!["rfc2544", "-o", "mem:h3", "-i", "mem:h3", "--settle", big], "--settle"),
        (vec!["rfc2544", "-o", "mem:h3", "-i", "mem:h3", "--resolution", "nan"], "--resolution"),
        (vec!["rfc2544", "-o", "mem:h3", "-i", "mem:h3", "--loss-steps", "50,200"], "--loss-steps"),
        (vec!["lab", "-t", big], "--duration"),
        (vec!["lab", "--queues", "0"], "--queues"),
        (vec!["demo", "-t", big], "--duration"),
        (vec!["demo", "--flows", "0"], "--flows"),
    ];
    for (args, flag) in cases {
        let o = run(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains(flag),
            "{args:?}: the message names {flag}: {err}"
        );
        assert!(
            err.contains("between") || err.contains("above") || err.contains("port 0"),
            "{args:?}: the message gives the range: {err}"
        );
        assert_eq!(err.lines().count(), 1, "{args:?}: one line: {err}");
    }
}

#[allow(dead_code)]
fn read_all(mut r: impl Read) -> Vec<u8> {
    let mut v = Vec::new();
    let _ = r.read_to_end(&mut v);
    v
}

#[allow(dead_code)]
fn within(limit: Duration, start: Instant) -> bool {
    start.elapsed() <= limit
}

//! Hostile and careless use of the command: inputs that do not exist (never created, also
//! through a dangling link), outputs onto an input or through a link another user planted,
//! absurd flag values (a usage error naming the flag and its range, never a panic), stops that
//! must come within a second or two whatever the input does (a stalled FIFO, stdin held open, a
//! long gap in a replayed capture, a script that never returns), signals that end the tool like
//! SIGTERM (SIGHUP, SIGQUIT) with whole outputs, a closed output pipe, and the double SIGINT of
//! timeout(1). Every case is bounded to a few seconds.
#![deny(unsafe_code)]

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
    linerate::os::is_root()
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
        linerate_test_support::skip("planting a file of another user needs root");
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
        (vec!["balance", "-i", "source:10", "--threads", "--slots", "0"], "--slots"),
        (vec!["balance", "-i", "source:10", "--threads", "--buffers", "5"], "--buffers"),
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
        (vec!["gen", "--pcap", s, "-o", "mem:h", "--loop", "1.5"], "--loop"),
        (vec!["gen", "--pcap", s, "-o", "mem:h", "--speed", "nan"], "--speed"),
        (vec!["gen", "--pcap", s, "-o", "mem:h", "--speed", "0"], "--speed"),
        (vec!["gen", "-o", "mem:h", "--script", &script], "config.duration"),
        (vec!["fwd", "-i", "mem:h1", "-o", "mem:h2", "-t", big], "--duration"),
        (vec!["fwd", "-i", "mem:h1", "-o", "mem:h2", "--period", big], "--period"),
        (vec!["fwd", "-i", "mem:h1", "-o", "mem:h2", "-c", "1.5"], "--count"),
        (vec!["fwd", "-i", "mem:h1", "-o", "mem:h2", "--threads", "0"], "--threads"),
        (vec!["count", "-i", s, "--threads", "0"], "--threads"),
        (vec!["count", "-i", s, "-T", "5000"], "--threads"),
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
        (vec!["demo", "--steps", "21"], "--steps"),
        (vec!["demo", "--step-time", big], "--step-time"),
        (vec!["demo", "--rate", "0"], "--rate"),
        // Negative values reach the flag's own check (clap took "-5" for an unknown flag).
        (vec!["count", "-i", s, "-c", "-1"], "--count"),
        (vec!["count", "-i", s, "-g", "-1"], "--core"),
        (vec!["gen", "-o", "mem:h", "-c", "10", "--rate", "-5"], "--rate"),
        (vec!["gen", "-o", "mem:h", "-c", "-3"], "--count"),
        (vec!["gen", "-o", "mem:h", "-c", "10", "--streams", "-1"], "--streams"),
        (vec!["fwd", "-i", "mem:h1", "-o", "mem:h2", "--period", "-1"], "--period"),
        (vec!["flows", "-i", s, "--idle-timeout", "-4"], "--idle-timeout"),
        (vec!["balance", "-i", "source:10", "--threads", "--slots", "-1"], "--slots"),
        (vec!["rfc2544", "-o", "mem:h3", "-i", "mem:h3", "--trial", "-1"], "--trial"),
        (vec!["lab", "--queues", "-1"], "--queues"),
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

// ---------------------------------------------------------------------------------------------
// Stops: one signal or -t always ends a run within a second or two, with its summary, whatever
// the input does; other signals end it like SIGTERM; outputs end on whole records.

fn read_all(mut r: impl Read) -> Vec<u8> {
    let mut v = Vec::new();
    let _ = r.read_to_end(&mut v);
    v
}

/// A child whose standard output and error are read as they come (so that it never blocks on
/// a full pipe), killed by PID if the test ends first.
struct Proc {
    child: std::process::Child,
    out: Option<std::thread::JoinHandle<Vec<u8>>>,
    err: Option<std::thread::JoinHandle<Vec<u8>>>,
}

impl Proc {
    fn spawn(cmd: &mut Command) -> Proc {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        let o = child.stdout.take().unwrap();
        let e = child.stderr.take().unwrap();
        Proc {
            child,
            out: Some(std::thread::spawn(move || read_all(o))),
            err: Some(std::thread::spawn(move || read_all(e))),
        }
    }

    fn linerate(args: &[&str]) -> Proc {
        Proc::spawn(Command::new(bin()).args(args).stdin(Stdio::null()))
    }

    fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    fn signal(&self, sig: i32) {
        // The PID of a child this test started and has not reaped.
        let _ = linerate::os::signal(self.pid() as u32, sig);
    }

    /// Waits up to `limit` for the end (then kills it): the status (None: it had to be
    /// killed), the time it took, and its outputs.
    fn finish(mut self, limit: Duration) -> (Option<std::process::ExitStatus>, Duration, String) {
        let t = Instant::now();
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break Some(s);
            }
            if t.elapsed() > limit {
                let _ = self.child.kill();
                let _ = self.child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let took = t.elapsed();
        let out = self.out.take().unwrap().join().unwrap();
        let err = self.err.take().unwrap().join().unwrap();
        let all = format!(
            "status {status:?} after {took:?}\nstdout:\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&out),
            String::from_utf8_lossy(&err)
        );
        (status, took, all)
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// How long a stop may take after it is asked for: a second, with room for a loaded machine.
const STOP_WITHIN: Duration = Duration::from_millis(2500);

/// A pcap file header (Ethernet, microseconds).
fn pcap_header() -> Vec<u8> {
    let mut v = Vec::new();
    v.extend(0xa1b2_c3d4u32.to_le_bytes());
    v.extend(2u16.to_le_bytes());
    v.extend(4u16.to_le_bytes());
    v.extend([0u8; 8]);
    v.extend(65535u32.to_le_bytes());
    v.extend(1u32.to_le_bytes());
    v
}

/// One pcap record: a UDP/IPv4 frame of `len` bytes (at least 42) from port `sport`.
fn pcap_record(sec: u32, usec: u32, len: usize, sport: u16) -> Vec<u8> {
    let mut f = vec![0u8; len.max(42)];
    f[..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    f[14] = 0x45;
    let n = f.len();
    f[16..18].copy_from_slice(&((n - 14) as u16).to_be_bytes());
    f[22] = 64;
    f[23] = 17;
    f[26..30].copy_from_slice(&[10, 0, 0, 1]);
    f[30..34].copy_from_slice(&[10, 0, 0, 2]);
    f[34..36].copy_from_slice(&sport.to_be_bytes());
    f[36..38].copy_from_slice(&9u16.to_be_bytes());
    f[38..40].copy_from_slice(&((n - 34) as u16).to_be_bytes());
    let mut v = Vec::new();
    v.extend(sec.to_le_bytes());
    v.extend(usec.to_le_bytes());
    v.extend((f.len() as u32).to_le_bytes());
    v.extend((f.len() as u32).to_le_bytes());
    v.extend(f);
    v
}

/// The records of a pcap file (microseconds, little-endian, as linerate writes them), if it
/// ends on a whole record; the reason otherwise.
fn whole_pcap(data: &[u8]) -> Result<usize, String> {
    if data.len() < 24 {
        return Err(format!("{} bytes: no whole header", data.len()));
    }
    let mut at = 24;
    let mut n = 0;
    while at < data.len() {
        if data.len() - at < 16 {
            return Err(format!("record {n} at {at}: its header is cut"));
        }
        let incl = u32::from_le_bytes(data[at + 8..at + 12].try_into().unwrap()) as usize;
        if data.len() - at - 16 < incl {
            return Err(format!("record {n} at {at}: {incl} bytes, cut"));
        }
        at += 16 + incl;
        n += 1;
    }
    Ok(n)
}

fn mkfifo(path: &str) {
    let st = Command::new("mkfifo").arg(path).status().expect("mkfifo");
    assert!(st.success(), "mkfifo {path}");
}

/// Opens `path` for writing and keeps it open (a writer that sends nothing).
fn fifo_writer(path: &str) -> std::thread::JoinHandle<std::fs::File> {
    let p = path.to_string();
    std::thread::spawn(move || std::fs::OpenOptions::new().write(true).open(p).unwrap())
}

/// Feeds `path` (a FIFO) with a pcap header and records, without end, until its reader
/// leaves or `stop` is set.
fn fifo_feeder(
    path: &str,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<u64> {
    use std::io::{ErrorKind, Write};
    use std::os::unix::fs::OpenOptionsExt;
    use std::sync::atomic::Ordering;
    let p = path.to_string();
    let stop2 = stop.clone();
    // Never blocks for good: not in open(2) when the tool never opens the fifo (it ended
    // first), not in write(2) when it stops reading; `stop` ends it either way.
    let write_all = move |f: &mut std::fs::File, mut b: &[u8]| -> bool {
        while !b.is_empty() {
            match f.write(b) {
                Ok(n) => b = &b[n..],
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    if stop_now(&stop) {
                        return false;
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(_) => return false,
            }
        }
        true
    };
    fn stop_now(s: &std::sync::atomic::AtomicBool) -> bool {
        s.load(Ordering::Relaxed)
    }
    std::thread::spawn(move || {
        // O_NONBLOCK: open fails (ENXIO) until a reader has the fifo open.
        let mut f = loop {
            match std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(&p)
            {
                Ok(f) => break f,
                Err(_) if !stop_now(&stop2) => std::thread::sleep(Duration::from_millis(1)),
                Err(_) => return 0,
            }
        };
        if !write_all(&mut f, &pcap_header()) {
            return 0;
        }
        let mut n = 0u64;
        while !stop_now(&stop2) {
            let mut chunk = Vec::new();
            for k in 0..64u32 {
                chunk.extend(pcap_record(
                    1 + (n as u32) / 1000,
                    k,
                    300,
                    (n % 97) as u16 + 1000,
                ));
                n += 1;
            }
            if !write_all(&mut f, &chunk) {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        n
    })
}

#[test]
fn a_replayed_capture_with_a_long_gap_stops_on_time_and_on_one_signal() {
    let d = Dir::new("gap");
    let gap = d.path("gap.pcap");
    // Two packets 95 years apart.
    let mut f = pcap_header();
    f.extend(pcap_record(1_000, 0, 60, 1));
    f.extend(pcap_record(3_000_000_000, 0, 60, 2));
    std::fs::write(&gap, f).unwrap();
    let out = format!("mem:hostile-gap-{}", std::process::id());
    // -t 1.
    let p = Proc::linerate(&["gen", "--pcap", &gap, "-o", &out, "-t", "1"]);
    let (st, took, all) = p.finish(Duration::from_secs(1) + STOP_WITHIN + Duration::from_secs(10));
    assert_eq!(st.and_then(|s| s.code()), Some(0), "{all}");
    assert!(took < Duration::from_secs(1) + STOP_WITHIN, "{all}");
    assert!(
        all.contains("Replayed 1 pkts") && all.contains("ended: time limit"),
        "{all}"
    );
    // One SIGTERM, and one SIGINT.
    for sig in [libc::SIGTERM, libc::SIGINT] {
        let p = Proc::linerate(&["gen", "--pcap", &gap, "-o", &out]);
        std::thread::sleep(Duration::from_millis(500));
        p.signal(sig);
        let (st, took, all) = p.finish(STOP_WITHIN + Duration::from_secs(10));
        assert_eq!(st.and_then(|s| s.code()), Some(0), "signal {sig}: {all}");
        assert!(took < STOP_WITHIN, "signal {sig}: {all}");
        assert!(all.contains("ended: interrupted"), "signal {sig}: {all}");
    }
}

#[test]
fn an_empty_capture_with_a_huge_loop_count_ends_at_once() {
    let d = Dir::new("empty-loop");
    let empty = d.path("empty.pcap");
    std::fs::write(&empty, pcap_header()).unwrap();
    let out = format!("mem:hostile-empty-{}", std::process::id());
    let p = Proc::linerate(&["gen", "--pcap", &empty, "-o", &out, "--loop", "1000000000"]);
    let (st, took, all) = p.finish(Duration::from_secs(20));
    assert_eq!(st.and_then(|s| s.code()), Some(0), "{all}");
    assert!(took < STOP_WITHIN, "{all}");
    assert!(
        all.contains("Replayed 0 pkts") && all.contains("the capture has no packet"),
        "{all}"
    );
}

#[test]
fn count_on_a_stalled_fifo_or_stdin_stops_on_time_and_on_one_sigterm() {
    let d = Dir::new("stall");
    // A FIFO whose writer sends nothing, not even a header: -t 1, then one SIGTERM.
    for by_signal in [false, true] {
        let fifo = d.path(&format!("silent-{by_signal}"));
        mkfifo(&fifo);
        let w = fifo_writer(&fifo);
        let mut args = vec!["count", "-i", fifo.as_str()];
        if !by_signal {
            args.extend(["-t", "1"]);
        }
        let p = Proc::linerate(&args);
        let _w = w.join().unwrap();
        let limit = if by_signal {
            std::thread::sleep(Duration::from_millis(700));
            p.signal(libc::SIGTERM);
            STOP_WITHIN
        } else {
            STOP_WITHIN + Duration::from_secs(1)
        };
        let (st, took, all) = p.finish(limit + Duration::from_secs(10));
        assert_eq!(st.and_then(|s| s.code()), Some(0), "{all}");
        assert!(took < limit, "{all}");
        let why = if by_signal {
            "interrupted"
        } else {
            "time limit"
        };
        assert!(all.contains(why) && all.contains("0 pkts"), "{all}");
    }
    // A FIFO that gave a header and three packets, then nothing.
    for by_signal in [false, true] {
        let fifo = d.path(&format!("stalled-{by_signal}"));
        mkfifo(&fifo);
        let w = {
            let p = fifo.clone();
            std::thread::spawn(move || {
                use std::io::Write;
                let mut f = std::fs::OpenOptions::new().write(true).open(p).unwrap();
                let mut v = pcap_header();
                for k in 0..3 {
                    v.extend(pcap_record(1, k, 100, 7));
                }
                f.write_all(&v).unwrap();
                f
            })
        };
        let mut args = vec!["count", "-i", fifo.as_str(), "--json"];
        if !by_signal {
            args.extend(["-t", "1"]);
        }
        let p = Proc::linerate(&args);
        let _w = w.join().unwrap();
        let limit = if by_signal {
            std::thread::sleep(Duration::from_millis(700));
            p.signal(libc::SIGTERM);
            STOP_WITHIN
        } else {
            STOP_WITHIN + Duration::from_secs(1)
        };
        let (st, took, all) = p.finish(limit + Duration::from_secs(10));
        assert_eq!(st.and_then(|s| s.code()), Some(0), "{all}");
        assert!(took < limit, "{all}");
        assert!(all.contains(r#""type":"summary""#), "{all}");
        assert!(all.contains(r#""pkts":3"#), "{all}");
    }
    // Standard input held open by a writer that gave a header and one packet.
    let mut child = Command::new(bin());
    child
        .args(["count", "-i", "-", "-t", "1"])
        .stdin(Stdio::piped());
    let mut p = Proc::spawn(&mut child);
    let mut stdin = p.child.stdin.take().unwrap();
    {
        use std::io::Write;
        let mut v = pcap_header();
        v.extend(pcap_record(1, 0, 100, 7));
        stdin.write_all(&v).unwrap();
    }
    let (st, took, all) = p.finish(STOP_WITHIN + Duration::from_secs(11));
    drop(stdin);
    assert_eq!(st.and_then(|s| s.code()), Some(0), "{all}");
    assert!(took < Duration::from_secs(1) + STOP_WITHIN, "{all}");
    assert!(
        all.contains("time limit") && all.contains("1 pkts"),
        "{all}"
    );
}

#[test]
fn a_script_that_never_returns_is_stopped_naming_the_script() {
    let d = Dir::new("lua-loop");
    let top = d.path("top.lua");
    std::fs::write(
        &top,
        "local n = 0\nwhile true do n = n + 1 end\nfunction modify(pkts, n) end\n",
    )
    .unwrap();
    let inner = d.path("inner.lua");
    std::fs::write(
        &inner,
        "calls = 0\nfunction modify(pkts, n)\n  calls = calls + 1\n  if calls > 3 then\n    \
         while true do end\n  end\nend\n",
    )
    .unwrap();
    let out = format!("mem:hostile-lua-{}", std::process::id());
    // Its top level never returns: -t 1, and one SIGTERM.
    for by_signal in [false, true] {
        let mut args = vec!["gen", "--script", top.as_str(), "-o", out.as_str()];
        if !by_signal {
            args.extend(["-t", "1"]);
        }
        let p = Proc::linerate(&args);
        let limit = if by_signal {
            std::thread::sleep(Duration::from_millis(500));
            p.signal(libc::SIGTERM);
            STOP_WITHIN
        } else {
            STOP_WITHIN + Duration::from_secs(1)
        };
        let (st, took, all) = p.finish(limit + Duration::from_secs(10));
        assert_eq!(st.and_then(|s| s.code()), Some(1), "{all}");
        assert!(took < limit, "{all}");
        assert!(
            all.contains(&format!("{top}:2:")) && all.contains("did not return"),
            "{all}"
        );
    }
    // modify() never returns after a few batches: one SIGINT ends the run with its summary.
    let p = Proc::linerate(&["gen", "--script", &inner, "-o", &out, "--rate", "1000pps"]);
    std::thread::sleep(Duration::from_millis(700));
    p.signal(libc::SIGINT);
    let (st, took, all) = p.finish(STOP_WITHIN + Duration::from_secs(10));
    assert_eq!(st.and_then(|s| s.code()), Some(1), "{all}");
    assert!(took < STOP_WITHIN, "{all}");
    assert!(all.contains("Sent"), "{all}");
    assert!(
        all.contains(&format!("{inner}:5:")) && all.contains("did not return"),
        "{all}"
    );
    // balance's script, under -t.
    let bal = d.path("bal.lua");
    std::fs::write(
        &bal,
        "function balance(pkts, n)\n  while true do end\nend\n",
    )
    .unwrap();
    let lua = format!("lua:{bal}");
    let p = Proc::linerate(&[
        "balance",
        "-i",
        "source",
        "--threads",
        "-m",
        &lua,
        "-t",
        "1",
    ]);
    let (st, took, all) = p.finish(STOP_WITHIN + Duration::from_secs(11));
    assert!(st.is_some(), "{all}");
    assert!(took < Duration::from_secs(1) + STOP_WITHIN, "{all}");
    assert!(all.contains(&format!("{bal}:2:")), "{all}");
}

/// A unique cluster id per test and run.
fn cluster_id(k: u32) -> u32 {
    300_000 + (std::process::id() % 10_000) * 10 + k
}

fn segment(id: u32) -> PathBuf {
    linerate_test_support::cluster_segment(id)
}

#[test]
fn sighup_sigquit_and_sigusr1_end_a_run_like_sigterm_with_whole_outputs() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let d = Dir::new("sighup");
    let sigs = [
        ("HUP", libc::SIGHUP),
        ("QUIT", libc::SIGQUIT),
        ("USR1", libc::SIGUSR1),
    ];
    // count -w and flows -w on a stream that goes on: the files end on whole records.
    for (name, sig) in sigs {
        let fifo = d.path(&format!("in-{name}"));
        mkfifo(&fifo);
        let pcap = d.path(&format!("out-{name}.pcap"));
        let stop = Arc::new(AtomicBool::new(false));
        let feed = fifo_feeder(&fifo, stop.clone());
        let p = Proc::linerate(&["count", "-i", &fifo, "-w", &pcap, "--json"]);
        started(&p, sig);
        p.signal(sig);
        let (st, took, all) = p.finish(STOP_WITHIN + Duration::from_secs(10));
        stop.store(true, Ordering::Relaxed);
        let _ = feed.join();
        assert_eq!(
            st.and_then(|s| s.code()),
            Some(0),
            "count, SIG{name}: {all}"
        );
        assert!(took < STOP_WITHIN, "count, SIG{name}: {all}");
        assert!(all.contains("interrupted"), "count, SIG{name}: {all}");
        let n = whole_pcap(&std::fs::read(&pcap).unwrap())
            .unwrap_or_else(|e| panic!("count, SIG{name}: {pcap}: {e}"));
        assert!(n > 0, "count, SIG{name}: {all}");
        assert!(
            all.contains(&format!(r#""pkts":{n}"#)),
            "count, SIG{name}: {n} written: {all}"
        );
    }
    {
        let fifo = d.path("in-flows");
        mkfifo(&fifo);
        let csv = d.path("flows.csv");
        let stop = Arc::new(AtomicBool::new(false));
        let feed = fifo_feeder(&fifo, stop.clone());
        let p = Proc::linerate(&["flows", "-i", &fifo, "-w", &csv]);
        started(&p, libc::SIGHUP);
        p.signal(libc::SIGHUP);
        let (st, took, all) = p.finish(STOP_WITHIN + Duration::from_secs(10));
        stop.store(true, Ordering::Relaxed);
        let _ = feed.join();
        assert_eq!(st.and_then(|s| s.code()), Some(0), "flows: {all}");
        assert!(took < STOP_WITHIN, "flows: {all}");
        let text = std::fs::read_to_string(&csv).unwrap();
        assert!(text.ends_with('\n'), "flows: {csv} ends mid-line: {all}");
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines.len() > 1, "flows: {text}");
        let fields = lines[0].split(',').count();
        for l in &lines {
            assert_eq!(l.split(',').count(), fields, "flows: a cut line: {l}");
        }
    }
    // balance on a named cluster: its summary, and no segment left.
    let id = cluster_id(1);
    let cid = id.to_string();
    let p = Proc::linerate(&["balance", "-i", "source", "-n", "1", "-c", &cid, "-t", "30"]);
    started(&p, libc::SIGHUP);
    p.signal(libc::SIGHUP);
    let (st, took, all) = p.finish(STOP_WITHIN + Duration::from_secs(10));
    assert_eq!(st.and_then(|s| s.code()), Some(0), "balance: {all}");
    assert!(took < STOP_WITHIN, "balance: {all}");
    assert!(all.contains("interrupted"), "balance: {all}");
    assert!(!segment(id).exists(), "balance left its segment: {all}");
    // gen and fwd.
    let m = format!("mem:hostile-hup-{}", std::process::id());
    let m2 = format!("mem:hostile-hup2-{}", std::process::id());
    for args in [
        vec!["gen", "-o", m.as_str(), "--rate", "1000pps"],
        vec!["fwd", "-i", m.as_str(), "-o", m2.as_str()],
    ] {
        let p = Proc::linerate(&args);
        started(&p, libc::SIGHUP);
        p.signal(libc::SIGHUP);
        let (st, took, all) = p.finish(STOP_WITHIN + Duration::from_secs(10));
        assert_eq!(st.and_then(|s| s.code()), Some(0), "{args:?}: {all}");
        assert!(took < STOP_WITHIN, "{args:?}: {all}");
    }
}

/// Waits until `p` handles `sig` (at most 20 s: a loaded machine), then 300 ms for its run to
/// get going: a signal sent before the tool's main function takes its default action, as for
/// every program, whatever the tool does.
fn started(p: &Proc, sig: i32) {
    let t = Instant::now();
    while !catches(p.pid(), sig) {
        assert!(t.elapsed() < Duration::from_secs(20), "no handler of {sig}");
        std::thread::sleep(Duration::from_millis(1));
    }
    std::thread::sleep(Duration::from_millis(300));
}

/// Whether process `pid` has a handler installed for `sig` (SigCgt of /proc/PID/status).
fn catches(pid: i32, sig: i32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigCgt:"))
        .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
        .is_some_and(|m| m & (1 << (sig - 1)) != 0)
}

/// One signal always stops: sent at many points of start-up (right after spawn, then 1 ms to
/// 300 ms: while the flags are parsed, the inputs opened, the threads started), it ends every
/// run within 1.5 s with exit code 0 and the summary of a normal stop. Only a signal that comes
/// before the tool's main function (the dynamic loader: no program has its handler yet) may
/// take its default action; the test tells which from the handlers the kernel shows
/// (/proc/PID/status) just before sending.
#[test]
fn a_stop_signal_at_any_point_of_start_up_stops_the_run_like_a_normal_stop() {
    let pid = std::process::id();
    let (a, b, c, d) = (
        format!("mem:lr-su-a-{pid}"),
        format!("mem:lr-su-b-{pid}"),
        format!("mem:lr-su-c-{pid}"),
        format!("mem:lr-su-d-{pid}"),
    );
    let cid = cluster_id(4).to_string();
    // Removed when the test ends, failed too (a run it gave up on is killed, SIGKILL).
    let mut segs = linerate_test_support::ClusterSegments::default();
    segs.add(cluster_id(4));
    let tools: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["count", "-i", &a, "--json"],
            r#""ended":"interrupted""#,
        ),
        (vec!["gen", "-o", &b, "--rate", "1000pps"], "Sent "),
        (vec!["fwd", "-i", &c, "-o", &d], "Aggregate statistics"),
        (
            vec!["balance", "-i", "source", "-n", "1", "-c", &cid, "-t", "30"],
            "interrupted",
        ),
        (vec!["flows", "-i", &a], "ended: interrupted"),
    ];
    // None: the moment the kernel shows the handler (polled), the start of the tool's main.
    let delays = [
        Some(0u64),
        Some(1),
        Some(2),
        Some(3),
        Some(5),
        Some(10),
        None,
        Some(20),
        Some(50),
        Some(100),
        Some(300),
    ];
    let sigs = [libc::SIGHUP, libc::SIGINT, libc::SIGTERM];
    let mut before_main = 0;
    for (args, summary) in &tools {
        for (k, &ms) in delays.iter().enumerate() {
            let sig = sigs[k % sigs.len()];
            let p = Proc::linerate(args);
            match ms {
                Some(ms) => std::thread::sleep(Duration::from_millis(ms)),
                None => {
                    let t = Instant::now();
                    while !catches(p.pid(), sig) {
                        assert!(
                            t.elapsed() < Duration::from_secs(10),
                            "{args:?}: no handler"
                        );
                        std::thread::yield_now();
                    }
                }
            }
            let handled = catches(p.pid(), sig);
            p.signal(sig);
            let (st, took, all) = p.finish(Duration::from_millis(1500));
            let what = format!("{args:?}, signal {sig} after {ms:?} ms");
            let st = st.unwrap_or_else(|| panic!("{what}: still running after 1.5 s: {all}"));
            if !handled && st.code().is_none() {
                // Before main: the default action, with nothing written.
                use std::os::unix::process::ExitStatusExt;
                assert_eq!(st.signal(), Some(sig), "{what}: {all}");
                assert!(all.ends_with("stdout:\n\nstderr:\n"), "{what}: {all}");
                before_main += 1;
                continue;
            }
            assert_eq!(st.code(), Some(0), "{what}: {all}");
            assert!(took < Duration::from_millis(1500), "{what}: {all}");
            assert!(all.contains(summary), "{what}: no summary: {all}");
        }
    }
    assert!(!segment(cluster_id(4)).exists());
    // (On a loaded machine the dynamic loader can take more than 10 ms: those runs are said.)
    eprintln!("{before_main} runs got the signal before main");
}

#[test]
fn a_closed_output_pipe_is_said_once_and_what_was_written_is_counted() {
    let d = Dir::new("epipe");
    let big = d.path("big.pcap");
    let mut f = pcap_header();
    for k in 0..20_000u32 {
        f.extend(pcap_record(
            1 + k / 1000,
            k % 1000,
            100,
            (k % 50) as u16 + 2000,
        ));
    }
    std::fs::write(&big, f).unwrap();
    // count -w - | head -c 100000
    let mut child = Command::new(bin())
        .args(["count", "-i", &big, "-w", "-"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut o = child.stdout.take().unwrap();
    let mut got = vec![0u8; 100_000];
    o.read_exact(&mut got).unwrap();
    drop(o);
    let err = read_all(child.stderr.take().unwrap());
    let st = child.wait().unwrap();
    let err = String::from_utf8_lossy(&err);
    assert_eq!(st.code(), Some(0), "{err}");
    assert_eq!(err.matches("output closed").count(), 1, "{err}");
    assert!(err.contains("ended: output closed"), "{err}");
    assert!(!err.contains("Broken pipe"), "{err}");
    assert!(!err.contains("input error"), "{err}");
    // What was written whole: at least what the reader took (24 B header, 116 B records),
    // at most that and a pipe's buffer.
    let line = err
        .lines()
        .find(|l| l.starts_with("Written to -:"))
        .unwrap_or_else(|| panic!("{err}"));
    let written: u64 = line["Written to -:".len()..]
        .split_whitespace()
        .next()
        .unwrap()
        .replace([',', ' ', '\'', '\u{202f}', '_'], "")
        .parse()
        .unwrap_or_else(|e| panic!("{line}: {e}"));
    let took = (100_000 - 24) / 116;
    assert!(written >= took as u64, "{err}");
    assert!(written <= ((100_000 + (1 << 20)) / 116) as u64, "{err}");
    assert!(written < 20_000, "{err}");
}

#[test]
fn a_repeated_signal_is_one_stop_and_a_forced_stop_still_removes_the_segment() {
    // timeout(1) sends SIGINT to the tool, then to its whole process group: the tool gets it
    // twice at once.
    let id = cluster_id(2);
    let cid = id.to_string();
    let p = Proc::spawn(Command::new("timeout").args([
        "-s",
        "INT",
        "--preserve-status",
        "1",
        bin(),
        "balance",
        "-i",
        "source",
        "-n",
        "1",
        "-c",
        &cid,
        "-t",
        "30",
    ]));
    let (st, took, all) = p.finish(Duration::from_secs(1) + STOP_WITHIN + Duration::from_secs(10));
    assert_eq!(st.and_then(|s| s.code()), Some(0), "{all}");
    assert!(took < Duration::from_secs(1) + STOP_WITHIN, "{all}");
    assert!(all.contains("interrupted"), "{all}");
    assert!(!all.contains("by force"), "{all}");
    assert!(!segment(id).exists(), "{all}");
    // A master stuck in its script (a C call the script hook cannot end): one signal is not
    // enough; a second one, later, forces the stop, and the segment is still removed.
    let d = Dir::new("forced");
    let stuck = d.path("stuck.lua");
    std::fs::write(
        &stuck,
        "calls = 0\nfunction balance(pkts, n)\n  calls = calls + 1\n  if calls == 20 then \
         os.execute('sleep 4') end\n  local r = {}\n  for i = 1, n do r[i] = 0 end\n  \
         return r\nend\n",
    )
    .unwrap();
    let id = cluster_id(3);
    let cid = id.to_string();
    let lua = format!("lua:{stuck}");
    let p = Proc::linerate(&["balance", "-i", "source", "-n", "1", "-c", &cid, "-m", &lua]);
    std::thread::sleep(Duration::from_millis(800));
    assert!(segment(id).exists());
    // (SIGTERM: system(3), which os.execute calls, ignores SIGINT while its child runs.)
    p.signal(libc::SIGTERM);
    std::thread::sleep(Duration::from_millis(1300));
    p.signal(libc::SIGTERM);
    let (st, took, all) = p.finish(STOP_WITHIN + Duration::from_secs(10));
    assert_eq!(st.and_then(|s| s.code()), Some(130), "{all}");
    assert!(took < Duration::from_secs(1), "{all}");
    assert!(all.contains("by force"), "{all}");
    assert!(!segment(id).exists(), "forced stop left the segment: {all}");
}

/// A non-interactive shell starts `cmd &` jobs with SIGINT ignored; `kill -INT $!` must still
/// stop the tool with its summary (as tcpdump does). SIGHUP ignored under nohup stays ignored.
#[test]
fn sigint_stops_a_tool_started_in_the_background_of_a_script() {
    let script = format!(
        "{} count -i mem:lr-bg-{} --json -t 30 & pid=$!; sleep 1; kill -INT $pid; wait $pid",
        bin(),
        std::process::id()
    );
    let t0 = Instant::now();
    let o = Command::new("sh").args(["-c", &script]).output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "SIGINT did not stop it: it ran until -t ({:?})",
        t0.elapsed()
    );
    assert!(out.contains("\"summary\""), "{out}");
}

#[test]
fn q_is_quiet_on_every_tool_that_prints_as_it_runs() {
    // -q means the same everywhere: the final summary only. fwd printed l2fwd's block every
    // -T and watch a table every -i, with no way to keep only the end.
    let blocks = |args: &[&str], needle: &str| {
        let o = run(args);
        assert!(o.status.success(), "{args:?}: {}", text(&o));
        String::from_utf8_lossy(&o.stdout).matches(needle).count()
    };
    let fwd = [
        "fwd",
        "-i",
        "mem:q-a",
        "-o",
        "mem:q-b",
        "--period",
        "0.3",
        "-t",
        "1.2",
        "--no-console",
    ];
    assert!(blocks(&fwd, "Port statistics") >= 2);
    let mut quiet = fwd.to_vec();
    quiet.push("-q");
    assert_eq!(blocks(&quiet, "Port statistics"), 1);
    let watch = [
        "watch",
        "lo",
        "--interval",
        "200ms",
        "-t",
        "1",
        "--no-polls",
    ];
    assert!(blocks(&watch, "hop         rx pkt/s") >= 2);
    let mut quiet = watch.to_vec();
    quiet.push("-q");
    assert_eq!(blocks(&quiet, "hop         rx pkt/s"), 0);
    assert_eq!(blocks(&quiet, "Summary over"), 1);
    // And -q is --quiet wherever it exists (balance's ring size is --slots).
    for tool in [
        "count", "gen", "fwd", "balance", "flows", "watch", "rfc2544", "lab", "sweep",
    ] {
        let o = run(&[tool, "--help"]);
        let help = String::from_utf8_lossy(&o.stdout).into_owned();
        assert!(help.contains("-q, --quiet"), "{tool}: {help}");
    }
}

/// `afpacket:any` captures Linux cooked (LINUX_SLL2) packets and names no interface to send on:
/// fwd (input or output), balance (input or output) and gen (output) refuse it at start with
/// exit 2 and the reason, before any output is touched, instead of forwarding the cooked header
/// as Ethernet or failing at the first packet.
#[test]
fn any_is_refused_where_it_cannot_apply() {
    let dir = std::env::temp_dir().join(format!("lr-any-refused-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("x.pcap");
    let out = out.to_str().unwrap();
    let s = sample();
    let s = s.to_str().unwrap();
    let cases: Vec<Vec<&str>> = vec![
        vec!["fwd", "-i", "any", "-o", out, "-t", "1", "-q"],
        vec!["fwd", "-i", "afpacket:any", "-o", out, "-t", "1", "-q"],
        vec!["fwd", "-i", s, "-o", "afpacket:any", "-t", "1", "-q"],
        vec!["balance", "-i", "any", "-c", "4177", "-n", "1", "-t", "1"],
        vec!["gen", "-o", "afpacket:any", "-c", "1"],
    ];
    for args in cases {
        let o = run(&args);
        let t = text(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {t}");
        assert!(t.contains("afpacket:any"), "{args:?}: {t}");
        assert!(!Path::new(out).exists(), "{args:?} touched its output: {t}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A classic pcap file of link type 276 (LINUX_SLL2) holding one cooked UDP packet.
fn sll2_pcap(path: &Path) {
    let mut f = Vec::new();
    f.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    f.extend_from_slice(&2u16.to_le_bytes());
    f.extend_from_slice(&4u16.to_le_bytes());
    f.extend_from_slice(&[0; 8]);
    f.extend_from_slice(&65535u32.to_le_bytes());
    f.extend_from_slice(&276u32.to_le_bytes());
    // SLL2 header (20 bytes): protocol IPv4, ifindex 2, ARPHRD_ETHER, outgoing, 6-byte address.
    let mut pkt = vec![
        0x08, 0x00, 0, 0, 0, 0, 0, 2, 0, 1, 4, 6, 2, 0, 0, 0, 0, 1, 0, 0,
    ];
    // IPv4 + UDP 9999 -> 9999, no payload.
    pkt.extend_from_slice(&[
        0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2, 0x27, 0x0f, 0x27, 0x0f,
        0, 8, 0, 0,
    ]);
    f.extend_from_slice(&[0; 8]);
    f.extend_from_slice(&(pkt.len() as u32).to_le_bytes());
    f.extend_from_slice(&(pkt.len() as u32).to_le_bytes());
    f.extend_from_slice(&pkt);
    std::fs::write(path, f).unwrap();
}

/// Inputs of different link types (Ethernet and LINUX_SLL2): a classic pcap output (one link
/// type) is refused before it is created, and a filter is compiled for each input's link type
/// (the cooked packet matches), instead of junk records and matches filtered out.
#[test]
fn mixed_link_types_are_refused_where_one_link_type_would_be_assumed() {
    let d = Dir::new("mixed-link");
    let sll = d.path("cooked.pcap");
    sll2_pcap(Path::new(&sll));
    let eth = sample();
    let inputs = format!("{},{sll}", eth.display());
    let out = d.path("mixed.pcap");
    let o = run(&["count", "-i", &inputs, "-w", &out, "-q"]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(2), "{t}");
    assert!(t.contains("one link type"), "{t}");
    assert!(!Path::new(&out).exists(), "{t}");
    // pcapng describes each interface with its link type: taken.
    let ng = d.path("mixed.pcapng");
    let o = run(&["count", "-i", &inputs, "-w", &ng, "-q"]);
    assert!(o.status.success(), "{}", text(&o));
    // The filter is compiled for each input's link type: the cooked packet matches too.
    let pkts = |uri: &str, expr: &str| {
        let o = run(&["count", "-i", uri, "-f", expr, "--json", "-q"]);
        assert!(o.status.success(), "{}", text(&o));
        let out = String::from_utf8_lossy(&o.stdout).to_string();
        let s: serde_json::Value = out
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|j| j["type"] == "summary")
            .unwrap_or_else(|| panic!("summary: {out}"));
        s["pkts"].as_u64().unwrap()
    };
    let eth_only = pkts(eth.to_str().unwrap(), "udp port 9999");
    assert_eq!(pkts(&inputs, "udp port 9999"), eth_only + 1);
    // Each input's filter tests the length on the wire, as libpcap's: records cut to 64 bytes
    // pass `greater 100` by their wire length with an input of another link type beside them.
    let cut = d.path("cut.pcap");
    let o = run(&[
        "count",
        "-i",
        eth.to_str().unwrap(),
        "-s",
        "64",
        "-w",
        &cut,
        "-q",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let (cut_only, sll_only) = (pkts(&cut, "greater 100"), pkts(&sll, "greater 100"));
    assert!(cut_only > 0, "sample.pcap has frames over 100 bytes");
    assert_eq!(
        pkts(&format!("{cut},{sll}"), "greater 100"),
        cut_only + sll_only
    );
}

/// tcpdump's `-G` name is an strftime pattern: an input beside it is refused only when the
/// pattern could name it (its literal parts match, `%%` being a `%`, and each conversion the
/// characters it can write: digits for `%H`, any text for `%a`), not whenever its name starts
/// with what comes before the first `%` (`'%H%M%S.pcap'` made every file in the directory look
/// like a rotation of it). tcpdump writes these runs.
#[test]
fn a_timed_name_that_cannot_be_the_input_is_not_refused() {
    let d = Dir::new("timed");
    let input = d.path("in.pcap");
    std::fs::copy(sample(), &input).unwrap();
    let other = d.path("cap-12.pcap");
    std::fs::copy(sample(), &other).unwrap();
    let before = std::fs::read(&input).unwrap();
    for pattern in [
        "%H%M%S.pcap",
        "in%%.pcap",
        "i%Y.pcapng",
        "x-%F.pcap",
        "%Y%%.pcap",
    ] {
        for i in [&input, &other] {
            let o = run(&["count", "-q", "-i", i, "-w", &d.path(pattern), "-G", "3600"]);
            assert!(o.status.success(), "{pattern}: {}", text(&o));
        }
    }
    // A pattern that can name the input is still refused, before anything is written.
    for pattern in ["cap-%H.pcap", "%b-%d.pcap", "cap%z.pcap", "%a.pcap"] {
        let o = run(&[
            "count",
            "-q",
            "-i",
            &other,
            "-w",
            &d.path(pattern),
            "-G",
            "3600",
        ]);
        assert_eq!(o.status.code(), Some(2), "{pattern}: {}", text(&o));
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("is the input"),
            "{pattern}: {}",
            text(&o)
        );
    }
    assert_eq!(std::fs::read(&input).unwrap(), before);
    assert_eq!(
        std::fs::read(&other).unwrap(),
        std::fs::read(sample()).unwrap()
    );
}

//! What a capture service needs, on a veth in a network namespace: `-Z USER` (tcpdump's
//! privilege drop: the process runs as USER once the port and the output are open, and still
//! captures), `--pidfile` (written at start, removed at exit, a live pid in it refused),
//! `-p` (the interface is not made promiscuous; it is by default, as with tcpdump), and `-D`
//! (tcpdump's list: interfaces, afpacket:any, running clusters' queues). Needs root (skips
//! otherwise, fails instead under LINERATE_REQUIRE_PRIV=1).
#![deny(unsafe_code)]

use linerate_test_support::netns::{self, NetnsPair, Side};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_linerate");

/// Kills (by its pid) and reaps a child still running when the test ends.
struct Reap(Child);

impl Drop for Reap {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A directory of this test run and test `tag` (tests run in parallel).
fn dir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("linerate-svc-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `count ARGS` on vB in namespace B, once its start line is out.
fn count_in(
    pair: &NetnsPair,
    args: &[&str],
) -> (Reap, std::io::Lines<BufReader<std::process::ChildStdout>>) {
    let mut c = Command::new("ip")
        .args([
            "netns",
            "exec",
            pair.ns(Side::B),
            BIN,
            "count",
            "-i",
            "afpacket:vB",
            "--json",
            "-q",
        ])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn linerate count");
    let mut lines = BufReader::new(c.stdout.take().unwrap()).lines();
    let Some(Ok(first)) = lines.next() else {
        let mut err = String::new();
        std::io::Read::read_to_string(&mut c.stderr.take().unwrap(), &mut err).unwrap();
        panic!("count {args:?} ended before its start line: {err}");
    };
    assert!(first.contains("\"type\":\"start\""), "{first}");
    (Reap(c), lines)
}

/// The `promiscuity` count of vB (`ip -d link`).
fn promiscuity(pair: &NetnsPair) -> u32 {
    let s = pair.ip_in(Side::B, &["-d", "link", "show", "vB"]).unwrap();
    let w: Vec<&str> = s.split_whitespace().collect();
    let i = w
        .iter()
        .position(|x| *x == "promiscuity")
        .expect("promiscuity in ip -d link");
    w[i + 1].parse().unwrap()
}

fn wait_end(r: &mut Reap) -> std::process::ExitStatus {
    let t0 = Instant::now();
    loop {
        if let Some(s) = r.0.try_wait().unwrap() {
            return s;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "count did not finish"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn count_drops_privileges_keeps_a_pidfile_and_leaves_promiscuity_to_p() {
    if !netns::require_priv() {
        return;
    }
    let Ok(Some((uid, _))) = linerate::os::user_ids("nobody") else {
        linerate_test_support::skip("no user nobody to become");
        return;
    };
    let pair = NetnsPair::new().expect("netns pair");
    pair.no_ipv6().unwrap();
    // A directory nobody may write in (not sticky): the pidfile can be removed after -Z.
    let d = dir("z").join("run");
    std::fs::create_dir_all(&d).unwrap();
    std::process::Command::new("chmod")
        .args(["0777", d.to_str().unwrap()])
        .status()
        .unwrap();
    let pidfile = d.join("count.pid");
    let out = d.join("out.pcap");
    assert_eq!(promiscuity(&pair), 0);
    let (mut c, lines) = count_in(
        &pair,
        &[
            "-Z",
            "nobody",
            "--pidfile",
            pidfile.to_str().unwrap(),
            "-w",
            out.to_str().unwrap(),
            "-c",
            "50",
            "-t",
            "20",
            "-f",
            "udp dst port 9",
        ],
    );
    // Promiscuous by default, as tcpdump.
    assert_eq!(promiscuity(&pair), 1);
    let pid: u32 = std::fs::read_to_string(&pidfile)
        .expect("pidfile written")
        .trim()
        .parse()
        .unwrap();
    assert_eq!(pid, c.0.id(), "the pidfile names the capturing process");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let uids = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    assert!(
        uids.split_whitespace()
            .skip(1)
            .all(|u| u == uid.to_string()),
        "every uid is nobody's: {uids}"
    );
    // A second instance on the same pidfile is refused while the first runs.
    let second = Command::new(BIN)
        .args([
            "count",
            "-i",
            "mem:svc",
            "-t",
            "1",
            "--pidfile",
            pidfile.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_eq!(
        second.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    assert!(String::from_utf8_lossy(&second.stderr).contains("is running"));
    // It still captures as nobody, into the file opened as root.
    let frames: Vec<Vec<u8>> = (0..50)
        .map(|i| netns::udp_frame(pair.mac_b, pair.mac_a, 1, i))
        .collect();
    pair.run_in(Side::A, || netns::send_raw("vA", &frames));
    assert!(wait_end(&mut c).success());
    let s: serde_json::Value = lines
        .map_while(Result::ok)
        .filter_map(|l| serde_json::from_str(&l).ok())
        .find(|j: &serde_json::Value| j["type"] == "summary")
        .expect("summary");
    assert_eq!(s["pkts"], 50, "{s}");
    assert!(!pidfile.exists(), "pidfile removed at exit");
    assert_eq!(
        std::fs::metadata(&out).unwrap().len(),
        24 + 50 * 16 + frames.iter().map(|f| f.len() as u64).sum::<u64>()
    );
    assert_eq!(promiscuity(&pair), 0, "promiscuous mode ends with the port");

    // -p: not promiscuous.
    let (c, _) = count_in(&pair, &["-p", "-t", "20"]);
    assert_eq!(promiscuity(&pair), 0, "-p leaves the interface as it is");
    drop(c);

    // An unknown user: usage error, before anything is opened or written.
    let o = Command::new(BIN)
        .args([
            "count",
            "-i",
            "mem:svc",
            "-Z",
            "lr-no-such-user",
            "-w",
            d.join("never.pcap").to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(!d.join("never.pcap").exists());
    let _ = std::fs::remove_dir_all(dir("z"));
}

#[test]
fn d_lists_interfaces_any_and_running_clusters_queues() {
    if !netns::require_priv() {
        return;
    }
    let pair = NetnsPair::new().expect("netns pair");
    let shm = dir("d").join("shm");
    std::fs::create_dir_all(&shm).unwrap();
    let id = (900_000 + std::process::id() % 10_000).to_string();
    let master = Command::new(BIN)
        .env("LINERATE_SHM_DIR", &shm)
        .args([
            "balance",
            "-i",
            "source",
            "-c",
            &id,
            "-n",
            "2",
            "-m",
            "round-robin",
            "-t",
            "20",
            "-q",
            // In LINERATE_SHM_DIR, where `count -D` is to find it (not on a hugetlbfs).
            "--no-huge",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start balance");
    let _master = Reap(master);
    let seg = shm.join(format!("linerate-cluster-{id}"));
    let t0 = Instant::now();
    let list = loop {
        let o = Command::new("ip")
            .args(["netns", "exec", pair.ns(Side::B), "env"])
            .arg(format!("LINERATE_SHM_DIR={}", shm.display()))
            .args([BIN, "count", "-D"])
            .output()
            .unwrap();
        assert!(o.status.success());
        let s = String::from_utf8_lossy(&o.stdout).into_owned();
        if s.contains("cluster:") || t0.elapsed() > Duration::from_secs(10) {
            break s;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(seg.exists());
    let names: Vec<&str> = list
        .lines()
        .map(|l| {
            l.split_once('.')
                .expect("numbered")
                .1
                .split(' ')
                .next()
                .unwrap()
        })
        .collect();
    let want_cluster = [format!("cluster:{id}@0"), format!("cluster:{id}@1")];
    assert_eq!(
        names,
        [
            "afpacket:lo",
            "afpacket:vB",
            "afpacket:any",
            &want_cluster[0],
            &want_cluster[1]
        ],
        "{list}"
    );
    assert!(list.contains("xdp:vB@0"), "{list}");
    let _ = std::fs::remove_dir_all(dir("d"));
}

/// A cluster master with `-Z`: it runs as the user once the segment exists, and at exit still
/// removes the segment (given to the user before the drop: /dev/shm is sticky) and its pidfile.
#[test]
fn balance_drops_privileges_and_still_cleans_up() {
    if !netns::require_priv() {
        return;
    }
    let Ok(Some((uid, _))) = linerate::os::user_ids("nobody") else {
        linerate_test_support::skip("no user nobody to become");
        return;
    };
    let d = dir("b").join("run");
    std::fs::create_dir_all(&d).unwrap();
    Command::new("chmod")
        .args(["0777", d.to_str().unwrap()])
        .status()
        .unwrap();
    let pidfile = d.join("balance.pid");
    let id = 800_000 + std::process::id() % 10_000;
    let seg = || linerate_test_support::cluster_segment(id);
    let ids = id.to_string();
    let mut m = Reap(
        Command::new(BIN)
            .args([
                "balance",
                "-i",
                "source",
                "-c",
                &ids,
                "-n",
                "1",
                "-m",
                "round-robin",
            ])
            .args([
                "-t",
                "3",
                "-q",
                "-Z",
                "nobody",
                "--pidfile",
                pidfile.to_str().unwrap(),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start balance"),
    );
    let t0 = Instant::now();
    while !(pidfile.exists() && seg().exists()) {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "balance did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = m.0.id();
    let t0 = Instant::now();
    loop {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        if status
            .lines()
            .find(|l| l.starts_with("Uid:"))
            .is_some_and(|l| l.split_whitespace().skip(1).all(|u| u == uid.to_string()))
        {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "balance never became nobody: {status}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let s = wait_end(&mut m);
    assert!(s.success(), "balance -Z failed");
    assert!(!seg().exists(), "the segment is removed at exit");
    assert!(!pidfile.exists(), "the pidfile is removed at exit");
    let _ = std::fs::remove_dir_all(dir("b"));
}

/// `--hist-out` is created before -Z drops privileges (as tcpdump opens -w), in a directory
/// only root may write in: the run ends with the histogram written, not "Permission denied"
/// at its end after the capture.
#[test]
fn hist_out_is_opened_before_the_privilege_drop() {
    if !netns::require_priv() {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let d = dir("hist-z");
    let root_only = d.join("root700");
    std::fs::create_dir_all(&root_only).unwrap();
    std::fs::set_permissions(&root_only, std::fs::Permissions::from_mode(0o700)).unwrap();
    let hist = root_only.join("h.csv");
    let sample =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/sample.pcap");
    let o = Command::new(BIN)
        .args([
            "count",
            "-i",
            sample.to_str().unwrap(),
            "-q",
            "-Z",
            "nobody",
        ])
        .args(["--latency", "--hist-out", hist.to_str().unwrap()])
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&d);
    assert!(
        o.status.success(),
        "{:?}: {}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
}

/// An interface deleted under a capture ends it, as tcpdump ("The interface disappeared",
/// exit 1), instead of a capture that never ends: bounded by -t 20, it must end within 5 s.
#[test]
fn a_capture_ends_when_its_interface_disappears() {
    if !netns::require_priv() {
        return;
    }
    let pair = NetnsPair::new().expect("netns pair");
    let (mut c, _lines) = count_in(&pair, &["-t", "20"]);
    std::thread::sleep(Duration::from_millis(200));
    let del = Command::new("ip")
        .args(["-n", pair.ns(Side::B), "link", "del", "vB"])
        .status()
        .unwrap();
    assert!(del.success());
    let t0 = Instant::now();
    let child = &mut c.0;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "the capture did not end when its interface went away"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut err = String::new();
    use std::io::Read;
    child.stderr.take().map(|mut e| e.read_to_string(&mut err));
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(err.contains("The interface disappeared"), "{err}");
}

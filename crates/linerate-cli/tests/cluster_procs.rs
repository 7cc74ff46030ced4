//! The cluster across real processes: a `linerate balance` master and `linerate count -i
//! cluster:ID@Q` consumers. Every test is bounded in time and kills only the processes it
//! started (by their PID, through their `Child` handles).

use std::os::unix::fs::PermissionsExt;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_linerate");

/// A unique cluster id per test and run.
fn cluster_id(k: u32) -> u32 {
    100_000 + (std::process::id() % 10_000) * 10 + k
}

fn seg(id: u32) -> std::path::PathBuf {
    std::path::PathBuf::from(format!("/dev/shm/linerate-cluster-{id}"))
}

/// Children killed (SIGKILL, by PID) and reaped when the test ends, however it ends.
struct Procs(Vec<Child>);

impl Drop for Procs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn spawn(args: &[&str]) -> Child {
    Command::new(BIN)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start linerate")
}

/// Waits for a child to exit, at most `limit`; returns its output.
fn finish(mut c: Child, limit: Duration) -> Output {
    let t0 = Instant::now();
    while c.try_wait().unwrap().is_none() {
        if t0.elapsed() > limit {
            let _ = c.kill();
            let out = c.wait_with_output().unwrap();
            panic!(
                "process did not finish within {limit:?}; stdout:\n{}\nstderr:\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    c.wait_with_output().unwrap()
}

fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn summary(out: &Output) -> serde_json::Value {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|j| j["type"] == "summary")
        .unwrap_or_else(|| {
            panic!(
                "no summary line in:\n{}\nstderr:\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        })
}

#[test]
fn two_consumer_processes_balance_account_and_stop_when_the_master_exits() {
    let id = cluster_id(1);
    let ids = id.to_string();
    let master = spawn(&[
        "balance",
        "-i",
        "source:200000",
        "-c",
        &ids,
        "-n",
        "2,1",
        "-m",
        "round-robin",
        "--wait-consumers",
        "-t",
        "20",
        "--json",
    ]);
    let mut procs = Procs(vec![]);
    wait_for("the segment", Duration::from_secs(10), || seg(id).exists());
    let mode = std::fs::metadata(seg(id)).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "segments are owner-only");
    for q in 0..3 {
        procs.0.push(spawn(&[
            "count",
            "-i",
            &format!("cluster:{id}@{q}"),
            "--json",
            "-q",
        ]));
    }
    let m = finish(master, Duration::from_secs(30));
    assert!(m.status.success(), "{}", String::from_utf8_lossy(&m.stderr));
    let ms = summary(&m);
    assert_eq!(ms["rx"], 200_000);
    assert_eq!(ms["invariant_ok"], true);
    assert_eq!(ms["delivered"], 400_000, "app 0 split + app 1 full copy");
    assert!(!seg(id).exists(), "the master removes its segment");
    let mut got = vec![];
    for c in procs.0.drain(..) {
        let out = finish(c, Duration::from_secs(20));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("closed the cluster"), "consumer stderr: {err}");
        got.push(summary(&out)["pkts"].as_u64().unwrap());
    }
    assert_eq!(got, vec![100_000, 100_000, 200_000]);
}

#[test]
fn a_consumer_killed_with_sigkill_is_detected_and_a_restarted_one_resumes() {
    let id = cluster_id(2);
    let ids = id.to_string();
    let mut procs = Procs(vec![spawn(&[
        "balance",
        "-i",
        "source",
        "-c",
        &ids,
        "-n",
        "1",
        "-m",
        "round-robin",
        "-t",
        "8",
        "--json",
        "--interval",
        "200ms",
        "-q",
        "1024",
    ])]);
    wait_for("the segment", Duration::from_secs(10), || seg(id).exists());
    let mut first = spawn(&["count", "-i", &format!("cluster:{id}@0"), "--json", "-q"]);
    std::thread::sleep(Duration::from_millis(800));
    // A second consumer on a taken queue is refused.
    let dup = finish(
        spawn(&["count", "-i", &format!("cluster:{id}@0"), "-q"]),
        Duration::from_secs(10),
    );
    assert!(!dup.status.success());
    assert!(String::from_utf8_lossy(&dup.stderr).contains("already has a consumer"));
    // kill -9, and leave it a zombie for a while (not reaped yet): still seen as dead.
    first.kill().unwrap();
    std::thread::sleep(Duration::from_millis(600));
    let _ = first.wait();
    let second = spawn(&["count", "-i", &format!("cluster:{id}@0"), "--json", "-q"]);
    procs.0.push(second);
    let master = procs.0.remove(0);
    let m = finish(master, Duration::from_secs(30));
    assert!(m.status.success(), "{}", String::from_utf8_lossy(&m.stderr));
    let ms = summary(&m);
    assert_eq!(ms["invariant_ok"], true, "{ms}");
    let q = &ms["queues"][0];
    assert!(
        q["drops"]["consumer_gone"].as_u64().unwrap() > 0,
        "the dead consumer was noticed: {q}"
    );
    let second = procs.0.pop().unwrap();
    let out = finish(second, Duration::from_secs(20));
    let pkts = summary(&out)["pkts"].as_u64().unwrap();
    assert!(
        pkts > 0,
        "the restarted consumer resumed and received packets"
    );
}

#[test]
fn a_killed_master_leaves_a_stale_segment_that_is_detected_and_replaced() {
    let id = cluster_id(3);
    let ids = id.to_string();
    let mut procs = Procs(vec![spawn(&[
        "balance", "-i", "source", "-c", &ids, "-n", "1", "-t", "20", "--quiet",
    ])]);
    wait_for("the segment", Duration::from_secs(10), || seg(id).exists());
    let consumer = spawn(&["count", "-i", &format!("cluster:{id}@0"), "--json", "-q"]);
    std::thread::sleep(Duration::from_millis(300));
    // A second master for the same id is refused while the first runs.
    let dup = finish(
        spawn(&["balance", "-i", "source:10", "-c", &ids, "-n", "1"]),
        Duration::from_secs(10),
    );
    assert!(!dup.status.success());
    assert!(String::from_utf8_lossy(&dup.stderr).contains("in use by its master"));
    // kill -9 the master: the segment stays behind.
    procs.0[0].kill().unwrap();
    let _ = procs.0[0].wait();
    assert!(seg(id).exists());
    // Its consumer notices and stops with its final statistics.
    let out = finish(consumer, Duration::from_secs(20));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("died"), "{err}");
    summary(&out);
    // A new consumer is told the cluster is not running.
    let late = finish(
        spawn(&["count", "-i", &format!("cluster:{id}@0")]),
        Duration::from_secs(10),
    );
    assert!(!late.status.success());
    assert!(String::from_utf8_lossy(&late.stderr).contains("not running"));
    // A new master replaces the stale segment.
    let m = finish(
        spawn(&[
            "balance",
            "-i",
            "source:1000",
            "-c",
            &ids,
            "-n",
            "1",
            "--json",
        ]),
        Duration::from_secs(20),
    );
    assert!(m.status.success(), "{}", String::from_utf8_lossy(&m.stderr));
    assert_eq!(summary(&m)["rx"], 1000);
    assert!(!seg(id).exists());
}

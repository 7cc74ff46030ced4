//! The cluster across real processes: a `linerate balance` master and `linerate count -i
//! cluster:ID@Q` consumers. Every test is bounded in time and kills only the processes it
//! started (by their PID, through their `Child` handles).
#![deny(unsafe_code)]

use std::os::unix::fs::PermissionsExt;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_linerate");

/// A unique cluster id per test and run.
fn cluster_id(k: u32) -> u32 {
    100_000 + (std::process::id() % 10_000) * 10 + k
}

fn seg(id: u32) -> std::path::PathBuf {
    linerate_test_support::cluster_segment(id)
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
    // The source is not paced: consumers that fall behind lose packets on their own queue
    // (ring_full), which the accounting shows; nothing else may be missing.
    let q = ms["queues"].as_array().unwrap();
    let offered = |x: &serde_json::Value| {
        x["delivered"].as_u64().unwrap()
            + ["ring_full", "consumer_gone", "no_frame", "unread"]
                .iter()
                .map(|r| x["drops"][r].as_u64().unwrap())
                .sum::<u64>()
    };
    assert_eq!(
        offered(&q[0]) + offered(&q[1]),
        200_000,
        "application 0: each packet once"
    );
    assert_eq!(offered(&q[2]), 200_000, "application 1: a full copy");
    assert!(!seg(id).exists(), "the master removes its segment");
    for (k, c) in procs.0.drain(..).enumerate() {
        let out = finish(c, Duration::from_secs(20));
        let err = String::from_utf8_lossy(&out.stderr);
        // A normal end of the master is a normal end of its consumers.
        assert!(out.status.success(), "consumer stderr: {err}");
        let s = summary(&out);
        assert_eq!(s["ended"], "end of input", "{s}");
        assert_eq!(
            s["input_ended"],
            format!("cluster {id} ended: master stopped"),
            "{s}"
        );
        let pkts = s["pkts"].as_u64().unwrap();
        assert_eq!(
            pkts,
            q[k]["delivered"].as_u64().unwrap(),
            "consumer {k} got its queue"
        );
        assert!(pkts > 0);
    }
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
        "--slots",
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

/// PF_RING ZC's cluster test 5: a process transmits into the cluster and the master sends it out of `-o`.
/// The sender here is another master whose queue 0 goes (`-r 0:cluster:ID`) into cluster ID.
#[test]
fn a_process_transmits_into_the_cluster_and_the_master_sends_it_out() {
    let id = cluster_id(4);
    let ids = id.to_string();
    let dir = std::env::temp_dir().join(format!("lr-tx-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out_pcap = dir.join("out.pcap");
    let master = spawn(&[
        "balance",
        "-i",
        &format!("mem:idle{id}"),
        "-c",
        &ids,
        "-n",
        "1",
        "-o",
        out_pcap.to_str().unwrap(),
        "-t",
        "3",
        "--json",
        "--interval",
        "100ms",
    ]);
    let _guard = Procs(vec![]);
    wait_for("the segment", Duration::from_secs(10), || seg(id).exists());
    let sender = finish(
        spawn(&[
            "balance",
            "-i",
            "source:3000",
            "-c",
            &(id + 1).to_string(),
            "-n",
            "1",
            "-m",
            "rr",
            "-r",
            &format!("0:cluster:{id}"),
            "--quiet",
        ]),
        Duration::from_secs(20),
    );
    assert!(
        sender.status.success(),
        "{}",
        String::from_utf8_lossy(&sender.stderr)
    );
    let text = String::from_utf8_lossy(&sender.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with("Egress Q 0 -> cluster:"))
        .expect(&text);
    let sent: u64 = line
        .split(": ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .map(|n| n.replace('\'', "").parse().unwrap())
        .unwrap();
    assert!(sent > 0, "{line}");
    let m = finish(master, Duration::from_secs(30));
    assert!(m.status.success(), "{}", String::from_utf8_lossy(&m.stderr));
    let ms = summary(&m);
    assert_eq!(ms["tx"].as_u64().unwrap(), sent, "{ms}");
    assert_eq!(ms["tx_dropped"], 0);
    let c = finish(
        spawn(&["count", "-i", out_pcap.to_str().unwrap(), "--json", "-q"]),
        Duration::from_secs(20),
    );
    assert_eq!(summary(&c)["pkts"].as_u64().unwrap(), sent);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The master never waits for a consumer: a stopped one (SIGSTOP) loses packets on its own
/// queue only, and after SIGCONT it drains its queue and ends normally.
#[test]
fn a_stopped_consumer_costs_only_its_own_queue() {
    let id = cluster_id(5);
    let ids = id.to_string();
    let master = spawn(&[
        "balance",
        "-i",
        "source",
        "--source-rate",
        "20kpps",
        "-c",
        &ids,
        "-n",
        "2",
        "-m",
        "round-robin",
        "--slots",
        "16384",
        "--wait-consumers",
        "-t",
        "4",
        "--json",
    ]);
    let mut procs = Procs(vec![]);
    wait_for("the segment", Duration::from_secs(10), || seg(id).exists());
    for q in 0..2 {
        procs.0.push(spawn(&[
            "count",
            "-i",
            &format!("cluster:{id}@{q}"),
            "--json",
            "-q",
        ]));
    }
    std::thread::sleep(Duration::from_millis(300));
    let stopped = procs.0[0].id() as i32;
    // The PID of a child this test started and still holds.
    linerate::os::signal(stopped as u32, libc::SIGSTOP).unwrap();
    let m = finish(master, Duration::from_secs(30));
    linerate::os::signal(stopped as u32, libc::SIGCONT).unwrap();
    assert!(m.status.success(), "{}", String::from_utf8_lossy(&m.stderr));
    let ms = summary(&m);
    assert_eq!(ms["invariant_ok"], true);
    let q = ms["queues"].as_array().unwrap();
    assert!(
        q[0]["drops"]["ring_full"].as_u64().unwrap() > 0,
        "the stopped consumer's queue overflowed: {ms}"
    );
    assert_eq!(
        q[1]["drops"]["ring_full"], 0,
        "the other queue lost nothing: {ms}"
    );
    assert!(q[1]["delivered"].as_u64().unwrap() > 20_000, "{ms}");
    for (k, c) in procs.0.drain(..).enumerate() {
        let out = finish(c, Duration::from_secs(20));
        assert_eq!(
            summary(&out)["pkts"],
            q[k]["delivered"],
            "consumer {k} drained its queue"
        );
    }
}

/// `cluster:ID` without a queue takes the first free queue (pfcount -i dnacluster:10).
#[test]
fn consumers_without_a_queue_number_take_free_queues() {
    let id = cluster_id(6);
    let ids = id.to_string();
    let master = spawn(&[
        "balance",
        "-i",
        "source:20000",
        "-c",
        &ids,
        "-n",
        "2",
        "-m",
        "round-robin",
        "--wait-consumers",
        "-t",
        "20",
        "--json",
        "--slots",
        "16384",
    ]);
    let mut procs = Procs(vec![]);
    wait_for("the segment", Duration::from_secs(10), || seg(id).exists());
    for _ in 0..2 {
        procs.0.push(spawn(&[
            "count",
            "-i",
            &format!("cluster:{id}"),
            "--json",
            "-q",
        ]));
        std::thread::sleep(Duration::from_millis(100));
    }
    let m = finish(master, Duration::from_secs(30));
    assert!(m.status.success(), "{}", String::from_utf8_lossy(&m.stderr));
    let ms = summary(&m);
    let q = ms["queues"].as_array().unwrap();
    let mut got: Vec<u64> = procs
        .0
        .drain(..)
        .map(|c| {
            summary(&finish(c, Duration::from_secs(20)))["pkts"]
                .as_u64()
                .unwrap()
        })
        .collect();
    got.sort();
    let mut want: Vec<u64> = q.iter().map(|x| x["delivered"].as_u64().unwrap()).collect();
    want.sort();
    assert_eq!(got, want, "each consumer got one queue");
    assert!(got.iter().all(|&n| n > 0));
}

//! Hostile and careless cases against the shared-memory cluster: links and files planted by
//! another local user (`nobody`) at the names a root master uses, a segment that is not ours,
//! a segment corrupted while consumers read it, and the accounting and exits around a master's
//! end (unread packets, counters across a reclaim, a consumer's exit on a normal shutdown, drops
//! equal to the sum of their reasons).
//!
//! Needs root for the planted-file cases (it runs commands as `nobody` with setpriv): they skip
//! with a reason otherwise, and fail under LINERATE_REQUIRE_PRIV=1. Every process is bounded in
//! time and killed by its PID through its `Child` handle; cluster ids are unique per process.
//! `LINERATE_TEST_BIN=/path/to/linerate` runs the same cases against another build (to see
//! them fail on an older one).
#![deny(unsafe_code)]

use linerate_test_support::netns;
use linerate_test_support::segment::{descriptor, layout};

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn bin() -> String {
    std::env::var("LINERATE_TEST_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_linerate").into())
}

/// A cluster id unique to this test process and case.
fn cluster_id(k: u32) -> u32 {
    300_000 + (std::process::id() % 10_000) * 20 + k
}

fn seg(id: u32) -> PathBuf {
    linerate_test_support::cluster_segment(id)
}

/// Children killed (by PID) and reaped, and paths removed, when the test ends however it ends.
#[derive(Default)]
struct Guard {
    kids: Vec<Child>,
    paths: Vec<PathBuf>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        for c in &mut self.kids {
            let _ = c.kill();
            let _ = c.wait();
        }
        for p in &self.paths {
            // A master killed here (SIGKILL) leaves its claim of the id too.
            let id = p
                .file_name()
                .and_then(|n| n.to_str()?.strip_prefix("linerate-cluster-")?.parse().ok());
            if let Some(id) = id {
                let _ = std::fs::remove_file(linerate::cluster::claim_path(id));
            }
            if std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir()) {
                let _ = std::fs::remove_dir_all(p);
            } else {
                let _ = std::fs::remove_file(p);
            }
        }
    }
}

fn spawn(args: &[&str]) -> Child {
    Command::new(bin())
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start linerate")
}

/// `sh -c SCRIPT` with `$BIN` set to the linerate binary.
fn spawn_sh(script: &str) -> Child {
    Command::new("sh")
        .args(["-c", script])
        .env("BIN", bin())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start sh")
}

/// Runs a command as user nobody (setpriv); returns its output.
fn as_nobody(args: &[&str]) -> Output {
    Command::new("setpriv")
        .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"])
        .args(args)
        .output()
        .expect("run setpriv")
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

fn text(o: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A private directory for this test's files (removed by the guard).
fn private_dir(g: &mut Guard, name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("lr-hostile-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    g.paths.push(d.clone());
    d
}

/// A symbolic link planted by user nobody at the name a root master used to create its segment
/// under (`linerate-cluster-ID.tmp<PID>`, opened with O_CREAT|O_TRUNC and no O_NOFOLLOW): the
/// link's target, a root-owned file, must stay untouched, and the cluster works regardless.
#[test]
fn a_link_planted_at_the_masters_temporary_name_is_not_followed() {
    if !netns::require_priv() {
        return;
    }
    let mut g = Guard::default();
    let dir = private_dir(&mut g, "link");
    let target = dir.join("precious");
    std::fs::write(&target, b"root's file, not a cluster").unwrap();
    let id = cluster_id(1);
    g.paths.push(seg(id));
    // The shell plants the link at the name for its own PID, then becomes the master (exec keeps
    // the PID), as a local user who guessed the PID would.
    let m = spawn_sh(&format!(
        "setpriv --reuid=nobody --regid=nogroup --clear-groups -- ln -s {t} \
         /dev/shm/linerate-cluster-{id}.tmp$$ && exec \"$BIN\" balance -i source:1000 -c {id} \
         -n 1 --json",
        t = target.display()
    ));
    let pid = m.id();
    let planted = PathBuf::from(format!("/dev/shm/linerate-cluster-{id}.tmp{pid}"));
    g.paths.push(planted.clone());
    let out = finish(m, Duration::from_secs(20));
    assert_eq!(
        std::fs::read(&target).unwrap(),
        b"root's file, not a cluster",
        "the link's target was rewritten: {}",
        text(&out)
    );
    assert_eq!(std::fs::metadata(&target).unwrap().len(), 26);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        std::fs::symlink_metadata(&planted).is_ok_and(|m| m.file_type().is_symlink()),
        "the planted link is left alone"
    );
    assert!(!seg(id).exists(), "the master removed its segment");
}

/// A world-writable file planted by nobody at the temporary name: the master's segment must be
/// its own (owned by root, mode 0600), and nobody cannot attach to it.
#[test]
fn a_file_planted_at_the_temporary_name_is_not_reused() {
    if !netns::require_priv() {
        return;
    }
    let mut g = Guard::default();
    let id = cluster_id(2);
    g.paths.push(seg(id));
    let m = spawn_sh(&format!(
        "setpriv --reuid=nobody --regid=nogroup --clear-groups -- sh -c 'umask 0; : > \
         /dev/shm/linerate-cluster-{id}.tmp'$$ && exec \"$BIN\" balance -i source \
         --source-rate 2kpps -c {id} -n 1 -t 4 --json"
    ));
    let pid = m.id();
    g.paths.push(PathBuf::from(format!(
        "/dev/shm/linerate-cluster-{id}.tmp{pid}"
    )));
    g.kids.push(m);
    wait_for("the segment", Duration::from_secs(10), || seg(id).exists());
    let meta = std::fs::metadata(seg(id)).unwrap();
    let me = linerate::os::euid();
    let mode = meta.permissions().mode() & 0o7777;
    let nobody = as_nobody(&[
        &bin(),
        "count",
        "-i",
        &format!("cluster:{id}@0"),
        "-c",
        "10",
        "-t",
        "2",
        "--json",
        "-q",
    ]);
    let m = g.kids.pop().unwrap();
    let out = finish(m, Duration::from_secs(20));
    assert_eq!(meta.uid(), me, "the segment is the master's own");
    assert_eq!(mode, 0o600, "the segment is owner-only");
    assert!(
        !nobody.status.success(),
        "another user attached to root's cluster: {}",
        text(&nobody)
    );
    assert!(
        String::from_utf8_lossy(&nobody.stderr).contains("permission denied"),
        "{}",
        text(&nobody)
    );
    assert!(out.status.success(), "{}", text(&out));
}

/// A file at a segment's name that another user owns (here a copy of a live root segment,
/// chowned to nobody and made world-writable) is refused by a consumer and by a master; so is
/// a link at a segment's name (pointing to a live cluster).
#[test]
fn a_segment_that_is_not_ours_is_refused_by_consumers_and_masters() {
    if !netns::require_priv() {
        return;
    }
    let mut g = Guard::default();
    let (a, b, c) = (cluster_id(3), cluster_id(4), cluster_id(5));
    g.paths.extend([seg(a), seg(b), seg(c)]);
    g.kids.push(spawn(&[
        "balance",
        "-i",
        "source",
        "--source-rate",
        "2kpps",
        "-c",
        &a.to_string(),
        "-n",
        "2",
        "-t",
        "8",
        "--quiet",
    ]));
    wait_for("the segment", Duration::from_secs(10), || seg(a).exists());
    std::thread::sleep(Duration::from_millis(200));
    std::fs::copy(seg(a), seg(b)).unwrap();
    std::os::unix::fs::chown(seg(b), Some(65534), Some(65534)).unwrap();
    std::fs::set_permissions(seg(b), std::fs::Permissions::from_mode(0o666)).unwrap();
    std::os::unix::fs::symlink(seg(a), seg(c)).unwrap();
    let consumer = |id: u32| {
        finish(
            spawn(&[
                "count",
                "-i",
                &format!("cluster:{id}@1"),
                "-c",
                "5",
                "-t",
                "2",
                "--json",
                "-q",
            ]),
            Duration::from_secs(20),
        )
    };
    let foreign = consumer(b);
    assert!(!foreign.status.success(), "{}", text(&foreign));
    let e = String::from_utf8_lossy(&foreign.stderr);
    assert!(
        e.contains("owned by uid 65534") && e.contains("not a segment of ours"),
        "{}",
        text(&foreign)
    );
    let link = consumer(c);
    assert!(!link.status.success(), "{}", text(&link));
    assert!(
        String::from_utf8_lossy(&link.stderr).contains("symbolic link"),
        "{}",
        text(&link)
    );
    let master = finish(
        spawn(&[
            "balance",
            "-i",
            "source:10",
            "-c",
            &b.to_string(),
            "-n",
            "1",
        ]),
        Duration::from_secs(20),
    );
    assert!(!master.status.success(), "{}", text(&master));
    assert!(
        String::from_utf8_lossy(&master.stderr).contains("not a segment of ours"),
        "{}",
        text(&master)
    );
    let left = std::fs::metadata(seg(b)).unwrap();
    assert_eq!(left.uid(), 65534, "the foreign file is left as it was");
    let master = finish(
        spawn(&[
            "balance",
            "-i",
            "source:10",
            "-c",
            &c.to_string(),
            "-n",
            "1",
        ]),
        Duration::from_secs(20),
    );
    assert!(!master.status.success(), "{}", text(&master));
    assert!(
        std::fs::symlink_metadata(seg(c)).is_ok_and(|m| m.file_type().is_symlink()),
        "the link is left as it was"
    );
}

/// A segment of another layout version (3: before a queue's control block had the sleeping
/// reader's futex word; its master would never wake a consumer asleep on it) is refused by a
/// consumer, with both versions and the fix in the message, before it reads anything.
#[test]
fn a_segment_of_an_older_layout_version_is_refused_with_both_versions() {
    let mut g = Guard::default();
    let (a, b) = (cluster_id(8), cluster_id(9));
    g.paths.extend([seg(a), seg(b)]);
    g.kids.push(spawn(&[
        "balance",
        "-i",
        "source",
        "--source-rate",
        "2kpps",
        "-c",
        &a.to_string(),
        "-n",
        "1",
        "-t",
        "8",
        "--quiet",
    ]));
    wait_for("the segment", Duration::from_secs(10), || seg(a).exists());
    std::thread::sleep(Duration::from_millis(200));
    std::fs::copy(seg(a), seg(b)).unwrap();
    {
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(seg(b))
            .unwrap();
        write_at(&f, layout::VERSION, &3u32.to_le_bytes());
    }
    let o = finish(
        spawn(&[
            "count",
            "-i",
            &format!("cluster:{b}@0"),
            "-c",
            "5",
            "-t",
            "2",
            "-q",
        ]),
        Duration::from_secs(20),
    );
    assert!(!o.status.success(), "{}", text(&o));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("layout version 3") && e.contains("reads version 4") && e.contains("same build"),
        "{}",
        text(&o)
    );
}

fn read_u64(f: &std::fs::File, at: u64) -> u64 {
    use std::os::unix::fs::FileExt;
    let mut b = [0u8; 8];
    f.read_exact_at(&mut b, at).unwrap();
    u64::from_le_bytes(b)
}

fn write_at(f: &std::fs::File, at: u64, bytes: &[u8]) {
    use std::os::unix::fs::FileExt;
    f.write_all_at(bytes, at).unwrap();
}

/// Garbage that changes every call (xorshift).
fn garbage(state: &mut u64, n: usize) -> Vec<u8> {
    (0..n)
        .map(|_| {
            *state ^= *state << 13;
            *state ^= *state >> 7;
            *state ^= *state << 17;
            *state as u8
        })
        .collect()
}

fn json_lines(o: &Output) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn summary(o: &Output) -> serde_json::Value {
    json_lines(o)
        .into_iter()
        .find(|j| j["type"] == "summary")
        .unwrap_or_else(|| panic!("no summary: {}", text(o)))
}

/// A segment written over while consumers read it (descriptor slots, a head cursor, the state
/// word, and the words consumers write): every consumer stops with a clear error and sane
/// figures (the garbage descriptors counted as malformed), and the master's own accounting
/// stays exact. Run as the segment's owner: root is not needed to write one's own segment.
#[test]
fn a_segment_corrupted_while_running_stops_consumers_with_a_clear_error_and_true_figures() {
    let mut g = Guard::default();
    let id = cluster_id(6);
    g.paths.push(seg(id));
    let master = spawn(&[
        "balance",
        "-i",
        "source:30000",
        "--source-rate",
        "10kpps",
        "-c",
        &id.to_string(),
        "-n",
        "3",
        "-m",
        "rr",
        "--wait-consumers",
        "-t",
        "20",
        "--json",
        "--interval",
        "200ms",
        // Written to below (pwrite): in /dev/shm, never on a hugetlbfs, which takes no write.
        "--no-huge",
    ]);
    g.kids.push(master);
    wait_for("the segment", Duration::from_secs(10), || seg(id).exists());
    for q in 0..3 {
        g.kids.push(spawn(&[
            "count",
            "-i",
            &format!("cluster:{id}@{q}"),
            "--json",
            "-q",
        ]));
    }
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(seg(id))
        .unwrap();
    let qoff = read_u64(&f, layout::QUEUE_OFF);
    let stride = read_u64(&f, layout::QUEUE_STRIDE);
    std::thread::sleep(Duration::from_millis(500));
    let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ std::process::id() as u64;
    let t0 = Instant::now();
    // Queue 0's consumer sees garbage only when it lands in a slot between the master's write
    // and the consumer's read: a fast consumer leaves a window of microseconds per packet. So
    // the garbage goes on until that consumer has stopped (or 10 s), and often.
    let mut q0_running = true;
    while t0.elapsed() < Duration::from_millis(600)
        || (q0_running && t0.elapsed() < Duration::from_secs(10))
    {
        q0_running = g.kids[1].try_wait().unwrap().is_none();
        // Queue 0: garbage descriptors. Queue 1: a head cursor far ahead of anything written.
        write_at(&f, qoff + layout::SLOTS, &garbage(&mut rng, 4096 * 32));
        write_at(
            &f,
            qoff + stride + layout::HEAD,
            &(u64::MAX / 3).to_le_bytes(),
        );
        // Words the consumers and readers own: the master must not take them at their word.
        write_at(&f, layout::COUNTERS, &garbage(&mut rng, 72));
        for q in 0..3 {
            write_at(&f, qoff + q * stride + layout::TAIL, &garbage(&mut rng, 8));
            write_at(
                &f,
                qoff + q * stride + layout::HANDED,
                &garbage(&mut rng, 8),
            );
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    // Queue 2's consumer: the header's state word is neither running nor closed.
    write_at(&f, layout::STATE, &0xdead_beefu32.to_le_bytes());
    let consumers: Vec<Output> = g
        .kids
        .drain(1..)
        .map(|c| finish(c, Duration::from_secs(20)))
        .collect();
    let m = finish(g.kids.pop().unwrap(), Duration::from_secs(30));
    for (q, c) in consumers.iter().enumerate() {
        assert!(!c.status.success(), "consumer {q}: {}", text(c));
        let e = String::from_utf8_lossy(&c.stderr);
        assert!(
            e.contains("segment is corrupted"),
            "consumer {q}: {}",
            text(c)
        );
        let s = summary(c);
        let (pkts, bytes) = (s["pkts"].as_u64().unwrap(), s["bytes"].as_u64().unwrap());
        assert_eq!(bytes, pkts * 64, "consumer {q}: no garbage figures: {s}");
        assert!(pkts <= 10_000, "consumer {q}: {s}");
    }
    assert!(
        String::from_utf8_lossy(&consumers[0].stderr).contains("descriptor"),
        "{}",
        text(&consumers[0])
    );
    let malformed = summary(&consumers[0])["drops_by_reason"]["malformed"]
        .as_u64()
        .unwrap();
    assert!(malformed > 0, "{}", text(&consumers[0]));
    assert!(
        String::from_utf8_lossy(&consumers[1].stderr).contains("head cursor"),
        "{}",
        text(&consumers[1])
    );
    assert!(
        String::from_utf8_lossy(&consumers[2].stderr).contains("state word"),
        "{}",
        text(&consumers[2])
    );
    // The master's figures are its own: exact, whatever was written into the segment.
    let ms = summary(&m);
    assert_eq!(ms["rx"], 30_000, "{ms}");
    assert_eq!(ms["invariant_ok"], true, "{ms}");
    assert_eq!(ms["destinations"], 30_000, "{ms}");
    for line in json_lines(&m) {
        if line["type"] == "stats" {
            assert!(line["rx"].as_u64().unwrap() <= 30_000, "{line}");
            assert!(line["delivered"].as_u64().unwrap() <= 30_000, "{line}");
        }
    }
}

/// Descriptors a hostile writer puts in queue 0 of an idle cluster (its input never sends),
/// published by moving the head cursor: each batch is checked against the regular frames
/// first and in full only when that fails, so packets in big frames (jumbo) and at the last
/// byte of either kind of frame are delivered, and one in the headroom, straddling two frames,
/// outside the frames, misplaced in a big frame, longer than its frame or with a garbage length
/// stops the consumer with an error naming the queue and the slot, every descriptor of its
/// batch counted as malformed, none read.
#[test]
fn descriptors_naming_bytes_outside_their_frame_are_refused_and_jumbo_ones_delivered() {
    // (case, descriptors from (frames_off, big_off, big_size, total), the bad slot if any).
    type Make = fn(u64, u64, u64, u64) -> Vec<(u64, u32, u32)>;
    let h = 128u64; // the master's headroom (checked below)
    let cases: [(&str, Make, Option<usize>); 11] = [
        (
            "regular and big",
            |f, b, _, _| vec![(f + 128, 64, 64), (b + 128, 9000, 9000)],
            None,
        ),
        (
            "frame and big frame full",
            |f, b, s, _| {
                vec![
                    (f + 128, 1920, 1920),
                    (b + 128, s as u32 - 128, s as u32 - 128),
                    (b - 64, 64, 64),
                ]
            },
            None,
        ),
        (
            "headroom",
            |f, _, _, _| vec![(f + 128, 64, 64), (f + 2048 + 10, 64, 64)],
            Some(1),
        ),
        (
            "straddling",
            |f, _, _, _| vec![(f + 4096 - 32, 64, 64)],
            Some(0),
        ),
        (
            "below the frames",
            |f, _, _, _| vec![(f - 4096, 64, 64)],
            Some(0),
        ),
        (
            "past the segment",
            |_, _, _, t| vec![(t + 128, 64, 64)],
            Some(0),
        ),
        (
            "inside a big frame",
            |f, b, _, _| vec![(f + 128, 60, 60), (b + 128 + 8, 64, 64)],
            Some(1),
        ),
        (
            "longer than a big frame",
            |_, b, s, _| vec![(b + 128, s as u32 - 127, 9000)],
            Some(0),
        ),
        (
            "huge length",
            |f, _, _, _| vec![(f + 128, u32::MAX, 64)],
            Some(0),
        ),
        (
            "huge wire length",
            |f, _, _, _| vec![(f + 128, 64, 1 << 25)],
            Some(0),
        ),
        (
            "wrapping address",
            |_, _, _, _| vec![(u64::MAX - 63, 128, 128)],
            Some(0),
        ),
    ];
    // One cluster after another on the same id (each removed by its guard).
    let id = cluster_id(13);
    for (case, make, bad) in cases {
        let mut g = Guard::default();
        g.paths.push(seg(id));
        g.kids.push(spawn(&[
            "balance",
            "-i",
            &format!("mem:hostile-desc-{id}"),
            "-c",
            &id.to_string(),
            "--max-pkt-len",
            "9000",
            "-t",
            "20",
            "-q",
            // Written to below (pwrite): in /dev/shm, never on a hugetlbfs.
            "--no-huge",
        ]));
        wait_for("the segment", Duration::from_secs(10), || seg(id).exists());
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(seg(id))
            .unwrap();
        wait_for("the header", Duration::from_secs(10), || {
            read_u64(&f, layout::TOTAL_LEN) != 0
        });
        assert_eq!(read_u64(&f, layout::HEADROOM) as u32 as u64, h);
        let big = read_u64(&f, layout::BIG_FRAMES) >> 32;
        let descs = make(
            read_u64(&f, layout::FRAMES_OFF),
            read_u64(&f, layout::BIG_OFF),
            big,
            read_u64(&f, layout::TOTAL_LEN),
        );
        let qoff = read_u64(&f, layout::QUEUE_OFF);
        let slots: Vec<u8> = descs
            .iter()
            .flat_map(|&(a, l, w)| descriptor(a, l, w))
            .collect();
        write_at(&f, qoff + layout::SLOTS, &slots);
        let n = descs.len();
        let c = spawn(&[
            "count",
            "-i",
            &format!("cluster:{id}@0"),
            "-c",
            &n.to_string(),
            "-t",
            "10",
            "--json",
            "-q",
        ]);
        std::thread::sleep(Duration::from_millis(300));
        write_at(&f, qoff + layout::HEAD, &(n as u64).to_le_bytes());
        let o = finish(c, Duration::from_secs(15));
        let s = summary(&o);
        let malformed = s["drops_by_reason"]["malformed"].as_u64().unwrap();
        match bad {
            None => {
                assert!(o.status.success(), "{case}: {}", text(&o));
                assert_eq!(s["pkts"], n as u64, "{case}: {}", text(&o));
                assert_eq!(malformed, 0, "{case}: {}", text(&o));
            }
            Some(slot) => {
                let e = String::from_utf8_lossy(&o.stderr);
                assert_eq!(o.status.code(), Some(1), "{case}: {}", text(&o));
                assert!(
                    e.contains(&format!("queue 0 slot {slot}: descriptor"))
                        && e.contains(&format!("{n} descriptors dropped as malformed")),
                    "{case}: {}",
                    text(&o)
                );
                assert_eq!(s["pkts"], 0, "{case}: {}", text(&o));
                assert_eq!(malformed, n as u64, "{case}: {}", text(&o));
            }
        }
    }
}

/// With no consumer ever attached, what sits in the queues when the master ends was not
/// delivered: it is counted as `unread`, and the accounting still adds up.
#[test]
fn packets_left_unread_are_not_delivered() {
    let mut g = Guard::default();
    let id = cluster_id(7);
    g.paths.push(seg(id));
    let m = finish(
        spawn(&[
            "balance",
            "-i",
            "source:20000",
            "-c",
            &id.to_string(),
            "-n",
            "2",
            "-m",
            "rr",
            "--json",
        ]),
        Duration::from_secs(30),
    );
    assert!(m.status.success(), "{}", text(&m));
    let s = summary(&m);
    assert_eq!(s["delivered"], 0, "{s}");
    assert_eq!(s["invariant_ok"], true, "{s}");
    for q in s["queues"].as_array().unwrap() {
        assert_eq!(q["delivered"], 0, "{q}");
        assert_eq!(q["drops"]["unread"], 4096, "{q}");
        assert_eq!(q["drops"]["ring_full"], 10_000 - 4096, "{q}");
        assert_eq!(q["backlog"], 0, "{q}");
    }
    let t = finish(
        spawn(&[
            "balance",
            "-i",
            "source:20000",
            "-c",
            &id.to_string(),
            "-n",
            "2",
            "-m",
            "rr",
        ]),
        Duration::from_secs(30),
    );
    let out = String::from_utf8_lossy(&t.stdout);
    assert!(
        out.contains(
            "delivered 0 + ring_full 11'808 + consumer_gone 0 + no_frame 0 + unread 8'192 [ok]"
        ),
        "{out}"
    );
}

/// A queue whose consumer stalls with a backlog and is then killed is reclaimed: its
/// delivered count never goes down, and no rate is negative (or wraps around).
#[test]
fn counters_never_decrease_across_a_reclaim() {
    let mut g = Guard::default();
    let id = cluster_id(8);
    g.paths.push(seg(id));
    g.kids.push(spawn(&[
        "balance",
        "-i",
        "source",
        "--source-rate",
        "5kpps",
        "-c",
        &id.to_string(),
        "-n",
        "1",
        "--wait-consumers",
        "-t",
        "3",
        "--json",
        "--interval",
        "50ms",
    ]));
    wait_for("the segment", Duration::from_secs(10), || seg(id).exists());
    let mut c = spawn(&["count", "-i", &format!("cluster:{id}@0"), "-q"]);
    std::thread::sleep(Duration::from_millis(600));
    let pid = c.id() as i32;
    // The PID of a child this test started and still holds.
    linerate::os::signal(pid as u32, libc::SIGSTOP).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    c.kill().unwrap();
    let _ = c.wait();
    let m = finish(g.kids.pop().unwrap(), Duration::from_secs(30));
    assert!(m.status.success(), "{}", text(&m));
    let mut last = 0;
    let mut reclaimed = false;
    for line in json_lines(&m) {
        let q = &line["queues"][0];
        let d = q["delivered"].as_u64().unwrap();
        assert!(d >= last, "delivered went from {last} to {d}: {line}");
        last = d;
        let pps = q["pps"].as_f64().unwrap();
        assert!((0.0..1e7).contains(&pps), "{line}");
        reclaimed |= q["drops"]["consumer_gone"].as_u64().unwrap() > 0;
    }
    assert!(reclaimed, "the killed consumer's queue was reclaimed");
    assert_eq!(summary(&m)["invariant_ok"], true);
}

/// A master that ends normally ends its consumers normally: exit 0 and a plain message.
#[test]
fn a_normal_master_shutdown_ends_consumers_with_exit_0_and_a_plain_message() {
    let mut g = Guard::default();
    let id = cluster_id(9);
    g.paths.push(seg(id));
    g.kids.push(spawn(&[
        "balance",
        "-i",
        "source:5000",
        "--source-rate",
        "20kpps",
        "-c",
        &id.to_string(),
        "-n",
        "1",
        "--wait-consumers",
        "--quiet",
    ]));
    wait_for("the segment", Duration::from_secs(10), || seg(id).exists());
    let c = finish(
        spawn(&["count", "-i", &format!("cluster:{id}@0"), "-q"]),
        Duration::from_secs(20),
    );
    let m = finish(g.kids.pop().unwrap(), Duration::from_secs(20));
    assert!(m.status.success(), "{}", text(&m));
    assert!(c.status.success(), "{}", text(&c));
    let out = String::from_utf8_lossy(&c.stdout);
    assert!(
        out.contains(&format!(
            "ended: end of input (cluster {id} ended: master stopped)"
        )),
        "{}",
        text(&c)
    );
    assert!(
        !String::from_utf8_lossy(&c.stderr).contains("error"),
        "{}",
        text(&c)
    );
}

/// A consumer that attaches to a queue that already overflowed, and then overflows it itself:
/// its summary's "dropped" is the sum of the reasons it lists (both since it attached), in text
/// and in JSON.
#[test]
fn a_consumers_dropped_count_is_the_sum_of_its_reasons() {
    let mut g = Guard::default();
    let id = cluster_id(10);
    g.paths.push(seg(id));
    g.kids.push(spawn(&[
        "balance",
        "-i",
        "source",
        "--source-rate",
        "20kpps",
        "-c",
        &id.to_string(),
        "-n",
        "2",
        "-m",
        "rr",
        "--slots",
        "1024",
        "-t",
        "4",
        "--quiet",
    ]));
    wait_for("the segment", Duration::from_secs(10), || seg(id).exists());
    // No consumer for 0.5 s: the 1024-slot queues overflow before anyone attaches.
    std::thread::sleep(Duration::from_millis(500));
    let c0 = spawn(&["count", "-i", &format!("cluster:{id}@0"), "-t", "2"]);
    let c1 = spawn(&[
        "count",
        "-i",
        &format!("cluster:{id}@1"),
        "-t",
        "2",
        "--json",
        "-q",
    ]);
    std::thread::sleep(Duration::from_millis(300));
    // Then they stall and overflow their queues themselves.
    for c in [&c0, &c1] {
        // The PID of a child this test started and still holds.
        linerate::os::signal(c.id(), libc::SIGSTOP).unwrap();
    }
    std::thread::sleep(Duration::from_millis(400));
    for c in [&c0, &c1] {
        linerate::os::signal(c.id(), libc::SIGCONT).unwrap();
    }
    let (o0, o1) = (
        finish(c0, Duration::from_secs(20)),
        finish(c1, Duration::from_secs(20)),
    );
    let out = String::from_utf8_lossy(&o0.stdout);
    let line = out
        .lines()
        .find(|l| l.starts_with("Summary:"))
        .unwrap_or_else(|| panic!("{}", text(&o0)));
    let num = |s: &str| s.replace('\'', "").parse::<u64>().unwrap();
    let dropped = num(line
        .split(" dropped (")
        .next()
        .unwrap()
        .rsplit(", ")
        .next()
        .unwrap());
    let reasons = line
        .split(" dropped (")
        .nth(1)
        .unwrap()
        .split(')')
        .next()
        .unwrap();
    let sum: u64 = reasons
        .split(' ')
        .filter_map(|r| r.split_once('='))
        .map(|(_, n)| num(n))
        .sum();
    assert!(dropped > 0, "the stalled consumer lost packets: {line}");
    assert_eq!(dropped, sum, "{line}");
    let block = out
        .lines()
        .rfind(|l| l.starts_with("Drops by reason:"))
        .unwrap_or_else(|| panic!("{}", text(&o0)));
    assert!(block.ends_with(reasons), "{block} vs {line}");
    let s = summary(&o1);
    let by: u64 = s["drops_by_reason"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| *k != "filter")
        .map(|(_, v)| v.as_u64().unwrap())
        .sum();
    assert!(s["drops"].as_u64().unwrap() > 0, "{s}");
    assert_eq!(s["drops"].as_u64().unwrap(), by, "{s}");
    let m = finish(g.kids.pop().unwrap(), Duration::from_secs(20));
    assert!(m.status.success(), "{}", text(&m));
}

/// `--threads --work-ns`: threads that take long over their queues. Interval lines go on while
/// they drain after the input ended, and each thread's final block spans its own time (1 000
/// packets at 1 ms each: about a second, not the master's few milliseconds).
#[test]
fn slow_consumer_threads_report_their_own_time_and_print_while_draining() {
    let out = finish(
        spawn(&[
            "balance",
            "-i",
            "source:1000",
            "--threads",
            "--work-ns",
            "1000000",
            "-n",
            "1",
            "-m",
            "rr",
            "--interval",
            "200ms",
        ]),
        Duration::from_secs(30),
    );
    assert!(out.status.success(), "{}", text(&out));
    let s = String::from_utf8_lossy(&out.stdout);
    let blocks: Vec<&str> = s
        .lines()
        .filter(|l| l.starts_with("Actual   Stats: ["))
        .collect();
    assert!(
        blocks.len() >= 4,
        "interval lines while the thread drains: {s}"
    );
    let last = blocks.last().unwrap();
    assert!(last.starts_with("Actual   Stats: [1000 pkts]["), "{s}");
    let ms: f64 = last
        .split("][")
        .nth(1)
        .and_then(|x| x.strip_suffix(" ms"))
        .map(|x| x.replace('\'', "").parse().unwrap())
        .unwrap();
    assert!(ms >= 900.0, "the thread's own time: {last}");
    let pps: f64 = last
        .split("][")
        .nth(2)
        .and_then(|x| x.strip_suffix(" pkt/sec]"))
        .map(|x| x.replace('\'', "").parse().unwrap())
        .unwrap();
    assert!(pps <= 1100.0, "{last}");
}

/// A consumer of a cluster queue (`args`, where `QUEUE` stands for `cluster:ID@0`) that writes
/// into the FIFO `FIFO`, whose reader comes only once the master has ended: the consumer
/// attached before it blocked in the FIFO's open, so the queue lost everything meanwhile
/// (taken back `unread` when the master ended). Returns the consumer's summary and the master's
/// queue.
fn consumer_with_a_late_fifo_reader(
    k: u32,
    args: &[&str],
) -> (serde_json::Value, serde_json::Value) {
    let mut g = Guard::default();
    let id = cluster_id(k);
    g.paths.push(seg(id));
    let dir = private_dir(&mut g, &format!("fifo{k}"));
    let fifo = dir.join("out.pcap");
    let st = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(st.success(), "mkfifo {}", fifo.display());
    g.kids.push(spawn(&[
        "balance",
        "-i",
        "source:3000",
        "-c",
        &id.to_string(),
        "-n",
        "1",
        "--wait-consumers",
        "--json",
    ]));
    wait_for("the segment", Duration::from_secs(10), || seg(id).exists());
    let queue = format!("cluster:{id}@0");
    let args: Vec<&str> = args
        .iter()
        .map(|a| match *a {
            "QUEUE" => queue.as_str(),
            "FIFO" => fifo.to_str().unwrap(),
            a => a,
        })
        .collect();
    let c = spawn(&args);
    // The master sends to the attached queue, nobody reads it, and the master ends, taking
    // back what is left; only then does the FIFO get its reader.
    let m = finish(g.kids.pop().unwrap(), Duration::from_secs(30));
    assert!(m.status.success(), "{}", text(&m));
    let q = summary(&m)["queues"][0].clone();
    assert!(
        q["drops"]["unread"].as_u64().unwrap() > 0,
        "the queue lost nothing while the consumer waited: {q}"
    );
    g.kids.push(
        Command::new("cat")
            .arg(&fifo)
            .stdout(Stdio::null())
            .spawn()
            .expect("start cat"),
    );
    let c = finish(c, Duration::from_secs(20));
    assert!(c.status.success(), "{}", text(&c));
    (summary(&c), q)
}

/// `count -w FIFO` whose reader opens late: what the queue lost while count waited in the
/// FIFO's open is in count's summary, as tcpdump's counters start at pcap_activate and not
/// when its -w file opens. Before, the starting reading was taken after the open and the
/// summary said "0 pkts, 0 dropped".
#[test]
fn drops_while_a_fifo_output_waits_for_its_reader_are_counted() {
    let (s, q) = consumer_with_a_late_fifo_reader(
        11,
        &["count", "-q", "--json", "-i", "QUEUE", "-w", "FIFO"],
    );
    assert_eq!(
        s["drops_by_reason"]["unread"], q["drops"]["unread"],
        "{s}\n{q}"
    );
    assert_eq!(s["pkts"], q["delivered"], "{s}\n{q}");
    assert_eq!(
        s["pkts"].as_u64().unwrap() + s["drops"].as_u64().unwrap(),
        3000,
        "every packet delivered or counted dropped: {s}\n{q}"
    );
}

/// The same for `fwd -o FIFO`: its input port's drops count from when it opened, not from
/// when the output's open returned.
#[test]
fn fwd_counts_the_drops_while_its_fifo_output_waits_for_its_reader() {
    let (s, q) =
        consumer_with_a_late_fifo_reader(12, &["fwd", "--json", "-i", "QUEUE", "-o", "FIFO"]);
    let p = &s["ports"][0];
    assert_eq!(
        p["drops_by_reason"]["unread"], q["drops"]["unread"],
        "{s}\n{q}"
    );
    assert_eq!(p["received"], q["delivered"], "{s}\n{q}");
    assert_eq!(
        p["received"].as_u64().unwrap() + p["dropped"].as_u64().unwrap(),
        3000,
        "every packet delivered or counted dropped: {s}\n{q}"
    );
}

/// A segment whose header holds absurd sizes (transmit lanes and slots near 2^32, as a stray
/// write or a damaged copy leaves them) is refused as inconsistent by consumers, never a panic
/// on the arithmetic that places its parts (a debug build overflowed computing the layout).
#[test]
fn a_header_with_absurd_sizes_is_refused_not_a_panic() {
    let mut g = Guard::default();
    let (a, b) = (cluster_id(10), cluster_id(11));
    g.paths.extend([seg(a), seg(b)]);
    g.kids.push(spawn(&[
        "balance",
        "-i",
        "source",
        "--source-rate",
        "2kpps",
        "-c",
        &a.to_string(),
        "-n",
        "1",
        "-t",
        "8",
        "--quiet",
    ]));
    wait_for("the segment", Duration::from_secs(10), || seg(a).exists());
    std::thread::sleep(Duration::from_millis(200));
    // (field offset, bytes): tx_lanes and tx_slots; queues and slots; frames and frame_size.
    for (at, bytes) in [
        (96u64, [0xff; 8]),
        (12, [0xff; 8]),
        (20, [0xff; 8]),
        (100, [0xff, 0xff, 0xff, 0x7f, 0, 0, 0, 0]),
    ] {
        std::fs::copy(seg(a), seg(b)).unwrap();
        {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(seg(b))
                .unwrap();
            write_at(&f, 36, &b.to_le_bytes());
            write_at(&f, at, &bytes);
        }
        let o = finish(
            spawn(&[
                "count",
                "-i",
                &format!("cluster:{b}@0"),
                "-c",
                "5",
                "-t",
                "2",
                "-q",
            ]),
            Duration::from_secs(20),
        );
        assert_eq!(o.status.code(), Some(1), "at {at}: {}", text(&o));
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("inconsistent"),
            "at {at}: {}",
            text(&o)
        );
    }
}

/// The claim of a cluster id is one lock, `/dev/shm/linerate-cluster-ID.lock`, whatever
/// directory the segment goes to: held (flock) by the master for its life, holding its pid,
/// removed at exit. A second master is refused naming the first; a stale lock (no holder: a
/// killed master's) is taken over; a link planted there by user nobody is never followed (its
/// target stays untouched) and the master is refused saying so.
#[test]
fn the_claim_of_an_id_is_one_lock_that_follows_no_planted_link() {
    if !netns::require_priv() {
        return;
    }
    let mut g = Guard::default();
    let id = cluster_id(9);
    let ids = id.to_string();
    let lock = PathBuf::from(format!("/dev/shm/linerate-cluster-{id}.lock"));
    g.paths.extend([seg(id), lock.clone()]);
    let master = |extra: &[&str]| {
        let mut a = vec!["balance", "-i", "source", "--source-rate", "1kpps"];
        a.extend_from_slice(&["-c", &ids, "-n", "1", "--quiet"]);
        a.extend_from_slice(extra);
        spawn(&a)
    };
    // A stale lock left by a killed master: taken over.
    std::fs::write(&lock, "999999999\n").unwrap();
    let first = master(&["-t", "3"]);
    let pid = first.id();
    wait_for("the segment", Duration::from_secs(10), || seg(id).exists());
    wait_for("the claim", Duration::from_secs(5), || {
        std::fs::read_to_string(&lock).is_ok_and(|s| s.trim() == pid.to_string())
    });
    let m = std::fs::symlink_metadata(&lock).unwrap();
    assert!(m.is_file() && m.mode() & 0o022 == 0, "{:o}", m.mode());
    // Wherever the second one would put its segment: refused, naming the first.
    for extra in [&["-t", "1"][..], &["-t", "1", "--no-huge"][..]] {
        let dup = finish(master(extra), Duration::from_secs(10));
        assert!(!dup.status.success(), "{}", text(&dup));
        let e = String::from_utf8_lossy(&dup.stderr);
        assert!(
            e.contains(&format!("in use by its master, pid {pid}")),
            "{}",
            text(&dup)
        );
    }
    let out = finish(first, Duration::from_secs(20));
    assert!(out.status.success(), "{}", text(&out));
    assert!(!lock.exists(), "the claim is removed at exit");
    assert!(!seg(id).exists());
    // A link planted at the lock's name by nobody: not followed, the master refused.
    let dir = private_dir(&mut g, "claim");
    let victim = dir.join("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    let o = as_nobody(&["ln", "-s", victim.to_str().unwrap(), lock.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let refused = finish(master(&["-t", "1"]), Duration::from_secs(10));
    assert!(!refused.status.success(), "{}", text(&refused));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("symbolic link"),
        "{}",
        text(&refused)
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    assert!(std::fs::symlink_metadata(&lock).unwrap().is_symlink());
    assert!(!seg(id).exists());
}

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

#[path = "../../linerate/tests/netns/mod.rs"]
mod netns;

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
    PathBuf::from(format!("/dev/shm/linerate-cluster-{id}"))
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
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
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

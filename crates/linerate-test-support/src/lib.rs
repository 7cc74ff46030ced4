//! The harness shared by linerate's integration tests (both crates use it as a dev-dependency).
//!
//! - [`netns`]: two network namespaces joined by a veth pair, removed on drop; raw frame helpers.
//! - [`line`]: three namespaces in a line, A – B – C, for forwarding tests.
//! - [`skip`]: the one way a test that cannot run says so. It prints `SKIP: <test>: <reason>`,
//!   appends the same line to the file named by `LINERATE_SKIP_LOG` (so that `scripts/test.sh`
//!   counts skips in its closing line instead of reporting them as passes), and under
//!   `LINERATE_REQUIRE_PRIV=1` (CI) fails the test instead.
//! - [`corpus_dir`]: tcpdump's test captures, kept in the repository (`tests/corpus/`).
//! - [`stop_child`] and [`ClusterSegments`]: ending a child the way a user does (SIGTERM, so
//!   a cluster master runs its exit path and removes its segment; SIGKILL only if it does not
//!   end), and checking that the segments a test's masters made are gone when it ends.
//!
//! No `unsafe` here: what needs the kernel directly (entering a namespace, an interface's
//! index, a raw packet socket, a tc program) goes through the library's safe `linerate::os`.
#![deny(unsafe_code)]

pub mod line;
pub mod netns;
pub mod segment;

use std::io::Write;
use std::path::PathBuf;
use std::process::Child;
use std::time::{Duration, Instant};

/// Whether `LINERATE_REQUIRE_PRIV=1`: every skip is then a failure.
pub fn skips_are_failures() -> bool {
    std::env::var("LINERATE_REQUIRE_PRIV").as_deref() == Ok("1")
}

/// Reports that the calling test cannot run, for `reason`. Panics (fails the test) under
/// `LINERATE_REQUIRE_PRIV=1`; otherwise prints `SKIP: <test>: <reason>` and records it in
/// `$LINERATE_SKIP_LOG` when set. The caller returns right after.
pub fn skip(reason: &str) {
    let test = std::thread::current()
        .name()
        .unwrap_or("<unnamed test>")
        .to_string();
    if skips_are_failures() {
        panic!("LINERATE_REQUIRE_PRIV=1 but {test} cannot run: {reason}");
    }
    let line = format!("SKIP: {test}: {reason}");
    eprintln!("{line}");
    if let Some(path) = std::env::var_os("LINERATE_SKIP_LOG") {
        // One short append per skip; O_APPEND keeps lines of concurrent tests whole.
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&path)
        {
            let _ = writeln!(f, "{line}");
        }
    }
}

/// The root of the repository.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The folder of tcpdump's test captures (830 pcap and pcapng files, many malformed):
/// `$LINERATE_CORPUS` when set, else `tests/corpus/tcpdump-tests` in the repository.
pub fn corpus_dir() -> PathBuf {
    match std::env::var_os("LINERATE_CORPUS") {
        Some(d) => PathBuf::from(d),
        None => repo_root().join("tests/corpus/tcpdump-tests"),
    }
}

/// [`corpus_dir`] if it exists; otherwise [`skip`]s (a failure under `LINERATE_REQUIRE_PRIV=1`)
/// and returns `None`.
pub fn corpus() -> Option<PathBuf> {
    let d = corpus_dir();
    if d.is_dir() {
        Some(d)
    } else {
        skip(&format!(
            "the capture corpus is missing at {} (set LINERATE_CORPUS)",
            d.display()
        ));
        None
    }
}

/// Whether `program` can be run (found on PATH); if not, [`skip`]s naming it and what installs it.
pub fn require_tool(program: &str, installed_by: &str) -> bool {
    let found = std::env::var_os("PATH").is_some_and(|p| {
        std::env::split_paths(&p).any(|d| {
            let f = d.join(program);
            f.is_file()
        })
    });
    if !found {
        skip(&format!("{program} is not installed ({installed_by})"));
    }
    found
}

/// Ends `child` the way a user or a service manager does: SIGTERM, then up to `grace` for it
/// to finish its exit path (a cluster master removes its `/dev/shm` segment there, which a
/// SIGKILL never lets it do), then SIGKILL. Reaps it. Returns whether it ended by itself
/// (already ended, or on the SIGTERM).
pub fn stop_child(child: &mut Child, grace: Duration) -> bool {
    if let Ok(Some(_)) = child.try_wait() {
        return true;
    }
    let _ = linerate::os::signal(child.id(), libc::SIGTERM);
    let t0 = Instant::now();
    while t0.elapsed() < grace {
        if let Ok(Some(_)) = child.try_wait() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    let _ = child.wait();
    false
}

/// Where cluster `id`'s segment is: the first of the places a master may put it
/// ([`linerate::cluster::segment_paths`]: `/dev/shm`, then each mounted hugetlbfs, where a
/// master goes when one has free huge pages) that holds a file, else the `/dev/shm` one. Tests
/// that wait for a master's segment look here rather than at a `/dev/shm` path, so that they
/// pass on a machine with huge pages set up too. `id`: a number, or its text.
pub fn cluster_segment(id: impl std::fmt::Display) -> PathBuf {
    let id: u32 = id.to_string().parse().expect("a cluster id");
    let paths = linerate::cluster::segment_paths(id);
    paths
        .iter()
        .find(|p| std::fs::symlink_metadata(p).is_ok())
        .unwrap_or(&paths[0])
        .clone()
}

/// The cluster segments (`/dev/shm/linerate-cluster-ID`) a test's masters create. Its
/// [`check`](ClusterSegments::check), called once those masters have ended, removes any that
/// is left (its creator is gone: the test started and ended it) and names them, so that a
/// test can fail on an exit path that leaks one instead of leaving 78 MB in /dev/shm.
#[derive(Default)]
pub struct ClusterSegments {
    ids: Vec<u32>,
}

impl ClusterSegments {
    /// A segment this test's master will create.
    pub fn add(&mut self, id: u32) {
        self.ids.push(id);
    }

    /// Removes the segments still present and returns their paths (empty when every master
    /// removed its own). Call it only after every master of these ids has ended.
    pub fn check(&mut self) -> Vec<PathBuf> {
        let mut left = Vec::new();
        for id in self.ids.drain(..) {
            // The master's claim of the id: gone with it at exit, left by a SIGKILL.
            let _ = std::fs::remove_file(linerate::cluster::claim_path(id));
            for p in linerate::cluster::segment_paths(id) {
                if std::fs::symlink_metadata(&p).is_ok() {
                    let _ = std::fs::remove_file(&p);
                    left.push(p);
                }
            }
        }
        left
    }
}

impl Drop for ClusterSegments {
    /// A test that fails (panics) before its [`check`](ClusterSegments::check) still removes
    /// what its masters left: the runs it gave up on were killed, SIGKILL, and left 78 MB each.
    fn drop(&mut self) {
        self.check();
    }
}

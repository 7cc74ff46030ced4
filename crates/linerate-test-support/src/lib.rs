//! The harness shared by linerate's integration tests (both crates use it as a dev-dependency).
//!
//! - [`netns`]: two network namespaces joined by a veth pair, removed on drop; raw frame helpers.
//! - [`line`]: three namespaces in a line, A – B – C, for forwarding tests.
//! - [`skip`]: the one way a test that cannot run says so. It prints `SKIP: <test>: <reason>`,
//!   appends the same line to the file named by `LINERATE_SKIP_LOG` (so that `scripts/test.sh`
//!   counts skips in its closing line instead of reporting them as passes), and under
//!   `LINERATE_REQUIRE_PRIV=1` (CI) fails the test instead.
//! - [`corpus_dir`]: tcpdump's test captures, kept in the repository (`tests/corpus/`).
//!
//! No `unsafe` here: what needs the kernel directly (entering a namespace, an interface's
//! index, a raw packet socket, a tc program) goes through the library's safe `linerate::os`.
#![deny(unsafe_code)]

pub mod line;
pub mod netns;

use std::io::Write;
use std::path::PathBuf;

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

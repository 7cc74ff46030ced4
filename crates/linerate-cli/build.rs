//! Stamps the binary with the commit it was built from and the build date, for `--version`
//! (`linerate 0.1.0 (2ba9a4c 2026-11-27)`) and the man pages.
//!
//! - commit: `git rev-parse --short HEAD` of the workspace, with `-dirty` when the sources that
//!   go into the binary differ from it (tracked files only); `unknown commit` when the sources
//!   are not a git checkout (a tarball, `cargo package`) or git is missing. A git repository
//!   around an unpacked tarball (a home directory kept in git) is not taken for the
//!   workspace's: its top level must be the workspace.
//! - date: UTC, from `SOURCE_DATE_EPOCH` when set (reproducible builds), else now.
//!
//! Nothing here uses the network. The script runs again when HEAD moves (checkout, commit)
//! or a source of the binary changes, so that `-dirty` follows the tree.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

/// What goes into the binary, relative to the workspace root: the sources whose changes make
/// a build `-dirty`.
const SOURCES: &[&str] = &[
    "Cargo.toml",
    "Cargo.lock",
    "bpf",
    "crates/linerate",
    "crates/linerate-cli/Cargo.toml",
    "crates/linerate-cli/build.rs",
    "crates/linerate-cli/src",
];

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let root = manifest
        .parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| manifest.clone());
    let commit = commit(&root).unwrap_or_else(|| "unknown commit".to_string());
    let date = date();
    println!("cargo:rustc-env=LINERATE_COMMIT={commit}");
    println!("cargo:rustc-env=LINERATE_BUILD_DATE={date}");
    println!(
        "cargo:rustc-env=LINERATE_VERSION={} ({commit} {date})",
        std::env::var("CARGO_PKG_VERSION").expect("cargo sets it")
    );
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
    for s in SOURCES {
        let p = root.join(s);
        if p.exists() {
            println!("cargo:rerun-if-changed={}", p.display());
        }
    }
}

/// Runs git in `root`; its standard output, trimmed, when it succeeds.
fn git(root: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(root)
        // `git status` would otherwise refresh the index, taking its lock under a user's own git.
        .arg("--no-optional-locks")
        .args(args)
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    Some(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The short commit, `-dirty` when the binary's sources differ from it; None outside a checkout
/// of this workspace.
fn commit(root: &Path) -> Option<String> {
    let top = PathBuf::from(git(root, &["rev-parse", "--show-toplevel"])?);
    if std::fs::canonicalize(&top).ok()? != std::fs::canonicalize(root).ok()? {
        return None;
    }
    let hash = git(root, &["rev-parse", "--short", "HEAD"])?;
    // HEAD, the branch it names and packed-refs: a checkout or a commit reruns this script.
    // In a worktree they live in different directories: git says where.
    let mut watch = vec!["HEAD".to_string(), "packed-refs".to_string()];
    if let Some(r) = git(root, &["symbolic-ref", "-q", "HEAD"]) {
        watch.push(r);
    }
    for w in watch {
        if let Some(p) = git(root, &["rev-parse", "--git-path", &w]) {
            let p = root.join(p);
            if p.exists() {
                println!("cargo:rerun-if-changed={}", p.display());
            }
        }
    }
    let mut args = vec!["status", "--porcelain", "--untracked-files=no", "--"];
    args.extend(SOURCES);
    let dirty = !git(root, &args)?.is_empty();
    Some(if dirty { format!("{hash}-dirty") } else { hash })
}

/// The build date, YYYY-MM-DD in UTC.
fn date() -> String {
    let secs = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs() as i64)
                .unwrap_or(0)
        });
    let (y, m, d) = civil(secs.div_euclid(86_400));
    format!("{y:04}-{m:02}-{d:02}")
}

/// The proleptic Gregorian date of a day count since 1970-01-01: years of 400 (146 097 days)
/// starting on March 1st, so that February's leap day is the last day of its year.
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468; // days from 0000-03-01
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097); // day of the 400-year era, 0..146096
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365; // year of the era
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // day of the March-based year
    let mp = (5 * doy + 2) / 153; // month from March = 0
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = era * 400 + yoe + i64::from(m <= 2);
    (y, m, d)
}

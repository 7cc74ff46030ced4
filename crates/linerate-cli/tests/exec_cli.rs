//! `linerate exec` as a user drives it: the program found along $PATH as the shell finds it,
//! and a library the loader would ignore refused before anything runs.
#![deny(unsafe_code)]

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_linerate");

/// A scratch folder removed at the end.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!("linerate-exec-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Scratch(d)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The C library this test runs with: a shared object the loader can preload anywhere.
fn libc_path() -> PathBuf {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| p.contains("/libc.so") || p.contains("/libc-"))
        .map(PathBuf::from)
        .expect("the test's own libc in /proc/self/maps")
}

/// A file of the program's name without execute permission earlier in $PATH is passed over,
/// as execvp does; the program after it runs with its arguments (spaces kept) and its exit code
/// comes back, and an LD_PRELOAD already set is kept after the library.
#[test]
fn exec_finds_the_program_as_the_shell_does() {
    let d = Scratch::new("path");
    let first = d.0.join("a");
    let second = d.0.join("b");
    std::fs::create_dir_all(&first).unwrap();
    std::fs::create_dir_all(&second).unwrap();
    std::fs::write(first.join("lrprog"), "not a program\n").unwrap();
    let script = second.join("lrprog");
    std::fs::write(
        &script,
        "#!/bin/sh\necho \"$LD_PRELOAD\"\necho \"$#|$1|$2\"\nexit 7\n",
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let lib = libc_path();
    let path = std::env::join_paths([
        first.clone(),
        second.clone(),
        "/usr/bin".into(),
        "/bin".into(),
    ])
    .unwrap();
    let out = Command::new(BIN)
        .args(["exec", "--lib"])
        .arg(&lib)
        .args(["--", "lrprog", "a b", "c  d"])
        .env("PATH", &path)
        .env("LD_PRELOAD", "libother.so")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(7),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut lines = text.lines();
    let preload = lines.next().unwrap();
    assert!(preload.ends_with(":libother.so"), "{preload}");
    assert_eq!(lines.next(), Some("2|a b|c  d"));
}

/// `--lib` naming a file that is not a shared library is a usage error before the program
/// runs (the loader would only warn and the program would open no linerate port).
#[test]
fn exec_refuses_a_library_the_loader_would_ignore() {
    let d = Scratch::new("lib");
    let marker = d.0.join("ran");
    let script = d.0.join("prog");
    std::fs::write(&script, format!("#!/bin/sh\ntouch {}\n", marker.display())).unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let bogus = d.0.join("liblinerate_pcap.so");
    std::fs::write(&bogus, "root:x:0:0:root:/root:/bin/bash\n").unwrap();
    let out = Command::new(BIN)
        .args(["exec", "--lib"])
        .arg(&bogus)
        .arg("--")
        .arg(&script)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("is not a shared library"), "{err}");
    assert!(!marker.exists(), "the program did not run");
}

/// A set-user-ID program run by another user: the loader ignores LD_PRELOAD in secure mode, so
/// exec refuses it (exit 2) rather than run it without linerate's ports.
#[test]
fn exec_refuses_a_set_user_id_program_the_loader_would_run_without_the_library() {
    use std::os::unix::process::CommandExt;
    if !linerate_test_support::require_tool("tcpdump", "apt-get install tcpdump") {
        return;
    }
    if std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m) != 0)
        .unwrap_or(true)
    {
        linerate_test_support::skip("needs root to run a program as another user");
        return;
    }
    let d = Scratch::new("suid");
    std::fs::set_permissions(&d.0, std::fs::Permissions::from_mode(0o755)).unwrap();
    let tcpdump = ["/usr/bin/tcpdump", "/usr/sbin/tcpdump"]
        .into_iter()
        .find(|p| std::path::Path::new(p).is_file())
        .unwrap();
    let copy = d.0.join("tcpdump-suid");
    std::fs::copy(tcpdump, &copy).unwrap();
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o4755)).unwrap();
    let lib = libc_path();
    let out = Command::new(BIN)
        .args(["exec", "--lib"])
        .arg(&lib)
        .arg("--")
        .arg(&copy)
        .arg("--version")
        .uid(65534)
        .gid(65534)
        .output();
    let Ok(out) = out else {
        linerate_test_support::skip("the linerate binary cannot be run as user nobody here");
        return;
    };
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("is set-user-ID (to user 0)"), "{err}");
    // Its owner runs it with the library.
    let out = Command::new(BIN)
        .args(["exec", "--lib"])
        .arg(&lib)
        .arg("--")
        .arg(&copy)
        .arg("--version")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A launcher that is not linked with libpcap itself (timeout, env, sh -c) passes LD_PRELOAD on:
/// exec runs it when one of its arguments names a libpcap program, and still refuses one that
/// names none.
#[test]
fn exec_runs_a_launcher_of_a_libpcap_program() {
    if !linerate_test_support::require_tool("tcpdump", "apt-get install tcpdump") {
        return;
    }
    let lib = libc_path();
    for launcher in [
        vec!["timeout", "20", "tcpdump", "--version"],
        vec!["sh", "-c", "tcpdump --version"],
    ] {
        let out = Command::new(BIN)
            .args(["exec", "--lib"])
            .arg(&lib)
            .arg("--")
            .args(&launcher)
            .output()
            .unwrap();
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "{launcher:?}: {all}");
        assert!(all.contains("tcpdump version"), "{launcher:?}: {all}");
    }
    let out = Command::new(BIN)
        .args(["exec", "--lib"])
        .arg(&lib)
        .args(["--", "env", "ls"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("nothing would change: env is not linked with libpcap"),
        "{err}"
    );
}

//! README's examples print what the tool prints: every ```` ```console ```` block of README.md
//! is run and its output compared.
//!
//! In such a block a line `$ COMMAND` is run by `sh -c` from the repository's root, with the
//! `linerate` under test first on the PATH, standard error into standard output (as a terminal
//! shows them); the lines up to the next `$ ` are what it must print, line by line, where `[..]`
//! stands for any text within a line (figures that change from run to run: rates, times) and a
//! line `...` for any number of lines. The command must exit 0. Only examples that need neither
//! root nor a network belong in such blocks (capture files, `mem:` ports); the others stay in
//! ```` ```sh ```` blocks.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_linerate");

/// One checked example: where it is, the command, what it must print.
#[derive(Debug)]
struct Example {
    line: usize,
    command: String,
    expected: Vec<String>,
}

/// The examples of every ```` ```console ```` block of `text`.
fn examples(text: &str) -> Vec<Example> {
    let mut out: Vec<Example> = Vec::new();
    let mut in_console = false;
    let mut in_other = false;
    for (i, l) in text.lines().enumerate() {
        let t = l.trim_end();
        if in_console || in_other {
            if t.trim_start().starts_with("```") {
                in_console = false;
                in_other = false;
            } else if in_console {
                if let Some(cmd) = t.strip_prefix("$ ") {
                    out.push(Example {
                        line: i + 1,
                        command: cmd.to_string(),
                        expected: Vec::new(),
                    });
                } else if let Some(e) = out.last_mut() {
                    e.expected.push(t.to_string());
                }
            }
        } else if let Some(info) = t.trim_start().strip_prefix("```") {
            if info.trim() == "console" {
                in_console = true;
            } else {
                in_other = true;
            }
        }
    }
    // A blank line before the next `$ ` separates examples; it is not output.
    for e in &mut out {
        while e.expected.last().is_some_and(|l| l.is_empty()) {
            e.expected.pop();
        }
    }
    out
}

/// Whether `line` matches `pattern`, where `[..]` stands for any text.
fn line_matches(pattern: &str, line: &str) -> bool {
    let parts: Vec<&str> = pattern.split("[..]").collect();
    if parts.len() == 1 {
        return pattern == line;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !line.starts_with(first) || !line[first.len()..].ends_with(last) {
        return false;
    }
    let mut rest = &line[first.len()..line.len() - last.len()];
    for p in &parts[1..parts.len() - 1] {
        match rest.find(p) {
            Some(at) => rest = &rest[at + p.len()..],
            None => return false,
        }
    }
    true
}

/// Whether `lines` match `expected`, where a line `...` stands for any number of lines.
fn lines_match(expected: &[String], lines: &[&str]) -> bool {
    match expected.split_first() {
        None => lines.is_empty(),
        Some((e, rest)) if e == "..." => (0..=lines.len()).any(|k| lines_match(rest, &lines[k..])),
        Some((e, rest)) => {
            !lines.is_empty() && line_matches(e, lines[0]) && lines_match(rest, &lines[1..])
        }
    }
}

fn root() -> PathBuf {
    linerate_test_support::repo_root()
}

/// Runs `command` as a reader of the README would, with this build's `linerate`.
fn run(command: &str) -> (bool, String) {
    let bin_dir = Path::new(BIN).parent().unwrap();
    let path = std::env::join_paths(std::iter::once(bin_dir.to_path_buf()).chain(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
    ))
    .unwrap();
    let o = Command::new("sh")
        .arg("-c")
        .arg(format!("exec 2>&1; {command}"))
        .current_dir(root())
        .env("PATH", path)
        .env_remove("LINERATE_PCAP_LIB")
        .stdin(Stdio::null())
        .output()
        .expect("sh");
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
    )
}

#[test]
fn readme_examples_print_what_the_tool_prints() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let ex = examples(&readme);
    assert!(
        ex.len() >= 2,
        "README.md has {} checked examples (```console blocks); its count examples are gone?",
        ex.len()
    );
    let mut failures = Vec::new();
    for e in &ex {
        let (ok, out) = run(&e.command);
        let lines: Vec<&str> = out.lines().map(str::trim_end).collect();
        if !ok || !lines_match(&e.expected, &lines) {
            failures.push(format!(
                "README.md:{}: $ {}\n  exited {}\n  README says:\n{}\n  it prints:\n{}",
                e.line,
                e.command,
                if ok { "0" } else { "with an error" },
                e.expected
                    .iter()
                    .map(|l| format!("    {l}"))
                    .collect::<Vec<_>>()
                    .join("\n"),
                lines
                    .iter()
                    .map(|l| format!("    {l}"))
                    .collect::<Vec<_>>()
                    .join("\n")
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn matcher_takes_wildcards_within_and_across_lines() {
    let e = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert!(line_matches("a [..] c", "a bbb c"));
    assert!(line_matches("[..]", ""));
    assert!(line_matches("x[..]y[..]z", "x1y2z"));
    assert!(!line_matches("x[..]y[..]z", "x1z2y"));
    assert!(!line_matches("a[..]a", "a"));
    assert!(!line_matches("abc", "abcd"));
    assert!(lines_match(&e(&["a", "...", "d"]), &["a", "b", "c", "d"]));
    assert!(lines_match(&e(&["a", "...", "d"]), &["a", "d"]));
    assert!(lines_match(&e(&["a", "..."]), &["a"]));
    assert!(!lines_match(&e(&["a", "...", "d"]), &["a", "b"]));
    assert!(!lines_match(&e(&["a"]), &["a", "b"]));
    let ex = examples(
        "x\n```console\n$ one\nout 1\n\n$ two\n```\n```sh\n$ not this\n```\n```console\n$ three\n...\n```\n",
    );
    let cmds: Vec<(&str, usize)> = ex
        .iter()
        .map(|e| (e.command.as_str(), e.expected.len()))
        .collect();
    assert_eq!(cmds, [("one", 1), ("two", 0), ("three", 1)]);
}

/// README's first command starts with `bash scripts/setup.sh`: for a user who is not root and
/// whose packages are all there, it must succeed without root or sudo (the run itself needs no
/// root), so that `&& cargo run ... demo` runs.
#[test]
fn setup_sh_needs_no_root_when_the_packages_are_there() {
    if !linerate_test_support::require_tool("dpkg-query", "a Debian system (scripts/setup.sh)") {
        return;
    }
    let script = std::fs::read(root().join("scripts/setup.sh")).unwrap();
    // Read from standard input, so that a user who cannot read the checkout runs it too.
    let mut cmd = if linerate::os::is_root() {
        if !linerate_test_support::require_tool("setpriv", "apt-get install util-linux") {
            return;
        }
        let mut c = Command::new("setpriv");
        c.args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "bash",
            "-s",
        ]);
        c
    } else {
        let mut c = Command::new("bash");
        c.arg("-s");
        c
    };
    let mut child = cmd
        .current_dir("/")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(&script).unwrap();
    let o = child.wait_with_output().unwrap();
    let out = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    if out.contains("setup: missing Debian packages") {
        linerate_test_support::skip(&format!("the build's packages are missing: {out}"));
        return;
    }
    assert!(
        o.status.success() && out.contains("setup: Debian packages present"),
        "{out}"
    );
}

//! Installing linerate as a tool: `linerate completions`, `linerate man`, `--version` with the
//! commit and build date (and the build script that makes it, run on scratch trees: a git
//! checkout, a dirty one, a tarball), and `scripts/install.sh` into a scratch prefix.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_linerate");

fn run(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("run linerate")
}

fn stdout_of(args: &[&str]) -> String {
    let o = run(args);
    assert!(
        o.status.success(),
        "linerate {args:?}: {:?}\n{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).expect("utf-8")
}

/// A scratch folder removed when the test ends.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let p = std::env::temp_dir().join(format!("linerate-install-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Scratch(p)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs a shell (`bash`, `zsh`, `fish`) with `script` as its command.
fn shell(sh: &str, script: &str) -> Output {
    Command::new(sh)
        .arg("-c")
        .arg(script)
        .output()
        .unwrap_or_else(|e| panic!("{sh}: {e}"))
}

/// Every subcommand users type, as the completion scripts must offer them.
const SUBCOMMANDS: &[&str] = &[
    "demo",
    "count",
    "balance",
    "gen",
    "rfc2544",
    "fwd",
    "lab",
    "flows",
    "watch",
    "sweep",
    "query",
    "record",
    "exec",
    "extcap",
    "completions",
    "man",
];

#[test]
fn completions_bash_is_valid_and_completes_subcommands_and_flags() {
    let d = Scratch::new("bash");
    let f = d.0.join("linerate.bash");
    std::fs::write(&f, stdout_of(&["completions", "bash"])).unwrap();
    let o = Command::new("bash").arg("-n").arg(&f).output().unwrap();
    assert!(
        o.status.success(),
        "bash -n: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    // What bash-completion calls on TAB: `linerate co<TAB>`, `linerate count --fi<TAB>`.
    let o = shell(
        "bash",
        &format!(
            "source {}; COMP_WORDS=(linerate co); COMP_CWORD=1; _linerate linerate co linerate; \
             printf '%s\\n' \"${{COMPREPLY[@]}}\"; echo --; \
             COMP_WORDS=(linerate count --fi); COMP_CWORD=2; _linerate linerate --fi count; \
             printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            f.display()
        ),
    );
    let out = String::from_utf8_lossy(&o.stdout);
    let (subs, flags) = out.split_once("--\n").expect("two answers");
    let mut subs: Vec<&str> = subs.lines().collect();
    subs.sort();
    assert_eq!(subs, ["completions", "count"], "{out}");
    assert_eq!(flags.lines().collect::<Vec<_>>(), ["--filter"], "{out}");
}

#[test]
fn completions_zsh_names_every_subcommand_and_parses() {
    let s = stdout_of(&["completions", "zsh"]);
    assert!(s.starts_with("#compdef linerate"), "{}", &s[..80]);
    for sub in SUBCOMMANDS {
        assert!(s.contains(&format!("'{sub}:")), "zsh script lacks {sub}");
    }
    assert!(s.contains("--filter"));
    if !linerate_test_support::require_tool("zsh", "apt-get install zsh; scripts/setup.sh --tests")
    {
        return;
    }
    let d = Scratch::new("zsh");
    let f = d.0.join("_linerate");
    std::fs::write(&f, &s).unwrap();
    let o = Command::new("zsh").arg("-n").arg(&f).output().unwrap();
    assert!(
        o.status.success(),
        "zsh -n: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    // Loaded after compinit, it registers itself for `linerate`.
    let o = shell(
        "zsh",
        &format!(
            "autoload -U compinit; compinit -u -D; source {}; print -r -- $_comps[linerate]",
            f.display()
        ),
    );
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        "_linerate",
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn completions_fish_names_every_subcommand_and_completes() {
    let s = stdout_of(&["completions", "fish"]);
    for sub in SUBCOMMANDS {
        assert!(
            s.contains(&format!("-a \"{sub}\"")),
            "fish script lacks {sub}"
        );
    }
    if !linerate_test_support::require_tool(
        "fish",
        "apt-get install fish; scripts/setup.sh --tests",
    ) {
        return;
    }
    let d = Scratch::new("fish");
    let f = d.0.join("linerate.fish");
    std::fs::write(&f, &s).unwrap();
    let o = Command::new("fish").arg("-n").arg(&f).output().unwrap();
    assert!(
        o.status.success(),
        "fish -n: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    // fish's own completer, as on TAB.
    let o = shell(
        "fish",
        &format!(
            "source {}; complete -C 'linerate co'; echo ==; complete -C 'linerate count --fi'",
            f.display()
        ),
    );
    let out = String::from_utf8_lossy(&o.stdout);
    let (subs, flags) = out.split_once("==\n").expect("two answers");
    let mut subs: Vec<&str> = subs
        .lines()
        .map(|l| l.split('\t').next().unwrap())
        .collect();
    subs.sort();
    assert_eq!(subs, ["completions", "count"], "{out}");
    let flags: Vec<&str> = flags
        .lines()
        .map(|l| l.split('\t').next().unwrap())
        .collect();
    assert_eq!(flags, ["--filter"], "{out}");
}

/// The letters a tool refuses with a hint (docs/DESIGN.md "One flag vocabulary"), and one it
/// takes, as (subcommand, refused, taken).
const RETIRED: &[(&str, &str, &str)] = &[
    ("fwd", "-T", "-t"),
    ("watch", "-i", "-q"),
    ("sweep", "-t", "-q"),
    ("lab", "-r", "-t"),
];

#[test]
fn completions_never_offer_a_retired_letter() {
    let d = Scratch::new("retired");
    let bash = d.0.join("linerate.bash");
    std::fs::write(&bash, stdout_of(&["completions", "bash"])).unwrap();
    let zsh = stdout_of(&["completions", "zsh"]);
    let fish = d.0.join("linerate.fish");
    std::fs::write(&fish, stdout_of(&["completions", "fish"])).unwrap();
    for (sub, refused, taken) in RETIRED {
        // bash-completion's call on `linerate SUB -<TAB>`.
        let o = shell(
            "bash",
            &format!(
                "source {}; COMP_WORDS=(linerate {sub} -); COMP_CWORD=2; _linerate linerate - {sub}; \
                 printf '%s\\n' \"${{COMPREPLY[@]}}\"",
                bash.display()
            ),
        );
        let out = String::from_utf8_lossy(&o.stdout);
        let offered: Vec<&str> = out.lines().collect();
        assert!(offered.contains(taken), "bash {sub}: {out}");
        assert!(
            !offered.contains(refused),
            "bash offers {sub} {refused}: {out}"
        );
        // zsh: the retired flags' descriptions start with the letter in backquotes.
        assert!(
            !zsh.contains(&format!("'{refused}+[\\`{refused}\\`")),
            "zsh offers {sub} {refused}"
        );
        if !linerate_test_support::require_tool(
            "fish",
            "apt-get install fish; scripts/setup.sh --tests",
        ) {
            continue;
        }
        let o = shell(
            "fish",
            &format!("source {}; complete -C 'linerate {sub} -'", fish.display()),
        );
        let out = String::from_utf8_lossy(&o.stdout);
        let offered: Vec<&str> = out.lines().map(|l| l.split('\t').next().unwrap()).collect();
        assert!(offered.contains(taken), "fish {sub}: {out}");
        assert!(
            !offered.contains(refused),
            "fish offers {sub} {refused}: {out}"
        );
    }
}

#[test]
fn completions_refuse_an_unknown_shell() {
    let o = run(&["completions", "tcsh"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(o.stdout.is_empty());
    assert!(String::from_utf8_lossy(&o.stderr).contains("tcsh"));
}

#[test]
fn man_count_renders_with_its_options() {
    let roff = stdout_of(&["man", "count"]);
    // The roff sections man expects, titled as `man linerate-count` finds the page.
    assert!(roff.contains(".TH LINERATE-COUNT 1 "), "{}", &roff[..200]);
    for sec in [
        ".SH NAME",
        ".SH SYNOPSIS",
        ".SH DESCRIPTION",
        ".SH OPTIONS",
        ".SH VERSION",
    ] {
        assert!(roff.contains(sec), "no {sec}");
    }
    if !linerate_test_support::require_tool(
        "man",
        "apt-get install man-db; scripts/setup.sh --tests",
    ) {
        return;
    }
    let d = Scratch::new("man");
    let f = d.0.join("linerate-count.1");
    std::fs::write(&f, &roff).unwrap();
    let o = Command::new("man")
        // Neither justified nor hyphenated, so that phrases stay whole.
        .args(["--no-justification", "--no-hyphenation", "-l", "-P", "cat"])
        .arg(&f)
        .env("MANWIDTH", "100")
        .env("MAN_KEEP_FORMATTING", "")
        .env("LC_ALL", "C.UTF-8")
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "man -l: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let text = String::from_utf8_lossy(&o.stdout);
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    // The rendered page: its name line and count's options with their help.
    assert!(
        text.contains("linerate-count - Receive and count packets"),
        "{text}"
    );
    for opt in [
        "-i, --in <PORT>",
        "-w, --write <OUT.pcap>",
        "-f, --filter <BPF>",
        "-c, --count <COUNT>",
        "-Q, --direction",
    ] {
        assert!(text.contains(opt), "rendered page lacks {opt}:\n{text}");
    }
    assert!(text.contains("BPF filter in libpcap syntax"));
}

#[test]
fn man_of_the_tool_lists_subcommands_and_nested_pages_exist() {
    let roff = stdout_of(&["man"]);
    assert!(roff.contains(".TH LINERATE 1 "));
    assert!(roff.contains(".SH SUBCOMMANDS"));
    for sub in SUBCOMMANDS {
        assert!(
            roff.contains(&format!("linerate\\-{sub}(1)")),
            "the tool's page does not point at linerate-{sub}(1)"
        );
    }
    assert!(stdout_of(&["man", "extcap", "install"]).contains(".TH LINERATE-EXTCAP-INSTALL 1 "));
}

#[test]
fn man_unknown_command_is_a_usage_error_naming_the_commands() {
    let o = run(&["man", "cuont"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(o.stdout.is_empty());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("no subcommand `cuont`") && e.contains("count"),
        "{e}"
    );
    // A command with no subcommands of its own says so and names its page, never an empty
    // list.
    let o = run(&["man", "count", "count"]);
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("it has none: its page is `linerate man count`") && !e.contains("()"),
        "{e}"
    );
}

#[test]
fn man_dir_writes_a_page_per_subcommand() {
    let d = Scratch::new("mandir");
    let dir = d.0.join("man1");
    let listed = stdout_of(&["man", "--dir", dir.to_str().unwrap()]);
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    files.sort();
    let mut want: Vec<String> = SUBCOMMANDS
        .iter()
        .map(|s| format!("linerate-{s}.1"))
        .chain(
            [
                "linerate.1",
                "linerate-extcap-install.1",
                "linerate-extcap-uninstall.1",
                "linerate-record.1",
            ]
            .map(String::from),
        )
        .collect();
    want.sort();
    // A page named twice (a subcommand also in SUBCOMMANDS) is one file.
    want.dedup();
    assert_eq!(files, want);
    assert_eq!(listed.lines().count(), want.len(), "{listed}");
    let count = std::fs::read_to_string(dir.join("linerate-count.1")).unwrap();
    assert_eq!(count, stdout_of(&["man", "count"]));
}

/// `git` in the repository of the sources, when they are a checkout and git is here.
fn git(args: &[&str]) -> Option<String> {
    let o = Command::new("git")
        .arg("-C")
        .arg(linerate_test_support::repo_root())
        .args(args)
        .output()
        .ok()?;
    o.status
        .success()
        .then(|| String::from_utf8_lossy(&o.stdout).trim().to_string())
}

/// `linerate 0.1.0 (COMMIT DATE)`: the version, the commit and the build date.
fn parse_version(line: &str) -> (String, String) {
    let rest = line
        .strip_prefix(concat!("linerate ", env!("CARGO_PKG_VERSION"), " ("))
        .and_then(|r| r.strip_suffix(')'))
        .unwrap_or_else(|| panic!("version line {line:?}"));
    let (commit, date) = rest.rsplit_once(' ').expect("COMMIT DATE");
    (commit.to_string(), date.to_string())
}

fn is_date(d: &str) -> bool {
    d.len() == 10
        && d.bytes().enumerate().all(|(i, b)| {
            if i == 4 || i == 7 {
                b == b'-'
            } else {
                b.is_ascii_digit()
            }
        })
}

#[test]
fn version_names_the_commit_and_the_build_date() {
    let v = stdout_of(&["--version"]);
    assert_eq!(v.lines().count(), 1, "{v}");
    let (commit, date) = parse_version(v.trim_end());
    assert!(is_date(&date), "{v}");
    match git(&["rev-parse", "HEAD"]) {
        Some(head) => {
            let hash = commit.strip_suffix("-dirty").unwrap_or(&commit);
            assert!(
                hash.len() >= 7 && head.starts_with(hash),
                "{v}: HEAD is {head}"
            );
        }
        None => assert_eq!(commit, "unknown commit", "{v}"),
    }
    // Subcommands say the same (clap's propagated version), and -V is --version.
    assert_eq!(
        stdout_of(&["count", "--version"]),
        v.replacen("linerate", "linerate-count", 1)
    );
    assert_eq!(stdout_of(&["-V"]), v);
}

/// The build script of linerate-cli, compiled on its own, so that it can run on scratch trees.
struct BuildScript {
    _dir: Scratch,
    exe: PathBuf,
}

impl BuildScript {
    fn new() -> BuildScript {
        let dir = Scratch::new("buildrs");
        let exe = dir.0.join("build-script");
        let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
        let o = Command::new(rustc)
            .args(["--edition", "2021", "-O", "-o"])
            .arg(&exe)
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("build.rs"))
            .output()
            .expect("rustc");
        assert!(
            o.status.success(),
            "rustc build.rs: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        BuildScript { _dir: dir, exe }
    }

    /// Runs it for a workspace at `ws` (its crates/linerate-cli being the package); the
    /// LINERATE_VERSION it sets.
    fn version(&self, ws: &Path, epoch: Option<&str>) -> String {
        let mut c = Command::new(&self.exe);
        c.env("CARGO_MANIFEST_DIR", ws.join("crates/linerate-cli"))
            .env("CARGO_PKG_VERSION", "0.1.0")
            .env_remove("SOURCE_DATE_EPOCH")
            .env_remove("GIT_DIR")
            .env_remove("GIT_WORK_TREE");
        if let Some(e) = epoch {
            c.env("SOURCE_DATE_EPOCH", e);
        }
        let o = c.output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let out = String::from_utf8(o.stdout).unwrap();
        out.lines()
            .find_map(|l| l.strip_prefix("cargo:rustc-env=LINERATE_VERSION="))
            .unwrap_or_else(|| panic!("no LINERATE_VERSION in {out}"))
            .to_string()
    }
}

/// A small tree shaped like the workspace: crates/linerate-cli/src/main.rs and a README.
fn scratch_tree(ws: &Path) {
    std::fs::create_dir_all(ws.join("crates/linerate-cli/src")).unwrap();
    std::fs::write(ws.join("crates/linerate-cli/src/main.rs"), "fn main() {}\n").unwrap();
    std::fs::write(ws.join("README.md"), "# readme\n").unwrap();
}

fn git_in(dir: &Path, args: &[&str]) -> String {
    let o = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@example.invalid",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .output()
        .expect("git");
    assert!(
        o.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

#[test]
fn build_script_stamps_commit_dirty_and_unknown_commit() {
    if !linerate_test_support::require_tool("git", "apt-get install git") {
        return;
    }
    let b = BuildScript::new();
    let d = Scratch::new("trees");

    // A tarball: no .git anywhere above it.
    let tar = d.0.join("tarball");
    scratch_tree(&tar);
    assert_eq!(
        b.version(&tar, Some("0")),
        "0.1.0 (unknown commit 1970-01-01)"
    );

    // A checkout, clean, then with a source changed, then with only the README changed.
    let ws = d.0.join("checkout");
    scratch_tree(&ws);
    git_in(&ws, &["init", "-q"]);
    git_in(&ws, &["add", "."]);
    git_in(&ws, &["commit", "-q", "-m", "first"]);
    let hash = git_in(&ws, &["rev-parse", "--short", "HEAD"]);
    assert_eq!(
        b.version(&ws, Some("951782400")),
        format!("0.1.0 ({hash} 2000-02-29)")
    );
    std::fs::write(ws.join("README.md"), "# changed\n").unwrap();
    assert_eq!(
        b.version(&ws, Some("951782400")),
        format!("0.1.0 ({hash} 2000-02-29)")
    );
    std::fs::write(
        ws.join("crates/linerate-cli/src/main.rs"),
        "fn main() { }\n",
    )
    .unwrap();
    assert_eq!(
        b.version(&ws, Some("4102444799")),
        format!("0.1.0 ({hash}-dirty 2099-12-31)")
    );

    // A tarball unpacked inside someone's git repository is still a tarball.
    let inner = ws.join("unpacked");
    scratch_tree(&inner);
    assert_eq!(
        b.version(&inner, Some("0")),
        "0.1.0 (unknown commit 1970-01-01)"
    );

    // Without SOURCE_DATE_EPOCH: today's date.
    let v = b.version(&tar, None);
    let date = v
        .strip_prefix("0.1.0 (unknown commit ")
        .and_then(|r| r.strip_suffix(')'))
        .unwrap();
    assert!(is_date(date), "{v}");
}

#[test]
fn install_sh_into_a_scratch_prefix() {
    let from = Path::new(BIN).parent().unwrap();
    if !from.join("liblinerate_pcap.so").is_file() {
        linerate_test_support::skip(&format!(
            "{}/liblinerate_pcap.so is missing: build it with `cargo build -p linerate-pcap` \
             (a workspace build makes it too)",
            from.display()
        ));
        return;
    }
    let d = Scratch::new("prefix");
    let prefix = d.0.join("usr");
    let script = linerate_test_support::repo_root().join("scripts/install.sh");
    let o = Command::new("bash")
        .arg(&script)
        .arg("--no-build")
        .arg("--from")
        .arg(from)
        .arg(&prefix)
        .env_remove("DESTDIR")
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "install.sh: {}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let bin = prefix.join("bin/linerate");
    for f in [
        "bin/linerate",
        "lib/linerate/liblinerate_pcap.so",
        "share/man/man1/linerate.1",
        "share/man/man1/linerate-count.1",
        "share/man/man1/linerate-extcap-install.1",
        "share/bash-completion/completions/linerate",
        "share/zsh/site-functions/_linerate",
        "share/fish/vendor_completions.d/linerate.fish",
    ] {
        assert!(prefix.join(f).is_file(), "{f} not installed");
    }
    // The installed binary runs and is the one built.
    let v = Command::new(&bin).arg("--version").output().unwrap();
    assert_eq!(v.stdout, stdout_of(&["--version"]).into_bytes());
    // man finds the pages where they were put.
    if linerate_test_support::require_tool(
        "man",
        "apt-get install man-db; scripts/setup.sh --tests",
    ) {
        let o = Command::new("man")
            .args(["-w", "linerate-count"])
            .env("MANPATH", prefix.join("share/man"))
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&o.stdout).trim(),
            prefix
                .join("share/man/man1/linerate-count.1")
                .to_str()
                .unwrap()
        );
    }
    // `linerate exec` of the installed binary finds the installed library (../lib/linerate):
    // tcpdump -D then lists linerate's capture names after the system's devices.
    if linerate_test_support::require_tool(
        "tcpdump",
        "apt-get install tcpdump; scripts/setup.sh --tests",
    ) {
        let o = Command::new(&bin)
            .args(["exec", "--", "tcpdump", "-D"])
            .env_remove("LINERATE_PCAP_LIB")
            .current_dir(&d.0)
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success() && out.contains("afpacket:"),
            "{out}\n{}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    // --uninstall takes it all back.
    let o = Command::new("bash")
        .arg(&script)
        .arg("--uninstall")
        .arg(&prefix)
        .env_remove("DESTDIR")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let left: Vec<_> = walk(&prefix);
    assert!(left.is_empty(), "left after --uninstall: {left:?}");
}

#[test]
fn install_sh_uninstall_removes_only_what_it_installed() {
    let from = Path::new(BIN).parent().unwrap();
    if !from.join("liblinerate_pcap.so").is_file() {
        linerate_test_support::skip(&format!(
            "{}/liblinerate_pcap.so is missing: build it with `cargo build -p linerate-pcap`",
            from.display()
        ));
        return;
    }
    let d = Scratch::new("foreign");
    let script = linerate_test_support::repo_root().join("scripts/install.sh");
    let install = |args: &[&str], prefix: &Path| {
        Command::new("bash")
            .arg(&script)
            .args(args)
            .arg(prefix)
            .env_remove("DESTDIR")
            .output()
            .unwrap()
    };
    // A prefix install.sh never installed into, holding another program's files of the same
    // names: --uninstall removes nothing there.
    let other = d.0.join("other");
    std::fs::create_dir_all(other.join("bin")).unwrap();
    std::fs::create_dir_all(other.join("share/man/man1")).unwrap();
    std::fs::write(other.join("bin/linerate"), "another linerate\n").unwrap();
    std::fs::write(other.join("share/man/man1/linerate-tools.1"), ".TH x\n").unwrap();
    let o = install(&["--uninstall"], &other);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("nothing removed"));
    assert_eq!(walk(&other).len(), 2, "{:?}", walk(&other));
    // Installed under a PREFIX with a space; then a page of another package beside ours and
    // one of ours edited since: both stay, the rest goes.
    let prefix = d.0.join("with space/usr");
    let o = install(&["--no-build", "--from", from.to_str().unwrap()], &prefix);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let foreign = prefix.join("share/man/man1/linerate-foo.1");
    std::fs::write(&foreign, ".TH foo\n").unwrap();
    let edited = prefix.join("share/zsh/site-functions/_linerate");
    std::fs::write(&edited, "# mine now\n").unwrap();
    let o = install(&["--uninstall"], &prefix);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("kept"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let mut left = walk(&prefix);
    left.sort();
    assert_eq!(left, [foreign, edited]);
}

/// Every file under `d`.
fn walk(d: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(d) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
    }
    out
}

#[test]
fn install_sh_refuses_bad_arguments_before_touching_anything() {
    let script = linerate_test_support::repo_root().join("scripts/install.sh");
    for args in [
        &["relative/prefix"][..],
        &["--bogus"],
        &["/a", "/b"],
        &["--from"],
    ] {
        let o = Command::new("bash")
            .arg(&script)
            .args(args)
            .output()
            .unwrap();
        assert_eq!(
            o.status.code(),
            Some(2),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(String::from_utf8_lossy(&o.stderr).starts_with("install.sh: "));
    }
}

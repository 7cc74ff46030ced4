//! `linerate exec -- PROGRAM ARGS...`: runs a libpcap program with liblinerate_pcap.so
//! preloaded, so that it opens linerate's ports (`tcpdump -i cluster:10@0`, `tshark -i
//! xdp:eth0@2`, `argus -i cluster:10@1`) as capture devices. Refuses, before running anything,
//! a program the library cannot change: a statically linked one, or one not linked with
//! libpcap.

use crate::common::usage;
use anyhow::Context;
use clap::Parser;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The library's file name.
pub const LIB: &str = "liblinerate_pcap.so";

#[derive(Parser, Debug)]
#[command(after_help = "\
The library is the first of: --lib, $LINERATE_PCAP_LIB, liblinerate_pcap.so next to the \
linerate binary, ../lib/linerate/ and ../lib/ from it (scripts/install.sh puts it in \
PREFIX/lib/linerate/), /usr/local/lib/linerate, /usr/local/lib, /usr/lib/linerate, /usr/lib. \
Device names linerate opens: cluster:ID@Q (or cluster:ID: the first free queue), \
xdp:IFACE[@Q], afpacket:IFACE; every other name goes to the system's libpcap. \
Same as LD_PRELOAD=/path/to/liblinerate_pcap.so PROGRAM ARGS... \
(see docs/pcap-apps.md).")]
pub struct Args {
    /// The library to preload (default: found as below).
    #[arg(long, value_name = "PATH")]
    lib: Option<PathBuf>,
    /// The program and its arguments (after `--`).
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "PROGRAM ARGS"
    )]
    command: Vec<String>,
}

/// How a program is linked, from its ELF program headers.
#[derive(Debug, PartialEq, Eq)]
pub enum Linking {
    /// It has an interpreter (the dynamic loader): LD_PRELOAD applies.
    Dynamic,
    /// No interpreter: the loader never runs, LD_PRELOAD changes nothing.
    Static,
    /// Not an ELF file (a script: its interpreter is what runs).
    NotElf,
}

/// Reads the ELF header and program headers of `b` (the file's bytes).
pub fn linking(b: &[u8]) -> Linking {
    if b.len() < 52 || &b[..4] != b"\x7fELF" {
        return Linking::NotElf;
    }
    let le = b[5] != 2;
    let u16_at = |o: usize| -> Option<u64> {
        let s: [u8; 2] = b.get(o..o + 2)?.try_into().ok()?;
        Some(if le {
            u16::from_le_bytes(s)
        } else {
            u16::from_be_bytes(s)
        } as u64)
    };
    let u32_at = |o: usize| -> Option<u64> {
        let s: [u8; 4] = b.get(o..o + 4)?.try_into().ok()?;
        Some(if le {
            u32::from_le_bytes(s)
        } else {
            u32::from_be_bytes(s)
        } as u64)
    };
    let u64_at = |o: usize| -> Option<u64> {
        let s: [u8; 8] = b.get(o..o + 8)?.try_into().ok()?;
        Some(if le {
            u64::from_le_bytes(s)
        } else {
            u64::from_be_bytes(s)
        })
    };
    let wide = b[4] == 2;
    let (phoff, phentsize, phnum) = if wide {
        (u64_at(32), u16_at(54), u16_at(56))
    } else {
        (u32_at(28), u16_at(42), u16_at(44))
    };
    let (Some(phoff), Some(size), Some(num)) = (phoff, phentsize, phnum) else {
        return Linking::NotElf;
    };
    for i in 0..num {
        let Some(at) = phoff.checked_add(i * size) else {
            break;
        };
        // PT_INTERP = 3.
        if u32_at(at as usize) == Some(3) {
            return Linking::Dynamic;
        }
    }
    Linking::Static
}

/// Finds `program` as the shell does: a path as given, else the first executable file of
/// that name along $PATH (a file without execute permission earlier in $PATH is passed over,
/// as execvp does).
fn which(program: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    if program.contains('/') {
        let p = PathBuf::from(program);
        return p.is_file().then_some(p);
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(program))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// Whether `b` (a file's first bytes) is an ELF shared object (ET_DYN), the only kind the
/// dynamic loader preloads: any other file it names "cannot be preloaded ... ignored" and the
/// program runs without the library.
pub fn is_shared_object(b: &[u8]) -> bool {
    if b.len() < 18 || &b[..4] != b"\x7fELF" {
        return false;
    }
    let t = if b[5] == 2 {
        u16::from_be_bytes([b[16], b[17]])
    } else {
        u16::from_le_bytes([b[16], b[17]])
    };
    t == 3
}

/// Refuses a library the loader would ignore.
fn check_lib(p: &Path) -> anyhow::Result<()> {
    use std::io::Read;
    let mut head = [0u8; 64];
    let n = std::fs::File::open(p)
        .and_then(|mut f| f.read(&mut head))
        .map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?;
    anyhow::ensure!(
        is_shared_object(&head[..n]),
        "{} is not a shared library (the loader would ignore it and the program would run \
         without linerate's ports): name {LIB}",
        p.display()
    );
    Ok(())
}

/// The library: --lib, $LINERATE_PCAP_LIB, beside the binary (target/release), ../lib/linerate
/// and ../lib from it (PREFIX/bin and PREFIX/lib of scripts/install.sh), then /usr/local/lib and
/// /usr/lib, each with its linerate/ directory first.
fn find_lib(given: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(p) = given {
        anyhow::ensure!(p.is_file(), "--lib {}: no such file", p.display());
        check_lib(p)?;
        return Ok(p.to_path_buf());
    }
    let mut tried = Vec::new();
    if let Some(p) = std::env::var_os("LINERATE_PCAP_LIB") {
        tried.push(PathBuf::from(p));
    }
    if let Ok(exe) = std::env::current_exe() {
        if let Some(dir) = exe.parent() {
            tried.push(dir.join(LIB));
            tried.push(dir.join("../lib/linerate").join(LIB));
            tried.push(dir.join("../lib").join(LIB));
        }
    }
    for d in ["/usr/local/lib", "/usr/lib"] {
        tried.push(Path::new(d).join("linerate").join(LIB));
        tried.push(Path::new(d).join(LIB));
    }
    if let Some(p) = tried.iter().find(|p| p.is_file()) {
        check_lib(p)?;
        return Ok(p.clone());
    }
    Err(anyhow::anyhow!(
        "{LIB} not found (looked at {}): build it with `cargo build --release -p \
         linerate-pcap` (scripts/install.sh installs it with the binary), or name it with --lib \
         PATH",
        tried
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

/// Why the loader would run `program` in secure mode (AT_SECURE: LD_PRELOAD of a path is
/// ignored), when it would: set-user-ID to another user, or set-group-ID to another group,
/// than this process's.
fn secure_exec(program: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(program).ok()?;
    // This process's real ids, from /proc/self/status ("Uid:\treal\teffective...").
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let id = |key: &str| -> Option<u32> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    };
    if m.mode() & 0o4000 != 0 && id("Uid:") != Some(m.uid()) {
        return Some(format!("set-user-ID (to user {})", m.uid()));
    }
    if m.mode() & 0o2000 != 0 && m.mode() & 0o010 != 0 && id("Gid:") != Some(m.gid()) {
        return Some(format!("set-group-ID (to group {})", m.gid()));
    }
    None
}

/// Whether the loader would load a libpcap into `program` (ldd's list names libpcap.so);
/// None when ldd cannot tell.
fn links_libpcap(program: &Path) -> Option<bool> {
    let out = std::process::Command::new("ldd")
        .arg(program)
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    Some(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .any(|l| l.trim_start().starts_with("libpcap.so")),
    )
}

/// Whether `arg` (or its first word: `sh -c 'tcpdump -i ...'`) is a program the loader would
/// load libpcap into, or a script (whose interpreter may run one).
fn names_pcap_program(arg: &str) -> bool {
    let Some(word) = arg.split_whitespace().next() else {
        return false;
    };
    let Some(p) = which(word) else {
        return false;
    };
    let mut head = Vec::new();
    use std::io::Read;
    if std::fs::File::open(&p)
        .and_then(|f| f.take(1 << 16).read_to_end(&mut head))
        .is_err()
    {
        return false;
    }
    match linking(&head) {
        Linking::Dynamic => links_libpcap(&p) != Some(false),
        Linking::NotElf => head.starts_with(b"#!"),
        Linking::Static => false,
    }
}

/// Runs `linerate exec`: replaces this process with the program (its exit code is the
/// program's); returns only on an error.
pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    let program = &a.command[0];
    let path = which(program).ok_or_else(|| usage(format!("{program}: no such program")))?;
    let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
    match linking(&bytes) {
        Linking::Static => {
            return Err(usage(format!(
                "nothing would change: {program} is statically linked ({} has no dynamic \
                 loader, so LD_PRELOAD is never read)",
                path.display()
            )))
        }
        Linking::Dynamic => {
            if let Some(why) = secure_exec(&path) {
                return Err(usage(format!(
                    "nothing would change: {program} is {why}: the loader runs it in secure \
                     mode and ignores LD_PRELOAD (run it as that user, or a copy without the bit)"
                )));
            }
            // A launcher (timeout, env, nice, sh -c '...', strace) passes LD_PRELOAD on to the
            // program it runs: one of its arguments names that program.
            if links_libpcap(&path) == Some(false)
                && !a.command[1..].iter().any(|w| names_pcap_program(w))
            {
                return Err(usage(format!(
                    "nothing would change: {program} is not linked with libpcap (ldd {} \
                     lists no libpcap.so), and none of its arguments names a program that is",
                    path.display()
                )));
            }
        }
        // A script: what it runs inherits LD_PRELOAD.
        Linking::NotElf => {}
    }
    let lib = find_lib(a.lib.as_deref()).map_err(|e| usage(e.to_string()))?;
    let lib = std::fs::canonicalize(&lib).unwrap_or(lib);
    let mut preload = lib.into_os_string();
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
        preload.push(":");
        preload.push(old);
    }
    let err = std::process::Command::new(&path)
        .arg0(program)
        .args(&a.command[1..])
        .env("LD_PRELOAD", preload)
        .exec();
    Err(anyhow::anyhow!("running {}: {err}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elf_linking_is_read_from_the_program_headers() {
        assert_eq!(linking(b"#!/bin/sh\necho\n"), Linking::NotElf);
        assert_eq!(linking(b""), Linking::NotElf);
        let sh = std::fs::read("/bin/sh").unwrap();
        assert_eq!(linking(&sh), Linking::Dynamic);
        // The same header with PT_INTERP renamed: a static program.
        let mut st = sh.clone();
        let phoff = u64::from_le_bytes(st[32..40].try_into().unwrap()) as usize;
        let size = u16::from_le_bytes(st[54..56].try_into().unwrap()) as usize;
        let num = u16::from_le_bytes(st[56..58].try_into().unwrap()) as usize;
        for i in 0..num {
            let at = phoff + i * size;
            if st[at..at + 4] == 3u32.to_le_bytes() {
                st[at..at + 4].copy_from_slice(&1u32.to_le_bytes());
            }
        }
        assert_eq!(linking(&st), Linking::Static);
        // Truncated program headers: no panic.
        assert_eq!(linking(&sh[..64]), Linking::Static);
    }

    #[test]
    fn only_shared_objects_are_preloadable() {
        let mut so = b"\x7fELF\x02\x01\x01".to_vec();
        so.resize(64, 0);
        so[16] = 3; // ET_DYN
        assert!(is_shared_object(&so));
        so[16] = 2; // ET_EXEC
        assert!(!is_shared_object(&so));
        assert!(!is_shared_object(b"root:x:0:0:root:/root:/bin/bash\n"));
        assert!(!is_shared_object(b"\x7fELF"));
        assert!(!is_shared_object(b""));
    }
}

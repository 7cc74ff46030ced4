//! `linerate man [COMMAND]...`: the manual page of the tool or of one subcommand, as roff on
//! standard output (`linerate man count | man -l -`); `--dir D` writes every page instead
//! (linerate.1, linerate-count.1, ...), as `scripts/install.sh` does into share/man/man1.
//! The pages are the `--help` texts, flags and notes included (clap_mangen).

use crate::common::usage;
use anyhow::Context;
use clap::{CommandFactory, Parser};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(after_help = "\
Read one now: `linerate man count | man -l -`. Installed (scripts/install.sh): `man linerate`, \
`man linerate-count`, one page per subcommand.")]
pub struct Args {
    /// The subcommand whose page to print (`count`; `extcap install` for a nested one);
    /// none: the page of linerate itself.
    #[arg(value_name = "COMMAND")]
    command: Vec<String>,
    /// Write the pages as files into DIR (created if missing), named as man finds them
    /// (linerate.1, linerate-count.1, ...): every page, or COMMAND's and those of its own
    /// subcommands. Prints each file written.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

/// The command tree as the pages show it: built, so that each subcommand carries its page's
/// name (`linerate-count`) and the version.
fn root() -> clap::Command {
    let mut cmd = crate::Cli::command().disable_help_subcommand(true);
    cmd.build();
    cmd
}

/// The subcommand at `path` (`["extcap", "install"]`), or the tool itself for an empty path.
fn find(root: &clap::Command, path: &[String]) -> anyhow::Result<clap::Command> {
    let mut c = root;
    for (i, name) in path.iter().enumerate() {
        c = c.find_subcommand(name).ok_or_else(|| {
            let names: Vec<&str> = c
                .get_subcommands()
                .filter(|s| !s.is_hide_set())
                .map(|s| s.get_name())
                .collect();
            let there = if names.is_empty() {
                format!(
                    "it has none: its page is `linerate man {}`",
                    path[..i].join(" ")
                )
            } else {
                format!("there are: {}", names.join(", "))
            };
            usage(format!(
                "man: no subcommand `{name}` in `{}` ({there}); see `linerate man --help`",
                c.get_display_name().unwrap_or(c.get_name()),
            ))
        })?;
    }
    Ok(c.clone())
}

/// The page of `cmd`: section 1, titled in capitals, dated with the build, its source the
/// version with its commit.
fn page(cmd: clap::Command) -> clap_mangen::Man {
    let title = cmd
        .get_display_name()
        .unwrap_or(cmd.get_name())
        .to_uppercase();
    clap_mangen::Man::new(cmd)
        .title(title)
        .date(env!("LINERATE_BUILD_DATE"))
        .source(concat!("linerate ", env!("LINERATE_VERSION")))
        .manual("linerate manual")
}

/// The roff text of the page of `path` (empty: the tool's).
pub fn render(path: &[String]) -> anyhow::Result<Vec<u8>> {
    let cmd = find(&root(), path)?;
    let mut out = Vec::new();
    page(cmd).render(&mut out).context("rendering the page")?;
    Ok(out)
}

/// Writes the page of `cmd` and of each of its visible subcommands into `dir`.
fn write_all(cmd: clap::Command, dir: &Path, written: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_all(sub.clone(), dir, written)?;
    }
    let p = page(cmd);
    let file = dir.join(p.get_filename());
    p.generate_to(dir)
        .with_context(|| format!("{}: cannot write the page", file.display()))?;
    written.push(file);
    Ok(())
}

pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    let Some(dir) = a.dir else {
        return crate::cmd::completions::write_stdout(&render(&a.command)?);
    };
    let cmd = find(&root(), &a.command)?;
    std::fs::create_dir_all(&dir)
        .with_context(|| format!("--dir {}: cannot create the directory", dir.display()))?;
    let mut written = Vec::new();
    write_all(cmd, &dir, &mut written)?;
    written.sort();
    for f in &written {
        println!("{}", f.display());
    }
    Ok(ExitCode::SUCCESS)
}

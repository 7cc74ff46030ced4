//! `linerate completions SHELL`: the shell's completion script for every subcommand and flag,
//! on standard output (clap_complete, from the same definition the parser uses).
//! `scripts/install.sh` puts them where bash-completion, zsh and fish look.

use clap::{CommandFactory, Parser};
use clap_complete::Shell;
use std::io::Write;
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(after_help = "\
Load it now: `source <(linerate completions bash)`; zsh: `source <(linerate completions zsh)` \
after compinit; fish: `linerate completions fish | source`. Installed for every session: \
bash: /usr/local/share/bash-completion/completions/linerate (or \
~/.local/share/bash-completion/completions/linerate); zsh: _linerate in a directory of \
$fpath (/usr/local/share/zsh/site-functions); fish: \
/usr/local/share/fish/vendor_completions.d/linerate.fish (or ~/.config/fish/completions/). \
scripts/install.sh does it.")]
pub struct Args {
    /// The shell: bash, zsh, fish (also elvish, powershell).
    #[arg(value_enum, value_name = "SHELL")]
    shell: Shell,
}

/// The script for `shell`.
pub fn script(shell: Shell) -> Vec<u8> {
    let mut cmd = without_hidden(&crate::Cli::command());
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut cmd, "linerate", &mut out);
    out
}

/// `cmd` and its subcommands without their hidden flags: the retired letters (fwd -T, watch -i,
/// sweep -t, lab -r) are refused with a hint, so a completion must never offer them
/// (clap_complete lists hidden flags). The rest is copied as the parser has it.
fn without_hidden(cmd: &clap::Command) -> clap::Command {
    let hidden: Vec<&clap::Id> = cmd
        .get_arguments()
        .filter(|a| a.is_hide_set())
        .map(clap::Arg::get_id)
        .collect();
    let groups = cmd.get_groups().map(|g| {
        // `is_multiple` takes `&mut`: ask a copy.
        let multiple = g.clone().is_multiple();
        clap::ArgGroup::new(g.get_id().clone())
            .args(g.get_args().filter(|a| !hidden.contains(a)).cloned())
            .multiple(multiple)
            .required(g.is_required_set())
    });
    let mut c = clap::Command::new(cmd.get_name().to_string())
        .args(cmd.get_arguments().filter(|a| !a.is_hide_set()).cloned())
        .groups(groups)
        .subcommands(cmd.get_subcommands().map(without_hidden))
        .visible_aliases(cmd.get_visible_aliases().map(str::to_string))
        .aliases(cmd.get_all_aliases().map(str::to_string))
        .hide(cmd.is_hide_set())
        .propagate_version(cmd.is_propagate_version_set())
        .disable_help_subcommand(cmd.is_disable_help_subcommand_set());
    if let Some(v) = cmd.get_version() {
        c = c.version(v.to_string());
    }
    if let Some(t) = cmd.get_about() {
        c = c.about(t.clone());
    }
    if let Some(t) = cmd.get_long_about() {
        c = c.long_about(t.clone());
    }
    c
}

pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    write_stdout(&script(a.shell))
}

/// Writes `b` to standard output; a reader that left (`| head`) ends the run quietly.
pub fn write_stdout(b: &[u8]) -> anyhow::Result<ExitCode> {
    let mut out = std::io::stdout().lock();
    match out.write_all(b).and_then(|()| out.flush()) {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(ExitCode::SUCCESS),
        Err(e) => Err(anyhow::Error::new(e).context("standard output")),
    }
}

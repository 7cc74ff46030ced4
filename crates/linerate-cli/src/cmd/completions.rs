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
    let mut cmd = crate::Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut cmd, "linerate", &mut out);
    out
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

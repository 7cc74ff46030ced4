//! What every subcommand shares: errors and exit codes, signals, core pinning.

use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// An error the user caused (bad flag value, missing interface or file): exit code 2.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Makes a usage error (exit code 2).
pub fn usage(msg: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(UsageError(msg.into()))
}

/// Prints `linerate: error: ...` on one line and picks the exit code: 2 for usage errors, 1
/// otherwise.
pub fn report_error(e: &anyhow::Error) -> ExitCode {
    let msg = e
        .chain()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join(": ");
    eprintln!("linerate: error: {msg}");
    if e.downcast_ref::<UsageError>().is_some() {
        ExitCode::from(2)
    } else {
        ExitCode::from(1)
    }
}

/// A flag set by the first SIGINT or SIGTERM; a second one ends the process at once.
pub fn stop_flag() -> anyhow::Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register_conditional_shutdown(sig, 130, stop.clone())?;
        signal_hook::flag::register(sig, stop.clone())?;
    }
    Ok(stop)
}

/// Pins the calling thread to `core`.
pub fn pin(core: Option<usize>) -> anyhow::Result<()> {
    let Some(core) = core else { return Ok(()) };
    let ids = core_affinity::get_core_ids().unwrap_or_default();
    let Some(id) = ids.into_iter().find(|c| c.id == core) else {
        return Err(usage(format!(
            "-g {core}: no such core (this machine has cores 0..{})",
            std::thread::available_parallelism().map_or(1, |n| n.get()) - 1
        )));
    };
    if !core_affinity::set_for_current(id) {
        anyhow::bail!("cannot pin to core {core}");
    }
    Ok(())
}

/// Prints a flag error on one line (`linerate: error: ... (see --help)`) and exits 2; help and
/// version go to standard output with exit code 0.
pub fn clap_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion)
        || e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    {
        let _ = e.print();
        return if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
            ExitCode::from(2)
        } else {
            ExitCode::SUCCESS
        };
    }
    let text = e.to_string();
    let msg: Vec<&str> = text
        .lines()
        .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
        .map(|l| l.trim())
        .filter(|l| !l.is_empty())
        .collect();
    let msg = msg.join(" ");
    let msg = msg.strip_prefix("error: ").unwrap_or(&msg);
    eprintln!("linerate: error: {msg} (see linerate --help)");
    ExitCode::from(2)
}

//! What every subcommand shares: errors and exit codes, signals, core pinning, flag ranges.

pub mod flags;
pub mod metrics;

use linerate::port::file::{self, Inputs};
use linerate::port::{self, Direction, Port, PortError, PortOptions};
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
/// otherwise. A cause whose text its context already shows (`path: Broken pipe` then `Broken
/// pipe`) is printed once.
pub fn report_error(e: &anyhow::Error) -> ExitCode {
    let mut parts: Vec<String> = Vec::new();
    for c in e.chain() {
        let t = c.to_string();
        if parts.last().is_some_and(|p| p.ends_with(&t)) {
            continue;
        }
        parts.push(t);
    }
    let msg = parts.join(": ");
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

/// Whether this machine has a core numbered `core`.
pub fn core_exists(core: usize) -> bool {
    core_affinity::get_core_ids()
        .unwrap_or_default()
        .iter()
        .any(|c| c.id == core)
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

/// The files that port URIs and paths name (`pcap:FILE`, a bare path, `a,b`), as inputs no
/// output may overwrite.
pub fn inputs_of<'a>(uris: impl IntoIterator<Item = &'a str>) -> Inputs {
    let mut inputs = Inputs::default();
    for uri in uris {
        for part in uri.split(',') {
            match part.split_once(':') {
                Some(("pcap", path)) => inputs.add_path(path),
                Some((s, _)) if ["mem", "afpacket", "xdp", "cluster"].contains(&s) => {}
                _ => inputs.add_path(part),
            }
        }
    }
    inputs
}

/// A port error of `flag URI` as the user should see it: a usage error (exit 2) for what the
/// user named wrong (a missing file or interface, a bad name, an output that is an input), a
/// runtime error otherwise.
pub fn port_error(flag: &str, uri: &str, e: PortError) -> anyhow::Error {
    match e {
        PortError::Io { path, source } if source.kind() == std::io::ErrorKind::NotFound => usage(
            format!("{flag} {path}: no such file (an input is read, never created)"),
        ),
        PortError::BadUri { .. }
        | PortError::NoInterface(_)
        | PortError::Io { .. }
        | PortError::File(_)
        | PortError::Unsupported { .. } => usage(format!("{flag}: {e}")),
        other => anyhow::Error::new(other).context(format!("opening {uri}")),
    }
}

/// Opens the input port `uri` of `flag` (files read-only, never created).
pub fn open_input(flag: &str, uri: &str, opts: &PortOptions) -> anyhow::Result<Box<dyn Port>> {
    port::open(uri, opts, Direction::Rx).map_err(|e| port_error(flag, uri, e))
}

/// Opens the output port `uri` of `flag`: a capture file is created, unless it is one of
/// `opts.inputs`.
pub fn open_output(flag: &str, uri: &str, opts: &PortOptions) -> anyhow::Result<Box<dyn Port>> {
    port::open(uri, opts, Direction::Tx).map_err(|e| port_error(flag, uri, e))
}

/// Writes a small output file whole (a histogram, a CSV table), unless it is one of `inputs`.
pub fn write_file(flag: &str, path: &str, bytes: &[u8], inputs: &Inputs) -> anyhow::Result<()> {
    use std::io::Write;
    let mut f = file::create(path, inputs).map_err(|e| usage(format!("{flag}: {e}")))?;
    f.write_all(bytes)
        .map_err(|e| anyhow::anyhow!("{flag} {path}: {e}"))
}

/// Refuses, before the run, an output written at its end (a histogram, a CSV table) that is one
/// of `inputs` (the write checks again).
pub fn check_output(flag: &str, path: &str, inputs: &Inputs) -> anyhow::Result<()> {
    match file::FileId::of(std::path::Path::new(path)).and_then(|id| inputs.find(id)) {
        Some(input) => Err(usage(format!(
            "{flag}: {path} is the input {input} (the same file): refusing to overwrite an \
             input; write to another file"
        ))),
        None => Ok(()),
    }
}

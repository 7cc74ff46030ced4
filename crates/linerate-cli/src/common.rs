//! What every subcommand shares: errors and exit codes, signals, core pinning, flag ranges.

pub mod capture;
pub mod flags;
pub mod metrics;
pub mod output;
pub mod service;
pub mod sources;

use linerate::port::file::{self, Inputs};
use linerate::port::{self, Direction, Port, PortError, PortOptions};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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
/// pipe`, or a port error that shows its cause before a hint) is printed once.
pub fn report_error(e: &anyhow::Error) -> ExitCode {
    eprintln!("linerate: error: {}", error_text(e));
    if e.downcast_ref::<UsageError>().is_some() {
        ExitCode::from(2)
    } else {
        ExitCode::from(1)
    }
}

/// The text of `e` and its causes joined by ": ", each cause shown once.
fn error_text(e: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for c in e.chain() {
        let t = c.to_string();
        if parts.last().is_some_and(|p| p.contains(&t)) {
            continue;
        }
        parts.push(t);
    }
    parts.join(": ")
}

/// The signals that stop a tool: SIGINT, SIGTERM, and SIGHUP, SIGQUIT and SIGUSR1 alike (none
/// has another use here), so that a closed terminal or a `kill -QUIT` ends a run with its
/// summary and whole outputs too. SIGHUP ignored when the tool started (nohup) stays ignored, as
/// tcpdump does; SIGINT and the others always stop it, also when the shell that started it in
/// the background had them ignored (a non-interactive shell ignores SIGINT in `cmd &` jobs, and
/// `kill -INT $!` must still end the run).
pub const STOP_SIGNALS: [i32; 5] = [
    signal_hook::consts::SIGINT,
    signal_hook::consts::SIGTERM,
    signal_hook::consts::SIGHUP,
    signal_hook::consts::SIGQUIT,
    signal_hook::consts::SIGUSR1,
];

/// How long a repeated signal counts as the same stop: timeout(1) sends its signal to the tool
/// and then to the whole process group, so the tool gets it twice at once.
pub const REPEAT_WINDOW: std::time::Duration = std::time::Duration::from_secs(1);

/// The signals that stop a tool: [`STOP_SIGNALS`], but a SIGHUP ignored when the tool started
/// stays ignored (under nohup(1) a closed terminal does not end the run).
pub fn stop_signals() -> Vec<i32> {
    STOP_SIGNALS
        .into_iter()
        .filter(|&s| !(s == signal_hook::consts::SIGHUP && linerate::os::signal_ignored(s)))
        .collect()
}

/// The subcommands that run until stopped: main installs their stop signals first thing
/// ([`install_stop`]), before the flags are parsed and the inputs opened.
pub const RUN_UNTIL_STOPPED: [&str; 11] = [
    "count", "fwd", "flows", "balance", "demo", "gen", "rfc2544", "watch", "query", "sweep",
    "record",
];

/// The stop flag of this process, once installed ([`install_stop`]).
static STOP: std::sync::Mutex<Option<Arc<AtomicBool>>> = std::sync::Mutex::new(None);

/// Whether the tool watches the stop flag (it called [`stop_flag`]).
static CLAIMED: AtomicBool = AtomicBool::new(false);

/// A flag set by the first stop signal ([`STOP_SIGNALS`]); the tool then stops within a second
/// with its summary. Signals within [`REPEAT_WINDOW`] of the first are the same stop. A signal
/// after that forces the stop: outputs are sealed on their last whole record, the cluster
/// segments this process published are removed, and it exits with code 130 (no summary).
/// A signal that came before (main installs the handlers first thing, [`install_stop`]) is in
/// the flag already: the tool stops at once, with its summary.
pub fn stop_flag() -> anyhow::Result<Arc<AtomicBool>> {
    let stop = install_stop()?;
    CLAIMED.store(true, Ordering::SeqCst);
    Ok(stop)
}

/// Installs the handlers of the stop signals (once per process; later calls return the same
/// flag) and unblocks them: a process may start with them blocked (the mask is inherited across
/// exec), and one that came while blocked is taken now. main calls it first thing for the tools
/// that run until stopped ([`RUN_UNTIL_STOPPED`]), so that a signal that comes while the tool
/// starts (parsing its flags, opening its inputs) stops it as one that comes later does. A
/// signal that no [`stop_flag`] takes up within [`UNWATCHED_WAIT`] (the tool took a path that
/// does not watch the flag) ends the process as the signal's default action would, exit code
/// 128 + the signal, after sealing outputs.
pub fn install_stop() -> anyhow::Result<Arc<AtomicBool>> {
    let mut held = STOP.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(stop) = held.as_ref() {
        return Ok(stop.clone());
    }
    let stop = Arc::new(AtomicBool::new(false));
    let sigs = stop_signals();
    // Held until every handler below is in place: a signal that came between the first and
    // the last (counted, but the flag not set) was a stop lost.
    linerate::os::block_signals(&sigs);
    // Counted too: a signal that comes after the run began to stop ends the linger of
    // --metrics (metrics::finish), however soon after the first.
    let handlers = (|| -> std::io::Result<signal_hook::iterator::Signals> {
        linerate::os::count_signals(&sigs)?;
        for &sig in &sigs {
            // Set at once from the handler; the thread below sees repeats.
            signal_hook::flag::register(sig, stop.clone())?;
        }
        signal_hook::iterator::Signals::new(&sigs)
    })();
    // Every handler is in place: a signal that came meanwhile, or was blocked since the
    // process started (the mask is inherited across exec), is delivered now. The thread below
    // inherits the unblocked mask.
    linerate::os::unblock_signals(&sigs);
    let mut signals = handlers?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            let mut first: Option<std::time::Instant> = None;
            let mut seen = 0;
            for sig in signals.forever() {
                // After a re-arm (rearm_stop), the next signal is a first one again.
                let armed = REARMED.load(Ordering::SeqCst);
                if armed != seen {
                    seen = armed;
                    first = None;
                }
                match first {
                    None => {
                        let t = std::time::Instant::now();
                        first = Some(t);
                        while !CLAIMED.load(Ordering::SeqCst) && t.elapsed() < UNWATCHED_WAIT {
                            std::thread::sleep(std::time::Duration::from_millis(10));
                        }
                        if !CLAIMED.load(Ordering::SeqCst) {
                            unwatched_stop(sig);
                        }
                    }
                    Some(t) if t.elapsed() < REPEAT_WINDOW => {}
                    Some(_) => forced_stop(sig),
                }
            }
        })?;
    *held = Some(stop.clone());
    Ok(stop)
}

/// How long a stop signal that came before the tool watches its flag waits for it to (a
/// debug build on a loaded machine can take a second to get there), before it ends the process.
const UNWATCHED_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Ends the process for a stop signal that the tool does not watch for (it took a path that
/// never called [`stop_flag`]): outputs sealed on their last whole record, published segments
/// removed, exit code 128 + the signal, as the shell reports a process the signal ended.
fn unwatched_stop(sig: i32) -> ! {
    file::seal_all(std::time::Duration::from_millis(500));
    linerate::cluster::remove_published_segments();
    std::process::exit(128 + sig)
}

/// Times a tool re-armed its stop flag ([`rearm_stop`]).
static REARMED: AtomicU64 = AtomicU64::new(0);

/// For a wait after the summary that a signal ends: the stop signals received so far
/// ([`linerate::os::signal_count`]; counting starts now if the tool did not call [`stop_flag`]),
/// and from now on the next signal counts as a first one (no forced stop). The wait ends when
/// the count grows.
pub fn signals_for_wait() -> u64 {
    let _ = linerate::os::count_signals(&stop_signals());
    REARMED.fetch_add(1, Ordering::SeqCst);
    linerate::os::signal_count()
}

/// Clears `stop` so that a new signal asks for a new stop (flows does so to wait for Kafka's
/// acknowledgements after its input stopped): the next signal is then a first one, not a forced
/// stop.
pub fn rearm_stop(stop: &AtomicBool) {
    REARMED.fetch_add(1, Ordering::SeqCst);
    stop.store(false, Ordering::SeqCst);
}

/// Ends the process now, for a signal that came after the stop asked for was not done within
/// [`REPEAT_WINDOW`]: nothing more reaches an output (each ends on a whole record), shared
/// memory this process published is removed, exit code 130.
pub fn forced_stop(sig: i32) -> ! {
    // Not eprintln!: it panics when standard error is gone (a closed terminal), and this must
    // end the process whatever happened to it.
    use std::io::Write as _;
    let _ = writeln!(
        std::io::stderr(),
        "linerate: {} again: stopping by force (outputs end on their last whole record; no \
         summary)",
        signal_hook::low_level::signal_name(sig).unwrap_or("signal")
    );
    file::seal_all(std::time::Duration::from_millis(500));
    linerate::cluster::remove_published_segments();
    std::process::exit(130)
}

/// Whether this machine has a core numbered `core`.
pub fn core_exists(core: usize) -> bool {
    linerate::os::allowed_cores().contains(&core)
}

/// `core` if this process may run on it, else a usage error naming `-g`.
pub fn check_core(core: usize) -> anyhow::Result<usize> {
    if !core_exists(core) {
        return Err(usage(format!(
            "-g {core}: no such core (this machine has cores 0..{})",
            std::thread::available_parallelism().map_or(1, |n| n.get()) - 1
        )));
    }
    Ok(core)
}

/// Pins the calling thread to `core`.
pub fn pin(core: Option<usize>) -> anyhow::Result<()> {
    let Some(core) = core else { return Ok(()) };
    check_core(core)?;
    if !linerate::os::pin_current_thread(core) {
        anyhow::bail!("cannot pin to core {core}");
    }
    Ok(())
}

/// Prints a flag error on one line (`linerate: error: ... (see linerate SUBCOMMAND --help)`, the
/// help of the subcommand `sub` that was run, where its flags are) and exits 2; help and version
/// go to standard output with exit code 0.
pub fn clap_error(e: clap::Error, sub: Option<&str>) -> ExitCode {
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
    let help = match sub {
        Some(s) => format!("linerate {s} --help"),
        None => "linerate --help".into(),
    };
    eprintln!("linerate: error: {msg} (see {help})");
    ExitCode::from(2)
}

/// The files that port URIs and paths name (`pcap:FILE`, a bare path, `a,b`), as inputs no
/// output may overwrite.
pub fn inputs_of<'a>(uris: impl IntoIterator<Item = &'a str>) -> Inputs {
    let mut inputs = Inputs::default();
    for uri in uris {
        for part in uri.split(',') {
            if let Some(path) = file_of(part) {
                inputs.add_path(&path);
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
    linerate::open(uri, opts, Direction::Rx).map_err(|e| port_error(flag, uri, e))
}

/// Opens the output port `uri` of `flag`: a capture file is created, unless it is one of
/// `opts.inputs`.
pub fn open_output(flag: &str, uri: &str, opts: &PortOptions) -> anyhow::Result<Box<dyn Port>> {
    linerate::open(uri, opts, Direction::Tx).map_err(|e| port_error(flag, uri, e))
}

/// Writes a small output file whole (a histogram, a CSV table), unless it is one of `inputs`.
pub fn write_file(flag: &str, path: &str, bytes: &[u8], inputs: &Inputs) -> anyhow::Result<()> {
    use std::io::Write;
    let mut f = file::create(path, inputs).map_err(|e| usage(format!("{flag}: {e}")))?;
    f.write_all(bytes)
        .map_err(|e| anyhow::anyhow!("{flag} {path}: {e}"))
}

/// Refuses, before the run, an output written at its end (a histogram, a CSV table) that is one
/// of `inputs` or that cannot be opened for writing (no such directory, no permission): the
/// run would otherwise write its capture and fail at the end. The file is opened without
/// truncating it (and removed again if this check created it); the write checks again.
pub fn check_output(flag: &str, path: &str, inputs: &Inputs) -> anyhow::Result<()> {
    let p = std::path::Path::new(path);
    if let Some(input) = file::FileId::of(p).and_then(|id| inputs.find(id)) {
        return Err(usage(format!(
            "{flag}: {path} is the input {input} (the same file): refusing to overwrite an \
             input; write to another file"
        )));
    }
    let existed = std::fs::symlink_metadata(p).is_ok();
    match file::open_deferred(path, inputs) {
        Ok(f) => {
            drop(f);
            if !existed {
                let _ = std::fs::remove_file(p);
            }
            Ok(())
        }
        Err(e) => Err(usage(format!("{flag}: {e}"))),
    }
}

/// Whether opening `uri` may wait for a writer or for the first bytes: standard input, a FIFO
/// or a device among its files.
fn may_wait(uri: &str) -> bool {
    uri.split(',').any(|part| {
        file_of(part).is_some_and(|path| {
            path == "-" || std::fs::metadata(path).is_ok_and(|m| !m.file_type().is_file())
        })
    })
}

/// The file one port name (not a list) reads or writes: `pcap:FILE`, `pcapng:FILE` or a bare
/// name; None for a wire, an interface or a cluster. A name that does not parse is taken as a
/// file name (opening it says what is wrong).
pub(crate) fn file_of(part: &str) -> Option<String> {
    match port::Uri::parse(part) {
        Ok(port::Uri::File { path, .. } | port::Uri::Bare(path)) => Some(path),
        Ok(_) => None,
        Err(_) => Some(part.to_string()),
    }
}

/// [`open_input`], for an input that may wait before it gives its capture header (standard
/// input, a FIFO nobody writes yet): the wait ends with `stop` or after `limit`, and then it
/// returns `Ok(None)` (nothing was read). The open goes on in a thread of its own, left behind.
pub fn open_input_until(
    flag: &str,
    uri: &str,
    opts: &PortOptions,
    stop: &AtomicBool,
    limit: Option<std::time::Duration>,
) -> anyhow::Result<Option<Box<dyn Port>>> {
    if !may_wait(uri) {
        return open_input(flag, uri, opts).map(Some);
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let (f, u, o) = (flag.to_string(), uri.to_string(), opts.clone());
    std::thread::Builder::new()
        .name("open-input".into())
        .spawn(move || {
            let _ = tx.send(open_input(&f, &u, &o));
        })?;
    let t0 = std::time::Instant::now();
    loop {
        match rx.recv_timeout(std::time::Duration::from_millis(20)) {
            Ok(r) => return r.map(Some),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                if stop.load(std::sync::atomic::Ordering::Relaxed)
                    || limit.is_some_and(|l| t0.elapsed() >= l)
                {
                    return Ok(None);
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                anyhow::bail!("{flag} {uri}: opening it failed")
            }
        }
    }
}

/// A port that gives nothing and never ends: what a run reads when its input never opened
/// before the stop (see [`open_input_until`]), so that it still prints its summary.
pub struct Nothing(pub String);

impl Port for Nothing {
    fn name(&self) -> &str {
        &self.0
    }
    fn rx(&mut self, _: &mut linerate::mem::Batch) -> Result<usize, PortError> {
        Ok(0)
    }
    fn tx(&mut self, b: &mut linerate::mem::Batch) -> Result<usize, PortError> {
        let n = b.len();
        b.clear();
        Ok(n)
    }
    fn stats(&mut self) -> linerate::port::PortStats {
        Default::default()
    }
}

/// Attaches `f` in the kernel on `port` (named `name` in messages) if the port can. Returns false
/// when the caller must run it in user space: the port cannot, or the kernel refused the program
/// (as libpcap does then, a warning on stderr, and the filter runs in user space).
pub fn attach_filter(
    port: &mut dyn Port,
    f: &linerate::filter::Filter,
    name: &str,
) -> anyhow::Result<bool> {
    match port.attach_filter(f) {
        Ok(k) => Ok(k),
        Err(PortError::FilterRefused { source, .. }) => {
            eprintln!(
                "Warning: -f on {name}: kernel filter failed: {source}; filtering '{}' in user space",
                f.expr()
            );
            Ok(false)
        }
        // Inputs the filter cannot apply to as given (link types mixed): the user's to fix.
        Err(e @ PortError::BadUri { .. }) => Err(usage(format!("-f: {e}"))),
        Err(e) => Err(anyhow::Error::new(e).context(format!("-f on {name}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cause_is_shown_once_also_before_a_hint() {
        let port = linerate::port::PortError::Os {
            iface: "vA".into(),
            op: "attaching the XDP program",
            source: std::io::Error::other("XDP program 'x' (id 7) is already attached"),
            hint: " (another tool's program)".into(),
        };
        let e = anyhow::Error::new(port).context("opening xdp:vA");
        assert_eq!(
            error_text(&e),
            "opening xdp:vA: vA: attaching the XDP program: XDP program 'x' (id 7) is already \
             attached (another tool's program)"
        );
        let io = std::io::Error::from(std::io::ErrorKind::BrokenPipe);
        let e = anyhow::Error::new(io).context("out.pcap: broken pipe");
        assert_eq!(error_text(&e), "out.pcap: broken pipe");
    }
}

//! `--metrics ADDR` of every long-running tool: starts the endpoint, says where it is, and
//! warns when it is reachable from other hosts. What it serves is rendered with
//! [`linerate::stats::prom::Exposition`], whose common families every tool shares (names in
//! docs/metrics.md).
//!
//! Serving is [`linerate::stats::http::serve`]'s own thread; a tool either publishes a new text
//! from its statistics thread once per interval ([`Metrics::publish`]), or renders at each
//! scrape from counters its workers already keep ([`start_live`]). Nothing runs on the packet
//! path.
//!
//! A tool's last figures are its summary's; a job that ends takes its endpoint with it. Two
//! ways to keep them: `--metrics-linger` keeps the endpoint serving them after the summary (the
//! tool's run has returned: [`finish`], called by `main`), and `--metrics-textfile FILE` writes
//! them atomically (write, then rename) for node_exporter's textfile collector, the Prometheus
//! convention for jobs that end.

use super::{flags, usage};
use linerate::stats::http::{auth_note, serve, Endpoint};
use linerate::stats::prom::Exposition;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The flag's help text, the same on every tool.
pub const HELP: &str = "Serve counters in Prometheus' text format at http://ADDR/metrics (e.g. \
                        127.0.0.1:9100; port 0 picks one); no authentication: keep it on loopback";

/// How long the endpoint stays up after the summary when `--metrics` is given without
/// `--metrics-linger`: two scrapes at Prometheus' usual 15 s interval.
pub const DEFAULT_LINGER: Duration = Duration::from_secs(30);

/// The metrics flags of every long-running tool.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct MetricsArgs {
    #[arg(long, value_name = "ADDR", help = HELP)]
    pub metrics: Option<String>,
    /// After the summary, keep serving --metrics (its final figures, the summary's) this long,
    /// so that a last scrape gets them; default 30 s with --metrics (two scrapes at the usual
    /// 15 s interval), 0: exit at once. A stop signal ends the wait at once (the one that
    /// stopped a live run leaves it serving; a second one, even at once, ends it).
    #[arg(long, value_name = "SECONDS", value_parser = flags::duration(flags::WAIT))]
    pub metrics_linger: Option<Duration>,
    /// At the end, write the final figures (the summary's, in Prometheus' text format) to FILE
    /// atomically (a new temporary file beside it, then rename), for node_exporter's textfile collector (name it
    /// *.prom in its --collector.textfile.directory).
    #[arg(long, value_name = "FILE")]
    pub metrics_textfile: Option<PathBuf>,
}

type Render = Box<dyn Fn(&mut Exposition) + Send + Sync>;

/// What [`finish`] needs once the tool's run has returned: the endpoint (kept serving) and how
/// to read the final text.
struct End {
    endpoint: Option<Endpoint>,
    text: Arc<dyn Fn() -> String + Send + Sync>,
    linger: Duration,
    textfile: Option<PathBuf>,
    quiet: bool,
    /// `--metrics-linger` given: the user knows about the wait (-q then hides its note).
    explicit: bool,
}

static END: Mutex<Option<End>> = Mutex::new(None);

/// A new file beside `file` (the same file system, so that the rename is atomic), named
/// `.FILE.PID.N.tmp` and created with O_CREAT|O_EXCL|O_NOFOLLOW, mode 0644: never a file or
/// link already there (another user's link planted at a predictable name is not followed, and
/// runs writing the same FILE at once each get their own).
fn create_tmp_beside(file: &Path) -> std::io::Result<(std::fs::File, PathBuf)> {
    use std::os::unix::fs::OpenOptionsExt as _;
    use std::sync::atomic::AtomicU64;
    static N: AtomicU64 = AtomicU64::new(0);
    let dir = match file.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = file
        .file_name()
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a file name"))?;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    loop {
        let mut n = std::ffi::OsString::from(".");
        n.push(name);
        n.push(format!(
            ".{}.{}.{nanos:x}.tmp",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let tmp = dir.join(n);
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)
        {
            Ok(f) => return Ok((f, tmp)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Writes `text` to `file` atomically: a reader sees the old file or the whole new one. The
/// text goes to a new temporary file beside it ([`create_tmp_beside`]), synced, then renamed
/// over `file` (a link at `file` itself is replaced, not followed).
fn write_atomic(file: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    let (mut f, tmp) = create_tmp_beside(file)?;
    let written = f.write_all(text.as_bytes()).and_then(|()| f.sync_all());
    drop(f);
    written
        .and_then(|()| std::fs::rename(&tmp, file))
        .inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp);
        })
}

/// Whether [`finish`] says on standard error that the endpoint stays up (for a tool that
/// prints its own lines and started the endpoint quiet).
pub fn announce_linger(on: bool) {
    if let Ok(mut e) = END.lock() {
        if let Some(e) = e.as_mut() {
            e.quiet = !on;
        }
    }
}

/// After the tool's run (and its summary): writes `--metrics-textfile`, then keeps the endpoint
/// serving the final figures for `--metrics-linger`, or until a stop signal. An error writing
/// the file is returned (exit 1). `ran`: false when the tool refused its arguments (exit 2):
/// there are no figures to keep, nothing is written and nothing waits.
pub fn finish(ran: bool) -> anyhow::Result<()> {
    let Some(end) = END.lock().ok().and_then(|mut e| e.take()) else {
        return Ok(());
    };
    if !ran {
        return Ok(());
    }
    let mut result = Ok(());
    if let Some(f) = &end.textfile {
        if let Err(e) = write_atomic(f, &(end.text)()) {
            result = Err(anyhow::anyhow!(
                "--metrics-textfile {}: {e} (the final figures were not written)",
                f.display()
            ));
        }
    }
    if let Some(ep) = &end.endpoint {
        if !end.linger.is_zero() {
            // Every stop signal is counted from the tool's start, each one even when two come
            // at once. The one that stopped a live run (or one during its summary) leaves the
            // linger serving; any further one, before or during it, ends it at once.
            let seen = super::signals_for_wait();
            if seen >= 2 {
                drop(end);
                return result;
            }
            // -q prints only the summary, but a wait the user did not ask for (the default
            // linger) is announced all the same: a silent 30 s looks like a hang.
            if !end.quiet || !end.explicit {
                // Not eprintln!: standard error may be gone by now (a closed terminal).
                use std::io::Write as _;
                let _ = writeln!(
                    std::io::stderr(),
                    "Metrics stay on http://{}/metrics for {} s (--metrics-linger; Ctrl-C ends)",
                    ep.addr(),
                    end.linger.as_secs_f64()
                );
            }
            let t0 = Instant::now();
            while t0.elapsed() < end.linger && linerate::os::signal_count() == seen {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
    drop(end);
    result
}

/// Whether `a` and `b` name the same file: the same device and inode when both exist, else the
/// same name in the same (resolved) folder.
fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    if let (Ok(x), Ok(y)) = (std::fs::metadata(a), std::fs::metadata(b)) {
        return x.dev() == y.dev() && x.ino() == y.ino();
    }
    let place = |p: &Path| {
        let dir = match p.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        (
            std::fs::canonicalize(dir).ok(),
            p.file_name().map(|n| n.to_owned()),
        )
    };
    let (x, y) = (place(a), place(b));
    x.0.is_some() && x == y
}

/// Refuses (a usage error, exit 2) a `--metrics-textfile` that is also one of the run's other
/// files (`flag`, its path; "-" and None are skipped): the final figures would replace them.
/// Called before any output is started.
pub fn refuse_textfile_as(a: &MetricsArgs, files: &[(&str, Option<&str>)]) -> anyhow::Result<()> {
    let Some(f) = &a.metrics_textfile else {
        return Ok(());
    };
    for &(flag, p) in files {
        let Some(p) = p.filter(|p| *p != "-") else {
            continue;
        };
        if same_file(f, Path::new(p)) {
            return Err(usage(format!(
                "--metrics-textfile {}: the same file as {flag} {p}: the final figures would \
                 replace it (name another file)",
                f.display()
            )));
        }
    }
    Ok(())
}

/// Starts the endpoint of `--metrics ADDR`, if given; it serves what [`Metrics::publish`] last
/// set (the common families at 0 until then). With `--metrics-textfile` alone there is no
/// endpoint, but the figures are published all the same (for the file, at the end).
pub fn start(a: &MetricsArgs, tool: &str, quiet: bool) -> anyhow::Result<Option<Metrics>> {
    start_inner(a, tool, quiet, None)
}

/// Like [`start`], but until the first [`Metrics::publish`] each scrape is rendered by `render`
/// (reading counters other threads keep); the final publish then fixes the text.
pub fn start_live(
    a: &MetricsArgs,
    tool: &str,
    quiet: bool,
    render: impl Fn(&mut Exposition) + Send + Sync + 'static,
) -> anyhow::Result<Option<Metrics>> {
    start_inner(a, tool, quiet, Some(Box::new(render)))
}

fn start_inner(
    a: &MetricsArgs,
    tool: &str,
    quiet: bool,
    render: Option<Render>,
) -> anyhow::Result<Option<Metrics>> {
    if a.metrics.is_none() {
        if let Some(l) = a.metrics_linger {
            return Err(usage(format!(
                "--metrics-linger {} s keeps the --metrics endpoint up after the summary: give \
                 --metrics ADDR too",
                l.as_secs_f64()
            )));
        }
    }
    if let Some(f) = &a.metrics_textfile {
        let refuse = |why: &str| usage(format!("--metrics-textfile {}: {why}", f.display()));
        if f.as_os_str().as_encoded_bytes().ends_with(b"/") {
            return Err(refuse(
                "a folder (ends in /): name the file, e.g. DIR/linerate.prom",
            ));
        }
        if std::fs::metadata(f).is_ok_and(|m| m.is_dir()) {
            return Err(refuse(
                "is a folder: name a file in it, e.g. DIR/linerate.prom",
            ));
        }
        // Checked before any output: a temporary file of its own can be made beside FILE
        // (then removed), as at the end.
        create_tmp_beside(f)
            .and_then(|(_, tmp)| std::fs::remove_file(&tmp))
            .map_err(|e| {
                usage(format!(
                    "--metrics-textfile {}: cannot write a file in its folder: {e}",
                    f.display()
                ))
            })?;
    }
    if a.metrics.is_none() && a.metrics_textfile.is_none() {
        return Ok(None);
    }
    let fixed: Arc<Mutex<Option<Arc<String>>>> = Arc::new(Mutex::new(None));
    let (f, t) = (fixed.clone(), tool.to_string());
    let text: Arc<dyn Fn() -> String + Send + Sync> = Arc::new(move || {
        // The lock is held only to copy a pointer.
        let text = f.lock().ok().and_then(|s| s.clone());
        match (text, &render) {
            (Some(s), _) => String::clone(&s),
            (None, Some(r)) => {
                let mut e = Exposition::new(&t);
                r(&mut e);
                e.render()
            }
            (None, None) => Exposition::new(&t).render(),
        }
    });
    let endpoint = match &a.metrics {
        None => None,
        Some(addr) => {
            let t = text.clone();
            let endpoint =
                serve(addr, move || t()).map_err(|e| usage(format!("--metrics {addr}: {e}")))?;
            if let Some(note) = auth_note(&endpoint.addr()) {
                eprintln!("linerate: {note}");
            }
            if !quiet {
                eprintln!("Metrics on http://{}/metrics", endpoint.addr());
            }
            Some(endpoint)
        }
    };
    let addr = endpoint.as_ref().map(|e| e.addr());
    if let Ok(mut e) = END.lock() {
        *e = Some(End {
            endpoint,
            text,
            linger: a.metrics_linger.unwrap_or(DEFAULT_LINGER),
            textfile: a.metrics_textfile.clone(),
            quiet,
            explicit: a.metrics_linger.is_some(),
        });
    }
    Ok(Some(Metrics {
        addr,
        fixed,
        tool: tool.to_string(),
    }))
}

/// The `--metrics` endpoint (and `--metrics-textfile`) of one tool; the endpoint itself lives
/// until [`finish`].
pub struct Metrics {
    addr: Option<std::net::SocketAddr>,
    fixed: Arc<Mutex<Option<Arc<String>>>>,
    tool: String,
}

impl Metrics {
    /// An empty exposition naming this tool, to fill and [`Metrics::publish`].
    pub fn exposition(&self) -> Exposition {
        Exposition::new(&self.tool)
    }

    /// Serves `e` from now on.
    pub fn publish(&self, e: &Exposition) {
        let text = Arc::new(e.render());
        if let Ok(mut s) = self.fixed.lock() {
            *s = Some(text);
        }
    }

    /// The address it listens on (None: `--metrics-textfile` only).
    pub fn addr(&self) -> Option<std::net::SocketAddr> {
        self.addr
    }
}

//! `linerate record`: a long-running recorder (Stenographer's stenotype, n2disk): one writer
//! thread per input queue, rotating capture files with a per-file index, the oldest files
//! deleted to keep a disk budget.

use crate::common::{flags, metrics, port_error, stop_flag, usage};
use anyhow::Context;
use clap::Parser;
use linerate::apps::record::{RecordOptions, Shared, Writer, WriterCounters};
use linerate::port::pcap::WriteFormat;
use linerate::port::{Port, PortOptions, Uri};
use linerate::stats::group;
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Flags of `linerate record`.
#[derive(Parser, Debug)]
pub struct Args {
    /// Input ports, each read by its own writer thread: afpacket:IFACE (with --threads N, N
    /// writers in a PACKET_FANOUT group), xdp:IFACE[@QUEUES] (a writer per queue), pcap:FILE,
    /// mem:NAME; a,b for several.
    #[arg(short = 'i', long = "in", value_name = "PORT[,PORT...]")]
    input: String,
    /// Directory of the capture files and their indexes (created 0750 if missing).
    #[arg(value_name = "DIR")]
    dir: PathBuf,
    /// Writer threads on an afpacket: input (a PACKET_FANOUT group hashing flows to them).
    #[arg(short = 'T', long, value_name = "N", value_parser = flags::int(1usize, 64))]
    threads: Option<usize>,
    /// Close a file before it exceeds this size and start the next (as tcpdump's -C: a bare
    /// number is millions of bytes; units 500kB, 100MB, 1GiB, 1TB, 1TiB). At least 64 KiB.
    #[arg(long, value_name = "SIZE", default_value = "1GiB", value_parser = crate::common::output::file_size)]
    file_size: u64,
    /// Close a file once SECONDS have passed since its first packet, by the packets' capture
    /// time, and start the next (tcpdump's -G; 1 to 31536000). An idle writer closes its file
    /// when the window ends; the next file, and window, starts with the next packet (no file
    /// without packets). With --file-size, whichever comes first (a file cut by size keeps
    /// its window, as tcpdump -C -G).
    #[arg(short = 'G', long = "rotate-seconds", value_name = "SECONDS", value_parser = flags::count(1, 31_536_000))]
    rotate_seconds: Option<u64>,
    /// Most bytes of capture files and indexes kept in DIR: the oldest files (of every writer)
    /// are deleted first. At least --file-size per writer. Units as --file-size: 500GB, 2TB,
    /// 1.5TiB.
    #[arg(long, value_name = "SIZE", value_parser = crate::common::output::file_size)]
    budget: Option<u64>,
    /// Least share of DIR's file system kept free (percent, above 0 and at most 99): the oldest
    /// files are deleted first.
    #[arg(long, value_name = "PCT", value_parser = flags::real(0.0, 99.0, true))]
    keep_free: Option<f64>,
    /// File format: pcap (nanosecond timestamps) or pcapng.
    #[arg(long, value_name = "pcap|pcapng", default_value = "pcap")]
    format: WriteFormat,
    /// Stop after COUNT packets written (all writers together); units allowed: 10k, 1M.
    #[arg(short = 'c', long, value_name = "COUNT", value_parser = flags::count(1, flags::MAX_PACKETS))]
    count: Option<u64>,
    /// Stop after this long (seconds, or with a unit: 500ms, 2m, 1h).
    #[arg(short = 't', long, value_name = "SECONDS", value_parser = flags::duration(flags::RUN))]
    duration: Option<Duration>,
    /// Bytes kept of each packet (snap length, 64 to 262144).
    #[arg(short = 's', long, value_name = "BYTES", default_value = "262144", value_parser = flags::size(64, 262_144))]
    snaplen: u64,
    /// Write through the page cache instead of O_DIRECT (O_DIRECT is used where the file
    /// system takes it: measured ~3x the rate and ~1/6 of the CPU here).
    #[arg(long)]
    buffered: bool,
    /// Seconds between the open files' syncs: their data and index reach the disk, so queries
    /// see recent packets.
    #[arg(long, value_name = "SECONDS", default_value = "2", value_parser = flags::duration(flags::INTERVAL))]
    sync_every: Duration,
    /// Print statistics as JSON lines instead of text.
    #[arg(long)]
    json: bool,
    /// Print only the final summary.
    #[arg(short = 'q', long)]
    quiet: bool,
    /// Seconds between statistics lines.
    #[arg(long, value_name = "SECONDS", default_value = "1", value_parser = flags::duration(flags::INTERVAL))]
    interval: Duration,
    /// Also answer queries over HTTP on ADDR (host:port), as `linerate query --serve` does
    /// (stenoread's way): GET /query?filter=BPF&from=TIME&to=TIME, or POST /query with the
    /// filter as the body; a pcap stream back. Read-only; loopback only unless --serve-any.
    #[arg(long, value_name = "ADDR")]
    serve: Option<String>,
    /// Let --serve listen on an address that is not loopback.
    #[arg(long, requires = "serve")]
    serve_any: bool,
    #[command(flatten)]
    metrics: metrics::MetricsArgs,
}

/// The listener of --serve: the address checked (loopback unless --serve-any) and bound before
/// anything is recorded.
fn serve_listener(a: &Args) -> anyhow::Result<Option<std::net::TcpListener>> {
    use std::net::ToSocketAddrs;
    let Some(addr) = &a.serve else {
        return Ok(None);
    };
    let sa = addr
        .to_socket_addrs()
        .map_err(|e| {
            usage(format!(
                "--serve {addr}: {e} (write host:port, 127.0.0.1:8080)"
            ))
        })?
        .next()
        .ok_or_else(|| usage(format!("--serve {addr}: no address")))?;
    linerate::apps::query::serve::check_addr(&sa, a.serve_any)
        .map_err(|e| usage(format!("--serve: {e}")))?;
    let l = std::net::TcpListener::bind(sa).with_context(|| format!("--serve {sa}"))?;
    if !a.quiet && !a.json {
        let at = l
            .local_addr()
            .map_or_else(|_| sa.to_string(), |x| x.to_string());
        eprintln!("record: serving queries on http://{at}/query");
    }
    Ok(Some(l))
}

/// Smallest --file-size.
const MIN_FILE: u64 = 64 << 10;

/// The ports of -i, one per writer.
fn open_ports(a: &Args) -> anyhow::Result<Vec<Box<dyn Port>>> {
    let opts = PortOptions {
        snaplen: a.snaplen as u32,
        rx_wait_ms: 100,
        direction: linerate::port::Capture::InOut,
        ..Default::default()
    };
    let uri = Uri::parse(&a.input).map_err(|e| usage(format!("-i: {e}")))?;
    let threads = a.threads.unwrap_or(1);
    let mut out: Vec<Box<dyn Port>> = Vec::new();
    for part in uri.members() {
        match part {
            Uri::AfPacket(iface) if threads > 1 => {
                let pid = std::process::id();
                let fo = PortOptions {
                    fanout_group: Some(((pid ^ (pid >> 16)) as u16) | 1),
                    ..opts.clone()
                };
                for _ in 0..threads {
                    let p = linerate::port::afpacket::AfPacket::open(iface, &fo)
                        .map_err(|e| port_error("-i", &a.input, e))?;
                    out.push(Box::new(p));
                }
            }
            one => {
                let ps = linerate::open_uri_parts(one, &opts, linerate::port::Direction::Rx)
                    .map_err(|e| port_error("-i", &a.input, e))?;
                out.extend(ps);
            }
        }
    }
    Ok(out)
}

/// Refuses what cannot apply, before anything is touched.
fn check(a: &Args) -> anyhow::Result<()> {
    if a.file_size < MIN_FILE {
        return Err(usage(format!(
            "--file-size {}: at least {MIN_FILE} bytes (64KiB)",
            a.file_size
        )));
    }
    if a.threads.is_some_and(|t| t > 1) && !a.input.starts_with("afpacket:") {
        return Err(usage(
            "--threads: only for an afpacket: input (a fanout group); xdp: gets a writer per \
             queue, a,b a writer per port",
        ));
    }
    if let Some(b) = a.budget {
        let writers = a.threads.unwrap_or(1).max(a.input.split(',').count()) as u64;
        if b < a.file_size.saturating_mul(writers) {
            return Err(usage(format!(
                "--budget {b}: smaller than --file-size {} × {writers} writer(s): raise it or \
                 lower --file-size",
                a.file_size
            )));
        }
    }
    match std::fs::symlink_metadata(&a.dir) {
        Ok(m) if m.file_type().is_symlink() => Err(usage(format!(
            "{}: a symbolic link; give the directory it points to",
            a.dir.display()
        ))),
        Ok(m) if !m.is_dir() => Err(usage(format!("{}: not a directory", a.dir.display()))),
        _ => Ok(()),
    }
}

/// Creates DIR if missing and takes its lock: a second recorder on it is refused.
fn lock_dir(dir: &Path) -> anyhow::Result<std::fs::File> {
    if !dir.exists() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o750)
            .create(dir)
            .with_context(|| format!("{}: cannot create the directory", dir.display()))?;
    }
    let path = dir.join(".lock");
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o640)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
        .with_context(|| format!("{}: cannot open the lock file", path.display()))?;
    match f.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let mut s = String::new();
            let _ = f.read_to_string(&mut s);
            let who = match s.trim().parse::<u32>() {
                Ok(pid) => format!("pid {pid}"),
                Err(_) => "another process".into(),
            };
            anyhow::bail!(
                "{}: another recorder ({who}) is writing there; stop it or choose another \
                 directory",
                dir.display()
            );
        }
        Err(std::fs::TryLockError::Error(e)) => {
            return Err(e).with_context(|| format!("{}: cannot lock", path.display()))
        }
    }
    f.set_len(0)?;
    writeln!(f, "{}", std::process::id())?;
    Ok(f)
}

/// Totals of every writer.
#[derive(Clone, Copy, Default)]
struct Totals {
    received: u64,
    written: u64,
    bytes: u64,
    kernel: u64,
    disk_full: u64,
    files: u64,
}

fn totals(cs: &[Arc<WriterCounters>]) -> Totals {
    let mut t = Totals::default();
    for c in cs {
        t.received += c.received.load(Ordering::Relaxed);
        t.written += c.written.load(Ordering::Relaxed);
        t.bytes += c.bytes.load(Ordering::Relaxed);
        t.kernel += c.dropped_kernel.load(Ordering::Relaxed);
        t.disk_full += c.dropped_disk_full.load(Ordering::Relaxed);
        t.files += c.files.load(Ordering::Relaxed);
    }
    t
}

fn json_of(kind: &str, t: &Totals, on_disk: u64, deleted: u64, secs: f64) -> String {
    serde_json::json!({
        "type": kind,
        "elapsed_s": secs,
        "received": t.received,
        "written": t.written,
        "bytes_written": t.bytes,
        "dropped": { "kernel": t.kernel, "disk_full": t.disk_full },
        "files": t.files,
        "files_deleted": deleted,
        "bytes_on_disk": on_disk,
    })
    .to_string()
}

fn text_of(t: &Totals, on_disk: u64, deleted: u64) -> String {
    format!(
        "received {} written {} ({} bytes) dropped kernel {} disk_full {} files {} (deleted {}) \
         on disk {} bytes",
        group(t.received),
        group(t.written),
        group(t.bytes),
        group(t.kernel),
        group(t.disk_full),
        group(t.files),
        group(deleted),
        group(on_disk)
    )
}

fn publish(m: &metrics::Metrics, t: &Totals, on_disk: u64, deleted: u64) {
    let mut e = m.exposition();
    e.counter(
        "linerate_record_received_packets_total",
        "Packets read from the inputs",
        &[],
        t.received,
    );
    e.counter(
        "linerate_record_written_packets_total",
        "Packets written to capture files",
        &[],
        t.written,
    );
    e.counter(
        "linerate_record_written_bytes_total",
        "Bytes of records written",
        &[],
        t.bytes,
    );
    e.counter(
        "linerate_record_dropped_packets_total",
        "Packets dropped, by reason",
        &[("reason", "kernel")],
        t.kernel,
    );
    e.counter(
        "linerate_record_dropped_packets_total",
        "Packets dropped, by reason",
        &[("reason", "disk_full")],
        t.disk_full,
    );
    e.counter(
        "linerate_record_files_total",
        "Capture files opened",
        &[],
        t.files,
    );
    e.counter(
        "linerate_record_files_deleted_total",
        "Capture files deleted by the disk policy",
        &[],
        deleted,
    );
    e.gauge(
        "linerate_record_bytes_on_disk",
        "Bytes of closed capture files and indexes in the directory",
        &[],
        on_disk as f64,
    );
    m.publish(&e);
}

/// The writer threads.
struct Running {
    counters: Vec<Arc<WriterCounters>>,
    handles: Vec<std::thread::JoinHandle<Result<(), String>>>,
    /// Writers that ended.
    done: Arc<AtomicUsize>,
}

/// Starts a writer thread per port.
fn spawn_writers(
    ports: Vec<Box<dyn Port>>,
    shared: &Arc<Shared>,
    stop: &Arc<AtomicBool>,
) -> anyhow::Result<Running> {
    let n = ports.len();
    let mut r = Running {
        counters: Vec::new(),
        handles: Vec::new(),
        done: Arc::new(AtomicUsize::new(0)),
    };
    // The watching thread (this one) sleeps until its next tick; a writer that ends wakes it.
    let watcher = std::thread::current();
    for (i, mut port) in ports.into_iter().enumerate() {
        let mut w = Writer::new(i, n, shared.clone(), port.link_type(), port.name());
        r.counters.push(w.counters());
        let stop = stop.clone();
        let done = r.done.clone();
        let watcher = watcher.clone();
        let h = std::thread::Builder::new()
            .name(format!("record-w{i}"))
            .spawn(move || {
                let res = w.run(port.as_mut(), &stop);
                done.fetch_add(1, Ordering::SeqCst);
                watcher.unpark();
                res.map_err(|e| format!("{}: {e}", port.name()))
            })?;
        r.handles.push(h);
    }
    Ok(r)
}

/// Longest sleep (ms) of the thread that prints statistics and notes.
const WATCH_MS: u64 = 100;

/// Prints statistics and notes until the writers end or the run is stopped; how it ended.
fn watch(
    a: &Args,
    shared: &Shared,
    run: &Running,
    metrics: Option<&metrics::Metrics>,
    stop: &AtomicBool,
    out: &mut dyn Write,
    t0: Instant,
) -> &'static str {
    let mut next = t0 + a.interval;
    loop {
        // Awake at most every WATCH_MS (a stop signal is seen that late at worst), at the next
        // statistics line and at the end of -t; at once when a writer ends. Each wake-up is
        // the recorder's CPU too: few of them (50 a second cost it 2-5 % at 350 kpps).
        let now = Instant::now();
        let mut wake = now + Duration::from_millis(WATCH_MS);
        wake = wake.min(next.max(now));
        if let Some(d) = a.duration {
            wake = wake.min((t0 + d).max(now));
        }
        std::thread::park_timeout(wake.saturating_duration_since(now));
        for line in shared.take_notes() {
            eprintln!("record: {line}");
        }
        if run.done.load(Ordering::SeqCst) == run.handles.len() {
            return "end of input";
        }
        if stop.load(Ordering::Relaxed) {
            return "interrupted";
        }
        if a.duration.is_some_and(|d| t0.elapsed() >= d) {
            stop.store(true, Ordering::Relaxed);
            return "duration";
        }
        if Instant::now() >= next {
            next += a.interval;
            let t = totals(&run.counters);
            let (disk, del) = (
                shared.bytes_on_disk(),
                shared.deleted.load(Ordering::Relaxed),
            );
            if let Some(m) = metrics {
                publish(m, &t, disk, del);
            }
            if !a.quiet {
                let line = if a.json {
                    json_of("tick", &t, disk, del, t0.elapsed().as_secs_f64())
                } else {
                    text_of(&t, disk, del)
                };
                let _ = writeln!(out, "{line}");
            }
        }
    }
}

/// Runs `linerate record`.
pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    check(&a)?;
    let listener = serve_listener(&a)?;
    let stop = stop_flag()?;
    let ports = open_ports(&a)?;
    if ports.is_empty() {
        return Err(usage("-i: no input"));
    }
    let _lock = lock_dir(&a.dir)?;
    if let Some(l) = listener {
        let dir = a.dir.clone();
        let stop = stop.clone();
        std::thread::Builder::new()
            .name("record-serve".into())
            .spawn(move || {
                if let Err(e) = linerate::apps::query::serve::serve(&dir, l, &stop) {
                    eprintln!("record: --serve: {e}");
                }
            })
            .context("--serve: cannot start its thread")?;
    }
    let opts = RecordOptions {
        dir: a.dir.clone(),
        file_size: a.file_size,
        format: a.format,
        snaplen: a.snaplen as u32,
        direct: !a.buffered,
        sync_every: a.sync_every,
        budget: a.budget,
        keep_free: a.keep_free,
        count: a.count,
        rotate_secs: a.rotate_seconds,
    };
    let shared = Shared::new(opts).with_context(|| format!("{}: cannot list", a.dir.display()))?;
    for line in shared.repair() {
        eprintln!("record: {line}");
    }
    shared.enforce(ports.len() as u64);
    let metrics = metrics::start(&a.metrics, "record", a.quiet)?;
    let mut out = std::io::stdout();
    if !a.quiet && !a.json {
        let _ = writeln!(
            out,
            "Recording {} into {} ({} writer(s), {} files of at most {} bytes{}{})",
            a.input,
            a.dir.display(),
            ports.len(),
            a.format.name(),
            group(a.file_size),
            a.rotate_seconds
                .map(|g| format!(" or {g} s"))
                .unwrap_or_default(),
            a.budget
                .map(|b| format!(", budget {} bytes", group(b)))
                .unwrap_or_default()
        );
    }
    let run = spawn_writers(ports, &shared, &stop)?;
    let t0 = Instant::now();
    let mut ended = watch(&a, &shared, &run, metrics.as_ref(), &stop, &mut out, t0);
    // Every writer seals its file on a whole record and writes its index.
    stop.store(true, Ordering::Relaxed);
    let Running {
        counters, handles, ..
    } = run;
    let mut errors = Vec::new();
    for h in handles {
        match h.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => errors.push(e),
            Err(_) => errors.push("a writer thread panicked".into()),
        }
    }
    for line in shared.take_notes() {
        eprintln!("record: {line}");
    }
    let t = totals(&counters);
    if a.count.is_some_and(|c| t.written >= c) {
        ended = "count";
    }
    let (disk, del) = (
        shared.bytes_on_disk(),
        shared.deleted.load(Ordering::Relaxed),
    );
    if let Some(m) = &metrics {
        publish(m, &t, disk, del);
    }
    if a.json {
        let _ = writeln!(
            out,
            "{}",
            json_of("summary", &t, disk, del, t0.elapsed().as_secs_f64())
        );
    } else {
        let _ = writeln!(out, "Summary ({ended}): {}", text_of(&t, disk, del));
    }
    let _ = out.flush();
    if let Some(e) = errors.first() {
        anyhow::bail!("{e}");
    }
    Ok(ExitCode::SUCCESS)
}

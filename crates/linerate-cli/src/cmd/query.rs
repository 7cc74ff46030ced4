//! `linerate query DIR [BPF] -w OUT`: the packets of a directory of captures that a filter
//! matches, between two times, in time order (the library's `apps::query`); `--serve ADDR`
//! answers the same queries over HTTP, stenoread's way.

use crate::common::usage;
use anyhow::Context;
use linerate::apps::query::{self, serve, Options, Query, QueryError, Stats};
use linerate::port::file::{Inputs, RecordFile};
use linerate::port::pcap::{WriteFormat, WRITE_BUF};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::ExitCode;

/// Flags of `linerate query`.
#[derive(clap::Args)]
#[command(
    after_help = "Examples:\n  linerate query /var/lib/linerate host 10.0.0.1 and port 53 \
                        --from -1h -w out.pcap\n  linerate query DIR 'vlan and tcp' --from \
                        2026-11-27T16:00:00Z --to 2026-11-27T16:05:00Z -w - | tcpdump -r -\n  \
                        linerate query --serve 127.0.0.1:8080 DIR   (then: curl -s \
                        'http://127.0.0.1:8080/query?filter=udp&from=-10m' | tcpdump -r -)"
)]
pub struct Args {
    /// The directory of captures (what `linerate record` writes): every regular *.pcap and
    /// *.pcapng file in it; links and other files are passed over. Nothing in it is written
    /// (unless --reindex).
    #[arg(value_name = "DIR")]
    dir: PathBuf,
    /// The filter, libpcap syntax, as tcpdump takes it (the words are joined with spaces); none:
    /// every packet. The answer is tcpdump -r's over every file with this filter.
    #[arg(value_name = "BPF")]
    expr: Vec<String>,
    /// The filter as one argument (instead of the trailing words).
    #[arg(short = 'f', long, value_name = "BPF", conflicts_with = "expr")]
    filter: Option<String>,
    /// Packets at or after this time (inclusive): RFC 3339 (2026-11-27T16:00:00Z, with an
    /// offset or a fraction), epoch seconds (1764259200, 1764259200.5), or before now (-90s,
    /// -30m, -1h, -2d).
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    from: Option<String>,
    /// Packets before this time (exclusive); the same forms as --from.
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    to: Option<String>,
    /// Write the packets to this file (- for standard output): pcapng when the name ends in
    /// .pcapng, else classic pcap (microsecond timestamps, as tcpdump -w writes).
    #[arg(
        short = 'w',
        long,
        value_name = "OUT.pcap",
        required_unless_present = "serve"
    )]
    write: Option<String>,
    /// Format of -w whatever its name: pcap or pcapng.
    #[arg(long, value_name = "pcap|pcapng")]
    format: Option<WriteFormat>,
    /// Stop after COUNT packets (the first COUNT in time order).
    #[arg(short = 'c', long, value_name = "COUNT")]
    count: Option<u64>,
    /// Read every file whole, ignoring the indexes (the same answer, slower).
    #[arg(long)]
    no_index: bool,
    /// Index the files that have no index or a bad one, and save it beside the file (the only
    /// way query writes into DIR); without it such files are read whole and left as they are.
    #[arg(long, conflicts_with = "no_index")]
    reindex: bool,
    /// Print the counters as one JSON object (on standard error when -w - writes standard
    /// output, else on standard output) instead of the summary line.
    #[arg(long)]
    json: bool,
    /// Print nothing but errors (no summary, no notes).
    #[arg(short = 'q', long)]
    quiet: bool,
    /// Serve queries over HTTP on ADDR (host:port) instead: GET
    /// /query?filter=BPF&from=TIME&to=TIME&count=N, or POST /query with the filter as the body
    /// (stenoread's way); the answer is a pcap stream. Read-only; loopback addresses only
    /// unless --serve-any.
    #[arg(long, value_name = "ADDR", conflicts_with_all = ["write", "expr", "filter", "from", "to", "count", "format", "json", "reindex"])]
    serve: Option<String>,
    /// Let --serve listen on a non-loopback address (anyone who can connect reads every packet).
    #[arg(long, requires = "serve")]
    serve_any: bool,
}

/// Runs `linerate query`.
pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    if let Some(addr) = &a.serve {
        return run_serve(&a, addr);
    }
    let now = linerate::time::wall_ns();
    let time = |flag: &str, v: &Option<String>| -> anyhow::Result<Option<u64>> {
        v.as_deref()
            .map(|s| query::parse_time(s, now).map_err(|e| usage(format!("{flag} '{s}': {e}"))))
            .transpose()
    };
    let from = time("--from", &a.from)?;
    let to = time("--to", &a.to)?;
    if let (Some(f), Some(t)) = (from, to) {
        if f >= t {
            return Err(usage(
                "--from is not before --to: no packet can be in between (--from is inclusive, \
                 --to exclusive)",
            ));
        }
    }
    if a.count == Some(0) {
        return Err(usage("-c 0: count at least 1 packet"));
    }
    let path = a.write.clone().unwrap_or_else(|| "-".into());
    let format = a.format.unwrap_or_else(|| WriteFormat::for_path(&path));
    let filter = a.filter.clone().unwrap_or_else(|| a.expr.join(" "));
    let opts = Options {
        filter,
        from,
        to,
        count: a.count,
        format,
        no_index: a.no_index,
        reindex: a.reindex,
    };
    let mut q = match Query::prepare(&a.dir, opts) {
        Ok(q) => q,
        Err(e @ (QueryError::Filter(_) | QueryError::Dir { .. })) => {
            return Err(usage(e.to_string()))
        }
        Err(e) => return Err(e.into()),
    };
    // The captures are inputs: -w never names one of them.
    let mut inputs = Inputs::default();
    if let Ok(rd) = std::fs::read_dir(&a.dir) {
        for e in rd.flatten() {
            if let Some(p) = e.path().to_str() {
                inputs.add_path(p);
            }
        }
    }
    // An answer written into DIR under a capture's name is a capture of DIR for the next
    // query (every packet twice) and for the recorder's budget.
    if path != "-" && query::is_capture_name(&path) {
        use std::os::unix::fs::MetadataExt;
        let parent = std::path::Path::new(&path)
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(std::path::Path::new("."));
        if let (Ok(p), Ok(d)) = (std::fs::metadata(parent), std::fs::metadata(&a.dir)) {
            if (p.dev(), p.ino()) == (d.dev(), d.ino()) {
                return Err(usage(format!(
                    "-w {path}: in the directory queried, where the next query would read it \
                     as a capture (every packet twice): write it elsewhere"
                )));
            }
        }
    }
    let out = if path == "-" {
        RecordFile::stdout(WRITE_BUF)
    } else {
        let f =
            linerate::port::file::create(&path, &inputs).map_err(|e| usage(format!("-w: {e}")))?;
        RecordFile::new(f, WRITE_BUF)
    };
    // SIGINT, SIGTERM, SIGHUP stop the query as they stop a capture (tcpdump's habit): the
    // output ends on the last packet written, whole, and the summary says what was written.
    let stop = crate::common::stop_flag()?;
    let (st, mut out) = q
        .run_until(out, &stop)
        .with_context(|| format!("-w {path}"))?;
    use std::io::Write;
    out.flush().with_context(|| format!("-w {path}"))?;
    drop(out);
    report(&a, &st, path == "-");
    // A file that could not be read: the answer holds the others' packets, the file is named
    // above, and the run fails at its end (a runtime error, 1; grep -r's habit of answering
    // the rest first).
    Ok(if st.files_unreadable > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn report(a: &Args, st: &Stats, stdout_taken: bool) {
    // Errors are said even with -q.
    for e in &st.errors {
        eprintln!("linerate: error: {e}");
    }
    if !a.quiet {
        for n in &st.notes {
            eprintln!("linerate: {n}");
        }
        if st.interrupted {
            eprintln!("linerate: interrupted: the output ends on the last packet written, whole");
        }
    }
    if a.json {
        let line = serde_json::to_string(st).unwrap_or_default();
        if stdout_taken {
            eprintln!("{line}");
        } else {
            println!("{line}");
        }
        return;
    }
    if a.quiet {
        return;
    }
    let blocks = if st.files_indexed > 0 {
        format!(", {} of {} blocks", st.blocks_read, st.blocks_total)
    } else {
        String::new()
    };
    let unreadable = if st.files_unreadable > 0 {
        format!(", {} unreadable", st.files_unreadable)
    } else {
        String::new()
    };
    eprintln!(
        "{} packets matched of {} tested; {} files ({} by index, {} read whole, {} \
         skipped{unreadable}){}; {} of {} bytes read; {:.3} s",
        st.packets_matched,
        st.packets_tested,
        st.files,
        st.files_indexed,
        st.files_scanned,
        st.files_skipped,
        blocks,
        st.bytes_read,
        st.bytes_total,
        st.elapsed_ns as f64 / 1e9
    );
}

fn run_serve(a: &Args, addr: &str) -> anyhow::Result<ExitCode> {
    use std::net::ToSocketAddrs;
    let addrs: Vec<_> = addr
        .to_socket_addrs()
        .map_err(|e| {
            usage(format!(
                "--serve {addr}: {e} (write host:port, 127.0.0.1:8080)"
            ))
        })?
        .collect();
    let Some(sa) = addrs.first() else {
        return Err(usage(format!("--serve {addr}: no address")));
    };
    serve::check_addr(sa, a.serve_any).map_err(|e| usage(format!("--serve: {e}")))?;
    if !a.dir.is_dir() {
        return Err(usage(format!("{}: not a directory", a.dir.display())));
    }
    let l = TcpListener::bind(sa).with_context(|| format!("--serve {sa}"))?;
    if !a.quiet {
        let at = l
            .local_addr()
            .map_or_else(|_| sa.to_string(), |x| x.to_string());
        eprintln!(
            "serving queries over {} on http://{at}/query",
            a.dir.display()
        );
    }
    // SIGINT, SIGTERM, SIGHUP... stop the server (as they stop every tool: also when the shell
    // that started it in the background had SIGINT ignored); the accepting thread waits for a
    // connection, so the main thread watches the flag and ends the process.
    let stop = crate::common::stop_flag()?;
    let (dir, st) = (a.dir.clone(), stop.clone());
    let server = std::thread::Builder::new()
        .name("serve".into())
        .spawn(move || serve::serve(&dir, l, &st))?;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) && !server.is_finished() {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    if server.is_finished() {
        match server.join() {
            Ok(r) => r.context("--serve")?,
            Err(_) => anyhow::bail!("--serve: the server thread panicked"),
        }
    }
    Ok(ExitCode::SUCCESS)
}

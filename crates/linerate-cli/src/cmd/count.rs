//! `linerate count`: pfcount / zcount.

use crate::common::{flags, inputs_of, metrics, pin, stop_flag, usage};
use crate::console::{Counted, ReadOnly};
use anyhow::Context;
use clap::Parser;
use linerate::apps::count::{self, CountOptions, Ended};
use linerate::apps::gen::latency::Tracker;
use linerate::filter::Filter;
use linerate::port::pcap::rotate::WriteOptions;
use linerate::port::pcap::{PcapPort, WriteFormat};
use linerate::port::{InterfaceStats, Port, PortError, PortOptions};
use linerate::stats::prom::{Dir, PortCount};
use linerate::stats::{self, group};
use linerate::time::{Clock, TscClock};
use linerate::wire::print::{Printer, TimeFormat};
use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// Flags of `linerate count`.
#[derive(Parser, Debug)]
pub struct Args {
    /// Input port: afpacket:IFACE (afpacket:any, or any: every interface, as Linux cooked
    /// v2), xdp:IFACE[@QUEUES] (AF_XDP), cluster:ID@Q (a queue of `linerate balance`),
    /// pcap:FILE (or a path, - for stdin), mem:NAME, or a,b to aggregate several.
    #[arg(
        short = 'i',
        long = "in",
        value_name = "PORT",
        required_unless_present = "list_interfaces",
        default_value = ""
    )]
    input: String,
    /// Stop after COUNT packets (after filtering); units allowed: 10k, 1M.
    #[arg(short = 'c', long, value_name = "COUNT", value_parser = flags::count(1, flags::MAX_PACKETS))]
    count: Option<u64>,
    /// Stop after this long (seconds, or with a unit: 500ms, 2m).
    #[arg(short = 't', long, value_name = "SECONDS", value_parser = flags::duration(flags::RUN))]
    duration: Option<std::time::Duration>,
    /// Write counted packets to a capture file (- for standard output): pcapng when the name
    /// ends in .pcapng (each packet with its input interface, and each interface's counts and
    /// drops at the end), else classic pcap.
    #[arg(short = 'w', long, value_name = "OUT.pcap")]
    write: Option<String>,
    /// Format of -w whatever its name: pcap or pcapng (for -w -, say).
    #[arg(long, value_name = "pcap|pcapng", requires = "write")]
    format: Option<WriteFormat>,
    /// BPF filter in libpcap syntax (in the kernel for afpacket, in user space otherwise, or
    /// when the kernel refuses the program, e.g. protochain). len/less/greater test the length
    /// on the wire, as in libpcap.
    #[arg(short = 'f', long, value_name = "BPF")]
    filter: Option<String>,
    /// Run the filter in user space even where the kernel could (packets the kernel filters out
    /// are never seen, so only a user-space filter can count them).
    #[arg(long)]
    user_filter: bool,
    /// Pin the receive loop to this core.
    #[arg(short = 'g', long, value_name = "CORE", value_parser = flags::int(0, flags::MAX_CORE))]
    core: Option<usize>,
    /// Print statistics as JSON lines instead of text.
    #[arg(long)]
    json: bool,
    /// Print only the final summary.
    #[arg(short = 'q', long)]
    quiet: bool,
    /// Seconds between statistics lines.
    #[arg(long, value_name = "SECONDS", default_value = "1", value_parser = flags::duration(flags::INTERVAL))]
    interval: std::time::Duration,
    /// Track latency probes of `linerate gen`: per stream loss, duplicates, reordering and
    /// one-way latency (sender and receiver on one machine).
    #[arg(long)]
    latency: bool,
    /// With --latency: write the latency histogram as CSV here, and an SVG plot beside it.
    #[arg(long, value_name = "FILE.csv", requires = "latency")]
    hist_out: Option<String>,
    /// Bytes to keep of each packet (snap length, 64 to 262144), on capture ports and in the -w
    /// file. Default: 65535 on capture ports; a file's records and -w keep every byte (up to
    /// 256 KiB).
    #[arg(short = 's', long, value_name = "BYTES", value_parser = flags::size(64, 262_144))]
    snaplen: Option<u64>,
    #[command(flatten)]
    metrics: metrics::MetricsArgs,
    /// Receive threads (as PF_RING's pfcount_multichannel): each owns some of the input's
    /// queues and reads them itself, with no dispatcher (thread t takes queues t, t+N, ...);
    /// interval lines and the summary give each thread's counts and their total. Default: one
    /// thread per queue of xdp:IFACE, one thread otherwise. With -w or --latency one thread
    /// reads every queue (one file, in the order packets are read).
    #[arg(short = 'T', long, value_name = "N", value_parser = flags::int(1usize, 1024))]
    threads: Option<usize>,
    /// Print statistics lines even on a terminal (no live page).
    #[arg(long)]
    no_console: bool,
    #[command(flatten)]
    out: crate::common::output::OutputFlags,
    #[command(flatten)]
    ring: crate::common::output::RingBuffer,
    #[command(flatten)]
    capture: crate::common::capture::CaptureFlags,
    #[command(flatten)]
    service: crate::common::service::ServiceFlags,
    /// List what can be captured and exit (tcpdump -D): interfaces as afpacket:IF and
    /// xdp:IF@QUEUES, afpacket:any, and the queues of running clusters as cluster:ID@Q.
    #[arg(short = 'D', long)]
    list_interfaces: bool,
    /// Print a line per packet counted (after the filter) as `tcpdump -n` prints it, on standard
    /// output (standard error when -w - holds it); the statistics then go to standard error.
    #[arg(short = 'v', long)]
    verbose: bool,
    /// Print the link-level header on each line (tcpdump's -e: MAC addresses, ethertype,
    /// length, 802.1Q tags); implies -v.
    #[arg(short = 'e', long = "link-header")]
    link_header: bool,
    /// Times of -v lines as seconds since the epoch (tcpdump's -tt), not local HH:MM:SS.
    #[arg(long = "tt")]
    epoch_time: bool,
}

/// How many threads read the input, and why not more when it says so.
struct Plan {
    /// Threads (1: the one loop that reads every queue).
    threads: usize,
    /// The plan in words, for the start line.
    words: Option<String>,
}

/// How many parts (queues, list members) `uri` names, without opening it (1 when it cannot
/// tell: opening it then says what is wrong).
fn parts_of(uri: &str) -> usize {
    match linerate::port::Uri::parse(uri) {
        Ok(linerate::port::Uri::List(l)) => l.len(),
        Ok(linerate::port::Uri::Xdp { iface, queues }) => {
            linerate::port::xdp::queue_count_of(&iface, queues).unwrap_or(1)
        }
        _ => 1,
    }
}

/// Batches of packets copied for the -v printer thread and not yet printed.
const PRINT_AHEAD: usize = 8;

/// Calls `f(ts, wire_len, bytes)` for each packet of a buffer the capture loop filled for the
/// printer thread (`ts` u64, `wire_len` u32, length u32, the bytes; little-endian).
fn each_packet(mut v: &[u8], mut f: impl FnMut(u64, u32, &[u8])) {
    while v.len() >= 16 {
        let ts = u64::from_le_bytes(v[..8].try_into().unwrap_or_default());
        let wire_len = u32::from_le_bytes(v[8..12].try_into().unwrap_or_default());
        let len = u32::from_le_bytes(v[12..16].try_into().unwrap_or_default()) as usize;
        let Some(data) = v.get(16..16 + len) else {
            return;
        };
        f(ts, wire_len, data);
        v = &v[16 + len..];
    }
}

/// Decides the threads of a run (see `--threads`).
fn plan(a: &Args) -> anyhow::Result<Plan> {
    if a.threads == Some(1) {
        return Ok(Plan {
            threads: 1,
            words: None,
        });
    }
    let parts = parts_of(&a.input);
    let asked = a
        .threads
        .unwrap_or(if a.input.contains(',') { 1 } else { parts });
    if asked <= 1 {
        return Ok(Plan {
            threads: 1,
            words: None,
        });
    }
    let one_writer = if a.write.is_some() {
        Some("-w writes one file in the order packets are read")
    } else if a.verbose || a.link_header {
        Some("-v prints packets in the order they are read")
    } else if a.latency {
        Some("--latency keeps one tracker")
    } else {
        None
    };
    if let Some(why) = one_writer {
        if a.threads.is_some() {
            return Err(usage(format!(
                "--threads {asked}: {why}, so one thread reads every queue; leave --threads out \
                 or drop {}",
                if a.write.is_some() {
                    "-w"
                } else if a.verbose || a.link_header {
                    "-v/-e"
                } else {
                    "--latency"
                }
            )));
        }
        return Ok(Plan {
            threads: 1,
            words: Some(format!("1 thread reads the {parts} queues: {why}")),
        });
    }
    if parts <= 1 {
        return Ok(Plan {
            threads: 1,
            words: Some(format!(
                "1 thread, not {asked}: {} is one queue (xdp:IFACE opens each of its queues, \
                 a,b each input)",
                a.input
            )),
        });
    }
    let n = asked.min(parts);
    let what = if a.input.contains(',') {
        "input"
    } else {
        "queue"
    };
    Ok(Plan {
        threads: n,
        words: Some(if n == parts {
            format!("{n} threads, one per {what}, no dispatcher")
        } else {
            format!(
                "{n} threads over {parts} {what}s (thread t reads {what}s t, t+{n}, ...), no \
                 dispatcher"
            )
        }),
    })
}

/// The metrics of a count: the input's receive counters since the start (what the summary
/// says).
fn publish(m: &metrics::Metrics, port: &str, start: &stats::Snapshot, now: &stats::Snapshot) {
    let mut e = m.exposition();
    let (port, dir, c) = counted(port, start, now);
    e.port(&port, dir, &c);
    m.publish(&e);
}

/// A port's receive counters between two snapshots (the metrics' and the live page's).
fn counted(port: &str, start: &stats::Snapshot, now: &stats::Snapshot) -> Counted {
    let c = PortCount {
        packets: now.pkts - start.pkts,
        bytes: now.bytes - start.bytes,
        drops: now.drops.since(&start.drops),
    };
    (port.to_string(), Dir::Rx, c)
}

/// The live page on a terminal, unless lines were asked for (or standard output carries -w -).
fn page(a: &Args, to_stdout: bool, stop: &Arc<AtomicBool>) -> anyhow::Result<Option<ReadOnly>> {
    if !crate::console::wanted(a.json || a.quiet || a.no_console || to_stdout) {
        return Ok(None);
    }
    Ok(Some(ReadOnly::start(
        format!("linerate count -i {}", a.input),
        stop.clone(),
    )?))
}

/// The page's rows of a threaded run: the input in all, and each thread's share (named by
/// the queues it reads).
fn thread_rows(
    input: &str,
    names: &[String],
    total: &count::Tick,
    per: &[count::Tick],
) -> (Vec<Counted>, Vec<(usize, Counted)>) {
    let threads = names
        .iter()
        .zip(per)
        .enumerate()
        .map(|(i, (n, t))| (i, counted(n, &t.start, &t.now)))
        .collect();
    (vec![counted(input, &total.start, &total.now)], threads)
}

/// Runs `linerate count`: checks the flags, opens the input and the outputs, counts, and
/// reports. Each step is a function below, in the order the run takes them.
pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    if a.list_interfaces {
        return crate::common::sources::list();
    }
    let service = a.service.check()?;
    let stop = stop_flag()?;
    // -w's flushing and rotation, checked before anything is opened.
    let wopts = a.out.options(
        &a.ring.ring_buffer,
        a.write.as_deref(),
        a.json,
        Some(stop.clone()),
    )?;
    a.capture.check_xdp(&[&a.input])?;
    let opts = capture_options(&a)?;
    let plan = plan(&a)?;
    if plan.threads > 1 {
        return run_threads(a, plan, &opts, &stop, service);
    }
    let mut src = open_source(&a, &opts, &stop)?;
    let inputs = inputs_of([a.input.as_str()]);
    // Created now, before outputs start and -Z drops privileges (tcpdump opens -w so).
    let hist_files = match &a.hist_out {
        Some(p) => Some(crate::shared::open_hist(p, &inputs)?),
        None => None,
    };
    let link = src.port.link_type();
    let rx_time = src.port.rx_time();
    let user_filter = input_filter(&a, src.port.as_mut(), link)?;
    metrics::refuse_textfile_as(
        &a.metrics,
        &[("-w", a.write.as_deref()), ("-i", Some(a.input.as_str()))],
    )?;
    let mut writer = open_writer(&a, src.port.as_ref(), &inputs, &wopts)?;
    pin(a.core)?;
    let metrics = metrics::start(&a.metrics, "count", a.quiet)?;
    // Every port and output is open: the pidfile, then -Z.
    let _running = service.start()?;
    if let Some(m) = &metrics {
        let mut e = m.exposition();
        e.port(&a.input, Dir::Rx, &PortCount::default());
        m.publish(&e);
    }
    let to_stdout = a.write.as_deref() == Some("-");
    let lines = a.verbose || a.link_header;
    let mut out = stats_output(to_stdout || lines);
    announce(&mut out, &a, link, &opts, &plan, user_filter.is_none());
    let copts = CountOptions {
        count: a.count,
        duration: a.duration.map(|d| d.saturating_sub(src.t_open.elapsed())),
        filter: user_filter,
        interval: a.interval,
        start: Some(std::mem::take(&mut src.opened)),
    };
    let mut tracker = a.latency.then(|| (Tracker::new(), TscClock::new()));
    let wall_start = linerate::time::wall_ns();
    let mut live = page(&a, to_stdout || lines, &stop)?;
    // Every flag is valid and the input open: the output is written from now on.
    linerate::port::file::start_writing();
    let mut printer = lines.then(|| spawn_printer(&a, link, to_stdout, &stop));
    let mut report = count::run_observed(
        src.port.as_mut(),
        writer.as_mut().map(|w| w as &mut dyn Port),
        &copts,
        &stop,
        |t| show_tick(&a, metrics.as_ref(), live.as_mut(), &mut out, t),
        |b| {
            if let Some((t, c)) = tracker.as_mut() {
                t.observe_as(b, link, rx_time, || c.now_ns());
            }
            hand_to_printer(printer.as_ref(), b);
        },
    );
    // Every line is out before the summary.
    if let Some((full, _, thread)) = printer.take() {
        drop(full);
        let _ = thread.join();
    }
    drop(live);
    let (written, limit, overwritten) = close_writer(&a, writer, &mut report, wall_start);
    let t = report.tick;
    if let Some(m) = &metrics {
        publish(m, &a.input, &t.start, &t.now);
    }
    let mut end = end_of(&a, &report, &src, written, limit);
    end.overwritten = overwritten;
    if a.json {
        let latency = tracker.as_ref().map(|(t, _)| (t, rx_time));
        summary_json(&mut out, &report, &end, latency)?;
    } else {
        summary_text(&mut out, &a, &report, &end);
    }
    if let Some((t, _)) = &tracker {
        report_latency(&mut out, &a, t, rx_time, hist_files)?;
    }
    let _ = out.flush();
    exit_code(report, &end)
}

/// What `-i` gave when it opened: the port, and the run's starting counters.
struct Source {
    port: Box<dyn Port>,
    /// Nothing came before -t or a signal ended the wait, not even a header.
    never_opened: bool,
    /// The input's counters when it opened (the run's start).
    opened: Vec<linerate::port::PortStats>,
    /// When the wait for the input began (-t counts from there).
    t_open: std::time::Instant,
}

/// The -v / -e printer thread: full buffers go to it, empty ones come back.
type PrintThread = (
    std::sync::mpsc::SyncSender<Vec<u8>>,
    std::sync::mpsc::Receiver<Vec<u8>>,
    std::thread::JoinHandle<()>,
);

/// How the run ended, in the summary's words.
struct End {
    ended: &'static str,
    /// Why a finished input ended, when it says more (a cluster's master stopped).
    note: Option<String>,
    /// Packets that reached -w whole (a pipe's reader may have left early).
    written: Option<u64>,
    /// Counted but not in the output: the reader of -w - left, or the output failed.
    not_written: Option<u64>,
    /// The output was a pipe whose reader left (`| head`).
    closed: bool,
    /// -G with -W wrote its last file (tcpdump's file limit): what was counted after it is
    /// not written, and that is no error.
    limit: bool,
    /// Of `written`, the packets in files a later file of the same name overwrote, and what
    /// did (`-G` with a name without a time field, `the -W ring`).
    overwritten: Option<(u64, &'static str)>,
}

/// The capture options of -i: a capture-only loop waits long in poll, the kernel wakes it
/// when packets are ready. Both directions by default on afpacket, as tcpdump captures.
fn capture_options(a: &Args) -> anyhow::Result<PortOptions> {
    a.capture.apply(
        "-i",
        &a.input,
        linerate::port::Capture::InOut,
        PortOptions {
            snaplen: a.snaplen.map_or(65_535, |s| s as u32),
            rx_wait_ms: 100,
            ..Default::default()
        },
    )
}

/// Opens -i. Standard input or a FIFO may give nothing for long, not even a header: -t and
/// a signal still end the run, with its summary.
fn open_source(a: &Args, opts: &PortOptions, stop: &Arc<AtomicBool>) -> anyhow::Result<Source> {
    let t_open = std::time::Instant::now();
    let (mut port, never_opened): (Box<dyn Port>, bool) =
        match crate::common::open_input_until("-i", &a.input, opts, stop, a.duration)? {
            Some(p) => (p, false),
            None => (Box::new(crate::common::Nothing(a.input.clone())), true),
        };
    // The run's counters start now that the input is open (as tcpdump's start at
    // pcap_activate): -w may wait (a FIFO blocks until its reader opens it) while the
    // input drops what it cannot hold, and those drops are this run's.
    let opened = port.interface_stats();
    Ok(Source {
        port,
        never_opened,
        opened,
        t_open,
    })
}

/// Compiles -f and attaches it to the input in the kernel when it can: the filter the loop
/// runs in user space, if any.
fn input_filter(
    a: &Args,
    input: &mut dyn Port,
    link: linerate::wire::LinkType,
) -> anyhow::Result<Option<Filter>> {
    let Some(expr) = &a.filter else {
        return Ok(None);
    };
    let f = Filter::compile(expr, link).map_err(|e| usage(format!("-f: {e}")))?;
    let in_kernel = !a.user_filter && crate::common::attach_filter(input, &f, &a.input)?;
    Ok((!in_kernel).then_some(f))
}

/// Creates -w, when given.
fn open_writer(
    a: &Args,
    input: &dyn Port,
    inputs: &linerate::port::file::Inputs,
    wopts: &WriteOptions,
) -> anyhow::Result<Option<PcapPort>> {
    let Some(path) = a.write.as_deref() else {
        return Ok(None);
    };
    let link = input.link_type();
    // -s cuts records (as tcpdump -s does). Else the header says what the input's said
    // (a copy of a file is byte for byte the file), or 262144 (libpcap's largest), and
    // every record is written whole, even one longer than that header says.
    let snaplen = a.snaplen.map_or(input.snaplen().unwrap_or(0), |s| s as u32);
    // A classic pcap file has one link type: inputs of several would be written as
    // junk under it (pcapng describes each interface with its own).
    let classic = a
        .format
        .unwrap_or_else(|| linerate::port::pcap::WriteFormat::for_path(path))
        == linerate::port::pcap::WriteFormat::Pcap;
    if let Some(other) = input.interfaces().iter().find(|i| i.link != link) {
        if classic {
            return Err(usage(format!(
                "-w {path}: a pcap file holds one link type and the inputs have \
                 several ({} is {}, {} is {}): write pcapng (--format pcapng or \
                 a .pcapng name)",
                a.input, link.0, other.name, other.link.0
            )));
        }
    }
    let mut w = PcapPort::create_with_options(path, a.format, link, snaplen, inputs, wopts)
        .map_err(|e| usage(format!("-w: {e}")))?;
    if a.snaplen.is_none() {
        w.keep_whole();
    }
    w.describe(&input.interfaces())
        .with_context(|| format!("-w {path}"))?;
    Ok(Some(w))
}

/// Where the statistics go: standard output, or standard error when standard output
/// carries the pcap stream or the -v lines.
fn stats_output(stdout_taken: bool) -> Box<dyn Write> {
    if stdout_taken {
        Box::new(std::io::stderr())
    } else {
        Box::new(std::io::stdout())
    }
}

/// The start line (or JSON record) and the threads plan.
fn announce(
    out: &mut dyn Write,
    a: &Args,
    link: linerate::wire::LinkType,
    opts: &PortOptions,
    plan: &Plan,
    no_user_filter: bool,
) {
    if a.json {
        let start = serde_json::json!({
            "type": "start",
            "port": a.input,
            "link_type": link.0,
            "filter": a.filter,
            "filter_in_kernel": a.filter.is_some() && no_user_filter,
            "direction": opts.direction.as_str(),
            "threads": 1,
            "plan": plan.words.as_deref().unwrap_or("1 thread"),
        });
        let _ = writeln!(out, "{start}");
    } else if !a.quiet {
        let _ = writeln!(out, "Capturing from {} (link type {})", a.input, link.0);
    }
    if let Some(w) = &plan.words {
        if !a.quiet && !a.json {
            let _ = writeln!(out, "Threads: {w}");
        }
    }
    let _ = out.flush();
}

/// The -v / -e lines are formatted and written on their own thread: the capture loop copies
/// each counted batch (time, length, bytes) into a buffer it gets back empty, and goes on.
/// A printer that falls behind makes the loop wait, as tcpdump's own printing does (a live
/// port then counts its kernel drops).
fn spawn_printer(
    a: &Args,
    link: linerate::wire::LinkType,
    to_stdout: bool,
    stop: &Arc<AtomicBool>,
) -> PrintThread {
    let time = if a.epoch_time {
        TimeFormat::Epoch
    } else {
        TimeFormat::Local
    };
    let mut p = Printer::new(link, a.link_header, time);
    let (full_tx, full_rx) = std::sync::mpsc::sync_channel::<Vec<u8>>(PRINT_AHEAD);
    let (empty_tx, empty_rx) = std::sync::mpsc::channel::<Vec<u8>>();
    for _ in 0..PRINT_AHEAD {
        let _ = empty_tx.send(Vec::with_capacity(64 * 1024));
    }
    let stop = stop.clone();
    let thread = std::thread::spawn(move || {
        let mut out = stats_output(to_stdout);
        let mut text = String::with_capacity(64 * 128);
        let mut closed = false;
        for mut v in full_rx {
            if !closed {
                text.clear();
                each_packet(&v, |ts, wire_len, data| {
                    p.line(&mut text, data, wire_len, ts)
                });
                // A reader that left (| head) ends the run, as it ends tcpdump.
                if out.write_all(text.as_bytes()).is_err() || out.flush().is_err() {
                    closed = true;
                    stop.store(true, std::sync::atomic::Ordering::Relaxed);
                }
            }
            v.clear();
            let _ = empty_tx.send(v);
        }
    });
    (full_tx, empty_rx, thread)
}

/// Copies a counted batch into an empty buffer of the printer thread and hands it over.
fn hand_to_printer(printer: Option<&PrintThread>, b: &linerate::mem::Batch) {
    let Some((full, empty, _)) = printer else {
        return;
    };
    if let Ok(mut v) = empty.recv() {
        for (i, d) in b.descs().iter().enumerate() {
            let data = b.data(i);
            v.extend_from_slice(&d.ts.to_le_bytes());
            v.extend_from_slice(&d.wire_len.to_le_bytes());
            v.extend_from_slice(&(data.len() as u32).to_le_bytes());
            v.extend_from_slice(data);
        }
        let _ = full.send(v);
    }
}

/// Every interval: the metrics, and the live page or a statistics block (or JSON line).
fn show_tick(
    a: &Args,
    metrics: Option<&metrics::Metrics>,
    live: Option<&mut ReadOnly>,
    out: &mut dyn Write,
    t: &count::Tick,
) {
    if let Some(m) = metrics {
        publish(m, &a.input, &t.start, &t.now);
    }
    if let Some(p) = live {
        let rows = [counted(&a.input, &t.start, &t.now)];
        p.tick("capturing", t.now.t_ns, &rows);
        return;
    }
    if a.quiet {
        return;
    }
    let s = if a.json {
        stats::json_line("stats", &t.start, &t.prev, &t.now) + "\n"
    } else {
        stats::pfcount_block(&t.start, &t.prev, &t.now)
    };
    let _ = out.write_all(s.as_bytes());
    let _ = out.flush();
}

/// Closes -w (a pcapng file ends with each interface's figures): the packets written whole,
/// whether -W's file limit was reached and what of the written files was overwritten by a
/// later one of the same name. A failure to close is the run's output error.
fn close_writer(
    a: &Args,
    mut writer: Option<PcapPort>,
    report: &mut count::Report,
    wall_start: u64,
) -> (Option<u64>, bool, Option<(u64, &'static str)>) {
    if let Some(w) = writer.as_mut().filter(|_| report.output_error.is_none()) {
        // Each interface's figures, which add up to the summary, close a pcapng file.
        let (first, last) = &report.interfaces;
        // A capture file's interfaces span their packets' times, not the run's.
        let (t0, t1) = if linerate::port::Uri::parse(&a.input).is_ok_and(|u| u.is_file()) {
            (0, 0)
        } else {
            (wall_start, linerate::time::wall_ns())
        };
        let stats = InterfaceStats::of_run(first, last, &w.packets_by_interface(), t0, t1);
        if let Err(e) = w.finish(&stats) {
            report.output_error = Some(e);
        }
    }
    // What reached the output whole (a pipe's reader may have left early).
    let written = writer.as_ref().and_then(|w| w.packets_written());
    let limit = writer.as_ref().is_some_and(|w| w.file_limit_reached());
    let overwritten = writer.as_ref().and_then(|w| w.packets_overwritten());
    (written, limit, overwritten)
}

/// Why the run ended, in the summary's words.
fn end_of(
    a: &Args,
    report: &count::Report,
    src: &Source,
    written: Option<u64>,
    limit: bool,
) -> End {
    let closed = report.output_error.as_ref().is_some_and(|e| {
        matches!(e, PortError::Io { source, .. } if source.kind() == std::io::ErrorKind::BrokenPipe)
    });
    let ended = match report.ended {
        Ended::Error if closed => "output closed",
        Ended::Error if report.output_error.is_some() => "output error",
        Ended::Error => "input error",
        // -G with -W wrote its last file: tcpdump's file limit, not an interrupt.
        _ if limit => "file limit (-W)",
        e => e.text(),
    };
    let note = match report.ended {
        Ended::EndOfInput => src.port.end_note(),
        _ if src.never_opened => Some(format!("nothing came from {}, not even a header", a.input)),
        _ => None,
    };
    End {
        ended,
        note,
        written,
        not_written: written.map(|w| report.tick.now.pkts.saturating_sub(w)),
        closed,
        limit,
        overwritten: None,
    }
}

/// The summary as a JSON record.
fn summary_json(
    out: &mut dyn Write,
    report: &count::Report,
    end: &End,
    latency: Option<(&Tracker, linerate::port::RxTime)>,
) -> anyhow::Result<()> {
    let t = &report.tick;
    let mut j: serde_json::Value =
        serde_json::from_str(&stats::json_line("summary", &t.start, &t.start, &t.now))?;
    j["ended"] = end.ended.into();
    if let Some(n) = &end.note {
        j["input_ended"] = n.clone().into();
    }
    if let Some(e) = &report.error {
        j["error"] = e.to_string().into();
    }
    if let (Some(w), Some(n)) = (end.written, end.not_written) {
        let why_not = if end.closed {
            "output_closed"
        } else if end.limit && report.output_error.is_none() {
            "file_limit"
        } else {
            "output_error"
        };
        j["written"] = w.into();
        j["not_written"] = serde_json::json!({ why_not: n });
    }
    if let (Some(w), Some((o, by))) = (end.written, end.overwritten) {
        // What is on disk now beside what was written in all.
        j["written"] = w.into();
        j["on_disk"] = w.saturating_sub(o).into();
        j["overwritten"] = serde_json::json!({ "packets": o, "by": by });
    }
    if let Some(e) = &report.output_error {
        j["output_error"] = e.to_string().into();
    }
    if let Some((t, rx_time)) = latency {
        j["latency"] = crate::shared::latency_json(t, |_| None);
        j["latency_receive_time"] = rx_time.describe().into();
        j["no_probe"] = t.other.into();
    }
    let _ = writeln!(out, "{j}");
    Ok(())
}

/// The Summary line up to its end reason: packets, bytes, drops by reason and what the filter
/// rejected, from the start of the run (one thread's or all threads').
fn summary_line(t: &count::Tick, ended: &str) -> String {
    let r = stats::Rates::between(&t.start, &t.now);
    format!(
        "Summary: {} pkts, {} bytes, {} dropped ({}), {} rejected by filter; ended: {}",
        group(r.pkts),
        group(r.bytes),
        group(r.drops),
        if r.drops == 0 {
            "none".to_string()
        } else {
            stats::breakdown(&stats::losses(&t.start, &t.now))
        },
        group(
            t.now
                .drops
                .since(&t.start.drops)
                .get(linerate::port::DropReason::Filter)
        ),
        ended
    )
}

/// The summary as a statistics block and a Summary line (and what -w missed).
fn summary_text(out: &mut dyn Write, a: &Args, report: &count::Report, end: &End) {
    let t = &report.tick;
    let _ = out.write_all(stats::pfcount_block(&t.start, &t.start, &t.now).as_bytes());
    let note = end
        .note
        .as_ref()
        .map(|n| format!(" ({n})"))
        .unwrap_or_default();
    let _ = writeln!(out, "{}{note}", summary_line(t, end.ended));
    if let (Some(w), Some((o, by)), Some(path)) = (end.written, end.overwritten, &a.write) {
        let place = if by == "-G" && !path.contains('%') {
            format!("in {path}")
        } else {
            "in the files".to_string()
        };
        let _ = writeln!(
            out,
            "Written to {path}: {} pkts ({} {place} now; {} overwritten by {by})",
            group(w),
            group(w.saturating_sub(o)),
            group(o)
        );
    }
    if let (Some(w), Some(n), Some(path)) = (end.written, end.not_written, &a.write) {
        if n > 0 || report.output_error.is_some() {
            let _ = writeln!(
                out,
                "Written to {path}: {} pkts; not written: {} ({})",
                group(w),
                group(n),
                if end.closed {
                    "the pipe's reader left"
                } else if end.limit && report.output_error.is_none() {
                    "tcpdump's -W file limit ended the run"
                } else {
                    "output error"
                }
            );
        }
    }
}

/// --latency's table (in the text output) and --hist-out's files.
fn report_latency(
    out: &mut dyn Write,
    a: &Args,
    t: &Tracker,
    rx_time: linerate::port::RxTime,
    hist_files: Option<crate::shared::HistFiles>,
) -> anyhow::Result<()> {
    if !a.json {
        let _ = writeln!(
            out,
            "Latency probes ({} packets without one; receive time: {}):",
            group(t.other),
            rx_time.describe()
        );
        let _ = write!(out, "{}", t.table(|_| None));
    }
    if let (Some(p), Some(files)) = (&a.hist_out, hist_files) {
        let svg =
            crate::shared::write_hist_into(files, p, t, &format!("linerate count -i {}", a.input))?;
        if !a.json {
            let _ = writeln!(out, "Histogram: {p} and {svg}");
        }
    }
    Ok(())
}

/// The exit: an input error, an output error (a closed pipe is how `| head` ends a run:
/// said in the summary), or success.
fn exit_code(report: count::Report, end: &End) -> anyhow::Result<ExitCode> {
    let pkts = report.tick.now.pkts;
    match (report.error, report.output_error) {
        (Some(e), _) => {
            Err(anyhow::Error::new(e).context(format!("stopped after {} packets", group(pkts))))
        }
        (None, Some(_)) if end.closed => Ok(ExitCode::SUCCESS),
        (None, Some(e)) => Err(anyhow::Error::new(e).context(format!(
            "-w: stopped after {} packets, {} written",
            group(pkts),
            group(end.written.unwrap_or(0))
        ))),
        (None, None) => Ok(ExitCode::SUCCESS),
    }
}

/// The figures of each thread of a run, for the interval lines and the summary.
fn per_thread_json(names: &[String], ticks: &[count::Tick]) -> serde_json::Value {
    ticks
        .iter()
        .zip(names)
        .enumerate()
        .map(|(i, (t, name))| {
            let abs = stats::Rates::between(&t.start, &t.now);
            let act = stats::Rates::between(&t.prev, &t.now);
            serde_json::json!({
                "thread": i,
                "port": name,
                "pkts": abs.pkts,
                "bytes": abs.bytes,
                "drops": abs.drops,
                "filtered": t.now.drops.since(&t.start.drops).get(linerate::port::DropReason::Filter),
                "pps": act.pps,
            })
        })
        .collect()
}

/// One line per thread under a pfcount block.
fn per_thread_text(names: &[String], ticks: &[count::Tick]) -> String {
    let mut s = String::new();
    for (i, (t, name)) in ticks.iter().zip(names).enumerate() {
        let abs = stats::Rates::between(&t.start, &t.now);
        let act = stats::Rates::between(&t.prev, &t.now);
        s.push_str(&format!(
            "Thread {i} [{name}]: {} pkts rcvd, {} dropped [{} pkt/sec]\n",
            group(abs.pkts),
            group(abs.drops),
            stats::group_f(act.pps, 2),
        ));
    }
    s
}

/// `count` with one thread per queue (or per group of queues): see `--threads`.
fn run_threads(
    a: Args,
    plan: Plan,
    opts: &PortOptions,
    stop: &Arc<AtomicBool>,
    service: crate::common::service::Checked,
) -> anyhow::Result<ExitCode> {
    let (shares, link, in_kernel) = open_shares(&a, &plan, opts)?;
    let user_filter = a
        .filter
        .as_deref()
        .filter(|_| !in_kernel)
        .map(|e| (e, link));
    let names: Vec<String> = shares.iter().map(|s| s.name.clone()).collect();
    pin(a.core)?;
    let metrics = metrics::start(&a.metrics, "count", a.quiet)?;
    // Every port and output is open: the pidfile, then -Z.
    let _running = service.start()?;
    if let Some(m) = &metrics {
        let mut e = m.exposition();
        e.port(&a.input, Dir::Rx, &PortCount::default());
        m.publish(&e);
    }
    let mut out = std::io::stdout();
    let words = plan.words.unwrap_or_default();
    if a.json {
        let start = serde_json::json!({
            "type": "start",
            "port": a.input,
            "link_type": link.0,
            "filter": a.filter,
            "filter_in_kernel": in_kernel,
            "threads": names.len(),
            "thread_ports": names,
            "plan": words,
        });
        let _ = writeln!(out, "{start}");
    } else if !a.quiet {
        let _ = writeln!(out, "Capturing from {} (link type {})", a.input, link.0);
        let _ = writeln!(out, "Threads: {words}");
    }
    let _ = out.flush();
    let copts = CountOptions {
        count: a.count,
        duration: a.duration,
        filter: None,
        interval: a.interval,
        start: None,
    };
    let mut live = page(&a, false, stop)?;
    let report = count::run_threads(shares, &copts, user_filter, stop, |t, per| {
        show_thread_tick(
            &a,
            &names,
            metrics.as_ref(),
            live.as_mut(),
            &mut out,
            t,
            per,
        )
    });
    drop(live);
    let t = &report.total.tick;
    if let Some(m) = &metrics {
        publish(m, &a.input, &t.start, &t.now);
    }
    summary_threads(&mut out, &a, &names, &report)?;
    match report.total.error {
        Some(e) => {
            Err(anyhow::Error::new(e)
                .context(format!("stopped after {} packets", group(t.now.pkts))))
        }
        None => Ok(ExitCode::SUCCESS),
    }
}

/// Opens the input's parts and deals them to the plan's threads (thread t reads parts t,
/// t+n, ...), with -f attached in the kernel when every part takes it: the threads' shares,
/// the link type, and whether the filter runs in the kernel.
fn open_shares(
    a: &Args,
    plan: &Plan,
    opts: &PortOptions,
) -> anyhow::Result<(Vec<count::Share>, linerate::wire::LinkType, bool)> {
    use linerate::port::Direction;
    // Parts do not wait in rx: each thread waits on its own descriptors between batches.
    let part_opts = PortOptions {
        rx_wait_ms: 0,
        ..opts.clone()
    };
    let parts = linerate::open_parts(&a.input, &part_opts, Direction::Rx)
        .map_err(|e| crate::common::port_error("-i", &a.input, e))?;
    let n = plan.threads.min(parts.len()).max(1);
    let mut groups: Vec<Vec<Box<dyn Port>>> = (0..n).map(|_| Vec::new()).collect();
    for (i, p) in parts.into_iter().enumerate() {
        groups[i % n].push(p);
    }
    let link = groups[0][0].link_type();
    let mut in_kernel = a.filter.is_some() && !a.user_filter;
    if let Some(expr) = &a.filter {
        let f = Filter::compile(expr, link).map_err(|e| usage(format!("-f: {e}")))?;
        for p in groups.iter_mut().flatten().filter(|_| !a.user_filter) {
            let name = p.name().to_string();
            in_kernel &= crate::common::attach_filter(p.as_mut(), &f, &name)?;
        }
    }
    let shares = groups
        .into_iter()
        .map(|mut g| {
            if g.len() == 1 {
                let port = g.remove(0);
                count::Share {
                    name: port.name().to_string(),
                    port,
                }
            } else {
                let name = g.iter().map(|p| p.name()).collect::<Vec<_>>().join(",");
                count::Share {
                    port: Box::new(linerate::port::Aggregate::new(&name, g)),
                    name,
                }
            }
        })
        .collect();
    Ok((shares, link, in_kernel))
}

/// Every interval of a threaded run: the metrics, and the live page or a statistics block
/// with a line per thread (or a JSON line).
fn show_thread_tick(
    a: &Args,
    names: &[String],
    metrics: Option<&metrics::Metrics>,
    live: Option<&mut ReadOnly>,
    out: &mut dyn Write,
    t: &count::Tick,
    per: &[count::Tick],
) {
    if let Some(m) = metrics {
        publish(m, &a.input, &t.start, &t.now);
    }
    if let Some(p) = live {
        let (rows, threads) = thread_rows(&a.input, names, t, per);
        p.tick_threads("capturing", t.now.t_ns, &rows, &threads);
        return;
    }
    if a.quiet {
        return;
    }
    let s = if a.json {
        let mut j: serde_json::Value =
            serde_json::from_str(&stats::json_line("stats", &t.start, &t.prev, &t.now))
                .unwrap_or_default();
        j["threads"] = per_thread_json(names, per);
        j.to_string() + "\n"
    } else {
        stats::pfcount_block(&t.start, &t.prev, &t.now) + &per_thread_text(names, per)
    };
    let _ = out.write_all(s.as_bytes());
    let _ = out.flush();
}

/// The summary of a threaded run, with each thread's figures.
fn summary_threads(
    out: &mut dyn Write,
    a: &Args,
    names: &[String],
    report: &count::ThreadsReport,
) -> anyhow::Result<()> {
    let t = &report.total.tick;
    let ended = match report.total.ended {
        Ended::Error => "input error",
        e => e.text(),
    };
    let per: Vec<count::Tick> = report.threads.iter().map(|r| r.tick).collect();
    if a.json {
        let mut j: serde_json::Value =
            serde_json::from_str(&stats::json_line("summary", &t.start, &t.start, &t.now))?;
        j["ended"] = ended.into();
        j["threads"] = per_thread_json(names, &per);
        if let Some(e) = &report.total.error {
            j["error"] = e.to_string().into();
        }
        let _ = writeln!(out, "{j}");
    } else {
        let _ = out.write_all(stats::pfcount_block(&t.start, &t.start, &t.now).as_bytes());
        let _ = out.write_all(per_thread_text(names, &per).as_bytes());
        let _ = writeln!(out, "{}; {} threads", summary_line(t, ended), names.len());
    }
    let _ = out.flush();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::console::keys::CommandLine;
    use crate::console::page::render_text;
    use crate::console::{counters_page, Meter};

    /// The row of `s` (a rendered page) that holds `key` and `dir`, as words.
    fn row(s: &str, key: &str, dir: &str) -> Vec<String> {
        let l = s
            .lines()
            .find(|l| l.contains(key) && l.contains(&format!(" {dir} ")))
            .unwrap_or_else(|| panic!("no {key} {dir} row in {s}"));
        l.trim_matches(|c| c == '│' || c == ' ')
            .split_whitespace()
            .map(String::from)
            .collect()
    }

    /// A threaded count of two capture files (one thread each) with a user-space filter: the
    /// page gives the input's row, one row per thread with what that thread counted, and the
    /// filtered packets by reason, all from the run's own counters.
    #[test]
    fn the_threads_page_shows_each_threads_share_of_a_real_run() {
        let dir = linerate_test_support::corpus_dir();
        let files = ["afs.pcap", "mptcp-v0.pcap"].map(|f| dir.join(f));
        if !files.iter().all(|f| f.exists()) {
            linerate_test_support::skip("tcpdump's test captures are not in the repository");
            return;
        }
        // Copies under short names: the page's columns cut long paths.
        let tmp = std::env::temp_dir().join(format!("lr-page-{}", std::process::id()));
        std::fs::create_dir_all(&tmp).expect("a temporary directory");
        let files: Vec<_> = files
            .iter()
            .zip(["a.pcap", "b.pcap"])
            .map(|(f, n)| {
                let to = tmp.join(n);
                std::fs::copy(f, &to).expect("copy a capture");
                to
            })
            .collect();
        let uri = files
            .iter()
            .map(|f| format!("pcap:{}", f.display()))
            .collect::<Vec<_>>()
            .join(",");
        let parts =
            linerate::open_parts(&uri, &PortOptions::default(), linerate::port::Direction::Rx)
                .expect("the captures open");
        let link = parts[0].link_type();
        let shares: Vec<count::Share> = parts
            .into_iter()
            .map(|port| count::Share {
                name: port.name().to_string(),
                port,
            })
            .collect();
        let names: Vec<String> = shares.iter().map(|s| s.name.clone()).collect();
        let copts = CountOptions {
            count: None,
            duration: None,
            filter: None,
            interval: std::time::Duration::from_millis(10),
            start: None,
        };
        let stop = AtomicBool::new(false);
        let report = count::run_threads(shares, &copts, Some(("tcp", link)), &stop, |_, _| {});
        assert!(report.total.error.is_none(), "{:?}", report.total.error);
        let per: Vec<count::Tick> = report.threads.iter().map(|r| r.tick).collect();
        let total = report.total.tick;
        // Two readings, as the page makes every interval: the start and the end.
        let mut meter = Meter::default();
        let zero: Vec<count::Tick> = per
            .iter()
            .map(|t| count::Tick { now: t.start, ..*t })
            .collect();
        let t_zero = count::Tick {
            now: total.start,
            ..total
        };
        // The input's row under a short name (the paths are long).
        let input = "pcap:afs,mptcp";
        let (rows, threads) = thread_rows(input, &names, &t_zero, &zero);
        let _ = counters_page(
            String::new(),
            String::new(),
            0.0,
            total.start.t_ns,
            &rows,
            &threads,
            &mut meter,
        );
        let (rows, threads) = thread_rows(input, &names, &total, &per);
        let page = counters_page(
            format!("linerate count -i {uri}"),
            "capturing".into(),
            1.0,
            total.now.t_ns,
            &rows,
            &threads,
            &mut meter,
        );
        let _ = std::fs::remove_dir_all(&tmp);
        let s = render_text(&page, &CommandLine::new(false).prompt(), 120, 30);
        println!("{s}");
        assert!(s.contains(" Threads "), "{s}");
        let secs = |t: &count::Tick| (t.now.t_ns - t.start.t_ns) as f64 / 1e9;
        let mut sum = 0;
        for (i, (t, name)) in per.iter().zip(&names).enumerate() {
            let pkts = t.now.pkts - t.start.pkts;
            let filtered = t
                .now
                .drops
                .since(&t.start.drops)
                .get(linerate::port::DropReason::Filter);
            sum += pkts;
            let want = [
                i.to_string(),
                name.clone(),
                "rx".into(),
                linerate::stats::group_f(pkts as f64 / secs(&total), 0),
                linerate::stats::group_f(
                    (t.now.bytes - t.start.bytes) as f64 * 8.0 / secs(&total) / 1e6,
                    2,
                ),
                group(pkts),
                group(filtered),
            ];
            assert_eq!(row(&s, name, "rx")[..], want[..], "thread {i}: {s}");
        }
        // What each file holds: afs.pcap has no TCP, mptcp-v0.pcap only TCP.
        assert_eq!(per[0].now.pkts - per[0].start.pkts, 0);
        assert_eq!(per[1].now.pkts - per[1].start.pkts, 264);
        assert_eq!(sum, total.now.pkts - total.start.pkts);
        let input = row(&s, input, "rx");
        assert_eq!(input[input.len() - 2], group(sum), "{s}");
        assert!(
            s.lines()
                .any(|l| l.contains("rx filter") && l.contains("601")),
            "{s}"
        );
    }
}

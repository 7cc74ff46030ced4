//! `linerate sweep`: netperf's UDP_STREAM table by message size (sendmmsg batches through the
//! kernel's UDP stack to a receiver that counts with recvmmsg), and with `--watch PATH`, per
//! size, where the lost messages went.

use crate::common::{flags, stop_flag, usage};
use anyhow::Context;
use clap::Parser;
use linerate::apps::gen::template::TemplateSpec;
use linerate::apps::sweep::{
    self, LocalSink, RemoteSink, SendPlan, Sink, SizeRow, SweepError, TAG_LEN,
};
use linerate::apps::watch::{self, report, Watch};
use linerate::port::udp::{UdpSender, MAX_BATCH, MAX_UDP_PAYLOAD};
use linerate::port::{Port, PortOptions, Uri};
use linerate::stats::{group, group_f};
use linerate::units::Rate;
use serde_json::{json, Value};
use std::io::Write;
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, ToSocketAddrs};
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// The sizes netperf users sweep: from the smallest Ethernet payload to a full 1500-byte MTU.
const DEFAULT_SIZES: &str = "18,64,128,256,512,1024,1472";
/// The port of the receiver (UDP) and of `--serve`'s control (TCP) unless `--port`.
const DEFAULT_PORT: u16 = 12866;
/// The frame sizes (with the CRC, as gen's and rfc2544's) swept over a linerate port: RFC
/// 2544's 64 to 1518 bytes.
const DEFAULT_FRAMES: &str = "64,128,256,512,1024,1518";
/// The CRC a frame size of --raw includes (the port sends the frame without it, the NIC adds it).
const CRC: usize = 4;
/// Most sizes in one sweep.
const MAX_SIZES: usize = 64;

/// Flags of `linerate sweep`.
#[derive(Parser, Debug)]
pub struct Args {
    /// Where the messages go: NETNS:IFACE (sweep starts its receiver in that network namespace,
    /// on the interface's IPv4 address) or HOST (where `linerate sweep --serve` runs).
    #[arg(
        long,
        value_name = "HOST|NETNS:IFACE",
        required_unless_present = "serve"
    )]
    to: Option<String>,
    /// Message sizes in bytes (UDP payload), in order, comma separated: each 12 to 65507
    /// [default: 18,64,128,256,512,1024,1472]. With --raw, frame sizes with the CRC, as gen
    /// --size and rfc2544 --sizes take them, each 64 to 9022 (jumbo frames as far as both
    /// interfaces' MTUs and the port allow: MTU + 18); 60 to 63, which only a size without the
    /// CRC can be, are taken so (60 is 64) [default: 64,128,256,512,1024,1518].
    #[arg(long, value_name = "LIST", value_delimiter = ',', value_parser = parse_sizes)]
    sizes: Option<Vec<usize>>,
    /// How long each size is sent (or with a unit: 500ms).
    #[arg(long = "time", value_name = "SECONDS", default_value = "1", value_parser = flags::duration(PER_SIZE))]
    time: Duration,
    /// `-t` is a run's whole duration in linerate; sweep's time per size is `--time`.
    #[allow(dead_code)]
    #[arg(short = 't', hide = true, value_name = "VALUE", num_args = 0..=1, default_missing_value = "",
          value_parser = flags::retired("sweep -t: the time each size is sent is --time SECONDS (-t is a run's whole duration in linerate's tools)"))]
    old_t: Option<String>,
    /// UDP port of the receiver, and TCP port of `--serve`'s control (0 with --serve or
    /// NETNS:IFACE: one the kernel picks).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_PORT, value_parser = flags::int(0u16, 65535))]
    port: u16,
    /// Messages per second to send (e.g. 100kpps), or megabits of messages per second
    /// (e.g. 50Mbps, payload bits as in the table); default: as fast as the kernel takes them.
    #[arg(long, value_name = "RATE", value_parser = flags::rate)]
    rate: Option<Rate>,
    /// Messages handed to the kernel per sendmmsg call.
    #[arg(long, value_name = "N", default_value_t = 64, value_parser = flags::int(1usize, MAX_BATCH))]
    batch: usize,
    /// Send socket buffer (SO_SNDBUF) in bytes, like netperf's -s (default: the system's).
    #[arg(long, value_name = "BYTES", value_parser = flags::size(1, 1 << 30))]
    sndbuf: Option<u64>,
    /// Receive socket buffer (SO_RCVBUF) of the receiver in bytes, like netperf's -S
    /// (default: the system's). A small one makes the receiving socket drop.
    #[arg(long, value_name = "BYTES", value_parser = flags::size(1, 1 << 30))]
    rcvbuf: Option<u64>,
    /// Watch this path of interfaces during each size (as `linerate watch PATH`) and say, per
    /// size, at which hop the lost messages vanished and by which drop counters.
    #[arg(long, value_name = "PATH")]
    watch: Option<String>,
    /// Send Ethernet/IPv4/UDP frames on this linerate port (afpacket:IFACE or xdp:IFACE) instead
    /// of messages through the UDP stack; they are counted by an afpacket: port on the
    /// interface of --to NETNS:IFACE.
    #[arg(long, value_name = "PORT", conflicts_with_all = ["sndbuf", "rcvbuf", "batch"])]
    raw: Option<String>,
    /// Print a JSON line per size and a summary instead of the table.
    #[arg(long)]
    json: bool,
    /// Print only the table (with --json: only the summary line), not the lines about the
    /// sockets and the watched path before it.
    #[arg(short = 'q', long)]
    quiet: bool,
    /// Be the receiver for `linerate sweep --to HOST` on other hosts: count their messages on
    /// UDP --port and answer on TCP --port, until Ctrl-C.
    #[arg(long, conflicts_with_all = ["to", "watch", "rate", "sndbuf", "raw"])]
    serve: bool,
    /// With --serve: the IPv4 address to listen on (default: every address of this host).
    #[arg(long, value_name = "ADDR", requires = "serve")]
    bind: Option<Ipv4Addr>,
}

/// `-t` of sweep: per size, 10 ms to an hour.
const PER_SIZE: flags::Durations = flags::Durations {
    min: Duration::from_millis(10),
    max: Duration::from_secs(sweep::MAX_SIZE_SECS),
    off: false,
};

fn parse_sizes(s: &str) -> Result<usize, String> {
    let range = format!(
        "a message size between {TAG_LEN} and {MAX_UDP_PAYLOAD} bytes (each message carries a \
         {TAG_LEN}-byte tag, so that sweep tells its own messages from strays)"
    );
    match linerate::units::parse_size(s) {
        Ok(n) if (TAG_LEN as u64..=MAX_UDP_PAYLOAD as u64).contains(&n) => Ok(n as usize),
        Ok(_) => Err(format!("'{s}' is out of range: {range}")),
        Err(e) => Err(format!("{e}; {range}")),
    }
}

fn sweep_error(e: SweepError) -> anyhow::Error {
    if e.is_usage() {
        usage(format!("--to: {e}"))
    } else {
        anyhow::Error::new(e)
    }
}

/// Runs `linerate sweep`: checks the flags, opens the receiver and the sender, measures each
/// size, and sums up.
pub fn run(mut a: Args) -> anyhow::Result<ExitCode> {
    let sizes = sizes_of(&mut a)?;
    if a.bind.is_some() && !a.serve {
        return Err(usage(
            "--bind: only with --serve (the address a server listens on); a client names its \
             server with --to HOST",
        ));
    }
    let stop = stop_flag()?;
    if a.serve {
        return serve(&a, &stop);
    }
    let to = a.to.take().unwrap_or_default();
    if let Some(Rate::Percent(_)) = a.rate {
        return Err(usage(
            "--rate: a share of the line rate means nothing through the UDP stack; give \
             messages per second (100kpps) or megabits per second (50Mbps)",
        ));
    }
    let mut watcher = open_watch(&a)?;
    // The receiver: in a namespace of this machine, or a server elsewhere.
    let mut far = open_sink(&a, &to, &sizes)?;
    let run_id = (std::process::id() << 8) ^ (linerate::time::wall_ns() as u32);
    let mut tx = open_sender(&a, &far.sink, &to, run_id)?;
    if let Sender::Raw { port, .. } = &tx {
        raw_sizes_fit(&sizes, port.as_ref(), &to, far.mtu)?;
    }
    let mut out = std::io::stdout().lock();
    announce(&mut out, &a, &to, &far, &tx, watcher.as_ref(), &sizes);
    let mut rows: Vec<(SizeRow, Option<Value>, Vec<String>)> = Vec::new();
    let mut failure = None;
    for (seq, &size) in sizes.iter().enumerate() {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let step = Step {
            seq,
            size,
            run_id,
            stop: &stop,
        };
        let m = match measure_size(&a, &step, &mut far.sink, &mut tx, watcher.as_mut()) {
            Ok(m) => m,
            Err(e) => {
                failure = Some(e);
                break;
            }
        };
        let notes = notes(&m.row, m.watch_text, a.raw.is_some());
        print_row(&mut out, &a, &m.row, m.watch_json.as_ref(), &notes);
        rows.push((m.row, m.watch_json, notes));
        if m.watch_failed.is_some() {
            failure = m.watch_failed;
            break;
        }
    }
    summary(
        &mut out,
        &a,
        &rows,
        sizes.len(),
        stop.load(Ordering::Relaxed),
    );
    match failure {
        Some(e) => Err(e),
        None => Ok(ExitCode::SUCCESS),
    }
}

/// --sizes (or the default list of the mode), checked against the mode's limits.
fn sizes_of(a: &mut Args) -> anyhow::Result<Vec<usize>> {
    let default = if a.raw.is_some() {
        DEFAULT_FRAMES
    } else {
        DEFAULT_SIZES
    };
    let mut sizes: Vec<usize> = match a.sizes.take() {
        Some(v) => v,
        None => default.split(',').filter_map(|x| x.parse().ok()).collect(),
    };
    if a.raw.is_some() {
        // Below 64 a frame size can only be without the CRC (the smallest frame is 60 + 4).
        let given = sizes.clone();
        for s in sizes
            .iter_mut()
            .filter(|s| (sweep::MIN_FRAME..sweep::MIN_FRAME + CRC).contains(s))
        {
            *s += CRC;
        }
        // 60,64 would measure 64 twice, one of them not the size meant: said, never run.
        if let Some((i, s)) = sizes
            .iter()
            .enumerate()
            .find(|(i, s)| given[*i] != **s && given.iter().any(|g| g == *s))
        {
            return Err(usage(format!(
                "--sizes: {} with --raw is {s} with the CRC (60 to 63 can only be sizes \
                 without it), and {s} is in the list too: write each size once, with the CRC \
                 (64 to 9022)",
                given[i]
            )));
        }
    }
    if sizes.len() > MAX_SIZES {
        return Err(usage(format!(
            "--sizes: {} sizes; at most {MAX_SIZES}",
            sizes.len()
        )));
    }
    if let Some(uri) = &a.raw {
        raw_iface(uri)?;
        if let Some(bad) = sizes
            .iter()
            .find(|s| !(sweep::MIN_FRAME + CRC..=sweep::MAX_FRAME + CRC).contains(s))
        {
            return Err(usage(format!(
                "--sizes: {bad} with --raw: frame sizes are between {} and {} bytes (with the \
                 CRC, as gen's and rfc2544's; above 1518, jumbo frames, as the ports' MTUs allow)",
                sweep::MIN_FRAME + CRC,
                sweep::MAX_FRAME + CRC
            )));
        }
    }
    Ok(sizes)
}

/// The messages per second --rate asks for at `size` (None: as fast as it goes).
fn rate_pps(rate: &Option<Rate>, size: usize) -> Option<f64> {
    match rate {
        None => None,
        Some(Rate::Pps(p)) => Some(*p),
        Some(Rate::Bps(b)) => Some(b / (size as f64 * 8.0)),
        Some(Rate::Percent(_)) => None,
    }
}

/// The counters of --watch's path, when given.
fn open_watch(a: &Args) -> anyhow::Result<Option<Watch>> {
    let Some(p) = &a.watch else {
        return Ok(None);
    };
    let hops = watch::parse_path(p).map_err(|e| usage(format!("--watch: {e}")))?;
    let w = Watch::new(hops, false).map_err(|e| {
        if e.is_usage() {
            usage(format!("--watch: {e}"))
        } else {
            anyhow::Error::new(e).context("--watch")
        }
    })?;
    Ok(Some(w))
}

/// The far end of the run.
struct Far {
    /// What counts what arrives.
    sink: Sink,
    /// Where it is, in words.
    words: String,
    /// The MTU of --to NETNS:IFACE.
    mtu: Option<u32>,
}

/// The receiver of --to.
fn open_sink(a: &Args, to: &str, sizes: &[usize]) -> anyhow::Result<Far> {
    match to.split_once(':') {
        Some((ns, iface)) => open_local_sink(a, to, ns, iface),
        None if a.raw.is_some() => Err(usage(format!(
            "--to '{to}': with --raw, the far end is NETNS:IFACE (its frames are counted by \
             an afpacket: port there)"
        ))),
        None => {
            let (sink, words) = connect_server(a, to, sizes)?;
            Ok(Far {
                sink,
                words,
                mtu: None,
            })
        }
    }
}

/// A receiver in namespace `ns` of this machine: a UDP socket on `iface`'s address, or with
/// --raw an afpacket: port counting the frames.
fn open_local_sink(a: &Args, to: &str, ns: &str, iface: &str) -> anyhow::Result<Far> {
    if ns.is_empty() || iface.is_empty() {
        return Err(usage(format!(
            "--to '{to}': write NETNS:IFACE (a namespace of `ip netns list` and an \
             interface in it) or HOST"
        )));
    }
    let mtu = Some(sweep::check_target(ns, iface).map_err(sweep_error)?.mtu);
    if a.raw.is_some() {
        let uri = format!("afpacket:{iface}");
        let sink = LocalSink::open_port(Some(ns), &uri).map_err(sweep_error)?;
        return Ok(Far {
            sink: Sink::Local(sink),
            words: format!("{to}, counted by {uri} in namespace {ns}"),
            mtu,
        });
    }
    let rcvbuf = a.rcvbuf.map(|b| b as usize);
    let ip = sweep::target_address(Some(ns), iface).map_err(sweep_error)?;
    let sink =
        LocalSink::bind(Some(ns), SocketAddrV4::new(ip, a.port), rcvbuf).map_err(sweep_error)?;
    Ok(Far {
        sink: Sink::Local(sink),
        words: format!("{to}, receiver in namespace {ns}"),
        mtu,
    })
}

/// A `linerate sweep --serve` on host `to`, whose limits the run must keep.
fn connect_server(a: &Args, to: &str, sizes: &[usize]) -> anyhow::Result<(Sink, String)> {
    if a.port == 0 {
        return Err(usage(
            "--port 0: with --to HOST, give the port its `linerate sweep --serve` listens on",
        ));
    }
    let ip = (to, a.port)
        .to_socket_addrs()
        .map_err(|e| usage(format!("--to '{to}': {e}")))?
        .find_map(|s| match s {
            std::net::SocketAddr::V4(v) => Some(*v.ip()),
            _ => None,
        })
        .ok_or_else(|| usage(format!("--to '{to}': no IPv4 address")))?;
    let rcvbuf = a.rcvbuf.map(|b| b as usize);
    let r = RemoteSink::connect(SocketAddrV4::new(ip, a.port), rcvbuf).map_err(sweep_error)?;
    if let Some(l) = r.limits() {
        let secs = a.time.as_secs_f64().ceil() as u64;
        let server = r.server();
        if secs > l.max_secs {
            return Err(usage(format!(
                "--time {}: the server {server} allows at most {} s per size",
                flags::show_duration(a.time),
                l.max_secs
            )));
        }
        if sizes.len() as u64 > l.max_sizes {
            return Err(usage(format!(
                "--sizes: {} sizes; the server {server} allows at most {} per run",
                sizes.len(),
                l.max_sizes
            )));
        }
    }
    Ok((
        Sink::Remote(r),
        format!("{to}, linerate sweep --serve there"),
    ))
}

/// The sender: a UDP socket toward the sink, or the --raw port.
fn open_sender(a: &Args, sink: &Sink, to: &str, run_id: u32) -> anyhow::Result<Sender> {
    match &a.raw {
        None => {
            let dst = sink.data_addr();
            Ok(Sender::Udp(
                UdpSender::connect(dst, a.sndbuf.map(|b| b as usize))
                    .with_context(|| format!("opening a UDP socket toward {dst}"))?,
            ))
        }
        Some(uri) => raw_sender(uri, to, a.port, run_id),
    }
}

/// The start record, or the lines naming the test, its buffers and its watched path, and
/// the table's header.
fn announce(
    out: &mut dyn Write,
    a: &Args,
    to: &str,
    far: &Far,
    tx: &Sender,
    watcher: Option<&Watch>,
    sizes: &[usize],
) {
    let (sink, where_) = (&far.sink, &far.words);
    let dst = match tx {
        Sender::Udp(_) => sink.data_addr(),
        Sender::Raw { template, .. } => SocketAddrV4::new(
            match template.dst_ip {
                std::net::IpAddr::V4(v) => v,
                _ => Ipv4Addr::UNSPECIFIED,
            },
            a.port,
        ),
    };
    let sndbuf = match tx {
        Sender::Udp(u) => u.sndbuf().unwrap_or(0),
        Sender::Raw { .. } => 0,
    };
    let rcv = sink.rcvbuf();
    if a.json {
        let start = json!({
            "type": "start",
            "test": if a.raw.is_some() { "RAW" } else { "UDP_STREAM" },
            "raw": a.raw,
            "to": to,
            "dst": dst.to_string(),
            "src": tx.src(),
            "secs_per_size": a.time.as_secs_f64(),
            "sizes": sizes,
            "sndbuf": sndbuf,
            "sndbuf_asked": a.sndbuf,
            "rcvbuf": rcv,
            "rcvbuf_asked": a.rcvbuf,
            "batch": a.batch,
            "watch": watcher.map(|w| w.path().hops.iter().map(|h| h.label.clone()).collect::<Vec<_>>()),
        });
        if !a.quiet {
            let _ = writeln!(out, "{start}");
        }
        let _ = out.flush();
        return;
    }
    let asked = |b: Option<u64>| b.map_or_else(String::new, |b| format!(" (asked {} B)", group(b)));
    match &a.raw {
        _ if a.quiet => {}
        None => {
            let _ = writeln!(
                out,
                "UDP_STREAM to {dst} ({where_}), {} per size, {} messages per sendmmsg",
                flags::show_duration(a.time),
                a.batch
            );
            let _ = writeln!(
                out,
                "Socket sizes: send {} B{}, receive {} B{}",
                group(sndbuf as u64),
                asked(a.sndbuf),
                group(rcv as u64),
                asked(a.rcvbuf)
            );
        }
        Some(uri) => {
            let _ = writeln!(
                out,
                "Ethernet/IPv4/UDP frames on {uri} from {} to {dst} ({where_}), {} per size; \
                 sizes with the CRC",
                tx.src().unwrap_or_default(),
                flags::show_duration(a.time),
            );
        }
    }
    if let Some(w) = watcher.filter(|_| !a.quiet) {
        let labels: Vec<&str> = w.path().hops.iter().map(|h| h.label.as_str()).collect();
        let _ = writeln!(out, "Watching {}", labels.join(" -> "));
        for n in &w.path().notes {
            let _ = writeln!(out, "note: {n}");
        }
    }
    let _ = write!(out, "{}", header(a.rate.is_some(), a.raw.is_some()));
    let _ = out.flush();
}

/// Which size of the run is measured.
struct Step<'a> {
    /// Its place in --sizes (from 0).
    seq: usize,
    size: usize,
    run_id: u32,
    stop: &'a std::sync::atomic::AtomicBool,
}

/// One size measured.
struct Measured {
    row: SizeRow,
    /// Where the watched path lost packets (JSON, and lines for the table).
    watch_json: Option<Value>,
    watch_text: Vec<String>,
    /// The watched path could not be read after the size was sent (its row still counts).
    watch_failed: Option<anyhow::Error>,
}

/// One size: tagged messages or frames sent for --time, and what the receiver and the
/// watched path counted. Err: nothing measured.
fn measure_size(
    a: &Args,
    step: &Step,
    sink: &mut Sink,
    tx: &mut Sender,
    mut watcher: Option<&mut Watch>,
) -> anyhow::Result<Measured> {
    let (seq, size) = (step.seq, step.size);
    let t: [u8; TAG_LEN] = match &*tx {
        Sender::Udp(_) => sweep::tag(step.run_id, seq as u32 + 1),
        Sender::Raw { template, .. } => {
            sweep::raw_tag(template.sport.wrapping_add(seq as u16), template.dport)
        }
    };
    let before = watcher
        .as_mut()
        .map(|w| w.sample())
        .transpose()
        .map_err(|e| anyhow::Error::new(e).context("--watch"))?;
    // What the port sends and the far end receives: a --raw frame without its CRC.
    let sent_len = if a.raw.is_some() { size - CRC } else { size };
    sink.begin(sent_len, t, a.time.as_secs_f64())?;
    let asked_pps = rate_pps(&a.rate, size);
    let txr = match tx {
        Sender::Udp(u) => {
            u.set_head(&t);
            let plan = SendPlan {
                size,
                duration: a.time,
                rate_pps: asked_pps,
                batch: a.batch,
            };
            sweep::send_size(u, &plan, step.stop)
        }
        Sender::Raw { port, template } => {
            let mut template = template.clone();
            template.sport = template.sport.wrapping_add(seq as u16);
            let plan = sweep::RawPlan {
                template,
                frame_len: sent_len,
                duration: a.time,
                rate_pps: asked_pps,
            };
            sweep::send_size_raw(port.as_mut(), &plan, step.stop)?
        }
    };
    let mut rxr = sink.finish(txr.sent)?;
    // The far end counts frames without their CRC; the row's bytes are of `size`, with it.
    rxr.bytes += (size - sent_len) as u64 * rxr.received;
    let row = SizeRow {
        size,
        asked_pps,
        tx: txr,
        rx: rxr,
    };
    let (watch_json, watch_text, watch_failed) = match (watcher, before) {
        (Some(w), Some(b)) => match w.sample() {
            Ok(after) => {
                let (j, t) = where_lost(&watch::diff(&b, &after).since_start(&b, &after));
                (j, t, None)
            }
            Err(e) => (None, vec![], Some(anyhow::Error::new(e).context("--watch"))),
        },
        _ => (None, vec![], None),
    };
    Ok(Measured {
        row,
        watch_json,
        watch_text,
        watch_failed,
    })
}

/// A size's row (a JSON record, or a table line and its notes).
fn print_row(
    out: &mut dyn Write,
    a: &Args,
    row: &SizeRow,
    wjson: Option<&Value>,
    notes: &[String],
) {
    if a.json {
        if !a.quiet {
            let _ = writeln!(out, "{}", row_json(row, wjson));
        }
    } else {
        let _ = write!(out, "{}", row_text(row, a.rate.is_some()));
        for n in notes {
            let _ = writeln!(out, "{:>8}  {n}", format!("{}:", row.size));
        }
    }
    let _ = out.flush();
}

/// The summary record (JSON), or the line saying a signal stopped the run early.
fn summary(
    out: &mut dyn Write,
    a: &Args,
    rows: &[(SizeRow, Option<Value>, Vec<String>)],
    sizes_asked: usize,
    stopped: bool,
) {
    let done = rows.len();
    if a.json {
        let s = json!({
            "type": "summary",
            "sizes": rows.iter().map(|(r, w, _)| row_json(r, w.as_ref())).collect::<Vec<_>>(),
            "stopped": stopped,
            "sizes_done": done,
            "sizes_asked": sizes_asked,
        });
        let _ = writeln!(out, "{s}");
    } else if stopped {
        let _ = writeln!(
            out,
            "Stopped by a signal: {done} of {sizes_asked} sizes measured{}",
            if rows.last().is_some_and(|(r, _, _)| r.tx.stopped) {
                " (the last one cut short: its row covers the time it ran)"
            } else {
                ""
            }
        );
    }
    let _ = out.flush();
}

fn header(rate: bool, raw: bool) -> String {
    let what = if raw { "Frame" } else { "Message" };
    let many = if raw { "Frames" } else { "Messages" };
    let per = if raw { "pkt/s" } else { "msg/s" };
    let asked = if rate {
        format!(" {:>11}", "asked")
    } else {
        String::new()
    };
    let asked2 = if rate {
        format!(" {per:>11}")
    } else {
        String::new()
    };
    format!(
        "{what:>8} {:>7} {many:>12} {:>9} {many:>12} {:>10} {:>7}{asked} {:>11} {:>9} {:>11} {:>9}\n\
         {:>8} {:>7} {:>12} {:>9} {:>12} {:>10} {:>7}{asked2} {per:>11} {:>9} {per:>11} {:>9}\n",
        "Elapsed",
        "Send",
        "Lost",
        "Loss",
        "Sent",
        "Sent",
        "Received",
        "Received",
        "size B",
        "secs",
        "sent",
        "errors",
        "received",
        "",
        "%",
        "Mbit/s",
        "Mbit/s"
    )
}

fn row_text(r: &SizeRow, rate: bool) -> String {
    let asked = if rate {
        format!(
            " {:>11}",
            r.asked_pps.map_or_else(|| "-".into(), |p| group_f(p, 0))
        )
    } else {
        String::new()
    };
    // More received than sent: no loss to show (the note under the row says what it is).
    let (lost, pct) = match r.loss_pct() {
        Some(p) => (group(r.lost()), format!("{p:.2}")),
        None => ("-".into(), "-".into()),
    };
    format!(
        "{:>8} {:>7.2} {:>12} {:>9} {:>12} {:>10} {:>7}{asked} {:>11} {:>9} {:>11} {:>9}\n",
        r.size,
        r.elapsed_s(),
        group(r.tx.sent),
        group(r.tx.errors_total()),
        group(r.rx.received),
        lost,
        pct,
        group_f(r.tx_pps(), 0),
        group_f(r.tx_mbps(), 2),
        group_f(r.rx_pps(), 0),
        group_f(r.rx_mbps(), 2),
    )
}

/// Lines under a row: errors by reason, where the lost messages went, strays, a cut.
fn notes(r: &SizeRow, watch: Vec<String>, raw: bool) -> Vec<String> {
    let mut n = Vec::new();
    let (per, receiver, full, other) = if raw {
        (
            "pkt/s",
            "the receiving port",
            "its ring was full",
            "other frames reached the receiving port (late ones of the size before, or not \
             this sweep's, e.g. ARP): not counted",
        )
    } else {
        (
            "msg/s",
            "the receiving socket",
            "its receive buffer was full: raise --rcvbuf or net.core.rmem_max",
            "other datagrams reached the port (late ones of the size before, or not this \
             sweep's): not counted",
        )
    };
    if !r.tx.errors.is_empty() {
        let e: Vec<String> =
            r.tx.errors
                .iter()
                .map(|(k, v)| format!("{k} {}", group(*v)))
                .collect();
        n.push(format!(
            "send errors (refused by the kernel, not sent): {}",
            e.join(", ")
        ));
    }
    if let Some(p) = r.asked_pps {
        let got = r.tx_pps();
        if (got - p).abs() > p * 0.01 {
            n.push(format!(
                "asked {} {per}, sent {} {per}",
                group_f(p, 0),
                group_f(got, 0)
            ));
        }
    }
    if r.excess() > 0 {
        n.push(format!(
            "anomaly: received {} of {} sent, {} more than sent (duplicates on the way, or \
             strays carrying this size's tag): no loss figure",
            group(r.rx.received),
            group(r.tx.sent),
            group(r.excess())
        ));
    }
    let lost = r.lost();
    if lost > 0 {
        match r.rx.socket_drops {
            Some(d) if d >= lost => n.push(format!(
                "lost {}: all dropped by {receiver} ({full})",
                group(lost)
            )),
            Some(d) if d > 0 => n.push(format!(
                "lost {}: {} dropped by {receiver} ({full}), {} on the way to it",
                group(lost),
                group(d),
                group(lost - d)
            )),
            Some(_) => n.push(format!(
                "lost {}: on the way (none dropped by {receiver})",
                group(lost)
            )),
            None => n.push(format!("lost {}", group(lost))),
        }
    }
    n.extend(watch);
    if r.rx.other > 0 {
        n.push(format!("{} {other}", group(r.rx.other)));
    }
    if r.tx.stopped {
        n.push(format!(
            "cut short by a signal after {:.2} s",
            r.elapsed_s()
        ));
    }
    n
}

/// Where the messages lost during one size went along the watched path: the hop where most
/// vanished, in watch's words, and its drop counters.
fn where_lost(i: &watch::Interval) -> (Option<Value>, Vec<String>) {
    let Some(k) = i.most_lost else {
        return (
            Some(json!({"most_lost": null})),
            vec!["watch: no hop of the path lost packets".into()],
        );
    };
    let h = &i.hops[k];
    let drops: serde_json::Map<String, Value> = h
        .drops
        .iter()
        .filter(|(_, v)| *v > 0)
        .map(|(n, v)| (n.clone(), json!(v)))
        .collect();
    let mut text = vec![format!(
        "watch: {}",
        report::mark_text(i).unwrap_or_default()
    )];
    if !drops.is_empty() {
        let d: Vec<String> = drops
            .iter()
            .map(|(n, v)| format!("{n} {}", group(v.as_u64().unwrap_or(0))))
            .collect();
        text.push(format!(
            "watch: drop counters of {}: {}",
            h.label,
            d.join(", ")
        ));
    }
    (
        Some(json!({
            "most_lost": h.label,
            "vanished": h.vanished,
            "lost_before": h.lost_before,
            "drops": drops,
            "text": report::mark_text(i),
        })),
        text,
    )
}

fn row_json(r: &SizeRow, watch: Option<&Value>) -> Value {
    let mut v = json!({
        "type": "size",
        "size": r.size,
        "elapsed": r.elapsed_s(),
        "sent": r.tx.sent,
        "send_errors": r.tx.errors,
        "received": r.rx.received,
        "received_bytes": r.rx.bytes,
        "lost": (r.excess() == 0).then_some(r.lost()),
        "loss_pct": r.loss_pct(),
        "excess": r.excess(),
        "socket_drops": r.rx.socket_drops,
        "other": r.rx.other,
        "tx_pps": r.tx_pps(),
        "tx_mbps": r.tx_mbps(),
        "rx_pps": r.rx_pps(),
        "rx_mbps": r.rx_mbps(),
        "rx_span": r.rx.span_ns as f64 / 1e9,
        "stopped": r.tx.stopped,
    });
    if let Some(p) = r.asked_pps {
        v["rate_pps"] = json!(p);
    }
    if r.excess() > 0 {
        v["anomaly"] = json!(
            "received more than sent (duplicates on the way, or strays carrying this size's tag)"
        );
    }
    if let Some(w) = watch {
        v["watch"] = w.clone();
    }
    v
}

/// What sends: a UDP socket, or a linerate port with the frames' headers.
enum Sender {
    Udp(UdpSender),
    Raw {
        port: Box<dyn Port>,
        template: TemplateSpec,
    },
}

impl Sender {
    /// Where the messages or frames come from, for reports.
    fn src(&self) -> Option<String> {
        match self {
            Sender::Udp(u) => u.local_addr().ok().map(|s| s.to_string()),
            Sender::Raw { template, .. } => Some(format!("{}:{}", template.src_ip, template.sport)),
        }
    }
}

/// The interface of `--raw PORT` (afpacket:IFACE or xdp:IFACE[@QUEUES]).
fn raw_iface(uri: &str) -> anyhow::Result<String> {
    match Uri::parse(uri).ok().as_ref().and_then(Uri::iface) {
        Some(iface) => Ok(iface.to_string()),
        None => Err(usage(format!(
            "--raw '{uri}': give one kernel port, afpacket:IFACE or xdp:IFACE"
        ))),
    }
}

/// Checks every frame size of `--raw` can be carried whole: sent by `port` (its MTU and its
/// packet buffers) and taken by the interface of `--to` (its MTU, `target_mtu`). A frame is
/// never cut to fit; a size that cannot be carried is a usage error naming the limit.
fn raw_sizes_fit(
    sizes: &[usize],
    port: &dyn Port,
    to: &str,
    target_mtu: Option<u32>,
) -> anyhow::Result<()> {
    // Sizes with the CRC; the limits are of frames without it.
    let Some(big) = sizes.iter().max().map(|b| b - CRC) else {
        return Ok(());
    };
    if let Some(max) = port.max_tx_frame(false).filter(|m| big > *m) {
        let room = port
            .pool()
            .filter(|p| p.allocates())
            .map(|p| p.max_packet() as usize);
        let why = if room == Some(max) {
            format!(
                "its packet buffers hold {max} bytes: it carries no jumbo frames; use afpacket: \
                 for those"
            )
        } else {
            let iface = raw_iface(port.name()).unwrap_or_default();
            format!(
                "the MTU of {iface} plus the 14-byte Ethernet header; raise it \
                 (`ip link set {iface} mtu 9000`)"
            )
        };
        return Err(usage(format!(
            "--sizes: {} with --raw: {} sends frames of at most {} bytes with the CRC ({why}); \
             or give sizes up to {}",
            big + CRC,
            port.name(),
            max + CRC,
            max + CRC
        )));
    }
    if let Some(mtu) = target_mtu {
        let max = mtu as usize + 14;
        if big > max {
            let (ns, iface) = to.split_once(':').unwrap_or(("", to));
            return Err(usage(format!(
                "--sizes: {} with --raw: {to} takes frames of at most {} bytes with the CRC (its \
                 MTU {mtu} plus the 14-byte Ethernet header and the CRC); give sizes up to {}, or \
                 raise its MTU (`ip -n {ns} link set {iface} mtu 9000`)",
                big + CRC,
                max + CRC,
                max + CRC
            )));
        }
    }
    Ok(())
}

/// Opens `--raw PORT` and builds the frames' headers: from the port's interface (its MAC and
/// IPv4 address) to the interface of `--to NETNS:IFACE` (the same), UDP from a port of this
/// run (one more per size, so that a late frame of the size before is not counted) to `port`.
fn raw_sender(uri: &str, to: &str, port: u16, run_id: u32) -> anyhow::Result<Sender> {
    let iface = &raw_iface(uri)?;
    if port == 0 {
        return Err(usage(
            "--port 0: with --raw, give the UDP port the frames are sent to",
        ));
    }
    let (ns, tif) = to.split_once(':').unwrap_or(("", to));
    let src_mac = sweep::target_mac(None, iface).map_err(|e| usage(format!("--raw: {e}")))?;
    let dst_mac = sweep::target_mac(Some(ns), tif).map_err(sweep_error)?;
    let src_ip = sweep::target_address(None, iface).unwrap_or(Ipv4Addr::new(198, 18, 0, 1));
    let dst_ip = sweep::target_address(Some(ns), tif).unwrap_or(Ipv4Addr::new(198, 18, 0, 2));
    let p = linerate::open_tx(uri, &PortOptions::default())
        .map_err(|e| crate::common::port_error("--raw", uri, e))?;
    Ok(Sender::Raw {
        port: p,
        template: TemplateSpec {
            src_mac,
            dst_mac,
            src_ip: src_ip.into(),
            dst_ip: dst_ip.into(),
            sport: 1024 + (run_id % 32768) as u16,
            dport: port,
            ..TemplateSpec::default()
        },
    })
}

/// `linerate sweep --serve`: the receiver for `--to HOST` on other hosts.
fn serve(a: &Args, stop: &std::sync::atomic::AtomicBool) -> anyhow::Result<ExitCode> {
    let ip = a.bind.unwrap_or(Ipv4Addr::UNSPECIFIED);
    let listener = TcpListener::bind((ip, a.port)).map_err(|e| {
        usage(format!(
            "--port {}: cannot listen on TCP {ip}:{}: {e}",
            a.port, a.port
        ))
    })?;
    let port = listener.local_addr()?.port();
    let mut sink = LocalSink::bind(
        None,
        SocketAddrV4::new(ip, port),
        a.rcvbuf.map(|b| b as usize),
    )
    .map_err(|e| usage(format!("--port {port}: {e}")))?;
    let lim = sweep::SERVE_LIMITS;
    let mut out = std::io::stdout().lock();
    if a.json {
        let _ = writeln!(
            out,
            "{}",
            json!({"type": "listening", "addr": format!("{ip}:{port}"), "rcvbuf": sink.rcvbuf(),
                   "max_secs": lim.max_secs, "max_sizes": lim.max_sizes, "max_rcvbuf": lim.max_rcvbuf})
        );
    } else {
        let _ = writeln!(
            out,
            "linerate sweep --serve: control on TCP {ip}:{port}, messages on UDP {ip}:{port}, \
             receive socket {} B; one client at a time, each at most {} sizes of {} s and a \
             {} B receive buffer; Ctrl-C stops",
            group(sink.rcvbuf() as u64),
            lim.max_sizes,
            lim.max_secs,
            group(lim.max_rcvbuf)
        );
    }
    let _ = out.flush();
    drop(out);
    let json_out = a.json;
    sweep::serve(&listener, &mut sink, sweep::SERVE_LIMITS, stop, |line| {
        let mut o = std::io::stdout().lock();
        if json_out {
            let _ = writeln!(o, "{}", json!({"type": "log", "text": line}));
        } else {
            let _ = writeln!(o, "{line}");
        }
        let _ = o.flush();
    })
    .map_err(anyhow::Error::new)?;
    Ok(ExitCode::SUCCESS)
}

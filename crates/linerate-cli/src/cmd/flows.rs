//! `linerate flows`: Argus-style bidirectional flow records, with IPFIX export.

use crate::common::{flags, metrics, stop_flag, usage};
use clap::Parser;
use linerate::apps::flow::ipfix::{self, ExportStats, IpfixError, IpfixOptions, UdpExporter};
use linerate::apps::flow::kafka::{host_name, KafkaExporter, KafkaOptions, KafkaStats};
use linerate::apps::flow::key::NotFlow;
use linerate::apps::flow::record::{
    EndReason, Field, FlowRecord, Format, RecordFormat, RecordWriter,
};
use linerate::apps::flow::table::TableConfig;
use linerate::apps::flow::threads::FlowInput;
use linerate::apps::flow::{self, Ended, FlowLive, FlowOptions, FlowReport, RecordSink};
use linerate::filter::Filter;
use linerate::port::file::{self, RecordFile};
use linerate::port::{Drops, PortOptions};
use linerate::stats::group;
use linerate::stats::prom::{Dir, PortCount};
use std::io::Write;
use std::net::ToSocketAddrs;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// Flags of `linerate flows`.
#[derive(Parser, Debug)]
pub struct Args {
    /// Input port: pcap:FILE (or a path), afpacket:IFACE, xdp:IFACE[@QUEUES], cluster:ID@Q (a
    /// queue of `linerate balance`), mem:NAME, or a,b.
    #[arg(short = 'i', long = "in", value_name = "PORT")]
    input: String,
    /// BPF filter in libpcap syntax, run before flow accounting (in user space, on every
    /// thread): packets it rejects are put in no flow and counted `filtered` in the summary.
    #[arg(short = 'f', long, value_name = "EXPR")]
    filter: Option<String>,
    /// Worker threads, each with its own table and a symmetric-hash share of the flows.
    #[arg(short = 'T', long, value_name = "N", default_value = "1", value_parser = flags::int(1usize, 64))]
    threads: usize,
    /// Pin the packet thread (read, parse, flow table) to this core; the export threads
    /// (Kafka's producer and librdkafka's, the metrics endpoint) are left to the scheduler.
    /// One thread only: with --threads, pin the process with taskset.
    #[arg(short = 'g', long, value_name = "CORE", value_parser = flags::int(0, flags::MAX_CORE))]
    core: Option<usize>,
    /// Report and remove a flow after this long without a packet.
    #[arg(long, value_name = "SECONDS", default_value = "60", value_parser = flags::duration(flags::TIMEOUT))]
    idle_timeout: Duration,
    /// Status record of each flow that goes on, every this often (0: only at the end).
    #[arg(long, value_name = "SECONDS", default_value = "60", value_parser = flags::duration(flags::INTERVAL_OR_OFF))]
    status_interval: Duration,
    /// How long a TCP flow closed by FIN or RST waits for stragglers before its record.
    #[arg(long, value_name = "SECONDS", default_value = "5", value_parser = flags::duration(flags::WAIT))]
    linger: Duration,
    /// Most flows held at once per thread (memory is allocated up front); units allowed: 1M.
    #[arg(long, value_name = "N", default_value = "256k", value_parser = flags::count(1, (u32::MAX / 2) as u64))]
    max_flows: u64,
    /// Write records to FILE (.txt, .csv or .jsonl picks the format; - for standard output).
    /// Default: text on standard output unless --ipfix is given.
    #[arg(short = 'w', long, value_name = "FILE")]
    write: Option<String>,
    /// Record format, overriding the file name's: text, csv, jsonl.
    #[arg(long, value_name = "FORMAT")]
    format: Option<String>,
    /// Export records over IPFIX/UDP to HOST[:PORT] (port 4739 by default).
    #[arg(long, value_name = "HOST:PORT")]
    ipfix: Option<String>,
    /// Export each flow as two uniflow IPFIX records instead of one RFC 5103 biflow (with
    /// --ipfix only).
    #[arg(long)]
    ipfix_uniflow: bool,
    /// Largest IPFIX message in bytes (the UDP payload): at least 285 (220 with
    /// --ipfix-uniflow: the templates and one record), at most 65507.
    #[arg(long, value_name = "BYTES", default_value = "1400", value_parser = linerate::units::parse_size)]
    ipfix_mtu: u64,
    /// IPFIX observation domain id.
    #[arg(long, value_name = "ID", default_value = "1")]
    ipfix_domain: u32,
    /// The longest a due record waits before it leaves: in a partly filled IPFIX message, in
    /// the -w file's buffer (Kafka's producer sends within its linger.ms, which may not be
    /// longer); a timer sends it whether or not more traffic comes. 0: at once.
    #[arg(long, value_name = "SECONDS", default_value = "1", value_parser = flags::duration(flags::WAIT))]
    ipfix_flush: Duration,
    /// Export records into Apache Kafka: BROKERS/TOPIC, BROKERS host:port[,host:port...]. One
    /// JSON message per record (the -w x.jsonl fields plus "probe"), keyed by the canonical
    /// bidirectional flow key (see docs/flows.md, "Many probes, one topic").
    #[arg(long, value_name = "BROKERS/TOPIC")]
    kafka: Option<String>,
    /// A librdkafka setting, key=value (repeatable): acks, compression.type, linger.ms,
    /// security.protocol, ssl.*, sasl.* ... Defaults: acks=all, compression.type=lz4,
    /// linger.ms=5, partitioner=murmur2_random.
    #[arg(long, value_name = "KEY=VALUE", requires = "kafka")]
    kafka_opt: Vec<String>,
    /// This probe's name in every Kafka record ("probe"); default: the host name.
    #[arg(long, value_name = "NAME", requires = "kafka")]
    probe_id: Option<String>,
    /// How long to wait for a broker at the start, and for acknowledgements at the end
    /// (what is unacknowledged then is counted failed).
    #[arg(long, value_name = "SECONDS", default_value = "10", value_parser = flags::duration(flags::Durations {
        min: Duration::from_millis(1),
        max: Duration::from_secs(3600),
        off: false,
    }))]
    kafka_timeout: Duration,
    /// Records the queue between the flow table and the Kafka producer holds (default: as many
    /// as the default table, so the end of the input never waits): on a live port a full queue
    /// drops records (counted queue_full), a file waits for room.
    #[arg(long, value_name = "N", default_value = "262144", value_parser = flags::count(1, 16_000_000), requires = "kafka")]
    kafka_queue: u64,
    #[command(flatten)]
    metrics: metrics::MetricsArgs,
    /// Columns, comma separated (`all`, `default`, or names: stime,ltime,dur,flgs,proto,saddr,
    /// sport,dir,daddr,dport,spkts,dpkts,sbytes,dbytes,state,sflags,dflags,itype,icode,reason,vlan,
    /// smac,dmac,sminttl,smaxttl,dminttl,dmaxttl). sflags/dflags: the OR of the TCP flags each
    /// side sent (SAFRPUEC letters); smac/dmac: the initiator's and responder's Ethernet
    /// addresses; s/d min/max TTL: the TTL (hop limit) range of each side's packets.
    #[arg(long, value_name = "LIST", default_value = "default")]
    fields: String,
    /// Stop after COUNT packets (after filtering, as count -c); units allowed: 10k, 1M. One
    /// thread: with --threads N, bound the run with -t.
    #[arg(short = 'c', long, value_name = "COUNT", value_parser = flags::count(1, flags::MAX_PACKETS))]
    count: Option<u64>,
    /// Stop after this long (a live port otherwise runs until a signal): the flows still open
    /// are reported as at the end of a file, and the summary says `ended: time limit`.
    #[arg(short = 't', long, value_name = "SECONDS", value_parser = flags::duration(flags::RUN))]
    duration: Option<Duration>,
    /// Print the start line and the final summary as JSON lines (on standard error: standard
    /// output is the records' unless -w, --ipfix or --kafka takes them).
    #[arg(long)]
    json: bool,
    /// Print no summary.
    #[arg(short = 'q', long)]
    quiet: bool,
    /// Which packets of an afpacket: input to meter (default: inout, as tcpdump).
    #[command(flatten)]
    capture: crate::common::capture::CaptureFlags,
    #[command(flatten)]
    service: crate::common::service::ServiceFlags,
    /// Which header keys a tunnelled packet (GRE, IPIP, 6in4, VXLAN on UDP 4789): outer (the
    /// tunnel's own, as argus; a GRE flow between the endpoints) or inner (the packet inside, as
    /// tshark shows it).
    #[arg(long, value_name = "outer|inner", default_value = "outer")]
    tunnels: flow::Tunnels,
}

struct Sinks {
    writer: Option<RecordWriter<Box<dyn Write + Send>>>,
    ipfix: Option<(UdpExporter, std::net::SocketAddr)>,
    kafka: Option<KafkaExporter>,
    write_error: Option<std::io::Error>,
    /// Live input: records are flushed as they come, not when the buffer fills.
    flush_each: bool,
    /// The longest a record waits in the writer's buffer (`--ipfix-flush`).
    flush_every: Duration,
    /// When the oldest record not yet flushed to the writer's output was written.
    unflushed: Option<std::time::Instant>,
}

impl Sinks {
    fn flush_writer(&mut self) {
        if let Some(w) = &mut self.writer {
            if self.write_error.is_none() {
                if let Err(e) = w.flush() {
                    self.write_error = Some(e);
                }
            }
        }
        self.unflushed = None;
    }
}

impl RecordSink for Sinks {
    fn records(&mut self, recs: &[FlowRecord]) {
        if let Some(w) = &mut self.writer {
            if self.write_error.is_none() {
                for r in recs {
                    if let Err(e) = w.write(r) {
                        self.write_error = Some(e);
                        break;
                    }
                }
                self.unflushed.get_or_insert_with(std::time::Instant::now);
            }
            if self.flush_each {
                self.flush_writer();
            }
        }
        if let Some((x, _)) = &mut self.ipfix {
            x.records(recs);
        }
        if let Some(k) = &self.kafka {
            k.records(recs);
        }
    }

    fn formatter(&self) -> Option<RecordFormat> {
        match (&self.writer, &self.ipfix, &self.kafka) {
            (Some(w), None, None) => Some(w.formatter()),
            _ => None,
        }
    }

    fn lines(&mut self, lines: &[u8]) {
        if let Some(w) = &mut self.writer {
            if self.write_error.is_none() {
                if let Err(e) = w.write_lines(lines) {
                    self.write_error = Some(e);
                }
                self.unflushed.get_or_insert_with(std::time::Instant::now);
            }
            if self.flush_each {
                self.flush_writer();
            }
        }
    }

    fn ending(&mut self) {
        if let Some(k) = &self.kafka {
            k.set_wait_when_full(true);
        }
    }

    fn tick(&mut self) {
        if let Some((x, _)) = &mut self.ipfix {
            x.tick();
        }
        if self
            .unflushed
            .is_some_and(|t| t.elapsed() >= self.flush_every)
        {
            self.flush_writer();
        }
    }
}

/// Bytes of records buffered before they are written.
const OUT_BUF: usize = 64 << 10;

/// `-t`: sets the stop flag once the duration has passed, unless the run ended before.
struct Deadline {
    /// Set by the timer when the duration passed (it then set the stop flag).
    passed: Arc<std::sync::atomic::AtomicBool>,
    /// Set when the run is over: the timer leaves the stop flag alone from then on (a later
    /// wait, Kafka's acknowledgements, re-arms it for signals only).
    done: Arc<std::sync::atomic::AtomicBool>,
}

impl Deadline {
    fn start(stop: &Arc<std::sync::atomic::AtomicBool>, d: Duration) -> Deadline {
        let t = Deadline {
            passed: Default::default(),
            done: Default::default(),
        };
        let (stop, passed, done) = (stop.clone(), t.passed.clone(), t.done.clone());
        let end = std::time::Instant::now() + d;
        std::thread::spawn(move || {
            while !done.load(Ordering::SeqCst) && !stop.load(Ordering::SeqCst) {
                let now = std::time::Instant::now();
                if now >= end {
                    passed.store(true, Ordering::SeqCst);
                    stop.store(true, Ordering::SeqCst);
                    return;
                }
                std::thread::sleep((end - now).min(Duration::from_millis(20)));
            }
        });
        t
    }

    /// Whether the duration passed (and stopped the run); the timer stops either way.
    fn passed(&self) -> bool {
        self.done.store(true, Ordering::SeqCst);
        self.passed.load(Ordering::SeqCst)
    }
}

fn secs_ns(d: Duration) -> u64 {
    d.as_nanos().min(u64::MAX as u128) as u64
}

/// What the Kafka export ended with: its counters, its options, its last error.
type KafkaEnd = (KafkaStats, KafkaOptions, Option<String>);

/// Runs `linerate flows`: checks the flags, connects the exporters, opens the input and
/// the record output, meters the flows, and reports.
pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    let service = a.service.check()?;
    if a.count.is_some() && a.threads > 1 {
        return Err(usage(format!(
            "-c with --threads {}: the count is exact on one thread only (each thread reads \
             its own share); bound a threaded run with -t, or drop --threads",
            a.threads
        )));
    }
    let stop = stop_flag()?;
    check_flags(&a)?;
    let fields = Field::parse_list(&a.fields).map_err(|e| usage(format!("--fields: {e}")))?;
    let format = record_format(&a)?;
    metrics::refuse_textfile_as(
        &a.metrics,
        &[("-w", a.write.as_deref()), ("-i", Some(a.input.as_str()))],
    )?;
    let kafka = connect_kafka(&a)?;
    // The collector's socket is opened and connected (an unreachable network fails here) before
    // any output is started: a failure leaves the -w file, the metrics textfile and endpoint
    // untouched, as the Kafka connection above does.
    let ipfix = open_ipfix(&a, &fields)?;
    let live = Arc::new(FlowLive::default());
    let metrics = start_metrics(&a, &live, kafka.as_ref())?;
    // flows prints its own lines (JSON ones with --json): the endpoint started quiet.
    metrics::announce_linger(!a.quiet && !a.json);
    // Both directions by default on afpacket (a probe meters what the host sends too).
    a.capture.check_xdp(&[&a.input])?;
    let popts = a.capture.apply(
        "-i",
        &a.input,
        linerate::port::Capture::InOut,
        PortOptions {
            frames: 16_384,
            ..Default::default()
        },
    )?;
    // Each thread reads its own share of the input (queues, fanout sockets, groups of records).
    let input = FlowInput::open(&a.input, &popts, a.threads)
        .map_err(|e| crate::common::port_error("-i", &a.input, e))?;
    let out = open_records_output(&a)?;
    if let Some(expr) = &a.filter {
        Filter::compile(expr, input.link_type()).map_err(|e| usage(format!("-f: {e}")))?;
    }
    let is_live = input.is_live();
    let opts = FlowOptions {
        table: TableConfig {
            max_flows: a.max_flows as u32,
            idle_ns: secs_ns(a.idle_timeout),
            linger_ns: secs_ns(a.linger),
            status_ns: secs_ns(a.status_interval),
        },
        threads: a.threads,
        wall_clock: is_live,
        ring_size: 2048,
        live: metrics.as_ref().map(|_| live.clone()),
        tunnels: a.tunnels,
        filter: a.filter.clone(),
        extras: fields.iter().any(|f| f.needs_extra()),
        count: a.count,
    };
    // A file waits for the broker without losing packets; live packets never wait (a full
    // queue counts queue_full).
    if let Some(k) = &kafka {
        k.set_wait_when_full(!is_live);
    }
    // Every port and output is open: the pidfile, then -Z.
    let _running = service.start()?;
    let mut sinks = Sinks {
        writer: out.map(|o| RecordWriter::new(o, format, fields)),
        ipfix,
        kafka,
        write_error: None,
        flush_each: is_live,
        flush_every: a.ipfix_flush,
        unflushed: None,
    };
    if !a.quiet {
        announce(&a, &input, &sinks, metrics.as_ref());
    }
    // Pinned only now: the threads started above (Kafka's, the metrics endpoint) keep every core.
    crate::common::pin(a.core)?;
    linerate::port::file::start_writing();
    let timer = a.duration.map(|d| Deadline::start(&stop, d));
    let mut report = flow::threads::run_input(input, &opts, &stop, &mut sinks);
    if timer.is_some_and(|t| t.passed()) && report.ended == Ended::Stopped {
        report.ended = Ended::Duration;
    }
    if let Some(w) = &mut sinks.writer {
        if let Err(e) = w.flush() {
            sinks.write_error.get_or_insert(e);
        }
    }
    // Refusals of the last messages come back within a round trip.
    let export = sinks.ipfix.as_mut().map(|(x, to)| {
        x.finish(Duration::from_millis(200));
        (x.stats(), *to)
    });
    // A signal that stopped the input above must not also cut the wait for acknowledgements
    // short: re-arm the flag, so that a new signal ends the wait (within ~20 ms; what is
    // unacknowledged then is counted failed) and a later one ends the process.
    crate::common::rearm_stop(&stop);
    let kstats = sinks.kafka.as_mut().map(|k| finish_kafka(&a, k, &stop));
    let k = kstats.as_ref().map(|(s, o, _)| (s, o));
    if let Some(m) = &metrics {
        publish(m, &a.input, &report, k, export.as_ref());
    }
    if !a.quiet {
        let s = if a.json {
            json_summary(&report, export, k)
        } else {
            text_summary(&report, a.filter.is_some(), export, k)
        };
        let _ = std::io::stderr().write_all(s.as_bytes());
    }
    exit_status(&a, report, sinks.write_error, kstats, export)
}

/// The flags that go only with others, or within limits: refused before anything opens.
fn check_flags(a: &Args) -> anyhow::Result<()> {
    if a.ipfix_uniflow && a.ipfix.is_none() {
        return Err(usage(
            "--ipfix-uniflow shapes the records sent to an IPFIX collector: give --ipfix \
             HOST[:PORT] too",
        ));
    }
    let min = ipfix::min_message(a.ipfix_uniflow);
    if a.ipfix_mtu < min as u64 || a.ipfix_mtu > ipfix::MAX_MESSAGE as u64 {
        return Err(usage(format!(
            "--ipfix-mtu {}: between {min} and {} bytes (the templates and one record need {min}{})",
            a.ipfix_mtu,
            ipfix::MAX_MESSAGE,
            if a.ipfix_uniflow { " with --ipfix-uniflow" } else { "" }
        )));
    }
    if a.core.is_some() && a.threads > 1 {
        return Err(usage(format!(
            "-g pins the one packet thread: it does not go with --threads {} (pin the process \
             with taskset -c instead)",
            a.threads
        )));
    }
    if let Some(c) = a.core.filter(|&c| !crate::common::core_exists(c)) {
        return Err(usage(format!(
            "-g {c}: no such core (this machine has cores 0..{})",
            std::thread::available_parallelism().map_or(1, |n| n.get()) - 1
        )));
    }
    Ok(())
}

/// The records' format: --format, else by -w's name, else text.
fn record_format(a: &Args) -> anyhow::Result<Format> {
    Ok(match a.format.as_deref() {
        None => a.write.as_deref().map_or(Format::Text, Format::from_path),
        Some("text") | Some("txt") => Format::Text,
        Some("csv") => Format::Csv,
        Some("jsonl") | Some("json") => Format::Jsonl,
        Some(f) => return Err(usage(format!("--format: '{f}' (use text, csv or jsonl)"))),
    })
}

/// The Kafka producer of --kafka, its options checked (records due leave within
/// --ipfix-flush whatever the output).
fn connect_kafka(a: &Args) -> anyhow::Result<Option<KafkaExporter>> {
    let Some(target) = &a.kafka else {
        return Ok(None);
    };
    let probe = a.probe_id.clone().unwrap_or_else(host_name);
    let mut o = KafkaOptions::parse(target, &probe).map_err(|e| {
        let flag = if e.to_string().starts_with("probe id") {
            "--probe-id"
        } else {
            "--kafka"
        };
        usage(format!("{flag}: {e}"))
    })?;
    for kv in &a.kafka_opt {
        o.set(kv).map_err(|e| usage(format!("--kafka-opt {e}")))?;
    }
    for (k, v) in &o.settings {
        let ms = v.parse::<f64>().unwrap_or(0.0);
        if (k == "linger.ms" || k == "queue.buffering.max.ms")
            && ms > a.ipfix_flush.as_secs_f64() * 1000.0
        {
            return Err(usage(format!(
                "--kafka-opt {k}={v}: records would wait longer than --ipfix-flush {} s \
                 (lower it, or raise --ipfix-flush)",
                a.ipfix_flush.as_secs_f64()
            )));
        }
    }
    o.timeout = a.kafka_timeout;
    o.queue = a.kafka_queue as usize;
    let k = KafkaExporter::connect(o).map_err(|e| {
        let msg = format!("--kafka {target}: {e}");
        if matches!(e, linerate::apps::flow::kafka::KafkaError::Config(_)) {
            usage(msg)
        } else {
            anyhow::anyhow!(msg)
        }
    })?;
    Ok(Some(k))
}

/// The IPFIX exporter of --ipfix, its socket connected to the collector.
fn open_ipfix(
    a: &Args,
    fields: &[Field],
) -> anyhow::Result<Option<(UdpExporter, std::net::SocketAddr)>> {
    let Some(dest) = &a.ipfix else {
        return Ok(None);
    };
    let with_port = ipfix_dest(dest);
    let addr = with_port
        .to_socket_addrs()
        .map_err(|e| usage(format!("--ipfix {dest}: {e}")))?
        .next()
        .ok_or_else(|| usage(format!("--ipfix {dest}: no address")))?;
    if addr.port() == 0 {
        return Err(usage(format!(
            "--ipfix {dest}: port 0 is no port: a port between 1 and 65535 (4739 by \
             default)"
        )));
    }
    let opts = IpfixOptions {
        domain: a.ipfix_domain,
        max_message: a.ipfix_mtu as usize,
        uniflow: a.ipfix_uniflow,
        extras: fields.iter().any(|f| f.needs_extra()),
        ..Default::default()
    };
    let mut x = UdpExporter::new(addr, opts).map_err(|e| match e {
        IpfixError::MessageSize { .. } => usage(format!("--ipfix-mtu {}: {e}", a.ipfix_mtu)),
        e => anyhow::Error::new(e).context(format!("--ipfix {dest}")),
    })?;
    x.set_flush(a.ipfix_flush);
    Ok(Some((x, addr)))
}

/// The metrics endpoint renders at each scrape, on its own thread, from the input loop's
/// counters and the exporter's; the summary's figures replace them at the end.
fn start_metrics(
    a: &Args,
    live: &Arc<FlowLive>,
    kafka: Option<&KafkaExporter>,
) -> anyhow::Result<Option<metrics::Metrics>> {
    let kafka_text = kafka.map(|k| {
        let stats = k.stats_handle();
        let (topic, probe) = (k.options().topic.clone(), k.options().probe.clone());
        move || stats().prometheus(&topic, &probe)
    });
    let (l, input, kt) = (live.clone(), a.input.clone(), kafka_text);
    metrics::start_live(&a.metrics, "flows", true, move |e| {
        let c = PortCount {
            packets: l.packets.load(Ordering::Relaxed),
            bytes: l.bytes.load(Ordering::Relaxed),
            drops: Drops::default(),
        };
        e.port(&input, Dir::Rx, &c);
        if let Some(k) = &kt {
            e.append(&k());
        }
    })
}

/// Where the records go: -w (a file, or - for standard output), else standard output
/// unless an exporter takes them. Every record reaches the output whole (a stop by any
/// signal leaves no cut line); the input is never an output.
fn open_records_output(a: &Args) -> anyhow::Result<Option<Box<dyn Write + Send>>> {
    let inputs = crate::common::inputs_of([a.input.as_str()]);
    Ok(match a.write.as_deref() {
        // Deferred: an existing file keeps its bytes until every flag is checked.
        Some("-") => Some(Box::new(RecordFile::stdout_deferred(OUT_BUF))),
        Some(p) => Some(Box::new(RecordFile::deferred(
            file::open_deferred(p, &inputs).map_err(|e| usage(format!("-w: {e}")))?,
            OUT_BUF,
        ))),
        None if a.ipfix.is_none() && a.kafka.is_none() => {
            Some(Box::new(RecordFile::stdout(OUT_BUF)))
        }
        None => None,
    })
}

/// The start lines (or JSON record) on standard error: the input, Kafka, the metrics.
fn announce(a: &Args, input: &FlowInput, sinks: &Sinks, metrics: Option<&metrics::Metrics>) {
    let link = input.link_type().0;
    let maddr = metrics.and_then(|m| m.addr()).map(|a| a.to_string());
    if a.json {
        let mut j = serde_json::json!({"type": "start", "input": a.input, "link_type": link,
                "threads": a.threads, "plan": input.plan(), "max_flows": a.max_flows,
                "filter": a.filter});
        if let Some(k) = &sinks.kafka {
            j["kafka"] = k.options().target().into();
            j["probe"] = k.options().probe.clone().into();
        }
        if let Some(m) = &maddr {
            j["metrics"] = m.clone().into();
        }
        eprintln!("{j}");
        return;
    }
    eprintln!(
        "Flows from {} (link type {link}), {}{}",
        a.input,
        input.plan(),
        a.filter
            .as_deref()
            .map(|f| format!(", filter '{f}'"))
            .unwrap_or_default()
    );
    if let Some(n) = sinks.kafka.as_ref().and_then(|k| k.note()) {
        eprintln!("note: {n}");
    }
    if let Some(k) = &sinks.kafka {
        eprintln!(
            "Records into Kafka {} as probe {}",
            k.options().target(),
            k.options().probe
        );
    }
    if let Some(m) = &maddr {
        eprintln!("Metrics on http://{m}/metrics");
    }
}

/// Waits (up to --kafka-timeout, or a signal) for the broker to acknowledge the records
/// still pending, saying so first.
fn finish_kafka(a: &Args, k: &mut KafkaExporter, stop: &std::sync::atomic::AtomicBool) -> KafkaEnd {
    let pending = k.stats().pending();
    if !a.quiet && pending > 0 {
        if a.json {
            eprintln!(
                "{}",
                serde_json::json!({"type": "kafka_wait", "pending": pending,
                    "timeout": a.kafka_timeout.as_secs_f64()})
            );
        } else {
            eprintln!(
                "Waiting up to {} s for Kafka to acknowledge {} records (Ctrl-C to stop waiting)",
                a.kafka_timeout.as_secs_f64(),
                group(pending)
            );
        }
    }
    let s = k.finish(stop);
    (s, k.options().clone(), k.last_error())
}

/// The exit: an error writing records (a closed pipe is how `| head` ends a run), records
/// Kafka did not take, an input error, or IPFIX messages that failed.
fn exit_status(
    a: &Args,
    report: FlowReport,
    write_error: Option<std::io::Error>,
    kstats: Option<KafkaEnd>,
    export: Option<(ExportStats, std::net::SocketAddr)>,
) -> anyhow::Result<ExitCode> {
    if let Some(e) = write_error {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            return Err(anyhow::Error::new(e).context("writing records"));
        }
    }
    if let Some((s, o, last)) = &kstats {
        if s.failed_total() > 0 {
            let why = match last {
                Some(l) => format!("; last error from {}: {l}", o.brokers),
                None => format!(" (broker {})", o.brokers),
            };
            return Err(anyhow::anyhow!(
                "--kafka {}: {} of {} records did not reach the topic ({}){why}",
                o.target(),
                group(s.failed_total()),
                group(s.records),
                s.failures_text()
            ));
        }
    }
    if let Some(e) = report.error {
        return Err(anyhow::Error::new(e).context(format!(
            "{}: stopped after {} packets",
            a.input,
            group(report.packets)
        )));
    }
    if let Some((x, to)) = export.filter(|(x, _)| x.failed_messages > 0) {
        anyhow::bail!(
            "IPFIX export to {to}: {} of {} messages ({} of {} records) failed{}",
            group(x.failed_messages),
            group(x.messages),
            group(x.failed_records),
            group(x.records),
            x.last_error().map(|e| format!(": {e}")).unwrap_or_default()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// flows' final metrics: the input's counters as the summary gives them, what was not put in a
/// flow by reason, the table's counters, and the Kafka export's (docs/flows.md).
fn publish(
    m: &metrics::Metrics,
    input: &str,
    r: &FlowReport,
    k: Option<(&KafkaStats, &KafkaOptions)>,
    x: Option<&(ExportStats, std::net::SocketAddr)>,
) {
    let mut e = m.exposition();
    let c = PortCount {
        packets: r.packets,
        bytes: r.bytes,
        drops: r.port.rx_drops,
    };
    e.port(input, Dir::Rx, &c);
    for n in NotFlow::ALL {
        e.counter(
            "linerate_flows_not_flow_total",
            "Packets received but not put in a flow, by reason.",
            &[("reason", n.name())],
            r.not_flow[n as usize],
        );
    }
    e.counter(
        "linerate_flows_filtered_total",
        "Packets the -f filter rejected (put in no flow).",
        &[],
        r.filtered,
    );
    let t = &r.table;
    e.counter(
        "linerate_flows_created_total",
        "Flows created.",
        &[],
        t.flows,
    );
    for x in EndReason::ALL {
        e.counter(
            "linerate_flows_records_total",
            "Flow records emitted, by reason.",
            &[("reason", x.name())],
            t.records[x.index()],
        );
    }
    e.counter(
        "linerate_flows_evicted_total",
        "Flows removed early because the table was full.",
        &[],
        t.evicted,
    );
    e.gauge(
        "linerate_flows_active",
        "Flows in the table.",
        &[],
        t.active as f64,
    );
    if let Some((s, o)) = k {
        e.append(&s.prometheus(&o.topic, &o.probe));
    }
    if let Some((s, to)) = x {
        let to = to.to_string();
        let l = [("collector", to.as_str())];
        e.counter(
            "linerate_flows_ipfix_messages_total",
            "IPFIX messages handed to the socket.",
            &l,
            s.messages,
        );
        e.counter(
            "linerate_flows_ipfix_records_total",
            "IPFIX data records in those messages.",
            &l,
            s.records,
        );
        e.counter(
            "linerate_flows_ipfix_failed_messages_total",
            "IPFIX messages that failed (refused by the socket or the collector's host).",
            &l,
            s.failed_messages,
        );
        e.counter(
            "linerate_flows_ipfix_failed_records_total",
            "IPFIX data records in the failed messages.",
            &l,
            s.failed_records,
        );
    }
    m.publish(&e);
}

/// `HOST`, `HOST:PORT`, `ADDR6`, `[ADDR6]:PORT` → something `to_socket_addrs` takes, with port
/// 4739 when none is given.
fn ipfix_dest(dest: &str) -> String {
    if dest.parse::<std::net::Ipv6Addr>().is_ok() {
        return format!("[{dest}]:4739");
    }
    if dest.starts_with('[') && dest.ends_with(']') {
        return format!("{dest}:4739");
    }
    match dest.rsplit_once(':') {
        Some((h, p)) if !h.is_empty() && p.parse::<u16>().is_ok() => dest.to_string(),
        _ => format!("{dest}:4739"),
    }
}

fn ended_name(e: Ended) -> &'static str {
    match e {
        Ended::Error => "input error",
        e => e.text(),
    }
}

fn text_summary(
    r: &FlowReport,
    filter: bool,
    x: Option<(ExportStats, std::net::SocketAddr)>,
    k: Option<(&KafkaStats, &KafkaOptions)>,
) -> String {
    let secs = r.elapsed.as_secs_f64().max(1e-9);
    let t = &r.table;
    let mut s = String::new();
    s.push_str(&format!(
        "Summary: {} pkts, {} bytes in {:.3} s ({} pkt/s); {} flows ({} flows/s), {} records; ended: {}\n",
        group(r.packets),
        group(r.bytes),
        secs,
        group((r.packets as f64 / secs) as u64),
        group(t.flows),
        group((t.flows as f64 / secs) as u64),
        group(t.records.iter().sum()),
        ended_name(r.ended),
    ));
    let reasons: Vec<String> = EndReason::ALL
        .iter()
        .map(|e| format!("{} {}", e.name(), group(t.records[e.index()])))
        .collect();
    s.push_str(&format!("Records by reason: {}\n", reasons.join(", ")));
    let nf: Vec<String> = NotFlow::ALL
        .iter()
        .filter(|n| r.not_flow[**n as usize] > 0)
        .map(|n| format!("{} {}", n.name(), group(r.not_flow[*n as usize])))
        .collect();
    if filter || r.filtered > 0 {
        s.push_str(&format!("Filtered: {} pkts\n", group(r.filtered)));
    }
    s.push_str(&format!(
        "Not in a flow: {} pkts{}\n",
        group(r.not_flow_total()),
        if nf.is_empty() {
            String::new()
        } else {
            format!(" ({})", nf.join(", "))
        }
    ));
    s.push_str(&format!(
        "Flow table: {} thread(s), {} B per flow, {} MiB, peak {} flows, {} evicted (table full)\n",
        r.threads,
        r.bytes_per_flow,
        r.table_bytes / (1 << 20),
        group(t.max_active),
        group(t.evicted)
    ));
    if r.port.rx_drops.total() > 0 {
        s.push_str(&format!(
            "Input drops: {}\n",
            linerate::stats::breakdown(&r.port.rx_drops)
        ));
    }
    if let Some((x, to)) = x {
        s.push_str(&format!(
            "IPFIX to {to}: {} flows, {} records in {} messages ({} bytes); failed: {} messages ({} records){}\n",
            group(x.flows),
            group(x.records),
            group(x.messages),
            group(x.bytes),
            group(x.failed_messages),
            group(x.failed_records),
            x.last_error().map(|e| format!(": {e}")).unwrap_or_default()
        ));
    }
    if let Some((k, o)) = k {
        s.push_str(&format!(
            "Kafka {} (probe {}): {} records, {} acknowledged ({} bytes), {} failed ({})\n",
            o.target(),
            o.probe,
            group(k.records),
            group(k.acked),
            group(k.acked_bytes),
            group(k.failed_total()),
            k.failures_text()
        ));
    }
    s
}

fn json_summary(
    r: &FlowReport,
    x: Option<(ExportStats, std::net::SocketAddr)>,
    k: Option<(&KafkaStats, &KafkaOptions)>,
) -> String {
    let secs = r.elapsed.as_secs_f64().max(1e-9);
    let t = &r.table;
    let mut reasons = serde_json::Map::new();
    for e in EndReason::ALL {
        reasons.insert(e.name().into(), t.records[e.index()].into());
    }
    let mut nf = serde_json::Map::new();
    for n in NotFlow::ALL {
        nf.insert(n.name().into(), r.not_flow[n as usize].into());
    }
    let mut drops = serde_json::Map::new();
    for d in linerate::port::DropReason::ALL {
        drops.insert(d.name().into(), r.port.rx_drops.get(d).into());
    }
    let mut j = serde_json::json!({
        "type": "summary",
        "packets": r.packets,
        "bytes": r.bytes,
        "seconds": secs,
        "pps": r.packets as f64 / secs,
        "flows": t.flows,
        "flows_per_sec": t.flows as f64 / secs,
        "records": t.records.iter().sum::<u64>(),
        "records_by_reason": reasons,
        "not_flow": nf,
        "filtered": r.filtered,
        "flow_packets": t.packets,
        "evicted": t.evicted,
        "max_active": t.max_active,
        "bytes_per_flow": r.bytes_per_flow,
        "table_bytes": r.table_bytes,
        "threads": r.threads,
        "input_drops": drops,
        "ended": ended_name(r.ended),
    });
    if let Some((x, to)) = x {
        j["ipfix"] = serde_json::json!({
            "collector": to.to_string(), "flows": x.flows, "records": x.records,
            "messages": x.messages, "bytes": x.bytes, "failed_messages": x.failed_messages,
            "failed_records": x.failed_records,
            "error": x.last_error().map(|e| e.to_string()),
        });
    }
    if let Some((k, o)) = k {
        let mut failed = serde_json::Map::new();
        for f in linerate::apps::flow::kafka::Failure::ALL {
            failed.insert(f.name().into(), k.failed[f as usize].into());
        }
        j["kafka"] = serde_json::json!({
            "target": o.target(), "probe": o.probe, "records": k.records,
            "produced": k.produced, "acked": k.acked, "acked_bytes": k.acked_bytes,
            "failed": k.failed_total(), "failed_by_reason": failed,
        });
    }
    if let Some(e) = &r.error {
        j["error"] = e.to_string().into();
    }
    format!("{j}\n")
}

#[cfg(test)]
mod tests {
    use super::ipfix_dest;

    #[test]
    fn ipfix_destinations_get_the_default_port() {
        assert_eq!(ipfix_dest("127.0.0.1"), "127.0.0.1:4739");
        assert_eq!(ipfix_dest("127.0.0.1:9995"), "127.0.0.1:9995");
        assert_eq!(ipfix_dest("collector"), "collector:4739");
        assert_eq!(ipfix_dest("::1"), "[::1]:4739");
        assert_eq!(ipfix_dest("[::1]"), "[::1]:4739");
        assert_eq!(ipfix_dest("[::1]:9995"), "[::1]:9995");
    }
}

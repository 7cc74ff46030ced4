//! `linerate balance`: the cluster master (zbalance_ipc / pfdnacluster_master), or with
//! `--threads` the same distribution to consumer threads (pfdnacluster_multithread).

use crate::common::{flags, metrics, pin, stop_flag, usage};
use crate::console::{Counted, ReadOnly};
use anyhow::Context;
use clap::Parser;
use linerate::apps::balance::lua::{LuaError, LuaScript};
use linerate::apps::balance::source::SourcePort;
use linerate::apps::balance::Egress;
use linerate::apps::balance::{
    self, BalanceOptions, BalanceReport, BalanceTick, Distributor, Ended, Mode, Threads,
};
use linerate::cluster::{ClusterConfig, ClusterStats, HugePages, Master, Placement};
use linerate::filter::Filter;
use linerate::port::file::Inputs;
use linerate::port::pcap::{PcapPort, WriteFormat};
use linerate::port::{
    DropReason, Drops, InterfaceStats, Port, PortError, PortOptions, PortStats, Uri,
};
use linerate::stats::prom::{Dir, PortCount};
use linerate::stats::{group, group_f};
use linerate::units;
use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;

/// Flags of `linerate balance`.
#[derive(Parser, Debug)]
pub struct Args {
    /// Input port(s): afpacket:IFACE, xdp:IFACE (every receive queue, all read by this master:
    /// it is the distributor, as zbalance_ipc's master reads every queue), pcap:FILE, mem:NAME;
    /// a,b aggregates round-robin; `source[:COUNT]` is the built-in generator (64 B frames,
    /// rotating addresses).
    #[arg(short = 'i', long = "in", value_name = "PORTS")]
    input: String,
    /// Pace `-i source` (e.g. 5Mpps, 10Gbps = 64 B at 10 GbE line rate, 50%); the summary
    /// gives the rate achieved next to it.
    #[arg(long, value_name = "RATE", value_parser = flags::rate)]
    source_rate: Option<units::Rate>,
    /// Declare a consumer gone when it has not received for this long (default: only when its
    /// process is gone); its queue is reclaimed and it stops with an error.
    #[arg(long, value_name = "SECONDS", value_parser = flags::duration(flags::TIMEOUT))]
    consumer_timeout: Option<std::time::Duration>,
    /// Wait until every queue has a consumer before reading the input.
    #[arg(long)]
    wait_consumers: bool,
    /// Cluster id: consumers attach with -i cluster:ID@QUEUE. `-c` is zbalance_ipc's spelling,
    /// kept here (a packet count, -c in the other tools, is --count in balance).
    #[arg(short = 'c', long = "cluster", value_name = "ID", default_value = "10")]
    cluster: u32,
    /// Queues per application: 2,1 = application 0 balanced over queues 0-1, application 1 a
    /// full copy on queue 2 (default: 1, or N of --threads N).
    #[arg(short = 'n', long = "queues", value_name = "N[,M...]", value_parser = parse_apps)]
    queues: Option<Apps>,
    /// The queues: -n, or what --threads N implies.
    #[arg(skip)]
    apps: Apps,
    /// Distribution mode: round-robin, fanout, ip, mac, proto, 5tuple, toeplitz, vlan, gre, gtp,
    /// or lua:FILE (a function balance(pkts, n, q) setting q[i], the queue of packet i, or
    /// returning a table of queues per packet; a script is a
    /// program: it has Lua's io and os libraries and runs with this tool's privileges).
    #[arg(short = 'm', long = "mode", value_name = "MODE", default_value = "ip")]
    mode: ModeArg,
    /// Memory bound of the -m lua: script (1MiB to 64GiB); past it the master stops with an
    /// error naming the script.
    #[arg(long, value_name = "SIZE", default_value = "256MiB", value_parser = linerate::apps::lua::parse_mem)]
    lua_mem: usize,
    /// Consumer threads in this process instead of consumer processes, one per queue:
    /// `--threads` alone, as many as -n's queues; `--threads N`, N threads (one application over
    /// N queues when -n is not given; with -n, N must be its number of queues).
    #[arg(short = 'T', long = "threads", value_name = "N", num_args = 0..=1, default_missing_value = THREADS_ALONE,
          value_parser = threads_value)]
    threads_flag: Option<u32>,
    /// Whether consumers are threads (--threads given).
    #[arg(skip)]
    threads: bool,
    /// Slots per queue (a power of two, 64 to 1M; zbalance_ipc's -q).
    #[arg(
        long = "slots",
        value_name = "SLOTS",
        default_value = "4096",
        value_parser = flags::pow2(64, 1 << 20)
    )]
    slots: u32,
    /// Frames in the cluster (zbalance_ipc's -b; default, 0: enough for every queue full). -b
    /// is dumpcap's ring buffer here as in the other tools.
    #[arg(
        long = "buffers",
        value_name = "BUFFERS",
        default_value = "0",
        value_parser = flags::count_or_zero(128, 1 << 26)
    )]
    buffers: u64,
    /// Put the segment in this hugetlbfs, on its huge pages (DPDK's --huge-dir; default: the
    /// first mounted hugetlbfs with enough free huge pages, else /dev/shm). Without enough
    /// free pages the segment goes to /dev/shm and the summary says why.
    #[arg(long = "huge-dir", value_name = "DIR", conflicts_with = "no_huge")]
    huge_dir: Option<std::path::PathBuf>,
    /// Put the segment in /dev/shm on 4 KiB pages even where a hugetlbfs has free huge pages
    /// (DPDK's --no-huge).
    #[arg(long = "no-huge")]
    no_huge: bool,
    /// BPF filter in libpcap syntax, run before distribution.
    #[arg(short = 'f', long, value_name = "BPF")]
    filter: Option<String>,
    /// Cores: the master's, then the consumer threads' (e.g. 0 or 0:1,1).
    #[arg(
        short = 'g',
        long = "cores",
        visible_alias = "core",
        value_name = "CORE[:C0,C1..]"
    )]
    cores: Option<String>,
    /// Stop after this long.
    #[arg(short = 't', long, value_name = "SECONDS", value_parser = flags::duration(flags::RUN))]
    duration: Option<std::time::Duration>,
    /// Stop after this many packets received (--count is the same flag, as the other tools
    /// spell it).
    #[arg(long = "packets", visible_alias = "count", value_name = "COUNT", value_parser = flags::count(1, flags::MAX_PACKETS))]
    packets: Option<u64>,
    /// Print statistics as JSON lines.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    metrics: metrics::MetricsArgs,
    /// Print only the final summary.
    #[arg(short = 'q', long)]
    quiet: bool,
    /// Which header of a tunnel (GRE, IPIP, 6in4, VXLAN on UDP 4789) the ip, 5tuple, toeplitz and
    /// proto modes hash: outer (default) or inner (the packet inside).
    #[arg(long, value_name = "outer|inner", default_value = "outer")]
    tunnels: linerate::apps::balance::Tunnels,
    /// Print statistics lines even on a terminal (no live page).
    #[arg(long)]
    no_console: bool,
    /// Seconds between statistics.
    #[arg(long, value_name = "SECONDS", default_value = "1", value_parser = flags::duration(flags::INTERVAL))]
    interval: std::time::Duration,
    /// Send what consumers transmit into the cluster (`cluster:ID` ports) out of this port.
    #[arg(short = 'o', long = "out", value_name = "PORT")]
    out: Option<String>,
    /// Replace queue Q by an egress port (pcap file, afpacket:IFACE, mem:NAME); repeatable.
    /// A capture file is pcapng when its name ends in .pcapng (or with pcapng:FILE).
    #[arg(short = 'r', long = "egress", value_name = "Q:PORT")]
    egress: Vec<String>,
    /// Format of the capture files -o and -r write, whatever their names: pcap or pcapng.
    #[arg(long, value_name = "pcap|pcapng")]
    format: Option<WriteFormat>,
    /// Simulated work per packet in consumer threads (ns, at most 1 s), to see overload.
    #[arg(long, value_name = "NS", default_value = "0", value_parser = flags::int(0u64, 1_000_000_000))]
    work_ns: u64,
    /// Longest packet the cluster carries (DPDK's --max-pkt-len), 64 to 130944 bytes (default:
    /// 130944, what a 128 KiB big frame holds). Packets up to 1920 B take 2 KiB frames; longer
    /// ones go whole into big frames (the next power of two above this, one for every 8
    /// frames, only address space until written). Longer packets are dropped whole and counted
    /// as too_big, never cut.
    #[arg(long, value_name = "BYTES", default_value = "130944", value_parser = flags::size(64, 130_944))]
    max_pkt_len: u64,
    #[command(flatten)]
    write: crate::common::output::OutputFlags,
    #[command(flatten)]
    ring: crate::common::output::RingBuffer,
    /// Which packets of an afpacket: input to distribute (default: in, what arrives, as
    /// zbalance_ipc, so that an egress on the same interface is never read back).
    #[command(flatten)]
    capture: crate::common::capture::CaptureFlags,
    #[command(flatten)]
    service: crate::common::service::ServiceFlags,
}

/// `-m MODE` or `-m lua:FILE`.
#[derive(Clone, Debug)]
pub struct ModeArg {
    mode: Mode,
    script: Option<String>,
}

impl std::str::FromStr for ModeArg {
    type Err = String;
    fn from_str(s: &str) -> Result<ModeArg, String> {
        match s.strip_prefix("lua:") {
            Some("") => Err("lua: names a script: -m lua:FILE".into()),
            Some(f) => Ok(ModeArg {
                mode: Mode::Lua,
                script: Some(f.to_string()),
            }),
            None => Ok(ModeArg {
                mode: s.parse()?,
                script: None,
            }),
        }
    }
}

/// Queues per application (`-n 2,1`).
#[derive(Clone, Debug, Default)]
pub struct Apps(pub Vec<u32>);

fn parse_apps(s: &str) -> Result<Apps, String> {
    let v: Result<Vec<u32>, _> = s.split(',').map(|x| x.trim().parse::<u32>()).collect();
    match v {
        Ok(v) if !v.is_empty() && v.iter().all(|&n| n > 0) && v.iter().sum::<u32>() <= 64 => {
            Ok(Apps(v))
        }
        _ => Err(format!(
            "'{s}': queues per application, e.g. 2 or 2,1 (1 to 64 queues in all)"
        )),
    }
}

fn parse_cores(s: &str) -> anyhow::Result<(Option<usize>, Vec<usize>)> {
    let bad = || {
        usage(format!(
            "-g {s}: write CORE or CORE:C0,C1,... (numbers of cores of this machine)"
        ))
    };
    let core = |c: &str| -> anyhow::Result<usize> {
        let c: usize = c.parse().map_err(|_| bad())?;
        if !crate::common::core_exists(c) {
            return Err(bad());
        }
        Ok(c)
    };
    let (m, rest) = s.split_once(':').unwrap_or((s, ""));
    let m = if m.is_empty() { None } else { Some(core(m)?) };
    let mut v = Vec::new();
    for c in rest.split(',').filter(|c| !c.is_empty()) {
        v.push(core(c)?);
    }
    Ok((m, v))
}

/// Opens an output port: a pcap file to create (never one of `inputs`, to which it is added:
/// two outputs cannot be one file either), or any port URI.
fn open_out(
    uri: &str,
    link: linerate::port::LinkType,
    flag: &str,
    format: Option<WriteFormat>,
    inputs: &mut Inputs,
    wo: &linerate::port::pcap::WriteOptions,
) -> anyhow::Result<Box<dyn Port>> {
    let mut create = |path: &str, format: Option<WriteFormat>| -> anyhow::Result<Box<dyn Port>> {
        let p = PcapPort::create_with_options(path, format, link, 0, inputs, wo)
            .map_err(|e| usage(format!("{flag}: {e}")))?;
        inputs.add_path(p.current_file().unwrap_or(path));
        Ok(Box::new(p))
    };
    match Uri::parse(uri).map_err(|e| usage(format!("{flag}: {e}")))? {
        Uri::File { path, format: f } => create(&path, f.or(format)),
        Uri::Bare(path) if path.ends_with(".pcap") || path.ends_with(".pcapng") => {
            create(&path, format)
        }
        _ => {
            let opts = PortOptions {
                inputs: inputs.clone(),
                ..Default::default()
            };
            let p = crate::common::open_output(flag, uri, &opts)?;
            inputs.add_path(uri);
            Ok(p)
        }
    }
}

/// What each input interface did for an egress file's interface statistics: the master's
/// filter count is known in all, so it is split only when the input is one interface (or
/// nothing was filtered); otherwise the files carry only what they know themselves.
fn egress_interface_stats(
    first: &[PortStats],
    last: &[PortStats],
    filtered: u64,
    start_ns: u64,
) -> Vec<InterfaceStats> {
    let end_ns = linerate::time::wall_ns();
    let rx = |i: usize| {
        last[i]
            .rx_packets
            .saturating_sub(first.get(i).map_or(0, |s| s.rx_packets))
    };
    match (last.len(), filtered) {
        (_, 0) => (0..last.len())
            .map(|i| {
                let start = first.get(i).copied().unwrap_or_default();
                InterfaceStats::between(&start, &last[i], None, start_ns, end_ns)
            })
            .collect(),
        (1, f) => {
            let start = first.first().copied().unwrap_or_default();
            let accepted = rx(0).saturating_sub(f);
            vec![InterfaceStats::between(
                &start,
                &last[0],
                Some(accepted),
                start_ns,
                end_ns,
            )]
        }
        _ => Vec::new(),
    }
}

/// What clap hands the parser for `--threads` given alone: no command-line word can hold a NUL,
/// so a user's `--threads 0` or `--threads=` is never taken for it.
const THREADS_ALONE: &str = "\0alone";

/// `--threads N`: 1 to 64 threads (0 for `--threads` alone, one per queue of -n).
fn threads_value(s: &str) -> Result<u32, String> {
    if s == THREADS_ALONE {
        return Ok(0);
    }
    flags::int(1u32, 64)(s).map_err(|e| format!("{e} (or --threads alone: one per queue of -n)"))
}

/// Resolves -n and --threads [N] into the queues and whether consumers are threads.
fn resolve_queues(mut a: Args) -> anyhow::Result<Args> {
    a.threads = a.threads_flag.is_some();
    a.apps = match (a.queues.take(), a.threads_flag) {
        (Some(q), Some(n)) if n != 0 && q.0.iter().sum::<u32>() != n => {
            return Err(usage(format!(
                "--threads {n}: one consumer thread per queue, but -n {} makes {} queues: give \
                 --threads alone (one per queue of -n), or the same number",
                q.0.iter().map(u32::to_string).collect::<Vec<_>>().join(","),
                q.0.iter().sum::<u32>()
            )))
        }
        (Some(q), _) => q,
        (None, Some(n)) if n > 0 => Apps(vec![n]),
        (None, _) => Apps(vec![1]),
    };
    Ok(a)
}

/// Runs `linerate balance`: checks the flags, opens the input, the cluster and its outputs,
/// distributes, and drains and reports.
pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    let a = resolve_queues(a)?;
    check_flags(&a)?;
    let service = a.service.check()?;
    let stop = stop_flag()?;
    let wopts = write_options(&a, &stop)?;
    let mut input = open_input_first(&a)?;
    // The input's counters when it opened, before -o and -r (a FIFO waits in its open for its
    // reader while the input drops what it cannot hold): the egress files' interface
    // statistics count from here, as the summary's input drops do.
    let if_open = input.as_mut().map(|p| p.interface_stats());
    let link = input
        .as_ref()
        .map_or(linerate::port::LinkType::ETHERNET, |p| p.link_type());
    let mut inputs = crate::common::inputs_of([a.input.as_str()]);
    if let Some(f) = &a.mode.script {
        inputs.add_path(f);
    }
    let filter = match &a.filter {
        Some(expr) => Some(Filter::compile(expr, link).map_err(|e| usage(format!("-f: {e}")))?),
        None => None,
    };
    let (master_core, thread_cores) = match &a.cores {
        Some(s) => parse_cores(s)?,
        None => (None, Vec::new()),
    };
    let mut dist = distributor(&a, link, &stop)?;
    let mut cfg = cluster_config(&a);
    cfg.owner = service.segment_owner()?;
    let mut tx_out = match &a.out {
        Some(uri) => Some(open_out(uri, link, "-o", a.format, &mut inputs, &wopts)?),
        None => None,
    };
    let mut master = if a.threads {
        Master::anon(&cfg).context("creating the cluster")?
    } else {
        Master::create(a.cluster, &cfg).context("creating the cluster")?
    };
    master.set_consumer_timeout(a.consumer_timeout);
    let mut input = match input {
        Some(p) => p,
        None => open_xdp_input(&a, &mut master)?,
    };
    let metrics = metrics::start(&a.metrics, "balance", a.quiet)?;
    if let Some(m) = &metrics {
        let s = master.stats();
        publish(m, (&a.input, a.out.as_deref()), a.cluster, &s, &[]);
    }
    let mut egress = open_egress(
        &a,
        &master,
        &cfg,
        (input.as_ref(), link),
        &mut inputs,
        &wopts,
    )?;
    let egress_queues: Vec<usize> = egress.iter().map(|e| e.queue()).collect();
    let threads = if a.threads {
        Some(spawn_consumers(
            &a,
            &master,
            &cfg,
            thread_cores,
            &egress_queues,
        )?)
    } else {
        None
    };
    give_segment_to_user(&a, &master, &service)?;
    let _running = service.start()?;
    pin(master_core)?;
    announce(&a, &cfg, master.placement());
    if a.wait_consumers && !a.threads {
        wait_for_consumers(&a, &mut master, &stop);
    }
    let opts = BalanceOptions {
        count: a.packets,
        duration: a.duration,
        filter,
        interval: a.interval,
    };
    let mut printer = Printer::new(&a, cfg.queues(), threads.is_some(), &metrics, &stop)?;
    printer.egress_queues = egress_queues.clone();
    let if_start = if_open.unwrap_or_else(|| input.interface_stats());
    let wall_start = linerate::time::wall_ns();
    linerate::port::file::start_writing();
    let mut report = balance::run_with(
        input.as_mut(),
        &mut master,
        &mut dist,
        &opts,
        &mut egress,
        tx_out.as_mut().map(|p| p.as_mut() as &mut dyn Port),
        &stop,
        |t| {
            let now_threads = threads.as_ref().map(|th| th.figures()).unwrap_or_default();
            printer.tick(t, now_threads);
        },
    );
    // The terminal back: the consumers' drain and the summary print lines.
    printer.live = None;
    let ends = (if_start, input.interface_stats(), wall_start);
    close_outputs(&a, egress, tx_out, &mut report, ends);
    // Consumers drain their queues (interval lines go on meanwhile); what they did not read is
    // counted as unread.
    let fin = balance::finish(
        &mut master,
        threads,
        &report.tick,
        a.interval,
        &stop,
        |t, figures| printer.tick(t, figures.to_vec()),
    );
    // What the input itself dropped (a record too long for any frame, another link type)
    // never reached the master: said apart.
    // The summary also says which pages the segment got.
    let input_drops = (input.stats().rx_drops, master.placement().cloned());
    finish(a, &egress_queues, report, fin, &metrics, input_drops)
}

/// The flags that cannot apply, refused before anything opens.
fn check_flags(a: &Args) -> anyhow::Result<()> {
    a.capture.check_xdp(&[&a.input])?;
    if a.tunnels == linerate::apps::balance::Tunnels::Inner
        && (a.mode.script.is_some()
            || !matches!(
                a.mode.mode,
                Mode::Ip | Mode::FiveTuple | Mode::Toeplitz | Mode::Proto
            ))
    {
        return Err(usage(
            "--tunnels inner: only the ip, 5tuple, toeplitz and proto modes hash IP headers \
             (gre and gtp always hash the packet inside their tunnel)",
        ));
    }
    // `any` captures cooked (LINUX_SLL2) packets, and the cluster's queues carry Ethernet.
    crate::common::capture::refuse_any(
        "-i",
        &a.input,
        "captures Linux cooked packets (LINUX_SLL2) and cluster queues carry Ethernet frames; name the interface",
    )?;
    if let Some(o) = &a.out {
        crate::common::capture::refuse_any("-o", o, "names no interface to send on")?;
    }
    if a.threads && (a.huge_dir.is_some() || a.no_huge) {
        return Err(usage(
            "--huge-dir and --no-huge place a process cluster's segment file; with --threads \
             the cluster is this process's own memory (transparent huge pages are asked for it)",
        ));
    }
    if let Some(d) = &a.huge_dir {
        linerate::cluster::check_huge_dir(d).map_err(|e| usage(format!("--huge-dir: {e}")))?;
    }
    Ok(())
}

/// The capture files' flushing and rotation (-o, -r), checked before anything is opened.
fn write_options(
    a: &Args,
    stop: &Arc<std::sync::atomic::AtomicBool>,
) -> anyhow::Result<linerate::port::pcap::WriteOptions> {
    let first_file = a
        .out
        .iter()
        .map(|u| u.as_str())
        .chain(
            a.egress
                .iter()
                .filter_map(|s| s.split_once(':').map(|(_, u)| u)),
        )
        .find_map(crate::common::output::file_of_uri);
    a.write.options(
        &a.ring.ring_buffer,
        first_file.as_deref(),
        a.json,
        Some(stop.clone()),
    )
}

/// Opens -i before the cluster: the built-in source, a file or an interface. None for an
/// xdp: input, which opens once the cluster exists (its UMEM is the segment's frames).
fn open_input_first(a: &Args) -> anyhow::Result<Option<Box<dyn Port>>> {
    Ok(match a.input.strip_prefix("source") {
        Some(rest) if rest.is_empty() || rest.starts_with(':') => {
            let count = match rest.strip_prefix(':') {
                Some(c) => Some(
                    flags::check_count(c, flags::PACKETS)
                        .map_err(|e| usage(format!("-i {}: {e}", a.input)))?,
                ),
                None => None,
            };
            Some(Box::new(
                SourcePort::new(4096, count)?.with_rate(a.source_rate),
            ))
        }
        _ if is_xdp(&a.input) => None,
        _ => Some(crate::common::open_input(
            "-i",
            &a.input,
            &a.capture.apply(
                "-i",
                &a.input,
                linerate::port::Capture::In,
                PortOptions::default(),
            )?,
        )?),
    })
}

/// Opens an xdp: input on the cluster's frames.
fn open_xdp_input(a: &Args, master: &mut Master) -> anyhow::Result<Box<dyn Port>> {
    let opts = a.capture.apply(
        "-i",
        &a.input,
        linerate::port::Capture::In,
        PortOptions::default(),
    )?;
    let (p, copied) = linerate::open_cluster_input(&a.input, &opts, master)
        .map_err(|e| crate::common::port_error("-i", &a.input, e))?;
    if let Some(why) = copied {
        eprintln!("note: -i {why}");
    }
    Ok(p)
}

/// What decides each packet's queues: -m's mode, or a Lua script (which a signal or -t
/// stops when it does not return: see apps::lua::Interrupt).
fn distributor(
    a: &Args,
    link: linerate::port::LinkType,
    stop: &Arc<std::sync::atomic::AtomicBool>,
) -> anyhow::Result<Distributor> {
    let interrupt = linerate::apps::lua::Interrupt::new(stop.clone());
    interrupt.set_limit(a.duration);
    let mut dist = match &a.mode.script {
        Some(f) => {
            let sopts = linerate::apps::lua::ScriptOptions {
                mem: a.lua_mem,
                interrupt: Some(interrupt.clone()),
            };
            let script = LuaScript::load(std::path::Path::new(f), &a.apps.0, &sopts).map_err(
                |e| match e {
                    LuaError::Memory(m) | LuaError::Stopped(m) => {
                        anyhow::anyhow!("-m lua:{f}: {m}")
                    }
                    e => usage(format!("-m lua:{f}: {e}")),
                },
            )?;
            Distributor::with_script(script, &a.apps.0, link)
        }
        None => Distributor::new(a.mode.mode, &a.apps.0, link),
    };
    dist.set_tunnels(a.tunnels);
    Ok(dist)
}

/// The cluster's shape: applications, slots, frames (an xdp: input's fill rings, 2048
/// frames per queue, are segment frames), and -o's transmit lanes.
fn cluster_config(a: &Args) -> ClusterConfig {
    let mut cfg = ClusterConfig {
        apps: a.apps.0.clone(),
        slots: a.slots,
        frames: a.buffers as u32,
        tx_lanes: if a.out.is_some() { 8 } else { 0 },
        kernel_frames: a
            .input
            .strip_prefix("xdp:")
            .and_then(|rest| linerate::port::xdp::queue_count(rest).ok())
            .map_or(0, |n| {
                (n as u32).saturating_mul(PortOptions::default().xdp.ring_size)
            }),
        pages: match (&a.huge_dir, a.no_huge) {
            (Some(d), _) => HugePages::Dir(d.clone()),
            (None, true) => HugePages::Off,
            (None, false) => HugePages::Auto,
        },
        ..Default::default()
    };
    cfg.fit_packets(a.max_pkt_len as u32);
    cfg
}

/// The -r QUEUE:PORT outputs, each reading its queue of the cluster (files of the link
/// type -i had when it opened, and its interfaces).
fn open_egress(
    a: &Args,
    master: &Master,
    cfg: &ClusterConfig,
    (input, link): (&dyn Port, linerate::port::LinkType),
    inputs: &mut Inputs,
    wopts: &linerate::port::pcap::WriteOptions,
) -> anyhow::Result<Vec<Egress>> {
    let mut egress = Vec::new();
    for spec in &a.egress {
        let bad = || usage(format!("-r {spec}: write QUEUE:PORT, e.g. -r 0:out.pcap"));
        let (q, uri) = spec.split_once(':').ok_or_else(bad)?;
        let q: usize = q.parse().map_err(|_| bad())?;
        if q >= cfg.queues() {
            return Err(usage(format!(
                "-r {spec}: the cluster has queues 0..{}",
                cfg.queues() - 1
            )));
        }
        let mut out = open_out(uri, link, "-r", a.format, inputs, wopts)?;
        // A pcapng file keeps the input interface of each packet.
        out.describe(&input.interfaces())
            .with_context(|| format!("-r {spec}"))?;
        egress.push(Egress::new(master, q, out)?);
    }
    Ok(egress)
}

/// --threads: a consumer thread per queue that no -r output reads, each pinned to its core
/// of --cores.
fn spawn_consumers(
    a: &Args,
    master: &Master,
    cfg: &ClusterConfig,
    thread_cores: Vec<usize>,
    egress_queues: &[usize],
) -> anyhow::Result<Threads> {
    let cores = Arc::new(thread_cores);
    let on_start: Arc<dyn Fn(usize) + Send + Sync> = Arc::new(move |q| {
        if let Some(&c) = cores.get(q) {
            let _ = pin(Some(c));
        }
    });
    let queues: Vec<usize> = (0..cfg.queues())
        .filter(|q| !egress_queues.contains(q))
        .collect();
    Ok(Threads::spawn_some(
        master,
        &queues,
        a.work_ns,
        Some(on_start),
    )?)
}

/// Every port and output is open: the pidfile, then -Z. The segment file goes to the user
/// first, so that the master can still remove it at exit (/dev/shm is sticky).
fn give_segment_to_user(
    a: &Args,
    master: &Master,
    service: &crate::common::service::Checked,
) -> anyhow::Result<()> {
    if let Some((uid, gid)) = service.user() {
        let seg = master.segment_file().unwrap_or_default();
        if !a.threads && seg.exists() {
            std::os::unix::fs::chown(&seg, Some(uid), Some(gid))
                .with_context(|| format!("-Z: giving {} to the user", seg.display()))?;
        }
    }
    Ok(())
}

/// The start line: the cluster and how consumers join it (or the consumer threads).
fn announce(a: &Args, cfg: &ClusterConfig, placement: Option<&Placement>) {
    if a.quiet || a.json {
        return;
    }
    let mut out = std::io::stdout();
    if a.threads {
        let _ = writeln!(
            out,
            "Balancing {} to {} consumer threads (-n {}, mode {})",
            a.input,
            cfg.queues(),
            apps_str(&a.apps.0),
            a.mode.mode.name()
        );
    } else {
        let _ = writeln!(
            out,
            "Cluster {} on {} : {} queues (-n {}, mode {}); consumers: linerate count -i cluster:{}@QUEUE",
            a.cluster,
            a.input,
            cfg.queues(),
            apps_str(&a.apps.0),
            a.mode.mode.name(),
            a.cluster
        );
        if let Some(p) = placement {
            let _ = writeln!(out, "Segment: {}", p.describe());
        }
    }
}

/// --wait-consumers: waits until every queue has its consumer (or a signal, or -t).
fn wait_for_consumers(a: &Args, master: &mut Master, stop: &std::sync::atomic::AtomicBool) {
    let t0 = std::time::Instant::now();
    while master
        .stats()
        .queues
        .iter()
        .any(|q| q.consumer_pid.is_none())
    {
        if stop.load(std::sync::atomic::Ordering::Relaxed)
            || a.duration.is_some_and(|d| t0.elapsed() >= d)
        {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// Says what -r and -o sent, and closes them: egress files end with what each input
/// interface did (pcapng). `ends`: the input's counters at the start and now, and the
/// start's wall time. A failure to close is the run's error.
fn close_outputs(
    a: &Args,
    mut egress: Vec<Egress>,
    mut tx_out: Option<Box<dyn Port>>,
    report: &mut BalanceReport,
    ends: (Vec<PortStats>, Vec<PortStats>, u64),
) {
    let mut out = std::io::stdout();
    for e in &mut egress {
        let q = e.queue();
        let dropped = e.dropped;
        let st = e.out().stats();
        if !a.json {
            let _ = writeln!(
                out,
                "Egress Q {q} -> {}: {} pkts sent, {} not taken by the port",
                e.out().name(),
                group(st.tx_packets),
                group(dropped + st.tx_drops.total())
            );
        }
    }
    if let (Some(o), false) = (tx_out.as_mut(), a.json) {
        let st = report.tick.now.stats.clone();
        let _ = writeln!(
            out,
            "Out {}: {} pkts transmitted by consumers sent, {} not taken by the port",
            o.name(),
            group(st.tx_packets),
            group(st.tx_dropped)
        );
    }
    let (if_start, if_now, wall_start) = ends;
    let ifstats = egress_interface_stats(
        &if_start,
        &if_now,
        report.tick.now.stats.filtered,
        wall_start,
    );
    for e in &mut egress {
        if let Err(err) = e.out().finish(&ifstats) {
            report.error.get_or_insert(err);
        }
    }
    if let Some(o) = tx_out.as_mut() {
        if let Err(err) = o.finish(&[]) {
            report.error.get_or_insert(err);
        }
    }
}

/// Prints interval statistics (and serves them as metrics).
struct Printer<'a> {
    last_threads: Vec<(u64, u64)>,
    id: u32,
    quiet: bool,
    json: bool,
    threaded: bool,
    egress_queues: Vec<usize>,
    metrics: &'a Option<metrics::Metrics>,
    input: &'a str,
    out_port: Option<&'a str>,
    out: std::io::Stdout,
    /// The live page on a terminal (instead of the lines); its `quit` sets the stop flag.
    live: Option<ReadOnly>,
}

/// balance's metrics: the common families (the input's receive counters with what no queue
/// wanted as `filter` drops, each queue as a port `cluster:ID@Q` the master sends to, `-o`'s
/// transmit counters) and the cluster's own `linerate_cluster_*` families (docs/cluster.md).
fn publish(
    m: &metrics::Metrics,
    (input, out): (&str, Option<&str>),
    id: u32,
    s: &ClusterStats,
    threads: &[(u64, u64)],
) {
    let mut e = m.exposition();
    for (port, dir, c) in counted((input, out), id, s) {
        e.port(&port, dir, &c);
    }
    e.append(&linerate::cluster::prom_text(id, s, threads));
    m.publish(&e);
}

/// The input's, each queue's and `-o`'s counters (the metrics' and the live page's).
fn counted((input, out): (&str, Option<&str>), id: u32, s: &ClusterStats) -> Vec<Counted> {
    let mut v = Vec::new();
    let mut d = Drops::default();
    d.add(DropReason::Filter, s.filtered);
    d.add(DropReason::NoFrame, s.no_frame);
    let rx = PortCount {
        packets: s.rx_packets,
        bytes: s.rx_bytes,
        drops: d,
    };
    v.push((input.to_string(), Dir::Rx, rx));
    for (q, x) in s.queues.iter().enumerate() {
        let mut d = Drops::default();
        d.add(DropReason::RingFull, x.ring_full);
        d.add(DropReason::ConsumerGone, x.consumer_gone);
        d.add(DropReason::NoFrame, x.no_frame);
        d.add(DropReason::Unread, x.unread);
        let c = PortCount {
            packets: x.delivered,
            bytes: x.bytes,
            drops: d,
        };
        v.push((format!("cluster:{id}@{q}"), Dir::Tx, c));
    }
    if let Some(o) = out {
        let mut d = Drops::default();
        d.add(DropReason::RingFull, s.tx_dropped);
        d.add(DropReason::Malformed, s.tx_malformed);
        let c = PortCount {
            packets: s.tx_packets,
            bytes: s.tx_bytes,
            drops: d,
        };
        v.push((o.to_string(), Dir::Tx, c));
    }
    v
}

impl<'a> Printer<'a> {
    /// The printer of a run: on the live page on a terminal, else lines (none with -q).
    fn new(
        a: &'a Args,
        queues: usize,
        threaded: bool,
        metrics: &'a Option<metrics::Metrics>,
        stop: &Arc<std::sync::atomic::AtomicBool>,
    ) -> anyhow::Result<Self> {
        Ok(Printer {
            last_threads: vec![(0, 0); queues],
            id: a.cluster,
            quiet: a.quiet,
            json: a.json,
            threaded,
            egress_queues: Vec::new(),
            metrics,
            input: &a.input,
            out_port: a.out.as_deref(),
            out: std::io::stdout(),
            live: if crate::console::wanted(a.json || a.quiet || a.no_console) {
                let title = format!("linerate balance -i {} -c {}", a.input, a.cluster);
                Some(ReadOnly::start(title, stop.clone())?)
            } else {
                None
            },
        })
    }

    fn tick(&mut self, t: &BalanceTick, now_threads: Vec<(u64, u64)>) {
        if let Some(m) = self.metrics {
            let ports = (self.input, self.out_port);
            publish(m, ports, self.id, &t.now.stats, &now_threads);
        }
        if let Some(p) = self.live.as_mut() {
            let rows = counted((self.input, self.out_port), self.id, &t.now.stats);
            p.tick("balancing", t.now.t_ns, &rows);
        } else if !self.quiet {
            let s = if self.json {
                json_tick("stats", t, &now_threads) + "\n"
            } else if self.threaded {
                crate::shared::threads_text(
                    t,
                    &self.last_threads,
                    &now_threads,
                    &self.egress_queues,
                )
            } else {
                master_text(t)
            };
            let _ = self.out.write_all(s.as_bytes());
            let _ = self.out.flush();
        }
        self.last_threads = now_threads;
    }
}

fn finish(
    a: Args,
    egress_queues: &[usize],
    report: BalanceReport,
    fin: balance::Finished,
    metrics: &Option<metrics::Metrics>,
    (input_drops, placement): (Drops, Option<Placement>),
) -> anyhow::Result<ExitCode> {
    let joined = fin.threads;
    let threaded = joined.is_some();
    let mut t = report.tick.clone();
    t.now.stats = fin.now.stats.clone();
    // Threads' figures span until they finished their queues; the master's own until its loop
    // ended.
    if threaded {
        t.now.t_ns = fin.now.t_ns;
    }
    let final_threads: Vec<(u64, u64)> = match &joined {
        Some(Ok(v)) => v.clone(),
        _ => Vec::new(),
    };
    if let Some(m) = metrics {
        let ports = (a.input.as_str(), a.out.as_deref());
        publish(m, ports, a.cluster, &t.now.stats, &final_threads);
    }
    let ended = match report.ended {
        Ended::Error
            if report.error.as_ref().is_some_and(
                |e| matches!(e, PortError::Gone { port, .. } if port.starts_with("-m lua:")),
            ) =>
        {
            "script error"
        }
        Ended::Error => "input error",
        e => e.text(),
    };
    let mut out = std::io::stdout();
    let s = &t.now.stats;
    let inv = s.check_invariant();
    // The built-in source's rate: what was asked and what the master read from it.
    let source_rate = a
        .source_rate
        .filter(|_| a.input.starts_with("source"))
        .map(|r| {
            let secs = report.tick.now.t_ns.saturating_sub(report.tick.start.t_ns) as f64 / 1e9;
            let got = if secs > 0.0 {
                s.rx_packets
                    .saturating_sub(report.tick.start.stats.rx_packets) as f64
                    / secs
            } else {
                0.0
            };
            (SourcePort::pps_of(r), got)
        });
    // The summary's rates are over the whole run (the last interval may be a few microseconds
    // with nothing in it), in the text and the JSON alike.
    let mut whole = t.clone();
    whole.prev = whole.start.clone();
    if a.json {
        let mut j: serde_json::Value =
            serde_json::from_str(&json_tick("summary", &whole, &final_threads))?;
        j["ended"] = ended.into();
        j["drain_ms"] = (fin.drain.as_secs_f64() * 1e3).into();
        j["invariant_ok"] = inv.is_ok().into();
        j["input_drops"] = input_drops.total().into();
        if let Some((asked, got)) = source_rate {
            j["source_rate"] = serde_json::json!({"asked_pps": asked, "achieved_pps": got});
        }
        if let Some(p) = &placement {
            j["segment"] = placement_json(p);
        }
        let _ = writeln!(out, "{j}");
    } else {
        let text = if !final_threads.is_empty() {
            crate::shared::threads_text(
                &whole,
                &vec![(0, 0); final_threads.len()],
                &final_threads,
                egress_queues,
            )
        } else {
            master_text(&whole)
        };
        let _ = out.write_all(text.as_bytes());
        let _ = writeln!(out, "{}", crate::shared::accounting_line(s));
        let _ = writeln!(out, "{}", copies_line(s));
        if input_drops.total() > 0 {
            let _ = writeln!(
                out,
                "Input drops (before the master): {}",
                linerate::stats::breakdown(&input_drops)
            );
        }
        if let Some((asked, got)) = source_rate {
            let _ = writeln!(out, "{}", source_rate_line(asked, got));
        }
        if let Some(p) = &placement {
            let _ = writeln!(out, "Segment: {}", p.describe());
        }
        let _ = writeln!(
            out,
            "Ended: {ended} (consumers drained in {} ms)",
            group_f(fin.drain.as_secs_f64() * 1e3, 1)
        );
    }
    let _ = out.flush();
    if let Some(Err(e)) = joined {
        return Err(anyhow::Error::new(e).context("a consumer thread failed"));
    }
    if let Err(e) = inv {
        anyhow::bail!("accounting invariant violated: {e}");
    }
    match report.error {
        None => Ok(ExitCode::SUCCESS),
        Some(e) => Err(anyhow::Error::new(e).context(format!(
            "input stopped after {} packets",
            group(s.rx_packets)
        ))),
    }
}

/// Which pages the segment got, for --json: `{"file", "huge", "page_size", "pages", "why_not",
/// "thp", "text"}`.
fn placement_json(p: &Placement) -> serde_json::Value {
    serde_json::json!({
        "dir": p.dir.display().to_string(),
        "huge": p.huge(),
        "page_size": p.page_size,
        "pages": p.pages,
        "why_not": p.why_not,
        "thp": p.thp,
        "text": p.describe(),
    })
}

/// How packets reached the segment: copied by the master, or received in place.
fn copies_line(s: &ClusterStats) -> String {
    if s.rx_packets == 0 {
        "Copies: none (no packets)".to_string()
    } else if s.copied_packets == 0 {
        "Copies: none, the input wrote into the segment's frames (zero copy)".to_string()
    } else {
        format!(
            "Copies: {} packets copied into the segment (the input did not read into its \
             frames: a kernel ring, --max-pkt-len below what it reads, or no free frame to lend)",
            group(s.copied_packets)
        )
    }
}

/// `Source rate: asked R pps, achieved A pps` and, when they differ by more than 0.5 %, by how
/// much and why it may be.
fn source_rate_line(asked: f64, got: f64) -> String {
    let pct = if asked > 0.0 {
        got / asked * 100.0
    } else {
        0.0
    };
    let mut l = format!(
        "Source rate: asked {} pps, achieved {} pps ({} %)",
        group_f(asked, 0),
        group_f(got, 0),
        group_f(pct, 1)
    );
    if (pct - 100.0).abs() > 0.5 {
        l.push_str(if got < asked {
            ": less than asked (the master or its consumers could not take more, or the run \
             was too short for the schedule)"
        } else {
            ": more than asked"
        });
    }
    l
}

fn apps_str(apps: &[u32]) -> String {
    apps.iter()
        .map(|n| n.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// The master's statistics, as pfdnacluster_master and zbalance_ipc print them, with each
/// queue's forwarded and dropped packets.
pub fn master_text(t: &BalanceTick) -> String {
    let (a, p, n) = (&t.start.stats, &t.prev.stats, &t.now.stats);
    let abs_s = crate::shared::secs(t.start.t_ns, t.now.t_ns);
    let act_s = crate::shared::secs(t.prev.t_ns, t.now.t_ns);
    let mut s = String::from("=========================\n");
    let rx = n.rx_packets.saturating_sub(a.rx_packets);
    let pr = n.delivered().saturating_sub(a.delivered());
    s.push_str(&format!(
        "Absolute Stats: RX {} pkts [{} pkt/sec] RX Processed {} pkts [{} pkt/sec]\n",
        group(rx),
        group_f(rx as f64 / abs_s, 2),
        group(pr),
        group_f(pr as f64 / abs_s, 2)
    ));
    let rx = n.rx_packets.saturating_sub(p.rx_packets);
    let pr = n.delivered().saturating_sub(p.delivered());
    s.push_str(&format!(
        "Actual Stats:   RX {} pkts [{} ms][{} pps] RX Processed {} pkts [{} ms][{} pps]\n",
        group(rx),
        group_f(act_s * 1e3, 2),
        group_f(rx as f64 / act_s, 2),
        group(pr),
        group_f(act_s * 1e3, 2),
        group_f(pr as f64 / act_s, 2)
    ));
    if n.tx_packets + n.tx_dropped > 0 {
        let tx = n.tx_packets.saturating_sub(a.tx_packets);
        s.push_str(&format!(
            "TX (consumers -> -o): {} pkts [{} pkt/sec], actual {} pps, {} not taken{}\n",
            group(tx),
            group_f(tx as f64 / abs_s, 2),
            group_f(n.tx_packets.saturating_sub(p.tx_packets) as f64 / act_s, 2),
            group(n.tx_dropped),
            if n.tx_malformed > 0 {
                format!(", {} malformed (corrupted lane)", group(n.tx_malformed))
            } else {
                String::new()
            }
        ));
    }
    for (q, x) in n.queues.iter().enumerate() {
        let x0 = a.queues.get(q).copied().unwrap_or_default();
        let xp = p.queues.get(q).copied().unwrap_or_default();
        let fwd = x.delivered.saturating_sub(x0.delivered);
        let drops = x.drops().saturating_sub(x0.drops());
        let total = fwd + drops;
        let consumer = match x.consumer_pid {
            Some(pid) => format!("pid {pid}"),
            None if x.attaches == 0 => "waiting".to_string(),
            None => "gone".to_string(),
        };
        s.push_str(&format!(
            "Q {q} (app {}, {consumer}): Forwarded {} pkts [{} pps] Dropped {} pkts ({:.1} %) [ring_full {} consumer_gone {} no_frame {}{} unread {}] backlog {}\n",
            x.app,
            group(fwd),
            group_f(x.delivered.saturating_sub(xp.delivered) as f64 / act_s, 2),
            group(drops),
            if total == 0 { 0.0 } else { drops as f64 * 100.0 / total as f64 },
            group(x.ring_full.saturating_sub(x0.ring_full)),
            group(x.consumer_gone.saturating_sub(x0.consumer_gone)),
            group(x.no_frame.saturating_sub(x0.no_frame)),
            match x.too_big.saturating_sub(x0.too_big) {
                0 => String::new(),
                b => format!(" too_big {}", group(b)),
            },
            group(x.unread.saturating_sub(x0.unread)),
            group(x.backlog)
        ));
    }
    s.push_str("=========================\n");
    s
}

/// A JSON line: master counters, per-queue counters and rates, per-thread counters.
pub fn json_tick(kind: &str, t: &BalanceTick, threads: &[(u64, u64)]) -> String {
    let (a, p, n) = (&t.start.stats, &t.prev.stats, &t.now.stats);
    let act_s = crate::shared::secs(t.prev.t_ns, t.now.t_ns);
    let queues: Vec<serde_json::Value> = n
        .queues
        .iter()
        .enumerate()
        .map(|(q, x)| {
            let xp = p.queues.get(q).copied().unwrap_or_default();
            serde_json::json!({
                "queue": q,
                "app": x.app,
                "delivered": x.delivered,
                "bytes": x.bytes,
                "drops": {"ring_full": x.ring_full, "consumer_gone": x.consumer_gone, "no_frame": x.no_frame, "too_big": x.too_big, "unread": x.unread},
                "backlog": x.backlog,
                "consumer_pid": x.consumer_pid,
                "pps": x.delivered.saturating_sub(xp.delivered) as f64 / act_s,
            })
        })
        .collect();
    let th: Vec<serde_json::Value> = threads
        .iter()
        .enumerate()
        .map(|(q, (pk, b))| serde_json::json!({"thread": q, "pkts": pk, "bytes": b}))
        .collect();
    serde_json::json!({
        "type": kind,
        "elapsed_ms": crate::shared::secs(t.start.t_ns, t.now.t_ns) * 1e3,
        "rx": n.rx_packets.saturating_sub(a.rx_packets),
        "rx_bytes": n.rx_bytes.saturating_sub(a.rx_bytes),
        "filtered": n.filtered,
        "distributed": n.routed,
        "destinations": n.copies,
        "copied": n.copied_packets,
        "delivered": n.delivered(),
        "rx_pps": n.rx_packets.saturating_sub(p.rx_packets) as f64 / act_s,
        "tx": n.tx_packets,
        "tx_dropped": n.tx_dropped,
        "tx_malformed": n.tx_malformed,
        "queues": queues,
        "threads": th,
    })
    .to_string()
}

/// Whether `-i` names one `xdp:` interface (read into the cluster's own frames).
fn is_xdp(uri: &str) -> bool {
    matches!(
        linerate::port::Uri::parse(uri),
        Ok(linerate::port::Uri::Xdp { .. })
    )
}

//! `linerate fwd`: DPDK l2fwd / PF_RING pfdnabounce between two ports (or back out of one).

use crate::common::{flags, metrics, pin, stop_flag, usage};
use crate::console::{Counted, ReadOnly};
use crate::shared;
use anyhow::Context;
use clap::Parser;
use linerate::apps::fwd::{self, Ended, FwdOptions, MacRewrite, Ports};
use linerate::apps::lua::{self, ScriptError, ScriptOptions};
use linerate::filter::Filter;
use linerate::os::iface_mac;
use linerate::port::pcap::WriteFormat;
use linerate::port::xdp::kfwd::{KernelFwd, KernelFwdConfig};
use linerate::port::xdp::{self, AttachMode, XdpConfig, XdpMode};
use linerate::port::xdp::{redirect_target, RedirectTarget};
use linerate::port::{
    DropReason, InterfaceStats, LinkType, Port, PortError, PortOptions, PortStats, Uri,
};
use linerate::stats::prom::{Dir, PortCount};
use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// Flags of `linerate fwd`.
#[derive(Parser, Debug)]
pub struct Args {
    /// Input port (port 0): xdp:IFACE (every queue) or xdp:IFACE@Q, afpacket:IFACE, mem:NAME.
    #[arg(short = 'i', long = "in", value_name = "PORT")]
    pub input: String,
    /// Output port (port 1); the same as -i bounces packets back out of it. A capture file
    /// (pcap:FILE, pcapng:FILE or a path) is pcapng when its name ends in .pcapng.
    #[arg(short = 'o', long = "out", value_name = "PORT")]
    pub output: String,
    /// Format of an -o capture file whatever its name: pcap or pcapng.
    #[arg(long, value_name = "pcap|pcapng")]
    pub format: Option<WriteFormat>,
    /// Forward port 1 → port 0 as well.
    #[arg(long)]
    pub bidir: bool,
    /// BPF filter in libpcap syntax: only matching packets are forwarded (in the kernel on
    /// afpacket inputs, in user space otherwise).
    #[arg(short = 'f', long, value_name = "BPF")]
    pub filter: Option<String>,
    /// Leave MAC addresses alone (l2fwd's --no-mac-updating).
    #[arg(long, conflicts_with = "mac")]
    pub no_mac_updating: bool,
    /// Write these source and destination MACs instead of l2fwd's
    /// (src = output port's MAC, dst = 02:00:00:00:00:TX_PORTID).
    #[arg(long, value_name = "SRC,DST")]
    pub mac: Option<String>,
    /// A Lua script defining `filter(pkts, n)`, called once per received burst of n packets:
    /// pkts[1..n] are packet objects as in gen and balance scripts (pkts[i].ip4.src,
    /// pkts[i].udp.dport, pkts[i]:getU16(off); see docs/lua.md), and pkts[i]:drop() keeps one
    /// from being forwarded. A script is a program: it has Lua's io and os libraries and runs
    /// with this tool's privileges.
    #[arg(long, value_name = "FILE.lua")]
    pub script: Option<String>,
    /// Memory bound of the script (1MiB to 64GiB); past it the script stops with an error.
    #[arg(long, value_name = "SIZE", default_value = "256MiB", value_parser = linerate::apps::lua::parse_mem)]
    pub lua_mem: usize,
    /// Pin the forwarding loop to this core (xsk engine; the kernel engine runs where the
    /// interfaces' receive processing runs).
    #[arg(short = 'g', long, value_name = "CORE", value_parser = flags::int(0, flags::MAX_CORE))]
    pub core: Option<usize>,
    /// Seconds between statistics blocks (0: only the final one), as l2fwd's -T PERIOD
    /// (--interval, as the other tools spell it, is the same flag).
    #[arg(long = "period", visible_alias = "interval", value_name = "SECONDS", default_value = "10", value_parser = flags::duration(flags::INTERVAL_OR_OFF))]
    pub period: std::time::Duration,
    /// `-T` is the thread count in linerate (count -T); l2fwd's -T PERIOD is `--period`.
    #[allow(dead_code)]
    #[arg(short = 'T', hide = true, value_name = "VALUE", num_args = 0..=1, default_missing_value = "",
          value_parser = flags::retired("fwd -T: the statistics period (l2fwd's -T) is --period SECONDS (or --interval); forwarding threads are --threads N (-T is the thread count in linerate's tools)"))]
    pub old_t: Option<String>,
    /// Stop after this long.
    #[arg(short = 't', long, value_name = "SECONDS", value_parser = flags::duration(flags::RUN))]
    pub duration: Option<std::time::Duration>,
    /// Stop after this many packets were sent.
    #[arg(short = 'c', long, value_name = "COUNT", value_parser = flags::count(1, flags::MAX_PACKETS))]
    pub count: Option<u64>,
    /// AF_XDP socket mode for xdp: ports.
    #[arg(long, value_name = "copy|zerocopy|auto", default_value = "auto")]
    pub xdp_mode: XdpMode,
    /// xsk engine: AF_XDP busy polling, each receive or send call polling the device's NAPI for
    /// up to USECS µs (1-1000; SO_PREFER_BUSY_POLL, SO_BUSY_POLL, SO_BUSY_POLL_BUDGET 64, and
    /// the device's napi_defer_hard_irqs 2 / gro_flush_timeout 200 µs while it runs, as the
    /// kernel's af_xdp.rst describes): the forwarder moves packets on its own core instead of
    /// competing with a NAPI thread. 0: off.
    #[arg(long, value_name = "USECS", default_value = "0", value_parser = flags::int(0u32, 1000))]
    pub busy_poll: u32,
    /// Print statistics as JSON lines.
    #[arg(long)]
    pub json: bool,
    /// Where frames are forwarded: `kernel` = an XDP program redirects them from driver to
    /// driver (both ports xdp:IFACE, no -f/--script); `xsk` = this process moves them through
    /// AF_XDP sockets (or the other port kinds); `auto` = kernel when possible (both ports
    /// xdp:IFACE without @QUEUE, no -f, --script or -c, and every egress takes redirected
    /// frames: a veth whose peer has neither an XDP program nor GRO on would discard them), else
    /// xsk, saying why.
    #[arg(
        long,
        value_enum,
        value_name = "auto|kernel|xsk",
        default_value = "auto"
    )]
    pub engine: Engine,
    #[command(flatten)]
    pub metrics: metrics::MetricsArgs,
    /// xsk engine: forwarding threads (as DPDK l2fwd with one lcore per queue). Default: one
    /// per queue pair when both ports are xdp:IFACE with several queues (thread t reads input
    /// queues t, t+N, ... and sends out of output queue t; with --bidir the reverse too); 1:
    /// one thread for every queue. --script and -g keep one thread.
    #[arg(long, value_name = "N", value_parser = flags::int(1usize, 1024))]
    pub threads: Option<usize>,
    /// Print statistics lines even on a terminal (no live page).
    #[arg(long)]
    pub no_console: bool,
    /// Print only the final statistics (as --period 0, and no live page).
    #[arg(short = 'q', long)]
    pub quiet: bool,
    #[command(flatten)]
    pub out: crate::common::output::OutputFlags,
    #[command(flatten)]
    pub ring: crate::common::output::RingBuffer,
    /// Which packets of an afpacket: port to forward (default: in, what arrives, so that a
    /// bounce never reads its own output back).
    #[command(flatten)]
    pub capture: crate::common::capture::CaptureFlags,
}

/// The common metrics of forwarding: each port's receive and transmit counters since the
/// start, by name (`names[i]` is port i).
fn publish(m: &metrics::Metrics, names: &[&str], s: &fwd::FwdStats) {
    let mut e = m.exposition();
    for (name, dir, c) in counted(names, s) {
        e.port(&name, dir, &c);
    }
    m.publish(&e);
}

/// Each port's receive and transmit counters (the metrics' and the live page's).
fn counted(names: &[&str], s: &fwd::FwdStats) -> Vec<Counted> {
    let mut v = Vec::new();
    for (name, p) in names.iter().zip(&s.ports[..s.nports]) {
        let (mut rxd, txd) = (p.rx_drops, p.tx_drops);
        if rxd.total() + txd.total() == 0 && p.dropped + p.filtered > 0 {
            // The kernel engine counts drops as one figure: the program's and the interface's.
            rxd.add(DropReason::Kernel, p.dropped);
            rxd.add(DropReason::Filter, p.filtered);
        }
        let rx = PortCount {
            packets: p.received,
            bytes: p.rx_bytes,
            drops: rxd,
        };
        let tx = PortCount {
            packets: p.sent,
            bytes: p.tx_bytes,
            drops: txd,
        };
        v.push((name.to_string(), Dir::Rx, rx));
        v.push((name.to_string(), Dir::Tx, tx));
    }
    v
}

/// The statistics callback: prints every `period` (0: never) and publishes the metrics every
/// tick (ticks come every second with `--metrics`).
struct Ticker<'a> {
    json: bool,
    period: std::time::Duration,
    last_print: std::time::Instant,
    metrics: Option<&'a metrics::Metrics>,
    names: [&'a str; 2],
    /// The live page on a terminal (instead of the lines); its `quit` sets the stop flag.
    live: Option<ReadOnly>,
}

impl Ticker<'_> {
    /// Returns whether it printed.
    fn tick(&mut self, out: &mut dyn Write, s: &fwd::FwdStats) -> bool {
        self.tick_threads(out, s, &[])
    }

    /// As [`Ticker::tick`], with each thread's share on the page (`threads`: its rows).
    fn tick_threads(
        &mut self,
        out: &mut dyn Write,
        s: &fwd::FwdStats,
        threads: &[(usize, Counted)],
    ) -> bool {
        if let Some(m) = self.metrics {
            publish(m, &self.names, s);
        }
        if let Some(p) = self.live.as_mut() {
            p.tick_threads("forwarding", s.t_ns, &counted(&self.names, s), threads);
            return false;
        }
        // A tick a little early still prints (ticks are whole periods apart).
        let due = self
            .period
            .saturating_sub(std::time::Duration::from_millis(50));
        if !self.period.is_zero() && self.last_print.elapsed() >= due {
            self.last_print = std::time::Instant::now();
            print(self.json, out, s, "stats");
            return true;
        }
        false
    }

    /// The interval ticks come at: the print period, or a second when serving metrics.
    fn interval(&self) -> std::time::Duration {
        let p = if self.period.is_zero() {
            std::time::Duration::from_secs(86400 * 365)
        } else {
            self.period
        };
        if self.metrics.is_some() || self.live.is_some() {
            p.min(std::time::Duration::from_secs(1))
        } else {
            p
        }
    }
}

/// The live page when on a terminal, unless lines were asked for.
fn live(a: &Args, stop: &Arc<AtomicBool>) -> anyhow::Result<Option<ReadOnly>> {
    if !crate::console::wanted(a.json || a.no_console) {
        return Ok(None);
    }
    let title = format!("linerate fwd -i {} -o {}", a.input, a.output);
    Ok(Some(ReadOnly::start(title, stop.clone())?))
}

/// The page's rows of each thread of a threaded run: its input queues' receive and transmit
/// counters, and its output queues' (`names[t]`: thread t's input and output queues).
fn thread_rows(names: &[(String, Option<String>)], per: &[fwd::FwdStats]) -> Vec<(usize, Counted)> {
    let mut v = Vec::new();
    for (t, ((i, o), s)) in names.iter().zip(per).enumerate() {
        let ports = [i.as_str(), o.as_deref().unwrap_or(i)];
        v.extend(counted(&ports, s).into_iter().map(|r| (t, r)));
    }
    v
}

/// `--engine`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Engine {
    /// Kernel when possible, else xsk.
    Auto,
    /// An XDP program forwards in the kernel (DEVMAP redirect).
    Kernel,
    /// Forwarding in this process through the ports (AF_XDP sockets for xdp: ports).
    Xsk,
}

/// The interface of an `xdp:IFACE` port (every queue, not an aggregate).
fn xdp_iface(uri: &str) -> Option<String> {
    Uri::parse(uri).ok()?.xdp_whole().map(str::to_string)
}

/// Whether the kernel engine runs: `Ok(Some((in, out)))` with the interfaces, `Ok(None)` for
/// the xsk engine, a usage error when `--engine kernel` cannot be honoured.
pub fn kernel_engine(a: &Args) -> anyhow::Result<Option<(String, String)>> {
    let ifs = xdp_iface(&a.input).zip(xdp_iface(&a.output));
    let why_not = if ifs.is_none() {
        Some("both ports must be xdp:IFACE (every queue of the interface is forwarded; no @QUEUE)")
    } else if a.filter.is_some() {
        Some("-f runs in user space: use --engine xsk")
    } else if a.script.is_some() {
        Some("--script runs in user space: use --engine xsk")
    } else if a.busy_poll > 0 {
        Some("--busy-poll is for AF_XDP sockets: use --engine xsk")
    } else {
        None
    };
    match (a.engine, why_not) {
        (Engine::Xsk, _) => Ok(None),
        (Engine::Kernel, Some(w)) => Err(usage(format!("--engine kernel: {w}"))),
        (Engine::Auto, Some(_)) => Ok(None),
        (Engine::Auto, None) if a.count.is_some() => Ok(None),
        (engine, None) => {
            let Some((i, o)) = &ifs else { return Ok(None) };
            let (i, o) = (i.as_str(), o.as_str());
            // Every interface frames are redirected to must send them: a veth whose peer
            // cannot take XDP frames discards them all in the kernel.
            let mut egress = vec![o];
            if a.bidir && i != o {
                egress.push(i);
            }
            for e in egress {
                let why = match redirect_target(e) {
                    RedirectTarget::Delivers(_) => continue,
                    RedirectTarget::Discards(w) => w,
                    RedirectTarget::Unknown(w) => format!("cannot tell whether it delivers: {w}"),
                };
                if engine == Engine::Kernel {
                    return Err(usage(format!(
                        "--engine kernel: redirected frames would not leave {e}: {why}; use \
                         --engine xsk (AF_XDP sockets), or make the peer take XDP frames"
                    )));
                }
                eprintln!(
                    "note: --engine auto: the xsk engine (AF_XDP sockets), not the kernel \
                     engine: redirected frames would not leave {e}: {why}"
                );
                return Ok(None);
            }
            Ok(Some((i.to_string(), o.to_string())))
        }
    }
}

fn port_err(flag: &str, uri: &str, e: PortError) -> anyhow::Error {
    crate::common::port_error(flag, uri, e)
}

/// The interface behind a kernel port URI.
fn iface_of(uri: &str) -> Option<String> {
    Uri::parse(uri).ok()?.iface().map(str::to_string)
}

/// The MAC l2fwd writes as the source of frames leaving `uri`: the interface's, or a
/// locally administered 02:00:00:00:01:NN for ports without one.
fn port_mac(uri: &str, n: u8) -> [u8; 6] {
    iface_of(uri)
        .and_then(|i| iface_mac(&i).ok())
        .unwrap_or([0x02, 0, 0, 0, 0x01, n])
}

/// The rewrite the flags ask for.
pub fn mac_rewrite(a: &Args) -> anyhow::Result<MacRewrite> {
    if a.no_mac_updating {
        return Ok(MacRewrite::Off);
    }
    if let Some(m) = &a.mac {
        let (s, d) = m
            .split_once(',')
            .ok_or_else(|| usage(format!("--mac {m}: write SRC,DST")))?;
        let src = fwd::parse_mac(s).map_err(|e| usage(format!("--mac: {e}")))?;
        let dst = fwd::parse_mac(d).map_err(|e| usage(format!("--mac: {e}")))?;
        return Ok(MacRewrite::Fixed { src, dst });
    }
    Ok(MacRewrite::L2fwd {
        port_macs: [port_mac(&a.input, 0), port_mac(&a.output, 1)],
    })
}

/// Runs `linerate fwd`.
pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    let stop = stop_flag()?;
    run_with(a, &stop, &mut std::io::stdout())
}

/// Runs the forwarder with a given stop flag and output (the lab runs it on a thread).
pub fn run_with(
    mut a: Args,
    stop: &Arc<AtomicBool>,
    out: &mut dyn Write,
) -> anyhow::Result<ExitCode> {
    if a.quiet {
        // Only the final block: no periodic ones, no page.
        a.period = std::time::Duration::ZERO;
        a.no_console = true;
    }
    // `any` captures cooked (LINUX_SLL2) packets of every interface: forwarding them would
    // send the cooked header as Ethernet, and `any` names no interface to send on.
    crate::common::capture::refuse_any(
        "-i",
        &a.input,
        "captures Linux cooked packets (LINUX_SLL2) that cannot be forwarded as Ethernet frames; name the interface",
    )?;
    crate::common::capture::refuse_any(
        "-o",
        &a.output,
        "names no interface to send on; name the interface",
    )?;
    let opts = port_options(&a, stop)?;
    a.capture.check_xdp(&[&a.input, &a.output])?;
    let xdp = xdp_config(&a, &opts);
    let mut mac = mac_rewrite(&a)?;
    let mut script = fwd_script(&a, stop)?;
    let bounce = a.input == a.output;
    if let Some((i, o)) = kernel_engine(&a)? {
        return run_kernel(&a, mac, i, o, stop, out);
    }
    let plan = thread_plan(&a)?;
    if plan.0 > 1 {
        return run_threads(&a, mac, plan, &opts, &xdp, stop, out);
    }
    if let Some(w) = &plan.1 {
        if !a.json {
            let _ = writeln!(out, "Threads: {w}");
        }
    }
    let (mut p0, mut p1, shared, if_start) = open_ports(&a, &opts, &xdp)?;
    let mac_note = check_link_type(&a, p0.as_ref(), p1.as_deref(), &mut mac)?;
    // A pcapng output describes where its packets come from: the input's interfaces.
    if let Some(p) = p1.as_mut() {
        p.describe(&p0.interfaces())
            .with_context(|| format!("-o {}", a.output))?;
    }
    let user_filter = port_filters(&a, p0.as_mut(), p1.as_mut())?;
    pin(a.core)?;
    let shape = Shape {
        bounce,
        shared,
        mac_note,
        user_filter: user_filter.is_some(),
        plan: plan.1.as_deref(),
    };
    announce(out, &a, &shape, &mac);
    let m = metrics::start(&a.metrics, "fwd", false)?;
    let mut ticker = Ticker {
        json: a.json,
        period: a.period,
        last_print: std::time::Instant::now(),
        metrics: m.as_ref(),
        names: [a.input.as_str(), a.output.as_str()],
        live: live(&a, stop)?,
    };
    if let Some(m) = &m {
        // Every port at 0 before the first packet.
        let nports = if bounce { 1 } else { 2 };
        publish_zero(m, &ticker.names, nports);
    }
    let fo = FwdOptions {
        bidir: a.bidir,
        filter: user_filter,
        mac,
        interval: ticker.interval(),
        duration: a.duration,
        count: a.count,
        input_start: Some(PortStats::sum(&if_start)),
        ..Default::default()
    };
    let wall_start = linerate::time::wall_ns();
    let ports = match p1.as_mut() {
        Some(p1) => Ports::Two(p0.as_mut(), p1.as_mut()),
        None => Ports::One(p0.as_mut()),
    };
    let json = a.json;
    let hook = script.as_mut().map(|s| s as &mut dyn fwd::BatchFilter);
    linerate::port::file::start_writing();
    let mut report = fwd::run_with(ports, &fo, hook, stop, |s| {
        ticker.tick(out, s);
    });
    // The terminal back before the summary.
    ticker.live = None;
    if let Some(p) = p1.as_mut() {
        let run = (&if_start[..], wall_start);
        if let Err(e) = close_output(&a, p0.as_mut(), p.as_mut(), run) {
            report.error.get_or_insert(e);
        }
    }
    if let Some(m) = &m {
        publish(m, &ticker.names, &report.stats);
    }
    print(json, out, &report.stats, "summary");
    if !json {
        let _ = writeln!(out, "Forwarding ended: {}", ended(&report));
    }
    drop(p1);
    drop(p0);
    if let Some(e) = report.script_error {
        anyhow::bail!("forwarding stopped: script {e}");
    }
    match report.error {
        None => Ok(ExitCode::SUCCESS),
        Some(e) => Err(anyhow::Error::new(e).context("forwarding stopped")),
    }
}

/// -i and -o (one port when they are the same: bounce), whether they share one UMEM, and
/// the input's counters when it opened: the run counts from there, even when the output's
/// open waited (a FIFO for its reader) while the input dropped what it could not hold.
fn open_ports(a: &Args, opts: &PortOptions, xdp: &XdpConfig) -> anyhow::Result<OpenPorts> {
    if a.input == a.output {
        let mut p0 = shared::open_port("-i", &a.input, opts, xdp)?;
        let if_start = p0.interface_stats();
        return Ok((p0, None, false, if_start));
    }
    let (p0, p1, shared, if_start) = shared::open_pair(&a.input, &a.output, opts, xdp)?;
    Ok((p0, Some(p1), shared, if_start))
}

/// -i, -o, whether they share one UMEM, and the input's counters when it opened.
type OpenPorts = (Box<dyn Port>, Option<Box<dyn Port>>, bool, Vec<PortStats>);

/// The metrics of `nports` ports at 0.
fn publish_zero(m: &metrics::Metrics, names: &[&str], nports: usize) {
    let zero = fwd::FwdStats {
        nports,
        ..Default::default()
    };
    publish(m, names, &zero);
}

/// The ports' options: -o's flushing and rotation (a capture file), checked before
/// anything is opened, and -i's capture settings.
fn port_options(a: &Args, stop: &Arc<AtomicBool>) -> anyhow::Result<PortOptions> {
    let mut inputs = crate::common::inputs_of([a.input.as_str()]);
    if let Some(s) = &a.script {
        inputs.add_path(s);
    }
    let write = a.out.options(
        &a.ring.ring_buffer,
        crate::common::output::file_of_uri(&a.output).as_deref(),
        a.json,
        Some(stop.clone()),
    )?;
    a.capture.apply(
        "-i",
        &a.input,
        linerate::port::Capture::In,
        PortOptions {
            inputs,
            write_format: a.format,
            write,
            // afpacket: each packet is forwarded as soon as it is in, not when its receive
            // block retires (DPDK's l2fwd and netmap's bridge forward at once).
            immediate: true,
            ..Default::default()
        },
    )
}

/// The xdp: ports' mode, attachment and busy polling.
fn xdp_config(a: &Args, opts: &PortOptions) -> XdpConfig {
    XdpConfig {
        mode: a.xdp_mode,
        busy_poll: (a.busy_poll > 0).then(|| xdp::BusyPoll {
            usecs: a.busy_poll,
            ..Default::default()
        }),
        ..opts.xdp
    }
}

/// --script, loaded; a script that does not return is stopped by a signal or -t.
fn fwd_script(a: &Args, stop: &Arc<AtomicBool>) -> anyhow::Result<Option<fwd::LuaFilter>> {
    let Some(path) = &a.script else {
        return Ok(None);
    };
    let interrupt = lua::Interrupt::new(stop.clone());
    interrupt.set_limit(a.duration);
    let opts = ScriptOptions {
        mem: a.lua_mem,
        interrupt: Some(interrupt),
    };
    Ok(Some(load_script(path, &opts)?))
}

/// Frames that are not Ethernet (raw IP, Linux cooked, loopback) have no MAC addresses to
/// rewrite, and go out only where their link type is kept (a file output takes the
/// input's): refused, or the MAC rewrite turned off with a note for the start line.
fn check_link_type(
    a: &Args,
    p0: &dyn Port,
    p1: Option<&dyn Port>,
    mac: &mut MacRewrite,
) -> anyhow::Result<Option<String>> {
    let link = p0.link_type();
    if link == LinkType::ETHERNET {
        return Ok(None);
    }
    if a.mac.is_some() {
        return Err(usage(format!(
            "--mac: -i {} holds link type {} frames, not Ethernet: they have no MAC \
             addresses to rewrite (drop --mac)",
            a.input, link.0
        )));
    }
    if let Some(p) = p1 {
        if p.link_type() != link {
            return Err(usage(format!(
                "-o {}: sends link type {} frames, -i {} holds link type {}: forward \
                 them to a capture file, which keeps their link type",
                a.output,
                p.link_type().0,
                a.input,
                link.0
            )));
        }
    }
    let note = (*mac != MacRewrite::Off).then(|| {
        format!(
            ", MAC addresses not updated (link type {} frames have none)",
            link.0
        )
    });
    *mac = MacRewrite::Off;
    Ok(note)
}

/// -f attached to the ports in the kernel where they take it: the filter left to run in
/// user space, if any.
fn port_filters(
    a: &Args,
    p0: &mut dyn Port,
    p1: Option<&mut Box<dyn Port>>,
) -> anyhow::Result<Option<Filter>> {
    let Some(expr) = &a.filter else {
        return Ok(None);
    };
    let f = Filter::compile(expr, p0.link_type()).map_err(|e| usage(format!("-f: {e}")))?;
    let mut all_kernel = crate::common::attach_filter(p0, &f, &a.input)?;
    if a.bidir {
        if let Some(p) = p1 {
            all_kernel &= crate::common::attach_filter(p.as_mut(), &f, &a.output)?;
        }
    }
    Ok((!all_kernel).then_some(f))
}

/// What the start line says about the forwarding.
struct Shape<'a> {
    /// -i is -o: packets go back out where they came in.
    bounce: bool,
    /// -i and -o share one UMEM (no copy).
    shared: bool,
    /// Why MAC addresses are not rewritten, when the frames have none.
    mac_note: Option<String>,
    /// -f runs in user space (not in the kernel).
    user_filter: bool,
    plan: Option<&'a str>,
}

/// The start line (or JSON record).
fn announce(out: &mut dyn Write, a: &Args, s: &Shape, mac: &MacRewrite) {
    if a.json {
        let start = serde_json::json!({
            "type": "start",
            "engine": "xsk",
            "input": a.input,
            "output": a.output,
            "bounce": s.bounce,
            "bidir": a.bidir,
            "shared_umem": s.shared,
            "filter": a.filter,
            "filter_in_kernel": a.filter.is_some() && !s.user_filter,
            "script": a.script,
            "threads": 1,
            "plan": s.plan.unwrap_or("1 thread"),
        });
        let _ = writeln!(out, "{start}");
    } else {
        let _ = writeln!(
            out,
            "Forwarding {} -> {}{}{}{}{}",
            a.input,
            if s.bounce {
                "itself (bounce)"
            } else {
                &a.output
            },
            if a.bidir && !s.bounce {
                " and back"
            } else {
                ""
            },
            if s.shared {
                ", one shared UMEM (no copy)"
            } else {
                ""
            },
            s.mac_note.clone().unwrap_or_else(|| mac_text(mac)),
            match (&a.filter, s.user_filter) {
                (None, _) => String::new(),
                (Some(f), false) => format!(", filter '{f}' in the kernel"),
                (Some(f), true) => format!(", filter '{f}' in user space"),
            }
        );
    }
    let _ = out.flush();
}

/// Closes -o: what each input interface did closes a pcapng output (a no-op for other
/// ports). A capture file's interfaces span their packets' times, not the run's. `run`:
/// the input's counters when it opened, and the run's start.
fn close_output(
    a: &Args,
    p0: &mut dyn Port,
    p: &mut dyn Port,
    (if_start, wall_start): (&[PortStats], u64),
) -> Result<(), PortError> {
    let (t0, t1) = if Uri::parse(&a.input).is_ok_and(|u| u.is_file()) {
        (0, 0)
    } else {
        (wall_start, linerate::time::wall_ns())
    };
    let st = InterfaceStats::of_run(
        if_start,
        &p0.interface_stats(),
        &p.tx_by_interface(),
        t0,
        t1,
    );
    p.finish(&st)
}

fn print(json: bool, out: &mut dyn Write, s: &fwd::FwdStats, kind: &str) {
    if json {
        let ports: Vec<serde_json::Value> = s.ports[..s.nports]
            .iter()
            .map(|p| {
                serde_json::json!({"sent": p.sent, "received": p.received,
                    "dropped": p.dropped, "filtered": p.filtered,
                    "drops_by_reason": reasons_json(p)})
            })
            .collect();
        let _ = writeln!(out, "{}", serde_json::json!({"type": kind, "ports": ports}));
    } else {
        let _ = out.write_all(fwd::l2fwd_block(s).as_bytes());
    }
    let _ = out.flush();
}

fn ended(r: &fwd::FwdReport) -> &'static str {
    match r.ended {
        Ended::Error if r.script_error.is_some() => "script error",
        Ended::Error => "port error",
        e => e.text(),
    }
}

fn mac_text(mac: &MacRewrite) -> String {
    match mac {
        MacRewrite::Off => ", MAC addresses unchanged".to_string(),
        MacRewrite::L2fwd { .. } => {
            ", MAC rewrite: src = output port, dst = 02:00:00:00:00:TX_PORTID".into()
        }
        MacRewrite::Fixed { .. } => ", MAC rewrite: fixed".into(),
    }
}

/// `--engine kernel`: the XDP program forwards; this process only reads its counters.
fn run_kernel(
    a: &Args,
    mac: MacRewrite,
    i: String,
    o: String,
    stop: &Arc<AtomicBool>,
    out: &mut dyn Write,
) -> anyhow::Result<ExitCode> {
    let bounce = i == o;
    let cfg = KernelFwdConfig {
        ifaces: [i.clone(), o.clone()],
        bidir: a.bidir,
        mac: [mac.for_port(0), mac.for_port(if bounce { 0 } else { 1 })],
        attach: a.capture.xdp_attach.unwrap_or_default(),
    };
    let mut k = KernelFwd::open(&cfg).map_err(|e| port_err("-i", &a.input, e))?;
    let on = if a.bidir && !bounce {
        format!("{i} and {o}")
    } else {
        i.clone()
    };
    let attach = match k.attach_mode() {
        AttachMode::Generic => "generic",
        _ => "native",
    };
    if a.json {
        let start = serde_json::json!({
            "type": "start",
            "engine": "kernel",
            "input": a.input,
            "output": a.output,
            "bounce": bounce,
            "bidir": a.bidir,
            "attach": attach,
            "replaced_stale": k.replaced_stale(),
        });
        let _ = writeln!(out, "{start}");
    } else {
        let _ = writeln!(
            out,
            "Forwarding {} -> {}{} in the kernel (XDP program {} on {on}, {attach}, DEVMAP \
             redirect){}",
            a.input,
            if bounce { "itself (bounce)" } else { &a.output },
            if a.bidir && !bounce { " and back" } else { "" },
            linerate::port::xdp::kfwd::PROG_NAME,
            mac_text(&mac),
        );
    }
    let _ = out.flush();
    let m = metrics::start(&a.metrics, "fwd", false)?;
    let mut ticker = Ticker {
        json: a.json,
        period: a.period,
        last_print: std::time::Instant::now(),
        metrics: m.as_ref(),
        names: [i.as_str(), o.as_str()],
        live: live(a, stop)?,
    };
    if let Some(m) = &m {
        let nports = if bounce { 1 } else { 2 };
        let zero = fwd::FwdStats {
            nports,
            ..Default::default()
        };
        publish(m, &ticker.names, &zero);
    }
    let fo = FwdOptions {
        bidir: a.bidir,
        mac,
        interval: ticker.interval(),
        duration: a.duration,
        count: a.count,
        ..Default::default()
    };
    let json = a.json;
    let report = fwd::run_kernel(&mut k, &fo, stop, |s| {
        ticker.tick(out, s);
    });
    ticker.live = None;
    drop(k); // detach before the final block: nothing is forwarded after it
    if let Some(m) = &m {
        publish(m, &ticker.names, &report.stats);
    }
    print(json, out, &report.stats, "summary");
    if !json {
        let _ = writeln!(
            out,
            "Forwarding ended: {} (dropped = the program's drops + the interfaces' own drop \
             counters)",
            ended(&report)
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Loads `--script`: a script the tool cannot use is a usage error; one that runs out of memory
/// or does not return at its top level a runtime error.
fn load_script(path: &str, opts: &ScriptOptions) -> anyhow::Result<fwd::LuaFilter> {
    fwd::LuaFilter::load(path, opts).map_err(|e| match e {
        ScriptError::Memory(m) | ScriptError::Stopped(m) => anyhow::anyhow!("--script: {m}"),
        e => usage(format!("--script: {e}")),
    })
}

/// Threads of an xsk run, and the plan in words when it says more than "1 thread".
fn thread_plan(a: &Args) -> anyhow::Result<(usize, Option<String>)> {
    if a.threads == Some(1) {
        return Ok((1, None));
    }
    let queues =
        |u: &str| shared::xdp_of(u).map_or(1, |(i, q)| xdp::queue_count_of(&i, q).unwrap_or(1));
    let bounce = a.input == a.output;
    let (qi, qo) = (queues(&a.input), queues(&a.output));
    let pairs = if bounce {
        qi
    } else if shared::xdp_of(&a.input).is_some() && shared::xdp_of(&a.output).is_some() {
        qi.min(qo)
    } else {
        1
    };
    let asked = a.threads.unwrap_or(pairs);
    if asked <= 1 {
        return Ok((1, None));
    }
    let why_one = if a.script.is_some() {
        Some("--script runs one Lua state".to_string())
    } else if a.core.is_some() {
        Some("-g pins one forwarding loop".to_string())
    } else if pairs <= 1 {
        Some(format!(
            "{} -> {} is one queue pair (threads need both ports xdp:IFACE with several queues)",
            a.input, a.output
        ))
    } else {
        None
    };
    if let Some(w) = why_one {
        if a.threads.is_some() {
            return Err(usage(format!(
                "--threads {asked}: {w}; leave --threads out"
            )));
        }
        return Ok((1, Some(format!("1 thread for every queue: {w}"))));
    }
    let n = asked.min(pairs);
    Ok((
        n,
        Some(format!(
            "{n} threads, thread t reads {} queues t, t+{n}, ... and sends out of {} queue t{}, \
             no dispatcher",
            a.input,
            if bounce { &a.input } else { &a.output },
            if a.bidir && !bounce {
                " (and back)"
            } else {
                ""
            }
        )),
    ))
}

/// The queues of `ports` (queue j at index j) in `n` shares: share t holds queues t, t+n, ...,
/// queue t first (a share's transmit goes out of its first port).
fn shares_of(uri: &str, ports: Vec<Box<dyn Port>>, n: usize) -> Vec<(String, Box<dyn Port>)> {
    let mut groups: Vec<Vec<Box<dyn Port>>> = (0..n).map(|_| Vec::new()).collect();
    for (j, p) in ports.into_iter().enumerate() {
        groups[j % n].push(p);
    }
    groups
        .into_iter()
        .map(|mut g| {
            if g.len() == 1 {
                let p = g.remove(0);
                (p.name().to_string(), p)
            } else {
                let name = g.iter().map(|p| p.name()).collect::<Vec<_>>().join(",");
                let agg = linerate::port::Aggregate::new(&name, g);
                (name, Box::new(agg) as Box<dyn Port>)
            }
        })
        .map(|(name, p)| {
            (
                if name.is_empty() {
                    uri.to_string()
                } else {
                    name
                },
                p,
            )
        })
        .collect()
}

/// Each thread's counters in a JSON line.
fn threads_json(names: &[(String, Option<String>)], per: &[fwd::FwdStats]) -> serde_json::Value {
    per.iter()
        .zip(names)
        .enumerate()
        .map(|(t, (s, (i, o)))| {
            let ports: Vec<serde_json::Value> = s.ports[..s.nports]
                .iter()
                .map(|p| {
                    serde_json::json!({"sent": p.sent, "received": p.received,
                        "dropped": p.dropped, "filtered": p.filtered})
                })
                .collect();
            serde_json::json!({"thread": t, "input": i, "output": o, "ports": ports})
        })
        .collect()
}

/// One line per thread under an l2fwd block.
fn threads_text(names: &[(String, Option<String>)], per: &[fwd::FwdStats]) -> String {
    let mut s = String::new();
    for (t, (st, (i, o))) in per.iter().zip(names).enumerate() {
        let x = st.total();
        s.push_str(&format!(
            "Thread {t} [{i}{}]: received {}, sent {}, dropped {}{}\n",
            o.as_ref().map(|o| format!(" -> {o}")).unwrap_or_default(),
            x.received,
            x.sent,
            x.dropped,
            if x.filtered > 0 {
                format!(", filtered {}", x.filtered)
            } else {
                String::new()
            }
        ));
    }
    s
}

/// The xsk engine on one thread per queue pair (see `--threads`).
fn run_threads(
    a: &Args,
    mac: MacRewrite,
    (n, words): (usize, Option<String>),
    opts: &PortOptions,
    xcfg: &XdpConfig,
    stop: &Arc<AtomicBool>,
    out: &mut dyn Write,
) -> anyhow::Result<ExitCode> {
    let bounce = a.input == a.output;
    let ThreadShares {
        shares,
        names,
        link,
        shared,
        in_kernel,
    } = thread_ports(a, n, opts, xcfg)?;
    let words = words.unwrap_or_default();
    if a.json {
        let start = serde_json::json!({
            "type": "start",
            "engine": "xsk",
            "input": a.input,
            "output": a.output,
            "bounce": bounce,
            "bidir": a.bidir,
            "shared_umem": shared,
            "filter": a.filter,
            "filter_in_kernel": in_kernel,
            "script": a.script,
            "threads": n,
            "thread_ports": threads_json(&names, &[]),
            "plan": words,
        });
        let _ = writeln!(out, "{start}");
    } else {
        let _ = writeln!(
            out,
            "Forwarding {} -> {}{}{}{}{}",
            a.input,
            if bounce { "itself (bounce)" } else { &a.output },
            if a.bidir && !bounce { " and back" } else { "" },
            if shared && !bounce {
                ", one shared UMEM (no copy)"
            } else {
                ""
            },
            mac_text(&mac),
            match (&a.filter, in_kernel) {
                (None, _) => String::new(),
                (Some(f), true) => format!(", filter '{f}' in the kernel"),
                (Some(f), false) => format!(", filter '{f}' in user space"),
            }
        );
        let _ = writeln!(out, "Threads: {words}");
    }
    let _ = out.flush();
    let m = metrics::start(&a.metrics, "fwd", false)?;
    let mut ticker = Ticker {
        json: a.json,
        period: a.period,
        last_print: std::time::Instant::now(),
        metrics: m.as_ref(),
        names: [a.input.as_str(), a.output.as_str()],
        live: live(a, stop)?,
    };
    let interval = ticker.interval();
    let filter = a.filter.clone().filter(|_| !in_kernel);
    let make = || FwdOptions {
        bidir: a.bidir,
        // Checked above: it compiles here as it did there.
        filter: filter
            .as_deref()
            .and_then(|e| Filter::compile(e, link).ok()),
        mac,
        interval,
        duration: a.duration,
        count: a.count,
        ..Default::default()
    };
    let json = a.json;
    let report = fwd::run_threads(shares, make, stop, |t, per| {
        if ticker.tick_threads(out, t, &thread_rows(&names, per)) && !json {
            let _ = out.write_all(threads_text(&names, per).as_bytes());
        }
    });
    ticker.live = None;
    let r = &report.total;
    if let Some(m) = &m {
        publish(m, &ticker.names, &r.stats);
    }
    threads_summary(out, json, &names, &report, n);
    let _ = out.flush();
    drop(report.threads);
    match &r.error {
        None => Ok(ExitCode::SUCCESS),
        Some(e) => Err(anyhow::anyhow!("forwarding stopped: {e}")),
    }
}

/// The threads' ports: each thread's share of -i's queues and of -o's (none when they are
/// one interface: bounce), with -f attached in the kernel where they take it. Also their
/// names, the link type, whether the ports share one UMEM, and whether -f is all in the
/// kernel.
fn thread_ports(
    a: &Args,
    n: usize,
    opts: &PortOptions,
    xcfg: &XdpConfig,
) -> anyhow::Result<ThreadShares> {
    let bounce = a.input == a.output;
    // Threads run only when both ports are xdp: (see thread_plan). Every queue of both
    // interfaces on one UMEM (a received frame leaves without a copy) where the kernel allows;
    // queues never wait in rx (each thread polls its own).
    let opts = PortOptions {
        xdp: *xcfg,
        ..opts.clone()
    };
    let pair = linerate::open_pair_parts(&a.input, &a.output, &opts).map_err(shared::pair_error)?;
    let (p0, p1, shared) = (pair.input, pair.output, pair.shared_umem);
    let Some(link) = p0.first().map(|p| p.link_type()) else {
        anyhow::bail!("-i {}: no queue to read", a.input);
    };
    let mut ins = shares_of(&a.input, p0, n);
    let mut outs: Vec<Option<(String, Box<dyn Port>)>> = if bounce {
        (0..n).map(|_| None).collect()
    } else {
        shares_of(&a.output, p1, n).into_iter().map(Some).collect()
    };
    let mut in_kernel = a.filter.is_some();
    if let Some(expr) = &a.filter {
        let f = Filter::compile(expr, link).map_err(|e| usage(format!("-f: {e}")))?;
        for (name, p) in ins.iter_mut() {
            in_kernel &= crate::common::attach_filter(p.as_mut(), &f, name)?;
        }
        if a.bidir {
            for (name, p) in outs.iter_mut().flatten() {
                in_kernel &= crate::common::attach_filter(p.as_mut(), &f, name)?;
            }
        }
    }
    let names: Vec<(String, Option<String>)> = ins
        .iter()
        .zip(&outs)
        .map(|((i, _), o)| (i.clone(), o.as_ref().map(|(n, _)| n.clone())))
        .collect();
    let shares: Vec<fwd::ThreadPorts> = ins
        .into_iter()
        .zip(outs)
        .map(|((_, input), o)| fwd::ThreadPorts {
            input,
            output: o.map(|(_, p)| p),
        })
        .collect();
    Ok(ThreadShares {
        shares,
        names,
        link,
        shared,
        in_kernel,
    })
}

/// The threads' ports, as [`thread_ports`] opens them.
struct ThreadShares {
    shares: Vec<fwd::ThreadPorts>,
    /// Each thread's input and output names.
    names: Vec<(String, Option<String>)>,
    link: LinkType,
    /// -i and -o share one UMEM.
    shared: bool,
    /// -f runs in the kernel on every port.
    in_kernel: bool,
}

/// The summary of a threaded run, with each thread's figures.
fn threads_summary(
    out: &mut dyn Write,
    json: bool,
    names: &[(String, Option<String>)],
    report: &fwd::ThreadsReport,
    n: usize,
) {
    let r = &report.total;
    let per: Vec<fwd::FwdStats> = report.threads.iter().map(|t| t.stats).collect();
    if json {
        let ports: Vec<serde_json::Value> = r.stats.ports[..r.stats.nports]
            .iter()
            .map(|p| {
                serde_json::json!({"sent": p.sent, "received": p.received,
                    "dropped": p.dropped, "filtered": p.filtered,
                    "drops_by_reason": reasons_json(p)})
            })
            .collect();
        let _ = writeln!(
            out,
            "{}",
            serde_json::json!({"type": "summary", "ports": ports,
                "threads": threads_json(names, &per), "ended": ended(r)})
        );
    } else {
        let _ = out.write_all(fwd::l2fwd_block(&r.stats).as_bytes());
        let _ = out.write_all(threads_text(names, &per).as_bytes());
        let _ = writeln!(out, "Forwarding ended: {}; {n} threads", ended(r));
    }
}

/// A port's `dropped` by reason (they sum to it), every reason named.
fn reasons_json(p: &fwd::FwdPortStats) -> serde_json::Value {
    let l = p.losses();
    DropReason::ALL
        .iter()
        .filter(|r| **r != DropReason::Filter)
        .map(|r| (r.name().to_string(), serde_json::Value::from(l.get(*r))))
        .collect::<serde_json::Map<_, _>>()
        .into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::console::keys::CommandLine;
    use crate::console::page::render_text;
    use crate::console::{counters_page, Meter};
    use linerate::stats::{group, group_f};

    /// The words of the row of `s` (a rendered page) that starts with thread `t` and holds
    /// `port` and `dir`.
    fn thread_row(s: &str, t: usize, port: &str, dir: &str) -> Vec<String> {
        s.lines()
            .map(|l| {
                l.trim_matches(|c| c == '│' || c == ' ')
                    .split_whitespace()
                    .map(String::from)
                    .collect::<Vec<_>>()
            })
            .find(|w| w.len() == 7 && w[0] == t.to_string() && w[1] == port && w[2] == dir)
            .unwrap_or_else(|| panic!("no thread {t} {port} {dir} row in {s}"))
    }

    /// Threaded forwarding of two capture files into two files (one thread each): the page
    /// gives each thread's receive and transmit rows with what that thread forwarded, and the
    /// ports' rows their sums, all from the run's own counters.
    #[test]
    fn the_threads_page_shows_each_threads_share_of_a_real_run() {
        let dir = linerate_test_support::corpus_dir();
        let srcs = ["afs.pcap", "mptcp-v0.pcap"].map(|f| dir.join(f));
        if !srcs.iter().all(|f| f.exists()) {
            linerate_test_support::skip("tcpdump's test captures are not in the repository");
            return;
        }
        let tmp = std::env::temp_dir().join(format!("lr-fwdpage-{}", std::process::id()));
        std::fs::create_dir_all(&tmp).expect("a temporary directory");
        let mut names = Vec::new();
        let mut shares = Vec::new();
        for (i, src) in srcs.iter().enumerate() {
            let input = tmp.join(format!("i{i}.pcap"));
            std::fs::copy(src, &input).expect("copy a capture");
            let (iu, ou) = (
                format!("pcap:{}", input.display()),
                format!("pcap:{}", tmp.join(format!("o{i}.pcap")).display()),
            );
            let o = PortOptions::default();
            shares.push(fwd::ThreadPorts {
                input: linerate::open_rx(&iu, &o).expect("open the input"),
                output: Some(linerate::open_tx(&ou, &o).expect("open the output")),
            });
            names.push((iu, Some(ou)));
        }
        let stop = AtomicBool::new(false);
        let make = || FwdOptions {
            interval: std::time::Duration::from_millis(10),
            ..Default::default()
        };
        let report = fwd::run_threads(shares, make, &stop, |_, _| {});
        let _ = std::fs::remove_dir_all(&tmp);
        assert!(report.total.error.is_none(), "{:?}", report.total.error);
        let per: Vec<fwd::FwdStats> = report.threads.iter().map(|t| t.stats).collect();
        let total = report.total.stats;
        // Two readings, as the page makes every interval: nothing yet, then the end.
        let mut meter = Meter::default();
        let t0 = per.iter().map(|s| s.t_ns).min().unwrap_or(0) - 1_000_000;
        let zero: Vec<fwd::FwdStats> = per
            .iter()
            .map(|s| fwd::FwdStats {
                nports: s.nports,
                ..Default::default()
            })
            .collect();
        let ports = ["pcap:in", "pcap:out"];
        let zero_total = fwd::FwdStats {
            nports: 2,
            ..Default::default()
        };
        let _ = counters_page(
            String::new(),
            String::new(),
            0.0,
            t0,
            &counted(&ports, &zero_total),
            &thread_rows(&names, &zero),
            &mut meter,
        );
        let t1 = total.t_ns.max(t0 + 1);
        let page = counters_page(
            "linerate fwd".into(),
            "forwarding".into(),
            1.0,
            t1,
            &counted(&ports, &total),
            &thread_rows(&names, &per),
            &mut meter,
        );
        let s = render_text(&page, &CommandLine::new(false).prompt(), 140, 40);
        println!("{s}");
        let secs = (t1 - t0) as f64 / 1e9;
        let mut sent = 0;
        for (t, (s_t, (i, o))) in per.iter().zip(&names).enumerate() {
            let (p0, p1) = (&s_t.ports[0], &s_t.ports[1]);
            assert!(p0.received > 0, "thread {t} read its capture: {p0:?}");
            // Received on the input, sent out of the output.
            let want = |p: u64, b: u64, d: u64, dir: &str, port: &str| {
                vec![
                    t.to_string(),
                    port.to_string(),
                    dir.to_string(),
                    group_f(p as f64 / secs, 0),
                    group_f(b as f64 * 8.0 / secs / 1e6, 2),
                    group(p),
                    group(d),
                ]
            };
            assert_eq!(
                thread_row(&s, t, i, "rx"),
                want(p0.received, p0.rx_bytes, p0.rx_drops.total(), "rx", i),
                "{s}"
            );
            let o = o.as_deref().unwrap();
            assert_eq!(
                thread_row(&s, t, o, "tx"),
                want(p1.sent, p1.tx_bytes, p1.tx_drops.total(), "tx", o),
                "{s}"
            );
            sent += p1.sent;
        }
        assert_eq!(sent, 601 + 264, "every packet forwarded: {s}");
        assert!(
            s.lines()
                .any(|l| l.contains("pcap:out") && l.contains(" tx ") && l.contains("865")),
            "{s}"
        );
    }
}

//! `linerate gen`: MoonGen / pktgen-dpdk. Templates with varied fields, rate control on the
//! TSC, latency probes, Lua userscripts, pcap replay.

use super::gen_streams;
use crate::common::{flags, metrics, stop_flag, usage};
use crate::console::commands::Steer;
use crate::console::{Console, LatencyLine, Meter, Page, PortRow, RateLine, ReadOnly};
use anyhow::Context;
use clap::Parser;
use linerate::apps::gen::interval::Interval;
use linerate::apps::gen::latency::{ReceiveOptions, Tracker};
use linerate::apps::gen::replay::{self, ReplayOptions};
use linerate::apps::gen::sched::{CatchUp, Gaps, OnStall, Pattern, Precision, PRECISION_BOUNDS};
use linerate::apps::gen::script::{LuaHook, ScriptConfig, ScriptError};
use linerate::apps::gen::template::{TemplateSpec, L4};
use linerate::apps::gen::threads::{GenThread, Probes, ThreadsError};
use linerate::apps::gen::vary::{
    parse_addr, parse_mac, parse_seq, port_value, AddrSeq, Seq, SizeSpec,
};
use linerate::apps::gen::{self, rate_words, GenOptions, GenReport, GenTick, StreamSpec};
use linerate::apps::lua::{Interrupt, ScriptOptions};
use linerate::apps::worker::Ticker;
use linerate::port::file::Inputs;
use linerate::port::pcap::{PcapPort, WriteFormat};
use linerate::port::{Drops, Interface, LinkType, Port, PortError, PortOptions, Uri};
use linerate::stats::prom::{Dir, PortCount};
use linerate::stats::{breakdown, group, group_f};
use linerate::time::{Clock, TscClock};
use linerate::units::Rate;
use std::io::Write;
use std::net::IpAddr;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Flags of `linerate gen`.
#[derive(Parser, Debug, Default)]
pub struct Args {
    /// Output port: afpacket:IFACE, xdp:IFACE, mem:NAME, pcap:FILE, or a,b (one per thread).
    /// A capture file (pcap:FILE, pcapng:FILE or a path) is pcapng when its name ends in
    /// .pcapng.
    #[arg(short = 'o', long = "out", value_name = "PORT")]
    pub output: String,
    /// Format of an -o capture file whatever its name: pcap or pcapng.
    #[arg(long, value_name = "pcap|pcapng")]
    pub format: Option<WriteFormat>,
    /// With -o xdp:IFACE: live (the kernel builds and sends the frames: XDP live frames),
    /// xsk (AF_XDP through the xdp port), or auto (live unless the options need xsk:
    /// --script, --rx, size ranges, value lists, several streams).
    #[arg(long, value_name = "ENGINE", default_value = "auto")]
    pub engine: String,
    /// Live engine: frames per kernel batch (1..256).
    #[arg(long, value_name = "N", default_value_t = 64, value_parser = flags::int(1u32, 256))]
    pub batch: u32,
    /// Frame size with CRC: 64, a range 64-1518 (uniform), or imix (64/594/1518 in 7:4:1);
    /// 64 to 9022 (jumbo frames above 1518, as far as the port's MTU and buffers allow).
    #[arg(long, value_name = "SIZE")]
    pub size: Option<String>,
    /// Rate in all: 1Mpps, 500kpps, 5Gbps (frames + 20 B preamble and gap), 80% (of
    /// --link-speed). As fast as possible without it.
    #[arg(long, value_name = "RATE")]
    pub rate: Option<String>,
    /// Spacing of packets: cbr, poisson or burst:N.
    #[arg(long, value_name = "PATTERN")]
    pub pattern: Option<String>,
    /// Stop after this many packets in all (10k, 1M).
    #[arg(short = 'c', long, value_name = "COUNT")]
    pub count: Option<String>,
    /// Stop after this long (10s, 500ms).
    #[arg(short = 't', long, value_name = "DURATION")]
    pub duration: Option<String>,
    /// Generator threads, each with its own port (opened again, or the next of a,b).
    #[arg(short = 'T', long, value_name = "N", default_value_t = 1, value_parser = flags::int(1usize, 64))]
    pub threads: usize,
    /// Streams per thread (the rate is shared; each has its own id for latency). --stream
    /// gives streams of their own instead.
    #[arg(long, default_value_t = 1, value_parser = flags::int(1usize, 255))]
    pub streams: usize,
    /// Destination MAC.
    #[arg(long, value_name = "MAC")]
    pub dst_mac: Option<String>,
    /// Source MAC.
    #[arg(long, value_name = "MAC")]
    pub src_mac: Option<String>,
    /// Source address(es): A, A-B (increment), random:A-B, or A,B,C. IPv6 varies the low 32
    /// bits.
    #[arg(long, value_name = "RANGE")]
    pub src_ip: Option<String>,
    /// Destination address(es), as --src-ip.
    #[arg(long, value_name = "RANGE")]
    pub dst_ip: Option<String>,
    /// Source port(s): P, A-B, random:A-B or P,Q.
    #[arg(long, value_name = "RANGE")]
    pub sport: Option<String>,
    /// Destination port(s), as --sport.
    #[arg(long, value_name = "RANGE")]
    pub dport: Option<String>,
    /// Vary the source address over N values (N flows).
    #[arg(long, value_name = "N")]
    pub flows: Option<String>,
    /// Protocol: udp, tcp, icmp (echo request; ICMPv6 echo with IPv6 addresses: the
    /// identifier is --sport, the sequence number --dport) or arp (request for --dst-ip from
    /// --src-ip, to ff:ff:ff:ff:ff:ff unless --dst-mac).
    #[arg(long, value_name = "PROTO")]
    pub proto: Option<String>,
    /// Add an 802.1Q tag with this VLAN id (1..4094), or two, OUTER,INNER: QinQ, an 802.1ad
    /// (0x88a8) tag outside the 802.1Q one.
    #[arg(long, value_name = "ID[,ID]")]
    pub vlan: Option<String>,
    /// TTL / hop limit (default 64; on a replay, set in every packet).
    #[arg(long)]
    pub ttl: Option<u8>,
    /// Lua userscript: modify(pkts, n) is called once per batch; its config table gives
    /// defaults to these flags. A script is a program (MoonGen's kind): it has Lua's io and os
    /// libraries and runs with this tool's privileges.
    #[arg(long, value_name = "FILE.lua")]
    pub script: Option<String>,
    /// Memory bound of the script, per thread (1MiB to 64GiB); past it the run stops with an
    /// error naming the script.
    #[arg(long, value_name = "SIZE", default_value = "256MiB", value_parser = linerate::apps::lua::parse_mem)]
    pub lua_mem: usize,
    /// After a stall (the CPU taken away): catch-up (the default) sends the owed packets
    /// faster, within --catch-up-peak, --catch-up-burst and --catch-up-window, so that the
    /// mean rate stays the asked one; shift moves the rest of the schedule later, keeping the
    /// gaps (the mean rate falls by the time lost).
    #[arg(long, value_name = "MODE")]
    pub on_stall: Option<String>,
    /// Catch up after stalls: the default (--on-stall catch-up).
    #[arg(long, conflicts_with_all = ["no_catch_up", "on_stall"])]
    pub catch_up: bool,
    /// Do not catch up after stalls: --on-stall shift.
    #[arg(long, conflicts_with = "on_stall")]
    pub no_catch_up: bool,
    /// While catching up, owed packets leave at most X times the asked rate (1 < X <= 1000;
    /// default 8).
    #[arg(long, value_name = "X", value_parser = flags::real(1.0, 1000.0, true))]
    pub catch_up_peak: Option<f64>,
    /// While catching up, at most N packets leave back to back (1..65536; default 32).
    #[arg(long, value_name = "N", value_parser = flags::count(1, 65_536))]
    pub catch_up_burst: Option<u64>,
    /// At most this much lateness is caught up (1us..1h; default 1s); a longer stall gives up
    /// the excess (the schedule moves later by it, and the summary says so).
    #[arg(long, value_name = "DURATION", value_parser = flags::duration(CATCH_UP_WINDOW))]
    pub catch_up_window: Option<Duration>,
    /// Do not write latency probes (signature, stream, sequence, send time) into packets.
    #[arg(long)]
    pub no_probe: bool,
    /// Receive on this port meanwhile and report loss, duplicates, reordering and latency.
    #[arg(long, value_name = "PORT")]
    pub rx: Option<String>,
    /// With --rx: write the latency histogram as CSV here, and an SVG plot beside it.
    #[arg(long, value_name = "FILE.csv")]
    pub hist_out: Option<String>,
    /// With --rx: how long to wait for late packets after the last one is sent.
    #[arg(long, value_name = "DURATION", default_value = "200ms")]
    pub rx_wait: String,
    #[command(flatten)]
    pub replay: super::gen_replay::ReplayArgs,
    /// Seed of random fields, sizes and Poisson gaps.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Line rate for --rate N% (default: the interface's speed; a port without one, mem:,
    /// pcap:, a link down, needs it).
    #[arg(long, value_name = "RATE")]
    pub link_speed: Option<String>,
    /// Pin thread i to core CORE+i.
    #[arg(short = 'g', long, value_name = "CORE", value_parser = flags::int(0, flags::MAX_CORE))]
    pub core: Option<usize>,
    /// Print statistics as JSON lines.
    #[arg(long)]
    pub json: bool,
    /// Print only the final summary.
    #[arg(short = 'q', long)]
    pub quiet: bool,
    /// Seconds between statistics lines.
    #[arg(long, value_name = "SECONDS", default_value = "1")]
    pub interval: String,
    #[command(flatten)]
    pub metrics: metrics::MetricsArgs,
    /// Read commands line by line while it runs (`-`: standard input): start, stop, rate
    /// 50%|2Mpps, size 128, src-ip|dst-ip ADDR, sport|dport N, proto udp|tcp|icmp|arp, ttl N,
    /// vlan ID|OUTER,INNER|off, src-mac|dst-mac MAC, count N, quit; `stream N FIELD VALUE`
    /// for one stream; pktgen-dpdk's `set 0 FIELD VALUE`, `enable|disable 0 vlan`, `start 0`,
    /// `stop 0`. Each one's effect shows in the next statistics line; a refused one is said and
    /// changes nothing.
    #[arg(long, value_name = "-")]
    pub commands: Option<String>,
    /// Print statistics lines even on a terminal (no live page).
    #[arg(long)]
    pub no_console: bool,
    #[command(flatten)]
    pub out: crate::common::output::OutputFlags,
    #[command(flatten)]
    pub ring: crate::common::output::RingBuffer,
    #[command(flatten)]
    pub gs: super::gen_streams::StreamArgs,
}

/// Help of the gauges gen adds to the common families.
const ASKED_HELP: &str = "The rate asked, packets per second (absent: as fast as possible).";
const ACHIEVED_HELP: &str = "The rate achieved in the last interval, packets per second.";

/// gen's metrics: the transmit counters of each thread's port, the --rx port's receive
/// counters, and the rate asked and achieved.
fn publish(
    m: &metrics::Metrics,
    tx: &[(&str, PortCount)],
    rx: Option<(&str, PortCount)>,
    asked: Option<f64>,
    achieved: f64,
) {
    let mut e = m.exposition();
    for (port, c) in tx {
        e.port(port, Dir::Tx, c);
    }
    if let Some((port, c)) = rx {
        e.port(port, Dir::Rx, &c);
    }
    if let Some(r) = asked {
        e.gauge("linerate_gen_rate_asked_pps", ASKED_HELP, &[], r);
    }
    e.gauge(
        "linerate_gen_rate_achieved_pps",
        ACHIEVED_HELP,
        &[],
        achieved,
    );
    m.publish(&e);
}

/// `--catch-up-window`: 1 µs to 1 h.
const CATCH_UP_WINDOW: flags::Durations = flags::Durations {
    min: Duration::from_micros(1),
    max: Duration::from_secs(3600),
    off: false,
};

/// The stall policy from the flags.
pub fn on_stall(a: &Args) -> anyhow::Result<OnStall> {
    let shift = match (a.on_stall.as_deref(), a.no_catch_up) {
        (_, true) | (Some("shift"), _) => true,
        (None | Some("catch-up"), _) => false,
        (Some(m), _) => {
            return Err(usage(format!(
                "--on-stall {m}: use catch-up (the default) or shift"
            )))
        }
    };
    let tuned =
        a.catch_up_peak.is_some() || a.catch_up_burst.is_some() || a.catch_up_window.is_some();
    if shift {
        if tuned {
            return Err(usage(
                "--catch-up-peak, --catch-up-burst and --catch-up-window bound catching up:                  they do not go with --on-stall shift / --no-catch-up",
            ));
        }
        return Ok(OnStall::Shift);
    }
    let mut c = CatchUp::default();
    if let Some(x) = a.catch_up_peak {
        c.peak = x;
    }
    if let Some(n) = a.catch_up_burst {
        c.burst = n as u32;
    }
    if let Some(d) = a.catch_up_window {
        c.window_ns = d.as_nanos() as u64;
    }
    Ok(OnStall::CatchUp(c))
}

/// How the start line names the stall policy.
fn on_stall_words(o: &OnStall) -> String {
    match o {
        OnStall::Shift => "after a stall the schedule moves later".into(),
        OnStall::CatchUp(c) => format!(
            "after a stall owed packets catch up at up to {}x the rate, {} back to back, {} \
             owed at most",
            c.peak,
            c.burst,
            fmt_duration(c.window_ns)
        ),
    }
}

fn fmt_duration(ns: u64) -> String {
    if ns >= 1_000_000_000 && ns.is_multiple_of(1_000_000_000) {
        format!("{} s", ns / 1_000_000_000)
    } else if ns >= 1_000_000 {
        format!("{} ms", group_f(ns as f64 / 1e6, 3))
    } else {
        format!("{} us", group_f(ns as f64 / 1e3, 3))
    }
}

fn on_stall_name(o: &OnStall) -> &'static str {
    match o {
        OnStall::Shift => "shift",
        OnStall::CatchUp(_) => "catch-up",
    }
}

fn pick<'a>(flag: &'a Option<String>, cfg: &'a ScriptConfig, key: &str) -> Option<&'a str> {
    flag.as_deref().or_else(|| cfg.get(key))
}

fn flag<T>(name: &str, r: Result<T, String>) -> anyhow::Result<T> {
    r.map_err(|e| usage(format!("{name}: {e}")))
}

/// What a value picked by [`pick`] is called in messages: the flag, or the script's field.
fn named(flag: &Option<String>, cfg: &ScriptConfig, key: &str, name: &str) -> String {
    if flag.is_none() && cfg.get(key).is_some() {
        format!("config.{key} of the script (for {name})")
    } else {
        name.to_string()
    }
}

/// Line rate of a port, bits per second.
fn link_bps(a: &Args, out: &str) -> anyhow::Result<f64> {
    Ok(known_link_bps(a, out)?.unwrap_or(10e9))
}

/// The line rate of `out` when one is known: `--link-speed`, else the interface's speed
/// (None: a `mem:` or `pcap:` port, a link down, a driver without a speed).
fn known_link_bps(a: &Args, out: &str) -> anyhow::Result<Option<f64>> {
    if let Some(s) = &a.link_speed {
        return flag("--link-speed", flags::check_line_speed(s)).map(Some);
    }
    if let Some(iface) = Uri::parse(out).ok().as_ref().and_then(Uri::iface) {
        if let Ok(s) = std::fs::read_to_string(format!("/sys/class/net/{iface}/speed")) {
            if let Ok(mbps) = s.trim().parse::<i64>() {
                if mbps > 0 {
                    return Ok(Some(mbps as f64 * 1e6));
                }
            }
        }
    }
    Ok(None)
}

/// The template's headers from the flags and the script: MACs, protocol, VLANs, MPLS,
/// encapsulation.
fn template_of(a: &Args, cfg: &ScriptConfig) -> anyhow::Result<TemplateSpec> {
    let mut t = TemplateSpec {
        ttl: a.ttl.unwrap_or(64),
        ..Default::default()
    };
    if let Some(m) = pick(&a.dst_mac, cfg, "dst_mac") {
        t.dst_mac = flag("--dst-mac", parse_mac(m))?;
    }
    if let Some(m) = pick(&a.src_mac, cfg, "src_mac") {
        t.src_mac = flag("--src-mac", parse_mac(m))?;
    }
    t.l4 = flag(
        "--proto",
        gen_streams::parse_proto(pick(&a.proto, cfg, "proto").unwrap_or("udp")),
    )?;
    if t.l4 == L4::Arp && pick(&a.dst_mac, cfg, "dst_mac").is_none() {
        // An ARP request is broadcast.
        t.dst_mac = [0xff; 6];
    }
    if t.l4 == L4::Arp && (a.sport.is_some() || a.dport.is_some()) {
        return Err(usage("--sport/--dport: ARP has no ports"));
    }
    if let Some(v) = pick(&a.vlan, cfg, "vlan") {
        let (inner, outer) = flag(&format!("--vlan {v}"), gen_streams::parse_vlans(v))?;
        t.vlan = Some(inner);
        t.svlan = outer;
    }
    if let Some(m) = &a.gs.mpls {
        t.mpls = flag("--mpls", gen_streams::parse_mpls(m))?;
    }
    if let Some(e) = &a.gs.encap {
        t.encap = Some(flag("--encap", gen_streams::parse_encap(e))?);
    }
    Ok(t)
}

/// --src-ip and --dst-ip; the template takes IPv6 defaults when one side is IPv6.
fn addresses(
    a: &Args,
    cfg: &ScriptConfig,
    t: &mut TemplateSpec,
) -> anyhow::Result<(Option<AddrSeq>, Option<AddrSeq>)> {
    let src = pick(&a.src_ip, cfg, "src_ip")
        .map(|s| flag("--src-ip", parse_addr(s)))
        .transpose()?;
    let dst = pick(&a.dst_ip, cfg, "dst_ip")
        .map(|s| flag("--dst-ip", parse_addr(s)))
        .transpose()?;
    // IPv6 defaults when one side is IPv6.
    let v6 = src.as_ref().map(|s| s.base.is_ipv6()).unwrap_or(false)
        || dst.as_ref().map(|s| s.base.is_ipv6()).unwrap_or(false);
    if v6 {
        t.src_ip = "2001:db8::1".parse::<IpAddr>()?;
        t.dst_ip = "2001:db8::2".parse::<IpAddr>()?;
    }
    Ok((src, dst))
}

/// --flows N (`f`): the source address counts up over N addresses from --src-ip (one
/// address).
fn flows_source(
    a: &Args,
    cfg: &ScriptConfig,
    f: &str,
    t: &TemplateSpec,
    src: Option<AddrSeq>,
) -> anyhow::Result<AddrSeq> {
    let n = flag(
        &named(&a.flows, cfg, "flows", "--flows"),
        flags::check_count(
            f,
            flags::Counts {
                min: 1,
                max: u64::from(u32::MAX),
            },
        ),
    )?;
    let base = match src {
        Some(s) if !matches!(s.seq, Seq::Fixed(_)) => {
            return Err(usage(
                "--flows varies the source address: give --src-ip as one address",
            ))
        }
        Some(s) => s,
        None => parse_addr(&t.src_ip.to_string()).map_err(usage)?,
    };
    let lo = base.seq.first();
    Ok(AddrSeq {
        base: base.base,
        seq: Seq::Inc {
            lo,
            span: n.min(u64::from(u32::MAX) - lo + 1),
            cur: 0,
        },
    })
}

/// --rate in all and per stream (`streams`: of every thread), in packets per second of
/// `size`'s frames.
fn stream_rate(
    a: &Args,
    cfg: &ScriptConfig,
    size: &SizeSpec,
    streams: usize,
) -> anyhow::Result<(Option<f64>, Option<f64>)> {
    let Some(r) = pick(&a.rate, cfg, "rate") else {
        return Ok((None, None));
    };
    let bits_per_frame = (size.mean() + 20.0) * 8.0;
    let t = match flag(&named(&a.rate, cfg, "rate", "--rate"), flags::check_rate(r))? {
        Rate::Pps(p) => p,
        Rate::Bps(b) => b / bits_per_frame,
        // A percentage of a line that is there: not of an assumed 10 Gbit/s.
        Rate::Percent(p) => match known_link_bps(a, &a.output)? {
            Some(l) => l * p / 100.0 / bits_per_frame,
            None => {
                return Err(usage(format!(
                    "--rate {r}: -o {} has no link speed to take {p}% of (a mem: or \
                     pcap: port, a link down, a driver without one): give --link-speed \
                     (e.g. 10Gbps) or the rate in pps or bps",
                    a.output
                )))
            }
        },
    };
    if t <= 0.0 {
        return Err(usage(format!("--rate {r}: must be above zero")));
    }
    Ok((Some(t), Some(t / streams as f64)))
}

/// Builds the stream list of one thread from the flags (and the script's defaults).
pub fn streams_from(
    a: &Args,
    cfg: &ScriptConfig,
    thread: usize,
) -> anyhow::Result<(Vec<StreamSpec>, Option<u64>, Option<Duration>)> {
    let pattern: Pattern = flag(
        "--pattern",
        pick(&a.pattern, cfg, "pattern").unwrap_or("cbr").parse(),
    )?;
    let mut t = template_of(a, cfg)?;
    let (mut src, dst) = addresses(a, cfg, &mut t)?;
    // Without --size, the template's smallest frame: 64 B, or its headers when longer
    // (IPv6/TCP: 78 B).
    let size: SizeSpec = match pick(&a.size, cfg, "size") {
        Some(z) => flag("--size", z.parse::<SizeSpec>())?,
        None => {
            let mut t2 = t.clone();
            if let Some(s) = &src {
                t2.src_ip = s.base;
            }
            if let Some(d) = &dst {
                t2.dst_ip = d.base;
            }
            SizeSpec::Fixed(gen_streams::min_size(&t2).unwrap_or(64))
        }
    };
    if let Some(f) = pick(&a.flows, cfg, "flows") {
        src = Some(flows_source(a, cfg, f, &t, src)?);
    }
    let sport = pick(&a.sport, cfg, "sport")
        .map(|s| flag("--sport", parse_seq(s, port_value)))
        .transpose()?;
    let dport = pick(&a.dport, cfg, "dport")
        .map(|s| flag("--dport", parse_seq(s, port_value)))
        .transpose()?;
    let nthreads = a.threads.max(1);
    let nstreams = streams_per_thread(a, cfg);
    // --stream, else the script's config.streams.
    let gs = gen_streams::StreamArgs {
        stream: if a.gs.stream.is_empty() {
            cfg.streams.clone()
        } else {
            a.gs.stream.clone()
        },
        ..a.gs.clone()
    };
    if !gs.stream.is_empty() && a.streams > 1 {
        return Err(usage(
            "--streams N copies one stream; --stream gives each its own: use one of them",
        ));
    }
    let (total, pps) = stream_rate(a, cfg, &size, nthreads * nstreams)?;
    let count = pick(&a.count, cfg, "count")
        .map(|c| {
            flag(
                &named(&a.count, cfg, "count", "--count"),
                flags::check_count(c, flags::PACKETS),
            )
        })
        .transpose()?
        .map(|c| c / nthreads as u64 + u64::from((thread as u64) < c % nthreads as u64));
    let duration = pick(&a.duration, cfg, "duration")
        .map(|d| {
            flag(
                &named(&a.duration, cfg, "duration", "--duration"),
                flags::check_duration(d, flags::RUN),
            )
        })
        .transpose()?;
    if !gs.stream.is_empty() {
        let base = StreamSpec {
            id: 0,
            template: t.clone(),
            src_ip: src.clone(),
            dst_ip: dst.clone(),
            sport: sport.clone(),
            dport: dport.clone(),
            size: size.clone(),
            pps: None,
            pattern,
            probe: !a.no_probe,
        };
        let v = gen_streams::streams(
            &gs,
            &base,
            total,
            link_bps(a, &a.output)?,
            nthreads,
            thread * nstreams,
        )?;
        return Ok((v, count, duration));
    }
    let mut v = Vec::new();
    for s in 0..nstreams {
        let id = thread * nstreams + s;
        let id = u16::try_from(id).map_err(|_| usage("too many streams (at most 65536)"))?;
        v.push(StreamSpec {
            id,
            template: t.clone(),
            src_ip: src.clone(),
            dst_ip: dst.clone(),
            sport: sport.clone(),
            dport: dport.clone(),
            size: size.clone(),
            pps,
            pattern,
            probe: !a.no_probe,
        });
    }
    Ok((v, count, duration))
}

/// Streams each thread sends: one per --stream, else --streams.
fn streams_per_thread(a: &Args, cfg: &ScriptConfig) -> usize {
    if !a.gs.stream.is_empty() {
        a.gs.stream.len()
    } else if !cfg.streams.is_empty() {
        cfg.streams.len()
    } else {
        a.streams.max(1)
    }
}

/// Whether -o writes the capture to standard output (then statistics go to standard error).
fn to_stdout(output: &str) -> bool {
    matches!(output, "-" | "pcap:-" | "pcapng:-")
}

fn open(uri: &str, opts: &PortOptions, what: &str) -> anyhow::Result<Box<dyn Port>> {
    crate::common::open_input(what, uri, opts)
}

/// The files a run reads (capture, script, --rx), which no output may overwrite.
fn inputs(a: &Args) -> Inputs {
    let mut v: Vec<&str> = a
        .replay
        .pcap
        .iter()
        .chain(a.rx.iter())
        .map(|s| s.as_str())
        .collect();
    let mut i = crate::common::inputs_of(v.drain(..));
    if let Some(s) = &a.script {
        i.add_path(s);
    }
    i
}

/// Opens an output port: a capture file (`pcap:FILE`, or a path) is created for writing.
/// Writing to a file needs a limit (`limited`), so that a forgotten -c cannot fill a disk.
fn open_out(uri: &str, opts: &PortOptions, limited: bool) -> anyhow::Result<Box<dyn Port>> {
    let parsed = Uri::parse(uri).map_err(|e| usage(format!("-o: {e}")))?;
    let mut format = opts.write_format;
    let path = match &parsed {
        Uri::File { path, format: f } => {
            format = f.or(format);
            Some(path.as_str())
        }
        Uri::Bare(p) => match p.split_once(':') {
            Some((s, _)) if !s.contains(['/', '.']) => {
                return Err(usage(format!(
                    "-o {uri}: {}",
                    linerate::bare_name_hint(uri, false)
                )))
            }
            // A bare interface name (tcpdump's habit) is not taken for a new file named so.
            _ if !std::path::Path::new(p).exists()
                && linerate::port::iface_mac(p).is_ok()
                && opts.write_format.is_none() =>
            {
                return Err(usage(format!(
                    "-o {uri}: {}",
                    linerate::bare_name_hint(p, true)
                )))
            }
            _ => Some(p.as_str()),
        },
        _ => None,
    };
    match path {
        Some(p) if !limited => Err(usage(format!(
            "-o {p}: a capture file needs a limit (-c COUNT or -t DURATION)"
        ))),
        Some(p) => Ok(Box::new(
            PcapPort::create_with_options(
                p,
                format,
                LinkType::ETHERNET,
                0,
                &opts.inputs,
                &opts.write,
            )
            .map_err(|e| usage(format!("-o: {e}")))?,
        )),
        None => crate::common::open_output("-o", uri, opts),
    }
}

fn gaps_json(g: &Gaps) -> serde_json::Value {
    let mut j = serde_json::json!({ "gaps": g.gaps, "max_dev_ns": g.max_dev,
        "mean_dev_ns": g.mean_dev() });
    for (i, b) in PRECISION_BOUNDS.iter().enumerate() {
        j[format!("within_{b}ns_pct")] = (100.0 * g.share(i)).into();
    }
    j
}

/// The precision table as JSON: the gaps on schedule at the top level, those inside catch-up
/// windows under `catch_up`.
fn precision_json(p: &Precision) -> serde_json::Value {
    let mut j = gaps_json(&p.on_schedule());
    j["catch_up"] = gaps_json(&p.catch_up);
    j["behind"] = p.behind.into();
    j["max_late_ns"] = p.max_late_ns.into();
    j["slips"] = p.slips.into();
    j["slipped_ns"] = p.slipped_ns.into();
    j
}

/// What the receive thread of `--rx` publishes while it runs, for the statistics thread: the
/// port's own counters, read every 100 ms and at the end (nothing per packet).
/// With the live page, also the probes' latency, once a second.
#[derive(Default)]
struct RxLive {
    count: Mutex<PortCount>,
    latency: Mutex<Option<LatencyLine>>,
    want_latency: AtomicBool,
}

impl RxLive {
    fn set(&self, port: &mut dyn Port) {
        *self.count.lock().unwrap_or_else(|e| e.into_inner()) = PortCount::rx(&port.stats());
    }

    fn count(&self) -> PortCount {
        *self.count.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Publishes the latency of the probes tracked so far (for the live page only).
    fn set_latency(&self, t: &Tracker) {
        let one = t.streams().count() == 1;
        let merged;
        let h = match t.streams().next() {
            Some(s) if one => &s.hist,
            _ => {
                merged = t.merged();
                &merged
            }
        };
        if h.is_empty() {
            return;
        }
        *self.latency.lock().unwrap_or_else(|e| e.into_inner()) = Some(LatencyLine {
            probes: h.len(),
            p50_ns: h.value_at_quantile(0.5),
            p99_ns: h.value_at_quantile(0.99),
        });
    }

    fn latency(&self) -> Option<LatencyLine> {
        *self.latency.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What the receive thread of `--rx` does every 100 ms with the port and the probes tracked so
/// far: publishes the port's counters (and the latency once a second) to `live`.
fn receiving<'a>(
    clock: &'a TscClock,
    live: &'a RxLive,
) -> impl FnMut(&mut dyn Port, &Tracker) + Send + 'a {
    let want_latency = live.want_latency.load(Ordering::Relaxed);
    let mut next_latency = 0;
    move |port, t| {
        live.set(port);
        let now = clock.now_ns();
        if want_latency && now >= next_latency {
            live.set_latency(t);
            next_latency = now + 1_000_000_000;
        }
    }
}

/// Frame sizes as the `size` command and `--size` write them.
fn size_text(z: &SizeSpec) -> String {
    match z {
        SizeSpec::Fixed(n) => n.to_string(),
        SizeSpec::Range(a, b) => format!("{a}-{b}"),
        SizeSpec::Imix => "imix".into(),
    }
}

/// Reads `--commands -` on a thread of its own until standard input ends: each line goes to
/// `steer`; a refused one is said on standard error (and, with `--json`, as a line
/// `{"type":"command","command":...,"ok":false,"error":...}` on standard output, like the
/// accepted ones with `"ok":true`). The end of input ends nothing: `quit` or a limit does.
fn read_commands(steer: Arc<Mutex<Steer>>, json: bool) {
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            let r = steer.lock().unwrap_or_else(|e| e.into_inner()).exec(&line);
            let cmd = line.trim();
            if cmd.is_empty() || cmd.starts_with('#') {
                continue;
            }
            if json {
                let j = match &r {
                    Ok(()) => serde_json::json!({"type": "command", "command": cmd, "ok": true}),
                    Err(e) => serde_json::json!({"type": "command", "command": cmd, "ok": false,
                        "error": e}),
                };
                println!("{j}");
            }
            if let Err(e) = r {
                eprintln!("linerate: command '{cmd}': {e}");
            }
        }
    });
}

/// Runs `linerate gen`: checks the flags, then replays a capture (--pcap), sends on the
/// live engine, or opens a port per thread, generates, and reports.
pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    crate::common::capture::refuse_any(
        "-o",
        &a.output,
        "names no interface to send on; name the interface",
    )?;
    let stop = stop_flag()?;
    let c = common_settings(&a, &stop)?;
    if let Some(p) = &a.replay.pcap {
        return run_replay(&a, p, &c.popts, &stop);
    }
    let (sopts, cfg) = load_config(&a, &stop)?;
    let limited =
        pick(&a.count, &cfg, "count").is_some() || pick(&a.duration, &cfg, "duration").is_some();
    if let Some(iface) = live_iface(&a, &cfg)? {
        return run_live(&a, &cfg, &iface, c.stall, &stop);
    }
    let (outs, names) = open_outputs(&a, &c.popts, limited)?;
    let mut rx_port = match &a.rx {
        Some(uri) => Some(open(uri, &c.popts, "--rx")?),
        None => None,
    };
    let specs = thread_specs(&a, &cfg, &outs)?;
    let cores = thread_cores(&a)?;
    let clock = TscClock::new();
    let metrics = metrics::start(&a.metrics, "gen", a.quiet)?;
    let rx_live = RxLive::default();
    let mut out = stats_output(&a.output);
    let asked = asked_rate(&specs);
    let (with_console, steer) = steering(&a, &specs, &stop)?;
    // Each stream's id and the rate asked of it (all threads'), for the summary.
    let stream_rates: Vec<(u16, Option<f64>)> = specs
        .iter()
        .flat_map(|(s, _, _)| s.iter().map(|s| (s.id, s.pps)))
        .collect();
    if let Some(m) = &metrics {
        publish_start(m, &a, &names, asked);
    }
    // The engine auto took for a rate, and why (the live engine's runs would be bursts).
    let engine_why = paced_on_xsk(&a, &cfg)?;
    let start = Start {
        cfg: &cfg,
        specs: &specs,
        asked,
        stall: c.stall,
        engine_why: engine_why.as_deref(),
        streams: stream_rates.len(),
    };
    announce(&mut out, &a, &start);
    if let (Some(st), Some(_)) = (&steer, &a.commands) {
        read_commands(st.clone(), a.json);
    }
    let console = if with_console {
        rx_live.want_latency.store(true, Ordering::Relaxed);
        Some(Console::start(true)?)
    } else {
        None
    };
    let ctl = steer
        .as_ref()
        .map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).ctl.clone());
    let t_start = clock.now_ns();
    let threads = gen_threads(&a, outs, specs, &cores, &c, ctl.clone());
    let hook = script_hook(&a, &sopts);
    let probes = rx_port.as_mut().map(|p| Probes {
        port: p.as_mut(),
        opts: ReceiveOptions {
            quiet: c.rx_wait,
            tick: Duration::from_millis(100),
        },
        on_tick: receiving(&clock, &rx_live),
    });
    let mut showing = Showing {
        a: &a,
        clock: &clock,
        metrics: metrics.as_ref(),
        steer: steer.as_ref(),
        version: ctl.as_ref().map_or(0, |c| c.version()),
        ctl,
        console,
        meter: Meter::default(),
        names: &names,
        rx_live: &rx_live,
        out,
        t_start,
        asked,
        // Each thread's counters over the span between two of its own readings (not the
        // printing thread's), so that an interval's rate is what happened in it.
        prev: vec![
            GenTick {
                t_ns: t_start,
                ..Default::default()
            };
            threads.len()
        ],
        ticker: Ticker::new(t_start, c.interval),
    };
    linerate::port::file::start_writing();
    let run = gen::threads::run_threads(threads, hook, probes, &clock, &stop, |progress| {
        showing.progress(&progress.ticks())
    });
    let run = run.map_err(threads_error)?;
    // The terminal back before the summary, which stays on it.
    let Showing { console, out, .. } = showing;
    drop(console);
    let ended = Ended {
        cfg: &cfg,
        stream_rates: &stream_rates,
        stall: c.stall,
        names: &names,
        rx_live: &rx_live,
        inputs: &c.popts.inputs,
    };
    summary(out, &a, &run, &ended, metrics.as_ref())
}

/// The metrics before the first packet: every port at 0.
fn publish_start(m: &metrics::Metrics, a: &Args, names: &[&str], asked: Option<f64>) {
    let tx: Vec<(&str, PortCount)> = names.iter().map(|n| (*n, PortCount::default())).collect();
    let rx = a.rx.as_deref().map(|p| (p, PortCount::default()));
    publish(m, &tx, rx, asked, 0.0);
}

/// Each thread loads its own script (a Lua state stays on its thread), stopped by the
/// thread's duration.
fn script_hook<'a>(
    a: &'a Args,
    sopts: &'a ScriptOptions,
) -> impl Fn(usize, &GenOptions) -> anyhow::Result<Option<LuaHook>> + Sync + 'a {
    move |_: usize, o: &GenOptions| {
        let hook = match &a.script {
            Some(p) => Some(load_script(p, sopts)?),
            None => None,
        };
        if let Some(i) = &sopts.interrupt {
            i.set_limit(o.duration);
        }
        Ok(hook)
    }
}

/// Where statistics go: standard error when standard output carries the capture (-o -).
fn stats_output(output: &str) -> Box<dyn Write> {
    if to_stdout(output) {
        Box::new(std::io::stderr())
    } else {
        Box::new(std::io::stdout())
    }
}

/// Thread i on core -g + i: every one of them must exist.
fn thread_cores(a: &Args) -> anyhow::Result<Vec<usize>> {
    match a.core {
        None => Ok(Vec::new()),
        Some(c) => (0..a.threads)
            .map(|i| crate::common::check_core(c.saturating_add(i)))
            .collect(),
    }
}

/// The rate asked in all (None: as fast as possible).
fn asked_rate(specs: &[ThreadSpec]) -> Option<f64> {
    let asked: Option<f64> = specs
        .iter()
        .map(|(s, _, _)| s.iter().filter_map(|s| s.pps).sum::<f64>())
        .sum::<f64>()
        .into();
    asked.filter(|_| specs[0].0[0].pps.is_some())
}

/// The live page on a terminal (whether it is shown), steered from its keys and command
/// line like --commands -.
fn steering(
    a: &Args,
    specs: &[ThreadSpec],
    stop: &Arc<AtomicBool>,
) -> anyhow::Result<(bool, Option<Arc<Mutex<Steer>>>)> {
    let with_console =
        crate::console::wanted(a.json || a.quiet || a.no_console || a.commands.is_some());
    let steer = if a.commands.is_some() || with_console {
        let st = Steer::new(
            specs[0].0.clone(),
            a.threads,
            link_bps(a, &a.output)?,
            stop.clone(),
        );
        Some(Arc::new(Mutex::new(st)))
    } else {
        None
    };
    Ok((with_console, steer))
}

/// Settings every way of generating shares, checked before anything is opened.
struct Common {
    interval: Duration,
    stall: OnStall,
    rx_wait: Duration,
    popts: PortOptions,
}

/// One thread's streams, packet count and duration.
type ThreadSpec = (Vec<StreamSpec>, Option<u64>, Option<Duration>);

/// The intervals, the stall policy, --rx-wait, -o's flushing and rotation, and the flags
/// that go only with others.
fn common_settings(a: &Args, stop: &Arc<AtomicBool>) -> anyhow::Result<Common> {
    let interval = flag(
        "--interval",
        flags::check_duration(&a.interval, flags::INTERVAL),
    )?;
    let stall = on_stall(a)?;
    let rx_wait = flag("--rx-wait", flags::check_duration(&a.rx_wait, flags::WAIT))?;
    if a.hist_out.is_some() && a.rx.is_none() {
        return Err(usage(
            "--hist-out needs --rx PORT (or use count --latency --hist-out)",
        ));
    }
    let write = a.out.options(
        &a.ring.ring_buffer,
        crate::common::output::file_of_uri(&a.output).as_deref(),
        a.json,
        Some(stop.clone()),
    )?;
    let popts = PortOptions {
        inputs: inputs(a),
        write_format: a.format,
        write,
        ..Default::default()
    };
    if let Some(p) = &a.hist_out {
        crate::common::check_output("--hist-out", p, &popts.inputs)?;
    }
    if let Some(c) = &a.commands {
        if c != "-" {
            return Err(usage(format!(
                "--commands {c}: only - (standard input) is supported"
            )));
        }
        if a.replay.pcap.is_some() {
            return Err(usage(
                "--commands steers generated streams, not --pcap replay",
            ));
        }
    }
    Ok(Common {
        interval,
        stall,
        rx_wait,
        popts,
    })
}

/// --script's configuration (none without one). A script that does not return (its top
/// level or modify) is stopped by a signal or by the time limit: -t while it loads, the
/// run's duration once it runs.
fn load_config(a: &Args, stop: &Arc<AtomicBool>) -> anyhow::Result<(ScriptOptions, ScriptConfig)> {
    let interrupt = Interrupt::new(stop.clone());
    interrupt.set_limit(
        a.duration
            .as_deref()
            .map(|d| flag("--duration", flags::check_duration(d, flags::RUN)))
            .transpose()?,
    );
    let sopts = ScriptOptions {
        mem: a.lua_mem,
        interrupt: Some(interrupt.clone()),
    };
    let cfg = match &a.script {
        Some(path) => load_script(path, &sopts)?.config.clone(),
        None => ScriptConfig::default(),
    };
    Ok((sopts, cfg))
}

/// The output ports and their names.
type Outputs<'a> = (Vec<Box<dyn Port>>, Vec<&'a str>);

/// The output ports, one per thread (-o a,b: one each; one interface: shared).
fn open_outputs<'a>(
    a: &'a Args,
    popts: &PortOptions,
    limited: bool,
) -> anyhow::Result<Outputs<'a>> {
    let parts: Vec<&str> = a.output.split(',').collect();
    let mut outs: Vec<Box<dyn Port>> = Vec::new();
    let mut names: Vec<&str> = Vec::new();
    for i in 0..a.threads {
        let uri = if parts.len() > 1 {
            parts[i % parts.len()]
        } else {
            let iface = Uri::parse(&a.output).is_ok_and(|u| u.iface().is_some());
            if i > 0 && !iface {
                return Err(usage(format!(
                    "--threads {}: give one port per thread (-o mem:a,mem:b) unless the port is an interface",
                    a.threads
                )));
            }
            a.output.as_str()
        };
        let mut o = open_out(uri, popts, limited)?;
        // A pcapng file names where its packets come from.
        o.describe(&[Interface::new("linerate gen", LinkType::ETHERNET)])
            .with_context(|| format!("-o {uri}"))?;
        outs.push(o);
        names.push(uri);
    }
    Ok((outs, names))
}

/// Each thread's streams, validated, and refused now when its port cannot carry their
/// frames whole (its MTU, its packet buffers).
fn thread_specs(
    a: &Args,
    cfg: &ScriptConfig,
    outs: &[Box<dyn Port>],
) -> anyhow::Result<Vec<ThreadSpec>> {
    let mut specs = Vec::new();
    for (i, o) in outs.iter().enumerate() {
        let (streams, count, duration) = streams_from(a, cfg, i)?;
        gen::validate(&GenOptions {
            streams: streams.clone(),
            ..Default::default()
        })
        .map_err(|e| match e {
            gen::GenError::Template {
                why: linerate::apps::gen::template::TemplateError::BadSize { .. },
                ..
            } => usage(format!("--size: {e}")),
            e => usage(e.to_string()),
        })?;
        let pool = o.pool().filter(|p| p.allocates()).map(|p| p.as_ref());
        gen::check_port(o.as_ref(), pool, &streams).map_err(|e| usage(format!("--size: {e}")))?;
        specs.push((streams, count, duration));
    }
    Ok(specs)
}

/// What the start line says.
struct Start<'a> {
    cfg: &'a ScriptConfig,
    specs: &'a [ThreadSpec],
    /// The rate asked in all.
    asked: Option<f64>,
    stall: OnStall,
    /// Why auto took the xsk engine for a rate.
    engine_why: Option<&'a str>,
    /// Streams of all threads.
    streams: usize,
}

/// The start line (or JSON record): the port, the threads, the rate, the frames' size.
fn announce(out: &mut dyn Write, a: &Args, s: &Start) {
    let first = &s.specs[0].0[0];
    if a.json {
        let mut j = serde_json::json!({"type": "start", "port": a.output, "threads": a.threads,
            "pps_per_stream": first.pps, "rate_pps": s.asked, "script": a.script,
            "size": size_text(&first.size), "stream_count": s.streams,
            "on_stall": on_stall_name(&s.stall)});
        if let Some(w) = s.engine_why {
            j["engine"] = "xsk".into();
            j["engine_why"] = w.into();
        }
        let _ = writeln!(out, "{j}");
    } else if !a.quiet {
        let rate = s
            .asked
            .map(|p| format!("{} pps; {}", group_f(p, 0), on_stall_words(&s.stall)))
            .unwrap_or_else(|| "as fast as possible".into());
        let _ = writeln!(
            out,
            "Generating on {} ({} thread(s), {rate})",
            a.output, a.threads
        );
        // The template's smallest frame when --size was not given and it is above 64 B.
        if pick(&a.size, s.cfg, "size").is_none() {
            if let Some(z) = s.specs[0]
                .0
                .first()
                .map(|s| s.size.bounds().0)
                .filter(|&z| z > 64)
            {
                let _ = writeln!(
                    out,
                    "Frames of {z} B: the smallest for these headers (--size not given)"
                );
            }
        }
        if let Some(w) = s.engine_why {
            let _ = writeln!(out, "Engine xsk (AF_XDP): {w}");
        }
    }
    let _ = out.flush();
}

/// One generator per output port, each with its streams, seed, core and the commands'
/// control.
fn gen_threads(
    a: &Args,
    outs: Vec<Box<dyn Port>>,
    specs: Vec<ThreadSpec>,
    cores: &[usize],
    c: &Common,
    ctl: Option<Arc<linerate::apps::gen::control::Control>>,
) -> Vec<GenThread> {
    outs.into_iter()
        .zip(specs)
        .enumerate()
        .map(|(i, (port, (streams, count, duration)))| GenThread {
            port,
            opts: GenOptions {
                streams,
                count,
                duration,
                seed: a.seed.wrapping_add(i as u64),
                interval: Duration::from_millis(100).min(c.interval),
                on_stall: c.stall,
                control: ctl.clone(),
                ..Default::default()
            },
            core: cores.get(i).copied(),
        })
        .collect()
}

/// A failed run of the threads, named by the thread and port, or --rx.
fn threads_error(e: ThreadsError<anyhow::Error>) -> anyhow::Error {
    match e {
        ThreadsError::Hook(e) => e,
        ThreadsError::Gen {
            thread,
            port,
            source,
        } => anyhow::Error::new(source).context(format!("thread {thread} on {port}")),
        ThreadsError::Probes(e) => anyhow::Error::new(e).context("--rx"),
        e => anyhow::Error::new(e),
    }
}

/// What gen shows while its threads run: the live page (steered by its commands) or the
/// interval lines, and the metrics.
struct Showing<'a> {
    a: &'a Args,
    clock: &'a TscClock,
    metrics: Option<&'a metrics::Metrics>,
    steer: Option<&'a Arc<Mutex<Steer>>>,
    ctl: Option<Arc<linerate::apps::gen::control::Control>>,
    /// The settings' version at the previous interval.
    version: u64,
    console: Option<Console>,
    meter: Meter,
    names: &'a [&'a str],
    rx_live: &'a RxLive,
    out: Box<dyn Write>,
    t_start: u64,
    /// The rate asked in all, when no command steers it.
    asked: Option<f64>,
    /// Each thread's counters at its previous reading.
    prev: Vec<GenTick>,
    ticker: Ticker,
}

/// One interval as shown.
struct Reading {
    now: u64,
    cur: Vec<GenTick>,
    iv: Interval,
    /// The rate asked now (commands change it).
    asked: Option<f64>,
    /// The interval's verdict on the rate.
    words: Option<String>,
    /// With commands: the rate asked, whether it is sending, the frames' size.
    steered: Option<(Option<f64>, bool, String)>,
}

impl Showing<'_> {
    /// Called by the threads' run every poll: the console's commands, then, every
    /// interval, the figures.
    fn progress(&mut self, cur: &[GenTick]) {
        if let (Some(c), Some(st)) = (self.console.as_mut(), self.steer) {
            for cmd in c.commands() {
                let r = st.lock().unwrap_or_else(|e| e.into_inner()).exec(&cmd);
                c.outcome(&cmd, &r);
            }
        }
        let now = self.clock.now_ns();
        if (self.a.quiet && self.metrics.is_none()) || !self.ticker.due(now) {
            return;
        }
        let r = self.reading(now, cur.to_vec());
        if let Some(m) = self.metrics {
            self.publish_tick(m, &r);
        }
        if !self.a.quiet {
            if self.console.is_some() {
                self.show_page(&r);
            } else if self.a.json {
                self.stats_json(&r);
            } else {
                self.stats_line(&r);
            }
            let _ = self.out.flush();
        }
        for (p, c) in self.prev.iter_mut().zip(&r.cur) {
            if c.t_ns > p.t_ns {
                *p = *c;
            }
        }
    }

    /// The interval since each thread's previous reading, the rate asked in it, and its
    /// verdict.
    fn reading(&mut self, now: u64, cur: Vec<GenTick>) -> Reading {
        let iv = Interval::of(&self.prev, &cur);
        let waiting = cur.iter().all(|t| t.waiting);
        let steered = self.steer.map(|s| {
            let s = s.lock().unwrap_or_else(|e| e.into_inner());
            let sending = s.sending() && !waiting;
            let asked = if sending { s.asked_pps() } else { Some(0.0) };
            (asked, sending, size_text(s.size()))
        });
        let asked = match &steered {
            Some((r, _, _)) => *r,
            None => self.asked,
        };
        // An interval in which a command changed the settings mixes two rates: not judged.
        let changed = self
            .ctl
            .as_ref()
            .is_some_and(|c| c.version() != self.version);
        self.version = self.ctl.as_ref().map_or(0, |c| c.version());
        let words = if changed {
            Some("settings changed".to_string())
        } else {
            asked.filter(|&r| r > 0.0).and_then(|r| iv.status(r))
        };
        Reading {
            now,
            cur,
            iv,
            asked,
            words,
            steered,
        }
    }

    fn publish_tick(&self, m: &metrics::Metrics, r: &Reading) {
        let tx: Vec<(&str, PortCount)> = self
            .names
            .iter()
            .zip(&r.cur)
            .map(|(n, c)| {
                let pc = PortCount {
                    packets: c.taken(),
                    bytes: c.taken_bytes(),
                    drops: c.drops,
                };
                (*n, pc)
            })
            .collect();
        let rx = self.a.rx.as_deref().map(|p| (p, self.rx_live.count()));
        publish(m, &tx, rx, r.asked, r.iv.pps);
    }

    fn show_page(&mut self, r: &Reading) {
        let a = self.a;
        let rx = a.rx.as_deref().map(|p| (p, self.rx_live.count(), r.now));
        let (state, rate) = match &r.steered {
            Some((_, false, _)) => ("stopped".to_string(), r.asked),
            Some((_, true, size)) => (format!("sending, size {size}"), r.asked),
            None => ("sending".to_string(), r.asked),
        };
        let page = Page {
            title: format!(
                "linerate gen -o {}{}",
                a.output,
                a.rx.as_deref()
                    .map(|r| format!(" --rx {r}"))
                    .unwrap_or_default()
            ),
            elapsed_s: (r.now - self.t_start) as f64 / 1e9,
            state,
            rate: Some(RateLine {
                asked: rate,
                achieved: r.iv.pps,
            }),
            status: r.words.clone(),
            latency: self.rx_live.latency(),
            ..Default::default()
        };
        let page = gen_page(page, self.names, &r.cur, rx, &mut self.meter);
        if let Some(c) = self.console.as_mut() {
            c.show(page);
        }
    }

    fn stats_json(&mut self, r: &Reading) {
        let iv = &r.iv;
        let mut j = serde_json::json!({"type": "stats", "elapsed_ms": (r.now - self.t_start) as f64 / 1e6,
            "pkts": iv.pkts, "bytes": iv.bytes, "pps": iv.pps, "mbps": iv.mbps,
            "rate_pps": r.asked, "behind_ms": iv.behind_ns as f64 / 1e6,
            "status": r.words});
        if let Some((_, sending, size)) = &r.steered {
            j["sending"] = (*sending).into();
            j["size"] = size.clone().into();
            j["interval_pkts"] = iv.interval_pkts.into();
            j["interval_bytes"] = iv.interval_bytes.into();
        }
        let _ = writeln!(self.out, "{j}");
    }

    fn stats_line(&mut self, r: &Reading) {
        let iv = &r.iv;
        let _ = writeln!(
            self.out,
            "TX: {} pkts [{} pps][{} Mbit/s]{}",
            group(iv.pkts),
            group_f(iv.pps, 0),
            group_f(iv.mbps, 2),
            match (&r.words, r.asked) {
                (Some(w), Some(rate)) => format!(" of {} pps asked: {w}", group_f(rate, 0)),
                _ => String::new(),
            }
        );
    }
}

/// What the summary needs besides the run.
struct Ended<'a> {
    cfg: &'a ScriptConfig,
    /// Each stream's id and the rate asked of it.
    stream_rates: &'a [(u16, Option<f64>)],
    stall: OnStall,
    names: &'a [&'a str],
    rx_live: &'a RxLive,
    inputs: &'a Inputs,
}

/// The run's figures, as the summary gives them.
struct Figures {
    elapsed: f64,
    pps: f64,
    mbps: f64,
    why: Option<gen::Shortfall>,
    /// Per stream: id, packets handed to the port, packets per second over the run, rate
    /// asked.
    per_stream: Vec<(u16, u64, f64, Option<f64>)>,
}

/// The final metrics, --hist-out's files, the summary, and the exit (a script's error).
fn summary(
    mut out: Box<dyn Write>,
    a: &Args,
    run: &gen::threads::ThreadsReport,
    e: &Ended,
    metrics: Option<&metrics::Metrics>,
) -> anyhow::Result<ExitCode> {
    let (total, reports, tracker) = (&run.total, &run.threads, &run.probes);
    let nstreams = streams_per_thread(a, e.cfg);
    let sent = |id: u16| -> Option<u64> {
        run.sent(usize::from(id) / nstreams, usize::from(id) % nstreams)
    };
    let elapsed = total.elapsed();
    let pps = run.pps();
    let f = Figures {
        elapsed,
        pps,
        mbps: if total.pkts > 0 {
            pps * (total.bytes + 4 * total.pkts) as f64 * 8.0 / total.pkts as f64 / 1e6
        } else {
            0.0
        },
        why: total.shortfall(pps),
        per_stream: reports
            .iter()
            .flat_map(|r| r.per_stream.iter().copied())
            .zip(e.stream_rates)
            .map(|(n, &(id, asked))| {
                let pps = if elapsed > 0.0 {
                    n as f64 / elapsed
                } else {
                    0.0
                };
                (id, n, pps, asked)
            })
            .collect(),
    };
    if let Some(m) = metrics {
        let tx: Vec<(&str, PortCount)> = e
            .names
            .iter()
            .zip(reports)
            .map(|(n, r)| {
                let pc = PortCount {
                    packets: r.taken(),
                    bytes: r.taken_bytes(),
                    drops: r.port.tx_drops,
                };
                (*n, pc)
            })
            .collect();
        let rx = a.rx.as_deref().map(|p| (p, e.rx_live.count()));
        publish(m, &tx, rx, total.rate_pps, pps);
    }
    let hist_svg = match (&a.hist_out, &tracker) {
        (Some(p), Some(t)) => Some(crate::shared::write_hist(
            p,
            t,
            &format!("linerate gen -o {}", a.output),
            e.inputs,
        )?),
        _ => None,
    };
    if a.json {
        summary_json(&mut out, run, &f, e.stall, hist_svg.as_deref(), &sent);
    } else {
        summary_text(&mut out, a, run, &f, hist_svg.as_deref(), &sent);
    }
    let _ = out.flush();
    if let Some(e) = &total.error {
        anyhow::bail!("--script: {e} (after {} packets sent)", group(total.pkts));
    }
    Ok(ExitCode::SUCCESS)
}

fn summary_json(
    out: &mut dyn Write,
    run: &gen::threads::ThreadsReport,
    f: &Figures,
    stall: OnStall,
    hist_svg: Option<&str>,
    sent: &dyn Fn(u16) -> Option<u64>,
) {
    let (total, reports) = (&run.total, &run.threads);
    let mut j = serde_json::json!({
        "type": "summary", "pkts": total.taken(), "bytes": total.taken_bytes(),
        "handed_to_port": total.pkts,
        "elapsed_ms": f.elapsed * 1e3, "pps": f.pps, "mbps": f.mbps,
        "per_stream": reports.iter().flat_map(|r| r.per_stream.clone()).collect::<Vec<u64>>(),
        "port_drops": total.port.tx_drops.total(), "rate_pps": total.rate_pps,
        "limited": f.why.map(|w| w.name()),
    });
    if let Some(e) = &total.error {
        j["error"] = e.clone().into();
    }
    if let Some(why) = &total.ended {
        // tcpdump's -W file limit ended the run: not a drop, not an error.
        j["stopped"] = why.clone().into();
        j["not_sent"] = total.not_sent.into();
    }
    if let Some((o, by)) = total.overwritten {
        // What is in the files now beside what was written in all (`pkts`).
        j["on_disk"] = total.taken().saturating_sub(o).into();
        j["overwritten"] = serde_json::json!({ "packets": o, "by": by });
    }
    j["streams"] = f
        .per_stream
        .iter()
        .map(|&(id, n, p, asked)| {
            serde_json::json!({"id": id, "pkts": n, "pps": p, "rate_pps": asked})
        })
        .collect::<Vec<_>>()
        .into();
    if total.steered {
        // Commands changed the rate: the intervals compare asked and achieved.
        j["steered"] = true.into();
    }
    if let Some(r) = total.rate_pps.filter(|_| !total.steered) {
        j["achieved_pct"] = (100.0 * f.pps / r).into();
        j["on_stall"] = on_stall_name(&stall).into();
        j["behind_ns"] = total.behind_ns.into();
        j["port_full"] = total.port_full.into();
        j["precision"] = precision_json(&total.precision);
    }
    if let Some(t) = &run.probes {
        j["latency"] = crate::shared::latency_json(t, sent);
        j["rx_other"] = t.other.into();
    }
    if let Some(s) = hist_svg {
        j["hist_svg"] = s.into();
    }
    let _ = writeln!(out, "{j}");
}

fn summary_text(
    out: &mut dyn Write,
    a: &Args,
    run: &gen::threads::ThreadsReport,
    f: &Figures,
    hist_svg: Option<&str>,
    sent: &dyn Fn(u16) -> Option<u64>,
) {
    let total = &run.total;
    let _ = writeln!(
        out,
        "Sent {} pkts, {} bytes in {} ms: {} pps, {} Mbit/s; port drops: {}",
        group(total.taken()),
        group(total.taken_bytes()),
        group_f(f.elapsed * 1e3, 2),
        group_f(f.pps, 0),
        group_f(f.mbps, 2),
        if total.port.tx_drops.total() == 0 {
            "none".to_string()
        } else {
            // What was sent is what the port took; the dropped ones are not in it.
            format!(
                "{} (of {} handed to the port)",
                breakdown(&total.port.tx_drops),
                group(total.pkts)
            )
        }
    );
    if let Some((o, by)) = total.overwritten {
        let path = &a.output;
        let place = if by == "-G" && !path.contains('%') {
            format!("in {path}")
        } else {
            "in the files".to_string()
        };
        let _ = writeln!(
            out,
            "Written to {path}: {} pkts ({} {place} now; {} overwritten by {by})",
            group(total.taken()),
            group(total.taken().saturating_sub(o)),
            group(o)
        );
    }
    if let Some(why) = &total.ended {
        // The port took no more (tcpdump's -W file limit): the run ended there.
        let _ = writeln!(
            out,
            "Stopped: {why}{}",
            match total.not_sent {
                0 => String::new(),
                n => format!("; {} pkts built were not taken (not sent)", group(n)),
            }
        );
    }
    if total.steered {
        // The asked rate changed during the run: the intervals compared asked and achieved.
        let _ = writeln!(
            out,
            "Rate: steered by commands; {} pps over the whole run",
            group_f(f.pps, 0)
        );
    } else if let Some(r) = total.rate_pps {
        let _ = writeln!(out, "Rate: {}", rate_words(f.pps, r, f.why));
        if let Some(w) = f.why {
            let _ = writeln!(out, "  {}", shortfall_detail(w, total));
        }
    }
    if total.rate_pps.is_some() {
        let _ = write!(out, "{}", total.precision.table());
    }
    if f.per_stream.len() > 1 {
        for &(id, n, p, asked) in &f.per_stream {
            let _ = writeln!(
                out,
                "Stream {id}: {} pkts handed to the port [{} pps]{}",
                group(n),
                group_f(p, 0),
                asked
                    .filter(|_| !total.steered)
                    .map(|r| format!(" of {} pps asked", group_f(r, 0)))
                    .unwrap_or_default()
            );
        }
    }
    if let Some(t) = &run.probes {
        let _ = writeln!(out, "Received on {}:", a.rx.as_deref().unwrap_or(""));
        let _ = write!(out, "{}", t.table(sent));
        if t.other > 0 {
            let _ = writeln!(out, "({} packets without a probe)", group(t.other));
        }
    }
    if let Some(s) = hist_svg {
        let _ = writeln!(
            out,
            "Histogram: {} and {s}",
            a.hist_out.as_deref().unwrap_or("")
        );
    }
}

/// gen's live page: `page` with a row per output port (its thread's counters) and one for the
/// `--rx` port (`rx`: its name, counters and when they were read).
fn gen_page(
    mut page: Page,
    names: &[&str],
    cur: &[GenTick],
    rx: Option<(&str, PortCount, u64)>,
    meter: &mut Meter,
) -> Page {
    for (i, (n, c)) in names.iter().zip(cur).enumerate() {
        // Mbit/s as the interval lines count it: with each frame's 4-byte FCS.
        let (n_pkts, n_bytes) = (c.taken(), c.taken_bytes());
        let (pps, mbps) = meter.rate(i, c.t_ns, n_pkts, n_bytes + 4 * n_pkts);
        page.ports.push(PortRow {
            port: n.to_string(),
            dir: "tx",
            pps,
            mbps,
            packets: n_pkts,
            drops: c.drops.total(),
        });
        page.add_drops("tx ", &c.drops);
    }
    if let Some((n, c, t)) = rx {
        let (pps, mbps) = meter.rate(names.len(), t, c.packets, c.bytes + 4 * c.packets);
        page.ports.push(PortRow {
            port: n.to_string(),
            dir: "rx",
            pps,
            mbps,
            packets: c.packets,
            drops: c.drops.total(),
        });
        page.add_drops("rx ", &c.drops);
    }
    page
}

/// Loads `--script`: a script the tool cannot use is a usage error (exit 2), one that runs out
/// of memory at its top level a runtime error (exit 1).
fn load_script(path: &str, opts: &ScriptOptions) -> anyhow::Result<LuaHook> {
    LuaHook::load(path, opts).map_err(|e| match e {
        ScriptError::Memory(m) | ScriptError::Stopped(m) => anyhow::anyhow!("--script: {m}"),
        e => usage(format!("--script: {e}")),
    })
}

/// Why a run fell short, in a sentence.
fn shortfall_detail(w: gen::Shortfall, r: &GenReport) -> String {
    let p = &r.precision;
    let gave_up = if p.slips > 0 {
        format!(
            "; {} ms of the schedule given up in {} stalls longer than the catch-up window",
            group_f(p.slipped_ns as f64 / 1e6, 3),
            group(p.slips)
        )
    } else {
        String::new()
    };
    match w {
        gen::Shortfall::Generator => format!(
            "the generator could not build and hand out packets at this rate on this port \
             and CPU ({} ms behind at the end{gave_up}); lower --rate, add --threads, or give \
             each thread a core of its own (-g)",
            group_f(r.behind_ns as f64 / 1e6, 3)
        ),
        gen::Shortfall::Port if r.port.tx_drops.total() > 0 => format!(
            "the port did not take packets at this rate: it dropped {} of {} ({}){} ({} ms \
             behind at the end{gave_up})",
            group(r.port.tx_drops.total()),
            group(r.pkts),
            breakdown(&r.port.tx_drops),
            // A port that drops what does not fit never pushes back; one that also pushed
            // back says how often.
            if r.port_full > 0 {
                format!("; it also pushed back {} times", group(r.port_full))
            } else {
                String::new()
            },
            group_f(r.behind_ns as f64 / 1e6, 3)
        ),
        gen::Shortfall::Port => format!(
            "the port did not take packets at this rate: its ring was full {} times ({} ms \
             behind at the end{gave_up})",
            group(r.port_full),
            group_f(r.behind_ns as f64 / 1e6, 3)
        ),
        gen::Shortfall::Shifted => format!(
            "--on-stall shift: after {} stalls the schedule moved later by {} ms in all \
             (catching up, the default, keeps the mean rate)",
            group(p.slips),
            group_f(p.slipped_ns as f64 / 1e6, 3)
        ),
    }
}

/// The interface to run the live engine on, if `--engine` and the options choose it.
fn live_iface(a: &Args, cfg: &ScriptConfig) -> anyhow::Result<Option<String>> {
    let out = Uri::parse(&a.output).ok();
    let xdp = match &out {
        Some(Uri::Xdp { iface, .. }) => Some(iface.as_str()),
        _ => None,
    };
    let want = match a.engine.as_str() {
        "auto" => None,
        "live" => Some(true),
        "xsk" => Some(false),
        e => return Err(usage(format!("--engine {e}: use auto, live or xsk"))),
    };
    let Some(iface) = xdp else {
        return match want {
            Some(true) => Err(usage(format!(
                "--engine live sends on an interface: use -o xdp:IFACE, not -o {}",
                a.output
            ))),
            Some(false) if !out.as_ref().is_some_and(|u| u.members()[0].is_xdp()) => {
                Err(usage(format!(
                    "--engine xsk sends through an AF_XDP port: use -o xdp:IFACE, not -o {}",
                    a.output
                )))
            }
            _ => Ok(None),
        };
    };
    if want == Some(false) {
        return Ok(None);
    }
    // What only the xsk engine does, and the flag that asks for it.
    let why = if a.script.is_some() {
        Some("--script modifies packets in user space".to_string())
    } else if a.rx.is_some() {
        Some("--rx needs latency probes, which live frames do not carry".to_string())
    } else if a.commands.is_some() && want.is_none() {
        // Live frames follow start, stop and rate only: auto takes the engine that follows
        // every command (--engine live --commands - is the rate-only one).
        Some(
            "--commands: size, addresses, ports, proto, ttl, vlan, MACs and count change only \
             on the xsk engine"
                .to_string(),
        )
    } else if a.streams > 1 {
        Some("--streams: live frames send one stream".to_string())
    } else if pick(&a.pattern, cfg, "pattern").is_some_and(|p| p != "cbr") {
        Some("--pattern: live frames pace by runs of packets, not per packet".to_string())
    } else if let (None, Some(why)) = (want, paced_on_xsk(a, cfg)?) {
        Some(why)
    } else {
        let (streams, _, _) = streams_from(a, cfg, 0)?;
        gen_streams::live_refusal(&a.gs, &streams)
            .or_else(|| linerate::apps::gen::live::unsupported(&streams[0]))
    };
    match (want, why) {
        (Some(true), Some(why)) => Err(usage(format!(
            "--engine live: {why}; use --engine xsk (AF_XDP) for this"
        ))),
        (None, Some(_)) => Ok(None),
        _ => Ok(Some(iface.to_string())),
    }
}

/// The live engine's page: its state line and its row (`c`: what the device took, with its
/// transmit drops) at frames of `frame_len` bytes without CRC.
fn live_view(
    output: &str,
    mut c: PortCount,
    frame_len: u64,
    sending: bool,
) -> (String, Vec<crate::console::Counted>) {
    // Mbit/s as the lines count it: with each frame's 4-byte CRC.
    c.bytes += 4 * c.packets;
    let state = if sending {
        format!("sending, size {} (XDP live frames)", frame_len + 4)
    } else {
        "stopped".to_string()
    };
    (state, vec![(output.to_string(), Dir::Tx, c)])
}

/// The word after the live engine's rate line: a command changed the rate in the interval, or
/// it fell short of the rate asked by more than the tolerance.
fn live_status(changed: bool, short: bool) -> Option<String> {
    if changed {
        Some("settings changed".into())
    } else {
        short.then(|| "short: the kernel's runs fell behind".into())
    }
}

/// Why the live-frames engine cannot change size, dst-mac or count while it runs.
const LIVE_FIXED: &str = "not on the XDP live-frames engine: the kernel sends copies of the one \
                          template built at the start (use --engine xsk to change them while it \
                          runs)";

/// Why `--engine auto` sends a `--rate` on the xsk engine, if it does: below
/// [`live::PACED_MIN_PPS`] a thread, the live engine would send it in runs of ~25 ms' worth of
/// packets back to back (the kernel's cost of a run), bursts a receiver's ring drops; the xsk
/// engine paces per packet.
fn paced_on_xsk(a: &Args, cfg: &ScriptConfig) -> anyhow::Result<Option<String>> {
    use linerate::apps::gen::live;
    if a.engine != "auto" || !matches!(Uri::parse(&a.output), Ok(Uri::Xdp { .. })) {
        return Ok(None);
    }
    let Some(rate) = pick(&a.rate, cfg, "rate") else {
        return Ok(None);
    };
    let (streams, _, _) = streams_from(a, cfg, 0)?;
    let Some(pps) = streams.first().and_then(|s| s.pps) else {
        return Ok(None);
    };
    if pps >= live::PACED_MIN_PPS {
        return Ok(None);
    }
    // The xsk engine binds a socket a thread, one queue each: more threads than the
    // interface has queues fail to bind (EBUSY, as if another program held the queue).
    if let Some(iface) = Uri::parse(&a.output).ok().as_ref().and_then(Uri::xdp_whole) {
        let queues = std::fs::read_dir(format!("/sys/class/net/{iface}/queues"))
            .map(|d| {
                d.flatten()
                    .filter(|e| e.file_name().to_string_lossy().starts_with("tx-"))
                    .count()
            })
            .unwrap_or(0);
        if queues > 0 && a.threads > queues {
            return Err(usage(format!(
                "--engine auto: --rate {rate} is below {} pps a thread, where the xsk engine \
                 paces each packet, but it needs a queue a thread and {iface} has {queues} for \
                 {} threads: use --threads {queues} (xsk, paced), or --engine live (the XDP \
                 live-frames engine, in runs of packets back to back)",
                group_f(live::PACED_MIN_PPS, 0),
                a.threads
            )));
        }
    }
    let run = pps * live::TYPICAL_RUN_GAP_NS as f64 / 1e9;
    Ok(Some(format!(
        "--rate {rate}: below {} pps a thread the XDP live-frames engine sends in runs of ~{} \
         frames every ~{} ms (bursts a receiver's ring drops), the xsk engine paces each \
         packet (--engine live to take the runs)",
        group_f(live::PACED_MIN_PPS, 0),
        group_f(run, 0),
        live::TYPICAL_RUN_GAP_NS / 1_000_000
    )))
}

/// `linerate gen -o xdp:IFACE` on the live-frames engine.
fn run_live(
    a: &Args,
    cfg: &ScriptConfig,
    iface: &str,
    on_stall: OnStall,
    stop: &Arc<AtomicBool>,
) -> anyhow::Result<ExitCode> {
    use linerate::apps::gen::live;
    let setup = live_setup(a, cfg, iface, on_stall, stop)?;
    let interval = flag(
        "--interval",
        flags::check_duration(&a.interval, flags::INTERVAL),
    )?;
    let mut out = std::io::stdout();
    announce_live(&mut out, a, setup.opts.pps, on_stall);
    if let (Some(st), Some(_)) = (&setup.steer, &a.commands) {
        read_commands(st.clone(), a.json);
    }
    let metrics = metrics::start(&a.metrics, "gen", a.quiet)?;
    let page = match (&setup.steer, setup.with_console) {
        (Some(st), true) => Some(ReadOnly::steered(
            format!("linerate gen -o {} (XDP live frames)", a.output),
            stop.clone(),
            st.clone(),
            Some(
                "live frames: s, p and r work; size, dst-mac and count only with --engine xsk"
                    .into(),
            ),
        )?),
        _ => None,
    };
    let clock = TscClock::new();
    let t0 = clock.now_ns();
    let ctl = setup.opts.control.clone();
    let mut shown = LiveShowing {
        a,
        steer: setup.steer.as_ref(),
        version: ctl.as_ref().map_or(0, |c| c.version()),
        ctl,
        metrics: metrics.as_ref(),
        page,
        t0,
        prev: (0, t0),
        pps: setup.opts.pps,
        frame_len: setup.frame_len,
    };
    if let Some(pg) = shown.page.as_mut() {
        pg.seed(t0, &[(a.output.clone(), Dir::Tx, PortCount::default())]);
    }
    let r =
        live::run(&setup.opts, &clock, stop, interval, |t| shown.tick(t)).map_err(|e| match e {
            linerate::apps::gen::GenError::Port(PortError::NoInterface(_)) => {
                usage(format!("-o {}: {e}", a.output))
            }
            e => anyhow::Error::new(e).context(format!("live frames on {iface}")),
        });
    // The terminal back before the summary (or the error).
    drop(shown.page.take());
    let r = r?;
    if let Some(m) = &metrics {
        // The device's own transmit drops over the run.
        let c = live_count(
            &live::LiveTick {
                t_ns: r.last_ns,
                pkts: r.pkts,
                tx_dropped: r.tx_dropped,
            },
            setup.frame_len,
        );
        publish(m, &[(a.output.as_str(), c)], None, r.rate_pps, r.pps());
    }
    live_summary(&mut out, a, &r, on_stall);
    let _ = out.flush();
    Ok(ExitCode::SUCCESS)
}

/// The live engine's run as the flags and the script ask it.
struct LiveSetup {
    opts: linerate::apps::gen::live::LiveOptions,
    /// Steering (the page's keys, --commands -).
    steer: Option<Arc<Mutex<Steer>>>,
    with_console: bool,
    /// Bytes of a frame without its CRC (one size: live frames refuse others).
    frame_len: u64,
}

/// The live engine's options: one stream (the kernel sends copies of one template), the
/// rate of all threads, steering of start, stop and the rate (size, dst-mac and count stay
/// as started).
fn live_setup(
    a: &Args,
    cfg: &ScriptConfig,
    iface: &str,
    on_stall: OnStall,
    stop: &Arc<AtomicBool>,
) -> anyhow::Result<LiveSetup> {
    use linerate::apps::gen::live::{self, LiveOptions};
    let (mut streams, _, duration) = streams_from(a, cfg, 0)?;
    let count = pick(&a.count, cfg, "count")
        .map(|c| {
            flag(
                &named(&a.count, cfg, "count", "--count"),
                flags::check_count(c, flags::PACKETS),
            )
        })
        .transpose()?;
    let mut stream = streams.remove(0);
    let pps = stream.pps.map(|p| p * a.threads as f64);
    // One size (live frames refuse others): bytes are packets times the frame without CRC.
    let frame_len = u64::from(stream.size.bounds().0.saturating_sub(4));
    let with_console =
        crate::console::wanted(a.json || a.quiet || a.no_console || a.commands.is_some());
    let steer = if with_console || a.commands.is_some() {
        let st = Steer::new(
            vec![stream.clone()],
            a.threads,
            link_bps(a, &a.output)?,
            stop.clone(),
        )
        .only(&["start", "stop", "rate", "quit"], LIVE_FIXED.into());
        Some(Arc::new(Mutex::new(st)))
    } else {
        None
    };
    let ctl = steer
        .as_ref()
        .map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).ctl.clone());
    stream.probe = false;
    stream.pps = None;
    let opts = LiveOptions {
        iface: iface.to_string(),
        stream,
        count,
        duration,
        pps,
        threads: a.threads,
        core: a.core,
        batch: a.batch,
        seed: a.seed,
        on_stall,
        control: ctl,
    };
    live::validate(&opts).map_err(|e| usage(e.to_string()))?;
    Ok(LiveSetup {
        opts,
        steer,
        with_console,
        frame_len,
    })
}

/// The live engine's start line (or JSON record): its runs of frames and their gaps.
fn announce_live(out: &mut dyn Write, a: &Args, pps: Option<f64>, on_stall: OnStall) {
    use linerate::apps::gen::live;
    if a.json {
        let j = serde_json::json!({"type": "start", "port": a.output, "engine": "live",
            "threads": a.threads, "pps": pps, "rate_pps": pps, "batch": a.batch,
            "on_stall": on_stall_name(&on_stall)});
        let _ = writeln!(out, "{j}");
    } else if !a.quiet {
        let rate = pps
            .map(|p| {
                format!(
                    "{} pps in runs of ~{} frames back to back, one a thread every ~{} ms; {}",
                    group_f(p, 0),
                    group_f(
                        p / a.threads as f64 * live::TYPICAL_RUN_GAP_NS as f64 / 1e9,
                        0
                    ),
                    live::TYPICAL_RUN_GAP_NS / 1_000_000,
                    on_stall_words(&on_stall)
                )
            })
            .unwrap_or_else(|| "as fast as possible".into());
        let _ = writeln!(
            out,
            "Generating on {} with XDP live frames ({} thread(s), {rate}, batches of {}; no latency probes)",
            a.output, a.threads, a.batch
        );
    }
    let _ = out.flush();
}

/// What the device took: the program's frames less its transmit drops since the start
/// (named by reason as the kernel's).
fn live_count(t: &linerate::apps::gen::live::LiveTick, frame_len: u64) -> PortCount {
    let mut drops = Drops::default();
    if let Some(d) = t.tx_dropped {
        drops.add(linerate::port::DropReason::Kernel, d);
    }
    let taken = t.pkts.saturating_sub(t.tx_dropped.unwrap_or(0));
    PortCount {
        packets: taken,
        bytes: taken * frame_len,
        drops,
    }
}

/// What the live engine shows while it runs: the page (steered by its keys) or the
/// interval lines, and the metrics.
struct LiveShowing<'a> {
    a: &'a Args,
    steer: Option<&'a Arc<Mutex<Steer>>>,
    ctl: Option<Arc<linerate::apps::gen::control::Control>>,
    /// The settings' version at the previous interval.
    version: u64,
    metrics: Option<&'a metrics::Metrics>,
    page: Option<ReadOnly>,
    t0: u64,
    /// Packets and time at the previous interval.
    prev: (u64, u64),
    /// The rate asked of all threads at the start.
    pps: Option<f64>,
    frame_len: u64,
}

impl LiveShowing<'_> {
    fn tick(&mut self, t: &linerate::apps::gen::live::LiveTick) {
        let a = self.a;
        let (p, now) = (live_count(t, self.frame_len).packets, t.t_ns);
        let (prev_p, prev_t) = self.prev;
        let dt = (now - prev_t) as f64 / 1e9;
        let rate = (p - prev_p) as f64 / dt.max(1e-9);
        // The rate asked now (commands change it; 0 while stopped).
        let steered = self.steer.map(|s| {
            let s = s.lock().unwrap_or_else(|e| e.into_inner());
            (s.asked_pps(), s.sending())
        });
        let asked = steered.map_or(self.pps, |(r, _)| r);
        let changed = self
            .ctl
            .as_ref()
            .is_some_and(|c| c.version() != self.version);
        self.version = self.ctl.as_ref().map_or(0, |c| c.version());
        if let Some(m) = self.metrics {
            let c = live_count(t, self.frame_len);
            publish(m, &[(a.output.as_str(), c)], None, asked, rate);
        }
        self.prev = (p, now);
        if a.quiet {
            return;
        }
        // Runs leave in bursts, so an interval holds a whole number of runs: below the rate
        // by more than the tolerance, say so (the summary judges the run).
        let short = asked.filter(|&r| r > 0.0 && rate < r * (1.0 - gen::RATE_TOLERANCE));
        if let Some(pg) = self.page.as_mut() {
            let sending = steered.is_none_or(|(_, s)| s);
            let v = live_view(
                &a.output,
                live_count(t, self.frame_len),
                self.frame_len,
                sending,
            );
            let rl = RateLine {
                asked,
                achieved: rate,
            };
            let mut pg_page = pg.page(&v.0, now, &v.1, &[], Some(rl));
            pg_page.status = live_status(changed, short.is_some());
            pg.show(pg_page);
        } else if a.json {
            let mut j = serde_json::json!({"type": "stats", "elapsed_ms": (now - self.t0) as f64 / 1e6,
                "pkts": p, "pps": rate, "rate_pps": asked,
                "device_tx_dropped": t.tx_dropped});
            if let Some((_, sending)) = steered {
                j["sending"] = sending.into();
                j["status"] = changed.then_some("settings changed").into();
            }
            let _ = writeln!(std::io::stdout(), "{j}");
        } else {
            let _ = writeln!(
                std::io::stdout(),
                "TX: {} pkts [{} pps]{}",
                group(p),
                group_f(rate, 0),
                short.map_or(String::new(), |r| format!(
                    " of {} pps asked",
                    group_f(r, 0)
                ))
            );
        }
    }
}

/// The live engine's summary: what the device took, the runs, and the rate's verdict.
fn live_summary(
    out: &mut dyn Write,
    a: &Args,
    r: &linerate::apps::gen::live::LiveReport,
    on_stall: OnStall,
) {
    let elapsed = r.last_ns.saturating_sub(r.first_ns) as f64 / 1e9;
    let mbps = if r.pkts > 0 {
        r.pps() * (r.bytes + 4 * r.pkts) as f64 * 8.0 / r.pkts as f64 / 1e6
    } else {
        0.0
    };
    let why = if r.pkts > 1 && !r.steered {
        gen::shortfall(r.rate_pps, r.pps(), r.tx_dropped.unwrap_or(0) > 0, false)
    } else {
        None
    };
    if a.json {
        let mut j = serde_json::json!({
            "type": "summary", "engine": "live", "pkts": r.taken(), "program_sent": r.pkts,
            "bytes": r.bytes,
            "elapsed_ms": elapsed * 1e3, "pps": r.pps(), "mbps": mbps, "runs": r.runs,
            "run_gap_ns": r.run_gap_ns(a.threads), "run_frames_mean": r.mean_run(),
            "run_frames_max": r.max_run, "device_tx_dropped": r.tx_dropped,
            "device_tx_packets": r.tx_packets, "rate_pps": r.rate_pps,
            "limited": why.map(|w| w.name()),
        });
        if r.steered {
            // Commands changed the rate: the intervals compare asked and achieved.
            j["steered"] = true.into();
        } else if let Some(asked) = r.rate_pps {
            j["achieved_pct"] = (100.0 * r.pps() / asked).into();
            j["on_stall"] = on_stall_name(&on_stall).into();
            j["slips"] = r.slips.into();
            j["slipped_ns"] = r.slipped_ns.into();
        }
        let _ = writeln!(out, "{j}");
        return;
    }
    let _ = writeln!(
        out,
        "Sent {} pkts, {} bytes in {} ms: {} pps, {} Mbit/s; device drops: {} ({} runs of {} frames on average, {} at most, one every {} ms a thread)",
        group(r.taken()),
        group(r.bytes),
        group_f(elapsed * 1e3, 2),
        group_f(r.pps(), 0),
        group_f(mbps, 2),
        r.tx_dropped.map_or("unknown".into(), group),
        group(r.runs),
        group_f(r.mean_run(), 0),
        group(r.max_run),
        group_f(r.run_gap_ns(a.threads) as f64 / 1e6, 1),
    );
    if r.steered {
        let _ = writeln!(
            out,
            "Rate: steered by commands; {} pps over the whole run",
            group_f(r.pps(), 0)
        );
    } else if let Some(asked) = r.rate_pps {
        let _ = writeln!(out, "Rate: {}", rate_words(r.pps(), asked, why));
        if r.slips > 0 {
            let _ = writeln!(
                out,
                "  schedule moved later {} times ({} ms in all): stalls longer than the \
                 catch-up window",
                group(r.slips),
                group_f(r.slipped_ns as f64 / 1e6, 3)
            );
        }
        if why == Some(gen::Shortfall::Port) {
            let _ = writeln!(
                out,
                "  the device dropped {} of the {} frames the program sent",
                group(r.pkts - r.taken()),
                group(r.pkts)
            );
        } else if why.is_some() {
            let _ = writeln!(
                out,
                "  the kernel runs could not send this rate on this interface and CPU; \
                 lower --rate or add --threads"
            );
        }
    }
}

/// The replay page's state line and its row (the output port's counters) at `t`.
fn replay_figures(
    t: &replay::ReplayTick,
    output: &str,
    opts: &ReplayOptions,
) -> (String, Vec<crate::console::Counted>) {
    // What the output took: the packets handed to it less those it dropped (as the summary).
    let r = replay::ReplayReport {
        pkts: t.pkts,
        bytes: t.bytes,
        port: t.port,
        ..Default::default()
    };
    let (taken, bytes) = (r.taken(), r.taken_bytes());
    let c = PortCount {
        packets: taken,
        // Mbit/s as gen's lines count it: with each frame's 4-byte CRC.
        bytes: bytes + 4 * taken,
        drops: t.port.tx_drops,
    };
    let pace = match (opts.rate, opts.speed) {
        (Some(replay::ReplayRate::Pps(p)), _) => format!("at {} pps", group_f(p, 0)),
        (Some(replay::ReplayRate::Bps { bps, .. }), _) => {
            format!("at {} Mbit/s", group_f(bps / 1e6, 3))
        }
        (None, None) => "as fast as possible".to_string(),
        (None, Some(x)) => format!(
            "at {}x the capture's pace, the last packet {} ms after its time",
            group_f(x, 2),
            group_f(t.late_ns as f64 / 1e6, 3)
        ),
    };
    let state = if opts.loops == 0 {
        format!("replaying, loop {} (forever), {pace}", t.loops + 1)
    } else {
        format!(
            "replaying, loop {} of {}, {pace}",
            (t.loops + 1).min(opts.loops),
            opts.loops
        )
    };
    (state, vec![(output.to_string(), Dir::Tx, c)])
}

/// As fast as possible, the rate line says so with the rate achieved (the row's); at the
/// capture's pace the asked rate is the capture's own, and the state line says how late the
/// last packet left instead.
fn replay_rate(mut p: Page, opts: &ReplayOptions) -> Page {
    if let Some(replay::ReplayRate::Pps(pps)) = opts.rate {
        p.rate = Some(RateLine {
            asked: Some(pps),
            achieved: p.ports.first().map_or(0.0, |r| r.pps),
        });
    } else if opts.speed.is_none() && opts.rate.is_none() {
        p.rate = Some(RateLine {
            asked: None,
            achieved: p.ports.first().map_or(0.0, |r| r.pps),
        });
    }
    p
}

/// `linerate gen --pcap FILE`: replays a capture (tcpreplay's job); on a terminal its page
/// (read-only: a replay plays the capture as it is).
fn run_replay(
    a: &Args,
    path: &str,
    popts: &PortOptions,
    stop: &Arc<AtomicBool>,
) -> anyhow::Result<ExitCode> {
    if a.threads != 1 {
        return Err(usage("--pcap replays on one thread"));
    }
    // Flags a replay cannot apply, and the edits and rate it can, refused or checked before
    // anything is opened.
    super::gen_replay::refuse_unfit(a)?;
    let rw = super::gen_replay::rewrite(a)?;
    let rate = super::gen_replay::rate(a, || link_bps(a, &a.output))?;
    // A replay ends with its capture (times --loop), unless it loops forever.
    let limited = a.replay.loops != 0 || a.count.is_some() || a.duration.is_some();
    // Check the capture opens, and its link types go on Ethernet, before creating anything.
    let mut ifaces = open(path, popts, "--pcap")?.interfaces();
    let rewrite = super::gen_replay::for_capture(path, rw, &ifaces)?;
    if rewrite.is_some() {
        // What leaves is Ethernet, whatever the capture held.
        for i in &mut ifaces {
            i.link = LinkType::ETHERNET;
        }
    }
    let mut outp = open_out(&a.output, popts, limited)?;
    outp.describe(&ifaces)
        .with_context(|| format!("-o {}", a.output))?;
    let opts = ReplayOptions {
        speed: if a.replay.topspeed {
            None
        } else {
            Some(a.replay.speed.unwrap_or(1.0))
        },
        loops: a.replay.loops,
        rate,
        rewrite,
        count: a
            .count
            .as_deref()
            .map(|c| flag("--count", flags::check_count(c, flags::PACKETS)))
            .transpose()?,
        duration: a
            .duration
            .as_deref()
            .map(|d| flag("--duration", flags::check_duration(d, flags::RUN)))
            .transpose()?,
        on_stall: on_stall(a)?,
        ..Default::default()
    };
    crate::common::pin(a.core)?;
    let clock = TscClock::new();
    let interval = flag(
        "--interval",
        flags::check_duration(&a.interval, flags::INTERVAL),
    )?;
    let mut page = if crate::console::wanted(a.json || a.quiet || a.no_console) {
        Some(ReadOnly::with_note(
            format!("linerate gen --pcap {path} -o {}", a.output),
            stop.clone(),
            Some(
                "no commands: a replay plays the capture as --rate, --speed, --loop, -c, -t set it"
                    .into(),
            ),
        )?)
    } else {
        None
    };
    if let Some(pg) = page.as_mut() {
        pg.seed(
            clock.now_ns(),
            &[(a.output.clone(), Dir::Tx, PortCount::default())],
        );
    }
    linerate::port::file::start_writing();
    let r = replay::run_observed(
        || linerate::open_rx(path, popts),
        outp.as_mut(),
        &opts,
        &clock,
        stop,
        interval,
        |t| {
            if let Some(pg) = page.as_mut() {
                let (state, rows) = replay_figures(t, &a.output, &opts);
                let p = pg.page(&state, t.t_ns, &rows, &[], None);
                pg.show(replay_rate(p, &opts));
            }
        },
    )
    .with_context(|| format!("replaying {path} on {}", a.output));
    // The terminal back before the summary (or the error).
    drop(page);
    let r = r?;
    outp.finish(&[])
        .with_context(|| format!("replaying {path} on {}", a.output))?;
    replay_summary(a, &r, &opts);
    Ok(ExitCode::SUCCESS)
}

/// The replay's summary: what left, the loops, what the port dropped and what could not
/// go on Ethernet, and the schedule's precision.
fn replay_summary(a: &Args, r: &replay::ReplayReport, opts: &ReplayOptions) {
    let elapsed = r.last_ns.saturating_sub(r.first_ns) as f64 / 1e9;
    // What left: a packet the output dropped was not replayed.
    let pps = if elapsed > 0.0 {
        (r.taken().saturating_sub(1)) as f64 / elapsed
    } else {
        0.0
    };
    let mut out: Box<dyn Write> = if to_stdout(&a.output) {
        Box::new(std::io::stderr())
    } else {
        Box::new(std::io::stdout())
    };
    if a.json {
        let mut j = serde_json::json!({"type": "summary", "pkts": r.taken(),
            "handed_to_port": r.pkts, "bytes": r.taken_bytes(),
            "loops": r.loops, "elapsed_ms": elapsed * 1e3, "pps": pps,
            "port_drops": r.port.tx_drops.total(), "unsent": r.unsent, "ended": r.ended.text()});
        j["refused"] = r.refused.total().into();
        j["port_drops_by_reason"] = serde_json::json!({});
        for why in linerate::port::DropReason::ALL {
            let n = r.port.tx_drops.get(why);
            if n > 0 {
                j["port_drops_by_reason"][why.name()] = n.into();
            }
        }
        for (why, n) in r.refused.reasons() {
            j["refused_by_reason"][why] = n.into();
        }
        if opts.speed.is_some() || opts.rate.is_some() {
            j["precision"] = precision_json(&r.precision);
        }
        let _ = writeln!(out, "{j}");
    } else {
        let _ = writeln!(
            out,
            "Replayed {} pkts, {} bytes ({} loop(s) of {}) in {} ms: {} pps; port drops: {}; \
             ended: {}",
            group(r.taken()),
            group(r.taken_bytes()),
            r.loops,
            super::gen_replay::loops_text(opts.loops),
            group_f(elapsed * 1e3, 2),
            group_f(pps, 0),
            if r.port.tx_drops.total() == 0 {
                "0".to_string()
            } else {
                format!(
                    "{} ({})",
                    group(r.port.tx_drops.total()),
                    breakdown(&r.port.tx_drops)
                )
            },
            r.ended.text()
        );
        if r.unsent > 0 {
            let _ = writeln!(
                out,
                "Not sent: {} pkts ({})",
                group(r.unsent),
                if r.ended == replay::ReplayEnd::FileLimit {
                    "read, not taken: tcpdump's -W file limit ended the replay"
                } else {
                    "the port took nothing for a long while, or the replay stopped while it \
                     was full"
                }
            );
        }
        if r.refused.total() > 0 {
            let why: Vec<String> = r
                .refused
                .reasons()
                .iter()
                .map(|(w, n)| format!("{w} {}", group(*n)))
                .collect();
            let _ = writeln!(
                out,
                "Not replayed: {} pkts that cannot go on Ethernet ({})",
                group(r.refused.total()),
                why.join(", ")
            );
        }
        if opts.speed.is_some() || opts.rate.is_some() {
            let _ = write!(out, "{}", r.precision.table());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::console::keys::CommandLine;
    use crate::console::page::render_text;
    use crate::console::{counters_page, Meter};
    use std::sync::atomic::AtomicBool;

    /// The XDP live-frames engine on a veth (root), 30'000 frames at 100'000 pps, drawn from
    /// its own ticks: the row's packets are what the device took at the last tick, its pps
    /// and the rate line's achieved rate those between the first and the last tick, next to
    /// the rate asked.
    #[test]
    fn the_live_engine_page_shows_what_the_device_took() {
        use linerate::apps::gen::live::{self, LiveOptions, LiveTick};
        use linerate_test_support::netns::{self, NetnsPair, Side};
        if !netns::require_priv() {
            return;
        }
        let p = NetnsPair::new().expect("netns pair");
        let obj = linerate_test_support::repo_root().join("bpf/xdp_drop.o");
        p.ip_in(
            Side::B,
            &[
                "link",
                "set",
                "dev",
                "vB",
                "xdpdrv",
                "obj",
                obj.to_str().unwrap(),
                "sec",
                "xdp",
            ],
        )
        .expect("XDP program on the peer");
        let stream = StreamSpec {
            template: TemplateSpec {
                dst_mac: p.mac_b,
                src_mac: p.mac_a,
                ..Default::default()
            },
            size: SizeSpec::Fixed(64),
            probe: false,
            ..Default::default()
        };
        let frame_len = u64::from(stream.size.bounds().0 - 4);
        let opts = LiveOptions {
            iface: "vA".into(),
            stream,
            count: Some(30_000),
            pps: Some(100_000.0),
            ..Default::default()
        };
        let mut ticks: Vec<LiveTick> = Vec::new();
        let r = p.run_in(Side::A, || {
            live::run(
                &opts,
                &TscClock::new(),
                &AtomicBool::new(false),
                Duration::from_millis(50),
                |t| ticks.push(*t),
            )
        });
        let r = r.expect("a live run");
        assert!(ticks.len() >= 2, "ticks while it ran: {ticks:?}");
        let (first, last) = (ticks[0], *ticks.last().unwrap());
        let taken = |t: &LiveTick| t.pkts - t.tx_dropped.unwrap_or(0);
        let count = |t: &LiveTick| {
            let mut drops = Drops::default();
            drops.add(
                linerate::port::DropReason::Kernel,
                t.tx_dropped.unwrap_or(0),
            );
            PortCount {
                packets: taken(t),
                bytes: taken(t) * frame_len,
                drops,
            }
        };
        let mut meter = Meter::default();
        let mut page = None;
        for t in [first, last] {
            let (state, rows) = live_view("xdp:vA", count(&t), frame_len, true);
            let dt = (t.t_ns - first.t_ns) as f64 / 1e9;
            let rl = RateLine {
                asked: Some(100_000.0),
                achieved: if dt > 0.0 {
                    (taken(&t) - taken(&first)) as f64 / dt
                } else {
                    0.0
                },
            };
            let mut pg = counters_page("live".into(), state, 0.0, t.t_ns, &rows, &[], &mut meter);
            pg.rate = Some(rl);
            page = Some(pg);
        }
        let page = page.unwrap();
        let s = render_text(&page, &CommandLine::new(true).prompt(), 100, 20);
        println!("{s}");
        assert!(r.pkts >= taken(&last), "{r:?}");
        let dt = (last.t_ns - first.t_ns) as f64 / 1e9;
        let pps = (taken(&last) - taken(&first)) as f64 / dt;
        let rate = crate::console::page::rate_text(page.rate.as_ref().unwrap());
        assert!(s.contains(&format!("Rate: {rate}")), "{s}");
        assert!(rate.contains(&group_f(pps, 0)), "{rate}");
        assert!(s.contains("sending, size 64 (XDP live frames)"), "{s}");
        let row: Vec<&str> = s
            .lines()
            .find(|l| l.contains("xdp:vA") && l.contains(" tx "))
            .unwrap()
            .trim_matches(|c| c == '│' || c == ' ')
            .split_whitespace()
            .collect();
        let mbps = group_f(
            (taken(&last) - taken(&first)) as f64 * (frame_len + 4) as f64 * 8.0 / dt / 1e6,
            2,
        );
        let (pkts, drops) = (group(taken(&last)), group(last.tx_dropped.unwrap_or(0)));
        assert_eq!(
            row,
            ["xdp:vA", "tx", &group_f(pps, 0), &mbps, &pkts, &drops],
            "{s}"
        );
    }

    /// A replay of a capture into a file, three loops as fast as possible, drawn from its own
    /// progress: the page's row and rate line are the run's packets and rate, its drops none,
    /// and the state says the loop.
    #[test]
    fn the_replay_page_shows_what_the_replay_sent() {
        let src = linerate_test_support::corpus_dir().join("mptcp-v0.pcap");
        if !src.exists() {
            linerate_test_support::skip("tcpdump's test captures are not in the repository");
            return;
        }
        let out = std::env::temp_dir().join(format!("lr-replay-page-{}.pcap", std::process::id()));
        let uri = format!("pcap:{}", src.display());
        let o = PortOptions::default();
        let mut outp = linerate::open_tx(&format!("pcap:{}", out.display()), &o).unwrap();
        let opts = ReplayOptions {
            speed: None,
            loops: 3,
            ..Default::default()
        };
        let mut ticks = Vec::new();
        linerate::port::file::start_writing();
        let r = replay::run_observed(
            || linerate::open_rx(&uri, &o),
            outp.as_mut(),
            &opts,
            &TscClock::new(),
            &AtomicBool::new(false),
            Duration::from_micros(20),
            |t| ticks.push(*t),
        )
        .unwrap();
        drop(outp);
        let _ = std::fs::remove_file(&out);
        assert!(!ticks.is_empty(), "ticks while it ran");
        assert_eq!(r.pkts, 3 * 264);
        // The first tick and the run's end, as two intervals of the page.
        let last = replay::ReplayTick {
            t_ns: r.last_ns.max(ticks[0].t_ns + 1),
            pkts: r.pkts,
            bytes: r.bytes,
            loops: r.loops,
            late_ns: 0,
            port: r.port,
        };
        let mut meter = Meter::default();
        let mut page = None;
        for t in [ticks[0], last] {
            let (state, rows) = replay_figures(&t, "pcap:out", &opts);
            let p = counters_page("replay".into(), state, 0.0, t.t_ns, &rows, &[], &mut meter);
            page = Some(replay_rate(p, &opts));
        }
        let s = render_text(&page.unwrap(), &CommandLine::new(false).prompt(), 100, 20);
        println!("{s}");
        let dt = (last.t_ns - ticks[0].t_ns) as f64 / 1e9;
        let pps = group_f((last.pkts - ticks[0].pkts) as f64 / dt, 0);
        assert!(
            s.contains("replaying, loop 3 of 3, as fast as possible"),
            "{s}"
        );
        assert!(
            s.contains(&format!("Rate: {pps} pps (as fast as possible)")),
            "{s}"
        );
        let row: Vec<&str> = s
            .lines()
            .find(|l| l.contains("pcap:out"))
            .unwrap()
            .trim_matches(|c| c == '│' || c == ' ')
            .split_whitespace()
            .collect();
        let mbps = group_f(
            ((last.bytes + 4 * last.pkts) - (ticks[0].bytes + 4 * ticks[0].pkts)) as f64 * 8.0
                / dt
                / 1e6,
            2,
        );
        assert_eq!(row, ["pcap:out", "tx", &pps, &mbps, "792", "0"], "{s}");
    }
}

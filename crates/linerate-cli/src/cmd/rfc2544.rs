//! `linerate rfc2544`: throughput, latency, frame loss and back-to-back (RFC 2544) between an
//! output and an input port.

use crate::common::{flags, pin, stop_flag, usage};
use anyhow::Context;
use clap::Parser;
use linerate::apps::gen::rfc2544::{self, Rfc2544Options, SIZES};
use linerate::apps::gen::template::TemplateSpec;
use linerate::apps::gen::vary::parse_mac;
use linerate::apps::gen::{fmt_pps, RATE_TOLERANCE};
use linerate::port::{PortOptions, Uri};
use linerate::time::TscClock;
use std::io::Write;
use std::process::ExitCode;

/// Flags of `linerate rfc2544`.
#[derive(Parser, Debug)]
pub struct Args {
    /// Port the test frames leave on.
    #[arg(short = 'o', long = "out", value_name = "PORT")]
    output: String,
    /// Port they come back on (mem:NAME with -o mem:NAME is the two ends of one wire).
    #[arg(short = 'i', long = "in", value_name = "PORT")]
    input: String,
    /// Frame sizes with CRC, comma-separated.
    #[arg(
        long,
        value_name = "LIST",
        default_value = "64,128,256,512,1024,1280,1518"
    )]
    sizes: String,
    /// Length of one trial (RFC 2544 asks for 60s; shorter trials are coarser).
    #[arg(long, value_name = "DURATION", default_value = "1s")]
    trial: String,
    /// Wait for late frames after each trial.
    #[arg(long, value_name = "DURATION", default_value = "100ms")]
    settle: String,
    /// Resolution of the throughput search, % of the result: the search (in packets per
    /// second) ends when the highest passing and the lowest failing rate are this close.
    #[arg(long, value_name = "PCT", default_value_t = 1.0, value_parser = flags::real(0.01, 50.0, false))]
    resolution: f64,
    /// Line rate (frames + 20 B preamble and gap per frame), e.g. 10Gbps; default: the
    /// output interface's speed (as ethtool reports it), refused when it has none.
    #[arg(long, value_name = "RATE")]
    link_speed: Option<String>,
    /// Loss allowed for the partial drop rate (PDR), % of the frames sent: a second search,
    /// reported beside the no-drop rate (NDR). 0: the NDR only; below 100 (at 100 % every
    /// rate would pass, losing everything).
    #[arg(long, value_name = "PCT", default_value_t = 0.0, value_parser = loss_tolerance)]
    loss_tolerance: f64,
    /// Throughput searches per size: the median and the spread are reported, with a warning
    /// when they disagree.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = flags::int(1u32, 1000))]
    repeat: u32,
    /// Source IP address of the test frames (for a router: an address routed through it).
    #[arg(long, value_name = "ADDR")]
    src_ip: Option<std::net::IpAddr>,
    /// Destination IP address of the test frames.
    #[arg(long, value_name = "ADDR")]
    dst_ip: Option<std::net::IpAddr>,
    /// UDP source port of the test frames.
    #[arg(long, value_name = "PORT")]
    sport: Option<u16>,
    /// UDP destination port of the test frames.
    #[arg(long, value_name = "PORT")]
    dport: Option<u16>,
    /// Source MAC of the test frames.
    #[arg(long, value_name = "MAC")]
    src_mac: Option<String>,
    /// Longest burst of the back-to-back test (0 to skip it).
    #[arg(long, value_name = "FRAMES", default_value = "65536")]
    b2b_max: String,
    /// Rates of the frame-loss test, % of line rate (`80` or `80%`), comma-separated.
    #[arg(
        long,
        value_name = "LIST",
        default_value = "100,90,80,70,60,50,40,30,20,10"
    )]
    loss_steps: String,
    /// Destination MAC of the test frames.
    #[arg(long, value_name = "MAC")]
    dst_mac: Option<String>,
    /// Write every trial as CSV here.
    #[arg(long, value_name = "FILE.csv")]
    csv: Option<String>,
    /// Print trials and the summary as JSON lines.
    #[arg(long)]
    json: bool,
    /// Print only the tables.
    #[arg(short = 'q', long)]
    quiet: bool,
    /// Pin the generator to this core.
    #[arg(short = 'g', long, value_name = "CORE", value_parser = flags::int(0, flags::MAX_CORE))]
    core: Option<usize>,
}

/// Fewest frames a trial at line rate must carry for the largest size.
const MIN_TRIAL_FRAMES: f64 = 10.0;

/// `--loss-tolerance`: 0 up to, not including, 100 (a trial that lost every frame is no
/// partial drop rate).
fn loss_tolerance(s: &str) -> Result<f64, String> {
    match flags::check_real(s, 0.0, 100.0, false)? {
        x if x < 100.0 => Ok(x),
        _ => Err(format!(
            "'{s}' is out of range: a number from 0 up to, not including, 100 (at 100 % every \
             rate passes, even one where nothing came back)"
        )),
    }
}

/// The line rate of the output port: its interface's speed (`/sys/class/net/IF/speed`, what
/// ethtool reports), or a usage error asking for `--link-speed` (a `mem:` port, a link down, a
/// driver with no speed): a test in percent of a line that is not there means nothing.
fn iface_speed(out: &str) -> anyhow::Result<f64> {
    let iface = Uri::parse(out)
        .ok()
        .and_then(|u| u.iface().map(str::to_string));
    let Some(iface) = iface else {
        return Err(usage(format!(
            "--link-speed: -o {out} has no link speed to read: give the line rate the \
             percentages and the search refer to (e.g. --link-speed 10Gbps)"
        )));
    };
    let speed = std::fs::read_to_string(format!("/sys/class/net/{iface}/speed"));
    match speed.ok().and_then(|s| s.trim().parse::<i64>().ok()) {
        Some(mbps) if mbps > 0 => Ok(mbps as f64 * 1e6),
        _ => Err(usage(format!(
            "--link-speed: interface {iface} reports no speed (link down, or a driver without \
             one): give the line rate (e.g. --link-speed 10Gbps)"
        ))),
    }
}

/// The interface is down (`operstate` down, lowerlayerdown, notpresent) or gone; false for
/// one up or of unknown state (a driver without one).
fn link_down(iface: &str) -> bool {
    match std::fs::read_to_string(format!("/sys/class/net/{iface}/operstate")) {
        Ok(s) => matches!(s.trim(), "down" | "lowerlayerdown" | "notpresent"),
        Err(_) => true,
    }
}

fn list<T: std::str::FromStr>(flag: &str, s: &str) -> anyhow::Result<Vec<T>> {
    s.split(',')
        .map(|v| {
            v.trim()
                .parse::<T>()
                .map_err(|_| usage(format!("{flag}: '{v}' is not a number")))
        })
        .collect()
}

/// Runs `linerate rfc2544`.
pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    let stop = stop_flag()?;
    let mut opts = options(&a)?;
    // Last of the flags: the others' mistakes are named first.
    let line_from = line_rate(&a, &mut opts)?;
    let inputs = crate::common::inputs_of([a.input.as_str()]);
    if let Some(p) = &a.csv {
        crate::common::check_output("--csv", p, &inputs)?;
    }
    let popts = PortOptions {
        inputs: inputs.clone(),
        ..Default::default()
    };
    // The input first: nothing is created when it is missing.
    let mut rx = crate::common::open_input("-i", &a.input, &popts)?;
    let mut tx = crate::common::open_output("-o", &a.output, &popts)?;
    pin(a.core)?;
    let clock = TscClock::new();
    let mut out = std::io::stdout();
    announce(&mut out, &a, &opts, line_from);
    // Frames sent and received over every trial: none back at all is a broken path (or a
    // device that forwards nothing), not a throughput of zero.
    let mut end = End::default();
    // The interfaces of -o and -i: a link that goes down mid-run ends it (the trials after
    // would measure a cable, not the device), said so.
    let ifaces: Vec<String> = [&a.output, &a.input]
        .iter()
        .filter_map(|p| Uri::parse(p).ok()?.iface().map(str::to_string))
        .collect();
    let results = rfc2544::run(tx.as_mut(), rx.as_mut(), &opts, &clock, &stop, |t| {
        end.sent += t.sent;
        end.received += t.received;
        show_trial(&mut out, &a, &opts, t);
        if end.went_down.is_none() {
            if let Some(i) = ifaces.iter().find(|i| link_down(i)) {
                end.went_down = Some(format!(
                    "the link of {i} went down during the {} trial of {} B",
                    t.kind, t.size
                ));
                stop.store(true, std::sync::atomic::Ordering::Relaxed);
            }
        }
    })
    .context("rfc2544")?;
    end.interrupted = stop.load(std::sync::atomic::Ordering::Relaxed);
    if let Some(p) = &a.csv {
        crate::common::write_file("--csv", p, rfc2544::csv(&results).as_bytes(), &inputs)?;
    }
    if a.json {
        summary_json(&mut out, &results, &opts, line_from, &end);
    } else {
        let _ = write!(out, "{}", rfc2544::table(&results, &opts));
        if let Some(why) = &end.went_down {
            let _ = writeln!(
                out,
                "rfc2544: {why}: the run was stopped there and the results above are incomplete (that trial's loss is the link's)"
            );
        } else if end.interrupted {
            let _ = writeln!(
                out,
                "rfc2544: interrupted: the results above are incomplete ({} of {} sizes begun; the trial under way was not judged)",
                results.len(),
                opts.sizes.len()
            );
        }
    }
    let _ = out.flush();
    exit_code(&mut out, &a, &end)
}

/// How the run ended: the frames of every trial, and what stopped it early.
#[derive(Default)]
struct End {
    sent: u64,
    received: u64,
    /// The link of -o or -i went down during a trial.
    went_down: Option<String>,
    /// A signal (or a link down) stopped the run.
    interrupted: bool,
}

impl End {
    /// Frames went out and none came back.
    fn nothing_back(&self) -> bool {
        self.sent > 0 && self.received == 0
    }
}

/// The test's options from the flags: the sizes, the search, the test frames.
fn options(a: &Args) -> anyhow::Result<Rfc2544Options> {
    fn f<T>(flag: &str, r: Result<T, String>) -> anyhow::Result<T> {
        r.map_err(|e| usage(format!("{flag}: {e}")))
    }
    let sizes = sizes_of(a)?;
    let loss_steps: Vec<f64> = a
        .loss_steps
        .split(',')
        .map(|v| {
            let v = v.trim();
            f(
                "--loss-steps",
                flags::check_real(v.strip_suffix('%').unwrap_or(v), 0.0, 100.0, true),
            )
        })
        .collect::<anyhow::Result<_>>()?;
    let template = template(a)?;
    let opts = Rfc2544Options {
        sizes,
        trial: f("--trial", flags::check_duration(&a.trial, flags::TRIAL))?,
        settle: f("--settle", flags::check_duration(&a.settle, flags::WAIT))?,
        resolution_pct: a.resolution,
        loss_steps,
        b2b_max: f(
            "--b2b-max",
            flags::check_count(
                &a.b2b_max,
                flags::Counts {
                    min: 0,
                    max: 1_000_000_000,
                },
            ),
        )?,
        template,
        loss_tolerance_pct: a.loss_tolerance,
        repeat: a.repeat,
        ..Default::default()
    };
    // Every size must hold the test frames' headers and probe (IPv6 needs more than 64 B):
    // refused before any port is opened, not at the first trial.
    for &size in &opts.sizes {
        let g = linerate::apps::gen::GenOptions {
            streams: vec![linerate::apps::gen::StreamSpec {
                template: opts.template.clone(),
                size: linerate::apps::gen::vary::SizeSpec::Fixed(size),
                probe: true,
                ..Default::default()
            }],
            count: Some(1),
            ..Default::default()
        };
        if let Err(e) = linerate::apps::gen::validate(&g) {
            return Err(usage(format!(
                "--sizes {size}: {e} (the test frames' headers and probe must fit)"
            )));
        }
    }
    Ok(opts)
}

/// --sizes: RFC 2544's frame sizes, each once.
fn sizes_of(a: &Args) -> anyhow::Result<Vec<u32>> {
    let sizes: Vec<u32> = list("--sizes", &a.sizes)?;
    if let Some(s) = sizes.iter().find(|&&s| !(64..=1518).contains(&s)) {
        return Err(usage(format!(
            "--sizes: {s} is outside 64..1518 (RFC 2544 sizes: {SIZES:?})"
        )));
    }
    // A size named twice is a slip (a second run of the same search would take as long again
    // and print the size twice): refused, as the rest of a bad list is.
    if let Some((i, s)) = sizes
        .iter()
        .enumerate()
        .find(|(i, s)| sizes[..*i].contains(s))
    {
        return Err(usage(format!(
            "--sizes: {s} is named twice (at {} and {}): give each size once, or --repeat N \
             to measure a size N times",
            sizes.iter().position(|x| x == s).unwrap_or(0) + 1,
            i + 1
        )));
    }
    Ok(sizes)
}

/// The test frames' headers: addresses of one family (the other address defaults to the
/// documentation range of the same one), ports.
fn template(a: &Args) -> anyhow::Result<TemplateSpec> {
    let mut template = TemplateSpec::default();
    if let Some(m) = &a.dst_mac {
        template.dst_mac = parse_mac(m).map_err(|e| usage(format!("--dst-mac: {e}")))?;
    }
    if let Some(m) = &a.src_mac {
        template.src_mac = parse_mac(m).map_err(|e| usage(format!("--src-mac: {e}")))?;
    }
    match (a.src_ip, a.dst_ip) {
        (Some(s), Some(d)) if s.is_ipv4() != d.is_ipv4() => {
            return Err(usage(format!(
                "--src-ip {s} and --dst-ip {d}: the test frames' addresses must be of one family"
            )))
        }
        (s, d) => {
            let v6 = s.is_some_and(|x| x.is_ipv6()) || d.is_some_and(|x| x.is_ipv6());
            if v6 {
                template.src_ip = "2001:db8::1".parse()?;
                template.dst_ip = "2001:db8::2".parse()?;
            }
            if let Some(s) = s {
                template.src_ip = s;
            }
            if let Some(d) = d {
                template.dst_ip = d;
            }
        }
    }
    if let Some(p) = a.sport {
        template.sport = p;
    }
    if let Some(p) = a.dport {
        template.dport = p;
    }
    Ok(template)
}

/// The line rate (--link-speed, else -o's interface speed) into `opts`; where it came from.
/// A line so slow that a trial at its full rate carries a handful of frames of the largest
/// size (`--link-speed 1bps`: none) measures nothing: refused, naming both flags.
fn line_rate(a: &Args, opts: &mut Rfc2544Options) -> anyhow::Result<&'static str> {
    let (line_bps, line_from) = match &a.link_speed {
        Some(s) => (
            flags::check_line_speed(s).map_err(|e| usage(format!("--link-speed: {e}")))?,
            "--link-speed",
        ),
        None => (iface_speed(&a.output)?, "interface"),
    };
    opts.line_bps = line_bps;
    if let Some(&big) = opts.sizes.iter().max() {
        let frames = rfc2544::line_pps(line_bps, big) * opts.trial.as_secs_f64();
        if frames < MIN_TRIAL_FRAMES {
            return Err(usage(format!(
                "{}: at {} bit/s a {:?} trial carries {frames:.2} frames of {big} B at \
                 line rate, fewer than {MIN_TRIAL_FRAMES}: check the line rate, or give a longer \
                 --trial",
                if line_from == "interface" {
                    format!("-o {} (its speed)", a.output)
                } else {
                    "--link-speed".to_string()
                },
                linerate::stats::group_f(line_bps, 0),
                opts.trial
            )));
        }
    }
    Ok(line_from)
}

/// The start line (or JSON record): the path, the line rate and the search.
fn announce(out: &mut dyn Write, a: &Args, opts: &Rfc2544Options, line_from: &str) {
    if a.json {
        let j = serde_json::json!({"type": "start", "output": a.output, "input": a.input,
            "link_speed_bps": opts.line_bps, "link_speed_from": line_from,
            "sizes": opts.sizes, "resolution_pct": opts.resolution_pct,
            "loss_tolerance_pct": opts.loss_tolerance_pct, "repeat": opts.repeat});
        let _ = writeln!(out, "{j}");
    } else if !a.quiet {
        let from = if line_from == "interface" {
            format!("the speed of {}", a.output)
        } else {
            "--link-speed".to_string()
        };
        let _ = writeln!(
            out,
            "RFC 2544 from {} to {}: line rate {} Mbit/s ({from}); search to {} % of the result{}{}",
            a.output,
            a.input,
            linerate::stats::group_f(opts.line_bps / 1e6, 0),
            opts.resolution_pct,
            if opts.loss_tolerance_pct > 0.0 {
                format!("; PDR at {} % loss", opts.loss_tolerance_pct)
            } else {
                String::new()
            },
            if opts.repeat > 1 {
                format!("; {} repetitions", opts.repeat)
            } else {
                String::new()
            }
        );
    }
}

/// One trial's line (or JSON record).
fn show_trial(out: &mut dyn Write, a: &Args, opts: &Rfc2544Options, t: &rfc2544::Trial) {
    if a.json {
        let j = serde_json::json!({"type": "trial", "test": t.kind, "size": t.size,
            "repeat": t.repeat, "rate_pct": t.rate_pct, "offered_pps": t.offered_pps,
            "achieved_pps": t.achieved_pps, "sent": t.sent, "received": t.received,
            "loss_pct": t.loss_pct(), "lat_p50_ns": t.measured_latency().map(|l| l.p50),
            "jitter_ns": t.measured_jitter(),
            "ipdv_max_ns": t.measured_jitter().map(|_| t.ipdv_max_ns),
            "generator_limited": t.generator_limited(), "passed": t.passed(),
            "interrupted": t.interrupted, "verdict": t.verdict()});
        let _ = writeln!(out, "{j}");
    } else if !a.quiet {
        let (rate, achieved) = if t.kind == "ceiling" {
            (
                "unpaced".to_string(),
                if t.achieved_pps > t.offered_pps * (1.0 + RATE_TOLERANCE) {
                    format!(
                        "achieved {}, above the line rate ({}): the port is not that line",
                        fmt_pps(t.achieved_pps),
                        fmt_pps(t.offered_pps)
                    )
                } else {
                    format!(
                        "achieved {} ({:.2} % of line rate)",
                        fmt_pps(t.achieved_pps),
                        100.0 * t.achieved_pps / t.offered_pps.max(1e-9)
                    )
                },
            )
        } else {
            (
                format!("{:>7.3} %", t.rate_pct),
                format!(
                    "achieved {} of {} offered",
                    fmt_pps(t.achieved_pps),
                    fmt_pps(t.offered_pps),
                ),
            )
        };
        let jitter = if t.kind == "ceiling" || t.received < 2 {
            String::new()
        } else {
            format!(", jitter {:.0} ns", t.jitter_ns)
        };
        let _ = writeln!(
            out,
            "{:>12} {:>5} B at {rate}: {achieved}; sent {} received {} ({:.3} % lost{jitter}){}",
            t.kind,
            t.size,
            t.sent,
            t.received,
            t.loss_pct(),
            match t.kind {
                "ceiling" if !t.interrupted => String::new(),
                "pdr" => format!(
                    ": {}",
                    if t.passed_within(opts.loss_tolerance_pct) {
                        "within the tolerance"
                    } else {
                        t.verdict()
                    }
                ),
                _ => format!(": {}", t.verdict()),
            }
        );
    }
    let _ = out.flush();
}

/// The summary record: each size's results and how the run ended.
fn summary_json(
    out: &mut dyn Write,
    results: &[rfc2544::SizeResult],
    opts: &Rfc2544Options,
    line_from: &str,
    end: &End,
) {
    let rows: Vec<serde_json::Value> = results.iter().map(|r| size_json(r, opts)).collect();
    let _ = writeln!(
        out,
        "{}",
        serde_json::json!({"type": "summary",
            "ended": if end.went_down.is_some() { "link-down" } else if end.interrupted { "interrupted" } else { "complete" },
            "link_down": end.went_down,
            "link_speed_bps": opts.line_bps, "link_speed_from": line_from,
            "resolution_pct": opts.resolution_pct,
            "loss_tolerance_pct": opts.loss_tolerance_pct, "repeat": opts.repeat,
            "frames_sent": end.sent, "frames_received": end.received,
            "nothing_received": end.nothing_back(),
            "results": rows})
    );
}

/// One size's results in the summary record.
fn size_json(r: &rfc2544::SizeResult, opts: &Rfc2544Options) -> serde_json::Value {
    let pct = |p: f64| 100.0 * p / r.line_pps;
    let (ndr, pdr, jit) = (r.ndr(), r.pdr(), r.jitter());
    let trials: Vec<serde_json::Value> = r
        .runs
        .iter()
        .enumerate()
        .map(|(i, run)| {
            serde_json::json!({
                "repeat": i,
                "ndr_pps": run.ndr.as_ref().map(|t| t.offered_pps),
                "pdr_pps": run.pdr.as_ref().map(|t| t.offered_pps),
                "pdr_loss_pct": run.pdr.as_ref().map(|t| t.loss_pct()),
                "jitter_ns": run.latency.as_ref().and_then(|t| t.measured_jitter()),
                "ipdv_max_ns": run.latency.as_ref().and_then(|t| t.measured_jitter().map(|_| t.ipdv_max_ns)),
                "latency_p50_ns": run.latency.as_ref().and_then(|t| t.measured_latency()).map(|l| l.p50),
                "latency_loss_pct": run.latency.as_ref().map(|t| t.loss_pct()),
            })
        })
        .collect();
    // Throughput is the offered rate of the highest trial that passed (its achieved rate is
    // within the tolerance of it, given apart), of the repetition with the median NDR.
    serde_json::json!({
        "size": r.size,
        "interrupted": r.interrupted,
        "line_pps": r.line_pps,
        "throughput_pct": r.throughput.as_ref().map(|t| t.rate_pct),
        "throughput_pps": r.throughput.as_ref().map(|t| t.offered_pps),
        "throughput_achieved_pps": r.throughput.as_ref().map(|t| t.achieved_pps),
        "ndr_pps": ndr.map(|s| s.median),
        "ndr_pct": ndr.map(|s| pct(s.median)),
        "ndr_min_pps": ndr.map(|s| s.min),
        "ndr_max_pps": ndr.map(|s| s.max),
        "ndr_spread_pct": ndr.map(|s| s.spread_pct()),
        "pdr_pps": pdr.map(|s| s.median),
        "pdr_pct": pdr.map(|s| pct(s.median)),
        "pdr_min_pps": pdr.map(|s| s.min),
        "pdr_max_pps": pdr.map(|s| s.max),
        "pdr_spread_pct": pdr.map(|s| s.spread_pct()),
        "jitter_ns": jit.map(|s| s.median),
        "trials": trials,
        "trials_disagree": r.disagree(opts.resolution_pct),
        "generator_ceiling_pps": r.ceiling_pps,
        "generator_ceiling_pct": r.ceiling_pct(),
        "generator_above_line": r.above_line(),
        "generator_limited": r.ceiling_pct() < 100.0 * (1.0 - RATE_TOLERANCE),
        "latency_p50_ns": r.latency.as_ref().and_then(|t| t.measured_latency()).map(|l| l.p50),
        "latency_p99_ns": r.latency.as_ref().and_then(|t| t.measured_latency()).map(|l| l.p99),
        "latency_loss_pct": r.latency_loss_pct(),
        "loss_pct": r.loss.iter().map(|t| (t.rate_pct, t.loss_pct())).collect::<Vec<_>>(),
        "back_to_back": r.back_to_back,
        "back_to_back_generator_limited": r.back_to_back_limited,
    })
}

/// The exit: 1 when the results are incomplete (a link down, a signal) or nothing came
/// back, said on standard error.
fn exit_code(out: &mut dyn Write, a: &Args, end: &End) -> anyhow::Result<ExitCode> {
    if let Some(why) = &end.went_down {
        eprintln!("linerate rfc2544: {why}: the results are incomplete");
        return Ok(ExitCode::from(1));
    }
    if end.interrupted {
        eprintln!("linerate rfc2544: interrupted before the end: the results are incomplete");
        return Ok(ExitCode::from(1));
    }
    if end.nothing_back() {
        let nothing_why = format!(
            "no test frame came back on -i {} in any trial ({} sent on -o {}): the path \
             between them is broken (wiring, addresses, a link down) or the device forwards nothing",
            a.input, end.sent, a.output
        );
        if !a.json {
            let _ = writeln!(out, "rfc2544: {nothing_why}");
        }
        eprintln!("linerate rfc2544: {nothing_why}");
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

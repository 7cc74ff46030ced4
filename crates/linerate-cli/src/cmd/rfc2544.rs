//! `linerate rfc2544`: throughput, latency, frame loss and back-to-back (RFC 2544) between an
//! output and an input port.

use crate::common::{flags, pin, stop_flag, usage};
use anyhow::Context;
use clap::Parser;
use linerate::apps::gen::rfc2544::{self, Rfc2544Options, SIZES};
use linerate::apps::gen::template::TemplateSpec;
use linerate::apps::gen::vary::parse_mac;
use linerate::apps::gen::{fmt_pps, RATE_TOLERANCE};
use linerate::port::PortOptions;
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
    /// Resolution of the throughput search, % of line rate.
    #[arg(long, value_name = "PCT", default_value_t = 1.0, value_parser = flags::real(0.01, 50.0, false))]
    resolution: f64,
    /// Line rate (frames + 20 B preamble and gap per frame).
    #[arg(long, value_name = "RATE", default_value = "10Gbps")]
    link_speed: String,
    /// Longest burst of the back-to-back test (0 to skip it).
    #[arg(long, value_name = "FRAMES", default_value = "65536")]
    b2b_max: String,
    /// Rates of the frame-loss test, % of line rate, comma-separated.
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
    fn f<T>(flag: &str, r: Result<T, String>) -> anyhow::Result<T> {
        r.map_err(|e| usage(format!("{flag}: {e}")))
    }
    let sizes: Vec<u32> = list("--sizes", &a.sizes)?;
    if let Some(s) = sizes.iter().find(|&&s| !(64..=1518).contains(&s)) {
        return Err(usage(format!(
            "--sizes: {s} is outside 64..1518 (RFC 2544 sizes: {SIZES:?})"
        )));
    }
    let line_bps = f("--link-speed", flags::check_line_speed(&a.link_speed))?;
    let loss_steps: Vec<f64> = a
        .loss_steps
        .split(',')
        .map(|v| f("--loss-steps", flags::check_real(v, 0.0, 100.0, true)))
        .collect::<anyhow::Result<_>>()?;
    let mut template = TemplateSpec::default();
    if let Some(m) = &a.dst_mac {
        template.dst_mac = parse_mac(m).map_err(|e| usage(format!("--dst-mac: {e}")))?;
    }
    let opts = Rfc2544Options {
        sizes,
        trial: f("--trial", flags::check_duration(&a.trial, flags::TRIAL))?,
        settle: f("--settle", flags::check_duration(&a.settle, flags::WAIT))?,
        resolution_pct: a.resolution,
        line_bps,
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
    };
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
    let results = rfc2544::run(tx.as_mut(), rx.as_mut(), &opts, &clock, &stop, |t| {
        if a.json {
            let j = serde_json::json!({"type": "trial", "test": t.kind, "size": t.size,
                "rate_pct": t.rate_pct, "offered_pps": t.offered_pps,
                "achieved_pps": t.achieved_pps, "sent": t.sent, "received": t.received,
                "loss_pct": t.loss_pct(), "lat_p50_ns": t.latency.p50,
                "generator_limited": t.generator_limited(), "passed": t.passed(),
                "verdict": t.verdict()});
            let _ = writeln!(out, "{j}");
        } else if !a.quiet {
            let (rate, achieved) = if t.kind == "ceiling" {
                (
                    "unpaced".to_string(),
                    format!(
                        "achieved {} ({:.2} % of line rate)",
                        fmt_pps(t.achieved_pps),
                        100.0 * t.achieved_pps / t.offered_pps.max(1e-9)
                    ),
                )
            } else {
                (
                    format!("{:>7.3} %", t.rate_pct),
                    format!(
                        "achieved {} of {} offered ({:.2} %)",
                        fmt_pps(t.achieved_pps),
                        fmt_pps(t.offered_pps),
                        100.0 * t.achieved_pps / t.offered_pps.max(1e-9)
                    ),
                )
            };
            let _ = writeln!(
                out,
                "{:>12} {:>5} B at {rate}: {achieved}; sent {} received {} ({:.3} % lost){}",
                t.kind,
                t.size,
                t.sent,
                t.received,
                t.loss_pct(),
                match t.kind {
                    "ceiling" => String::new(),
                    _ => format!(": {}", t.verdict()),
                }
            );
        }
        let _ = out.flush();
    })
    .context("rfc2544")?;
    if let Some(p) = &a.csv {
        crate::common::write_file("--csv", p, rfc2544::csv(&results).as_bytes(), &inputs)?;
    }
    if a.json {
        let rows: Vec<serde_json::Value> = results
            .iter()
            .map(|r| {
                // Throughput is the offered rate of the highest trial that passed (its
                // achieved rate is within the tolerance of it, given apart).
                serde_json::json!({
                    "size": r.size,
                    "line_pps": r.line_pps,
                    "throughput_pct": r.throughput.as_ref().map(|t| t.rate_pct),
                    "throughput_pps": r.throughput.as_ref().map(|t| t.offered_pps),
                    "throughput_achieved_pps": r.throughput.as_ref().map(|t| t.achieved_pps),
                    "generator_ceiling_pps": r.ceiling_pps,
                    "generator_ceiling_pct": r.ceiling_pct(),
                    "generator_limited": r.ceiling_pct() < 100.0 * (1.0 - RATE_TOLERANCE),
                    "latency_p50_ns": r.latency.as_ref().map(|t| t.latency.p50),
                    "latency_p99_ns": r.latency.as_ref().map(|t| t.latency.p99),
                    "loss_pct": r.loss.iter().map(|t| (t.rate_pct, t.loss_pct())).collect::<Vec<_>>(),
                    "back_to_back": r.back_to_back,
                    "back_to_back_generator_limited": r.back_to_back_limited,
                })
            })
            .collect();
        let _ = writeln!(
            out,
            "{}",
            serde_json::json!({"type": "summary", "results": rows})
        );
    } else {
        let _ = write!(out, "{}", rfc2544::table(&results));
    }
    Ok(ExitCode::SUCCESS)
}

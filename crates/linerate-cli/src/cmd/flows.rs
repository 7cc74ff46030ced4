//! `linerate flows`: Argus-style bidirectional flow records, with IPFIX export.

use crate::common::{stop_flag, usage};
use anyhow::Context;
use clap::Parser;
use linerate::apps::flow::ipfix::{IpfixOptions, UdpExporter};
use linerate::apps::flow::key::NotFlow;
use linerate::apps::flow::record::{EndReason, Field, FlowRecord, Format, RecordWriter};
use linerate::apps::flow::table::TableConfig;
use linerate::apps::flow::{self, Ended, FlowOptions, FlowReport, RecordSink};
use linerate::port::file::{self, RecordFile};
use linerate::port::PortOptions;
use linerate::stats::group;
use linerate::units;
use std::io::Write;
use std::net::ToSocketAddrs;
use std::process::ExitCode;
use std::time::Duration;

/// Flags of `linerate flows`.
#[derive(Parser, Debug)]
pub struct Args {
    /// Input port: pcap:FILE (or a path), afpacket:IFACE, mem:NAME.
    #[arg(short = 'i', long = "in", value_name = "PORT")]
    input: String,
    /// Worker threads, each with its own table and a symmetric-hash share of the flows.
    #[arg(long, value_name = "N", default_value = "1")]
    threads: usize,
    /// Report and remove a flow after this long without a packet.
    #[arg(long, value_name = "SECONDS", default_value = "60", value_parser = units::parse_duration)]
    idle_timeout: Duration,
    /// Status record of each flow that goes on, every this often (0: only at the end).
    #[arg(long, value_name = "SECONDS", default_value = "60", value_parser = units::parse_duration)]
    status_interval: Duration,
    /// How long a TCP flow closed by FIN or RST waits for stragglers before its record.
    #[arg(long, value_name = "SECONDS", default_value = "5", value_parser = units::parse_duration)]
    linger: Duration,
    /// Most flows held at once per thread (memory is allocated up front); units allowed: 1M.
    #[arg(long, value_name = "N", default_value = "256k", value_parser = units::parse_count)]
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
    /// Export each flow as two uniflow IPFIX records instead of one RFC 5103 biflow.
    #[arg(long)]
    ipfix_uniflow: bool,
    /// Largest IPFIX message in bytes.
    #[arg(long, value_name = "BYTES", default_value = "1400", value_parser = units::parse_size)]
    ipfix_mtu: u64,
    /// IPFIX observation domain id.
    #[arg(long, value_name = "ID", default_value = "1")]
    ipfix_domain: u32,
    /// Columns, comma separated (`all`, `default`, or names: stime,ltime,dur,flgs,proto,saddr,
    /// sport,dir,daddr,dport,spkts,dpkts,sbytes,dbytes,state,sflags,dflags,itype,icode,reason,vlan).
    #[arg(long, value_name = "LIST", default_value = "default")]
    fields: String,
    /// Print the final summary as one JSON line (on standard error).
    #[arg(long)]
    json: bool,
    /// Print no summary.
    #[arg(short = 'q', long)]
    quiet: bool,
}

struct Sinks {
    writer: Option<RecordWriter<Box<dyn Write + Send>>>,
    ipfix: Option<UdpExporter>,
    write_error: Option<std::io::Error>,
    /// Live input: records are flushed as they come, not when the buffer fills.
    flush_each: bool,
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
                if self.flush_each {
                    if let Err(e) = w.flush() {
                        self.write_error.get_or_insert(e);
                    }
                }
            }
        }
        if let Some(x) = &mut self.ipfix {
            x.records(recs);
        }
    }
}

/// Bytes of records buffered before they are written.
const OUT_BUF: usize = 64 << 10;

fn secs_ns(d: Duration) -> u64 {
    d.as_nanos().min(u64::MAX as u128) as u64
}

/// Runs `linerate flows`.
pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    let stop = stop_flag()?;
    if a.threads == 0 || a.threads > 64 {
        return Err(usage("--threads: between 1 and 64"));
    }
    if a.max_flows == 0 || a.max_flows > u32::MAX as u64 / 2 {
        return Err(usage("--max-flows: between 1 and 2G"));
    }
    if a.idle_timeout.is_zero() {
        return Err(usage("--idle-timeout: must be more than 0"));
    }
    let fields = Field::parse_list(&a.fields).map_err(|e| usage(format!("--fields: {e}")))?;
    let format = match a.format.as_deref() {
        None => a.write.as_deref().map_or(Format::Text, Format::from_path),
        Some("text") | Some("txt") => Format::Text,
        Some("csv") => Format::Csv,
        Some("jsonl") | Some("json") => Format::Jsonl,
        Some(f) => return Err(usage(format!("--format: '{f}' (use text, csv or jsonl)"))),
    };
    let popts = PortOptions {
        frames: 16_384,
        ..Default::default()
    };
    let mut input = super::count::open_port(&a.input, &popts)?;
    // Every record reaches the output whole (a stop by any signal leaves no cut line); the
    // input is never an output.
    let inputs = crate::common::inputs_of([a.input.as_str()]);
    let out: Option<Box<dyn Write + Send>> = match a.write.as_deref() {
        Some("-") => Some(Box::new(RecordFile::stdout(OUT_BUF))),
        Some(p) => Some(Box::new(RecordFile::new(
            file::create(p, &inputs).map_err(|e| usage(format!("-w: {e}")))?,
            OUT_BUF,
        ))),
        None if a.ipfix.is_none() => Some(Box::new(RecordFile::stdout(OUT_BUF))),
        None => None,
    };
    let ipfix = match &a.ipfix {
        None => None,
        Some(dest) => {
            let with_port = ipfix_dest(dest);
            let addr = with_port
                .to_socket_addrs()
                .map_err(|e| usage(format!("--ipfix {dest}: {e}")))?
                .next()
                .ok_or_else(|| usage(format!("--ipfix {dest}: no address")))?;
            let opts = IpfixOptions {
                domain: a.ipfix_domain,
                max_message: a.ipfix_mtu as usize,
                uniflow: a.ipfix_uniflow,
                ..Default::default()
            };
            Some(UdpExporter::new(addr, opts).with_context(|| format!("--ipfix {dest}"))?)
        }
    };
    let live = a.input.starts_with("afpacket:") || a.input.starts_with("xdp:");
    let opts = FlowOptions {
        table: TableConfig {
            max_flows: a.max_flows as u32,
            idle_ns: secs_ns(a.idle_timeout),
            linger_ns: secs_ns(a.linger),
            status_ns: secs_ns(a.status_interval),
        },
        threads: a.threads,
        wall_clock: live,
        ring_size: 2048,
    };
    let mut sinks = Sinks {
        writer: out.map(|o| RecordWriter::new(o, format, fields)),
        ipfix,
        write_error: None,
        flush_each: live,
    };
    if !a.quiet {
        let link = input.link_type().0;
        if a.json {
            eprintln!(
                "{}",
                serde_json::json!({"type": "start", "input": a.input, "link_type": link,
                    "threads": a.threads, "max_flows": a.max_flows})
            );
        } else {
            eprintln!(
                "Flows from {} (link type {link}), {} thread(s)",
                a.input, a.threads
            );
        }
    }
    let report = flow::run(input.as_mut(), &opts, &stop, &mut sinks);
    if let Some(w) = &mut sinks.writer {
        if let Err(e) = w.flush() {
            sinks.write_error.get_or_insert(e);
        }
    }
    let export = sinks.ipfix.as_mut().map(|x| {
        x.finish();
        x.stats()
    });
    if !a.quiet {
        let mut err = std::io::stderr();
        let s = if a.json {
            json_summary(&report, export)
        } else {
            text_summary(&report, export)
        };
        let _ = err.write_all(s.as_bytes());
    }
    if let Some(e) = sinks.write_error {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            return Err(anyhow::Error::new(e).context("writing records"));
        }
    }
    match report.error {
        None => Ok(ExitCode::SUCCESS),
        Some(e) => Err(anyhow::Error::new(e).context(format!(
            "{}: stopped after {} packets",
            a.input,
            group(report.packets)
        ))),
    }
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
        Ended::EndOfInput => "end of input",
        Ended::Stopped => "interrupted",
        Ended::Error => "input error",
    }
}

fn text_summary(r: &FlowReport, x: Option<linerate::apps::flow::ipfix::ExportStats>) -> String {
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
    if let Some(x) = x {
        s.push_str(&format!(
            "IPFIX: {} flows in {} messages ({} bytes), {} send errors\n",
            group(x.flows),
            group(x.messages),
            group(x.bytes),
            group(x.errors)
        ));
    }
    s
}

fn json_summary(r: &FlowReport, x: Option<linerate::apps::flow::ipfix::ExportStats>) -> String {
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
        "flow_packets": t.packets,
        "evicted": t.evicted,
        "max_active": t.max_active,
        "bytes_per_flow": r.bytes_per_flow,
        "table_bytes": r.table_bytes,
        "threads": r.threads,
        "input_drops": drops,
        "ended": ended_name(r.ended),
    });
    if let Some(x) = x {
        j["ipfix"] = serde_json::json!({
            "flows": x.flows, "messages": x.messages, "bytes": x.bytes, "errors": x.errors
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

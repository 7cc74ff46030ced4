//! `linerate`: the command. Subcommands parse flags, build ports and workers, and print.
//! No `unsafe` here: what needs the operating system is in the library (`linerate::os`).
#![deny(unsafe_code)]

mod cmd;
mod common;
mod console;
mod shared;
#[cfg(test)]
mod vocabulary_tests;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "linerate",
    // `linerate 0.1.0 (2ba9a4c 2026-11-27)`: the commit (`-dirty`, or `unknown commit` outside
    // a git checkout) and the build date, from build.rs.
    version = env!("LINERATE_VERSION"),
    about = "Line-rate packet capture, distribution, generation and measurement on stock Linux",
    propagate_version = true
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run PF_RING ZC's cluster tests (libzero examples) on this machine and say whether it keeps
    /// up with their 14.88 Mpps, and what limits it; no NIC or root needed.
    Demo(cmd::demo::Args),
    /// Receive and count packets, with pfcount's statistics; optionally filter and record them.
    Count(cmd::count::Args),
    /// Distribute packets to consumer processes or threads (zbalance_ipc / pfdnacluster).
    Balance(cmd::balance::Args),
    /// Generate packets (MoonGen / pktgen-dpdk): templates, rates, latency probes, Lua, replay.
    Gen(Box<cmd::gen::Args>),
    /// RFC 2544 benchmark between two ports: throughput, latency, frame loss, back-to-back.
    Rfc2544(cmd::rfc2544::Args),
    /// Forward packets between two ports (l2fwd, pfdnabounce), with l2fwd's statistics.
    Fwd(cmd::fwd::Args),
    /// Run the DPDK l2fwd + pktgen lab (or a bounce) on network namespaces of this machine (root).
    Lab(cmd::lab::Args),
    /// Argus-style bidirectional flow records (text, CSV, JSON lines) with IPFIX export.
    Flows(cmd::flows::Args),
    /// The packets of a directory of captures (linerate record's) that a filter matches, between
    /// two times, in time order, through the files' indexes: `tcpdump -r` over every file, fast;
    /// `--serve ADDR` answers over HTTP (stenoread's way).
    Query(cmd::query::Args),
    /// Per-hop rates, sizes and drops along a path of interfaces, and where packets vanish
    /// (sar -n DEV, ip -s link, tc -s qdisc, ethtool -S, softnet_stat in one table).
    Watch(cmd::watch::Args),
    /// netperf UDP_STREAM's table by message size through the kernel's UDP stack, and with
    /// --watch, per size, the hop where the lost messages vanished.
    Sweep(cmd::sweep::Args),
    /// Run a libpcap program (tcpdump, tshark, argus) with liblinerate_pcap.so preloaded, so
    /// that it captures from linerate's ports: `linerate exec -- tcpdump -i cluster:10@0`.
    Exec(cmd::exec::Args),
    /// Wireshark extcap: tshark/Wireshark list and capture linerate's queues (cluster:ID@Q,
    /// xdp:IFACE@Q, afpacket:IFACE); `extcap install` puts it in Wireshark's extcap folder.
    Extcap(cmd::extcap::Args),
    /// Record inputs to a rolling window of indexed capture files in a directory (Stenographer,
    /// n2disk): a writer per queue, --file-size and -G rotation, --budget and --keep-free.
    Record(cmd::record::Args),
    /// Print the shell completion script for bash, zsh or fish (`source <(linerate completions
    /// bash)`); scripts/install.sh installs them.
    Completions(cmd::completions::Args),
    /// Print the manual page of linerate or of one subcommand as roff (`linerate man count |
    /// man -l -`); `--dir D` writes every page (linerate.1, linerate-count.1, ...).
    Man(cmd::man::Args),
}

fn main() -> ExitCode {
    // The stop signals first, before anything that takes time (parsing, opening inputs): a
    // signal that comes while the tool starts stops it with its summary, as one that comes
    // later does, instead of the signal's default action ending it with nothing said.
    if std::env::args()
        .nth(1)
        .is_some_and(|s| common::RUN_UNTIL_STOPPED.contains(&s.as_str()))
    {
        if let Err(e) = common::install_stop() {
            return common::report_error(&e);
        }
    }
    // A negative value (`--rate -5`) is taken as the flag's value, so that its own check names
    // the flag and the range, instead of clap's "unexpected argument '-5'".
    let command = Cli::command().mut_subcommands(|c| c.allow_negative_numbers(true));
    let cli = match command
        .try_get_matches()
        .and_then(|m| Cli::from_arg_matches(&m))
    {
        Ok(c) => c,
        Err(e) => {
            // The subcommand the user ran, if its name is one, so that the error points at
            // its own help (`linerate count --help`), where its flags are.
            let sub = std::env::args().nth(1).filter(|s| {
                Cli::command()
                    .get_subcommands()
                    .any(|c| c.get_name() == s.as_str())
            });
            return common::clap_error(e, sub.as_deref());
        }
    };
    let r = match cli.cmd {
        Cmd::Count(a) => cmd::count::run(a),
        Cmd::Fwd(a) => cmd::fwd::run(a),
        Cmd::Lab(a) => cmd::lab::run(a),
        Cmd::Flows(a) => cmd::flows::run(a),
        Cmd::Balance(a) => cmd::balance::run(a),
        Cmd::Demo(a) => cmd::demo::run(a),
        Cmd::Gen(a) => cmd::gen::run(*a),
        Cmd::Rfc2544(a) => cmd::rfc2544::run(a),
        Cmd::Watch(a) => cmd::watch::run(a),
        Cmd::Query(a) => cmd::query::run(a),
        Cmd::Sweep(a) => cmd::sweep::run(a),
        Cmd::Exec(a) => cmd::exec::run(a),
        Cmd::Extcap(a) => cmd::extcap::run(a),
        Cmd::Completions(a) => cmd::completions::run(a),
        Cmd::Man(a) => cmd::man::run(a),
        Cmd::Record(a) => cmd::record::run(a),
    };
    let code = match r {
        Ok(code) => code,
        Err(e) => common::report_error(&e),
    };
    // After the summary: --metrics-textfile, then --metrics-linger keeps the endpoint up
    // (not after a usage error: nothing ran).
    match common::metrics::finish(code != ExitCode::from(2)) {
        Ok(()) => code,
        Err(e) => {
            let c = common::report_error(&e);
            if code == ExitCode::SUCCESS {
                c
            } else {
                code
            }
        }
    }
}

//! `count -D` (tcpdump -D): what can be captured here, numbered as tcpdump lists it: every
//! interface as `afpacket:IF` with its AF_XDP queues (`xdp:IF@0-N`), `afpacket:any`, and the
//! queues of the clusters running on this machine (`cluster:ID@Q`).

use linerate::port::sources;
use std::io::Write;
use std::process::ExitCode;

/// Prints the list; exit code 0.
pub fn list() -> anyhow::Result<ExitCode> {
    let mut out = std::io::stdout().lock();
    let mut n = 0;
    for i in sources::interfaces() {
        n += 1;
        let xdp = match i.xdp_queues {
            0 => String::new(),
            1 => format!(" xdp:{}@0", i.name),
            q => format!(" xdp:{}@0-{}", i.name, q - 1),
        };
        writeln!(out, "{n}.afpacket:{} [{}]{xdp}", i.name, i.words())?;
    }
    n += 1;
    writeln!(
        out,
        "{n}.afpacket:any (every interface, as Linux cooked v2 frames)"
    )?;
    for c in sources::cluster_queues() {
        n += 1;
        writeln!(
            out,
            "{n}.{} (application {}, master pid {})",
            c.uri(),
            c.app,
            c.master_pid
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

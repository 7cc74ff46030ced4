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

/// One place to capture from, as Wireshark's extcap lists it: the port URI and its name for
/// people.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    /// The port (`cluster:ID@Q`, `xdp:IF@Q`, `afpacket:IF`).
    pub uri: String,
    /// `linerate cluster 10 queue 0 (application 0)`, `linerate xdp eth0 queue 1`, ...
    pub display: String,
}

/// Every place to capture from, one queue at a time: the queues of running clusters first
/// (what linerate adds to a machine), then each interface's AF_XDP queues and the interface
/// itself, then `afpacket:any`. The same discovery as `count -D`.
pub fn sources() -> Vec<Source> {
    let mut v: Vec<Source> = sources::cluster_queues()
        .into_iter()
        .map(|c| Source {
            uri: c.uri(),
            display: format!(
                "linerate cluster {} queue {} (application {}, master pid {})",
                c.id, c.queue, c.app, c.master_pid
            ),
        })
        .collect();
    for i in sources::interfaces() {
        for q in 0..i.xdp_queues {
            v.push(Source {
                uri: format!("xdp:{}@{q}", i.name),
                display: format!("linerate xdp {} queue {q}", i.name),
            });
        }
        v.push(Source {
            uri: format!("afpacket:{}", i.name),
            display: format!("linerate afpacket {}", i.name),
        });
    }
    v.push(Source {
        uri: "afpacket:any".into(),
        display: "linerate afpacket any (every interface, Linux cooked v2)".into(),
    });
    v
}

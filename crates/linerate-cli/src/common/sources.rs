//! `count -D` (tcpdump -D): what can be captured here, numbered as tcpdump lists it: every
//! interface as `afpacket:IF` with its AF_XDP queues (`xdp:IF@0-N`), `afpacket:any`, and the
//! queues of the clusters running on this machine (`cluster:ID@Q`).

use std::io::Write;
use std::process::ExitCode;

/// Interface flags from `/sys/class/net/IF/flags`, in tcpdump's words.
fn words(name: &str) -> String {
    let flags = std::fs::read_to_string(format!("/sys/class/net/{name}/flags"))
        .ok()
        .and_then(|s| u32::from_str_radix(s.trim().trim_start_matches("0x"), 16).ok())
        .unwrap_or(0);
    let mut w = Vec::new();
    if flags & libc::IFF_UP as u32 != 0 {
        w.push("Up");
    }
    // IFF_RUNNING is not in the sysfs flags: the carrier is.
    let carrier = std::fs::read_to_string(format!("/sys/class/net/{name}/carrier"));
    if flags & libc::IFF_UP as u32 != 0 && carrier.is_ok_and(|c| c.trim() == "1") {
        w.push("Running");
    }
    if flags & libc::IFF_LOOPBACK as u32 != 0 {
        w.push("Loopback");
    }
    w.join(", ")
}

/// The interfaces of this network namespace, by index.
fn interfaces() -> Vec<(u32, String)> {
    let mut v: Vec<(u32, String)> = std::fs::read_dir("/sys/class/net")
        .map(|d| {
            d.filter_map(Result::ok)
                .filter_map(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    let idx = std::fs::read_to_string(e.path().join("ifindex"))
                        .ok()?
                        .trim()
                        .parse()
                        .ok()?;
                    Some((idx, name))
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Ids of the clusters whose segment files are in the shared-memory directory.
fn cluster_ids() -> Vec<u32> {
    let path = linerate::cluster::segment_path(0);
    let Some(dir) = path.parent() else {
        return Vec::new();
    };
    let mut ids: Vec<u32> = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(Result::ok)
                .filter_map(|e| {
                    e.file_name()
                        .to_str()?
                        .strip_prefix("linerate-cluster-")?
                        .parse()
                        .ok()
                })
                .collect()
        })
        .unwrap_or_default();
    ids.sort_unstable();
    ids
}

/// Prints the list; exit code 0.
pub fn list() -> anyhow::Result<ExitCode> {
    let mut out = std::io::stdout().lock();
    let mut n = 0;
    for (_, name) in interfaces() {
        n += 1;
        let xdp = match linerate::port::xdp::queue_count_of(&name, linerate::port::xdp::Queues::All)
        {
            Ok(0) | Err(_) => String::new(),
            Ok(1) => format!(" xdp:{name}@0"),
            Ok(q) => format!(" xdp:{name}@0-{}", q - 1),
        };
        writeln!(out, "{n}.afpacket:{name} [{}]{xdp}", words(&name))?;
    }
    n += 1;
    writeln!(
        out,
        "{n}.afpacket:any (every interface, as Linux cooked v2 frames)"
    )?;
    for id in cluster_ids() {
        // Only clusters whose master runs (a segment left by a dead master is not listed).
        let Ok(seg) = linerate::cluster::Segment::open(id) else {
            continue;
        };
        for q in 0..seg.queues() {
            n += 1;
            writeln!(
                out,
                "{n}.cluster:{id}@{q} (application {}, master pid {})",
                seg.app_of(q),
                seg.master_pid()
            )?;
        }
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
    let mut v = Vec::new();
    for id in cluster_ids() {
        let Ok(seg) = linerate::cluster::Segment::open(id) else {
            continue;
        };
        for q in 0..seg.queues() {
            v.push(Source {
                uri: format!("cluster:{id}@{q}"),
                display: format!(
                    "linerate cluster {id} queue {q} (application {}, master pid {})",
                    seg.app_of(q),
                    seg.master_pid()
                ),
            });
        }
    }
    for (_, name) in interfaces() {
        let queues = linerate::port::xdp::queue_count_of(&name, linerate::port::xdp::Queues::All)
            .unwrap_or(0);
        for q in 0..queues {
            v.push(Source {
                uri: format!("xdp:{name}@{q}"),
                display: format!("linerate xdp {name} queue {q}"),
            });
        }
        v.push(Source {
            uri: format!("afpacket:{name}"),
            display: format!("linerate afpacket {name}"),
        });
    }
    v.push(Source {
        uri: "afpacket:any".into(),
        display: "linerate afpacket any (every interface, Linux cooked v2)".into(),
    });
    v
}

//! `linerate lab`'s set-up: the DPDK l2fwd lab (pktgen on one VM, l2fwd on another) or
//! pfdnabounce on network namespaces of this machine. [`Topology`] creates two namespaces
//! (`lr-lab-PID-gen`, `lr-lab-PID-fwd`) joined by veth pairs (g0–f0, g1–f1) with iproute2
//! and deletes them on drop; [`remove_stale`] deletes those of a lab whose process is gone.
//! The lab's generator is gen's worker ([`generate`]: 64-byte UDP frames with the probe
//! signature, stamped from the wall clock) and its receiver gen's probe tracker ([`receive`]),
//! so that the report has one-way latency through the forwarder. [`run_fwd`] and
//! [`run_cluster`] run a whole lab (its threads in the namespaces, the cluster master's child
//! process) and return a plain report ([`FwdLabReport`], [`ClusterLabReport`]) that the CLI
//! prints.

use crate::apps::gen::latency::{receive_probes, ReceiveOptions, Tracker};
use crate::apps::gen::{self, template::TemplateSpec, GenError, GenOptions, StreamSpec};
use crate::port::{Port, PortError};
use crate::time::WallClock;
use std::process::Command;

mod run;
pub use run::{
    cluster_id, run_cluster, run_fwd, ClusterLabReport, Forwarding, FwdLabReport, LabOptions,
    LatencyUs, PortKind, QueueCount,
};
use std::sync::atomic::AtomicBool;
use std::time::Duration;

/// The generator's first interface (g0).
pub const GEN_MAC: [u8; 6] = [0x02, 0x6c, 0x61, 0x62, 0x00, 0x00];
/// The forwarder's first interface (f0), where the generator sends.
pub const FWD_MAC: [u8; 6] = [0x02, 0x6c, 0x61, 0x62, 0x01, 0x00];

/// What did not work while building or removing the lab.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// iproute2's `ip` could not be run.
    #[error("cannot run `ip` (iproute2): {0}")]
    NoIp(std::io::Error),
    /// An `ip` command failed.
    #[error("`ip {args}` failed: {why}")]
    Ip {
        /// Its arguments.
        args: String,
        /// What it said.
        why: String,
    },
    /// A lab port did not open; `flag` is the role it plays (`-i` read, `-o` written).
    #[error("{flag} {uri}: {source}")]
    Port {
        /// `-i` or `-o`.
        flag: &'static str,
        /// The port's URI.
        uri: String,
        /// Why.
        source: PortError,
    },
    /// A port failed after it opened (or an interface's address could not be read).
    #[error(transparent)]
    PortFailed(PortError),
    /// The forwarder's port failed while it ran.
    #[error("forwarder")]
    Forwarder(#[source] PortError),
    /// The generator failed.
    #[error(transparent)]
    Gen(#[from] GenError),
    /// A namespace could not be entered, or the cluster master could not be waited for.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// One of the lab's threads panicked.
    #[error("{0} panicked")]
    Panicked(&'static str),
    /// The cluster master could not be started.
    #[error("cannot start the cluster master: {0}")]
    MasterStart(std::io::Error),
    /// The cluster master ended before the generator started.
    #[error("the cluster master exited ({status}): {stderr}")]
    MasterExited {
        /// Its exit status.
        status: String,
        /// What it wrote to its standard error.
        stderr: String,
    },
    /// The cluster master printed no summary line; what it wrote to its standard error.
    #[error("the cluster master gave no summary: {0}")]
    MasterNoSummary(String),
}

/// Runs `ip ARGS`.
fn ip(args: &[&str]) -> Result<(), LabError> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(LabError::NoIp)?;
    if !out.status.success() {
        return Err(LabError::Ip {
            args: args.join(" "),
            why: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(())
}

fn sysctl_in(ns: &str, kv: &str) {
    let _ = Command::new("ip")
        .args(["netns", "exec", ns, "sysctl", "-qw", kv])
        .output();
}

/// Where `ip netns` keeps the namespaces' names.
const NETNS_DIR: &str = "/var/run/netns";

/// Deletes the namespaces of earlier labs whose process is gone (a lab killed by SIGKILL
/// could not clean up); returns their names.
pub fn remove_stale() -> Vec<String> {
    let mut removed = Vec::new();
    let Ok(dir) = std::fs::read_dir(NETNS_DIR) else {
        return removed;
    };
    for e in dir.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix("lr-lab-") else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if !std::path::Path::new(&format!("/proc/{pid}")).exists()
            && ip(&["netns", "del", &name]).is_ok()
        {
            removed.push(name);
        }
    }
    removed
}

/// The namespaces (and with them their veths) of this process's lab; deleted on drop.
pub struct Topology {
    ns: Vec<String>,
}

impl Topology {
    /// The generator's and the forwarder's namespace names of this process's lab.
    pub fn names() -> (String, String) {
        let pid = std::process::id();
        (format!("lr-lab-{pid}-gen"), format!("lr-lab-{pid}-fwd"))
    }

    /// Deletes this process's lab namespaces whoever holds them (a signal handler's last
    /// resort, when the lab's own thread cannot drop its [`Topology`]).
    pub fn remove_own() {
        let (g, f) = Self::names();
        let _ = ip(&["netns", "del", &g]);
        let _ = ip(&["netns", "del", &f]);
    }

    /// Creates the two namespaces and `pairs` veth pairs: g0 (and g1) in the generator's,
    /// f0 (and f1) in the forwarder's, with fixed MACs (g0 is [`GEN_MAC`], f0 [`FWD_MAC`]),
    /// IPv6 off (no stray neighbour discovery), every link up. What was created before a
    /// failure is removed again.
    pub fn create(pairs: usize) -> Result<Topology, LabError> {
        let (g, f) = Self::names();
        let mut t = Topology { ns: Vec::new() };
        for ns in [&g, &f] {
            ip(&["netns", "add", ns])?;
            t.ns.push(ns.clone());
        }
        for i in 0..pairs {
            let (gi, fi) = (format!("g{i}"), format!("f{i}"));
            let (gm, fm) = (
                format!("02:6c:61:62:00:{:02x}", i),
                format!("02:6c:61:62:01:{:02x}", i),
            );
            ip(&[
                "link", "add", &gi, "netns", &g, "address", &gm, "type", "veth", "peer", "name",
                &fi, "netns", &f, "address", &fm,
            ])?;
        }
        for ns in [&g, &f] {
            sysctl_in(ns, "net.ipv6.conf.all.disable_ipv6=1");
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
            for i in 0..pairs {
                let ifname = if ns == &g {
                    format!("g{i}")
                } else {
                    format!("f{i}")
                };
                ip(&["-n", ns, "link", "set", &ifname, "up"])?;
            }
        }
        Ok(t)
    }

    /// The generator's namespace.
    pub fn gen_ns(&self) -> &str {
        &self.ns[0]
    }

    /// The forwarder's namespace.
    pub fn fwd_ns(&self) -> &str {
        &self.ns[1]
    }

    /// Removes the namespaces; returns how many of them are still there (could not be
    /// removed).
    pub fn remove(mut self) -> usize {
        let names = std::mem::take(&mut self.ns);
        for ns in &names {
            let _ = ip(&["netns", "del", ns]);
        }
        std::fs::read_dir(NETNS_DIR)
            .map(|d| {
                d.flatten()
                    .filter(|e| names.iter().any(|n| e.file_name() == n.as_str()))
                    .count()
            })
            .unwrap_or(0)
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        for ns in &self.ns {
            let _ = ip(&["netns", "del", ns]);
        }
    }
}

/// The forwarder's core (`core`, else the last one) and the generator's (the next one, if
/// the machine has more than one).
pub fn cores(core: Option<usize>) -> (usize, Option<usize>) {
    let ncores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let fwd = core.unwrap_or(ncores.saturating_sub(1));
    let gen = (ncores > 1).then(|| (fwd.saturating_add(1)) % ncores);
    (fwd, gen)
}

/// Pins the calling thread to `core` if it is one this process may use (a core this
/// machine does not have is left alone: the lab runs anyway).
pub fn pin_quiet(core: Option<usize>) {
    if let Some(c) = core {
        let _ = crate::sys::affinity::pin_current_thread(c);
    }
}

/// Sends 64-byte UDP frames (60 + CRC) from `src` to `dst` with gen's worker on `port` until
/// `count`, `duration` or `stop`, at `rate` packets per second (None: as fast as it can);
/// each carries gen's probe signature (stream, sequence, send time from the wall clock).
/// Returns the packets handed to the port and the sending period they took.
pub fn generate(
    port: &mut dyn Port,
    dst: [u8; 6],
    src: [u8; 6],
    count: Option<u64>,
    duration: Duration,
    rate: Option<f64>,
    stop: &AtomicBool,
) -> Result<Sent, GenError> {
    let opts = GenOptions {
        streams: vec![StreamSpec {
            template: TemplateSpec {
                src_mac: src,
                dst_mac: dst,
                src_ip: std::net::IpAddr::from([198, 18, 0, 1]),
                dst_ip: std::net::IpAddr::from([198, 19, 0, 1]),
                ..Default::default()
            },
            pps: rate,
            probe: true,
            ..Default::default()
        }],
        count,
        duration: Some(duration),
        ..Default::default()
    };
    let rep = gen::run(port, &opts, &WallClock, stop, None, |_| {})?;
    if let Some(e) = rep.error {
        return Err(GenError::Hook(format!("generator: {e}")));
    }
    Ok(Sent {
        pkts: rep.pkts,
        secs: rep.elapsed(),
        pps: rep.pps(),
    })
}

/// What the lab's generator sent.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Sent {
    /// Packets handed to the port.
    pub pkts: u64,
    /// The sending period, seconds: from the first packet's departure (its scheduled one with
    /// a rate) until the port took the last, without the start-up (namespace, port, rings).
    pub secs: f64,
    /// Packets per second over that period, as `gen` counts it.
    pub pps: f64,
}

/// Receives on `port` until `stop`, then until 300 ms of quiet; gen's probe receiver reads the
/// signatures (latency from the send stamp to the kernel's receive timestamp where the port
/// has one, else the wall clock when the batch was read, as the generator stamps; loss,
/// duplicates, reordering). Returns how many of the generator's packets arrived, and the
/// tracker.
pub fn receive(port: &mut dyn Port, stop: &AtomicBool) -> Result<(u64, Tracker), PortError> {
    let opts = ReceiveOptions {
        quiet: Duration::from_millis(300),
        ..Default::default()
    };
    // `stop` only starts the quiet: nothing ends the receive before it.
    let never = AtomicBool::new(false);
    let got = receive_probes(port, &WallClock, &opts, stop, &never, |_, _| {})?;
    Ok((got.probes(), got.tracker))
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::port::PortOptions;

    #[test]
    fn the_generator_and_the_receiver_meet_on_a_mem_wire() {
        let opts = PortOptions::default();
        let mut rx = crate::open_rx("mem:lab-wire", &opts).unwrap();
        let mut tx = crate::open_tx("mem:lab-wire", &opts).unwrap();
        let stop = AtomicBool::new(false);
        let sent = generate(
            tx.as_mut(),
            FWD_MAC,
            GEN_MAC,
            Some(50),
            Duration::from_secs(5),
            None,
            &stop,
        )
        .unwrap();
        assert_eq!(sent.pkts, 50);
        assert!(sent.secs > 0.0 && sent.pps > 0.0, "{sent:?}");
        let done = AtomicBool::new(true);
        let (got, t) = receive(rx.as_mut(), &done).unwrap();
        assert_eq!(got, 50);
        let s = t.stream(0).expect("stream 0's probes");
        assert_eq!((s.rx, s.dups, s.reordered), (50, 0, 0));
    }

    #[test]
    fn cores_put_the_generator_beside_the_forwarder() {
        let n = std::thread::available_parallelism().map_or(1, |n| n.get());
        let (f, g) = cores(Some(0));
        assert_eq!(f, 0);
        assert_eq!(g, (n > 1).then_some(1 % n));
        let (f, _) = cores(None);
        assert_eq!(f, n - 1);
        // A huge core does not overflow.
        let _ = cores(Some(usize::MAX));
    }
}

//! Test harness: three network namespaces in a line, A –vA/vB0– B –vB1/vC– C, removed on drop.
//!
//! Call `netns::require_priv()` first. B is the middle box (a forwarder); A and C are the ends.

use crate::netns::ip;
use std::sync::atomic::{AtomicUsize, Ordering};

static SEQ: AtomicUsize = AtomicUsize::new(0);

/// A namespace of the line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Node {
    /// The left end (interface `vA`).
    A,
    /// The middle (interfaces `vB0` toward A and `vB1` toward C).
    B,
    /// The right end (interface `vC`).
    C,
}

/// Three namespaces and two veth pairs, links up, IPv6 off (no neighbour discovery noise).
pub struct NetnsLine {
    /// Namespace names of A, B, C.
    pub ns: [String; 3],
    /// MACs of vA, vB0, vB1, vC.
    pub mac_a: [u8; 6],
    /// MAC of vB0 (B's side toward A).
    pub mac_b0: [u8; 6],
    /// MAC of vB1 (B's side toward C).
    pub mac_b1: [u8; 6],
    /// MAC of vC.
    pub mac_c: [u8; 6],
}

/// `aa:bb:..` text of a MAC.
pub fn mac_str(m: &[u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

impl NetnsLine {
    /// Creates the line.
    pub fn new() -> Result<NetnsLine, String> {
        Self::with_queues(1)
    }

    /// As [`NetnsLine::new`], with `queues` receive and transmit queues on every veth end.
    pub fn with_queues(queues: u32) -> Result<NetnsLine, String> {
        let q = queues.max(1).to_string();
        let n = SEQ.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let k = (pid as u8) ^ (n as u8).wrapping_mul(17);
        let l = NetnsLine {
            ns: [
                format!("lr-{pid}-l{n}-a"),
                format!("lr-{pid}-l{n}-b"),
                format!("lr-{pid}-l{n}-c"),
            ],
            mac_a: [0x02, 0x4c, 0x4e, k, 0, 0x0a],
            mac_b0: [0x02, 0x4c, 0x4e, k, 0, 0xb0],
            mac_b1: [0x02, 0x4c, 0x4e, k, 0, 0xb1],
            mac_c: [0x02, 0x4c, 0x4e, k, 0, 0x0c],
        };
        for ns in &l.ns {
            ip(&["netns", "add", ns])?;
        }
        let [a, b, c] = &l.ns;
        let pairs = [
            ("vA", a, &l.mac_a, "vB0", b, &l.mac_b0),
            ("vB1", b, &l.mac_b1, "vC", c, &l.mac_c),
        ];
        for (i1, n1, m1, i2, n2, m2) in pairs {
            let (m1, m2) = (mac_str(m1), mac_str(m2));
            let mut args = vec!["link", "add", i1, "netns", n1, "address", &m1];
            if queues > 1 {
                args.extend_from_slice(&["numtxqueues", &q, "numrxqueues", &q]);
            }
            args.extend_from_slice(&["type", "veth", "peer", "name", i2, "netns", n2]);
            args.extend_from_slice(&["address", &m2]);
            if queues > 1 {
                args.extend_from_slice(&["numtxqueues", &q, "numrxqueues", &q]);
            }
            ip(&args)?;
        }
        for (ns, ifs) in [(a, &["vA"][..]), (b, &["vB0", "vB1"][..]), (c, &["vC"][..])] {
            let _ = std::process::Command::new("ip")
                .args([
                    "netns",
                    "exec",
                    ns,
                    "sysctl",
                    "-qw",
                    "net.ipv6.conf.all.disable_ipv6=1",
                ])
                .status();
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
            for i in ifs {
                ip(&["-n", ns, "link", "set", i, "up"])?;
            }
        }
        Ok(l)
    }

    /// Namespace name of a node.
    pub fn ns(&self, n: Node) -> &str {
        &self.ns[n as usize]
    }

    /// Runs `f` on a thread inside the namespace of `n` (see `NetnsPair::run_in`).
    pub fn run_in<T: Send>(&self, n: Node, f: impl FnOnce() -> T + Send) -> T {
        let ns = self.ns(n);
        std::thread::scope(|s| {
            s.spawn(move || {
                linerate::os::enter_netns(ns)
                    .unwrap_or_else(|e| panic!("cannot enter namespace {ns}: {e}"));
                f()
            })
            .join()
            .unwrap_or_else(|e| std::panic::resume_unwind(e))
        })
    }

    /// `ip -n NS ARGS`.
    pub fn ip_in(&self, n: Node, args: &[&str]) -> Result<String, String> {
        let mut all = vec!["-n", self.ns(n)];
        all.extend_from_slice(args);
        ip(&all)
    }
}

impl Drop for NetnsLine {
    fn drop(&mut self) {
        for ns in &self.ns {
            let _ = ip(&["netns", "del", ns]);
        }
    }
}

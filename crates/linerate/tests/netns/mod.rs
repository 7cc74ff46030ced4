//! Test harness: two network namespaces joined by a veth pair, removed on drop.
//!
//! Use from an integration test with `mod netns;`. Tests that need it call [`require_priv`]
//! first: without root (or when `ip netns` does not work) they print `SKIP: <reason>` and return,
//! unless `LINERATE_REQUIRE_PRIV=1`, which turns the skip into a failure.
#![allow(dead_code)]

use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

static SEQ: AtomicUsize = AtomicUsize::new(0);

/// A name unique to this process and call: `lr-<pid>-<n>` plus a suffix.
fn unique(suffix: &str) -> String {
    format!(
        "lr-{}-{}{suffix}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    )
}

/// Runs `ip ARGS`; returns its stdout or a message with its stderr.
pub fn ip(args: &[&str]) -> Result<String, String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run `ip`: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "`ip {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Whether privileged tests can run. Prints `SKIP: <reason>` and returns false if not, or panics
/// with the reason when `LINERATE_REQUIRE_PRIV=1`.
pub fn require_priv() -> bool {
    let reason = probe();
    match reason {
        None => true,
        Some(r) => {
            if std::env::var("LINERATE_REQUIRE_PRIV").as_deref() == Ok("1") {
                panic!("LINERATE_REQUIRE_PRIV=1 but privileged tests cannot run: {r}");
            }
            eprintln!("SKIP: {r}");
            false
        }
    }
}

fn probe() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root (network namespaces and AF_PACKET need root)".into());
    }
    let name = unique("-probe");
    if let Err(e) = ip(&["netns", "add", &name]) {
        return Some(e);
    }
    let _ = ip(&["netns", "del", &name]);
    None
}

/// Which end of a pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// Namespace `a`, interface `if_a`.
    A,
    /// Namespace `b`, interface `if_b`.
    B,
}

/// Two namespaces with a veth pair between them, links and loopbacks up, addressed from
/// 198.18.0.0/15. Everything is deleted on drop, also when a test panics.
pub struct NetnsPair {
    /// Name of namespace A.
    pub a: String,
    /// Name of namespace B.
    pub b: String,
    /// Interface in A.
    pub if_a: String,
    /// Interface in B.
    pub if_b: String,
    /// MAC address of `if_a`.
    pub mac_a: [u8; 6],
    /// MAC address of `if_b`.
    pub mac_b: [u8; 6],
    /// IPv4 address of `if_a`.
    pub ip_a: [u8; 4],
    /// IPv4 address of `if_b`.
    pub ip_b: [u8; 4],
}

fn mac_str(m: &[u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

impl NetnsPair {
    /// Creates the namespaces and the veth pair (interfaces `vA` and `vB`).
    pub fn new() -> Result<NetnsPair, String> {
        let n = SEQ.load(Ordering::Relaxed) as u8;
        let p = NetnsPair {
            a: unique("-a"),
            b: unique("-b"),
            if_a: "vA".into(),
            if_b: "vB".into(),
            mac_a: [0x02, 0x4c, 0x52, n, 0, 1],
            mac_b: [0x02, 0x4c, 0x52, n, 0, 2],
            ip_a: [198, 18, 0, 1],
            ip_b: [198, 18, 0, 2],
        };
        // From here on, Drop removes whatever was created.
        ip(&["netns", "add", &p.a])?;
        ip(&["netns", "add", &p.b])?;
        ip(&[
            "link",
            "add",
            &p.if_a,
            "netns",
            &p.a,
            "address",
            &mac_str(&p.mac_a),
            "type",
            "veth",
            "peer",
            "name",
            &p.if_b,
            "netns",
            &p.b,
            "address",
            &mac_str(&p.mac_b),
        ])?;
        for (ns, ifname, addr) in [(&p.a, &p.if_a, &p.ip_a), (&p.b, &p.if_b, &p.ip_b)] {
            let cidr = format!("{}.{}.{}.{}/24", addr[0], addr[1], addr[2], addr[3]);
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
            ip(&["-n", ns, "addr", "add", &cidr, "dev", ifname])?;
            ip(&["-n", ns, "link", "set", ifname, "up"])?;
        }
        Ok(p)
    }

    /// Namespace name of a side.
    pub fn ns(&self, side: Side) -> &str {
        match side {
            Side::A => &self.a,
            Side::B => &self.b,
        }
    }

    /// Runs `f` on a thread that entered the network namespace of `side` and returns its
    /// result (a panic in `f` is propagated). Sockets opened there stay in that namespace.
    pub fn run_in<T: Send>(&self, side: Side, f: impl FnOnce() -> T + Send) -> T {
        let path = format!("/var/run/netns/{}", self.ns(side));
        std::thread::scope(|s| {
            let h = s.spawn(move || {
                use std::os::fd::AsRawFd;
                let file = std::fs::File::open(&path)
                    .unwrap_or_else(|e| panic!("cannot open {path}: {e}"));
                // SAFETY: setns on a valid namespace descriptor; it changes only this thread,
                // which ends when `f` returns.
                let r = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
                if r != 0 {
                    panic!("setns({path}): {}", std::io::Error::last_os_error());
                }
                f()
            });
            h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))
        })
    }

    /// Runs `ip ARGS` inside the namespace of `side`.
    pub fn ip_in(&self, side: Side, args: &[&str]) -> Result<String, String> {
        let mut all = vec!["-n", self.ns(side)];
        all.extend_from_slice(args);
        ip(&all)
    }
}

impl Drop for NetnsPair {
    fn drop(&mut self) {
        // Deleting a namespace destroys the veth end in it, and with it the peer.
        let _ = ip(&["netns", "del", &self.a]);
        let _ = ip(&["netns", "del", &self.b]);
    }
}

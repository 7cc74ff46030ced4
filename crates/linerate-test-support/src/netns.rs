//! Test harness: two network namespaces joined by a veth pair, removed on drop.
//!
//! Tests that need it call [`require_priv`] first: without root (or when `ip netns` does not
//! work) they skip through [`crate::skip`] and return, unless `LINERATE_REQUIRE_PRIV=1`, which
//! turns the skip into a failure.

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

/// Whether privileged tests can run. [`crate::skip`]s with the reason and returns false if not
/// (a failure when `LINERATE_REQUIRE_PRIV=1`).
pub fn require_priv() -> bool {
    let reason = probe();
    match reason {
        None => true,
        Some(r) => {
            crate::skip(&r);
            false
        }
    }
}

fn probe() -> Option<String> {
    if !linerate::os::is_root() {
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
        Self::with_queues(1)
    }

    /// As [`NetnsPair::new`], with `queues` receive and transmit queues on each end.
    pub fn with_queues(queues: u32) -> Result<NetnsPair, String> {
        let q = queues.max(1).to_string();
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
        let (mac_a, mac_b) = (mac_str(&p.mac_a), mac_str(&p.mac_b));
        let mut args = vec!["link", "add", &p.if_a, "netns", &p.a, "address", &mac_a];
        if queues > 1 {
            args.extend_from_slice(&["numtxqueues", &q, "numrxqueues", &q]);
        }
        args.extend_from_slice(&["type", "veth", "peer", "name", &p.if_b, "netns", &p.b]);
        args.extend_from_slice(&["address", &mac_b]);
        if queues > 1 {
            args.extend_from_slice(&["numtxqueues", &q, "numrxqueues", &q]);
        }
        ip(&args)?;
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
        let ns = self.ns(side);
        std::thread::scope(|s| {
            let h = s.spawn(move || {
                linerate::os::enter_netns(ns)
                    .unwrap_or_else(|e| panic!("cannot enter namespace {ns}: {e}"));
                f()
            });
            h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))
        })
    }

    /// Turns IPv6 off in both namespaces, so that the kernel sends nothing of its own on the
    /// link (router solicitations, duplicate address detection, MLD reports): a capture then
    /// holds only what the test sent.
    pub fn no_ipv6(&self) -> Result<(), String> {
        for ns in [&self.a, &self.b] {
            let out = Command::new("ip")
                .args(["netns", "exec", ns, "sysctl", "-qw"])
                .args([
                    "net.ipv6.conf.all.disable_ipv6=1",
                    "net.ipv6.conf.default.disable_ipv6=1",
                ])
                .output()
                .map_err(|e| format!("cannot run sysctl: {e}"))?;
            if !out.status.success() {
                return Err(format!(
                    "sysctl disable_ipv6 in {ns}: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
        }
        Ok(())
    }

    /// Runs `ip ARGS` inside the namespace of `side`.
    pub fn ip_in(&self, side: Side, args: &[&str]) -> Result<String, String> {
        let mut all = vec!["-n", self.ns(side)];
        all.extend_from_slice(args);
        ip(&all)
    }
}

/// `f` with tags (TPID, TCI), outermost first, inserted after the MAC addresses.
pub fn with_tags(f: &[u8], tags: &[(u16, u16)]) -> Vec<u8> {
    let mut t = f[..12].to_vec();
    for (tpid, tci) in tags {
        t.extend_from_slice(&tpid.to_be_bytes());
        t.extend_from_slice(&tci.to_be_bytes());
    }
    t.extend_from_slice(&f[12..]);
    t
}

/// Sends `frames` one by one on a plain packet socket bound to `ifname` (through the qdisc
/// layer, so that taps and tc egress programs see them), pausing now and then.
pub fn send_raw(ifname: &str, frames: &[Vec<u8>]) {
    let sock = linerate::os::PacketSocket::open(ifname)
        .unwrap_or_else(|e| panic!("packet socket on {ifname}: {e}"));
    for (i, f) in frames.iter().enumerate() {
        let n = sock
            .send(f)
            .unwrap_or_else(|e| panic!("send on {ifname}: {e}"));
        assert_eq!(n, f.len(), "send on {ifname}: short write");
        if i % 32 == 31 {
            std::thread::sleep(std::time::Duration::from_micros(300));
        }
    }
}

/// A tc egress program (attached through a bpf_link, tcx) that pushes VLAN tags the way a VLAN
/// device on a NIC with transmit VLAN offload does: the outermost tag in the packet's metadata
/// (`skb->vlan_tci`), not in its bytes. Detached when dropped.
pub struct EgressTags {
    _link: std::os::fd::OwnedFd,
}

impl NetnsPair {
    /// Makes every frame leaving `ifname` (in `side`) carry `tags` (TPID, TCI), outermost
    /// first: the program pushes them innermost first with `bpf_skb_vlan_push`, which leaves
    /// the outermost in the metadata and moves earlier ones into the frame. Needs kernel 6.6+
    /// (tcx).
    pub fn egress_tags(
        &self,
        side: Side,
        ifname: &str,
        tags: &[(u16, u16)],
    ) -> Result<EgressTags, String> {
        // Instructions: r6 = r1; per tag: r1 = r6, r2 = htons(tpid), r3 = tci, call
        // skb_vlan_push; then r0 = 0 (TC_ACT_OK / TCX_PASS); exit.
        let insn = |code: u8, regs: u8, imm: i32| -> [u8; 8] {
            let i = imm.to_le_bytes();
            [code, regs, 0, 0, i[0], i[1], i[2], i[3]]
        };
        let mut prog = vec![insn(0xbf, 0x16, 0)];
        for (tpid, tci) in tags.iter().rev() {
            prog.push(insn(0xbf, 0x61, 0));
            prog.push(insn(0xb7, 0x02, i32::from(tpid.swap_bytes())));
            prog.push(insn(0xb7, 0x03, i32::from(*tci)));
            prog.push(insn(0x85, 0x00, 18)); // BPF_FUNC_skb_vlan_push
        }
        prog.push(insn(0xb7, 0x00, 0));
        prog.push(insn(0x95, 0x00, 0));
        let code: Vec<u8> = prog.concat();
        let name = ifname.to_string();
        let link = self
            .run_in(side, move || linerate::os::attach_tc_egress(&name, &code))
            .map_err(|e| format!("tc egress program on {ifname}: {e}"))?;
        Ok(EgressTags { _link: link })
    }
}

/// Ethernet/IPv4/UDP frame number `seq` of flow `flow` (source port 10000 + flow), from `src`
/// to `dst`, with `seq` in the first payload bytes and a payload length varying with `seq`.
pub fn udp_frame(dst: [u8; 6], src: [u8; 6], flow: u16, seq: u32) -> Vec<u8> {
    let plen = 18 + (seq as usize * 7) % 300;
    let mut f = Vec::with_capacity(42 + plen);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&[0x08, 0x00]);
    let ip_len = (20 + 8 + plen) as u16;
    f.extend_from_slice(&[0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0]);
    f[16..18].copy_from_slice(&ip_len.to_be_bytes());
    f.extend_from_slice(&[198, 18, 0, 1, 198, 18, 0, 2]);
    let mut sum = 0u32;
    for k in (14..34).step_by(2) {
        sum += u16::from_be_bytes([f[k], f[k + 1]]) as u32;
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    f[24..26].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    f.extend_from_slice(&(10000 + flow).to_be_bytes());
    f.extend_from_slice(&9u16.to_be_bytes());
    f.extend_from_slice(&((8 + plen) as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(&seq.to_be_bytes());
    while f.len() < 42 + plen {
        f.push(seq as u8 ^ f.len() as u8);
    }
    f
}

/// The sequence number `udp_frame` put in `f` (None for other frames).
pub fn udp_seq(f: &[u8]) -> Option<u32> {
    if f.len() < 46 || f[12..14] != [0x08, 0x00] || f[23] != 17 || f[36..38] != [0, 9] {
        return None;
    }
    Some(u32::from_be_bytes([f[42], f[43], f[44], f[45]]))
}

/// Per-queue counters of XDP packets a veth received (`ethtool -S`: `rx_queue_N_xdp_packets`,
/// counted while an XDP program is attached), by queue, from `side`'s namespace.
pub fn xdp_queue_packets(p: &NetnsPair, side: Side, iface: &str) -> Vec<u64> {
    let out = Command::new("ip")
        .args(["netns", "exec", p.ns(side), "ethtool", "-S", iface])
        .output()
        .expect("run ethtool -S");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut v: Vec<(usize, u64)> = text
        .lines()
        .filter_map(|l| {
            let (k, n) = l.trim().split_once(':')?;
            let q = k.strip_prefix("rx_queue_")?.strip_suffix("_xdp_packets")?;
            Some((q.parse().ok()?, n.trim().parse().ok()?))
        })
        .collect();
    v.sort();
    v.into_iter().map(|(_, n)| n).collect()
}

impl Drop for NetnsPair {
    fn drop(&mut self) {
        // Deleting a namespace destroys the veth end in it, and with it the peer.
        let _ = ip(&["netns", "del", &self.a]);
        let _ = ip(&["netns", "del", &self.b]);
    }
}

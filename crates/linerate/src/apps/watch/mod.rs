//! `linerate watch`: where packets go along a path of interfaces, per interval and per hop
//! (what `sar -n DEV`, `ip -s link`, `tc -s qdisc`, `ethtool -S` and /proc/net/softnet_stat
//! show apart, side by side and in path order).
//!
//! A path is a list of hops, each an interface in a named network namespace (`B:vB0`) or in
//! this process's own (`eth0`). [`Watch::new`] opens one rtnetlink and one ethtool socket per
//! namespace (on a helper thread that enters it: no thread of the caller changes namespace),
//! and [`Watch::sample`] takes one [`Snapshot`] of every hop's counters. [`diff`] turns two
//! snapshots into an [`Interval`]: per hop rates, sizes and drop counters, and between
//! consecutive hops the packets that left one and did not arrive at the next (`lost_before`);
//! the hop after which most vanished is marked. The sampling knows nothing of printing;
//! [`report`] prints intervals as text tables, JSON lines and Prometheus text.
//!
//! Which counters are compared between hop k and hop k+1:
//! - the two ends of one veth pair, or two interfaces in different namespaces (a wire): what
//!   k transmitted against what k+1 received;
//! - two interfaces of one namespace (a forwarding box: in at k, out at k+1): what k received
//!   against what k+1 transmitted; packets the box delivered locally or made itself count too.
#![deny(unsafe_code)]

pub mod report;

use crate::port::linkstats::ethtool::Ethtool;
use crate::port::linkstats::netlink::{self, Link, Netlink, TC_H_INGRESS, TC_H_ROOT};
use crate::port::linkstats::{netns, procfs};
use crate::port::xdp::napi::{self, NapiCounters, NapiWatch};
use std::collections::HashMap;
use std::io;
use std::sync::Arc;

/// Errors of `watch`.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// The path is not a comma list of `IFACE` or `NETNS:IFACE`.
    #[error("bad path '{path}': {why}")]
    BadPath {
        /// The path given.
        path: String,
        /// What is wrong.
        why: String,
    },
    /// A hop names a namespace that does not exist.
    #[error("{hop}: no network namespace '{ns}' (/run/netns/{ns} does not exist; list them with `ip netns list`)")]
    NoNamespace {
        /// The hop.
        hop: String,
        /// The namespace.
        ns: String,
    },
    /// A hop names an interface that does not exist.
    #[error("{hop}: no interface '{iface}' in {place} (list them with `{list}`)")]
    NoInterface {
        /// The hop.
        hop: String,
        /// The interface.
        iface: String,
        /// "namespace B" or "this namespace".
        place: String,
        /// The command that lists the interfaces there.
        list: String,
    },
    /// A namespace could not be entered.
    #[error("{hop}: cannot enter network namespace '{ns}': {source}{hint}")]
    Netns {
        /// The hop.
        hop: String,
        /// The namespace.
        ns: String,
        /// The OS error.
        source: io::Error,
        /// What to do.
        hint: &'static str,
    },
    /// The kernel refused a query about a hop, or the hop went away.
    #[error("{hop}: {op}: {source}")]
    Os {
        /// The hop.
        hop: String,
        /// What was asked.
        op: &'static str,
        /// The OS error.
        source: io::Error,
    },
}

impl WatchError {
    /// Whether the user named something wrong (exit code 2), as opposed to a failure while
    /// running.
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            WatchError::BadPath { .. }
                | WatchError::NoNamespace { .. }
                | WatchError::NoInterface { .. }
        )
    }
}

/// A hop of a path: an interface, in a named network namespace or in this process's own.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Hop {
    /// The namespace (`ip netns` name), None for this process's own.
    pub netns: Option<String>,
    /// The interface.
    pub iface: String,
}

impl Hop {
    /// `NETNS:IFACE` or `IFACE`, as the user wrote it.
    pub fn label(&self) -> String {
        match &self.netns {
            Some(ns) => format!("{ns}:{}", self.iface),
            None => self.iface.clone(),
        }
    }
}

impl std::fmt::Display for Hop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.label())
    }
}

/// Most hops a path may have.
pub const MAX_HOPS: usize = 64;

/// Parses a path: hops in path order separated by commas, each `IFACE` or `NETNS:IFACE`.
pub fn parse_path(path: &str) -> Result<Vec<Hop>, WatchError> {
    let bad = |why: String| WatchError::BadPath {
        path: path.to_string(),
        why,
    };
    let mut hops: Vec<Hop> = Vec::new();
    for part in path.split(',') {
        let part = part.trim();
        if part.is_empty() {
            return Err(bad(
                "an empty hop; write hops as IFACE or NETNS:IFACE separated by commas \
                 (A:vA,B:vB0,B:vB1,C:vC)"
                    .into(),
            ));
        }
        let (ns, iface) = match part.split_once(':') {
            Some((ns, iface)) => (Some(ns), iface),
            None => (None, part),
        };
        if let Some(ns) = ns {
            if ns.is_empty() || ns == "." || ns == ".." || ns.contains('/') {
                return Err(bad(format!(
                    "'{part}': '{ns}' is not a namespace name (as `ip netns list` shows them)"
                )));
            }
        }
        if iface.is_empty()
            || iface.len() >= 16
            || iface.contains(['/', ':', ' '])
            || iface == "."
            || iface == ".."
        {
            return Err(bad(format!(
                "'{part}': '{iface}' is not an interface name (1 to 15 bytes, no '/', ':' or space)"
            )));
        }
        let hop = Hop {
            netns: ns.map(str::to_string),
            iface: iface.to_string(),
        };
        if hops.contains(&hop) {
            return Err(bad(format!("'{part}' is named twice")));
        }
        hops.push(hop);
    }
    if hops.len() > MAX_HOPS {
        return Err(bad(format!("{} hops; at most {MAX_HOPS}", hops.len())));
    }
    Ok(hops)
}

/// How the packets lost between hop k-1 and hop k are counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Segment {
    /// The two ends of one veth pair: transmitted by k-1 against received by k.
    Pair,
    /// Two interfaces in different namespaces that are not one veth pair (a wire, a tunnel):
    /// transmitted by k-1 against received by k.
    Link,
    /// Two interfaces of one namespace (a forwarding box): received by k-1 against
    /// transmitted by k.
    Through,
}

impl Segment {
    /// A few words for reports.
    pub fn describe(&self) -> &'static str {
        match self {
            Segment::Pair => "veth pair: sent by the first, not received by the second",
            Segment::Link => "link: sent by the first, not received by the second",
            Segment::Through => {
                "through the namespace: received by the first, not sent by the second"
            }
        }
    }
}

/// What is known of a hop once the watch started.
#[derive(Clone, Debug)]
pub struct HopInfo {
    /// The hop.
    pub hop: Hop,
    /// Its label (`B:vB0`).
    pub label: String,
    /// Interface index in its namespace.
    pub ifindex: u32,
    /// Driver (`ethtool -i`), empty when it has none.
    pub driver: String,
    /// Link kind (`veth`, `bridge`), if any.
    pub kind: Option<String>,
    /// Interrupts (numbers in /proc/interrupts) of the device, empty for devices without.
    pub irqs: Vec<u32>,
    /// Inode of its network namespace.
    pub netns_inode: u64,
}

/// The path and what was learnt about it: shared by every snapshot of one watch.
#[derive(Clone, Debug)]
pub struct Path {
    /// Hops in path order.
    pub hops: Vec<HopInfo>,
    /// `segments[k]`: how hop k's `lost_before` is counted (`segments[0]` is unused: the
    /// first hop has no previous one).
    pub segments: Vec<Segment>,
    /// Notes to print once at the start (assumptions made, counters not available).
    pub notes: Vec<String>,
    /// Why packets per poll are not counted (None: they are).
    pub napi_off: Option<String>,
}

/// NAPI polls of one device (or of the per-CPU backlog) at one instant.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NapiSnap {
    /// Polls since the watch began counting.
    pub polls: u64,
    /// Packets those polls processed.
    pub packets: u64,
    /// Polls that used their whole budget.
    pub full: u64,
    /// Polls by packets processed (buckets: [`napi::HIST_BOUNDS`]).
    pub hist: [u64; 8],
    /// Fewest and most packets of one poll since the previous snapshot.
    pub min_max: Option<(u64, u64)>,
    /// Fewest and most packets of one poll since the first snapshot.
    pub run_min_max: Option<(u64, u64)>,
}

/// The counters of one hop at one instant.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HopCounters {
    /// Packets received.
    pub rx_packets: u64,
    /// Packets transmitted.
    pub tx_packets: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Bytes transmitted.
    pub tx_bytes: u64,
    /// Every drop counter the kernel keeps for the hop, by name (link counters, queueing
    /// disciplines, the driver's own), in a stable order.
    pub drops: Vec<(String, u64)>,
    /// Packets waiting in the egress queueing discipline now.
    pub qdisc_backlog: u64,
    /// Interrupts of the device by CPU (empty: none).
    pub irqs: Vec<(u32, u64)>,
    /// NAPI polls of the device (None: not counted; see [`Path::napi_off`]).
    pub napi: Option<NapiSnap>,
}

/// One CPU's softnet counters (extended to 64 bits).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuSoftnet {
    /// CPU number.
    pub cpu: u32,
    /// Packets processed.
    pub processed: u64,
    /// Backlog drops.
    pub dropped: u64,
    /// Budget or time exhausted with work left.
    pub time_squeeze: u64,
}

/// Every hop's counters at one instant.
#[derive(Clone, Debug)]
pub struct Snapshot {
    /// The path (shared).
    pub path: Arc<Path>,
    /// Number of the snapshot (0 for the first of a watch).
    pub seq: u64,
    /// Monotonic time (ns).
    pub t_ns: u64,
    /// Wall-clock time (ns since the Unix epoch).
    pub wall_ns: u64,
    /// Per hop, in path order.
    pub hops: Vec<HopCounters>,
    /// Softnet counters of every CPU.
    pub softnet: Vec<CpuSoftnet>,
    /// Polls of the per-CPU backlogs (packets handed over by `netif_rx`, e.g. from a veth
    /// without NAPI), None when polls are not counted.
    pub backlog: Option<NapiSnap>,
}

/// A 32-bit kernel counter extended to 64 bits across wraps (sampled often enough).
#[derive(Clone, Copy, Debug, Default)]
struct Wide {
    last: u32,
    total: u64,
    seen: bool,
}

impl Wide {
    fn update(&mut self, raw: u32) -> u64 {
        if self.seen {
            self.total += u64::from(raw.wrapping_sub(self.last));
        } else {
            self.total = u64::from(raw);
            self.seen = true;
        }
        self.last = raw;
        self.total
    }
}

/// One namespace's sockets.
struct Ns {
    name: Option<String>,
    nl: Netlink,
    eth: Ethtool,
}

/// Per-hop sampling state.
struct HopState {
    ns: usize,
    /// Names of the driver's counters (`ethtool -S`) and which of them are kept (index,
    /// reported name), per-queue counters summed under one name.
    eth_names: Vec<String>,
    eth_keep: Vec<(usize, usize)>,
    eth_labels: Vec<String>,
    qdisc_drops: Wide,
    ingress_drops: Wide,
    irq_wide: Vec<Wide>,
}

/// A watch over a path: sockets in every namespace, ready to sample.
pub struct Watch {
    path: Arc<Path>,
    nss: Vec<Ns>,
    state: Vec<HopState>,
    softnet: Vec<(u32, Wide, Wide, Wide)>,
    seq: u64,
    napi: Option<NapiWatch>,
    /// Fewest and most packets of one poll since the first snapshot, per device.
    run_min_max: HashMap<(u32, u32), (u64, u64)>,
}

/// The link counters of a hop that are drops (names of `struct rtnl_link_stats64`).
pub const LINK_DROPS: [&str; 12] = [
    "rx_dropped",
    "rx_missed_errors",
    "rx_fifo_errors",
    "rx_over_errors",
    "rx_errors",
    "rx_nohandler",
    "rx_otherhost_dropped",
    "tx_dropped",
    "tx_errors",
    "tx_fifo_errors",
    "tx_aborted_errors",
    "tx_carrier_errors",
];

/// Drop counters of a hop's own egress that the next hop's `lost_before` cannot see (the
/// packets never left): they count toward the hop where packets vanish.
pub const EGRESS_DROPS: [&str; 3] = ["tx_dropped", "tx_errors", "qdisc_drops"];

/// Whether an `ethtool -S` counter name is a drop or error counter.
fn is_drop_name(n: &str) -> bool {
    let n = n.to_ascii_lowercase();
    [
        "drop", "discard", "miss", "fifo", "overrun", "err", "full", "fail", "lost", "nobuf",
        "no_buf", "squeeze",
    ]
    .iter()
    .any(|w| n.contains(w))
}

/// An `ethtool -S` name without its queue number: `rx_queue_3_xdp_drops` → `rx_xdp_drops`,
/// `rx3_xdp_drop` → `rx_xdp_drop`, so that per-queue counters are summed.
pub fn ethtool_base_name(n: &str) -> String {
    for dir in ["rx", "tx"] {
        if let Some(rest) = n.strip_prefix(dir) {
            let rest2 = rest.strip_prefix("_queue_").unwrap_or(rest);
            let digits = rest2.bytes().take_while(u8::is_ascii_digit).count();
            if digits > 0 {
                if let Some(tail) = rest2[digits..].strip_prefix('_') {
                    return format!("{dir}_{tail}");
                }
            }
        }
    }
    n.to_string()
}

fn os<'a>(hop: &'a str, op: &'static str) -> impl Fn(io::Error) -> WatchError + 'a {
    move |source| WatchError::Os {
        hop: hop.to_string(),
        op,
        source,
    }
}

impl Watch {
    /// Opens sockets in every namespace of `hops` and checks every interface exists; counts
    /// NAPI polls too when `polls` and the kernel lets it (else [`Path::napi_off`] says why).
    pub fn new(hops: Vec<Hop>, polls: bool) -> Result<Watch, WatchError> {
        if hops.is_empty() {
            return Err(WatchError::BadPath {
                path: String::new(),
                why: "no hops".into(),
            });
        }
        let mut nss: Vec<Ns> = Vec::new();
        let mut infos = Vec::with_capacity(hops.len());
        let mut state = Vec::with_capacity(hops.len());
        let mut links: Vec<Link> = Vec::with_capacity(hops.len());
        let mut notes = Vec::new();
        let irq_table = procfs::interrupts().unwrap_or_default();
        for hop in &hops {
            let label = hop.label();
            let ns = match nss.iter().position(|n| n.name == hop.netns) {
                Some(i) => i,
                None => {
                    nss.push(open_ns(hop, &label)?);
                    nss.len() - 1
                }
            };
            let n = &nss[ns];
            let link = netlink::get_link(&n.nl, 0, &hop.iface).map_err(|e| {
                if e.raw_os_error() == Some(libc::ENODEV) {
                    no_iface(hop, &label)
                } else {
                    os(&label, "rtnetlink RTM_GETLINK")(e)
                }
            })?;
            let drv = n.eth.drvinfo(&hop.iface).unwrap_or_default();
            let eth_names = n.eth.stat_names(&hop.iface).unwrap_or_default();
            let (eth_keep, eth_labels) = keep_ethtool(&eth_names);
            let irqs = device_irqs(&irq_table, &drv.bus_info, hop);
            let netns_inode = netns::inode(hop.netns.as_deref()).unwrap_or(0);
            infos.push(HopInfo {
                hop: hop.clone(),
                label,
                ifindex: link.ifindex,
                driver: drv.driver,
                kind: link.kind.clone(),
                irqs: irqs.clone(),
                netns_inode,
            });
            state.push(HopState {
                ns,
                eth_names,
                eth_keep,
                eth_labels,
                qdisc_drops: Wide::default(),
                ingress_drops: Wide::default(),
                irq_wide: Vec::new(),
            });
            links.push(link);
        }
        let mut segments = vec![Segment::Link; hops.len()];
        for k in 1..hops.len() {
            let (a, b) = (&links[k - 1], &links[k]);
            let (ha, hb) = (&infos[k - 1], &infos[k]);
            segments[k] = if a.link == Some(b.ifindex)
                && b.link == Some(a.ifindex)
                && a.kind.as_deref() == Some("veth")
                && b.kind.as_deref() == Some("veth")
            {
                Segment::Pair
            } else if ha.hop.netns == hb.hop.netns {
                Segment::Through
            } else {
                notes.push(format!(
                    "{} and {} are not the two ends of one veth: counted as a link (sent by {} \
                     against received by {})",
                    ha.label, hb.label, ha.label, hb.label
                ));
                Segment::Link
            };
        }
        let (napi, napi_off) = if polls {
            match NapiWatch::start() {
                Ok(n) => (Some(n), None),
                Err(why) => (None, Some(why)),
            }
        } else {
            (None, Some("not asked for (--no-polls)".to_string()))
        };
        let path = Arc::new(Path {
            hops: infos,
            segments,
            notes,
            napi_off,
        });
        Ok(Watch {
            path,
            nss,
            state,
            softnet: Vec::new(),
            seq: 0,
            napi,
            run_min_max: HashMap::new(),
        })
    }

    /// The path and what was learnt about it.
    pub fn path(&self) -> &Arc<Path> {
        &self.path
    }

    /// Takes one snapshot of every hop's counters (link counters first, all hops in a row,
    /// so that they are as close in time as the kernel allows).
    pub fn sample(&mut self) -> Result<Snapshot, WatchError> {
        let t_ns = crate::time::mono_ns();
        let wall_ns = crate::time::wall_ns();
        let mut links = Vec::with_capacity(self.state.len());
        for (info, st) in self.path.hops.iter().zip(&self.state) {
            let nl = &self.nss[st.ns].nl;
            let l = netlink::get_link(nl, info.ifindex, "").map_err(|e| {
                if e.raw_os_error() == Some(libc::ENODEV) {
                    WatchError::Os {
                        hop: info.label.clone(),
                        op: "the interface is gone",
                        source: e,
                    }
                } else {
                    os(&info.label, "rtnetlink RTM_GETLINK")(e)
                }
            })?;
            if l.name != info.hop.iface {
                return Err(WatchError::Os {
                    hop: info.label.clone(),
                    op: "the interface is gone",
                    source: io::Error::new(
                        io::ErrorKind::NotFound,
                        format!("index {} is now '{}'", info.ifindex, l.name),
                    ),
                });
            }
            links.push(l);
        }
        let need_irqs = self.path.hops.iter().any(|h| !h.irqs.is_empty());
        let irq_table = if need_irqs {
            procfs::interrupts().unwrap_or_default()
        } else {
            Vec::new()
        };
        let mut hops = Vec::with_capacity(self.state.len());
        for ((info, st), l) in self.path.hops.iter().zip(&mut self.state).zip(links) {
            let ns = &self.nss[st.ns];
            let s = |name: &str| -> u64 {
                netlink::STATS64_NAMES
                    .iter()
                    .position(|n| *n == name)
                    .and_then(|i| l.stats.get(i))
                    .copied()
                    .unwrap_or(0)
            };
            let mut c = HopCounters {
                rx_packets: s("rx_packets"),
                tx_packets: s("tx_packets"),
                rx_bytes: s("rx_bytes"),
                tx_bytes: s("tx_bytes"),
                ..Default::default()
            };
            for name in LINK_DROPS {
                c.drops.push((name.to_string(), s(name)));
            }
            let qd = netlink::qdiscs(&ns.nl, info.ifindex)
                .map_err(os(&info.label, "rtnetlink RTM_GETQDISC"))?;
            let root = qd.iter().find(|q| q.parent == TC_H_ROOT);
            let ingress = qd.iter().find(|q| q.parent == TC_H_INGRESS);
            c.drops.push((
                "qdisc_drops".into(),
                st.qdisc_drops.update(root.map_or(0, |q| q.drops)),
            ));
            c.drops.push((
                "ingress_qdisc_drops".into(),
                st.ingress_drops.update(ingress.map_or(0, |q| q.drops)),
            ));
            c.qdisc_backlog = root.map_or(0, |q| u64::from(q.qlen));
            if !st.eth_names.is_empty() {
                let mut vals = ns
                    .eth
                    .stats(&info.hop.iface, st.eth_names.len())
                    .unwrap_or_default();
                if vals.len() != st.eth_names.len() {
                    // The driver's set changed (queues added or removed): read it again.
                    st.eth_names = ns.eth.stat_names(&info.hop.iface).unwrap_or_default();
                    (st.eth_keep, st.eth_labels) = keep_ethtool(&st.eth_names);
                    vals = ns
                        .eth
                        .stats(&info.hop.iface, st.eth_names.len())
                        .unwrap_or_default();
                }
                let mut sums = vec![0u64; st.eth_labels.len()];
                for &(i, j) in &st.eth_keep {
                    sums[j] = sums[j].wrapping_add(vals.get(i).copied().unwrap_or(0));
                }
                for (name, v) in st.eth_labels.iter().zip(sums) {
                    let name = if LINK_DROPS.contains(&name.as_str()) {
                        format!("ethtool_{name}")
                    } else {
                        name.clone()
                    };
                    c.drops.push((name, v));
                }
            }
            if !info.irqs.is_empty() {
                let mut per_cpu: Vec<(u32, u64)> = Vec::new();
                let mut k = 0;
                for line in irq_table.iter().filter(|l| info.irqs.contains(&l.irq)) {
                    for &(cpu, n) in &line.per_cpu {
                        if st.irq_wide.len() <= k {
                            st.irq_wide.push(Wide::default());
                        }
                        let v = st.irq_wide[k].update(n);
                        k += 1;
                        match per_cpu.iter_mut().find(|(c, _)| *c == cpu) {
                            Some((_, t)) => *t += v,
                            None => per_cpu.push((cpu, v)),
                        }
                    }
                }
                c.irqs = per_cpu;
            }
            hops.push(c);
        }
        let mut backlog = None;
        if let Some(nw) = &mut self.napi {
            // A failure to read the maps is not a reason to stop watching the counters.
            let polls = nw.sample().unwrap_or_default();
            let mut snap_of = |k: (u32, u32), c: &NapiCounters| {
                let run = match (self.run_min_max.get(&k).copied(), c.min_max) {
                    (Some((a, b)), Some((x, y))) => Some((a.min(x), b.max(y))),
                    (r, None) => r,
                    (None, m) => m,
                };
                if let Some(r) = run {
                    self.run_min_max.insert(k, r);
                }
                NapiSnap {
                    polls: c.polls,
                    packets: c.packets,
                    full: c.full,
                    hist: c.hist,
                    min_max: c.min_max,
                    run_min_max: run,
                }
            };
            for (info, c) in self.path.hops.iter().zip(hops.iter_mut()) {
                let k = (info.netns_inode as u32, info.ifindex);
                c.napi = Some(match polls.iter().find(|(kk, _)| *kk == k) {
                    Some((_, n)) => snap_of(k, n),
                    None => NapiSnap::default(),
                });
            }
            backlog = Some(match polls.iter().find(|(kk, _)| *kk == napi::BACKLOG) {
                Some((_, n)) => snap_of(napi::BACKLOG, n),
                None => NapiSnap::default(),
            });
        }
        let mut softnet = Vec::new();
        for s in procfs::softnet().unwrap_or_default() {
            let i = match self.softnet.iter().position(|(c, ..)| *c == s.cpu) {
                Some(i) => i,
                None => {
                    self.softnet
                        .push((s.cpu, Wide::default(), Wide::default(), Wide::default()));
                    self.softnet.len() - 1
                }
            };
            let e = &mut self.softnet[i];
            softnet.push(CpuSoftnet {
                cpu: s.cpu,
                processed: e.1.update(s.processed),
                dropped: e.2.update(s.dropped),
                time_squeeze: e.3.update(s.time_squeeze),
            });
        }
        let snap = Snapshot {
            path: self.path.clone(),
            seq: self.seq,
            t_ns,
            wall_ns,
            hops,
            softnet,
            backlog,
        };
        self.seq += 1;
        Ok(snap)
    }
}

/// Opens the sockets of `hop`'s namespace.
fn open_ns(hop: &Hop, label: &str) -> Result<Ns, WatchError> {
    let open = || -> io::Result<(Netlink, Ethtool)> { Ok((Netlink::open()?, Ethtool::open()?)) };
    let (nl, eth) = match &hop.netns {
        None => open().map_err(os(label, "opening rtnetlink and ethtool sockets"))?,
        Some(name) => match netns::run_in(name, open) {
            Ok(r) => r.map_err(os(label, "opening rtnetlink and ethtool sockets"))?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(WatchError::NoNamespace {
                    hop: label.to_string(),
                    ns: name.clone(),
                })
            }
            Err(e) => {
                let hint = match e.raw_os_error() {
                    Some(libc::EPERM) | Some(libc::EACCES) => {
                        " (entering a namespace needs root or CAP_SYS_ADMIN)"
                    }
                    _ => "",
                };
                return Err(WatchError::Netns {
                    hop: label.to_string(),
                    ns: name.clone(),
                    source: e,
                    hint,
                });
            }
        },
    };
    Ok(Ns {
        name: hop.netns.clone(),
        nl,
        eth,
    })
}

fn no_iface(hop: &Hop, label: &str) -> WatchError {
    let (place, list) = match &hop.netns {
        Some(ns) => (format!("namespace {ns}"), format!("ip -n {ns} link")),
        None => ("this namespace".to_string(), "ip link".to_string()),
    };
    WatchError::NoInterface {
        hop: label.to_string(),
        iface: hop.iface.clone(),
        place,
        list,
    }
}

/// Which `ethtool -S` counters are drops, and the names they are reported under (per-queue
/// counters summed): (index in `names`, index in labels), labels.
fn keep_ethtool(names: &[String]) -> (Vec<(usize, usize)>, Vec<String>) {
    let mut keep = Vec::new();
    let mut labels: Vec<String> = Vec::new();
    for (i, n) in names.iter().enumerate() {
        if !is_drop_name(n) {
            continue;
        }
        let base = ethtool_base_name(n);
        let j = match labels.iter().position(|l| *l == base) {
            Some(j) => j,
            None => {
                labels.push(base);
                labels.len() - 1
            }
        };
        keep.push((i, j));
    }
    (keep, labels)
}

/// The interrupts of a device: those of its bus address (PCI MSI/MSI-X vectors, listed with
/// the address in /proc/interrupts), or for a hop in this namespace those whose handler is
/// named after the interface (`eth0`, `eth0-TxRx-3`). Configuration vectors (`-config`) are
/// left out: they carry no packets.
fn device_irqs(table: &[procfs::Irq], bus_info: &str, hop: &Hop) -> Vec<u32> {
    let bus_ok = !bus_info.is_empty()
        && bus_info
            .bytes()
            .all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.');
    let mut out = Vec::new();
    for l in table {
        if l.name.ends_with("-config") {
            continue;
        }
        let by_bus = bus_ok && l.chip.split_whitespace().any(|w| w.ends_with(bus_info));
        let by_name = hop.netns.is_none()
            && l.name.split_whitespace().any(|w| {
                w.trim_end_matches(',') == hop.iface || w.starts_with(&format!("{}-", hop.iface))
            });
        if by_bus || by_name {
            out.push(l.irq);
        }
    }
    out
}

/// Where the CPUs of a hop's softnet figures come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CpuSource {
    /// CPUs that took the device's interrupts in the interval.
    Irq,
    /// Every CPU (the device has no interrupts, or none came).
    All,
}

/// Softnet figures of the CPUs doing a hop's receive work, over an interval.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SoftnetDelta {
    /// The CPUs.
    pub cpus: Vec<u32>,
    /// How they were chosen.
    pub source: CpuSource,
    /// Backlog drops on them.
    pub dropped: u64,
    /// Times their receive softirq ran out of budget or time.
    pub time_squeeze: u64,
}

/// NAPI polls of a device over an interval.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NapiDelta {
    /// Polls.
    pub polls: u64,
    /// Packets they processed.
    pub packets: u64,
    /// Polls that used their whole budget.
    pub full: u64,
    /// Polls by packets processed (buckets: [`napi::HIST_BOUNDS`]).
    pub hist: [u64; 8],
    /// Fewest and most packets of one poll (None: no poll).
    pub min_max: Option<(u64, u64)>,
}

impl NapiDelta {
    fn between(a: Option<&NapiSnap>, b: Option<&NapiSnap>, consecutive: bool) -> Option<Self> {
        let b = b?;
        let zero = NapiSnap::default();
        let a = a.unwrap_or(&zero);
        let mut hist = [0u64; 8];
        for (i, h) in hist.iter_mut().enumerate() {
            *h = since(b.hist[i], a.hist[i]);
        }
        let polls = since(b.polls, a.polls);
        Some(NapiDelta {
            polls,
            packets: since(b.packets, a.packets),
            full: since(b.full, a.full),
            hist,
            min_max: if polls == 0 {
                None
            } else if consecutive {
                b.min_max
            } else {
                b.run_min_max
            },
        })
    }

    /// Average packets per poll.
    pub fn avg(&self) -> Option<f64> {
        (self.polls > 0).then(|| self.packets as f64 / self.polls as f64)
    }

    /// Share of polls that used their whole budget, in per cent.
    pub fn full_pct(&self) -> Option<f64> {
        (self.polls > 0).then(|| self.full as f64 * 100.0 / self.polls as f64)
    }
}

/// A hop over an interval.
#[derive(Clone, Debug)]
pub struct HopDelta {
    /// The hop's label.
    pub label: String,
    /// Packets received.
    pub rx_packets: u64,
    /// Packets transmitted.
    pub tx_packets: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Bytes transmitted.
    pub tx_bytes: u64,
    /// Every drop counter's increase, by name (zero ones included).
    pub drops: Vec<(String, u64)>,
    /// Packets in the egress queueing discipline at the end.
    pub qdisc_backlog: u64,
    /// Packets that left the previous hop and did not arrive here (None for the first hop;
    /// negative when more arrived than left: packets in flight at the edges, or made on the
    /// way).
    pub lost_before: Option<i64>,
    /// Packets that vanished at this hop: `lost_before` (when positive) plus the drops of
    /// its own egress ([`EGRESS_DROPS`]), which for a hop reached through its namespace are
    /// already among `lost_before` (then the larger of the two).
    pub vanished: u64,
    /// Softnet figures of the CPUs doing its receive work.
    pub softnet: SoftnetDelta,
    /// Interrupts of the device (None: it has none, like a veth).
    pub irqs: Option<u64>,
    /// NAPI polls of the device (None: not counted).
    pub napi: Option<NapiDelta>,
}

impl HopDelta {
    /// Sum of the drop counters' increases.
    pub fn drops_total(&self) -> u64 {
        self.drops.iter().map(|(_, v)| v).sum()
    }

    /// One drop counter's increase (0 if the hop has no such counter).
    pub fn drop(&self, name: &str) -> u64 {
        self.drops
            .iter()
            .find(|(n, _)| n == name)
            .map_or(0, |(_, v)| *v)
    }
}

/// Every hop over the span between two snapshots.
#[derive(Clone, Debug)]
pub struct Interval {
    /// The path.
    pub path: Arc<Path>,
    /// Seconds between the snapshots.
    pub secs: f64,
    /// Seconds from the first snapshot of the watch to the end of this interval.
    pub end_secs: f64,
    /// Whether the snapshots were consecutive (an interval) or not (a summary).
    pub consecutive: bool,
    /// Per hop, in path order.
    pub hops: Vec<HopDelta>,
    /// The hop where most packets vanished (index), if any did.
    pub most_lost: Option<usize>,
    /// Polls of the per-CPU backlogs (None: not counted).
    pub backlog: Option<NapiDelta>,
}

fn since(b: u64, a: u64) -> u64 {
    b.saturating_sub(a)
}

/// The hop counters of `b` less those of `a`, `lost_before` between consecutive hops, and the
/// hop where most packets vanished. `a` and `b` must come from the same watch, `a` first.
pub fn diff(a: &Snapshot, b: &Snapshot) -> Interval {
    let path = b.path.clone();
    let secs = (b.t_ns.saturating_sub(a.t_ns)) as f64 / 1e9;
    let consecutive = b.seq == a.seq + 1;
    let mut hops: Vec<HopDelta> = Vec::with_capacity(b.hops.len());
    for (k, (x, y)) in a.hops.iter().zip(&b.hops).enumerate() {
        let drops: Vec<(String, u64)> = y
            .drops
            .iter()
            .map(|(n, v)| {
                let old = x.drops.iter().find(|(m, _)| m == n).map_or(*v, |(_, o)| *o);
                (n.clone(), since(*v, old))
            })
            .collect();
        let irqs_by_cpu: Vec<(u32, u64)> = y
            .irqs
            .iter()
            .map(|(cpu, v)| {
                let old = x
                    .irqs
                    .iter()
                    .find(|(c, _)| c == cpu)
                    .map_or(*v, |(_, o)| *o);
                (*cpu, since(*v, old))
            })
            .collect();
        let irqs = if path.hops.get(k).is_some_and(|h| h.irqs.is_empty()) {
            None
        } else {
            Some(irqs_by_cpu.iter().map(|(_, v)| v).sum())
        };
        let irq_cpus: Vec<u32> = irqs_by_cpu
            .iter()
            .filter(|(_, v)| *v > 0)
            .map(|(c, _)| *c)
            .collect();
        let (cpus, source) = if irq_cpus.is_empty() {
            (b.softnet.iter().map(|s| s.cpu).collect(), CpuSource::All)
        } else {
            (irq_cpus, CpuSource::Irq)
        };
        let mut softnet = SoftnetDelta {
            cpus,
            source,
            dropped: 0,
            time_squeeze: 0,
        };
        for s in b.softnet.iter().filter(|s| softnet.cpus.contains(&s.cpu)) {
            let old = a.softnet.iter().find(|o| o.cpu == s.cpu).unwrap_or(s);
            softnet.dropped += since(s.dropped, old.dropped);
            softnet.time_squeeze += since(s.time_squeeze, old.time_squeeze);
        }
        hops.push(HopDelta {
            label: path
                .hops
                .get(k)
                .map_or_else(String::new, |h| h.label.clone()),
            rx_packets: since(y.rx_packets, x.rx_packets),
            tx_packets: since(y.tx_packets, x.tx_packets),
            rx_bytes: since(y.rx_bytes, x.rx_bytes),
            tx_bytes: since(y.tx_bytes, x.tx_bytes),
            drops,
            qdisc_backlog: y.qdisc_backlog,
            lost_before: None,
            vanished: 0,
            softnet,
            irqs,
            napi: NapiDelta::between(x.napi.as_ref(), y.napi.as_ref(), consecutive),
        });
    }
    for k in 0..hops.len() {
        if k > 0 {
            let seg = path.segments.get(k).copied().unwrap_or(Segment::Link);
            let (left, arrived) = match seg {
                Segment::Pair | Segment::Link => (hops[k - 1].tx_packets, hops[k].rx_packets),
                Segment::Through => (hops[k - 1].rx_packets, hops[k].tx_packets),
            };
            hops[k].lost_before = Some(left as i64 - arrived as i64);
        }
        let h = &hops[k];
        let egress: u64 = EGRESS_DROPS.iter().map(|n| h.drop(n)).sum();
        let lost = h.lost_before.unwrap_or(0).max(0) as u64;
        // Through a namespace (received by k-1, not sent by k), the packets k dropped on its
        // way out are among those lost: counted once. Elsewhere they are not (they never left
        // k, and lost_before speaks of what arrived at k): added.
        hops[k].vanished = match path.segments.get(k) {
            Some(Segment::Through) if k > 0 => lost.max(egress),
            _ => lost + egress,
        };
    }
    let most_lost = hops
        .iter()
        .enumerate()
        .filter(|(_, h)| h.vanished > 0)
        .max_by_key(|(_, h)| h.vanished)
        .map(|(k, _)| k);
    Interval {
        path,
        secs,
        end_secs: 0.0,
        consecutive,
        hops,
        most_lost,
        backlog: NapiDelta::between(a.backlog.as_ref(), b.backlog.as_ref(), consecutive),
    }
}

impl Interval {
    /// Sets the time from the watch's first snapshot `first` to the end of this interval.
    pub fn since_start(mut self, first: &Snapshot, b: &Snapshot) -> Interval {
        self.end_secs = b.t_ns.saturating_sub(first.t_ns) as f64 / 1e9;
        self
    }

    /// Per-second rate of `n` over the interval.
    pub fn rate(&self, n: u64) -> f64 {
        if self.secs > 0.0 {
            n as f64 / self.secs
        } else {
            0.0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_parse_and_bad_ones_say_why() {
        let p = parse_path("A:vA,B:vB0,B:vB1,C:vC").unwrap();
        assert_eq!(p.len(), 4);
        assert_eq!(p[1].netns.as_deref(), Some("B"));
        assert_eq!(p[1].iface, "vB0");
        assert_eq!(p[1].label(), "B:vB0");
        assert_eq!(parse_path("eth0").unwrap()[0].netns, None);
        for bad in [
            "",
            "A:vA,,C:vC",
            ":vA",
            "A:",
            "../x:eth0",
            "A:averyveryverylongname",
            "A:vA,A:vA",
            "A:v/A",
        ] {
            let e = parse_path(bad).unwrap_err();
            assert!(e.is_usage(), "{bad}: {e}");
        }
    }

    #[test]
    fn ethtool_queue_counters_fold() {
        assert_eq!(ethtool_base_name("rx_queue_3_xdp_drops"), "rx_xdp_drops");
        assert_eq!(
            ethtool_base_name("tx_queue_0_xdp_xmit_errors"),
            "tx_xdp_xmit_errors"
        );
        assert_eq!(ethtool_base_name("rx12_xdp_drop"), "rx_xdp_drop");
        assert_eq!(ethtool_base_name("rx_missed"), "rx_missed");
        assert_eq!(ethtool_base_name("rx_"), "rx_");
        let names: Vec<String> = [
            "peer_ifindex",
            "rx_queue_0_xdp_drops",
            "rx_queue_1_xdp_drops",
            "rx_queue_0_xdp_packets",
            "tx_queue_0_xdp_xmit_errors",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let (keep, labels) = keep_ethtool(&names);
        assert_eq!(labels, ["rx_xdp_drops", "tx_xdp_xmit_errors"]);
        assert_eq!(keep, [(1, 0), (2, 0), (4, 1)]);
    }

    #[test]
    fn wide_counters_cross_the_wrap() {
        let mut w = Wide::default();
        assert_eq!(w.update(u32::MAX - 1), u64::from(u32::MAX - 1));
        assert_eq!(w.update(3), u64::from(u32::MAX - 1) + 5);
    }

    fn snap(path: &Arc<Path>, seq: u64, t: u64, c: &[(u64, u64, u64)]) -> Snapshot {
        Snapshot {
            path: path.clone(),
            seq,
            t_ns: t,
            wall_ns: 0,
            hops: c
                .iter()
                .map(|&(rx, tx, txd)| HopCounters {
                    rx_packets: rx,
                    tx_packets: tx,
                    rx_bytes: rx * 64,
                    tx_bytes: tx * 64,
                    drops: vec![("tx_dropped".into(), txd)],
                    ..Default::default()
                })
                .collect(),
            softnet: vec![],
            backlog: None,
        }
    }

    fn line_path() -> Arc<Path> {
        let hop = |ns: &str, i: &str| HopInfo {
            hop: Hop {
                netns: Some(ns.into()),
                iface: i.into(),
            },
            label: format!("{ns}:{i}"),
            ifindex: 1,
            driver: "veth".into(),
            kind: Some("veth".into()),
            irqs: vec![],
            netns_inode: 0,
        };
        Arc::new(Path {
            hops: vec![
                hop("A", "vA"),
                hop("B", "vB0"),
                hop("B", "vB1"),
                hop("C", "vC"),
            ],
            segments: vec![
                Segment::Link,
                Segment::Pair,
                Segment::Through,
                Segment::Pair,
            ],
            notes: vec![],
            napi_off: None,
        })
    }

    #[test]
    fn loss_is_found_where_it_happened() {
        let p = line_path();
        let a = snap(&p, 0, 0, &[(0, 0, 0), (0, 0, 0), (0, 0, 0), (0, 0, 0)]);
        // A sent 1000, B received 1000 and forwarded 900, C received 900.
        let b = snap(
            &p,
            1,
            1_000_000_000,
            &[(0, 1000, 0), (1000, 0, 0), (0, 900, 0), (900, 0, 0)],
        );
        let i = diff(&a, &b);
        assert!(i.consecutive);
        assert_eq!(i.hops[0].lost_before, None);
        assert_eq!(i.hops[1].lost_before, Some(0));
        assert_eq!(i.hops[2].lost_before, Some(100));
        assert_eq!(i.hops[3].lost_before, Some(0));
        assert_eq!(i.most_lost, Some(2));
        assert_eq!(i.rate(i.hops[0].tx_packets), 1000.0);
        // Drops on A's way out (a full qdisc, a veth peer with no room) count at A.
        let c = snap(
            &p,
            2,
            2_000_000_000,
            &[(0, 1500, 400), (1500, 0, 0), (0, 1400, 0), (1400, 0, 0)],
        );
        let j = diff(&b, &c);
        assert_eq!(j.hops[0].vanished, 400);
        assert_eq!(j.hops[2].vanished, 0);
        assert_eq!(j.most_lost, Some(0));
        // No loss anywhere: nothing marked.
        let d = snap(
            &p,
            3,
            3_000_000_000,
            &[(0, 1500, 400), (1500, 0, 0), (0, 1400, 0), (1400, 0, 0)],
        );
        assert_eq!(diff(&c, &d).most_lost, None);
        // B's way out of vB1 dropped the 100 that B received and did not send: counted once.
        let e = snap(
            &p,
            4,
            4_000_000_000,
            &[(0, 2500, 400), (2500, 0, 0), (0, 2300, 100), (2300, 0, 0)],
        );
        let k = diff(&d, &e);
        assert_eq!(k.hops[2].lost_before, Some(100));
        assert_eq!(k.hops[2].vanished, 100);
        assert_eq!(k.most_lost, Some(2));
        let t = report::mark_text(&k).unwrap();
        assert!(t.contains("100 of 1'000 (10.00 %) inside B"), "{t}");
        assert!(t.contains("(its egress counters: tx_dropped 100)"), "{t}");
        assert!(!t.contains("dropped on the way out"), "{t}");
        assert!(!diff(&a, &d).consecutive);
    }

    #[test]
    fn reports_mark_the_hop_and_keep_the_summary_shape() {
        let p = line_path();
        let a = snap(&p, 0, 0, &[(0, 0, 0), (0, 0, 0), (0, 0, 0), (0, 0, 0)]);
        let b = snap(
            &p,
            1,
            1_000_000_000,
            &[(0, 1000, 0), (1000, 0, 0), (0, 900, 0), (900, 0, 0)],
        );
        let i = diff(&a, &b).since_start(&a, &b);
        let t = report::interval_text(&i);
        let row = t.lines().find(|l| l.contains("B:vB1 ")).unwrap();
        assert!(row.ends_with("<== most lost"), "{t}");
        assert!(
            t.contains("most packets vanished at B:vB1: 100 of 1'000 (10.00 %) inside B"),
            "{t}"
        );
        let s = report::summary_text(&i);
        assert!(s.contains("Summary over 1.0 s"), "{s}");
        let j: serde_json::Value = serde_json::from_str(&report::summary_json(&i)).unwrap();
        assert_eq!(j["type"], "summary");
        assert_eq!(j["most_lost"], "B:vB1");
        let h = &j["hops"][2];
        assert_eq!(h["hop"], "B:vB1");
        assert_eq!(h["lost_before"], 100);
        assert_eq!(h["tx_packets"], 900);
        assert_eq!(h["rx_bytes"], 0);
        assert_eq!(h["drops"]["tx_dropped"], 0);
        assert_eq!(j["hops"][0]["lost_before"], 0);
        let m = report::prometheus_text(&i);
        assert!(
            m.contains("linerate_watch_lost_before{hop=\"B:vB1\"} 100"),
            "{m}"
        );
    }
}

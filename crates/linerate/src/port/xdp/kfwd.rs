//! The kernel forwarder: l2fwd as an XDP program (`bpf/xdp_fwd.c`), the way xdp-forward and
//! `xdp-bench redirect` forward. Each input interface gets the program through a bpf_link; a
//! frame gets l2fwd's MAC rewrite (if asked) and is redirected through a DEVMAP to its output
//! in the driver's receive path, without reaching user space. Per-port counters (received,
//! sent, dropped) live in a per-CPU array the caller reads ([`KernelFwd::counters`]).
//!
//! Frames are handed to the output driver's `ndo_xdp_xmit`; what that driver refuses after the
//! redirect (a full queue, a veth whose peer has neither an XDP program nor GRO enabled) does
//! not come back to the program: [`KernelFwd::device_drops`] reads the interfaces' own drop
//! counters for that.

use super::obj;
use super::prog::{AttachApi, AttachMode, Hook};
use super::sys;
use crate::port::PortError;
use std::os::fd::{AsRawFd, OwnedFd};

/// The compiled program (rebuilt by `bpf/build.sh`, checked by `tests/xdp_object.rs`).
pub const OBJECT: &[u8] = include_bytes!("../../../../../bpf/xdp_fwd.o");
/// The program's name in the object and in the kernel (how a stale one is recognised).
pub use super::prog::FWD_PROG_NAME as PROG_NAME;

const BPF_MAP_LOOKUP_ELEM: u32 = 1;
const BPF_MAP_TYPE_ARRAY: u32 = 2;
const BPF_MAP_TYPE_PERCPU_ARRAY: u32 = 6;
const BPF_MAP_TYPE_DEVMAP: u32 = 14;
/// `LR_FWD_MAC` in the program: rewrite the addresses.
const FLAG_MAC: u32 = 1;

/// One input's `lr_fwd_cfg` (`struct lr_fwd_cfg` of the program), the only entry of its
/// instance's config map.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Cfg {
    port: u32,
    out: u32,
    flags: u32,
    dst: [u8; 6],
    src: [u8; 6],
}

/// What to forward.
#[derive(Clone, Debug)]
pub struct KernelFwdConfig {
    /// Port 0 and port 1 (the same name twice bounces frames back out of one interface).
    pub ifaces: [String; 2],
    /// Forward port 1 → port 0 too.
    pub bidir: bool,
    /// (src, dst) written into frames leaving port 0 and port 1 (None: unchanged).
    pub mac: [Option<([u8; 6], [u8; 6])>; 2],
    /// Native or generic attach.
    pub attach: AttachMode,
}

/// The program attached to the input interface(s), its maps, and how to read its counters.
pub struct KernelFwd {
    ifaces: [String; 2],
    nports: usize,
    // Declared first: detached before the maps and the program close.
    hooks: Vec<Hook>,
    replaced: Vec<u32>,
    // (input, output) ports, one per input.
    dirs: Vec<(usize, usize)>,
    // One program instance and config map per input.
    _progs: Vec<OwnedFd>,
    _cfgs: Vec<OwnedFd>,
    _ports: OwnedFd,
    stats: OwnedFd,
    values: Vec<u64>,
}

impl std::fmt::Debug for KernelFwd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelFwd")
            .field("ifaces", &self.ifaces)
            .field("nports", &self.nports)
            .finish()
    }
}

fn update<K, V>(
    iface: &str,
    map: &OwnedFd,
    key: &K,
    val: &V,
    what: &'static str,
) -> Result<(), PortError> {
    let mut a = sys::MapElemAttr {
        map_fd: map.as_raw_fd() as u32,
        key: key as *const K as u64,
        value: val as *const V as u64,
        ..Default::default()
    };
    sys::bpf(sys::BPF_MAP_UPDATE_ELEM, &mut a)
        .map(|_| ())
        .map_err(|e| sys::err_of(iface, what, e))
}

/// Possible CPUs (the per-CPU map value has one slot each): `/sys/devices/system/cpu/possible`.
fn possible_cpus() -> usize {
    let s = std::fs::read_to_string("/sys/devices/system/cpu/possible").unwrap_or_default();
    let mut n = 0;
    for part in s.trim().split(',') {
        let mut it = part.split('-');
        let a = it.next().and_then(|x| x.parse::<usize>().ok());
        let b = it.next().and_then(|x| x.parse::<usize>().ok());
        n = match (a, b) {
            (Some(_), Some(b)) => n.max(b + 1),
            (Some(a), None) => n.max(a + 1),
            _ => n,
        };
    }
    if n == 0 {
        std::thread::available_parallelism().map_or(1, |x| x.get())
    } else {
        n
    }
}

impl KernelFwd {
    /// Loads the program and its maps and attaches it to the input(s) (in the calling thread's
    /// network namespace): port 0, and port 1 too with `bidir`.
    pub fn open(c: &KernelFwdConfig) -> Result<KernelFwd, PortError> {
        let bounce = c.ifaces[0] == c.ifaces[1];
        let nports = if bounce { 1 } else { 2 };
        let idx = [sys::ifindex(&c.ifaces[0])?, sys::ifindex(&c.ifaces[1])?];
        let i0 = c.ifaces[0].as_str();
        let ports = obj::create_map(i0, BPF_MAP_TYPE_DEVMAP, 4, 4, 2, "lr_fwd_ports")?;
        let stats = obj::create_map(i0, BPF_MAP_TYPE_PERCPU_ARRAY, 4, 8, 8, "lr_fwd_stats")?;
        let object = obj::parse(OBJECT, "bpf/xdp_fwd.o")?;
        // (input port, output port) pairs.
        let dirs: &[(usize, usize)] = match (bounce, c.bidir) {
            (true, _) => &[(0, 0)],
            (false, false) => &[(0, 1)],
            (false, true) => &[(0, 1), (1, 0)],
        };
        for (p, ifindex) in idx.iter().enumerate().take(nports) {
            update(
                &c.ifaces[p],
                &ports,
                &(p as u32),
                ifindex,
                "bpf(BPF_MAP_UPDATE_ELEM, DEVMAP)",
            )?;
        }
        let (mut progs, mut cfgs) = (Vec::new(), Vec::new());
        for &(i, o) in dirs {
            let (flags, src, dst) = match c.mac[o] {
                Some((s, d)) => (FLAG_MAC, s, d),
                None => (0, [0; 6], [0; 6]),
            };
            let v = Cfg {
                port: i as u32,
                out: o as u32,
                flags,
                dst,
                src,
            };
            let iface = c.ifaces[i].as_str();
            let cfg = obj::create_map(
                iface,
                BPF_MAP_TYPE_ARRAY,
                4,
                std::mem::size_of::<Cfg>() as u32,
                1,
                "lr_fwd_cfg",
            )?;
            update(
                iface,
                &cfg,
                &0u32,
                &v,
                "bpf(BPF_MAP_UPDATE_ELEM, forwarding config)",
            )?;
            let prog = object.load(
                iface,
                PROG_NAME,
                &[
                    ("lr_fwd_cfg", &cfg),
                    ("lr_fwd_ports", &ports),
                    ("lr_fwd_stats", &stats),
                ],
            )?;
            progs.push(prog);
            cfgs.push(cfg);
        }
        let mut hooks = Vec::new();
        let mut replaced = Vec::new();
        for (&(i, _), prog) in dirs.iter().zip(&progs) {
            let (h, r) = Hook::attach(&c.ifaces[i], idx[i], prog, c.attach, AttachApi::Link)?;
            hooks.push(h);
            replaced.extend(r);
        }
        let ncpu = possible_cpus();
        Ok(KernelFwd {
            ifaces: c.ifaces.clone(),
            nports,
            hooks,
            replaced,
            dirs: dirs.to_vec(),
            _progs: progs,
            _cfgs: cfgs,
            _ports: ports,
            stats,
            values: vec![0; ncpu],
        })
    }

    /// Number of ports (1 for a bounce on one interface).
    pub fn nports(&self) -> usize {
        self.nports
    }

    /// How the program went on the first input (Native or Generic).
    pub fn attach_mode(&self) -> AttachMode {
        self.hooks.first().map_or(AttachMode::Auto, |h| h.mode())
    }

    /// Ids of stale programs of earlier runs removed to attach this one.
    pub fn replaced_stale(&self) -> &[u32] {
        &self.replaced
    }

    /// The program's counters per port, summed over CPUs: [received, sent, dropped].
    pub fn counters(&mut self) -> [[u64; 3]; 2] {
        let mut out = [[0u64; 3]; 2];
        for (p, row) in out.iter_mut().enumerate() {
            for (c, slot) in row.iter_mut().enumerate().skip(1) {
                let key = (p * 4 + c) as u32;
                self.values.iter_mut().for_each(|v| *v = 0);
                let mut a = sys::MapElemAttr {
                    map_fd: self.stats.as_raw_fd() as u32,
                    key: &key as *const u32 as u64,
                    value: self.values.as_mut_ptr() as u64,
                    ..Default::default()
                };
                if sys::bpf(BPF_MAP_LOOKUP_ELEM, &mut a).is_ok() {
                    *slot = self.values.iter().sum();
                }
            }
        }
        // The program counts each frame once, under its output port: what an input received is
        // what its output sent and dropped.
        for &(i, o) in &self.dirs {
            out[i][0] = out[o][1] + out[o][2];
        }
        out
    }

    /// The interfaces' own drop counters, per port: (receive drops, transmit drops); for XDP,
    /// transmit drops are frames the driver refused after a redirect (they never left).
    pub fn device_drops(&self) -> [(u64, u64); 2] {
        let mut out = [(0u64, 0u64); 2];
        for (p, o) in out.iter_mut().enumerate().take(self.nports) {
            if let Some(d) = link_drops(&self.ifaces[p]) {
                *o = d;
            }
        }
        out
    }
}

/// (rx_dropped, tx_dropped) of `iface` in the calling thread's network namespace: its link
/// counters as rtnetlink reports them (`IFLA_STATS64`, 64-bit).
pub fn link_drops(iface: &str) -> Option<(u64, u64)> {
    let s = sys::link_stats(crate::sys::iface::ifindex(iface)?).ok()?;
    Some((s.rx_dropped, s.tx_dropped))
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn object_has_the_three_maps_and_the_config_layout_matches() {
        let p = obj::parse(OBJECT, "xdp_fwd.o").unwrap();
        let mut names: Vec<&str> = p.maps.iter().map(|m| m.1.as_str()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names, ["lr_fwd_cfg", "lr_fwd_ports", "lr_fwd_stats"]);
        assert_eq!(std::mem::size_of::<Cfg>(), 24);
        assert!(possible_cpus() >= 1);
        assert!(link_drops("lo").is_some());
        assert!(link_drops("lr-no-such-if").is_none());
    }
}

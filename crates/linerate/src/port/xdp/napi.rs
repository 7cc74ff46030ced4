//! Packets per NAPI poll (llstat's "requests per interrupt"): linerate's raw tracepoint program
//! `bpf/napi_poll.o` on `napi:napi_poll`, loaded by linerate's own loader (`port::xdp::obj`),
//! counts per device (network namespace inode, ifindex) and CPU the polls, their packets, the
//! polls that used the whole budget, a histogram of packets per poll and the smallest and
//! largest poll of each interval. Polls of the per-CPU backlog (devices that hand packets to
//! `netif_rx`, like a veth without GRO or XDP) have no device: they are counted under
//! [`BACKLOG`]. Needs root (CAP_BPF and CAP_PERFMON) and the kernel's BTF (for the offsets of
//! the fields the program follows); without them [`NapiWatch::start`] says why and the caller
//! goes on without these figures.

use super::obj::{self, btf};
use super::sys;
use std::io;
use std::os::fd::OwnedFd;

/// The compiled program (rebuilt by `bpf/build.sh`, checked by `tests/xdp_object.rs`).
pub const OBJECT: &[u8] = include_bytes!("../../../../../bpf/napi_poll.o");
/// The program's name in the object and in the kernel.
pub const PROG_NAME: &str = "lr_napi_poll";
/// Buckets of the packets-per-poll histogram: lower bounds (the last is "64 and more").
pub const HIST_BOUNDS: [u64; 8] = [0, 1, 2, 4, 8, 16, 32, 64];
/// The key of the per-CPU backlog's polls (no device).
pub const BACKLOG: (u32, u32) = (0, 0);

/// `struct lr_napi_val`: polls, packets, full, hist[8].
const VAL_LEN: usize = 11 * 8;
/// `struct lr_napi_mm`: min_plus1, max.
const MM_LEN: usize = 16;
/// `struct lr_napi_mm_key`: netns, ifindex, epoch, pad.
const MM_KEY_LEN: usize = 16;
/// `struct lr_napi_cfg`: four offsets and the epoch.
const CFG_LEN: usize = 20;

/// One device's polls, summed over CPUs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NapiCounters {
    /// Polls since the program was attached.
    pub polls: u64,
    /// Packets those polls processed.
    pub packets: u64,
    /// Polls that used their whole budget (more work was waiting).
    pub full: u64,
    /// Polls by packets processed, buckets as [`HIST_BOUNDS`].
    pub hist: [u64; 8],
    /// Fewest and most packets of one poll since the previous [`NapiWatch::sample`] (None:
    /// no poll in that time).
    pub min_max: Option<(u64, u64)>,
}

/// The program attached to `napi:napi_poll` and its maps; detached when dropped.
pub struct NapiWatch {
    _link: Option<OwnedFd>,
    _prog: Option<OwnedFd>,
    cfg: OwnedFd,
    stats: OwnedFd,
    minmax: OwnedFd,
    offsets: [u32; 4],
    epoch: u32,
    ncpu: usize,
}

fn le(v: &[u8], i: usize) -> u64 {
    v.get(i * 8..i * 8 + 8)
        .map_or(0, |b| u64::from_ne_bytes(b.try_into().unwrap_or([0; 8])))
}

impl NapiWatch {
    /// Loads and attaches the program; the error says why it cannot be (not root, no BPF, no
    /// BTF, a kernel without the tracepoint), in words for the user.
    pub fn start() -> Result<NapiWatch, String> {
        let want: [(&str, &[&str]); 4] = [
            ("napi_struct", &["dev"]),
            ("net_device", &["ifindex"]),
            ("net_device", &["nd_net", "net"]),
            ("net", &["ns", "inum"]),
        ];
        let got = btf::vmlinux_member_offsets(&want);
        let mut offsets = [0u32; 4];
        for ((o, g), (s, p)) in offsets.iter_mut().zip(got).zip(want) {
            *o = g.ok_or_else(|| {
                format!(
                    "the kernel's BTF (/sys/kernel/btf/vmlinux) does not give the offset of \
                     {s}.{} (a kernel built without CONFIG_DEBUG_INFO_BTF?)",
                    p.join(".")
                )
            })?;
        }
        let o = obj::parse_section(OBJECT, "bpf/napi_poll.o", "raw_tracepoint")
            .map_err(|e| e.to_string())?;
        let why = |what: &str, e: &io::Error| match e.raw_os_error() {
            Some(libc::EPERM) | Some(libc::EACCES) => {
                format!("{what}: {e}: a BPF tracing program needs root (CAP_BPF and CAP_PERFMON)")
            }
            _ => format!("{what}: {e}"),
        };
        let map = |ty: u32, key: usize, val: usize, n: u32, name: &str| {
            let mut map_name = [0u8; 16];
            map_name[..name.len().min(15)].copy_from_slice(&name.as_bytes()[..name.len().min(15)]);
            let mut m = sys::MapCreateAttr {
                map_type: ty,
                key_size: key as u32,
                value_size: val as u32,
                max_entries: n,
                map_name,
                ..Default::default()
            };
            sys::bpf_fd(sys::BPF_MAP_CREATE, &mut m).map_err(|e| why("bpf(BPF_MAP_CREATE)", &e))
        };
        let cfg = map(sys::BPF_MAP_TYPE_ARRAY, 4, CFG_LEN, 1, "lr_napi_cfg")?;
        let stats = map(
            sys::BPF_MAP_TYPE_PERCPU_HASH,
            8,
            VAL_LEN,
            4096,
            "lr_napi_stats",
        )?;
        let minmax = map(
            sys::BPF_MAP_TYPE_PERCPU_HASH,
            MM_KEY_LEN,
            MM_LEN,
            8192,
            "lr_napi_minmax",
        )?;
        let mut w = NapiWatch {
            _link: None,
            _prog: None,
            cfg,
            stats,
            minmax,
            offsets,
            epoch: 0,
            ncpu: sys::possible_cpus().map_err(|e| e.to_string())?,
        };
        w.write_cfg()
            .map_err(|e| why("writing the program's settings", &e))?;
        // The loader prints the verifier's log when the kernel refuses (quiet: no).
        let prog = o
            .load_raw_tracepoint(
                PROG_NAME,
                &[
                    ("napi_cfg", &w.cfg),
                    ("napi_stats", &w.stats),
                    ("napi_minmax", &w.minmax),
                ],
                false,
            )
            .map_err(|e| format!("loading bpf/napi_poll.o: {e}"))?;
        let link = sys::raw_tracepoint_open(&prog, "napi_poll")
            .map_err(|e| why("attaching to the napi:napi_poll tracepoint", &e))?;
        w._prog = Some(prog);
        w._link = Some(link);
        Ok(w)
    }

    fn write_cfg(&self) -> io::Result<()> {
        let mut c = [0u8; CFG_LEN];
        for (i, v) in self.offsets.iter().chain([&self.epoch]).enumerate() {
            c[i * 4..i * 4 + 4].copy_from_slice(&v.to_ne_bytes());
        }
        sys::map_update(&self.cfg, 0, &c)
    }

    /// Every device's counters since the start, and the fewest and most packets of one poll
    /// since the previous call, keyed by (network namespace inode, ifindex) ([`BACKLOG`] for
    /// the per-CPU backlog).
    pub fn sample(&mut self) -> io::Result<Vec<((u32, u32), NapiCounters)>> {
        // Polls from now on go to the other min/max slot; the old slot's entries are read and
        // deleted below.
        let old = self.epoch & 1;
        self.epoch = self.epoch.wrapping_add(1);
        self.write_cfg()?;
        let mut out: Vec<((u32, u32), NapiCounters)> = Vec::new();
        let mut val = vec![0u8; VAL_LEN.div_ceil(8) * 8 * self.ncpu];
        let mut key = [0u8; 8];
        let mut prev: Option<[u8; 8]> = None;
        while sys::map_next_key(&self.stats, prev.as_ref().map(|k| &k[..]), &mut key)? {
            prev = Some(key);
            if sys::map_lookup_key(&self.stats, &key, &mut val).is_err() {
                continue;
            }
            let mut c = NapiCounters::default();
            for cpu in val.chunks_exact(VAL_LEN.div_ceil(8) * 8) {
                c.polls += le(cpu, 0);
                c.packets += le(cpu, 1);
                c.full += le(cpu, 2);
                for (b, h) in c.hist.iter_mut().enumerate() {
                    *h += le(cpu, 3 + b);
                }
            }
            let k = (
                u32::from_ne_bytes([key[0], key[1], key[2], key[3]]),
                u32::from_ne_bytes([key[4], key[5], key[6], key[7]]),
            );
            out.push((k, c));
        }
        let mut mm = vec![0u8; MM_LEN * self.ncpu];
        let mut mkey = [0u8; MM_KEY_LEN];
        let mut prev: Option<[u8; MM_KEY_LEN]> = None;
        let mut done = Vec::new();
        while sys::map_next_key(&self.minmax, prev.as_ref().map(|k| &k[..]), &mut mkey)? {
            prev = Some(mkey);
            if u32::from_ne_bytes([mkey[8], mkey[9], mkey[10], mkey[11]]) != old {
                continue;
            }
            done.push(mkey);
            if sys::map_lookup_key(&self.minmax, &mkey, &mut mm).is_err() {
                continue;
            }
            let k = (
                u32::from_ne_bytes([mkey[0], mkey[1], mkey[2], mkey[3]]),
                u32::from_ne_bytes([mkey[4], mkey[5], mkey[6], mkey[7]]),
            );
            let mut r: Option<(u64, u64)> = None;
            for cpu in mm.chunks_exact(MM_LEN) {
                let (minp1, max) = (le(cpu, 0), le(cpu, 1));
                if minp1 == 0 {
                    continue;
                }
                r = Some(match r {
                    None => (minp1 - 1, max),
                    Some((a, b)) => (a.min(minp1 - 1), b.max(max)),
                });
            }
            if let Some(e) = out.iter_mut().find(|(kk, _)| *kk == k) {
                e.1.min_max = r;
            }
        }
        for k in done {
            let _ = sys::map_delete_key(&self.minmax, &k);
        }
        Ok(out)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn the_object_has_the_program_and_its_three_maps() {
        let o = obj::parse_section(OBJECT, "bpf/napi_poll.o", "raw_tracepoint").unwrap();
        let mut maps: Vec<&str> = o.maps.iter().map(|(_, m)| m.as_str()).collect();
        maps.sort();
        maps.dedup();
        assert_eq!(maps, ["napi_cfg", "napi_minmax", "napi_stats"]);
        assert!(o.kfuncs.is_empty());
    }
}

//! The XDP program: loaded from the committed object `bpf/xdp_redirect.o` (embedded in the
//! library), with its XSKMAP created here, attached to an interface through a bpf_link, and
//! shared by every port of the process on that interface (one per queue).
//!
//! The loader is deliberately small: it reads the ELF object's `xdp` section, checks that its
//! only relocation is the `ld_imm64` of the map `xsks_map`, patches in the map's descriptor and
//! calls `BPF_PROG_LOAD`. A bpf_link detaches the program when its last descriptor closes, so
//! the program goes away with the process, however it ends (SIGKILL included). A program left by
//! the pre-bpf_link way (rtnetlink, [`AttachApi::Netlink`]) survives its process: if it is ours
//! (by name) it is found and replaced; another tool's program is reported, not touched.

use super::obj;
use super::sys::{self, Netlink};
use crate::port::PortError;
use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Arc, Mutex, Weak};

/// The compiled program (rebuilt by `bpf/build.sh`, checked by `tests/xdp_object.rs`).
pub const OBJECT: &[u8] = include_bytes!("../../../../../bpf/xdp_redirect.o");
/// The program's name in the object and in the kernel (how a stale one is recognised).
pub const PROG_NAME: &str = "lr_xsk_redirect";
/// The program with receive metadata (`bpf/xdp_redirect_meta.c`: receive timestamps in front
/// of each packet, VLAN tags the device took out put back), tried first.
pub const META_OBJECT: &[u8] = include_bytes!("../../../../../bpf/xdp_redirect_meta.o");
/// Its name in the object and in the kernel.
pub const META_PROG_NAME: &str = "lr_xsk_meta";
/// The kernel forwarder's program (`bpf/xdp_fwd.c`, loaded by [`super::kfwd`]): named here
/// with the others so that a stale one of an earlier run is recognised as linerate's.
pub const FWD_PROG_NAME: &str = "lr_xdp_fwd";
/// The kernel function that gives the VLAN tag a device took out of a frame.
const KFUNC_VLAN: &str = "bpf_xdp_metadata_rx_vlan_tag";
/// The map symbol the program refers to.
const MAP_NAME: &str = "xsks_map";
/// Queues one interface's map can hold.
pub(crate) const MAP_ENTRIES: u32 = 256;

/// How the program is attached.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AttachMode {
    /// Native (driver) mode if the driver has it, else generic.
    #[default]
    Auto,
    /// Native (driver) XDP.
    Native,
    /// Generic (skb) XDP: works on any interface, slower.
    Generic,
}

/// Which kernel interface attaches the program.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AttachApi {
    /// A bpf_link (kernel 5.9+): removed by the kernel when the process ends.
    #[default]
    Link,
    /// rtnetlink (any kernel with XDP): removed when the port drops; a killed process leaves
    /// it behind, and the next open replaces it.
    Netlink,
}

/// What the attached program puts in front of the packets it redirects.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RxMeta {
    /// A receive-metadata block (`bpf/xdp_redirect_meta.c`): per-packet receive time.
    pub stamps: bool,
    /// VLAN tags the device took out are put back (the device's kernel function is there).
    pub vlan: bool,
}

/// A loaded program and its map.
pub(super) struct Loaded {
    pub(super) map: OwnedFd,
    pub(super) prog: OwnedFd,
    pub(super) meta: RxMeta,
    /// Loaded frags-aware (`BPF_F_XDP_HAS_FRAGS`): frames in several buffers reach it.
    pub(super) frags: bool,
}

/// Creates the XSKMAP.
fn create_xskmap(iface: &str) -> Result<OwnedFd, PortError> {
    obj::create_map(
        iface,
        sys::BPF_MAP_TYPE_XSKMAP,
        4,
        4,
        MAP_ENTRIES,
        "lr_xsks",
    )
}

/// Creates the XSKMAP and loads the plain program against it.
pub(super) fn load(iface: &str) -> Result<Loaded, PortError> {
    let map = create_xskmap(iface)?;
    let object = obj::parse(OBJECT, "bpf/xdp_redirect.o")?;
    let (prog, _, frags) = object.load_resolved(
        iface,
        PROG_NAME,
        &[(MAP_NAME, &map)],
        obj::Kfuncs::Stub,
        false,
    )?;
    Ok(Loaded {
        map,
        prog,
        meta: RxMeta::default(),
        frags,
    })
}

/// Creates the XSKMAP and loads the metadata program against it: bound to `ifindex` with the
/// device's kernel functions (`bound`), or unbound with them stubbed. Quiet on refusal (the
/// caller falls back).
fn load_meta(iface: &str, ifindex: u32, bound: bool) -> Result<Loaded, PortError> {
    let map = create_xskmap(iface)?;
    let object = obj::parse(META_OBJECT, "bpf/xdp_redirect_meta.o")?;
    let k = if bound {
        obj::Kfuncs::DeviceBound(ifindex)
    } else {
        obj::Kfuncs::Stub
    };
    let (prog, resolved, frags) =
        object.load_resolved(iface, META_PROG_NAME, &[(MAP_NAME, &map)], k, true)?;
    Ok(Loaded {
        map,
        prog,
        meta: RxMeta {
            stamps: true,
            vlan: resolved.iter().any(|f| f == KFUNC_VLAN),
        },
        frags,
    })
}

/// Loads and attaches the best program the kernel and the driver take: the metadata program
/// bound to the device (native mode only: the kernel attaches device-bound programs in native
/// mode), else the metadata program unbound (software stamps, no VLAN kernel function), else
/// the plain one (kernels without `bpf_ktime_get_tai_ns`, before 6.1).
fn load_and_attach(
    iface: &str,
    ifindex: u32,
    mode: AttachMode,
    api: AttachApi,
) -> Result<(Loaded, Hook, Option<u32>), PortError> {
    if mode != AttachMode::Generic {
        if let Ok(l) = load_meta(iface, ifindex, true) {
            if let Ok((h, r)) = Hook::attach(iface, ifindex, &l.prog, AttachMode::Native, api) {
                return Ok((l, h, r));
            }
        }
    }
    if let Ok(l) = load_meta(iface, ifindex, false) {
        if let Ok((h, r)) = Hook::attach(iface, ifindex, &l.prog, mode, api) {
            return Ok((l, h, r));
        }
    }
    let l = load(iface)?;
    let (h, r) = Hook::attach(iface, ifindex, &l.prog, mode, api)?;
    Ok((l, h, r))
}

/// A program attached to one interface: through a bpf_link (detached when dropped, or when the
/// process ends) or through rtnetlink (detached when dropped).
pub(super) struct Hook {
    ifindex: u32,
    how: How,
    mode: AttachMode,
}

enum How {
    Link(#[allow(dead_code)] OwnedFd),
    Netlink(Netlink, u32),
}

impl Hook {
    /// Attaches `prog` to `iface` (native first under `AttachMode::Auto`), after removing a
    /// stale program of ours left by an earlier run; returns the hook and the stale one's id.
    pub(super) fn attach(
        iface: &str,
        ifindex: u32,
        prog: &OwnedFd,
        mode: AttachMode,
        api: AttachApi,
    ) -> Result<(Hook, Option<u32>), PortError> {
        let nl = Netlink::open().map_err(|e| sys::err_of(iface, "socket(NETLINK_ROUTE)", e))?;
        let replaced = remove_stale(&nl, iface, ifindex)?;
        let modes: &[(AttachMode, u32)] = match mode {
            AttachMode::Auto => &[
                (AttachMode::Native, sys::XDP_FLAGS_DRV_MODE),
                (AttachMode::Generic, sys::XDP_FLAGS_SKB_MODE),
            ],
            AttachMode::Native => &[(AttachMode::Native, sys::XDP_FLAGS_DRV_MODE)],
            AttachMode::Generic => &[(AttachMode::Generic, sys::XDP_FLAGS_SKB_MODE)],
        };
        let mut last = None;
        for &(m, flags) in modes {
            let r = match api {
                AttachApi::Link => {
                    let mut a = sys::LinkCreateAttr {
                        prog_fd: prog.as_raw_fd() as u32,
                        target_ifindex: ifindex,
                        attach_type: sys::BPF_XDP,
                        flags,
                        ..Default::default()
                    };
                    sys::bpf_fd(sys::BPF_LINK_CREATE, &mut a).map(Some)
                }
                // XDP_FLAGS_UPDATE_IF_NOEXIST: never replace a program silently.
                AttachApi::Netlink => {
                    sys::xdp_set_netlink(&nl, ifindex, prog.as_raw_fd(), flags | 1).map(|()| None)
                }
            };
            match r {
                Ok(link) => {
                    let how = match link {
                        Some(fd) => How::Link(fd),
                        None => How::Netlink(nl, flags),
                    };
                    return Ok((
                        Hook {
                            ifindex,
                            how,
                            mode: m,
                        },
                        replaced,
                    ));
                }
                Err(e) => last = Some(e),
            }
        }
        let op = match api {
            AttachApi::Link => "bpf(BPF_LINK_CREATE, XDP)",
            AttachApi::Netlink => "rtnetlink IFLA_XDP",
        };
        Err(sys::err_of(
            iface,
            op,
            last.unwrap_or_else(|| std::io::Error::from_raw_os_error(libc::EINVAL)),
        ))
    }

    /// The mode the program was attached in (Native or Generic).
    pub(super) fn mode(&self) -> AttachMode {
        self.mode
    }
}

impl Drop for Hook {
    fn drop(&mut self) {
        if let How::Netlink(nl, flags) = &self.how {
            let _ = sys::xdp_set_netlink(nl, self.ifindex, -1, *flags);
        }
        // A bpf_link detaches when its descriptor closes (dropped with `how`).
    }
}

/// The program attached to one interface, shared by the ports of the process on it.
pub struct Attachment {
    iface: String,
    key: (u64, u32),
    // Declared before `loaded`: detached before the program's descriptor closes.
    hook: Hook,
    loaded: Loaded,
    replaced: Option<u32>,
}

impl std::fmt::Debug for Attachment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Attachment")
            .field("iface", &self.iface)
            .field("mode", &self.hook.mode)
            .finish()
    }
}

type Registry = Mutex<HashMap<(u64, u32), Weak<Attachment>>>;

fn registry() -> &'static Registry {
    static R: std::sync::OnceLock<Registry> = std::sync::OnceLock::new();
    R.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The inode of the calling thread's network namespace (interface indexes are per namespace).
fn netns_id() -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/thread-self/ns/net")
        .map(|m| m.ino())
        .unwrap_or(0)
}

impl Attachment {
    /// The program on `iface` (index `ifindex`, in the calling thread's namespace): the one this
    /// process already attached, or a fresh one.
    pub(super) fn get(
        iface: &str,
        ifindex: u32,
        mode: AttachMode,
        api: AttachApi,
    ) -> Result<Arc<Attachment>, PortError> {
        let key = (netns_id(), ifindex);
        let mut reg = registry().lock().unwrap_or_else(|e| e.into_inner());
        if let Some(a) = reg.get(&key).and_then(Weak::upgrade) {
            return Ok(a);
        }
        let (loaded, hook, replaced) = load_and_attach(iface, ifindex, mode, api)?;
        let a = Arc::new(Attachment {
            iface: iface.to_string(),
            key,
            hook,
            loaded,
            replaced,
        });
        reg.insert(key, Arc::downgrade(&a));
        Ok(a)
    }

    /// Puts the AF_XDP socket `xsk` in the map for `queue`.
    pub(super) fn set_queue(&self, queue: u32, xsk: i32) -> Result<(), PortError> {
        let key = queue;
        let val = xsk as u32;
        let mut a = sys::MapElemAttr {
            map_fd: self.loaded.map.as_raw_fd() as u32,
            key: &key as *const u32 as u64,
            value: &val as *const u32 as u64,
            ..Default::default()
        };
        sys::bpf(sys::BPF_MAP_UPDATE_ELEM, &mut a)
            .map(|_| ())
            .map_err(|e| sys::err_of(&self.iface, "bpf(BPF_MAP_UPDATE_ELEM, XSKMAP)", e))
    }

    /// Removes `queue` from the map.
    pub(super) fn clear_queue(&self, queue: u32) {
        let key = queue;
        let mut a = sys::MapElemAttr {
            map_fd: self.loaded.map.as_raw_fd() as u32,
            key: &key as *const u32 as u64,
            ..Default::default()
        };
        let _ = sys::bpf(sys::BPF_MAP_DELETE_ELEM, &mut a);
    }

    /// The mode the program was attached in (Native or Generic).
    pub fn mode(&self) -> AttachMode {
        self.hook.mode
    }

    /// Whether the program was loaded frags-aware (frames in several buffers reach it).
    pub fn frags(&self) -> bool {
        self.loaded.frags
    }

    /// What the program puts in front of redirected packets.
    pub fn rx_meta(&self) -> RxMeta {
        self.loaded.meta
    }

    /// The kernel id of a stale program of ours that was removed to attach this one.
    pub fn replaced(&self) -> Option<u32> {
        self.replaced
    }
}

/// The command that detaches the XDP program attached to `iface` in `mode` (the attach mode
/// rtnetlink reports: 1 native, 2 generic, 3 offloaded): `xdp off` leaves a generic program
/// attached, so each mode is named by its own keyword.
pub fn detach_command(iface: &str, mode: u8) -> String {
    let kind = match mode {
        2 => "xdpgeneric",
        3 => "xdpoffload",
        _ => "xdpdrv",
    };
    format!("ip link set dev {iface} {kind} off")
}

/// Finds a program already attached to `ifindex`: one of ours (by name: the socket redirect or
/// the kernel forwarder) is detached and its id
/// returned; another tool's is an error naming it.
fn remove_stale(nl: &Netlink, iface: &str, ifindex: u32) -> Result<Option<u32>, PortError> {
    let cur =
        sys::xdp_query(nl, ifindex).map_err(|e| sys::err_of(iface, "rtnetlink RTM_GETLINK", e))?;
    if cur.prog_id == 0 {
        return Ok(None);
    }
    let name = sys::prog_name_by_id(cur.prog_id).unwrap_or_default();
    if name != PROG_NAME && name != META_PROG_NAME && name != FWD_PROG_NAME {
        return Err(PortError::Os {
            iface: iface.to_string(),
            op: "attaching the XDP program",
            source: std::io::Error::other(format!(
                "XDP program '{name}' (id {}) is already attached",
                cur.prog_id
            )),
            hint: format!(
                " (another tool's program: remove it with `{}` if it is not needed)",
                detach_command(iface, cur.mode)
            )
            .into(),
        });
    }
    let flags = match cur.mode {
        1 => sys::XDP_FLAGS_DRV_MODE,
        2 => sys::XDP_FLAGS_SKB_MODE,
        _ => 0,
    };
    match sys::xdp_set_netlink(nl, ifindex, -1, flags) {
        Ok(()) => Ok(Some(cur.prog_id)),
        Err(e) if e.raw_os_error() == Some(libc::EBUSY) => Err(PortError::Os {
            iface: iface.to_string(),
            op: "attaching the XDP program",
            source: e,
            hint: " (a running linerate holds this interface through a bpf_link: stop it first)"
                .into(),
        }),
        Err(e) => Err(sys::err_of(
            iface,
            "rtnetlink detach of a stale XDP program",
            e,
        )),
    }
}

impl Drop for Attachment {
    fn drop(&mut self) {
        let mut reg = registry().lock().unwrap_or_else(|e| e.into_inner());
        if reg.get(&self.key).is_some_and(|w| w.strong_count() == 0) {
            reg.remove(&self.key);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn the_detach_command_names_the_interface_and_the_mode_keyword() {
        assert_eq!(detach_command("vA", 2), "ip link set dev vA xdpgeneric off");
        assert_eq!(detach_command("eth0", 1), "ip link set dev eth0 xdpdrv off");
        assert_eq!(
            detach_command("eth0", 3),
            "ip link set dev eth0 xdpoffload off"
        );
    }

    #[test]
    fn committed_object_parses_to_a_map_load_and_a_license() {
        let p = obj::parse(OBJECT, "xdp_redirect.o").unwrap();
        assert!(p.insns.len() >= 4);
        assert_eq!(p.maps.len(), 1);
        assert_eq!(p.maps[0].1, MAP_NAME);
        assert_eq!(p.insns[p.maps[0].0][0], 0x18);
        assert!(p.license.starts_with(b"Dual MIT/GPL"));
        // The last instruction is `exit`.
        assert_eq!(p.insns.last().unwrap()[0], 0x95);
    }
}

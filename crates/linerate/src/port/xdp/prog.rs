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

use super::sys::{self, Fd, Netlink};
use crate::port::PortError;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

/// The compiled program (rebuilt by `bpf/build.sh`, checked by `tests/xdp_object.rs`).
pub const OBJECT: &[u8] = include_bytes!("../../../../../bpf/xdp_redirect.o");
/// The program's name in the object and in the kernel (how a stale one is recognised).
pub const PROG_NAME: &str = "lr_xsk_redirect";
/// The map symbol the program refers to.
const MAP_NAME: &str = "xsks_map";
/// Queues one interface's map can hold.
const MAP_ENTRIES: u32 = 256;

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

/// Why the object could not be loaded.
fn bad_object(why: &str) -> PortError {
    PortError::Unsupported {
        port: format!("bpf/xdp_redirect.o ({why})"),
        op: "loading the XDP program",
    }
}

fn le_u16(b: &[u8], o: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(o..o + 2)?.try_into().ok()?))
}
fn le_u32(b: &[u8], o: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?))
}
fn le_u64(b: &[u8], o: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(o..o + 8)?.try_into().ok()?))
}

/// A section of the object: name, type, file range, link and info fields.
#[derive(Debug)]
struct Section<'a> {
    name: &'a str,
    ty: u32,
    data: &'a [u8],
    link: u32,
    info: u32,
}

fn sections(obj: &[u8]) -> Option<Vec<Section<'_>>> {
    if obj.get(..4)? != b"\x7fELF" || *obj.get(4)? != 2 || *obj.get(5)? != 1 {
        return None; // not ELF64 little-endian
    }
    let shoff = le_u64(obj, 0x28)? as usize;
    let shentsize = le_u16(obj, 0x3a)? as usize;
    let shnum = le_u16(obj, 0x3c)? as usize;
    let shstrndx = le_u16(obj, 0x3e)? as usize;
    if shentsize < 64 || shoff.checked_add(shnum.checked_mul(shentsize)?)? > obj.len() {
        return None;
    }
    let raw = |i: usize| -> Option<(u32, u32, &[u8], u32, u32)> {
        let h = shoff.checked_add(i.checked_mul(shentsize)?)?;
        let name = le_u32(obj, h)?;
        let ty = le_u32(obj, h + 4)?;
        let off = le_u64(obj, h + 24)? as usize;
        let size = le_u64(obj, h + 32)? as usize;
        let data = if ty == 8 {
            &[][..] // SHT_NOBITS
        } else {
            obj.get(off..off.checked_add(size)?)?
        };
        Some((name, ty, data, le_u32(obj, h + 40)?, le_u32(obj, h + 44)?))
    };
    let (_, _, strtab, _, _) = raw(shstrndx)?;
    let mut out = Vec::with_capacity(shnum);
    for i in 0..shnum {
        let (n, ty, data, link, info) = raw(i)?;
        out.push(Section {
            name: cstr(strtab, n as usize)?,
            ty,
            data,
            link,
            info,
        });
    }
    Some(out)
}

fn cstr(tab: &[u8], off: usize) -> Option<&str> {
    let s = tab.get(off..)?;
    let end = s.iter().position(|&b| b == 0)?;
    std::str::from_utf8(&s[..end]).ok()
}

/// The program's instructions with the map reference located, and its license.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Parsed {
    /// Instructions, 8 bytes each.
    pub insns: Vec<[u8; 8]>,
    /// Index of the `ld_imm64` instruction that loads the map.
    pub map_insn: usize,
    /// License string (NUL-terminated).
    pub license: Vec<u8>,
}

/// Parses the object: the `xdp` section, its one relocation against `xsks_map`, the license.
pub(super) fn parse(obj: &[u8]) -> Result<Parsed, PortError> {
    let secs = sections(obj).ok_or_else(|| bad_object("not a well-formed ELF64 LE object"))?;
    let (xdp_idx, xdp) = secs
        .iter()
        .enumerate()
        .find(|(_, s)| s.name == "xdp")
        .ok_or_else(|| bad_object("no 'xdp' section"))?;
    if xdp.data.is_empty() || !xdp.data.len().is_multiple_of(8) {
        return Err(bad_object("'xdp' section is not whole instructions"));
    }
    let insns: Vec<[u8; 8]> = xdp
        .data
        .chunks_exact(8)
        .map(|c| [c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]])
        .collect();
    let rels: Vec<&Section> = secs
        .iter()
        .filter(|s| s.ty == 9 && s.info as usize == xdp_idx)
        .collect();
    let [rel] = rels.as_slice() else {
        return Err(bad_object("expected one relocation section for 'xdp'"));
    };
    if rel.data.len() != 16 {
        return Err(bad_object("expected exactly one relocation (the map)"));
    }
    let r_offset = le_u64(rel.data, 0).unwrap_or(u64::MAX) as usize;
    let sym = (le_u64(rel.data, 8).unwrap_or(0) >> 32) as usize;
    let symtab = secs
        .get(rel.link as usize)
        .filter(|s| s.ty == 2)
        .ok_or_else(|| bad_object("relocation without a symbol table"))?;
    let strtab = secs
        .get(symtab.link as usize)
        .ok_or_else(|| bad_object("symbol table without names"))?;
    let name_off = le_u32(symtab.data, sym * 24).ok_or_else(|| bad_object("bad symbol index"))?;
    if cstr(strtab.data, name_off as usize) != Some(MAP_NAME) {
        return Err(bad_object("the relocation is not against 'xsks_map'"));
    }
    let map_insn = r_offset / 8;
    if !r_offset.is_multiple_of(8) || insns.get(map_insn).map(|i| i[0]) != Some(0x18) {
        return Err(bad_object("the map relocation is not on an ld_imm64"));
    }
    let license = secs
        .iter()
        .find(|s| s.name == "license")
        .map(|s| s.data.to_vec())
        .filter(|l| l.last() == Some(&0))
        .ok_or_else(|| bad_object("no NUL-terminated 'license' section"))?;
    Ok(Parsed {
        insns,
        map_insn,
        license,
    })
}

/// A loaded program and its map.
pub(super) struct Loaded {
    pub(super) map: Fd,
    pub(super) prog: Fd,
}

/// Creates the XSKMAP and loads the program against it.
pub(super) fn load(iface: &str) -> Result<Loaded, PortError> {
    let mut p = parse(OBJECT)?;
    let mut name = [0u8; 16];
    name[..8].copy_from_slice(b"lr_xsks\0");
    let mut m = sys::MapCreateAttr {
        map_type: sys::BPF_MAP_TYPE_XSKMAP,
        key_size: 4,
        value_size: 4,
        max_entries: MAP_ENTRIES,
        map_name: name,
        ..Default::default()
    };
    let map = Fd(sys::bpf(sys::BPF_MAP_CREATE, &mut m)
        .map_err(|e| sys::err_of(iface, "bpf(BPF_MAP_CREATE, XSKMAP)", e))?);
    let i = &mut p.insns[p.map_insn];
    i[1] = (i[1] & 0x0f) | (1 << 4); // src_reg = BPF_PSEUDO_MAP_FD
    i[4..8].copy_from_slice(&map.0.to_le_bytes());
    let mut log = vec![0u8; 4096];
    let mut pname = [0u8; 16];
    pname[..PROG_NAME.len()].copy_from_slice(PROG_NAME.as_bytes());
    let mut a = sys::ProgLoadAttr {
        prog_type: sys::BPF_PROG_TYPE_XDP,
        insn_cnt: p.insns.len() as u32,
        insns: p.insns.as_ptr() as u64,
        license: p.license.as_ptr() as u64,
        log_level: 1,
        log_size: log.len() as u32,
        log_buf: log.as_mut_ptr() as u64,
        prog_name: pname,
        expected_attach_type: sys::BPF_XDP,
        ..Default::default()
    };
    let prog = match sys::bpf(sys::BPF_PROG_LOAD, &mut a) {
        Ok(fd) => Fd(fd),
        Err(e) => {
            let end = log.iter().position(|&b| b == 0).unwrap_or(0);
            if end > 0 {
                eprintln!(
                    "linerate: verifier log:\n{}",
                    String::from_utf8_lossy(&log[..end])
                );
            }
            return Err(sys::err_of(iface, "bpf(BPF_PROG_LOAD)", e));
        }
    };
    Ok(Loaded { map, prog })
}

/// The program attached to one interface, shared by the ports of the process on it.
pub struct Attachment {
    iface: String,
    ifindex: u32,
    key: (u64, u32),
    loaded: Loaded,
    /// The bpf_link, or the netlink socket to detach with (and the attach flags).
    how: How,
    mode: AttachMode,
    replaced: Option<u32>,
}

enum How {
    Link(#[allow(dead_code)] Fd),
    Netlink(Netlink, u32),
}

impl std::fmt::Debug for Attachment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Attachment")
            .field("iface", &self.iface)
            .field("mode", &self.mode)
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
        let a = Arc::new(Self::attach(iface, ifindex, key, mode, api)?);
        reg.insert(key, Arc::downgrade(&a));
        Ok(a)
    }

    fn attach(
        iface: &str,
        ifindex: u32,
        key: (u64, u32),
        mode: AttachMode,
        api: AttachApi,
    ) -> Result<Attachment, PortError> {
        let loaded = load(iface)?;
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
        let mut done = None;
        for &(m, flags) in modes {
            let r = match api {
                AttachApi::Link => {
                    let mut a = sys::LinkCreateAttr {
                        prog_fd: loaded.prog.0 as u32,
                        target_ifindex: ifindex,
                        attach_type: sys::BPF_XDP,
                        flags,
                        ..Default::default()
                    };
                    sys::bpf(sys::BPF_LINK_CREATE, &mut a).map(|fd| Some(Fd(fd)))
                }
                // XDP_FLAGS_UPDATE_IF_NOEXIST: never replace a program silently.
                AttachApi::Netlink => {
                    sys::xdp_set_netlink(&nl, ifindex, loaded.prog.0, flags | 1).map(|()| None)
                }
            };
            match r {
                Ok(link) => {
                    done = Some((m, flags, link));
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        if let Some((m, flags, link)) = done {
            let how = match link {
                Some(fd) => How::Link(fd),
                None => How::Netlink(nl, flags),
            };
            return Ok(Attachment {
                iface: iface.to_string(),
                ifindex,
                key,
                loaded,
                how,
                mode: m,
                replaced,
            });
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

    /// Puts the AF_XDP socket `xsk` in the map for `queue`.
    pub(super) fn set_queue(&self, queue: u32, xsk: i32) -> Result<(), PortError> {
        let key = queue;
        let val = xsk as u32;
        let mut a = sys::MapElemAttr {
            map_fd: self.loaded.map.0 as u32,
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
            map_fd: self.loaded.map.0 as u32,
            key: &key as *const u32 as u64,
            ..Default::default()
        };
        let _ = sys::bpf(sys::BPF_MAP_DELETE_ELEM, &mut a);
    }

    /// The mode the program was attached in (Native or Generic).
    pub fn mode(&self) -> AttachMode {
        self.mode
    }

    /// The kernel id of a stale program of ours that was removed to attach this one.
    pub fn replaced(&self) -> Option<u32> {
        self.replaced
    }
}

/// Finds a program already attached to `ifindex`: ours (by name) is detached and its id
/// returned; another tool's is an error naming it.
fn remove_stale(nl: &Netlink, iface: &str, ifindex: u32) -> Result<Option<u32>, PortError> {
    let cur =
        sys::xdp_query(nl, ifindex).map_err(|e| sys::err_of(iface, "rtnetlink RTM_GETLINK", e))?;
    if cur.prog_id == 0 {
        return Ok(None);
    }
    let name = sys::prog_name_by_id(cur.prog_id).unwrap_or_default();
    if name != PROG_NAME {
        return Err(PortError::Os {
            iface: iface.to_string(),
            op: "attaching the XDP program",
            source: std::io::Error::other(format!(
                "XDP program '{name}' (id {}) is already attached",
                cur.prog_id
            )),
            hint: " (another tool's program: remove it with `ip link set dev IFACE xdp off` \
                   if it is not needed)",
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
            hint: " (a running linerate holds this interface through a bpf_link: stop it first)",
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
        if let How::Netlink(nl, flags) = &self.how {
            let _ = sys::xdp_set_netlink(nl, self.ifindex, -1, *flags);
        }
        // A bpf_link detaches when its descriptor closes (dropped with `how`).
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
    fn committed_object_parses_to_a_map_load_and_a_license() {
        let p = parse(OBJECT).unwrap();
        assert!(p.insns.len() >= 4);
        assert_eq!(p.insns[p.map_insn][0], 0x18);
        assert!(p.license.starts_with(b"Dual MIT/GPL"));
        // The last instruction is `exit`.
        assert_eq!(p.insns.last().unwrap()[0], 0x95);
    }

    #[test]
    fn damaged_objects_are_errors_not_panics() {
        assert!(parse(&[]).is_err());
        assert!(parse(b"\x7fELF").is_err());
        for cut in [16, 64, 200, OBJECT.len() / 2, OBJECT.len() - 1] {
            assert!(parse(&OBJECT[..cut]).is_err(), "cut at {cut}");
        }
        let mut o = OBJECT.to_vec();
        let mut x = 7u32;
        for _ in 0..2000 {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            let i = (x as usize >> 8) % o.len();
            let old = o[i];
            o[i] ^= (x >> 3) as u8 | 1;
            let _ = parse(&o);
            o[i] = old;
        }
    }
}

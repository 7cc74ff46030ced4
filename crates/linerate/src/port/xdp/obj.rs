//! A small loader for linerate's own BPF objects (bpf/*.o, built by `bpf/build.sh` from the C
//! sources beside them and committed): reads the ELF object's `xdp` section, resolves each
//! `ld_imm64` relocation against a map symbol of the `.maps` section to a map the caller created,
//! resolves each call of a kernel function (`extern ... __ksym`) to its id in the kernel's BTF
//! (`/sys/kernel/btf/vmlinux`) or, where it cannot be used, replaces the call by
//! `r0 = -EOPNOTSUPP`, and calls `BPF_PROG_LOAD` (bound to an interface when asked: the XDP
//! metadata kernel functions need it). That is all linerate's programs use: no global data, no
//! BPF-to-BPF calls (helpers are `static __always_inline`), no BTF of their own. Anything else
//! in the object is refused with an error that names the object.

use super::sys;
use crate::port::PortError;
use std::os::fd::{AsRawFd, OwnedFd};

/// Why the object `what` could not be used.
fn bad(what: &str, why: &str) -> PortError {
    PortError::Unsupported {
        port: format!("{what} ({why})"),
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

/// SHT_SYMTAB, SHT_REL.
const SHT_SYMTAB: u32 = 2;
const SHT_REL: u32 = 9;
/// R_BPF_64_64: the 64-bit immediate of an `ld_imm64`.
const R_BPF_64_64: u32 = 1;
/// R_BPF_64_32: the 32-bit immediate of a call (here: of a kernel function).
const R_BPF_64_32: u32 = 10;
/// `call` and its source register values: a kernel function by BTF id.
const BPF_CALL: u8 = 0x85;
const BPF_PSEUDO_CALL: u8 = 1;
const BPF_PSEUDO_KFUNC_CALL: u8 = 2;
/// BPF_PROG_LOAD flag: the program may only be attached to its interface (`prog_ifindex`),
/// which lets it call that device's XDP metadata kernel functions (kernel 6.3+).
const BPF_F_XDP_DEV_BOUND_ONLY: u32 = 1 << 6;
/// The program handles frames in several buffers (multi-buffer XDP, Linux 5.18; libbpf's
/// `xdp.frags` section): it reads only the first buffer's bytes between `data` and
/// `data_end`, so jumbo frames reach it whole instead of being refused.
const BPF_F_XDP_HAS_FRAGS: u32 = 1 << 5;

/// An object's program: instructions, the map each `ld_imm64` refers to, and the license.
#[derive(Debug, PartialEq, Eq)]
pub struct Object {
    /// What the object is called in errors (its file name).
    pub what: String,
    /// Instructions, 8 bytes each.
    pub insns: Vec<[u8; 8]>,
    /// (index of an `ld_imm64` instruction, name of the map it loads), in instruction order.
    pub maps: Vec<(usize, String)>,
    /// (index of a `call` instruction, name of the kernel function it calls).
    pub kfuncs: Vec<(usize, String)>,
    /// License string (NUL-terminated).
    pub license: Vec<u8>,
}

/// Parses object `obj` (called `what` in errors): its `xdp` section and that section's map
/// relocations.
pub fn parse(obj: &[u8], what: &str) -> Result<Object, PortError> {
    parse_section(obj, what, "xdp")
}

/// [`parse`] for the program in section `section` (`raw_tracepoint` for a tracing program).
pub fn parse_section(obj: &[u8], what: &str, section: &str) -> Result<Object, PortError> {
    let bad = |why: &str| bad(what, why);
    let secs = sections(obj).ok_or_else(|| bad("not a well-formed ELF64 LE object"))?;
    let (xdp_idx, xdp) = secs
        .iter()
        .enumerate()
        .find(|(_, s)| s.name == section)
        .ok_or_else(|| bad(&format!("no '{section}' section")))?;
    if xdp.data.is_empty() || !xdp.data.len().is_multiple_of(8) {
        return Err(bad(&format!(
            "'{section}' section is not whole instructions"
        )));
    }
    let insns: Vec<[u8; 8]> = xdp
        .data
        .chunks_exact(8)
        .map(|c| [c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]])
        .collect();
    let maps_idx = secs.iter().position(|s| s.name == ".maps");
    let mut maps = Vec::new();
    let mut kfuncs = Vec::new();
    for rel in secs
        .iter()
        .filter(|s| s.ty == SHT_REL && s.info as usize == xdp_idx)
    {
        let symtab = secs
            .get(rel.link as usize)
            .filter(|s| s.ty == SHT_SYMTAB)
            .ok_or_else(|| bad("relocation without a symbol table"))?;
        let strtab = secs
            .get(symtab.link as usize)
            .ok_or_else(|| bad("symbol table without names"))?;
        for r in rel.data.chunks(16) {
            let (Some(off), Some(info)) = (le_u64(r, 0), le_u64(r, 8)) else {
                return Err(bad("truncated relocation"));
            };
            let sym = (info >> 32) as usize;
            let s = sym
                .checked_mul(24)
                .and_then(|o| symtab.data.get(o..o + 24))
                .ok_or_else(|| bad("bad symbol index"))?;
            let shndx = le_u16(s, 6).unwrap_or(0) as usize;
            let i = off as usize / 8;
            if info as u32 == R_BPF_64_32 && shndx == 0 {
                // A call of an undefined (extern) function: a kernel function.
                let name = le_u32(s, 0)
                    .and_then(|n| cstr(strtab.data, n as usize))
                    .ok_or_else(|| bad("bad symbol name"))?;
                let ok = off.is_multiple_of(8)
                    && insns
                        .get(i)
                        .is_some_and(|x| x[0] == BPF_CALL && x[1] >> 4 == BPF_PSEUDO_CALL);
                if !ok {
                    return Err(bad("a kernel function relocation that is not on a call"));
                }
                kfuncs.push((i, name.to_string()));
                continue;
            }
            if info as u32 != R_BPF_64_64 {
                return Err(bad("a relocation other than a map load or a kernel function call (BPF-to-BPF call?)"));
            }
            if Some(shndx) != maps_idx {
                return Err(bad(
                    "a reference to global data; linerate's programs keep state in maps",
                ));
            }
            let name = le_u32(s, 0)
                .and_then(|n| cstr(strtab.data, n as usize))
                .ok_or_else(|| bad("bad symbol name"))?;
            if !off.is_multiple_of(8) || insns.get(i).map(|i| i[0]) != Some(0x18) {
                return Err(bad("a map relocation that is not on an ld_imm64"));
            }
            maps.push((i, name.to_string()));
        }
    }
    maps.sort();
    kfuncs.sort();
    let license = secs
        .iter()
        .find(|s| s.name == "license")
        .map(|s| s.data.to_vec())
        .filter(|l| l.last() == Some(&0))
        .ok_or_else(|| bad("no NUL-terminated 'license' section"))?;
    Ok(Object {
        what: what.to_string(),
        insns,
        maps,
        kfuncs,
        license,
    })
}

/// How the kernel functions a program calls are handled at load.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kfuncs {
    /// Every call becomes `r0 = -EOPNOTSUPP` (the program is not bound to a device).
    Stub,
    /// Bound to interface `ifindex`: calls resolved in the kernel's BTF; a function the kernel
    /// does not have becomes `r0 = -EOPNOTSUPP`.
    DeviceBound(u32),
}

/// The instruction `r0 = -EOPNOTSUPP` (a 64-bit move of a sign-extended immediate).
fn eopnotsupp() -> [u8; 8] {
    let imm = (-libc::EOPNOTSUPP).to_le_bytes();
    [0xb7, 0x00, 0, 0, imm[0], imm[1], imm[2], imm[3]]
}

impl Object {
    /// Loads the program as an XDP program called `name` (at most 15 bytes), with each map
    /// reference patched to the descriptor given for that map name in `maps`. `iface` names the
    /// interface the program is for, in errors; the verifier's log is printed when it refuses.
    pub(crate) fn load(
        &self,
        iface: &str,
        name: &str,
        maps: &[(&str, &OwnedFd)],
    ) -> Result<OwnedFd, PortError> {
        self.load_with(iface, name, maps, Kfuncs::Stub)
    }

    /// [`Object::load`], with the program's kernel function calls handled as `kfuncs` says.
    /// Returns the program and the kernel functions that were resolved (not stubbed).
    pub(crate) fn load_with(
        &self,
        iface: &str,
        name: &str,
        maps: &[(&str, &OwnedFd)],
        kfuncs: Kfuncs,
    ) -> Result<OwnedFd, PortError> {
        self.load_resolved(iface, name, maps, kfuncs, false)
            .map(|(fd, _, _)| fd)
    }

    /// [`Object::load_with`], also returning the names of the kernel functions resolved.
    /// `quiet`: do not print the verifier's log when the kernel refuses (the caller has a
    /// fallback).
    pub(crate) fn load_resolved(
        &self,
        iface: &str,
        name: &str,
        maps: &[(&str, &OwnedFd)],
        kfuncs: Kfuncs,
        quiet: bool,
    ) -> Result<(OwnedFd, Vec<String>, bool), PortError> {
        // Frags-aware first (every XDP program of bpf/ reads only the headers of the first
        // buffer); a kernel before 5.18 refuses the flag: then without it.
        match self.load_typed(
            iface,
            name,
            maps,
            kfuncs,
            true,
            (sys::BPF_PROG_TYPE_XDP, sys::BPF_XDP),
            BPF_F_XDP_HAS_FRAGS,
        ) {
            Ok((fd, r)) => Ok((fd, r, true)),
            Err(_) => self
                .load_typed(
                    iface,
                    name,
                    maps,
                    kfuncs,
                    quiet,
                    (sys::BPF_PROG_TYPE_XDP, sys::BPF_XDP),
                    0,
                )
                .map(|(fd, r)| (fd, r, false)),
        }
    }

    /// Loads the program as a raw tracepoint program (`BPF_PROG_TYPE_RAW_TRACEPOINT`) called
    /// `name`, maps patched as in [`Object::load`]; `quiet` as in [`Object::load_resolved`].
    pub(crate) fn load_raw_tracepoint(
        &self,
        name: &str,
        maps: &[(&str, &OwnedFd)],
        quiet: bool,
    ) -> Result<OwnedFd, PortError> {
        self.load_typed(
            &self.what,
            name,
            maps,
            Kfuncs::Stub,
            quiet,
            (sys::BPF_PROG_TYPE_RAW_TRACEPOINT, 0),
            0,
        )
        .map(|(fd, _)| fd)
    }

    /// Loads the program as program type and expected attach type `ty`, with `flags`.
    #[allow(clippy::too_many_arguments)]
    fn load_typed(
        &self,
        iface: &str,
        name: &str,
        maps: &[(&str, &OwnedFd)],
        kfuncs: Kfuncs,
        quiet: bool,
        ty: (u32, u32),
        flags: u32,
    ) -> Result<(OwnedFd, Vec<String>), PortError> {
        let mut insns = self.insns.clone();
        let mut resolved = Vec::new();
        let names: Vec<&str> = self.kfuncs.iter().map(|(_, f)| f.as_str()).collect();
        let ids = match kfuncs {
            Kfuncs::DeviceBound(_) if !names.is_empty() => btf::vmlinux_func_ids(&names),
            _ => vec![None; names.len()],
        };
        for ((i, f), id) in self.kfuncs.iter().zip(ids) {
            insns[*i] = match id {
                Some(id) => {
                    resolved.push(f.clone());
                    let b = id.to_le_bytes();
                    [
                        BPF_CALL,
                        BPF_PSEUDO_KFUNC_CALL << 4,
                        0,
                        0,
                        b[0],
                        b[1],
                        b[2],
                        b[3],
                    ]
                }
                None => eopnotsupp(),
            };
        }
        for (i, map) in &self.maps {
            let fd = maps
                .iter()
                .find(|(n, _)| n == map)
                .map(|(_, fd)| fd.as_raw_fd())
                .ok_or_else(|| bad(&self.what, &format!("map '{map}' was not created")))?;
            let insn = &mut insns[*i];
            insn[1] = (insn[1] & 0x0f) | (1 << 4); // src_reg = BPF_PSEUDO_MAP_FD
            insn[4..8].copy_from_slice(&fd.to_le_bytes());
        }
        let mut log = vec![0u8; 1 << 16];
        let mut pname = [0u8; 16];
        let n = name.len().min(15);
        pname[..n].copy_from_slice(&name.as_bytes()[..n]);
        let mut a = sys::ProgLoadAttr {
            prog_type: ty.0,
            insn_cnt: insns.len() as u32,
            insns: insns.as_ptr() as u64,
            license: self.license.as_ptr() as u64,
            log_level: 1,
            log_size: log.len() as u32,
            log_buf: log.as_mut_ptr() as u64,
            prog_name: pname,
            expected_attach_type: ty.1,
            prog_flags: flags,
            ..Default::default()
        };
        if let Kfuncs::DeviceBound(ifindex) = kfuncs {
            a.prog_ifindex = ifindex;
            a.prog_flags |= BPF_F_XDP_DEV_BOUND_ONLY;
        }
        match sys::bpf_fd(sys::BPF_PROG_LOAD, &mut a) {
            Ok(fd) => Ok((fd, resolved)),
            Err(e) => {
                let end = log.iter().position(|&b| b == 0).unwrap_or(0);
                if end > 0 && !quiet {
                    eprintln!(
                        "linerate: verifier log for {}:\n{}",
                        self.what,
                        String::from_utf8_lossy(&log[..end])
                    );
                }
                Err(sys::err_of(iface, "bpf(BPF_PROG_LOAD)", e))
            }
        }
    }
}

/// Kernel function ids from the kernel's BTF.
pub(crate) mod btf {
    use super::{le_u16, le_u32};

    /// Where the running kernel describes its types.
    const VMLINUX: &str = "/sys/kernel/btf/vmlinux";
    /// BTF_KIND_FUNC.
    const KIND_FUNC: u32 = 12;

    /// The BTF type ids of the functions called `names` in the running kernel (None for a
    /// name it does not have, or every name when it has no BTF).
    pub(crate) fn vmlinux_func_ids(names: &[&str]) -> Vec<Option<u32>> {
        match std::fs::read(VMLINUX) {
            Ok(b) => func_ids(&b, names),
            Err(_) => vec![None; names.len()],
        }
    }

    /// Bytes that follow a type's 12-byte header, by kind (`vlen` members where it has them).
    fn extra(kind: u32, vlen: usize) -> Option<usize> {
        Some(match kind {
            1 => 4,                                      // INT
            2 | 7 | 8 | 9 | 10 | 11 | 12 | 16 | 18 => 0, // PTR FWD TYPEDEF VOLATILE CONST RESTRICT FUNC FLOAT TYPE_TAG
            3 => 12,                                     // ARRAY
            4 | 5 => 12 * vlen,                          // STRUCT UNION
            6 => 8 * vlen,                               // ENUM
            13 => 8 * vlen,                              // FUNC_PROTO
            14 => 4,                                     // VAR
            15 => 12 * vlen,                             // DATASEC
            17 => 4,                                     // DECL_TAG
            19 => 12 * vlen,                             // ENUM64
            _ => return None,
        })
    }

    /// [`vmlinux_func_ids`] over BTF bytes `b` (little-endian, as on the machines linerate
    /// runs on). Malformed BTF gives None for every name still unfound, never a panic.
    pub(crate) fn func_ids(b: &[u8], names: &[&str]) -> Vec<Option<u32>> {
        let mut out = vec![None; names.len()];
        if le_u16(b, 0) != Some(0xeb9f) {
            return out;
        }
        let (Some(hdr), Some(toff), Some(tlen), Some(soff), Some(slen)) = (
            le_u32(b, 4),
            le_u32(b, 8),
            le_u32(b, 12),
            le_u32(b, 16),
            le_u32(b, 20),
        ) else {
            return out;
        };
        let (hdr, toff, tlen, soff, slen) = (
            hdr as usize,
            toff as usize,
            tlen as usize,
            soff as usize,
            slen as usize,
        );
        let Some(types) = b.get(hdr + toff..hdr + toff + tlen) else {
            return out;
        };
        let Some(strs) = b.get(hdr + soff..hdr + soff + slen) else {
            return out;
        };
        let mut off = 0usize;
        let mut id = 1u32;
        let mut left = names.len();
        while off + 12 <= types.len() && left > 0 {
            let (Some(name_off), Some(info)) = (le_u32(types, off), le_u32(types, off + 4)) else {
                break;
            };
            let kind = (info >> 24) & 0x1f;
            let vlen = (info & 0xffff) as usize;
            if kind == KIND_FUNC {
                if let Some(n) = super::cstr(strs, name_off as usize) {
                    for (k, want) in names.iter().enumerate() {
                        if out[k].is_none() && n == *want {
                            out[k] = Some(id);
                            left -= 1;
                        }
                    }
                }
            }
            let Some(x) = extra(kind, vlen) else { break };
            off += 12 + x;
            id += 1;
        }
        out
    }
    /// For each (struct, member path) of `want`, the byte offset of member path `path`
    /// (`["nd_net", "net"]`) in struct `strukt` of the running kernel's BTF, members of
    /// anonymous structs and unions included; None when the kernel has no BTF or no such
    /// member. The BTF is read and parsed once.
    pub(crate) fn vmlinux_member_offsets(want: &[(&str, &[&str])]) -> Vec<Option<u32>> {
        let Ok(b) = std::fs::read(VMLINUX) else {
            return vec![None; want.len()];
        };
        let Some((tys, strs)) = types(&b) else {
            return vec![None; want.len()];
        };
        want.iter()
            .map(|(s, p)| offset_in(&tys, strs, s, p))
            .collect()
    }

    /// One type: kind, name offset, info word, size-or-type word, the bytes after the header.
    type Ty<'a> = (u32, u32, u32, u32, &'a [u8]);

    /// Every type of BTF `b` by id (index 0 is the void type), and the string section.
    fn types(b: &[u8]) -> Option<(Vec<Ty<'_>>, &'_ [u8])> {
        if le_u16(b, 0) != Some(0xeb9f) {
            return None;
        }
        let hdr = le_u32(b, 4)? as usize;
        let (toff, tlen) = (le_u32(b, 8)? as usize, le_u32(b, 12)? as usize);
        let (soff, slen) = (le_u32(b, 16)? as usize, le_u32(b, 20)? as usize);
        let types = b.get(hdr.checked_add(toff)?..hdr.checked_add(toff)?.checked_add(tlen)?)?;
        let strs = b.get(hdr.checked_add(soff)?..hdr.checked_add(soff)?.checked_add(slen)?)?;
        let mut out: Vec<Ty<'_>> = vec![(0, 0, 0, 0, &[])];
        let mut off = 0usize;
        while off + 12 <= types.len() {
            let (name, info, st) = (
                le_u32(types, off)?,
                le_u32(types, off + 4)?,
                le_u32(types, off + 8)?,
            );
            let kind = (info >> 24) & 0x1f;
            let x = extra(kind, (info & 0xffff) as usize)?;
            let data = types.get(off + 12..off + 12 + x)?;
            out.push((kind, name, info, st, data));
            off += 12 + x;
        }
        Some((out, strs))
    }

    /// [`vmlinux_member_offset`] over BTF bytes `b`; never panics on malformed BTF.
    #[cfg(test)]
    pub(crate) fn member_offset(b: &[u8], strukt: &str, path: &[&str]) -> Option<u32> {
        let (tys, strs) = types(b)?;
        offset_in(&tys, strs, strukt, path)
    }

    fn offset_in(tys: &[Ty<'_>], strs: &[u8], strukt: &str, path: &[&str]) -> Option<u32> {
        let name = |o: u32| super::cstr(strs, o as usize).unwrap_or("");
        // Follows typedefs and qualifiers to a struct or union.
        let resolve = |mut id: u32| -> Option<u32> {
            for _ in 0..32 {
                let t = tys.get(id as usize)?;
                match t.0 {
                    4 | 5 => return Some(id),
                    8..=11 | 18 => id = t.3,
                    _ => return None,
                }
            }
            None
        };
        // Finds member `m` of struct/union `id`, searching anonymous members too: (bit offset,
        // member type).
        fn find<'s>(
            tys: &[Ty<'_>],
            name: &dyn Fn(u32) -> &'s str,
            resolve: &dyn Fn(u32) -> Option<u32>,
            id: u32,
            m: &str,
            depth: u32,
        ) -> Option<(u32, u32)> {
            let t = tys.get(id as usize)?;
            let kflag = t.2 >> 31 != 0;
            for mem in t.4.chunks_exact(12) {
                let (mn, mt, mo) = (le_u32(mem, 0)?, le_u32(mem, 4)?, le_u32(mem, 8)?);
                let bits = if kflag { mo & 0xff_ffff } else { mo };
                if name(mn) == m {
                    return Some((bits, mt));
                }
                if mn == 0 && depth < 8 {
                    if let Some(inner) = resolve(mt) {
                        if let Some((o, ty)) = find(tys, name, resolve, inner, m, depth + 1) {
                            return Some((bits.checked_add(o)?, ty));
                        }
                    }
                }
            }
            None
        }
        let mut id = tys
            .iter()
            .position(|t| t.0 == 4 && t.4.len() >= 12 && name(t.1) == strukt)?
            as u32;
        let mut bits = 0u32;
        for (k, m) in path.iter().enumerate() {
            let (o, ty) = find(tys, &name, &resolve, id, m, 0)?;
            bits = bits.checked_add(o)?;
            if k + 1 < path.len() {
                id = resolve(ty)?;
            }
        }
        bits.is_multiple_of(8).then_some(bits / 8)
    }
}

/// Creates a BPF map (`map_type` is a `BPF_MAP_TYPE_*` value) called `name` (at most 15 bytes).
pub(crate) fn create_map(
    iface: &str,
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    name: &str,
) -> Result<OwnedFd, PortError> {
    let mut map_name = [0u8; 16];
    let n = name.len().min(15);
    map_name[..n].copy_from_slice(&name.as_bytes()[..n]);
    let mut m = sys::MapCreateAttr {
        map_type,
        key_size,
        value_size,
        max_entries,
        map_name,
        ..Default::default()
    };
    sys::bpf_fd(sys::BPF_MAP_CREATE, &mut m)
        .map_err(|e| sys::err_of(iface, "bpf(BPF_MAP_CREATE)", e))
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    // The objects linerate ships, as test data.
    const OBJECT: &[u8] = include_bytes!("../../../../../bpf/xdp_redirect.o");
    const META_OBJECT: &[u8] = include_bytes!("../../../../../bpf/xdp_redirect_meta.o");

    #[test]
    fn damaged_objects_are_errors_not_panics() {
        assert!(parse(&[], "x.o").is_err());
        assert!(parse(b"\x7fELF", "x.o").is_err());
        for cut in [16, 64, 200, OBJECT.len() / 2, OBJECT.len() - 1] {
            assert!(parse(&OBJECT[..cut], "x.o").is_err(), "cut at {cut}");
        }
        let mut o = OBJECT.to_vec();
        let mut x = 7u32;
        for _ in 0..2000 {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            let i = (x as usize >> 8) % o.len();
            let old = o[i];
            o[i] ^= (x >> 3) as u8 | 1;
            let _ = parse(&o, "x.o");
            o[i] = old;
        }
    }

    #[test]
    fn kernel_function_calls_are_found_and_btf_lookups_never_panic() {
        let o = parse(META_OBJECT, "m.o").unwrap();
        let names: Vec<&str> = o.kfuncs.iter().map(|(_, n)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "bpf_xdp_metadata_rx_vlan_tag",
                "bpf_xdp_metadata_rx_timestamp"
            ]
        );
        for (i, _) in &o.kfuncs {
            assert_eq!(o.insns[*i][0], BPF_CALL);
        }
        // A tiny BTF: INT "int", FUNC "f" (id 2).
        let mut b = vec![0x9f, 0xeb, 1, 0];
        b.extend_from_slice(&24u32.to_le_bytes()); // hdr_len
        b.extend_from_slice(&0u32.to_le_bytes()); // type_off
        b.extend_from_slice(&28u32.to_le_bytes()); // type_len
        b.extend_from_slice(&28u32.to_le_bytes()); // str_off
        b.extend_from_slice(&7u32.to_le_bytes()); // str_len
        for w in [1u32, 1 << 24, 4, 0x40_0020] {
            b.extend_from_slice(&w.to_le_bytes());
        }
        for w in [5u32, 12 << 24, 0] {
            b.extend_from_slice(&w.to_le_bytes());
        }
        b.extend_from_slice(b"\0int\0f\0");
        assert_eq!(btf::func_ids(&b, &["f", "g", "int"]), [Some(2), None, None]);
        for cut in 0..b.len() {
            let _ = btf::func_ids(&b[..cut], &["f"]);
        }
        let mut x = 3u32;
        for _ in 0..500 {
            let mut c = b.clone();
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            let i = (x as usize >> 8) % c.len();
            c[i] ^= (x >> 3) as u8 | 1;
            let _ = btf::func_ids(&c, &["f"]);
        }
    }

    #[test]
    fn member_offsets_follow_anonymous_members_and_never_panic() {
        // INT "int" (1); STRUCT "in" { int b @32 } (2); STRUCT "out" { int a @0, (anon: in)
        // @64, in c @128 } (3).
        let strs = b"\0int\0in\0b\0out\0a\0c\0";
        let mut t: Vec<u32> = vec![1, 1 << 24, 4, 32];
        t.extend([5, 4 << 24 | 1, 8, 8, 1, 32]);
        t.extend([10, 4 << 24 | 3, 24, 14, 1, 0, 0, 2, 64, 16, 2, 128]);
        let mut b = vec![0x9f, 0xeb, 1, 0];
        let tl = (t.len() * 4) as u32;
        for w in [24u32, 0, tl, tl, strs.len() as u32] {
            b.extend_from_slice(&w.to_le_bytes());
        }
        for w in &t {
            b.extend_from_slice(&w.to_le_bytes());
        }
        b.extend_from_slice(strs);
        assert_eq!(btf::member_offset(&b, "out", &["a"]), Some(0));
        assert_eq!(btf::member_offset(&b, "out", &["b"]), Some(12));
        assert_eq!(btf::member_offset(&b, "out", &["c", "b"]), Some(20));
        assert_eq!(btf::member_offset(&b, "out", &["x"]), None);
        assert_eq!(btf::member_offset(&b, "nope", &["a"]), None);
        for cut in 0..b.len() {
            let _ = btf::member_offset(&b[..cut], "out", &["c", "b"]);
        }
        let mut x = 9u32;
        for _ in 0..2000 {
            let mut c = b.clone();
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            let i = (x as usize >> 8) % c.len();
            c[i] ^= (x >> 3) as u8 | 1;
            let _ = btf::member_offset(&c, "out", &["c", "b"]);
        }
    }

    #[test]
    fn errors_name_the_object() {
        let e = parse(b"not elf", "bpf/some.o").unwrap_err().to_string();
        assert!(e.contains("bpf/some.o"), "{e}");
    }
}

//! A small loader for linerate's own BPF objects (bpf/*.o, built by `bpf/build.sh` from the C
//! sources beside them and committed): reads the ELF object's `xdp` section, resolves each
//! `ld_imm64` relocation against a map symbol of the `.maps` section to a map the caller created,
//! and calls `BPF_PROG_LOAD`. That is all linerate's programs use: no global data, no BPF-to-BPF
//! calls (helpers are `static __always_inline`), no BTF. Anything else in the object is refused
//! with an error that names the object.

use super::sys::{self, Fd};
use crate::port::PortError;

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

/// An object's program: instructions, the map each `ld_imm64` refers to, and the license.
#[derive(Debug, PartialEq, Eq)]
pub struct Object {
    /// What the object is called in errors (its file name).
    pub what: String,
    /// Instructions, 8 bytes each.
    pub insns: Vec<[u8; 8]>,
    /// (index of an `ld_imm64` instruction, name of the map it loads), in instruction order.
    pub maps: Vec<(usize, String)>,
    /// License string (NUL-terminated).
    pub license: Vec<u8>,
}

/// Parses object `obj` (called `what` in errors): its `xdp` section and that section's map
/// relocations.
pub fn parse(obj: &[u8], what: &str) -> Result<Object, PortError> {
    let bad = |why: &str| bad(what, why);
    let secs = sections(obj).ok_or_else(|| bad("not a well-formed ELF64 LE object"))?;
    let (xdp_idx, xdp) = secs
        .iter()
        .enumerate()
        .find(|(_, s)| s.name == "xdp")
        .ok_or_else(|| bad("no 'xdp' section"))?;
    if xdp.data.is_empty() || !xdp.data.len().is_multiple_of(8) {
        return Err(bad("'xdp' section is not whole instructions"));
    }
    let insns: Vec<[u8; 8]> = xdp
        .data
        .chunks_exact(8)
        .map(|c| [c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]])
        .collect();
    let maps_idx = secs.iter().position(|s| s.name == ".maps");
    let mut maps = Vec::new();
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
            if info as u32 != R_BPF_64_64 {
                return Err(bad("a relocation other than a map load (BPF-to-BPF call?)"));
            }
            let s = sym
                .checked_mul(24)
                .and_then(|o| symtab.data.get(o..o + 24))
                .ok_or_else(|| bad("bad symbol index"))?;
            let shndx = le_u16(s, 6).unwrap_or(0) as usize;
            if Some(shndx) != maps_idx {
                return Err(bad(
                    "a reference to global data; linerate's programs keep state in maps",
                ));
            }
            let name = le_u32(s, 0)
                .and_then(|n| cstr(strtab.data, n as usize))
                .ok_or_else(|| bad("bad symbol name"))?;
            let i = off as usize / 8;
            if !off.is_multiple_of(8) || insns.get(i).map(|i| i[0]) != Some(0x18) {
                return Err(bad("a map relocation that is not on an ld_imm64"));
            }
            maps.push((i, name.to_string()));
        }
    }
    maps.sort();
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
        license,
    })
}

impl Object {
    /// Loads the program as an XDP program called `name` (at most 15 bytes), with each map
    /// reference patched to the descriptor given for that map name in `maps`. `iface` names the
    /// interface the program is for, in errors; the verifier's log is printed when it refuses.
    pub(crate) fn load(
        &self,
        iface: &str,
        name: &str,
        maps: &[(&str, &Fd)],
    ) -> Result<Fd, PortError> {
        let mut insns = self.insns.clone();
        for (i, map) in &self.maps {
            let fd = maps
                .iter()
                .find(|(n, _)| n == map)
                .map(|(_, fd)| fd.0)
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
            prog_type: sys::BPF_PROG_TYPE_XDP,
            insn_cnt: insns.len() as u32,
            insns: insns.as_ptr() as u64,
            license: self.license.as_ptr() as u64,
            log_level: 1,
            log_size: log.len() as u32,
            log_buf: log.as_mut_ptr() as u64,
            prog_name: pname,
            expected_attach_type: sys::BPF_XDP,
            ..Default::default()
        };
        match sys::bpf(sys::BPF_PROG_LOAD, &mut a) {
            Ok(fd) => Ok(Fd(fd)),
            Err(e) => {
                let end = log.iter().position(|&b| b == 0).unwrap_or(0);
                if end > 0 {
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

/// Creates a BPF map (`map_type` is a `BPF_MAP_TYPE_*` value) called `name` (at most 15 bytes).
pub(crate) fn create_map(
    iface: &str,
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    name: &str,
) -> Result<Fd, PortError> {
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
    sys::bpf(sys::BPF_MAP_CREATE, &mut m)
        .map(Fd)
        .map_err(|e| sys::err_of(iface, "bpf(BPF_MAP_CREATE)", e))
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::port::xdp::prog::OBJECT;

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
    fn errors_name_the_object() {
        let e = parse(b"not elf", "bpf/some.o").unwrap_err().to_string();
        assert!(e.contains("bpf/some.o"), "{e}");
    }
}

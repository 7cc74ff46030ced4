//! The packet objects of every script: `pkts[1..n]` in gen's `modify(pkts, n)`, balance's
//! `balance(pkts, n)` and fwd's `filter(pkts, n)`: one API, documented in docs/lua.md.
//!
//! Fields by name, as MoonGen's scripts read them: `pkt.eth.src`, `pkt.vlan.id`,
//! `pkt.ip4.dst`, `pkt.ip6.hlim`, `pkt.ip.src` (either family), `pkt.udp.dport`,
//! `pkt.tcp.flags`. A layer the packet does not have is `nil` (`if pkt.udp then ... end`), so a
//! script can tell an IPv6 packet from an IPv4 one, a VLAN-tagged one from an untagged one.
//! Assigning a field (`pkt.udp.dport = 53`) writes the packet where the tool sends what the
//! script changed (gen); elsewhere it is an error naming the tool. The MoonGen-style chain
//! `pkt:udp():setSrcPort(1000)` (a layer called is the layer, with setters and getters) and
//! raw accessors (`getU16(off)`, `setU32(off, v)`, 0-based, big-endian) work everywhere the
//! same.
//!
//! The script works on a copy of the batch's packets (one memcpy per packet into buffers that
//! are reused, no allocation once they have grown to the largest packet); headers are parsed
//! with [`crate::wire::parse()`] when a field is first read, at most once per packet and batch.

use crate::mem::{Batch, BATCH};
use crate::wire::{self, LinkType, Parsed};
use mlua::{AnyUserData, Lua, MetaMethod, Table, UserData, UserDataFields, UserDataMethods, Value};
use std::cell::RefCell;
use std::net::IpAddr;
use std::rc::Rc;

/// What a tool lets its scripts do with the packets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Access {
    /// The tool's name, for messages ("gen", "balance", "fwd").
    pub tool: &'static str,
    /// Whether fields and bytes may be written (the tool sends the changed packets).
    pub write: bool,
    /// Whether `pkt:drop()` is allowed (the tool does not deliver dropped packets).
    pub drop: bool,
}

struct Pkt {
    buf: Vec<u8>,
    stream: u16,
    dirty: bool,
    dropped: bool,
    parsed: Option<Parsed>,
}

struct Staging {
    pkts: Vec<Pkt>,
    n: usize,
    access: Access,
    link: LinkType,
}

fn lua_err(msg: impl Into<String>) -> mlua::Error {
    mlua::Error::RuntimeError(msg.into())
}

impl Staging {
    fn pkt(&mut self, i: usize) -> mlua::Result<&mut Pkt> {
        if i >= self.n {
            return Err(lua_err(format!(
                "pkts[{}] is not part of this batch of {}",
                i + 1,
                self.n
            )));
        }
        Ok(&mut self.pkts[i])
    }

    fn writable(&self, what: &str) -> mlua::Result<()> {
        if self.access.write {
            Ok(())
        } else {
            Err(lua_err(format!(
                "{what}: packets are read-only in {} scripts",
                self.access.tool
            )))
        }
    }
}

impl Pkt {
    fn parsed(&mut self, link: LinkType) -> Parsed {
        *self
            .parsed
            .get_or_insert_with(|| wire::parse(&self.buf, link))
    }
}

/// The headers a field belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Layer {
    Eth,
    Vlan,
    Ip,
    Ip4,
    Ip6,
    Udp,
    Tcp,
}

const LAYERS: [(&str, Layer); 7] = [
    ("eth", Layer::Eth),
    ("vlan", Layer::Vlan),
    ("ip", Layer::Ip),
    ("ip4", Layer::Ip4),
    ("ip6", Layer::Ip6),
    ("udp", Layer::Udp),
    ("tcp", Layer::Tcp),
];

impl Layer {
    fn name(self) -> &'static str {
        LAYERS
            .iter()
            .find(|(_, l)| *l == self)
            .map_or("?", |(n, _)| n)
    }

    fn fields(self) -> &'static str {
        match self {
            Layer::Eth => "src, dst, type",
            Layer::Vlan => "id, pcp, tpid",
            Layer::Ip | Layer::Ip4 | Layer::Ip6 => {
                "src, dst, ttl (hlim), proto, next, tos (tc), len, id, flow, version"
            }
            Layer::Udp => "sport, dport, len, checksum",
            Layer::Tcp => "sport, dport, seq, ack, flags, win, checksum",
        }
    }

    /// Whether a packet parsed as `p` (on `link`) has this layer.
    fn present(self, p: &Parsed, link: LinkType) -> bool {
        let l4 = |proto| p.proto == proto && p.l4.is_some() && p.has_l4();
        match self {
            Layer::Eth => link == LinkType::ETHERNET && p.l2 == Some(0),
            Layer::Vlan => link == LinkType::ETHERNET && p.vlan_count > 0,
            Layer::Ip => p.l3.is_some() && matches!(p.ip_version, 4 | 6),
            Layer::Ip4 => p.l3.is_some() && p.ip_version == 4,
            Layer::Ip6 => p.l3.is_some() && p.ip_version == 6,
            Layer::Udp => l4(17),
            Layer::Tcp => l4(6),
        }
    }
}

/// Where a field is in the packet.
#[derive(Clone, Copy, Debug)]
enum Loc {
    /// `n` bytes big-endian at `off`, bits `mask << shift` of them.
    Bits {
        off: usize,
        n: usize,
        shift: u32,
        mask: u64,
    },
    /// A MAC address at `off`.
    Mac(usize),
    /// An IP address at `off` (16 bytes when `v6`, else 4).
    Addr { off: usize, v6: bool },
    /// A value that is read, not written (it is derived from several places).
    Derived(u64),
}

fn num(off: usize, n: usize) -> Loc {
    Loc::Bits {
        off,
        n,
        shift: 0,
        mask: if n >= 8 { u64::MAX } else { (1 << (8 * n)) - 1 },
    }
}

/// Where `key` of `layer` is in a packet parsed as `p`; `None`: no such field.
fn locate(layer: Layer, key: &str, p: &Parsed) -> Option<Loc> {
    let l3 = p.l3.unwrap_or(0) as usize;
    let l4 = p.l4.unwrap_or(0) as usize;
    let v6 = p.ip_version == 6;
    Some(match (layer, key) {
        (Layer::Eth, "dst") => Loc::Mac(0),
        (Layer::Eth, "src") => Loc::Mac(6),
        // The ethertype of the network layer: after the VLAN tags.
        (Layer::Eth, "type") => num(12 + 4 * usize::from(p.vlan_count), 2),
        (Layer::Vlan, "tpid") => num(12, 2),
        (Layer::Vlan, "id") => Loc::Bits {
            off: 14,
            n: 2,
            shift: 0,
            mask: 0xfff,
        },
        (Layer::Vlan, "pcp") => Loc::Bits {
            off: 14,
            n: 2,
            shift: 13,
            mask: 7,
        },
        (Layer::Ip | Layer::Ip4 | Layer::Ip6, k) => match (k, v6) {
            ("src", false) => Loc::Addr { off: l3 + 12, v6 },
            ("dst", false) => Loc::Addr { off: l3 + 16, v6 },
            ("src", true) => Loc::Addr { off: l3 + 8, v6 },
            ("dst", true) => Loc::Addr { off: l3 + 24, v6 },
            ("ttl" | "hlim", false) => num(l3 + 8, 1),
            ("ttl" | "hlim", true) => num(l3 + 7, 1),
            // The upper-layer protocol; for IPv6 after the extension headers (read only:
            // `next` is the header's own Next Header field).
            ("proto", false) | ("next", false) => num(l3 + 9, 1),
            ("proto", true) => Loc::Derived(u64::from(p.proto)),
            ("next", true) => num(l3 + 6, 1),
            ("tos" | "tc", false) => num(l3 + 1, 1),
            ("tos" | "tc", true) => Loc::Bits {
                off: l3,
                n: 4,
                shift: 20,
                mask: 0xff,
            },
            ("len", false) => num(l3 + 2, 2),
            ("len", true) => num(l3 + 4, 2),
            ("id", false) => num(l3 + 4, 2),
            ("flow", true) => Loc::Bits {
                off: l3,
                n: 4,
                shift: 0,
                mask: 0xf_ffff,
            },
            ("version", _) => Loc::Derived(u64::from(p.ip_version)),
            _ => return None,
        },
        (Layer::Udp | Layer::Tcp, "sport") => num(l4, 2),
        (Layer::Udp | Layer::Tcp, "dport") => num(l4 + 2, 2),
        (Layer::Udp, "len") => num(l4 + 4, 2),
        (Layer::Udp, "checksum") => num(l4 + 6, 2),
        (Layer::Tcp, "seq") => num(l4 + 4, 4),
        (Layer::Tcp, "ack") => num(l4 + 8, 4),
        (Layer::Tcp, "flags") => Loc::Bits {
            off: l4 + 12,
            n: 2,
            shift: 0,
            mask: 0x1ff,
        },
        (Layer::Tcp, "win") => num(l4 + 14, 2),
        (Layer::Tcp, "checksum") => num(l4 + 16, 2),
        _ => return None,
    })
}

fn past_end(off: usize, n: usize, len: usize) -> mlua::Error {
    lua_err(format!(
        "offset {off}+{n} is past the end of a {len} B packet"
    ))
}

fn get_n(b: &[u8], off: usize, n: usize) -> mlua::Result<u64> {
    let s = off
        .checked_add(n)
        .and_then(|e| b.get(off..e))
        .ok_or_else(|| past_end(off, n, b.len()))?;
    Ok(s.iter().fold(0u64, |a, &x| (a << 8) | u64::from(x)))
}

fn put_n(b: &mut [u8], off: usize, n: usize, v: u64) -> mlua::Result<()> {
    let len = b.len();
    let s = off
        .checked_add(n)
        .and_then(|e| b.get_mut(off..e))
        .ok_or_else(|| past_end(off, n, len))?;
    for (k, x) in s.iter_mut().enumerate() {
        *x = (v >> (8 * (n - 1 - k))) as u8;
    }
    Ok(())
}

fn mac_text(m: &[u8]) -> String {
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        m[0], m[1], m[2], m[3], m[4], m[5]
    )
}

fn mac_of(v: &Value) -> mlua::Result<[u8; 6]> {
    match v {
        Value::String(s) => crate::apps::gen::vary::parse_mac(&s.to_str()?).map_err(lua_err),
        Value::Integer(i) if (0..1 << 48).contains(i) => {
            let b = (*i as u64).to_be_bytes();
            let mut m = [0u8; 6];
            m.copy_from_slice(&b[2..]);
            Ok(m)
        }
        _ => Err(lua_err(
            "a MAC address is a string (aa:bb:cc:dd:ee:ff) or an integer below 2^48",
        )),
    }
}

/// A number a script gave: an integer, or a float without a fraction.
fn int_of(v: &Value) -> Option<u64> {
    match v {
        Value::Integer(i) if *i >= 0 => Some(*i as u64),
        Value::Number(x) if *x >= 0.0 && x.fract() == 0.0 && *x < 1.8e19 => Some(*x as u64),
        _ => None,
    }
}

fn read(b: &[u8], loc: Loc, lua: &Lua) -> mlua::Result<Value> {
    Ok(match loc {
        Loc::Bits {
            off,
            n,
            shift,
            mask,
        } => Value::Integer(((get_n(b, off, n)? >> shift) & mask) as i64),
        Loc::Mac(off) => {
            let m = b
                .get(off..off + 6)
                .ok_or_else(|| past_end(off, 6, b.len()))?;
            Value::String(lua.create_string(mac_text(m))?)
        }
        Loc::Addr { off, v6 } => {
            let n = if v6 { 16 } else { 4 };
            let s = b
                .get(off..off + n)
                .ok_or_else(|| past_end(off, n, b.len()))?;
            let a = if v6 {
                let mut a = [0u8; 16];
                a.copy_from_slice(s);
                IpAddr::from(a)
            } else {
                IpAddr::from([s[0], s[1], s[2], s[3]])
            };
            Value::String(lua.create_string(a.to_string())?)
        }
        Loc::Derived(v) => Value::Integer(v as i64),
    })
}

/// Writes `v` at `loc`; `what` names the field in errors.
fn write(b: &mut [u8], loc: Loc, v: &Value, what: impl Fn() -> String) -> mlua::Result<()> {
    match loc {
        Loc::Bits {
            off,
            n,
            shift,
            mask,
        } => {
            let x = int_of(v)
                .filter(|x| *x <= mask)
                .ok_or_else(|| lua_err(format!("{}: a number from 0 to {mask}", what())))?;
            let old = get_n(b, off, n)?;
            put_n(b, off, n, (old & !(mask << shift)) | (x << shift))
        }
        Loc::Mac(off) => {
            let m = mac_of(v).map_err(|e| lua_err(format!("{}: {e}", what())))?;
            let len = b.len();
            b.get_mut(off..off + 6)
                .ok_or_else(|| past_end(off, 6, len))?
                .copy_from_slice(&m);
            Ok(())
        }
        Loc::Addr { off, v6 } => {
            let fam = if v6 { "IPv6" } else { "IPv4" };
            match v {
                Value::String(s) => {
                    let s = s.to_str()?;
                    let bytes: Vec<u8> = match (s.parse::<IpAddr>(), v6) {
                        (Ok(IpAddr::V4(a)), false) => a.octets().to_vec(),
                        (Ok(IpAddr::V6(a)), true) => a.octets().to_vec(),
                        _ => {
                            return Err(lua_err(format!(
                                "{}: '{}' is not an {fam} address",
                                what(),
                                &*s
                            )))
                        }
                    };
                    let len = b.len();
                    b.get_mut(off..off + bytes.len())
                        .ok_or_else(|| past_end(off, bytes.len(), len))?
                        .copy_from_slice(&bytes);
                    Ok(())
                }
                // An integer: the IPv4 address, or the low 32 bits of the IPv6 one.
                v => match int_of(v).filter(|x| *x <= u64::from(u32::MAX)) {
                    Some(x) => put_n(b, if v6 { off + 12 } else { off }, 4, x),
                    None => Err(lua_err(format!(
                        "{}: an address is a string or an integer from 0 to 2^32-1",
                        what()
                    ))),
                },
            }
        }
        Loc::Derived(_) => Err(lua_err(format!("{} is read-only", what()))),
    }
}

/// One layer of one packet (`pkt.udp`): fields by name; called (`pkt:udp()`) it selects the
/// layer for the MoonGen-style setters and returns the packet.
struct LayerRef {
    i: usize,
    st: Rc<RefCell<Staging>>,
    layer: Layer,
}

impl LayerRef {
    /// Where `key` is in this packet; errors name the field (formatted only then).
    fn located(&self, key: &str) -> mlua::Result<Loc> {
        let mut st = self.st.try_borrow_mut().map_err(|_| busy())?;
        let link = st.link;
        let p = st.pkt(self.i)?.parsed(link);
        let what = || format!("pkt.{}.{key}", self.layer.name());
        if !self.layer.present(&p, link) {
            return Err(lua_err(format!(
                "{}: pkts[{}] has no {} header",
                what(),
                self.i + 1,
                self.layer.name()
            )));
        }
        locate(self.layer, key, &p).ok_or_else(|| {
            lua_err(format!(
                "{}: no such field (pkt.{} has {})",
                what(),
                self.layer.name(),
                self.layer.fields()
            ))
        })
    }

    fn what(&self, key: &str) -> String {
        format!("pkt.{}.{key}", self.layer.name())
    }
}

fn busy() -> mlua::Error {
    lua_err("the packets are in use (a script called into itself)")
}

impl LayerRef {
    fn get(&self, lua: &Lua, key: &str) -> mlua::Result<Value> {
        let loc = self.located(key)?;
        let mut st = self.st.try_borrow_mut().map_err(|_| busy())?;
        read(&st.pkt(self.i)?.buf, loc, lua)
    }

    /// Writes `key`; `what` names it in errors (`pkt.udp.dport`, `setDstPort`).
    fn set(&self, key: &str, v: &Value, what: impl Fn() -> String) -> mlua::Result<()> {
        let loc = self.located(key)?;
        let mut st = self.st.try_borrow_mut().map_err(|_| busy())?;
        if !st.access.write {
            st.writable(&what())?;
        }
        let p = st.pkt(self.i)?;
        write(&mut p.buf, loc, v, what)?;
        p.dirty = true;
        Ok(())
    }
}

/// The MoonGen-style accessors of a layer (`pkt:udp():setSrcPort(1000)`): method, field.
const ACCESSORS: [(&str, &str); 9] = [
    ("setSrc", "src"),
    ("setDst", "dst"),
    ("setSrcPort", "sport"),
    ("setDstPort", "dport"),
    ("setTTL", "ttl"),
    ("setSeq", "seq"),
    ("setFlags", "flags"),
    ("setType", "type"),
    ("setId", "id"),
];
const GETTERS: [(&str, &str); 4] = [
    ("getSrc", "src"),
    ("getDst", "dst"),
    ("getSrcPort", "sport"),
    ("getDstPort", "dport"),
];

impl UserData for LayerRef {
    fn add_fields<F: UserDataFields<Self>>(f: &mut F) {
        // `pkt:udp()` is `pkt.udp(pkt)`: the layer itself, for its MoonGen-style setters. A
        // Lua function: no call into Rust.
        f.add_meta_field_with(MetaMethod::Call, |lua| {
            lua.load("return function(layer) return layer end")
                .eval::<mlua::Function>()
        });
    }

    fn add_methods<M: UserDataMethods<Self>>(m: &mut M) {
        m.add_meta_method(MetaMethod::Index, |lua, this, key: mlua::String| {
            this.get(lua, &key.to_str()?)
        });
        m.add_meta_method(
            MetaMethod::NewIndex,
            |_, this, (key, v): (mlua::String, Value)| {
                let key = key.to_str()?;
                this.set(&key, &v, || this.what(&key))
            },
        );
        for (name, key) in ACCESSORS {
            m.add_method(name, move |_, this, v: Value| {
                this.set(key, &v, || name.to_string())
            });
        }
        for (name, key) in GETTERS {
            m.add_method(name, move |lua, this, ()| this.get(lua, key));
        }
        m.add_meta_method(MetaMethod::ToString, |_, this, ()| {
            Ok(format!("pkts[{}].{}", this.i + 1, this.layer.name()))
        });
    }
}

/// One packet object (`pkts[i]`), made once per script state and reused for every batch.
struct PktRef {
    i: usize,
    st: Rc<RefCell<Staging>>,
    /// `pkt.eth`, `pkt.vlan`, ... made once with the packet (in [`LAYERS`]' order).
    layers: Vec<AnyUserData>,
}

impl PktRef {
    /// Runs `f` on this packet; `write` marks it changed (and checks the tool allows it).
    fn with<R>(
        &self,
        write: Option<&str>,
        f: impl FnOnce(&mut Pkt, LinkType) -> mlua::Result<R>,
    ) -> mlua::Result<R> {
        let mut st = self.st.try_borrow_mut().map_err(|_| busy())?;
        if let Some(what) = write {
            st.writable(what)?;
        }
        let link = st.link;
        let p = st.pkt(self.i)?;
        if write.is_some() {
            p.dirty = true;
        }
        f(p, link)
    }
}

impl UserData for PktRef {
    fn add_fields<F: UserDataFields<Self>>(f: &mut F) {
        for (k, (name, layer)) in LAYERS.into_iter().enumerate() {
            f.add_field_method_get(name, move |_, this| {
                let present =
                    this.with(None, |p, link| Ok(layer.present(&p.parsed(link), link)))?;
                Ok(present.then(|| this.layers[k].clone()))
            });
        }
    }

    fn add_methods<M: UserDataMethods<Self>>(m: &mut M) {
        m.add_function("raw", |_, ud: AnyUserData| Ok(ud));
        m.add_method("len", |_, this, ()| this.with(None, |p, _| Ok(p.buf.len())));
        m.add_method("stream", |_, this, ()| this.with(None, |p, _| Ok(p.stream)));
        for (name, n) in [("getByte", 1usize), ("getU16", 2), ("getU32", 4)] {
            m.add_method(name, move |_, this, off: usize| {
                this.with(None, |p, _| get_n(&p.buf, off, n))
            });
        }
        for (name, n) in [("setByte", 1usize), ("setU16", 2), ("setU32", 4)] {
            m.add_method(name, move |_, this, (off, v): (usize, u64)| {
                if n < 8 && v >> (8 * n) != 0 {
                    return Err(lua_err(format!(
                        "{name}({off}, {v}): the value does not fit in {n} byte(s)"
                    )));
                }
                this.with(Some(name), |p, _| {
                    put_n(&mut p.buf, off, n, v)?;
                    // Raw bytes may move headers: parse again on the next field read.
                    p.parsed = None;
                    Ok(())
                })
            });
        }
        m.add_method("bytes", |lua, this, (off, len): (usize, usize)| {
            this.with(None, |p, _| {
                let s = off
                    .checked_add(len)
                    .and_then(|e| p.buf.get(off..e))
                    .ok_or_else(|| past_end(off, len, p.buf.len()))?;
                lua.create_string(s)
            })
        });
        m.add_method("data", |lua, this, ()| {
            this.with(None, |p, _| lua.create_string(&p.buf))
        });
        m.add_method("drop", |_, this, ()| {
            let mut st = this.st.try_borrow_mut().map_err(|_| busy())?;
            if !st.access.drop {
                return Err(lua_err(format!(
                    "drop(): {} scripts do not drop packets",
                    st.access.tool
                )));
            }
            st.pkt(this.i)?.dropped = true;
            Ok(())
        });
        m.add_method("dropped", |_, this, ()| {
            this.with(None, |p, _| Ok(p.dropped))
        });
        m.add_method("payloadOffset", |_, this, ()| {
            this.with(None, |p, link| {
                p.parsed(link)
                    .payload
                    .map(|o| o as usize)
                    .ok_or_else(|| lua_err("payloadOffset: the packet has no UDP or TCP header"))
            })
        });
        m.add_meta_method(MetaMethod::ToString, |_, this, ()| {
            Ok(format!("pkts[{}]", this.i + 1))
        });
    }
}

/// The packets of one batch, as a script sees them: made once per script state.
pub struct Packets {
    st: Rc<RefCell<Staging>>,
    table: Table,
}

impl Packets {
    /// Makes `pkts[1..BATCH]` in `lua` for packets of link type `link`.
    pub fn new(lua: &Lua, access: Access, link: LinkType) -> mlua::Result<Packets> {
        let st = Rc::new(RefCell::new(Staging {
            pkts: (0..BATCH)
                .map(|_| Pkt {
                    buf: Vec::new(),
                    stream: 0,
                    dirty: false,
                    dropped: false,
                    parsed: None,
                })
                .collect(),
            n: 0,
            access,
            link,
        }));
        let table = lua.create_table()?;
        for i in 0..BATCH {
            let layers = LAYERS
                .iter()
                .map(|&(_, layer)| {
                    lua.create_userdata(LayerRef {
                        i,
                        st: st.clone(),
                        layer,
                    })
                })
                .collect::<mlua::Result<Vec<_>>>()?;
            let ud = lua.create_userdata(PktRef {
                i,
                st: st.clone(),
                layers,
            })?;
            table.raw_set(i + 1, ud)?;
        }
        Ok(Packets { st, table })
    }

    /// The table the script gets (`pkts`).
    pub fn table(&self) -> &Table {
        &self.table
    }

    /// Copies the packets of `batch` (at most [`BATCH`]) for the script; `streams[i]` is what
    /// `pkts[i]:stream()` returns (0 when absent). Returns how many.
    pub fn load(&self, batch: &Batch, streams: &[u8]) -> Result<usize, String> {
        let mut st = self
            .st
            .try_borrow_mut()
            .map_err(|_| "the script's packets are in use".to_string())?;
        let n = batch.len().min(BATCH);
        st.n = n;
        for (i, p) in st.pkts[..n].iter_mut().enumerate() {
            p.buf.clear();
            p.buf.extend_from_slice(batch.data(i));
            p.stream = streams.get(i).map_or(0, |&s| u16::from(s));
            p.dirty = false;
            p.dropped = false;
            p.parsed = None;
        }
        // Slots from n on keep stale contents: `Staging::pkt` refuses every index past n.
        Ok(n)
    }

    /// Whether the script dropped packet `i` (0-based) of the last batch.
    pub fn dropped(&self, i: usize) -> bool {
        self.st
            .try_borrow()
            .is_ok_and(|st| i < st.n && st.pkts[i].dropped)
    }

    /// Copies back into `batch` every packet the script changed, after `fix(i, bytes)` (which
    /// recomputes checksums).
    pub fn store(
        &self,
        batch: &mut Batch,
        mut fix: impl FnMut(usize, &mut [u8]),
    ) -> Result<(), String> {
        let mut st = self
            .st
            .try_borrow_mut()
            .map_err(|_| "the script's packets are in use".to_string())?;
        let n = st.n.min(batch.len());
        for (i, p) in st.pkts[..n].iter_mut().enumerate() {
            if !p.dirty {
                continue;
            }
            fix(i, &mut p.buf);
            let dst = batch.data_mut(i);
            let m = dst.len().min(p.buf.len());
            dst[..m].copy_from_slice(&p.buf[..m]);
        }
        Ok(())
    }
}

/// Recomputes the IPv4 header checksum and the UDP or TCP checksum of a packet a script changed
/// (not of fragments: their transport checksum covers bytes of other packets).
pub fn fix_checksums(b: &mut [u8], link: LinkType) {
    let p = wire::parse(b, link);
    let Some(l3) = p.l3.map(|o| o as usize) else {
        return;
    };
    if p.ip_version == 4 {
        let ihl = usize::from(b.get(l3).map_or(0, |v| v & 0xf)) * 4;
        if ihl >= 20 && l3 + ihl <= b.len() {
            b[l3 + 10..l3 + 12].fill(0);
            let c = wire::checksum::checksum(&b[l3..l3 + ihl]);
            b[l3 + 10..l3 + 12].copy_from_slice(&c.to_be_bytes());
        }
    }
    let (Some(l4), true) = (p.l4.map(|o| o as usize), p.has_l4()) else {
        return;
    };
    if p.fragment.is_some() || !matches!(p.proto, 6 | 17) {
        return;
    }
    let end = (p.l3_end as usize).clamp(l4, b.len());
    let seg = &mut b[l4..end];
    let _ = if p.ip_version == 4 {
        let s = [p.src[0], p.src[1], p.src[2], p.src[3]];
        let d = [p.dst[0], p.dst[1], p.dst[2], p.dst[3]];
        wire::emit::fill_transport_checksum_v4(s, d, p.proto, seg)
    } else {
        wire::emit::fill_transport_checksum_v6(&p.src, &p.dst, p.proto, seg)
    };
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::apps::lua::{new_state, ScriptOptions};
    use crate::mem::{Desc, Pool, PoolConfig};
    use std::sync::Arc;

    fn batch(frames: &[Vec<u8>]) -> Batch {
        let pool = Arc::new(Pool::new(&PoolConfig::default()).unwrap());
        let mut b = Batch::with_pool(&pool);
        for f in frames {
            let mut fr = b.alloc().unwrap();
            fr.buf()[..f.len()].copy_from_slice(f);
            fr.push(Desc {
                len: f.len() as u32,
                wire_len: f.len() as u32,
                ..Default::default()
            });
        }
        b
    }

    /// An Ethernet frame: optional VLAN tag, IPv4 or IPv6, UDP, with correct checksums.
    fn frame(vlan: Option<u16>, v6: bool, sport: u16, dport: u16) -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];
        if let Some(id) = vlan {
            f.extend_from_slice(&[0x81, 0, (id >> 8) as u8, id as u8]);
        }
        let udp = [
            (sport >> 8) as u8,
            sport as u8,
            (dport >> 8) as u8,
            dport as u8,
            0,
            12,
            0,
            0,
            b'a',
            b'b',
            b'c',
            b'd',
        ];
        if v6 {
            f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0, 0, 12, 17, 64]);
            f.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8].repeat(4));
            f.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb9].repeat(4));
        } else {
            f.extend_from_slice(&[0x08, 0x00, 0x45, 0, 0, 32, 0, 1, 0, 0, 64, 17, 0, 0]);
            f.extend_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
        }
        f.extend_from_slice(&udp);
        fix_checksums(&mut f, LinkType::ETHERNET);
        f
    }

    /// Runs the script's `f(pkts, n)` on `frames`; its result as text (`tostring`).
    fn run(
        src: &str,
        access: Access,
        frames: &[Vec<u8>],
    ) -> (mlua::Result<String>, Batch, Packets) {
        let lua = new_state(&ScriptOptions::default()).unwrap();
        let pk = Packets::new(&lua, access, LinkType::ETHERNET).unwrap();
        lua.load(src).exec().unwrap();
        let mut b = batch(frames);
        let n = pk.load(&b, &[]).unwrap();
        let f: mlua::Function = lua.globals().get("f").unwrap();
        let r = f
            .call::<Value>((pk.table().clone(), n))
            .map(|v| v.to_string().unwrap_or_default());
        pk.store(&mut b, |_, d| fix_checksums(d, LinkType::ETHERNET))
            .unwrap();
        (r, b, pk)
    }

    const GEN: Access = Access {
        tool: "gen",
        write: true,
        drop: false,
    };
    const BAL: Access = Access {
        tool: "balance",
        write: false,
        drop: true,
    };

    #[test]
    fn fields_by_name_read_what_the_headers_say_and_absent_layers_are_nil() {
        let src = r#"
            function f(pkts, n)
              local a, b = pkts[1], pkts[2]
              return table.concat({
                a.eth.src, a.eth.dst, string.format("%04x", a.eth.type), tostring(a.vlan),
                a.ip4.src, a.ip.dst, a.ip4.ttl, a.ip4.proto, a.udp.sport, a.udp.dport,
                tostring(a.tcp), tostring(a.ip6),
                b.vlan.id, string.format("%04x", b.eth.type), b.ip6.src, b.ip.version,
                b.ip6.hlim, b.ip6.proto, b.udp.dport, tostring(b.ip4)
              }, " ")
            end"#;
        let (r, _, _) = run(
            src,
            BAL,
            &[frame(None, false, 1000, 53), frame(Some(42), true, 7, 4789)],
        );
        assert_eq!(
            r.unwrap(),
            "02:00:00:00:00:01 02:00:00:00:00:02 0800 nil 10.0.0.1 10.0.0.2 64 17 1000 53 nil nil \
             42 86dd 2001:db8:2001:db8:2001:db8:2001:db8 6 64 17 4789 nil"
        );
    }

    #[test]
    fn assigned_fields_and_setters_change_the_packet_with_correct_checksums() {
        let src = r#"
            function f(pkts, n)
              pkts[1].udp.dport = 4242
              pkts[1].ip4.src = "192.0.2.9"
              pkts[1]:eth():setDst("aa:bb:cc:dd:ee:ff")
              pkts[2]:ip6():setDst(7)
              pkts[2].vlan.id = 100
              pkts[2]:udp():setSrcPort(9)
            end"#;
        let (r, b, _) = run(
            src,
            GEN,
            &[frame(None, false, 1000, 53), frame(Some(42), true, 7, 4789)],
        );
        r.unwrap();
        let want0 = {
            let mut f = frame(None, false, 1000, 4242);
            f[0..6].copy_from_slice(&[0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff]);
            f[26..30].copy_from_slice(&[192, 0, 2, 9]);
            fix_checksums(&mut f, LinkType::ETHERNET);
            f
        };
        assert_eq!(b.data(0), &want0[..]);
        let p = wire::parse(b.data(1), LinkType::ETHERNET);
        assert_eq!(p.vlans(), &[100]);
        assert_eq!((p.sport, p.dport), (9, 4789));
        assert_eq!(&p.dst[12..], &[0, 0, 0, 7]);
        // the UDP checksum verifies: the sum over the pseudo-header and segment is 0xffff
        let l4 = p.l4.unwrap() as usize;
        let mut again = b.data(1).to_vec();
        let c = u16::from_be_bytes([again[l4 + 6], again[l4 + 7]]);
        fix_checksums(&mut again, LinkType::ETHERNET);
        assert_eq!(u16::from_be_bytes([again[l4 + 6], again[l4 + 7]]), c);
    }

    #[test]
    fn read_only_tools_refuse_writes_and_bad_input_is_an_error_naming_it() {
        let cases = [
            (
                "pkts[1].udp.dport = 1",
                "pkt.udp.dport: packets are read-only in balance",
            ),
            (
                "pkts[1]:setU16(0, 1)",
                "setU16: packets are read-only in balance",
            ),
            (
                "return pkts[1].udp.nope",
                "no such field (pkt.udp has sport",
            ),
            ("return pkts[1]:getU32(44)", "past the end of a 46 B packet"),
            (
                "return pkts[3]:len()",
                "pkts[3] is not part of this batch of 2",
            ),
        ];
        for (body, want) in cases {
            let src = format!("function f(pkts, n)\n  {body}\nend");
            let (r, _, _) = run(
                &src,
                BAL,
                &[frame(None, false, 1, 2), frame(None, false, 3, 4)],
            );
            let e = r.unwrap_err().to_string();
            assert!(e.contains(want), "{body}: {e}");
        }
        let bad = [
            (
                "pkts[1].udp.dport = 70000",
                "pkt.udp.dport: a number from 0 to 65535",
            ),
            ("pkts[1].ip4.src = '2001:db8::1'", "is not an IPv4 address"),
            ("pkts[1].ip4.proto = -1", "a number from 0 to 255"),
            ("pkts[1]:setByte(0, 256)", "does not fit in 1 byte"),
            ("pkts[1]:drop()", "gen scripts do not drop packets"),
            ("pkts[1].ip6.src = '::1'", "'ip6' (a nil value)"),
        ];
        for (body, want) in bad {
            let src = format!("function f(pkts, n)\n  {body}\nend");
            let (r, _, _) = run(&src, GEN, &[frame(None, false, 1, 2)]);
            let e = r.unwrap_err().to_string();
            assert!(e.contains(want), "{body}: {e}");
        }
    }

    #[test]
    fn drops_are_per_packet_and_forgotten_at_the_next_batch() {
        let src = "function f(pkts, n)\n  for i = 1, n do if pkts[i].udp.dport == 53 then pkts[i]:drop() end end\nend";
        let (r, b, pk) = run(
            src,
            BAL,
            &[
                frame(None, false, 1, 53),
                frame(None, true, 3, 4),
                frame(Some(5), false, 1, 53),
            ],
        );
        r.unwrap();
        assert_eq!(
            (0..3).map(|i| pk.dropped(i)).collect::<Vec<_>>(),
            [true, false, true]
        );
        pk.load(&b, &[]).unwrap();
        assert!(!pk.dropped(0));
    }
}

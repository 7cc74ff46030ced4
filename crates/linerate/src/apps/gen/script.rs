//! Lua userscripts (LuaJIT through mlua), MoonGen style: the script defines
//! `modify(pkts, n)`, called once per batch of freshly built packets (up to 64), and may set a
//! `config` table whose fields give defaults to the command's flags.
//!
//! `pkts[1..n]` are packet objects, created once and reused for every batch (no allocation per
//! packet). Layer selectors return the same object: `pkts[i]:udp():setSrcPort(1000)`,
//! `pkts[i]:ip4():setDst("10.0.0.9")`, `pkts[i]:eth():setSrc("02:00:00:00:00:01")`. Raw access:
//! `len()`, `getByte(off)`, `setByte(off, v)`, `getU16/setU16`, `getU32/setU32` (0-based
//! offsets, big-endian). After the call, the IPv4 header and transport checksums of every
//! packet the script changed are recomputed. Errors name the script file and line.

use super::template::{fix_checksums, Layout, L4};
use super::Hook;
use crate::apps::lua::{self as script, ScriptOptions};
use crate::mem::{Batch, BATCH};
use mlua::{AnyUserData, Function, Lua, Table, UserData, UserDataMethods, Value};
use std::cell::{Cell, RefCell};
use std::net::IpAddr;
use std::rc::Rc;

const SLOT: usize = 2048;

/// Errors of a script.
#[derive(Debug, thiserror::Error)]
pub enum ScriptError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The script.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// Lua refused the script or it failed (the message names the file and line).
    #[error("{0}")]
    Lua(String),
    /// The script went over its memory bound while its top level ran.
    #[error("{0}")]
    Memory(String),
    /// The script's top level did not return and was stopped (a signal or the time limit).
    #[error("{0}")]
    Stopped(String),
    /// The script defines no `modify` function.
    #[error("{0}: the script defines no function modify(pkts, n)")]
    NoModify(String),
}

/// Packet bytes the script sees: a copy of the batch's packets.
struct Staging {
    bytes: Vec<u8>,
    lens: [usize; BATCH],
    layouts: [Option<Layout>; BATCH],
    streams: [u16; BATCH],
    dirty: [bool; BATCH],
    n: usize,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Layer {
    Raw,
    Eth,
    Ip,
    L4,
}

/// One packet object (`pkts[i]`).
struct PktRef {
    i: usize,
    st: Rc<RefCell<Staging>>,
    layer: Cell<Layer>,
}

fn lua_err(msg: impl Into<String>) -> mlua::Error {
    mlua::Error::RuntimeError(msg.into())
}

impl PktRef {
    /// Runs `f` on this packet's bytes, its layout and its dirty flag.
    fn with<R>(
        &self,
        write: bool,
        f: impl FnOnce(&mut [u8], Option<Layout>) -> mlua::Result<R>,
    ) -> mlua::Result<R> {
        let mut st = self
            .st
            .try_borrow_mut()
            .map_err(|_| lua_err("packet buffer busy"))?;
        if self.i >= st.n {
            return Err(lua_err(format!(
                "pkts[{}] is not part of this batch of {}",
                self.i + 1,
                st.n
            )));
        }
        let len = st.lens[self.i];
        let lay = st.layouts[self.i];
        if write {
            st.dirty[self.i] = true;
        }
        let start = self.i * SLOT;
        f(&mut st.bytes[start..start + len], lay)
    }

    /// [`PktRef::with`] for packets with IP headers: one borrow per call.
    fn with_ip<R>(
        &self,
        write: bool,
        f: impl FnOnce(&mut [u8], &Layout) -> mlua::Result<R>,
    ) -> mlua::Result<R> {
        self.with(write, |b, l| match l {
            Some(l) => f(b, &l),
            None => Err(lua_err("packet has no IP header")),
        })
    }
}

fn get_n(b: &[u8], off: usize, n: usize) -> mlua::Result<u64> {
    let s = b.get(off..off + n).ok_or_else(|| {
        lua_err(format!(
            "offset {off}+{n} is past the end of a {} B packet",
            b.len()
        ))
    })?;
    Ok(s.iter().fold(0u64, |a, &x| (a << 8) | u64::from(x)))
}

fn put_n(b: &mut [u8], off: usize, n: usize, v: u64) -> mlua::Result<()> {
    let len = b.len();
    let s = b.get_mut(off..off + n).ok_or_else(|| {
        lua_err(format!(
            "offset {off}+{n} is past the end of a {len} B packet"
        ))
    })?;
    for (k, x) in s.iter_mut().enumerate() {
        *x = (v >> (8 * (n - 1 - k))) as u8;
    }
    Ok(())
}

fn mac_of(v: &Value) -> mlua::Result<[u8; 6]> {
    match v {
        Value::String(s) => super::vary::parse_mac(&s.to_str()?).map_err(lua_err),
        Value::Integer(i) => {
            let b = (*i as u64).to_be_bytes();
            let mut m = [0u8; 6];
            m.copy_from_slice(&b[2..]);
            Ok(m)
        }
        _ => Err(lua_err(
            "a MAC address is a string (aa:bb:cc:dd:ee:ff) or an integer",
        )),
    }
}

/// Writes an address field: a string of the packet's family, or an integer (IPv4 address, or
/// the low 32 bits of the IPv6 one).
fn put_ip(b: &mut [u8], lay: &Layout, src: bool, v: &Value) -> mlua::Result<()> {
    let (full, low) = match (lay.v6, src) {
        (false, true) => (lay.l3 + 12, lay.l3 + 12),
        (false, false) => (lay.l3 + 16, lay.l3 + 16),
        (true, true) => (lay.l3 + 8, lay.l3 + 20),
        (true, false) => (lay.l3 + 24, lay.l3 + 36),
    };
    match v {
        Value::Integer(i) => put_n(b, low, 4, *i as u64 & 0xffff_ffff),
        Value::Number(x) => put_n(b, low, 4, *x as u64 & 0xffff_ffff),
        Value::String(s) => {
            let s = s.to_str()?;
            match (s.parse::<IpAddr>(), lay.v6) {
                (Ok(IpAddr::V4(a)), false) => put_n(b, full, 4, u64::from(u32::from(a))),
                (Ok(IpAddr::V6(a)), true) => {
                    let o = a.octets();
                    b.get_mut(full..full + 16)
                        .ok_or_else(|| lua_err("packet too short"))?
                        .copy_from_slice(&o);
                    Ok(())
                }
                _ => Err(lua_err(format!(
                    "'{}' is not an {} address",
                    &*s,
                    if lay.v6 { "IPv6" } else { "IPv4" }
                ))),
            }
        }
        _ => Err(lua_err("an address is a string or an integer")),
    }
}

fn get_ip(b: &[u8], lay: &Layout, src: bool) -> mlua::Result<String> {
    let (o, n) = match (lay.v6, src) {
        (false, true) => (lay.l3 + 12, 4),
        (false, false) => (lay.l3 + 16, 4),
        (true, true) => (lay.l3 + 8, 16),
        (true, false) => (lay.l3 + 24, 16),
    };
    let s = b.get(o..o + n).ok_or_else(|| lua_err("packet too short"))?;
    Ok(if n == 4 {
        IpAddr::from([s[0], s[1], s[2], s[3]]).to_string()
    } else {
        let mut a = [0u8; 16];
        a.copy_from_slice(s);
        IpAddr::from(a).to_string()
    })
}

impl UserData for PktRef {
    fn add_methods<M: UserDataMethods<Self>>(m: &mut M) {
        for (name, layer) in [
            ("eth", Layer::Eth),
            ("ip", Layer::Ip),
            ("ip4", Layer::Ip),
            ("ip6", Layer::Ip),
            ("udp", Layer::L4),
            ("tcp", Layer::L4),
            ("raw", Layer::Raw),
        ] {
            m.add_function(name, move |_, ud: AnyUserData| {
                ud.borrow::<PktRef>()?.layer.set(layer);
                Ok(ud)
            });
        }
        m.add_method("len", |_, this, ()| this.with(false, |b, _| Ok(b.len())));
        m.add_method("stream", |_, this, ()| {
            Ok(this.st.try_borrow().map(|s| s.streams[this.i]).unwrap_or(0))
        });
        for (name, n) in [("getByte", 1usize), ("getU16", 2), ("getU32", 4)] {
            m.add_method(name, move |_, this, off: usize| {
                this.with(false, |b, _| get_n(b, off, n))
            });
        }
        for (name, n) in [("setByte", 1usize), ("setU16", 2), ("setU32", 4)] {
            m.add_method(name, move |_, this, (off, v): (usize, u64)| {
                this.with(true, |b, _| put_n(b, off, n, v))
            });
        }
        m.add_method("setSrc", |_, this, v: Value| match this.layer.get() {
            Layer::Eth => this.with(true, |b, _| {
                b[6..12].copy_from_slice(&mac_of(&v)?);
                Ok(())
            }),
            Layer::Ip => this.with_ip(true, |b, lay| put_ip(b, lay, true, &v)),
            _ => Err(lua_err(
                "setSrc needs a layer: pkt:eth():setSrc or pkt:ip4():setSrc",
            )),
        });
        m.add_method("setDst", |_, this, v: Value| match this.layer.get() {
            Layer::Eth => this.with(true, |b, _| {
                b[0..6].copy_from_slice(&mac_of(&v)?);
                Ok(())
            }),
            Layer::Ip => this.with_ip(true, |b, lay| put_ip(b, lay, false, &v)),
            _ => Err(lua_err(
                "setDst needs a layer: pkt:eth():setDst or pkt:ip4():setDst",
            )),
        });
        m.add_method("getSrc", |_, this, ()| {
            this.with_ip(false, |b, lay| get_ip(b, lay, true))
        });
        m.add_method("getDst", |_, this, ()| {
            this.with_ip(false, |b, lay| get_ip(b, lay, false))
        });
        for (name, off) in [("setSrcPort", 0usize), ("setDstPort", 2)] {
            m.add_method(name, move |_, this, v: u16| {
                this.with_ip(true, |b, lay| put_n(b, lay.l4 + off, 2, u64::from(v)))
            });
        }
        for (name, off) in [("getSrcPort", 0usize), ("getDstPort", 2)] {
            m.add_method(name, move |_, this, ()| {
                this.with_ip(false, |b, lay| get_n(b, lay.l4 + off, 2))
            });
        }
        m.add_method("setTTL", |_, this, v: u8| {
            this.with_ip(true, |b, lay| {
                put_n(b, lay.l3 + if lay.v6 { 7 } else { 8 }, 1, u64::from(v))
            })
        });
        m.add_method("setSeq", |_, this, v: u32| {
            this.with_ip(true, |b, lay| {
                if lay.proto != L4::Tcp {
                    return Err(lua_err("setSeq is for TCP packets"));
                }
                put_n(b, lay.l4 + 4, 4, u64::from(v))
            })
        });
        m.add_method("setFlags", |_, this, v: u8| {
            this.with_ip(true, |b, lay| {
                if lay.proto != L4::Tcp {
                    return Err(lua_err("setFlags is for TCP packets"));
                }
                put_n(b, lay.l4 + 13, 1, u64::from(v))
            })
        });
        m.add_method("payloadOffset", |_, this, ()| {
            this.with_ip(false, |_, lay| Ok(lay.payload))
        });
    }
}

/// Defaults a script gives to the command's flags (`config = { rate = "1Mpps", ... }`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScriptConfig {
    /// Every string field of `config`, by name.
    pub fields: Vec<(String, String)>,
}

impl ScriptConfig {
    /// A field's value.
    pub fn get(&self, k: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.as_str())
    }
}

/// A loaded script: a [`Hook`] for the generator.
pub struct LuaHook {
    lua: Lua,
    modify: Function,
    pkts: Table,
    st: Rc<RefCell<Staging>>,
    /// The script's `config` table.
    pub config: ScriptConfig,
    /// Batches handed to the script.
    pub calls: u64,
    name: String,
}

impl LuaHook {
    /// Loads `path` (its top level runs once) into a state set up by `opts`.
    pub fn load(path: &str, opts: &ScriptOptions) -> Result<LuaHook, ScriptError> {
        let src = std::fs::read(path).map_err(|source| ScriptError::Io {
            path: path.into(),
            source,
        })?;
        Self::from_source_with(path, &src, opts)
    }

    /// Loads a script from memory with the default [`ScriptOptions`]; `name` stands for its
    /// file in messages.
    pub fn from_source(name: &str, src: &[u8]) -> Result<LuaHook, ScriptError> {
        Self::from_source_with(name, src, &ScriptOptions::default())
    }

    /// Loads a script from memory into a state set up by `opts`.
    pub fn from_source_with(
        name: &str,
        src: &[u8],
        opts: &ScriptOptions,
    ) -> Result<LuaHook, ScriptError> {
        let lua = script::new_state(opts).map_err(|e| ScriptError::Lua(format!("{name}: {e}")))?;
        let le = |e: mlua::Error| {
            let m = script::error_line(&e, name, &lua);
            if script::is_memory_error(&e) {
                ScriptError::Memory(m)
            } else if script::is_stop_error(&e) {
                ScriptError::Stopped(m)
            } else {
                ScriptError::Lua(m)
            }
        };
        lua.load(src)
            .set_name(format!("@{name}"))
            .exec()
            .map_err(le)?;
        let modify: Function = match lua.globals().get::<Value>("modify").map_err(le)? {
            Value::Function(f) => f,
            _ => return Err(ScriptError::NoModify(name.into())),
        };
        let mut config = ScriptConfig::default();
        if let Value::Table(t) = lua.globals().get::<Value>("config").map_err(le)? {
            for pair in t.pairs::<String, Value>() {
                let (k, v) = pair.map_err(le)?;
                let v = match v {
                    Value::String(s) => s.to_str().map_err(le)?.to_string(),
                    Value::Integer(i) => i.to_string(),
                    Value::Number(x) => x.to_string(),
                    Value::Boolean(b) => b.to_string(),
                    _ => continue,
                };
                config.fields.push((k, v));
            }
            config.fields.sort();
        }
        let st = Rc::new(RefCell::new(Staging {
            bytes: vec![0u8; BATCH * SLOT],
            lens: [0; BATCH],
            layouts: [None; BATCH],
            streams: [0; BATCH],
            dirty: [false; BATCH],
            n: 0,
        }));
        let pkts = lua.create_table().map_err(le)?;
        for i in 0..BATCH {
            let ud = lua
                .create_userdata(PktRef {
                    i,
                    st: st.clone(),
                    layer: Cell::new(Layer::Raw),
                })
                .map_err(le)?;
            pkts.raw_set(i + 1, ud).map_err(le)?;
        }
        Ok(LuaHook {
            lua,
            modify,
            pkts,
            st,
            config,
            calls: 0,
            name: name.to_string(),
        })
    }
}

impl Hook for LuaHook {
    fn modify(
        &mut self,
        batch: &mut Batch,
        streams: &[u8],
        layouts: &[Layout],
    ) -> Result<(), String> {
        let n = batch.len().min(BATCH);
        {
            let mut st = self
                .st
                .try_borrow_mut()
                .map_err(|_| "script state busy".to_string())?;
            st.n = n;
            for i in 0..n {
                let d = batch.data(i);
                let len = d.len().min(SLOT);
                st.bytes[i * SLOT..i * SLOT + len].copy_from_slice(&d[..len]);
                st.lens[i] = len;
                st.layouts[i] = streams
                    .get(i)
                    .and_then(|&s| layouts.get(usize::from(s)))
                    .copied();
                st.streams[i] = streams.get(i).map_or(0, |&s| u16::from(s));
                st.dirty[i] = false;
            }
        }
        self.calls += 1;
        self.modify
            .call::<()>((self.pkts.clone(), n))
            .map_err(|e| script::error_line(&e, &self.name, &self.lua))?;
        let mut st = self
            .st
            .try_borrow_mut()
            .map_err(|_| "script state busy".to_string())?;
        let st = &mut *st;
        for i in 0..n {
            if !st.dirty[i] {
                continue;
            }
            let len = st.lens[i];
            let src = &mut st.bytes[i * SLOT..i * SLOT + len];
            if let Some(l) = &st.layouts[i] {
                fix_checksums(src, l);
            }
            let dst = batch.data_mut(i);
            let m = dst.len().min(len);
            dst[..m].copy_from_slice(&src[..m]);
        }
        Ok(())
    }
}

//! Lua userscripts (LuaJIT through mlua), MoonGen style: the script defines
//! `modify(pkts, n)`, called once per batch of freshly built packets (up to 64), and may set a
//! `config` table whose fields give defaults to the command's flags.
//!
//! `pkts[1..n]` are the packet objects every linerate script sees ([`crate::apps::lua::packet`],
//! docs/lua.md): fields by name (`pkts[i].udp.dport = 53`, `pkts[i].ip4.src = "10.0.0.9"`),
//! MoonGen-style setters (`pkts[i]:udp():setSrcPort(1000)`) and raw accessors; here they are
//! writable, and `pkts[i]:stream()` is the packet's stream. The IPv4 header and transport
//! checksums stay right: the fields' setters update them as they write (RFC 1624), and after
//! the call those of every packet written otherwise (raw bytes, ...) are recomputed. Errors name the
//! script file and line.

use super::template::{fix_checksums, Layout};
use super::Hook;
use crate::apps::lua::packet::{Access, Packets};
use crate::apps::lua::{self as script, ScriptOptions};
use crate::mem::Batch;
use crate::wire::LinkType;
use mlua::{Function, Lua, Table, Value};

pub use crate::apps::lua::ScriptError;

/// Defaults a script gives to the command's flags (`config = { rate = "1Mpps", ... }`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScriptConfig {
    /// Every string field of `config`, by name.
    pub fields: Vec<(String, String)>,
    /// `config.streams`: one entry per stream, as gen's `--stream` takes it (`"rate=1Mpps,
    /// size=64"`, or a table `{ rate = "1Mpps", size = 64 }` written so).
    pub streams: Vec<String>,
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

/// One entry of `config.streams` as `--stream` text: a string as it is, a table as its
/// `key=value` pairs (sorted by key, so that the text does not depend on Lua's order).
fn stream_entry(v: &Value) -> Result<String, mlua::Error> {
    let scalar = |v: &Value| -> Result<Option<String>, mlua::Error> {
        Ok(match v {
            Value::String(s) => Some(s.to_str()?.to_string()),
            Value::Integer(i) => Some(i.to_string()),
            Value::Number(x) => Some(x.to_string()),
            _ => None,
        })
    };
    if let Some(s) = scalar(v)? {
        return Ok(s);
    }
    let Value::Table(t) = v else {
        return Err(mlua::Error::runtime(
            "config.streams: each entry is a string (\"rate=1Mpps,size=64\") or a table",
        ));
    };
    let mut kv = Vec::new();
    for pair in t.clone().pairs::<String, Value>() {
        let (k, v) = pair?;
        let v = scalar(&v)?.ok_or_else(|| {
            mlua::Error::runtime(format!("config.streams: {k} is not a string or number"))
        })?;
        kv.push(format!("{k}={v}"));
    }
    kv.sort();
    Ok(kv.join(","))
}

/// Whether the script's `checksums` global leaves the checksums to linerate (anything but
/// `false`).
fn checksums(g: &Table, k: &mlua::String) -> bool {
    !matches!(g.raw_get::<Value>(k), Ok(Value::Boolean(false)))
}

/// A loaded script: a [`Hook`] for the generator.
pub struct LuaHook {
    lua: Lua,
    modify: Function,
    pkts: Packets,
    /// The script's `config` table.
    pub config: ScriptConfig,
    /// Batches handed to the script.
    pub calls: u64,
    name: String,
    /// The script's globals and the key `checksums`, made once: no Lua string or reference
    /// made per batch to read it.
    globals: Table,
    ck_key: mlua::String,
    /// `checksums` as last read (at load, then after each call): what the setters do in the
    /// next call. Only the script changes it, and it runs only in the calls.
    ck: bool,
}

impl LuaHook {
    /// Loads `path` (its top level runs once) into a state set up by `opts`.
    pub fn load(path: &str, opts: &ScriptOptions) -> Result<LuaHook, ScriptError> {
        let src = script::read_script(path)?;
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
        let script::Loaded {
            lua,
            func: modify,
            name,
        } = script::load(name, src, opts, "modify(pkts, n)", |_| Ok(()))?;
        let le = |e: mlua::Error| ScriptError::of(&e, &name, &lua);
        let mut config = ScriptConfig::default();
        if let Value::Table(t) = lua.globals().get::<Value>("config").map_err(le)? {
            for pair in t.pairs::<String, Value>() {
                let (k, v) = pair.map_err(le)?;
                if k == "streams" {
                    if let Value::Table(list) = &v {
                        for e in list.clone().sequence_values::<Value>() {
                            config
                                .streams
                                .push(stream_entry(&e.map_err(le)?).map_err(le)?);
                        }
                        continue;
                    }
                }
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
        let access = Access {
            tool: "gen",
            write: true,
            drop: false,
        };
        let pkts = Packets::new(&lua, access, LinkType::ETHERNET).map_err(le)?;
        let ck_key = lua.create_string("checksums").map_err(le)?;
        let globals = lua.globals();
        let ck = checksums(&globals, &ck_key);
        Ok(LuaHook {
            globals,
            ck_key,
            ck,
            lua,
            modify,
            pkts,
            config,
            calls: 0,
            name,
        })
    }

    /// The call to the script's `modify(pkts, n)` of a loaded batch, then the checksums of
    /// the packets it wrote otherwise than by the setters (`fix`: [`Packets::store`]).
    fn call(&mut self, n: usize) -> Result<(), mlua::Error> {
        self.calls += 1;
        // `checksums = false`: the script (or the NIC) takes care of them (MoonGen's
        // offloadUdpChecksums). As it was before the call (read after the last one): the
        // setters keep them right as they write; after the call: the full recompute of the
        // packets written otherwise. One read of the global a batch.
        self.pkts.set_checksums(self.ck);
        let r = self.modify.call::<()>((self.pkts.table(), n));
        self.ck = checksums(&self.globals, &self.ck_key);
        r
    }
}

/// Recomputes the checksums of packet `i` after a raw write (`fix` on).
fn fix_packet(i: usize, bytes: &mut [u8], streams: &[u8], layouts: &[Layout]) {
    let layout = streams.get(i).and_then(|&s| layouts.get(usize::from(s)));
    if let Some(l) = layout {
        // The template's offsets hold while its IPv4 headers keep their 20 bytes; a
        // script that wrote another header length (options) moved what follows: the
        // checksums are then found by parsing the bytes, not written at the template's
        // offsets (which would overwrite the moved ports and leave options out).
        let ihl5 = |o: usize| bytes.get(o).is_none_or(|&v| v & 0xf == 5);
        if l.outer_ip.is_none_or(ihl5) && (l.v6 || ihl5(l.l3)) {
            fix_checksums(bytes, l);
        } else {
            crate::apps::lua::packet::fix_checksums(bytes, LinkType::ETHERNET);
        }
    }
}

impl Drop for LuaHook {
    /// The batches end without a pass over the slots ([`Packets::end_written`]): they no
    /// longer point at the last batch's frames when the state closes (its `__gc` functions run
    /// then), before the fields drop.
    fn drop(&mut self) {
        self.pkts.done();
    }
}

impl Hook for LuaHook {
    fn modify(
        &mut self,
        batch: &mut Batch,
        streams: &[u8],
        layouts: &[Layout],
    ) -> Result<(), String> {
        let n = self.pkts.load_built(batch, streams)?;
        let r = self.call(n);
        if self.ck {
            self.pkts
                .end_written(batch, |i, bytes| fix_packet(i, bytes, streams, layouts));
        }
        r.map_err(|e| script::error_line(&e, &self.name, &self.lua))
    }

    fn in_place(&self) -> bool {
        true
    }

    fn modify_frames(
        &mut self,
        frames: &mut [&mut [u8]],
        lens: &[u32],
        streams: &[u8],
        layouts: &[Layout],
    ) -> Result<(), String> {
        let n = self.pkts.load_frames(frames, lens, streams);
        let r = self.call(n);
        if self.ck {
            self.pkts.end_written_frames(frames, lens, |i, bytes| {
                fix_packet(i, bytes, streams, layouts)
            });
        }
        r.map_err(|e| script::error_line(&e, &self.name, &self.lua))
    }
}

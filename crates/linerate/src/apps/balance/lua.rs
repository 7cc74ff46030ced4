//! `-m lua:FILE`: a user function (LuaJIT, through mlua) decides the queues of each batch.
//!
//! The script defines `balance(pkts, n)`, called once per batch: `pkts[1..n]` are the packet
//! objects every linerate script sees ([`crate::apps::lua::packet`], docs/lua.md: `pkts[i].ip4.src`,
//! `pkts[i].udp.dport`, `pkts[i]:getU16(off)`, ...), read-only here, and it returns a table `r`
//! where `r[i]` is, for packet `i`:
//! - a queue number (0-based, over all queues of the cluster): that queue;
//! - a table of queue numbers: every one of them (fan-out, zero copy);
//! - `false` or `nil`: drop (counted as `filtered`); so does `pkts[i]:drop()`.
//!
//! Queue numbers out of range are dropped the same way. Globals set before the script runs:
//! `QUEUES` (number of queues) and `APPS` (a table: queues of each application, in order).

use crate::apps::lua::packet::{Access, Packets};
use crate::apps::lua::{self as script, ScriptOptions};
use crate::mem::{Batch, BATCH};
use crate::wire::LinkType;
use mlua::{Function, Lua, Value};
use std::path::Path;

/// A loaded script.
pub struct LuaScript {
    lua: Lua,
    func: Function,
    pkts: Packets,
    name: String,
    queues: usize,
}

impl std::fmt::Debug for LuaScript {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LuaScript")
            .field("name", &self.name)
            .finish()
    }
}

pub use crate::apps::lua::ScriptError as LuaError;

impl LuaScript {
    /// Loads `path` for a cluster with `apps[a]` queues per application, into a state set up
    /// by `opts`.
    pub fn load(path: &Path, apps: &[u32], opts: &ScriptOptions) -> Result<LuaScript, LuaError> {
        let name = path.display().to_string();
        let src = script::read_script(&name)?;
        Self::from_source_with(&name, &src, apps, opts)
    }

    /// Loads a script from its text with the default [`ScriptOptions`]; `name` is what errors
    /// call it.
    pub fn from_source(name: &str, src: &str, apps: &[u32]) -> Result<LuaScript, LuaError> {
        Self::from_source_with(name, src.as_bytes(), apps, &ScriptOptions::default())
    }

    /// Loads a script from its text into a state set up by `opts`.
    pub fn from_source_with(
        name: &str,
        src: &[u8],
        apps: &[u32],
        opts: &ScriptOptions,
    ) -> Result<LuaScript, LuaError> {
        let queues: u32 = apps.iter().sum();
        let script::Loaded { lua, func, name } =
            script::load(name, src, opts, "balance(pkts, n)", |lua| {
                let g = lua.globals();
                g.set("QUEUES", queues)?;
                let t = lua.create_table()?;
                for (i, n) in apps.iter().enumerate() {
                    t.raw_set(i + 1, *n)?;
                }
                g.set("APPS", t)
            })?;
        let access = Access {
            tool: "balance",
            write: false,
            drop: true,
        };
        let pkts = Packets::new(&lua, access, LinkType::ETHERNET)
            .map_err(|e| LuaError::of(&e, &name, &lua))?;
        Ok(LuaScript {
            lua,
            func,
            pkts,
            name,
            queues: queues as usize,
        })
    }

    /// The script's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Fills `out[i]` for the packets of `batch` whose bit is set in `keep` (the others stay 0).
    pub fn decide(
        &mut self,
        batch: &Batch,
        keep: u64,
        out: &mut [u64; BATCH],
    ) -> Result<(), LuaError> {
        let (lua, name) = (&self.lua, self.name.as_str());
        let lua_err = |e| LuaError::of(&e, name, lua);
        let n = self.pkts.load(batch, &[]).map_err(LuaError::Lua)?;
        let r = self
            .func
            .call::<Value>((self.pkts.table(), n, self.pkts.queues()));
        if let Ok(Value::Nil) = r {
            // The fast form: the script filled q (a queue from 0 to 63, or -1), read back as
            // the batch ends.
            let all = if self.queues >= 64 {
                u64::MAX
            } else {
                (1u64 << self.queues) - 1
            };
            let out = &mut out[..n];
            self.pkts.finish(|i, dropped, q| {
                let take = keep >> i & 1 != 0 && !dropped && (0..64).contains(&q);
                out[i] = if take { (1u64 << (q & 63)) & all } else { 0 };
            });
            return Ok(());
        }
        self.pkts.done();
        let r = match r.map_err(lua_err)? {
            Value::Table(r) => r,
            _ => {
                return Err(LuaError::Lua(format!(
                    "{}: balance() must return a table (queue, table of queues or false per \
                     packet), or nothing when it fills q",
                    self.name
                )))
            }
        };
        let all = if self.queues >= 64 {
            u64::MAX
        } else {
            (1u64 << self.queues) - 1
        };
        let one = |v: &Value| -> u64 {
            let q = match v {
                Value::Integer(q) => *q,
                Value::Number(f) if f.fract() == 0.0 => *f as i64,
                _ => return 0,
            };
            if (0..64).contains(&q) {
                (1u64 << q) & all
            } else {
                0
            }
        };
        for (i, o) in out[..n].iter_mut().enumerate() {
            if keep & (1 << i) == 0 || self.pkts.dropped(i) {
                *o = 0;
                continue;
            }
            let v: Value = r.raw_get(i + 1).map_err(lua_err)?;
            *o = match &v {
                Value::Table(t) => {
                    let mut m = 0;
                    for j in 1..=t.raw_len().min(64) {
                        m |= one(&t.raw_get::<Value>(j).map_err(lua_err)?);
                    }
                    m
                }
                v => one(v),
            };
        }
        Ok(())
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::mem::{Desc, Pool, PoolConfig};
    use std::sync::Arc;

    fn batch(n: usize) -> Batch {
        let pool = Arc::new(Pool::new(&PoolConfig::default()).unwrap());
        let mut b = Batch::with_pool(&pool);
        for i in 0..n {
            let mut fr = b.alloc().unwrap();
            fr.buf()[..4].copy_from_slice(&[i as u8, 1, 2, 3]);
            fr.push(Desc {
                len: 4,
                wire_len: 4,
                ..Default::default()
            });
        }
        b
    }

    #[test]
    fn queues_drops_and_fanout_from_a_script() {
        let src = r#"
            function balance(pkts, n)
              local r = {}
              for i = 1, n do
                local b = pkts[i]:getByte(0)
                if b % 4 == 0 then r[i] = false          -- drop
                elseif b % 4 == 1 then r[i] = { 0, 2 }   -- fan-out
                elseif b % 4 == 2 then r[i] = 99         -- out of range: drop
                else r[i] = QUEUES - 1 end
              end
              return r
            end"#;
        let mut s = LuaScript::from_source("t.lua", src, &[2, 1]).unwrap();
        let b = batch(8);
        let mut out = [0u64; BATCH];
        s.decide(&b, u64::MAX, &mut out).unwrap();
        assert_eq!(&out[..8], &[0, 0b101, 0, 0b100, 0, 0b101, 0, 0b100]);
        // a smaller batch next: the table is trimmed
        let b = batch(2);
        s.decide(&b, 0b01, &mut out).unwrap();
        assert_eq!(&out[..2], &[0, 0]);
    }

    #[test]
    fn the_fast_form_writes_q_and_what_it_leaves_is_dropped() {
        let src = r#"
            function balance(pkts, n, q)
              for i = 1, n do
                local b = pkts[i]:getByte(0)
                if b % 4 == 0 then q[i] = 1
                elseif b % 4 == 1 then q[i] = false   -- drop
                elseif b % 4 == 2 then q[i] = 99      -- out of range: drop
                end                                    -- 3: not set: drop
                if b == 4 then pkts[i]:drop() end
              end
            end"#;
        let mut s = LuaScript::from_source("q.lua", src, &[2, 1]).unwrap();
        let mut out = [7u64; BATCH];
        s.decide(&batch(6), !(1 << 5), &mut out).unwrap();
        assert_eq!(&out[..6], &[0b10, 0, 0, 0, 0, 0]);
        // Past the batch: an error naming the script and line.
        let mut s = LuaScript::from_source(
            "q2.lua",
            "function balance(pkts, n, q)\n  q[n + 1] = 0\nend",
            &[1],
        )
        .unwrap();
        let e = s.decide(&batch(2), 3, &mut out).unwrap_err().to_string();
        assert!(
            e.contains("q2.lua:2: q[3]: not a packet of this batch of 2"),
            "{e}"
        );
    }

    #[test]
    fn errors_name_the_script_and_line() {
        let e = LuaScript::from_source("bad.lua", "function balance(\n", &[1]).unwrap_err();
        assert!(e.to_string().contains("bad.lua"), "{e}");
        let e = LuaScript::from_source("none.lua", "x = 1", &[1]).unwrap_err();
        assert!(
            e.to_string()
                .contains("defines no function balance(pkts, n)"),
            "{e}"
        );
        let mut s = LuaScript::from_source(
            "rt.lua",
            "function balance(p, n)\n  return nil + 1\nend",
            &[1],
        )
        .unwrap();
        let mut out = [0u64; BATCH];
        let e = s.decide(&batch(1), 1, &mut out).unwrap_err().to_string();
        assert!(e.contains("rt.lua:2"), "{e}");
    }
}

//! The one place where linerate makes a Lua state (LuaJIT through mlua), for every script it
//! runs: `gen --script`, `balance -m lua:FILE`, `fwd --script`.
//!
//! Scripts are programs, as in MoonGen: they keep Lua's standard libraries (`io`, `os`,
//! `require`, `load`, `dofile`, ...; only `debug` and `ffi` are left out), so **a script runs
//! with the tool's privileges** (run as root, it can do anything root can). What is bounded is
//! its memory: each state has a limit ([`DEFAULT_MEM`] unless `--lua-mem SIZE` says otherwise);
//! an allocation past it fails with a Lua memory error, which the tools report naming the
//! script and stop on (exit code 1), after counting what was sent or received until then.
//!
//! A script that does not return (a loop without end) does not keep a tool from stopping: with
//! an [`Interrupt`] in its options, a stop signal or the time limit ends it within a second,
//! compiled by LuaJIT or not. Once either has been due for [`GRACE`] (a script that returns in
//! that time ends as the tool asks, without an error), the script fails with "stopped by ...:
//! the script did not return" at its current line ([`is_stop_error`]: the tools report it
//! naming the script and line, after their summary and with their outputs sealed, exit code 1).
//!
//! How: the interpreter calls a count hook every [`CHECK_EVERY`] Lua instructions, which looks
//! at the [`Interrupt`] and raises the error. LuaJIT never calls hooks from compiled code (a
//! loop compiled into a trace runs on whatever the hook says), so the compiler was off in these
//! states until LuaJIT's profiler was put to work (`sys::luajit`): while it runs, LuaJIT records
//! traces with a check at each new source line, and its timer (every [`TICK_MS`] ms of process
//! CPU time) makes those checks leave compiled code for its callback, which asks the
//! [`Interrupt`]; when the stop is due it flushes the state's traces and turns the compiler off,
//! and the count hook stops the script at its line. The timer is a SIGPROF (`SA_RESTART`) to
//! any thread of the process while such a state lives: blocking calls restart, those with a
//! timeout return EINTR, which linerate's ports and sockets take as "nothing yet".
//!
//! Measured (crates/linerate/examples/lua_stop_cost.rs, BENCHMARKS.md): a compiled loop with
//! the profiler costs the same as without (within the noise of the machine), the interpreter
//! 2.5 to 3.5 times more; so the compiler is on by default, and a script may still turn it off
//! (`jit.off()`). The packet views ([`packet`]) run compiled with the script; their checks,
//! one per source line and function a trace goes through, are why they are loaded as one line. The other way considered, a watchdog thread that ends the run from outside
//! while the script still runs (outputs shared behind a lock, the summary from counters), is
//! heavier and touches every tool: not needed.
//!
//! LuaJIT has one profiler per process: the first state with an [`Interrupt`] holds it until
//! it closes. A state made while another holds it (gen `--threads N`, one state per thread) runs
//! interpreted, and its `jit.on()` is an error saying why: a script a signal could not stop is
//! worse than a slower one. `require("jit.profile")` is refused in every such state (a script
//! could stop the profiler with it).

pub mod packet;

use mlua::{Lua, StdLib};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Default memory bound of one script's Lua state: 256 MiB.
pub const DEFAULT_MEM: usize = 256 << 20;
/// Smallest memory bound `--lua-mem` takes (the libraries alone take ~100 KiB).
pub const MIN_MEM: usize = 1 << 20;
/// Largest memory bound `--lua-mem` takes.
pub const MAX_MEM: usize = 64 << 30;

/// Lua instructions between two looks at an [`Interrupt`].
pub const CHECK_EVERY: u32 = 10_000;

/// Milliseconds of process CPU time between two looks of LuaJIT's profiler at an
/// [`Interrupt`] (what stops compiled code).
pub const TICK_MS: u32 = 20;

/// What a state that cannot hold LuaJIT's profiler runs first: the compiler off, and
/// `jit.on()` an error saying why (a script the signal could not stop is worse than a slow one).
const INTERPRETED: &str = r#"
jit.off()
jit.on = function()
  error("jit.on(): this script runs interpreted: LuaJIT can stop compiled code in one script state per process, and another holds it (gen --threads N loads the script once per thread)", 2)
end
"#;

/// What every state with an [`Interrupt`] runs first: LuaJIT's profiler module, which could
/// stop the profiler that stops compiled code, is refused.
const NO_PROFILE: &str = r#"
package.loaded["jit.profile"] = nil
package.preload["jit.profile"] = function()
  error("jit.profile: linerate keeps LuaJIT's profiler to stop scripts (a signal, -t)", 2)
end
"#;

/// What every state runs after the packet views, before any script: LuaJIT bytecode (binary
/// chunks) is refused wherever Lua would load it, and `jit.util` is out of reach. LuaJIT does
/// not check bytecode: a crafted chunk (`load(string.dump(f))` edited) reads and writes any
/// memory, and `jit.util.tracek` hands out the constants of compiled traces, among them the FFI
/// functions the views use; either would give a script what keeping `ffi` from it guards.
/// `os.exit` is an error too: it would end the process with its outputs cut.
const TEXT_ONLY: &str = r#"
local load, loadfile, error, format = load, loadfile, error, string.format
_G.load = function(chunk, name, _, env) return load(chunk, name, "t", env) end
_G.loadstring = function(s, name) return load(s, name, "t") end
_G.loadfile = function(file, _, env) return loadfile(file, "t", env) end
_G.dofile = function(file)
  local f, e = loadfile(file, "t")
  if not f then error(e, 2) end
  return f()
end
local searchpath, package = package.searchpath, package
if package.loaders then
  package.loaders[2] = function(name)
    local path, e = searchpath(name, package.path)
    if not path then return e end
    local f, le = loadfile(path, "t")
    if not f then
      error(format("error loading module '%s' from file '%s':\n\t%s", name, path, le), 0)
    end
    return f
  end
end
os.exit = function(code)
  error("os.exit(" .. tostring(code) .. "): a script does not end the process, whose outputs "
    .. "would be cut (unflushed capture files, no summary); raise an error, or stop the run with "
    .. "-c, -t or a signal", 2)
end
package.loaded["jit.util"] = nil
package.preload["jit.util"] = function()
  error("jit.util: it reads the compiled code's memory, which linerate keeps from scripts", 2)
end
"#;

/// What every state with an [`Interrupt`] runs: `pcall`, `xpcall` and `coroutine.resume` hand
/// on an error caught once the script must stop (the stop error itself, or any other then), so
/// a script that catches errors in a loop is still stopped. Called with the question "must the
/// script stop now?".
const NO_CATCH: &str = r#"
local due = ...
local pcall, xpcall, resume, error = pcall, xpcall, coroutine.resume, error
local function pass(ok, ...)
  if not ok and due() then error((...), 0) end
  return ok, ...
end
_G.pcall = function(f, ...) return pass(pcall(f, ...)) end
_G.xpcall = function(f, h, ...) return pass(xpcall(f, h, ...)) end
coroutine.resume = function(co, ...) return pass(resume(co, ...)) end
"#;

/// How long a stop (or the time limit) has been due before a script still running is stopped:
/// longer than any call that returns (a batch), short enough to stop within a second.
pub const GRACE: Duration = Duration::from_millis(300);

/// How a script's Lua state is set up.
#[derive(Clone, Debug)]
pub struct ScriptOptions {
    /// Memory bound of the state in bytes (see [`DEFAULT_MEM`]).
    pub mem: usize,
    /// What ends a script that does not return (None: nothing).
    pub interrupt: Option<Interrupt>,
}

impl Default for ScriptOptions {
    fn default() -> Self {
        ScriptOptions {
            mem: DEFAULT_MEM,
            interrupt: None,
        }
    }
}

/// What ends a script that does not return: a stop flag (set by a signal) and a time limit.
/// Clones share both.
#[derive(Clone, Debug, Default)]
pub struct Interrupt {
    stop: Option<Arc<AtomicBool>>,
    /// Monotonic ns after which the script is stopped (0: no limit).
    deadline: Arc<AtomicU64>,
    /// Monotonic ns when the hook first saw the stop flag set (0: not yet).
    stop_seen: Arc<AtomicU64>,
}

impl Interrupt {
    /// Stops scripts once `stop` is set.
    pub fn new(stop: Arc<AtomicBool>) -> Interrupt {
        Interrupt {
            stop: Some(stop),
            deadline: Arc::new(AtomicU64::new(0)),
            stop_seen: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Also stops scripts `after` from now (None: no time limit).
    pub fn set_limit(&self, after: Option<Duration>) {
        let d = after.map_or(0, |d| {
            crate::time::mono_ns()
                .saturating_add(d.as_nanos().min(u64::MAX as u128) as u64)
                .max(1)
        });
        self.deadline.store(d, Ordering::Relaxed);
    }

    /// Why a script must stop now, if it must: the stop flag has been set, or the time limit
    /// passed, [`GRACE`] ago.
    pub fn due(&self) -> Option<&'static str> {
        let grace = GRACE.as_nanos() as u64;
        let now = crate::time::mono_ns();
        if self
            .stop
            .as_ref()
            .is_some_and(|s| s.load(Ordering::Relaxed))
        {
            let seen = self.stop_seen.load(Ordering::Relaxed);
            if seen == 0 {
                self.stop_seen.store(now.max(1), Ordering::Relaxed);
            } else if now.saturating_sub(seen) >= grace {
                return Some("a stop signal");
            }
        }
        let d = self.deadline.load(Ordering::Relaxed);
        (d != 0 && now >= d.saturating_add(grace)).then_some("the time limit")
    }
}

/// The error a script gets from its [`Interrupt`].
#[derive(Debug, thiserror::Error)]
#[error("stopped by {0}: the script did not return")]
pub struct Stopped(pub &'static str);

/// Whether `e` (or its cause) is a script stopped by its [`Interrupt`].
pub fn is_stop_error(e: &mlua::Error) -> bool {
    match e {
        mlua::Error::ExternalError(x) => x.is::<Stopped>(),
        // The hook raises its message as a string (sys::luajit::stop_hook_on).
        mlua::Error::RuntimeError(m) => {
            let first = m.lines().next().unwrap_or("");
            first.starts_with("stopped by ") && first.ends_with(": the script did not return")
        }
        mlua::Error::CallbackError { cause, .. } => is_stop_error(cause),
        mlua::Error::WithContext { cause, .. } => is_stop_error(cause),
        _ => false,
    }
}

/// Why a script could not be loaded, or failed: the same for every tool's scripts.
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
    /// The script went over its memory bound (`--lua-mem`).
    #[error("{0}")]
    Memory(String),
    /// The script did not return and was stopped (a signal or the time limit).
    #[error("{0}")]
    Stopped(String),
    /// The script defines no function the tool calls.
    #[error("{script}: the script defines no function {func}")]
    NoFunction {
        /// The script.
        script: String,
        /// The function the tool calls, with its arguments (`modify(pkts, n)`).
        func: &'static str,
    },
}

impl ScriptError {
    /// A Lua error of script `name` run in `lua`, on one line ([`error_line`]).
    pub fn of(e: &mlua::Error, name: &str, lua: &Lua) -> ScriptError {
        let m = error_line(e, name, lua);
        if is_memory_error(e) {
            ScriptError::Memory(m)
        } else if is_stop_error(e) {
            ScriptError::Stopped(m)
        } else {
            ScriptError::Lua(m)
        }
    }
}

/// A script in its own state: its top level has run, the function the tool calls was found.
pub struct Loaded {
    /// The script's state.
    pub lua: Lua,
    /// The function the tool calls per batch.
    pub func: mlua::Function,
    /// The script's name in messages (its file).
    pub name: String,
}

/// Reads a script file (read-only; the path is the script's name in messages).
pub fn read_script(path: &str) -> Result<Vec<u8>, ScriptError> {
    std::fs::read(path).map_err(|source| ScriptError::Io {
        path: path.into(),
        source,
    })
}

/// Makes a state for `opts`, runs `setup` on it (globals the tool gives), then the script's top
/// level, and finds its function `func` (`"modify(pkts, n)"`: the name is what comes before
/// the parenthesis). `name` stands for the script's file in messages.
pub fn load(
    name: &str,
    src: &[u8],
    opts: &ScriptOptions,
    func: &'static str,
    setup: impl FnOnce(&Lua) -> mlua::Result<()>,
) -> Result<Loaded, ScriptError> {
    let lua = new_state(opts).map_err(|e| ScriptError::Lua(format!("{name}: {e}")))?;
    let le = |e: mlua::Error| ScriptError::of(&e, name, &lua);
    setup(&lua).map_err(le)?;
    // Text only: a script file of LuaJIT bytecode is refused (see TEXT_ONLY).
    lua.load(src)
        .set_name(format!("@{name}"))
        .set_mode(mlua::ChunkMode::Text)
        .exec()
        .map_err(le)?;
    let fname = func.split('(').next().unwrap_or(func);
    let f = match lua.globals().get::<mlua::Value>(fname).map_err(le)? {
        mlua::Value::Function(f) => f,
        _ => {
            return Err(ScriptError::NoFunction {
                script: name.into(),
                func,
            })
        }
    };
    Ok(Loaded {
        lua,
        func: f,
        name: name.into(),
    })
}

/// Why a Lua state could not be made.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// The memory bound could not be set.
    #[error("cannot bound the script's memory: {0}")]
    Limit(String),
    /// LuaJIT could not be set up for an [`Interrupt`] (its profiler module refused, or the
    /// compiler turned off in a state that cannot hold the profiler).
    #[error("cannot set LuaJIT up to stop the script: {0}")]
    Jit(String),
    /// The packet views could not be loaded.
    #[error("cannot load the packet views: {0}")]
    Packets(String),
}

/// A new Lua state: the standard libraries but `debug` and `ffi`, and the memory bound of
/// `opts`. Every script of every tool gets its state here.
pub fn new_state(opts: &ScriptOptions) -> Result<Lua, StateError> {
    // LuaJIT's FFI is loaded for the packet views alone: `packet::install` keeps it and takes
    // it out of the scripts' reach before they run.
    let lua = crate::sys::lua_state::with_ffi(StdLib::ALL_SAFE);
    lua.set_memory_limit(opts.mem)
        .map_err(|e| StateError::Limit(e.to_string()))?;
    packet::install(&lua).map_err(|e| StateError::Packets(e.to_string()))?;
    lua.load(TEXT_ONLY)
        .set_name("=linerate text-only")
        .exec()
        .map_err(|e| StateError::Packets(e.to_string()))?;
    if let Some(i) = &opts.interrupt {
        // LuaJIT calls hooks only from its interpreter: its profiler is what brings compiled
        // code back to it once the script must stop (sys::luajit). One state per process can
        // hold it; any other runs interpreted.
        lua.load(NO_PROFILE)
            .exec()
            .map_err(|e| StateError::Jit(e.to_string()))?;
        let tick = i.clone();
        if !crate::sys::luajit::watch(&lua, TICK_MS, Arc::new(move || tick.due().is_some())) {
            lua.load(INTERPRETED)
                .exec()
                .map_err(|e| StateError::Jit(e.to_string()))?;
        }
        let ask = i.clone();
        let due = lua
            .create_function(move |_, ()| Ok(ask.due().is_some()))
            .map_err(|e| StateError::Jit(e.to_string()))?;
        lua.load(NO_CATCH)
            .set_name("=linerate stop")
            .call::<()>(due)
            .map_err(|e| StateError::Jit(e.to_string()))?;
        // The hook is LuaJIT's own (sys::luajit), the state's for all its coroutines: mlua's
        // removes itself in a coroutine, and a coroutine's endless loop was never stopped.
        let i = i.clone();
        crate::sys::luajit::stop_hook_on(
            &lua,
            CHECK_EVERY,
            Box::new(move || i.due().map(|why| Stopped(why).to_string())),
        );
    }
    Ok(lua)
}

/// Parses a `--lua-mem` value (`256MiB`, `1GiB`, `64M`) and checks its range.
pub fn parse_mem(s: &str) -> Result<usize, String> {
    match crate::units::parse_size(s) {
        Ok(v) if (MIN_MEM as u64..=MAX_MEM as u64).contains(&v) => Ok(v as usize),
        Ok(_) => Err(format!("'{s}': a size between 1MiB and 64GiB")),
        Err(e) => Err(format!("{e}; a size between 1MiB and 64GiB")),
    }
}

/// A size in MiB for messages (`256 MiB`).
fn mib(n: usize) -> String {
    if n.is_multiple_of(1 << 20) {
        format!("{} MiB", n >> 20)
    } else {
        format!("{:.1} MiB", n as f64 / f64::from(1u32 << 20))
    }
}

/// Whether `e` (or its cause) is Lua running out of memory.
pub fn is_memory_error(e: &mlua::Error) -> bool {
    match e {
        mlua::Error::MemoryError(_) => true,
        mlua::Error::CallbackError { cause, .. } => is_memory_error(cause),
        mlua::Error::WithContext { cause, .. } => is_memory_error(cause),
        _ => false,
    }
}

/// A Lua error as one line naming the script: `FILE:LINE: message` for errors Lua places, and
/// for a memory error `FILE: over its memory bound of N MiB (...)`. `name` is the script's file
/// as it was given to `set_name("@name")`. Errors raised in Rust methods carry no position:
/// the script's innermost frame in the traceback gives it.
pub fn error_line(e: &mlua::Error, name: &str, lua: &Lua) -> String {
    if is_memory_error(e) {
        return format!(
            "{name}: over its memory bound of {} (used {}; --lua-mem SIZE sets the bound)",
            mib(lua_limit(lua)),
            mib(lua.used_memory()),
        );
    }
    message(e, name)
}

/// The memory bound of `lua` (0 if none).
fn lua_limit(lua: &Lua) -> usize {
    // set_memory_limit returns the previous limit: read it by setting it again.
    match lua.set_memory_limit(0) {
        Ok(l) => {
            let _ = lua.set_memory_limit(l);
            l
        }
        Err(_) => 0,
    }
}

fn message(e: &mlua::Error, name: &str) -> String {
    let m = placed(e, name);
    if m.starts_with(&format!("{name}:")) {
        m
    } else {
        format!("{name}: {m}")
    }
}

/// The first line of `e`, with `name:LINE:` when Lua or the traceback places it.
fn placed(e: &mlua::Error, name: &str) -> String {
    let first = |m: &str| m.lines().next().unwrap_or("").trim().to_string();
    match e {
        mlua::Error::CallbackError { cause, traceback } => {
            let inner = placed(cause, name);
            if inner.starts_with(&format!("{name}:")) {
                return inner;
            }
            match script_line(traceback, name) {
                Some(line) => format!("{name}:{line}: {inner}"),
                None => inner,
            }
        }
        // Errors the packet views raise carry no position: the traceback's innermost frame
        // of the script gives it.
        mlua::Error::RuntimeError(m) => {
            let f = first(m);
            match script_line(m, name) {
                Some(line) if !f.starts_with(&format!("{name}:")) => {
                    format!("{name}:{line}: {f}")
                }
                _ => f,
            }
        }
        mlua::Error::SyntaxError { message: m, .. } => first(m),
        other => first(&other.to_string()),
    }
}

/// The line of the script's innermost frame in a traceback (`\tNAME:LINE: in ...`).
fn script_line(traceback: &str, name: &str) -> Option<String> {
    traceback.lines().skip(1).map(str::trim).find_map(|l| {
        let rest = l.strip_prefix(name)?.strip_prefix(':')?;
        let line: String = rest.chars().take_while(char::is_ascii_digit).collect();
        (!line.is_empty()).then_some(line)
    })
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn libraries_stay_and_memory_is_bounded() {
        let lua = new_state(&ScriptOptions {
            mem: 8 << 20,
            ..Default::default()
        })
        .unwrap();
        // Scripts are programs: io and os are there; debug and ffi are not.
        let (io, os, dbg): (bool, bool, bool) = lua
            .load("return io ~= nil, os ~= nil, debug ~= nil")
            .eval()
            .unwrap();
        assert!(io && os && !dbg);
        let e = lua
            .load("local t = {} for i = 1, 1e8 do t[i] = string.rep('x', 64) .. i end")
            .set_name("@grow.lua")
            .exec()
            .unwrap_err();
        assert!(is_memory_error(&e), "{e:?}");
        let m = error_line(&e, "grow.lua", &lua);
        assert!(
            m.starts_with("grow.lua: over its memory bound of 8 MiB"),
            "{m}"
        );
        assert!(lua.used_memory() <= 8 << 20);
    }

    #[test]
    fn errors_are_one_line_with_the_script() {
        let lua = new_state(&ScriptOptions::default()).unwrap();
        let e = lua
            .load("x = nil + 1")
            .set_name("@bad.lua")
            .exec()
            .unwrap_err();
        let m = error_line(&e, "bad.lua", &lua);
        assert!(m.starts_with("bad.lua:1:"), "{m}");
        assert!(!m.contains('\n'));
    }

    #[test]
    fn bytecode_and_jit_util_are_refused() {
        let lua = new_state(&ScriptOptions::default()).unwrap();
        // Every way Lua loads a chunk refuses LuaJIT bytecode; text still loads.
        let dir = std::env::temp_dir().join(format!("lr-bytecode-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let bin = dir.join("bc.lua");
        let dumped: mlua::String = lua
            .load("return string.dump(function() return 42 end)")
            .eval()
            .unwrap();
        std::fs::write(&bin, dumped.as_bytes()).unwrap();
        lua.globals().set("BIN", bin.to_str().unwrap()).unwrap();
        lua.globals().set("DIR", dir.to_str().unwrap()).unwrap();
        let r: String = lua
            .load(
                r#"
                local b = string.dump(function() return 42 end)
                local r = {}
                local f, e = load(b)
                r[#r + 1] = tostring(f) .. ":" .. tostring(e)
                f, e = load(b, "x", "b")
                r[#r + 1] = tostring(f) .. ":" .. tostring(e)
                f, e = loadstring(b)
                r[#r + 1] = tostring(f) .. ":" .. tostring(e)
                f, e = loadfile(BIN, "bt")
                r[#r + 1] = tostring(f) .. ":" .. tostring(e)
                r[#r + 1] = tostring(select(2, pcall(dofile, BIN)))
                package.path = DIR .. "/?.lua"
                r[#r + 1] = tostring(select(2, pcall(require, "bc")))
                r[#r + 1] = tostring(select(2, pcall(require, "jit.util")))
                r[#r + 1] = tostring(load("return 7")())
                return table.concat(r, "|")"#,
            )
            .eval()
            .unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let parts: Vec<&str> = r.split('|').collect();
        assert_eq!(parts.len(), 8, "{r}");
        for p in &parts[..6] {
            assert!(
                p.contains("attempt to load chunk with wrong mode"),
                "{p} in {r}"
            );
        }
        assert!(parts[6].contains("jit.util: it reads"), "{r}");
        let e = lua
            .load("os.exit(3)")
            .set_name("@x.lua")
            .exec()
            .unwrap_err();
        assert!(
            error_line(&e, "x.lua", &lua).starts_with("x.lua:1: os.exit(3): a script does not end"),
            "{e}"
        );
        assert_eq!(parts[7], "7");
        // The script file itself: bytecode is refused.
        let e = load(
            "bc.lua",
            dumped.as_bytes().as_ref(),
            &ScriptOptions::default(),
            "modify(pkts, n)",
            |_| Ok(()),
        )
        .err()
        .unwrap();
        assert!(e.to_string().contains("binary"), "{e}");
    }

    #[test]
    fn a_script_catching_the_stop_error_is_still_stopped() {
        for body in [
            "while true do pcall(function() while true do end end) end",
            "while true do xpcall(function() while true do end end, function(e) return e end) end",
            "while true do coroutine.resume(coroutine.create(function() while true do end end)) end",
        ] {
            let (tx, rx) = std::sync::mpsc::channel();
            let src = body.to_string();
            std::thread::spawn(move || {
                let i = Interrupt::new(Arc::new(AtomicBool::new(false)));
                i.set_limit(Some(Duration::ZERO));
                let lua = new_state(&ScriptOptions {
                    interrupt: Some(i),
                    ..Default::default()
                })
                .unwrap();
                let r = lua.load(src.as_str()).set_name("@catch.lua").exec();
                let _ = tx.send(r.map_err(|e| (is_stop_error(&e), error_line(&e, "catch.lua", &lua))));
            });
            let r = rx
                .recv_timeout(Duration::from_secs(20))
                .unwrap_or_else(|_| panic!("{body}: not stopped within 20 s"));
            let (stop, m) = r.unwrap_err();
            assert!(stop, "{body}: {m}");
            assert!(m.contains("stopped by the time limit"), "{body}: {m}");
        }
    }

    #[test]
    fn mem_flag_range() {
        assert_eq!(parse_mem("256MiB").unwrap(), 256 << 20);
        assert!(parse_mem("1KiB").unwrap_err().contains("between"));
        assert!(parse_mem("100GiB").unwrap_err().contains("between"));
        assert!(parse_mem("x").unwrap_err().contains("between"));
    }
}

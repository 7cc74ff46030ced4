//! LuaJIT's profiler as the way a stop reaches compiled code (see `apps::lua`, "A script that
//! does not return").
//!
//! LuaJIT calls hooks only from its interpreter: a loop compiled into a trace never sees the
//! count hook that stops a script. While LuaJIT's profiler runs in a state, its traces are
//! recorded with a check at each new source line (mode `l`), and a timer (SIGPROF, on process
//! CPU time, `SA_RESTART`) makes those checks leave the trace for the interpreter, which calls
//! the profiler's callback. The callback here asks whether the script must stop; when it must,
//! it flushes every trace and turns the compiler off, so the interpreter (and its count hook,
//! which raises the error at the script's line) runs what is left.
//!
//! LuaJIT has one profiler per process: one state at a time holds it ([`watch`] says whether
//! this one got it). It is released when that state closes (`lua_close` stops the profiler
//! before anything is freed).

use mlua::Lua;
use std::ffi::{c_char, c_int, c_void, CString};
use std::sync::{Arc, Mutex};

type ProfileCallback = unsafe extern "C" fn(
    data: *mut c_void,
    l: *mut mlua::lua_State,
    samples: c_int,
    vmstate: c_int,
);

// LuaJIT's C API (luajit.h), compiled into the LuaJIT that mlua links.
extern "C" {
    fn luaJIT_profile_start(
        l: *mut mlua::lua_State,
        mode: *const c_char,
        cb: ProfileCallback,
        data: *mut c_void,
    );
    fn luaJIT_setmode(l: *mut mlua::lua_State, idx: c_int, mode: c_int) -> c_int;
}

/// `LUAJIT_MODE_ENGINE` (luajit.h): the whole compiler.
const MODE_ENGINE: c_int = 0;
/// `LUAJIT_MODE_OFF`.
const MODE_OFF: c_int = 0x0000;
/// `LUAJIT_MODE_FLUSH`: flush every compiled trace.
const MODE_FLUSH: c_int = 0x0200;

/// What the profiler's callback asks: whether the state holding the profiler must stop now.
type Due = Arc<dyn Fn() -> bool + Send + Sync>;

/// The state holding the profiler, by its question (None: the profiler is free).
static HOLDER: Mutex<Option<Due>> = Mutex::new(None);

/// Releases the profiler when the state holding it is gone (kept in the state's app data,
/// which mlua drops after `lua_close`, which stopped the profiler).
struct Release;

impl Drop for Release {
    fn drop(&mut self) {
        *HOLDER.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
}

unsafe extern "C" fn on_tick(
    _data: *mut c_void,
    l: *mut mlua::lua_State,
    _samples: c_int,
    _vmstate: c_int,
) {
    let due = HOLDER
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
        .is_some_and(|d| {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| d())).unwrap_or(false)
        });
    if due {
        // SAFETY: `l` is the running thread of the state holding the profiler, handed by
        // LuaJIT to its profiler callback, which runs in the interpreter outside any trace
        // and outside the garbage collector (luaJIT_setmode refuses only inside a __gc); no
        // Lua value is touched, the stack is left as it is.
        unsafe {
            luaJIT_setmode(l, 0, MODE_ENGINE | MODE_FLUSH);
            luaJIT_setmode(l, 0, MODE_ENGINE | MODE_OFF);
        }
    }
}

/// Starts LuaJIT's profiler in `lua` (traces checked at each new line, a tick every
/// `interval_ms` of process CPU time), calling `due` at each tick; once it says yes, the
/// state's compiled code is flushed and the compiler turned off. Returns false when another
/// state of the process holds the profiler (nothing was done then).
pub(crate) fn watch(lua: &Lua, interval_ms: u32, due: Due) -> bool {
    let mut holder = HOLDER.lock().unwrap_or_else(|e| e.into_inner());
    if holder.is_some() {
        return false;
    }
    let Ok(mode) = CString::new(format!("li{}", interval_ms.max(1))) else {
        return false;
    };
    // SAFETY: exec_raw hands the state's main thread, valid for the call; the profiler is free
    // (HOLDER is None: the last state that held it is closed, and lua_close stopped it), so
    // luaJIT_profile_start takes it for this state; `mode` lives through the call (LuaJIT
    // parses it there), the callback is a plain function and `data` is unused. The profiler is
    // stopped by lua_close before the state is freed.
    let started = unsafe {
        lua.exec_raw::<()>((), |l| {
            luaJIT_profile_start(l, mode.as_ptr(), on_tick, std::ptr::null_mut());
        })
    };
    if started.is_err() {
        return false;
    }
    *holder = Some(due);
    lua.set_app_data(Release);
    true
}

/// What a state's stop hook asks: why the script must stop now, if it must.
pub(crate) type StopWhy = Box<dyn Fn() -> Option<String> + Send + Sync>;

/// Where a state's [`StopWhy`] is found (a light userdata in its registry).
const STOP_KEY: &std::ffi::CStr = c"linerate.stop";

/// Owns the [`StopWhy`] of a state (kept in its app data, dropped after `lua_close`).
struct StopBox(#[allow(dead_code)] Box<StopWhy>);

unsafe extern "C-unwind" fn stop_hook(l: *mut mlua::lua_State, _ar: *mut mlua::ffi::lua_Debug) {
    // SAFETY: `l` is a thread of the state the hook was set on, handed by LuaJIT to its hook;
    // the registry value is the light userdata `stop_hook_on` stored, a `StopWhy` that lives
    // in the state's app data until after lua_close; the stack is left as it was (one push,
    // one pop) unless the error is raised, which LuaJIT allows from a count hook. No Rust value
    // needing a drop is alive when lua_error unwinds (the message is copied into Lua first).
    unsafe {
        mlua::ffi::lua_getfield(l, mlua::ffi::LUA_REGISTRYINDEX, STOP_KEY.as_ptr());
        let p = mlua::ffi::lua_touserdata(l, -1) as *const StopWhy;
        mlua::ffi::lua_settop(l, -2);
        if p.is_null() {
            return;
        }
        let why = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (*p)())).unwrap_or(None);
        if let Some(m) = why {
            mlua::ffi::lua_pushlstring(l, m.as_ptr().cast(), m.len());
            drop(m);
            mlua::ffi::lua_error(l);
        }
    }
}

/// Sets the hook that stops the scripts of `lua` every `count` instructions of any of its
/// threads (coroutines included: LuaJIT's hook is the state's, not a thread's) once `why` says
/// so, raising its message as the script's error (a string: [`is_stop_message`] tells it).
pub(crate) fn stop_hook_on(lua: &Lua, count: u32, why: StopWhy) {
    let b = Box::new(why);
    let p: *const StopWhy = &*b;
    lua.set_app_data(StopBox(b));
    // SAFETY: exec_raw hands the state's main thread, valid for the call; the light userdata
    // points at the boxed StopWhy, whose box the state's app data owns (the pointer stays
    // valid until the state is dropped, after lua_close, when no hook runs any more).
    let _ = unsafe {
        lua.exec_raw::<()>((), |l| {
            mlua::ffi::lua_pushlightuserdata(l, p.cast_mut().cast());
            mlua::ffi::lua_setfield(l, mlua::ffi::LUA_REGISTRYINDEX, STOP_KEY.as_ptr());
            mlua::ffi::lua_sethook(
                l,
                Some(stop_hook),
                mlua::ffi::LUA_MASKCOUNT,
                count.min(i32::MAX as u32) as i32,
            );
        })
    };
}

//! A Lua state with LuaJIT's FFI library, for linerate's packet views (apps/lua/packets.lua).

use mlua::{Lua, LuaOptions, StdLib};

/// A new state with `libs` and LuaJIT's `ffi` library. The caller must run the packet prelude
/// (`apps::lua::packet::install`) before any script: it keeps `ffi` in its own upvalues and
/// takes it (and C modules) out of the scripts' reach.
pub(crate) fn with_ffi(libs: StdLib) -> Lua {
    // SAFETY: mlua calls this constructor unsafe because the FFI (and C modules) can reach any
    // memory. The only code that runs in the state before the prelude is the prelude itself
    // (apps::lua::new_state runs it right after this call); it captures `ffi` in upvalues,
    // removes it from package.loaded, package.preload and the globals, and removes
    // package.loadlib and the C searchers; the `debug` library, which could read upvalues, is
    // not in `libs` (ALL_SAFE leaves it out). Every pointer the prelude dereferences is a
    // frame's address and length filled by apps::lua::packet, checked before each access.
    unsafe { Lua::unsafe_new_with(libs | StdLib::FFI, LuaOptions::default()) }
}

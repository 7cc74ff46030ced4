//! What stopping a script that does not return costs in a Lua loop: the same loops in a state
//! with the compiler on and no hook (LuaJIT alone), in a state with an `Interrupt` (compiler on,
//! LuaJIT's profiler checking the traces at each new line, the count hook), and with the
//! compiler off (the interpreter and the count hook: what scripts ran with before). Rounds are
//! interleaved; the interpreted rows run a tenth of the iterations and are shown times ten.
//!
//!   cargo run --example lua_stop_cost -- [ROUNDS]
use linerate::apps::lua::{new_state, Interrupt, ScriptOptions};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

const ARITH: &str = "local x = 0\nfor i = 1, N do\n  x = (x + i) % 1000003\nend\nreturn x";
const CALLS: &str = "local function f(a, i) return (a + i) % 1000003 end\nlocal x = 0\nfor i = 1, N do\n  x = f(x, i)\nend\nreturn x";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let rounds: u32 = std::env::args().nth(1).map_or(Ok(3), |s| s.parse())?;
    for round in 0..rounds {
        for (what, interrupt, off) in [
            ("compiled, no hook", false, false),
            ("compiled, profiler + hook", true, false),
            ("interpreted + hook", true, true),
        ] {
            for (loop_name, src, n) in [("arith", ARITH, 3e8), ("calls", CALLS, 1e8)] {
                let opts = ScriptOptions {
                    interrupt: interrupt.then(|| Interrupt::new(Arc::new(AtomicBool::new(false)))),
                    ..Default::default()
                };
                let lua = new_state(&opts)?;
                let scale = if off { 10.0 } else { 1.0 };
                if off {
                    lua.load("jit.off()").exec()?;
                }
                let src = src.replace('N', &format!("{}", n / scale));
                let t = Instant::now();
                let _: f64 = lua.load(&src).eval()?;
                let s = t.elapsed().as_secs_f64() * scale;
                println!(
                    "round {round} {what:27} {loop_name}: {s:.2} s ({:.1} ns/iteration)",
                    s * 1e9 / n
                );
            }
        }
    }
    Ok(())
}

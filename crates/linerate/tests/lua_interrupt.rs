//! Scripts that do not return are stopped by their `Interrupt` (a stop flag, a time limit),
//! interpreted or compiled by LuaJIT (apps::lua). A test binary of its own: the states here hold
//! LuaJIT's profiler, whose SIGPROF would otherwise reach the library's other unit tests.
#![deny(unsafe_code)]

use linerate::apps::lua::{error_line, is_stop_error, new_state, Interrupt, ScriptOptions};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// LuaJIT's profiler is one per process: tests that take it take turns.
static PROFILER: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn a_script_that_does_not_return_is_stopped() {
    let _turn = PROFILER.lock().unwrap_or_else(|e| e.into_inner());
    let stop = Arc::new(AtomicBool::new(false));
    let i = Interrupt::new(stop.clone());
    let lua = new_state(&ScriptOptions {
        interrupt: Some(i.clone()),
        ..Default::default()
    })
    .unwrap();
    // By the time limit.
    i.set_limit(Some(Duration::from_millis(50)));
    let t = std::time::Instant::now();
    let e = lua
        .load("local n = 0\nwhile true do n = n + 1 end")
        .set_name("@loop.lua")
        .exec()
        .unwrap_err();
    assert!(t.elapsed() < Duration::from_secs(2));
    let m = error_line(&e, "loop.lua", &lua);
    assert!(is_stop_error(&e), "{e:?}");
    assert!(
        m.starts_with("loop.lua:2:") && m.contains("time limit"),
        "{m}"
    );
    // By the stop flag, set from another thread.
    i.set_limit(None);
    let s = stop.clone();
    let th = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        s.store(true, Ordering::Relaxed);
    });
    let e = lua
        .load("while true do end")
        .set_name("@spin.lua")
        .exec()
        .unwrap_err();
    th.join().unwrap();
    assert!(is_stop_error(&e), "{e:?}");
    let m = error_line(&e, "spin.lua", &lua);
    assert!(
        m.starts_with("spin.lua:1:") && m.contains("stop signal"),
        "{m}"
    );
    // A call that returns within the grace after the stop is not cut short.
    let stop = Arc::new(AtomicBool::new(true));
    let lua = new_state(&ScriptOptions {
        interrupt: Some(Interrupt::new(stop)),
        ..Default::default()
    })
    .unwrap();
    for _ in 0..3 {
        let n: i64 = lua
            .load("local n = 0 for i = 1, 200000 do n = n + 1 end return n")
            .eval()
            .unwrap();
        assert_eq!(n, 200_000);
    }
}

#[test]
fn compiled_loops_are_stopped_too() {
    let _turn = PROFILER.lock().unwrap_or_else(|e| e.into_inner());
    let state = || {
        new_state(&ScriptOptions {
            interrupt: Some(Interrupt::new(Arc::new(AtomicBool::new(false)))),
            ..Default::default()
        })
        .unwrap()
    };
    // The compiler is on (jit.util, which would show the trace, is kept from scripts).
    let lua = state();
    let traced: bool = lua
        .load("local x = 0 for i = 1, 1e5 do x = x + i end return (jit.status())")
        .eval()
        .unwrap();
    assert!(traced);
    drop(lua);
    for (name, src, line) in [
        ("empty.lua", "jit.on()\nwhile true do end", "empty.lua:2:"),
        (
            "sum.lua",
            "local x = 0\nwhile true do\n  x = x + 1\nend",
            "sum.lua:",
        ),
        (
            "calls.lua",
            "local function f(a) return a * 2 % 7 end\nlocal y = 0\nwhile true do y = f(y) + 1 end",
            "calls.lua:",
        ),
    ] {
        for by_signal in [true, false] {
            let stop = Arc::new(AtomicBool::new(false));
            let i = Interrupt::new(stop.clone());
            let lua = new_state(&ScriptOptions {
                interrupt: Some(i.clone()),
                ..Default::default()
            })
            .unwrap();
            let th = if by_signal {
                i.set_limit(None);
                let s = stop.clone();
                Some(std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(100));
                    s.store(true, Ordering::Relaxed);
                }))
            } else {
                i.set_limit(Some(Duration::from_millis(100)));
                None
            };
            let t = std::time::Instant::now();
            let e = lua
                .load(src)
                .set_name(format!("@{name}"))
                .exec()
                .unwrap_err();
            let took = t.elapsed();
            if let Some(th) = th {
                th.join().unwrap();
            }
            assert!(is_stop_error(&e), "{name}: {e:?}");
            let m = error_line(&e, name, &lua);
            assert!(m.starts_with(line), "{m}");
            assert!(took < Duration::from_secs(2), "{name}: {took:?}");
        }
    }
    // The profiler stays linerate's.
    let lua = state();
    let e = lua
        .load("require('jit.profile')")
        .exec()
        .unwrap_err()
        .to_string();
    assert!(e.contains("jit.profile: linerate keeps"), "{e}");
    // A state made while another holds the profiler runs interpreted, and says so.
    let other = state();
    let on: bool = other.load("return jit.status()").eval().unwrap();
    assert!(!on);
    let e = other.load("jit.on()").exec().unwrap_err().to_string();
    assert!(e.contains("runs interpreted"), "{e}");
    drop(other);
    // Once the holder is gone, the next state gets the profiler.
    drop(lua);
    let next = state();
    let on: bool = next.load("return jit.status()").eval().unwrap();
    assert!(on);
}

//! gen's live page on a real pseudo-terminal (util-linux's `script` gives gen one): the page
//! comes up on the alternate screen, takes keys (a rate typed on its command line), quits on
//! `q` and on Ctrl-C, and leaves the terminal as it found it (main screen, cooked mode, echo),
//! with the summary printed after; `--no-console` keeps the lines. Bounded in time: every run
//! is killed after 30 s. The threaded count's page (one thread per queue of a 4-queue veth)
//! shows each thread's row and ends at once on `q`.
#![deny(unsafe_code)]

use linerate_test_support::netns::{self, NetnsPair, Side};
use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const ENTER_ALT: &str = "\x1b[?1049h";
const LEAVE_ALT: &str = "\x1b[?1049l";

fn tmp(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("linerate-tty-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

/// `linerate ARGS` run under a pseudo-terminal of 100 × 30, then `stty -a` on the same
/// terminal.
struct Tty {
    child: Child,
    out: Arc<Mutex<Vec<u8>>>,
}

impl Tty {
    fn start(args: &str) -> Tty {
        Tty::start_in("", args)
    }

    /// `linerate ARGS` run by `prefix` (e.g. `ip netns exec NS`).
    fn start_in(prefix: &str, args: &str) -> Tty {
        let cmd = format!(
            "stty rows 30 cols 100; {prefix} {} {args}; echo \"exit=$?\"; stty -a",
            env!("CARGO_BIN_EXE_linerate")
        );
        let mut child = Command::new("script")
            .args(["-qfec", &cmd, "/dev/null"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn script");
        let out = Arc::new(Mutex::new(Vec::new()));
        let (o, mut so) = (out.clone(), child.stdout.take().unwrap());
        std::thread::spawn(move || {
            let mut b = [0u8; 4096];
            while let Ok(n) = so.read(&mut b) {
                if n == 0 {
                    break;
                }
                o.lock().unwrap().extend_from_slice(&b[..n]);
            }
        });
        Tty { child, out }
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.out.lock().unwrap()).into_owned()
    }

    /// Waits until the output holds `what` (after `from` bytes).
    fn wait_for(&self, what: &str, from: usize) {
        let t0 = Instant::now();
        while !self.text().get(from..).unwrap_or("").contains(what) {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "no {what:?} within 20 s in:\n{}",
                self.text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn keys(&mut self, k: &str) {
        let i = self.child.stdin.as_mut().unwrap();
        i.write_all(k.as_bytes()).unwrap();
        i.flush().unwrap();
    }

    /// Waits for the end (killed after 30 s): the whole output.
    fn finish(mut self) -> String {
        let t0 = Instant::now();
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                assert!(s.success(), "script: {s}\n{}", self.text());
                break;
            }
            if t0.elapsed() > Duration::from_secs(30) {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("gen did not end within 30 s:\n{}", self.text());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        // The reader thread drains the last bytes.
        std::thread::sleep(Duration::from_millis(200));
        self.text()
    }
}

impl Drop for Tty {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn have_script() -> bool {
    linerate_test_support::require_tool("script", "util-linux")
}

/// The terminal after the tool: main screen after the page, cooked mode with echo (stty -a),
/// and `summary` printed after the page.
fn assert_restored_with(out: &str, summary: &str) {
    let enter = out
        .find(ENTER_ALT)
        .expect("the page on the alternate screen");
    let leave = out.rfind(LEAVE_ALT).expect("the main screen back");
    assert!(enter < leave, "{out}");
    let after = &out[leave..];
    assert!(
        after.contains(summary),
        "no summary after the page: {after}"
    );
    assert!(after.contains("exit=0"), "{after}");
    let stty = &after[after.find("exit=0").unwrap()..];
    let words: Vec<&str> = stty.split_whitespace().collect();
    for flag in ["icanon", "echo", "isig", "icrnl"] {
        assert!(
            words.contains(&flag),
            "terminal left without {flag}: {stty}"
        );
    }
}

fn assert_restored(out: &str) {
    assert_restored_with(out, "Sent ");
}

#[test]
fn fwd_page_is_read_only_and_quits() {
    if !have_script() {
        return;
    }
    let t0 = Instant::now();
    let id = std::process::id();
    let mut t = Tty::start(&format!("fwd -i mem:tty-a-{id} -o mem:tty-b-{id} -t 25"));
    t.wait_for("Ports", 0);
    t.wait_for("Ctrl-C)", 0);
    // gen's keys do nothing here; a command typed is refused, and q quits.
    let from = t.text().len();
    t.keys("s:start\r");
    t.wait_for("refused:", from);
    t.keys("q");
    let out = t.finish();
    assert!(t0.elapsed() < Duration::from_secs(20), "q did not end fwd");
    assert_restored_with(&out, "Forwarding ended: interrupted");
}

#[test]
fn gen_console_takes_keys_quits_and_gives_the_terminal_back() {
    if !have_script() {
        return;
    }
    let pcap = tmp("q.pcap");
    let t0 = Instant::now();
    let mut t = Tty::start(&format!(
        "gen -o {} --rate 1000pps -t 25",
        pcap.to_str().unwrap()
    ));
    t.wait_for("Ports", 0);
    t.wait_for("asked", 0);
    // The rate's key opens the command line with `rate `; Enter runs it through the commands'
    // parser, which says "ok:" (the page draws only the cells that changed, so the rest of
    // the line is not one run of bytes).
    let from = t.text().len();
    t.keys("r2000pps\r");
    t.wait_for("ok:", from);
    assert!(!t.text()[from..].contains("refused"), "{}", t.text());
    t.keys("q");
    let out = t.finish();
    assert!(t0.elapsed() < Duration::from_secs(20), "q did not end gen");
    assert_restored(&out);
    // The summary says the rate was steered instead of judging one asked rate.
    assert!(out.contains("Rate: steered by commands"), "{out}");
}

#[test]
fn gen_console_quits_on_ctrl_c_and_restores_the_terminal() {
    if !have_script() {
        return;
    }
    let pcap = tmp("c.pcap");
    let t0 = Instant::now();
    let mut t = Tty::start(&format!(
        "gen -o {} --rate 500pps -t 25",
        pcap.to_str().unwrap()
    ));
    t.wait_for("Ports", 0);
    t.keys("\x03");
    let out = t.finish();
    assert!(
        t0.elapsed() < Duration::from_secs(20),
        "Ctrl-C did not end gen"
    );
    assert_restored(&out);
}

#[test]
fn no_console_keeps_the_lines_on_a_terminal() {
    if !have_script() {
        return;
    }
    let pcap = tmp("n.pcap");
    let t = Tty::start(&format!(
        "gen -o {} --rate 200pps -t 1.5 --no-console",
        pcap.to_str().unwrap()
    ));
    let out = t.finish();
    assert!(!out.contains(ENTER_ALT), "{out}");
    assert!(out.contains("TX: "), "{out}");
    assert!(out.contains("Sent "), "{out}");
}

/// `count -i xdp:vB` on a 4-queue veth runs a thread per queue: the page shows a row per
/// thread (named by its queue) under the input's, `q` ends the run at once (not at the next
/// interval: 5 s here), and the summary counts every frame sent, after the page.
#[test]
fn threaded_count_page_shows_each_queue_and_quits_at_once() {
    if !have_script() || !netns::require_priv() {
        return;
    }
    const N: u32 = 2000;
    let p = NetnsPair::with_queues(4).expect("netns pair");
    p.no_ipv6().expect("no IPv6 chatter");
    let mut t = Tty::start_in(
        &format!("ip netns exec {}", p.ns(Side::B)),
        "count -i xdp:vB -f 'udp dst port 9' --interval 5 -t 25",
    );
    // The page's frame comes at once, before the first interval's figures.
    t.wait_for("starting", 0);
    t.wait_for("Ctrl-C)", 0);
    let frames: Vec<Vec<u8>> = (0..N)
        .map(|s| netns::udp_frame(p.mac_b, p.mac_a, (s % 64) as u16, s))
        .collect();
    p.run_in(Side::A, || netns::send_raw("vA", &frames));
    // The first interval's figures: the input's row and one row per thread.
    t.wait_for("Threads", 0);
    for q in 0..4 {
        t.wait_for(&format!("xdp:vB@{q}"), 0);
    }
    let from = t.text().len();
    let pressed = Instant::now();
    t.keys("q");
    t.wait_for("exit=", from);
    let took = pressed.elapsed();
    let out = t.finish();
    assert!(
        took < Duration::from_millis(2500),
        "q took {took:?} to end count (the next interval is 5 s away)"
    );
    assert_restored_with(&out, "ended: interrupted; 4 threads");
    let after = &out[out.rfind(LEAVE_ALT).unwrap()..];
    assert!(
        after.contains(&format!(
            "Summary: {} pkts",
            linerate::stats::group(u64::from(N))
        )),
        "every frame sent counted: {after}"
    );
    for q in 0..4 {
        assert!(
            after.contains(&format!("Thread {q} [xdp:vB@{q}]")),
            "{after}"
        );
    }
}

/// `gen -o xdp:vA` (the XDP live-frames engine) on a terminal: its page shows the rate asked
/// and achieved and the device's drops; `r` steers the rate (the next intervals ask 200'000
/// pps), `z` is refused with the reason (the kernel sends one template), `q` ends it at once,
/// and the summary says the rate was steered.
#[test]
fn live_engine_page_steers_the_rate_and_refuses_the_size() {
    if !have_script() || !netns::require_priv() {
        return;
    }
    let p = NetnsPair::new().expect("netns pair");
    // The peer takes the frames (a veth discards XDP frames when its peer has no program).
    let obj = linerate_test_support::repo_root().join("bpf/xdp_drop.o");
    p.ip_in(
        Side::B,
        &[
            "link",
            "set",
            "dev",
            "vB",
            "xdpdrv",
            "obj",
            obj.to_str().unwrap(),
            "sec",
            "xdp",
        ],
    )
    .expect("XDP program on the peer");
    let mut t = Tty::start_in(
        &format!("ip netns exec {}", p.ns(Side::A)),
        "gen -o xdp:vA --engine live --rate 100kpps -t 25",
    );
    t.wait_for("XDP live frames", 0);
    t.wait_for("Rate: ", 0);
    let from = t.text().len();
    t.keys("r200kpps\r");
    t.wait_for("ok: rate 200kpps", from);
    // Three intervals at the new rate.
    std::thread::sleep(Duration::from_secs(3));
    let from = t.text().len();
    t.keys("z128\r");
    // The page draws only the cells that change: the words of the refusal.
    t.wait_for("refused:", from);
    t.wait_for("live-frames", from);
    let from = t.text().len();
    let pressed = Instant::now();
    t.keys("q");
    t.wait_for("exit=", from);
    let took = pressed.elapsed();
    let out = t.finish();
    assert!(took < Duration::from_millis(2500), "q took {took:?}");
    assert_restored_with(&out, "Rate: steered by commands");
    // Over the whole run, more than the 100'000 pps first asked: the new rate was followed.
    let after = &out[out.rfind(LEAVE_ALT).unwrap()..];
    let sent = after
        .find("Sent ")
        .map(|i| &after[i..])
        .expect("the summary");
    let pps: f64 = sent
        .split(" ms: ")
        .nth(1)
        .and_then(|r| r.split(" pps").next())
        .map(|n| n.replace('\'', ""))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no pps in {sent}"));
    assert!(pps > 110_000.0, "the rate stayed as first asked: {sent}");
}

#[test]
fn a_closed_terminal_ends_the_tool_and_a_second_signal_forces_it() {
    // The terminal closes under a running page (a killed `script`, an ssh session that
    // drops): the hangup stops the tool. Before, the keys' thread read the dead terminal in
    // a loop (an error at once, every time), held the page from the tool's thread, and the
    // process ran on at full CPU long after its -t; a second signal's message to the gone
    // standard error panicked the signals thread, so nothing but SIGKILL ended it.
    if !have_script() {
        return;
    }
    let id = std::process::id();
    let pcap = tmp("hup.pcap");
    for (args, page) in [
        (
            format!("fwd -i mem:hup-a-{id} -o mem:hup-b-{id} -t 60"),
            "Ports",
        ),
        // gen's own page (it takes commands), on a file so that nothing else can stop it.
        (
            format!("gen -o {} --rate 1000pps -t 60", pcap.display()),
            "Rate",
        ),
    ] {
        closed_terminal_ends(&args, page);
    }
}

/// Runs `linerate ARGS` under a terminal, closes the terminal once `page` shows, and checks
/// the process ends.
fn closed_terminal_ends(args: &str, page: &str) {
    let mut t = Tty::start_in("echo lrpid=$$; exec", args);
    t.wait_for(page, 0);
    let text = t.text();
    let pid: u32 = text
        .split("lrpid=")
        .nth(1)
        .and_then(|s| s.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no pid in {text}"));
    let alive = || {
        std::path::Path::new(&format!("/proc/{pid}")).exists() && {
            // A zombie is gone for this purpose.
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .map(|s| !s.contains(") Z "))
                .unwrap_or(false)
        }
    };
    // Closing the terminal: `script` killed, its pseudo-terminal's master closed.
    let _ = t.child.kill();
    let _ = t.child.wait();
    let t0 = Instant::now();
    while alive() && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let ended = !alive();
    if !ended {
        // A second signal must force it.
        let _ = Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status();
        std::thread::sleep(Duration::from_secs(2));
        let forced = !alive();
        // Whatever happened, leave nothing running.
        let _ = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
        panic!(
            "{args} (pid {pid}) still ran 10 s after its terminal closed (a second SIGTERM {} \
             it)",
            if forced { "ended" } else { "did not end" }
        );
    }
}

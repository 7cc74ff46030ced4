//! Live control and the live page of the long-running tools: gen's commands ([`commands`]),
//! the page's figures and widgets ([`page`]), its keys and command line ([`keys`]) and the
//! terminal under it ([`term`]). gen's page takes commands; fwd's, count's and balance's are
//! read-only (`quit`).

pub mod commands;
pub mod keys;
pub mod page;
pub mod term;

pub use page::{LatencyLine, Page, PortRow, RateLine};
pub use term::{wanted, Console};

use commands::Steer;
use linerate::stats::prom::{Dir, PortCount};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// Rates of counters between two readings, one slot per row.
#[derive(Debug, Default)]
pub struct Meter {
    prev: Vec<Option<(u64, u64, u64)>>,
    last: Vec<(f64, f64)>,
}

impl Meter {
    /// Packets per second and Mbit/s of row `i` since its last reading, from its counters
    /// `pkts` and `bytes` read at `t_ns`; the first reading of a row gives zero.
    pub fn rate(&mut self, i: usize, t_ns: u64, pkts: u64, bytes: u64) -> (f64, f64) {
        if self.prev.len() <= i {
            self.prev.resize(i + 1, None);
            self.last.resize(i + 1, (0.0, 0.0));
        }
        // No new reading since the last one: the rate then still holds.
        let r = match self.prev[i] {
            Some((t, _, _)) if t_ns == t => self.last[i],
            Some((t, p, b)) if t_ns > t => {
                let dt = (t_ns - t) as f64 / 1e9;
                let pps = pkts.saturating_sub(p) as f64 / dt;
                let mbps = bytes.saturating_sub(b) as f64 * 8.0 / dt / 1e6;
                (pps, mbps)
            }
            _ => (0.0, 0.0),
        };
        if self.prev[i].is_none_or(|(t, _, _)| t_ns > t) {
            self.prev[i] = Some((t_ns, pkts, bytes));
        }
        self.last[i] = r;
        r
    }
}

/// One port's counters in one direction, as the tools publish them as metrics.
pub type Counted = (String, Dir, PortCount);

/// The read-only page of fwd, count and balance: one row per port and direction from the same
/// counters their metrics publish (`rows`, read at `t_ns`), one per thread and direction from
/// each thread's share (`threads`: the thread's number and its counters, as pfcount_multichannel
/// shows each channel), their drops by reason (each under its direction; the threads' are part
/// of the ports'), and `state`.
pub fn counters_page(
    title: String,
    state: String,
    elapsed_s: f64,
    t_ns: u64,
    rows: &[Counted],
    threads: &[(usize, Counted)],
    meter: &mut Meter,
) -> Page {
    let mut page = Page {
        title,
        state,
        elapsed_s,
        ..Default::default()
    };
    let row = |(port, dir, c): &Counted, (pps, mbps): (f64, f64)| PortRow {
        port: port.clone(),
        dir: dir.name(),
        pps,
        mbps,
        packets: c.packets,
        drops: c.drops.total(),
    };
    for (i, r) in rows.iter().enumerate() {
        let rate = meter.rate(i, t_ns, r.2.packets, r.2.bytes);
        page.ports.push(row(r, rate));
        page.add_drops(&format!("{} ", r.1.name()), &r.2.drops);
    }
    for (i, (t, r)) in threads.iter().enumerate() {
        let rate = meter.rate(rows.len() + i, t_ns, r.2.packets, r.2.bytes);
        page.threads.push((*t, row(r, rate)));
    }
    page
}

/// What a page does with a command line typed: Ok(true) to quit, Ok(false) done, Err why it
/// was refused.
type Handler = Box<dyn FnMut(&str) -> Result<bool, String> + Send>;

/// The page of a tool whose figures come once per interval, its meter and when it started:
/// what fwd, count and balance keep while their page shows (read-only: only `quit`), and gen's
/// live-frames engine and replay (steered through [`Steer`], or read-only with a note saying
/// why). A thread of its own takes the keys (polled every 50 ms), so `q`, Ctrl-C and commands
/// act at once, not at the next redraw.
pub struct ReadOnly {
    console: Arc<Mutex<Console>>,
    meter: Meter,
    t0: std::time::Instant,
    title: String,
    keys: Option<std::thread::JoinHandle<()>>,
    done: Arc<AtomicBool>,
}

impl ReadOnly {
    /// Takes over the terminal for a read-only page titled `title`; `quit` sets `stop`.
    pub fn start(title: String, stop: Arc<AtomicBool>) -> anyhow::Result<ReadOnly> {
        ReadOnly::with_note(title, stop, None)
    }

    /// As [`ReadOnly::start`], with `note` saying why this page takes no commands (shown
    /// under the page, and given for every command refused).
    pub fn with_note(
        title: String,
        stop: Arc<AtomicBool>,
        note: Option<String>,
    ) -> anyhow::Result<ReadOnly> {
        let why = note.clone();
        let handler: Handler =
            Box::new(move |c: &str| keys::read_only(c).map_err(|e| why.clone().unwrap_or(e)));
        ReadOnly::open(title, stop, false, note, handler)
    }

    /// A page whose commands go to `steer` (gen's, checked by the parser of `--commands -`),
    /// with `note` under it until the first command.
    pub fn steered(
        title: String,
        stop: Arc<AtomicBool>,
        steer: Arc<Mutex<Steer>>,
        note: Option<String>,
    ) -> anyhow::Result<ReadOnly> {
        let handler: Handler = Box::new(move |c: &str| {
            steer
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .exec(c)
                .map(|()| matches!(c.trim(), "quit" | "q"))
        });
        ReadOnly::open(title, stop, true, note, handler)
    }

    fn open(
        title: String,
        stop: Arc<AtomicBool>,
        steer: bool,
        note: Option<String>,
        mut handler: Handler,
    ) -> anyhow::Result<ReadOnly> {
        let mut c = Console::start(steer)?;
        if let Some(n) = note {
            c.say(n);
        }
        // The page's frame and keys at once; the figures come with the first interval.
        c.show(Page {
            title: title.clone(),
            state: "starting (figures every interval)".into(),
            ..Default::default()
        });
        let console = Arc::new(Mutex::new(c));
        let done = Arc::new(AtomicBool::new(false));
        let keys = {
            let (console, done) = (console.clone(), done.clone());
            std::thread::Builder::new()
                .name("console-keys".into())
                .spawn(move || {
                    while !done.load(Ordering::Acquire) {
                        if !term::key_waiting(std::time::Duration::from_millis(50)) {
                            continue;
                        }
                        let mut c = console.lock().unwrap_or_else(|e| e.into_inner());
                        let cmds = c.commands();
                        for cmd in &cmds {
                            match handler(cmd) {
                                Ok(true) => stop.store(true, Ordering::SeqCst),
                                Ok(false) => c.outcome(cmd, &Ok(())),
                                Err(e) => c.outcome(cmd, &Err(e)),
                            }
                        }
                        drop(c);
                        if cmds.is_empty() {
                            // Nothing came of it (a key of the command line, or a terminal
                            // that closed and reads as ready at once): let the tool's thread
                            // have the page, and never spin.
                            std::thread::sleep(std::time::Duration::from_millis(20));
                        }
                    }
                })
                .map_err(|e| anyhow::anyhow!("the console: a thread for its keys: {e}"))?
        };
        Ok(ReadOnly {
            console,
            meter: Meter::default(),
            t0: std::time::Instant::now(),
            title,
            keys: Some(keys),
            done,
        })
    }

    /// Shows `rows` read at `t_ns` (the keys are taken by the console's own thread).
    pub fn tick(&mut self, state: &str, t_ns: u64, rows: &[Counted]) {
        self.tick_threads(state, t_ns, rows, &[]);
    }

    /// Shows `rows` and each thread's share `threads` (thread number, its counters), all read
    /// at `t_ns`.
    pub fn tick_threads(
        &mut self,
        state: &str,
        t_ns: u64,
        rows: &[Counted],
        threads: &[(usize, Counted)],
    ) {
        let page = self.page(state, t_ns, rows, threads, None);
        self.show(page);
    }

    /// The page of `rows` and `threads` read at `t_ns`, with gen's `rate` line when given.
    pub fn page(
        &mut self,
        state: &str,
        t_ns: u64,
        rows: &[Counted],
        threads: &[(usize, Counted)],
        rate: Option<RateLine>,
    ) -> Page {
        let mut page = counters_page(
            self.title.clone(),
            state.to_string(),
            self.t0.elapsed().as_secs_f64(),
            t_ns,
            rows,
            threads,
            &mut self.meter,
        );
        page.rate = rate;
        page
    }

    /// Takes `rows` read at `t_ns` as the meter's first reading (the start, before any
    /// interval), so that the first interval's rates are rates.
    pub fn seed(&mut self, t_ns: u64, rows: &[Counted]) {
        for (i, (_, _, c)) in rows.iter().enumerate() {
            self.meter.rate(i, t_ns, c.packets, c.bytes);
        }
    }

    /// Shows `page` as it is.
    pub fn show(&mut self, page: Page) {
        self.console
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .show(page);
    }
}

impl Drop for ReadOnly {
    fn drop(&mut self) {
        // The keys' thread ends before the terminal is given back (the console's drop).
        self.done.store(true, Ordering::Release);
        if let Some(h) = self.keys.take() {
            let _ = h.join();
        }
    }
}

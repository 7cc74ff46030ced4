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

use linerate::stats::prom::{Dir, PortCount};
use std::sync::atomic::{AtomicBool, Ordering};

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
/// counters their metrics publish (`rows`, read at `t_ns`), their drops by reason (each under
/// its direction), and `state`.
pub fn counters_page(
    title: String,
    state: String,
    elapsed_s: f64,
    t_ns: u64,
    rows: &[Counted],
    meter: &mut Meter,
) -> Page {
    let mut page = Page {
        title,
        state,
        elapsed_s,
        ..Default::default()
    };
    for (i, (port, dir, c)) in rows.iter().enumerate() {
        let (pps, mbps) = meter.rate(i, t_ns, c.packets, c.bytes);
        page.ports.push(PortRow {
            port: port.clone(),
            dir: dir.name(),
            pps,
            mbps,
            packets: c.packets,
            drops: c.drops.total(),
        });
        page.add_drops(&format!("{} ", dir.name()), &c.drops);
    }
    page
}

/// A read-only console, its meter and when it started: what fwd, count and balance keep
/// while their page shows.
pub struct ReadOnly {
    console: Console,
    meter: Meter,
    t0: std::time::Instant,
    title: String,
}

impl ReadOnly {
    /// Takes over the terminal for a page titled `title`.
    pub fn start(title: String) -> anyhow::Result<ReadOnly> {
        Ok(ReadOnly {
            console: Console::start(false)?,
            meter: Meter::default(),
            t0: std::time::Instant::now(),
            title,
        })
    }

    /// Shows `rows` read at `t_ns` and takes the keys typed; sets `stop` on `quit`.
    pub fn tick(&mut self, state: &str, t_ns: u64, rows: &[Counted], stop: &AtomicBool) {
        let page = counters_page(
            self.title.clone(),
            state.to_string(),
            self.t0.elapsed().as_secs_f64(),
            t_ns,
            rows,
            &mut self.meter,
        );
        self.console.show(page);
        if self.console.quit_asked() {
            stop.store(true, Ordering::SeqCst);
        }
    }
}

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

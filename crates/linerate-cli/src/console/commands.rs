//! gen's commands (pktgen-dpdk's `start`, `stop`, `set rate`, `set size`, `set dst mac`,
//! `set count`, `quit`), from standard input with `--commands -` or from the console's command
//! line: each one checked like the flag it stands for, then handed to the workers through a
//! [`Control`].

use linerate::apps::gen::control::{Control, Settings};
use linerate::apps::gen::vary::{parse_mac, SizeSpec};
use linerate::apps::gen::{self, GenOptions, StreamSpec};
use linerate::units::Rate;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The commands, for help texts and error messages.
pub const HELP: &str = "start | stop | rate RATE (e.g. 50%, 2Mpps, 1Gbps) | size BYTES (e.g. \
                        128, 64-1518, imix) | dst-mac MAC | count N (0: no limit) | quit";

/// What steers a running gen: its control, and what a command needs to check its value.
pub struct Steer {
    /// Shared with the workers.
    pub ctl: Arc<Control>,
    /// One thread's streams as given (to check a size or MAC against their templates).
    base: Vec<StreamSpec>,
    /// Streams in all (threads × streams per thread): a rate is split evenly among them.
    streams: usize,
    /// Line rate for `rate N%`, bits per second.
    link_bps: f64,
    /// The last rate asked (kept to follow a size change when given in bits or percent).
    rate: Option<Rate>,
    /// The frame sizes now.
    size: SizeSpec,
    stop: Arc<AtomicBool>,
    /// The commands an engine follows, and why it does not follow the others (None: all).
    only: Option<(&'static [&'static str], String)>,
}

impl Steer {
    /// A steer for streams `base` (one thread's) run by `threads` threads, with `link_bps` the
    /// line rate; the rate starts as the streams' own.
    pub fn new(
        base: Vec<StreamSpec>,
        threads: usize,
        link_bps: f64,
        stop: Arc<AtomicBool>,
    ) -> Steer {
        let streams = base.len().max(1) * threads.max(1);
        let per_stream = base.first().and_then(|s| s.pps);
        let size = base
            .first()
            .map(|s| s.size.clone())
            .unwrap_or(SizeSpec::Fixed(64));
        let ctl = Arc::new(Control::new(Settings {
            pps: per_stream,
            ..Default::default()
        }));
        Steer {
            ctl,
            base,
            streams,
            link_bps,
            rate: per_stream.map(|p| Rate::Pps(p * streams as f64)),
            size,
            stop,
            only: None,
        }
    }

    /// The same, for an engine that follows only the commands `cmds`; the others are refused
    /// with `why`.
    pub fn only(mut self, cmds: &'static [&'static str], why: String) -> Steer {
        self.only = Some((cmds, why));
        self
    }

    /// The rate asked in all now, packets per second (None: as fast as possible; 0 while
    /// stopped).
    pub fn asked_pps(&self) -> Option<f64> {
        let s = self.ctl.get();
        match (s.sending, s.pps) {
            (false, _) => Some(0.0),
            (true, p) => p.map(|p| p * self.streams as f64),
        }
    }

    /// Whether the workers are sending.
    pub fn sending(&self) -> bool {
        self.ctl.get().sending
    }

    /// The frame sizes now.
    pub fn size(&self) -> &SizeSpec {
        &self.size
    }

    /// Runs one command line; Err says why it was refused (nothing changed then). Empty lines
    /// and `#` comments do nothing.
    pub fn exec(&mut self, line: &str) -> Result<(), String> {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            return Ok(());
        }
        let (cmd, arg) = match line.split_once(char::is_whitespace) {
            Some((c, a)) => (c, Some(a.trim())),
            None => (line, None),
        };
        let need = |what: &str| -> Result<&str, String> {
            arg.filter(|a| !a.is_empty())
                .ok_or_else(|| format!("{cmd} needs {what}"))
        };
        if let Some((cmds, why)) = &self.only {
            const KNOWN: [&str; 7] = ["start", "stop", "rate", "size", "dst-mac", "count", "quit"];
            let name = if cmd == "q" { "quit" } else { cmd };
            if !cmds.contains(&name) && KNOWN.contains(&name) {
                return Err(format!("{cmd}: {why}"));
            }
        }
        let none = || -> Result<(), String> {
            match arg {
                Some(a) => Err(format!("{cmd} takes no value (got '{a}')")),
                None => Ok(()),
            }
        };
        match cmd {
            "start" => {
                none()?;
                self.ctl.start();
            }
            "stop" => {
                none()?;
                self.ctl.update(|s| s.sending = false);
            }
            "quit" | "q" => {
                none()?;
                self.stop.store(true, Ordering::SeqCst);
            }
            "rate" => {
                let r = crate::common::flags::check_rate(need("a rate")?)?;
                let pps = self.per_stream(r, &self.size)?;
                self.rate = Some(r);
                self.ctl.update(|s| s.pps = Some(pps));
            }
            "size" => {
                let v = need("a size")?;
                let z: SizeSpec = v.parse()?;
                let mut t = self.base.clone();
                for s in &mut t {
                    s.size = z.clone();
                }
                gen::validate(&GenOptions {
                    streams: t,
                    ..Default::default()
                })
                .map_err(|e| format!("size {v}: {e}"))?;
                // A rate in bits or percent of the line keeps its meaning: packets follow.
                let pps = match self.rate {
                    Some(r) => Some(self.per_stream(r, &z)?),
                    None => None,
                };
                self.size = z.clone();
                self.ctl.update(|s| {
                    s.size = Some(z);
                    if pps.is_some() {
                        s.pps = pps;
                    }
                });
            }
            "dst-mac" => {
                let m = parse_mac(need("a MAC address")?)?;
                self.ctl.update(|s| s.dst_mac = Some(m));
            }
            "count" => {
                let v = need("a packet count")?;
                let n = if v == "0" {
                    None
                } else {
                    Some(crate::common::flags::check_count(
                        v,
                        crate::common::flags::PACKETS,
                    )?)
                };
                self.ctl.update(|s| s.count = n);
            }
            _ => return Err(format!("unknown command '{cmd}': {HELP}")),
        }
        Ok(())
    }

    /// Packets per second of each stream for rate `r` at sizes `z`.
    fn per_stream(&self, r: Rate, z: &SizeSpec) -> Result<f64, String> {
        let bits_per_frame = (z.mean() + 20.0) * 8.0;
        let total = match r {
            Rate::Pps(p) => p,
            Rate::Bps(b) => b / bits_per_frame,
            Rate::Percent(p) => self.link_bps * p / 100.0 / bits_per_frame,
        };
        if total <= 0.0 || !total.is_finite() {
            return Err("the rate must be above zero".into());
        }
        Ok(total / self.streams as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn steer() -> Steer {
        let base = vec![StreamSpec {
            pps: Some(500.0),
            ..Default::default()
        }];
        Steer::new(base, 2, 10e9, Arc::new(AtomicBool::new(false)))
    }

    #[test]
    fn commands_change_the_settings_and_bad_ones_change_nothing() {
        let mut s = steer();
        assert_eq!(s.asked_pps(), Some(1000.0));
        let v = s.ctl.version();
        s.exec("rate 2Mpps").unwrap();
        assert_eq!(s.asked_pps(), Some(2e6));
        assert!(s.ctl.version() > v);
        // 50 % of 10 Gbit/s at 64 B frames (84 B on the wire): 7.44 Mpps.
        s.exec("rate 50%").unwrap();
        let want = 5e9 / (84.0 * 8.0);
        assert!((s.asked_pps().unwrap() - want).abs() < 1.0);
        // The percentage holds at a new size.
        s.exec("size 1024").unwrap();
        let want = 5e9 / (1044.0 * 8.0);
        assert!((s.asked_pps().unwrap() - want).abs() < 1.0);
        assert_eq!(s.ctl.get().size, Some(SizeSpec::Fixed(1024)));
        s.exec("dst-mac 02:00:00:00:00:09").unwrap();
        assert_eq!(s.ctl.get().dst_mac, Some([2, 0, 0, 0, 0, 9]));
        s.exec("count 10k").unwrap();
        assert_eq!(s.ctl.get().count, Some(10_000));
        s.exec("count 0").unwrap();
        assert_eq!(s.ctl.get().count, None);
        s.exec("stop").unwrap();
        assert_eq!(s.asked_pps(), Some(0.0));
        s.exec("start").unwrap();
        assert!(s.sending());
        let before = s.ctl.get();
        for bad in [
            "rate 0pps",
            "rate 101%",
            "rate fast",
            "rate",
            "size 10",
            "size 99999999",
            "dst-mac 02:00",
            "count -1",
            "start now",
            "jump",
        ] {
            assert!(s.exec(bad).is_err(), "{bad} accepted");
        }
        assert_eq!(s.ctl.get(), before);
        s.exec("  # a comment").unwrap();
        s.exec("quit").unwrap();
        assert!(s.stop.load(Ordering::SeqCst));
    }

    #[test]
    fn an_engine_that_follows_some_commands_refuses_the_others_with_its_reason() {
        let mut s = steer().only(&["start", "stop", "rate", "quit"], "not here".into());
        s.exec("rate 3000pps").unwrap();
        assert_eq!(s.asked_pps(), Some(3000.0));
        s.exec("stop").unwrap();
        s.exec("start").unwrap();
        let before = s.ctl.get();
        for c in ["size 128", "dst-mac 02:00:00:00:00:09", "count 10"] {
            let e = s.exec(c).unwrap_err();
            assert!(e.ends_with(": not here"), "{c}: {e}");
        }
        assert!(s.exec("jump").unwrap_err().starts_with("unknown command"));
        assert_eq!(s.ctl.get(), before);
    }
}

//! gen's commands, from standard input with `--commands -` or from the console's command line:
//! `start`, `stop`, `rate`, `size`, `count`, `src-ip`, `dst-ip`, `sport`, `dport`, `proto`,
//! `ttl`, `vlan`, `src-mac`, `dst-mac`, `quit`; `stream N FIELD VALUE` for one stream; and
//! pktgen-dpdk's spelling (`set 0 rate 10`, `set 0 dst ip 10.0.0.2`, `set all proto icmp`,
//! `start 0`, `str`, `stp`). Each one is checked like the flag it stands for, then handed to the
//! workers through a [`Control`]; a refused one changes nothing.

use linerate::apps::gen::control::{Control, Fields, Settings};
use linerate::apps::gen::template::L4;
use linerate::apps::gen::vary::{parse_mac, SizeSpec};
use linerate::apps::gen::{self, GenOptions, StreamSpec};
use linerate::units::Rate;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The commands, for help texts and error messages.
pub const HELP: &str = "start | stop | rate RATE (e.g. 50%, 2Mpps, 1Gbps) | size BYTES (e.g. \
                        128, 64-1518, imix) | src-ip|dst-ip ADDR | sport|dport PORT | proto \
                        udp|tcp|icmp|arp | ttl N | vlan ID|OUTER,INNER|off | src-mac|dst-mac \
                        MAC | count N (0: no limit) | stream N FIELD VALUE | set 0 FIELD VALUE \
                        | enable|disable 0 vlan (pktgen) | quit";

/// Every command (`q` is `quit`).
const KNOWN: [&str; 15] = [
    "start", "stop", "rate", "size", "dst-mac", "count", "quit", "src-ip", "dst-ip", "sport",
    "dport", "proto", "ttl", "vlan", "src-mac",
];

/// What steers a running gen: its control, and what a command needs to check its value.
pub struct Steer {
    /// Shared with the workers.
    pub ctl: Arc<Control>,
    /// One thread's streams as given (to check a size or MAC against their templates).
    base: Vec<StreamSpec>,
    /// Every thread's streams as given (to check a change, and to add up the rate asked).
    all: Vec<StreamSpec>,
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
    /// The VLAN ids pktgen-dpdk's `enable 0 vlan` puts back: the last given (`vlan 42`,
    /// `--vlan 10,20`), else pktgen's default id 1.
    last_vlan: String,
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
        // Streams of one rate share it as the settings' rate; streams of their own rates
        // (--stream) keep them until a `rate` command.
        let same = base.iter().all(|s| s.pps == per_stream);
        let ctl = Arc::new(Control::new(Settings {
            pps: per_stream.filter(|_| same),
            ..Default::default()
        }));
        let n = base.len();
        let mut all = Vec::with_capacity(n * threads.max(1));
        for t in 0..threads.max(1) {
            for (i, s) in base.iter().enumerate() {
                all.push(StreamSpec {
                    id: (t * n + i) as u16,
                    ..s.clone()
                });
            }
        }
        let last_vlan = match base.first().map(|s| (s.template.vlan, s.template.svlan)) {
            Some((Some(i), Some(o))) => format!("{o},{i}"),
            Some((Some(i), None)) => i.to_string(),
            _ => "1".to_string(),
        };
        Steer {
            last_vlan,
            ctl,
            all,
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
        if !s.sending {
            return Some(0.0);
        }
        let mut t = 0.0;
        for spec in self.now(&s) {
            t += spec.pps?;
        }
        Some(t)
    }

    /// Every stream as the settings `s` make it.
    fn now(&self, s: &Settings) -> Vec<StreamSpec> {
        let mut v = self.all.clone();
        gen::apply_settings(&mut v, s);
        v
    }

    /// Applies `f` to a copy of the settings, checks that every stream can be built with them,
    /// and hands them to the workers.
    fn change(&self, what: &str, f: impl FnOnce(&mut Settings)) -> Result<(), String> {
        let mut s = self.ctl.get();
        f(&mut s);
        gen::validate(&GenOptions {
            streams: self.now(&s),
            ..Default::default()
        })
        .map_err(|e| format!("{what}: {e}"))?;
        self.ctl.update(|c| *c = s);
        Ok(())
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
        let words: Vec<&str> = line.split_whitespace().collect();
        match words[0] {
            // pktgen-dpdk: set PORTLIST FIELD VALUE, start|stop PORTLIST, str, stp.
            "set" => {
                let port = words.get(1).ok_or("set needs a port list (0 or all)")?;
                check_portlist(port)?;
                let rest = pktgen_field(&words[2..])?;
                let rest: Vec<&str> = rest.iter().map(String::as_str).collect();
                self.exec_words(line, &rest)
            }
            "start" | "stop" if words.len() == 2 => {
                check_portlist(words[1])?;
                self.exec_words(line, &words[..1])
            }
            // pktgen-dpdk: enable|disable PORTLIST vlan puts the tag on (its last ids) or off.
            "enable" | "disable" if words.get(2) == Some(&"vlan") && words.len() == 3 => {
                check_portlist(words[1])?;
                let ids = if words[0] == "enable" {
                    self.last_vlan.clone()
                } else {
                    "off".to_string()
                };
                self.exec_words(line, &["vlan", &ids])
            }
            "enable" | "disable" => Err(format!(
                "'{line}': gen knows pktgen-dpdk's enable|disable 0 vlan (other features have \
                 no switch here)"
            )),
            "str" => self.exec_words(line, &["start"]),
            "stp" => self.exec_words(line, &["stop"]),
            _ => self.exec_words(line, &words),
        }
    }

    /// Runs one command as words (`rate 2Mpps`, `stream 1 dst-ip 10.0.0.2`).
    fn exec_words(&mut self, line: &str, words: &[&str]) -> Result<(), String> {
        let (stream, cmd, arg) = self.parse_words(line, words)?;
        let need = |what: &str| -> Result<&str, String> {
            arg.filter(|a| !a.is_empty())
                .ok_or_else(|| format!("{cmd} needs {what}"))
        };
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
            "rate" => self.set_rate(line, stream, need("a rate")?)?,
            "size" => self.set_size(line, stream, need("a size")?)?,
            "dst-mac" if stream.is_none() => {
                let m = parse_mac(need("a MAC address")?)?;
                self.ctl.update(|s| {
                    s.dst_mac = Some(m);
                    for (_, g) in &mut s.streams {
                        g.dst_mac = None;
                    }
                });
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
            _ => self.set_field(line, stream, cmd, arg)?,
        }
        Ok(())
    }

    /// A command's words checked: the stream it names (`stream N ...`), the command, its
    /// one value. Refused: an unknown command, more than one value, a command the engine
    /// does not take, a command for every stream given to one.
    fn parse_words<'w>(
        &self,
        line: &str,
        words: &[&'w str],
    ) -> Result<(Option<u16>, &'w str, Option<&'w str>), String> {
        let (stream, words) = match words {
            ["stream", n, rest @ ..] => {
                let id: u16 = n
                    .parse()
                    .ok()
                    .filter(|id| self.all.iter().any(|s| s.id == *id))
                    .ok_or_else(|| {
                        format!(
                            "stream {n}: no such stream (ids 0..{})",
                            self.all.len().saturating_sub(1)
                        )
                    })?;
                (Some(id), rest)
            }
            ["stream"] => return Err("stream needs an id, a field and a value".into()),
            w => (None, w),
        };
        let Some(&cmd) = words.first() else {
            return Err(format!("'{line}': no field (stream N FIELD VALUE)"));
        };
        if !KNOWN.contains(&cmd) && cmd != "q" {
            return Err(format!("unknown command '{cmd}': {HELP}"));
        }
        if words.len() > 2 {
            return Err(format!(
                "{cmd} takes one value (got '{}')",
                words[1..].join(" ")
            ));
        }
        let arg = words.get(1).copied();
        if let Some((cmds, why)) = &self.only {
            let name = if cmd == "q" { "quit" } else { cmd };
            if (!cmds.contains(&name) || stream.is_some()) && KNOWN.contains(&name) {
                return Err(format!("{cmd}: {why}"));
            }
        }
        if let Some(id) = stream {
            if matches!(cmd, "start" | "stop" | "quit" | "q" | "count") {
                return Err(format!(
                    "stream {id} {cmd}: start, stop, count and quit act on every stream"
                ));
            }
        }
        Ok((stream, cmd, arg))
    }

    /// `rate R`: every stream's rate, or stream `stream`'s.
    fn set_rate(&mut self, line: &str, stream: Option<u16>, v: &str) -> Result<(), String> {
        let r = crate::common::flags::check_rate(v)?;
        match stream {
            None => {
                let pps = self.per_stream(r, &self.size)?;
                self.rate = Some(r);
                self.ctl.update(|s| {
                    s.pps = Some(pps);
                    for (_, g) in &mut s.streams {
                        g.pps = None;
                    }
                });
            }
            Some(id) => {
                let cur = self.now(&self.ctl.get());
                let z = cur
                    .iter()
                    .find(|s| s.id == id)
                    .map(|s| s.size.clone())
                    .unwrap_or(SizeSpec::Fixed(64));
                let pps = self.per_stream(r, &z)? * self.streams as f64;
                self.change(line, |s| s.stream(id).pps = Some(pps))?;
            }
        }
        Ok(())
    }

    /// `size Z`: every stream's frame size (a rate in bits or percent of the line keeps its
    /// meaning: packets follow), or stream `stream`'s.
    fn set_size(&mut self, line: &str, stream: Option<u16>, v: &str) -> Result<(), String> {
        let z: SizeSpec = v.parse()?;
        if let Some(id) = stream {
            self.change(line, |s| s.stream(id).size = Some(z))?;
            return Ok(());
        }
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
            for (_, g) in &mut s.streams {
                g.size = None;
            }
            if pps.is_some() {
                s.pps = pps;
            }
        });
        Ok(())
    }

    /// One header field of every stream, or of stream `stream`: a command for every stream
    /// takes back what an earlier one set for one stream.
    fn set_field(
        &mut self,
        line: &str,
        stream: Option<u16>,
        cmd: &str,
        arg: Option<&str>,
    ) -> Result<(), String> {
        let need = |what: &str| -> Result<&str, String> {
            arg.filter(|a| !a.is_empty())
                .ok_or_else(|| format!("{cmd} needs {what}"))
        };
        let set = |s: &mut Settings, f: &dyn Fn(&mut Fields)| match stream {
            Some(id) => f(s.stream(id)),
            None => {
                f(&mut s.fields);
                for (_, g) in &mut s.streams {
                    let mut blank = Fields::default();
                    f(&mut blank);
                    clear_set(g, &blank);
                }
            }
        };
        match cmd {
            "dst-mac" => {
                let m = parse_mac(need("a MAC address")?)?;
                self.change(line, |s| set(s, &|f| f.dst_mac = Some(m)))?;
            }
            "src-mac" => {
                let m = parse_mac(need("a MAC address")?)?;
                self.change(line, |s| set(s, &|f| f.src_mac = Some(m)))?;
            }
            "src-ip" | "dst-ip" => {
                let v = need("an address")?;
                // pktgen's `set 0 src ip 10.0.0.1/24`: the mask is pktgen's own business.
                let a: IpAddr = v
                    .split('/')
                    .next()
                    .unwrap_or(v)
                    .parse()
                    .map_err(|_| format!("{cmd} {v}: not an IPv4 or IPv6 address"))?;
                let src = cmd == "src-ip";
                self.change(line, |s| {
                    set(s, &|f| {
                        if src {
                            f.src_ip = Some(a)
                        } else {
                            f.dst_ip = Some(a)
                        }
                    })
                })?;
            }
            "sport" | "dport" => {
                let v = need("a port")?;
                let p: u16 = v
                    .parse()
                    .map_err(|_| format!("{cmd} {v}: a port is 0..65535"))?;
                let src = cmd == "sport";
                self.change(line, |s| {
                    set(s, &|f| {
                        if src {
                            f.sport = Some(p)
                        } else {
                            f.dport = Some(p)
                        }
                    })
                })?;
            }
            "proto" => {
                let p: L4 = need("udp, tcp, icmp or arp")?.parse()?;
                self.change(line, |s| set(s, &|f| f.proto = Some(p)))?;
            }
            "ttl" => {
                let v = need("a TTL")?;
                let t: u8 = v.parse().map_err(|_| format!("ttl {v}: a TTL is 0..255"))?;
                self.change(line, |s| set(s, &|f| f.ttl = Some(t)))?;
            }
            "vlan" => {
                let v = need("a VLAN id (1..4094), OUTER,INNER (QinQ) or off")?;
                let (inner, outer) = match v {
                    "off" | "none" => (None, None),
                    _ => {
                        let (i, o) = crate::cmd::gen_streams::parse_vlans(v)
                            .map_err(|e| format!("vlan {v}: {e} (`vlan off` takes the tag off)"))?;
                        (Some(i), o)
                    }
                };
                self.change(line, |s| {
                    set(s, &|f| {
                        f.vlan = Some(inner);
                        f.svlan = Some(outer);
                    })
                })?;
                if inner.is_some() {
                    self.last_vlan = v.to_string();
                }
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

/// pktgen-dpdk's port list: gen sends on one port (its threads together).
fn check_portlist(p: &str) -> Result<(), String> {
    match p {
        "0" | "all" => Ok(()),
        _ => Err(format!(
            "port list '{p}': gen has one port, 0 (or all: every thread and stream)"
        )),
    }
}

/// pktgen-dpdk's field words after `set PORTLIST` as ours: `src ip A` is `src-ip A`, `rate 10`
/// is `rate 10%` (pktgen's rate is a percentage of the line), `vlanid N` is `vlan N`.
fn pktgen_field(w: &[&str]) -> Result<Vec<String>, String> {
    let v: Vec<&str> = match w {
        ["src" | "dst", kind @ ("ip" | "mac"), v] => {
            let f = match (w[0], *kind) {
                ("src", "ip") => "src-ip",
                ("dst", "ip") => "dst-ip",
                ("src", _) => "src-mac",
                _ => "dst-mac",
            };
            vec![f, v]
        }
        ["rate", v] if v.parse::<f64>().is_ok() => return Ok(vec!["rate".into(), format!("{v}%")]),
        ["vlanid", v] => vec!["vlan", v],
        ["qinqids", o, i] => return Ok(vec!["vlan".into(), format!("{o},{i}")]),
        [f @ ("rate" | "size" | "count" | "sport" | "dport" | "proto" | "ttl" | "vlan"), v] => {
            vec![f, v]
        }
        [] => return Err("set needs a field and a value: set 0 rate 10".into()),
        _ => {
            return Err(format!(
                "set {}: gen knows set 0 rate|size|count|sport|dport|proto|ttl|vlan|vlanid VALUE, \
                 set 0 qinqids OUTER INNER and set 0 src|dst ip|mac VALUE",
                w.join(" ")
            ))
        }
    };
    Ok(v.into_iter().map(String::from).collect())
}

/// Clears in `g` every field set in `set`.
fn clear_set(g: &mut Fields, set: &Fields) {
    macro_rules! clear {
        ($($f:ident),*) => {$(if set.$f.is_some() { g.$f = None; })*};
    }
    clear!(pps, size, src_mac, dst_mac, src_ip, dst_ip, sport, dport, proto, ttl, vlan, svlan);
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

    /// pktgen-dpdk's `disable 0 vlan` takes the tag off and `enable 0 vlan` puts back the last
    /// ids given (pktgen's default 1 before any); a port that does not exist or another
    /// feature changes nothing.
    #[test]
    fn pktgens_enable_and_disable_vlan_switch_the_tag_with_its_last_ids() {
        let mut s = steer();
        s.exec("enable 0 vlan").unwrap();
        assert_eq!(s.ctl.get().fields.vlan, Some(Some(1)));
        s.exec("vlan 42").unwrap();
        s.exec("disable all vlan").unwrap();
        assert_eq!(s.ctl.get().fields.vlan, Some(None));
        s.exec("enable 0 vlan").unwrap();
        assert_eq!(s.ctl.get().fields.vlan, Some(Some(42)));
        s.exec("set 0 qinqids 10 20").unwrap();
        s.exec("disable 0 vlan").unwrap();
        s.exec("enable 0 vlan").unwrap();
        assert_eq!(s.ctl.get().fields.vlan, Some(Some(20)));
        assert_eq!(s.ctl.get().fields.svlan, Some(Some(10)));
        let before = s.ctl.get();
        for bad in [
            "enable 1 vlan",
            "disable 0-1 vlan",
            "enable 0 range",
            "enable 0",
            "vlan 4095",
            "enable 0 vlan 5",
        ] {
            assert!(s.exec(bad).is_err(), "{bad} accepted");
        }
        assert_eq!(s.ctl.get(), before);
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

    #[test]
    fn field_commands_pktgen_spelling_and_per_stream_change_the_streams() {
        let base = vec![
            StreamSpec {
                id: 0,
                pps: Some(500.0),
                ..Default::default()
            },
            StreamSpec {
                id: 1,
                pps: Some(500.0),
                ..Default::default()
            },
        ];
        let mut s = Steer::new(base, 1, 10e9, Arc::new(AtomicBool::new(false)));
        let now = |s: &Steer| s.now(&s.ctl.get());
        s.exec("dst-ip 10.0.0.2").unwrap();
        s.exec("vlan 42").unwrap();
        s.exec("set 0 src ip 10.1.1.1/24").unwrap();
        s.exec("set all sport 7").unwrap();
        s.exec("set 0 dport 99").unwrap();
        s.exec("set 0 ttl 5").unwrap();
        s.exec("set 0 proto tcp").unwrap();
        s.exec("set 0 dst mac 02:00:00:00:00:09").unwrap();
        s.exec("set 0 src mac 02:00:00:00:00:08").unwrap();
        for v in now(&s) {
            let t = &v.template;
            assert_eq!(t.dst_ip, "10.0.0.2".parse::<IpAddr>().unwrap());
            assert_eq!(t.src_ip, "10.1.1.1".parse::<IpAddr>().unwrap());
            assert_eq!((t.vlan, t.sport, t.dport, t.ttl), (Some(42), 7, 99, 5));
            assert_eq!(t.l4, L4::Tcp);
            assert_eq!(t.dst_mac, [2, 0, 0, 0, 0, 9]);
            assert_eq!(t.src_mac, [2, 0, 0, 0, 0, 8]);
        }
        // pktgen's rate is a percentage of the line.
        s.exec("set 0 rate 10").unwrap();
        let want = 1e9 / (84.0 * 8.0);
        assert!((s.asked_pps().unwrap() - want).abs() < 1.0);
        // One stream: its own rate and fields, the other's unchanged.
        s.exec("stream 1 rate 2Mpps").unwrap();
        s.exec("stream 1 dst-ip 10.0.0.7").unwrap();
        s.exec("stream 1 vlan off").unwrap();
        // QinQ on TCP needs 66 B: refused at 64 B, taken at 128 B.
        assert!(s.exec("stream 0 vlan 10,20").unwrap_err().contains("66"));
        s.exec("stream 0 size 128").unwrap();
        s.exec("stream 0 vlan 10,20").unwrap();
        let v = now(&s);
        assert_eq!(
            (v[0].template.svlan, v[0].template.vlan),
            (Some(10), Some(20))
        );
        s.exec("stream 1 size 128").unwrap();
        s.exec("set 0 qinqids 11 21").unwrap();
        let v = now(&s);
        assert_eq!(
            (v[0].template.svlan, v[0].template.vlan),
            (Some(11), Some(21))
        );
        assert_eq!(
            (v[1].template.svlan, v[1].template.vlan),
            (Some(11), Some(21))
        );
        s.exec("vlan 42").unwrap();
        s.exec("stream 1 vlan off").unwrap();
        s.exec("stream 1 size 128").unwrap();
        let v = now(&s);
        assert_eq!(v[1].pps, Some(2e6));
        assert_eq!(v[1].template.dst_ip, "10.0.0.7".parse::<IpAddr>().unwrap());
        assert_eq!(v[1].template.vlan, None);
        assert_eq!(v[1].size, SizeSpec::Fixed(128));
        assert_eq!(v[0].template.dst_ip, "10.0.0.2".parse::<IpAddr>().unwrap());
        assert_eq!(v[0].template.vlan, Some(42));
        assert!((s.asked_pps().unwrap() - (2e6 + want / 2.0)).abs() < 1.0);
        // A command for every stream takes back what one stream had.
        s.exec("dst-ip 10.0.0.3").unwrap();
        assert!(now(&s)
            .iter()
            .all(|v| v.template.dst_ip == "10.0.0.3".parse::<IpAddr>().unwrap()));
        s.exec("stop 0").unwrap();
        assert!(!s.sending());
        s.exec("str").unwrap();
        assert!(s.sending());
        let before = s.ctl.get();
        for bad in [
            "vlan 4095",
            "vlan 0",
            "dst-ip 2001:db8::1",
            "sport 70000",
            "proto sctp",
            "ttl 300",
            "stream 9 rate 1kpps",
            "stream 1 count 5",
            "stream 1",
            "set 1 rate 10",
            "set 0 burst 32",
            "set 0",
            "set 0 dst ip",
            "start 3",
            "dst-ip 10.0.0.1 10.0.0.2",
        ] {
            let e = s.exec(bad);
            assert!(e.is_err(), "{bad} accepted");
        }
        assert_eq!(s.ctl.get(), before);
        assert!(s.exec("vlan 4095").unwrap_err().contains("reserved"));
        assert!(s
            .exec("jump 1 2")
            .unwrap_err()
            .starts_with("unknown command 'jump'"));
        assert!(s
            .exec("stream 1 jump 2")
            .unwrap_err()
            .starts_with("unknown command 'jump'"));
        assert!(s
            .exec("set 0 burst 32")
            .unwrap_err()
            .contains("set 0 src|dst ip|mac"));
    }
}

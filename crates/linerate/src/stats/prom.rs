//! Prometheus text exposition, served for `--metrics ADDR` by [`super::http`].
//!
//! Every long-running tool (count, gen, fwd, flows, balance, watch) renders its counters with
//! one [`Exposition`]: the common families [`PACKETS`], [`BYTES`] and [`DROPS`] per port and
//! direction come from [`Exposition::port`], so that a dashboard reads every tool the same
//! way; a tool adds its own families (`linerate_gen_*`, `linerate_flows_*`,
//! `linerate_cluster_*`) beside them. The names are listed in docs/metrics.md.
//!
//! The server answers every request with the latest text, which the statistics printer
//! replaces once per interval. Nothing here touches the data path.

use super::counters::{DropReason, Drops, PortStats};
use super::http::{auth_note, serve, Endpoint};
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

/// `linerate_packets_total{port,dir}`: packets a port received (`dir="rx"`) or sent
/// (`dir="tx"`).
pub const PACKETS: &str = "linerate_packets_total";
/// `linerate_bytes_total{port,dir}`: their bytes (frame lengths on the wire, without CRC).
pub const BYTES: &str = "linerate_bytes_total";
/// `linerate_drops_total{port,dir,reason}`: packets lost at a port, by reason (every reason of
/// [`DropReason`], 0 included; `filter` counts packets a filter rejected on purpose).
pub const DROPS: &str = "linerate_drops_total";
/// `linerate_info{tool,version}`: 1, naming the tool that serves the endpoint.
pub const INFO: &str = "linerate_info";

/// A direction of traffic at a port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    /// Received.
    Rx,
    /// Sent.
    Tx,
}

impl Dir {
    /// The `dir` label's value.
    pub fn name(self) -> &'static str {
        match self {
            Dir::Rx => "rx",
            Dir::Tx => "tx",
        }
    }
}

/// The counters of one port in one direction, as [`Exposition::port`] renders them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortCount {
    /// Packets.
    pub packets: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Packets dropped, by reason.
    pub drops: Drops,
}

impl PortCount {
    /// The receive side of a port's counters.
    pub fn rx(s: &PortStats) -> PortCount {
        PortCount {
            packets: s.rx_packets,
            bytes: s.rx_bytes,
            drops: s.rx_drops,
        }
    }

    /// The transmit side of a port's counters.
    pub fn tx(s: &PortStats) -> PortCount {
        PortCount {
            packets: s.tx_packets,
            bytes: s.tx_bytes,
            drops: s.tx_drops,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Counter,
    Gauge,
}

struct Family {
    name: String,
    help: String,
    kind: Kind,
    /// Label text (`a="x",b="y"`) and value, in the order first added.
    samples: Vec<(String, f64)>,
}

/// Prometheus text built family by family: samples of one family are kept together under one
/// `# HELP` and `# TYPE` whatever order they are added in, and a counter added twice with the
/// same labels is summed (several threads on one port give one series).
#[derive(Default)]
pub struct Exposition {
    families: Vec<Family>,
    /// Text rendered elsewhere (a Kafka exporter's, a cluster's), appended as is.
    extra: String,
}

/// Escapes a label value (backslash, double quote, newline).
pub fn escape(v: &str) -> String {
    let mut o = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => o.push_str("\\\\"),
            '"' => o.push_str("\\\""),
            '\n' => o.push_str("\\n"),
            c => o.push(c),
        }
    }
    o
}

fn labels_text(labels: &[(&str, &str)]) -> String {
    let mut l = String::new();
    for (i, (k, v)) in labels.iter().enumerate() {
        if i > 0 {
            l.push(',');
        }
        let _ = write!(l, "{k}=\"{}\"", escape(v));
    }
    l
}

impl Exposition {
    /// An exposition naming `tool` (`linerate_info{tool="count",version="..."} 1`).
    pub fn new(tool: &str) -> Exposition {
        let mut e = Exposition::default();
        e.gauge(
            INFO,
            "The linerate tool serving these metrics, and its version.",
            &[("tool", tool), ("version", env!("CARGO_PKG_VERSION"))],
            1.0,
        );
        e
    }

    fn add(&mut self, name: &str, help: &str, kind: Kind, labels: &[(&str, &str)], v: f64) {
        let l = labels_text(labels);
        let fam = match self.families.iter_mut().position(|f| f.name == name) {
            Some(i) => &mut self.families[i],
            None => {
                self.families.push(Family {
                    name: name.to_string(),
                    help: help.to_string(),
                    kind,
                    samples: Vec::new(),
                });
                self.families.last_mut().expect("just pushed")
            }
        };
        match fam.samples.iter_mut().find(|(k, _)| *k == l) {
            Some((_, x)) if kind == Kind::Counter => *x += v,
            Some((_, x)) => *x = v,
            None => fam.samples.push((l, v)),
        }
    }

    /// A counter sample (summed with an earlier one of the same labels).
    pub fn counter(&mut self, name: &str, help: &str, labels: &[(&str, &str)], v: u64) {
        self.add(name, help, Kind::Counter, labels, v as f64);
    }

    /// A gauge sample (replacing an earlier one of the same labels).
    pub fn gauge(&mut self, name: &str, help: &str, labels: &[(&str, &str)], v: f64) {
        self.add(name, help, Kind::Gauge, labels, v);
    }

    /// The common families of one port in one direction: packets, bytes, and drops by every
    /// reason.
    pub fn port(&mut self, port: &str, dir: Dir, c: &PortCount) {
        let d = dir.name();
        self.counter(
            PACKETS,
            "Packets a port received (dir=rx) or sent (dir=tx).",
            &[("port", port), ("dir", d)],
            c.packets,
        );
        self.counter(
            BYTES,
            "Bytes of those packets (frame lengths, without CRC).",
            &[("port", port), ("dir", d)],
            c.bytes,
        );
        for r in DropReason::ALL {
            self.counter(
                DROPS,
                "Packets lost at a port, by reason (filter: rejected by a filter on purpose).",
                &[("port", port), ("dir", d), ("reason", r.name())],
                c.drops.get(r),
            );
        }
    }

    /// Both directions of a port's counters.
    pub fn port_stats(&mut self, port: &str, s: &PortStats) {
        self.port(port, Dir::Rx, &PortCount::rx(s));
        self.port(port, Dir::Tx, &PortCount::tx(s));
    }

    /// Appends text rendered elsewhere (its own `# HELP`/`# TYPE` lines, other family names).
    pub fn append(&mut self, text: &str) {
        self.extra.push_str(text);
        if !text.is_empty() && !text.ends_with('\n') {
            self.extra.push('\n');
        }
    }

    /// The text.
    pub fn render(&self) -> String {
        let mut o = String::with_capacity(256 * self.families.len() + self.extra.len());
        for f in &self.families {
            let _ = writeln!(o, "# HELP {} {}", f.name, f.help);
            let kind = match f.kind {
                Kind::Counter => "counter",
                Kind::Gauge => "gauge",
            };
            let _ = writeln!(o, "# TYPE {} {kind}", f.name);
            for (l, v) in &f.samples {
                if l.is_empty() {
                    let _ = writeln!(o, "{} {}", f.name, num(*v));
                } else {
                    let _ = writeln!(o, "{}{{{l}}} {}", f.name, num(*v));
                }
            }
        }
        o.push_str(&self.extra);
        o
    }
}

/// A sample value: integers without a fraction, others as Rust prints them, NaN and the
/// infinities as Prometheus spells them.
fn num(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else if v.fract() == 0.0 && v.abs() < 9.007e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

/// The text a metrics server serves; replace it with [`MetricsServer::set`] (once per
/// statistics interval). Serving is [`super::http::serve`]'s: its own thread, many clients.
#[derive(Clone)]
pub struct MetricsServer {
    text: Arc<Mutex<Arc<String>>>,
    endpoint: Endpoint,
}

impl MetricsServer {
    /// Listens on `addr` (e.g. 127.0.0.1:9100) and serves on a background thread.
    pub fn start(addr: &str) -> std::io::Result<MetricsServer> {
        let text = Arc::new(Mutex::new(Arc::new(String::new())));
        let t = text.clone();
        // The lock is held only to copy a pointer, on either side.
        let endpoint = serve(addr, move || {
            let s = t.lock().map(|s| s.clone()).unwrap_or_default();
            String::clone(&s)
        })?;
        Ok(MetricsServer { text, endpoint })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.endpoint.addr()
    }

    /// The note to print when the address is not loopback (no authentication), if any.
    pub fn auth_note(&self) -> Option<String> {
        auth_note(&self.endpoint.addr())
    }

    /// Replaces the served text.
    pub fn set(&self, text: String) {
        let text = Arc::new(text);
        if let Ok(mut s) = self.text.lock() {
            *s = text;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn exposition_groups_families_and_sums_counters() {
        let mut e = Exposition::new("gen");
        let mut d = Drops::default();
        d.add(DropReason::RingFull, 3);
        let c = PortCount {
            packets: 10,
            bytes: 640,
            drops: d,
        };
        e.port("mem:a", Dir::Tx, &c);
        e.gauge("linerate_gen_rate_asked_pps", "Asked.", &[], 1000.0);
        // A second thread on the same port: one series, summed.
        e.port("mem:a", Dir::Tx, &c);
        e.port("pcap:/t/x \"q\"", Dir::Rx, &PortCount::default());
        e.gauge("linerate_gen_rate_achieved_pps", "Achieved.", &[], 999.5);
        e.append("# HELP x_total X.\n# TYPE x_total counter\nx_total 1");
        let t = e.render();
        assert!(t.starts_with("# HELP linerate_info "), "{t}");
        assert!(t.contains("linerate_info{tool=\"gen\",version=\""), "{t}");
        assert!(
            t.contains("linerate_packets_total{port=\"mem:a\",dir=\"tx\"} 20\n"),
            "{t}"
        );
        assert!(
            t.contains("linerate_bytes_total{port=\"mem:a\",dir=\"tx\"} 1280\n"),
            "{t}"
        );
        assert!(
            t.contains("linerate_drops_total{port=\"mem:a\",dir=\"tx\",reason=\"ring_full\"} 6\n")
        );
        assert!(t.contains(
            "linerate_drops_total{port=\"pcap:/t/x \\\"q\\\"\",dir=\"rx\",reason=\"unread\"} 0\n"
        ));
        assert!(t.contains("linerate_gen_rate_asked_pps 1000\n"), "{t}");
        assert!(t.contains("linerate_gen_rate_achieved_pps 999.5\n"), "{t}");
        assert!(t.ends_with("x_total 1\n"), "{t}");
        // One HELP and TYPE per family, its samples right after them.
        assert_eq!(
            t.matches("# TYPE linerate_packets_total counter").count(),
            1
        );
        let fam: Vec<&str> = t
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| l.split(['{', ' ']).next().unwrap())
            .collect();
        let mut seen = Vec::new();
        for f in &fam {
            if seen.last() != Some(f) {
                assert!(!seen.contains(f), "{f} split in two: {t}");
                seen.push(f);
            }
        }
    }

    #[test]
    fn text_and_server() {
        let mut e = Exposition::new("count");
        e.port("mem:a", Dir::Rx, &PortCount::default());
        let t = e.render();
        let m = MetricsServer::start("127.0.0.1:0").unwrap();
        m.set(t.clone());
        let mut c = std::net::TcpStream::connect(m.addr()).unwrap();
        c.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
        let mut got = String::new();
        c.read_to_string(&mut got).unwrap();
        assert!(got.starts_with("HTTP/1.1 200 OK"), "{got}");
        assert!(got.ends_with(&t));
    }
}

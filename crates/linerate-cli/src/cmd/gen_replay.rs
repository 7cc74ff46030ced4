//! `linerate gen --pcap FILE`: the replay's flags (tcpreplay's pacing, tcprewrite's edits) and
//! what they make of gen's own flags on a replay.

use super::gen::Args;
use crate::common::{flags, usage};
use linerate::apps::gen::replay::rewrite::{self, IpMap, PortMap};
use linerate::apps::gen::replay::{ReplayRate, Rewrite};
use linerate::apps::gen::vary::parse_mac;
use linerate::port::{Interface, LinkType};
use linerate::units::Rate;

/// Flags of a replay (`--pcap`), tcpreplay's and tcprewrite's.
#[derive(clap::Args, Debug, Default)]
pub struct ReplayArgs {
    /// Replay this capture instead of building packets (tcpreplay's job). Every packet leaves
    /// as an Ethernet frame: raw-IP (LINKTYPE_RAW 101, DLT_RAW 12/14, 228/229), loopback and
    /// Linux cooked (SLL 113, SLL2 276) packets get an Ethernet header, MACs from --dst-mac
    /// and --src-mac (default 02:00:00:00:00:02 and a cooked header's own address, else
    /// 02:00:00:00:00:01). On a replay --rate is its own rate (as tcpreplay -p/-M), and
    /// tcprewrite's edits are gen's flags: --dst-mac/--src-mac, --src-ip/--dst-ip as address
    /// maps (NEW, OLD:NEW or OLD/len:NEW/len, comma-separated; IPv6 in brackets), --vlan ID
    /// (1..4094: tags, or retags the outer tag), --ttl, with --portmap and --vlan-strip;
    /// checksums are fixed after any edit. gen's other packet flags are refused
    #[arg(long, value_name = "FILE")]
    pub pcap: Option<String>,
    /// Replay at this multiple of the recorded speed (tcpreplay -x / --multiplier)
    #[arg(long, visible_alias = "multiplier", value_name = "X", conflicts_with_all = ["topspeed", "pps", "mbps"], value_parser = flags::real(0.0, 1e6, true))]
    pub speed: Option<f64>,
    /// Replay as fast as the output takes the packets (tcpreplay -t / --topspeed)
    #[arg(long, conflicts_with_all = ["pps", "mbps"])]
    pub topspeed: bool,
    /// Replay at this many packets per second whatever the recorded spacing (tcpreplay -p /
    /// --pps): 1000, 100k, 100kpps, 1.5Mpps; each packet is stamped with its scheduled time
    #[arg(long, value_name = "PPS", conflicts_with = "mbps")]
    pub pps: Option<String>,
    /// Replay at this many megabits per second of packet bytes (tcpreplay -M / --mbps: the
    /// packets' own bytes, where --rate 5Gbps counts the CRC, preamble and gap too)
    #[arg(long, value_name = "MBPS", value_parser = flags::real(0.0, 1e7, true))]
    pub mbps: Option<f64>,
    /// Play the capture N times; 0: forever (tcpreplay's --loop 0), until -c, -t or a signal
    #[arg(long = "loop", value_name = "N", default_value_t = 1, value_parser = flags::count(0, 1_000_000_000))]
    pub loops: u64,
    /// Map TCP/UDP ports, source and destination (tcprewrite --portmap): FROM:TO or LO-HI:TO,
    /// comma-separated or the flag repeated; the first map that takes a port applies
    #[arg(long, value_name = "MAP")]
    pub portmap: Vec<String>,
    /// Strip every 802.1Q/802.1ad tag (tcprewrite --enet-vlan=del); with --vlan, one new tag
    #[arg(long)]
    pub vlan_strip: bool,
}

fn flag<T>(name: &str, r: Result<T, String>) -> anyhow::Result<T> {
    r.map_err(|e| usage(format!("{name}: {e}")))
}

/// gen's flags that build packets, which a replay cannot apply: refused, naming the flag.
pub fn refuse_unfit(a: &Args) -> anyhow::Result<()> {
    let set = |name: &str, given: bool, why: &str| -> anyhow::Result<()> {
        if given {
            Err(usage(format!(
                "{name} cannot apply to a --pcap replay: {why}"
            )))
        } else {
            Ok(())
        }
    };
    let built = "the capture's packets are sent as they are (rewritten by --dst-mac, --src-mac, \
                 --src-ip, --dst-ip, --portmap, --vlan, --vlan-strip, --ttl)";
    set("--size", a.size.is_some(), built)?;
    set("--proto", a.proto.is_some(), built)?;
    set("--flows", a.flows.is_some(), built)?;
    set(
        "--pattern",
        a.pattern.is_some(),
        "the capture's spacing or --rate/--pps/--mbps sets when packets leave",
    )?;
    set(
        "--sport",
        a.sport.is_some(),
        "map ports with --portmap FROM:TO",
    )?;
    set(
        "--dport",
        a.dport.is_some(),
        "map ports with --portmap FROM:TO",
    )?;
    set(
        "--streams",
        a.streams != 1,
        "a replay is one stream, the capture",
    )?;
    set(
        "--script",
        a.script.is_some(),
        "a replay runs no userscript",
    )?;
    set(
        "--rx",
        a.rx.is_some(),
        "a replay writes no latency probe to measure",
    )?;
    set(
        "--hist-out",
        a.hist_out.is_some(),
        "a replay writes no latency probe to measure",
    )?;
    set("--no-probe", a.no_probe, "a replay writes no latency probe")?;
    set(
        "--engine",
        a.engine != "auto",
        "a replay hands the capture's frames to the output port",
    )?;
    set(
        "--link-speed",
        a.link_speed.is_some() && !a.rate.as_deref().is_some_and(|r| r.trim().ends_with('%')),
        "it is the line --rate N% is a share of",
    )?;
    if a.rate.is_some()
        && (a.replay.speed.is_some()
            || a.replay.topspeed
            || a.replay.pps.is_some()
            || a.replay.mbps.is_some())
    {
        return Err(usage(
            "--rate on a replay is its rate: give one of --rate, --pps, --mbps, --speed, --topspeed",
        ));
    }
    Ok(())
}

/// The replay's own rate, if one is asked (`--rate` in gen's one syntax, `--pps`, `--mbps`);
/// `link_bps` gives the line rate for `--rate N%`.
pub fn rate(
    a: &Args,
    link_bps: impl FnOnce() -> anyhow::Result<f64>,
) -> anyhow::Result<Option<ReplayRate>> {
    let r = if let Some(p) = &a.replay.pps {
        let pps = match p.trim().parse::<f64>() {
            Ok(v) => v,
            Err(_) => {
                let with = if p.ends_with("pps") {
                    p.clone()
                } else {
                    format!("{p}pps")
                };
                match flag("--pps", flags::check_rate(&with))? {
                    Rate::Pps(v) => v,
                    _ => {
                        return Err(usage(format!(
                            "--pps {p}: packets per second (100k, 1Mpps)"
                        )))
                    }
                }
            }
        };
        if !(pps.is_finite() && pps > 0.0) {
            return Err(usage(format!("--pps {p}: must be above zero")));
        }
        Some(ReplayRate::Pps(pps))
    } else if let Some(m) = a.replay.mbps {
        Some(ReplayRate::Bps {
            bps: m * 1e6,
            per_frame: 0,
        })
    } else if let Some(r) = &a.rate {
        let rr = match flag("--rate", flags::check_rate(r))? {
            Rate::Pps(p) => ReplayRate::Pps(p),
            // gen's bits: each frame's CRC, preamble and gap counted.
            Rate::Bps(b) => ReplayRate::Bps {
                bps: b,
                per_frame: 24,
            },
            Rate::Percent(p) => ReplayRate::Bps {
                bps: link_bps()? * p / 100.0,
                per_frame: 24,
            },
        };
        let v = match rr {
            ReplayRate::Pps(v) => v,
            ReplayRate::Bps { bps, .. } => bps,
        };
        if !(v.is_finite() && v > 0.0) {
            return Err(usage(format!("--rate {r}: must be above zero")));
        }
        Some(rr)
    } else {
        None
    };
    Ok(r)
}

/// The edits the flags ask for (tcprewrite's), checked before anything is opened.
pub fn rewrite(a: &Args) -> anyhow::Result<Rewrite> {
    let mut rw = Rewrite::default();
    if let Some(m) = &a.dst_mac {
        rw.dst_mac = Some(flag("--dst-mac", parse_mac(m))?);
    }
    if let Some(m) = &a.src_mac {
        rw.src_mac = Some(flag("--src-mac", parse_mac(m))?);
    }
    let maps = |name: &str, v: &Option<String>| -> anyhow::Result<Vec<IpMap>> {
        match v {
            None => Ok(Vec::new()),
            Some(s) => IpMap::parse_list(s).map_err(|e| {
                usage(format!(
                    "{name} {s}: {e} (on a replay: NEW, OLD:NEW or OLD/len:NEW/len, \
                     comma-separated; IPv6 in brackets: [2001:db8::/32]:[fd00::/32])"
                ))
            }),
        }
    };
    rw.src_ip = maps("--src-ip", &a.src_ip)?;
    rw.dst_ip = maps("--dst-ip", &a.dst_ip)?;
    for p in &a.replay.portmap {
        rw.ports
            .extend(PortMap::parse_list(p).map_err(|e| usage(format!("--portmap {p}: {e}")))?);
    }
    if let Some(v) = &a.vlan {
        let id = v
            .trim()
            .parse::<u16>()
            .ok()
            .filter(|id| (1..=4094).contains(id))
            .ok_or_else(|| usage(format!("--vlan {v}: on a replay, one VLAN id 1..4094")))?;
        rw.vlan = Some(id);
    }
    rw.vlan_strip = a.replay.vlan_strip;
    rw.ttl = a.ttl;
    if rw.ttl == Some(0) {
        return Err(usage(
            "--ttl 0: a packet with TTL 0 is dropped by the first router; 1..255",
        ));
    }
    Ok(rw)
}

/// The rewrite to run on a capture of interfaces `ifaces`: None when the packets can go as
/// they are (Ethernet, nothing to change); an error when one interface's link type has no
/// Ethernet form.
pub fn for_capture(
    path: &str,
    rw: Rewrite,
    ifaces: &[Interface],
) -> anyhow::Result<Option<Rewrite>> {
    if let Some(i) = ifaces.iter().find(|i| !rewrite::converts(i.link)) {
        return Err(usage(format!(
            "--pcap {path}: link type {} ({}) cannot be replayed onto Ethernet (linerate converts \
             Ethernet, raw IP, loopback and Linux cooked captures)",
            i.link.0, i.name
        )));
    }
    let all_ethernet = ifaces.iter().all(|i| i.link == LinkType::ETHERNET);
    Ok((!(rw.is_noop() && all_ethernet)).then_some(rw))
}

/// How the summary and the page say a loop count (0: forever).
pub fn loops_text(n: u64) -> String {
    if n == 0 {
        "forever".into()
    } else {
        n.to_string()
    }
}

//! gen's packet kinds and streams of their own: `--proto icmp|arp`, `--vlan OUTER,INNER`
//! (QinQ), `--mpls`, `--encap gre:|vxlan:`, and `--stream KEY=VALUE,...` repeated (TRex's
//! streams, MoonGen's QoS test: each stream its own rate, size, pattern and fields).

use crate::common::{flags, usage};
use linerate::apps::gen::sched::Pattern;
use linerate::apps::gen::template::{Encap, Template, TemplateSpec, L4};
use linerate::apps::gen::vary::{parse_addr, parse_mac, parse_seq, port_value, SizeSpec};
use linerate::apps::gen::StreamSpec;
use linerate::units::Rate;
use std::net::Ipv4Addr;

/// Flags of gen's templates and streams (flattened into gen's).
#[derive(clap::Args, Debug, Default, Clone)]
pub struct StreamArgs {
    /// MPLS labels after the Ethernet header, outermost first: 100 or 100,200 (each below
    /// 2^20, at most 8; TTL 64, bottom of stack on the last).
    #[arg(long, value_name = "LABEL[,LABEL]")]
    pub mpls: Option<String>,
    /// A tunnel around each packet's IP packet (outer IPv4, TTL 64): gre:SRC-DST (GRE, RFC
    /// 2784, carrying the IP packet) or vxlan:VNI[:SRC-DST] (VXLAN, RFC 7348, UDP 49152 to
    /// 4789, carrying the whole inner Ethernet frame with the same MACs). Outer addresses
    /// default to 192.0.2.1-192.0.2.2.
    #[arg(long, value_name = "gre:SRC-DST|vxlan:VNI[:SRC-DST]")]
    pub encap: Option<String>,
    /// A stream of its own (repeat the flag for several, at most 255; replaces --streams): comma-separated
    /// KEY=VALUE of rate, size, pattern, src-ip, dst-ip, sport, dport, proto, ttl, vlan,
    /// src-mac, dst-mac; the others as the flags give them (a value with commas, a list,
    /// goes on after its key: dport=53,80). A stream without rate shares what is left of
    /// --rate with the others without one. E.g. --stream 'rate=1Mpps,size=64,dport=9'.
    #[arg(long = "stream", value_name = "KEY=VALUE,...")]
    pub stream: Vec<String>,
}

/// Parses `--proto`.
pub fn parse_proto(s: &str) -> Result<L4, String> {
    s.parse()
}

/// Parses `--vlan ID` or `--vlan OUTER,INNER` (QinQ: an 802.1ad service tag outside an 802.1Q
/// tag) into (inner, outer). Ids are 1..4094.
pub fn parse_vlans(s: &str) -> Result<(u16, Option<u16>), String> {
    let one = |v: &str| -> Result<u16, String> {
        let id: u32 = v
            .trim()
            .parse()
            .map_err(|_| format!("'{v}' is not a VLAN id (1..4094)"))?;
        match id {
            1..=4094 => Ok(id as u16),
            0 => Err("VLAN id 0 is a priority tag without a VLAN (802.1Q): give 1..4094".into()),
            4095 => Err("VLAN id 4095 is reserved (802.1Q): give 1..4094".into()),
            _ => Err(format!(
                "VLAN id {id} is above 4094 (12 bits, 4095 reserved)"
            )),
        }
    };
    match s.split(',').collect::<Vec<_>>()[..] {
        [v] => Ok((one(v)?, None)),
        [o, i] => Ok((one(i)?, Some(one(o)?))),
        _ => Err(format!(
            "'{s}': one VLAN id, or two (OUTER,INNER: QinQ, 802.1ad outside 802.1Q)"
        )),
    }
}

/// Parses `--mpls 100[,200]`.
pub fn parse_mpls(s: &str) -> Result<Vec<u32>, String> {
    let v: Vec<u32> = s
        .split(',')
        .map(|l| {
            l.trim()
                .parse::<u32>()
                .ok()
                .filter(|&l| l < 1 << 20)
                .ok_or_else(|| format!("'{l}' is not an MPLS label (0..1048575)"))
        })
        .collect::<Result<_, _>>()?;
    if v.len() > 8 {
        return Err(format!("{} labels: at most 8", v.len()));
    }
    Ok(v)
}

fn outer_pair(s: &str) -> Result<(Ipv4Addr, Ipv4Addr), String> {
    let (a, b) = s
        .split_once('-')
        .ok_or_else(|| format!("'{s}': outer addresses are SRC-DST (IPv4)"))?;
    let p = |x: &str| {
        x.parse::<Ipv4Addr>()
            .map_err(|_| format!("'{x}' is not an IPv4 address (the tunnel's outer header)"))
    };
    Ok((p(a)?, p(b)?))
}

/// Parses `--encap gre:SRC-DST` or `--encap vxlan:VNI[:SRC-DST]`.
pub fn parse_encap(s: &str) -> Result<Encap, String> {
    let dflt = (Ipv4Addr::new(192, 0, 2, 1), Ipv4Addr::new(192, 0, 2, 2));
    match s.split_once(':') {
        Some(("gre", rest)) => {
            let (src, dst) = if rest.is_empty() {
                dflt
            } else {
                outer_pair(rest)?
            };
            Ok(Encap::Gre { src, dst })
        }
        Some(("vxlan", rest)) => {
            let (vni, addrs) = match rest.split_once(':') {
                Some((v, a)) => (v, outer_pair(a)?),
                None => (rest, dflt),
            };
            let vni: u32 = vni
                .parse()
                .ok()
                .filter(|&v| v < 1 << 24)
                .ok_or_else(|| format!("'{vni}' is not a VXLAN VNI (0..16777215)"))?;
            Ok(Encap::Vxlan {
                vni,
                src: addrs.0,
                dst: addrs.1,
            })
        }
        None if s == "gre" => Ok(Encap::Gre {
            src: dflt.0,
            dst: dflt.1,
        }),
        _ => Err(format!(
            "'{s}': use gre:SRC-DST or vxlan:VNI[:SRC-DST] (e.g. vxlan:42)"
        )),
    }
}

/// The smallest frame (with CRC) of template `t`: 64 B, or its headers (with the 4 B CRC) when
/// longer (IPv6/TCP: 78 B).
pub fn min_size(t: &TemplateSpec) -> Option<u32> {
    Template::new(t).ok().map(|t| t.min_len() as u32 + 4)
}

/// One `--stream` as KEY=VALUE pairs: a piece without `=` goes on the value before it.
pub fn pairs(s: &str) -> Result<Vec<(String, String)>, String> {
    let mut v: Vec<(String, String)> = Vec::new();
    for piece in s.split(',') {
        match piece.split_once('=') {
            Some((k, val)) => v.push((k.trim().replace('_', "-"), val.trim().to_string())),
            None => match v.last_mut() {
                Some((_, val)) => {
                    val.push(',');
                    val.push_str(piece.trim());
                }
                None => return Err(format!("'{s}': KEY=VALUE,... (e.g. rate=1Mpps,size=64)")),
            },
        }
    }
    if v.is_empty() {
        return Err("an empty --stream: KEY=VALUE,...".into());
    }
    Ok(v)
}

/// A stream's own rate as given (to turn into packets at its size).
pub struct Own {
    /// The stream.
    pub spec: StreamSpec,
    /// Its rate, if it has one.
    pub rate: Option<Rate>,
}

/// `base` with one `--stream`'s keys set.
pub fn stream(base: &StreamSpec, s: &str) -> Result<Own, String> {
    let mut o = base.clone();
    let mut rate = None;
    let mut size_given = false;
    let mut mac_given = false;
    let mut ports_given = false;
    let mut seen: Vec<String> = Vec::new();
    for (k, v) in pairs(s)? {
        // A key given twice would leave one of its values silently unused.
        if seen.contains(&k) {
            return Err(format!("{k} given twice: one value per key"));
        }
        seen.push(k.clone());
        let e = |m: String| format!("{k}={v}: {m}");
        match k.as_str() {
            "rate" => rate = Some(flags::check_rate(&v).map_err(e)?),
            "size" => {
                o.size = v.parse::<SizeSpec>().map_err(e)?;
                size_given = true;
            }
            "pattern" => o.pattern = v.parse::<Pattern>().map_err(e)?,
            "src-ip" => o.src_ip = Some(parse_addr(&v).map_err(e)?),
            "dst-ip" => o.dst_ip = Some(parse_addr(&v).map_err(e)?),
            "sport" => {
                o.sport = Some(parse_seq(&v, port_value).map_err(e)?);
                ports_given = true;
            }
            "dport" => {
                o.dport = Some(parse_seq(&v, port_value).map_err(e)?);
                ports_given = true;
            }
            "proto" => o.template.l4 = parse_proto(&v).map_err(e)?,
            "ttl" => o.template.ttl = v.parse().map_err(|_| e("a TTL is 0..255".into()))?,
            "vlan" => {
                let (i, s) = parse_vlans(&v).map_err(e)?;
                o.template.vlan = Some(i);
                o.template.svlan = s;
            }
            "src-mac" => o.template.src_mac = parse_mac(&v).map_err(e)?,
            "dst-mac" => {
                o.template.dst_mac = parse_mac(&v).map_err(e)?;
                mac_given = true;
            }
            _ => {
                return Err(format!(
                    "unknown key '{k}': rate, size, pattern, src-ip, dst-ip, sport, dport, \
                     proto, ttl, vlan, src-mac, dst-mac"
                ))
            }
        }
    }
    if o.template.l4 == L4::Arp && base.template.l4 != L4::Arp {
        if ports_given {
            return Err("ARP has no ports (sport, dport)".into());
        }
        o.sport = None;
        o.dport = None;
        if !mac_given {
            // An ARP request is broadcast.
            o.template.dst_mac = [0xff; 6];
        }
    }
    // The addresses' family picks the template's (IPv6 defaults when one side is IPv6).
    let v6 = o.src_ip.as_ref().is_some_and(|a| a.base.is_ipv6())
        || o.dst_ip.as_ref().is_some_and(|a| a.base.is_ipv6());
    if v6 != o.template.src_ip.is_ipv6() {
        let (s, d) = if v6 {
            ("2001:db8::1", "2001:db8::2")
        } else {
            ("198.18.0.1", "198.18.0.2")
        };
        o.template.src_ip = s.parse().map_err(|_| "address".to_string())?;
        o.template.dst_ip = d.parse().map_err(|_| "address".to_string())?;
        for a in [&o.src_ip, &o.dst_ip].into_iter().flatten() {
            if a.base.is_ipv6() != v6 {
                return Err("src-ip and dst-ip must be of one family".into());
            }
        }
    }
    if !size_given {
        // The template's smallest frame when the stream's headers outgrow the size given.
        if let (SizeSpec::Fixed(z), Some(m)) = (&o.size, min_size(&o.template)) {
            if *z < m {
                o.size = SizeSpec::Fixed(m);
            }
        }
    }
    Ok(Own { spec: o, rate })
}

/// Packets per second of rate `r` at sizes `z` (`link_bps` for a percentage).
pub fn pps_of(r: Rate, z: &SizeSpec, link_bps: f64) -> f64 {
    let bits_per_frame = (z.mean() + 20.0) * 8.0;
    match r {
        Rate::Pps(p) => p,
        Rate::Bps(b) => b / bits_per_frame,
        Rate::Percent(p) => link_bps * p / 100.0 / bits_per_frame,
    }
}

/// The streams of `--stream` for one thread of `nthreads`, from the flags' stream `base`, with
/// ids from `first_id`: each with its own rate (split among the threads) or a share of what is
/// left of `total` (packets per second of all threads; None: no --rate).
pub fn streams(
    a: &StreamArgs,
    base: &StreamSpec,
    total: Option<f64>,
    link_bps: f64,
    nthreads: usize,
    first_id: usize,
) -> anyhow::Result<Vec<StreamSpec>> {
    // Every worker sends all the --stream streams and numbers them in a byte (the library's
    // limit, as --streams' range): refused here, before the output is opened.
    if a.stream.len() > 255 {
        return Err(usage(format!(
            "--stream given {} times: at most 255 streams (each thread sends them all)",
            a.stream.len()
        )));
    }
    let mut own = Vec::new();
    for (i, s) in a.stream.iter().enumerate() {
        own.push(stream(base, s).map_err(|e| usage(format!("--stream #{}: {e}", i + 1)))?);
    }
    let mut rated = 0.0;
    let mut free = 0usize;
    for o in &own {
        match o.rate {
            Some(r) => rated += pps_of(r, &o.spec.size, link_bps),
            None => free += 1,
        }
    }
    let share = match (total, free) {
        // Every stream has its own rate: a --rate beside them would be ignored.
        (Some(t), 0) if (rated - t).abs() > t * 1e-6 => {
            return Err(usage(format!(
                "--rate ({t:.0} pps) and the streams' own rates ({rated:.0} pps in all) differ: \
                 give --rate only to streams without a rate of their own, or drop it"
            )));
        }
        (_, 0) => None,
        (Some(t), n) => {
            let left = t - rated;
            if left <= 0.0 {
                return Err(usage(format!(
                    "--stream: the streams' own rates ({rated:.0} pps) leave nothing of --rate \
                     ({t:.0} pps) for the {n} stream(s) without a rate"
                )));
            }
            Some(left / n as f64)
        }
        (None, n) if n < own.len() => {
            return Err(usage(
                "--stream: some streams have a rate and others not: give the others a rate, \
                 or --rate for them to share (a stream as fast as possible would leave the \
                 others nothing)",
            ))
        }
        (None, _) => None,
    };
    let n = nthreads.max(1) as f64;
    own.into_iter()
        .enumerate()
        .map(|(i, o)| {
            let id = u16::try_from(first_id + i)
                .map_err(|_| usage("too many streams (at most 65536)"))?;
            let pps = match o.rate {
                Some(r) => Some(pps_of(r, &o.spec.size, link_bps) / n),
                None => share.map(|p| p / n),
            };
            if pps.is_some_and(|p| p <= 0.0 || !p.is_finite()) {
                return Err(usage(format!(
                    "--stream #{}: the rate must be above zero",
                    i + 1
                )));
            }
            Ok(StreamSpec { id, pps, ..o.spec })
        })
        .collect()
}

/// Why the XDP live-frames engine cannot send these streams (it sends one plain
/// Ethernet/IP/UDP-or-TCP stream), if it cannot.
pub fn live_refusal(a: &StreamArgs, streams: &[StreamSpec]) -> Option<String> {
    if a.stream.len() > 1 {
        return Some("--stream: live frames send one stream".into());
    }
    let t = &streams.first()?.template;
    if !matches!(t.l4, L4::Udp | L4::Tcp) {
        return Some(format!(
            "--proto {}: live frames are UDP or TCP",
            t.l4.name()
        ));
    }
    if t.svlan.is_some() || !t.mpls.is_empty() || t.encap.is_some() {
        return Some("--vlan OUTER,INNER, --mpls and --encap: live frames carry one tag".into());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vlan_ids_are_1_to_4094_and_two_make_qinq() {
        assert_eq!(parse_vlans("42"), Ok((42, None)));
        assert_eq!(parse_vlans("10,20"), Ok((20, Some(10))));
        for bad in ["0", "4095", "5000", "x", "1,2,3", "10,0"] {
            assert!(parse_vlans(bad).is_err(), "{bad}");
        }
        assert!(parse_vlans("4095").unwrap_err().contains("reserved"));
        assert!(parse_vlans("0").unwrap_err().contains("priority"));
    }

    #[test]
    fn encaps_mpls_and_stream_pairs_parse() {
        assert_eq!(
            parse_encap("vxlan:42"),
            Ok(Encap::Vxlan {
                vni: 42,
                src: Ipv4Addr::new(192, 0, 2, 1),
                dst: Ipv4Addr::new(192, 0, 2, 2)
            })
        );
        assert_eq!(
            parse_encap("gre:10.0.0.1-10.0.0.2"),
            Ok(Encap::Gre {
                src: Ipv4Addr::new(10, 0, 0, 1),
                dst: Ipv4Addr::new(10, 0, 0, 2)
            })
        );
        for bad in ["ipip:1", "vxlan:99999999", "gre:1.2.3.4", "vxlan:1:a-b"] {
            assert!(parse_encap(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_mpls("100,200"), Ok(vec![100, 200]));
        assert!(parse_mpls("1048576").is_err());
        let p = pairs("rate=1Mpps,dport=53,80,size=64").unwrap();
        assert_eq!(p[1], ("dport".into(), "53,80".into()));
        assert_eq!(p[2], ("size".into(), "64".into()));
        assert!(pairs("53,rate=1").is_err());
    }

    #[test]
    fn streams_keep_their_rates_and_the_others_share_the_rest() {
        let base = StreamSpec::default();
        let a = StreamArgs {
            stream: vec![
                "rate=1kpps,size=128,dport=9".into(),
                "size=64".into(),
                "proto=icmp".into(),
            ],
            ..Default::default()
        };
        let v = streams(&a, &base, Some(5000.0), 10e9, 1, 0).unwrap();
        assert_eq!(v.len(), 3);
        assert_eq!(v[0].pps, Some(1000.0));
        assert_eq!(v[1].pps, Some(2000.0));
        assert_eq!(v[2].pps, Some(2000.0));
        assert_eq!(v[0].size, SizeSpec::Fixed(128));
        assert_eq!(v[2].template.l4, L4::Icmp);
        assert_eq!((v[0].id, v[2].id), (0, 2));
        // Two threads: each sends half of every stream.
        let v = streams(&a, &base, Some(5000.0), 10e9, 2, 3).unwrap();
        assert_eq!((v[0].pps, v[0].id), (Some(500.0), 3));
        // Nothing left for the streams without a rate, or no --rate to share: refused.
        assert!(streams(&a, &base, Some(1000.0), 10e9, 1, 0).is_err());
        assert!(streams(&a, &base, None, 10e9, 1, 0).is_err());
        let bad = StreamArgs {
            stream: vec!["speed=1".into()],
            ..Default::default()
        };
        assert!(streams(&bad, &base, None, 10e9, 1, 0).is_err());
    }
}

//! Flags of every tool that captures from an interface, as tcpdump spells them: `-Q/--direction`
//! (which packets of an `afpacket:` port), `-p/--no-promisc`.

use super::usage;
use linerate::port::xdp::AttachMode;
use linerate::port::{Capture, PortOptions, Uri};

/// `-Q` and `-p`, flattened into the commands that receive from afpacket.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct CaptureFlags {
    /// Which packets of an afpacket: input to take, as tcpdump -Q: in (what the interface
    /// receives), out (what the host sends on it) or inout. Default: inout in count and flows
    /// (as tcpdump), in for fwd and balance (they never take the host's own traffic). Only
    /// afpacket: tells them apart; other inputs (mem:, xdp:, cluster:) only ever hold
    /// what arrived: `in` is taken there and changes nothing, out and inout are refused. On
    /// a capture file any -Q is refused, as libpcap.
    #[arg(short = 'Q', long = "direction", value_name = "in|out|inout", value_parser = direction)]
    pub direction: Option<Capture>,
    /// Don't put the interface in promiscuous mode (tcpdump -p). By default an afpacket:
    /// interface is promiscuous while the port is open, as with tcpdump.
    #[arg(short = 'p', long = "no-promisc")]
    pub no_promisc: bool,
    /// How the XDP program is attached for xdp: ports: native (the driver's hook), generic
    /// (after the stack builds an skb; any interface) or auto (native if the driver takes it).
    #[arg(long, value_name = "native|generic|auto")]
    pub xdp_attach: Option<AttachMode>,
    /// Bytes of a UMEM frame of xdp: ports, 2048 (default) or 4096. A frame longer than a
    /// UMEM frame less 256 B (1 792 or 3 840 B) comes in pieces (AF_XDP multi-buffer) that the
    /// port gathers: 4096 takes half the pieces per jumbo frame, and holds half the frames in
    /// the same memory.
    #[arg(long, value_name = "2048|4096", value_parser = frame_size)]
    pub xdp_frame_size: Option<u32>,
}

fn frame_size(s: &str) -> Result<u32, String> {
    match s {
        "2048" => Ok(2048),
        "4096" => Ok(4096),
        _ => Err("2048 or 4096 (the kernel's UMEM frames are 2 or 4 KiB here)".to_string()),
    }
}

/// Whether `uri` names an `xdp:` port, alone or in a list.
fn names_xdp(uri: &str) -> bool {
    fn any(u: &Uri) -> bool {
        match u {
            Uri::Xdp { .. } => true,
            Uri::List(l) => l.iter().any(any),
            _ => false,
        }
    }
    Uri::parse(uri).is_ok_and(|u| any(&u))
}

fn direction(s: &str) -> Result<Capture, String> {
    // Any case, as tcpdump -Q (IN, Out).
    Capture::parse(&s.to_ascii_lowercase()).ok_or_else(|| "in, out or inout".to_string())
}

/// Whether every port `uri` names is an AF_PACKET interface (`afpacket:IF`, or `any`).
fn all_afpacket(uri: &Uri) -> bool {
    match uri {
        Uri::AfPacket(_) => true,
        Uri::Bare(b) => b == linerate::port::afpacket::ANY && !std::path::Path::new(b).exists(),
        Uri::List(l) => l.iter().all(all_afpacket),
        _ => false,
    }
}

/// Whether `uri` names `afpacket:any` (or bare `any`) anywhere, alone or in a list.
pub fn names_any(uri: &str) -> bool {
    fn any(u: &Uri) -> bool {
        match u {
            Uri::AfPacket(i) => i == linerate::port::afpacket::ANY,
            Uri::Bare(b) => b == linerate::port::afpacket::ANY && !std::path::Path::new(b).exists(),
            Uri::List(l) => l.iter().any(any),
            _ => false,
        }
    }
    Uri::parse(uri).is_ok_and(|u| any(&u))
}

/// Refuses `afpacket:any` as `flag uri` where it cannot apply (exit 2, before any output is
/// touched): `why` says what the tool would need that `any` does not give.
pub fn refuse_any(flag: &str, uri: &str, why: &str) -> anyhow::Result<()> {
    if names_any(uri) {
        return Err(usage(format!("{flag} {uri}: afpacket:any {why}")));
    }
    Ok(())
}

/// Whether `uri` names a capture file (a savefile), alone or in a list.
fn names_file(uri: &Uri) -> bool {
    match uri {
        Uri::File { .. } => true,
        Uri::Bare(b) => b != linerate::port::afpacket::ANY || std::path::Path::new(b).exists(),
        Uri::List(l) => l.iter().any(names_file),
        _ => false,
    }
}

impl CaptureFlags {
    /// Refuses --xdp-attach and --xdp-frame-size when none of `uris` is an `xdp:` port (exit
    /// 2: a flag that cannot apply).
    pub fn check_xdp(&self, uris: &[&str]) -> anyhow::Result<()> {
        if uris.iter().any(|u| names_xdp(u)) {
            return Ok(());
        }
        let given = match (self.xdp_attach, self.xdp_frame_size) {
            (Some(_), _) => "--xdp-attach",
            (None, Some(_)) => "--xdp-frame-size",
            (None, None) => return Ok(()),
        };
        Err(usage(format!(
            "{given}: applies to xdp: ports, and {} names none",
            uris.join(" and ")
        )))
    }

    /// The options for input `uri` (of flag `flag`) with `default` as the direction when -Q is
    /// not given: out/inout on an input that cannot tell directions is a usage error.
    pub fn apply(
        &self,
        flag: &str,
        uri: &str,
        default: Capture,
        opts: PortOptions,
    ) -> anyhow::Result<PortOptions> {
        let kernel = Uri::parse(uri).is_ok_and(|u| all_afpacket(&u));
        if let Some(d) = self.direction {
            if Uri::parse(uri).is_ok_and(|u| names_file(&u)) {
                // libpcap's pcap_setdirection on a savefile, in its words.
                return Err(usage(format!(
                    "-Q {}: Setting direction is not supported on savefiles ({flag} {uri} \
                     reads a capture file)",
                    d.as_str()
                )));
            }
        }
        let direction = match self.direction {
            Some(d @ (Capture::Out | Capture::InOut)) if !kernel => {
                return Err(usage(format!(
                    "-Q {}: {flag} {uri} only holds packets that arrived (files, mem:, xdp: \
                     and cluster: queues see no sent packets); only afpacket:IFACE can take \
                     what the host sends",
                    d.as_str()
                )))
            }
            Some(d) => d,
            None if kernel => default,
            None => Capture::In,
        };
        let mut xdp = opts.xdp;
        if let Some(m) = self.xdp_attach {
            xdp.attach = m;
        }
        if let Some(f) = self.xdp_frame_size {
            xdp.frame_size = f;
        }
        Ok(PortOptions {
            direction,
            promisc: !self.no_promisc,
            xdp,
            ..opts
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xdp_flags_apply_to_xdp_ports_only() {
        let f = CaptureFlags {
            xdp_attach: Some(AttachMode::Generic),
            xdp_frame_size: Some(4096),
            ..Default::default()
        };
        let o = f
            .apply("-i", "xdp:eth0", Capture::In, PortOptions::default())
            .unwrap();
        assert_eq!(
            (o.xdp.attach, o.xdp.frame_size),
            (AttachMode::Generic, 4096)
        );
        assert!(f.check_xdp(&["xdp:eth0@1"]).is_ok());
        assert!(f.check_xdp(&["afpacket:eth0", "mem:a,xdp:eth1"]).is_ok());
        let e = f.check_xdp(&["afpacket:eth0", "f.pcap"]).unwrap_err();
        assert!(e.to_string().contains("--xdp-attach"), "{e}");
        assert!(CaptureFlags::default().check_xdp(&["mem:x"]).is_ok());
        assert_eq!(frame_size("4096"), Ok(4096));
        assert!(frame_size("8192").is_err());
    }

    #[test]
    fn directions_are_taken_in_any_case_as_tcpdump() {
        assert_eq!(direction("IN"), Ok(Capture::In));
        assert_eq!(direction("Out"), Ok(Capture::Out));
        assert_eq!(direction("InOut"), Ok(Capture::InOut));
        assert!(direction("sideways").is_err());
    }

    #[test]
    fn out_is_refused_where_no_packet_is_sent() {
        let f = CaptureFlags {
            direction: Some(Capture::Out),
            no_promisc: false,
            ..Default::default()
        };
        for uri in [
            "mem:x",
            "pcap:f.pcap",
            "xdp:eth0",
            "cluster:1@0",
            "afpacket:a,mem:b",
        ] {
            assert!(f
                .apply("-i", uri, Capture::InOut, PortOptions::default())
                .is_err());
        }
        let o = f
            .apply("-i", "afpacket:a,any", Capture::In, PortOptions::default())
            .unwrap();
        assert_eq!(o.direction, Capture::Out);
        let d = CaptureFlags::default();
        let o = d
            .apply(
                "-i",
                "afpacket:eth0",
                Capture::InOut,
                PortOptions::default(),
            )
            .unwrap();
        assert_eq!(o.direction, Capture::InOut);
        assert!(o.promisc);
        let o = d
            .apply("-i", "mem:x", Capture::InOut, PortOptions::default())
            .unwrap();
        assert_eq!(o.direction, Capture::In);
        let inn = CaptureFlags {
            direction: Some(Capture::In),
            no_promisc: true,
            ..Default::default()
        };
        let o = inn
            .apply("-i", "mem:x", Capture::InOut, PortOptions::default())
            .unwrap();
        assert!(!o.promisc);
        // Any direction on a savefile, as libpcap.
        for uri in ["pcap:f.pcap", "f.pcapng", "afpacket:a,f.pcap"] {
            let e = inn
                .apply("-i", uri, Capture::InOut, PortOptions::default())
                .unwrap_err();
            assert!(e.to_string().contains("not supported on savefiles"), "{e}");
        }
    }
}

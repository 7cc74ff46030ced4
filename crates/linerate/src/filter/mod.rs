//! BPF filters in libpcap syntax, compiled with libpcap.
//!
//! A [`Filter`] runs in user space on any port ([`Filter::matches_wire`]: libpcap's own `bpf_filter`,
//! handed the length on the wire, which `len`, `less` and `greater` test, not the bytes
//! captured), or is handed to the kernel by ports that can attach it
//! ([`Filter::program`], classic BPF as `SO_ATTACH_FILTER` takes).

pub use crate::sys::bpf_filter::Insn;
use crate::wire::LinkType;

/// Errors of filters.
#[derive(Debug, thiserror::Error)]
pub enum FilterError {
    /// libpcap could not compile the expression.
    #[error("bad filter '{expr}': {why} (see `man pcap-filter` for the syntax)")]
    Compile {
        /// The expression.
        expr: String,
        /// libpcap's message.
        why: String,
    },
}

/// A compiled filter expression.
pub struct Filter {
    expr: String,
    insns: Vec<Insn>,
    prog: crate::sys::bpf_filter::ValidBpf,
}

impl std::fmt::Debug for Filter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Filter")
            .field("expr", &self.expr)
            .field("insns", &self.insns.len())
            .finish()
    }
}

impl Filter {
    /// Compiles `expr` for packets of link type `lt` (a capture file's LINKTYPE_ value), as
    /// tcpdump compiles it for the file it reads: libpcap's compiler takes the platform's
    /// DLT_ value, so LINKTYPE_RAW (101) and the DLT_RAW values files carry (12, and 14 as
    /// OpenBSD writes it) are compiled as this platform's DLT_RAW.
    pub fn compile(expr: &str, lt: LinkType) -> Result<Filter, FilterError> {
        let err = |why: String| FilterError::Compile {
            expr: expr.to_string(),
            why,
        };
        let cap =
            pcap::Capture::dead(pcap::Linktype(dlt_of(lt))).map_err(|e| err(e.to_string()))?;
        let prog = cap.compile(expr, true).map_err(|e| err(e.to_string()))?;
        Filter::from_program(expr, &prog)
    }

    /// Compiles `expr` for the packets of the capture file `path` exactly as `tcpdump -r path`
    /// compiles it: libpcap's compiler reads the file's header, and for DLT_NULL and DLT_ENC
    /// (an address family in the capturing host's byte order) tests the BSD values of AF_INET6
    /// and the file's byte order, which a compile for the link type alone does not (a macOS
    /// loopback capture's IPv6 packets matched no filter). None when libpcap cannot open the
    /// file (then [`Filter::compile`] for its link type is what there is).
    pub fn compile_for_file(
        expr: &str,
        path: &std::path::Path,
    ) -> Option<Result<Filter, FilterError>> {
        let cap = pcap::Capture::from_file(path).ok()?;
        Some(
            cap.compile(expr, true)
                .map_err(|e| FilterError::Compile {
                    expr: expr.to_string(),
                    why: e.to_string(),
                })
                .and_then(|prog| Filter::from_program(expr, &prog)),
        )
    }

    fn from_program(expr: &str, prog: &pcap::BpfProgram) -> Result<Filter, FilterError> {
        let err = |why: String| FilterError::Compile {
            expr: expr.to_string(),
            why,
        };
        let mut insns = Vec::new();
        for i in prog.get_instructions() {
            // The pcap crate keeps the fields private; its Display prints "code jt jf k".
            let s = i.to_string();
            let v: Vec<u32> = s.split(' ').filter_map(|x| x.parse().ok()).collect();
            if v.len() != 4 {
                return Err(err(format!("unexpected instruction '{s}'")));
            }
            insns.push(Insn {
                code: v[0] as u16,
                jt: v[1] as u8,
                jf: v[2] as u8,
                k: v[3],
            });
        }
        let prog = crate::sys::bpf_filter::ValidBpf::new(&insns)
            .ok_or_else(|| err("libpcap's bpf_validate refused the compiled program".into()))?;
        Ok(Filter {
            expr: expr.to_string(),
            insns,
            prog,
        })
    }

    /// The expression.
    pub fn expr(&self) -> &str {
        &self.expr
    }

    /// Whether a packet whose whole frame is `data` passes the filter (wire length = `data.len()`).
    #[inline]
    pub fn matches(&self, data: &[u8]) -> bool {
        self.matches_wire(data, data.len() as u32)
    }

    /// Whether a packet passes the filter: `data` are its captured bytes, `wire` its length on the
    /// wire (a pcap record's `orig_len`, `Desc::wire_len`), which `len`, `less` and `greater` test,
    /// as in libpcap.
    #[inline]
    pub fn matches_wire(&self, data: &[u8], wire: u32) -> bool {
        self.prog.run(data, wire) != 0
    }

    /// Whether a packet of a batch passes the filter (its wire length is the descriptor's
    /// [`Desc::filter_len`](crate::mem::Desc::filter_len)).
    #[inline]
    pub fn matches_pkt(&self, p: crate::mem::Pkt<'_>) -> bool {
        self.matches_wire(p.data, p.desc.filter_len())
    }

    /// The program, for the kernel.
    pub fn program(&self) -> &[Insn] {
        &self.insns
    }
}

/// The DLT_ value libpcap's compiler takes for a LINKTYPE_ value (libpcap's
/// `linktype_to_dlt`: the LINKTYPE_ values below 104 whose DLT_ differs by platform, and
/// LINKTYPE_ATM_CLIP; every other value is the same in both).
fn dlt_of(lt: LinkType) -> i32 {
    /// DLT_RAW on every platform but OpenBSD (where it is 14, and 12 is DLT_LOOP).
    const DLT_RAW: i32 = 12;
    match lt.0 {
        101 | 12 | 14 => DLT_RAW,
        // LINKTYPE_ATM_RFC1483, LINKTYPE_SLIP_BSDOS, LINKTYPE_PPP_BSDOS: this platform's
        // DLT_ATM_RFC1483 (11), DLT_SLIP_BSDOS (15), DLT_PPP_BSDOS (16), as tcpdump -r compiles
        // a filter for such a file (libpcap's compiler knows no DLT 100, 102, 103).
        100 => 11,
        102 => 15,
        103 => 16,
        // LINKTYPE_ATM_CLIP (106), the one value of the matching range libpcap maps: Linux's
        // DLT_ATM_CLIP (19).
        106 => 19,
        n => i32::try_from(n).unwrap_or(i32::MAX),
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn udp_frame(dport: u16) -> Vec<u8> {
        let mut f = vec![0u8; 42];
        f[12] = 0x08; // IPv4
        f[14] = 0x45;
        f[16..18].copy_from_slice(&28u16.to_be_bytes());
        f[22] = 64;
        f[23] = 17; // UDP
        f[26..30].copy_from_slice(&[10, 0, 0, 1]);
        f[30..34].copy_from_slice(&[10, 0, 0, 2]);
        f[34..36].copy_from_slice(&1234u16.to_be_bytes());
        f[36..38].copy_from_slice(&dport.to_be_bytes());
        f[38..40].copy_from_slice(&8u16.to_be_bytes());
        f
    }

    #[test]
    fn compiles_and_matches() {
        let f = Filter::compile("udp dst port 53", LinkType::ETHERNET).unwrap();
        assert!(f.matches(&udp_frame(53)));
        assert!(!f.matches(&udp_frame(54)));
        assert!(!f.program().is_empty());
        let g = Filter::compile("host 10.0.0.2 and not tcp", LinkType::ETHERNET).unwrap();
        assert!(g.matches(&udp_frame(1)));
        assert!(!g.matches(&[0u8; 5]));
    }

    /// Raw IP (LINKTYPE_RAW 101, DLT_RAW 12/14, LINKTYPE_IPV4/IPV6) and Linux cooked v1/v2
    /// captures: the filter is compiled for their headers, as tcpdump -r compiles it.
    #[test]
    fn compiles_for_raw_ip_and_cooked_link_types() {
        let eth = udp_frame(53);
        let ip = &eth[14..];
        for lt in [101, 12, 14, 228] {
            let f = Filter::compile("udp dst port 53 and host 10.0.0.2", LinkType(lt)).unwrap();
            assert!(f.matches(ip), "{lt}");
            assert!(!f.matches(&eth), "{lt}");
        }
        let mut sll = vec![0u8; 16];
        sll[14..16].copy_from_slice(&[0x08, 0x00]);
        sll.extend_from_slice(ip);
        let f = Filter::compile("udp port 53", LinkType::LINUX_SLL).unwrap();
        assert!(f.matches(&sll));
        let mut sll2 = vec![0u8; 20];
        sll2[0..2].copy_from_slice(&[0x08, 0x00]);
        sll2.extend_from_slice(ip);
        let f = Filter::compile("udp port 53", LinkType::LINUX_SLL2).unwrap();
        assert!(f.matches(&sll2));
        assert!(!f.matches(&sll));
    }

    /// LINKTYPE_ATM_RFC1483 (100), LINKTYPE_SLIP_BSDOS (102), LINKTYPE_PPP_BSDOS (103): files of
    /// these link types are filtered as tcpdump -r filters them (libpcap's compiler refused
    /// "unknown data link type 100" when the LINKTYPE_ value was handed to it as a DLT_).
    #[test]
    fn compiles_for_link_types_whose_dlt_differs() {
        for lt in [100, 102, 103, 106] {
            Filter::compile("", LinkType(lt)).unwrap();
            Filter::compile("ip", LinkType(lt)).unwrap();
        }
        let eth = udp_frame(53);
        let mut llc = vec![0xaa, 0xaa, 0x03, 0, 0, 0, 0x08, 0x00];
        llc.extend_from_slice(&eth[14..]);
        let f = Filter::compile("udp port 53", LinkType(100)).unwrap();
        assert!(f.matches(&llc));
        assert!(!f.matches(&eth));
    }

    #[test]
    fn bad_expression_is_a_clear_error() {
        let e = Filter::compile("udp port banana", LinkType::ETHERNET).unwrap_err();
        let s = e.to_string();
        assert!(s.contains("udp port banana"), "{s}");
    }

    #[test]
    fn len_less_greater_test_the_wire_length() {
        let f = udp_frame(53);
        let less = Filter::compile("less 60", LinkType::ETHERNET).unwrap();
        let greater = Filter::compile("greater 100", LinkType::ETHERNET).unwrap();
        let len = Filter::compile("len > 80", LinkType::ETHERNET).unwrap();
        // 42 bytes captured of a 42-byte frame, then of a 1500-byte frame.
        assert!(less.matches_wire(&f, 42));
        assert!(!greater.matches_wire(&f, 42));
        assert!(!len.matches_wire(&f, 42));
        assert!(!less.matches_wire(&f, 1500));
        assert!(greater.matches_wire(&f, 1500));
        assert!(len.matches_wire(&f, 1500));
        // A wire length below the captured one (a malformed pcap record's orig_len) is what
        // `len` loads, as libpcap passes it; loads of bytes still stop at the captured ones.
        assert!(less.matches_wire(&[0u8; 70], 10));
        let byte = Filter::compile("ether[65] == 0", LinkType::ETHERNET).unwrap();
        assert!(byte.matches_wire(&[0u8; 70], 10));
        assert!(!byte.matches_wire(&[0u8; 60], 100));
    }

    /// Our interpreter agrees with libpcap's own (`pcap_offline_filter`, which sees a record
    /// whose wire length is its captured length) on many expressions and frames.
    #[test]
    fn agrees_with_libpcap() {
        let exprs = [
            "udp dst port 53",
            "tcp[tcpflags] & tcp-syn != 0",
            "ip[2:2] > 30",
            "vlan and udp",
            "vlan 10 or mpls",
            "ip6 protochain 17",
            "ip protochain 6",
            "net 10.0.0.0/8 and not port 7",
            "ether[0] & 1 = 0 and ip[8] > 3",
            "len >= 42 and len <= 64",
            "pppoes and ip",
            "udp[8:4] = 0x01020304 or icmp",
            "portrange 50-60",
        ];
        let mut seed = 0x9e3779b97f4a7c15u64;
        let mut rnd = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut frames: Vec<Vec<u8>> = vec![udp_frame(53), udp_frame(54), vec![], vec![0u8; 3]];
        for _ in 0..400 {
            let mut f = udp_frame((rnd() % 70) as u16);
            let n = (rnd() % 90) as usize;
            for _ in 0..n % 8 {
                let i = (rnd() as usize) % f.len();
                f[i] = rnd() as u8;
            }
            match rnd() % 6 {
                0 => f[12..14].copy_from_slice(&[0x86, 0xdd]),
                1 => {
                    f.splice(12..12, [0x81, 0x00, 0x00, 0x0a]);
                }
                2 => f[23] = 6,
                3 => f.truncate(n.min(f.len())),
                4 => f.extend((0..n).map(|_| rnd() as u8)),
                _ => {}
            }
            frames.push(f);
        }
        let mut hits = 0;
        for e in exprs {
            let ours = Filter::compile(e, LinkType::ETHERNET).unwrap();
            let cap = pcap::Capture::dead(pcap::Linktype(1)).unwrap();
            let theirs = cap.compile(e, true).unwrap();
            for f in &frames {
                assert_eq!(ours.matches(f), theirs.filter(f), "'{e}' on {f:02x?}");
                hits += ours.matches(f) as usize;
            }
        }
        assert!(
            hits > 100 && hits < exprs.len() * frames.len() / 2,
            "{hits}"
        );
    }

    #[test]
    fn programs_libpcap_would_not_run_are_refused() {
        use crate::sys::bpf_filter::ValidBpf;
        let i = |code, jt, jf, k| Insn { code, jt, jf, k };
        assert!(ValidBpf::new(&[]).is_none());
        assert!(ValidBpf::new(&[i(0x15, 200, 200, 0)]).is_none()); // jumps out
        assert!(ValidBpf::new(&[i(0x34, 0, 0, 0), i(0x16, 0, 0, 0)]).is_none()); // div by 0
        assert!(ValidBpf::new(&[i(0x28, 0, 0, 12)]).is_none()); // no return
        let ok = ValidBpf::new(&[i(0x48, 0, 0, u32::MAX), i(0x06, 0, 0, 1)]).unwrap();
        assert_eq!(ok.run(&[1, 2, 3], 3), 0, "a load past the bytes rejects");
    }
}

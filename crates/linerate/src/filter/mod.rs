//! BPF filters in libpcap syntax, compiled with libpcap.
//!
//! A [`Filter`] runs in user space on any port ([`Filter::matches_wire`]: our own classic BPF
//! interpreter, with libpcap's semantics: `len`, `less` and `greater` test the length on the wire,
//! not the bytes captured), or is handed to the kernel by ports that can attach it
//! ([`Filter::program`], classic BPF as `SO_ATTACH_FILTER` takes).

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

/// One classic BPF instruction, laid out as the kernel's `struct sock_filter`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Insn {
    /// Operation code.
    pub code: u16,
    /// Jump offset if true.
    pub jt: u8,
    /// Jump offset if false.
    pub jf: u8,
    /// Operand.
    pub k: u32,
}

/// A compiled filter expression.
pub struct Filter {
    expr: String,
    insns: Vec<Insn>,
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
    /// Compiles `expr` for packets of link type `lt`.
    pub fn compile(expr: &str, lt: LinkType) -> Result<Filter, FilterError> {
        let err = |why: String| FilterError::Compile {
            expr: expr.to_string(),
            why,
        };
        let cap =
            pcap::Capture::dead(pcap::Linktype(lt.0 as i32)).map_err(|e| err(e.to_string()))?;
        let prog = cap.compile(expr, true).map_err(|e| err(e.to_string()))?;
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
        if insns.is_empty() {
            return Err(err("empty program".into()));
        }
        Ok(Filter {
            expr: expr.to_string(),
            insns,
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
        run(&self.insns, data, wire.max(data.len() as u32)) != 0
    }

    /// Whether a packet of a batch passes the filter (its wire length is the descriptor's).
    #[inline]
    pub fn matches_pkt(&self, p: crate::mem::Pkt<'_>) -> bool {
        self.matches_wire(p.data, p.desc.wire_len)
    }

    /// The program, for the kernel.
    pub fn program(&self) -> &[Insn] {
        &self.insns
    }
}

/// Most instructions one packet may execute: libpcap's `ip6 protochain` walks headers with a
/// backward jump; a program that loops longer than this is stopped and rejects the packet.
const MAX_STEPS: u32 = 1 << 16;

/// Runs the classic BPF `prog` on `data` (the captured bytes) of a packet `wire` bytes long on
/// the wire, as libpcap's `bpf_filter` does: a load past the captured bytes rejects the packet,
/// `len` (`BPF_LD|BPF_LEN`) is the wire length, `BPF_JA` offsets are signed (protochain). Returns
/// the program's verdict (0: reject). Never panics, whatever the program.
fn run(prog: &[Insn], data: &[u8], wire: u32) -> u32 {
    let mut a: u32 = 0;
    let mut x: u32 = 0;
    let mut mem = [0u32; 16];
    let mut pc: usize = 0;
    let mut steps = 0u32;
    let ld = |off: u32, size: usize| -> Option<u32> {
        let off = off as usize;
        let b = data.get(off..off.checked_add(size)?)?;
        Some(match size {
            4 => u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
            2 => u16::from_be_bytes([b[0], b[1]]) as u32,
            _ => b[0] as u32,
        })
    };
    loop {
        steps += 1;
        if steps > MAX_STEPS {
            return 0;
        }
        let Some(i) = prog.get(pc) else { return 0 };
        pc += 1;
        let k = i.k;
        match i.code {
            // BPF_RET
            0x06 => return k,
            0x16 => return a,
            // BPF_LD | W/H/B | ABS
            0x20 | 0x28 | 0x30 | 0x40 | 0x48 | 0x50 => {
                let size = match i.code & 0x18 {
                    0x00 => 4,
                    0x08 => 2,
                    _ => 1,
                };
                let off = if i.code & 0xe0 == 0x40 {
                    match x.checked_add(k) {
                        Some(o) => o,
                        None => return 0,
                    }
                } else {
                    k
                };
                match ld(off, size) {
                    Some(v) => a = v,
                    None => return 0,
                }
            }
            0x80 => a = wire,                   // BPF_LD|BPF_W|BPF_LEN
            0x81 => x = wire,                   // BPF_LDX|BPF_W|BPF_LEN
            0x00 => a = k,                      // BPF_LD|BPF_IMM
            0x01 => x = k,                      // BPF_LDX|BPF_IMM
            0x60 => a = mem[(k & 15) as usize], // BPF_LD|BPF_MEM
            0x61 => x = mem[(k & 15) as usize], // BPF_LDX|BPF_MEM
            0xb1 => match ld(k, 1) {
                // BPF_LDX|BPF_B|BPF_MSH
                Some(v) => x = (v & 0xf) << 2,
                None => return 0,
            },
            0x02 => mem[(k & 15) as usize] = a, // BPF_ST
            0x03 => mem[(k & 15) as usize] = x, // BPF_STX
            0x05 => {
                // BPF_JA: signed, as libpcap's protochain needs.
                match pc.checked_add_signed(k as i32 as isize) {
                    Some(p) => pc = p,
                    None => return 0,
                }
            }
            0x07 => x = a, // BPF_MISC|BPF_TAX
            0x87 => a = x, // BPF_MISC|BPF_TXA
            c if c & 0x07 == 0x05 => {
                // BPF_JMP with a condition
                let v = if c & 0x08 != 0 { x } else { k };
                let t = match c & 0xf0 {
                    0x10 => a == v,
                    0x20 => a > v,
                    0x30 => a >= v,
                    0x40 => a & v != 0,
                    _ => return 0,
                };
                pc += if t { i.jt } else { i.jf } as usize;
            }
            c if c & 0x07 == 0x04 => {
                // BPF_ALU
                let v = if c & 0x08 != 0 { x } else { k };
                a = match c & 0xf0 {
                    0x00 => a.wrapping_add(v),
                    0x10 => a.wrapping_sub(v),
                    0x20 => a.wrapping_mul(v),
                    0x30 => match a.checked_div(v) {
                        Some(r) => r,
                        None => return 0,
                    },
                    0x40 => a | v,
                    0x50 => a & v,
                    0x60 => a.checked_shl(v).unwrap_or(0),
                    0x70 => a.checked_shr(v).unwrap_or(0),
                    0x80 => a.wrapping_neg(),
                    0x90 => match a.checked_rem(v) {
                        Some(r) => r,
                        None => return 0,
                    },
                    0xa0 => a ^ v,
                    _ => return 0,
                };
            }
            _ => return 0,
        }
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
        // A wire length below the captured one is not believed.
        assert!(!less.matches_wire(&vec![0u8; 70], 10));
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
    fn hostile_programs_do_not_panic() {
        let progs: [&[Insn]; 5] = [
            &[Insn {
                code: 0x05,
                jt: 0,
                jf: 0,
                k: u32::MAX,
            }], // ja -1: a loop
            &[Insn {
                code: 0x05,
                jt: 0,
                jf: 0,
                k: 0x8000_0000,
            }],
            &[
                Insn {
                    code: 0x34,
                    jt: 0,
                    jf: 0,
                    k: 0,
                },
                Insn {
                    code: 0x16,
                    jt: 0,
                    jf: 0,
                    k: 0,
                },
            ],
            &[Insn {
                code: 0x15,
                jt: 200,
                jf: 200,
                k: 0,
            }],
            &[Insn {
                code: 0x48,
                jt: 0,
                jf: 0,
                k: u32::MAX,
            }],
        ];
        for p in progs {
            assert_eq!(run(p, &[1, 2, 3], 3), 0);
        }
    }
}

//! BPF filters in libpcap syntax, compiled with libpcap.
//!
//! A [`Filter`] runs in user space on any port ([`Filter::matches`]), or is handed to the kernel
//! by ports that can attach it ([`Filter::program`], classic BPF as `SO_ATTACH_FILTER` takes).

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
    prog: pcap::BpfProgram,
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
        Ok(Filter {
            expr: expr.to_string(),
            prog,
            insns,
        })
    }

    /// The expression.
    pub fn expr(&self) -> &str {
        &self.expr
    }

    /// Whether the packet's bytes pass the filter.
    #[inline]
    pub fn matches(&self, data: &[u8]) -> bool {
        self.prog.filter(data)
    }

    /// The program, for the kernel.
    pub fn program(&self) -> &[Insn] {
        &self.insns
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
}

//! libpcap's classic BPF interpreter (`bpf_filter`, with `bpf_validate`), for filters run in user
//! space: the one tcpdump runs, handed the wire length that `len`, `less` and `greater` test.

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

#[link(name = "pcap")]
extern "C" {
    fn bpf_filter(pc: *const Insn, p: *const u8, wirelen: u32, buflen: u32) -> u32;
    fn bpf_validate(f: *const Insn, len: i32) -> i32;
}

/// A classic BPF program libpcap's `bpf_validate` accepted: every jump lands inside it, it ends
/// with a return, scratch-memory indices are in range and no constant divides by zero.
pub(crate) struct ValidBpf(Box<[Insn]>);

impl ValidBpf {
    /// Checks `insns` (None if libpcap's checker refuses them or there are none).
    pub(crate) fn new(insns: &[Insn]) -> Option<ValidBpf> {
        let len = i32::try_from(insns.len()).ok().filter(|&n| n > 0)?;
        // SAFETY: bpf_validate reads `len` instructions from the pointer; `insns` holds them
        // (`Insn` has the layout of `struct bpf_insn`).
        let ok = unsafe { bpf_validate(insns.as_ptr(), len) };
        (ok != 0).then(|| ValidBpf(insns.into()))
    }

    /// The program's verdict on a packet: `data` its captured bytes, `wire` its length on the
    /// wire, what BPF's `len` loads, passed as given even below `data.len()` (a malformed pcap
    /// record whose `orig_len` is smaller than its captured length), as libpcap passes it. 0:
    /// rejected.
    #[inline]
    pub(crate) fn run(&self, data: &[u8], wire: u32) -> u32 {
        let buflen = u32::try_from(data.len()).unwrap_or(u32::MAX);
        // SAFETY: the program passed bpf_validate, so bpf_filter reads only its instructions
        // (jumps stay inside, it ends in a return) and in-range scratch memory; it reads packet
        // bytes only below `buflen` (each load is checked against it), and `data` holds at least
        // `buflen` bytes; `wire` is only the value of BPF_LEN loads, never a bound. It writes
        // nothing we own.
        unsafe { bpf_filter(self.0.as_ptr(), data.as_ptr(), wire, buflen) }
    }
}

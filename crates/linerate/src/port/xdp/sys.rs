//! System calls: AF_XDP sockets and their options, the `bpf(2)` commands the port needs; and,
//! through the crate's one netlink socket and ethtool call ([`crate::sys`]), the rtnetlink
//! requests that query, attach and remove an interface's XDP program, and the queue count,
//! driver and GRO state of an interface.
//!
//! The kernel ABI structures are declared here (from `linux/if_xdp.h`, `linux/bpf.h`,
//! `linux/if_link.h`), as the fixed-layout prefixes the kernel accepts.

use crate::port::PortError;
use crate::sys::ethtool::{ethtool, ETHTOOL_GCHANNELS, ETHTOOL_GDRVINFO, ETHTOOL_GGRO};
pub(crate) use crate::sys::netlink::Netlink;
use crate::sys::netlink::{attrs, ifinfomsg, nl_finish, nl_header, NLA_F_NESTED};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

pub(super) const AF_XDP: i32 = 44;
pub(super) const SOL_XDP: i32 = 283;
pub(super) const XDP_MMAP_OFFSETS: i32 = 1;
pub(super) const XDP_RX_RING: i32 = 2;
pub(super) const XDP_TX_RING: i32 = 3;
pub(super) const XDP_UMEM_REG: i32 = 4;
pub(super) const XDP_UMEM_FILL_RING: i32 = 5;
pub(super) const XDP_UMEM_COMPLETION_RING: i32 = 6;
pub(super) const XDP_STATISTICS: i32 = 7;
pub(super) const XDP_OPTIONS: i32 = 8;
pub(super) const XDP_OPTIONS_ZEROCOPY: u32 = 1;
/// How many frames one copy-mode transmit call may send (Linux 6.17; 32 before, and the
/// default): from 32 up to the tx ring's size.
pub(super) const XDP_MAX_TX_SKB_BUDGET: i32 = 9;

pub(super) const XDP_SHARED_UMEM: u16 = 1;
pub(super) const XDP_COPY: u16 = 2;
pub(super) const XDP_ZEROCOPY: u16 = 4;
pub(super) const XDP_USE_NEED_WAKEUP: u16 = 8;
/// Multi-buffer: a frame longer than a UMEM frame comes (and goes) as several descriptors
/// (Linux 6.6).
pub(super) const XDP_USE_SG: u16 = 1 << 4;
/// In a descriptor's options: more pieces of this frame follow.
pub(super) const XDP_PKT_CONTD: u32 = 1;
pub(super) const XDP_RING_NEED_WAKEUP: u32 = 1;

pub(super) const XDP_PGOFF_RX_RING: i64 = 0;
pub(super) const XDP_PGOFF_TX_RING: i64 = 0x8000_0000;
pub(super) const XDP_UMEM_PGOFF_FILL_RING: i64 = 0x1_0000_0000;
pub(super) const XDP_UMEM_PGOFF_COMPLETION_RING: i64 = 0x1_8000_0000;

/// XDP attach flags (`XDP_FLAGS_*`).
pub(super) const XDP_FLAGS_SKB_MODE: u32 = 2;
pub(super) const XDP_FLAGS_DRV_MODE: u32 = 4;

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct RingOffset {
    pub producer: u64,
    pub consumer: u64,
    pub desc: u64,
    pub flags: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct MmapOffsets {
    pub rx: RingOffset,
    pub tx: RingOffset,
    pub fr: RingOffset,
    pub cr: RingOffset,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct UmemReg {
    pub addr: u64,
    pub len: u64,
    pub chunk_size: u32,
    pub headroom: u32,
    pub flags: u32,
    pub tx_metadata_len: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct SockaddrXdp {
    pub family: u16,
    pub flags: u16,
    pub ifindex: u32,
    pub queue_id: u32,
    pub shared_umem_fd: u32,
}

/// One packet in an rx or tx ring (`struct xdp_desc`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct XdpDesc {
    /// Byte offset of the packet in the UMEM.
    pub addr: u64,
    /// Length in bytes.
    pub len: u32,
    /// Options (`XDP_PKT_CONTD`: more pieces of the frame follow).
    pub options: u32,
}

/// The socket's kernel counters (`struct xdp_statistics`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct XdpStatistics {
    /// Dropped for reasons other than an invalid descriptor (e.g. no frame in the fill ring).
    pub rx_dropped: u64,
    /// Invalid descriptors dropped on receive.
    pub rx_invalid_descs: u64,
    /// Invalid descriptors dropped on transmit.
    pub tx_invalid_descs: u64,
    /// Dropped because the rx ring was full.
    pub rx_ring_full: u64,
    /// Times the fill ring was empty when a packet arrived.
    pub rx_fill_ring_empty_descs: u64,
    /// Times the tx ring was empty when the kernel looked.
    pub tx_ring_empty_descs: u64,
}

fn hint(iface: &str, op: &'static str, e: &io::Error) -> std::borrow::Cow<'static, str> {
    if e.raw_os_error() == Some(libc::EBUSY) && !op.starts_with("bind") {
        return format!(
            " (another XDP program is attached: `ip link show dev {iface}` names it and its \
             mode; remove it with `ip link set dev {iface} xdpgeneric off` when it is generic \
             (xdpgeneric), `ip link set dev {iface} xdpdrv off` when it is native (xdp))"
        )
        .into();
    }
    match e.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => {
            " (needs root, or CAP_NET_RAW + CAP_BPF + CAP_NET_ADMIN)"
        }
        Some(libc::EAFNOSUPPORT) => " (the kernel has no AF_XDP support: CONFIG_XDP_SOCKETS)",
        Some(libc::EBUSY) if op.starts_with("bind") => {
            " (another AF_XDP socket is bound to this queue)"
        }
        Some(libc::EOPNOTSUPP) if op.starts_with("bind") => {
            " (the driver cannot do this mode: use --xdp-mode copy)"
        }
        Some(libc::EOPNOTSUPP) => " (the driver has no native XDP: use generic attach)",
        Some(libc::ENOMEM) => " (UMEM or ring too large: lower the frame count)",
        Some(libc::ENETDOWN) => " (bring the interface up: ip link set IFACE up)",
        Some(libc::EINVAL) if op.starts_with("bind") => {
            " (no such queue on the interface, or a bad UMEM/ring geometry)"
        }
        _ => "",
    }
    .into()
}

/// Turns an OS error of `op` on `iface` into a port error.
pub(super) fn err_of(iface: &str, op: &'static str, source: io::Error) -> PortError {
    match source.raw_os_error() {
        Some(libc::ENODEV) | Some(libc::ENXIO) => PortError::NoInterface(iface.to_string()),
        _ => PortError::Os {
            iface: iface.to_string(),
            op,
            hint: hint(iface, op, &source),
            source,
        },
    }
}

/// The last OS error of `op` on `iface` as a port error.
pub(super) fn os_err(iface: &str, op: &'static str) -> PortError {
    err_of(iface, op, io::Error::last_os_error())
}

pub(crate) use crate::port::ifindex;

/// The driver of interface `name` (`ETHTOOL_GDRVINFO`), e.g. "veth".
pub(crate) fn iface_driver(name: &str) -> io::Result<String> {
    // struct ethtool_drvinfo: cmd, then driver[32], ... (196 bytes in all).
    let mut info = [0u8; 196];
    info[..4].copy_from_slice(&ETHTOOL_GDRVINFO.to_ne_bytes());
    ethtool(name, &mut info)?;
    let d = &info[4..36];
    let end = d.iter().position(|&b| b == 0).unwrap_or(d.len());
    Ok(String::from_utf8_lossy(&d[..end]).into_owned())
}

/// How many receive queues interface `name` has, and how that was learnt: the driver's channels
/// (`ETHTOOL_GCHANNELS`: combined channels plus receive-only ones), else the queues the device
/// was created with (rtnetlink `IFLA_NUM_RX_QUEUES`, for drivers without channels). Both are
/// answered in the calling thread's network namespace (sysfs is not: it shows the namespace
/// that mounted it).
pub(crate) fn rx_queues(name: &str, ifindex: u32) -> io::Result<(u32, &'static str)> {
    // struct ethtool_channels: cmd, max_rx, max_tx, max_other, max_combined, rx_count,
    // tx_count, other_count, combined_count.
    let mut ch = [0u8; 36];
    ch[..4].copy_from_slice(&ETHTOOL_GCHANNELS.to_ne_bytes());
    let word = |b: &[u8], i: usize| {
        u32::from_ne_bytes([b[i * 4], b[i * 4 + 1], b[i * 4 + 2], b[i * 4 + 3]])
    };
    match ethtool(name, &mut ch) {
        Ok(()) => {
            let n = word(&ch, 5).saturating_add(word(&ch, 8));
            if n > 0 {
                return Ok((n, "ethtool channels"));
            }
        }
        Err(e) if e.raw_os_error() == Some(libc::ENODEV) => return Err(e),
        Err(_) => {}
    }
    let nl = Netlink::open()?;
    let mut m = Vec::with_capacity(64);
    nl_header(&mut m, libc::RTM_GETLINK, libc::NLM_F_REQUEST as u16);
    ifinfomsg(&mut m, ifindex);
    nl_finish(&mut m);
    let reply = nl.request(&m)?;
    let len = u32::from_ne_bytes([reply[0], reply[1], reply[2], reply[3]]) as usize;
    let body = reply.get(32..len.min(reply.len())).unwrap_or(&[]);
    let mut n = 0;
    attrs(body, |ty, p| {
        if ty == IFLA_NUM_RX_QUEUES && p.len() >= 4 {
            n = u32::from_ne_bytes([p[0], p[1], p[2], p[3]]);
        }
    });
    Ok((n.max(1), "rtnetlink IFLA_NUM_RX_QUEUES"))
}

/// A new AF_XDP socket.
pub(super) fn xdp_socket(iface: &str) -> Result<OwnedFd, PortError> {
    crate::port::sys::socket(AF_XDP, libc::SOCK_RAW, 0)
        .map_err(|e| err_of(iface, "socket(AF_XDP)", e))
}

/// setsockopt(fd, SOL_XDP, opt, &val); `op` names the option in errors.
pub(super) fn setopt<T>(
    fd: &OwnedFd,
    iface: &str,
    opt: i32,
    op: &'static str,
    val: &T,
) -> Result<(), PortError> {
    crate::port::sys::setopt(fd, SOL_XDP, opt, val).map_err(|e| err_of(iface, op, e))
}

/// getsockopt(fd, SOL_XDP, opt) into a `T` (plain data, zero-initialised first).
pub(super) fn getopt<T: Copy + Default>(fd: &OwnedFd, opt: i32) -> io::Result<T> {
    let mut v = T::default();
    let mut len = std::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: `v` is writable for `len` bytes; the kernel writes at most that.
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            SOL_XDP,
            opt,
            &mut v as *mut T as *mut libc::c_void,
            &mut len,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(v)
}

/// Maps `len` bytes of a ring of `fd` at page offset `pgoff`.
pub(super) fn map_ring(
    fd: &OwnedFd,
    iface: &str,
    len: usize,
    pgoff: i64,
) -> Result<*mut u8, PortError> {
    // SAFETY: a shared mapping of the socket's ring; the kernel validates offset and length and
    // the result is checked.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_POPULATE,
            fd.as_raw_fd(),
            pgoff,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(os_err(iface, "mmap(ring)"));
    }
    Ok(p as *mut u8)
}

/// bind(2) of an AF_XDP socket.
pub(super) fn bind(fd: &OwnedFd, sa: &SockaddrXdp) -> io::Result<()> {
    // SAFETY: `sa` is a live sockaddr_xdp of the size given.
    let r = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            sa as *const SockaddrXdp as *const libc::sockaddr,
            std::mem::size_of::<SockaddrXdp>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `SO_PREFER_BUSY_POLL` and `SO_BUSY_POLL_BUDGET` (Linux 5.11; not in every libc).
const SO_PREFER_BUSY_POLL: i32 = 69;
const SO_BUSY_POLL_BUDGET: i32 = 70;

/// Makes `fd` busy-poll its device's NAPI: preferred, `usecs` per call, `budget` packets.
pub(super) fn busy_poll(
    fd: &OwnedFd,
    iface: &str,
    usecs: u32,
    budget: u32,
) -> Result<(), PortError> {
    for (opt, v, op) in [
        (SO_PREFER_BUSY_POLL, 1u32, "setsockopt SO_PREFER_BUSY_POLL"),
        (libc::SO_BUSY_POLL, usecs, "setsockopt SO_BUSY_POLL"),
        (
            SO_BUSY_POLL_BUDGET,
            budget,
            "setsockopt SO_BUSY_POLL_BUDGET",
        ),
    ] {
        crate::port::sys::setopt(fd, libc::SOL_SOCKET, opt, &v)
            .map_err(|e| err_of(iface, op, e))?;
    }
    Ok(())
}

/// Kicks the kernel to transmit (copy mode, or a tx ring that needs a wakeup).
pub(super) fn kick_tx(fd: &OwnedFd) -> io::Result<()> {
    // SAFETY: sendto with no buffer and no address on our socket.
    let r = unsafe {
        libc::sendto(
            fd.as_raw_fd(),
            std::ptr::null(),
            0,
            libc::MSG_DONTWAIT,
            std::ptr::null(),
            0,
        )
    };
    if r < 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::EAGAIN) | Some(libc::EBUSY) | Some(libc::ENOBUFS) | Some(libc::EINTR) => {
                Ok(())
            }
            _ => Err(e),
        };
    }
    Ok(())
}

/// Waits up to `ms` for `fd` to be readable (also wakes the kernel's receive path when the fill
/// ring asked for it). Returns whether it is readable.
pub(super) fn poll_in(fd: i32, ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let r = unsafe { libc::poll(&mut p, 1, ms) };
    r > 0 && p.revents & libc::POLLIN != 0
}

/// Waits up to `ms` for any of `fds` to be readable; sets `ready[i]` for those that are (also
/// on error or hang-up, so the caller's next read reports it). Any pollable descriptor works.
pub fn poll_many(fds: &[i32], ms: i32, ready: &mut [bool]) {
    let mut p = [libc::pollfd {
        fd: -1,
        events: libc::POLLIN,
        revents: 0,
    }; 8];
    let n = fds.len().min(p.len()).min(ready.len());
    for (slot, &fd) in p.iter_mut().zip(&fds[..n]) {
        slot.fd = fd;
    }
    // SAFETY: `p[..n]` are valid pollfd structures.
    let r = unsafe { libc::poll(p.as_mut_ptr(), n as libc::nfds_t, ms) };
    for (flag, slot) in ready[..n].iter_mut().zip(&p[..n]) {
        *flag = r > 0 && slot.revents & (libc::POLLIN | libc::POLLERR | libc::POLLHUP) != 0;
    }
}

/// Wakes the kernel's receive path without waiting (need_wakeup set on the fill ring).
/// CLOCK_TAI minus CLOCK_REALTIME, in whole seconds as the kernel keeps it (the TAI offset:
/// 0 unless a time daemon set it, 37 s since 2017 when one did), in ns.
pub(super) fn tai_offset_ns() -> i64 {
    let read = |c: libc::clockid_t| {
        let mut t = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `t` is a valid timespec for the kernel to fill.
        unsafe { libc::clock_gettime(c, &mut t) };
        t.tv_sec * 1_000_000_000 + t.tv_nsec
    };
    let real = read(libc::CLOCK_REALTIME);
    let tai = read(libc::CLOCK_TAI);
    // The two readings are microseconds apart: round to whole seconds.
    (tai - real + 500_000_000).div_euclid(1_000_000_000) * 1_000_000_000
}

pub(super) fn kick_rx(fd: &OwnedFd) {
    // SAFETY: a non-blocking zero-length recvfrom on our socket, as the AF_XDP API asks.
    unsafe {
        libc::recvfrom(
            fd.as_raw_fd(),
            std::ptr::null_mut(),
            0,
            libc::MSG_DONTWAIT,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        )
    };
}

// ---------------------------------------------------------------------------------------------
// bpf(2)

pub(super) const BPF_MAP_CREATE: u32 = 0;
pub(super) const BPF_MAP_LOOKUP_ELEM: u32 = 1;
pub(super) const BPF_MAP_UPDATE_ELEM: u32 = 2;
pub(super) const BPF_MAP_DELETE_ELEM: u32 = 3;
pub(super) const BPF_PROG_LOAD: u32 = 5;
pub(super) const BPF_PROG_TEST_RUN: u32 = 10;
pub(super) const BPF_PROG_GET_FD_BY_ID: u32 = 13;
pub(super) const BPF_OBJ_GET_INFO_BY_FD: u32 = 15;
pub(super) const BPF_LINK_CREATE: u32 = 28;
pub(super) const BPF_MAP_TYPE_XSKMAP: u32 = 17;
pub(crate) const BPF_MAP_TYPE_PERCPU_ARRAY: u32 = 6;
/// `BPF_PROG_RUN` flag: XDP frames the program returns XDP_TX or XDP_REDIRECT for are sent.
pub(crate) const BPF_F_TEST_XDP_LIVE_FRAMES: u32 = 1 << 1;
/// Largest `batch_size` of a live-frames run (`TEST_XDP_MAX_BATCH`).
pub(crate) const TEST_XDP_MAX_BATCH: u32 = 256;
pub(super) const BPF_PROG_TYPE_XDP: u32 = 6;
pub(super) const BPF_PROG_TYPE_RAW_TRACEPOINT: u32 = 17;
pub(super) const BPF_MAP_GET_NEXT_KEY: u32 = 4;
pub(super) const BPF_RAW_TRACEPOINT_OPEN: u32 = 17;
pub(crate) const BPF_MAP_TYPE_ARRAY: u32 = 2;
pub(crate) const BPF_MAP_TYPE_PERCPU_HASH: u32 = 5;
pub(super) const BPF_XDP: u32 = 37;

/// bpf(cmd, attr, size): `attr` is the command's `union bpf_attr` member, zero-padded.
pub(super) fn bpf<T>(cmd: u32, attr: &mut T) -> io::Result<i32> {
    // SAFETY: `attr` is a live, initialised structure of the size given, laid out as the
    // command's member of `union bpf_attr`; the kernel reads (and for some commands writes)
    // at most that many bytes.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd as libc::c_long,
            attr as *mut T as *mut libc::c_void,
            std::mem::size_of::<T>() as libc::c_long,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(r as i32)
}

/// bpf(cmd, attr) for a command that returns a new descriptor (map or program creation, link
/// creation, a program by id): the descriptor, owned.
pub(crate) fn bpf_fd<T>(cmd: u32, attr: &mut T) -> io::Result<OwnedFd> {
    let fd = bpf(cmd, attr)?;
    // SAFETY: the commands this is called with return a new descriptor on success, which
    // nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[repr(C)]
#[derive(Default)]
pub(super) struct MapCreateAttr {
    pub map_type: u32,
    pub key_size: u32,
    pub value_size: u32,
    pub max_entries: u32,
    pub map_flags: u32,
    pub inner_map_fd: u32,
    pub numa_node: u32,
    pub map_name: [u8; 16],
}

#[repr(C)]
#[derive(Default)]
pub(super) struct MapElemAttr {
    pub map_fd: u32,
    pub pad: u32,
    pub key: u64,
    pub value: u64,
    pub flags: u64,
}

#[repr(C)]
#[derive(Default)]
pub(super) struct ProgLoadAttr {
    pub prog_type: u32,
    pub insn_cnt: u32,
    pub insns: u64,
    pub license: u64,
    pub log_level: u32,
    pub log_size: u32,
    pub log_buf: u64,
    pub kern_version: u32,
    pub prog_flags: u32,
    pub prog_name: [u8; 16],
    pub prog_ifindex: u32,
    pub expected_attach_type: u32,
}

#[repr(C)]
#[derive(Default)]
pub(super) struct LinkCreateAttr {
    pub prog_fd: u32,
    pub target_ifindex: u32,
    pub attach_type: u32,
    pub flags: u32,
    pub pad: [u64; 4],
}

#[repr(C)]
#[derive(Default)]
pub(super) struct GetFdByIdAttr {
    pub id: u32,
    pub next_id: u32,
    pub open_flags: u32,
}

#[repr(C)]
#[derive(Default)]
pub(super) struct InfoByFdAttr {
    pub bpf_fd: u32,
    pub info_len: u32,
    pub info: u64,
}

const BPF_PROG_TYPE_SCHED_CLS: u32 = 3;
const BPF_TCX_EGRESS: u32 = 47;

/// Loads `code` (eBPF instructions, 8 bytes each, GPL) as a tc classifier and attaches it at
/// the tcx egress hook of interface `ifindex` through a bpf_link (kernel 6.6+): every frame
/// leaving the interface runs it until the returned link is closed. The kernel's verifier
/// checks the program; it sees packets, never this process's memory.
pub(crate) fn attach_tc_egress(ifindex: u32, code: &[u8]) -> io::Result<OwnedFd> {
    if code.is_empty() || !code.len().is_multiple_of(8) || code.len() / 8 > 1_000_000 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a program is a whole number of 8-byte instructions",
        ));
    }
    let license = b"GPL\0";
    let mut load = ProgLoadAttr {
        prog_type: BPF_PROG_TYPE_SCHED_CLS,
        insn_cnt: (code.len() / 8) as u32,
        insns: code.as_ptr() as u64,
        license: license.as_ptr() as u64,
        ..Default::default()
    };
    let prog = bpf_fd(BPF_PROG_LOAD, &mut load)?;
    let mut link = LinkCreateAttr {
        prog_fd: prog.as_raw_fd() as u32,
        target_ifindex: ifindex,
        attach_type: BPF_TCX_EGRESS,
        ..Default::default()
    };
    // The link holds the program, so `prog` may be closed.
    bpf_fd(BPF_LINK_CREATE, &mut link)
}

/// The `test` member of `union bpf_attr` (BPF_PROG_TEST_RUN, a.k.a. BPF_PROG_RUN).
#[repr(C)]
#[derive(Default)]
pub(crate) struct TestRunAttr {
    pub prog_fd: u32,
    pub retval: u32,
    pub data_size_in: u32,
    pub data_size_out: u32,
    pub data_in: u64,
    pub data_out: u64,
    pub repeat: u32,
    pub duration: u32,
    pub ctx_size_in: u32,
    pub ctx_size_out: u32,
    pub ctx_in: u64,
    pub ctx_out: u64,
    pub flags: u32,
    pub cpu: u32,
    pub batch_size: u32,
    pub pad: u32,
}

/// `struct xdp_md`, the context of an XDP program (`ctx_in` of a test run).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct XdpMd {
    pub data: u32,
    pub data_end: u32,
    pub data_meta: u32,
    pub ingress_ifindex: u32,
    pub rx_queue_index: u32,
    pub egress_ifindex: u32,
}

/// Runs XDP program `prog` over `repeat` frames initialised from `data`, live (each frame the
/// program returns XDP_TX for is sent on interface `ifindex`), `batch` frames per kernel
/// batch. Returns when all ran, or with EINTR when a signal arrived (after a whole batch).
pub(crate) fn xdp_run_live(
    prog: &OwnedFd,
    data: &[u8],
    ifindex: u32,
    repeat: u32,
    batch: u32,
) -> io::Result<()> {
    let ctx = XdpMd {
        data_end: data.len() as u32,
        ingress_ifindex: ifindex,
        ..Default::default()
    };
    let mut a = TestRunAttr {
        prog_fd: prog.as_raw_fd() as u32,
        data_size_in: data.len() as u32,
        data_in: data.as_ptr() as u64,
        repeat,
        ctx_size_in: std::mem::size_of::<XdpMd>() as u32,
        ctx_in: &ctx as *const XdpMd as u64,
        flags: BPF_F_TEST_XDP_LIVE_FRAMES,
        batch_size: batch,
        ..Default::default()
    };
    bpf(BPF_PROG_TEST_RUN, &mut a).map(|_| ())
}

/// Reads element `key` of map `map` into `value` (all CPUs' values for a per-CPU map).
pub(crate) fn map_lookup(map: &OwnedFd, key: u32, value: &mut [u8]) -> io::Result<()> {
    let mut a = MapElemAttr {
        map_fd: map.as_raw_fd() as u32,
        key: &key as *const u32 as u64,
        value: value.as_mut_ptr() as u64,
        ..Default::default()
    };
    bpf(BPF_MAP_LOOKUP_ELEM, &mut a).map(|_| ())
}

/// Writes element `key` of map `map` (all CPUs' values for a per-CPU map).
pub(crate) fn map_update(map: &OwnedFd, key: u32, value: &[u8]) -> io::Result<()> {
    let mut a = MapElemAttr {
        map_fd: map.as_raw_fd() as u32,
        key: &key as *const u32 as u64,
        value: value.as_ptr() as u64,
        ..Default::default()
    };
    bpf(BPF_MAP_UPDATE_ELEM, &mut a).map(|_| ())
}

/// Reads element `key` (bytes) of map `map` into `value`; ENOENT when there is none.
pub(crate) fn map_lookup_key(map: &OwnedFd, key: &[u8], value: &mut [u8]) -> io::Result<()> {
    let mut a = MapElemAttr {
        map_fd: map.as_raw_fd() as u32,
        key: key.as_ptr() as u64,
        value: value.as_mut_ptr() as u64,
        ..Default::default()
    };
    bpf(BPF_MAP_LOOKUP_ELEM, &mut a).map(|_| ())
}

/// Deletes element `key` (bytes) of map `map`.
pub(crate) fn map_delete_key(map: &OwnedFd, key: &[u8]) -> io::Result<()> {
    let mut a = MapElemAttr {
        map_fd: map.as_raw_fd() as u32,
        key: key.as_ptr() as u64,
        ..Default::default()
    };
    bpf(BPF_MAP_DELETE_ELEM, &mut a).map(|_| ())
}

/// The key after `key` in map `map` (None: the first one) written into `next`; Ok(false) at
/// the end of the map. `key` and `next` are the map's key size.
pub(crate) fn map_next_key(map: &OwnedFd, key: Option<&[u8]>, next: &mut [u8]) -> io::Result<bool> {
    let mut a = MapElemAttr {
        map_fd: map.as_raw_fd() as u32,
        key: key.map_or(0, |k| k.as_ptr() as u64),
        value: next.as_mut_ptr() as u64,
        ..Default::default()
    };
    match bpf(BPF_MAP_GET_NEXT_KEY, &mut a) {
        Ok(_) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(false),
        Err(e) => Err(e),
    }
}

/// The `raw_tracepoint` member of `union bpf_attr`.
#[repr(C)]
#[derive(Default)]
struct RawTracepointAttr {
    name: u64,
    prog_fd: u32,
    pad: u32,
    cookie: u64,
}

/// Attaches raw tracepoint program `prog` to tracepoint `name` (`napi_poll`); it stays attached
/// until the returned descriptor is closed.
pub(crate) fn raw_tracepoint_open(prog: &OwnedFd, name: &str) -> io::Result<OwnedFd> {
    let c = std::ffi::CString::new(name).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let mut a = RawTracepointAttr {
        name: c.as_ptr() as u64,
        prog_fd: prog.as_raw_fd() as u32,
        ..Default::default()
    };
    bpf_fd(BPF_RAW_TRACEPOINT_OPEN, &mut a)
}

/// Number of possible CPUs (the value count of a per-CPU map), from
/// /sys/devices/system/cpu/possible ("0-3", "0,2-5").
pub(crate) fn possible_cpus() -> io::Result<usize> {
    let s = std::fs::read_to_string("/sys/devices/system/cpu/possible")?;
    let mut n = 0;
    for part in s.trim().split(',') {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let (a, b): (usize, usize) = match (a.trim().parse(), b.trim().parse()) {
            (Ok(a), Ok(b)) if b >= a => (a, b),
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("/sys/devices/system/cpu/possible: '{}'", s.trim()),
                ))
            }
        };
        n = n.max(b + 1);
        let _ = a;
    }
    Ok(n.max(1))
}

/// The leading fields of `struct bpf_prog_info` up to and including the name.
#[repr(C)]
#[derive(Default, Clone, Copy)]
pub(super) struct ProgInfo {
    pub prog_type: u32,
    pub id: u32,
    pub tag: [u8; 8],
    pub jited_prog_len: u32,
    pub xlated_prog_len: u32,
    pub jited_prog_insns: u64,
    pub xlated_prog_insns: u64,
    pub load_time: u64,
    pub created_by_uid: u32,
    pub nr_map_ids: u32,
    pub map_ids: u64,
    pub name: [u8; 16],
}

/// Name of the program with kernel id `id` (empty if it has none), or an error if it is gone.
pub(super) fn prog_name_by_id(id: u32) -> io::Result<String> {
    let mut a = GetFdByIdAttr {
        id,
        ..Default::default()
    };
    let fd = bpf_fd(BPF_PROG_GET_FD_BY_ID, &mut a)?;
    let mut info = ProgInfo::default();
    let mut q = InfoByFdAttr {
        bpf_fd: fd.as_raw_fd() as u32,
        info_len: std::mem::size_of::<ProgInfo>() as u32,
        info: &mut info as *mut ProgInfo as u64,
    };
    bpf(BPF_OBJ_GET_INFO_BY_FD, &mut q)?;
    let end = info
        .name
        .iter()
        .position(|&b| b == 0)
        .unwrap_or(info.name.len());
    Ok(String::from_utf8_lossy(&info.name[..end]).into_owned())
}

// ---------------------------------------------------------------------------------------------
// rtnetlink: the XDP attachment of an interface

const IFLA_XDP: u16 = 43;
const IFLA_XDP_FD: u16 = 1;
const IFLA_XDP_ATTACHED: u16 = 2;
const IFLA_XDP_FLAGS: u16 = 3;
const IFLA_XDP_PROG_ID: u16 = 4;

/// What rtnetlink says about an interface's XDP program.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct XdpAttachment {
    /// `XDP_ATTACHED_*`: 0 none, 1 driver, 2 generic (skb), 3 hardware, 4 several.
    pub mode: u8,
    /// Kernel id of the program (0 if none).
    pub prog_id: u32,
}

/// The XDP program attached to interface `ifindex`, as rtnetlink reports it.
pub(super) fn xdp_query(nl: &Netlink, ifindex: u32) -> io::Result<XdpAttachment> {
    let mut m = Vec::with_capacity(64);
    nl_header(&mut m, libc::RTM_GETLINK, libc::NLM_F_REQUEST as u16);
    ifinfomsg(&mut m, ifindex);
    nl_finish(&mut m);
    let reply = nl.request(&m)?;
    let mut out = XdpAttachment::default();
    // nlmsghdr (16) + ifinfomsg (16), then attributes.
    let len = u32::from_ne_bytes([reply[0], reply[1], reply[2], reply[3]]) as usize;
    let body = reply.get(32..len.min(reply.len())).unwrap_or(&[]);
    attrs(body, |ty, p| {
        if ty == IFLA_XDP {
            attrs(p, |t, v| match t {
                IFLA_XDP_ATTACHED => out.mode = v.first().copied().unwrap_or(0),
                IFLA_XDP_PROG_ID if v.len() >= 4 => {
                    out.prog_id = u32::from_ne_bytes([v[0], v[1], v[2], v[3]])
                }
                _ => {}
            });
        }
    });
    Ok(out)
}

const IFLA_STATS64: u16 = 23;
const IFLA_NUM_RX_QUEUES: u16 = 32;

/// Counters of an interface (`struct rtnl_link_stats64`, its first ten fields).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Packets received.
    pub rx_packets: u64,
    /// Packets sent.
    pub tx_packets: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Receive errors.
    pub rx_errors: u64,
    /// Transmit errors.
    pub tx_errors: u64,
    /// Received packets dropped.
    pub rx_dropped: u64,
    /// Packets dropped on transmit (veth: XDP frames its peer's ring had no room for).
    pub tx_dropped: u64,
}

/// The counters of interface `ifindex` in the calling thread's network namespace.
pub(crate) fn link_stats(ifindex: u32) -> io::Result<LinkStats> {
    let nl = Netlink::open()?;
    let mut m = Vec::with_capacity(64);
    nl_header(&mut m, libc::RTM_GETLINK, libc::NLM_F_REQUEST as u16);
    ifinfomsg(&mut m, ifindex);
    nl_finish(&mut m);
    let reply = nl.request(&m)?;
    let len = u32::from_ne_bytes([reply[0], reply[1], reply[2], reply[3]]) as usize;
    let body = reply.get(32..len.min(reply.len())).unwrap_or(&[]);
    let mut out = None;
    attrs(body, |ty, p| {
        if ty == IFLA_STATS64 && p.len() >= 64 {
            let f = |i: usize| {
                let mut b = [0u8; 8];
                b.copy_from_slice(&p[i * 8..i * 8 + 8]);
                u64::from_ne_bytes(b)
            };
            out = Some(LinkStats {
                rx_packets: f(0),
                tx_packets: f(1),
                rx_bytes: f(2),
                tx_bytes: f(3),
                rx_errors: f(4),
                tx_errors: f(5),
                rx_dropped: f(6),
                tx_dropped: f(7),
            });
        }
    });
    out.ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no IFLA_STATS64 in the reply"))
}

/// Attaches program `prog_fd` (or detaches with -1) on `ifindex` through rtnetlink, with
/// `XDP_FLAGS_*` `flags` (the pre-bpf_link way; the program stays until removed).
pub(super) fn xdp_set_netlink(
    nl: &Netlink,
    ifindex: u32,
    prog_fd: i32,
    flags: u32,
) -> io::Result<()> {
    let mut m = Vec::with_capacity(64);
    nl_header(
        &mut m,
        libc::RTM_SETLINK,
        (libc::NLM_F_REQUEST | libc::NLM_F_ACK) as u16,
    );
    ifinfomsg(&mut m, ifindex);
    // IFLA_XDP { IFLA_XDP_FD, IFLA_XDP_FLAGS }
    m.extend_from_slice(&(4u16 + 8 + 8).to_ne_bytes());
    m.extend_from_slice(&(IFLA_XDP | NLA_F_NESTED).to_ne_bytes());
    m.extend_from_slice(&8u16.to_ne_bytes());
    m.extend_from_slice(&IFLA_XDP_FD.to_ne_bytes());
    m.extend_from_slice(&prog_fd.to_ne_bytes());
    m.extend_from_slice(&8u16.to_ne_bytes());
    m.extend_from_slice(&IFLA_XDP_FLAGS.to_ne_bytes());
    m.extend_from_slice(&flags.to_ne_bytes());
    nl_finish(&mut m);
    nl.request(&m).map(|_| ())
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_busy_interface_is_named_with_both_detach_commands() {
        let h = hint("vA", "attach", &io::Error::from_raw_os_error(libc::EBUSY));
        assert!(h.contains("ip link set dev vA xdpgeneric off"), "{h}");
        assert!(h.contains("ip link set dev vA xdpdrv off"), "{h}");
        assert!(!h.contains("IFACE"), "{h}");
        // A busy queue (bind) is another socket, not a program.
        let h = hint("vA", "bind", &io::Error::from_raw_os_error(libc::EBUSY));
        assert!(h.contains("AF_XDP socket"), "{h}");
    }

    #[test]
    fn abi_sizes_match_the_kernel_headers() {
        assert_eq!(std::mem::size_of::<XdpDesc>(), 16);
        assert_eq!(std::mem::size_of::<SockaddrXdp>(), 16);
        assert_eq!(std::mem::size_of::<UmemReg>(), 32);
        assert_eq!(std::mem::size_of::<MmapOffsets>(), 128);
        assert_eq!(std::mem::size_of::<XdpStatistics>(), 48);
        assert_eq!(std::mem::offset_of!(ProgInfo, name), 64);
        assert_eq!(std::mem::offset_of!(ProgLoadAttr, prog_name), 48);
        assert_eq!(std::mem::offset_of!(TestRunAttr, flags), 64);
        assert_eq!(std::mem::offset_of!(TestRunAttr, batch_size), 72);
        assert_eq!(std::mem::size_of::<XdpMd>(), 24);
    }
}

// ---------------------------------------------------------------------------------------------
// Whether an interface can take XDP redirects

const IFLA_IFNAME: u16 = 3;
const IFLA_LINK: u16 = 5;
const IFLA_LINK_NETNSID: u16 = 37;
const IFLA_TARGET_NETNSID: u16 = 46;
const RTM_GETNSID: u16 = 90;
const NETNSA_NSID: u16 = 1;
const NETNSA_FD: u16 = 3;

/// Whether frames redirected to an interface by an XDP program leave it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RedirectTarget {
    /// They do; why (e.g. "its veth peer vC has an XDP program").
    Delivers(String),
    /// They are discarded; why.
    Discards(String),
    /// It cannot be told; why.
    Unknown(String),
}

/// The peer of veth `ifindex` as rtnetlink reports it: its ifindex in its own namespace and
/// the id of that namespace as seen from the calling thread's (None: the same namespace).
fn veth_peer(nl: &Netlink, ifindex: u32) -> io::Result<(u32, Option<i32>)> {
    let mut m = Vec::with_capacity(64);
    nl_header(&mut m, libc::RTM_GETLINK, libc::NLM_F_REQUEST as u16);
    ifinfomsg(&mut m, ifindex);
    nl_finish(&mut m);
    let reply = nl.request(&m)?;
    let len = u32::from_ne_bytes([reply[0], reply[1], reply[2], reply[3]]) as usize;
    let body = reply.get(32..len.min(reply.len())).unwrap_or(&[]);
    let (mut link, mut nsid) = (0u32, None);
    attrs(body, |ty, p| match ty {
        IFLA_LINK if p.len() >= 4 => link = u32::from_ne_bytes([p[0], p[1], p[2], p[3]]),
        IFLA_LINK_NETNSID if p.len() >= 4 => {
            nsid = Some(i32::from_ne_bytes([p[0], p[1], p[2], p[3]]))
        }
        _ => {}
    });
    if link == 0 {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            "no IFLA_LINK (no peer)",
        ));
    }
    Ok((link, nsid))
}

/// Interface `ifindex` of namespace `nsid` (None: the caller's): its name, whether it is up
/// and its XDP attachment.
fn link_in(nl: &Netlink, ifindex: u32, nsid: Option<i32>) -> io::Result<(String, bool, u8)> {
    let mut m = Vec::with_capacity(64);
    nl_header(&mut m, libc::RTM_GETLINK, libc::NLM_F_REQUEST as u16);
    ifinfomsg(&mut m, ifindex);
    if let Some(id) = nsid {
        m.extend_from_slice(&8u16.to_ne_bytes());
        m.extend_from_slice(&IFLA_TARGET_NETNSID.to_ne_bytes());
        m.extend_from_slice(&id.to_ne_bytes());
    }
    nl_finish(&mut m);
    let reply = nl.request(&m)?;
    let len = u32::from_ne_bytes([reply[0], reply[1], reply[2], reply[3]]) as usize;
    let flags = reply
        .get(24..28)
        .map(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
        .unwrap_or(0);
    let body = reply.get(32..len.min(reply.len())).unwrap_or(&[]);
    let (mut name, mut xdp) = (String::new(), 0u8);
    attrs(body, |ty, p| match ty {
        IFLA_IFNAME => {
            let end = p.iter().position(|&b| b == 0).unwrap_or(p.len());
            name = String::from_utf8_lossy(&p[..end]).into_owned();
        }
        IFLA_XDP => attrs(p, |t, v| {
            if t == IFLA_XDP_ATTACHED {
                xdp = v.first().copied().unwrap_or(0);
            }
        }),
        _ => {}
    });
    Ok((name, flags & libc::IFF_UP as u32 != 0, xdp))
}

/// The id the calling thread's namespace gives the namespace of descriptor `fd`.
fn nsid_of(nl: &Netlink, fd: i32) -> io::Result<Option<i32>> {
    let mut m = Vec::with_capacity(32);
    nl_header(&mut m, RTM_GETNSID, libc::NLM_F_REQUEST as u16);
    m.extend_from_slice(&[libc::AF_UNSPEC as u8, 0, 0, 0]); // struct rtgenmsg, padded
    m.extend_from_slice(&8u16.to_ne_bytes());
    m.extend_from_slice(&NETNSA_FD.to_ne_bytes());
    m.extend_from_slice(&(fd as u32).to_ne_bytes());
    nl_finish(&mut m);
    let reply = nl.request(&m)?;
    let len = u32::from_ne_bytes([reply[0], reply[1], reply[2], reply[3]]) as usize;
    let body = reply.get(20..len.min(reply.len())).unwrap_or(&[]);
    let mut id = None;
    attrs(body, |ty, p| {
        if ty == NETNSA_NSID && p.len() >= 4 {
            id = Some(i32::from_ne_bytes([p[0], p[1], p[2], p[3]])).filter(|&i| i >= 0);
        }
    });
    Ok(id)
}

/// Whether GRO is on for interface `name` in the calling thread's namespace.
fn gro_on(name: &str) -> io::Result<bool> {
    let mut v = [0u8; 8]; // struct ethtool_value { cmd, data }
    v[..4].copy_from_slice(&ETHTOOL_GGRO.to_ne_bytes());
    ethtool(name, &mut v)?;
    Ok(u32::from_ne_bytes([v[4], v[5], v[6], v[7]]) != 0)
}

/// Whether GRO is on for interface `name` of the namespace whose id is `nsid`, looked for among
/// the named namespaces (`/run/netns`, as `ip netns add` makes them); None if not found.
fn gro_on_in(nl: &Netlink, name: &str, nsid: i32) -> Option<io::Result<bool>> {
    let dir = std::fs::read_dir(crate::sys::netns::NETNS_DIR).ok()?;
    for e in dir.flatten() {
        let Ok(f) = std::fs::File::open(e.path()) else {
            continue;
        };
        if nsid_of(nl, f.as_raw_fd()).ok().flatten() != Some(nsid) {
            continue;
        }
        // A thread of its own enters the namespace (setns changes the calling thread only).
        let path = e.path().display().to_string();
        return Some(crate::sys::netns::run_in_file(&f, &path, || gro_on(name)).and_then(|r| r));
    }
    None
}

/// Whether XDP frames redirected to interface `name` (in the calling thread's namespace) leave
/// it. A veth hands them to its peer's receive queue, which takes them only while the peer's
/// NAPI runs: the peer is up and has an XDP program or GRO on; otherwise the kernel discards
/// every frame (counted only as the veth's transmit drops). Other drivers are assumed to
/// transmit them.
pub fn redirect_target(name: &str) -> RedirectTarget {
    use RedirectTarget::*;
    match iface_driver(name) {
        Ok(d) if d == "veth" => {}
        Ok(d) => return Delivers(format!("{name} (driver {d}) transmits redirected frames")),
        Err(e) => return Unknown(format!("{name}: ethtool driver info: {e}")),
    }
    let check = || -> io::Result<RedirectTarget> {
        let ifindex = ifindex(name).map_err(|_| io::Error::from_raw_os_error(libc::ENODEV))?;
        let nl = Netlink::open()?;
        let (peer, nsid) = veth_peer(&nl, ifindex)?;
        let (pname, up, xdp) = link_in(&nl, peer, nsid)?;
        let where_ = if nsid.is_some() {
            " (in another network namespace)"
        } else {
            ""
        };
        if !up {
            return Ok(Discards(format!(
                "the veth peer of {name}, {pname}{where_}, is down"
            )));
        }
        if xdp != 0 {
            return Ok(Delivers(format!(
                "the veth peer of {name}, {pname}{where_}, has an XDP program"
            )));
        }
        let gro = match nsid {
            None => Some(gro_on(&pname)),
            Some(id) => gro_on_in(&nl, &pname, id),
        };
        Ok(match gro {
            Some(Ok(true)) => Delivers(format!(
                "the veth peer of {name}, {pname}{where_}, has GRO on (its NAPI takes XDP frames)"
            )),
            Some(Ok(false)) => Discards(format!(
                "the veth peer of {name}, {pname}{where_}, has neither an XDP program nor GRO \
                 on, so the kernel would discard every redirected frame (give the peer an XDP \
                 program or run `ethtool -K {pname} gro on` in its namespace)"
            )),
            Some(Err(e)) => Unknown(format!(
                "the veth peer of {name}, {pname}{where_}, has no XDP program and its GRO \
                 state cannot be read ({e})"
            )),
            None => Unknown(format!(
                "the veth peer of {name}, {pname}, has no XDP program and lives in a network \
                 namespace not named under /run/netns, so its GRO state cannot be read"
            )),
        })
    };
    check().unwrap_or_else(|e| Unknown(format!("{name}: its veth peer cannot be read: {e}")))
}

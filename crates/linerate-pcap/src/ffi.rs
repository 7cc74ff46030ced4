//! The C boundary, the crate's only unsafe code: the public `pcap_*` entry points a preloaded
//! library interposes, and the calls to the system's libpcap (found with
//! `dlsym(RTLD_NEXT, ...)`) for every name and handle that is not linerate's.
//!
//! A handle the program gets from `pcap_create("cluster:10@0")` is a real `pcap_t` of the
//! system's libpcap, made by `pcap_open_dead`: a function this library does not interpose
//! (`pcap_is_swapped`, `pcap_major_version`, `pcap_file`, ...) works on it as on any dead
//! handle, never on memory it does not know. The registry ([`crate::registry`]) says which
//! `pcap_t` addresses are ours; for those, every interposed function works on the
//! [`Handle`], and `pcap_compile` and the `pcap_dump_open` family go to a second dead
//! `pcap_t` made at activation with the port's link type, snap length and timestamp
//! precision, so that filters and `-w` files are libpcap's own.

use crate::handle::{code, Handle, Next, Packet, MAX_SNAPLEN, PRECISION_MICRO, PRECISION_NANO};
use crate::names;
use crate::registry::Registry;
use linerate::filter::Insn;
use linerate::port::RxWake;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Arc, OnceLock};

/// An opaque `pcap_t`.
type Pcap = *mut c_void;

/// libpcap's PCAP_ERRBUF_SIZE.
const ERRBUF_SIZE: usize = 256;

/// `struct pcap_pkthdr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct PktHdr {
    ts: libc::timeval,
    caplen: u32,
    len: u32,
}

/// `struct pcap_stat` (Linux).
#[repr(C)]
pub struct Stat {
    ps_recv: c_uint,
    ps_drop: c_uint,
    ps_ifdrop: c_uint,
}

/// `struct bpf_program`.
#[repr(C)]
pub struct BpfProgram {
    bf_len: c_uint,
    bf_insns: *const Insn,
}

/// `pcap_if_t`.
#[repr(C)]
pub struct PcapIf {
    next: *mut PcapIf,
    name: *mut c_char,
    description: *mut c_char,
    addresses: *mut c_void,
    flags: u32,
}

const PCAP_IF_LOOPBACK: u32 = 0x1;
const PCAP_IF_UP: u32 = 0x2;
const PCAP_IF_RUNNING: u32 = 0x4;
const PCAP_IF_CONNECTION_STATUS_NOT_APPLICABLE: u32 = 0x30;
const DLT_EN10MB: c_int = 1;
const DLT_RAW: c_int = 12;
const LINKTYPE_RAW: u32 = 101;
const PCAP_ERROR_RFMON_NOTSUP: c_int = -6;

/// `pcap_handler`.
type Handler = Option<unsafe extern "C" fn(*mut u8, *const PktHdr, *const u8)>;

/// What the library keeps per handle.
struct Entry {
    h: Handle,
    /// The dead `pcap_t` the program holds (the registry's key).
    outer: Pcap,
    /// The dead `pcap_t` with the port's link type, made at activation.
    inner: Pcap,
    /// `pcap_geterr`'s text, NUL-terminated.
    errbuf: Vec<u8>,
    /// The header `pcap_next_ex` points to (valid until the next call).
    hdr: PktHdr,
    /// A timerfd given as the selectable descriptor of ports without one (cluster queues).
    timerfd: c_int,
    /// Monitor mode was asked for (refused at activation).
    rfmon: bool,
}

impl Entry {
    /// Copies the handle's error text to the buffer `pcap_geterr` returns, cut as libpcap's
    /// is to PCAP_ERRBUF_SIZE with its NUL: programs copy it into buffers of that size
    /// (a 5000-byte device name makes a 5000-byte message).
    fn sync_err(&mut self) {
        let mut b: Vec<u8> = self.h.err.bytes().filter(|&c| c != 0).collect();
        b.truncate(ERRBUF_SIZE - 1);
        b.push(0);
        self.errbuf = b;
    }

    fn fail(&mut self, text: String, rc: c_int) -> c_int {
        self.h.err = text;
        self.sync_err();
        rc
    }
}

static REG: Registry<Entry> = Registry::new();

/// Per registry slot: what ends the sleep of the handle's reader (a cluster queue's futex), for
/// `pcap_breakloop` from another thread; null when the port has none. Set at activation, taken
/// at `pcap_close` (libpcap's contract: no `pcap_breakloop` on a handle being closed).
static WAKERS: [AtomicPtr<Arc<dyn RxWake>>; crate::registry::SLOTS] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; crate::registry::SLOTS];

/// The next definition of a libpcap function (the system's), once looked up.
macro_rules! real {
    ($name:ident : fn($($a:ty),*) -> $r:ty) => {{
        static F: OnceLock<usize> = OnceLock::new();
        let p = *F.get_or_init(|| {
            let s = concat!(stringify!($name), "\0");
            // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated name only looks a symbol up.
            unsafe { libc::dlsym(libc::RTLD_NEXT, s.as_ptr().cast()) as usize }
        });
        if p == 0 {
            None
        } else {
            // SAFETY: the symbol is libpcap's function of that name, whose C signature
            // (pcap/pcap.h) is the one written here.
            Some(unsafe { std::mem::transmute::<usize, unsafe extern "C" fn($($a),*) -> $r>(p) })
        }
    }};
}

/// Writes `text` into a caller's PCAP_ERRBUF_SIZE buffer (truncated, NUL-terminated).
fn put_errbuf(errbuf: *mut c_char, text: &str) {
    if errbuf.is_null() {
        return;
    }
    let b = text.as_bytes();
    let n = b.len().min(ERRBUF_SIZE - 1);
    // SAFETY: libpcap's contract: an errbuf argument holds PCAP_ERRBUF_SIZE bytes; we write
    // at most that many.
    unsafe {
        std::ptr::copy_nonoverlapping(b.as_ptr(), errbuf.cast::<u8>(), n);
        *errbuf.add(n) = 0;
    }
}

/// The bytes of a C string (empty for NULL).
fn cstr<'a>(s: *const c_char) -> &'a [u8] {
    if s.is_null() {
        return b"";
    }
    // SAFETY: the caller passes a NUL-terminated string, as libpcap's API requires, that
    // lives for the call.
    unsafe { CStr::from_ptr(s) }.to_bytes()
}

/// Our entry for `p`, if `p` is one of our handles.
#[inline]
fn ours(p: Pcap) -> Option<&'static mut Entry> {
    let e = REG.get(p as usize)?;
    // SAFETY: the registry holds only pointers from Box::into_raw of live entries, removed
    // before they are freed (pcap_close). libpcap's contract: a pcap_t is used by one thread
    // at a time, so no other &mut to this entry is alive; our loops drop theirs before every
    // callback into the program (which may call pcap_* on the same handle).
    Some(unsafe { &mut *e })
}

/// libpcap's DLT for a LINKTYPE (they differ only for raw IP).
fn dlt_of(linktype: u32) -> c_int {
    if linktype == LINKTYPE_RAW {
        DLT_RAW
    } else {
        linktype as c_int
    }
}

/// Runs a BPF program with libpcap's own interpreter: what it returned (0: reject; else the
/// bytes to keep at most).
fn run_bpf(insns: &[Insn], pkt: &[u8], wire: u32) -> u32 {
    let Some(f) = real!(bpf_filter: fn(*const Insn, *const u8, c_uint, c_uint) -> c_uint) else {
        return u32::MAX;
    };
    // SAFETY: `insns` is a program bpf_validate accepted (set_filter), `pkt` holds
    // `pkt.len()` readable bytes: bpf_filter reads only inside them.
    unsafe { f(insns.as_ptr(), pkt.as_ptr(), wire, pkt.len() as c_uint) }
}

// ---------------------------------------------------------------------------------------------
// Opening and closing.

/// `pcap_create`: a linerate handle for a linerate name, libpcap's otherwise.
///
/// # Safety
/// libpcap's contract: `source` a C string, `errbuf` PCAP_ERRBUF_SIZE bytes.
#[no_mangle]
pub unsafe extern "C" fn pcap_create(source: *const c_char, errbuf: *mut c_char) -> Pcap {
    let name = cstr(source);
    if !names::owns_bytes(name) {
        let Some(f) = real!(pcap_create: fn(*const c_char, *mut c_char) -> Pcap) else {
            put_errbuf(
                errbuf,
                "liblinerate_pcap: the system's libpcap is not loaded",
            );
            return std::ptr::null_mut();
        };
        // SAFETY: the caller's arguments, as it gave them.
        return unsafe { f(source, errbuf) };
    }
    let name = String::from_utf8_lossy(name).into_owned();
    create_ours(&name, errbuf)
}

fn create_ours(name: &str, errbuf: *mut c_char) -> Pcap {
    let Some(dead) = real!(pcap_open_dead: fn(c_int, c_int) -> Pcap) else {
        put_errbuf(
            errbuf,
            "liblinerate_pcap: the system's libpcap is not loaded",
        );
        return std::ptr::null_mut();
    };
    // SAFETY: plain values.
    let outer = unsafe { dead(DLT_EN10MB, MAX_SNAPLEN as c_int) };
    if outer.is_null() {
        put_errbuf(errbuf, &format!("{name}: out of memory"));
        return std::ptr::null_mut();
    }
    let e = Box::new(Entry {
        h: Handle::new(name),
        outer,
        inner: std::ptr::null_mut(),
        errbuf: vec![0],
        hdr: PktHdr {
            ts: libc::timeval {
                tv_sec: 0,
                tv_usec: 0,
            },
            caplen: 0,
            len: 0,
        },
        timerfd: -1,
        rfmon: false,
    });
    let raw = Box::into_raw(e);
    if let Err(why) = REG.insert(outer as usize, raw) {
        // SAFETY: `raw` came from Box::into_raw just above and was not registered.
        drop(unsafe { Box::from_raw(raw) });
        close_real(outer);
        put_errbuf(
            errbuf,
            &format!("{name}: cannot open another capture ({why:?})"),
        );
        return std::ptr::null_mut();
    }
    outer
}

fn close_real(p: Pcap) {
    if p.is_null() {
        return;
    }
    if let Some(f) = real!(pcap_close: fn(Pcap) -> ()) {
        // SAFETY: `p` is a pcap_t the system's libpcap made and nobody uses any more.
        unsafe { f(p) }
    }
}

/// `pcap_activate`.
///
/// # Safety
/// `p` a handle from pcap_create.
#[no_mangle]
pub unsafe extern "C" fn pcap_activate(p: Pcap) -> c_int {
    let Some(e) = ours(p) else {
        let Some(f) = real!(pcap_activate: fn(Pcap) -> c_int) else {
            return code::ERROR;
        };
        // SAFETY: not ours: libpcap's own handle.
        return unsafe { f(p) };
    };
    if e.rfmon {
        return e.fail(
            format!("{}: linerate ports have no monitor mode", e.h.device),
            PCAP_ERROR_RFMON_NOTSUP,
        );
    }
    let rc = e.h.activate();
    if rc != 0 {
        e.sync_err();
        return rc;
    }
    let Some(dead) = real!(pcap_open_dead_with_tstamp_precision: fn(c_int, c_int, c_uint) -> Pcap)
    else {
        return e.fail("the system's libpcap is not loaded".into(), code::ERROR);
    };
    let prec = if e.h.settings.precision == PRECISION_NANO {
        1
    } else {
        0
    };
    // SAFETY: plain values.
    let inner = unsafe { dead(dlt_of(e.h.linktype), e.h.snaplen() as c_int, prec) };
    if inner.is_null() {
        return e.fail(format!("{}: out of memory", e.h.device), code::ERROR);
    }
    e.inner = inner;
    if let (Some(w), Some(slot)) = (e.h.rx_waker(), REG.slot(p as usize)) {
        let old = WAKERS[slot].swap(Box::into_raw(Box::new(w)), Ordering::AcqRel);
        if !old.is_null() {
            // SAFETY: from Box::into_raw below or here, taken out of the table just now.
            drop(unsafe { Box::from_raw(old) });
        }
    }
    0
}

/// `pcap_open_live`.
///
/// # Safety
/// libpcap's contract.
#[no_mangle]
pub unsafe extern "C" fn pcap_open_live(
    device: *const c_char,
    snaplen: c_int,
    promisc: c_int,
    to_ms: c_int,
    errbuf: *mut c_char,
) -> Pcap {
    let name = cstr(device);
    if !names::owns_bytes(name) {
        let Some(f) =
            real!(pcap_open_live: fn(*const c_char, c_int, c_int, c_int, *mut c_char) -> Pcap)
        else {
            put_errbuf(
                errbuf,
                "liblinerate_pcap: the system's libpcap is not loaded",
            );
            return std::ptr::null_mut();
        };
        // SAFETY: the caller's arguments.
        return unsafe { f(device, snaplen, promisc, to_ms, errbuf) };
    }
    let name = String::from_utf8_lossy(name).into_owned();
    let p = create_ours(&name, errbuf);
    let Some(e) = ours(p) else {
        return std::ptr::null_mut();
    };
    e.h.settings.snaplen = if snaplen <= 0 {
        MAX_SNAPLEN
    } else {
        (snaplen as u32).min(MAX_SNAPLEN)
    };
    e.h.settings.promisc = promisc != 0;
    e.h.settings.timeout_ms = to_ms.max(0) as u32;
    // SAFETY: `p` is ours, just made.
    let rc = unsafe { pcap_activate(p) };
    if rc < 0 {
        let text = e.h.err.clone();
        put_errbuf(errbuf, &text);
        // SAFETY: `p` is ours and not used after.
        unsafe { pcap_close(p) };
        return std::ptr::null_mut();
    }
    p
}

/// `pcap_close`.
///
/// # Safety
/// `p` a handle not used after.
#[no_mangle]
pub unsafe extern "C" fn pcap_close(p: Pcap) {
    if let Some(slot) = REG.slot(p as usize) {
        let w = WAKERS[slot].swap(std::ptr::null_mut(), Ordering::AcqRel);
        if !w.is_null() {
            // SAFETY: from Box::into_raw in pcap_activate, taken out of the table just now.
            drop(unsafe { Box::from_raw(w) });
        }
    }
    let Some(raw) = REG.remove(p as usize) else {
        close_real(p);
        return;
    };
    // SAFETY: the registry gave the pointer back once, from Box::into_raw; nobody else holds it.
    let e = unsafe { Box::from_raw(raw) };
    if e.timerfd >= 0 {
        // SAFETY: our own descriptor.
        unsafe { libc::close(e.timerfd) };
    }
    close_real(e.inner);
    close_real(e.outer);
    drop(e); // closes the port: a cluster queue is given back
}

// ---------------------------------------------------------------------------------------------
// Settings before activation.

macro_rules! setter {
    ($name:ident, |$e:ident, $v:ident| $body:expr) => {
        /// libpcap's function of this name; on a linerate handle, before activation only.
        ///
        /// # Safety
        /// libpcap's contract.
        #[no_mangle]
        pub unsafe extern "C" fn $name(p: Pcap, $v: c_int) -> c_int {
            let Some($e) = ours(p) else {
                let Some(f) = real!($name: fn(Pcap, c_int) -> c_int) else {
                    return code::ERROR;
                };
                // SAFETY: not ours: libpcap's own handle.
                return unsafe { f(p, $v) };
            };
            if $e.h.activated {
                return $e.fail(
                    format!("{}: the capture is already active", $e.h.device),
                    code::ACTIVATED,
                );
            }
            $body
        }
    };
}

setter!(pcap_set_snaplen, |e, v| {
    e.h.settings.snaplen = if v <= 0 {
        MAX_SNAPLEN
    } else {
        (v as u32).min(MAX_SNAPLEN)
    };
    0
});
setter!(pcap_set_promisc, |e, v| {
    e.h.settings.promisc = v != 0;
    0
});
setter!(pcap_set_timeout, |e, v| {
    e.h.settings.timeout_ms = v.max(0) as u32;
    0
});
setter!(pcap_set_immediate_mode, |e, v| {
    e.h.settings.immediate = v != 0;
    0
});
setter!(pcap_set_buffer_size, |e, v| {
    e.h.settings.buffer_size = v.max(0) as u32;
    0
});
setter!(pcap_set_rfmon, |e, v| {
    e.rfmon = v != 0;
    0
});
setter!(pcap_set_tstamp_type, |e, v| {
    // PCAP_TSTAMP_HOST (0) and its variants: linerate's ports stamp on the host.
    let _ = e;
    if (0..=2).contains(&v) {
        0
    } else {
        3 // PCAP_WARNING_TSTAMP_TYPE_NOTSUP
    }
});
setter!(pcap_set_tstamp_precision, |e, v| {
    match v {
        PRECISION_MICRO | PRECISION_NANO => {
            e.h.settings.precision = v;
            0
        }
        _ => e.fail(
            format!("{}: no timestamp precision {v}", e.h.device),
            -12, // PCAP_ERROR_TSTAMP_PRECISION_NOTSUP
        ),
    }
});
setter!(pcap_set_protocol_linux, |e, v| {
    let _ = (e, v);
    0
});

/// `pcap_can_set_rfmon`.
///
/// # Safety
/// libpcap's contract.
#[no_mangle]
pub unsafe extern "C" fn pcap_can_set_rfmon(p: Pcap) -> c_int {
    if ours(p).is_some() {
        return 0;
    }
    let Some(f) = real!(pcap_can_set_rfmon: fn(Pcap) -> c_int) else {
        return code::ERROR;
    };
    // SAFETY: not ours.
    unsafe { f(p) }
}

/// Defines an interposed function of one `pcap_t` returning a C int.
macro_rules! getter {
    ($name:ident, |$e:ident| $body:expr) => {
        /// libpcap's function of this name, answered for a linerate handle.
        ///
        /// # Safety
        /// libpcap's contract.
        #[no_mangle]
        pub unsafe extern "C" fn $name(p: Pcap) -> c_int {
            let Some($e) = ours(p) else {
                let Some(f) = real!($name: fn(Pcap) -> c_int) else {
                    return code::ERROR;
                };
                // SAFETY: not ours: libpcap's own handle.
                return unsafe { f(p) };
            };
            $body
        }
    };
}

fn not_active(e: &mut Entry) -> c_int {
    let text = format!("{}: the capture is not active yet", e.h.device);
    e.fail(text, code::NOT_ACTIVATED)
}

getter!(pcap_datalink, |e| {
    if !e.h.activated {
        return not_active(e);
    }
    dlt_of(e.h.linktype)
});
getter!(pcap_datalink_ext, |e| {
    if !e.h.activated {
        return not_active(e);
    }
    dlt_of(e.h.linktype)
});
getter!(pcap_snapshot, |e| {
    if !e.h.activated {
        return not_active(e);
    }
    e.h.snaplen() as c_int
});
getter!(pcap_bufsize, |e| {
    if !e.h.activated {
        return not_active(e);
    }
    e.h.snaplen() as c_int
});
getter!(pcap_get_tstamp_precision, |e| e.h.settings.precision);
getter!(pcap_get_selectable_fd, |e| selectable_fd(e));
getter!(pcap_fileno, |e| selectable_fd(e));

/// The descriptor poll/select wake on when packets wait: the port's socket (afpacket, xdp), or a
/// timerfd that fires every millisecond (cluster queues, which have no descriptor): a wake-up
/// finds the queue's packets, and the read that finds none clears it.
fn selectable_fd(e: &mut Entry) -> c_int {
    if !e.h.activated {
        return -1;
    }
    if let Some(fd) = e.h.poll_fd() {
        return fd;
    }
    if e.timerfd >= 0 {
        return e.timerfd;
    }
    // SAFETY: plain values.
    let fd = unsafe {
        libc::timerfd_create(
            libc::CLOCK_MONOTONIC,
            libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
        )
    };
    if fd < 0 {
        return -1;
    }
    let period = libc::timespec {
        tv_sec: 0,
        tv_nsec: 1_000_000,
    };
    let spec = libc::itimerspec {
        it_interval: period,
        it_value: period,
    };
    // SAFETY: `fd` is our timerfd, `spec` a valid itimerspec.
    if unsafe { libc::timerfd_settime(fd, 0, &spec, std::ptr::null_mut()) } < 0 {
        // SAFETY: our descriptor.
        unsafe { libc::close(fd) };
        return -1;
    }
    e.timerfd = fd;
    fd
}

/// Clears the timerfd's expirations once a read found nothing (so select stops waking).
fn drain_timer(e: &Entry) {
    if e.timerfd < 0 {
        return;
    }
    let mut v = 0u64;
    // SAFETY: reading 8 bytes from our nonblocking timerfd into a u64.
    unsafe { libc::read(e.timerfd, (&mut v as *mut u64).cast(), 8) };
}

/// `pcap_get_required_select_timeout`: none needed (the selectable descriptor wakes).
///
/// # Safety
/// libpcap's contract.
#[no_mangle]
pub unsafe extern "C" fn pcap_get_required_select_timeout(p: Pcap) -> *const libc::timeval {
    if ours(p).is_some() {
        return std::ptr::null();
    }
    let Some(f) = real!(pcap_get_required_select_timeout: fn(Pcap) -> *const libc::timeval) else {
        return std::ptr::null();
    };
    // SAFETY: not ours.
    unsafe { f(p) }
}

/// `pcap_setnonblock`.
///
/// # Safety
/// libpcap's contract.
#[no_mangle]
pub unsafe extern "C" fn pcap_setnonblock(p: Pcap, nb: c_int, errbuf: *mut c_char) -> c_int {
    let Some(e) = ours(p) else {
        let Some(f) = real!(pcap_setnonblock: fn(Pcap, c_int, *mut c_char) -> c_int) else {
            return code::ERROR;
        };
        // SAFETY: not ours.
        return unsafe { f(p, nb, errbuf) };
    };
    e.h.nonblock = nb != 0;
    0
}

/// `pcap_getnonblock`.
///
/// # Safety
/// libpcap's contract.
#[no_mangle]
pub unsafe extern "C" fn pcap_getnonblock(p: Pcap, errbuf: *mut c_char) -> c_int {
    let Some(e) = ours(p) else {
        let Some(f) = real!(pcap_getnonblock: fn(Pcap, *mut c_char) -> c_int) else {
            return code::ERROR;
        };
        // SAFETY: not ours.
        return unsafe { f(p, errbuf) };
    };
    c_int::from(e.h.nonblock)
}

/// `pcap_setdirection`.
///
/// # Safety
/// libpcap's contract.
#[no_mangle]
pub unsafe extern "C" fn pcap_setdirection(p: Pcap, dir: c_int) -> c_int {
    let Some(e) = ours(p) else {
        let Some(f) = real!(pcap_setdirection: fn(Pcap, c_int) -> c_int) else {
            return code::ERROR;
        };
        // SAFETY: not ours.
        return unsafe { f(p, dir) };
    };
    let rc = e.h.set_direction(dir);
    e.sync_err();
    rc
}

/// `pcap_list_datalinks`: the port's one link type.
///
/// # Safety
/// libpcap's contract.
#[no_mangle]
pub unsafe extern "C" fn pcap_list_datalinks(p: Pcap, list: *mut *mut c_int) -> c_int {
    let Some(e) = ours(p) else {
        let Some(f) = real!(pcap_list_datalinks: fn(Pcap, *mut *mut c_int) -> c_int) else {
            return code::ERROR;
        };
        // SAFETY: not ours.
        return unsafe { f(p, list) };
    };
    if !e.h.activated {
        return not_active(e);
    }
    if list.is_null() {
        return e.fail("pcap_list_datalinks: no list pointer".into(), code::ERROR);
    }
    // SAFETY: malloc of one int, freed by pcap_free_datalinks (free).
    let one = unsafe { libc::malloc(std::mem::size_of::<c_int>()) }.cast::<c_int>();
    if one.is_null() {
        return e.fail("out of memory".into(), code::ERROR);
    }
    // SAFETY: `one` holds an int; `list` is the caller's pointer to fill.
    unsafe {
        *one = dlt_of(e.h.linktype);
        *list = one;
    }
    1
}

/// `pcap_set_datalink`: only the port's own.
///
/// # Safety
/// libpcap's contract.
#[no_mangle]
pub unsafe extern "C" fn pcap_set_datalink(p: Pcap, dlt: c_int) -> c_int {
    let Some(e) = ours(p) else {
        let Some(f) = real!(pcap_set_datalink: fn(Pcap, c_int) -> c_int) else {
            return code::ERROR;
        };
        // SAFETY: not ours.
        return unsafe { f(p, dlt) };
    };
    if !e.h.activated {
        return not_active(e);
    }
    if dlt == dlt_of(e.h.linktype) {
        return 0;
    }
    let text = format!(
        "{}: the port gives link type {} only, not {dlt}",
        e.h.device,
        dlt_of(e.h.linktype)
    );
    e.fail(text, code::ERROR)
}

// ---------------------------------------------------------------------------------------------
// Errors.

/// `pcap_geterr`.
///
/// # Safety
/// libpcap's contract.
#[no_mangle]
pub unsafe extern "C" fn pcap_geterr(p: Pcap) -> *mut c_char {
    let Some(e) = ours(p) else {
        let Some(f) = real!(pcap_geterr: fn(Pcap) -> *mut c_char) else {
            return c"liblinerate_pcap: the system's libpcap is not loaded"
                .as_ptr()
                .cast_mut();
        };
        // SAFETY: not ours.
        return unsafe { f(p) };
    };
    e.sync_err();
    e.errbuf.as_mut_ptr().cast()
}

/// `pcap_perror`.
///
/// # Safety
/// libpcap's contract.
#[no_mangle]
pub unsafe extern "C" fn pcap_perror(p: Pcap, prefix: *const c_char) {
    let Some(e) = ours(p) else {
        if let Some(f) = real!(pcap_perror: fn(Pcap, *const c_char) -> ()) {
            // SAFETY: not ours.
            unsafe { f(p, prefix) }
        }
        return;
    };
    eprintln!("{}: {}", String::from_utf8_lossy(cstr(prefix)), e.h.err);
}

// ---------------------------------------------------------------------------------------------
// Filters and savefiles, through the dead pcap_t of the port's link type.

/// Copies the error of the inner dead handle to ours.
fn inner_err(e: &mut Entry) {
    if let Some(f) = real!(pcap_geterr: fn(Pcap) -> *mut c_char) {
        // SAFETY: `inner` is a live dead pcap_t of ours.
        let s = unsafe { f(e.inner) };
        e.h.err = String::from_utf8_lossy(cstr(s)).into_owned();
        e.sync_err();
    }
}

/// `pcap_compile`: libpcap's compiler, for the port's link type and snap length.
///
/// # Safety
/// libpcap's contract.
#[no_mangle]
pub unsafe extern "C" fn pcap_compile(
    p: Pcap,
    prog: *mut BpfProgram,
    text: *const c_char,
    optimize: c_int,
    netmask: u32,
) -> c_int {
    let f = real!(pcap_compile: fn(Pcap, *mut BpfProgram, *const c_char, c_int, u32) -> c_int);
    let Some(f) = f else {
        return code::ERROR;
    };
    let Some(e) = ours(p) else {
        // SAFETY: not ours.
        return unsafe { f(p, prog, text, optimize, netmask) };
    };
    if e.inner.is_null() {
        return not_active(e);
    }
    // SAFETY: the caller's arguments, on our live dead pcap_t.
    let rc = unsafe { f(e.inner, prog, text, optimize, netmask) };
    if rc < 0 {
        inner_err(e);
    }
    rc
}

/// `pcap_setfilter`: the program runs on every frame, in libpcap's `bpf_filter`, with the
/// length on the wire.
///
/// # Safety
/// libpcap's contract.
#[no_mangle]
pub unsafe extern "C" fn pcap_setfilter(p: Pcap, prog: *mut BpfProgram) -> c_int {
    let Some(e) = ours(p) else {
        let Some(f) = real!(pcap_setfilter: fn(Pcap, *mut BpfProgram) -> c_int) else {
            return code::ERROR;
        };
        // SAFETY: not ours.
        return unsafe { f(p, prog) };
    };
    if !e.h.activated {
        return not_active(e);
    }
    if prog.is_null() {
        return e.fail("pcap_setfilter: no program".into(), code::ERROR);
    }
    // SAFETY: a bpf_program the caller owns (from pcap_compile), read for the call.
    let (len, ptr) = unsafe { ((*prog).bf_len as usize, (*prog).bf_insns) };
    if len == 0 || ptr.is_null() || len > 4096 {
        return e.fail(
            format!(
                "{}: pcap_setfilter: an empty or oversized program",
                e.h.device
            ),
            code::ERROR,
        );
    }
    // SAFETY: bf_insns holds bf_len instructions (struct bpf_insn has Insn's layout); copied
    // now, since the program may free it after this call.
    let insns = unsafe { std::slice::from_raw_parts(ptr, len) }.to_vec();
    if let Some(v) = real!(bpf_validate: fn(*const Insn, c_int) -> c_int) {
        // SAFETY: our copy of `len` instructions.
        if unsafe { v(insns.as_ptr(), len as c_int) } == 0 {
            return e.fail(
                format!("{}: the filter program is not valid BPF", e.h.device),
                code::ERROR,
            );
        }
    }
    e.h.set_filter(insns, run_bpf);
    0
}

macro_rules! dump_open {
    ($name:ident, $arg:ty) => {
        /// libpcap's function of this name, on the dead pcap_t with the port's link type.
        ///
        /// # Safety
        /// libpcap's contract.
        #[no_mangle]
        pub unsafe extern "C" fn $name(p: Pcap, what: $arg) -> *mut c_void {
            let Some(f) = real!($name: fn(Pcap, $arg) -> *mut c_void) else {
                return std::ptr::null_mut();
            };
            let Some(e) = ours(p) else {
                // SAFETY: not ours.
                return unsafe { f(p, what) };
            };
            if e.inner.is_null() {
                not_active(e);
                return std::ptr::null_mut();
            }
            // SAFETY: the caller's argument, on our live dead pcap_t.
            let d = unsafe { f(e.inner, what) };
            if d.is_null() {
                inner_err(e);
            }
            d
        }
    };
}

dump_open!(pcap_dump_open, *const c_char);
dump_open!(pcap_dump_open_append, *const c_char);
dump_open!(pcap_dump_fopen, *mut libc::FILE);

// ---------------------------------------------------------------------------------------------
// Reading.

/// Asks the CPU to bring the cache line at `p` in for reading (a hint: never faults, no effect
/// where unsupported). For [`Handle::next`]: the first line of each packet of a new batch.
#[inline(always)]
pub(crate) fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 is a hint: it never faults, whatever the address, and reads nothing
    // into a register nor writes anything (SSE, part of every x86_64 CPU).
    unsafe {
        std::arch::asm!("prefetcht0 [{0}]", in(reg) p, options(nostack, preserves_flags, readonly));
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

fn header(pk: &Packet) -> PktHdr {
    PktHdr {
        ts: libc::timeval {
            tv_sec: pk.sec as libc::time_t,
            tv_usec: pk.frac as libc::suseconds_t,
        },
        caplen: pk.caplen,
        len: pk.len,
    }
}

/// PCAP_ERROR_NOT_ACTIVATED when `p` is ours and not activated (libpcap's reads on a handle
/// from pcap_create before pcap_activate), with the reason in `pcap_geterr`.
fn unactivated(p: Pcap) -> Option<c_int> {
    let e = ours(p)?;
    (!e.h.activated).then(|| not_active(e))
}

/// One read on our handle, entry `ep` (looked up once per `pcap_loop`/`pcap_dispatch` call, not
/// per packet), slot `slot` of the registry: the &mut to the entry lives only for this call,
/// never across a callback.
#[inline(always)]
fn read_one(ep: *mut Entry, slot: usize, wait: bool, forever: bool) -> Next {
    // SAFETY: as below; this &mut ends with the statement.
    if let Some(pk) = unsafe { &mut *ep }.h.ready() {
        // A packet of the batch in hand that needs nothing more: the per-packet path, inlined.
        return Next::Packet(pk);
    }
    read_more(ep, slot, wait, forever)
}

/// [`read_one`]'s path for the rest: a packet to filter or stamp, or the next batch.
#[inline(never)]
fn read_more(ep: *mut Entry, slot: usize, wait: bool, forever: bool) -> Next {
    // SAFETY: `ep` is the registry's pointer for the handle being read, looked up at the start
    // of this pcap_loop/pcap_dispatch call; libpcap's contract forbids closing a handle while a
    // loop on it runs, so it is still live, and (as in `ours`) no other &mut to it is alive:
    // the loops call back into the program only between reads.
    let e = unsafe { &mut *ep };
    let r = e.h.next(wait, forever, &mut || REG.take_break(slot));
    match &r {
        Next::Nothing => drain_timer(e),
        Next::Error => e.sync_err(),
        _ => {}
    }
    r
}

/// `pcap_loop`: packets until `cnt` (≤ 0: for ever), a break (-2), the end of the source (0,
/// as at the end of a savefile: tcpdump prints its summary and exits 0) or an error (-1).
///
/// # Safety
/// libpcap's contract.
#[no_mangle]
pub unsafe extern "C" fn pcap_loop(p: Pcap, cnt: c_int, cb: Handler, user: *mut u8) -> c_int {
    let Some(slot) = REG.slot(p as usize) else {
        let Some(f) = real!(pcap_loop: fn(Pcap, c_int, Handler, *mut u8) -> c_int) else {
            return code::ERROR;
        };
        // SAFETY: not ours.
        return unsafe { f(p, cnt, cb, user) };
    };
    if let Some(rc) = unactivated(p) {
        return rc;
    }
    let Some(ep) = REG.get(p as usize) else {
        return code::ERROR;
    };
    // Without a handler the packets are read and dropped (libpcap would crash): a handler that
    // does nothing, so that the loop calls one without a test a packet.
    let cb = cb.unwrap_or(no_handler);
    // Packets left to hand over (`cnt` ≤ 0: for ever, never counted).
    let mut left = cnt;
    loop {
        // The per-packet path first, straight to the handler (no `Next` in between: the header
        // is built from the packet's registers); the rest through `read_more`.
        // SAFETY: as in `read_more`; this &mut ends with the statement.
        let pk = match unsafe { &mut *ep }.h.ready() {
            Some(pk) => pk,
            None => match read_more(ep, slot, true, true) {
                Next::Packet(pk) => pk,
                Next::Nothing => continue,
                Next::Break => return code::BREAK,
                Next::End => return 0,
                Next::Error => return code::ERROR,
            },
        };
        let h = header(&pk);
        // SAFETY: the program's handler, called as libpcap does: the header and the packet's
        // captured bytes stay valid until it returns.
        unsafe { cb(user, &h, pk.data) };
        // A pcap_breakloop from the handler (or a signal) stops the loop after this packet,
        // as libpcap's does, not at the end of the batch.
        if REG.take_break(slot) {
            return code::BREAK;
        }
        if cnt > 0 {
            left -= 1;
            if left == 0 {
                return 0;
            }
        }
    }
}

/// The handler of a loop called without one: the packet is dropped.
unsafe extern "C" fn no_handler(_: *mut u8, _: *const PktHdr, _: *const u8) {}

/// How long `pcap_dispatch` keeps answering "nothing yet" (0) after the source ended, before it
/// reports the end: dumpcap with two or more interfaces reads each in a thread and writes
/// from a queue in another, and on the first negative return it stops and counts what is
/// still queued as dropped; the quiet lets its writer catch up first.
const END_QUIET: std::time::Duration = std::time::Duration::from_millis(500);

/// `pcap_dispatch`: waits (unless nonblocking) up to the timeout for a packet, then hands over
/// what is there, at most `cnt` (≤ 0: a batch). When the source ended it returns 0 ("nothing
/// yet", sleeping 1 ms when blocking) for `END_QUIET`, then -2 once (PCAP_ERROR_BREAK, as after
/// `pcap_breakloop`), then -1 on every later call, both with the reason in `pcap_geterr`. A
/// live capture never ends in libpcap, so no return means "end": the -2 stops a program that
/// leaves its loop on any negative return (dumpcap, argus) as `pcap_breakloop` does, quietly;
/// the -1 stops one that leaves only on an error (softflowd), which would otherwise call it
/// for ever.
///
/// # Safety
/// libpcap's contract.
#[no_mangle]
pub unsafe extern "C" fn pcap_dispatch(p: Pcap, cnt: c_int, cb: Handler, user: *mut u8) -> c_int {
    let Some(slot) = REG.slot(p as usize) else {
        let Some(f) = real!(pcap_dispatch: fn(Pcap, c_int, Handler, *mut u8) -> c_int) else {
            return code::ERROR;
        };
        // SAFETY: not ours.
        return unsafe { f(p, cnt, cb, user) };
    };
    if let Some(rc) = unactivated(p) {
        return rc;
    }
    let limit = if cnt <= 0 {
        linerate::mem::BATCH as c_int
    } else {
        cnt
    };
    let Some(ep) = REG.get(p as usize) else {
        return code::ERROR;
    };
    let wait = ours(p).is_some_and(|e| !e.h.nonblock);
    let mut n: c_int = 0;
    while n < limit {
        match read_one(ep, slot, wait && n == 0, false) {
            Next::Packet(pk) => {
                let h = header(&pk);
                if let Some(cb) = cb {
                    // SAFETY: as in pcap_loop.
                    unsafe { cb(user, &h, pk.data) };
                }
                n += 1;
                if REG.take_break(slot) {
                    return code::BREAK;
                }
            }
            Next::Nothing => break,
            Next::Break => return code::BREAK,
            Next::End => {
                if n > 0 {
                    break;
                }
                let Some(e) = ours(p) else {
                    return code::ERROR;
                };
                let first = *e.h.end_at.get_or_insert_with(std::time::Instant::now);
                if first.elapsed() < END_QUIET {
                    drain_timer(e);
                    if wait {
                        std::thread::sleep(std::time::Duration::from_millis(1));
                    }
                    return 0;
                }
                e.h.end_seen = e.h.end_seen.saturating_add(1);
                let note = e.h.end_note();
                // First as if pcap_breakloop was called: dumpcap stops quietly (a -1 would be
                // "Error while capturing packets ... please report this bug"). A program
                // still calling after that leaves only on an error: -1.
                let rc = if e.h.end_seen == 1 {
                    code::BREAK
                } else {
                    code::ERROR
                };
                return e.fail(note, rc);
            }
            Next::Error => return code::ERROR,
        }
    }
    n
}

/// `pcap_next_ex`: 1 and a packet (valid until the next call), 0 when the timeout passed or
/// nothing waits (nonblocking), -2 at the end of the source (as at the end of a savefile), -1
/// on error.
///
/// # Safety
/// libpcap's contract.
#[no_mangle]
pub unsafe extern "C" fn pcap_next_ex(
    p: Pcap,
    hdr: *mut *const PktHdr,
    data: *mut *const u8,
) -> c_int {
    let Some(slot) = REG.slot(p as usize) else {
        let Some(f) = real!(pcap_next_ex: fn(Pcap, *mut *const PktHdr, *mut *const u8) -> c_int)
        else {
            return code::ERROR;
        };
        // SAFETY: not ours.
        return unsafe { f(p, hdr, data) };
    };
    if let Some(rc) = unactivated(p) {
        return rc;
    }
    let Some(ep) = REG.get(p as usize) else {
        return code::ERROR;
    };
    let wait = ours(p).is_some_and(|e| !e.h.nonblock);
    match read_one(ep, slot, wait, false) {
        Next::Packet(pk) => {
            let Some(e) = ours(p) else {
                return code::ERROR;
            };
            e.hdr = header(&pk);
            if !hdr.is_null() {
                // SAFETY: the caller's out-pointer; our header lives until the next call.
                unsafe { *hdr = &e.hdr };
            }
            if !data.is_null() {
                // SAFETY: the caller's out-pointer; the packet stays in its frame until the
                // next read on this handle.
                unsafe { *data = pk.data };
            }
            1
        }
        Next::Nothing => 0,
        Next::Break => code::BREAK,
        Next::End => {
            if let Some(e) = ours(p) {
                let note = e.h.end_note();
                e.fail(note, code::BREAK);
            }
            code::BREAK
        }
        Next::Error => code::ERROR,
    }
}

/// `pcap_next`: the next packet or NULL.
///
/// # Safety
/// libpcap's contract.
#[no_mangle]
pub unsafe extern "C" fn pcap_next(p: Pcap, hdr: *mut PktHdr) -> *const u8 {
    if REG.slot(p as usize).is_none() {
        let Some(f) = real!(pcap_next: fn(Pcap, *mut PktHdr) -> *const u8) else {
            return std::ptr::null();
        };
        // SAFETY: not ours.
        return unsafe { f(p, hdr) };
    }
    let mut h: *const PktHdr = std::ptr::null();
    let mut d: *const u8 = std::ptr::null();
    // SAFETY: our handle; out-pointers to locals.
    if unsafe { pcap_next_ex(p, &mut h, &mut d) } != 1 {
        return std::ptr::null();
    }
    if !hdr.is_null() && !h.is_null() {
        // SAFETY: `h` points to our entry's header; `hdr` is the caller's.
        unsafe { *hdr = *h };
    }
    d
}

/// `pcap_breakloop`: safe from a signal handler or another thread (one atomic store).
///
/// # Safety
/// libpcap's contract.
#[no_mangle]
pub unsafe extern "C" fn pcap_breakloop(p: Pcap) {
    if REG.set_break(p as usize) {
        // A reader asleep on a cluster queue's futex (another thread's loop) wakes now rather
        // than at its wait's cap, and sees the flag.
        if let Some(slot) = REG.slot(p as usize) {
            let w = WAKERS[slot].load(Ordering::Acquire);
            if !w.is_null() {
                // SAFETY: set at activation, freed only by pcap_close, which libpcap's contract
                // forbids while a pcap_breakloop on the handle runs; `wake` is one atomic swap
                // and at most one futex syscall (safe in a signal handler).
                unsafe { (*w).wake() };
            }
        }
        return;
    }
    if let Some(f) = real!(pcap_breakloop: fn(Pcap) -> ()) {
        // SAFETY: not ours.
        unsafe { f(p) }
    }
}

/// `pcap_stats`.
///
/// # Safety
/// libpcap's contract.
#[no_mangle]
pub unsafe extern "C" fn pcap_stats(p: Pcap, ps: *mut Stat) -> c_int {
    let Some(e) = ours(p) else {
        let Some(f) = real!(pcap_stats: fn(Pcap, *mut Stat) -> c_int) else {
            return code::ERROR;
        };
        // SAFETY: not ours.
        return unsafe { f(p, ps) };
    };
    let Some((recv, drop, ifdrop)) = e.h.stats() else {
        return not_active(e);
    };
    if ps.is_null() {
        return e.fail("pcap_stats: no pcap_stat".into(), code::ERROR);
    }
    // SAFETY: the caller's pcap_stat. libpcap's counters are 32-bit and wrap.
    unsafe {
        (*ps).ps_recv = recv as c_uint;
        (*ps).ps_drop = drop as c_uint;
        (*ps).ps_ifdrop = ifdrop as c_uint;
    }
    0
}

// ---------------------------------------------------------------------------------------------
// Sending.

/// `pcap_inject`: bytes sent or -1.
///
/// # Safety
/// libpcap's contract.
#[no_mangle]
pub unsafe extern "C" fn pcap_inject(p: Pcap, buf: *const c_void, size: usize) -> c_int {
    let Some(e) = ours(p) else {
        let Some(f) = real!(pcap_inject: fn(Pcap, *const c_void, usize) -> c_int) else {
            return code::ERROR;
        };
        // SAFETY: not ours.
        return unsafe { f(p, buf, size) };
    };
    if !e.h.activated {
        return not_active(e);
    }
    if buf.is_null() || size == 0 {
        return e.fail(format!("{}: nothing to send", e.h.device), code::ERROR);
    }
    // SAFETY: the caller's buffer of `size` bytes, read for the call.
    let frame = unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), size) };
    match e.h.inject(frame) {
        Some(n) => n as c_int,
        None => {
            e.sync_err();
            code::ERROR
        }
    }
}

/// `pcap_sendpacket`: 0 or -1.
///
/// # Safety
/// libpcap's contract.
#[no_mangle]
pub unsafe extern "C" fn pcap_sendpacket(p: Pcap, buf: *const u8, size: c_int) -> c_int {
    if REG.slot(p as usize).is_none() {
        let Some(f) = real!(pcap_sendpacket: fn(Pcap, *const u8, c_int) -> c_int) else {
            return code::ERROR;
        };
        // SAFETY: not ours.
        return unsafe { f(p, buf, size) };
    }
    // SAFETY: our handle, the caller's buffer.
    if unsafe { pcap_inject(p, buf.cast(), size.max(0) as usize) } < 0 {
        code::ERROR
    } else {
        0
    }
}

// ---------------------------------------------------------------------------------------------
// Devices.

/// `pcap_lookupnet`: a linerate port has no address (0/0, as libpcap says for `any`).
///
/// # Safety
/// libpcap's contract.
#[no_mangle]
pub unsafe extern "C" fn pcap_lookupnet(
    device: *const c_char,
    net: *mut u32,
    mask: *mut u32,
    errbuf: *mut c_char,
) -> c_int {
    if !names::owns_bytes(cstr(device)) {
        let Some(f) =
            real!(pcap_lookupnet: fn(*const c_char, *mut u32, *mut u32, *mut c_char) -> c_int)
        else {
            return code::ERROR;
        };
        // SAFETY: not ours.
        return unsafe { f(device, net, mask, errbuf) };
    }
    // SAFETY: the caller's out-pointers.
    unsafe {
        if !net.is_null() {
            *net = 0;
        }
        if !mask.is_null() {
            *mask = 0;
        }
    }
    0
}

fn c_dup(s: &str) -> *mut c_char {
    let b: Vec<u8> = s.bytes().filter(|&c| c != 0).collect();
    // SAFETY: malloc of len + 1 bytes, freed by pcap_freealldevs (free).
    let p = unsafe { libc::malloc(b.len() + 1) }.cast::<u8>();
    if p.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: `p` holds len + 1 bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(b.as_ptr(), p, b.len());
        *p.add(b.len()) = 0;
    }
    p.cast()
}

/// `pcap_findalldevs`: the system's devices, then linerate's ([`crate::devices`]).
///
/// # Safety
/// libpcap's contract.
#[no_mangle]
pub unsafe extern "C" fn pcap_findalldevs(all: *mut *mut PcapIf, errbuf: *mut c_char) -> c_int {
    let Some(f) = real!(pcap_findalldevs: fn(*mut *mut PcapIf, *mut c_char) -> c_int) else {
        put_errbuf(
            errbuf,
            "liblinerate_pcap: the system's libpcap is not loaded",
        );
        return code::ERROR;
    };
    // SAFETY: the caller's arguments.
    let rc = unsafe { f(all, errbuf) };
    if rc != 0 || all.is_null() {
        return rc;
    }
    // The end of the list.
    // SAFETY: `all` is the caller's out-pointer libpcap just filled.
    let mut tail: *mut *mut PcapIf = all;
    // SAFETY: a list libpcap made: each node's `next` is a node or NULL.
    unsafe {
        while !(*tail).is_null() {
            tail = &mut (**tail).next;
        }
    }
    for d in crate::devices::list() {
        let mut flags = PCAP_IF_CONNECTION_STATUS_NOT_APPLICABLE;
        if d.up {
            flags |= PCAP_IF_UP;
        }
        if d.running {
            flags |= PCAP_IF_RUNNING;
        }
        if d.loopback {
            flags |= PCAP_IF_LOOPBACK;
        }
        // SAFETY: one zeroed pcap_if_t, freed by pcap_freealldevs.
        let node = unsafe { libc::calloc(1, std::mem::size_of::<PcapIf>()) }.cast::<PcapIf>();
        if node.is_null() {
            break;
        }
        // SAFETY: `node` is a fresh pcap_if_t; `tail` the last `next` of the list.
        unsafe {
            (*node).name = c_dup(&d.name);
            (*node).description = c_dup(&d.description);
            (*node).flags = flags;
            *tail = node;
            tail = &mut (*node).next;
        }
    }
    0
}

// ---------------------------------------------------------------------------------------------
// Interface flags.

/// `ioctl`, for one request only: SIOCGIFFLAGS on a linerate device name answers "up and
/// running" (argus asks before every read, and closes a device it finds down); every other
/// call goes to the C library's `ioctl` untouched.
///
/// glibc declares `ioctl(int, unsigned long, ...)`; a caller passes the third argument in the
/// register of a third integer argument (x86-64 and AArch64 Linux), which is how it is taken
/// here and passed on.
///
/// # Safety
/// The C library's contract for `ioctl`.
#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
#[no_mangle]
pub unsafe extern "C" fn ioctl(fd: c_int, req: libc::c_ulong, arg: *mut c_void) -> c_int {
    if req == libc::SIOCGIFFLAGS as libc::c_ulong && !arg.is_null() {
        let ifr = arg.cast::<libc::ifreq>();
        // SAFETY: SIOCGIFFLAGS's argument is a struct ifreq; its name is IFNAMSIZ bytes,
        // NUL-terminated or not.
        let name: [c_char; libc::IFNAMSIZ] = unsafe { (*ifr).ifr_name };
        let bytes: Vec<u8> = name
            .iter()
            .map(|&c| c as u8)
            .take_while(|&c| c != 0)
            .collect();
        if names::owns_bytes(&bytes) {
            let flags = libc::IFF_UP | libc::IFF_RUNNING;
            // SAFETY: the caller's ifreq, whose flags this request fills.
            unsafe { (*ifr).ifr_ifru.ifru_flags = flags as libc::c_short };
            return 0;
        }
    }
    static F: OnceLock<usize> = OnceLock::new();
    let p = *F.get_or_init(|| {
        // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated name only looks a symbol up.
        unsafe { libc::dlsym(libc::RTLD_NEXT, c"ioctl".as_ptr()) as usize }
    });
    let real = (p != 0).then(|| {
        // SAFETY: the C library's ioctl, whose signature this is.
        unsafe {
            std::mem::transmute::<usize, unsafe extern "C" fn(c_int, libc::c_ulong, ...) -> c_int>(
                p,
            )
        }
    });
    let Some(f) = real else {
        // SAFETY: errno is thread-local.
        unsafe { *libc::__errno_location() = libc::ENOSYS };
        return -1;
    };
    // SAFETY: the caller's arguments, passed on as they came.
    unsafe { f(fd, req, arg) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_types_become_dlts() {
        assert_eq!(dlt_of(1), DLT_EN10MB);
        assert_eq!(dlt_of(LINKTYPE_RAW), DLT_RAW);
        assert_eq!(dlt_of(276), 276);
        assert_eq!(dlt_of(113), 113);
    }

    #[test]
    fn errbuf_text_is_cut_to_the_buffer_and_terminated() {
        let mut buf = [1 as c_char; ERRBUF_SIZE + 8];
        put_errbuf(buf.as_mut_ptr(), &"x".repeat(1000));
        assert_eq!(buf[ERRBUF_SIZE - 1], 0);
        assert_eq!(buf[ERRBUF_SIZE], 1, "nothing written past PCAP_ERRBUF_SIZE");
        put_errbuf(buf.as_mut_ptr(), "short");
        assert_eq!(cstr(buf.as_ptr()), b"short");
        put_errbuf(std::ptr::null_mut(), "no buffer: nothing happens");
        assert_eq!(cstr(std::ptr::null()), b"");
    }

    #[test]
    fn geterr_text_fits_in_an_errbuf() {
        let mut e = entry(&format!("cluster:{}@0", "9".repeat(5000)));
        assert_ne!(e.h.activate(), 0);
        assert!(
            e.h.err.len() > ERRBUF_SIZE,
            "a long name makes a long message"
        );
        e.sync_err();
        assert_eq!(e.errbuf.len(), ERRBUF_SIZE);
        assert_eq!(e.errbuf.last(), Some(&0));
        let text = cstr(e.errbuf.as_ptr().cast());
        assert_eq!(text.len(), ERRBUF_SIZE - 1);
        assert!(text.ends_with(b"999"), "{}", String::from_utf8_lossy(text));
    }

    /// An entry for `device`, not activated, outside the registry.
    fn entry(device: &str) -> Entry {
        Entry {
            h: Handle::new(device),
            outer: std::ptr::null_mut(),
            inner: std::ptr::null_mut(),
            errbuf: vec![0],
            hdr: PktHdr {
                ts: libc::timeval {
                    tv_sec: 0,
                    tv_usec: 0,
                },
                caplen: 0,
                len: 0,
            },
            timerfd: -1,
            rfmon: false,
        }
    }

    /// A handle registered as pcap_create registers one (the system's libpcap is not loaded in
    /// these tests: its key is a unique address of ours); `unregister` frees it.
    fn register(mut e: Entry) -> Pcap {
        let outer: Pcap = Box::into_raw(Box::new(0u64)).cast();
        e.outer = outer;
        REG.insert(outer as usize, Box::into_raw(Box::new(e)))
            .unwrap();
        outer
    }

    fn unregister(outer: Pcap) {
        let back = REG.remove(outer as usize).unwrap();
        // SAFETY: both from Box::into_raw in `register`, no longer registered.
        unsafe {
            drop(Box::from_raw(back));
            drop(Box::from_raw(outer.cast::<u64>()));
        }
    }

    /// The handle of `breaks_after_five`'s handler.
    static BRK_HANDLE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

    unsafe extern "C" fn break_at_five(user: *mut u8, _h: *const PktHdr, _d: *const u8) {
        // SAFETY: `user` is the test's u32 counter.
        let n = unsafe { &mut *user.cast::<u32>() };
        *n += 1;
        if *n == 5 {
            let p = BRK_HANDLE.load(std::sync::atomic::Ordering::Relaxed) as Pcap;
            // SAFETY: our registered handle.
            unsafe { pcap_breakloop(p) };
        }
    }

    #[test]
    fn breakloop_from_the_handler_stops_after_that_packet() {
        let file =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/sample.pcap");
        let mut e = entry(&format!("pcap:{}", file.display()));
        assert_eq!(e.h.activate(), 0, "{}", e.h.err);
        let p = register(e);
        BRK_HANDLE.store(p as usize, std::sync::atomic::Ordering::Relaxed);
        let mut n = 0u32;
        // SAFETY: our registered handle; the handler's user pointer is `n`.
        unsafe {
            let rc = pcap_loop(p, -1, Some(break_at_five), (&mut n as *mut u32).cast());
            assert_eq!((rc, n), (-2, 5), "pcap_loop: -2 right after the 5th packet");
            n = 0;
            let rc = pcap_dispatch(p, -1, Some(break_at_five), (&mut n as *mut u32).cast());
            assert_eq!(
                (rc, n),
                (-2, 5),
                "pcap_dispatch: -2 right after the 5th packet"
            );
            n = 10;
            let rc = pcap_dispatch(p, 3, Some(break_at_five), (&mut n as *mut u32).cast());
            assert_eq!((rc, n), (3, 13), "no break left pending");
        }
        unregister(p);
    }

    #[test]
    fn reads_and_sends_before_activation_say_not_activated() {
        let outer = register(entry("cluster:1@0"));
        let mut hdr: *const PktHdr = std::ptr::null();
        let mut data: *const u8 = std::ptr::null();
        let frame = [0u8; 60];
        let mut st = Stat {
            ps_recv: 0,
            ps_drop: 0,
            ps_ifdrop: 0,
        };
        // SAFETY: `outer` is a registered handle of ours; out-pointers to locals.
        unsafe {
            assert_eq!(pcap_dispatch(outer, 1, None, std::ptr::null_mut()), -3);
            assert_eq!(pcap_loop(outer, 1, None, std::ptr::null_mut()), -3);
            assert_eq!(pcap_next_ex(outer, &mut hdr, &mut data), -3);
            assert!(pcap_next(outer, std::ptr::null_mut()).is_null());
            assert_eq!(pcap_inject(outer, frame.as_ptr().cast(), 60), -3);
            assert_eq!(pcap_stats(outer, &mut st), -3);
            let text = cstr(pcap_geterr(outer));
            assert!(
                String::from_utf8_lossy(text).contains("not active"),
                "{}",
                String::from_utf8_lossy(text)
            );
        }
        unregister(outer);
    }

    #[test]
    fn unknown_handles_are_never_ours() {
        let mut x = 0u64;
        assert!(ours((&mut x as *mut u64).cast()).is_none());
        assert!(ours(std::ptr::null_mut()).is_none());
    }
}

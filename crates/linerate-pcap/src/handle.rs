//! One capture on a linerate port, as a libpcap program drives it: the settings made between
//! `pcap_create` and `pcap_activate`, then the open port, its batch of packets handed out one
//! by one (zero copy: each packet stays in its frame until the next batch is received), the
//! filter, the counters `pcap_stats` reports. No unsafe here: the C side ([`crate::ffi`])
//! turns these into libpcap's structures.

use linerate::filter::Insn;
use linerate::mem::{Batch, Desc, Pool, PoolConfig};
use linerate::port::{DropReason, Port, PortOptions, PortStats};
use std::sync::Arc;

/// Empty polls that spin before sleeping on a port whose producer wakes its reader (a cluster
/// queue, [`Port::rx_wait`]), at most: halved down to 1 each time spinning found nothing, back
/// to this as soon as it finds a packet (a producer on the reader's own core, tcpdump pinned
/// beside its master, cannot publish while the reader spins: there the spins were only cost).
const WAKE_SPINS: u32 = 16;
/// libpcap's buffered mode: the share of its queue's slots a sleeping reader of a cluster queue
/// waits for (the master wakes it then; the port takes at most a quarter of its queue): a
/// sixteenth, 256 packets of the default 4096 slots. The rest of the queue covers the woken
/// reader's wait for a core it may share with the master (~7 ms at 500 kpps for 4096 slots):
/// a larger queue (`balance --slots`) waits for more packets per wake, in the same share, so
/// with the same margin in time. (At 4096 slots, 1024, a quarter, and 512 were measured: ~10-20
/// and ~8 ns a packet less for tcpdump at 500 kpps, fewer wakes, but more packets lost on a
/// loaded machine; so was a wait that doubled from 256 up to 1024 while wakes came on time and
/// fell back at the first late one: no gain seen, losses no better: BENCHMARKS.md, "where its
/// CPU per packet goes", rounds 2 and 3.)
const BUFFERED_SHARE: usize = 16;
/// What a buffered reader waits for on a port that does not say its queue's size.
const BUFFERED_WANT: usize = 256;
/// How many packets ahead of the one handed out its frame is prefetched.
const PREFETCH_AHEAD: usize = 8;
/// Other ports without a descriptor: empty polls that spin, then yield, then sleep 50 µs, before
/// the long sleeps of an idle queue.
const IDLE_SPINS: u32 = 64;
const IDLE_YIELDS: u32 = 2048;
const IDLE_SHORT_SLEEPS: u32 = 2000;

/// libpcap's default and largest snapshot length.
pub const MAX_SNAPLEN: u32 = 262_144;

/// libpcap's error codes (pcap/pcap.h).
pub mod code {
    /// Generic error.
    pub const ERROR: i32 = -1;
    /// The loop was broken by `pcap_breakloop` (and `pcap_next_ex`'s "no more packets").
    pub const BREAK: i32 = -2;
    /// The handle was not activated.
    pub const NOT_ACTIVATED: i32 = -3;
    /// The handle was already activated.
    pub const ACTIVATED: i32 = -4;
    /// No such device.
    pub const NO_SUCH_DEVICE: i32 = -5;
    /// No permission.
    pub const PERM_DENIED: i32 = -8;
    /// The operation is not supported by this device.
    pub const NOT_SUPPORTED: i32 = -13;
}

/// Timestamp precisions (PCAP_TSTAMP_PRECISION_*).
pub const PRECISION_MICRO: i32 = 0;
/// Nanoseconds.
pub const PRECISION_NANO: i32 = 1;

/// `pcap_direction_t`: both ways.
pub const DIRECTION_INOUT: i32 = 0;
/// Received packets only.
pub const DIRECTION_IN: i32 = 1;
/// Sent packets only.
pub const DIRECTION_OUT: i32 = 2;

/// Runs a classic BPF program on a packet's captured bytes with its length on the wire: libpcap's
/// own `bpf_filter`, provided by the C side. Returns what the program returned: 0 rejects the
/// packet, anything else keeps that many bytes of it at most (as the kernel's socket filter
/// cuts a live capture).
pub type RunFilter = fn(&[Insn], &[u8], u32) -> u32;

/// BPF_RET | BPF_K: `ret #k`.
const BPF_RET_K: u16 = 0x06;

/// What `pcap_set_*` set before `pcap_activate`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Bytes kept per packet.
    pub snaplen: u32,
    /// Promiscuous mode (afpacket/xdp interfaces).
    pub promisc: bool,
    /// Read timeout (ms) of `pcap_dispatch`/`pcap_next_ex`; 0: wait for packets.
    pub timeout_ms: u32,
    /// Hand packets over as they come.
    pub immediate: bool,
    /// Buffer size asked for (bytes), for afpacket's ring.
    pub buffer_size: u32,
    /// PCAP_TSTAMP_PRECISION_MICRO or _NANO.
    pub precision: i32,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            snaplen: MAX_SNAPLEN,
            promisc: false,
            timeout_ms: 0,
            immediate: false,
            buffer_size: 0,
            precision: PRECISION_MICRO,
        }
    }
}

/// A packet handed to the program: where its captured bytes are (inside the batch's frame),
/// how many were captured, its length on the wire and its time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packet {
    /// First byte (valid until the next batch is received or the handle is closed).
    pub data: *const u8,
    /// Captured bytes (≤ snaplen).
    pub caplen: u32,
    /// Bytes on the wire.
    pub len: u32,
    /// Seconds since the epoch.
    pub sec: i64,
    /// Microseconds or nanoseconds within the second (the handle's precision).
    pub frac: i64,
}

/// What the next read gave.
#[derive(Debug, PartialEq, Eq)]
pub enum Next {
    /// A packet that passed the filter.
    Packet(Packet),
    /// Nothing now (nonblocking, or the timeout passed).
    Nothing,
    /// `pcap_breakloop` was called.
    Break,
    /// The source ended (the cluster's master stopped): as the end of a savefile.
    End,
    /// A read error (geterr holds it).
    Error,
}

/// The capture of one handle.
pub struct Handle {
    /// The device name as the program gave it.
    pub device: String,
    /// Settings (fixed at activation).
    pub settings: Settings,
    /// Whether `pcap_activate` succeeded.
    pub activated: bool,
    /// Nonblocking mode (`pcap_setnonblock`).
    pub nonblock: bool,
    /// Which packets pass (`pcap_setdirection`): [`DIRECTION_INOUT`], `_IN` or `_OUT`.
    pub direction: i32,
    /// The last error, as `pcap_geterr` returns it (NUL-terminated by the C side).
    pub err: String,
    port: Option<Box<dyn Port>>,
    batch: Batch,
    /// Next packet of `batch` to hand out.
    pos: usize,
    /// The time (ns) given to the batch's packets that carry none (0: not read yet).
    batch_now: u64,
    /// Address of the start of the batch's pool's memory (0 without one): where each packet
    /// `PREFETCH_AHEAD` ahead is, for the prefetch, without the bounds checks of a slice (a hint
    /// reads nothing; an address, so that the handle stays `Send`).
    base: usize,
    /// Size in bytes of that memory.
    span: u64,
    /// What [`Handle::ready`] compares a packet's end with, set per batch and at each change of
    /// the filter or the direction: `span` + 1 when a packet needs no filter run nor direction
    /// test (a packet handed out lies inside the pool's memory), 0 otherwise (`ready` hands
    /// out nothing). One comparison a packet for the three.
    fast_limit: u64,
    /// The second of the last timestamp handed out, and its first nanosecond: a packet of the
    /// same second (all but one a second of them) costs a subtraction, no division. Never
    /// second 0 of the epoch, nor the last second of u64's range (whose nanoseconds run past
    /// the end and wrap to 0): a time of 0 means "none" and never falls in it (`ready` hands
    /// over only packets of this second).
    sec: i64,
    sec_start: u64,
    filter: Option<Vec<Insn>>,
    run_filter: Option<RunFilter>,
    /// Bytes kept of a packet at most: the snap length, or less when the filter is a lone
    /// `ret #k` (applied here, the program not run). Fixed at activation and `setfilter`.
    cut: u32,
    /// Timestamps in nanoseconds (the precision, fixed at activation).
    nano: bool,
    /// Empty polls that spin before sleeping: `WAKE_SPINS`, down to 1 while spinning never
    /// finds a packet (the producer shares the core, or is slow), back up when one does.
    spins: u32,
    /// Link type of the port (a LINKTYPE_ value).
    pub linktype: u32,
    /// Packets the filter rejected.
    pub filtered: u64,
    /// Set once the source ended.
    pub ended: bool,
    /// A transmit batch, made at the first inject.
    tx: Option<Batch>,
    /// A `pcap_dispatch` after the end returns an error (a select-driven program would
    /// otherwise call it for ever).
    pub end_seen: u32,
    /// When `pcap_dispatch` first found the source ended (the end is reported after
    /// `END_QUIET` of quiet).
    pub end_at: Option<std::time::Instant>,
}

impl Handle {
    /// A handle for `device`, not activated.
    pub fn new(device: &str) -> Handle {
        Handle {
            device: device.to_string(),
            settings: Settings::default(),
            activated: false,
            nonblock: false,
            direction: DIRECTION_INOUT,
            err: String::new(),
            port: None,
            batch: Batch::new(),
            pos: 0,
            batch_now: 0,
            base: 0,
            span: 0,
            fast_limit: 0,
            // Second 1 of the epoch: any whole second but 0 and the last, with its second.
            sec: 1,
            sec_start: 1_000_000_000,
            filter: None,
            run_filter: None,
            cut: MAX_SNAPLEN,
            nano: false,
            spins: WAKE_SPINS,
            linktype: 1,
            filtered: 0,
            ended: false,
            tx: None,
            end_seen: 0,
            end_at: None,
        }
    }

    /// The port options a capture with these settings opens its port with.
    pub fn port_options(&self) -> PortOptions {
        let s = &self.settings;
        let mut o = PortOptions {
            snaplen: s.snaplen.clamp(1, MAX_SNAPLEN),
            promisc: s.promisc,
            immediate: s.immediate,
            // A short wait in the kernel ports' poll: the loop here decides how long to wait.
            rx_wait_ms: 1,
            direction: linerate::port::Capture::InOut,
            ..PortOptions::default()
        };
        if s.buffer_size >= (2 << 20) {
            // pcap_set_buffer_size: afpacket's ring holds about that many bytes.
            o.ring_blocks = (s.buffer_size / o.ring_block_size).clamp(2, 4096);
        }
        o
    }

    /// Opens the port (`pcap_activate`): returns 0 or a libpcap error code, with `err` set.
    pub fn activate(&mut self) -> i32 {
        if self.activated {
            self.err = format!("{}: the capture is already active", self.device);
            return code::ACTIVATED;
        }
        let opts = self.port_options();
        match linerate::open_rx(&self.device, &opts) {
            Ok(p) => {
                self.linktype = p.link_type().0;
                self.port = Some(p);
                self.activated = true;
                self.cut = self.snaplen();
                self.nano = self.settings.precision == PRECISION_NANO;
                0
            }
            Err(e) => {
                // linerate's port errors name the port.
                let text = e.to_string();
                self.err = text.clone();
                if text.contains("Operation not permitted") || text.contains("ermission") {
                    code::PERM_DENIED
                } else if text.contains("No such") || text.contains("no such") {
                    code::NO_SUCH_DEVICE
                } else {
                    code::ERROR
                }
            }
        }
    }

    /// Installs a BPF program (its instructions, checked by the caller) run on every packet.
    /// A program that is one `ret #k` with k != 0 (tcpdump installs `ret #262144` even without
    /// an expression) accepts every packet: it is not run, its cut (k bytes) applies directly.
    pub fn set_filter(&mut self, insns: Vec<Insn>, run: RunFilter) {
        self.cut = self.snaplen();
        if let [one] = insns[..] {
            if one.code == BPF_RET_K && one.k != 0 {
                self.cut = self.cut.min(one.k);
                self.filter = None;
                self.run_filter = None;
                self.set_fast_limit();
                return;
            }
        }
        // The kernel ports could take it (SO_ATTACH_FILTER), but one path for every port keeps
        // the counters the same: the filter runs here on each frame.
        self.filter = Some(insns);
        self.run_filter = Some(run);
        self.set_fast_limit();
    }

    /// Whether a BPF program runs on each packet (false without one, or for a lone `ret #k`).
    pub fn filter_runs(&self) -> bool {
        self.run_filter.is_some()
    }

    /// Snap length in effect.
    pub fn snaplen(&self) -> u32 {
        self.settings.snaplen.clamp(1, MAX_SNAPLEN)
    }

    /// (seconds, microseconds or nanoseconds) of a timestamp in ns since the epoch.
    #[inline(always)]
    fn split_time(&mut self, ts: u64) -> (i64, i64) {
        let into = ts.wrapping_sub(self.sec_start);
        if into < 1_000_000_000 {
            return (self.sec, self.frac(into));
        }
        let ns = ts % 1_000_000_000;
        let sec = ts / 1_000_000_000;
        if sec != 0 && sec != u64::MAX / 1_000_000_000 {
            self.sec = sec as i64;
            self.sec_start = ts - ns;
        }
        (sec as i64, self.frac(ns))
    }

    /// Microseconds or nanoseconds (the handle's precision) of `ns` nanoseconds.
    #[inline(always)]
    fn frac(&self, ns: u64) -> i64 {
        if self.nano {
            ns as i64
        } else {
            (ns / 1000) as i64
        }
    }

    /// Sets `fast_limit` from the pool's size, the filter and the direction.
    fn set_fast_limit(&mut self) {
        self.fast_limit =
            if self.run_filter.is_none() && self.direction == DIRECTION_INOUT && self.span > 0 {
                self.span + 1
            } else {
                0
            };
    }

    /// Prefetches the frame of the batch's packet `i`: a hint, so with no comparison with the
    /// batch's length (past it, the line of a stale slot's address, harmless).
    #[inline(always)]
    fn prefetch(&self, i: usize) {
        crate::ffi::prefetch(self.base.wrapping_add(self.batch.addr_hint(i) as usize) as *const u8);
    }

    /// The next packet of the batch already received, when handing it out takes nothing but
    /// its descriptor (no filter runs, both directions wanted, a time stamped in the second of
    /// the last packet): the loops' per packet path, inlined into them. None: call
    /// [`Handle::next`] (which does the rest, a new second's division included, and receives
    /// the next batch).
    #[inline(always)]
    pub fn ready(&mut self) -> Option<Packet> {
        let i = self.pos;
        let d = *self.batch.desc(i)?;
        // The packet's bytes from the pool's address kept at the batch's receive, not through
        // the pool (two loads and a bounds check fewer a packet): inside the pool's memory,
        // as every descriptor of a batch is (a cluster queue's are checked as they are read);
        // one that is not goes the slow way, as `Batch::data` hands it out. A time of 0 (none)
        // is never in the second kept (see `sec_start`).
        let end = d.addr.wrapping_add(u64::from(d.len));
        let into = d.ts.wrapping_sub(self.sec_start);
        if into >= 1_000_000_000 || end >= self.fast_limit || end < d.addr {
            return None;
        }
        self.pos = i + 1;
        self.prefetch(i + PREFETCH_AHEAD);
        let ptr = (self.base as *const u8).wrapping_add(d.addr as usize);
        let caplen = d.len.min(self.cut);
        Some(Packet {
            data: ptr,
            caplen,
            len: d.wire_len.max(caplen),
            sec: self.sec,
            frac: self.frac(into),
        })
    }

    /// The next packet that passes the filter, waiting as the mode says: `wait` false is one
    /// look (nonblocking); otherwise up to the timeout (`forever`: until a packet, the end or a
    /// break). `brk` says whether `pcap_breakloop` was called.
    pub fn next(&mut self, wait: bool, forever: bool, brk: &mut dyn FnMut() -> bool) -> Next {
        // The timeout's end, read from the clock only once a poll found nothing: a packet
        // already in the batch costs no clock read (`pcap_dispatch` asks once per packet).
        let mut deadline: Option<Option<std::time::Instant>> = None;
        let mut idle = 0u32;
        // Whether this call slept (packets found after a sleep are not the spin's).
        let mut slept = false;
        loop {
            while self.pos < self.batch.len() {
                let i = self.pos;
                self.pos += 1;
                self.prefetch(i + PREFETCH_AHEAD);
                let d = self.batch.descs()[i];
                // A packet whose direction the port knows (afpacket) and that is not wanted.
                let unwanted = match self.direction {
                    DIRECTION_IN => d.flags & Desc::F_OUTBOUND != 0,
                    DIRECTION_OUT => d.flags & Desc::F_INBOUND != 0,
                    _ => false,
                };
                if unwanted {
                    continue;
                }
                let data = self.batch.data(i);
                let mut caplen = (data.len() as u32).min(self.cut);
                if let (Some(f), Some(run)) = (&self.filter, self.run_filter) {
                    let keep = run(f, &data[..caplen as usize], d.filter_len());
                    if keep == 0 {
                        self.filtered += 1;
                        continue;
                    }
                    caplen = caplen.min(keep);
                }
                // A packet without a time (a master's built-in source stamps none): the time
                // this batch was read, as a live capture always has one (one clock read per
                // batch at most).
                let ts = if d.ts != 0 {
                    d.ts
                } else {
                    if self.batch_now == 0 {
                        self.batch_now = linerate::time::wall_ns();
                    }
                    self.batch_now
                };
                let ptr = data.as_ptr();
                let (sec, frac) = self.split_time(ts);
                return Next::Packet(Packet {
                    data: ptr,
                    caplen,
                    len: d.wire_len.max(caplen),
                    sec,
                    frac,
                });
            }
            if brk() {
                return Next::Break;
            }
            if self.ended {
                return Next::End;
            }
            let Some(port) = self.port.as_mut() else {
                self.err = format!("{}: the capture is not active", self.device);
                return Next::Error;
            };
            // The frames of the batch handed out go back now (the cluster releases them at
            // its next rx).
            self.batch.clear();
            self.pos = 0;
            self.batch_now = 0;
            match port.rx(&mut self.batch) {
                Ok(n) if n > 0 => {
                    if idle > 0 && !slept {
                        // Found while spinning: spinning pays here.
                        self.spins = WAKE_SPINS;
                    }
                    // Prefetch the first packets' first lines now, then each packet's
                    // `PREFETCH_AHEAD` packets before it is handed out: the frames were written
                    // by the master (a 64 B packet per 2 KiB frame: a line, and every other
                    // packet a page, of its own), so their misses, TLB walks included, overlap
                    // with the handling of the packets before them rather than queueing behind
                    // one another at the batch's start (a prefetch of all 64 at once spent ~15 %
                    // of tcpdump's time on the prefetches themselves).
                    (self.base, self.span) = self.batch.pool().map_or((0, 0), |p| {
                        (p.region().as_ptr() as usize, p.region().len() as u64)
                    });
                    self.set_fast_limit();
                    for i in 0..n.min(PREFETCH_AHEAD) {
                        self.prefetch(i);
                    }
                    continue;
                }
                Ok(_) => {}
                Err(e) => {
                    self.err = e.to_string();
                    return Next::Error;
                }
            }
            if port.is_finished() {
                self.ended = true;
                return Next::End;
            }
            if !wait {
                return Next::Nothing;
            }
            let deadline = *deadline.get_or_insert_with(|| {
                (!forever && self.settings.timeout_ms > 0).then(|| {
                    std::time::Instant::now()
                        + std::time::Duration::from_millis(self.settings.timeout_ms as u64)
                })
            });
            if deadline.is_some_and(|d| std::time::Instant::now() >= d) {
                return Next::Nothing;
            }
            idle = idle.saturating_add(1);
            // A cluster queue: after a short spin, sleep until the master wakes us. In
            // libpcap's buffered mode packets may wait (as a kernel ring holds them until a
            // block is full or the timeout passes): the master wakes us once a sixteenth of
            // the queue waits (`BUFFERED_SHARE`), or the wait's cap (20 ms) or the timeout's rest passes. In
            // immediate mode, at the first packet.
            if idle > self.spins && port.poll_fd().is_none() {
                // Spinning found nothing this time: spin less before the next sleep.
                self.spins = (self.spins / 2).max(1);
                let want = if self.settings.immediate {
                    1
                } else {
                    port.rx_slots()
                        .map_or(BUFFERED_WANT, |s| (s / BUFFERED_SHARE).max(1))
                };
                // libpcap's read timeout bounds how long a packet waits, in `pcap_loop` too
                // (a kernel ring hands over a block at the timeout): a loop's sleep lasts the
                // timeout at most, then what came is handed out.
                let rest = match deadline {
                    Some(d) => d.saturating_duration_since(std::time::Instant::now()),
                    None if self.settings.timeout_ms > 0 => {
                        std::time::Duration::from_millis(self.settings.timeout_ms as u64)
                    }
                    None => std::time::Duration::MAX,
                };
                if port.rx_wait(want, rest) {
                    slept = true;
                    continue;
                }
            }
            // Nothing waiting and no wait of the port's: spin a little, then yield, then sleep
            // 50 µs; after about 100 ms without a packet, 500 µs (tcpdump on a queue of one
            // packet a second: 4 % of a core rather than 12 % on the loaded 2-vCPU machine; the
            // queue's ring absorbs the first half millisecond of a burst). Ports with a
            // descriptor already waited in poll.
            if port.poll_fd().is_some() || idle > IDLE_SPINS + IDLE_YIELDS {
                if port.poll_fd().is_none() {
                    let us = if idle > IDLE_SPINS + IDLE_YIELDS + IDLE_SHORT_SLEEPS {
                        500
                    } else {
                        50
                    };
                    std::thread::sleep(std::time::Duration::from_micros(us));
                }
            } else if idle > IDLE_SPINS {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
    }

    /// `pcap_setdirection`: 0 or a libpcap error code with `err` set. Only `afpacket:` ports
    /// see what the host sends; the others receive only.
    pub fn set_direction(&mut self, dir: i32) -> i32 {
        let afpacket = self.device.starts_with("afpacket:");
        match dir {
            DIRECTION_INOUT | DIRECTION_IN => {}
            DIRECTION_OUT if afpacket => {}
            DIRECTION_OUT => {
                self.err = format!(
                    "{}: only afpacket: ports see the packets the host sends; this port receives only",
                    self.device
                );
                return code::ERROR;
            }
            _ => {
                self.err = format!("{}: no such direction {dir}", self.device);
                return code::ERROR;
            }
        }
        self.direction = dir;
        self.set_fast_limit();
        0
    }

    /// Whether nothing more will come.
    pub fn is_finished(&self) -> bool {
        self.ended
    }

    /// Why the source ended, in words.
    pub fn end_note(&self) -> String {
        self.port
            .as_ref()
            .and_then(|p| p.end_note())
            .unwrap_or_else(|| format!("{}: end of input", self.device))
    }

    /// `pcap_stats`: (ps_recv, ps_drop, ps_ifdrop). ps_recv counts every packet the port
    /// received plus every one it dropped (as Linux's counts do), ps_drop every packet the
    /// queue or the kernel dropped (ring full, no free frame, consumer gone, unread at the
    /// master's end, too big), ps_ifdrop what the interface dropped (0 where unknown).
    pub fn stats(&mut self) -> Option<(u64, u64, u64)> {
        let s: PortStats = self.port.as_mut()?.stats();
        let drops = s.rx_drops.without(DropReason::Filter).total();
        Some((s.rx_packets + drops, drops, 0))
    }

    /// What ends the port's sleep from another thread (`pcap_breakloop`), if it has one (a
    /// cluster queue named with its number).
    pub fn rx_waker(&self) -> Option<Arc<dyn linerate::port::RxWake>> {
        self.port.as_ref().and_then(|p| p.rx_waker())
    }

    /// A selectable descriptor of the port, if it has one (afpacket and xdp sockets).
    pub fn poll_fd(&self) -> Option<i32> {
        self.port.as_ref().and_then(|p| p.poll_fd())
    }

    /// Sends one frame (`pcap_inject`): its length, or None with `err` set.
    pub fn inject(&mut self, frame: &[u8]) -> Option<usize> {
        let Some(port) = self.port.as_mut() else {
            self.err = format!("{}: the capture is not active", self.device);
            return None;
        };
        if self.tx.is_none() {
            // A cluster consumer copies into a lane of its own (the segment's frames are the
            // master's); a kernel port sends from its own frames when it has some.
            let own = port.pool().filter(|_| !self.device.starts_with("cluster:"));
            let pool = match own {
                Some(p) => p.clone(),
                None => match Pool::new(&PoolConfig {
                    frames: 64,
                    ..PoolConfig::default()
                }) {
                    Ok(p) => Arc::new(p),
                    Err(e) => {
                        self.err = format!("{}: no frames to send from: {e}", self.device);
                        return None;
                    }
                },
            };
            self.tx = Some(Batch::with_pool(&pool));
        }
        let tx = self.tx.as_mut()?;
        if !tx.push_copy(frame, 0) {
            self.err = format!(
                "{}: cannot send a frame of {} bytes (no free frame, or longer than a frame)",
                self.device,
                frame.len()
            );
            return None;
        }
        let r = port.tx(tx);
        let sent = match r {
            Ok(n) => n,
            Err(e) => {
                tx.clear();
                self.err = e.to_string(); // names the port
                return None;
            }
        };
        tx.clear();
        if sent == 0 {
            self.err = format!("{}: the port took no packet (ring full?)", self.device);
            return None;
        }
        let _ = port.flush();
        Some(frame.len())
    }
}

/// A handle closed mid-batch (`tcpdump -c`, a program that stops reading) gives the packets it
/// received but never handed to the program back to its port: on a cluster queue the master
/// then counts them dropped with their consumer gone (or the queue's next reader gets them),
/// not delivered to a program that never saw them.
impl Drop for Handle {
    fn drop(&mut self) {
        let Some(port) = self.port.as_mut() else {
            return;
        };
        let rest = self.batch.descs().get(self.pos..).unwrap_or_default();
        if !rest.is_empty() {
            let bytes = rest.iter().map(|d| u64::from(d.wire_len)).sum();
            port.rx_unused(rest.len(), bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_map_to_port_options() {
        let mut h = Handle::new("afpacket:lo");
        h.settings.snaplen = 0;
        assert_eq!(h.port_options().snaplen, 1);
        h.settings.snaplen = 1 << 30;
        assert_eq!(h.port_options().snaplen, MAX_SNAPLEN);
        h.settings.promisc = true;
        h.settings.buffer_size = 64 << 20;
        let o = h.port_options();
        assert!(o.promisc);
        assert_eq!(o.ring_blocks, 64);
    }

    fn sample() -> Handle {
        let file =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/sample.pcap");
        let mut h = Handle::new(&format!("pcap:{}", file.display()));
        assert_eq!(h.activate(), 0, "{}", h.err);
        h
    }

    /// Every packet of the sample: (captured bytes, length on the wire).
    fn lengths(h: &mut Handle) -> Vec<(u32, u32)> {
        let mut out = Vec::new();
        loop {
            match h.next(true, true, &mut || false) {
                Next::Packet(p) => out.push((p.caplen, p.len)),
                Next::End => return out,
                other => panic!("{other:?}: {}", h.err),
            }
        }
    }

    fn ret(k: u32) -> Insn {
        Insn {
            code: BPF_RET_K,
            jt: 0,
            jf: 0,
            k,
        }
    }

    fn never_run(_: &[Insn], _: &[u8], _: u32) -> u32 {
        panic!("a lone `ret #k` with k != 0 is not run per packet")
    }

    #[test]
    fn a_lone_ret_k_filter_is_not_run_and_cuts_at_k() {
        let all = lengths(&mut sample());
        assert!(all.len() > 3 && all.iter().any(|&(c, _)| c > 40));
        // tcpdump's program without an expression: every packet, whole.
        let mut h = sample();
        h.set_filter(vec![ret(MAX_SNAPLEN)], never_run);
        assert!(!h.filter_runs());
        assert_eq!(lengths(&mut h), all);
        // `ret #40`: every packet, cut at 40 bytes, its length on the wire kept.
        let mut h = sample();
        h.set_filter(vec![ret(40)], never_run);
        let cut: Vec<(u32, u32)> = all.iter().map(|&(c, w)| (c.min(40), w)).collect();
        assert_eq!(lengths(&mut h), cut);
        assert_eq!(h.filtered, 0);
    }

    #[test]
    fn a_filter_that_runs_rejects_on_0_and_cuts_at_what_it_returns() {
        fn reject(_: &[Insn], _: &[u8], _: u32) -> u32 {
            0
        }
        fn keep_20(_: &[Insn], _: &[u8], _: u32) -> u32 {
            20
        }
        let all = lengths(&mut sample());
        // `ret #0` rejects everything: run (and counted as filtered).
        let mut h = sample();
        h.set_filter(vec![ret(0)], reject);
        assert!(h.filter_runs());
        assert_eq!(lengths(&mut h), vec![]);
        assert_eq!(h.filtered, all.len() as u64);
        // A longer program runs on every packet; what it returns cuts the packet.
        let mut h = sample();
        h.set_filter(vec![ret(0), ret(20)], keep_20);
        assert!(h.filter_runs());
        let cut: Vec<(u32, u32)> = all.iter().map(|&(c, w)| (c.min(20), w)).collect();
        assert_eq!(lengths(&mut h), cut);
    }

    /// A cluster of one queue of `slots` slots, named by this process's id and `k`.
    fn cluster(k: u32, slots: u32) -> (u32, linerate::cluster::Master) {
        let id = 3_700_000 + (std::process::id() % 100_000) * 10 + k;
        let cfg = linerate::cluster::ClusterConfig {
            apps: vec![1],
            slots,
            ..Default::default()
        };
        let m = linerate::cluster::Master::create(id, &cfg).expect("cluster");
        (id, m)
    }

    /// One 60-byte packet for queue 0, from `pool`.
    fn publish_one(master: &mut linerate::cluster::Master, pool: &Arc<Pool>) {
        let mut b = Batch::new();
        b.bind(pool);
        let mut fr = b.alloc().expect("frame");
        fr.buf()[..60].fill(0xab);
        fr.push(Desc {
            len: 60,
            wire_len: 60,
            ..Default::default()
        });
        master.distribute(&mut b, &[1]);
    }

    /// How long after its publication each of `rounds` lone packets reached a reader of queue 0
    /// in `pcap_loop` (a read that waits for ever) with these settings, each published once
    /// the reader has been asleep for 50 ms (mid-way through its third sleep of 20 ms); sorted.
    fn lone_packet_delays(k: u32, settings: Settings, rounds: usize) -> Vec<std::time::Duration> {
        let (id, mut master) = cluster(k, 1024);
        let pool = Arc::new(
            Pool::new(&PoolConfig {
                frames: 64,
                ..PoolConfig::default()
            })
            .unwrap(),
        );
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (got_tx, got_rx) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            let mut h = Handle::new(&format!("cluster:{id}@0"));
            h.settings = settings;
            assert_eq!(h.activate(), 0, "{}", h.err);
            for _ in 0..rounds {
                ready_tx.send(()).unwrap();
                match h.next(true, true, &mut || false) {
                    Next::Packet(p) => assert_eq!(p.caplen, 60),
                    other => panic!("{other:?}: {}", h.err),
                }
                got_tx.send(std::time::Instant::now()).unwrap();
            }
        });
        let mut delays = Vec::new();
        for _ in 0..rounds {
            ready_rx.recv().unwrap();
            std::thread::sleep(std::time::Duration::from_millis(50));
            let t = std::time::Instant::now();
            publish_one(&mut master, &pool);
            let at = got_rx.recv().unwrap();
            delays.push(at.saturating_duration_since(t));
            // The reader gives the frame back at its next read; the master frees it here.
            master.maintain();
        }
        reader.join().unwrap();
        master.close();
        delays.sort();
        delays
    }

    /// libpcap's read timeout bounds how long a packet waits in the buffered mode, in
    /// `pcap_loop` too (a kernel ring hands over its block at the timeout): with a 1 ms timeout,
    /// a lone packet, far fewer than the sixteenth of the queue the reader waits for, reaches
    /// it within about that, not at the end of the reader's 20 ms sleep (half the delays at 6
    /// ms at most; 10.5 ms, the rest of the 20 ms sleep the packet came in, when the timeout was not applied).
    #[test]
    fn a_lone_packet_waits_no_longer_than_the_read_timeout_in_pcap_loop() {
        let settings = Settings {
            timeout_ms: 1,
            ..Settings::default()
        };
        let d = lone_packet_delays(1, settings, 15);
        assert!(
            d[d.len() / 2] <= std::time::Duration::from_millis(6),
            "median delay {:?} (all: {d:?})",
            d[d.len() / 2]
        );
    }

    /// Immediate mode: the master wakes the reader for each packet; its timeout (1 s) and the
    /// sleep's cap (20 ms) never come into it (half the delays at 6 ms at most).
    #[test]
    fn immediate_mode_hands_each_packet_over_at_once() {
        let settings = Settings {
            timeout_ms: 1000,
            immediate: true,
            ..Settings::default()
        };
        let d = lone_packet_delays(2, settings, 15);
        assert!(
            d[d.len() / 2] <= std::time::Duration::from_millis(6),
            "median delay {:?} (all: {d:?})",
            d[d.len() / 2]
        );
    }

    /// A handle closed after 30 of a 100-packet queue (a batch of 64 received): the master
    /// counts 30 delivered and the other 70 dropped with their consumer gone, not the whole
    /// batch delivered; a reader of the queue opened after that first one gets what it left.
    #[test]
    fn packets_received_but_never_handed_out_are_not_counted_delivered() {
        let (id, mut master) = cluster(3, 1024);
        let pool = Arc::new(
            Pool::new(&PoolConfig {
                frames: 256,
                ..PoolConfig::default()
            })
            .unwrap(),
        );
        for _ in 0..100 {
            publish_one(&mut master, &pool);
        }
        let read = |n: usize| {
            let mut h = Handle::new(&format!("cluster:{id}@0"));
            h.settings.timeout_ms = 200;
            assert_eq!(h.activate(), 0, "{}", h.err);
            for _ in 0..n {
                if h.ready().is_none() {
                    // Waits up to the timeout: a packet missing is an error, not a hang.
                    match h.next(true, false, &mut || false) {
                        Next::Packet(p) => assert_eq!(p.caplen, 60),
                        other => panic!("{other:?}: {}", h.err),
                    }
                }
            }
            let (recv, drop, _) = h.stats().unwrap();
            (recv - drop, h.batch.len())
        };
        let (got, batch) = read(30);
        assert_eq!(batch, 64, "a whole batch received");
        assert_eq!(
            got, 64,
            "received, as pcap_stats counts them before the close"
        );
        // The second reader attaches before the master notices the first left: it gets the
        // 34 the first received and never handed out, then the rest.
        let (got, _) = read(70);
        assert_eq!(got, 70, "the 70 the first reader left");
        master.maintain();
        let q = &master.stats().queues[0];
        assert_eq!(
            (q.delivered, q.consumer_gone, q.enqueued),
            (100, 0, 100),
            "{q:?}"
        );
        master.close();

        let (id, mut master) = cluster(4, 1024);
        for _ in 0..100 {
            publish_one(&mut master, &pool);
        }
        let mut h = Handle::new(&format!("cluster:{id}@0"));
        assert_eq!(h.activate(), 0, "{}", h.err);
        for _ in 0..30 {
            assert!(matches!(h.next(true, true, &mut || false), Next::Packet(_)));
        }
        drop(h);
        master.maintain();
        let q = &master.stats().queues[0];
        assert_eq!((q.delivered, q.consumer_gone), (30, 70), "{q:?}");
        master.close();
    }

    /// The loops' fast path (`ready`, then `next` when it gives nothing) hands out the same
    /// packets, times included, as `next` alone; it steps aside while a filter runs or one
    /// direction is asked for.
    #[test]
    fn the_fast_path_hands_out_what_next_does_and_steps_aside_for_a_filter() {
        let mut slow = Vec::new();
        let mut h = sample();
        while let Next::Packet(p) = h.next(true, true, &mut || false) {
            slow.push(p);
        }
        assert!(slow.len() > 3);
        let mut fast = Vec::new();
        let mut h = sample();
        let mut via_ready = 0;
        loop {
            if let Some(p) = h.ready() {
                via_ready += 1;
                fast.push(p);
                continue;
            }
            match h.next(true, true, &mut || false) {
                Next::Packet(p) => fast.push(p),
                _ => break,
            }
        }
        // Each handle has its own frames: everything but where the bytes are.
        let seen = |v: &[Packet]| -> Vec<(u32, u32, i64, i64)> {
            v.iter().map(|p| (p.caplen, p.len, p.sec, p.frac)).collect()
        };
        assert!(seen(&fast) == seen(&slow), "the fast path differs");
        assert!(
            via_ready > 0,
            "every packet after a batch's first goes through ready"
        );
        fn keep(_: &[Insn], _: &[u8], _: u32) -> u32 {
            MAX_SNAPLEN
        }
        let mut h = sample();
        h.set_filter(vec![ret(0), ret(MAX_SNAPLEN)], keep);
        assert!(matches!(h.next(true, true, &mut || false), Next::Packet(_)));
        assert_eq!(h.ready(), None);
        let mut h = sample();
        assert_eq!(h.set_direction(DIRECTION_IN), 0);
        assert!(matches!(h.next(true, true, &mut || false), Next::Packet(_)));
        assert_eq!(h.ready(), None);
    }

    /// The timestamp split with the second of the last packet kept gives what dividing each
    /// time gives: within a second, across seconds, going back in time (an unsorted savefile),
    /// near the epoch and at the largest time, in microseconds and nanoseconds; the second kept
    /// never holds a time of 0.
    #[test]
    fn timestamps_split_as_by_division_whatever_their_order() {
        let times = [
            1_764_300_000_123_456_789u64,
            1_764_300_000_999_999_999,
            1_764_300_001_000_000_000,
            1_764_300_001_000_000_999,
            1_764_299_999_999_999_999,
            1_764_300_000_000_000_000,
            1,
            999_999_999,
            1_000_000_000,
            0,
            u64::MAX,
            u64::MAX - 1_000_000_000,
            1_764_300_002_500_000_000,
            1_764_300_002_500_000_000,
        ];
        for nano in [false, true] {
            let mut h = Handle::new("cluster:1@0");
            h.nano = nano;
            for &ts in &times {
                let ns = (ts % 1_000_000_000) as i64;
                let want = (
                    (ts / 1_000_000_000) as i64,
                    if nano { ns } else { ns / 1000 },
                );
                assert_eq!(h.split_time(ts), want, "ts {ts}, nano {nano}");
                // `ready` hands over a packet of the second kept without a look at its time
                // but this: a time of 0 (none) must never fall in it.
                assert!(
                    0u64.wrapping_sub(h.sec_start) >= 1_000_000_000,
                    "after ts {ts}, a time of 0 falls in the second kept"
                );
            }
        }
    }

    #[test]
    fn an_unknown_cluster_is_an_error_not_a_panic() {
        let mut h = Handle::new("cluster:4000000000@0");
        assert_ne!(h.activate(), 0);
        assert!(!h.activated);
        assert!(!h.err.is_empty());
        assert_eq!(h.next(false, false, &mut || false), Next::Error);
        assert!(h.stats().is_none());
        assert!(h.inject(&[0; 60]).is_none());
    }
}

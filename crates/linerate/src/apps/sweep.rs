//! `linerate sweep`: netperf's UDP_STREAM by message size, through the kernel's UDP stack.
//!
//! For each message size, a [`UdpSender`] sends datagrams of that size for a while (batches of
//! `sendmmsg`, optionally paced to a rate) and a receiver counts those that arrive
//! (`recvmmsg`). The receiver is a [`LocalSink`] (a thread of this process reading a socket
//! opened where the datagrams go: in a network namespace, entered by a helper thread only to
//! open it) or a [`RemoteSink`] (a `linerate sweep --serve` on another host, told about each
//! size over a TCP control connection and asked what it received: [`serve`]).
//!
//! Each datagram of 12 bytes or more starts with a tag (`LRSW`, the run, the size's number),
//! so that the receiver counts only this size's datagrams of this run; shorter ones are
//! counted by length. Anything else that reaches the port is counted apart (`other`).
#![deny(unsafe_code)]

use crate::apps::gen::{self, template::TemplateSpec, vary::SizeSpec, GenOptions, StreamSpec};
use crate::mem::Batch;
use crate::port::linkstats::netns;
use crate::port::udp::{RxBufs, UdpReceiver, UdpSender, MAX_BATCH, RX_COPY};
use crate::port::Port;
use std::collections::BTreeMap;
use std::io::{self, BufReader, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Errors of `sweep`.
#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    /// The target namespace does not exist.
    #[error("no network namespace '{0}' (/run/netns/{0} does not exist; list them with `ip netns list`)")]
    NoNamespace(String),
    /// The target interface has no IPv4 address, or does not exist.
    #[error("{target}: {why}")]
    BadTarget {
        /// `NETNS:IFACE`.
        target: String,
        /// What is wrong and what to do.
        why: String,
    },
    /// No `linerate sweep --serve` answered.
    #[error("no `linerate sweep --serve` answers on {addr} ({why}); start one there with `linerate sweep --serve --port {port}`")]
    NoServer {
        /// Where it was asked.
        addr: String,
        /// The port.
        port: u16,
        /// What happened.
        why: String,
    },
    /// The server broke the exchange.
    #[error("sweep server {addr}: {why}")]
    Protocol {
        /// The server.
        addr: String,
        /// What happened.
        why: String,
    },
    /// A linerate port could not be opened or used.
    #[error("{uri}: {source}")]
    Port {
        /// The port.
        uri: String,
        /// Why.
        source: crate::port::PortError,
    },
    /// A socket operation failed.
    #[error("{op}: {source}")]
    Os {
        /// What was done.
        op: String,
        /// The OS error.
        source: io::Error,
    },
}

impl SweepError {
    /// Whether the user named something wrong (exit code 2).
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            SweepError::NoNamespace(_)
                | SweepError::BadTarget { .. }
                | SweepError::Port {
                    source: crate::port::PortError::NoInterface(_)
                        | crate::port::PortError::BadUri { .. },
                    ..
                }
        )
    }
}

fn os(op: impl Into<String>) -> impl FnOnce(io::Error) -> SweepError {
    let op = op.into();
    move |source| SweepError::Os { op, source }
}

/// Bytes of the tag at the start of each datagram.
pub const TAG_LEN: usize = 12;

/// The tag of size number `seq` of run `run`: `LRSW`, run, seq (big endian).
pub fn tag(run: u32, seq: u32) -> [u8; TAG_LEN] {
    let mut t = [0u8; TAG_LEN];
    t[..4].copy_from_slice(b"LRSW");
    t[4..8].copy_from_slice(&run.to_be_bytes());
    t[8..].copy_from_slice(&seq.to_be_bytes());
    t
}

/// What a receiver counted for one size.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RxReport {
    /// Datagrams of this size (and tag) received.
    pub received: u64,
    /// Their payload bytes.
    pub bytes: u64,
    /// Other datagrams that reached the port meanwhile (another size's late ones, strangers).
    pub other: u64,
    /// Datagrams the receiving socket dropped meanwhile (its receive buffer was full); None
    /// when the kernel does not say.
    pub socket_drops: Option<u64>,
    /// Nanoseconds from the first to the last datagram received (0: fewer than two).
    pub span_ns: u64,
}

/// What the sender did for one size.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TxReport {
    /// Datagrams the kernel took.
    pub sent: u64,
    /// Datagrams it refused, by reason (`ENOBUFS`, `ECONNREFUSED` …).
    pub errors: BTreeMap<String, u64>,
    /// Nanoseconds from the first send to the end of the last.
    pub elapsed_ns: u64,
    /// Whether a stop (a signal) cut it short.
    pub stopped: bool,
}

impl TxReport {
    /// Datagrams refused, all reasons.
    pub fn errors_total(&self) -> u64 {
        self.errors.values().sum()
    }
}

/// One row of the table: a message size, sent and received.
#[derive(Clone, Debug, PartialEq)]
pub struct SizeRow {
    /// Message size (UDP payload bytes).
    pub size: usize,
    /// The rate asked (messages per second), if one was.
    pub asked_pps: Option<f64>,
    /// The sender's side.
    pub tx: TxReport,
    /// The receiver's side.
    pub rx: RxReport,
}

impl SizeRow {
    /// Seconds the size was sent for.
    pub fn elapsed_s(&self) -> f64 {
        self.tx.elapsed_ns as f64 / 1e9
    }

    fn per_s(&self, n: u64) -> f64 {
        let s = self.elapsed_s();
        if s > 0.0 {
            n as f64 / s
        } else {
            0.0
        }
    }

    /// Messages sent per second.
    pub fn tx_pps(&self) -> f64 {
        self.per_s(self.tx.sent)
    }

    /// Megabits of messages sent per second (payload, as netperf counts).
    pub fn tx_mbps(&self) -> f64 {
        self.per_s(self.tx.sent * self.size as u64) * 8.0 / 1e6
    }

    /// Messages received per second (over the same time as the sender's, as netperf does).
    pub fn rx_pps(&self) -> f64 {
        self.per_s(self.rx.received)
    }

    /// Megabits of messages received per second.
    pub fn rx_mbps(&self) -> f64 {
        self.per_s(self.rx.bytes) * 8.0 / 1e6
    }

    /// Messages sent and not received (0 when more were received than sent: see
    /// [`SizeRow::excess`]).
    pub fn lost(&self) -> u64 {
        self.tx.sent.saturating_sub(self.rx.received)
    }

    /// Messages received beyond those sent: an anomaly (duplicates on the way, or strays
    /// carrying this size's tag), for which no loss can be told.
    pub fn excess(&self) -> u64 {
        self.rx.received.saturating_sub(self.tx.sent)
    }

    /// [`SizeRow::lost`] in per cent of those sent (0 when none were sent); None when more
    /// were received than sent ([`SizeRow::excess`]): that is no loss of 0 %.
    pub fn loss_pct(&self) -> Option<f64> {
        if self.excess() > 0 {
            None
        } else if self.tx.sent == 0 {
            Some(0.0)
        } else {
            Some(self.lost() as f64 * 100.0 / self.tx.sent as f64)
        }
    }
}

/// The name of an errno for reports.
pub fn errno_name(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::ENOBUFS) => "ENOBUFS".into(),
        Some(libc::EAGAIN) => "EAGAIN".into(),
        Some(libc::ECONNREFUSED) => "ECONNREFUSED".into(),
        Some(libc::EHOSTUNREACH) => "EHOSTUNREACH".into(),
        Some(libc::ENETUNREACH) => "ENETUNREACH".into(),
        Some(libc::EMSGSIZE) => "EMSGSIZE".into(),
        Some(libc::EPERM) => "EPERM".into(),
        Some(libc::EACCES) => "EACCES".into(),
        Some(libc::ENOMEM) => "ENOMEM".into(),
        Some(n) => format!("errno {n}"),
        None => e.to_string(),
    }
}

/// How one size is sent.
#[derive(Clone, Debug)]
pub struct SendPlan {
    /// Message size.
    pub size: usize,
    /// How long.
    pub duration: Duration,
    /// Messages per second asked (None: as fast as the kernel takes them).
    pub rate_pps: Option<f64>,
    /// Messages per sendmmsg call (1..=1024).
    pub batch: usize,
}

/// Sends one size: batches of `plan.batch` datagrams for `plan.duration` (paced when a rate is
/// asked), until then or `stop`. A refused datagram is counted under its reason and not sent.
pub fn send_size(tx: &mut UdpSender, plan: &SendPlan, stop: &AtomicBool) -> TxReport {
    let mut r = TxReport::default();
    let batch = plan.batch.clamp(1, MAX_BATCH);
    let batch = match plan.rate_pps {
        // About a batch per millisecond at most, so that pacing stays smooth.
        Some(pps) => batch.min(((pps / 1000.0) as usize).max(1)),
        None => batch,
    };
    let t0 = Instant::now();
    let end = t0 + plan.duration;
    let mut attempted: u64 = 0;
    loop {
        if stop.load(Ordering::Relaxed) {
            r.stopped = true;
            break;
        }
        let now = Instant::now();
        if now >= end {
            break;
        }
        if let Some(pps) = plan.rate_pps {
            let due = t0 + Duration::from_secs_f64(attempted as f64 / pps);
            if due > now {
                std::thread::sleep((due - now).min(end - now).min(Duration::from_millis(50)));
                continue;
            }
        }
        match tx.send(batch, plan.size) {
            Ok(n) => {
                r.sent += n as u64;
                attempted += n as u64;
            }
            Err(e) => {
                *r.errors.entry(errno_name(&e)).or_insert(0) += 1;
                attempted += 1;
                tx.clear_errors();
                if e.raw_os_error() == Some(libc::ENOBUFS) || e.kind() == io::ErrorKind::WouldBlock
                {
                    // The queue toward the device is full: let it drain a little.
                    std::thread::yield_now();
                }
            }
        }
    }
    r.elapsed_ns = t0.elapsed().as_nanos() as u64;
    r
}

/// The tag [`LocalSink::begin`] takes for frames over a linerate port (`--raw`): their UDP
/// source and destination ports.
pub fn raw_tag(sport: u16, dport: u16) -> [u8; TAG_LEN] {
    let mut t = [0u8; TAG_LEN];
    t[..2].copy_from_slice(&sport.to_be_bytes());
    t[2..4].copy_from_slice(&dport.to_be_bytes());
    t
}

/// Smallest frame over a linerate port (bytes without the CRC).
pub const MIN_FRAME: usize = 60;
/// Largest frame over a linerate port: the largest the generator's templates build (a jumbo
/// frame of a 9000-byte MTU, with room for an 802.1Q tag); the ports' own limits (their MTU,
/// their packet buffers) are checked apart.
pub const MAX_FRAME: usize = crate::apps::gen::template::MAX_JUMBO_FRAME;

/// How one size is sent over a linerate port: Ethernet/IPv4/UDP frames built by the
/// generator's templates.
#[derive(Clone, Debug)]
pub struct RawPlan {
    /// The frames' headers (addresses and ports).
    pub template: TemplateSpec,
    /// Frame length without the CRC ([`MIN_FRAME`]..=[`MAX_FRAME`]).
    pub frame_len: usize,
    /// How long.
    pub duration: Duration,
    /// Frames per second asked (None: as fast as the port takes them).
    pub rate_pps: Option<f64>,
}

/// Sends one size over `port` with the generator (`gen`'s worker: its batches, pacing and
/// counters), until the duration or `stop`. Frames the port refused are counted under the
/// port's drop reason and not as sent.
pub fn send_size_raw(
    port: &mut dyn Port,
    plan: &RawPlan,
    stop: &AtomicBool,
) -> Result<TxReport, SweepError> {
    let opts = GenOptions {
        streams: vec![StreamSpec {
            template: plan.template.clone(),
            size: SizeSpec::Fixed((plan.frame_len + 4) as u32),
            pps: plan.rate_pps,
            probe: false,
            ..StreamSpec::default()
        }],
        duration: Some(plan.duration),
        ..GenOptions::default()
    };
    let clock = crate::time::MonoClock;
    let uri = port.name().to_string();
    let rep = gen::run(port, &opts, &clock, stop, None, |_| {}).map_err(|e| SweepError::Os {
        op: format!("{uri}: sending"),
        source: io::Error::other(e.to_string()),
    })?;
    // The report's port counters are this run's own.
    let drops = rep.port.tx_drops;
    let mut errors = BTreeMap::new();
    for r in crate::port::DropReason::ALL {
        let n = drops.get(r);
        if n > 0 {
            errors.insert(r.name().to_string(), n);
        }
    }
    let refused: u64 = errors.values().sum();
    Ok(TxReport {
        sent: rep.pkts.saturating_sub(refused),
        errors,
        elapsed_ns: rep.end_ns.max(rep.last_ns).saturating_sub(rep.first_ns),
        stopped: stop.load(Ordering::Relaxed),
    })
}

/// What the receiving thread is told and what it counted.
#[derive(Debug, Default)]
struct Phase {
    gen: u64,
    len: usize,
    tag: [u8; TAG_LEN],
    /// The receiver's drop counter when the thread began counting this generation.
    drops_begin: Option<u64>,
    /// Generation whose closing drop counter is asked for, and the answer.
    drops_req: u64,
    drops_end: Option<Option<u64>>,
    received: u64,
    bytes: u64,
    other: u64,
    first_ns: u64,
    last_ns: u64,
}

#[derive(Debug)]
struct RxShared {
    phase: Mutex<Phase>,
    /// Generation the thread is counting for.
    seen: AtomicU64,
    /// Monotonic time of the last datagram of any kind (ns).
    last_any_ns: AtomicU64,
    stop: AtomicBool,
    failed: Mutex<Option<io::Error>>,
}

/// A receiver in this process: a thread counting the datagrams on one socket.
#[derive(Debug)]
pub struct LocalSink {
    /// The UDP socket (None: a linerate port receives).
    sock: Option<Arc<UdpReceiver>>,
    shared: Arc<RxShared>,
    thread: Option<std::thread::JoinHandle<()>>,
    addr: SocketAddrV4,
}

/// What the receiving thread reads from.
enum Source {
    /// A UDP socket: each datagram's length and first bytes.
    Udp(Arc<UdpReceiver>, Box<RxBufs>),
    /// A linerate port: each frame (without CRC).
    Port(Box<dyn Port>, Box<Batch>),
}

impl Source {
    fn recv(&mut self, f: &mut dyn FnMut(usize, &[u8])) -> io::Result<usize> {
        match self {
            Source::Udp(s, bufs) => s.recv(bufs, f),
            Source::Port(p, b) => {
                let n = p
                    .rx(b)
                    .map_err(|e| io::Error::other(format!("{}: {e}", p.name())))?;
                for i in 0..b.len() {
                    let d = b.data(i);
                    f(d.len(), &d[..d.len().min(RX_COPY)]);
                }
                b.clear();
                Ok(n)
            }
        }
    }

    /// What the receiver dropped so far: the socket's drops, or the port's receive drops
    /// (a full ring: the kernel's count).
    fn drops(&mut self) -> Option<u64> {
        match self {
            Source::Udp(s, _) => s.drops().ok(),
            Source::Port(p, _) => Some(p.stats().rx_drops.total()),
        }
    }
}

/// Whether frame `head` (Ethernet, IPv4, UDP) goes from port `tag[0..2]` to port `tag[2..4]`.
fn raw_match(head: &[u8], tag: &[u8; TAG_LEN]) -> bool {
    if head.len() < 34 || head[12..14] != [0x08, 0x00] || head[14] >> 4 != 4 || head[23] != 17 {
        return false;
    }
    let l4 = 14 + usize::from(head[14] & 0x0f) * 4;
    head.len() >= l4 + 4 && head[l4..l4 + 4] == tag[..4]
}

/// How long a receive call waits before the thread looks at its orders again.
const RX_WAIT_MS: u32 = 20;

impl LocalSink {
    /// Binds `addr` (in `netns` when given: the socket is opened by a helper thread that
    /// entered the namespace, and stays there) and starts the counting thread.
    pub fn bind(
        netns: Option<&str>,
        addr: SocketAddrV4,
        rcvbuf: Option<usize>,
    ) -> Result<LocalSink, SweepError> {
        let open = || UdpReceiver::bind(addr, rcvbuf, RX_WAIT_MS);
        let sock = match netns {
            None => open(),
            Some(ns) => in_netns(ns, open)?,
        }
        .map_err(os(format!("binding UDP {addr}")))?;
        let addr = sock.local_addr().map_err(os("getsockname"))?;
        let sock = Arc::new(sock);
        let src = Source::Udp(sock.clone(), Box::new([[0; RX_COPY]; 64]));
        Ok(Self::start(Some(sock), src, addr, false))
    }

    /// Opens linerate port `uri` to receive (in `netns` when given: opened by a helper thread
    /// that entered the namespace; its sockets stay there) and starts the counting thread,
    /// which counts the Ethernet/IPv4/UDP frames of the length and ports [`LocalSink::begin`]
    /// names ([`raw_tag`]).
    pub fn open_port(netns: Option<&str>, uri: &str) -> Result<LocalSink, SweepError> {
        let opts = crate::port::PortOptions {
            rx_wait_ms: RX_WAIT_MS,
            ..Default::default()
        };
        let open = || crate::open_rx(uri, &opts);
        let port = match netns {
            None => open(),
            Some(ns) => in_netns(ns, open)?,
        }
        .map_err(|source| SweepError::Port {
            uri: uri.to_string(),
            source,
        })?;
        let src = Source::Port(port, Box::default());
        Ok(Self::start(
            None,
            src,
            SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0),
            true,
        ))
    }

    fn start(sock: Option<Arc<UdpReceiver>>, src: Source, addr: SocketAddrV4, raw: bool) -> Self {
        let shared = Arc::new(RxShared {
            phase: Mutex::new(Phase::default()),
            seen: AtomicU64::new(0),
            last_any_ns: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            failed: Mutex::new(None),
        });
        let sh2 = shared.clone();
        let thread = std::thread::Builder::new()
            .name("sweep-rx".into())
            .spawn(move || rx_loop(src, &sh2, raw))
            .ok();
        LocalSink {
            sock,
            shared,
            thread,
            addr,
        }
    }

    /// The bound address (the port the kernel picked for port 0).
    pub fn addr(&self) -> SocketAddrV4 {
        self.addr
    }

    /// The receive buffer granted (bytes).
    pub fn rcvbuf(&self) -> usize {
        self.sock.as_ref().map_or(0, |s| s.rcvbuf().unwrap_or(0))
    }

    /// Sets the receive buffer (of a UDP receiver; nothing for a port).
    pub fn set_rcvbuf(&self, bytes: usize) -> Result<(), SweepError> {
        match &self.sock {
            Some(s) => s
                .set_rcvbuf(bytes)
                .map_err(os(format!("setting the receive buffer to {bytes} B"))),
            None => Ok(()),
        }
    }

    /// Starts counting datagrams of `len` bytes carrying `tag` (for a port: frames of `len`
    /// bytes between the UDP ports of [`raw_tag`]) from now on; returns once the receiving
    /// thread counts for them.
    pub fn begin(&mut self, len: usize, tag: [u8; TAG_LEN]) -> Result<(), SweepError> {
        self.check()?;
        let gen = {
            let mut p = self.shared.phase.lock().unwrap_or_else(|e| e.into_inner());
            *p = Phase {
                gen: p.gen + 1,
                len,
                tag,
                ..Phase::default()
            };
            p.gen
        };
        let t0 = Instant::now();
        while self.shared.seen.load(Ordering::Acquire) < gen {
            if t0.elapsed() > Duration::from_secs(2) {
                return Err(SweepError::Os {
                    op: "the receiving thread does not answer".into(),
                    source: io::Error::new(io::ErrorKind::TimedOut, "2 s"),
                });
            }
            self.check()?;
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(())
    }

    fn check(&self) -> Result<(), SweepError> {
        if let Some(e) = self
            .shared
            .failed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            return Err(SweepError::Os {
                op: format!("receiving on UDP {}", self.addr),
                source: e,
            });
        }
        if self.thread.is_none() {
            return Err(SweepError::Os {
                op: "starting the receiving thread".into(),
                source: io::Error::other("thread not started"),
            });
        }
        Ok(())
    }

    /// Waits for the datagrams still on their way (until `sent` arrived, nothing came for
    /// `idle`, or `limit` passed) and returns what was counted since [`LocalSink::begin`].
    pub fn finish(&mut self, sent: u64, idle: Duration, limit: Duration) -> RxReport {
        let t0 = Instant::now();
        let idle_ns = idle.as_nanos() as u64;
        loop {
            let got = self
                .shared
                .phase
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .received;
            if got >= sent || t0.elapsed() >= limit {
                break;
            }
            let last = self.shared.last_any_ns.load(Ordering::Relaxed);
            let now = crate::time::mono_ns();
            if t0.elapsed() >= idle && now.saturating_sub(last) >= idle_ns {
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        // The receiver's drop counter now, read by the thread (a port is its alone).
        {
            let mut p = self.shared.phase.lock().unwrap_or_else(|e| e.into_inner());
            p.drops_req = p.gen;
            p.drops_end = None;
        }
        let t1 = Instant::now();
        loop {
            let done = self
                .shared
                .phase
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .drops_end
                .is_some();
            if done || t1.elapsed() > Duration::from_secs(1) || self.check().is_err() {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        // What the thread counted, from its last whole batch.
        let p = self.shared.phase.lock().unwrap_or_else(|e| e.into_inner());
        let socket_drops = match (p.drops_begin, p.drops_end.flatten()) {
            (Some(a), Some(b)) => Some(b.saturating_sub(a)),
            _ => None,
        };
        RxReport {
            received: p.received,
            bytes: p.bytes,
            other: p.other,
            socket_drops,
            span_ns: p.last_ns.saturating_sub(p.first_ns),
        }
    }
}

impl Drop for LocalSink {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn rx_loop(mut src: Source, sh: &RxShared, raw: bool) {
    let mut counting = 0u64;
    while !sh.stop.load(Ordering::Relaxed) {
        let (gen, len, tag, req, answered) = {
            let p = sh.phase.lock().unwrap_or_else(|e| e.into_inner());
            (p.gen, p.len, p.tag, p.drops_req, p.drops_end.is_some())
        };
        if gen != counting {
            counting = gen;
            let d = src.drops();
            let mut p = sh.phase.lock().unwrap_or_else(|e| e.into_inner());
            if p.gen == gen {
                p.drops_begin = d;
            }
        }
        if req == gen && gen > 0 && !answered {
            let d = src.drops();
            let mut p = sh.phase.lock().unwrap_or_else(|e| e.into_inner());
            if p.gen == gen && p.drops_req == gen {
                p.drops_end = Some(d);
            }
        }
        sh.seen.store(gen, Ordering::Release);
        let (mut mine, mut bytes, mut other) = (0u64, 0u64, 0u64);
        let r = src.recv(&mut |l, head| {
            let ours = gen > 0
                && l == len
                && if raw {
                    raw_match(head, &tag)
                } else {
                    head.get(..TAG_LEN) == Some(&tag[..])
                };
            if ours {
                mine += 1;
                bytes += l as u64;
            } else {
                other += 1;
            }
        });
        match r {
            Ok(0) => continue,
            Ok(_) => {
                let now = crate::time::mono_ns();
                sh.last_any_ns.store(now, Ordering::Relaxed);
                let mut p = sh.phase.lock().unwrap_or_else(|e| e.into_inner());
                if p.gen == gen {
                    if mine > 0 {
                        if p.received == 0 {
                            p.first_ns = now;
                        }
                        p.last_ns = now;
                    }
                    p.received += mine;
                    p.bytes += bytes;
                    p.other += other;
                } else {
                    // Orders changed during the call: these belong to the size before.
                    p.other += mine + other;
                }
            }
            Err(e) => {
                *sh.failed.lock().unwrap_or_else(|e| e.into_inner()) = Some(e);
                return;
            }
        }
    }
}

fn in_netns<T: Send>(ns: &str, f: impl FnOnce() -> T + Send) -> Result<T, SweepError> {
    netns::run_in(ns, f).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => SweepError::NoNamespace(ns.to_string()),
        _ => {
            let hint = match e.raw_os_error() {
                Some(libc::EPERM) | Some(libc::EACCES) => {
                    " (entering a namespace needs root or CAP_SYS_ADMIN)"
                }
                _ => "",
            };
            SweepError::Os {
                op: format!("entering network namespace '{ns}'{hint}"),
                source: e,
            }
        }
    })
}

/// The IPv4 address of `iface` in namespace `netns` (None: this one), for `--to NETNS:IFACE`.
pub fn target_address(netns: Option<&str>, iface: &str) -> Result<Ipv4Addr, SweepError> {
    let label = match netns {
        Some(ns) => format!("{ns}:{iface}"),
        None => iface.to_string(),
    };
    let r = match netns {
        Some(ns) => in_netns(ns, || crate::port::udp::ipv4_of(iface))?,
        None => crate::port::udp::ipv4_of(iface),
    };
    let list = match netns {
        Some(ns) => format!("ip -n {ns} -4 addr show"),
        None => "ip -4 addr show".into(),
    };
    match r {
        Ok(Some(a)) => Ok(a),
        Ok(None) => Err(SweepError::BadTarget {
            target: label,
            why: format!(
                "the interface has no IPv4 address (see `{list}`; add one with `ip addr add`)"
            ),
        }),
        Err(e)
            if e.raw_os_error() == Some(libc::ENODEV)
                || e.kind() == io::ErrorKind::InvalidInput =>
        {
            Err(SweepError::BadTarget {
                target: label,
                why: format!("no such interface (list them with `{list}`)"),
            })
        }
        Err(e) => Err(SweepError::Os {
            op: format!("{label}: reading its IPv4 address"),
            source: e,
        }),
    }
}

/// Whether network namespace `ns` (a name of `ip netns list`) is the one this thread is in.
fn is_own_netns(ns: &str) -> bool {
    use std::os::unix::fs::MetadataExt;
    let id = |p: &str| std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()));
    let theirs = id(&format!("/run/netns/{ns}"));
    theirs.is_some() && theirs == id("/proc/thread-self/ns/net")
}

/// Checks the interface of `--to NETNS:IFACE` can receive what this namespace sends: it
/// exists and is no loopback of another namespace (its address would be that namespace's own:
/// what is sent from here to it stays here). Returns what [`crate::port::udp::link_of`] says.
pub fn check_target(netns: &str, iface: &str) -> Result<crate::port::udp::LinkInfo, SweepError> {
    let label = format!("{netns}:{iface}");
    let list = format!("ip -n {netns} link show");
    let info = in_netns(netns, || crate::port::udp::link_of(iface))?.map_err(|e| {
        if e.raw_os_error() == Some(libc::ENODEV) || e.kind() == io::ErrorKind::InvalidInput {
            SweepError::BadTarget {
                target: label.clone(),
                why: format!("no such interface (list them with `{list}`)"),
            }
        } else {
            SweepError::Os {
                op: format!("{label}: reading its flags and MTU"),
                source: e,
            }
        }
    })?;
    if info.loopback && !is_own_netns(netns) {
        return Err(SweepError::BadTarget {
            target: label,
            why: format!(
                "{iface} is the loopback interface of namespace {netns}: its address belongs \
                 to that namespace alone, and nothing sent from this namespace arrives there \
                 (it would go to this namespace's own loopback). Name the interface the \
                 traffic arrives on, e.g. the far end of a veth pair (see `{list}`)"
            ),
        });
    }
    Ok(info)
}

/// The MAC address of `iface` in namespace `netns` (None: this one).
pub fn target_mac(netns: Option<&str>, iface: &str) -> Result<[u8; 6], SweepError> {
    let label = match netns {
        Some(ns) => format!("{ns}:{iface}"),
        None => iface.to_string(),
    };
    let r = match netns {
        Some(ns) => in_netns(ns, || crate::port::udp::mac_of(iface))?,
        None => crate::port::udp::mac_of(iface),
    };
    r.map_err(|e| SweepError::BadTarget {
        target: label,
        why: format!("no MAC address: {e}"),
    })
}

/// A receiver: in this process, or a `linerate sweep --serve` elsewhere.
#[derive(Debug)]
pub enum Sink {
    /// A thread of this process.
    Local(LocalSink),
    /// A server over TCP.
    Remote(RemoteSink),
}

/// How long to wait for datagrams still on their way after the sender stopped.
pub const DRAIN_IDLE: Duration = Duration::from_millis(200);
/// The longest wait for them.
pub const DRAIN_LIMIT: Duration = Duration::from_secs(2);

impl Sink {
    /// Where to send the datagrams.
    pub fn data_addr(&self) -> SocketAddrV4 {
        match self {
            Sink::Local(l) => l.addr(),
            Sink::Remote(r) => r.data,
        }
    }

    /// The receive buffer granted (bytes).
    pub fn rcvbuf(&self) -> usize {
        match self {
            Sink::Local(l) => l.rcvbuf(),
            Sink::Remote(r) => r.rcvbuf,
        }
    }

    /// Tells the receiver a size begins.
    pub fn begin(&mut self, len: usize, tag: [u8; TAG_LEN], secs: f64) -> Result<(), SweepError> {
        match self {
            Sink::Local(l) => l.begin(len, tag),
            Sink::Remote(r) => r.begin(len, tag, secs),
        }
    }

    /// Tells the receiver the size ended after `sent` datagrams; returns what it counted.
    pub fn finish(&mut self, sent: u64) -> Result<RxReport, SweepError> {
        match self {
            Sink::Local(l) => Ok(l.finish(sent, DRAIN_IDLE, DRAIN_LIMIT)),
            Sink::Remote(r) => r.finish(sent),
        }
    }
}

/// The control exchange's first line (and its version).
const HELLO: &str = "LINERATE-SWEEP 1";
/// Longest control line.
const MAX_LINE: usize = 256;
/// Most characters of the other end's text shown in a message.
pub const MAX_SHOWN: usize = 200;

/// Text from the other end of a control connection made safe to print: control characters
/// (escape sequences, carriage returns, bells …) and Unicode direction overrides are shown
/// escaped (`\u{1b}`), and the text is cut to [`MAX_SHOWN`] characters.
pub fn shown(s: &str) -> String {
    let mut out = String::new();
    let mut n = 0;
    for c in s.chars() {
        if n >= MAX_SHOWN {
            out.push_str(" [cut]");
            break;
        }
        let unsafe_char = c.is_control()
            || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
        if unsafe_char {
            let e = c.escape_unicode();
            n += e.len();
            out.extend(e);
        } else {
            out.push(c);
            n += 1;
        }
    }
    out
}

/// A `linerate sweep --serve` on another host, over a TCP control connection.
#[derive(Debug)]
pub struct RemoteSink {
    ctl: BufReader<TcpStream>,
    server: String,
    data: SocketAddrV4,
    rcvbuf: usize,
    limits: Option<ServeLimits>,
}

fn read_line(
    r: &mut BufReader<TcpStream>,
    limit: Duration,
    stop: Option<&AtomicBool>,
) -> io::Result<String> {
    let t0 = Instant::now();
    let mut line = Vec::new();
    loop {
        let _ = r
            .get_ref()
            .set_read_timeout(Some(Duration::from_millis(200)));
        let mut byte = [0u8; 1];
        match io::Read::read(r, &mut byte) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the connection was closed",
                ))
            }
            Ok(_) => {
                if byte[0] == b'\n' {
                    // What the other end wrote is shown in messages and logs: made safe here.
                    return String::from_utf8(line)
                        .map(|l| shown(l.trim_end_matches('\r')))
                        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "not text"));
                }
                line.push(byte[0]);
                if line.len() > MAX_LINE {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "a control line longer than 256 bytes",
                    ));
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) =>
            {
                if t0.elapsed() >= limit {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("no answer within {} s", limit.as_secs_f64()),
                    ));
                }
                if stop.is_some_and(|s| s.load(Ordering::Relaxed)) {
                    return Err(io::Error::new(io::ErrorKind::Interrupted, "stopped"));
                }
            }
            Err(e) => return Err(e),
        }
    }
}

/// `key=value` of a control line.
fn field(line: &str, key: &str) -> Option<String> {
    line.split_whitespace()
        .filter_map(|w| w.split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v.to_string())
}

fn num(line: &str, key: &str) -> Option<u64> {
    field(line, key)?.parse().ok()
}

/// Time allowed to connect and for the first answers.
pub const CONTROL_TIMEOUT: Duration = Duration::from_secs(3);

impl RemoteSink {
    /// Connects to a `linerate sweep --serve` on `server` (control on TCP, datagrams to the same
    /// port on UDP) and asks for a receive buffer of `rcvbuf` bytes when given.
    pub fn connect(server: SocketAddrV4, rcvbuf: Option<usize>) -> Result<RemoteSink, SweepError> {
        let addr = server.to_string();
        let no = |why: String| SweepError::NoServer {
            addr: addr.clone(),
            port: server.port(),
            why,
        };
        let s = TcpStream::connect_timeout(&SocketAddr::V4(server), CONTROL_TIMEOUT)
            .map_err(|e| no(e.to_string()))?;
        let _ = s.set_nodelay(true);
        let mut ctl = BufReader::new(s);
        ctl.get_mut()
            .write_all(format!("{HELLO} rcvbuf={}\n", rcvbuf.unwrap_or(0)).as_bytes())
            .map_err(|e| no(e.to_string()))?;
        let line = read_line(&mut ctl, CONTROL_TIMEOUT, None).map_err(|e| no(e.to_string()))?;
        if let Some(why) = line.strip_prefix("ERR ") {
            return Err(SweepError::Protocol {
                addr,
                why: why.to_string(),
            });
        }
        if !line.starts_with("OK ") {
            return Err(no(format!(
                "it answered '{}', not a sweep server",
                line.trim()
            )));
        }
        let port = num(&line, "port")
            .and_then(|p| u16::try_from(p).ok())
            .ok_or_else(|| no(format!("no port in '{line}'")))?;
        let limits = match (
            num(&line, "max_secs"),
            num(&line, "max_sizes"),
            num(&line, "max_rcvbuf"),
        ) {
            (Some(max_secs), Some(max_sizes), Some(max_rcvbuf)) => Some(ServeLimits {
                max_secs,
                max_sizes,
                max_rcvbuf,
            }),
            _ => None,
        };
        Ok(RemoteSink {
            ctl,
            data: SocketAddrV4::new(*server.ip(), port),
            rcvbuf: num(&line, "rcvbuf").unwrap_or(0) as usize,
            server: addr,
            limits,
        })
    }

    /// What the server grants (None: a server that does not say).
    pub fn limits(&self) -> Option<ServeLimits> {
        self.limits
    }

    /// The server, for messages.
    pub fn server(&self) -> &str {
        &self.server
    }

    fn proto(&self, why: impl Into<String>) -> SweepError {
        SweepError::Protocol {
            addr: self.server.clone(),
            why: why.into(),
        }
    }

    fn ask(&mut self, line: &str, limit: Duration) -> Result<String, SweepError> {
        self.ctl
            .get_mut()
            .write_all(line.as_bytes())
            .map_err(|e| self.proto(format!("sending '{}': {e}", line.trim())))?;
        let a = read_line(&mut self.ctl, limit, None)
            .map_err(|e| self.proto(format!("after '{}': {e}", line.trim())))?;
        if let Some(why) = a.strip_prefix("ERR ") {
            return Err(self.proto(why.to_string()));
        }
        Ok(a)
    }

    fn begin(&mut self, len: usize, tag: [u8; TAG_LEN], secs: f64) -> Result<(), SweepError> {
        let hex: String = tag.iter().map(|b| format!("{b:02x}")).collect();
        let a = self.ask(
            &format!("BEGIN size={len} tag={hex} secs={}\n", secs.ceil() as u64),
            CONTROL_TIMEOUT,
        )?;
        if a.trim() != "READY" {
            return Err(self.proto(format!("answered '{}' to BEGIN", a.trim())));
        }
        Ok(())
    }

    fn finish(&mut self, sent: u64) -> Result<RxReport, SweepError> {
        let a = self.ask(&format!("END sent={sent}\n"), DRAIN_LIMIT + CONTROL_TIMEOUT)?;
        if !a.starts_with("RESULT ") {
            return Err(self.proto(format!("answered '{}' to END", a.trim())));
        }
        let need = |k: &str| num(&a, k).ok_or_else(|| self.proto(format!("no {k} in '{a}'")));
        Ok(RxReport {
            received: need("received")?,
            bytes: need("bytes")?,
            other: need("other")?,
            socket_drops: num(&a, "drops"),
            span_ns: need("span_ns")?,
        })
    }
}

impl Drop for RemoteSink {
    fn drop(&mut self) {
        let _ = self.ctl.get_mut().write_all(b"BYE\n");
    }
}

/// Longest time a size may last (`sweep -t`).
pub const MAX_SIZE_SECS: u64 = 3600;

/// What a `sweep --serve` grants a remote client, announced in its first answer: a client
/// asking more is refused with the limit, before anything is sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServeLimits {
    /// Longest time per size (seconds).
    pub max_secs: u64,
    /// Most sizes per connection.
    pub max_sizes: u64,
    /// Largest receive buffer a client may ask for (bytes).
    pub max_rcvbuf: u64,
}

/// The limits of `linerate sweep --serve`: 5 minutes per size, 64 sizes, a 64 MiB receive
/// buffer (a server run as root sets it with SO_RCVBUFFORCE, past net.core.rmem_max: kernel
/// memory a stranger must not pin).
pub const SERVE_LIMITS: ServeLimits = ServeLimits {
    max_secs: 300,
    max_sizes: 64,
    max_rcvbuf: 64 << 20,
};

/// How long a server waits for a client's next command between sizes (its first line: the
/// [`CONTROL_TIMEOUT`]).
pub const SERVE_IDLE: Duration = Duration::from_secs(10);

fn parse_tag(hex: &str) -> Option<[u8; TAG_LEN]> {
    if hex.len() != TAG_LEN * 2 || !hex.is_ascii() {
        return None;
    }
    let mut t = [0u8; TAG_LEN];
    for (i, b) in t.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[i * 2..i * 2 + 2], 16).ok()?;
    }
    Some(t)
}

/// What the accepting thread hands the server.
enum Event {
    /// A client to serve (the server was free: it is now busy with it).
    Client(TcpStream, SocketAddr),
    /// A client turned away, busy: a line for the log.
    Refused(String),
}

/// Writes one line to a client without waiting long on it.
fn tell(s: &TcpStream, line: &str) {
    let _ = s.set_write_timeout(Some(Duration::from_secs(1)));
    let mut w: &TcpStream = s;
    let _ = w.write_all(format!("{line}\n").as_bytes());
}

/// `linerate sweep --serve`: answers one client at a time on `listener` (TCP), counting its
/// datagrams on `sink`'s UDP socket (the same port), until `stop`, within `limits`. A client
/// that comes while another is served is told the server is busy (and by whom), not kept
/// waiting; one that says nothing for [`SERVE_IDLE`] is told so and dropped. `log` gets a line
/// per client and per size.
pub fn serve(
    listener: &TcpListener,
    sink: &mut LocalSink,
    limits: ServeLimits,
    stop: &AtomicBool,
    mut log: impl FnMut(&str),
) -> Result<(), SweepError> {
    listener
        .set_nonblocking(true)
        .map_err(os("setting the listener non-blocking"))?;
    let acceptor = listener
        .try_clone()
        .map_err(os("sharing the listener with its accepting thread"))?;
    let default_rcvbuf = sink.rcvbuf();
    // Who is served now, and since when (None: nobody).
    let busy: Arc<Mutex<Option<(SocketAddr, Instant)>>> = Arc::new(Mutex::new(None));
    let done = Arc::new(AtomicBool::new(false));
    let (tx, rx) = std::sync::mpsc::channel::<Result<Event, io::Error>>();
    let (b2, d2) = (busy.clone(), done.clone());
    let thread = std::thread::Builder::new()
        .name("sweep-accept".into())
        .spawn(move || accept_loop(&acceptor, &b2, &d2, &tx))
        .map_err(os("starting the accepting thread"))?;
    let mut result = Ok(());
    while !stop.load(Ordering::Relaxed) {
        let ev = match rx.recv_timeout(Duration::from_millis(50)) {
            Ok(Ok(ev)) => ev,
            Ok(Err(e)) => {
                result = Err(os("accepting a control connection")(e));
                break;
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => continue,
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
        };
        let (s, peer) = match ev {
            Event::Client(s, peer) => (s, peer),
            Event::Refused(line) => {
                log(&line);
                continue;
            }
        };
        let _ = s.set_nonblocking(false);
        let _ = s.set_nodelay(true);
        log(&format!("client {peer}"));
        match serve_one(s, sink, limits, stop, &mut log) {
            Ok(()) => log(&format!("client {peer} done")),
            Err(e) => log(&format!("client {peer}: {e}")),
        }
        let _ = sink.set_rcvbuf(default_rcvbuf / 2);
        *busy.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
    done.store(true, Ordering::Relaxed);
    let _ = thread.join();
    result
}

/// Accepts control connections until `done`: the first while nobody is served goes to the
/// server (which is then busy), the others are told the server is busy and closed.
fn accept_loop(
    l: &TcpListener,
    busy: &Mutex<Option<(SocketAddr, Instant)>>,
    done: &AtomicBool,
    tx: &std::sync::mpsc::Sender<Result<Event, io::Error>>,
) {
    while !done.load(Ordering::Relaxed) {
        let (s, peer) = match l.accept() {
            Ok(x) => x,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::Interrupted | io::ErrorKind::ConnectionAborted
                ) =>
            {
                continue
            }
            Err(e) => {
                let _ = tx.send(Err(e));
                return;
            }
        };
        let _ = s.set_nonblocking(false);
        let mut b = busy.lock().unwrap_or_else(|e| e.into_inner());
        match *b {
            None => {
                *b = Some((peer, Instant::now()));
                drop(b);
                if tx.send(Ok(Event::Client(s, peer))).is_err() {
                    return;
                }
            }
            Some((who, since)) => {
                drop(b);
                let secs = since.elapsed().as_secs();
                tell(
                    &s,
                    &format!(
                        "ERR busy: this server is measuring for {who} (for {secs} s); it serves \
                         one client at a time: try again when it is done"
                    ),
                );
                let _ = tx.send(Ok(Event::Refused(format!(
                    "client {peer} refused: busy with {who}"
                ))));
            }
        }
    }
}

fn serve_one(
    s: TcpStream,
    sink: &mut LocalSink,
    limits: ServeLimits,
    stop: &AtomicBool,
    log: &mut impl FnMut(&str),
) -> io::Result<()> {
    let mut r = BufReader::new(s);
    let bad = |why: String| io::Error::new(io::ErrorKind::InvalidData, why);
    // Reads the next line; a client that says nothing in time is told why it is dropped.
    let next = |r: &mut BufReader<TcpStream>, limit: Duration| {
        read_line(r, limit, Some(stop)).inspect_err(|e| match e.kind() {
            io::ErrorKind::TimedOut => tell(
                r.get_ref(),
                &format!("ERR dropped: nothing said for {} s", limit.as_secs_f64()),
            ),
            // A line too long, or not text: the client is told why it is dropped.
            io::ErrorKind::InvalidData => tell(r.get_ref(), &format!("ERR {e}")),
            _ => {}
        })
    };
    let refuse = |r: &mut BufReader<TcpStream>, why: String| {
        tell(r.get_ref(), &format!("ERR {why}"));
        bad(why)
    };
    let hello = next(&mut r, CONTROL_TIMEOUT)?;
    if !hello.starts_with(HELLO) {
        return Err(refuse(
            &mut r,
            format!("not a linerate sweep client: '{}'", hello.trim()),
        ));
    }
    if let Some(b) = num(&hello, "rcvbuf").filter(|b| *b > 0) {
        if b > limits.max_rcvbuf {
            return Err(refuse(
                &mut r,
                format!(
                    "--rcvbuf {b} B is above this server's limit of {} B",
                    limits.max_rcvbuf
                ),
            ));
        }
        if let Err(e) = sink.set_rcvbuf(b as usize) {
            return Err(refuse(&mut r, e.to_string()));
        }
    }
    writeln!(
        r.get_mut(),
        "OK port={} rcvbuf={} max_secs={} max_sizes={} max_rcvbuf={}",
        sink.addr().port(),
        sink.rcvbuf(),
        limits.max_secs,
        limits.max_sizes,
        limits.max_rcvbuf
    )?;
    let mut limit = SERVE_IDLE;
    let mut sizes = 0u64;
    loop {
        let line = next(&mut r, limit)?;
        let cmd = line.split_whitespace().next().unwrap_or("");
        match cmd {
            "BEGIN" => {
                let size = num(&line, "size").filter(|s| (TAG_LEN as u64..=65_507).contains(s));
                let tag = field(&line, "tag").and_then(|t| parse_tag(&t));
                let secs = num(&line, "secs");
                let (Some(size), Some(tag), Some(secs)) = (size, tag, secs) else {
                    return Err(refuse(&mut r, format!("bad BEGIN: '{}'", line.trim())));
                };
                if secs > limits.max_secs {
                    return Err(refuse(
                        &mut r,
                        format!(
                            "-t {secs} s per size is above this server's limit of {} s",
                            limits.max_secs
                        ),
                    ));
                }
                sizes += 1;
                if sizes > limits.max_sizes {
                    return Err(refuse(
                        &mut r,
                        format!(
                            "more than {} sizes on one connection (this server's limit)",
                            limits.max_sizes
                        ),
                    ));
                }
                if let Err(e) = sink.begin(size as usize, tag) {
                    return Err(refuse(&mut r, e.to_string()));
                }
                // The client sends for `secs`, then ends the size.
                limit = Duration::from_secs(secs) + SERVE_IDLE + CONTROL_TIMEOUT;
                writeln!(r.get_mut(), "READY")?;
            }
            "END" => {
                let Some(sent) = num(&line, "sent") else {
                    return Err(refuse(&mut r, format!("bad END: '{}'", line.trim())));
                };
                let rx = sink.finish(sent, DRAIN_IDLE, DRAIN_LIMIT);
                log(&format!(
                    "size done: {} of {sent} received, {} other",
                    rx.received, rx.other
                ));
                let drops = rx
                    .socket_drops
                    .map_or_else(String::new, |d| format!(" drops={d}"));
                writeln!(
                    r.get_mut(),
                    "RESULT received={} bytes={} other={} span_ns={}{drops}",
                    rx.received,
                    rx.bytes,
                    rx.other,
                    rx.span_ns
                )?;
                limit = SERVE_IDLE;
            }
            "BYE" => return Ok(()),
            _ => {
                return Err(refuse(&mut r, format!("unknown command '{}'", line.trim())));
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_local_sink_counts_one_size_and_keeps_strays_apart() {
        let mut sink =
            LocalSink::bind(None, SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0), None).unwrap();
        let mut tx = UdpSender::connect(sink.addr(), None).unwrap();
        let t = tag(7, 1);
        sink.begin(100, t).unwrap();
        tx.set_head(&t);
        assert_eq!(tx.send(50, 100).unwrap(), 50);
        // Another size, and the same size with another tag: not this size's.
        assert_eq!(tx.send(5, 200).unwrap(), 5);
        tx.set_head(&tag(7, 2));
        assert_eq!(tx.send(3, 100).unwrap(), 3);
        let rx = sink.finish(50, Duration::from_millis(100), Duration::from_secs(2));
        assert_eq!(rx.received, 50);
        assert_eq!(rx.bytes, 5000);
        assert_eq!(rx.other, 8);
        assert_eq!(rx.socket_drops, Some(0));
        let row = SizeRow {
            size: 100,
            asked_pps: None,
            tx: TxReport {
                sent: 50,
                elapsed_ns: 500_000_000,
                ..Default::default()
            },
            rx,
        };
        assert_eq!(row.tx_pps(), 100.0);
        assert_eq!(row.rx_mbps(), 0.08);
        assert_eq!(row.lost(), 0);
    }

    #[test]
    fn a_paced_send_keeps_to_its_rate_and_a_stop_ends_it() {
        let sink = LocalSink::bind(None, SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0), None).unwrap();
        let mut tx = UdpSender::connect(sink.addr(), None).unwrap();
        let plan = SendPlan {
            size: 64,
            duration: Duration::from_millis(300),
            rate_pps: Some(1000.0),
            batch: 64,
        };
        let r = send_size(&mut tx, &plan, &AtomicBool::new(false));
        assert!(r.sent >= 250 && r.sent <= 302, "{r:?}");
        let r = send_size(&mut tx, &plan, &AtomicBool::new(true));
        assert!(r.stopped && r.sent == 0, "{r:?}");
    }

    #[test]
    fn a_server_answers_a_client_over_its_control_exchange() {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        let mut sink =
            LocalSink::bind(None, SocketAddrV4::new(Ipv4Addr::LOCALHOST, port), None).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let st = stop.clone();
        let server =
            std::thread::spawn(move || serve(&listener, &mut sink, SERVE_LIMITS, &st, |_| {}));
        let mut remote = Sink::Remote(
            RemoteSink::connect(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port), None).unwrap(),
        );
        assert_eq!(remote.data_addr().port(), port);
        let mut tx = UdpSender::connect(remote.data_addr(), None).unwrap();
        let t = tag(1, 1);
        remote.begin(300, t, 1.0).unwrap();
        tx.set_head(&t);
        assert_eq!(tx.send(20, 300).unwrap(), 20);
        let rx = remote.finish(20).unwrap();
        assert_eq!((rx.received, rx.bytes, rx.other), (20, 6000, 0));
        drop(remote);
        stop.store(true, Ordering::Relaxed);
        server.join().unwrap().unwrap();
        // A control line over 256 bytes is answered with the reason before the server drops it.
        let stop2 = Arc::new(AtomicBool::new(false));
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port2 = listener.local_addr().unwrap().port();
        let mut sink =
            LocalSink::bind(None, SocketAddrV4::new(Ipv4Addr::LOCALHOST, port2), None).unwrap();
        let st = stop2.clone();
        let server =
            std::thread::spawn(move || serve(&listener, &mut sink, SERVE_LIMITS, &st, |_| {}));
        let mut c = TcpStream::connect((Ipv4Addr::LOCALHOST, port2)).unwrap();
        io::Write::write_all(&mut c, &[b'x'; 300]).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut answer = String::new();
        let _ = io::Read::read_to_string(&mut c, &mut answer);
        assert!(
            answer.starts_with("ERR a control line longer than 256 bytes"),
            "{answer:?}"
        );
        stop2.store(true, Ordering::Relaxed);
        server.join().unwrap().unwrap();
        // Nobody there: a clear error, soon.
        let free = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let p = free.local_addr().unwrap().port();
        drop(free);
        let e = RemoteSink::connect(SocketAddrV4::new(Ipv4Addr::LOCALHOST, p), None).unwrap_err();
        assert!(
            e.to_string()
                .contains("no `linerate sweep --serve` answers"),
            "{e}"
        );
    }
}

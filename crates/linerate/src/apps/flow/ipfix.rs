//! IPFIX export (RFC 7011) of flow records, as biflows (RFC 5103: reverse elements under the
//! reverse PEN 29305) or as two uniflow records per flow.
//!
//! [`Encoder`] has no I/O and no clock of its own: it packs records into messages no larger than
//! `max_message` bytes, puts the templates before the first data and again every
//! `template_refresh_s` seconds of export time, numbers messages with the count of data records
//! sent before them, stamps each with the export time set when it is finished (the time it
//! leaves: RFC 7011 §3.1), and hands each finished message to a callback. [`UdpExporter`] sends those
//! messages to a collector and counts the ones that failed: refused by the socket, or refused
//! by the collector's host (ICMP port unreachable, read from the socket's error queue with the
//! message it is about). UDP has no acknowledgment: a message lost without a word from the
//! network cannot be counted.

use super::record::FlowRecord;
use super::RecordSink;
use crate::port::sys;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;

/// The reverse information element PEN (RFC 5103).
pub const REVERSE_PEN: u32 = 29305;

/// Template ids.
pub const TPL_V4_BIFLOW: u16 = 256;
/// IPv6 biflow template.
pub const TPL_V6_BIFLOW: u16 = 257;
/// IPv4 uniflow template.
pub const TPL_V4_UNIFLOW: u16 = 258;
/// IPv6 uniflow template.
pub const TPL_V6_UNIFLOW: u16 = 259;

/// (element id, length, reverse): the fields of a template, in record order.
type Spec = (u16, u16, bool);

/// The reverse tcpControlBits comes before the forward one: nfdump 1.7 stores both in one field
/// (the last one wins), and the initiator's flags are the ones it should keep.
const V4_BI: &[Spec] = &[
    (152, 8, false), // flowStartMilliseconds
    (153, 8, false), // flowEndMilliseconds
    (8, 4, false),   // sourceIPv4Address
    (12, 4, false),  // destinationIPv4Address
    (7, 2, false),   // sourceTransportPort
    (11, 2, false),  // destinationTransportPort
    (4, 1, false),   // protocolIdentifier
    (6, 1, true),    // reverse tcpControlBits
    (6, 1, false),   // tcpControlBits
    (32, 2, false),  // icmpTypeCodeIPv4
    (58, 2, false),  // vlanId
    (136, 1, false), // flowEndReason
    (239, 1, false), // biflowDirection
    (2, 8, false),   // packetDeltaCount
    (1, 8, false),   // octetDeltaCount
    (2, 8, true),    // reverse packetDeltaCount
    (1, 8, true),    // reverse octetDeltaCount
];
const V6_BI: &[Spec] = &[
    (152, 8, false),
    (153, 8, false),
    (27, 16, false), // sourceIPv6Address
    (28, 16, false), // destinationIPv6Address
    (7, 2, false),
    (11, 2, false),
    (4, 1, false),
    (6, 1, true),
    (6, 1, false),
    (139, 2, false), // icmpTypeCodeIPv6
    (58, 2, false),
    (136, 1, false),
    (239, 1, false),
    (2, 8, false),
    (1, 8, false),
    (2, 8, true),
    (1, 8, true),
];
/// Uniflow templates are the biflow ones without the reverse elements.
const V4_UNI: &[Spec] = &[
    (152, 8, false),
    (153, 8, false),
    (8, 4, false),
    (12, 4, false),
    (7, 2, false),
    (11, 2, false),
    (4, 1, false),
    (6, 1, false),
    (32, 2, false),
    (58, 2, false),
    (136, 1, false),
    (239, 1, false),
    (2, 8, false),
    (1, 8, false),
];
const V6_UNI: &[Spec] = &[
    (152, 8, false),
    (153, 8, false),
    (27, 16, false),
    (28, 16, false),
    (7, 2, false),
    (11, 2, false),
    (4, 1, false),
    (6, 1, false),
    (139, 2, false),
    (58, 2, false),
    (136, 1, false),
    (239, 1, false),
    (2, 8, false),
    (1, 8, false),
];

/// Appended to every template when the records carry Ethernet addresses and TTLs (`flows
/// --fields smac,...`): sourceMacAddress, destinationMacAddress, minimumTTL, maximumTTL (and
/// the reverse TTLs of a biflow). A side that sent nothing has TTLs 0.
const EXTRA_BI: &[Spec] = &[
    (56, 6, false),
    (80, 6, false),
    (52, 1, false),
    (53, 1, false),
    (52, 1, true),
    (53, 1, true),
];
const EXTRA_UNI: &[Spec] = &[
    (56, 6, false),
    (80, 6, false),
    (52, 1, false),
    (53, 1, false),
];

/// The extra elements of a mode, none without `extras`.
fn extra_fields(bi: bool, extras: bool) -> &'static [Spec] {
    match (extras, bi) {
        (false, _) => &[],
        (true, true) => EXTRA_BI,
        (true, false) => EXTRA_UNI,
    }
}

/// What the extra elements add to the smallest message: their template entries in both
/// templates and their bytes in one record.
fn extra_cost(uniflow: bool, extras: bool) -> usize {
    let x = extra_fields(!uniflow, extras);
    let tpl: usize = x.iter().map(|f| if f.2 { 8 } else { 4 }).sum();
    2 * tpl + record_len(x)
}

const fn fields(v6: bool, bi: bool) -> &'static [Spec] {
    match (v6, bi) {
        (false, true) => V4_BI,
        (true, true) => V6_BI,
        (false, false) => V4_UNI,
        (true, false) => V6_UNI,
    }
}

const fn record_len(spec: &[Spec]) -> usize {
    let mut n = 0;
    let mut i = 0;
    while i < spec.len() {
        n += spec[i].1 as usize;
        i += 1;
    }
    n
}

/// Bytes of the template set of a message (both templates of the mode).
const fn template_set_len(uniflow: bool) -> usize {
    let mut n = 4;
    let mut k = 0;
    while k < 2 {
        let spec = fields(k == 1, !uniflow);
        n += 4;
        let mut i = 0;
        while i < spec.len() {
            n += if spec[i].2 { 8 } else { 4 };
            i += 1;
        }
        k += 1;
    }
    n
}

/// Message header bytes.
const HEADER: usize = 16;

/// The smallest `max_message` that holds a message header, the templates and one record of
/// the largest kind (IPv6) in its data set: 285 B for biflows, 220 B for uniflows.
pub const fn min_message(uniflow: bool) -> usize {
    let v6 = record_len(fields(true, !uniflow));
    HEADER + template_set_len(uniflow) + 4 + v6
}

/// Largest `max_message`: the largest UDP payload over IPv4.
pub const MAX_MESSAGE: usize = 65_507;

/// Why an exporter could not be made.
#[derive(Debug, thiserror::Error)]
pub enum IpfixError {
    /// The message size cannot hold the templates and one record.
    #[error("messages of {max} B cannot hold the templates and one record: at least {min} B (at most 65507)")]
    MessageSize {
        /// What was asked.
        max: usize,
        /// The smallest that works.
        min: usize,
    },
    /// The socket could not be made.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Options of the encoder.
#[derive(Clone, Copy, Debug)]
pub struct IpfixOptions {
    /// Observation domain id.
    pub domain: u32,
    /// Largest message, bytes (a UDP payload that fits the path MTU).
    pub max_message: usize,
    /// Export each biflow as two uniflow records (for collectors without RFC 5103).
    pub uniflow: bool,
    /// Seconds between template re-sends.
    pub template_refresh_s: u32,
    /// Export the Ethernet addresses and TTL ranges too (the `EXTRA_BI` table).
    pub extras: bool,
}

impl Default for IpfixOptions {
    fn default() -> Self {
        IpfixOptions {
            domain: 1,
            max_message: 1400,
            uniflow: false,
            template_refresh_s: 60,
            extras: false,
        }
    }
}

/// Packs flow records into IPFIX messages.
pub struct Encoder {
    opts: IpfixOptions,
    buf: Vec<u8>,
    /// Data records sent in finished messages.
    sent: u32,
    /// Data records in the message being built.
    in_msg: u32,
    /// Where the open data set's header is, and its template.
    set: Option<(usize, u16)>,
    /// Export time (s) of the last template send; None: never sent.
    templates_at: Option<u32>,
    export_s: u32,
    messages: u64,
}

impl Encoder {
    /// An encoder with `opts`; `max_message` must be within [`min_message`] and
    /// [`MAX_MESSAGE`] (no message is ever larger).
    pub fn new(opts: IpfixOptions) -> Result<Encoder, IpfixError> {
        let min = min_message(opts.uniflow) + extra_cost(opts.uniflow, opts.extras);
        let max = opts.max_message;
        if max < min || max > MAX_MESSAGE {
            return Err(IpfixError::MessageSize { max, min });
        }
        Ok(Encoder {
            opts,
            buf: Vec::with_capacity(max),
            sent: 0,
            in_msg: 0,
            set: None,
            templates_at: None,
            export_s: 0,
            messages: 0,
        })
    }

    /// Messages finished so far.
    pub fn messages(&self) -> u64 {
        self.messages
    }

    /// Data records finished so far (the next message's sequence number).
    pub fn records(&self) -> u32 {
        self.sent
    }

    fn start(&mut self) {
        self.buf.clear();
        self.buf.extend_from_slice(&10u16.to_be_bytes());
        self.buf.extend_from_slice(&0u16.to_be_bytes()); // length, set when finished
        self.buf.extend_from_slice(&0u32.to_be_bytes()); // export time, set when finished
        self.buf.extend_from_slice(&self.sent.to_be_bytes());
        self.buf.extend_from_slice(&self.opts.domain.to_be_bytes());
        self.in_msg = 0;
        self.set = None;
        let due = match self.templates_at {
            None => true,
            Some(t) => self.export_s.saturating_sub(t) >= self.opts.template_refresh_s,
        };
        if due {
            self.templates_at = Some(self.export_s);
            let at = self.buf.len();
            self.buf.extend_from_slice(&2u16.to_be_bytes());
            self.buf.extend_from_slice(&0u16.to_be_bytes());
            let tpls: [(u16, bool); 2] = if self.opts.uniflow {
                [(TPL_V4_UNIFLOW, false), (TPL_V6_UNIFLOW, true)]
            } else {
                [(TPL_V4_BIFLOW, false), (TPL_V6_BIFLOW, true)]
            };
            for (id, v6) in tpls {
                let spec = fields(v6, !self.opts.uniflow);
                let extra = extra_fields(!self.opts.uniflow, self.opts.extras);
                self.buf.extend_from_slice(&id.to_be_bytes());
                self.buf
                    .extend_from_slice(&((spec.len() + extra.len()) as u16).to_be_bytes());
                for &(ie, len, rev) in spec.iter().chain(extra) {
                    if rev {
                        self.buf.extend_from_slice(&(ie | 0x8000).to_be_bytes());
                        self.buf.extend_from_slice(&len.to_be_bytes());
                        self.buf.extend_from_slice(&REVERSE_PEN.to_be_bytes());
                    } else {
                        self.buf.extend_from_slice(&ie.to_be_bytes());
                        self.buf.extend_from_slice(&len.to_be_bytes());
                    }
                }
            }
            let l = (self.buf.len() - at) as u16;
            self.buf[at + 2..at + 4].copy_from_slice(&l.to_be_bytes());
        }
    }

    fn close_set(&mut self) {
        if let Some((at, _)) = self.set.take() {
            let l = (self.buf.len() - at) as u16;
            self.buf[at + 2..at + 4].copy_from_slice(&l.to_be_bytes());
        }
    }

    /// Data records in the message being built (0: none open).
    pub fn pending(&self) -> u32 {
        self.in_msg
    }

    /// Finishes the message being built (if it holds data), stamps it with the export time
    /// set last ([`Encoder::set_export_time`]: the caller sets it to the time of sending) and
    /// hands it to `send` with the number of data records in it.
    pub fn flush(&mut self, send: &mut dyn FnMut(&[u8], u32)) {
        if self.buf.is_empty() || self.in_msg == 0 {
            return;
        }
        self.close_set();
        let l = self.buf.len() as u16;
        self.buf[2..4].copy_from_slice(&l.to_be_bytes());
        self.buf[4..8].copy_from_slice(&self.export_s.to_be_bytes());
        debug_assert!(self.buf.len() <= self.opts.max_message);
        send(&self.buf, self.in_msg);
        self.messages += 1;
        self.sent = self.sent.wrapping_add(self.in_msg);
        self.buf.clear();
        self.in_msg = 0;
    }

    /// Sets the export time (seconds since the epoch) that the messages finished from now on
    /// carry, and that decides when the templates are due again.
    pub fn set_export_time(&mut self, s: u32) {
        self.export_s = s;
    }

    fn room_for(&mut self, tpl: u16, len: usize, send: &mut dyn FnMut(&[u8], u32)) {
        let need = |e: &Encoder| {
            len + if e.set.is_some_and(|s| s.1 == tpl) {
                0
            } else {
                4
            }
        };
        if !self.buf.is_empty() && self.buf.len() + need(self) > self.opts.max_message {
            self.flush(send);
        }
        if self.buf.is_empty() {
            self.start();
        }
        if self.set.is_none_or(|s| s.1 != tpl) {
            self.close_set();
            self.set = Some((self.buf.len(), tpl));
            self.buf.extend_from_slice(&tpl.to_be_bytes());
            self.buf.extend_from_slice(&0u16.to_be_bytes());
        }
    }

    /// Adds one flow (one biflow record, or one or two uniflow records).
    pub fn add(&mut self, r: &FlowRecord, send: &mut dyn FnMut(&[u8], u32)) {
        let bi = !self.opts.uniflow;
        let spec = fields(r.v6, bi);
        let tpl = match (r.v6, bi) {
            (false, true) => TPL_V4_BIFLOW,
            (true, true) => TPL_V6_BIFLOW,
            (false, false) => TPL_V4_UNIFLOW,
            (true, false) => TPL_V6_UNIFLOW,
        };
        let len = record_len(spec) + record_len(extra_fields(bi, self.opts.extras));
        if bi {
            self.room_for(tpl, len, send);
            self.put(r, false, true);
            return;
        }
        // A uniflow record for each direction that sent packets (a status record's interval
        // may hold only the responder's).
        if r.src_pkts > 0 {
            self.room_for(tpl, len, send);
            self.put(r, false, false);
        }
        if r.dst_pkts > 0 {
            self.room_for(tpl, len, send);
            self.put(r, true, false);
        }
    }

    fn put(&mut self, r: &FlowRecord, reverse: bool, bi: bool) {
        let spec = fields(r.v6, bi);
        let icmp = r.is_icmp();
        let (sa, da, sp, dp) = if reverse {
            (&r.dst, &r.src, r.dport, r.sport)
        } else {
            (&r.src, &r.dst, r.sport, r.dport)
        };
        let (sp, dp) = if icmp { (0, 0) } else { (sp, dp) };
        // Forward and reverse counters and flags as seen from this record's source.
        let (fp, fb, ff, rp, rb, rf) = if reverse {
            (
                r.dst_pkts,
                r.dst_bytes,
                r.dst_tcp_flags,
                r.src_pkts,
                r.src_bytes,
                r.src_tcp_flags,
            )
        } else {
            (
                r.src_pkts,
                r.src_bytes,
                r.src_tcp_flags,
                r.dst_pkts,
                r.dst_bytes,
                r.dst_tcp_flags,
            )
        };
        // A biflow's times span both directions and its ICMP type is the initiator's; a
        // uniflow record has its own direction's (RFC 7012).
        let (start, end, it, ic) = if bi {
            (r.start_ns, r.last_ns, r.icmp_type, r.icmp_code)
        } else {
            let d = reverse as usize;
            let [t, c] = r.side_icmp[d];
            (r.side_ns[d][0], r.side_ns[d][1], t, c)
        };
        let tc = if icmp {
            (it as u16) << 8 | ic as u16
        } else {
            0
        };
        let b = &mut self.buf;
        for &(ie, _, rev) in spec {
            match (ie, rev) {
                (152, _) => b.extend_from_slice(&(start / 1_000_000).to_be_bytes()),
                (153, _) => b.extend_from_slice(&(end / 1_000_000).to_be_bytes()),
                (8 | 12, _) => b.extend_from_slice(&(if ie == 8 { sa } else { da })[..4]),
                (27 | 28, _) => b.extend_from_slice(if ie == 27 { sa } else { da }),
                (7, _) => b.extend_from_slice(&sp.to_be_bytes()),
                (11, _) => b.extend_from_slice(&dp.to_be_bytes()),
                (4, _) => b.push(r.proto),
                (6, false) => b.push(ff),
                (6, true) => b.push(rf),
                (32 | 139, _) => b.extend_from_slice(&tc.to_be_bytes()),
                (58, _) => b.extend_from_slice(&r.vlan.to_be_bytes()),
                (136, _) => b.push(r.reason as u8),
                // biflowDirection: 1 = the source is the initiator; a uniflow reverse record: 2.
                (239, _) => b.push(if reverse { 2 } else { 1 }),
                (2, false) => b.extend_from_slice(&fp.to_be_bytes()),
                (1, false) => b.extend_from_slice(&fb.to_be_bytes()),
                (2, true) => b.extend_from_slice(&rp.to_be_bytes()),
                (1, true) => b.extend_from_slice(&rb.to_be_bytes()),
                _ => {}
            }
        }
        if self.opts.extras {
            let x = &r.extra;
            let (sm, dm, ft, rt) = if reverse {
                (x.dst_mac, x.src_mac, x.dst_ttl, x.src_ttl)
            } else {
                (x.src_mac, x.dst_mac, x.src_ttl, x.dst_ttl)
            };
            let ttl = |t: [u8; 2]| if t[0] <= t[1] { t } else { [0, 0] };
            b.extend_from_slice(&sm);
            b.extend_from_slice(&dm);
            b.extend_from_slice(&ttl(ft));
            if bi {
                b.extend_from_slice(&ttl(rt));
            }
        }
        self.in_msg += 1;
    }
}

/// Counters of an exporter.
#[derive(Clone, Copy, Debug, Default)]
pub struct ExportStats {
    /// Flows handed to the exporter.
    pub flows: u64,
    /// Data records in the messages handed to the socket (two per flow in uniflow mode when
    /// the flow has reverse packets).
    pub records: u64,
    /// Messages handed to the socket.
    pub messages: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Messages that failed: the socket refused them, or the collector's host did (ICMP).
    pub failed_messages: u64,
    /// Data records in the failed messages.
    pub failed_records: u64,
    /// The last error seen (errno), 0 if none.
    pub last_errno: i32,
}

impl ExportStats {
    /// The last error as text, if any.
    pub fn last_error(&self) -> Option<std::io::Error> {
        (self.last_errno != 0).then(|| std::io::Error::from_raw_os_error(self.last_errno))
    }
}

/// Messages remembered for matching a late refusal (ICMP) to its records.
const RECENT: usize = 4096;

/// Messages sent back to back before pacing starts, and the pace after that: a collector's
/// socket buffer (nfcapd's default holds ~150 small messages) overflows silently under a
/// burst, as when every flow of a file ends at once.
const BURST: f64 = 64.0;
/// Messages per second once the burst is spent (1400 B messages: ~28 MB/s, ~400k records/s).
const PACE: f64 = 20_000.0;

/// What the socket side of an exporter keeps.
struct Link {
    sock: UdpSocket,
    stats: ExportStats,
    /// (sequence number, records) of recent messages, oldest first.
    recent: std::collections::VecDeque<(u32, u32)>,
    /// Whether the error queue is on (else only send errors and SO_ERROR are seen).
    errqueue: bool,
    /// Pacing: messages that may go now, and when that was computed.
    tokens: f64,
    at: std::time::Instant,
}

impl Link {
    /// Counts one failed message of `records` records.
    fn failed(&mut self, records: u32, errno: i32) {
        self.stats.failed_messages += 1;
        self.stats.failed_records += u64::from(records);
        if errno != 0 {
            self.stats.last_errno = errno;
        }
    }

    /// Reads every refusal the kernel queued, each with the start of the message it is
    /// about; then the socket's pending error, which a queue entry already counted.
    fn collect_errors(&mut self) {
        let mut head = [0u8; 64];
        let fd = self.sock.as_raw_fd();
        let mut queued = false;
        while self.errqueue {
            match sys::recv_err(fd, &mut head) {
                Ok(Some((errno, n))) => {
                    queued = true;
                    // The message's sequence number names it among the recent ones.
                    let seq = (n >= HEADER && head[0..2] == [0, 10])
                        .then(|| u32::from_be_bytes([head[8], head[9], head[10], head[11]]));
                    let recs = seq
                        .and_then(|q| self.recent.iter().position(|&(s, _)| s == q))
                        .and_then(|i| self.recent.remove(i))
                        .map_or(0, |(_, r)| r);
                    self.failed(recs, errno);
                }
                Ok(None) => break,
                Err(_) => break,
            }
        }
        if let Ok(Some(e)) = self.sock.take_error() {
            if !queued {
                // Without the queue: the refusal is about the last message sent.
                let recs = self.recent.pop_back().map_or(0, |(_, r)| r);
                self.failed(recs, e.raw_os_error().unwrap_or(0));
            }
        }
    }

    /// Waits until the pace allows one more message.
    fn pace(&mut self) {
        let now = std::time::Instant::now();
        self.tokens = (self.tokens + now.duration_since(self.at).as_secs_f64() * PACE).min(BURST);
        self.at = now;
        if self.tokens < 1.0 {
            let wait = (1.0 - self.tokens) / PACE;
            std::thread::sleep(std::time::Duration::from_secs_f64(wait));
            let now = std::time::Instant::now();
            self.tokens += now.duration_since(self.at).as_secs_f64() * PACE;
            self.at = now;
        }
        self.tokens -= 1.0;
    }

    fn send(&mut self, m: &[u8], records: u32) {
        self.pace();
        self.collect_errors();
        self.stats.messages += 1;
        self.stats.records += u64::from(records);
        self.stats.bytes += m.len() as u64;
        let seq = u32::from_be_bytes([m[8], m[9], m[10], m[11]]);
        let mut tries = 0;
        loop {
            match self.sock.send(m) {
                Ok(_) => {
                    if self.recent.len() == RECENT {
                        self.recent.pop_front();
                    }
                    self.recent.push_back((seq, records));
                    return;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && tries < 100 => {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_micros(100));
                }
                // A refusal that arrived just now is reported by this send, which then did
                // not go out: count the refusal, try once more.
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused && tries < 100 => {
                    tries = 100;
                    self.collect_errors();
                    if !self.errqueue {
                        let recs = self.recent.pop_back().map_or(0, |(_, r)| r);
                        self.failed(recs, e.raw_os_error().unwrap_or(0));
                    }
                }
                Err(e) => {
                    self.failed(records, e.raw_os_error().unwrap_or(0));
                    return;
                }
            }
        }
    }
}

/// How long a record waits in a partly filled message by default (`--ipfix-flush`).
pub const DEFAULT_FLUSH: std::time::Duration = std::time::Duration::from_secs(1);

/// Sends IPFIX over UDP to a collector. A record waits in a partly filled message at most the
/// flush interval: [`RecordSink::records`] sends what is due when records come, and
/// [`RecordSink::tick`] (the monitor's loop calls it whether or not packets come) when none do.
pub struct UdpExporter {
    link: Link,
    enc: Encoder,
    /// When the oldest record of the open message was added.
    opened_at: Option<std::time::Instant>,
    flush_every: std::time::Duration,
}

impl UdpExporter {
    /// Connects a UDP socket to `to`; `opts.max_message` must be within [`min_message`] and
    /// [`MAX_MESSAGE`].
    pub fn new(to: SocketAddr, opts: IpfixOptions) -> Result<UdpExporter, IpfixError> {
        let enc = Encoder::new(opts)?;
        let bind: SocketAddr = if to.is_ipv6() { "[::]:0" } else { "0.0.0.0:0" }
            .parse()
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "bind address"))?;
        let sock = UdpSocket::bind(bind)?;
        sock.connect(to)?;
        let errqueue = sys::set_recverr(sock.as_raw_fd(), to.is_ipv6()).is_ok();
        Ok(UdpExporter {
            link: Link {
                sock,
                stats: ExportStats::default(),
                recent: std::collections::VecDeque::with_capacity(RECENT),
                errqueue,
                tokens: BURST,
                at: std::time::Instant::now(),
            },
            enc,
            opened_at: None,
            flush_every: DEFAULT_FLUSH,
        })
    }

    /// The longest a record waits in a partly filled message (0: every call that brings
    /// records sends them).
    pub fn set_flush(&mut self, every: std::time::Duration) {
        self.flush_every = every;
    }

    /// Sends the open message if its oldest record has waited the flush interval, stamped
    /// with the time it leaves.
    fn send_due(&mut self) {
        let Some(opened) = self.opened_at else { return };
        if opened.elapsed() >= self.flush_every {
            self.enc
                .set_export_time((crate::time::wall_ns() / 1_000_000_000) as u32);
            let link = &mut self.link;
            self.enc.flush(&mut |m, n| link.send(m, n));
            self.opened_at = None;
        }
    }

    /// Counters so far.
    pub fn stats(&self) -> ExportStats {
        self.link.stats
    }

    /// Sends what is buffered, then waits up to `wait` for refusals of the last messages (a
    /// collector's host answers within a round trip; on loopback at once). While messages are
    /// still in the socket's send queue (the collector's address not yet resolved: a dead
    /// on-link collector answers no ARP), it waits longer, up to [`UNRESOLVED_WAIT`], for the
    /// kernel to send them or to report them failed; messages still queued then are counted
    /// failed (their records not known to have left).
    pub fn finish(&mut self, wait: std::time::Duration) {
        // The last message leaves now: it carries this time, not its records' arrival's.
        self.enc
            .set_export_time((crate::time::wall_ns() / 1_000_000_000) as u32);
        let link = &mut self.link;
        self.enc.flush(&mut |m, n| link.send(m, n));
        self.opened_at = None;
        if self.link.stats.messages == 0 {
            self.link.collect_errors();
            return;
        }
        let fd = self.link.sock.as_raw_fd();
        let t0 = std::time::Instant::now();
        let queued = || sys::send_queue(fd).unwrap_or(0);
        loop {
            let mut fds = [libc::pollfd {
                fd,
                events: 0,
                revents: 0,
            }];
            // POLLERR is reported whatever the events asked.
            let _ = sys::poll(&mut fds, 20);
            self.link.collect_errors();
            let spent = t0.elapsed();
            if spent >= UNRESOLVED_WAIT.max(wait) || (spent >= wait && queued() == 0) {
                break;
            }
        }
        if queued() > 0 {
            // Not sent and not reported: the messages still queued are the last ones; each
            // remembered message not yet counted failed may be one of them.
            let mut left = queued() as usize;
            while left > 0 {
                let Some((_, recs)) = self.link.recent.pop_back() else {
                    break;
                };
                self.link.failed(recs, libc::EHOSTUNREACH);
                left = left.saturating_sub(MIN_TRUESIZE);
            }
        }
    }
}

/// How long [`UdpExporter::finish`] waits at most for messages still in the socket's send
/// queue: Linux gives up on an address that answers no ARP after 3 probes 1 s apart.
pub const UNRESOLVED_WAIT: std::time::Duration = std::time::Duration::from_millis(3500);

/// The least memory a queued datagram takes in the send queue's count (its buffer's overhead),
/// to tell from the queue's bytes at most how many messages are still in it.
const MIN_TRUESIZE: usize = 768;

impl RecordSink for UdpExporter {
    fn records(&mut self, recs: &[FlowRecord]) {
        if recs.is_empty() {
            return;
        }
        // Messages filled by these records leave now: they carry this time.
        let now = crate::time::wall_ns();
        self.enc.set_export_time((now / 1_000_000_000) as u32);
        self.link.stats.flows += recs.len() as u64;
        let before = self.enc.messages();
        let link = &mut self.link;
        let mut send = |m: &[u8], n: u32| link.send(m, n);
        for r in recs {
            self.enc.add(r, &mut send);
        }
        if self.enc.pending() == 0 {
            self.opened_at = None;
        } else if self.opened_at.is_none() || self.enc.messages() != before {
            // What is left open came with these records.
            self.opened_at = Some(std::time::Instant::now());
        }
        self.send_due();
    }

    fn tick(&mut self) {
        self.send_due();
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::super::record::{EndReason, State};
    use super::*;

    fn rec(v6: bool, i: u64) -> FlowRecord {
        let mut src = [0u8; 16];
        let mut dst = [0u8; 16];
        src[0] = 10;
        src[3] = i as u8;
        dst[0] = 192;
        dst[3] = 1;
        FlowRecord {
            start_ns: 1_700_000_000_000_000_000 + i * 1_000_000,
            last_ns: 1_700_000_001_000_000_000,
            src,
            dst,
            sport: 1000 + i as u16,
            dport: 80,
            proto: 6,
            v6,
            vlan: 7,
            src_pkts: i + 1,
            dst_pkts: i,
            src_bytes: 100 * (i + 1),
            dst_bytes: 1000 * i,
            src_tcp_flags: 0x02,
            dst_tcp_flags: 0x12,
            icmp_type: 0,
            icmp_code: 0,
            state: State::Con,
            reason: EndReason::Idle,
            dir_certain: true,
            encap: 1,
            side_ns: [
                [
                    1_700_000_000_000_000_000 + i * 1_000_000,
                    1_700_000_000_900_000_000,
                ],
                [
                    1_700_000_000_100_000_000 + i * 1_000_000,
                    1_700_000_001_000_000_000,
                ],
            ],
            side_icmp: [[0; 2]; 2],
            extra: Default::default(),
        }
    }

    /// A small IPFIX reader for the tests: (templates by id, data records as
    /// (template, fields)), checking every length on the way.
    type Tpl = Vec<(u16, u16, Option<u32>)>;
    #[allow(clippy::type_complexity)]
    fn decode(
        msgs: &[Vec<u8>],
    ) -> (
        std::collections::HashMap<u16, Tpl>,
        Vec<(u16, Vec<Vec<u8>>)>,
        Vec<(u32, usize)>,
    ) {
        let mut tpls = std::collections::HashMap::new();
        let mut data = Vec::new();
        let mut seqs = Vec::new();
        for m in msgs {
            assert_eq!(u16::from_be_bytes([m[0], m[1]]), 10);
            assert_eq!(u16::from_be_bytes([m[2], m[3]]) as usize, m.len());
            let seq = u32::from_be_bytes([m[8], m[9], m[10], m[11]]);
            let before = data.len();
            let mut off = 16;
            while off < m.len() {
                let id = u16::from_be_bytes([m[off], m[off + 1]]);
                let len = u16::from_be_bytes([m[off + 2], m[off + 3]]) as usize;
                assert!(len >= 4 && off + len <= m.len());
                let set = &m[off + 4..off + len];
                if id == 2 {
                    let mut p = 0;
                    while p < set.len() {
                        let tid = u16::from_be_bytes([set[p], set[p + 1]]);
                        let n = u16::from_be_bytes([set[p + 2], set[p + 3]]);
                        p += 4;
                        let mut f = Vec::new();
                        for _ in 0..n {
                            let ie = u16::from_be_bytes([set[p], set[p + 1]]);
                            let l = u16::from_be_bytes([set[p + 2], set[p + 3]]);
                            p += 4;
                            let pen = if ie & 0x8000 != 0 {
                                p += 4;
                                Some(u32::from_be_bytes([
                                    set[p - 4],
                                    set[p - 3],
                                    set[p - 2],
                                    set[p - 1],
                                ]))
                            } else {
                                None
                            };
                            f.push((ie & 0x7fff, l, pen));
                        }
                        tpls.insert(tid, f);
                    }
                } else {
                    let t: &Tpl = tpls.get(&id).expect("data before its template");
                    let rl: usize = t.iter().map(|f| f.1 as usize).sum();
                    assert_eq!(set.len() % rl, 0);
                    for r in set.chunks(rl) {
                        let mut p = 0;
                        let mut fs = Vec::new();
                        for f in t {
                            fs.push(r[p..p + f.1 as usize].to_vec());
                            p += f.1 as usize;
                        }
                        data.push((id, fs));
                    }
                }
                off += len;
            }
            seqs.push((seq, data.len() - before));
        }
        (tpls, data, seqs)
    }

    fn num(b: &[u8]) -> u64 {
        b.iter().fold(0, |a, &x| a << 8 | x as u64)
    }

    #[test]
    fn biflow_messages_are_well_formed_and_bounded() {
        let mut enc = Encoder::new(IpfixOptions {
            max_message: 512,
            ..Default::default()
        })
        .unwrap();
        enc.set_export_time(1_700_000_100);
        let mut msgs: Vec<Vec<u8>> = Vec::new();
        let mut send = |m: &[u8], _: u32| msgs.push(m.to_vec());
        for i in 0..50 {
            enc.add(&rec(i % 5 == 0, i), &mut send);
        }
        enc.flush(&mut send);
        assert!(msgs.len() > 5);
        assert!(msgs.iter().all(|m| m.len() <= 512));
        let (tpls, data, seqs) = decode(&msgs);
        assert_eq!(data.len(), 50);
        // templates once, in the first message; reverse elements carry PEN 29305
        assert_eq!(tpls.len(), 2);
        let t = &tpls[&TPL_V4_BIFLOW];
        assert_eq!(t[7], (6, 1, Some(REVERSE_PEN)));
        assert_eq!(t[15], (2, 8, Some(REVERSE_PEN)));
        assert_eq!(t[16], (1, 8, Some(REVERSE_PEN)));
        // later messages start with a data set, not templates
        assert_ne!(u16::from_be_bytes([msgs[1][16], msgs[1][17]]), 2);
        // sequence numbers count the data records before each message
        let mut expect = 0;
        for (k, &(seq, n)) in seqs.iter().enumerate() {
            assert_eq!(seq, expect, "message {k}");
            expect += n as u32;
        }
        // values of one record
        let (id, f) = &data[3];
        assert_eq!(*id, TPL_V4_BIFLOW);
        assert_eq!(num(&f[0]), 1_700_000_000_003);
        assert_eq!(f[2], vec![10, 0, 0, 3]);
        assert_eq!(num(&f[4]), 1003);
        assert_eq!(num(&f[10]), 7);
        assert_eq!(num(&f[11]), 1);
        assert_eq!(
            (num(&f[13]), num(&f[14]), num(&f[15]), num(&f[16])),
            (4, 400, 3, 3000)
        );
        assert_eq!((num(&f[8]), num(&f[7])), (0x02, 0x12));
        let (id6, f6) = &data[0];
        assert_eq!(*id6, TPL_V6_BIFLOW);
        assert_eq!(f6[2].len(), 16);
    }

    #[test]
    fn uniflow_splits_and_templates_refresh() {
        let mut enc = Encoder::new(IpfixOptions {
            uniflow: true,
            template_refresh_s: 10,
            ..Default::default()
        })
        .unwrap();
        let mut msgs: Vec<Vec<u8>> = Vec::new();
        let mut send = |m: &[u8], _: u32| msgs.push(m.to_vec());
        enc.set_export_time(100);
        enc.add(&rec(false, 0), &mut send); // no reverse packets: one record
        enc.add(&rec(false, 2), &mut send); // two
        enc.flush(&mut send);
        enc.set_export_time(105);
        enc.add(&rec(false, 3), &mut send);
        enc.flush(&mut send);
        enc.set_export_time(111);
        enc.add(&rec(false, 4), &mut send);
        enc.flush(&mut send);
        let has_tpl = |m: &Vec<u8>| u16::from_be_bytes([m[16], m[17]]) == 2;
        assert_eq!(
            msgs.iter().map(has_tpl).collect::<Vec<_>>(),
            vec![true, false, true]
        );
        let (_, data, seqs) = decode(&msgs);
        assert_eq!(data.len(), 7);
        assert_eq!(seqs, vec![(0, 3), (3, 2), (5, 2)]);
        // the reverse record of flow 2: from 192.0.0.1:80 to 10.0.0.2:1002, 2 packets
        let (_, f) = &data[2];
        assert_eq!(f[2], vec![192, 0, 0, 1]);
        assert_eq!((num(&f[4]), num(&f[5])), (80, 1002));
        assert_eq!((num(&f[12]), num(&f[13])), (2, 2000));
        assert_eq!(num(&f[11]), 2);
    }

    #[test]
    fn export_time_is_the_time_the_message_is_finished() {
        let mut enc = Encoder::new(IpfixOptions::default()).unwrap();
        let mut msgs: Vec<Vec<u8>> = Vec::new();
        let mut send = |m: &[u8], _: u32| msgs.push(m.to_vec());
        enc.set_export_time(1_700_000_000);
        enc.add(&rec(false, 1), &mut send);
        assert_eq!(enc.pending(), 1);
        enc.set_export_time(1_700_000_011);
        enc.flush(&mut send);
        assert_eq!(enc.pending(), 0);
        let t = |m: &Vec<u8>| u32::from_be_bytes([m[4], m[5], m[6], m[7]]);
        assert_eq!(msgs.iter().map(t).collect::<Vec<_>>(), vec![1_700_000_011]);
    }

    /// A lone record leaves within the flush interval with no more records coming: the
    /// monitor's loop ticks, and the message carries the time it left.
    #[test]
    fn a_lone_record_leaves_on_the_timer() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(std::time::Duration::from_millis(20)))
            .unwrap();
        let mut x = UdpExporter::new(rx.local_addr().unwrap(), IpfixOptions::default()).unwrap();
        x.set_flush(std::time::Duration::from_millis(300));
        let mut r = rec(false, 1);
        let now = crate::time::wall_ns();
        r.last_ns = now;
        r.start_ns = now - 1_000_000_000;
        let t0 = std::time::Instant::now();
        x.records(&[r]);
        let mut buf = [0u8; 2048];
        let mut got = None;
        while t0.elapsed() < std::time::Duration::from_secs(3) {
            x.tick();
            if let Ok(n) = rx.recv(&mut buf) {
                got = Some((n, t0.elapsed(), crate::time::wall_ns()));
                break;
            }
        }
        let (n, after, arrived_ns) = got.expect("no message within 3 s");
        assert!(
            after >= std::time::Duration::from_millis(300)
                && after < std::time::Duration::from_millis(1000),
            "{after:?}"
        );
        let (_, data, _) = decode(&[buf[..n].to_vec()]);
        assert_eq!(data.len(), 1);
        let export_s = u32::from_be_bytes([buf[4], buf[5], buf[6], buf[7]]) as u64;
        assert!(
            export_s >= r.last_ns / 1_000_000_000,
            "{export_s} {}",
            r.last_ns
        );
        assert!(export_s <= arrived_ns / 1_000_000_000);
        // Nothing more: the timer does not send empty messages.
        x.tick();
        assert!(rx.recv(&mut buf).is_err());
        assert_eq!(x.stats().messages, 1);
    }

    /// The message that [`UdpExporter::finish`] sends (a record still waiting for its flush
    /// interval at the end) carries the time it is sent, not the time its records came.
    #[test]
    fn the_last_message_at_finish_carries_the_time_it_is_sent() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(std::time::Duration::from_secs(2)))
            .unwrap();
        let mut x = UdpExporter::new(rx.local_addr().unwrap(), IpfixOptions::default()).unwrap();
        x.set_flush(std::time::Duration::from_secs(3600));
        let mut r = rec(false, 1);
        let came = crate::time::wall_ns();
        r.last_ns = came;
        r.start_ns = came - 1_000_000_000;
        x.records(&[r]);
        std::thread::sleep(std::time::Duration::from_millis(1100));
        let sent_s = crate::time::wall_ns() / 1_000_000_000;
        x.finish(std::time::Duration::from_millis(10));
        let mut buf = [0u8; 2048];
        let n = rx.recv(&mut buf).expect("the last message");
        let (_, data, _) = decode(&[buf[..n].to_vec()]);
        assert_eq!(data.len(), 1);
        let export_s = u32::from_be_bytes([buf[4], buf[5], buf[6], buf[7]]) as u64;
        assert!(
            export_s >= sent_s,
            "{export_s} < {sent_s}: stamped when the record came"
        );
    }

    /// Uniflow records carry their own direction's times, ICMP type/code and TCP flags; a
    /// direction that sent nothing has no record.
    #[test]
    fn uniflow_records_are_each_directions_own() {
        let mut enc = Encoder::new(IpfixOptions {
            uniflow: true,
            ..Default::default()
        })
        .unwrap();
        let mut msgs: Vec<Vec<u8>> = Vec::new();
        let mut send = |m: &[u8], _: u32| msgs.push(m.to_vec());
        // An ICMP echo: requests 8.0 from the initiator, replies 0.0 back.
        let mut echo = rec(false, 2);
        echo.proto = 1;
        echo.icmp_type = 8;
        echo.side_icmp = [[8, 0], [0, 0]];
        enc.add(&echo, &mut send);
        // A TCP flow with its two sides' flags.
        enc.add(&rec(false, 3), &mut send);
        // Only the responder spoke in this interval.
        let mut back = rec(false, 4);
        back.src_pkts = 0;
        back.side_ns[0] = [0, 0];
        enc.add(&back, &mut send);
        enc.flush(&mut send);
        let (_, data, _) = decode(&msgs);
        assert_eq!(data.len(), 5);
        let ms = |s: &[u8]| num(s) * 1_000_000;
        for (k, (r, rev)) in [(&echo, false), (&echo, true), (&rec(false, 3), false)]
            .into_iter()
            .chain([(&rec(false, 3), true), (&back, true)])
            .enumerate()
        {
            let f = &data[k].1;
            let d = rev as usize;
            assert_eq!(ms(&f[0]), r.side_ns[d][0] / 1_000_000 * 1_000_000, "{k}");
            assert_eq!(ms(&f[1]), r.side_ns[d][1] / 1_000_000 * 1_000_000, "{k}");
            assert_eq!(num(&f[11]), 1 + d as u64, "{k}: biflowDirection");
            if r.proto == 1 {
                let want = (r.side_icmp[d][0] as u64) << 8 | r.side_icmp[d][1] as u64;
                assert_eq!(num(&f[8]), want, "{k}: icmpTypeCode");
            } else {
                let flags = if rev {
                    r.dst_tcp_flags
                } else {
                    r.src_tcp_flags
                };
                assert_eq!(num(&f[7]), flags as u64, "{k}: tcpControlBits");
            }
        }
        // The echo's reverse record: 0.0 (a reply), from the reply's own times.
        assert_eq!(num(&data[1].1[8]), 0);
        assert_eq!(num(&data[0].1[8]), 0x0800);
        assert_eq!(num(&data[1].1[1]), 1_700_000_001_000);
        assert_eq!(num(&data[0].1[1]), 1_700_000_000_900);
    }

    #[test]
    fn message_size_floor_is_one_record_with_templates() {
        assert_eq!(min_message(false), 285);
        assert_eq!(min_message(true), 220);
        for uniflow in [false, true] {
            let min = min_message(uniflow);
            let e = Encoder::new(IpfixOptions {
                max_message: min - 1,
                uniflow,
                ..Default::default()
            })
            .err()
            .unwrap();
            assert!(e.to_string().contains(&format!("at least {min} B")), "{e}");
            // At the floor, every message holds what fits and never more.
            let mut enc = Encoder::new(IpfixOptions {
                max_message: min,
                uniflow,
                template_refresh_s: 0,
                ..Default::default()
            })
            .unwrap();
            let mut msgs: Vec<Vec<u8>> = Vec::new();
            let mut send = |m: &[u8], _: u32| msgs.push(m.to_vec());
            for i in 0..40 {
                enc.add(&rec(i % 3 != 0, i), &mut send);
            }
            enc.flush(&mut send);
            assert!(msgs.iter().all(|m| m.len() <= min), "{uniflow}");
            let (_, data, _) = decode(&msgs);
            let want = if uniflow { 40 + 39 } else { 40 };
            assert_eq!(data.len(), want);
        }
    }

    #[test]
    fn refusals_by_a_closed_port_are_counted_with_their_records() {
        // A loopback port nobody listens on: bind, read it, release it.
        let port = UdpSocket::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let to: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let mut x = UdpExporter::new(
            to,
            IpfixOptions {
                max_message: 400,
                ..Default::default()
            },
        )
        .unwrap();
        let recs: Vec<FlowRecord> = (0..60).map(|i| rec(false, i)).collect();
        for c in recs.chunks(7) {
            x.records(c);
            x.enc.flush(&mut |m, n| x.link.send(m, n));
        }
        x.finish(std::time::Duration::from_millis(500));
        let s = x.stats();
        assert_eq!(s.flows, 60);
        assert_eq!(s.records, 60);
        assert!(s.messages >= 9, "{s:?}");
        assert_eq!(s.failed_messages, s.messages, "{s:?}");
        assert_eq!(s.failed_records, 60, "{s:?}");
        assert_eq!(
            s.last_error().unwrap().kind(),
            std::io::ErrorKind::ConnectionRefused
        );
    }
}

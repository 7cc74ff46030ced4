//! IPFIX export (RFC 7011) of flow records, as biflows (RFC 5103: reverse elements under the
//! reverse PEN 29305) or as two uniflow records per flow.
//!
//! [`Encoder`] has no I/O and no clock of its own: it packs records into messages no larger than
//! `max_message` bytes, puts the templates before the first data and again every
//! `template_refresh_s` seconds of export time, numbers messages with the count of data records
//! sent before them, and hands each finished message to a callback. [`UdpExporter`] sends those
//! messages to a collector.

use super::record::FlowRecord;
use super::RecordSink;
use std::net::{SocketAddr, UdpSocket};

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

const fn fields(v6: bool, bi: bool) -> &'static [Spec] {
    match (v6, bi) {
        (false, true) => V4_BI,
        (true, true) => V6_BI,
        (false, false) => V4_UNI,
        (true, false) => V6_UNI,
    }
}

fn record_len(spec: &[Spec]) -> usize {
    spec.iter().map(|f| f.1 as usize).sum()
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
}

impl Default for IpfixOptions {
    fn default() -> Self {
        IpfixOptions {
            domain: 1,
            max_message: 1400,
            uniflow: false,
            template_refresh_s: 60,
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
    /// An encoder with `opts`.
    pub fn new(opts: IpfixOptions) -> Encoder {
        let max = opts.max_message.clamp(256, 65_535);
        Encoder {
            opts: IpfixOptions {
                max_message: max,
                ..opts
            },
            buf: Vec::with_capacity(max),
            sent: 0,
            in_msg: 0,
            set: None,
            templates_at: None,
            export_s: 0,
            messages: 0,
        }
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
        self.buf.extend_from_slice(&self.export_s.to_be_bytes());
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
                self.buf.extend_from_slice(&id.to_be_bytes());
                self.buf
                    .extend_from_slice(&(spec.len() as u16).to_be_bytes());
                for &(ie, len, rev) in spec {
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

    /// Finishes the message being built (if it holds data) and hands it to `send`.
    pub fn flush(&mut self, send: &mut dyn FnMut(&[u8])) {
        if self.buf.is_empty() || self.in_msg == 0 {
            return;
        }
        self.close_set();
        let l = self.buf.len() as u16;
        self.buf[2..4].copy_from_slice(&l.to_be_bytes());
        send(&self.buf);
        self.messages += 1;
        self.sent = self.sent.wrapping_add(self.in_msg);
        self.buf.clear();
        self.in_msg = 0;
    }

    /// Sets the export time (seconds since the epoch) of the messages to come.
    pub fn set_export_time(&mut self, s: u32) {
        self.export_s = s;
    }

    fn room_for(&mut self, tpl: u16, len: usize, send: &mut dyn FnMut(&[u8])) {
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
    pub fn add(&mut self, r: &FlowRecord, send: &mut dyn FnMut(&[u8])) {
        let bi = !self.opts.uniflow;
        let spec = fields(r.v6, bi);
        let tpl = match (r.v6, bi) {
            (false, true) => TPL_V4_BIFLOW,
            (true, true) => TPL_V6_BIFLOW,
            (false, false) => TPL_V4_UNIFLOW,
            (true, false) => TPL_V6_UNIFLOW,
        };
        let len = record_len(spec);
        self.room_for(tpl, len, send);
        self.put(r, false, bi);
        if !bi && r.dst_pkts > 0 {
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
        let tc = if icmp {
            (r.icmp_type as u16) << 8 | r.icmp_code as u16
        } else {
            0
        };
        let b = &mut self.buf;
        for &(ie, _, rev) in spec {
            match (ie, rev) {
                (152, _) => b.extend_from_slice(&(r.start_ns / 1_000_000).to_be_bytes()),
                (153, _) => b.extend_from_slice(&(r.last_ns / 1_000_000).to_be_bytes()),
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
        self.in_msg += 1;
    }
}

/// Counters of an exporter.
#[derive(Clone, Copy, Debug, Default)]
pub struct ExportStats {
    /// Flows handed to the exporter.
    pub flows: u64,
    /// Messages sent.
    pub messages: u64,
    /// Bytes sent.
    pub bytes: u64,
    /// Messages the socket refused.
    pub errors: u64,
}

/// Sends IPFIX over UDP to a collector.
pub struct UdpExporter {
    sock: UdpSocket,
    enc: Encoder,
    stats: ExportStats,
    opened_at: Option<std::time::Instant>,
}

impl UdpExporter {
    /// Connects a UDP socket to `to`.
    pub fn new(to: SocketAddr, opts: IpfixOptions) -> std::io::Result<UdpExporter> {
        let bind: SocketAddr = if to.is_ipv6() { "[::]:0" } else { "0.0.0.0:0" }
            .parse()
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "bind address"))?;
        let sock = UdpSocket::bind(bind)?;
        sock.connect(to)?;
        Ok(UdpExporter {
            sock,
            enc: Encoder::new(opts),
            stats: ExportStats::default(),
            opened_at: None,
        })
    }

    /// Counters so far.
    pub fn stats(&self) -> ExportStats {
        self.stats
    }

    fn sender<'a>(sock: &'a UdpSocket, stats: &'a mut ExportStats) -> impl FnMut(&[u8]) + 'a {
        move |m: &[u8]| {
            // A collector that is not there refuses (ECONNREFUSED) the next send: count it.
            let mut tries = 0;
            loop {
                match sock.send(m) {
                    Ok(_) => {
                        stats.messages += 1;
                        stats.bytes += m.len() as u64;
                        break;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && tries < 100 => {
                        tries += 1;
                        std::thread::sleep(std::time::Duration::from_micros(100));
                    }
                    Err(_) => {
                        stats.errors += 1;
                        break;
                    }
                }
            }
        }
    }

    /// Sends what is buffered.
    pub fn finish(&mut self) {
        let mut send = Self::sender(&self.sock, &mut self.stats);
        self.enc.flush(&mut send);
        self.opened_at = None;
    }
}

impl RecordSink for UdpExporter {
    fn records(&mut self, recs: &[FlowRecord]) {
        let now = crate::time::wall_ns();
        self.enc.set_export_time((now / 1_000_000_000) as u32);
        self.stats.flows += recs.len() as u64;
        let mut send = Self::sender(&self.sock, &mut self.stats);
        for r in recs {
            self.enc.add(r, &mut send);
        }
        // A partly filled message waits at most a second.
        let opened = *self.opened_at.get_or_insert_with(std::time::Instant::now);
        if opened.elapsed() >= std::time::Duration::from_secs(1) {
            self.enc.flush(&mut send);
            self.opened_at = None;
        }
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
        });
        enc.set_export_time(1_700_000_100);
        let mut msgs: Vec<Vec<u8>> = Vec::new();
        let mut send = |m: &[u8]| msgs.push(m.to_vec());
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
        });
        let mut msgs: Vec<Vec<u8>> = Vec::new();
        let mut send = |m: &[u8]| msgs.push(m.to_vec());
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
}

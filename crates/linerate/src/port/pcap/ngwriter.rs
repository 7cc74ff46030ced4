//! A pcapng writer over any `Write`: a section header naming linerate and the OS, one interface
//! description per input interface (nanosecond timestamps), an enhanced packet block per packet
//! carrying its interface, and an interface statistics block per interface at the end.
//!
//! Each enhanced packet block is built in place in the output's buffer
//! ([`RecordWrite::record`]: one record, one bounds check): the 28-byte block header and the
//! trailer as fixed-size stores and one copy of the packet's bytes from its frame; no
//! allocation, no formatting and no division per packet (timestamps are already nanoseconds).

use super::writer::DEFAULT_SNAPLEN;
use crate::mem::{copy_packet, Batch, Desc};
use crate::port::file::RecordWrite;
use crate::port::{DropReason, Interface, InterfaceStats, LinkType};
use std::io;

const SHB: u32 = 0x0a0d_0d0a;
const BOM: u32 = 0x1a2b_3c4d;
const IDB: u32 = 1;
const ISB: u32 = 5;
const EPB: u32 = 6;

const OPT_END: u16 = 0;
const OPT_COMMENT: u16 = 1;
const SHB_OS: u16 = 3;
const SHB_USERAPPL: u16 = 4;
const IF_NAME: u16 = 2;
const IF_DESCRIPTION: u16 = 3;
const IF_TSRESOL: u16 = 9;
const ISB_STARTTIME: u16 = 2;
const ISB_ENDTIME: u16 = 3;
const ISB_IFRECV: u16 = 4;
const ISB_IFDROP: u16 = 5;
const ISB_FILTERACCEPT: u16 = 6;
const ISB_OSDROP: u16 = 7;
const ISB_USRDELIV: u16 = 8;

/// The application the section header names (`shb_userappl`).
pub const USER_APPL: &str = concat!("linerate ", env!("CARGO_PKG_VERSION"));

/// Longest option value written (an option's length is 16 bits); longer text is cut.
const MAX_OPT: usize = 0xfff0;

/// The operating system as `uname -sr` names it (`shb_os`), read from /proc.
pub fn os_name() -> String {
    let read = |f: &str| {
        std::fs::read_to_string(format!("/proc/sys/kernel/{f}"))
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    };
    let (sys, rel) = (read("ostype"), read("osrelease"));
    match (sys.is_empty(), rel.is_empty()) {
        (false, false) => format!("{sys} {rel}"),
        (false, true) => sys,
        _ => std::env::consts::OS.to_string(),
    }
}

/// Builds one non-packet block in a reusable buffer.
struct BlockBuf<'a> {
    buf: &'a mut Vec<u8>,
    opts: bool,
}

impl<'a> BlockBuf<'a> {
    fn new(buf: &'a mut Vec<u8>, btype: u32) -> BlockBuf<'a> {
        buf.clear();
        buf.extend_from_slice(&btype.to_ne_bytes());
        buf.extend_from_slice(&0u32.to_ne_bytes());
        BlockBuf { buf, opts: false }
    }

    fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.buf.extend_from_slice(b);
        self
    }

    fn u16(&mut self, v: u16) -> &mut Self {
        self.bytes(&v.to_ne_bytes())
    }

    fn u32(&mut self, v: u32) -> &mut Self {
        self.bytes(&v.to_ne_bytes())
    }

    /// A timestamp as pcapng writes them: high then low 32 bits.
    fn ts(&mut self, ns: u64) -> &mut Self {
        self.u32((ns >> 32) as u32).u32(ns as u32)
    }

    fn opt(&mut self, code: u16, val: &[u8]) -> &mut Self {
        let val = val.get(..MAX_OPT).unwrap_or(val);
        self.opts = true;
        self.u16(code).u16(val.len() as u16).bytes(val);
        let pad = val.len().div_ceil(4) * 4 - val.len();
        self.bytes(&[0u8; 3][..pad])
    }

    fn opt_str(&mut self, code: u16, s: &str) -> &mut Self {
        if s.is_empty() {
            return self;
        }
        // Cut on a character boundary.
        let mut end = s.len().min(MAX_OPT);
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        self.opt(code, &s.as_bytes()[..end])
    }

    fn opt_u64(&mut self, code: u16, v: u64) -> &mut Self {
        self.opt(code, &v.to_ne_bytes())
    }

    fn opt_ts(&mut self, code: u16, ns: u64) -> &mut Self {
        let mut b = [0u8; 8];
        b[..4].copy_from_slice(&((ns >> 32) as u32).to_ne_bytes());
        b[4..].copy_from_slice(&(ns as u32).to_ne_bytes());
        self.opt(code, &b)
    }

    /// Ends the options (if any), appends the trailing length and fills in the length.
    fn finish(&mut self) {
        if self.opts {
            self.u16(OPT_END).u16(0);
        }
        let total = (self.buf.len() + 4) as u32;
        self.u32(total);
        self.buf[4..8].copy_from_slice(&total.to_ne_bytes());
    }
}

/// A [`RecordWrite`] that gave less room than asked.
#[cold]
fn short_record() -> io::Error {
    io::Error::other("the output gave a record less room than asked")
}

/// Writes pcapng (native byte order, one section) to `W`.
///
/// It asks `W` for one record per packet ([`RecordWrite::record`]) and makes one `write` per
/// other block, and buffers nothing itself: give it a
/// [`RecordFile`](crate::port::file::RecordFile) (or a `Vec<u8>`).
/// Interfaces are described with [`PcapNgWriter::describe`] before their packets; a packet of an
/// interface never described gets a description without a name first. Packets longer than the
/// snapshot length are truncated in the file; their original length is kept.
pub struct PcapNgWriter<W: RecordWrite> {
    w: W,
    link: LinkType,
    snaplen: u32,
    /// Bytes written of a packet at most (the snapshot length unless kept whole).
    cut: usize,
    /// Packets written per described interface (index = interface id).
    written: Vec<u64>,
    /// First and last packet time written per described interface (a capture file's
    /// interfaces: the span of their statistics).
    span: Vec<(u64, u64)>,
    packets: u64,
    bytes: u64,
    /// Blocks handed to `w`.
    blocks: u64,
    /// Indexes (in `blocks`) of the blocks that are not packets.
    meta: Vec<u64>,
    /// When the writer was created, ns since the epoch.
    created_ns: u64,
    stats_written: bool,
    scratch: Vec<u8>,
}

impl<W: RecordWrite> PcapNgWriter<W> {
    /// Writes a section header (application [`USER_APPL`], the OS) for packets of `link`
    /// truncated to `snaplen` (0 = 262144). `link` is the link type of interfaces described
    /// without one (packets of interfaces never described).
    pub fn new(w: W, link: LinkType, snaplen: u32) -> io::Result<PcapNgWriter<W>> {
        let mut me = PcapNgWriter {
            w,
            link,
            snaplen: if snaplen == 0 {
                DEFAULT_SNAPLEN
            } else {
                snaplen
            },
            cut: if snaplen == 0 {
                DEFAULT_SNAPLEN as usize
            } else {
                snaplen as usize
            },
            written: Vec::new(),
            span: Vec::new(),
            packets: 0,
            bytes: 0,
            blocks: 0,
            meta: Vec::new(),
            created_ns: crate::time::wall_ns(),
            stats_written: false,
            scratch: Vec::with_capacity(256),
        };
        let os = os_name();
        let mut b = BlockBuf::new(&mut me.scratch, SHB);
        b.u32(BOM).u16(1).u16(0).bytes(&[0xff; 8]); // section length: unknown
        b.opt_str(SHB_OS, &os).opt_str(SHB_USERAPPL, USER_APPL);
        b.finish();
        me.put_meta()?;
        Ok(me)
    }

    /// Writes the block in `scratch` as one record.
    fn put_meta(&mut self) -> io::Result<()> {
        self.w.write_all(&self.scratch)?;
        self.meta.push(self.blocks);
        self.blocks += 1;
        Ok(())
    }

    /// Describes the next interfaces (ids from [`PcapNgWriter::interfaces`] on): the name, the
    /// link type, the snapshot length and nanosecond timestamps.
    pub fn describe(&mut self, ifaces: &[Interface]) -> io::Result<()> {
        for i in ifaces {
            // A capture file's interface keeps its own snapshot length: as it is when packets
            // are kept whole (a copy, no -s: each interface of a pcapng input says what its own
            // block said, whatever the first one's), else no larger than this writer's.
            let snaplen = match i.snaplen {
                0 => self.snaplen,
                s if self.cut == usize::MAX => s,
                s => s.min(self.snaplen),
            };
            self.describe_one(i.link, &i.name, "", snaplen)?;
        }
        Ok(())
    }

    fn describe_one(
        &mut self,
        link: LinkType,
        name: &str,
        descr: &str,
        snaplen: u32,
    ) -> io::Result<()> {
        let mut b = BlockBuf::new(&mut self.scratch, IDB);
        b.u16(link.0 as u16).u16(0).u32(snaplen);
        b.opt_str(IF_NAME, name)
            .opt_str(IF_DESCRIPTION, descr)
            .opt(IF_TSRESOL, &[9]);
        b.finish();
        self.put_meta()?;
        self.written.push(0);
        self.span.push((u64::MAX, 0));
        Ok(())
    }

    /// Describes interfaces up to `id` that no one described (no name).
    #[cold]
    #[inline(never)]
    fn describe_up_to(&mut self, id: usize) -> io::Result<()> {
        while self.written.len() <= id {
            let k = self.written.len();
            let descr = if k == 0 {
                String::new()
            } else {
                format!("interface {k} of the input (not described by it)")
            };
            self.describe_one(self.link, "", &descr, self.snaplen)?;
        }
        Ok(())
    }

    /// Appends one packet of interface `iface`: `ts` in ns since the epoch, `data` its captured
    /// bytes, `wire_len` its length on the wire (raised to the captured length if smaller).
    #[inline]
    pub fn write_packet(
        &mut self,
        iface: u16,
        ts: u64,
        data: &[u8],
        wire_len: u32,
    ) -> io::Result<()> {
        self.write_epb(iface, ts, data, wire_len, 0)
    }

    /// As [`Self::write_packet`], with the packet's direction from its descriptor flags
    /// (`Desc::F_INBOUND`/`F_OUTBOUND`) written as `epb_flags` (inbound 1, outbound 2, as
    /// libpcap writes them); no option when the direction is unknown.
    #[inline]
    pub fn write_packet_flagged(
        &mut self,
        iface: u16,
        ts: u64,
        data: &[u8],
        wire_len: u32,
        desc_flags: u16,
    ) -> io::Result<()> {
        let dir = if desc_flags & Desc::F_OUTBOUND != 0 {
            2
        } else if desc_flags & Desc::F_INBOUND != 0 {
            1
        } else {
            0
        };
        self.write_epb(iface, ts, data, wire_len, dir)
    }

    /// One enhanced packet block; `epb_flags` when `dir` is not 0.
    #[inline]
    fn write_epb(
        &mut self,
        iface: u16,
        ts: u64,
        data: &[u8],
        wire_len: u32,
        dir: u32,
    ) -> io::Result<()> {
        let id = iface as usize;
        if id >= self.written.len() {
            self.describe_up_to(id)?;
        }
        let cap = data.len().min(self.cut);
        let wire = wire_len.max(data.len().min(u32::MAX as usize) as u32);
        let pad = cap.wrapping_neg() & 3;
        // epb_flags (code 2, 4 bytes) and opt_endofopt.
        let opts = if dir != 0 { 12 } else { 0 };
        let total = (28 + cap + pad + opts + 4) as u32;
        let mut h = [0u8; 28];
        h[0..4].copy_from_slice(&EPB.to_ne_bytes());
        h[4..8].copy_from_slice(&total.to_ne_bytes());
        h[8..12].copy_from_slice(&u32::from(iface).to_ne_bytes());
        h[12..16].copy_from_slice(&((ts >> 32) as u32).to_ne_bytes());
        h[16..20].copy_from_slice(&(ts as u32).to_ne_bytes());
        h[20..24].copy_from_slice(&(cap as u32).to_ne_bytes());
        h[24..28].copy_from_slice(&wire.to_ne_bytes());
        let out = self.w.record(total as usize)?;
        // 28 + cap + pad + 4 bytes: the header, the data, then 4 zero bytes right after the
        // data (the padding and, when it is shorter than 4, the start of the trailer), then the
        // trailer over them: fixed-size stores and one copy.
        let Some((head, rest)) = out.split_first_chunk_mut::<28>() else {
            return Err(short_record());
        };
        *head = h;
        let Some((body, rest)) = rest.split_at_mut_checked(cap) else {
            return Err(short_record());
        };
        copy_packet(body, data.get(..cap).unwrap_or(data));
        let Some((zero, _)) = rest.split_first_chunk_mut::<4>() else {
            return Err(short_record());
        };
        *zero = [0; 4];
        if dir != 0 {
            let Some(o) = rest.get_mut(pad..pad + 12) else {
                return Err(short_record());
            };
            o[0..2].copy_from_slice(&2u16.to_ne_bytes());
            o[2..4].copy_from_slice(&4u16.to_ne_bytes());
            o[4..8].copy_from_slice(&dir.to_ne_bytes());
            o[8..12].fill(0);
        }
        let Some(tail) = rest.last_chunk_mut::<4>() else {
            return Err(short_record());
        };
        *tail = total.to_ne_bytes();
        self.blocks += 1;
        if let Some(c) = self.written.get_mut(id) {
            *c += 1;
        }
        if let Some(s) = self.span.get_mut(id) {
            *s = (s.0.min(ts), s.1.max(ts));
        }
        self.packets += 1;
        self.bytes += u64::from(wire);
        Ok(())
    }

    /// Appends every packet of `batch` (the batch is left as it is), each on the interface its
    /// `Desc::port` names; returns how many.
    pub fn write_batch(&mut self, batch: &Batch) -> io::Result<usize> {
        for p in batch.iter() {
            self.write_packet_flagged(
                p.desc.port,
                p.desc.ts,
                p.data,
                p.desc.wire_len,
                p.desc.flags,
            )?;
        }
        Ok(batch.len())
    }

    /// Writes an interface statistics block for every described interface: `stats[i]` for
    /// interface `i` (start and end time, `isb_ifrecv`, `isb_ifdrop`, `isb_filteraccept`,
    /// `isb_osdrop`, a comment with the drops by reason), and for each the packets of it this
    /// file holds (`isb_usrdeliv`). An interface without figures gets the writer's own: its
    /// creation and now, and the packets it wrote. Figures without times (a capture file's
    /// interface, `start_ns` and `end_ns` 0) span the packets of it written here.
    pub fn write_stats(&mut self, stats: &[InterfaceStats]) -> io::Result<()> {
        self.write_stats_named(stats, &[])
    }

    /// As [`PcapNgWriter::write_stats`], the drop reasons of `names` called by the names given
    /// in the comment (a recorder's `ring_full` is its `disk_full`).
    pub fn write_stats_named(
        &mut self,
        stats: &[InterfaceStats],
        names: &[(DropReason, &str)],
    ) -> io::Result<()> {
        let now = crate::time::wall_ns();
        for id in 0..self.written.len() {
            let written = self.written[id];
            let s = stats.get(id);
            let comment = s.map(|s| comment_of(s, names)).unwrap_or_default();
            let (first, last) = self.span[id];
            let (start, end) = match s {
                Some(s) if s.start_ns == 0 && s.end_ns == 0 && written > 0 => (first, last),
                _ => {
                    let start = s.map_or(0, |s| s.start_ns);
                    let end = s.map_or(0, |s| s.end_ns);
                    (
                        if start == 0 { self.created_ns } else { start },
                        if end == 0 { now } else { end },
                    )
                }
            };
            let mut b = BlockBuf::new(&mut self.scratch, ISB);
            b.u32(id as u32).ts(now);
            b.opt_ts(ISB_STARTTIME, start).opt_ts(ISB_ENDTIME, end);
            if let Some(s) = s {
                b.opt_u64(ISB_IFRECV, s.received())
                    .opt_u64(ISB_IFDROP, s.kernel_drops())
                    .opt_u64(ISB_FILTERACCEPT, s.accepted)
                    .opt_u64(ISB_OSDROP, s.own_drops());
            }
            b.opt_u64(ISB_USRDELIV, written)
                .opt_str(OPT_COMMENT, &comment);
            b.finish();
            self.put_meta()?;
        }
        self.stats_written = true;
        Ok(())
    }

    /// Whether [`PcapNgWriter::write_stats`] was called.
    pub fn stats_written(&self) -> bool {
        self.stats_written
    }

    /// Interfaces described so far.
    pub fn interfaces(&self) -> usize {
        self.written.len()
    }

    /// Packets written per interface (index = interface id).
    pub fn packets_by_interface(&self) -> &[u64] {
        &self.written
    }

    /// Of the first `blocks` blocks handed to the writer, how many are packets.
    pub fn packets_among(&self, blocks: u64) -> u64 {
        let meta = self.meta.iter().take_while(|&&m| m < blocks).count() as u64;
        blocks.min(self.blocks) - meta
    }

    /// Writes every packet whole from now on, even one longer than the interfaces' snapshot
    /// length (a copy of a file whose records are longer than its header says stays a copy).
    pub fn keep_whole(&mut self) {
        self.cut = usize::MAX;
    }

    /// Flushes the underlying writer.
    pub fn flush(&mut self) -> io::Result<()> {
        self.w.flush()
    }

    /// The link type of interfaces described without one.
    pub fn link_type(&self) -> LinkType {
        self.link
    }

    /// The snapshot length written in every interface description.
    pub fn snaplen(&self) -> u32 {
        self.snaplen
    }

    /// Packets written so far.
    pub fn packets(&self) -> u64 {
        self.packets
    }

    /// Wire bytes of the packets written so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The underlying writer.
    pub fn get_ref(&self) -> &W {
        &self.w
    }

    /// The underlying writer, mutably.
    pub fn get_mut(&mut self) -> &mut W {
        &mut self.w
    }

    /// Gives back the underlying writer (not flushed).
    pub fn into_inner(self) -> W {
        self.w
    }
}

/// `received 100: accepted 90, filtered 6, dropped 4 (kernel=3 no_frame=1)`.
fn comment_of(s: &InterfaceStats, names: &[(DropReason, &str)]) -> String {
    let lost = s.drops.without(DropReason::Filter);
    let name = |r: DropReason| {
        names
            .iter()
            .find(|(n, _)| *n == r)
            .map_or(r.name(), |(_, s)| s)
    };
    let reasons: Vec<String> = DropReason::ALL
        .iter()
        .filter(|&&r| r != DropReason::Filter && lost.get(r) > 0)
        .map(|&r| format!("{}={}", name(r), lost.get(r)))
        .collect();
    let mut c = format!(
        "linerate: received {}: accepted {}, filtered {}, dropped {}",
        s.received(),
        s.accepted,
        s.drops.get(DropReason::Filter),
        lost.total()
    );
    if !reasons.is_empty() {
        c.push_str(&format!(" ({})", reasons.join(" ")));
    }
    c
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::port::pcap::PcapReader;
    use std::io::Cursor;

    /// Splits a little-endian pcapng file into (type, body) blocks, checking every length.
    fn blocks(f: &[u8]) -> Vec<(u32, Vec<u8>)> {
        let mut out = Vec::new();
        let mut at = 0;
        let rd = |b: &[u8], i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
        while at < f.len() {
            let (t, len) = (rd(f, at), rd(f, at + 4) as usize);
            assert!(len >= 12 && len % 4 == 0, "block at {at}: length {len}");
            assert_eq!(rd(f, at + len - 4) as usize, len, "trailer at {at}");
            out.push((t, f[at + 8..at + len - 4].to_vec()));
            at += len;
        }
        assert_eq!(at, f.len(), "the file ends on a whole block");
        out
    }

    /// Options from `body[from..]`: (code, value).
    fn options(body: &[u8], from: usize) -> Vec<(u16, Vec<u8>)> {
        let mut v = Vec::new();
        let mut at = from;
        loop {
            let code = u16::from_le_bytes([body[at], body[at + 1]]);
            let len = u16::from_le_bytes([body[at + 2], body[at + 3]]) as usize;
            if code == 0 {
                assert_eq!(len, 0);
                assert_eq!(at + 4, body.len(), "end of options ends the block");
                return v;
            }
            v.push((code, body[at + 4..at + 4 + len].to_vec()));
            at += 4 + len.div_ceil(4) * 4;
        }
    }

    fn opt(o: &[(u16, Vec<u8>)], code: u16) -> Option<&[u8]> {
        o.iter().find(|x| x.0 == code).map(|x| &x.1[..])
    }

    fn u64_of(b: &[u8]) -> u64 {
        u64::from_le_bytes(b.try_into().unwrap())
    }

    fn ts_of(b: &[u8]) -> u64 {
        let hi = u32::from_le_bytes(b[..4].try_into().unwrap()) as u64;
        let lo = u32::from_le_bytes(b[4..8].try_into().unwrap()) as u64;
        (hi << 32) | lo
    }

    fn pkt(i: usize, len: usize) -> Vec<u8> {
        (0..len).map(|k| (i * 13 + k) as u8).collect()
    }

    /// A capture file's interface keeps its snapshot length (65535 where the file says so, not
    /// the writer's 262144), and its statistics without times span its packets.
    /// A copy (packets kept whole) of a pcapng input whose interfaces have different link types
    /// and snapshot lengths: each interface block says its own, not the first one's.
    #[test]
    fn a_copy_keeps_each_interfaces_own_snaplen_and_link_type() {
        let mut w = PcapNgWriter::new(Vec::new(), LinkType::ETHERNET, 8192).unwrap();
        w.keep_whole();
        w.describe(&[
            Interface::new("a", LinkType(104)).with_snaplen(8192),
            Interface::new("b", LinkType::ETHERNET).with_snaplen(65535),
            Interface::new("c", LinkType::ETHERNET).with_snaplen(10000),
        ])
        .unwrap();
        let f = w.into_inner();
        // Interface blocks (type 1): link type at +8, snaplen at +12.
        let mut at = 0;
        let mut idbs = Vec::new();
        while at + 12 <= f.len() {
            let t = u32::from_le_bytes(f[at..at + 4].try_into().unwrap());
            let len = u32::from_le_bytes(f[at + 4..at + 8].try_into().unwrap()) as usize;
            if t == 1 {
                let link = u16::from_le_bytes([f[at + 8], f[at + 9]]);
                let snap = u32::from_le_bytes(f[at + 12..at + 16].try_into().unwrap());
                idbs.push((link, snap));
            }
            at += len;
        }
        assert_eq!(idbs, vec![(104, 8192), (1, 65535), (1, 10000)]);
    }

    #[test]
    fn a_capture_files_interfaces_keep_its_snaplen_and_packet_times() {
        let mut w = PcapNgWriter::new(Vec::new(), LinkType::ETHERNET, 0).unwrap();
        w.describe(&[
            Interface::new("pcap:a.pcap", LinkType::ETHERNET).with_snaplen(65535),
            Interface::new("afpacket:eth0", LinkType::ETHERNET),
        ])
        .unwrap();
        let t = 1_700_000_000_000_000_000u64;
        for (i, ts) in [t + 5, t + 2, t + 9].into_iter().enumerate() {
            w.write_packet(0, ts, &pkt(i, 60), 0).unwrap();
        }
        w.write_packet(1, t + 100, &pkt(9, 60), 0).unwrap();
        let file = InterfaceStats {
            accepted: 3,
            ..Default::default()
        };
        let live = InterfaceStats {
            start_ns: t - 1000,
            end_ns: t + 1000,
            accepted: 1,
            ..Default::default()
        };
        w.write_stats(&[file, live]).unwrap();
        let f = w.into_inner();
        let b = blocks(&f);
        let idb: Vec<u32> = b
            .iter()
            .filter(|x| x.0 == IDB)
            .map(|x| u32::from_le_bytes(x.1[4..8].try_into().unwrap()))
            .collect();
        assert_eq!(idb, vec![65535, DEFAULT_SNAPLEN]);
        let isb: Vec<(u64, u64)> = b
            .iter()
            .filter(|x| x.0 == ISB)
            .map(|x| {
                let o = options(&x.1, 12);
                (
                    ts_of(opt(&o, ISB_STARTTIME).unwrap()),
                    ts_of(opt(&o, ISB_ENDTIME).unwrap()),
                )
            })
            .collect();
        assert_eq!(isb, vec![(t + 2, t + 9), (t - 1000, t + 1000)]);
        // A writer's -s below the file's: the smaller.
        let mut w = PcapNgWriter::new(Vec::new(), LinkType::ETHERNET, 100).unwrap();
        w.describe(&[Interface::new("f", LinkType::ETHERNET).with_snaplen(65535)])
            .unwrap();
        let f = w.into_inner();
        let b = blocks(&f);
        assert_eq!(u32::from_le_bytes(b[1].1[4..8].try_into().unwrap()), 100);
    }

    #[test]
    fn blocks_are_what_the_format_says() {
        let mut w = PcapNgWriter::new(Vec::new(), LinkType::ETHERNET, 0).unwrap();
        w.describe(&[
            Interface::new("afpacket:eth0", LinkType::ETHERNET),
            Interface::new("pcap:b.pcap", LinkType::RAW),
        ])
        .unwrap();
        // Every padding (0 to 3 bytes) and a jumbo frame.
        let lens = [60usize, 61, 62, 63, 9014];
        for (i, &len) in lens.iter().enumerate() {
            w.write_packet(
                (i % 2) as u16,
                1_700_000_000_123_456_789 + i as u64,
                &pkt(i, len),
                0,
            )
            .unwrap();
        }
        let mut drops = crate::port::Drops::default();
        drops.add(DropReason::Kernel, 7);
        drops.add(DropReason::NoFrame, 2);
        drops.add(DropReason::Filter, 5);
        let s0 = InterfaceStats {
            start_ns: 1_000_000_000_000,
            end_ns: 2_000_000_000_123,
            accepted: 3,
            drops,
        };
        w.write_stats(&[s0]).unwrap();
        assert_eq!(w.packets_by_interface(), &[3, 2]);
        let f = w.into_inner();
        let b = blocks(&f);
        let types: Vec<u32> = b.iter().map(|x| x.0).collect();
        assert_eq!(
            types,
            vec![SHB, IDB, IDB, EPB, EPB, EPB, EPB, EPB, ISB, ISB]
        );
        // Section header: byte-order magic, version 1.0, unknown length, OS and application.
        let shb = &b[0].1;
        assert_eq!(u32::from_le_bytes(shb[..4].try_into().unwrap()), BOM);
        assert_eq!(&shb[4..8], &[1, 0, 0, 0]);
        assert_eq!(&shb[8..16], &[0xff; 8]);
        let o = options(shb, 16);
        assert_eq!(opt(&o, SHB_USERAPPL), Some(USER_APPL.as_bytes()));
        assert!(USER_APPL.starts_with("linerate 0."));
        assert_eq!(opt(&o, SHB_OS), Some(os_name().as_bytes()));
        assert!(os_name().starts_with("Linux "), "{}", os_name());
        // Interfaces: link type, snaplen, name, nanoseconds.
        for (k, (name, link)) in [("afpacket:eth0", 1u16), ("pcap:b.pcap", 101)]
            .iter()
            .enumerate()
        {
            let idb = &b[1 + k].1;
            assert_eq!(u16::from_le_bytes([idb[0], idb[1]]), *link);
            assert_eq!(u32::from_le_bytes(idb[4..8].try_into().unwrap()), 262_144);
            let o = options(idb, 8);
            assert_eq!(opt(&o, IF_NAME), Some(name.as_bytes()));
            assert_eq!(opt(&o, IF_TSRESOL), Some(&[9u8][..]));
        }
        // Packets: interface, timestamp, lengths, bytes, padding.
        for (i, &len) in lens.iter().enumerate() {
            let e = &b[3 + i].1;
            let rd = |k: usize| u32::from_le_bytes(e[k..k + 4].try_into().unwrap());
            assert_eq!(rd(0), (i % 2) as u32);
            assert_eq!(ts_of(&e[4..12]), 1_700_000_000_123_456_789 + i as u64);
            assert_eq!((rd(12) as usize, rd(16) as usize), (len, len));
            assert_eq!(&e[20..20 + len], &pkt(i, len)[..]);
            assert_eq!(e.len(), 20 + len.div_ceil(4) * 4, "no options, padded");
        }
        // Statistics: given for interface 0, the writer's own for interface 1.
        let isb = &b[8].1;
        assert_eq!(u32::from_le_bytes(isb[..4].try_into().unwrap()), 0);
        let o = options(isb, 12);
        assert_eq!(ts_of(opt(&o, ISB_STARTTIME).unwrap()), 1_000_000_000_000);
        assert_eq!(ts_of(opt(&o, ISB_ENDTIME).unwrap()), 2_000_000_000_123);
        assert_eq!(u64_of(opt(&o, ISB_IFRECV).unwrap()), 3 + 7 + 2 + 5);
        assert_eq!(u64_of(opt(&o, ISB_IFDROP).unwrap()), 7);
        assert_eq!(u64_of(opt(&o, ISB_OSDROP).unwrap()), 2);
        assert_eq!(u64_of(opt(&o, ISB_FILTERACCEPT).unwrap()), 3);
        assert_eq!(u64_of(opt(&o, ISB_USRDELIV).unwrap()), 3);
        let c = String::from_utf8(opt(&o, OPT_COMMENT).unwrap().to_vec()).unwrap();
        assert_eq!(
            c,
            "linerate: received 17: accepted 3, filtered 5, dropped 9 (no_frame=2 kernel=7)"
        );
        let o = options(&b[9].1, 12);
        assert_eq!(u32::from_le_bytes(b[9].1[..4].try_into().unwrap()), 1);
        assert!(opt(&o, ISB_IFRECV).is_none() && opt(&o, ISB_IFDROP).is_none());
        assert_eq!(u64_of(opt(&o, ISB_USRDELIV).unwrap()), 2);
        assert!(ts_of(opt(&o, ISB_ENDTIME).unwrap()) >= ts_of(opt(&o, ISB_STARTTIME).unwrap()));
    }

    #[test]
    fn reads_back_with_interfaces_names_and_nanoseconds() {
        let mut w = PcapNgWriter::new(Vec::new(), LinkType::ETHERNET, 100).unwrap();
        w.describe(&[
            Interface::new("a", LinkType::ETHERNET),
            Interface::new("b", LinkType::ETHERNET),
        ])
        .unwrap();
        for i in 0..50usize {
            w.write_packet((i % 2) as u16, i as u64 * 1001, &pkt(i, 60 + i * 3), 9000)
                .unwrap();
        }
        w.write_stats(&[]).unwrap();
        let f = w.into_inner();
        let mut r = PcapReader::new(Cursor::new(f), "ng").unwrap();
        let mut i = 0usize;
        while let Some(rec) = r.next_packet().unwrap() {
            let want = pkt(i, 60 + i * 3);
            assert_eq!(rec.data, &want[..want.len().min(100)], "packet {i} snapped");
            assert_eq!(
                (rec.ts, rec.wire_len, rec.iface),
                (i as u64 * 1001, 9000, (i % 2) as u32)
            );
            i += 1;
        }
        assert_eq!(i, 50);
        let names: Vec<Option<&str>> = r.interfaces().iter().map(|x| x.1).collect();
        assert_eq!(names, vec![Some("a"), Some("b")]);
    }

    #[test]
    fn a_packet_of_an_undescribed_interface_gets_a_description_first() {
        let mut w = PcapNgWriter::new(Vec::new(), LinkType::RAW, 0).unwrap();
        w.write_packet(2, 5, &pkt(0, 40), 40).unwrap();
        w.write_packet(0, 6, &pkt(1, 40), 40).unwrap();
        assert_eq!(w.interfaces(), 3);
        // SHB, 3 IDBs: 4 meta blocks before the first packet.
        assert_eq!(w.packets_among(4), 0);
        assert_eq!(w.packets_among(5), 1);
        assert_eq!(w.packets_among(100), 2);
        let f = w.into_inner();
        let types: Vec<u32> = blocks(&f).iter().map(|x| x.0).collect();
        assert_eq!(types, vec![SHB, IDB, IDB, IDB, EPB, EPB]);
        let mut r = PcapReader::new(Cursor::new(f), "ng").unwrap();
        assert_eq!(r.link_type(), LinkType::RAW);
        assert_eq!(r.next_packet().unwrap().unwrap().iface, 2);
        assert_eq!(r.next_packet().unwrap().unwrap().iface, 0);
    }

    #[test]
    fn a_record_file_takes_each_packet_as_one_record() {
        let d = std::env::temp_dir().join(format!("linerate-ng-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let p = d.join("r.pcapng");
        let f = crate::port::file::create(p.to_str().unwrap(), &Default::default()).unwrap();
        let mut w = PcapNgWriter::new(
            crate::port::file::RecordFile::new(f, 4096),
            LinkType::ETHERNET,
            0,
        )
        .unwrap();
        w.describe(&[Interface::new("x", LinkType::ETHERNET)])
            .unwrap();
        for i in 0..100 {
            w.write_packet(0, i, &pkt(i as usize, 61 + i as usize), 0)
                .unwrap();
        }
        w.write_stats(&[]).unwrap();
        w.flush().unwrap();
        // SHB + IDB + 100 EPB + ISB, each one record.
        assert_eq!(w.get_ref().records_written(), 103);
        assert_eq!(w.packets_among(w.get_ref().records_written()), 100);
        drop(w);
        let b = blocks(&std::fs::read(&p).unwrap());
        assert_eq!(b.len(), 103);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn long_names_are_cut_on_a_character_boundary() {
        let long = "é".repeat(40_000);
        let mut w = PcapNgWriter::new(Vec::new(), LinkType::ETHERNET, 0).unwrap();
        w.describe(&[Interface::new(&long, LinkType::ETHERNET)])
            .unwrap();
        let f = w.into_inner();
        let b = blocks(&f);
        let o = options(&b[1].1, 8);
        let name = std::str::from_utf8(opt(&o, IF_NAME).unwrap()).unwrap();
        assert!(name.len() <= MAX_OPT && name.len() > MAX_OPT - 2);
    }
    /// An enhanced packet block as the writer of the previous release built it: a header
    /// array, the data and a padding-and-trailer array, three parts of one record.
    fn three_part_epb(iface: u16, ts: u64, data: &[u8], wire_len: u32, cut: usize) -> Vec<u8> {
        let cap = data.len().min(cut);
        let wire = wire_len.max(data.len().min(u32::MAX as usize) as u32);
        let pad = cap.wrapping_neg() & 3;
        let total = (28 + cap + pad + 4) as u32;
        let mut h = [0u8; 28];
        h[0..4].copy_from_slice(&EPB.to_ne_bytes());
        h[4..8].copy_from_slice(&total.to_ne_bytes());
        h[8..12].copy_from_slice(&u32::from(iface).to_ne_bytes());
        h[12..16].copy_from_slice(&((ts >> 32) as u32).to_ne_bytes());
        h[16..20].copy_from_slice(&(ts as u32).to_ne_bytes());
        h[20..24].copy_from_slice(&(cap as u32).to_ne_bytes());
        h[24..28].copy_from_slice(&wire.to_ne_bytes());
        let mut t = [0u8; 8];
        t[pad..pad + 4].copy_from_slice(&total.to_ne_bytes());
        [&h[..], &data[..cap], &t[..pad + 4]].concat()
    }

    /// One packet to write: interface, timestamp, bytes, wire length.
    type Pkt = (u16, u64, Vec<u8>, u32);

    /// Writes `pkts` through a [`RecordFile`](crate::port::file::RecordFile) of `buf` bytes
    /// (records straddle its commits; one larger than it grows it) and checks that the file is
    /// its other blocks in order with every packet block byte for byte the three-part one.
    fn same_as_three_part(
        file: &std::path::Path,
        ifaces: &[Interface],
        snaplen: u32,
        whole: bool,
        pkts: &[Pkt],
        buf: usize,
    ) {
        use crate::port::file::{create, RecordFile};
        let f = create(file.to_str().unwrap(), &Default::default()).unwrap();
        let mut w =
            PcapNgWriter::new(RecordFile::new(f, buf), LinkType::ETHERNET, snaplen).unwrap();
        w.describe(ifaces).unwrap();
        if whole {
            w.keep_whole();
        }
        let cut = if whole {
            usize::MAX
        } else if snaplen == 0 {
            DEFAULT_SNAPLEN as usize
        } else {
            snaplen as usize
        };
        let mut want = Vec::new();
        for (iface, ts, data, wire) in pkts {
            w.write_packet(*iface, *ts, data, *wire).unwrap();
            want.push(three_part_epb(*iface, *ts, data, *wire, cut));
        }
        w.write_stats(&[]).unwrap();
        w.flush().unwrap();
        drop(w);
        let got = std::fs::read(file).unwrap();
        // Rebuild the file from its blocks, every packet block replaced by the three-part one.
        let mut rebuilt = Vec::with_capacity(got.len());
        let mut at = 0;
        let mut want = want.into_iter();
        while at + 8 <= got.len() {
            let t = u32::from_ne_bytes(got[at..at + 4].try_into().unwrap());
            let len = u32::from_ne_bytes(got[at + 4..at + 8].try_into().unwrap()) as usize;
            if t == EPB {
                rebuilt.extend_from_slice(&want.next().expect("more packet blocks than packets"));
            } else {
                rebuilt.extend_from_slice(&got[at..at + len]);
            }
            at += len;
        }
        assert!(want.next().is_none(), "fewer packet blocks than packets");
        assert!(
            got == rebuilt,
            "{}: the packet blocks differ",
            file.display()
        );
    }

    #[test]
    fn packet_blocks_are_byte_identical_to_the_three_part_writer() {
        let d = std::env::temp_dir().join(format!("linerate-ng-same-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let f = d.join("g.pcapng");
        // Two interfaces (as `-i a,b`), one never described (3), every padding, snapped and
        // jumbo frames, wire lengths below and above the captured ones, big timestamps.
        let ifaces = [
            Interface::new("pcap:a.pcap", LinkType::ETHERNET),
            Interface::new("pcap:b.pcap", LinkType::ETHERNET),
        ];
        let pkts: Vec<Pkt> = (0..3000usize)
            .map(|i| {
                let len = match i % 7 {
                    0 => 9014,
                    1 => 0,
                    _ => 14 + (i * 37) % 1500,
                };
                let iface = [0u16, 1, 0, 1, 3][i % 5];
                let wire = [0u32, 60, 65_535, u32::MAX][i % 4];
                (iface, u64::MAX - i as u64 * 999_999_937, pkt(i, len), wire)
            })
            .collect();
        for (snaplen, whole, buf) in [(0, false, 4096), (100, false, 1 << 20), (64, true, 1)] {
            same_as_three_part(&f, &ifaces, snaplen, whole, &pkts, buf);
        }
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn the_corpus_written_as_pcapng_is_byte_identical_to_the_three_part_writer() {
        let Some(dir) = linerate_test_support::corpus() else {
            return;
        };
        let d = std::env::temp_dir().join(format!("linerate-ng-corpus-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let out = d.join("c.pcapng");
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        let (mut read, mut packets) = (0, 0);
        for p in &files {
            let Ok(src) = std::fs::File::open(p) else {
                continue;
            };
            let Ok(mut r) = PcapReader::new(std::io::BufReader::new(src), "c") else {
                continue;
            };
            let ifaces: Vec<Interface> = r
                .interfaces()
                .iter()
                .map(|(l, n)| Interface::new(n.unwrap_or(""), *l))
                .collect();
            let mut pkts = Vec::new();
            while let Ok(Some(rec)) = r.next_packet() {
                let Ok(iface) = u16::try_from(rec.iface) else {
                    break;
                };
                pkts.push((iface, rec.ts, rec.data.to_vec(), rec.wire_len));
            }
            read += 1;
            packets += pkts.len();
            same_as_three_part(&out, &ifaces, 0, true, &pkts, 64 << 10);
        }
        assert!(
            read > 700 && packets > 9_000,
            "{read} files, {packets} packets"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }
}

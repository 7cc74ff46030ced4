//! A streaming reader of classic pcap and pcapng files over any `Read`.
//!
//! Hand-written rather than built on `pcap-file`: it must name the byte offset of a bad record,
//! never panic, never allocate from a length field, and parse headers straight out of one large
//! buffer (one `read` per 2 MiB, no per-packet allocation or copy besides the caller's).
//!
//! Formats: classic pcap (microsecond and nanosecond magics, both byte orders, and the
//! "modified" 0xa1b2cd34 flavour with 24-byte record headers) and pcapng (sections of either byte
//! order, IDB with `if_tsresol`/`if_tsoffset`, EPB, SPB, obsolete PB; other blocks skipped).
//! pcapng files with several interfaces report each packet's own link type in [`Record::link`];
//! [`PcapReader::link_type`] is the first interface's.
//!
//! A source that has nothing to give now (a FIFO or standard input whose writer is slow) may
//! return [`ErrorKind::WouldBlock`]: [`PcapReader::next_packet`] then returns `Ok(None)` without
//! [`PcapReader::is_done`], consumes nothing of a record it could not finish, and goes on where
//! it was at the next call. [`PcapReader::new`] retries until the header is there.

use crate::mem::Pool;
use crate::port::{LinkType, PortError};
use std::io::{ErrorKind, Read};
use std::sync::Arc;

/// Size of the read buffer (it starts at [`INITIAL_BUF`] and grows to this once the input proves
/// larger, so small inputs cost little).
pub const BUF_SIZE: usize = 2 << 20;
/// Initial size of the read buffer.
pub const INITIAL_BUF: usize = 64 << 10;
/// Largest captured length accepted in a record (libpcap's `MAXIMUM_SNAPLEN`).
pub const MAX_CAPLEN: u32 = 262_144;
/// Largest pcapng block that is parsed (headers, interfaces, packets); larger unknown blocks are
/// skipped without being buffered.
pub const MAX_BLOCK: u32 = 1 << 20;
/// Most interfaces a pcapng file may describe.
pub const MAX_IFACES: usize = 65_536;

const PCAP_US: u32 = 0xa1b2_c3d4;
const PCAP_NS: u32 = 0xa1b2_3c4d;
const PCAP_MODIFIED: u32 = 0xa1b2_cd34;
const NG_SHB: u32 = 0x0a0d_0d0a;
const NG_BOM: u32 = 0x1a2b_3c4d;
const NG_IDB: u32 = 1;
const NG_PB: u32 = 2;
const NG_SPB: u32 = 3;
const NG_EPB: u32 = 6;

/// The flavour of a capture file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileFormat {
    /// Classic pcap.
    Pcap {
        /// Timestamps in nanoseconds (magic 0xa1b23c4d) rather than microseconds.
        nanos: bool,
        /// Written in big-endian byte order.
        big_endian: bool,
    },
    /// pcapng (byte order of the first section).
    PcapNg {
        /// Written in big-endian byte order.
        big_endian: bool,
    },
}

/// One packet read from a file; `data` is valid until the next call.
#[derive(Clone, Copy, Debug)]
pub struct Record<'a> {
    /// Timestamp, ns since the Unix epoch.
    pub ts: u64,
    /// Length on the wire (the file's "original length").
    pub wire_len: u32,
    /// Captured bytes.
    pub data: &'a [u8],
    /// Link type of the interface the packet was captured on.
    pub link: LinkType,
    /// Which interface of the file: its id in its section, plus the interfaces of the sections
    /// before (0 in classic pcap).
    pub iface: u32,
    /// Byte offset of the packet's record in the file.
    pub offset: u64,
    /// The packet's direction as descriptor flags (`Desc::F_INBOUND`/`F_OUTBOUND`), from a
    /// pcapng `epb_flags` option; 0 when the file does not say.
    pub dir: u16,
}

/// A classic pcap record taken whole from the reader's buffer ([`PcapReader::next_buffered`]).
#[derive(Clone, Copy, Debug)]
pub struct Buffered {
    /// Timestamp, ns since the Unix epoch.
    pub ts: u64,
    /// Length on the wire (the file's "original length").
    pub wire_len: u32,
    /// Captured bytes.
    pub len: u32,
}

/// Timestamp resolution of a pcapng interface.
#[derive(Clone, Copy, Debug)]
enum Resol {
    /// 10^-k seconds.
    Dec(u8),
    /// 2^-k seconds.
    Bin(u8),
}

#[derive(Clone, Copy, Debug)]
struct Iface {
    link: LinkType,
    snaplen: u32,
    resol: Resol,
    /// Seconds added to every timestamp.
    offset_s: i64,
}

impl Iface {
    #[inline]
    fn ns(&self, units: u64) -> u64 {
        let ns = match self.resol {
            Resol::Dec(k) if k <= 9 => units.saturating_mul(POW10[(9 - k) as usize]),
            Resol::Dec(k) => {
                let div = 10u128.pow(u32::from(k.min(38)) - 9);
                (u128::from(units) / div) as u64
            }
            Resol::Bin(k) => {
                let k = u32::from(k.min(127));
                let v = (u128::from(units) * 1_000_000_000u128) >> k;
                u64::try_from(v).unwrap_or(u64::MAX)
            }
        };
        if self.offset_s >= 0 {
            ns.saturating_add((self.offset_s as u64).saturating_mul(1_000_000_000))
        } else {
            ns.saturating_sub(self.offset_s.unsigned_abs().saturating_mul(1_000_000_000))
        }
    }
}

const POW10: [u64; 10] = [
    1,
    10,
    100,
    1_000,
    10_000,
    100_000,
    1_000_000,
    10_000_000,
    100_000_000,
    1_000_000_000,
];

enum Kind {
    Pcap {
        nanos: bool,
        hdr_len: usize,
    },
    Ng {
        /// The current section's interfaces.
        ifaces: Vec<Iface>,
        /// Every interface of the file so far, all sections one after the other: link type
        /// and `if_name`. A packet's [`Record::iface`] indexes this list.
        all: Vec<(LinkType, Option<String>, u32)>,
        /// Interfaces of the sections before the current one.
        base: u32,
    },
}

/// What the block parser found.
enum Event {
    /// A packet: its data at `start..start + len` of the buffer (already consumed).
    Packet {
        start: usize,
        len: usize,
        ts: u64,
        wire_len: u32,
        link: LinkType,
        iface: u32,
        offset: u64,
        dir: u16,
    },
    /// A block that carries no packet.
    Other,
    /// Clean end of file.
    Eof,
}

/// Reads packets from a pcap or pcapng byte stream.
pub struct PcapReader<R: Read> {
    src: R,
    buf: Box<[u8]>,
    /// The rest of the file mapped read-only (the pool names it): read in place, not into `buf`
    /// ([`PcapReader::read_mapped`]).
    map: Option<Arc<Pool>>,
    pos: usize,
    end: usize,
    /// File offset of `buf[pos]`.
    off: u64,
    eof: bool,
    done: bool,
    /// The source had nothing to give during the current attempt.
    blocked: bool,
    /// Bytes of an unknown pcapng block still to skip, its offset, type and length.
    skip_left: u64,
    skip_block: (u64, u32, u32),
    big_endian: bool,
    kind: Kind,
    format: FileFormat,
    link: Option<LinkType>,
    snaplen: u32,
    path: String,
}

/// A classic pcap record's time, ns since the epoch, from its header's seconds and fraction
/// (microseconds, or nanoseconds in a file with the nanosecond magic).
#[inline(always)]
fn pcap_ts(sec: u32, frac: u32, nanos: bool) -> u64 {
    let frac_ns = if nanos {
        u64::from(frac)
    } else {
        u64::from(frac) * 1000
    };
    u64::from(sec) * 1_000_000_000 + frac_ns
}

#[inline(always)]
fn rd16(b: &[u8], at: usize, be: bool) -> u16 {
    match b.get(at..at + 2) {
        Some(&[x, y]) => {
            if be {
                u16::from_be_bytes([x, y])
            } else {
                u16::from_le_bytes([x, y])
            }
        }
        _ => 0,
    }
}

#[inline(always)]
fn rd32(b: &[u8], at: usize, be: bool) -> u32 {
    match b.get(at..at + 4) {
        Some(&[x, y, z, w]) => {
            if be {
                u32::from_be_bytes([x, y, z, w])
            } else {
                u32::from_le_bytes([x, y, z, w])
            }
        }
        _ => 0,
    }
}

#[inline(always)]
fn rd64(b: &[u8], at: usize, be: bool) -> u64 {
    let hi = rd32(b, at, be);
    let lo = rd32(b, at + 4, be);
    if be {
        (u64::from(hi) << 32) | u64::from(lo)
    } else {
        (u64::from(lo) << 32) | u64::from(hi)
    }
}

impl<R: Read> PcapReader<R> {
    /// Reads the file header from `src` (and, for pcapng, blocks up to the first interface
    /// description). `path` names the input in errors.
    pub fn new(src: R, path: &str) -> Result<PcapReader<R>, PortError> {
        let mut r = PcapReader {
            src,
            buf: vec![0u8; INITIAL_BUF].into_boxed_slice(),
            map: None,
            pos: 0,
            end: 0,
            off: 0,
            eof: false,
            done: false,
            blocked: false,
            skip_left: 0,
            skip_block: (0, 0, 0),
            big_endian: false,
            kind: Kind::Pcap {
                nanos: false,
                hdr_len: 16,
            },
            format: FileFormat::Pcap {
                nanos: false,
                big_endian: false,
            },
            link: None,
            snaplen: 0,
            path: path.to_string(),
        };
        loop {
            r.blocked = false;
            let res = r.read_header();
            // Blocked before anything was consumed: read the header again once bytes came
            // (the source waits a while before it says it has nothing).
            if r.blocked && r.off == 0 {
                continue;
            }
            res?;
            return Ok(r);
        }
    }

    /// The file's link type (for pcapng: the first interface's; Ethernet if none is described).
    pub fn link_type(&self) -> LinkType {
        self.link.unwrap_or(LinkType::ETHERNET)
    }

    /// The snapshot length from the file header (pcapng: the first interface's; 0 = none).
    pub fn snaplen(&self) -> u32 {
        self.snaplen
    }

    /// The file's flavour.
    pub fn format(&self) -> FileFormat {
        self.format
    }

    /// The interfaces described so far (pcapng: those of every section read so far, one after
    /// the other, as [`Record::iface`] numbers them), with their link types and `if_name`s;
    /// classic pcap: one, without a name.
    pub fn interfaces(&self) -> Vec<(LinkType, Option<&str>)> {
        match &self.kind {
            Kind::Ng { all, .. } => all.iter().map(|(l, n, _)| (*l, n.as_deref())).collect(),
            Kind::Pcap { .. } => vec![(self.link_type(), None)],
        }
    }

    /// The snapshot length of each interface [`PcapReader::interfaces`] lists (0: none given).
    pub fn snaplens(&self) -> Vec<u32> {
        match &self.kind {
            Kind::Ng { all, .. } => all.iter().map(|a| a.2).collect(),
            Kind::Pcap { .. } => vec![self.snaplen],
        }
    }

    /// How many interfaces [`PcapReader::interfaces`] would list.
    pub fn interface_count(&self) -> usize {
        match &self.kind {
            Kind::Ng { all, .. } => all.len(),
            Kind::Pcap { .. } => 1,
        }
    }

    /// Byte offset of the next record.
    pub fn offset(&self) -> u64 {
        self.off
    }

    /// Whether this is a classic pcap file (whose records [`PcapReader::read_mapped`] can read
    /// in place).
    pub fn is_classic(&self) -> bool {
        matches!(self.kind, Kind::Pcap { .. })
    }

    /// Reads the rest of a classic pcap file from `map`, the whole file mapped read-only
    /// ([`Pool::external`] over [`Region::map_read_only`](crate::mem::Region::map_read_only)),
    /// from the next record's offset on, instead of from the source: the records' bytes are then
    /// slices of the mapping, which nothing rewrites. Nothing changes (false) for a pcapng file,
    /// after the end or an error, or when the mapping ends before the next record.
    pub fn read_mapped(&mut self, map: Arc<Pool>) -> bool {
        let len = map.region().read_only_bytes().len();
        let Ok(at) = usize::try_from(self.off) else {
            return false;
        };
        if !self.is_classic() || self.done || self.map.is_some() || at > len {
            return false;
        }
        self.map = Some(map);
        self.buf = Box::default();
        self.pos = at;
        self.end = len;
        self.eof = true;
        true
    }

    /// The pool naming the mapping records are read from, once [`PcapReader::read_mapped`].
    pub fn mapped(&self) -> Option<&Arc<Pool>> {
        self.map.as_ref()
    }

    /// The bytes `pos..end` index: the read buffer, or the mapped file.
    #[inline(always)]
    fn bytes(&self) -> &[u8] {
        match &self.map {
            Some(m) => m.region().read_only_bytes(),
            None => &self.buf,
        }
    }

    /// Whether the end of the file (or an error) was reached.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Classic pcap only, the common case of a file read in bulk: takes the next record when
    /// its header and its data are already in the buffer and it holds at most `max` captured
    /// bytes. No read and no error can happen here. None, with nothing consumed, in every other
    /// case (pcapng, the buffer's end, a record longer than `max` or with an absurd length, the
    /// end of input): [`PcapReader::next_packet`] then reads, reports or ends as it always does.
    ///
    /// Returns the record and its captured bytes (valid until the next call).
    #[inline(always)]
    pub fn next_buffered(&mut self, max: usize) -> Option<(Buffered, &[u8])> {
        let Kind::Pcap { nanos, hdr_len: hl } = self.kind else {
            return None;
        };
        if self.done {
            return None;
        }
        let h = self.bytes().get(self.pos..self.end)?;
        let hdr = h.get(..16)?;
        let be = self.big_endian;
        let caplen = rd32(hdr, 8, be) as usize;
        if caplen > max.min(MAX_CAPLEN as usize) || h.len() < hl + caplen {
            return None;
        }
        let ts = pcap_ts(rd32(hdr, 0, be), rd32(hdr, 4, be), nanos);
        let wire_len = rd32(hdr, 12, be);
        let start = self.pos + hl;
        self.pos += hl + caplen;
        self.off += (hl + caplen) as u64;
        let data = self.bytes().get(start..start + caplen).unwrap_or(&[]);
        Some((
            Buffered {
                ts,
                wire_len,
                len: caplen as u32,
            },
            data,
        ))
    }

    /// The next packet; `Ok(None)` at the end of the file (then [`PcapReader::is_done`]), or
    /// when the source has nothing to give now (then not done: call again later). After an
    /// error, the next calls return `Ok(None)`.
    #[inline]
    pub fn next_packet(&mut self) -> Result<Option<Record<'_>>, PortError> {
        loop {
            if self.done {
                return Ok(None);
            }
            self.blocked = false;
            let ev = if self.skip_left > 0 {
                self.go_on_skipping()
            } else {
                match self.kind {
                    Kind::Pcap { nanos, hdr_len } => self.next_pcap(nanos, hdr_len),
                    Kind::Ng { .. } => self.next_block(),
                }
            };
            if self.blocked {
                // What the attempt found is not an end or a truncation: the record is not all
                // there yet, and nothing of it was consumed (a skip keeps its place).
                return Ok(None);
            }
            match ev {
                Ok(Event::Packet {
                    start,
                    len,
                    ts,
                    wire_len,
                    link,
                    iface,
                    offset,
                    dir,
                }) => {
                    let data = self.bytes().get(start..start + len).unwrap_or(&[]);
                    return Ok(Some(Record {
                        ts,
                        wire_len,
                        data,
                        link,
                        iface,
                        offset,
                        dir,
                    }));
                }
                Ok(Event::Other) => continue,
                Ok(Event::Eof) => {
                    self.done = true;
                    return Ok(None);
                }
                Err(e) => {
                    self.done = true;
                    return Err(e);
                }
            }
        }
    }

    #[cold]
    fn bad(&self, offset: u64, why: String) -> PortError {
        PortError::Format {
            path: self.path.clone(),
            offset,
            why,
        }
    }

    #[cold]
    fn io(&self, e: std::io::Error) -> PortError {
        PortError::Io {
            path: self.path.clone(),
            source: e,
        }
    }

    #[inline(always)]
    fn avail(&self) -> usize {
        self.end - self.pos
    }

    /// Makes `need` bytes available at `pos` unless the input ends first; returns whether they
    /// are (never when `need` exceeds [`BUF_SIZE`]).
    #[inline]
    fn fill(&mut self, need: usize) -> Result<bool, PortError> {
        if self.end - self.pos >= need {
            return Ok(true);
        }
        self.refill(need)
    }

    #[inline(never)]
    fn refill(&mut self, need: usize) -> Result<bool, PortError> {
        if self.map.is_some() {
            // The whole rest of the file is there: nothing more to read.
            return Ok(self.end - self.pos >= need);
        }
        if need > BUF_SIZE {
            return Ok(false);
        }
        if self.buf.len() < BUF_SIZE && (need > self.buf.len() || self.end == self.buf.len()) {
            // Grow once, to a fixed size (never to a size read from the file).
            let mut big = vec![0u8; BUF_SIZE].into_boxed_slice();
            let n = self.end - self.pos;
            if let (Some(dst), Some(src)) = (big.get_mut(..n), self.buf.get(self.pos..self.end)) {
                dst.copy_from_slice(src);
            }
            self.buf = big;
            self.pos = 0;
            self.end = n;
        }
        if self.buf.len() - self.pos < need {
            self.buf.copy_within(self.pos..self.end, 0);
            self.end -= self.pos;
            self.pos = 0;
        }
        while self.end - self.pos < need && !self.eof {
            let Some(room) = self.buf.get_mut(self.end..) else {
                break;
            };
            let cap = room.len();
            match self.src.read(room) {
                Ok(0) => self.eof = true,
                Ok(n) => self.end += n.min(cap),
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    self.blocked = true;
                    return Ok(false);
                }
                Err(e) => return Err(self.io(e)),
            }
        }
        Ok(self.end - self.pos >= need)
    }

    #[inline(always)]
    fn advance(&mut self, n: usize) {
        let n = n.min(self.avail());
        self.pos += n;
        self.off += n as u64;
    }

    /// Skips the rest of the unknown block being skipped (`skip_left` bytes), beyond the buffer
    /// if need be; keeps its place when the source has nothing to give now.
    fn go_on_skipping(&mut self) -> Result<Event, PortError> {
        loop {
            let k = (self.avail() as u64).min(self.skip_left);
            self.advance(k as usize);
            self.skip_left -= k;
            if self.skip_left == 0 {
                return Ok(Event::Other);
            }
            self.pos = 0;
            self.end = 0;
            if !self.fill(1)? {
                if self.blocked {
                    return Ok(Event::Other);
                }
                let (offset, btype, blen) = self.skip_block;
                let skipped = u64::from(blen) - self.skip_left;
                self.skip_left = 0;
                return Err(self.bad(
                    offset,
                    format!(
                        "truncated block of type 0x{btype:x} (length {blen}, {skipped} bytes \
                         left in the file)"
                    ),
                ));
            }
        }
    }

    #[inline(always)]
    fn head(&self) -> &[u8] {
        self.bytes().get(self.pos..self.end).unwrap_or(&[])
    }

    fn read_header(&mut self) -> Result<(), PortError> {
        self.fill(24)?;
        let h = self.head();
        if h.len() < 4 {
            return Err(self.bad(
                0,
                format!(
                    "file too short for a capture file header ({} bytes)",
                    h.len()
                ),
            ));
        }
        let magic = rd32(h, 0, false);
        let (nanos, hdr_len, be) = match magic {
            NG_SHB => return self.read_ng_header(),
            PCAP_US => (false, 16, false),
            PCAP_NS => (true, 16, false),
            PCAP_MODIFIED => (false, 24, false),
            m if m == PCAP_US.swap_bytes() => (false, 16, true),
            m if m == PCAP_NS.swap_bytes() => (true, 16, true),
            m if m == PCAP_MODIFIED.swap_bytes() => (false, 24, true),
            m => return Err(self.bad(0, format!("bad magic 0x{m:08x}: not a pcap or pcapng file"))),
        };
        if h.len() < 24 {
            return Err(self.bad(
                0,
                format!("file too short for a pcap header ({} of 24 bytes)", h.len()),
            ));
        }
        let (major, minor) = (rd16(h, 4, be), rd16(h, 6, be));
        if !((major == 2 && minor <= 4) || (major == 543 && minor == 0)) {
            return Err(self.bad(4, format!("unsupported pcap version {major}.{minor}")));
        }
        let (snaplen, link) = (rd32(h, 16, be), rd32(h, 20, be) & 0xffff);
        self.snaplen = snaplen;
        self.link = Some(LinkType(link));
        self.big_endian = be;
        self.kind = Kind::Pcap { nanos, hdr_len };
        self.format = FileFormat::Pcap {
            nanos,
            big_endian: be,
        };
        self.advance(24);
        Ok(())
    }

    #[inline]
    fn next_pcap(&mut self, nanos: bool, hl: usize) -> Result<Event, PortError> {
        let offset = self.off;
        if !self.fill(hl)? {
            let have = self.avail();
            if have == 0 {
                return Ok(Event::Eof);
            }
            return Err(self.bad(
                offset,
                format!("truncated record header ({have} of {hl} bytes)"),
            ));
        }
        let be = self.big_endian;
        let h = self.head();
        let sec = rd32(h, 0, be);
        let frac = rd32(h, 4, be);
        let caplen = rd32(h, 8, be);
        let wire_len = rd32(h, 12, be);
        if caplen > MAX_CAPLEN {
            return Err(self.bad(
                offset,
                format!("record captured length {caplen} is absurd (more than {MAX_CAPLEN})"),
            ));
        }
        let total = hl + caplen as usize;
        if !self.fill(total)? {
            let have = self.avail() - hl;
            return Err(self.bad(
                offset,
                format!("truncated record ({have} of {caplen} captured bytes)"),
            ));
        }
        let start = self.pos + hl;
        self.advance(total);
        Ok(Event::Packet {
            start,
            len: caplen as usize,
            ts: pcap_ts(sec, frac, nanos),
            wire_len,
            link: self.link_type(),
            iface: 0,
            offset,
            dir: 0,
        })
    }

    fn read_ng_header(&mut self) -> Result<(), PortError> {
        self.kind = Kind::Ng {
            ifaces: Vec::new(),
            all: Vec::new(),
            base: 0,
        };
        match self.read_shb()? {
            Event::Eof => {
                return Err(self.bad(0, "empty pcapng file".to_string()));
            }
            _ => {
                self.format = FileFormat::PcapNg {
                    big_endian: self.big_endian,
                };
            }
        }
        // Read every block before the first packet, so that the link type and the interfaces
        // described up front are known before the first packet. A packet block before any
        // interface is an error, so no packet is consumed here. Once the link type is known, a
        // source with nothing to give now ends this (a live pipe: the packets come later, and
        // interfaces described later are numbered as they come).
        loop {
            self.blocked = false;
            if self.link.is_some() && self.skip_left == 0 {
                // Stop at the first packet block (or at the end: next_packet reports it).
                if !self.fill(8)? {
                    break;
                }
                let btype = rd32(self.head(), 0, self.big_endian);
                if matches!(btype, NG_EPB | NG_SPB | NG_PB) {
                    break;
                }
            }
            let ev = if self.skip_left > 0 {
                self.go_on_skipping()
            } else {
                self.next_block()
            };
            if self.blocked {
                if self.link.is_some() {
                    break;
                }
                // Nothing of the block was consumed (a skip keeps its place): try again.
                continue;
            }
            match ev? {
                Event::Eof => {
                    self.done = true;
                    break;
                }
                Event::Other => {}
                Event::Packet { offset, .. } => {
                    return Err(self.bad(offset, "packet before any interface".to_string()));
                }
            }
        }
        Ok(())
    }

    /// Reads a section header block at `pos` (its type already seen).
    fn read_shb(&mut self) -> Result<Event, PortError> {
        let offset = self.off;
        if !self.fill(12)? {
            return Err(self.bad(
                offset,
                format!(
                    "truncated section header block ({} of 12 bytes)",
                    self.avail()
                ),
            ));
        }
        let h = self.head();
        let be = match rd32(h, 8, false) {
            NG_BOM => false,
            m if m == NG_BOM.swap_bytes() => true,
            m => return Err(self.bad(offset + 8, format!("bad pcapng byte-order magic 0x{m:08x}"))),
        };
        let blen = rd32(h, 4, be);
        self.big_endian = be;
        if blen < 28 || !blen.is_multiple_of(4) || blen > MAX_BLOCK {
            return Err(self.bad(offset, format!("bad section header block length {blen}")));
        }
        let body = self.block(offset, blen)?;
        let major = rd16(body, 4, be);
        if major != 1 {
            let minor = rd16(body, 6, be);
            return Err(self.bad(
                offset,
                format!("unsupported pcapng version {major}.{minor}"),
            ));
        }
        self.advance(blen as usize);
        if let Kind::Ng { ifaces, all, base } = &mut self.kind {
            ifaces.clear();
            *base = all.len() as u32;
        }
        Ok(Event::Other)
    }

    /// The body of the block of `blen` bytes at `pos` (between the length fields), after
    /// checking that it is all there and that its trailing length matches.
    /// The buffer may move: positions must be taken after this call.
    fn block(&mut self, offset: u64, blen: u32) -> Result<&[u8], PortError> {
        let n = blen as usize;
        if !self.fill(n)? {
            return Err(self.bad(
                offset,
                format!(
                    "truncated block (length {blen}, {} bytes left in the file)",
                    self.avail()
                ),
            ));
        }
        let be = self.big_endian;
        let trail = rd32(self.head(), n - 4, be);
        if trail != blen {
            return Err(self.bad(
                offset,
                format!("block trailing length {trail} differs from its length {blen}"),
            ));
        }
        Ok(self.head().get(8..n - 4).unwrap_or(&[]))
    }

    fn next_block(&mut self) -> Result<Event, PortError> {
        let offset = self.off;
        if !self.fill(8)? {
            let have = self.avail();
            if have == 0 {
                return Ok(Event::Eof);
            }
            return Err(self.bad(
                offset,
                format!("truncated block header ({have} of 8 bytes)"),
            ));
        }
        let be = self.big_endian;
        let btype = rd32(self.head(), 0, be);
        if btype == NG_SHB {
            return self.read_shb();
        }
        let blen = rd32(self.head(), 4, be);
        if blen < 12 || !blen.is_multiple_of(4) {
            return Err(self.bad(
                offset,
                format!("bad block length {blen} (less than 12 or not a multiple of 4)"),
            ));
        }
        match btype {
            NG_IDB | NG_EPB | NG_SPB | NG_PB => {}
            _ => {
                self.skip_left = u64::from(blen);
                self.skip_block = (offset, btype, blen);
                return self.go_on_skipping();
            }
        }
        if blen > MAX_BLOCK {
            return Err(self.bad(
                offset,
                format!("block length {blen} is absurd (more than {MAX_BLOCK})"),
            ));
        }
        self.block(offset, blen)?;
        // Taken after `block`, which may have moved the buffer.
        let body_start = self.pos + 8;
        let body = self
            .bytes()
            .get(body_start..self.pos + blen as usize - 4)
            .unwrap_or(&[]);
        let body_len = body.len();
        let ev = match btype {
            NG_IDB => {
                let (iface, name) = parse_idb(body, be).ok_or_else(|| {
                    self.bad(offset, "interface description block too short".to_string())
                })?;
                let Kind::Ng { ifaces, all, .. } = &mut self.kind else {
                    return Ok(Event::Other);
                };
                if all.len() >= MAX_IFACES {
                    return Err(self.bad(offset, format!("more than {MAX_IFACES} interfaces")));
                }
                ifaces.push(iface);
                all.push((iface.link, name, iface.snaplen));
                if self.link.is_none() {
                    self.link = Some(iface.link);
                    self.snaplen = iface.snaplen;
                }
                Event::Other
            }
            NG_EPB | NG_PB => {
                if body_len < 20 {
                    return Err(self.bad(offset, "packet block too short".to_string()));
                }
                let id = if btype == NG_EPB {
                    rd32(body, 0, be)
                } else {
                    u32::from(rd16(body, 0, be))
                };
                let ts = (u64::from(rd32(body, 4, be)) << 32) | u64::from(rd32(body, 8, be));
                let caplen = rd32(body, 12, be);
                let wire_len = rd32(body, 16, be);
                if caplen > MAX_CAPLEN || caplen as usize > body_len - 20 {
                    return Err(self.bad(
                        offset,
                        format!(
                            "packet captured length {caplen} is absurd (block body holds {})",
                            body_len - 20
                        ),
                    ));
                }
                let iface = self.iface(id, offset)?;
                // epb_flags (option 2): bits 0-1 are the direction (1 inbound, 2 outbound).
                let dir = if btype == NG_EPB {
                    let opts = body.get(20 + (caplen as usize).next_multiple_of(4)..);
                    match opts.and_then(|o| epb_flags(o, be)).map(|f| f & 3) {
                        Some(1) => crate::mem::Desc::F_INBOUND,
                        Some(2) => crate::mem::Desc::F_OUTBOUND,
                        _ => 0,
                    }
                } else {
                    0
                };
                Event::Packet {
                    start: body_start + 20,
                    len: caplen as usize,
                    ts: iface.ns(ts),
                    wire_len,
                    link: iface.link,
                    iface: self.section_base() + id,
                    offset,
                    dir,
                }
            }
            _ => {
                // NG_SPB
                if body_len < 4 {
                    return Err(self.bad(offset, "simple packet block too short".to_string()));
                }
                let wire_len = rd32(body, 0, be);
                let iface = self.iface(0, offset)?;
                let mut len = (body_len - 4).min(wire_len as usize);
                if iface.snaplen != 0 {
                    len = len.min(iface.snaplen as usize);
                }
                Event::Packet {
                    start: body_start + 4,
                    len,
                    ts: 0,
                    wire_len,
                    link: iface.link,
                    iface: self.section_base(),
                    offset,
                    dir: 0,
                }
            }
        };
        self.advance(blen as usize);
        Ok(ev)
    }

    /// Interfaces of the sections before the current one.
    #[inline(always)]
    fn section_base(&self) -> u32 {
        match &self.kind {
            Kind::Ng { base, .. } => *base,
            Kind::Pcap { .. } => 0,
        }
    }

    fn iface(&self, id: u32, offset: u64) -> Result<Iface, PortError> {
        let Kind::Ng { ifaces, .. } = &self.kind else {
            return Err(self.bad(offset, "packet block in a pcap file".to_string()));
        };
        match ifaces.get(id as usize) {
            Some(i) => Ok(*i),
            None => Err(self.bad(
                offset,
                format!(
                    "packet on interface {id}, but {} interfaces are described",
                    ifaces.len()
                ),
            )),
        }
    }
}

/// The value of the `epb_flags` option in an EPB's options `o` (lenient: a malformed list
/// ends the search).
fn epb_flags(o: &[u8], be: bool) -> Option<u32> {
    let mut i = 0;
    while i + 4 <= o.len() {
        let code = rd16(o, i, be);
        let len = rd16(o, i + 2, be) as usize;
        if code == 0 {
            return None;
        }
        if code == 2 && len == 4 && i + 8 <= o.len() {
            return Some(rd32(o, i + 4, be));
        }
        i += 4 + len.next_multiple_of(4);
    }
    None
}

/// Longest `if_name` kept (longer ones are cut).
const MAX_NAME: usize = 256;

/// Parses an interface description block body, and its `if_name` (UTF-8, at most
/// [`MAX_NAME`] bytes, up to a NUL); lenient with options (a malformed option list ends the
/// options).
fn parse_idb(body: &[u8], be: bool) -> Option<(Iface, Option<String>)> {
    if body.len() < 8 {
        return None;
    }
    let mut iface = Iface {
        link: LinkType(u32::from(rd16(body, 0, be))),
        snaplen: rd32(body, 4, be),
        resol: Resol::Dec(6),
        offset_s: 0,
    };
    let mut name = None;
    let mut at = 8usize;
    while at + 4 <= body.len() {
        let code = rd16(body, at, be);
        let len = rd16(body, at + 2, be) as usize;
        let val = at + 4;
        if code == 0 || val + len > body.len() {
            break;
        }
        match (code, len) {
            (9, 1) => {
                let v = body.get(val).copied().unwrap_or(6);
                iface.resol = if v & 0x80 != 0 {
                    Resol::Bin(v & 0x7f)
                } else {
                    Resol::Dec(v)
                };
            }
            (14, 8) => iface.offset_s = rd64(body, val, be) as i64,
            (2, _) => {
                let raw = body.get(val..val + len).unwrap_or(&[]);
                let raw = raw.split(|&b| b == 0).next().unwrap_or(&[]);
                let raw = raw.get(..MAX_NAME).unwrap_or(raw);
                let s = String::from_utf8_lossy(raw).into_owned();
                if !s.is_empty() {
                    name = Some(s);
                }
            }
            _ => {}
        }
        at = val + len.div_ceil(4) * 4;
    }
    Some((iface, name))
}

//! A classic pcap file split between threads with no lock and no thread that reads it for them.
//!
//! The file is cut into groups by byte ranges: group `g` holds the records whose header starts
//! in `[g * SPLIT_BYTES, (g + 1) * SPLIT_BYTES)` (the file header aside). Reader `t` of `n` takes
//! groups `t, t + n, t + 2n, ...`: it reads its group's bytes while the others parse theirs
//! (in place, from the file mapped read-only, when nobody else can shorten the file: see
//! [`super::map_if_unshortenable`]; else with its own `pread` into its own buffer), then waits
//! for the group's first record to be known (where the previous group's last record ends,
//! handed on by that group's reader through three atomics, one hand-over per group), walks its
//! record headers and hands the end on at once.
//! Group numbers let the caller put the groups back in file order. A reader whose group's start
//! is not known yet gets [`Chunk::NotYet`] and can do other work meanwhile.
//!
//! A truncated or corrupt record ends the file: the group holding it is the last one (its
//! records before the damage are given), the error is kept ([`PcapSplit::take_error`]) with the
//! same text and offset as a `pcap:` port's, and every reader then gets [`Chunk::End`].
//!
//! pcapng files (whose interface blocks change how later blocks read) are not split: the
//! caller reads them whole ([`PcapSplit::open`] says so with `Ok(None)`).

use super::reader::{PcapReader, MAX_CAPLEN};
use crate::mem::{DEFAULT_FRAME_SIZE, DEFAULT_HEADROOM};
use crate::port::{LinkType, PortError, PortOptions, PortStats};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Bytes of the file per group by default (its records are those whose header starts in them).
pub const SPLIT_BYTES: usize = 128 << 10;
/// Bytes read past a group's range in its first read (the last record goes on past the range);
/// a longer last record is read in a second `pread`.
const SPILL: usize = 8 << 10;
/// Bytes of a record header in a classic pcap file.
const HDR: usize = 16;
/// The start of the file's next group, when the file ended before it.
const ENDED: u64 = u64::MAX;

/// A classic pcap file shared by its readers.
pub struct PcapSplit {
    path: String,
    file: File,
    nanos: bool,
    be: bool,
    link: LinkType,
    limit: usize,
    /// Bytes of the file per group.
    piece: u64,
    /// The group whose start is known (its reader may walk it); groups before it are walked.
    next: AtomicU64,
    /// Where that group's first record starts ([`ENDED`]: the file ended before it).
    next_off: AtomicU64,
    /// The number, in the file, of that group's first record.
    next_first: AtomicU64,
    /// Groups in the file once its end was found (u64::MAX before).
    total: AtomicU64,
    error: Mutex<Option<PortError>>,
    /// The whole file mapped read-only (its length when opened), when that is safe: groups are
    /// then read in place, with no copy.
    map: Option<crate::mem::Region>,
}

/// What [`SplitReader::next_group`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Chunk {
    /// The previous group's end is not known yet: ask again.
    NotYet,
    /// Group `g` of the file is ready ([`SplitReader::records`]; it may hold no record).
    Group(u64),
    /// No group for this reader any more.
    End,
}

/// One packet of a group.
#[derive(Clone, Copy, Debug)]
pub struct SplitRecord<'a> {
    /// Timestamp, ns since the Unix epoch.
    pub ts: u64,
    /// Length on the wire (at least the bytes given).
    pub wire_len: u32,
    /// Captured bytes, cut to the same length a `pcap:` port delivers.
    pub data: &'a [u8],
}

fn rd32(b: &[u8], at: usize, be: bool) -> u32 {
    let w = [b[at], b[at + 1], b[at + 2], b[at + 3]];
    if be {
        u32::from_be_bytes(w)
    } else {
        u32::from_le_bytes(w)
    }
}

impl PcapSplit {
    /// Opens `path` (read-only) for splitting in pieces of [`SPLIT_BYTES`]; `Ok(None)` when it is
    /// not a classic pcap file (pcapng, or pcap with the 24-byte records of the "modified"
    /// format).
    pub fn open(path: &str, opts: &PortOptions) -> Result<Option<Arc<PcapSplit>>, PortError> {
        Self::open_pieces(path, opts, SPLIT_BYTES)
    }

    /// [`PcapSplit::open`] with pieces of `piece` bytes (at least 1; tests use small ones so
    /// that records straddle pieces and pieces hold no record).
    pub fn open_pieces(
        path: &str,
        opts: &PortOptions,
        piece: usize,
    ) -> Result<Option<Arc<PcapSplit>>, PortError> {
        Self::open_with(path, opts, piece, true)
    }

    /// [`PcapSplit::open_pieces`]; with `map` false the readers copy the file with `pread`
    /// even where it could be mapped (tests compare the two ways).
    pub fn open_with(
        path: &str,
        opts: &PortOptions,
        piece: usize,
        map: bool,
    ) -> Result<Option<Arc<PcapSplit>>, PortError> {
        let io = |source| PortError::Io {
            path: path.into(),
            source,
        };
        // The reader checks the header the way every pcap: port does (same errors).
        let r = PcapReader::new(File::open(path).map_err(io)?, path)?;
        let link = r.link_type();
        drop(r);
        let file = File::open(path).map_err(io)?;
        let mut h = [0u8; 4];
        file.read_exact_at(&mut h, 0).map_err(io)?;
        let (nanos, be) = match u32::from_le_bytes(h) {
            0xa1b2_c3d4 => (false, false),
            0xa1b2_3c4d => (true, false),
            0xd4c3_b2a1 => (false, true),
            0x4d3c_b2a1 => (true, true),
            _ => return Ok(None),
        };
        let limit =
            ((DEFAULT_FRAME_SIZE - DEFAULT_HEADROOM) as usize).min(opts.snaplen.max(1) as usize);
        // A mapping shorter than the file header (the file cut after the header was read
        // above) is not used: every group's reading starts at or after byte 24, and `bytes`
        // would slice from past its end; `pread` then finds the cut as it would.
        let map = map
            .then(|| super::map_if_unshortenable(&file))
            .flatten()
            .filter(|m| m.read_only_bytes().len() >= 24);
        Ok(Some(Arc::new(PcapSplit {
            path: path.into(),
            file,
            nanos,
            be,
            link,
            limit,
            piece: piece.max(1) as u64,
            next: AtomicU64::new(0),
            next_off: AtomicU64::new(24),
            next_first: AtomicU64::new(0),
            total: AtomicU64::new(u64::MAX),
            error: Mutex::new(None),
            map,
        })))
    }

    /// Link type of the file's packets.
    pub fn link_type(&self) -> LinkType {
        self.link
    }

    /// Reader `t` of `n` (each thread has its own; together they take every group once).
    pub fn reader(self: &Arc<Self>, t: usize, n: usize) -> SplitReader {
        let n = n.max(1) as u64;
        SplitReader {
            split: self.clone(),
            group: (t as u64).min(n - 1),
            step: n,
            // A mapped file is read in place: no buffer.
            buf: if self.map.is_some() {
                Vec::new()
            } else {
                Vec::with_capacity(SPLIT_BYTES + SPILL)
            },
            base: 0,
            have: 0,
            eof: false,
            read: false,
            recs: Vec::with_capacity(SPLIT_BYTES / 64),
            first: 0,
            last: false,
            stats: PortStats::default(),
            ended: false,
        }
    }

    /// The error that ended the file early (a corrupt or truncated record), once.
    pub fn take_error(&self) -> Option<PortError> {
        self.error.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    /// Whether the readers read the file in place (mapped) rather than copy it.
    pub fn is_mapped(&self) -> bool {
        self.map.is_some()
    }

    fn bad(&self, offset: u64, why: String) -> PortError {
        PortError::Format {
            path: self.path.clone(),
            offset,
            why,
        }
    }
}

/// One reader of a [`PcapSplit`].
pub struct SplitReader {
    split: Arc<PcapSplit>,
    /// The next group this reader takes.
    group: u64,
    /// Readers in all (the distance between two groups of one reader).
    step: u64,
    buf: Vec<u8>,
    /// File offset of `buf[0]`.
    base: u64,
    /// Bytes of `buf` read.
    have: usize,
    /// The file ended within what was read.
    eof: bool,
    /// The next group's bytes were read ahead (before its start was known).
    read: bool,
    /// (start in `buf`, captured length, ts, wire length) of the group's records.
    recs: Vec<(usize, usize, u64, u32)>,
    /// Number (in the file) of the group's first record.
    first: u64,
    /// The file ends with this group.
    last: bool,
    stats: PortStats,
    ended: bool,
}

/// How a group's walk ended.
enum Walk {
    /// The file goes on; the next group starts at this offset.
    More(u64),
    /// The file ends in this group, cleanly (None) or at a bad record.
    End(Option<PortError>),
}

impl SplitReader {
    /// Counters of this reader's groups.
    pub fn stats(&self) -> PortStats {
        self.stats
    }

    /// Number, in the file, of the first record of the group given last.
    pub fn first_record(&self) -> u64 {
        self.first
    }

    /// Whether the file ends with the group given last.
    pub fn is_last(&self) -> bool {
        self.last
    }

    /// Groups in the file, once its end was found.
    pub fn groups(&self) -> Option<u64> {
        Some(self.split.total.load(Ordering::Acquire)).filter(|&g| g != u64::MAX)
    }

    /// The error that ended the file early, once (for all readers).
    pub fn take_error(&self) -> Option<PortError> {
        self.split.take_error()
    }

    /// The bytes read of the group, from file offset `base`.
    #[inline(always)]
    fn bytes(&self) -> &[u8] {
        match &self.split.map {
            Some(m) => {
                let b = self.base as usize;
                &m.read_only_bytes()[b..b + self.have]
            }
            None => &self.buf[..self.have],
        }
    }

    /// Reads at least `len` more bytes (fewer at the end of the file) after what `buf` holds
    /// (of a mapped file: takes them in view).
    fn more(&mut self, len: usize) -> Result<(), PortError> {
        let from = self.have;
        if let Some(m) = &self.split.map {
            let end = m.read_only_bytes().len() as u64;
            let got = end.saturating_sub(self.base + from as u64).min(len as u64) as usize;
            self.eof = got < len;
            self.have = from + got;
            return Ok(());
        }
        // Grown (zeroed) once; later reads overwrite it without clearing it first: only the
        // bytes read (`have`) are ever looked at.
        if self.buf.len() < from + len {
            self.buf.resize(from + len, 0);
        }
        let off = self.base + from as u64;
        let mut got = 0;
        while got < len {
            match self
                .split
                .file
                .read_at(&mut self.buf[from + got..from + len], off + got as u64)
            {
                Ok(0) => {
                    self.eof = true;
                    break;
                }
                Ok(k) => got += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(source) => {
                    self.have = from + got;
                    return Err(PortError::Io {
                        path: self.split.path.clone(),
                        source,
                    });
                }
            }
        }
        self.have = from + got;
        Ok(())
    }

    /// Starts `buf` at `off` and reads `len` bytes from there.
    fn read_from(&mut self, off: u64, len: usize) -> Result<(), PortError> {
        self.base = off;
        self.have = 0;
        self.eof = false;
        self.more(len)
    }

    /// Makes the bytes `[at, at + need)` of the file be in `buf` if the file has them (`at` is
    /// at or after `base`); returns how many of them it has.
    #[inline]
    fn ensure(&mut self, at: u64, need: usize) -> Result<usize, PortError> {
        let end = self.base + self.have as u64;
        if at + need as u64 <= end {
            return Ok(need);
        }
        if !self.eof {
            let short = (at + need as u64 - end) as usize;
            self.more(short.max(SPILL))?;
        }
        Ok(((self.base + self.have as u64).saturating_sub(at) as usize).min(need))
    }

    /// Takes this reader's next group: reads its bytes (if not read yet), and walks its records
    /// once its start is known ([`Chunk::NotYet`] before that); [`Chunk::End`] once the file
    /// ended before it.
    pub fn next_group(&mut self) -> Chunk {
        if self.ended {
            return Chunk::End;
        }
        let s = self.split.clone();
        let g = self.group;
        let lo = g * s.piece;
        let first_read = (s.piece as usize).min(SPLIT_BYTES) + SPILL;
        if !self.read {
            // Read ahead, while the group before is still being walked elsewhere. A failed
            // read is read again (and its error reported) when the group's turn comes, so that
            // the records in front of it are counted first.
            self.read = true;
            if self.read_from(lo, first_read).is_err() {
                self.have = 0;
                self.eof = false;
            }
        }
        if s.next.load(Ordering::Acquire) != g {
            if s.total.load(Ordering::Acquire) <= g {
                // The file ended in a group before this one.
                self.ended = true;
                return Chunk::End;
            }
            return Chunk::NotYet;
        }
        self.read = false;
        let off = s.next_off.load(Ordering::Relaxed);
        let first = s.next_first.load(Ordering::Relaxed);
        if off == ENDED {
            self.ended = true;
            return Chunk::End;
        }
        self.recs.clear();
        self.first = first;
        self.last = false;
        let walk = self.walk(off, lo + s.piece, first_read);
        let n = self.recs.len() as u64;
        match walk {
            Walk::More(next) => {
                s.next_off.store(next, Ordering::Relaxed);
                s.next_first.store(first + n, Ordering::Relaxed);
            }
            Walk::End(e) => {
                if let Some(e) = e {
                    *s.error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                }
                s.total.store(g + 1, Ordering::Release);
                s.next_off.store(ENDED, Ordering::Relaxed);
                self.last = true;
                self.ended = true;
            }
        }
        // Hands the next group on (after its start, or the end, was stored).
        s.next.store(g + 1, Ordering::Release);
        self.group += self.step;
        self.stats.rx_packets += n;
        let limit = s.limit;
        self.stats.rx_bytes += self
            .recs
            .iter()
            .map(|r| r.3.max(r.1.min(limit) as u32) as u64)
            .sum::<u64>();
        Chunk::Group(g)
    }

    /// Walks the records that start at `off` and before `hi`.
    fn walk(&mut self, off: u64, hi: u64, first_read: usize) -> Walk {
        let s = self.split.clone();
        if off < self.base || off > self.base + self.have as u64 {
            // The record before went on past what was read ahead: read from the group's start.
            if let Err(e) = self.read_from(off, first_read) {
                return Walk::End(Some(e));
            }
        }
        let mut at = off;
        while at < hi {
            let got = match self.ensure(at, HDR) {
                Ok(n) => n,
                Err(e) => return Walk::End(Some(e)),
            };
            if got < HDR {
                if got == 0 {
                    return Walk::End(None);
                }
                let why = format!("truncated record header ({got} of {HDR} bytes)");
                return Walk::End(Some(s.bad(at, why)));
            }
            let pos = (at - self.base) as usize;
            let h = &self.bytes()[pos..pos + HDR];
            let (sec, frac) = (rd32(h, 0, s.be), rd32(h, 4, s.be));
            let (caplen, wire) = (rd32(h, 8, s.be), rd32(h, 12, s.be));
            if caplen > MAX_CAPLEN {
                let why =
                    format!("record captured length {caplen} is absurd (more than {MAX_CAPLEN})");
                return Walk::End(Some(s.bad(at, why)));
            }
            let total = HDR + caplen as usize;
            let got = match self.ensure(at, total) {
                Ok(n) => n,
                Err(e) => return Walk::End(Some(e)),
            };
            if got < total {
                let why = format!(
                    "truncated record ({} of {caplen} captured bytes)",
                    got - HDR
                );
                return Walk::End(Some(s.bad(at, why)));
            }
            let frac_ns = if s.nanos {
                u64::from(frac)
            } else {
                u64::from(frac) * 1000
            };
            let ts = u64::from(sec) * 1_000_000_000 + frac_ns;
            self.recs.push((pos + HDR, caplen as usize, ts, wire));
            at += total as u64;
        }
        if self.eof && at == self.base + self.have as u64 {
            // The group ends where the file ends: nothing after it.
            return Walk::End(None);
        }
        Walk::More(at)
    }

    /// The records of the group [`SplitReader::next_group`] gave last.
    pub fn records(&self) -> impl ExactSizeIterator<Item = SplitRecord<'_>> + '_ {
        let limit = self.split.limit;
        let bytes = self.bytes();
        self.recs.iter().map(move |&(start, len, ts, wire)| {
            let n = len.min(limit);
            SplitRecord {
                ts,
                wire_len: wire.max(n as u32),
                data: &bytes[start..start + n],
            }
        })
    }
}

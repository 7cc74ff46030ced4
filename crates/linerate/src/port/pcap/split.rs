//! A classic pcap file split between threads without a thread that reads it for them.
//!
//! The file is cut, in order, into groups of at most [`SPLIT_GROUP`] records (and at most
//! [`SPLIT_READ`] bytes, unless one record is larger). A reader that wants work claims the next
//! group: under a lock it reads the group's bytes with `pread` at the offset where the previous
//! group ended and walks its record headers to find where it ends (the only step taken one
//! reader at a time: one `pread` and at most 256 headers); it then parses the group in its own
//! buffer while the others claim the next ones. The bytes of a group are copied out of the page
//! cache once, by its reader only. Group numbers let the caller put the groups back in file
//! order. A reader that finds the lock taken gets [`Chunk::NotYet`] and can do other work.
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

/// Records per group at most.
pub const SPLIT_GROUP: usize = 1024;
/// Bytes read per group (more only for a record larger than this).
pub const SPLIT_READ: usize = 160 << 10;
/// Bytes of a record header in a classic pcap file.
const HDR: usize = 16;

/// A classic pcap file shared by its readers.
pub struct PcapSplit {
    path: String,
    file: File,
    nanos: bool,
    be: bool,
    link: LinkType,
    limit: usize,
    /// The next group to claim, where it starts and the number of its first record; `None`
    /// once the file's end was found.
    cursor: Mutex<Option<(u64, u64, u64)>>,
    /// The group the next claim gets (the cursor's, readable without the lock).
    claim: AtomicU64,
    /// Groups in the file once its end was found (u64::MAX before).
    total: AtomicU64,
    error: Mutex<Option<PortError>>,
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
    /// Opens `path` (read-only) for splitting; `Ok(None)` when it is not a classic pcap file
    /// (pcapng, or pcap with the 24-byte records of the "modified" format).
    pub fn open(path: &str, opts: &PortOptions) -> Result<Option<Arc<PcapSplit>>, PortError> {
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
        Ok(Some(Arc::new(PcapSplit {
            path: path.into(),
            file,
            nanos,
            be,
            link,
            limit,
            cursor: Mutex::new(Some((0, 24, 0))),
            claim: AtomicU64::new(0),
            total: AtomicU64::new(u64::MAX),
            error: Mutex::new(None),
        })))
    }

    /// Link type of the file's packets.
    pub fn link_type(&self) -> LinkType {
        self.link
    }

    /// A reader (each thread has its own).
    pub fn reader(self: &Arc<Self>) -> SplitReader {
        SplitReader {
            split: self.clone(),
            buf: Vec::with_capacity(SPLIT_READ),
            recs: Vec::with_capacity(SPLIT_GROUP),
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
    buf: Vec<u8>,
    /// (start in `buf`, captured length, ts, wire length) of the group's records.
    recs: Vec<(usize, usize, u64, u32)>,
    /// Number (in the file) of the group's first record.
    first: u64,
    /// The file ends with this group.
    last: bool,
    stats: PortStats,
    ended: bool,
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

    /// The number of the group the next claim gets (a hint: another reader may claim it first).
    pub fn next_claim(&self) -> u64 {
        self.split.claim.load(Ordering::Relaxed)
    }

    /// Groups in the file, once its end was found.
    pub fn groups(&self) -> Option<u64> {
        Some(self.split.total.load(Ordering::Acquire)).filter(|&g| g != u64::MAX)
    }

    /// The error that ended the file early, once (for all readers).
    pub fn take_error(&self) -> Option<PortError> {
        self.split.take_error()
    }

    /// Reads `len` bytes at `off` into `buf` from `from` on; returns how many (fewer at the end of
    /// the file).
    fn fill(&mut self, off: u64, from: usize, len: usize) -> Result<usize, PortError> {
        // Grown (zeroed) once; later reads overwrite it without clearing it first: only the
        // bytes read (`have` in `walk`) are ever looked at.
        if self.buf.len() < from + len {
            self.buf.resize(from + len, 0);
        }
        let mut got = 0;
        while got < len {
            match self
                .split
                .file
                .read_at(&mut self.buf[from + got..from + len], off + got as u64)
            {
                Ok(0) => break,
                Ok(k) => got += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(source) => {
                    return Err(PortError::Io {
                        path: self.split.path.clone(),
                        source,
                    })
                }
            }
        }
        Ok(got)
    }

    /// Claims the file's next group and reads it, unless another reader holds the file now
    /// ([`Chunk::NotYet`]) or the file has no more groups ([`Chunk::End`]).
    pub fn next_group(&mut self) -> Chunk {
        let s = self.split.clone();
        if self.ended {
            return Chunk::End;
        }
        let mut cur = match s.cursor.try_lock() {
            Ok(c) => c,
            Err(std::sync::TryLockError::WouldBlock) => return Chunk::NotYet,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
        };
        let Some((g, off, first)) = *cur else {
            self.ended = true;
            return Chunk::End;
        };
        self.recs.clear();
        self.first = first;
        self.last = false;
        match self.walk(off) {
            (Some(end_off), _) => {
                *cur = Some((g + 1, end_off, first + self.recs.len() as u64));
                s.claim.store(g + 1, Ordering::Relaxed);
            }
            (None, e) => {
                // The file ends in this group (cleanly, or at a bad record).
                let groups = if self.recs.is_empty() && e.is_none() {
                    g
                } else {
                    g + 1
                };
                if let Some(e) = e {
                    *s.error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                }
                s.total.store(groups, Ordering::Release);
                *cur = None;
                self.last = true;
                if groups == g {
                    self.ended = true;
                    return Chunk::End;
                }
            }
        }
        drop(cur);
        self.stats.rx_packets += self.recs.len() as u64;
        let limit = s.limit;
        self.stats.rx_bytes += self
            .recs
            .iter()
            .map(|r| r.3.max(r.1.min(limit) as u32) as u64)
            .sum::<u64>();
        Chunk::Group(g)
    }

    /// Walks the records from `off`: the group's end offset (Some) when the file goes on after
    /// it, None when the file ended in it (with the error if it ended on a bad record).
    fn walk(&mut self, off: u64) -> (Option<u64>, Option<PortError>) {
        let s = self.split.clone();
        let mut have = match self.fill(off, 0, SPLIT_READ) {
            Ok(n) => n,
            Err(e) => return (None, Some(e)),
        };
        let mut eof = have < SPLIT_READ;
        let mut pos = 0usize;
        while self.recs.len() < SPLIT_GROUP {
            let at = off + pos as u64;
            if have - pos < HDR {
                if eof {
                    if have == pos {
                        return (None, None);
                    }
                    let why = format!("truncated record header ({} of {HDR} bytes)", have - pos);
                    return (None, Some(s.bad(at, why)));
                }
                if !self.recs.is_empty() {
                    break;
                }
                // A record that starts near the end of what was read: read on.
                match self.fill(off + have as u64, have, SPLIT_READ) {
                    Ok(n) => {
                        eof = n < SPLIT_READ;
                        have += n;
                    }
                    Err(e) => return (None, Some(e)),
                }
                continue;
            }
            let h = &self.buf[pos..pos + HDR];
            let (sec, frac) = (rd32(h, 0, s.be), rd32(h, 4, s.be));
            let (caplen, wire) = (rd32(h, 8, s.be), rd32(h, 12, s.be));
            if caplen > MAX_CAPLEN {
                let why =
                    format!("record captured length {caplen} is absurd (more than {MAX_CAPLEN})");
                return (None, Some(s.bad(at, why)));
            }
            let total = HDR + caplen as usize;
            if have - pos < total {
                if eof {
                    let why = format!(
                        "truncated record ({} of {caplen} captured bytes)",
                        have - pos - HDR
                    );
                    return (None, Some(s.bad(at, why)));
                }
                if !self.recs.is_empty() {
                    break;
                }
                let more = (total - (have - pos)).max(SPLIT_READ);
                match self.fill(off + have as u64, have, more) {
                    Ok(n) => {
                        eof = n < more;
                        have += n;
                    }
                    Err(e) => return (None, Some(e)),
                }
                continue;
            }
            let frac_ns = if s.nanos {
                u64::from(frac)
            } else {
                u64::from(frac) * 1000
            };
            let ts = u64::from(sec) * 1_000_000_000 + frac_ns;
            self.recs.push((pos + HDR, caplen as usize, ts, wire));
            pos += total;
        }
        if eof && pos == have {
            // The group ends where the file ends: nothing after it.
            return (None, None);
        }
        (Some(off + pos as u64), None)
    }

    /// The records of the group [`SplitReader::next_group`] gave last.
    pub fn records(&self) -> impl ExactSizeIterator<Item = SplitRecord<'_>> + '_ {
        let limit = self.split.limit;
        self.recs.iter().map(move |&(start, len, ts, wire)| {
            let n = len.min(limit);
            SplitRecord {
                ts,
                wire_len: wire.max(n as u32),
                data: &self.buf[start..start + n],
            }
        })
    }
}

//! `linerate query`: the packets of a directory of captures (what `linerate record` writes) that
//! a filter matches, between two times, in time order, as one pcap or pcapng stream.
//!
//! The answer is exactly `tcpdump -r FILE 'EXPR'` over every file, merged by time: each file's
//! index ([`Plan`]) narrows the blocks read to those that may hold a match, then libpcap's
//! compiled filter runs on every packet of them, with the file's link type. A file without an
//! index, or whose index cannot be read, is read whole (and, with [`Options::reindex`], indexed).
//! Files are merged k-way, by timestamp, ties in the files' order (start time, writer number,
//! name) and then in each file's order, as `mergecap` does; each file is taken to be in time
//! order, as a writer writes it (a packet earlier than the one before it in its file is
//! counted in [`Stats::out_of_order`] and written where it is). A file still being written is
//! read up to its last whole record. Nothing in the directory is written (except indexes with
//! `reindex`); links planted in it are not followed.

pub mod plan;
pub mod serve;
pub mod time;

use crate::filter::{Filter, FilterError};
use crate::port::file::RecordWrite;
use crate::port::pcap::{PcapNgWriter, PcapReader, PcapWriter, WriteFormat};
use crate::port::{LinkType, PortError};
pub use plan::{Plan, Postings, Term};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
pub use time::parse_time;

/// Errors of a query.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    /// The directory could not be listed.
    #[error("{dir}: {source}")]
    Dir {
        /// The directory.
        dir: String,
        /// The error.
        source: io::Error,
    },
    /// The filter does not compile.
    #[error(transparent)]
    Filter(#[from] FilterError),
    /// A capture could not be opened or its header read.
    #[error(transparent)]
    Capture(#[from] PortError),
    /// The captures do not share one link type.
    #[error(
        "{a} has link type {la} and {b} link type {lb}: one output holds one link type; query \
         them apart (name the files in a directory of their own)"
    )]
    LinkTypes {
        /// A file.
        a: String,
        /// Its link type.
        la: u32,
        /// Another.
        b: String,
        /// Its link type.
        lb: u32,
    },
    /// The output could not be written.
    #[error("writing the output: {0}")]
    Write(io::Error),
}

/// What to query.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// The filter expression, libpcap syntax ("" matches every packet).
    pub filter: String,
    /// Packets at or after this time (ns since the epoch).
    pub from: Option<u64>,
    /// Packets before this time.
    pub to: Option<u64>,
    /// Stop after this many packets.
    pub count: Option<u64>,
    /// The output's format.
    pub format: WriteFormat,
    /// Read every file whole, ignoring indexes.
    pub no_index: bool,
    /// Index the files that have none (or a bad one): the index is written beside the file.
    pub reindex: bool,
}

/// What a query did.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Stats {
    /// Capture files in the directory.
    pub files: u64,
    /// Files read through their index.
    pub files_indexed: u64,
    /// Files read whole (no index, or `--no-index`).
    pub files_scanned: u64,
    /// Files skipped whole (outside the times, or no block to read).
    pub files_skipped: u64,
    /// Files that end in a cut record (one being written, or cut by a crash), those holding
    /// only a cut record too.
    pub files_cut: u64,
    /// Files that could not be read (permission denied, an I/O error): their packets are not
    /// in the answer, the other files' are; each is named in `errors`.
    pub files_unreadable: u64,
    /// Index blocks read.
    pub blocks_read: u64,
    /// Index blocks of the indexed files.
    pub blocks_total: u64,
    /// Bytes of capture read.
    pub bytes_read: u64,
    /// Bytes of the capture files.
    pub bytes_total: u64,
    /// Packets the filter ran on.
    pub packets_tested: u64,
    /// Packets written.
    pub packets_matched: u64,
    /// Packets earlier than the one before them in their file.
    pub out_of_order: u64,
    /// Time taken, ns.
    pub elapsed_ns: u64,
    /// What was noticed on the way (a missing index, a cut file), one line each.
    pub notes: Vec<String>,
    /// The files that could not be read, one line each naming the file and why.
    pub errors: Vec<String>,
    /// The query was stopped (a signal) before its end: the output holds the packets written
    /// until then, each whole.
    pub interrupted: bool,
}

/// A capture file of the directory.
#[derive(Clone, Debug)]
struct Capture {
    path: PathBuf,
    name: String,
    /// Start time from the name (recorder's files), else 0; writer number.
    name_key: (u64, u32),
    link: LinkType,
    snaplen: u32,
    /// First packet's time and offset (None: no packet).
    first: Option<(u64, u64)>,
    size: u64,
    /// The filter compiled for this file as tcpdump -r compiles it, where that differs from
    /// the compile for its link type (DLT_NULL, DLT_LOOP, DLT_ENC: see
    /// [`Filter::compile_for_file`]).
    own: Option<std::sync::Arc<Filter>>,
}

/// A query over a directory, ready to run: the files listed and their headers read, the
/// filter compiled for their link types.
pub struct Query {
    opts: Options,
    plan: Plan,
    caps: Vec<Capture>,
    filters: HashMap<u32, Filter>,
    link: LinkType,
    snaplen: u32,
    /// Files passed over when listed (not captures), said in the run's notes.
    passed_over: Vec<String>,
    /// Files that could not be opened when listed, said in the run's errors.
    unreadable: Vec<String>,
    /// Files holding no whole record (only a cut one), counted as cut.
    cut_only: u64,
}

/// The start time and writer of a recorder's file name, `YYYYmmddTHHMMSS.ffffffZ-wN.ext`.
pub fn name_time(name: &str) -> Option<(u64, u32)> {
    let stem = name.rsplit_once('.').map(|(s, _)| s)?;
    let (t, w) = stem.rsplit_once("-w")?;
    let w: u32 = w.parse().ok()?;
    if t.len() < 16 {
        return None;
    }
    let iso = format!(
        "{}-{}-{}T{}:{}:{}{}",
        t.get(0..4)?,
        t.get(4..6)?,
        t.get(6..8)?,
        t.get(9..11)?,
        t.get(11..13)?,
        t.get(13..15)?,
        t.get(15..)?
    );
    Some((time::parse_time(&iso, 0).ok()?, w))
}

/// Whether a file name is a capture's (`*.pcap`, `*.pcapng`).
pub fn is_capture_name(name: &str) -> bool {
    let l = name.to_ascii_lowercase();
    l.ends_with(".pcap") || l.ends_with(".pcapng")
}

/// The error line of a capture that could not be opened.
fn unreadable_line(path: &Path, e: &io::Error) -> String {
    format!(
        "{}: {e}: not read; its packets are not in the answer",
        path.display()
    )
}

/// Opens a file read-only without following a link.
fn open_nofollow(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
}

impl Query {
    /// Lists the captures of `dir` (regular files named `*.pcap`/`*.pcapng`; links and other
    /// files are passed over), reads their headers and compiles the filter for their link types.
    pub fn prepare(dir: &Path, opts: Options) -> Result<Query, QueryError> {
        let d = dir.display().to_string();
        let rd = std::fs::read_dir(dir).map_err(|source| QueryError::Dir {
            dir: d.clone(),
            source,
        })?;
        let mut caps = Vec::new();
        let (mut passed_over, mut unreadable, mut cut_only) = (Vec::new(), Vec::new(), 0);
        for e in rd {
            let e = e.map_err(|source| QueryError::Dir {
                dir: d.clone(),
                source,
            })?;
            let name = e.file_name().to_string_lossy().into_owned();
            // file_type() does not follow a link: links and directories are passed over, and
            // said (a FIFO, a link or a directory under a capture's name is never read).
            if !is_capture_name(&name) {
                continue;
            }
            if !e.file_type().is_ok_and(|t| t.is_file()) {
                let what = match e.file_type() {
                    Ok(t) if t.is_symlink() => "a symbolic link",
                    Ok(t) if t.is_dir() => "a directory",
                    _ => "not a regular file",
                };
                passed_over.push(format!("{}: {what}: passed over", e.path().display()));
                continue;
            }
            let path = e.path();
            let f = match open_nofollow(&path) {
                Ok(f) => f,
                // Deleted since the listing (the recorder's budget removes the oldest files).
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                // Not readable (permission denied...): named, and the other files still
                // answer, as grep -r and tcpdump -r over a list go on past it.
                Err(source) => {
                    unreadable.push(unreadable_line(&path, &source));
                    continue;
                }
            };
            let size = f.metadata().map(|m| m.len()).unwrap_or(0);
            let ps = path.display().to_string();
            let mut r = match PcapReader::new(f, &ps) {
                Ok(r) => r,
                // An empty file (a writer just created it, its header not written yet):
                // nothing in it yet, said as a file of only its header is, so that no file of
                // DIR goes unmentioned in the answer.
                Err(_) if size == 0 => {
                    passed_over.push(format!(
                        "{}: empty, not even its file header yet (a file just begun): nothing \
                         of it is in the answer",
                        path.display()
                    ));
                    continue;
                }
                // Not a capture (a stray or damaged file): passed over and said, as a loop of
                // tcpdump -r goes on past it; the other files still answer.
                Err(e) => {
                    passed_over.push(format!("{e}: not a capture file: passed over"));
                    continue;
                }
            };
            let link = r.link_type();
            let snaplen = r.snaplen();
            let first = match r.next_packet() {
                Ok(Some(p)) => Some((p.ts, p.offset)),
                // Its header and nothing after it (a file just begun): said, as a file of only
                // a cut record is, so that no file of DIR goes unmentioned in the answer.
                Ok(None) => {
                    passed_over.push(format!(
                        "{}: only its file header, no record yet (a file just begun): nothing \
                         of it is in the answer",
                        path.display()
                    ));
                    None
                }
                // Not one whole record (a file just begun, or cut by a crash): nothing of it
                // can be read, and that is said rather than passed over in silence.
                Err(e) => {
                    cut_only += 1;
                    passed_over.push(format!(
                        "{e}: no whole record in the file (one being written, or cut by a \
                         crash): nothing of it is in the answer"
                    ));
                    None
                }
            };
            caps.push(Capture {
                path,
                name_key: name_time(&name).unwrap_or((0, 0)),
                name,
                link,
                snaplen,
                first,
                size,
                own: None,
            });
        }
        caps.sort_by(|a, b| {
            (a.name_key, a.first.map(|f| f.0), &a.name).cmp(&(
                b.name_key,
                b.first.map(|f| f.0),
                &b.name,
            ))
        });
        let link = caps.first().map_or(LinkType::ETHERNET, |c| c.link);
        if let Some(o) = caps.iter().find(|c| c.link != link) {
            return Err(QueryError::LinkTypes {
                a: caps[0].path.display().to_string(),
                la: link.0,
                b: o.path.display().to_string(),
                lb: o.link.0,
            });
        }
        let mut filters = HashMap::new();
        filters.insert(link.0, Filter::compile(&opts.filter, link)?);
        // An address family in the capturing host's byte order (DLT_NULL, DLT_ENC; DLT_LOOP's
        // BSD values): libpcap compiles the filter for the file it reads.
        if matches!(link.0, 0 | 108 | 109) {
            for c in &mut caps {
                if let Some(f) = Filter::compile_for_file(&opts.filter, &c.path) {
                    c.own = Some(std::sync::Arc::new(f?));
                }
            }
        }
        let snaplen = caps.iter().map(|c| c.snaplen).max().unwrap_or(0);
        Ok(Query {
            plan: Plan::parse(&opts.filter),
            opts,
            caps,
            filters,
            link,
            snaplen,
            passed_over,
            unreadable,
            cut_only,
        })
    }

    /// The plan of the filter.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The output's link type (the captures').
    pub fn link_type(&self) -> LinkType {
        self.link
    }

    /// Runs the query, writing the packets to `out` (the header first, even with no packet).
    pub fn run<W: RecordWrite>(&mut self, out: W) -> Result<(Stats, W), QueryError> {
        self.run_until(out, &std::sync::atomic::AtomicBool::new(false))
    }

    /// [`run`](Query::run), stopped early when `stop` is set (a signal): the output then ends
    /// on the last packet written, whole, and the stats say `interrupted`.
    pub fn run_until<W: RecordWrite>(
        &mut self,
        out: W,
        stop: &std::sync::atomic::AtomicBool,
    ) -> Result<(Stats, W), QueryError> {
        let t0 = std::time::Instant::now();
        let mut out =
            Out::new(out, self.opts.format, self.link, self.snaplen).map_err(QueryError::Write)?;
        let mut st = Stats {
            files: (self.caps.len() + self.unreadable.len()) as u64,
            bytes_total: self.caps.iter().map(|c| c.size).sum(),
            notes: self.passed_over.clone(),
            errors: self.unreadable.clone(),
            files_unreadable: self.unreadable.len() as u64,
            files_cut: self.cut_only,
            ..Stats::default()
        };
        let (from, to) = (
            self.opts.from.unwrap_or(0),
            self.opts.to.unwrap_or(u64::MAX),
        );
        let mut ctx = Ctx {
            from,
            to,
            filters: std::mem::take(&mut self.filters),
            expr: self.opts.filter.clone(),
            link: self.link,
            st: &mut st,
            stop,
        };
        // Files by their first packet's time, opened as the merge reaches it.
        let mut pending: Vec<usize> = (0..self.caps.len())
            .filter(|&i| self.caps[i].first.is_some())
            .collect();
        pending.sort_by_key(|&i| Reverse((self.caps[i].first.map_or(0, |f| f.0), i)));
        let mut streams: Vec<Option<Stream>> = (0..self.caps.len()).map(|_| None).collect();
        let mut heap: BinaryHeap<Reverse<(u64, usize)>> = BinaryHeap::new();
        let limit = self.opts.count.unwrap_or(u64::MAX);
        let mut written = 0u64;
        let mut failed = None;
        while written < limit {
            if stop.load(std::sync::atomic::Ordering::Relaxed) {
                ctx.st.interrupted = true;
                break;
            }
            while let Some(&i) = pending.last() {
                let first = self.caps[i].first.map_or(0, |f| f.0);
                if heap.peek().is_some_and(|Reverse((t, _))| first > *t) {
                    break;
                }
                pending.pop();
                if let Some(mut s) = Stream::open(&self.caps[i], &self.plan, &self.opts, &mut ctx)?
                {
                    if s.advance(&mut ctx)? {
                        heap.push(Reverse((s.head.ts, i)));
                        streams[i] = Some(s);
                    }
                }
            }
            let Some(Reverse((_, i))) = heap.pop() else {
                break;
            };
            let Some(s) = streams[i].as_mut() else {
                break;
            };
            if let Err(e) = out.write(&s.head) {
                failed = Some(e);
                break;
            }
            written += 1;
            if s.advance(&mut ctx)? {
                heap.push(Reverse((s.head.ts, i)));
            } else {
                streams[i] = None;
            }
        }
        // Streams still open (-c ended the query): count what they read.
        for s in streams.iter_mut().flatten() {
            s.close(&mut ctx);
        }
        self.filters = std::mem::take(&mut ctx.filters);
        st.packets_matched = written;
        let w = match failed {
            Some(e) => return Err(QueryError::Write(e)),
            None => out.finish().map_err(QueryError::Write)?,
        };
        st.elapsed_ns = t0.elapsed().as_nanos() as u64;
        Ok((st, w))
    }
}

/// The state streams share.
struct Ctx<'a> {
    from: u64,
    to: u64,
    filters: HashMap<u32, Filter>,
    expr: String,
    /// The output's link type: a packet of another (a pcapng interface of its own) ends its
    /// file's stream (tcpdump -r stops earlier, at that interface's description), rather than
    /// being written mislabelled.
    link: LinkType,
    st: &'a mut Stats,
    /// Set by a signal: streams stop reading (the run ends on its next packet).
    stop: &'a std::sync::atomic::AtomicBool,
}

/// A packet at the head of a stream.
#[derive(Default)]
struct Head {
    ts: u64,
    wire: u32,
    data: Vec<u8>,
}

/// The byte ranges of a file that are read: the header, then blocks (end `u64::MAX`: to the
/// end of the file), as one stream for the reader.
struct Ranges {
    file: File,
    segs: Vec<(u64, u64)>,
    cur: usize,
    pos: u64,
    read: u64,
}

impl Read for Ranges {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let Some(&(start, end)) = self.segs.get(self.cur) else {
                return Ok(0);
            };
            if self.pos < start {
                self.file.seek(SeekFrom::Start(start))?;
                self.pos = start;
            }
            let left = end.saturating_sub(self.pos);
            if left == 0 {
                self.cur += 1;
                continue;
            }
            let n = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
            let got = self.file.read(&mut buf[..n])?;
            if got == 0 {
                // The end of the file: this range is done.
                self.cur += 1;
                if self.cur < self.segs.len() {
                    continue;
                }
                return Ok(0);
            }
            self.pos += got as u64;
            self.read += got as u64;
            return Ok(got);
        }
    }
}

/// Counts what a whole-file reader reads.
struct Counted {
    file: File,
    read: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl Read for Counted {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.file.read(buf)?;
        self.read
            .fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
        Ok(n)
    }
}

/// One file's matching packets, in its order.
struct Stream {
    /// The file's path, for notes.
    name: String,
    /// The file's own filter (else the one of its link type).
    own: Option<std::sync::Arc<Filter>>,
    reader: PcapReader<Box<dyn Read + Send>>,
    head: Head,
    last_ts: u64,
    read: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// The file, and the byte ranges read through its index (empty: read whole).
    path: PathBuf,
    segs: Vec<(u64, u64)>,
    /// End of the records the index covers (whole records: a reading error before it is the
    /// ranges' lack of context, not damage).
    indexed_end: u64,
    /// Read whole after such an error: records before this file offset were already read.
    skip_before: u64,
}

impl Stream {
    /// Opens a capture for the query: through its index when it has one, else whole. None when
    /// nothing of it can match (outside the times, no block).
    fn open(
        cap: &Capture,
        plan: &Plan,
        opts: &Options,
        ctx: &mut Ctx<'_>,
    ) -> Result<Option<Stream>, QueryError> {
        let path = cap.path.display().to_string();
        let f = match open_nofollow(&cap.path) {
            Ok(f) => f,
            // Deleted since the query listed it (the recorder's --budget or --keep-free removes
            // the oldest files while a long query runs): said, and the other files still answer.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                ctx.st.files_skipped += 1;
                ctx.st.notes.push(format!(
                    "{path}: removed before it was read (by the recorder's --budget or \
                     --keep-free?): its packets are not in the answer"
                ));
                return Ok(None);
            }
            // Made unreadable since it was listed: named, the other files still answer.
            Err(source) => {
                ctx.st.files_unreadable += 1;
                ctx.st.errors.push(unreadable_line(&cap.path, &source));
                return Ok(None);
            }
        };
        let read = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let (mut ranges, mut indexed_end) = (Vec::new(), 0);
        let src: Box<dyn Read + Send> = match index::select(cap, plan, opts, ctx) {
            index::Selection::Skip => {
                ctx.st.files_skipped += 1;
                return Ok(None);
            }
            index::Selection::Ranges(segs, end) => {
                ctx.st.files_indexed += 1;
                ranges = segs.clone();
                indexed_end = end;
                Box::new(CountedRanges {
                    inner: Ranges {
                        file: f,
                        segs,
                        cur: 0,
                        pos: 0,
                        read: 0,
                    },
                    read: read.clone(),
                })
            }
            index::Selection::Whole => {
                ctx.st.files_scanned += 1;
                Box::new(Counted {
                    file: f,
                    read: read.clone(),
                })
            }
        };
        let reader = PcapReader::new(src, &path)?;
        Ok(Some(Stream {
            name: path,
            own: cap.own.clone(),
            reader,
            head: Head::default(),
            last_ts: 0,
            read,
            path: cap.path.clone(),
            segs: ranges,
            indexed_end,
            skip_before: 0,
        }))
    }

    /// The file offset of byte `at` of the ranges read (None: past them).
    fn file_offset(&self, at: u64) -> Option<u64> {
        let mut base = 0u64;
        for &(start, end) in &self.segs {
            let len = end.saturating_sub(start);
            if at < base.saturating_add(len) {
                return Some(start + (at - base));
            }
            base = base.saturating_add(len);
        }
        None
    }

    /// After an error reading the index's ranges at stream offset `at`: when it lies among
    /// the indexed (whole) records, the ranges lacked what the file says before them (a pcapng
    /// interface described after the first packet, in a block not read): the file is read
    /// whole from then on, the records before that point passed over (already read, or not
    /// matching by the index). True when so.
    fn read_whole_after(&mut self, at: u64) -> Result<bool, QueryError> {
        let Some(off) = self.file_offset(at) else {
            return Ok(false);
        };
        if self.segs.is_empty() || off >= self.indexed_end {
            return Ok(false);
        }
        let path = self.path.display().to_string();
        let f = open_nofollow(&self.path).map_err(|source| PortError::Io {
            path: path.clone(),
            source,
        })?;
        let src: Box<dyn Read + Send> = Box::new(Counted {
            file: f,
            read: self.read.clone(),
        });
        self.reader = PcapReader::new(src, &path)?;
        self.segs.clear();
        self.skip_before = off;
        Ok(true)
    }

    /// Reads on to the next packet the filter and the times take; false at the end.
    fn advance(&mut self, ctx: &mut Ctx<'_>) -> Result<bool, QueryError> {
        loop {
            let p = match self.reader.next_packet() {
                Ok(Some(p)) if p.offset < self.skip_before => continue,
                Ok(Some(p)) => p,
                Ok(None) => {
                    self.close(ctx);
                    return Ok(false);
                }
                Err(e) => {
                    if let PortError::Format { offset, .. } = &e {
                        if self.read_whole_after(*offset)? {
                            continue;
                        }
                    }
                    ctx.st.files_cut += 1;
                    ctx.st
                        .notes
                        .push(format!("{e}: read up to there (a file being written?)"));
                    self.close(ctx);
                    return Ok(false);
                }
            };
            if p.link != ctx.link {
                ctx.st.files_cut += 1;
                ctx.st.notes.push(format!(
                    "{}: the packet at byte {} is of link type {} (another pcapng interface), \
                     the output's {}: the file is read up to there, never written mislabelled \
                     (tcpdump -r stops at that interface's description; tshark -r reads all)",
                    self.name, p.offset, p.link.0, ctx.link.0
                ));
                self.close(ctx);
                return Ok(false);
            }
            ctx.st.packets_tested += 1;
            if ctx.stop.load(std::sync::atomic::Ordering::Relaxed) {
                self.close(ctx);
                return Ok(false);
            }
            if p.ts < ctx.from || p.ts >= ctx.to {
                continue;
            }
            let f = match (&self.own, ctx.filters.get(&p.link.0)) {
                (Some(f), _) => &**f,
                (None, Some(f)) => f,
                (None, None) => {
                    let f = Filter::compile(&ctx.expr, p.link)?;
                    ctx.filters.entry(p.link.0).or_insert(f)
                }
            };
            if !f.matches_wire(p.data, p.wire_len) {
                continue;
            }
            if p.ts < self.last_ts {
                ctx.st.out_of_order += 1;
            }
            self.last_ts = p.ts;
            self.head.ts = p.ts;
            self.head.wire = p.wire_len;
            self.head.data.clear();
            self.head.data.extend_from_slice(p.data);
            return Ok(true);
        }
    }

    fn close(&mut self, ctx: &mut Ctx<'_>) {
        let n = self.read.swap(0, std::sync::atomic::Ordering::Relaxed);
        ctx.st.bytes_read += n;
    }
}

/// [`Ranges`], counted.
struct CountedRanges {
    inner: Ranges,
    read: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl Read for CountedRanges {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let before = self.inner.read;
        let n = self.inner.read(buf)?;
        self.read.fetch_add(
            self.inner.read - before,
            std::sync::atomic::Ordering::Relaxed,
        );
        Ok(n)
    }
}

/// The output, pcap or pcapng.
enum Out<W: RecordWrite> {
    Pcap(PcapWriter<W>),
    Ng(PcapNgWriter<W>),
}

impl<W: RecordWrite> Out<W> {
    fn new(w: W, format: WriteFormat, link: LinkType, snaplen: u32) -> io::Result<Out<W>> {
        Ok(match format {
            WriteFormat::Pcap => {
                let mut p = PcapWriter::new(w, link, snaplen)?;
                p.keep_whole();
                Out::Pcap(p)
            }
            WriteFormat::PcapNg => {
                let mut p = PcapNgWriter::new(w, link, snaplen)?;
                p.keep_whole();
                Out::Ng(p)
            }
        })
    }

    fn write(&mut self, h: &Head) -> io::Result<()> {
        match self {
            Out::Pcap(p) => p.write_packet(h.ts, &h.data, h.wire),
            Out::Ng(p) => p.write_packet(0, h.ts, &h.data, h.wire),
        }
    }

    fn finish(self) -> io::Result<W> {
        Ok(match self {
            Out::Pcap(mut p) => {
                p.flush()?;
                p.into_inner()
            }
            Out::Ng(mut p) => {
                p.flush()?;
                p.into_inner()
            }
        })
    }
}

/// Using a capture's index.
mod index {
    use super::{Capture, Ctx, Options, Plan, Postings, Term};
    use crate::apps::record::{BlockSet, FileIndex, IndexError, Key};

    /// What of a file a query reads.
    pub(super) enum Selection {
        /// Nothing.
        Skip,
        /// The file whole.
        Whole,
        /// These byte ranges (the header's first; `u64::MAX`: to the end of the file), and the
        /// end of the records the index covers.
        Ranges(Vec<(u64, u64)>, u64),
    }

    /// A file's index as the planner's postings.
    pub(super) struct Idx<'a>(pub(super) &'a FileIndex);

    impl Postings for Idx<'_> {
        type Set = BlockSet;
        fn all(&self) -> BlockSet {
            BlockSet::all(self.0.blocks().len())
        }
        fn term(&self, t: &Term) -> BlockSet {
            let n = self.0.blocks().len();
            match t {
                Term::Ip4(a) => self.0.lookup(&Key::Ip4(*a)),
                Term::Ip6(a) => self.0.lookup(&Key::Ip6(*a)),
                Term::Port(p) => self.0.lookup(&Key::Port(*p)),
                Term::Proto(p) => self.0.lookup(&Key::Proto(*p)),
                Term::Vlan(v) => self.0.lookup(&Key::Vlan(*v)),
                Term::Tagged => self.0.lookup(&Key::Tagged),
                Term::EtherType(e) => self.0.lookup(&Key::EtherType(*e)),
                Term::Net4 { addr, mask } => self
                    .0
                    .ip4_keys()
                    .filter(|(a, _)| Term::net4_holds(*addr, *mask, *a))
                    .fold(BlockSet::new_empty(n), |acc, (_, s)| acc.or(&s)),
                Term::Net6 { addr, bits } => self
                    .0
                    .ip6_keys()
                    .filter(|(a, _)| Term::net6_holds(*addr, *bits, *a))
                    .fold(BlockSet::new_empty(n), |acc, (_, s)| acc.or(&s)),
            }
        }
        fn and(&self, a: BlockSet, b: BlockSet) -> BlockSet {
            a.and(&b)
        }
        fn or(&self, a: BlockSet, b: BlockSet) -> BlockSet {
            a.or(&b)
        }
    }

    /// The index of `cap`: loaded, or (with `reindex`) built and saved; None to read it whole.
    fn index_of(cap: &Capture, opts: &Options, ctx: &mut Ctx<'_>) -> Option<FileIndex> {
        if opts.no_index {
            return None;
        }
        let e = match FileIndex::load(&cap.path) {
            Ok(i) => return Some(i),
            Err(e) => e,
        };
        if !opts.reindex {
            let why = match &e {
                IndexError::Missing { .. } => "no index".to_string(),
                e => e.to_string(),
            };
            ctx.st.notes.push(format!(
                "{}: {why}: read whole (--reindex indexes it)",
                cap.path.display()
            ));
            return None;
        }
        match FileIndex::build(&cap.path) {
            Ok(i) => {
                let had = match &e {
                    IndexError::Missing { .. } => "it had no index".to_string(),
                    e => e.to_string(),
                };
                match i.save(&cap.path) {
                    Ok(()) => ctx
                        .st
                        .notes
                        .push(format!("{}: indexed ({had})", cap.path.display())),
                    Err(s) => ctx.st.notes.push(format!(
                        "{}: indexed for this query, not saved: {s}",
                        cap.path.display()
                    )),
                }
                Some(i)
            }
            Err(b) => {
                ctx.st
                    .notes
                    .push(format!("{}: {b}: read whole", cap.path.display()));
                None
            }
        }
    }

    /// The part of `cap` that may hold a match.
    pub(super) fn select(
        cap: &Capture,
        plan: &Plan,
        opts: &Options,
        ctx: &mut Ctx<'_>,
    ) -> Selection {
        let Some(idx) = index_of(cap, opts, ctx) else {
            return Selection::Whole;
        };
        if idx.link_type() != cap.link {
            ctx.st.notes.push(format!(
                "{}: the index is of link type {}, the file of {}: read whole",
                cap.path.display(),
                idx.link_type().0,
                cap.link.0
            ));
            return Selection::Whole;
        }
        let blocks = idx.blocks();
        ctx.st.blocks_total += blocks.len() as u64;
        let set = plan.eval(&Idx(&idx)).or(&idx.opaque());
        let mut segs: Vec<(u64, u64)> = vec![(0, idx.data_start())];
        let mut any = false;
        for b in set.iter() {
            let Some(bi) = blocks.get(b) else { continue };
            if bi.last_ns < ctx.from || bi.first_ns >= ctx.to {
                continue;
            }
            ctx.st.blocks_read += 1;
            any = true;
            let (start, end) = (bi.offset, bi.offset + bi.len);
            match segs.last_mut() {
                Some(last) if last.1 == start => last.1 = end,
                _ => segs.push((start, end)),
            }
        }
        // Records written after the index (a file being written): read them all. A closed
        // pcapng file's statistics after its last record hold no packet.
        let size = std::fs::symlink_metadata(&cap.path).map_or(cap.size, |m| m.len());
        if size > idx.indexed_end()
            && !crate::apps::record::only_stats_after(&cap.path, idx.indexed_end(), size)
        {
            let at = idx.indexed_end().max(idx.data_start());
            any = true;
            match segs.last_mut() {
                Some(last) if last.1 == at => last.1 = u64::MAX,
                _ => segs.push((at, u64::MAX)),
            }
        }
        if !any {
            return Selection::Skip;
        }
        Selection::Ranges(segs, idx.indexed_end())
    }
}

/// A [`RecordWrite`] over any writer: records are buffered and written out in large writes
/// (a socket, a pipe).
pub struct Buffered<W: io::Write> {
    w: W,
    buf: Vec<u8>,
    cap: usize,
}

impl<W: io::Write> Buffered<W> {
    /// Buffers up to `cap` bytes for `w`.
    pub fn new(w: W, cap: usize) -> Buffered<W> {
        Buffered {
            w,
            buf: Vec::with_capacity(cap),
            cap,
        }
    }

    /// The writer, once what is buffered was written out.
    pub fn into_inner(mut self) -> io::Result<W> {
        io::Write::flush(&mut self)?;
        Ok(self.w)
    }
}

impl<W: io::Write> io::Write for Buffered<W> {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        if self.buf.len() + b.len() > self.cap {
            self.w.write_all(&self.buf)?;
            self.buf.clear();
        }
        self.buf.extend_from_slice(b);
        Ok(b.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.w.write_all(&self.buf)?;
        self.buf.clear();
        self.w.flush()
    }
}

impl<W: io::Write> RecordWrite for Buffered<W> {
    fn record(&mut self, len: usize) -> io::Result<&mut [u8]> {
        if self.buf.len() + len > self.cap {
            self.w.write_all(&self.buf)?;
            self.buf.clear();
        }
        let at = self.buf.len();
        self.buf.resize(at + len, 0);
        Ok(&mut self.buf[at..])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recorder_names() {
        assert_eq!(
            name_time("20251127T160000.250000Z-w3.pcap"),
            Some((1_764_259_200_250_000_000, 3))
        );
        assert_eq!(name_time("capture.pcap"), None);
        assert!(is_capture_name("a.PCAPNG"));
        assert!(!is_capture_name("a.pcap.idx"));
    }
}

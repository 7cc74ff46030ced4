//! The recorder's writers: one thread per input queue, each writing its own capture files
//! (`YYYYmmddTHHMMSS.ffffffZ-wN.pcap`) with large aligned writes (O_DIRECT where the file
//! system takes it), each file indexed as it is written; a disk policy (`--budget`,
//! `--keep-free`) deletes the oldest files across writers.

use super::index::{index_path, FileIndex, IndexWriter};
use crate::mem::Batch;
use crate::port::pcap::{PcapNgWriter, PcapWriter, Precision, WriteFormat};
use crate::port::{Interface, LinkType, Port};
use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Bytes a writer gathers before it writes (one `write` per this many bytes). Each O_DIRECT
/// write blocks until the disk has it and pins the buffer's pages: large chunks make few of
/// them (1 MiB measured ~15 ns a 64-byte packet more CPU than 4 MiB on live veth traffic).
pub const WRITE_CHUNK: usize = 4 << 20;
/// Alignment of O_DIRECT writes (offsets, lengths and buffer addresses).
const ALIGN: usize = 4096;

/// How a recorder runs.
#[derive(Clone, Debug)]
pub struct RecordOptions {
    /// Directory of the files.
    pub dir: PathBuf,
    /// A file is closed before it would exceed this many bytes.
    pub file_size: u64,
    /// pcap (nanosecond timestamps) or pcapng.
    pub format: WriteFormat,
    /// Bytes kept of each packet.
    pub snaplen: u32,
    /// Write with O_DIRECT where the file system allows it.
    pub direct: bool,
    /// The open file's data and index reach the disk at least this often.
    pub sync_every: Duration,
    /// Most bytes of capture files and indexes kept in the directory.
    pub budget: Option<u64>,
    /// Least share of the file system kept free, in percent.
    pub keep_free: Option<f64>,
    /// Stop after this many packets written (all writers together).
    pub count: Option<u64>,
    /// tcpdump's `-G`: a file is closed once this many seconds of capture time have passed
    /// since its first packet (whichever of this and `file_size` comes first).
    pub rotate_secs: Option<u64>,
}

/// Counters of one writer (single writer: its thread; read by anyone).
#[derive(Debug, Default)]
pub struct WriterCounters {
    /// Packets read from the input.
    pub received: AtomicU64,
    /// Packets written to a file.
    pub written: AtomicU64,
    /// Bytes of records written (file headers included).
    pub bytes: AtomicU64,
    /// Packets dropped because nothing could be written (disk full, read-only file system).
    pub dropped_disk_full: AtomicU64,
    /// Packets the kernel dropped before the input saw them.
    pub dropped_kernel: AtomicU64,
    /// Files this writer opened.
    pub files: AtomicU64,
}

/// What the recorder shares between its writers: the directory's files and the notes to print.
pub struct Shared {
    opts: RecordOptions,
    /// Closed capture files, oldest first by name: (path, bytes with its index).
    closed: Mutex<Vec<(PathBuf, u64)>>,
    /// Events the user should see (files repaired, write errors, files deleted), taken by the
    /// CLI.
    notes: Mutex<Vec<String>>,
    /// O_DIRECT was refused by the file system: buffered writes from then on.
    no_direct: AtomicBool,
    /// Packets taken by all writers (for `count`).
    total: AtomicU64,
    /// Files deleted by the disk policy.
    pub deleted: AtomicU64,
}

/// Whether `name` is one of the recorder's capture files.
pub fn is_capture_name(name: &str) -> bool {
    let stem = name
        .strip_suffix(".pcap")
        .or_else(|| name.strip_suffix(".pcapng"));
    match stem {
        Some(s) => s.len() > 24 && s.as_bytes().get(8) == Some(&b'T') && s.contains("Z-w"),
        None => false,
    }
}

/// `YYYYmmddTHHMMSS.ffffffZ` of `ns` since the epoch (UTC).
pub fn utc_stamp(ns: u64) -> String {
    let secs = ns / 1_000_000_000;
    let us = (ns % 1_000_000_000) / 1000;
    let days = (secs / 86_400) as i64;
    let sod = secs % 86_400;
    // Civil date from days since 1970-01-01 (proleptic Gregorian).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}{m:02}{d:02}T{:02}{:02}{:02}.{us:06}Z",
        sod / 3600,
        (sod / 60) % 60,
        sod % 60
    )
}

fn is_space_error(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT))
}

impl Shared {
    /// The recorder's shared state over `opts.dir` (which must exist); the closed files are
    /// those already in it.
    pub fn new(opts: RecordOptions) -> io::Result<Arc<Shared>> {
        let me = Shared {
            opts,
            closed: Mutex::new(Vec::new()),
            notes: Mutex::new(Vec::new()),
            no_direct: AtomicBool::new(false),
            total: AtomicU64::new(0),
            deleted: AtomicU64::new(0),
        };
        let mut list = Vec::new();
        for (p, _) in me.captures()? {
            let n = file_len(&p) + file_len(&index_path(&p));
            list.push((p, n));
        }
        *me.closed.lock().unwrap_or_else(|e| e.into_inner()) = list;
        Ok(Arc::new(me))
    }

    /// The options.
    pub fn options(&self) -> &RecordOptions {
        &self.opts
    }

    /// The capture files of the directory, oldest first, with their sizes.
    fn captures(&self) -> io::Result<Vec<(PathBuf, u64)>> {
        let mut v = Vec::new();
        for e in std::fs::read_dir(&self.opts.dir)? {
            let e = e?;
            let name = e.file_name();
            let Some(name) = name.to_str() else { continue };
            if !is_capture_name(name) {
                continue;
            }
            let md = std::fs::symlink_metadata(e.path())?;
            if md.file_type().is_file() {
                v.push((e.path(), md.len()));
            }
        }
        v.sort();
        Ok(v)
    }

    /// Checks every capture file of the directory (a recorder that stopped without closing its
    /// files, a crash): a file without a valid index, or longer than its index says, is cut to
    /// its last whole record and indexed. Returns a line per file repaired.
    pub fn repair(&self) -> Vec<String> {
        let mut out = Vec::new();
        let Ok(list) = self.captures() else {
            return out;
        };
        for (p, len) in list {
            // A closed file ends with its last indexed record; one longer than its index was
            // being written (the index is the last sync's) and may end inside a record.
            // A closed pcapng file ends with its interface statistics, past the last record.
            if FileIndex::load(&p)
                .is_ok_and(|i| i.indexed_end() == len || only_stats_after(&p, i.indexed_end(), len))
            {
                continue;
            }
            match FileIndex::build(&p) {
                Ok(idx) => {
                    let end = idx.indexed_end().max(idx.data_start());
                    let mut what = String::new();
                    if end < len {
                        if let Err(e) = std::fs::OpenOptions::new()
                            .write(true)
                            .custom_flags(libc::O_NOFOLLOW)
                            .open(&p)
                            .and_then(|f| f.set_len(end))
                        {
                            out.push(format!("{}: could not cut at {end}: {e}", p.display()));
                            continue;
                        }
                        what = format!(", cut from {len} to {end} bytes (its last whole record)");
                    }
                    match idx.save(&p) {
                        Ok(()) => out.push(format!(
                            "{}: repaired: {} packets indexed{what}",
                            p.display(),
                            idx.packets()
                        )),
                        Err(e) => out.push(format!("{}: not indexed: {e}", p.display())),
                    }
                }
                Err(e) if len < 4096 => {
                    // Nothing whole in it (a crash before its header reached the disk).
                    let _ = std::fs::remove_file(&p);
                    let _ = std::fs::remove_file(index_path(&p));
                    out.push(format!(
                        "{}: removed: no packet in it ({len} bytes: {e})",
                        p.display()
                    ));
                }
                Err(e) => out.push(format!("{}: left as it is: {e}", p.display())),
            }
        }
        if let Ok(list) = self.captures() {
            let v = list
                .into_iter()
                .map(|(p, n)| {
                    let i = file_len(&index_path(&p));
                    (p, n + i)
                })
                .collect();
            *self.closed.lock().unwrap_or_else(|e| e.into_inner()) = v;
        }
        out
    }

    /// Notes to print since the last call.
    pub fn take_notes(&self) -> Vec<String> {
        std::mem::take(&mut *self.notes.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn note(&self, s: String) {
        self.notes.lock().unwrap_or_else(|e| e.into_inner()).push(s);
    }

    /// Bytes of the closed capture files and their indexes.
    pub fn bytes_on_disk(&self) -> u64 {
        self.closed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(_, n)| n)
            .sum()
    }

    fn add_closed(&self, p: PathBuf, n: u64) {
        let mut l = self.closed.lock().unwrap_or_else(|e| e.into_inner());
        l.push((p, n));
        l.sort();
    }

    /// Deletes the oldest closed file (and its index); false when there is none.
    fn delete_oldest(&self, why: &str) -> bool {
        let victim = {
            let mut l = self.closed.lock().unwrap_or_else(|e| e.into_inner());
            if l.is_empty() {
                return false;
            }
            l.remove(0)
        };
        let _ = std::fs::remove_file(index_path(&victim.0));
        match std::fs::remove_file(&victim.0) {
            Ok(()) => {
                self.deleted.fetch_add(1, Ordering::Relaxed);
                // --budget and --keep-free delete as the user asked; a full disk is not a policy
                // the user set: each file it costs is said.
                if why == "disk full" {
                    self.note(format!(
                        "{}: deleted to make room: the file system is full (ENOSPC)",
                        victim.0.display()
                    ));
                }
                true
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => true,
            Err(e) => {
                self.note(format!("{}: could not delete: {e}", victim.0.display()));
                true
            }
        }
    }

    /// Applies --budget and --keep-free, `open` bytes being written in open files.
    pub fn enforce(&self, writers: u64) {
        let reserve = writers.saturating_mul(self.opts.file_size);
        if let Some(b) = self.opts.budget {
            while self.bytes_on_disk().saturating_add(reserve) > b {
                if !self.delete_oldest("budget") {
                    break;
                }
            }
        }
        if let Some(pct) = self.opts.keep_free {
            for _ in 0..100_000 {
                let Ok((free, total)) = crate::os::disk_space(&self.opts.dir) else {
                    break;
                };
                let want = (total as f64 * pct / 100.0) as u64;
                if free.saturating_sub(reserve) >= want || !self.delete_oldest("keep-free") {
                    break;
                }
            }
        }
    }
}

/// Whether `path` holds from `from` to `len` nothing but whole pcapng blocks that are not
/// packets (the interface statistics a closed file ends with), in either byte order.
pub fn only_stats_after(path: &Path, from: u64, len: u64) -> bool {
    const MAX_TAIL: u64 = 64 << 10;
    if len <= from || len - from > MAX_TAIL {
        return false;
    }
    let mut tail = vec![0u8; (len - from) as usize];
    let read = File::open(path).and_then(|f| f.read_exact_at(&mut tail, from));
    if read.is_err() {
        return false;
    }
    let word = |b: &[u8], le: bool| {
        let w = [b[0], b[1], b[2], b[3]];
        if le {
            u32::from_le_bytes(w)
        } else {
            u32::from_be_bytes(w)
        }
    };
    [true, false].into_iter().any(|le| {
        let mut at = 0usize;
        while at + 12 <= tail.len() {
            let (kind, n) = (word(&tail[at..], le), word(&tail[at + 4..], le) as usize);
            // Not a packet (EPB 6, SPB 3, PB 2) nor a new section.
            let packet = matches!(kind, 2 | 3 | 6 | 0x0A0D_0D0A);
            if packet || n < 12 || n % 4 != 0 || at + n > tail.len() {
                return false;
            }
            if word(&tail[at + n - 4..], le) as usize != n {
                return false;
            }
            at += n;
        }
        at == tail.len()
    })
}

fn file_len(p: &Path) -> u64 {
    std::fs::symlink_metadata(p).map_or(0, |m| m.len())
}

/// A capture file being written: records gathered in a large aligned buffer, written in
/// aligned chunks (O_DIRECT) or whole (buffered).
pub struct DiskOut {
    file: File,
    /// The same file without O_DIRECT, for the last partial block.
    plain: Option<File>,
    buf: Vec<u8>,
    /// Offset of the aligned start in `buf`.
    start: usize,
    used: usize,
    /// Bytes of the file written by chunk writes (the file offset of `buf[start]`).
    on_disk: u64,
    direct: bool,
    /// End offsets of the packets' records not yet known to be in the file (from `done` on).
    ends: Vec<u64>,
    done: usize,
    /// Bytes known to be in the file (chunks, and the tail at the last sync).
    durable: u64,
}

impl DiskOut {
    /// Creates `path` (never through a symlink, never over a file).
    fn create(path: &Path, direct: bool) -> io::Result<DiskOut> {
        let open = |flags: i32| {
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o640)
                .custom_flags(libc::O_NOFOLLOW | flags)
                .open(path)
        };
        let (file, direct) = if direct {
            match open(libc::O_DIRECT) {
                Ok(f) => (f, true),
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                    let _ = std::fs::remove_file(path);
                    (open(0)?, false)
                }
                Err(e) => return Err(e),
            }
        } else {
            (open(0)?, false)
        };
        let plain = if direct {
            Some(
                std::fs::OpenOptions::new()
                    .write(true)
                    .custom_flags(libc::O_NOFOLLOW)
                    .open(path)?,
            )
        } else {
            None
        };
        let buf = vec![0u8; WRITE_CHUNK + ALIGN];
        let start = buf.as_ptr().align_offset(ALIGN).min(ALIGN);
        Ok(DiskOut {
            file,
            plain,
            buf,
            start,
            used: 0,
            on_disk: 0,
            direct,
            ends: Vec::with_capacity(1 << 16),
            done: 0,
            durable: 0,
        })
    }

    /// Bytes of the file so far (written or gathered).
    pub fn pos(&self) -> u64 {
        self.on_disk + self.used as u64
    }

    /// Notes that a packet's record ends at `end`.
    #[inline]
    fn mark(&mut self, end: u64) {
        self.ends.push(end);
    }

    /// Packets whose records reached the file since the last call.
    fn confirmed(&mut self) -> u64 {
        let durable = self.durable.max(self.on_disk);
        let from = self.done;
        while self.done < self.ends.len() && self.ends[self.done] <= durable {
            self.done += 1;
        }
        let n = (self.done - from) as u64;
        if self.done == self.ends.len() {
            self.ends.clear();
            self.done = 0;
        }
        n
    }

    /// Packets written to the buffer and not (yet) in the file.
    fn pending(&self) -> u64 {
        (self.ends.len() - self.done) as u64
    }

    /// Writes what a chunk write can: whole aligned blocks (O_DIRECT) or everything.
    fn drain(&mut self) -> io::Result<()> {
        let n = if self.direct {
            self.used / ALIGN * ALIGN
        } else {
            self.used
        };
        let mut done = 0;
        let mut res = Ok(());
        while done < n {
            let at = self.on_disk + done as u64;
            match self
                .file
                .write_at(&self.buf[self.start + done..self.start + n], at)
            {
                Ok(0) => {
                    res = Err(io::Error::from(io::ErrorKind::WriteZero));
                    break;
                }
                Ok(k) => done += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) && self.plain.is_some() => {
                    // The file system took O_DIRECT at open but not in write: buffered from
                    // here on, through the plain descriptor.
                    if let Some(p) = self.plain.take() {
                        self.file = p;
                    }
                    self.direct = false;
                }
                Err(e) => {
                    res = Err(e);
                    break;
                }
            }
        }
        if done > 0 {
            self.buf
                .copy_within(self.start + done..self.start + self.used, self.start);
            self.used -= done;
            self.on_disk += done as u64;
            if self.direct && !done.is_multiple_of(ALIGN) {
                // A short write left the file unaligned: buffered from here on.
                self.direct = false;
            }
        }
        res
    }

    /// Makes every gathered byte reach the file (the partial last block through the plain
    /// descriptor; a later chunk write covers it again).
    fn sync_tail(&mut self) -> io::Result<()> {
        self.drain()?;
        if self.used > 0 {
            if let Some(p) = &self.plain {
                p.write_all_at(&self.buf[self.start..self.start + self.used], self.on_disk)?;
            }
        }
        self.durable = self.pos();
        Ok(())
    }

    /// Writes everything (the partial last block through the plain descriptor).
    fn close(&mut self) -> io::Result<u64> {
        self.sync_tail()?;
        let end = self.pos();
        if self.direct && self.used > 0 {
            // Past the aligned chunks, the file is the tail's plain write.
            self.on_disk = end;
            self.used = 0;
        }
        Ok(end)
    }
}

impl Write for DiskOut {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let room = crate::port::file::RecordWrite::record(self, data.len())?;
        room.copy_from_slice(data);
        Ok(data.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        self.drain()
    }
}

impl crate::port::file::RecordWrite for DiskOut {
    #[inline]
    fn record(&mut self, len: usize) -> io::Result<&mut [u8]> {
        if self.used + len > WRITE_CHUNK {
            self.drain()?;
            if self.used + len > WRITE_CHUNK {
                return Err(io::Error::other("a record larger than the write buffer"));
            }
        }
        let at = self.start + self.used;
        self.used += len;
        Ok(&mut self.buf[at..at + len])
    }
}

enum Sink {
    Pcap(PcapWriter<DiskOut>),
    Ng(PcapNgWriter<DiskOut>),
}

impl Sink {
    fn out(&mut self) -> &mut DiskOut {
        match self {
            Sink::Pcap(w) => w.get_mut(),
            Sink::Ng(w) => w.get_mut(),
        }
    }
}

/// The file a writer has open.
struct Open {
    path: PathBuf,
    sink: Sink,
    index: IndexWriter,
}

/// One writer: reads its port, writes its files.
pub struct Writer {
    id: usize,
    shared: Arc<Shared>,
    counters: Arc<WriterCounters>,
    link: LinkType,
    name: String,
    writers: u64,
    open: Option<Open>,
    last_name: String,
    last_sync: Instant,
    /// When a failed write may be tried again.
    retry_at: Option<Instant>,
    /// Whether a failure was reported and not yet cleared.
    failing: bool,
    /// Bytes written since the counters were last updated.
    pending_bytes: u64,
    /// `-G` in nanoseconds (0: off).
    rotate_ns: u64,
    /// Capture time at which the current `-G` window ends (`u64::MAX`: never; 0: the next
    /// packet starts one).
    deadline: u64,
    /// The open file's first packet time, and the latest packet time seen.
    file_first: u64,
    last_ts: u64,
    /// When the latest packet was taken: an idle writer's capture clock runs on from it.
    last_at: Instant,
    /// Packets taken from the input, packets of them dropped (disk_full), packets the kernel
    /// dropped, since the start: and their values when the last file closed (the open file's
    /// statistics, pcapng's interface statistics block, are the differences).
    seen: u64,
    lost: u64,
    kernel: u64,
    mark: (u64, u64, u64),
}

impl Writer {
    /// Writer `id` of `writers` for packets of `link` from the port named `name`.
    pub fn new(
        id: usize,
        writers: usize,
        shared: Arc<Shared>,
        link: LinkType,
        name: &str,
    ) -> Writer {
        Writer {
            id,
            shared,
            counters: Arc::new(WriterCounters::default()),
            link,
            name: name.to_string(),
            writers: writers as u64,
            open: None,
            last_name: String::new(),
            last_sync: Instant::now(),
            retry_at: None,
            failing: false,
            pending_bytes: 0,
            rotate_ns: 0,
            deadline: u64::MAX,
            file_first: 0,
            last_ts: 0,
            last_at: Instant::now(),
            seen: 0,
            lost: 0,
            kernel: 0,
            mark: (0, 0, 0),
        }
        .with_rotation()
    }

    fn with_rotation(mut self) -> Writer {
        self.rotate_ns = self
            .shared
            .opts
            .rotate_secs
            .map_or(0, |s| s.saturating_mul(1_000_000_000));
        // Off: never; on: the first packet starts a window.
        self.deadline = if self.rotate_ns == 0 { u64::MAX } else { 0 };
        self
    }

    /// The capture clock now: the latest packet's time, run on by the time since it came.
    fn capture_now(&self, now: Instant) -> u64 {
        let idle = now.saturating_duration_since(self.last_at).as_nanos();
        self.last_ts
            .saturating_add(u64::try_from(idle).unwrap_or(u64::MAX))
    }

    /// tcpdump's `-G` on an idle writer: the open file closes once its window has passed on
    /// the capture clock; the next file opens with the next packet (no file without packets).
    pub fn rotate_if_idle(&mut self, now: Instant) {
        if self.open.is_some() && self.capture_now(now) >= self.deadline {
            self.close_file();
            self.deadline = 0;
        }
    }

    /// Its counters.
    pub fn counters(&self) -> Arc<WriterCounters> {
        self.counters.clone()
    }

    fn new_name(&mut self) -> PathBuf {
        let ext = match self.shared.opts.format {
            WriteFormat::Pcap => "pcap",
            WriteFormat::PcapNg => "pcapng",
        };
        let mut ns = crate::time::wall_ns();
        loop {
            let n = format!("{}-w{}.{ext}", utc_stamp(ns), self.id);
            // Names order files in time: never reuse or go back.
            if n > self.last_name {
                self.last_name = n.clone();
                return self.shared.opts.dir.join(n);
            }
            ns += 1000;
        }
    }

    fn open_file(&mut self) -> io::Result<()> {
        self.shared.enforce(self.writers);
        let path = self.new_name();
        let direct = self.shared.opts.direct && !self.shared.no_direct.load(Ordering::Relaxed);
        let out = DiskOut::create(&path, direct)?;
        if direct && !out.direct {
            self.shared.no_direct.store(true, Ordering::Relaxed);
            self.shared.note(format!(
                "{}: the file system refuses O_DIRECT: buffered writes",
                self.shared.opts.dir.display()
            ));
        }
        let snap = self.shared.opts.snaplen;
        let sink = match self.shared.opts.format {
            WriteFormat::Pcap => Sink::Pcap(PcapWriter::with_precision(
                out,
                self.link,
                snap,
                Precision::Nano,
            )?),
            WriteFormat::PcapNg => {
                let mut w = PcapNgWriter::new(out, self.link, snap)?;
                w.describe(&[Interface::new(&self.name, self.link)])?;
                Sink::Ng(w)
            }
        };
        self.counters.files.fetch_add(1, Ordering::Relaxed);
        self.open = Some(Open {
            path,
            sink,
            index: IndexWriter::new(self.link),
        });
        Ok(())
    }

    /// What the writer's input did over the open file's life: packets taken (`accepted`: those
    /// written), dropped by the kernel (`kernel`) and for want of disk (`ring_full`, named
    /// `disk_full`), from its first packet to now on the capture clock.
    fn file_stats(&mut self) -> crate::port::InterfaceStats {
        use crate::port::DropReason;
        let (seen, lost, kernel) = (self.seen, self.lost, self.kernel);
        let (s0, l0, k0) = std::mem::replace(&mut self.mark, (seen, lost, kernel));
        let lost = lost.saturating_sub(l0);
        let mut drops = crate::stats::Drops::default();
        drops.add(DropReason::Kernel, kernel.saturating_sub(k0));
        drops.add(DropReason::RingFull, lost);
        let end = self.capture_now(Instant::now()).max(self.file_first);
        crate::port::InterfaceStats {
            start_ns: self.file_first.max(1),
            end_ns: end.max(1),
            accepted: seen.saturating_sub(s0).saturating_sub(lost),
            drops,
        }
    }

    /// Closes the open file: every byte written (in pcapng, an interface statistics block
    /// last, as dumpcap's), the index saved.
    pub fn close_file(&mut self) {
        let Some(mut o) = self.open.take() else {
            return;
        };
        let stats = self.file_stats();
        if let Sink::Ng(w) = &mut o.sink {
            let names = [(crate::port::DropReason::RingFull, "disk_full")];
            if let Err(e) = w.write_stats_named(&[stats], &names) {
                self.shared.note(format!(
                    "{}: interface statistics not written: {e}",
                    o.path.display()
                ));
            }
        }
        let out = o.sink.out();
        loop {
            match out.close() {
                Ok(_) => break,
                // Room made by the disk policy: write the rest.
                Err(e) if is_space_error(&e) && self.shared.delete_oldest("disk full") => {}
                Err(e) => {
                    self.shared.note(format!(
                        "{}: {e}: its last {} packets dropped (disk_full)",
                        o.path.display(),
                        out.pending()
                    ));
                    break;
                }
            }
        }
        let ok = out.confirmed();
        let lost = out.pending();
        self.counters.written.fetch_add(ok, Ordering::Relaxed);
        self.counters
            .dropped_disk_full
            .fetch_add(lost, Ordering::Relaxed);
        let idx = o.index.finish();
        if let Err(e) = idx.save(&o.path) {
            self.shared.note(format!("index not written: {e}"));
        }
        let n = file_len(&o.path) + file_len(&index_path(&o.path));
        self.shared.add_closed(o.path, n);
        self.shared.enforce(self.writers.saturating_sub(1));
    }

    /// Writes one packet; false when it was dropped (nothing could be written).
    #[inline]
    fn put(&mut self, ts: u64, data: &[u8], wire_len: u32, now: Instant) -> bool {
        if let Some(t) = self.retry_at {
            if now < t {
                return false;
            }
            self.retry_at = None;
        }
        for attempt in 0..3 {
            match self.try_put(ts, data, wire_len) {
                Ok(()) => {
                    if self.failing {
                        self.failing = false;
                        self.shared
                            .note(format!("writer {}: writing again", self.id));
                    }
                    return true;
                }
                Err(e) => {
                    // Room made by the disk policy, then try again; else drop for a while.
                    if attempt < 2 && is_space_error(&e) && self.shared.delete_oldest("disk full") {
                        continue;
                    }
                    if !self.failing {
                        self.failing = true;
                        self.shared.note(format!(
                            "writer {}: {e}: packets dropped (disk_full) until a write succeeds",
                            self.id
                        ));
                    }
                    if self.open.as_ref().is_some_and(|o| o.index.packets() == 0) {
                        // The file could not even take its header: start another later.
                        if let Some(o) = self.open.take() {
                            let _ = std::fs::remove_file(&o.path);
                        }
                    }
                    self.retry_at = Some(now + Duration::from_millis(100));
                    return false;
                }
            }
        }
        false
    }

    fn try_put(&mut self, ts: u64, data: &[u8], wire_len: u32) -> io::Result<()> {
        let snap = (self.shared.opts.snaplen as usize).max(1);
        let cap = data.len().min(snap);
        let rec = match self.shared.opts.format {
            WriteFormat::Pcap => 16 + cap as u64,
            WriteFormat::PcapNg => 32 + (cap as u64).div_ceil(4) * 4 + 4,
        };
        let full = self.open.as_mut().is_some_and(|o| {
            o.index.packets() > 0
                && (o.sink.out().pos() + rec > self.shared.opts.file_size || ts >= self.deadline)
        });
        if full {
            self.close_file();
        }
        if self.open.is_none() {
            self.open_file()?;
            self.file_first = ts;
            if ts >= self.deadline {
                // A new -G window from this packet (a file cut by size keeps its window, as
                // tcpdump's -C within -G).
                self.deadline = ts.saturating_add(self.rotate_ns);
            }
        }
        let Some(o) = self.open.as_mut() else {
            return Err(io::Error::other("no file open"));
        };
        let at = o.sink.out().pos();
        match &mut o.sink {
            Sink::Pcap(w) => w.write_packet(ts, &data[..cap], wire_len)?,
            Sink::Ng(w) => w.write_packet(0, ts, &data[..cap], wire_len)?,
        }
        let out = o.sink.out();
        let end = out.pos();
        out.mark(end);
        o.index.on_packet(at, end - at, ts, &data[..cap]);
        // Counted once per batch (write_batch): no atomic per packet.
        self.pending_bytes += end - at;
        Ok(())
    }

    /// Makes the open file's data and index reach the disk (queries see them).
    pub fn sync(&mut self) {
        self.last_sync = Instant::now();
        let Some(o) = self.open.as_mut() else {
            return;
        };
        let r = o.sink.out().sync_tail();
        let n = o.sink.out().confirmed();
        self.counters.written.fetch_add(n, Ordering::Relaxed);
        if let Err(e) = r {
            if !self.failing {
                self.shared
                    .note(format!("{}: write failed: {e}", o.path.display()));
            }
            return;
        }
        if let Err(e) = o.index.snapshot().save(&o.path) {
            self.shared.note(format!("index not written: {e}"));
        }
    }

    /// Writes the packets of `batch` (left as it is).
    pub fn write_batch(&mut self, batch: &Batch) {
        let now = Instant::now();
        let mut dropped = 0;
        for p in batch.iter() {
            let ts = p.desc.ts;
            self.last_ts = self.last_ts.max(ts);
            if !self.put(ts, p.data, p.desc.wire_len, now) {
                dropped += 1;
                self.lost += 1;
            }
            // Counted after: a packet that opened a file is that file's.
            self.seen += 1;
        }
        self.last_at = now;
        let confirmed = self.open.as_mut().map_or(0, |o| o.sink.out().confirmed());
        let c = &self.counters;
        c.received.fetch_add(batch.len() as u64, Ordering::Relaxed);
        c.written.fetch_add(confirmed, Ordering::Relaxed);
        c.dropped_disk_full.fetch_add(dropped, Ordering::Relaxed);
        c.bytes
            .fetch_add(std::mem::take(&mut self.pending_bytes), Ordering::Relaxed);
        if now.duration_since(self.last_sync) >= self.shared.opts.sync_every {
            self.sync();
        }
    }

    /// Reads `port` and writes its packets until `stop`, the port's end, or the recorder's
    /// count; then closes the file.
    pub fn run(
        &mut self,
        port: &mut dyn Port,
        stop: &AtomicBool,
    ) -> Result<(), crate::port::PortError> {
        let mut batch = Batch::new();
        let kernel0 = port.stats().rx_drops.get(crate::port::DropReason::Kernel);
        let mut res = Ok(());
        let mut last_stats = Instant::now();
        loop {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            if let Some(c) = self.shared.opts.count {
                if self.shared.total.load(Ordering::Relaxed) >= c {
                    break;
                }
            }
            match port.rx(&mut batch) {
                Ok(0) => {
                    if port.is_finished() {
                        break;
                    }
                    if self.rotate_ns != 0 {
                        self.rotate_if_idle(Instant::now());
                    }
                    if self.last_sync.elapsed() >= self.shared.opts.sync_every {
                        self.sync();
                    }
                }
                Ok(_) => {
                    if let Some(c) = self.shared.opts.count {
                        // Never more than the count, across writers: each takes its share.
                        let n = batch.len() as u64;
                        let before = self.shared.total.fetch_add(n, Ordering::Relaxed);
                        let left = c.saturating_sub(before);
                        if (batch.len() as u64) > left {
                            // Packets past the count are not this run's (tcpdump's -c).
                            let mut n = 0u64;
                            batch.retain(|_| {
                                n += 1;
                                n <= left
                            });
                        }
                    }
                    self.write_batch(&batch);
                    batch.clear();
                }
                Err(e) => {
                    res = Err(e);
                    break;
                }
            }
            if last_stats.elapsed() >= Duration::from_millis(500) {
                last_stats = Instant::now();
                let k = port.stats().rx_drops.get(crate::port::DropReason::Kernel);
                self.kernel = k.saturating_sub(kernel0);
                self.counters
                    .dropped_kernel
                    .store(self.kernel, Ordering::Relaxed);
            }
        }
        let k = port.stats().rx_drops.get(crate::port::DropReason::Kernel);
        self.kernel = k.saturating_sub(kernel0);
        self.counters
            .dropped_kernel
            .store(self.kernel, Ordering::Relaxed);
        self.close_file();
        res
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_and_names() {
        assert_eq!(utc_stamp(0), "19700101T000000.000000Z");
        assert_eq!(
            utc_stamp(1_795_795_262_123_456_789),
            "20261127T160102.123456Z"
        );
        assert!(is_capture_name("20261127T160102.123456Z-w0.pcap"));
        assert!(is_capture_name("20261127T160102.123456Z-w12.pcapng"));
        assert!(!is_capture_name("20261127T160102.123456Z-w0.pcap.idx"));
        assert!(!is_capture_name("notes.pcap"));
    }
}

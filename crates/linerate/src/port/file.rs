//! Files the tools write (captures, flow records): created without truncating an input or
//! following a link another user planted, and written so that they always end on a whole
//! record.
//!
//! [`create`] opens an output for writing. It never truncates a file that is one of the run's
//! [`Inputs`] (same device and inode, whatever path or link leads to it): that is refused before
//! anything is cut. It follows a symbolic link only where the kernel's `fs.protected_symlinks`
//! would (not every machine turns that on): a link in a directory that is sticky and writable
//! by all (`/tmp`, `/dev/shm`) is followed only when it belongs to us or to the directory's
//! owner. A link a user made on purpose elsewhere (`out.pcap -> /data/run1.pcap`) is followed,
//! as the shell's `>` would. An existing regular file in such a directory that belongs to
//! another user is refused too (`fs.protected_regular`), so a planted file cannot receive our
//! packets.
//!
//! [`RecordFile`] buffers whole records: every `write` (or `write_vectored`) call is one record,
//! and the file only ever receives whole calls. A write error on a regular file cuts it back to
//! its last whole record. [`seal_all`] is for a forced stop: it waits (a bounded time) for
//! writes in progress to end and then keeps every output from receiving more, so a process that
//! exits right after leaves whole records only. SIGKILL cannot be handled: it can stop one
//! `write` of many pages between two of them, so a killed process's file may end on a cut
//! record (every one before it whole).

use std::fs::{File, Metadata, OpenOptions};
use std::io::{self, IoSlice, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use crate::mem::Pool;

/// A file's identity: its device and inode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FileId {
    /// Device.
    pub dev: u64,
    /// Inode.
    pub ino: u64,
}

impl FileId {
    /// The identity of the file `path` leads to (links followed), if it exists.
    pub fn of(path: &Path) -> Option<FileId> {
        std::fs::metadata(path).ok().map(|m| FileId::from_meta(&m))
    }

    fn from_meta(m: &Metadata) -> FileId {
        FileId {
            dev: m.dev(),
            ino: m.ino(),
        }
    }
}

/// The files a run reads (captures, scripts): outputs must never be one of them.
#[derive(Clone, Debug, Default)]
pub struct Inputs {
    files: Vec<(FileId, String)>,
}

impl Inputs {
    /// Adds the file `path` leads to, if it exists; `-` adds the file standard input reads, when
    /// it is redirected from one (`< in.pcap`: fstat(0)'s device and inode), so that no output
    /// or rotation name can truncate what is being read.
    pub fn add_path(&mut self, path: &str) {
        if path == "-" {
            if let Some(id) = stdin_id() {
                self.add(id, "- (standard input)");
            }
            return;
        }
        if let Some(id) = FileId::of(Path::new(path)) {
            self.add(id, path);
        }
    }

    /// Adds a file by identity; `name` names it in messages.
    pub fn add(&mut self, id: FileId, name: &str) {
        if self.find(id).is_none() {
            self.files.push((id, name.to_string()));
        }
    }

    /// The name of the input with identity `id`, if it is one.
    pub fn find(&self, id: FileId) -> Option<&str> {
        self.files
            .iter()
            .find(|(f, _)| *f == id)
            .map(|(_, n)| n.as_str())
    }

    /// Whether no file is listed.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }
}

/// The identity of the file standard input reads, if it is a file (not a pipe or a terminal).
fn stdin_id() -> Option<FileId> {
    use std::os::fd::AsFd;
    let fd = io::stdin().as_fd().try_clone_to_owned().ok()?;
    let m = File::from(fd).metadata().ok()?;
    m.file_type().is_file().then(|| FileId::from_meta(&m))
}

/// Why an output file was not opened.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// The output is one of the inputs.
    #[error("{path} is the input {input} (the same file): refusing to overwrite an input; write to another file")]
    IsInput {
        /// The output asked for.
        path: String,
        /// The input it is.
        input: String,
    },
    /// The output is a link another user made in a shared directory.
    #[error("{path} is a link made by uid {owner} in {dir}, a directory every user can write to: refusing to follow it (remove it or write elsewhere)")]
    PlantedLink {
        /// The output asked for.
        path: String,
        /// The link's owner.
        owner: u32,
        /// Its directory.
        dir: String,
    },
    /// The output exists in a shared directory and belongs to another user.
    #[error("{path} belongs to uid {owner} in {dir}, a directory every user can write to: refusing to write into another user's file (remove it or write elsewhere)")]
    NotOurs {
        /// The output asked for.
        path: String,
        /// The file's owner.
        owner: u32,
        /// Its directory.
        dir: String,
    },
    /// The file could not be opened.
    #[error("{path}: {source}")]
    Io {
        /// The output asked for.
        path: String,
        /// The error.
        #[source]
        source: io::Error,
    },
}

impl FileError {
    /// The OS error, if that is what it is.
    pub fn io_kind(&self) -> Option<io::ErrorKind> {
        match self {
            FileError::Io { source, .. } => Some(source.kind()),
            _ => None,
        }
    }
}

/// The directory holding `path`, with its metadata, when it is sticky and writable by all.
fn shared_dir(path: &Path) -> Option<(String, Metadata)> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let m = std::fs::metadata(dir).ok()?;
    let mode = m.mode();
    (mode & 0o1000 != 0 && mode & 0o002 != 0).then(|| (dir.display().to_string(), m))
}

/// Opens `path` for writing, creating it, and truncates it, unless it is one of `inputs`, a
/// link or file another user planted in a shared directory (see the module's documentation).
/// Nothing is truncated before every check passed. FIFOs and devices are opened as they are.
pub fn create(path: &str, inputs: &Inputs) -> Result<File, FileError> {
    let (f, _) = open_checked(path, inputs)?;
    if f.metadata()
        .map_err(|source| FileError::Io {
            path: path.to_string(),
            source,
        })?
        .file_type()
        .is_file()
    {
        f.set_len(0).map_err(|source| FileError::Io {
            path: path.to_string(),
            source,
        })?;
    }
    Ok(f)
}

/// An output opened and checked as [`create`] does, but not truncated: what it held stays
/// byte for byte until the run starts writing ([`RecordFile::deferred`], [`start_writing`]).
pub struct Checked {
    file: File,
    path: String,
    /// Whether this open created the file (it is removed again if the run never starts).
    created: bool,
}

/// [`create`] without the truncation: every check, and the file opened (created when it did not
/// exist), its bytes left as they are. A [`RecordFile::deferred`] over it truncates it when
/// writing starts, so that a usage error found after the outputs were opened leaves an
/// existing file as it was.
pub fn open_deferred(path: &str, inputs: &Inputs) -> Result<Checked, FileError> {
    let (file, created) = open_checked(path, inputs)?;
    Ok(Checked {
        file,
        path: path.to_string(),
        created,
    })
}

/// Opens `path` for writing after every check of [`create`]; whether it was created now.
fn open_checked(path: &str, inputs: &Inputs) -> Result<(File, bool), FileError> {
    let p = Path::new(path);
    let io = |source| FileError::Io {
        path: path.to_string(),
        source,
    };
    // A new file first: then nothing existed to check or to keep (O_EXCL fails on any link).
    match OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(p)
    {
        Ok(f) => return Ok((f, true)),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        // EACCES on a sticky directory's link, say: the checks below say why.
        Err(_) => {}
    }
    let open = |follow: bool| {
        let mut o = OpenOptions::new();
        o.write(true).create(true);
        if !follow {
            o.custom_flags(libc::O_NOFOLLOW);
        }
        o.open(p)
    };
    let me = super::sys::euid();
    let f = match open(false) {
        Ok(f) => f,
        // O_NOFOLLOW on a link: ELOOP, or EACCES with O_CREAT in a sticky directory.
        Err(e) if matches!(e.raw_os_error(), Some(libc::ELOOP) | Some(libc::EACCES)) => {
            let link = match std::fs::symlink_metadata(p) {
                Ok(m) if m.file_type().is_symlink() => m,
                _ => return Err(io(e)),
            };
            if let Some((dir, dm)) = shared_dir(p) {
                if link.uid() != me && link.uid() != dm.uid() {
                    return Err(FileError::PlantedLink {
                        path: path.to_string(),
                        owner: link.uid(),
                        dir,
                    });
                }
            }
            open(true).map_err(io)?
        }
        Err(e) => return Err(io(e)),
    };
    let m = f.metadata().map_err(io)?;
    if let Some(input) = inputs.find(FileId::from_meta(&m)) {
        return Err(FileError::IsInput {
            path: path.to_string(),
            input: input.to_string(),
        });
    }
    if m.file_type().is_file() && m.uid() != me {
        if let Some((dir, dm)) = shared_dir(p) {
            if m.uid() != dm.uid() {
                return Err(FileError::NotOurs {
                    path: path.to_string(),
                    owner: m.uid(),
                    dir,
                });
            }
        }
    }
    Ok((f, false))
}

/// Set once the run has started writing its outputs ([`start_writing`]).
static STARTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The run starts: every flag is valid and every input open. Each deferred output
/// ([`RecordFile::deferred`], [`RecordFile::stdout_deferred`]) is truncated now and receives
/// what was written to it so far (a capture file's header), at once. A deferred output that is
/// dropped before this (a usage error) leaves its file as it was (one this run created is
/// removed). A deferred output is also started by its own first flush or full buffer.
pub fn start_writing() {
    STARTED.store(true, Ordering::SeqCst);
    let list: Vec<Arc<Shared>> = {
        let v = OPEN.lock().unwrap_or_else(|e| e.into_inner());
        v.iter().filter_map(Weak::upgrade).collect()
    };
    for s in list {
        let mut d = s.dst.lock().unwrap_or_else(|e| e.into_inner());
        let _ = d.release();
    }
}

/// Whether [`start_writing`] was called.
pub fn writing_started() -> bool {
    STARTED.load(Ordering::SeqCst)
}

enum Dst {
    File(File),
    Stdout(io::Stdout),
    /// A deferred output before the run starts: the file untouched (its records wait in the
    /// [`RecordFile`]'s buffer).
    Held {
        to: Box<Dst>,
        /// The file, when this run created it (removed if the run never starts).
        created: Option<(String, FileId)>,
        /// Whether it is a regular file (truncated when released).
        regular: bool,
    },
}

impl Dst {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        match self {
            Dst::File(f) => f.write(b),
            Dst::Stdout(s) => s.write(b),
            Dst::Held { .. } => {
                self.release()?;
                self.write(b)
            }
        }
    }
    fn write_vectored(&mut self, b: &[IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Dst::File(f) => f.write_vectored(b),
            Dst::Stdout(s) => s.write_vectored(b),
            Dst::Held { .. } => {
                self.release()?;
                self.write_vectored(b)
            }
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Dst::File(f) => f.flush(),
            Dst::Stdout(s) => s.flush(),
            Dst::Held { .. } => {
                self.release()?;
                self.flush()
            }
        }
    }
    /// A held output: truncated (a regular file) and written straight from now on.
    fn release(&mut self) -> io::Result<()> {
        let Dst::Held { to, regular, .. } = self else {
            return Ok(());
        };
        let to = std::mem::replace(&mut **to, Dst::Stdout(io::stdout()));
        let truncate = *regular;
        *self = to;
        if truncate {
            if let Dst::File(f) = &*self {
                f.set_len(0)?;
            }
        }
        Ok(())
    }
}

/// What a forced stop needs of an open output.
struct Shared {
    dst: Mutex<Dst>,
    /// Bytes of whole records in the file.
    committed: AtomicU64,
    /// A second handle on a regular file, to cut it back to `committed`.
    cut: Option<File>,
}

/// Outputs open now, for [`seal_all`].
static OPEN: Mutex<Vec<Weak<Shared>>> = Mutex::new(Vec::new());

fn register(s: &Arc<Shared>) {
    let mut v = OPEN.lock().unwrap_or_else(|e| e.into_inner());
    v.retain(|w| w.strong_count() > 0);
    v.push(Arc::downgrade(s));
}

/// A buffered output whose destination only ever receives whole records: every `write` or
/// `write_vectored` call is taken whole as one record (the buffer grows for a record larger than
/// it), and only whole records are written out.
pub struct RecordFile {
    /// Allocated once (zeroed, `cap` bytes, more for a larger record); `buf[..used]` is
    /// buffered.
    buf: Vec<u8>,
    used: usize,
    /// `cap` while writes succeed, 0 once one failed.
    room: usize,
    /// End offset in `buf` of each buffered record.
    ends: Vec<usize>,
    cap: usize,
    shared: Arc<Shared>,
    /// Records written out whole.
    records: u64,
    failed: Option<io::ErrorKind>,
    /// Set once a deferred output was released (always set for the others).
    started: bool,
    /// Runs of records taken in place ([`RecordWrite::record_run`]), in order, waiting to be
    /// written straight from `run_map` with writev. Never both these and buffered bytes: each
    /// kind is written out before the other is taken (`room` is 0 while runs wait, so that
    /// [`RecordWrite::record`] takes its slow path, which writes them out first).
    runs: Box<Runs>,
}

/// [`RecordFile`]'s runs waiting to be written (boxed: the writer stays small).
struct Runs {
    list: Vec<Run>,
    /// The read-only mapping the runs lie in (kept mapped until they are written).
    map: Option<Arc<Pool>>,
    /// Bytes of the runs.
    bytes: usize,
    /// How many whole records, of how many bytes, a prefix of a run holds (a write cut short).
    whole: fn(&[u8]) -> (u64, usize),
}

/// Records back to back in a read-only mapping: bytes `[start, end)`, `records` of them.
#[derive(Clone, Copy, Debug)]
struct Run {
    start: usize,
    end: usize,
    records: u64,
}

/// Most runs one writev takes (Linux's IOV_MAX).
const MAX_RUNS: usize = 1024;

impl RecordFile {
    /// Buffers up to `cap` bytes for `file`.
    pub fn new(file: File, cap: usize) -> RecordFile {
        let cut = file
            .metadata()
            .ok()
            .filter(|m| m.file_type().is_file())
            .and_then(|_| file.try_clone().ok());
        Self::with(Dst::File(file), cut, cap)
    }

    /// Buffers up to `cap` bytes for standard output.
    pub fn stdout(cap: usize) -> RecordFile {
        Self::with(Dst::Stdout(io::stdout()), None, cap)
    }

    /// Buffers up to `cap` bytes for a file [`open_deferred`] checked: nothing reaches it (it
    /// is not truncated) before the run starts writing ([`start_writing`], or this output's
    /// first flush or full buffer); dropped before that, it is left as it was (removed if this
    /// run created it).
    pub fn deferred(c: Checked, cap: usize) -> RecordFile {
        let regular = c
            .file
            .metadata()
            .ok()
            .is_some_and(|m| m.file_type().is_file());
        let cut = if regular {
            c.file.try_clone().ok()
        } else {
            None
        };
        let created = if c.created {
            c.file
                .metadata()
                .ok()
                .map(|m| (c.path.clone(), FileId::from_meta(&m)))
        } else {
            None
        };
        let dst = Dst::Held {
            to: Box::new(Dst::File(c.file)),
            created,
            regular,
        };
        let mut r = Self::with(dst, cut, cap);
        if writing_started() {
            let _ = r.release();
        }
        r
    }

    /// Standard output, deferred as [`RecordFile::deferred`] is: nothing is written to it
    /// before the run starts.
    pub fn stdout_deferred(cap: usize) -> RecordFile {
        let dst = Dst::Held {
            to: Box::new(Dst::Stdout(io::stdout())),
            created: None,
            regular: false,
        };
        let mut r = Self::with(dst, None, cap);
        if writing_started() {
            let _ = r.release();
        }
        r
    }

    /// A deferred output starts now: truncated, and what was written to it so far goes out.
    pub fn release(&mut self) -> io::Result<()> {
        self.started = true;
        self.shared
            .dst
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .release()?;
        self.flush()
    }

    /// [`RecordFile::release`] unless this output started already: what a writer calls when
    /// its first packet comes (the run has started).
    #[inline]
    pub fn start(&mut self) -> io::Result<()> {
        if self.started {
            return Ok(());
        }
        self.release()
    }

    /// Bytes written to the destination so far, buffered ones included (a file's size once
    /// flushed).
    pub fn position(&self) -> u64 {
        self.shared.committed.load(Ordering::Relaxed) + (self.used + self.runs.bytes) as u64
    }

    fn with(dst: Dst, cut: Option<File>, cap: usize) -> RecordFile {
        let started = !matches!(dst, Dst::Held { .. });
        let shared = Arc::new(Shared {
            dst: Mutex::new(dst),
            committed: AtomicU64::new(0),
            cut,
        });
        register(&shared);
        let cap = cap.max(1);
        RecordFile {
            buf: vec![0; cap],
            used: 0,
            room: cap,
            ends: Vec::new(),
            cap,
            shared,
            records: 0,
            failed: None,
            started,
            runs: Box::new(Runs {
                list: Vec::new(),
                map: None,
                bytes: 0,
                whole: |_| (0, 0),
            }),
        }
    }

    /// Records written out whole so far (not counting those still buffered).
    pub fn records_written(&self) -> u64 {
        self.records
    }

    /// Records buffered, not yet written.
    pub fn records_buffered(&self) -> u64 {
        self.ends.len() as u64 + self.runs.list.iter().map(|r| r.records).sum::<u64>()
    }

    /// Writes out the buffered records (or the waiting runs).
    fn commit(&mut self) -> io::Result<()> {
        if let Some(k) = self.failed {
            return Err(io::Error::new(k, "an earlier write failed"));
        }
        if !self.runs.list.is_empty() {
            return self.commit_runs();
        }
        if self.used == 0 {
            return Ok(());
        }
        let mut dst = self.shared.dst.lock().unwrap_or_else(|e| e.into_inner());
        let mut done = 0usize;
        let mut err = None;
        let out = &self.buf[..self.used];
        while done < out.len() {
            match dst.write(&out[done..]) {
                Ok(0) => {
                    err = Some(io::Error::from(io::ErrorKind::WriteZero));
                    break;
                }
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    err = Some(e);
                    break;
                }
            }
        }
        // Records whose last byte went out (a pipe's reader got them).
        let whole = self.ends.partition_point(|&e| e <= done);
        self.records += whole as u64;
        let whole_bytes = if whole == 0 { 0 } else { self.ends[whole - 1] };
        let committed = self.shared.committed.load(Ordering::Relaxed) + whole_bytes as u64;
        self.shared.committed.store(committed, Ordering::Relaxed);
        self.used = 0;
        self.ends.clear();
        match err {
            None => Ok(()),
            Some(e) => {
                // A regular file is cut back to its last whole record.
                if let Some(f) = &self.shared.cut {
                    let _ = f.set_len(committed);
                }
                self.failed = Some(e.kind());
                self.room = 0;
                Err(e)
            }
        }
    }

    /// Writes out the waiting runs straight from their mapping (writev, no copy); as
    /// [`RecordFile::commit`] for a write cut short or failed.
    fn commit_runs(&mut self) -> io::Result<()> {
        let runs = std::mem::take(&mut self.runs.list);
        let total = std::mem::replace(&mut self.runs.bytes, 0);
        let map = self.runs.map.take();
        if let Some(k) = self.failed {
            return Err(io::Error::new(k, "an earlier write failed"));
        }
        self.room = self.cap;
        let Some(map) = map else {
            return Ok(());
        };
        let bytes = map.region().read_only_bytes();
        let run_bytes = |r: &Run| bytes.get(r.start..r.end).unwrap_or(&[]);
        let mut dst = self.shared.dst.lock().unwrap_or_else(|e| e.into_inner());
        // `first` is the first run not written whole, `skip` its bytes written.
        let (mut done, mut first, mut skip) = (0usize, 0usize, 0usize);
        let mut err = None;
        let mut iov = [IoSlice::new(&[]); MAX_RUNS];
        while done < total {
            let mut k = 0;
            for (i, r) in runs.iter().enumerate().skip(first).take(MAX_RUNS) {
                let b = run_bytes(r);
                iov[k] = IoSlice::new(if i == first {
                    &b[skip.min(b.len())..]
                } else {
                    b
                });
                k += 1;
            }
            match dst.write_vectored(&iov[..k]) {
                Ok(0) => {
                    err = Some(io::Error::from(io::ErrorKind::WriteZero));
                    break;
                }
                Ok(mut n) => {
                    done += n;
                    while n > 0 {
                        let Some(r) = runs.get(first) else { break };
                        let left = r.end - r.start - skip;
                        if n >= left {
                            n -= left;
                            first += 1;
                            skip = 0;
                        } else {
                            skip += n;
                            n = 0;
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    err = Some(e);
                    break;
                }
            }
        }
        // Whole records: those of the runs written whole, and those of the part written of
        // the next one (a pipe's reader got them).
        let mut whole: u64 = runs.iter().take(first).map(|r| r.records).sum();
        let mut whole_bytes = done - skip;
        if skip > 0 {
            if let Some(r) = runs.get(first) {
                let (n, b) = (self.runs.whole)(run_bytes(r).get(..skip).unwrap_or(&[]));
                whole += n;
                whole_bytes += b;
            }
        }
        self.records += whole;
        let committed = self.shared.committed.load(Ordering::Relaxed) + whole_bytes as u64;
        self.shared.committed.store(committed, Ordering::Relaxed);
        match err {
            None => Ok(()),
            Some(e) => {
                if let Some(f) = &self.shared.cut {
                    let _ = f.set_len(committed);
                }
                self.failed = Some(e.kind());
                self.room = 0;
                Err(e)
            }
        }
    }

    fn push(&mut self, parts: &[&[u8]]) -> io::Result<usize> {
        let total: usize = parts.iter().map(|p| p.len()).sum();
        let mut out = self.record(total)?;
        for p in parts {
            let (dst, rest) = out.split_at_mut(p.len());
            dst.copy_from_slice(p);
            out = rest;
        }
        Ok(total)
    }
}

/// An output that takes one whole record at a time, built in place: no copy through a
/// temporary, no call per part.
pub trait RecordWrite: Write {
    /// Room for one record of exactly `len` bytes at the end of the output, for the caller to
    /// fill entirely (what it leaves unwritten is unspecified, not zero).
    fn record(&mut self, len: usize) -> io::Result<&mut [u8]>;

    /// Whether [`RecordWrite::record_run`] writes runs in place (rather than copying them).
    fn takes_runs(&self) -> bool {
        false
    }

    /// Appends `records` whole records that lie back to back at `[start, end)` of `map`'s
    /// read-only mapping (a pcap file read in place,
    /// [`Region::read_only_bytes`](crate::mem::Region)), exactly as they are to be written.
    /// [`RecordFile`] writes them from the mapping, no copy; `whole` tells how many whole records
    /// (and their bytes) a prefix of them holds, for a write cut short. Others copy them.
    fn record_run(
        &mut self,
        map: &Arc<Pool>,
        start: usize,
        end: usize,
        records: u64,
        whole: fn(&[u8]) -> (u64, usize),
    ) -> io::Result<()> {
        let _ = (records, whole);
        let src = map
            .region()
            .read_only_bytes()
            .get(start..end)
            .ok_or_else(|| io::Error::other("a run outside its mapping"))?;
        let out = self.record(src.len())?;
        out.copy_from_slice(src);
        Ok(())
    }
}

impl RecordWrite for RecordFile {
    #[inline(always)]
    fn record(&mut self, len: usize) -> io::Result<&mut [u8]> {
        let at = self.used;
        let end = at + len;
        // `room` is 0 after a failed write: every record then takes the slow path.
        if end > self.room {
            return self.record_slow(len);
        }
        self.used = end;
        self.ends.push(end);
        Ok(&mut self.buf[at..end])
    }

    fn takes_runs(&self) -> bool {
        true
    }

    fn record_run(
        &mut self,
        map: &Arc<Pool>,
        start: usize,
        end: usize,
        records: u64,
        whole: fn(&[u8]) -> (u64, usize),
    ) -> io::Result<()> {
        if let Some(k) = self.failed {
            return Err(io::Error::new(k, "an earlier write failed"));
        }
        if end > map.region().read_only_bytes().len() || start > end {
            return Err(io::Error::other("a run outside its mapping"));
        }
        if self.used != 0 {
            self.commit()?;
        }
        if self.runs.map.as_ref().is_some_and(|m| !Arc::ptr_eq(m, map)) {
            self.commit_runs()?;
        }
        if self.runs.map.is_none() {
            self.runs.map = Some(map.clone());
        }
        self.runs.whole = whole;
        match self.runs.list.last_mut() {
            Some(r) if r.end == start => {
                r.end = end;
                r.records += records;
            }
            _ => self.runs.list.push(Run {
                start,
                end,
                records,
            }),
        }
        self.runs.bytes += end - start;
        // `record` takes its slow path from now on, which writes the runs out first.
        self.room = 0;
        if self.runs.bytes >= self.cap || self.runs.list.len() >= MAX_RUNS {
            self.commit_runs()?;
        }
        Ok(())
    }
}

impl RecordFile {
    /// [`RecordWrite::record`] when the buffer is full, the record larger than it, or an
    /// earlier write failed.
    #[cold]
    #[inline(never)]
    fn record_slow(&mut self, len: usize) -> io::Result<&mut [u8]> {
        if !self.runs.list.is_empty() {
            self.commit_runs()?;
        }
        if self.used != 0 && self.used + len > self.cap {
            self.commit()?;
        } else if let Some(k) = self.failed {
            return Err(io::Error::new(k, "an earlier write failed"));
        }
        let at = self.used;
        let end = at + len;
        if end > self.buf.len() {
            // A record larger than the buffer (which is then empty) is taken whole.
            self.buf.resize(end, 0);
        }
        self.used = end;
        self.ends.push(end);
        Ok(&mut self.buf[at..end])
    }
}

impl RecordWrite for Vec<u8> {
    fn record(&mut self, len: usize) -> io::Result<&mut [u8]> {
        let at = self.len();
        self.resize(at + len, 0);
        Ok(&mut self[at..])
    }
}

impl Write for RecordFile {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.push(&[data])
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        match bufs {
            [a, b] => return self.push(&[&**a, &**b]),
            [a, b, c] => return self.push(&[&**a, &**b, &**c]),
            _ => {}
        }
        let v: Vec<&[u8]> = bufs.iter().map(|b| &**b).collect();
        self.push(&v)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.commit()?;
        self.shared
            .dst
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .flush()
    }
}

impl Drop for RecordFile {
    /// Writes out what is buffered; a deferred output the run never started is left as it
    /// was (removed when this run created it).
    fn drop(&mut self) {
        if !writing_started() {
            let mut d = self.shared.dst.lock().unwrap_or_else(|e| e.into_inner());
            if let Dst::Held { created, .. } = &*d {
                if let Some((path, id)) = created {
                    let p = Path::new(path);
                    let same = std::fs::symlink_metadata(p)
                        .ok()
                        .is_some_and(|m| FileId::from_meta(&m) == *id && m.len() == 0);
                    if same {
                        let _ = std::fs::remove_file(p);
                    }
                }
                // Nothing reaches it, now or at exit.
                *d = Dst::Held {
                    to: Box::new(Dst::Stdout(io::stdout())),
                    created: None,
                    regular: false,
                };
                self.used = 0;
                self.ends.clear();
                self.runs.list.clear();
                self.runs.map = None;
                self.runs.bytes = 0;
                self.failed = Some(io::ErrorKind::Other);
                return;
            }
        }
        let _ = self.flush();
    }
}

/// For a forced stop, just before the process exits: waits up to `wait` for each open output's
/// write in progress to end, then keeps it from receiving anything more; an output still busy
/// after that (a regular file) is cut back to its last whole record.
pub fn seal_all(wait: Duration) {
    let list: Vec<Arc<Shared>> = {
        let v = OPEN.lock().unwrap_or_else(|e| e.into_inner());
        v.iter().filter_map(Weak::upgrade).collect()
    };
    let deadline = Instant::now() + wait;
    for s in list {
        loop {
            match s.dst.try_lock() {
                Ok(g) => {
                    // Held until the process exits: no write starts after this.
                    std::mem::forget(g);
                    break;
                }
                Err(std::sync::TryLockError::Poisoned(p)) => {
                    std::mem::forget(p.into_inner());
                    break;
                }
                Err(std::sync::TryLockError::WouldBlock) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(std::sync::TryLockError::WouldBlock) => {
                    if let Some(f) = &s.cut {
                        let _ = f.set_len(s.committed.load(Ordering::Relaxed));
                    }
                    break;
                }
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn dir(tag: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("linerate-file-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn an_input_is_never_truncated_whatever_the_path() {
        let d = dir("input");
        let input = d.join("in.pcap");
        std::fs::write(&input, b"precious").unwrap();
        let link = d.join("link.pcap");
        std::os::unix::fs::symlink(&input, &link).unwrap();
        let hard = d.join("hard.pcap");
        std::fs::hard_link(&input, &hard).unwrap();
        let mut inputs = Inputs::default();
        inputs.add_path(input.to_str().unwrap());
        for p in [&input, &link, &hard] {
            let e = create(p.to_str().unwrap(), &inputs).unwrap_err();
            assert!(matches!(e, FileError::IsInput { .. }), "{e}");
        }
        assert_eq!(std::fs::read(&input).unwrap(), b"precious");
        // Another file is created, and an old one truncated.
        let out = d.join("out.pcap");
        std::fs::write(&out, b"old contents").unwrap();
        let f = create(out.to_str().unwrap(), &inputs).unwrap();
        assert_eq!(f.metadata().unwrap().len(), 0);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn records_are_written_whole() {
        let d = dir("whole");
        let p = d.join("r.bin");
        let f = create(p.to_str().unwrap(), &Inputs::default()).unwrap();
        let mut w = RecordFile::new(f, 10);
        w.write_all(b"aaaa").unwrap();
        w.write_all(b"bbbb").unwrap();
        // Over the capacity: the first two go out, the third stays buffered.
        let n = w
            .write_vectored(&[IoSlice::new(b"cc"), IoSlice::new(b"cc")])
            .unwrap();
        assert_eq!(n, 4);
        assert_eq!(std::fs::read(&p).unwrap(), b"aaaabbbb");
        assert_eq!((w.records_written(), w.records_buffered()), (2, 1));
        // A record larger than the buffer is taken whole.
        w.write_all(&[b'x'; 25]).unwrap();
        w.flush().unwrap();
        assert_eq!(std::fs::read(&p).unwrap().len(), 8 + 4 + 25);
        assert_eq!(w.records_written(), 4);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn records_built_in_place_are_whole_and_stop_after_a_failed_write() {
        let d = dir("inplace");
        let p = d.join("r.bin");
        let f = create(p.to_str().unwrap(), &Inputs::default()).unwrap();
        let mut w = RecordFile::new(f, 8);
        w.record(4).unwrap().copy_from_slice(b"abcd");
        w.write_all(b"ef").unwrap();
        // Over the capacity: the first two go out before the third is given room.
        w.record(6).unwrap().copy_from_slice(b"ghijkl");
        assert_eq!(std::fs::read(&p).unwrap(), b"abcdef");
        // Larger than the buffer: taken whole.
        w.record(20).unwrap().copy_from_slice(&[b'z'; 20]);
        w.flush().unwrap();
        let mut want = b"abcdefghijkl".to_vec();
        want.extend_from_slice(&[b'z'; 20]);
        assert_eq!(std::fs::read(&p).unwrap(), want);
        assert_eq!(w.records_written(), 4);
        // A write that fails (no space) fails every later record too.
        let full = OpenOptions::new().write(true).open("/dev/full").unwrap();
        let mut w = RecordFile::new(full, 8);
        w.record(8).unwrap().copy_from_slice(b"12345678");
        assert!(w.record(1).is_err());
        assert!(w.record(1).is_err());
        assert!(w.write_all(b"x").is_err());
        assert_eq!(w.records_written(), 0);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_deferred_output_is_left_as_it_was_until_writing_starts() {
        let d = dir("deferred");
        let p = d.join("keep.bin");
        std::fs::write(&p, b"precious").unwrap();
        let path = p.to_str().unwrap();
        // Written to, never started: the file keeps its bytes.
        let mut w = RecordFile::deferred(open_deferred(path, &Inputs::default()).unwrap(), 64);
        w.write_all(b"header").unwrap();
        drop(w);
        assert_eq!(std::fs::read(&p).unwrap(), b"precious");
        // A new file the run never started is removed.
        let q = d.join("new.bin");
        let w = RecordFile::deferred(
            open_deferred(q.to_str().unwrap(), &Inputs::default()).unwrap(),
            64,
        );
        drop(w);
        assert!(!q.exists());
        // Its first flush starts it: truncated, then written.
        let mut w = RecordFile::deferred(open_deferred(path, &Inputs::default()).unwrap(), 64);
        w.write_all(b"header").unwrap();
        w.flush().unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"header");
        assert_eq!(w.position(), 6);
        drop(w);
        std::fs::remove_dir_all(&d).unwrap();
    }
}

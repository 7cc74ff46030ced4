//! `pcap:FILE`, `pcapng:FILE`: read pcap and pcapng captures, write either.
//!
//! [`PcapPort::open`] reads a file (`-`: standard input); it never creates one: an input that
//! does not exist is an error. [`PcapPort::create`] creates (truncates) a file for writing (`-`
//! writes standard output), never one of the run's inputs ([`PcapPort::create_protected`]), and the file
//! always ends on a whole record ([`RecordFile`]). What is written is classic pcap, or pcapng
//! when the name ends in `.pcapng` or [`WriteFormat::PcapNg`] is asked for: then each packet
//! keeps the interface it came from (`Desc::port`, described with [`Port::describe`]), and the
//! file ends with each interface's statistics ([`Port::finish`]).
//!
//! Reading pcapng, each packet's `Desc::port` is the id of its interface in the file, and
//! [`Port::interfaces`] gives their names (`if_name`, else the port's name) and link types.
//! Reading copies each packet once, straight from a
//! 2 MiB read buffer into a frame of the port's own pool, whole: a record longer than a regular
//! frame (a jumbo frame, a 64 KiB segment; up to the reader's limit of 256 KiB) goes into one of
//! the pool's big frames, so that small packets keep small frames and no record is ever cut
//! (`len` < `wire_len` only where the capture itself cut it). When the pool has no free frame,
//! `rx` returns what it has (possibly 0) and reads on at the next call (a record read meanwhile
//! waits in the port): a file never drops for lack of frames. Stats count wire lengths.
//! A caller that only reads what it receives (`count`) can have a classic pcap file read in
//! place instead ([`PcapPort::read_in_place`]): its pages mapped read-only, each packet a
//! read-only descriptor of its bytes there, nothing copied.
//!
//! A truncated or corrupt file ends with [`PortError::Format`] naming the byte offset of the bad
//! header or record, returned by the `rx` call after the one that delivered the last good
//! packets. In a pcapng file with interfaces of several link types, the port's link type is the
//! first interface's and packets of interfaces with another link type are dropped and counted
//! as `malformed` (use [`PcapReader`] directly to get every packet with its own link type).

mod format;
mod ngwriter;
mod reader;
pub mod rotate;
mod split;
mod writer;

use format::Writer;
pub use format::{WriteFormat, WRITE_BUF};
pub use ngwriter::{os_name, PcapNgWriter, USER_APPL};
pub use reader::{
    FileFormat, PcapReader, Record, BUF_SIZE, INITIAL_BUF, MAX_BLOCK, MAX_CAPLEN, MAX_IFACES,
};
use rotate::{Policy, Rotator};
pub use rotate::{Rotate, Rotated, WriteOptions};
pub use split::{Chunk, PcapSplit, SplitReader, SplitRecord, SPLIT_BYTES};
pub use writer::{PcapWriter, Precision, DEFAULT_SNAPLEN};

use super::file::{self, Inputs, RecordFile};
use super::{
    DropReason, Interface, InterfaceStats, LinkType, Port, PortError, PortOptions, PortStats,
};
use crate::mem::{copy_packet, Batch, Desc, Pool, PoolConfig, DEFAULT_BIG_FRAMES};
use std::fs::File;
use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

type Source = Box<dyn Read + Send>;

enum Mode {
    Read {
        reader: Box<PcapReader<Source>>,
        pool: Arc<Pool>,
        /// A record read when no big frame was free: delivered first at the next call.
        held: Option<Held>,
        /// Counters per interface of a pcapng file (empty for classic pcap).
        per_if: Vec<PortStats>,
        /// The file, when it is a regular one: what [`PcapPort::read_in_place`] maps.
        file: Option<File>,
        /// A source read with poll (stdin, a FIFO): set once `rx` has packets, so that the
        /// source does not wait for more (a slow source's packets are delivered as they come).
        busy: Option<Arc<AtomicBool>>,
    },
    Write {
        writer: Writer,
        path: String,
        /// Flushing on time and rotation (None: as buffered, one file).
        policy: Option<Box<Policy>>,
    },
}

/// A record waiting for a big frame.
struct Held {
    ts: u64,
    iface: u16,
    wire_len: u32,
    data: Vec<u8>,
    dir: u16,
}

/// A capture file, read or written.
pub struct PcapPort {
    name: String,
    mode: Mode,
    stats: PortStats,
    finished: bool,
    pending: Option<PortError>,
    /// A rotating writer's last file was closed (its `-z` run).
    closed: bool,
}

impl PcapPort {
    /// Opens `path` for reading (`-`: standard input). The file is never created: a missing
    /// one is [`PortError::Io`] with `NotFound`.
    ///
    /// Standard input and files that are not regular files (a FIFO, a device) are read without
    /// blocking: when nothing has come for `opts.rx_wait_ms`, `rx` returns 0 packets and the
    /// port is not finished, so that the caller can stop on time; the header is waited for
    /// here.
    pub fn open(path: &str, opts: &PortOptions) -> Result<PcapPort, PortError> {
        let wait = opts.rx_wait_ms.clamp(1, 1000) as i32;
        let io = |source| PortError::Io {
            path: path.into(),
            source,
        };
        if path == "-" {
            // Our own descriptor of standard input, read straight (no buffer of std's that
            // poll(2) would not see).
            use std::os::fd::AsFd;
            let fd = std::io::stdin().as_fd().try_clone_to_owned().map_err(io)?;
            let busy = Arc::new(AtomicBool::new(false));
            let src = PollRead {
                src: File::from(fd),
                wait_ms: wait,
                busy: busy.clone(),
            };
            let mut port = Self::from_reader(path, Box::new(src), opts)?;
            port.set_busy(busy);
            return Ok(port);
        }
        let f = File::open(path).map_err(io)?;
        if f.metadata().map_err(io)?.file_type().is_file() {
            let keep = f.try_clone().ok();
            let mut port = Self::from_reader(path, Box::new(f), opts)?;
            if let Mode::Read { file, .. } = &mut port.mode {
                *file = keep;
            }
            Ok(port)
        } else {
            let busy = Arc::new(AtomicBool::new(false));
            let src = PollRead {
                src: f,
                wait_ms: wait,
                busy: busy.clone(),
            };
            let mut port = Self::from_reader(path, Box::new(src), opts)?;
            port.set_busy(busy);
            Ok(port)
        }
    }

    fn set_busy(&mut self, b: Arc<AtomicBool>) {
        if let Mode::Read { busy, .. } = &mut self.mode {
            *busy = Some(b);
        }
    }

    /// Creates (or truncates) `path` for writing packets of `link` (`-`: standard output).
    pub fn create(path: &str, link: LinkType) -> Result<PcapPort, PortError> {
        Self::create_with(path, link, DEFAULT_SNAPLEN)
    }

    /// Creates (or truncates) `path` for writing packets of `link`, truncated to `snaplen`.
    pub fn create_with(path: &str, link: LinkType, snaplen: u32) -> Result<PcapPort, PortError> {
        Self::create_protected(path, link, snaplen, &Inputs::default())
    }

    /// A writer: records are written whole from now on, whatever the header's snapshot length
    /// says ([`PcapWriter::keep_whole`], [`PcapNgWriter::keep_whole`]). Nothing for a reader.
    pub fn keep_whole(&mut self) {
        if let Mode::Write {
            policy: Some(p), ..
        } = &mut self.mode
        {
            if let Some(r) = &mut p.rot {
                r.whole = true;
            }
        }
        match &mut self.mode {
            Mode::Write {
                writer: Writer::Pcap(w),
                ..
            } => w.keep_whole(),
            Mode::Write {
                writer: Writer::Ng(w),
                ..
            } => w.keep_whole(),
            Mode::Read { .. } => {}
        }
    }

    /// [`PcapPort::create_with`], refusing to write any of `inputs` (and planted links: see
    /// [`file::create`]); nothing is truncated when it refuses. The format follows the name
    /// ([`WriteFormat::for_path`]).
    pub fn create_protected(
        path: &str,
        link: LinkType,
        snaplen: u32,
        inputs: &Inputs,
    ) -> Result<PcapPort, PortError> {
        Self::create_as(path, None, link, snaplen, inputs)
    }

    /// [`PcapPort::create_protected`] in `format` (None: by the name).
    pub fn create_as(
        path: &str,
        format: Option<WriteFormat>,
        link: LinkType,
        snaplen: u32,
        inputs: &Inputs,
    ) -> Result<PcapPort, PortError> {
        Self::create_with_options(
            path,
            format,
            link,
            snaplen,
            inputs,
            &WriteOptions::default(),
        )
    }

    /// [`PcapPort::create_as`], written as `wo` says: flushed every `flush_interval` (at the
    /// worker's [`Port::tick`]), each batch at once with `packet_buffered`, rotated as
    /// `wo.rotate` says (then `path` is the first name: see [`rotate`]). Rotation needs a
    /// file (not `-`).
    pub fn create_with_options(
        path: &str,
        format: Option<WriteFormat>,
        link: LinkType,
        snaplen: u32,
        inputs: &Inputs,
        wo: &WriteOptions,
    ) -> Result<PcapPort, PortError> {
        let format = format.unwrap_or_else(|| WriteFormat::for_path(path));
        let (rot, first) = if wo.rotate.is_on() {
            if path == "-" {
                return Err(PortError::Unsupported {
                    port: "pcap:-".into(),
                    op: "rotation (-C, -G) of standard output: write to a file",
                });
            }
            let now_s = crate::time::wall_ns() / 1_000_000_000;
            let (r, name) = Rotator::first(
                wo.rotate.clone(),
                path,
                format,
                link,
                snaplen,
                inputs,
                now_s,
            )
            .ok_or_else(|| PortError::BadUri {
                uri: path.into(),
                why: "-G: the strftime pattern gives no file name".into(),
            })?;
            if let Some((path, input)) = rotate::input_among_names(path, inputs) {
                return Err(PortError::File(file::FileError::IsInput { path, input }));
            }
            (Some(r), name)
        } else {
            (None, path.to_string())
        };
        let path = first.as_str();
        // Deferred: the file keeps its bytes until the run starts writing (every flag valid,
        // every input open: [`file::start_writing`]), or this port's first packets or flush.
        let sink = if path == "-" {
            RecordFile::stdout_deferred(WRITE_BUF)
        } else {
            RecordFile::deferred(file::open_deferred(path, inputs)?, WRITE_BUF)
        };
        let io = |source| PortError::Io {
            path: path.into(),
            source,
        };
        let writer = match format {
            WriteFormat::Pcap => Writer::Pcap(PcapWriter::new(sink, link, snaplen).map_err(io)?),
            WriteFormat::PcapNg => Writer::Ng(PcapNgWriter::new(sink, link, snaplen).map_err(io)?),
        };
        let on =
            rot.is_some() || wo.packet_buffered || wo.flush_interval.is_some_and(|d| !d.is_zero());
        Ok(PcapPort {
            name: format!("pcap:{path}"),
            mode: Mode::Write {
                writer,
                path: path.into(),
                policy: on.then(|| Box::new(Policy::new(wo, rot))),
            },
            stats: PortStats::default(),
            finished: true,
            pending: None,
            closed: false,
        })
    }

    /// The file being written now (the first, or the one a rotation opened last); None for a
    /// reader.
    pub fn current_file(&self) -> Option<&str> {
        match &self.mode {
            Mode::Write { path, .. } => Some(path),
            Mode::Read { .. } => None,
        }
    }

    /// A writer's packets that reached the file (or pipe) whole, as opposed to those handed to
    /// it ([`PortStats::tx_packets`]); None for a reader.
    pub fn packets_written(&self) -> Option<u64> {
        let prior = self.rotator().map_or(0, |r| r.prior_packets);
        let now = match &self.mode {
            // The file header is the first record.
            Mode::Write {
                writer: Writer::Pcap(w),
                ..
            } => Some(w.get_ref().records_written().saturating_sub(1)),
            Mode::Write {
                writer: Writer::Ng(w),
                ..
            } => Some(w.packets_among(w.get_ref().records_written())),
            Mode::Read { .. } => None,
        };
        now.map(|n| n + prior)
    }

    /// Of [`Self::packets_written`], those in files a later file of the same name overwrote
    /// (tcpdump's `-G` with a name without a time field, a `-C` `-W` ring gone round), and
    /// what overwrote them (`-G`, `the -W ring`); None when nothing was overwritten.
    pub fn packets_overwritten(&self) -> Option<(u64, &'static str)> {
        self.rotator()
            .filter(|r| r.overwritten > 0)
            .map(|r| (r.overwritten, r.overwriter()))
    }

    /// Whether `-G` with `-W` wrote its last file (the run was stopped by the file limit).
    pub fn file_limit_reached(&self) -> bool {
        self.rotator().is_some_and(|r| r.done)
    }

    fn rotator(&self) -> Option<&Rotator> {
        match &self.mode {
            Mode::Write {
                policy: Some(p), ..
            } => p.rot.as_ref(),
            _ => None,
        }
    }

    /// A writer's format (None for a reader).
    pub fn write_format(&self) -> Option<WriteFormat> {
        match &self.mode {
            Mode::Write {
                writer: Writer::Pcap(_),
                ..
            } => Some(WriteFormat::Pcap),
            Mode::Write {
                writer: Writer::Ng(_),
                ..
            } => Some(WriteFormat::PcapNg),
            Mode::Read { .. } => None,
        }
    }

    /// A writer's packets per interface (`Desc::port`) so far; a classic pcap file counts them
    /// all as interface 0. Empty for a reader.
    pub fn packets_by_interface(&self) -> Vec<u64> {
        let mut v = match &self.mode {
            Mode::Write {
                writer: Writer::Pcap(w),
                ..
            } => vec![w.packets()],
            Mode::Write {
                writer: Writer::Ng(w),
                ..
            } => w.packets_by_interface().to_vec(),
            Mode::Read { .. } => Vec::new(),
        };
        if let Some(r) = self.rotator() {
            if v.len() < r.prior_by_if.len() {
                v.resize(r.prior_by_if.len(), 0);
            }
            for (a, b) in v.iter_mut().zip(&r.prior_by_if) {
                *a += b;
            }
        }
        v
    }

    /// Reads a capture from any byte source; `name` names it in errors (tests, fuzzing, pipes).
    pub fn from_reader(
        name: &str,
        src: Box<dyn Read + Send>,
        opts: &PortOptions,
    ) -> Result<PcapPort, PortError> {
        let reader = Box::new(PcapReader::new(src, name)?);
        let pool = Arc::new(Pool::new(&PoolConfig {
            frames: opts.frames,
            big_frames: DEFAULT_BIG_FRAMES,
            ..Default::default()
        })?);
        let finished = reader.is_done();
        Ok(PcapPort {
            name: format!("pcap:{name}"),
            mode: Mode::Read {
                reader,
                pool,
                held: None,
                per_if: Vec::new(),
                file: None,
                busy: None,
            },
            stats: PortStats::default(),
            finished,
            pending: None,
            closed: false,
        })
    }

    /// The file's flavour (None for a port opened for writing).
    pub fn format(&self) -> Option<FileFormat> {
        match &self.mode {
            Mode::Read { reader, .. } => Some(reader.format()),
            Mode::Write { .. } => None,
        }
    }

    /// Reads the rest of a classic pcap file in place, for a caller that only reads the packets
    /// it receives (`count`, its writer): `rx` then gives descriptors of the file's own pages,
    /// mapped read-only, instead of copying each record into a frame (no copy at all, and no
    /// 2 MiB read buffer for the kernel to copy the file into). They are marked
    /// [`Desc::F_SHARED`]: [`Batch::data_mut`] gives nothing for them, so a caller that
    /// rewrites packets (`fwd`, a Lua script) must not ask for this. A batch lent frames (a
    /// cluster master's) still gets each record copied into them.
    ///
    /// Only for a regular file that nobody else can shorten while it is mapped (a page past a
    /// truncated end would kill the process with SIGBUS): owned by this user or root, writable
    /// by neither its group nor others, on a local file system (not FUSE, NFS, SMB, 9p, Ceph,
    /// AFS, Coda or a cluster file system, whose files may change size without a local
    /// permission check). Otherwise, and for standard input, a FIFO, pcapng, or a file that
    /// cannot be mapped, nothing changes (false): the port reads as before. A read error under
    /// the mapping (a failing or removed device) raises SIGBUS as well, where a copy would
    /// have returned [`PortError::Io`]; the file's length is the one it had here, whatever is
    /// appended later.
    pub fn read_in_place(&mut self) -> bool {
        let Mode::Read {
            reader, held, file, ..
        } = &mut self.mode
        else {
            return false;
        };
        if held.is_some() || !reader.is_classic() || reader.mapped().is_some() {
            return false;
        }
        let Some(region) = file.as_ref().and_then(map_if_unshortenable) else {
            return false;
        };
        reader.read_mapped(Arc::new(Pool::external(region)))
    }

    /// Whether the port writes (rather than reads) its file.
    pub fn is_writer(&self) -> bool {
        matches!(self.mode, Mode::Write { .. })
    }
}

/// `f` mapped read-only, when nobody else can shorten it while it is mapped (a page past a
/// truncated end would kill the process with SIGBUS): a regular file owned by this user or
/// root, writable by neither its group nor others, on a local file system (not FUSE, NFS, SMB,
/// 9p, Ceph, AFS, Coda or a cluster file system, whose files may change size without a local
/// permission check). None otherwise, or when it cannot be mapped: the caller reads it.
pub(crate) fn map_if_unshortenable(f: &File) -> Option<crate::mem::Region> {
    use std::os::unix::fs::MetadataExt;
    let meta = f.metadata().ok()?;
    let owner = meta.uid();
    if !meta.file_type().is_file()
        || (owner != crate::sys::process::euid() && owner != 0)
        || meta.mode() & 0o022 != 0
        || crate::sys::fs::is_remote_or_user_fs(f).unwrap_or(true)
    {
        return None;
    }
    crate::mem::Region::map_read_only(f).ok()
}

/// A source that waits at most `wait_ms` for bytes (not at all while `busy`), then says
/// `WouldBlock`.
struct PollRead<R> {
    src: R,
    wait_ms: i32,
    busy: Arc<AtomicBool>,
}

impl<R: Read + std::os::fd::AsRawFd> Read for PollRead<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let wait = if self.busy.load(Ordering::Relaxed) {
            0
        } else {
            self.wait_ms
        };
        if !super::sys::poll_readable(self.src.as_raw_fd(), wait)? {
            return Err(std::io::ErrorKind::WouldBlock.into());
        }
        self.src.read(buf)
    }
}

impl PcapPort {
    /// `rx` of a file read in place ([`PcapPort::read_in_place`]): each record becomes a
    /// read-only descriptor of its bytes in the mapping `map`, nothing is copied.
    #[inline]
    fn rx_in_place(&mut self, batch: &mut Batch, map: &Arc<Pool>) -> Result<usize, PortError> {
        let Mode::Read { reader, .. } = &mut self.mode else {
            return Ok(0);
        };
        batch.bind(map);
        let base = map.region().as_ptr() as usize;
        let (mut n, mut bytes) = (0usize, 0u64);
        let mut failed = None;
        while batch.room() > 0 {
            // Records whole in the mapping take the fast path; the last (cut short, or a
            // corrupt header) goes through the reader's checks and errors.
            let (ts, wire_len, data) = match reader.next_buffered(MAX_CAPLEN as usize) {
                Some((rec, data)) => (rec.ts, rec.wire_len, data),
                None => match reader.next_packet() {
                    Ok(Some(rec)) => (rec.ts, rec.wire_len, rec.data),
                    Ok(None) => {
                        self.finished = reader.is_done();
                        break;
                    }
                    Err(e) => {
                        self.finished = true;
                        failed = Some(e);
                        break;
                    }
                },
            };
            let len = data.len() as u32;
            let orig = wire_len;
            let wire_len = wire_len.max(len);
            batch.push(
                Desc {
                    // Inside the mapping (a slice of it); `Batch::data` checks the bounds again.
                    addr: (data.as_ptr() as usize).wrapping_sub(base) as u64,
                    ts,
                    len,
                    wire_len,
                    flags: Desc::F_SHARED,
                    ..Default::default()
                }
                .with_orig_len(orig),
            );
            n += 1;
            bytes += u64::from(wire_len);
        }
        self.end_rx(n, bytes, failed)
    }

    /// The end of an `rx`: `n` packets of `bytes` counted; an error that ended the file is
    /// returned now when nothing came, else at the next call (after the good packets).
    #[inline]
    fn end_rx(
        &mut self,
        n: usize,
        bytes: u64,
        failed: Option<PortError>,
    ) -> Result<usize, PortError> {
        self.stats.rx_packets += n as u64;
        self.stats.rx_bytes += bytes;
        match failed {
            Some(e) if n == 0 => Err(e),
            Some(e) => {
                self.pending = Some(e);
                Ok(n)
            }
            None => Ok(n),
        }
    }
}

impl Port for PcapPort {
    fn name(&self) -> &str {
        &self.name
    }

    fn rx_time(&self) -> super::RxTime {
        super::RxTime::Recorded
    }

    #[inline]
    fn rx(&mut self, batch: &mut Batch) -> Result<usize, PortError> {
        let Mode::Read {
            reader,
            pool,
            held,
            per_if,
            busy,
            ..
        } = &mut self.mode
        else {
            return Ok(0);
        };
        // A polled source waits for its first packet only.
        let mut waits = true;
        if let Some(b) = busy.as_deref() {
            b.store(false, Ordering::Relaxed);
        }
        let ng = matches!(reader.format(), FileFormat::PcapNg { .. });
        if let Some(e) = self.pending.take() {
            return Err(e);
        }
        if let Some(map) = reader
            .mapped()
            .filter(|_| !batch.is_lent() && held.is_none())
        {
            let map = map.clone();
            return self.rx_in_place(batch, &map);
        }
        if !batch.is_lent() {
            batch.bind(pool);
        }
        let (mut n, mut bytes, mut other, mut too_big) = (0usize, 0u64, 0u64, 0u64);
        // A record that found no free big frame last time goes first.
        if let Some(h) = held.take() {
            let Some(mut f) = batch.alloc_big() else {
                *held = Some(h);
                return Ok(0);
            };
            if let Some(dst) = f.buf().get_mut(..h.data.len()) {
                dst.copy_from_slice(&h.data);
            }
            f.push(Desc {
                ts: h.ts,
                len: h.data.len() as u32,
                wire_len: h.wire_len,
                port: h.iface,
                flags: h.dir,
                ..Default::default()
            });
            n += 1;
            bytes += u64::from(h.wire_len);
            if let Some(s) = per_if.get_mut(usize::from(h.iface)) {
                s.rx_packets += 1;
                s.rx_bytes += u64::from(h.wire_len);
            }
        }
        if self.finished {
            self.stats.rx_packets += n as u64;
            self.stats.rx_bytes += bytes;
            return Ok(n);
        }
        let want = reader.link_type();
        // The frames' room: the pool's, or that of frames a cluster master lent the batch.
        let (small, big) = batch.frame_room();
        let (small, big) = (small as usize, big as usize);
        let mut failed = None;
        while batch.room() > 0 {
            let Some(mut f) = batch.alloc() else { break };
            // A classic pcap record already in the reader's buffer that fits a regular frame:
            // no read, no error, one interface (no per-interface counters).
            if !ng {
                if let Some((rec, data)) = reader.next_buffered(small) {
                    copy_packet(f.buf(), data);
                    let wire_len = rec.wire_len.max(rec.len);
                    f.push(
                        Desc {
                            ts: rec.ts,
                            len: rec.len,
                            wire_len,
                            ..Default::default()
                        }
                        .with_orig_len(rec.wire_len),
                    );
                    n += 1;
                    bytes += u64::from(wire_len);
                    continue;
                }
            }
            if n > 0 && waits {
                waits = false;
                if let Some(b) = busy.as_deref() {
                    b.store(true, Ordering::Relaxed);
                }
            }
            match reader.next_packet() {
                Ok(Some(rec)) => {
                    let iface = rec.iface as usize;
                    if ng && iface >= per_if.len() {
                        per_if.resize(iface + 1, PortStats::default());
                    }
                    if rec.link != want {
                        drop(f); // the frame goes back
                        other += 1;
                        if let Some(s) = per_if.get_mut(iface) {
                            s.rx_drops.add(DropReason::Malformed, 1);
                        }
                        continue;
                    }
                    let len = rec.data.len();
                    let wire_len = rec.wire_len.max(len as u32);
                    if len > small {
                        drop(f);
                        if len > big {
                            // A pool without big frames (or a record past the reader's limit):
                            // dropped whole and counted, never cut.
                            too_big += 1;
                            if let Some(s) = per_if.get_mut(iface) {
                                s.rx_drops.add(DropReason::TooBig, 1);
                            }
                            continue;
                        }
                        match batch.alloc_big() {
                            Some(b) => f = b,
                            None => {
                                // Every big frame is out: keep the record for the next call.
                                let mut data = Vec::with_capacity(len);
                                data.extend_from_slice(rec.data);
                                *held = Some(Held {
                                    ts: rec.ts,
                                    iface: rec.iface as u16,
                                    wire_len,
                                    data,
                                    dir: rec.dir,
                                });
                                break;
                            }
                        }
                    }
                    if let (Some(dst), Some(src)) = (f.buf().get_mut(..len), rec.data.get(..len)) {
                        dst.copy_from_slice(src);
                    }
                    f.push(
                        Desc {
                            ts: rec.ts,
                            len: len as u32,
                            wire_len,
                            port: rec.iface as u16,
                            flags: rec.dir,
                            ..Default::default()
                        }
                        .with_orig_len(rec.wire_len),
                    );
                    n += 1;
                    bytes += u64::from(wire_len);
                    if let Some(s) = per_if.get_mut(iface) {
                        s.rx_packets += 1;
                        s.rx_bytes += u64::from(wire_len);
                    }
                }
                Ok(None) => {
                    drop(f);
                    // Not done: the source has nothing now (a FIFO or stdin); more may come.
                    self.finished = reader.is_done();
                    break;
                }
                Err(e) => {
                    drop(f);
                    self.finished = true;
                    failed = Some(e);
                    break;
                }
            }
        }
        self.stats.rx_drops.add(DropReason::Malformed, other);
        self.stats.rx_drops.add(DropReason::TooBig, too_big);
        self.end_rx(n, bytes, failed)
    }

    fn tx(&mut self, batch: &mut Batch) -> Result<usize, PortError> {
        let Mode::Write {
            writer,
            path,
            policy,
        } = &mut self.mode
        else {
            return Err(PortError::Unsupported {
                port: self.name.clone(),
                op: "tx on a file opened for reading",
            });
        };
        let io = |path: &String, source| PortError::Io {
            path: path.clone(),
            source,
        };
        // The first packets: the run has started (a deferred file is truncated now).
        let started = match writer {
            Writer::Pcap(w) => w.get_mut().start(),
            Writer::Ng(w) => w.get_mut().start(),
        };
        if let Err(source) = started {
            batch.clear();
            return Err(io(path, source));
        }
        let mut n = batch.len();
        let r = match policy.as_deref_mut() {
            Some(Policy { rot: Some(rot), .. }) => {
                // Rotation: before each packet, whether the file is full or its period over.
                let now_s = if rot.timed() {
                    crate::time::wall_ns() / 1_000_000_000
                } else {
                    0
                };
                let mut k = 0;
                let mut r = Ok(());
                for p in batch.iter() {
                    if rot.done {
                        break;
                    }
                    let pos = match writer {
                        Writer::Pcap(w) => w.get_ref().position(),
                        Writer::Ng(w) => w.get_ref().position(),
                    };
                    if let Some(why) = rot.due(pos, now_s) {
                        if let Err(e) = rot.rotate(writer, path, why, now_s) {
                            r = Err(e);
                            break;
                        }
                        if rot.done {
                            break;
                        }
                    }
                    let w = match writer {
                        Writer::Pcap(w) => w.write_packet(p.desc.ts, p.data, p.desc.wire_len),
                        Writer::Ng(w) => {
                            w.write_packet(p.desc.port, p.desc.ts, p.data, p.desc.wire_len)
                        }
                    };
                    if let Err(e) = w {
                        r = Err(e);
                        break;
                    }
                    k += 1;
                }
                if rot.done && r.is_ok() {
                    // -G with -W wrote its last file: what is left is not taken.
                    batch.free_front(k);
                    n = k;
                } else {
                    batch.clear();
                }
                r
            }
            _ => {
                let r = match writer {
                    Writer::Pcap(w) => w.write_batch(batch).map(|_| ()),
                    Writer::Ng(w) => w.write_batch(batch).map(|_| ()),
                };
                batch.clear();
                r
            }
        };
        let (prior_p, prior_b) = policy
            .as_deref()
            .and_then(|p| p.rot.as_ref())
            .map_or((0, 0), |r| (r.prior_packets, r.prior_bytes));
        let (packets, bytes) = match writer {
            Writer::Pcap(w) => (w.packets(), w.bytes()),
            Writer::Ng(w) => (w.packets(), w.bytes()),
        };
        self.stats.tx_packets = prior_p + packets;
        self.stats.tx_bytes = prior_b + bytes;
        r.map_err(|source| io(path, source))?;
        // -U: each batch reaches the file as soon as it is captured.
        if policy.as_deref().is_some_and(|p| p.per_packet) {
            match writer {
                Writer::Pcap(w) => w.flush(),
                Writer::Ng(w) => w.flush(),
            }
            .map_err(|source| io(path, source))?;
        }
        Ok(n)
    }

    /// `-G` with `-W` wrote its last file: tcpdump's run ends there, and so does the writer.
    fn tx_ended(&self) -> bool {
        self.file_limit_reached()
    }

    fn tx_end_note(&self) -> Option<String> {
        self.rotator().and_then(|r| r.limit_note())
    }

    fn tx_overwritten(&self) -> Option<(u64, &'static str)> {
        self.packets_overwritten()
    }

    fn tick(&mut self, now_ns: u64) -> Result<(), PortError> {
        let Mode::Write {
            writer,
            path,
            policy: Some(policy),
        } = &mut self.mode
        else {
            return Ok(());
        };
        let check = policy.check_due(now_ns);
        if !policy.flush_due(now_ns) && !check {
            return Ok(());
        }
        let io = |path: &String, source| PortError::Io {
            path: path.clone(),
            source,
        };
        if let Some(rot) = policy.rot.as_mut() {
            rot.reap();
            // A -G period ends on time, packets or not (once the run has written).
            let started = match writer {
                Writer::Pcap(w) => w.get_ref().position() > 0 && file::writing_started(),
                Writer::Ng(w) => w.get_ref().position() > 0 && file::writing_started(),
            };
            if rot.timed() && started {
                let now_s = crate::time::wall_ns() / 1_000_000_000;
                if let Some("time") = rot.due(0, now_s) {
                    rot.rotate(writer, path, "time", now_s)
                        .map_err(|source| io(path, source))?;
                }
            }
        }
        match writer {
            Writer::Pcap(w) => w.flush(),
            Writer::Ng(w) => w.flush(),
        }
        .map_err(|source| io(path, source))
    }

    fn flush(&mut self) -> Result<(), PortError> {
        if let Mode::Write { writer, path, .. } = &mut self.mode {
            match writer {
                Writer::Pcap(w) => w.flush(),
                Writer::Ng(w) => w.flush(),
            }
            .map_err(|source| PortError::Io {
                path: path.clone(),
                source,
            })?;
        }
        Ok(())
    }

    fn interfaces(&self) -> Vec<Interface> {
        match &self.mode {
            Mode::Read { reader, .. } => {
                let list = reader.interfaces();
                let snaplens = reader.snaplens();
                let snap = |k: usize| snaplens.get(k).copied().unwrap_or(0);
                if list.len() <= 1 {
                    let name = list.first().and_then(|i| i.1).unwrap_or(&self.name);
                    let s = if list.is_empty() {
                        reader.snaplen()
                    } else {
                        snap(0)
                    };
                    return vec![Interface::new(name, reader.link_type()).with_snaplen(s)];
                }
                list.iter()
                    .enumerate()
                    .map(|(k, (link, name))| {
                        match name {
                            Some(n) => Interface::new(n, *link),
                            None => Interface::new(&format!("{}#{k}", self.name), *link),
                        }
                        .with_snaplen(snap(k))
                    })
                    .collect()
            }
            Mode::Write { writer, .. } => {
                let link = match writer {
                    Writer::Pcap(w) => w.link_type(),
                    Writer::Ng(w) => w.link_type(),
                };
                vec![Interface::new(&self.name, link)]
            }
        }
    }

    fn interface_stats(&mut self) -> Vec<PortStats> {
        match &self.mode {
            Mode::Read { reader, per_if, .. }
                if matches!(reader.format(), FileFormat::PcapNg { .. }) =>
            {
                let mut v = per_if.clone();
                v.resize(reader.interface_count().max(v.len()), PortStats::default());
                v
            }
            _ => vec![self.stats],
        }
    }

    fn describe(&mut self, ifaces: &[Interface]) -> Result<(), PortError> {
        if let Mode::Write {
            policy: Some(p), ..
        } = &mut self.mode
        {
            if let Some(r) = &mut p.rot {
                r.ifaces = ifaces.to_vec();
            }
        }
        if let Mode::Write {
            writer: Writer::Ng(w),
            path,
            ..
        } = &mut self.mode
        {
            w.describe(ifaces).map_err(|source| PortError::Io {
                path: path.clone(),
                source,
            })?;
        }
        Ok(())
    }

    fn tx_by_interface(&self) -> Vec<u64> {
        self.packets_by_interface()
    }

    fn finish(&mut self, stats: &[InterfaceStats]) -> Result<(), PortError> {
        if let Mode::Write {
            writer: Writer::Ng(w),
            path,
            ..
        } = &mut self.mode
        {
            w.write_stats(stats).map_err(|source| PortError::Io {
                path: path.clone(),
                source,
            })?;
        }
        self.flush()?;
        self.close_last();
        Ok(())
    }

    fn stats(&mut self) -> PortStats {
        self.stats
    }

    fn link_type(&self) -> LinkType {
        match &self.mode {
            Mode::Read { reader, .. } => reader.link_type(),
            Mode::Write {
                writer: Writer::Pcap(w),
                ..
            } => w.link_type(),
            Mode::Write {
                writer: Writer::Ng(w),
                ..
            } => w.link_type(),
        }
    }

    /// True after the end of the file or an error was returned; always true for a writer (it
    /// gives nothing).
    fn is_finished(&self) -> bool {
        let held = matches!(&self.mode, Mode::Read { held: Some(_), .. });
        self.finished && self.pending.is_none() && !held
    }

    fn pool(&self) -> Option<&Arc<Pool>> {
        match &self.mode {
            Mode::Read { pool, .. } => Some(pool),
            Mode::Write { .. } => None,
        }
    }

    fn fills_lent_frames(&self) -> bool {
        matches!(self.mode, Mode::Read { .. }) // records are copied from the file's buffer
    }

    fn read_in_place(&mut self) -> bool {
        PcapPort::read_in_place(self)
    }

    /// Records are copied into whatever frame the batch hands out: a reader given lent frames
    /// does not bind its own pool.
    fn fills_lent_frames_of_any_pool(&self) -> bool {
        self.fills_lent_frames()
    }

    fn snaplen(&self) -> Option<u32> {
        match &self.mode {
            Mode::Read { reader, .. } => Some(reader.snaplen()).filter(|&s| s > 0),
            Mode::Write {
                writer: Writer::Pcap(w),
                ..
            } => Some(w.snaplen()),
            Mode::Write {
                writer: Writer::Ng(w),
                ..
            } => Some(w.snaplen()),
        }
    }
}

impl PcapPort {
    /// A rotating writer's last file is complete: `-z` runs on it, and every `-z` command
    /// is waited for.
    fn close_last(&mut self) {
        if self.closed || !file::writing_started() {
            return;
        }
        if let Mode::Write {
            writer,
            path,
            policy: Some(p),
        } = &mut self.mode
        {
            if let Some(r) = p.rot.as_mut() {
                self.closed = true;
                let size = match writer {
                    Writer::Pcap(w) => {
                        let _ = w.flush();
                        w.get_ref().position()
                    }
                    Writer::Ng(w) => {
                        let _ = w.flush();
                        w.get_ref().position()
                    }
                };
                r.close_last(path, size);
            }
        }
    }
}

impl Drop for PcapPort {
    /// A pcapng file always ends with its interfaces' statistics: what the writer knows itself
    /// (times and packets written) when no one gave it the figures ([`Port::finish`]).
    fn drop(&mut self) {
        if let Mode::Write {
            writer: Writer::Ng(w),
            ..
        } = &mut self.mode
        {
            if !w.stats_written() {
                let _ = w.write_stats(&[]);
            }
        }
        self.close_last();
    }
}

#[cfg(all(test, not(loom)))]
mod tests;

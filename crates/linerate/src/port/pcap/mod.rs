//! `pcap:FILE`: read pcap and pcapng captures, write classic pcap.
//!
//! [`PcapPort::open`] reads a file (`-`: standard input); it never creates one: an input that
//! does not exist is an error. [`PcapPort::create`] creates (truncates) a file for writing (`-`
//! writes standard output), never one of the run's inputs ([`create_protected`]), and the file
//! always ends on a whole record ([`RecordFile`]). Reading copies each packet once, straight from a
//! 2 MiB read buffer into a frame of the port's own pool, whole: a record longer than a regular
//! frame (a jumbo frame, a 64 KiB segment; up to the reader's limit of 256 KiB) goes into one of
//! the pool's big frames, so that small packets keep small frames and no record is ever cut
//! (`len` < `wire_len` only where the capture itself cut it). When the pool has no free frame,
//! `rx` returns what it has (possibly 0) and reads on at the next call (a record read meanwhile
//! waits in the port): a file never drops for lack of frames. Stats count wire lengths.
//!
//! A truncated or corrupt file ends with [`PortError::Format`] naming the byte offset of the bad
//! header or record, returned by the `rx` call after the one that delivered the last good
//! packets. In a pcapng file with interfaces of several link types, the port's link type is the
//! first interface's and packets of interfaces with another link type are dropped and counted
//! as `malformed` (use [`PcapReader`] directly to get every packet with its own link type).

mod reader;
mod split;
mod writer;

pub use reader::{
    FileFormat, PcapReader, Record, BUF_SIZE, INITIAL_BUF, MAX_BLOCK, MAX_CAPLEN, MAX_IFACES,
};
pub use split::{Chunk, PcapSplit, SplitReader, SplitRecord, SPLIT_GROUP, SPLIT_READ};
pub use writer::{PcapWriter, Precision, DEFAULT_SNAPLEN};

use super::file::{self, Inputs, RecordFile};
use super::{DropReason, LinkType, Port, PortError, PortOptions, PortStats};
use crate::mem::{Batch, Desc, Pool, PoolConfig, DEFAULT_BIG_FRAMES};
use std::fs::File;
use std::io::Read;
use std::sync::Arc;

/// Size of the write buffer.
pub const WRITE_BUF: usize = 1 << 20;

type Source = Box<dyn Read + Send>;
type Sink = RecordFile;

enum Mode {
    Read {
        reader: Box<PcapReader<Source>>,
        pool: Arc<Pool>,
        /// A record read when no big frame was free: delivered first at the next call.
        held: Option<Held>,
    },
    Write {
        writer: PcapWriter<Sink>,
        path: String,
    },
}

/// A record waiting for a big frame.
struct Held {
    ts: u64,
    wire_len: u32,
    data: Vec<u8>,
}

/// A capture file, read or written.
pub struct PcapPort {
    name: String,
    mode: Mode,
    stats: PortStats,
    finished: bool,
    pending: Option<PortError>,
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
            let src = PollRead {
                src: File::from(fd),
                wait_ms: wait,
            };
            return Self::from_reader(path, Box::new(src), opts);
        }
        let f = File::open(path).map_err(io)?;
        if f.metadata().map_err(io)?.file_type().is_file() {
            Self::from_reader(path, Box::new(f), opts)
        } else {
            let src = PollRead {
                src: f,
                wait_ms: wait,
            };
            Self::from_reader(path, Box::new(src), opts)
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
    /// says ([`PcapWriter::keep_whole`]). Nothing for a reader.
    pub fn keep_whole(&mut self) {
        if let Mode::Write { writer, .. } = &mut self.mode {
            writer.keep_whole();
        }
    }

    /// [`PcapPort::create_with`], refusing to write any of `inputs` (and planted links: see
    /// [`file::create`]); nothing is truncated when it refuses.
    pub fn create_protected(
        path: &str,
        link: LinkType,
        snaplen: u32,
        inputs: &Inputs,
    ) -> Result<PcapPort, PortError> {
        let sink = if path == "-" {
            RecordFile::stdout(WRITE_BUF)
        } else {
            RecordFile::new(file::create(path, inputs)?, WRITE_BUF)
        };
        let writer = PcapWriter::new(sink, link, snaplen).map_err(|source| PortError::Io {
            path: path.into(),
            source,
        })?;
        Ok(PcapPort {
            name: format!("pcap:{path}"),
            mode: Mode::Write {
                writer,
                path: path.into(),
            },
            stats: PortStats::default(),
            finished: true,
            pending: None,
        })
    }

    /// A writer's packets that reached the file (or pipe) whole, as opposed to those handed to
    /// it ([`PortStats::tx_packets`]); None for a reader.
    pub fn packets_written(&self) -> Option<u64> {
        match &self.mode {
            // The file header is the first record.
            Mode::Write { writer, .. } => {
                Some(writer.get_ref().records_written().saturating_sub(1))
            }
            Mode::Read { .. } => None,
        }
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
            },
            stats: PortStats::default(),
            finished,
            pending: None,
        })
    }

    /// The file's flavour (None for a port opened for writing).
    pub fn format(&self) -> Option<FileFormat> {
        match &self.mode {
            Mode::Read { reader, .. } => Some(reader.format()),
            Mode::Write { .. } => None,
        }
    }

    /// Whether the port writes (rather than reads) its file.
    pub fn is_writer(&self) -> bool {
        matches!(self.mode, Mode::Write { .. })
    }
}

/// A source that waits at most `wait_ms` for bytes, then says `WouldBlock`.
struct PollRead<R> {
    src: R,
    wait_ms: i32,
}

impl<R: Read + std::os::fd::AsRawFd> Read for PollRead<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if !super::sys::poll_readable(self.src.as_raw_fd(), self.wait_ms)? {
            return Err(std::io::ErrorKind::WouldBlock.into());
        }
        self.src.read(buf)
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
        let Mode::Read { reader, pool, held } = &mut self.mode else {
            return Ok(0);
        };
        if let Some(e) = self.pending.take() {
            return Err(e);
        }
        batch.bind(pool);
        let (mut n, mut bytes, mut other, mut too_big) = (0usize, 0u64, 0u64, 0u64);
        // A record that found no free big frame last time goes first.
        if let Some(h) = held.take() {
            let Some(addr) = batch.alloc_big() else {
                *held = Some(h);
                return Ok(0);
            };
            let frame = batch.frame_mut(addr);
            frame[..h.data.len()].copy_from_slice(&h.data);
            batch.push(Desc {
                addr,
                ts: h.ts,
                len: h.data.len() as u32,
                wire_len: h.wire_len,
                ..Default::default()
            });
            n += 1;
            bytes += u64::from(h.wire_len);
        }
        if self.finished {
            self.stats.rx_packets += n as u64;
            self.stats.rx_bytes += bytes;
            return Ok(n);
        }
        let want = reader.link_type();
        let small = pool.max_packet() as usize;
        let big = pool.max_big_packet() as usize;
        let mut failed = None;
        while batch.room() > 0 {
            let Some(mut addr) = batch.alloc() else { break };
            match reader.next_packet() {
                Ok(Some(rec)) => {
                    if rec.link != want {
                        batch.free_addr(addr);
                        other += 1;
                        continue;
                    }
                    let len = rec.data.len();
                    let wire_len = rec.wire_len.max(len as u32);
                    if len > small {
                        batch.free_addr(addr);
                        if len > big {
                            // A pool without big frames (or a record past the reader's limit):
                            // dropped whole and counted, never cut.
                            too_big += 1;
                            continue;
                        }
                        match batch.alloc_big() {
                            Some(b) => addr = b,
                            None => {
                                // Every big frame is out: keep the record for the next call.
                                let mut data = Vec::with_capacity(len);
                                data.extend_from_slice(rec.data);
                                *held = Some(Held {
                                    ts: rec.ts,
                                    wire_len,
                                    data,
                                });
                                break;
                            }
                        }
                    }
                    let frame = batch.frame_mut(addr);
                    if let (Some(dst), Some(src)) = (frame.get_mut(..len), rec.data.get(..len)) {
                        dst.copy_from_slice(src);
                    }
                    batch.push(Desc {
                        addr,
                        ts: rec.ts,
                        len: len as u32,
                        wire_len,
                        ..Default::default()
                    });
                    n += 1;
                    bytes += u64::from(wire_len);
                }
                Ok(None) => {
                    batch.free_addr(addr);
                    // Not done: the source has nothing now (a FIFO or stdin); more may come.
                    self.finished = reader.is_done();
                    break;
                }
                Err(e) => {
                    batch.free_addr(addr);
                    self.finished = true;
                    failed = Some(e);
                    break;
                }
            }
        }
        self.stats.rx_packets += n as u64;
        self.stats.rx_bytes += bytes;
        self.stats.rx_drops.add(DropReason::Malformed, other);
        self.stats.rx_drops.add(DropReason::TooBig, too_big);
        match failed {
            Some(e) if n == 0 => Err(e),
            Some(e) => {
                self.pending = Some(e);
                Ok(n)
            }
            None => Ok(n),
        }
    }

    fn tx(&mut self, batch: &mut Batch) -> Result<usize, PortError> {
        let Mode::Write { writer, path } = &mut self.mode else {
            return Err(PortError::Unsupported {
                port: self.name.clone(),
                op: "tx on a file opened for reading",
            });
        };
        let n = batch.len();
        let r = writer.write_batch(batch);
        batch.clear();
        match r {
            Ok(_) => {
                self.stats.tx_packets = writer.packets();
                self.stats.tx_bytes = writer.bytes();
                Ok(n)
            }
            Err(source) => Err(PortError::Io {
                path: path.clone(),
                source,
            }),
        }
    }

    fn flush(&mut self) -> Result<(), PortError> {
        if let Mode::Write { writer, path } = &mut self.mode {
            writer.flush().map_err(|source| PortError::Io {
                path: path.clone(),
                source,
            })?;
        }
        Ok(())
    }

    fn stats(&mut self) -> PortStats {
        self.stats
    }

    fn link_type(&self) -> LinkType {
        match &self.mode {
            Mode::Read { reader, .. } => reader.link_type(),
            Mode::Write { writer, .. } => writer.link_type(),
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

    fn snaplen(&self) -> Option<u32> {
        match &self.mode {
            Mode::Read { reader, .. } => Some(reader.snaplen()).filter(|&s| s > 0),
            Mode::Write { writer, .. } => Some(writer.snaplen()),
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests;

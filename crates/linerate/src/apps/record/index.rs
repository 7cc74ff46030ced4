//! The per-file index of a recorded capture: which blocks of the file hold packets of an
//! address, a port, a protocol, a VLAN or an ethertype (Stenographer's and n2disk's idea: narrow
//! a search to a few blocks, then read only those).
//!
//! An index lives in a sidecar file `CAPTURE.idx` next to its capture file (`CAPTURE` is the
//! capture's full name). It is a *superset* for tcpdump's semantics: every packet a libpcap
//! filter term `host`, `net`, `port`, `proto`/`ip proto`/`ip6 proto`, `vlan`, `ether proto` (and
//! `tcp`/`udp`/`icmp`/`arp`... built on them) can match lies in a block that posts the term's
//! key, so running the whole filter on the packets of the chosen blocks gives tcpdump's answer.
//! Blocks holding a packet the indexer could not parse are [`FileIndex::opaque`]: they match every
//! term.
//!
//! What a frame posts (after the link header: Ethernet, Linux SLL/SLL2, raw IP 101/228/229,
//! null/loop 0/108; anything else is opaque):
//! - [`Key::Vlan`] for each 802.1Q/802.1ad/0x9100 tag and [`Key::Tagged`] for a tagged frame,
//!   then [`Key::EtherType`] of the type after the tags (and 0x0800/0x86dd for IP carried in MPLS
//!   or a PPPoE session);
//! - IPv4: source and destination, the protocol, and for TCP/UDP/SCTP the two ports unless the
//!   packet is a non-first fragment; the header length is taken from the IHL as libpcap's code does
//!   (no sanity check: a filter reads the bytes where the header says);
//! - IPv6: source and destination, every next-header value along the extension-header chain and
//!   the final one, the ports of TCP/UDP/SCTP unless behind a non-first fragment;
//! - ARP/RARP: the sender and target protocol addresses (at libpcap's fixed offsets and, if the
//!   header says other lengths, where the header says);
//! - MPLS: labels are skipped; at every label depth whose next nibble reads 4 or 6, the bytes are
//!   indexed as IPv4/IPv6 (libpcap's `mpls` shifts one label per keyword and checks that nibble);
//! - PPPoE session: PPP protocol 0x0021/0x0057 carry IPv4/IPv6.
//! - 802.3 frames (a length in place of the type) and unknown null/loop families are opaque.

use crate::port::pcap::PcapReader;
use crate::port::PortError;
use crate::wire::LinkType;
use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// A block closes once it holds this many bytes of records (or [`BLOCK_PACKETS`] packets).
pub const BLOCK_BYTES: u64 = 1 << 20;
/// A block closes once it holds this many packets.
pub const BLOCK_PACKETS: u32 = 16_384;
/// Suffix of an index file: `CAPTURE` + `.idx`.
pub const SUFFIX: &str = ".idx";
/// Most bytes of the capture's head (file header, pcapng SHB and IDBs) the index fingerprints.
const HEAD_MAX: u64 = 64 << 10;
/// Bytes of the first record the index fingerprints besides the head (its time and lengths).
const FIRST_MAX: u64 = 64;
const MAGIC: &[u8; 8] = b"LRATEIDX";
const VERSION: u32 = 3;
/// One entry of a section's offset table per this many keys.
const STRIDE: usize = 16;

/// One block of a capture file: a run of whole records.
///
/// `offset..offset + len` holds whole records: classic pcap records (16-byte header + data) or
/// pcapng blocks (EPB/SPB/PB, and any other block that lies between two of its packets). A reader
/// of a block must first read the file's head, `0..blocks()[0].offset`: the 24-byte pcap header,
/// or the pcapng section header and interface descriptions (a pcapng file that describes more
/// interfaces after its first packet must be read in order up to the block instead).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockInfo {
    /// Byte offset of the block's first record in the capture file.
    pub offset: u64,
    /// Bytes from `offset` to the end of the block's last record.
    pub len: u64,
    /// Earliest packet time in the block, ns since the Unix epoch.
    pub first_ns: u64,
    /// Latest packet time in the block, ns since the Unix epoch.
    pub last_ns: u64,
    /// Packets in the block.
    pub packets: u32,
}

/// What a block can be looked up by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Key {
    /// An IPv4 address (source, destination, ARP sender or target).
    Ip4([u8; 4]),
    /// An IPv6 address (source or destination).
    Ip6([u8; 16]),
    /// A TCP, UDP or SCTP port (source or destination).
    Port(u16),
    /// An IP protocol number (IPv4's protocol, any IPv6 next header of the chain).
    Proto(u8),
    /// A VLAN id (any tag of the frame).
    Vlan(u16),
    /// Any VLAN-tagged frame.
    Tagged,
    /// The ethertype after the VLAN tags.
    EtherType(u16),
}

/// A set of block numbers of one file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockSet {
    words: Vec<u64>,
    n: usize,
}

impl BlockSet {
    /// No block of a file of `n` blocks.
    pub fn new_empty(n: usize) -> BlockSet {
        BlockSet {
            words: vec![0; n.div_ceil(64)],
            n,
        }
    }

    /// Every block of a file of `n` blocks.
    pub fn all(n: usize) -> BlockSet {
        let mut s = BlockSet::new_empty(n);
        for w in s.words.iter_mut() {
            *w = !0;
        }
        s.trim();
        s
    }

    fn trim(&mut self) {
        let rem = self.n % 64;
        if rem != 0 {
            if let Some(last) = self.words.last_mut() {
                *last &= (1u64 << rem) - 1;
            }
        }
    }

    /// The number of blocks of the file (the universe), not of the set: see [`BlockSet::count`].
    pub fn len(&self) -> usize {
        self.n
    }

    /// Blocks in the set.
    pub fn count(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// Whether no block is in the set.
    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|&w| w == 0)
    }

    /// Adds block `b` (ignored past the universe).
    pub fn insert(&mut self, b: usize) {
        if b < self.n {
            self.words[b / 64] |= 1 << (b % 64);
        }
    }

    /// Whether block `b` is in the set.
    pub fn contains(&self, b: usize) -> bool {
        b < self.n && self.words[b / 64] & (1 << (b % 64)) != 0
    }

    /// Keeps the blocks also in `other` (sets of different universes: the smaller one wins).
    pub fn and_with(&mut self, other: &BlockSet) {
        for (i, w) in self.words.iter_mut().enumerate() {
            *w &= other.words.get(i).copied().unwrap_or(0);
        }
    }

    /// Adds the blocks of `other`.
    pub fn or_with(&mut self, other: &BlockSet) {
        for (w, o) in self.words.iter_mut().zip(&other.words) {
            *w |= o;
        }
        self.trim();
    }

    /// The blocks in both.
    pub fn and(mut self, other: &BlockSet) -> BlockSet {
        self.and_with(other);
        self
    }

    /// The blocks in either.
    pub fn or(mut self, other: &BlockSet) -> BlockSet {
        self.or_with(other);
        self
    }

    /// The blocks of the universe not in the set.
    pub fn complement(mut self) -> BlockSet {
        for w in self.words.iter_mut() {
            *w = !*w;
        }
        self.trim();
        self
    }

    /// Block numbers in the set, ascending.
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.words.iter().enumerate().flat_map(|(i, &w)| {
            let mut w = w;
            std::iter::from_fn(move || {
                if w == 0 {
                    return None;
                }
                let b = w.trailing_zeros() as usize;
                w &= w - 1;
                Some(i * 64 + b)
            })
        })
    }
}

/// Why an index could not be read, built or written.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    /// No index file.
    #[error("{path}: no index (rebuild it from its capture)")]
    Missing {
        /// The index file.
        path: PathBuf,
    },
    /// The index file is damaged.
    #[error("{path}: corrupt index: {why} (rebuild it from its capture)")]
    Corrupt {
        /// The index file.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// The index does not describe its capture file as it is now.
    #[error("{path}: stale index: {why} (rebuild it from its capture)")]
    Stale {
        /// The index file.
        path: PathBuf,
        /// What differs.
        why: String,
    },
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The capture file could not be read.
    #[error(transparent)]
    Capture(#[from] PortError),
}

/// The index file of a capture file: `CAPTURE.idx`.
pub fn index_path(capture: &Path) -> PathBuf {
    let mut s = capture.as_os_str().to_owned();
    s.push(SUFFIX);
    PathBuf::from(s)
}

/// The index of one capture file.
///
/// It keeps the encoded sections as they are on disk: a lookup searches a section's sorted keys
/// and decodes that key's posting list alone (equality compares the encodings).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileIndex {
    link: LinkType,
    blocks: Vec<BlockInfo>,
    /// Offset of the first record (the end of the file's head).
    data_start: u64,
    /// End of the last indexed record.
    end: u64,
    /// Fingerprint of the capture's head, `0..min(data_start, HEAD_MAX)`, and its first record's
    /// first bytes ([`head_hash`]; 0 before saving).
    head_hash: u64,
    /// The encoded sections (see "the file format" below), checked by [`Sections::parse`].
    raw: Vec<u8>,
    sec: Sections,
    tagged: Vec<u32>,
    opaque: Vec<u32>,
}

/// Where one section of [`FileIndex::raw`] lies.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Section {
    /// Bytes of a key.
    width: usize,
    /// Keys.
    count: usize,
    /// Start of the sorted keys.
    keys: usize,
    /// Start of the offset table (u32 nibble offsets, one per [`STRIDE`] keys).
    offs: usize,
    /// The nibble stream of the keys' posting lists.
    stream: (usize, usize),
}

/// The sections ip4, ip6, port, proto, vlan, ethertype.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Sections([Section; 6]);

const S_IP4: usize = 0;
const S_IP6: usize = 1;
const S_PORT: usize = 2;
const S_PROTO: usize = 3;
const S_VLAN: usize = 4;
const S_ET: usize = 5;
const WIDTHS: [usize; 6] = [4, 16, 2, 1, 2, 2];

impl FileIndex {
    /// Reads `CAPTURE.idx`. An error if it is missing, damaged (checksum, layout), or stale: the
    /// capture is shorter than what the index covers, or its head (file header, pcapng SHB and
    /// IDBs) differs from the one indexed.
    pub fn load(capture: &Path) -> Result<FileIndex, IndexError> {
        let path = index_path(capture);
        let bytes = match read_index(&path, capture) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(IndexError::Missing { path })
            }
            Err(source) => return Err(IndexError::Io { path, source }),
        };
        let idx = decode(&bytes).map_err(|why| IndexError::Corrupt {
            path: path.clone(),
            why,
        })?;
        let len = std::fs::metadata(capture)
            .map_err(|source| IndexError::Io {
                path: capture.to_path_buf(),
                source,
            })?
            .len();
        if len < idx.end {
            return Err(IndexError::Stale {
                path,
                why: format!(
                    "the capture holds {len} bytes, the index covers {}",
                    idx.end
                ),
            });
        }
        let h = head_hash(capture, idx.data_start, idx.end)?;
        if h != idx.head_hash {
            return Err(IndexError::Stale {
                path,
                why: "the capture's file header or first record differs from the one indexed \
                      (the index of another file?)"
                    .into(),
            });
        }
        Ok(idx)
    }

    /// Indexes a pcap or pcapng capture file by reading it whole. A record cut at the end (or
    /// any damage) ends the index at the last whole record before it: see
    /// [`FileIndex::indexed_end`].
    pub fn build(capture: &Path) -> Result<FileIndex, IndexError> {
        let name = capture.display().to_string();
        let f = File::open(capture).map_err(|source| IndexError::Io {
            path: capture.to_path_buf(),
            source,
        })?;
        let mut r = PcapReader::new(f, &name)?;
        let mut w = IndexWriter::new(r.link_type());
        let mut data = Vec::new();
        while let Ok(Some(rec)) = r.next_packet() {
            data.clear();
            data.extend_from_slice(rec.data);
            let (off, ts, link) = (rec.offset, rec.ts, rec.link);
            let end = r.offset().max(off);
            w.on_packet_link(off, end - off, ts, &data, link);
        }
        if w.blocks.is_empty() && w.cur.packets == 0 {
            // No packet: the head is everything read.
            w.data_start = r.offset();
        }
        Ok(w.finish())
    }

    /// Writes `CAPTURE.idx` atomically (a temporary file renamed over it).
    pub fn save(&self, capture: &Path) -> Result<(), IndexError> {
        let mut me = self.clone();
        me.head_hash = head_hash(capture, me.data_start, me.end)?;
        let bytes = encode(&me);
        let path = index_path(capture);
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        let io = |source| IndexError::Io {
            path: tmp.clone(),
            source,
        };
        let _ = std::fs::remove_file(&tmp);
        let written = create_new(&tmp).and_then(|mut f| f.write_all(&bytes));
        let res = match written {
            Ok(()) => std::fs::rename(&tmp, &path).map_err(|source| IndexError::Io {
                path: path.clone(),
                source,
            }),
            Err(e) => Err(io(e)),
        };
        if res.is_err() {
            // A full disk leaves no half-written temporary behind.
            let _ = std::fs::remove_file(&tmp);
        }
        res
    }

    /// The blocks, in file order.
    pub fn blocks(&self) -> &[BlockInfo] {
        &self.blocks
    }

    /// Earliest and latest packet times, ns since the epoch (None without packets).
    pub fn time_range(&self) -> Option<(u64, u64)> {
        let first = self.blocks.iter().map(|b| b.first_ns).min()?;
        let last = self.blocks.iter().map(|b| b.last_ns).max()?;
        Some((first, last))
    }

    /// Every block that holds at least one packet posting `key`.
    pub fn lookup(&self, key: &Key) -> BlockSet {
        let (sec, k): (usize, &[u8]) = match key {
            Key::Ip4(a) => (S_IP4, a),
            Key::Ip6(a) => (S_IP6, a),
            Key::Port(p) => (S_PORT, &p.to_be_bytes()),
            Key::Proto(p) => (S_PROTO, &[*p]),
            Key::Vlan(v) => (S_VLAN, &v.to_be_bytes()),
            Key::EtherType(t) => (S_ET, &t.to_be_bytes()),
            Key::Tagged => return self.set(&self.tagged),
        };
        // `k` borrows temporaries of the match arms: search inside.
        let s = &self.sec.0[sec];
        match self.find(s, k) {
            Some(i) => self.list_at(s, i),
            None => BlockSet::new_empty(self.blocks.len()),
        }
    }

    fn set(&self, l: &[u32]) -> BlockSet {
        let mut s = BlockSet::new_empty(self.blocks.len());
        for &b in l {
            s.insert(b as usize);
        }
        s
    }

    fn key(&self, s: &Section, i: usize) -> &[u8] {
        let at = s.keys + i * s.width;
        &self.raw[at..at + s.width]
    }

    /// The position of `k` among the section's keys.
    fn find(&self, s: &Section, k: &[u8]) -> Option<usize> {
        let (mut lo, mut hi) = (0, s.count);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.key(s, mid).cmp(k) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Some(mid),
            }
        }
        None
    }

    fn stream(&self, s: &Section) -> &[u8] {
        &self.raw[s.stream.0..s.stream.1]
    }

    /// The blocks of the section's key `i`: its list decoded alone (from the offset table's entry
    /// before it). A list that does not decode gives every block: a superset, never wrong.
    fn list_at(&self, s: &Section, i: usize) -> BlockSet {
        let n = self.blocks.len();
        let g = i / STRIDE;
        let at = s.offs + g * 4;
        let off = u32::from_le_bytes([
            self.raw[at],
            self.raw[at + 1],
            self.raw[at + 2],
            self.raw[at + 3],
        ]);
        let mut r = NibbleReader {
            b: self.stream(s),
            at: off as usize,
        };
        let mut go = || {
            for _ in g * STRIDE..i {
                r.skip_list(n)?;
            }
            let mut set = BlockSet::new_empty(n);
            r.list_into(n, &mut set)?;
            Ok::<_, String>(set)
        };
        go().unwrap_or_else(|_| BlockSet::all(n))
    }

    /// Every key of a section, ascending, with its blocks, decoded as iterated.
    fn keys_of(&self, sec: usize) -> impl Iterator<Item = (&[u8], BlockSet)> + '_ {
        let s = self.sec.0[sec];
        let n = self.blocks.len();
        let mut r = NibbleReader {
            b: self.stream(&s),
            at: 0,
        };
        let mut broken = false;
        (0..s.count).map(move |i| {
            let mut set = BlockSet::new_empty(n);
            if !broken && r.list_into(n, &mut set).is_err() {
                // Where the next list starts is unknown: every block for the rest.
                broken = true;
            }
            if broken {
                set = BlockSet::all(n);
            }
            (self.key(&s, i), set)
        })
    }

    /// Every IPv4 address posted, ascending, with its blocks (for `net` terms).
    pub fn ip4_keys(&self) -> impl Iterator<Item = ([u8; 4], BlockSet)> + '_ {
        self.keys_of(S_IP4)
            .map(|(k, s)| ([k[0], k[1], k[2], k[3]], s))
    }

    /// Every IPv6 address posted, ascending, with its blocks (for `net` terms).
    pub fn ip6_keys(&self) -> impl Iterator<Item = ([u8; 16], BlockSet)> + '_ {
        self.keys_of(S_IP6).map(|(k, s)| {
            let mut a = [0u8; 16];
            a.copy_from_slice(k);
            (a, s)
        })
    }

    /// Every port posted, ascending, with its blocks (for `portrange` terms).
    pub fn port_keys(&self) -> impl Iterator<Item = (u16, BlockSet)> + '_ {
        self.keys_of(S_PORT)
            .map(|(k, s)| (u16::from_be_bytes([k[0], k[1]]), s))
    }

    /// Blocks holding a packet the indexer could not parse: they match every term.
    pub fn opaque(&self) -> BlockSet {
        self.set(&self.opaque)
    }

    /// The link type of the capture (its first interface's, in pcapng).
    pub fn link_type(&self) -> LinkType {
        self.link
    }

    /// End of the last indexed record: a file still being written (or cut) may hold more
    /// records past it, which a reader must scan itself.
    pub fn indexed_end(&self) -> u64 {
        self.end
    }

    /// Offset of the first record: the capture's head is `0..data_start()`.
    pub fn data_start(&self) -> u64 {
        self.data_start
    }

    /// Packets indexed.
    pub fn packets(&self) -> u64 {
        self.blocks.iter().map(|b| u64::from(b.packets)).sum()
    }
}

fn create_new(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o640)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

/// The bytes of an index file: a regular file, not a link (O_NOFOLLOW), no larger than its
/// capture and 1 MiB (an index is a few % of it). A FIFO planted under the index's name hung
/// the query (and the recorder's start), a link to /dev/zero or to a huge file filled memory.
fn read_index(path: &Path, capture: &Path) -> std::io::Result<Vec<u8>> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
    let m = f.metadata()?;
    let most = std::fs::metadata(capture)?.len().saturating_add(1 << 20);
    if !m.is_file() || m.len() > most {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "not an index: {} (a regular file of at most {most} bytes is)",
                if m.is_file() {
                    format!("{} bytes", m.len())
                } else {
                    "not a regular file".to_string()
                }
            ),
        ));
    }
    let mut bytes = Vec::with_capacity(m.len() as usize);
    f.take(most).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// The fingerprint of a capture an index is of: its head (`0..min(data_start, HEAD_MAX)`) and the
/// first [`FIRST_MAX`] bytes of its first record (what of them the index covers, up to `end`):
/// the heads of two files of one recorder are the same, their first records (times) differ, so
/// the index of another file copied or renamed beside a capture is stale, not trusted.
fn head_hash(capture: &Path, data_start: u64, end: u64) -> Result<u64, IndexError> {
    let first = end.saturating_sub(data_start).min(FIRST_MAX) as usize;
    let n = data_start.min(HEAD_MAX) as usize;
    let mut buf = vec![0u8; n];
    let io = |source| IndexError::Io {
        path: capture.to_path_buf(),
        source,
    };
    let mut f = File::open(capture).map_err(io)?;
    let mut got = 0;
    while got < n {
        match f.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(k) => got += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io(e)),
        }
    }
    buf.truncate(got);
    let mut rec = vec![0u8; first];
    let mut got = 0;
    while got < first {
        use std::os::unix::fs::FileExt;
        match f.read_at(&mut rec[got..], data_start + got as u64) {
            Ok(0) => break,
            Ok(k) => got += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io(e)),
        }
    }
    rec.truncate(got);
    buf.extend_from_slice(&rec);
    Ok(checksum(&buf) ^ (n as u64) ^ ((first as u64) << 32))
}

/// A 64-bit checksum of the index bytes (word-wise multiply-rotate; catches damage, not forgery).
fn checksum(b: &[u8]) -> u64 {
    let mut h: u64 = 0x9e37_79b9_7f4a_7c15 ^ b.len() as u64;
    let mut chunks = b.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        h = (h ^ w).wrapping_mul(0x0000_0100_0000_01b3).rotate_left(29) ^ (h >> 17);
    }
    for &x in chunks.remainder() {
        h = (h ^ u64::from(x))
            .wrapping_mul(0x0000_0100_0000_01b3)
            .rotate_left(29);
    }
    h ^ (h >> 31)
}

/// The block currently filling.
#[derive(Clone, Copy, Debug, Default)]
struct Open {
    offset: u64,
    end: u64,
    first_ns: u64,
    last_ns: u64,
    packets: u32,
}

/// Postings of one key while writing: its blocks in order.
type Posts = Vec<u32>;

/// Where the frame parser ([`Poster`]) puts a frame's keys.
trait Keys {
    fn ip4(&mut self, a: [u8; 4]);
    fn ip6(&mut self, a: [u8; 16]);
    fn port(&mut self, p: u16);
    fn proto(&mut self, p: u8);
    fn vlan(&mut self, v: u16);
    fn tagged(&mut self);
    fn et(&mut self, t: u16);
}

/// A set of 16-bit values as a bitmap: one bit set per packet, read once per block.
#[derive(Clone, Debug)]
struct Bits16(Box<[u64; 1024]>);

impl Default for Bits16 {
    fn default() -> Bits16 {
        Bits16(Box::new([0; 1024]))
    }
}

impl Bits16 {
    #[inline(always)]
    fn set(&mut self, v: u16) {
        self.0[usize::from(v >> 6)] |= 1 << (v & 63);
    }
    fn get(&self, v: u16) -> bool {
        self.0[usize::from(v >> 6)] & (1 << (v & 63)) != 0
    }
    /// Hands every value set to `f`, ascending.
    fn each(&self, mut f: impl FnMut(u16)) {
        for (i, &w) in self.0.iter().enumerate() {
            let mut x = w;
            while x != 0 {
                f((i * 64) as u16 + x.trailing_zeros() as u16);
                x &= x - 1;
            }
        }
    }
    /// Hands every value set to `f`, ascending, and clears the set.
    fn drain(&mut self, mut f: impl FnMut(u16)) {
        for (i, w) in self.0.iter_mut().enumerate() {
            let mut x = std::mem::take(w);
            while x != 0 {
                f((i * 64) as u16 + x.trailing_zeros() as u16);
                x &= x - 1;
            }
        }
    }
}

/// The keys of the block filling, as its packets gave them: addresses appended (sorted and
/// deduplicated when the block closes), the rest as bitmaps. No hash, no allocation per packet
/// (the vectors are kept from block to block).
#[derive(Clone, Debug, Default)]
struct Pending {
    /// IPv4 addresses as big-endian numbers (number order is byte order).
    ip4: Vec<u32>,
    /// IPv6 addresses as big-endian numbers.
    ip6: Vec<u128>,
    /// Addresses already in `ip4`/`ip6` this block, by a hash of them (a slot holds the
    /// latest address of its hash): a packet of a flow the block already holds appends
    /// nothing, so the block's sort at its close has few addresses to order. Cleared with the
    /// block.
    seen: Seen,
    port: Bits16,
    proto: [u64; 4],
    vlan: Bits16,
    et: Bits16,
    tagged: bool,
    opaque: bool,
}

/// Slots of [`Seen`]'s IPv4 table (a power of two).
const SEEN4: usize = 64;
/// Slots of [`Seen`]'s IPv6 table (a power of two).
const SEEN6: usize = 16;

/// A small direct-mapped table of the addresses a block already posted (see
/// [`Pending::seen`]); a slot is empty or holds one address, so a hit is exact.
#[derive(Clone, Debug)]
struct Seen {
    /// `1 << 32 | address` (0: empty).
    ip4: [u64; SEEN4],
    ip6: [u128; SEEN6],
    /// Which `ip6` slots hold an address.
    ip6_full: u32,
}

impl Default for Seen {
    fn default() -> Seen {
        Seen {
            ip4: [0; SEEN4],
            ip6: [0; SEEN6],
            ip6_full: 0,
        }
    }
}

impl Seen {
    /// Whether `v` is in the table; puts it in if not.
    #[inline(always)]
    fn ip4(&mut self, v: u32) -> bool {
        let slot = (v.wrapping_mul(0x9E37_79B1) >> 26) as usize & (SEEN4 - 1);
        let e = 1 << 32 | u64::from(v);
        let hit = self.ip4[slot] == e;
        self.ip4[slot] = e;
        hit
    }
    /// Whether `v` is in the table; puts it in if not.
    #[inline(always)]
    fn ip6(&mut self, v: u128) -> bool {
        let h = (v as u64 ^ (v >> 64) as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let slot = (h >> 60) as usize & (SEEN6 - 1);
        let hit = self.ip6_full & (1 << slot) != 0 && self.ip6[slot] == v;
        self.ip6[slot] = v;
        self.ip6_full |= 1 << slot;
        hit
    }
    fn clear(&mut self) {
        *self = Seen::default();
    }
}

impl Keys for Pending {
    #[inline(always)]
    fn ip4(&mut self, a: [u8; 4]) {
        let v = u32::from_be_bytes(a);
        if !self.seen.ip4(v) {
            self.ip4.push(v);
        }
    }
    #[inline(always)]
    fn ip6(&mut self, a: [u8; 16]) {
        let v = u128::from_be_bytes(a);
        if !self.seen.ip6(v) {
            self.ip6.push(v);
        }
    }
    #[inline(always)]
    fn port(&mut self, p: u16) {
        self.port.set(p);
    }
    #[inline(always)]
    fn proto(&mut self, p: u8) {
        self.proto[usize::from(p >> 6)] |= 1 << (p & 63);
    }
    #[inline(always)]
    fn vlan(&mut self, v: u16) {
        self.vlan.set(v);
    }
    #[inline(always)]
    fn tagged(&mut self) {
        self.tagged = true;
    }
    #[inline(always)]
    fn et(&mut self, t: u16) {
        self.et.set(t);
    }
}

/// The postings of one address family for the whole file: each distinct address gets an id
/// when a block first holds it; each block appends the ids of its distinct addresses. The
/// per-key lists are made at [`IndexWriter::finish`] (a counting sort by id): 4 bytes per
/// (address, block), no vector per address.
#[derive(Clone, Debug, Default)]
struct Addrs<K> {
    ids: rustc_hash::FxHashMap<K, u32>,
    /// Ids of each block's distinct addresses, block after block.
    posts: Vec<u32>,
    /// End of each block's ids in `posts`.
    cuts: Vec<usize>,
}

impl<K: Copy + Ord + std::hash::Hash> Addrs<K> {
    /// Posts the block's addresses (`keys`, any order, repeats allowed; left empty).
    fn close_block(&mut self, keys: &mut Vec<K>) {
        keys.sort_unstable();
        keys.dedup();
        for &k in keys.iter() {
            let next = self.ids.len() as u32;
            let id = *self.ids.entry(k).or_insert(next);
            self.posts.push(id);
        }
        self.cuts.push(self.posts.len());
        keys.clear();
    }

    /// Every address, ascending, with where its list of blocks lies in the second vector (the
    /// lists end to end), the closed blocks' and then those of `open` (the open block's
    /// addresses, ascending, distinct) as one more block.
    fn lists(&self, open: &[K]) -> (Vec<(K, std::ops::Range<usize>)>, Vec<u32>) {
        let n = self.ids.len();
        // The open block's addresses not seen before get the ids after the map's.
        let mut fresh = Vec::new();
        let open_ids: Vec<u32> = open
            .iter()
            .map(|k| {
                self.ids.get(k).copied().unwrap_or_else(|| {
                    fresh.push(*k);
                    (n + fresh.len() - 1) as u32
                })
            })
            .collect();
        let n = n + fresh.len();
        let mut start = vec![0usize; n + 1];
        for &id in self.posts.iter().chain(&open_ids) {
            start[id as usize + 1] += 1;
        }
        for i in 0..n {
            start[i + 1] += start[i];
        }
        let mut at = start.clone();
        let mut blocks = vec![0u32; start[n]];
        let mut from = 0;
        let runs = self.cuts.iter().map(|&to| {
            let r = &self.posts[from..to];
            from = to;
            r
        });
        for (b, run) in runs.chain([&open_ids[..]]).enumerate() {
            for &id in run {
                blocks[at[id as usize]] = b as u32;
                at[id as usize] += 1;
            }
        }
        let mut keys: Vec<(K, std::ops::Range<usize>)> = self
            .ids
            .iter()
            .map(|(&k, &id)| (k, id as usize))
            .chain(
                fresh
                    .iter()
                    .enumerate()
                    .map(|(j, &k)| (k, self.ids.len() + j)),
            )
            .map(|(k, id)| (k, start[id]..start[id + 1]))
            .collect();
        keys.sort_unstable_by_key(|a| a.0);
        (keys, blocks)
    }
}

/// Builds a [`FileIndex`] packet by packet, as a file is written.
///
/// Per packet no hash and no allocation in steady state: a packet's keys go to the open block's
/// `Pending` (addresses appended to vectors kept from block to block, the rest set in
/// bitmaps); a block's close sorts and deduplicates its addresses and posts each distinct key
/// once.
#[derive(Clone, Debug)]
pub struct IndexWriter {
    link: LinkType,
    block_bytes: u64,
    block_packets: u32,
    blocks: Vec<BlockInfo>,
    /// Packets of `blocks` (the recorder asks per packet: no walk over the blocks).
    closed_packets: u64,
    cur: Open,
    data_start: u64,
    pending: Pending,
    ip4: Addrs<u32>,
    ip6: Addrs<u128>,
    port: Box<[Posts]>,
    proto: Box<[Posts]>,
    vlan: HashMap<u16, Posts>,
    ethertype: HashMap<u16, Posts>,
    tagged: Posts,
    opaque: Posts,
}

impl IndexWriter {
    /// An index of a file of link type `link`, with blocks of [`BLOCK_BYTES`]/[`BLOCK_PACKETS`].
    pub fn new(link: LinkType) -> IndexWriter {
        IndexWriter::with_blocks(link, BLOCK_BYTES, BLOCK_PACKETS)
    }

    /// An index whose blocks close at `bytes` of records or `packets` packets (each at least 1).
    pub fn with_blocks(link: LinkType, bytes: u64, packets: u32) -> IndexWriter {
        IndexWriter {
            link,
            block_bytes: bytes.max(1),
            block_packets: packets.max(1),
            blocks: Vec::new(),
            closed_packets: 0,
            cur: Open::default(),
            data_start: 0,
            pending: Pending::default(),
            ip4: Addrs::default(),
            ip6: Addrs::default(),
            port: vec![Vec::new(); 65_536].into_boxed_slice(),
            proto: vec![Vec::new(); 256].into_boxed_slice(),
            vlan: HashMap::new(),
            ethertype: HashMap::new(),
            tagged: Vec::new(),
            opaque: Vec::new(),
        }
    }

    /// Indexes one packet: its record at `record_offset` of `record_len` bytes of the file (the
    /// whole record: header and data), its time and its captured bytes.
    #[inline]
    pub fn on_packet(&mut self, record_offset: u64, record_len: u64, ts_ns: u64, frame: &[u8]) {
        let link = self.link;
        self.on_packet_link(record_offset, record_len, ts_ns, frame, link);
    }

    /// As [`IndexWriter::on_packet`], for a packet of its own link type (pcapng interfaces).
    pub fn on_packet_link(
        &mut self,
        record_offset: u64,
        record_len: u64,
        ts_ns: u64,
        frame: &[u8],
        link: LinkType,
    ) {
        let end = record_offset.saturating_add(record_len);
        if self.cur.packets > 0
            && (end.saturating_sub(self.cur.offset) > self.block_bytes
                || self.cur.packets >= self.block_packets)
        {
            self.close_block();
        }
        if self.cur.packets == 0 {
            if self.blocks.is_empty() {
                self.data_start = record_offset;
            }
            self.cur = Open {
                offset: record_offset,
                end,
                first_ns: ts_ns,
                last_ns: ts_ns,
                packets: 0,
            };
        }
        self.cur.packets += 1;
        self.cur.end = self.cur.end.max(end);
        self.cur.first_ns = self.cur.first_ns.min(ts_ns);
        self.cur.last_ns = self.cur.last_ns.max(ts_ns);
        let mut p = Poster {
            k: &mut self.pending,
        };
        if !p.frame(frame, link) {
            self.pending.opaque = true;
        }
    }

    fn close_block(&mut self) {
        let b = self.blocks.len() as u32;
        let p = &mut self.pending;
        self.ip4.close_block(&mut p.ip4);
        self.ip6.close_block(&mut p.ip6);
        p.seen.clear();
        p.port.drain(|v| self.port[usize::from(v)].push(b));
        for (i, w) in p.proto.iter_mut().enumerate() {
            let mut x = std::mem::take(w);
            while x != 0 {
                self.proto[i * 64 + x.trailing_zeros() as usize].push(b);
                x &= x - 1;
            }
        }
        p.vlan.drain(|v| self.vlan.entry(v).or_default().push(b));
        p.et.drain(|v| self.ethertype.entry(v).or_default().push(b));
        if std::mem::take(&mut p.tagged) {
            self.tagged.push(b);
        }
        if std::mem::take(&mut p.opaque) {
            self.opaque.push(b);
        }
        let c = self.cur;
        self.blocks.push(BlockInfo {
            offset: c.offset,
            len: c.end - c.offset,
            first_ns: c.first_ns,
            last_ns: c.last_ns,
            packets: c.packets,
        });
        self.closed_packets += u64::from(c.packets);
        self.cur = Open::default();
    }

    /// Packets indexed so far.
    #[inline]
    pub fn packets(&self) -> u64 {
        self.closed_packets + u64::from(self.cur.packets)
    }

    /// The index of what was indexed so far (the open block included), leaving the writer as it
    /// is: for the file still being written. Nothing of the writer is copied but the open
    /// block's addresses.
    pub fn snapshot(&self) -> FileIndex {
        let open = self.cur.packets > 0;
        let mut blocks = self.blocks.clone();
        // The open block, numbered after the closed ones, goes in as one more block of each of
        // its keys' lists.
        let ob = blocks.len() as u32;
        let p = &self.pending;
        let mut ip4_open = Vec::new();
        let mut ip6_open = Vec::new();
        if open {
            let c = self.cur;
            blocks.push(BlockInfo {
                offset: c.offset,
                len: c.end - c.offset,
                first_ns: c.first_ns,
                last_ns: c.last_ns,
                packets: c.packets,
            });
            ip4_open.extend_from_slice(&p.ip4);
            ip4_open.sort_unstable();
            ip4_open.dedup();
            ip6_open.extend_from_slice(&p.ip6);
            ip6_open.sort_unstable();
            ip6_open.dedup();
        }
        let then = |set: bool| (open && set).then_some(ob);
        let end = blocks.last().map_or(self.data_start, |b| b.offset + b.len);
        let mut raw = Vec::new();
        let (ip4, ip4_blocks) = self.ip4.lists(&ip4_open);
        let ip4: Vec<([u8; 4], &[u32])> = ip4
            .into_iter()
            .map(|(k, r)| (k.to_be_bytes(), &ip4_blocks[r]))
            .collect();
        let (ip6, ip6_blocks) = self.ip6.lists(&ip6_open);
        let ip6: Vec<([u8; 16], &[u32])> = ip6
            .into_iter()
            .map(|(k, r)| (k.to_be_bytes(), &ip6_blocks[r]))
            .collect();
        let port: Vec<([u8; 2], &[u32], Option<u32>)> = (0..=u16::MAX)
            .map(|k| (k, &self.port[usize::from(k)][..], then(p.port.get(k))))
            .filter(|(_, l, t)| !l.is_empty() || t.is_some())
            .map(|(k, l, t)| (k.to_be_bytes(), l, t))
            .collect();
        let proto: Vec<([u8; 1], &[u32], Option<u32>)> = (0..=u8::MAX)
            .map(|k| {
                let set = p.proto[usize::from(k >> 6)] & (1 << (k & 63)) != 0;
                (k, &self.proto[usize::from(k)][..], then(set))
            })
            .filter(|(_, l, t)| !l.is_empty() || t.is_some())
            .map(|(k, l, t)| ([k], l, t))
            .collect();
        type Sorted16<'a> = Vec<([u8; 2], &'a [u32], Option<u32>)>;
        fn sorted16<'a>(
            m: &'a HashMap<u16, Posts>,
            bits: &Bits16,
            ob: Option<u32>,
        ) -> Sorted16<'a> {
            let mut v: Vec<(u16, &[u32], Option<u32>)> = m
                .iter()
                .map(|(&k, l)| (k, &l[..], ob.filter(|_| bits.get(k))))
                .collect();
            if ob.is_some() {
                bits.each(|k| {
                    if !m.contains_key(&k) {
                        v.push((k, &[], ob));
                    }
                });
            }
            v.sort_unstable_by_key(|e| e.0);
            v.into_iter()
                .map(|(k, l, t)| (k.to_be_bytes(), l, t))
                .collect()
        }
        let vlan = sorted16(&self.vlan, &p.vlan, then(true));
        let ethertype = sorted16(&self.ethertype, &p.et, then(true));
        let sec = Sections([
            put_section(&mut raw, 4, ip4.iter().map(|(k, l)| (&k[..], *l, None))),
            put_section(&mut raw, 16, ip6.iter().map(|(k, l)| (&k[..], *l, None))),
            put_section(&mut raw, 2, port.iter().map(|(k, l, t)| (&k[..], *l, *t))),
            put_section(&mut raw, 1, proto.iter().map(|(k, l, t)| (&k[..], *l, *t))),
            put_section(&mut raw, 2, vlan.iter().map(|(k, l, t)| (&k[..], *l, *t))),
            put_section(
                &mut raw,
                2,
                ethertype.iter().map(|(k, l, t)| (&k[..], *l, *t)),
            ),
        ]);
        let mut tagged = self.tagged.clone();
        tagged.extend(then(p.tagged));
        let mut opaque = self.opaque.clone();
        opaque.extend(then(p.opaque));
        let mut n = Nibbles::default();
        n.list(&tagged, None);
        n.list(&opaque, None);
        n.put(&mut raw);
        FileIndex {
            link: self.link,
            blocks,
            data_start: self.data_start,
            end,
            head_hash: 0,
            raw,
            sec,
            tagged,
            opaque,
        }
    }

    /// The index.
    pub fn finish(self) -> FileIndex {
        self.snapshot()
    }
}

/// Appends a section of `items` (keys ascending, each with its posting list and maybe one more
/// block after it) to `o`: where it lies.
fn put_section<'a>(
    o: &mut Vec<u8>,
    width: usize,
    items: impl ExactSizeIterator<Item = (&'a [u8], &'a [u32], Option<u32>)>,
) -> Section {
    let count = items.len();
    o.extend_from_slice(&(count as u32).to_le_bytes());
    let keys = o.len();
    let mut n = Nibbles::default();
    let mut table = Vec::with_capacity(count.div_ceil(STRIDE));
    for (i, (k, l, then)) in items.enumerate() {
        o.extend_from_slice(k);
        debug_assert_eq!(k.len(), width);
        if i % STRIDE == 0 {
            table.push(n.nibbles() as u32);
        }
        n.list(l, then);
    }
    let offs = o.len();
    for t in table {
        o.extend_from_slice(&t.to_le_bytes());
    }
    o.extend_from_slice(&(n.bytes.len() as u32).to_le_bytes());
    let start = o.len();
    o.extend_from_slice(&n.bytes);
    Section {
        width,
        count,
        keys,
        offs,
        stream: (start, o.len()),
    }
}

const ETH_IP4: u16 = 0x0800;
const ETH_IP6: u16 = 0x86dd;
const ETH_ARP: u16 = 0x0806;
const ETH_RARP: u16 = 0x8035;
const ETH_MPLS: u16 = 0x8847;
const ETH_MPLS_MC: u16 = 0x8848;
const ETH_PPPOE_S: u16 = 0x8864;
const MAX_TAGS: usize = 8;
const MAX_LABELS: usize = 8;
const MAX_EXT: usize = 16;

#[inline(always)]
fn be16(b: &[u8], at: usize) -> Option<u16> {
    match b.get(at..at + 2) {
        Some(&[x, y]) => Some(u16::from_be_bytes([x, y])),
        _ => None,
    }
}

/// Parses one frame, handing its keys to `k`.
struct Poster<'a, K: Keys> {
    k: &'a mut K,
}

impl<K: Keys> Poster<'_, K> {
    /// Whether the frame could be parsed (false: the block is opaque).
    fn frame(&mut self, f: &[u8], link: LinkType) -> bool {
        match link {
            LinkType::ETHERNET => match be16(f, 12) {
                Some(t) => self.ether(f, 14, t),
                None => false,
            },
            LinkType::LINUX_SLL => match be16(f, 14) {
                Some(t) => self.ether(f, 16, t),
                None => false,
            },
            LinkType::LINUX_SLL2 => match be16(f, 0) {
                Some(t) => self.ether(f, 20, t),
                None => false,
            },
            LinkType::RAW | LinkType(12) | LinkType(14) => self.by_nibble(f, 0),
            LinkType::IPV4 => {
                self.et(ETH_IP4);
                self.ip4(f, 0);
                true
            }
            LinkType::IPV6 => {
                self.et(ETH_IP6);
                self.ip6(f, 0);
                true
            }
            LinkType::NULL | LinkType(108) => {
                let Some(h) = f.get(0..4) else {
                    return false;
                };
                let le = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
                let be = u32::from_be_bytes([h[0], h[1], h[2], h[3]]);
                let mut ok = false;
                for fam in [le, be] {
                    match fam {
                        2 => {
                            self.et(ETH_IP4);
                            self.ip4(f, 4);
                            ok = true;
                        }
                        10 | 24 | 28 | 30 => {
                            self.et(ETH_IP6);
                            self.ip6(f, 4);
                            ok = true;
                        }
                        _ => {}
                    }
                }
                ok
            }
            _ => false,
        }
    }

    #[inline]
    fn et(&mut self, t: u16) {
        self.k.et(t);
    }

    /// An IP packet told by its version nibble (raw IP, MPLS payloads).
    fn by_nibble(&mut self, f: &[u8], at: usize) -> bool {
        match f.get(at).map(|v| v >> 4) {
            Some(4) => {
                self.et(ETH_IP4);
                self.ip4(f, at);
                true
            }
            Some(6) => {
                self.et(ETH_IP6);
                self.ip6(f, at);
                true
            }
            Some(_) => false,
            None => false,
        }
    }

    /// The payload at `at` of ethertype `t`: VLAN tags first.
    fn ether(&mut self, f: &[u8], mut at: usize, mut t: u16) -> bool {
        let mut tags = 0;
        while matches!(t, 0x8100 | 0x88a8 | 0x9100 | 0x9200) {
            if tags == 0 {
                self.k.tagged();
            }
            tags += 1;
            let (Some(tci), Some(next)) = (be16(f, at), be16(f, at + 2)) else {
                return true;
            };
            self.k.vlan(tci & 0x0fff);
            at += 4;
            t = next;
            if tags >= MAX_TAGS {
                return false;
            }
        }
        if t < 0x0600 {
            // 802.3 length: LLC/SNAP, which libpcap's `ether proto` reads in its own ways.
            return false;
        }
        self.et(t);
        match t {
            ETH_IP4 => self.ip4(f, at),
            ETH_IP6 => self.ip6(f, at),
            ETH_ARP | ETH_RARP => self.arp(f, at),
            ETH_MPLS | ETH_MPLS_MC => self.mpls(f, at),
            ETH_PPPOE_S => match be16(f, at + 6) {
                Some(0x0021) => {
                    self.et(ETH_IP4);
                    self.ip4(f, at + 8);
                }
                Some(0x0057) => {
                    self.et(ETH_IP6);
                    self.ip6(f, at + 8);
                }
                _ => {}
            },
            _ => {}
        }
        true
    }

    fn mpls(&mut self, f: &[u8], mut at: usize) {
        for _ in 0..MAX_LABELS {
            let Some(l) = f.get(at..at + 4) else {
                return;
            };
            let bottom = l[2] & 1 != 0;
            at += 4;
            // libpcap's `mpls` shifts one label per keyword and then reads the version nibble:
            // index every depth where it reads 4 or 6.
            self.by_nibble(f, at);
            if bottom {
                return;
            }
        }
    }

    fn ip4_addr(&mut self, f: &[u8], at: usize) {
        if let Some(&[a, b, c, d]) = f.get(at..at + 4) {
            self.k.ip4([a, b, c, d]);
        }
    }

    fn arp(&mut self, f: &[u8], at: usize) {
        // libpcap's fixed offsets (6-byte hardware, 4-byte protocol addresses)...
        self.ip4_addr(f, at + 14);
        self.ip4_addr(f, at + 24);
        // ...and where the header's own lengths put them.
        if let (Some(&hl), Some(&pl)) = (f.get(at + 4), f.get(at + 5)) {
            let (hl, pl) = (usize::from(hl), usize::from(pl));
            if pl == 4 && hl != 6 {
                self.ip4_addr(f, at + 8 + hl);
                self.ip4_addr(f, at + 8 + 2 * hl + pl);
            }
        }
    }

    fn ports(&mut self, f: &[u8], at: usize) {
        for o in [at, at + 2] {
            if let Some(p) = be16(f, o) {
                self.k.port(p);
            }
        }
    }

    fn proto(&mut self, p: u8) {
        self.k.proto(p);
    }

    fn ip4(&mut self, f: &[u8], at: usize) {
        self.ip4_addr(f, at + 12);
        self.ip4_addr(f, at + 16);
        let Some(&proto) = f.get(at + 9) else {
            return;
        };
        self.proto(proto);
        let Some(frag) = be16(f, at + 6) else {
            return;
        };
        if frag & 0x1fff == 0 && matches!(proto, 6 | 17 | 132) {
            let ihl = usize::from(f.get(at).map_or(0, |v| v & 0x0f)) * 4;
            self.ports(f, at + ihl);
        }
    }

    fn ip6(&mut self, f: &[u8], at: usize) {
        for o in [at + 8, at + 24] {
            if let Some(a) = f.get(o..o + 16) {
                let mut k = [0u8; 16];
                k.copy_from_slice(a);
                self.k.ip6(k);
            }
        }
        let Some(&mut_nh) = f.get(at + 6) else {
            return;
        };
        let mut nh = mut_nh;
        let mut h = at + 40;
        for _ in 0..MAX_EXT {
            self.proto(nh);
            match nh {
                6 | 17 | 132 => {
                    self.ports(f, h);
                    return;
                }
                // Hop-by-hop, routing, destination options, mobility, HIP, shim6.
                0 | 43 | 60 | 135 | 139 | 140 => {
                    let (Some(&next), Some(&len)) = (f.get(h), f.get(h + 1)) else {
                        return;
                    };
                    nh = next;
                    h += (usize::from(len) + 1) * 8;
                }
                44 => {
                    let (Some(&next), Some(off)) = (f.get(h), be16(f, h + 2)) else {
                        return;
                    };
                    if off & 0xfff8 != 0 {
                        // A non-first fragment: its protocol, never its ports.
                        self.proto(next);
                        return;
                    }
                    nh = next;
                    h += 8;
                }
                51 => {
                    let (Some(&next), Some(&len)) = (f.get(h), f.get(h + 1)) else {
                        return;
                    };
                    nh = next;
                    h += (usize::from(len) + 2) * 4;
                }
                _ => return,
            }
        }
    }
}

// ---- the file format ------------------------------------------------------------------------
//
// All integers little-endian. "LRATEIDX", u32 version, u32 link type, u64 data_start, u64 end,
// u64 head_hash, u32 blocks, then per block offset u64, len u64, first_ns u64, last_ns u64,
// packets u32; then sections ip4, ip6, port, proto, vlan, ethertype: u32 count, the keys'
// bytes in strictly ascending order (4, 16, 2, 1, 2, 2 each; ports, VLANs and ethertypes
// big-endian so that byte order is number order), then an offset table: for every STRIDE-th key
// (0, 16, 32...) a u32, the nibble of the stream where its posting list starts, then the keys'
// posting lists as a nibble stream (u32 byte length, then the bytes); then the tagged and opaque
// lists as one more nibble stream; then a u64 checksum of everything before.
//
// A lookup binary-searches a section's keys, jumps to the table's entry at or before the key and
// decodes at most STRIDE lists (skipping all but the last): it costs about the list it reads. The
// load checks the checksum, the keys' order and the tables (first entry 0, increasing, inside the
// stream); a list that still does not decode at lookup gives every block (a superset).
//
// A nibble stream holds numbers in 4-bit groups, low nibble of each byte first: 3 bits of the
// number (least significant first) and a continuation bit (8). A posting list is its count, its
// first block, then each next block minus the one before minus 1. Block deltas of a busy file's
// keys are small, so most postings take one nibble: at 64 B frames and 100'000 flows, about 3.5 %
// of the data.

/// Writes numbers as nibbles.
#[derive(Default)]
struct Nibbles {
    bytes: Vec<u8>,
    half: bool,
}

impl Nibbles {
    fn nibble(&mut self, n: u8) {
        if self.half {
            if let Some(b) = self.bytes.last_mut() {
                *b |= n << 4;
            }
        } else {
            self.bytes.push(n);
        }
        self.half = !self.half;
    }
    fn var(&mut self, mut v: u64) {
        while v >= 8 {
            self.nibble(((v & 7) as u8) | 8);
            v >>= 3;
        }
        self.nibble(v as u8);
    }
    fn list(&mut self, l: &[u32], then: Option<u32>) {
        self.var((l.len() + usize::from(then.is_some())) as u64);
        let mut prev = 0u32;
        for (i, &b) in l.iter().chain(then.as_ref()).enumerate() {
            self.var(u64::from(if i == 0 { b } else { b - prev - 1 }));
            prev = b;
        }
    }
    /// Nibbles written so far.
    fn nibbles(&self) -> usize {
        self.bytes.len() * 2 - usize::from(self.half)
    }
    fn put(self, o: &mut Vec<u8>) {
        o.extend_from_slice(&(self.bytes.len() as u32).to_le_bytes());
        o.extend_from_slice(&self.bytes);
    }
}

/// Reads numbers from a nibble stream.
struct NibbleReader<'a> {
    b: &'a [u8],
    /// Index of the next nibble.
    at: usize,
}

impl NibbleReader<'_> {
    fn nibble(&mut self) -> Result<u8, String> {
        let byte = self
            .b
            .get(self.at / 2)
            .ok_or_else(|| "a posting list ends early".to_string())?;
        let n = if self.at.is_multiple_of(2) {
            byte & 15
        } else {
            byte >> 4
        };
        self.at += 1;
        Ok(n)
    }
    fn var(&mut self) -> Result<u64, String> {
        let mut v = 0u64;
        for shift in (0..64).step_by(3) {
            let n = self.nibble()?;
            v |= u64::from(n & 7) << shift;
            if n & 8 == 0 {
                return Ok(v);
            }
        }
        Err("a number too long in a posting list".into())
    }
    /// Passes over one posting list (as [`NibbleReader::list`] checks it, without keeping it).
    fn skip_list(&mut self, nblocks: usize) -> Result<(), String> {
        let n = self.var()?;
        if n > nblocks as u64 {
            return Err(format!("a posting list of {n} blocks"));
        }
        for _ in 0..n {
            self.var()?;
        }
        Ok(())
    }
    /// Decodes one posting list into `set` (blocks `0..nblocks`).
    fn list_into(&mut self, nblocks: usize, set: &mut BlockSet) -> Result<(), String> {
        self.postings(nblocks, |b| set.insert(b as usize))
    }
    fn list(&mut self, nblocks: usize) -> Result<Vec<u32>, String> {
        let mut l = Vec::new();
        self.postings(nblocks, |b| l.push(b))?;
        Ok(l)
    }
    /// Walks one posting list (a count, then block-number deltas), handing each block to `f`.
    fn postings(&mut self, nblocks: usize, mut f: impl FnMut(u32)) -> Result<(), String> {
        let n = self.var()?;
        // Each posting takes at least one nibble.
        let left = (self.b.len() * 2).saturating_sub(self.at);
        let n = match usize::try_from(n) {
            Ok(n) if n <= left && n <= nblocks => n,
            _ => return Err(format!("a posting list of {n} blocks")),
        };
        let mut prev = 0u64;
        for i in 0..n {
            let d = self.var()?;
            let b = if i == 0 {
                d
            } else {
                prev.saturating_add(d).saturating_add(1)
            };
            if b >= nblocks as u64 {
                return Err(format!("block number {b} of {nblocks}"));
            }
            f(b as u32);
            prev = b;
        }
        Ok(())
    }
}

fn encode(x: &FileIndex) -> Vec<u8> {
    let mut o = Vec::with_capacity(64 + x.blocks.len() * 36 + x.raw.len());
    o.extend_from_slice(MAGIC);
    o.extend_from_slice(&VERSION.to_le_bytes());
    o.extend_from_slice(&x.link.0.to_le_bytes());
    o.extend_from_slice(&x.data_start.to_le_bytes());
    o.extend_from_slice(&x.end.to_le_bytes());
    o.extend_from_slice(&x.head_hash.to_le_bytes());
    o.extend_from_slice(&(x.blocks.len() as u32).to_le_bytes());
    for b in &x.blocks {
        o.extend_from_slice(&b.offset.to_le_bytes());
        o.extend_from_slice(&b.len.to_le_bytes());
        o.extend_from_slice(&b.first_ns.to_le_bytes());
        o.extend_from_slice(&b.last_ns.to_le_bytes());
        o.extend_from_slice(&b.packets.to_le_bytes());
    }
    o.extend_from_slice(&x.raw);
    let c = checksum(&o);
    o.extend_from_slice(&c.to_le_bytes());
    o
}

struct Cur<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Cur<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let s = self
            .b
            .get(self.at..self.at.saturating_add(n))
            .ok_or_else(|| format!("ends early at byte {}", self.at))?;
        self.at += n;
        Ok(s)
    }
    fn arr<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.arr()?))
    }
    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.arr()?))
    }
    fn left(&self) -> usize {
        self.b.len().saturating_sub(self.at)
    }
    /// A count of items each at least `min` bytes long, checked against what is left.
    fn count(&mut self, v: u64, min: usize) -> Result<usize, String> {
        match usize::try_from(v) {
            Ok(n) if n.saturating_mul(min) <= self.left() => Ok(n),
            _ => Err(format!("count {v} exceeds the file at byte {}", self.at)),
        }
    }
    /// A nibble stream: its length, then its bytes.
    fn nibbles(&mut self) -> Result<NibbleReader<'a>, String> {
        let n = self.u32()? as usize;
        Ok(NibbleReader {
            b: self.take(n)?,
            at: 0,
        })
    }
}

fn decode(bytes: &[u8]) -> Result<FileIndex, String> {
    if bytes.len() < 8 + 8 {
        return Err("too short".into());
    }
    let (body, sum) = bytes.split_at(bytes.len() - 8);
    let mut s = [0u8; 8];
    s.copy_from_slice(sum);
    if checksum(body) != u64::from_le_bytes(s) {
        return Err("checksum mismatch".into());
    }
    let mut c = Cur { b: body, at: 0 };
    if c.take(8)? != MAGIC {
        return Err("not a linerate index (bad magic)".into());
    }
    let v = c.u32()?;
    if v != VERSION {
        let whose = if v < VERSION { "an older" } else { "a newer" };
        return Err(format!(
            "format version {v} ({whose} linerate's), this linerate reads {VERSION}"
        ));
    }
    let link = LinkType(c.u32()?);
    let data_start = c.u64()?;
    let end = c.u64()?;
    let head_hash = c.u64()?;
    let nb = c.u32()?;
    let nb = c.count(u64::from(nb), 36)?;
    let mut blocks = Vec::with_capacity(nb);
    for _ in 0..nb {
        blocks.push(BlockInfo {
            offset: c.u64()?,
            len: c.u64()?,
            first_ns: c.u64()?,
            last_ns: c.u64()?,
            packets: c.u32()?,
        });
    }
    // Blocks lie in the file's order, apart, between the head and the end the index covers (a
    // forged or damaged table would send the reader outside, or overflow its offsets).
    let mut at = data_start;
    for (i, b) in blocks.iter().enumerate() {
        match b.offset.checked_add(b.len) {
            Some(e) if b.offset >= at && e <= end => at = e,
            _ => {
                return Err(format!(
                    "block {i} at byte {} of {} bytes lies outside {at}..{end}",
                    b.offset, b.len
                ))
            }
        }
    }
    let raw_start = c.at;
    let mut sec = Sections::default();
    for (i, &w) in WIDTHS.iter().enumerate() {
        let cnt = c.u32()?;
        let count = c.count(u64::from(cnt), w)?;
        let keys = c.at - raw_start;
        let kb = c.take(count * w)?;
        for j in 1..count {
            if kb[(j - 1) * w..j * w] >= kb[j * w..(j + 1) * w] {
                return Err(format!("section {i}: keys out of order at key {j}"));
            }
        }
        let offs = c.at - raw_start;
        let tb = c.take(count.div_ceil(STRIDE) * 4)?;
        let len = c.u32()? as usize;
        let start = c.at - raw_start;
        c.take(len)?;
        let mut prev = 0usize;
        for (j, e) in tb.chunks_exact(4).enumerate() {
            let v = u32::from_le_bytes([e[0], e[1], e[2], e[3]]) as usize;
            // Every list takes at least one nibble (its count).
            if (j == 0 && v != 0) || (j > 0 && v <= prev) || v >= len.saturating_mul(2) {
                return Err(format!("section {i}: bad list offset {v} at entry {j}"));
            }
            prev = v;
        }
        sec.0[i] = Section {
            width: w,
            count,
            keys,
            offs,
            stream: (start, start + len),
        };
    }
    let mut r = c.nibbles()?;
    let tagged = r.list(nb)?;
    let opaque = r.list(nb)?;
    if c.left() != 0 {
        return Err(format!("{} bytes of trailing garbage", c.left()));
    }
    Ok(FileIndex {
        link,
        blocks,
        data_start,
        end,
        head_hash,
        raw: body[raw_start..].to_vec(),
        sec,
        tagged,
        opaque,
    })
}

#[cfg(test)]
mod tests;

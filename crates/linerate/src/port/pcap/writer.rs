//! A classic pcap writer into a [`RecordWrite`] output.

use crate::mem::{copy_packet, Batch, Pool};
use crate::port::file::RecordWrite;
use crate::port::LinkType;
use std::io;
use std::sync::Arc;

/// How many whole records (native byte order, as this writer writes them), of how many bytes,
/// `b` begins with.
pub(super) fn whole_records(b: &[u8]) -> (u64, usize) {
    let (mut n, mut at) = (0u64, 0usize);
    while let Some(h) = b.get(at..at + 16) {
        let cap = u32::from_ne_bytes([h[8], h[9], h[10], h[11]]) as usize;
        let end = at + 16 + cap;
        if end > b.len() {
            break;
        }
        n += 1;
        at = end;
    }
    (n, at)
}

/// Snapshot length written when 0 is asked for.
pub const DEFAULT_SNAPLEN: u32 = 262_144;

/// Timestamp precision of a written file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Precision {
    /// Microseconds (magic 0xa1b2c3d4): read by every tool.
    #[default]
    Micro,
    /// Nanoseconds (magic 0xa1b23c4d).
    Nano,
}

/// Writes classic pcap records (native byte order) to `W`.
///
/// It asks `W` for one record per packet ([`RecordWrite::record`]: the header as a fixed-size
/// store and one copy of the data) and buffers nothing itself: give it a
/// [`RecordFile`](crate::port::file::RecordFile) (or a `Vec<u8>`). Packets longer than the snapshot length are
/// truncated in the file; their original length is kept. A copy of a file
/// ([`PcapWriter::keep_whole`]) says the input's snapshot length and writes every record whole.
pub struct PcapWriter<W: RecordWrite> {
    w: W,
    link: LinkType,
    snaplen: u32,
    /// Bytes written of a record at most (the snapshot length unless kept whole).
    cut: usize,
    precision: Precision,
    packets: u64,
    bytes: u64,
}

impl<W: RecordWrite> PcapWriter<W> {
    /// Writes a microsecond pcap file header for `link` and `snaplen` (0 = 262144).
    pub fn new(w: W, link: LinkType, snaplen: u32) -> io::Result<PcapWriter<W>> {
        Self::with_precision(w, link, snaplen, Precision::Micro)
    }

    /// Writes a pcap file header with the given timestamp precision.
    pub fn with_precision(
        mut w: W,
        link: LinkType,
        snaplen: u32,
        precision: Precision,
    ) -> io::Result<PcapWriter<W>> {
        let snaplen = if snaplen == 0 {
            DEFAULT_SNAPLEN
        } else {
            snaplen
        };
        let magic: u32 = match precision {
            Precision::Micro => 0xa1b2_c3d4,
            Precision::Nano => 0xa1b2_3c4d,
        };
        let mut h = [0u8; 24];
        h[0..4].copy_from_slice(&magic.to_ne_bytes());
        h[4..6].copy_from_slice(&2u16.to_ne_bytes());
        h[6..8].copy_from_slice(&4u16.to_ne_bytes());
        // thiszone and sigfigs stay 0.
        h[16..20].copy_from_slice(&snaplen.to_ne_bytes());
        h[20..24].copy_from_slice(&link.0.to_ne_bytes());
        w.write_all(&h)?;
        Ok(PcapWriter {
            w,
            link,
            snaplen,
            cut: snaplen as usize,
            precision,
            packets: 0,
            bytes: 0,
        })
    }

    /// Appends one packet: `ts` in ns since the epoch, `data` its captured bytes, `wire_len` its
    /// length on the wire (raised to the captured length if smaller).
    #[inline]
    pub fn write_packet(&mut self, ts: u64, data: &[u8], wire_len: u32) -> io::Result<()> {
        let (h, cap, wire) = self.header(ts, data.len(), wire_len);
        let out = self.w.record(16 + cap)?;
        let Some((head, body)) = out.split_first_chunk_mut::<16>() else {
            return Err(io::Error::other(
                "the output gave a record less room than asked",
            ));
        };
        let Some(body) = body.get_mut(..cap) else {
            return Err(io::Error::other(
                "the output gave a record less room than asked",
            ));
        };
        *head = h;
        copy_packet(body, data.get(..cap).unwrap_or(data));
        self.packets += 1;
        self.bytes += u64::from(wire);
        Ok(())
    }

    /// The record header of a packet of `len` captured bytes: with its captured length as
    /// written (cut to the snapshot length) and its length on the wire.
    #[inline(always)]
    fn header(&self, ts: u64, len: usize, wire_len: u32) -> ([u8; 16], usize, u32) {
        let cap = len.min(self.cut);
        let wire = wire_len.max(len.min(u32::MAX as usize) as u32);
        let sec = u32::try_from(ts / 1_000_000_000).unwrap_or(u32::MAX);
        let sub = (ts % 1_000_000_000) as u32;
        let frac = match self.precision {
            Precision::Micro => sub / 1000,
            Precision::Nano => sub,
        };
        let mut h = [0u8; 16];
        h[0..4].copy_from_slice(&sec.to_ne_bytes());
        h[4..8].copy_from_slice(&frac.to_ne_bytes());
        h[8..12].copy_from_slice(&(cap as u32).to_ne_bytes());
        h[12..16].copy_from_slice(&wire.to_ne_bytes());
        (h, cap, wire)
    }

    /// Appends every packet of `batch` (the batch is left as it is); returns how many.
    ///
    /// Packets of a file read in place (a batch of a read-only mapping,
    /// [`PcapPort::read_in_place`](super::PcapPort::read_in_place)) whose record there is
    /// byte for byte the one this writer would write (the 16 bytes before the packet equal its
    /// header: same byte order, time precision, lengths, not cut) are handed to the output as
    /// runs of consecutive records ([`RecordWrite::record_run`]): a [`RecordFile`] writes them
    /// from the mapping with writev, no copy. Any other packet is copied as
    /// [`PcapWriter::write_packet`] does; the file's bytes are the same either way.
    ///
    /// [`RecordFile`]: crate::port::file::RecordFile
    pub fn write_batch(&mut self, batch: &Batch) -> io::Result<usize> {
        if self.w.takes_runs() {
            if let Some(pool) = batch.pool() {
                if !pool.region().read_only_bytes().is_empty() {
                    let pool = pool.clone();
                    return self.write_batch_in_place(batch, &pool);
                }
            }
        }
        for p in batch.iter() {
            self.write_packet(p.desc.ts, p.data, p.desc.wire_len)?;
        }
        Ok(batch.len())
    }

    /// [`PcapWriter::write_batch`] of a batch of the read-only mapping `map`.
    fn write_batch_in_place(&mut self, batch: &Batch, map: &Arc<Pool>) -> io::Result<usize> {
        let bytes = map.region().read_only_bytes();
        // The run being gathered: `[start, end)` of the mapping, `k` records.
        let (mut start, mut end, mut k) = (0usize, 0usize, 0u64);
        for (i, d) in batch.descs().iter().enumerate() {
            let len = d.len as usize;
            let (h, cap, wire) = self.header(d.ts, len, d.wire_len);
            let at = d.addr as usize;
            let same = cap == len
                && at >= 16
                && at.checked_add(len).is_some_and(|e| e <= bytes.len())
                && bytes.get(at - 16..at).is_some_and(|b| *b == h);
            if same {
                if k > 0 && at - 16 == end {
                    end = at + len;
                    k += 1;
                } else {
                    if k > 0 {
                        self.w.record_run(map, start, end, k, whole_records)?;
                    }
                    (start, end, k) = (at - 16, at + len, 1);
                }
                self.packets += 1;
                self.bytes += u64::from(wire);
            } else {
                if k > 0 {
                    self.w.record_run(map, start, end, k, whole_records)?;
                    k = 0;
                }
                self.write_packet(d.ts, batch.data(i), d.wire_len)?;
            }
        }
        if k > 0 {
            self.w.record_run(map, start, end, k, whole_records)?;
        }
        Ok(batch.len())
    }

    /// Writes every record whole from now on, even one longer than the header's snapshot
    /// length (a copy of a file whose records are longer than its header says stays a copy).
    pub fn keep_whole(&mut self) {
        self.cut = usize::MAX;
    }

    /// Flushes the underlying writer.
    pub fn flush(&mut self) -> io::Result<()> {
        self.w.flush()
    }

    /// The link type written in the header.
    pub fn link_type(&self) -> LinkType {
        self.link
    }

    /// The snapshot length written in the header.
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

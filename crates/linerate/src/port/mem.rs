//! `mem:NAME`: an in-process virtual wire with two ends.
//!
//! Opening `mem:NAME` twice gives the two ends of one wire; what one end sends, the other
//! receives. The wire is bounded (a ring of descriptors each way) and never blocks: what does not
//! fit is dropped and counted as `ring_full` on the sending end, as a real link would. Both ends
//! share one pool, so a packet built in a frame of the port's pool crosses with no copy; frames of
//! another pool are copied once, whole: a packet longer than a regular frame (a jumbo frame, up
//! to 256 KiB) goes into one of the pool's big frames (counted `no_frame` when all of them are
//! in flight), never cut.

use super::{DropReason, Port, PortError, PortOptions, PortStats};
use crate::mem::{Batch, Desc, Pool, PoolConfig, BATCH, DEFAULT_BIG_FRAMES};
use crate::ring::{ring, Consumer, Producer};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// Default number of descriptors each direction of a wire holds.
pub const WIRE_SLOTS: usize = 4096;

/// One end of a memory wire.
pub struct MemPort {
    name: String,
    pool: Arc<Pool>,
    tx: Producer<Desc>,
    rx: Consumer<Desc>,
    scratch: Batch,
    stats: PortStats,
    /// A cluster's input wire ([`wire_over`]): its writer waits for frames the master hands
    /// back, so once the master's end is gone `tx` says so rather than leaving it waiting.
    closes_with_peer: bool,
}

fn registry() -> &'static Mutex<HashMap<String, MemPort>> {
    static R: OnceLock<Mutex<HashMap<String, MemPort>>> = OnceLock::new();
    R.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Makes a wire; returns its two ends. What one end sends, the other receives, in order, without
/// a copy (both ends share one pool of frames).
///
/// ```
/// use linerate::mem::Batch;
/// use linerate::port::{mem::wire, Port, PortOptions};
///
/// let (mut a, mut b) = wire("doc-wire", &PortOptions::default())?;
/// linerate::apps::balance::source::generate(&mut a, 10, Some(100), &Default::default());
/// let mut batch = Batch::new();
/// let mut got = 0;
/// while b.rx(&mut batch)? > 0 {
///     got += batch.len();
///     batch.clear();
/// }
/// assert_eq!(got, 100);
/// # Ok::<(), linerate::port::PortError>(())
/// ```
pub fn wire(name: &str, opts: &PortOptions) -> Result<(MemPort, MemPort), PortError> {
    // Enough frames for both directions full plus the batches in flight.
    let frames = opts.frames.max((2 * WIRE_SLOTS + 8 * BATCH) as u32);
    let pool = Arc::new(Pool::new(&PoolConfig {
        frames,
        big_frames: 2 * DEFAULT_BIG_FRAMES,
        ..Default::default()
    })?);
    let (mut a, mut b) = wire_over(name, pool);
    (a.closes_with_peer, b.closes_with_peer) = (false, false);
    Ok((a, b))
}

/// A wire whose two ends allocate from `pool` (frames of another pool's memory, for instance:
/// [`crate::cluster::Master::input_wire`]). What does not fit the pool's frames is copied into
/// them once, or dropped and counted when none is free, as for [`wire`]. The frames of such a
/// pool come back only through the other end's reader, so `tx` fails ([`PortError::Gone`])
/// once that end is dropped: a writer waiting for frames would wait forever.
pub(crate) fn wire_over(name: &str, pool: Arc<Pool>) -> (MemPort, MemPort) {
    let (ptx, prx) = ring::<Desc>(WIRE_SLOTS);
    let (qtx, qrx) = ring::<Desc>(WIRE_SLOTS);
    let end = |tx, rx| MemPort {
        name: format!("mem:{name}"),
        pool: pool.clone(),
        tx,
        rx,
        scratch: Batch::with_pool(&pool),
        stats: PortStats::default(),
        closes_with_peer: true,
    };
    (end(ptx, qrx), end(qtx, prx))
}

impl MemPort {
    /// Opens `mem:NAME`: the first call makes the wire and returns one end, the second returns
    /// the other end.
    pub fn open(name: &str, opts: &PortOptions) -> Result<MemPort, PortError> {
        let mut reg = registry().lock().unwrap_or_else(|e| e.into_inner());
        if let Some(peer) = reg.remove(name) {
            return Ok(peer);
        }
        let (a, b) = wire(name, opts)?;
        reg.insert(name.to_string(), b);
        Ok(a)
    }
}

impl MemPort {
    /// Makes a wire named `name` with `make` (which returns the end to leave for the next
    /// `mem:NAME` open, then the caller's end) and leaves its first end for that open, both
    /// under the registry's lock, so that no other open can take the name in between. None,
    /// without calling `make`, when a wire of that name waits for its second open already;
    /// `make`'s error as it is.
    pub(crate) fn make_and_offer<E>(
        name: &str,
        make: impl FnOnce() -> Result<(MemPort, MemPort), E>,
    ) -> Option<Result<MemPort, E>> {
        let mut reg = registry().lock().unwrap_or_else(|e| e.into_inner());
        if reg.contains_key(name) {
            return None;
        }
        Some(make().map(|(left, ours)| {
            reg.insert(name.to_string(), left);
            ours
        }))
    }
}

impl Port for MemPort {
    fn name(&self) -> &str {
        &self.name
    }

    #[inline]
    fn rx(&mut self, batch: &mut Batch) -> Result<usize, PortError> {
        batch.bind(&self.pool);
        let mut tmp = [Desc::default(); BATCH];
        let room = batch.room();
        let n = self.rx.pop_burst(&mut tmp[..room]);
        batch.extend(&tmp[..n]);
        self.stats.rx_packets += n as u64;
        self.stats.rx_bytes += tmp[..n].iter().map(|d| d.wire_len as u64).sum::<u64>();
        Ok(n)
    }

    #[inline]
    fn tx(&mut self, batch: &mut Batch) -> Result<usize, PortError> {
        if self.closes_with_peer && self.tx.peer_gone() {
            // Counted, not silently cleared: nobody will read them.
            self.stats
                .tx_drops
                .add(DropReason::ConsumerGone, batch.len() as u64);
            batch.clear();
            return Err(PortError::Gone {
                port: self.name.clone(),
                why: "the cluster master reading this wire is gone".into(),
            });
        }
        let own = batch.pool().is_some_and(|p| Arc::ptr_eq(p, &self.pool));
        let total = batch.len();
        if own {
            let sent = self.tx.push_burst(batch.descs());
            self.count_tx(&batch.descs()[..sent]);
            batch.consume(sent);
        } else {
            // Copy into frames of the wire's pool, then free the originals.
            let mut tmp = [Desc::default(); BATCH];
            let mut k = 0;
            let (small, big) = (self.pool.max_packet(), self.pool.max_big_packet());
            for p in batch.iter() {
                let len = p.data.len() as u32;
                if len > big {
                    self.stats.tx_drops.add(DropReason::TooBig, 1);
                    continue;
                }
                let f = if len > small {
                    self.scratch.alloc_big()
                } else {
                    self.scratch.alloc()
                };
                let Some(mut f) = f else {
                    self.stats.tx_drops.add(DropReason::NoFrame, 1);
                    continue;
                };
                let frame = f.buf();
                let len = p.data.len().min(frame.len());
                frame[..len].copy_from_slice(&p.data[..len]);
                // The copy's frame goes with the descriptor onto the wire.
                tmp[k] = f.into_desc(Desc {
                    len: len as u32,
                    flags: 0,
                    ..*p.desc
                });
                k += 1;
            }
            batch.clear();
            let sent = self.tx.push_burst(&tmp[..k]);
            self.count_tx(&tmp[..sent]);
            for d in &tmp[sent..k] {
                self.scratch.free_addr(d.addr);
            }
            self.stats
                .tx_drops
                .add(DropReason::RingFull, (k - sent) as u64);
            return Ok(total);
        }
        let left = batch.len();
        if left > 0 {
            self.stats.tx_drops.add(DropReason::RingFull, left as u64);
            batch.clear();
        }
        Ok(total)
    }

    fn stats(&mut self) -> PortStats {
        self.stats
    }

    fn pool(&self) -> Option<&Arc<Pool>> {
        Some(&self.pool)
    }
}

impl MemPort {
    #[inline(always)]
    fn count_tx(&mut self, sent: &[Desc]) {
        self.stats.tx_packets += sent.len() as u64;
        self.stats.tx_bytes += sent.iter().map(|d| d.wire_len as u64).sum::<u64>();
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn fill(b: &mut Batch, n: usize, tag: u8) {
        for i in 0..n {
            let mut fr = b.alloc().expect("frame");
            let f = fr.buf();
            f[..60].fill(tag);
            f[0] = i as u8;
            fr.push(Desc {
                len: 60,
                wire_len: 60,
                ..Default::default()
            });
        }
    }

    #[test]
    fn wire_moves_packets_both_ways_zero_copy() {
        let (mut a, mut b) = wire("t1", &PortOptions::default()).unwrap();
        let mut tx = Batch::with_pool(a.pool().unwrap());
        fill(&mut tx, 10, 7);
        assert_eq!(a.tx(&mut tx).unwrap(), 10);
        assert!(tx.is_empty());
        let mut rx = Batch::new();
        assert_eq!(b.rx(&mut rx).unwrap(), 10);
        for (i, p) in rx.iter().enumerate() {
            assert_eq!(p.data[0], i as u8);
            assert_eq!(p.data[1], 7);
        }
        assert_eq!(a.stats().tx_packets, 10);
        assert_eq!(b.stats().rx_packets, 10);
        assert_eq!(b.stats().rx_bytes, 600);
        // and back
        rx.clear();
        let mut tx2 = Batch::with_pool(b.pool().unwrap());
        fill(&mut tx2, 3, 9);
        b.tx(&mut tx2).unwrap();
        assert_eq!(a.rx(&mut rx).unwrap(), 3);
    }

    #[test]
    fn full_wire_counts_drops() {
        let (mut a, mut b) = wire("t2", &PortOptions::default()).unwrap();
        let mut tx = Batch::with_pool(a.pool().unwrap());
        let mut sent = 0u64;
        for _ in 0..(WIRE_SLOTS / BATCH + 2) {
            fill(&mut tx, BATCH, 1);
            a.tx(&mut tx).unwrap();
            sent += BATCH as u64;
        }
        let s = a.stats();
        assert_eq!(s.tx_packets, WIRE_SLOTS as u64);
        assert_eq!(
            s.tx_drops.get(DropReason::RingFull),
            sent - WIRE_SLOTS as u64
        );
        let mut rx = Batch::new();
        let mut got = 0;
        loop {
            let n = b.rx(&mut rx).unwrap();
            if n == 0 {
                break;
            }
            got += n;
            rx.clear();
        }
        assert_eq!(got, WIRE_SLOTS);
    }

    #[test]
    fn foreign_frames_are_copied() {
        let (mut a, mut b) = wire("t3", &PortOptions::default()).unwrap();
        let other = Arc::new(Pool::new(&PoolConfig::default()).unwrap());
        let mut tx = Batch::with_pool(&other);
        fill(&mut tx, 5, 3);
        assert_eq!(a.tx(&mut tx).unwrap(), 5);
        drop(tx);
        assert_eq!(other.free_frames(), other.frames() as usize);
        let mut rx = Batch::new();
        assert_eq!(b.rx(&mut rx).unwrap(), 5);
        assert!(rx.iter().all(|p| p.data.len() == 60 && p.data[1] == 3));
    }

    #[test]
    fn foreign_jumbo_frames_cross_whole() {
        let (mut a, mut b) = wire("t4", &PortOptions::default()).unwrap();
        let other = Arc::new(
            Pool::new(&PoolConfig {
                big_frames: 16,
                ..Default::default()
            })
            .unwrap(),
        );
        let mut tx = Batch::with_pool(&other);
        let sizes = [60usize, 9014, 1514, 70_000, 16_000];
        for (i, &n) in sizes.iter().enumerate() {
            let mut fr = if n > other.max_packet() as usize {
                tx.alloc_big().unwrap()
            } else {
                tx.alloc().unwrap()
            };
            for (k, x) in fr.buf()[..n].iter_mut().enumerate() {
                *x = (k * 3 + i) as u8;
            }
            fr.push(Desc {
                len: n as u32,
                wire_len: n as u32,
                ..Default::default()
            });
        }
        assert_eq!(a.tx(&mut tx).unwrap(), sizes.len());
        assert_eq!(a.stats().tx_drops.total(), 0);
        let mut rx = Batch::new();
        assert_eq!(b.rx(&mut rx).unwrap(), sizes.len());
        for (i, p) in rx.iter().enumerate() {
            assert_eq!(p.data.len(), sizes[i]);
            assert!(p
                .data
                .iter()
                .enumerate()
                .all(|(k, &x)| x == (k * 3 + i) as u8));
        }
        // The wire's big frames come back when the receiver is done.
        rx.clear();
        drop(rx);
        drop(tx);
        assert_eq!(other.free_frames(), other.frames() as usize);
    }

    #[test]
    fn named_open_pairs_ends() {
        let mut a = MemPort::open("pair-x", &PortOptions::default()).unwrap();
        let mut b = MemPort::open("pair-x", &PortOptions::default()).unwrap();
        let mut tx = Batch::with_pool(a.pool().unwrap());
        fill(&mut tx, 2, 1);
        a.tx(&mut tx).unwrap();
        let mut rx = Batch::new();
        assert_eq!(b.rx(&mut rx).unwrap(), 2);
    }
}

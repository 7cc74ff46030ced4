//! Transmit lanes: consumers send packets into the cluster (each into a frame of its own lane)
//! and the master sends them out of its egress port (`-o`).

use super::consumer::ClusterPort;
use super::err;
use super::layout::MAX_WIRE_LEN;
use super::liveness::claim;
use super::master::Master;
use crate::mem::{Batch, Desc, BATCH};
use crate::port::{DropReason, Port, PortError};
use std::sync::atomic::Ordering;

/// This port's transmit lane.
pub(super) struct TxLane {
    pub(super) lane: usize,
    pub(super) head: u64,
    pub(super) cached_tail: u64,
    pub(super) owner: u64,
}

impl Master {
    /// Whether a transmit lane has packets waiting.
    pub fn tx_pending(&self) -> bool {
        (0..self.seg.tx_lanes)
            .any(|l| self.seg.lane_cursors(l).head.load(Ordering::Relaxed) != self.tx_tail[l])
    }

    /// Sends what consumers transmitted into the cluster to `out` (the `-o` port), a few
    /// batches per lane at most; what `out` does not take is counted as `tx_dropped`. Never
    /// blocks. Returns the number of packets taken from the lanes.
    pub fn pump_tx(&mut self, out: &mut dyn Port) -> Result<usize, PortError> {
        let seg = self.seg.clone();
        let mut moved = 0;
        for l in 0..seg.tx_lanes {
            let head = seg.lane_cursors(l).head.load(Ordering::Acquire);
            let mut tail = self.tx_tail[l];
            // A lane's producer can only publish what fits.
            let head = head.clamp(tail, tail + seg.tx_slots as u64);
            let mut rounds = 0;
            while tail < head && rounds < 8 {
                rounds += 1;
                let n = ((head - tail) as usize).min(BATCH);
                self.tx_batch.bind(&seg.pool);
                let cap = (seg.frame_size - seg.headroom) as u32;
                for i in 0..n {
                    let c = tail + i as u64;
                    // SAFETY: slots [tail, head) were written by the lane's producer before its
                    // release store of head (acquired above); it reuses them only after we move
                    // the lane's tail.
                    let d = unsafe { seg.lane_slot(l, c).read() };
                    if d.len > cap {
                        // No producer of ours writes that: the lane is corrupted.
                        self.tx_malformed += 1;
                        continue;
                    }
                    // The address is ours to compute: a producer cannot point us elsewhere.
                    self.tx_batch.push(Desc {
                        addr: seg.lane_frame_addr(l, c),
                        len: d.len,
                        wire_len: d.wire_len.clamp(d.len, MAX_WIRE_LEN),
                        flags: Desc::F_SHARED,
                        ..d
                    });
                }
                let pushed = self.tx_batch.len();
                let wire = |b: &Batch| b.descs().iter().map(|d| d.wire_len as u64).sum::<u64>();
                let bytes = wire(&self.tx_batch);
                while !self.tx_batch.is_empty() {
                    match out.tx(&mut self.tx_batch) {
                        Ok(0) => break,
                        Ok(_) => {}
                        Err(e) => {
                            self.tx_batch.forget();
                            return Err(e);
                        }
                    }
                }
                let left = self.tx_batch.len();
                let left_bytes = wire(&self.tx_batch);
                self.tx_batch.forget();
                self.tx_packets += (pushed - left) as u64;
                self.tx_bytes += bytes - left_bytes;
                self.tx_dropped += left as u64;
                tail += n as u64;
                moved += n;
                seg.lane_cursors(l).tail.store(tail, Ordering::Release);
            }
            self.tx_tail[l] = tail;
        }
        if moved > 0 {
            self.publish();
        }
        Ok(moved)
    }
}

impl ClusterPort {
    pub(super) fn attach_tx(&mut self) -> Result<(), PortError> {
        let seg = self.seg.clone();
        if seg.tx_lanes == 0 {
            return Err(err(
                &self.name,
                format!(
                    "cluster {} takes no transmitted packets: start its master with -o PORT",
                    seg.id
                ),
            ));
        }
        for l in 0..seg.tx_lanes {
            if let Ok(owner) = claim(&seg.lane_ctl(l).owner) {
                seg.lane_ctl(l).attaches.fetch_add(1, Ordering::Relaxed);
                let c = seg.lane_cursors(l);
                // Continue after what a previous producer published.
                let head = c.head.load(Ordering::Acquire);
                self.tx = Some(TxLane {
                    lane: l,
                    head,
                    cached_tail: c.tail.load(Ordering::Acquire),
                    owner,
                });
                return Ok(());
            }
        }
        Err(err(
            &self.name,
            format!(
                "all {} transmit lanes of cluster {} are taken",
                seg.tx_lanes, seg.id
            ),
        ))
    }

    /// Copies packets from the front of `batch` into frames of this port's transmit lane and
    /// publishes them to the master; returns how many it took (the rest stay in the batch when
    /// the lane is full).
    pub(super) fn tx_lane(&mut self, batch: &mut Batch) -> Result<usize, PortError> {
        if self.check_master(false)? {
            return Err(err(
                &self.name,
                format!(
                    "cluster {} ended: its master (pid {}) stopped; nothing more can be sent \
                     into it",
                    self.seg.id,
                    self.seg.master_pid()
                ),
            ));
        }
        if self.tx.is_none() {
            self.attach_tx()?;
        }
        let seg = self.seg.clone();
        let Some(t) = self.tx.as_mut() else {
            return Ok(0);
        };
        let cap = seg.tx_slots as u64;
        let want = batch.len() as u64;
        if cap - (t.head - t.cached_tail) < want {
            t.cached_tail = seg.lane_cursors(t.lane).tail.load(Ordering::Acquire);
        }
        let n = (cap - (t.head - t.cached_tail)).min(want) as usize;
        let room = (seg.frame_size - seg.headroom) as u32;
        let mut bytes = 0u64;
        // Slots used (packets longer than a frame take none: dropped whole, never cut).
        let mut k = 0u64;
        for i in 0..n {
            let c = t.head + k;
            let src = batch.data(i);
            let d = batch.descs()[i];
            let len = src.len() as u32;
            if len > room {
                self.stats.tx_drops.add(DropReason::TooBig, 1);
                continue;
            }
            let addr = seg.lane_frame_addr(t.lane, c);
            // SAFETY: the frame of slot c belongs to this lane's producer (us: the lane's owner
            // word is ours) until the master moves the lane's tail past c, and c < tail + cap.
            if let Some(dst) = unsafe { seg.pool.region().bytes_mut(addr, len) } {
                dst.copy_from_slice(src);
            }
            let out = Desc {
                addr,
                len,
                wire_len: d.wire_len.max(len),
                flags: 0,
                ..d
            };
            bytes += out.wire_len as u64;
            // SAFETY: slot c is free (c < tail + cap) and only this producer writes the lane.
            unsafe { seg.lane_slot(t.lane, c).write(out) };
            k += 1;
        }
        if n > 0 {
            t.head += k;
            seg.lane_cursors(t.lane)
                .head
                .store(t.head, Ordering::Release);
            self.stats.tx_packets += k;
            self.stats.tx_bytes += bytes;
            batch.free_front(n);
        }
        Ok(n)
    }
}

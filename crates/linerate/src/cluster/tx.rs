//! Transmit lanes: consumers send packets into the cluster (each into a frame of its own lane)
//! and the master sends them out of its egress port (`-o`).

use super::consumer::ClusterPort;
use super::err;
use super::lane::TxLane;
use super::layout::MAX_WIRE_LEN;
use super::liveness::claim;
use super::master::Master;
use crate::mem::{Batch, Desc, BATCH};
use crate::port::{DropReason, Port, PortError};
use crate::ring::shared::Lender;
use std::sync::atomic::Ordering;

impl Master {
    /// Whether a transmit lane has packets waiting.
    pub fn tx_pending(&self) -> bool {
        self.tx_rings.iter().any(|r| r.pending())
    }

    /// Sends what consumers transmitted into the cluster to `out` (the `-o` port), a few
    /// batches per lane at most; what `out` does not take is counted as `tx_dropped`. Never
    /// blocks. Returns the number of packets taken from the lanes.
    pub fn pump_tx(&mut self, out: &mut dyn Port) -> Result<usize, PortError> {
        let seg = self.seg.clone();
        let cap = (seg.frame_size - seg.headroom) as u32;
        let mut moved = 0;
        for l in 0..seg.tx_lanes {
            let mut rounds = 0;
            while rounds < 8 {
                rounds += 1;
                let ring = &mut self.tx_rings[l];
                let avail = match ring.available() {
                    Ok(0) => break,
                    Ok(n) => n,
                    Err(_) => {
                        // A head behind what was read or more than a ring ahead: not the
                        // lane's producer. Nothing is read from the lane until it is sane.
                        if !std::mem::replace(&mut self.tx_bad[l], true) {
                            self.tx_malformed += 1;
                        }
                        break;
                    }
                };
                let n = avail.min(BATCH);
                self.tx_batch.bind(&seg.pool);
                let mut c = ring.read();
                let (batch, malformed) = (&mut self.tx_batch, &mut self.tx_malformed);
                ring.peek(n, |descs| {
                    for d in descs {
                        // The address is ours to compute: a producer cannot point us elsewhere.
                        let addr = seg.lane_frame_addr(l, c);
                        c += 1;
                        if d.len > cap {
                            // No producer of ours writes that: the lane is corrupted.
                            *malformed += 1;
                            continue;
                        }
                        batch.push(Desc {
                            addr,
                            len: d.len,
                            wire_len: d.wire_len.clamp(d.len, MAX_WIRE_LEN),
                            flags: Desc::F_SHARED,
                            ..*d
                        });
                    }
                });
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
                // The frames were sent (copied out by `out`) or dropped: give them back.
                let ring = &mut self.tx_rings[l];
                ring.advance(n);
                ring.release();
                moved += n;
            }
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
                // Continue after what a previous producer published.
                self.tx = Some(TxLane {
                    lane: l,
                    ring: Lender::resume(seg.lane_mem(l)),
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
        let want = batch.len().min(BATCH) as u64;
        if t.ring.room() < want {
            // What the master gave back frees the frames of those slots.
            t.ring.reclaim(|_| {});
        }
        let n = t.ring.room().min(want) as usize;
        let room = (seg.frame_size - seg.headroom) as u32;
        let mut bytes = 0u64;
        let mut out = [Desc::default(); BATCH];
        // Slots used (packets longer than a frame take none: dropped whole, never cut).
        let mut k = 0usize;
        for i in 0..n {
            let c = t.ring.head() + k as u64;
            let src = batch.data(i);
            let d = batch.descs()[i];
            let len = src.len() as u32;
            if len > room {
                self.stats.tx_drops.add(DropReason::TooBig, 1);
                continue;
            }
            let addr = seg.lane_frame_addr(t.lane, c);
            // SAFETY: the frame of slot c belongs to this lane's producer (us: the lane's owner
            // word is ours) until the master moves the lane's tail past c, and c is below what
            // the master gave back plus the ring's size (k < room).
            if let Some(dst) = unsafe { seg.pool.region().bytes_mut(addr, len) } {
                dst.copy_from_slice(src);
            }
            out[k] = Desc {
                addr,
                len,
                wire_len: d.wire_len.max(len),
                flags: 0,
                ..d
            };
            bytes += out[k].wire_len as u64;
            k += 1;
        }
        if n > 0 {
            t.ring.publish(&out[..k]);
            self.stats.tx_packets += k as u64;
            self.stats.tx_bytes += bytes;
            batch.free_front(n);
        }
        Ok(n)
    }
}

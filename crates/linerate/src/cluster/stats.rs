//! A cluster's counters: per queue and for the whole cluster, with the accounting invariant.

use super::layout::QueueCtl;
use super::segment::Segment;
use crate::port::DropReason;
use std::sync::atomic::{AtomicU64, Ordering};

/// Counters of one queue.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// Application the queue belongs to.
    pub app: usize,
    /// Descriptors put in the ring.
    pub enqueued: u64,
    /// Packets delivered: released by the consumer (read and done with), or handed to it
    /// when the master ended. Only grows.
    pub delivered: u64,
    /// Bytes enqueued (wire lengths).
    pub bytes: u64,
    /// Dropped because the ring was full.
    pub ring_full: u64,
    /// Dropped because no consumer was attached (left or died), reclaimed ones included.
    pub consumer_gone: u64,
    /// Dropped for want of a free frame.
    pub no_frame: u64,
    /// Dropped: longer than the cluster's frames hold (raise `--max-pkt-len`); never cut.
    pub too_big: u64,
    /// Dropped: still in the queue, never read, when the master ended (no consumer, or one that
    /// did not read them in time).
    pub unread: u64,
    /// Descriptors in the ring not yet released by the consumer (neither delivered nor
    /// dropped yet; 0 once the master ended).
    pub backlog: u64,
    /// The attached consumer.
    pub consumer_pid: Option<u32>,
    /// Times a consumer attached.
    pub attaches: u64,
}

impl QueueStats {
    /// Drops of this queue (all reasons).
    pub fn drops(&self) -> u64 {
        self.ring_full + self.consumer_gone + self.no_frame + self.too_big + self.unread
    }

    /// Packets meant for this queue: delivered + in the queue + drops.
    pub fn offered(&self) -> u64 {
        self.delivered + self.backlog + self.drops()
    }
}

/// Counters of a cluster. Every received packet is filtered or routed; every destination a
/// routed packet had is delivered, still in its queue (backlog), or dropped under a reason on
/// that queue: `rx_packets = filtered + routed` and `copies = Σ_q (delivered + backlog +
/// ring_full + consumer_gone + no_frame + too_big + unread)`; once the master ended, backlog is 0. With one
/// queue per application per packet (every mode but fan-out), each application's queues add up
/// to `routed`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterStats {
    /// Packets the master received.
    pub rx_packets: u64,
    /// Bytes the master received.
    pub rx_bytes: u64,
    /// Packets no queue wanted (filter or policy).
    pub filtered: u64,
    /// Packets lost for want of a free frame (counted once, also per queue).
    pub no_frame: u64,
    /// Packets longer than a frame holds, dropped whole (counted once, also per queue).
    pub too_big: u64,
    /// Packets with at least one destination.
    pub routed: u64,
    /// Destinations asked for, over all packets.
    pub copies: u64,
    /// Packets the master copied into a segment frame. The others given a frame were
    /// received straight into it (an input that writes into the segment, the built-in
    /// source): zero copy. Ports whose memory the kernel owns (AF_PACKET rings) are copied.
    pub copied_packets: u64,
    /// Packets consumers transmitted that went out of the egress port.
    pub tx_packets: u64,
    /// Their bytes.
    pub tx_bytes: u64,
    /// Packets consumers transmitted that the egress port did not take.
    pub tx_dropped: u64,
    /// Transmitted descriptors with an impossible length (a corrupted lane), dropped.
    pub tx_malformed: u64,
    /// Per queue.
    pub queues: Vec<QueueStats>,
}

impl ClusterStats {
    /// Number of applications.
    pub fn apps(&self) -> usize {
        self.queues.iter().map(|q| q.app + 1).max().unwrap_or(0)
    }

    /// Checks the accounting invariant for every application; returns a description of the
    /// first violation.
    pub fn check_invariant(&self) -> Result<(), String> {
        if self.rx_packets != self.filtered + self.routed {
            return Err(format!(
                "rx {} != filtered {} + routed {}",
                self.rx_packets, self.filtered, self.routed
            ));
        }
        let sum: u64 = self.queues.iter().map(|q| q.offered()).sum();
        if sum != self.copies {
            return Err(format!(
                "destinations asked {} != Σ delivered + backlog + drops {}",
                self.copies, sum
            ));
        }
        Ok(())
    }

    /// Packets meant for application `a` (delivered + backlog + drops over its queues).
    pub fn app_offered(&self, a: usize) -> u64 {
        self.queues
            .iter()
            .filter(|q| q.app == a)
            .map(|q| q.offered())
            .sum()
    }

    /// Packets delivered over all queues.
    pub fn delivered(&self) -> u64 {
        self.queues.iter().map(|q| q.delivered).sum()
    }

    /// Drops by reason over all queues (and the filter), as port counters.
    pub fn drops(&self) -> crate::port::Drops {
        let mut d = crate::port::Drops::default();
        d.add(DropReason::Filter, self.filtered);
        for q in &self.queues {
            d.add(DropReason::RingFull, q.ring_full);
            d.add(DropReason::ConsumerGone, q.consumer_gone);
            d.add(DropReason::NoFrame, q.no_frame);
            d.add(DropReason::TooBig, q.too_big);
            d.add(DropReason::Unread, q.unread);
        }
        d
    }

    /// Packets still in queues (neither delivered nor dropped yet).
    pub fn backlog(&self) -> u64 {
        self.queues.iter().map(|q| q.backlog).sum()
    }
}

impl Segment {
    /// Statistics of the whole cluster, as the master last published them (from another
    /// process: the master's own [`Master::stats`](super::Master::stats) is exact).
    pub fn stats(&self) -> ClusterStats {
        let c = &self.header().counters;
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let queues = (0..self.queues)
            .map(|q| {
                let k = self.ctl(q);
                let (enq, delivered, reclaimed, unread) = (
                    r(&k.enqueued),
                    r(&k.delivered),
                    r(&k.reclaimed),
                    r(&k.unread),
                );
                QueueStats {
                    app: self.app_of(q),
                    enqueued: enq,
                    delivered,
                    bytes: r(&k.enqueued_bytes),
                    ring_full: r(&k.ring_full),
                    consumer_gone: r(&k.consumer_gone),
                    no_frame: r(&k.no_frame),
                    too_big: r(&k.too_big),
                    unread,
                    backlog: enq.saturating_sub(delivered + reclaimed + unread),
                    consumer_pid: self.consumer_pid(q),
                    attaches: r(&k.attaches),
                }
            })
            .collect();
        ClusterStats {
            rx_packets: r(&c.rx_packets),
            rx_bytes: r(&c.rx_bytes),
            filtered: r(&c.filtered),
            no_frame: r(&c.no_frame),
            too_big: r(&c.too_big),
            routed: r(&c.routed),
            copies: r(&c.copies),
            copied_packets: self.header().copied.load(Ordering::Relaxed),
            tx_packets: r(&c.tx_packets),
            tx_bytes: r(&c.tx_bytes),
            tx_dropped: r(&c.tx_dropped),
            tx_malformed: r(&c.tx_malformed),
            queues,
        }
    }
}

/// A queue's drop counters (ring_full, consumer_gone, no_frame, unread, too_big), as published.
pub(super) fn queue_drops(k: &QueueCtl) -> [u64; 5] {
    [
        k.ring_full.load(Ordering::Relaxed),
        k.consumer_gone.load(Ordering::Relaxed),
        k.no_frame.load(Ordering::Relaxed),
        k.unread.load(Ordering::Relaxed),
        k.too_big.load(Ordering::Relaxed),
    ]
}

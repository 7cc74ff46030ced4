//! A consumer: `cluster:ID@Q` reads a queue of a running cluster (zero copy, release by tail),
//! and may transmit into the cluster through a lane.

use super::err;
use super::lane::TxLane;
use super::layout::*;
use super::liveness::{claim, now_ms, same_process, unclaim};
use super::segment::Segment;
use super::stats::queue_drops;
use crate::mem::{Batch, Desc, Pool};
use crate::port::{DropReason, Port, PortError, PortStats};
use crate::ring::shared::{Borrower, RegionQueue};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// A consumer of a cluster: `cluster:ID@Q` reads queue Q; `cluster:ID` reads the first free
/// queue (taken at the first `rx`). Either may transmit into the cluster (a transmit lane is
/// taken at the first `tx`) when the master has an egress port (`-o`).
///
/// `rx` hands out descriptors that point into the segment (zero copy) and releases the ones it
/// handed out at the previous call, like a kernel ring: process (or copy) a batch before
/// receiving the next. Frames marked [`Desc::F_SHARED`] are read-only. `tx` copies each packet
/// once into a frame of its lane.
pub struct ClusterPort {
    pub(super) name: String,
    pub(super) seg: Arc<Segment>,
    /// The queue, once attached.
    pub(super) rx_q: Option<usize>,
    /// The queue's ring (release by tail), once attached.
    pub(super) ring: Option<Borrower<Desc, RegionQueue<Desc>>>,
    pub(super) owner: u64,
    pub(super) tx: Option<TxLane>,
    pub(super) stats: PortStats,
    pub(super) idle: u32,
    pub(super) polls: u32,
    pub(super) master_gone: bool,
    /// The master ended normally and this queue is done: nothing more to read.
    pub(super) finished: bool,
    /// The queue's drop counters when this port attached (its figures start there), and the
    /// last ones seen (counters only grow, whatever is written into the segment).
    pub(super) drops_base: [u64; 5],
    pub(super) drops_seen: [u64; 5],
    /// The longest sleep of [`ClusterPort::wait`] ([`WAIT_CAP`] unless set).
    pub(super) wait_cap: std::time::Duration,
    /// Set by this port's waker ([`Port::rx_waker`]): the next [`ClusterPort::wait`] does
    /// not sleep (a wake that came before the reader set its futex word is not lost).
    pub(super) kicked: Arc<std::sync::atomic::AtomicBool>,
}

/// The longest sleep of [`ClusterPort::wait`]: how soon a consumer of a master that died
/// (no wake, no close) notices it.
pub const WAIT_CAP: std::time::Duration = std::time::Duration::from_millis(20);

impl ClusterPort {
    /// Opens `ID@Q` (a queue) or `ID` (any free queue, and transmit).
    pub fn open(spec: &str) -> Result<ClusterPort, PortError> {
        let bad = |why: &str| PortError::BadUri {
            uri: format!("cluster:{spec}"),
            why: why.into(),
        };
        let (id, q) = match spec.split_once('@') {
            Some((id, q)) => (id, Some(q)),
            None => (spec, None),
        };
        let id: u32 = id
            .parse()
            .map_err(|_| bad("the cluster id is a number: cluster:ID or cluster:ID@QUEUE"))?;
        let seg = Segment::open(id)?;
        match q {
            Some(q) => {
                let q: usize = q
                    .parse()
                    .map_err(|_| bad("the queue is a number: cluster:ID@QUEUE"))?;
                Self::attach(seg, q)
            }
            None => Ok(Self::unattached(seg)),
        }
    }

    pub(super) fn unattached(seg: Arc<Segment>) -> ClusterPort {
        ClusterPort {
            name: format!("cluster:{}", seg.id),
            seg,
            rx_q: None,
            ring: None,
            owner: 0,
            tx: None,
            stats: PortStats::default(),
            idle: 0,
            polls: 0,
            master_gone: false,
            finished: false,
            drops_base: [0; 5],
            drops_seen: [0; 5],
            wait_cap: WAIT_CAP,
            kicked: Arc::default(),
        }
    }

    /// Attaches to queue `q` of a mapped segment.
    pub fn attach(seg: Arc<Segment>, q: usize) -> Result<ClusterPort, PortError> {
        let mut p = Self::unattached(seg);
        p.name = format!("cluster:{}@{}", p.seg.id, q);
        p.attach_rx(Some(q))?;
        Ok(p)
    }

    pub(super) fn attach_rx(&mut self, want: Option<usize>) -> Result<(), PortError> {
        let seg = self.seg.clone();
        let queues: Vec<usize> = match want {
            Some(q) if q >= seg.queues => {
                return Err(PortError::BadUri {
                    uri: self.name.clone(),
                    why: format!("cluster {} has queues 0..{}", seg.id, seg.queues - 1),
                })
            }
            Some(q) => vec![q],
            None => (0..seg.queues).collect(),
        };
        let mut last = None;
        for &q in &queues {
            match claim(&seg.ctl(q).owner) {
                Ok(owner) => {
                    seg.ctl(q).attaches.fetch_add(1, Ordering::Relaxed);
                    self.drops_base = queue_drops(seg.ctl(q));
                    self.drops_seen = self.drops_base;
                    seg.ctl(q).heartbeat.store(now_ms(), Ordering::Relaxed);
                    // Resume at the first descriptor not released: anything a dead predecessor
                    // held and did not release is delivered again (at least once).
                    self.ring = Some(Borrower::attach(seg.queue_mem(q)));
                    self.rx_q = Some(q);
                    self.owner = owner;
                    if want.is_none() {
                        self.name = format!("cluster:{}@{}", seg.id, q);
                    }
                    return Ok(());
                }
                Err(e) => last = Some(e),
            }
        }
        Err(match (want, last) {
            (Some(q), Some(Some(pid))) => err(
                &self.name,
                format!("queue {q} already has a consumer (pid {pid})"),
            ),
            (None, Some(Some(_))) => err(
                &self.name,
                format!(
                    "all {} queues of cluster {} have a consumer",
                    seg.queues, seg.id
                ),
            ),
            _ => err(
                &self.name,
                "the master is busy reclaiming this queue".into(),
            ),
        })
    }

    /// The queue number, once attached.
    pub fn queue(&self) -> Option<usize> {
        self.rx_q
    }

    /// The segment.
    pub fn segment(&self) -> &Arc<Segment> {
        &self.seg
    }

    /// Releases what was handed out once at least `release_at` descriptors are pending (or
    /// `all`): one store of `tail` (the master reads that line) per few batches rather than
    /// per batch while a backlog lasts.
    #[inline(always)]
    pub(super) fn release_some(&mut self, all: bool) {
        let at = self.release_at();
        if self
            .ring
            .as_ref()
            .is_some_and(|r| all || r.unreleased() >= at)
        {
            self.release();
        }
    }

    /// A quarter of the ring, at most 256 descriptors (4 batches).
    #[inline(always)]
    pub(super) fn release_at(&self) -> u64 {
        (self.seg.slots as u64 / 4).min(4 * crate::mem::BATCH as u64)
    }

    /// Gives back what was handed out, while the queue is still ours: once the master took
    /// it back (it took everything), a store of our older tail would move the queue's tail back
    /// and hand the next consumer descriptors of frames that are no longer theirs.
    #[inline(always)]
    pub(super) fn release(&mut self) {
        let Some(q) = self.rx_q else { return };
        if self.seg.ctl(q).owner.load(Ordering::Acquire) != self.owner {
            // Not ours any more: forget the ring without touching its tail.
            self.ring = None;
            return;
        }
        if let Some(r) = self.ring.as_mut() {
            r.release();
        }
    }

    /// Whether the master ended (closed the cluster, or died: its pid is looked up when
    /// `look_at_pid`). A state word that is neither running nor closed is a corrupted segment.
    pub(super) fn check_master(&mut self, look_at_pid: bool) -> Result<bool, PortError> {
        let h = self.seg.header();
        match h.state.load(Ordering::Acquire) {
            STATE_CLOSED => self.master_gone = true,
            STATE_RUNNING => {}
            other => {
                return Err(self.corrupted(format!("its state word is {other:#x}")));
            }
        }
        if look_at_pid && !same_process(h.master_pid, h.master_start) {
            self.master_gone = true;
        }
        Ok(self.master_gone)
    }

    /// The master is gone and this queue has nothing more: a normal end when it closed the
    /// cluster (Ok(0), then [`Port::is_finished`]), an error when it died.
    pub(super) fn end(&mut self) -> Result<usize, PortError> {
        self.release();
        // The master may have published more just before it ended (after our last look at
        // head): the caller's acquire load of the state word saw the close, which the master
        // stored after its last head, so this load sees everything it enqueued.
        if self.ring.as_mut().is_some_and(|r| r.recheck()) {
            return Ok(0);
        }
        let h = self.seg.header();
        if h.state.load(Ordering::Acquire) == STATE_CLOSED {
            self.finished = true;
            return Ok(0);
        }
        Err(err(
            &self.name,
            format!(
                "cluster {} ended: its master (pid {}) died without closing the cluster (killed \
                 or crashed); {} packets received from this queue",
                self.seg.id,
                h.master_pid,
                crate::stats::group(self.stats.rx_packets)
            ),
        ))
    }

    /// Sets the longest sleep of [`ClusterPort::wait`] (default [`WAIT_CAP`]): how soon a
    /// master's death without a word is noticed. Keep it well below the master's consumer
    /// timeout, if it has one: the consumer's heartbeat is written before each sleep.
    pub fn set_wait_cap(&mut self, cap: std::time::Duration) {
        self.wait_cap = cap;
    }

    /// Sleeps until the queue holds `want` packets (1 at least, a quarter of the queue at
    /// most), the master closes the cluster, or `timeout` passes (at most [`WAIT_CAP`]: a
    /// master that died without a word is looked up after each wait that was not a wake), on
    /// the queue's futex word, which the master clears and wakes after publishing enough (see
    /// `Master::wake_readers` for why no wake-up is lost). Gives back what was handed out
    /// first. Returns at once when there is already enough to read, the queue is not attached,
    /// or the master is gone; then call `rx`.
    pub fn wait(&mut self, want: usize, timeout: std::time::Duration) {
        let Some(q) = self.rx_q else { return };
        if self.finished || self.master_gone || self.ring.is_none() {
            return;
        }
        self.release();
        let cap = self.wait_cap;
        let Some(ring) = self.ring.as_mut() else {
            return; // taken back: rx says so
        };
        let want = want.clamp(1, (self.seg.slots / 4).max(1)) as u32;
        let seg = &*self.seg;
        // Asleep is waiting, not hung: a sign of life before each sleep (at most the cap long),
        // as `rx` writes one every 64 calls, so that a master's consumer timeout
        // (`balance --consumer-timeout`) does not take the queue of an idle reader back.
        seg.ctl(q).heartbeat.store(now_ms(), Ordering::Relaxed);
        let word = &seg.ctl(q).sleeping;
        word.store(want, Ordering::Relaxed);
        // Pairs with the master's fence between its head store and its load of this word.
        std::sync::atomic::fence(Ordering::SeqCst);
        // A fresh load of head, after the fence: `available` alone counts from the head seen
        // at the last read while that is not used up (a consumer whose batch was full), and
        // what the master published since, before our word was set, woke nobody.
        ring.recheck();
        let had = ring.available();
        let enough = had.map_or(true, |n| n >= want as usize);
        // Pairs with the waker's store of `kicked` before its swap of the word, as head above.
        let kicked = self.kicked.swap(false, Ordering::Relaxed);
        if enough || kicked || seg.header().state.load(Ordering::Acquire) != STATE_RUNNING {
            word.store(0, Ordering::Relaxed);
            return;
        }
        crate::sys::futex::wait(word, want, timeout.min(cap));
        // Still set: not the master's wake (the time ran out, a signal): is it alive? A queue
        // that grew while we slept says so (its master published): only one that did not has
        // the master's pid looked up in /proc (an open and a read, tens of µs: on a queue slower
        // than the watermark, every sleep ends at the cap, 50 times a second, and those lookups
        // were a fifth of tcpdump's CPU at ~60 kpps on the loaded machine).
        if word.swap(0, Ordering::Relaxed) != 0 {
            let grew = self.ring.as_mut().is_some_and(|r| {
                r.recheck();
                matches!((had, r.available()), (Ok(a), Ok(b)) if b > a)
            });
            let _ = self.check_master(!grew);
        }
    }

    /// The segment holds something its master never wrote.
    pub(super) fn corrupted(&self, what: String) -> PortError {
        err(
            &self.name,
            format!(
                "cluster {} segment is corrupted ({what}): stopping rather than reading garbage; \
                 {} packets received from this queue",
                self.seg.id,
                crate::stats::group(self.stats.rx_packets)
            ),
        )
    }

    /// The master took our queue back: the cluster ended (keep nothing past `taken_at`), or
    /// it thought us dead (an error).
    pub(super) fn taken_back(&mut self) -> Result<usize, PortError> {
        if self.seg.header().state.load(Ordering::Acquire) == STATE_CLOSED {
            self.finished = true;
            return Ok(0);
        }
        Err(err(
            &self.name,
            "the master reclaimed this queue (consumer considered dead); reattach".into(),
        ))
    }

    /// After the master took the queue back at its end: how far our reads count (its word).
    pub(super) fn taken_at(&self, q: usize) -> u64 {
        let ctl = self.seg.ctl(q);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        while ctl.owner.load(Ordering::Acquire) as u32 == RECLAIMING
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
        ctl.taken_at.load(Ordering::Acquire)
    }
}

impl Port for ClusterPort {
    fn name(&self) -> &str {
        &self.name
    }

    #[inline]
    fn rx(&mut self, batch: &mut Batch) -> Result<usize, PortError> {
        if self.finished {
            return Ok(0);
        }
        let q = match self.rx_q {
            Some(q) => q,
            None => {
                self.attach_rx(None)?;
                self.rx_q.unwrap_or(0)
            }
        };
        batch.bind(&self.seg.pool);
        if self.ring.is_none() {
            // The master took the queue back earlier (see below).
            return self.taken_back();
        }
        self.release_some(false);
        let slots = self.seg.slots as u64;
        // The master's cursor is read only when what we already know is published ran out: no
        // cache-line transfer per call while a backlog lasts.
        // The master only moves head forward, at most a ring ahead of what we released.
        let Some(ring) = self.ring.as_mut() else {
            return self.taken_back(); // release_some saw the queue taken back
        };
        let avail = match ring.available() {
            Ok(a) => a,
            Err(head) => {
                let read = ring.read();
                return Err(self.corrupted(format!(
                    "queue {q}'s head cursor is {head}, with {read} read and {slots} slots"
                )));
            }
        };
        let read = ring.read();
        // The master took the queue back (we were thought dead, or silent for longer than its
        // consumer timeout, or it ended): stop rather than read frames that are no longer ours.
        // The owner word has a cache line of its own that changes only then, so this load is
        // cheap.
        self.polls = self.polls.wrapping_add(1);
        let ctl = self.seg.ctl(q);
        if self.polls.is_multiple_of(64) {
            ctl.heartbeat.store(now_ms(), Ordering::Relaxed);
        }
        if ctl.owner.load(Ordering::Acquire) != self.owner {
            self.ring = None;
            return self.taken_back();
        }
        let mut n = avail.min(batch.room());
        if n == 0 {
            // Nothing to read: give back everything handed out (the master frees it).
            self.release();
            self.idle = self.idle.wrapping_add(1);
            // The closed flag is one load; the master's pid is looked up now and then.
            if self.master_gone || self.check_master(self.idle.is_multiple_of(1024))? {
                return self.end();
            }
            return Ok(0);
        }
        self.idle = 0;
        // Slots [read, read + n) lie in at most two runs of the ring: copied as slices, in
        // place (the master does not rewrite them until we release them).
        let before = batch.len();
        if let Some(ring) = self.ring.as_ref() {
            ring.peek(n, |d| {
                batch.extend(d);
            });
        }
        // Every descriptor must name a frame of the segment with a length that fits, and a
        // plausible wire length: checked branch-free in the byte count's loop, one branch per
        // batch.
        // A packet is in a regular frame or in a big one (with none, `bspan` is 0: never). In
        // a regular frame it starts anywhere past the headroom (an AF_XDP input on the
        // segment's frames writes it 256 bytes in) and ends inside the frame.
        let seg = &*self.seg;
        let (base, span, fmask, head) = (
            seg.frames_off as u64,
            (seg.frames * seg.frame_size) as u64,
            seg.frame_size as u64 - 1,
            seg.headroom as u64,
        );
        let (bbase, bspan, bmask, bcap) = (
            (seg.big_off + seg.headroom) as u64,
            (seg.big_frames * seg.big_size) as u64,
            (seg.big_size as u64).saturating_sub(1),
            seg.big_size.saturating_sub(seg.headroom) as u32,
        );
        let not_in_frame = |d: &Desc| -> bool {
            let off = d.addr.wrapping_sub(base);
            let inner = off & fmask;
            (inner < head) | (off >= span) | (inner + u64::from(d.len) > fmask + 1)
        };
        let not_in_big = |d: &Desc| -> bool {
            let boff = d.addr.wrapping_sub(bbase);
            ((boff & bmask) != 0) | (boff >= bspan) | (d.len > bcap)
        };
        // First the regular frames' test alone (every packet of the usual traffic): only a
        // batch with a packet that fails it (one in a big frame, or a bad one) is tested again
        // in full, so the big frames' test costs nothing a packet otherwise.
        let not_small = |d: &Desc| not_in_frame(d) | (d.wire_len > MAX_WIRE_LEN);
        let bad_desc = |d: &Desc| not_in_frame(d) & not_in_big(d) | (d.wire_len > MAX_WIRE_LEN);
        let mut bytes = 0u64;
        let mut odd = false;
        for d in &batch.descs()[before..] {
            odd |= not_small(d);
            bytes += d.wire_len as u64;
        }
        if odd && batch.descs()[before..].iter().any(bad_desc) {
            let (i, d) = batch.descs()[before..]
                .iter()
                .enumerate()
                .find(|(_, d)| bad_desc(d))
                .map(|(i, d)| (i, *d))
                .unwrap_or_default();
            batch.forget_from(before);
            self.stats.rx_drops.add(DropReason::Malformed, n as u64);
            return Err(self.corrupted(format!(
                "queue {q} slot {}: descriptor at offset {:#x}, length {}, wire length {} is \
                 not a packet in a frame of the segment; {n} descriptors dropped as malformed",
                (read + i as u64) & (slots - 1),
                d.addr,
                d.len,
                d.wire_len
            )));
        }
        ctl.handed.store(read + n as u64, Ordering::Relaxed);
        if self.seg.header().state.load(Ordering::Relaxed) == STATE_CLOSED {
            // The master is ending and may take the queue back at any moment: make our
            // `handed` store visible before looking at the owner word (it fences likewise
            // between its swap of the owner word and its load of `handed`).
            std::sync::atomic::fence(Ordering::SeqCst);
            if ctl.owner.load(Ordering::Relaxed) != self.owner {
                // It did: keep only what it counted as delivered to us.
                let keep = self.taken_at(q).saturating_sub(read).min(n as u64) as usize;
                if keep < n {
                    bytes = batch.descs()[before..before + keep]
                        .iter()
                        .map(|d| d.wire_len as u64)
                        .sum();
                    batch.forget_from(before + keep);
                    n = keep;
                }
                self.finished = true;
            }
        }
        if let Some(ring) = self.ring.as_mut() {
            ring.advance(n);
        }
        self.stats.rx_packets += n as u64;
        self.stats.rx_bytes += bytes;
        Ok(n)
    }

    fn tx(&mut self, batch: &mut Batch) -> Result<usize, PortError> {
        self.tx_lane(batch)
    }

    fn rx_wait(&mut self, want: usize, timeout: std::time::Duration) -> bool {
        self.wait(want, timeout);
        true
    }

    fn rx_slots(&self) -> Option<usize> {
        self.rx_q.map(|_| self.seg.slots)
    }

    fn rx_waker(&self) -> Option<Arc<dyn crate::port::RxWake>> {
        let q = self.rx_q?;
        Some(Arc::new(QueueWaker {
            seg: self.seg.clone(),
            q,
            kicked: self.kicked.clone(),
        }))
    }

    /// Puts the unused packets back in the queue: they count neither as received here nor
    /// as delivered by the master (which counts what is given back): the next reader of the
    /// queue gets them, or the master drops them as its consumer gone (once this one leaves).
    fn rx_unused(&mut self, n: usize, bytes: u64) {
        let (Some(q), Some(ring)) = (self.rx_q, self.ring.as_mut()) else {
            return;
        };
        let ctl = self.seg.ctl(q);
        if ctl.owner.load(Ordering::Acquire) != self.owner {
            return; // taken back: the master counted them already
        }
        let k = ring.unread(n as u64);
        ctl.handed.store(ring.read(), Ordering::Relaxed);
        self.stats.rx_packets = self.stats.rx_packets.saturating_sub(k);
        if k == n as u64 {
            self.stats.rx_bytes = self.stats.rx_bytes.saturating_sub(bytes);
        }
    }

    fn stats(&mut self) -> PortStats {
        let mut s = self.stats;
        if let Some(q) = self.rx_q {
            // The queue's drops since we attached; a counter seen lower than before (written
            // over in the segment) stays where it was.
            let now = queue_drops(self.seg.ctl(q));
            for (seen, v) in self.drops_seen.iter_mut().zip(now) {
                *seen = (*seen).max(v);
            }
            let d = |i: usize| self.drops_seen[i].saturating_sub(self.drops_base[i]);
            s.rx_drops.add(DropReason::RingFull, d(0));
            s.rx_drops.add(DropReason::ConsumerGone, d(1));
            s.rx_drops.add(DropReason::NoFrame, d(2));
            s.rx_drops.add(DropReason::Unread, d(3));
            s.rx_drops.add(DropReason::TooBig, d(4));
        }
        s
    }

    fn is_finished(&self) -> bool {
        self.finished
    }

    fn end_note(&self) -> Option<String> {
        self.finished
            .then(|| format!("cluster {} ended: master stopped", self.seg.id))
    }

    fn pool(&self) -> Option<&Arc<Pool>> {
        Some(&self.seg.pool)
    }
}

/// Ends the sleep of a queue's reader (`pcap_breakloop` from another thread or a signal
/// handler): marks the port kicked, fences, then clears its futex word, as the master does, and
/// wakes it. As with the master's head and word, the two fences leave no gap: either the
/// reader's look after setting its word sees the kick (and it does not sleep), or the swap here
/// sees its word (and the FUTEX_WAIT returns, or does not start).
struct QueueWaker {
    seg: Arc<Segment>,
    q: usize,
    kicked: Arc<std::sync::atomic::AtomicBool>,
}

impl crate::port::RxWake for QueueWaker {
    fn wake(&self) {
        self.kicked.store(true, Ordering::Relaxed);
        std::sync::atomic::fence(Ordering::SeqCst);
        let word = &self.seg.ctl(self.q).sleeping;
        if word.swap(0, Ordering::Relaxed) != 0 {
            crate::sys::futex::wake(word, 1);
        }
    }
}

impl Drop for ClusterPort {
    fn drop(&mut self) {
        self.release();
        if let Some(q) = self.rx_q {
            unclaim(&self.seg.ctl(q).owner, self.owner);
        }
        if let Some(t) = &self.tx {
            unclaim(&self.seg.lane_ctl(t.lane).owner, t.owner);
        }
    }
}

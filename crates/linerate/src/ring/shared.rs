//! A lending queue (release by tail), the protocol of a cluster's queues: the producer
//! publishes items with `head`; the consumer reads them in place and gives them back by moving
//! `tail`, like a kernel ring; the producer takes back (reclaims) what was given back, and
//! knows what each slot held from a tag per slot kept in its own memory. Nothing the consumer
//! writes can make the producer release a tag it did not lend, or one twice: `tail` is clamped
//! to what is lent, and the tags never leave the producer.
//!
//! The protocol ([`Lender`], [`Borrower`]) is generic over the memory the queue lives in
//! ([`QueueMem`]): a shared-memory region mapped by several processes ([`RegionQueue`], whose
//! cursors are plain atomics at fixed offsets) or the heap ([`HeapQueue`], on `crate::sync`
//! atomics and cells, which become loom's under `--cfg loom`: the model checks this protocol
//! with the very code the cluster runs).
//!
//! Orderings (the same as the cluster's queues always had):
//! - the producer writes slots, then stores `head` with Release; the consumer loads `head`
//!   with Acquire before reading the slots below it;
//! - the consumer stores `tail` with Release after its last read of the slots below it; the
//!   producer loads `tail` with Acquire before it reuses those slots (and their frames).
//!
//! Fan-out: [`Holds`] keeps a reference count per frame lent to several queues at once (in the
//! producer's memory) and frees it when the last queue gives it back.

use crossbeam_utils::CachePadded;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// A 64-bit cursor word: std's atomic (in a shared region, or in the heap) or loom's.
pub trait Cursor: Send + Sync {
    /// Loads the cursor.
    fn load(&self, o: Ordering) -> u64;
    /// Stores the cursor.
    fn store(&self, v: u64, o: Ordering);
}

impl Cursor for std::sync::atomic::AtomicU64 {
    #[inline(always)]
    fn load(&self, o: Ordering) -> u64 {
        std::sync::atomic::AtomicU64::load(self, o)
    }
    #[inline(always)]
    fn store(&self, v: u64, o: Ordering) {
        std::sync::atomic::AtomicU64::store(self, v, o)
    }
}

#[cfg(loom)]
impl Cursor for loom::sync::atomic::AtomicU64 {
    fn load(&self, o: Ordering) -> u64 {
        loom::sync::atomic::AtomicU64::load(self, o)
    }
    fn store(&self, v: u64, o: Ordering) {
        loom::sync::atomic::AtomicU64::store(self, v, o)
    }
}

/// The two cursors of a queue, each on its own cache line(s): `head` (written by the producer)
/// then `tail` (written by the consumer). In a region: 256 bytes, `tail` at offset 128.
#[repr(C)]
#[derive(Debug, Default)]
pub struct Cursors<A> {
    /// Items published: the producer's cursor.
    pub head: CachePadded<A>,
    /// Items given back: the consumer's cursor.
    pub tail: CachePadded<A>,
}

/// The memory a queue lives in: its cursors and a power-of-two array of slots.
///
/// # Safety
/// `cursors` and the slots stay valid (and at the same place) while `self` lives; `slots()` is
/// a power of two and never changes; `write`, `read` and `slot_ptr` touch only slots
/// `[i, i + n)` with `i + n <= slots()`.
pub unsafe trait QueueMem<T: Copy> {
    /// The cursor word type.
    type Cursor: Cursor;
    /// The cursors.
    fn cursors(&self) -> &Cursors<Self::Cursor>;
    /// Number of slots (a power of two).
    fn slots(&self) -> usize;
    /// Writes `src` into slots `[i, i + src.len())`.
    ///
    /// # Safety
    /// `i + src.len() <= slots()`, and no one else reads or writes those slots meanwhile.
    unsafe fn write(&self, i: usize, src: &[T]);
    /// Hands slots `[i, i + n)` to `f` (as one slice, or several in a model).
    ///
    /// # Safety
    /// `i + n <= slots()`, those slots were written (and published) and no one writes them
    /// meanwhile.
    unsafe fn read<F: FnMut(&[T])>(&self, i: usize, n: usize, f: &mut F);
    /// Address of slot `i & (slots() - 1)`, for prefetching only (never dereferenced here).
    fn slot_ptr(&self, i: usize) -> *const T;
}

/// A queue in a shared region mapped by several processes: cursors and slots at fixed places,
/// plain std atomics (a region cannot hold loom's).
pub struct RegionQueue<T> {
    cursors: *const Cursors<std::sync::atomic::AtomicU64>,
    slots: *mut T,
    n: usize,
    _keep: Arc<dyn Send + Sync>,
}

impl<T> std::fmt::Debug for RegionQueue<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegionQueue")
            .field("slots", &self.n)
            .finish()
    }
}

// SAFETY: the cursors are only touched through atomics; slots are accessed under the protocol
// (a slot is written by the one producer before its Release store of head and read by the one
// consumer after its Acquire load; reused only after the consumer's Release store of tail);
// `_keep` keeps the region mapped. T is Copy + Send.
unsafe impl<T: Copy + Send> Send for RegionQueue<T> {}
// SAFETY: as above: shared access is through atomics and the protocol.
unsafe impl<T: Copy + Send> Sync for RegionQueue<T> {}

impl<T> RegionQueue<T> {
    /// A queue whose cursors are at `cursors` and `slots` slots at `slots`, kept mapped by
    /// `keep`.
    ///
    /// # Safety
    /// `cursors` points to a [`Cursors`] (zeroed or in use by this protocol) aligned to 128
    /// bytes, `slots` to `n` slots of `T` (`n` a power of two), both inside memory kept mapped
    /// while `keep` lives, and any bit pattern there is a valid `T`.
    pub unsafe fn new(
        cursors: *const u8,
        slots: *mut u8,
        n: usize,
        keep: Arc<dyn Send + Sync>,
    ) -> Self {
        debug_assert!(n.is_power_of_two());
        RegionQueue {
            cursors: cursors as *const Cursors<std::sync::atomic::AtomicU64>,
            slots: slots as *mut T,
            n,
            _keep: keep,
        }
    }
}

// SAFETY: the pointers come from `new`'s contract (valid while `_keep` lives, n a power of
// two); every access below stays inside `[i, i + n)` as the callers promise.
unsafe impl<T: Copy + Send> QueueMem<T> for RegionQueue<T> {
    type Cursor = std::sync::atomic::AtomicU64;
    #[inline(always)]
    fn cursors(&self) -> &Cursors<Self::Cursor> {
        // SAFETY: valid and aligned while `_keep` lives (new's contract); atomics only.
        unsafe { &*self.cursors }
    }
    #[inline(always)]
    fn slots(&self) -> usize {
        self.n
    }
    #[inline(always)]
    unsafe fn write(&self, i: usize, src: &[T]) {
        // SAFETY: i + src.len() <= n (caller), and the slots are the caller's to write; the
        // source is in the producer's own memory, so the two do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.slots.add(i), src.len()) }
    }
    #[inline(always)]
    unsafe fn read<F: FnMut(&[T])>(&self, i: usize, n: usize, f: &mut F) {
        // SAFETY: i + n <= slots, written and published, not written meanwhile (caller).
        f(unsafe { std::slice::from_raw_parts(self.slots.add(i), n) })
    }
    #[inline(always)]
    fn slot_ptr(&self, i: usize) -> *const T {
        self.slots.wrapping_add(i & (self.n - 1))
    }
}

/// A queue on the heap, on `crate::sync` atomics and cells (loom's under `--cfg loom`, so
/// the model checks every slot access for races).
pub struct HeapQueue<T> {
    cursors: Cursors<crate::sync::AtomicU64>,
    slots: Box<[crate::sync::UnsafeCell<T>]>,
}

impl<T: Copy + Default> HeapQueue<T> {
    /// A queue of `slots` slots (rounded up to a power of two, at least 2).
    pub fn new(slots: usize) -> Arc<Self> {
        let n = slots.max(2).next_power_of_two();
        Arc::new(HeapQueue {
            cursors: Cursors {
                head: CachePadded::new(crate::sync::AtomicU64::new(0)),
                tail: CachePadded::new(crate::sync::AtomicU64::new(0)),
            },
            slots: (0..n)
                .map(|_| crate::sync::UnsafeCell::new(T::default()))
                .collect(),
        })
    }
}

// SAFETY: the slots are a boxed array of `n` cells (n a power of two) owned by the Arc; the
// callers keep to `[i, i + n)`. Cells are accessed through their closure API, so under loom
// every access is race-checked.
unsafe impl<T: Copy + Send> QueueMem<T> for Arc<HeapQueue<T>> {
    type Cursor = crate::sync::AtomicU64;
    fn cursors(&self) -> &Cursors<Self::Cursor> {
        &self.cursors
    }
    fn slots(&self) -> usize {
        self.slots.len()
    }
    unsafe fn write(&self, i: usize, src: &[T]) {
        for (k, v) in src.iter().enumerate() {
            // SAFETY: the slot is the caller's to write (QueueMem::write's contract).
            self.slots[i + k].with_mut(|p| unsafe { p.write(*v) });
        }
    }
    unsafe fn read<F: FnMut(&[T])>(&self, i: usize, n: usize, f: &mut F) {
        for k in 0..n {
            // SAFETY: the slot was published and is not written meanwhile (caller).
            let v = self.slots[i + k].with(|p| unsafe { *p });
            f(std::slice::from_ref(&v));
        }
    }
    fn slot_ptr(&self, i: usize) -> *const T {
        let _ = i;
        std::ptr::null()
    }
}

// SAFETY: the cursors are atomics; the slots are accessed under the protocol only (see
// RegionQueue). Only Arc<HeapQueue> handles are used.
unsafe impl<T: Copy + Send> Send for HeapQueue<T> {}
// SAFETY: as above.
unsafe impl<T: Copy + Send> Sync for HeapQueue<T> {}

/// The producer of a lending queue, with a tag per slot (what it lent there) in its own memory.
pub struct Lender<T: Copy, M: QueueMem<T>> {
    mem: M,
    mask: usize,
    /// Published so far.
    head: u64,
    /// Taken back so far (given back by the consumer, or taken from it).
    reclaimed: u64,
    /// The consumer's `tail` as last read (clamped to `[reclaimed, head]`).
    cached_tail: u64,
    tags: Box<[u32]>,
    _t: std::marker::PhantomData<T>,
}

impl<T: Copy, M: QueueMem<T>> Lender<T, M> {
    /// The producer of a fresh queue (both cursors 0).
    pub fn new(mem: M) -> Self {
        let n = mem.slots();
        Lender {
            mem,
            mask: n - 1,
            head: 0,
            reclaimed: 0,
            cached_tail: 0,
            tags: vec![0; n].into_boxed_slice(),
            _t: std::marker::PhantomData,
        }
    }

    /// The producer of a queue in use, after a producer that left: continues at its `head`,
    /// with what the consumer has not given back yet still lent (untagged: tag 0). A `tail`
    /// ahead of `head` or more than a ring behind it is not the consumer's: clamped.
    pub fn resume(mem: M) -> Self {
        let n = mem.slots() as u64;
        let head = mem.cursors().head.load(Ordering::Acquire);
        let tail = mem
            .cursors()
            .tail
            .load(Ordering::Acquire)
            .clamp(head.saturating_sub(n), head);
        Lender {
            mask: mem.slots() - 1,
            mem,
            head,
            reclaimed: tail,
            cached_tail: tail,
            tags: vec![0; n as usize].into_boxed_slice(),
            _t: std::marker::PhantomData,
        }
    }

    /// Items published so far.
    #[inline(always)]
    pub fn head(&self) -> u64 {
        self.head
    }

    /// Items taken back so far.
    #[inline(always)]
    pub fn reclaimed(&self) -> u64 {
        self.reclaimed
    }

    /// Items lent and not taken back yet.
    #[inline(always)]
    pub fn outstanding(&self) -> u64 {
        self.head - self.reclaimed
    }

    /// Slots free as of the last [`Lender::reclaim`] (no atomic access).
    #[inline(always)]
    pub fn room(&self) -> u64 {
        (self.mask as u64 + 1) - (self.head - self.cached_tail)
    }

    /// Tags the slot of the `k`-th item of the next [`Lender::publish`].
    #[inline(always)]
    pub fn tag(&mut self, k: usize, tag: u32) {
        let i = (self.head as usize).wrapping_add(k) & self.mask;
        self.tags[i] = tag;
    }

    /// Tags the slots of the next [`Lender::publish`]'s first `tags.len()` items: item `j`
    /// with `tags[j] | or` ([`Lender::tag`] for each, as at most two runs of the tag array).
    #[inline(always)]
    pub fn tag_run(&mut self, tags: &[u32], or: u32) {
        let at = (self.head as usize) & self.mask;
        let n = tags.len().min(self.mask + 1);
        let first = n.min(self.mask + 1 - at);
        for (t, &g) in self.tags[at..at + first].iter_mut().zip(&tags[..first]) {
            *t = g | or;
        }
        for (t, &g) in self.tags[..n - first].iter_mut().zip(&tags[first..n]) {
            *t = g | or;
        }
    }

    /// Address of the slot at cursor `c`, to prefetch it (a hint).
    #[inline(always)]
    pub fn slot_ptr(&self, c: u64) -> *const T {
        self.mem.slot_ptr(c as usize)
    }

    /// Publishes `items` (tagged with [`Lender::tag`] beforehand): copies them into the slots
    /// (at most two runs) and stores `head` once.
    ///
    /// # Panics
    /// When there is no room for them (the caller checks [`Lender::room`]).
    #[inline]
    pub fn publish(&mut self, items: &[T]) {
        let n = items.len();
        assert!(n as u64 <= self.room(), "lending queue overfilled");
        if n == 0 {
            return;
        }
        let slots = self.mask + 1;
        let at = (self.head as usize) & self.mask;
        let first = n.min(slots - at);
        // SAFETY: slots [head, head + n) are free: n <= room keeps head - tail + n <= slots,
        // so the consumer is not reading them (it reads below head only); they become visible
        // only with the Release store of head below. Both runs lie inside the slot array
        // (at + first <= slots, n - first < slots).
        unsafe {
            self.mem.write(at, &items[..first]);
            if first < n {
                self.mem.write(0, &items[first..]);
            }
        }
        self.head += n as u64;
        self.mem.cursors().head.store(self.head, Ordering::Release);
    }

    /// Takes back what the consumer gave back: `f` gets each slot's tag, oldest first. Reads
    /// the consumer's `tail` only when something is lent.
    #[inline]
    pub fn reclaim(&mut self, mut f: impl FnMut(u32)) {
        if self.reclaimed == self.head {
            // Nothing outstanding: leave the consumer's cache line alone.
            return;
        }
        // Acquire: pairs with the consumer's Release store of tail, after its last read of the
        // slots (and of the frames they name) below it.
        let tail = self.mem.cursors().tail.load(Ordering::Acquire);
        // A consumer can only give back what it was lent.
        let tail = tail.clamp(self.reclaimed, self.head);
        self.cached_tail = tail;
        while self.reclaimed < tail {
            f(self.tags[(self.reclaimed as usize) & self.mask]);
            self.reclaimed += 1;
        }
    }

    /// [`Lender::reclaim`] a run at a time: `f` gets the tags of the slots given back, oldest
    /// first, as at most two slices (the ring wraps once at most).
    #[inline]
    pub fn reclaim_runs(&mut self, mut f: impl FnMut(&[u32])) {
        if self.reclaimed == self.head {
            return;
        }
        // Acquire: as in `reclaim`.
        let tail = self.mem.cursors().tail.load(Ordering::Acquire);
        let tail = tail.clamp(self.reclaimed, self.head);
        self.cached_tail = tail;
        let n = (tail - self.reclaimed) as usize;
        if n == 0 {
            return;
        }
        let at = (self.reclaimed as usize) & self.mask;
        let first = n.min(self.mask + 1 - at);
        f(&self.tags[at..at + first]);
        if first < n {
            f(&self.tags[..n - first]);
        }
        self.reclaimed = tail;
    }

    /// With nothing lent, the consumer's `tail` is `head`: stores it again if it is not (a
    /// consumer whose items were taken back gave back late, moving `tail` back; a consumer
    /// attaching later would start there). Returns whether it had to.
    pub fn repair_tail(&mut self) -> bool {
        if self.reclaimed != self.head {
            return false;
        }
        let c = self.mem.cursors();
        if c.tail.load(Ordering::Acquire) == self.head {
            return false;
        }
        c.tail.store(self.head, Ordering::Release);
        true
    }

    /// Takes back everything still lent, given back or not (its consumer died, left, or the
    /// queue ends): `f` gets each slot's cursor and tag, oldest first; then `tail` is moved to
    /// `head` (a consumer attaching later starts there).
    pub fn take_back(&mut self, mut f: impl FnMut(u64, u32)) {
        while self.reclaimed < self.head {
            f(
                self.reclaimed,
                self.tags[(self.reclaimed as usize) & self.mask],
            );
            self.reclaimed += 1;
        }
        self.cached_tail = self.head;
        self.mem.cursors().tail.store(self.head, Ordering::Release);
    }
}

/// The consumer of a lending queue: reads items in place and gives them back by moving `tail`.
pub struct Borrower<T: Copy, M: QueueMem<T>> {
    mem: M,
    mask: usize,
    /// Handed out so far.
    read: u64,
    /// The producer's `head` as last read.
    cached_head: u64,
    /// Given back so far (the last `tail` stored).
    released: u64,
    _t: std::marker::PhantomData<T>,
}

impl<T: Copy, M: QueueMem<T>> Borrower<T, M> {
    /// Attaches to a queue: resumes at the first item not given back (what a previous consumer
    /// held and did not give back is handed out again).
    pub fn attach(mem: M) -> Self {
        let tail = mem.cursors().tail.load(Ordering::Acquire);
        Borrower {
            mask: mem.slots() - 1,
            mem,
            read: tail,
            cached_head: tail,
            released: tail,
            _t: std::marker::PhantomData,
        }
    }

    /// Items handed out so far.
    #[inline(always)]
    pub fn read(&self) -> u64 {
        self.read
    }

    /// Items handed out and not given back yet.
    #[inline(always)]
    pub fn unreleased(&self) -> u64 {
        self.read - self.released
    }

    /// Items published and not handed out yet. Reads the producer's `head` only when what is
    /// already known ran out; a `head` behind what was read, or more than a ring ahead of what
    /// was given back, is not the producer's: `Err(head)`.
    #[inline(always)]
    pub fn available(&mut self) -> Result<usize, u64> {
        if self.read >= self.cached_head {
            // Acquire: pairs with the producer's Release store of head, after its slot writes.
            let head = self.mem.cursors().head.load(Ordering::Acquire);
            if head < self.read || head - self.released > self.mask as u64 + 1 {
                return Err(head);
            }
            self.cached_head = head;
        }
        Ok((self.cached_head - self.read) as usize)
    }

    /// Whether the producer published something not handed out yet (one Relaxed load of
    /// `head`: a hint, [`Borrower::available`] is what reads the items).
    #[inline(always)]
    pub fn pending(&self) -> bool {
        self.mem.cursors().head.load(Ordering::Relaxed) != self.read
    }

    /// Looks at `head` once more (the producer may have published just before it ended):
    /// whether there is more to read. An implausible `head` counts as nothing more.
    pub fn recheck(&mut self) -> bool {
        let head = self.mem.cursors().head.load(Ordering::Acquire);
        if head > self.read && head - self.released <= self.mask as u64 + 1 {
            self.cached_head = head;
            return true;
        }
        false
    }

    /// Hands the next `n` items (at most [`Borrower::available`]) to `f`, in place (at most
    /// two slices), without moving past them: call [`Borrower::advance`] for what was kept.
    #[inline(always)]
    pub fn peek(&self, n: usize, mut f: impl FnMut(&[T])) {
        let n = n.min((self.cached_head - self.read) as usize);
        if n == 0 {
            return;
        }
        let at = (self.read as usize) & self.mask;
        let first = n.min(self.mask + 1 - at);
        // SAFETY: slots [read, read + n) lie below the head the producer published (acquired
        // in `available`), and it does not rewrite them until tail moves past them. Both runs
        // lie inside the slot array (at + first <= slots; n - first < slots since
        // n <= head - read <= slots).
        unsafe {
            self.mem.read(at, first, &mut f);
            if first < n {
                self.mem.read(0, n - first, &mut f);
            }
        }
    }

    /// Moves past `n` items handed out by [`Borrower::peek`] (kept by the caller until it gives
    /// them back).
    #[inline(always)]
    pub fn advance(&mut self, n: usize) {
        debug_assert!(n as u64 <= self.cached_head - self.read);
        self.read += n as u64;
    }

    /// Puts the last `n` items handed out back as not read (at most what was handed out and
    /// not given back): the next [`Borrower::release`] gives back only what came before them,
    /// and the next reader of the ring (this one, or one attaching after it) gets them.
    /// Returns how many were put back.
    pub fn unread(&mut self, n: u64) -> u64 {
        let n = n.min(self.read - self.released);
        self.read -= n;
        n
    }

    /// Gives back everything handed out (one store of `tail`, only when it moves).
    #[inline(always)]
    pub fn release(&mut self) {
        if self.read != self.released {
            // Release: the reads of these slots (and the caller's of their frames) come before.
            self.mem.cursors().tail.store(self.read, Ordering::Release);
            self.released = self.read;
        }
    }
}

/// Reference counts of frames lent to several queues at once (fan-out), in the producer's
/// memory: a tag is a frame index, marked [`Holds::SOLE`] when one queue holds it (no count).
#[derive(Debug)]
pub struct Holds {
    refcnt: Vec<u32>,
}

impl Holds {
    /// Tag of a frame held by one queue only. Frame indexes are below 2^31.
    pub const SOLE: u32 = 1 << 31;

    /// Counts for `frames` frames, all 0.
    pub fn new(frames: usize) -> Self {
        Holds {
            refcnt: vec![0; frames],
        }
    }

    /// The tag for `frame` lent to `queues` queues (1: no count kept).
    #[inline(always)]
    pub fn lend(&mut self, frame: u32, queues: u32) -> u32 {
        if queues == 1 {
            frame | Self::SOLE
        } else {
            if let Some(rc) = self.refcnt.get_mut(frame as usize) {
                *rc = queues;
            }
            frame
        }
    }

    /// One queue gave back `tag`: the frame, when it is free now (its last holder).
    #[inline(always)]
    pub fn release(&mut self, tag: u32) -> Option<u32> {
        if tag & Self::SOLE != 0 {
            return Some(tag & !Self::SOLE);
        }
        let rc = self.refcnt.get_mut(tag as usize)?;
        *rc = rc.saturating_sub(1);
        (*rc == 0).then_some(tag)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn lend_read_give_back_reclaim() {
        let q = HeapQueue::<u64>::new(4);
        let mut p = Lender::new(q.clone());
        let mut c = Borrower::attach(q);
        for k in 0..3 {
            p.tag(k, 100 + k as u32);
        }
        p.publish(&[1, 2, 3]);
        assert_eq!(p.room(), 1);
        assert_eq!(c.available(), Ok(3));
        let mut got = vec![];
        c.peek(2, |s| got.extend_from_slice(s));
        c.advance(2);
        assert_eq!(got, [1, 2]);
        let mut back = vec![];
        p.reclaim(|t| back.push(t));
        assert!(back.is_empty(), "nothing given back yet");
        c.release();
        p.reclaim(|t| back.push(t));
        assert_eq!(back, [100, 101]);
        assert_eq!(p.room(), 3);
        // Wraps around.
        for k in 0..3 {
            p.tag(k, 200 + k as u32);
        }
        p.publish(&[4, 5, 6]);
        // What is known is handed out first; head is read again once it ran out.
        assert_eq!(c.available(), Ok(1));
        c.advance(1);
        assert_eq!(c.available(), Ok(3));
        let mut got = vec![];
        c.peek(3, |s| got.extend_from_slice(s));
        assert_eq!(got, [4, 5, 6]);
    }

    #[test]
    fn reclaim_runs_gives_the_tags_back_in_order_in_at_most_two_runs() {
        let q = HeapQueue::<u64>::new(4);
        let mut p = Lender::new(q.clone());
        let mut c = Borrower::attach(q);
        let mut runs: Vec<Vec<u32>> = vec![];
        p.reclaim_runs(|t| runs.push(t.to_vec()));
        assert!(runs.is_empty(), "nothing lent");
        for round in 0..3u32 {
            // Three items a round in a ring of 4: slots 0-2, then 3, 0, 1 (wraps), then 2, 3, 0.
            for k in 0..3 {
                p.tag(k, 10 * round + k as u32);
            }
            p.publish(&[0, 0, 0]);
            p.reclaim_runs(|t| runs.push(t.to_vec()));
            assert!(runs.is_empty(), "nothing given back yet");
            assert_eq!(c.available(), Ok(3));
            c.advance(3);
            c.release();
            p.reclaim_runs(|t| runs.push(t.to_vec()));
            let want: Vec<u32> = (0..3).map(|k| 10 * round + k).collect();
            assert_eq!(runs.concat(), want, "round {round}");
            assert!(runs.len() <= 2);
            assert_eq!(runs.len() == 2, round > 0, "rounds 1 and 2 wrap: {runs:?}");
            assert_eq!((p.reclaimed(), p.room()), (3 * u64::from(round) + 3, 4));
            runs.clear();
        }
    }

    #[test]
    fn tag_run_tags_as_tag_does_across_the_wrap() {
        // Two lenders on two rings of 4, three items a round (rounds 1 and 2 wrap): one tags
        // item by item, the other a run at a time with a flag or-ed in.
        let (qa, qb) = (HeapQueue::<u64>::new(4), HeapQueue::<u64>::new(4));
        let (mut a, mut b) = (Lender::new(qa.clone()), Lender::new(qb.clone()));
        let (mut ca, mut cb) = (Borrower::attach(qa), Borrower::attach(qb));
        for round in 0..3u32 {
            let tags: Vec<u32> = (0..3).map(|k| 10 * round + k).collect();
            for (k, &t) in tags.iter().enumerate() {
                a.tag(k, t | 1 << 31);
            }
            b.tag_run(&tags, 1 << 31);
            a.publish(&[0, 0, 0]);
            b.publish(&[0, 0, 0]);
            for c in [&mut ca, &mut cb] {
                c.advance(3);
                c.release();
            }
            let (mut ta, mut tb) = (vec![], vec![]);
            a.reclaim(|t| ta.push(t));
            b.reclaim(|t| tb.push(t));
            assert_eq!(ta, tb, "round {round}");
            assert_eq!(tb, tags.iter().map(|t| t | 1 << 31).collect::<Vec<_>>());
        }
    }

    #[test]
    fn a_producer_resumes_where_the_last_one_left_and_pending_tells_the_consumer() {
        // A cluster's transmit lane: a consumer process sends, leaves, another takes the lane.
        let q = HeapQueue::<u64>::new(4);
        let mut c = Borrower::attach(q.clone());
        assert!(!c.pending());
        let mut p = Lender::new(q.clone());
        p.publish(&[1, 2, 3]);
        drop(p);
        assert!(c.pending());
        assert_eq!(c.available(), Ok(3));
        c.advance(2);
        c.release();
        // The next producer continues after item 3, with item 3 still lent.
        let mut p = Lender::resume(q.clone());
        assert_eq!((p.head(), p.reclaimed(), p.outstanding()), (3, 2, 1));
        assert_eq!(p.room(), 3);
        p.publish(&[4, 5, 6]);
        assert_eq!(p.room(), 0);
        let mut got = vec![];
        assert_eq!(c.available(), Ok(1));
        c.peek(1, |s| got.extend_from_slice(s));
        c.advance(1);
        assert_eq!(c.available(), Ok(3));
        c.peek(3, |s| got.extend_from_slice(s));
        c.advance(3);
        assert_eq!(got, [3, 4, 5, 6]);
        c.release();
        assert!(!c.pending());
        p.reclaim(|_| {});
        assert_eq!(p.room(), 4);
        // A tail that is not the consumer's (ahead of head, or more than a ring behind) is
        // clamped when resuming.
        q.cursors().tail.store(1 << 40, Ordering::Release);
        let p = Lender::resume(q.clone());
        assert_eq!((p.head(), p.outstanding()), (6, 0));
        q.cursors().tail.store(0, Ordering::Release);
        let p = Lender::resume(q);
        assert_eq!(p.outstanding(), 4);
        assert_eq!(p.room(), 0);
    }

    #[test]
    fn a_hostile_tail_is_clamped_and_a_hostile_head_refused() {
        let q = HeapQueue::<u64>::new(4);
        let mut p = Lender::new(q.clone());
        p.tag(0, 7);
        p.publish(&[1]);
        // A consumer writes a tail past what it was lent: only what was lent comes back.
        q.cursors().tail.store(1000, Ordering::Release);
        let mut back = vec![];
        p.reclaim(|t| back.push(t));
        assert_eq!(back, [7]);
        p.reclaim(|t| back.push(t));
        assert_eq!(back, [7], "nothing twice");
        let mut c = Borrower::attach(q.clone());
        q.cursors().head.store(1000 + 5, Ordering::Release);
        assert_eq!(c.available(), Err(1005));
    }

    #[test]
    fn holds_free_a_shared_frame_once_its_last_holder_gives_it_back() {
        let mut h = Holds::new(8);
        let t = h.lend(3, 2);
        assert_eq!(h.release(t), None);
        assert_eq!(h.release(t), Some(3));
        let s = h.lend(5, 1);
        assert_eq!(h.release(s), Some(5));
        assert_eq!(h.release(Holds::SOLE - 1), None, "no such frame");
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    //! The lending queue under loom: every interleaving (within a preemption bound) of a
    //! master and its consumers, with the frames' bytes as loom cells so that a frame reused
    //! while a consumer still reads it is a reported race.
    use super::*;
    use crate::sync::UnsafeCell;
    use loom::thread;

    /// The frames of a model: one value per frame, race-checked.
    struct Frames(Vec<UnsafeCell<u64>>);
    // SAFETY: accesses go through loom's cells, which check them; the protocol under test is
    // what makes them exclusive.
    unsafe impl Sync for Frames {}
    // SAFETY: as above.
    unsafe impl Send for Frames {}

    impl Frames {
        fn new(n: usize) -> Arc<Self> {
            Arc::new(Frames((0..n).map(|_| UnsafeCell::new(0)).collect()))
        }
        fn write(&self, f: u32, v: u64) {
            // SAFETY: loom checks that nothing else touches the frame meanwhile.
            self.0[f as usize].with_mut(|p| unsafe { *p = v });
        }
        fn read(&self, f: u32) -> u64 {
            // SAFETY: as above.
            self.0[f as usize].with(|p| unsafe { *p })
        }
    }

    fn model(f: impl Fn() + Sync + Send + 'static) {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(3);
        b.check(f);
    }

    /// Item `v` of the master's sequence travels as `v << 8 | frame`.
    fn item(v: u64, frame: u32) -> u64 {
        v << 8 | frame as u64
    }

    /// Publish, release, reclaim: a master lends 3 packets through a 2-slot queue with 2
    /// frames, reusing each frame as soon as the consumer gave it back; the consumer reads
    /// every packet's frame before giving it back. No frame is rewritten while read (loom
    /// would report the race), every packet arrives once and in order, and at the end both
    /// frames are free, each once.
    #[test]
    fn loom_lend_release_reclaim() {
        model(|| {
            let q = HeapQueue::<u64>::new(2);
            let frames = Frames::new(2);
            let mut p = Lender::new(q.clone());
            let mut c = Borrower::attach(q);
            let fr = frames.clone();
            let t = thread::spawn(move || {
                let mut got = Vec::new();
                while got.len() < 3 {
                    match c.available() {
                        Ok(0) => thread::yield_now(),
                        Ok(n) => {
                            let mut items = Vec::new();
                            c.peek(n, |s| items.extend_from_slice(s));
                            for it in &items {
                                let f = (*it & 0xff) as u32;
                                assert_eq!(fr.read(f), *it >> 8, "the frame holds its packet");
                                got.push(*it >> 8);
                            }
                            c.advance(items.len());
                            c.release();
                        }
                        Err(h) => panic!("implausible head {h}"),
                    }
                }
                got
            });
            let mut holds = Holds::new(2);
            let mut free = vec![1u32, 0];
            let mut sent = 0u64;
            while sent < 3 {
                p.reclaim(|tag| free.extend(holds.release(tag)));
                match free.pop() {
                    Some(f) if p.room() > 0 => {
                        frames.write(f, sent);
                        p.tag(0, f | Holds::SOLE);
                        p.publish(&[item(sent, f)]);
                        sent += 1;
                    }
                    Some(f) => {
                        free.push(f);
                        thread::yield_now();
                    }
                    None => thread::yield_now(),
                }
            }
            assert_eq!(t.join().unwrap(), vec![0, 1, 2]);
            while p.outstanding() > 0 {
                p.reclaim(|tag| free.extend(holds.release(tag)));
            }
            free.sort_unstable();
            assert_eq!(free, vec![0, 1], "each frame free once, none lost");
        });
    }

    /// A cluster's transmit lane: frames go with slots (frame = cursor mod slots). Producer A
    /// sends two packets through a 2-slot lane and leaves; producer B resumes the lane while the
    /// master reads it, and sends a third into the frame of slot 0 once it is given back. The
    /// master reads every packet once and in order, and no frame is rewritten while it is read
    /// (loom would report the race).
    #[test]
    fn loom_lane_producer_resumes_after_another() {
        model(|| {
            let q = HeapQueue::<u64>::new(2);
            let frames = Frames::new(2);
            let mut a = Lender::new(q.clone());
            for v in 0..2u64 {
                frames.write((a.head() & 1) as u32, v);
                a.publish(&[v]);
            }
            drop(a);
            let mut c = Borrower::attach(q.clone());
            let fr = frames.clone();
            let t = thread::spawn(move || {
                let mut got = Vec::new();
                while got.len() < 3 {
                    match c.available() {
                        Ok(0) => thread::yield_now(),
                        Ok(n) => {
                            let r = c.read();
                            let mut items = Vec::new();
                            c.peek(n, |s| items.extend_from_slice(s));
                            for (k, it) in items.iter().enumerate() {
                                assert_eq!(fr.read(((r + k as u64) & 1) as u32), *it);
                                got.push(*it);
                            }
                            c.advance(items.len());
                            c.release();
                        }
                        Err(h) => panic!("implausible head {h}"),
                    }
                }
                got
            });
            let mut b = Lender::resume(q);
            while b.room() == 0 {
                b.reclaim(|_| {});
                if b.room() == 0 {
                    thread::yield_now();
                }
            }
            frames.write((b.head() & 1) as u32, 2);
            b.publish(&[2]);
            assert_eq!(t.join().unwrap(), vec![0, 1, 2]);
        });
    }

    /// A consumer taken back while alive (it was silent past the master's timeout): the
    /// master takes the queue back (owner word to "reclaiming", take_back, owner word freed)
    /// while the consumer, which read one of two packets, gives back only while the owner word
    /// is still its own. Whatever the interleaving, the master has every frame back once, and
    /// after its next look at the queue (`repair_tail`, as `Master::maintain` does for a queue
    /// it took back) a consumer attaching gets nothing stale.
    #[test]
    fn loom_consumer_taken_back_while_alive_hands_nothing_stale_to_the_next() {
        use loom::sync::atomic::AtomicU64;
        model(|| {
            let q = HeapQueue::<u64>::new(4);
            let owner = Arc::new(AtomicU64::new(1));
            let mut p = Lender::new(q.clone());
            p.tag(0, Holds::SOLE);
            p.tag(1, 1 | Holds::SOLE);
            p.publish(&[item(0, 0), item(1, 1)]);
            let mut c = Borrower::attach(q.clone());
            let own = owner.clone();
            let t = thread::spawn(move || {
                while c.available() == Ok(0) {
                    thread::yield_now();
                }
                c.advance(1);
                if own.load(Ordering::Acquire) == 1 {
                    c.release();
                }
            });
            let mut holds = Holds::new(2);
            let mut free = Vec::new();
            if owner
                .compare_exchange(1, 2, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                p.reclaim(|tag| free.extend(holds.release(tag)));
                p.take_back(|_, tag| free.extend(holds.release(tag)));
                owner.store(0, Ordering::Release);
            }
            t.join().unwrap();
            p.reclaim(|tag| free.extend(holds.release(tag)));
            p.repair_tail();
            free.sort_unstable();
            assert_eq!(free, vec![0, 1], "every frame back once");
            let mut next = Borrower::attach(q);
            assert_eq!(next.available(), Ok(0), "nothing stale handed out");
        });
    }

    /// Fan-out: one frame lent to two queues at once (a reference count of 2). Whatever the
    /// order in which the two consumers give it back, the master frees it once, only after
    /// both did: it then rewrites the frame, which loom reports as a race if a consumer
    /// could still be reading it.
    #[test]
    fn loom_fan_out_frees_a_frame_after_its_last_reader() {
        model(|| {
            let frames = Frames::new(1);
            let mut holds = Holds::new(1);
            let mut lenders = Vec::new();
            let mut readers = Vec::new();
            frames.write(0, 42);
            for _ in 0..2 {
                let q = HeapQueue::<u64>::new(2);
                let mut p = Lender::new(q.clone());
                let c = Borrower::attach(q);
                let tag = holds.lend(0, 2);
                p.tag(0, tag);
                p.publish(&[item(42, 0)]);
                lenders.push(p);
                let fr = frames.clone();
                readers.push(thread::spawn(move || {
                    let mut c = c;
                    loop {
                        match c.available() {
                            Ok(0) => thread::yield_now(),
                            Ok(n) => {
                                let mut items = Vec::new();
                                c.peek(n, |s| items.extend_from_slice(s));
                                assert_eq!(items, vec![item(42, 0)]);
                                assert_eq!(fr.read(0), 42);
                                c.advance(n);
                                c.release();
                                return;
                            }
                            Err(h) => panic!("implausible head {h}"),
                        }
                    }
                }));
            }
            let mut freed = Vec::new();
            while lenders.iter().any(|p| p.outstanding() > 0) {
                for p in &mut lenders {
                    p.reclaim(|tag| freed.extend(holds.release(tag)));
                }
                if freed.is_empty() {
                    thread::yield_now();
                } else {
                    // Free: ours to reuse at once (a race here if a consumer still reads it).
                    frames.write(0, 7);
                }
            }
            for r in readers {
                r.join().unwrap();
            }
            assert_eq!(freed, vec![0], "freed exactly once");
        });
    }

    /// A consumer that dies mid-batch: it reads two of three packets, gives back only the
    /// first, and ends. The master, reclaiming concurrently and then taking the queue back
    /// once it knows the consumer is gone (the join stands for its /proc check), gets every
    /// frame back exactly once (nothing lost, nothing twice), the ones the dead consumer held
    /// included; a consumer attaching afterwards starts after them (nothing stale handed out)
    /// and receives what the master lends next.
    #[test]
    fn loom_consumer_dying_mid_batch_loses_and_doubles_nothing() {
        model(|| {
            let q = HeapQueue::<u64>::new(4);
            let frames = Frames::new(4);
            let mut p = Lender::new(q.clone());
            for f in 0..3u32 {
                frames.write(f, f as u64);
                p.tag(f as usize, f | Holds::SOLE);
            }
            p.publish(&[item(0, 0), item(1, 1), item(2, 2)]);
            let mut c = Borrower::attach(q.clone());
            let fr = frames.clone();
            let t = thread::spawn(move || {
                // Wait for the batch, read two packets, give back the first, die.
                while c.available() == Ok(0) {
                    thread::yield_now();
                }
                let mut items = Vec::new();
                c.peek(1, |s| items.extend_from_slice(s));
                assert_eq!(fr.read(0), 0);
                c.advance(1);
                c.release();
                c.peek(1, |s| items.extend_from_slice(s));
                assert_eq!(fr.read(1), 1);
                c.advance(1);
                // Dies here: frame 1 read and not given back, frame 2 never read.
                items
            });
            let mut holds = Holds::new(4);
            let mut free = vec![3u32];
            // Reclaims while the consumer runs.
            p.reclaim(|tag| free.extend(holds.release(tag)));
            let items = t.join().unwrap();
            assert_eq!(items, vec![item(0, 0), item(1, 1)]);
            let mut taken = Vec::new();
            p.reclaim(|tag| free.extend(holds.release(tag)));
            p.take_back(|c, tag| {
                taken.push(c);
                free.extend(holds.release(tag));
            });
            free.sort_unstable();
            assert_eq!(free, vec![0, 1, 2, 3], "every frame free once");
            assert_eq!(
                taken,
                vec![1, 2],
                "taken back: the held packet and the unread one"
            );
            // Ours again: rewriting the frames races with nothing.
            for f in 0..3 {
                frames.write(f, 100 + f as u64);
            }
            let mut next = Borrower::attach(q);
            assert_eq!(next.available(), Ok(0), "nothing stale handed out again");
            p.tag(0, Holds::SOLE);
            p.publish(&[item(100, 0)]);
            assert_eq!(next.available(), Ok(1));
            let mut got = Vec::new();
            next.peek(1, |s| got.extend_from_slice(s));
            assert_eq!(got, vec![item(100, 0)]);
        });
    }
}

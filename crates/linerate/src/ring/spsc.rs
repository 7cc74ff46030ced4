//! The SPSC ring: a power-of-two array of slots and two free-running 64-bit cursors.
//!
//! The producer owns `head`, the consumer owns `tail`; each side keeps a cached copy of the
//! other's cursor and reloads it only when the cache says the ring is full (or empty), so a burst
//! of 64 descriptors costs two atomic loads at most and one release store.
//!
//! The header and the slots can live in a shared-memory region (processes of a cluster): see
//! [`RingLayout`]. Indices are cursors, never pointers, so the region may be mapped at different
//! addresses in different processes.

use crate::sync::{AtomicU64, Ordering, UnsafeCell};
use crossbeam_utils::CachePadded;
use std::mem::MaybeUninit;
use std::sync::Arc;

/// The shared part of a ring: the two cursors on their own cache lines.
#[repr(C)]
#[derive(Debug)]
pub struct RingHeader {
    head: CachePadded<AtomicU64>,
    tail: CachePadded<AtomicU64>,
}

/// Where a ring's header and slots are, and what keeps that memory alive.
struct Shared<T> {
    header: *const RingHeader,
    slots: *const UnsafeCell<MaybeUninit<T>>,
    mask: u64,
    _keep: Keep<T>,
}

enum Keep<T> {
    Heap {
        _header: Box<RingHeader>,
        _slots: Box<[UnsafeCell<MaybeUninit<T>>]>,
    },
    #[cfg_attr(loom, allow(dead_code))]
    Region(#[allow(dead_code)] Arc<dyn Send + Sync>),
}

// SAFETY: the header is only touched through atomics; a slot is written by the producer before
// the release store of `head` and read by the consumer after the acquire load of `head`, and the
// producer reuses it only after the consumer's release store of `tail`. T is Copy + Send.
unsafe impl<T: Copy + Send> Send for Shared<T> {}
// SAFETY: see above; each handle (Producer, Consumer) is unique, the shared part is just memory.
unsafe impl<T: Copy + Send> Sync for Shared<T> {}

impl<T> Shared<T> {
    #[inline(always)]
    fn header(&self) -> &RingHeader {
        // SAFETY: `header` points into memory kept alive by `_keep` for the life of self.
        unsafe { &*self.header }
    }
    #[inline(always)]
    fn slot(&self, cursor: u64) -> &UnsafeCell<MaybeUninit<T>> {
        // SAFETY: `cursor & mask` < capacity, and the slot array has capacity elements kept
        // alive by `_keep`.
        unsafe { &*self.slots.add((cursor & self.mask) as usize) }
    }
}

/// The writing end of a ring.
pub struct Producer<T> {
    shared: Arc<Shared<T>>,
    head: u64,
    cached_tail: u64,
}

/// The reading end of a ring.
pub struct Consumer<T> {
    shared: Arc<Shared<T>>,
    tail: u64,
    cached_head: u64,
}

/// Makes a heap ring with `capacity` slots (rounded up to a power of two, at least 2).
pub fn ring<T: Copy + Send>(capacity: usize) -> (Producer<T>, Consumer<T>) {
    let cap = capacity.max(2).next_power_of_two();
    let header = Box::new(RingHeader {
        head: CachePadded::new(AtomicU64::new(0)),
        tail: CachePadded::new(AtomicU64::new(0)),
    });
    let slots: Box<[UnsafeCell<MaybeUninit<T>>]> = (0..cap)
        .map(|_| UnsafeCell::new(MaybeUninit::uninit()))
        .collect();
    let shared = Arc::new(Shared {
        header: &*header as *const RingHeader,
        slots: slots.as_ptr(),
        mask: cap as u64 - 1,
        _keep: Keep::Heap {
            _header: header,
            _slots: slots,
        },
    });
    split(shared)
}

fn split<T>(shared: Arc<Shared<T>>) -> (Producer<T>, Consumer<T>) {
    let head = shared.header().head.load(Ordering::Acquire);
    let tail = shared.header().tail.load(Ordering::Acquire);
    (
        Producer {
            shared: shared.clone(),
            head,
            cached_tail: tail,
        },
        Consumer {
            shared,
            tail,
            cached_head: head,
        },
    )
}

/// The layout of a ring inside a shared region: a header of two cache lines, then the slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingLayout {
    /// Number of slots (a power of two).
    pub capacity: usize,
}

impl RingLayout {
    /// A layout for at least `capacity` slots.
    pub fn new(capacity: usize) -> Self {
        RingLayout {
            capacity: capacity.max(2).next_power_of_two(),
        }
    }
    /// Alignment a ring needs in a region (that of its cache-padded header: 128 on x86_64).
    pub const ALIGN: usize = std::mem::align_of::<RingHeader>();

    /// Bytes the ring occupies in a region (header and slots), a multiple of [`Self::ALIGN`].
    pub fn size<T>(&self) -> usize {
        let s = std::mem::size_of::<RingHeader>() + self.capacity * std::mem::size_of::<T>();
        s.div_ceil(Self::ALIGN) * Self::ALIGN
    }

    /// Zeroes the cursors of a ring at `base` (the creator does this once, before any handle).
    ///
    /// # Safety
    /// `base` must be aligned to [`Self::ALIGN`], valid for `self.size::<T>()` bytes, and not in use by any
    /// handle.
    #[cfg(not(loom))]
    pub unsafe fn init(&self, base: *mut u8) {
        let h = base as *mut RingHeader;
        // SAFETY: the caller guarantees `base` is valid, aligned and unused.
        unsafe {
            h.write(RingHeader {
                head: CachePadded::new(AtomicU64::new(0)),
                tail: CachePadded::new(AtomicU64::new(0)),
            })
        };
    }

    /// Opens the producer end of a ring at `base`, kept alive by `keep`.
    ///
    /// # Safety
    /// `base` must point to a ring initialised with this layout and the same `T`, valid as long as
    /// `keep` lives; at most one producer may exist for it at a time.
    #[cfg(not(loom))]
    pub unsafe fn producer<T: Copy + Send>(
        &self,
        base: *mut u8,
        keep: Arc<dyn Send + Sync>,
    ) -> Producer<T> {
        // SAFETY: forwarded to the caller's contract.
        unsafe { split(self.shared(base, keep)).0 }
    }

    /// Opens the consumer end of a ring at `base`, kept alive by `keep`.
    ///
    /// # Safety
    /// As for [`RingLayout::producer`], with at most one consumer.
    #[cfg(not(loom))]
    pub unsafe fn consumer<T: Copy + Send>(
        &self,
        base: *mut u8,
        keep: Arc<dyn Send + Sync>,
    ) -> Consumer<T> {
        // SAFETY: forwarded to the caller's contract.
        unsafe { split(self.shared(base, keep)).1 }
    }

    #[cfg(not(loom))]
    unsafe fn shared<T>(&self, base: *mut u8, keep: Arc<dyn Send + Sync>) -> Arc<Shared<T>> {
        let header = base as *const RingHeader;
        // SAFETY: the slots follow the header inside the region (caller's contract).
        let slots = unsafe { base.add(std::mem::size_of::<RingHeader>()) }
            as *const UnsafeCell<MaybeUninit<T>>;
        Arc::new(Shared {
            header,
            slots,
            mask: self.capacity as u64 - 1,
            _keep: Keep::Region(keep),
        })
    }
}

impl<T: Copy> Producer<T> {
    /// Number of slots.
    pub fn capacity(&self) -> usize {
        (self.shared.mask + 1) as usize
    }

    #[inline(always)]
    fn free(&mut self, want: usize) -> usize {
        let cap = self.shared.mask + 1;
        let mut free = cap - (self.head - self.cached_tail);
        if free < want as u64 {
            self.cached_tail = self.shared.header().tail.load(Ordering::Acquire);
            free = cap - (self.head - self.cached_tail);
        }
        free as usize
    }

    #[inline(always)]
    fn write(&mut self, items: &[T]) {
        for (i, item) in items.iter().enumerate() {
            let cursor = self.head + i as u64;
            // SAFETY: the slot lies between head and tail + capacity, so the consumer is not
            // reading it; only this producer writes.
            self.shared
                .slot(cursor)
                .with_mut(|p| unsafe { (*p).write(*item) });
        }
        self.head += items.len() as u64;
        self.shared
            .header()
            .head
            .store(self.head, Ordering::Release);
    }

    /// Whether the reading end was dropped (nothing pushed will ever be read).
    #[inline]
    pub fn peer_gone(&self) -> bool {
        Arc::strong_count(&self.shared) == 1
    }

    /// Enqueues as many of `items` as fit; returns how many (burst).
    #[inline]
    pub fn push_burst(&mut self, items: &[T]) -> usize {
        let n = self.free(items.len()).min(items.len());
        if n > 0 {
            self.write(&items[..n]);
        }
        n
    }

    /// Enqueues all of `items` or none; returns whether it did (bulk).
    #[inline]
    pub fn push_bulk(&mut self, items: &[T]) -> bool {
        if self.free(items.len()) < items.len() {
            return false;
        }
        if !items.is_empty() {
            self.write(items);
        }
        true
    }

    /// Slots in use, as last seen by the producer (an upper bound).
    pub fn len(&self) -> usize {
        (self.head - self.shared.header().tail.load(Ordering::Acquire)) as usize
    }

    /// Whether the ring looks empty from the producer.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<T: Copy> Consumer<T> {
    /// Number of slots.
    pub fn capacity(&self) -> usize {
        (self.shared.mask + 1) as usize
    }

    #[inline(always)]
    fn avail(&mut self, want: usize) -> usize {
        let mut avail = self.cached_head - self.tail;
        if avail < want as u64 {
            self.cached_head = self.shared.header().head.load(Ordering::Acquire);
            avail = self.cached_head - self.tail;
        }
        avail as usize
    }

    #[inline(always)]
    fn read(&mut self, out: &mut [T]) {
        for (i, o) in out.iter_mut().enumerate() {
            let cursor = self.tail + i as u64;
            // SAFETY: the slot lies between tail and head: the producer wrote it before its
            // release store of head, which our acquire load observed, and won't touch it until
            // we move tail past it.
            *o = self
                .shared
                .slot(cursor)
                .with(|p| unsafe { (*p).assume_init() });
        }
        self.tail += out.len() as u64;
        self.shared
            .header()
            .tail
            .store(self.tail, Ordering::Release);
    }

    /// Dequeues up to `out.len()` items; returns how many (burst).
    #[inline]
    pub fn pop_burst(&mut self, out: &mut [T]) -> usize {
        let n = self.avail(out.len()).min(out.len());
        if n > 0 {
            self.read(&mut out[..n]);
        }
        n
    }

    /// Dequeues exactly `out.len()` items or none (bulk).
    #[inline]
    pub fn pop_bulk(&mut self, out: &mut [T]) -> bool {
        if self.avail(out.len()) < out.len() {
            return false;
        }
        if !out.is_empty() {
            self.read(out);
        }
        true
    }

    /// Items waiting, as seen now.
    pub fn len(&self) -> usize {
        (self.shared.header().head.load(Ordering::Acquire) - self.tail) as usize
    }

    /// Whether nothing is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn burst_and_bulk() {
        let (mut p, mut c) = ring::<u32>(4);
        assert_eq!(p.capacity(), 4);
        assert_eq!(p.push_burst(&[1, 2, 3, 4, 5]), 4);
        assert!(!p.push_bulk(&[6]));
        let mut out = [0u32; 3];
        assert!(c.pop_bulk(&mut out));
        assert_eq!(out, [1, 2, 3]);
        assert!(p.push_bulk(&[6, 7, 8]));
        assert!(!c.pop_bulk(&mut [0u32; 5]));
        let mut out = [0u32; 8];
        assert_eq!(c.pop_burst(&mut out), 4);
        assert_eq!(&out[..4], &[4, 6, 7, 8]);
        assert!(c.is_empty());
    }

    #[test]
    fn ring_in_a_region() {
        let layout = RingLayout::new(8);
        let size = layout.size::<u64>();
        let mut mem = vec![0u64; (size + RingLayout::ALIGN) / 8];
        let base = mem.as_mut_ptr() as *mut u8;
        let base = ((base as usize).div_ceil(RingLayout::ALIGN) * RingLayout::ALIGN) as *mut u8;
        let keep: Arc<dyn Send + Sync> = Arc::new(());
        // SAFETY: `mem` outlives the handles (dropped at the end of the test), base is aligned.
        let (mut p, mut c) = unsafe {
            layout.init(base);
            (
                layout.producer::<u64>(base, keep.clone()),
                layout.consumer::<u64>(base, keep),
            )
        };
        assert_eq!(p.push_burst(&[10, 11, 12]), 3);
        let mut out = [0u64; 4];
        assert_eq!(c.pop_burst(&mut out), 3);
        assert_eq!(&out[..3], &[10, 11, 12]);
        drop((p, c));
        drop(mem);
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;

    /// Every interleaving of a producer pushing 3 items in bursts into a 2-slot ring and a
    /// consumer popping them: nothing lost, duplicated or reordered, and no slot race.
    #[test]
    fn loom_spsc() {
        loom::model(|| {
            let (mut p, mut c) = ring::<u32>(2);
            let t = loom::thread::spawn(move || {
                let items = [1u32, 2, 3];
                let mut sent = 0;
                while sent < items.len() {
                    let n = p.push_burst(&items[sent..]);
                    sent += n;
                    if n == 0 {
                        loom::thread::yield_now();
                    }
                }
            });
            let mut got = Vec::new();
            while got.len() < 3 {
                let mut out = [0u32; 2];
                let n = c.pop_burst(&mut out);
                got.extend_from_slice(&out[..n]);
                if n == 0 {
                    loom::thread::yield_now();
                }
            }
            t.join().unwrap();
            assert_eq!(got, vec![1, 2, 3]);
        });
    }
}

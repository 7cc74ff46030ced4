//! The four AF_XDP rings: single-producer single-consumer arrays shared with the kernel, with a
//! producer and a consumer cursor (free-running `u32`s) and a flags word in the same mapping.
//!
//! User space produces on the fill and tx rings and consumes on the rx and completion rings.
//! Cursors are cached: the other side's cursor is read (acquire) only when the cached view
//! says there is not enough room or data, and ours is published (release) once per batch.

use super::sys::RingOffset;
use crate::mem::Region;
use std::sync::atomic::{AtomicU32, Ordering};

/// One mapped ring of entries `T` (`u64` frame addresses or `XdpDesc`s).
pub(super) struct Ring<T: Copy> {
    producer: *const AtomicU32,
    consumer: *const AtomicU32,
    flags: *const AtomicU32,
    entries: *mut T,
    mask: u32,
    size: u32,
    /// Our cursor (producer for a producer ring, consumer for a consumer ring), not yet
    /// necessarily published.
    local: u32,
    /// The other side's cursor as last read (for a producer ring: consumer + size).
    cached: u32,
    /// Keeps the mapping alive.
    _map: Region,
}

// SAFETY: a ring is used by one thread at a time (the port that owns it is `Send`, not `Sync`);
// the pointers point into `_map`, which moves with it.
unsafe impl<T: Copy> Send for Ring<T> {}

impl<T: Copy> Ring<T> {
    /// A ring of `size` entries laid out as `off` says in `map`.
    ///
    /// # Safety
    /// `map` must be the mapping of a ring of `size` (a power of two) entries of `T` whose
    /// producer, consumer, flags and descriptor array lie at `off` inside it (what the kernel
    /// reports in `XDP_MMAP_OFFSETS` for a ring set up with that size), and the other side must
    /// follow the same single-producer single-consumer protocol.
    pub(super) unsafe fn new(
        map: Region,
        off: &RingOffset,
        size: u32,
        producer_side: bool,
    ) -> Self {
        let base = map.as_ptr();
        debug_assert!(size.is_power_of_two());
        debug_assert!(off.desc as usize + size as usize * std::mem::size_of::<T>() <= map.len());
        // SAFETY: the offsets lie inside the mapping (caller's contract); the kernel aligns the
        // cursors to their size.
        let (producer, consumer, flags, entries) = unsafe {
            (
                base.add(off.producer as usize) as *const AtomicU32,
                base.add(off.consumer as usize) as *const AtomicU32,
                base.add(off.flags as usize) as *const AtomicU32,
                base.add(off.desc as usize) as *mut T,
            )
        };
        let mut r = Ring {
            producer,
            consumer,
            flags,
            entries,
            mask: size - 1,
            size,
            local: 0,
            cached: 0,
            _map: map,
        };
        if producer_side {
            r.local = r.prod().load(Ordering::Relaxed);
            r.cached = r.cons().load(Ordering::Acquire).wrapping_add(size);
        } else {
            r.local = r.cons().load(Ordering::Relaxed);
            r.cached = r.prod().load(Ordering::Acquire);
        }
        r
    }

    #[inline(always)]
    fn prod(&self) -> &AtomicU32 {
        // SAFETY: points into the live mapping (see `new`); shared with the kernel, so only
        // atomic access.
        unsafe { &*self.producer }
    }

    #[inline(always)]
    fn cons(&self) -> &AtomicU32 {
        // SAFETY: as for `prod`.
        unsafe { &*self.consumer }
    }

    /// Entries in the ring.
    pub(super) fn size(&self) -> u32 {
        self.size
    }

    /// Whether the kernel asked to be woken up (`XDP_RING_NEED_WAKEUP`).
    #[inline(always)]
    pub(super) fn needs_wakeup(&self) -> bool {
        // SAFETY: as for `prod`.
        let f = unsafe { &*self.flags };
        f.load(Ordering::Relaxed) & super::sys::XDP_RING_NEED_WAKEUP != 0
    }

    // -- producer side ---------------------------------------------------------------------

    /// Room for up to `want` entries: returns how many slots can be written (0..=want).
    #[inline]
    pub(super) fn free(&mut self, want: u32) -> u32 {
        let mut free = self.cached.wrapping_sub(self.local);
        if free < want {
            self.cached = self.cons().load(Ordering::Acquire).wrapping_add(self.size);
            free = self.cached.wrapping_sub(self.local);
        }
        free.min(want)
    }

    /// Writes entry `i` past our cursor.
    ///
    /// # Safety
    /// `i` must be below what the last `free` returned, counted from the last `submit`.
    #[inline(always)]
    pub(super) unsafe fn write(&mut self, i: u32, v: T) {
        let idx = self.local.wrapping_add(i) & self.mask;
        // SAFETY: idx <= mask < size: inside the array; the slot is not owned by the kernel
        // because it lies between our cursor and the consumer's plus size (caller's contract).
        unsafe { self.entries.add(idx as usize).write(v) };
    }

    /// Publishes `n` written entries to the kernel.
    #[inline(always)]
    pub(super) fn submit(&mut self, n: u32) {
        self.local = self.local.wrapping_add(n);
        self.prod().store(self.local, Ordering::Release);
    }

    /// Entries produced and not yet consumed by the kernel.
    pub(super) fn in_flight(&self) -> u32 {
        self.local.wrapping_sub(self.cons().load(Ordering::Acquire))
    }

    // -- consumer side ---------------------------------------------------------------------

    /// Entries ready to read, up to `want`.
    #[inline]
    pub(super) fn ready(&mut self, want: u32) -> u32 {
        let mut n = self.cached.wrapping_sub(self.local);
        if n < want {
            self.cached = self.prod().load(Ordering::Acquire);
            n = self.cached.wrapping_sub(self.local);
        }
        n.min(want)
    }

    /// Reads entry `i` past our cursor.
    ///
    /// # Safety
    /// `i` must be below what the last `ready` returned, counted from the last `release`.
    #[inline(always)]
    pub(super) unsafe fn read(&self, i: u32) -> T {
        let idx = self.local.wrapping_add(i) & self.mask;
        // SAFETY: inside the array; the producer published it (acquire in `ready`) and will not
        // touch it before we release it (caller's contract).
        unsafe { self.entries.add(idx as usize).read() }
    }

    /// Gives `n` read entries back to the kernel.
    #[inline(always)]
    pub(super) fn release(&mut self, n: u32) {
        self.local = self.local.wrapping_add(n);
        self.cons().store(self.local, Ordering::Release);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// A producer and a consumer view of one ring in ordinary memory, driven against a model
    /// (a VecDeque) with a pseudo-random schedule that wraps the cursors many times.
    #[test]
    fn ring_matches_a_fifo_model_across_wraps() {
        let size = 16u32;
        let off = RingOffset {
            producer: 0,
            consumer: 64,
            flags: 128,
            desc: 192,
        };
        let region = Region::anon(4096).unwrap();
        let base = region.as_ptr();
        // Start the cursors near u32::MAX to cover their wrap.
        // SAFETY: in-bounds aligned writes to our own fresh mapping.
        unsafe {
            (base as *mut u32).write(u32::MAX - 40);
            (base.add(64) as *mut u32).write(u32::MAX - 40);
        }
        // SAFETY: the region outlives both views' accesses: the second view gets an alias
        // mapping region that is never unmapped (forgotten below); the layout is `off`.
        let alias = unsafe { Region::from_raw_mapping(base, 4096) };
        // SAFETY: layout as above; one producer and one consumer.
        let mut p: Ring<u64> = unsafe { Ring::new(region, &off, size, true) };
        // SAFETY: as above.
        let mut c: Ring<u64> = unsafe { Ring::new(alias, &off, size, false) };
        let mut model = std::collections::VecDeque::new();
        let mut next = 0u64;
        let mut seed = 0x9e37_79b9u32;
        for _ in 0..5000 {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            let want = seed % 20;
            if seed & 0x100 != 0 {
                let n = p.free(want);
                assert_eq!(n, want.min(size - model.len() as u32));
                for i in 0..n {
                    // SAFETY: i < n returned by free.
                    unsafe { p.write(i, next) };
                    model.push_back(next);
                    next += 1;
                }
                p.submit(n);
            } else {
                let n = c.ready(want);
                assert_eq!(n, want.min(model.len() as u32));
                for i in 0..n {
                    // SAFETY: i < n returned by ready.
                    assert_eq!(unsafe { c.read(i) }, model.pop_front().unwrap());
                }
                c.release(n);
            }
            assert_eq!(p.in_flight(), model.len() as u32);
        }
        assert!(next > 1000);
        // Both views unmap on drop: leak one so the mapping is unmapped once.
        std::mem::forget(c);
    }
}

//! The handles the library made, by the address of the `pcap_t` the program holds.
//!
//! A pointer the program passes in is ours only if it is in this table: an unknown pointer is
//! never looked at, it goes to the system's libpcap. Lookups take no lock (a scan of atomic
//! words up to the highest slot ever used, one or two loads for a program with one capture),
//! since `pcap_next_ex` looks its handle up once per packet.

use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};

/// Most handles open at once.
pub const SLOTS: usize = 256;

/// A key word that is being filled or emptied.
const BUSY: usize = 1;

/// The table: keys (the program's `pcap_t` addresses, 0 for a free slot), values (what the
/// library keeps per handle) and each handle's `pcap_breakloop` flag, which a signal handler or
/// another thread may set while the program's thread reads packets.
pub struct Registry<T> {
    keys: [AtomicUsize; SLOTS],
    vals: [AtomicPtr<T>; SLOTS],
    brk: [AtomicBool; SLOTS],
    high: AtomicUsize,
}

impl<T> Default for Registry<T> {
    fn default() -> Self {
        Self::new()
    }
}

/// Why a handle could not be registered.
#[derive(Debug, PartialEq, Eq)]
pub enum RegistryError {
    /// Every slot is taken.
    Full,
    /// The key is 0 or 1 (not an address) or already registered.
    BadKey,
}

impl<T> Registry<T> {
    /// An empty table.
    pub const fn new() -> Self {
        Registry {
            keys: [const { AtomicUsize::new(0) }; SLOTS],
            vals: [const { AtomicPtr::new(std::ptr::null_mut()) }; SLOTS],
            brk: [const { AtomicBool::new(false) }; SLOTS],
            high: AtomicUsize::new(0),
        }
    }

    /// The slot of `key`, if it is registered.
    #[inline]
    pub fn slot(&self, key: usize) -> Option<usize> {
        if key <= BUSY {
            return None;
        }
        let high = self.high.load(Ordering::Acquire);
        (0..high.min(SLOTS)).find(|&i| self.keys[i].load(Ordering::Acquire) == key)
    }

    /// The value registered under `key`.
    #[inline]
    pub fn get(&self, key: usize) -> Option<*mut T> {
        self.slot(key)
            .map(|i| self.vals[i].load(Ordering::Acquire))
            .filter(|p| !p.is_null())
    }

    /// Whether `key` is registered.
    pub fn contains(&self, key: usize) -> bool {
        self.get(key).is_some()
    }

    /// Registers `val` under `key`.
    pub fn insert(&self, key: usize, val: *mut T) -> Result<usize, RegistryError> {
        if key <= BUSY || self.slot(key).is_some() {
            return Err(RegistryError::BadKey);
        }
        for i in 0..SLOTS {
            if self.keys[i]
                .compare_exchange(0, BUSY, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                self.vals[i].store(val, Ordering::Release);
                self.brk[i].store(false, Ordering::Release);
                self.high.fetch_max(i + 1, Ordering::AcqRel);
                self.keys[i].store(key, Ordering::Release);
                return Ok(i);
            }
        }
        Err(RegistryError::Full)
    }

    /// Takes `key` out of the table; returns its value.
    pub fn remove(&self, key: usize) -> Option<*mut T> {
        let i = self.slot(key)?;
        self.keys[i]
            .compare_exchange(key, BUSY, Ordering::AcqRel, Ordering::Relaxed)
            .ok()?;
        let v = self.vals[i].swap(std::ptr::null_mut(), Ordering::AcqRel);
        self.keys[i].store(0, Ordering::Release);
        (!v.is_null()).then_some(v)
    }

    /// Asks the loop reading `key` to stop (`pcap_breakloop`); false if `key` is not ours.
    pub fn set_break(&self, key: usize) -> bool {
        match self.slot(key) {
            Some(i) => {
                self.brk[i].store(true, Ordering::Release);
                true
            }
            None => false,
        }
    }

    /// Whether a break was asked for slot `i`; clears it (libpcap's loops clear the flag
    /// when they return because of it).
    #[inline]
    pub fn take_break(&self, i: usize) -> bool {
        i < SLOTS
            && self.brk[i].load(Ordering::Relaxed)
            && self.brk[i].swap(false, Ordering::AcqRel)
    }

    /// Handles registered now.
    pub fn len(&self) -> usize {
        self.keys
            .iter()
            .filter(|k| k.load(Ordering::Acquire) > BUSY)
            .count()
    }

    /// Whether no handle is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_pointers_are_not_ours() {
        let r: Registry<u32> = Registry::new();
        assert!(r.get(0).is_none());
        assert!(r.get(1).is_none());
        assert!(r.get(0x1000).is_none());
        assert!(!r.set_break(0x1000));
        assert!(r.remove(0x1000).is_none());
    }

    #[test]
    fn insert_get_remove() {
        let r: Registry<u32> = Registry::new();
        let mut a = 7u32;
        let mut b = 8u32;
        let pa: *mut u32 = &mut a;
        let pb: *mut u32 = &mut b;
        let sa = r.insert(0x1000, pa).unwrap();
        let sb = r.insert(0x2000, pb).unwrap();
        assert_ne!(sa, sb);
        assert_eq!(r.insert(0x1000, pb), Err(RegistryError::BadKey));
        assert_eq!(r.insert(0, pb), Err(RegistryError::BadKey));
        assert_eq!(r.get(0x1000), Some(pa));
        assert_eq!(r.get(0x2000), Some(pb));
        assert_eq!(r.len(), 2);
        assert_eq!(r.remove(0x1000), Some(pa));
        assert!(r.get(0x1000).is_none());
        assert_eq!(r.get(0x2000), Some(pb));
        // The freed slot is used again.
        assert_eq!(r.insert(0x3000, pa), Ok(sa));
        assert_eq!(r.len(), 2);
    }

    #[test]
    fn breakloop_is_per_handle_and_cleared_once_seen() {
        let r: Registry<u32> = Registry::new();
        let mut a = 0u32;
        let mut b = 0u32;
        let sa = r.insert(0x1000, &mut a).unwrap();
        let sb = r.insert(0x2000, &mut b).unwrap();
        assert!(r.set_break(0x2000));
        assert!(!r.take_break(sa));
        assert!(r.take_break(sb));
        assert!(!r.take_break(sb));
        // A new handle in a slot never inherits an old break.
        assert!(r.set_break(0x1000));
        r.remove(0x1000);
        let s = r.insert(0x4000, &mut a).unwrap();
        assert_eq!(s, sa);
        assert!(!r.take_break(s));
    }

    #[test]
    fn full_table_refuses() {
        let r: Registry<u32> = Registry::new();
        let mut v = 0u32;
        for i in 0..SLOTS {
            r.insert(0x1000 + i * 16, &mut v).unwrap();
        }
        assert_eq!(r.insert(0x9_0000, &mut v), Err(RegistryError::Full));
        assert_eq!(r.len(), SLOTS);
    }

    #[test]
    fn threads_insert_and_remove_without_losing_any() {
        let r: &'static Registry<u32> = Box::leak(Box::new(Registry::new()));
        let hs: Vec<_> = (0..4)
            .map(|t| {
                std::thread::spawn(move || {
                    let mut v = 0u32;
                    let p: *mut u32 = &mut v;
                    for i in 0..1000usize {
                        let key = 0x10_0000 * (t + 1) + i * 8;
                        r.insert(key, p).unwrap();
                        assert_eq!(r.get(key), Some(p));
                        assert_eq!(r.remove(key), Some(p));
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        assert!(r.is_empty());
    }
}

//! CPU affinity of the calling thread.

/// The cores the process may run on.
pub(crate) fn allowed_cores() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain data (all-zero is the empty set); sched_getaffinity writes at
    // most the size given.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    }
}

/// Pins the calling thread to `core`; false if the kernel refused (no such core, not allowed).
pub(crate) fn pin_current_thread(core: usize) -> bool {
    if core >= libc::CPU_SETSIZE as usize {
        return false;
    }
    // SAFETY: as above; `core` is below CPU_SETSIZE; sched_setaffinity(0) changes only the
    // calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(core, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
}

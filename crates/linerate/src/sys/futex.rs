//! futex(2) on a 32-bit word that may lie in memory shared between processes (a cluster's
//! segment): FUTEX_WAIT and FUTEX_WAKE without FUTEX_PRIVATE_FLAG, so that the kernel keys the
//! wait on the page's identity rather than on this process's address space.

use std::sync::atomic::AtomicU32;
use std::time::Duration;

/// Sleeps while `word` holds `expected`, at most `timeout`, until a [`wake`] on the same word
/// (from any process mapping it), a signal, or a spurious return. The kernel compares the word
/// and queues the caller atomically with respect to a wake: a wake after the word changed
/// cannot be missed. Returns false when the word did not hold `expected` (no wait at all).
pub(crate) fn wait(word: &AtomicU32, expected: u32, timeout: Duration) -> bool {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `word` is a live, aligned 32-bit atomic for the duration of the call (the
    // reference guarantees it); FUTEX_WAIT only reads it; `ts` is a valid relative timeout on
    // our stack; the unused arguments (uaddr2, val3) are ignored by FUTEX_WAIT.
    let r = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
            std::ptr::null::<u32>(),
            0u32,
        )
    };
    !(r == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EAGAIN))
}

/// Wakes up to `n` waiters sleeping in [`wait`] on `word`, in any process. Returns how many
/// were woken.
pub(crate) fn wake(word: &AtomicU32, n: u32) -> usize {
    // SAFETY: `word` is a live, aligned 32-bit atomic; FUTEX_WAKE neither reads nor writes it
    // (the address only names the wait queue); the other arguments are ignored.
    let r = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            n.min(i32::MAX as u32),
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0u32,
        )
    };
    r.max(0) as usize
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_changed_word_does_not_wait_and_a_wake_ends_a_wait() {
        let w = AtomicU32::new(0);
        assert!(!wait(&w, 1, Duration::from_secs(5)), "0 is not 1: no wait");
        let w = Arc::new(AtomicU32::new(1));
        let w2 = w.clone();
        let t0 = std::time::Instant::now();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            w2.store(0, std::sync::atomic::Ordering::SeqCst);
            wake(&w2, 1);
        });
        while w.load(std::sync::atomic::Ordering::SeqCst) == 1 {
            wait(&w, 1, Duration::from_secs(10));
        }
        t.join().unwrap();
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "woken, not timed out"
        );
    }
}

//! Signal masks and the wake-up signal: a worker blocked in a long system call (a `bpf(2)`
//! program run) is woken by SIGURG sent to its thread, which a no-op handler turns into EINTR.

/// The signal [`wake`] sends.
pub(crate) const WAKE: i32 = libc::SIGURG;

extern "C" fn on_wake(_: libc::c_int) {}

/// Installs the no-op handler of [`WAKE`] (once per process), without SA_RESTART so that the
/// interrupted call returns EINTR.
pub(crate) fn install_wake() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: a zeroed sigaction with a handler that does nothing (async-signal-safe) is
        // valid; sigemptyset initialises the mask it points to.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_wake as extern "C" fn(libc::c_int) as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(WAKE, &sa, std::ptr::null_mut());
        }
    });
}

/// Blocks every signal but [`WAKE`] on the calling thread, so that SIGINT and SIGTERM go to the
/// thread that handles them.
pub(crate) fn block_all_but_wake() {
    // SAFETY: plain signal-mask calls on a local, initialised set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut set);
        libc::sigdelset(&mut set, WAKE);
        libc::pthread_sigmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
    }
}

/// Unblocks `sigs` on the calling thread (a process may start with them blocked: the mask is
/// inherited across exec). One of them that came while blocked is delivered now, to the handler
/// installed for it.
pub(crate) fn unblock(sigs: &[i32]) {
    mask(libc::SIG_UNBLOCK, sigs)
}

/// Blocks `sigs` on the calling thread: one that comes stays pending until [`unblock`].
pub(crate) fn block(sigs: &[i32]) {
    mask(libc::SIG_BLOCK, sigs)
}

fn mask(how: libc::c_int, sigs: &[i32]) {
    // SAFETY: plain signal-mask calls on a local set that sigemptyset initialises.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for &s in sigs {
            libc::sigaddset(&mut set, s);
        }
        libc::pthread_sigmask(how, &set, std::ptr::null_mut());
    }
}

/// The calling thread's id, for [`wake`].
pub(crate) fn thread_id() -> u64 {
    // SAFETY: pthread_self has no preconditions.
    unsafe { libc::pthread_self() as u64 }
}

/// Sends [`WAKE`] to thread `tid` of this process.
///
/// The caller must know that the thread is still running (it has not returned): a pthread id is
/// only valid until then. Workers set a "done" flag before returning, and the caller checks it.
pub(crate) fn wake(tid: u64) {
    // SAFETY: `tid` came from `thread_id` in a thread of this process that, per the contract
    // above, has not finished; pthread_kill only queues a signal.
    unsafe { libc::pthread_kill(tid as libc::pthread_t, WAKE) };
}

/// Whether `sig` is ignored now (SIG_IGN), as `nohup` leaves SIGHUP for the programs it starts.
pub(crate) fn signal_ignored(sig: i32) -> bool {
    // SAFETY: a zeroed sigaction is a valid place for sigaction(2) to write the current one;
    // a null new action only reads.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(sig, std::ptr::null(), &mut old) == 0 && old.sa_sigaction == libc::SIG_IGN
    }
}

/// Stop signals received since [`count_signals`] was first called (each delivery, none merged).
static COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Counts each delivery of `sigs` from now on (once per process; later calls do nothing),
/// beside the handlers already registered (signal-hook chains them).
pub(crate) fn count_signals(sigs: &[i32]) -> std::io::Result<()> {
    static DONE: std::sync::Mutex<bool> = std::sync::Mutex::new(false);
    let mut done = DONE.lock().unwrap_or_else(|e| e.into_inner());
    if *done {
        return Ok(());
    }
    for &s in sigs {
        // SAFETY: the action only increments an atomic, which is async-signal-safe.
        unsafe {
            signal_hook::low_level::register(s, || {
                COUNT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            })?;
        }
    }
    *done = true;
    Ok(())
}

/// How many signals [`count_signals`] has counted.
pub(crate) fn signal_count() -> u64 {
    COUNT.load(std::sync::atomic::Ordering::SeqCst)
}

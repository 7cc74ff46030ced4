//! Network namespaces by name (`ip netns add NAME` makes `/run/netns/NAME`): the one place that
//! calls setns(2). Work is done in a namespace on a helper thread that enters it and ends
//! ([`run_in`]), so the caller's threads never change namespace, or the calling thread itself
//! moves ([`enter`]); sockets opened there stay in it for their whole life.

use std::io;
use std::os::fd::AsRawFd;

/// Where `ip netns` keeps its namespaces.
pub(crate) const NETNS_DIR: &str = "/run/netns";

/// Why a namespace name cannot be used.
fn bad_name(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        Some("empty")
    } else if name == "." || name == ".." || name.contains('/') || name.contains('\0') {
        Some("a namespace name has no '/' and is not '.' or '..'")
    } else if name.len() > 255 {
        Some("longer than 255 bytes")
    } else {
        None
    }
}

/// Opens the namespace file of `name` (read-only, never created), or of the calling
/// process's own namespace when `name` is None.
fn open(name: Option<&str>) -> io::Result<std::fs::File> {
    let path = match name {
        Some(n) => {
            if let Some(why) = bad_name(n) {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("namespace name '{n}': {why}"),
                ));
            }
            format!("{NETNS_DIR}/{n}")
        }
        None => "/proc/self/ns/net".to_string(),
    };
    use std::os::unix::fs::OpenOptionsExt;
    // /run/netns/NAME is a bind mount, never a link (a planted link is refused);
    // /proc/self/ns/net is the kernel's own link to the namespace and must be followed.
    let nofollow = if name.is_some() { libc::O_NOFOLLOW } else { 0 };
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_CLOEXEC | nofollow)
        .open(path)
}

/// The inode number of namespace `name` (None: this process's own): what the kernel calls
/// the namespace's `inum`, the same wherever it is looked at from.
pub(crate) fn inode(name: Option<&str>) -> io::Result<u64> {
    use std::os::unix::fs::MetadataExt;
    Ok(open(name)?.metadata()?.ino())
}

/// Moves the calling thread into the network namespace of `file` (a namespace file: an
/// `ip netns` name or a process's `/proc/PID/ns/net`). `name` is for the error message.
pub(crate) fn enter_file(file: &std::fs::File, name: &str) -> io::Result<()> {
    // SAFETY: setns(2) on a descriptor that `file` keeps open for the call; it changes only the
    // calling thread's network namespace and touches no memory of ours.
    let r = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
    if r != 0 {
        let e = io::Error::last_os_error();
        return Err(match e.raw_os_error() {
            Some(libc::EINVAL) => io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{name} is not a network namespace"),
            ),
            _ => e,
        });
    }
    Ok(())
}

/// Moves the calling thread into namespace `name` (`/run/netns/NAME`); a missing name is
/// `NotFound`, a name that leaves the directory `InvalidInput`.
pub(crate) fn enter(name: &str) -> io::Result<()> {
    let file = open(Some(name))?;
    enter_file(&file, &format!("{NETNS_DIR}/{name}"))
}

/// Runs `f` on a new thread that entered namespace `name` (`/run/netns/NAME`) and returns its
/// result; the namespace file is opened and checked on the caller's thread first (a missing
/// name is `NotFound`). A panic in `f` is passed on.
pub(crate) fn run_in<T: Send>(name: &str, f: impl FnOnce() -> T + Send) -> io::Result<T> {
    let file = open(Some(name))?;
    run_in_file(&file, &format!("{NETNS_DIR}/{name}"), f)
}

/// Runs `f` on a new thread that entered the namespace of `file` (see [`enter_file`]) and
/// returns its result. A panic in `f` is passed on.
pub(crate) fn run_in_file<T: Send>(
    file: &std::fs::File,
    name: &str,
    f: impl FnOnce() -> T + Send,
) -> io::Result<T> {
    std::thread::scope(|s| {
        let h = s.spawn(move || -> io::Result<T> {
            enter_file(file, name)?;
            Ok(f())
        });
        h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))
    })
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn names_that_leave_the_directory_are_refused() {
        for n in ["", ".", "..", "../etc", "a/b"] {
            let e = run_in(n, || ()).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{n}: {e}");
        }
        let e = run_in("lr-surely-no-such-namespace", || ()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        for n in ["", "..", "a/b", "lr-surely-no-such-namespace"] {
            assert!(enter(n).is_err(), "{n}");
        }
        assert!(inode(None).unwrap() > 0);
    }
}

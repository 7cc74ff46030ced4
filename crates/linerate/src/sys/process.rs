//! Processes: who we run as, signals to another process.

use std::io;

/// The effective user id of this process.
pub(crate) fn euid() -> u32 {
    // SAFETY: geteuid takes no arguments and cannot fail.
    unsafe { libc::geteuid() }
}

/// Sends `sig` to process `pid` (> 0: a single process, never a group or "every process").
pub(crate) fn signal(pid: u32, sig: i32) -> io::Result<()> {
    let pid = i32::try_from(pid)
        .ok()
        .filter(|&p| p > 0)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "not a single process id"))?;
    // SAFETY: kill(2) with a positive pid addresses that one process; no memory is passed.
    if unsafe { libc::kill(pid, sig) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The user id and primary group id of user `name` (from the password database: files, NSS),
/// or None when there is no such user.
pub(crate) fn user_ids(name: &str) -> io::Result<Option<(u32, u32)>> {
    let cname = std::ffi::CString::new(name)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte in the user name"))?;
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        // SAFETY: passwd is plain data; all-zero is a valid value to be filled in.
        let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
        let mut out: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: `cname` is a NUL-terminated string; `pw`, `buf` (for its length) and `out`
        // are writable and live across the call; the strings it points `pw` at live in `buf`,
        // which we do not read through `pw`.
        let r = unsafe {
            libc::getpwnam_r(
                cname.as_ptr(),
                &mut pw,
                buf.as_mut_ptr() as *mut libc::c_char,
                buf.len(),
                &mut out,
            )
        };
        if r == libc::ERANGE && buf.len() < 1 << 20 {
            buf.resize(buf.len() * 4, 0);
            continue;
        }
        if r != 0 {
            return Err(io::Error::from_raw_os_error(r));
        }
        return Ok((!out.is_null()).then_some((pw.pw_uid, pw.pw_gid)));
    }
}

/// The groups of user `name` whose primary group is `gid` (that one first, then the
/// supplementary ones from the group database): the groups it has once it became that user.
pub(crate) fn user_groups(name: &str, gid: u32) -> io::Result<Vec<u32>> {
    let cname = std::ffi::CString::new(name)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte in the user name"))?;
    let mut groups: Vec<libc::gid_t> = vec![0; 64];
    loop {
        let mut n = groups.len() as libc::c_int;
        // SAFETY: `cname` is NUL-terminated; `groups` holds `n` writable ids and `n` is
        // writable; both live across the call, which writes at most `n` ids and sets `n` to
        // the count (the count needed when it returns -1).
        let r = unsafe { libc::getgrouplist(cname.as_ptr(), gid, groups.as_mut_ptr(), &mut n) };
        if r >= 0 {
            groups.truncate(n.max(0) as usize);
            return Ok(groups);
        }
        if groups.len() >= 1 << 16 {
            return Err(io::Error::other("too many groups"));
        }
        let want = (n.max(0) as usize).max(groups.len() * 2);
        groups.resize(want, 0);
    }
}

/// Becomes user `name` (`uid`, primary group `gid`) for good, in tcpdump's order: the group,
/// the supplementary groups of the user (initgroups), then the user. Every thread of the
/// process changes (glibc applies set*id to all threads).
pub(crate) fn become_user(name: &str, uid: u32, gid: u32) -> io::Result<()> {
    let cname = std::ffi::CString::new(name)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte in the user name"))?;
    // SAFETY: setgid takes a plain id.
    if unsafe { libc::setgid(gid) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `cname` is NUL-terminated and lives across the call.
    if unsafe { libc::initgroups(cname.as_ptr(), gid) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: setuid takes a plain id.
    if unsafe { libc::setuid(uid) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn signal_refuses_process_groups_and_checks_existence() {
        assert!(signal(0, 0).is_err());
        assert!(signal(u32::MAX, 0).is_err()); // -1 would be "every process"
        signal(std::process::id(), 0).unwrap(); // signal 0: only checks we may signal ourselves
    }

    #[test]
    fn users_are_looked_up() {
        assert_eq!(user_ids("root").unwrap(), Some((0, 0)));
        assert_eq!(user_ids("lr-no-such-user-x").unwrap(), None);
        assert!(user_ids("a\0b").is_err());
    }
}

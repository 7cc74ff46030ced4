//! Files: what kind of file system holds one.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// Whether `file` lives on a file system whose files can change size behind the kernel's back
/// or at the hands of a process this machine does not vouch for: FUSE (a user's server
/// answers), NFS, SMB/CIFS, 9p, Ceph, AFS. A file mapped from one of them could be shortened
/// while mapped without any local permission check.
pub(crate) fn is_remote_or_user_fs(file: &File) -> io::Result<bool> {
    // SAFETY: an all-zero statfs is a valid value of this plain C struct.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: fstatfs writes one statfs through a valid pointer; the descriptor is the file's.
    if unsafe { libc::fstatfs(file.as_raw_fd(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    const FUSE: i64 = 0x6573_5546;
    const NFS: i64 = 0x6969;
    const SMB: i64 = 0x517b;
    const SMB2: i64 = 0xfe53_4d42;
    const CIFS: i64 = 0xff53_4d42;
    const V9FS: i64 = 0x0102_1997;
    const CEPH: i64 = 0x00c3_6400;
    const AFS: i64 = 0x5346_414f;
    #[allow(clippy::unnecessary_cast)] // f_type's width differs between architectures
    let t = st.f_type as i64;
    Ok(matches!(
        t,
        FUSE | NFS | SMB | SMB2 | CIFS | V9FS | CEPH | AFS
    ))
}

#[cfg(all(test, not(loom)))]
mod tests {
    #[test]
    fn a_temp_file_is_local() {
        let p = std::env::temp_dir().join(format!("lr-fs-{}", std::process::id()));
        let f = std::fs::File::create(&p).unwrap();
        assert!(!super::is_remote_or_user_fs(&f).unwrap());
        let _ = std::fs::remove_file(&p);
    }
}

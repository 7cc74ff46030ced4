//! Files: what kind of file system holds one.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// Whether `file` lives on a file system whose files can change size behind the kernel's back
/// or at the hands of a process this machine does not vouch for: FUSE (a user's server
/// answers), NFS, SMB/CIFS, 9p, Ceph, AFS (OpenAFS's and the kernel's own client), Coda, and
/// the cluster file systems other machines write to (OCFS2, GFS2, Lustre, GPFS, BeeGFS,
/// OrangeFS). A file mapped from one of them could be shortened while mapped without any local
/// permission check.
pub(crate) fn is_remote_or_user_fs(file: &File) -> io::Result<bool> {
    // SAFETY: an all-zero statfs is a valid value of this plain C struct.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: fstatfs writes one statfs through a valid pointer; the descriptor is the file's.
    if unsafe { libc::fstatfs(file.as_raw_fd(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // f_type is a signed word whose width differs between architectures, and the magic numbers
    // are 32-bit: take the low 32 bits (a 32-bit word holding 0xff534d42 is negative, and
    // widening it to i64 would sign-extend it into a value no constant matches).
    #[allow(clippy::unnecessary_cast)]
    Ok(is_remote_or_user_magic(st.f_type as u32))
}

/// Whether a file system's magic number (statfs's `f_type`) is one of those
/// [`is_remote_or_user_fs`] names.
fn is_remote_or_user_magic(f_type: u32) -> bool {
    const FUSE: u32 = 0x6573_5546; // also fuseblk and virtiofs
    const NFS: u32 = 0x6969; // NFS 2, 3 and 4
    const SMB: u32 = 0x517b;
    const SMB2: u32 = 0xfe53_4d42;
    const CIFS: u32 = 0xff53_4d42;
    const V9FS: u32 = 0x0102_1997;
    const CEPH: u32 = 0x00c3_6400;
    const OPENAFS: u32 = 0x5346_414f; // AFS_SUPER_MAGIC
    const KAFS: u32 = 0x6b41_4653; // AFS_FS_MAGIC: the kernel's AFS client (fs/afs)
    const CODA: u32 = 0x7375_7245;
    const OCFS2: u32 = 0x7461_636f;
    const GFS2: u32 = 0x0116_1970;
    const LUSTRE: u32 = 0x0bd0_0bd0;
    const GPFS: u32 = 0x4750_4653;
    const BEEGFS: u32 = 0x1983_0326;
    const ORANGEFS: u32 = 0x2003_0528;
    matches!(
        f_type,
        FUSE | NFS
            | SMB
            | SMB2
            | CIFS
            | V9FS
            | CEPH
            | OPENAFS
            | KAFS
            | CODA
            | OCFS2
            | GFS2
            | LUSTRE
            | GPFS
            | BEEGFS
            | ORANGEFS
    )
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::is_remote_or_user_magic as remote;

    #[test]
    fn a_temp_file_is_local() {
        let p = std::env::temp_dir().join(format!("lr-fs-{}", std::process::id()));
        let f = std::fs::File::create(&p).unwrap();
        assert!(!super::is_remote_or_user_fs(&f).unwrap());
        let _ = std::fs::remove_file(&p);
    }

    #[test]
    fn network_user_and_cluster_file_systems_are_refused() {
        // FUSE, NFS, SMB, SMB2, CIFS, 9p, Ceph, OpenAFS, the kernel's AFS client (kAFS), Coda,
        // OCFS2, GFS2, Lustre, GPFS, BeeGFS, OrangeFS: linux/magic.h and each file system's
        // own sources.
        for m in [
            0x6573_5546u32,
            0x6969,
            0x517b,
            0xfe53_4d42,
            0xff53_4d42,
            0x0102_1997,
            0x00c3_6400,
            0x5346_414f,
            0x6b41_4653,
            0x7375_7245,
            0x7461_636f,
            0x0116_1970,
            0x0bd0_0bd0,
            0x4750_4653,
            0x1983_0326,
            0x2003_0528,
        ] {
            assert!(remote(m), "0x{m:08x} is not refused");
        }
    }

    #[test]
    fn local_file_systems_are_accepted() {
        // ext2/3/4, tmpfs, XFS, Btrfs, F2FS, overlayfs, ZFS.
        for m in [
            0xef53u32,
            0x0102_1994,
            0x5846_5342,
            0x9123_683e,
            0xf2f5_2010,
            0x794c_7630,
            0x2fc1_2fc1,
        ] {
            assert!(!remote(m), "0x{m:08x} is refused");
        }
    }

    #[test]
    fn a_magic_in_a_negative_32_bit_word_is_recognised() {
        // On a 32-bit target f_type is an i32: CIFS's magic there is negative, and the word
        // must be read as its 32 bits, not sign-extended.
        let word: i32 = 0xff53_4d42u32 as i32;
        assert!(word < 0);
        assert!(remote(word as u32));
        let wide: i64 = 0xff53_4d42;
        assert!(remote(wide as u32));
    }
}

/// Bytes free for unprivileged users and the size of the file system holding `path`
/// (statvfs's `f_bavail` and `f_blocks`, in `f_frsize` units).
pub(crate) fn space(path: &std::path::Path) -> io::Result<(u64, u64)> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte in the path"))?;
    // SAFETY: an all-zero statvfs is a valid value of this plain C struct.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: statvfs reads a NUL-terminated path and writes one statvfs through a valid pointer.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let unit = st.f_frsize as u64;
    Ok((
        (st.f_bavail as u64).saturating_mul(unit),
        (st.f_blocks as u64).saturating_mul(unit),
    ))
}

/// The file system type (statfs's `f_type`, its low 32 bits) and block size (`f_bsize`: a
/// hugetlbfs's page size) of the file system holding `path`.
pub(crate) fn fs_type(path: &std::path::Path) -> io::Result<(u32, u64)> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte in the path"))?;
    // SAFETY: an all-zero statfs is a valid value of this plain C struct.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: statfs reads a NUL-terminated path and writes one statfs through a valid pointer.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // As in is_remote_or_user_fs: the low 32 bits of a word whose width varies.
    #[allow(clippy::unnecessary_cast)]
    Ok((st.f_type as u32, st.f_bsize as u64))
}

/// As [`fs_type`], of an open file.
pub(crate) fn file_fs_type(file: &File) -> io::Result<(u32, u64)> {
    // SAFETY: an all-zero statfs is a valid value of this plain C struct.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: fstatfs writes one statfs through a valid pointer; the descriptor is the file's.
    if unsafe { libc::fstatfs(file.as_raw_fd(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    #[allow(clippy::unnecessary_cast)]
    Ok((st.f_type as u32, st.f_bsize as u64))
}

/// statfs's `f_type` of a hugetlbfs.
pub(crate) const HUGETLBFS_MAGIC: u32 = 0x9584_58f6;

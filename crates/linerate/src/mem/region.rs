//! A region: one contiguous, page-aligned span of packet memory and what keeps it mapped.

use super::MemError;
use std::path::Path;

/// One contiguous span of packet memory: anonymous (heap), a shared-memory file, or a mapping
/// owned by a kernel object (a TPACKET ring, an AF_XDP UMEM).
pub struct Region {
    ptr: *mut u8,
    len: usize,
    backing: Backing,
}

enum Backing {
    Anon,
    File(#[allow(dead_code)] memmap2::MmapMut),
    /// Unmapped with munmap on drop (mappings made by a kernel port).
    Raw,
    /// A file mapped read-only ([`Region::map_read_only`]).
    ReadOnly(#[allow(dead_code)] memmap2::Mmap),
    /// Another pool's memory, kept mapped by that pool ([`Region::view_of`]; held as any
    /// owner, so this file needs not know pools, which are built on regions).
    View(#[allow(dead_code)] std::sync::Arc<dyn std::any::Any + Send + Sync>),
}

// SAFETY: a Region is plain memory; who may write which bytes is decided by frame ownership
// (descriptors), which moves between threads with the descriptors.
unsafe impl Send for Region {}
// SAFETY: as above; shared access hands out bytes only through the ownership rules of Batch.
unsafe impl Sync for Region {}

/// Size of a transparent huge page on x86-64 and most arm64 systems.
const HUGE_PAGE: usize = 2 << 20;

impl Region {
    /// Anonymous private memory of `len` bytes (rounded up to pages), zeroed.
    pub fn anon(len: usize) -> Result<Region, MemError> {
        let len = round_page(len.max(1));
        // SAFETY: an anonymous private mapping with no address hint; the result is checked.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(MemError::Alloc {
                bytes: len,
                source: std::io::Error::last_os_error(),
            });
        }
        if len >= HUGE_PAGE {
            // Frames are touched all over the region: transparent huge pages (where the system
            // allows them on request) save a TLB miss per packet. A hint; failure is harmless.
            // SAFETY: the range is the mapping just made.
            unsafe { libc::madvise(ptr, len, libc::MADV_HUGEPAGE) };
        }
        Ok(Region {
            ptr: ptr as *mut u8,
            len,
            backing: Backing::Anon,
        })
    }

    /// A new shared-memory file of `len` bytes in the directory `dir`, owner-only (0600), for a
    /// cluster segment: created without a name (`O_TMPFILE`) or, where the filesystem cannot,
    /// under an unpredictable name with `O_CREAT|O_EXCL|O_NOFOLLOW`, so that nothing already in
    /// the directory (a planted link or file) is opened, followed or reused. Checked after
    /// opening (fstat): a regular file owned by this user with one link at most, mode 0600.
    /// It gets its name with [`ShmFile::publish`]. `page` is the page size of the directory's
    /// file system (4096, or a hugetlbfs's huge page: the length is rounded up to it, and the
    /// file must then be on a hugetlbfs with that page size, checked with fstatfs). On a
    /// hugetlbfs the mapping reserves its pages: when too few are free it fails (`ENOMEM`)
    /// rather than faulting later.
    pub fn create_shared(
        dir: &Path,
        len: usize,
        page: usize,
    ) -> Result<(Region, ShmFile), MemError> {
        use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
        let err = |path: &Path, source| MemError::Shm {
            path: path.display().to_string(),
            source,
        };
        let page = page.max(4096);
        let len = len.max(1).div_ceil(page) * page;
        let unnamed = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .mode(0o600)
            .custom_flags(libc::O_TMPFILE | libc::O_NOFOLLOW)
            .open(dir);
        let (file, tmp) = match unnamed {
            Ok(f) => (f, None),
            // Filesystems (or kernels) without O_TMPFILE: an unpredictable name, never reused.
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EOPNOTSUPP | libc::EISDIR | libc::EINVAL)
                ) =>
            {
                let mut last = e;
                let mut made = None;
                for _ in 0..16 {
                    let name = dir.join(format!(
                        ".linerate-shm-{}-{:016x}",
                        std::process::id(),
                        unpredictable()
                    ));
                    match std::fs::OpenOptions::new()
                        .read(true)
                        .write(true)
                        .create_new(true)
                        .mode(0o600)
                        .custom_flags(libc::O_NOFOLLOW)
                        .open(&name)
                    {
                        Ok(f) => {
                            made = Some((f, Some(name)));
                            break;
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = e,
                        Err(e) => return Err(err(&name, e)),
                    }
                }
                made.ok_or_else(|| err(dir, last))?
            }
            Err(e) => return Err(err(dir, e)),
        };
        let shm = ShmFile { file, tmp };
        let here = shm.tmp.as_deref().unwrap_or(dir).to_path_buf();
        // Owner-only whatever the umask made of the mode.
        shm.file
            .set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(|e| err(&here, e))?;
        let meta = shm.file.metadata().map_err(|e| err(&here, e))?;
        let me = crate::sys::process::euid();
        if !meta.file_type().is_file()
            || meta.uid() != me
            || meta.mode() & 0o7777 != 0o600
            || meta.nlink() > 1
        {
            return Err(err(
                &here,
                std::io::Error::other(format!(
                    "the new file is not ours alone (owner uid {}, mode {:o}, {} links)",
                    meta.uid(),
                    meta.mode() & 0o7777,
                    meta.nlink()
                )),
            ));
        }
        if page > 4096 {
            let (fs, bsize) = crate::sys::fs::file_fs_type(&shm.file).map_err(|e| err(&here, e))?;
            if fs != crate::sys::fs::HUGETLBFS_MAGIC || bsize != page as u64 {
                return Err(err(
                    &here,
                    std::io::Error::other(format!(
                        "not on a hugetlbfs of {} KiB pages (file system 0x{fs:08x}, block \
                         size {bsize})",
                        page >> 10
                    )),
                ));
            }
        }
        shm.file.set_len(len as u64).map_err(|e| err(&here, e))?;
        let region = Self::map_file(&shm.file, len).map_err(|e| err(&here, e))?;
        Ok((region, shm))
    }

    /// Maps an existing shared-memory file (a consumer attaching to a cluster, or a master
    /// looking at a segment left under its name). A link is not followed (`O_NOFOLLOW`: the
    /// error is `ELOOP`), nothing blocks on a FIFO (`O_NONBLOCK`), and anything but a regular
    /// file is refused. Returns the file's metadata (fstat of what was opened) so that the
    /// caller can check who owns it before trusting a byte of it.
    pub fn open_shared(path: &Path) -> Result<(Region, std::fs::Metadata), MemError> {
        use std::os::unix::fs::OpenOptionsExt;
        let err = |source| MemError::Shm {
            path: path.display().to_string(),
            source,
        };
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(path)
            .map_err(err)?;
        let meta = file.metadata().map_err(err)?;
        if !meta.file_type().is_file() {
            return Err(err(std::io::Error::other("not a regular file")));
        }
        let len = meta.len() as usize;
        let region = Self::map_file(&file, len).map_err(err)?;
        Ok((region, meta))
    }

    fn map_file(file: &std::fs::File, len: usize) -> std::io::Result<Region> {
        // SAFETY: the file is ours (a cluster segment); concurrent writers follow the frame
        // ownership protocol, never reallocating or truncating it while mapped.
        let mut map = unsafe { memmap2::MmapOptions::new().len(len).map_mut(file)? };
        let ptr = map.as_mut_ptr();
        Ok(Region {
            ptr,
            len,
            backing: Backing::File(map),
        })
    }

    /// The memory of `owner`'s region, which stays mapped while this view lives: a second pool
    /// over some of another pool's frames (a `mem:` wire that allocates from a cluster
    /// segment's frames, [`crate::cluster::Master::input_wire`]). Who may write which frame is
    /// decided, as always, by who holds its descriptor.
    /// `region` is `owner`'s own region (the owner keeps it mapped).
    pub(crate) fn view_of(
        region: &Region,
        owner: std::sync::Arc<dyn std::any::Any + Send + Sync>,
    ) -> Region {
        let (ptr, len) = (region.ptr, region.len);
        Region {
            ptr,
            len,
            backing: Backing::View(owner),
        }
    }

    /// Adopts a mapping made by a kernel port; it is unmapped when the region drops.
    ///
    /// # Safety
    /// `ptr` must be the start of a mapping of exactly `len` bytes made with `mmap`, not unmapped
    /// elsewhere.
    pub unsafe fn from_raw_mapping(ptr: *mut u8, len: usize) -> Region {
        Region {
            ptr,
            len,
            backing: Backing::Raw,
        }
    }

    /// `file` mapped read-only, whole, with its pages read ahead in order: an input read in
    /// place. The caller vouches that nobody else can shorten the file while it is mapped
    /// (reading a page past a truncated end raises SIGBUS): see
    /// [`PcapPort::read_in_place`](crate::port::pcap::PcapPort::read_in_place).
    pub fn map_read_only(file: &std::fs::File) -> Result<Region, MemError> {
        let alloc = |source| MemError::Alloc {
            bytes: file
                .metadata()
                .map_or(0, |m| usize::try_from(m.len()).unwrap_or(usize::MAX)),
            source,
        };
        // SAFETY: a private read-only mapping; the file's contents are never written through it,
        // and the caller vouches that it cannot be shortened while mapped (above).
        let map = unsafe { memmap2::MmapOptions::new().map(file) }.map_err(alloc)?;
        let _ = map.advise(memmap2::Advice::Sequential);
        let (ptr, len) = (map.as_ptr() as *mut u8, map.len());
        Ok(Region {
            ptr,
            len,
            backing: Backing::ReadOnly(map),
        })
    }

    /// The whole of a read-only mapping ([`Region::map_read_only`]); empty for any other region
    /// (whose frames their owners may be writing).
    #[inline(always)]
    pub(crate) fn read_only_bytes(&self) -> &[u8] {
        match self.backing {
            // SAFETY: the whole live mapping, which nothing writes (mapped read-only).
            Backing::ReadOnly(_) => unsafe { std::slice::from_raw_parts(self.ptr, self.len) },
            _ => &[],
        }
    }

    /// Asks the kernel to back the whole region with transparent huge pages where the system
    /// allows it (a shared-memory file: tmpfs mounted `huge=advise`, or shmem_enabled `advise`
    /// for shared anonymous memory). A hint; failure is harmless.
    pub(crate) fn advise_huge(&self) {
        if self.len < HUGE_PAGE {
            return;
        }
        // SAFETY: the range is this live mapping; MADV_HUGEPAGE changes no contents.
        unsafe { libc::madvise(self.ptr as *mut libc::c_void, self.len, libc::MADV_HUGEPAGE) };
    }

    /// Asks the kernel not to back `[off, off + len)` (page-aligned inward) with transparent
    /// huge pages: memory that is written sparsely stays resident only where written. A hint;
    /// failure is harmless.
    pub(crate) fn advise_no_huge(&self, off: usize, len: usize) {
        let start = off.div_ceil(4096) * 4096;
        let end = (off.saturating_add(len)).min(self.len) / 4096 * 4096;
        if end <= start {
            return;
        }
        // SAFETY: the range lies inside this live mapping (clamped to `self.len`, page-aligned);
        // madvise with MADV_NOHUGEPAGE changes no contents.
        unsafe {
            libc::madvise(
                self.ptr.add(start) as *mut libc::c_void,
                end - start,
                libc::MADV_NOHUGEPAGE,
            )
        };
    }

    /// Start of the region.
    #[inline(always)]
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Size in bytes.
    #[inline(always)]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region is empty (never, for a mapped one).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes `[off, off + len)`, or None when out of bounds. Crate code only, for frames it
    /// owns (through a batch's descriptor): a frame may be written by whoever owns it, so reading
    /// any offset from outside would race with that writer.
    #[inline(always)]
    pub(crate) fn bytes(&self, off: u64, len: u32) -> Option<&[u8]> {
        let end = off.checked_add(len as u64)?;
        if end > self.len as u64 {
            return None;
        }
        // SAFETY: in bounds (checked above) of a live mapping.
        Some(unsafe { std::slice::from_raw_parts(self.ptr.add(off as usize), len as usize) })
    }

    /// The region's bounds, copied, for lookups of many frames in a loop ([`Bounds::bytes`]):
    /// its start and size stay in registers where [`Region::bytes`] loads them from the
    /// region at each frame (the loop's stores may change them, for all the compiler knows).
    #[inline(always)]
    pub(crate) fn bounds(&self) -> Bounds<'_> {
        Bounds {
            ptr: self.ptr,
            len: self.len,
            _region: std::marker::PhantomData,
        }
    }

    /// The bytes `[off, off + len)` for writing, or None when out of bounds.
    ///
    /// # Safety
    /// The caller must own the frame holding these bytes (no other reference to them exists).
    #[inline(always)]
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn bytes_mut(&self, off: u64, len: u32) -> Option<&mut [u8]> {
        let end = off.checked_add(len as u64)?;
        if end > self.len as u64 {
            return None;
        }
        // SAFETY: in bounds; exclusivity is the caller's contract.
        Some(unsafe { std::slice::from_raw_parts_mut(self.ptr.add(off as usize), len as usize) })
    }
}

/// A region's start and size ([`Region::bounds`]), valid while it is borrowed.
#[derive(Clone, Copy)]
pub(crate) struct Bounds<'a> {
    ptr: *mut u8,
    len: usize,
    _region: std::marker::PhantomData<&'a Region>,
}

impl<'a> Bounds<'a> {
    /// As [`Region::bytes`]: the bytes `[off, off + len)`, or None when out of bounds.
    #[inline(always)]
    pub(crate) fn bytes(self, off: u64, len: u32) -> Option<&'a [u8]> {
        let size = self.len as u64;
        if off > size || u64::from(len) > size - off {
            return None;
        }
        // SAFETY: in bounds (checked above) of a mapping that lives as long as the borrow of
        // its region ('a); the same contract as `Region::bytes` (frames the caller owns).
        Some(unsafe { std::slice::from_raw_parts(self.ptr.add(off as usize), len as usize) })
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        match self.backing {
            Backing::Anon | Backing::Raw => {
                // SAFETY: ptr/len describe a mapping this region owns, no longer referenced.
                unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len) };
            }
            Backing::File(_) | Backing::ReadOnly(_) | Backing::View(_) => {}
        }
    }
}

impl std::fmt::Debug for Region {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Region({} bytes at {:p})", self.len, self.ptr)
    }
}

/// A shared-memory file made by [`Region::create_shared`]: nameless (or under a temporary
/// name) until [`ShmFile::publish`] gives it its name.
pub struct ShmFile {
    file: std::fs::File,
    /// The temporary name, where the directory could not make a nameless file.
    tmp: Option<std::path::PathBuf>,
}

impl ShmFile {
    /// Gives the file the name `path`, atomically: it fails with `AlreadyExists` when anything
    /// (a file, a link) is there, and never follows or replaces it.
    pub fn publish(&mut self, path: &Path) -> std::io::Result<()> {
        match self.tmp.take() {
            Some(tmp) => {
                let r = std::fs::hard_link(&tmp, path);
                let _ = std::fs::remove_file(&tmp);
                r
            }
            None => {
                use std::os::unix::ffi::OsStrExt;
                use std::os::unix::io::AsRawFd;
                let from =
                    std::ffi::CString::new(format!("/proc/self/fd/{}", self.file.as_raw_fd()))
                        .map_err(std::io::Error::other)?;
                let to = std::ffi::CString::new(path.as_os_str().as_bytes())
                    .map_err(std::io::Error::other)?;
                // SAFETY: both paths are NUL-terminated strings that outlive the call;
                // AT_SYMLINK_FOLLOW resolves the /proc magic link to our open file (the one way
                // to name an O_TMPFILE file without CAP_DAC_READ_SEARCH); the new name is
                // created, never followed.
                let r = unsafe {
                    libc::linkat(
                        libc::AT_FDCWD,
                        from.as_ptr(),
                        libc::AT_FDCWD,
                        to.as_ptr(),
                        libc::AT_SYMLINK_FOLLOW,
                    )
                };
                if r == 0 {
                    return Ok(());
                }
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::AlreadyExists {
                    return Err(e);
                }
                // No /proc: AT_EMPTY_PATH names the descriptor itself (needs privilege).
                let empty = c"";
                // SAFETY: as above; the empty path with AT_EMPTY_PATH names the open file.
                let r = unsafe {
                    libc::linkat(
                        self.file.as_raw_fd(),
                        empty.as_ptr(),
                        libc::AT_FDCWD,
                        to.as_ptr(),
                        libc::AT_EMPTY_PATH,
                    )
                };
                if r == 0 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            }
        }
    }

    /// (device, inode) of the file: what its name must still point to before it is removed.
    pub fn identity(&self) -> std::io::Result<(u64, u64)> {
        use std::os::unix::fs::MetadataExt;
        let m = self.file.metadata()?;
        Ok((m.dev(), m.ino()))
    }
}

impl Drop for ShmFile {
    fn drop(&mut self) {
        if let Some(tmp) = self.tmp.take() {
            let _ = std::fs::remove_file(tmp);
        }
    }
}

/// 64 bits no other local user can predict (the standard library's per-process random hash
/// keys, from the operating system's random source).
fn unpredictable() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(crate::time::wall_ns() as u128);
    h.finish()
}

fn round_page(n: usize) -> usize {
    n.div_ceil(4096) * 4096
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    #[test]
    fn a_shared_file_is_ours_and_its_name_never_replaces_what_is_there() {
        let dir = std::env::temp_dir().join(format!("lr-region-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let target = dir.join("target");
        std::fs::write(&target, b"keep").unwrap();
        let name = dir.join("seg");
        std::os::unix::fs::symlink(&target, &name).unwrap();
        let (region, mut shm) = Region::create_shared(&dir, 10_000, 4096).unwrap();
        assert_eq!(region.len(), 12_288);
        // A link at the name: publishing fails, the link and its target stay as they were.
        let e = shm.publish(&name).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::AlreadyExists);
        assert_eq!(std::fs::read(&target).unwrap(), b"keep");
        std::fs::remove_file(&name).unwrap();
        shm.publish(&name).unwrap();
        let m = std::fs::symlink_metadata(&name).unwrap();
        assert!(m.file_type().is_file());
        assert_eq!(m.permissions().mode() & 0o7777, 0o600);
        assert_eq!((m.dev(), m.ino()), shm.identity().unwrap());
        assert_eq!(m.len(), 12_288);
        // Opening never follows a link, and refuses what is not a regular file.
        std::fs::remove_file(&name).unwrap();
        std::os::unix::fs::symlink(&target, &name).unwrap();
        let e = Region::open_shared(&name).unwrap_err().to_string();
        assert!(
            e.contains("symbolic links") || e.contains("os error 40"),
            "{e}"
        );
        assert!(Region::open_shared(&dir).is_err());
        // Nothing but the names we made is in the directory.
        let mut names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        assert_eq!(names, ["seg", "target"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

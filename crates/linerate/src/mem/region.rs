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

    /// A shared-memory file at `path` (created owner-only, 0600, truncated to `len`), mapped
    /// shared: what processes of a cluster map.
    pub fn create_shared(path: &Path, len: usize) -> Result<Region, MemError> {
        use std::os::unix::fs::OpenOptionsExt;
        let err = |source| MemError::Shm {
            path: path.display().to_string(),
            source,
        };
        let len = round_page(len.max(1));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(path)
            .map_err(err)?;
        file.set_len(len as u64).map_err(err)?;
        Self::map_file(&file, len).map_err(err)
    }

    /// Maps an existing shared-memory file (a consumer attaching to a cluster).
    pub fn open_shared(path: &Path) -> Result<Region, MemError> {
        let err = |source| MemError::Shm {
            path: path.display().to_string(),
            source,
        };
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(err)?;
        let len = file.metadata().map_err(err)?.len() as usize;
        Self::map_file(&file, len).map_err(err)
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

    /// The bytes `[off, off + len)`, or None when out of bounds.
    #[inline(always)]
    pub fn bytes(&self, off: u64, len: u32) -> Option<&[u8]> {
        let end = off.checked_add(len as u64)?;
        if end > self.len as u64 {
            return None;
        }
        // SAFETY: in bounds (checked above) of a live mapping.
        Some(unsafe { std::slice::from_raw_parts(self.ptr.add(off as usize), len as usize) })
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

impl Drop for Region {
    fn drop(&mut self) {
        match self.backing {
            Backing::Anon | Backing::Raw => {
                // SAFETY: ptr/len describe a mapping this region owns, no longer referenced.
                unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len) };
            }
            Backing::File(_) => {}
        }
    }
}

impl std::fmt::Debug for Region {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Region({} bytes at {:p})", self.len, self.ptr)
    }
}

fn round_page(n: usize) -> usize {
    n.div_ceil(4096) * 4096
}

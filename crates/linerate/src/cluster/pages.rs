//! Where a process cluster's segment lives, and on which pages: on huge pages in a mounted
//! hugetlbfs when one has enough free (DPDK's habit: `--huge-dir DIR`, `--no-huge`), else in
//! the shared-memory directory on 4 KiB pages (with transparent huge pages asked where the
//! tmpfs allows them). Which one the segment got is always said, with the reason and the fix.

use crate::mem::{MemError, Region, ShmFile};
use crate::sys::fs::{fs_type, HUGETLBFS_MAGIC};
use std::path::{Path, PathBuf};

/// Where a master puts its segment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum HugePages {
    /// A mounted hugetlbfs (the first in /proc/self/mounts) with enough free huge pages, else
    /// the shared-memory directory.
    #[default]
    Auto,
    /// This hugetlbfs (DPDK's `--huge-dir DIR`), else the shared-memory directory.
    Dir(PathBuf),
    /// The shared-memory directory on 4 KiB pages (DPDK's `--no-huge`).
    Off,
}

/// The user a master becomes once its segment is made (tcpdump's `-Z USER`), who must remove
/// the segment at exit: it is given the file (so a sticky directory lets it), and the segment
/// goes only into a directory that user may write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentOwner {
    /// The user's name (as `-Z` gave it).
    pub name: String,
    /// Its user id.
    pub uid: u32,
    /// Its groups, the primary one first.
    pub groups: Vec<u32>,
}

impl SegmentOwner {
    /// Why this user could not remove its segment file from `dir` at exit (None: it could):
    /// removing a name needs write and search permission on the directory (a sticky one also
    /// wants the file to be the user's, which it is given).
    pub fn cannot_remove(&self, dir: &Path) -> Option<String> {
        use std::os::unix::fs::MetadataExt;
        if self.uid == 0 {
            return None;
        }
        let m = match std::fs::metadata(dir) {
            Ok(m) => m,
            Err(e) => return Some(format!("{}: {e}", dir.display())),
        };
        let mode = m.mode();
        let bits = if m.uid() == self.uid {
            mode >> 6
        } else if self.groups.contains(&m.gid()) {
            mode >> 3
        } else {
            mode
        };
        if bits & 0o3 == 0o3 {
            return None;
        }
        Some(format!(
            "-Z {} could not remove the segment from {} at exit (the directory is uid {}'s, \
             group {}, mode {:o}): it would stay behind",
            self.name,
            dir.display(),
            m.uid(),
            m.gid(),
            mode & 0o7777
        ))
    }

    /// [`Self::cannot_remove`] for a hugetlbfs, with the mount options that let this user.
    fn cannot_remove_huge(&self, dir: &Path) -> Option<String> {
        self.cannot_remove(dir).map(|why| {
            format!(
                "{why}, keeping its huge pages (mount the hugetlbfs with mode=1777, or \
                 uid={}: mount -t hugetlbfs -o mode=1777 nodev {})",
                self.uid,
                dir.display()
            )
        })
    }
}

/// Which pages a segment got, and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    /// The directory holding the segment.
    pub dir: PathBuf,
    /// Page size of the segment's memory (4096, or the hugetlbfs's huge page).
    pub page_size: usize,
    /// Pages of that size the segment spans.
    pub pages: usize,
    /// Why the segment is not on huge pages (empty when it is), with how to get them.
    pub why_not: String,
    /// Transparent huge pages were asked (madvise) for a segment on 4 KiB pages: what the
    /// tmpfs allows.
    pub thp: String,
}

impl Placement {
    /// Whether the segment is on huge pages.
    pub fn huge(&self) -> bool {
        self.page_size > 4096
    }

    /// One line: `huge pages: 39 x 2 MiB in /dev/hugepages`, or `4 KiB pages: REASON`.
    pub fn describe(&self) -> String {
        if self.huge() {
            format!(
                "huge pages: {} x {} in {}",
                self.pages,
                size_name(self.page_size),
                self.dir.display()
            )
        } else {
            let mut s = format!("4 KiB pages in {}: {}", self.dir.display(), self.why_not);
            if !self.thp.is_empty() {
                s.push_str("; ");
                s.push_str(&self.thp);
            }
            s
        }
    }
}

fn size_name(b: usize) -> String {
    if b >= 1 << 30 && b.is_multiple_of(1 << 30) {
        format!("{} GiB", b >> 30)
    } else if b >= 1 << 20 && b.is_multiple_of(1 << 20) {
        format!("{} MiB", b >> 20)
    } else {
        format!("{} KiB", b >> 10)
    }
}

/// The page size of the hugetlbfs mounted at `dir`, or why `dir` is not one (for `--huge-dir`,
/// refused before anything opens).
pub fn hugetlbfs_page_size(dir: &Path) -> Result<usize, String> {
    match fs_type(dir) {
        Ok((HUGETLBFS_MAGIC, bsize)) if bsize >= 4096 && (bsize as usize).is_power_of_two() => {
            Ok(bsize as usize)
        }
        Ok((t, _)) => Err(format!(
            "{} is not a hugetlbfs (file system 0x{t:08x}): mount one and name it, e.g. \
             `mkdir -p /dev/hugepages && mount -t hugetlbfs nodev /dev/hugepages`, then \
             --huge-dir /dev/hugepages",
            dir.display()
        )),
        Err(e) => Err(format!("{}: {e}", dir.display())),
    }
}

/// For `--huge-dir DIR`: the page size of the hugetlbfs mounted at DIR and its mount point (DIR
/// itself, or where DIR leads when it is a symbolic link: `/dev/hugepages` made a link to
/// another mount point), or why DIR cannot hold a segment (not a hugetlbfs; a folder inside
/// one, where consumers, which look at each mount point, would not find it).
pub fn check_huge_dir(dir: &Path) -> Result<(usize, PathBuf), String> {
    let page = hugetlbfs_page_size(dir)?;
    let canon = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let mounts = hugetlbfs_mounts();
    match mounts.iter().find(|m| canon(m) == canon(dir)) {
        Some(m) => Ok((page, m.clone())),
        None => Err(format!(
            "{} is inside a hugetlbfs but is not where one is mounted: consumers look for \
             segments where each hugetlbfs is mounted ({}); name that directory",
            dir.display(),
            mounts
                .iter()
                .map(|m| m.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// The hugetlbfs mount points of this mount namespace, in /proc/self/mounts's order.
pub fn hugetlbfs_mounts() -> Vec<PathBuf> {
    let Ok(text) = std::fs::read_to_string("/proc/self/mounts") else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = Vec::new();
    for line in text.lines() {
        let mut f = line.split(' ');
        let (Some(_), Some(at), Some(kind)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        if kind == "hugetlbfs" {
            let p = PathBuf::from(unescape_mount(at));
            if !v.contains(&p) {
                v.push(p);
            }
        }
    }
    v
}

/// A mount point as /proc/self/mounts writes it: space, tab, newline and backslash as `\ooo`.
fn unescape_mount(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') as u32 * 64
                + (b[i + 2] - b'0') as u32 * 8
                + (b[i + 3] - b'0') as u32;
            out.push(v as u8);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Free huge pages of `page` bytes not promised to a mapping already (HugePages_Free minus
/// HugePages_Rsvd, from /sys/kernel/mm/hugepages), if the kernel says.
pub fn free_huge_pages(page: usize) -> Option<u64> {
    let d = format!("/sys/kernel/mm/hugepages/hugepages-{}kB", page >> 10);
    let read = |f: &str| -> Option<u64> {
        std::fs::read_to_string(format!("{d}/{f}"))
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    Some(read("free_hugepages")?.saturating_sub(read("resv_hugepages").unwrap_or(0)))
}

/// The pool of `page`-byte huge pages that leaves `need` free for a new segment: the pages in
/// use or promised now (nr_hugepages is the whole pool, not what is free), `need`, and a few
/// spare 2 MiB pages (none of 1 GiB ones).
fn pool_for(need: usize, page: usize) -> usize {
    let spare = if page <= 2 << 20 { 8 } else { 0 };
    let total = std::fs::read_to_string(format!(
        "/sys/kernel/mm/hugepages/hugepages-{}kB/nr_hugepages",
        page >> 10
    ))
    .ok()
    .and_then(|t| t.trim().parse::<u64>().ok());
    let in_use = match (total, free_huge_pages(page)) {
        (Some(t), Some(f)) => t.saturating_sub(f) as usize,
        _ => 0,
    };
    in_use + need + spare
}

/// How to give the machine a pool of `n` huge pages (a line for the user: linerate changes no
/// system setting).
fn how_many(n: usize, page: usize) -> String {
    if page == 2 << 20 {
        format!("echo {n} > /proc/sys/vm/nr_hugepages")
    } else {
        format!(
            "echo {n} > /sys/kernel/mm/hugepages/hugepages-{}kB/nr_hugepages",
            page >> 10
        )
    }
}

/// What the tmpfs holding `dir` does with MADV_HUGEPAGE (its `huge=` mount option), and
/// shmem_enabled's word when it overrides (`deny`, `force`).
fn shmem_thp(dir: &Path) -> (bool, String) {
    let enabled = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/shmem_enabled")
        .ok()
        .and_then(|s| {
            let a = s.find('[')?;
            let b = s[a..].find(']')?;
            Some(s[a + 1..a + b].to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    let mut huge = "never".to_string();
    if let Ok(text) = std::fs::read_to_string("/proc/self/mounts") {
        // The last mount at dir is the one in use.
        for line in text.lines() {
            let f: Vec<&str> = line.split(' ').collect();
            if f.len() >= 4 && f[2] == "tmpfs" && Path::new(&unescape_mount(f[1])) == dir {
                huge = f[3]
                    .split(',')
                    .find_map(|o| o.strip_prefix("huge="))
                    .unwrap_or("never")
                    .to_string();
            }
        }
    }
    match (enabled.as_str(), huge.as_str()) {
        ("deny", _) => (
            false,
            "shmem transparent huge pages denied (shmem_enabled deny)".into(),
        ),
        ("force", _) => (
            true,
            "shmem transparent huge pages forced (shmem_enabled force)".into(),
        ),
        (_, "always" | "within_size" | "advise") => (
            true,
            format!(
                "transparent huge pages asked (madvise; {} mounted huge={huge})",
                dir.display()
            ),
        ),
        _ => (
            false,
            format!(
                "no transparent huge pages there ({} mounted huge={huge}, shmem_enabled {enabled})",
                dir.display()
            ),
        ),
    }
}

/// A new segment file of `len` bytes where `want` says, with the pages it got: on huge pages
/// when a hugetlbfs has enough free, else in `shm_dir` (the reason said in the placement). An
/// error only when `shm_dir` fails too, or `--huge-dir` names no hugetlbfs.
pub(super) fn create(
    want: &HugePages,
    shm_dir: &Path,
    len: usize,
    owner: Option<&SegmentOwner>,
) -> Result<(Region, ShmFile, Placement), MemError> {
    let cannot_remove = |d: &Path| owner.and_then(|o| o.cannot_remove_huge(d));
    let why_not = match want {
        HugePages::Off => "--no-huge".to_string(),
        HugePages::Dir(d) => {
            // The mount point itself: a link to it is not opened (the segment is created with
            // O_NOFOLLOW) and consumers look for segments at mount points.
            let (page, mount) = check_huge_dir(d).map_err(MemError::Config)?;
            match cannot_remove(&mount).map_or_else(|| try_huge(&mount, page, len), Err) {
                Ok(r) => return Ok(r),
                Err(why) => why,
            }
        }
        HugePages::Auto => {
            let mounts = hugetlbfs_mounts();
            if mounts.is_empty() {
                "no hugetlbfs mounted (mount -t hugetlbfs nodev /dev/hugepages; echo N > \
                 /proc/sys/vm/nr_hugepages)"
                    .to_string()
            } else {
                let mut whys = Vec::new();
                for d in &mounts {
                    if let Some(why) = cannot_remove(d) {
                        whys.push(why);
                        continue;
                    }
                    match hugetlbfs_page_size(d) {
                        Ok(page) => match try_huge(d, page, len) {
                            Ok(r) => return Ok(r),
                            Err(why) => whys.push(why),
                        },
                        Err(why) => whys.push(why),
                    }
                }
                whys.join("; ")
            }
        }
    };
    if let Some(why) = owner.and_then(|o| o.cannot_remove(shm_dir)) {
        return Err(MemError::Config(format!(
            "{why} (give -Z a user who may write {}, or leave -Z out)",
            shm_dir.display()
        )));
    }
    let (region, shm) = Region::create_shared(shm_dir, len, 4096)?;
    let (thp, thp_why) = shmem_thp(shm_dir);
    if thp {
        region.advise_huge();
    }
    let pages = region.len() / 4096;
    Ok((
        region,
        shm,
        Placement {
            dir: shm_dir.to_path_buf(),
            page_size: 4096,
            pages,
            why_not,
            thp: thp_why,
        },
    ))
}

/// The segment in the hugetlbfs `dir` of `page`-byte pages, or why not.
fn try_huge(dir: &Path, page: usize, len: usize) -> Result<(Region, ShmFile, Placement), String> {
    let need = len.div_ceil(page);
    let free = free_huge_pages(page);
    if let Some(free) = free.filter(|&f| (f as usize) < need) {
        return Err(format!(
            "{} needs {need} x {} pages, {free} free ({})",
            dir.display(),
            size_name(page),
            how_many(pool_for(need, page), page)
        ));
    }
    // A mount's size= limit (statfs counts its pages only when it has one).
    if let Ok((avail, total)) = crate::sys::fs::space(dir) {
        let left = (avail / page as u64) as usize;
        if total > 0 && left < need {
            return Err(format!(
                "{} needs {need} x {} pages, its size= limit leaves {left} (remount it with \
                 a larger size=)",
                dir.display(),
                size_name(page)
            ));
        }
    }
    match Region::create_shared(dir, len, page) {
        Ok((region, shm)) => Ok((
            region,
            shm,
            Placement {
                dir: dir.to_path_buf(),
                page_size: page,
                pages: need,
                why_not: String::new(),
                thp: String::new(),
            },
        )),
        Err(MemError::Shm { source, .. })
            if matches!(source.raw_os_error(), Some(libc::ENOMEM | libc::ENOSPC)) =>
        {
            Err(format!(
                "{} could not reserve {need} x {} pages ({} free; {})",
                dir.display(),
                size_name(page),
                free.map_or("?".into(), |f| f.to_string()),
                how_many(pool_for(need, page), page)
            ))
        }
        Err(e) => Err(format!("{}: {e}", dir.display())),
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn mount_points_are_unescaped() {
        assert_eq!(unescape_mount("/mnt/huge\\040pages"), "/mnt/huge pages");
        assert_eq!(unescape_mount("/a\\134b"), "/a\\b");
        assert_eq!(unescape_mount("/x\\04"), "/x\\04");
        assert_eq!(unescape_mount("/dev/hugepages"), "/dev/hugepages");
    }

    #[test]
    fn placements_say_which_pages() {
        let p = Placement {
            dir: "/dev/hugepages".into(),
            page_size: 2 << 20,
            pages: 39,
            why_not: String::new(),
            thp: String::new(),
        };
        assert_eq!(p.describe(), "huge pages: 39 x 2 MiB in /dev/hugepages");
        let q = Placement {
            dir: "/dev/shm".into(),
            page_size: 4096,
            pages: 10,
            why_not: "--no-huge".into(),
            thp: "x".into(),
        };
        assert_eq!(q.describe(), "4 KiB pages in /dev/shm: --no-huge; x");
        assert!(hugetlbfs_page_size(Path::new("/proc")).is_err());
    }

    #[test]
    fn a_user_removes_its_segment_only_from_a_directory_it_may_write() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let dir = std::env::temp_dir().join(format!("lr-pages-owner-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let m = std::fs::metadata(&dir).unwrap();
        let other = SegmentOwner {
            name: "someone".into(),
            uid: m.uid().wrapping_add(12345),
            groups: vec![m.gid().wrapping_add(12345)],
        };
        let set = |mode| std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode));
        set(0o755).unwrap();
        let why = other.cannot_remove(&dir).unwrap();
        assert!(why.contains("-Z someone could not remove"), "{why}");
        assert!(why.contains("mode 755"), "{why}");
        assert!(other
            .cannot_remove_huge(&dir)
            .unwrap()
            .contains("mode=1777"));
        set(0o1777).unwrap();
        assert_eq!(other.cannot_remove(&dir), None);
        set(0o775).unwrap();
        let member = SegmentOwner {
            groups: vec![1, m.gid()],
            ..other.clone()
        };
        assert_eq!(member.cannot_remove(&dir), None);
        assert!(other.cannot_remove(&dir).is_some());
        let owner = SegmentOwner {
            uid: m.uid(),
            ..other.clone()
        };
        set(0o700).unwrap();
        assert_eq!(owner.cannot_remove(&dir), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn no_huge_is_the_shared_memory_directory() {
        let dir = std::env::temp_dir().join(format!("lr-pages-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (r, _shm, p) = create(&HugePages::Off, &dir, 5000, None).unwrap();
        assert_eq!(r.len(), 8192);
        assert!(!p.huge());
        assert!(p.describe().contains("--no-huge"), "{}", p.describe());
        let e = create(&HugePages::Dir(dir.clone()), &dir, 5000, None)
            .err()
            .unwrap();
        assert!(e.to_string().contains("not a hugetlbfs"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

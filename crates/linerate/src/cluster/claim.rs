//! The claim of a cluster id by its master: one lock file, `linerate-cluster-ID.lock` in the
//! shared-memory directory, whatever directory the segment goes to (`/dev/shm` or a hugetlbfs).
//! The master holds it locked (flock) for its life, with its pid in it, and removes it at exit;
//! a second master of the id finds it locked and is refused, naming the first. A lock file
//! nobody holds (its master was killed) is stale: taken over. The name is created with
//! O_EXCL and opened with O_NOFOLLOW: a link planted there is never followed.

use super::err;
use super::pages::SegmentOwner;
use super::segment::{segment_name, segment_paths, shm_dir, unlink_if_ours, PUBLISHED};
use crate::port::PortError;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Where cluster `id`'s claim is.
pub fn claim_path(id: u32) -> PathBuf {
    shm_dir().join(format!("{}.lock", segment_name(id)))
}

/// A held claim: the lock file (locked while this lives), its name and (device, inode).
#[derive(Debug)]
pub(super) struct Claim {
    _file: File,
    path: PathBuf,
    dev: u64,
    ino: u64,
}

impl Drop for Claim {
    fn drop(&mut self) {
        // Removed while still locked: whoever opened this file meanwhile and locks it once we
        // close it finds the name gone (or another file there) and tries again.
        unlink_if_ours(&self.path, self.dev, self.ino);
        let mut l = PUBLISHED.lock().unwrap_or_else(|p| p.into_inner());
        l.retain(|(p, d, i)| !(p == &self.path && *d == self.dev && *i == self.ino));
    }
}

/// Whether `path` still names the file (`dev`, `ino`).
fn names(path: &Path, dev: u64, ino: u64) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.dev() == dev && m.ino() == ino)
}

/// Claims cluster `id` for this master (see the module): the claim, or why not: another master
/// holds it (named, with its pid), or something not a lock file of ours is at its name. With
/// `owner` (tcpdump's `-Z`), the file is given to that user, who removes it at exit.
pub(super) fn claim(id: u32, owner: Option<&SegmentOwner>, who: &str) -> Result<Claim, PortError> {
    let path = claim_path(id);
    let io = |source: std::io::Error| PortError::Io {
        path: path.display().to_string(),
        source,
    };
    let flags = libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK;
    for _ in 0..32 {
        match OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o644)
            .custom_flags(flags)
            .open(&path)
        {
            Ok(mut f) => {
                let m = f.metadata().map_err(io)?;
                // Another master may have taken this new file for a stale one and removed it
                // before we locked it: then we hold a lock on a file without a name.
                if f.try_lock().is_err() || !names(&path, m.dev(), m.ino()) {
                    continue;
                }
                f.write_all(format!("{}\n", std::process::id()).as_bytes())
                    .map_err(io)?;
                if let Some(o) = owner {
                    std::os::unix::fs::fchown(&f, Some(o.uid), None).map_err(io)?;
                }
                PUBLISHED.lock().unwrap_or_else(|p| p.into_inner()).push((
                    path.clone(),
                    m.dev(),
                    m.ino(),
                ));
                return Ok(Claim {
                    _file: f,
                    path,
                    dev: m.dev(),
                    ino: m.ino(),
                });
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io(e)),
        }
        // Something is there: a running master's claim, a stale one, or something planted.
        let mut f = match OpenOptions::new()
            .read(true)
            .custom_flags(flags)
            .open(&path)
        {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                return Err(err(
                    who,
                    format!(
                        "{} (the claim of cluster {id}) is a symbolic link: refusing to follow \
                         it (remove it if it is not yours to keep)",
                        path.display()
                    ),
                ))
            }
            Err(e) => return Err(io(e)),
        };
        let m = f.metadata().map_err(io)?;
        if !m.is_file() {
            return Err(err(
                who,
                format!(
                    "{} (the claim of cluster {id}) is not a regular file: refusing it (remove \
                     it if it is not yours to keep)",
                    path.display()
                ),
            ));
        }
        match f.try_lock() {
            Ok(()) => {
                // Nobody holds it: its master is gone. Removed while we hold it (no one else
                // can take it for stale meanwhile), then we create our own.
                if names(&path, m.dev(), m.ino()) {
                    if let Err(e) = std::fs::remove_file(&path) {
                        return Err(err(
                            who,
                            format!(
                                "{} is the stale claim of cluster {id} left by a master that \
                                 is gone (owned by uid {}), and this user cannot remove it \
                                 ({e}): rm {}",
                                path.display(),
                                m.uid(),
                                path.display()
                            ),
                        ));
                    }
                }
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                let mut s = String::new();
                let _ = Read::by_ref(&mut f).take(32).read_to_string(&mut s);
                let pid = s
                    .trim()
                    .parse::<u32>()
                    .map_or("?".into(), |p| p.to_string());
                let place = segment_paths(id)
                    .into_iter()
                    .find(|p| std::fs::symlink_metadata(p).is_ok())
                    .map_or(String::new(), |p| format!("{}; ", p.display()));
                return Err(err(
                    who,
                    format!(
                        "cluster {id} is in use by its master, pid {pid} ({place}it holds {})",
                        path.display()
                    ),
                ));
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(io(e)),
        }
    }
    Err(err(
        who,
        format!(
            "cluster {id}: its claim {} kept changing under this master (other masters of the \
             id starting and ending): start it again",
            path.display()
        ),
    ))
}

//! Flags of tools that run for long as services: `-Z USER` (tcpdump's privilege drop, long
//! name --relinquish-privileges) and `--pidfile FILE`.

use super::usage;
use std::fs::File;
use std::io::{Seek, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// `-Z` and `--pidfile`, flattened into count, flows and balance.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ServiceFlags {
    /// Drop privileges once every port and output is open, as tcpdump -Z: become USER (its
    /// group, its supplementary groups, then the user). An unknown user is refused before
    /// anything is opened.
    #[arg(short = 'Z', long = "relinquish-privileges", value_name = "USER")]
    pub user: Option<String>,
    /// Write this process's id to FILE once started (before -Z drops privileges) and remove
    /// it at exit. FILE is locked (flock) for the life of the process: refused while another
    /// process holds it; an id in an unlocked FILE is stale and overwritten. A symbolic link
    /// or anything but a regular file is refused.
    #[arg(long, value_name = "FILE")]
    pub pidfile: Option<PathBuf>,
}

/// What [`ServiceFlags::check`] found: the user to become.
#[derive(Debug, Default)]
pub struct Checked {
    user: Option<(String, u32, u32)>,
    pidfile: Option<(PathBuf, File)>,
}

/// Removes the pidfile at exit (when it still names this process).
#[derive(Debug, Default)]
pub struct Running {
    /// The pidfile and its open, locked file: the lock lasts as long as the process.
    pidfile: Option<(PathBuf, File)>,
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some((p, _locked)) = &self.pidfile {
            if read_pid(p) == Some(std::process::id()) {
                // Fails when -Z left no right to the directory: the next start finds a dead id.
                let _ = std::fs::remove_file(p);
            }
        }
    }
}

/// The process id in a pidfile, if it holds one.
fn read_pid(p: &Path) -> Option<u32> {
    std::fs::read_to_string(p).ok()?.trim().parse().ok()
}

/// Opens and locks pidfile `p`: created if missing, never through a symbolic link
/// (O_NOFOLLOW), only a regular file; refused while another process holds its lock. An id
/// in a file nobody locks is stale (its process ended, or it is some unrelated process).
fn lock_pidfile(p: &Path) -> anyhow::Result<File> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(p)
        .map_err(|e| {
            let why = if e.raw_os_error() == Some(libc::ELOOP) {
                "is a symbolic link (refused: give the file itself)".to_string()
            } else {
                e.to_string()
            };
            usage(format!("--pidfile {}: {why}", p.display()))
        })?;
    let meta = f
        .metadata()
        .map_err(|e| usage(format!("--pidfile {}: {e}", p.display())))?;
    if !meta.is_file() {
        return Err(usage(format!(
            "--pidfile {}: not a regular file",
            p.display()
        )));
    }
    match f.try_lock() {
        Ok(()) => Ok(f),
        Err(std::fs::TryLockError::WouldBlock) => {
            let who = read_pid(p).map_or(String::new(), |pid| format!(" (process {pid})"));
            Err(usage(format!(
                "--pidfile {}: a process is running on it{who}: it holds the file's lock \
                 (stop it, or give another file)",
                p.display()
            )))
        }
        Err(std::fs::TryLockError::Error(e)) => {
            Err(usage(format!("--pidfile {}: lock: {e}", p.display())))
        }
    }
}

impl ServiceFlags {
    /// Checks the flags before anything is opened: an unknown user or a pidfile naming a
    /// running process is a usage error.
    pub fn check(&self) -> anyhow::Result<Checked> {
        let user = match &self.user {
            None => None,
            Some(u) => match linerate::os::user_ids(u) {
                Ok(Some((uid, gid))) => Some((u.clone(), uid, gid)),
                Ok(None) => return Err(usage(format!("-Z {u}: no such user"))),
                Err(e) => return Err(usage(format!("-Z {u}: {e}"))),
            },
        };
        let pidfile = match &self.pidfile {
            Some(p) => Some((p.clone(), lock_pidfile(p)?)),
            None => None,
        };
        Ok(Checked { user, pidfile })
    }
}

impl Checked {
    /// The user and group ids -Z will switch to, if given.
    pub fn user(&self) -> Option<(u32, u32)> {
        self.user.as_ref().map(|(_, u, g)| (*u, *g))
    }

    /// The user -Z will switch to, as the owner of a cluster segment made before (who must
    /// be able to remove it at exit), if -Z was given.
    pub fn segment_owner(&self) -> anyhow::Result<Option<linerate::cluster::SegmentOwner>> {
        let Some((name, uid, gid)) = &self.user else {
            return Ok(None);
        };
        let groups = linerate::os::user_groups(name, *gid)
            .map_err(|e| anyhow::anyhow!("-Z {name}: its groups: {e}"))?;
        Ok(Some(linerate::cluster::SegmentOwner {
            name: name.clone(),
            uid: *uid,
            groups,
        }))
    }

    /// Once every port and output is open: writes the pidfile, then drops privileges.
    /// The returned guard removes the pidfile when dropped.
    pub fn start(self) -> anyhow::Result<Running> {
        let mut running = Running::default();
        if let Some((p, mut f)) = self.pidfile {
            // The file is ours (locked since check): replace what it held by this id.
            f.set_len(0)
                .and_then(|()| f.rewind())
                .and_then(|()| f.write_all(format!("{}\n", std::process::id()).as_bytes()))
                .map_err(|e| anyhow::anyhow!("--pidfile {}: {e}", p.display()))?;
            running.pidfile = Some((p, f));
        }
        if let Some((name, uid, gid)) = &self.user {
            linerate::os::become_user(name, *uid, *gid).map_err(|e| {
                anyhow::anyhow!("-Z {name}: cannot become that user: {e} (run as root)")
            })?;
        }
        Ok(running)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_users_and_live_pidfiles_are_refused() {
        let f = ServiceFlags {
            user: Some("lr-no-such-user-z".into()),
            pidfile: None,
        };
        assert!(f.check().is_err());
        let dir = std::env::temp_dir().join(format!("lr-pidfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("x.pid");
        // An id in an unlocked file is stale, even of a live process (pid 1): taken over.
        std::fs::write(&p, "1\n").unwrap();
        let f = ServiceFlags {
            user: None,
            pidfile: Some(p.clone()),
        };
        let running = f.check().unwrap().start().unwrap();
        assert_eq!(read_pid(&p), Some(std::process::id()));
        // While it is held (locked), a second start on the same file is refused.
        assert!(f.check().is_err());
        drop(running);
        assert!(!p.exists());
        // Two checks at once: only one gets the file.
        let first = f.check().unwrap();
        assert!(f.check().is_err());
        drop(first);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_pidfile_through_a_symbolic_link_or_not_a_file_is_refused() {
        let dir = std::env::temp_dir().join(format!("lr-pidfile-link-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let victim = dir.join("victim");
        std::fs::write(&victim, "precious\n").unwrap();
        let link = dir.join("x.pid");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        let f = ServiceFlags {
            user: None,
            pidfile: Some(link.clone()),
        };
        assert!(f.check().is_err());
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
        let f = ServiceFlags {
            user: None,
            pidfile: Some(dir.clone()),
        };
        assert!(f.check().is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}

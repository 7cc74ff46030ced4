//! Flags of tools that run for long as services: `-Z USER` (tcpdump's privilege drop, long
//! name --relinquish-privileges) and `--pidfile FILE`.

use super::usage;
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
    /// it at exit; refused when FILE holds the id of a process still running.
    #[arg(long, value_name = "FILE")]
    pub pidfile: Option<PathBuf>,
}

/// What [`ServiceFlags::check`] found: the user to become.
#[derive(Debug, Default)]
pub struct Checked {
    user: Option<(String, u32, u32)>,
    pidfile: Option<PathBuf>,
}

/// Removes the pidfile at exit (when it still names this process).
#[derive(Debug, Default)]
pub struct Running {
    pidfile: Option<PathBuf>,
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(p) = &self.pidfile {
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

/// Whether process `pid` runs (signal 0 reaches it, or it exists but is not ours to signal).
fn alive(pid: u32) -> bool {
    match linerate::os::signal(pid, 0) {
        Ok(()) => true,
        Err(e) => e.raw_os_error() == Some(libc::EPERM),
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
        if let Some(p) = &self.pidfile {
            if let Some(pid) = read_pid(p) {
                if pid != std::process::id() && alive(pid) {
                    return Err(usage(format!(
                        "--pidfile {}: process {pid} named in it is running (stop it, or \
                         give another file)",
                        p.display()
                    )));
                }
            }
        }
        Ok(Checked {
            user,
            pidfile: self.pidfile.clone(),
        })
    }
}

impl Checked {
    /// The user and group ids -Z will switch to, if given.
    pub fn user(&self) -> Option<(u32, u32)> {
        self.user.as_ref().map(|(_, u, g)| (*u, *g))
    }

    /// Once every port and output is open: writes the pidfile, then drops privileges.
    /// The returned guard removes the pidfile when dropped.
    pub fn start(self) -> anyhow::Result<Running> {
        let mut running = Running::default();
        if let Some(p) = &self.pidfile {
            std::fs::write(p, format!("{}\n", std::process::id()))
                .map_err(|e| anyhow::anyhow!("--pidfile {}: {e}", p.display()))?;
            running.pidfile = Some(p.clone());
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
        // A running process (pid 1) is refused; a dead id is taken over.
        std::fs::write(&p, "1\n").unwrap();
        let f = ServiceFlags {
            user: None,
            pidfile: Some(p.clone()),
        };
        assert!(f.check().is_err());
        std::fs::write(&p, "999999999\n").unwrap();
        let running = f.check().unwrap().start().unwrap();
        assert_eq!(read_pid(&p), Some(std::process::id()));
        drop(running);
        assert!(!p.exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}

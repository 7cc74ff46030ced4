//! `linerate extcap`: Wireshark's extcap conversation (`man 4 extcap`), so that Wireshark,
//! tshark and dumpcap list linerate's queues beside their own interfaces and capture from
//! them. A capture is `linerate count -i PORT -w FIFO --format pcapng` (one loop for both):
//! pcapng with each interface's counts and drops in a statistics block at the end, the capture
//! filter compiled as `count -f` compiles it, and a clean stop when Wireshark sends SIGTERM or
//! closes the FIFO. `install` puts a wrapper in Wireshark's personal extcap folder.

use crate::common::{sources, usage};
use anyhow::Context;
use clap::{Parser, Subcommand};
use linerate::filter::Filter;
use linerate::port::Uri;
use linerate::wire::LinkType;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The version the conversation announces (`extcap {version=...}`).
const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The line that marks a wrapper as written by `linerate extcap install`: a file without it is
/// someone else's and is never overwritten or removed.
const MARK: &str = "# linerate extcap wrapper";

/// The wrapper's file name in the extcap folder (Wireshark calls every program there).
const WRAPPER: &str = "linerate";

/// Flags of `linerate extcap`: the ones Wireshark passes (see `man 4 extcap`).
#[derive(Parser, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Args {
    #[command(subcommand)]
    action: Option<Action>,
    /// List the interfaces (running clusters' queues, AF_XDP queues, AF_PACKET interfaces).
    #[arg(long)]
    extcap_interfaces: bool,
    /// Print the extcap version line (Wireshark passes its own version: --extcap-version=4.0).
    #[arg(long, value_name = "VERSION", num_args = 0..=1, require_equals = true, default_missing_value = "")]
    extcap_version: Option<String>,
    /// The interface (a port: cluster:ID@Q, xdp:IFACE@Q, afpacket:IFACE) the other flags
    /// apply to.
    #[arg(long, value_name = "PORT")]
    extcap_interface: Option<String>,
    /// Print the interface's link types.
    #[arg(long, requires = "extcap_interface")]
    extcap_dlts: bool,
    /// Print the interface's options (none: the capture filter is Wireshark's own field).
    #[arg(long, requires = "extcap_interface")]
    extcap_config: bool,
    /// Capture from --extcap-interface into --fifo (pcapng) until SIGTERM/SIGINT, the reader
    /// closing the FIFO, or the port ending (a cluster's master stopped).
    #[arg(long, requires_all = ["extcap_interface", "fifo"])]
    capture: bool,
    /// Where --capture writes: the FIFO Wireshark made, or a new file (an existing file that
    /// is not a FIFO is refused).
    #[arg(long, value_name = "PATH")]
    fifo: Option<String>,
    /// Capture filter in libpcap syntax (count -f). Without --capture: check it, print why it
    /// is wrong, exit 0 if it compiles (Wireshark's filter check).
    #[arg(long, value_name = "BPF", requires = "extcap_interface")]
    extcap_capture_filter: Option<String>,
}

#[derive(Subcommand, Debug)]
enum Action {
    /// Put a wrapper (`exec linerate extcap "$@"`) in Wireshark's personal extcap folder.
    Install(Folder),
    /// Remove the wrapper `install` put there (never a file it did not write).
    Uninstall(Folder),
}

#[derive(Parser, Debug)]
struct Folder {
    /// The extcap folder. Default: Wireshark's personal one for the installed version:
    /// $XDG_CONFIG_HOME/wireshark/extcap (~/.config/wireshark/extcap) up to 4.0,
    /// ~/.local/lib/wireshark/extcap from 4.1.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

/// Runs `linerate extcap`.
pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    match a.action {
        Some(Action::Install(f)) => return install(f.dir),
        Some(Action::Uninstall(f)) => return uninstall(f.dir),
        None => {}
    }
    let mut out = std::io::stdout().lock();
    if a.extcap_interfaces || a.extcap_version.is_some() {
        writeln!(
            out,
            "extcap {{version={VERSION}}}{{display=linerate: cluster queues, AF_XDP queues, AF_PACKET}}"
        )?;
    }
    if a.extcap_interfaces {
        for s in sources::sources() {
            writeln!(
                out,
                "interface {{value={}}}{{display={}}}",
                s.uri, s.display
            )?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    let Some(iface) = a.extcap_interface.as_deref() else {
        if a.extcap_version.is_some() {
            return Ok(ExitCode::SUCCESS);
        }
        return Err(usage(
            "say what to do: --extcap-interfaces, --extcap-interface PORT with --extcap-dlts, \
             --extcap-config or --capture --fifo PATH, or install/uninstall",
        ));
    };
    let link = link_of(iface)?;
    if a.extcap_dlts {
        writeln!(
            out,
            "dlt {{number={}}}{{name={}}}{{display={}}}",
            link.0,
            dlt_name(link),
            dlt_display(link)
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    if a.extcap_config {
        // No options of our own: the capture filter has Wireshark's own field.
        return Ok(ExitCode::SUCCESS);
    }
    if !a.capture {
        if let Some(f) = &a.extcap_capture_filter {
            // Wireshark's check of the filter field: nothing printed means valid.
            return Ok(match Filter::compile(f, link) {
                Ok(_) => ExitCode::SUCCESS,
                Err(e) => {
                    writeln!(out, "{e}")?;
                    ExitCode::from(2)
                }
            });
        }
        return Err(usage(format!(
            "--extcap-interface {iface}: add --extcap-dlts, --extcap-config or --capture --fifo PATH"
        )));
    }
    drop(out);
    let fifo = a.fifo.as_deref().unwrap_or_default();
    check_fifo(fifo)?;
    let mut args = vec![
        "count".to_string(),
        "-i".into(),
        iface.to_string(),
        "-w".into(),
        fifo.to_string(),
        "--format".into(),
        "pcapng".into(),
        "-q".into(),
        "--no-console".into(),
    ];
    if let Some(f) = a.extcap_capture_filter.filter(|f| !f.trim().is_empty()) {
        args.push("-f".into());
        args.push(f);
    }
    let count = super::count::Args::try_parse_from(&args)
        .map_err(|e| usage(format!("--extcap-interface {iface}: {e}")))?;
    // The reader of the FIFO going away while no packet comes ends the run too (a write would
    // find out only with the next packet).
    watch_reader(fifo);
    // count's summary is for people: Wireshark shows what an extcap prints on standard error
    // when it fails, so it goes there.
    super::count::run(count)
}

/// The ports an extcap interface can be: a queue or an interface to capture from live.
fn link_of(iface: &str) -> anyhow::Result<LinkType> {
    match Uri::parse(iface) {
        Ok(Uri::AfPacket(name)) if name == "any" => Ok(LinkType::LINUX_SLL2),
        Ok(Uri::AfPacket(_) | Uri::Xdp { .. } | Uri::Cluster(_)) => Ok(LinkType::ETHERNET),
        Ok(_) => Err(usage(format!(
            "--extcap-interface {iface}: not a live port (cluster:ID@Q, xdp:IFACE@Q or \
             afpacket:IFACE: see linerate extcap --extcap-interfaces)"
        ))),
        Err(e) => Err(usage(format!("--extcap-interface {iface}: {e}"))),
    }
}

/// libpcap's name of a link type (pcap_datalink_val_to_name).
fn dlt_name(l: LinkType) -> &'static str {
    if l == LinkType::LINUX_SLL2 {
        "LINUX_SLL2"
    } else {
        "EN10MB"
    }
}

fn dlt_display(l: LinkType) -> &'static str {
    if l == LinkType::LINUX_SLL2 {
        "Linux cooked v2"
    } else {
        "Ethernet"
    }
}

/// --fifo must be the FIFO Wireshark made, or a new path: never a file someone keeps.
fn check_fifo(path: &str) -> anyhow::Result<()> {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_fifo() => Ok(()),
        Ok(_) => Err(usage(format!(
            "--fifo {path}: exists and is not a FIFO: refusing to overwrite it (name a FIFO, \
             as Wireshark does, or a new file)"
        ))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(anyhow::Error::new(e).context(format!("--fifo {path}"))),
    }
}

/// When `path` is a FIFO: a thread that waits for its reader to close it and then interrupts
/// this process (SIGTERM, the stop Wireshark itself sends), so that an idle capture ends too.
fn watch_reader(path: &str) {
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    if !std::fs::metadata(path).is_ok_and(|m| m.file_type().is_fifo()) {
        return;
    }
    let path = path.to_string();
    let _ = std::thread::Builder::new()
        .name("fifo-reader".into())
        .spawn(move || {
            // A non-blocking open for writing succeeds once a reader has the FIFO open.
            let f = loop {
                match std::fs::OpenOptions::new()
                    .write(true)
                    .custom_flags(libc::O_NONBLOCK)
                    .open(&path)
                {
                    Ok(f) => break f,
                    Err(e) if e.raw_os_error() == Some(libc::ENXIO) => {
                        std::thread::sleep(std::time::Duration::from_millis(50));
                    }
                    Err(_) => return,
                }
            };
            use std::os::fd::AsFd;
            loop {
                match linerate::os::wait_input(f.as_fd(), std::time::Duration::from_millis(200)) {
                    Ok(linerate::os::InputState::Gone) => {
                        let _ = linerate::os::signal(std::process::id(), libc::SIGTERM);
                        return;
                    }
                    Ok(_) => {}
                    Err(_) => return,
                }
            }
        });
}

/// The folder Wireshark reads personal extcaps from, for the version installed here.
fn default_dir() -> anyhow::Result<(PathBuf, String)> {
    // $HOME, when set, must be absolute (a relative one names a folder under wherever this runs).
    let home = || -> anyhow::Result<Option<PathBuf>> {
        match std::env::var_os("HOME").map(PathBuf::from) {
            Some(h) if !h.is_absolute() => Err(usage(format!(
                "HOME={} is not an absolute path: name the folder with --dir",
                h.display()
            ))),
            h => Ok(h),
        }
    };
    let version = wireshark_version();
    let newer = version.as_ref().is_some_and(|v| *v >= (4, 1));
    let said = match version {
        Some((a, b)) => format!("Wireshark {a}.{b}"),
        None => "no dumpcap found: Wireshark 4.0's folder".into(),
    };
    if newer {
        let h = home()?.context("HOME is not set: name the folder with --dir")?;
        return Ok((h.join(".local/lib/wireshark/extcap"), said));
    }
    let config = match std::env::var_os("XDG_CONFIG_HOME").filter(|v| !v.is_empty()) {
        // The XDG spec: a relative path is invalid (it would name a folder under wherever
        // this runs, not the one Wireshark reads).
        Some(c) if !Path::new(&c).is_absolute() => {
            return Err(usage(format!(
                "XDG_CONFIG_HOME={} is not an absolute path (the XDG spec says to ignore it): \
                 set it to an absolute path, unset it, or name the folder with --dir",
                Path::new(&c).display()
            )))
        }
        Some(c) => PathBuf::from(c),
        None => home()?
            .context("HOME and XDG_CONFIG_HOME are not set: name the folder with --dir")?
            .join(".config"),
    };
    Ok((config.join("wireshark/extcap"), said))
}

/// (major, minor) of the Wireshark installed (`dumpcap --version`'s first line).
fn wireshark_version() -> Option<(u32, u32)> {
    let out = std::process::Command::new("dumpcap")
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let v = text
        .split_whitespace()
        .find(|w| w.chars().next().is_some_and(|c| c.is_ascii_digit()) && w.contains('.'))?;
    let mut it = v.split('.');
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

/// Whether `path` holds a wrapper this command wrote (a regular file with the mark).
fn ours(path: &Path) -> anyhow::Result<Option<bool>> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(anyhow::Error::new(e).context(path.display().to_string())),
        Ok(m) if !m.file_type().is_file() => Ok(Some(false)),
        Ok(_) => {
            let text = std::fs::read(path).with_context(|| path.display().to_string())?;
            Ok(Some(
                String::from_utf8_lossy(&text).lines().any(|l| l == MARK),
            ))
        }
    }
}

/// Wireshark runs every file of the folder, so only this user (or root) may be able to change
/// it: refuses a folder when it, a folder above it, or a symbolic link on the way there is
/// owned by another user, or when one of those folders is writable by others without the
/// sticky bit (/tmp's 1777 is fine: others cannot rename what is ours in it).
fn check_trusted(dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let me = linerate::os::euid();
    let real = dir
        .canonicalize()
        .with_context(|| format!("resolve {}", dir.display()))?;
    let given = dir.ancestors().filter(|a| !a.as_os_str().is_empty());
    for p in given.chain(real.ancestors()) {
        let m = std::fs::symlink_metadata(p).with_context(|| p.display().to_string())?;
        if m.uid() != me && m.uid() != 0 {
            return Err(anyhow::anyhow!(
                "{}: owned by user {}, who could change what Wireshark runs: refusing to \
                 install there (name a folder of yours with --dir)",
                p.display(),
                m.uid()
            ));
        }
        if !m.file_type().is_symlink() && m.mode() & 0o022 != 0 && m.mode() & 0o1000 == 0 {
            return Err(anyhow::anyhow!(
                "{}: writable by others (mode {:o}), who could change what Wireshark runs: \
                 refusing to install there (chmod go-w it, or name another folder with --dir)",
                p.display(),
                m.mode() & 0o7777
            ));
        }
    }
    Ok(())
}

/// A shell word that is `s` whatever it holds.
fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

fn install(dir: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    let (dir, said) = match dir {
        Some(d) => (d, "--dir".to_string()),
        None => default_dir()?,
    };
    let exe = std::env::current_exe()
        .and_then(|p| p.canonicalize())
        .context("where this linerate binary is")?;
    let target = dir.join(WRAPPER);
    if ours(&target)? == Some(false) {
        return Err(anyhow::anyhow!(
            "{}: exists and was not written by linerate extcap install: refusing to overwrite \
             it (remove it, or install elsewhere with --dir)",
            target.display()
        ));
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
    check_trusted(&dir)?;
    let text = format!(
        "#!/bin/sh\n{MARK}\n# Written by `linerate extcap install`; `linerate extcap uninstall` removes it.\nexec {} extcap \"$@\"\n",
        shell_quote(&exe.to_string_lossy())
    );
    // Written beside it, then renamed over: Wireshark never runs half a file.
    let tmp = dir.join(format!(".{WRAPPER}.{}", std::process::id()));
    {
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o755)
            .open(&tmp)
            .with_context(|| format!("create {}", tmp.display()))?;
        f.write_all(text.as_bytes())
            .with_context(|| format!("write {}", tmp.display()))?;
    }
    if let Err(e) = std::fs::rename(&tmp, &target) {
        let _ = std::fs::remove_file(&tmp);
        return Err(anyhow::Error::new(e).context(format!("rename onto {}", target.display())));
    }
    println!(
        "Installed {} ({said}); it runs {} extcap. `tshark -D` lists linerate's queues.",
        target.display(),
        exe.display()
    );
    Ok(ExitCode::SUCCESS)
}

fn uninstall(dir: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    let dir = match dir {
        Some(d) => d,
        None => default_dir()?.0,
    };
    let target = dir.join(WRAPPER);
    match ours(&target)? {
        None => {
            println!("Nothing to remove: {} does not exist", target.display());
        }
        Some(false) => {
            return Err(anyhow::anyhow!(
                "{}: was not written by linerate extcap install: leaving it",
                target.display()
            ))
        }
        Some(true) => {
            std::fs::remove_file(&target)
                .with_context(|| format!("remove {}", target.display()))?;
            println!("Removed {}", target.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_live_ports_are_interfaces() {
        assert_eq!(link_of("cluster:10@0").unwrap(), LinkType::ETHERNET);
        assert_eq!(link_of("afpacket:any").unwrap(), LinkType::LINUX_SLL2);
        assert!(link_of("pcap:/tmp/x.pcap").is_err());
        assert!(link_of("mem:a").is_err());
    }

    #[test]
    fn the_wrapper_quotes_any_path() {
        assert_eq!(shell_quote("/a b/it's"), r"'/a b/it'\''s'");
    }
}

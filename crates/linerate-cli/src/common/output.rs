//! The flags of capture-file outputs, as tcpdump and dumpcap spell them: when records reach
//! the file (`--flush-interval`, `-U`) and when it rotates (`-C`, `-G`, `-W`, `-z`, dumpcap's
//! `-b`, `--disk-budget`). Flattened into every command that writes a capture file (`count -w`,
//! `gen -o`, `fwd -o`, `balance -o/-r`); checked here before any output is opened, so that a
//! wrong value is a usage error (exit 2) that leaves every file as it was.

use super::flags::{self, Durations};
use super::usage;
use linerate::port::pcap::rotate::{self, OnRotate, Rotate, Rotated, WriteOptions};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

/// `--flush-interval`: 0 (as buffered) or 10 ms to 24 h.
const FLUSH: Durations = Durations {
    min: Duration::from_millis(10),
    max: Duration::from_secs(86_400),
    off: true,
};

/// Capture-file output flags (all but dumpcap's `-b`, see [`RingBuffer`]).
#[derive(clap::Args, Debug, Clone)]
pub struct OutputFlags {
    /// Write each packet to the capture file as soon as it is captured (tcpdump's -U): a
    /// write per batch of packets.
    #[arg(short = 'U', long = "packet-buffered")]
    pub packet_buffered: bool,
    /// Longest a captured packet stays in the write buffer before it reaches the file, even
    /// when no packet follows; 0: written only as the 1 MiB buffer fills (and at the end).
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = flags::duration(FLUSH))]
    pub flush_interval: Duration,
    /// Rotate the capture file (tcpdump's -C): before a packet, when the file is larger than
    /// SIZE, close it and open FILE1, FILE2, ... SIZE in millions of bytes (1 = 1000000), or
    /// with a unit: 500kB, 100MB, 1GiB.
    #[arg(short = 'C', value_name = "SIZE", value_parser = file_size)]
    pub file_size: Option<u64>,
    /// Rotate the capture file every SECONDS (tcpdump's -G), on multiples of SECONDS of the
    /// clock (-G 3600: on the hour); the file name is an strftime(3) pattern
    /// (-w 'cap-%Y%m%d-%H%M%S.pcap'), in local time.
    #[arg(short = 'G', value_name = "SECONDS", value_parser = flags::count(1, 31_536_000))]
    pub rotate_seconds: Option<u64>,
    /// With -C: a ring of N files FILE0..FILE{N-1}, the oldest overwritten. With -G alone:
    /// stop after N files (tcpdump's -W). With both -C and -G: only pads the file numbers
    /// (no ring, no limit), as tcpdump.
    #[arg(short = 'W', value_name = "N", value_parser = flags::count(1, 1_000_000))]
    pub file_count: Option<u64>,
    /// Run CMD FILE on each capture file once it is closed (tcpdump's -z), with -C or -G;
    /// CMD is a program run directly (no shell), not waited for while capturing; at the end
    /// the run waits at most 2 s for those still running, then leaves them running (logged).
    #[arg(short = 'z', value_name = "CMD")]
    pub post_command: Option<String>,
    /// With -C or -G: delete the oldest capture files this run wrote to keep their total
    /// under SIZE (500MB, 2GiB); the file being written counts as its -C size.
    #[arg(long, value_name = "SIZE", value_parser = linerate::units::parse_size)]
    pub disk_budget: Option<u64>,
}

impl Default for OutputFlags {
    fn default() -> Self {
        OutputFlags {
            packet_buffered: false,
            flush_interval: Duration::from_secs(1),
            file_size: None,
            rotate_seconds: None,
            file_count: None,
            post_command: None,
            disk_budget: None,
        }
    }
}

/// The capture file a port URI writes (`pcap:FILE`, `pcapng:FILE`, a path, `-`), if it is
/// one file (not a wire, an interface or a list).
pub fn file_of_uri(uri: &str) -> Option<String> {
    if uri.contains(',') {
        return None;
    }
    super::file_of(uri)
}

/// dumpcap's ring buffer flag, `-b KEY:VALUE` (repeatable).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct RingBuffer {
    /// dumpcap's ring buffer (repeatable): filesize:KB (rotate after KB kilobytes of 1000
    /// bytes), duration:SECONDS (clock-aligned, as -G), files:N (keep the last N files, the
    /// oldest deleted, the capture goes on); files named as dumpcap's:
    /// PREFIX_NNNNN_YYYYmmddHHMMSS.EXT. Not mixed with -C/-G/-W.
    #[arg(short = 'b', long = "ring-buffer", value_name = "KEY:VALUE", value_parser = ring_setting)]
    pub ring_buffer: Vec<String>,
}

/// A `-b` value: KEY:VALUE (checked in full later). A bare number is refused here with the
/// flag it meant in balance before -b was dumpcap's there too (zbalance_ipc's -b, `--buffers`).
fn ring_setting(s: &str) -> Result<String, String> {
    if !s.is_empty() && s.trim().chars().all(|c| c.is_ascii_digit()) {
        return Err(
            "write filesize:KB, duration:SECONDS or files:N (dumpcap's ring buffer); the frames \
             in balance's cluster (zbalance_ipc's -b) are --buffers N"
                .into(),
        );
    }
    Ok(s.to_string())
}

/// tcpdump's -C: a bare number is millions of bytes (`1` = 1000000, `0.5`); a unit is taken
/// as written (`500kB`, `100MB`, `1GiB`). Spaces around it are ignored (tcpdump's strtol skips
/// leading ones); an exponent (`1e-6`), or a size that is not a whole number of bytes, is
/// refused rather than rounded.
pub(crate) fn file_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let units = "a size in millions of bytes (1 = 1000000, 0.5) or with a unit: B, kB, MB, GB, TB, KiB, MiB, GiB, TiB";
    let plain = !t.is_empty()
        && t.bytes().all(|b| b.is_ascii_digit() || b == b'.')
        && t.bytes().filter(|&b| b == b'.').count() <= 1
        && t.bytes().any(|b| b.is_ascii_digit());
    let bytes = if plain {
        // Millions of bytes, with up to 6 decimals (a whole number of bytes).
        let (int, frac) = t.split_once('.').unwrap_or((t, ""));
        if frac.len() > 6 && frac[6..].bytes().any(|b| b != b'0') {
            return Err(format!("'{s}': not a whole number of bytes ({units})"));
        }
        let int: u64 = if int.is_empty() {
            0
        } else {
            int.parse()
                .map_err(|_| format!("'{s}': too large ({units})"))?
        };
        let mut f = frac.chars().take(6).collect::<String>();
        while f.len() < 6 {
            f.push('0');
        }
        let frac: u64 = f.parse().unwrap_or(0);
        int.checked_mul(1_000_000)
            .and_then(|b| b.checked_add(frac))
            .ok_or_else(|| format!("'{s}': too large ({units})"))?
    } else {
        let rest = t.trim_start_matches(|c: char| c.is_ascii_digit() || c == '.');
        let mut after_e = rest.strip_prefix(['e', 'E']).unwrap_or("").chars();
        if rest.len() < t.len()
            && after_e
                .next()
                .is_some_and(|c| c.is_ascii_digit() || c == '-' || c == '+')
        {
            return Err(format!("'{s}': no exponent; write {units}"));
        }
        linerate::units::parse_size(t).map_err(|_| format!("'{s}': {units}"))?
    };
    if bytes == 0 {
        return Err(format!("'{s}': a size of at least 1 byte ({units})"));
    }
    if bytes > 1_000_000_000_000_000_000 {
        return Err(format!("'{s}': at most 1 EB"));
    }
    Ok(bytes)
}

/// Whether `cmd` names a program that can be run (a path, or a name found in PATH).
fn runnable(cmd: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let exec = |p: &std::path::Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if cmd.contains('/') {
        return exec(std::path::Path::new(cmd));
    }
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|d| exec(&d.join(cmd))))
}

impl OutputFlags {
    /// The write options of capture file `path` (None: the command writes no capture file),
    /// every value checked: a usage error names the flag. `ring` is dumpcap's `-b` list;
    /// `json` writes each rotation as a JSON line on standard output (else a line on standard
    /// error); `stop` is set when -G with -W wrote its last file.
    pub fn options(
        &self,
        ring: &[String],
        path: Option<&str>,
        json: bool,
        stop: Option<Arc<AtomicBool>>,
    ) -> anyhow::Result<WriteOptions> {
        let mut size = self.file_size;
        let mut seconds = self.rotate_seconds;
        let mut files = self.file_count;
        for b in ring {
            let bad = || {
                usage(format!(
                    "-b {b}: write filesize:KB, duration:SECONDS or files:N (dumpcap's ring buffer)"
                ))
            };
            let (k, v) = b.split_once(':').ok_or_else(bad)?;
            let n: u64 = v.parse().map_err(|_| bad())?;
            if n == 0 {
                return Err(bad());
            }
            let (slot, flag) = match k {
                "filesize" => (&mut size, "-C"),
                "duration" => (&mut seconds, "-G"),
                "files" => (&mut files, "-W"),
                _ => {
                    return Err(usage(format!(
                        "-b {b}: '{k}' is not supported; write filesize:KB, duration:SECONDS or files:N"
                    )))
                }
            };
            if slot.is_some() {
                return Err(usage(format!("-b {b}: given twice (or with {flag})")));
            }
            *slot = Some(if k == "filesize" {
                n.saturating_mul(1000)
            } else {
                n
            });
        }
        let dumpcap = !ring.is_empty();
        if dumpcap
            && (self.file_size.is_some()
                || self.rotate_seconds.is_some()
                || self.file_count.is_some())
        {
            return Err(usage(
                "-b (dumpcap's ring buffer, its own file names) is not mixed with tcpdump's -C, -G or -W: give one or the other",
            ));
        }
        let rotating = size.is_some() || seconds.is_some();
        for (given, flag) in [
            (files.is_some(), "-W"),
            (self.post_command.is_some(), "-z"),
            (self.disk_budget.is_some(), "--disk-budget"),
        ] {
            if given && !rotating {
                return Err(usage(format!(
                    "{flag}: only with -C or -G (or -b filesize:/duration:): the capture file does not rotate"
                )));
            }
        }
        if rotating || self.packet_buffered {
            match path {
                None => {
                    let f = if rotating { "-C/-G/-b" } else { "-U" };
                    return Err(usage(format!(
                        "{f}: only one capture file rotates or is packet-buffered (-w or -o FILE); not a list of files (a,b), a port (mem:, afpacket:) or no output"
                    )));
                }
                Some("-") if rotating => {
                    return Err(usage(
                        "-C/-G/-b: standard output does not rotate; write to a file",
                    ))
                }
                _ => {}
            }
        }
        if let Some(cmd) = &self.post_command {
            if !runnable(cmd) {
                return Err(usage(format!(
                    "-z {cmd}: no such program (a path, or a name in PATH; run directly, not by a shell)"
                )));
            }
        }
        if let (Some(budget), Some(s)) = (self.disk_budget, size) {
            if budget < s.saturating_mul(2) {
                return Err(usage(format!(
                    "--disk-budget {budget}: at least two files of -C {s} bytes"
                )));
            }
        }
        if let (Some(_), Some(p), false) = (seconds, path, dumpcap) {
            if rotate::file_name(p, Some(0), 0, 0).is_none_or(|n| n.is_empty()) {
                return Err(usage(format!("-G: '{p}' gives no file name (strftime)")));
            }
        }
        let on_rotate: Option<OnRotate> = rotating.then(|| {
            let f: OnRotate = Arc::new(move |r: &Rotated| log_rotation(r, json));
            f
        });
        Ok(WriteOptions {
            flush_interval: Some(self.flush_interval).filter(|d| !d.is_zero()),
            packet_buffered: self.packet_buffered,
            rotate: Rotate {
                size,
                seconds,
                files: files.map(|n| n.min(u64::from(u32::MAX)) as u32),
                post_command: self.post_command.clone(),
                budget: self.disk_budget,
                on_rotate,
                stop,
                dumpcap,
            },
        })
    }
}

/// A rotation in the log: a line on standard error, or a JSON line on standard output.
fn log_rotation(r: &Rotated, json: bool) {
    if json {
        let mut j = serde_json::json!({
            "type": "rotate",
            "why": r.why,
            "closed": r.closed,
            "bytes": r.bytes,
            "packets": r.packets,
            "opened": r.opened,
            "deleted": r.deleted,
        });
        if let Some(n) = r.file_limit {
            j["file"] = r.file.into();
            j["file_limit"] = n.into();
        }
        println!("{j}");
    } else {
        let next = match (&r.opened, r.file_limit) {
            (Some(f), Some(n)) => format!("opened {f} (file {} of -W {n})", r.file),
            (Some(f), None) => format!("opened {f}"),
            (None, Some(n)) => format!("file limit (-W {n}) reached ({} files)", r.file),
            (None, None) => "file limit (-W) reached".into(),
        };
        let del = if r.deleted.is_empty() {
            String::new()
        } else {
            format!(
                "; deleted {} (--disk-budget, -b files:)",
                r.deleted.join(", ")
            )
        };
        eprintln!(
            "linerate: rotated ({}): closed {} ({} packets, {} bytes), {next}{del}",
            r.why, r.closed, r.packets, r.bytes
        );
    }
}

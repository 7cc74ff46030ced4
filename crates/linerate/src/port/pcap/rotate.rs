//! How a capture file is written over time, as tcpdump and dumpcap users expect: records reach
//! the file at least every `flush_interval` (tcpdump writes as its buffer fills; `-U` each
//! packet at once), and the file rotates (`-C` size, `-G` seconds, `-W` files, `-z` command,
//! `--disk-budget`).
//!
//! Names follow tcpdump: with `-C` the second file is `FILE1`, the third `FILE2`, ...; with
//! `-W N` as well, the files are a ring `FILE0` .. `FILE{N-1}`, numbered with as many digits
//! as `N-1` has, the oldest overwritten. With `-G` the name is an strftime(3) pattern expanded
//! in local time when each file opens. Unlike tcpdump, whose periods start when it starts,
//! `-G` periods are aligned to the clock: a new file starts at every multiple of SECONDS since
//! the epoch (`-G 3600`: on the hour), and the first file runs from the start to the first
//! such multiple; a period with no packet still gets its file. `-G` with `-W N` stops the run
//! once N files are written (tcpdump's meaning). Every file is whole and readable alone: a
//! pcap header each, a pcapng section header and interface descriptions at the start and
//! interface statistics at the end of each.

use std::fmt;
use std::process::Child;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

/// A rotation as the log and `--json` output report it.
#[derive(Clone, Debug, Default)]
pub struct Rotated {
    /// The file closed (whole).
    pub closed: String,
    /// Its size in bytes.
    pub bytes: u64,
    /// Packets in it.
    pub packets: u64,
    /// The file opened next (None when the `-W` limit of `-G` ended the run).
    pub opened: Option<String>,
    /// Files deleted to stay under `--disk-budget`.
    pub deleted: Vec<String>,
    /// Why: `size` (-C) or `time` (-G).
    pub why: &'static str,
    /// Which file of the run the one opened is (from 1; at the limit, the one closed).
    pub file: u64,
    /// The `-W` number when it is a limit in force (`-G` alone: the run stops after it).
    pub file_limit: Option<u32>,
}

/// A callback told of each rotation.
pub type OnRotate = Arc<dyn Fn(&Rotated) + Send + Sync>;

/// When a capture file rotates (all off by default).
#[derive(Clone, Default)]
pub struct Rotate {
    /// `-C`: a new file before a packet when the file is already larger than this (bytes).
    pub size: Option<u64>,
    /// `-G`: a new file at every multiple of this many seconds (clock-aligned).
    pub seconds: Option<u64>,
    /// `-W`: with `-C`, a ring of this many files; with `-G` alone, the number of files after
    /// which the run stops.
    pub files: Option<u32>,
    /// `-z`: a program run as `CMD FILE` on each closed file (not waited for; never a shell).
    pub post_command: Option<String>,
    /// `--disk-budget`: the oldest files of this run are deleted to keep their sum under it.
    pub budget: Option<u64>,
    /// Told of each rotation.
    pub on_rotate: Option<OnRotate>,
    /// Set when `-G` with `-W` wrote its last file: the run should stop.
    pub stop: Option<Arc<AtomicBool>>,
    /// dumpcap's `-b`: files named PREFIX_NNNNN_YYYYmmddHHMMSS.EXT (a new name each time,
    /// never a strftime pattern), and `files` is a ring of the last N files (the oldest
    /// deleted, the capture goes on), whatever the other conditions.
    pub dumpcap: bool,
}

impl fmt::Debug for Rotate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rotate")
            .field("size", &self.size)
            .field("seconds", &self.seconds)
            .field("files", &self.files)
            .field("post_command", &self.post_command)
            .field("budget", &self.budget)
            .field("dumpcap", &self.dumpcap)
            .finish()
    }
}

impl Rotate {
    /// Whether files rotate at all.
    pub fn is_on(&self) -> bool {
        self.size.is_some() || self.seconds.is_some()
    }
}

/// How a capture file is written: flushing and rotation.
#[derive(Clone, Debug, Default)]
pub struct WriteOptions {
    /// Longest a record stays in the buffer (None or zero: written as the buffer fills).
    pub flush_interval: Option<Duration>,
    /// `-U`: every batch of packets is written as soon as it is captured.
    pub packet_buffered: bool,
    /// Rotation.
    pub rotate: Rotate,
}

/// Digits tcpdump gives a ring's file numbers: as many as `files - 1` has (0 for 1 file).
pub fn ring_width(files: u32) -> usize {
    let mut x = files.saturating_sub(1);
    let mut c = 0;
    while x > 0 {
        c += 1;
        x /= 10;
    }
    c
}

/// The name of a file: `base` (expanded by strftime for `secs` when given), then `count`
/// with `width` digits, unless both are 0 (tcpdump's first file keeps the bare name).
pub fn file_name(base: &str, secs: Option<i64>, count: u64, width: usize) -> Option<String> {
    let name = match secs {
        Some(s) => crate::sys::localtime::strftime_local(base, s)?,
        None => base.to_string(),
    };
    if count == 0 && width == 0 {
        Some(name)
    } else {
        Some(format!("{name}{count:0width$}"))
    }
}

/// dumpcap's parts of a file name: `PREFIX` (the name without its extension) and `.EXT`
/// (empty when there is none).
pub(super) fn dumpcap_parts(name: &str) -> (&str, &str) {
    let file_start = name.rfind('/').map_or(0, |i| i + 1);
    match name[file_start..].rfind('.') {
        Some(i) if i > 0 => name.split_at(file_start + i),
        _ => (name, ""),
    }
}

/// dumpcap's name of its `seq`-th ring buffer file (from 1) opened at `secs`:
/// PREFIX_NNNNN_YYYYmmddHHMMSS.EXT, in local time.
pub fn dumpcap_name(base: &str, seq: u64, secs: i64) -> Option<String> {
    let (prefix, ext) = dumpcap_parts(base);
    let t = crate::sys::localtime::strftime_local("%Y%m%d%H%M%S", secs)?;
    Some(format!("{prefix}_{seq:05}_{t}{ext}"))
}

/// An existing file a rotation of `base` could name (tcpdump's FILE1, FILE2, ..., a `-G`
/// strftime name, dumpcap's PREFIX_NNNNN_...) that is one of `inputs` (standard input's file
/// included): its name and the input's. Checked before the first file is opened, so that a
/// later rotation never truncates what the run reads.
pub(super) fn input_among_names(base: &str, inputs: &Inputs) -> Option<(String, String)> {
    if inputs.is_empty() {
        return None;
    }
    let p = std::path::Path::new(base);
    let fname = p.file_name()?.to_str()?;
    let dir = match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => std::path::Path::new("."),
    };
    let timed = fname.contains('%');
    let (stem, _) = dumpcap_parts(fname);
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        let rotation = match name.strip_prefix(fname) {
            Some(rest) => rest.bytes().all(|b| b.is_ascii_digit()),
            None => false,
        } || (timed && strftime_could_name(fname, name))
            || name.strip_prefix(stem).is_some_and(|r| {
                r.len() > 6 && r.starts_with('_') && r[1..6].bytes().all(|b| b.is_ascii_digit())
            });
        if !rotation {
            continue;
        }
        let path = e.path();
        if let Some(input) = file::FileId::of(&path).and_then(|id| inputs.find(id)) {
            return Some((path.display().to_string(), input.to_string()));
        }
    }
    None
}

/// One piece of an strftime pattern, for [`strftime_could_name`].
#[derive(Clone, Copy)]
enum Piece {
    /// A byte written as it is (`%%` is a `%`).
    Lit(u8),
    /// A conversion that writes numbers (`%H`, `%Y`, `%F`, `%T`, `%z`, ...): digits, padding
    /// and their separators.
    Number,
    /// Any other conversion (`%a`, `%b`, `%Z`, `%c`, an unknown one): any text.
    Text,
}

/// Whether the strftime pattern `pattern` (a `-G` file name) could write `name` at some time,
/// counted conservatively (a conversion may write any number of the characters it can write),
/// followed by the digits tcpdump's `-C`/`-W` appends. Literal parts must match: a name that
/// merely starts with the text before the first `%` is not one of its rotations.
fn strftime_could_name(pattern: &str, name: &str) -> bool {
    let p = pattern.as_bytes();
    let mut pieces = Vec::with_capacity(p.len());
    let mut i = 0;
    while i < p.len() {
        if p[i] != b'%' {
            pieces.push(Piece::Lit(p[i]));
            i += 1;
            continue;
        }
        i += 1;
        // glibc's flags, a field width, the E and O modifiers.
        while i < p.len() && (b"_-0^#EO".contains(&p[i]) || p[i].is_ascii_digit()) {
            i += 1;
        }
        match p.get(i) {
            Some(b'%') => pieces.push(Piece::Lit(b'%')),
            Some(c) if b"CdDegGHIjklmMsSuUVwWyYFTRz".contains(c) => pieces.push(Piece::Number),
            _ => pieces.push(Piece::Text),
        }
        i += 1;
    }
    let n = name.as_bytes();
    let number = |c: u8| c.is_ascii_digit() || b" +-:/".contains(&c);
    // can[j]: the pieces so far can write n[..j] (a conversion writes zero or more bytes).
    let mut can = vec![false; n.len() + 1];
    can[0] = true;
    for piece in pieces {
        let mut next = vec![false; n.len() + 1];
        for j in 0..=n.len() {
            match piece {
                Piece::Lit(b) => next[j] = j > 0 && can[j - 1] && n[j - 1] == b,
                Piece::Number => {
                    next[j] = can[j] || (j > 0 && next[j - 1] && number(n[j - 1]));
                }
                Piece::Text => next[j] = can[j] || (j > 0 && next[j - 1]),
            }
        }
        can = next;
    }
    // The file number of -C (FILE1, FILE2, ...) or -W after the strftime name.
    (0..=n.len()).any(|j| can[j] && n[j..].iter().all(u8::is_ascii_digit))
}

/// How long the end of a run waits for `-z` commands still running.
pub const POST_WAIT: Duration = Duration::from_secs(2);

/// Runs `cmd file` (no shell), not waited for.
pub(crate) fn post_command(cmd: &str, file: &str) -> std::io::Result<Child> {
    std::process::Command::new(cmd)
        .arg(file)
        .stdin(std::process::Stdio::null())
        .spawn()
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn timed_names_are_matched_by_their_literal_parts() {
        assert!(strftime_could_name("%H%M%S.pcap", "001518.pcap"));
        assert!(strftime_could_name("%H%M%S.pcap", "001518.pcap12"));
        assert!(!strftime_could_name("%H%M%S.pcap", "in.pcap"));
        assert!(!strftime_could_name("in%%.pcap", "in.pcap"));
        assert!(strftime_could_name("in%%.pcap", "in%.pcap"));
        assert!(strftime_could_name("%a-%_d.pcap", "Mon- 1.pcap"));
        assert!(strftime_could_name(
            "cap-%F_%T.pcap",
            "cap-2026-11-28_00:15:18.pcap"
        ));
        assert!(!strftime_could_name("cap-%F.pcap", "cap-x.pcap"));
        assert!(strftime_could_name("c%", "cx"));
        assert!(!strftime_could_name("%Y.pcap", ".pcapx"));
    }

    #[test]
    fn names_are_tcpdumps() {
        assert_eq!(ring_width(1), 0);
        assert_eq!(ring_width(3), 1);
        assert_eq!(ring_width(10), 1);
        assert_eq!(ring_width(11), 2);
        assert_eq!(file_name("a.pcap", None, 0, 0).unwrap(), "a.pcap");
        assert_eq!(file_name("a.pcap", None, 2, 0).unwrap(), "a.pcap2");
        assert_eq!(file_name("a.pcap", None, 0, 1).unwrap(), "a.pcap0");
        assert_eq!(file_name("a.pcap", None, 7, 2).unwrap(), "a.pcap07");
        let d = dumpcap_name("/t/r.pcap", 3, 1_700_000_000).unwrap();
        assert!(
            d.starts_with("/t/r_00003_2023111") && d.ends_with(".pcap"),
            "{d}"
        );
        assert_eq!(d.len(), "/t/r_00003_20231114221320.pcap".len());
        assert_eq!(dumpcap_parts("a.b/cap"), ("a.b/cap", ""));
        assert_eq!(dumpcap_parts("cap.pcapng"), ("cap", ".pcapng"));
        assert!(file_name("x-%Y.pcap", Some(1_700_000_000), 0, 0)
            .unwrap()
            .starts_with("x-2023"));
    }
}

use super::{PcapNgWriter, PcapWriter, WriteFormat, Writer, WRITE_BUF};
use crate::port::file::{self, Inputs, RecordFile};
use crate::port::{Interface, LinkType};
use std::collections::VecDeque;
use std::io;
use std::sync::atomic::Ordering;

/// What a writer port keeps to flush on time and to rotate.
pub(super) struct Policy {
    /// Flush interval in ns (0: as buffered).
    flush_ns: u64,
    next_flush: u64,
    /// When `-G` is next checked without a packet (every 100 ms).
    next_check: u64,
    /// `-U`.
    pub(super) per_packet: bool,
    pub(super) rot: Option<Rotator>,
}

impl Policy {
    pub(super) fn new(o: &WriteOptions, r: Option<Rotator>) -> Policy {
        Policy {
            flush_ns: o
                .flush_interval
                .map_or(0, |d| d.as_nanos().min(u64::MAX as u128) as u64),
            next_flush: 0,
            next_check: 0,
            per_packet: o.packet_buffered,
            rot: r,
        }
    }

    /// Whether a flush is due at `now` (monotonic ns); the next one an interval later.
    #[inline]
    pub(super) fn flush_due(&mut self, now: u64) -> bool {
        if self.flush_ns == 0 || now < self.next_flush {
            return false;
        }
        let first = self.next_flush == 0;
        self.next_flush = now.saturating_add(self.flush_ns);
        !first
    }

    /// Whether the time rotation is due a check at `now` (every 100 ms).
    #[inline]
    pub(super) fn check_due(&mut self, now: u64) -> bool {
        if self.rot.as_ref().is_none_or(|r| !r.timed()) || now < self.next_check {
            return false;
        }
        self.next_check = now.saturating_add(100_000_000);
        true
    }
}

/// The state of a rotating writer.
pub(super) struct Rotator {
    opts: Rotate,
    base: String,
    format: WriteFormat,
    link: LinkType,
    snaplen: u32,
    pub(super) whole: bool,
    pub(super) ifaces: Vec<Interface>,
    inputs: Inputs,
    /// tcpdump's `-C` count (reset at each `-G` period).
    count: u64,
    /// Files opened so far.
    files: u64,
    /// The current `-G` period (seconds since the epoch / SECONDS).
    period: u64,
    /// The time that names the current period's files (tcpdump names a `-C` file within a
    /// `-G` period by the period's time, as its first file, so names never drift).
    name_time: u64,
    /// Files closed, oldest first, with their sizes (for the budget).
    closed: VecDeque<(String, u64)>,
    children: Vec<Child>,
    /// `-G` with `-W`: the last file is written.
    pub(super) done: bool,
    /// Packets and bytes written to the files closed so far.
    pub(super) prior_packets: u64,
    pub(super) prior_bytes: u64,
    pub(super) prior_by_if: Vec<u64>,
    /// Records of the closed files (headers included).
    pub(super) prior_written: u64,
    /// The packets in each file closed so far, by name (the last file of that name).
    on_disk: std::collections::HashMap<String, u64>,
    /// Packets written to files whose name a later file took again (tcpdump's `-G` with a name
    /// without a time field writes the one file again each period; a `-C` `-W` ring goes
    /// round): no longer on disk.
    pub(super) overwritten: u64,
}

impl Rotator {
    /// The first file's name, and the rotator that names the next ones.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn first(
        opts: Rotate,
        base: &str,
        format: WriteFormat,
        link: LinkType,
        snaplen: u32,
        inputs: &Inputs,
        now_s: u64,
    ) -> Option<(Rotator, String)> {
        let period = opts.seconds.map_or(0, |g| now_s / g.max(1));
        let r = Rotator {
            opts,
            base: base.to_string(),
            format,
            link,
            snaplen,
            whole: false,
            ifaces: Vec::new(),
            inputs: inputs.clone(),
            count: 0,
            files: 1,
            period,
            name_time: now_s,
            closed: VecDeque::new(),
            children: Vec::new(),
            done: false,
            prior_packets: 0,
            prior_bytes: 0,
            prior_by_if: Vec::new(),
            prior_written: 0,
            on_disk: std::collections::HashMap::new(),
            overwritten: 0,
        };
        let name = r.name(now_s, 1)?;
        Some((r, name))
    }

    fn width(&self) -> usize {
        if self.opts.dumpcap {
            return 0;
        }
        match (self.opts.size, self.opts.files) {
            (Some(_), Some(n)) => ring_width(n),
            _ => 0,
        }
    }

    /// The name of file number `seq` (from 1) opened at `now_s`.
    fn name(&self, now_s: u64, seq: u64) -> Option<String> {
        if self.opts.dumpcap {
            return dumpcap_name(&self.base, seq, now_s as i64);
        }
        let secs = self.opts.seconds.map(|_| now_s as i64);
        file_name(&self.base, secs, self.count, self.width())
    }

    /// Why the file should rotate before the next packet: it holds more than `-C` (`pos`
    /// bytes), or a `-G` period ended (`now_s`: wall-clock seconds, read only with `-G`).
    #[inline]
    pub(super) fn due(&self, pos: u64, now_s: u64) -> Option<&'static str> {
        if self.done {
            return None;
        }
        if let Some(g) = self.opts.seconds {
            if now_s / g.max(1) != self.period {
                return Some("time");
            }
        }
        match self.opts.size {
            Some(c) if pos > c => Some("size"),
            _ => None,
        }
    }

    /// Once `-G` with `-W` wrote its last file: the limit, in the summary's words.
    pub(super) fn limit_note(&self) -> Option<String> {
        self.done.then(|| match self.opts.files {
            Some(n) => format!("file limit (-W {n}) reached"),
            None => "file limit (-W) reached".to_string(),
        })
    }

    /// `-W N` when it is a limit (tcpdump's `-G` without `-C`: the run stops after N files).
    fn file_limit(&self) -> Option<u32> {
        self.opts.files.filter(|_| {
            self.opts.seconds.is_some() && self.opts.size.is_none() && !self.opts.dumpcap
        })
    }

    /// What overwrote files of this run when a name was used again: `-G` (its name has no
    /// time field that changes between periods) or the `-W` ring of `-C`.
    pub(super) fn overwriter(&self) -> &'static str {
        if self.opts.size.is_some() && self.opts.files.is_some() && self.opts.seconds.is_none() {
            "the -W ring"
        } else if self.opts.seconds.is_some() {
            "-G"
        } else {
            "rotation"
        }
    }

    /// Whether `-G` is on (the wall clock is read per batch).
    pub(super) fn timed(&self) -> bool {
        self.opts.seconds.is_some()
    }

    /// Closes `writer`'s file (`path`) and opens the next one in its place.
    pub(super) fn rotate(
        &mut self,
        writer: &mut Writer,
        path: &mut String,
        why: &'static str,
        now_s: u64,
    ) -> io::Result<()> {
        // The old file ends whole: pcapng with its interfaces' statistics.
        let (packets, bytes, by_if, records) = match writer {
            Writer::Pcap(w) => {
                w.flush()?;
                (
                    w.packets(),
                    w.bytes(),
                    vec![w.packets()],
                    w.get_ref().records_written(),
                )
            }
            Writer::Ng(w) => {
                if !w.stats_written() {
                    w.write_stats(&[])?;
                }
                w.flush()?;
                let p = w.packets();
                (
                    p,
                    w.bytes(),
                    w.packets_by_interface().to_vec(),
                    w.get_ref().records_written(),
                )
            }
        };
        let size = match writer {
            Writer::Pcap(w) => w.get_ref().position(),
            Writer::Ng(w) => w.get_ref().position(),
        };
        let closed = path.clone();
        // -G with -W: the last file is written; the run stops.
        if why == "time"
            && self
                .file_limit()
                .is_some_and(|n| self.files >= u64::from(n))
        {
            self.done = true;
            if let Some(s) = &self.opts.stop {
                s.store(true, Ordering::Relaxed);
            }
            let deleted = self.after_close(&closed, size, false);
            self.tell(Rotated {
                closed,
                bytes: size,
                packets,
                opened: None,
                deleted,
                why,
                file: self.files,
                file_limit: self.file_limit(),
            });
            return Ok(());
        }
        if why == "time" {
            if let Some(g) = self.opts.seconds {
                self.period = now_s / g.max(1);
            }
            self.count = 0;
        } else {
            self.count += 1;
            // tcpdump: with both -C and -G, -W makes no ring (it only pads the numbers).
            if let Some(n) = self.opts.files.filter(|_| {
                self.opts.size.is_some() && self.opts.seconds.is_none() && !self.opts.dumpcap
            }) {
                if self.count >= u64::from(n) {
                    self.count = 0;
                }
            }
        }
        // A file of the next period is named by the period's start.
        let at = match self.opts.seconds {
            Some(g) if why == "time" => self.period * g.max(1),
            Some(_) => self.name_time,
            None => now_s,
        };
        let next = self
            .name(at, self.files + 1)
            .ok_or_else(|| io::Error::other(format!("-G: no file name from '{}'", self.base)))?;
        let f = file::create(&next, &self.inputs).map_err(|e| io::Error::other(e.to_string()))?;
        // A name used again: the file written under it before is gone (truncated).
        self.on_disk.insert(closed.clone(), packets);
        self.overwritten += self.on_disk.remove(&next).unwrap_or(0);
        let sink = RecordFile::new(f, WRITE_BUF);
        let mut w = match self.format {
            WriteFormat::Pcap => Writer::Pcap(PcapWriter::new(sink, self.link, self.snaplen)?),
            WriteFormat::PcapNg => {
                let mut w = PcapNgWriter::new(sink, self.link, self.snaplen)?;
                w.describe(&self.ifaces)?;
                Writer::Ng(w)
            }
        };
        match &mut w {
            Writer::Pcap(x) if self.whole => x.keep_whole(),
            Writer::Ng(x) if self.whole => x.keep_whole(),
            _ => {}
        }
        // The header reaches the new file at once.
        match &mut w {
            Writer::Pcap(x) => x.flush()?,
            Writer::Ng(x) => x.flush()?,
        }
        // The old writer is dropped here: its file is complete, its figures move to the
        // prior ones (only now: a writer kept in place, when the next file cannot be opened or
        // the -W limit ended the run, still counts them itself).
        self.prior_packets += packets;
        self.prior_bytes += bytes;
        self.prior_written += records;
        if self.prior_by_if.len() < by_if.len() {
            self.prior_by_if.resize(by_if.len(), 0);
        }
        for (a, b) in self.prior_by_if.iter_mut().zip(&by_if) {
            *a += b;
        }
        *writer = w;
        *path = next.clone();
        self.name_time = at;
        self.files += 1;
        // A name used again (a -W ring) is a file overwritten: no longer in the budget's list.
        self.closed.retain(|(n, _)| *n != next);
        let deleted = self.after_close(&closed, size, true);
        self.tell(Rotated {
            closed,
            bytes: size,
            packets,
            opened: Some(next),
            deleted,
            why,
            file: self.files,
            file_limit: self.file_limit(),
        });
        Ok(())
    }

    /// A file closed: `-z` runs on it, the budget deletes the oldest files over it.
    /// `next`: whether a file is opened after it (not at the end of the run).
    fn after_close(&mut self, closed: &str, size: u64, next: bool) -> Vec<String> {
        self.reap();
        if let Some(cmd) = &self.opts.post_command {
            match post_command(cmd, closed) {
                Ok(c) => self.children.push(c),
                Err(e) => eprintln!("linerate: -z {cmd} {closed}: {e}"),
            }
        }
        self.closed.push_back((closed.to_string(), size));
        let mut deleted = Vec::new();
        // dumpcap's files:N: the last N files stay (the one opened next among them).
        if let Some(n) = self.opts.files.filter(|_| self.opts.dumpcap) {
            while self.closed.len() + usize::from(next) > n as usize {
                let Some((name, _)) = self.closed.pop_front() else {
                    break;
                };
                if std::fs::remove_file(&name).is_ok() {
                    deleted.push(name);
                }
            }
        }
        if let Some(budget) = self.opts.budget {
            // The file about to be written counts as its -C size (or nothing yet); at the end
            // of the run no file is written any more: only the files on disk count.
            let reserve = if next { self.opts.size.unwrap_or(0) } else { 0 };
            let mut total: u64 = self.closed.iter().map(|(_, s)| s).sum::<u64>() + reserve;
            // The file just closed stays, whatever its size.
            while total > budget && self.closed.len() > 1 {
                let Some((name, s)) = self.closed.pop_front() else {
                    break;
                };
                if std::fs::remove_file(&name).is_ok() {
                    deleted.push(name);
                }
                total -= s;
            }
        }
        deleted
    }

    fn tell(&self, r: Rotated) {
        if let Some(f) = &self.opts.on_rotate {
            f(&r);
        }
    }

    /// Collects `-z` commands that ended (never waits).
    pub(super) fn reap(&mut self) {
        self.children
            .retain_mut(|c| !matches!(c.try_wait(), Ok(Some(_)) | Err(_)));
    }

    /// The last file closed at the end of the run: `-z` runs on it too. The `-z` commands
    /// still running get a short bounded wait ([`POST_WAIT`]); those still running after it
    /// are left running, each named in the log (tcpdump never waits for them), so a stuck
    /// command never holds the run's exit.
    pub(super) fn close_last(&mut self, path: &str, size: u64) {
        if !self.done {
            let deleted = self.after_close(path, size, false);
            if !deleted.is_empty() {
                eprintln!(
                    "linerate: at the end: deleted {} (--disk-budget, -b files:)",
                    deleted.join(", ")
                );
            }
        }
        let end = std::time::Instant::now() + POST_WAIT;
        loop {
            self.reap();
            if self.children.is_empty() || std::time::Instant::now() >= end {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let cmd = self.opts.post_command.as_deref().unwrap_or("");
        for c in self.children.drain(..) {
            eprintln!(
                "linerate: -z {cmd}: pid {} still running after {} ms; not waited for",
                c.id(),
                POST_WAIT.as_millis()
            );
        }
    }
}

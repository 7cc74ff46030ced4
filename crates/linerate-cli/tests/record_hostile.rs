//! `linerate record` and `linerate query` against a hostile directory and a hostile disk: a
//! full file system with no budget (every packet written or counted `disk_full`, no empty or
//! cut files left), a read-only one, symbolic links planted in DIR (never followed, their
//! targets untouched), a corrupt index (the answer is still tcpdump's), and the issue's own
//! order of arguments (`query DIR FILTER --from T -w OUT`).
#![deny(unsafe_code)]

use linerate::port::pcap::PcapWriter;
use linerate::wire::LinkType;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_linerate");

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("lr-rec-hostile-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn have_tcpdump() -> bool {
    linerate_test_support::require_tool("tcpdump", "apt-get install tcpdump")
}

/// A pcap of `n` 64-byte UDP frames from 200 hosts, 1 ms apart.
fn traffic(n: u32) -> Vec<u8> {
    let mut w = PcapWriter::new(Vec::new(), LinkType::ETHERNET, 65535).unwrap();
    for i in 0..n {
        let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 8, 0];
        f.extend_from_slice(&[0x45, 0, 0, 46, 0, 0, 0, 0, 64, 17, 0, 0]);
        f.extend_from_slice(&[10, (i % 200) as u8 + 1, 0, 1, 198, 18, 0, 2]);
        f.extend_from_slice(&(1024 + (i % 1000) as u16).to_be_bytes());
        f.extend_from_slice(&[0, 9, 0, 26, 0, 0]);
        f.extend_from_slice(&i.to_be_bytes());
        f.resize(60, 0);
        w.write_packet(1_700_000_000_000_000_000 + u64::from(i) * 1_000_000, &f, 60)
            .unwrap();
    }
    w.into_inner()
}

fn run(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().unwrap()
}

fn captures(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "pcap" || e == "pcapng"))
        .collect();
    v.sort();
    v
}

/// Packets `tcpdump -r FILE [FILTER]` prints; panics when tcpdump complains (a file with no
/// header, a record cut short).
fn tcpdump_count(file: &Path, filter: Option<&str>) -> usize {
    let mut c = Command::new("tcpdump");
    c.args(["-n", "-r"]).arg(file);
    if let Some(f) = filter {
        c.arg(f);
    }
    let o = c.output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "tcpdump -r {}: {err}", file.display());
    assert!(
        !err.contains("truncated"),
        "tcpdump -r {}: {err}",
        file.display()
    );
    String::from_utf8_lossy(&o.stdout).lines().count()
}

/// The `--json` summary line's number at `path` ("written", "dropped.disk_full").
fn summary_field(stdout: &[u8], path: &[&str]) -> u64 {
    let text = String::from_utf8_lossy(stdout);
    let line = text
        .lines()
        .rev()
        .find(|l| l.contains("\"summary\""))
        .unwrap_or_else(|| panic!("no summary line in {text}"));
    let mut v: serde_json::Value = serde_json::from_str(line).unwrap();
    for k in path {
        v = v[*k].take();
    }
    v.as_u64().unwrap_or_else(|| panic!("{path:?} in {line}"))
}

/// A tmpfs of `size` mounted on `at` (options `opts`), unmounted on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path, opts: &str) -> Option<Tmpfs> {
        std::fs::create_dir_all(at).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", opts, "tmpfs"])
            .arg(at)
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| Tmpfs(at.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// A tmpfs of 4 MB, no --budget, no --keep-free, 15 MB of input: the full disk is reported
/// (each file deleted to make room is named: before, only the counters showed it, and a run
/// could end with nothing on stderr),
/// every packet is written or counted `disk_full` (received = written + disk_full), `written`
/// is what the files hold (with what the files deleted to make room held), and every file left
/// reads whole with tcpdump (no empty file, none cut mid-record, no index .tmp). Before: every
/// packet counted written, disk_full 0, twelve empty files with no pcap header and their
/// .idx.tmp left behind.
#[test]
fn full_disk_without_budget_counts_every_lost_packet() {
    if !linerate_test_support::netns::require_priv() || !have_tcpdump() {
        return;
    }
    let d = tmp("full");
    let input = d.join("in.pcap");
    let n = 200_000;
    std::fs::write(&input, traffic(n)).unwrap();
    let Some(fs) = Tmpfs::mount(&d.join("mnt"), "size=4m") else {
        linerate_test_support::skip("mount -t tmpfs refused");
        return;
    };
    let out = fs.0.join("rec");
    let o = run(&[
        "record",
        "--json",
        "-i",
        &format!("pcap:{}", input.display()),
        "--file-size",
        "1MB",
        out.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("No space left") || err.contains("ENOSPC"),
        "the full disk is reported: {err}"
    );
    let written = summary_field(&o.stdout, &["written"]);
    let lost = summary_field(&o.stdout, &["dropped", "disk_full"]);
    let deleted = summary_field(&o.stdout, &["files_deleted"]);
    assert_eq!(
        written + lost,
        u64::from(n),
        "every packet accounted: {err}"
    );
    assert!(lost > 0 || deleted > 0, "4 MB cannot hold 15 MB: {err}");
    let files = captures(&out);
    assert!(!files.is_empty());
    let on_disk: usize = files.iter().map(|f| tcpdump_count(f, None)).sum();
    if deleted == 0 {
        assert_eq!(on_disk as u64, written, "written = the files' packets");
    } else {
        assert!(
            on_disk > 0 && on_disk as u64 <= written,
            "{on_disk} of {written}"
        );
    }
    for f in &files {
        let mut tmp = f.as_os_str().to_owned();
        tmp.push(".idx.tmp");
        assert!(!Path::new(&tmp).exists(), "{tmp:?} left behind");
    }
    drop(fs);
    let _ = std::fs::remove_dir_all(&d);
}

/// A read-only file system: refused at once with exit 1 naming the directory (no hang, no
/// panic), for DIR itself and for a DIR to create in it.
#[test]
fn read_only_dir_is_refused_naming_it() {
    if !linerate_test_support::netns::require_priv() {
        return;
    }
    let d = tmp("ro");
    let input = d.join("in.pcap");
    std::fs::write(&input, traffic(100)).unwrap();
    let Some(fs) = Tmpfs::mount(&d.join("mnt"), "ro,size=1m") else {
        linerate_test_support::skip("mount -t tmpfs refused");
        return;
    };
    for dir in [fs.0.clone(), fs.0.join("sub")] {
        let o = run(&[
            "record",
            "-i",
            &format!("pcap:{}", input.display()),
            dir.to_str().unwrap(),
        ]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{dir:?}: {err}");
        assert!(
            err.contains(dir.to_str().unwrap()) && err.contains("Read-only"),
            "{dir:?}: {err}"
        );
    }
    drop(fs);
    let _ = std::fs::remove_dir_all(&d);
}

/// Symbolic links planted in DIR: one named as a capture file pointing at a cut pcap outside,
/// one as an index, one as the lock. The lock link is refused; without it the recorder's
/// start-up repair and `query` pass the links over: their targets are byte for byte as they
/// were, and the query's answer holds only the recorder's own packets.
#[test]
fn planted_symlinks_are_never_followed() {
    if !have_tcpdump() {
        return;
    }
    let d = tmp("links");
    let input = d.join("in.pcap");
    let data = traffic(1000);
    std::fs::write(&input, &data).unwrap();
    // A victim cut mid-record: a repair through the link would truncate it.
    let victim = d.join("victim.pcap");
    std::fs::write(&victim, &data[..24 + 76 * 10 + 30]).unwrap();
    let secret = d.join("secret");
    std::fs::write(&secret, b"not yours\n").unwrap();
    let rec = d.join("rec");
    std::fs::create_dir(&rec).unwrap();
    let link = |target: &Path, name: &str| std::os::unix::fs::symlink(target, rec.join(name));
    link(&victim, "20200101T000000.000000Z-w0.pcap").unwrap();
    link(&secret, "20200101T000000.000000Z-w1.pcap.idx").unwrap();
    link(&secret, ".lock").unwrap();
    let src = format!("pcap:{}", input.display());
    let o = run(&["record", "-q", "-i", &src, rec.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "a planted .lock link: {o:?}");
    std::fs::remove_file(rec.join(".lock")).unwrap();
    let o = run(&["record", "-q", "-i", &src, rec.to_str().unwrap()]);
    assert!(o.status.success(), "{o:?}");
    assert_eq!(std::fs::read(&victim).unwrap(), &data[..24 + 76 * 10 + 30]);
    assert_eq!(std::fs::read(&secret).unwrap(), b"not yours\n");
    let q = d.join("q.pcap");
    let o = run(&[
        "query",
        "-w",
        q.to_str().unwrap(),
        rec.to_str().unwrap(),
        "udp",
    ]);
    assert!(o.status.success(), "{o:?}");
    assert_eq!(tcpdump_count(&q, None), 1000, "only the recorder's packets");
    assert_eq!(std::fs::read(&victim).unwrap(), &data[..24 + 76 * 10 + 30]);
    let _ = std::fs::remove_dir_all(&d);
}

/// A corrupt index (bytes flipped in its middle, or cut short): the query's answer is still
/// `tcpdump -r`'s over the file.
#[test]
fn corrupt_index_still_gives_tcpdumps_answer() {
    if !have_tcpdump() {
        return;
    }
    let d = tmp("corrupt");
    let input = d.join("in.pcap");
    std::fs::write(&input, traffic(20_000)).unwrap();
    let rec = d.join("rec");
    let o = run(&[
        "record",
        "-q",
        "-i",
        &format!("pcap:{}", input.display()),
        rec.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{o:?}");
    let files = captures(&rec);
    let filter = "host 10.7.0.1 and udp port 1030";
    let want: usize = files.iter().map(|f| tcpdump_count(f, Some(filter))).sum();
    assert!(want > 0);
    for (i, f) in files.iter().enumerate() {
        let idx = PathBuf::from(format!("{}.idx", f.display()));
        let mut b = std::fs::read(&idx).unwrap();
        if i % 2 == 0 {
            let mid = b.len() / 2;
            for x in &mut b[mid..mid + 8] {
                *x ^= 0x5a;
            }
        } else {
            b.truncate(b.len() / 3);
        }
        std::fs::write(&idx, &b).unwrap();
    }
    let q = d.join("q.pcap");
    let o = run(&[
        "query",
        "-w",
        q.to_str().unwrap(),
        rec.to_str().unwrap(),
        filter,
    ]);
    assert!(o.status.success(), "{o:?}");
    assert_eq!(tcpdump_count(&q, None), want);
    let _ = std::fs::remove_dir_all(&d);
}

/// The issue's order, `query DIR FILTER --from T -w OUT`: flags after the filter words are
/// flags, as tcpdump takes options after its expression. Before: the words after the filter
/// were all taken as filter, and -w was "not provided" (exit 2).
#[test]
fn query_takes_flags_after_the_filter() {
    if !have_tcpdump() {
        return;
    }
    let d = tmp("order");
    let input = d.join("in.pcap");
    std::fs::write(&input, traffic(2000)).unwrap();
    let rec = d.join("rec");
    let o = run(&[
        "record",
        "-q",
        "-i",
        &format!("pcap:{}", input.display()),
        rec.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{o:?}");
    let q = d.join("q.pcap");
    let o = run(&[
        "query",
        rec.to_str().unwrap(),
        "udp",
        "and",
        "port",
        "1030",
        "--from",
        "1700000000",
        "-w",
        q.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{o:?}");
    let want: usize = captures(&rec)
        .iter()
        .map(|f| tcpdump_count(f, Some("udp and port 1030")))
        .sum();
    assert_eq!(tcpdump_count(&q, None), want);
    let _ = std::fs::remove_dir_all(&d);
}

/// A stray file in DIR named like a capture (random bytes, a disk's damage) is passed over with
/// a note naming it; the other files still answer, as a loop of `tcpdump -r` goes on past a
/// bad file. Before: every query of the directory failed (exit 1) on that one file.
#[test]
fn a_bad_file_does_not_stop_the_query() {
    if !have_tcpdump() {
        return;
    }
    let d = tmp("stray");
    let input = d.join("in.pcap");
    std::fs::write(&input, traffic(3000)).unwrap();
    let rec = d.join("rec");
    let o = run(&[
        "record",
        "-q",
        "-i",
        &format!("pcap:{}", input.display()),
        rec.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{o:?}");
    let noise: Vec<u8> = (0..10_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let stray = rec.join("20200101T000000.000000Z-w0.pcap");
    std::fs::write(&stray, &noise).unwrap();
    let q = d.join("q.pcap");
    let o = run(&[
        "query",
        "-w",
        q.to_str().unwrap(),
        rec.to_str().unwrap(),
        "udp port 1030",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains(stray.to_str().unwrap()),
        "names the file: {err}"
    );
    assert_eq!(tcpdump_count(&q, None), 3);
    let _ = std::fs::remove_dir_all(&d);
}

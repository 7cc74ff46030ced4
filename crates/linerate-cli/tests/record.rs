//! `linerate record`: files rotate and read whole with tcpdump, together they are the input,
//! the budget keeps the newest, a crash is repaired at the next start, a second recorder is
//! refused; the index is a superset of what tcpdump's filters match.
#![deny(unsafe_code)]

use linerate::apps::record::{FileIndex, IndexWriter, Key};
use linerate::port::pcap::{PcapReader, PcapWriter};
use linerate::wire::LinkType;
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_linerate");

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("lr-record-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn have_tcpdump() -> bool {
    linerate_test_support::require_tool("tcpdump", "apt-get install tcpdump")
}

/// A pcap of `n` 64-byte UDP frames over many hosts, times 1 ms apart.
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

/// `tcpdump -n -r FILE [FILTER]`'s lines; panics on any complaint (a cut record, a bad header).
fn tcpdump_lines(file: &Path, filter: Option<&str>) -> Vec<String> {
    let mut c = Command::new("tcpdump");
    c.args(["-n", "-tt", "-r"]).arg(file);
    if let Some(f) = filter {
        c.arg(f);
    }
    let o = c.output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "tcpdump -r {}: {err}", file.display());
    assert!(
        !err.contains("truncated") && !err.contains("rror"),
        "tcpdump -r {}: {err}",
        file.display()
    );
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(String::from)
        .collect()
}

fn record(args: &[&str]) -> std::process::Output {
    Command::new(BIN).arg("record").args(args).output().unwrap()
}

#[test]
fn files_rotate_and_together_are_the_input() {
    if !have_tcpdump() {
        return;
    }
    let d = tmp("rotate");
    let input = d.join("in.pcap");
    std::fs::write(&input, traffic(20_000)).unwrap();
    let out = d.join("rec");
    let o = record(&[
        "-i",
        &format!("pcap:{}", input.display()),
        out.to_str().unwrap(),
        "--file-size",
        "200kB",
        "-q",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let files = captures(&out);
    assert!(files.len() >= 7, "{} files", files.len());
    let mut all = Vec::new();
    for f in &files {
        let name = f.file_name().unwrap().to_str().unwrap();
        assert!(name.ends_with("Z-w0.pcap") && name.len() == 31, "{name}");
        assert!(std::fs::metadata(f).unwrap().len() <= 200_000);
        all.extend(tcpdump_lines(f, None));
        let idx = FileIndex::load(f).unwrap();
        assert!(idx.packets() > 0);
    }
    assert_eq!(all, tcpdump_lines(&input, None));
    // The summary says what was written.
    let o = record(&[
        "-i",
        &format!("pcap:{}", input.display()),
        d.join("rec2").to_str().unwrap(),
        "--json",
        "-q",
        "--format",
        "pcapng",
    ]);
    assert!(o.status.success());
    let s = String::from_utf8_lossy(&o.stdout);
    let last: serde_json::Value = serde_json::from_str(s.lines().last().unwrap()).unwrap();
    assert_eq!(last["type"], "summary");
    assert_eq!(last["received"], 20_000);
    assert_eq!(last["written"], 20_000);
    assert_eq!(last["dropped"]["disk_full"], 0);
    let ng = captures(&d.join("rec2"));
    assert_eq!(ng.len(), 1);
    assert!(ng[0].to_str().unwrap().ends_with(".pcapng"));
    assert_eq!(tcpdump_lines(&ng[0], None), tcpdump_lines(&input, None));
    assert_eq!(FileIndex::load(&ng[0]).unwrap().packets(), 20_000);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn budget_keeps_the_newest() {
    if !have_tcpdump() {
        return;
    }
    let d = tmp("budget");
    let input = d.join("in.pcap");
    std::fs::write(&input, traffic(40_000)).unwrap();
    let out = d.join("rec");
    let o = record(&[
        "-i",
        &format!("pcap:{}", input.display()),
        out.to_str().unwrap(),
        "--file-size",
        "100kB",
        "--budget",
        "400kB",
        "-q",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let total: u64 = std::fs::read_dir(&out)
        .unwrap()
        .flatten()
        .map(|e| e.metadata().unwrap().len())
        .sum();
    assert!(total <= 400_000 + 100_000, "{total} bytes kept");
    let files = captures(&out);
    assert!(files.len() >= 3);
    // The newest packets are there: the input's last line is the last file's last.
    let last = tcpdump_lines(files.last().unwrap(), None);
    assert_eq!(last.last(), tcpdump_lines(&input, None).last());
    // Every index left belongs to a file left.
    for e in std::fs::read_dir(&out).unwrap().flatten() {
        let p = e.path();
        if p.extension().is_some_and(|x| x == "idx") {
            assert!(p.with_extension("").exists(), "{}", p.display());
        }
    }
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn bad_flags_touch_nothing() {
    let d = tmp("flags");
    let out = d.join("rec");
    for args in [
        vec!["--file-size", "1kB"],
        vec!["--file-size", "1MB", "--budget", "500kB"],
        vec!["--keep-free", "100"],
        vec!["--keep-free", "0"],
        vec!["-s", "10"],
        vec!["--threads", "2"],
        vec!["--format", "csv"],
        vec!["-G", "0"],
        vec!["--rotate-seconds", "abc"],
        vec!["-G", "-1"],
        vec!["-G", "1.5"],
        vec!["--budget", "5PB"],
        vec!["--file-size", "1TiB", "--budget", "1TB"],
    ] {
        let mut a = vec!["-i", "pcap:/nonexistent.pcap", out.to_str().unwrap()];
        a.extend(args.iter());
        let o = record(&a);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {o:?}");
        assert!(!out.exists(), "{args:?} created the directory");
    }
    // A planted symlink as DIR is refused.
    std::os::unix::fs::symlink("/tmp", &out).unwrap();
    let o = record(&["-i", "pcap:/nonexistent.pcap", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    let _ = std::fs::remove_dir_all(&d);
}

/// Each file's packet times (tcpdump -tt), in seconds.
fn times(file: &Path) -> Vec<f64> {
    tcpdump_lines(file, None)
        .iter()
        .map(|l| l.split_whitespace().next().unwrap().parse().unwrap())
        .collect()
}

#[test]
fn rotate_seconds_closes_files_on_capture_time_windows() {
    if !have_tcpdump() {
        return;
    }
    let d = tmp("rotate-g");
    let input = d.join("in.pcap");
    // 20 s of packets, 1 ms apart.
    std::fs::write(&input, traffic(20_000)).unwrap();
    let t0 = 1_700_000_000.0;
    for (args, files_want) in [
        // -G alone: a window of 3 s from each file's first packet, 7 files.
        (vec!["-G", "3"], 7),
        // -G with --file-size: whichever comes first (each 2 s window, 152 kB, is cut once).
        (vec!["--rotate-seconds", "2", "--file-size", "100kB"], 20),
    ] {
        let out = d.join(format!("rec{files_want}"));
        let mut a = vec!["-i".to_string(), format!("pcap:{}", input.display())];
        a.push(out.to_str().unwrap().into());
        a.extend(args.iter().map(|s| s.to_string()));
        a.push("-q".into());
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        let o = record(&a);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let secs: f64 = args[1].parse().unwrap();
        let files = captures(&out);
        assert_eq!(files.len(), files_want, "{args:?}");
        let mut all = Vec::new();
        let mut window_start = t0;
        for f in &files {
            let t = times(f);
            let (first, last) = (t[0], *t.last().unwrap());
            // A new window starts at the first packet past the last one's end.
            if first >= window_start + secs - 1e-9 {
                window_start = first;
            }
            assert!(
                last < window_start + secs - 1e-9,
                "{args:?} {}: {first}..{last} leaves the window at {window_start}",
                f.display()
            );
            assert!(std::fs::metadata(f).unwrap().len() <= 100_000 || files_want == 7);
            // Each file's index was written when it closed: it covers the whole file.
            let idx = FileIndex::load(f).unwrap();
            assert_eq!(idx.packets(), t.len() as u64);
            assert_eq!(idx.indexed_end(), std::fs::metadata(f).unwrap().len());
            all.extend(tcpdump_lines(f, None));
        }
        assert_eq!(all, tcpdump_lines(&input, None), "{args:?}");
        if files_want == 7 {
            // Window starts are exactly 3 s apart (the packets are 1 ms apart).
            let firsts: Vec<f64> = files.iter().map(|f| times(f)[0] - t0).collect();
            for (k, f) in firsts.iter().enumerate() {
                assert!((f - 3.0 * k as f64).abs() < 1e-6, "{firsts:?}");
            }
        }
    }
    let _ = std::fs::remove_dir_all(&d);
}

/// The blocks of a little-endian pcapng file: (type, body).
fn ng_blocks(f: &[u8]) -> Vec<(u32, Vec<u8>)> {
    let rd = |at: usize| u32::from_le_bytes(f[at..at + 4].try_into().unwrap());
    let mut v = Vec::new();
    let mut at = 0;
    while at < f.len() {
        let (t, n) = (rd(at), rd(at + 4) as usize);
        assert_eq!(rd(at + n - 4) as usize, n, "block at {at}");
        v.push((t, f[at + 8..at + n - 4].to_vec()));
        at += n;
    }
    v
}

/// Option `code` of a block's options (from `from` in its body) as a u64 (a time: high then
/// low 32 bits).
fn ng_opt(body: &[u8], from: usize, code: u16) -> Option<u64> {
    let rd16 = |at: usize| u16::from_le_bytes(body[at..at + 2].try_into().unwrap());
    let rd32 = |at: usize| u64::from(u32::from_le_bytes(body[at..at + 4].try_into().unwrap()));
    let mut at = from;
    while at + 4 <= body.len() {
        let (c, n) = (rd16(at), rd16(at + 2) as usize);
        if c == 0 {
            break;
        }
        if c == code && n == 8 {
            return Some(if code <= 3 {
                (rd32(at + 4) << 32) | rd32(at + 8)
            } else {
                u64::from_le_bytes(body[at + 4..at + 12].try_into().unwrap())
            });
        }
        at += 4 + n.next_multiple_of(4);
    }
    None
}

#[test]
fn pcapng_files_close_with_interface_statistics() {
    if !have_tcpdump() {
        return;
    }
    let d = tmp("isb");
    let input = d.join("in.pcap");
    std::fs::write(&input, traffic(20_000)).unwrap();
    let out = d.join("rec");
    let o = record(&[
        "-i",
        &format!("pcap:{}", input.display()),
        out.to_str().unwrap(),
        "--format",
        "pcapng",
        "-G",
        "3",
        "-q",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let files = captures(&out);
    assert_eq!(files.len(), 7);
    let mut sizes = Vec::new();
    for f in &files {
        let bytes = std::fs::read(f).unwrap();
        sizes.push(bytes.len());
        let blocks = ng_blocks(&bytes);
        let epbs: Vec<&Vec<u8>> = blocks.iter().filter(|b| b.0 == 6).map(|b| &b.1).collect();
        let ts = |b: &[u8]| {
            let w = |at: usize| u64::from(u32::from_le_bytes(b[at..at + 4].try_into().unwrap()));
            (w(4) << 32) | w(8)
        };
        let (first, last) = (ts(epbs[0]), ts(epbs[epbs.len() - 1]));
        // One interface statistics block, last, as dumpcap closes a file.
        let isbs: Vec<&Vec<u8>> = blocks.iter().filter(|b| b.0 == 5).map(|b| &b.1).collect();
        assert_eq!(isbs.len(), 1, "{}", f.display());
        assert_eq!(blocks.last().unwrap().0, 5);
        let isb = isbs[0];
        let n = epbs.len() as u64;
        assert_eq!(
            ng_opt(isb, 12, 2),
            Some(first),
            "isb_starttime: the first packet"
        );
        assert!(ng_opt(isb, 12, 3).unwrap() >= last, "isb_endtime");
        assert_eq!(
            ng_opt(isb, 12, 4),
            Some(n),
            "isb_ifrecv: this file's packets"
        );
        assert_eq!(ng_opt(isb, 12, 5), Some(0), "isb_ifdrop");
        assert_eq!(ng_opt(isb, 12, 8), Some(n), "isb_usrdeliv");
        // The index covers the packets; the statistics after them are not taken for a cut.
        let idx = FileIndex::load(f).unwrap();
        assert_eq!(idx.packets(), n);
        assert!(idx.indexed_end() < bytes.len() as u64);
        // capinfos reads the statistics.
        if let Ok(c) = Command::new("capinfos").arg(f).output() {
            let t = String::from_utf8_lossy(&c.stdout);
            assert!(t.contains("Number of stat entries = 1"), "{t}");
        }
    }
    let all: Vec<String> = files.iter().flat_map(|f| tcpdump_lines(f, None)).collect();
    assert_eq!(all, tcpdump_lines(&input, None));
    // A restart takes the closed files as they are (nothing to repair).
    let empty = d.join("empty.pcap");
    std::fs::write(&empty, &traffic(1)[..24]).unwrap();
    let o = record(&[
        "-i",
        &format!("pcap:{}", empty.display()),
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("repaired") && !err.contains("cut"), "{err}");
    let now: Vec<usize> = files
        .iter()
        .map(|f| std::fs::metadata(f).unwrap().len() as usize)
        .collect();
    assert_eq!(now, sizes);
    // linerate query reads them without a note, as tcpdump does, and passes over the files
    // outside the times (their statistics do not make it read them).
    let want = tcpdump_lines(&input, Some("host 10.7.0.1")).len();
    let o = Command::new(BIN)
        .args(["query", out.to_str().unwrap(), "host 10.7.0.1"])
        .args(["--from", "1700000018", "-w", "-", "-q", "--json"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    let j: serde_json::Value = serde_json::from_slice(&o.stderr).unwrap();
    assert_eq!(j["notes"].as_array().map(Vec::len), Some(0), "{j}");
    assert_eq!(j["files_cut"], 0, "{j}");
    assert_eq!(j["files_skipped"], 6, "{j}");
    let q = d.join("q.pcap");
    std::fs::write(&q, &o.stdout).unwrap();
    assert_eq!(tcpdump_lines(&q, None).len(), want / 10);
    let o = Command::new(BIN)
        .args(["query", out.to_str().unwrap(), "host 10.7.0.1"])
        .args(["-w", "-", "-q", "--json"])
        .output()
        .unwrap();
    std::fs::write(&q, &o.stdout).unwrap();
    assert_eq!(
        tcpdump_lines(&q, None),
        tcpdump_lines(&input, Some("host 10.7.0.1"))
    );
    let _ = std::fs::remove_dir_all(&d);
}

/// A pcap record of one packet stamped now.
fn packet_now(i: u32) -> Vec<u8> {
    let ns = linerate::time::wall_ns();
    let mut w = PcapWriter::new(Vec::new(), LinkType::ETHERNET, 65535).unwrap();
    let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 8, 0];
    f.extend_from_slice(&[0x45, 0, 0, 46, 0, 0, 0, 0, 64, 17, 0, 0]);
    f.extend_from_slice(&[10, 0, 0, 1, 198, 18, 0, 2, 4, 0, 0, 9, 0, 26, 0, 0]);
    f.extend_from_slice(&i.to_be_bytes());
    f.resize(60, 0);
    w.write_packet(ns, &f, 60).unwrap();
    w.into_inner()[24..].to_vec()
}

#[test]
fn rotate_seconds_closes_an_idle_writers_file() {
    if !have_tcpdump() {
        return;
    }
    let d = tmp("rotate-idle");
    let out = d.join("rec");
    let fifo = d.join("fifo");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    // No sync for a minute: an index on disk is the one written when the file closed. (A
    // failed assertion drops the FIFO's writer: the recorder then ends by itself.)
    let child = Command::new(BIN)
        .args(["record", "-q", "--sync-every", "60", "-G", "1", "-i"])
        .arg(format!("pcap:{}", fifo.display()))
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut w = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
    let head = PcapWriter::new(Vec::new(), LinkType::ETHERNET, 65535)
        .unwrap()
        .into_inner();
    w.write_all(&head).unwrap();
    for i in 0..10 {
        w.write_all(&packet_now(i)).unwrap();
    }
    w.flush().unwrap();
    // Nothing more comes: the file closes when its second has passed, indexed whole.
    wait_for(
        || {
            out.exists()
                && captures(&out)
                    .first()
                    .is_some_and(|f| FileIndex::load(f).is_ok_and(|i| i.packets() == 10))
        },
        "the idle writer's file closes",
    );
    std::thread::sleep(Duration::from_millis(1500));
    // An idle window leaves no file behind.
    assert_eq!(captures(&out).len(), 1);
    for i in 10..15 {
        w.write_all(&packet_now(i)).unwrap();
    }
    drop(w);
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{o:?}");
    let files = captures(&out);
    assert_eq!(files.len(), 2);
    assert_eq!(tcpdump_lines(&files[0], None).len(), 10);
    assert_eq!(tcpdump_lines(&files[1], None).len(), 5);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn sizes_take_terabytes() {
    let d = tmp("tb");
    let input = d.join("in.pcap");
    std::fs::write(&input, traffic(100)).unwrap();
    let out = d.join("rec");
    let o = record(&[
        "-i",
        &format!("pcap:{}", input.display()),
        out.to_str().unwrap(),
        "--file-size",
        "1TiB",
        "--budget",
        "2.5TB",
    ]);
    assert!(o.status.success(), "{o:?}");
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("at most 1'099'511'627'776 bytes, budget 2'500'000'000'000 bytes"),
        "{text}"
    );
    assert!(text.contains("written 100"), "{text}");
    let _ = std::fs::remove_dir_all(&d);
}

/// Starts a recorder reading a FIFO; returns it and the FIFO's writer.
fn recorder_on_fifo(d: &Path, out: &Path) -> (std::process::Child, std::fs::File) {
    let fifo = d.join("fifo");
    let _ = std::fs::remove_file(&fifo);
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let child = Command::new(BIN)
        .args(["record", "-q", "--sync-every", "100ms", "-i"])
        .arg(format!("pcap:{}", fifo.display()))
        .arg(out)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let w = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
    (child, w)
}

fn wait_for(mut ok: impl FnMut() -> bool, what: &str) {
    let t = Instant::now();
    while !ok() {
        assert!(t.elapsed() < Duration::from_secs(20), "timed out: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn sigkill_then_restart_repairs_and_second_recorder_is_refused() {
    if !have_tcpdump() {
        return;
    }
    let d = tmp("kill");
    let out = d.join("rec");
    let (mut child, mut w) = recorder_on_fifo(&d, &out);
    let data = traffic(5000);
    w.write_all(&data).unwrap();
    w.flush().unwrap();
    // Some of it reached the open file (its index too, at the sync).
    wait_for(
        || {
            out.exists()
                && captures(&out)
                    .first()
                    .is_some_and(|f| std::fs::metadata(f).map_or(0, |m| m.len()) > 100_000)
        },
        "the open file grows",
    );
    // While it records, the open file's index (its last sync's) loads: queries see its data.
    wait_for(
        || {
            captures(&out)
                .first()
                .is_some_and(|f| FileIndex::load(f).is_ok_and(|i| i.packets() > 0))
        },
        "the open file's index",
    );
    // A second recorder on the same directory is refused, naming the first.
    let empty = d.join("empty.pcap");
    std::fs::write(&empty, &data[..24]).unwrap();
    let o = record(&[
        "-i",
        &format!("pcap:{}", empty.display()),
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains(&format!("pid {}", child.id())), "{err}");
    child.kill().unwrap();
    let _ = child.wait();
    drop(w);
    // The crash cut the file mid-record: half a record more than its last index says.
    let f = captures(&out).pop().unwrap();
    let len = std::fs::metadata(&f).unwrap().len();
    let mut h = std::fs::OpenOptions::new().append(true).open(&f).unwrap();
    h.write_all(&data[24..24 + 40]).unwrap();
    drop(h);
    // The next start repairs it.
    let o = record(&[
        "-i",
        &format!("pcap:{}", empty.display()),
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("repaired"), "{err}");
    assert!(std::fs::metadata(&f).unwrap().len() <= len);
    let lines = tcpdump_lines(&f, None);
    let idx = FileIndex::load(&f).unwrap();
    assert_eq!(idx.packets(), lines.len() as u64);
    let _ = std::fs::remove_dir_all(&d);
}

// ---- the index is a superset of tcpdump's answers ------------------------------------------

/// A file's packets: (time, bytes), in order.
type Packets = Vec<(u64, Vec<u8>)>;

/// Packets of a file, and an index with a block per packet.
fn per_packet_index(file: &Path) -> Option<(Packets, FileIndex)> {
    let f = std::fs::File::open(file).ok()?;
    let mut r = PcapReader::new(f, "x").ok()?;
    let mut w = IndexWriter::with_blocks(r.link_type(), 1, 1);
    let mut pkts = Vec::new();
    while let Ok(Some(rec)) = r.next_packet() {
        pkts.push((rec.ts, rec.data.to_vec()));
        let (off, ts, link) = (rec.offset, rec.ts, rec.link);
        let data = pkts.last().map(|p| p.1.clone()).unwrap_or_default();
        w.on_packet_link(off, 1, ts, &data, link);
    }
    Some((pkts, w.finish()))
}

/// The packets of `file` tcpdump's `filter` matches, as indexes into `pkts`.
fn tcpdump_matches(file: &Path, filter: &str, pkts: &[(u64, Vec<u8>)], tmp: &Path) -> Vec<usize> {
    let out = tmp.join("m.pcap");
    let _ = std::fs::remove_file(&out);
    let o = Command::new("tcpdump")
        .args(["-Z", "root", "-r"])
        .arg(file)
        .arg("-w")
        .arg(&out)
        .arg(filter)
        .output()
        .unwrap();
    let Ok(f) = std::fs::File::open(&out) else {
        assert!(!o.status.success() || pkts.is_empty(), "{filter}: {o:?}");
        return Vec::new();
    };
    let mut by: HashMap<(u64, Vec<u8>), Vec<usize>> = HashMap::new();
    for (i, p) in pkts.iter().enumerate().rev() {
        by.entry(p.clone()).or_default().push(i);
    }
    let mut r = PcapReader::new(f, "m").unwrap();
    let mut v = Vec::new();
    while let Ok(Some(rec)) = r.next_packet() {
        // tcpdump writes microseconds: match on the bytes and the time to the microsecond.
        let key = pkts
            .iter()
            .find(|p| p.1 == rec.data && p.0 / 1000 == rec.ts / 1000)
            .map(|p| (p.0, p.1.clone()));
        if let Some(k) = key {
            if let Some(list) = by.get_mut(&k) {
                if let Some(i) = list.pop() {
                    v.push(i);
                }
            }
        }
    }
    v
}

#[test]
fn index_is_a_superset_of_tcpdump_filters() {
    if !have_tcpdump() {
        return;
    }
    let Some(corpus) = linerate_test_support::corpus() else {
        linerate_test_support::skip("no capture corpus");
        return;
    };
    let dir = corpus;
    let names = [
        "802.1ad_QinQ.pcap",
        "LINKTYPE_IPV6.pcap",
        "LINKTYPE_RAW_ipv4.pcap",
        "LINKTYPE_RAW_ipv6.pcap",
        "loopback.pcap",
        "mpls-ldp-hello.pcap",
        "mpls-traceroute.pcap",
        "pppoe.pcap",
        "pppoes.pcap",
        "ipv6-routing-header.pcap",
        "ipv6-srh-ext-header.pcap",
        "ipv6_mobility_1.pcap",
        "ip6_frag_asan.pcap",
        "bigtcp-ipv6-hbh.pcap",
        "arp-too-long-tha.pcap",
        "cve2015-0261-ipv6.pcap",
    ];
    let t = tmp("superset");
    let mut checked = 0;
    for name in names {
        let file = dir.join(name);
        let Some((pkts, idx)) = per_packet_index(&file) else {
            continue;
        };
        let mut filters: Vec<(String, Key)> = Vec::new();
        for (a, _) in idx.ip4_keys().take(6) {
            let s = std::net::Ipv4Addr::from(a).to_string();
            filters.push((format!("host {s}"), Key::Ip4(a)));
        }
        for (a, _) in idx.ip6_keys().take(6) {
            let s = std::net::Ipv6Addr::from(a).to_string();
            filters.push((format!("host {s}"), Key::Ip6(a)));
        }
        for p in [53u16, 80, 179, 443, 646, 33434, 2000] {
            filters.push((format!("port {p}"), Key::Port(p)));
        }
        for n in [1u8, 6, 17, 43, 44, 58, 132, 135] {
            filters.push((format!("ip proto {n} or ip6 proto {n}"), Key::Proto(n)));
        }
        for v in [1u16, 100, 200, 1000] {
            filters.push((format!("vlan {v}"), Key::Vlan(v)));
        }
        filters.push(("vlan".into(), Key::Tagged));
        filters.push(("ip6".into(), Key::EtherType(0x86dd)));
        filters.push(("ip".into(), Key::EtherType(0x0800)));
        filters.push(("arp".into(), Key::EtherType(0x0806)));
        let opaque = idx.opaque();
        for (filter, key) in &filters {
            let set = idx.lookup(key).or(&opaque);
            for i in tcpdump_matches(&file, filter, &pkts, &t) {
                assert!(
                    set.contains(i),
                    "{name}: packet {i} matches `{filter}` but its block does not post {key:?}"
                );
                checked += 1;
            }
        }
    }
    eprintln!("{checked} matches checked");
    assert!(checked > 100, "only {checked} matches checked");
    let _ = std::fs::remove_dir_all(&t);
}

/// A small tmpfs, unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn new(dir: &Path, size: &str) -> Option<Tmpfs> {
        std::fs::create_dir_all(dir).unwrap();
        let ok = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0755"),
                "tmpfs",
            ])
            .arg(dir)
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| Tmpfs(dir.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

fn summary(o: &std::process::Output) -> serde_json::Value {
    let s = String::from_utf8_lossy(&o.stdout);
    serde_json::from_str(s.lines().last().unwrap_or("{}")).unwrap()
}

#[test]
fn disk_full_deletes_the_oldest_then_drops_as_disk_full() {
    if !have_tcpdump() {
        return;
    }
    if !linerate::os::is_root() {
        linerate_test_support::skip("mounting a tmpfs needs root");
        return;
    }
    let d = tmp("enospc");
    let input = d.join("in.pcap");
    std::fs::write(&input, traffic(40_000)).unwrap();
    // 1 MiB of disk, 3 MB of packets.
    let Some(fs) = Tmpfs::new(&d.join("fs"), "1m") else {
        linerate_test_support::skip("cannot mount a tmpfs");
        return;
    };
    // Files smaller than the disk: a full disk deletes the oldest and goes on.
    let o = record(&[
        "-i",
        &format!("pcap:{}", input.display()),
        fs.0.join("a").to_str().unwrap(),
        "--file-size",
        "200kB",
        "--json",
        "-q",
    ]);
    assert!(o.status.success(), "{o:?}");
    let s = summary(&o);
    assert_eq!(s["received"], 40_000, "{s}");
    let (w, full) = (
        s["written"].as_u64().unwrap(),
        s["dropped"]["disk_full"].as_u64().unwrap(),
    );
    assert_eq!(w + full, 40_000, "{s}");
    assert!(s["files_deleted"].as_u64().unwrap() > 0, "{s}");
    assert!(w > 30_000, "{s}");
    std::fs::remove_dir_all(fs.0.join("a")).unwrap();
    // A file larger than the disk: nothing to delete, packets counted dropped (disk_full),
    // reported, never a silent stop.
    let o = record(&[
        "-i",
        &format!("pcap:{}", input.display()),
        fs.0.join("b").to_str().unwrap(),
        "--file-size",
        "100MB",
        "--json",
        "-q",
    ]);
    assert!(o.status.success(), "{o:?}");
    let s = summary(&o);
    let (w, full) = (
        s["written"].as_u64().unwrap(),
        s["dropped"]["disk_full"].as_u64().unwrap(),
    );
    assert_eq!(s["received"], 40_000, "{s}");
    assert_eq!(w + full, 40_000, "{s}");
    assert!(full > 20_000 && w > 0, "{s}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("disk_full"), "{err}");
    // What was written reads whole and is indexed... or repaired at the next start.
    let f = captures(&fs.0.join("b")).pop().unwrap();
    let idx = FileIndex::load(&f)
        .or_else(|_| FileIndex::build(&f))
        .unwrap();
    assert!(idx.packets() <= w);
    std::fs::remove_dir_all(fs.0.join("b")).unwrap();
    // --keep-free 50: the oldest files go to keep half of the file system free.
    let o = record(&[
        "-i",
        &format!("pcap:{}", input.display()),
        fs.0.join("c").to_str().unwrap(),
        "--file-size",
        "100kB",
        "--keep-free",
        "50",
        "--json",
        "-q",
    ]);
    assert!(o.status.success(), "{o:?}");
    let s = summary(&o);
    assert_eq!(s["written"], 40_000, "{s}");
    let kept: u64 = std::fs::read_dir(fs.0.join("c"))
        .unwrap()
        .flatten()
        .map(|e| e.metadata().unwrap().len())
        .sum();
    assert!(kept <= 512 * 1024 + 110_000, "{kept} bytes kept");
    let last = tcpdump_lines(captures(&fs.0.join("c")).last().unwrap(), None);
    assert_eq!(last.last(), tcpdump_lines(&input, None).last());
    drop(fs);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn afpacket_fanout_writers_record_a_veth() {
    use linerate_test_support::netns::{require_priv, send_raw, NetnsPair, Side};
    if !require_priv() || !have_tcpdump() {
        return;
    }
    let pair = NetnsPair::new().expect("netns pair");
    pair.no_ipv6().expect("ipv6 off");
    let d = tmp("veth");
    let out = d.join("rec");
    let child = Command::new("ip")
        .args(["netns", "exec", &pair.b, BIN, "record", "-q", "--json"])
        .args([
            "-t",
            "30s",
            "--threads",
            "2",
            "-i",
            &format!("afpacket:{}", pair.if_b),
        ])
        .arg(&out)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The ports are open, bound and in their fanout group once the directory is locked (record
    // opens them first): frames sent from then on reach a socket, queued until its writer reads.
    wait_for(|| out.join(".lock").exists(), "the recorder starts");
    // Frames the kernel drops on the link before any socket sees them (veth into a full
    // receive backlog, netdev_max_backlog, when softirqs lag on a loaded machine): counted by
    // the interfaces, read before and after.
    let link_drops = || -> u64 {
        [(Side::A, &pair.if_a), (Side::B, &pair.if_b)]
            .into_iter()
            .map(|(side, ifname)| {
                let j = pair
                    .ip_in(side, &["-s", "-j", "link", "show", "dev", ifname])
                    .expect("ip -s link");
                let v: serde_json::Value = serde_json::from_str(&j).expect("ip -j");
                let st = &v[0]["stats64"];
                st["rx"]["dropped"].as_u64().unwrap_or(0)
                    + st["tx"]["dropped"].as_u64().unwrap_or(0)
            })
            .sum()
    };
    let drops0 = link_drops();
    // 2000 frames of 64 flows to another host's MAC (vB drops them: no replies on the link).
    let mut frames = Vec::new();
    for i in 0..2000u32 {
        let mut f = vec![2, 0, 0, 0, 0, 0x99];
        f.extend_from_slice(&pair.mac_a);
        f.extend_from_slice(&[8, 0, 0x45, 0, 0, 46, 0, 0, 0, 0, 64, 17, 0, 0]);
        f.extend_from_slice(&[10, 9, 0, (i % 64) as u8, 198, 18, 0, 2]);
        f.extend_from_slice(&(4000 + (i % 64) as u16).to_be_bytes());
        f.extend_from_slice(&[0, 9, 0, 26, 0, 0]);
        f.extend_from_slice(&i.to_be_bytes());
        f.resize(60, 0);
        frames.push(f);
    }
    let if_a = pair.if_a.clone();
    pair.run_in(Side::A, || send_raw(&if_a, &frames));
    std::thread::sleep(Duration::from_millis(500));
    linerate::os::interrupt(child.id()).unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{o:?}");
    let s = summary(&o);
    // Every frame written, or dropped with its reason: by the link, or by the recorder's
    // sockets (kernel: a full ring) or its disk.
    let link = link_drops() - drops0;
    let written = s["written"].as_u64().unwrap();
    let dropped =
        s["dropped"]["kernel"].as_u64().unwrap() + s["dropped"]["disk_full"].as_u64().unwrap();
    assert_eq!(written + dropped + link, 2000, "link drops {link}: {s}");
    assert_eq!(s["dropped"]["disk_full"], 0, "{s}");
    let files = captures(&out);
    let mut lines = 0;
    let mut writers = std::collections::BTreeSet::new();
    for f in &files {
        let name = f.file_name().unwrap().to_str().unwrap().to_string();
        writers.insert(name[24..].to_string());
        lines += tcpdump_lines(f, Some("udp and dst port 9")).len();
        let idx = FileIndex::load(f).unwrap();
        assert!(!idx.lookup(&Key::Port(9)).is_empty());
    }
    assert_eq!(lines as u64, written);
    assert_eq!(writers.len(), 2, "{writers:?}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn xdp_writers_record_every_queue_of_a_veth() {
    use linerate_test_support::netns::{
        require_priv, send_raw, udp_frame, udp_seq, xdp_queue_packets, NetnsPair, Side,
    };
    if !require_priv() || !have_tcpdump() {
        return;
    }
    const N: u32 = 3200;
    let pair = NetnsPair::with_queues(4).expect("netns pair");
    pair.no_ipv6().expect("ipv6 off");
    let d = tmp("xdp");
    let out = d.join("rec");
    let child = Command::new("ip")
        .args([
            "netns", "exec", &pair.b, BIN, "record", "-q", "--json", "-t", "30s",
        ])
        .args(["--format", "pcapng", "-i", &format!("xdp:{}", pair.if_b)])
        .arg(&out)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A failed assertion below must not leave the recorder running: it is stopped by its PID.
    struct Stop(u32);
    impl Drop for Stop {
        fn drop(&mut self) {
            let _ = linerate::os::interrupt(self.0);
        }
    }
    let stop = Stop(child.id());
    wait_for(|| out.join(".lock").exists(), "the recorder starts");
    std::thread::sleep(Duration::from_millis(500));
    // 64 flows to vB (through the qdisc: the flow hash spreads them over the 4 queues).
    let frames: Vec<Vec<u8>> = (0..N)
        .map(|s| udp_frame(pair.mac_b, pair.mac_a, (s % 64) as u16, s))
        .collect();
    let if_a = pair.if_a.clone();
    pair.run_in(Side::A, || send_raw(&if_a, &frames));
    std::thread::sleep(Duration::from_millis(800));
    let per_queue = xdp_queue_packets(&pair, Side::B, &pair.if_b);
    drop(stop);
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{o:?}");
    let s = summary(&o);
    // Every frame sent is written or counted dropped.
    let written = s["written"].as_u64().unwrap();
    let dropped =
        s["dropped"]["kernel"].as_u64().unwrap() + s["dropped"]["disk_full"].as_u64().unwrap();
    assert!(written + dropped >= u64::from(N), "{s}");
    assert!(
        per_queue.len() == 4 && per_queue.iter().all(|&q| q > 0),
        "traffic on every queue: {per_queue:?}"
    );
    // One writer per queue, each with its own files; tcpdump reads them whole.
    let files = captures(&out);
    let writers: std::collections::BTreeSet<String> = files
        .iter()
        .map(|f| f.file_name().unwrap().to_str().unwrap()[24..].to_string())
        .collect();
    assert_eq!(writers.len(), 4, "{writers:?}");
    let mut seqs = std::collections::HashSet::new();
    let (mut lines, mut ifrecv, mut usrdeliv) = (0, 0, 0);
    for f in &files {
        lines += tcpdump_lines(f, Some("udp and dst port 9")).len();
        // Each file's statistics: what its queue's writer saw while it was open.
        for (_, isb) in ng_blocks(&std::fs::read(f).unwrap())
            .iter()
            .filter(|b| b.0 == 5)
        {
            ifrecv += ng_opt(isb, 12, 4).unwrap();
            usrdeliv += ng_opt(isb, 12, 8).unwrap();
        }
        let mut r = PcapReader::new(std::fs::File::open(f).unwrap(), "rec").unwrap();
        while let Ok(Some(p)) = r.next_packet() {
            if let Some(q) = udp_seq(p.data) {
                assert!(seqs.insert(q), "frame {q} written twice");
                assert_eq!(p.data, &frames[q as usize][..], "frame {q}");
            }
        }
    }
    assert_eq!(lines, seqs.len());
    assert_eq!(usrdeliv, written, "{s}");
    assert_eq!(ifrecv, written + dropped, "{s}");
    assert_eq!(
        seqs.len() as u64 + s["dropped"]["kernel"].as_u64().unwrap(),
        u64::from(N),
        "{s}"
    );
    let _ = std::fs::remove_dir_all(&d);
}

/// Frames in every encapsulation the index looks through (Ethernet).
fn hostile_frames() -> Vec<Vec<u8>> {
    fn eth(t: u16, p: &[u8]) -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];
        f.extend_from_slice(&t.to_be_bytes());
        f.extend_from_slice(p);
        f
    }
    fn ip4(src: u8, proto: u8, frag: u16, l4: &[u8]) -> Vec<u8> {
        let len = (20 + l4.len()) as u16;
        let mut h = vec![0x45, 0];
        h.extend_from_slice(&len.to_be_bytes());
        h.extend_from_slice(&[0, 1]);
        h.extend_from_slice(&frag.to_be_bytes());
        h.extend_from_slice(&[64, proto, 0, 0, 10, 0, 0, src, 192, 0, 2, 1]);
        h.extend_from_slice(l4);
        h
    }
    fn ip6(src: u8, nh: u8, rest: &[u8]) -> Vec<u8> {
        let mut h = vec![0x60, 0, 0, 0];
        h.extend_from_slice(&(rest.len() as u16).to_be_bytes());
        h.extend_from_slice(&[nh, 64]);
        h.extend_from_slice(&[0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, src]);
        h.extend_from_slice(&[0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff]);
        h.extend_from_slice(rest);
        h
    }
    fn l4(sp: u16, dp: u16) -> Vec<u8> {
        let mut p = sp.to_be_bytes().to_vec();
        p.extend_from_slice(&dp.to_be_bytes());
        p.extend_from_slice(&[0, 28, 0, 0]);
        p.resize(28, 0);
        p
    }
    fn tags(f: &[u8], t: &[(u16, u16)]) -> Vec<u8> {
        let mut o = f[..12].to_vec();
        for (tpid, tci) in t {
            o.extend_from_slice(&tpid.to_be_bytes());
            o.extend_from_slice(&tci.to_be_bytes());
        }
        o.extend_from_slice(&f[12..]);
        o
    }
    let mut v = Vec::new();
    let udp = eth(0x0800, &ip4(1, 17, 0, &l4(53, 1111)));
    v.push(udp.clone());
    v.push(tags(&udp, &[(0x8100, 100)]));
    v.push(tags(&udp, &[(0x88a8, 200), (0x8100, 300)]));
    // IPv4 fragments: the first with ports, a later one without.
    v.push(eth(0x0800, &ip4(2, 6, 0x2000, &l4(80, 2222))));
    v.push(eth(0x0800, &ip4(2, 6, 0x0004, &l4(80, 2222))));
    // MPLS, two labels, then IPv4/TCP.
    let mut m = vec![0, 1, 0x20, 64, 0, 2, 0x21, 64];
    m.extend_from_slice(&ip4(3, 6, 0, &l4(179, 3333)));
    v.push(eth(0x8847, &m));
    // PPPoE session, IPv4 and IPv6.
    let p4 = ip4(4, 17, 0, &l4(53, 4444));
    let mut pp = vec![0x11, 0, 0, 1];
    pp.extend_from_slice(&((p4.len() + 2) as u16).to_be_bytes());
    pp.extend_from_slice(&[0, 0x21]);
    pp.extend_from_slice(&p4);
    v.push(eth(0x8864, &pp));
    let p6 = ip6(5, 17, &l4(443, 5555));
    let mut pp = vec![0x11, 0, 0, 1];
    pp.extend_from_slice(&((p6.len() + 2) as u16).to_be_bytes());
    pp.extend_from_slice(&[0, 0x57]);
    pp.extend_from_slice(&p6);
    v.push(eth(0x8864, &pp));
    // IPv6: hop-by-hop then a first fragment then TCP; a later fragment; routing header.
    let mut r = vec![44, 0, 1, 4, 0, 0, 0, 0];
    r.extend_from_slice(&[6, 0, 0, 1, 0, 0, 0, 7]);
    r.extend_from_slice(&l4(22, 6666));
    v.push(eth(0x86dd, &ip6(6, 0, &r)));
    let mut r = vec![6, 0, 0, 0x50, 0, 0, 0, 7];
    r.extend_from_slice(&l4(22, 6666));
    v.push(eth(0x86dd, &ip6(6, 44, &r)));
    let mut r = vec![17, 2, 0, 1, 0, 0, 0, 0];
    r.extend_from_slice(&[0; 16]);
    r.extend_from_slice(&l4(53, 7777));
    v.push(tags(&eth(0x86dd, &ip6(7, 43, &r)), &[(0x8100, 100)]));
    // ARP, plain and tagged.
    let mut a = vec![0, 1, 8, 0, 6, 4, 0, 1, 2, 0, 0, 0, 0, 1, 10, 0, 0, 8];
    a.extend_from_slice(&[0, 0, 0, 0, 0, 0, 10, 0, 0, 9]);
    v.push(eth(0x0806, &a));
    v.push(tags(&eth(0x0806, &a), &[(0x8100, 300)]));
    v
}

#[test]
fn index_is_a_superset_on_every_encapsulation() {
    if !have_tcpdump() {
        return;
    }
    let t = tmp("hostile");
    let file = t.join("h.pcap");
    let mut w = PcapWriter::new(Vec::new(), LinkType::ETHERNET, 65535).unwrap();
    for (i, f) in hostile_frames().iter().enumerate() {
        w.write_packet(
            1_700_000_000_000_000_000 + i as u64 * 1000,
            f,
            f.len() as u32,
        )
        .unwrap();
    }
    std::fs::write(&file, w.into_inner()).unwrap();
    let (pkts, idx) = per_packet_index(&file).unwrap();
    let ip4 = |d: u8| Key::Ip4([10, 0, 0, d]);
    let ip6 = |d: u8| Key::Ip6([0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, d]);
    let filters: Vec<(&str, Key)> = vec![
        ("host 10.0.0.1", ip4(1)),
        ("vlan and host 10.0.0.1", ip4(1)),
        ("vlan and vlan and host 10.0.0.1", ip4(1)),
        ("vlan 300", Key::Vlan(300)),
        ("vlan and vlan 300", Key::Vlan(300)),
        ("vlan", Key::Tagged),
        ("port 2222", Key::Port(2222)),
        ("ip proto 6", Key::Proto(6)),
        ("mpls and mpls and host 10.0.0.3", ip4(3)),
        ("mpls and mpls and port 179", Key::Port(179)),
        ("pppoes and host 10.0.0.4", ip4(4)),
        ("pppoes and udp port 53", Key::Port(53)),
        ("pppoes and host 2001:db8::5", ip6(5)),
        ("host 2001:db8::6", ip6(6)),
        ("ip6 proto 44", Key::Proto(44)),
        ("ip6 and tcp", Key::Proto(6)),
        ("ip6 protochain 6", Key::Proto(6)),
        ("vlan and host 2001:db8::7", ip6(7)),
        ("vlan and ip6 proto 43", Key::Proto(43)),
        ("host 10.0.0.8", ip4(8)),
        ("host 10.0.0.9", ip4(9)),
        ("vlan and arp host 10.0.0.9", ip4(9)),
        ("udp port 53", Key::Port(53)),
        ("ip6", Key::EtherType(0x86dd)),
    ];
    let opaque = idx.opaque();
    let mut checked = 0;
    for (filter, key) in &filters {
        let set = idx.lookup(key).or(&opaque);
        let m = tcpdump_matches(&file, filter, &pkts, &t);
        assert!(
            !m.is_empty(),
            "`{filter}` matches nothing: the test checks nothing"
        );
        for i in m {
            assert!(
                set.contains(i),
                "packet {i} matches `{filter}`, not posted: {key:?}"
            );
            checked += 1;
        }
    }
    assert!(opaque.is_empty());
    assert!(checked >= filters.len());
    let _ = std::fs::remove_dir_all(&t);
}

#[test]
fn count_stops_at_exactly_count_packets() {
    if !have_tcpdump() {
        return;
    }
    let d = tmp("count");
    let (a, b) = (d.join("a.pcap"), d.join("b.pcap"));
    std::fs::write(&a, traffic(3000)).unwrap();
    std::fs::write(&b, traffic(3000)).unwrap();
    let out = d.join("rec");
    let o = record(&[
        "-i",
        &format!("pcap:{},pcap:{}", a.display(), b.display()),
        out.to_str().unwrap(),
        "-c",
        "5000",
        "--json",
        "-q",
    ]);
    assert!(o.status.success(), "{o:?}");
    assert_eq!(summary(&o)["written"], 5000);
    let lines: usize = captures(&out)
        .iter()
        .map(|f| tcpdump_lines(f, None).len())
        .sum();
    assert_eq!(lines, 5000);
    // Two inputs of 3000: two writers, each its own files.
    assert!(captures(&out)
        .iter()
        .any(|f| f.to_str().unwrap().ends_with("-w1.pcap")));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn metrics_textfile_has_the_recorders_counters() {
    let d = tmp("metrics");
    let input = d.join("in.pcap");
    std::fs::write(&input, traffic(1000)).unwrap();
    let prom = d.join("record.prom");
    let o = record(&[
        "-i",
        &format!("pcap:{}", input.display()),
        d.join("rec").to_str().unwrap(),
        "-q",
        "--metrics-textfile",
        prom.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{o:?}");
    let text = std::fs::read_to_string(&prom).unwrap();
    for want in [
        "linerate_record_received_packets_total 1000",
        "linerate_record_written_packets_total 1000",
        "linerate_record_dropped_packets_total{reason=\"disk_full\"} 0",
        "linerate_record_files_total 1",
    ] {
        assert!(text.contains(want), "{want} not in:\n{text}");
    }
    let _ = std::fs::remove_dir_all(&d);
}

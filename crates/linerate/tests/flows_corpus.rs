//! The flow monitor on every capture of the tcpdump test corpus (many deliberately malformed):
//! no panic, no hang, and every packet accounted for: each one read is either counted in a flow
//! or counted as not-a-flow under a named reason, and the records carry exactly the packets the
//! table counted. Run with one and with two threads.
//!
//! The corpus is `$LINERATE_CORPUS` or `tests/corpus/tcpdump-tests` in the repository; without it
//! the test is skipped, a failure under `LINERATE_REQUIRE_PRIV=1`.
#![deny(unsafe_code)]

use linerate::apps::flow::key::NotFlow;
use linerate::apps::flow::record::FlowRecord;
use linerate::apps::flow::table::TableConfig;
use linerate::apps::flow::{self, FlowOptions};
use linerate::port::pcap::PcapPort;
use linerate::port::PortOptions;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

fn corpus() -> Option<PathBuf> {
    linerate_test_support::corpus()
}

#[test]
fn every_corpus_file_without_panic_and_every_packet_accounted() {
    let Some(dir) = corpus() else { return };
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    let stop = AtomicBool::new(false);
    let mut totals = [0u64; NotFlow::COUNT];
    let (mut pkts, mut flows, mut opened) = (0u64, 0u64, 0usize);
    for (k, f) in files.iter().enumerate() {
        let path = f.to_str().unwrap();
        // Every file with one thread; every seventh also with two.
        let threads: &[usize] = if k % 7 == 0 { &[1, 2] } else { &[1] };
        for &nt in threads {
            let popts = PortOptions {
                frames: 1024,
                ..Default::default()
            };
            let Ok(mut port) = PcapPort::open(path, &popts) else {
                continue;
            };
            opened += 1;
            let opts = FlowOptions {
                table: TableConfig {
                    max_flows: 512,
                    status_ns: 0,
                    ..Default::default()
                },
                threads: nt,
                ring_size: 256,
                ..Default::default()
            };
            let mut recs: Vec<FlowRecord> = Vec::new();
            let mut sink = |r: &[FlowRecord]| recs.extend_from_slice(r);
            let t0 = Instant::now();
            let rep = flow::run(&mut port, &opts, &stop, &mut sink);
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "{path}: {:?}",
                t0.elapsed()
            );
            assert_eq!(
                rep.table.packets + rep.not_flow_total(),
                rep.packets,
                "{path} ({nt} threads): packets in flows + not in flows = packets read"
            );
            let in_recs: u64 = recs.iter().map(|r| r.src_pkts + r.dst_pkts).sum();
            assert_eq!(
                in_recs, rep.table.packets,
                "{path}: records carry every counted packet"
            );
            assert_eq!(
                recs.len() as u64,
                rep.table.records.iter().sum::<u64>(),
                "{path}"
            );
            assert_eq!(
                rep.table.flows,
                rep.table.records.iter().sum::<u64>(),
                "{path}"
            );
            if nt == 1 {
                pkts += rep.packets;
                flows += rep.table.flows;
                for (t, n) in totals.iter_mut().zip(rep.not_flow) {
                    *t += n;
                }
            }
        }
    }
    let nf: Vec<String> = NotFlow::ALL
        .iter()
        .map(|n| format!("{} {}", n.name(), totals[*n as usize]))
        .collect();
    println!(
        "{} files ({opened} runs): {pkts} packets, {flows} flows; not in a flow: {}",
        files.len(),
        nf.join(", ")
    );
    assert!(pkts > 0);
}

/// Records as sortable text (the order records come out in differs between runs with threads).
fn sorted(recs: &[FlowRecord]) -> Vec<String> {
    let mut v: Vec<String> = recs.iter().map(|r| format!("{r:?}")).collect();
    v.sort();
    v
}

/// A capture file split between 2 and 3 threads (each reading its own groups of records, flows
/// counted in file order by the thread that owns them) gives exactly the records, counters and
/// error of one thread, on every file of the corpus: fragments, both directions of a flow,
/// TCP ends and idle expiry all see their packets in file order.
#[test]
fn threads_on_a_split_file_give_the_records_of_one_thread() {
    use linerate::apps::flow::threads::{run_input, FlowInput};
    let Some(dir) = corpus() else { return };
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    let stop = AtomicBool::new(false);
    let popts = PortOptions::default();
    let opts = FlowOptions {
        table: TableConfig {
            // Short timeouts, so that idle and linger expiry happen inside the captures.
            idle_ns: 2_000_000_000,
            linger_ns: 500_000_000,
            status_ns: 3_000_000_000,
            ..Default::default()
        },
        ..Default::default()
    };
    let run = |path: &str, nt: usize| {
        let input = FlowInput::open(path, &popts, nt).ok()?;
        let mut recs: Vec<FlowRecord> = Vec::new();
        let mut sink = |r: &[FlowRecord]| recs.extend_from_slice(r);
        let rep = run_input(input, &opts, &stop, &mut sink);
        let err = rep.error.as_ref().map(|e| e.to_string());
        Some((
            rep.packets,
            rep.not_flow,
            rep.table.flows,
            err,
            sorted(&recs),
        ))
    };
    let (mut compared, mut packets) = (0, 0u64);
    for f in &files {
        let path = f.to_str().unwrap();
        let Some(one) = run(path, 1) else { continue };
        for nt in [2, 3] {
            let many = run(path, nt).expect("opens with threads as with one");
            assert_eq!(one.0, many.0, "{path}: packets, {nt} threads");
            assert_eq!(one.1, many.1, "{path}: not in a flow, {nt} threads");
            assert_eq!(one.2, many.2, "{path}: flows, {nt} threads");
            assert_eq!(one.3, many.3, "{path}: error, {nt} threads");
            assert!(one.4 == many.4, "{path}: records differ with {nt} threads");
        }
        compared += 1;
        packets += one.0;
    }
    println!("{compared} files, {packets} packets: the same records with 1, 2 and 3 threads");
    assert!(compared > 100 && packets > 0);
}

/// Runs the flow monitor on `path` with `nt` threads, the file split in pieces of `piece` bytes:
/// packets, not-a-flow counters, flows, the error's text, and the records (sorted).
type Outcome = (u64, [u64; NotFlow::COUNT], u64, Option<String>, Vec<String>);

fn split_run(
    path: &str,
    nt: usize,
    piece: usize,
    map: bool,
    opts: &FlowOptions,
) -> Option<Outcome> {
    use linerate::apps::flow::threads::{run_input, FlowInput};
    let stop = AtomicBool::new(false);
    let input = FlowInput::open_split(path, &PortOptions::default(), nt, piece, map).ok()?;
    if input.threads() > 1 {
        let mapped = input.plan().contains("mapped read-only");
        match (map, mappable(path)) {
            (false, _) | (true, Some(false)) => {
                assert!(!mapped, "{path}: {}", input.plan())
            }
            (true, Some(true)) => assert!(mapped, "{path}: {}", input.plan()),
            // A file system this test does not know (FUSE, 9p, NFS...): either way.
            (true, None) => {}
        }
    }
    let mut recs: Vec<FlowRecord> = Vec::new();
    let mut sink = |r: &[FlowRecord]| recs.extend_from_slice(r);
    let rep = run_input(input, opts, &stop, &mut sink);
    let err = rep.error.as_ref().map(|e| e.to_string());
    Some((
        rep.packets,
        rep.not_flow,
        rep.table.flows,
        err,
        sorted(&recs),
    ))
}

/// Whether the flow monitor's threads may read `path` in place (the library's rule: a regular
/// file owned by us or root, writable by neither group nor others, on a local file system):
/// `None` where the file system is not one this test knows to be local, or to be remote.
fn mappable(path: &str) -> Option<bool> {
    use std::collections::HashMap;
    use std::os::unix::fs::MetadataExt;
    use std::sync::{Mutex, OnceLock};
    static FS: OnceLock<Mutex<HashMap<PathBuf, Option<bool>>>> = OnceLock::new();
    let meta = std::fs::metadata(path).ok()?;
    let ours = meta.uid() == 0 || meta.uid() == std::fs::metadata("/proc/self").ok()?.uid();
    if !meta.is_file() || !ours || meta.mode() & 0o022 != 0 {
        return Some(false);
    }
    let dir = std::path::Path::new(path).parent()?.to_path_buf();
    let mut known = FS.get_or_init(Default::default).lock().unwrap();
    *known.entry(dir.clone()).or_insert_with(|| {
        // coreutils' name of the directory's file system type.
        let out = std::process::Command::new("stat")
            .args(["-f", "-c", "%T"])
            .arg(&dir)
            .output()
            .ok()?;
        let name = String::from_utf8_lossy(&out.stdout).trim().to_string();
        const LOCAL: [&str; 6] = ["ext2/ext3", "tmpfs", "overlayfs", "xfs", "btrfs", "ramfs"];
        const REMOTE: [&str; 6] = ["fuseblk", "fuse", "nfs", "v9fs", "smb2", "cifs"];
        if LOCAL.contains(&name.as_str()) {
            Some(true)
        } else if REMOTE.contains(&name.as_str()) {
            Some(false)
        } else {
            None
        }
    })
}

fn short_timeouts() -> FlowOptions {
    FlowOptions {
        table: TableConfig {
            idle_ns: 2_000_000_000,
            linger_ns: 500_000_000,
            status_ns: 3_000_000_000,
            ..Default::default()
        },
        ..Default::default()
    }
}

/// The corpus files are mostly smaller than one piece of the file (128 KiB): split each in
/// small pieces instead (most records then straddle two pieces, many pieces hold no record
/// start, jumbo records span several, damaged records end the file in any piece), and compare
/// 2 and 3 threads with one.
#[test]
fn small_pieces_give_the_records_of_one_thread() {
    let Some(dir) = corpus() else { return };
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    let opts = short_timeouts();
    let (mut compared, mut errors) = (0, 0);
    for (k, f) in files.iter().enumerate() {
        let path = f.to_str().unwrap();
        let Some(one) = split_run(path, 1, 1 << 17, true, &opts) else {
            continue;
        };
        // Pieces smaller and larger than a record, varied over the files; the file read in
        // place (mapped) and copied with pread.
        let piece = [61, 700, 4000][k % 3];
        for (nt, map) in [(2, true), (3, true), (2, false), (3, false)] {
            let many =
                split_run(path, nt, piece, map, &opts).expect("opens with threads as with one");
            assert_eq!(
                one.0, many.0,
                "{path}: packets, {nt} threads, {piece} B pieces"
            );
            assert_eq!(
                one.1, many.1,
                "{path}: not in a flow, {nt} threads, {piece} B"
            );
            assert_eq!(
                one.2, many.2,
                "{path}: flows, {nt} threads, {piece} B pieces"
            );
            assert_eq!(
                one.3, many.3,
                "{path}: error, {nt} threads, {piece} B pieces"
            );
            assert!(
                one.4 == many.4,
                "{path}: records differ, {nt} threads, {piece} B"
            );
        }
        compared += 1;
        errors += one.3.is_some() as usize;
    }
    println!("{compared} files ({errors} ending in an error): the same with small pieces");
    assert!(compared > 100);
}

/// The largest corpus files cut short at several places (inside a record header, inside a
/// record's bytes, on a record boundary): every thread count counts the same records up to
/// the damage and reports the same error as one thread.
#[test]
fn truncated_files_split_like_one_thread() {
    let Some(dir) = corpus() else { return };
    let mut files: Vec<(u64, PathBuf)> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "pcap"))
        .filter_map(|p| Some((std::fs::metadata(&p).ok()?.len(), p)))
        .collect();
    files.sort();
    files.reverse();
    let tmp = std::env::temp_dir().join(format!("lr-flows-trunc-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    struct Rm(PathBuf);
    impl Drop for Rm {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let _rm = Rm(tmp.clone());
    let opts = short_timeouts();
    let mut cut = 0;
    for (len, f) in files.iter().take(4) {
        let bytes = std::fs::read(f).unwrap();
        for frac in [3u64, 5, 7, 11, 13] {
            let at = (len * (frac - 1) / frac) as usize;
            for at in [at, at + 5, at + 17] {
                let p = tmp.join(format!("cut-{at}.pcap"));
                std::fs::write(&p, &bytes[..at.min(bytes.len())]).unwrap();
                // 0644 whatever the umask: a file the threads may map.
                std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o644))
                    .unwrap();
                let path = p.to_str().unwrap();
                let one = split_run(path, 1, 1 << 17, true, &opts).expect("opens");
                for (nt, piece, map) in [
                    (2, 1000, true),
                    (3, 333, true),
                    (2, 1 << 17, true),
                    (2, 1000, false),
                    (3, 333, false),
                    (2, 1 << 17, false),
                ] {
                    let many = split_run(path, nt, piece, map, &opts).expect("opens");
                    let what = format!(
                        "{} cut at {at}, {nt} threads, {piece} B, mapped {map}",
                        f.display()
                    );
                    assert_eq!(one.0, many.0, "{what}: packets");
                    assert_eq!(one.2, many.2, "{what}: flows");
                    assert_eq!(one.3, many.3, "{what}: error");
                    assert!(one.4 == many.4, "{what}: records differ");
                }
                cut += one.3.is_some() as usize;
            }
        }
    }
    assert!(cut > 20, "most cuts end inside a record: {cut}");
}

//! Reads every capture of the tcpdump test corpus through `PcapPort`: no panic, no hang, errors
//! that name the file and a byte offset, and the same packet counts as tcpdump (libpcap).
//!
//! The corpus is `$LINERATE_CORPUS` or `tests/corpus/tcpdump-tests` in the repository. Without it
//! the test is skipped (counted as such by scripts/test.sh), a failure under
//! `LINERATE_REQUIRE_PRIV=1`.
#![deny(unsafe_code)]

use linerate::mem::Batch;
use linerate::port::pcap::PcapPort;
use linerate::port::{Port, PortError, PortOptions};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

const LIMIT: Duration = Duration::from_secs(10);

fn corpus() -> Option<PathBuf> {
    linerate_test_support::corpus()
}

/// The corpus' files, sorted.
fn files_in(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("read corpus folder")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

struct Outcome {
    packets: u64,
    error: Option<PortError>,
}

fn opts() -> PortOptions {
    PortOptions {
        frames: 512,
        ..Default::default()
    }
}

fn read(path: &str) -> Outcome {
    drain(path, PcapPort::open(path, &opts()))
}

fn drain(path: &str, port: Result<PcapPort, PortError>) -> Outcome {
    let start = Instant::now();
    let mut packets = 0u64;
    let mut p = match port {
        Ok(p) => p,
        Err(e) => {
            return Outcome {
                packets,
                error: Some(e),
            }
        }
    };
    assert!(!p.is_writer(), "{path}: an existing file must be read");
    let mut b = Batch::new();
    let mut error = None;
    while !p.is_finished() {
        assert!(
            start.elapsed() < LIMIT,
            "{path}: still reading after {LIMIT:?}"
        );
        match p.rx(&mut b) {
            Ok(n) => {
                packets += n as u64;
                assert_eq!(n, b.len());
                b.clear();
            }
            Err(e) => {
                error = Some(e);
                break;
            }
        }
    }
    assert!(p.is_finished(), "{path}: finished after an error");
    assert_eq!(p.stats().rx_packets, packets, "{path}");
    Outcome { packets, error }
}

/// tcpdump's packet count and whether it read the file without error; None if tcpdump is
/// missing.
fn tcpdump(path: &str) -> Option<(u64, bool)> {
    let out = Command::new("tcpdump")
        .args(["--count", "-r", path])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let n = text
        .split_whitespace()
        .next()
        .and_then(|w| w.parse().ok())
        .unwrap_or(0);
    Some((n, out.status.success()))
}

#[test]
fn tcpdump_corpus() {
    let Some(dir) = corpus() else { return };
    let files = files_in(&dir);
    assert!(!files.is_empty(), "{} is empty", dir.display());
    let have_tcpdump = tcpdump("/dev/null").is_some();
    let (mut clean, mut failed, mut compared) = (0, 0, 0);
    let (mut cut_clean, mut cut_failed, mut total) = (0, 0, 0u64);
    let tmp = std::env::temp_dir().join(format!("linerate-corpus-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).expect("temp dir");
    let mut mismatches = Vec::new();
    let mut info = Vec::new();
    for f in &files {
        let path = f.to_str().expect("utf-8 path");
        let start = Instant::now();
        let o = read(path);
        assert!(start.elapsed() < LIMIT, "{path} took {:?}", start.elapsed());
        match &o.error {
            None => clean += 1,
            Some(e) => {
                failed += 1;
                let msg = e.to_string();
                assert!(msg.contains(path), "error without the path: {msg}");
                if let PortError::Format { .. } = e {
                    assert!(msg.contains("offset"), "error without an offset: {msg}");
                } else {
                    panic!("{path}: unexpected error kind: {msg}");
                }
            }
        }
        if !have_tcpdump {
            continue;
        }
        let Some((n, ok)) = tcpdump(path) else {
            continue;
        };
        compared += 1;
        total += o.packets;
        // The same file cut two thirds of the way: both readers must stop at the same record.
        let bytes = std::fs::read(path).expect("read file");
        let cut = bytes.get(..bytes.len() * 2 / 3).unwrap_or(&[]).to_vec();
        let cut_path = tmp.join("cut.pcap");
        let cut_path = cut_path.to_str().expect("utf-8 path");
        std::fs::write(cut_path, &cut).expect("write cut file");
        let oc = drain(
            cut_path,
            PcapPort::from_reader(cut_path, Box::new(std::io::Cursor::new(cut)), &opts()),
        );
        match &oc.error {
            None => cut_clean += 1,
            Some(e) => {
                cut_failed += 1;
                let msg = e.to_string();
                assert!(msg.contains(cut_path) && msg.contains("offset"), "{msg}");
            }
        }
        if let Some((nc, _)) = tcpdump(cut_path) {
            if nc != oc.packets {
                mismatches.push(format!(
                    "{path} cut to 2/3: tcpdump read {nc} packets, we read {} ({:?})",
                    oc.packets,
                    oc.error.as_ref().map(|e| e.to_string())
                ));
            }
        }
        let ours = match &o.error {
            None => "clean".to_string(),
            Some(e) => e.to_string(),
        };
        if ok && (n != o.packets || o.error.is_some()) {
            mismatches.push(format!(
                "{path}: tcpdump read {n} packets cleanly, we read {} ({ours})",
                o.packets
            ));
        } else if !ok && n != o.packets {
            // tcpdump failed: an informational difference (where each reader stops).
            info.push(format!(
                "{path}: tcpdump failed after {n} packets, we read {} ({ours})",
                o.packets
            ));
        } else if !ok && o.error.is_none() {
            info.push(format!(
                "{path}: tcpdump failed after {n} packets, we read them all cleanly"
            ));
        }
    }
    let _ = std::fs::remove_dir_all(&tmp);
    println!(
        "{} files: {clean} clean, {failed} ended with a format error, {total} packets; cut to \
         2/3: {cut_clean} clean, {cut_failed} with a format error; compared with tcpdump: \
         {compared}, mismatches: {}",
        files.len(),
        mismatches.len()
    );
    for m in &info {
        println!("note: {m}");
    }
    for m in &mismatches {
        println!("MISMATCH: {m}");
    }
    assert!(mismatches.is_empty(), "{} mismatches", mismatches.len());
}

/// What a port delivered: per packet (interface, timestamp, wire length, bytes), the
/// interfaces it described, and the error that ended it.
type Read = (
    Vec<(u16, u64, u32, Vec<u8>)>,
    Vec<linerate::port::Interface>,
    Option<PortError>,
);

fn read_all(mut p: PcapPort, mut w: Option<&mut PcapPort>) -> Read {
    let mut out = Vec::new();
    let mut b = Batch::new();
    let start = Instant::now();
    let mut error = None;
    while !p.is_finished() && start.elapsed() < LIMIT {
        match p.rx(&mut b) {
            Ok(_) => {
                for x in b.iter() {
                    out.push((x.desc.port, x.desc.ts, x.desc.wire_len, x.data.to_vec()));
                }
                match w.as_deref_mut() {
                    Some(w) => {
                        w.tx(&mut b).expect("write");
                    }
                    None => b.clear(),
                }
            }
            Err(e) => {
                error = Some(e);
                break;
            }
        }
    }
    (out, p.interfaces(), error)
}

/// Every capture of the corpus read, written as pcapng and read back: the same packets
/// (bytes, timestamps in ns, wire lengths) on the same interfaces, with the same names and
/// link types; the file ends on a whole block.
#[test]
fn tcpdump_corpus_through_pcapng() {
    let Some(dir) = corpus() else { return };
    let files = files_in(&dir);
    let tmp = std::env::temp_dir().join(format!("linerate-corpus-ng-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).expect("temp dir");
    let out = tmp.join("out.pcapng");
    let out = out.to_str().expect("utf-8 path");
    let (mut files_n, mut packets, mut multi, mut late) = (0, 0usize, 0, 0);
    for f in &files {
        let path = f.to_str().expect("utf-8 path");
        let Ok(p) = PcapPort::open(path, &opts()) else {
            continue;
        };
        let described = p.interfaces();
        let mut w = PcapPort::create_protected(
            out,
            p.link_type(),
            0,
            &linerate::port::file::Inputs::default(),
        )
        .expect("create");
        w.describe(&described).expect("describe");
        let (first, ifaces, _) = read_all(p, Some(&mut w));
        w.finish(&[]).expect("finish");
        drop(w);
        let back = PcapPort::open(out, &opts()).unwrap_or_else(|e| panic!("{path}: {e}"));
        let (second, ifaces2, err) = read_all(back, None);
        assert!(err.is_none(), "{path}: reading our pcapng: {err:?}");
        assert_eq!(first.len(), second.len(), "{path}: packet count");
        for (k, (a, b)) in first.iter().zip(&second).enumerate() {
            assert!(a == b, "{path}: packet {k} differs after pcapng");
        }
        // Interfaces described up front keep their names and link types; one that the input
        // described only after its first packet is in the file, without a name.
        assert!(ifaces2.len() >= described.len(), "{path}");
        // Their snaplen too, no larger than the writer's own 262144 (a corrupt header's
        // 18 546 945 is not carried over); 0, none given, becomes the writer's.
        for (a, b) in described.iter().zip(&ifaces2) {
            assert_eq!((&a.name, a.link), (&b.name, b.link), "{path}: interface");
            let want = match a.snaplen {
                0 => 262_144,
                s => s.min(262_144),
            };
            assert_eq!(b.snaplen, want, "{path}: interface snaplen");
        }
        if ifaces.len() > described.len() {
            late += 1;
        }
        if described.len() > 1 {
            multi += 1;
        }
        files_n += 1;
        packets += first.len();
    }
    let _ = std::fs::remove_dir_all(&tmp);
    println!(
        "{files_n} files through pcapng, {packets} packets; {multi} with several interfaces, \
         {late} describing some after their first packet"
    );
    assert!(files_n > 700, "only {files_n} files opened");
}

/// Every capture of the corpus, and each cut to two thirds (a record cut short at the end),
/// read in place (`PcapPort::read_in_place`: descriptors of the file's own pages) and by
/// copying: the same packets (bytes, timestamps, wire lengths, interfaces), the same error at
/// the same offset, and read-only descriptors. Classic pcap files are read in place, pcapng
/// files are not.
#[test]
fn tcpdump_corpus_read_in_place() {
    let Some(dir) = corpus() else { return };
    let files = files_in(&dir);
    let tmp = std::env::temp_dir().join(format!("linerate-corpus-map-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).expect("temp dir");
    let cut_path = tmp.join("cut.pcap");
    let cut_path = cut_path.to_str().expect("utf-8 path");
    let (mut mapped, mut copied, mut packets, mut errors) = (0, 0, 0usize, 0);
    for f in &files {
        let path = f.to_str().expect("utf-8 path");
        let bytes = std::fs::read(path).expect("read file");
        let cut = bytes.get(..bytes.len() * 2 / 3).unwrap_or(&[]).to_vec();
        std::fs::write(cut_path, &cut).expect("write cut file");
        for p in [path, cut_path] {
            let (Ok(a), Ok(mut b)) = (PcapPort::open(p, &opts()), PcapPort::open(p, &opts()))
            else {
                continue;
            };
            let classic = matches!(
                a.format(),
                Some(linerate::port::pcap::FileFormat::Pcap { .. })
            );
            let in_place = b.read_in_place();
            assert_eq!(
                in_place, classic,
                "{path} ({p}): read in place only when classic pcap"
            );
            if in_place {
                mapped += 1;
                // What `rx` gives is read-only.
                let mut peek = Batch::new();
                if let Ok(n) = b.rx(&mut peek) {
                    for i in 0..n {
                        assert_ne!(peek.descs()[i].flags & linerate::mem::Desc::F_SHARED, 0);
                        assert!(
                            peek.data_mut(i).is_empty(),
                            "{path}: a mapped packet written"
                        );
                    }
                }
                b = PcapPort::open(p, &opts()).expect("open again");
                assert!(b.read_in_place());
            } else {
                copied += 1;
            }
            let (pa, ia, ea) = read_all(a, None);
            let (pb, ib, eb) = read_all(b, None);
            assert_eq!(pa.len(), pb.len(), "{path} ({p}): packet count");
            for (k, (x, y)) in pa.iter().zip(&pb).enumerate() {
                assert!(
                    x == y,
                    "{path} ({p}): packet {k} differs when read in place"
                );
            }
            assert_eq!(ia, ib, "{path} ({p}): interfaces");
            assert_eq!(
                ea.as_ref().map(|e| e.to_string()),
                eb.as_ref().map(|e| e.to_string()),
                "{path} ({p}): the error"
            );
            packets += pb.len();
            errors += usize::from(eb.is_some());
        }
    }
    let _ = std::fs::remove_dir_all(&tmp);
    println!(
        "{mapped} files (and cut copies) read in place, {copied} copied (pcapng), {packets} \
         packets, {errors} ending with a format error: identical both ways"
    );
    assert!(mapped > 500, "only {mapped} files read in place");
}

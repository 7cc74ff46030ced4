//! The flow monitor on every capture of the tcpdump test corpus (many deliberately malformed):
//! no panic, no hang, and every packet accounted for: each one read is either counted in a flow
//! or counted as not-a-flow under a named reason, and the records carry exactly the packets the
//! table counted. Run with one and with two threads.
//!
//! The corpus is `$LINERATE_CORPUS` or `tests/corpus/tcpdump-tests` in the repository; without it
//! the test is skipped, a failure under `LINERATE_REQUIRE_PRIV=1`.

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

//! The cluster with consumer threads: distribution modes, `-n 2,1`, fan-out zero copy, the
//! accounting invariant under overload, consumers leaving and coming back, master exit.
#![deny(unsafe_code)]

use linerate::apps::balance::{
    self, source::SourcePort, BalanceOptions, Distributor, Mode, Threads,
};
use linerate::cluster::{ClusterConfig, Master};
use linerate::mem::{Batch, Desc, Pool, PoolConfig, BATCH};
use linerate::port::{LinkType, Port, PortError, PortStats};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

/// A finite input of given packets.
struct VecPort {
    pool: Arc<Pool>,
    pkts: Vec<Vec<u8>>,
    next: usize,
}

impl VecPort {
    fn new(pkts: Vec<Vec<u8>>) -> VecPort {
        let pool = Arc::new(
            Pool::new(&PoolConfig {
                frames: 1024,
                ..Default::default()
            })
            .unwrap(),
        );
        VecPort {
            pool,
            pkts,
            next: 0,
        }
    }
}

impl Port for VecPort {
    fn name(&self) -> &str {
        "vec"
    }
    fn rx(&mut self, batch: &mut Batch) -> Result<usize, PortError> {
        batch.bind(&self.pool);
        let mut n = 0;
        while !batch.is_full() && self.next < self.pkts.len() {
            let p = &self.pkts[self.next];
            let mut fr = batch.alloc().expect("frame");
            fr.buf()[..p.len()].copy_from_slice(p);
            fr.push(Desc {
                len: p.len() as u32,
                wire_len: p.len() as u32,
                ..Default::default()
            });
            self.next += 1;
            n += 1;
        }
        Ok(n)
    }
    fn tx(&mut self, _b: &mut Batch) -> Result<usize, PortError> {
        Ok(0)
    }
    fn stats(&mut self) -> PortStats {
        PortStats::default()
    }
    fn is_finished(&self) -> bool {
        self.next >= self.pkts.len()
    }
}

fn numbered(n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            let mut p = vec![0u8; 60];
            p[..4].copy_from_slice(&(i as u32).to_be_bytes());
            p
        })
        .collect()
}

/// Opens `mem:TAG-PID` as `master`'s input wire over its frames (no copy); its name and the
/// master's end.
fn input_wire(master: &mut Master, tag: &str) -> (String, Box<dyn Port>) {
    let name = format!("mem:{tag}-{}", std::process::id());
    let (input, note) = linerate::open_cluster_input(&name, &Default::default(), master).unwrap();
    assert!(note.is_none(), "{note:?}");
    (name, input)
}

fn opts() -> BalanceOptions {
    BalanceOptions {
        interval: Duration::from_secs(3600),
        ..Default::default()
    }
}

/// Runs input through a threaded cluster; returns per-thread packet counts and cluster stats.
fn run_threads(
    input: &mut dyn Port,
    apps: &[u32],
    mode: Mode,
    slots: u32,
    work_ns: u64,
) -> (Vec<u64>, linerate::cluster::ClusterStats) {
    let cfg = ClusterConfig {
        apps: apps.to_vec(),
        slots,
        ..Default::default()
    };
    let mut master = Master::anon(&cfg).unwrap();
    let threads = Threads::spawn(&master, work_ns, None).unwrap();
    let mut dist = Distributor::new(mode, apps, LinkType::ETHERNET);
    let stop = AtomicBool::new(false);
    let r = balance::run(input, &mut master, &mut dist, &opts(), &stop, |_| {});
    assert!(r.error.is_none());
    master.close();
    let got = threads.join().unwrap();
    let stats = master.stats();
    stats.check_invariant().unwrap();
    // after the drain every frame is back
    drop(r);
    (got.iter().map(|g| g.0).collect(), stats)
}

#[test]
fn round_robin_splits_evenly() {
    let mut input = VecPort::new(numbered(10_000));
    let (got, st) = run_threads(&mut input, &[2], Mode::RoundRobin, 16384, 0);
    assert_eq!(got, vec![5_000, 5_000]);
    assert_eq!(st.rx_packets, 10_000);
    assert_eq!(st.app_offered(0), 10_000);
    assert_eq!(st.queues[0].delivered, 5_000);
}

#[test]
fn fanout_delivers_everything_to_every_thread() {
    let mut input = VecPort::new(numbered(20_000));
    let (got, st) = run_threads(&mut input, &[2], Mode::Fanout, 32768, 0);
    assert_eq!(got, vec![20_000, 20_000]);
    assert_eq!(st.queues.iter().map(|q| q.delivered).sum::<u64>(), 40_000);
}

#[test]
fn two_applications_one_balanced_one_full_copy() {
    let mut input = VecPort::new(numbered(9_000));
    let (got, st) = run_threads(&mut input, &[2, 1], Mode::RoundRobin, 16384, 0);
    assert_eq!(got[0] + got[1], 9_000);
    assert_eq!(got[0], 4_500);
    assert_eq!(got[2], 9_000);
    assert_eq!(st.apps(), 2);
    assert_eq!(st.queues[2].app, 1);
    assert_eq!(st.app_offered(0), 9_000);
    assert_eq!(st.app_offered(1), 9_000);
}

#[test]
fn overload_counts_ring_full_and_keeps_the_invariant() {
    // Slow consumers (2 µs per packet) behind small queues: the master never waits.
    let mut input = SourcePort::new(1000, Some(300_000)).unwrap();
    let (got, st) = run_threads(&mut input, &[2, 1], Mode::RoundRobin, 64, 2_000);
    assert_eq!(st.rx_packets, 300_000);
    let full: u64 = st.queues.iter().map(|q| q.ring_full).sum();
    assert!(full > 0, "no drops under overload: {st:?}");
    for (q, g) in st.queues.iter().zip(&got) {
        assert_eq!(
            q.delivered, *g,
            "a thread got other than what was delivered to it"
        );
        assert_eq!(q.consumer_gone, 0);
    }
    st.check_invariant().unwrap();
    // rx = Σ delivered + Σ drops, for each application
    assert_eq!(st.app_offered(0), 300_000);
    assert_eq!(st.app_offered(1), 300_000);
}

/// The built-in source writes into frames the master lends it: packets are published where
/// they were written (no copy), both applications of a fan-out read the same bytes the source
/// wrote, nothing is copied, and every lent frame comes back.
#[test]
fn the_built_in_source_is_received_in_place_with_no_copy() {
    let cfg = ClusterConfig {
        apps: vec![1, 1],
        slots: 4096,
        ..Default::default()
    };
    let mut master = Master::anon(&cfg).unwrap();
    let all_free = master.free_frames();
    let mut c0 = master.consumer(0).unwrap();
    let mut c1 = master.consumer(1).unwrap();
    let mut dist = Distributor::new(Mode::FiveTuple, &[1, 1], LinkType::ETHERNET);
    let stop = AtomicBool::new(false);
    let flows = 7;
    let n = 3_000u64;
    balance::run(
        &mut SourcePort::new(flows, Some(n)).unwrap(),
        &mut master,
        &mut dist,
        &opts(),
        &stop,
        |_| {},
    );
    let st = master.stats();
    assert_eq!(st.rx_packets, n);
    assert_eq!(st.copied_packets, 0, "in place: nothing copied ({st:?})");
    st.check_invariant().unwrap();
    assert_eq!(
        master.free_frames() + n as usize,
        all_free,
        "lent frames came back"
    );
    for c in [&mut c0, &mut c1] {
        let mut b = Batch::new();
        let mut i = 0u64;
        while c.rx(&mut b).unwrap() > 0 {
            for p in b.iter() {
                let want = balance::source::frame((i % flows as u64) as u32, flows);
                assert_eq!(p.data, &want[..], "packet {i}");
                assert_ne!(
                    p.desc.flags & Desc::F_SHARED,
                    0,
                    "one frame, two applications"
                );
                i += 1;
            }
            b.clear();
        }
        assert_eq!(i, n);
    }
    // Both released everything: every frame is free again.
    c0.rx(&mut Batch::new()).unwrap();
    c1.rx(&mut Batch::new()).unwrap();
    master.distribute(&mut Batch::new(), &[]);
    assert_eq!(master.free_frames(), all_free);

    // A port whose memory is its own (here a Vec) is copied, and counted as copied.
    let mut master = Master::anon(&cfg).unwrap();
    let mut dist = Distributor::new(Mode::FiveTuple, &[1, 1], LinkType::ETHERNET);
    balance::run(
        &mut VecPort::new(numbered(100)),
        &mut master,
        &mut dist,
        &opts(),
        &stop,
        |_| {},
    );
    assert_eq!(master.stats().copied_packets, 100);
}

/// Where each packet starts in its 2 KiB frame (the segment's frames start on a page).
fn offsets_in_frame(c: &mut linerate::cluster::ClusterPort) -> (Vec<u64>, Vec<Vec<u8>>) {
    let (mut offs, mut data) = (Vec::new(), Vec::new());
    let mut b = Batch::new();
    while c.rx(&mut b).unwrap() > 0 {
        for p in b.iter() {
            offs.push(p.desc.addr % 2048);
            data.push(p.data.to_vec());
        }
        b.clear();
    }
    (offs, data)
}

/// Short packets do not all sit at the same offset of their 2 KiB frames (their first lines
/// would share 2 of the L1 cache's 64 sets): the source's, received in lent frames, and those
/// the master copies are staggered by whole lines; a packet too long for the stagger starts
/// right after the headroom. Every byte arrives, every frame comes back.
#[test]
fn short_packets_are_staggered_over_cache_sets_in_their_frames() {
    let mut cfg = ClusterConfig {
        apps: vec![1],
        slots: 4096,
        ..Default::default()
    };
    cfg.fit_packets(130_944);
    let mut master = Master::anon(&cfg).unwrap();
    let all_free = master.free_frames();
    let mut c = master.consumer(0).unwrap();
    let mut dist = Distributor::new(Mode::Ip, &[1], LinkType::ETHERNET);
    let stop = AtomicBool::new(false);
    let n = 1_000u64;
    balance::run(
        &mut SourcePort::new(5, Some(n)).unwrap(),
        &mut master,
        &mut dist,
        &opts(),
        &stop,
        |_| {},
    );
    let st = master.stats();
    assert_eq!((st.rx_packets, st.copied_packets), (n, 0), "{st:?}");
    let (offs, data) = offsets_in_frame(&mut c);
    assert_eq!(offs.len() as u64, n);
    for (i, d) in data.iter().enumerate() {
        assert_eq!(d, &balance::source::frame(i as u32 % 5, 5), "packet {i}");
    }
    let mut distinct = offs.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert!(distinct.len() >= 8, "offsets {distinct:?}");
    assert!(
        distinct
            .iter()
            .all(|&o| o >= 128 && o % 64 == 0 && o + 60 <= 2048),
        "past the headroom, on a line, inside the frame: {distinct:?}"
    );
    c.rx(&mut Batch::new()).unwrap();
    master.distribute(&mut Batch::new(), &[]);
    assert_eq!(master.free_frames(), all_free, "every lent frame came back");

    // Copied: short packets staggered too, a 1900-byte one (1920 B of room) from the headroom.
    let mut master = Master::anon(&cfg).unwrap();
    let all_free = master.free_frames();
    let mut c = master.consumer(0).unwrap();
    let mut dist = Distributor::new(Mode::Ip, &[1], LinkType::ETHERNET);
    let mut pkts = numbered(200);
    let mut long = pkts[7].clone();
    long.resize(1900, 0xab);
    pkts[7] = long;
    balance::run(
        &mut VecPort::new(pkts.clone()),
        &mut master,
        &mut dist,
        &opts(),
        &stop,
        |_| {},
    );
    assert_eq!(master.stats().copied_packets, 200);
    let (offs, data) = offsets_in_frame(&mut c);
    assert_eq!(data, pkts, "every byte of every packet");
    assert_eq!(offs[7], 128, "the long packet starts after the headroom");
    let mut distinct = offs.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert!(distinct.len() >= 8, "offsets {distinct:?}");
    c.rx(&mut Batch::new()).unwrap();
    master.distribute(&mut Batch::new(), &[]);
    assert_eq!(master.free_frames(), all_free, "every frame came back");
}

/// A pcap file is read straight into the segment's frames, jumbo frames into its big frames:
/// consumers read the file's bytes, nothing is copied by the master, none is cut, and every
/// lent frame (regular and big) comes back.
#[test]
fn a_pcap_file_is_read_straight_into_the_segment_jumbo_frames_too() {
    let sizes = [60usize, 1514, 9000, 200, 9018];
    let n = 2_000usize;
    let pkt = move |i: usize| -> Vec<u8> {
        let mut p = vec![(i % 251) as u8; sizes[i % sizes.len()]];
        p[..4].copy_from_slice(&(i as u32).to_be_bytes());
        p
    };
    let mut file = Vec::new();
    for w in [0xa1b2_c3d4u32, 0x0002_0004, 0, 0, 65535, 1] {
        if w == 0x0002_0004 {
            file.extend_from_slice(&2u16.to_le_bytes());
            file.extend_from_slice(&4u16.to_le_bytes());
        } else {
            file.extend_from_slice(&w.to_le_bytes());
        }
    }
    for i in 0..n {
        let p = pkt(i);
        for w in [i as u32, 0, p.len() as u32, p.len() as u32] {
            file.extend_from_slice(&w.to_le_bytes());
        }
        file.extend_from_slice(&p);
    }
    let path = std::env::temp_dir().join(format!("lr-inplace-{}.pcap", std::process::id()));
    std::fs::write(&path, &file).unwrap();
    let mut input = linerate::open_rx(path.to_str().unwrap(), &Default::default()).unwrap();
    let _ = std::fs::remove_file(&path);

    let mut cfg = ClusterConfig {
        apps: vec![1],
        slots: 4096,
        ..Default::default()
    };
    cfg.fit_packets(130_944); // balance's default --max-pkt-len: what any cluster carries
    let mut master = Master::anon(&cfg).unwrap();
    let all_free = master.free_frames();
    let mut c = master.consumer(0).unwrap();
    let mut dist = Distributor::new(Mode::RoundRobin, &[1], LinkType::ETHERNET);
    let stop = AtomicBool::new(false);
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        // Reads while the master runs: the segment has fewer big frames than the file has
        // jumbo packets, so they must come back for the file to get through.
        let mut b = Batch::new();
        let mut i = 0usize;
        loop {
            match c.rx(&mut b) {
                Ok(0) if c.is_finished() => break,
                Ok(0) => std::thread::sleep(Duration::from_micros(50)),
                Ok(_) => {
                    for p in b.iter() {
                        if p.data != &pkt(i)[..] {
                            tx.send(Err(format!("packet {i}: {} bytes", p.data.len())))
                                .unwrap();
                            return;
                        }
                        i += 1;
                    }
                    b.clear();
                }
                Err(e) => {
                    tx.send(Err(e.to_string())).unwrap();
                    return;
                }
            }
        }
        tx.send(Ok(i)).unwrap();
    });
    balance::run(
        input.as_mut(),
        &mut master,
        &mut dist,
        &opts(),
        &stop,
        |_| {},
    );
    let st = master.stats();
    master.close();
    assert_eq!(rx.recv().unwrap(), Ok(n));
    reader.join().unwrap();
    assert_eq!(st.rx_packets, n as u64, "{st:?}");
    assert_eq!(st.too_big + st.no_frame, 0, "{st:?}");
    assert_eq!(st.copied_packets, 0, "read in place: {st:?}");
    assert_eq!(input.stats().rx_drops.total(), 0);
    master.distribute(&mut Batch::new(), &[]);
    assert_eq!(master.free_frames(), all_free, "every lent frame came back");
}

/// A master short of frames never waits, nor makes its input wait: with no consumer ever
/// reading, a finite source still ends, what found no frame counted as `no_frame`.
#[test]
fn a_finite_source_with_no_consumer_ends_and_counts_what_found_no_frame() {
    let cfg = ClusterConfig {
        apps: vec![1],
        slots: 4096,
        frames: 128,
        ..Default::default()
    };
    let mut master = Master::anon(&cfg).unwrap();
    let _c = master.consumer(0).unwrap(); // attached, never reads
    let mut dist = Distributor::new(Mode::RoundRobin, &[1], LinkType::ETHERNET);
    let stop = AtomicBool::new(false);
    let t0 = std::time::Instant::now();
    balance::run(
        &mut SourcePort::new(10, Some(50_000)).unwrap(),
        &mut master,
        &mut dist,
        &opts(),
        &stop,
        |_| {},
    );
    assert!(
        t0.elapsed() < Duration::from_secs(20),
        "the master waited for frames"
    );
    let st = master.stats();
    assert_eq!(st.rx_packets, 50_000, "{st:?}");
    assert_eq!(st.queues[0].enqueued, 128, "{st:?}");
    assert_eq!(st.no_frame, 50_000 - 128, "{st:?}");
    st.check_invariant().unwrap();
}

#[test]
fn fanout_frames_are_shared_read_only_and_identical() {
    let cfg = ClusterConfig {
        apps: vec![2],
        slots: 1024,
        ..Default::default()
    };
    let mut master = Master::anon(&cfg).unwrap();
    let mut c0 = master.consumer(0).unwrap();
    let mut c1 = master.consumer(1).unwrap();
    let mut input = VecPort::new(numbered(100));
    let mut dist = Distributor::new(Mode::Fanout, &[2], LinkType::ETHERNET);
    let stop = AtomicBool::new(false);
    balance::run(&mut input, &mut master, &mut dist, &opts(), &stop, |_| {});
    let (mut b0, mut b1) = (Batch::new(), Batch::new());
    assert_eq!(c0.rx(&mut b0).unwrap(), 64);
    assert_eq!(c1.rx(&mut b1).unwrap(), 64);
    for i in 0..64 {
        assert_eq!(
            b0.descs()[i].addr,
            b1.descs()[i].addr,
            "zero copy: one frame for both"
        );
        assert_ne!(b0.descs()[i].flags & Desc::F_SHARED, 0);
        assert_eq!(&b0.data(i)[..4], &(i as u32).to_be_bytes());
        assert!(b0.data_mut(i).is_empty(), "shared frames are read-only");
    }
    let total = master.free_frames() + 100;
    // releasing happens at the next rx; frames come back only when both consumers released
    b0.clear();
    c0.rx(&mut b0).unwrap();
    b0.clear();
    c0.rx(&mut b0).unwrap();
    master.distribute(&mut Batch::new(), &[]);
    assert_eq!(
        master.free_frames() + 100,
        total,
        "frames still held by consumer 1"
    );
    b1.clear();
    c1.rx(&mut b1).unwrap();
    b1.clear();
    c1.rx(&mut b1).unwrap();
    master.distribute(&mut Batch::new(), &[]);
    assert_eq!(master.free_frames(), total);
}

#[test]
fn consumer_leaving_is_reclaimed_and_a_new_one_resumes() {
    let cfg = ClusterConfig {
        apps: vec![1],
        slots: 256,
        ..Default::default()
    };
    let mut master = Master::anon(&cfg).unwrap();
    let all = master.free_frames();
    let mut dist = Distributor::new(Mode::RoundRobin, &[1], LinkType::ETHERNET);
    let stop = AtomicBool::new(false);
    let mut c = master.consumer(0).unwrap();
    // a second consumer for the same queue is refused
    assert!(master.consumer(0).is_err());
    balance::run(
        &mut VecPort::new(numbered(100)),
        &mut master,
        &mut dist,
        &opts(),
        &stop,
        |_| {},
    );
    let mut b = Batch::new();
    assert_eq!(c.rx(&mut b).unwrap(), 64);
    drop(b);
    drop(c); // leaves holding 64 released + 36 unread
    master.maintain();
    assert_eq!(
        master.free_frames(),
        all,
        "frames of a gone consumer are reclaimed"
    );
    balance::run(
        &mut VecPort::new(numbered(50)),
        &mut master,
        &mut dist,
        &opts(),
        &stop,
        |_| {},
    );
    let st = master.stats();
    assert_eq!(st.queues[0].consumer_gone, 36 + 50);
    assert_eq!(st.queues[0].delivered, 64);
    st.check_invariant().unwrap();
    // a new consumer attaches and resumes with new packets
    let mut c = master.consumer(0).unwrap();
    master.maintain();
    balance::run(
        &mut VecPort::new(numbered(10)),
        &mut master,
        &mut dist,
        &opts(),
        &stop,
        |_| {},
    );
    let mut b = Batch::new();
    assert_eq!(c.rx(&mut b).unwrap(), 10);
    assert_eq!(&b.data(9)[..4], &9u32.to_be_bytes());
    master.stats().check_invariant().unwrap();
}

#[test]
fn master_close_ends_consumers_normally_after_the_drain() {
    let cfg = ClusterConfig {
        apps: vec![1],
        slots: 256,
        ..Default::default()
    };
    let mut master = Master::anon(&cfg).unwrap();
    let mut c = master.consumer(0).unwrap();
    let mut dist = Distributor::new(Mode::RoundRobin, &[1], LinkType::ETHERNET);
    let stop = AtomicBool::new(false);
    balance::run(
        &mut VecPort::new(numbered(10)),
        &mut master,
        &mut dist,
        &opts(),
        &stop,
        |_| {},
    );
    master.close();
    let mut b = Batch::new();
    assert_eq!(c.rx(&mut b).unwrap(), 10);
    assert!(!c.is_finished());
    b.clear();
    assert_eq!(c.rx(&mut b).unwrap(), 0, "a normal end, not an error");
    assert!(c.is_finished());
    let note = c.end_note().unwrap();
    assert!(note.contains("ended: master stopped"), "{note}");
    assert_eq!(c.rx(&mut b).unwrap(), 0);
    master.take_back();
    let st = master.stats();
    assert_eq!(st.queues[0].delivered, 10);
    assert_eq!(st.queues[0].unread, 0);
    st.check_invariant().unwrap();
}

#[test]
fn a_queue_replaced_by_an_egress_port_sends_its_packets_there() {
    use linerate::apps::balance::Egress;
    use linerate::port::mem::wire;
    let cfg = ClusterConfig {
        apps: vec![2],
        slots: 1024,
        ..Default::default()
    };
    let mut master = Master::anon(&cfg).unwrap();
    let (near, mut far) = wire("egress-t", &linerate::port::PortOptions::default()).unwrap();
    let mut egress = vec![Egress::new(&master, 1, Box::new(near)).unwrap()];
    let threads = Threads::spawn_some(&master, &[0], 0, None).unwrap();
    let mut dist = Distributor::new(Mode::RoundRobin, &[2], LinkType::ETHERNET);
    let stop = AtomicBool::new(false);
    let r = balance::run_with(
        &mut VecPort::new(numbered(2000)),
        &mut master,
        &mut dist,
        &opts(),
        &mut egress,
        None,
        &stop,
        |_| {},
    );
    assert!(r.error.is_none());
    master.close();
    assert_eq!(threads.join().unwrap()[0].0, 1000);
    let mut b = Batch::new();
    let mut got = vec![];
    while far.rx(&mut b).unwrap() > 0 {
        got.extend(
            b.iter()
                .map(|p| u32::from_be_bytes(p.data[..4].try_into().unwrap())),
        );
        b.clear();
    }
    assert_eq!(got.len(), 1000);
    assert!(
        got.iter().all(|i| i % 2 == 1),
        "queue 1 got the odd packets"
    );
    assert_eq!(egress[0].dropped, 0);
    master.stats().check_invariant().unwrap();
}

#[test]
fn consumers_transmit_into_the_cluster_and_the_master_sends_it_out() {
    use linerate::port::mem::wire;
    let cfg = ClusterConfig {
        apps: vec![1],
        slots: 256,
        tx_lanes: 2,
        tx_slots: 256,
        ..Default::default()
    };
    let mut master = Master::anon(&cfg).unwrap();
    let (mut near, mut far) = wire("tx-t", &linerate::port::PortOptions::default()).unwrap();
    let mut a = master.port();
    let mut b = master.port();
    let mut src = VecPort::new(numbered(1000));
    let mut sent = 0;
    let mut got = vec![];
    let mut rx = Batch::new();
    let mut batch = Batch::new();
    while sent < 1000 {
        src.rx(&mut batch).unwrap();
        let port = if sent % 128 == 0 { &mut a } else { &mut b };
        let n = port.tx(&mut batch).unwrap();
        sent += n;
        assert_eq!(batch.len(), 0, "a lane with room takes the whole batch");
        master.pump_tx(&mut near).unwrap();
        while far.rx(&mut rx).unwrap() > 0 {
            got.extend(
                rx.iter()
                    .map(|p| u32::from_be_bytes(p.data[..4].try_into().unwrap())),
            );
            rx.clear();
        }
    }
    got.sort();
    assert_eq!(got, (0..1000).collect::<Vec<u32>>());
    let st = master.stats();
    assert_eq!(st.tx_packets, 1000);
    assert_eq!(st.tx_dropped, 0);
    // Two lanes: a third transmitter is refused while both live.
    let mut c = master.port();
    let mut one = Batch::new();
    VecPort::new(numbered(1)).rx(&mut one).unwrap();
    let e = c.tx(&mut one).unwrap_err().to_string();
    assert!(e.contains("transmit lanes"), "{e}");
    drop(a);
    assert_eq!(c.tx(&mut one).unwrap(), 1, "a freed lane is taken");
    // A full lane keeps what it cannot take, and never waits.
    let mut big = Batch::new();
    let mut src = VecPort::new(numbered(400));
    let mut kept = 0;
    let mut took = 1;
    for _ in 0..7 {
        src.rx(&mut big).unwrap();
        took += c.tx(&mut big).unwrap();
        kept = big.len();
        big.clear();
    }
    assert!(kept > 0, "the 256-slot lane filled up");
    // Everything the resumed lane took leaves the master's egress once (sent or counted as
    // dropped by it), nothing more.
    let mut out = 0;
    while master.tx_pending() {
        master.pump_tx(&mut near).unwrap();
        while far.rx(&mut rx).unwrap() > 0 {
            out += rx.len();
            rx.clear();
        }
    }
    let st = master.stats();
    assert_eq!(st.tx_packets + st.tx_dropped, 1000 + took as u64);
    assert_eq!(out as u64, st.tx_packets - 1000);
    assert_eq!(st.tx_malformed, 0);
}

#[test]
fn a_cluster_without_egress_refuses_transmit() {
    let master = Master::anon(&ClusterConfig::default()).unwrap();
    let mut p = master.port();
    let mut b = Batch::new();
    VecPort::new(numbered(1)).rx(&mut b).unwrap();
    let e = p.tx(&mut b).unwrap_err().to_string();
    assert!(e.contains("-o PORT"), "{e}");
}

#[test]
fn consumers_receive_the_hash_in_the_descriptor() {
    let cfg = ClusterConfig {
        apps: vec![1],
        slots: 256,
        ..Default::default()
    };
    let mut master = Master::anon(&cfg).unwrap();
    let mut c = master.consumer(0).unwrap();
    let mut dist = Distributor::new(Mode::FiveTuple, &[1], LinkType::ETHERNET);
    let stop = AtomicBool::new(false);
    balance::run(
        &mut SourcePort::new(100, Some(64)).unwrap(),
        &mut master,
        &mut dist,
        &opts(),
        &stop,
        |_| {},
    );
    let mut b = Batch::new();
    assert_eq!(c.rx(&mut b).unwrap(), 64);
    for p in b.iter() {
        assert_eq!(
            p.desc.hash,
            balance::hash(Mode::FiveTuple, p.data, LinkType::ETHERNET)
        );
    }
    assert!(b.iter().any(|p| p.desc.hash != 0));
}

#[test]
fn a_silent_consumer_is_declared_gone_after_the_consumer_timeout() {
    let cfg = ClusterConfig {
        apps: vec![1],
        slots: 256,
        ..Default::default()
    };
    let mut master = Master::anon(&cfg).unwrap();
    let all = master.free_frames();
    master.set_consumer_timeout(Some(Duration::from_millis(50)));
    let mut c = master.consumer(0).unwrap();
    let mut dist = Distributor::new(Mode::RoundRobin, &[1], LinkType::ETHERNET);
    let stop = AtomicBool::new(false);
    balance::run(
        &mut VecPort::new(numbered(100)),
        &mut master,
        &mut dist,
        &opts(),
        &stop,
        |_| {},
    );
    let mut b = Batch::new();
    assert_eq!(c.rx(&mut b).unwrap(), 64);
    master.maintain();
    assert_eq!(
        master.stats().queues[0].consumer_gone,
        0,
        "alive and recent"
    );
    std::thread::sleep(Duration::from_millis(120));
    master.maintain();
    let st = master.stats();
    assert_eq!(
        st.queues[0].consumer_gone, 100,
        "everything still in its queue is taken back"
    );
    assert_eq!(master.free_frames(), all);
    st.check_invariant().unwrap();
    let e = c.rx(&mut b).unwrap_err().to_string();
    assert!(e.contains("reclaimed"), "{e}");
    // The consumer taken back while alive gives nothing back any more (the master took it
    // all): asking again, dropping its packets and itself leaves the queue as the master left
    // it, so the next consumer gets only what comes next, nothing stale.
    assert!(c.rx(&mut b).is_err());
    b.clear();
    drop(c);
    // (before the master's next look at its consumers)
    let mut next = master.consumer(0).unwrap();
    assert_eq!(next.rx(&mut b).unwrap(), 0, "nothing stale handed out");
    master.maintain();
    balance::run(
        &mut VecPort::new(numbered(110).split_off(100)),
        &mut master,
        &mut dist,
        &opts(),
        &stop,
        |_| {},
    );
    let mut got = vec![];
    while next.rx(&mut b).unwrap() > 0 {
        got.extend(
            b.iter()
                .map(|p| u32::from_be_bytes(p.data[..4].try_into().unwrap())),
        );
        b.clear();
    }
    assert_eq!(
        got,
        (100..110).collect::<Vec<u32>>(),
        "only the new packets"
    );
}

/// A `mem:` wire opened as the cluster's input (`open_cluster_input`) allocates from the
/// segment's own frames: the master publishes what the writer wrote where it is (no copy),
/// jumbo frames too; what a writer sends from frames of another pool is copied once by the
/// wire, on the writer's side; and every frame consumers release comes back to the writer, who
/// sends many times the frames it was given.
#[test]
fn a_mem_wire_into_the_cluster_writes_straight_into_the_segment() {
    let sizes = [60usize, 1514, 9000, 200, 61];
    let n = 30_000usize;
    let pkt = move |i: usize| -> Vec<u8> {
        let mut p = vec![(i % 253) as u8; sizes[i % sizes.len()]];
        p[..4].copy_from_slice(&(i as u32).to_be_bytes());
        p
    };
    let mut cfg = ClusterConfig {
        apps: vec![2],
        slots: 1024,
        ..Default::default()
    };
    cfg.fit_packets(130_944);
    let mut master = Master::anon(&cfg).unwrap();
    let all_free = master.free_frames();
    let (name, mut input) = input_wire(&mut master, "zc-in");
    let kept = master.free_frames();
    assert!(
        kept < all_free / 4,
        "the wire took most frames: {kept} of {all_free}"
    );

    let readers: Vec<_> = (0..2)
        .map(|q| {
            let mut c = master.consumer(q).unwrap();
            std::thread::spawn(move || -> Result<(u64, u32), String> {
                let (mut b, mut got, mut last) = (Batch::new(), 0u64, None::<u32>);
                loop {
                    match c.rx(&mut b) {
                        Ok(0) if c.is_finished() => return Ok((got, last.unwrap_or(0))),
                        Ok(0) => std::thread::sleep(Duration::from_micros(20)),
                        Ok(_) => {
                            for p in b.iter() {
                                let i = u32::from_be_bytes(p.data[..4].try_into().unwrap());
                                if p.data != &pkt(i as usize)[..] || p.desc.ts != u64::from(i) {
                                    return Err(format!("queue {q}: packet {i} differs"));
                                }
                                if last.is_some_and(|l| l >= i) {
                                    return Err(format!("queue {q}: {i} after {last:?}"));
                                }
                                last = Some(i);
                                got += 1;
                            }
                            b.clear();
                        }
                        Err(e) => return Err(e.to_string()),
                    }
                }
            })
        })
        .collect();

    let done = Arc::new(AtomicBool::new(false));
    let writer = {
        let (name, done) = (name.clone(), done.clone());
        std::thread::spawn(move || {
            let mut w = linerate::open_rx(&name, &Default::default()).unwrap();
            let pool = w.pool().unwrap().clone();
            let other = Arc::new(
                Pool::new(&PoolConfig {
                    frames: 256,
                    big_frames: 8,
                    ..Default::default()
                })
                .unwrap(),
            );
            let (mut own, mut foreign) = (Batch::with_pool(&pool), Batch::with_pool(&other));
            let (mut i, mut waits) = (0usize, 0u64);
            while i < n {
                // One batch in eight from frames of another pool.
                let is_foreign = |i: usize| (i / 64) % 8 == 7;
                let f = is_foreign(i);
                let b = if f { &mut foreign } else { &mut own };
                while !b.is_full() && i < n && is_foreign(i) == f {
                    let p = pkt(i);
                    let fresh = if p.len() > 1900 {
                        b.alloc_big()
                    } else {
                        b.alloc()
                    };
                    let Some(mut fr) = fresh else { break };
                    fr.buf()[..p.len()].copy_from_slice(&p);
                    fr.push(Desc {
                        len: p.len() as u32,
                        wire_len: p.len() as u32,
                        ts: i as u64,
                        ..Default::default()
                    });
                    i += 1;
                }
                if b.is_empty() {
                    // Every frame of the wire is in flight: wait for consumers to release some.
                    waits += 1;
                    std::thread::sleep(Duration::from_micros(20));
                    continue;
                }
                w.tx(b).unwrap();
            }
            drop((own, foreign));
            done.store(true, std::sync::atomic::Ordering::Release);
            (w.stats(), pool, waits)
        })
    };

    let mut dist = Distributor::new(Mode::RoundRobin, &[2], LinkType::ETHERNET);
    let (mut batch, mut masks, mut idle) = (Batch::new(), [0u64; 64], 0);
    loop {
        if input.rx(&mut batch).unwrap() > 0 {
            idle = 0;
            dist.masks(&mut batch, None, &mut masks);
            let len = batch.len();
            master.distribute(&mut batch, &masks[..len]);
            batch.clear();
        } else if done.load(std::sync::atomic::Ordering::Acquire) && idle > 1000 {
            break;
        } else {
            idle += 1;
            master.distribute(&mut batch, &[]); // takes back what consumers released
            std::thread::sleep(Duration::from_micros(10));
        }
    }
    let (ws, pool, waits) = writer.join().unwrap();
    master.close();
    let got: Vec<(u64, u32)> = readers
        .into_iter()
        .map(|r| r.join().unwrap().unwrap())
        .collect();
    master.take_back();
    let st = master.stats();
    st.check_invariant().unwrap();
    eprintln!("writer {ws:?}, waited {waits} times; cluster {st:?}; consumers {got:?}");
    assert_eq!(ws.tx_packets + ws.tx_drops.total(), n as u64, "{ws:?}");
    assert!(ws.tx_packets > n as u64 * 3 / 4, "{ws:?}");
    assert_eq!(
        st.rx_packets, ws.tx_packets,
        "what the wire took, the master read"
    );
    assert_eq!(
        st.copied_packets, 0,
        "the writer wrote into the segment: {st:?}"
    );
    assert_eq!(st.too_big + st.no_frame, 0, "{st:?}");
    assert_eq!(
        got.iter().map(|g| g.0).sum::<u64>(),
        st.queues.iter().map(|q| q.delivered).sum::<u64>()
    );
    assert!(
        ws.tx_packets > 4 * pool.frames() as u64,
        "the wire's {} frames came back many times",
        pool.frames()
    );
    assert_eq!(
        pool.free_frames(),
        pool.frames() as usize,
        "every wire frame came back"
    );
    assert_eq!(
        master.free_frames(),
        kept,
        "and every frame of the master's own"
    );
}

/// An input wire the master cannot make over its frames is read by copying, and says why:
/// a wire opened before the master, and a second wire into one master.
#[test]
fn a_mem_wire_the_master_cannot_share_is_copied_and_says_why() {
    let cfg = ClusterConfig::default();
    let mut master = Master::anon(&cfg).unwrap();
    let early = format!("mem:zc-early-{}", std::process::id());
    let mut w = linerate::open_rx(&early, &Default::default()).unwrap();
    let (mut input, note) =
        linerate::open_cluster_input(&early, &Default::default(), &mut master).unwrap();
    let note = note.expect("a note");
    assert!(
        note.contains("copied") && note.contains("before the master"),
        "{note}"
    );
    let mut b = Batch::new();
    VecPort::new(numbered(10)).rx(&mut b).unwrap();
    w.tx(&mut b).unwrap();
    let mut dist = Distributor::new(Mode::RoundRobin, &[1], LinkType::ETHERNET);
    let mut masks = [0u64; 64];
    assert_eq!(input.rx(&mut b).unwrap(), 10);
    dist.masks(&mut b, None, &mut masks);
    master.distribute(&mut b, &masks[..10]);
    assert_eq!(master.stats().copied_packets, 10);
    // The master has distributed: its frames are no longer all free.
    let late = format!("mem:zc-late-{}", std::process::id());
    let (_late, note) =
        linerate::open_cluster_input(&late, &Default::default(), &mut master).unwrap();
    let note = note.expect("a note");
    assert!(note.contains("distributed packets already"), "{note}");
    let _other_end = linerate::open_rx(&late, &Default::default()).unwrap();
    // A second wire into a fresh master is refused too.
    let mut fresh = Master::anon(&cfg).unwrap();
    let (a, b2) = (
        format!("mem:zc-a-{}", std::process::id()),
        format!("mem:zc-b-{}", std::process::id()),
    );
    let (_a, none) = linerate::open_cluster_input(&a, &Default::default(), &mut fresh).unwrap();
    assert!(none.is_none());
    let _wa = linerate::open_rx(&a, &Default::default()).unwrap();
    let (_b, note) = linerate::open_cluster_input(&b2, &Default::default(), &mut fresh).unwrap();
    assert!(note.expect("a note").contains("input wire already"));
    let _wb = linerate::open_rx(&b2, &Default::default()).unwrap();
}

/// A mem input wire's writer that makes a batch per packet (each dropped batch gives its
/// partly used chunk of frames back, as does the master when the writer finds none): the
/// wire's free list fills with small chunks, and none of its frames may be lost for it.
#[test]
fn a_mem_wire_writer_making_a_batch_per_packet_loses_no_frame() {
    let cfg = ClusterConfig {
        apps: vec![1],
        slots: 256,
        frames: 1024 + 128,
        ..Default::default()
    };
    let mut master = Master::anon(&cfg).unwrap();
    let (name, mut input) = input_wire(&mut master, "zc-frag");
    let mut w = linerate::open_rx(&name, &Default::default()).unwrap();
    let pool = w.pool().unwrap().clone();
    assert_eq!(pool.free_frames(), pool.frames() as usize);
    let mut c = master.consumer(0).unwrap();
    let (mut rb, mut cb, mut masks) = (Batch::new(), Batch::new(), [1u64; 64]);
    let (mut sent, mut got) = (0u64, 0u64);
    for i in 0..20_000u32 {
        // A few packets per batch, the batch dropped after each send.
        let mut b = Batch::with_pool(&pool);
        for k in 0..1 + i % 3 {
            let Some(mut fr) = b.alloc() else { break };
            fr.buf()[..4].copy_from_slice(&(i + k).to_be_bytes());
            fr.push(Desc {
                len: 60,
                wire_len: 60,
                ..Default::default()
            });
        }
        sent += b.len() as u64;
        w.tx(&mut b).unwrap();
        drop(b);
        while input.rx(&mut rb).unwrap() > 0 {
            let len = rb.len();
            masks[..len].fill(1);
            master.distribute(&mut rb, &masks[..len]);
            rb.clear();
        }
        cb.clear();
        got += c.rx(&mut cb).unwrap() as u64;
    }
    cb.clear();
    drop(cb);
    master.take_back();
    let st = master.stats();
    st.check_invariant().unwrap();
    assert_eq!(w.stats().tx_packets, sent);
    assert_eq!(st.rx_packets, sent);
    assert!(got > 0);
    assert_eq!(
        pool.free_frames(),
        pool.frames() as usize,
        "every frame of the wire came back"
    );
}

/// A mem input wire's writer that has every frame of the wire in flight waits for consumers to
/// release some; once they have, the master (idle: nothing to read) hands them back at once,
/// not at its next 100 ms maintenance.
#[test]
fn a_mem_wire_writer_out_of_frames_gets_them_back_without_waiting_for_maintenance() {
    let cfg = ClusterConfig {
        apps: vec![1],
        slots: 256,
        frames: 256,
        ..Default::default()
    };
    let mut master = Master::anon(&cfg).unwrap();
    let (name, mut input) = input_wire(&mut master, "zc-stall");
    let threads = Threads::spawn(&master, 0, None).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let n = 4000u64;
    let writer = {
        let (name, stop) = (name.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut w = linerate::open_rx(&name, &Default::default()).unwrap();
            let pool = w.pool().unwrap().clone();
            let mut b = Batch::with_pool(&pool);
            let (mut sent, mut waits) = (0u64, Vec::new());
            let mut waiting: Option<std::time::Instant> = None;
            let t0 = std::time::Instant::now();
            while sent < n && t0.elapsed() < Duration::from_secs(5) {
                while sent + (b.len() as u64) < n {
                    let Some(mut fr) = b.alloc() else { break };
                    fr.buf()[..4].copy_from_slice(&(sent as u32).to_be_bytes());
                    fr.push(Desc {
                        len: 60,
                        wire_len: 60,
                        ..Default::default()
                    });
                }
                if b.is_empty() {
                    waiting.get_or_insert_with(std::time::Instant::now);
                    std::thread::sleep(Duration::from_micros(20));
                    continue;
                }
                if let Some(t) = waiting.take() {
                    waits.push(t.elapsed());
                }
                sent += b.len() as u64;
                w.tx(&mut b).unwrap();
            }
            stop.store(true, std::sync::atomic::Ordering::Release);
            (sent, waits, w.stats())
        })
    };
    let mut dist = Distributor::new(Mode::RoundRobin, &[1], LinkType::ETHERNET);
    let r = balance::run(&mut *input, &mut master, &mut dist, &opts(), &stop, |_| {});
    assert!(r.error.is_none());
    let (sent, mut waits, ws) = writer.join().unwrap();
    master.close();
    threads.join().unwrap();
    master.take_back();
    let st = master.stats();
    st.check_invariant().unwrap();
    waits.sort();
    eprintln!(
        "sent {sent}, waited {} times, median {:?}: {waits:?}; {ws:?}; {st:?}",
        waits.len(),
        waits.get(waits.len() / 2)
    );
    assert_eq!(sent, n, "the writer got frames back in time");
    assert!(!waits.is_empty(), "the writer ran out of frames at times");
    // Handed back at the 100 ms maintenance, a wait would last anywhere up to 100 ms (its
    // start falls anywhere in the period): half of them over 50 ms. Handed back at once, the
    // typical wait is the consumers' pace. The median, not the longest: one wait stretched by
    // a loaded machine descheduling a thread (61 ms seen at load 15) says nothing of when
    // frames come back.
    let median = waits[waits.len() / 2];
    assert!(
        median < Duration::from_millis(25),
        "the writer waited {median:?} (median) for frames consumers had released: {waits:?}"
    );
}

/// The master and its end of a mem input wire dropped while the writer still writes: the
/// writer's frames stay mapped (nothing crashes), and a writer waiting for frames that will
/// never come back learns that the master is gone instead of waiting forever.
#[test]
fn a_mem_wire_writer_outliving_its_master_is_told_and_ends() {
    let cfg = ClusterConfig {
        apps: vec![1],
        slots: 256,
        frames: 512,
        ..Default::default()
    };
    let mut master = Master::anon(&cfg).unwrap();
    let (name, mut input) = input_wire(&mut master, "zc-orphan");
    let threads = Threads::spawn(&master, 0, None).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let writer = {
        let name = name.clone();
        std::thread::spawn(move || {
            let mut w = linerate::open_rx(&name, &Default::default()).unwrap();
            let sent = balance::source::generate(
                w.as_mut(),
                16,
                Some(10_000_000),
                &AtomicBool::new(false),
            );
            // Frames of the dead master's segment are still writable.
            let mut b = Batch::with_pool(w.pool().unwrap());
            let err = loop {
                if let Some(mut fr) = b.alloc() {
                    fr.buf()[..60].fill(7);
                    fr.push(Desc {
                        len: 60,
                        wire_len: 60,
                        ..Default::default()
                    });
                }
                match w.tx(&mut b) {
                    Ok(_) => {}
                    Err(e) => break e.to_string(),
                }
            };
            let _ = tx.send((sent, err));
        })
    };
    let mut dist = Distributor::new(Mode::RoundRobin, &[1], LinkType::ETHERNET);
    let (mut batch, mut masks, mut read) = (Batch::new(), [1u64; 64], 0u64);
    let t0 = std::time::Instant::now();
    while read < 5000 && t0.elapsed() < Duration::from_secs(5) {
        if input.rx(&mut batch).unwrap() > 0 {
            read += batch.len() as u64;
            dist.masks(&mut batch, None, &mut masks);
            let len = batch.len();
            master.distribute(&mut batch, &masks[..len]);
            batch.clear();
        } else {
            master.idle();
        }
    }
    assert!(read >= 5000);
    master.close();
    threads.join().unwrap();
    drop(batch);
    drop(input);
    drop(master);
    let (sent, err) = rx
        .recv_timeout(Duration::from_secs(5))
        .expect("the writer ended once its master was gone");
    writer.join().unwrap();
    assert!((5000..10_000_000).contains(&sent), "{sent}");
    assert!(err.contains("gone"), "{err}");
}

/// A mem input wire's frames published to two queues at once (fan-out: a hold count each),
/// filtered, too long for `--max-pkt-len` (dropped, never cut), or left in the queue of a
/// consumer that went silent (reclaimed): each comes back to the wire once, and the master's
/// own frames stay its own.
#[test]
fn a_mem_wire_frames_shared_filtered_too_long_or_reclaimed_all_come_back() {
    let mut cfg = ClusterConfig {
        apps: vec![2],
        slots: 256,
        frames: 512,
        ..Default::default()
    };
    cfg.fit_packets(1000);
    let mut master = Master::anon(&cfg).unwrap();
    master.set_consumer_timeout(Some(Duration::from_millis(20)));
    let (name, mut input) = input_wire(&mut master, "zc-mix");
    let kept = master.free_frames();
    let mut w = linerate::open_rx(&name, &Default::default()).unwrap();
    let pool = w.pool().unwrap().clone();
    let (mut c0, mut c1) = (master.consumer(0).unwrap(), master.consumer(1).unwrap());
    let (mut wb, mut rb, mut b0, mut b1) = (
        Batch::with_pool(&pool),
        Batch::new(),
        Batch::new(),
        Batch::new(),
    );
    let mut masks = [0u64; 64];
    let (mut too_long, mut filtered, mut both, mut got0, mut got1) = (0u64, 0, 0, 0u64, 0u64);
    let mut i = 0u32;
    for round in 0..200 {
        while !wb.is_full() {
            let len = if i.is_multiple_of(9) { 1500 } else { 200 };
            let Some(mut fr) = wb.alloc() else { break };
            fr.buf()[..len].fill(i as u8);
            fr.buf()[..4].copy_from_slice(&i.to_be_bytes());
            fr.push(Desc {
                len: len as u32,
                wire_len: len as u32,
                ..Default::default()
            });
            i += 1;
        }
        w.tx(&mut wb).unwrap();
        while input.rx(&mut rb).unwrap() > 0 {
            for (k, d) in rb.descs().iter().enumerate() {
                let j = u32::from_be_bytes(rb.data(k)[..4].try_into().unwrap());
                masks[k] = match j % 4 {
                    0 => 0,
                    1 => 0b01,
                    2 => 0b10,
                    _ => 0b11,
                };
                filtered += u64::from(masks[k] == 0);
                if d.len > 1000 {
                    too_long += u64::from(masks[k] != 0);
                } else {
                    both += u64::from(masks[k] == 0b11);
                }
            }
            let len = rb.len();
            master.distribute(&mut rb, &masks[..len]);
            rb.clear();
        }
        b0.clear();
        got0 += c0.rx(&mut b0).unwrap() as u64;
        for p in b0.iter() {
            let j = u32::from_be_bytes(p.data[..4].try_into().unwrap());
            assert!(p.data.len() == 200 && p.data[4..].iter().all(|&x| x == j as u8));
        }
        // Queue 1's consumer reads the first rounds, then goes silent, holding its batch.
        if round < 100 {
            b1.clear();
            got1 += c1.rx(&mut b1).unwrap() as u64;
        }
    }
    b0.clear();
    while c0.rx(&mut b0).unwrap() > 0 {
        got0 += b0.len() as u64;
        b0.clear();
    }
    std::thread::sleep(Duration::from_millis(40));
    master.maintain();
    master.take_back();
    let st = master.stats();
    st.check_invariant().unwrap();
    eprintln!("{st:?}");
    assert_eq!(st.rx_packets, u64::from(i));
    assert_eq!(st.too_big, too_long);
    assert_eq!(st.filtered, filtered);
    assert!(
        both > 0 && got1 > 0 && st.queues[1].consumer_gone > 0,
        "{st:?}"
    );
    assert_eq!(st.copied_packets, 0);
    assert_eq!(st.queues[0].delivered, got0);
    drop((b1, c1));
    assert_eq!(
        pool.free_frames(),
        pool.frames() as usize,
        "every wire frame came back"
    );
    assert_eq!(
        master.free_frames(),
        kept,
        "the master's own frames are its own"
    );
}

/// `n` 60-byte packets for queue 0, in a batch of their own pool.
fn packets_for_queue_0(pool: &Arc<Pool>, n: usize) -> (Batch, Vec<u64>) {
    let mut b = Batch::new();
    b.bind(pool);
    for _ in 0..n {
        let mut fr = b.alloc().expect("frame");
        fr.buf()[..60].fill(0xab);
        fr.push(Desc {
            len: 60,
            wire_len: 60,
            ..Default::default()
        });
    }
    (b, vec![1u64; n])
}

/// A consumer asleep in `ClusterPort::wait` (its cap far away: 60 s) is woken by the master's
/// batch: not by one packet when it asked for four, then by the batch that makes four; and a
/// sleeping consumer is woken when the master closes the cluster.
#[test]
fn a_sleeping_consumer_is_woken_by_the_batch_it_waits_for_and_by_the_close() {
    let cfg = ClusterConfig {
        apps: vec![1],
        slots: 64,
        ..Default::default()
    };
    let mut master = Master::anon(&cfg).unwrap();
    let mut c = master.consumer(0).unwrap();
    c.set_wait_cap(Duration::from_secs(60));
    let pool = Arc::new(
        Pool::new(&PoolConfig {
            frames: 1024,
            ..Default::default()
        })
        .unwrap(),
    );
    let enough = Arc::new(AtomicBool::new(false));
    let seen = enough.clone();
    let closing = Arc::new(AtomicBool::new(false));
    let closing_seen = closing.clone();
    let reader = std::thread::spawn(move || {
        let mut b = Batch::new();
        assert_eq!(c.rx(&mut b).unwrap(), 0, "nothing yet");
        let t0 = std::time::Instant::now();
        c.wait(4, Duration::from_secs(60));
        let woken_after = t0.elapsed();
        let complete = seen.load(std::sync::atomic::Ordering::SeqCst);
        let before_close = !closing_seen.load(std::sync::atomic::Ordering::SeqCst);
        let mut got = 0;
        while got < 4 {
            got += c.rx(&mut b).unwrap();
            b.clear();
        }
        // Nothing more: the close wakes the next sleep.
        let t1 = std::time::Instant::now();
        c.wait(1, Duration::from_secs(60));
        let closed_after = t1.elapsed();
        assert_eq!(c.rx(&mut b).unwrap(), 0);
        (
            woken_after,
            complete,
            before_close,
            got,
            closed_after,
            c.is_finished(),
        )
    });
    // Give the reader time to fall asleep (it would not sleep at all if it came late: the
    // test then checks only that it read the packets).
    std::thread::sleep(Duration::from_millis(200));
    let (mut b, m) = packets_for_queue_0(&pool, 1);
    master.distribute(&mut b, &m);
    std::thread::sleep(Duration::from_millis(200));
    enough.store(true, std::sync::atomic::Ordering::SeqCst);
    let (mut b, m) = packets_for_queue_0(&pool, 3);
    master.distribute(&mut b, &m);
    std::thread::sleep(Duration::from_millis(200));
    closing.store(true, std::sync::atomic::Ordering::SeqCst);
    master.close();
    let (woken_after, complete, before_close, got, closed_after, finished) = reader.join().unwrap();
    assert!(complete, "not woken by one packet of the four it waits for");
    assert!(before_close, "woken by the batch, not by the close");
    assert!(
        woken_after < Duration::from_secs(30),
        "woken by the batch, long before its cap ({woken_after:?})"
    );
    assert_eq!(got, 4);
    assert!(
        closed_after < Duration::from_secs(30),
        "woken by the close ({closed_after:?})"
    );
    assert!(finished, "the closed cluster's queue ends");
}

/// A consumer that still holds part of what it read (its batch was full: it knows of 6 more
/// packets) and asks to sleep until 32 wait, while the master has meanwhile published 40 more
/// without waking anybody (nobody slept then): the wait looks at the queue's head afresh after
/// setting its word, sees 46, and does not sleep (a count remembered from the last read would
/// have put it to sleep until its cap, 60 s here: a lost wake-up).
#[test]
fn a_consumer_that_knows_of_a_few_packets_does_not_sleep_on_more_that_came_since() {
    let cfg = ClusterConfig {
        apps: vec![1],
        slots: 128,
        ..Default::default()
    };
    let mut master = Master::anon(&cfg).unwrap();
    let mut c = master.consumer(0).unwrap();
    c.set_wait_cap(Duration::from_secs(60));
    let pool = Arc::new(
        Pool::new(&PoolConfig {
            frames: 1024,
            ..Default::default()
        })
        .unwrap(),
    );
    for n in [64, 6] {
        let (mut b, m) = packets_for_queue_0(&pool, n);
        master.distribute(&mut b, &m);
    }
    let mut b = Batch::new();
    assert_eq!(c.rx(&mut b).unwrap(), 64, "a full batch: 6 more known");
    b.clear();
    let (mut more, m) = packets_for_queue_0(&pool, 40);
    master.distribute(&mut more, &m);
    let t0 = std::time::Instant::now();
    c.wait(32, Duration::from_secs(60));
    let slept = t0.elapsed();
    assert!(
        slept < Duration::from_secs(30),
        "46 packets wait, 32 asked for: no sleep ({slept:?})"
    );
    let mut got = 0;
    while got < 46 {
        let n = c.rx(&mut b).unwrap();
        assert!(n > 0, "the 46 packets are there ({got} read)");
        got += n;
        b.clear();
    }
    assert_eq!(got, 46);
}

/// Lost wake-ups, hunted: a reader that drains its queue and then sleeps until `W` packets
/// wait (its cap 10 s away), and a master that sends bursts of `W - 1` then 1, of `W`, and of
/// `W + 1`, each after a pause of a different length (0 to 10 µs of spinning, in steps of
/// 250 ns, so that it lands anywhere in the reader's way from its last read into the futex). After each burst that
/// brings the queue to `W` or more, the reader has every packet within 2 s, far below its
/// cap: a wake-up lost in any of those places would leave it asleep for 10 s. A burst of
/// `W - 1` alone never wakes it (asked: the reader counts its wake-ups by what it then read).
#[test]
fn bursts_of_w_minus_1_w_and_w_plus_1_never_leave_the_reader_asleep_on_enough() {
    use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
    const W: usize = 8;
    const ROUNDS: usize = 2000;
    let cfg = ClusterConfig {
        apps: vec![1],
        slots: 64, // a quarter: W = 16 at most
        ..Default::default()
    };
    let mut master = Master::anon(&cfg).unwrap();
    let mut c = master.consumer(0).unwrap();
    c.set_wait_cap(Duration::from_secs(10));
    let pool = Arc::new(
        Pool::new(&PoolConfig {
            frames: 1024,
            ..Default::default()
        })
        .unwrap(),
    );
    let got = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let (g, d) = (got.clone(), done.clone());
    let reader = std::thread::spawn(move || {
        let mut b = Batch::new();
        while !d.load(SeqCst) {
            let n = c.rx(&mut b).unwrap();
            b.clear();
            if n > 0 {
                g.fetch_add(n as u64, SeqCst);
                continue;
            }
            c.wait(W, Duration::from_secs(10));
        }
    });
    let mut sent = 0u64;
    let spin = |ns: u64| {
        let t = std::time::Instant::now();
        while t.elapsed() < Duration::from_nanos(ns) {
            std::hint::spin_loop();
        }
    };
    for round in 0..ROUNDS {
        for sizes in [&[W - 1, 1][..], &[W], &[W + 1]] {
            for (k, &n) in sizes.iter().enumerate() {
                if k > 0 {
                    // The reader asleep on W - 1: let it be, then complete the W.
                    spin(200_000);
                }
                // The packets ready before the pause: the pause alone decides when they come.
                let (mut b, m) = packets_for_queue_0(&pool, n);
                spin((round % 41) as u64 * 250);
                master.distribute(&mut b, &m);
                sent += n as u64;
            }
            // The reader may have read part of a burst while awake and be asleep on the rest
            // (fewer than W): rightly, until more come. Never on W or more.
            let t0 = std::time::Instant::now();
            while sent - got.load(SeqCst) >= W as u64 {
                assert!(
                    t0.elapsed() < Duration::from_secs(2),
                    "round {round}, bursts {sizes:?}: the reader has {} of {sent} packets \
                     after 2 s (asleep with W or more waiting: a lost wake-up)",
                    got.load(SeqCst)
                );
                // Spin (no syscall): the next burst follows the reader's last read closely.
                std::hint::spin_loop();
            }
        }
    }
    // A last W: everything is read.
    let (mut b, m) = packets_for_queue_0(&pool, W);
    master.distribute(&mut b, &m);
    sent += W as u64;
    let t0 = std::time::Instant::now();
    while got.load(SeqCst) < sent {
        assert!(t0.elapsed() < Duration::from_secs(2), "the last W read");
        std::thread::yield_now();
    }
    done.store(true, SeqCst);
    master.close();
    reader.join().unwrap();
    assert_eq!(got.load(SeqCst), sent);
}

/// Full batches (64 packets: the input keeps up) are published without the fence between the
/// head store and the look at a sleeping reader's word (`Master::wake_readers`): the look after
/// a fence waits for the 8th batch, a batch short of full, or the master loop's idle poll
/// (`Master::idle`). A reader that fell asleep on `W` (two batches; its cap far away: 10 s) at
/// any moment of bursts of one, two and three full batches, each after a pause of 0 to 10 µs,
/// has every packet within 2 s of the master going idle: no wake-up is lost for good.
#[test]
fn full_batches_published_without_the_fence_leave_no_reader_asleep_once_the_master_idles() {
    use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
    const W: usize = 2 * BATCH;
    const ROUNDS: usize = 300;
    let cfg = ClusterConfig {
        apps: vec![1],
        slots: 1024, // a quarter: 256, W fits
        ..Default::default()
    };
    let mut master = Master::anon(&cfg).unwrap();
    let mut c = master.consumer(0).unwrap();
    c.set_wait_cap(Duration::from_secs(10));
    let pool = Arc::new(
        Pool::new(&PoolConfig {
            frames: 1024,
            ..Default::default()
        })
        .unwrap(),
    );
    let got = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let (g, d) = (got.clone(), done.clone());
    let reader = std::thread::spawn(move || {
        let mut b = Batch::new();
        while !d.load(SeqCst) {
            let n = c.rx(&mut b).unwrap();
            b.clear();
            if n > 0 {
                g.fetch_add(n as u64, SeqCst);
                continue;
            }
            c.wait(W, Duration::from_secs(10));
        }
    });
    let spin = |ns: u64| {
        let t = std::time::Instant::now();
        while t.elapsed() < Duration::from_nanos(ns) {
            std::hint::spin_loop();
        }
    };
    let mut sent = 0u64;
    for round in 0..ROUNDS {
        for batches in 1..=3 {
            for _ in 0..batches {
                let (mut b, m) = packets_for_queue_0(&pool, BATCH);
                spin((round % 41) as u64 * 250);
                master.distribute(&mut b, &m);
                sent += BATCH as u64;
            }
            // The master's loop, nothing more to distribute: its idle polls.
            let t0 = std::time::Instant::now();
            while sent - got.load(SeqCst) >= W as u64 {
                assert!(
                    t0.elapsed() < Duration::from_secs(2),
                    "round {round}, {batches} full batches: the reader has {} of {sent} \
                     packets after 2 s of idle polls (asleep with W or more waiting)",
                    got.load(SeqCst)
                );
                master.idle();
                std::hint::spin_loop();
            }
        }
    }
    done.store(true, SeqCst);
    master.close();
    reader.join().unwrap();
    assert!(got.load(SeqCst) <= sent);
    assert!(sent - got.load(SeqCst) < W as u64);
}

/// A consumer asleep on an idle queue (`ClusterPort::wait`, its 20 ms cap) is waiting, not
/// hung: with a consumer timeout of 300 ms (`balance --consumer-timeout`), a master that checks
/// its consumers every 50 ms for 1.5 s does not take the queue back, and the packet that comes
/// then is read. (Its heartbeat, written every 64 receive calls, would be 1.3 s old between
/// two: the wait writes it before each sleep.)
#[test]
fn a_consumer_asleep_on_an_idle_queue_is_not_declared_gone_by_the_consumer_timeout() {
    use std::sync::atomic::Ordering::SeqCst;
    let cfg = ClusterConfig {
        apps: vec![1],
        slots: 64,
        ..Default::default()
    };
    let mut master = Master::anon(&cfg).unwrap();
    master.set_consumer_timeout(Some(Duration::from_millis(300)));
    let mut c = master.consumer(0).unwrap();
    let pool = Arc::new(
        Pool::new(&PoolConfig {
            frames: 1024,
            ..Default::default()
        })
        .unwrap(),
    );
    let done = Arc::new(AtomicBool::new(false));
    let d = done.clone();
    let reader = std::thread::spawn(move || {
        let mut b = Batch::new();
        let mut got = 0usize;
        let t0 = std::time::Instant::now();
        while got == 0 && !d.load(SeqCst) && t0.elapsed() < Duration::from_secs(20) {
            match c.rx(&mut b) {
                Ok(0) => c.wait(1, Duration::from_secs(1)),
                Ok(n) => got += n,
                Err(e) => return Err(e.to_string()),
            }
            b.clear();
        }
        Ok(got)
    });
    let t0 = std::time::Instant::now();
    while t0.elapsed() < Duration::from_millis(1500) {
        master.maintain();
        std::thread::sleep(Duration::from_millis(50));
    }
    let (mut b, m) = packets_for_queue_0(&pool, 1);
    master.distribute(&mut b, &m);
    let t1 = std::time::Instant::now();
    while !reader.is_finished() && t1.elapsed() < Duration::from_secs(5) {
        master.maintain();
        std::thread::sleep(Duration::from_millis(10));
    }
    done.store(true, SeqCst);
    master.close();
    let got = reader.join().unwrap();
    assert_eq!(
        got,
        Ok(1),
        "the sleeping consumer kept its queue and read the packet"
    );
}

/// `pcap_breakloop` from another thread: the port's waker (`Port::rx_waker`) ends a consumer's
/// sleep in `ClusterPort::wait` (its cap 60 s away, no packet coming) at once.
#[test]
fn the_ports_waker_ends_a_sleep_from_another_thread() {
    let cfg = ClusterConfig {
        apps: vec![1],
        slots: 64,
        ..Default::default()
    };
    let master = Master::anon(&cfg).unwrap();
    let mut c = master.consumer(0).unwrap();
    c.set_wait_cap(Duration::from_secs(60));
    let waker = c.rx_waker().expect("a cluster queue has a waker");
    let reader = std::thread::spawn(move || {
        let mut b = Batch::new();
        assert_eq!(c.rx(&mut b).unwrap(), 0);
        let t0 = std::time::Instant::now();
        c.wait(1, Duration::from_secs(60));
        t0.elapsed()
    });
    // Let the reader fall asleep (and wake it again every 100 ms: a wake before it set its
    // word is not kept).
    std::thread::sleep(Duration::from_millis(300));
    let t0 = std::time::Instant::now();
    while !reader.is_finished() && t0.elapsed() < Duration::from_secs(30) {
        waker.wake();
        std::thread::sleep(Duration::from_millis(100));
    }
    let slept = reader.join().unwrap();
    assert!(
        slept < Duration::from_secs(30),
        "woken by the waker, not at its cap ({slept:?})"
    );
    drop(master);
}

/// A wake that comes before the reader sets its futex word (`pcap_breakloop` between the read
/// loop's look at its flag and its sleep) is not lost: the next wait does not sleep (its cap is
/// 60 s), once; the wait after that sleeps again until what it waits for comes.
#[test]
fn a_wake_before_the_sleep_is_kept_for_the_next_wait() {
    let cfg = ClusterConfig {
        apps: vec![1],
        slots: 64,
        ..Default::default()
    };
    let master = Master::anon(&cfg).unwrap();
    let mut c = master.consumer(0).unwrap();
    c.set_wait_cap(Duration::from_secs(60));
    let waker = c.rx_waker().expect("a cluster queue has a waker");
    let mut b = Batch::new();
    assert_eq!(c.rx(&mut b).unwrap(), 0);
    waker.wake();
    let t0 = std::time::Instant::now();
    c.wait(1, Duration::from_secs(60));
    let slept = t0.elapsed();
    assert!(
        slept < Duration::from_secs(30),
        "the earlier wake kept: no sleep ({slept:?})"
    );
    let t1 = std::time::Instant::now();
    c.wait(1, Duration::from_millis(300));
    assert!(
        t1.elapsed() >= Duration::from_millis(250),
        "kept once: this wait sleeps its timeout ({:?})",
        t1.elapsed()
    );
    drop(master);
}

/// Lent batches whose packets each go to one queue are published in place (no copy, no
/// reference count: not shared), one queue taking a whole batch straight from the batch's
/// descriptors, several queues each their own packets in order; a batch that overfills a queue
/// is handled packet by packet (what fits is published, the rest counted as ring_full), and
/// every frame comes back once the consumers release.
#[test]
fn lent_batches_to_one_queue_each_are_published_in_place_and_overflow_counts_ring_full() {
    for apps in [vec![1u32], vec![3]] {
        let nq = apps[0] as usize;
        let cfg = ClusterConfig {
            apps: apps.clone(),
            slots: 64,
            ..Default::default()
        };
        let mut master = Master::anon(&cfg).unwrap();
        let all_free = master.free_frames();
        let mut cs: Vec<_> = (0..nq).map(|q| master.consumer(q).unwrap()).collect();
        let flows = 5;
        let mut src = SourcePort::new(flows, None).unwrap();
        let mut dist = Distributor::new(Mode::Ip, &apps, LinkType::ETHERNET);
        let (mut batch, mut masks) = (Batch::new(), [0u64; linerate::mem::BATCH]);
        let mut sent = 0u64;
        // Three batches with nobody reading: the first fits every queue (64 slots each), the
        // next ones overfill them.
        for _ in 0..3 {
            assert!(master.lend_frames(&mut batch));
            let k = src.rx(&mut batch).unwrap();
            dist.masks(&mut batch, None, &mut masks);
            master.distribute(&mut batch, &masks[..k]);
            assert_eq!(batch.len(), 0, "the master owns the lent frames again");
            sent += k as u64;
        }
        master.unlend_frames(&mut batch);
        let st = master.stats();
        st.check_invariant().unwrap();
        assert_eq!(st.rx_packets, sent);
        assert_eq!(st.copied_packets, 0, "in place: nothing copied ({st:?})");
        let enq: u64 = st.queues.iter().map(|q| q.enqueued).sum();
        let full: u64 = st.queues.iter().map(|q| q.ring_full).sum();
        assert_eq!(enq + full, sent, "{st:?}");
        assert!(full > 0, "three batches into 64 slots: {st:?}");
        for (q, c) in cs.iter_mut().enumerate() {
            let mut b = Batch::new();
            let mut got = 0u64;
            let mut seen = std::collections::HashSet::new();
            while c.rx(&mut b).unwrap() > 0 {
                for p in b.iter() {
                    assert_eq!(p.desc.flags & Desc::F_SHARED, 0, "one queue: not shared");
                    let h = balance::hash(Mode::Ip, p.data, LinkType::ETHERNET);
                    assert_eq!(p.desc.hash, h);
                    assert_eq!(h as usize % nq, q, "packet in the queue of its hash");
                    assert!(seen.insert(p.desc.addr), "a frame published twice");
                    assert!((0..flows).any(|f| p.data == &balance::source::frame(f, flows)[..]));
                    got += 1;
                }
                b.clear();
            }
            assert_eq!(got, st.queues[q].enqueued, "queue {q}");
            c.rx(&mut Batch::new()).unwrap();
        }
        master.distribute(&mut Batch::new(), &[]);
        assert_eq!(master.free_frames(), all_free, "every frame came back");
    }
}

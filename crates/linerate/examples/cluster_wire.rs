//! A writer thread feeding a zero-copy cluster through a `mem:` wire, like an application that
//! builds packets and hands them to PF_RING ZC's zbalance: the master opens the wire with
//! `open_cluster_input`, so the writer allocates from the segment's own frames and the master
//! publishes them as they are. `copy` opens the wire before the master instead: the writer
//! has its own frames and the master copies each packet into the segment (the way every wire
//! went before). One consumer thread counts what it receives.
//!
//!   cargo run --release --example cluster_wire -- [PACKETS] [share|copy]
//!
//! Prints the packets sent, dropped by the wire (its ring full), read by the master, delivered
//! and dropped by the master, the copies the master made, the master's rate (first read to
//! last) and the delivered rate (first read to the consumer's end). bench/wire-ab.sh runs both
//! ways interleaved.
use linerate::apps::balance::{source, Distributor, Mode};
use linerate::cluster::{ClusterConfig, Master};
use linerate::mem::{Batch, BATCH};
use linerate::port::{LinkType, Port, PortOptions};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let count: u64 = args.next().map_or(Ok(5_000_000), |s| s.parse())?;
    let copy = match args.next().as_deref() {
        None | Some("share") => false,
        Some("copy") => true,
        Some(o) => return Err(format!("'{o}': give share or copy").into()),
    };
    let name = format!("mem:cluster-wire-{}", std::process::id());
    let cfg = ClusterConfig::default();
    let mut master = Master::anon(&cfg)?;
    let early = copy.then(|| linerate::open_rx(&name, &PortOptions::default()));
    let (mut input, note) =
        linerate::open_cluster_input(&name, &PortOptions::default(), &mut master)?;
    if let Some(n) = note {
        eprintln!("note: {n}");
    }
    let mut writer = match early {
        Some(w) => w?,
        None => linerate::open_rx(&name, &PortOptions::default())?,
    };
    let mut port = master.consumer(0)?;
    let consumer = std::thread::spawn(move || -> Result<u64, String> {
        let (mut batch, mut got) = (Batch::new(), 0u64);
        loop {
            match port.rx(&mut batch).map_err(|e| e.to_string())? {
                0 if port.is_finished() => return Ok(got),
                0 => std::thread::sleep(Duration::from_micros(20)),
                n => got += n as u64,
            }
            batch.clear();
        }
    });
    let done = Arc::new(AtomicBool::new(false));
    let w = {
        let done = done.clone();
        std::thread::spawn(move || {
            let sent = source::generate(writer.as_mut(), 256, Some(count), &AtomicBool::new(false));
            done.store(true, Ordering::Release);
            (sent, writer.stats().tx_drops.total())
        })
    };
    let mut dist = Distributor::new(Mode::Ip, &[1], LinkType::ETHERNET);
    let (mut batch, mut masks, mut read) = (Batch::new(), [0u64; BATCH], 0u64);
    let mut first = None;
    let mut idle = 0u32;
    loop {
        let n = input.rx(&mut batch)?;
        if n > 0 {
            first.get_or_insert_with(Instant::now);
            idle = 0;
            read += n as u64;
            dist.masks(&mut batch, None, &mut masks);
            let len = batch.len();
            master.distribute(&mut batch, &masks[..len]);
            batch.clear();
        } else if done.load(Ordering::Acquire) {
            idle += 1;
            if idle > 1000 {
                break;
            }
        } else {
            master.distribute(&mut batch, &[]);
            std::hint::spin_loop();
        }
    }
    let master_secs = first.map_or(0.0, |t| t.elapsed().as_secs_f64());
    let (sent, wire_dropped) = w.join().map_err(|_| "writer panicked")?;
    master.close();
    let got = consumer.join().map_err(|_| "consumer panicked")??;
    let secs = first.map_or(0.0, |t| t.elapsed().as_secs_f64());
    master.take_back();
    let s = master.stats();
    std::thread::sleep(Duration::from_millis(1));
    println!(
        "{} sent {sent} wire_dropped {wire_dropped} read {read} delivered {got} dropped {} \
         copied {} secs {secs:.3} \
         master_mpps {:.2} delivered_mpps {:.2}",
        if copy { "copy" } else { "share" },
        s.drops().total(),
        s.copied_packets,
        read as f64 / master_secs.max(1e-9) / 1e6,
        got as f64 / secs.max(1e-9) / 1e6
    );
    Ok(())
}

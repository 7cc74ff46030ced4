//! A zero-copy cluster in one process, like PF_RING ZC's zbalance with consumer threads: a master
//! reads a port and distributes its packets by a symmetric 5-tuple hash to N queues of a shared
//! segment; one consumer thread per queue receives them through the same Port/Batch API as any
//! other port. Every packet ends up delivered or counted as dropped, with the reason.
//!
//!   cargo run --release --example cluster -- [PORT] [QUEUES]
//!
//! A cluster in /dev/shm (`Master::create`) is read the same way from other processes, by
//! opening `cluster:ID@Q` with `linerate::open_rx`.
use linerate::apps::balance::{Distributor, Mode};
use linerate::cluster::{ClusterConfig, Master};
use linerate::mem::{Batch, BATCH};
use linerate::open_rx;
use linerate::port::{DropReason, Port, PortOptions};
use std::time::Duration;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let uri = args.next().unwrap_or_else(|| {
        format!(
            "pcap:{}/../../examples/sample.pcap",
            env!("CARGO_MANIFEST_DIR")
        )
    });
    let queues: u32 = args.next().map_or(Ok(2), |s| s.parse())?;
    let cfg = ClusterConfig {
        apps: vec![queues],
        ..ClusterConfig::default()
    };
    let mut master = Master::anon(&cfg)?;
    let mut consumers = Vec::new();
    for q in 0..queues as usize {
        let mut port = master.consumer(q)?;
        consumers.push(std::thread::spawn(move || -> Result<u64, String> {
            let mut batch = Batch::new();
            let mut got = 0u64;
            loop {
                match port.rx(&mut batch).map_err(|e| e.to_string())? {
                    0 if port.is_finished() => return Ok(got), // master closed, queue drained
                    0 => std::thread::sleep(Duration::from_micros(20)),
                    n => got += n as u64, // a real consumer looks at batch.iter() here
                }
                batch.clear(); // releases the slots back to the master
            }
        }));
    }
    let mut input = open_rx(&uri, &PortOptions::default())?;
    let mut dist = Distributor::new(Mode::FiveTuple, &cfg.apps, input.link_type());
    let (mut batch, mut masks, mut read) = (Batch::new(), [0u64; BATCH], 0u64);
    loop {
        match input.rx(&mut batch)? {
            0 if input.is_finished() => break,
            0 => std::thread::sleep(Duration::from_micros(20)),
            n => {
                read += n as u64;
                dist.masks(&mut batch, None, &mut masks); // one bit per destination queue
                let len = batch.len();
                master.distribute(&mut batch, &masks[..len]);
            }
        }
        batch.clear();
    }
    master.close();
    for (q, c) in consumers.into_iter().enumerate() {
        let got = c.join().map_err(|_| "consumer panicked")??;
        println!("queue {q}: {got} packets");
    }
    master.take_back(); // anything still queued is now counted, so the totals are final
    let s = master.stats();
    print!(
        "read {read}, delivered {}, dropped {}",
        s.delivered(),
        s.drops().total()
    );
    for r in DropReason::ALL
        .into_iter()
        .filter(|&r| s.drops().get(r) > 0)
    {
        print!(" {}={}", r.name(), s.drops().get(r));
    }
    println!();
    Ok(())
}

//! The cluster master's CPU cost per packet on one core, measured in CPU time rather than
//! wall time, so that a machine shared with other work still gives comparable figures: the
//! built-in source received into lent frames, the ip hash, `distribute` to one queue, and that
//! queue's consumer reading each packet's IPv4 destination and releasing the batch, all in one
//! thread, batch after batch. Rounds alternate the frames' stagger off and on
//! (`Master::stagger_lent_frames`) and print each round's ns per packet and the medians.
//!
//!   cargo run --release -p linerate --example cluster_cost -- [ROUNDS] [PACKETS]
use linerate::apps::balance::source::{SourcePort, FRAME_LEN};
use linerate::apps::balance::{Distributor, Mode};
use linerate::cluster::{ClusterConfig, Master};
use linerate::mem::{Batch, BATCH};
use linerate::port::{LinkType, Port};

/// This thread's time on a CPU so far, in ns (the first field of its schedstat).
fn cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// CPU ns per packet of `packets` packets through a fresh cluster, its lent frames staggered
/// or not.
fn round(packets: u64, staggered: bool) -> Result<f64, Box<dyn std::error::Error>> {
    let mut cfg = ClusterConfig::default();
    cfg.fit_packets(130_944); // balance's default --max-pkt-len
    let mut master = Master::anon(&cfg)?;
    master.stagger_lent_frames(if staggered { FRAME_LEN } else { usize::MAX });
    let mut c = master.consumer(0)?;
    let mut src = SourcePort::new(1024, None)?;
    let mut dist = Distributor::new(Mode::Ip, &[1], LinkType::ETHERNET);
    let (mut batch, mut got, mut masks) = (Batch::new(), Batch::new(), [0u64; BATCH]);
    let mut sum = 0u64;
    let mut run = |n: u64, sum: &mut u64| -> Result<(), Box<dyn std::error::Error>> {
        let mut done = 0u64;
        while done < n {
            master.lend_frames(&mut batch);
            let k = src.rx(&mut batch)?;
            dist.masks(&mut batch, None, &mut masks);
            master.distribute(&mut batch, &masks[..k]);
            batch.clear();
            c.rx(&mut got)?;
            for p in got.iter() {
                *sum += u64::from(p.data.get(33).copied().unwrap_or(0));
            }
            got.clear();
            done += k as u64;
        }
        Ok(())
    };
    run(packets / 10, &mut sum)?; // warm: every frame touched once
    let t0 = cpu_ns();
    run(packets, &mut sum)?;
    let t = cpu_ns() - t0;
    std::hint::black_box(sum);
    master.unlend_frames(&mut batch);
    Ok(t as f64 / packets as f64)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().map_or(Ok(9), |s| s.parse())?;
    let packets: u64 = args.next().map_or(Ok(4_000_000), |s| s.parse())?;
    let (mut off, mut on) = (Vec::new(), Vec::new());
    for r in 0..rounds {
        // Both orders, so neither setting always runs second.
        for staggered in [r % 2 == 1, r % 2 == 0] {
            let ns = round(packets, staggered)?;
            println!("round {r} staggered {staggered}: {ns:.2} ns/packet");
            if staggered { &mut on } else { &mut off }.push(ns);
        }
    }
    println!(
        "median of {rounds}: not staggered {:.2}, staggered {:.2} ns/packet (CPU time)",
        median(&mut off),
        median(&mut on)
    );
    Ok(())
}

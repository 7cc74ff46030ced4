//! What `balance`'s distributor costs per packet, alone: `Distributor::masks` over batches of
//! 64 frames of the built-in source (256 flows, 64 B), for each hashing mode and round-robin,
//! on one core, the frames hot in cache. The cluster rows of BENCHMARKS.md include it; this
//! separates it from the rest of the master for an A/B of a change to the hashes.
//!
//!   cargo run --release --example hash_batch -- [BATCHES]
use linerate::apps::balance::{source::SourcePort, Distributor, Mode};
use linerate::mem::{Batch, BATCH};
use linerate::port::{LinkType, Port};
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let batches: u64 = std::env::args()
        .nth(1)
        .map_or(Ok(2_000_000), |s| s.parse())?;
    let mut src = SourcePort::new(256, None)?;
    let mut ring: Vec<Batch> = (0..16).map(|_| Batch::new()).collect();
    for b in ring.iter_mut() {
        src.rx(b)?;
    }
    for mode in [Mode::Ip, Mode::FiveTuple, Mode::Toeplitz, Mode::RoundRobin] {
        let mut dist = Distributor::new(mode, &[4], LinkType::ETHERNET);
        let mut out = [0u64; BATCH];
        let mut acc = 0u64;
        let t = Instant::now();
        for i in 0..batches {
            let b = &mut ring[i as usize % 16];
            dist.masks(b, None, &mut out);
            acc = acc.wrapping_add(out[i as usize % BATCH]);
        }
        let ns = t.elapsed().as_nanos() as f64 / (batches * BATCH as u64) as f64;
        println!("{:<12} {ns:6.2} ns/packet (check {acc})", mode.name());
    }
    Ok(())
}

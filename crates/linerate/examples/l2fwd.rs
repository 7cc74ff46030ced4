//! DPDK's l2fwd on linerate's Port/Batch API: packets received on one port leave by the other
//! with the MAC addresses rewritten (destination 02:00:00:00:00:<out port>, source the out port's
//! number), in batches, with l2fwd's statistics at the end.
//!
//!   cargo run --release --example l2fwd -- PORT0 PORT1 [SECONDS]
//!
//! Ports are URIs: `afpacket:veth0 afpacket:veth1`, `xdp:eth1 xdp:eth2`, or a capture file in and
//! one out (`pcap:in.pcap pcap:out.pcap`: a file only receives or only sends, so one direction).
use linerate::mem::Batch;
use linerate::open;
use linerate::port::{Direction, Port, PortError, PortOptions};
use std::time::{Duration, Instant};

#[derive(Default)]
struct Counters {
    received: u64,
    sent: u64,
    dropped: u64,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [a, b] = [args.first(), args.get(1)].map(|u| u.ok_or("usage: l2fwd PORT0 PORT1 [SECONDS]"));
    let limit = Duration::from_secs(args.get(2).map_or(Ok(5), |s| s.parse())?);
    let opts = PortOptions::default();
    let mut ports: [Box<dyn Port>; 2] = [
        open(a?, &opts, Direction::Rx)?,
        open(b?, &opts, Direction::Tx)?,
    ];
    let mut stats = [Counters::default(), Counters::default()];
    let mut receives = [true, true]; // a port that cannot receive (a file being written) is skipped
    let mut batch = Batch::new();
    let start = Instant::now();
    while start.elapsed() < limit {
        let mut moved = 0;
        for (i, o) in [(0, 1), (1, 0)] {
            if !receives[i] {
                continue;
            }
            let n = match ports[i].rx(&mut batch) {
                Ok(n) => n,
                Err(PortError::Unsupported { .. }) => {
                    receives[i] = false;
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            if n == 0 {
                continue;
            }
            stats[i].received += n as u64;
            for k in 0..batch.len() {
                let d = batch.data_mut(k); // empty if the frame is shared: then left as it is
                if d.len() >= 12 {
                    d[..6].copy_from_slice(&[0x02, 0, 0, 0, 0, o as u8]);
                    d[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0xff, o as u8]);
                }
            }
            stats[o].sent += ports[o].tx(&mut batch)? as u64;
            stats[o].dropped += batch.len() as u64; // what the out port did not take: dropped
            batch.clear();
            moved += n;
        }
        if moved == 0 {
            if (0..2).all(|i| !receives[i] || ports[i].is_finished()) {
                break;
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }
    for p in ports.iter_mut() {
        p.flush()?;
    }
    println!("\nPort statistics ====================================");
    for (i, s) in stats.iter().enumerate() {
        println!("Statistics for port {i} ------------------------------");
        println!("Packets sent: {:>24}", s.sent);
        println!("Packets received: {:>20}", s.received);
        println!("Packets dropped: {:>21}", s.dropped);
    }
    println!("Aggregate statistics ===============================");
    let sum = |f: fn(&Counters) -> u64| stats.iter().map(f).sum::<u64>();
    println!("Total packets sent: {:>18}", sum(|s| s.sent));
    println!("Total packets received: {:>14}", sum(|s| s.received));
    println!("Total packets dropped: {:>15}", sum(|s| s.dropped));
    Ok(())
}

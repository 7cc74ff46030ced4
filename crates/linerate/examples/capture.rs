//! A capture loop on linerate's Port/Batch API, like PF_RING's pfcount: open a port, receive
//! batches of up to 64 packets, look at each, give the frames back, print a summary.
//!
//!   cargo run --release --example capture -- [PORT] [SECONDS]
//!
//! PORT is any port URI (`afpacket:eth0`, `xdp:eth0`, `cluster:10@0`, `pcap:file.pcap`); the
//! default reads the sample capture in examples/. Live ports stop after SECONDS (default 5).
use linerate::mem::Batch;
use linerate::open_rx;
use linerate::port::{DropReason, PortOptions};
use linerate::wire::{parse, proto};
use std::time::{Duration, Instant};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let uri = args.next().unwrap_or_else(|| {
        format!(
            "pcap:{}/../../examples/sample.pcap",
            env!("CARGO_MANIFEST_DIR")
        )
    });
    let limit = Duration::from_secs(args.next().map_or(Ok(5), |s| s.parse())?);
    let mut port = open_rx(&uri, &PortOptions::default())?;
    let mut batch = Batch::new();
    let (mut packets, mut bytes, mut tcp, mut udp) = (0u64, 0u64, 0u64, 0u64);
    let start = Instant::now();
    while start.elapsed() < limit {
        if port.rx(&mut batch)? == 0 {
            if port.is_finished() {
                break;
            }
            std::thread::sleep(Duration::from_micros(50)); // nothing now: a real tool polls
            continue;
        }
        for p in batch.iter() {
            packets += 1;
            bytes += u64::from(p.desc.wire_len);
            match parse(p.data, port.link_type()).proto {
                proto::TCP => tcp += 1,
                proto::UDP => udp += 1,
                _ => {}
            }
        }
        batch.clear(); // the frames go back to the port's pool
    }
    let s = port.stats();
    println!("{uri}: {packets} packets, {bytes} bytes ({tcp} TCP, {udp} UDP)");
    print!("dropped: {}", s.rx_drops.total());
    for r in DropReason::ALL
        .into_iter()
        .filter(|&r| s.rx_drops.get(r) > 0)
    {
        print!(" {}={}", r.name(), s.rx_drops.get(r));
    }
    println!();
    Ok(())
}

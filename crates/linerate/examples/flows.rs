//! A flow counter on linerate's Port/Batch API and its header parser, like a minimal Argus:
//! both directions of a conversation are one flow (a canonical, direction-independent key),
//! with packets and bytes each way; prints the largest flows.
//!
//!   cargo run --release --example flows -- [PORT] [TOP]
//!
//! `linerate flows` is the full tool (timeouts, TCP state, IPFIX, Kafka, threads); this shows
//! the pieces it is made of.
use linerate::mem::Batch;
use linerate::open_rx;
use linerate::port::PortOptions;
use linerate::wire::{parse, Direction, FlowKey};
use std::collections::HashMap;
use std::time::Duration;

#[derive(Default)]
struct Flow {
    packets: [u64; 2], // [forward, reverse]
    bytes: [u64; 2],
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let uri = args.next().unwrap_or_else(|| {
        format!(
            "pcap:{}/../../examples/sample.pcap",
            env!("CARGO_MANIFEST_DIR")
        )
    });
    let top: usize = args.next().map_or(Ok(10), |s| s.parse())?;
    let mut port = open_rx(&uri, &PortOptions::default())?;
    let mut flows: HashMap<FlowKey, Flow> = HashMap::new();
    let (mut batch, mut other) = (Batch::new(), 0u64);
    loop {
        if port.rx(&mut batch)? == 0 {
            if port.is_finished() {
                break;
            }
            std::thread::sleep(Duration::from_micros(50));
            continue;
        }
        for p in batch.iter() {
            let Some(key) = FlowKey::from_parsed(&parse(p.data, port.link_type())) else {
                other += 1; // not IP (ARP, LLDP, ...) or cut before the addresses
                continue;
            };
            let (key, dir) = key.canonical();
            let d = usize::from(dir == Direction::Reverse);
            let f = flows.entry(key).or_default();
            f.packets[d] += 1;
            f.bytes[d] += u64::from(p.desc.wire_len);
        }
        batch.clear();
    }
    let mut list: Vec<_> = flows.iter().collect();
    list.sort_by_key(|(_, f)| std::cmp::Reverse(f.bytes[0] + f.bytes[1]));
    println!("{} flows ({} packets not IP)", flows.len(), other);
    println!(
        "{:>5} {:>40} {:>40} {:>8} {:>8} {:>10}",
        "proto", "a", "b", "pkts a>b", "pkts b>a", "bytes"
    );
    for (k, f) in list.into_iter().take(top) {
        let a = format!("{}:{}", k.src_ip(), k.sport);
        let b = format!("{}:{}", k.dst_ip(), k.dport);
        let bytes = f.bytes[0] + f.bytes[1];
        println!(
            "{:>5} {a:>40} {b:>40} {:>8} {:>8} {bytes:>10}",
            k.proto, f.packets[0], f.packets[1]
        );
    }
    Ok(())
}

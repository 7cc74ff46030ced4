//! Generated packets parse, carry valid checksums (checked here and by tshark on a written
//! pcap), vary their fields as asked and carry consecutive probe signatures.
#![deny(unsafe_code)]

use linerate::apps::gen::template::{read_sig, TemplateSpec, L4};
use linerate::apps::gen::vary::{parse_addr, parse_seq, port_value, SizeSpec};
use linerate::apps::gen::{self, GenOptions, StreamSpec};
use linerate::mem::Batch;
use linerate::port::mem::wire;
use linerate::port::pcap::PcapPort;
use linerate::port::{LinkType, Port, PortOptions};
use linerate::time::FakeClock;
use linerate::wire::checksum::{finish, pseudo_v4, pseudo_v6, sum};
use linerate::wire::{parse, Ipv4Packet};
use std::net::IpAddr;
use std::sync::atomic::AtomicBool;

fn streams() -> Vec<StreamSpec> {
    let mut v = Vec::new();
    let mut id = 0;
    for v6 in [false, true] {
        for l4 in [L4::Udp, L4::Tcp] {
            for vlan in [None, Some(42)] {
                for size in ["64-1518", "imix", "128", "1518"] {
                    let (src, dst) = if v6 {
                        (
                            "random:2001:db8::1-2001:db8::ffff",
                            "2001:db8:1::1,2001:db8:1::9",
                        )
                    } else {
                        ("10.0.0.1-10.0.0.100", "random:198.18.0.1-198.19.255.254")
                    };
                    v.push(StreamSpec {
                        id,
                        template: TemplateSpec {
                            vlan,
                            l4,
                            src_ip: if v6 {
                                "2001:db8::1".parse().unwrap()
                            } else {
                                IpAddr::from([10, 0, 0, 1])
                            },
                            dst_ip: if v6 {
                                "2001:db8:1::1".parse().unwrap()
                            } else {
                                IpAddr::from([198, 18, 0, 1])
                            },
                            ..Default::default()
                        },
                        src_ip: Some(parse_addr(src).unwrap()),
                        dst_ip: Some(parse_addr(dst).unwrap()),
                        sport: Some(parse_seq("random:1-65535", port_value).unwrap()),
                        dport: Some(parse_seq("53,80,443,65535", port_value).unwrap()),
                        size: size.parse::<SizeSpec>().unwrap(),
                        ..Default::default()
                    });
                    id += 1;
                }
            }
        }
    }
    // 64 B frames: IPv4/UDP has room for the probe; IPv4/TCP does not (probe off).
    v.push(StreamSpec {
        id,
        size: SizeSpec::Fixed(64),
        ..Default::default()
    });
    v.push(StreamSpec {
        id: id + 1,
        size: SizeSpec::Fixed(64),
        probe: false,
        template: TemplateSpec {
            l4: L4::Tcp,
            ..Default::default()
        },
        ..Default::default()
    });
    v
}

fn l4_ok(data: &[u8]) -> bool {
    let p = parse(data, LinkType::ETHERNET);
    let (Some(l3), Some(l4)) = (p.l3, p.l4) else {
        return false;
    };
    let seg = &data[l4 as usize..p.l3_end as usize];
    let init = if p.ip_version == 4 {
        let ip = Ipv4Packet::new_checked(&data[l3 as usize..]).unwrap();
        if !ip.verify_checksum() {
            return false;
        }
        pseudo_v4(ip.src(), ip.dst(), p.proto, seg.len() as u16)
    } else {
        pseudo_v6(&p.src, &p.dst, p.proto, seg.len() as u32)
    };
    finish(sum(seg, init)) == 0
}

#[test]
fn every_template_has_valid_checksums_and_varies() {
    let specs = streams();
    let n_streams = specs.len() as u64;
    let (mut a, mut b) = wire("gen-packets", &PortOptions::default()).unwrap();
    let per = 30u64;
    let opts = GenOptions {
        streams: specs,
        count: Some(per * n_streams),
        ..Default::default()
    };
    let clock = FakeClock::new(1_000_000, 3);
    let stop = AtomicBool::new(false);
    let rep = gen::run(&mut a, &opts, &clock, &stop, None, |_| {}).unwrap();
    assert_eq!(rep.pkts, per * n_streams);
    assert!(
        rep.per_stream.iter().all(|&c| c == per),
        "{:?}",
        rep.per_stream
    );
    let mut batch = Batch::new();
    let mut got = 0u64;
    let mut next_seq = vec![0u32; n_streams as usize];
    let mut sports = std::collections::HashSet::new();
    while b.rx(&mut batch).unwrap() > 0 {
        for pkt in batch.iter() {
            let d = pkt.data;
            assert!(d.len() >= 60 && d.len() <= 1514, "{}", d.len());
            assert!(l4_ok(d), "bad checksum in {:02x?}", d);
            let p = parse(d, LinkType::ETHERNET);
            assert!(p.stop.is_none(), "{:?}", p.stop);
            sports.insert(p.sport);
            if p.ip_version == 4 && p.vlan_count == 0 && p.proto == 17 && d.len() > 60 {
                let a = u32::from_be_bytes([p.src[0], p.src[1], p.src[2], p.src[3]]);
                assert!((0x0a00_0001..=0x0a00_0064).contains(&a));
            }
            if p.ip_version == 6 {
                assert!([1u8, 9].contains(&p.dst[15]) && p.dst[14] == 0);
            }
            assert!([53, 80, 443, 65535, 9].contains(&p.dport), "{}", p.dport);
            if let Some(sig) = p
                .payload
                .and_then(|o| d.get(o as usize..))
                .and_then(read_sig)
            {
                let s = sig.stream as usize;
                assert!(sig.seq >= next_seq[s]);
                next_seq[s] = sig.seq + 1;
                assert!(sig.ts >= 1_000_000);
            } else {
                // No room for a probe (or the stream without probes).
                let room = d.len() - p.payload.unwrap() as usize;
                assert!(room < 16 || (p.proto == 6 && d.len() == 60), "{room}");
            }
            got += 1;
        }
        batch.clear();
    }
    assert_eq!(got, per * n_streams);
    assert!(sports.len() > 100);
}

#[test]
fn tshark_finds_no_bad_checksum() {
    let dir = std::env::temp_dir().join(format!("linerate-gen-tshark-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("gen.pcap");
    let path_s = path.to_str().unwrap().to_string();
    {
        let mut out = PcapPort::create_with(&path_s, LinkType::ETHERNET, 65535).unwrap();
        let opts = GenOptions {
            streams: streams(),
            count: Some(4000),
            ..Default::default()
        };
        let clock = FakeClock::new(1_000_000, 1);
        let stop = AtomicBool::new(false);
        let rep = gen::run(&mut out, &opts, &clock, &stop, None, |_| {}).unwrap();
        assert_eq!(rep.pkts, 4000);
    }
    let tshark = |filter: &str| {
        let o = std::process::Command::new("tshark")
            .args(["-r", &path_s, "-n"])
            .args(["-o", "ip.check_checksum:TRUE"])
            .args(["-o", "udp.check_checksum:TRUE"])
            .args(["-o", "tcp.check_checksum:TRUE"])
            .args(["-Y", filter])
            .output()
            .expect("tshark is installed by scripts/setup.sh --tests");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).lines().count()
    };
    let bad = tshark("ip.checksum.status==2 || udp.checksum.status==2 || tcp.checksum.status==2");
    assert_eq!(bad, 0);
    // And the checksums were checked: every packet has a good transport checksum.
    let good = tshark("udp.checksum.status==1 || tcp.checksum.status==1");
    assert_eq!(good, 4000);
    std::fs::remove_dir_all(&dir).unwrap();
}

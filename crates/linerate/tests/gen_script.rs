//! Lua userscripts: one call per batch, setters and raw access keep checksums valid, config
//! defaults are read, and errors name the file and line.
#![deny(unsafe_code)]

use linerate::apps::gen::script::LuaHook;
use linerate::apps::gen::vary::SizeSpec;
use linerate::apps::gen::{self, GenOptions, StreamSpec};
use linerate::mem::Batch;
use linerate::port::mem::wire;
use linerate::port::{LinkType, Port, PortOptions};
use linerate::time::FakeClock;
use linerate::wire::checksum::{finish, pseudo_v4, sum};
use linerate::wire::{parse, Ipv4Packet};
use std::sync::atomic::AtomicBool;

const SCRIPT: &str = r#"
config = { rate = "1Mpps", size = 128, pattern = "poisson" }
local n = 0
function modify(pkts, count)
  for i = 1, count do
    local p = pkts[i]
    p:ip4():setSrc(0x0a000000 + (n % 7))
    p:ip4():setDst("192.0.2.77")
    p:udp():setSrcPort(5000 + n % 3)
    p:eth():setDst("02:aa:bb:cc:dd:ee")
    p:setByte(p:payloadOffset() + 20, 0x5a)
    n = n + 1
  end
  calls = (calls or 0) + 1
end
"#;

#[test]
fn script_modifies_every_packet_with_valid_checksums() {
    let mut hook = LuaHook::from_source("flows.lua", SCRIPT.as_bytes()).unwrap();
    assert_eq!(hook.config.get("rate"), Some("1Mpps"));
    assert_eq!(hook.config.get("size"), Some("128"));
    let (mut a, mut b) = wire("gen-script", &PortOptions::default()).unwrap();
    let opts = two_hundred_of_128();
    let clock = FakeClock::new(1, 1);
    let stop = AtomicBool::new(false);
    let rep = gen::run(&mut a, &opts, &clock, &stop, Some(&mut hook), |_| {}).unwrap();
    assert_eq!(rep.pkts, 200);
    // 200 packets in batches of 64: 4 calls.
    assert_eq!(hook.calls, 4);
    let n = check_flows_script_output(&mut b, |q| {
        assert_eq!(q.dst_mac, [2, 0xaa, 0xbb, 0xcc, 0xdd, 0xee]);
        assert_eq!(&q.dst[..4], &[192, 0, 2, 77]);
    });
    assert_eq!(n, 200);
}

/// 200 packets of 128 bytes, one stream.
fn two_hundred_of_128() -> GenOptions {
    GenOptions {
        streams: vec![StreamSpec {
            size: SizeSpec::Fixed(128),
            ..Default::default()
        }],
        count: Some(200),
        ..Default::default()
    }
}

/// Reads what SCRIPT's packets arrived as on `b`: each one's source address and port as the
/// script set them, its payload mark, and valid IPv4 and UDP checksums; `more` checks the rest.
/// Returns how many arrived.
fn check_flows_script_output(b: &mut impl Port, more: impl Fn(&linerate::wire::Parsed)) -> u32 {
    let mut batch = Batch::new();
    let mut i = 0u32;
    while b.rx(&mut batch).unwrap() > 0 {
        for p in batch.iter() {
            let d = p.data;
            let q = parse(d, LinkType::ETHERNET);
            more(&q);
            assert_eq!(&q.src[..4], &[10, 0, 0, (i % 7) as u8]);
            assert_eq!(q.sport, 5000 + (i % 3) as u16);
            assert_eq!(d[q.payload.unwrap() as usize + 20], 0x5a);
            let ip = Ipv4Packet::new_checked(&d[14..]).unwrap();
            assert!(ip.verify_checksum());
            let seg = &d[34..q.l3_end as usize];
            let ck = finish(sum(
                seg,
                pseudo_v4(ip.src(), ip.dst(), 17, seg.len() as u16),
            ));
            assert_eq!(ck, 0, "packet {i}");
            i += 1;
        }
        batch.clear();
    }
    i
}

#[test]
fn errors_name_file_and_line() {
    let e = LuaHook::from_source(
        "bad.lua",
        b"local x = 1\nfunction modify(p, n)\n  x = = 2\nend\n",
    )
    .err()
    .unwrap()
    .to_string();
    assert!(e.contains("bad.lua:3"), "{e}");
    let e = LuaHook::from_source("nomod.lua", b"x = 1\n")
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("nomod.lua") && e.contains("modify"), "{e}");
    let mut hook = LuaHook::from_source(
        "run.lua",
        b"function modify(pkts, n)\n  for i = 1, n do\n    pkts[i]:udp():setSrcPort('x')\n  end\nend\n",
    )
    .unwrap();
    let (mut a, _b) = wire("gen-script-err", &PortOptions::default()).unwrap();
    let opts = GenOptions {
        count: Some(10),
        ..Default::default()
    };
    let clock = FakeClock::new(1, 1);
    let stop = AtomicBool::new(false);
    let e = gen::run(&mut a, &opts, &clock, &stop, Some(&mut hook), |_| {})
        .unwrap()
        .error
        .unwrap();
    assert!(e.contains("run.lua:3"), "{e}");
    let mut hook = LuaHook::from_source(
        "oob.lua",
        b"function modify(pkts, n)\n  pkts[1]:setByte(5000, 1)\nend\n",
    )
    .unwrap();
    let e = gen::run(&mut a, &opts, &clock, &stop, Some(&mut hook), |_| {})
        .unwrap()
        .error
        .unwrap();
    assert!(e.contains("oob.lua:2") && e.contains("past the end"), "{e}");
}

/// `checksums = false` set inside `modify()` counts for the fields' setters from the next
/// batch, and `checksums = true` again from the one after: the checksums of the batches
/// between are left as written (the IPv4 header's no longer matching its new source), the
/// others are right.
#[test]
fn checksums_false_set_in_a_call_counts_from_the_next_batch() {
    let src = r#"
local calls = 0
function modify(pkts, n)
  for i = 1, n do pkts[i].ip4.src = 0x0a000001 + i end
  calls = calls + 1
  checksums = calls ~= 2
end
"#;
    let mut hook = LuaHook::from_source("ck.lua", src.as_bytes()).unwrap();
    let (mut a, mut b) = wire("gen-script-ck", &PortOptions::default()).unwrap();
    let opts = GenOptions {
        streams: vec![StreamSpec::default()],
        count: Some(200),
        ..Default::default()
    };
    let clock = FakeClock::new(1, 1);
    let stop = AtomicBool::new(false);
    let rep = gen::run(&mut a, &opts, &clock, &stop, Some(&mut hook), |_| {}).unwrap();
    assert_eq!((rep.pkts, hook.calls), (200, 4));
    let mut batch = Batch::new();
    let mut i = 0usize;
    while b.rx(&mut batch).unwrap() > 0 {
        for p in batch.iter() {
            let ip = Ipv4Packet::new_checked(&p.data[14..]).unwrap();
            assert_eq!(ip.src(), [10, 0, 0, (i % 64 + 2) as u8]);
            // the third call's setters ran with `checksums = false` (set in the second)
            assert_eq!(ip.verify_checksum(), !(128..192).contains(&i), "packet {i}");
            i += 1;
        }
        batch.clear();
    }
    assert_eq!(i, 200);
}

/// A port that lends its transmit frames, as AF_PACKET's ring does ([`Port::tx_build`]): gen
/// builds straight into them and the script modifies them there; what is built is then sent
/// on the mem wire.
fn pool() -> std::sync::Arc<linerate::mem::Pool> {
    let cfg = linerate::mem::PoolConfig {
        frames: 256,
        ..Default::default()
    };
    std::sync::Arc::new(linerate::mem::Pool::new(&cfg).unwrap())
}

struct Lending {
    inner: linerate::port::mem::MemPort,
    frames: Vec<Vec<u8>>,
    builds: u64,
    pool: std::sync::Arc<linerate::mem::Pool>,
}

impl Port for Lending {
    fn name(&self) -> &str {
        "lending"
    }
    fn rx(&mut self, batch: &mut Batch) -> Result<usize, linerate::port::PortError> {
        self.inner.rx(batch)
    }
    fn tx(&mut self, batch: &mut Batch) -> Result<usize, linerate::port::PortError> {
        self.inner.tx(batch)
    }
    fn stats(&mut self) -> linerate::port::PortStats {
        self.inner.stats()
    }
    fn tx_build_room(&self) -> Option<usize> {
        Some(2048)
    }
    fn tx_build(
        &mut self,
        want: usize,
        fill: &mut linerate::port::TxFill<'_>,
    ) -> Result<usize, linerate::port::PortError> {
        self.builds += 1;
        let want = want.min(linerate::mem::BATCH);
        let mut lens = vec![0u32; want];
        let mut bufs: Vec<&mut [u8]> = self.frames[..want].iter_mut().map(|f| &mut f[..]).collect();
        let m = fill(&mut bufs, &mut lens);
        let mut b = Batch::with_pool(&self.pool);
        for (f, &l) in self.frames[..m].iter().zip(&lens) {
            assert!(b.push_copy(&f[..l as usize], 0));
        }
        self.inner.tx(&mut b)
    }
}

#[test]
fn script_modifies_packets_built_in_the_ports_frames() {
    let mut hook = LuaHook::from_source("flows.lua", SCRIPT.as_bytes()).unwrap();
    let (a, mut b) = wire("gen-script-in-place", &PortOptions::default()).unwrap();
    let mut port = Lending {
        inner: a,
        frames: vec![vec![0u8; 2048]; linerate::mem::BATCH],
        builds: 0,
        pool: pool(),
    };
    let opts = two_hundred_of_128();
    let clock = FakeClock::new(1, 1);
    let stop = AtomicBool::new(false);
    let rep = gen::run(&mut port, &opts, &clock, &stop, Some(&mut hook), |_| {}).unwrap();
    assert_eq!(rep.pkts, 200);
    // built in the port's frames, one call of the script a burst
    assert_eq!(port.builds, 4);
    assert_eq!(hook.calls, 4);
    assert_eq!(check_flows_script_output(&mut b, |_| {}), 200);
}

#[test]
fn a_script_error_in_the_ports_frames_sends_nothing_of_the_burst() {
    let mut hook =
        LuaHook::from_source("bad.lua", b"function modify(pkts, n) error('no') end\n").unwrap();
    let (a, mut b) = wire("gen-script-in-place-err", &PortOptions::default()).unwrap();
    let mut port = Lending {
        inner: a,
        frames: vec![vec![0u8; 2048]; linerate::mem::BATCH],
        builds: 0,
        pool: pool(),
    };
    let opts = GenOptions {
        streams: vec![StreamSpec::default()],
        count: Some(100),
        ..Default::default()
    };
    let clock = FakeClock::new(1, 1);
    let stop = AtomicBool::new(false);
    let rep = gen::run(&mut port, &opts, &clock, &stop, Some(&mut hook), |_| {}).unwrap();
    let e = rep.error.unwrap_or_default();
    assert!(e.contains("bad.lua:1: no"), "{e}");
    assert_eq!((rep.pkts, rep.per_stream[0], port.builds), (0, 0, 1));
    let mut batch = Batch::new();
    assert_eq!(b.rx(&mut batch).unwrap(), 0);
}

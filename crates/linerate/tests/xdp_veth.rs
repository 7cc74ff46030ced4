//! `xdp:` over a veth pair between two network namespaces: exact numbers of frames received and
//! sent, byte-identical; a stale program of a crashed run is replaced; no XDP program and no
//! namespace is left behind. Needs root; skips otherwise (see `netns::require_priv`).
#![deny(unsafe_code)]

use linerate_test_support::netns;

use linerate::mem::{Batch, Desc, Pool, PoolConfig};
use linerate::port::afpacket::AfPacket;
use linerate::port::xdp::{AttachApi, AttachMode, XdpConfig, XdpMode, XdpPort};
use linerate::port::{Port, PortOptions};
use netns::{NetnsPair, Side};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

const MAGIC: &[u8; 8] = b"LRXDPTS1";

/// Tests of this file run one at a time: they look at which programs are attached, and a child
/// process holds every descriptor of this one (sockets, bpf_links of a concurrent test) from its
/// fork until its exec, which would keep them alive.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Ethernet/IPv4/UDP frame `seq` from `src` to `dst`, payload of varying length.
fn frame(dst: [u8; 6], src: [u8; 6], seq: u32) -> Vec<u8> {
    let plen = MAGIC.len() + 4 + (seq as usize * 13) % 400;
    let mut f = Vec::with_capacity(42 + plen);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&[0x08, 0x00]);
    let ip_len = (20 + 8 + plen) as u16;
    f.extend_from_slice(&[0x45, 0, 0, 0, 0, 0, 0, 0, 64, 17, 0, 0]);
    f[16..18].copy_from_slice(&ip_len.to_be_bytes());
    f.extend_from_slice(&[198, 18, 0, 1, 198, 18, 0, 2]);
    f.extend_from_slice(&[0x9c, 0x40, 0, 9]);
    f.extend_from_slice(&((8 + plen) as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(MAGIC);
    f.extend_from_slice(&seq.to_be_bytes());
    while f.len() < 42 + plen {
        f.push(seq as u8 ^ f.len() as u8);
    }
    f
}

fn seq_of(d: &[u8]) -> Option<u32> {
    if d.get(42..50)? != MAGIC {
        return None;
    }
    let s = d.get(50..54)?;
    Some(u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
}

/// Sends `frames` through `port` from a pool of our own, paced so that veth never overflows.
fn send_paced(port: &mut dyn Port, frames: &[Vec<u8>]) -> usize {
    let pool = Arc::new(Pool::new(&PoolConfig::default()).unwrap());
    let mut b = Batch::with_pool(&pool);
    let mut sent = 0;
    let deadline = Instant::now() + Duration::from_secs(10);
    for chunk in frames.chunks(32) {
        for f in chunk {
            let mut fr = b.alloc().unwrap();
            fr.buf()[..f.len()].copy_from_slice(f);
            fr.push(Desc {
                len: f.len() as u32,
                wire_len: f.len() as u32,
                ..Default::default()
            });
        }
        while !b.is_empty() && Instant::now() < deadline {
            sent += port.tx(&mut b).unwrap();
            port.flush().unwrap();
        }
        std::thread::sleep(Duration::from_micros(300));
    }
    for _ in 0..20 {
        port.flush().unwrap();
        std::thread::sleep(Duration::from_millis(1));
    }
    sent
}

/// Receives until `want` of our frames arrived or `quiet` passes with nothing; returns them.
fn recv(port: &mut dyn Port, want: usize, quiet: Duration) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    let mut b = Batch::new();
    let mut last = Instant::now();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        // Until `want` arrived (or `quiet` of silence), then 300 ms more to catch extras.
        let q = if got.len() >= want {
            Duration::from_millis(300)
        } else {
            quiet
        };
        if last.elapsed() >= q || Instant::now() >= deadline {
            break;
        }
        let n = port.rx(&mut b).unwrap();
        if n > 0 {
            last = Instant::now();
        }
        for p in b.iter() {
            if seq_of(p.data).is_some() {
                got.push(p.data.to_vec());
            }
        }
        b.clear();
    }
    got
}

fn xdp_attached(p: &NetnsPair, side: Side, ifname: &str) -> bool {
    let out = p.ip_in(side, &["link", "show", "dev", ifname]).unwrap();
    out.contains("xdp") || out.contains("prog/xdp")
}

fn copy_cfg() -> XdpConfig {
    XdpConfig {
        mode: XdpMode::Copy,
        ..Default::default()
    }
}

#[test]
fn xdp_receives_exactly_what_was_sent() {
    if !netns::require_priv() {
        return;
    }
    let _serial = serial();
    let p = NetnsPair::new().unwrap();
    const N: u32 = 3000;
    let frames: Vec<Vec<u8>> = (0..N).map(|s| frame(p.mac_b, p.mac_a, s)).collect();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let got = std::thread::scope(|s| {
        let rx = s.spawn(|| {
            p.run_in(Side::B, || {
                let mut port =
                    XdpPort::open("vB@0", &PortOptions::default(), &XdpConfig::default()).unwrap();
                assert!(!port.is_zerocopy(), "veth has no zero-copy AF_XDP");
                assert_eq!(port.attach_mode(), AttachMode::Native);
                ready_tx.send(()).unwrap();
                let got = recv(&mut port, N as usize, Duration::from_secs(5));
                let st = port.stats();
                assert_eq!(st.rx_drops.total(), 0, "{st:?}");
                got
            })
        });
        ready_rx.recv().unwrap();
        let sent = p.run_in(Side::A, || {
            let mut tx = AfPacket::open("vA", &PortOptions::default()).unwrap();
            send_paced(&mut tx, &frames)
        });
        assert_eq!(sent, N as usize);
        rx.join().unwrap()
    });
    assert_eq!(got.len(), N as usize, "exactly N frames");
    let seqs: HashSet<u32> = got.iter().filter_map(|d| seq_of(d)).collect();
    assert_eq!(seqs.len(), N as usize, "each once");
    for d in &got {
        assert_eq!(d, &frames[seq_of(d).unwrap() as usize], "byte-identical");
    }
    assert!(!xdp_attached(&p, Side::B, "vB"), "program removed on drop");
}

#[test]
fn xdp_sends_exactly_n_frames() {
    if !netns::require_priv() {
        return;
    }
    let _serial = serial();
    let p = NetnsPair::new().unwrap();
    const N: u32 = 2500;
    let frames: Vec<Vec<u8>> = (0..N).map(|s| frame(p.mac_a, p.mac_b, s)).collect();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let got = std::thread::scope(|s| {
        let rx = s.spawn(|| {
            p.run_in(Side::A, || {
                let mut port = AfPacket::open("vA", &PortOptions::default()).unwrap();
                ready_tx.send(()).unwrap();
                recv(&mut port, N as usize, Duration::from_secs(5))
            })
        });
        ready_rx.recv().unwrap();
        let st = p.run_in(Side::B, || {
            let mut tx = XdpPort::open("vB", &PortOptions::default(), &copy_cfg()).unwrap();
            // Packets built in the port's own pool go out without a copy.
            let sent = send_paced(&mut tx, &frames);
            assert_eq!(sent, N as usize);
            tx.stats()
        });
        assert_eq!(st.tx_packets, N as u64);
        assert_eq!(st.tx_drops.total(), 0);
        rx.join().unwrap()
    });
    assert_eq!(got.len(), N as usize);
    for d in &got {
        assert_eq!(d, &frames[seq_of(d).unwrap() as usize]);
    }
    assert!(!xdp_attached(&p, Side::B, "vB"));
}

#[test]
fn stale_program_is_replaced_and_nothing_is_left_behind() {
    if !netns::require_priv() {
        return;
    }
    let _serial = serial();
    let names;
    {
        let p = NetnsPair::new().unwrap();
        names = (p.a.clone(), p.b.clone());
        // A run that attached the pre-bpf_link way dies without cleaning up: a child process
        // opens the port and exits at once (the kernel closes its socket, the program stays).
        assert_eq!(
            crash_child(&p.b, AttachApi::Netlink),
            0,
            "child could not attach"
        );
        assert!(xdp_attached(&p, Side::B, "vB"), "stale program in place");
        p.run_in(Side::B, || {
            let port = XdpPort::open("vB", &PortOptions::default(), &copy_cfg()).unwrap();
            assert!(port.replaced_stale().is_some(), "stale program detected");
            assert_eq!(port.attach_mode(), AttachMode::Native);
        });
        assert!(!xdp_attached(&p, Side::B, "vB"), "no program after drop");
    }
    let list = netns::ip(&["netns", "list"]).unwrap();
    assert!(
        !list.contains(&names.0) && !list.contains(&names.1),
        "{list}"
    );
}

#[test]
fn one_socket_per_queue_and_the_program_goes_with_the_last_port() {
    if !netns::require_priv() {
        return;
    }
    let _serial = serial();
    let p = NetnsPair::new().unwrap();
    p.run_in(Side::B, || {
        let a = XdpPort::open("vB@0", &PortOptions::default(), &copy_cfg()).unwrap();
        let e = XdpPort::open("vB@0", &PortOptions::default(), &copy_cfg());
        let msg = e.err().expect("a second socket on one queue").to_string();
        assert!(msg.contains("vB") && msg.contains("bind"), "{msg}");
        drop(a);
    });
    assert!(!xdp_attached(&p, Side::B, "vB"));
}

/// The environment variable that makes [`crash_child_process`] act: `NS` and the attach API
/// (`link` or `netlink`), separated by a space.
const CRASH_ENV: &str = "LINERATE_XDP_CRASH_CHILD";

/// Runs this test binary again as a child process ([`crash_child_process`]) that enters
/// namespace `ns`, opens `xdp:vB` in copy mode attaching through `api` (rtnetlink: in generic
/// mode) and exits without any cleanup, as a crash would; returns its exit code.
fn crash_child(ns: &str, api: AttachApi) -> i32 {
    let api = match api {
        AttachApi::Netlink => "netlink",
        _ => "link",
    };
    let out = std::process::Command::new(std::env::current_exe().expect("the test binary"))
        .args(["--exact", "crash_child_process", "--ignored", "--nocapture"])
        .env(CRASH_ENV, format!("{ns} {api}"))
        .output()
        .expect("run the crash child");
    let code = out.status.code().unwrap_or(-1);
    if code != 0 {
        eprintln!(
            "crash child: {}\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    code
}

/// The child process of [`crash_child`], not a test of its own: with `LINERATE_XDP_CRASH_CHILD`
/// set it enters the namespace, opens the port and leaves the process at once (exit code 0; 3
/// when it could not attach), the port never dropped; without the variable it does nothing.
#[test]
#[ignore = "the child process that crash_child starts"]
fn crash_child_process() {
    let Ok(spec) = std::env::var(CRASH_ENV) else {
        return;
    };
    let (ns, api) = spec.split_once(' ').expect("NS API");
    let cfg = match api {
        "netlink" => XdpConfig {
            api: AttachApi::Netlink,
            attach: AttachMode::Generic,
            ..copy_cfg()
        },
        _ => copy_cfg(),
    };
    let opened = linerate::os::enter_netns(ns)
        .map_err(|e| e.to_string())
        .and_then(|()| {
            XdpPort::open("vB", &PortOptions::default(), &cfg).map_err(|e| e.to_string())
        });
    match opened {
        Ok(port) => {
            // The socket and the program are left to the kernel, as when a run is killed.
            std::mem::forget(port);
            std::process::exit(0)
        }
        Err(e) => {
            eprintln!("crash child: {e}");
            std::process::exit(3)
        }
    }
}

#[test]
fn a_killed_run_attached_through_bpf_link_leaves_no_program() {
    if !netns::require_priv() {
        return;
    }
    let _serial = serial();
    let p = NetnsPair::new().unwrap();
    assert_eq!(
        crash_child(&p.b, AttachApi::Link),
        0,
        "child could not attach"
    );
    assert!(
        !xdp_attached(&p, Side::B, "vB"),
        "the kernel removed the link's program"
    );
    // And the interface is free for the next run.
    p.run_in(Side::B, || {
        let port = XdpPort::open("vB", &PortOptions::default(), &copy_cfg()).unwrap();
        assert_eq!(port.replaced_stale(), None);
    });
}

#[test]
fn several_queues_share_one_program() {
    if !netns::require_priv() {
        return;
    }
    let _serial = serial();
    let p = NetnsPair::new().unwrap();
    p.ip_in(
        Side::B,
        &[
            "link",
            "add",
            "mq0",
            "numtxqueues",
            "2",
            "numrxqueues",
            "2",
            "type",
            "veth",
            "peer",
            "name",
            "mq1",
            "numtxqueues",
            "2",
            "numrxqueues",
            "2",
        ],
    )
    .unwrap();
    p.ip_in(Side::B, &["link", "set", "mq0", "up"]).unwrap();
    p.ip_in(Side::B, &["link", "set", "mq1", "up"]).unwrap();
    p.run_in(Side::B, || {
        let q0 = XdpPort::open("mq0@0", &PortOptions::default(), &copy_cfg()).unwrap();
        let q1 = XdpPort::open("mq0@1", &PortOptions::default(), &copy_cfg()).unwrap();
        assert_eq!((q0.queue(), q1.queue()), (0, 1));
        let bad = XdpPort::open("mq0@7", &PortOptions::default(), &copy_cfg());
        assert!(bad.is_err(), "no queue 7");
        drop(q0);
        let out = netns::ip(&["link", "show", "dev", "mq0"]).unwrap();
        assert!(out.contains("xdp"), "still attached for queue 1: {out}");
        drop(q1);
        let out = netns::ip(&["link", "show", "dev", "mq0"]).unwrap();
        assert!(!out.contains("xdp"), "removed with the last queue: {out}");
    });
}

/// Receives on `uri` (in B) while A sends `n` frames of 64 flows through the qdisc layer, so
/// that they spread over vA's transmit queues and so over vB's receive queues; returns the
/// sequence numbers received, the per-queue XDP counters of vB, and the port's counters.
fn spread_run(p: &NetnsPair, uri: &str, n: u32) -> (Vec<u32>, Vec<u64>, linerate::port::PortStats) {
    let frames: Vec<Vec<u8>> = (0..n)
        .map(|s| netns::udp_frame(p.mac_b, p.mac_a, (s % 64) as u16, s))
        .collect();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let (got, st) = std::thread::scope(|s| {
        let rx = s.spawn(|| {
            p.run_in(Side::B, || {
                let mut port = linerate::open_rx(uri, &PortOptions::default()).unwrap();
                ready_tx.send(()).unwrap();
                let mut got = Vec::new();
                let mut b = Batch::new();
                let mut last = Instant::now();
                let deadline = Instant::now() + Duration::from_secs(15);
                while last.elapsed() < Duration::from_millis(1500) && Instant::now() < deadline {
                    if port.rx(&mut b).unwrap() > 0 {
                        last = Instant::now();
                    }
                    got.extend(b.iter().filter_map(|p| netns::udp_seq(p.data)));
                    b.clear();
                }
                (got, port.stats())
            })
        });
        ready_rx.recv().unwrap();
        // Through the qdisc layer: the kernel's flow hash picks vA's transmit queue, and a veth
        // delivers transmit queue i to the peer's receive queue i.
        p.run_in(Side::A, || netns::send_raw("vA", &frames));
        rx.join().unwrap()
    });
    (got, netns::xdp_queue_packets(p, Side::B, "vB"), st)
}

#[test]
fn xdp_iface_binds_every_receive_queue() {
    if !netns::require_priv() {
        return;
    }
    let _serial = serial();
    let p = NetnsPair::with_queues(4).unwrap();
    const N: u32 = 3200;
    let (got, per_queue, st) = spread_run(&p, "xdp:vB", N);
    assert_eq!(per_queue.len(), 4, "vB has 4 receive queues: {per_queue:?}");
    assert!(
        per_queue.iter().all(|&q| q > 0),
        "traffic on every queue: {per_queue:?}"
    );
    let seqs: HashSet<u32> = got.iter().copied().collect();
    assert_eq!(
        got.len(),
        N as usize,
        "every frame of every queue, per queue {per_queue:?}"
    );
    assert_eq!(seqs.len(), N as usize, "each once");
    assert_eq!(st.rx_drops.total(), 0, "{st:?}");
    assert!(!xdp_attached(&p, Side::B, "vB"), "program removed on drop");
}

#[test]
fn xdp_queue_and_range_bind_just_those_queues() {
    if !netns::require_priv() {
        return;
    }
    let _serial = serial();
    let p = NetnsPair::with_queues(4).unwrap();
    const N: u32 = 2000;
    // One queue: what it received is what vB's queue 1 saw, and no more.
    let (got1, q_a, _) = spread_run(&p, "xdp:vB@1", N);
    let (got23, q_b, _) = spread_run(&p, "xdp:vB@2-3", N);
    assert!(
        q_a.iter().all(|&q| q > 0),
        "traffic on every queue: {q_a:?}"
    );
    // (vB's counters also count the namespace's own few frames: IPv6 neighbour discovery.)
    let near = |got: usize, counted: u64| got as u64 <= counted && counted - got as u64 <= 8;
    assert!(
        near(got1.len(), q_a[1]),
        "@1 gets queue 1 only: {} of {q_a:?}",
        got1.len()
    );
    let d: Vec<u64> = q_b.iter().zip(&q_a).map(|(b, a)| b - a).collect();
    assert!(
        near(got23.len(), d[2] + d[3]),
        "@2-3 gets queues 2 and 3: {} of {d:?}",
        got23.len()
    );
    assert!(got1.len() < N as usize && got23.len() < N as usize);
    // @all and @* are every queue.
    let (all, _, _) = spread_run(&p, "xdp:vB@all", 640);
    assert_eq!(all.len(), 640);
    let (star, _, _) = spread_run(&p, "xdp:vB@*", 640);
    assert_eq!(star.len(), 640);
    // A queue the interface does not have is refused, naming how many it has.
    p.run_in(Side::B, || {
        for bad in ["xdp:vB@4", "xdp:vB@2-7"] {
            let e = linerate::open_rx(bad, &PortOptions::default())
                .err()
                .unwrap_or_else(|| panic!("{bad} opened"))
                .to_string();
            assert!(e.contains("4 receive queues"), "{bad}: {e}");
        }
        let e = linerate::open_rx("xdp:vB@3-1", &PortOptions::default())
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("empty"), "{e}");
    });
}

/// Frames whose outer VLAN tag travels in the packet's metadata (tagged on vA's egress the way
/// a VLAN device with transmit offload does it) reach `xdp:vB` with the tag in their bytes, as
/// on the wire: 802.1Q, 802.1ad, and QinQ.
#[test]
fn xdp_frames_keep_tags_that_travel_in_metadata() {
    if !netns::require_priv() {
        return;
    }
    let _serial = serial();
    let p = NetnsPair::new().unwrap();
    p.no_ipv6().unwrap();
    const N: u32 = 300;
    let cases: [Vec<(u16, u16)>; 3] = [
        vec![(0x8100, 0x200a)],
        vec![(0x88a8, 20)],
        vec![(0x88a8, 0xe014), (0x8100, 30)],
    ];
    for tags in &cases {
        let frames: Vec<Vec<u8>> = (0..N).map(|s| frame(p.mac_b, p.mac_a, s)).collect();
        let want: HashSet<Vec<u8>> = frames.iter().map(|f| netns::with_tags(f, tags)).collect();
        let push = p
            .egress_tags(Side::A, "vA", tags)
            .expect("tc egress program");
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let got = std::thread::scope(|s| {
            let rx = s.spawn(|| {
                p.run_in(Side::B, || {
                    let mut port =
                        XdpPort::open("vB", &PortOptions::default(), &copy_cfg()).unwrap();
                    let m = port.rx_meta();
                    assert!(
                        m.stamps && m.vlan,
                        "the metadata program with bpf_xdp_metadata_rx_vlan_tag (kernel 6.8+) \
                         is attached: {m:?}"
                    );
                    assert_eq!(port.rx_time(), linerate::port::RxTime::Arrival);
                    ready_tx.send(()).unwrap();
                    let mut got = Vec::new();
                    let mut b = Batch::new();
                    let end = Instant::now() + Duration::from_secs(5);
                    while got.len() < N as usize && Instant::now() < end {
                        port.rx(&mut b).unwrap();
                        for q in b.iter() {
                            if q.data.windows(8).any(|w| w == MAGIC) {
                                got.push(q.data.to_vec());
                            }
                        }
                        b.clear();
                    }
                    got
                })
            });
            ready_rx.recv().unwrap();
            p.run_in(Side::A, || netns::send_raw("vA", &frames));
            rx.join().unwrap()
        });
        drop(push);
        assert_eq!(got.len(), N as usize, "tags {tags:x?}: frames received");
        for g in &got {
            assert!(
                want.contains(g),
                "tags {tags:x?}: a frame differs from the wire: {:02x?}",
                &g[..g.len().min(24)]
            );
        }
    }
}

/// `frame(dst, src, seq)` padded to `len` bytes (the sequence number stays where `seq_of`
/// reads it).
fn long_frame(dst: [u8; 6], src: [u8; 6], seq: u32, len: usize) -> Vec<u8> {
    let mut f = frame(dst, src, seq);
    while f.len() < len {
        f.push((seq as usize ^ f.len()) as u8);
    }
    f
}

/// On a 9000-MTU veth, a port without multi-buffer (a kernel before 6.6, a driver without it:
/// here asked for with `multi_buffer: false`) takes the frames that fit one UMEM frame and
/// counts the longer ones too_big, never cut; with it (the default) every frame arrives whole,
/// in native and in generic attach, with 2 and 4 KiB UMEM frames.
#[test]
fn jumbo_frames_arrive_whole_or_are_counted_too_big() {
    if !netns::require_priv() {
        return;
    }
    let _serial = serial();
    let p = NetnsPair::new().unwrap();
    for (side, i) in [(Side::A, "vA"), (Side::B, "vB")] {
        p.ip_in(side, &["link", "set", i, "mtu", "9000"]).unwrap();
    }
    // 10 frames of 9014 B, 10 of 1792 B (the longest a 2 KiB UMEM frame takes), 10 short.
    let frames: Vec<Vec<u8>> = (0..30u32)
        .map(|s| match s % 3 {
            0 => long_frame(p.mac_b, p.mac_a, s, 9014),
            1 => long_frame(p.mac_b, p.mac_a, s, 1792),
            _ => frame(p.mac_b, p.mac_a, s),
        })
        .collect();
    let cases = [
        (false, AttachMode::Native, 2048),
        (true, AttachMode::Native, 2048),
        (true, AttachMode::Generic, 2048),
        (true, AttachMode::Native, 4096),
        (true, AttachMode::Generic, 4096),
    ];
    for (mb, attach, frame_size) in cases {
        let cfg = XdpConfig {
            multi_buffer: mb,
            attach,
            frame_size,
            ..Default::default()
        };
        let what = format!("multi_buffer {mb}, {attach:?}, {frame_size} B frames");
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (got, st) = std::thread::scope(|s| {
            let rx = s.spawn(|| {
                p.run_in(Side::B, || {
                    let mut port = XdpPort::open("vB@0", &PortOptions::default(), &cfg).unwrap();
                    assert_eq!(port.attach_mode(), attach, "{what}");
                    assert_eq!(port.is_multi_buffer(), mb, "{what}");
                    assert_eq!(port.max_single_rx_frame(), frame_size - 256, "{what}");
                    ready_tx.send(()).unwrap();
                    let want = if mb { 30 } else { 20 };
                    let got = recv(&mut port, want, Duration::from_secs(3));
                    (got, port.stats())
                })
            });
            ready_rx.recv().unwrap();
            p.run_in(Side::A, || netns::send_raw("vA", &frames));
            rx.join().unwrap()
        });
        let want: Vec<&Vec<u8>> = frames.iter().filter(|f| mb || f.len() <= 1792).collect();
        assert_eq!(got.len(), want.len(), "{what}: {st:?}");
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(g, *w, "{what}: byte-identical, in order");
        }
        let too_big = st.rx_drops.get(linerate::port::DropReason::TooBig);
        assert_eq!(too_big, if mb { 0 } else { 10 }, "{what}: {st:?}");
        assert_eq!(st.rx_drops.total(), too_big, "{what}: {st:?}");
    }
}

/// A multi-buffer socket whose fill ring runs short (the reader slow, its ring of 64 frames
/// holds ten 9 014 B frames of 6 pieces): the kernel drops the frames it has no frames for
/// (checking first that the fill ring holds all the pieces, which counts no empty fill ring),
/// and the port counts them kernel drops, never too_big (no frame is too big for a
/// multi-buffer socket); what arrived and what was dropped add up to what was sent.
#[test]
fn jumbo_frames_a_short_fill_ring_drops_are_kernel_not_too_big() {
    if !netns::require_priv() {
        return;
    }
    let _serial = serial();
    let p = NetnsPair::new().unwrap();
    for (side, i) in [(Side::A, "vA"), (Side::B, "vB")] {
        p.ip_in(side, &["link", "set", i, "mtu", "9000"]).unwrap();
    }
    let frames: Vec<Vec<u8>> = (0..40u32)
        .map(|s| long_frame(p.mac_b, p.mac_a, s, 9014))
        .collect();
    for attach in [AttachMode::Native, AttachMode::Generic] {
        let cfg = XdpConfig {
            attach,
            ring_size: 64,
            ..copy_cfg()
        };
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let sent = std::sync::Barrier::new(2);
        let (got, st) = std::thread::scope(|s| {
            let rx = s.spawn(|| {
                p.run_in(Side::B, || {
                    let mut port = XdpPort::open("vB@0", &PortOptions::default(), &cfg).unwrap();
                    assert!(port.is_multi_buffer(), "{attach:?}");
                    ready_tx.send(()).unwrap();
                    // Not read while the frames arrive: the fill ring runs out.
                    sent.wait();
                    std::thread::sleep(Duration::from_millis(200));
                    let got = recv(&mut port, frames.len(), Duration::from_secs(1));
                    (got, port.stats())
                })
            });
            ready_rx.recv().unwrap();
            p.run_in(Side::A, || netns::send_raw("vA", &frames));
            sent.wait();
            rx.join().unwrap()
        });
        let drops = |r| st.rx_drops.get(r);
        use linerate::port::DropReason::{Kernel, TooBig};
        assert_eq!(drops(TooBig), 0, "{attach:?}: {st:?}");
        assert!(
            drops(Kernel) > 0,
            "{attach:?}: the fill ring ran short: {st:?}"
        );
        assert!(!got.is_empty(), "{attach:?}: {st:?}");
        assert_eq!(
            got.len() as u64 + st.rx_drops.total(),
            frames.len() as u64,
            "{attach:?}: received and dropped add up to sent: {st:?}"
        );
        for g in &got {
            let s = seq_of(g).unwrap() as usize;
            assert_eq!(g, &frames[s], "{attach:?}: byte-identical");
        }
    }
}

/// An `xdp:` port sends no frame longer than its link takes (the MTU, the Ethernet header and
/// a tag): with the MTU lowered from 9000 to 1500 while the port runs, the 9 014 B frames are
/// counted too_big (the kernel would have counted them sent and the device dropped them); every
/// frame counted sent arrives, and sent and dropped add up to what was offered.
#[test]
fn xdp_counts_frames_longer_than_a_lowered_mtu_too_big() {
    if !netns::require_priv() {
        return;
    }
    let _serial = serial();
    let p = NetnsPair::new().unwrap();
    for (side, i) in [(Side::A, "vA"), (Side::B, "vB")] {
        p.ip_in(side, &["link", "set", i, "mtu", "9000"]).unwrap();
    }
    // 64 short frames, then every other frame 9 014 B.
    let frames: Vec<Vec<u8>> = (0..464u32)
        .map(|s| {
            if s >= 64 && s % 2 == 0 {
                long_frame(p.mac_b, p.mac_a, s, 9014)
            } else {
                frame(p.mac_b, p.mac_a, s)
            }
        })
        .collect();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let (got, st) = std::thread::scope(|s| {
        let rx = s.spawn(|| {
            p.run_in(Side::B, || {
                let mut port =
                    XdpPort::open("vB@0", &PortOptions::default(), &XdpConfig::default()).unwrap();
                ready_tx.send(()).unwrap();
                recv(&mut port, frames.len(), Duration::from_secs(3))
            })
        });
        ready_rx.recv().unwrap();
        let st = p.run_in(Side::A, || {
            let mut port =
                XdpPort::open("vA@0", &PortOptions::default(), &XdpConfig::default()).unwrap();
            // The MTU changes under the running port.
            for side in [Side::A, Side::B] {
                let i = if side == Side::A { "vA" } else { "vB" };
                p.ip_in(side, &["link", "set", i, "mtu", "1500"]).unwrap();
            }
            // One frame a call: the port reads the MTU again every 64 calls, so the first 64
            // (short frames) let it see the change before the long ones come.
            let pool = Arc::new(
                Pool::new(&PoolConfig {
                    frames: 64,
                    frame_size: 16384,
                    ..Default::default()
                })
                .unwrap(),
            );
            let mut b = Batch::with_pool(&pool);
            for (i, f) in frames.iter().enumerate() {
                let mut fr = b.alloc().unwrap();
                fr.buf()[..f.len()].copy_from_slice(f);
                fr.push(Desc {
                    len: f.len() as u32,
                    wire_len: f.len() as u32,
                    ..Default::default()
                });
                let t0 = Instant::now();
                while !b.is_empty() && t0.elapsed() < Duration::from_secs(5) {
                    port.tx(&mut b).unwrap();
                    port.flush().unwrap();
                }
                assert!(b.is_empty(), "frame {i} handled");
                if i % 16 == 15 {
                    std::thread::sleep(Duration::from_micros(300));
                }
            }
            for _ in 0..20 {
                port.flush().unwrap();
                std::thread::sleep(Duration::from_millis(1));
            }
            port.stats()
        });
        (rx.join().unwrap(), st)
    });
    let too_big = st.tx_drops.get(linerate::port::DropReason::TooBig);
    assert_eq!(too_big, 200, "{st:?}");
    assert_eq!(st.tx_packets + too_big, frames.len() as u64, "{st:?}");
    assert_eq!(
        got.len() as u64,
        st.tx_packets,
        "every frame counted sent arrived: {st:?}"
    );
    assert!(got.iter().all(|g| g.len() < 1500), "only the short frames");
}

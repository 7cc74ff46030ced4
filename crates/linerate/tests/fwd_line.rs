//! `fwd` across three namespaces A → B → C: B forwards vB0 → vB1 (xdp, afpacket, and mixed)
//! with a BPF filter and l2fwd's MAC rewrite; C captures. C receives exactly what A sent minus
//! what the filter drops, with the rewritten MACs, and nothing is left behind. The kernel engine
//! (XDP program, DEVMAP redirect) delivers exactly N frames each way with l2fwd's MACs and
//! matching counters. Needs root.
#![deny(unsafe_code)]

use linerate_test_support::{line, netns};

use line::{NetnsLine, Node};
use linerate::apps::fwd::{self, Ended, FwdOptions, MacRewrite, Ports};
use linerate::filter::Filter;
use linerate::mem::{Batch, Desc, Pool, PoolConfig};
use linerate::os::iface_mac;
use linerate::port::xdp::kfwd::{KernelFwd, KernelFwdConfig};
use linerate::port::xdp::{AttachMode, XdpConfig, XdpPort};
use linerate::port::{LinkType, Port, PortOptions};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const MAGIC: &[u8; 8] = b"LRFWDLN1";

fn frame(dst: [u8; 6], src: [u8; 6], seq: u32, dport: u16) -> Vec<u8> {
    let mut f = Vec::with_capacity(64);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&[0x08, 0x00, 0x45, 0, 0, 46, 0, 0, 0, 0, 64, 17, 0, 0]);
    f.extend_from_slice(&[198, 18, 0, 1, 198, 19, 0, 1]);
    f.extend_from_slice(&[0x9c, 0x40]);
    f.extend_from_slice(&dport.to_be_bytes());
    f.extend_from_slice(&[0, 26, 0, 0]);
    f.extend_from_slice(MAGIC);
    f.extend_from_slice(&seq.to_be_bytes());
    f.resize(60, 0xee);
    f
}

fn seq_of(d: &[u8]) -> Option<u32> {
    if d.get(42..50)? != MAGIC {
        return None;
    }
    let s = d.get(50..54)?;
    Some(u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
}

fn send_paced(port: &mut dyn Port, frames: &[Vec<u8>]) {
    let pool = Arc::new(Pool::new(&PoolConfig::default()).unwrap());
    let mut b = Batch::with_pool(&pool);
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
            port.tx(&mut b).unwrap();
            port.flush().unwrap();
        }
        std::thread::sleep(Duration::from_micros(400));
    }
    port.flush().unwrap();
}

fn has_xdp(l: &NetnsLine, n: Node, ifname: &str) -> bool {
    l.ip_in(n, &["link", "show", "dev", ifname])
        .unwrap()
        .contains("xdp")
}

/// Runs A → B → C with B forwarding `in_uri` → `out_uri`; returns C's frames and B's report.
fn run_line(in_uri: &str, out_uri: &str, n: u32) {
    run_line_with(in_uri, out_uri, n, false)
}

/// As `run_line`; with `shared`, the two xdp ports share one UMEM (no copy in between).
fn run_line_with(in_uri: &str, out_uri: &str, n: u32, shared: bool) {
    let l = NetnsLine::new().unwrap();
    // Every third frame goes to UDP port 53 and is filtered out.
    let frames: Vec<Vec<u8>> = (0..n)
        .map(|s| {
            frame(
                l.mac_b0,
                l.mac_a,
                s,
                if s.is_multiple_of(3) { 53 } else { 9 },
            )
        })
        .collect();
    let pass = frames
        .iter()
        .filter(|f| f[36..38] == 9u16.to_be_bytes())
        .count();
    let stop = AtomicBool::new(false);
    let lr = &l;
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<()>();
    let (report, got) = std::thread::scope(|s| {
        let ready_c = ready_tx.clone();
        let c = s.spawn(move || {
            lr.run_in(Node::C, move || {
                let mut p = linerate::open_rx("afpacket:vC", &PortOptions::default()).unwrap();
                ready_c.send(()).unwrap();
                let mut got = Vec::new();
                let mut b = Batch::new();
                let mut last = Instant::now();
                let end = Instant::now() + Duration::from_secs(20);
                // Until everything expected arrived (or 5 s of silence), then 300 ms more to
                // catch anything extra.
                loop {
                    let quiet = if got.len() >= pass { 300 } else { 5000 };
                    if last.elapsed() >= Duration::from_millis(quiet) || Instant::now() >= end {
                        break;
                    }
                    if p.rx(&mut b).unwrap() > 0 {
                        last = Instant::now();
                    }
                    got.extend(
                        b.iter()
                            .filter(|x| seq_of(x.data).is_some())
                            .map(|x| x.data.to_vec()),
                    );
                    b.clear();
                }
                got
            })
        });
        let stop = &stop;
        let b = s.spawn(move || {
            lr.run_in(Node::B, move || {
                let o = PortOptions::default();
                let (mut p0, mut p1): (Box<dyn Port>, Box<dyn Port>) = if shared {
                    let big = PortOptions {
                        frames: 16384,
                        ..o.clone()
                    };
                    let cfg = XdpConfig::default();
                    let a = XdpPort::open(in_uri.trim_start_matches("xdp:"), &big, &cfg).unwrap();
                    let b =
                        XdpPort::open_shared(out_uri.trim_start_matches("xdp:"), &big, &cfg, &a)
                            .unwrap();
                    assert!(Arc::ptr_eq(a.pool().unwrap(), b.pool().unwrap()));
                    (Box::new(a), Box::new(b))
                } else {
                    (
                        linerate::open_rx(in_uri, &o).unwrap(),
                        linerate::open_tx(out_uri, &o).unwrap(),
                    )
                };
                let f = Filter::compile("udp port 9", LinkType::ETHERNET).unwrap();
                let in_kernel = p0.attach_filter(&f).unwrap();
                let opts = FwdOptions {
                    filter: (!in_kernel).then_some(f),
                    mac: MacRewrite::L2fwd {
                        port_macs: [iface_mac("vB0").unwrap(), iface_mac("vB1").unwrap()],
                    },
                    duration: Some(Duration::from_secs(30)),
                    ..Default::default()
                };
                ready_tx.send(()).unwrap();
                fwd::run(Ports::Two(p0.as_mut(), p1.as_mut()), &opts, stop, |_| {})
            })
        });
        ready_rx.recv().unwrap();
        ready_rx.recv().unwrap();
        lr.run_in(Node::A, || {
            let mut p = linerate::open_rx("afpacket:vA", &PortOptions::default()).unwrap();
            send_paced(p.as_mut(), &frames);
        });
        let got = c.join().unwrap();
        stop.store(true, Ordering::Relaxed);
        (b.join().unwrap(), got)
    });
    assert_eq!(report.ended, Ended::Stopped);
    assert!(report.error.is_none(), "{:?}", report.error);
    assert_eq!(got.len(), pass, "C got exactly what passed the filter");
    let st = report.stats;
    assert_eq!(st.ports[1].sent, pass as u64, "{st:?}");
    assert_eq!(st.total().dropped, 0, "{st:?}");
    if in_uri.starts_with("xdp:") {
        // User-space filter: every frame was received and the filtered ones counted.
        assert_eq!(st.ports[0].received, n as u64, "{st:?}");
        assert_eq!(st.ports[0].filtered, (n as usize - pass) as u64);
    } else {
        // Kernel filter: the dropped frames never reached user space.
        assert_eq!(st.ports[0].received, pass as u64, "{st:?}");
    }
    let mut seqs = std::collections::HashSet::new();
    for g in &got {
        assert_eq!(
            &g[..6],
            &[2, 0, 0, 0, 0, 1],
            "dst = 02:00:00:00:00:01 (TX port 1)"
        );
        assert_eq!(&g[6..12], &l.mac_b1, "src = vB1's MAC");
        let s = seq_of(g).unwrap();
        assert_eq!(&g[12..], &frames[s as usize][12..], "payload unchanged");
        assert!(!s.is_multiple_of(3), "filtered frame {s} came through");
        assert!(seqs.insert(s), "frame {s} twice");
    }
    for i in ["vB0", "vB1"] {
        assert!(!has_xdp(&l, Node::B, i), "XDP program left on {i}");
    }
    let names = l.ns.clone();
    drop(l);
    let list = netns::ip(&["netns", "list"]).unwrap();
    assert!(names.iter().all(|n| !list.contains(n.as_str())), "{list}");
}

#[test]
fn xdp_to_xdp_delivers_what_passes_the_filter_with_l2fwd_macs() {
    if !netns::require_priv() {
        return;
    }
    run_line("xdp:vB0", "xdp:vB1", 3000);
}

#[test]
fn afpacket_to_afpacket_with_kernel_filter() {
    if !netns::require_priv() {
        return;
    }
    run_line("afpacket:vB0", "afpacket:vB1", 3000);
}

#[test]
fn afpacket_to_xdp() {
    if !netns::require_priv() {
        return;
    }
    run_line("afpacket:vB0", "xdp:vB1", 2000);
}

#[test]
fn xdp_to_xdp_on_one_shared_umem() {
    if !netns::require_priv() {
        return;
    }
    run_line_with("xdp:vB0", "xdp:vB1", 3000, true);
}

/// Captures frames with the test signature on `ifname` of `node` until `want` arrived (or 5 s
/// of silence), then 300 ms more to catch extras.
fn capture(
    l: &NetnsLine,
    node: Node,
    ifname: &str,
    want: usize,
    ready: std::sync::mpsc::Sender<()>,
) -> Vec<Vec<u8>> {
    l.run_in(node, move || {
        let mut p =
            linerate::open_rx(&format!("afpacket:{ifname}"), &PortOptions::default()).unwrap();
        ready.send(()).unwrap();
        let mut got = Vec::new();
        let mut b = Batch::new();
        let mut last = Instant::now();
        let end = Instant::now() + Duration::from_secs(20);
        loop {
            let quiet = if got.len() >= want { 300 } else { 5000 };
            if last.elapsed() >= Duration::from_millis(quiet) || Instant::now() >= end {
                break;
            }
            if p.rx(&mut b).unwrap() > 0 {
                last = Instant::now();
            }
            got.extend(
                b.iter()
                    .filter(|x| seq_of(x.data).is_some())
                    .map(|x| x.data.to_vec()),
            );
            b.clear();
        }
        got
    })
}

/// The kernel engine (XDP program, DEVMAP redirect) on B: A sends `n` frames (and C sends `m`
/// back with `bidir`); each end receives exactly those, with l2fwd's MACs; the program's
/// counters say the same; no program is left on B's interfaces.
fn kernel_line(n: u32, m: u32, bidir: bool) {
    let l = NetnsLine::new().unwrap();
    // A redirect into a veth needs NAPI on its peer (an XDP program, or GRO).
    for (node, i) in [(Node::C, "vC"), (Node::A, "vA")] {
        let st = std::process::Command::new("ip")
            .args(["netns", "exec", l.ns(node), "ethtool", "-K", i, "gro", "on"])
            .output()
            .expect("ethtool");
        assert!(st.status.success(), "ethtool -K {i} gro on: {st:?}");
    }
    let fwd_ac: Vec<Vec<u8>> = (0..n).map(|s| frame(l.mac_b0, l.mac_a, s, 9)).collect();
    let fwd_ca: Vec<Vec<u8>> = (0..m)
        .map(|s| frame(l.mac_b1, l.mac_c, 100_000 + s, 9))
        .collect();
    let stop = AtomicBool::new(false);
    let lr = &l;
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<()>();
    let (report, at_c, at_a) = std::thread::scope(|s| {
        let rc = ready_tx.clone();
        let c = s.spawn(move || capture(lr, Node::C, "vC", n as usize, rc));
        let ra = ready_tx.clone();
        let want_a = if bidir { m as usize } else { 0 };
        let a = s.spawn(move || capture(lr, Node::A, "vA", want_a, ra));
        let stop = &stop;
        let b = s.spawn(move || {
            lr.run_in(Node::B, move || {
                let cfg = KernelFwdConfig {
                    ifaces: ["vB0".into(), "vB1".into()],
                    bidir,
                    mac: [
                        Some((iface_mac("vB0").unwrap(), [2, 0, 0, 0, 0, 0])),
                        Some((iface_mac("vB1").unwrap(), [2, 0, 0, 0, 0, 1])),
                    ],
                    attach: AttachMode::Native,
                };
                let mut k = KernelFwd::open(&cfg).unwrap();
                let opts = FwdOptions {
                    bidir,
                    duration: Some(Duration::from_secs(30)),
                    ..Default::default()
                };
                ready_tx.send(()).unwrap();
                fwd::run_kernel(&mut k, &opts, stop, |_| {})
            })
        });
        for _ in 0..3 {
            ready_rx.recv().unwrap();
        }
        let (fa, fc) = (&fwd_ac, &fwd_ca);
        std::thread::scope(|s2| {
            s2.spawn(|| {
                lr.run_in(Node::A, || {
                    let mut p = linerate::open_rx("afpacket:vA", &PortOptions::default()).unwrap();
                    send_paced(p.as_mut(), fa);
                })
            });
            if bidir {
                s2.spawn(|| {
                    lr.run_in(Node::C, || {
                        let mut p =
                            linerate::open_rx("afpacket:vC", &PortOptions::default()).unwrap();
                        send_paced(p.as_mut(), fc);
                    })
                });
            }
        });
        let at_c = c.join().unwrap();
        let at_a = a.join().unwrap();
        stop.store(true, Ordering::Relaxed);
        (b.join().unwrap(), at_c, at_a)
    });
    assert_eq!(report.ended, Ended::Stopped);
    let check = |got: &[Vec<u8>], sent: &[Vec<u8>], dst: [u8; 6], src: [u8; 6], base: u32| {
        assert_eq!(got.len(), sent.len(), "exactly what was sent arrived");
        let mut seqs = std::collections::HashSet::new();
        for g in got {
            assert_eq!(&g[..6], &dst, "dst = 02:00:00:00:00:TX_PORTID");
            assert_eq!(&g[6..12], &src, "src = the output's MAC");
            let s = seq_of(g).unwrap();
            assert_eq!(&g[12..], &sent[(s - base) as usize][12..], "rest unchanged");
            assert!(seqs.insert(s), "frame {s} twice");
        }
    };
    check(&at_c, &fwd_ac, [2, 0, 0, 0, 0, 1], l.mac_b1, 0);
    let st = report.stats;
    assert_eq!(st.nports, 2);
    assert_eq!(st.ports[0].received, n as u64, "{st:?}");
    assert_eq!(st.ports[1].sent, n as u64, "{st:?}");
    if bidir {
        check(&at_a, &fwd_ca, [2, 0, 0, 0, 0, 0], l.mac_b0, 100_000);
        assert_eq!(st.ports[1].received, m as u64, "{st:?}");
        assert_eq!(st.ports[0].sent, m as u64, "{st:?}");
    } else {
        assert!(at_a.is_empty(), "nothing comes back without --bidir");
        assert_eq!((st.ports[1].received, st.ports[0].sent), (0, 0), "{st:?}");
    }
    assert_eq!(st.total().dropped, 0, "{st:?}");
    for i in ["vB0", "vB1"] {
        assert!(!has_xdp(&l, Node::B, i), "XDP program left on {i}");
    }
    let names = l.ns.clone();
    drop(l);
    let list = netns::ip(&["netns", "list"]).unwrap();
    assert!(names.iter().all(|n| !list.contains(n.as_str())), "{list}");
}

#[test]
fn kernel_engine_forwards_exactly_n_with_l2fwd_macs() {
    if !netns::require_priv() {
        return;
    }
    kernel_line(3000, 0, false);
}

#[test]
fn kernel_engine_bidir() {
    if !netns::require_priv() {
        return;
    }
    kernel_line(2000, 1500, true);
}

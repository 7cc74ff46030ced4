//! What an `afpacket:` capture takes, compared with tcpdump on the same traffic: both directions
//! by default (`count`), `-Q in` / `-Q out` one each, `afpacket:any` every interface as Linux
//! cooked v2 (SLL2) frames, and `fwd` only what arrives (it never reads its own output). Needs
//! root (skips otherwise, fails instead under LINERATE_REQUIRE_PRIV=1).
#![deny(unsafe_code)]

use linerate_test_support::netns::{self, NetnsPair, Side};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("linerate-dir-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

/// Kills (by its pid) a child still running when the test ends.
struct Reap(Option<Child>);

impl Drop for Reap {
    fn drop(&mut self) {
        if let Some(c) = &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `linerate ARGS` in the namespace of `side`, once its JSON start line is out.
fn linerate_in(
    pair: &NetnsPair,
    side: Side,
    args: &[&str],
) -> (Reap, std::io::Lines<BufReader<std::process::ChildStdout>>) {
    let mut c = Command::new("ip")
        .args([
            "netns",
            "exec",
            pair.ns(side),
            env!("CARGO_BIN_EXE_linerate"),
        ])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn linerate");
    let mut lines = BufReader::new(c.stdout.take().unwrap()).lines();
    let first = lines.next().expect("start line").expect("read");
    assert!(first.contains("\"type\":\"start\""), "{args:?}: {first}");
    (Reap(Some(c)), lines)
}

/// `tcpdump ARGS` in the namespace of `side`, once it says it is listening.
fn tcpdump_in(pair: &NetnsPair, side: Side, args: &[&str]) -> Reap {
    let mut c = Command::new("ip")
        .args(["netns", "exec", pair.ns(side), "tcpdump", "-n", "-U"])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tcpdump");
    let mut err = BufReader::new(c.stderr.take().unwrap());
    let mut line = String::new();
    loop {
        line.clear();
        if err.read_line(&mut line).unwrap_or(0) == 0 {
            panic!("tcpdump ended before listening");
        }
        if line.contains("listening on") {
            break;
        }
    }
    // Keep draining its standard error so it never blocks on it.
    std::thread::spawn(move || {
        let _ = err.read_to_end(&mut Vec::new());
    });
    Reap(Some(c))
}

/// Waits for a child to end by itself (within 30 s).
fn wait(r: &mut Reap, what: &str) -> std::process::ExitStatus {
    let c = r.0.as_mut().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(s) = c.try_wait().unwrap() {
            r.0 = None;
            return s;
        }
        assert!(Instant::now() < deadline, "{what} did not finish");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The summary line of a `--json` run that ended.
fn summary(lines: std::io::Lines<BufReader<std::process::ChildStdout>>) -> serde_json::Value {
    lines
        .map_while(Result::ok)
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(&l).ok())
        .find(|j| j["type"] == "summary")
        .expect("summary")
}

/// Link type and records of a classic pcap (either byte order of tcpdump's; ours is native).
fn pcap_records(path: &Path) -> (u32, Vec<Vec<u8>>) {
    let d = std::fs::read(path).expect("pcap written");
    assert!(d.len() >= 24, "pcap header missing in {}", path.display());
    let link = u32::from_le_bytes(d[20..24].try_into().unwrap());
    let mut off = 24;
    let mut out = Vec::new();
    while off + 16 <= d.len() {
        let cap = u32::from_le_bytes(d[off + 8..off + 12].try_into().unwrap()) as usize;
        assert!(off + 16 + cap <= d.len(), "truncated record");
        out.push(d[off + 16..off + 16 + cap].to_vec());
        off += 16 + cap;
    }
    (link, out)
}

/// A UDP echo server on 198.18.0.2:7777 in namespace B (a thread of this process) for as long
/// as the returned guard lives.
struct Echo {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Echo {
    fn start(pair: &NetnsPair) -> Echo {
        let ns = pair.ns(Side::B).to_string();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let s2 = stop.clone();
        let thread = std::thread::spawn(move || {
            linerate::os::enter_netns(&ns).expect("enter namespace B");
            let sock = std::net::UdpSocket::bind("198.18.0.2:7777").expect("bind echo");
            sock.set_read_timeout(Some(Duration::from_millis(50)))
                .unwrap();
            ready_tx.send(()).unwrap();
            let mut buf = [0u8; 2048];
            while !s2.load(std::sync::atomic::Ordering::Relaxed) {
                if let Ok((n, from)) = sock.recv_from(&mut buf) {
                    let _ = sock.send_to(&buf[..n], from);
                }
            }
        });
        ready_rx.recv().expect("echo server started");
        Echo {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Echo {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Sends `n` datagrams from namespace A to the echo server, each after the previous echo came
/// back.
fn echo_from_a(pair: &NetnsPair, n: u32) {
    pair.run_in(Side::A, || {
        let sock = std::net::UdpSocket::bind("198.18.0.1:0").expect("bind");
        sock.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut buf = [0u8; 64];
        for i in 0..n {
            sock.send_to(&i.to_be_bytes(), "198.18.0.2:7777")
                .expect("send");
            let (k, _) = sock.recv_from(&mut buf).expect("echo back");
            assert_eq!(&buf[..k], &i.to_be_bytes());
        }
    })
}

/// 20 UDP datagrams sent from the capturing side and their 20 echoes: tcpdump -i and `count`
/// both take the 40; `-Q in` the 20 echoes, `-Q out` the 20 sent; a pcapng from `count` marks
/// each with its direction (epb_flags), as tshark reads it.
#[test]
fn count_takes_both_directions_as_tcpdump_and_q_picks_one() {
    if !netns::require_priv() {
        return;
    }
    let pair = NetnsPair::new().expect("netns pair");
    pair.no_ipv6().unwrap();
    let _echo = Echo::start(&pair);
    // ARP first, so that nothing but the datagrams is sent while capturing.
    echo_from_a(&pair, 1);
    let td = tmp("td.pcap");
    let ng = tmp("both.pcapng");
    let mut tcpdump = tcpdump_in(
        &pair,
        Side::A,
        &[
            "-i",
            "vA",
            "-c",
            "40",
            "-w",
            td.to_str().unwrap(),
            "udp port 7777",
        ],
    );
    let common = [
        "count",
        "-i",
        "afpacket:vA",
        "-f",
        "udp port 7777",
        "-t",
        "20",
        "--json",
        "-q",
    ];
    let mut both: Vec<&str> = common.to_vec();
    both.extend(["-c", "40", "-w", ng.to_str().unwrap()]);
    let (mut c_both, l_both) = linerate_in(&pair, Side::A, &both);
    let mut inn: Vec<&str> = common.to_vec();
    inn.extend(["-c", "20", "-Q", "in"]);
    let (mut c_in, l_in) = linerate_in(&pair, Side::A, &inn);
    let mut out: Vec<&str> = common.to_vec();
    out.extend(["-c", "20", "--direction", "out"]);
    let (mut c_out, l_out) = linerate_in(&pair, Side::A, &out);

    echo_from_a(&pair, 20);

    assert!(wait(&mut tcpdump, "tcpdump").success());
    for (c, what) in [
        (&mut c_both, "count"),
        (&mut c_in, "count -Q in"),
        (&mut c_out, "count -Q out"),
    ] {
        assert!(wait(c, what).success(), "{what} failed");
    }
    let (s_both, s_in, s_out) = (summary(l_both), summary(l_in), summary(l_out));
    let (_, td_recs) = pcap_records(&td);
    assert_eq!(td_recs.len(), 40, "tcpdump -i vA");
    assert_eq!(s_both["pkts"], 40, "{s_both}");
    assert_eq!(s_both["ended"], "count reached", "{s_both}");
    assert_eq!(s_in["pkts"], 20, "{s_in}");
    assert_eq!(s_out["pkts"], 20, "{s_out}");
    for s in [&s_both, &s_in, &s_out] {
        assert_eq!(s["drops"], 0, "{s}");
    }
    // The pcapng's packets each carry their direction: 20 inbound replies, 20 outbound requests.
    let t = Command::new("tshark")
        .args(["-r", ng.to_str().unwrap(), "-T", "fields"])
        .args(["-e", "frame.packet_flags_direction", "-e", "udp.dstport"])
        .output()
        .expect("run tshark");
    assert!(t.status.success(), "{}", String::from_utf8_lossy(&t.stderr));
    let text = String::from_utf8_lossy(&t.stdout);
    let mut inbound_replies = 0;
    let mut outbound_requests = 0;
    for l in text.lines() {
        let f: Vec<&str> = l.split('\t').collect();
        // tshark 4.0 prints the direction bits in hex (0x00000001), later versions in decimal.
        let dir = f
            .first()
            .map(|d| d.trim_start_matches("0x").trim_start_matches('0'));
        match (dir, f.get(1).copied()) {
            (Some("1"), Some(p)) if p != "7777" => inbound_replies += 1,
            (Some("2"), Some("7777")) => outbound_requests += 1,
            other => panic!("unexpected packet in the pcapng: {other:?}"),
        }
    }
    assert_eq!((inbound_replies, outbound_requests), (20, 20), "{text}");
    let _ = std::fs::remove_file(&td);
    let _ = std::fs::remove_file(&ng);
    // Empty once every test of the run is done with it.
    let _ = std::fs::remove_dir(td.parent().unwrap());
}

/// Two interfaces in one namespace (vB from the pair, and vD of a second veth whose other end
/// vC is in namespace A), 250 frames arriving on each: `tcpdump -i any` and then `count -i
/// afpacket:any` on the same sending both capture the 500, as LINUX_SLL2, byte for byte the
/// same records (cooked header with the interface index, then the IP packet). Bare `-i any`
/// names the same port.
#[test]
fn any_captures_every_interface_as_linux_cooked_v2_as_tcpdump() {
    if !netns::require_priv() {
        return;
    }
    const PER_IF: u32 = 250;
    let pair = NetnsPair::new().expect("netns pair");
    pair.no_ipv6().unwrap();
    pair.ip_in(
        Side::A,
        &[
            "link",
            "add",
            "vC",
            "type",
            "veth",
            "peer",
            "name",
            "vD",
            "netns",
            pair.ns(Side::B),
        ],
    )
    .expect("second veth");
    pair.ip_in(Side::A, &["link", "set", "vC", "up"]).unwrap();
    pair.ip_in(Side::B, &["link", "set", "vD", "up"]).unwrap();
    let frames: Vec<Vec<u8>> = (0..PER_IF)
        .map(|i| netns::udp_frame(pair.mac_b, pair.mac_a, 7, i))
        .collect();
    let send = || {
        pair.run_in(Side::A, || {
            netns::send_raw("vA", &frames);
            netns::send_raw("vC", &frames);
        })
    };
    let filter = "udp dst port 9";

    let td = tmp("any-td.pcap");
    let mut tcpdump = tcpdump_in(
        &pair,
        Side::B,
        &["-i", "any", "-c", "500", "-w", td.to_str().unwrap(), filter],
    );
    send();
    assert!(wait(&mut tcpdump, "tcpdump -i any").success());
    let (td_link, mut td_recs) = pcap_records(&td);

    let mut ours = Vec::new();
    for (k, input) in ["afpacket:any", "any"].into_iter().enumerate() {
        let w = tmp(&format!("any-{k}.pcap"));
        let (mut c, lines) = linerate_in(
            &pair,
            Side::B,
            &[
                "count",
                "-i",
                input,
                "-f",
                filter,
                "-c",
                "500",
                "-t",
                "20",
                "--json",
                "-q",
                "-w",
                w.to_str().unwrap(),
            ],
        );
        send();
        assert!(wait(&mut c, "count -i any").success());
        let s = summary(lines);
        assert_eq!(s["pkts"], 500, "{input}: {s}");
        let (link, recs) = pcap_records(&w);
        assert_eq!(link, 276, "{input}: LINKTYPE_LINUX_SLL2");
        ours.push(recs);
        let _ = std::fs::remove_file(&w);
    }
    assert_eq!(td_link, 276, "tcpdump -i any writes LINUX_SLL2 here");
    assert_eq!(td_recs.len(), 500);
    td_recs.sort();
    for mut recs in ours {
        recs.sort();
        assert_eq!(recs.len(), td_recs.len());
        for (i, (a, b)) in recs.iter().zip(&td_recs).enumerate() {
            assert!(
                a == b,
                "record {i}: ours {:02x?} tcpdump {:02x?}",
                &a[..a.len().min(28)],
                &b[..b.len().min(28)]
            );
        }
    }
    let _ = std::fs::remove_file(&td);
    let _ = std::fs::remove_dir(td.parent().unwrap());
}

/// `fwd` bouncing frames back out of the interface they came in on takes only what arrives by
/// default: 100 frames from A arrive on vB while the host B itself sends 50 on vB (through the
/// qdisc, as any host traffic, which taps see): fwd receives and bounces the 100 only. With
/// `-Q inout` it takes the host's 50 too. (Its own output never comes back either way: the
/// afpacket transmit ring bypasses the qdisc and the taps, as tcpdump on vB would show.)
#[test]
fn fwd_bounce_takes_only_what_arrives_unless_asked() {
    if !netns::require_priv() {
        return;
    }
    const N: u32 = 100;
    const HOST: u32 = 50;
    let pair = NetnsPair::new().expect("netns pair");
    pair.no_ipv6().unwrap();
    let from_a: Vec<Vec<u8>> = (0..N)
        .map(|i| netns::udp_frame(pair.mac_b, pair.mac_a, 3, i))
        .collect();
    let from_b: Vec<Vec<u8>> = (0..HOST)
        .map(|i| netns::udp_frame(pair.mac_a, pair.mac_b, 4, i))
        .collect();
    // The filter keeps out B's ARP exchange with A (B answers the UDP with ICMP).
    let bounce = [
        "fwd",
        "-i",
        "afpacket:vB",
        "-o",
        "afpacket:vB",
        "--no-mac-updating",
        "--json",
        "--period",
        "0",
        "-f",
        "udp dst port 9",
        "-t",
        "3",
    ];
    for (q, want) in [(None, N), (Some("inout"), N + HOST)] {
        let mut args = bounce.to_vec();
        if let Some(q) = q {
            args.extend(["-Q", q]);
        }
        let (mut c, lines) = linerate_in(&pair, Side::B, &args);
        pair.run_in(Side::A, || netns::send_raw("vA", &from_a));
        pair.run_in(Side::B, || netns::send_raw("vB", &from_b));
        assert!(wait(&mut c, "fwd").success());
        let s = summary(lines);
        // One port, in and out.
        assert_eq!(s["ports"][0]["received"], want, "-Q {q:?}: {s}");
        assert_eq!(s["ports"][0]["sent"], want, "-Q {q:?}: {s}");
    }
}

/// `-Q out` (and `inout`) where no sent packet can be seen is a usage error naming why; on a
/// capture file any -Q is refused, as libpcap ("not supported on savefiles").
#[test]
fn q_out_is_refused_on_inputs_that_only_hold_what_arrived() {
    let bin = env!("CARGO_BIN_EXE_linerate");
    for (args, code) in [
        (vec!["count", "-i", "mem:q-out", "-Q", "out", "-t", "1"], 2),
        (vec!["flows", "-i", "mem:q-out", "-Q", "inout"], 2),
        (vec!["count", "-i", "afpacket:lo", "-Q", "sideways"], 2),
    ] {
        let o = Command::new(bin).args(&args).output().unwrap();
        assert_eq!(
            o.status.code(),
            Some(code),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("in, out or inout") || err.contains("only holds packets that arrived"),
            "{args:?}: {err}"
        );
    }
    let f = tmp("empty.pcap");
    std::fs::write(
        &f,
        [
            0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 1, 0, 0,
            0,
        ],
    )
    .unwrap();
    let o = Command::new(bin)
        .args(["count", "-i", f.to_str().unwrap(), "-Q", "in", "-q"])
        .output()
        .unwrap();
    // A savefile takes no direction at all, as libpcap refuses pcap_setdirection on one.
    assert_eq!(
        o.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("not supported on savefiles"));
    let _ = std::fs::remove_file(&f);
    let _ = std::fs::remove_dir(f.parent().unwrap());
}

/// `flows` on afpacket meters both directions by default, as `count` captures them: the 20
/// datagrams sent from the capturing side and their 20 echoes are one flow, 20 packets each
/// way; with `-Q in` only the echoes are seen (20 one way, none back).
#[test]
fn flows_meters_both_directions_by_default() {
    if !netns::require_priv() {
        return;
    }
    let pair = NetnsPair::new().expect("netns pair");
    pair.no_ipv6().unwrap();
    let _echo = Echo::start(&pair);
    echo_from_a(&pair, 1);
    for (q, want) in [(None, (20, 20)), (Some("in"), (20, 0))] {
        let mut c = Command::new("ip")
            .args([
                "netns",
                "exec",
                pair.ns(Side::A),
                env!("CARGO_BIN_EXE_linerate"),
            ])
            .args([
                "flows",
                "-i",
                "afpacket:vA",
                "-w",
                "-",
                "--format",
                "jsonl",
                "--json",
            ])
            .args(q.map(|q| vec!["-Q", q]).unwrap_or_default())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn linerate flows");
        // The start line goes to standard error once the input is open.
        let mut err = BufReader::new(c.stderr.take().unwrap());
        let mut line = String::new();
        err.read_line(&mut line).unwrap();
        assert!(line.contains("\"type\":\"start\""), "{line}");
        let mut reap = Reap(Some(c));
        echo_from_a(&pair, 20);
        std::thread::sleep(Duration::from_millis(200));
        let c = reap.0.take().unwrap();
        let _ = linerate::os::signal(c.id(), libc::SIGINT);
        let out = c.wait_with_output().unwrap();
        assert!(out.status.success());
        let text = String::from_utf8_lossy(&out.stdout);
        let recs: Vec<serde_json::Value> = text
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .filter(|r: &serde_json::Value| r["proto"] == "udp")
            .collect();
        let (s, d): (u64, u64) = recs.iter().fold((0, 0), |(s, d), r| {
            (
                s + r["spkts"].as_u64().unwrap_or(0),
                d + r["dpkts"].as_u64().unwrap_or(0),
            )
        });
        assert_eq!((s, d), want, "-Q {q:?}: {text}");
    }
}

/// `-i afpacket:vA,any -f EXPR`: the filter is compiled for each input's link type (Ethernet
/// on vA, LINUX_SLL2 on any), so the 20 matching frames that arrive on vA are counted twice,
/// once per input (40), instead of the cooked copies being judged as Ethernet and lost.
#[test]
fn a_filter_on_mixed_link_types_matches_on_every_input() {
    if !netns::require_priv() {
        return;
    }
    let pair = NetnsPair::new().expect("netns pair");
    pair.no_ipv6().unwrap();
    let (mut c, lines) = linerate_in(
        &pair,
        Side::A,
        &[
            "count",
            "-i",
            "afpacket:vA,any",
            "-f",
            "udp port 10001",
            "-c",
            "40",
            "-t",
            "10",
            "--json",
            "-q",
        ],
    );
    let frames: Vec<Vec<u8>> = (0..20)
        .map(|s| netns::udp_frame(pair.mac_a, pair.mac_b, 1, s))
        .collect();
    pair.run_in(Side::B, || netns::send_raw("vB", &frames));
    assert!(wait(&mut c, "count").success());
    let s = summary(lines);
    assert_eq!(s["pkts"], 40, "{s}");
    assert_eq!(s["ended"], "count reached", "{s}");
}

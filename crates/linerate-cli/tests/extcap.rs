//! `linerate extcap`: Wireshark's extcap conversation, checked as Wireshark reads it, and for
//! real: `linerate extcap install` into a temporary XDG_CONFIG_HOME, then tshark (Debian's
//! Wireshark 4.0) lists a running cluster's queue and captures every packet of it, with the
//! capture filter and the interface statistics block. Every process is started here and killed
//! by its PID (through its `Child`) when a test ends, however it ends.
#![deny(unsafe_code)]

use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_linerate");

/// A unique cluster id per test and run.
fn cluster_id(k: u32) -> u32 {
    200_000 + (std::process::id() % 10_000) * 10 + k
}

fn seg(id: u32) -> PathBuf {
    linerate_test_support::cluster_segment(id)
}

/// Children ended and reaped, and a temporary folder removed, when the test ends. A child
/// still running is stopped as a user stops it (SIGTERM, SIGKILL only if it does not end), so
/// that the cluster masters run their exit path: a SIGKILLed master leaves its 78 MB segment
/// in /dev/shm. A segment left all the same is removed and, unless the test already failed,
/// fails it.
struct Guard {
    procs: Vec<Child>,
    dir: PathBuf,
    segments: linerate_test_support::ClusterSegments,
}

impl Guard {
    fn new(name: &str) -> Guard {
        let dir = std::env::temp_dir().join(format!("lr-extcap-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Guard {
            procs: Vec::new(),
            dir,
            segments: Default::default(),
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        // Consumers (pushed last) first, then their masters.
        for c in self.procs.iter_mut().rev() {
            linerate_test_support::stop_child(c, Duration::from_secs(10));
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        let left = self.segments.check();
        if !left.is_empty() && !std::thread::panicking() {
            panic!("cluster segments left behind (removed now): {left:?}");
        }
    }
}

fn linerate(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("run linerate")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits for a child to exit, at most `limit`.
fn finish(c: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let t0 = Instant::now();
    loop {
        if let Some(s) = c.try_wait().unwrap() {
            return s;
        }
        assert!(
            t0.elapsed() < limit,
            "process did not finish within {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// One sentence of the conversation as Wireshark's extcap parser reads it: a keyword, then
/// `{key=value}` groups (a value runs to the closing brace; nothing but spaces between).
fn sentence(line: &str) -> Option<(String, HashMap<String, String>)> {
    let (kw, mut rest) = line.split_once(' ')?;
    let mut m = HashMap::new();
    loop {
        rest = rest.trim_start();
        if rest.is_empty() {
            break;
        }
        let body = rest.strip_prefix('{')?;
        let end = body.find('}')?;
        let (k, v) = body[..end].split_once('=')?;
        m.insert(k.to_string(), v.to_string());
        rest = &body[end + 1..];
    }
    Some((kw.to_string(), m))
}

/// Every line of `out` as a sentence (a line that is not one fails the test).
fn sentences(out: &[u8]) -> Vec<(String, HashMap<String, String>)> {
    text(out)
        .lines()
        .map(|l| sentence(l).unwrap_or_else(|| panic!("not an extcap sentence: {l:?}")))
        .collect()
}

/// A master fed from `file`, waiting for its one consumer, as `count -D` finds it.
fn cluster_from(g: &mut Guard, id: u32, file: &Path) -> usize {
    let ids = id.to_string();
    let out = g.dir.join(format!("balance-{id}.json"));
    let c = Command::new(BIN)
        .args(["balance", "-i"])
        .arg(file)
        .args([
            "-c",
            &ids,
            "-n",
            "1",
            "--wait-consumers",
            "-t",
            "60",
            "--json",
        ])
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .expect("start linerate balance");
    g.procs.push(c);
    g.segments.add(id);
    wait_for("the cluster's segment", Duration::from_secs(10), || {
        seg(id).exists()
    });
    g.procs.len() - 1
}

/// The master's JSON summary, once it has ended.
fn master_summary(g: &mut Guard, i: usize, id: u32) -> serde_json::Value {
    let s = finish(&mut g.procs[i], Duration::from_secs(60));
    assert!(s.success(), "balance exited with {s}");
    let out = std::fs::read_to_string(g.dir.join(format!("balance-{id}.json"))).unwrap();
    out.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|j| j["type"] == "summary")
        .unwrap_or_else(|| panic!("no summary from balance: {out}"))
}

fn rd32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

fn rd16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(b[at..at + 2].try_into().unwrap())
}

/// The packets (bytes) and the statistics blocks' options (code → value) of a little-endian
/// pcapng file, every block checked whole.
#[allow(clippy::type_complexity)]
fn pcapng(f: &[u8]) -> (Vec<String>, Vec<Vec<u8>>, Vec<HashMap<u16, Vec<u8>>>) {
    assert!(f.len() >= 28 && rd32(f, 0) == 0x0a0d_0d0a, "not pcapng");
    let (mut names, mut pkts, mut stats) = (Vec::new(), Vec::new(), Vec::new());
    let options = |body: &[u8], mut at: usize| {
        let mut m = HashMap::new();
        while at + 4 <= body.len() {
            let (code, len) = (rd16(body, at), rd16(body, at + 2) as usize);
            if code == 0 {
                break;
            }
            m.insert(code, body[at + 4..at + 4 + len].to_vec());
            at += 4 + len.div_ceil(4) * 4;
        }
        m
    };
    let mut at = 0;
    while at < f.len() {
        let (t, len) = (rd32(f, at), rd32(f, at + 4) as usize);
        assert!(len >= 12 && at + len <= f.len(), "cut block at {at}");
        assert_eq!(rd32(f, at + len - 4) as usize, len, "trailer at {at}");
        let body = &f[at + 8..at + len - 4];
        match t {
            1 => names.push(text(options(body, 8).get(&2).map_or(&[][..], |v| v))),
            6 => pkts.push(body[20..20 + rd32(body, 12) as usize].to_vec()),
            5 => stats.push(options(body, 12)),
            _ => {}
        }
        at += len;
    }
    (names, pkts, stats)
}

/// The packets (bytes) of a classic little-endian pcap file.
fn pcap_packets(f: &[u8]) -> Vec<Vec<u8>> {
    let mut at = 24;
    let mut v = Vec::new();
    while at + 16 <= f.len() {
        let cap = rd32(f, at + 8) as usize;
        v.push(f[at + 16..at + 16 + cap].to_vec());
        at += 16 + cap;
    }
    v
}

fn u64_opt(o: &HashMap<u16, Vec<u8>>, code: u16) -> u64 {
    u64::from_le_bytes(o[&code][..].try_into().unwrap())
}

const ISB_IFRECV: u16 = 4;
const ISB_IFDROP: u16 = 5;
const ISB_ACCEPT: u16 = 6;
const ISB_OSDROP: u16 = 7;

fn sample() -> Option<PathBuf> {
    let f = linerate_test_support::corpus()?.join("afs.pcap");
    if !f.exists() {
        linerate_test_support::skip("afs.pcap is not in the capture corpus");
        return None;
    }
    Some(f)
}

/// tshark (Debian's Wireshark) with the personal configuration in `xdg` (and a home beside
/// it: Wireshark 4.1 and later read `~/.local/lib/wireshark/extcap`).
fn tshark(xdg: &Path, args: &[&str]) -> Output {
    Command::new("tshark")
        .args(args)
        .env("XDG_CONFIG_HOME", xdg)
        .env("HOME", xdg.with_file_name("home"))
        .stdin(Stdio::null())
        .output()
        .expect("run tshark")
}

#[test]
fn the_conversation_reads_as_wireshark_reads_it() {
    let Some(file) = sample() else { return };
    let mut g = Guard::new("conv");
    let id = cluster_id(1);
    cluster_from(&mut g, id, &file);
    // As Wireshark 4.0 asks (tshark -D).
    let o = linerate(&["extcap", "--extcap-interfaces", "--extcap-version=4.0"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let s = sentences(&o.stdout);
    assert_eq!(s[0].0, "extcap", "the version sentence comes first");
    assert!(!s[0].1["version"].is_empty());
    let ifaces: Vec<&HashMap<String, String>> = s[1..]
        .iter()
        .map(|(k, m)| {
            assert_eq!(k, "interface");
            m
        })
        .collect();
    let values: std::collections::HashSet<&str> =
        ifaces.iter().map(|m| m["value"].as_str()).collect();
    assert_eq!(values.len(), ifaces.len(), "interface values are unique");
    let q = format!("cluster:{id}@0");
    let mine = ifaces
        .iter()
        .find(|m| m["value"] == q)
        .unwrap_or_else(|| panic!("{q} not listed: {}", text(&o.stdout)));
    assert!(
        mine["display"].starts_with(&format!("linerate cluster {id} queue 0")),
        "{mine:?}"
    );
    assert!(values.contains("afpacket:any") && values.contains("afpacket:lo"));
    // Link types and options of one interface.
    let o = linerate(&["extcap", "--extcap-interface", &q, "--extcap-dlts"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let s = sentences(&o.stdout);
    assert_eq!(s.len(), 1);
    assert_eq!(s[0].0, "dlt");
    assert_eq!(
        (s[0].1["number"].as_str(), s[0].1["name"].as_str()),
        ("1", "EN10MB")
    );
    let o = linerate(&["extcap", "--extcap-interface", &q, "--extcap-config"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(sentences(&o.stdout)
        .iter()
        .all(|(k, _)| k == "arg" || k == "value"));
    // Wireshark's check of its capture-filter field: exit 0 and nothing said when it compiles.
    let o = linerate(&[
        "extcap",
        "--extcap-interface",
        &q,
        "--extcap-capture-filter",
        "udp port 7001",
    ]);
    assert!(
        o.status.success() && o.stdout.is_empty(),
        "{}",
        text(&o.stdout)
    );
    let o = linerate(&[
        "extcap",
        "--extcap-interface",
        &q,
        "--extcap-capture-filter",
        "udp port",
    ]);
    assert!(!o.status.success());
    assert!(text(&o.stdout).contains("udp port"), "{}", text(&o.stdout));
    // Not a live port: refused as a usage error.
    let o = linerate(&[
        "extcap",
        "--extcap-interface",
        "pcap:/tmp/x.pcap",
        "--extcap-dlts",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
}

#[test]
fn install_then_tshark_lists_the_queue_and_captures_every_packet_with_the_filter_and_the_isb() {
    if !linerate_test_support::require_tool(
        "tshark",
        "Debian package tshark, scripts/setup.sh --tests",
    ) {
        return;
    }
    let Some(file) = sample() else { return };
    let mut g = Guard::new("tshark");
    let xdg = g.dir.join("config");
    let home = g.dir.join("home");
    let o = Command::new(BIN)
        .args(["extcap", "install"])
        .env("XDG_CONFIG_HOME", &xdg)
        .env("HOME", &home)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    // Wireshark 4.0 (Debian 12) reads $XDG_CONFIG_HOME/wireshark/extcap; 4.1 and later
    // ~/.local/lib/wireshark/extcap: install says which it wrote.
    let folder = [
        xdg.join("wireshark/extcap"),
        home.join(".local/lib/wireshark/extcap"),
    ]
    .into_iter()
    .find(|f| f.join("linerate").is_file())
    .unwrap_or_else(|| panic!("no wrapper installed: {}", text(&o.stdout)));
    assert!(text(&o.stdout).contains(&folder.display().to_string()));
    let wrapper = folder.join("linerate");
    let expected = pcap_packets(&std::fs::read(&file).unwrap());
    assert_eq!(expected.len(), 601);
    for (k, filter) in [(2, None), (3, Some("udp port 7001"))] {
        let id = cluster_id(k);
        let master = cluster_from(&mut g, id, &file);
        let q = format!("cluster:{id}@0");
        let o = tshark(&xdg, &["-D"]);
        let listed = text(&o.stdout);
        assert!(
            listed
                .lines()
                .any(|l| l.contains(&format!(". {q} (linerate cluster {id} queue 0"))),
            "tshark -D does not list {q}:\n{listed}\n{}",
            text(&o.stderr)
        );
        // The capture ends when the master's file ends (before tshark's limit): the
        // statistics block is written then, and dumpcap keeps it.
        let out = g.dir.join(format!("cap-{id}.pcapng"));
        let mut args = vec!["-i", &q, "-w", out.to_str().unwrap(), "-a", "duration:30"];
        if let Some(f) = filter {
            args.extend(["-f", f]);
        }
        let t0 = Instant::now();
        let o = tshark(&xdg, &args);
        assert!(o.status.success(), "tshark {args:?}: {}", text(&o.stderr));
        assert!(
            t0.elapsed() < Duration::from_secs(25),
            "the capture outlived its input"
        );
        let ms = master_summary(&mut g, master, id);
        let (names, pkts, stats) = pcapng(&std::fs::read(&out).unwrap());
        assert_eq!(names, vec![q.clone()]);
        let want: Vec<Vec<u8>> = match filter {
            None => expected.clone(),
            Some(f) => {
                // The same filter as tcpdump reads it, on the same file.
                let d = Command::new("tcpdump")
                    .args(["-r"])
                    .arg(&file)
                    .args(["-w", "-", f])
                    .stderr(Stdio::null())
                    .output()
                    .expect("tcpdump");
                pcap_packets(&d.stdout)
            }
        };
        assert!(!want.is_empty());
        assert_eq!(pkts.len(), want.len(), "filter {filter:?}");
        assert!(
            pkts == want,
            "the packets differ from the file's (filter {filter:?})"
        );
        assert_eq!(stats.len(), 1, "one statistics block for the one interface");
        let isb = &stats[0];
        let queue_drops: u64 = ms["queues"][0]["drops"]
            .as_object()
            .unwrap()
            .values()
            .map(|v| v.as_u64().unwrap())
            .sum();
        assert_eq!(u64_opt(isb, ISB_ACCEPT), want.len() as u64);
        assert_eq!(
            u64_opt(isb, ISB_IFRECV),
            ms["queues"][0]["delivered"].as_u64().unwrap()
        );
        assert_eq!(u64_opt(isb, ISB_IFRECV), 601);
        assert_eq!(
            u64_opt(isb, ISB_IFDROP) + u64_opt(isb, ISB_OSDROP),
            queue_drops
        );
    }
    // uninstall removes what install wrote, and nothing else.
    let o = Command::new(BIN)
        .args(["extcap", "uninstall"])
        .env("XDG_CONFIG_HOME", &xdg)
        .env("HOME", &home)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(!wrapper.exists());
    assert!(folder.is_dir());
}

#[test]
fn install_and_uninstall_leave_a_file_that_is_not_theirs() {
    let g = Guard::new("foreign");
    let dir = g.dir.join("extcap");
    std::fs::create_dir_all(&dir).unwrap();
    let theirs = dir.join("linerate");
    std::fs::write(&theirs, "#!/bin/sh\necho someone else's\n").unwrap();
    let d = dir.to_str().unwrap();
    let o = linerate(&["extcap", "install", "--dir", d]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stdout));
    assert!(
        text(&o.stderr).contains("refusing to overwrite"),
        "{}",
        text(&o.stderr)
    );
    let o = linerate(&["extcap", "uninstall", "--dir", d]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        std::fs::read_to_string(&theirs).unwrap(),
        "#!/bin/sh\necho someone else's\n"
    );
    // Ours: written, rewritten in place, removed.
    std::fs::remove_file(&theirs).unwrap();
    for _ in 0..2 {
        let o = linerate(&["extcap", "install", "--dir", d]);
        assert!(o.status.success(), "{}", text(&o.stderr));
    }
    let w = std::fs::read_to_string(&theirs).unwrap();
    assert!(
        w.starts_with("#!/bin/sh\n") && w.contains(" extcap \"$@\""),
        "{w}"
    );
    let o = Command::new(&theirs)
        .arg("--extcap-version")
        .output()
        .unwrap();
    assert!(
        text(&o.stdout).starts_with("extcap {version="),
        "{}",
        text(&o.stdout)
    );
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        1,
        "no temporary file left"
    );
    let o = linerate(&["extcap", "uninstall", "--dir", d]);
    assert!(o.status.success());
    assert!(!theirs.exists());
}

#[test]
fn a_fifo_path_that_is_a_kept_file_is_refused_untouched() {
    let g = Guard::new("kept");
    let f = g.dir.join("kept.pcapng");
    std::fs::write(&f, b"precious").unwrap();
    let o = linerate(&[
        "extcap",
        "--capture",
        "--extcap-interface",
        "afpacket:lo",
        "--fifo",
        f.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("not a FIFO"),
        "{}",
        text(&o.stderr)
    );
    assert_eq!(std::fs::read(&f).unwrap(), b"precious");
}

/// An idle queue: a master reading a pcap stream that has its header and nothing more.
fn idle_cluster(g: &mut Guard, id: u32, file: &Path) -> std::fs::File {
    let input = g.dir.join(format!("in-{id}.fifo"));
    assert!(Command::new("mkfifo")
        .arg(&input)
        .status()
        .unwrap()
        .success());
    let ids = id.to_string();
    let c = Command::new(BIN)
        .args(["balance", "-i"])
        .arg(format!("pcap:{}", input.display()))
        .args(["-c", &ids, "-n", "1", "-t", "60"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    g.procs.push(c);
    g.segments.add(id);
    let mut w = std::fs::OpenOptions::new()
        .write(true)
        .open(&input)
        .unwrap();
    let header = std::fs::read(file).unwrap();
    w.write_all(&header[..24]).unwrap();
    wait_for("the cluster's segment", Duration::from_secs(10), || {
        seg(id).exists()
    });
    w
}

/// Starts a capture of `q` into a new FIFO; returns it and the capture's index in `g`.
fn capture_into_fifo(g: &mut Guard, q: &str) -> (PathBuf, usize) {
    let fifo = g.dir.join("out.fifo");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let c = Command::new(BIN)
        .args(["extcap", "--capture", "--extcap-interface", q, "--fifo"])
        .arg(&fifo)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    g.procs.push(c);
    (fifo, g.procs.len() - 1)
}

#[test]
fn sigterm_ends_an_idle_capture_with_its_statistics_block() {
    let Some(file) = sample() else { return };
    let mut g = Guard::new("term");
    let id = cluster_id(4);
    let _input = idle_cluster(&mut g, id, &file);
    let q = format!("cluster:{id}@0");
    let (fifo, i) = capture_into_fifo(&mut g, &q);
    let reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        std::fs::File::open(fifo)
            .unwrap()
            .read_to_end(&mut v)
            .unwrap();
        v
    });
    std::thread::sleep(Duration::from_millis(500));
    let pid = g.procs[i].id();
    assert!(Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap()
        .success());
    let s = finish(&mut g.procs[i], Duration::from_secs(10));
    assert!(s.success(), "exit {s}");
    let (names, pkts, stats) = pcapng(&reader.join().unwrap());
    assert_eq!(names, vec![q]);
    assert!(pkts.is_empty());
    assert_eq!(stats.len(), 1);
    assert_eq!(u64_opt(&stats[0], ISB_IFRECV), 0);
}

#[test]
fn the_reader_closing_the_fifo_ends_an_idle_capture() {
    let Some(file) = sample() else { return };
    let mut g = Guard::new("close");
    let id = cluster_id(5);
    let _input = idle_cluster(&mut g, id, &file);
    let (fifo, i) = capture_into_fifo(&mut g, &format!("cluster:{id}@0"));
    let mut r = std::fs::File::open(&fifo).unwrap();
    // The section and interface blocks come first, without a packet.
    let mut head = [0u8; 28];
    r.read_exact(&mut head).unwrap();
    assert_eq!(rd32(&head, 0), 0x0a0d_0d0a);
    drop(r);
    let s = finish(&mut g.procs[i], Duration::from_secs(10));
    assert!(s.success(), "exit {s}");
}

/// An interface as Wireshark sees it through the extcap: tshark, inside the receiving namespace
/// of a veth pair, captures `afpacket:IF` and gets every frame sent to it, byte for byte.
#[test]
fn tshark_captures_an_afpacket_interface_through_the_extcap() {
    use linerate_test_support::netns::{self, NetnsPair, Side};
    if !netns::require_priv()
        || !linerate_test_support::require_tool(
            "tshark",
            "Debian package tshark, scripts/setup.sh --tests",
        )
    {
        return;
    }
    let pair = NetnsPair::new().expect("netns pair");
    pair.no_ipv6().unwrap();
    let mut g = Guard::new("afpacket");
    let xdg = g.dir.join("config");
    let home = g.dir.join("home");
    let o = Command::new(BIN)
        .args(["extcap", "install"])
        .env("XDG_CONFIG_HOME", &xdg)
        .env("HOME", &home)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = g.dir.join("if.pcapng");
    let port = format!("afpacket:{}", pair.if_b);
    let c = Command::new("ip")
        .args([
            "netns",
            "exec",
            pair.ns(Side::B),
            "tshark",
            "-i",
            &port,
            "-f",
            "udp",
        ])
        .arg("-w")
        .arg(&out)
        // Ends on the 50th frame; the duration only bounds a run that lost one.
        .args(["-c", "50", "-a", "duration:60"])
        .env("XDG_CONFIG_HOME", &xdg)
        .env("HOME", &home)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start tshark");
    g.procs.push(c);
    let i = g.procs.len() - 1;
    // dumpcap writes the file's header once the extcap's has come through the FIFO, which
    // count writes after its socket is bound: a frame sent from then on is captured. Before
    // it, tshark runs the extcap three times (interfaces, link types, options), each a debug
    // build listing the machine's interfaces and clusters: 6 s were not enough at load 20.
    let t0 = Instant::now();
    wait_for("the capture to start", Duration::from_secs(40), || {
        std::fs::metadata(&out).is_ok_and(|m| m.len() > 0)
    });
    eprintln!("capture started after {:?}", t0.elapsed());
    let frames: Vec<Vec<u8>> = (0..50)
        .map(|s| netns::udp_frame(pair.mac_b, pair.mac_a, 1, s))
        .collect();
    pair.run_in(Side::A, || netns::send_raw(&pair.if_a, &frames));
    let s = finish(&mut g.procs[i], Duration::from_secs(90));
    assert!(s.success(), "tshark exited with {s}");
    let (names, pkts, _) = pcapng(&std::fs::read(&out).unwrap());
    assert_eq!(names, vec![port]);
    assert!(
        pkts == frames,
        "{} packets, not the 50 frames sent",
        pkts.len()
    );
}

/// A relative XDG_CONFIG_HOME or HOME (invalid, says the XDG spec) is refused (exit 2) before
/// anything is written: it would name a folder under wherever install runs, which Wireshark
/// never reads.
#[test]
fn install_refuses_a_relative_config_home() {
    let g = Guard::new("relxdg");
    for (var, val) in [("XDG_CONFIG_HOME", "rel"), ("HOME", "relhome")] {
        let mut c = Command::new(BIN);
        c.args(["extcap", "install"]).current_dir(&g.dir);
        if var == "HOME" {
            c.env_remove("XDG_CONFIG_HOME");
        }
        let o = c.env(var, val).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{var}: {}", text(&o.stdout));
        assert!(
            text(&o.stderr).contains(&format!("{var}={val} is not an absolute path")),
            "{}",
            text(&o.stderr)
        );
    }
    assert_eq!(
        std::fs::read_dir(&g.dir).unwrap().count(),
        0,
        "nothing written"
    );
}

/// Install trusts no folder someone else can change: one writable by others (no sticky bit),
/// or reached through a symbolic link another user planted, is refused and nothing is written.
#[test]
fn install_refuses_a_folder_others_can_change() {
    use std::os::unix::fs::PermissionsExt;
    let g = Guard::new("trust");
    let open = g.dir.join("open");
    std::fs::create_dir_all(open.join("extcap")).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let target = open.join("extcap");
    let o = linerate(&["extcap", "install", "--dir", target.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stdout));
    assert!(
        text(&o.stderr).contains("writable by others"),
        "{}",
        text(&o.stderr)
    );
    assert_eq!(std::fs::read_dir(&target).unwrap().count(), 0);
    // The same folder closed to others: installed.
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
    let o = linerate(&["extcap", "install", "--dir", target.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    std::fs::remove_file(target.join("linerate")).unwrap();
    // A link planted by another user (uid 65534, nobody) towards that good folder.
    let link = g.dir.join("planted");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    if let Err(e) = std::os::unix::fs::lchown(&link, Some(65534), Some(65534)) {
        linerate_test_support::skip(&format!("cannot give a link to another user: {e}"));
        return;
    }
    let o = linerate(&["extcap", "install", "--dir", link.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stdout));
    assert!(
        text(&o.stderr).contains("owned by user 65534"),
        "{}",
        text(&o.stderr)
    );
    assert_eq!(std::fs::read_dir(&target).unwrap().count(), 0);
}

//! `linerate query` against a hostile directory: what a user or a stray tool can leave in it
//! (pcapng files with interfaces of several link types, captures of link types whose DLT_
//! differs from their LINKTYPE_, indexes of other files copied in, forged indexes). The answer
//! must be tcpdump -r's, never a packet mislabelled, never a panic.
#![deny(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_linerate");

/// A scratch directory removed at the end.
struct Scratch(PathBuf);
impl Scratch {
    fn new(tag: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!("lr-qhostile-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Scratch(d)
    }
}
impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn query(args: &[&str]) -> std::process::Output {
    Command::new(BIN).arg("query").args(args).output().unwrap()
}

fn have_tcpdump() -> bool {
    linerate_test_support::require_tool(
        "tcpdump",
        "apt-get install tcpdump; scripts/setup.sh --tests installs it",
    )
}

/// 2025-11-27T16:00:00Z.
const T0_US: u64 = 1_764_259_200_000_000;

/// An IPv4/UDP packet 10.0.0.1:1234 -> 10.0.0.2:53 (no link header).
fn ip_udp(id: u16) -> Vec<u8> {
    let mut ip = vec![0x45, 0, 0, 28];
    ip.extend_from_slice(&id.to_be_bytes());
    ip.extend_from_slice(&[0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
    ip.extend_from_slice(&[0x04, 0xd2, 0, 53, 0, 8, 0, 0]);
    ip
}

fn eth(ip: &[u8]) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 8, 0];
    f.extend_from_slice(ip);
    f
}

fn pcap(link: u32, recs: &[(u64, Vec<u8>)]) -> Vec<u8> {
    let mut h = Vec::new();
    h.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    h.extend_from_slice(&2u16.to_le_bytes());
    h.extend_from_slice(&4u16.to_le_bytes());
    h.extend_from_slice(&[0; 8]);
    h.extend_from_slice(&65535u32.to_le_bytes());
    h.extend_from_slice(&link.to_le_bytes());
    for (ts, d) in recs {
        h.extend_from_slice(&((ts / 1_000_000) as u32).to_le_bytes());
        h.extend_from_slice(&((ts % 1_000_000) as u32).to_le_bytes());
        h.extend_from_slice(&(d.len() as u32).to_le_bytes());
        h.extend_from_slice(&(d.len() as u32).to_le_bytes());
        h.extend_from_slice(d);
    }
    h
}

fn ng_block(t: u32, body: &[u8]) -> Vec<u8> {
    let mut b = body.to_vec();
    while !b.len().is_multiple_of(4) {
        b.push(0);
    }
    let len = (12 + b.len()) as u32;
    let mut o = Vec::new();
    o.extend_from_slice(&t.to_le_bytes());
    o.extend_from_slice(&len.to_le_bytes());
    o.extend_from_slice(&b);
    o.extend_from_slice(&len.to_le_bytes());
    o
}

/// A pcapng file: one interface per link type of `links`, packets (interface, µs, bytes).
fn pcapng(links: &[u16], pkts: &[(u32, u64, Vec<u8>)]) -> Vec<u8> {
    let mut shb = Vec::new();
    shb.extend_from_slice(&0x1a2b_3c4du32.to_le_bytes());
    shb.extend_from_slice(&1u16.to_le_bytes());
    shb.extend_from_slice(&0u16.to_le_bytes());
    shb.extend_from_slice(&(-1i64).to_le_bytes());
    let mut o = ng_block(0x0a0d_0d0a, &shb);
    for &l in links {
        let mut idb = Vec::new();
        idb.extend_from_slice(&l.to_le_bytes());
        idb.extend_from_slice(&0u16.to_le_bytes());
        idb.extend_from_slice(&65535u32.to_le_bytes());
        o.extend(ng_block(1, &idb));
    }
    for (ifc, ts, d) in pkts {
        let mut epb = Vec::new();
        epb.extend_from_slice(&ifc.to_le_bytes());
        epb.extend_from_slice(&((ts >> 32) as u32).to_le_bytes());
        epb.extend_from_slice(&(*ts as u32).to_le_bytes());
        epb.extend_from_slice(&(d.len() as u32).to_le_bytes());
        epb.extend_from_slice(&(d.len() as u32).to_le_bytes());
        epb.extend_from_slice(d);
        o.extend(ng_block(6, &epb));
    }
    o
}

/// The packets of a pcap stream as tcpdump prints them (times, hex): the link type shows in
/// the header line and in the decoding.
fn tcpdump_print(pcap: &Path) -> String {
    let o = Command::new("tcpdump")
        .args(["-nn", "-tt", "-xx", "-r"])
        .arg(pcap)
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// tcpdump -r FILE -w OUT EXPR (whatever its exit: it writes what it read before an error).
fn tcpdump_write(file: &Path, out: &Path, expr: &str) {
    let mut c = Command::new("tcpdump");
    c.arg("-r").arg(file).arg("-w").arg(out);
    if !expr.is_empty() {
        c.arg(expr);
    }
    c.stderr(Stdio::null()).status().unwrap();
}

/// A pcapng file whose second interface is raw IP (LINKTYPE_RAW) beside Ethernet: tcpdump -r
/// gives nothing of it (it stops at the second interface's description: "an interface has a
/// type 101 different from the type of the first interface"); query wrote the raw-IP packet
/// into its Ethernet output, where it decodes as garbage. Now the file is read up to the first
/// packet of the other link type, with a note naming it, through the index or whole.
#[test]
fn pcapng_interfaces_of_another_link_type_are_never_mislabelled() {
    if !have_tcpdump() {
        return;
    }
    let s = Scratch::new("multilink");
    let d = s.0.join("dir");
    std::fs::create_dir(&d).unwrap();
    let pkts = vec![
        (0, T0_US, eth(&ip_udp(1))),
        (1, T0_US + 1_000_000, ip_udp(2)),
        (0, T0_US + 2_000_000, eth(&ip_udp(3))),
    ];
    let file = d.join("two-links.pcapng");
    std::fs::write(&file, pcapng(&[1, 101], &pkts)).unwrap();
    for mode in [&["--no-index"][..], &["--reindex"], &[]] {
        let out = s.0.join("got.pcap");
        let mut args = vec![d.to_str().unwrap(), "-w", out.to_str().unwrap()];
        args.extend_from_slice(mode);
        args.push("udp port 53");
        let o = query(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{mode:?}: {err}");
        assert!(err.contains("link type 101"), "{mode:?}: {err}");
        let got = tcpdump_print(&out);
        assert_eq!(
            got.matches("IP 10.0.0.1.1234 > 10.0.0.2.53").count(),
            1,
            "{got}"
        );
        assert_eq!(
            got.lines().filter(|l| l.starts_with("17")).count(),
            1,
            "{got}"
        );
        assert!(got.starts_with("1764259200.000000 IP"), "{got}");
    }
}

/// A capture of LINKTYPE_ATM_RFC1483 (100: LLC/SNAP-encapsulated packets): libpcap's compiler
/// takes DLT_ATM_RFC1483 (11 here), as tcpdump -r compiles it; query refused every filter,
/// even the empty one ("unknown data link type 100").
#[test]
fn link_types_whose_dlt_differs_are_queried_as_tcpdump_reads_them() {
    if !have_tcpdump() {
        return;
    }
    let s = Scratch::new("atm");
    let d = s.0.join("dir");
    std::fs::create_dir(&d).unwrap();
    let llc = |id| {
        let mut f = vec![0xaa, 0xaa, 0x03, 0, 0, 0, 0x08, 0x00];
        f.extend_from_slice(&ip_udp(id));
        f
    };
    let recs = vec![
        (T0_US, llc(1)),
        (T0_US + 1, vec![0xfe, 0xfe, 0x03, 0xcc]),
        (T0_US + 2, llc(2)),
    ];
    let file = d.join("atm.pcap");
    std::fs::write(&file, pcap(100, &recs)).unwrap();
    for (expr, n) in [("", 3), ("udp port 53", 2), ("not udp", 0)] {
        let want = s.0.join("want.pcap");
        tcpdump_write(&file, &want, expr);
        let out = s.0.join("got.pcap");
        let o = query(&[d.to_str().unwrap(), "-w", out.to_str().unwrap(), "-f", expr]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "'{expr}': {err}");
        let got = tcpdump_print(&out);
        assert_eq!(
            got.lines().filter(|l| l.starts_with("17")).count(),
            n,
            "'{expr}'"
        );
        assert_eq!(got, tcpdump_print(&want), "'{expr}': {err}");
    }
}

/// The index of another capture of the same header copied in beside a capture (a restore from
/// backup, a careless `cp *.idx`): it was trusted, its blocks pointed into the middle of the
/// capture's records and its postings lacked the capture's hosts, so a query lost packets.
/// Now it is stale: the capture is read whole, with a note, and the answer is tcpdump's.
#[test]
fn an_index_of_another_file_is_not_trusted() {
    if !have_tcpdump() {
        return;
    }
    let s = Scratch::new("copied");
    let d = s.0.join("dir");
    std::fs::create_dir(&d).unwrap();
    let from = |a: u8, id: u16| {
        let mut ip = ip_udp(id);
        ip[15] = a;
        eth(&ip)
    };
    let a: Vec<_> = (0..100).map(|i| (T0_US + i, from(1, i as u16))).collect();
    let b: Vec<_> = (0..400)
        .map(|i| {
            (
                T0_US + 1_000_000 + i,
                from(if i < 50 { 1 } else { 9 }, i as u16),
            )
        })
        .collect();
    std::fs::write(d.join("a.pcap"), pcap(1, &a)).unwrap();
    std::fs::write(d.join("b.pcap"), pcap(1, &b)).unwrap();
    let out = s.0.join("got.pcap");
    let (dir, o) = (d.to_str().unwrap(), out.to_str().unwrap());
    assert!(query(&[dir, "--reindex", "-q", "-w", o]).status.success());
    std::fs::copy(d.join("a.pcap.idx"), d.join("b.pcap.idx")).unwrap();
    let want = s.0.join("want.pcap");
    tcpdump_write(&d.join("b.pcap"), &want, "host 10.0.0.9");
    let r = query(&[dir, "-w", o, "host 10.0.0.9"]);
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(r.status.success(), "{err}");
    assert!(err.contains("b.pcap.idx: stale index"), "{err}");
    let got = tcpdump_print(&out);
    assert_eq!(got.lines().filter(|l| l.starts_with("17")).count(), 350);
    assert_eq!(got, tcpdump_print(&want));
}

/// A child killed (by its PID) when dropped.
struct Kid(std::process::Child);
impl Drop for Kid {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

type Log = std::sync::Arc<std::sync::Mutex<Vec<u8>>>;

/// `linerate query --serve 127.0.0.1:0 DIR`: the child, its port, and its log as it grows.
fn serve(dir: &Path) -> (Kid, u16, Log) {
    use std::io::Read;
    let mut kid = Kid(Command::new(BIN)
        .args(["query", "--serve", "127.0.0.1:0"])
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap());
    let mut err = kid.0.stderr.take().unwrap();
    let log: Log = Default::default();
    let (tx, rx) = std::sync::mpsc::channel();
    let l = log.clone();
    std::thread::spawn(move || {
        let mut b = [0u8; 4096];
        let mut sent = false;
        while let Ok(n) = err.read(&mut b) {
            if n == 0 {
                break;
            }
            let mut g = l.lock().unwrap();
            g.extend_from_slice(&b[..n]);
            let s = String::from_utf8_lossy(&g);
            if let (false, Some(i)) = (sent, s.find("http://127.0.0.1:")) {
                if let Some(j) = s[i + 17..].find('/') {
                    let _ = tx.send(s[i + 17..i + 17 + j].parse::<u16>().unwrap());
                    sent = true;
                }
            }
        }
    });
    let port = rx
        .recv_timeout(std::time::Duration::from_secs(20))
        .expect("the server's address");
    (kid, port, log)
}

/// One request; the answer's status line and its length (read to the end, 20 s at most).
fn http(port: u16, req: &[u8]) -> (String, usize) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    s.write_all(req).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let line = String::from_utf8_lossy(&out)
        .lines()
        .next()
        .unwrap_or("")
        .to_string();
    (line, out.len())
}

/// A directory of one capture of `n` packets of 1 kB over 20 s.
fn big_dir(s: &Scratch, n: u64) -> PathBuf {
    let d = s.0.join("dir");
    std::fs::create_dir(&d).unwrap();
    let recs: Vec<_> = (0..n)
        .map(|i| {
            let mut f = eth(&ip_udp(i as u16));
            f.resize(1014, 0);
            (T0_US + i * 1000, f)
        })
        .collect();
    std::fs::write(d.join("big.pcap"), pcap(1, &recs)).unwrap();
    d
}

/// Slowloris: clients that send a header line now and then, never ending their request, held
/// every one of the server's slots (each read had 10 s, the request no bound), so every other
/// client got 503 for as long as they dripped. Now the whole request has 10 s.
#[test]
fn serve_bounds_a_request_that_never_ends() {
    use std::io::Write;
    let s = Scratch::new("slowloris");
    let d = big_dir(&s, 100);
    let (_kid, port, _log) = serve(&d);
    let mut slow = Vec::new();
    for _ in 0..8 {
        let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        c.write_all(b"GET /query?count=1 HTTP/1.1\r\n").unwrap();
        slow.push(c);
    }
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert!(http(port, b"GET /query HTTP/1.1\r\n\r\n")
        .0
        .contains(" 503 "));
    // Drip a header line to each every 2 s; 14 s on, the server has dropped them.
    let t = std::time::Instant::now();
    while t.elapsed() < std::time::Duration::from_secs(14) {
        std::thread::sleep(std::time::Duration::from_secs(2));
        for c in &mut slow {
            let _ = c.write_all(b"X-Drip: 1\r\n");
        }
    }
    let (line, _) = http(port, b"GET /query?count=1 HTTP/1.1\r\n\r\n");
    assert!(line.contains(" 200 "), "{line}");
}

/// Clients that ask for everything and never read: each answer's write blocked for ever, so
/// eight of them held every slot for good. Now a write that waits 30 s drops its client.
#[test]
fn serve_drops_a_client_that_does_not_read() {
    use std::io::Write;
    let s = Scratch::new("noread");
    // 20 MB: more than the socket buffers hold.
    let d = big_dir(&s, 20_000);
    let (_kid, port, log) = serve(&d);
    let mut idle = Vec::new();
    for _ in 0..8 {
        let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        c.write_all(b"GET /query HTTP/1.1\r\n\r\n").unwrap();
        idle.push(c);
    }
    std::thread::sleep(std::time::Duration::from_secs(2));
    assert!(http(port, b"GET /query?count=1 HTTP/1.1\r\n\r\n")
        .0
        .contains(" 503 "));
    let t = std::time::Instant::now();
    let line = loop {
        std::thread::sleep(std::time::Duration::from_secs(2));
        let (line, _) = http(port, b"GET /query?count=1 HTTP/1.1\r\n\r\n");
        if line.contains(" 200 ") || t.elapsed() > std::time::Duration::from_secs(50) {
            break line;
        }
    };
    assert!(line.contains(" 200 "), "{line}");
    drop(idle);
    let log = String::from_utf8_lossy(&log.lock().unwrap()).into_owned();
    assert!(log.contains("stopped: writing the output"), "{log}");
}

/// A request's parameters as the command line takes them: count=0 and from not before to are
/// 400 (they were 200 with no packet), so are two different Content-Lengths and a percent
/// sign without two hex digits ("%+1"); and a filter cannot write lines of its own into the
/// log (a newline in it was logged as it is).
#[test]
fn serve_refuses_what_the_command_line_refuses_and_logs_one_line_a_request() {
    let s = Scratch::new("params");
    let d = big_dir(&s, 10);
    let (_kid, port, log) = serve(&d);
    for (req, code) in [
        (&b"GET /query?count=0 HTTP/1.1\r\n\r\n"[..], " 400 "),
        (b"GET /query?from=-1h&to=-2h HTTP/1.1\r\n\r\n", " 400 "),
        (b"GET /query?filter=udp%+1 HTTP/1.1\r\n\r\n", " 400 "),
        (
            b"POST /query HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 300\r\n\r\nudp",
            " 400 ",
        ),
        (b"GET /query?count=2 HTTP/1.1\r\n\r\n", " 200 "),
    ] {
        let (line, _) = http(port, req);
        assert!(
            line.contains(code),
            "{}: {line}",
            String::from_utf8_lossy(req)
        );
    }
    let (line, _) = http(
        port,
        b"GET /query?filter=udp%0aquery+from+10.6.6.6:1:+forged HTTP/1.1\r\n\r\n",
    );
    assert!(line.contains(" 400 "), "{line}");
    std::thread::sleep(std::time::Duration::from_millis(300));
    let log = String::from_utf8_lossy(&log.lock().unwrap()).into_owned();
    assert!(log.contains("udp\\nquery from 10.6.6.6"), "{log}");
    assert!(
        !log.lines().any(|l| l.starts_with("query from 10.6.6.6")),
        "{log}"
    );
}

/// A capture deleted while a query runs (the recorder's --budget removes the oldest files; a
/// query written to a slow reader lasts): the query stopped at it with an error, its answer cut
/// after the files before. Now the file is named in a note and the others answer.
#[test]
fn a_file_removed_during_the_query_is_said_and_the_rest_answers() {
    use std::io::Read;
    let s = Scratch::new("removed");
    let d = big_dir(&s, 2_000);
    let late = eth(&ip_udp(7));
    std::fs::write(d.join("late.pcap"), pcap(1, &[(T0_US + 60_000_000, late)])).unwrap();
    let mut kid = Kid(Command::new(BIN)
        .args(["query", "-w", "-"])
        .arg(&d)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap());
    let mut out = kid.0.stdout.take().unwrap();
    // The first bytes: the files are listed, the first one is being written out (into a pipe
    // nobody reads until the file is gone).
    let mut first = [0u8; 24];
    out.read_exact(&mut first).unwrap();
    std::fs::remove_file(d.join("late.pcap")).unwrap();
    let mut rest = Vec::new();
    out.read_to_end(&mut rest).unwrap();
    let mut err = String::new();
    kid.0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let st = kid.0.wait().unwrap();
    assert!(st.success(), "{err}");
    assert!(
        err.contains("late.pcap: removed before it was read"),
        "{err}"
    );
    assert!(err.contains("2000 packets matched"), "{err}");
    assert_eq!(24 + rest.len(), 24 + 2_000 * (16 + 1014));
}

/// `-w DIR/answer.pcap`: the answer was written among the captures, and the next query read
/// it as one (every packet twice). Refused (exit 2) before anything is written; another name
/// (not *.pcap, *.pcapng) there is taken.
#[test]
fn the_answer_is_never_written_as_a_capture_of_the_directory() {
    let s = Scratch::new("wdir");
    let d = big_dir(&s, 10);
    for w in ["answer.pcap", "ANSWER.PCAPNG"] {
        let out = d.join(w);
        let o = query(&[d.to_str().unwrap(), "-w", out.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(2), "{w}");
        assert!(String::from_utf8_lossy(&o.stderr).contains("directory queried"));
        assert!(!out.exists(), "{w}");
    }
    let o = Command::new(BIN)
        .args(["query", ".", "-w", "again.pcap"])
        .current_dir(&d)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let out = d.join("answer.bin");
    let o = query(&[d.to_str().unwrap(), "-q", "-w", out.to_str().unwrap()]);
    assert!(o.status.success());
    assert!(out.exists());
}

/// Runs `linerate query ARGS`, killed after 20 s: (finished, its output).
fn query_bounded(args: &[&str]) -> (bool, std::process::Output) {
    let kid = Command::new(BIN)
        .arg("query")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = kid.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(kid.wait_with_output());
    });
    match rx.recv_timeout(std::time::Duration::from_secs(20)) {
        Ok(o) => (true, o.unwrap()),
        Err(_) => {
            // Still running: killed by its PID (the thread then reaps it).
            let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
            (false, rx.recv().unwrap().unwrap())
        }
    }
}

/// What is planted under a capture's index name: a FIFO (the query waited for a writer for
/// ever: also the HTTP server's slot), a link to /dev/zero (read until memory ran out), a file
/// far larger than an index can be. Each is not an index: the capture is read whole, with a
/// note, and --reindex replaces it.
#[test]
fn planted_index_files_neither_hang_nor_fill_memory() {
    let s = Scratch::new("plantidx");
    let d = big_dir(&s, 50);
    let idx = d.join("big.pcap.idx");
    let out = s.0.join("out.pcap");
    let (dir, o) = (d.to_str().unwrap(), out.to_str().unwrap());
    let plants: [(&str, &dyn Fn()); 3] = [
        ("fifo", &|| {
            assert!(Command::new("mkfifo").arg(&idx).status().unwrap().success())
        }),
        ("link to /dev/zero", &|| {
            std::os::unix::fs::symlink("/dev/zero", &idx).unwrap()
        }),
        ("huge", &|| {
            let f = std::fs::File::create(&idx).unwrap();
            f.set_len(1 << 30).unwrap();
        }),
    ];
    for (what, plant) in plants {
        let _ = std::fs::remove_file(&idx);
        plant();
        let (done, r) = query_bounded(&[dir, "-w", o]);
        let err = String::from_utf8_lossy(&r.stderr);
        assert!(done, "{what}: the query hung");
        assert!(r.status.success(), "{what}: {err}");
        assert!(err.contains("50 packets matched"), "{what}: {err}");
        assert!(err.contains("read whole"), "{what}: {err}");
    }
    let (done, r) = query_bounded(&[dir, "--reindex", "-w", o]);
    assert!(done && r.status.success());
    assert!(std::fs::symlink_metadata(&idx).unwrap().len() < 4096);
    let (_, r) = query_bounded(&[dir, "-w", o]);
    assert!(String::from_utf8_lossy(&r.stderr).contains("1 by index"));
}

/// `query --serve` ended on no signal of its own: SIGINT, when the shell that started it in the
/// background had it ignored (`cmd &` in a script), left it serving for ever; SIGTERM killed it
/// by default. Now every stop signal ends it (exit 0), as it ends every tool, even with a
/// query being served.
#[test]
fn serve_stops_on_sigint_even_when_started_with_it_ignored() {
    use std::io::Write;
    let s = Scratch::new("sigint");
    let d = big_dir(&s, 20_000);
    for sig in ["INT", "TERM"] {
        let mut kid = Kid(Command::new("sh")
            .arg("-c")
            .arg(format!(
                "trap '' INT; exec {BIN} query --serve 127.0.0.1:0 {}",
                d.display()
            ))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap());
        // Its port: the first line of its log.
        let mut err = kid.0.stderr.take().unwrap();
        let mut line = Vec::new();
        let mut b = [0u8; 1];
        while !line.ends_with(b"\n") {
            use std::io::Read;
            assert_eq!(err.read(&mut b).unwrap(), 1);
            line.push(b[0]);
        }
        let line = String::from_utf8_lossy(&line).into_owned();
        let port: u16 = line
            .rsplit(':')
            .next()
            .unwrap()
            .trim_end_matches("/query\n")
            .parse()
            .unwrap();
        std::thread::spawn(move || {
            use std::io::Read;
            let mut sink = Vec::new();
            let _ = err.read_to_end(&mut sink);
        });
        // A client that asked for everything and reads nothing.
        let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        c.write_all(b"GET /query HTTP/1.1\r\n\r\n").unwrap();
        std::thread::sleep(std::time::Duration::from_millis(500));
        let pid = kid.0.id().to_string();
        assert!(Command::new("kill")
            .args([&format!("-{sig}"), &pid])
            .status()
            .unwrap()
            .success());
        let t = std::time::Instant::now();
        let st = loop {
            if let Some(st) = kid.0.try_wait().unwrap() {
                break Some(st);
            }
            if t.elapsed() > std::time::Duration::from_secs(10) {
                break None;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        };
        let st = st.unwrap_or_else(|| panic!("SIG{sig}: still serving after 10 s"));
        assert_eq!(st.code(), Some(0), "SIG{sig}");
        drop(c);
    }
}

/// A FIFO, a directory and links named like captures are never read, and each is named in a
/// note (they were passed over without a word).
#[test]
fn entries_named_like_captures_that_are_not_files_are_said() {
    let s = Scratch::new("notfiles");
    let d = big_dir(&s, 5);
    assert!(Command::new("mkfifo")
        .arg(d.join("fifo.pcap"))
        .status()
        .unwrap()
        .success());
    std::fs::create_dir(d.join("dir.pcapng")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", d.join("link.pcap")).unwrap();
    std::os::unix::fs::symlink("loop.pcap", d.join("loop.pcap")).unwrap();
    let (done, r) = query_bounded(&[d.to_str().unwrap(), "-w", "/dev/null"]);
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(done && r.status.success(), "{err}");
    assert!(err.contains("5 packets matched"), "{err}");
    for n in ["fifo.pcap", "dir.pcapng", "link.pcap", "loop.pcap"] {
        assert!(
            err.lines()
                .any(|l| l.contains(n) && l.ends_with("passed over")),
            "{n}: {err}"
        );
    }
}

/// A BSD loopback capture (DLT_NULL: an address family in the capturing host's byte order; a
/// Mac's IPv6 is 30): tcpdump -r compiles the filter for the file and tests AF_INET6 of every
/// BSD; query compiled it for the link type alone (Linux's AF_INET6, 10), and "udp" matched
/// none of the Mac's IPv6 packets.
#[test]
fn bsd_loopback_captures_are_filtered_as_tcpdump_filters_them() {
    if !have_tcpdump() {
        return;
    }
    let s = Scratch::new("null");
    let d = s.0.join("dir");
    std::fs::create_dir(&d).unwrap();
    let mut v6 = vec![0x60, 0, 0, 0, 0, 8, 17, 64];
    v6.extend_from_slice(&[0; 15]);
    v6.push(1);
    v6.extend_from_slice(&[0; 15]);
    v6.push(1);
    v6.extend_from_slice(&[0xe0, 0x3e, 0x01, 0xbb, 0, 8, 0, 0]);
    let null = |af: u32, p: &[u8]| {
        let mut f = af.to_le_bytes().to_vec();
        f.extend_from_slice(p);
        f
    };
    let recs = vec![
        (T0_US, null(30, &v6)),
        (T0_US + 1, null(2, &ip_udp(1))),
        (T0_US + 2, null(24, &v6)),
        (T0_US + 3, null(28, &v6)),
    ];
    let file = d.join("lo0.pcap");
    std::fs::write(&file, pcap(0, &recs)).unwrap();
    for expr in ["udp", "ip6 and udp port 443", "not udp"] {
        let want = s.0.join("want.pcap");
        tcpdump_write(&file, &want, expr);
        for mode in ["--no-index", "--reindex"] {
            let out = s.0.join("got.pcap");
            let o = query(&[
                d.to_str().unwrap(),
                mode,
                "-w",
                out.to_str().unwrap(),
                "-f",
                expr,
            ]);
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(o.status.success(), "'{expr}': {err}");
            assert_eq!(
                tcpdump_print(&out),
                tcpdump_print(&want),
                "'{expr}' {mode}: {err}"
            );
        }
    }
    let out = s.0.join("got.pcap");
    query(&[
        d.to_str().unwrap(),
        "-q",
        "-w",
        out.to_str().unwrap(),
        "udp",
    ]);
    let got = tcpdump_print(&out);
    assert_eq!(
        got.lines().filter(|l| l.starts_with("17")).count(),
        4,
        "{got}"
    );
}

/// A request head whose lines end in a bare CR (old Mac line ends, `printf 'GET ...\r\r'`) is
/// answered at once with 400 naming the bare CR (RFC 9112 2.2: a recipient must take a bare CR
/// as invalid), not left to wait 10 s for a 408 for an end of line that never comes; a bare CR
/// inside a header line is refused alike. CRLF, LF alone and a mix still answer 200.
#[test]
fn serve_refuses_a_bare_cr_at_once() {
    let s = Scratch::new("barecr");
    let d = big_dir(&s, 10);
    let (_kid, port, log) = serve(&d);
    for req in [
        &b"GET /query?count=1 HTTP/1.0\r\r"[..],
        b"GET /query?count=1 HTTP/1.1\r\r\n\r\r\n",
        b"GET /query?count=1 HTTP/1.1\r\nHost: a\rb\r\n\r\n",
    ] {
        let t = std::time::Instant::now();
        let (line, _) = http(port, req);
        assert!(
            line.contains(" 400 "),
            "{:?}: {line}",
            String::from_utf8_lossy(req)
        );
        assert!(
            t.elapsed() < std::time::Duration::from_secs(5),
            "{:?} took {:?}",
            String::from_utf8_lossy(req),
            t.elapsed()
        );
    }
    for req in [
        &b"GET /query?count=1 HTTP/1.1\r\n\r\n"[..],
        b"GET /query?count=1 HTTP/1.0\n\n",
        b"GET /query?count=1 HTTP/1.1\nHost: x\r\n\n",
    ] {
        let (line, _) = http(port, req);
        assert!(
            line.contains(" 200 "),
            "{:?}: {line}",
            String::from_utf8_lossy(req)
        );
    }
    let log = String::from_utf8_lossy(&log.lock().unwrap()).to_string();
    assert!(log.contains("bare CR"), "{log}");
}

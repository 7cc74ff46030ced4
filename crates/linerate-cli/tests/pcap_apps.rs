//! Unmodified libpcap programs (Debian's tcpdump, tshark, argus, ngrep, and a small C
//! program built here against libpcap) reading queues of a running cluster through
//! liblinerate_pcap.so (LD_PRELOAD), checked against what the same programs find in the file
//! the cluster was fed from. Every process is bounded in time and killed by its PID (its
//! `Child` handle) when the test ends, however it ends.
//!
//! The library is `$LINERATE_PCAP_LIB`, or else the one next to the `linerate` binary the tests
//! run (target/debug or target/release: `cargo build -p linerate-pcap`, or any workspace build,
//! puts it there), as `linerate exec` finds it. Most programs are started with LD_PRELOAD, some
//! through `linerate exec -- PROGRAM ARGS`.
//! A program that is not installed is a skip (a failure under LINERATE_REQUIRE_PRIV=1;
//! scripts/setup.sh --tests installs them all).
#![deny(unsafe_code)]

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_linerate");

// ---------------------------------------------------------------------------------------------
// Harness: processes, clusters, the library

/// A unique cluster id per test and run (600'000..800'020: apart from the other tests' ranges).
fn cluster_id(k: u32) -> u32 {
    600_000 + (std::process::id() % 10_000) * 20 + k
}

fn seg(id: u32) -> PathBuf {
    linerate_test_support::cluster_segment(id)
}

/// liblinerate_pcap.so: `$LINERATE_PCAP_LIB` when set, else beside the `linerate` binary under
/// test.
fn preload() -> PathBuf {
    std::env::var_os("LINERATE_PCAP_LIB")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(BIN).with_file_name("liblinerate_pcap.so"))
}

/// Whether `program` is installed (from `package`) and the library built; if not, [`skip`]s
/// (a failure under LINERATE_REQUIRE_PRIV=1) naming what is missing.
///
/// [`skip`]: linerate_test_support::skip
fn have(program: &str, package: &str) -> bool {
    if !linerate_test_support::require_tool(
        program,
        &format!("apt-get install {package}; scripts/setup.sh --tests installs it"),
    ) {
        return false;
    }
    let so = preload();
    if !so.is_file() {
        linerate_test_support::skip(&format!(
            "{} is missing: build it with `cargo build -p linerate-pcap` (a workspace build \
             makes it too), or name it with LINERATE_PCAP_LIB",
            so.display()
        ));
        return false;
    }
    true
}

/// A scratch folder removed when the test ends.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!("lr-pcapapps-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Scratch(d)
    }
    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Children stopped and reaped when the test ends, however it ends: SIGINT (a master then
/// removes its segment), SIGKILL for those still running 2 s later; by PID, through the handles.
struct Procs(Vec<Child>);

impl Drop for Procs {
    fn drop(&mut self) {
        let running: Vec<usize> = (0..self.0.len())
            .filter(|&k| matches!(self.0[k].try_wait(), Ok(None)))
            .collect();
        for &k in &running {
            // The PID of a child this test started and has not reaped.
            let _ = linerate::os::signal(self.0[k].id(), libc::SIGINT);
        }
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(2)
            && running
                .iter()
                .any(|&k| matches!(self.0[k].try_wait(), Ok(None)))
        {
            std::thread::sleep(Duration::from_millis(10));
        }
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Procs {
    fn add(&mut self, c: Child) -> usize {
        self.0.push(c);
        self.0.len() - 1
    }
    fn pid(&self, k: usize) -> u32 {
        self.0[k].id()
    }
    /// Waits for child `k` to exit, at most `limit` (then kills it and fails); its output.
    fn finish(&mut self, k: usize, limit: Duration) -> Output {
        let t0 = Instant::now();
        loop {
            if self.0[k].try_wait().unwrap().is_some() {
                break;
            }
            if t0.elapsed() > limit {
                let _ = self.0[k].kill();
                let _ = self.0[k].wait();
                let (o, e) = drain(&mut self.0[k]);
                panic!("process did not finish within {limit:?}; stdout:\n{o}\nstderr:\n{e}");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let status = self.0[k].wait().unwrap();
        let mut stdout = Vec::new();
        let mut stderr = Vec::new();
        if let Some(mut s) = self.0[k].stdout.take() {
            s.read_to_end(&mut stdout).unwrap();
        }
        if let Some(mut s) = self.0[k].stderr.take() {
            s.read_to_end(&mut stderr).unwrap();
        }
        Output {
            status,
            stdout,
            stderr,
        }
    }
}

fn drain(c: &mut Child) -> (String, String) {
    let mut o = String::new();
    let mut e = String::new();
    if let Some(mut s) = c.stdout.take() {
        let _ = s.read_to_string(&mut o);
    }
    if let Some(mut s) = c.stderr.take() {
        let _ = s.read_to_string(&mut e);
    }
    (o, e)
}

fn linerate(args: &[&str]) -> Child {
    Command::new(BIN)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start linerate")
}

/// `program args` with liblinerate_pcap.so preloaded; stdout and stderr to files in `dir`
/// (pipes could fill while the test waits), read back by [`text`].
fn preloaded(dir: &Scratch, tag: &str, program: &str, args: &[&str]) -> Child {
    Command::new(program)
        .args(args)
        .env("LD_PRELOAD", preload())
        .stdout(std::fs::File::create(dir.path(&format!("{tag}.out"))).unwrap())
        .stderr(std::fs::File::create(dir.path(&format!("{tag}.err"))).unwrap())
        .spawn()
        .unwrap_or_else(|e| panic!("start {program}: {e}"))
}

/// `linerate exec -- program args`, output as with [`preloaded`].
fn exec(dir: &Scratch, tag: &str, program: &str, args: &[&str]) -> Child {
    Command::new(BIN)
        .args(["exec", "--", program])
        .args(args)
        .env("LINERATE_PCAP_LIB", preload())
        .stdout(std::fs::File::create(dir.path(&format!("{tag}.out"))).unwrap())
        .stderr(std::fs::File::create(dir.path(&format!("{tag}.err"))).unwrap())
        .spawn()
        .expect("start linerate exec")
}

/// What a [`preloaded`] or [`exec`] program wrote to stdout and stderr.
fn text(dir: &Scratch, tag: &str) -> (String, String) {
    let r = |ext: &str| std::fs::read_to_string(dir.path(&format!("{tag}.{ext}"))).unwrap();
    (r("out"), r("err"))
}

fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The master's JSON summary line.
fn summary(out: &Output) -> serde_json::Value {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|j| j["type"] == "summary")
        .unwrap_or_else(|| {
            panic!(
                "no summary line in:\n{}\nstderr:\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        })
}

fn ok(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A master of `queues` queues (round-robin) fed from `input`, waiting for its consumers.
fn master(id: u32, input: &str, queues: &str, extra: &[&str]) -> Child {
    let ids = id.to_string();
    let mut args = vec![
        "balance",
        "-i",
        input,
        "-c",
        &ids,
        "-n",
        queues,
        "-m",
        "round-robin",
        "--wait-consumers",
        "-t",
        "60",
        "--json",
        "-q",
    ];
    args.extend_from_slice(extra);
    let c = linerate(&args);
    wait_for("the cluster's segment", Duration::from_secs(10), || {
        seg(id).exists()
    });
    c
}

/// The packets the master's summary says queue `q` delivered to its consumer.
fn delivered(ms: &serde_json::Value, q: usize) -> u64 {
    ms["queues"][q]["delivered"].as_u64().unwrap()
}

/// The packets queue `q` dropped, every reason summed.
fn queue_drops(ms: &serde_json::Value, q: usize) -> u64 {
    ms["queues"][q]["drops"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum()
}

/// tcpdump's closing lines: (captured, received by filter, dropped by kernel).
fn tcpdump_counts(stderr: &str) -> (u64, u64, u64) {
    let n = |what: &str| {
        stderr
            .lines()
            .find(|l| l.ends_with(what))
            .and_then(|l| l.split(' ').next())
            .and_then(|x| x.parse().ok())
            .unwrap_or_else(|| panic!("no `N {what}` line in tcpdump's stderr:\n{stderr}"))
    };
    (
        n("packets captured"),
        n("packets received by filter"),
        n("packets dropped by kernel"),
    )
}

// ---------------------------------------------------------------------------------------------
// Classic pcap files: read whole (a torn record fails), write

/// One record: the length on the wire and the captured bytes.
type Rec = (u32, Vec<u8>);

/// The link type and records of a classic pcap file; fails on a torn or bad file.
fn read_pcap(path: &Path) -> (u32, Vec<Rec>) {
    let b = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(b.len() >= 24, "{}: no pcap header", path.display());
    let magic = u32::from_le_bytes(b[0..4].try_into().unwrap());
    let le = match magic {
        0xa1b2_c3d4 | 0xa1b2_3c4d => true,
        0xd4c3_b2a1 | 0x4d3c_b2a1 => false,
        m => panic!("{}: not a pcap file (magic {m:#x})", path.display()),
    };
    let u = |o: usize| {
        let a: [u8; 4] = b[o..o + 4].try_into().unwrap();
        if le {
            u32::from_le_bytes(a)
        } else {
            u32::from_be_bytes(a)
        }
    };
    let link = u(20) & 0x0fff_ffff;
    let mut recs = Vec::new();
    let mut o = 24;
    while o < b.len() {
        assert!(
            o + 16 <= b.len(),
            "{}: torn record header at byte {o}",
            path.display()
        );
        let (incl, orig) = (u(o + 8) as usize, u(o + 12));
        assert!(
            o + 16 + incl <= b.len(),
            "{}: torn record at byte {o}",
            path.display()
        );
        recs.push((orig, b[o + 16..o + 16 + incl].to_vec()));
        o += 16 + incl;
    }
    (link, recs)
}

/// Writes Ethernet records stamped 1 ms apart from now: traffic replayed into a cluster is
/// live traffic, and argus on a live device sets aside packets from long ago.
fn write_pcap(path: &Path, recs: &[Rec]) {
    write_pcap_aged(path, recs, 0);
}

/// As `write_pcap`, stamped from `age` seconds ago.
fn write_pcap_aged(path: &Path, recs: &[Rec], age: u32) {
    let t0 = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as u32
        - age;
    let mut b = Vec::new();
    for v in [0xa1b2_c3d4u32, 0x0004_0002, 0, 0, 262_144, 1] {
        if v == 0x0004_0002 {
            b.extend_from_slice(&2u16.to_le_bytes());
            b.extend_from_slice(&4u16.to_le_bytes());
        } else {
            b.extend_from_slice(&v.to_le_bytes());
        }
    }
    for (k, (orig, data)) in recs.iter().enumerate() {
        let us = k as u64 * 1000;
        b.extend_from_slice(&(t0 + (us / 1_000_000) as u32).to_le_bytes());
        b.extend_from_slice(&((us % 1_000_000) as u32).to_le_bytes());
        b.extend_from_slice(&(data.len() as u32).to_le_bytes());
        b.extend_from_slice(&orig.to_le_bytes());
        b.extend_from_slice(data);
    }
    std::fs::write(path, b).unwrap();
}

/// Records as a multiset: (wire length, bytes) -> how many times.
fn multiset(recs: &[Rec]) -> BTreeMap<Rec, usize> {
    let mut m = BTreeMap::new();
    for r in recs {
        *m.entry(r.clone()).or_insert(0) += 1;
    }
    m
}

/// Realistic traffic, all Ethernet: examples/sample.pcap (UDP, TCP, ICMP, ARP, IPv6 at rotating
/// addresses) followed by tcpdump's captures of DNS over UDP and TCP, 802.1ad QinQ, MPLS over
/// UDP, IPv6 with a routing header and ICMPv6. Restamped 1 ms apart from now.
fn traffic(dir: &Scratch) -> (PathBuf, Vec<Rec>) {
    let root = linerate_test_support::repo_root();
    let (link, mut recs) = read_pcap(&root.join("examples/sample.pcap"));
    assert_eq!(link, 1);
    let corpus = linerate_test_support::corpus_dir();
    for name in [
        "dns_udp.pcap",
        "dns_udp_2.pcap",
        "dns_tcp.pcap",
        "dnssec.pcap",
        "edns-opts.pcap",
        "dns-uri.pcap",
        "802.1ad_QinQ.pcap",
        "mpls-over-udp.pcap",
        "ipv6-routing-header.pcap",
        "icmpv6.pcap",
    ] {
        let p = corpus.join(name);
        assert!(
            p.is_file(),
            "{} is missing (tcpdump's test captures: set LINERATE_CORPUS)",
            p.display()
        );
        let (link, more) = read_pcap(&p);
        assert_eq!(link, 1, "{name} is Ethernet");
        recs.extend(more);
    }
    let path = dir.path("traffic.pcap");
    write_pcap(&path, &recs);
    (path, recs)
}

/// `tcpdump -r FILE -w OUT FILTER`: the records of FILE that libpcap's own compiler keeps.
fn tcpdump_r(file: &Path, filter: &str, out: &Path) -> Vec<Rec> {
    let o = Command::new("tcpdump")
        .arg("-r")
        .arg(file)
        .arg("-w")
        .arg(out)
        .arg(filter)
        .output()
        .unwrap();
    ok(&o, "tcpdump -r");
    read_pcap(out).1
}

// ---------------------------------------------------------------------------------------------
// tcpdump

/// tcpdump -w on queue 0 and `linerate count -w` on queue 1 together hold exactly the input,
/// byte for byte with every wire length; tcpdump ends with its summary when the master ends.
#[test]
fn tcpdump_and_count_on_two_queues_hold_the_input_byte_for_byte() {
    if !have("tcpdump", "tcpdump") {
        return;
    }
    let dir = Scratch::new("bytes");
    let (input, recs) = traffic(&dir);
    let id = cluster_id(1);
    let mut p = Procs(vec![]);
    let m = p.add(master(id, &format!("pcap:{}", input.display()), "2", &[]));
    let q0 = dir.path("q0.pcap");
    let q1 = dir.path("q1.pcap");
    let td = p.add(preloaded(
        &dir,
        "tcpdump",
        "tcpdump",
        &[
            "-n",
            "-i",
            &format!("cluster:{id}@0"),
            "-w",
            q0.to_str().unwrap(),
        ],
    ));
    let cnt = p.add(linerate(&[
        "count",
        "-i",
        &format!("cluster:{id}@1"),
        "-w",
        q1.to_str().unwrap(),
        "--json",
        "-q",
    ]));
    let mo = p.finish(m, Duration::from_secs(60));
    ok(&mo, "the master");
    let ms = summary(&mo);
    assert_eq!(ms["rx"].as_u64().unwrap(), recs.len() as u64, "{ms}");
    let t = p.finish(td, Duration::from_secs(20));
    let (_, err) = text(&dir, "tcpdump");
    assert!(t.status.success(), "tcpdump: {}\n{err}", t.status);
    ok(&p.finish(cnt, Duration::from_secs(20)), "linerate count");
    let (captured, _, dropped) = tcpdump_counts(&err);
    let (link0, got0) = read_pcap(&q0);
    let (link1, got1) = read_pcap(&q1);
    assert_eq!((link0, link1), (1, 1), "both files are Ethernet");
    assert_eq!(
        captured,
        got0.len() as u64,
        "tcpdump's summary tells its file"
    );
    assert_eq!(dropped, 0, "{err}");
    assert_eq!(got0.len() as u64, delivered(&ms, 0), "{ms}");
    assert_eq!(got1.len() as u64, delivered(&ms, 1), "{ms}");
    assert!(!got0.is_empty() && !got1.is_empty());
    let mut both = got0;
    both.extend(got1);
    assert_eq!(
        multiset(&both),
        multiset(&recs),
        "the two queues' files hold the input"
    );
}

/// The program's own filter, compiled by libpcap: `linerate exec -- tcpdump -i cluster:ID@0
/// 'udp and port 53' -w` on a 1-queue cluster keeps what `tcpdump -r` with the same filter keeps
/// of the file, in order; a filter matching tagged frames (`vlan`) too.
#[test]
fn tcpdump_filter_on_a_queue_keeps_what_tcpdump_r_keeps() {
    if !have("tcpdump", "tcpdump") {
        return;
    }
    let dir = Scratch::new("filter");
    let (input, _) = traffic(&dir);
    for (k, filter) in ["udp and port 53", "vlan or mpls or (ip6 and icmp6)"]
        .into_iter()
        .enumerate()
    {
        let want = tcpdump_r(&input, filter, &dir.path(&format!("ref{k}.pcap")));
        assert!(!want.is_empty(), "the file holds packets for {filter}");
        let id = cluster_id(2 + k as u32);
        let mut p = Procs(vec![]);
        let m = p.add(master(id, &format!("pcap:{}", input.display()), "1", &[]));
        let out = dir.path(&format!("q{k}.pcap"));
        let td = p.add(exec(
            &dir,
            "tcpdump",
            "tcpdump",
            &[
                "-n",
                "-i",
                &format!("cluster:{id}@0"),
                "-w",
                out.to_str().unwrap(),
                filter,
            ],
        ));
        ok(&p.finish(m, Duration::from_secs(60)), "the master");
        let t = p.finish(td, Duration::from_secs(20));
        let (_, err) = text(&dir, "tcpdump");
        assert!(t.status.success(), "tcpdump: {}\n{err}", t.status);
        let (captured, _, _) = tcpdump_counts(&err);
        let got = read_pcap(&out).1;
        assert_eq!(captured, got.len() as u64, "{err}");
        assert_eq!(
            got, want,
            "`{filter}` on the queue keeps what tcpdump -r keeps"
        );
    }
}

/// A master that ends (fed by a file) ends tcpdump: exit 0, its summary, a whole file holding
/// every packet of its queue in order.
#[test]
fn a_master_that_ends_ends_tcpdump_with_every_packet_of_its_queue() {
    if !have("tcpdump", "tcpdump") {
        return;
    }
    let dir = Scratch::new("end");
    let (input, recs) = traffic(&dir);
    let id = cluster_id(4);
    let mut p = Procs(vec![]);
    let m = p.add(master(id, &format!("pcap:{}", input.display()), "1", &[]));
    let out = dir.path("q0.pcap");
    let td = p.add(preloaded(
        &dir,
        "tcpdump",
        "tcpdump",
        &[
            "-n",
            "-i",
            &format!("cluster:{id}@0"),
            "-w",
            out.to_str().unwrap(),
        ],
    ));
    let ms = summary(&p.finish(m, Duration::from_secs(60)));
    let t = p.finish(td, Duration::from_secs(20));
    let (_, err) = text(&dir, "tcpdump");
    assert_eq!(t.status.code(), Some(0), "tcpdump's exit: {err}");
    let (captured, received, dropped) = tcpdump_counts(&err);
    assert_eq!(
        (captured, received, dropped),
        (recs.len() as u64, recs.len() as u64, 0),
        "{err}"
    );
    assert_eq!(delivered(&ms, 0), recs.len() as u64, "{ms}");
    assert_eq!(
        read_pcap(&out).1,
        recs,
        "the file holds the input, in order"
    );
}

/// A one-queue cluster of 16384 slots fed by its source at 5 kpps and tcpdump (with `flags`)
/// writing its queue 0 to `q0.pcap` in `dir`: the processes, the master's and tcpdump's
/// indices among them, and the file.
fn tcpdump_on_a_paced_queue(
    dir: &Scratch,
    id: u32,
    flags: &[&str],
) -> (Procs, usize, usize, PathBuf) {
    let mut p = Procs(vec![]);
    let m = p.add(master(
        id,
        "source",
        "1",
        &["--source-rate", "5kpps", "--slots", "16384"],
    ));
    let out = dir.path("q0.pcap");
    let queue = format!("cluster:{id}@0");
    let mut args = vec!["-n"];
    args.extend_from_slice(flags);
    args.extend(["-i", &queue, "-w", out.to_str().unwrap()]);
    let td = p.add(preloaded(dir, "tcpdump", "tcpdump", &args));
    (p, m, td, out)
}

/// SIGINT to the master `m` of `p` (a child this test started and still holds): its summary,
/// once it exited 0.
fn stop_master(p: &mut Procs, m: usize) -> serde_json::Value {
    linerate::os::signal(p.pid(m), libc::SIGINT).unwrap();
    let mo = p.finish(m, Duration::from_secs(20));
    ok(&mo, "the master");
    summary(&mo)
}

/// SIGINT to tcpdump on a queue of a running cluster: it exits 0 with its summary, and its file
/// is whole and holds what the summary says it captured.
#[test]
fn sigint_ends_tcpdump_on_a_queue_with_its_summary_and_a_whole_file() {
    if !have("tcpdump", "tcpdump") {
        return;
    }
    let dir = Scratch::new("sigint");
    let (mut p, m, td, out) = tcpdump_on_a_paced_queue(&dir, cluster_id(5), &[]);
    std::thread::sleep(Duration::from_millis(1500));
    // The PID of a child this test started and still holds.
    linerate::os::signal(p.pid(td), libc::SIGINT).unwrap();
    let t = p.finish(td, Duration::from_secs(20));
    let (_, err) = text(&dir, "tcpdump");
    assert_eq!(
        t.status.code(),
        Some(0),
        "tcpdump's exit after SIGINT: {err}"
    );
    let (captured, _, _) = tcpdump_counts(&err);
    let got = read_pcap(&out).1;
    assert!(captured > 0, "{err}");
    assert_eq!(
        got.len() as u64,
        captured,
        "the file holds what tcpdump says"
    );
    let sizes: std::collections::BTreeSet<(u32, usize)> =
        got.iter().map(|(orig, d)| (*orig, d.len())).collect();
    assert!(
        sizes.len() == 1 && sizes.iter().all(|&(orig, len)| orig as usize >= len),
        "every record is a frame of the source, all of its one size (on the wire it counts the \
         CRC the captured bytes lack): (wire, captured) {sizes:?}"
    );
    // The master goes on without its consumer.
    assert_eq!(stop_master(&mut p, m)["invariant_ok"], true);
}

/// `tcpdump -c 50` on a queue: it stops mid-batch (its reads come 64 at a time), and the
/// master counts the 50 it captured as delivered, the rest of that batch dropped with their
/// consumer gone, not delivered to a program that never saw them.
#[test]
fn tcpdump_c_on_a_queue_is_delivered_what_it_captured() {
    if !have("tcpdump", "tcpdump") {
        return;
    }
    let dir = Scratch::new("count");
    let (mut p, m, td, out) = tcpdump_on_a_paced_queue(&dir, cluster_id(16), &["-c", "50"]);
    let t = p.finish(td, Duration::from_secs(20));
    let (_, err) = text(&dir, "tcpdump");
    assert_eq!(t.status.code(), Some(0), "tcpdump's exit: {err}");
    let (captured, received, _) = tcpdump_counts(&err);
    assert_eq!(captured, 50, "{err}");
    assert_eq!(read_pcap(&out).1.len(), 50);
    // The master goes on without its consumer.
    std::thread::sleep(Duration::from_millis(200));
    let ms = stop_master(&mut p, m);
    assert_eq!(ms["invariant_ok"], true, "{ms}");
    assert_eq!(
        delivered(&ms, 0),
        50,
        "tcpdump received {received} and captured 50: {ms}"
    );
    assert!(queue_drops(&ms, 0) > 0, "{ms}");
}

/// pcap_stats under overload: tcpdump stopped (SIGSTOP) while the master fills its small queue;
/// its "dropped by kernel" is the queue's counted drops and its "captured" the queue's
/// deliveries, both from the master's summary.
#[test]
fn tcpdump_dropped_by_kernel_is_the_queues_counted_drops() {
    if !have("tcpdump", "tcpdump") {
        return;
    }
    let dir = Scratch::new("drops");
    let id = cluster_id(6);
    let mut p = Procs(vec![]);
    let m = p.add(master(
        id,
        "source:30000",
        "1",
        &["--source-rate", "10kpps", "--slots", "256"],
    ));
    let out = dir.path("q0.pcap");
    let td = p.add(preloaded(
        &dir,
        "tcpdump",
        "tcpdump",
        &[
            "-n",
            "-i",
            &format!("cluster:{id}@0"),
            "-w",
            out.to_str().unwrap(),
        ],
    ));
    std::thread::sleep(Duration::from_millis(500));
    linerate::os::signal(p.pid(td), libc::SIGSTOP).unwrap();
    std::thread::sleep(Duration::from_millis(1000));
    linerate::os::signal(p.pid(td), libc::SIGCONT).unwrap();
    let mo = p.finish(m, Duration::from_secs(60));
    ok(&mo, "the master");
    let ms = summary(&mo);
    assert_eq!(ms["invariant_ok"], true, "{ms}");
    let t = p.finish(td, Duration::from_secs(20));
    let (_, err) = text(&dir, "tcpdump");
    assert!(t.status.success(), "tcpdump: {}\n{err}", t.status);
    let (captured, _, dropped) = tcpdump_counts(&err);
    assert!(
        ms["queues"][0]["drops"]["ring_full"].as_u64().unwrap() > 0,
        "the stopped consumer's queue overflowed: {ms}"
    );
    assert_eq!(dropped, queue_drops(&ms, 0), "{err}\n{ms}");
    assert_eq!(captured, delivered(&ms, 0), "{err}\n{ms}");
    assert_eq!(read_pcap(&out).1.len() as u64, captured);
    assert_eq!(
        captured + dropped,
        30_000,
        "every packet captured or dropped"
    );
}

/// `tcpdump -D` (pcap_findalldevs) lists the queues of a running cluster.
#[test]
fn tcpdump_d_lists_the_queues_of_a_running_cluster() {
    if !have("tcpdump", "tcpdump") {
        return;
    }
    let dir = Scratch::new("list");
    let id = cluster_id(7);
    let mut p = Procs(vec![]);
    let m = p.add(master(id, "source:10", "2", &[]));
    let d = p.add(preloaded(&dir, "list", "tcpdump", &["-D"]));
    ok(&p.finish(d, Duration::from_secs(20)), "tcpdump -D");
    let (list, _) = text(&dir, "list");
    for q in 0..2 {
        assert!(
            list.contains(&format!("cluster:{id}@{q}")),
            "queue {q} listed:\n{list}"
        );
    }
    assert!(list.contains("lo"), "system devices still listed:\n{list}");
    // Ended as a user ends it (its segment removed), then it waits for no one.
    linerate::os::signal(p.pid(m), libc::SIGINT).unwrap();
    ok(&p.finish(m, Duration::from_secs(20)), "the master");
    assert!(!seg(id).exists());
}

// ---------------------------------------------------------------------------------------------
// tshark, argus, ngrep

/// tshark (through dumpcap) captures every packet of its queue.
#[test]
fn tshark_captures_every_packet_of_its_queue() {
    if !have("tshark", "tshark") {
        return;
    }
    let dir = Scratch::new("tshark");
    let (input, recs) = traffic(&dir);
    let id = cluster_id(8);
    let mut p = Procs(vec![]);
    let m = p.add(master(id, &format!("pcap:{}", input.display()), "1", &[]));
    let out = dir.path("q0.pcap");
    let ts = p.add(preloaded(
        &dir,
        "tshark",
        "tshark",
        &[
            "-i",
            &format!("cluster:{id}@0"),
            "-F",
            "pcap",
            "-w",
            out.to_str().unwrap(),
        ],
    ));
    ok(&p.finish(m, Duration::from_secs(60)), "the master");
    let t = p.finish(ts, Duration::from_secs(30));
    let (_, err) = text(&dir, "tshark");
    assert!(t.status.success(), "tshark: {}\n{err}", t.status);
    assert_eq!(
        multiset(&read_pcap(&out).1),
        multiset(&recs),
        "tshark's file holds the input: {err}"
    );
}

/// ra's view of an argus file, fields that do not depend on timing, flows merged per key by
/// racluster (a status interval may split a flow differently live and from a file).
fn ra_flows(argus_file: &Path) -> Vec<String> {
    let o = Command::new("racluster")
        .arg("-r")
        .arg(argus_file)
        .args([
            "-n", "-c", ",", "-m", "saddr", "daddr", "proto", "sport", "dport",
        ])
        .args(["-s", "proto", "saddr", "sport", "daddr", "dport", "spkts"])
        .args(["dpkts", "sbytes", "dbytes"])
        .output()
        .unwrap();
    ok(&o, "racluster");
    let mut rows: Vec<String> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .skip(1)
        .map(|l| l.split(',').map(str::trim).collect::<Vec<_>>().join(","))
        .collect();
    rows.sort();
    rows
}

/// argus on a 1-queue cluster finds the flows argus finds in the file.
#[test]
fn argus_on_a_queue_finds_the_flows_of_the_file() {
    if !have("argus", "argus-server") || !have("racluster", "argus-client") {
        return;
    }
    let dir = Scratch::new("argus");
    let (input, _) = traffic(&dir);
    let want_file = dir.path("file.argus");
    let o = Command::new("argus")
        .arg("-r")
        .arg(&input)
        .arg("-w")
        .arg(&want_file)
        .output()
        .unwrap();
    ok(&o, "argus -r");
    let want = ra_flows(&want_file);
    assert!(want.len() > 50, "{want:?}");
    let id = cluster_id(9);
    let mut p = Procs(vec![]);
    let m = p.add(master(id, &format!("pcap:{}", input.display()), "1", &[]));
    let got_file = dir.path("queue.argus");
    let a = p.add(preloaded(
        &dir,
        "argus",
        "argus",
        &[
            "-i",
            &format!("cluster:{id}@0"),
            // Whole packets, as argus -r reads them: with its live default of 96 B it makes
            // no flow of a 102 B ICMPv6 echo behind a routing header (ipv6-routing-header.pcap).
            "-s",
            "65535",
            "-w",
            got_file.to_str().unwrap(),
        ],
    ));
    ok(&p.finish(m, Duration::from_secs(60)), "the master");
    let t = p.finish(a, Duration::from_secs(30));
    let (_, err) = text(&dir, "argus");
    assert!(t.status.success(), "argus: {}\n{err}", t.status);
    let got = ra_flows(&got_file);
    let only = |a: &[String], b: &[String]| {
        a.iter()
            .filter(|r| !b.contains(r))
            .cloned()
            .collect::<Vec<_>>()
    };
    assert!(
        got == want,
        "argus on the queue and on the file differ; only from the queue: {:?}; only from the \
         file: {:?}\n{err}",
        only(&got, &want),
        only(&want, &got)
    );
}

/// A NetFlow v5 flow: (protocol, source address, source port, destination address, port).
type V5Key = (u8, [u8; 4], u16, [u8; 4], u16);

/// NetFlow v5 datagrams received on a loopback socket until it is quiet for `quiet`: packets and
/// octets summed per flow (an exporter may split a flow into several records: when is timing).
fn netflow_v5_collector(sock: std::net::UdpSocket, quiet: Duration) -> BTreeMap<V5Key, (u64, u64)> {
    sock.set_read_timeout(Some(quiet)).unwrap();
    let mut flows = BTreeMap::new();
    let mut buf = [0u8; 65536];
    while let Ok(n) = sock.recv(&mut buf) {
        let b = &buf[..n];
        assert!(n >= 24 && b[0..2] == [0, 5], "a NetFlow v5 datagram");
        let count = u16::from_be_bytes([b[2], b[3]]) as usize;
        assert_eq!(n, 24 + 48 * count, "whole records");
        for r in b[24..].chunks(48) {
            let u32at = |x: usize| u32::from_be_bytes(r[x..x + 4].try_into().unwrap()) as u64;
            let u16at = |x: usize| u16::from_be_bytes([r[x], r[x + 1]]);
            let key = (
                r[38],
                r[0..4].try_into().unwrap(),
                u16at(32),
                r[4..8].try_into().unwrap(),
                u16at(34),
            );
            let e: &mut (u64, u64) = flows.entry(key).or_default();
            e.0 += u32at(16);
            e.1 += u32at(20);
        }
    }
    flows
}

/// softflowd on a queue exports the flows softflowd finds in the file (NetFlow v5 to a
/// loopback collector: each flow's packets and octets), and exits when the queue ends.
/// softflowd names an interface `[idx:]interface`, so the queue is given as `0:cluster:ID@0`.
/// A live softflowd exports a flow once it is idle by the wall clock and drops the flows not
/// yet expired when its capture fails (as when an interface goes away): the traffic is
/// stamped a day ago, so each flow is idle, and exported, as soon as softflowd has seen it.
#[test]
fn softflowd_on_a_queue_exports_the_flows_of_the_file() {
    if !have("softflowd", "softflowd") {
        return;
    }
    let dir = Scratch::new("softflowd");
    let (_, recs) = traffic(&dir);
    let input = dir.path("aged.pcap");
    write_pcap_aged(&input, &recs, 86_400);
    let run = |args: &[&str], tag: &str, feed: Option<u32>| {
        let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = format!("127.0.0.1:{}", sock.local_addr().unwrap().port());
        let ctl = dir.path(&format!("{tag}.ctl"));
        let pid = dir.path(&format!("{tag}.pid"));
        let mut full = vec![
            "-d",
            "-v",
            "5",
            "-n",
            &to,
            "-c",
            ctl.to_str().unwrap(),
            "-p",
            pid.to_str().unwrap(),
        ];
        full.extend_from_slice(args);
        let collector =
            std::thread::spawn(move || netflow_v5_collector(sock, Duration::from_secs(3)));
        let mut p = Procs(vec![]);
        let m = feed.map(|id| p.add(master(id, &format!("pcap:{}", input.display()), "1", &[])));
        let s = p.add(preloaded(&dir, tag, "softflowd", &full));
        if let Some(m) = m {
            ok(&p.finish(m, Duration::from_secs(60)), "the master");
        }
        let t = p.finish(s, Duration::from_secs(30));
        let (o, e) = text(&dir, tag);
        (t.status, format!("{o}{e}"), collector.join().unwrap())
    };
    let (status, log, want) = run(&["-r", input.to_str().unwrap()], "file", None);
    assert!(status.success(), "softflowd -r: {status}\n{log}");
    assert!(want.len() > 20, "{want:?}");
    let id = cluster_id(10);
    let (_, log, got) = run(&["-i", &format!("0:cluster:{id}@0")], "queue", Some(id));
    // A live capture never ends in libpcap: softflowd leaves its loop only on -1, so it
    // stops on the queue's end as on an error (exit 1), naming it.
    assert!(
        log.contains(&format!("Exiting on pcap_dispatch: cluster {id} ended")),
        "{log}"
    );
    assert_eq!(
        got, want,
        "each flow's packets and octets, from the queue and from the file"
    );
}

/// tshark on two queues of one cluster (`-i cluster:ID@0 -i cluster:ID@1`: dumpcap reads them
/// in one process, a thread each, into one pcapng file) captures every packet of both, and
/// counts no drop. The source is paced (2 kpps): dumpcap's writer keeps up with each thread.
#[test]
fn tshark_on_two_queues_captures_every_packet_of_both() {
    if !have("tshark", "tshark") || !have("editcap", "wireshark-common (with tshark)") {
        return;
    }
    let dir = Scratch::new("tshark2");
    let id = cluster_id(14);
    let mut p = Procs(vec![]);
    let m = p.add(master(id, "source:4000", "2", &["--source-rate", "2kpps"]));
    let out = dir.path("both.pcapng");
    let ts = p.add(preloaded(
        &dir,
        "tshark",
        "tshark",
        &[
            "-i",
            &format!("cluster:{id}@0"),
            "-i",
            &format!("cluster:{id}@1"),
            "-w",
            out.to_str().unwrap(),
        ],
    ));
    let ms = summary(&p.finish(m, Duration::from_secs(60)));
    let t = p.finish(ts, Duration::from_secs(30));
    let (_, err) = text(&dir, "tshark");
    assert!(t.status.success(), "tshark: {}\n{err}", t.status);
    assert!(!err.contains("dropped"), "{err}\n{ms}");
    assert!(err.contains("4000 packets captured"), "{err}\n{ms}");
    assert_eq!((delivered(&ms, 0), delivered(&ms, 1)), (2000, 2000), "{ms}");
    assert_eq!(queue_drops(&ms, 0) + queue_drops(&ms, 1), 0, "{ms}");
    // Both interfaces are Ethernet: editcap writes the packets as one classic pcap file.
    let flat = dir.path("both.pcap");
    let o = Command::new("editcap")
        .args(["-F", "pcap"])
        .arg(&out)
        .arg(&flat)
        .output()
        .unwrap();
    ok(&o, "editcap");
    assert_eq!(read_pcap(&flat).1.len(), 4000, "tshark's file: {err}");
}

/// dumpcap on two queues of one cluster, the input unpaced (a burst of 2080 packets): dumpcap
/// reads each queue in a thread and writes from one buffer, by default at most 1000 packets
/// (tshark, which cannot change it, drops the rest of a burst as "packets dropped"); with
/// dumpcap's `-N` and `-C` the buffer holds the burst, and the file holds the input.
#[test]
fn dumpcap_on_two_queues_with_a_buffer_for_the_burst_captures_every_packet() {
    if !have("dumpcap", "wireshark-common") || !have("editcap", "wireshark-common") {
        return;
    }
    let dir = Scratch::new("dumpcap2");
    let (input, recs) = traffic(&dir);
    let id = cluster_id(15);
    let mut p = Procs(vec![]);
    let m = p.add(master(id, &format!("pcap:{}", input.display()), "2", &[]));
    let out = dir.path("both.pcapng");
    let dc = p.add(preloaded(
        &dir,
        "dumpcap",
        "dumpcap",
        &[
            "-i",
            &format!("cluster:{id}@0"),
            "-i",
            &format!("cluster:{id}@1"),
            "-N",
            "100000",
            "-C",
            "100000000",
            "-w",
            out.to_str().unwrap(),
        ],
    ));
    let ms = summary(&p.finish(m, Duration::from_secs(60)));
    let t = p.finish(dc, Duration::from_secs(30));
    let (_, err) = text(&dir, "dumpcap");
    assert!(t.status.success(), "dumpcap: {}\n{err}", t.status);
    for q in 0..2 {
        assert!(
            err.contains(&format!(
                "'cluster:{id}@{q}': 1040/0 (pcap:0/dumpcap:0/flushed:0/ps_ifdrop:0)"
            )),
            "{err}\n{ms}"
        );
    }
    assert_eq!(queue_drops(&ms, 0) + queue_drops(&ms, 1), 0, "{ms}");
    // Both interfaces are Ethernet: editcap writes the packets as one classic pcap file.
    let flat = dir.path("both.pcap");
    let o = Command::new("editcap")
        .args(["-F", "pcap"])
        .arg(&out)
        .arg(&flat)
        .output()
        .unwrap();
    ok(&o, "editcap");
    assert_eq!(
        multiset(&read_pcap(&flat).1),
        multiset(&recs),
        "dumpcap's file holds both queues, the input: {err}"
    );
}

/// ngrep on a queue sees the packets ngrep sees in the file (its -O dump of every match).
#[test]
fn ngrep_on_a_queue_sees_the_packets_of_the_file() {
    if !have("ngrep", "ngrep") {
        return;
    }
    let dir = Scratch::new("ngrep");
    let (input, _) = traffic(&dir);
    let want_file = dir.path("file.pcap");
    let o = Command::new("ngrep")
        .args(["-q", "-e", "-I"])
        .arg(&input)
        .arg("-O")
        .arg(&want_file)
        .arg("")
        .output()
        .unwrap();
    ok(&o, "ngrep -I");
    let want = read_pcap(&want_file).1;
    assert!(want.len() > 1000, "{}", want.len());
    let id = cluster_id(11);
    let mut p = Procs(vec![]);
    let m = p.add(master(id, &format!("pcap:{}", input.display()), "1", &[]));
    let got_file = dir.path("queue.pcap");
    let n = p.add(preloaded(
        &dir,
        "ngrep",
        "ngrep",
        &[
            "-q",
            "-e",
            "-d",
            &format!("cluster:{id}@0"),
            "-O",
            got_file.to_str().unwrap(),
            "",
        ],
    ));
    ok(&p.finish(m, Duration::from_secs(60)), "the master");
    let t = p.finish(n, Duration::from_secs(30));
    let (_, err) = text(&dir, "ngrep");
    assert!(t.status.success(), "ngrep: {}\n{err}", t.status);
    assert_eq!(read_pcap(&got_file).1, want, "ngrep on the queue: {err}");
}

// ---------------------------------------------------------------------------------------------
// Several devices in one program; a static program

/// A libpcap program that captures from several devices at once, each with its own filter,
/// waiting on their selectable fds (poll), writing each to its own file: `prog SECONDS
/// [DEV FILTER OUT]...`. It prints `ready` once every device is open, and ends when every
/// cluster queue has ended (pcap_dispatch < 0: `DEV ended (R): WHY`), then drains the others;
/// at the end one line per device: `DEV packets N`.
const MULTI_C: &str = r#"
#include <pcap/pcap.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct dev { const char *name; pcap_t *p; pcap_dumper_t *d; unsigned long n; int ended; int live_end; };

static void count(u_char *user, const struct pcap_pkthdr *h, const u_char *bytes) {
    struct dev *v = (struct dev *)user;
    pcap_dump((u_char *)v->d, h, bytes);
    v->n++;
}

int main(int argc, char **argv) {
    char err[PCAP_ERRBUF_SIZE];
    int seconds = atoi(argv[1]);
    int nd = (argc - 2) / 3;
    struct dev devs[8];
    struct pollfd fds[8];
    memset(devs, 0, sizeof devs);
    for (int i = 0; i < nd; i++) {
        struct dev *v = &devs[i];
        struct bpf_program prog;
        v->name = argv[2 + 3 * i];
        /* Devices named cluster:... end with their master; the others are drained at the end. */
        v->live_end = strncmp(v->name, "cluster:", 8) == 0;
        v->p = pcap_open_live(v->name, 262144, 1, 100, err);
        if (!v->p) { fprintf(stderr, "%s: %s\n", v->name, err); return 1; }
        if (pcap_compile(v->p, &prog, argv[3 + 3 * i], 1, PCAP_NETMASK_UNKNOWN) < 0
            || pcap_setfilter(v->p, &prog) < 0) {
            fprintf(stderr, "%s: filter: %s\n", v->name, pcap_geterr(v->p)); return 1;
        }
        pcap_freecode(&prog);
        if (pcap_setnonblock(v->p, 1, err) < 0) { fprintf(stderr, "%s: %s\n", v->name, err); return 1; }
        v->d = pcap_dump_open(v->p, argv[4 + 3 * i]);
        if (!v->d) { fprintf(stderr, "%s: %s\n", v->name, pcap_geterr(v->p)); return 1; }
        fds[i].fd = pcap_get_selectable_fd(v->p);
        if (fds[i].fd < 0) { fprintf(stderr, "%s: no selectable fd\n", v->name); return 1; }
        fds[i].events = POLLIN;
    }
    printf("ready\n");
    fflush(stdout);
    time_t end = time(NULL) + seconds;
    for (;;) {
        int waiting = 0;
        for (int i = 0; i < nd; i++) waiting += devs[i].live_end && !devs[i].ended;
        if (!waiting) break;
        if (time(NULL) > end) { fprintf(stderr, "timed out\n"); return 1; }
        if (poll(fds, nd, 100) < 0) { perror("poll"); return 1; }
        for (int i = 0; i < nd; i++) {
            struct dev *v = &devs[i];
            if (v->ended) continue;
            int r = pcap_dispatch(v->p, -1, count, (u_char *)v);
            /* A live capture never ends in libpcap: the end of a queue is an error (-1)
               naming it, or a break (-2). */
            if (r < 0) {
                printf("%s ended (%d): %s\n", v->name, r, r == PCAP_ERROR ? pcap_geterr(v->p) : "break");
                v->ended = 1;
                fds[i].fd = -1;
            }
        }
    }
    for (int i = 0; i < nd; i++) {
        struct dev *v = &devs[i];
        while (!v->ended && pcap_dispatch(v->p, -1, count, (u_char *)v) > 0) {}
        pcap_dump_close(v->d);
        printf("%s packets %lu\n", v->name, v->n);
        pcap_close(v->p);
    }
    return 0;
}
"#;

/// Builds [`MULTI_C`] with cc against libpcap; None (a skip) without a compiler or libpcap-dev.
fn multi_program(dir: &Scratch) -> Option<PathBuf> {
    if !have("cc", "gcc or clang") {
        return None;
    }
    let src = dir.path("multi.c");
    std::fs::write(&src, MULTI_C).unwrap();
    let exe = dir.path("multi");
    let o = Command::new("cc")
        .arg("-O1")
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .arg("-lpcap")
        .output()
        .unwrap();
    if !o.status.success() {
        linerate_test_support::skip(&format!(
            "cannot build a libpcap program (apt-get install libpcap-dev): {}",
            String::from_utf8_lossy(&o.stderr)
        ));
        return None;
    }
    Some(exe)
}

fn multi_counts(out: &str) -> BTreeMap<String, u64> {
    out.lines()
        .filter_map(|l| {
            let (dev, n) = l.split_once(" packets ")?;
            Some((dev.to_string(), n.parse().ok()?))
        })
        .collect()
}

/// Two linerate queues in one program, each with its own libpcap filter and selectable fd:
/// together they hold the input, each what its queue delivered.
#[test]
fn two_queues_of_a_cluster_in_one_program() {
    let dir = Scratch::new("two");
    let Some(exe) = multi_program(&dir) else {
        return;
    };
    let (input, recs) = traffic(&dir);
    let id = cluster_id(12);
    let mut p = Procs(vec![]);
    let m = p.add(master(id, &format!("pcap:{}", input.display()), "2", &[]));
    let (d0, d1) = (format!("cluster:{id}@0"), format!("cluster:{id}@1"));
    let (f0, f1) = (dir.path("q0.pcap"), dir.path("q1.pcap"));
    let prog = p.add(preloaded(
        &dir,
        "multi",
        exe.to_str().unwrap(),
        &[
            "60",
            &d0,
            "",
            f0.to_str().unwrap(),
            &d1,
            "",
            f1.to_str().unwrap(),
        ],
    ));
    let ms = summary(&p.finish(m, Duration::from_secs(60)));
    let t = p.finish(prog, Duration::from_secs(30));
    let (out, err) = text(&dir, "multi");
    assert!(t.status.success(), "{}: {out}\n{err}", t.status);
    let n = multi_counts(&out);
    assert_eq!(n[&d0], delivered(&ms, 0), "{out}\n{ms}");
    assert_eq!(n[&d1], delivered(&ms, 1), "{out}\n{ms}");
    let mut both = read_pcap(&f0).1;
    assert_eq!(both.len() as u64, n[&d0]);
    both.extend(read_pcap(&f1).1);
    assert_eq!(
        multiset(&both),
        multiset(&recs),
        "the two queues hold the input"
    );
}

/// A system device (lo, with a filter for this test's own datagrams) and a linerate queue in
/// one program: each gets its own packets.
#[test]
fn a_system_device_and_a_queue_in_one_program() {
    let dir = Scratch::new("mixed");
    let Some(exe) = multi_program(&dir) else {
        return;
    };
    let id = cluster_id(13);
    let mut p = Procs(vec![]);
    // About 1.5 s of traffic, so that the datagrams on lo are sent while the queue runs.
    let m = p.add(master(id, "source:3000", "1", &["--source-rate", "2kpps"]));
    let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = rx.local_addr().unwrap().port();
    let lo_filter = format!("udp and dst port {port}");
    let dq = format!("cluster:{id}@0");
    let (flo, fq) = (dir.path("lo.pcap"), dir.path("q.pcap"));
    let prog = p.add(preloaded(
        &dir,
        "multi",
        exe.to_str().unwrap(),
        &[
            "60",
            "lo",
            &lo_filter,
            flo.to_str().unwrap(),
            &dq,
            "",
            fq.to_str().unwrap(),
        ],
    ));
    wait_for("the program's ready line", Duration::from_secs(20), || {
        text(&dir, "multi").0.contains("ready")
    });
    let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    for k in 0..100u32 {
        tx.send_to(&k.to_be_bytes(), ("127.0.0.1", port)).unwrap();
    }
    let ms = summary(&p.finish(m, Duration::from_secs(60)));
    let t = p.finish(prog, Duration::from_secs(30));
    let (out, err) = text(&dir, "multi");
    assert!(t.status.success(), "{}: {out}\n{err}", t.status);
    let n = multi_counts(&out);
    assert_eq!(n["lo"], 100, "lo: this test's datagrams: {out}");
    assert_eq!(n[&dq], delivered(&ms, 0), "{out}\n{ms}");
    assert_eq!(delivered(&ms, 0), 3000, "{ms}");
    let lo = read_pcap(&flo).1;
    assert_eq!(lo.len(), 100);
    assert!(lo.iter().all(|(_, d)| d.len() == 14 + 20 + 8 + 4));
    assert_eq!(read_pcap(&fq).1.len(), 3000);
}

/// A statically linked program is told why nothing would change, and is not run: `linerate
/// exec` refuses it (exit 2) naming it, as it refuses a dynamic program without libpcap.
#[test]
fn linerate_exec_refuses_a_static_program_and_says_why() {
    if !have("cc", "gcc or clang") {
        return;
    }
    let dir = Scratch::new("static");
    let src = dir.path("touch.c");
    // Creates the file named by its argument: whether it ran at all shows in the file system.
    std::fs::write(
        &src,
        "#include <stdio.h>\nint main(int c, char **v) { return c > 1 && fopen(v[1], \"w\") ? 0 : 1; }\n",
    )
    .unwrap();
    let exe = dir.path("static-capture");
    let o = Command::new("cc")
        .arg("-static")
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .output()
        .unwrap();
    if !o.status.success() {
        linerate_test_support::skip(&format!(
            "cannot build a static program (libc6-dev's libc.a): {}",
            String::from_utf8_lossy(&o.stderr)
        ));
        return;
    }
    let mark = dir.path("ran");
    let mut p = Procs(vec![]);
    let e = p.add(exec(
        &dir,
        "static",
        exe.to_str().unwrap(),
        &[mark.to_str().unwrap()],
    ));
    let t = p.finish(e, Duration::from_secs(20));
    let (_, err) = text(&dir, "static");
    assert_eq!(t.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "nothing would change: {} is statically linked",
            exe.display()
        )),
        "{err}"
    );
    assert!(!mark.exists(), "the static program was not run");
    // The same program run directly does create the file: the refusal is what kept it out.
    assert!(Command::new(&exe).arg(&mark).status().unwrap().success());
    assert!(mark.exists());
    // A dynamic program that does not use libpcap: refused too, for that reason.
    let e = p.add(exec(&dir, "true", "true", &[]));
    let t = p.finish(e, Duration::from_secs(20));
    let (_, err) = text(&dir, "true");
    assert_eq!(t.status.code(), Some(2), "{err}");
    assert!(err.contains("is not linked with libpcap"), "{err}");
}

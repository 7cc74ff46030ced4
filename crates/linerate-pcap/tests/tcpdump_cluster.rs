//! The real tcpdump on a cluster queue through liblinerate_pcap.so (LD_PRELOAD): a `linerate
//! balance` master fed from a pcap file, tcpdump on one queue, `linerate count` on the other.
//! Every test is bounded in time and kills only the processes it started (by their PID,
//! through their `Child` handles).
#![deny(unsafe_code)]

use linerate_test_support::segment::{descriptor, layout};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// target/debug (or release): where the test binary's deps/ folder is.
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().to_path_buf()
}

/// The `linerate` binary and the library, or a skip when they are not built.
fn tools() -> Option<(PathBuf, PathBuf)> {
    if !linerate_test_support::require_tool("tcpdump", "apt-get install tcpdump") {
        return None;
    }
    let t = target_dir();
    let bin = t.join("linerate");
    let lib = [
        t.join("liblinerate_pcap.so"),
        t.join("deps/liblinerate_pcap.so"),
    ]
    .into_iter()
    .find(|p| p.is_file());
    match (bin.is_file(), lib) {
        (true, Some(lib)) => Some((bin, lib)),
        _ => {
            linerate_test_support::skip(&format!(
                "build the linerate binary and the library first (cargo build -p linerate-cli \
                 -p linerate-pcap): looked in {}",
                t.display()
            ));
            None
        }
    }
}

/// A unique cluster id per test and run.
fn cluster_id(k: u32) -> u32 {
    300_000 + (std::process::id() % 10_000) * 10 + k
}

fn seg(id: u32) -> PathBuf {
    linerate_test_support::cluster_segment(id)
}

/// Children killed (SIGKILL, by PID) and reaped when the test ends, however it ends.
struct Procs(Vec<Child>);

impl Drop for Procs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A scratch folder removed at the end; tcpdump (which drops root for user `tcpdump`) may
/// write in it.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!("linerate-pcap-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
        Scratch(d)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn wait_child(c: &mut Child, limit: Duration) {
    let t0 = Instant::now();
    while c.try_wait().unwrap().is_none() {
        if t0.elapsed() > limit {
            let _ = c.kill();
            panic!("a process did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn output(mut c: Child, limit: Duration) -> Output {
    wait_child(&mut c, limit);
    c.wait_with_output().unwrap()
}

fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The records of a classic pcap file: (seconds, microseconds, original length, bytes).
fn records(path: &Path) -> Vec<(u32, u32, u32, Vec<u8>)> {
    let b = std::fs::read(path).unwrap();
    assert!(b.len() >= 24, "{}: no pcap header", path.display());
    assert_eq!(
        &b[..4],
        &0xa1b2_c3d4u32.to_le_bytes(),
        "{}: a microsecond pcap file",
        path.display()
    );
    let u = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
    let mut out = Vec::new();
    let mut o = 24;
    while o + 16 <= b.len() {
        let caplen = u(o + 8) as usize;
        assert!(o + 16 + caplen <= b.len(), "{}: cut record", path.display());
        out.push((
            u(o),
            u(o + 4),
            u(o + 12),
            b[o + 16..o + 16 + caplen].to_vec(),
        ));
        o += 16 + caplen;
    }
    assert_eq!(o, b.len(), "{}: trailing bytes", path.display());
    out
}

fn sample() -> PathBuf {
    linerate_test_support::repo_root().join("examples/sample.pcap")
}

/// Starts a master that serves `apps` (`-n`) from the sample file once every consumer is in.
fn master(bin: &Path, id: u32, apps: &str) -> Child {
    let c = Command::new(bin)
        .args(["balance", "-i"])
        .arg(sample())
        .args(["-c", &id.to_string(), "-n", apps, "-m", "round-robin"])
        .args(["--wait-consumers", "-t", "30"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start linerate balance");
    wait_for("the cluster's segment", Duration::from_secs(10), || {
        seg(id).exists()
    });
    c
}

/// tcpdump -w on queue 0 and `linerate count -w` on queue 1 together hold every packet of the
/// file once, with its time and length; tcpdump ends by itself when the master does, with its
/// usual summary, and its file reads back with `tcpdump -r`.
#[test]
fn tcpdump_writes_a_queue_to_a_file() {
    let Some((bin, lib)) = tools() else { return };
    let dir = Scratch::new("w");
    let id = cluster_id(0);
    let mut procs = Procs(vec![master(&bin, id, "2")]);
    let q0 = dir.0.join("q0.pcap");
    let q1 = dir.0.join("q1.pcap");
    let td = Command::new("tcpdump")
        .env("LD_PRELOAD", &lib)
        .args(["-i", &format!("cluster:{id}@0"), "-w"])
        .arg(&q0)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start tcpdump");
    let count = Command::new(&bin)
        .args(["count", "-q", "-i", &format!("cluster:{id}@1"), "-w"])
        .arg(&q1)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start linerate count");
    let td = output(td, Duration::from_secs(30));
    let count = output(count, Duration::from_secs(30));
    wait_child(&mut procs.0[0], Duration::from_secs(30));
    let err = String::from_utf8_lossy(&td.stderr);
    assert!(td.status.success(), "tcpdump: {err}");
    assert!(
        count.status.success(),
        "count: {}",
        String::from_utf8_lossy(&count.stderr)
    );
    assert!(
        err.contains(&format!("listening on cluster:{id}@0, link-type EN10MB")),
        "{err}"
    );
    let mut got = records(&q0);
    let n0 = got.len();
    assert!(
        err.contains(&format!("{n0} packets captured")),
        "tcpdump's summary names what it wrote ({n0}): {err}"
    );
    assert!(err.contains("0 packets dropped by kernel"), "{err}");
    got.extend(records(&q1));
    let mut want = records(&sample());
    got.sort();
    want.sort();
    assert_eq!(got.len(), want.len(), "every packet once");
    assert!(got == want, "the two queues hold the file's packets");
    assert!(n0 > 0 && n0 < want.len(), "round-robin split: {n0}");
    let back = Command::new("tcpdump").arg("-r").arg(&q0).output().unwrap();
    assert!(
        back.status.success(),
        "{}",
        String::from_utf8_lossy(&back.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&back.stdout).lines().count(), n0);
}

/// A filter compiled by tcpdump (libpcap's compiler) runs on the queue: the lines tcpdump
/// prints live are the lines it prints reading the file with the same filter.
#[test]
fn tcpdump_filters_and_prints_a_queue_as_it_reads_the_file() {
    let Some((bin, lib)) = tools() else { return };
    let dir = Scratch::new("print");
    let id = cluster_id(1);
    let mut procs = Procs(vec![master(&bin, id, "1")]);
    let filter = "udp and (dst port 4000 or len > 100)";
    // Into a file: a pipe nobody reads while tcpdump runs would fill and stop it.
    let printed = dir.0.join("out.txt");
    let td = Command::new("tcpdump")
        .env("LD_PRELOAD", &lib)
        .args(["-n", "-tt", "-v", "-i", &format!("cluster:{id}@0"), filter])
        .stdout(std::fs::File::create(&printed).unwrap())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start tcpdump");
    let td = output(td, Duration::from_secs(30));
    wait_child(&mut procs.0[0], Duration::from_secs(30));
    let err = String::from_utf8_lossy(&td.stderr);
    assert!(td.status.success(), "tcpdump: {err}");
    let want = Command::new("tcpdump")
        .args(["-n", "-tt", "-v", "-r"])
        .arg(sample())
        .arg(filter)
        .output()
        .unwrap();
    let live = std::fs::read_to_string(&printed).unwrap();
    let file = String::from_utf8_lossy(&want.stdout);
    assert!(!file.is_empty());
    assert_eq!(live, file);
    let n = file.lines().filter(|l| !l.starts_with(' ')).count();
    assert!(err.contains(&format!("{n} packets captured")), "{err}");
}

/// `linerate exec` preloads the library (found next to the binary): tcpdump through it reads
/// a queue of a master's built-in source, whose packets carry no time of their own, and prints
/// each with the time it was read; a program the library cannot change is refused (exit 2)
/// before it runs.
#[test]
fn exec_runs_tcpdump_on_a_queue_and_refuses_what_it_cannot_change() {
    let Some((bin, _lib)) = tools() else { return };
    let id = cluster_id(2);
    let mut procs = Procs(vec![]);
    let c = Command::new(&bin)
        .args([
            "balance",
            "-i",
            "source:50",
            "-c",
            &id.to_string(),
            "-n",
            "1",
        ])
        .args(["--wait-consumers", "-t", "30"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start linerate balance");
    procs.0.push(c);
    wait_for("the cluster's segment", Duration::from_secs(10), || {
        seg(id).exists()
    });
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let td = Command::new(&bin)
        .args(["exec", "--", "tcpdump", "-n", "-tt", "-i"])
        .arg(format!("cluster:{id}@0"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start linerate exec");
    let td = output(td, Duration::from_secs(30));
    wait_child(&mut procs.0[0], Duration::from_secs(30));
    let err = String::from_utf8_lossy(&td.stderr);
    assert!(td.status.success(), "{err}");
    let out = String::from_utf8_lossy(&td.stdout);
    assert_eq!(out.lines().count(), 50, "{out}\n{err}");
    for l in out.lines() {
        let secs: u64 = l.split('.').next().unwrap().parse().unwrap();
        assert!(secs >= before && secs < before + 60, "a read time: {l}");
    }
    // Not linked with libpcap, or statically linked: nothing would change.
    let ls = Command::new(&bin)
        .args(["exec", "--", "ls"])
        .output()
        .unwrap();
    assert_eq!(ls.status.code(), Some(2));
    let e = String::from_utf8_lossy(&ls.stderr);
    assert!(
        e.contains("nothing would change: ls is not linked with libpcap"),
        "{e}"
    );
    if Path::new("/usr/sbin/ldconfig").is_file() {
        let st = Command::new(&bin)
            .args(["exec", "--", "/usr/sbin/ldconfig", "-p"])
            .output()
            .unwrap();
        assert_eq!(st.status.code(), Some(2));
        let e = String::from_utf8_lossy(&st.stderr);
        assert!(
            e.contains("nothing would change: /usr/sbin/ldconfig is statically linked"),
            "{e}"
        );
    }
}

/// `tcpdump -D` through the library lists the system's devices, then the running cluster's
/// queues and linerate's interface ports (pcap_findalldevs).
#[test]
fn tcpdump_d_lists_the_running_clusters_queues_after_the_systems_devices() {
    let Some((bin, lib)) = tools() else { return };
    let id = cluster_id(3);
    let mut procs = Procs(vec![master(&bin, id, "2")]);
    let d = Command::new("tcpdump")
        .env("LD_PRELOAD", &lib)
        .arg("-D")
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&d.stdout);
    assert!(d.status.success(), "{}", String::from_utf8_lossy(&d.stderr));
    let pos = |name: &str| {
        out.lines().position(|l| {
            l.split_whitespace()
                .next()
                .is_some_and(|w| w.ends_with(name))
        })
    };
    let lo = pos(".lo").expect("the system's lo");
    for q in 0..2 {
        let at = pos(&format!(".cluster:{id}@{q}")).unwrap_or_else(|| panic!("queue {q}: {out}"));
        assert!(at > lo, "{out}");
    }
    assert!(pos(".afpacket:lo").is_some(), "{out}");
    assert!(
        out.contains(&format!("linerate cluster {id} queue 1")),
        "{out}"
    );
    // Consumers on both queues let the master serve the file and end (removing its segment).
    for q in 0..2 {
        let c = Command::new(&bin)
            .args(["count", "-q", "-i", &format!("cluster:{id}@{q}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start linerate count");
        procs.0.push(c);
    }
    wait_child(&mut procs.0[0], Duration::from_secs(30));
    assert!(!seg(id).exists(), "the master removed its segment");
}

/// dumpcap on two queues of one cluster (a capture thread each, a writer thread): the end of
/// the master ends both captures without dropping what the writer had not written yet
/// (dumpcap's "flushed"), and every packet of the file was received on one queue or the other.
#[test]
fn dumpcap_on_two_queues_flushes_nothing_at_the_end() {
    let Some((bin, lib)) = tools() else { return };
    if !linerate_test_support::require_tool("dumpcap", "apt-get install tshark") {
        return;
    }
    let dir = Scratch::new("dumpcap2");
    let id = cluster_id(4);
    let mut procs = Procs(vec![master(&bin, id, "2")]);
    let out = dir.0.join("two.pcapng");
    let dc = Command::new("dumpcap")
        .env("LD_PRELOAD", &lib)
        .args([
            "-i",
            &format!("cluster:{id}@0"),
            "-i",
            &format!("cluster:{id}@1"),
        ])
        .arg("-w")
        .arg(&out)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start dumpcap");
    let dc = output(dc, Duration::from_secs(30));
    wait_child(&mut procs.0[0], Duration::from_secs(30));
    let err = String::from_utf8_lossy(&dc.stderr);
    assert!(dc.status.success(), "dumpcap: {err}");
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("Packets received/dropped on interface"))
        .collect();
    assert_eq!(lines.len(), 2, "{err}");
    let mut received = 0u64;
    for l in &lines {
        assert!(l.contains("flushed:0/"), "nothing flushed: {err}");
        // "...': RECEIVED/DROPPED (pcap:...".
        let counts = l.split("': ").nth(1).unwrap().split(' ').next().unwrap();
        let (r, d) = counts.split_once('/').unwrap();
        received += r.parse::<u64>().unwrap() + d.parse::<u64>().unwrap();
    }
    assert_eq!(received, records(&sample()).len() as u64, "{err}");
}

/// tcpdump asleep on an empty queue (the library waits on the queue's futex word for the
/// master to wake it) still ends when the master is killed (SIGKILL: no close, no wake): its
/// wait is capped, and after a wait that was not a wake it looks the master up. It ends with
/// libpcap's error, naming the dead master, within seconds.
#[test]
fn tcpdump_asleep_on_a_queue_ends_when_its_master_is_killed() {
    let Some((bin, lib)) = tools() else { return };
    let dir = Scratch::new("dead");
    let id = cluster_id(7);
    let m = Command::new(&bin)
        .args([
            "balance",
            "-i",
            "mem:idle",
            "-c",
            &id.to_string(),
            "-n",
            "1",
        ])
        .args(["-t", "60", "-q"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start linerate balance");
    let mut procs = Procs(vec![m]);
    wait_for("the cluster's segment", Duration::from_secs(10), || {
        seg(id).exists()
    });
    let err_path = dir.0.join("err");
    let td = Command::new("tcpdump")
        .env("LD_PRELOAD", &lib)
        .args(["-i", &format!("cluster:{id}@0"), "-w"])
        .arg(dir.0.join("q0.pcap"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .expect("start tcpdump");
    procs.0.push(td);
    wait_for("tcpdump listening", Duration::from_secs(10), || {
        std::fs::read_to_string(&err_path).is_ok_and(|s| s.contains("listening on"))
    });
    // tcpdump is in its loop, asleep on the empty queue.
    std::thread::sleep(Duration::from_millis(500));
    procs.0[0].kill().unwrap();
    let _ = procs.0[0].wait();
    let t0 = Instant::now();
    wait_child(&mut procs.0[1], Duration::from_secs(10));
    let status = procs.0[1].wait().unwrap();
    let err = std::fs::read_to_string(&err_path).unwrap();
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "ended after the master died"
    );
    assert!(!status.success(), "tcpdump reports the error: {err}");
    assert!(
        err.contains("died"),
        "the error names the dead master: {err}"
    );
    let _ = std::fs::remove_file(seg(id));
    // The killed master's claim of the id, left as its segment was.
    let _ = std::fs::remove_file(linerate::cluster::claim_path(id));
}

/// An idle cluster (its input never sends) whose queue 0 a hostile writer fills: the packets
/// (address, bytes) written into the segment, then their descriptors (address, length, wire
/// length) published by moving the head cursor while tcpdump waits on the queue with `-c` and
/// `-w out`. Returns tcpdump's output.
fn tcpdump_on_written_descriptors(
    bin: &Path,
    lib: &Path,
    id: u32,
    out: &Path,
    make: impl Fn(u64, u64, u64) -> (Vec<(u64, Vec<u8>)>, Vec<(u64, u32, u32)>),
) -> Output {
    use std::os::unix::fs::FileExt;
    let master = Command::new(bin)
        .args(["balance", "-i", &format!("mem:hostile-pcap-{id}")])
        .args(["-c", &id.to_string(), "--max-pkt-len", "9000", "-t", "20"])
        .args(["-q", "--no-huge"]) // written to below (pwrite): never on a hugetlbfs
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start linerate balance");
    let mut procs = Procs(vec![master]);
    wait_for("the cluster's segment", Duration::from_secs(10), || {
        seg(id).exists()
    });
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(seg(id))
        .unwrap();
    let word = |at: u64| {
        let mut b = [0u8; 8];
        f.read_exact_at(&mut b, at).unwrap();
        u64::from_le_bytes(b)
    };
    wait_for("the header", Duration::from_secs(10), || {
        word(layout::TOTAL_LEN) != 0
    });
    assert_eq!(word(layout::HEADROOM) as u32, 128);
    let (packets, descs) = make(
        word(layout::FRAMES_OFF),
        word(layout::BIG_OFF),
        word(layout::BIG_FRAMES) >> 32,
    );
    for (at, bytes) in &packets {
        f.write_all_at(bytes, *at).unwrap();
    }
    let qoff = word(layout::QUEUE_OFF);
    let slots: Vec<u8> = descs
        .iter()
        .flat_map(|&(a, l, w)| descriptor(a, l, w))
        .collect();
    f.write_all_at(&slots, qoff + layout::SLOTS).unwrap();
    let td = Command::new("tcpdump")
        .env("LD_PRELOAD", lib)
        .args([
            "-i",
            &format!("cluster:{id}@0"),
            "-c",
            &descs.len().to_string(),
        ])
        .arg("-w")
        .arg(out)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start tcpdump");
    procs.0.push(td);
    std::thread::sleep(Duration::from_millis(500));
    f.write_all_at(&(descs.len() as u64).to_le_bytes(), qoff + layout::HEAD)
        .unwrap();
    let td = procs.0.pop().unwrap();
    let o = output(td, Duration::from_secs(15));
    drop(procs); // the master, killed
    let _ = std::fs::remove_file(seg(id));
    let _ = std::fs::remove_file(linerate::cluster::claim_path(id));
    o
}

/// tcpdump through the library on descriptors a hostile writer put in a queue: a packet in a
/// regular frame and a jumbo one filling its big frame are written byte for byte; a batch with
/// a descriptor straddling two frames stops tcpdump with an error naming the queue and the
/// slot, nothing of the batch handed to it, its summary counting the batch as dropped.
#[test]
fn tcpdump_gets_jumbo_packets_and_refuses_descriptors_outside_their_frame() {
    let Some((bin, lib)) = tools() else { return };
    let dir = Scratch::new("desc");
    let id = cluster_id(8);
    let out = dir.0.join("q0.pcap");
    let small: Vec<u8> = (0..64u32).map(|i| i as u8).collect();
    let jumbo: Vec<u8> = (0..16384u32 - 128).map(|i| (i * 7 + 3) as u8).collect();
    let (s, j) = (small.clone(), jumbo.clone());
    let good = move |f: u64, b: u64, _: u64| {
        (
            vec![(f + 2048 + 128, s.clone()), (b + 128, j.clone())],
            vec![
                (f + 2048 + 128, 64, 64),
                (b + 128, j.len() as u32, j.len() as u32),
            ],
        )
    };
    let o = tcpdump_on_written_descriptors(&bin, &lib, id, &out, &good);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "tcpdump: {err}");
    assert!(err.contains("0 packets dropped by kernel"), "{err}");
    let got: Vec<Vec<u8>> = records(&out).into_iter().map(|r| r.3).collect();
    assert!(got == vec![small, jumbo], "the two packets, byte for byte");
    let bad = move |f: u64, b: u64, s: u64| {
        let (p, mut d) = good(f, b, s);
        d.push((f + 4096 - 32, 64, 64));
        (p, d)
    };
    let o = tcpdump_on_written_descriptors(&bin, &lib, id, &out, &bad);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "tcpdump: {err}");
    assert!(
        err.contains("queue 0 slot 2: descriptor")
            && err.contains("3 descriptors dropped as malformed")
            && err.contains("0 packets captured")
            && err.contains("3 packets dropped by kernel"),
        "{err}"
    );
}

//! Process clusters on huge pages (DPDK's habit): with a hugetlbfs mounted and free 2 MiB
//! pages, `balance` puts its segment there, `linerate count` and tcpdump through
//! liblinerate_pcap.so find it by id and read every frame byte for byte; without enough pages
//! it goes to /dev/shm and says why. Root: each test mounts a private hugetlbfs in a mount
//! namespace of its own (a `unshare -m` holder process; every program of the test runs in it
//! through `nsenter`), so that no other process on the machine sees it, and sets
//! /proc/sys/vm/nr_hugepages for its run, put back when it ends. Skipped only where the kernel
//! has no hugetlbfs.
#![deny(unsafe_code)]

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_linerate");
const NR: &str = "/proc/sys/vm/nr_hugepages";

/// The tests of this file change the machine's huge page count one at a time.
static PAGES: Mutex<()> = Mutex::new(());

fn cluster_id(k: u32) -> u32 {
    820_000 + (std::process::id() % 10_000) * 10 + k
}

fn preload() -> PathBuf {
    std::env::var_os("LINERATE_PCAP_LIB")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(BIN).with_file_name("liblinerate_pcap.so"))
}

/// Whether this test can run: root, hugetlbfs in the kernel, unshare and nsenter (util-linux).
fn can_run() -> bool {
    if !linerate::os::is_root() {
        linerate_test_support::skip("needs root (mount, /proc/sys/vm/nr_hugepages)");
        return false;
    }
    let fs = std::fs::read_to_string("/proc/filesystems").unwrap_or_default();
    if !fs.lines().any(|l| l.trim_end().ends_with("hugetlbfs")) || !Path::new(NR).exists() {
        linerate_test_support::skip("the kernel has no hugetlbfs");
        return false;
    }
    true
}

/// /proc/sys/vm/nr_hugepages set for the test, put back when it ends.
struct HugePages(String);

impl HugePages {
    fn set(n: u64) -> HugePages {
        let old = std::fs::read_to_string(NR).unwrap();
        std::fs::write(NR, n.to_string()).unwrap();
        HugePages(old.trim().to_string())
    }
    fn total() -> u64 {
        std::fs::read_to_string(NR).unwrap().trim().parse().unwrap()
    }
}

impl Drop for HugePages {
    fn drop(&mut self) {
        let _ = std::fs::write(NR, &self.0);
    }
}

/// Free 2 MiB pages not promised to a mapping.
fn free_pages() -> u64 {
    let r = |f: &str| -> u64 {
        std::fs::read_to_string(format!("/sys/kernel/mm/hugepages/hugepages-2048kB/{f}"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    r("free_hugepages") - r("resv_hugepages")
}

/// A private mount namespace holding a hugetlbfs at `dir` (mounted with `opts`), kept alive by
/// a `sleep` started with `unshare -m`; the namespace and its mount go when it is killed (by
/// its PID, through its handle) at the end of the test.
struct Ns {
    holder: Child,
    dir: PathBuf,
    scratch: PathBuf,
}

impl Ns {
    fn new(tag: &str, opts: &str) -> Ns {
        let scratch = std::env::temp_dir().join(format!("lr-huge-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&scratch);
        let dir = scratch.join("huge");
        std::fs::create_dir_all(&dir).unwrap();
        let script = format!(
            "mount -t hugetlbfs -o '{opts}' nodev '{}' && echo up && exec sleep 120",
            dir.display()
        );
        let mut holder = Command::new("unshare")
            .args(["-m", "--propagation", "private", "sh", "-c", &script])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("unshare (util-linux)");
        let mut up = [0u8; 3];
        let n = holder.stdout.as_mut().unwrap().read(&mut up).unwrap_or(0);
        if n < 2 {
            let _ = holder.kill();
            let (_, e) = drain(&mut holder);
            panic!("mounting a hugetlbfs in a private namespace failed: {e}");
        }
        Ns {
            holder,
            dir,
            scratch,
        }
    }

    /// `program args` in the namespace (with `env` set), output to files under the scratch
    /// folder, read back with [`Ns::text`].
    fn spawn(&self, tag: &str, env: &[(&str, &Path)], program: &str, args: &[&str]) -> Child {
        let mut c = Command::new("nsenter");
        c.arg("-t")
            .arg(self.holder.id().to_string())
            .args(["-m", "--", "env"]);
        for (k, v) in env {
            c.arg(format!("{k}={}", v.display()));
        }
        c.arg(program)
            .args(args)
            .stdout(std::fs::File::create(self.scratch.join(format!("{tag}.out"))).unwrap())
            .stderr(std::fs::File::create(self.scratch.join(format!("{tag}.err"))).unwrap())
            .spawn()
            .expect("nsenter (util-linux)")
    }

    fn text(&self, tag: &str) -> (String, String) {
        let r = |ext: &str| {
            std::fs::read_to_string(self.scratch.join(format!("{tag}.{ext}"))).unwrap_or_default()
        };
        (r("out"), r("err"))
    }

    /// `path` as the namespace sees it (through its holder's root).
    fn inside(&self, path: &Path) -> PathBuf {
        Path::new(&format!("/proc/{}/root", self.holder.id())).join(path.strip_prefix("/").unwrap())
    }
}

impl Drop for Ns {
    fn drop(&mut self) {
        let _ = self.holder.kill();
        let _ = self.holder.wait();
        let _ = std::fs::remove_dir_all(&self.scratch);
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

/// Children stopped when the test ends, however it ends: SIGINT (a master then removes its
/// segment), SIGKILL 2 s later; by PID, through the handles.
struct Procs(Vec<Child>);

impl Drop for Procs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            if matches!(c.try_wait(), Ok(None)) {
                let _ = linerate::os::signal(c.id(), libc::SIGINT);
            }
        }
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(2)
            && self.0.iter_mut().any(|c| matches!(c.try_wait(), Ok(None)))
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
    /// Waits for child `k`, at most `limit`; its exit status.
    fn finish(&mut self, k: usize, limit: Duration) -> std::process::ExitStatus {
        let t0 = Instant::now();
        loop {
            if let Some(s) = self.0[k].try_wait().unwrap() {
                return s;
            }
            assert!(
                t0.elapsed() < limit,
                "process {k} did not finish in {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// The JSON summary line of a master's output.
fn summary(out: &str, err: &str) -> serde_json::Value {
    out.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|j| j["type"] == "summary")
        .unwrap_or_else(|| panic!("no summary line in:\n{out}\nstderr:\n{err}"))
}

type Rec = (u32, Vec<u8>);

/// The records of a classic little-endian pcap file (as linerate and tcpdump write here).
fn read_pcap(path: &Path) -> Vec<Rec> {
    let b = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(b.len() >= 24, "{}: no pcap header", path.display());
    let u = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
    assert!(
        matches!(u(0), 0xa1b2_c3d4 | 0xa1b2_3c4d),
        "{}",
        path.display()
    );
    let mut recs = Vec::new();
    let mut o = 24;
    while o < b.len() {
        assert!(o + 16 <= b.len(), "{}: torn record header", path.display());
        let (incl, orig) = (u(o + 8) as usize, u(o + 12));
        assert!(o + 16 + incl <= b.len(), "{}: torn record", path.display());
        recs.push((orig, b[o + 16..o + 16 + incl].to_vec()));
        o += 16 + incl;
    }
    recs
}

fn multiset(recs: &[Rec]) -> BTreeMap<Rec, usize> {
    let mut m = BTreeMap::new();
    for r in recs {
        *m.entry(r.clone()).or_insert(0) += 1;
    }
    m
}

/// A master on a huge-page segment (found by itself in the namespace's hugetlbfs), `linerate
/// count -w` on queue 0 and tcpdump -w through liblinerate_pcap.so on queue 1: the two files
/// hold the input byte for byte; the summary says "huge pages: N x 2 MiB in DIR", and nothing
/// of the cluster is in /dev/shm; the segment is gone from the hugetlbfs at exit.
#[test]
fn count_and_tcpdump_read_a_segment_on_huge_pages_byte_for_byte() {
    if !can_run() {
        return;
    }
    if !linerate_test_support::require_tool("tcpdump", "apt-get install tcpdump") {
        return;
    }
    let so = preload();
    assert!(
        so.is_file(),
        "{} is missing: cargo build -p linerate-pcap",
        so.display()
    );
    let _one = PAGES.lock().unwrap_or_else(|p| p.into_inner());
    let _pages = HugePages::set(HugePages::total() + 128);
    let ns = Ns::new("bytes", "pagesize=2M");
    let input = linerate_test_support::repo_root().join("examples/sample.pcap");
    let recs = read_pcap(&input);
    let id = cluster_id(1);
    let ids = id.to_string();
    let mut p = Procs(vec![]);
    let m = p.add(ns.spawn(
        "master",
        &[],
        BIN,
        &[
            "balance",
            "-i",
            &format!("pcap:{}", input.display()),
            "-c",
            &ids,
            "-n",
            "2",
            "-m",
            "round-robin",
            "--wait-consumers",
            "-t",
            "60",
            "--json",
            "-q",
        ],
    ));
    let seg = ns.inside(&ns.dir.join(format!("linerate-cluster-{id}")));
    let t0 = Instant::now();
    while !seg.exists() {
        assert!(
            t0.elapsed() < Duration::from_secs(10) && matches!(p.0[m].try_wait(), Ok(None)),
            "no segment at {}: {:?}",
            seg.display(),
            ns.text("master")
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        !Path::new(&format!("/dev/shm/linerate-cluster-{id}")).exists(),
        "nothing in /dev/shm"
    );
    let q0 = ns.scratch.join("q0.pcap");
    let q1 = ns.scratch.join("q1.pcap");
    let cnt = p.add(ns.spawn(
        "count",
        &[],
        BIN,
        &[
            "count",
            "-i",
            &format!("cluster:{id}@0"),
            "-w",
            q0.to_str().unwrap(),
            "-q",
        ],
    ));
    let td = p.add(ns.spawn(
        "tcpdump",
        &[("LD_PRELOAD", &so)],
        "tcpdump",
        &[
            "-n",
            "-i",
            &format!("cluster:{id}@1"),
            "-w",
            q1.to_str().unwrap(),
        ],
    ));
    let st = p.finish(m, Duration::from_secs(60));
    let (out, err) = ns.text("master");
    assert!(st.success(), "the master: {st}\n{out}\n{err}");
    let ms = summary(&out, &err);
    let segj = &ms["segment"];
    assert_eq!(segj["huge"], true, "{segj}");
    assert_eq!(segj["page_size"], 2 << 20, "{segj}");
    assert_eq!(segj["dir"], ns.dir.display().to_string(), "{segj}");
    let text = segj["text"].as_str().unwrap();
    assert!(
        text.starts_with("huge pages: ") && text.contains(" x 2 MiB in "),
        "{text}"
    );
    assert_eq!(ms["rx"].as_u64().unwrap(), recs.len() as u64, "{ms}");
    let sc = p.finish(cnt, Duration::from_secs(20));
    assert!(sc.success(), "count: {sc}\n{:?}", ns.text("count"));
    let stt = p.finish(td, Duration::from_secs(20));
    let (_, terr) = ns.text("tcpdump");
    assert!(stt.success(), "tcpdump: {stt}\n{terr}");
    let got0 = read_pcap(&q0);
    let got1 = read_pcap(&q1);
    assert!(!got0.is_empty() && !got1.is_empty());
    assert_eq!(
        got0.len() as u64,
        ms["queues"][0]["delivered"].as_u64().unwrap()
    );
    assert_eq!(
        got1.len() as u64,
        ms["queues"][1]["delivered"].as_u64().unwrap()
    );
    assert!(
        terr.contains(&format!("{} packets captured", got1.len())),
        "{terr}"
    );
    let mut both = got0;
    both.extend(got1);
    assert_eq!(
        multiset(&both),
        multiset(&recs),
        "the queues hold the input"
    );
    assert!(!seg.exists(), "the master removed its segment at exit");
}

/// Without enough huge pages the segment goes to /dev/shm and the summary says why with the
/// fix: too few free pages on the machine (the count and `echo N > nr_hugepages`), or a
/// mount's size= limit; `--huge-dir` names a hugetlbfs or is refused (exit 2), and `--threads`
/// refuses both flags.
#[test]
fn without_enough_huge_pages_the_segment_falls_back_saying_why() {
    if !can_run() {
        return;
    }
    let _one = PAGES.lock().unwrap_or_else(|p| p.into_inner());
    // Two pages free, far fewer than a default segment's ~38.
    let busy = HugePages::total() - free_pages();
    let _pages = HugePages::set(busy + 2);
    let ns = Ns::new("few", "pagesize=2M");
    let run = |tag: &str, ns: &Ns, extra: &[&str]| -> serde_json::Value {
        let id = cluster_id(2).to_string();
        let mut args = vec!["balance", "-i", "source:1000", "-c", &id, "-n", "1"];
        args.extend_from_slice(&["-t", "5", "--json", "-q"]);
        args.extend_from_slice(extra);
        let mut p = Procs(vec![]);
        let k = p.add(ns.spawn(tag, &[], BIN, &args));
        let st = p.finish(k, Duration::from_secs(30));
        let (out, err) = ns.text(tag);
        assert!(st.success(), "{tag}: {st}\n{out}\n{err}");
        summary(&out, &err)["segment"].clone()
    };
    for extra in [&[][..], &["--huge-dir", ns.dir.to_str().unwrap()][..]] {
        let s = run("few", &ns, extra);
        assert_eq!(s["huge"], false, "{s}");
        assert_eq!(s["dir"], "/dev/shm", "{s}");
        let why = s["why_not"].as_str().unwrap();
        assert!(why.contains("2 free"), "{why}");
        assert!(why.contains("> /proc/sys/vm/nr_hugepages"), "{why}");
        assert!(
            s["text"]
                .as_str()
                .unwrap()
                .starts_with("4 KiB pages in /dev/shm: "),
            "{s}"
        );
    }
    // A folder inside the hugetlbfs is not where consumers look: refused (exit 2).
    let sub = ns.dir.join("sub");
    std::fs::create_dir(ns.inside(&sub)).unwrap();
    let mut p = Procs(vec![]);
    let k = p.add(ns.spawn(
        "sub",
        &[],
        BIN,
        &[
            "balance",
            "-i",
            "source:10",
            "-n",
            "1",
            "--huge-dir",
            sub.to_str().unwrap(),
        ],
    ));
    let st = p.finish(k, Duration::from_secs(30));
    let (_, err) = ns.text("sub");
    assert_eq!(st.code(), Some(2), "{err}");
    assert!(err.contains("not where one is mounted"), "{err}");
    // --no-huge says so.
    let s = run("nohuge", &ns, &["--no-huge"]);
    assert_eq!(s["why_not"], "--no-huge", "{s}");
    drop(ns);
    // Enough pages on the machine, but a mount limited to two of them.
    let _more = HugePages::set(busy + 64);
    let small = Ns::new("small", "pagesize=2M,size=4M");
    let s = run("small", &small, &[]);
    assert_eq!(s["huge"], false, "{s}");
    assert!(
        s["why_not"].as_str().unwrap().contains("size= limit"),
        "{s}"
    );
    drop(small);
    // No hugetlbfs mounted (this namespace, the machine's own): said with the commands.
    let o = Command::new(BIN)
        .args(["balance", "-i", "source:100", "-c"])
        .arg(cluster_id(3).to_string())
        .args(["-n", "1", "-t", "5", "--json", "-q"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    let out = String::from_utf8_lossy(&o.stdout);
    let s = summary(&out, &String::from_utf8_lossy(&o.stderr))["segment"].clone();
    if linerate::cluster::hugetlbfs_mounts().is_empty() {
        assert!(
            s["why_not"]
                .as_str()
                .unwrap()
                .starts_with("no hugetlbfs mounted (mount -t hugetlbfs"),
            "{s}"
        );
    }
    // Flags that cannot apply: exit 2, nothing run.
    for args in [
        &["--huge-dir", "/tmp"][..],
        &["--threads", "--no-huge"][..],
        &["--huge-dir", "/dev/hugepages", "--no-huge"][..],
    ] {
        let o = Command::new(BIN)
            .args(["balance", "-i", "source:100", "-n", "1", "-t", "1"])
            .args(args)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}: {o:?}");
        assert!(o.stdout.is_empty(), "{args:?}");
    }
}

/// `--huge-dir` naming a symbolic link to where a hugetlbfs is mounted (`/dev/hugepages` made a
/// link to another mount point, say) is that mount: the segment goes on its huge pages and the
/// summary names the mount point (where consumers look), not a fallback to /dev/shm that says
/// "Not a directory".
#[test]
fn huge_dir_through_a_symbolic_link_is_the_mount_it_names() {
    if !can_run() {
        return;
    }
    let _one = PAGES.lock().unwrap_or_else(|p| p.into_inner());
    let busy = HugePages::total() - free_pages();
    let _pages = HugePages::set(busy + 64);
    let ns = Ns::new("link", "pagesize=2M");
    let link = ns.scratch.join("link");
    std::os::unix::fs::symlink(&ns.dir, &link).unwrap();
    let id = cluster_id(4).to_string();
    let mut p = Procs(vec![]);
    let k = p.add(ns.spawn(
        "link",
        &[],
        BIN,
        &[
            "balance",
            "-i",
            "source:100",
            "-c",
            &id,
            "-n",
            "1",
            "-t",
            "1",
            "--json",
            "-q",
            "--huge-dir",
            link.to_str().unwrap(),
        ],
    ));
    let st = p.finish(k, Duration::from_secs(30));
    let (out, err) = ns.text("link");
    assert!(st.success(), "{st}\n{out}\n{err}");
    let s = summary(&out, &err)["segment"].clone();
    assert_eq!(s["huge"], true, "{s}");
    assert_eq!(s["dir"], ns.dir.to_str().unwrap(), "{s}");
    assert!(!ns
        .inside(&ns.dir.join(format!("linerate-cluster-{id}")))
        .exists());
}

/// The fix a fallback names sets the machine's pool to what this segment needs on top of the
/// pages other programs hold (nr_hugepages is the whole pool, in use or not): with another
/// master holding its pages, `echo N > /proc/sys/vm/nr_hugepages` must leave enough free for
/// this one, not shrink the pool below what is in use.
#[test]
fn the_fix_for_too_few_pages_counts_the_pages_in_use() {
    if !can_run() {
        return;
    }
    let _one = PAGES.lock().unwrap_or_else(|p| p.into_inner());
    let busy = HugePages::total() - free_pages();
    let _pages = HugePages::set(busy + 40);
    let ns = Ns::new("advice", "pagesize=2M");
    let dir = ns.dir.to_str().unwrap().to_string();
    let (a, b) = (cluster_id(5).to_string(), cluster_id(6).to_string());
    let mut p = Procs(vec![]);
    p.add(ns.spawn(
        "holder",
        &[],
        BIN,
        &[
            "balance",
            "-i",
            "source",
            "--source-rate",
            "1kpps",
            "-c",
            &a,
            "-n",
            "1",
        ],
    ));
    let t0 = Instant::now();
    while free_pages() > 10 {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the first master's pages"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let k = p.add(ns.spawn(
        "second",
        &[],
        BIN,
        &[
            "balance",
            "-i",
            "source:100",
            "-c",
            &b,
            "-n",
            "1",
            "-t",
            "1",
            "--json",
            "-q",
            "--huge-dir",
            &dir,
        ],
    ));
    let st = p.finish(k, Duration::from_secs(30));
    let (out, err) = ns.text("second");
    assert!(st.success(), "{st}\n{out}\n{err}");
    let s = summary(&out, &err)["segment"].clone();
    assert_eq!(s["huge"], false, "{s}");
    let why = s["why_not"].as_str().unwrap();
    let need: u64 = why
        .split(" needs ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{why}"));
    let echo: u64 = why
        .split("echo ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{why}"));
    let in_use = HugePages::total() - free_pages();
    assert!(
        echo >= in_use + need,
        "{why}: {in_use} pages in use, {need} needed, the fix sets the pool to {echo}"
    );
}

/// Two masters of one id started at the same moment, one on huge pages and one in /dev/shm:
/// each name's link is exclusive only in its own directory, so both ran, and consumers of
/// `cluster:ID` found only one of them. The claim of the id (one lock whatever the directory)
/// lets exactly one run; the other is refused naming it.
#[test]
fn two_masters_of_one_id_in_two_places_never_both_run() {
    if !can_run() {
        return;
    }
    let _one = PAGES.lock().unwrap_or_else(|p| p.into_inner());
    let busy = HugePages::total() - free_pages();
    let _pages = HugePages::set(busy + 48);
    let ns = Ns::new("twin", "pagesize=2M");
    let dir = ns.dir.to_str().unwrap().to_string();
    for trial in 0..8u32 {
        let id = (cluster_id(7) + trial * 100_000).to_string();
        let mut p = Procs(vec![]);
        let args = |place: &[&'static str]| -> Vec<String> {
            let mut v: Vec<String> = [
                "balance",
                "-i",
                "source",
                "--source-rate",
                "1kpps",
                "-c",
                &id,
                "-n",
                "1",
                "-t",
                "1",
                "-q",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            v.extend(place.iter().map(|s| s.to_string()));
            v
        };
        let huge = args(&["--huge-dir"]);
        let mut huge: Vec<&str> = huge.iter().map(|s| s.as_str()).collect();
        huge.push(&dir);
        let shm = args(&["--no-huge"]);
        let shm: Vec<&str> = shm.iter().map(|s| s.as_str()).collect();
        let a = p.add(ns.spawn(&format!("twin-a{trial}"), &[], BIN, &huge));
        let b = p.add(ns.spawn(&format!("twin-b{trial}"), &[], BIN, &shm));
        let (sa, sb) = (
            p.finish(a, Duration::from_secs(30)),
            p.finish(b, Duration::from_secs(30)),
        );
        let (_, ea) = ns.text(&format!("twin-a{trial}"));
        let (_, eb) = ns.text(&format!("twin-b{trial}"));
        assert!(
            !(sa.success() && sb.success()),
            "trial {trial}: both masters of cluster {id} ran\n{ea}\n{eb}"
        );
        // One claim for the id whatever the directory: exactly one runs, the other is told
        // which master has it.
        assert!(
            sa.success() || sb.success(),
            "trial {trial}: neither master of cluster {id} ran\n{ea}\n{eb}"
        );
        let loser = if sa.success() { &eb } else { &ea };
        assert!(
            loser.contains("is in use by its master, pid "),
            "trial {trial}: {loser}"
        );
    }
}

/// tcpdump's `-Z USER`: the master drops root once its segment is made, and must still remove
/// the segment at exit. On a hugetlbfs only root may write (mounted as usual: root's, mode 755)
/// USER could not: the segment would stay, holding its huge pages. The master puts it in
/// /dev/shm instead (sticky: USER, given the file, removes it) and says why, with the mount
/// option that lets USER; on a hugetlbfs USER may write (mode=1777) it stays on huge pages.
/// Either way nothing is left behind.
#[test]
fn relinquished_privileges_never_leave_the_segment_behind() {
    if !can_run() {
        return;
    }
    let _one = PAGES.lock().unwrap_or_else(|p| p.into_inner());
    let busy = HugePages::total() - free_pages();
    let _pages = HugePages::set(busy + 48);
    for (tag, opts, huge) in [
        ("zroot", "pagesize=2M", false),
        ("zopen", "pagesize=2M,mode=1777", true),
    ] {
        let ns = Ns::new(tag, opts);
        let id = cluster_id(8).to_string();
        let dir = ns.dir.to_str().unwrap();
        for extra in [&[][..], &["--huge-dir", dir][..]] {
            let mut args = vec!["balance", "-i", "source:1000", "-c", &id, "-n", "1"];
            args.extend_from_slice(&["-t", "2", "--json", "-q", "-Z", "nobody"]);
            args.extend_from_slice(extra);
            let mut p = Procs(vec![]);
            let k = p.add(ns.spawn(tag, &[], BIN, &args));
            let st = p.finish(k, Duration::from_secs(30));
            let (out, err) = ns.text(tag);
            assert!(st.success(), "{tag} {extra:?}: {st}\n{out}\n{err}");
            let s = summary(&out, &err)["segment"].clone();
            assert_eq!(s["huge"], huge, "{tag} {extra:?}: {s}");
            if !huge {
                assert_eq!(s["dir"], "/dev/shm", "{s}");
                let why = s["why_not"].as_str().unwrap();
                assert!(why.contains("-Z nobody could not remove"), "{why}");
                assert!(why.contains("mode=1777"), "{why}");
            }
            let left: Vec<_> = std::fs::read_dir(ns.inside(&ns.dir))
                .unwrap()
                .flatten()
                .map(|e| e.file_name())
                .collect();
            assert!(left.is_empty(), "{tag} {extra:?}: left in {dir}: {left:?}");
            let shm = Path::new("/dev/shm").join(format!("linerate-cluster-{id}"));
            assert!(!shm.exists(), "{tag} {extra:?}: left {}", shm.display());
        }
    }
}

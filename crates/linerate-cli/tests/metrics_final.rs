//! The final figures are scrapable: a tool that ends keeps its `--metrics` endpoint up after its
//! summary for `--metrics-linger`, and `--metrics-textfile FILE` leaves them for node_exporter's
//! textfile collector. A scrape after the summary gets exactly the summary's numbers (flows'
//! end-only families included), the file holds the same text and passes `promtool check
//! metrics`, and a real Prometheus server (Debian's, started here) stores the final values.
//!
//! Runs anywhere on capture files and loopback; without promtool or prometheus their part is
//! skipped (a failure under LINERATE_REQUIRE_PRIV=1).
#![deny(unsafe_code)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn have(tool: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool}"))
        .output()
        .is_ok_and(|o| o.status.success())
}

fn sample() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/sample.pcap")
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("linerate-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A child we started, killed by its PID when dropped if still running.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

impl Proc {
    fn wait(&mut self, within: Duration) -> std::process::ExitStatus {
        let t0 = Instant::now();
        loop {
            if let Some(s) = self.0.try_wait().unwrap() {
                return s;
            }
            assert!(t0.elapsed() < within, "still running after {within:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// GET /metrics: the body.
fn scrape(addr: &str) -> String {
    let mut c = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(
        c,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut r = String::new();
    c.read_to_string(&mut r).unwrap();
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    r.split_once("\r\n\r\n").unwrap().1.to_string()
}

/// Samples by their full name with labels.
fn samples(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}

fn sum_of(s: &BTreeMap<String, f64>, family: &str) -> u64 {
    s.iter()
        .filter(|(k, _)| *k == family || k.starts_with(&format!("{family}{{")))
        .map(|(_, v)| *v as u64)
        .sum()
}

/// Reads lines from `r` until one contains `what`; every line read, and the address of the
/// "Metrics on http://ADDR/metrics" line if seen.
fn lines_until(r: &mut impl BufRead, what: &str, addr: &mut Option<String>) -> Vec<String> {
    let mut seen = Vec::new();
    loop {
        let mut l = String::new();
        assert!(
            r.read_line(&mut l).unwrap() > 0,
            "ended before '{what}': {seen:?}"
        );
        if let Some(a) = l.trim().strip_prefix("Metrics on http://") {
            *addr = Some(a.trim_end_matches("/metrics").to_string());
        }
        let done = l.contains(what);
        seen.push(l);
        if done {
            return seen;
        }
    }
}

fn promtool_check(file: &Path) {
    if !have("promtool") {
        linerate_test_support::skip("promtool not installed (apt-get install prometheus)");
        return;
    }
    let o = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::fs::File::open(file).unwrap())
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "promtool: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn count_serves_its_summary_after_printing_it() {
    let dir = tmp("metrics-count");
    let file = dir.join("count.prom");
    let t0 = Instant::now();
    let mut c = Command::new(env!("CARGO_BIN_EXE_linerate"))
        .args(["count", "-i"])
        .arg(sample())
        .args([
            "--json",
            "--metrics",
            "127.0.0.1:0",
            "--metrics-linger",
            "3",
        ])
        .arg("--metrics-textfile")
        .arg(&file)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(c.stdout.take().unwrap());
    let mut err = BufReader::new(c.stderr.take().unwrap());
    let mut p = Proc(c);
    let mut addr = None;
    lines_until(&mut err, "Metrics on", &mut addr);
    let summary = lines_until(&mut out, "\"type\":\"summary\"", &mut None);
    let j: serde_json::Value = serde_json::from_str(summary.last().unwrap()).unwrap();
    // The summary is out; the tool lingers (it says so) and serves the summary's figures.
    lines_until(&mut err, "--metrics-linger", &mut None);
    let body = scrape(addr.as_deref().unwrap());
    let s = samples(&body);
    let port = sample().display().to_string();
    let k = |f: &str| format!("{f}{{port=\"{port}\",dir=\"rx\"}}");
    assert_eq!(
        s[&k("linerate_packets_total")] as u64,
        j["pkts"].as_u64().unwrap(),
        "{body}"
    );
    assert_eq!(
        s[&k("linerate_bytes_total")] as u64,
        j["bytes"].as_u64().unwrap()
    );
    assert_eq!(j["pkts"], 2000);
    // The file holds the same final text, whole.
    assert_eq!(std::fs::read_to_string(&file).unwrap(), body);
    assert!(!dir.join("count.prom.tmp").exists());
    promtool_check(&file);
    assert!(p.wait(Duration::from_secs(10)).success());
    assert!(t0.elapsed() >= Duration::from_secs(3), "{:?}", t0.elapsed());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn flows_end_only_families_are_scrapable_after_the_summary() {
    let dir = tmp("metrics-flows");
    let file = dir.join("flows.prom");
    let mut c = Command::new(env!("CARGO_BIN_EXE_linerate"))
        .args(["flows", "-w", "/dev/null", "-i"])
        .arg(sample())
        .args([
            "--json",
            "--metrics",
            "127.0.0.1:0",
            "--metrics-linger",
            "2",
        ])
        .arg("--metrics-textfile")
        .arg(&file)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(c.stderr.take().unwrap());
    let mut p = Proc(c);
    let start = lines_until(&mut err, "\"type\":\"start\"", &mut None);
    let start: serde_json::Value = serde_json::from_str(start.last().unwrap()).unwrap();
    let addr = start["metrics"].as_str().unwrap().to_string();
    let summary = lines_until(&mut err, "\"type\":\"summary\"", &mut None);
    let j: serde_json::Value = serde_json::from_str(summary.last().unwrap()).unwrap();
    let body = scrape(&addr);
    let s = samples(&body);
    let port = sample().display().to_string();
    let pk = format!("linerate_packets_total{{port=\"{port}\",dir=\"rx\"}}");
    assert_eq!(s[&pk] as u64, j["packets"].as_u64().unwrap(), "{body}");
    assert_eq!(
        s["linerate_flows_created_total"] as u64,
        j["flows"].as_u64().unwrap()
    );
    assert_eq!(
        sum_of(&s, "linerate_flows_records_total"),
        j["records"].as_u64().unwrap()
    );
    for (reason, n) in j["records_by_reason"].as_object().unwrap() {
        let k = format!("linerate_flows_records_total{{reason=\"{reason}\"}}");
        assert_eq!(s[&k] as u64, n.as_u64().unwrap(), "{k}");
    }
    let nf: u64 = j["not_flow"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert_eq!(sum_of(&s, "linerate_flows_not_flow_total"), nf);
    assert_eq!(
        s["linerate_flows_evicted_total"] as u64,
        j["evicted"].as_u64().unwrap()
    );
    assert_eq!(s["linerate_flows_active"], 0.0);
    assert!(j["flows"].as_u64().unwrap() > 0);
    // The file is written right after the summary, before the linger.
    let t0 = Instant::now();
    while !file.exists() && t0.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(std::fs::read_to_string(&file).unwrap(), body);
    promtool_check(&file);
    assert!(p.wait(Duration::from_secs(10)).success());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn metrics_end_flags_that_cannot_apply_are_refused() {
    // --metrics-linger without an endpoint to keep.
    let o = Command::new(env!("CARGO_BIN_EXE_linerate"))
        .args(["count", "-i"])
        .arg(sample())
        .args(["--metrics-linger", "3"])
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(
        e.contains("--metrics-linger") && e.contains("--metrics ADDR"),
        "{e}"
    );
    // A textfile in a folder that does not exist: refused before any output.
    let o = Command::new(env!("CARGO_BIN_EXE_linerate"))
        .args(["count", "-q", "-i"])
        .arg(sample())
        .args(["--metrics-textfile", "/nonexistent-linerate/x.prom"])
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(e.contains("--metrics-textfile"), "{e}");
    // A refused run has no final figures: no wait (the default linger is 30 s).
    let t0 = Instant::now();
    let o = Command::new(env!("CARGO_BIN_EXE_linerate"))
        .args([
            "flows",
            "-i",
            "/nonexistent-linerate.pcap",
            "--metrics",
            "127.0.0.1:0",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
    // The default linger (30 s) ends on a signal, exit code 0.
    let mut c = Command::new(env!("CARGO_BIN_EXE_linerate"))
        .args(["count", "--json", "-i"])
        .arg(sample())
        .args(["--metrics", "127.0.0.1:0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(c.stderr.take().unwrap());
    let mut p = Proc(c);
    let said = lines_until(&mut err, "--metrics-linger", &mut None);
    assert!(said.last().unwrap().contains("for 30 s"), "{said:?}");
    let t0 = Instant::now();
    // The PID of the child we started.
    let _ = linerate::os::signal(p.0.id(), libc::SIGINT);
    assert!(p.wait(Duration::from_secs(5)).success());
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    // A textfile alone (no endpoint): written at the end, no wait.
    let dir = tmp("metrics-textfile-only");
    let file = dir.join("c.prom");
    let t0 = Instant::now();
    let o = Command::new(env!("CARGO_BIN_EXE_linerate"))
        .args(["count", "-q", "-i"])
        .arg(sample())
        .arg("--metrics-textfile")
        .arg(&file)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(t0.elapsed() < Duration::from_secs(3));
    let s = samples(&std::fs::read_to_string(&file).unwrap());
    assert_eq!(sum_of(&s, "linerate_packets_total"), 2000);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Prometheus 2.42 (Debian), scraping every 200 ms, while `gen` writes 160 000 packets to a file
/// at 80 kpps and then lingers: the value it stores last is the summary's.
#[test]
fn prometheus_stores_the_final_counter_values() {
    if !have("prometheus") {
        linerate_test_support::skip("prometheus not installed (apt-get install prometheus)");
        return;
    }
    let dir = tmp("metrics-prometheus");
    let free = || {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    };
    let (mport, pport) = (free(), free());
    let cfg = dir.join("p.yml");
    std::fs::write(
        &cfg,
        format!(
            "global:\n  scrape_interval: 200ms\n  scrape_timeout: 200ms\nscrape_configs:\n  - \
             job_name: gen\n    static_configs:\n      - targets: ['127.0.0.1:{mport}']\n"
        ),
    )
    .unwrap();
    let prom = Command::new("prometheus")
        .arg(format!("--config.file={}", cfg.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{pport}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start prometheus");
    let _prom = Proc(prom);
    let api = format!("127.0.0.1:{pport}");
    let get = |path: &str| -> Option<String> {
        let mut c = TcpStream::connect(&api).ok()?;
        c.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        write!(
            c,
            "GET {path} HTTP/1.1\r\nHost: {api}\r\nConnection: close\r\n\r\n"
        )
        .ok()?;
        let mut r = String::new();
        c.read_to_string(&mut r).ok()?;
        r.starts_with("HTTP/1.1 200")
            .then(|| r.split_once("\r\n\r\n").map(|x| x.1.to_string()))
            .flatten()
    };
    let t0 = Instant::now();
    while get("/-/ready").is_none() {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "prometheus not ready"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Prometheus applies new targets a few seconds after it is ready: wait until it has tried
    // the endpoint once (down: nothing listens yet).
    while !get("/api/v1/targets").is_some_and(|t| t.contains("\"health\":\"down\"")) {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "prometheus scrapes nothing"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = dir.join("gen.pcap");
    let o = Command::new(env!("CARGO_BIN_EXE_linerate"))
        .args(["gen", "-o"])
        .arg(&out)
        .args(["-c", "160000", "--rate", "80kpps", "--json"])
        .args(["--metrics", &format!("127.0.0.1:{mport}")])
        .args(["--metrics-linger", "2"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{text}");
    let summary: serde_json::Value = text
        .lines()
        .filter(|l| l.contains("\"type\":\"summary\""))
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no summary: {text}"));
    println!("gen summary: {summary}");
    // The last value Prometheus stored for the transmit counter (over the last minute: once
    // the endpoint is gone, a failed scrape marks the series stale for an instant query).
    let q = "/api/v1/query?query=last_over_time(linerate_packets_total%7Bjob%3D%22gen%22%2Cdir%3D%22tx%22%7D%5B1m%5D)";
    let body = get(q).expect("query");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let stored: f64 = v["data"]["result"][0]["value"][1]
        .as_str()
        .unwrap_or_else(|| panic!("{body}"))
        .parse()
        .unwrap();
    println!("prometheus stored linerate_packets_total = {stored}");
    assert_eq!(stored as u64, 160_000, "{body}");
    // And it watched the counter grow: it scraped during the run too.
    let r = get("/api/v1/query?query=count_over_time(linerate_packets_total%7Bjob%3D%22gen%22%2Cdir%3D%22tx%22%7D%5B1m%5D)")
        .expect("query");
    println!("samples stored: {r}");
    let v: serde_json::Value = serde_json::from_str(&r).unwrap();
    let n: u64 = v["data"]["result"][0]["value"][1]
        .as_str()
        .and_then(|x| x.parse().ok())
        .unwrap_or(0);
    assert!(n >= 2, "{r}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--metrics-textfile FILE` never follows a link planted at a predictable temporary name
/// (`FILE.tmp` was one): the link's target keeps its content, FILE gets the figures, and runs
/// writing the same FILE at once all succeed (each has its own temporary file).
#[test]
fn metrics_textfile_follows_no_planted_link_and_runs_do_not_collide() {
    let dir = tmp("metrics-textfile-link");
    let victim = dir.join("victim.txt");
    std::fs::write(&victim, "precious\n").unwrap();
    let file = dir.join("x.prom");
    let mut tmp_name = file.as_os_str().to_owned();
    tmp_name.push(".tmp");
    std::os::unix::fs::symlink(&victim, &tmp_name).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_linerate"))
        .args(["count", "-q", "-i"])
        .arg(sample())
        .arg("--metrics-textfile")
        .arg(&file)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    let s = samples(&std::fs::read_to_string(&file).unwrap());
    assert_eq!(sum_of(&s, "linerate_packets_total"), 2000);
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o644, "mode {mode:o}");
    // Eight runs on one FILE at once: every one exits 0 and no temporary file stays behind.
    let shared = dir.join("same.prom");
    let kids: Vec<Proc> = (0..8)
        .map(|_| {
            Proc(
                Command::new(env!("CARGO_BIN_EXE_linerate"))
                    .args(["count", "-q", "-i"])
                    .arg(sample())
                    .arg("--metrics-textfile")
                    .arg(&shared)
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap(),
            )
        })
        .collect();
    for mut k in kids {
        assert!(k.wait(Duration::from_secs(60)).success());
    }
    let s = samples(&std::fs::read_to_string(&shared).unwrap());
    assert_eq!(sum_of(&s, "linerate_packets_total"), 2000);
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp") && n != "x.prom.tmp")
        .collect();
    assert!(left.is_empty(), "{left:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Starts `count` on a live capture of loopback (only read: nothing is sent), stopped only by a
/// signal, with `--metrics` and the default 30 s linger; returns it with its standard error once
/// the endpoint is up. A live port's stop takes a poll interval: the window in which a second
/// signal used to be lost.
fn live_count() -> (Proc, BufReader<std::process::ChildStderr>) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_linerate"))
        .args([
            "count",
            "--json",
            "-i",
            "afpacket:lo",
            "--metrics",
            "127.0.0.1:0",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let err = BufReader::new(c.stderr.take().unwrap());
    std::thread::sleep(Duration::from_millis(1200));
    (Proc(c), err)
}

/// Two stop signals 10 ms apart (a double Ctrl-C, or `kill` twice) end a live run and skip the
/// linger; one signal stops the run and leaves the linger serving, and the next ends it at once.
#[test]
fn a_second_stop_signal_ends_the_metrics_linger_however_soon() {
    if !linerate::os::is_root() {
        linerate_test_support::skip("a live capture of loopback needs root");
        return;
    }
    let (mut p, _err) = live_count();
    let t0 = Instant::now();
    // The PID of the child we started, twice 10 ms apart (with no gap at all the kernel may
    // merge them into one: a signal already pending is not queued again).
    let _ = linerate::os::signal(p.0.id(), libc::SIGTERM);
    std::thread::sleep(Duration::from_millis(10));
    let _ = linerate::os::signal(p.0.id(), libc::SIGTERM);
    assert!(p.wait(Duration::from_secs(40)).success());
    assert!(t0.elapsed() < Duration::from_secs(4), "{:?}", t0.elapsed());

    let (mut p, mut err) = live_count();
    let _ = linerate::os::signal(p.0.id(), libc::SIGINT);
    let said = lines_until(&mut err, "--metrics-linger", &mut None);
    assert!(said.last().unwrap().contains("for 30 s"), "{said:?}");
    std::thread::sleep(Duration::from_millis(300));
    assert!(p.0.try_wait().unwrap().is_none(), "the linger serves");
    let t0 = Instant::now();
    let _ = linerate::os::signal(p.0.id(), libc::SIGINT);
    assert!(p.wait(Duration::from_secs(40)).success());
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
}

/// A --metrics-textfile that names a folder (an existing one, or a path ending in /) or another
/// file of the run (-w, -i) is refused at the start (exit 2), before any output: nothing runs,
/// the other file keeps its content.
#[test]
fn metrics_textfile_that_is_a_folder_or_another_file_is_refused_at_the_start() {
    let dir = tmp("metrics-textfile-paths");
    let folder = dir.join("d.prom");
    std::fs::create_dir_all(&folder).unwrap();
    let slash = format!("{}/", dir.display());
    let keep = dir.join("keep.csv");
    std::fs::write(&keep, "precious\n").unwrap();
    let keep_s = keep.to_str().unwrap().to_string();
    let dotted = format!("{}/./keep.csv", dir.display());
    let cases: Vec<Vec<String>> = vec![
        vec![
            "count".into(),
            "--metrics-textfile".into(),
            folder.to_str().unwrap().into(),
        ],
        vec!["count".into(), "--metrics-textfile".into(), slash],
        vec![
            "flows".into(),
            "-w".into(),
            keep_s.clone(),
            "--metrics-textfile".into(),
            dotted,
        ],
        vec![
            "count".into(),
            "-w".into(),
            keep_s.clone(),
            "--metrics-textfile".into(),
            keep_s,
        ],
    ];
    for c in cases {
        let o = Command::new(env!("CARGO_BIN_EXE_linerate"))
            .args(&c[..1])
            .args(["-q", "-i"])
            .arg(sample())
            .args(&c[1..])
            .output()
            .unwrap();
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{c:?}: {e}");
        assert!(e.contains("--metrics-textfile"), "{c:?}: {e}");
        assert!(!e.contains("Summary"), "{c:?}: ran: {e}");
        assert_eq!(
            std::fs::read_to_string(&keep).unwrap(),
            "precious\n",
            "{c:?}"
        );
        assert!(folder.is_dir());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// -q prints only the summary, but the default linger (not asked for) is still announced on
/// standard error when it starts; an explicit --metrics-linger stays quiet with -q.
#[test]
fn the_default_linger_is_announced_even_with_q() {
    let mut c = Command::new(env!("CARGO_BIN_EXE_linerate"))
        .args(["count", "-q", "-i"])
        .arg(sample())
        .args(["--metrics", "127.0.0.1:0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(c.stderr.take().unwrap());
    let mut p = Proc(c);
    let said = lines_until(&mut err, "--metrics-linger", &mut None);
    assert!(said.last().unwrap().contains("for 30 s"), "{said:?}");
    // The PID of the child we started.
    let _ = linerate::os::signal(p.0.id(), libc::SIGINT);
    assert!(p.wait(Duration::from_secs(5)).success());
    let o = Command::new(env!("CARGO_BIN_EXE_linerate"))
        .args(["count", "-q", "-i"])
        .arg(sample())
        .args(["--metrics", "127.0.0.1:0", "--metrics-linger", "0.2"])
        .output()
        .unwrap();
    assert!(o.status.success());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!e.contains("Metrics stay"), "{e}");
}

//! `--metrics ADDR` of count, flows, balance, fwd and gen, scraped over real HTTP while they
//! run: the same families and labels on every tool (`linerate_packets_total{port,dir}`,
//! `linerate_bytes_total{port,dir}`, `linerate_drops_total{port,dir,reason}`), and once the
//! traffic is over, the values the summary gives at the end. The receive tools run in a network
//! namespace fed by a veth (needs root: skips otherwise, fails instead under
//! LINERATE_REQUIRE_PRIV=1); gen's test writes a capture file and needs nothing.
#![deny(unsafe_code)]

use linerate_test_support::netns;

use linerate::mem::{Batch, Desc, Pool, PoolConfig};
use linerate::port::afpacket::AfPacket;
use linerate::port::{Port, PortOptions};
use netns::{NetnsPair, Side};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A parsed exposition: `name{labels}` → value, and the `# TYPE` of each family.
#[derive(Debug, Default)]
struct Scrape {
    samples: BTreeMap<String, f64>,
    types: BTreeMap<String, String>,
}

impl Scrape {
    fn parse(text: &str) -> Scrape {
        let mut s = Scrape::default();
        for l in text.lines() {
            if let Some(t) = l.strip_prefix("# TYPE ") {
                let (name, kind) = t.split_once(' ').expect("TYPE line");
                assert!(
                    s.types.insert(name.into(), kind.into()).is_none(),
                    "{name} typed twice:\n{text}"
                );
                continue;
            }
            if l.starts_with('#') || l.is_empty() {
                continue;
            }
            let (k, v) = l.rsplit_once(' ').unwrap_or_else(|| panic!("bad line {l}"));
            let v: f64 = v.parse().unwrap_or_else(|_| panic!("bad value in {l}"));
            let fam = k.split('{').next().unwrap();
            assert!(s.types.contains_key(fam), "{fam} has no TYPE:\n{text}");
            s.samples.insert(k.to_string(), v);
        }
        s
    }

    fn get(&self, key: &str) -> Option<f64> {
        self.samples.get(key).copied()
    }

    fn port(&self, fam: &str, port: &str, dir: &str) -> u64 {
        let k = format!("{fam}{{port=\"{port}\",dir=\"{dir}\"}}");
        self.get(&k)
            .unwrap_or_else(|| panic!("no {k} in {:#?}", self.samples)) as u64
    }

    /// Drops of a port in a direction, all reasons.
    fn drops(&self, port: &str, dir: &str) -> u64 {
        let p = format!("linerate_drops_total{{port=\"{port}\",dir=\"{dir}\",reason=");
        let v: Vec<f64> = self
            .samples
            .iter()
            .filter(|(k, _)| k.starts_with(&p))
            .map(|(_, v)| *v)
            .collect();
        assert_eq!(
            v.len(),
            8,
            "every reason of {port} {dir}: {:#?}",
            self.samples
        );
        v.iter().sum::<f64>() as u64
    }

    fn tool(&self) -> String {
        let k = self
            .samples
            .keys()
            .find(|k| k.starts_with("linerate_info{"))
            .expect("linerate_info");
        k.split("tool=\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap()
            .to_string()
    }
}

/// GET /metrics on `addr` from the current network namespace.
fn get(addr: &str) -> String {
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
    let (head, body) = r.split_once("\r\n\r\n").expect("body");
    assert!(head.to_ascii_lowercase().contains("text/plain"), "{head}");
    body.to_string()
}

/// A running tool: its process, standard output lines and standard error, collected on
/// threads, and the metrics address it printed.
struct Tool {
    child: Child,
    out: Arc<Mutex<Vec<String>>>,
    err: Arc<Mutex<Vec<String>>>,
    addr: String,
}

fn collect(r: impl Read + Send + 'static) -> Arc<Mutex<Vec<String>>> {
    let v = Arc::new(Mutex::new(Vec::new()));
    let w = v.clone();
    std::thread::spawn(move || {
        for l in BufReader::new(r).lines().map_while(Result::ok) {
            w.lock().unwrap().push(l);
        }
    });
    v
}

impl Tool {
    /// Runs `linerate ARGS` (in namespace `ns` if given) and waits for "Metrics on http://…".
    fn spawn(ns: Option<&str>, args: &[&str]) -> Tool {
        let mut c = match ns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, env!("CARGO_BIN_EXE_linerate")]);
                c
            }
            None => Command::new(env!("CARGO_BIN_EXE_linerate")),
        };
        let mut child = c
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn linerate");
        let out = collect(child.stdout.take().unwrap());
        let err = collect(child.stderr.take().unwrap());
        let deadline = Instant::now() + Duration::from_secs(10);
        let addr = loop {
            // "Metrics on http://ADDR/metrics", or a JSON start line's "metrics" (flows).
            let found = err.lock().unwrap().iter().find_map(|l| {
                l.split("Metrics on http://")
                    .nth(1)
                    .map(|r| r.trim_end_matches("/metrics").to_string())
                    .or_else(|| {
                        let j: serde_json::Value = serde_json::from_str(l).ok()?;
                        Some(j["metrics"].as_str()?.to_string())
                    })
            });
            if let Some(a) = found {
                break a;
            }
            if Instant::now() > deadline || child.try_wait().unwrap().is_some() {
                let _ = child.kill();
                panic!("{args:?}: no metrics address: {:?}", err.lock().unwrap());
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        Tool {
            child,
            out,
            err,
            addr,
        }
    }

    /// Waits for the end (at most 30 s) and returns the JSON summary line (on standard output
    /// or standard error).
    fn summary(mut self) -> serde_json::Value {
        let deadline = Instant::now() + Duration::from_secs(30);
        let st = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("did not end: {:?}", self.err.lock().unwrap());
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        // The reader threads finish at end of file.
        std::thread::sleep(Duration::from_millis(200));
        let err = self.err.lock().unwrap().clone();
        assert!(st.success(), "{st}: {err:?}");
        let all: Vec<String> = self
            .out
            .lock()
            .unwrap()
            .iter()
            .chain(&err)
            .cloned()
            .collect();
        all.iter()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|j| j["type"] == "summary")
            .unwrap_or_else(|| panic!("no summary: {all:?}"))
    }

    fn term(&self) {
        // SAFETY-free: kill(1) on the child we spawned (ip netns exec execs linerate in place).
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
    }
}

/// Scrapes `addr` in namespace `ns` until `ok` holds for the parsed text (at most 10 s).
fn scrape_until(pair: &NetnsPair, addr: &str, ok: impl Fn(&Scrape) -> bool) -> Scrape {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let s = Scrape::parse(&pair.run_in(Side::B, || get(addr)));
        if ok(&s) {
            return s;
        }
        assert!(Instant::now() < deadline, "never reached: {:#?}", s.samples);
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn frame(p: &NetnsPair, seq: u32) -> Vec<u8> {
    let payload = 18 + (seq as usize * 7) % 300;
    let mut f = Vec::new();
    f.extend_from_slice(&p.mac_b);
    f.extend_from_slice(&p.mac_a);
    f.extend_from_slice(&[0x08, 0x00]);
    let ip_len = (20 + 8 + payload) as u16;
    f.extend_from_slice(&[
        0x45,
        0,
        (ip_len >> 8) as u8,
        ip_len as u8,
        0,
        0,
        0,
        0,
        64,
        17,
        0,
        0,
    ]);
    f.extend_from_slice(&p.ip_a);
    f.extend_from_slice(&p.ip_b);
    let sport = 1000 + (seq % 16) as u16;
    f.extend_from_slice(&sport.to_be_bytes());
    f.extend_from_slice(&9u16.to_be_bytes());
    f.extend_from_slice(&((8 + payload) as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend((0..payload).map(|i| (seq as usize + i) as u8));
    f
}

/// Sends `n` UDP frames from namespace A to B; returns their bytes.
fn send(pair: &NetnsPair, n: u32) -> u64 {
    pair.run_in(Side::A, || {
        let mut tx = AfPacket::open("vA", &PortOptions::default()).expect("open vA");
        let pool = Arc::new(Pool::new(&PoolConfig::default()).unwrap());
        let mut b = Batch::with_pool(&pool);
        let deadline = Instant::now() + Duration::from_secs(10);
        let (mut seq, mut bytes) = (0u32, 0u64);
        while seq < n && Instant::now() < deadline {
            while !b.is_full() && seq < n {
                let f = frame(pair, seq);
                let mut fr = b.alloc().unwrap();
                fr.buf()[..f.len()].copy_from_slice(&f);
                fr.push(Desc {
                    len: f.len() as u32,
                    wire_len: f.len() as u32,
                    ..Default::default()
                });
                bytes += f.len() as u64;
                seq += 1;
            }
            while !b.is_empty() && Instant::now() < deadline {
                if tx.tx(&mut b).unwrap() == 0 {
                    std::thread::sleep(Duration::from_micros(100));
                }
            }
            std::thread::sleep(Duration::from_micros(300));
        }
        tx.flush().unwrap();
        assert_eq!(seq, n, "sent in time");
        bytes
    })
}

const N: u32 = 3000;

/// count, flows and balance on one side of a veth at once, then fwd bouncing: each scraped
/// live, its figures equal to its summary's, the same families on all.
#[test]
fn every_receive_tool_serves_the_same_families_equal_to_its_summary() {
    if !netns::require_priv() {
        return;
    }
    let pair = NetnsPair::new().expect("netns pair");
    pair.no_ipv6().expect("no ipv6");
    let ns = pair.ns(Side::B).to_string();
    let m = ["--metrics", "127.0.0.1:0", "--metrics-linger", "0"];
    let f = ["-f", "udp dst port 9"];
    let port = "afpacket:vB";
    let count = Tool::spawn(
        Some(&ns),
        &[&["count", "-i", port, "-t", "6", "--json"][..], &f, &m].concat(),
    );
    let flows = Tool::spawn(
        Some(&ns),
        &[&["flows", "-i", port, "--threads", "2", "--json"][..], &m].concat(),
    );
    let cluster = (std::process::id() % 40_000 + 20_000).to_string();
    let balance = Tool::spawn(
        Some(&ns),
        &[
            &[
                "balance",
                "-i",
                port,
                "-c",
                &cluster,
                "-n",
                "2",
                "--threads",
            ][..],
            &["-t", "6", "--json"],
            &f,
            &m,
        ]
        .concat(),
    );
    // Before any packet: the families are there, at 0.
    for t in [&count, &flows, &balance] {
        let s = Scrape::parse(&pair.run_in(Side::B, || get(&t.addr)));
        assert_eq!(s.port("linerate_packets_total", port, "rx"), 0, "{s:#?}");
        assert_eq!(s.types["linerate_packets_total"], "counter");
        assert_eq!(s.types["linerate_bytes_total"], "counter");
    }
    let bytes = send(&pair, N);
    // Live, every tool saw them all (the traffic is over).
    let live: Vec<Scrape> = [&count, &flows, &balance]
        .iter()
        .map(|t| {
            scrape_until(&pair, &t.addr, |s| {
                s.port("linerate_packets_total", port, "rx") >= N as u64
            })
        })
        .collect();
    for (s, tool) in live.iter().zip(["count", "flows", "balance"]) {
        assert_eq!(s.tool(), tool);
        assert_eq!(
            s.port("linerate_packets_total", port, "rx"),
            N as u64,
            "{tool}"
        );
        assert_eq!(s.port("linerate_bytes_total", port, "rx"), bytes, "{tool}");
    }
    flows.term();
    let cs = count.summary();
    assert_eq!(cs["pkts"], N, "{cs}");
    assert_eq!(cs["bytes"], bytes, "{cs}");
    for (reason, v) in cs["drops_by_reason"].as_object().unwrap() {
        let k = format!("linerate_drops_total{{port=\"{port}\",dir=\"rx\",reason=\"{reason}\"}}");
        assert_eq!(live[0].get(&k), v.as_f64(), "{k}: {cs}");
    }
    let fs = flows.summary();
    assert_eq!(fs["packets"], N, "{fs}");
    assert_eq!(fs["bytes"], bytes, "{fs}");
    let bs = balance.summary();
    assert_eq!(bs["rx"], N, "{bs}");
    assert_eq!(bs["rx_bytes"], bytes, "{bs}");
    // balance: each queue a port the master sends to, its deliveries and drops as the summary
    // says, and the cluster's own families beside the common ones.
    let b = &live[2];
    let mut delivered = 0;
    for q in 0..2 {
        let qp = format!("cluster:{cluster}@{q}");
        let want = &bs["queues"][q];
        assert_eq!(
            b.port("linerate_packets_total", &qp, "tx"),
            want["delivered"].as_u64().unwrap(),
            "{bs}"
        );
        delivered += b.port("linerate_packets_total", &qp, "tx");
        assert_eq!(b.drops(&qp, "tx"), 0, "{bs}");
    }
    assert_eq!(delivered, N as u64);
    assert!(
        b.get(&format!(
            "linerate_cluster_rx_packets_total{{cluster=\"{cluster}\"}}"
        )) == Some(N as f64),
        "{b:#?}"
    );

    // fwd bouncing on vB: what it received and sent, live and in its summary.
    let fwd = Tool::spawn(
        Some(&ns),
        &[
            &[
                "fwd", "-i", port, "-o", port, "-t", "4", "--period", "1", "--json",
            ][..],
            &m,
        ]
        .concat(),
    );
    let bytes = send(&pair, N);
    let s = scrape_until(&pair, &fwd.addr, |s| {
        s.port("linerate_packets_total", port, "rx") >= N as u64
            && s.port("linerate_packets_total", port, "tx") + s.drops(port, "tx") >= N as u64
    });
    assert_eq!(s.tool(), "fwd");
    let fs = fwd.summary();
    let p = &fs["ports"][0];
    assert_eq!(
        s.port("linerate_packets_total", port, "rx"),
        p["received"].as_u64().unwrap()
    );
    assert_eq!(
        s.port("linerate_packets_total", port, "tx"),
        p["sent"].as_u64().unwrap()
    );
    assert_eq!(
        s.drops(port, "rx") + s.drops(port, "tx"),
        p["dropped"].as_u64().unwrap() + p["filtered"].as_u64().unwrap(),
        "{fs}"
    );
    // Without a filter, fwd receives the kernel's own packets too: at least ours.
    assert!(p["received"].as_u64().unwrap() >= N as u64, "{fs}");
    assert!(s.port("linerate_bytes_total", port, "rx") >= bytes);
}

/// gen writing a capture file at an asked rate: the transmit families, the asked and achieved
/// rate as gauges, scraped while it runs; its summary's packets at least what was scraped.
#[test]
fn gen_serves_tx_counters_and_asked_and_achieved_rates() {
    let dir = std::env::temp_dir().join(format!("linerate-metrics-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("gen.pcap");
    let out = out.to_str().unwrap();
    let g = Tool::spawn(
        None,
        &[
            "gen",
            "-o",
            out,
            "--rate",
            "2000pps",
            "-t",
            "3",
            "--json",
            "--metrics",
            "127.0.0.1:0",
            "--metrics-linger",
            "0",
        ],
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let s = loop {
        let s = Scrape::parse(&get(&g.addr));
        if s.get("linerate_gen_rate_achieved_pps").unwrap_or(0.0) > 0.0 {
            break s;
        }
        assert!(Instant::now() < deadline, "{s:#?}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(s.tool(), "gen");
    assert_eq!(s.get("linerate_gen_rate_asked_pps"), Some(2000.0));
    assert_eq!(s.types["linerate_gen_rate_achieved_pps"], "gauge");
    let live = s.port("linerate_packets_total", out, "tx");
    assert!(live > 0, "{s:#?}");
    assert_eq!(s.drops(out, "tx"), 0);
    let sum = g.summary();
    assert!(sum["pkts"].as_u64().unwrap() >= live, "{sum}");
    let _ = std::fs::remove_dir_all(&dir);
}

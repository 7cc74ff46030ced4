//! Every `examples/*.lua` runs: `linerate gen --script` builds a few hundred packets of each
//! into a pcap, and tshark (Wireshark's dissectors, not linerate's parser) finds in them what
//! the script's text says it builds. A new example without its check here fails the test.
#![deny(unsafe_code)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_linerate")
}

fn examples() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

/// The packets of `pcap` as tshark sees them: one row per packet, one column per field.
fn tshark(pcap: &str, fields: &[&str]) -> Vec<Vec<String>> {
    let mut args = vec!["-r", pcap, "-T", "fields", "-E", "separator=|"];
    for f in fields {
        args.extend(["-e", f]);
    }
    let o = Command::new("tshark")
        .args(&args)
        .output()
        .expect("tshark (scripts/setup.sh --tests installs it)");
    assert!(
        o.status.success(),
        "tshark {pcap}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| l.split('|').map(str::to_string).collect())
        .collect()
}

/// How many packets have each value of column `col`.
fn histogram(rows: &[Vec<String>], col: usize) -> BTreeMap<String, usize> {
    let mut h = BTreeMap::new();
    for r in rows {
        *h.entry(r[col].clone()).or_insert(0) += 1;
    }
    h
}

/// Every row has `want` in column `col`.
fn all_are(name: &str, rows: &[Vec<String>], col: usize, want: &str) {
    let h = histogram(rows, col);
    assert_eq!(
        h.keys().collect::<Vec<_>>(),
        vec![want],
        "{name}: column {col}: {h:?}"
    );
}

/// Runs `gen --script` on example `name` for `count` packets into a pcap (extra flags after);
/// returns the file.
fn generate(name: &str, count: u32, extra: &[&str], dir: &std::path::Path) -> String {
    let script = examples().join(name).display().to_string();
    let pcap = dir.join(format!("{name}.pcap")).display().to_string();
    let c = count.to_string();
    let mut args = vec!["gen", "--script", &script, "-o", &pcap, "-c", &c, "-q"];
    args.extend_from_slice(extra);
    let o = Command::new(bin()).args(&args).output().unwrap();
    assert!(
        o.status.success(),
        "{name}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    pcap
}

#[test]
fn every_lua_example_builds_what_its_text_says() {
    let dir = std::env::temp_dir().join(format!("lr-lua-examples-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut names: Vec<String> = std::fs::read_dir(examples())
        .unwrap()
        .filter_map(|e| {
            let n = e.ok()?.file_name().to_string_lossy().into_owned();
            n.ends_with(".lua").then_some(n)
        })
        .collect();
    names.sort();
    assert!(names.len() >= 5, "{names:?}");
    for name in &names {
        let n = 512usize;
        match name.as_str() {
            "udp_flows.lua" => {
                let p = generate(name, n as u32, &[], &dir);
                let rows = tshark(
                    &p,
                    &[
                        "ip.dst",
                        "udp.dstport",
                        "ip.src",
                        "udp.srcport",
                        "frame.len",
                    ],
                );
                assert_eq!(rows.len(), n, "{name}");
                all_are(name, &rows, 0, "198.18.0.2");
                all_are(name, &rows, 1, "9");
                all_are(name, &rows, 4, "60");
                // 256 source addresses, one per packet in turn; ports 1024.. one per packet.
                assert_eq!(histogram(&rows, 2).len(), 256, "{name}");
                assert_eq!(rows[0][2], "198.18.0.10", "{name}");
                assert_eq!(rows[255][2], "198.18.1.9", "{name}");
                assert_eq!(histogram(&rows, 3).len(), n, "{name}");
            }
            "tcp_syn.lua" => {
                let p = generate(name, n as u32, &[], &dir);
                let rows = tshark(&p, &["ip.dst", "tcp.dstport", "tcp.flags", "ip.src"]);
                assert_eq!(rows.len(), n, "{name}");
                all_are(name, &rows, 0, "198.18.0.2");
                all_are(name, &rows, 1, "80");
                all_are(name, &rows, 2, "0x0002");
                assert!(rows.iter().all(|r| r[3].starts_with("198.18.")), "{name}");
                assert!(histogram(&rows, 3).len() > n / 2, "{name}: random sources");
            }
            "ipv6_burst.lua" => {
                let p = generate(name, n as u32, &[], &dir);
                let rows = tshark(&p, &["ipv6.src", "ipv6.dst", "frame.len", "data.data"]);
                assert_eq!(rows.len(), n, "{name}");
                all_are(name, &rows, 0, "2001:db8::1");
                all_are(name, &rows, 2, "124");
                assert_eq!(histogram(&rows, 1).len(), n, "{name}: one destination each");
                assert!(
                    rows.iter()
                        .enumerate()
                        .all(|(k, r)| r[3].contains(&format!("feedf00d{k:08x}"))),
                    "{name}: the marker and the packet's number after the probe"
                );
            }
            "l3_load_latency.lua" => {
                let p = generate(name, n as u32, &[], &dir);
                let rows = tshark(
                    &p,
                    &[
                        "ip.src",
                        "ip.dst",
                        "udp.srcport",
                        "udp.dstport",
                        "frame.len",
                    ],
                );
                assert_eq!(rows.len(), n, "{name}");
                all_are(name, &rows, 0, "10.0.0.10");
                all_are(name, &rows, 1, "10.1.0.10");
                all_are(name, &rows, 3, "1234");
                all_are(name, &rows, 4, "124");
                // Source port 1234 + a counter wrapping over 4 flows, packet after packet.
                let want: Vec<String> = (0..n).map(|k| (1234 + k % 4).to_string()).collect();
                let got: Vec<String> = rows.iter().map(|r| r[2].clone()).collect();
                assert_eq!(got, want, "{name}");
            }
            "qos_streams.lua" => {
                let p = generate(name, n as u32, &["--streams", "16"], &dir);
                let rows = tshark(
                    &p,
                    &[
                        "eth.dst",
                        "ip.dst",
                        "udp.srcport",
                        "udp.dstport",
                        "frame.len",
                        "ip.src",
                    ],
                );
                assert_eq!(rows.len(), n, "{name}");
                all_are(name, &rows, 0, "10:11:12:13:14:15");
                all_are(name, &rows, 1, "192.168.1.1");
                all_are(name, &rows, 2, "1234");
                all_are(name, &rows, 4, "124");
                // One stream in 16 is the foreground (port 43): 100 of 1600 Mbit/s.
                let ports = histogram(&rows, 3);
                assert_eq!(ports.get("43"), Some(&(n / 16)), "{name}: {ports:?}");
                assert_eq!(ports.get("42"), Some(&(n - n / 16)), "{name}: {ports:?}");
                assert!(
                    rows.iter()
                        .all(|r| r[5].starts_with("10.0.0.") && r[5] != "10.0.0.0"),
                    "{name}"
                );
                assert!(histogram(&rows, 5).len() > 100, "{name}: random sources");
            }
            other => panic!(
                "examples/{other}: no check of what it builds: add one to {}",
                file!()
            ),
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

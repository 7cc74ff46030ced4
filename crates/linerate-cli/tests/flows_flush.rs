//! `--ipfix-flush` on an input that stays open: a capture read from a pipe (`-i -`) whose
//! packets move time on enough to make a flow's record due, then nothing more for a while.
//! The record reaches the `-w` file, and an IPFIX collector, within the flush interval while
//! the pipe is still open (it used to wait in a buffer or a partly filled message until the
//! next record or the end). Runs anywhere (loopback only).
#![deny(unsafe_code)]

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A classic pcap header and two one-packet UDP flows 100 s apart (packet time): the first is
/// due (idle 60 s) once the second is read.
fn capture() -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    f.extend_from_slice(&2u16.to_le_bytes());
    f.extend_from_slice(&4u16.to_le_bytes());
    for v in [0u32, 0, 65535, 1] {
        f.extend_from_slice(&v.to_le_bytes());
    }
    for (sport, ts) in [(1000u16, 1_700_000_000u32), (2000, 1_700_000_100)] {
        let mut p = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 8, 0];
        p.extend_from_slice(&[0x45, 0, 0, 36, 0, 1, 0x40, 0, 64, 17, 0, 0]);
        p.extend_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
        for v in [sport, 53, 16, 0] {
            p.extend_from_slice(&v.to_be_bytes());
        }
        p.extend_from_slice(&[0xaa; 8]);
        for v in [ts, 0, p.len() as u32, p.len() as u32] {
            f.extend_from_slice(&v.to_le_bytes());
        }
        f.extend_from_slice(&p);
    }
    f
}

#[test]
fn a_due_record_leaves_within_the_flush_while_the_input_stays_open() {
    let dir = std::env::temp_dir().join(format!("linerate-flush-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let csv = dir.join("r.csv");
    let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    rx.set_read_timeout(Some(Duration::from_millis(20)))
        .unwrap();
    let port = rx.local_addr().unwrap().port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_linerate"))
        .args(["flows", "-q", "-i", "-", "-w"])
        .arg(&csv)
        .args(["--fields", "sport,reason", "--ipfix"])
        .arg(format!("127.0.0.1:{port}"))
        .args(["--ipfix-flush", "500ms"])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(&capture()).unwrap();
    stdin.flush().unwrap();
    let t0 = Instant::now();
    let (mut file_at, mut ipfix_at) = (None, None);
    let mut buf = [0u8; 2048];
    while t0.elapsed() < Duration::from_secs(5) && (file_at.is_none() || ipfix_at.is_none()) {
        if file_at.is_none() && std::fs::read_to_string(&csv).is_ok_and(|s| s.contains("1000,idle"))
        {
            file_at = Some(t0.elapsed());
        }
        if ipfix_at.is_none() && rx.recv(&mut buf).is_ok() {
            ipfix_at = Some(t0.elapsed());
        }
    }
    // The pipe is still open: the second flow has not ended.
    assert!(child.try_wait().unwrap().is_none());
    drop(stdin);
    assert!(child.wait().unwrap().success());
    println!("record in the -w file after {file_at:?}, IPFIX message after {ipfix_at:?}");
    let limit = Duration::from_millis(1500);
    assert!(file_at.is_some_and(|t| t < limit), "{file_at:?}");
    assert!(ipfix_at.is_some_and(|t| t < limit), "{ipfix_at:?}");
    let text = std::fs::read_to_string(&csv).unwrap();
    assert!(text.contains("2000,forced"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

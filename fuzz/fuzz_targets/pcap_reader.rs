//! Arbitrary bytes as a capture file: the reader must never panic or hang, and must end with a
//! clean end of file or a format error that names an offset inside the input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use linerate::mem::Batch;
use linerate::port::pcap::{PcapPort, PcapReader};
use linerate::port::{Port, PortError, PortOptions};
use std::io::Cursor;

fn check(e: &PortError, len: usize) {
    match e {
        PortError::Format { offset, .. } => assert!(*offset <= len as u64),
        other => panic!("unexpected error: {other}"),
    }
}

fuzz_target!(|data: &[u8]| {
    // Through the reader: every record's bytes lie inside the input.
    if let Ok(mut r) = PcapReader::new(Cursor::new(data), "fuzz") {
        let mut n = 0usize;
        loop {
            match r.next_packet() {
                Ok(Some(rec)) => {
                    assert!(rec.data.len() <= data.len());
                    assert!(rec.offset < data.len() as u64);
                    n += 1;
                    assert!(n <= data.len(), "more packets than bytes");
                }
                Ok(None) => break,
                Err(e) => {
                    check(&e, data.len());
                    break;
                }
            }
        }
        assert!(r.is_done());
    }
    // Through the port, with a small pool.
    let opts = PortOptions {
        frames: 128,
        ..Default::default()
    };
    match PcapPort::from_reader("fuzz", Box::new(Cursor::new(data.to_vec())), &opts) {
        Ok(mut p) => {
            let mut b = Batch::new();
            let mut calls = 0usize;
            while !p.is_finished() {
                calls += 1;
                assert!(calls <= data.len() + 2, "port does not finish");
                match p.rx(&mut b) {
                    Ok(k) => {
                        assert_eq!(k, b.len());
                        for x in b.iter() {
                            assert!(x.desc.len <= x.desc.wire_len);
                        }
                        b.clear();
                    }
                    Err(e) => check(&e, data.len()),
                }
            }
        }
        Err(e) => check(&e, data.len()),
    }
});

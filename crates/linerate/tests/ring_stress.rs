//! Moves 100 million descriptors between two threads through one SPSC ring, in bursts of varying
//! size, and checks that none is lost, duplicated or reordered.
#![deny(unsafe_code)]

use linerate::mem::Desc;
use linerate::ring::ring;

#[test]
fn hundred_million_descriptors_in_order() {
    const TOTAL: u64 = 100_000_000;
    let (mut p, mut c) = ring::<Desc>(1024);
    let producer = std::thread::spawn(move || {
        let mut next = 0u64;
        let mut buf = [Desc::default(); 64];
        let mut burst = 1usize;
        while next < TOTAL {
            let n = burst.min((TOTAL - next) as usize);
            for (i, d) in buf[..n].iter_mut().enumerate() {
                d.addr = next + i as u64;
                d.len = (next + i as u64) as u32;
            }
            let sent = if burst.is_multiple_of(7) {
                // bulk: all or nothing
                if p.push_bulk(&buf[..n]) {
                    n
                } else {
                    0
                }
            } else {
                p.push_burst(&buf[..n])
            };
            next += sent as u64;
            if sent == 0 {
                std::hint::spin_loop();
            }
            burst = burst % 64 + 1;
        }
    });
    let mut expect = 0u64;
    let mut buf = [Desc::default(); 64];
    let mut want = 64usize;
    while expect < TOTAL {
        let n = c.pop_burst(&mut buf[..want]);
        for d in &buf[..n] {
            assert_eq!(
                d.addr, expect,
                "descriptor out of order, lost or duplicated"
            );
            assert_eq!(d.len, expect as u32);
            expect += 1;
        }
        if n == 0 {
            std::hint::spin_loop();
        }
        want = if want == 1 { 64 } else { want - 1 };
    }
    producer.join().expect("producer");
    assert_eq!(expect, TOTAL);
    assert_eq!(c.pop_burst(&mut buf), 0, "nothing more than was sent");
}

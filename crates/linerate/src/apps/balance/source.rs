//! A built-in traffic source for `linerate demo` and tests: 60-byte IPv4/UDP frames (64 B on
//! the wire with the CRC) with rotating addresses and ports, sent into a port (a `mem:` wire).
//!
//! The frames of all flows are built once; sending a packet takes a frame and copies its flow's
//! 60 bytes into it (a few nanoseconds), so the figures measure what comes after the source, and
//! consecutive packets carry consecutive flows.

use crate::apps::gen::sched::{CountPacer, OnStall};
use crate::mem::{Batch, Desc, Pool, PoolConfig, BATCH};
use crate::port::{Port, PortError, PortStats};
use crate::time::{Clock, MonoClock};
use crate::wire::emit::{EthernetRepr, Ipv4Repr, UdpRepr};
use crate::wire::{ethertype, proto};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Bytes of a generated frame without the CRC.
pub const FRAME_LEN: usize = 60;

/// UDP payload bytes of a generated frame (zeros; the UDP checksum is left 0, "none").
const PAYLOAD: usize = FRAME_LEN - 14 - Ipv4Repr::HEADER_LEN - UdpRepr::HEADER_LEN;

/// Frame `i` of `flows`: UDP from 10.a.b.c:(1024 + i % 40000) to 192.168.x.y:53, where the
/// addresses rotate with `i` (source over all flows, destination over 251 hosts).
pub fn frame(i: u32, flows: u32) -> [u8; FRAME_LEN] {
    let i = i % flows.max(1);
    let mut f = [0u8; FRAME_LEN];
    let ip = Ipv4Repr::new(
        [10, (i >> 16) as u8, (i >> 8) as u8, i as u8],
        [192, 168, (i % 7) as u8, (1 + i % 251) as u8],
        proto::UDP,
        (UdpRepr::HEADER_LEN + PAYLOAD) as u16,
    );
    let udp = UdpRepr::new((1024 + i % 40000) as u16, 53, PAYLOAD as u16);
    // The sizes are constants that fit FRAME_LEN, so this cannot fail (the tests build frames).
    let built = EthernetRepr::new(
        [0x02, 0, 0, 0, 0, 0x02],
        [0x02, 0, 0, 0, 0, 0x01],
        ethertype::IPV4,
    )
    .emit(&mut f)
    .and_then(|l3| ip.emit(&mut f[l3..]).map(|n| l3 + n))
    .and_then(|l4| udp.emit(&mut f[l4..]));
    debug_assert!(built.is_ok(), "{built:?}");
    f
}

/// Sends frames of `flows` rotating flows into `port` until `limit` packets went out or `stop` is set; waits
/// (never drops) when the port is full. Returns the number sent.
pub fn generate(port: &mut dyn Port, flows: u32, limit: Option<u64>, stop: &AtomicBool) -> u64 {
    let templates: Vec<[u8; FRAME_LEN]> = (0..flows.max(1)).map(|i| frame(i, flows)).collect();
    let mut next = 0usize;
    let Some(pool) = port.pool().cloned() else {
        return 0;
    };
    let mut b = Batch::with_pool(&pool);
    let mut sent = 0u64;
    let mut spins = 0u32;
    while !stop.load(Ordering::Relaxed) {
        let want = limit.map_or(u64::MAX, |l| l - sent);
        if want == 0 && b.is_empty() {
            break;
        }
        b.set_limit(want.clamp(1, 64) as usize);
        while !b.is_full() && (b.len() as u64) < want {
            let Some(mut f) = b.alloc() else { break };
            if let Some(d) = f.buf().get_mut(..FRAME_LEN) {
                d.copy_from_slice(&templates[next]);
            }
            next = (next + 1) % templates.len();
            f.push(Desc {
                len: FRAME_LEN as u32,
                wire_len: FRAME_LEN as u32 + 4,
                ..Default::default()
            });
        }
        // A full wire drops what it cannot take (counted as its tx ring_full drops, like a NIC
        // whose ring overflows): back off when that happens.
        let before = port.stats().tx_drops.total();
        let starved = b.is_empty();
        let n = match port.tx(&mut b) {
            Ok(n) => n,
            Err(_) => break,
        };
        sent += n as u64;
        if port.stats().tx_drops.total() > before {
            spins += 1;
            std::thread::sleep(std::time::Duration::from_micros(10 * spins.min(10) as u64));
        } else {
            spins = 0;
            if starved {
                // No free frame (a cluster's input wire whose frames are all in flight, a
                // port's frames all in its rings): let whoever gives them back run.
                std::thread::yield_now();
            }
        }
    }
    sent
}

/// A source port: packets of rotating flows from its own pool, as fast as they are asked for (no
/// thread); finite when given a limit.
pub struct SourcePort {
    pool: Arc<Pool>,
    limit: Option<u64>,
    sent: u64,
    stats: PortStats,
    flows: Vec<[u8; FRAME_LEN]>,
    next: usize,
    /// Packets per second, the clock, what to do after a stall, and the schedule (from the
    /// first packet).
    rate: Option<f64>,
    clock: Arc<dyn Clock>,
    on_stall: OnStall,
    pacer: Option<CountPacer>,
}

impl SourcePort {
    /// A source of `flows` rotating flows, `limit` packets (None: endless).
    pub fn new(flows: u32, limit: Option<u64>) -> Result<SourcePort, PortError> {
        let pool = Arc::new(Pool::new(&PoolConfig {
            frames: 8192,
            ..Default::default()
        })?);
        Ok(SourcePort {
            pool,
            limit,
            sent: 0,
            stats: PortStats::default(),
            flows: (0..flows.max(1)).map(|i| frame(i, flows)).collect(),
            next: 0,
            rate: None,
            clock: Arc::new(MonoClock),
            on_stall: OnStall::default(),
            pacer: None,
        })
    }

    /// Paces the source at `rate` (`Pps`, `Bps` counted as on the wire with preamble and gap:
    /// 84 bytes per 64-byte frame, or `Percent` of 10 GbE, 14.88 Mpps). The clock is read once
    /// per batch; no more than the time elapsed allows is handed out. When the reader was away
    /// (the master stopped, the CPU taken), the owed packets are handed out within the bounds
    /// of `gen`'s catch-up ([`OnStall`], [`CountPacer`]: by default at most eight times the rate, at
    /// most a batch of 64 at once, and at most one second owed), so the mean rate holds
    /// without a burst.
    pub fn with_rate(mut self, rate: Option<crate::units::Rate>) -> SourcePort {
        self.rate = rate.map(SourcePort::pps_of);
        self
    }

    /// The packets per second `rate` asks of a source (its 64 B frames take 84 B on the wire,
    /// a percentage is of 10 GbE).
    pub fn pps_of(rate: crate::units::Rate) -> f64 {
        use crate::units::Rate;
        match rate {
            Rate::Pps(p) => p,
            Rate::Bps(b) => b / (84.0 * 8.0),
            Rate::Percent(x) => 10e9 / (84.0 * 8.0) * x / 100.0,
        }
    }

    /// Reads time from `clock` (default: the monotonic clock).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> SourcePort {
        self.clock = clock;
        self
    }

    /// What a paced source does after a stall (default: catch up within bounds).
    pub fn with_on_stall(mut self, on: OnStall) -> SourcePort {
        self.on_stall = on;
        self
    }
}

impl Port for SourcePort {
    fn name(&self) -> &str {
        "source"
    }

    #[inline]
    fn rx(&mut self, batch: &mut Batch) -> Result<usize, PortError> {
        if !batch.is_lent() {
            batch.bind(&self.pool);
        }
        let mut want = self.limit.map_or(u64::MAX, |l| l - self.sent);
        let mut now = 0;
        if let Some(r) = self.rate {
            now = self.clock.now_ns();
            let on = self.on_stall;
            let p = self
                .pacer
                .get_or_insert_with(|| CountPacer::new(r, now, on, BATCH as u64));
            want = want.min(p.allowed(now));
            if want == 0 {
                return Ok(0);
            }
        }
        let mut n = 0;
        while !batch.is_full() && (n as u64) < want {
            let Some(mut f) = batch.alloc() else { break };
            if let Some(d) = f.buf().get_mut(..FRAME_LEN) {
                d.copy_from_slice(&self.flows[self.next]);
            }
            self.next += 1;
            if self.next == self.flows.len() {
                self.next = 0;
            }
            f.push(Desc {
                len: FRAME_LEN as u32,
                wire_len: FRAME_LEN as u32 + 4,
                ..Default::default()
            });
            n += 1;
        }
        self.sent += n as u64;
        if let Some(p) = &mut self.pacer {
            p.took(n as u64, now);
        }
        self.stats.rx_packets += n as u64;
        self.stats.rx_bytes += n as u64 * (FRAME_LEN as u64 + 4);
        Ok(n)
    }

    fn tx(&mut self, _batch: &mut Batch) -> Result<usize, PortError> {
        Err(PortError::Unsupported {
            port: "source".into(),
            op: "transmit",
        })
    }

    fn stats(&mut self) -> PortStats {
        self.stats
    }

    fn is_finished(&self) -> bool {
        self.limit.is_some_and(|l| self.sent >= l)
    }

    fn pool(&self) -> Option<&Arc<Pool>> {
        Some(&self.pool)
    }

    fn fills_lent_frames(&self) -> bool {
        true
    }

    /// Each frame is a copy of a template, into whatever frame the batch hands out.
    fn fills_lent_frames_of_any_pool(&self) -> bool {
        true
    }

    /// Every packet is [`FRAME_LEN`] bytes.
    fn max_rx_packet(&self) -> Option<usize> {
        Some(FRAME_LEN)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn frames_are_valid_ipv4_udp_and_rotate() {
        let a = frame(1, 1000);
        let b = frame(2, 1000);
        assert_eq!(&a[12..14], &[0x08, 0x00]);
        assert_eq!(a[23], 17);
        assert_ne!(&a[26..30], &b[26..30]);
        // header checksum verifies
        let mut sum = 0u32;
        for k in (14..34).step_by(2) {
            sum += u16::from_be_bytes([a[k], a[k + 1]]) as u32;
        }
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        assert_eq!(sum, 0xffff);
    }

    #[test]
    fn frame_one_is_the_documented_udp_frame() {
        // Flow 1: 10.0.0.1:1025 -> 192.168.1.2:53, 18 zero bytes of payload, no UDP checksum.
        let want: [u8; 42] = [
            0x02, 0x00, 0x00, 0x00, 0x00, 0x02, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x08, 0x00,
            0x45, 0x00, 0x00, 0x2e, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x6f, 0x14, 0x0a, 0x00,
            0x00, 0x01, 0xc0, 0xa8, 0x01, 0x02, 0x04, 0x01, 0x00, 0x35, 0x00, 0x1a, 0x00, 0x00,
        ];
        let f = frame(1, 10);
        assert_eq!(&f[..42], &want[..]);
        assert!(f[42..].iter().all(|&b| b == 0));
    }

    #[test]
    fn generate_feeds_a_mem_wire_and_counts_what_the_wire_dropped() {
        use crate::port::mem::wire;
        let (mut a, mut b) = wire("gen-t", &crate::port::PortOptions::default()).unwrap();
        let stop = AtomicBool::new(false);
        let sent = generate(&mut a, 1000, Some(3000), &stop);
        let mut rx = Batch::new();
        let mut got = 0;
        let mut seen = std::collections::HashSet::new();
        while b.rx(&mut rx).unwrap() > 0 {
            got += rx.len() as u64;
            for p in rx.iter() {
                seen.insert(p.data[29]);
            }
            rx.clear();
        }
        assert_eq!(got, sent);
        assert_eq!(sent + a.stats().tx_drops.total(), 3000);
        assert!(seen.len() > 200, "addresses rotate");
    }

    #[test]
    fn a_paced_source_keeps_its_rate() {
        let mut s = SourcePort::new(10, None)
            .unwrap()
            .with_rate(Some(crate::units::Rate::Pps(100_000.0)));
        let mut b = Batch::new();
        let t0 = std::time::Instant::now();
        let mut got = 0;
        while t0.elapsed() < std::time::Duration::from_millis(100) {
            got += s.rx(&mut b).unwrap();
            b.clear();
        }
        // 100 ms at 100 kpps: 10 000 packets, never more than the elapsed time allows
        assert!(got <= 10_100 && got > 5_000, "{got}");
    }

    /// A source at 100 kpps read in a tight loop every 100 us of a fake clock for 1 s, stopped
    /// 5 s, then read 2 s more: the packets handed out in each 100 ms after the stop.
    fn stopped_5s(on: OnStall) -> Vec<u64> {
        let clock = Arc::new(crate::time::FakeClock::new(1_000_000, 0));
        let mut s = SourcePort::new(10, None)
            .unwrap()
            .with_rate(Some(crate::units::Rate::Pps(100_000.0)))
            .with_clock(clock.clone())
            .with_on_stall(on);
        let mut b = Batch::new();
        let mut read = |s: &mut SourcePort| {
            let mut got = 0;
            loop {
                let n = s.rx(&mut b).unwrap() as u64;
                b.clear();
                if n == 0 {
                    return got;
                }
                got += n;
            }
        };
        let mut first = 0;
        for _ in 0..10_000 {
            first += read(&mut s);
            clock.advance(100_000);
        }
        // 10 packets per read, the first at the start: up to 999.9 ms, 99'991.
        assert_eq!(first, 99_991);
        clock.advance(5_000_000_000);
        let mut slots = vec![0; 20];
        for slot in slots.iter_mut() {
            for _ in 0..1000 {
                *slot += read(&mut s);
                clock.advance(100_000);
            }
        }
        slots
    }

    #[test]
    fn a_paced_source_catches_up_a_stop_within_bounds() {
        let slots = stopped_5s(OnStall::default());
        // At most 8x the rate (80'000 per 100 ms, plus a batch) while catching up, one second
        // owed at most: the 5 s stop does not come out as a burst.
        assert!(slots.iter().all(|&n| n <= 80_064), "{slots:?}");
        let first_second: u64 = slots[..10].iter().sum();
        assert!(first_second <= 200_064, "{slots:?}");
        // And the rate is kept: the second owed, then 10'000 per 100 ms.
        let total: u64 = slots.iter().sum();
        assert!(total.abs_diff(300_000) <= 64, "{total} {slots:?}");
        assert!(
            slots[10..].iter().all(|&n| n.abs_diff(10_000) <= 1),
            "{slots:?}"
        );
    }

    #[test]
    fn a_paced_source_may_move_its_schedule_instead() {
        let slots = stopped_5s(OnStall::Shift);
        // The schedule restarts at the first read after the stop: no catching up at all.
        assert!(slots.iter().all(|&n| n.abs_diff(10_000) <= 10), "{slots:?}");
    }

    #[test]
    fn source_port_is_finite_and_rotates_flows() {
        let mut s = SourcePort::new(100, Some(100)).unwrap();
        let mut b = Batch::new();
        let mut got = 0;
        let mut last = Vec::new();
        while !s.is_finished() {
            got += s.rx(&mut b).unwrap();
            assert!(b.iter().all(|p| p.data.len() == 60 && p.data[23] == 17));
            last.extend(b.iter().map(|p| p.data[29]));
            b.clear();
        }
        // consecutive packets are consecutive flows, even though frames are reused
        assert_eq!(&last[..5], &[0, 1, 2, 3, 4]);
        assert_eq!(last[99], 99);
        assert_eq!(got, 100);
        assert_eq!(s.rx(&mut b).unwrap(), 0);
    }
}

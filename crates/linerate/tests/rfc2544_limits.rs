//! RFC 2544 with a generator that cannot reach the offered load: a wire that loses nothing
//! but costs 1 µs of a fake clock per packet (a port that takes at most 1 Mpps). A trial at
//! 100 % of 10 GbE (14.88 Mpps at 64 B) loses no frame, yet it did not offer that load: it must
//! not pass, and the report states the generator's ceiling on the port.
#![deny(unsafe_code)]

use linerate::apps::gen::rfc2544::{self, Rfc2544Options, Trial};
use linerate::mem::{Batch, Desc, Pool, PoolConfig};
use linerate::port::{Port, PortError, PortStats};
use linerate::time::{Clock, FakeClock};
use std::collections::VecDeque;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

type Queue = Arc<Mutex<VecDeque<Vec<u8>>>>;

/// The sending end: copies every packet into the queue and advances the clock by `cost_ns`
/// per packet (the port's time).
struct SlowTx {
    q: Queue,
    clock: Arc<FakeClock>,
    cost_ns: u64,
    stats: PortStats,
}

impl Port for SlowTx {
    fn name(&self) -> &str {
        "slow-tx"
    }
    fn rx(&mut self, _: &mut Batch) -> Result<usize, PortError> {
        Ok(0)
    }
    fn tx(&mut self, batch: &mut Batch) -> Result<usize, PortError> {
        let n = batch.len();
        {
            let mut q = self.q.lock().unwrap();
            for p in batch.iter() {
                q.push_back(p.data.to_vec());
                self.stats.tx_packets += 1;
                self.stats.tx_bytes += p.data.len() as u64;
            }
        }
        self.clock.advance(self.cost_ns * n as u64);
        batch.clear();
        Ok(n)
    }
    fn stats(&mut self) -> PortStats {
        self.stats
    }
}

/// The receiving end: hands out what the queue holds.
struct SlowRx {
    q: Queue,
    pool: Arc<Pool>,
}

impl Port for SlowRx {
    fn name(&self) -> &str {
        "slow-rx"
    }
    fn rx(&mut self, batch: &mut Batch) -> Result<usize, PortError> {
        batch.bind(&self.pool);
        let mut q = self.q.lock().unwrap();
        let mut n = 0;
        while !batch.is_full() {
            let Some(d) = q.pop_front() else { break };
            let Some(mut fr) = batch.alloc() else {
                q.push_front(d);
                break;
            };
            fr.buf()[..d.len()].copy_from_slice(&d);
            fr.push(Desc {
                len: d.len() as u32,
                wire_len: d.len() as u32 + 4,
                ..Default::default()
            });
            n += 1;
        }
        Ok(n)
    }
    fn tx(&mut self, _: &mut Batch) -> Result<usize, PortError> {
        Ok(0)
    }
    fn stats(&mut self) -> PortStats {
        PortStats::default()
    }
    fn pool(&self) -> Option<&Arc<Pool>> {
        Some(&self.pool)
    }
}

#[test]
fn a_trial_the_generator_cannot_offer_does_not_pass() {
    let clock = Arc::new(FakeClock::new(1_000_000_000, 1));
    let q: Queue = Default::default();
    let mut tx = SlowTx {
        q: q.clone(),
        clock: clock.clone(),
        cost_ns: 1000,
        stats: PortStats::default(),
    };
    let mut rx = SlowRx {
        q,
        pool: Arc::new(Pool::new(&PoolConfig::default()).unwrap()),
    };
    let opts = Rfc2544Options {
        sizes: vec![64],
        trial: Duration::from_millis(2),
        settle: Duration::from_micros(200),
        resolution_pct: 1.0,
        line_bps: 10e9,
        loss_steps: vec![100.0, 5.0],
        b2b_max: 256,
        ..Default::default()
    };
    let stop = AtomicBool::new(false);
    let mut trials: Vec<Trial> = Vec::new();
    let res = rfc2544::run(&mut tx, &mut rx, &opts, clock.as_ref(), &stop, |t| {
        trials.push(t.clone())
    })
    .unwrap();
    let r = &res[0];
    let table = rfc2544::table(&res, &opts);
    // The port takes at most 1 Mpps (each packet costs 1 µs of the clock the generator reads).
    assert!(
        r.ceiling_pps > 0.0 && r.ceiling_pps <= 1.0e6 * 1.001,
        "{table}"
    );
    assert!(r.ceiling_pct() < 7.0, "{table}");
    assert!(table.contains("generator-limited"), "{table}");
    // The 100 % trial lost nothing, but it was not at 100 %: it does not pass.
    let full = trials
        .iter()
        .find(|t| t.kind == "throughput")
        .expect("the search tries the line rate first");
    assert_eq!(full.offered_pps, r.line_pps);
    assert_eq!(full.received, full.sent, "the wire loses nothing");
    assert!(full.generator_limited(), "{full:?}");
    assert!(!full.passed());
    assert_eq!(full.verdict(), "generator-limited");
    // Whatever passed was offered and achieved, and lies below the ceiling.
    for t in trials.iter().filter(|t| t.passed()) {
        assert!(t.achieved_pps >= t.offered_pps * 0.995, "{t:?}");
        assert!(t.offered_pps <= r.ceiling_pps * 1.005, "{t:?} {table}");
    }
    if let Some(t) = &r.throughput {
        assert!(t.passed());
        assert!(t.rate_pct < 7.0, "{table}");
    }
    // Frame loss at 100 %: no frame lost, but marked as not reached.
    assert!(r.loss[0].generator_limited());
    assert!(table.contains("0.00*"), "{table}");
    // Bursts at line rate cannot be sent either.
    assert!(r.back_to_back_limited, "{table}");
    let csv = rfc2544::csv(&res);
    assert!(csv.lines().any(|l| l.starts_with("ceiling,64,")), "{csv}");
    assert!(csv.contains(",generator-limited"), "{csv}");
    let _ = clock.now_ns();
}

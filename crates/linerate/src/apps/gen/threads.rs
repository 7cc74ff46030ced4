//! The generator on several threads (as pktgen-dpdk runs one lcore per port or queue): one
//! [`super::run`] per output port, each pinned to its core if asked, an optional thread that
//! receives the probes ([`super::latency::receive_probes`]), and the calling thread reading
//! their counters while they run. [`run_threads`] returns each thread's report and their sum.

use super::latency::{receive_probes, ReceiveOptions, Tracker};
use super::{GenError, GenOptions, GenReport, GenTick, Hook};
use crate::port::{Port, PortError};
use crate::time::Clock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// One generator thread: its port and what it sends.
pub struct GenThread {
    /// The port it sends on; it is finished (a pcapng file ends with its interface's
    /// statistics) when the thread is done.
    pub port: Box<dyn Port>,
    /// What it generates; [`run_threads`] sets [`GenOptions::worker`] to (thread, threads).
    pub opts: GenOptions,
    /// The core it is pinned to (None: wherever the scheduler puts it).
    pub core: Option<usize>,
}

/// The probes' receiving side: a port read on a thread of its own until every generator is
/// done and then `opts.quiet` passed without a packet.
pub struct Probes<'a, F> {
    /// The port the probes come back on.
    pub port: &'a mut dyn Port,
    /// How long it waits after the generators and how often it calls `on_tick`.
    pub opts: ReceiveOptions,
    /// Called on the receiving thread every `opts.tick` with the port and the probes tracked
    /// so far (to publish counters; nothing per packet).
    pub on_tick: F,
}

/// What the calling thread sees while the generators run (every [`POLL`]).
pub struct Progress<'a> {
    ticks: &'a [Mutex<GenTick>],
}

impl Progress<'_> {
    /// Each thread's latest counters, in the order of the threads.
    pub fn ticks(&self) -> Vec<GenTick> {
        self.ticks
            .iter()
            .map(|t| *t.lock().unwrap_or_else(|e| e.into_inner()))
            .collect()
    }

    /// How many generator threads there are.
    pub fn threads(&self) -> usize {
        self.ticks.len()
    }
}

/// How often the calling thread looks at the generators (and calls `on_poll`).
pub const POLL: Duration = Duration::from_millis(10);

/// Why a run on several threads failed.
#[derive(Debug, thiserror::Error)]
pub enum ThreadsError<E> {
    /// A thread's hook (its script) could not be made.
    #[error("{0}")]
    Hook(E),
    /// A thread could not be pinned to its core.
    #[error("cannot pin to core {core}")]
    Pin {
        /// The core.
        core: usize,
    },
    /// A thread's generator (or its port's finish) failed.
    #[error("thread {thread} on {port}: {source}")]
    Gen {
        /// The thread.
        thread: usize,
        /// Its port's name.
        port: String,
        /// Why.
        source: GenError,
    },
    /// The probes' port failed.
    #[error("receiving probes: {0}")]
    Probes(PortError),
    /// A thread panicked.
    #[error("{0} panicked")]
    Panicked(&'static str),
}

/// What the threads did: each one's report, their sum and the probes received.
#[derive(Debug, Default)]
pub struct ThreadsReport {
    /// Each thread's report, in the order of the threads.
    pub threads: Vec<GenReport>,
    /// Their sum ([`GenReport::merge`]).
    pub total: GenReport,
    /// The probes received, when there was a receiving side.
    pub probes: Option<Tracker>,
}

impl ThreadsReport {
    /// The achieved rate: each thread's over its own span (from its first packet's scheduled
    /// departure to its last departure), summed, as threads start a little apart; one thread's
    /// is its own.
    pub fn pps(&self) -> f64 {
        if self.threads.len() > 1 {
            self.threads.iter().map(|r| r.pps()).sum()
        } else {
            self.total.pps()
        }
    }

    /// Packets of stream `s` sent by thread `t` (None when there is no such stream).
    pub fn sent(&self, t: usize, s: usize) -> Option<u64> {
        self.threads
            .get(t)
            .and_then(|r| r.per_stream.get(s))
            .copied()
    }
}

/// Runs one generator per [`GenThread`], each on a thread of its own (pinned to its core if
/// it has one) with the hook `hook(i, &opts)` makes on that thread (a Lua state stays on the
/// thread that made it), plus the probes' receiving thread if given. The calling thread calls
/// `on_poll` every [`POLL`] until every generator is done, then tells the receiving thread
/// and waits for it. All stop on `stop`. The first failure is returned, the receiving side's
/// before a generator's; a thread that panicked is a failure too.
pub fn run_threads<Hk, E, F>(
    threads: Vec<GenThread>,
    hook: impl Fn(usize, &GenOptions) -> Result<Option<Hk>, E> + Sync,
    probes: Option<Probes<'_, F>>,
    clock: &dyn Clock,
    stop: &AtomicBool,
    mut on_poll: impl FnMut(&Progress<'_>),
) -> Result<ThreadsReport, ThreadsError<E>>
where
    Hk: Hook,
    E: Send,
    F: FnMut(&mut dyn Port, &Tracker) + Send,
{
    let n = threads.len();
    let ticks: Vec<Mutex<GenTick>> = (0..n).map(|_| Mutex::new(GenTick::default())).collect();
    let done = AtomicBool::new(false);
    std::thread::scope(|sc| {
        let hook = &hook;
        let mut handles = Vec::with_capacity(n);
        for (i, t) in threads.into_iter().enumerate() {
            let tick = &ticks[i];
            handles.push(sc.spawn(move || -> Result<GenReport, ThreadsError<E>> {
                let GenThread {
                    mut port,
                    opts,
                    core,
                } = t;
                if let Some(core) = core {
                    if !crate::sys::affinity::pin_current_thread(core) {
                        return Err(ThreadsError::Pin { core });
                    }
                }
                let opts = GenOptions {
                    worker: (i, n),
                    ..opts
                };
                let mut hk = hook(i, &opts).map_err(ThreadsError::Hook)?;
                let name = port.name().to_string();
                let failed = |source: GenError| ThreadsError::Gen {
                    thread: i,
                    port: name.clone(),
                    source,
                };
                let h = hk.as_mut().map(|h| h as &mut dyn Hook);
                let r = super::run(port.as_mut(), &opts, clock, stop, h, |s| {
                    *tick.lock().unwrap_or_else(|e| e.into_inner()) = *s;
                })
                .map_err(failed)?;
                port.finish(&[]).map_err(|e| failed(GenError::Port(e)))?;
                Ok(r)
            }));
        }
        let rx = probes.map(|mut p| {
            let done = &done;
            sc.spawn(move || {
                receive_probes(p.port, clock, &p.opts, done, stop, &mut p.on_tick)
                    .map(|got| got.tracker)
            })
        });
        let progress = Progress { ticks: &ticks };
        while !handles.iter().all(|h| h.is_finished()) {
            std::thread::sleep(POLL);
            on_poll(&progress);
        }
        let mut reports = Vec::with_capacity(n);
        let mut err = None;
        for h in handles {
            match h.join() {
                Ok(Ok(r)) => reports.push(r),
                Ok(Err(e)) => {
                    err.get_or_insert(e);
                }
                Err(_) => {
                    err.get_or_insert(ThreadsError::Panicked("a generator thread"));
                }
            }
        }
        done.store(true, Ordering::Release);
        let probes = match rx.map(|h| h.join()) {
            Some(Ok(Ok(t))) => Some(t),
            Some(Ok(Err(e))) => return Err(ThreadsError::Probes(e)),
            Some(Err(_)) => return Err(ThreadsError::Panicked("the receive thread")),
            None => None,
        };
        if let Some(e) = err {
            return Err(e);
        }
        let mut total = GenReport::default();
        for r in &reports {
            total.merge(r);
        }
        Ok(ThreadsReport {
            threads: reports,
            total,
            probes,
        })
    })
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::mem::Batch;
    use crate::port::PortOptions;
    use crate::time::TscClock;

    struct NoHook;
    impl Hook for NoHook {
        fn modify(
            &mut self,
            _: &mut Batch,
            _: &[u8],
            _: &[super::super::template::Layout],
        ) -> Result<(), String> {
            Ok(())
        }
    }

    fn thread(name: &str, count: u64) -> GenThread {
        GenThread {
            port: crate::open_tx(name, &PortOptions::default()).unwrap(),
            opts: GenOptions {
                streams: vec![super::super::StreamSpec::default()],
                count: Some(count),
                ..Default::default()
            },
            core: None,
        }
    }

    #[test]
    fn threads_send_their_counts_and_add_up() {
        let clock = TscClock::new();
        let stop = AtomicBool::new(false);
        let threads = vec![thread("mem:gt-a", 100), thread("mem:gt-b", 250)];
        let mut polls = 0;
        let made = std::sync::atomic::AtomicUsize::new(0);
        let r = run_threads(
            threads,
            |i, o: &GenOptions| -> Result<Option<NoHook>, String> {
                assert_eq!(o.worker, (i, 2));
                made.fetch_add(1, Ordering::Relaxed);
                Ok(Some(NoHook))
            },
            None::<Probes<'_, fn(&mut dyn Port, &Tracker)>>,
            &clock,
            &stop,
            |p| {
                assert_eq!((p.threads(), p.ticks().len()), (2, 2));
                polls += 1;
            },
        )
        .unwrap();
        assert_eq!(made.load(Ordering::Relaxed), 2);
        // No poll when both generators end before the first check (a loaded machine): each
        // poll that came saw both threads (asserted in it).
        let _ = polls;
        assert_eq!(r.threads.len(), 2);
        assert_eq!((r.threads[0].pkts, r.threads[1].pkts), (100, 250));
        assert_eq!(r.total.pkts, 350);
        assert_eq!((r.sent(1, 0), r.sent(2, 0)), (Some(250), None));
        assert!(r.probes.is_none());
    }

    #[test]
    fn a_hook_that_fails_fails_the_run() {
        let clock = TscClock::new();
        let stop = AtomicBool::new(false);
        let e = run_threads(
            vec![thread("mem:gt-c", 10)],
            |_, _: &GenOptions| -> Result<Option<NoHook>, String> { Err("no script".into()) },
            None::<Probes<'_, fn(&mut dyn Port, &Tracker)>>,
            &clock,
            &stop,
            |_| {},
        )
        .err()
        .unwrap();
        assert!(
            matches!(&e, ThreadsError::Hook(m) if m == "no script"),
            "{e}"
        );
    }

    #[test]
    fn probes_come_back_on_the_receiving_port() {
        let clock = TscClock::new();
        let stop = AtomicBool::new(false);
        let mut rx = crate::open_rx("mem:gt-d", &PortOptions::default()).unwrap();
        let mut ticked = false;
        let r = run_threads(
            vec![thread("mem:gt-d", 40)],
            |_, _: &GenOptions| -> Result<Option<NoHook>, String> { Ok(None) },
            Some(Probes {
                port: rx.as_mut(),
                opts: ReceiveOptions {
                    quiet: Duration::from_millis(50),
                    tick: Duration::from_millis(1),
                },
                on_tick: |_: &mut dyn Port, _: &Tracker| ticked = true,
            }),
            &clock,
            &stop,
            |_| {},
        )
        .unwrap();
        let t = r.probes.expect("probes tracked");
        assert_eq!(t.streams().map(|s| s.rx).sum::<u64>(), 40);
        assert!(ticked);
    }
}

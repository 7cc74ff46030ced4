//! `gen`: a packet generator with precise software rate control and latency probes (MoonGen,
//! pktgen-dpdk).
//!
//! Packets are built from [`template::Template`]s in frames of the output port's pool (or of a
//! private pool when the port copies, as AF_PACKET does) in groups of up to 64: for each packet
//! the worker picks the stream due first, takes its departure time from its [`sched::Schedule`],
//! writes the template with the varied fields ([`vary`]) and updates the checksums
//! incrementally. An optional [`Hook`] (a Lua script) sees each group once. Then the group
//! departs: the worker busy-waits on the injected [`Clock`] until a packet is due, stamps the
//! send time into every due packet's probe signature and hands them to the port in one call.
//! The achieved gaps are compared with the scheduled ones ([`sched::Precision`]).

pub mod latency;
pub mod live;
pub mod replay;
pub mod rfc2544;

pub mod rng;
pub mod sched;
pub mod script;
pub mod template;
pub mod vary;

use crate::mem::{Batch, Pool, PoolConfig, BATCH};
use crate::port::{Port, PortError, PortStats};
use crate::stats::Snapshot;
use crate::time::Clock;
use rng::Rng;
use sched::{Pattern, Precision, Schedule};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use template::{Layout, Template, TemplateError, TemplateSpec, Vals};
use vary::{AddrSeq, Seq, SizeSpec, Sizes};

/// One stream: a template, how its fields vary, its sizes and its rate.
#[derive(Clone, Debug)]
pub struct StreamSpec {
    /// Stream id carried in the probe signature.
    pub id: u16,
    /// The headers.
    pub template: TemplateSpec,
    /// Source addresses (None: the template's).
    pub src_ip: Option<AddrSeq>,
    /// Destination addresses.
    pub dst_ip: Option<AddrSeq>,
    /// Source ports.
    pub sport: Option<Seq>,
    /// Destination ports.
    pub dport: Option<Seq>,
    /// Frame sizes (with CRC).
    pub size: SizeSpec,
    /// Packets per second (None: as fast as possible).
    pub pps: Option<f64>,
    /// Spacing of departures.
    pub pattern: Pattern,
    /// Write a probe signature (stream, sequence, send time) into each packet that has room
    /// (16 B of transport payload: 64 B frames have it for IPv4/UDP only).
    pub probe: bool,
}

impl Default for StreamSpec {
    fn default() -> Self {
        StreamSpec {
            id: 0,
            template: TemplateSpec::default(),
            src_ip: None,
            dst_ip: None,
            sport: None,
            dport: None,
            size: SizeSpec::Fixed(64),
            pps: None,
            pattern: Pattern::Cbr,
            probe: true,
        }
    }
}

/// Errors of the generator.
#[derive(Debug, thiserror::Error)]
pub enum GenError {
    /// A template could not be built.
    #[error("stream {stream}: {why}")]
    Template {
        /// Stream id.
        stream: u16,
        /// Why.
        why: TemplateError,
    },
    /// A stream's fields do not fit its template.
    #[error("stream {stream}: {why}")]
    Spec {
        /// Stream id.
        stream: u16,
        /// Why.
        why: String,
    },
    /// No stream was given.
    #[error("no stream to generate")]
    NoStream,
    /// The port failed.
    #[error(transparent)]
    Port(#[from] PortError),
    /// A hook (script) failed.
    #[error("{0}")]
    Hook(String),
    /// Packet memory could not be had.
    #[error(transparent)]
    Mem(#[from] crate::mem::MemError),
}

/// Sees every group of freshly built packets once, before they depart (a Lua script).
pub trait Hook {
    /// Modifies the packets of `batch`; `streams[i]` is the index (in the options' stream
    /// list) of packet `i`'s stream and `layouts[s]` the header layout of stream `s`.
    fn modify(
        &mut self,
        batch: &mut Batch,
        streams: &[u8],
        layouts: &[Layout],
    ) -> Result<(), String>;
}

/// What to generate and when to stop.
#[derive(Clone, Debug)]
pub struct GenOptions {
    /// The streams (at most 255).
    pub streams: Vec<StreamSpec>,
    /// Stop after this many packets in all.
    pub count: Option<u64>,
    /// Stop after this long.
    pub duration: Option<Duration>,
    /// Seed of the random fields, sizes and Poisson gaps.
    pub seed: u64,
    /// Interval between statistics snapshots.
    pub interval: Duration,
    /// Sleep instead of spinning when the next departure is further away than this.
    pub sleep_above: Duration,
    /// After a stall, send every late packet at once to keep the mean rate, instead of moving
    /// the schedule later (the default, which keeps the gaps).
    pub catch_up: bool,
}

impl Default for GenOptions {
    fn default() -> Self {
        GenOptions {
            streams: vec![StreamSpec::default()],
            count: None,
            duration: None,
            seed: 1,
            interval: Duration::from_secs(1),
            sleep_above: Duration::from_millis(2),
            catch_up: false,
        }
    }
}

/// Results of a run.
#[derive(Clone, Debug, Default)]
pub struct GenReport {
    /// Packets handed to the port.
    pub pkts: u64,
    /// Their bytes (without CRC).
    pub bytes: u64,
    /// Packets per stream (in the order of the options).
    pub per_stream: Vec<u64>,
    /// Departure precision (rated streams only).
    pub precision: Precision,
    /// First and last departure (clock ns).
    pub first_ns: u64,
    /// Last departure.
    pub last_ns: u64,
    /// The port's counters at the end.
    pub port: PortStats,
    /// Why the run ended early, if it failed.
    pub error: Option<String>,
}

impl GenReport {
    /// Packets per second between the first and the last departure.
    pub fn pps(&self) -> f64 {
        let dt = self.last_ns.saturating_sub(self.first_ns);
        if dt == 0 || self.pkts < 2 {
            return 0.0;
        }
        (self.pkts - 1) as f64 * 1e9 / dt as f64
    }

    /// Adds another thread's report.
    pub fn merge(&mut self, o: &GenReport) {
        self.pkts += o.pkts;
        self.bytes += o.bytes;
        if self.per_stream.len() < o.per_stream.len() {
            self.per_stream.resize(o.per_stream.len(), 0);
        }
        for (a, b) in self.per_stream.iter_mut().zip(&o.per_stream) {
            *a += b;
        }
        self.precision.merge(&o.precision);
        if self.first_ns == 0 || (o.first_ns != 0 && o.first_ns < self.first_ns) {
            self.first_ns = o.first_ns;
        }
        self.last_ns = self.last_ns.max(o.last_ns);
        self.port.tx_packets += o.port.tx_packets;
        self.port.tx_bytes += o.port.tx_bytes;
        self.port.tx_drops = self.port.tx_drops.merged(&o.port.tx_drops);
        if self.error.is_none() {
            self.error.clone_from(&o.error);
        }
    }
}

/// A compiled stream.
struct Stream {
    id: u16,
    tpl: Template,
    src: Option<Seq>,
    dst: Option<Seq>,
    sport: Option<Seq>,
    dport: Option<Seq>,
    sizes: Sizes,
    sched: Option<Schedule>,
    probe: bool,
    seq: u32,
}

fn compile(spec: &StreamSpec, seed: u64, start: u64) -> Result<Stream, GenError> {
    let err = |why: String| GenError::Spec {
        stream: spec.id,
        why,
    };
    let mut t = spec.template.clone();
    if let Some(a) = &spec.src_ip {
        t.src_ip = a.base;
    }
    if let Some(a) = &spec.dst_ip {
        t.dst_ip = a.base;
    }
    if let Some(s) = &spec.sport {
        t.sport = s.first() as u16;
    }
    if let Some(s) = &spec.dport {
        t.dport = s.first() as u16;
    }
    let tpl = Template::new(&t).map_err(|why| GenError::Template {
        stream: spec.id,
        why,
    })?;
    // A fixed size must fit the headers; ranges and IMIX send their small frames at the
    // headers' length when the headers are longer (IPv6, TCP at 64 B).
    let (lo, hi) = spec.size.bounds();
    let lo = match spec.size {
        SizeSpec::Fixed(_) => lo,
        _ => lo.max(tpl.min_len() as u32 + 4),
    };
    for s in [lo, hi] {
        tpl.check_size(s).map_err(|why| GenError::Template {
            stream: spec.id,
            why,
        })?;
    }
    let fam = |a: &AddrSeq| a.base.is_ipv4() == t.src_ip.is_ipv4();
    if spec.src_ip.as_ref().is_some_and(|a| !fam(a))
        || spec.dst_ip.as_ref().is_some_and(|a| !fam(a))
    {
        return Err(err("source and destination must be of one family".into()));
    }
    let sched = spec
        .pps
        .map(|pps| Schedule::new(spec.pattern, pps, start, seed ^ 0x5eed));
    Ok(Stream {
        id: spec.id,
        tpl,
        src: spec.src_ip.as_ref().map(|a| a.seq.clone()),
        dst: spec.dst_ip.as_ref().map(|a| a.seq.clone()),
        sport: spec.sport.clone(),
        dport: spec.dport.clone(),
        sizes: Sizes::new(&spec.size),
        sched,
        probe: spec.probe,
        seq: 0,
    })
}

impl Stream {
    /// Writes the next packet into `out`; returns its length.
    #[inline(always)]
    fn build(&mut self, out: &mut [u8], rng: &mut Rng) -> usize {
        let mut v: Vals = self.tpl.base();
        v.len = self.sizes.next(rng);
        if let Some(s) = &mut self.src {
            v.src_ip = s.next(rng) as u32;
        }
        if let Some(s) = &mut self.dst {
            v.dst_ip = s.next(rng) as u32;
        }
        if let Some(s) = &mut self.sport {
            v.sport = s.next(rng) as u16;
        }
        if let Some(s) = &mut self.dport {
            v.dport = s.next(rng) as u16;
        }
        let n = self.tpl.write(out, &v);
        if self.probe {
            template::put_sig(&mut out[..n], self.tpl.layout(), self.id, self.seq);
        }
        self.seq = self.seq.wrapping_add(1);
        n
    }
}

/// Checks that every stream of `opts` can be built (templates, sizes, families), as
/// [`run`] would, without sending anything.
pub fn validate(opts: &GenOptions) -> Result<(), GenError> {
    if opts.streams.is_empty() {
        return Err(GenError::NoStream);
    }
    for s in &opts.streams {
        compile(s, 0, 0)?;
    }
    Ok(())
}

/// The frames to build in: the port's pool when it has one (packets cross with no copy),
/// else a private one (the port copies on transmit).
pub fn build_pool(port: &dyn Port) -> Result<Arc<Pool>, GenError> {
    match port.pool() {
        Some(p) if p.allocates() => Ok(p.clone()),
        _ => Ok(Arc::new(Pool::new(&PoolConfig {
            frames: 1024,
            ..Default::default()
        })?)),
    }
}

/// A group of built packets waiting to depart.
struct Group {
    b: Batch,
    t: [u64; BATCH],
    which: [u8; BATCH],
    /// Packets of `b` already handed to the port.
    k: usize,
    /// The hook has seen the group.
    hooked: bool,
}

impl Group {
    fn new(pool: &Arc<Pool>) -> Group {
        Group {
            b: Batch::with_pool(pool),
            t: [0; BATCH],
            which: [0; BATCH],
            k: 0,
            hooked: false,
        }
    }

    /// Frees what has not departed and empties the group.
    fn reset(&mut self) {
        self.b.consume(self.k);
        self.b.clear();
        self.k = 0;
        self.hooked = false;
    }
}

/// Builds packets (at most `max`, and no more than `left` in all) into `g`.
#[inline]
fn fill(
    g: &mut Group,
    streams: &mut [Stream],
    rng: &mut Rng,
    rated: bool,
    rr: &mut usize,
    max: usize,
    left: &mut u64,
) {
    let mut built = 0;
    while built < max && !g.b.is_full() && *left > 0 {
        let s = if rated {
            let mut best = 0;
            let mut bt = u64::MAX;
            for (i, st) in streams.iter().enumerate() {
                let t = st.sched.as_ref().map_or(0, |s| s.peek());
                if t < bt {
                    bt = t;
                    best = i;
                }
            }
            best
        } else {
            *rr = (*rr + 1) % streams.len();
            *rr
        };
        let Some(addr) = g.b.alloc() else { break };
        let st = &mut streams[s];
        let n = st.build(g.b.frame_mut(addr), rng);
        let k = g.b.len();
        g.t[k] = st.sched.as_mut().map_or(0, |s| s.advance());
        g.which[k] = s as u8;
        g.b.push(crate::mem::Desc {
            addr,
            len: n as u32,
            wire_len: n as u32,
            ..Default::default()
        });
        built += 1;
        *left -= 1;
    }
}

/// Packets built per slice of waiting time: small enough to fit in a gap of ~1 µs.
const FILL_CHUNK: usize = 8;
/// Slack (ns) below which the worker does not start building while it waits.
const FILL_SLACK: u64 = 400;

/// Runs the generator on `port` until the count, the duration, `stop`, or an error. `on_tick`
/// gets a statistics snapshot every interval (from the clock's readings). A hook's (script's)
/// error ends the run with a report whose `error` says why (what was sent is counted); other
/// errors are returned.
///
/// Two groups of up to 64 packets alternate: while the worker waits for the next departure of
/// one, it builds the next group a few packets at a time, so that building never delays a
/// departure at rates up to a few Mpps. The hook sees a group once, complete, before its first
/// departure.
pub fn run(
    port: &mut dyn Port,
    opts: &GenOptions,
    clock: &dyn Clock,
    stop: &AtomicBool,
    mut hook: Option<&mut dyn Hook>,
    mut on_tick: impl FnMut(&Snapshot),
) -> Result<GenReport, GenError> {
    if opts.streams.is_empty() {
        return Err(GenError::NoStream);
    }
    if opts.streams.len() > 255 {
        return Err(GenError::Spec {
            stream: 0,
            why: "at most 255 streams per worker".into(),
        });
    }
    let pool = build_pool(port)?;
    let t0 = clock.now_ns();
    // Start a little later so that the first packets are not already late.
    let start = t0 + 20_000;
    let mut streams = opts
        .streams
        .iter()
        .enumerate()
        .map(|(i, s)| compile(s, opts.seed.wrapping_add(i as u64 * 7919), start))
        .collect::<Result<Vec<Stream>, GenError>>()?;
    let layouts: Vec<Layout> = streams.iter().map(|s| *s.tpl.layout()).collect();
    let rated = streams.iter().any(|s| s.sched.is_some());
    let mut rng = Rng::new(opts.seed);
    let mut cur = Group::new(&pool);
    let mut nxt = Group::new(&pool);
    let mut out = Batch::with_pool(&pool);
    let mut rep = GenReport {
        per_stream: vec![0; streams.len()],
        ..Default::default()
    };
    let mut left = opts.count.unwrap_or(u64::MAX);
    let deadline = opts.duration.map(|d| t0 + d.as_nanos() as u64);
    let interval = opts.interval.as_nanos().max(1) as u64;
    let mut next_tick = t0 + interval;
    let mut rr = 0usize;
    let sleep_above = opts.sleep_above.as_nanos() as u64;
    // How late a departure may be and still be caught up by sending what is due at once: two
    // gaps of the fastest stream, at least 2 µs (longer stalls move the schedule instead).
    // With `catch_up`, any lateness is caught up that way.
    let catch_up = if opts.catch_up {
        u64::MAX
    } else {
        streams
            .iter()
            .filter_map(|s| s.sched.as_ref())
            .map(|s| 2.0 * s.mean_gap())
            .fold(f64::INFINITY, f64::min)
            .max(2_000.0) as u64
    };
    let snap = |port: &mut dyn Port, t, rep: &GenReport| Snapshot {
        t_ns: t,
        pkts: rep.pkts,
        bytes: rep.bytes,
        drops: port.stats().tx_drops,
    };
    let result: Result<(), GenError> = 'run: loop {
        if stop.load(Ordering::Relaxed) {
            break Ok(());
        }
        // The next group: finish building it, let the hook see it, make it current.
        if cur.k >= cur.b.len() {
            cur.reset();
            std::mem::swap(&mut cur, &mut nxt);
            fill(
                &mut cur,
                &mut streams,
                &mut rng,
                rated,
                &mut rr,
                BATCH,
                &mut left,
            );
            if cur.b.is_empty() {
                if left == 0 {
                    break Ok(());
                }
                // The pool is empty: the port still holds frames. Let it drain.
                if let Err(e) = port.flush() {
                    break Err(e.into());
                }
                std::hint::spin_loop();
                continue;
            }
        }
        if !cur.hooked {
            cur.hooked = true;
            if let Some(h) = hook.as_deref_mut() {
                let n = cur.b.len();
                if let Err(e) = h.modify(&mut cur.b, &cur.which[..n], &layouts) {
                    break Err(GenError::Hook(e));
                }
            }
        }
        // Depart: wait for the first packet not sent, then send every packet due.
        let n = cur.b.len();
        let k = cur.k;
        let mut now = clock.now_ns();
        let mut m = n - k;
        if rated {
            let t = cur.t[k];
            if deadline.is_some_and(|d| t > d) {
                break Ok(());
            }
            while now < t {
                let slack = t - now;
                if slack > FILL_SLACK && !nxt.b.is_full() && left > 0 {
                    fill(
                        &mut nxt,
                        &mut streams,
                        &mut rng,
                        rated,
                        &mut rr,
                        FILL_CHUNK,
                        &mut left,
                    );
                } else if slack > sleep_above {
                    std::thread::sleep(Duration::from_nanos(slack - sleep_above / 2));
                    if stop.load(Ordering::Relaxed) {
                        break 'run Ok(());
                    }
                }
                // Busy-read the clock: no PAUSE, which a hypervisor may take for a spinning
                // lock waiter (pause-loop exiting) and deschedule.
                now = clock.now_ns();
            }
            if now - t > catch_up {
                // Too late to catch up without a long bunch of back-to-back packets: move the
                // rest of the schedule later instead (counted, and this gap is a deviation).
                let d = now - t;
                cur.t[k..n].iter_mut().for_each(|t| *t += d);
                nxt.t[..nxt.b.len()].iter_mut().for_each(|t| *t += d);
                streams
                    .iter_mut()
                    .filter_map(|s| s.sched.as_mut())
                    .for_each(|s| s.shift(d));
                rep.precision.slip(d);
            }
            m = cur.t[k..n].iter().take_while(|&&t| t <= now).count().max(1);
        }
        out.extend(&cur.b.descs()[k..k + m]);
        for j in 0..m {
            out.descs_mut()[j].ts = now;
            let s = usize::from(cur.which[k + j]);
            if streams[s].probe {
                template::put_time(out.data_mut(j), &layouts[s], now);
            }
            rep.per_stream[s] += 1;
            rep.bytes += u64::from(out.descs()[j].len);
            if rated {
                rep.precision.record(cur.t[k + j], now);
            }
        }
        cur.k += m;
        if rep.first_ns == 0 {
            rep.first_ns = now;
        }
        rep.last_ns = now;
        rep.pkts += m as u64;
        let mut tries = 0;
        while !out.is_empty() {
            match port.tx(&mut out) {
                Ok(_) if out.is_empty() => break,
                Ok(_) => {
                    // The port is full: its frames come back when the kernel (often its
                    // softirq thread, on this very core) has sent them. Give it the CPU.
                    tries += 1;
                    if tries > 100_000 {
                        out.clear();
                    }
                    std::thread::yield_now();
                }
                Err(e) => {
                    out.clear();
                    break 'run Err(e.into());
                }
            }
        }
        if cur.k >= n {
            cur.b.forget();
            cur.k = 0;
            cur.hooked = false;
            let now = clock.now_ns();
            if now >= next_tick {
                on_tick(&snap(port, now, &rep));
                next_tick = now + interval;
            }
            if deadline.is_some_and(|d| now >= d) {
                break Ok(());
            }
        }
    };
    cur.reset();
    nxt.reset();
    rep.port = port.stats();
    match result {
        // The script's error ends the run; what was sent until then is in the report.
        Err(GenError::Hook(e)) => rep.error = Some(e),
        Err(e) => {
            rep.error.get_or_insert_with(|| e.to_string());
            return Err(e);
        }
        Ok(()) => {}
    }
    port.flush()?;
    rep.port = port.stats();
    Ok(rep)
}

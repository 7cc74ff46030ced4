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

pub mod control;
pub mod interval;
pub mod latency;
pub mod live;
pub mod replay;
pub mod rfc2544;

pub mod rng;
pub mod sched;
pub mod script;
pub mod template;
pub mod threads;
pub mod vary;

use crate::apps::worker::{Limits, Ticker};
use crate::mem::{Batch, Pool, PoolConfig, BATCH};
use crate::port::{DropReason, Drops};
use crate::port::{Port, PortError, PortStats};
use crate::time::Clock;
use control::{Control, Settings};
use rng::Rng;
use sched::{OnStall, Pacer, Pattern, Precision, Schedule};
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

    /// Whether the hook can modify packets where the port builds them
    /// ([`Hook::modify_frames`]): gen then builds them straight into the port's frames, as
    /// it does without a hook, rather than into a group copied to the port after the call.
    fn in_place(&self) -> bool {
        false
    }

    /// As [`Hook::modify`], for packets built straight into a port's frames: packet `i` is
    /// `frames[i][..lens[i]]`. Called only when [`Hook::in_place`] says so.
    fn modify_frames(
        &mut self,
        _frames: &mut [&mut [u8]],
        _lens: &[u32],
        _streams: &[u8],
        _layouts: &[Layout],
    ) -> Result<(), String> {
        Err("this hook does not modify packets in place".into())
    }
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
    /// What to do after a stall: catch up within bounds (the default: the mean rate holds) or
    /// move the schedule later (the gaps hold, the mean rate falls).
    pub on_stall: OnStall,
    /// Settings another thread may change while it runs (`gen --commands`).
    pub control: Option<Arc<Control>>,
    /// This worker's index and the number of workers sharing `control` (for its share of a
    /// `count`).
    pub worker: (usize, usize),
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
            on_stall: OnStall::default(),
            control: None,
            worker: (0, 1),
        }
    }
}

/// How far below the asked rate an achieved rate may be and still count as the asked rate
/// (0.5 %).
pub const RATE_TOLERANCE: f64 = 0.005;

/// Why a run with a rate sent fewer packets per second than asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shortfall {
    /// The worker could not build and hand out packets fast enough (CPU).
    Generator,
    /// The port did not take packets fast enough (its ring was full, or it dropped them).
    Port,
    /// The schedule was moved later after stalls ([`OnStall::Shift`]).
    Shifted,
}

impl Shortfall {
    /// The word for it in reports.
    pub fn name(self) -> &'static str {
        match self {
            Shortfall::Generator => "generator-limited",
            Shortfall::Port => "port-limited",
            Shortfall::Shifted => "schedule moved later",
        }
    }
}

/// Why `achieved` packets per second fall more than [`RATE_TOLERANCE`] short of `asked`, if
/// they do: the port (it was full), the schedule moved later by choice ([`OnStall::Shift`]),
/// else the generator.
pub fn shortfall(
    asked: Option<f64>,
    achieved: f64,
    port_full: bool,
    shifted: bool,
) -> Option<Shortfall> {
    let asked = asked?;
    if achieved >= asked * (1.0 - RATE_TOLERANCE) {
        return None;
    }
    Some(if port_full {
        Shortfall::Port
    } else if shifted {
        Shortfall::Shifted
    } else {
        Shortfall::Generator
    })
}

/// A packet rate for people: `1.32 Mpps`, `50.00 kpps`, `800 pps`.
pub fn fmt_pps(p: f64) -> String {
    // The unit of the rounded value (999'999.7 pps is 1.000 Mpps, not 1000.00 kpps).
    if p >= 999_995.0 {
        format!("{:.3} Mpps", p / 1e6)
    } else if p >= 999.5 {
        format!("{:.2} kpps", p / 1e3)
    } else {
        format!("{p:.0} pps")
    }
}

/// `achieved 1.321 Mpps of 1.488 Mpps asked (88.80 %): generator-limited`; without a
/// shortfall just the two rates and the share.
pub fn rate_words(achieved: f64, asked: f64, why: Option<Shortfall>) -> String {
    let mut s = format!(
        "achieved {} of {} asked ({:.2} %)",
        fmt_pps(achieved),
        fmt_pps(asked),
        if asked > 0.0 {
            100.0 * achieved / asked
        } else {
            0.0
        }
    );
    if let Some(w) = why {
        s += ": ";
        s += w.name();
    }
    s
}

/// Packets and bytes a port took of the `pkts` and `bytes` handed to it in a run, from its
/// counters for that run: the packets less its transmit drops; the bytes by the port's own count
/// when it agrees, else less the dropped packets' share at the mean size.
pub fn taken_by(pkts: u64, bytes: u64, port: &PortStats) -> (u64, u64) {
    let n = pkts.saturating_sub(port.tx_drops.total());
    let b = if n == pkts {
        bytes
    } else if port.tx_packets == n {
        port.tx_bytes
    } else if pkts > 0 {
        (bytes as u128 * n as u128 / pkts as u128) as u64
    } else {
        0
    };
    (n, b)
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
    /// Start of the run's span (clock ns): the first packet's scheduled departure when a rate
    /// was set (a late first packet does not shorten the span), else its departure.
    pub first_ns: u64,
    /// Last departure.
    pub last_ns: u64,
    /// When the port had taken the last packet (clock ns, after its last transmit).
    pub end_ns: u64,
    /// The rate asked, packets per second (None: as fast as possible).
    pub rate_pps: Option<f64>,
    /// How late the last departure was (ns): what was still owed at the end.
    pub behind_ns: u64,
    /// Times the port was full and the worker had to wait for it.
    pub port_full: u64,
    /// The stall policy of the run.
    pub on_stall: OnStall,
    /// The port's counters at the end.
    pub port: PortStats,
    /// Why the run ended early, if it failed.
    pub error: Option<String>,
    /// Commands changed the settings while it ran (`gen --commands`): `rate_pps` is the last
    /// rate asked, and the run as a whole is not judged against it (each interval is).
    pub steered: bool,
    /// The port took no more packets, for good ([`Port::tx_ended`]: a capture file's `-G` with
    /// `-W` wrote its last file, tcpdump's file limit), and that ended the run: why, in words.
    pub ended: Option<String>,
    /// Packets built and offered to the port that it did not take because it had ended
    /// ([`GenReport::ended`]): not sent, neither in [`GenReport::pkts`] nor a drop of the port.
    pub not_sent: u64,
    /// Of what a capture file took, the packets in files a later file of the same name
    /// overwrote, and what did ([`Port::tx_overwritten`]).
    pub overwritten: Option<(u64, &'static str)>,
}

impl GenReport {
    /// Packets per second achieved, over the run's span: from the first packet's scheduled
    /// departure (its departure without a rate) until the port had taken the last packet (a
    /// batch's packets leave at once, so the last departure would leave out the last batch's
    /// time). With a rate, the gaps are counted, `(pkts - 1) / span`, so that a CBR run on
    /// schedule gives the asked rate; without, the packets, `pkts / span`.
    ///
    /// Only the packets the port took count ([`GenReport::taken`]): a packet it dropped (its
    /// ring full, a `mem:` wire with no room) was not sent.
    pub fn pps(&self) -> f64 {
        let end = self.end_ns.max(self.last_ns);
        let dt = end.saturating_sub(self.first_ns);
        let n = self.taken();
        if dt == 0 || n == 0 {
            return 0.0;
        }
        match self.rate_pps {
            Some(_) if n < 2 => 0.0,
            Some(_) => (n - 1) as f64 * 1e9 / dt as f64,
            None => n as f64 * 1e9 / dt as f64,
        }
    }

    /// Packets the port took: those handed to it ([`GenReport::pkts`]) less those it dropped
    /// on transmit.
    pub fn taken(&self) -> u64 {
        taken_by(self.pkts, self.bytes, &self.port).0
    }

    /// Bytes the port took (see [`taken_by`]).
    pub fn taken_bytes(&self) -> u64 {
        taken_by(self.pkts, self.bytes, &self.port).1
    }

    /// The run's span in seconds, as [`GenReport::pps`] counts it: 0 when nothing was sent (a
    /// run stopped before its first packet has no span; it was the clock's whole reading).
    pub fn elapsed(&self) -> f64 {
        if self.first_ns == 0 {
            return 0.0;
        }
        self.end_ns.max(self.last_ns).saturating_sub(self.first_ns) as f64 / 1e9
    }

    /// Why the achieved rate `pps` is more than [`RATE_TOLERANCE`] below the asked one, if it
    /// is (None: no rate asked, too few packets to tell, or the rate was achieved).
    pub fn shortfall(&self, pps: f64) -> Option<Shortfall> {
        if self.pkts < 2 || self.steered {
            return None;
        }
        shortfall(
            self.rate_pps,
            pps,
            self.port_full > 0 || self.port.tx_drops.total() > 0,
            self.on_stall == OnStall::Shift && self.precision.slips > 0,
        )
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
        self.end_ns = self.end_ns.max(o.end_ns);
        self.rate_pps = match (self.rate_pps, o.rate_pps) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
        self.behind_ns = self.behind_ns.max(o.behind_ns);
        self.port_full += o.port_full;
        self.steered |= o.steered;
        self.not_sent += o.not_sent;
        if let Some((n, by)) = o.overwritten {
            let had = self.overwritten.map_or(0, |x| x.0);
            self.overwritten = Some((had + n, by));
        }
        if self.ended.is_none() {
            self.ended.clone_from(&o.ended);
        }
        self.on_stall = o.on_stall;
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
    /// The one frame a stream with nothing varied sends (no probe, one size, fixed fields):
    /// copied whole, as trafgen sends its prebuilt frame, rather than patched from the template.
    frame: Option<Box<[u8]>>,
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
    // A standard template (1518 B with the CRC) unless the sizes need a jumbo one, so that
    // frames of standard sizes are the same bytes whatever the largest size.
    let (lo, hi) = spec.size.bounds();
    let max = (hi as usize)
        .saturating_sub(4)
        .clamp(template::MAX_FRAME, template::MAX_JUMBO_FRAME);
    let tpl = Template::with_max(&t, max).map_err(|why| GenError::Template {
        stream: spec.id,
        why,
    })?;
    // A fixed size must fit the headers; ranges and IMIX send their small frames at the
    // headers' length when the headers are longer (IPv6, TCP at 64 B).
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
    let mut st = Stream {
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
        frame: None,
    };
    let fixed = |q: &Option<Seq>| q.as_ref().is_none_or(|q| matches!(q, Seq::Fixed(_)));
    if !st.probe
        && matches!(st.sizes, Sizes::Fixed(_))
        && fixed(&st.src)
        && fixed(&st.dst)
        && fixed(&st.sport)
        && fixed(&st.dport)
    {
        // Nothing here draws from the generator's random numbers: the frame built once is
        // every frame's bytes.
        let mut buf = vec![0u8; st.tpl.max_len()];
        let n = st.build(&mut buf, &mut Rng::new(seed));
        buf.truncate(n);
        st.seq = 0;
        st.frame = Some(buf.into_boxed_slice());
    }
    Ok(st)
}

impl Stream {
    /// Writes the next packet into `out`; returns its length.
    #[inline(always)]
    fn build(&mut self, out: &mut [u8], rng: &mut Rng) -> usize {
        if let Some(f) = &self.frame {
            let n = f.len().min(out.len());
            out[..n].copy_from_slice(&f[..n]);
            self.seq = self.seq.wrapping_add(1);
            return n;
        }
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

/// The longest frame (bytes without the CRC) of `specs`, and the id of its stream.
fn longest(specs: &[StreamSpec]) -> (usize, u16) {
    specs
        .iter()
        .map(|s| ((s.size.bounds().1 as usize).saturating_sub(4), s.id))
        .max()
        .unwrap_or((0, 0))
}

/// Checks that the frames of `specs` can leave on `port` whole: no longer than the port sends
/// (its MTU; a tagged frame may be 4 bytes longer) nor than the frames of `pool` it builds in
/// (when given). A frame is never cut to fit.
pub fn check_port(
    port: &dyn Port,
    pool: Option<&Pool>,
    specs: &[StreamSpec],
) -> Result<(), GenError> {
    for s in specs {
        let len = (s.size.bounds().1 as usize).saturating_sub(4);
        if let Some(max) = port.max_tx_frame(s.template.vlan.is_some()) {
            if len > max {
                return Err(GenError::Spec {
                    stream: s.id,
                    why: format!(
                        "frames of {} B with the CRC do not fit {}: it sends frames of at \
                         most {} B with the CRC (its MTU{}); give a size up to {}, or raise \
                         the interface's MTU (`ip link set IFACE mtu 9000`)",
                        len + 4,
                        port.name(),
                        max + 4,
                        if s.template.vlan.is_some() {
                            " and an 802.1Q tag"
                        } else {
                            ""
                        },
                        max + 4
                    ),
                });
            }
        }
        if let Some(p) = pool {
            let room = p.max_packet() as usize;
            if len > room && !sends_longer_than_pool(port, p, len, s.template.vlan.is_some()) {
                return Err(GenError::Spec {
                    stream: s.id,
                    why: format!(
                        "frames of {} B with the CRC do not fit the packet buffers of {} \
                         ({room} B each): give a size up to {}",
                        len + 4,
                        port.name(),
                        room + 4
                    ),
                });
            }
        }
    }
    Ok(())
}

/// Whether `port` sends frames of `len` bytes that do not fit a frame of its own `pool`
/// (an `xdp:` port with multi-buffer: in several UMEM frames): then the generator builds in
/// a private pool of frames that hold them, and the port copies them on transmit. `tagged`:
/// the frames carry an 802.1Q tag (4 bytes beyond the MTU allowed).
fn sends_longer_than_pool(port: &dyn Port, pool: &Pool, len: usize, tagged: bool) -> bool {
    port.pool().is_some_and(|q| std::ptr::eq(q.as_ref(), pool))
        && port.max_tx_frame(tagged).is_some_and(|m| m >= len)
}

/// The frames to build in, for frames up to `longest` bytes: the port's pool when it has one
/// (packets cross with no copy), else a private one (the port copies on transmit) whose frames
/// hold `longest` bytes (2 KiB frames up to a standard frame, larger ones for jumbo frames).
pub fn build_pool(port: &dyn Port, longest: usize) -> Result<Arc<Pool>, GenError> {
    match port.pool() {
        Some(p) if p.allocates() && longest <= p.max_packet() as usize => Ok(p.clone()),
        _ => {
            let cfg = PoolConfig::default();
            let frame_size = (longest + cfg.headroom as usize)
                .next_power_of_two()
                .max(cfg.frame_size as usize) as u32;
            Ok(Arc::new(Pool::new(&PoolConfig {
                frames: 1024,
                frame_size,
                ..cfg
            })?))
        }
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

/// The streams of a run compiled, and what follows from their rates.
struct Plan {
    streams: Vec<Stream>,
    layouts: Vec<Layout>,
    rated: bool,
    /// Behind the schedule: a departure later than two gaps of the fastest stream (at least
    /// 2 µs). The pacer bounds how the owed packets leave (or moves the schedule).
    behind: u64,
    pacer: Pacer,
    total_pps: f64,
}

impl Plan {
    fn rate_pps(&self) -> Option<f64> {
        self.rated.then_some(self.total_pps)
    }
}

/// Compiles `specs` with schedules starting at `start`.
fn plan(specs: &[StreamSpec], seed: u64, start: u64, on_stall: OnStall) -> Result<Plan, GenError> {
    let streams = specs
        .iter()
        .enumerate()
        .map(|(i, s)| compile(s, seed.wrapping_add(i as u64 * 7919), start))
        .collect::<Result<Vec<Stream>, GenError>>()?;
    let layouts: Vec<Layout> = streams.iter().map(|s| *s.tpl.layout()).collect();
    let rated = streams.iter().any(|s| s.sched.is_some());
    let fastest = streams
        .iter()
        .filter_map(|s| s.sched.as_ref())
        .map(|s| s.mean_gap())
        .fold(f64::INFINITY, f64::min);
    let behind = sched::behind_above(fastest);
    let total_pps: f64 = specs.iter().filter_map(|s| s.pps).sum();
    Ok(Plan {
        streams,
        layouts,
        rated,
        behind,
        pacer: Pacer::new(on_stall, 1e9 / total_pps, behind),
        total_pps,
    })
}

/// `specs` as the settings of a [`Control`] change them: those of every stream, then those of
/// each stream by its id.
pub fn apply_settings(specs: &mut [StreamSpec], st: &Settings) {
    apply(specs, st)
}

fn apply(specs: &mut [StreamSpec], st: &Settings) {
    for s in specs {
        if let Some(p) = st.pps {
            s.pps = Some(p);
        }
        if let Some(z) = &st.size {
            s.size = z.clone();
        }
        if let Some(m) = st.dst_mac {
            s.template.dst_mac = m;
        }
        apply_fields(s, &st.fields);
        let id = s.id;
        for (_, f) in st.streams.iter().filter(|(i, _)| *i == id) {
            apply_fields(s, f);
        }
    }
}

/// One stream's spec with the fields `f` set.
pub fn apply_fields(s: &mut StreamSpec, f: &control::Fields) {
    if let Some(p) = f.pps {
        s.pps = Some(p);
    }
    if let Some(z) = &f.size {
        s.size = z.clone();
    }
    if let Some(m) = f.dst_mac {
        s.template.dst_mac = m;
    }
    if let Some(m) = f.src_mac {
        s.template.src_mac = m;
    }
    if let Some(a) = f.src_ip {
        s.template.src_ip = a;
        s.src_ip = None;
    }
    if let Some(a) = f.dst_ip {
        s.template.dst_ip = a;
        s.dst_ip = None;
    }
    if let Some(p) = f.sport {
        s.template.sport = p;
        s.sport = None;
    }
    if let Some(p) = f.dport {
        s.template.dport = p;
        s.dport = None;
    }
    if let Some(p) = f.proto {
        s.template.l4 = p;
    }
    if let Some(t) = f.ttl {
        s.template.ttl = t;
    }
    if let Some(v) = f.vlan {
        s.template.vlan = v;
        s.template.svlan = f.svlan.flatten().filter(|_| v.is_some());
    }
}

/// [`fill`] within both the run's count (`limits`, of which `built` packets are built) and a
/// `count` command's (`budget`, `u64::MAX`: no limit).
#[inline]
fn fill_counted(
    g: &mut Group,
    p: &mut Plan,
    rng: &mut Rng,
    rr: &mut usize,
    max: usize,
    limits: &Limits,
    (built, budget): (&mut u64, &mut u64),
) {
    let mut lim = (limits.room(*built, max) as u64).min(*budget);
    let before = lim;
    fill(g, &mut p.streams, rng, p.rated, rr, max, &mut lim);
    let used = before - lim;
    *built += used;
    if *budget != u64::MAX {
        *budget -= used;
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
            // No division per packet: a step and a wrap.
            *rr += 1;
            if *rr >= streams.len() {
                *rr = 0;
            }
            *rr
        };
        let k = g.b.len();
        let Some(mut f) = g.b.alloc() else { break };
        let st = &mut streams[s];
        let n = st.build(f.buf(), rng);
        g.t[k] = st.sched.as_mut().map_or(0, |s| s.advance());
        g.which[k] = s as u8;
        f.push(crate::mem::Desc {
            len: n as u32,
            wire_len: n as u32,
            ..Default::default()
        });
        built += 1;
        *left -= 1;
    }
}

/// What the worker reports every interval.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GenTick {
    /// Clock time of the reading (ns).
    pub t_ns: u64,
    /// Packets handed to the port so far.
    pub pkts: u64,
    /// Their bytes (without CRC).
    pub bytes: u64,
    /// The port's drops so far.
    pub drops: Drops,
    /// How late the last departure was (ns): what is owed now.
    pub behind_ns: u64,
    /// Time the schedule moved later so far (ns): given up.
    pub slipped_ns: u64,
    /// The last departure was behind the schedule (more than two gaps late).
    pub behind: bool,
    /// Times the port was full so far.
    pub port_full: u64,
    /// Not sending: stopped by a command, or a `count` command's packets all sent.
    pub waiting: bool,
}

impl GenTick {
    /// Packets the port took so far: those handed to it less those it dropped.
    pub fn taken(&self) -> u64 {
        self.taken_both().0
    }

    /// Bytes the port took so far, at the mean size of the packets handed to it.
    pub fn taken_bytes(&self) -> u64 {
        self.taken_both().1
    }

    fn taken_both(&self) -> (u64, u64) {
        // Only the drops are read each tick, not the port's byte counts: the mean size.
        let port = PortStats {
            tx_drops: self.drops,
            ..PortStats::default()
        };
        taken_by(self.pkts, self.bytes, &port)
    }
}

/// Packets built per slice of waiting time: small enough to fit in a gap of ~1 µs.
const FILL_CHUNK: usize = 8;
/// Slack (ns) below which the worker does not start building while it waits.
const FILL_SLACK: u64 = 400;

/// Runs the generator on `port` until the count, the duration, `stop`, or an error. `on_tick`
/// gets the counters every interval (from the clock's readings). A hook's (script's) error
/// ends the run with a report whose `error` says why (what was sent is counted); other errors
/// are returned.
///
/// With a rate, a packet leaves at its scheduled time; after a stall the owed packets leave
/// within the bounds of `opts.on_stall` ([`sched::Pacer`]). A duration ends the schedule: the
/// packets scheduled within it are sent, and when catching up the run may go on for up to a
/// tenth of the duration (at most 100 ms, at most the catch-up window) past it to send the
/// owed ones.
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
    mut on_tick: impl FnMut(&GenTick),
) -> Result<GenReport, GenError> {
    check_streams(&opts.streams)?;
    let pool = build_pool(port, longest(&opts.streams).0)?;
    check_port(port, Some(&pool), &opts.streams)?;
    let t0 = clock.now_ns();
    // Start a little later so that the first packets are not already late.
    let start = t0 + 20_000;
    let mut specs = opts.streams.clone();
    let ctl = opts.control.as_deref();
    // Packets left of a `count` command (budget u64::MAX: none).
    let (mut seen, mut starts, mut sending, mut budget, mut count_set) =
        control_at_start(ctl, &mut specs, opts);
    check_port(port, Some(&pool), &specs)?;
    let mut p = plan(&specs, opts.seed, start, opts.on_stall)?;
    let mut rng = Rng::new(opts.seed);
    let mut cur = Group::new(&pool);
    let mut nxt = Group::new(&pool);
    let mut out = Batch::with_pool(&pool);
    let mut rep = GenReport {
        per_stream: vec![0; p.streams.len()],
        ..Default::default()
    };
    // Where the run stops by itself (-c, -t), and the packets built towards its count (those
    // built and not sent are given back).
    let limits = Limits::new(opts.count, opts.duration, t0);
    let mut built = 0u64;
    let deadline = limits.deadline;
    // Past the deadline a run that catches up may still send what it owes, for a while.
    let grace = grace_ns(opts, p.rated);
    let hard_deadline = deadline.map(|d| d.saturating_add(grace));
    let mut ticker = Ticker::new(t0, opts.interval);
    let mut rr = 0usize;
    let sleep_above = opts.sleep_above.as_nanos() as u64;
    rep.precision = Precision::with_behind_above(p.behind);
    rep.rate_pps = p.rate_pps();
    rep.on_stall = opts.on_stall;
    let mut abandoned = 0u64;
    // When the port ended the run (it takes no more packets): the end of the run's span.
    let mut ended_at: Option<u64> = None;
    // The port may have served earlier runs (RFC 2544's trials): this run's counters only.
    let base = port.stats();
    let tick = |port: &mut dyn Port, t, rep: &GenReport, behind: u64, waiting: bool| {
        gen_tick(port, &base, t, rep, (behind, waiting))
    };
    // Unpaced, no controller, any hook in place, frames that fit: built in the port's frames.
    if hook.as_deref().is_none_or(|h| h.in_place())
        && ctl.is_none()
        && !p.rated
        && port.tx_build_room().is_some_and(|r| r >= longest(&specs).0)
    {
        let run = InPlace {
            limits: &limits,
            clock,
            stop,
            ticker: &mut ticker,
            hook: hook.as_deref_mut(),
            layouts: &p.layouts,
        };
        let mut tick = |port: &mut dyn Port, now, rep: &GenReport| {
            on_tick(&tick(port, now, rep, p.behind, false));
        };
        let (result, abandoned) =
            run_in_place(port, run, &mut p.streams, &mut rng, &mut rep, &mut tick);
        rep.end_ns = clock.now_ns();
        cur.reset();
        nxt.reset();
        return finish(port, rep, result, &base, abandoned);
    }
    let result: Result<(), GenError> = 'run: loop {
        if stop.load(Ordering::Relaxed) {
            break Ok(());
        }
        if let Some(c) = ctl.filter(|c| c.version() != seen) {
            let groups = (&mut cur, &mut nxt);
            let steer = (&mut seen, &mut starts, &mut count_set, &mut sending);
            let counts = (&mut built, &mut budget);
            take_command(
                c,
                opts,
                (&mut *port, &pool, clock),
                groups,
                steer,
                counts,
                &mut p,
                &mut rep,
            );
        }
        let drained = cur.k >= cur.b.len() && nxt.b.is_empty();
        if !sending || (budget == 0 && drained) {
            // Stopped (or a `count` sent whole): nothing leaves; the counters still tick, the
            // limits still hold.
            if !drained {
                let unsent = (cur.b.len() - cur.k + nxt.b.len()) as u64;
                built = built.saturating_sub(unsent);
                cur.reset();
                nxt.reset();
            }
            if let Err(e) = port.flush() {
                break Err(e.into());
            }
            let now = clock.now_ns();
            if let Err(e) = port.tick(now) {
                break Err(e.into());
            }
            if ticker.due(now) {
                on_tick(&tick(port, now, &rep, p.behind, true));
            }
            if hard_deadline.is_some_and(|d| now >= d) {
                break Ok(());
            }
            std::thread::sleep(Duration::from_millis(1));
            continue;
        }
        // The next group: finish building it, let the hook see it, make it current.
        if cur.k >= cur.b.len() {
            let (groups, fill) = ((&mut cur, &mut nxt), (&mut p, &mut rng, &mut rr));
            match next_group(groups, fill, &limits, (&mut built, &mut budget), port) {
                Step::Go => {}
                Step::Again => continue,
                Step::End(r) => break r,
            }
        }
        if !cur.hooked {
            cur.hooked = true;
            if let Some(h) = hook.as_deref_mut() {
                let n = cur.b.len();
                if let Err(e) = h.modify(&mut cur.b, &cur.which[..n], &p.layouts) {
                    break Err(GenError::Hook(e));
                }
            }
        }
        // Depart: wait for the first packet not sent, then send every packet due.
        let n = cur.b.len();
        let k = cur.k;
        let mut now = clock.now_ns();
        let mut m = n - k;
        if p.rated {
            let t = cur.t[k];
            if deadline.is_some_and(|d| t > d) {
                break Ok(());
            }
            let target = p.pacer.earliest(t);
            let fill = (&mut nxt, &mut p, &mut rng, &mut rr);
            let counts = (&mut built, &mut budget);
            match wait_filling(
                clock,
                (target, now),
                fill,
                &limits,
                counts,
                sleep_above,
                stop,
            ) {
                Some(t) => now = t,
                None => break 'run Ok(()),
            }
            let groups = (&mut cur, &mut nxt);
            m = depart_due((t, now, deadline), groups, (k, n), &mut p, &mut rep);
        }
        let sink = (&mut *port, &mut out, &mut abandoned);
        let handed = hand_over(sink, &cur, (k, m, now), &p, &mut rep, clock);
        cur.k += m;
        match handed {
            Ok(None) => {}
            // The port takes no more (tcpdump's -W file limit): the run ends here.
            Ok(Some(t)) => {
                ended_at = Some(t);
                break 'run Ok(());
            }
            Err(e) => break 'run Err(e),
        }
        // The port's clock work (a capture file's --flush-interval, -G).
        if let Err(e) = port.tick(now) {
            break Err(e.into());
        }
        if ticker.due(now) {
            on_tick(&tick(port, now, &rep, p.behind, false));
        }
        if cur.k >= n {
            cur.b.forget();
            cur.k = 0;
            cur.hooked = false;
            let now = clock.now_ns();
            if hard_deadline.is_some_and(|d| now >= d) {
                break Ok(());
            }
        }
    };
    rep.end_ns = span_end(port, ended_at, p.rated, &rep, clock);
    cur.reset();
    nxt.reset();
    finish(port, rep, result, &base, abandoned)
}

/// The controller's state as a run starts: its version and start count seen, whether it is
/// sending, the packets left of a `count` command (u64::MAX: none) and that command's count; the
/// streams take its settings.
fn control_at_start(
    ctl: Option<&Control>,
    specs: &mut [StreamSpec],
    opts: &GenOptions,
) -> (u64, u64, bool, u64, Option<u64>) {
    let Some(c) = ctl else {
        return (0, 0, true, u64::MAX, None);
    };
    // The version before the settings: a command between the two is taken again, never missed.
    let (seen, starts) = (c.version(), c.starts());
    let st = c.get();
    apply(specs, &st);
    let budget = st.count.map_or(u64::MAX, |n| {
        control::share(n, opts.worker.0, opts.worker.1)
    });
    (seen, starts, st.sending, budget, st.count)
}

/// A reading for the interval report: this run's counters (the port's since `base`).
fn gen_tick(
    port: &mut dyn Port,
    base: &PortStats,
    t: u64,
    rep: &GenReport,
    (behind, waiting): (u64, bool),
) -> GenTick {
    GenTick {
        t_ns: t,
        pkts: rep.pkts,
        bytes: rep.bytes,
        drops: port.stats().tx_drops.since(&base.tx_drops),
        behind_ns: rep.behind_ns,
        slipped_ns: rep.precision.slipped_ns,
        behind: rep.behind_ns > behind,
        port_full: rep.port_full,
        waiting,
    }
}

/// What bounds a run built in place.
struct InPlace<'a, 'h> {
    limits: &'a Limits,
    clock: &'a dyn Clock,
    stop: &'a AtomicBool,
    ticker: &'a mut Ticker,
    /// A hook that modifies the packets in the port's frames ([`Hook::in_place`]).
    hook: Option<&'a mut (dyn Hook + 'h)>,
    layouts: &'a [Layout],
}

/// The send loop as fast as possible on a port that lends its transmit frames
/// ([`Port::tx_build`]): each burst builds up to [`BATCH`] packets straight into them, the
/// streams in turn as [`fill`] takes them, each stamped (a probe's payload) with the burst's
/// time; no pool frame, no copy. A port whose ring stays full for long has the burst it
/// cannot take built aside and counted as dropped (a full ring), as [`transmit`] gives up.
fn run_in_place(
    port: &mut dyn Port,
    run: InPlace<'_, '_>,
    streams: &mut [Stream],
    rng: &mut Rng,
    rep: &mut GenReport,
    on_tick: &mut dyn FnMut(&mut dyn Port, u64, &GenReport),
) -> (Result<(), GenError>, u64) {
    let InPlace {
        limits,
        clock,
        stop,
        ticker,
        mut hook,
        layouts,
    } = run;
    let mut hook_err: Option<String> = None;
    let mut rr = 0usize;
    let mut built = 0u64;
    let mut tries = 0u32;
    let mut abandoned = 0u64;
    let mut aside: Vec<u8> = Vec::new();
    let mut bytes = 0u64;
    let mut out = Ok(());
    let mut first_ns = 0u64;
    let mut now = clock.now_ns();
    while !stop.load(Ordering::Relaxed) && !limits.time_up(now) {
        let want = limits.room(built, BATCH);
        if want == 0 {
            break;
        }
        let per_stream = &mut rep.per_stream;
        let mut fill = |bufs: &mut [&mut [u8]], lens: &mut [u32]| {
            let Some(h) = hook.as_deref_mut() else {
                for (b, l) in bufs.iter_mut().zip(lens.iter_mut()) {
                    *l = build_next(streams, &mut rr, rng, b, now, per_stream) as u32;
                    bytes += u64::from(*l);
                }
                return bufs.len();
            };
            // With a hook: built, then shown to the hook, then stamped (a probe's time goes
            // in last, as the group path stamps at departure, after the hook).
            let mut which = [0u8; BATCH];
            let n = bufs.len().min(BATCH);
            for ((b, l), w) in bufs.iter_mut().zip(lens.iter_mut()).zip(&mut which[..n]) {
                *l = build_unstamped(streams, &mut rr, rng, b, per_stream) as u32;
                *w = rr as u8;
            }
            if let Err(e) = h.modify_frames(&mut bufs[..n], &lens[..n], &which[..n], layouts) {
                // Nothing of this burst leaves: not counted as built.
                for &w in &which[..n] {
                    per_stream[usize::from(w)] -= 1;
                }
                hook_err = Some(e);
                return 0;
            }
            for ((b, &l), &w) in bufs.iter_mut().zip(&lens[..n]).zip(&which[..n]) {
                let st = &streams[usize::from(w)];
                if st.probe {
                    template::put_time(&mut b[..l as usize], st.tpl.layout(), now);
                }
                bytes += u64::from(l);
            }
            n
        };
        let built_now = port.tx_build(want, &mut fill);
        if let Some(e) = hook_err.take() {
            out = Err(GenError::Hook(e));
            break;
        }
        let m = match built_now {
            // The port takes no more (tcpdump's -W file limit): nothing was built.
            Ok(0) if port.tx_ended() => break,
            Ok(0) => {
                // The ring is full: its frames come back when the kernel (often its softirq
                // thread, on this very core) has sent them. Give it the CPU.
                if tries == 0 {
                    rep.port_full += 1;
                }
                tries += 1;
                if tries > 100_000 {
                    // Stuck: this burst is given up, counted as drops of a full ring.
                    tries = 0;
                    aside.resize(port.tx_build_room().unwrap_or(0), 0);
                    for _ in 0..want {
                        let n =
                            build_next(streams, &mut rr, rng, &mut aside, now, &mut rep.per_stream);
                        bytes += n as u64;
                    }
                    abandoned += want as u64;
                    want
                } else {
                    std::thread::yield_now();
                    0
                }
            }
            Ok(m) => {
                tries = 0;
                m
            }
            Err(e) => {
                out = Err(e.into());
                break;
            }
        };
        if m > 0 {
            if first_ns == 0 {
                first_ns = now;
            }
            rep.last_ns = now;
            rep.pkts += m as u64;
            built += m as u64;
        }
        if let Err(e) = port.tick(now) {
            out = Err(e.into());
            break;
        }
        if ticker.due(now) {
            rep.bytes = bytes;
            on_tick(port, now, rep);
        }
        now = clock.now_ns();
    }
    rep.first_ns = first_ns;
    rep.bytes = bytes;
    (out, abandoned)
}

/// Builds the next stream's next packet into `out` (round robin, as [`fill`]), stamped with
/// `now` when it is a probe, counted in `per_stream`; returns its length.
#[inline(always)]
fn build_next(
    streams: &mut [Stream],
    rr: &mut usize,
    rng: &mut Rng,
    out: &mut [u8],
    now: u64,
    per_stream: &mut [u64],
) -> usize {
    let n = build_unstamped(streams, rr, rng, out, per_stream);
    let st = &streams[*rr];
    if st.probe {
        template::put_time(&mut out[..n], st.tpl.layout(), now);
    }
    n
}

/// As [`build_next`], without the probe's time (the caller stamps it: after a hook).
#[inline(always)]
fn build_unstamped(
    streams: &mut [Stream],
    rr: &mut usize,
    rng: &mut Rng,
    out: &mut [u8],
    per_stream: &mut [u64],
) -> usize {
    *rr += 1;
    if *rr >= streams.len() {
        *rr = 0;
    }
    let n = streams[*rr].build(out, rng);
    per_stream[*rr] += 1;
    n
}

/// What the send loop does next.
enum Step {
    /// Go on with this pass.
    Go,
    /// Start the next pass.
    Again,
    /// End the run.
    End(Result<(), GenError>),
}

/// The next group: `nxt`, built to the end, becomes current (`cur`'s frames given back).
/// Nothing built: the count is reached (the run ends), or a `count` command's count is sent
/// (wait for a command), or the pool is empty as the port still holds frames (let it drain).
fn next_group(
    (cur, nxt): (&mut Group, &mut Group),
    (p, rng, rr): (&mut Plan, &mut Rng, &mut usize),
    limits: &Limits,
    (built, budget): (&mut u64, &mut u64),
    port: &mut dyn Port,
) -> Step {
    cur.reset();
    std::mem::swap(cur, nxt);
    fill_counted(cur, p, rng, rr, BATCH, limits, (&mut *built, &mut *budget));
    if cur.b.is_empty() {
        if limits.count_reached(*built) {
            return Step::End(Ok(()));
        }
        if *budget == 0 {
            return Step::Again;
        }
        if let Err(e) = port.flush() {
            return Step::End(Err(e.into()));
        }
        std::hint::spin_loop();
        return Step::Again;
    }
    Step::Go
}

/// A worker sends 1 to 255 streams.
fn check_streams(streams: &[StreamSpec]) -> Result<(), GenError> {
    if streams.is_empty() {
        return Err(GenError::NoStream);
    }
    if streams.len() > 255 {
        return Err(GenError::Spec {
            stream: 0,
            why: "at most 255 streams per worker".into(),
        });
    }
    Ok(())
}

/// How long past the deadline of a duration a rated run that catches up may still send
/// what it owes: a tenth of the duration, at most 100 ms, at most the catch-up window.
fn grace_ns(opts: &GenOptions, rated: bool) -> u64 {
    match (opts.on_stall, opts.duration) {
        (OnStall::CatchUp(c), Some(d)) if rated => c
            .window_ns
            .min(100_000_000)
            .min((d.as_nanos() / 10).min(u128::from(u64::MAX)) as u64),
        _ => 0,
    }
}

/// A command: drops what was built and not sent (given back to the counts), then starts over
/// from now with the new settings.
#[allow(clippy::too_many_arguments)]
fn take_command(
    c: &Control,
    opts: &GenOptions,
    (port, pool, clock): (&mut dyn Port, &Arc<Pool>, &dyn Clock),
    (cur, nxt): (&mut Group, &mut Group),
    (seen, starts, count_set, sending): (&mut u64, &mut u64, &mut Option<u64>, &mut bool),
    (built, budget): (&mut u64, &mut u64),
    p: &mut Plan,
    rep: &mut GenReport,
) {
    *seen = c.version();
    let st = c.get();
    let unsent = (cur.b.len() - cur.k + nxt.b.len()) as u64;
    *built = built.saturating_sub(unsent);
    if *budget != u64::MAX {
        *budget += unsent;
    }
    cur.reset();
    nxt.reset();
    let mut next = opts.streams.clone();
    apply(&mut next, &st);
    let now = clock.now_ns();
    match check_port(port, Some(pool), &next)
        .and_then(|()| plan(&next, opts.seed, now + 20_000, opts.on_stall))
    {
        Ok(np) => {
            *p = np;
            rep.rate_pps = p.rate_pps();
            rep.steered = true;
        }
        // Refused by the controller before; should it happen, the old settings stay.
        Err(e) => {
            rep.error.get_or_insert_with(|| e.to_string());
        }
    }
    // A `start` or a new `count` gives a fresh count.
    let fresh = c.starts() != *starts;
    *starts = c.starts();
    match st.count {
        None => *budget = u64::MAX,
        Some(n) if fresh || st.count != *count_set => {
            *budget = control::share(n, opts.worker.0, opts.worker.1);
        }
        Some(_) => {}
    }
    *count_set = st.count;
    *sending = st.sending;
}

/// Waits until `target` (from `now`), building the next group a few packets at a time
/// while there is slack, sleeping when there is more than `sleep_above`; returns the clock
/// at the end, None when `stop` came during a sleep.
#[allow(clippy::too_many_arguments)]
fn wait_filling(
    clock: &dyn Clock,
    (target, mut now): (u64, u64),
    (nxt, p, rng, rr): (&mut Group, &mut Plan, &mut Rng, &mut usize),
    limits: &Limits,
    (built, budget): (&mut u64, &mut u64),
    sleep_above: u64,
    stop: &AtomicBool,
) -> Option<u64> {
    while now < target {
        let slack = target - now;
        if slack > FILL_SLACK && !nxt.b.is_full() && !limits.count_reached(*built) && *budget > 0 {
            fill_counted(
                nxt,
                p,
                rng,
                rr,
                FILL_CHUNK,
                limits,
                (&mut *built, &mut *budget),
            );
        } else if slack > sleep_above {
            std::thread::sleep(Duration::from_nanos(slack - sleep_above / 2));
            if stop.load(Ordering::Relaxed) {
                return None;
            }
        }
        // Busy-read the clock: no PAUSE, which a hypervisor may take for a spinning
        // lock waiter (pause-loop exiting) and deschedule.
        now = clock.now_ns();
    }
    Some(now)
}

/// At time `now`, for the packet `k` of `cur` scheduled at `t`: when later than may be caught
/// up, moves the rest of the schedule later by the excess; then departs every packet due now
/// that the catch-up bounds let go (the first always), none scheduled past the end of a
/// duration (`deadline`). Returns how many (`m`) leave.
fn depart_due(
    (t, now, deadline): (u64, u64, Option<u64>),
    (cur, nxt): (&mut Group, &mut Group),
    (k, n): (usize, usize),
    p: &mut Plan,
    rep: &mut GenReport,
) -> usize {
    let d = p.pacer.excess(t, now);
    if d > 0 {
        // Later than may be caught up: move the rest of the schedule later by the
        // excess (counted, and this gap is a deviation).
        cur.t[k..n].iter_mut().for_each(|t| *t += d);
        nxt.t[..nxt.b.len()].iter_mut().for_each(|t| *t += d);
        p.streams
            .iter_mut()
            .filter_map(|s| s.sched.as_mut())
            .for_each(|s| s.shift(d));
        p.pacer.shift(d);
        rep.precision.slip(d);
    }
    // Every packet due now that the catch-up bounds let go (the first always), none
    // scheduled past the end of a duration (sent late, in its grace).
    let last_due = now.min(deadline.unwrap_or(u64::MAX));
    let mut m = 0;
    for &s in &cur.t[k..n] {
        if m > 0 && (s > last_due || p.pacer.earliest(s) > now) {
            break;
        }
        p.pacer.depart(s, now);
        m += 1;
    }
    rep.behind_ns = now.saturating_sub(cur.t[k + m - 1]);
    if rep.first_ns == 0 {
        rep.first_ns = cur.t[k].min(now);
    }
    m
}

/// Puts the `m` packets of `cur` from `k` into `out`, each stamped with its departure time
/// `now` (and a probe's payload with it).
fn stamp(out: &mut Batch, cur: &Group, (k, m): (usize, usize), now: u64, p: &Plan) {
    out.extend(&cur.b.descs()[k..k + m]);
    for j in 0..m {
        out.descs_mut()[j].ts = now;
        let s = usize::from(cur.which[k + j]);
        if p.streams[s].probe {
            template::put_time(out.data_mut(j), &p.layouts[s], now);
        }
    }
}

/// The end of a run's span once its loop ended: `ended_at` when the port ended it at a
/// transmit ([`hand_over`]); else now, as every way out of the loop follows the last transmit
/// at once, but when the port ended (its file limit, at a rotation in its clock work) a
/// rated run's span ends at its last departure: the wait for the next one was not part of it.
fn span_end(
    port: &dyn Port,
    ended_at: Option<u64>,
    rated: bool,
    rep: &GenReport,
    clock: &dyn Clock,
) -> u64 {
    match ended_at {
        Some(t) => t,
        None if rated && port.tx_ended() => rep.last_ns,
        None => clock.now_ns(),
    }
}

/// Stamps the `m` packets of `cur` from `k` into `out` at `now`, hands them to `port`
/// ([`transmit`]) and counts what it took. When the port ended (takes no more: tcpdump's `-W`
/// file limit), the rest are counted as not sent and the end of the run's span is returned:
/// the last departure it took with a rate (the schedule's), else after the transmit that
/// took the last packets (this pass began right after it when it took none of this one).
fn hand_over(
    (port, out, abandoned): (&mut (dyn Port + '_), &mut Batch, &mut u64),
    cur: &Group,
    (k, m, now): (usize, usize, u64),
    p: &Plan,
    rep: &mut GenReport,
    clock: &dyn Clock,
) -> Result<Option<u64>, GenError> {
    stamp(out, cur, (k, m), now, p);
    let left = match transmit(port, out, rep, abandoned) {
        Ok(left) => left,
        Err(e) => {
            // Handed to the port, which failed: counted as before the error.
            count_sent(cur, (k, m), now, p, rep);
            return Err(e);
        }
    };
    // Only what the port took (all of it unless it ended) counts as handed over.
    let took = m - left;
    count_sent(cur, (k, took), now, p, rep);
    if left == 0 {
        return Ok(None);
    }
    rep.not_sent += left as u64;
    Ok(Some(if p.rated {
        rep.last_ns
    } else if took > 0 {
        clock.now_ns()
    } else {
        now
    }))
}

/// Counts the `m` packets of `cur` from `k`, handed to the port at `now`: the run's packets
/// and bytes, per stream, their departures' precision, the run's first and last departure.
fn count_sent(cur: &Group, (k, m): (usize, usize), now: u64, p: &Plan, rep: &mut GenReport) {
    if m == 0 {
        return;
    }
    for j in k..k + m {
        rep.per_stream[usize::from(cur.which[j])] += 1;
        rep.bytes += u64::from(cur.b.descs()[j].len);
        if p.rated {
            rep.precision.record(cur.t[j], now);
        }
    }
    if rep.first_ns == 0 {
        rep.first_ns = now;
    }
    rep.last_ns = now;
    rep.pkts += m as u64;
}

/// Sends `out` whole to `port`. A full port gets the CPU (its frames come back when the
/// kernel has sent them); a port stuck for long gets the rest given up, counted in
/// `abandoned` (drops of a full ring). Returns the packets left untaken because the port
/// takes no more ([`Port::tx_ended`]: tcpdump's `-W` file limit), given up at once: 0 when it
/// took them all.
fn transmit(
    port: &mut dyn Port,
    out: &mut Batch,
    rep: &mut GenReport,
    abandoned: &mut u64,
) -> Result<usize, GenError> {
    let mut tries = 0;
    while !out.is_empty() {
        match port.tx(out) {
            Ok(_) if out.is_empty() => break,
            Ok(_) if port.tx_ended() => {
                // Not a full port: it ended, and these will never leave (not a drop).
                let left = out.len();
                out.clear();
                return Ok(left);
            }
            Ok(_) => {
                // The port is full: its frames come back when the kernel (often its
                // softirq thread, on this very core) has sent them. Give it the CPU.
                if tries == 0 {
                    rep.port_full += 1;
                }
                tries += 1;
                if tries > 100_000 {
                    // Stuck: give these up, counted as drops of a full ring.
                    *abandoned += out.len() as u64;
                    out.clear();
                }
                std::thread::yield_now();
            }
            Err(e) => {
                out.clear();
                return Err(e.into());
            }
        }
    }
    Ok(0)
}

/// The run's report once its loop ended with `result`: the port's counters since `base`
/// (with the packets `abandoned`), the error that ended it; the port is flushed.
fn finish(
    port: &mut dyn Port,
    mut rep: GenReport,
    result: Result<(), GenError>,
    base: &PortStats,
    abandoned: u64,
) -> Result<GenReport, GenError> {
    rep.port = port.stats().since(base);
    rep.port.tx_drops.add(DropReason::RingFull, abandoned);
    if port.tx_ended() {
        // tcpdump's -W file limit (or another port's end) ended the run, not a failure.
        rep.ended = Some(
            port.tx_end_note()
                .unwrap_or_else(|| format!("{} took no more packets", port.name())),
        );
    }
    match result {
        // The script's error ends the run; what was sent until then is in the report.
        Err(GenError::Hook(e)) => rep.error = Some(e),
        Err(e) => {
            rep.error.get_or_insert_with(|| e.to_string());
            return Err(e);
        }
        Ok(()) => {}
    }
    port.tx_finish()?;
    rep.port = port.stats().since(base);
    rep.port.tx_drops.add(DropReason::RingFull, abandoned);
    rep.overwritten = port.tx_overwritten();
    Ok(rep)
}

#[cfg(all(test, not(loom)))]
mod report_tests {
    use super::GenReport;

    #[test]
    fn a_run_that_sent_nothing_has_no_span() {
        // Stopped before its first packet: the span is 0, not the clock's reading since 1970.
        let r = GenReport {
            end_ns: 1_795_458_769_666_700_000,
            ..GenReport::default()
        };
        assert_eq!(r.elapsed(), 0.0);
        assert_eq!(r.pps(), 0.0);
        let r = GenReport {
            pkts: 3,
            first_ns: 1_000_000_000,
            last_ns: 1_500_000_000,
            end_ns: 2_000_000_000,
            ..GenReport::default()
        };
        assert_eq!(r.elapsed(), 1.0);
    }
}

#[cfg(all(test, not(loom)))]
mod ended_tests {
    use super::*;
    use crate::time::TscClock;

    /// A sink that takes `room` packets, then no more for good (as a capture file does once
    /// `-G` with `-W` wrote its last file).
    struct EndsAfter {
        room: usize,
        stats: PortStats,
    }

    impl Port for EndsAfter {
        fn name(&self) -> &str {
            "ends-after"
        }
        fn rx(&mut self, _: &mut Batch) -> Result<usize, PortError> {
            Ok(0)
        }
        fn tx(&mut self, batch: &mut Batch) -> Result<usize, PortError> {
            let k = batch.len().min(self.room);
            self.stats.tx_packets += k as u64;
            self.stats.tx_bytes += batch.descs()[..k]
                .iter()
                .map(|d| u64::from(d.len))
                .sum::<u64>();
            batch.free_front(k);
            self.room -= k;
            Ok(k)
        }
        fn tx_ended(&self) -> bool {
            self.room == 0
        }
        fn tx_end_note(&self) -> Option<String> {
            Some("file limit (-W 2) reached".into())
        }
        fn stats(&mut self) -> PortStats {
            self.stats
        }
    }

    fn run_until_the_port_ends(pps: Option<f64>) -> (GenReport, PortStats) {
        let mut port = EndsAfter {
            room: 150,
            stats: PortStats::default(),
        };
        let opts = GenOptions {
            streams: vec![StreamSpec {
                pps,
                ..StreamSpec::default()
            }],
            count: Some(1000),
            duration: Some(Duration::from_secs(20)),
            ..Default::default()
        };
        let clock = TscClock::new();
        let stop = AtomicBool::new(false);
        let rep = run(&mut port, &opts, &clock, &stop, None, |_| {}).unwrap();
        (rep, port.stats())
    }

    #[test]
    fn a_port_that_ends_ends_the_run_and_what_it_left_is_not_sent_nor_dropped() {
        for pps in [None, Some(50_000.0)] {
            let (rep, port) = run_until_the_port_ends(pps);
            // Sent is what the port took; the rest of the batch it left is not sent, and
            // no drop of the port's.
            assert_eq!(rep.pkts, 150, "{pps:?}");
            assert_eq!(rep.taken(), port.tx_packets, "{pps:?}");
            assert_eq!(rep.taken_bytes(), port.tx_bytes, "{pps:?}");
            assert_eq!(rep.per_stream.iter().sum::<u64>(), 150, "{pps:?}");
            assert_eq!(rep.port.tx_drops.total(), 0, "{pps:?}");
            assert_eq!(rep.port_full, 0, "{pps:?}");
            assert!(rep.not_sent > 0, "{pps:?}");
            assert_eq!(rep.ended.as_deref(), Some("file limit (-W 2) reached"));
            assert!(rep.error.is_none(), "{:?}", rep.error);
            // The port did not push back: whatever the rate, not port-limited.
            assert_ne!(rep.shortfall(rep.pps()), Some(Shortfall::Port), "{pps:?}");
        }
    }
}

//! `fwd`: forward packets from one port to another (DPDK l2fwd, PF_RING pfdnabounce).
//!
//! The loop is l2fwd's: receive a burst on each input, filter it, rewrite the MAC addresses,
//! send it on the paired output; what an output cannot take right away waits in that output's
//! buffer (one batch) and is retried on the next pass; every `drain` (~100 µs) every output is
//! flushed; every `interval` the per-port counters go to the printer. A port that had nothing
//! is asked again only when its descriptor polls readable (one `poll` for all idle ports, with
//! a 1 ms sleep when every port is idle), so a busy port never waits behind an idle one.
//!
//! Bytes move without a copy when the output shares the input's pool (a bounce on one xdp or
//! mem port); otherwise the output copies once.

use crate::apps::lua::packet::{Access, Packets};
use crate::apps::lua::{self, ScriptError, ScriptOptions};
use crate::filter::Filter;
use crate::mem::Batch;
use crate::port::xdp::kfwd::KernelFwd;
use crate::port::xdp::sys::poll_many;
use crate::port::{DropReason, Drops, Port, PortError, PortStats};
use crate::time::mono_ns;
use crate::wire::LinkType;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// How often (ns) idle inputs are polled while another input is busy.
const IDLE_POLL_NS: u64 = 20_000;

/// How MAC addresses of forwarded frames are rewritten.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MacRewrite {
    /// Leave frames as they are (`--no-mac-updating`).
    #[default]
    Off,
    /// l2fwd's rewrite: source = the output port's MAC, destination = 02:00:00:00:00:TX_PORTID.
    /// `port_macs[i]` is port i's MAC.
    L2fwd {
        /// MAC of port 0 and port 1.
        port_macs: [[u8; 6]; 2],
    },
    /// Fixed source and destination (`--mac SRC,DST`).
    Fixed {
        /// New source MAC.
        src: [u8; 6],
        /// New destination MAC.
        dst: [u8; 6],
    },
}

impl MacRewrite {
    /// The (src, dst) written into frames leaving port `out`, if any.
    pub fn for_port(&self, out: usize) -> Option<([u8; 6], [u8; 6])> {
        match *self {
            MacRewrite::Off => None,
            MacRewrite::L2fwd { port_macs } => {
                Some((port_macs[out.min(1)], [0x02, 0, 0, 0, 0, out as u8]))
            }
            MacRewrite::Fixed { src, dst } => Some((src, dst)),
        }
    }
}

/// Parses `aa:bb:cc:dd:ee:ff`.
pub fn parse_mac(s: &str) -> Result<[u8; 6], String> {
    let parts: Vec<&str> = s.trim().split([':', '-']).collect();
    if parts.len() != 6 {
        return Err(format!(
            "'{s}' is not a MAC address (write aa:bb:cc:dd:ee:ff)"
        ));
    }
    let mut m = [0u8; 6];
    for (o, p) in m.iter_mut().zip(parts) {
        *o = u8::from_str_radix(p, 16)
            .ok()
            .filter(|_| !p.is_empty() && p.len() <= 2)
            .ok_or_else(|| format!("'{s}' is not a MAC address (bad byte '{p}')"))?;
    }
    Ok(m)
}

/// What to forward and when to stop.
#[derive(Debug)]
pub struct FwdOptions {
    /// Forward port 1 → port 0 too.
    pub bidir: bool,
    /// Filter run in user space on received bursts (None when the inputs run it in the kernel).
    pub filter: Option<Filter>,
    /// MAC rewrite.
    pub mac: MacRewrite,
    /// Interval between statistics.
    pub interval: Duration,
    /// Interval between drains of the outputs (l2fwd: ~100 µs).
    pub drain: Duration,
    /// Stop after this long.
    pub duration: Option<Duration>,
    /// Stop after this many packets were sent (all outputs).
    pub count: Option<u64>,
    /// The first port's counters read when it opened ([`crate::Pair::input_start`]): the
    /// run's starting point for that port, so that what it dropped while the output's open
    /// waited (a FIFO for its reader) is the run's. None: read when the loop starts.
    pub input_start: Option<PortStats>,
}

impl Default for FwdOptions {
    fn default() -> Self {
        FwdOptions {
            bidir: false,
            filter: None,
            mac: MacRewrite::Off,
            interval: Duration::from_secs(1),
            drain: Duration::from_micros(100),
            duration: None,
            count: None,
            input_start: None,
        }
    }
}

/// Counters of one port, l2fwd's three plus the filter's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FwdPortStats {
    /// Packets sent on this port.
    pub sent: u64,
    /// Packets received on this port.
    pub received: u64,
    /// Packets lost on this port: not sent (output full, too big) or dropped by the kernel on
    /// receive.
    pub dropped: u64,
    /// Packets received here that the filter rejected.
    pub filtered: u64,
    /// Bytes received and sent, as the port counts them (0 where the port cannot count them:
    /// the kernel engine).
    pub rx_bytes: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// `dropped` by reason and direction (what is not the port's own counter, a pending burst
    /// given up at the end, is a transmit `ring_full`).
    pub rx_drops: Drops,
    /// Transmit drops by reason.
    pub tx_drops: Drops,
}

/// Counters of all ports at one instant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FwdStats {
    /// Monotonic time (ns).
    pub t_ns: u64,
    /// Port 0 and port 1 (port 1 unused when both ends are one port).
    pub ports: [FwdPortStats; 2],
    /// How many ports there are (1 for a bounce on one port, else 2).
    pub nports: usize,
}

impl FwdPortStats {
    /// `dropped` by reason: receive and transmit drops, the filter's apart (they sum to
    /// `dropped`).
    pub fn losses(&self) -> Drops {
        self.rx_drops
            .without(DropReason::Filter)
            .merged(&self.tx_drops.without(DropReason::Filter))
    }
}

/// `Drops by reason: ring_full=N kernel=M` for `dropped` packets, and what no reason explains
/// (none, unless a port counts a drop it cannot name).
fn reasons_text(dropped: u64, losses: &Drops) -> String {
    let mut s = crate::stats::breakdown(losses);
    let unexplained = dropped.saturating_sub(losses.total());
    if unexplained > 0 {
        if !s.is_empty() {
            s.push(' ');
        }
        s.push_str(&format!("unexplained={unexplained}"));
    }
    s
}

impl FwdStats {
    /// Sum over the ports.
    pub fn total(&self) -> FwdPortStats {
        let mut t = FwdPortStats::default();
        for p in &self.ports[..self.nports] {
            t.sent += p.sent;
            t.received += p.received;
            t.dropped += p.dropped;
            t.filtered += p.filtered;
        }
        t
    }
}

/// l2fwd's statistics block.
pub fn l2fwd_block(s: &FwdStats) -> String {
    let mut o = String::with_capacity(600);
    o.push_str("\nPort statistics ====================================");
    for (i, p) in s.ports[..s.nports].iter().enumerate() {
        o.push_str(&format!(
            "\nStatistics for port {i} ------------------------------\
             \nPackets sent: {:>24}\
             \nPackets received: {:>20}\
             \nPackets dropped: {:>21}",
            p.sent, p.received, p.dropped
        ));
        if p.dropped > 0 {
            o.push_str(&format!(
                "\nDrops by reason: {}",
                reasons_text(p.dropped, &p.losses())
            ));
        }
        if p.filtered > 0 {
            o.push_str(&format!("\nPackets filtered: {:>20}", p.filtered));
        }
    }
    let t = s.total();
    o.push_str(&format!(
        "\nAggregate statistics ===============================\
         \nTotal packets sent: {:>18}\
         \nTotal packets received: {:>14}\
         \nTotal packets dropped: {:>15}",
        t.sent, t.received, t.dropped
    ));
    if t.dropped > 0 {
        let mut all = Drops::default();
        for p in &s.ports[..s.nports] {
            all = all.merged(&p.losses());
        }
        o.push_str(&format!(
            "\nTotal drops by reason: {}",
            reasons_text(t.dropped, &all)
        ));
    }
    if t.filtered > 0 {
        o.push_str(&format!("\nTotal packets filtered: {:>14}", t.filtered));
    }
    o.push_str("\n====================================================\n");
    o
}

/// Why the loop ended (one [`Ended`] for every worker).
pub use crate::apps::worker::Ended;
use crate::apps::worker::{Limits, Ticker};

/// How a run ended.
#[derive(Debug)]
pub struct FwdReport {
    /// Final counters.
    pub stats: FwdStats,
    /// Why it ended.
    pub ended: Ended,
    /// The port error that ended it, if any.
    pub error: Option<PortError>,
    /// The batch filter's error that ended it, if any.
    pub script_error: Option<String>,
}

/// The ports: two, or one that is both input and output (bounce).
pub enum Ports<'a> {
    /// Input port 0, output port 1 (and back with `bidir`).
    Two(&'a mut dyn Port, &'a mut dyn Port),
    /// One port: what it receives goes back out of it.
    One(&'a mut dyn Port),
}

/// Decides per burst which packets are forwarded (a Lua function, say): called once per
/// received batch, after the BPF filter.
pub trait BatchFilter {
    /// The packets of `batch` that must not be forwarded: bit `i` for packet `i` (0: forward
    /// them all). An error stops the forwarder.
    fn filter(&mut self, batch: &Batch) -> Result<u64, String>;
}

/// `--script`: the script's `filter(pkts, n)`, called once per received burst; `pkts[1..n]` are
/// the packet objects of every linerate script (docs/lua.md), read-only here, and
/// `pkts[i]:drop()` keeps packet `i` from being forwarded (it counts as filtered).
pub struct LuaFilter {
    script: lua::Loaded,
    pkts: Packets,
}

impl LuaFilter {
    /// Loads the script file `path` into a state set up by `opts`.
    pub fn load(path: &str, opts: &ScriptOptions) -> Result<LuaFilter, ScriptError> {
        let src = lua::read_script(path)?;
        Self::from_source(path, &src, opts)
    }

    /// Loads a script from memory (`name` appears in error messages).
    pub fn from_source(
        name: &str,
        src: &[u8],
        opts: &ScriptOptions,
    ) -> Result<LuaFilter, ScriptError> {
        let script = lua::load(name, src, opts, "filter(pkts, n)", |_| Ok(()))?;
        let access = Access {
            tool: "fwd",
            write: false,
            drop: true,
        };
        let pkts = Packets::new(&script.lua, access, LinkType::ETHERNET)
            .map_err(|e| ScriptError::of(&e, &script.name, &script.lua))?;
        Ok(LuaFilter { script, pkts })
    }
}

impl BatchFilter for LuaFilter {
    fn filter(&mut self, batch: &Batch) -> Result<u64, String> {
        let n = self.pkts.load(batch, &[])?;
        let s = &self.script;
        let r = s.func.call::<()>((self.pkts.table(), n));
        // The batch ends without a pass over its slots: the next load overwrites them, and the
        // state runs no code before it but at its close, after `drop` below cleared them.
        let drops = self.pkts.drops();
        r.map(|()| drops)
            .map_err(|e| lua::error_line(&e, &s.name, &s.lua))
    }
}

impl Drop for LuaFilter {
    /// The slots no longer point at the last batch's frames when the state closes (its
    /// `__gc` functions run then): the state goes first of the fields.
    fn drop(&mut self) {
        self.pkts.done();
    }
}

/// Forwards until a limit, `stop`, or an error; calls `on_tick` every interval.
pub fn run(
    ports: Ports<'_>,
    opts: &FwdOptions,
    stop: &AtomicBool,
    on_tick: impl FnMut(&FwdStats),
) -> FwdReport {
    run_with(ports, opts, None, stop, on_tick)
}

/// As [`run`], with a per-batch filter (packets it rejects count as filtered).
pub fn run_with(
    ports: Ports<'_>,
    opts: &FwdOptions,
    mut hook: Option<&mut dyn BatchFilter>,
    stop: &AtomicBool,
    mut on_tick: impl FnMut(&FwdStats),
) -> FwdReport {
    let mut list: Vec<&mut dyn Port> = match ports {
        Ports::Two(a, b) => vec![a, b],
        Ports::One(a) => vec![a],
    };
    let np = list.len();
    let dirs = directions(np, opts.bidir);
    let mut st = FwdStats {
        nports: np,
        ..Default::default()
    };
    // Port drops as the ports count them, at the start (subtracted so a report starts at 0).
    let lost = |s: &PortStats| crate::stats::lost(&s.rx_drops) + crate::stats::lost(&s.tx_drops);
    let base_stats: Vec<PortStats> = list
        .iter_mut()
        .enumerate()
        .map(|(i, p)| match opts.input_start {
            Some(s) if i == 0 => s,
            _ => p.stats(),
        })
        .collect();
    let base: Vec<u64> = base_stats.iter().map(lost).collect();
    let mut own_drops = [0u64; 2];
    // What each output's tx took, sent or dropped by the port itself (counted in its tx_drops):
    // `sent` is this less those drops, worked out at each snapshot.
    let mut taken = [0u64; 2];
    let mut rx = Batch::new();
    let mut pending: Vec<Batch> = (0..np).map(|_| Batch::new()).collect();
    let mut idle = vec![false; np];
    let is_input: Vec<bool> = (0..np).map(|p| dirs.iter().any(|&(i, _)| i == p)).collect();
    let mut script_error = None;
    let mut polls = IdlePolls {
        fds: list.iter().map(|p| p.poll_fd()).collect(),
        pfds: Vec::with_capacity(np),
        ready: Vec::with_capacity(np),
        next_idle_poll: 0,
    };
    let t0 = mono_ns();
    let mut ticker = Ticker::new(t0, opts.interval);
    let mut drain = Ticker::new(t0, opts.drain);
    let limits = Limits::new(opts.count, opts.duration, t0);
    let mut error = None;
    let mut idle_passes = 0u32;

    let ended = 'outer: loop {
        if stop.load(Ordering::Relaxed) {
            break Ended::Stopped;
        }
        // Ask idle inputs whether they have something now (one poll for all of them): at once
        // with a 1 ms sleep when every input is idle, else without waiting and at most every
        // IDLE_POLL_NS, so that a busy input is not slowed by a system call per burst.
        let now = mono_ns();
        let all_idle =
            (0..np).all(|i| idle[i] || !is_input[i]) && pending.iter().all(|b| b.is_empty());
        polls.wake_idle(&mut idle, all_idle, now);
        let mut got = 0usize;
        for &(i, o) in &dirs {
            // Retry what the output could not take last time before taking more.
            if !pending[o].is_empty() {
                match list[o].tx(&mut pending[o]) {
                    Ok(n) => {
                        st.ports[o].sent += n as u64;
                        taken[o] += n as u64;
                    }
                    Err(e) => {
                        error = Some(e);
                        break 'outer Ended::Error;
                    }
                }
                if !pending[o].is_empty() {
                    continue; // output still full: leave the input to the kernel's ring
                }
            }
            if idle[i] {
                continue;
            }
            // Under -c, an input gives no more than the packets still to forward (those sent
            // and those waiting in a pending batch count), so the run stops at exactly N as
            // tcpdump's and tcpreplay's do, not at the end of a batch.
            if opts.count.is_some() {
                let queued: usize = pending.iter().map(|b| b.len()).sum();
                let room = limits.room(st.total().sent + queued as u64, crate::mem::BATCH);
                if room == 0 {
                    continue;
                }
                rx.set_limit(room);
            }
            let n = match list[i].rx(&mut rx) {
                Ok(n) => n,
                Err(e) => {
                    error = Some(e);
                    break 'outer Ended::Error;
                }
            };
            if n == 0 {
                idle[i] = true;
                continue;
            }
            got += n;
            st.ports[i].received += n as u64;
            let filtered = &mut st.ports[i].filtered;
            if let Err(e) = filter_batch(&mut rx, opts, hook.as_deref_mut(), filtered) {
                script_error = Some(e);
                break 'outer Ended::Error;
            }
            rewrite_macs(&mut rx, opts, o);
            match list[o].tx(&mut rx) {
                Ok(n) => {
                    st.ports[o].sent += n as u64;
                    taken[o] += n as u64;
                }
                Err(e) => {
                    rx.clear();
                    error = Some(e);
                    break 'outer Ended::Error;
                }
            }
            if !rx.is_empty() {
                // Keep the rest for the next pass; bytes of ring ports are only valid until the
                // next rx on the input, so the pending batch must own them: when it cannot (an
                // external pool), they are dropped like l2fwd's full tx buffer.
                let keep = rx.pool().is_some_and(|p| p.allocates()) && pending[o].is_empty();
                if keep {
                    std::mem::swap(&mut pending[o], &mut rx);
                } else {
                    own_drops[o] += rx.len() as u64;
                    rx.clear();
                }
            }
        }
        if got == 0 && polls.pfds.is_empty() {
            // Only unpollable ports (mem), all empty: back off a little after a while.
            idle_passes += 1;
            if idle_passes > 64 {
                std::thread::sleep(Duration::from_micros(20));
            }
        } else {
            idle_passes = 0;
        }
        if opts.count.is_some() && limits.count_reached(st.total().sent) {
            break Ended::Count;
        }
        if drain.due(now) {
            let sent = st.total().sent;
            if let Some(end) = drain_and_check(&mut list, &is_input, &limits, sent, now, &mut error)
            {
                break end;
            }
        }
        if ticker.due(now) {
            snapshot(
                &mut st,
                &mut list,
                (&base, &base_stats),
                (&own_drops, &taken),
                now,
            );
            on_tick(&st);
        }
    };
    last_drain(
        &mut list,
        &mut pending,
        &mut st,
        (&mut own_drops, &mut taken),
        &mut error,
    );
    snapshot(
        &mut st,
        &mut list,
        (&base, &base_stats),
        (&own_drops, &taken),
        mono_ns(),
    );
    FwdReport {
        stats: st,
        ended,
        error,
        script_error,
    }
}

/// The (input, output) pairs of `np` ports: one port forwards to itself; two forward one
/// way, or both ways when `bidir`.
fn directions(np: usize, bidir: bool) -> Vec<(usize, usize)> {
    if np == 1 {
        vec![(0, 0)]
    } else if bidir {
        vec![(0, 1), (1, 0)]
    } else {
        vec![(0, 1)]
    }
}

/// Waking idle inputs: their poll descriptors, and when they were last asked.
struct IdlePolls {
    fds: Vec<Option<i32>>,
    pfds: Vec<i32>,
    ready: Vec<bool>,
    next_idle_poll: u64,
}

impl IdlePolls {
    /// Asks idle inputs whether they have something now (one poll for all of them): at once
    /// with a 1 ms sleep when every input is idle (`all_idle`), else without waiting and at
    /// most every IDLE_POLL_NS, so that a busy input is not slowed by a system call per
    /// burst. An input that has something, or that cannot be polled, is no longer idle.
    fn wake_idle(&mut self, idle: &mut [bool], all_idle: bool, now: u64) {
        let IdlePolls {
            fds,
            pfds,
            ready,
            next_idle_poll,
        } = self;
        pfds.clear();
        if idle.iter().any(|&i| i) && (all_idle || now >= *next_idle_poll) {
            *next_idle_poll = now + IDLE_POLL_NS;
            for (i, fd) in fds.iter().enumerate() {
                if idle[i] {
                    if let Some(fd) = fd {
                        pfds.push(*fd);
                    } else {
                        idle[i] = false;
                    }
                }
            }
            if !pfds.is_empty() {
                let wait_ms = if all_idle { 1 } else { 0 };
                ready.clear();
                ready.resize(pfds.len(), false);
                poll_many(pfds, wait_ms, ready);
                let mut k = 0;
                for (i, fd) in fds.iter().enumerate() {
                    if idle[i] && fd.is_some() {
                        if ready[k] {
                            idle[i] = false;
                        }
                        k += 1;
                    }
                }
            }
        }
    }
}

/// Every drain interval: flushes every port and does its clock work (a capture file's -G);
/// then whether the run ends (an error, the count sent, every input finished, time up).
fn drain_and_check(
    list: &mut [&mut dyn Port],
    is_input: &[bool],
    limits: &Limits,
    sent: u64,
    now: u64,
    error: &mut Option<PortError>,
) -> Option<Ended> {
    for p in list.iter_mut() {
        if let Err(e) = p.flush().and_then(|()| p.tick(now)) {
            *error = Some(e);
            return Some(Ended::Error);
        }
    }
    if limits.count_reached(sent) {
        return Some(Ended::Count);
    }
    if (0..list.len()).all(|i| !is_input[i] || list[i].is_finished()) {
        return Some(Ended::EndOfInput);
    }
    if limits.time_up(now) {
        return Some(Ended::Duration);
    }
    None
}

/// Applies the input's filters to a received batch: `opts.filter`, then the per-batch hook
/// (a script); what they reject is counted in `filtered`. A hook that fails: the batch is not
/// forwarded (counted as filtered, never lost) and its error is returned, with how many packets
/// that batch held.
fn filter_batch(
    rx: &mut Batch,
    opts: &FwdOptions,
    hook: Option<&mut (dyn BatchFilter + '_)>,
    filtered: &mut u64,
) -> Result<(), String> {
    if let Some(f) = &opts.filter {
        *filtered += rx.retain(|p| f.matches_pkt(p)) as u64;
    }
    if let Some(h) = hook {
        let drops = match h.filter(rx) {
            Ok(d) => d,
            Err(e) => {
                let n = rx.len();
                *filtered += n as u64;
                rx.clear();
                let s = if n == 1 { "" } else { "s" };
                return Err(format!(
                    "{e} (the {n} packet{s} of the batch it was given not forwarded, counted as \
                     filtered)"
                ));
            }
        };
        if drops == 0 {
            return Ok(()); // nothing dropped: no pass over the batch to keep it all
        }
        let mut k = 0;
        *filtered += rx.retain(|_| {
            k += 1;
            k > 64 || drops >> (k - 1) & 1 == 0
        }) as u64;
    }
    Ok(())
}

/// Puts output `o`'s addresses (`--mac`) into every frame of `rx`.
fn rewrite_macs(rx: &mut Batch, opts: &FwdOptions, o: usize) {
    if let Some((src, dst)) = opts.mac.for_port(o) {
        for k in 0..rx.len() {
            let d = rx.data_mut(k);
            if d.len() >= 12 {
                d[..6].copy_from_slice(&dst);
                d[6..12].copy_from_slice(&src);
            }
        }
    }
}

/// The last drain, bounded: what waits for each output is sent (a few tries) or counted as
/// the forwarder's own drop, then every port is flushed.
fn last_drain(
    list: &mut [&mut dyn Port],
    pending: &mut [Batch],
    st: &mut FwdStats,
    (own_drops, taken): (&mut [u64; 2], &mut [u64; 2]),
    error: &mut Option<PortError>,
) {
    for (o, b) in pending.iter_mut().enumerate() {
        for _ in 0..50 {
            if b.is_empty() {
                break;
            }
            match list[o].tx(b) {
                Ok(n) => {
                    st.ports[o].sent += n as u64;
                    taken[o] += n as u64;
                }
                Err(e) => {
                    error.get_or_insert(e);
                    break;
                }
            }
            let _ = list[o].flush();
            std::thread::sleep(Duration::from_micros(100));
        }
        own_drops[o] += b.len() as u64;
        b.clear();
    }
    for _ in 0..20 {
        for p in list.iter_mut() {
            if let Err(e) = p.flush() {
                error.get_or_insert(e);
            }
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    // What a transmit ring still holds that the kernel never took (its link's peer down) is
    // counted dropped, not forwarded.
    for p in list.iter_mut() {
        if let Err(e) = p.tx_finish() {
            error.get_or_insert(e);
        }
    }
}

/// Runs the kernel forwarder (an XDP program already attached by [`KernelFwd::open`]) until a
/// limit or `stop`: looks at `stop` and the clock every 10 ms, and reads its counters every
/// 10 ms only under a count limit, else at each interval for `on_tick` and at the end. `count`
/// stops the run once that many were sent (the kernel may send a few more before the program
/// is removed). Port `i`'s `sent` = frames redirected out of it less its
/// interface's transmit drops since the start (frames its driver refused after the redirect
/// never left); `dropped` = the program's drops for that output + the interface's own rx/tx
/// drop counters since the start (see [`KernelFwd::device_drops`]).
pub fn run_kernel(
    k: &mut KernelFwd,
    opts: &FwdOptions,
    stop: &AtomicBool,
    mut on_tick: impl FnMut(&FwdStats),
) -> FwdReport {
    let base = k.device_drops();
    let t0 = mono_ns();
    let mut ticker = Ticker::new(t0, opts.interval);
    let limits = Limits::new(opts.count, opts.duration, t0);
    let mut st = FwdStats {
        nports: k.nports(),
        ..Default::default()
    };
    let read = |k: &mut KernelFwd, st: &mut FwdStats| {
        let c = k.counters();
        let dev = k.device_drops();
        st.t_ns = mono_ns();
        for p in 0..st.nports {
            let rx = dev[p].0.saturating_sub(base[p].0);
            let tx = dev[p].1.saturating_sub(base[p].1);
            st.ports[p].received = c[p][0];
            // Redirected out of p, less what p's driver refused afterwards: what left.
            st.ports[p].sent = c[p][1].saturating_sub(tx);
            st.ports[p].dropped = c[p][2] + rx + tx;
            // The program's drops and the interfaces' own counters: the kernel's.
            let mut rd = Drops::default();
            rd.add(DropReason::Kernel, c[p][2] + rx);
            let mut td = Drops::default();
            td.add(DropReason::Kernel, tx);
            st.ports[p].rx_drops = rd;
            st.ports[p].tx_drops = td;
        }
    };
    let ended = loop {
        if stop.load(Ordering::Relaxed) {
            break Ended::Stopped;
        }
        std::thread::sleep(Duration::from_millis(10));
        // The counters are read (map lookups, an ioctl and a netlink request per port) only when
        // something needs them: a count limit, the end, a statistics block. Reading them at
        // 100 Hz for nothing took syscalls on the forwarding core that xdp-bench does not.
        let now = mono_ns();
        if opts.count.is_none() && !limits.time_up(now) && now < ticker.next() {
            continue;
        }
        read(k, &mut st);
        let now = st.t_ns;
        if limits.count_reached(st.total().sent) {
            break Ended::Count;
        }
        if limits.time_up(now) {
            break Ended::Duration;
        }
        if ticker.due(now) {
            on_tick(&st);
        }
    };
    read(k, &mut st);
    FwdReport {
        stats: st,
        ended,
        error: None,
        script_error: None,
    }
}

/// The ports of one thread of [`run_threads`]: its share of the input's queues (port 0, whose
/// transmit goes out of its first queue) and of the output's (port 1), or one share for a
/// bounce.
pub struct ThreadPorts {
    /// Port 0: the input queues this thread reads (and, with `bidir`, sends back out of).
    pub input: Box<dyn Port>,
    /// Port 1: the output queues this thread sends out of (and, with `bidir`, reads); None for
    /// a bounce.
    pub output: Option<Box<dyn Port>>,
}

/// Adds `b`'s counters to `a`'s (the ports of several threads that make one port).
pub fn add_stats(a: &mut FwdStats, b: &FwdStats) {
    a.t_ns = a.t_ns.max(b.t_ns);
    a.nports = a.nports.max(b.nports);
    for (x, y) in a.ports.iter_mut().zip(&b.ports) {
        x.sent += y.sent;
        x.received += y.received;
        x.dropped += y.dropped;
        x.filtered += y.filtered;
        x.rx_bytes += y.rx_bytes;
        x.tx_bytes += y.tx_bytes;
        x.rx_drops = x.rx_drops.merged(&y.rx_drops);
        x.tx_drops = x.tx_drops.merged(&y.tx_drops);
    }
}

/// What a run on several threads did: the sum, and each thread's report.
#[derive(Debug)]
pub struct ThreadsReport {
    /// The threads' counters added up; `ended` why the run ended, `error` the first error.
    pub total: FwdReport,
    /// Each thread's report, in the order of the shares.
    pub threads: Vec<FwdReport>,
}

/// Forwards on one thread per [`ThreadPorts`] (as DPDK's l2fwd runs one lcore per queue): each
/// thread runs the loop of [`run_with`] on its own queues, nothing in between. `opts` is made
/// by each thread for itself (a compiled filter stays on its thread); its `count` and
/// `duration` are the run's: the calling thread adds the threads' counters up (they publish
/// them every `PUBLISH` ms) and stops them all once `count` packets were sent in all (a few
/// more may go in the last milliseconds, as with the kernel engine), at `duration`, on `stop`,
/// or when one of them fails. `on_tick` is called on the calling thread every `interval` with
/// the sum and each thread's counters.
pub fn run_threads(
    shares: Vec<ThreadPorts>,
    opts: impl Fn() -> FwdOptions + Sync,
    stop: &AtomicBool,
    mut on_tick: impl FnMut(&FwdStats, &[FwdStats]),
) -> ThreadsReport {
    /// How often each thread publishes its counters (ms).
    const PUBLISH: u64 = 20;
    let n = shares.len();
    let model = opts();
    let (count, duration, interval) = (model.count, model.duration, model.interval);
    drop(model);
    let halt = AtomicBool::new(false);
    let slots: Vec<std::sync::Mutex<FwdStats>> = (0..n)
        .map(|_| std::sync::Mutex::new(FwdStats::default()))
        .collect();
    let running = std::sync::atomic::AtomicUsize::new(n);
    let failed = AtomicBool::new(false);
    let t0 = mono_ns();
    let read = |slots: &[std::sync::Mutex<FwdStats>]| -> Vec<FwdStats> {
        slots
            .iter()
            .map(|m| *m.lock().unwrap_or_else(|e| e.into_inner()))
            .collect()
    };
    let sum = |list: &[FwdStats]| {
        let mut t = FwdStats::default();
        for s in list {
            add_stats(&mut t, s);
        }
        t
    };
    let mut ended = None;
    let reports: Vec<FwdReport> = std::thread::scope(|s| {
        let handles: Vec<_> = shares
            .into_iter()
            .enumerate()
            .map(|(i, mut share)| {
                let (halt, slot, running, failed, opts) =
                    (&halt, &slots[i], &running, &failed, &opts);
                std::thread::Builder::new()
                    .name(format!("fwd-{i}"))
                    .spawn_scoped(s, move || {
                        let o = FwdOptions {
                            interval: Duration::from_millis(PUBLISH),
                            count: None,
                            duration: None,
                            ..opts()
                        };
                        let ports = match share.output.as_mut() {
                            Some(out) => Ports::Two(share.input.as_mut(), out.as_mut()),
                            None => Ports::One(share.input.as_mut()),
                        };
                        let r = run_with(ports, &o, None, halt, |st| {
                            *slot.lock().unwrap_or_else(|e| e.into_inner()) = *st;
                        });
                        *slot.lock().unwrap_or_else(|e| e.into_inner()) = r.stats;
                        if r.ended == Ended::Error {
                            failed.store(true, Ordering::Release);
                        }
                        running.fetch_sub(1, Ordering::Release);
                        r
                    })
                    .expect("spawn a forwarding thread")
            })
            .collect();
        let interval = interval.as_nanos().max(1) as u64;
        let mut next_tick = t0 + interval;
        while running.load(Ordering::Acquire) > 0 {
            std::thread::sleep(Duration::from_millis(PUBLISH / 2));
            let now = mono_ns();
            if ended.is_none() {
                let why = if stop.load(Ordering::Relaxed) {
                    Some(Ended::Stopped)
                } else if failed.load(Ordering::Acquire) {
                    Some(Ended::Error)
                } else if duration.is_some_and(|d| now >= t0 + d.as_nanos() as u64) {
                    Some(Ended::Duration)
                } else if count.is_some_and(|c| sum(&read(&slots)).total().sent >= c) {
                    Some(Ended::Count)
                } else {
                    None
                };
                if why.is_some() {
                    ended = why;
                    halt.store(true, Ordering::Release);
                }
            }
            if now >= next_tick {
                let per = read(&slots);
                on_tick(&sum(&per), &per);
                next_tick = now + interval;
            }
        }
        handles
            .into_iter()
            .map(|h| h.join().expect("forwarding thread panicked"))
            .collect()
    });
    let per: Vec<FwdStats> = reports.iter().map(|r| r.stats).collect();
    let mut reports = reports;
    let ended = ended.unwrap_or(if reports.iter().all(|r| r.ended == Ended::EndOfInput) {
        Ended::EndOfInput
    } else {
        Ended::Error
    });
    let error = reports.iter_mut().find_map(|r| r.error.take());
    let script_error = reports.iter_mut().find_map(|r| r.script_error.take());
    ThreadsReport {
        total: FwdReport {
            stats: sum(&per),
            ended,
            error,
            script_error,
        },
        threads: reports,
    }
}

fn snapshot(
    st: &mut FwdStats,
    list: &mut [&mut dyn Port],
    (base, base_stats): (&[u64], &[PortStats]),
    (own, taken): (&[u64; 2], &[u64; 2]),
    now: u64,
) {
    st.t_ns = now;
    for (i, p) in list.iter_mut().enumerate() {
        let s = p.stats();
        let lost = crate::stats::lost(&s.rx_drops) + crate::stats::lost(&s.tx_drops);
        let x = &mut st.ports[i];
        x.dropped = lost.saturating_sub(base[i]) + own[i];
        let b = &base_stats[i];
        x.rx_bytes = s.rx_bytes.saturating_sub(b.rx_bytes);
        x.tx_bytes = s.tx_bytes.saturating_sub(b.tx_bytes);
        x.rx_drops = s.rx_drops.since(&b.rx_drops);
        x.rx_drops.add(DropReason::Filter, x.filtered);
        x.tx_drops = s.tx_drops.since(&b.tx_drops);
        // A frame counts as sent only when the port did not drop it (a full wire, too big).
        x.sent = taken[i].saturating_sub(crate::stats::lost(&x.tx_drops));
        x.tx_drops.add(DropReason::RingFull, own[i]);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::mem::Desc;
    use crate::port::mem::wire;
    use crate::port::{LinkType, PortOptions};

    fn udp(dport: u16, seq: u32) -> Vec<u8> {
        let mut f = vec![0u8; 60];
        f[..6].copy_from_slice(&[0xaa; 6]);
        f[6..12].copy_from_slice(&[0xbb; 6]);
        f[12] = 0x08;
        f[14] = 0x45;
        f[16..18].copy_from_slice(&46u16.to_be_bytes());
        f[22] = 64;
        f[23] = 17;
        f[36..38].copy_from_slice(&dport.to_be_bytes());
        f[42..46].copy_from_slice(&seq.to_be_bytes());
        f
    }

    fn send(p: &mut dyn Port, frames: &[Vec<u8>]) {
        let mut b = Batch::with_pool(p.pool().unwrap());
        for f in frames {
            let mut fr = b.alloc().unwrap();
            fr.buf()[..f.len()].copy_from_slice(f);
            fr.push(Desc {
                len: f.len() as u32,
                wire_len: f.len() as u32,
                ..Default::default()
            });
            if b.is_full() {
                assert_eq!(p.tx(&mut b).unwrap(), 64);
            }
        }
        p.tx(&mut b).unwrap();
    }

    fn drain(p: &mut dyn Port) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut b = Batch::new();
        while p.rx(&mut b).unwrap() > 0 {
            out.extend(b.iter().map(|x| x.data.to_vec()));
            b.clear();
        }
        out
    }

    #[test]
    fn forwards_filters_and_rewrites_like_l2fwd() {
        let o = PortOptions::default();
        let (mut src, mut fin) = wire("fwd-t-in", &o).unwrap();
        let (mut fout, mut sink) = wire("fwd-t-out", &o).unwrap();
        let frames: Vec<Vec<u8>> = (0..500)
            .map(|i| udp(if i % 5 == 0 { 53 } else { 9 }, i))
            .collect();
        send(&mut src, &frames);
        let opts = FwdOptions {
            filter: Some(Filter::compile("udp port 9", LinkType::ETHERNET).unwrap()),
            mac: MacRewrite::L2fwd {
                port_macs: [[2, 0, 0, 0, 0xaa, 0], [2, 0, 0, 0, 0xaa, 1]],
            },
            count: Some(400),
            duration: Some(Duration::from_secs(5)),
            ..Default::default()
        };
        let stop = AtomicBool::new(false);
        let r = run(Ports::Two(&mut fin, &mut fout), &opts, &stop, |_| {});
        assert_eq!(r.ended, Ended::Count);
        let t = r.stats.total();
        assert_eq!(
            (t.received, t.sent, t.filtered, t.dropped),
            (500, 400, 100, 0)
        );
        assert_eq!(r.stats.ports[0].received, 500);
        assert_eq!(r.stats.ports[1].sent, 400);
        let got = drain(&mut sink);
        assert_eq!(got.len(), 400);
        for (k, g) in got.iter().enumerate() {
            assert_eq!(
                &g[..6],
                &[2, 0, 0, 0, 0, 1],
                "dst = 02:00:00:00:00:TX_PORTID"
            );
            assert_eq!(&g[6..12], &[2, 0, 0, 0, 0xaa, 1], "src = output port MAC");
            assert_eq!(
                &g[12..],
                &frames[(k / 4) * 5 + k % 4 + 1][12..],
                "rest unchanged"
            );
        }
    }

    #[test]
    fn bidir_and_bounce() {
        let o = PortOptions::default();
        let (mut a, mut fa) = wire("fwd-t-bidir-a", &o).unwrap();
        let (mut fb, mut b) = wire("fwd-t-bidir-b", &o).unwrap();
        let fa_frames: Vec<Vec<u8>> = (0..130).map(|i| udp(9, i)).collect();
        let fb_frames: Vec<Vec<u8>> = (0..70).map(|i| udp(9, 1000 + i)).collect();
        send(&mut a, &fa_frames);
        send(&mut b, &fb_frames);
        let opts = FwdOptions {
            bidir: true,
            mac: MacRewrite::Off,
            count: Some(200),
            duration: Some(Duration::from_secs(5)),
            ..Default::default()
        };
        let stop = AtomicBool::new(false);
        let r = run(Ports::Two(&mut fa, &mut fb), &opts, &stop, |_| {});
        assert_eq!(r.stats.ports[0].sent, 70);
        assert_eq!(r.stats.ports[1].sent, 130);
        assert_eq!(drain(&mut b), fa_frames, "unchanged without MAC updating");
        assert_eq!(drain(&mut a), fb_frames);

        // Bounce on one port: out the way it came, zero copy (same pool).
        let (mut peer, mut one) = wire("fwd-t-bounce", &o).unwrap();
        send(&mut peer, &fa_frames);
        let opts = FwdOptions {
            mac: MacRewrite::Fixed {
                src: [1; 6],
                dst: [2; 6],
            },
            count: Some(130),
            duration: Some(Duration::from_secs(5)),
            ..Default::default()
        };
        let r = run(Ports::One(&mut one), &opts, &stop, |_| {});
        assert_eq!(r.stats.nports, 1);
        assert_eq!(r.stats.total().sent, 130);
        let back = drain(&mut peer);
        assert_eq!(back.len(), 130);
        assert!(back.iter().all(|f| f[..6] == [2; 6] && f[6..12] == [1; 6]));
    }

    struct EveryOther;
    impl BatchFilter for EveryOther {
        fn filter(&mut self, batch: &Batch) -> Result<u64, String> {
            let odd = batch
                .iter()
                .enumerate()
                .filter(|(_, p)| p.data[45] % 2 != 0);
            Ok(odd.fold(0, |d, (i, _)| d | 1 << i))
        }
    }

    struct Fails;
    impl BatchFilter for Fails {
        fn filter(&mut self, _: &Batch) -> Result<u64, String> {
            Err("script.lua:3: boom".into())
        }
    }

    #[test]
    fn batch_filter_decides_and_its_error_stops_the_run() {
        let o = PortOptions::default();
        let (mut src, mut fin) = wire("fwd-t-hook-in", &o).unwrap();
        let (mut fout, mut sink) = wire("fwd-t-hook-out", &o).unwrap();
        let frames: Vec<Vec<u8>> = (0..300).map(|i| udp(9, i)).collect();
        send(&mut src, &frames);
        let opts = FwdOptions {
            count: Some(150),
            duration: Some(Duration::from_secs(5)),
            ..Default::default()
        };
        let stop = AtomicBool::new(false);
        let mut h = EveryOther;
        let r = run_with(
            Ports::Two(&mut fin, &mut fout),
            &opts,
            Some(&mut h),
            &stop,
            |_| {},
        );
        assert_eq!(r.ended, Ended::Count);
        // Read no further than the 150th kept frame (the 299th): 149 filtered out before it.
        assert_eq!(r.stats.ports[0].filtered, 149);
        let got = drain(&mut sink);
        assert_eq!(got.len(), 150);
        assert!(got.iter().all(|f| f[45] % 2 == 0));

        send(&mut src, &frames[..10]);
        let mut f = Fails;
        let r = run_with(
            Ports::Two(&mut fin, &mut fout),
            &opts,
            Some(&mut f),
            &stop,
            |_| {},
        );
        assert_eq!(r.ended, Ended::Error);
        assert_eq!(
            r.script_error.as_deref(),
            Some(
                "script.lua:3: boom (the 11 packets of the batch it was given not forwarded, \
                 counted as filtered)"
            )
        );
        // The 300th frame the first run left unread, then the 10 sent now: one batch.
        assert_eq!(r.stats.ports[0].received, 11);
        assert_eq!(r.stats.ports[0].filtered, 11);
        assert!(drain(&mut sink).is_empty());
    }

    #[test]
    fn stats_block_has_l2fwd_shape_and_macs_parse() {
        let mut s = FwdStats {
            nports: 2,
            ..Default::default()
        };
        s.ports[0].received = 20_289_050;
        s.ports[1].sent = 20_288_314;
        s.ports[1].dropped = 73;
        let b = l2fwd_block(&s);
        for want in [
            "Port statistics ====",
            "Statistics for port 0 ----",
            "Statistics for port 1 ----",
            "Packets received:             20289050",
            "Packets sent:                 20288314",
            "Packets dropped:                    73",
            "Aggregate statistics ====",
            "Total packets dropped:              73",
        ] {
            assert!(b.contains(want), "{want:?} in\n{b}");
        }
        assert_eq!(parse_mac("02:00:00:00:00:0a").unwrap(), [2, 0, 0, 0, 0, 10]);
        assert!(parse_mac("02:00:00:00:00").is_err());
        assert!(parse_mac("02:00:00:00:00:1g0").is_err());
        assert_eq!(
            MacRewrite::L2fwd {
                port_macs: [[1; 6], [3; 6]]
            }
            .for_port(0),
            Some(([1; 6], [2, 0, 0, 0, 0, 0]))
        );
    }

    #[test]
    fn every_drop_has_a_reason() {
        let o = PortOptions::default();
        let (mut src, mut fin) = wire("fwd-t-why-in", &o).unwrap();
        let (mut fout, _sink) = wire("fwd-t-why-out", &o).unwrap();
        // The output's wire is nearly full and nobody reads it.
        let filler: Vec<Vec<u8>> = (0..4000).map(|i| udp(9, i)).collect();
        send(&mut fout, &filler);
        let frames: Vec<Vec<u8>> = (0..500).map(|i| udp(9, i)).collect();
        send(&mut src, &frames);
        let opts = FwdOptions {
            duration: Some(Duration::from_millis(300)),
            ..Default::default()
        };
        let stop = AtomicBool::new(false);
        let r = run(Ports::Two(&mut fin, &mut fout), &opts, &stop, |_| {});
        let p1 = r.stats.ports[1];
        assert_eq!(r.stats.ports[0].received, 500);
        assert!(p1.dropped > 0, "{p1:?}");
        assert_eq!(p1.sent + p1.dropped, 500, "{p1:?}");
        assert_eq!(p1.losses().total(), p1.dropped, "{p1:?}");
        let block = l2fwd_block(&r.stats);
        assert!(
            block.contains(&format!("Drops by reason: ring_full={}", p1.dropped))
                && block.contains("Total drops by reason: ring_full=")
                && !block.contains("unexplained"),
            "{block}"
        );
    }
}

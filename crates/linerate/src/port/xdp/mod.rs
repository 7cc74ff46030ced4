//! `xdp:IFACE[@QUEUES]`: AF_XDP sockets on the receive queues of an interface.
//!
//! `xdp:IFACE` (or `@all`, `@*`) binds every receive queue the interface has (ethtool channels,
//! else rtnetlink's queue count), `xdp:IFACE@Q` one queue, `xdp:IFACE@a-b` a range: one socket
//! with its own rx, tx, fill and completion rings per queue, all on one UMEM
//! (`XDP_SHARED_UMEM`), so that packets of every queue are frames of one pool. A queue that
//! cannot be bound fails the open with the queue and the reason: never a silent gap.
//!
//! - `umem`: the UMEM is a [`Pool`] of 2 KiB (or 4 KiB) frames; received batches are bound to
//!   it. Its big frames (outside the registered UMEM) hold the frames longer than a UMEM
//!   frame: sockets are bound with `XDP_USE_SG` where the kernel takes it (multi-buffer, Linux
//!   6.6), a frame's `XDP_PKT_CONTD` pieces are gathered into one big frame, and a long frame
//!   is sent as a chain of descriptors (docs/xdp.md, "Jumbo frames").
//! - `ring`: the fill, completion, rx and tx rings (mapped, cached producer/consumer cursors).
//! - [`prog`]: the XDP program of `bpf/` (redirect to the queue's socket in an XSKMAP, pass
//!   everything else), loaded with raw `bpf(2)` calls and attached through a bpf_link.
//! - [`kfwd`]: the kernel forwarder (`bpf/xdp_fwd.c`: l2fwd as an XDP program, DEVMAP
//!   redirect), `linerate fwd --engine kernel`.
//! - `sys` (crate-private): the system calls and kernel structures.
//!
//! Receive is zero copy in zero-copy mode and one kernel copy in copy mode (veth offers only
//! copy mode); the frames of a received batch belong to the caller until it clears the batch.
//! Transmit posts the frames of a batch bound to this port's pool as they are (a bounce on one
//! port moves no bytes) and copies packets of any other pool into fresh frames. Sockets are
//! bound with `XDP_USE_NEED_WAKEUP`: the port makes a system call only when the kernel asks.
//!
//! Each queue is one [`XdpPort`]; [`open`] returns several as an [`Aggregate`](super::Aggregate)
//! that polls all their sockets at once, and [`open_queues`] returns them apart for tools that
//! give each thread its own queues. The queues of one interface share the interface's program
//! and map. The program is removed when the last port on the interface
//! drops, and by the kernel when the process ends in any way (bpf_link).

mod config;
pub mod kfwd;
pub mod napi;
pub(crate) mod obj;
pub mod prog;
mod ring;
pub(crate) mod sys;
mod umem;
pub use config::{parse_name, BusyPoll, Queues, XdpConfig, XdpMode};
pub use umem::UmemArea;

use super::{DropReason, Port, PortError, PortOptions, PortStats, TxFill};
use crate::mem::{Batch, Desc, Pool, Region, BATCH};
use prog::Attachment;
pub use prog::{AttachApi, AttachMode};
use ring::Ring;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;
pub use sys::{redirect_target, RedirectTarget};
use sys::{XdpDesc, XdpStatistics};

/// Longest `poll()` wait (ms) of an `rx` that finds nothing ready.
pub const RX_POLL_MS: i32 = 1;
/// Most descriptors one transmitted frame may take (the kernel's copy mode builds an skb of
/// the first piece and at most `MAX_SKB_FRAGS` (17) more; kept below that).
const TX_MAX_PIECES: usize = 16;

/// Transmit calls between two reads of the interface's MTU (one `SIOCGIFMTU` each).
const MTU_EVERY: u32 = 64;

/// The kernel's headroom in front of a received packet in its UMEM frame
/// (`XDP_PACKET_HEADROOM`).
const RX_HEADROOM: u32 = 256;
/// How long `open` retries a bind that finds the queue busy (a socket being released).
const BIND_BUSY_WAIT_MS: u32 = 1000;
/// The receive-metadata block of `bpf/xdp_redirect_meta.c` (`struct lr_meta`): u64 receive
/// time (ns, CLOCK_TAI), u32 flags, u32 check (magic XOR packet length), in host order.
const META_LEN: u32 = 16;
const META_MAGIC: u32 = 0x4c52_4d31;
/// The device had a VLAN tag that could not be put back.
const META_VLAN_LOST: u32 = 4;

/// Empty busy polls in a row after which a waiting receive sleeps in poll(2) (the device's
/// deferred interrupt then wakes it within `gro_flush_timeout`).
const BUSY_IDLE_POLLS: u32 = 256;

/// The device settings busy polling needs, while a busy-polling port is open on the device.
struct NapiDefer {
    iface: String,
    /// (file, value before) of each setting this changed.
    changed: Vec<(&'static str, String)>,
}

/// The devices whose settings busy-polling ports of this process changed.
static DEFERS: std::sync::Mutex<Vec<(String, std::sync::Weak<NapiDefer>)>> =
    std::sync::Mutex::new(Vec::new());

fn napi_setting(iface: &str, file: &str) -> std::path::PathBuf {
    std::path::Path::new("/sys/class/net")
        .join(iface)
        .join(file)
}

impl NapiDefer {
    /// The settings of `iface` for busy polling, shared by every port on it.
    fn get(iface: &str) -> Result<Arc<NapiDefer>, PortError> {
        let mut all = DEFERS.lock().unwrap_or_else(|e| e.into_inner());
        all.retain(|(_, w)| w.strong_count() > 0);
        if let Some(d) = all
            .iter()
            .find(|(i, _)| i == iface)
            .and_then(|(_, w)| w.upgrade())
        {
            return Ok(d);
        }
        let mut changed = Vec::new();
        for (file, want) in [
            ("napi_defer_hard_irqs", "2"),
            ("gro_flush_timeout", "200000"),
        ] {
            let path = napi_setting(iface, file);
            let err = |op: &'static str, source| PortError::Os {
                iface: iface.to_string(),
                op,
                source,
                hint: "busy polling sets the device's napi_defer_hard_irqs and \
                       gro_flush_timeout in /sys/class/net: run as root, with /sys of the \
                       interface's network namespace (ip netns exec mounts it)"
                    .into(),
            };
            let old = std::fs::read_to_string(&path).map_err(|e| err("read napi settings", e))?;
            let old = old.trim().to_string();
            if old == "0" {
                std::fs::write(&path, want)
                    .map_err(|e| err("busy polling: write napi settings", e))?;
                changed.push((file, old));
            }
        }
        let d = Arc::new(NapiDefer {
            iface: iface.to_string(),
            changed,
        });
        all.push((iface.to_string(), Arc::downgrade(&d)));
        Ok(d)
    }
}

impl Drop for NapiDefer {
    fn drop(&mut self) {
        for (file, old) in &self.changed {
            let _ = std::fs::write(napi_setting(&self.iface, file), old);
        }
    }
}

/// An AF_XDP port on one queue of an interface.
pub struct XdpPort {
    name: String,
    iface: String,
    queue: u32,
    pool: Arc<Pool>,
    /// Frames for the fill ring and for copies; completed tx frames return here.
    frames: Batch,
    fill: Ring<u64>,
    comp: Ring<u64>,
    rx: Ring<XdpDesc>,
    tx: Ring<XdpDesc>,
    zerocopy: bool,
    attach: Arc<Attachment>,
    stats: PortStats,
    kernel: XdpStatistics,
    rx_wait_ms: i32,
    /// The interface's MTU (None: unknown): read when the port opens, and again every
    /// [`MTU_EVERY`] transmit calls (an MTU changed while the port runs).
    mtu: Option<u32>,
    /// Transmit calls of batches with packets (when to read the MTU again).
    tx_calls: u32,
    /// Busy polling: the device settings it holds, and empty polls in a row.
    busy: Option<Arc<NapiDefer>>,
    idle_polls: u32,
    /// What the program puts in front of received packets.
    meta: prog::RxMeta,
    /// CLOCK_TAI − CLOCK_REALTIME (ns): the program stamps in TAI.
    tai_offset: i64,
    /// The pool address of UMEM offset 0: a lent area's offset in its region (0 when the UMEM
    /// is the port's own pool).
    base: u64,
    /// Clears a UMEM offset's place in its chunk.
    chunk_mask: u64,
    /// A lent area ([`UmemArea`]): the fill ring takes only frames a batch was lent, at most
    /// this many at a time (0: the port's own pool refills it).
    fill_max: u32,
    /// Whether the socket is in the program's map (packets of its queue come to it).
    in_map: bool,
    /// Multi-buffer (`XDP_USE_SG`): a frame longer than a UMEM frame comes and goes as a chain
    /// of descriptors (`XDP_PKT_CONTD` on all but the last).
    sg: bool,
    // Declared last: dropped after the rings are unmapped.
    fd: OwnedFd,
}

/// The receive queues `sel` names on `iface` (index `ifindex`), checked against the queues the
/// interface has: a queue it does not have is an error, never a silent gap.
pub fn resolve_queues(iface: &str, ifindex: u32, sel: Queues) -> Result<Vec<u32>, PortError> {
    let (n, how) =
        sys::rx_queues(iface, ifindex).map_err(|e| sys::err_of(iface, "ETHTOOL_GCHANNELS", e))?;
    let (a, b) = match sel {
        Queues::All => (0, n - 1),
        Queues::Range(a, b) => (a, b),
    };
    if b >= n {
        return Err(PortError::BadUri {
            uri: format!(
                "xdp:{iface}@{}",
                if a == b {
                    a.to_string()
                } else {
                    format!("{a}-{b}")
                }
            ),
            why: format!(
                "{iface} has {n} receive queue{} (0-{}, from {how})",
                if n == 1 { "" } else { "s" },
                n - 1
            ),
        });
    }
    if (b - a + 1) > prog::MAP_ENTRIES {
        return Err(PortError::BadUri {
            uri: format!("xdp:{iface}"),
            why: format!(
                "{} queues: at most {} per interface (name a range with @a-b)",
                b - a + 1,
                prog::MAP_ENTRIES
            ),
        });
    }
    Ok((a..=b).collect())
}

/// How many queues `rest` (`IFACE[@QUEUES]`) names, checked as [`open_queues`] checks them.
pub fn queue_count(rest: &str) -> Result<usize, PortError> {
    let (iface, sel) = parse_name(rest)?;
    queue_count_of(iface, sel)
}

/// [`queue_count`] of a parsed name ([`crate::port::Uri::Xdp`]).
pub fn queue_count_of(iface: &str, sel: Queues) -> Result<usize, PortError> {
    let ifindex = sys::ifindex(iface)?;
    Ok(resolve_queues(iface, ifindex, sel)?.len())
}

/// Several queue ports as one port (an aggregate that waits up to `wait_ms` on all of them),
/// or the port itself when there is one.
pub fn join(name: &str, mut ports: Vec<XdpPort>, wait_ms: u32) -> Box<dyn Port> {
    if ports.len() == 1 {
        let mut p = ports.remove(0);
        p.rx_wait_ms = wait_ms.min(1000) as i32;
        return Box::new(p);
    }
    let parts = ports
        .into_iter()
        .map(|p| Box::new(p) as Box<dyn Port>)
        .collect();
    Box::new(super::Aggregate::with_wait(
        name,
        parts,
        wait_ms.min(1000) as i32,
    ))
}

/// Frames a UMEM needs for `queues` sockets with rings of `ring` entries: each socket's fill
/// and receive rings full, plus room for batches in flight and transmit.
pub fn umem_frames(queues: usize, ring: u32) -> u32 {
    (queues as u32)
        .saturating_mul(2 * ring)
        .saturating_add(1024)
}

/// Opens the queues `rest` (`IFACE[@QUEUES]`) names, one socket and its four rings per queue,
/// all on one UMEM: `with`'s if given (`XDP_SHARED_UMEM`, e.g. the input of a forwarder),
/// else a new one sized for every queue. Every queue is bound or the whole open fails, naming
/// the queue and why.
pub fn open_queues(
    rest: &str,
    opts: &PortOptions,
    cfg: &XdpConfig,
    with: Option<&XdpPort>,
) -> Result<Vec<XdpPort>, PortError> {
    let (iface, sel) = parse_name(rest)?;
    open_queues_of(iface, sel, opts, cfg, with)
}

/// [`open_queues`] of a parsed name ([`crate::port::Uri::Xdp`]).
pub fn open_queues_of(
    iface: &str,
    sel: Queues,
    opts: &PortOptions,
    cfg: &XdpConfig,
    with: Option<&XdpPort>,
) -> Result<Vec<XdpPort>, PortError> {
    open_queues_on(iface, sel, opts, cfg, with, None)
}

/// The sockets of the queues `sel` names, on `with`'s UMEM, on `area`, or on a new one sized
/// for them all; each queue named in an error when there are several.
fn open_queues_on(
    iface: &str,
    sel: Queues,
    opts: &PortOptions,
    cfg: &XdpConfig,
    with: Option<&XdpPort>,
    area: Option<&UmemArea>,
) -> Result<Vec<XdpPort>, PortError> {
    let ifindex = sys::ifindex(iface)?;
    let queues = resolve_queues(iface, ifindex, sel)?;
    let several = queues.len() > 1;
    let big = PortOptions {
        frames: opts.frames.max(umem_frames(queues.len(), cfg.ring_size)),
        rx_wait_ms: if several { 0 } else { opts.rx_wait_ms },
        ..opts.clone()
    };
    let mut out: Vec<XdpPort> = Vec::with_capacity(queues.len());
    for q in queues {
        let share = out
            .first()
            .or(with)
            .map(|p| (&p.pool, p.fd.as_raw_fd(), p.sg));
        let p = XdpPort::open_one(iface, q, &big, cfg, share, area).map_err(|e| match e {
            PortError::Os {
                iface: i,
                op,
                source,
                hint,
            } if several => PortError::Os {
                iface: format!("{i} queue {q}"),
                op,
                source,
                hint,
            },
            e => e,
        })?;
        out.push(p);
    }
    Ok(out)
}

/// Opens the queues `sel` of `iface` for receive on a lent UMEM, `area` (a cluster segment's
/// frames, [`crate::cluster::Master::umem_area`]): the kernel writes each packet into a frame
/// the reader lent the batch, so the lender publishes it with no copy. One port, as [`open`]
/// (several queues: an aggregate that passes the loan on to each queue). Such a port does not
/// transmit.
pub fn open_in_area(
    iface: &str,
    sel: Queues,
    opts: &PortOptions,
    cfg: &XdpConfig,
    area: &UmemArea,
) -> Result<Box<dyn Port>, PortError> {
    let ports = open_queues_on(iface, sel, opts, cfg, None, Some(area))?;
    let name = super::Uri::Xdp {
        iface: iface.to_string(),
        queues: sel,
    };
    Ok(join(&name.to_string(), ports, opts.rx_wait_ms))
}

/// Opens `rest` (`IFACE[@QUEUES]`) as one port: a single queue as itself, several as an
/// aggregate read round-robin that waits on all their sockets at once.
pub fn open(rest: &str, opts: &PortOptions, cfg: &XdpConfig) -> Result<Box<dyn Port>, PortError> {
    let ports = open_queues(rest, opts, cfg, None)?;
    Ok(join(&format!("xdp:{rest}"), ports, opts.rx_wait_ms))
}

impl XdpPort {
    /// Opens one queue, `IFACE@Q` (or `IFACE` on an interface with one receive queue), in the
    /// calling thread's network namespace: UMEM, rings, socket bound to the queue, program
    /// attached and the socket entered in its map. Several queues: [`open_queues`] or [`open`].
    pub fn open(rest: &str, opts: &PortOptions, cfg: &XdpConfig) -> Result<XdpPort, PortError> {
        Self::single(rest, opts, cfg, None)
    }

    /// Opens one queue `IFACE@Q` on the UMEM of `with` (`XDP_SHARED_UMEM`, kernel 5.10+ for
    /// another interface or queue): both ports receive into and send from one pool, so a batch
    /// received on one is sent on the other without a copy. The socket mode (copy or zero-copy)
    /// is the one `with` got. `with`'s pool should have room for both ports' rings
    /// (`PortOptions::frames` ≥ [`umem_frames`] of all their queues when `with` was opened).
    pub fn open_shared(
        rest: &str,
        opts: &PortOptions,
        cfg: &XdpConfig,
        with: &XdpPort,
    ) -> Result<XdpPort, PortError> {
        Self::single(
            rest,
            opts,
            cfg,
            Some((&with.pool, with.fd.as_raw_fd(), with.sg)),
        )
    }

    fn single(
        rest: &str,
        opts: &PortOptions,
        cfg: &XdpConfig,
        share: Option<(&Arc<Pool>, i32, bool)>,
    ) -> Result<XdpPort, PortError> {
        let (iface, sel) = parse_name(rest)?;
        let ifindex = sys::ifindex(iface)?;
        let queues = resolve_queues(iface, ifindex, sel)?;
        if queues.len() != 1 {
            return Err(PortError::BadUri {
                uri: format!("xdp:{rest}"),
                why: format!(
                    "names {} queues where one is needed (write xdp:{iface}@Q)",
                    queues.len()
                ),
            });
        }
        Self::open_one(iface, queues[0], opts, cfg, share, None)
    }

    fn open_one(
        iface: &str,
        queue: u32,
        opts: &PortOptions,
        cfg: &XdpConfig,
        share: Option<(&Arc<Pool>, i32, bool)>,
        area: Option<&UmemArea>,
    ) -> Result<XdpPort, PortError> {
        let name = format!("xdp:{iface}@{queue}");
        let rs = cfg.ring_size;
        if !rs.is_power_of_two() || !(64..=65536).contains(&rs) {
            return Err(PortError::BadUri {
                uri: name,
                why: format!("ring size {rs} must be a power of two from 64 to 65536"),
            });
        }
        if !matches!(cfg.frame_size, 2048 | 4096) {
            return Err(PortError::BadUri {
                uri: name,
                why: format!("UMEM frame size {}: 2048 or 4096", cfg.frame_size),
            });
        }
        let ifindex = sys::ifindex(iface)?;
        let frames = opts.frames.max(umem_frames(1, rs));
        let mut sg_refused = None;
        let tries: &[u16] = match cfg.mode {
            _ if share.is_some() => &[sys::XDP_SHARED_UMEM],
            XdpMode::Auto => &[sys::XDP_ZEROCOPY, sys::XDP_COPY],
            XdpMode::Copy => &[sys::XDP_COPY],
            XdpMode::ZeroCopy => &[sys::XDP_ZEROCOPY],
        };
        let mut last = None;
        // Multi-buffer first (a shared UMEM's socket inherits it from the UMEM's owner); a
        // kernel before 6.6 or a driver without multi-buffer AF_XDP refuses the bind: then
        // without it, frames longer than a UMEM frame counted too_big.
        let each: Vec<(u16, bool)> = tries
            .iter()
            .flat_map(|&m| {
                if share.is_some() {
                    vec![(m, share.is_some_and(|s| s.2))]
                } else if !cfg.multi_buffer {
                    vec![(m, false)]
                } else {
                    vec![(m, true), (m, false)]
                }
            })
            .collect();
        for (mode, sg) in each {
            // The kernel releases a closed socket's hold on its queue asynchronously: right
            // after a previous run ended (or crashed) bind can say EBUSY for a moment.
            let mut waited = 0;
            let r = loop {
                match Self::setup(
                    iface,
                    ifindex,
                    queue,
                    (frames, cfg.frame_size),
                    rs,
                    (mode, sg),
                    share,
                    area,
                ) {
                    Err(PortError::Os { op, source, .. })
                        if op.starts_with("bind")
                            && source.raw_os_error() == Some(libc::EBUSY)
                            && waited < BIND_BUSY_WAIT_MS =>
                    {
                        std::thread::sleep(std::time::Duration::from_millis(20));
                        waited += 20;
                    }
                    r => break r,
                }
            };
            match r {
                Ok(parts) => {
                    let frame = parts.pool.frame_size();
                    let mtu = crate::port::udp::link_of(iface).ok().map(|l| l.mtu);
                    if !sg && mtu.is_some_and(|m| m + 14 > frame - RX_HEADROOM) {
                        // Said once at open: the frames this port cannot carry are counted.
                        eprintln!(
                            "linerate: xdp:{iface}@{queue}: no multi-buffer AF_XDP here ({}): \
                             the longest frame this port carries is {} B (MTU {}); longer \
                             ones are counted too_big",
                            sg_refused.as_deref().unwrap_or(if cfg.multi_buffer {
                                "the socket it shares a UMEM with has none"
                            } else {
                                "not asked for"
                            }),
                            frame - RX_HEADROOM,
                            mtu.unwrap_or(0)
                        );
                    }
                    let busy = match cfg.busy_poll {
                        Some(b) => {
                            if !(1..=1000).contains(&b.usecs) || !(1..=1024).contains(&b.budget) {
                                return Err(PortError::BadUri {
                                    uri: name,
                                    why: format!(
                                        "busy polling of {} µs and {} packets: 1 to 1000 µs, \
                                         1 to 1024 packets",
                                        b.usecs, b.budget
                                    ),
                                });
                            }
                            sys::busy_poll(&parts.fd, iface, b.usecs, b.budget)?;
                            Some(NapiDefer::get(iface)?)
                        }
                        None => None,
                    };
                    let attach = Attachment::get(iface, ifindex, cfg.attach, cfg.api)?;
                    let meta = attach.rx_meta();
                    let zc = sys::getopt::<u32>(&parts.fd, sys::XDP_OPTIONS)
                        .map(|o| o & sys::XDP_OPTIONS_ZEROCOPY != 0)
                        .unwrap_or(false);
                    let mut p = XdpPort {
                        name,
                        iface: iface.to_string(),
                        queue,
                        frames: Batch::with_pool(&parts.pool),
                        pool: parts.pool,
                        fill: parts.fill,
                        comp: parts.comp,
                        rx: parts.rx,
                        tx: parts.tx,
                        zerocopy: zc,
                        attach,
                        stats: PortStats::default(),
                        kernel: XdpStatistics::default(),
                        rx_wait_ms: opts.rx_wait_ms.clamp(0, 1000) as i32,
                        mtu,
                        tx_calls: 0,
                        busy,
                        idle_polls: 0,
                        meta,
                        tai_offset: sys::tai_offset_ns(),
                        base: area.map_or(0, |a| a.off),
                        chunk_mask: !(u64::from(area.map_or(frame, |a| a.chunk)) - 1),
                        fill_max: area.map_or(0, |a| a.fill_max.clamp(1, rs)),
                        in_map: false,
                        sg,
                        fd: parts.fd,
                    };
                    // Frames in the fill ring first, then the socket in the program's map: a
                    // packet redirected to a socket whose fill ring is still empty is dropped
                    // (the kernel counts it, but it is lost all the same).
                    if p.fill_max == 0 {
                        p.refill();
                        p.attach.set_queue(queue, p.fd.as_raw_fd())?;
                        p.in_map = true;
                    }
                    // On a lent area the fill ring has no frames until the first batch lends
                    // some: the socket enters the map then (`rx_lent`), and until then the
                    // program passes the queue's packets to the kernel as if nobody read it.
                    return Ok(p);
                }
                Err(e) => {
                    if sg && share.is_none() {
                        sg_refused = Some(e.to_string());
                    }
                    last = Some(e)
                }
            }
        }
        Err(last.unwrap_or_else(|| PortError::NoInterface(iface.to_string())))
    }

    #[allow(clippy::too_many_arguments)]
    fn setup(
        iface: &str,
        ifindex: u32,
        queue: u32,
        (frames, frame_size): (u32, u32),
        rs: u32,
        (mode, sg): (u16, bool),
        share: Option<(&Arc<Pool>, i32, bool)>,
        area: Option<&UmemArea>,
    ) -> Result<Parts, PortError> {
        let fd = sys::xdp_socket(iface)?;
        let pool = match (share, area) {
            (Some((p, _, _)), _) => p.clone(),
            (None, Some(a)) => {
                umem::register_area(&fd, iface, a)?;
                a.pool.clone()
            }
            (None, None) => {
                let pool = umem::pool(frames, frame_size)?;
                umem::register(&fd, iface, &pool)?;
                pool
            }
        };
        sys::setopt(
            &fd,
            iface,
            sys::XDP_UMEM_FILL_RING,
            "XDP_UMEM_FILL_RING",
            &rs,
        )?;
        sys::setopt(
            &fd,
            iface,
            sys::XDP_UMEM_COMPLETION_RING,
            "XDP_UMEM_COMPLETION_RING",
            &rs,
        )?;
        sys::setopt(&fd, iface, sys::XDP_RX_RING, "XDP_RX_RING", &rs)?;
        sys::setopt(&fd, iface, sys::XDP_TX_RING, "XDP_TX_RING", &rs)?;
        // A copy-mode send call transmits at most 32 frames unless the kernel (6.17 on) lets
        // it take more: ask for the whole ring, so one kick sends a whole batch. An older
        // kernel refuses the option, and the kick loop below makes up for it.
        let _ = sys::setopt(
            &fd,
            iface,
            sys::XDP_MAX_TX_SKB_BUDGET,
            "XDP_MAX_TX_SKB_BUDGET",
            &rs,
        );
        let off: sys::MmapOffsets = sys::getopt(&fd, sys::XDP_MMAP_OFFSETS)
            .map_err(|e| sys::err_of(iface, "XDP_MMAP_OFFSETS", e))?;
        let map = |o: &sys::RingOffset, entry: usize, pgoff: i64| -> Result<Region, PortError> {
            let len = o.desc as usize + rs as usize * entry;
            let p = sys::map_ring(&fd, iface, len, pgoff)?;
            // SAFETY: `p` is the start of a fresh mapping of exactly `len` bytes.
            Ok(unsafe { Region::from_raw_mapping(p, len) })
        };
        let (u, d) = (8, std::mem::size_of::<XdpDesc>());
        let fill_map = map(&off.fr, u, sys::XDP_UMEM_PGOFF_FILL_RING)?;
        let comp_map = map(&off.cr, u, sys::XDP_UMEM_PGOFF_COMPLETION_RING)?;
        let rx_map = map(&off.rx, d, sys::XDP_PGOFF_RX_RING)?;
        let tx_map = map(&off.tx, d, sys::XDP_PGOFF_TX_RING)?;
        // SAFETY: each of the four mappings is the ring the kernel set up with `rs` entries of
        // the given type, laid out as XDP_MMAP_OFFSETS reports; we are the single user side.
        let fill = unsafe { Ring::new(fill_map, &off.fr, rs, true) };
        // SAFETY: as above.
        let comp = unsafe { Ring::new(comp_map, &off.cr, rs, false) };
        // SAFETY: as above.
        let rx = unsafe { Ring::new(rx_map, &off.rx, rs, false) };
        // SAFETY: as above.
        let tx = unsafe { Ring::new(tx_map, &off.tx, rs, true) };
        // A shared-UMEM bind takes no mode flags: it inherits them from the UMEM's owner.
        let sg_flag = if sg { sys::XDP_USE_SG } else { 0 };
        let (flags, shared_umem_fd, op) = match share {
            Some((_, fd, _)) => (sys::XDP_SHARED_UMEM, fd as u32, "bind(XDP_SHARED_UMEM)"),
            None if mode == sys::XDP_ZEROCOPY && sg => (
                mode | sys::XDP_USE_NEED_WAKEUP | sg_flag,
                0,
                "bind(XDP_ZEROCOPY, XDP_USE_SG)",
            ),
            None if mode == sys::XDP_ZEROCOPY => {
                (mode | sys::XDP_USE_NEED_WAKEUP, 0, "bind(XDP_ZEROCOPY)")
            }
            None if sg => (
                mode | sys::XDP_USE_NEED_WAKEUP | sg_flag,
                0,
                "bind(XDP_COPY, XDP_USE_SG)",
            ),
            None => (mode | sys::XDP_USE_NEED_WAKEUP, 0, "bind(XDP_COPY)"),
        };
        let sa = sys::SockaddrXdp {
            family: sys::AF_XDP as u16,
            flags,
            ifindex,
            queue_id: queue,
            shared_umem_fd,
        };
        sys::bind(&fd, &sa).map_err(|e| sys::err_of(iface, op, e))?;
        Ok(Parts {
            pool,
            fill,
            comp,
            rx,
            tx,
            fd,
        })
    }

    /// The interface.
    pub fn iface(&self) -> &str {
        &self.iface
    }

    /// The receive queue.
    pub fn queue(&self) -> u32 {
        self.queue
    }

    /// Whether the socket runs in zero-copy mode.
    pub fn is_zerocopy(&self) -> bool {
        self.zerocopy
    }

    /// Whether the socket was bound with multi-buffer (`XDP_USE_SG`): frames longer than a
    /// UMEM frame arrive and leave whole.
    pub fn is_multi_buffer(&self) -> bool {
        self.sg
    }

    /// The longest frame a single UMEM frame receives (its size less the kernel's 256 B of
    /// headroom): without multi-buffer, longer frames are counted too_big.
    pub fn max_single_rx_frame(&self) -> u32 {
        self.pool.frame_size() - RX_HEADROOM
    }

    /// How the program is attached (Native or Generic).
    pub fn attach_mode(&self) -> AttachMode {
        self.attach.mode()
    }

    /// The id of a stale program of an earlier run that this port's open removed.
    pub fn replaced_stale(&self) -> Option<u32> {
        self.attach.replaced()
    }

    /// What the XDP program puts in front of received packets (receive times, VLAN tags).
    pub fn rx_meta(&self) -> prog::RxMeta {
        self.meta
    }

    /// The kernel's socket counters.
    pub fn kernel_stats(&mut self) -> XdpStatistics {
        // A leap second changes the TAI offset: follow it (not on the packet path).
        if self.meta.stamps {
            self.tai_offset = sys::tai_offset_ns();
        }
        if let Ok(k) = sys::getopt::<XdpStatistics>(&self.fd, sys::XDP_STATISTICS) {
            let o = &self.kernel;
            let dropped = k.rx_dropped.saturating_sub(o.rx_dropped);
            let full = k.rx_ring_full.saturating_sub(o.rx_ring_full);
            // In copy mode the kernel counts in rx_dropped a frame longer than a UMEM frame
            // and a packet that found the fill ring empty (also counted there): the rest is
            // frames too big for the socket. A multi-buffer socket takes every length, and
            // the kernel drops a frame in pieces when the fill ring holds fewer frames than
            // its pieces, counting it in rx_dropped only (not as an empty fill ring): all of
            // rx_dropped is the fill ring's then.
            let too_big = if self.zerocopy || self.sg {
                0
            } else {
                let empty = k
                    .rx_fill_ring_empty_descs
                    .saturating_sub(o.rx_fill_ring_empty_descs);
                dropped.saturating_sub(empty)
            };
            self.stats.rx_drops.add(DropReason::TooBig, too_big);
            self.stats
                .rx_drops
                .add(DropReason::Kernel, dropped - too_big + full);
            self.kernel = k;
        }
        self.kernel
    }

    /// Keeps the fill ring full with free frames of the pool.
    #[inline]
    fn refill(&mut self) {
        let n = self.fill.free(self.fill.size());
        if n < 32 {
            return;
        }
        let mut done = 0;
        while done < n {
            let Some(a) = self.frames.alloc_addr() else {
                break;
            };
            // SAFETY: done < n, which `free` returned.
            unsafe { self.fill.write(done, a) };
            done += 1;
        }
        if done > 0 {
            self.fill.submit(done);
        }
    }

    /// On a lent area: moves the frames lent to `batch` into the fill ring (up to `fill_max`
    /// in it), and enters the socket in the program's map once the ring has frames. False when
    /// `batch` is not lent frames of the area: the packets then wait in the receive ring (a
    /// reader must not take frames it cannot give back to their owner), and the kernel counts
    /// what does not fit.
    fn rx_lent(&mut self, batch: &mut Batch) -> Result<bool, PortError> {
        if !batch.is_lent() || !batch.pool().is_some_and(|p| Arc::ptr_eq(p, &self.pool)) {
            return Ok(false);
        }
        let held = self.fill.in_flight();
        let n = self
            .fill
            .free(self.fill_max.saturating_sub(held))
            .min(batch.lent_frames() as u32);
        let mut done = 0;
        while done < n {
            let Some(a) = batch.take_lent_frame() else {
                break;
            };
            // SAFETY: done < n, which `free` returned. The kernel aligns the offset down to
            // its chunk (aligned mode): the frame is the lent one.
            unsafe { self.fill.write(done, a - self.base) };
            done += 1;
        }
        if done > 0 {
            self.fill.submit(done);
            if !self.in_map {
                self.attach.set_queue(self.queue, self.fd.as_raw_fd())?;
                self.in_map = true;
            }
        }
        Ok(true)
    }

    /// Writes packet `i` of `batch` into fresh UMEM frames of `piece` bytes each, as tx
    /// descriptors from `at` on (room checked by the caller), `XDP_PKT_CONTD` on all but the
    /// last; false (nothing written, frames given back) when the pool has too few free frames.
    #[cold]
    fn tx_pieces(&mut self, batch: &Batch, i: usize, at: u32, piece: usize) -> bool {
        let src = batch.data(i);
        let k = src.len().div_ceil(piece);
        let mut addrs = [0u64; TX_MAX_PIECES];
        for j in 0..k {
            match self.frames.alloc_addr() {
                Some(a) => addrs[j] = a,
                None => {
                    for &a in &addrs[..j] {
                        self.frames.free_addr(a);
                    }
                    return false;
                }
            }
        }
        for (j, part) in src.chunks(piece).enumerate() {
            let a = addrs[j];
            // SAFETY: `a` was just allocated from the UMEM's pool and is held by no one.
            let dst = unsafe { self.frames.frame_mut_at(a) };
            let n = part.len().min(dst.len());
            dst[..n].copy_from_slice(&part[..n]);
            let options = if j + 1 < k { sys::XDP_PKT_CONTD } else { 0 };
            // SAFETY: at + j < at + k <= room, which the caller had from `free`.
            unsafe {
                self.tx.write(
                    at + j as u32,
                    XdpDesc {
                        addr: a,
                        len: n as u32,
                        options,
                    },
                )
            };
        }
        true
    }

    /// Reads the interface's MTU again (a system call: every [`MTU_EVERY`] transmit calls).
    #[cold]
    fn reread_mtu(&mut self) {
        if let Ok(m) = crate::sys::iface::mtu(&self.iface) {
            self.mtu = Some(m);
        }
    }

    /// Frees frames the kernel has finished sending.
    #[inline]
    fn reclaim(&mut self) {
        let n = self.comp.ready(self.comp.size());
        for i in 0..n {
            // SAFETY: i < n, which `ready` returned.
            let a = unsafe { self.comp.read(i) };
            self.frames.free_addr(a);
        }
        if n > 0 {
            self.comp.release(n);
        }
    }

    /// Asks the kernel to send what the tx ring holds (copy mode sends at most a few dozen per
    /// call, so kick until it has taken everything or says it is busy).
    fn kick(&mut self) -> Result<(), PortError> {
        if !self.tx.needs_wakeup() {
            return Ok(());
        }
        for _ in 0..8 {
            let before = self.tx.in_flight();
            sys::kick_tx(&self.fd).map_err(|e| sys::err_of(&self.iface, "sendto", e))?;
            let after = self.tx.in_flight();
            if after == 0 || after == before {
                break;
            }
        }
        Ok(())
    }

    fn fill_batch(&mut self, batch: &mut Batch) -> usize {
        let room = batch.room() as u32;
        // Multi-buffer: a frame's pieces are published together, and a chain must be read
        // whole, so look at every ready descriptor (a batch's room counts frames).
        let n = self.rx.ready(if self.sg { self.rx.size() } else { room });
        if n == 0 || room == 0 {
            return 0;
        }
        let now = crate::time::wall_ns();
        let mut bytes = 0u64;
        let mut taken = 0u32;
        let mut i = 0;
        while i < n && taken < room {
            // SAFETY: i < n, which `ready` returned.
            let d = unsafe { self.rx.read(i) };
            if d.options & sys::XDP_PKT_CONTD != 0 {
                // The first piece of a frame longer than a UMEM frame.
                let mut last = i + 1;
                // SAFETY: last < n, which `ready` returned.
                while last < n && unsafe { self.rx.read(last) }.options & sys::XDP_PKT_CONTD != 0 {
                    last += 1;
                }
                if last >= n {
                    // Not all published (the kernel publishes a frame's pieces together):
                    // read it next time.
                    break;
                }
                if self.fill_max > 0 && batch.lent_big_frames() == 0 && batch.frame_room().1 > 0 {
                    // A lender of big frames (a cluster) lends a few per batch: the frame
                    // waits in the ring for the next batch's.
                    break;
                }
                if let Some(len) = self.gather(batch, i, last, now) {
                    bytes += u64::from(len);
                    taken += 1;
                }
                i = last + 1;
                continue;
            }
            i += 1;
            let mut ts = now;
            if self.meta.stamps {
                match self.read_meta(d.addr, d.len, d.len) {
                    Some((t, flags)) if flags & META_VLAN_LOST == 0 => {
                        ts = (t as i64 - self.tai_offset) as u64;
                    }
                    Some(_) => {
                        // The device had a tag the program could not put back: the bytes
                        // are not the frame on the wire.
                        self.stats.rx_drops.add(DropReason::Malformed, 1);
                        if self.fill_max > 0 {
                            // A lent frame: back to its owner with the loan's free frames.
                            batch.lend_frame(d.addr + self.base);
                        } else {
                            self.frames.free_addr(d.addr);
                        }
                        continue;
                    }
                    // No block (the driver has no room for XDP metadata): the read time.
                    None => {}
                }
            }
            bytes += d.len as u64;
            taken += 1;
            batch.push(Desc {
                addr: d.addr + self.base,
                ts,
                len: d.len,
                wire_len: d.len,
                hash: 0,
                port: 0,
                flags: 0,
            });
        }
        self.rx.release(i);
        self.stats.rx_packets += taken as u64;
        self.stats.rx_bytes += bytes;
        taken as usize
    }

    /// Gathers the pieces of one frame, rx descriptors `first..=last` (ready), into a big
    /// frame of the pool appended to `batch`, and gives the pieces' frames back; the frame's
    /// length, or None when it was dropped (counted: no free big frame, or a VLAN tag lost).
    #[cold]
    fn gather(&mut self, batch: &mut Batch, first: u32, last: u32, now: u64) -> Option<u32> {
        let mut total = 0u32;
        for j in first..=last {
            // SAFETY: j <= last < what `ready` returned.
            total = total.saturating_add(unsafe { self.rx.read(j) }.len);
        }
        // SAFETY: as above.
        let head = unsafe { self.rx.read(first) };
        let mut ts = now;
        let mut keep = true;
        if self.meta.stamps {
            match self.read_meta(head.addr, head.len.max(1), total) {
                Some((t, flags)) if flags & META_VLAN_LOST == 0 => {
                    ts = (t as i64 - self.tai_offset) as u64;
                }
                Some(_) => {
                    self.stats.rx_drops.add(DropReason::Malformed, 1);
                    keep = false;
                }
                None => {}
            }
        }
        let big = if keep {
            let b = batch.alloc_big_addr();
            if b.is_none() {
                // Every big frame holds a packet not yet released.
                self.stats.rx_drops.add(DropReason::NoFrame, 1);
            }
            b
        } else {
            None
        };
        let mut at = 0usize;
        for j in first..=last {
            // SAFETY: j <= last < what `ready` returned.
            let d = unsafe { self.rx.read(j) };
            if let Some(b) = big {
                if let Some(src) = self.pool.region().bytes(d.addr + self.base, d.len) {
                    // SAFETY: `b` was just taken from the pool's (or the loan's) big frames
                    // and is held by no one else; the pieces lie in UMEM frames, apart.
                    let dst = unsafe { batch.frame_mut_at(b) };
                    if let Some(dst) = dst.get_mut(at..at + src.len()) {
                        dst.copy_from_slice(src);
                        at += src.len();
                    }
                }
            }
            if self.fill_max > 0 {
                batch.lend_frame(d.addr + self.base);
            } else {
                self.frames.free_addr(d.addr);
            }
        }
        let b = big?;
        let len = at as u32;
        batch.push(Desc {
            addr: b,
            ts,
            len,
            wire_len: len,
            hash: 0,
            port: 0,
            flags: 0,
        });
        Some(len)
    }

    /// The receive-metadata block in front of the packet at `addr` (`bpf/xdp_redirect_meta.c`):
    /// (receive time in ns of CLOCK_TAI, flags), when there is one for this packet.
    /// `len` is the packet's (first piece's) length, `total` the whole frame's: the program
    /// checks with the length of the frame's first buffer, which lies between the two for a
    /// frame in several pieces.
    #[inline(always)]
    fn read_meta(&self, addr: u64, len: u32, total: u32) -> Option<(u64, u32)> {
        // `addr` is a UMEM offset: the block must lie in the packet's chunk.
        let start = addr.checked_sub(META_LEN as u64)?;
        if start < addr & self.chunk_mask {
            return None;
        }
        let m = self.pool.region().bytes(start + self.base, META_LEN)?;
        let w = |o: usize| u32::from_ne_bytes([m[o], m[o + 1], m[o + 2], m[o + 3]]);
        let check = w(12) ^ META_MAGIC;
        if check != len && (total == len || check == 0 || check > total) {
            return None;
        }
        let ts = u64::from(w(0)) | u64::from(w(4)) << 32;
        Some((ts, w(8)))
    }
}

struct Parts {
    pool: Arc<Pool>,
    fill: Ring<u64>,
    comp: Ring<u64>,
    rx: Ring<XdpDesc>,
    tx: Ring<XdpDesc>,
    fd: OwnedFd,
}

impl Port for XdpPort {
    fn name(&self) -> &str {
        &self.name
    }

    #[inline]
    fn rx(&mut self, batch: &mut Batch) -> Result<usize, PortError> {
        if self.fill_max > 0 {
            if !self.rx_lent(batch)? {
                return Ok(0);
            }
        } else {
            batch.bind(&self.pool);
            self.refill();
        }
        let n = self.fill_batch(batch);
        if n > 0 {
            self.idle_polls = 0;
            return Ok(n);
        }
        if self.busy.is_some() {
            // Busy polling: this call runs the device's NAPI (up to the budget), on this core.
            sys::kick_rx(&self.fd);
            let n = self.fill_batch(batch);
            if n > 0 {
                self.idle_polls = 0;
                return Ok(n);
            }
            self.idle_polls = self.idle_polls.saturating_add(1);
            if self.idle_polls < BUSY_IDLE_POLLS {
                return Ok(0);
            }
        }
        // Nothing ready. A port that must not wait (a queue of an aggregate, which polls all
        // its sockets at once) only wakes the kernel if the fill ring asks: no system call
        // otherwise.
        if self.rx_wait_ms == 0 {
            if self.fill.needs_wakeup() {
                sys::kick_rx(&self.fd);
            }
            return Ok(0);
        }
        // Sleep in poll (which also wakes the kernel if the fill ring asks).
        if sys::poll_in(self.fd.as_raw_fd(), self.rx_wait_ms) {
            return Ok(self.fill_batch(batch));
        }
        if self.fill.needs_wakeup() {
            sys::kick_rx(&self.fd);
        }
        Ok(0)
    }

    #[inline]
    fn tx(&mut self, batch: &mut Batch) -> Result<usize, PortError> {
        if self.fill_max > 0 {
            return Err(PortError::Unsupported {
                port: self.name.clone(),
                op: "transmit (its UMEM is a cluster's lent frames: open the port apart to send)",
            });
        }
        self.reclaim();
        if batch.is_empty() {
            return Ok(0);
        }
        self.tx_calls = self.tx_calls.wrapping_add(1);
        if self.tx_calls.is_multiple_of(MTU_EVERY) {
            self.reread_mtu();
        }
        let ours = batch.pool().is_some_and(|p| Arc::ptr_eq(p, &self.pool));
        let room = self.tx.free(if self.sg {
            self.tx.size()
        } else {
            batch.len() as u32
        });
        let piece = self.pool.max_packet() as usize;
        // Never longer than the link takes (its MTU with the Ethernet header and a tag): the
        // kernel would count such a frame sent and the device drop it.
        let max = self.max_tx_frame(true).unwrap_or(piece);
        let mut taken = 0usize;
        let mut queued = 0u32;
        let mut sent = 0u64;
        let mut bytes = 0u64;
        while taken < batch.len() && queued < room {
            let d = batch.descs()[taken];
            if d.len as usize > max || d.len < 14 {
                let r = if d.len < 14 {
                    DropReason::Malformed
                } else {
                    DropReason::TooBig
                };
                self.stats.tx_drops.add(r, 1);
                if ours {
                    batch.free_addr(d.addr);
                    // Mark as handled: the zero-copy path below must not post it.
                    batch.descs_mut()[taken].len = 0;
                }
                taken += 1;
                continue;
            }
            if d.len as usize > piece || (ours && self.pool.is_big(d.addr)) {
                // Longer than a UMEM frame (multi-buffer), or in a big frame outside the UMEM:
                // copied into UMEM frames, XDP_PKT_CONTD on all but the last.
                let k = (d.len as usize).div_ceil(piece) as u32;
                if queued + k > room || !self.tx_pieces(batch, taken, queued, piece) {
                    break;
                }
                if ours && d.flags & Desc::F_SHARED == 0 {
                    batch.free_addr(d.addr);
                }
                queued += k;
                sent += 1;
                bytes += d.len as u64;
                taken += 1;
                continue;
            }
            let addr = if ours && d.flags & Desc::F_SHARED == 0 {
                d.addr
            } else {
                // No free frame now: the rest stays in the batch for the caller.
                let Some(a) = self.frames.alloc_addr() else {
                    break;
                };
                let src = batch.data(taken);
                // SAFETY: `a` was just allocated from the UMEM's pool and is held by no one.
                let dst = unsafe { self.frames.frame_mut_at(a) };
                let n = src.len().min(dst.len());
                dst[..n].copy_from_slice(&src[..n]);
                a
            };
            // SAFETY: queued < room, which `free` returned.
            unsafe {
                self.tx.write(
                    queued,
                    XdpDesc {
                        addr,
                        len: d.len,
                        options: 0,
                    },
                )
            };
            queued += 1;
            sent += 1;
            bytes += d.len as u64;
            taken += 1;
        }
        if queued > 0 {
            self.tx.submit(queued);
            self.stats.tx_packets += sent;
            self.stats.tx_bytes += bytes;
        }
        if ours {
            // Frames now belong to the kernel (or were freed above when dropped).
            batch.consume(taken);
        } else {
            batch.free_front(taken);
        }
        self.kick()?;
        Ok(taken)
    }

    /// A UMEM frame (a packet in one frame only: a longer one goes by [`Port::tx`], in pieces).
    fn tx_build_room(&self) -> Option<usize> {
        (self.fill_max == 0).then(|| self.pool.max_packet() as usize)
    }

    /// Lends free UMEM frames as the descriptors the tx ring has room for, and posts those
    /// written: no pool frame and copy, the completion ring reclaimed once per call.
    #[inline]
    fn tx_build(&mut self, want: usize, fill: &mut TxFill<'_>) -> Result<usize, PortError> {
        if self.fill_max > 0 {
            return Err(PortError::Unsupported {
                port: self.name.clone(),
                op: "transmit (its UMEM is a cluster's lent frames: open the port apart to send)",
            });
        }
        self.reclaim();
        self.tx_calls = self.tx_calls.wrapping_add(1);
        if self.tx_calls.is_multiple_of(MTU_EVERY) {
            self.reread_mtu();
        }
        let want = want.min(BATCH);
        let room = self.tx.free(want as u32) as usize;
        let piece = self.pool.max_packet();
        let mut addrs = [0u64; BATCH];
        let mut got = 0;
        while got < room {
            let Some(a) = self.frames.alloc_addr() else {
                break;
            };
            addrs[got] = a;
            got += 1;
        }
        if got == 0 {
            // Nothing to lend: ask the kernel to send what the ring holds, so frames come back.
            if self.tx.in_flight() > 0 {
                self.kick()?;
            }
            return Ok(0);
        }
        let mut lens = [0u32; BATCH];
        let n = {
            let mut bufs: [&mut [u8]; BATCH] = std::array::from_fn(|_| <&mut [u8]>::default());
            let region = self.pool.region();
            for (b, &a) in bufs.iter_mut().zip(&addrs[..got]) {
                // SAFETY: `a` was just allocated from the UMEM's pool and is held by no one
                // else; the addresses are distinct frames, so the slices do not overlap; they
                // live until `fill` returns (the end of this block).
                *b = unsafe { region.bytes_mut(a, piece) }.unwrap_or_default();
            }
            fill(&mut bufs[..got], &mut lens[..got]).min(got)
        };
        // Never longer than the link takes (its MTU with the Ethernet header and a tag).
        let max = self
            .max_tx_frame(true)
            .unwrap_or(piece as usize)
            .min(piece as usize);
        let mut queued = 0u32;
        let mut bytes = 0u64;
        for k in 0..got {
            let (a, len) = (addrs[k], lens[k]);
            if k >= n || len as usize > max || len < 14 {
                if k < n {
                    let r = if len < 14 {
                        DropReason::Malformed
                    } else {
                        DropReason::TooBig
                    };
                    self.stats.tx_drops.add(r, 1);
                }
                self.frames.free_addr(a);
                continue;
            }
            // SAFETY: queued < room, which `free` returned.
            unsafe {
                self.tx.write(
                    queued,
                    XdpDesc {
                        addr: a,
                        len,
                        options: 0,
                    },
                )
            };
            queued += 1;
            bytes += u64::from(len);
        }
        if queued > 0 {
            self.tx.submit(queued);
            self.stats.tx_packets += u64::from(queued);
            self.stats.tx_bytes += bytes;
        }
        self.kick()?;
        Ok(n)
    }

    fn flush(&mut self) -> Result<(), PortError> {
        self.reclaim();
        if self.tx.in_flight() > 0 {
            self.kick()?;
        }
        Ok(())
    }

    fn stats(&mut self) -> PortStats {
        self.kernel_stats();
        self.stats
    }

    fn pool(&self) -> Option<&Arc<Pool>> {
        Some(&self.pool)
    }

    /// On a lent area ([`open_in_area`]): the kernel writes into the frames a batch is lent,
    /// only those of the area's pool (not [`Port::fills_lent_frames_of_any_pool`]).
    fn fills_lent_frames(&self) -> bool {
        self.fill_max > 0
    }

    /// A frame of the UMEM (2 KiB less the headroom; several with multi-buffer), and the
    /// interface's MTU with the Ethernet header (and a tag's 4 bytes when `tagged`).
    fn max_tx_frame(&self, tagged: bool) -> Option<usize> {
        let room = self.pool.max_packet() as usize * if self.sg { TX_MAX_PIECES } else { 1 };
        let link = self
            .mtu
            .map_or(usize::MAX, |m| m as usize + 14 + if tagged { 4 } else { 0 });
        Some(room.min(link))
    }

    fn poll_fd(&self) -> Option<i32> {
        Some(self.fd.as_raw_fd())
    }

    /// Arrival times when the program stamps packets at the driver's receive hook.
    fn rx_time(&self) -> super::RxTime {
        if self.meta.stamps {
            super::RxTime::Arrival
        } else {
            super::RxTime::Read
        }
    }
}

impl Drop for XdpPort {
    fn drop(&mut self) {
        // Let the kernel finish what is queued (bounded), then leave the map.
        for _ in 0..50 {
            self.reclaim();
            if self.tx.in_flight() == 0 || self.kick().is_err() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
        if self.in_map {
            self.attach.clear_queue(self.queue);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn names_and_modes_parse() {
        assert_eq!(parse_name("eth0").unwrap(), ("eth0", Queues::All));
        assert_eq!(parse_name("eth0@all").unwrap(), ("eth0", Queues::All));
        assert_eq!(parse_name("eth0@*").unwrap(), ("eth0", Queues::All));
        assert_eq!(parse_name("eth0@3").unwrap(), ("eth0", Queues::Range(3, 3)));
        assert_eq!(
            parse_name("eth0@1-3").unwrap(),
            ("eth0", Queues::Range(1, 3))
        );
        for bad in ["eth0@3-1", "eth0@-", "eth0@1-x", "eth0@"] {
            assert!(
                matches!(parse_name(bad), Err(PortError::BadUri { .. })),
                "{bad}"
            );
        }
        assert_eq!(umem_frames(4, 2048), 4 * 4096 + 1024);
        assert!(matches!(
            parse_name("eth0@x"),
            Err(PortError::BadUri { .. })
        ));
        assert_eq!("copy".parse::<XdpMode>().unwrap(), XdpMode::Copy);
        assert_eq!("zerocopy".parse::<XdpMode>().unwrap(), XdpMode::ZeroCopy);
        assert!("fast".parse::<XdpMode>().is_err());
        assert_eq!(
            "generic".parse::<AttachMode>().unwrap(),
            AttachMode::Generic
        );
    }

    #[test]
    fn missing_interface_and_bad_rings_are_errors() {
        let o = PortOptions::default();
        assert!(matches!(
            XdpPort::open("lr-no-such-if0", &o, &XdpConfig::default()),
            Err(PortError::NoInterface(_))
        ));
        let c = XdpConfig {
            ring_size: 1000,
            ..Default::default()
        };
        assert!(matches!(
            XdpPort::open("lo", &o, &c),
            Err(PortError::BadUri { .. })
        ));
    }
}

//! Ports: where packets come from and go to, behind one trait.
//!
//! A port URI names a port: `mem:NAME`, `pcap:FILE` (or a bare path; `pcapng:FILE` writes
//! pcapng whatever the name), `afpacket:IFACE`,
//! `xdp:IFACE[@QUEUES]` (every receive queue by default), and
//! `a,b` aggregates several inputs round-robin. All unsafe kernel I/O lives in this module.

pub mod afpacket;
mod aggregate;
/// The cluster consumer port lives in [`crate::cluster`]; this path stays for callers.
pub use crate::cluster;
pub mod file;
pub(crate) mod linkstats;
pub mod mem;
pub mod pcap;
pub(crate) mod sys;
pub mod udp;
mod uri;
pub mod xdp;

use crate::filter::Filter;
use crate::mem::{Batch, Pool};
use std::sync::Arc;

pub use aggregate::Aggregate;
pub use sys::signal_ignored;
pub use uri::Uri;

/// Why a packet was dropped. Every packet that enters linerate is delivered or counted under one
/// of these.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(usize)]
pub enum DropReason {
    /// A ring or wire toward the next stage was full.
    RingFull = 0,
    /// No free frame in the pool.
    NoFrame,
    /// Dropped by the kernel before we saw it (socket ring full).
    Kernel,
    /// Rejected by the BPF filter.
    Filter,
    /// Too short or inconsistent to handle.
    Malformed,
    /// The consumer it was meant for is gone.
    ConsumerGone,
    /// Larger than a frame.
    TooBig,
    /// Still in a queue, never read, when its producer ended (a cluster master's exit).
    Unread,
}

impl DropReason {
    /// Number of reasons.
    pub const COUNT: usize = 8;
    /// All reasons, in counter order.
    pub const ALL: [DropReason; Self::COUNT] = [
        DropReason::RingFull,
        DropReason::NoFrame,
        DropReason::Kernel,
        DropReason::Filter,
        DropReason::Malformed,
        DropReason::ConsumerGone,
        DropReason::TooBig,
        DropReason::Unread,
    ];
    /// The name used in output (JSON keys, Prometheus labels).
    pub fn name(self) -> &'static str {
        match self {
            DropReason::RingFull => "ring_full",
            DropReason::NoFrame => "no_frame",
            DropReason::Kernel => "kernel",
            DropReason::Filter => "filter",
            DropReason::Malformed => "malformed",
            DropReason::ConsumerGone => "consumer_gone",
            DropReason::TooBig => "too_big",
            DropReason::Unread => "unread",
        }
    }
}

/// Drop counters by reason.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Drops(pub [u64; DropReason::COUNT]);

impl Drops {
    /// Adds `n` drops for `r`.
    #[inline(always)]
    pub fn add(&mut self, r: DropReason, n: u64) {
        self.0[r as usize] += n;
    }
    /// Drops for `r`.
    pub fn get(&self, r: DropReason) -> u64 {
        self.0[r as usize]
    }
    /// All drops.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }
    /// The counters since `earlier` (each reason on its own, never below 0).
    pub fn since(&self, earlier: &Drops) -> Drops {
        let mut d = *self;
        for (x, e) in d.0.iter_mut().zip(earlier.0) {
            *x = x.saturating_sub(e);
        }
        d
    }

    /// The same counters without `r` (e.g. without filtered packets, which are not losses).
    pub fn without(&self, r: DropReason) -> Drops {
        let mut d = *self;
        d.0[r as usize] = 0;
        d
    }

    /// Sum of two sets of counters.
    pub fn merged(&self, o: &Drops) -> Drops {
        let mut d = *self;
        for i in 0..DropReason::COUNT {
            d.0[i] += o.0[i];
        }
        d
    }
}

/// What a port has done so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortStats {
    /// Packets received (handed to the caller).
    pub rx_packets: u64,
    /// Bytes received (on-the-wire lengths).
    pub rx_bytes: u64,
    /// Packets sent.
    pub tx_packets: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Packets dropped on receive, by reason (kernel drops included).
    pub rx_drops: Drops,
    /// Packets dropped on transmit, by reason.
    pub tx_drops: Drops,
}

impl PortStats {
    /// The counters of several ports (or interfaces) together.
    pub fn sum(list: &[PortStats]) -> PortStats {
        let mut s = PortStats::default();
        for o in list {
            s.add(o);
        }
        s
    }

    /// The counters since `earlier` (a reading of the same port): what one run on a port
    /// that is used for several did.
    pub fn since(&self, earlier: &PortStats) -> PortStats {
        PortStats {
            rx_packets: self.rx_packets.saturating_sub(earlier.rx_packets),
            rx_bytes: self.rx_bytes.saturating_sub(earlier.rx_bytes),
            tx_packets: self.tx_packets.saturating_sub(earlier.tx_packets),
            tx_bytes: self.tx_bytes.saturating_sub(earlier.tx_bytes),
            rx_drops: self.rx_drops.since(&earlier.rx_drops),
            tx_drops: self.tx_drops.since(&earlier.tx_drops),
        }
    }

    /// Adds another port's (or interface's) counters to these.
    pub fn add(&mut self, o: &PortStats) {
        self.rx_packets += o.rx_packets;
        self.rx_bytes += o.rx_bytes;
        self.tx_packets += o.tx_packets;
        self.tx_bytes += o.tx_bytes;
        self.rx_drops = self.rx_drops.merged(&o.rx_drops);
        self.tx_drops = self.tx_drops.merged(&o.tx_drops);
    }
}

/// A link-layer header type (pcap LINKTYPE_ / DLT_ value).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LinkType(pub u32);

impl LinkType {
    /// Ethernet.
    pub const ETHERNET: LinkType = LinkType(1);
    /// Raw IP (IPv4 or IPv6 by version nibble).
    pub const RAW: LinkType = LinkType(101);
    /// Raw IPv4.
    pub const IPV4: LinkType = LinkType(228);
    /// Raw IPv6.
    pub const IPV6: LinkType = LinkType(229);
    /// Linux cooked capture v1.
    pub const LINUX_SLL: LinkType = LinkType(113);
    /// Linux cooked capture v2.
    pub const LINUX_SLL2: LinkType = LinkType(276);
    /// BSD loopback (4-byte host-order family).
    pub const NULL: LinkType = LinkType(0);
}

/// One interface a port's packets come from, as a pcapng interface description names it.
/// A port delivers packets of interfaces `0..n` ([`Port::interfaces`]), each packet's
/// [`Desc::port`](crate::mem::Desc) saying which.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interface {
    /// Its name: the port URI (`afpacket:eth0`, `xdp:eth0@1`), or the name a pcapng input gave.
    pub name: String,
    /// Link-layer type of its packets.
    pub link: LinkType,
}

impl Interface {
    /// An interface named `name` with link type `link`.
    pub fn new(name: &str, link: LinkType) -> Interface {
        Interface {
            name: name.to_string(),
            link,
        }
    }
}

/// What one input interface did during a run, as a pcapng interface statistics block records
/// it: every packet it saw was accepted (delivered, after the filter) or dropped under a
/// reason (`filter` included), so `received = accepted + drops.total()`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InterfaceStats {
    /// When the run started, ns since the Unix epoch.
    pub start_ns: u64,
    /// When it ended, ns since the Unix epoch.
    pub end_ns: u64,
    /// Packets that passed the filter (all delivered packets when there is none).
    pub accepted: u64,
    /// Packets dropped, by reason: `kernel` before linerate saw them, `filter` rejected on
    /// purpose, the others linerate's own.
    pub drops: Drops,
}

impl InterfaceStats {
    /// The interface's figures between two readings of its [`PortStats`] (receive side).
    /// `accepted`: packets the tool kept after its own filter, when it filters in user space
    /// (the rest of what the port delivered counts as `filter`); None: everything delivered.
    pub fn between(
        start: &PortStats,
        end: &PortStats,
        accepted: Option<u64>,
        start_ns: u64,
        end_ns: u64,
    ) -> InterfaceStats {
        let rx = end.rx_packets.saturating_sub(start.rx_packets);
        let mut drops = end.rx_drops.since(&start.rx_drops);
        let accepted = match accepted {
            Some(a) => {
                drops.add(DropReason::Filter, rx.saturating_sub(a));
                a.min(rx)
            }
            None => rx,
        };
        InterfaceStats {
            start_ns,
            end_ns,
            accepted,
            drops,
        }
    }

    /// Every packet the interface saw (pcapng `isb_ifrecv`).
    pub fn received(&self) -> u64 {
        self.accepted + self.drops.total()
    }

    /// Packets the kernel dropped before linerate saw them (`isb_ifdrop`).
    pub fn kernel_drops(&self) -> u64 {
        self.drops.get(DropReason::Kernel)
    }

    /// Packets linerate itself dropped, for lack of room or as malformed (`isb_osdrop`).
    pub fn own_drops(&self) -> u64 {
        self.drops.total() - self.kernel_drops() - self.drops.get(DropReason::Filter)
    }

    /// What each interface of an input did during a run whose every accepted packet went to
    /// one writer: `first` and `last` are the input's [`Port::interface_stats`] at the start
    /// and at the end, `written` the writer's [`Port::tx_by_interface`]. What an interface
    /// delivered beyond what was written of it was filtered. An input that is one interface
    /// accepted everything written, even packets that carry another port number (a cluster
    /// consumer's keep the number its master gave them).
    pub fn of_run(
        first: &[PortStats],
        last: &[PortStats],
        written: &[u64],
        start_ns: u64,
        end_ns: u64,
    ) -> Vec<InterfaceStats> {
        last.iter()
            .enumerate()
            .map(|(i, end)| {
                let start = first.get(i).copied().unwrap_or_default();
                let accepted = if last.len() == 1 {
                    written.iter().sum()
                } else {
                    written.get(i).copied().unwrap_or(0)
                };
                InterfaceStats::between(&start, end, Some(accepted), start_ns, end_ns)
            })
            .collect()
    }
}

/// Errors of ports.
#[derive(Debug, thiserror::Error)]
pub enum PortError {
    /// The URI does not name a port.
    #[error("bad port '{uri}': {why}")]
    BadUri {
        /// The URI given.
        uri: String,
        /// What is wrong and what to write instead.
        why: String,
    },
    /// The interface does not exist.
    #[error("interface '{0}' not found (list interfaces with `ip link`)")]
    NoInterface(String),
    /// The kernel refused an operation on an interface.
    #[error("{iface}: {op}: {source}{hint}")]
    Os {
        /// The interface.
        iface: String,
        /// What we tried.
        op: &'static str,
        /// The OS error.
        source: std::io::Error,
        /// What to do about it.
        hint: &'static str,
    },
    /// A capture file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// A capture file is malformed at a byte offset.
    #[error("{path}: {why} at byte offset {offset}")]
    Format {
        /// The file.
        path: String,
        /// Offset of the bad record or header.
        offset: u64,
        /// What is wrong.
        why: String,
    },
    /// The operation is not available on this port.
    #[error("{port}: {op} is not supported")]
    Unsupported {
        /// The port.
        port: String,
        /// The operation.
        op: &'static str,
    },
    /// The port's source went away or refused us (a cluster's master exited, a queue is taken).
    #[error("{port}: {why}")]
    Gone {
        /// The port.
        port: String,
        /// What happened and what to do.
        why: String,
    },
    /// An output file was refused (it is an input, or a link or file another user planted) or
    /// could not be created.
    #[error(transparent)]
    File(#[from] file::FileError),
    /// Packet memory could not be set up.
    #[error(transparent)]
    Mem(#[from] crate::mem::MemError),
    /// A filter could not be applied.
    #[error(transparent)]
    Filter(#[from] crate::filter::FilterError),
}

/// Options common to all ports.
#[derive(Clone, Debug)]
pub struct PortOptions {
    /// Frames in the port's pool.
    pub frames: u32,
    /// Bytes captured per packet at most, on capture ports (AF_PACKET). Files are read and
    /// written whole (records up to 256 KiB).
    pub snaplen: u32,
    /// Receive threads that will share the interface (PACKET_FANOUT group when > 1).
    pub fanout_group: Option<u16>,
    /// Whether to put the interface in promiscuous mode.
    pub promisc: bool,
    /// Receive block timeout (ms) for ring ports.
    pub block_timeout_ms: u32,
    /// Bytes per block of a TPACKET_V3 receive ring (a power of two, at least a page).
    pub ring_block_size: u32,
    /// Blocks in a TPACKET_V3 receive ring.
    pub ring_blocks: u32,
    /// Whether kernel ports also capture packets the host sends on the interface.
    pub capture_outgoing: bool,
    /// Longest wait (ms) of an `rx` that finds nothing ready on a kernel ring port. Short (1)
    /// for loops that serve several ports; a capture-only loop takes a long one, since the
    /// kernel wakes it as soon as a block is ready, to save idle wake-ups.
    pub rx_wait_ms: u32,
    /// Files a port opened for transmit must never write: the run's inputs (see
    /// [`file::create`]).
    pub inputs: file::Inputs,
    /// Format of a capture file opened for transmit (None: by its name, pcapng for
    /// `*.pcapng`; a `pcapng:FILE` URI always writes pcapng).
    pub write_format: Option<pcap::WriteFormat>,
    /// AF_XDP settings of `xdp:` ports (socket mode, attach mode, ring sizes).
    pub xdp: xdp::XdpConfig,
}

impl Default for PortOptions {
    fn default() -> Self {
        PortOptions {
            frames: 4096,
            snaplen: 65535,
            fanout_group: None,
            promisc: true,
            block_timeout_ms: 10,
            ring_block_size: 1 << 20,
            ring_blocks: 64,
            capture_outgoing: false,
            rx_wait_ms: 1,
            inputs: file::Inputs::default(),
            write_format: None,
            xdp: xdp::XdpConfig::default(),
        }
    }
}

/// What the timestamp (`Desc::ts`) of a received packet is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RxTime {
    /// When the packet arrived, taken per packet by the kernel (or the NIC) on the receive
    /// path, in nanoseconds of CLOCK_REALTIME: one-way latency can be measured from it.
    Arrival,
    /// Not an arrival time (set per batch in user space, or carried from elsewhere): a latency
    /// tracker reads its own clock when it sees the batch.
    #[default]
    Read,
    /// The time recorded with the packet (a capture file).
    Recorded,
}

impl RxTime {
    /// Words for reports: where a receive time comes from.
    pub fn describe(self) -> &'static str {
        match self {
            RxTime::Arrival => "kernel receive timestamps, per packet",
            RxTime::Read => "user-space clock when the batch was read",
            RxTime::Recorded => "timestamps recorded in the input",
        }
    }
}

/// A source and/or sink of packets.
///
/// Calls move whole batches; nothing here is per packet. `rx` appends received packets to the
/// batch (binding it to the port's pool) and returns how many; `tx` sends from the front of the
/// batch, removes what it took over, and returns how many it took. Packets a port cannot send
/// now stay in the batch for the caller to retry or drop.
pub trait Port: Send {
    /// The port's URI.
    fn name(&self) -> &str;
    /// Receives up to `batch.room()` packets; Ok(0) when none is waiting now.
    fn rx(&mut self, batch: &mut Batch) -> Result<usize, PortError>;
    /// Sends packets from the front of `batch`; returns how many it took.
    fn tx(&mut self, batch: &mut Batch) -> Result<usize, PortError>;
    /// Pushes out anything buffered (pcap writers, tx rings).
    fn flush(&mut self) -> Result<(), PortError> {
        Ok(())
    }
    /// Counters so far (reads kernel counters where there are any).
    fn stats(&mut self) -> PortStats;
    /// Link-layer type of received packets.
    fn link_type(&self) -> LinkType {
        LinkType::ETHERNET
    }
    /// A finite source (a file) has nothing more to give.
    fn is_finished(&self) -> bool {
        false
    }
    /// Once finished: why, when that says more than "end of input" (e.g. "cluster 10 ended:
    /// master stopped").
    fn end_note(&self) -> Option<String> {
        None
    }
    /// The pool packets are received into, to allocate frames for zero-copy transmit.
    fn pool(&self) -> Option<&Arc<Pool>> {
        None
    }
    /// Longest frame (bytes without the CRC) the port sends: an untagged one, or one with an
    /// 802.1Q tag when `tagged` (None: no limit of its own, e.g. a file). Longer frames are
    /// dropped as `too_big` (counted); senders check before.
    fn max_tx_frame(&self, _tagged: bool) -> Option<usize> {
        None
    }
    /// Applies a filter in the kernel if the port can; returns false if the caller must run it
    /// in user space.
    fn attach_filter(&mut self, _filter: &Filter) -> Result<bool, PortError> {
        Ok(false)
    }
    /// A file descriptor to poll for readability, if any.
    fn poll_fd(&self) -> Option<i32> {
        None
    }
    /// What received packets' timestamps are.
    fn rx_time(&self) -> RxTime {
        RxTime::Read
    }
    /// The snap length the source declares (a capture file's header), if it declares one:
    /// what a copy of it written to a file should say.
    fn snaplen(&self) -> Option<u32> {
        None
    }
    /// The interfaces received packets come from, indexed by their `Desc::port`: one (the port
    /// itself) for most ports, one per member of `a,b` and per queue of `xdp:IFACE`, one per
    /// interface a pcapng input describes.
    fn interfaces(&self) -> Vec<Interface> {
        vec![Interface::new(self.name(), self.link_type())]
    }
    /// Counters of each interface of [`Port::interfaces`], in the same order.
    fn interface_stats(&mut self) -> Vec<PortStats> {
        vec![self.stats()]
    }
    /// For a writer: the interfaces the packets it will be given come from (by `Desc::port`).
    /// A pcapng file describes them before their first packet; other ports ignore them.
    fn describe(&mut self, _ifaces: &[Interface]) -> Result<(), PortError> {
        Ok(())
    }
    /// For a writer, at the end of a run: what each described interface did (a pcapng file
    /// records them in interface statistics blocks), then a flush. A pcapng writer that is
    /// dropped without this records what it knows itself (times and packets it wrote).
    fn finish(&mut self, _stats: &[InterfaceStats]) -> Result<(), PortError> {
        self.flush()
    }
    /// For a writer: the packets it took so far per interface (by `Desc::port`); empty for
    /// ports that do not count them.
    fn tx_by_interface(&self) -> Vec<u64> {
        Vec::new()
    }
}

/// Which way packets go through a port being opened. It matters for files: an input is only
/// ever read (a missing file is an error, never created), an output is created.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Packets are received from the port.
    Rx,
    /// Packets are sent to the port.
    Tx,
}

/// Opens the port named by `uri` to receive from it: a capture file is opened read-only and
/// never created.
///
/// A capture loop (crates/linerate/examples/capture.rs is the whole program):
///
/// ```
/// use linerate::mem::Batch;
/// use linerate::port::{open_rx, PortOptions};
///
/// let uri = concat!("pcap:", env!("CARGO_MANIFEST_DIR"), "/../../examples/sample.pcap");
/// let mut port = open_rx(uri, &PortOptions::default())?; // or afpacket:eth0, xdp:eth0, ...
/// let mut batch = Batch::new();
/// let mut bytes = 0u64;
/// while !port.is_finished() {
///     port.rx(&mut batch)?; // up to 64 packets, zero-copy where the port allows
///     bytes += batch.iter().map(|p| p.data.len() as u64).sum::<u64>();
///     batch.clear(); // the frames go back to the port
/// }
/// assert_eq!(port.stats().rx_packets, 2000);
/// # Ok::<(), linerate::port::PortError>(())
/// ```
pub fn open_rx(uri: &str, opts: &PortOptions) -> Result<Box<dyn Port>, PortError> {
    open(uri, opts, Direction::Rx)
}

/// Opens the port named by `uri` to send to it: a capture file is created (or truncated), unless
/// it is one of `opts.inputs`.
pub fn open_tx(uri: &str, opts: &PortOptions) -> Result<Box<dyn Port>, PortError> {
    open(uri, opts, Direction::Tx)
}

/// Opens the port named by `uri` for `dir` (kernel and `mem` ports do both whatever `dir` is).
/// A URI that names several receive paths (`a,b`, or `xdp:IFACE` on an interface with several
/// queues) is one [`Aggregate`] that reads them round-robin and waits on all of them at once.
pub fn open(uri: &str, opts: &PortOptions, dir: Direction) -> Result<Box<dyn Port>, PortError> {
    let mut parts = open_parts(uri, opts, dir)?;
    if parts.len() == 1 {
        return Ok(parts.remove(0));
    }
    Ok(Box::new(Aggregate::with_wait(
        uri,
        parts,
        opts.rx_wait_ms.min(1000) as i32,
    )))
}

/// Opens the paths `uri` names, apart, for tools that give each thread its own: every member of
/// `a,b`, every queue of `xdp:IFACE` (one shared UMEM per interface). When there are several,
/// none of them waits in `rx` (whoever reads several polls them together).
pub fn open_parts(
    uri: &str,
    opts: &PortOptions,
    dir: Direction,
) -> Result<Vec<Box<dyn Port>>, PortError> {
    open_uri_parts(&Uri::parse(uri)?, opts, dir)
}

/// [`open_parts`] of a parsed URI.
pub fn open_uri_parts(
    uri: &Uri,
    opts: &PortOptions,
    dir: Direction,
) -> Result<Vec<Box<dyn Port>>, PortError> {
    let list = uri.members();
    let part_opts = if list.len() > 1 {
        PortOptions {
            rx_wait_ms: 0,
            ..opts.clone()
        }
    } else {
        opts.clone()
    };
    let mut out: Vec<Box<dyn Port>> = Vec::new();
    for part in list {
        match part {
            Uri::Xdp { iface, queues } => {
                for q in xdp::open_queues_of(iface, *queues, &part_opts, &opts.xdp, None)? {
                    out.push(Box::new(q));
                }
            }
            one => out.push(open_one(one, &part_opts, dir)?),
        }
    }
    Ok(out)
}

/// Opens one port (not a list).
fn open_one(uri: &Uri, opts: &PortOptions, dir: Direction) -> Result<Box<dyn Port>, PortError> {
    let file =
        |path: &str, format: Option<pcap::WriteFormat>| -> Result<Box<dyn Port>, PortError> {
            Ok(Box::new(match dir {
                Direction::Rx => pcap::PcapPort::open(path, opts)?,
                // Records are written whole (up to libpcap's 256 KiB): the file's snaplen is the
                // largest a reader accepts, not the capture ports' default.
                Direction::Tx => pcap::PcapPort::create_as(
                    path,
                    format.or(opts.write_format),
                    LinkType::ETHERNET,
                    0,
                    &opts.inputs,
                )?,
            }))
        };
    match uri {
        Uri::Mem(name) => Ok(Box::new(mem::MemPort::open(name, opts)?)),
        // Read: either format; `pcapng:` is written as pcapng whatever the name.
        Uri::File { path, format } => file(path, *format),
        Uri::AfPacket(iface) => Ok(Box::new(afpacket::AfPacket::open(iface, opts)?)),
        Uri::Xdp { iface, queues } => {
            let ports = xdp::open_queues_of(iface, *queues, opts, &opts.xdp, None)?;
            Ok(xdp::join(&uri.to_string(), ports, opts.rx_wait_ms))
        }
        Uri::Cluster(spec) => Ok(Box::new(crate::cluster::ClusterPort::open(spec)?)),
        Uri::Bare(rest) => {
            if std::path::Path::new(rest).exists()
                || rest.ends_with(".pcap")
                || rest.ends_with(".pcapng")
                || rest == "-"
                // An output whose format was named (--format) is a file, whatever its name.
                || (dir == Direction::Tx && opts.write_format.is_some())
            {
                file(rest, None)
            } else {
                Err(PortError::BadUri {
                    uri: rest.clone(),
                    why: "not a file; name a port as mem:NAME, pcap:FILE, pcapng:FILE or \
                          afpacket:IFACE"
                        .into(),
                })
            }
        }
        Uri::List(_) => Err(PortError::BadUri {
            uri: uri.to_string(),
            why: "a list inside a list".into(),
        }),
    }
}

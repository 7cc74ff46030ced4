//! Ports: where packets come from and go to, behind one trait.
//!
//! A port URI names a port: `mem:NAME`, `pcap:FILE` (or a bare path; `pcapng:FILE` writes
//! pcapng whatever the name), `afpacket:IFACE`,
//! `xdp:IFACE[@QUEUES]` (every receive queue by default), and
//! `a,b` aggregates several inputs round-robin. All unsafe kernel I/O lives in this module.

pub mod afpacket;
mod aggregate;
pub mod file;
pub(crate) mod linkstats;
pub mod mem;
mod options;
pub mod pcap;
pub mod sources;
pub(crate) mod sys;
pub mod udp;
mod uri;
pub mod xdp;

use crate::filter::Filter;
use crate::mem::{Batch, Pool};
use std::sync::Arc;

pub use crate::stats::counters::{DropReason, Drops, PortStats};
pub use crate::wire::LinkType;
pub use aggregate::Aggregate;
pub use options::PortOptions;
pub use uri::Uri;

/// The MAC address of interface `name` (in the calling thread's network namespace); an
/// interface that is not there is [`PortError::NoInterface`].
pub fn iface_mac(name: &str) -> Result<[u8; 6], PortError> {
    crate::sys::iface::hw_addr(name)
        .map(|(_, mac)| mac)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ENODEV) | Some(libc::ENXIO) => PortError::NoInterface(name.to_string()),
            _ => PortError::Os {
                iface: name.to_string(),
                op: "SIOCGIFHWADDR",
                hint: "".into(),
                source: e,
            },
        })
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
    /// Its snapshot length, as a capture file input says it (0: not known).
    pub snaplen: u32,
}

impl Interface {
    /// An interface named `name` with link type `link`.
    pub fn new(name: &str, link: LinkType) -> Interface {
        Interface {
            name: name.to_string(),
            link,
            snaplen: 0,
        }
    }

    /// The same, with the snapshot length its capture file gives (0: not known).
    pub fn with_snaplen(mut self, snaplen: u32) -> Interface {
        self.snaplen = snaplen;
        self
    }
}

/// What one input interface did during a run, as a pcapng interface statistics block records
/// it: every packet it saw was accepted (delivered, after the filter) or dropped under a
/// reason (`filter` included), so `received = accepted + drops.total()`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InterfaceStats {
    /// When the run started, ns since the Unix epoch (0 with `end_ns` 0: a capture file's
    /// interface, whose time is its packets': the writer gives the span of those it wrote).
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
        hint: std::borrow::Cow<'static, str>,
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
    /// The kernel refused the filter program (e.g. `protochain`'s backward jump): the port is left
    /// without one, and the caller runs the filter in user space, as libpcap does.
    #[error("{iface}: kernel filter failed: {source}")]
    FilterRefused {
        /// The interface.
        iface: String,
        /// The OS error (EINVAL).
        source: std::io::Error,
    },
}

/// The index of interface `name` in the calling thread's network namespace (the kernel ports'
/// one lookup, through [`crate::sys::iface::ifindex`]).
pub(crate) fn ifindex(name: &str) -> Result<u32, PortError> {
    crate::sys::iface::ifindex(name).ok_or_else(|| PortError::NoInterface(name.to_string()))
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

/// Ends a reader's sleep in [`Port::rx_wait`] from another thread or a signal handler: no
/// allocation, no lock, at most one syscall.
pub trait RxWake: Send + Sync {
    /// Wakes the reader if it sleeps (it then returns from its wait and looks again).
    fn wake(&self);
}

/// What a sender hands [`Port::tx_build`]: writes packets into the frames lent (the first
/// slice), their lengths into the second, and returns how many it wrote.
pub type TxFill<'a> = dyn FnMut(&mut [&mut [u8]], &mut [u32]) -> usize + 'a;

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
    /// A sink that takes no more packets, for good: a capture file whose `-G` with `-W` wrote
    /// its last file (tcpdump's file limit ends the run). What `tx` left in the batch was not
    /// taken and never will be: a sender stops and counts those as not sent, never as a drop
    /// of the port (a full ring leaves packets too, but takes them later). Cheap: a sender asks
    /// when `tx` left packets.
    fn tx_ended(&self) -> bool {
        false
    }
    /// Once [`Port::tx_ended`]: why, in the summary's words (`file limit (-W 2) reached`).
    fn tx_end_note(&self) -> Option<String> {
        None
    }
    /// Of the packets a capture file writer wrote, those in files a later file of the same name
    /// overwrote (tcpdump's `-G` with a name without a time field, a `-C -W` ring gone round),
    /// and what did (`-G`, `the -W ring`); None when nothing was overwritten or not a file.
    fn tx_overwritten(&self) -> Option<(u64, &'static str)> {
        None
    }
    /// Pushes out anything buffered (pcap writers, tx rings).
    fn flush(&mut self) -> Result<(), PortError> {
        Ok(())
    }
    /// The end of a sending run: [`Port::flush`], and a port whose packets are counted sent
    /// when queued to the kernel (afpacket's ring) waits a bounded time for it to take them,
    /// and counts those it never took as dropped rather than sent.
    fn tx_finish(&mut self) -> Result<(), PortError> {
        self.flush()
    }
    /// Called by a worker's loop at every pass, busy or idle, with the worker's monotonic
    /// clock in ns (`time::mono_ns`, or the generator's TSC clock: only differences count):
    /// what a port does on time rather than per packet (a capture file's `--flush-interval`,
    /// its `-G` rotation). Cheap when nothing is due.
    fn tick(&mut self, _now_ns: u64) -> Result<(), PortError> {
        Ok(())
    }
    /// The last `n` packets (`bytes` wire bytes) of the last receive went unused: the reader
    /// stops before them (a capture's packet count reached, a program closing its handle
    /// mid-batch). A port whose packets are counted as delivered when given back puts them
    /// back instead (a cluster queue: the next reader of the queue gets them, or the master
    /// counts them dropped with its consumer gone) and takes them out of its received
    /// counts. Others do nothing: a kernel ring counted them when it filled the ring.
    fn rx_unused(&mut self, _n: usize, _bytes: u64) {}
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
    /// Whether `rx` writes packets into any frames the batch hands out, including frames another
    /// owner lent it (a cluster master lending its segment's frames): then a packet is received
    /// straight into the place it is read from, with no copy. Ports whose memory the kernel
    /// owns (AF_PACKET rings, an AF_XDP UMEM) or that bind their own pool say no (the default).
    fn fills_lent_frames(&self) -> bool {
        false
    }
    /// For a caller that only reads what it receives and gives each batch's packets up (clears
    /// or sends the batch) before its next `rx`: the port may from now on give read-only
    /// descriptors ([`Desc::F_SHARED`](crate::mem::Desc::F_SHARED)) of memory it does not copy
    /// out of (a pcap file's own pages, [`PcapPort::read_in_place`](pcap::PcapPort::read_in_place)).
    /// Returns whether it will; the default: no.
    fn read_in_place(&mut self) -> bool {
        false
    }
    /// For a port that fills lent frames: whether frames lent from any pool will do (`rx` copies
    /// each packet into the frame it is handed: a file reader, the built-in source), not only
    /// frames of its own [`Port::pool`] (an AF_XDP socket on a lent area, whose kernel writes
    /// into its UMEM and leaves a batch lent by another pool unread). Several ports read as one
    /// (`a,b`) take a loan only if every member can take it.
    fn fills_lent_frames_of_any_pool(&self) -> bool {
        false
    }
    /// Longest packet `rx` delivers in the port's own frames, a big frame's included (None: it
    /// has no pool of its own). Several ports read as one: the longest of their members'. A
    /// cluster master lends its frames only to an input whose packets all fit them.
    fn max_rx_packet(&self) -> Option<usize> {
        self.pool()
            .map(|p| p.max_packet().max(p.max_big_packet()) as usize)
    }
    /// Longest frame (bytes without the CRC) the port sends: an untagged one, or one with an
    /// 802.1Q tag when `tagged` (None: no limit of its own, e.g. a file). Longer frames are
    /// dropped as `too_big` (counted); senders check before.
    fn max_tx_frame(&self, _tagged: bool) -> Option<usize> {
        None
    }
    /// Bytes a frame of the port's transmit ring holds when the port lets a sender write
    /// packets straight into it ([`Port::tx_build`]); None: it does not (use [`Port::tx`]).
    fn tx_build_room(&self) -> Option<usize> {
        None
    }
    /// Builds packets in place: reserves up to `want` (at most [`crate::mem::BATCH`]) free
    /// frames of the transmit ring and hands them to `fill` (each at least
    /// [`Port::tx_build_room`] bytes), which writes packets into the first of them, their
    /// lengths into the second slice, and returns how many it wrote; those are sent (one kick
    /// per call, as [`Port::tx`]), the rest given back. Returns how many were sent or counted
    /// as dropped (a length the link does not take): 0 when the ring has no free frame now
    /// (`fill` is then not called). Ports without such a ring return 0 and never call `fill`.
    fn tx_build(&mut self, _want: usize, _fill: &mut TxFill<'_>) -> Result<usize, PortError> {
        Ok(0)
    }
    /// Applies a filter in the kernel if the port can; returns false if the caller must run it
    /// in user space. [`PortError::FilterRefused`] says the kernel refused this program (the port
    /// then has none): the caller runs it in user space and says so.
    fn attach_filter(&mut self, _filter: &Filter) -> Result<bool, PortError> {
        Ok(false)
    }
    /// A file descriptor to poll for readability, if any.
    fn poll_fd(&self) -> Option<i32> {
        None
    }
    /// For a port without a descriptor whose producer wakes its reader (a cluster queue):
    /// after an `rx` that found nothing, sleeps until the queue holds `want` packets (at most
    /// what the port allows: a quarter of a cluster queue), the producer ends, or `timeout`
    /// (capped: a dead producer is noticed within the cap) passes; then call `rx`. Returns
    /// false, without waiting, when the port has no such wait (the caller waits its own way).
    fn rx_wait(&mut self, _want: usize, _timeout: std::time::Duration) -> bool {
        false
    }
    /// The slots of the queue [`Port::rx_wait`] waits on (a cluster queue's `--slots`), once
    /// known; None for ports without such a wait. A reader sizes how many packets it waits for
    /// by it: the rest of the queue is what covers its wake-up.
    fn rx_slots(&self) -> Option<usize> {
        None
    }
    /// A way to end a sleep in [`Port::rx_wait`] early from another thread or a signal
    /// handler (libpcap's `pcap_breakloop`), for ports that have such a wait and know their
    /// queue already; None otherwise (the sleep then ends at the wait's cap).
    fn rx_waker(&self) -> Option<std::sync::Arc<dyn RxWake>> {
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

/// Which packets of an interface a capture port takes (tcpdump's `-Q in|out|inout`).
/// Each packet an `afpacket:` port receives carries its direction in its descriptor
/// ([`crate::mem::Desc::F_INBOUND`], [`crate::mem::Desc::F_OUTBOUND`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Capture {
    /// What arrives on the interface.
    #[default]
    In,
    /// What the host sends on it.
    Out,
    /// Both, as tcpdump captures by default.
    InOut,
}

impl Capture {
    /// Parses `in`, `out` or `inout` (tcpdump's words).
    pub fn parse(s: &str) -> Option<Capture> {
        match s {
            "in" => Some(Capture::In),
            "out" => Some(Capture::Out),
            "inout" => Some(Capture::InOut),
            _ => None,
        }
    }

    /// The word for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Capture::In => "in",
            Capture::Out => "out",
            Capture::InOut => "inout",
        }
    }

    /// Whether packets received (`outgoing` false) or sent (true) are taken.
    #[inline]
    pub fn takes(self, outgoing: bool) -> bool {
        match self {
            Capture::In => !outgoing,
            Capture::Out => outgoing,
            Capture::InOut => true,
        }
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

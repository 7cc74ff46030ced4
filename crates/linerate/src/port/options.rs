//! Options common to all ports ([`PortOptions`]): below every port, which each reads its part of.

use super::{file, pcap, xdp, Capture, LinkType};

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
    /// Hand each received packet over as soon as it is in (a TPACKET_V2 ring on `afpacket:`,
    /// libpcap's immediate mode) rather than in blocks that wait for the block timeout: for
    /// tools that forward. The ring's size stays `ring_block_size` × `ring_blocks`.
    pub immediate: bool,
    /// Bytes per block of a TPACKET_V3 receive ring (a power of two, at least a page).
    pub ring_block_size: u32,
    /// Blocks in a TPACKET_V3 receive ring.
    pub ring_blocks: u32,
    /// Which packets an `afpacket:` port captures: what the interface receives (the default,
    /// for tools that forward or distribute, so they never read their own output), what it
    /// sends, or both (tcpdump's `-Q`).
    pub direction: Capture,
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
    /// How a capture file opened for transmit is flushed and rotated.
    pub write: pcap::WriteOptions,
    /// AF_XDP settings of `xdp:` ports (socket mode, attach mode, ring sizes).
    pub xdp: xdp::XdpConfig,
    /// Link type a capture file opened for transmit is labelled with (None: Ethernet). A
    /// forwarding pair's file output takes its input's, so raw-IP or cooked frames are not
    /// written under an Ethernet header type.
    pub link_type: Option<LinkType>,
}

impl Default for PortOptions {
    fn default() -> Self {
        PortOptions {
            frames: 4096,
            snaplen: 65535,
            fanout_group: None,
            promisc: true,
            block_timeout_ms: 10,
            immediate: false,
            ring_block_size: 1 << 20,
            ring_blocks: 64,
            direction: Capture::In,
            rx_wait_ms: 1,
            inputs: file::Inputs::default(),
            write_format: None,
            write: pcap::WriteOptions::default(),
            xdp: xdp::XdpConfig::default(),
            link_type: None,
        }
    }
}

//! `afpacket:IFACE`: Linux AF_PACKET with a TPACKET_V3 receive ring (zero copy), a TPACKET_V2
//! transmit ring, kernel BPF filters, fanout groups and kernel drop counters.
//!
//! With `PortOptions::immediate` the receive ring is TPACKET_V2 instead: fixed frames, each
//! handed to user space as soon as its packet is in (libpcap's immediate mode), for tools that
//! forward, where a block timeout would be added latency; the transmit ring of such a port is
//! then set up at open rather than on the first `tx`. Above MTU 1792 (V2 frames of more than
//! 2 KiB: too few of them in the ring to absorb a burst, 4096 at MTU 9000 where V3 holds far
//! more small packets) it stays TPACKET_V3 with 128 KiB blocks retired after 1 ms.
//! Everything below holds for both.
//!
//! Receive maps the ring once and hands out descriptors that point into it: the port's pool is
//! the ring itself (an external pool, no free list). **A received batch's bytes are valid until
//! the next `rx` on the same port** (or `attach_filter`): blocks are given back to the kernel at
//! the start of the next `rx`, except blocks that packets still held in the batch passed to that
//! `rx` point into. Copy (or transmit) what must live longer.
//!
//! When nothing is ready, `rx` waits at most `PortOptions::rx_wait_ms` (default [`RX_POLL_MS`])
//! in `poll()` and returns 0, so an idle
//! count loop sleeps instead of spinning; under load blocks are ready and `rx` makes no system
//! call. [`Port::poll_fd`] gives the socket for event loops.
//!
//! Received Ethernet frames keep their VLAN tags: the kernel takes the outer 802.1Q/802.1ad
//! tag out into the packet's metadata and the port puts it back in place (see `rx.rs`), as
//! libpcap does, so a capture equals what tcpdump records on the same interface.
//!
//! Transmit uses a second socket (opened with the port, so in the same network namespace; its
//! ring is mapped on the first `tx`) bound with protocol 0, so it never receives.
//!
//! **Direction.** By default (`PortOptions::direction` = `Capture::In`) the receive socket
//! ignores packets the host sends (PACKET_IGNORE_OUTGOING), so a port that forwards never
//! captures its own output. `Capture::InOut` takes both, as tcpdump does; `Capture::Out` only
//! what the host sends. Each packet's descriptor says which it was (`Desc::F_INBOUND`,
//! `Desc::F_OUTBOUND`, from the kernel's `sll_pkttype`). On a loopback interface a sent packet
//! is seen again as received: its sent copy is skipped, as libpcap does.
//!
//! **`afpacket:any`** captures on every interface of the namespace with a SOCK_DGRAM socket:
//! each packet gets a Linux cooked v2 header (LINKTYPE_LINUX_SLL2: protocol, interface index,
//! ARPHRD type, packet type, link address) built in the room the kernel leaves in front of it,
//! as `tcpdump -i any` writes. It cannot transmit, is never promiscuous, and its filters run
//! in user space.

mod rx;
mod sys;
mod tx;

use super::{Capture, DropReason, LinkType, Port, PortError, PortOptions, PortStats, TxFill};
use crate::filter::{Filter, Insn};
use crate::mem::{Batch, Pool, Region};
use rx::RxBlocks;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;
use tx::TxRing;

/// The interface name that captures on every interface (`afpacket:any`, `-i any`).
pub const ANY: &str = "any";
/// Longest `poll()` wait (ms) of an `rx` that finds nothing ready.
pub const RX_POLL_MS: i32 = 1;
/// Frame size declared for the receive ring (TPACKET_V3 packs packets of any size in blocks).
const RX_FRAME: u32 = 2048;
/// Largest TPACKET_V2 frame an immediate ring uses: with the default ring (64 MiB) it holds
/// 32768 frames, as many bursts as the V3 ring absorbs. A larger MTU would leave too few
/// frames (4096 at MTU 9000, 512 at 65000: losses where V3 had none), so above it the ring
/// stays TPACKET_V3 with small blocks that retire after [`IMMEDIATE_V3_TOV_MS`].
const V2_MAX_FRAME: u32 = 2048;
/// Block size of the TPACKET_V3 ring an immediate port uses at a large MTU (at least a frame).
const IMMEDIATE_V3_BLOCK: u32 = 128 << 10;
/// Block timeout (ms) of that ring: the shortest the kernel takes.
const IMMEDIATE_V3_TOV_MS: u32 = 1;

/// Classic BPF put in front of a filter attached in the kernel: a frame whose VLAN tag the
/// kernel has taken out (`SKF_AD_VLAN_TAG_PRESENT`) is accepted whole, for the port to filter
/// once the tag is back; any other frame goes on to the filter.
const VLAN_PASS: [Insn; 3] = [
    // ld [SKF_AD_OFF + SKF_AD_VLAN_TAG_PRESENT]
    Insn {
        code: 0x20,
        jt: 0,
        jf: 0,
        k: 0xffff_f000 + 48,
    },
    // jeq #0: untagged, skip the next instruction
    Insn {
        code: 0x15,
        jt: 1,
        jf: 0,
        k: 0,
    },
    // ret #all
    Insn {
        code: 0x06,
        jt: 0,
        jf: 0,
        k: u32::MAX,
    },
];

/// The kernel's receive counters, accumulated (the kernel resets them on each read).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KernelStats {
    /// Packets that reached the socket (queued or dropped).
    pub packets: u64,
    /// Packets dropped because the ring was full.
    pub drops: u64,
    /// Times the queue was frozen (all blocks held by user space).
    pub freeze_q: u64,
}

/// An AF_PACKET port on one interface.
pub struct AfPacket {
    name: String,
    iface: String,
    ifindex: i32,
    mtu: u32,
    tx_frames: u32,
    block_timeout_ms: u32,
    rx_wait_ms: i32,
    link: LinkType,
    rx: RxBlocks,
    fd: OwnedFd,
    /// The transmit socket until its ring is set up on the first `tx`.
    tx_sock: Option<OwnedFd>,
    tx: Option<TxRing>,
    stats: PortStats,
    kernel: KernelStats,
    /// The attached filter, run again in user space on frames whose VLAN tag the port put
    /// back (the kernel filter saw them without it and let them all through).
    tag_filter: Option<Filter>,
    /// Whether received frames get their VLAN tag back (Ethernet links).
    vlan: bool,
}

impl AfPacket {
    /// Opens `IFACE` (in the calling thread's network namespace): the receive ring is mapped and
    /// bound, promiscuous mode and the fanout group applied as `opts` says.
    pub fn open(iface: &str, opts: &PortOptions) -> Result<AfPacket, PortError> {
        let name = format!("afpacket:{iface}");
        let bs = opts.ring_block_size;
        if !bs.is_power_of_two() || bs < 4096 || opts.ring_blocks == 0 {
            return Err(PortError::BadUri {
                uri: name,
                why: format!(
                    "ring block size {bs} must be a power of two of at least 4096 and blocks \
                     ({}) at least 1",
                    opts.ring_blocks
                ),
            });
        }
        // `any`: every interface of the namespace, as cooked packets (LINUX_SLL2), as
        // `tcpdump -i any` captures them.
        let any = iface == ANY;
        let ifindex = if any {
            0
        } else {
            crate::port::ifindex(iface)? as i32
        };
        let fd = sys::packet_socket(iface, any)?;
        let mtu = if any { 65_535 } else { sys::mtu(iface)? };
        let too_large = || PortError::BadUri {
            uri: name.clone(),
            why: "receive ring too large".into(),
        };
        // TPACKET_V2: frames that hold a packet of the MTU with its link header, a tag and
        // the ring's headers, contiguous in the blocks.
        let frame = (mtu as usize + 256)
            .next_power_of_two()
            .clamp(2048, bs as usize) as u32;
        // Immediate at a large MTU: V3 with small blocks (same ring memory) and a 1 ms timeout.
        let v2 = opts.immediate && frame <= V2_MAX_FRAME;
        // Immediate: TPACKET_V2 frames, each handed over as soon as its packet is in (as
        // libpcap does in immediate mode); else (or at a large MTU) TPACKET_V3 blocks, retired
        // when full or after the block timeout.
        let v = if v2 {
            libc::tpacket_versions::TPACKET_V2 as i32
        } else {
            libc::tpacket_versions::TPACKET_V3 as i32
        };
        sys::packet_opt(&fd, iface, libc::PACKET_VERSION, "PACKET_VERSION", &v)?;
        if opts.direction == Capture::In {
            // Kernels before 4.20 lack it: the ring then skips outgoing packets itself.
            let _ = sys::setopt(&fd, libc::SOL_PACKET, libc::PACKET_IGNORE_OUTGOING, &1i32);
        }
        let hw = if any {
            libc::ARPHRD_VOID
        } else {
            sys::hw_type(iface)?
        };
        let link = match hw {
            _ if any => LinkType::LINUX_SLL2,
            libc::ARPHRD_NONE => LinkType::RAW,
            _ => LinkType::ETHERNET,
        };
        // Room in front of each packet to put back the VLAN tag the kernel took out (rx.rs).
        sys::packet_opt(
            &fd,
            iface,
            libc::PACKET_RESERVE,
            "PACKET_RESERVE",
            &rx::VLAN_HEADROOM,
        )?;
        let ring = bs as u64 * opts.ring_blocks as u64;
        let (bs, blocks, tov) = if opts.immediate && !v2 {
            let small = IMMEDIATE_V3_BLOCK.max(frame);
            if ring >= 2 * small as u64 {
                (small, (ring / small as u64) as u32, IMMEDIATE_V3_TOV_MS)
            } else {
                (bs, opts.ring_blocks, IMMEDIATE_V3_TOV_MS)
            }
        } else {
            (bs, opts.ring_blocks, opts.block_timeout_ms)
        };
        if v2 {
            let req = libc::tpacket_req {
                tp_block_size: bs,
                tp_block_nr: opts.ring_blocks,
                tp_frame_size: frame,
                tp_frame_nr: (bs / frame)
                    .checked_mul(opts.ring_blocks)
                    .ok_or_else(too_large)?,
            };
            sys::packet_opt(&fd, iface, libc::PACKET_RX_RING, "PACKET_RX_RING", &req)?;
        } else {
            let req = libc::tpacket_req3 {
                tp_block_size: bs,
                tp_block_nr: blocks,
                tp_frame_size: RX_FRAME,
                tp_frame_nr: (bs / RX_FRAME).checked_mul(blocks).ok_or_else(too_large)?,
                tp_retire_blk_tov: tov,
                tp_sizeof_priv: 0,
                tp_feature_req_word: 0,
            };
            sys::packet_opt(&fd, iface, libc::PACKET_RX_RING, "PACKET_RX_RING", &req)?;
        }
        let len = bs as usize * blocks as usize;
        let ptr = sys::map_ring(&fd, iface, len)?;
        // SAFETY: `ptr` is the start of a fresh mapping of exactly `len` bytes, owned from here
        // by the region (the mapping keeps the socket's ring alive even after the fd closes).
        let region = unsafe { Region::from_raw_mapping(ptr, len) };
        let pool = Arc::new(Pool::external(region));
        let vlan = matches!(hw, libc::ARPHRD_ETHER | libc::ARPHRD_LOOPBACK);
        let mut rx = if v2 {
            RxBlocks::with_version(
                pool,
                frame as usize,
                (bs / frame) as usize * opts.ring_blocks as usize,
                opts.snaplen,
                vlan,
                true,
            )
        } else {
            RxBlocks::new(pool, bs as usize, blocks as usize, opts.snaplen, vlan)
        };
        let lo_ifindex = if hw == libc::ARPHRD_LOOPBACK {
            ifindex
        } else if any {
            crate::sys::iface::ifindex("lo").map_or(-1, |i| i as i32)
        } else {
            -1
        };
        rx.set_meta(rx::Meta {
            dir: opts.direction,
            lo_ifindex,
            cooked: any,
        });
        sys::bind(&fd, iface, ifindex, libc::ETH_P_ALL as u16)?;
        // Promiscuous mode is per interface: `any` has none (libpcap does the same).
        if opts.promisc && !any {
            let mreq = libc::packet_mreq {
                mr_ifindex: ifindex,
                mr_type: libc::PACKET_MR_PROMISC as u16,
                mr_alen: 0,
                mr_address: [0; 8],
            };
            sys::packet_opt(
                &fd,
                iface,
                libc::PACKET_ADD_MEMBERSHIP,
                "PACKET_ADD_MEMBERSHIP",
                &mreq,
            )?;
        }
        if let Some(group) = opts.fanout_group {
            let mode = libc::PACKET_FANOUT_HASH | libc::PACKET_FANOUT_FLAG_DEFRAG;
            let arg: i32 = (group as u32 | (mode << 16)) as i32;
            sys::packet_opt(&fd, iface, libc::PACKET_FANOUT, "PACKET_FANOUT", &arg)?;
        }
        // Opened now so that it lives in this namespace; its ring is set up on the first tx.
        let tx_sock = if any {
            None
        } else {
            Some(sys::packet_socket(iface, false)?)
        };
        let mut port = AfPacket {
            name,
            iface: iface.to_string(),
            ifindex,
            mtu,
            tx_frames: opts.frames,
            block_timeout_ms: tov,
            rx_wait_ms: opts.rx_wait_ms.clamp(0, 1000) as i32,
            link,
            rx,
            fd,
            tx_sock,
            tx: None,
            stats: PortStats::default(),
            kernel: KernelStats::default(),
            tag_filter: None,
            vlan,
        };
        if opts.immediate && port.tx_sock.is_some() {
            // A forwarding port: its transmit ring is set up now, not on the first packet
            // (which would wait for the ring's allocation, milliseconds).
            port.open_tx()?;
        }
        Ok(port)
    }

    /// Sets up the transmit ring on the socket opened for it.
    fn open_tx(&mut self) -> Result<(), PortError> {
        let Some(fd) = self.tx_sock.take() else {
            return Err(PortError::Unsupported {
                port: self.name.clone(),
                op: if self.iface == ANY {
                    "tx (any names no interface to send on)"
                } else {
                    "tx (the transmit ring could not be set up)"
                },
            });
        };
        self.tx = Some(TxRing::open(
            fd,
            &self.iface,
            self.ifindex,
            self.mtu,
            self.link,
            self.tx_frames,
        )?);
        Ok(())
    }

    /// The interface name.
    pub fn iface(&self) -> &str {
        &self.iface
    }

    /// The interface's MTU when the port was opened.
    pub fn mtu(&self) -> u32 {
        self.mtu
    }

    /// The ring the received descriptors point into (an external pool: it cannot allocate).
    pub fn ring_pool(&self) -> &Arc<Pool> {
        self.rx.pool()
    }

    /// Reads the kernel counters and returns their running totals.
    pub fn kernel_stats(&mut self) -> KernelStats {
        if let Ok(st) = sys::packet_stats(&self.fd) {
            // tp_packets already includes tp_drops.
            self.kernel.packets += st.tp_packets as u64;
            self.kernel.drops += st.tp_drops as u64;
            self.kernel.freeze_q += st.tp_freeze_q_cnt as u64;
            self.stats
                .rx_drops
                .add(DropReason::Kernel, st.tp_drops as u64);
        }
        self.kernel
    }
}

impl Port for AfPacket {
    fn name(&self) -> &str {
        &self.name
    }

    /// Receives from the ring; see the module documentation for how long the bytes stay valid.
    #[inline]
    fn rx(&mut self, batch: &mut Batch) -> Result<usize, PortError> {
        batch.bind(self.rx.pool());
        self.rx.release(batch);
        let mut n = 0;
        let mut bytes = 0;
        for attempt in 0..2 {
            let (k, b) = self.rx.fill(batch, &mut self.stats.rx_drops);
            n += k;
            bytes += b;
            if n > 0 || attempt == 1 {
                break;
            }
            match sys::poll_in(&self.fd, self.rx_wait_ms) {
                Ok(true) => {}
                Ok(false) => break,
                // The interface went down or away: gone ends the capture, as libpcap does
                // ("The interface disappeared"); down only waits for it to come back up.
                Err(e) => {
                    if e == libc::ENETDOWN
                        && self.ifindex > 0
                        && crate::port::ifindex(&self.iface).ok() != Some(self.ifindex as u32)
                    {
                        return Err(PortError::Gone {
                            port: self.name.clone(),
                            why: "The interface disappeared".into(),
                        });
                    }
                    break;
                }
            }
        }
        if let Some(f) = &self.tag_filter {
            if n > 0 {
                // Only frames with a tag put back: the kernel filter judged the others.
                let mut gone_bytes = 0u64;
                let gone = batch.retain(|p| {
                    let keep = !p.data.get(12..14).is_some_and(|t| {
                        matches!(u16::from_be_bytes([t[0], t[1]]), 0x8100 | 0x88a8)
                    }) || f.matches_pkt(p);
                    if !keep {
                        gone_bytes += p.desc.wire_len as u64;
                    }
                    keep
                });
                self.stats.rx_drops.add(DropReason::Filter, gone as u64);
                n -= gone;
                bytes -= gone_bytes;
            }
        }
        self.stats.rx_packets += n as u64;
        self.stats.rx_bytes += bytes;
        Ok(n)
    }

    #[inline]
    fn tx(&mut self, batch: &mut Batch) -> Result<usize, PortError> {
        if batch.is_empty() {
            return Ok(0);
        }
        if self.tx.is_none() {
            self.open_tx()?;
        }
        match &mut self.tx {
            Some(t) => t.send(batch, &mut self.stats),
            None => Ok(0),
        }
    }

    fn tx_build_room(&self) -> Option<usize> {
        match &self.tx {
            Some(t) => Some(t.build_room()),
            None if self.tx_sock.is_some() => Some(tx::max_frame(self.mtu, self.link, true)),
            None => None,
        }
    }

    #[inline]
    fn tx_build(&mut self, want: usize, fill: &mut TxFill<'_>) -> Result<usize, PortError> {
        if self.tx.is_none() {
            self.open_tx()?;
        }
        match &mut self.tx {
            Some(t) => t.build(want, fill, &mut self.stats),
            None => Ok(0),
        }
    }

    fn flush(&mut self) -> Result<(), PortError> {
        match &mut self.tx {
            Some(t) => t.flush(),
            None => Ok(()),
        }
    }

    fn tx_finish(&mut self) -> Result<(), PortError> {
        match &mut self.tx {
            Some(t) => t.finish(&mut self.stats),
            None => Ok(()),
        }
    }

    fn stats(&mut self) -> PortStats {
        self.kernel_stats();
        self.stats
    }

    fn link_type(&self) -> LinkType {
        self.link
    }

    /// The MTU and the link header: the kernel refuses an untagged frame longer than MTU + 14
    /// (a tagged one may be 4 bytes longer).
    fn max_tx_frame(&self, tagged: bool) -> Option<usize> {
        Some(tx::max_frame(self.mtu, self.link, tagged))
    }

    /// None: the ring cannot allocate frames; build packets to send in a pool of your own.
    fn pool(&self) -> Option<&Arc<Pool>> {
        None
    }

    /// Attaches `filter` in the kernel. The kernel runs it on frames whose outer VLAN tag it
    /// has taken out, where it would judge the wrong bytes (`vlan 10` would never match, `udp`
    /// would match tagged UDP): so on Ethernet links the kernel program lets every frame
    /// with a stripped tag through (`SKF_AD_VLAN_TAG_PRESENT`) and the port runs the filter on
    /// those in user space once their tag is back. The filter thus always judges the frame as
    /// it was on the wire, as on every other port. Packets already in the ring arrived unfiltered: the
    /// port drops everything for a moment (a drop-all program), gives back every block, waiting
    /// long enough for the block timer to retire a partly filled one, then attaches the real
    /// program. The discarded packets are counted as filter drops. Bytes of earlier batches are
    /// invalid afterwards.
    fn attach_filter(&mut self, filter: &Filter) -> Result<bool, PortError> {
        if self.iface == ANY {
            // The kernel would run it on the bytes after the link header, not on the cooked
            // header it is compiled for: the caller runs it in user space.
            return Ok(false);
        }
        let drop_all = [Insn {
            code: 0x06, // BPF_RET | BPF_K
            jt: 0,
            jf: 0,
            k: 0,
        }];
        sys::attach_bpf(&self.fd, &self.iface, &drop_all)?;
        let wait = std::time::Duration::from_millis(2 * self.block_timeout_ms as u64 + 10);
        let end = std::time::Instant::now() + wait;
        loop {
            let n = self.rx.discard_all();
            self.stats.rx_drops.add(DropReason::Filter, n);
            if std::time::Instant::now() >= end {
                break;
            }
            let _ = sys::poll_in(&self.fd, RX_POLL_MS);
        }
        self.tag_filter = None;
        let r = if self.vlan {
            let mut prog = Vec::with_capacity(filter.program().len() + 3);
            prog.extend_from_slice(&VLAN_PASS);
            prog.extend_from_slice(filter.program());
            sys::attach_bpf(&self.fd, &self.iface, &prog)
        } else {
            sys::attach_bpf(&self.fd, &self.iface, filter.program())
        };
        match r {
            Ok(()) => {}
            Err(PortError::Os { source, .. }) if source.raw_os_error() == Some(libc::EINVAL) => {
                // The kernel's checker refused the program (libpcap's `protochain` jumps
                // backwards). Take everything again, as libpcap does, and let the caller filter.
                let pass_all = [Insn {
                    code: 0x06, // BPF_RET | BPF_K
                    jt: 0,
                    jf: 0,
                    k: u32::MAX,
                }];
                sys::attach_bpf(&self.fd, &self.iface, &pass_all)?;
                return Err(PortError::FilterRefused {
                    iface: self.iface.clone(),
                    source,
                });
            }
            Err(e) => return Err(e),
        }
        if self.vlan {
            self.tag_filter = Some(Filter::compile(filter.expr(), self.link)?);
        }
        Ok(true)
    }

    fn poll_fd(&self) -> Option<i32> {
        Some(self.fd.as_raw_fd())
    }

    /// The kernel stamps each packet as it hands it to the socket (`tp_sec`/`tp_nsec`:
    /// CLOCK_REALTIME, or the time the stack took on arrival when something asked for it).
    fn rx_time(&self) -> super::RxTime {
        super::RxTime::Arrival
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn missing_or_bad_interface_names_are_no_interface() {
        let o = PortOptions::default();
        for name in [
            "lr-no-such-if0",
            "",
            "a-name-far-too-long-for-linux",
            "bad\0name",
        ] {
            match AfPacket::open(name, &o) {
                Err(PortError::NoInterface(n)) => assert_eq!(n, name),
                Err(e) => panic!("{name:?}: unexpected error {e}"),
                Ok(_) => panic!("{name:?}: opened"),
            }
        }
    }

    #[test]
    fn bad_ring_geometry_is_rejected_before_any_syscall() {
        let o = PortOptions {
            ring_block_size: 5000,
            ..Default::default()
        };
        assert!(matches!(
            AfPacket::open("lo", &o),
            Err(PortError::BadUri { .. })
        ));
    }
}

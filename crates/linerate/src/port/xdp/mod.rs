//! `xdp:IFACE[@QUEUE]`: an AF_XDP socket on one receive queue of an interface.
//!
//! - [`umem`]: the UMEM is a [`Pool`] of 2 KiB frames; received batches are bound to it.
//! - [`ring`]: the fill, completion, rx and tx rings (mapped, cached producer/consumer cursors).
//! - [`prog`]: the XDP program of `bpf/` (redirect to the queue's socket in an XSKMAP, pass
//!   everything else), loaded with raw `bpf(2)` calls and attached through a bpf_link.
//! - [`kfwd`]: the kernel forwarder (`bpf/xdp_fwd.c`: l2fwd as an XDP program, DEVMAP
//!   redirect), `linerate fwd --engine kernel`.
//! - [`sys`]: the system calls and kernel structures.
//!
//! Receive is zero copy in zero-copy mode and one kernel copy in copy mode (veth offers only
//! copy mode); the frames of a received batch belong to the caller until it clears the batch.
//! Transmit posts the frames of a batch bound to this port's pool as they are (a bounce on one
//! port moves no bytes) and copies packets of any other pool into fresh frames. Sockets are
//! bound with `XDP_USE_NEED_WAKEUP`: the port makes a system call only when the kernel asks.
//!
//! Several queues of one interface are several ports (`xdp:eth0@0,xdp:eth0@1`): they share the
//! interface's program and map. The program is removed when the last port on the interface
//! drops, and by the kernel when the process ends in any way (bpf_link).

pub mod kfwd;
pub(crate) mod obj;
pub mod prog;
mod ring;
pub mod sys;
mod umem;

use super::{DropReason, Port, PortError, PortOptions, PortStats};
use crate::mem::{Batch, Desc, Pool, Region};
use prog::Attachment;
pub use prog::{AttachApi, AttachMode};
use ring::Ring;
use std::sync::Arc;
use sys::{Fd, XdpDesc, XdpStatistics};

/// Longest `poll()` wait (ms) of an `rx` that finds nothing ready.
pub const RX_POLL_MS: i32 = 1;
/// How long `open` retries a bind that finds the queue busy (a socket being released).
const BIND_BUSY_WAIT_MS: u32 = 1000;

/// Copy or zero-copy socket mode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum XdpMode {
    /// Zero copy if the driver can, else copy.
    #[default]
    Auto,
    /// The kernel copies between its buffers and the UMEM (works on every driver, veth too).
    Copy,
    /// The driver DMAs into the UMEM (fails if the driver cannot).
    ZeroCopy,
}

impl std::str::FromStr for XdpMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(XdpMode::Auto),
            "copy" => Ok(XdpMode::Copy),
            "zerocopy" | "zero-copy" | "zc" => Ok(XdpMode::ZeroCopy),
            _ => Err(format!("'{s}': expected copy, zerocopy or auto")),
        }
    }
}

impl std::str::FromStr for AttachMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(AttachMode::Auto),
            "native" | "drv" => Ok(AttachMode::Native),
            "generic" | "skb" => Ok(AttachMode::Generic),
            _ => Err(format!("'{s}': expected native, generic or auto")),
        }
    }
}

/// AF_XDP settings beyond [`PortOptions`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct XdpConfig {
    /// Copy or zero-copy.
    pub mode: XdpMode,
    /// Native or generic attach of the program.
    pub attach: AttachMode,
    /// bpf_link (default) or rtnetlink.
    pub api: AttachApi,
    /// Entries in each of the four rings (a power of two).
    pub ring_size: u32,
}

impl Default for XdpConfig {
    fn default() -> Self {
        XdpConfig {
            mode: XdpMode::Auto,
            attach: AttachMode::Auto,
            api: AttachApi::Link,
            ring_size: 2048,
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
    // Declared last: dropped after the rings are unmapped.
    fd: Fd,
}

/// Splits `IFACE[@QUEUE]`.
pub fn parse_name(rest: &str) -> Result<(&str, u32), PortError> {
    match rest.rsplit_once('@') {
        None => Ok((rest, 0)),
        Some((i, q)) => q.parse().map(|q| (i, q)).map_err(|_| PortError::BadUri {
            uri: format!("xdp:{rest}"),
            why: format!("queue '{q}' is not a number (write xdp:IFACE@QUEUE, e.g. xdp:eth0@0)"),
        }),
    }
}

impl XdpPort {
    /// Opens `IFACE[@QUEUE]` (in the calling thread's network namespace): UMEM, rings, socket
    /// bound to the queue, program attached and the socket entered in its map.
    pub fn open(rest: &str, opts: &PortOptions, cfg: &XdpConfig) -> Result<XdpPort, PortError> {
        Self::open_inner(rest, opts, cfg, None)
    }

    /// Opens `IFACE[@QUEUE]` on the UMEM of `with` (`XDP_SHARED_UMEM`, kernel 5.10+ for another
    /// interface or queue): both ports receive into and send from one pool, so a batch received
    /// on one is sent on the other without a copy. The socket mode (copy or zero-copy) is the
    /// one `with` got. `with`'s pool should have room for both ports' rings (`PortOptions::frames`
    /// ≥ 4 × ring size + 2048 when `with` was opened).
    pub fn open_shared(
        rest: &str,
        opts: &PortOptions,
        cfg: &XdpConfig,
        with: &XdpPort,
    ) -> Result<XdpPort, PortError> {
        Self::open_inner(rest, opts, cfg, Some((&with.pool, with.fd.0)))
    }

    fn open_inner(
        rest: &str,
        opts: &PortOptions,
        cfg: &XdpConfig,
        share: Option<(&Arc<Pool>, i32)>,
    ) -> Result<XdpPort, PortError> {
        let (iface, queue) = parse_name(rest)?;
        let name = format!("xdp:{rest}");
        let rs = cfg.ring_size;
        if !rs.is_power_of_two() || !(64..=65536).contains(&rs) {
            return Err(PortError::BadUri {
                uri: name,
                why: format!("ring size {rs} must be a power of two from 64 to 65536"),
            });
        }
        let ifindex = sys::ifindex(iface)?;
        let frames = opts.frames.max(2 * rs + 1024);
        let tries: &[u16] = match cfg.mode {
            _ if share.is_some() => &[sys::XDP_SHARED_UMEM],
            XdpMode::Auto => &[sys::XDP_ZEROCOPY, sys::XDP_COPY],
            XdpMode::Copy => &[sys::XDP_COPY],
            XdpMode::ZeroCopy => &[sys::XDP_ZEROCOPY],
        };
        let mut last = None;
        for &mode in tries {
            // The kernel releases a closed socket's hold on its queue asynchronously: right
            // after a previous run ended (or crashed) bind can say EBUSY for a moment.
            let mut waited = 0;
            let r = loop {
                match Self::setup(iface, ifindex, queue, frames, rs, mode, share) {
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
                    let attach = Attachment::get(iface, ifindex, cfg.attach, cfg.api)?;
                    attach.set_queue(queue, parts.fd.0)?;
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
                        fd: parts.fd,
                    };
                    p.refill();
                    return Ok(p);
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| PortError::NoInterface(iface.to_string())))
    }

    fn setup(
        iface: &str,
        ifindex: u32,
        queue: u32,
        frames: u32,
        rs: u32,
        mode: u16,
        share: Option<(&Arc<Pool>, i32)>,
    ) -> Result<Parts, PortError> {
        let fd = sys::xdp_socket(iface)?;
        let pool = match share {
            Some((p, _)) => p.clone(),
            None => {
                let pool = umem::pool(frames)?;
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
        let (flags, shared_umem_fd, op) = match share {
            Some((_, fd)) => (sys::XDP_SHARED_UMEM, fd as u32, "bind(XDP_SHARED_UMEM)"),
            None if mode == sys::XDP_ZEROCOPY => {
                (mode | sys::XDP_USE_NEED_WAKEUP, 0, "bind(XDP_ZEROCOPY)")
            }
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

    /// How the program is attached (Native or Generic).
    pub fn attach_mode(&self) -> AttachMode {
        self.attach.mode()
    }

    /// The id of a stale program of an earlier run that this port's open removed.
    pub fn replaced_stale(&self) -> Option<u32> {
        self.attach.replaced()
    }

    /// The kernel's socket counters.
    pub fn kernel_stats(&mut self) -> XdpStatistics {
        if let Ok(k) = sys::getopt::<XdpStatistics>(&self.fd, sys::XDP_STATISTICS) {
            let new = (k.rx_dropped + k.rx_ring_full)
                .saturating_sub(self.kernel.rx_dropped + self.kernel.rx_ring_full);
            self.stats.rx_drops.add(DropReason::Kernel, new);
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
            let Some(a) = self.frames.alloc() else { break };
            // SAFETY: done < n, which `free` returned.
            unsafe { self.fill.write(done, a) };
            done += 1;
        }
        if done > 0 {
            self.fill.submit(done);
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
        let n = self.rx.ready(batch.room() as u32);
        if n == 0 {
            return 0;
        }
        let ts = crate::time::wall_ns();
        let mut bytes = 0u64;
        for i in 0..n {
            // SAFETY: i < n, which `ready` returned.
            let d = unsafe { self.rx.read(i) };
            bytes += d.len as u64;
            batch.push(Desc {
                addr: d.addr,
                ts,
                len: d.len,
                wire_len: d.len,
                hash: 0,
                port: 0,
                flags: 0,
            });
        }
        self.rx.release(n);
        self.stats.rx_packets += n as u64;
        self.stats.rx_bytes += bytes;
        n as usize
    }
}

struct Parts {
    pool: Arc<Pool>,
    fill: Ring<u64>,
    comp: Ring<u64>,
    rx: Ring<XdpDesc>,
    tx: Ring<XdpDesc>,
    fd: Fd,
}

impl Port for XdpPort {
    fn name(&self) -> &str {
        &self.name
    }

    #[inline]
    fn rx(&mut self, batch: &mut Batch) -> Result<usize, PortError> {
        batch.bind(&self.pool);
        self.refill();
        let n = self.fill_batch(batch);
        if n > 0 {
            return Ok(n);
        }
        // Nothing ready: sleep in poll (which also wakes the kernel if the fill ring asks).
        if sys::poll_in(self.fd.0, self.rx_wait_ms) {
            return Ok(self.fill_batch(batch));
        }
        if self.fill.needs_wakeup() {
            sys::kick_rx(&self.fd);
        }
        Ok(0)
    }

    #[inline]
    fn tx(&mut self, batch: &mut Batch) -> Result<usize, PortError> {
        self.reclaim();
        if batch.is_empty() {
            return Ok(0);
        }
        let ours = batch.pool().is_some_and(|p| Arc::ptr_eq(p, &self.pool));
        let room = self.tx.free(batch.len() as u32);
        let max = self.pool.max_packet() as usize;
        let mut taken = 0usize;
        let mut queued = 0u32;
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
            let addr = if ours && d.flags & Desc::F_SHARED == 0 {
                d.addr
            } else {
                // No free frame now: the rest stays in the batch for the caller.
                let Some(a) = self.frames.alloc() else { break };
                let src = batch.data(taken);
                let dst = self.frames.frame_mut(a);
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
            bytes += d.len as u64;
            taken += 1;
        }
        if queued > 0 {
            self.tx.submit(queued);
            self.stats.tx_packets += queued as u64;
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

    fn poll_fd(&self) -> Option<i32> {
        Some(self.fd.0)
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
        self.attach.clear_queue(self.queue);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn names_and_modes_parse() {
        assert_eq!(parse_name("eth0").unwrap(), ("eth0", 0));
        assert_eq!(parse_name("eth0@3").unwrap(), ("eth0", 3));
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

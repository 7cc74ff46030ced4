//! What an `xdp:` port is asked for: socket and attach modes, ring sizes, busy polling
//! ([`XdpConfig`], part of [`PortOptions`](crate::port::PortOptions)) and which receive queues
//! (`xdp:IFACE@QUEUES`). Below the port itself, so that options and URIs name them without
//! importing the port.

use super::prog::{AttachApi, AttachMode};
use crate::port::PortError;

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

/// AF_XDP settings beyond [`PortOptions`](crate::port::PortOptions).
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
    /// AF_XDP busy polling (None: the kernel's NAPI moves packets by itself).
    pub busy_poll: Option<BusyPoll>,
    /// Bytes of a UMEM frame, 2048 or 4096 (`--xdp-frame-size`): a received piece holds the
    /// frame less 256 B of kernel headroom (1 792 or 3 840 B), so a 9 000 B frame comes in 6
    /// or 3 pieces; 4096 halves the frames a UMEM of the same memory holds.
    pub frame_size: u32,
    /// Bind with `XDP_USE_SG` where the kernel and driver take it (default); false: never
    /// (the port carries frames up to a UMEM frame less 256 B and counts longer ones
    /// too_big, as on a kernel before 6.6).
    pub multi_buffer: bool,
}

impl Default for XdpConfig {
    fn default() -> Self {
        XdpConfig {
            mode: XdpMode::Auto,
            attach: AttachMode::Auto,
            api: AttachApi::Link,
            ring_size: 2048,
            busy_poll: None,
            frame_size: super::umem::FRAME,
            multi_buffer: true,
        }
    }
}

/// AF_XDP busy polling, as the kernel's af_xdp.rst describes it: the socket prefers busy
/// polling (`SO_PREFER_BUSY_POLL`), each receive or send call polls the device's NAPI for up to
/// `usecs` (`SO_BUSY_POLL`) and `budget` packets (`SO_BUSY_POLL_BUDGET`), and the device
/// defers its interrupts (`napi_defer_hard_irqs` 2, `gro_flush_timeout` 200 µs, set while a
/// busy-polling port is open on it when they were 0, put back after the last one closes): the
/// application moves packets on its own core instead of competing with a softirq or NAPI
/// thread for it. Needs root (CAP_NET_ADMIN) for usecs above `net.core.busy_read`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BusyPoll {
    /// How long one call busy-polls, in µs (1 to 1000).
    pub usecs: u32,
    /// Packets per busy poll (1 to 1024).
    pub budget: u32,
}

impl Default for BusyPoll {
    fn default() -> Self {
        BusyPoll {
            usecs: 20,
            budget: 64,
        }
    }
}

/// Which receive queues an `xdp:` port binds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Queues {
    /// Every receive queue of the interface (`xdp:IFACE`, `xdp:IFACE@all`, `xdp:IFACE@*`).
    All,
    /// Queues `first..=last` (`xdp:IFACE@Q` is `Q..=Q`; `xdp:IFACE@a-b`).
    Range(u32, u32),
}

/// Splits `IFACE[@QUEUES]`: no suffix, `@all` or `@*` = every receive queue, `@Q` one queue,
/// `@a-b` a range.
pub fn parse_name(rest: &str) -> Result<(&str, Queues), PortError> {
    let Some((iface, q)) = rest.rsplit_once('@') else {
        return Ok((rest, Queues::All));
    };
    let bad = |why: String| PortError::BadUri {
        uri: format!("xdp:{rest}"),
        why,
    };
    let num = |s: &str| {
        s.trim().parse::<u32>().map_err(|_| {
            bad(format!(
                "queue '{s}' is not a number (write xdp:IFACE for every queue, xdp:IFACE@Q for \
                 one, xdp:IFACE@a-b for a range)"
            ))
        })
    };
    let sel = match q {
        "all" | "*" => Queues::All,
        _ => match q.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if a > b {
                    return Err(bad(format!(
                        "queue range {a}-{b} is empty (write low-high)"
                    )));
                }
                Queues::Range(a, b)
            }
            None => {
                let n = num(q)?;
                Queues::Range(n, n)
            }
        },
    };
    Ok((iface, sel))
}

//! Steering a running generator from another thread (pktgen-dpdk's `start`, `stop`, `set rate`,
//! `set size`, `set src|dst mac|ip`, `set sport|dport`, `set proto`, `set ttl`, `set vlan`,
//! `set count`, for every stream or one): the controller replaces the [`Settings`] and bumps
//! a version; each worker loads the version once per departure burst (one relaxed load, nothing
//! per packet) and, when it moved, takes the new settings and restarts its schedule from now.

use super::template::L4;
use super::vary::SizeSpec;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// What the workers should do now.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    /// Sending (`start`) or waiting for a command (`stop`).
    pub sending: bool,
    /// Packets per second of each stream (None: as fast as possible).
    pub pps: Option<f64>,
    /// Frame sizes of every stream (None: as the streams were given).
    pub size: Option<SizeSpec>,
    /// Destination MAC of every stream (None: as the streams were given).
    pub dst_mac: Option<[u8; 6]>,
    /// Packets to send after each `start` (or from the change on), in all workers together;
    /// then the workers stop sending until the next `start`. None: no limit.
    pub count: Option<u64>,
    /// The other fields of every stream (None: as the streams were given).
    pub fields: Fields,
    /// Fields of one stream (by its id), over those of every stream; a later entry of the
    /// same stream has been merged into the earlier one.
    pub streams: Vec<(u16, Fields)>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            sending: true,
            pps: None,
            size: None,
            dst_mac: None,
            count: None,
            fields: Fields::default(),
            streams: Vec::new(),
        }
    }
}

impl Settings {
    /// The fields of stream `id`, to change (added when it had none).
    pub fn stream(&mut self, id: u16) -> &mut Fields {
        let i = match self.streams.iter().position(|(s, _)| *s == id) {
            Some(i) => i,
            None => {
                self.streams.push((id, Fields::default()));
                self.streams.len() - 1
            }
        };
        &mut self.streams[i].1
    }
}

/// Fields a command sets (None: unchanged). An address or port set by a command is one value:
/// the stream's range or list of them gives way to it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Fields {
    /// Packets per second.
    pub pps: Option<f64>,
    /// Frame sizes (with CRC).
    pub size: Option<SizeSpec>,
    /// Source MAC.
    pub src_mac: Option<[u8; 6]>,
    /// Destination MAC.
    pub dst_mac: Option<[u8; 6]>,
    /// Source address (of the stream's family).
    pub src_ip: Option<IpAddr>,
    /// Destination address.
    pub dst_ip: Option<IpAddr>,
    /// Source port (ICMP: the echo identifier).
    pub sport: Option<u16>,
    /// Destination port (ICMP: the echo sequence number).
    pub dport: Option<u16>,
    /// Protocol.
    pub proto: Option<L4>,
    /// TTL or hop limit.
    pub ttl: Option<u8>,
    /// The 802.1Q tag: `Some(None)` takes it off (and a QinQ service tag with it).
    pub vlan: Option<Option<u16>>,
    /// With `vlan`: the 802.1ad service tag outside it (QinQ), or none.
    pub svlan: Option<Option<u16>>,
}

impl Fields {
    /// Whether no field is set.
    pub fn is_empty(&self) -> bool {
        *self == Fields::default()
    }
}

/// Settings shared by a controller and the workers of one run.
#[derive(Debug, Default)]
pub struct Control {
    version: AtomicU64,
    settings: Mutex<Settings>,
    /// Bumped by `start`: workers refill their count even if nothing else changed.
    starts: AtomicU64,
}

impl Control {
    /// A control starting with `s`.
    pub fn new(s: Settings) -> Control {
        Control {
            version: AtomicU64::new(0),
            settings: Mutex::new(s),
            starts: AtomicU64::new(0),
        }
    }

    /// Changes the settings (`f` edits a copy); the workers take them at their next burst.
    pub fn update(&self, f: impl FnOnce(&mut Settings)) {
        let mut g = self.settings.lock().unwrap_or_else(|e| e.into_inner());
        let mut s = g.clone();
        f(&mut s);
        *g = s;
        self.version.fetch_add(1, Ordering::Release);
    }

    /// `start`: sending again (with a fresh count), even if it was sending.
    pub fn start(&self) {
        // Before the version moves, so that a worker that sees the new version sees it too.
        self.starts.fetch_add(1, Ordering::Relaxed);
        self.update(|s| s.sending = true);
    }

    /// The settings now.
    pub fn get(&self) -> Settings {
        self.settings
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Changes so far (a worker compares it with the one it applied).
    #[inline]
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    pub(crate) fn starts(&self) -> u64 {
        self.starts.load(Ordering::Relaxed)
    }
}

/// The share of `total` of worker `i` of `n` (the first ones take the remainder).
pub fn share(total: u64, i: usize, n: usize) -> u64 {
    let n = n.max(1) as u64;
    total / n + u64::from((i as u64) < total % n)
}

//! What ports and workers count: packets and bytes each way and drops by reason
//! ([`DropReason`]): every packet that enters linerate is delivered or counted under one. Ports
//! keep them ([`PortStats`]); the printers, JSON and Prometheus read them.

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

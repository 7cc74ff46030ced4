//! Zero-copy header views (Ethernet, VLAN, IPv4, IPv6, TCP, UDP, ICMP), a one-pass header parser,
//! flow keys and hashes.
//!
//! Views follow one pattern: `View::new_checked(buffer)` checks once that every fixed field and the
//! header length the packet announces are present, and after that every accessor is infallible and
//! cannot panic. [`parse()`] walks link, VLAN, IP (with IPv6 extension headers) and transport headers
//! in one pass without allocating and reports, in [`Parsed::stop`], why it stopped early;
//! [`parse_deep()`] goes on through PPP, MPLS, PPPoE and LLC/SNAP to the IP header, and
//! [`tunnel_inner()`] into GRE, IPIP, 6in4 and VXLAN.
//! [`flow`] builds direction-independent [`FlowKey`]s and the hashes balancers use; [`emit`] writes
//! headers (the generator's templates and the built-in source are built with it).

pub mod checksum;
pub mod emit;
pub mod ethernet;
pub mod flow;
pub mod ipv4;
pub mod ipv6;
pub mod l4;
mod link;
pub mod parse;
pub mod print;

pub use ethernet::{EthernetFrame, Vlans, MAX_VLANS};
pub use flow::{
    eth_v4_addrs, eth_v4_tuple, hash_5tuple_symmetric, hash_5tuple_symmetric_eth_v4,
    hash_5tuple_symmetric_v4, hash_ip_symmetric, hash_ip_symmetric_eth_v4, hash_ip_symmetric_v4,
    hash_mac, hash_proto, hash_toeplitz, hash_toeplitz_symmetric, hash_toeplitz_symmetric_eth_v4,
    hash_toeplitz_symmetric_v4, hash_vlan, toeplitz, Direction, FlowKey, Toeplitz, V4Tuple,
    RSS_KEY_MICROSOFT, RSS_KEY_SYMMETRIC,
};
pub use ipv4::Ipv4Packet;
pub use ipv6::{Ipv6Packet, Ipv6Walk};
pub use l4::{IcmpPacket, TcpSegment, UdpDatagram};
pub use link::LinkType;
pub use parse::{
    inner, ip_header_whole, parse, parse_deep, tunnel_inner, Fragment, Parsed, StepError, Tunnels,
};

/// Ethertypes this module knows.
pub mod ethertype {
    /// IPv4.
    pub const IPV4: u16 = 0x0800;
    /// ARP.
    pub const ARP: u16 = 0x0806;
    /// IPv6.
    pub const IPV6: u16 = 0x86dd;
    /// 802.1Q VLAN tag.
    pub const VLAN: u16 = 0x8100;
    /// 802.1ad service tag (QinQ).
    pub const QINQ: u16 = 0x88a8;
    /// Pre-standard QinQ tag.
    pub const QINQ_OLD: u16 = 0x9100;
    /// Transparent Ethernet bridging (Ethernet inside GRE).
    pub const TEB: u16 = 0x6558;

    /// Whether `t` is one of the VLAN tag protocol identifiers (0x8100, 0x88a8, 0x9100).
    #[inline]
    pub const fn is_vlan(t: u16) -> bool {
        matches!(t, VLAN | QINQ | QINQ_OLD)
    }
}

/// IP protocol numbers this module knows.
pub mod proto {
    /// IPv6 Hop-by-Hop options.
    pub const HOPOPT: u8 = 0;
    /// ICMP.
    pub const ICMP: u8 = 1;
    /// TCP.
    pub const TCP: u8 = 6;
    /// UDP.
    pub const UDP: u8 = 17;
    /// IPv6 Routing header.
    pub const IPV6_ROUTE: u8 = 43;
    /// IPv6 Fragment header.
    pub const IPV6_FRAG: u8 = 44;
    /// IPv4 in IPv4 (IPIP).
    pub const IPIP: u8 = 4;
    /// IPv6 in IPv4 (6in4, SIT).
    pub const IPV6_IN_IP: u8 = 41;
    /// GRE.
    pub const GRE: u8 = 47;
    /// ESP.
    pub const ESP: u8 = 50;
    /// Authentication header.
    pub const AH: u8 = 51;
    /// ICMPv6.
    pub const ICMPV6: u8 = 58;
    /// IPv6 "no next header".
    pub const IPV6_NONXT: u8 = 59;
    /// IPv6 Destination options.
    pub const IPV6_OPTS: u8 = 60;
    /// IPv6 Mobility header.
    pub const MOBILITY: u8 = 135;
    /// Host Identity Protocol.
    pub const HIP: u8 = 139;
    /// Shim6.
    pub const SHIM6: u8 = 140;
    /// SCTP.
    pub const SCTP: u8 = 132;
}

/// The header a [`WireError`] is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Layer {
    /// The link-layer header (Ethernet, SLL, SLL2, NULL).
    Link,
    /// An 802.1Q / QinQ tag.
    Vlan,
    /// The IPv4 header.
    Ipv4,
    /// The IPv6 fixed header.
    Ipv6,
    /// An IPv6 extension header.
    Ipv6Ext,
    /// The TCP header.
    Tcp,
    /// The UDP header.
    Udp,
    /// The ICMP or ICMPv6 header.
    Icmp,
    /// The SCTP common header.
    Sctp,
    /// A GRE header.
    Gre,
    /// A GTP-U header.
    Gtp,
}

/// Why a view could not be made or why [`parse()`] stopped before the transport payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum WireError {
    /// The packet ends inside this header.
    #[error("truncated {0:?} header")]
    Truncated(Layer),
    /// The IP version nibble does not match the link's ethertype or family.
    #[error("bad IP version")]
    BadVersion,
    /// A header-length field is smaller than the fixed header (IPv4 IHL < 5, TCP offset < 5).
    #[error("bad {0:?} header length")]
    BadHeaderLength(Layer),
    /// A length field is smaller than the header it covers (IPv4 total length, UDP length).
    #[error("bad {0:?} length field")]
    BadLength(Layer),
    /// The link carries something else than IP (ARP, LLC, MPLS, ...); the ethertype is in
    /// [`Parsed::ethertype`].
    #[error("not IP")]
    NotIp,
    /// The link type is not one [`parse()`] knows.
    #[error("unsupported link type {0}")]
    UnsupportedLink(u32),
    /// More VLAN tags than [`MAX_VLANS`].
    #[error("too many VLAN tags")]
    TooManyVlans,
    /// More IPv6 extension headers than [`ipv6::MAX_EXT_HEADERS`].
    #[error("too many IPv6 extension headers")]
    TooManyExtHeaders,
    /// A fragment other than the first: it carries no transport header.
    #[error("non-first fragment")]
    NonFirstFragment,
    /// IPv6 "no next header" (59): nothing follows.
    #[error("no next header")]
    NoNextHeader,
}

/// Reads a big-endian u16 at `off`, or `None` past the end.
#[inline(always)]
pub(crate) fn be16(d: &[u8], off: usize) -> Option<u16> {
    match d.get(off..off.checked_add(2)?) {
        Some(&[a, b]) => Some(u16::from_be_bytes([a, b])),
        _ => None,
    }
}

/// Reads a big-endian u32 at `off`, or `None` past the end.
#[inline(always)]
pub(crate) fn be32(d: &[u8], off: usize) -> Option<u32> {
    match d.get(off..off.checked_add(4)?) {
        Some(&[a, b, c, e]) => Some(u32::from_be_bytes([a, b, c, e])),
        _ => None,
    }
}

/// Copies `N` bytes at `off`, or `None` past the end.
#[inline(always)]
pub(crate) fn arr<const N: usize>(d: &[u8], off: usize) -> Option<[u8; N]> {
    d.get(off..off.checked_add(N)?)?.try_into().ok()
}

//! Link-layer header types: what the bytes of a frame start with.

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

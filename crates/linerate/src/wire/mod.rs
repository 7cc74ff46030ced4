//! Zero-copy header views (Ethernet, VLAN, IPv4, IPv6, TCP, UDP, ICMP), flow keys and hashes.

//! Which device names are linerate's: the rest go to the system's libpcap untouched.
//!
//! A name is linerate's when it starts with one of [`PREFIXES`] (`cluster:`, `xdp:`,
//! `afpacket:`), followed by something. Every other name (`eth0`, `any`, `lo`, `bluetooth0`,
//! `nflog:5`, `dbus-system`, a number from `tcpdump -D`) is libpcap's. `mem:` wires live inside
//! one process and `pcap:` files are read by libpcap itself (`-r`), so neither is taken.

/// The prefixes of the device names linerate opens.
pub const PREFIXES: [&str; 3] = ["cluster:", "xdp:", "afpacket:"];

/// Whether `name` is a linerate port the library opens itself.
pub fn owns(name: &str) -> bool {
    PREFIXES
        .iter()
        .any(|p| name.len() > p.len() && name.starts_with(p))
}

/// Whether `name` (a C string's bytes, not necessarily UTF-8) is linerate's.
pub fn owns_bytes(name: &[u8]) -> bool {
    std::str::from_utf8(name).is_ok_and(owns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linerate_names_are_ours() {
        for n in [
            "cluster:10@0",
            "cluster:10",
            "xdp:eth0",
            "xdp:eth0@2",
            "afpacket:eth0",
            "afpacket:any",
        ] {
            assert!(owns(n), "{n}");
            assert!(owns_bytes(n.as_bytes()), "{n}");
        }
    }

    #[test]
    fn everything_else_is_libpcaps() {
        for n in [
            "eth0",
            "any",
            "lo",
            "1",
            "nflog:5",
            "nfqueue",
            "dbus-system",
            "bluetooth-monitor",
            "mem:a",
            "pcap:/tmp/x.pcap",
            "cluster:",
            "xdp:",
            "afpacket:",
            "Cluster:10@0",
            "",
            "eth0:1",
        ] {
            assert!(!owns(n), "{n}");
        }
        assert!(!owns_bytes(b"cluster:\xff"));
    }
}

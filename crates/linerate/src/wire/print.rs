//! One line per packet as `tcpdump -n` prints it (`-e`: with the link header), for the common
//! protocols: Ethernet and 802.1Q, ARP, IPv4, IPv6, UDP, TCP (flags, sequence numbers relative to
//! the conversation's first as tcpdump keeps them, window, the usual options, an HTTP request or
//! status line), ICMP and ICMPv6 echo; anything else gets a shorter line of the same shape.
//!
//! A slow-path view (tcpdump's): [`Printer::line`] appends to a `String` the caller writes once
//! per batch. Bad or cut packets never panic: what cannot be read is said (`[|tcp]`, as tcpdump).

use super::ethernet::EthernetFrame;
use super::ipv4::Ipv4Packet;
use super::ipv6::Ipv6Packet;
use super::l4::TcpSegment;
use super::LinkType;
use std::collections::HashMap;
use std::fmt::Write;
use std::net::{Ipv4Addr, Ipv6Addr};

/// How the time of a line is printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeFormat {
    /// `HH:MM:SS.ffffff` in the local time zone (tcpdump's default).
    Local,
    /// `HH:MM:SS.ffffff` in UTC.
    Utc,
    /// Seconds since the epoch, `S.ffffff` (tcpdump's `-tt`).
    Epoch,
}

/// Conversations whose first sequence numbers are kept (tcpdump keeps all; this bounds memory:
/// the table is cleared when full, and a conversation seen again starts anew).
const MAX_CONVERSATIONS: usize = 1 << 16;

/// Prints packets of one link type.
pub struct Printer {
    link: LinkType,
    ether: bool,
    time: TimeFormat,
    /// Canonical (lower, higher) endpoints → (seq base, ack base) of the lower endpoint's side.
    tcp: HashMap<([u8; 18], [u8; 18]), (u32, u32)>,
    /// Local offset cache: (the hour it was read for, offset seconds).
    offset: Option<(i64, i64)>,
}

impl std::fmt::Debug for Printer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Printer")
            .field("link", &self.link)
            .field("ether", &self.ether)
            .field("time", &self.time)
            .finish()
    }
}

fn be16(d: &[u8], o: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*d.get(o)?, *d.get(o + 1)?]))
}

fn be32(d: &[u8], o: usize) -> Option<u32> {
    Some(u32::from_be_bytes(d.get(o..o + 4)?.try_into().ok()?))
}

fn mac(out: &mut String, m: &[u8]) {
    for (i, b) in m.iter().enumerate() {
        if i > 0 {
            out.push(':');
        }
        let _ = write!(out, "{b:02x}");
    }
}

/// tcpdump's name of an ethertype (`-e` lines).
fn ethertype_name(t: u16) -> &'static str {
    match t {
        0x0800 => "IPv4",
        0x86dd => "IPv6",
        0x0806 => "ARP",
        0x8035 => "Reverse ARP",
        0x8100 => "802.1Q",
        0x88a8 => "802.1Q-QinQ",
        0x9100 => "802.1Q-9100",
        0x8847 => "MPLS unicast",
        0x8848 => "MPLS multicast",
        0x8863 => "PPPoE D",
        0x8864 => "PPPoE S",
        0x88cc => "LLDP",
        0x888e => "EAPOL",
        0x88f7 => "PTP",
        0x8809 => "Slow Protocols",
        0x22f0 => "AVTP",
        _ => "Unknown",
    }
}

/// TCP flags as tcpdump prints them between brackets: `F S R P . U E W` in that order.
fn tcp_flags(out: &mut String, f: u16) {
    const T: [(u16, char); 8] = [
        (0x01, 'F'),
        (0x02, 'S'),
        (0x04, 'R'),
        (0x08, 'P'),
        (0x10, '.'),
        (0x20, 'U'),
        (0x40, 'E'),
        (0x80, 'W'),
    ];
    let n = out.len();
    for (b, c) in T {
        if f & b != 0 {
            out.push(c);
        }
    }
    if out.len() == n {
        out.push_str("none");
    }
}

/// An address as tcpdump -n prints it, with the port after a dot when there is one.
#[derive(Clone, Copy)]
enum Addr {
    V4([u8; 4]),
    V6([u8; 16]),
}

impl Addr {
    fn push(&self, out: &mut String) {
        let _ = match self {
            Addr::V4(a) => write!(out, "{}", Ipv4Addr::from(*a)),
            Addr::V6(a) => write!(out, "{}", Ipv6Addr::from(*a)),
        };
    }

    fn key(&self, port: u16) -> [u8; 18] {
        let mut k = [0u8; 18];
        match self {
            Addr::V4(a) => k[12..16].copy_from_slice(a),
            Addr::V6(a) => k[..16].copy_from_slice(a),
        }
        k[16..].copy_from_slice(&port.to_be_bytes());
        k
    }
}

/// HTTP request methods tcpdump recognises (its list, enough for the first line).
const HTTP_METHODS: [&str; 15] = [
    "OPTIONS",
    "GET",
    "HEAD",
    "POST",
    "PUT",
    "DELETE",
    "TRACE",
    "CONNECT",
    "PROPFIND",
    "PROPPATCH",
    "MKCOL",
    "COPY",
    "MOVE",
    "LOCK",
    "UNLOCK",
];

impl Printer {
    /// A printer for packets of `link`; `ether`: print the link header (`-e`).
    pub fn new(link: LinkType, ether: bool, time: TimeFormat) -> Printer {
        Printer {
            link,
            ether,
            time,
            tcp: HashMap::new(),
            offset: None,
        }
    }

    /// Appends the line of one packet (its captured bytes, its length on the wire, its time in
    /// ns since the epoch) to `out`, newline included.
    pub fn line(&mut self, out: &mut String, data: &[u8], wire_len: u32, ts_ns: u64) {
        self.time(out, ts_ns);
        match self.link {
            LinkType::ETHERNET => self.ethernet(out, data, wire_len),
            LinkType::RAW => {
                // tcpdump -e on a raw IP link: `ip: ` and the line without its `IP `/`IP6 `.
                let prefix = !self.ether;
                if self.ether {
                    out.push_str("ip: ");
                }
                match data.first().map(|b| b >> 4) {
                    Some(6) => self.ipv6(out, data, prefix),
                    _ => self.ipv4(out, data, prefix),
                }
            }
            LinkType::IPV4 => self.ipv4(out, data, true),
            LinkType::IPV6 => self.ipv6(out, data, true),
            LinkType::LINUX_SLL => self.sll(out, data, wire_len),
            LinkType::NULL => self.null(out, data, wire_len),
            l => {
                let _ = write!(out, "[link type {}], length {wire_len}", l.0);
            }
        }
        out.push('\n');
    }

    fn time(&mut self, out: &mut String, ts_ns: u64) {
        let secs = (ts_ns / 1_000_000_000) as i64;
        let us = (ts_ns % 1_000_000_000) / 1000;
        if self.time == TimeFormat::Epoch {
            let _ = write!(out, "{secs}.{us:06} ");
            return;
        }
        let off = match self.time {
            TimeFormat::Local => {
                let hour = secs.div_euclid(3600);
                match self.offset {
                    Some((h, o)) if h == hour => o,
                    _ => {
                        let o = crate::sys::localtime::utc_offset(secs);
                        self.offset = Some((hour, o));
                        o
                    }
                }
            }
            _ => 0,
        };
        let day = (secs + off).rem_euclid(86_400);
        let _ = write!(
            out,
            "{:02}:{:02}:{:02}.{us:06} ",
            day / 3600,
            day / 60 % 60,
            day % 60
        );
    }

    /// Linux cooked capture v1: with -e, ` In 00:11:22:33:44:55 ethertype IPv4 (0x0800),
    /// length N: ` as tcpdump prints it.
    fn sll(&mut self, out: &mut String, d: &[u8], wire_len: u32) {
        let (Some(kind), Some(halen), Some(t)) = (be16(d, 0), be16(d, 4), be16(d, 14)) else {
            out.push_str("[|sll]");
            return;
        };
        if self.ether {
            let kind = match kind {
                0 => "In",
                1 => "B",
                2 => "M",
                3 => "P",
                4 => "Out",
                _ => "?",
            };
            let _ = write!(out, "{kind:>3}");
            let n = usize::from(halen).min(8);
            // No link address (halen 0): tcpdump prints `Out ethertype`, one space.
            if n > 0 {
                out.push(' ');
                mac(out, d.get(6..6 + n).unwrap_or_default());
            }
            let _ = write!(
                out,
                " ethertype {} (0x{t:04x}), length {wire_len}: ",
                ethertype_name(t)
            );
        }
        let p = d.get(16..).unwrap_or_default();
        let prefix = !self.ether;
        match t {
            0x0800 => self.ipv4(out, p, prefix),
            0x86dd => self.ipv6(out, p, prefix),
            0x0806 => arp(out, p, prefix),
            _ => hex_ascii(out, p),
        }
    }

    /// BSD loopback: with -e, `AF IPv4 (2), length N: ` as tcpdump prints it.
    fn null(&mut self, out: &mut String, d: &[u8], wire_len: u32) {
        let Some(b) = d.get(0..4) else {
            out.push_str("[|null]");
            return;
        };
        // The family is in the capturing host's byte order.
        let le = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        let af = if le > 0xffff { le.swap_bytes() } else { le };
        let name = match af {
            2 => "IPv4",
            24 | 28 | 30 => "IPv6",
            _ => "",
        };
        if self.ether {
            let n = if name.is_empty() { "Unknown" } else { name };
            let _ = write!(out, "AF {n} ({af}), length {wire_len}: ");
        }
        let p = &d[4..];
        let prefix = !self.ether;
        match name {
            "IPv4" => self.ipv4(out, p, prefix),
            "IPv6" => self.ipv6(out, p, prefix),
            _ => hex_ascii(out, p),
        }
    }

    fn ethernet(&mut self, out: &mut String, d: &[u8], wire_len: u32) {
        let Ok(eth) = EthernetFrame::new_checked(d) else {
            let _ = write!(out, "[|ether]");
            return;
        };
        let mut t = eth.ethertype();
        let mut p = eth.payload();
        // An 802.3 frame's length as tcpdump prints it: the length field, or what follows the
        // header on the wire when that is less.
        let llc_len = |t: u16, hdr: usize| u32::from(t).min(wire_len.saturating_sub(hdr as u32));
        if self.ether {
            mac(out, &eth.src());
            out.push_str(" > ");
            mac(out, &eth.dst());
            out.push_str(", ");
            if t <= 1500 {
                let _ = write!(out, "802.3, length {}: ", llc_len(t, 14));
            } else {
                let _ = write!(
                    out,
                    "ethertype {} (0x{t:04x}), length {wire_len}: ",
                    ethertype_name(t)
                );
            }
        }
        // 802.1Q tags: `vlan N, p P, ethertype X (0x...), ` each with -e, nothing without.
        while matches!(t, 0x8100 | 0x88a8 | 0x9100) {
            let (Some(tci), Some(inner)) = (be16(p, 0), be16(p, 2)) else {
                out.push_str("[|vlan]");
                return;
            };
            if self.ether {
                let _ = write!(out, "vlan {}, p {}, ", tci & 0x0fff, tci >> 13);
                if tci & 0x1000 != 0 {
                    out.push_str("DEI, ");
                }
                if inner > 1500 {
                    let _ = write!(out, "ethertype {} (0x{inner:04x}), ", ethertype_name(inner));
                }
            }
            t = inner;
            p = p.get(4..).unwrap_or_default();
        }
        let prefix = !self.ether;
        match t {
            0x0800 => self.ipv4(out, p, prefix),
            0x86dd => self.ipv6(out, p, prefix),
            0x0806 => arp(out, p, prefix),
            t if t <= 1500 => {
                let hdr = d.len() - p.len();
                if p.len() < 3 {
                    // Less than an 802.2 header (DSAP, SSAP, control): tcpdump's mark, then
                    // the bytes there are in hex.
                    out.push_str(" [|llc]");
                    hex_ascii(out, p);
                } else if prefix {
                    let _ = write!(out, "802.3, length {}", llc_len(t, hdr));
                } else {
                    let _ = write!(out, "LLC, length {}", llc_len(t, hdr));
                }
            }
            t => {
                // As tcpdump for an ethertype it does not decode: the Ethernet header, then the
                // rest in hex and ASCII.
                if prefix {
                    mac(out, &eth.src());
                    out.push_str(" > ");
                    mac(out, &eth.dst());
                    let _ = write!(
                        out,
                        ", ethertype {} (0x{t:04x}), length {wire_len}: ",
                        ethertype_name(t)
                    );
                }
                hex_ascii(out, p);
            }
        }
    }

    fn ipv4(&mut self, out: &mut String, d: &[u8], prefix: bool) {
        if prefix {
            out.push_str("IP ");
        }
        let Ok(ip) = Ipv4Packet::new_checked(d) else {
            out.push_str("[|ip]");
            return;
        };
        let hl = ip.header_len();
        let total = usize::from(ip.total_len());
        let len = total.saturating_sub(hl);
        let payload = d.get(hl..total.min(d.len())).unwrap_or_default();
        let (src, dst) = (Addr::V4(ip.src()), Addr::V4(ip.dst()));
        if ip.frag_offset() != 0 {
            // A later fragment: no ports (tcpdump: "a > b: ip-proto-17").
            src.push(out);
            out.push_str(" > ");
            dst.push(out);
            let _ = write!(out, ": ip-proto-{}", ip.protocol());
            return;
        }
        self.l4(out, ip.protocol(), src, dst, payload, len, false);
    }

    fn ipv6(&mut self, out: &mut String, d: &[u8], prefix: bool) {
        if prefix {
            out.push_str("IP6 ");
        }
        let Ok(ip) = Ipv6Packet::new_checked(d) else {
            out.push_str("[|ip6]");
            return;
        };
        let (src, dst) = (Addr::V6(ip.src()), Addr::V6(ip.dst()));
        match ip.upper_layer() {
            Some((proto, payload)) => {
                // Length from the payload length field, less the extension headers.
                let ext = ip.payload().len() - payload.len();
                let len = usize::from(ip.payload_len()).saturating_sub(ext);
                self.l4(out, proto, src, dst, payload, len, true);
            }
            None => {
                src.push(out);
                out.push_str(" > ");
                dst.push(out);
                let _ = write!(out, ": ip-proto-{}", ip.next_header());
            }
        }
    }

    /// The transport part: `len` is its length by the IP header (the bytes may be fewer).
    #[allow(clippy::too_many_arguments)]
    fn l4(
        &mut self,
        out: &mut String,
        proto: u8,
        src: Addr,
        dst: Addr,
        p: &[u8],
        len: usize,
        v6: bool,
    ) {
        let ports = matches!(proto, 6 | 17) && p.len() >= 4;
        let (sport, dport) = (be16(p, 0).unwrap_or(0), be16(p, 2).unwrap_or(0));
        src.push(out);
        if ports {
            let _ = write!(out, ".{sport}");
        }
        out.push_str(" > ");
        dst.push(out);
        if ports {
            let _ = write!(out, ".{dport}");
        }
        out.push_str(": ");
        match proto {
            17 => match be16(p, 4) {
                Some(ulen) if usize::from(ulen) >= 8 => {
                    let _ = write!(out, "UDP, length {}", ulen - 8);
                }
                Some(ulen) => {
                    let _ = write!(out, "truncated-udplength {ulen}");
                }
                None => out.push_str("[|udp]"),
            },
            6 => self.tcp(out, src, dst, p, len),
            1 if !v6 => icmp(out, p, len),
            58 if v6 => icmp6(out, p, len),
            n => {
                let name = match n {
                    2 => "igmp",
                    47 => "GREv0",
                    50 => "ESP",
                    51 => "AH",
                    89 => "OSPFv2",
                    132 => "sctp",
                    _ => "",
                };
                if name.is_empty() {
                    let _ = write!(out, " ip-proto-{n} {len}");
                } else {
                    let _ = write!(out, "{name}, length {len}");
                }
            }
        }
    }

    fn tcp(&mut self, out: &mut String, src: Addr, dst: Addr, p: &[u8], len: usize) {
        let Ok(t) = TcpSegment::new_checked(p) else {
            out.push_str(" [|tcp]");
            return;
        };
        let flags = t.flags();
        let _ = write!(out, "Flags [");
        tcp_flags(out, flags);
        out.push(']');
        let (mut seq, mut ack) = (t.seq(), t.ack());
        let hl = t.header_len();
        let data = len.saturating_sub(hl) as u32;
        if flags & 0x10 != 0 {
            // tcpdump's relative numbers: the first ACK-bearing packet of a conversation (or a
            // SYN with ACK) sets the bases; later packets print their distance from them.
            let (a, b) = (src.key(t.src_port()), dst.key(t.dst_port()));
            let rev = a > b;
            let k = if rev { (b, a) } else { (a, b) };
            match self.tcp.get(&k) {
                Some(&(s0, a0)) if flags & 0x02 == 0 => {
                    if rev {
                        seq = seq.wrapping_sub(a0);
                        ack = ack.wrapping_sub(s0);
                    } else {
                        seq = seq.wrapping_sub(s0);
                        ack = ack.wrapping_sub(a0);
                    }
                }
                _ => {
                    if self.tcp.len() >= MAX_CONVERSATIONS {
                        self.tcp.clear();
                    }
                    let v = if rev {
                        (ack.wrapping_sub(1), seq)
                    } else {
                        (seq, ack.wrapping_sub(1))
                    };
                    self.tcp.insert(k, v);
                }
            }
        }
        if data > 0 || flags & 0x07 != 0 {
            let _ = write!(out, ", seq {seq}");
            if data > 0 {
                let _ = write!(out, ":{}", seq.wrapping_add(data));
            }
        }
        if flags & 0x10 != 0 {
            let _ = write!(out, ", ack {ack}");
        }
        let _ = write!(out, ", win {}", t.window());
        if flags & 0x20 != 0 {
            let _ = write!(out, ", urg {}", t.urgent());
        }
        let opts = t.options();
        if !opts.is_empty() {
            out.push_str(", options [");
            tcp_options(out, opts);
            out.push(']');
        }
        let _ = write!(out, ", length {data}");
        if data > 0 {
            let ports = [t.src_port(), t.dst_port()];
            if ports.iter().any(|p| matches!(p, 80 | 8080 | 3128)) {
                http(out, t.payload());
            }
        }
    }
}

/// Bytes as tcpdump's hex and ASCII dump (`-X` style, as it prints what it does not decode):
/// lines of 16 bytes, `\n\t0x0000:  6162 6364 ...  abcd...`.
fn hex_ascii(out: &mut String, d: &[u8]) {
    for (i, c) in d.chunks(16).enumerate() {
        let mut hex = String::with_capacity(40);
        for pair in c.chunks(2) {
            hex.push(' ');
            for b in pair {
                let _ = write!(hex, "{b:02x}");
            }
        }
        let _ = write!(out, "\n\t0x{:04x}: {hex:<40}  ", i * 16);
        for &b in c {
            out.push(if (0x20..0x7f).contains(&b) {
                b as char
            } else {
                '.'
            });
        }
    }
}

/// TCP options as tcpdump prints them: `mss 1460,sackOK,TS val 1 ecr 0,nop,wscale 7`.
fn tcp_options(out: &mut String, mut o: &[u8]) {
    let mut first = true;
    while let Some(&kind) = o.first() {
        if !first {
            out.push(',');
        }
        first = false;
        match kind {
            0 => {
                out.push_str("eol");
                return;
            }
            1 => {
                out.push_str("nop");
                o = &o[1..];
                continue;
            }
            _ => {}
        }
        let Some(&l) = o.get(1) else {
            out.push_str("[|tcp]");
            return;
        };
        let l = usize::from(l);
        let Some(v) = o.get(2..l.max(2)).filter(|_| l >= 2) else {
            out.push_str("[|tcp]");
            return;
        };
        match (kind, l) {
            (2, 4) => {
                let _ = write!(out, "mss {}", be16(v, 0).unwrap_or(0));
            }
            (3, 3) => {
                let _ = write!(out, "wscale {}", v[0]);
            }
            (4, 2) => out.push_str("sackOK"),
            (8, 10) => {
                let _ = write!(
                    out,
                    "TS val {} ecr {}",
                    be32(v, 0).unwrap_or(0),
                    be32(v, 4).unwrap_or(0)
                );
            }
            (5, _) => {
                let _ = write!(out, "sack {}", (l - 2) / 8);
                for c in v.chunks_exact(8) {
                    let _ = write!(
                        out,
                        " {{{}:{}}}",
                        be32(c, 0).unwrap_or(0),
                        be32(c, 4).unwrap_or(0)
                    );
                }
            }
            _ => {
                let _ = write!(out, "opt-{kind}:");
                for b in v {
                    let _ = write!(out, "{b:02x}");
                }
            }
        }
        o = &o[l..];
    }
}

/// `: HTTP: <request or status line>` (or `: HTTP` for other data), as tcpdump on port 80.
fn http(out: &mut String, d: &[u8]) {
    out.push_str(": HTTP");
    let line_end = d.windows(2).position(|w| w == b"\r\n").or_else(|| {
        // tcpdump also ends a line at a lone LF.
        d.iter().position(|&b| b == b'\n')
    });
    let Some(end) = line_end else {
        return;
    };
    let line = &d[..end];
    let Ok(s) = std::str::from_utf8(line) else {
        return;
    };
    let mut words = s.split(' ');
    let first = words.next().unwrap_or("");
    let second = words.next().unwrap_or("");
    let request = HTTP_METHODS.iter().any(|m| m.eq_ignore_ascii_case(first));
    let status = second.len() == 3 && second.bytes().all(|b| b.is_ascii_digit());
    if (request || status) && s.bytes().all(|b| b.is_ascii_graphic() || b == b' ') {
        let _ = write!(out, ": {s}");
    }
}

fn arp(out: &mut String, d: &[u8], prefix: bool) {
    if prefix {
        out.push_str("ARP, ");
    }
    let (Some(htype), Some(ptype), Some(&hl), Some(&pl), Some(op)) =
        (be16(d, 0), be16(d, 2), d.get(4), d.get(5), be16(d, 6))
    else {
        out.push_str("[|ARP]");
        return;
    };
    let (hl, pl) = (usize::from(hl), usize::from(pl));
    if htype != 1 || ptype != 0x0800 || hl != 6 || pl != 4 || d.len() < 28 {
        let _ = write!(
            out,
            "Hardware {htype}, Protocol 0x{ptype:04x}, op {op}, length {}",
            d.len()
        );
        return;
    }
    let sha = &d[8..14];
    let spa = Ipv4Addr::new(d[14], d[15], d[16], d[17]);
    let tha = &d[18..24];
    let tpa = Ipv4Addr::new(d[24], d[25], d[26], d[27]);
    match op {
        1 => {
            let _ = write!(out, "Request who-has {tpa}");
            if tha.iter().any(|&b| b != 0) {
                out.push_str(" (");
                mac(out, tha);
                out.push(')');
            }
            let _ = write!(out, " tell {spa}");
        }
        2 => {
            let _ = write!(out, "Reply {spa} is-at ");
            mac(out, sha);
        }
        op => {
            let _ = write!(out, "op {op}");
        }
    }
    let _ = write!(out, ", length {}", d.len());
}

fn icmp(out: &mut String, d: &[u8], len: usize) {
    let (Some(&ty), Some(&code)) = (d.first(), d.get(1)) else {
        out.push_str("[|icmp]");
        return;
    };
    out.push_str("ICMP ");
    let id_seq = |out: &mut String| {
        let _ = write!(
            out,
            ", id {}, seq {}",
            be16(d, 4).unwrap_or(0),
            be16(d, 6).unwrap_or(0)
        );
    };
    match (ty, code) {
        (8, _) => {
            out.push_str("echo request");
            id_seq(out);
        }
        (0, _) => {
            out.push_str("echo reply");
            id_seq(out);
        }
        (3, c) => {
            // The quoted header: address (and port) that was unreachable.
            let q = d.get(8..).unwrap_or_default();
            let qdst = q.get(16..20).map(|a| Ipv4Addr::new(a[0], a[1], a[2], a[3]));
            let qhl = usize::from(q.first().copied().unwrap_or(0) & 0x0f) * 4;
            match (c, qdst) {
                (3, Some(a)) => {
                    let proto = match q.get(9) {
                        Some(17) => "udp",
                        Some(6) => "tcp",
                        _ => "",
                    };
                    match be16(q, qhl + 2) {
                        Some(port) if !proto.is_empty() => {
                            let _ = write!(out, "{a} {proto} port {port} unreachable");
                        }
                        _ => {
                            let _ = write!(out, "{a} protocol unreachable");
                        }
                    }
                }
                (0, Some(a)) => {
                    let _ = write!(out, "net {a} unreachable");
                }
                (1, Some(a)) => {
                    let _ = write!(out, "host {a} unreachable");
                }
                (2, Some(a)) => {
                    let _ = write!(out, "{a} protocol {} unreachable", q.get(9).unwrap_or(&0));
                }
                _ => {
                    let _ = write!(out, "type-#{ty}");
                }
            }
        }
        (11, 0) => out.push_str("time exceeded in-transit"),
        _ => {
            let _ = write!(out, "type-#{ty}");
        }
    }
    let _ = write!(out, ", length {len}");
}

fn icmp6(out: &mut String, d: &[u8], len: usize) {
    let Some(&ty) = d.first() else {
        out.push_str("[|icmp6]");
        return;
    };
    out.push_str("ICMP6, ");
    match ty {
        128 | 129 => {
            let _ = write!(
                out,
                "echo {}, id {}, seq {}",
                if ty == 128 { "request" } else { "reply" },
                be16(d, 4).unwrap_or(0),
                be16(d, 6).unwrap_or(0)
            );
        }
        133 => out.push_str("router solicitation"),
        134 => out.push_str("router advertisement"),
        135 => {
            out.push_str("neighbor solicitation");
            if let Some(a) = d.get(8..24) {
                let a: [u8; 16] = a.try_into().unwrap_or([0; 16]);
                let _ = write!(out, ", who has {}", Ipv6Addr::from(a));
            }
        }
        136 => {
            out.push_str("neighbor advertisement");
            if let Some(a) = d.get(8..24) {
                let a: [u8; 16] = a.try_into().unwrap_or([0; 16]);
                let _ = write!(out, ", tgt is {}", Ipv6Addr::from(a));
            }
        }
        t => {
            let _ = write!(out, "type-#{t}");
        }
    }
    let _ = write!(out, ", length {len}");
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn bad_packets_do_not_panic() {
        let mut p = Printer::new(LinkType::ETHERNET, true, TimeFormat::Utc);
        let mut s = String::new();
        let mut f = vec![0u8; 14];
        f[12] = 0x08;
        for proto in [0u8, 1, 6, 17, 58] {
            for n in 0..80 {
                let mut g = f.clone();
                g.extend_from_slice(&[0x45, 0, 0, 60, 0, 0, 0, 0, 64, proto]);
                g.resize(14 + n, 0xff);
                p.line(&mut s, &g, g.len() as u32, 0);
            }
        }
        for t in [0x0806u16, 0x86dd, 0x8100, 0x88a8, 0x1234, 0x0010] {
            for n in 0..70 {
                let mut g = vec![0xffu8; n.max(14)];
                g[12..14].copy_from_slice(&t.to_be_bytes());
                g.truncate(n);
                p.line(&mut s, &g, n as u32, 0);
            }
        }
        assert!(s.lines().count() > 500);
    }

    #[test]
    fn flags_and_times_as_tcpdump() {
        let mut s = String::new();
        tcp_flags(&mut s, 0x12);
        tcp_flags(&mut s, 0x19);
        tcp_flags(&mut s, 0);
        assert_eq!(s, "S.FP.none");
        let mut p = Printer::new(LinkType(147), false, TimeFormat::Utc);
        let mut s = String::new();
        p.line(&mut s, &[], 10, 1_700_000_000_033_000_999);
        assert_eq!(s, "22:13:20.033000 [link type 147], length 10\n");
        let mut p = Printer::new(LinkType(147), false, TimeFormat::Epoch);
        let mut s = String::new();
        p.line(&mut s, &[], 10, 1_700_000_000_033_000_999);
        assert!(s.starts_with("1700000000.033000 "));
    }
}

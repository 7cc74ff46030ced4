//! Flow records and their text, CSV and JSON-lines forms.
//!
//! A [`FlowRecord`] is oriented: `src` is the initiator (the sender of the first packet, or the
//! SYN sender for TCP). Counters are since the previous record of the same flow (a status record
//! resets them), as Argus reports them.

use super::key::{is_echo, FlowKey, E_ETH, E_FRAG, E_MPLS, E_PPPOE, E_VLAN, K_ICMP_OTHER, K_V6};
use std::fmt::Write as _;
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why a record was emitted (IPFIX flowEndReason codes 1..5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum EndReason {
    /// No packet for the idle timeout.
    Idle = 1,
    /// A status report of a flow that goes on (Argus status interval, IPFIX active timeout).
    Active = 2,
    /// The connection ended (TCP FIN both ways or RST, then the linger time), or a new SYN
    /// reused the key.
    End = 3,
    /// The monitor stopped (end of input, signal): every open flow is reported.
    Forced = 4,
    /// The table was full: the least recently seen flow was reported to make room.
    Resources = 5,
}

impl EndReason {
    /// Number of reasons.
    pub const COUNT: usize = 5;
    /// All reasons.
    pub const ALL: [EndReason; Self::COUNT] = [
        EndReason::Idle,
        EndReason::Active,
        EndReason::End,
        EndReason::Forced,
        EndReason::Resources,
    ];
    /// The name used in output.
    pub fn name(self) -> &'static str {
        match self {
            EndReason::Idle => "idle",
            EndReason::Active => "active",
            EndReason::End => "end",
            EndReason::Forced => "forced",
            EndReason::Resources => "resources",
        }
    }
    /// Index in counter arrays.
    pub fn index(self) -> usize {
        self as usize - 1
    }
}

/// Flow state, named as ra names them where the meaning is the same (see docs/flows.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum State {
    /// TCP: SYN seen, no answer.
    Req,
    /// TCP: SYN answered by SYN-ACK, not yet established.
    Acc,
    /// Connected: TCP established, or traffic both ways (UDP, other IP).
    Con,
    /// TCP: closed by FIN.
    Fin,
    /// TCP: reset.
    Rst,
    /// Traffic one way only, with no handshake seen.
    Int,
    /// ICMP echo request without reply.
    Eco,
    /// ICMP echo answered.
    Ecr,
    /// ICMP destination unreachable.
    Unr,
    /// ICMP time exceeded.
    Txd,
}

impl State {
    /// The three-letter name.
    pub fn name(self) -> &'static str {
        match self {
            State::Req => "REQ",
            State::Acc => "ACC",
            State::Con => "CON",
            State::Fin => "FIN",
            State::Rst => "RST",
            State::Int => "INT",
            State::Eco => "ECO",
            State::Ecr => "ECR",
            State::Unr => "UNR",
            State::Txd => "TXD",
        }
    }
}

/// One flow record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowRecord {
    /// First packet, ns since the epoch.
    pub start_ns: u64,
    /// Last packet, ns since the epoch.
    pub last_ns: u64,
    /// Initiator's address (IPv4 in the first 4 bytes).
    pub src: [u8; 16],
    /// Responder's address.
    pub dst: [u8; 16],
    /// Initiator's port (ICMP: the type of the first packet).
    pub sport: u16,
    /// Responder's port (ICMP: the echo identifier, or the code).
    pub dport: u16,
    /// IP protocol.
    pub proto: u8,
    /// IPv6 addresses.
    pub v6: bool,
    /// VLAN id (0: untagged).
    pub vlan: u16,
    /// Packets from the initiator.
    pub src_pkts: u64,
    /// Packets from the responder.
    pub dst_pkts: u64,
    /// Bytes (on the wire, link header included) from the initiator.
    pub src_bytes: u64,
    /// Bytes from the responder.
    pub dst_bytes: u64,
    /// OR of TCP flags sent by the initiator.
    pub src_tcp_flags: u8,
    /// OR of TCP flags sent by the responder.
    pub dst_tcp_flags: u8,
    /// ICMP type of the first ICMP packet.
    pub icmp_type: u8,
    /// ICMP code of the first ICMP packet.
    pub icmp_code: u8,
    /// State at the time of the record.
    pub state: State,
    /// Why it was emitted.
    pub reason: EndReason,
    /// The initiator is known for sure (TCP SYN or SYN-ACK seen, or not TCP).
    pub dir_certain: bool,
    /// Encapsulation bits seen (`key::E_*`).
    pub encap: u8,
    /// Each direction on its own, [the initiator's, the responder's] (a uniflow record's
    /// figures, RFC 7012: its own packets'): first and last packet, ns (0 when it sent none).
    pub side_ns: [[u64; 2]; 2],
    /// ICMP type and code of each direction's first ICMP packet, [initiator's, responder's]
    /// (an echo flow: 8.0 and 0.0).
    pub side_icmp: [[u8; 2]; 2],
    /// Ethernet addresses and TTL ranges (`--fields smac,dmac,sminttl,...`).
    pub extra: RecordExtra,
}

/// What a record carries beyond Argus's default columns: filled when `--fields` asks for it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecordExtra {
    /// The initiator's Ethernet address.
    pub src_mac: [u8; 6],
    /// The responder's Ethernet address.
    pub dst_mac: [u8; 6],
    /// The link had Ethernet addresses.
    pub has_mac: bool,
    /// Smallest, largest TTL (hop limit) of the initiator's packets; min > max: none.
    pub src_ttl: [u8; 2],
    /// Smallest, largest TTL of the responder's packets.
    pub dst_ttl: [u8; 2],
}

impl FlowRecord {
    /// The initiator's address.
    pub fn src_ip(&self) -> IpAddr {
        ip(&self.src, self.v6)
    }
    /// The responder's address.
    pub fn dst_ip(&self) -> IpAddr {
        ip(&self.dst, self.v6)
    }
    /// Duration in ns.
    pub fn dur_ns(&self) -> u64 {
        self.last_ns.saturating_sub(self.start_ns)
    }
    /// ra's direction column.
    pub fn dir(&self) -> &'static str {
        match (self.dst_pkts > 0, self.dir_certain) {
            (true, true) => "<->",
            (true, false) => "<?>",
            (false, true) => "->",
            (false, false) => "?>",
        }
    }
    /// Whether the protocol is ICMP (v4 or v6).
    pub fn is_icmp(&self) -> bool {
        self.proto == 1 || self.proto == 58
    }

    /// The flow's canonical key, as the table keyed it: lower endpoint (address, then port)
    /// first, so it is the same whichever side initiated, and on every probe that saw the flow.
    /// ICMP echoes are keyed by identifier, other ICMP by type and code.
    pub fn key(&self) -> FlowKey {
        let mut flags = if self.v6 { K_V6 } else { 0 };
        let (sp, dp) = if !self.is_icmp() {
            (self.sport, self.dport)
        } else if is_echo(self.proto, self.icmp_type) {
            (self.dport, self.dport)
        } else {
            flags |= K_ICMP_OTHER;
            let tc = (self.icmp_type as u16) << 8 | self.icmp_code as u16;
            (tc, tc)
        };
        let (a, pa, b, pb) = if (self.src, sp) <= (self.dst, dp) {
            (self.src, sp, self.dst, dp)
        } else {
            (self.dst, dp, self.src, sp)
        };
        FlowKey {
            a,
            b,
            pa,
            pb,
            vlan: self.vlan,
            proto: self.proto,
            flags,
        }
    }
}

fn ip(a: &[u8; 16], v6: bool) -> IpAddr {
    if v6 {
        IpAddr::V6(Ipv6Addr::from(*a))
    } else {
        IpAddr::V4(Ipv4Addr::new(a[0], a[1], a[2], a[3]))
    }
}

/// Protocol name as ra prints it.
pub fn proto_name(p: u8) -> Option<&'static str> {
    Some(match p {
        1 => "icmp",
        2 => "igmp",
        6 => "tcp",
        17 => "udp",
        47 => "gre",
        50 => "esp",
        51 => "ah",
        58 => "ipv6-icmp",
        89 => "ospf",
        103 => "pim",
        112 => "vrrp",
        132 => "sctp",
        _ => return None,
    })
}

/// TCP flags as letters in a fixed order (`S A F R P U E C`), `-` when none.
pub fn tcp_flags_str(f: u8, out: &mut String) {
    const L: [(u8, char); 8] = [
        (0x02, 'S'),
        (0x10, 'A'),
        (0x01, 'F'),
        (0x04, 'R'),
        (0x08, 'P'),
        (0x20, 'U'),
        (0x40, 'E'),
        (0x80, 'C'),
    ];
    if f == 0 {
        out.push('-');
        return;
    }
    for (b, c) in L {
        if f & b != 0 {
            out.push(c);
        }
    }
}

/// Columns a record can show.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    /// Start time.
    StartTime,
    /// Last time.
    LastTime,
    /// Duration (s).
    Dur,
    /// Encapsulation flags.
    Flgs,
    /// Protocol.
    Proto,
    /// Initiator address.
    SrcAddr,
    /// Initiator port.
    Sport,
    /// Direction.
    Dir,
    /// Responder address.
    DstAddr,
    /// Responder port.
    Dport,
    /// Packets from the initiator.
    SrcPkts,
    /// Packets from the responder.
    DstPkts,
    /// Bytes from the initiator.
    SrcBytes,
    /// Bytes from the responder.
    DstBytes,
    /// State.
    State,
    /// TCP flags from the initiator.
    SrcFlags,
    /// TCP flags from the responder.
    DstFlags,
    /// ICMP type.
    IcmpType,
    /// ICMP code.
    IcmpCode,
    /// Why the record was emitted.
    Reason,
    /// VLAN id.
    Vlan,
    /// The initiator's Ethernet address.
    SrcMac,
    /// The responder's Ethernet address.
    DstMac,
    /// Smallest TTL of the initiator's packets.
    SrcMinTtl,
    /// Largest TTL of the initiator's packets.
    SrcMaxTtl,
    /// Smallest TTL of the responder's packets.
    DstMinTtl,
    /// Largest TTL of the responder's packets.
    DstMaxTtl,
}

impl Field {
    /// Every field, with its name (as `--fields` takes it) and header.
    pub const ALL: [(Field, &'static str, &'static str); 27] = [
        (Field::StartTime, "stime", "StartTime"),
        (Field::LastTime, "ltime", "LastTime"),
        (Field::Dur, "dur", "Dur"),
        (Field::Flgs, "flgs", "Flgs"),
        (Field::Proto, "proto", "Proto"),
        (Field::SrcAddr, "saddr", "SrcAddr"),
        (Field::Sport, "sport", "Sport"),
        (Field::Dir, "dir", "Dir"),
        (Field::DstAddr, "daddr", "DstAddr"),
        (Field::Dport, "dport", "Dport"),
        (Field::SrcPkts, "spkts", "SrcPkts"),
        (Field::DstPkts, "dpkts", "DstPkts"),
        (Field::SrcBytes, "sbytes", "SrcBytes"),
        (Field::DstBytes, "dbytes", "DstBytes"),
        (Field::State, "state", "State"),
        (Field::SrcFlags, "sflags", "SrcTCPFlags"),
        (Field::DstFlags, "dflags", "DstTCPFlags"),
        (Field::IcmpType, "itype", "IcmpType"),
        (Field::IcmpCode, "icode", "IcmpCode"),
        (Field::Reason, "reason", "EndReason"),
        (Field::Vlan, "vlan", "Vlan"),
        (Field::SrcMac, "smac", "SrcMac"),
        (Field::DstMac, "dmac", "DstMac"),
        (Field::SrcMinTtl, "sminttl", "sMinTTL"),
        (Field::SrcMaxTtl, "smaxttl", "sMaxTTL"),
        (Field::DstMinTtl, "dminttl", "dMinTTL"),
        (Field::DstMaxTtl, "dmaxttl", "dMaxTTL"),
    ];

    /// Whether the field needs each packet's Ethernet addresses or TTL read.
    pub fn needs_extra(self) -> bool {
        matches!(
            self,
            Field::SrcMac
                | Field::DstMac
                | Field::SrcMinTtl
                | Field::SrcMaxTtl
                | Field::DstMinTtl
                | Field::DstMaxTtl
        )
    }

    /// ra's default columns, then Dur, TCP flags per direction, ICMP type and code, end reason.
    pub const DEFAULT: [Field; 19] = [
        Field::StartTime,
        Field::Flgs,
        Field::Proto,
        Field::SrcAddr,
        Field::Sport,
        Field::Dir,
        Field::DstAddr,
        Field::Dport,
        Field::SrcPkts,
        Field::DstPkts,
        Field::SrcBytes,
        Field::DstBytes,
        Field::State,
        Field::Dur,
        Field::SrcFlags,
        Field::DstFlags,
        Field::IcmpType,
        Field::IcmpCode,
        Field::Reason,
    ];

    /// The `--fields` name.
    pub fn name(self) -> &'static str {
        Self::ALL.iter().find(|f| f.0 == self).map_or("?", |f| f.1)
    }
    /// The column header.
    pub fn header(self) -> &'static str {
        Self::ALL.iter().find(|f| f.0 == self).map_or("?", |f| f.2)
    }
    /// Parses a comma-separated list of field names (`all` for every field, `default`).
    pub fn parse_list(s: &str) -> Result<Vec<Field>, String> {
        let mut v = Vec::new();
        for n in s.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            match n {
                "all" => v.extend(Self::ALL.iter().map(|f| f.0)),
                "default" => v.extend(Self::DEFAULT),
                _ => match Self::ALL.iter().find(|f| f.1.eq_ignore_ascii_case(n)) {
                    Some(f) => v.push(f.0),
                    None => {
                        let names: Vec<&str> = Self::ALL.iter().map(|f| f.1).collect();
                        return Err(format!("unknown field '{n}' (fields: {})", names.join(",")));
                    }
                },
            }
        }
        if v.is_empty() {
            return Err("no fields given".into());
        }
        Ok(v)
    }
    /// Text column width (right-aligned numbers, left-aligned text).
    fn width(self, v6: bool) -> usize {
        match self {
            Field::StartTime | Field::LastTime => 15,
            Field::Dur => 12,
            Field::Flgs => 5,
            Field::Proto => 6,
            Field::SrcAddr | Field::DstAddr => {
                if v6 {
                    39
                } else {
                    15
                }
            }
            Field::Sport | Field::Dport => 6,
            Field::Dir => 3,
            Field::SrcPkts | Field::DstPkts => 8,
            Field::SrcBytes | Field::DstBytes => 10,
            Field::State => 5,
            Field::SrcFlags | Field::DstFlags => 11,
            Field::IcmpType | Field::IcmpCode => 8,
            Field::Reason => 9,
            Field::Vlan => 4,
            Field::SrcMac | Field::DstMac => 17,
            Field::SrcMinTtl | Field::SrcMaxTtl | Field::DstMinTtl | Field::DstMaxTtl => 7,
        }
    }
    fn numeric(self) -> bool {
        matches!(
            self,
            Field::Dur
                | Field::SrcPkts
                | Field::DstPkts
                | Field::SrcBytes
                | Field::DstBytes
                | Field::IcmpType
                | Field::IcmpCode
                | Field::Vlan
                | Field::SrcMinTtl
                | Field::SrcMaxTtl
                | Field::DstMinTtl
                | Field::DstMaxTtl
        )
    }
}

/// Output formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Aligned columns like ra.
    Text,
    /// Comma-separated with a header line.
    Csv,
    /// One JSON object per line.
    Jsonl,
}

impl Format {
    /// The format a file name asks for (`.csv`, `.jsonl`/`.json`, anything else text).
    pub fn from_path(p: &str) -> Format {
        if p.ends_with(".csv") {
            Format::Csv
        } else if p.ends_with(".jsonl") || p.ends_with(".json") {
            Format::Jsonl
        } else {
            Format::Text
        }
    }
}

/// Civil date from days since 1970-01-01 (proleptic Gregorian).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// `HH:MM:SS.uuuuuu` (UTC), as ra prints StartTime.
fn clock(ns: u64, out: &mut String) {
    let s = ns / 1_000_000_000;
    let us = (ns % 1_000_000_000) / 1000;
    let t = s % 86_400;
    let _ = write!(
        out,
        "{:02}:{:02}:{:02}.{:06}",
        t / 3600,
        t / 60 % 60,
        t % 60,
        us
    );
}

/// `YYYY-MM-DDTHH:MM:SS.uuuuuuZ`.
pub fn iso_time(ns: u64, out: &mut String) {
    let s = ns / 1_000_000_000;
    let (y, m, d) = civil((s / 86_400) as i64);
    let _ = write!(out, "{y:04}-{m:02}-{d:02}T");
    clock(ns, out);
    out.push('Z');
}

/// Appends `v` in decimal (no `core::fmt`: records are formatted by the hundred thousand).
#[inline]
pub fn push_u64(out: &mut String, v: u64) {
    out.push_str(itoa::Buffer::new().format(v));
}

/// Appends an address as `Display` writes it: IPv4 as a dotted quad (by hand, the common case),
/// IPv6 through `Ipv6Addr`'s `Display` (RFC 5952 compression).
#[inline]
pub fn push_ip(out: &mut String, a: &[u8; 16], v6: bool) {
    if v6 {
        let _ = write!(out, "{}", Ipv6Addr::from(*a));
        return;
    }
    let mut b = itoa::Buffer::new();
    for (i, &o) in a[..4].iter().enumerate() {
        if i > 0 {
            out.push('.');
        }
        out.push_str(b.format(o));
    }
}

/// `SECONDS.MICROSECONDS` (six digits).
fn secs(ns: u64, out: &mut String) {
    push_u64(out, ns / 1_000_000_000);
    let mut us = ((ns % 1_000_000_000) / 1000) as u32;
    let mut d = [b'.', b'0', b'0', b'0', b'0', b'0', b'0'];
    for c in d[1..].iter_mut().rev() {
        *c = b'0' + (us % 10) as u8;
        us /= 10;
    }
    out.push_str(std::str::from_utf8(&d).unwrap_or(".000000"));
}

/// Appends field `f` of `r` in plain form (no padding) to `out`. `machine`: times in epoch
/// seconds and ports in decimal.
pub fn field_value(r: &FlowRecord, f: Field, machine: bool, out: &mut String) {
    match f {
        Field::StartTime | Field::LastTime => {
            let t = if f == Field::StartTime {
                r.start_ns
            } else {
                r.last_ns
            };
            if machine {
                secs(t, out)
            } else {
                clock(t, out)
            }
        }
        Field::Dur => secs(r.dur_ns(), out),
        Field::Flgs => {
            for (bit, c) in [
                (E_ETH, 'e'),
                (E_VLAN, 'q'),
                (E_MPLS, 'm'),
                (E_PPPOE, 'p'),
                (E_FRAG, 'f'),
            ] {
                if r.encap & bit != 0 {
                    out.push(c);
                }
            }
            if r.encap == 0 {
                out.push('-');
            }
        }
        Field::Proto => match proto_name(r.proto) {
            Some(n) => out.push_str(n),
            None => push_u64(out, r.proto.into()),
        },
        Field::SrcAddr => push_ip(out, &r.src, r.v6),
        Field::DstAddr => push_ip(out, &r.dst, r.v6),
        Field::Sport | Field::Dport => {
            let p = if f == Field::Sport { r.sport } else { r.dport };
            if r.is_icmp() && !machine {
                let _ = write!(out, "0x{p:04x}");
            } else if matches!(r.proto, 6 | 17 | 132 | 136 | 33 | 1 | 58) {
                push_u64(out, p.into());
            }
        }
        Field::Dir => out.push_str(r.dir()),
        Field::SrcPkts => push_u64(out, r.src_pkts),
        Field::DstPkts => push_u64(out, r.dst_pkts),
        Field::SrcBytes => push_u64(out, r.src_bytes),
        Field::DstBytes => push_u64(out, r.dst_bytes),
        Field::State => out.push_str(r.state.name()),
        Field::SrcFlags | Field::DstFlags => {
            if r.proto == 6 {
                tcp_flags_str(
                    if f == Field::SrcFlags {
                        r.src_tcp_flags
                    } else {
                        r.dst_tcp_flags
                    },
                    out,
                )
            }
        }
        Field::IcmpType | Field::IcmpCode => {
            if r.is_icmp() {
                let v = if f == Field::IcmpType {
                    r.icmp_type
                } else {
                    r.icmp_code
                };
                push_u64(out, v.into());
            }
        }
        Field::Reason => out.push_str(r.reason.name()),
        Field::Vlan => push_u64(out, r.vlan.into()),
        Field::SrcMac | Field::DstMac => {
            let x = &r.extra;
            if x.has_mac {
                let m = if f == Field::SrcMac {
                    x.src_mac
                } else {
                    x.dst_mac
                };
                for (i, b) in m.iter().enumerate() {
                    if i > 0 {
                        out.push(':');
                    }
                    let _ = write!(out, "{b:02x}");
                }
            }
        }
        Field::SrcMinTtl | Field::SrcMaxTtl | Field::DstMinTtl | Field::DstMaxTtl => {
            let t = match f {
                Field::SrcMinTtl | Field::SrcMaxTtl => r.extra.src_ttl,
                _ => r.extra.dst_ttl,
            };
            if t[0] <= t[1] {
                let max = matches!(f, Field::SrcMaxTtl | Field::DstMaxTtl);
                push_u64(out, t[max as usize].into());
            }
        }
    }
}

/// Appends record `r` as one JSON object (no newline) with `fields` as members, named as
/// `--fields` names them (the `-w x.jsonl` form), then `extra`: further members already in JSON,
/// each with a leading comma (`,"probe":"tap1"`), or "". `cell` is scratch space.
pub fn json_object(
    r: &FlowRecord,
    fields: &[Field],
    extra: &str,
    line: &mut String,
    cell: &mut String,
) {
    line.push('{');
    for (i, &f) in fields.iter().enumerate() {
        if i > 0 {
            line.push(',');
        }
        line.push('"');
        line.push_str(f.name());
        line.push_str("\":");
        cell.clear();
        field_value(r, f, true, cell);
        let num = f.numeric()
            || matches!(
                f,
                Field::StartTime | Field::LastTime | Field::Sport | Field::Dport
            );
        if cell.is_empty() {
            line.push_str("null");
        } else if num {
            line.push_str(cell);
        } else {
            // values are addresses, names and flag letters: nothing to escape
            line.push('"');
            line.push_str(cell);
            line.push('"');
        }
    }
    line.push_str(extra);
    line.push('}');
}

/// Writes records in one format with chosen fields. Formatting happens only here, when a record
/// is emitted; the line buffer is reused.
pub struct RecordWriter<W: Write> {
    out: W,
    fmt: RecordFormat,
    header_done: bool,
}

/// Formats records as a [`RecordWriter`] writes them, one line each (the header aside): what
/// a thread that made records can do itself before a writer only writes them
/// ([`RecordWriter::write_lines`]).
#[derive(Clone, Debug)]
pub struct RecordFormat {
    format: Format,
    fields: Vec<Field>,
    line: String,
    cell: String,
}

impl RecordFormat {
    /// A formatter of `format` with `fields`.
    pub fn new(format: Format, fields: Vec<Field>) -> Self {
        RecordFormat {
            format,
            fields,
            line: String::with_capacity(256),
            cell: String::with_capacity(64),
        }
    }

    /// Appends the line of `r` (with its newline) to `out`.
    pub fn line(&mut self, r: &FlowRecord, out: &mut Vec<u8>) {
        out.extend_from_slice(self.format(r).as_bytes());
    }

    /// The header line (with its newline; empty for JSON lines).
    fn header(&mut self) -> &str {
        self.line.clear();
        match self.format {
            Format::Jsonl => return "",
            Format::Csv => {
                for (i, f) in self.fields.iter().enumerate() {
                    if i > 0 {
                        self.line.push(',');
                    }
                    self.line.push_str(f.name());
                }
            }
            Format::Text => {
                for (i, f) in self.fields.iter().enumerate() {
                    if i > 0 {
                        self.line.push(' ');
                    }
                    let w = f.width(false);
                    if f.numeric() {
                        let _ = write!(self.line, "{:>w$}", f.header());
                    } else {
                        let _ = write!(self.line, "{:<w$}", f.header());
                    }
                }
            }
        }
        self.line.push('\n');
        &self.line
    }

    /// The line of `r`, with its newline.
    fn format(&mut self, r: &FlowRecord) -> &str {
        self.line.clear();
        match self.format {
            Format::Text => {
                for (i, &f) in self.fields.iter().enumerate() {
                    if i > 0 {
                        self.line.push(' ');
                    }
                    self.cell.clear();
                    field_value(r, f, false, &mut self.cell);
                    // Padded by hand (as {:>w$} / {:<w$} would, in characters): the
                    // formatting machinery per cell was most of the cost of a record.
                    let w = f.width(r.v6);
                    let pad = w.saturating_sub(self.cell.chars().count());
                    if f.numeric() {
                        self.line.extend(std::iter::repeat_n(' ', pad));
                        self.line.push_str(&self.cell);
                    } else {
                        self.line.push_str(&self.cell);
                        self.line.extend(std::iter::repeat_n(' ', pad));
                    }
                }
                let t = self.line.trim_end().len();
                self.line.truncate(t);
            }
            Format::Csv => {
                for (i, &f) in self.fields.iter().enumerate() {
                    if i > 0 {
                        self.line.push(',');
                    }
                    field_value(r, f, true, &mut self.line);
                }
            }
            Format::Jsonl => {
                json_object(r, &self.fields, "", &mut self.line, &mut self.cell);
            }
        }
        self.line.push('\n');
        &self.line
    }
}

impl<W: Write> RecordWriter<W> {
    /// A writer of `format` with `fields` to `out`.
    pub fn new(out: W, format: Format, fields: Vec<Field>) -> Self {
        RecordWriter {
            out,
            fmt: RecordFormat::new(format, fields),
            header_done: false,
        }
    }

    fn header(&mut self) -> std::io::Result<()> {
        self.header_done = true;
        self.out.write_all(self.fmt.header().as_bytes())
    }

    /// Writes one record.
    pub fn write(&mut self, r: &FlowRecord) -> std::io::Result<()> {
        if !self.header_done {
            self.header()?;
        }
        self.out.write_all(self.fmt.format(r).as_bytes())
    }

    /// A formatter of this writer's lines, for a thread to format records itself.
    pub fn formatter(&self) -> RecordFormat {
        self.fmt.clone()
    }

    /// Writes lines of records made by [`RecordWriter::formatter`] (after the header, if it
    /// was not written yet).
    pub fn write_lines(&mut self, lines: &[u8]) -> std::io::Result<()> {
        if !self.header_done {
            self.header()?;
        }
        self.out.write_all(lines)
    }

    /// Flushes the output.
    pub fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    pub(crate) fn rec() -> FlowRecord {
        let mut src = [0u8; 16];
        src[..4].copy_from_slice(&[10, 0, 0, 1]);
        let mut dst = [0u8; 16];
        dst[..4].copy_from_slice(&[10, 0, 0, 2]);
        FlowRecord {
            start_ns: 1_700_000_000_123_456_789,
            last_ns: 1_700_000_002_123_456_789,
            src,
            dst,
            sport: 40000,
            dport: 80,
            proto: 6,
            v6: false,
            vlan: 0,
            src_pkts: 5,
            dst_pkts: 4,
            src_bytes: 500,
            dst_bytes: 4000,
            src_tcp_flags: 0x1b,
            dst_tcp_flags: 0x12,
            icmp_type: 0,
            icmp_code: 0,
            state: State::Fin,
            reason: EndReason::End,
            dir_certain: true,
            encap: E_ETH,
            side_ns: [
                [1_700_000_000_123_456_789, 1_700_000_002_023_456_789],
                [1_700_000_000_223_456_789, 1_700_000_002_123_456_789],
            ],
            side_icmp: [[0; 2]; 2],
            extra: Default::default(),
        }
    }

    /// A formatter's lines, written with `write_lines`, are the writer's own: the header once,
    /// then each record as `write` writes it, in every format.
    #[test]
    fn formatted_lines_are_the_writers() {
        let fields: Vec<Field> = Field::ALL.iter().map(|f| f.0).collect();
        let mut v6 = rec();
        v6.v6 = true;
        v6.src = [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        for format in [Format::Text, Format::Csv, Format::Jsonl] {
            let mut direct = Vec::new();
            let mut w = RecordWriter::new(&mut direct, format, fields.clone());
            w.write(&rec()).unwrap();
            w.write(&v6).unwrap();
            drop(w);
            let mut lines = Vec::new();
            let mut w = RecordWriter::new(Vec::new(), format, fields.clone());
            let mut f = w.formatter();
            f.line(&rec(), &mut lines);
            w.write_lines(&lines).unwrap();
            lines.clear();
            f.line(&v6, &mut lines);
            w.write_lines(&lines).unwrap();
            assert_eq!(w.out, direct, "{format:?}");
        }
    }

    #[test]
    fn formats() {
        let mut buf = Vec::new();
        let mut w = RecordWriter::new(&mut buf, Format::Csv, Field::DEFAULT.to_vec());
        w.write(&rec()).unwrap();
        let s = String::from_utf8(buf).unwrap();
        let mut lines = s.lines();
        assert!(lines.next().unwrap().starts_with("stime,flgs,proto,saddr"));
        assert_eq!(
            lines.next().unwrap(),
            "1700000000.123456,e,tcp,10.0.0.1,40000,<->,10.0.0.2,80,5,4,500,4000,FIN,2.000000,SAFP,SA,,,end"
        );
        let mut buf = Vec::new();
        let mut w = RecordWriter::new(
            &mut buf,
            Format::Jsonl,
            vec![Field::SrcAddr, Field::SrcPkts, Field::IcmpType],
        );
        w.write(&rec()).unwrap();
        assert_eq!(
            String::from_utf8(buf).unwrap(),
            "{\"saddr\":\"10.0.0.1\",\"spkts\":5,\"itype\":null}\n"
        );
        let mut buf = Vec::new();
        let mut w = RecordWriter::new(&mut buf, Format::Text, Field::DEFAULT.to_vec());
        w.write(&rec()).unwrap();
        let s = String::from_utf8(buf).unwrap();
        assert!(
            s.lines()
                .nth(1)
                .unwrap()
                .starts_with("22:13:20.123456 e     tcp    10.0.0.1"),
            "{s}"
        );
        let mut t = String::new();
        iso_time(1_700_000_000_000_000_000, &mut t);
        assert_eq!(t, "2023-11-14T22:13:20.000000Z");
    }

    /// The hand-made number, address and time forms equal what `Display` (`format!`) writes,
    /// at the edges (0, maxima, zero-padded fractions, IPv6 compression and IPv4-mapped).
    #[test]
    fn plain_forms_equal_display() {
        for v in [0u64, 1, 9, 10, 99, 65_535, 1 << 32, u64::MAX - 1, u64::MAX] {
            let mut s = String::from("x");
            push_u64(&mut s, v);
            assert_eq!(s, format!("x{v}"));
        }
        for ns in [
            0u64,
            999,
            1_000,
            999_999_999,
            1_000_000_000,
            1_700_000_000_000_001_000,
            1_700_000_000_123_456_789,
            u64::MAX,
        ] {
            let mut s = String::new();
            secs(ns, &mut s);
            assert_eq!(
                s,
                format!("{}.{:06}", ns / 1_000_000_000, (ns % 1_000_000_000) / 1000)
            );
        }
        let v4: [[u8; 4]; 4] = [
            [0, 0, 0, 0],
            [255, 255, 255, 255],
            [10, 0, 100, 9],
            [1, 22, 3, 201],
        ];
        for a in v4 {
            let mut b = [0u8; 16];
            b[..4].copy_from_slice(&a);
            let mut s = String::new();
            push_ip(&mut s, &b, false);
            assert_eq!(s, Ipv4Addr::from(a).to_string());
        }
        let v6: [&str; 5] = [
            "::",
            "::1",
            "2001:db8::8:800:200c:417a",
            "fe80::1:2:3:4",
            "::ffff:10.0.0.1",
        ];
        for t in v6 {
            let a: Ipv6Addr = t.parse().unwrap();
            let mut s = String::new();
            push_ip(&mut s, &a.octets(), true);
            assert_eq!(s, a.to_string());
        }
        // A whole record, every field, as JSON: numbers and addresses as Display gives them.
        let mut r = rec();
        r.src_pkts = u64::MAX;
        r.dst_bytes = 0;
        r.vlan = 4095;
        r.start_ns = 1_700_000_000_000_000_999;
        let (mut line, mut cell) = (String::new(), String::new());
        json_object(
            &r,
            &Field::ALL.iter().map(|f| f.0).collect::<Vec<_>>(),
            ",\"probe\":\"p\"",
            &mut line,
            &mut cell,
        );
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert!(line.starts_with("{\"stime\":1700000000.000000,"), "{line}");
        assert_eq!(v["spkts"].as_u64(), Some(u64::MAX));
        assert_eq!(v["dbytes"].as_u64(), Some(0));
        assert_eq!(v["vlan"].as_u64(), Some(4095));
        assert_eq!(v["saddr"], "10.0.0.1");
        assert_eq!(v["dport"].as_u64(), Some(80));
        assert_eq!(v["probe"], "p");
    }

    #[test]
    fn field_lists() {
        assert_eq!(
            Field::parse_list("saddr,DADDR").unwrap(),
            vec![Field::SrcAddr, Field::DstAddr]
        );
        assert_eq!(
            Field::parse_list("default").unwrap().len(),
            Field::DEFAULT.len()
        );
        assert!(Field::parse_list("bogus")
            .unwrap_err()
            .contains("unknown field 'bogus'"));
    }
}

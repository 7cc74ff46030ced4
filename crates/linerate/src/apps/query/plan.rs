//! The planner: the part of a filter expression (libpcap syntax) that an index can answer.
//!
//! [`Plan::parse`] reads the expression only as far as the terms a capture file's index posts
//! (addresses, networks, ports, protocols, VLANs, EtherTypes), joined by `and`/`&&`, `or`/`||`
//! with libpcap's rules: `and` and `or` have the same precedence and associate left to right,
//! `not`/`!` binds tightest, and a bare value after `and`/`or` takes the qualifiers of the
//! primitive before it (`host a or b`, `tcp port 80 or 443`). Everything else (`not X`, byte
//! tests, lengths, `ether`, names to resolve, anything it does not know) is [`Plan::All`]: every
//! block. A plan is a superset: it never leaves out a block holding a packet the expression
//! matches, given an index that posts every key of every packet the filter could match. The
//! whole expression still runs on each packet of the blocks chosen, so the answer is libpcap's.

/// One key of an index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Term {
    /// An IPv4 address (source or destination; ARP's sender or target).
    Ip4([u8; 4]),
    /// An IPv6 address.
    Ip6([u8; 16]),
    /// The IPv4 addresses in a network: the address and mask (host byte order).
    Net4 {
        /// Network address.
        addr: u32,
        /// Mask.
        mask: u32,
    },
    /// The IPv6 addresses in a network.
    Net6 {
        /// Network address.
        addr: u128,
        /// Prefix length.
        bits: u8,
    },
    /// A TCP, UDP or SCTP port (source or destination).
    Port(u16),
    /// An IP protocol number (IPv4 protocol, IPv6 next header).
    Proto(u8),
    /// An 802.1Q/802.1ad VLAN id.
    Vlan(u16),
    /// Any VLAN tag.
    Tagged,
    /// An EtherType of the frame.
    EtherType(u16),
}

impl Term {
    /// Whether an IPv4 address lies in a network term.
    pub fn net4_holds(addr: u32, mask: u32, a: [u8; 4]) -> bool {
        u32::from_be_bytes(a) & mask == addr & mask
    }

    /// Whether an IPv6 address lies in a network term.
    pub fn net6_holds(addr: u128, bits: u8, a: [u8; 16]) -> bool {
        let m = mask6(bits);
        u128::from_be_bytes(a) & m == addr & m
    }
}

fn mask6(bits: u8) -> u128 {
    match bits {
        0 => 0,
        b if b >= 128 => u128::MAX,
        b => u128::MAX << (128 - u32::from(b)),
    }
}

/// What blocks a query reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Plan {
    /// Every block.
    All,
    /// The blocks posting a key.
    Term(Term),
    /// Blocks in both.
    And(Box<Plan>, Box<Plan>),
    /// Blocks in either.
    Or(Box<Plan>, Box<Plan>),
}

/// Sets of blocks a plan is evaluated over: a file's index.
pub trait Postings {
    /// A set of blocks.
    type Set;
    /// Every block.
    fn all(&self) -> Self::Set;
    /// The blocks posting `t` (for a network: any address of it).
    fn term(&self, t: &Term) -> Self::Set;
    /// Blocks in both.
    fn and(&self, a: Self::Set, b: Self::Set) -> Self::Set;
    /// Blocks in either.
    fn or(&self, a: Self::Set, b: Self::Set) -> Self::Set;
}

impl Plan {
    /// The plan of `expr` (the empty expression: every block).
    pub fn parse(expr: &str) -> Plan {
        let Some(toks) = tokenize(expr) else {
            return Plan::All;
        };
        if toks.is_empty() {
            return Plan::All;
        }
        let mut p = Parser {
            toks,
            at: 0,
            last: None,
            plain: true,
            vlan_seen: false,
        };
        match p.expr() {
            Some(plan) if p.at == p.toks.len() => plan,
            _ => Plan::All,
        }
    }

    /// Whether the plan reads every block.
    pub fn is_all(&self) -> bool {
        matches!(self, Plan::All)
    }

    /// The blocks of an index the plan reads.
    pub fn eval<P: Postings>(&self, idx: &P) -> P::Set {
        match self {
            Plan::All => idx.all(),
            Plan::Term(t) => idx.term(t),
            Plan::And(a, b) => {
                let x = a.eval(idx);
                let y = b.eval(idx);
                idx.and(x, y)
            }
            Plan::Or(a, b) => {
                let x = a.eval(idx);
                let y = b.eval(idx);
                idx.or(x, y)
            }
        }
    }

    fn and(a: Plan, b: Plan) -> Plan {
        match (a, b) {
            (Plan::All, x) | (x, Plan::All) => x,
            (a, b) => Plan::And(Box::new(a), Box::new(b)),
        }
    }

    fn or(a: Plan, b: Plan) -> Plan {
        match (a, b) {
            (Plan::All, _) | (_, Plan::All) => Plan::All,
            (a, b) => Plan::Or(Box::new(a), Box::new(b)),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Tok {
    And,
    Or,
    Not,
    Open,
    Close,
    /// `src or dst`, `src and dst` (and reversed): one direction qualifier.
    Dir,
    Word(String),
}

/// Splits an expression into tokens; None when it holds arithmetic or comparisons (byte tests,
/// `len >= N`), which the planner leaves to libpcap whole.
fn tokenize(expr: &str) -> Option<Vec<Tok>> {
    let mut out = Vec::new();
    let b = expr.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        match c {
            b' ' | b'\t' | b'\n' | b'\r' => i += 1,
            b'(' => {
                out.push(Tok::Open);
                i += 1;
            }
            b')' => {
                out.push(Tok::Close);
                i += 1;
            }
            b'!' if b.get(i + 1) != Some(&b'=') => {
                out.push(Tok::Not);
                i += 1;
            }
            b'&' if b.get(i + 1) == Some(&b'&') => {
                out.push(Tok::And);
                i += 2;
            }
            b'|' if b.get(i + 1) == Some(&b'|') => {
                out.push(Tok::Or);
                i += 2;
            }
            _ => {
                let start = i;
                while i < b.len() && !matches!(b[i], b' ' | b'\t' | b'\n' | b'\r' | b'(' | b')') {
                    i += 1;
                }
                let w = &expr[start..i];
                if w.bytes().any(|c| {
                    matches!(
                        c,
                        b'[' | b']'
                            | b'='
                            | b'<'
                            | b'>'
                            | b'&'
                            | b'|'
                            | b'+'
                            | b'*'
                            | b'%'
                            | b'^'
                            | b'!'
                    )
                }) {
                    return None;
                }
                let lw = w.to_ascii_lowercase();
                // These move the offsets of what follows to headers an index may not parse.
                if matches!(lw.as_str(), "mpls" | "pppoes" | "geneve" | "vxlan") {
                    return None;
                }
                out.push(match lw.as_str() {
                    "and" => Tok::And,
                    "or" => Tok::Or,
                    "not" => Tok::Not,
                    _ => Tok::Word(lw),
                });
            }
        }
    }
    // `src or dst`, `dst and src`...: a direction, not an operator.
    let mut joined = Vec::with_capacity(out.len());
    let mut k = 0;
    while k < out.len() {
        if let (Some(Tok::Word(a)), Some(Tok::And | Tok::Or), Some(Tok::Word(c))) =
            (out.get(k), out.get(k + 1), out.get(k + 2))
        {
            if (a == "src" && c == "dst") || (a == "dst" && c == "src") {
                joined.push(Tok::Dir);
                k += 3;
                continue;
            }
        }
        joined.push(out[k].clone());
        k += 1;
    }
    Some(joined)
}

/// The qualifiers of a primitive, for the bare values after it.
#[derive(Clone, Debug)]
struct Quals {
    proto: Option<String>,
    kind: String,
}

struct Parser {
    toks: Vec<Tok>,
    at: usize,
    /// The qualifiers of the last primitive with qualifiers (None after one without).
    last: Option<Quals>,
    /// Everything so far is a chain of `and`s (no `or`, `not` or parenthesis).
    plain: bool,
    /// A `vlan` primitive came before: libpcap reads every later primitive 4 bytes further
    /// per `vlan`, whatever the `and`/`or`/`not` around them (`vlan or vlan or ip` tests
    /// offset 20 for IPv4's type). Only in a chain of `and`s, where each `vlan` was true, do
    /// those offsets fall where the index's keys come from; elsewhere later primitives read
    /// every block.
    vlan_seen: bool,
}

const PROTOS: &[&str] = &[
    "ether", "fddi", "tr", "wlan", "ip", "ip6", "arp", "rarp", "decnet", "tcp", "udp", "sctp",
    "icmp", "icmp6", "igmp", "igrp", "pim", "ah", "esp", "vrrp", "carp", "atalk", "aarp", "lat",
    "sca", "moprc", "mopdl", "iso", "stp", "ipx", "netbeui", "link", "ppp", "slip",
];
const KINDS: &[&str] = &[
    "host",
    "net",
    "port",
    "portrange",
    "gateway",
    "proto",
    "protochain",
];

impl Parser {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.at)
    }

    /// expr := unary ((and | or) unary)*, left to right, one precedence.
    fn expr(&mut self) -> Option<Plan> {
        let mut left = self.unary()?;
        loop {
            match self.peek() {
                Some(Tok::And) => {
                    self.at += 1;
                    let r = self.unary()?;
                    left = Plan::and(left, r);
                }
                Some(Tok::Or) => {
                    self.plain = false;
                    self.at += 1;
                    let r = self.unary()?;
                    left = Plan::or(left, r);
                }
                _ => return Some(left),
            }
        }
    }

    fn unary(&mut self) -> Option<Plan> {
        match self.peek()? {
            Tok::Not => {
                self.plain = false;
                self.at += 1;
                // A block holding a packet of X may hold others: every block.
                self.unary()?;
                Some(Plan::All)
            }
            Tok::Open => {
                self.plain = false;
                self.at += 1;
                let p = self.expr()?;
                if self.peek() != Some(&Tok::Close) {
                    return None;
                }
                self.at += 1;
                Some(p)
            }
            Tok::Close | Tok::And | Tok::Or => None,
            Tok::Word(_) | Tok::Dir => {
                let start = self.at;
                while matches!(self.peek(), Some(Tok::Word(_) | Tok::Dir)) {
                    self.at += 1;
                }
                let run: Vec<Tok> = self.toks[start..self.at].to_vec();
                let shifted = self.vlan_seen && !self.plain;
                let p = self.primitive(&run);
                if run.first() == Some(&Tok::Word("vlan".into())) {
                    self.vlan_seen = true;
                }
                Some(if shifted { Plan::All } else { p })
            }
        }
    }

    /// One primitive: the run of words between operators.
    fn primitive(&mut self, run: &[Tok]) -> Plan {
        let words: Vec<&str> = run
            .iter()
            .map(|t| match t {
                Tok::Word(w) => w.as_str(),
                _ => "src",
            })
            .collect();
        // A bare value: the qualifiers of the primitive before.
        if words.len() == 1 && !PROTOS.contains(&words[0]) && !is_keyword(words[0]) {
            return match self.last.clone() {
                Some(q) => self.qualified(q.proto.as_deref(), &q.kind, &words[..]),
                None if parse_ip4(words[0]).is_some() || parse_ip6(words[0]).is_some() => {
                    self.qualified(None, "host", &words[..])
                }
                None => Plan::All,
            };
        }
        let mut i = 0;
        let proto = words
            .first()
            .filter(|w| PROTOS.contains(w))
            .map(|w| w.to_string());
        if proto.is_some() {
            i += 1;
        }
        let mut dir = false;
        if matches!(words.get(i), Some(&("src" | "dst"))) {
            dir = true;
            i += 1;
        }
        let kind = words.get(i).filter(|w| KINDS.contains(w)).copied();
        if kind.is_some() {
            i += 1;
        }
        let rest = &words[i..];
        match (proto.as_deref(), dir, kind) {
            // A protocol alone: `tcp`, `ip6`, `vlan`-less keywords.
            (Some(p), false, None) if rest.is_empty() => {
                self.last = None;
                proto_alone(p)
            }
            (p, _, Some(k)) if !rest.is_empty() => {
                self.last = Some(Quals {
                    proto: p.map(str::to_string),
                    kind: k.to_string(),
                });
                self.qualified(p, k, rest)
            }
            // `src 10.0.0.1`, `ip src 10.0.0.1`: a host.
            (p, true, None) if !rest.is_empty() => {
                self.last = Some(Quals {
                    proto: p.map(str::to_string),
                    kind: "host".into(),
                });
                self.qualified(p, "host", rest)
            }
            (None, false, None) => {
                self.last = None;
                match words.as_slice() {
                    ["vlan"] => Plan::Term(Term::Tagged),
                    ["vlan", n] => match parse_num(n) {
                        Some(v) if v < 4096 => Plan::Term(Term::Vlan(v as u16)),
                        _ => Plan::All,
                    },
                    _ => Plan::All,
                }
            }
            _ => {
                self.last = None;
                Plan::All
            }
        }
    }

    /// `[proto] [dir] kind value...`
    fn qualified(&self, proto: Option<&str>, kind: &str, rest: &[&str]) -> Plan {
        match (kind, rest) {
            ("host", [v]) => host(proto, v),
            ("net", [v]) => net(proto, v, None),
            ("net", [v, "mask", m]) => net(proto, v, Some(m)),
            ("port", [v]) => match parse_num(v) {
                Some(n) if n <= 0xffff => port_of(proto, Plan::Term(Term::Port(n as u16))),
                _ => Plan::All,
            },
            ("portrange", [v]) => {
                let Some((a, b)) = v.split_once('-') else {
                    return Plan::All;
                };
                match (parse_num(a), parse_num(b)) {
                    (Some(a), Some(b)) if a <= 0xffff && b <= 0xffff => {
                        let (lo, hi) = (a.min(b), a.max(b));
                        if hi - lo > 255 {
                            return Plan::All;
                        }
                        let mut p = Plan::Term(Term::Port(lo as u16));
                        for n in lo + 1..=hi {
                            p = Plan::or(p, Plan::Term(Term::Port(n as u16)));
                        }
                        port_of(proto, p)
                    }
                    _ => Plan::All,
                }
            }
            ("proto", [v]) => match proto {
                None | Some("ip" | "ip6") => match proto_number(v) {
                    Some(n) => Plan::Term(Term::Proto(n)),
                    None => Plan::All,
                },
                _ => Plan::All,
            },
            _ => Plan::All,
        }
    }
}

fn is_keyword(w: &str) -> bool {
    KINDS.contains(&w)
        || matches!(
            w,
            "src"
                | "dst"
                | "vlan"
                | "mpls"
                | "pppoes"
                | "pppoed"
                | "geneve"
                | "vxlan"
                | "less"
                | "greater"
                | "len"
                | "broadcast"
                | "multicast"
                | "inbound"
                | "outbound"
                | "ifname"
                | "on"
                | "rnr"
                | "rulenum"
                | "reason"
                | "rset"
                | "srnr"
                | "subrulenum"
                | "action"
                | "type"
                | "subtype"
                | "dir"
                | "llc"
                | "ra"
                | "ta"
                | "addr1"
                | "addr2"
                | "addr3"
                | "addr4"
                | "iso"
                | "clnp"
                | "esis"
                | "isis"
                | "atm"
                | "lane"
                | "oam"
                | "oamf4"
                | "metac"
                | "bcc"
                | "sc"
                | "ilmic"
                | "connectmsg"
                | "metaconnect"
                | "vpi"
                | "vci"
                | "fisu"
                | "lssu"
                | "msu"
                | "sio"
                | "opc"
                | "dpc"
                | "sls"
                | "hdpc"
                | "hopc"
                | "hfisu"
                | "hlssu"
                | "hmsu"
                | "hsio"
                | "hsls"
                | "protochain"
        )
}

/// `tcp`, `udp`, `ip6`... alone.
fn proto_alone(p: &str) -> Plan {
    let t = match p {
        "tcp" => Term::Proto(6),
        "udp" => Term::Proto(17),
        "sctp" => Term::Proto(132),
        "icmp" => Term::Proto(1),
        "icmp6" => Term::Proto(58),
        "igmp" => Term::Proto(2),
        "pim" => Term::Proto(103),
        "vrrp" => Term::Proto(112),
        "ah" => Term::Proto(51),
        "esp" => Term::Proto(50),
        "ip" => Term::EtherType(0x0800),
        "ip6" => Term::EtherType(0x86dd),
        "arp" => Term::EtherType(0x0806),
        "rarp" => Term::EtherType(0x8035),
        _ => return Plan::All,
    };
    Plan::Term(t)
}

/// A port term under `tcp`/`udp`/`sctp` (or none, `ip`, `ip6`).
fn port_of(proto: Option<&str>, ports: Plan) -> Plan {
    match proto {
        None | Some("ip" | "ip6") => ports,
        Some("tcp") => Plan::and(Plan::Term(Term::Proto(6)), ports),
        Some("udp") => Plan::and(Plan::Term(Term::Proto(17)), ports),
        Some("sctp") => Plan::and(Plan::Term(Term::Proto(132)), ports),
        _ => Plan::All,
    }
}

fn host(proto: Option<&str>, v: &str) -> Plan {
    if let Some(a) = parse_ip4(v) {
        if matches!(proto, None | Some("ip" | "arp" | "rarp")) {
            return Plan::Term(Term::Ip4(a));
        }
    } else if let Some(a) = parse_ip6(v) {
        if matches!(proto, None | Some("ip6")) {
            return Plan::Term(Term::Ip6(a));
        }
    }
    Plan::All
}

fn net(proto: Option<&str>, v: &str, mask: Option<&str>) -> Plan {
    let (a, bits) = match v.split_once('/') {
        Some((a, b)) => (a, Some(b)),
        None => (v, None),
    };
    if let Some(a6) = parse_ip6(a) {
        if !matches!(proto, None | Some("ip6")) || mask.is_some() {
            return Plan::All;
        }
        let bits = match bits.map(parse_num) {
            Some(Some(b)) if b <= 128 => b as u8,
            None => 128,
            _ => return Plan::All,
        };
        return Plan::Term(Term::Net6 {
            addr: u128::from_be_bytes(a6),
            bits,
        });
    }
    if !matches!(proto, None | Some("ip" | "arp" | "rarp")) {
        return Plan::All;
    }
    // libpcap's short forms: `net 10` is 10.0.0.0/8, `net 10.1` 10.1.0.0/16.
    let parts: Vec<&str> = a.split('.').collect();
    if parts.is_empty() || parts.len() > 4 {
        return Plan::All;
    }
    let mut addr = 0u32;
    for p in &parts {
        match parse_num(p) {
            Some(n) if n <= 255 && !p.is_empty() && p.bytes().all(|c| c.is_ascii_digit()) => {
                addr = (addr << 8) | n
            }
            _ => return Plan::All,
        }
    }
    addr <<= 8 * (4 - parts.len() as u32);
    let m = match (bits, mask) {
        (Some(b), None) => match parse_num(b) {
            Some(b) if b <= 32 => {
                if b == 0 {
                    0
                } else {
                    u32::MAX << (32 - b)
                }
            }
            _ => return Plan::All,
        },
        (None, Some(m)) => match parse_ip4(m) {
            Some(m) => u32::from_be_bytes(m),
            None => return Plan::All,
        },
        (None, None) => implied(parts.len()),
        (Some(_), Some(_)) => return Plan::All,
    };
    Plan::Term(Term::Net4 { addr, mask: m })
}

/// The mask of a short network with `n` octets given.
fn implied(n: usize) -> u32 {
    match n {
        1 => 0xff00_0000,
        2 => 0xffff_0000,
        3 => 0xffff_ff00,
        _ => u32::MAX,
    }
}

fn parse_ip4(s: &str) -> Option<[u8; 4]> {
    s.parse::<std::net::Ipv4Addr>().ok().map(|a| a.octets())
}

fn parse_ip6(s: &str) -> Option<[u8; 16]> {
    if !s.contains(':') {
        return None;
    }
    s.parse::<std::net::Ipv6Addr>().ok().map(|a| a.octets())
}

/// A number as libpcap reads one: decimal, `0x` hex, or `0` octal.
fn parse_num(s: &str) -> Option<u32> {
    if let Some(h) = s.strip_prefix("0x") {
        u32::from_str_radix(h, 16).ok()
    } else if let Some(o) = s.strip_prefix('0').filter(|o| !o.is_empty()) {
        u32::from_str_radix(o, 8).ok()
    } else if !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit()) {
        s.parse().ok()
    } else {
        None
    }
}

/// The protocol number of `proto X`: a number or one of the names libpcap knows (`\tcp`).
fn proto_number(v: &str) -> Option<u8> {
    let v = v.strip_prefix('\\').unwrap_or(v);
    match v {
        "tcp" => Some(6),
        "udp" => Some(17),
        "icmp" => Some(1),
        "icmp6" => Some(58),
        "sctp" => Some(132),
        "igmp" => Some(2),
        _ => parse_num(v).and_then(|n| u8::try_from(n).ok()),
    }
}

#[cfg(test)]
mod tests;

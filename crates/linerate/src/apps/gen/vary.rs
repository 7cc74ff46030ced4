//! Field variation: each varied field is a [`Seq`] (fixed, increment over a range, uniform
//! random over a range, or a list) that yields one value per packet with a few instructions;
//! nothing is interpreted per packet. Sizes vary the same way ([`Sizes`]).

use super::rng::Rng;
use std::net::IpAddr;

/// How a field changes from packet to packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Seq {
    /// Always this value.
    Fixed(u64),
    /// lo, lo+1, ..., hi, lo, ... (`span` = hi - lo + 1).
    Inc {
        /// First value.
        lo: u64,
        /// Number of values.
        span: u64,
        /// Offset of the next value.
        cur: u64,
    },
    /// Uniform in lo..lo+span.
    Random {
        /// Lowest value.
        lo: u64,
        /// Number of values.
        span: u64,
    },
    /// These values in turn.
    List {
        /// The values.
        vals: Box<[u64]>,
        /// Index of the next one.
        i: usize,
    },
}

impl Seq {
    /// The next value.
    #[inline(always)]
    pub fn next(&mut self, rng: &mut Rng) -> u64 {
        match self {
            Seq::Fixed(v) => *v,
            Seq::Inc { lo, span, cur } => {
                let v = *lo + *cur;
                *cur += 1;
                if *cur >= *span {
                    *cur = 0;
                }
                v
            }
            Seq::Random { lo, span } => *lo + rng.below(*span),
            Seq::List { vals, i } => {
                let v = vals.get(*i).copied().unwrap_or(0);
                *i += 1;
                if *i >= vals.len() {
                    *i = 0;
                }
                v
            }
        }
    }

    /// Number of distinct values.
    pub fn distinct(&self) -> u64 {
        match self {
            Seq::Fixed(_) => 1,
            Seq::Inc { span, .. } | Seq::Random { span, .. } => *span,
            Seq::List { vals, .. } => vals.len() as u64,
        }
    }

    /// The first value.
    pub fn first(&self) -> u64 {
        match self {
            Seq::Fixed(v) => *v,
            Seq::Inc { lo, .. } | Seq::Random { lo, .. } => *lo,
            Seq::List { vals, .. } => vals.first().copied().unwrap_or(0),
        }
    }
}

/// Parses a field specification: `V` (fixed), `A-B` or `inc:A-B` (increment), `random:A-B`,
/// or `V1,V2,...` (a list). `value` parses one value.
pub fn parse_seq(s: &str, value: impl Fn(&str) -> Result<u64, String>) -> Result<Seq, String> {
    let s = s.trim();
    let (random, body) = if let Some(b) = s.strip_prefix("random:") {
        (true, b)
    } else if let Some(b) = s.strip_prefix("inc:") {
        (false, b)
    } else {
        (false, s)
    };
    if body.contains(',') {
        if random {
            return Err(format!("'{s}': random takes a range A-B, not a list"));
        }
        let vals = body
            .split(',')
            .map(|v| value(v.trim()))
            .collect::<Result<Vec<u64>, String>>()?;
        return Ok(Seq::List {
            vals: vals.into_boxed_slice(),
            i: 0,
        });
    }
    // A range: split at the '-' that separates two valid values.
    let mut range = None;
    for (i, c) in body.char_indices() {
        if c == '-' {
            if let (Ok(a), Ok(b)) = (value(&body[..i]), value(&body[i + 1..])) {
                range = Some((a, b));
                break;
            }
        }
    }
    match range {
        Some((a, b)) => {
            if b < a {
                return Err(format!("'{s}': the range ends before it starts"));
            }
            let span = b - a + 1;
            Ok(if random {
                Seq::Random { lo: a, span }
            } else {
                Seq::Inc {
                    lo: a,
                    span,
                    cur: 0,
                }
            })
        }
        None if random => Err(format!("'{s}': random takes a range A-B")),
        None => Ok(Seq::Fixed(value(body)?)),
    }
}

/// Parses a port number.
pub fn port_value(s: &str) -> Result<u64, String> {
    s.parse::<u16>()
        .map(u64::from)
        .map_err(|_| format!("'{s}' is not a port (0..65535)"))
}

/// An address field: its family, its upper 96 bits (IPv6; zero for IPv4) and the varied low
/// 32 bits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AddrSeq {
    /// The first address (gives the family and, for IPv6, the fixed upper 96 bits).
    pub base: IpAddr,
    /// The low 32 bits.
    pub seq: Seq,
}

/// Parses an address field (`10.0.0.1`, `10.0.0.1-10.0.0.254`, `random:...`, lists; IPv6
/// ranges vary the low 32 bits and must share the upper 96).
pub fn parse_addr(s: &str) -> Result<AddrSeq, String> {
    let first_text = s
        .trim()
        .trim_start_matches("random:")
        .trim_start_matches("inc:");
    // Find the first address to know the family and the upper bits.
    let mut base = None;
    for end in (1..=first_text.len()).rev() {
        if !first_text.is_char_boundary(end) {
            continue;
        }
        if let Ok(a) = first_text[..end].parse::<IpAddr>() {
            base = Some(a);
            break;
        }
    }
    let base = base.ok_or_else(|| format!("'{s}' does not start with an IP address"))?;
    let upper: Option<[u8; 12]> = match base {
        IpAddr::V4(_) => None,
        IpAddr::V6(a) => {
            let mut u = [0u8; 12];
            u.copy_from_slice(&a.octets()[..12]);
            Some(u)
        }
    };
    let seq = parse_seq(s, |v| match (v.parse::<IpAddr>(), upper) {
        (Ok(IpAddr::V4(a)), None) => Ok(u64::from(u32::from(a))),
        (Ok(IpAddr::V6(a)), Some(u)) if a.octets()[..12] == u => {
            let o = a.octets();
            Ok(u64::from(u32::from_be_bytes([o[12], o[13], o[14], o[15]])))
        }
        (Ok(IpAddr::V6(_)), Some(_)) => Err(format!(
            "'{v}': IPv6 addresses of one field must share their upper 96 bits"
        )),
        _ => Err(format!(
            "'{v}' is not an address of the same family as '{base}'"
        )),
    })?;
    Ok(AddrSeq { base, seq })
}

/// Parses a MAC address `aa:bb:cc:dd:ee:ff`.
pub fn parse_mac(s: &str) -> Result<[u8; 6], String> {
    let parts: Vec<&str> = s.split([':', '-']).collect();
    if parts.len() != 6 {
        return Err(format!("'{s}' is not a MAC address (aa:bb:cc:dd:ee:ff)"));
    }
    let mut m = [0u8; 6];
    for (b, p) in m.iter_mut().zip(parts) {
        *b = u8::from_str_radix(p, 16).map_err(|_| format!("'{s}' is not a MAC address"))?;
    }
    Ok(m)
}

/// Frame sizes, including the 4 B CRC as users count them (64 = a minimal Ethernet frame).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SizeSpec {
    /// One size.
    Fixed(u32),
    /// Uniform in lo..=hi.
    Range(u32, u32),
    /// Simple IMIX: 64, 594 and 1518 B in the proportions 7:4:1.
    Imix,
}

impl std::str::FromStr for SizeSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<SizeSpec, String> {
        if s == "imix" {
            return Ok(SizeSpec::Imix);
        }
        let num = |v: &str| {
            crate::units::parse_size(v).and_then(|n| {
                u32::try_from(n).map_err(|_| format!("'{v}' is too large for a frame"))
            })
        };
        match s.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if b < a {
                    return Err(format!("'{s}': the range ends before it starts"));
                }
                Ok(SizeSpec::Range(a, b))
            }
            None => Ok(SizeSpec::Fixed(num(s)?)),
        }
    }
}

/// The IMIX cycle (sizes with CRC), interleaved.
pub const IMIX: [u32; 12] = [64, 594, 64, 64, 594, 64, 1518, 64, 594, 64, 64, 594];

impl SizeSpec {
    /// Smallest and largest size.
    pub fn bounds(&self) -> (u32, u32) {
        match *self {
            SizeSpec::Fixed(n) => (n, n),
            SizeSpec::Range(a, b) => (a, b),
            SizeSpec::Imix => (64, 1518),
        }
    }
    /// Mean size (with CRC).
    pub fn mean(&self) -> f64 {
        match *self {
            SizeSpec::Fixed(n) => f64::from(n),
            SizeSpec::Range(a, b) => (f64::from(a) + f64::from(b)) / 2.0,
            SizeSpec::Imix => IMIX.iter().map(|&n| f64::from(n)).sum::<f64>() / 12.0,
        }
    }
}

/// Yields buffer lengths (sizes without the CRC).
#[derive(Clone, Debug)]
pub enum Sizes {
    /// One length.
    Fixed(usize),
    /// Uniform in lo..lo+span.
    Uniform {
        /// Lowest.
        lo: usize,
        /// Number of lengths.
        span: u64,
    },
    /// The IMIX cycle.
    Imix(usize),
}

impl Sizes {
    /// Compiles a size specification (the caller checked its bounds).
    pub fn new(s: &SizeSpec) -> Sizes {
        match *s {
            SizeSpec::Fixed(n) => Sizes::Fixed(n as usize - 4),
            SizeSpec::Range(a, b) => Sizes::Uniform {
                lo: a as usize - 4,
                span: u64::from(b - a) + 1,
            },
            SizeSpec::Imix => Sizes::Imix(0),
        }
    }

    /// The next length.
    #[inline(always)]
    pub fn next(&mut self, rng: &mut Rng) -> usize {
        match self {
            Sizes::Fixed(n) => *n,
            Sizes::Uniform { lo, span } => *lo + rng.below(*span) as usize,
            Sizes::Imix(i) => {
                let n = IMIX[*i % IMIX.len()] as usize - 4;
                *i = (*i + 1) % IMIX.len();
                n
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn parses_fields() {
        let mut r = Rng::new(1);
        let mut s = parse_seq("5-7", port_value).unwrap();
        let v: Vec<u64> = (0..5).map(|_| s.next(&mut r)).collect();
        assert_eq!(v, [5, 6, 7, 5, 6]);
        let mut s = parse_seq("1,9,3", port_value).unwrap();
        let v: Vec<u64> = (0..4).map(|_| s.next(&mut r)).collect();
        assert_eq!(v, [1, 9, 3, 1]);
        let mut s = parse_seq("random:100-103", port_value).unwrap();
        for _ in 0..100 {
            assert!((100..=103).contains(&s.next(&mut r)));
        }
        assert!(parse_seq("9-1", port_value).is_err());
        assert!(parse_seq("70000", port_value).is_err());
        let a = parse_addr("10.0.0.1-10.0.0.3").unwrap();
        assert_eq!(a.seq.distinct(), 3);
        let a = parse_addr("2001:db8::1-2001:db8::ff").unwrap();
        assert_eq!(a.seq.first(), 1);
        assert_eq!(a.seq.distinct(), 255);
        assert!(parse_addr("2001:db8::1-2001:db9::1").is_err());
        assert!(parse_addr("10.0.0.1-2001:db8::1").is_err());
        assert_eq!(parse_mac("02:00:00:00:00:0a").unwrap(), [2, 0, 0, 0, 0, 10]);
        assert_eq!("imix".parse::<SizeSpec>().unwrap(), SizeSpec::Imix);
        assert_eq!(
            "64-1518".parse::<SizeSpec>().unwrap(),
            SizeSpec::Range(64, 1518)
        );
        let mut z = Sizes::new(&SizeSpec::Imix);
        let total: usize = (0..12).map(|_| z.next(&mut r) + 4).sum();
        assert_eq!(total, 7 * 64 + 4 * 594 + 1518);
    }
}

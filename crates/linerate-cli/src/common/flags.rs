//! Range-checked values of numeric flags: every numeric flag of every command is parsed here,
//! so that a value out of range (`-t 1e30`, `--interval 0`, `-c 1.5`, `--speed nan`) is a usage
//! error (exit code 2) naming the flag and its range, never a panic, a rounding or a silent
//! clamp. Units are parsed by [`linerate::units`]; this module adds the ranges.
//!
//! Each kind has a checking function (`check_*`, for values that come from somewhere else than
//! clap, such as a script's `config` table) and a clap value parser built on it. clap's message
//! names the flag: `invalid value '0' for '--interval <SECONDS>': between 10ms and 24h`.

use linerate::units::{self, Rate};
use std::fmt::Display;
use std::str::FromStr;
use std::time::Duration;

/// A range of durations; `off` lets 0 through as "off" below `min`.
#[derive(Clone, Copy, Debug)]
pub struct Durations {
    /// Shortest.
    pub min: Duration,
    /// Longest.
    pub max: Duration,
    /// Whether 0 is taken (to turn something off).
    pub off: bool,
}

const fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

const fn ms(m: u64) -> Duration {
    Duration::from_millis(m)
}

/// Ten years: the longest run or timeout.
const LONGEST: Duration = secs(87_600 * 3600);

/// `-t`: how long a run lasts.
pub const RUN: Durations = Durations {
    min: ms(1),
    max: LONGEST,
    off: false,
};
/// `--interval`: time between statistics.
pub const INTERVAL: Durations = Durations {
    min: ms(10),
    max: secs(86_400),
    off: false,
};
/// An interval that 0 turns off (`fwd --period`, `flows --status-interval`).
pub const INTERVAL_OR_OFF: Durations = Durations {
    min: ms(10),
    max: LONGEST,
    off: true,
};
/// A timeout after which something is declared gone or idle.
pub const TIMEOUT: Durations = Durations {
    min: ms(1),
    max: LONGEST,
    off: false,
};
/// A wait that may be 0 (`--linger`, `--rx-wait`, `--settle`).
pub const WAIT: Durations = Durations {
    min: Duration::ZERO,
    max: secs(86_400),
    off: false,
};
/// `rfc2544 --trial`.
pub const TRIAL: Durations = Durations {
    min: ms(10),
    max: secs(86_400),
    off: false,
};

/// A duration as users write it: `87600h`, `24h`, `1s`, `10ms`, `0`.
pub fn show_duration(d: Duration) -> String {
    let s = d.as_secs();
    if d.is_zero() {
        "0".into()
    } else if d.subsec_nanos() == 0 && s.is_multiple_of(3600) {
        format!("{}h", s / 3600)
    } else if d.subsec_nanos() == 0 {
        format!("{s}s")
    } else if d.subsec_nanos().is_multiple_of(1_000_000) {
        format!("{}ms", d.as_millis())
    } else {
        format!("{}us", d.as_micros())
    }
}

impl Durations {
    /// The range as a message says it.
    pub fn text(&self) -> String {
        let r = format!(
            "between {} and {}",
            show_duration(self.min),
            show_duration(self.max)
        );
        if self.off {
            format!("0 (off) or {r}")
        } else {
            r
        }
    }
}

/// Parses a duration and checks it is in `r`.
pub fn check_duration(s: &str, r: Durations) -> Result<Duration, String> {
    let d = units::parse_duration(s).map_err(|e| format!("{e}; {}", r.text()))?;
    if (r.off && d.is_zero()) || (r.min..=r.max).contains(&d) {
        Ok(d)
    } else {
        Err(format!("'{s}' is out of range: {}", r.text()))
    }
}

/// A clap value parser of durations in `r`.
pub fn duration(
    r: Durations,
) -> impl Fn(&str) -> Result<Duration, String> + Clone + Send + Sync + 'static {
    move |s| check_duration(s, r)
}

/// Counts (packets, flows, loops): whole numbers with k/M/G/T suffixes.
#[derive(Clone, Copy, Debug)]
pub struct Counts {
    /// Smallest.
    pub min: u64,
    /// Largest.
    pub max: u64,
}

/// Most packets a run may be limited to (`-c`, `--packets`).
pub const MAX_PACKETS: u64 = 1_000_000_000_000_000_000;

/// `-c`, `--packets`: packets a run handles.
pub const PACKETS: Counts = Counts {
    min: 1,
    max: MAX_PACKETS,
};

/// A count as users write it: `1`, `10^18`, `4294967295`.
fn show_count(n: u64) -> String {
    if n >= 1_000_000
        && n.to_string()
            .trim_start_matches('1')
            .bytes()
            .all(|b| b == b'0')
    {
        format!("10^{}", n.to_string().len() - 1)
    } else {
        n.to_string()
    }
}

impl Counts {
    /// The range as a message says it.
    pub fn text(&self) -> String {
        format!(
            "a whole number between {} and {}",
            show_count(self.min),
            show_count(self.max)
        )
    }
}

/// Parses a count and checks it is in `r`.
pub fn check_count(s: &str, r: Counts) -> Result<u64, String> {
    let n = units::parse_count(s).map_err(|e| format!("{e}; {}", r.text()))?;
    if (r.min..=r.max).contains(&n) {
        Ok(n)
    } else {
        Err(format!("'{s}' is out of range: {}", r.text()))
    }
}

/// A clap value parser of counts in `min..=max`.
pub fn count(
    min: u64,
    max: u64,
) -> impl Fn(&str) -> Result<u64, String> + Clone + Send + Sync + 'static {
    move |s| check_count(s, Counts { min, max })
}

/// A clap value parser of sizes in bytes (`64`, `1500B`, `2KiB`) in `min..=max`.
pub fn size(
    min: u64,
    max: u64,
) -> impl Fn(&str) -> Result<u64, String> + Clone + Send + Sync + 'static {
    move |s| {
        let range = format!("a size between {min} and {max} bytes");
        match units::parse_size(s) {
            Ok(n) if (min..=max).contains(&n) => Ok(n),
            Ok(_) => Err(format!("'{s}' is out of range: {range}")),
            Err(e) => Err(format!("{e}; {range}")),
        }
    }
}

/// A letter a tool gave another meaning before linerate's flags were made one vocabulary (the
/// table in docs/DESIGN.md): any use of it is refused (exit 2) with `msg`, which names the flag
/// to write, rather than silently taken in its new meaning.
pub fn retired(
    msg: &'static str,
) -> impl Fn(&str) -> Result<String, String> + Clone + Send + Sync + 'static {
    move |_| Err(msg.to_string())
}

/// A clap value parser of plain integers (queues, threads, cores, ids) in `min..=max`.
pub fn int<T>(min: T, max: T) -> impl Fn(&str) -> Result<T, String> + Clone + Send + Sync + 'static
where
    T: FromStr + PartialOrd + Display + Copy + Send + Sync + 'static,
{
    move |s| {
        let range = format!("a whole number between {min} and {max}");
        match s.trim().parse::<T>() {
            Ok(n) if n >= min && n <= max => Ok(n),
            Ok(_) => Err(format!("'{s}' is out of range: {range}")),
            Err(_) => Err(format!("'{s}' is not {range}")),
        }
    }
}

/// A clap value parser of powers of two in `min..=max` (ring sizes).
pub fn pow2(
    min: u32,
    max: u32,
) -> impl Fn(&str) -> Result<u32, String> + Clone + Send + Sync + 'static {
    move |s| {
        let range = format!("a power of two between {min} and {max}");
        match units::parse_count(s) {
            Ok(n) if n.is_power_of_two() && (u64::from(min)..=u64::from(max)).contains(&n) => {
                Ok(n as u32)
            }
            Ok(_) => Err(format!("'{s}' is out of range: {range}")),
            Err(e) => Err(format!("{e}; {range}")),
        }
    }
}

/// A clap value parser of counts where 0 means "the default": 0 or `min..=max`.
pub fn count_or_zero(
    min: u64,
    max: u64,
) -> impl Fn(&str) -> Result<u64, String> + Clone + Send + Sync + 'static {
    move |s| match units::parse_count(s) {
        Ok(0) => Ok(0),
        _ => check_count(s, Counts { min, max }).map_err(|e| format!("{e} (or 0 for the default)")),
    }
}

/// Parses a real number in `min..=max` (`above` makes the lower bound exclusive); NaN and
/// infinities are refused.
pub fn check_real(s: &str, min: f64, max: f64, above: bool) -> Result<f64, String> {
    let range = if above {
        format!("a number above {min} and at most {max}")
    } else {
        format!("a number between {min} and {max}")
    };
    match s.trim().parse::<f64>() {
        Ok(x) if x.is_finite() && (if above { x > min } else { x >= min }) && x <= max => Ok(x),
        Ok(_) => Err(format!("'{s}' is out of range: {range}")),
        Err(_) => Err(format!("'{s}' is not {range}")),
    }
}

/// A clap value parser of real numbers (see [`check_real`]).
pub fn real(
    min: f64,
    max: f64,
    above: bool,
) -> impl Fn(&str) -> Result<f64, String> + Clone + Send + Sync + 'static {
    move |s| check_real(s, min, max, above)
}

/// Highest packet rate taken: 10 Gpps.
pub const MAX_PPS: f64 = 1e10;
/// Highest bit rate taken: 10 Tbit/s.
pub const MAX_BPS: f64 = 1e13;

/// Parses a rate (`1Mpps`, `5Gbps`, `80%`) and checks it is above 0 and at most 10 Gpps,
/// 10 Tbit/s or 100 %.
pub fn check_rate(s: &str) -> Result<Rate, String> {
    let range = "a rate above 0 and at most 10Gpps, 10Tbps or 100%";
    let r = units::parse_rate(s).map_err(|e| format!("{e}; {range}"))?;
    let ok = match r {
        Rate::Pps(x) => x > 0.0 && x <= MAX_PPS,
        Rate::Bps(x) => x > 0.0 && x <= MAX_BPS,
        Rate::Percent(x) => x > 0.0 && x <= 100.0,
    };
    if ok {
        Ok(r)
    } else {
        Err(format!("'{s}' is out of range: {range}"))
    }
}

/// A clap value parser of rates (see [`check_rate`]).
pub fn rate(s: &str) -> Result<Rate, String> {
    check_rate(s)
}

/// Parses a bit rate for a line speed (`10Gbps`): above 0 and at most 10 Tbit/s.
pub fn check_line_speed(s: &str) -> Result<f64, String> {
    match check_rate(s)? {
        Rate::Bps(b) => Ok(b),
        _ => Err(format!(
            "'{s}': a line speed is in bits per second (10Gbps), at most 10Tbps"
        )),
    }
}

/// Most cores a flag names (`-g`): the machine's are checked when pinning.
pub const MAX_CORE: usize = 4095;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_range_checked() {
        assert_eq!(
            check_duration("500ms", INTERVAL).unwrap(),
            Duration::from_millis(500)
        );
        let e = check_duration("0", INTERVAL).unwrap_err();
        assert!(e.contains("between 10ms and 24h"), "{e}");
        assert!(check_duration("18446744073709551616", RUN)
            .unwrap_err()
            .contains("87600h"));
        assert_eq!(
            check_duration("0", INTERVAL_OR_OFF).unwrap(),
            Duration::ZERO
        );
        assert!(check_duration("1ms", INTERVAL_OR_OFF).is_err());
    }

    #[test]
    fn counts_and_numbers_are_range_checked() {
        assert!(check_count("1.5", PACKETS).unwrap_err().contains("whole"));
        assert!(check_count("0", PACKETS)
            .unwrap_err()
            .contains("between 1 and 10^18"));
        assert_eq!(check_count("10k", PACKETS).unwrap(), 10_000);
        assert!(int(1usize, 64)("0")
            .unwrap_err()
            .contains("between 1 and 64"));
        assert!(int(1usize, 64)("-1").is_err());
        assert!(check_real("nan", 0.0, 1e6, true).is_err());
        assert!(check_real("0", 0.0, 1e6, true).is_err());
        assert!(check_real("inf", 0.0, 1e6, true).is_err());
        assert_eq!(check_real("2.5", 0.0, 1e6, true).unwrap(), 2.5);
        assert!(check_rate("0pps").is_err());
        assert!(check_rate("1Mpps").is_ok());
        assert!(size(64, 262_144)("10").is_err());
    }
}

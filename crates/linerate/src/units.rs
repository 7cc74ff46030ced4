//! Parsing of numbers with units, as flags take them: `64`, `1500B`, `2KiB`, `1M`, `10s`,
//! `500ms`, `1Mpps`, `5Gbps`, `80%`.

use std::time::Duration;

/// A transmit rate.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Rate {
    /// Packets per second.
    Pps(f64),
    /// Bits per second (of frame bytes on the wire, plus 20 B preamble and gap per frame).
    Bps(f64),
    /// Percent of the line rate of the link.
    Percent(f64),
}

impl Rate {
    /// Packets per second this rate asks of frames of `frame_bytes` (with CRC; each takes 20 B
    /// more on the wire: preamble and gap). A percentage is of `line_bps`, and refused when the
    /// line is unknown (None): a percent of a line that is not there means nothing.
    pub fn pps(self, frame_bytes: f64, line_bps: Option<f64>) -> Result<f64, String> {
        let bits = (frame_bytes + 20.0) * 8.0;
        let pps = match self {
            Rate::Pps(p) => p,
            Rate::Bps(b) => b / bits,
            Rate::Percent(x) => match line_bps {
                Some(l) => l * x / 100.0 / bits,
                None => {
                    return Err(format!(
                        "{x}% of what? The line rate is unknown: give the rate in pps or bps"
                    ))
                }
            },
        };
        if pps > 0.0 && pps.is_finite() {
            Ok(pps)
        } else {
            Err("the rate must be above zero".into())
        }
    }
}

fn split_num(s: &str) -> Option<(f64, &str)> {
    let s = s.trim();
    let end = s
        .char_indices()
        .find(|&(_, c)| !(c.is_ascii_digit() || c == '.' || c == '_' || c == '\''))
        .map_or(s.len(), |(i, _)| i);
    let num: String = s[..end]
        .chars()
        .filter(|&c| c != '_' && c != '\'')
        .collect();
    let v: f64 = num.parse().ok()?;
    if !v.is_finite() || v < 0.0 {
        return None;
    }
    Some((v, s[end..].trim()))
}

fn si(suffix: &str) -> Option<f64> {
    Some(match suffix {
        "" => 1.0,
        "k" | "K" => 1e3,
        "M" | "m" => 1e6,
        "G" | "g" => 1e9,
        "T" => 1e12,
        _ => return None,
    })
}

/// A whole number `v * m` as u64: exact for digits alone (`18446744073709551615`), and refused
/// when it is not whole (`1.5`) or does not fit.
fn whole(s: &str, v: f64, m: f64) -> Result<u64, String> {
    let digits: String = s
        .trim()
        .chars()
        .filter(|&c| c != '_' && c != '\'')
        .collect();
    if m == 1.0 && !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        return digits
            .parse::<u64>()
            .map_err(|_| format!("'{s}' is too large"));
    }
    let x = v * m;
    if x.fract() != 0.0 {
        return Err(format!("'{s}' is not a whole number"));
    }
    // 2^64 as f64: anything at or above does not fit.
    if x >= 18_446_744_073_709_551_616.0 {
        return Err(format!("'{s}' is too large"));
    }
    Ok(x as u64)
}

/// A count: `1000`, `10k`, `5M`, `1.5k`, `1G`; a whole number (`1.5` is refused, not rounded).
pub fn parse_count(s: &str) -> Result<u64, String> {
    let (v, rest) =
        split_num(s).ok_or_else(|| format!("'{s}' is not a number (e.g. 1000, 10k, 5M)"))?;
    let m = si(rest).ok_or_else(|| format!("'{s}': unknown suffix '{rest}' (use k, M or G)"))?;
    whole(s, v, m)
}

/// A size in bytes: `64`, `1500B`, `2KiB`, `4k`, `256MiB`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let (v, rest) =
        split_num(s).ok_or_else(|| format!("'{s}' is not a size (e.g. 64, 1500B, 2KiB)"))?;
    let m = match rest {
        "" | "B" | "b" => 1.0,
        "k" | "K" | "kB" | "KB" => 1e3,
        "KiB" | "Ki" => 1024.0,
        "M" | "MB" => 1e6,
        "MiB" | "Mi" => 1024.0 * 1024.0,
        "G" | "GB" => 1e9,
        "GiB" | "Gi" => 1024.0 * 1024.0 * 1024.0,
        "T" | "TB" => 1e12,
        "TiB" | "Ti" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => {
            return Err(format!(
                "'{s}': unknown size unit '{rest}' (use B, kB, MB, GB, TB, KiB, MiB, GiB, TiB)"
            ))
        }
    };
    whole(s, v, m)
}

/// A duration: `10` (seconds), `10s`, `500ms`, `250us`, `2m`, `1h`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let (v, rest) =
        split_num(s).ok_or_else(|| format!("'{s}' is not a duration (e.g. 10s, 500ms)"))?;
    let secs = match rest {
        "" | "s" | "sec" => v,
        "ms" => v / 1e3,
        "us" | "µs" => v / 1e6,
        "ns" => v / 1e9,
        "m" | "min" => v * 60.0,
        "h" => v * 3600.0,
        _ => {
            return Err(format!(
                "'{s}': unknown time unit '{rest}' (use s, ms, us, m, h)"
            ))
        }
    };
    Duration::try_from_secs_f64(secs).map_err(|_| format!("'{s}' is too long a duration"))
}

/// A rate: `1Mpps`, `500kpps`, `5Gbps`, `100Mbit`, `80%`.
pub fn parse_rate(s: &str) -> Result<Rate, String> {
    let (v, rest) =
        split_num(s).ok_or_else(|| format!("'{s}' is not a rate (e.g. 1Mpps, 5Gbps, 80%)"))?;
    if rest == "%" {
        if v > 100.0 {
            return Err(format!("'{s}': a percentage of line rate is at most 100%"));
        }
        return Ok(Rate::Percent(v));
    }
    if rest.is_empty() {
        return Err(format!(
            "'{s}' has no unit: write {s}pps (packets), {s}bps (bits on the wire) or {s}% (of the line)"
        ));
    }
    // Packets per second in any case (`50KPPS`); bits per second with a lower-case `b`
    // only: `GBps` would be bytes to some, and a rate off by 8 is worse than a refusal.
    let lower = rest.to_ascii_lowercase();
    if let Some(prefix) = lower.strip_suffix("pps").map(|p| &rest[..p.len()]) {
        let m = si(prefix).ok_or_else(|| format!("'{s}': unknown prefix '{prefix}'"))?;
        return Ok(Rate::Pps(v * m));
    }
    if ["bps", "bit", "b/s", "bit/s"]
        .iter()
        .any(|u| lower.ends_with(u))
        && !rest.contains('b')
    {
        return Err(format!(
            "'{s}': a capital B reads as bytes: write bits per second with a small b (e.g. 5Gbps)"
        ));
    }
    for (unit, bits) in [("bit/s", true), ("bps", true), ("bit", true), ("b/s", true)] {
        if let Some(prefix) = rest.strip_suffix(unit) {
            let m = si(prefix).ok_or_else(|| format!("'{s}': unknown prefix '{prefix}'"))?;
            return Ok(if bits {
                Rate::Bps(v * m)
            } else {
                Rate::Pps(v * m)
            });
        }
    }
    Err(format!(
        "'{s}': unknown rate unit '{rest}' (use pps, bps or %)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units() {
        assert_eq!(parse_count("10k").unwrap(), 10_000);
        assert_eq!(parse_count("1'000").unwrap(), 1000);
        assert!(parse_count("x").is_err());
        assert!(parse_count("5q").is_err());
        assert_eq!(parse_size("1500B").unwrap(), 1500);
        assert_eq!(parse_size("2KiB").unwrap(), 2048);
        assert_eq!(parse_size("2TB").unwrap(), 2_000_000_000_000);
        assert_eq!(parse_size("1.5TiB").unwrap(), 3 << 39);
        assert!(parse_size("1PB").is_err());
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("10").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_rate("1Mpps").unwrap(), Rate::Pps(1e6));
        assert_eq!(parse_rate("5Gbps").unwrap(), Rate::Bps(5e9));
        assert_eq!(parse_rate("80%").unwrap(), Rate::Percent(80.0));
        assert!(parse_rate("120%").is_err());
        assert!(parse_rate("-1pps").is_err());
    }

    #[test]
    fn rates_in_packets_per_second() {
        // 64 B frames take 84 B on the wire: 10 GbE is 14.88 Mpps.
        let line = Some(10e9);
        assert_eq!(parse_rate("50kpps").unwrap().pps(64.0, None), Ok(50_000.0));
        let p = parse_rate("10Gbps").unwrap().pps(64.0, None).unwrap();
        assert!((p - 14_880_952.38).abs() < 1.0, "{p}");
        let p = parse_rate("50%").unwrap().pps(64.0, line).unwrap();
        assert!((p - 7_440_476.19).abs() < 1.0, "{p}");
        assert!(parse_rate("50%").unwrap().pps(64.0, None).is_err());
        assert!(Rate::Pps(0.0).pps(64.0, None).is_err());
    }

    #[test]
    fn absurd_values_are_errors_not_panics_or_roundings() {
        assert!(parse_duration("18446744073709551616").is_err());
        assert!(parse_duration("99999999999999999999999h").is_err());
        assert!(parse_count("1.5").unwrap_err().contains("whole"));
        assert_eq!(parse_count("1.5k").unwrap(), 1500);
        assert_eq!(parse_count("18446744073709551615").unwrap(), u64::MAX);
        assert!(parse_count("18446744073709551616").is_err());
        assert!(parse_count("20000000000000000000").is_err());
        assert!(parse_count("100000T").is_ok());
        assert!(parse_count("100000000T").is_err());
        assert!(parse_size("1.5").is_err());
        assert_eq!(parse_size("1.5KiB").unwrap(), 1536);
        assert!(parse_rate("nan").is_err() && parse_rate("infpps").is_err());
    }

    #[test]
    fn rates_as_users_write_them() {
        assert_eq!(parse_rate("50KPPS").unwrap(), Rate::Pps(50_000.0));
        assert_eq!(parse_rate("1.5MPPS").unwrap(), Rate::Pps(1_500_000.0));
        assert_eq!(parse_rate("100 kpps").unwrap(), Rate::Pps(100_000.0));
        assert_eq!(parse_rate("5Gbit").unwrap(), Rate::Bps(5e9));
        assert_eq!(parse_rate("100Mbit/s").unwrap(), Rate::Bps(1e8));
        // Bytes or bits? Refused, not read 8 times off.
        let e = parse_rate("5GBPS").unwrap_err();
        assert!(e.contains("small b"), "{e}");
        assert!(parse_rate("5GBps").is_err());
        // A bare number says which units it lacks (not "unknown rate unit ''").
        let e = parse_rate("50000").unwrap_err();
        assert!(e.contains("50000pps") && e.contains("50000%"), "{e}");
        assert!(parse_rate("0").unwrap_err().contains("no unit"));
        assert!(parse_rate("1e9").is_err() && parse_rate("-1").is_err());
    }
}

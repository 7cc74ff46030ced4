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

/// A count: `1000`, `10k`, `5M`, `1G`.
pub fn parse_count(s: &str) -> Result<u64, String> {
    let (v, rest) =
        split_num(s).ok_or_else(|| format!("'{s}' is not a number (e.g. 1000, 10k, 5M)"))?;
    let m = si(rest).ok_or_else(|| format!("'{s}': unknown suffix '{rest}' (use k, M or G)"))?;
    Ok((v * m).round() as u64)
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
        _ => {
            return Err(format!(
                "'{s}': unknown size unit '{rest}' (use B, KiB, MiB, GiB)"
            ))
        }
    };
    Ok((v * m).round() as u64)
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
    Ok(Duration::from_secs_f64(secs))
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
    for (unit, bits) in [("pps", false), ("bps", true), ("bit", true), ("b/s", true)] {
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
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("10").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_rate("1Mpps").unwrap(), Rate::Pps(1e6));
        assert_eq!(parse_rate("5Gbps").unwrap(), Rate::Bps(5e9));
        assert_eq!(parse_rate("80%").unwrap(), Rate::Percent(80.0));
        assert!(parse_rate("120%").is_err());
        assert!(parse_rate("-1pps").is_err());
    }
}

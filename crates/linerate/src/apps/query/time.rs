//! The times of `--from` and `--to`: RFC 3339, epoch seconds, or relative to now.

/// Parses a time, ns since the Unix epoch:
/// - RFC 3339: `2026-11-27T16:00:00Z`, `2026-11-27T17:00:00.25+01:00` (a space for `T`, `z`);
/// - epoch seconds: `1764259200`, `1764259200.5`;
/// - relative, before `now_ns`: `-90s`, `-30m`, `-1h`, `-2d` (also `-1.5h`).
///
/// The error says what was wrong.
pub fn parse_time(s: &str, now_ns: u64) -> Result<u64, String> {
    let s = s.trim();
    if let Some(rel) = s.strip_prefix('-') {
        let (num, unit) = rel.split_at(rel.len().saturating_sub(1));
        let mult: u64 = match unit {
            "s" => 1,
            "m" => 60,
            "h" => 3600,
            "d" => 86_400,
            "w" => 7 * 86_400,
            _ => {
                return Err("a relative time ends in s, m, h, d or w (-90s, -30m, -1h, -2d)".into())
            }
        };
        let ns = decimal_ns(num).ok_or("a relative time is a number and a unit (-1h)")?;
        let back = ns.checked_mul(mult).ok_or("too far back")?;
        return now_ns.checked_sub(back).ok_or_else(|| "before 1970".into());
    }
    if s.bytes().all(|c| c.is_ascii_digit() || c == b'.') {
        return decimal_ns(s)
            .ok_or_else(|| "epoch seconds: digits, a fraction (1764259200.5)".into());
    }
    rfc3339(s).ok_or_else(|| {
        "not a time: write RFC 3339 (2026-11-27T16:00:00Z), epoch seconds (1764259200) or a \
         relative time (-1h)"
            .into()
    })
}

/// `S[.F]` seconds as ns.
fn decimal_ns(s: &str) -> Option<u64> {
    let (int, frac) = match s.split_once('.') {
        Some((i, f)) => (i, f),
        None => (s, ""),
    };
    if int.is_empty() || !int.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    if !frac.bytes().all(|c| c.is_ascii_digit()) || (s.contains('.') && frac.is_empty()) {
        return None;
    }
    let secs: u64 = int.parse().ok()?;
    let mut f = 0u64;
    for (k, c) in frac.bytes().take(9).enumerate() {
        f += u64::from(c - b'0') * 10u64.pow(8 - k as u32);
    }
    secs.checked_mul(1_000_000_000)?.checked_add(f)
}

fn num(s: &str, at: usize, len: usize) -> Option<u64> {
    let d = s.get(at..at + len)?;
    if !d.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    d.parse().ok()
}

/// Days from 1970-01-01 to a civil date (proleptic Gregorian).
fn days_from_civil(y: i64, m: u64, d: u64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = m as i64;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn rfc3339(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let (y, mo, d) = (num(s, 0, 4)?, num(s, 5, 2)?, num(s, 8, 2)?);
    let (h, mi, sec) = (num(s, 11, 2)?, num(s, 14, 2)?, num(s, 17, 2)?);
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let mdays = [
        31,
        if leap { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    if !(1..=12).contains(&mo) || d == 0 || d > mdays[(mo - 1) as usize] || h > 23 || mi > 59 {
        return None;
    }
    // 60: a leap second, as RFC 3339 allows (counted as the next second).
    if sec > 60 {
        return None;
    }
    let mut rest = &s[19..];
    let mut frac = 0u64;
    if let Some(f) = rest.strip_prefix('.') {
        let n = f.bytes().take_while(u8::is_ascii_digit).count();
        if n == 0 {
            return None;
        }
        frac = decimal_ns(&format!("0.{}", &f[..n]))?;
        rest = &f[n..];
    }
    let offset: i64 = match rest {
        "Z" | "z" => 0,
        o if o.len() == 6 && (o.starts_with('+') || o.starts_with('-')) && &o[3..4] == ":" => {
            let oh = num(o, 1, 2)? as i64;
            let om = num(o, 4, 2)? as i64;
            if oh > 23 || om > 59 {
                return None;
            }
            let v = oh * 3600 + om * 60;
            if o.starts_with('-') {
                -v
            } else {
                v
            }
        }
        _ => return None,
    };
    let days = days_from_civil(y as i64, mo, d);
    let secs = days * 86_400 + (h * 3600 + mi * 60 + sec) as i64 - offset;
    let secs = u64::try_from(secs).ok()?;
    secs.checked_mul(1_000_000_000)?.checked_add(frac)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_764_259_200_000_000_000;

    #[test]
    fn forms_of_time() {
        let ok = |s: &str| parse_time(s, NOW).unwrap();
        assert_eq!(ok("2025-11-27T16:00:00Z"), 1_764_259_200_000_000_000);
        assert_eq!(ok("2025-11-27T17:00:00+01:00"), 1_764_259_200_000_000_000);
        assert_eq!(ok("2025-11-27t15:30:00.5-00:30"), 1_764_259_200_500_000_000);
        assert_eq!(
            ok("2025-11-27 16:00:00.000000001Z"),
            1_764_259_200_000_000_001
        );
        assert_eq!(ok("1970-01-01T00:00:00Z"), 0);
        assert_eq!(ok("2024-02-29T00:00:00Z"), 1_709_164_800_000_000_000);
        assert_eq!(ok("1764259200"), 1_764_259_200_000_000_000);
        assert_eq!(ok("1764259200.5"), 1_764_259_200_500_000_000);
        assert_eq!(ok("-1h"), NOW - 3_600_000_000_000);
        assert_eq!(ok("-30m"), NOW - 1_800_000_000_000);
        assert_eq!(ok("-90s"), NOW - 90_000_000_000);
        assert_eq!(ok("-2d"), NOW - 172_800_000_000_000);
        assert_eq!(ok("-1.5h"), NOW - 5_400_000_000_000);
        for bad in [
            "",
            "yesterday",
            "-1",
            "-h",
            "-1y",
            "2025-02-29T00:00:00Z",
            "2025-11-27T16:00:00",
            "2025-11-27T24:00:00Z",
            "2025-13-01T00:00:00Z",
            "1764259200.",
            "1.2.3",
            "2025-11-27T16:00:00.Z",
            "2025-11-27T16:00:00+0100",
            "-99999999999999d",
            "1969-12-31T23:59:59Z",
        ] {
            assert!(parse_time(bad, NOW).is_err(), "{bad}");
        }
    }
}

//! Numbers grouped for humans, as PF_RING's tools print them: `14'881'605`.

/// An integer with `'` between groups of three digits.
pub fn group(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push('\'');
        }
        out.push(c);
    }
    out
}

/// A non-negative number with `prec` decimals and grouped integer part.
pub fn group_f(x: f64, prec: usize) -> String {
    if !x.is_finite() {
        return "nan".into();
    }
    let neg = x < 0.0;
    let s = format!("{:.*}", prec, x.abs());
    let (int, frac) = s.split_once('.').unwrap_or((&s, ""));
    let mut out = String::new();
    if neg {
        out.push('-');
    }
    out.push_str(&group(int.parse().unwrap_or(0)));
    if !frac.is_empty() {
        out.push('.');
        out.push_str(frac);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups() {
        assert_eq!(group(0), "0");
        assert_eq!(group(999), "999");
        assert_eq!(group(1000), "1'000");
        assert_eq!(group(14881605), "14'881'605");
        assert_eq!(group_f(14881605.271, 2), "14'881'605.27");
        assert_eq!(group_f(0.5, 1), "0.5");
    }
}

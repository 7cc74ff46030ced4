//! Local time: strftime(3) for the names of `-G` capture files (tcpdump's), and the zone's offset
//! from UTC for lines printed in local time as tcpdump does (libc's `localtime_r`, which reads `TZ`
//! and /etc/localtime as every C program does).

/// `pattern` expanded by strftime(3) for `secs` since the epoch in the local time zone (TZ);
/// None when the pattern has a NUL byte or expands to nothing or to more than 4 KiB.
pub(crate) fn strftime_local(pattern: &str, secs: i64) -> Option<String> {
    let fmt = std::ffi::CString::new(pattern).ok()?;
    let t: libc::time_t = secs as libc::time_t;
    // SAFETY: `tm` is plain data that localtime_r fills; zeroed is a valid value for it.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are valid for the call; localtime_r is the reentrant form.
    if unsafe { libc::localtime_r(&t, &mut tm) }.is_null() {
        return None;
    }
    let mut buf = vec![0u8; 4096];
    // SAFETY: `buf` has `buf.len()` writable bytes, `fmt` is NUL-terminated, `tm` was filled.
    let n = unsafe {
        libc::strftime(
            buf.as_mut_ptr().cast::<libc::c_char>(),
            buf.len(),
            fmt.as_ptr(),
            &tm,
        )
    };
    if n == 0 {
        return None;
    }
    buf.truncate(n);
    String::from_utf8(buf).ok()
}

/// Seconds east of UTC of the local time zone at `secs` since the epoch (0 if libc cannot say).
pub(crate) fn utc_offset(secs: i64) -> i64 {
    let t: libc::time_t = secs as libc::time_t;
    // SAFETY: `tm` is a plain C struct for which all-zero bytes are a valid value; `localtime_r`
    // only reads `t` and writes `tm`, both live locals, and is thread-safe.
    unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&t, &mut tm).is_null() {
            return 0;
        }
        tm.tm_gmtoff as i64
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    #[test]
    fn expands_a_pattern() {
        let s = super::strftime_local("cap-%Y-%%.pcap", 0).unwrap();
        assert!(s == "cap-1970-%.pcap" || s == "cap-1969-%.pcap", "{s}");
    }
}

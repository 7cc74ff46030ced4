//! The local time zone's offset from UTC at an instant (libc's `localtime_r`, which reads `TZ`
//! and /etc/localtime as every C program does), for lines printed in local time as tcpdump does.

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

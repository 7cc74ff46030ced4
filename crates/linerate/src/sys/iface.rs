//! Interfaces by name: their index in the calling thread's network namespace.

/// The index of interface `name` in the calling thread's network namespace; None when there is
/// no such interface or `name` cannot be one (empty, too long, a NUL byte).
pub(crate) fn ifindex(name: &str) -> Option<u32> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ {
        return None;
    }
    let c = std::ffi::CString::new(name).ok()?;
    // SAFETY: `c` is a valid NUL-terminated string for the duration of the call; the kernel
    // only reads it.
    let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
    (idx != 0).then_some(idx)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn names_that_cannot_be_interfaces_have_no_index() {
        for n in ["", "a\0b", "sixteen-bytes-ab", "lr-no-such-if"] {
            assert_eq!(ifindex(n), None, "{n:?}");
        }
        assert!(ifindex("lo").is_some_and(|i| i > 0));
    }
}

//! What the kernel ports share: an owned file descriptor.

/// An owned file descriptor, closed on drop.
#[derive(Debug)]
pub(crate) struct Fd(pub(crate) i32);

impl Drop for Fd {
    fn drop(&mut self) {
        // SAFETY: the descriptor is owned by this value and closed once.
        unsafe { libc::close(self.0) };
    }
}

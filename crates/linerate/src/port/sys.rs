//! What the ports share from the system layer ([`crate::sys`]): socket creation, socket
//! options, a datagram socket's error queue, poll, the effective user. No system call of its
//! own.

pub(crate) use crate::sys::poll::{poll, poll_readable, PollSet};
pub(crate) use crate::sys::process::euid;
pub(crate) use crate::sys::sock::{recv_err, send_queue, set_recverr, setopt, socket};

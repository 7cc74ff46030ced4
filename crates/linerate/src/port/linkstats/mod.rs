//! The kernel's view of an interface for `linerate watch`: its link counters and queueing
//! disciplines (rtnetlink), the driver's own counters (ethtool), network namespaces by name,
//! and the per-CPU counters of /proc. New wrappers for watch; the descriptor and socket option
//! helpers are those of [`crate::port::sys`].

pub(crate) mod ethtool;
pub(crate) mod netlink;
pub(crate) use crate::sys::netns;
pub mod procfs;

use crate::port::sys::{setopt, socket};

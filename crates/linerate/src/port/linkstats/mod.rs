//! The kernel's view of an interface for `linerate watch`: its link counters and queueing
//! disciplines (rtnetlink), the driver's own counters (ethtool), network namespaces by name,
//! and the per-CPU counters of /proc. Requests are built and answers parsed here; the system
//! calls (the netlink socket, the ethtool ioctl, setns) are [`crate::sys`]'s, so nothing here is
//! `unsafe`.
#![deny(unsafe_code)]

pub(crate) mod ethtool;
pub(crate) mod netlink;
pub(crate) use crate::sys::netns;
pub mod procfs;

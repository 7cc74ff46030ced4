//! The operating-system layer: the crate's direct calls into libc that are not a kernel port's
//! own (AF_PACKET rings, AF_XDP rings and BPF objects stay in their ports), each wrapped once in a
//! safe function with its `SAFETY` argument, so that `apps/` and the CLI contain no `unsafe`.
//!
//! Crate-private; what tools built on the library need is re-exported safely in [`crate::os`].
//! Today: libpcap's BPF interpreter (user-space filters), the CPU's optional instruction sets (AVX2, chosen at run time), the file system a file lives on, processes (effective user, signals to a process or thread), signal masks and the
//! wake-up signal that interrupts a blocking call, CPU affinity, waiting on descriptors (poll,
//! epoll), futexes in shared memory (a cluster queue's sleeping reader), network namespaces (setns), interfaces (index; IPv4 address, hardware address,
//! flags and MTU through `SIOCGIF*`), a plain packet socket for sending a few frames through
//! the qdisc layer, socket creation (every descriptor is an `OwnedFd`), socket options, a
//! datagram socket's error queue, the route netlink socket, the ethtool ioctl, the Lua state whose
//! FFI library the packet views of scripts use, and LuaJIT's profiler (how a stop reaches a
//! script's compiled code).

pub(crate) mod affinity;
pub(crate) mod bpf_filter;
pub(crate) mod cpu;
pub(crate) mod ethtool;
pub(crate) mod fs;
pub(crate) mod futex;
pub(crate) mod iface;
pub(crate) mod localtime;
pub(crate) mod lua_state;
pub(crate) mod luajit;
pub(crate) mod netlink;
pub(crate) mod netns;
pub(crate) mod packet;
pub(crate) mod poll;
pub(crate) mod process;
pub(crate) mod signals;
pub(crate) mod sock;

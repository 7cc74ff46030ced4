//! Single-producer single-consumer rings of `Copy` values (descriptors), on the heap or in a
//! shared region, with bulk (all or nothing) and burst (as many as fit) calls; and [`shared`],
//! the lending queue (release by tail) a cluster's queues are built on.

pub mod shared;
mod spsc;

pub use spsc::{ring, Consumer, Producer, RingLayout};

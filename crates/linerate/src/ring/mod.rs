//! Single-producer single-consumer rings of `Copy` values (descriptors), on the heap or in a
//! shared region, with bulk (all or nothing) and burst (as many as fit) calls.

mod spsc;

pub use spsc::{ring, Consumer, Producer, RingLayout};

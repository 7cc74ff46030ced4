//! Workers: the loops that move batches between ports. The CLI only parses flags and wires
//! ports and workers together. No `unsafe` here: system calls go through `crate::sys`.
#![deny(unsafe_code)]

pub mod balance;
pub mod count;
pub mod flow;
pub mod fwd;
pub mod gen;
pub mod lab;
pub mod lua;
pub mod query;
pub mod record;
pub mod sweep;
pub mod watch;
pub mod worker;

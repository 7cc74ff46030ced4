//! linerate: line-rate packet capture, distribution, generation, forwarding and measurement on
//! stock Linux.
//!
//! Bytes stay in one [`mem::Pool`] of frames; [`mem::Batch`]es of up to 64 [`mem::Desc`]s move
//! between [`port::Port`]s and workers through [`ring`]s. A port is opened from its URI with
//! [`open_rx`] or [`open_tx`]. See DESIGN.md for the architecture.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

pub mod apps;
pub mod cluster;
pub mod filter;
pub mod mem;
pub mod os;
pub mod port;
pub mod ring;
pub mod stats;
pub mod time;
pub mod units;
pub mod wire;

mod open;
mod sync;
mod sys;

pub use open::{
    bare_name_hint, open, open_cluster_input, open_pair, open_pair_parts, open_parts, open_rx,
    open_tx, open_uri_parts, Pair, PairError, PairParts, Side,
};

//! A consumer's transmit lane, the type [`ClusterPort`](super::ClusterPort) holds and the
//! transmit side (`tx.rs`) drives: below both, so neither imports the other for it.

use crate::mem::Desc;
use crate::ring::shared::{Lender, RegionQueue};

/// This port's transmit lane: the producer's side of its ring.
pub(super) struct TxLane {
    pub(super) lane: usize,
    pub(super) ring: Lender<Desc, RegionQueue<Desc>>,
    pub(super) owner: u64,
}

//! Workers: the loops that move batches between ports.

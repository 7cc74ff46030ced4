//! `afpacket:IFACE`: TPACKET_V3 receive, transmit ring, kernel counters.

use super::{Port, PortError, PortOptions, PortStats};
use crate::mem::Batch;

/// An AF_PACKET socket (placeholder until the port lands).
pub struct AfPacket {
    name: String,
}

impl AfPacket {
    /// Opens an interface.
    pub fn open(path: &str, _opts: &PortOptions) -> Result<AfPacket, PortError> {
        Err(PortError::Unsupported {
            port: format!("afpacket:{path}"),
            op: "open",
        })
    }
}

impl Port for AfPacket {
    fn name(&self) -> &str {
        &self.name
    }
    fn rx(&mut self, _batch: &mut Batch) -> Result<usize, PortError> {
        Ok(0)
    }
    fn tx(&mut self, _batch: &mut Batch) -> Result<usize, PortError> {
        Ok(0)
    }
    fn stats(&mut self) -> PortStats {
        PortStats::default()
    }
}

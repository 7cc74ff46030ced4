//! `pcap:FILE`: read pcap and pcapng captures, write pcap.

use super::{Port, PortError, PortOptions, PortStats};
use crate::mem::Batch;

/// A capture file (placeholder until the reader lands).
pub struct PcapPort {
    name: String,
}

impl PcapPort {
    /// Opens a capture file.
    pub fn open(path: &str, _opts: &PortOptions) -> Result<PcapPort, PortError> {
        Err(PortError::Unsupported {
            port: format!("pcap:{path}"),
            op: "open",
        })
    }
}

impl PcapPort {
    /// Creates a pcap file for writing.
    pub fn create(path: &str, _lt: super::LinkType, _snaplen: u32) -> Result<PcapPort, PortError> {
        Err(PortError::Unsupported {
            port: format!("pcap:{path}"),
            op: "create",
        })
    }
    /// Writes pcap to any writer.
    pub fn to_writer(
        name: &str,
        _w: Box<dyn std::io::Write + Send>,
        _lt: super::LinkType,
        _snaplen: u32,
    ) -> Result<PcapPort, PortError> {
        Err(PortError::Unsupported {
            port: format!("pcap:{name}"),
            op: "create",
        })
    }
}

impl Port for PcapPort {
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

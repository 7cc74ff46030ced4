//! What a capture file is written as: its format ([`WriteFormat`]), the writer of that format
//! ([`Writer`]) and the buffer it writes through. Below the port and the rotation, which both
//! hold a writer.

use super::ngwriter::PcapNgWriter;
use super::writer::PcapWriter;
use crate::port::file::RecordFile;

/// Size of the write buffer.
pub const WRITE_BUF: usize = 1 << 20;

/// Where a writer's records go.
pub(super) type Sink = RecordFile;

/// The format of a capture file to write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum WriteFormat {
    /// Classic pcap (microsecond timestamps, one link type): what every tool reads.
    #[default]
    Pcap,
    /// pcapng: interfaces, nanosecond timestamps, and interface statistics at the end.
    PcapNg,
}

impl WriteFormat {
    /// The format a file name asks for: pcapng for `*.pcapng` (any case), else pcap.
    pub fn for_path(path: &str) -> WriteFormat {
        let lower = path.to_ascii_lowercase();
        if lower.ends_with(".pcapng") {
            WriteFormat::PcapNg
        } else {
            WriteFormat::Pcap
        }
    }

    /// Its name (`pcap`, `pcapng`).
    pub fn name(self) -> &'static str {
        match self {
            WriteFormat::Pcap => "pcap",
            WriteFormat::PcapNg => "pcapng",
        }
    }
}

impl std::str::FromStr for WriteFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<WriteFormat, String> {
        match s {
            "pcap" => Ok(WriteFormat::Pcap),
            "pcapng" => Ok(WriteFormat::PcapNg),
            _ => Err(format!("'{s}': write pcap or pcapng")),
        }
    }
}

/// A capture file's writer, of either format.
pub(super) enum Writer {
    Pcap(PcapWriter<Sink>),
    Ng(PcapNgWriter<Sink>),
}

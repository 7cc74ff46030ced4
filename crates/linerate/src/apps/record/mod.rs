//! The recorder (`linerate record`): writer threads that keep a rolling window of capture files
//! in a directory, each file with its index ([`index`]), as Google's Stenographer and ntop's
//! n2disk do.

pub mod index;
pub mod recorder;

pub use index::{
    index_path, BlockInfo, BlockSet, FileIndex, IndexError, IndexWriter, Key, BLOCK_BYTES,
    BLOCK_PACKETS,
};
pub use recorder::{
    is_capture_name, only_stats_after, utc_stamp, RecordOptions, Shared, Writer, WriterCounters,
};

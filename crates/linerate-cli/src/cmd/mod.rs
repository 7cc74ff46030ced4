//! One module per subcommand.

pub mod balance;
pub mod completions;
pub mod count;
pub mod demo;
pub mod exec;
pub mod extcap;
pub mod flows;
pub mod fwd;
pub mod gen;
pub mod gen_replay;
pub mod gen_streams;
pub mod lab;
pub mod man;
pub mod query;
pub mod record;
pub mod rfc2544;
pub mod sweep;
pub mod watch;

//! One module per subcommand.

pub mod balance;
pub mod count;
pub mod demo;
pub mod flows;
pub mod fwd;
pub mod gen;
pub mod gen_replay;
pub mod gen_streams;
pub mod lab;
pub mod rfc2544;
pub mod sweep;
pub mod watch;

//! One module per subcommand.

pub mod balance;
pub mod count;
pub mod demo;
pub mod fwd;
pub mod lab;

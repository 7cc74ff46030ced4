//! One module per subcommand.

pub mod count;
pub mod fwd;
pub mod lab;

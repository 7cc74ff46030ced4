//! One module per subcommand.

pub mod count;
pub mod gen;
pub mod rfc2544;

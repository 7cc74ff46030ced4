//! One module per subcommand.

pub mod count;
pub mod flows;

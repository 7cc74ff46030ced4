//! One module per subcommand.

pub mod balance;
pub mod count;
pub mod demo;
pub mod flows;

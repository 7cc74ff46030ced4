//! Live control and the live page of the long-running tools: gen's commands
//! ([`commands`]).

pub mod commands;

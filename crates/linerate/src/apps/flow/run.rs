//! The monitor's entry: one thread ([`super::run_in_this_thread`]) or several
//! ([`super::threads`]), above both so that neither imports the other.

use super::{threads, FlowOptions, FlowReport, RecordSink};
use crate::port::Port;
use std::sync::atomic::AtomicBool;

/// Runs the monitor on `port` until the end of the input, an error, or `stop`; every record
/// goes to `sink`, and every open flow is reported (reason forced) at the end.
pub fn run(
    port: &mut dyn Port,
    opts: &FlowOptions,
    stop: &AtomicBool,
    sink: &mut dyn RecordSink,
) -> FlowReport {
    if opts.threads > 1 {
        return threads::run_one_port(port, opts, stop, sink);
    }
    super::run_in_this_thread(port, opts, stop, sink)
}

//! Counters, rates and their text, JSON and Prometheus output.

//! liblinerate_pcap.so: unmodified, dynamically linked libpcap programs (tcpdump, tshark,
//! dumpcap, argus, ngrep, softflowd) capture from linerate's ports when the library is
//! preloaded (`LD_PRELOAD=.../liblinerate_pcap.so tcpdump -i cluster:10@0`, or
//! `linerate exec -- tcpdump -i cluster:10@0`).
//!
//! The library interposes libpcap's public `pcap_*` entry points. A device name that is
//! linerate's ([`names::owns`]: `cluster:`, `xdp:`, `afpacket:`) opens a linerate port; every
//! other name, and every handle the library did not make, goes to the system's libpcap
//! untouched, so one process can open both kinds. All the unsafe code is the C boundary in
//! [`ffi`]; the rest is safe Rust over linerate's library.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod devices;
#[allow(unsafe_code)]
pub mod ffi;
pub mod handle;
pub mod names;
pub mod registry;

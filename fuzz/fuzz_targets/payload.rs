//! Fuzz target: see `quartz_fuzz::payload`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| quartz_fuzz::payload(data));

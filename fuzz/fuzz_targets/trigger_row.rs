//! Fuzz target: see `quartz_fuzz::trigger_row`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| quartz_fuzz::trigger_row(data));

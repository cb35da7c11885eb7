//! Fuzz target: see `quartz_fuzz::cron`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| quartz_fuzz::cron(data));

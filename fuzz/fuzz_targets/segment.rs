#![no_main]
//! Fuzz target `segment`: see warren_fuzz_harness::segment.

libfuzzer_sys::fuzz_target!(|data: &[u8]| warren_fuzz_harness::segment::run(data));

#![no_main]
//! Fuzz target `frames`: see warren_fuzz_harness::frames.

libfuzzer_sys::fuzz_target!(|data: &[u8]| warren_fuzz_harness::frames::run(data));

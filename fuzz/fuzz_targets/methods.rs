#![no_main]
//! Fuzz target `methods`: see warren_fuzz_harness::methods.

libfuzzer_sys::fuzz_target!(|data: &[u8]| warren_fuzz_harness::methods::run(data));

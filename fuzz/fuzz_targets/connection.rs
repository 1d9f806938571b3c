#![no_main]
//! Fuzz target `connection`: see warren_fuzz_harness::connection.

libfuzzer_sys::fuzz_target!(|data: &[u8]| warren_fuzz_harness::connection::run(data));

//! The image reader behind inspect, verify, extract's plan and diff, on
//! any bytes: every segment, every compression (the decoders run on what
//! the fuzzer makes of their streams).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| composer::fuzzing::image(data));

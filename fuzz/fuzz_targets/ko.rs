//! The kernel-module reader (.modinfo, symbols, __versions) on any bytes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| composer::fuzzing::ko(data));

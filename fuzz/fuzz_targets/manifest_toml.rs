//! The TOML manifest loader: any text parses into a manifest or an error
//! with a position, never a panic, an abort or a runaway allocation.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| composer::fuzzing::manifest_toml(data));

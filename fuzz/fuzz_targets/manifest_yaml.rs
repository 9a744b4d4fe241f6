//! The YAML manifest loader: nesting, anchors and aliases included.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| composer::fuzzing::manifest_yaml(data));

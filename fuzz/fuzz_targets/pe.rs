//! The PE reader and writer behind unified kernel images, on any bytes: the
//! section table read, and sections appended as to systemd's stub.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| composer::fuzzing::pe(data));

//! The ELF reader of shared-library resolution (headers, program headers,
//! the dynamic section, notes) on any bytes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| composer::fuzzing::elf(data));

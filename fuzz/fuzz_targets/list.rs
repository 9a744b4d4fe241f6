//! The gen_init_cpio list readers, strict and --compat (the first byte
//! chooses), with variables that expand to nothing or to themselves.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| composer::fuzzing::list(data));

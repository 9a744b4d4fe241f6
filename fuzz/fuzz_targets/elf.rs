//! The ELF reader of shared-library resolution (headers, program headers,
//! the dynamic section, notes) on any bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(elf) = composer::resolve::elf::parse(data) {
        let _ = elf.is_static();
        let _ = elf.soname();
    }
});

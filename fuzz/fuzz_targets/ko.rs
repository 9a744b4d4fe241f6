//! The kernel-module reader (.modinfo, symbols, __versions) on any bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(info) = composer::resolve::kmod::parse_module(data) {
        let _ = info.modinfo().count();
        let _ = info.exports().count();
        let _ = info.imports().count();
    }
});

//! The TOML manifest loader: any text parses into a manifest or an error
//! with a position, never a panic, an abort or a runaway allocation.
#![no_main]

use std::sync::Arc;

use composer::manifest::load::{parse, Format};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = parse(text, Format::Toml, &Arc::from("fuzz.toml"));
    }
});

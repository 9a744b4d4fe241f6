//! The YAML manifest loader: nesting, anchors and aliases included.
#![no_main]

use std::sync::Arc;

use composer::manifest::load::{parse, Format};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = parse(text, Format::Yaml, &Arc::from("fuzz.yaml"));
    }
});

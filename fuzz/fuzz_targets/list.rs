//! The gen_init_cpio list readers, strict and --compat (the first byte
//! chooses), with variables that expand to nothing or to themselves.
#![no_main]

use std::ffi::OsString;

use composer::list::{parse, ListOptions};
use libfuzzer_sys::fuzz_target;

fn env(name: &str) -> Option<OsString> {
    match name {
        "FIX" => Some("/nonexistent".into()),
        "SELF" => Some("${SELF}".into()),
        _ => None,
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let opts = ListOptions {
        compat: first & 1 == 1,
        env: &env,
    };
    if let Ok(parsed) = parse(rest, "fuzz.list", &opts) {
        let _ = composer::list::write_list(&parsed.entries);
    }
});

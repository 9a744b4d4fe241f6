//! The image reader behind inspect, verify, extract's plan and diff, on
//! any bytes: every segment, every compression (the decoders run on what
//! the fuzzer makes of their streams).
#![no_main]

use std::io::Read;

use composer::image::inspect::{render, InspectOptions};
use composer::image::{diff, verify, Image, Want};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let image = Image::from_bytes_with("fuzz", data.to_vec(), Want::all());
    let _ = verify::verify(&image);
    let _ = diff::diff(&image, &image, true);
    for opts in [
        InspectOptions::default(),
        InspectOptions {
            long: true,
            ..InspectOptions::default()
        },
        InspectOptions {
            json: true,
            ..InspectOptions::default()
        },
        InspectOptions {
            segments: true,
            ..InspectOptions::default()
        },
    ] {
        let _ = render(&image, &opts);
    }
    let mut sink = Vec::new();
    let _ = image.for_each_data(|_, _, r| {
        sink.clear();
        let _ = r.read_to_end(&mut sink);
        Ok(())
    });
});

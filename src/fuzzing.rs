//! The bodies of the fuzz targets (fuzz/fuzz_targets), here so that the
//! regression test runs every input a fuzzer once broke composer with
//! (fuzz/regressions) through exactly the calls the fuzzer made. Each takes
//! any bytes and must return: a panic, an abort or a runaway allocation is
//! a bug.

use std::ffi::OsString;
use std::sync::Arc;

use crate::image::inspect::{render, InspectOptions};
use crate::image::{diff, verify, Image, Want};
use crate::list::ListOptions;
use crate::manifest::load::{parse, Format};

/// A fuzz target's body.
pub type Target = fn(&[u8]);

/// The fuzz targets by name, as `cargo fuzz` knows them.
pub const TARGETS: [(&str, Target); 7] = [
    ("manifest_toml", manifest_toml),
    ("manifest_yaml", manifest_yaml),
    ("list", list),
    ("image", image),
    ("elf", elf),
    ("ko", ko),
    ("pe", pe),
];

/// The TOML manifest loader: a manifest or an error with a position. Where
/// the document is parsed table by table, the tree must be the one the
/// whole-document parse gives (compared by their debug form: a NaN float
/// is not equal to itself).
pub fn manifest_toml(data: &[u8]) {
    use crate::manifest::node::{toml_doc, Lines};
    if let Ok(text) = std::str::from_utf8(data) {
        let parsed = parse(
            text,
            Format::Toml,
            &crate::origin::Origin::new(Arc::from("fuzz.toml"), 1, 1),
        );
        let lines = Lines::new(text);
        // Rule tables deserialized one by one give the whole manifest.
        if let Some(streamed) = crate::manifest::load::streamed(text, Format::Toml) {
            assert_eq!(
                parsed.ok().map(|m| format!("{m:?}")),
                Some(format!("{streamed:?}"))
            );
            streamed_is_whole(&streamed, toml_doc::whole(text, &lines));
        }
        if let Some(by_tables) = toml_doc::by_tables(text, &lines, &mut |_, t| Some(t)) {
            let whole = toml_doc::whole(text, &lines).ok();
            assert_eq!(
                Some(format!("{by_tables:?}")),
                whole.map(|w| format!("{w:?}")),
                "table by table and whole differ"
            );
        }
    }
}

/// The YAML manifest loader: nesting, anchors and aliases included.
/// Where its rules are read one by one, the manifest must be the one the
/// whole tree gives.
pub fn manifest_yaml(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = parse(
            text,
            Format::Yaml,
            &crate::origin::Origin::new(Arc::from("fuzz.yaml"), 1, 1),
        );
        if let Some(streamed) = crate::manifest::load::streamed(text, Format::Yaml) {
            streamed_is_whole(&streamed, crate::manifest::node::yaml_doc::parse(text));
        }
    }
}

/// A manifest read rule by rule against the one from the whole tree.
fn streamed_is_whole(
    streamed: &crate::manifest::model::Manifest,
    whole: Result<crate::manifest::node::Node, crate::manifest::node::SyntaxError>,
) {
    let whole = whole.expect("streamed, so it parses");
    let whole: crate::manifest::model::Manifest =
        crate::manifest::de::from_node(&whole).expect("streamed, so it is a manifest");
    assert_eq!(
        format!("{whole:?}"),
        format!("{streamed:?}"),
        "streamed and whole differ"
    );
}

fn list_env(name: &str) -> Option<OsString> {
    match name {
        "FIX" => Some("/nonexistent".into()),
        "SELF" => Some("${SELF}".into()),
        _ => None,
    }
}

/// The gen_init_cpio list readers, strict and --compat (the first byte
/// chooses), with variables that expand to nothing or to themselves.
pub fn list(data: &[u8]) {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let opts = ListOptions {
        compat: first & 1 == 1,
        env: &list_env,
    };
    if let Ok(parsed) = crate::list::parse(rest, "fuzz.list", &opts) {
        let _ = crate::list::write_list(&parsed.entries);
    }
}

/// The image reader behind inspect, verify, extract's plan and diff: every
/// segment, every compression (the decoders run on what the fuzzer makes of
/// their streams).
pub fn image(data: &[u8]) {
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
        InspectOptions {
            arch: true,
            ..InspectOptions::default()
        },
        InspectOptions {
            only: vec!["usr/bin".into(), "**/*.ko".into()],
            ..InspectOptions::default()
        },
    ] {
        let _ = render(&image, &opts);
    }
    for path in ["init", "bin/sh", "/a/../b/./c"] {
        let _ = crate::image::cat::find(&image, path);
    }
    let mut sink = Vec::new();
    let _ = image.for_each_data(|_, _, r| {
        sink.clear();
        let _ = r.read_to_end(&mut sink);
        Ok(())
    });
}

/// The ELF reader of shared-library resolution (headers, program headers,
/// the dynamic section, notes).
pub fn elf(data: &[u8]) {
    if let Ok(elf) = crate::resolve::elf::parse(data) {
        let _ = elf.is_static();
        let _ = elf.soname();
    }
}

/// The kernel-module reader (.modinfo, symbols, __versions).
pub fn ko(data: &[u8]) {
    if let Ok(info) = crate::resolve::kmod::parse_module(data) {
        let _ = info.modinfo().count();
        let _ = info.exports().count();
        let _ = info.imports().count();
    }
}

/// The PE side of unified kernel images: the section table of any bytes (what
/// `inspect` reads of a UKI), and sections appended to them as to a stub; what
/// composer appends reads back with the new sections.
pub fn pe(data: &[u8]) {
    use crate::uki::pe::{append_sections, sections};
    let _ = sections(data);
    let add: [(&str, &[u8]); 2] = [(".cmdline", b"root=/dev/vda\0"), (".initrd", b"070701")];
    if let Ok(out) = append_sections(data, &add) {
        let read = sections(&out).expect("an image composer appended to reads back");
        let names: Vec<&str> = read.iter().rev().take(2).map(|s| s.name.as_str()).collect();
        assert_eq!(names, [".initrd", ".cmdline"]);
    }
}

//! `composer check`: load and resolve a manifest without writing anything.

use std::path::PathBuf;

use composer::entry::Kind;
use composer::error::Result;
use composer::pipeline;
use composer::policy::{Environment, Overrides};
use composer::spec::ImageSpec;

use super::args::ManifestArgs;
use super::ui;

#[derive(clap::Args, Debug)]
#[command(after_help = "Example:\n  composer check initrd.toml")]
pub struct Args {
    /// The manifest (.toml, .yaml or .yml).
    #[arg(value_name = "MANIFEST")]
    pub manifest: PathBuf,
    #[command(flatten)]
    pub vars: ManifestArgs,
    /// Print JSON: `{manifest, entries, files, file_bytes, segments: [{name,
    /// compression, entries}], warnings: [...]}` (warnings also on stderr).
    #[arg(long)]
    pub json: bool,
}

/// A manifest's spec for the commands that only report on it.
pub fn spec(manifest: &std::path::Path, vars: &ManifestArgs) -> Result<ImageSpec> {
    pipeline::manifest_spec(
        manifest,
        &vars.load_options(),
        &Overrides::default(),
        &Environment::current(),
        None,
    )
}

/// One line on an image's segments and early files, for `check` and
/// `export-list`: `name (compression, N entries)` for every segment.
pub fn segments_line(spec: &ImageSpec) -> String {
    let parts: Vec<String> = spec
        .segments
        .iter()
        .map(|s| {
            format!(
                "{} ({}, {} entries)",
                s.name,
                s.compression.name(),
                s.entries.len()
            )
        })
        .collect();
    let early_files = spec
        .early_entries()
        .filter(|e| matches!(e.kind, Kind::File { .. }))
        .count();
    let mut line = format!("segments: {}", parts.join(", "));
    if early_files > 0 {
        line.push_str(&format!(
            "; the early segment adds {early_files} file{} (microcode, ACPI tables)",
            if early_files == 1 { "" } else { "s" }
        ));
    }
    line
}

pub fn exec(a: Args) -> Result<()> {
    let spec = spec(&a.manifest, &a.vars)?;
    let (mut entries, mut files, mut bytes) = (0, 0, 0u64);
    for e in spec.own_entries() {
        entries += 1;
        if let Kind::File { source, .. } = &e.kind {
            files += 1;
            bytes += source.size;
        }
    }
    ui::warnings(&spec.warnings);
    if a.json {
        let segments: Vec<serde_json::Value> = spec
            .segments
            .iter()
            .map(|s| {
                serde_json::json!({
                    "name": s.name,
                    "compression": s.compression.name(),
                    "entries": s.entries.len(),
                })
            })
            .collect();
        let warnings: Vec<String> = spec.warnings.iter().map(|w| w.to_string()).collect();
        return ui::print(&ui::json_text(&serde_json::json!({
            "manifest": a.manifest.display().to_string(),
            "entries": entries,
            "files": files,
            "file_bytes": bytes,
            "segments": segments,
            "warnings": warnings,
        })));
    }
    let mut text = format!(
        "{}: ok, {entries} entries ({files} files, {bytes} bytes of file data)\n",
        a.manifest.display()
    );
    if !spec.is_plain() {
        text.push_str(&segments_line(&spec));
        text.push('\n');
    }
    ui::print(&text)
}

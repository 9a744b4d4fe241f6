//! `composer why`: why an entry, module or firmware file is in an image.

use std::path::Path;

use composer::error::{Error, Result};

use super::args::ManifestArgs;
use super::check::spec;
use super::ui;

#[derive(clap::Args, Debug)]
#[command(
    after_help = "Examples:\n  composer why initrd.toml usr/lib/modules/6.1.0-57-amd64/kernel/fs/ext4/ext4.ko\n  composer why initrd.toml ext4\n  composer why initrd.toml usr/sbin/cryptsetup usr/sbin/lvm raid1"
)]
pub struct Args {
    /// `MANIFEST [TARGET...]` or `TARGET MANIFEST`: the manifest is the
    /// argument that ends in .toml, .yaml or .yml (as every manifest's name
    /// must); a target is an image path, a module name (`ext4`) or a
    /// firmware name, each explained in turn from one resolution. Without a
    /// target: the image's modules and firmware by size.
    #[arg(value_name = "ARGS", num_args = 1.., required = true)]
    pub args: Vec<String>,
    #[command(flatten)]
    pub vars: ManifestArgs,
    /// Print JSON: with a target `{target, entries: [{path, size, origin:
    /// {file, line, column} or {profile, line}, rule}], chains: [...]}` (with several, an
    /// array of those), without one `{modules: [{name, module_bytes,
    /// firmware_bytes, firmware_files, why}]}`.
    #[arg(long)]
    pub json: bool,
}

fn is_manifest(a: &str) -> bool {
    [".toml", ".yaml", ".yml"].iter().any(|e| a.ends_with(e))
}

pub fn exec(a: Args) -> Result<()> {
    let (manifest, targets): (&str, Vec<&str>) = match a.args.as_slice() {
        [m] => (m.as_str(), Vec::new()),
        [t, m] if is_manifest(m) && !is_manifest(t) => (m.as_str(), vec![t.as_str()]),
        [m, rest @ ..] if is_manifest(m) => (m.as_str(), rest.iter().map(String::as_str).collect()),
        [m, t] => (m.as_str(), vec![t.as_str()]),
        _ => {
            return Err(Error::usage(
                "usage: composer why MANIFEST [TARGET...] (the manifest's name ends in .toml, .yaml or .yml)",
            ))
        }
    };
    let spec = spec(Path::new(manifest), &a.vars)?;
    ui::warnings(&spec.warnings);
    if targets.len() <= 1 {
        let why = composer::why::explain(&spec, targets.first().copied())?;
        if a.json {
            return ui::print(&ui::json_text(&why.json()));
        }
        return ui::print(&why.text());
    }
    let mut all = Vec::new();
    for t in &targets {
        all.push(composer::why::explain(&spec, Some(t))?);
    }
    if a.json {
        let list = serde_json::Value::Array(all.iter().map(|w| w.json()).collect());
        return ui::print(&ui::json_text(&list));
    }
    ui::print(&all.iter().map(|w| w.text()).collect::<String>())
}

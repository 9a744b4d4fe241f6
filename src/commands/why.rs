//! `composer why`: why an entry, module or firmware file is in an image.

use std::path::Path;

use composer::error::{Error, Result};

use super::args::ManifestArgs;
use super::check::spec;
use super::ui;

#[derive(clap::Args, Debug)]
#[command(
    after_help = "Examples:\n  composer why initrd.toml usr/lib/modules/6.1.0-57-amd64/kernel/fs/ext4/ext4.ko\n  composer why initrd.toml ext4"
)]
pub struct Args {
    /// `MANIFEST [TARGET]` or `TARGET MANIFEST`: the manifest is the
    /// argument that ends in .toml, .yaml or .yml (as every manifest's name
    /// must); the target is an image path, a module name (`ext4`) or a
    /// firmware name. Without a target: the image's modules and firmware
    /// by size.
    #[arg(value_name = "ARGS", num_args = 1..=2, required = true)]
    pub args: Vec<String>,
    #[command(flatten)]
    pub vars: ManifestArgs,
    /// Print JSON: with a target `{target, entries: [{path, size, origin:
    /// {file, line, column}, rule}], chains: [...]}`, without one `{modules:
    /// [{name, module_bytes, firmware_bytes, firmware_files, why}]}`.
    #[arg(long)]
    pub json: bool,
}

fn is_manifest(a: &str) -> bool {
    [".toml", ".yaml", ".yml"].iter().any(|e| a.ends_with(e))
}

pub fn exec(a: Args) -> Result<()> {
    let (manifest, target) = match a.args.as_slice() {
        [m] => (m.as_str(), None),
        [t, m] if is_manifest(m) && !is_manifest(t) => (m.as_str(), Some(t.as_str())),
        [m, t] => (m.as_str(), Some(t.as_str())),
        _ => return Err(Error::usage("usage: composer why MANIFEST [TARGET]")),
    };
    let spec = spec(Path::new(manifest), &a.vars)?;
    ui::warnings(&spec.warnings);
    let why = composer::why::explain(&spec, target)?;
    if a.json {
        return ui::print(&ui::json_text(&why.json()));
    }
    ui::print(&why.text())
}

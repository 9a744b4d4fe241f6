//! `composer export-list`: a manifest's entries as a gen_init_cpio list.

use std::path::PathBuf;

use composer::entry::Entry;
use composer::error::Result;

use super::args::ManifestArgs;
use super::check::{segments_line, spec};
use super::ui;

#[derive(clap::Args, Debug)]
#[command(after_help = "Example:\n  composer export-list initrd.toml -o initramfs.list")]
pub struct Args {
    /// The manifest (.toml, .yaml or .yml).
    #[arg(value_name = "MANIFEST")]
    pub manifest: PathBuf,
    /// Write the list here instead of standard output.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    #[command(flatten)]
    pub vars: ManifestArgs,
}

pub fn exec(a: Args) -> Result<()> {
    let spec = spec(&a.manifest, &a.vars)?;
    if !spec.is_plain() {
        ui::warn(&format!(
            "{}: a gen_init_cpio list is one uncompressed archive of the manifest's own \
             entries, without the early files and without segments ({}); build the image \
             with `composer build`",
            a.manifest.display(),
            segments_line(&spec)
        ));
    }
    let entries: Vec<Entry> = spec.own_entries().cloned().collect();
    let list = composer::list::write_list(&entries)?;
    ui::emit(&list, a.output.as_deref())
}

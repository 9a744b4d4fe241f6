//! `composer import-list`: a manifest that says exactly what a list says.

use std::path::PathBuf;

use composer::error::Result;
use composer::list::{self, ListOptions};

use super::ui;

#[derive(clap::Args, Debug)]
#[command(after_help = "Example:\n  composer import-list initramfs.list > initrd.toml")]
pub struct Args {
    /// The gen_init_cpio list (`-` for standard input).
    #[arg(value_name = "LIST")]
    pub list: PathBuf,
    /// Write the manifest here instead of standard output.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
}

pub fn exec(a: Args) -> Result<()> {
    let (bytes, name) = ui::read_input(&a.list, "list")?;
    let parsed = list::parse(&bytes, &name, &ListOptions::default())?;
    let text = composer::manifest::import::manifest_from_entries(
        &parsed.entries,
        &a.list.display().to_string(),
    );
    ui::emit(text.as_bytes(), a.output.as_deref())
}

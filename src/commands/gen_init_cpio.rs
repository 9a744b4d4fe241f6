//! `composer gen-init-cpio`: a drop-in for the kernel's usr/gen_init_cpio
//! (same arguments, same bytes; SOURCE_DATE_EPOCH is not read, as there).

use std::path::PathBuf;

use composer::error::Result;
use composer::pipeline;
use composer::policy::Environment;

use super::args::ArchiveArgs;
use super::build::list_spec;
use super::ui;

#[derive(clap::Args, Debug)]
#[command(after_help = "Example:\n  composer gen-init-cpio -t 0 -o initramfs.cpio initramfs.list")]
pub struct Args {
    /// Write the archive to FILE instead of standard output.
    #[arg(short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
    #[command(flatten)]
    pub archive: ArchiveArgs,
    /// The list (`-` for standard input).
    #[arg(value_name = "LIST")]
    pub list: PathBuf,
}

pub fn exec(a: Args) -> Result<()> {
    let spec = list_spec(&a.list, &a.archive, &Environment::current(), false)?;
    let output = a.output.unwrap_or_else(|| PathBuf::from("-"));
    let report = pipeline::build(&spec, ui::archive_output(&output)?, !a.archive.no_sync)?;
    ui::build_report(&report);
    Ok(())
}

//! `composer build`: an image from a manifest or a gen_init_cpio list.

use std::path::{Path, PathBuf};

use composer::error::{Error, Result};
use composer::list::ListOptions;
use composer::pipeline::{self, ListInput};
use composer::policy::Environment;
use composer::spec::ImageSpec;

use super::args::{ArchiveArgs, Input, ManifestArgs};
use super::ui;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub input: Input,
    #[command(flatten)]
    pub vars: ManifestArgs,
    /// Where to write the archive (`-` for standard output).
    #[arg(short = 'o', long = "output", value_name = "OUT")]
    pub output: PathBuf,
    #[command(flatten)]
    pub archive: ArchiveArgs,
}

/// The spec of a gen_init_cpio list at `path` (`-`: standard input).
/// `source_date_epoch`: whether SOURCE_DATE_EPOCH applies.
pub fn list_spec(
    path: &Path,
    archive: &ArchiveArgs,
    env: &Environment,
    source_date_epoch: bool,
) -> Result<ImageSpec> {
    let (bytes, name) = ui::read_input(path, "list")?;
    let opts = ListOptions {
        compat: archive.compat,
        ..ListOptions::default()
    };
    let input = ListInput {
        bytes: &bytes,
        name: &name,
    };
    pipeline::list_spec(&input, &opts, &archive.overrides(), env, source_date_epoch)
}

pub fn exec(a: Args) -> Result<()> {
    let env = Environment::current();
    let spec = match (&a.input.manifest, &a.input.list) {
        (_, Some(list)) => list_spec(list, &a.archive, &env, true)?,
        (Some(m), None) => pipeline::manifest_spec(
            m,
            &a.vars.load_options(),
            &a.archive.overrides(),
            &env,
            Some(&a.output),
        )?,
        (None, None) => return Err(Error::usage("name a manifest or --list LIST")),
    };
    let report = pipeline::build(&spec, ui::output(&a.output)?, !a.archive.no_sync)?;
    ui::build_report(&report);
    Ok(())
}

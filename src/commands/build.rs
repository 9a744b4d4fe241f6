//! `composer build`: an image from a manifest or a gen_init_cpio list.

use std::path::{Path, PathBuf};

use composer::error::{Error, Result};
use composer::list::ListOptions;
use composer::manifest::LoadOptions;
use composer::pipeline::{self, ListInput};
use composer::policy::Environment;
use composer::spec::ImageSpec;

use super::args::{ArchiveArgs, Input, ManifestArgs};
use super::ui;

#[derive(clap::Args, Debug)]
#[command(
    after_help = "Examples:\n  composer build examples/minimal.toml -o initrd.img\n  composer build --kver 6.1.0-57-amd64          # the system configuration, to /boot/initrd.img-KVER\n  composer build --list initramfs.list -o initrd.img"
)]
pub struct Args {
    #[command(flatten)]
    pub input: Input,
    #[command(flatten)]
    pub vars: ManifestArgs,
    /// Where to write the archive (`-` for standard output); default the
    /// manifest's `[image] output`, /boot/initrd.img-KVER inside the root.
    #[arg(short = 'o', long = "output", value_name = "OUT")]
    pub output: Option<PathBuf>,
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

/// The manifest to read and the load options: the one named, or the
/// system configuration of the root.
pub fn manifest_and_options(
    manifest: Option<&Path>,
    vars: &ManifestArgs,
) -> Result<(PathBuf, LoadOptions)> {
    let mut load = vars.load_options();
    if let Some(m) = manifest {
        return Ok((m.to_path_buf(), load));
    }
    let root = vars.root.clone().unwrap_or_else(|| PathBuf::from("/"));
    let config = composer::manifest::system::find(&root);
    load.dropins = config.dropins;
    // No configuration: the profiles named on the command line, else the
    // default one (the generic image).
    let main = match config.main {
        Some(m) => m,
        None if !load.profiles.is_empty() => {
            let first = load.profiles.remove(0);
            composer::manifest::find_profile(&first, &root).map_err(Error::usage)?
        }
        None => composer::manifest::find_profile("default", &root).map_err(Error::usage)?,
    };
    Ok((main, load))
}

pub fn exec(a: Args) -> Result<()> {
    let started = std::time::Instant::now();
    let mut bar = super::progress::Bar::start();
    let env = Environment::current();
    let spec = match &a.input.list {
        Some(list) => {
            let Some(out) = &a.output else {
                return Err(Error::usage("--list needs -o OUT").with_hint("e.g. -o initrd.img"));
            };
            let mut spec = list_spec(list, &a.archive, &env, true)?;
            spec.output = Some(out.clone());
            spec
        }
        None => {
            let (m, load) = manifest_and_options(a.input.manifest.as_deref(), &a.vars)?;
            pipeline::manifest_spec(&m, &load, &a.archive.overrides(), &env, a.output.as_deref())?
        }
    };
    let out = spec.output.clone().expect("a build has an output");
    let entries: usize = spec.segments.iter().map(|s| s.entries.len()).sum();
    let segments = spec.segments.len();
    let mut output = ui::archive_output(&out)?;
    if spec.private {
        output = output.private();
    }
    let report = pipeline::build(&spec, output, !a.archive.no_sync);
    bar.stop();
    let report = report?;
    ui::build_report(&report);
    ui::build_details(&report);
    ui::build_summary(&out, &report, entries, segments, started.elapsed());
    Ok(())
}

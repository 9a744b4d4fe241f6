//! `composer plan`: the layout a build would write.

use std::path::{Path, PathBuf};

use composer::error::{Error, Result};
use composer::pipeline;
use composer::plan::report::{self, Format};
use composer::policy::Environment;

use super::args::{ArchiveArgs, Input, ManifestArgs};
use super::build::list_spec;
use super::ui;

#[derive(clap::Args, Debug)]
#[command(after_help = "Example:\n  composer plan initrd.toml -a 4096 --summary")]
pub struct Args {
    #[command(flatten)]
    pub input: Input,
    /// Where the archive would go, for `align = "auto"` (default: the
    /// current directory).
    #[arg(short = 'o', long = "output", value_name = "OUT")]
    pub output: Option<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Print only the totals.
    #[arg(long)]
    pub summary: bool,
    #[command(flatten)]
    pub archive: ArchiveArgs,
    #[command(flatten)]
    pub vars: ManifestArgs,
}

pub fn exec(a: Args) -> Result<()> {
    let env = Environment::current();
    let format = match (a.json, a.summary) {
        (true, _) => Format::Json,
        (false, true) => Format::Summary,
        (false, false) => Format::Table,
    };
    let (spec, plain) = match (&a.input.manifest, &a.input.list) {
        (_, Some(list)) => (list_spec(list, &a.archive, &env, true)?, true),
        (Some(m), None) => {
            // align = "auto" needs the output's filesystem: without -o,
            // plan for the current directory's, and say so.
            let here = Path::new("composer-plan.img");
            let out = a.output.as_deref().unwrap_or(here);
            let spec = pipeline::manifest_spec(
                m,
                &a.vars.load_options(),
                &a.archive.overrides(),
                &env,
                Some(out),
            )?;
            if a.output.is_none() && spec.policy.auto_align {
                ui::note(&format!(
                    "align = \"auto\" is the block size of the output's filesystem; planned \
                     for the current directory's ({} bytes); pass -o OUT to plan for another \
                     place",
                    spec.policy.align
                ));
            }
            let plain = spec.is_plain();
            (spec, plain)
        }
        (None, None) => return Err(Error::usage("name a manifest or --list LIST")),
    };
    let layout = composer::plan::image(&spec);
    ui::print(&report::render(&layout, plain, format))
}

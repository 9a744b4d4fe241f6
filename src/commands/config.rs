//! `composer config`: the configuration a build with the same arguments
//! reads: its documents in order, what each sets and selects, and where.

use std::path::PathBuf;

use composer::error::Result;
use composer::pipeline;
use composer::policy::{Environment, Overrides};

use super::args::ManifestArgs;
use super::build::manifest_and_options;
use super::ui;

#[derive(clap::Args, Debug)]
#[command(
    after_help = "Examples:\n  composer config\n  composer config --root /srv/sysroot --files\n  composer config initrd.toml --json\n  composer config > /etc/composer/initrd.toml   # the same image, from one file"
)]
pub struct Args {
    /// The manifest (default: the system configuration of the root, as
    /// `composer build` reads it: /etc/composer/initrd.toml and its
    /// drop-ins, else the default profile).
    #[arg(value_name = "MANIFEST")]
    pub manifest: Option<PathBuf>,
    #[command(flatten)]
    pub vars: ManifestArgs,
    /// List the documents in the order they are read, a line each.
    #[arg(long, conflicts_with = "json")]
    pub files: bool,
    /// Print JSON: `{documents: [{name, include, init_profile}], settings:
    /// [{key, value, origin, overridden}], rules: [{kind, what, origin}]}`
    /// (an `[omit]` entry's with `left_out: [...]`, what it took out); an
    /// origin is `{file, line, column}` or `{profile, line}`.
    #[arg(long)]
    pub json: bool,
}

pub fn exec(a: Args) -> Result<()> {
    let (main, load) = manifest_and_options(a.manifest.as_deref(), &a.vars)?;
    let loaded = composer::manifest::load(&main, &load)?;
    let mut config = composer::manifest::config::view(&loaded)?;
    // What each [omit] entry took out, from the lowering a build does; the
    // configuration is shown without it when lowering fails (a kernel
    // without modules here, say), with a note.
    if !a.files && config.rules.iter().any(|r| r.kind.starts_with("[omit]")) {
        match pipeline::manifest_spec(
            &main,
            &load,
            &Overrides::default(),
            &Environment::current(),
            None,
        ) {
            Ok(spec) => config.note_omitted(&spec.omitted),
            Err(e) => ui::note(&format!(
                "what [omit] takes out is not shown: the image could not be resolved: {e}"
            )),
        }
    }
    if a.files {
        return ui::print(&config.files_text());
    }
    if a.json {
        return ui::print(&ui::json_text(&config.json()));
    }
    ui::print(&config.manifest_text())
}

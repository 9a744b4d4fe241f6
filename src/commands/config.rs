//! `composer config`: the configuration a build with the same arguments
//! reads: its documents in order, what each sets and selects, and where.

use std::path::PathBuf;

use composer::error::Result;

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
    /// [{key, value, origin, overridden}], rules: [{kind, what, origin}]}`;
    /// an origin is `{file, line, column}` or `{profile, line}`.
    #[arg(long)]
    pub json: bool,
}

pub fn exec(a: Args) -> Result<()> {
    let (main, load) = manifest_and_options(a.manifest.as_deref(), &a.vars)?;
    let loaded = composer::manifest::load(&main, &load)?;
    let config = composer::manifest::config::view(&loaded)?;
    if a.files {
        return ui::print(&config.files_text());
    }
    if a.json {
        return ui::print(&ui::json_text(&config.json()));
    }
    ui::print(&config.manifest_text())
}

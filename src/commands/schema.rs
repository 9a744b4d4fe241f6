//! `composer schema`: the manifest's JSON Schema.

use composer::error::Result;

use super::ui;

#[derive(clap::Args, Debug)]
#[command(after_help = "Example:\n  composer schema > composer.schema.json")]
pub struct Args {}

pub fn exec(_: Args) -> Result<()> {
    ui::print(&composer::manifest::schema_json())
}

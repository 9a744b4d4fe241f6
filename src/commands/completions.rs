//! `composer completions SHELL`: a shell completion script, generated from
//! the command line definitions.

use clap_complete::Shell;

use composer::error::Result;

use super::ui;

#[derive(clap::Args, Debug)]
#[command(
    after_help = "Example:\n  composer completions bash > /usr/share/bash-completion/completions/composer"
)]
pub struct Args {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: Shell,
}

/// `cmd`: composer's whole command line definition.
pub fn exec(a: Args, mut cmd: clap::Command) -> Result<()> {
    let mut out = Vec::new();
    clap_complete::generate(a.shell, &mut cmd, "composer", &mut out);
    ui::print(&String::from_utf8_lossy(&out))
}

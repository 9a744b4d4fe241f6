//! `composer man DIR`: man pages (composer.1 and composer-SUBCOMMAND.1),
//! generated from the command line definitions.

use std::path::PathBuf;

use composer::error::{Error, Result};

#[derive(clap::Args, Debug)]
#[command(after_help = "Example:\n  composer man /usr/share/man/man1")]
pub struct Args {
    /// The directory to write the pages into (created if missing).
    pub dir: PathBuf,
}

/// `cmd`: composer's whole command line definition.
pub fn exec(a: Args, cmd: clap::Command) -> Result<()> {
    std::fs::create_dir_all(&a.dir).map_err(|e| Error::io(&a.dir, e))?;
    write_page(&a.dir, "composer", cmd.clone())?;
    for sub in cmd.get_subcommands() {
        let name = format!("composer-{}", sub.get_name());
        let page = sub
            .clone()
            .name(name.clone())
            .version(env!("CARGO_PKG_VERSION"));
        write_page(&a.dir, &name, page)?;
    }
    Ok(())
}

fn write_page(dir: &std::path::Path, name: &str, cmd: clap::Command) -> Result<()> {
    let path = dir.join(format!("{name}.1"));
    let mut out = Vec::new();
    clap_mangen::Man::new(cmd)
        .render(&mut out)
        .map_err(|e| Error::io(&path, e))?;
    std::fs::write(&path, out).map_err(|e| Error::io(&path, e))
}

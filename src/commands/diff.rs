//! `composer diff`: what differs between two initrds, entry by entry.

use std::path::PathBuf;

use composer::error::{Error, Result};
use composer::image::{diff, Digests, Want};

use super::ui;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[arg(value_name = "A")]
    pub a: PathBuf,
    #[arg(value_name = "B")]
    pub b: PathBuf,
    /// Report differing mtimes too.
    #[arg(long)]
    pub mtime: bool,
}

/// Contents are compared by digest.
const CONTENT: Want = Want {
    sums: false,
    digests: Digests::All,
};

pub fn exec(a: Args) -> Result<()> {
    let ia = ui::open_image(&a.a, CONTENT)?;
    if let Some(e) = ia.fault_error() {
        return Err(e);
    }
    let ib = ui::open_image(&a.b, CONTENT)?;
    if let Some(e) = ib.fault_error() {
        return Err(e);
    }
    let changes = diff::diff(&ia, &ib, a.mtime);
    let mut text = String::new();
    for c in &changes {
        text.push_str(&c.render());
        text.push('\n');
    }
    ui::print(&text)?;
    if changes.is_empty() {
        Ok(())
    } else {
        Err(Error::found(format!(
            "{} and {} differ in {} entr{}",
            ia.name,
            ib.name,
            changes.len(),
            if changes.len() == 1 { "y" } else { "ies" }
        )))
    }
}

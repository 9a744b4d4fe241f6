//! `composer diff`: what differs between two initrds, entry by entry.

use std::path::PathBuf;

use composer::error::{Error, Result};
use composer::image::{diff, Digests, Want};
use composer::path::escape;

use super::ui;

#[derive(clap::Args, Debug)]
#[command(after_help = "Example:\n  composer diff /boot/initrd.img-6.1.0-57-amd64 initrd.img")]
pub struct Args {
    /// The first image (`-` for standard input).
    #[arg(value_name = "A")]
    pub a: PathBuf,
    /// The second image.
    #[arg(value_name = "B")]
    pub b: PathBuf,
    /// Report differing mtimes too.
    #[arg(long)]
    pub mtime: bool,
    /// Print JSON: `{a, b, changes: [{change: added|removed|changed, name,
    /// kind (added, removed), what (changed): [...]}]}`.
    #[arg(long)]
    pub json: bool,
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
    if a.json {
        let list: Vec<serde_json::Value> = changes
            .iter()
            .map(|c| match c {
                diff::Change::Added { name, kind } => serde_json::json!({
                    "change": "added", "name": escape(name), "kind": kind,
                }),
                diff::Change::Removed { name, kind } => serde_json::json!({
                    "change": "removed", "name": escape(name), "kind": kind,
                }),
                diff::Change::Changed { name, what } => serde_json::json!({
                    "change": "changed", "name": escape(name), "what": what,
                }),
            })
            .collect();
        text = ui::json_text(&serde_json::json!({
            "a": ia.name,
            "b": ib.name,
            "changes": list,
        }));
    }
    for c in changes.iter().filter(|_| !a.json) {
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

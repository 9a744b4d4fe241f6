//! `composer verify`: everything the kernel would silently drop or reject.

use std::path::PathBuf;

use composer::error::{Error, Result};
use composer::image::{verify, Digests, Want};

use super::ui;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The image (`-` for standard input).
    #[arg(value_name = "IMAGE")]
    pub image: PathBuf,
}

pub fn exec(a: Args) -> Result<()> {
    let image = ui::open_image(
        &a.image,
        Want {
            sums: true,
            digests: Digests::Hardlinks,
        },
    )?;
    let findings = verify::verify(&image);
    let mut text = String::new();
    for f in &findings {
        text.push_str(&format!("{}: {}: {}\n", image.name, f.place, f.message));
    }
    let entries = image.entries().count();
    if findings.is_empty() {
        text.push_str(&format!(
            "{}: ok: {} segment(s), {entries} entries; the kernel unpacks every one\n",
            image.name,
            image.segments.len()
        ));
    }
    ui::print(&text)?;
    if findings.is_empty() {
        return Ok(());
    }
    let fatal = findings.iter().filter(|f| f.fatal).count();
    Err(Error::found(format!(
        "{}: {} problem(s) found{}",
        image.name,
        findings.len(),
        if fatal > 0 {
            format!(", {fatal} that stop the kernel's unpacking")
        } else {
            String::new()
        }
    )))
}

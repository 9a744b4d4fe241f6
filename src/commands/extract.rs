//! `composer extract`: unpack an initrd into a new or empty directory.

use std::path::PathBuf;

use composer::error::Result;
use composer::extract::{self, ExtractOptions};
use composer::image::Want;

use super::ui;

#[derive(clap::Args, Debug)]
#[command(after_help = "Example:\n  composer extract -C unpacked /boot/initrd.img-$(uname -r)")]
pub struct Args {
    /// The image (`-` for standard input).
    #[arg(value_name = "IMAGE")]
    pub image: PathBuf,
    /// The directory to create (it may exist if empty).
    #[arg(short = 'C', long = "directory", value_name = "DIR")]
    pub dir: PathBuf,
    /// Create block and character device nodes (needs root).
    #[arg(long)]
    pub devices: bool,
}

pub fn exec(a: Args) -> Result<()> {
    let image = ui::open_image(
        &a.image,
        Want {
            sums: true,
            ..Want::default()
        },
    )?;
    let opts = ExtractOptions { devices: a.devices };
    let report = extract::extract(&image, &a.dir, &opts)?;
    for w in &report.warnings {
        ui::warn(&format!("{}: {w}", image.name));
    }
    Ok(())
}

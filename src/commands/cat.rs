//! `composer cat`: print one file of an initrd.

use std::io::Write;
use std::path::PathBuf;

use composer::error::{Error, Result};
use composer::image::{cat, Want};

use super::ui;

#[derive(clap::Args, Debug)]
#[command(after_help = "Example:\n  composer cat /boot/initrd.img-$(uname -r) etc/initrd-release")]
pub struct Args {
    /// The image (`-` for standard input).
    #[arg(value_name = "IMAGE")]
    pub image: PathBuf,
    /// The file inside the image (symlinks on the way are followed inside it).
    #[arg(value_name = "PATH")]
    pub path: String,
}

pub fn exec(a: Args) -> Result<()> {
    let image = ui::open_image(&a.image, Want::default())?;
    let Some(want) = cat::find(&image, &a.path)? else {
        return Ok(());
    };
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    image.for_each_data(|seg, i, data| {
        if (seg, i) != want {
            return Ok(());
        }
        match std::io::copy(data, &mut out) {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
            r => r.map(drop).map_err(|e| Error::io("<stdout>", e)),
        }
    })?;
    match out.flush() {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(Error::io("<stdout>", e)),
        _ => Ok(()),
    }
}

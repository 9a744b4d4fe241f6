//! `composer inspect`: the entries of any initrd.

use std::path::PathBuf;

use composer::error::Result;
use composer::image::inspect::{self, InspectOptions};
use composer::image::Want;

use super::ui;

#[derive(clap::Args, Debug)]
#[command(
    after_help = "Examples:\n  composer inspect -l /boot/initrd.img-$(uname -r)\n  composer inspect initrd.img 'usr/lib/modules/*/kernel/fs/**'"
)]
pub struct Args {
    /// The image (`-` for standard input).
    #[arg(value_name = "IMAGE")]
    pub image: PathBuf,
    /// Only these entries: a path lists the entry and everything below it; a
    /// glob (`*`, `?`, `[...]`, `**`) the names it matches.
    #[arg(value_name = "PATH")]
    pub paths: Vec<String>,
    /// Show mode, links, owner, size, mtime (UTC) and data offset.
    #[arg(short = 'l', long)]
    pub long: bool,
    /// Show the segments: offset, length, compression, size, entries.
    #[arg(long)]
    pub segments: bool,
    /// Show the architecture the image is for: that of its programs,
    /// libraries and modules (`aarch64 (39 programs and libraries, 723
    /// modules)`), each architecture with its counts when they differ.
    #[arg(long, conflicts_with_all = ["long", "segments", "json", "paths"])]
    pub arch: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

pub fn exec(a: Args) -> Result<()> {
    let opts = InspectOptions {
        long: a.long,
        segments: a.segments,
        json: a.json,
        arch: a.arch,
        only: a.paths,
    };
    let image = ui::open_image(&a.image, Want::default())?;
    ui::print(&inspect::render(&image, &opts)?)
}

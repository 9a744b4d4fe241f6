//! `composer verify`: everything the kernel would silently drop or reject.

use std::path::PathBuf;

use composer::error::{Error, Result};
use composer::image::{verify, Digests, Want};

use super::ui;

#[derive(clap::Args, Debug)]
#[command(after_help = "Example:\n  composer verify /boot/initrd.img-$(uname -r)")]
pub struct Args {
    /// The image (`-` for standard input).
    #[arg(value_name = "IMAGE")]
    pub image: PathBuf,
    /// Print JSON: `{image, segments, entries, ok, fatal, findings: [{segment,
    /// stream: {compression, offset} | null, offset, message, fatal}]}`.
    #[arg(long)]
    pub json: bool,
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
    let entries = image.entries().count();
    let fatal = findings.iter().filter(|f| f.fatal).count();
    let mut text = String::new();
    if a.json {
        let list: Vec<serde_json::Value> = findings
            .iter()
            .map(|f| {
                serde_json::json!({
                    "segment": f.place.segment,
                    "stream": f.place.stream.map(|(c, at)| serde_json::json!({
                        "compression": c.name(),
                        "offset": at,
                    })),
                    "offset": f.place.offset,
                    "message": f.message,
                    "fatal": f.fatal,
                })
            })
            .collect();
        let doc = serde_json::json!({
            "image": image.name,
            "segments": image.segments.len(),
            "entries": entries,
            "ok": findings.is_empty(),
            "fatal": fatal,
            "findings": list,
        });
        text = ui::json_text(&doc);
    }
    for f in findings.iter().filter(|_| !a.json) {
        text.push_str(&format!("{}: {}: {}\n", image.name, f.place, f.message));
    }
    if findings.is_empty() && !a.json {
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

//! `composer deps`: the files programs need, found as the dynamic loader
//! would, inside a root, without running them.

use std::path::PathBuf;

use composer::error::Result;
use composer::resolve::elf::{self, BinaryRequest, DlopenLevel, ElfOptions, Hwcaps};

use super::ui;

#[derive(clap::Args, Debug)]
#[command(after_help = "Example:\n  composer deps --root / sh mount")]
pub struct Args {
    /// Programs by name (looked up on the search path) or path, inside the root.
    #[arg(value_name = "PROGRAM", required = true)]
    pub programs: Vec<PathBuf>,
    /// Look everything up inside this directory.
    #[arg(long, value_name = "DIR", default_value = "/")]
    pub root: PathBuf,
    /// Also take the glibc-hwcaps variants this CPU supports.
    #[arg(long)]
    pub hwcaps: bool,
    /// `.note.dlopen` dependencies: none, required, recommended, suggested.
    #[arg(long, value_name = "LEVEL", value_enum, default_value = "recommended")]
    pub dlopen: DlopenLevel,
    /// Print JSON: `{paths: [...], warnings: [...]}` (warnings also on stderr).
    #[arg(long)]
    pub json: bool,
}

pub fn exec(a: Args) -> Result<()> {
    let mut opts = ElfOptions::new(&a.root);
    if a.hwcaps {
        opts.hwcaps = Hwcaps::Host;
    }
    opts.dlopen = a.dlopen;
    let requests: Vec<BinaryRequest> = a.programs.iter().map(BinaryRequest::program).collect();
    let res = elf::resolve(&requests, &opts)?;
    ui::warnings(&res.warnings);
    if a.json {
        let paths: Vec<String> = res.paths().map(|p| p.display().to_string()).collect();
        let warnings: Vec<String> = res.warnings.iter().map(|w| w.to_string()).collect();
        return ui::print(&ui::json_text(&serde_json::json!({
            "paths": paths,
            "warnings": warnings,
        })));
    }
    let mut text = String::new();
    for p in res.paths() {
        text.push_str(&p.display().to_string());
        text.push('\n');
    }
    ui::print(&text)
}

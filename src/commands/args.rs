//! Arguments several subcommands share, and their typed value parsers.

use std::path::PathBuf;

use composer::error::Error;
use composer::manifest::LoadOptions;
use composer::policy::{self, AlignMode, Overrides};

/// clap's value parser for `-t`: the library's, with its message and hint.
pub fn mtime(text: &str) -> Result<u32, String> {
    policy::parse_mtime(text).map_err(message)
}

/// clap's value parser for `-a`.
pub fn align(text: &str) -> Result<u32, String> {
    policy::parse_align(text).map_err(message)
}

/// clap's value parser for `--set NAME=VALUE`.
pub fn assignment(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((k, v)) => Ok((k.to_string(), v.to_string())),
        None => Err(message(
            Error::usage(format!("--set `{text}` is not NAME=VALUE"))
                .with_hint("e.g. --set flavour=generic"),
        )),
    }
}

/// An error as clap shows a value parser's: the message, and the hint on
/// its own line.
fn message(e: Error) -> String {
    match e.hint() {
        Some(h) => format!("{e}\n  hint: {h}"),
        None => e.to_string(),
    }
}

/// What an image is made from: a manifest, or a gen_init_cpio list.
#[derive(clap::Args, Debug)]
pub struct Input {
    /// The manifest (.toml, .yaml or .yml). Without one: the system
    /// configuration (/etc/composer/initrd.toml and the drop-ins of
    /// /usr/lib/composer/initrd.d and /etc/composer/initrd.d, inside the
    /// root), else the generic profile.
    #[arg(value_name = "MANIFEST", conflicts_with = "list")]
    pub manifest: Option<PathBuf>,
    /// A gen_init_cpio list instead (`-` for standard input).
    #[arg(long, value_name = "LIST")]
    pub list: Option<PathBuf>,
}

/// Options shared by every command that writes an archive.
#[derive(clap::Args, Debug)]
pub struct ArchiveArgs {
    /// mtime (seconds since the epoch) for every entry, files included.
    /// Without it, files keep their source's mtime and other entries get
    /// SOURCE_DATE_EPOCH if set (build only), else the current time.
    #[arg(short = 't', value_name = "MTIME", allow_hyphen_values = true, value_parser = mtime)]
    pub mtime: Option<u32>,
    /// Write 070702 headers with 32-bit data checksums.
    #[arg(short = 'c')]
    pub crc: bool,
    /// Align the data of files larger than ALIGN bytes to ALIGN (a power of
    /// two, or 0 for none).
    #[arg(short = 'a', long = "data-align", value_name = "ALIGN", value_parser = align)]
    pub align: Option<u32>,
    /// How to reach alignment: `readers` (reorder and pad names so that
    /// every reader extracts the archive; the default for manifests),
    /// `kernel-only` (NUL runs between entries, which only the kernel
    /// accepts), or `gen-init-cpio` (its rule: pad only the file's own name,
    /// keep the order, miss past PATH_MAX; the default for lists).
    #[arg(long, value_enum, value_name = "MODE")]
    pub align_mode: Option<AlignMode>,
    /// Read the list exactly as gen_init_cpio does, traps included.
    #[arg(long)]
    pub compat: bool,
    /// Do not fsync the archive before renaming it into place.
    #[arg(long)]
    pub no_sync: bool,
    /// Copy file data through memory instead of sharing it with the sources
    /// (on XFS and Btrfs copy_file_range clones aligned data; later writes to
    /// a shared image or source then pay copy-on-write).
    #[arg(long)]
    pub no_reflink: bool,
}

impl ArchiveArgs {
    pub fn overrides(&self) -> Overrides {
        Overrides {
            mtime: self.mtime,
            align: self.align,
            crc: self.crc,
            mode: self.align_mode,
            no_reflink: self.no_reflink,
        }
    }
}

/// Options for reading a manifest.
#[derive(clap::Args, Debug, Default)]
pub struct ManifestArgs {
    /// Kernel version for `${kver}` (default: the running kernel's).
    #[arg(long, value_name = "VERSION")]
    pub kver: Option<String>,
    /// Set a variable for `${NAME}` (repeatable).
    #[arg(long = "set", value_name = "NAME=VALUE", value_parser = assignment)]
    pub set: Vec<(String, String)>,
    /// Source root: look up every source path inside this directory (and
    /// read the system configuration and profiles there).
    #[arg(long, value_name = "DIR")]
    pub root: Option<PathBuf>,
    /// The kernel's module tree, when it is not the root's
    /// lib/modules/VERSION (as dracut's --kmoddir).
    #[arg(long, value_name = "DIR")]
    pub kmoddir: Option<PathBuf>,
    /// Read a profile (generic, hostonly, ...) before the manifest
    /// (repeatable).
    #[arg(long = "profile", value_name = "NAME")]
    pub profiles: Vec<String>,
}

impl ManifestArgs {
    pub fn load_options(&self) -> LoadOptions {
        LoadOptions {
            kver: self.kver.clone(),
            set: self.set.clone(),
            root: self.root.clone(),
            kmoddir: self.kmoddir.clone(),
            profiles: self.profiles.clone(),
            dropins: Vec::new(),
        }
    }
}

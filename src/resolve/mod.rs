//! Resolve: turn what the user named into facts read from the filesystem.
//!
//! Input: entries whose file sources are paths. Output: the same entries
//! with each source's size and mtime filled in, or an error naming the line
//! that brought the source in.

pub mod elf;
pub mod kmod;
pub mod root;
pub mod sysroot;
pub mod systemd;

use std::io::ErrorKind;

use std::path::Path;

use crate::entry::{Entry, Kind, Origin, Source};
use crate::error::{Error, Result};

/// The largest file a newc header can describe (its size field is 32 bits).
pub const MAX_FILE_SIZE: u64 = u32::MAX as u64;

/// A source's metadata as the writer will see it, and whether the path
/// itself is a symlink: one lstat, and a stat through the link only for a
/// symlink.
pub struct Stat {
    pub meta: std::fs::Metadata,
    /// The path is not a symlink (the writer opens it with O_NOFOLLOW).
    pub nofollow: bool,
}

pub fn stat(path: &Path) -> std::io::Result<Stat> {
    let meta = std::fs::symlink_metadata(path)?;
    if meta.file_type().is_symlink() {
        return Ok(Stat {
            meta: std::fs::metadata(path)?,
            nofollow: false,
        });
    }
    Ok(Stat {
        meta,
        nofollow: true,
    })
}

/// Opens and stats every file source. `compat` accepts any non-directory
/// that opens, as gen_init_cpio does; otherwise a source must be a regular
/// file.
pub fn stat_sources(entries: &mut [Entry], compat: bool) -> Result<()> {
    for e in entries.iter_mut() {
        let Kind::File { source, .. } = &mut e.kind else {
            continue;
        };
        let shown = source.path.display().to_string();
        // stat, not open: the writer opens each file once, when it copies it.
        let opened = stat(&source.path);
        let st = match opened {
            Ok(m) => m,
            Err(err) => {
                let (what, hint) = match err.kind() {
                    ErrorKind::NotFound => {
                        ("does not exist", "check the path, or the variables it uses")
                    }
                    ErrorKind::PermissionDenied => (
                        "cannot be read (permission denied)",
                        "run as a user that may read it, or fix its mode",
                    ),
                    _ => ("cannot be opened", "check the path"),
                };
                return Err(
                    Error::at(e.origin.clone(), format!("source `{shown}` {what}: {err}"))
                        .with_hint(hint),
                );
            }
        };
        if st.meta.is_dir() {
            return Err(Error::at(
                e.origin.clone(),
                format!("source `{shown}` is a directory, not a file"),
            )
            .with_hint(
                "use a `dir` line for directories (a manifest `tree` copies their content)",
            ));
        }
        if !compat && !st.meta.is_file() {
            return Err(Error::at(
                e.origin.clone(),
                format!("source `{shown}` is not a regular file"),
            )
            .with_hint("use `nod`, `pipe` or `sock` lines for special files"));
        }
        **source = file_source(&source.path, &st, &e.origin)?;
    }
    Ok(())
}

/// The source of a regular file as stat found it; a file too large for a
/// newc header is an error at `origin`.
pub fn file_source(path: &Path, stat: &Stat, origin: &Origin) -> Result<Source> {
    let meta = &stat.meta;
    if meta.len() > MAX_FILE_SIZE {
        return Err(Error::at(
            origin.clone(),
            format!(
                "source `{}` is {} bytes; a newc archive cannot hold files of 4 GiB or more",
                path.display(),
                meta.len()
            ),
        )
        .with_hint("leave it out of the initramfs, or split it"));
    }
    Ok(Source::new(path.to_path_buf(), meta, stat.nofollow))
}

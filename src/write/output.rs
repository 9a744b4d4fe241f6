//! Atomic output: the archive is written to a temporary file in the target's
//! directory and renamed into place only after it is complete (and synced).
//! On any failure the temporary file is removed and an existing output is
//! left as it was. A stream (standard output, opened by the caller) is
//! written in place.

use std::fs::File;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

pub enum Output {
    /// A stream the caller opened (standard output), written in order.
    Stream { file: File, name: String },
    Atomic {
        temp: tempfile::NamedTempFile,
        target: PathBuf,
    },
}

impl Output {
    /// Writes to an open stream; `name` names it in messages.
    pub fn stream(file: File, name: &str) -> Output {
        Output::Stream {
            file,
            name: name.to_string(),
        }
    }

    /// Opens `target` for writing, through a temporary file beside it.
    pub fn create(target: &Path) -> Result<Output> {
        let dir = match target.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        if target.is_dir() {
            return Err(
                Error::usage(format!("output `{}` is a directory", target.display()))
                    .with_hint("name the archive file, e.g. -o initrd.img"),
            );
        }
        if !dir.is_dir() {
            return Err(Error::usage(format!(
                "the output directory `{}` does not exist",
                dir.display()
            ))
            .with_hint("create it first, or choose another -o path"));
        }
        let temp = tempfile::Builder::new()
            .prefix(".composer-")
            .suffix(".tmp")
            .tempfile_in(&dir)
            .map_err(|e| Error::io(&dir, e))?;
        Ok(Output::Atomic {
            temp,
            target: target.to_path_buf(),
        })
    }

    pub fn file(&self) -> &File {
        match self {
            Output::Stream { file, .. } => file,
            Output::Atomic { temp, .. } => temp.as_file(),
        }
    }

    /// A name for messages.
    pub fn name(&self) -> String {
        match self {
            Output::Stream { name, .. } => name.clone(),
            Output::Atomic { target, .. } => target.display().to_string(),
        }
    }

    /// Makes the output visible: syncs (when `sync`), renames into place,
    /// and syncs the directory so the rename itself is durable.
    pub fn commit(self, sync: bool) -> Result<()> {
        match self {
            Output::Stream { file, name } => {
                // fsync on a pipe or terminal fails with EINVAL; that is fine.
                if sync && file.metadata().map(|m| m.is_file()).unwrap_or(false) {
                    file.sync_all().map_err(|e| Error::io(name, e))?;
                }
                Ok(())
            }
            Output::Atomic { temp, target } => {
                if sync {
                    temp.as_file()
                        .sync_all()
                        .map_err(|e| Error::io(&target, e))?;
                }
                temp.persist(&target)
                    .map_err(|e| Error::io(&target, e.error))?;
                if sync {
                    let dir = match target.parent() {
                        Some(p) if !p.as_os_str().is_empty() => p,
                        _ => Path::new("."),
                    };
                    File::open(dir)
                        .and_then(|d| d.sync_all())
                        .map_err(|e| Error::io(dir, e))?;
                }
                Ok(())
            }
        }
    }
}

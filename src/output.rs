//! Atomic output: the archive is written to a temporary file in the target's
//! directory and renamed into place only after it is complete (and synced).
//! On any failure the temporary file is removed and an existing output is
//! left as it was. `-` means standard output.

use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

pub enum Output {
    Stdout(File),
    Atomic {
        temp: tempfile::NamedTempFile,
        target: PathBuf,
    },
}

impl Output {
    /// Opens `target` for writing; `-` is standard output.
    pub fn create(target: &Path) -> Result<Output> {
        if target == Path::new("-") {
            let fd = io::stdout()
                .as_fd()
                .try_clone_to_owned()
                .map_err(|e| Error::io("<stdout>", e))?;
            return Ok(Output::Stdout(File::from(fd)));
        }
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
            Output::Stdout(f) => f,
            Output::Atomic { temp, .. } => temp.as_file(),
        }
    }

    /// A name for messages.
    pub fn name(&self) -> String {
        match self {
            Output::Stdout(_) => "<stdout>".into(),
            Output::Atomic { target, .. } => target.display().to_string(),
        }
    }

    /// Makes the output visible: syncs (when `sync`), renames into place,
    /// and syncs the directory so the rename itself is durable.
    pub fn commit(self, sync: bool) -> Result<()> {
        match self {
            Output::Stdout(f) => {
                // fsync on a pipe or terminal fails with EINVAL; that is fine.
                if sync && f.metadata().map(|m| m.is_file()).unwrap_or(false) {
                    f.sync_all().map_err(|e| Error::io("<stdout>", e))?;
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

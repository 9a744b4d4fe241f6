//! Why a module tree cannot be used.

use std::fmt;
use std::path::PathBuf;

use super::depmod;
use super::index::IndexError;

/// Why a module tree cannot be used.
#[derive(Debug)]
pub enum KmodError {
    /// No `lib/modules/<kver>` directory in the root.
    NoModuleDir {
        kver: String,
        tried: Vec<String>,
    },
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A module file that cannot be read as a module.
    BadModule {
        path: PathBuf,
        message: String,
    },
    Index {
        path: PathBuf,
        error: IndexError,
    },
    Cycle(depmod::CycleError),
}

impl fmt::Display for KmodError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KmodError::NoModuleDir { kver, tried } => write!(
                f,
                "no module directory for kernel {kver} (looked for {})",
                tried.join(" and ")
            ),
            KmodError::Io { path, source } => write!(f, "{}: {source}", path.display()),
            KmodError::BadModule { path, message } => {
                write!(
                    f,
                    "{}: not a readable kernel module: {message}",
                    path.display()
                )
            }
            KmodError::Index { path, error } => write!(f, "{}: {error}", path.display()),
            KmodError::Cycle(c) => c.fmt(f),
        }
    }
}

impl std::error::Error for KmodError {}

impl KmodError {
    /// What the user can do about it.
    pub fn hint(&self) -> &'static str {
        match self {
            KmodError::NoModuleDir { .. } => {
                "pass --kver with a version installed in the root, or set `root` to where its modules are"
            }
            KmodError::Io { .. } => "check that the module tree is readable",
            KmodError::BadModule { .. } => {
                "remove or replace the file; modules must be ELF objects, optionally .xz, .zst or .gz"
            }
            KmodError::Index { .. } => "run depmod for this kernel, or delete its stale modules.*.bin files",
            KmodError::Cycle(_) => "a module tree with dependency cycles cannot be loaded by modprobe either",
        }
    }
}

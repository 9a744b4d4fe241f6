//! What the binary and module rules add to the image before lowering turns
//! it into entries, and the file mode a file without one of its own gets.

use std::os::unix::fs::MetadataExt;

use crate::entry::{Kind, Origin};
use crate::error::Warning;
use crate::manifest::model::{Mode, ModeOrSource};
use crate::resolve::elf::BinaryRequest;

/// A file or symlink a rule adds at `dest` (an image path, not yet
/// normalised).
pub(super) struct Added {
    pub dest: Vec<u8>,
    pub kind: Kind,
    pub mode: u32,
    pub origin: Origin,
}

impl Added {
    /// A file composer generated into `dir` (the cache), at `dest`, 0644.
    pub fn generated(
        dir: &std::path::Path,
        name: &str,
        dest: &str,
        origin: &Origin,
    ) -> crate::error::Result<Added> {
        let host = dir.join(name);
        let meta = std::fs::metadata(&host).map_err(|e| crate::error::Error::io(&host, e))?;
        Ok(Added {
            dest: dest.as_bytes().to_vec(),
            kind: Kind::File {
                source: Box::new(crate::entry::Source::new(host, &meta, true)),
                links: crate::entry::Links::default(),
            },
            mode: 0o644,
            origin: origin.clone(),
        })
    }
}

/// What a section (`[systemd]`, `[stack]`, `[console]`) adds: files and symlinks, and
/// programs to resolve with their libraries.
pub(super) struct Found {
    pub added: Vec<Added>,
    pub programs: Vec<BinaryRequest>,
    pub warnings: Vec<Warning>,
}

/// `defaults.file_mode`: the mode of files that name none.
#[derive(Clone, Copy, Debug)]
pub(super) struct FileModes(pub ModeOrSource);

impl FileModes {
    /// A file's mode: its own, else the default, else its source's bits.
    pub fn of(self, own: Option<Mode>, meta: &std::fs::Metadata) -> u32 {
        match (own, self.0) {
            (Some(m), _) | (None, ModeOrSource::Mode(m)) => m.0,
            (None, ModeOrSource::Source) => meta.mode() & 0o7777,
        }
    }
}

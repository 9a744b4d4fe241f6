//! The entry IR: what gen_init_cpio's list files can say, as typed values.
//!
//! Input: whatever produced it (a legacy list, a manifest). Output: a
//! `Vec<Entry>` that the planner orders and lays out. Names are raw bytes
//! without a leading `/`; nothing here assumes UTF-8.

use std::path::PathBuf;

use crate::bytes::SmallBytes;
use crate::path::ImagePath;

/// `S_IFMT` type bits, as the newc header stores them.
pub const S_IFMT: u32 = 0o170000;
pub const S_IFSOCK: u32 = 0o140000;
pub const S_IFLNK: u32 = 0o120000;
pub const S_IFREG: u32 = 0o100000;
pub const S_IFBLK: u32 = 0o060000;
pub const S_IFDIR: u32 = 0o040000;
pub const S_IFCHR: u32 = 0o020000;
pub const S_IFIFO: u32 = 0o010000;

pub use crate::origin::Origin;
pub use crate::path::PATH_MAX;

/// A per-entry alignment wish for the data of a regular file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum AlignHint {
    /// Whatever the build's default alignment says.
    #[default]
    Default,
    /// Never pad for this entry.
    Never,
    /// Align to 2^n bytes (the power, not the bytes: an entry of a large
    /// image stays small).
    Pow2(u8),
}

impl AlignHint {
    /// Align to `n` bytes, a power of two.
    pub fn bytes(n: u32) -> AlignHint {
        debug_assert!(n.is_power_of_two(), "alignment {n}");
        AlignHint::Pow2(n.trailing_zeros() as u8)
    }

    /// The alignment in bytes, with `default` for [`AlignHint::Default`];
    /// 0 for none.
    pub fn resolve(self, default: u32) -> u32 {
        match self {
            AlignHint::Default => default,
            AlignHint::Never => 0,
            AlignHint::Pow2(n) => 1 << n,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeviceKind {
    Block,
    Char,
}

/// The regular file's source as the resolve step saw it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Source {
    pub path: PathBuf,
    /// Size in bytes, from stat; filled in by [`crate::resolve::stat_sources`].
    pub size: u64,
    /// Modification time in seconds since the epoch, from stat.
    pub mtime: i64,
    /// The file's identity when it was stat'ed (device and inode), so that
    /// the writer can tell it opened the same file.
    pub dev: u64,
    pub ino: u64,
    /// The path itself was not a symlink: open it with O_NOFOLLOW.
    pub nofollow: bool,
}

impl Source {
    pub fn unresolved(path: PathBuf) -> Self {
        Source {
            path,
            size: 0,
            mtime: 0,
            dev: 0,
            ino: 0,
            nofollow: false,
        }
    }

    /// The source as `meta` (a stat of `path`, following a symlink)
    /// describes it.
    pub fn from_metadata(path: PathBuf, meta: &std::fs::Metadata) -> Self {
        let nofollow = std::fs::symlink_metadata(&path).is_ok_and(|m| !m.file_type().is_symlink());
        Source::new(path, meta, nofollow)
    }

    /// The source as `meta` describes it; `nofollow`: `path` itself is not
    /// a symlink (the caller's lstat said so).
    pub fn new(mut path: PathBuf, meta: &std::fs::Metadata, nofollow: bool) -> Self {
        use std::os::unix::fs::MetadataExt;
        // Held until the image is written, one per file: no spare capacity.
        path.shrink_to_fit();
        Source {
            path,
            size: meta.len(),
            mtime: meta.mtime(),
            dev: meta.dev(),
            ino: meta.ino(),
            nofollow,
        }
    }
}

/// Further names of a file (its hardlinks). Almost every file has none,
/// so they take one word (a thin pointer, hence the box around the
/// vector), and an allocation only when there are some.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
#[allow(clippy::box_collection)]
pub struct Links(Option<Box<Vec<ImagePath>>>);

impl Links {
    pub fn push(&mut self, name: ImagePath) {
        self.0.get_or_insert_with(Default::default).push(name);
    }
}

impl From<Vec<ImagePath>> for Links {
    fn from(names: Vec<ImagePath>) -> Links {
        Links((!names.is_empty()).then(|| Box::new(names)))
    }
}

impl std::ops::Deref for Links {
    type Target = [ImagePath];

    fn deref(&self) -> &[ImagePath] {
        self.0.as_deref().map_or(&[], Vec::as_slice)
    }
}

impl<'a> IntoIterator for &'a Links {
    type Item = &'a ImagePath;
    type IntoIter = std::slice::Iter<'a, ImagePath>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A regular file. `links` are further names of the same inode; as in
    /// gen_init_cpio the data goes on the last name written.
    File {
        /// Boxed: most entries of a large image are not files, and every
        /// entry is as large as the largest kind.
        source: Box<Source>,
        links: Links,
    },
    Dir,
    Symlink {
        target: SmallBytes,
    },
    Node {
        kind: DeviceKind,
        major: u32,
        minor: u32,
    },
    Pipe,
    Socket,
}

impl Kind {
    /// The `S_IFMT` bits of this kind.
    pub fn type_bits(&self) -> u32 {
        match self {
            Kind::File { .. } => S_IFREG,
            Kind::Dir => S_IFDIR,
            Kind::Symlink { .. } => S_IFLNK,
            Kind::Node {
                kind: DeviceKind::Block,
                ..
            } => S_IFBLK,
            Kind::Node {
                kind: DeviceKind::Char,
                ..
            } => S_IFCHR,
            Kind::Pipe => S_IFIFO,
            Kind::Socket => S_IFSOCK,
        }
    }

    /// The keyword a legacy list uses for this kind.
    pub fn keyword(&self) -> &'static str {
        match self {
            Kind::File { .. } => "file",
            Kind::Dir => "dir",
            Kind::Symlink { .. } => "slink",
            Kind::Node { .. } => "nod",
            Kind::Pipe => "pipe",
            Kind::Socket => "sock",
        }
    }
}

/// One gen_init_cpio-level entry.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Entry {
    /// The archive name, without a leading `/`.
    pub name: ImagePath,
    pub kind: Kind,
    /// Permission bits as given. Legacy lists may carry extra bits; the
    /// writer ORs the kind's type bits in, as gen_init_cpio does.
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    /// An explicit mtime; `None` follows the build's mtime policy.
    pub mtime: Option<u32>,
    pub align: AlignHint,
    pub origin: Origin,
}

impl Entry {
    pub fn new(name: ImagePath, kind: Kind, mode: u32, origin: Origin) -> Self {
        Entry {
            name,
            kind,
            mode,
            uid: 0,
            gid: 0,
            mtime: None,
            align: AlignHint::Default,
            origin,
        }
    }

    /// The full mode field: permission bits with the kind's type bits.
    pub fn mode_field(&self) -> u32 {
        self.mode | self.kind.type_bits()
    }

    /// Every name this entry is written under, in archive order.
    pub fn names(&self) -> impl Iterator<Item = &[u8]> {
        let links: &[ImagePath] = match &self.kind {
            Kind::File { links, .. } => links,
            _ => &[],
        };
        std::iter::once(self.name.as_bytes()).chain(links.iter().map(ImagePath::as_bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An image of many entries holds them all: keep each one small (a
    /// file's source is boxed for this).
    #[test]
    fn an_entry_stays_small() {
        let size = std::mem::size_of::<Entry>();
        assert!(size <= 88, "an Entry is {size} bytes");
        assert!(
            std::mem::size_of::<Kind>() <= 24,
            "{}",
            std::mem::size_of::<Kind>()
        );
    }
}

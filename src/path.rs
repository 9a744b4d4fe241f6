//! Paths inside the image: what a name may be, its parents, and how it is
//! shown.
//!
//! An [`ImagePath`] is an archive name as the newc header stores it: bytes
//! (not necessarily UTF-8), no leading `/`, no NUL, at most
//! [`PATH_MAX`] - 1 bytes so that namesize fits the kernel's limit. The
//! constructors are the only place these rules are checked: a list name
//! keeps its bytes as written ([`ImagePath::list`], as gen_init_cpio does),
//! a manifest path is normalised ([`ImagePath::normalise`]).

use std::borrow::Borrow;
use std::fmt;
use std::ops::Deref;

use crate::bytes::SmallBytes;
use crate::error::{Error, Result};
use crate::origin::Origin;

/// The longest name field the kernel unpacks: namesize (name + NUL + padding)
/// must not exceed PATH_MAX.
pub const PATH_MAX: usize = 4096;

/// A valid archive name (see the module documentation). The empty path is
/// the image's root, which only a normalised manifest path can be.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ImagePath(SmallBytes);

impl ImagePath {
    /// A name of a gen_init_cpio list: one leading `/` dropped, the rest
    /// kept byte for byte. Empty names, `..` components, NUL bytes and
    /// names the kernel would skip are errors at `origin`.
    pub fn list(raw: &[u8], origin: &Origin) -> Result<ImagePath> {
        let name = raw.strip_prefix(b"/").unwrap_or(raw);
        if name.is_empty() {
            return Err(Error::at(origin.clone(), "empty name")
                .with_hint("name the entry inside the archive, e.g. /bin"));
        }
        check(name, origin, "name")?;
        if name.split(|&b| b == b'/').any(|c| c == b"..") {
            return Err(Error::at(
                origin.clone(),
                format!("`{}` contains a `..` component", escape(raw)),
            )
            .with_hint("archive names must stay inside the image's root"));
        }
        Ok(ImagePath(name.into()))
    }

    /// A name as the kernel's gen_init_cpio takes it (`--compat`): one
    /// leading `/` dropped, nothing else checked. The C reader it copies
    /// cannot see a NUL, so none is there.
    pub fn compat(raw: &[u8]) -> ImagePath {
        ImagePath(raw.strip_prefix(b"/").unwrap_or(raw).into())
    }

    /// A manifest path: leading `/`, empty and `.` components dropped,
    /// `..` resolved; leaving the image with `..`, a NUL byte or a name the
    /// kernel would skip is an error at `origin`. `/` is the root (empty).
    pub fn normalise(raw: &[u8], origin: &Origin) -> Result<ImagePath> {
        let mut parts: Vec<&[u8]> = Vec::new();
        for c in raw.split(|&b| b == b'/') {
            match c {
                b"" | b"." => {}
                b".." => {
                    if parts.pop().is_none() {
                        return Err(Error::at(
                            origin.clone(),
                            format!("`{}` leaves the image root with `..`", escape(raw)),
                        )
                        .with_hint("image paths must stay inside the image"));
                    }
                }
                _ => parts.push(c),
            }
        }
        let out = parts.join(&b'/');
        check(&out, origin, "image path")?;
        Ok(ImagePath(out.into()))
    }

    /// A path already in normal form (made from normalised parts), checked
    /// again for what joining the parts can break: its length.
    pub(crate) fn checked(name: Vec<u8>, origin: &Origin) -> Result<ImagePath> {
        check(&name, origin, "image path")?;
        Ok(ImagePath(name.into()))
    }

    /// A name composer makes itself from parts it has checked (the early
    /// segment's directories, module metadata files).
    pub(crate) fn generated(name: impl Into<Vec<u8>>) -> ImagePath {
        let name = name.into();
        debug_assert!(!name.contains(&0) && name.len() < PATH_MAX && !name.starts_with(b"/"));
        ImagePath(name.into())
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    pub fn into_bytes(self) -> Vec<u8> {
        self.0.into_vec()
    }

    /// The image's root (a normalised `/`).
    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }

    /// This path with `name` (a checked relative path) appended.
    pub fn join(&self, name: &[u8], origin: &Origin) -> Result<ImagePath> {
        let mut p = self.0.to_vec();
        if !p.is_empty() {
            p.push(b'/');
        }
        p.extend_from_slice(name);
        check(&p, origin, "image path")?;
        Ok(ImagePath(p.into()))
    }

    /// The directory this path is in; None at the top level.
    pub fn parent(&self) -> Option<&[u8]> {
        parent(&self.0)
    }
}

/// The directory `name` is in (`a/b/c` -> `a/b`); None at the top level.
pub fn parent(name: &[u8]) -> Option<&[u8]> {
    name.iter().rposition(|&b| b == b'/').map(|i| &name[..i])
}

/// Every directory above `name`, nearest first (`a/b/c` -> `a/b`, `a`).
pub fn ancestors(name: &[u8]) -> impl Iterator<Item = &[u8]> {
    std::iter::successors(parent(name), |p| parent(p))
}

fn check(name: &[u8], origin: &Origin, what: &str) -> Result<()> {
    if let Some(at) = name.iter().position(|&b| b == 0) {
        return Err(Error::at(
            origin.clone(),
            format!(
                "{what} `{}` has a NUL byte at byte {}; the archive ends a name at its first NUL",
                escape(name),
                at + 1
            ),
        )
        .with_hint("remove the NUL (written \\u0000 or \\x00) from the path"));
    }
    if name.len() + 1 > PATH_MAX {
        return Err(Error::at(
            origin.clone(),
            format!(
                "{what} of {} bytes; the kernel skips names longer than {} bytes",
                name.len(),
                PATH_MAX - 1
            ),
        ));
    }
    Ok(())
}

impl Deref for ImagePath {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl AsRef<[u8]> for ImagePath {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl Borrow<[u8]> for ImagePath {
    fn borrow(&self) -> &[u8] {
        &self.0
    }
}

impl PartialEq<[u8]> for ImagePath {
    fn eq(&self, other: &[u8]) -> bool {
        *self.0 == *other
    }
}

impl<const N: usize> PartialEq<[u8; N]> for ImagePath {
    fn eq(&self, other: &[u8; N]) -> bool {
        *self.0 == other[..]
    }
}

impl<const N: usize> PartialEq<&[u8; N]> for ImagePath {
    fn eq(&self, other: &&[u8; N]) -> bool {
        *self.0 == other[..]
    }
}

impl PartialEq<Vec<u8>> for ImagePath {
    fn eq(&self, other: &Vec<u8>) -> bool {
        *self.0 == **other
    }
}

impl fmt::Display for ImagePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&escape(&self.0))
    }
}

/// A name for people and for line-based output: valid UTF-8 stays, a
/// backslash becomes `\\`, control characters and bytes that are not
/// UTF-8 become `\xHH`. The same escapes a manifest reads in
/// `{ escaped = '...' }`, so the text is lossless. Every message and
/// listing shows names this way.
pub fn escape(name: &[u8]) -> String {
    let mut out = String::with_capacity(name.len());
    for chunk in name.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                c if c.is_control() => {
                    let mut b = [0u8; 4];
                    for byte in c.encode_utf8(&mut b).bytes() {
                        out.push_str(&format!("\\x{byte:02x}"));
                    }
                }
                c => out.push(c),
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_names_stay_as_written() {
        let o = Origin::default();
        assert_eq!(
            ImagePath::list(b"/a//b/./c", &o).unwrap().as_bytes(),
            b"a//b/./c"
        );
        assert!(ImagePath::list(b"/", &o).is_err());
        assert!(ImagePath::list(b"a/../b", &o).is_err());
        assert!(ImagePath::list(b"a\0b", &o).is_err());
        assert!(ImagePath::list(&[b'x'; 4096], &o).is_err());
        assert!(ImagePath::list(&[b'x'; 4095], &o).is_ok());
    }

    #[test]
    fn manifest_paths_are_normalised() {
        let o = Origin::default();
        assert_eq!(
            ImagePath::normalise(b"//a/./b/../c/", &o)
                .unwrap()
                .as_bytes(),
            b"a/c"
        );
        assert!(ImagePath::normalise(b"/", &o).unwrap().is_root());
        assert!(ImagePath::normalise(b"/a/../..", &o).is_err());
        let nul = ImagePath::normalise(b"/init\0x", &o)
            .unwrap_err()
            .to_string();
        assert!(nul.contains("NUL byte at byte 5"), "{nul}");
    }

    #[test]
    fn parents_and_escapes() {
        assert_eq!(parent(b"a/b/c"), Some(&b"a/b"[..]));
        assert_eq!(parent(b"a"), None);
        let all: Vec<&[u8]> = ancestors(b"a/b/c").collect();
        assert_eq!(all, [&b"a/b"[..], b"a"]);
        assert_eq!(escape("é\\\n\u{7f}".as_bytes()), "é\\\\\\x0a\\x7f");
        assert_eq!(escape(b"\xff"), "\\xff");
    }
}

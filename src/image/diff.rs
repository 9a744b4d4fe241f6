//! `composer diff`: what differs between two images, entry by entry.
//!
//! Input: two [`Image`]s. Output: [`Change`]s in path order. Each image is
//! first reduced to what it unpacks to: the last entry of a path wins (as
//! when the kernel unpacks over an earlier entry), entries the kernel skips
//! are left out, and the members of a hardlink group share the data of the
//! member that carries it.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::inspect::{target, type_name};
use super::Image;
use crate::entry::{S_IFBLK, S_IFCHR, S_IFLNK, S_IFMT, S_IFREG};
use crate::path::escape;

/// What a path's data is, as far as a comparison needs: a file's size and
/// digest, a symlink's target.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Data<'a> {
    File { size: u64, digest: Option<u64> },
    Target(&'a [u8]),
}

impl Data<'_> {
    fn len(&self) -> u64 {
        match self {
            Data::File { size, .. } => *size,
            Data::Target(t) => t.len() as u64,
        }
    }
}

/// What one path holds after unpacking.
#[derive(Clone, Debug, PartialEq, Eq)]
struct State<'a> {
    mode: u32,
    uid: u32,
    gid: u32,
    mtime: u32,
    rdev: (u32, u32),
    data: Data<'a>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    Added { name: Vec<u8>, kind: &'static str },
    Removed { name: Vec<u8>, kind: &'static str },
    Changed { name: Vec<u8>, what: Vec<String> },
}

impl Change {
    pub fn render(&self) -> String {
        match self {
            Change::Added { name, kind } => format!("+ {kind:<7} {}", escape(name)),
            Change::Removed { name, kind } => format!("- {kind:<7} {}", escape(name)),
            Change::Changed { name, what } => {
                format!("~ {}: {}", escape(name), what.join(", "))
            }
        }
    }
}

/// A name as a path: no leading `/`, no `.` or empty components.
fn normal(name: &[u8]) -> Vec<u8> {
    name.split(|&b| b == b'/')
        .filter(|c| !c.is_empty() && *c != b".")
        .collect::<Vec<_>>()
        .join(&b'/')
}

/// What each path of an image holds after unpacking. File contents are
/// compared by digest: the image must be read with [`Digests::All`].
///
/// [`Digests::All`]: super::Digests::All
fn states(image: &Image) -> BTreeMap<Vec<u8>, State<'_>> {
    let mut out = BTreeMap::new();
    for seg in &image.segments {
        // Hardlink groups of this segment: the data carried by any member.
        let mut group_data: HashMap<(u32, u32, u32, u32), Data> = HashMap::new();
        for e in seg.entries.iter().filter(|e| e.skip.is_none()) {
            let h = &e.header;
            if h.nlink >= 2 && e.is_regular() && h.filesize > 0 {
                group_data.insert(
                    (h.devmajor, h.devminor, h.ino, h.mode & S_IFMT),
                    Data::File {
                        size: h.filesize as u64,
                        digest: e.digest,
                    },
                );
            }
        }
        for e in &seg.entries {
            if e.skip.is_some() || e.is_trailer() {
                continue;
            }
            let h = &e.header;
            let mut data = if e.is_symlink() {
                Data::Target(target(e))
            } else {
                Data::File {
                    size: if e.is_regular() { h.filesize as u64 } else { 0 },
                    digest: e.digest,
                }
            };
            if e.is_regular() && h.nlink >= 2 {
                if let Some(d) = group_data.get(&(h.devmajor, h.devminor, h.ino, h.mode & S_IFMT)) {
                    data = d.clone();
                }
            }
            out.insert(
                normal(&e.name),
                State {
                    mode: h.mode,
                    uid: h.uid,
                    gid: h.gid,
                    mtime: h.mtime,
                    rdev: (h.rdevmajor, h.rdevminor),
                    data,
                },
            );
        }
    }
    out
}

/// Compares two images; `mtimes` also reports differing mtimes.
pub fn diff(a: &Image, b: &Image, mtimes: bool) -> Vec<Change> {
    let sa = states(a);
    let sb = states(b);
    let names: BTreeSet<&Vec<u8>> = sa.keys().chain(sb.keys()).collect();
    let mut changes = Vec::new();
    for name in names {
        match (sa.get(name), sb.get(name)) {
            (Some(x), None) => changes.push(Change::Removed {
                name: name.clone(),
                kind: type_name(x.mode),
            }),
            (None, Some(y)) => changes.push(Change::Added {
                name: name.clone(),
                kind: type_name(y.mode),
            }),
            (Some(x), Some(y)) => {
                let what = compare(x, y, mtimes);
                if !what.is_empty() {
                    changes.push(Change::Changed {
                        name: name.clone(),
                        what,
                    });
                }
            }
            (None, None) => {}
        }
    }
    changes
}

fn compare(x: &State, y: &State, mtimes: bool) -> Vec<String> {
    let mut what = Vec::new();
    let (tx, ty) = (x.mode & S_IFMT, y.mode & S_IFMT);
    if tx != ty {
        what.push(format!(
            "type {} -> {}",
            type_name(x.mode),
            type_name(y.mode)
        ));
    } else {
        match tx {
            S_IFREG if x.data != y.data => {
                if x.data.len() == y.data.len() {
                    what.push(format!("content ({} bytes, different)", x.data.len()));
                } else {
                    what.push(format!(
                        "content ({} -> {} bytes)",
                        x.data.len(),
                        y.data.len()
                    ));
                }
            }
            S_IFLNK if x.data != y.data => {
                let t = |d: &Data| match d {
                    Data::Target(t) => escape(t),
                    Data::File { .. } => String::new(),
                };
                what.push(format!("target {} -> {}", t(&x.data), t(&y.data)))
            }
            S_IFCHR | S_IFBLK if x.rdev != y.rdev => what.push(format!(
                "device {}:{} -> {}:{}",
                x.rdev.0, x.rdev.1, y.rdev.0, y.rdev.1
            )),
            _ => {}
        }
    }
    if x.mode & 0o7777 != y.mode & 0o7777 && tx != S_IFLNK {
        what.push(format!(
            "mode {:04o} -> {:04o}",
            x.mode & 0o7777,
            y.mode & 0o7777
        ));
    }
    if (x.uid, x.gid) != (y.uid, y.gid) {
        what.push(format!("owner {}:{} -> {}:{}", x.uid, x.gid, y.uid, y.gid));
    }
    if mtimes && x.mtime != y.mtime {
        what.push(format!("mtime {} -> {}", x.mtime, y.mtime));
    }
    what
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpio::Header;

    fn image(entries: &[(&str, u32, u32, &[u8])]) -> Image {
        let mut out = Vec::new();
        for (i, (name, mode, uid, data)) in entries.iter().enumerate() {
            let h = Header {
                ino: i as u32,
                mode: *mode,
                uid: *uid,
                nlink: 1,
                filesize: data.len() as u32,
                namesize: name.len() as u32 + 1,
                ..Header::default()
            };
            crate::cpio::header::push_entry(&mut out, &h, name.as_bytes(), data);
        }
        Image::from_bytes("t", out)
    }

    #[test]
    fn reports_each_kind_of_change() {
        let a = image(&[
            ("bin", 0o40755, 0, b""),
            ("bin/a", 0o100644, 0, b"one"),
            ("bin/l", 0o120777, 0, b"a"),
            ("gone", 0o100644, 0, b""),
        ]);
        let b = image(&[
            ("bin", 0o40700, 0, b""),
            ("./bin/a", 0o100644, 5, b"two!"),
            ("bin/l", 0o120777, 0, b"b"),
            ("new", 0o40755, 0, b""),
        ]);
        let lines: Vec<String> = diff(&a, &b, false).iter().map(Change::render).collect();
        assert_eq!(
            lines,
            [
                "~ bin: mode 0755 -> 0700",
                "~ bin/a: content (3 -> 4 bytes), owner 0:0 -> 5:0",
                "~ bin/l: target a -> b",
                "- file    gone",
                "+ dir     new",
            ]
        );
        assert!(diff(&a, &a, true).is_empty());
    }
}

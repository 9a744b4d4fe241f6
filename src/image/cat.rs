//! `composer cat`: the content of one file of an image, as the unpacked
//! initramfs would have it (like `lsinitrd -f`).
//!
//! The path is looked up the way the kernel's unpacker leaves the tree: the
//! last entry of a name wins (a later segment overrides an earlier one),
//! symlinks on the way are followed inside the image (at most 40, as the
//! kernel's path walk allows), and a hardlink's name finds the data of its
//! group, which newc carries on the group's last entry.

use std::collections::HashMap;

use super::Image;
use crate::cpio::reader::RawEntry;
use crate::error::{Error, Result};
use crate::path::escape;

/// The limit on symlinks followed in one lookup (the kernel's MAXSYMLINKS).
const MAX_LINKS: usize = 40;

/// The entry that holds the data of `path`: (segment index, entry index in
/// that segment), or `None` for an empty file.
pub fn find(image: &Image, path: &str) -> Result<Option<(usize, usize)>> {
    if let Some(e) = image.fault_error() {
        return Err(e);
    }
    let names = last_entries(image);
    let not_found = |what: String| {
        Error::usage(format!("{}: {what}", image.name))
            .with_hint("`composer inspect IMAGE` lists its entries")
    };
    let entry = |at: (usize, usize)| &image.segments[at.0].entries[at.1];

    // Components still to walk, last first; the resolved prefix.
    let mut todo: Vec<Vec<u8>> = components(path.as_bytes()).into_iter().rev().collect();
    if todo.is_empty() {
        return Err(Error::usage(format!("`{path}` names no file"))
            .with_hint("give the path of a file inside the image, e.g. `etc/os-release`"));
    }
    let mut done: Vec<Vec<u8>> = Vec::new();
    let mut links = 0;
    let mut found = None;
    while let Some(c) = todo.pop() {
        if c == b".." {
            done.pop();
            found = None;
            continue;
        }
        done.push(c);
        let name = done.join(&b'/');
        let Some(&at) = names.get(&name) else {
            return Err(not_found(format!("no `{}` in the image", escape(&name))));
        };
        let e = entry(at);
        if e.is_symlink() {
            links += 1;
            if links > MAX_LINKS {
                return Err(not_found(format!(
                    "too many levels of symbolic links at `{}`",
                    escape(&name)
                )));
            }
            let target = e.link.clone().unwrap_or_default();
            done.pop();
            if target.starts_with(b"/") {
                done.clear();
            }
            todo.extend(components(&target).into_iter().rev());
            found = None;
            continue;
        }
        if !todo.is_empty() && !e.is_dir() {
            return Err(not_found(format!("`{}` is not a directory", escape(&name))));
        }
        found = Some(at);
    }
    let Some(at) = found else {
        return Err(not_found(format!("`{path}` is the image's root directory")));
    };
    let e = entry(at);
    if !e.is_regular() {
        return Err(Error::usage(format!(
            "{}: `{}` is not a regular file",
            image.name,
            escape(&e.name)
        ))
        .with_hint("`composer inspect -l IMAGE` shows each entry's type"));
    }
    if !e.data.is_empty() {
        return Ok(Some(at));
    }
    Ok(hardlink_data(image, at))
}

/// The components of a path, without empty ones and `.`.
fn components(path: &[u8]) -> Vec<Vec<u8>> {
    path.split(|&b| b == b'/')
        .filter(|c| !c.is_empty() && *c != b".")
        .map(<[u8]>::to_vec)
        .collect()
}

/// Every name (normalized) to its last entry the kernel keeps.
fn last_entries(image: &Image) -> HashMap<Vec<u8>, (usize, usize)> {
    let mut names = HashMap::new();
    for seg in &image.segments {
        for (i, e) in seg.entries.iter().enumerate() {
            if e.is_trailer() || e.skip.is_some() {
                continue;
            }
            let name = components(&e.name).join(&b'/');
            if !name.is_empty() {
                names.insert(name, (seg.index, i));
            }
        }
    }
    names
}

/// For an empty entry of a hardlink group, the entry of the same group (same
/// segment, inode and device) that carries the data.
fn hardlink_data(image: &Image, at: (usize, usize)) -> Option<(usize, usize)> {
    let seg = &image.segments[at.0];
    let e = &seg.entries[at.1];
    if e.header.nlink < 2 {
        return None;
    }
    let same = |o: &RawEntry| {
        o.is_regular()
            && o.skip.is_none()
            && o.header.ino == e.header.ino
            && o.header.devmajor == e.header.devmajor
            && o.header.devminor == e.header.devminor
            && !o.data.is_empty()
    };
    seg.entries
        .iter()
        .enumerate()
        .skip(at.1)
        .find(|(_, o)| same(o))
        .map(|(i, _)| (seg.index, i))
}

//! The names of an image as the kernel's unpacked tree has them, with
//! symlinks followed inside the image: what check-boot's layers and the PID 1
//! check look things up in.

use std::collections::HashMap;

use crate::cpio::reader::RawEntry;
use crate::image::Image;

/// The names of an image as the unpacked tree has them (the last entry of
/// a name wins), with symlinks followed inside the image.
pub struct Names<'a> {
    pub(super) entries: HashMap<Vec<u8>, &'a RawEntry>,
}

/// Path components without empty ones and `.`.
pub(super) fn components(path: &[u8]) -> Vec<&[u8]> {
    path.split(|&b| b == b'/')
        .filter(|c| !c.is_empty() && *c != b".")
        .collect()
}

impl<'a> Names<'a> {
    pub fn of(image: &'a Image) -> Names<'a> {
        let mut entries = HashMap::new();
        for (_, e) in image.entries() {
            if e.is_trailer() || e.skip.is_some() {
                continue;
            }
            let name = components(&e.name).join(&b'/');
            if !name.is_empty() {
                entries.insert(name, e);
            }
        }
        Names { entries }
    }

    /// The entry `path` names, symlinks followed (40 at most, as the
    /// kernel's lookup), or None.
    pub fn resolve(&self, path: &str) -> Option<&'a RawEntry> {
        let mut todo: Vec<Vec<u8>> = components(path.as_bytes())
            .into_iter()
            .rev()
            .map(<[u8]>::to_vec)
            .collect();
        let mut done: Vec<Vec<u8>> = Vec::new();
        let mut links = 0;
        let mut found = None;
        while let Some(c) = todo.pop() {
            if c == b".." {
                done.pop();
                continue;
            }
            done.push(c);
            let e = *self.entries.get(&done.join(&b'/'))?;
            if e.is_symlink() {
                links += 1;
                if links > 40 {
                    return None;
                }
                let target = e.link.clone().unwrap_or_default();
                done.pop();
                if target.starts_with(b"/") {
                    done.clear();
                }
                todo.extend(components(&target).into_iter().rev().map(<[u8]>::to_vec));
                continue;
            }
            if !todo.is_empty() && !e.is_dir() {
                return None;
            }
            found = Some(e);
        }
        found
    }

    /// A regular file with an execute bit at `path`.
    pub(super) fn executable(&self, path: &str) -> bool {
        self.resolve(path)
            .is_some_and(|e| e.is_regular() && e.header.mode & 0o111 != 0)
    }

    /// The first of the usual program directories that has `name`.
    pub(super) fn program(&self, name: &str) -> Option<String> {
        ["usr/sbin", "usr/bin", "sbin", "bin"]
            .iter()
            .map(|d| format!("{d}/{name}"))
            .find(|p| self.executable(p))
    }

    /// The kernel versions of the module trees in the image.
    pub fn kernels(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .entries
            .keys()
            .filter_map(|k| {
                let k = std::str::from_utf8(k).ok()?;
                let rest = k
                    .strip_prefix("usr/lib/modules/")
                    .or_else(|| k.strip_prefix("lib/modules/"))?;
                (!rest.contains('/')).then(|| rest.to_string())
            })
            .collect();
        v.sort();
        v.dedup();
        v
    }
}

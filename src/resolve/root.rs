//! A source root (sysroot): every source path is looked up inside it, and
//! symlinks met on the way are followed inside it too (an absolute target
//! starts again at the root, `..` never climbs above it).

use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

/// How many symlinks one lookup may follow, as the kernel's limit.
const MAX_LINKS: usize = 40;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Root {
    path: PathBuf,
}

impl Root {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Root { path: path.into() }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// True when the root is the host's `/`: lookups need no emulation.
    pub fn is_host(&self) -> bool {
        self.path == Path::new("/")
    }

    /// The host path of `inside` (an absolute or root-relative path), without
    /// following any symlink.
    pub fn join(&self, inside: &Path) -> PathBuf {
        let rel = inside.strip_prefix("/").unwrap_or(inside);
        self.path.join(rel)
    }

    /// Resolves `inside` to a host path, following symlinks within the root.
    /// With `follow_last` false the last component is left as it is (for
    /// lstat-like lookups). The result need not exist.
    pub fn resolve(&self, inside: &Path, follow_last: bool) -> io::Result<PathBuf> {
        if self.is_host() {
            let abs = Path::new("/").join(inside);
            return Ok(if follow_last {
                std::fs::canonicalize(&abs).unwrap_or(abs)
            } else {
                abs
            });
        }
        let mut done: Vec<Vec<u8>> = Vec::new();
        let mut todo: Vec<Vec<u8>> = components(inside);
        todo.reverse();
        let mut links = 0;
        while let Some(c) = todo.pop() {
            match c.as_slice() {
                b"." => continue,
                b".." => {
                    done.pop();
                    continue;
                }
                _ => {}
            }
            let last = todo.is_empty();
            let mut candidate = self.path.clone();
            for d in &done {
                candidate.push(OsStr::from_bytes(d));
            }
            candidate.push(OsStr::from_bytes(&c));
            if last && !follow_last {
                done.push(c);
                break;
            }
            match std::fs::read_link(&candidate) {
                Ok(target) => {
                    links += 1;
                    if links > MAX_LINKS {
                        return Err(io::Error::other(format!(
                            "too many levels of symbolic links at {}",
                            candidate.display()
                        )));
                    }
                    if target.is_absolute() {
                        done.clear();
                    }
                    let mut more = components(&target);
                    more.reverse();
                    todo.extend(more);
                }
                Err(_) => done.push(c),
            }
        }
        let mut out = self.path.clone();
        for d in &done {
            out.push(OsStr::from_bytes(d));
        }
        Ok(out)
    }
}

fn components(p: &Path) -> Vec<Vec<u8>> {
    p.components()
        .filter_map(|c| match c {
            Component::Normal(s) => Some(s.as_bytes().to_vec()),
            Component::ParentDir => Some(b"..".to_vec()),
            Component::CurDir | Component::RootDir | Component::Prefix(_) => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn absolute_links_stay_inside() {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        std::fs::create_dir_all(r.join("usr/bin")).unwrap();
        std::fs::write(r.join("usr/bin/sh"), b"x").unwrap();
        symlink("/usr/bin", r.join("bin")).unwrap();
        symlink("../../../../../usr/bin/sh", r.join("usr/bin/dash")).unwrap();
        let root = Root::new(r);
        assert_eq!(
            root.resolve(Path::new("/bin/sh"), true).unwrap(),
            r.join("usr/bin/sh")
        );
        assert_eq!(
            root.resolve(Path::new("/usr/bin/dash"), true).unwrap(),
            r.join("usr/bin/sh")
        );
        assert_eq!(
            root.resolve(Path::new("/bin"), false).unwrap(),
            r.join("bin")
        );
        symlink("loop", r.join("loop")).unwrap();
        assert!(root.resolve(Path::new("/loop"), true).is_err());
    }
}

//! A source root (sysroot) for the manifest: every source path is looked
//! up inside it, and symlinks met on the way are followed inside it too (an
//! absolute target starts again at the root, `..` never climbs above it).
//! The walking itself is [`Sysroot`]'s, shared with ELF resolution.

use std::cell::RefCell;
use std::io;
use std::path::{Path, PathBuf};

use super::sysroot::{Sysroot, WalkError};

pub struct Root {
    path: PathBuf,
    sys: RefCell<Sysroot>,
}

impl std::fmt::Debug for Root {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Root").field("path", &self.path).finish()
    }
}

impl Root {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        let path = path.into();
        Root {
            sys: RefCell::new(Sysroot::new(&path)),
            path,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The host path of `inside` (an absolute or root-relative path), without
    /// following any symlink.
    pub fn join(&self, inside: &Path) -> PathBuf {
        let rel = inside.strip_prefix("/").unwrap_or(inside);
        self.path.join(rel)
    }

    /// Resolves `inside` to a host path, following symlinks within the root.
    /// With `follow_last` false the last component is left as it is (for
    /// lstat-like lookups). A path that does not exist resolves to where it
    /// would be, so that the caller's own lookup reports it.
    ///
    /// The walk to the directory is cached; the last component is looked
    /// at on its own, not cached (a manifest names most files once, and
    /// a cache entry for each would cost more than the file's entry), and
    /// only a symlink there is followed by a cached walk.
    pub fn resolve(&self, inside: &Path, follow_last: bool) -> io::Result<PathBuf> {
        let mut sys = self.sys.borrow_mut();
        let (dir, last) = match (inside.parent(), inside.file_name()) {
            (Some(parent), Some(name)) => (parent, Some(name)),
            _ => (inside, None),
        };
        let loop_error = || {
            io::Error::other(format!(
                "too many levels of symbolic links in {}",
                inside.display()
            ))
        };
        let host = match sys.walk(dir) {
            Ok(w) => sys.host(&w.real),
            Err(WalkError::Loop) => return Err(loop_error()),
            Err(_) => self.join(dir),
        };
        let Some(name) = last else {
            return Ok(host);
        };
        let candidate = host.join(name);
        let link = std::fs::symlink_metadata(&candidate).is_ok_and(|m| m.file_type().is_symlink());
        if !follow_last || !link {
            return Ok(candidate);
        }
        match sys.walk(inside) {
            Ok(w) => Ok(sys.host(&w.real)),
            Err(WalkError::Loop) => Err(loop_error()),
            Err(_) => Ok(candidate),
        }
    }
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
        assert_eq!(
            root.resolve(Path::new("/nope/x"), true).unwrap(),
            r.join("nope/x")
        );
        symlink("loop", r.join("loop")).unwrap();
        assert!(root.resolve(Path::new("/loop"), true).is_err());
    }
}

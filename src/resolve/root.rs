//! A source root (sysroot) for the manifest: every source path is looked
//! up inside it, and symlinks met on the way are followed inside it too (an
//! absolute target starts again at the root, `..` never climbs above it).
//! The walking itself is [`Sysroot`]'s, shared with ELF resolution.

use std::cell::RefCell;
use std::io;
use std::path::{Path, PathBuf};

use super::sysroot::{usr_twin, Sysroot, WalkError};

pub struct Root {
    path: PathBuf,
    sys: RefCell<Sysroot>,
    /// Whether `/lib` is a directory of its own (a root whose /usr is not
    /// merged), read once.
    split_usr: std::cell::OnceCell<bool>,
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
            split_usr: std::cell::OnceCell::new(),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// [`Self::resolve`] for a lookup that only reads metadata or names
    /// (exists, is a file, lstat, read_link, a directory's listing): None
    /// where the root has a symlink loop.
    pub fn host_of(&self, inside: &Path, follow_last: bool) -> Option<PathBuf> {
        self.resolve(inside, follow_last).ok()
    }

    /// Resolves `inside` to a host path, following symlinks within the root.
    /// With `follow_last` false the last component is left as it is (for
    /// lstat-like lookups). A path that does not exist resolves to where it
    /// would be, so that the caller's own lookup reports it: a path whose
    /// lookup on the host fails too, without following a symlink out of
    /// the root ([`Sysroot::locate`]).
    ///
    /// The walk to the directory is cached; the last component is looked
    /// at on its own, not cached (a manifest names most files once, and
    /// a cache entry for each would cost more than the file's entry), and
    /// only a symlink there is followed by a cached walk.
    ///
    /// On a root whose /usr is not merged (Debian's extracted roots, older
    /// installs), a path under `/usr/lib`, `/usr/bin`, `/usr/sbin` the root
    /// lacks is looked up at its twin outside /usr (`/lib/systemd/systemd`
    /// for `/usr/lib/systemd/systemd`) and the other way round: the image is
    /// merged, so the two name the same file there.
    pub fn resolve(&self, inside: &Path, follow_last: bool) -> io::Result<PathBuf> {
        let host = self.resolve_exact(inside, follow_last)?;
        if std::fs::symlink_metadata(&host).is_ok() || !self.split_usr() {
            return Ok(host);
        }
        let Some(twin) = usr_twin(inside) else {
            return Ok(host);
        };
        match self.resolve_exact(&twin, follow_last) {
            Ok(t) if std::fs::symlink_metadata(&t).is_ok() => Ok(t),
            _ => Ok(host),
        }
    }

    /// True when the root keeps `/lib` apart from `/usr/lib`.
    pub fn split_usr(&self) -> bool {
        *self.split_usr.get_or_init(|| {
            std::fs::symlink_metadata(self.path.join("lib")).is_ok_and(|m| m.is_dir())
                && std::fs::symlink_metadata(self.path.join("usr/lib")).is_ok_and(|m| m.is_dir())
        })
    }

    fn resolve_exact(&self, inside: &Path, follow_last: bool) -> io::Result<PathBuf> {
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
            Err(_) => sys.locate(dir),
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
            Err(_) => Ok(sys.locate(inside)),
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

    /// A root whose /usr is not merged: a /usr path it lacks is found at
    /// its twin outside /usr and the other way round; a merged root, or a
    /// path the root has, is looked up as written.
    #[test]
    fn an_unmerged_roots_files_are_found_across_the_usr_split() {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        std::fs::create_dir_all(r.join("lib/systemd")).unwrap();
        std::fs::create_dir_all(r.join("usr/lib/systemd")).unwrap();
        std::fs::create_dir_all(r.join("usr/bin")).unwrap();
        std::fs::create_dir_all(r.join("bin")).unwrap();
        std::fs::write(r.join("lib/systemd/systemd"), b"s").unwrap();
        std::fs::write(r.join("usr/lib/systemd/both"), b"usr").unwrap();
        std::fs::write(r.join("lib/systemd/both"), b"lib").unwrap();
        std::fs::write(r.join("usr/bin/env"), b"e").unwrap();
        let root = Root::new(r);
        assert!(root.split_usr());
        let at = |p: &str| root.resolve(Path::new(p), true).unwrap();
        assert_eq!(
            at("/usr/lib/systemd/systemd"),
            r.join("lib/systemd/systemd")
        );
        assert_eq!(at("/usr/lib/systemd/both"), r.join("usr/lib/systemd/both"));
        assert_eq!(at("/lib/systemd/both"), r.join("lib/systemd/both"));
        assert_eq!(at("/bin/env"), r.join("usr/bin/env"));
        assert_eq!(at("/usr/lib/systemd/none"), r.join("usr/lib/systemd/none"));
        assert_eq!(at("/etc/x"), r.join("etc/x"));
        assert_eq!(usr_twin(Path::new("/usr/lib")), None);
        assert_eq!(usr_twin(Path::new("/usr/share/x")), None);

        let merged = tempfile::tempdir().unwrap();
        let m = merged.path();
        std::fs::create_dir_all(m.join("usr/lib")).unwrap();
        symlink("usr/lib", m.join("lib")).unwrap();
        std::fs::create_dir_all(m.join("sbin")).unwrap();
        std::fs::write(m.join("sbin/only"), b"x").unwrap();
        let root = Root::new(m);
        assert!(!root.split_usr());
        assert_eq!(
            root.resolve(Path::new("/usr/sbin/only"), true).unwrap(),
            m.join("usr/sbin/only")
        );
    }

    /// A link whose target is not in the root resolves to a path that is not
    /// there on the host either, never to the link (which the host would
    /// follow out of the root).
    #[test]
    fn missing_targets_are_not_found_on_the_host_either() {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path().join("root");
        std::fs::create_dir_all(r.join("data")).unwrap();
        let outside = dir.path().join("secret");
        std::fs::write(&outside, b"outside").unwrap();
        // Absolute and climbing targets, to a file and to a directory.
        symlink(&outside, r.join("data/abs")).unwrap();
        symlink("../../../../secret", r.join("data/up")).unwrap();
        symlink(dir.path(), r.join("dir")).unwrap();
        let root = Root::new(&r);
        for inside in ["/data/abs", "/data/up", "/dir/secret", "/data/abs/x"] {
            let host = root.resolve(Path::new(inside), true).unwrap();
            assert!(host.starts_with(&r), "{inside}: {}", host.display());
            assert!(
                std::fs::metadata(&host).is_err(),
                "{inside}: {}",
                host.display()
            );
        }
        // A missing file under a real directory is where it would be.
        assert_eq!(
            root.resolve(Path::new("/data/none"), true).unwrap(),
            r.join("data/none")
        );
    }
}

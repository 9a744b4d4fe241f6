//! Path lookup inside a root, as the kernel would do it if the root were `/`,
//! remembering every symlink met on the way.
//!
//! Input: a path as a program inside the root would name it
//! (`/lib64/ld-linux-x86-64.so.2`). Output: a [`Walk`]: the canonical path
//! inside the root (`/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2`), what
//! is there, and each symlink followed (`/lib64 -> usr/lib64`, ...) so the
//! image can hold the same chain. Absolute symlink targets start again at the
//! root and `..` never climbs above it: nothing outside the root is read.
//!
//! Every lstat and every walk is cached; one resolve call looks the same
//! directories up thousands of times.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Component, Path, PathBuf};
use std::rc::Rc;

/// How many symlinks one lookup may follow (the kernel's limit).
const MAX_LINKS: usize = 40;

/// What an lstat found at a canonical path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Node {
    Missing,
    Dir,
    File {
        exec: bool,
        dev: u64,
        ino: u64,
    },
    Link(PathBuf),
    /// A device, fifo or socket.
    Special,
}

/// A finished lookup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Walk {
    /// The canonical path inside the root (absolute, no symlinks, no `..`).
    pub real: PathBuf,
    /// Each symlink followed, in order: (its canonical location, its target
    /// as stored).
    pub links: Vec<(PathBuf, PathBuf)>,
    /// What is at `real` (never `Link` or `Missing`).
    pub node: Node,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WalkError {
    NotFound,
    NotDir,
    Loop,
}

impl std::fmt::Display for WalkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WalkError::NotFound => f.write_str("no such file"),
            WalkError::NotDir => f.write_str("a path component is not a directory"),
            WalkError::Loop => f.write_str("too many levels of symbolic links"),
        }
    }
}

pub type WalkResult = Result<Rc<Walk>, WalkError>;

/// A root directory with lookup caches.
pub struct Sysroot {
    root: PathBuf,
    // Keyed by the path's bytes: hashing a Path goes component by
    // component, several times slower, and the keys are canonical paths
    // or the caller's spelling, where a miss only costs a lookup.
    nodes: HashMap<OsString, Node>,
    walks: HashMap<OsString, WalkResult>,
}

impl Sysroot {
    pub fn new(root: &Path) -> Self {
        Sysroot {
            root: root.to_path_buf(),
            nodes: HashMap::new(),
            walks: HashMap::new(),
        }
    }

    /// The host path of a canonical in-root path.
    pub fn host(&self, inside: &Path) -> PathBuf {
        let rel = inside.strip_prefix("/").unwrap_or(inside);
        if rel.as_os_str().is_empty() {
            return self.root.clone();
        }
        self.root.join(rel)
    }

    /// lstat of a canonical in-root path (cached).
    pub fn node(&mut self, real: &Path) -> Node {
        if let Some(n) = self.nodes.get(real.as_os_str()) {
            return n.clone();
        }
        let host = self.host(real);
        let node = match fs::symlink_metadata(&host) {
            Err(_) => Node::Missing,
            Ok(m) => {
                let t = m.file_type();
                if t.is_symlink() {
                    match fs::read_link(&host) {
                        Ok(target) => Node::Link(target),
                        Err(_) => Node::Missing,
                    }
                } else if t.is_dir() {
                    Node::Dir
                } else if t.is_file() {
                    Node::File {
                        exec: m.mode() & 0o111 != 0,
                        dev: m.dev(),
                        ino: m.ino(),
                    }
                } else if t.is_block_device() || t.is_char_device() || t.is_fifo() || t.is_socket()
                {
                    Node::Special
                } else {
                    Node::Missing
                }
            }
        };
        self.nodes.insert(real.as_os_str().to_owned(), node.clone());
        node
    }

    /// Looks `path` up inside the root, following every symlink (also the
    /// last component). A relative `path` is taken from the root.
    ///
    /// A lookup starts from the walk of the nearest ancestor already
    /// looked up and caches each step, so the files of one directory cost
    /// one lstat and one hash of their own path each, not a hash of every
    /// prefix (which made long trees of deep paths slow).
    pub fn walk(&mut self, path: &Path) -> WalkResult {
        if let Some(w) = self.walks.get(path.as_os_str()) {
            return w.clone();
        }
        // Ancestors not walked yet, the path first.
        let mut pending = vec![path];
        let mut base = None;
        let mut cur = path;
        while let (Some(parent), Some(_)) = (cur.parent(), cur.file_name()) {
            if let Some(w) = self.walks.get(parent.as_os_str()) {
                base = Some(w.clone());
                break;
            }
            pending.push(parent);
            cur = parent;
        }
        let mut result = match base {
            Some(w) => w,
            None => {
                // The root itself, or a path ending in `..`: from the start.
                let top = pending.pop().unwrap_or(path);
                let r = self.walk_uncached(top).map(Rc::new);
                self.walks.insert(top.as_os_str().to_owned(), r.clone());
                r
            }
        };
        while let Some(p) = pending.pop() {
            result = match (&result, p.file_name()) {
                (Ok(w), Some(name)) => {
                    let todo = vec![name.as_bytes().to_vec()];
                    self.walk_from((**w).clone(), todo).map(Rc::new)
                }
                (Ok(_), None) => self.walk_uncached(p).map(Rc::new),
                (Err(e), _) => Err(e.clone()),
            };
            self.walks.insert(p.as_os_str().to_owned(), result.clone());
        }
        result
    }

    fn walk_uncached(&mut self, path: &Path) -> Result<Walk, WalkError> {
        let mut todo: Vec<Vec<u8>> = Vec::new();
        push_components(&mut todo, path);
        let start = Walk {
            real: PathBuf::from("/"),
            links: Vec::new(),
            node: Node::Dir,
        };
        self.walk_from(start, todo)
    }

    /// Goes on from a finished walk through `todo` (components still to
    /// look at, last first).
    fn walk_from(&mut self, start: Walk, mut todo: Vec<Vec<u8>>) -> Result<Walk, WalkError> {
        let Walk {
            mut real,
            mut links,
            mut node,
        } = start;
        let mut followed = links.len();
        while let Some(c) = todo.pop() {
            if node != Node::Dir {
                return Err(WalkError::NotDir);
            }
            if c == b".." {
                real.pop();
                continue;
            }
            let candidate = real.join(OsStr::from_bytes(&c));
            match self.node(&candidate) {
                Node::Missing => return Err(WalkError::NotFound),
                Node::Link(target) => {
                    followed += 1;
                    if followed > MAX_LINKS {
                        return Err(WalkError::Loop);
                    }
                    if target.is_absolute() {
                        real = PathBuf::from("/");
                    }
                    push_components(&mut todo, &target);
                    links.push((candidate, target));
                    node = Node::Dir;
                }
                other => {
                    real = candidate;
                    node = other;
                }
            }
        }
        Ok(Walk { real, links, node })
    }

    /// Where `path` would be on the host for a lookup that fails inside the
    /// root (not found, or a file where a directory should be): the host
    /// path of what exists of it, resolved inside the root, then the first
    /// component that is not there and the rest. Looking that up on the
    /// host fails as the lookup inside the root did, and meets no symlink on
    /// the way: a link whose target is missing in the root (`/etc/shadow`,
    /// `../../../x`) would lead out of it if the host followed it.
    pub fn locate(&mut self, path: &Path) -> PathBuf {
        let mut todo: Vec<Vec<u8>> = Vec::new();
        push_components(&mut todo, path);
        let mut real = PathBuf::from("/");
        let mut node = Node::Dir;
        let mut followed = 0;
        let stop = |s: &Sysroot, at: &Path, todo: &[Vec<u8>]| {
            let mut p = s.host(at);
            for c in todo.iter().rev() {
                p.push(OsStr::from_bytes(c));
            }
            p
        };
        while let Some(c) = todo.pop() {
            if node != Node::Dir {
                todo.push(c);
                return stop(self, &real, &todo);
            }
            if c == b".." {
                real.pop();
                continue;
            }
            let candidate = real.join(OsStr::from_bytes(&c));
            match self.node(&candidate) {
                Node::Link(target) if followed < MAX_LINKS => {
                    followed += 1;
                    if target.is_absolute() {
                        real = PathBuf::from("/");
                    }
                    push_components(&mut todo, &target);
                }
                Node::Missing | Node::Link(_) => return stop(self, &candidate, &todo),
                other => {
                    real = candidate;
                    node = other;
                }
            }
        }
        self.host(&real)
    }

    /// Opens the file at a canonical in-root path.
    pub fn open(&self, real: &Path) -> io::Result<fs::File> {
        fs::File::open(self.host(real))
    }

    /// Lists a canonical in-root directory (names only, unsorted).
    pub fn list(&self, real: &Path) -> Vec<Vec<u8>> {
        let Ok(rd) = fs::read_dir(self.host(real)) else {
            return Vec::new();
        };
        rd.filter_map(|e| e.ok())
            .map(|e| e.file_name().as_bytes().to_vec())
            .collect()
    }
}

/// Pushes the components of `path` onto `todo` so the first pops first;
/// `.` and empty components are dropped, `..` kept.
fn push_components(todo: &mut Vec<Vec<u8>>, path: &Path) {
    let start = todo.len();
    for c in path.components() {
        match c {
            Component::Normal(n) => todo.push(n.as_bytes().to_vec()),
            Component::ParentDir => todo.push(b"..".to_vec()),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    todo[start..].reverse();
}

/// The path's twin across the /usr merge: `/usr/lib/x` and `/lib/x`,
/// `/usr/bin/x` and `/bin/x`, `/usr/sbin/x` and `/sbin/x`, `/usr/lib64/x`
/// and `/lib64/x`.
pub fn usr_twin(inside: &Path) -> Option<PathBuf> {
    const DIRS: [&str; 4] = ["lib", "bin", "sbin", "lib64"];
    let rel = inside.strip_prefix("/").ok()?;
    let mut parts = rel.components();
    let first = parts.next()?.as_os_str();
    if first == "usr" {
        let second = parts.next()?.as_os_str();
        let rest = parts.as_path();
        (DIRS.iter().any(|d| second == *d) && !rest.as_os_str().is_empty())
            .then(|| Path::new("/").join(second).join(rest))
    } else {
        let rest = parts.as_path();
        (DIRS.iter().any(|d| first == *d) && !rest.as_os_str().is_empty())
            .then(|| Path::new("/usr").join(first).join(rest))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn tree() -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        fs::create_dir_all(r.join("usr/lib/x86_64-linux-gnu")).unwrap();
        fs::create_dir_all(r.join("usr/lib64")).unwrap();
        fs::create_dir_all(r.join("usr/bin")).unwrap();
        symlink("usr/lib", r.join("lib")).unwrap();
        symlink("usr/lib64", r.join("lib64")).unwrap();
        symlink("/usr/bin", r.join("bin")).unwrap();
        fs::write(r.join("usr/lib/x86_64-linux-gnu/ld.so"), b"x").unwrap();
        symlink(
            "../lib/x86_64-linux-gnu/ld.so",
            r.join("usr/lib64/ld-linux-x86-64.so.2"),
        )
        .unwrap();
        // Absolute targets and `..` beyond the root stay inside.
        symlink("/../../../etc/passwd", r.join("usr/bin/escape")).unwrap();
        symlink("loop2", r.join("usr/bin/loop1")).unwrap();
        symlink("loop1", r.join("usr/bin/loop2")).unwrap();
        t
    }

    #[test]
    fn follows_and_records_symlinks() {
        let t = tree();
        let mut s = Sysroot::new(t.path());
        let w = s.walk(Path::new("/lib64/ld-linux-x86-64.so.2")).unwrap();
        assert_eq!(w.real, Path::new("/usr/lib/x86_64-linux-gnu/ld.so"));
        assert_eq!(
            w.links,
            vec![
                (PathBuf::from("/lib64"), PathBuf::from("usr/lib64")),
                (
                    PathBuf::from("/usr/lib64/ld-linux-x86-64.so.2"),
                    PathBuf::from("../lib/x86_64-linux-gnu/ld.so")
                ),
            ]
        );
        assert!(matches!(w.node, Node::File { exec: false, .. }));
    }

    #[test]
    fn dotdot_is_physical_and_bounded() {
        let t = tree();
        let mut s = Sysroot::new(t.path());
        // /lib -> usr/lib, so /lib/../bin is /usr/bin.
        let w = s.walk(Path::new("/lib/../bin")).unwrap();
        assert_eq!(w.real, Path::new("/usr/bin"));
        assert_eq!(w.node, Node::Dir);
        let w = s.walk(Path::new("/../../usr")).unwrap();
        assert_eq!(w.real, Path::new("/usr"));
        assert_eq!(
            s.walk(Path::new("/usr/bin/escape")),
            Err(WalkError::NotFound)
        );
        assert_eq!(s.walk(Path::new("bin/loop1")), Err(WalkError::Loop));
        assert_eq!(
            s.walk(Path::new("/usr/lib64/ld-linux-x86-64.so.2/x")),
            Err(WalkError::NotDir)
        );
    }
}

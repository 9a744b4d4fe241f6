//! `composer extract`: unpack an image into a directory, safely.
//!
//! Input: an [`Image`] and a target directory. Output: the tree, as the
//! kernel would unpack it, inside the directory and nowhere else.
//!
//! Two phases. The plan walks the entries without touching the disk and
//! refuses the whole image (nothing is written) when a name is absolute,
//! climbs with `..`, goes through a symlink that the archive itself
//! created, or links to a file that is no longer there; entries the kernel
//! drops (missing parent, skipped headers) are dropped with a warning. The
//! run then creates everything in a fresh directory next to the target,
//! resolving every parent with openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)
//! (a component-by-component O_NOFOLLOW walk where openat2 is missing), so
//! even a plan that missed something cannot leave the directory; the new
//! directory is renamed onto the target only when everything worked.
//!
//! Device nodes are made only with `devices` and only as root; owners are
//! applied only as root. Directories are created writable and get their
//! own mode and mtime at the end, deepest first.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, Mode, OFlags, ResolveFlags, Timespec, Timestamps};

use crate::entry::{S_IFBLK, S_IFCHR, S_IFDIR, S_IFIFO, S_IFLNK, S_IFMT, S_IFREG, S_IFSOCK};
use crate::error::{Error, Result};
use crate::image::tree::{Kind, Missing, Tree, ROOT};
use crate::image::Image;
use crate::path::escape;

#[derive(Clone, Copy, Debug, Default)]
pub struct ExtractOptions {
    /// Create block and character devices (root only).
    pub devices: bool,
}

#[derive(Debug, Default)]
pub struct ExtractReport {
    /// Entries created.
    pub created: usize,
    pub warnings: Vec<String>,
}

/// The kernel's hardlink key: devmajor, devminor, ino, file type.
type LinkKey = (u32, u32, u32, u32);

/// An entry whose data is written: its segment and its index there.
type DataOf = (usize, usize);

#[derive(Debug)]
enum Op<'a> {
    Dir,
    File(Option<DataOf>),
    /// A further name of the file created at `first`, with the data this
    /// entry carries (if any).
    Link {
        first: Vec<u8>,
        data: Option<DataOf>,
    },
    Symlink(&'a [u8]),
    Node {
        kind: u32,
        rdev: (u32, u32),
    },
}

#[derive(Debug)]
struct Action<'a> {
    /// Normalised relative path, never empty.
    path: Vec<u8>,
    op: Op<'a>,
    mode: u32,
    uid: u32,
    gid: u32,
    mtime: u32,
    /// Remove what the path holds first (a different type was there).
    replace: bool,
}

impl Action<'_> {
    /// The entry whose data this action writes.
    fn data(&self) -> Option<DataOf> {
        match &self.op {
            Op::File(d) | Op::Link { data: d, .. } => *d,
            _ => None,
        }
    }
}

struct Plan<'a> {
    actions: Vec<Action<'a>>,
    /// Mode and mtime for the target directory itself (a `.` entry).
    root: Option<(u32, u32, u32, u32)>,
    warnings: Vec<String>,
}

fn refuse(image: &Image, place: crate::image::Place, msg: String) -> Error {
    Error::usage(format!("{}: {place}: {msg}", image.name))
        .with_hint("nothing was extracted; `composer verify IMAGE` lists every problem")
}

/// Decides every action, or refuses the image.
fn plan<'a>(image: &'a Image, opts: &ExtractOptions, root_user: bool) -> Result<Plan<'a>> {
    if let Some(e) = image.fault_error() {
        return Err(e.with_hint("nothing was extracted; `composer verify IMAGE` explains"));
    }
    let mut tree = Tree::new();
    // The first name of each hardlink group: its path, its node, its number.
    let mut links: HashMap<LinkKey, (Vec<u8>, usize, usize)> = HashMap::new();
    let mut plan = Plan {
        actions: Vec::new(),
        root: None,
        warnings: Vec::new(),
    };
    let mut files = 0usize;
    for seg in &image.segments {
        for (index, e) in seg.entries.iter().enumerate() {
            let place = image.place(seg, e.offset);
            let shown = escape(&e.name);
            let mut warn = |m: String| plan.warnings.push(format!("{place}: `{shown}`: {m}"));
            if e.is_trailer() {
                links.clear();
                continue;
            }
            if let Some(skip) = e.skip {
                warn(format!("{}; not extracted", skip.describe()));
                continue;
            }
            let h = &e.header;
            let kind = h.mode & S_IFMT;
            let data = (!e.data.is_empty()).then_some((seg.index, index));
            if kind == S_IFREG && h.crc && e.sum.is_some_and(|sum| sum != h.check) {
                return Err(refuse(
                    image,
                    place,
                    format!("`{shown}`: bad 070702 data checksum"),
                ));
            }
            if e.name.starts_with(b"/") {
                return Err(refuse(
                    image,
                    place,
                    format!("`{shown}` is an absolute name; extract writes only inside DIR"),
                ));
            }
            let parts: Vec<&[u8]> = e
                .name
                .split(|&b| b == b'/')
                .filter(|c| !c.is_empty() && *c != b".")
                .collect();
            if parts.contains(&&b".."[..]) {
                return Err(refuse(
                    image,
                    place,
                    format!("`{shown}` climbs out with `..`; extract writes only inside DIR"),
                ));
            }
            if parts.is_empty() {
                if e.name.is_empty() {
                    warn("empty name; not extracted".into());
                } else if kind == S_IFDIR {
                    plan.root = Some((h.mode & 0o7777, h.uid, h.gid, h.mtime));
                } else {
                    return Err(refuse(
                        image,
                        place,
                        format!(
                            "`{shown}` names the target directory itself but is not a directory"
                        ),
                    ));
                }
                continue;
            }
            // Parents: they must exist as directories the archive made, and
            // no component may be a symlink.
            let (last, parents) = parts.split_last().expect("not empty");
            let dir = match tree.dir(ROOT, parents.iter().copied(), false) {
                Ok(d) => d,
                Err(Missing::Symlink(p)) => {
                    return Err(refuse(
                        image,
                        place,
                        format!(
                            "`{shown}` would be written through `{}`, a symlink the archive \
                             created",
                            escape(&p)
                        ),
                    ))
                }
                Err(Missing::NotDir(p)) => {
                    warn(format!(
                        "`{}` is not a directory; not extracted (the kernel drops it too)",
                        escape(&p)
                    ));
                    continue;
                }
                Err(Missing::NotFound(p)) => {
                    warn(format!(
                        "parent directory `{}` is not in the image before it; not \
                         extracted (the kernel drops it too)",
                        escape(&p)
                    ));
                    continue;
                }
                Err(Missing::Loop) => unreachable!("symlinks are not followed"),
            };
            let path = parts.join(&b'/');
            let existing = tree.child(dir, last);
            let before = existing.map(|id| tree.kind(id).clone());
            let op = match kind {
                S_IFDIR => Op::Dir,
                S_IFLNK => Op::Symlink(crate::image::inspect::target(e)),
                S_IFREG => {
                    let key = (h.devmajor, h.devminor, h.ino, kind);
                    let first = if h.nlink >= 2 {
                        links.get(&key).cloned()
                    } else {
                        None
                    };
                    match first {
                        Some((first, node, id)) if first != path => {
                            if tree.kind(node) != &Kind::File(id) {
                                return Err(refuse(
                                    image,
                                    place,
                                    format!(
                                        "`{shown}` is a hardlink of `{}`, which is no longer \
                                         that file",
                                        escape(&first)
                                    ),
                                ));
                            }
                            Op::Link { first, data }
                        }
                        _ => Op::File(data),
                    }
                }
                S_IFCHR | S_IFBLK => {
                    if !opts.devices {
                        warn("device node not created (use --devices, as root)".into());
                        continue;
                    }
                    if !root_user {
                        return Err(Error::usage("--devices needs root to create device nodes")
                            .with_hint("run as root, or leave --devices out to skip them"));
                    }
                    Op::Node {
                        kind,
                        rdev: (h.rdevmajor, h.rdevminor),
                    }
                }
                S_IFIFO | S_IFSOCK => Op::Node { kind, rdev: (0, 0) },
                _ => {
                    warn(format!(
                        "unknown file type in mode {:o}; not extracted",
                        h.mode
                    ));
                    continue;
                }
            };
            let node = match &op {
                Op::Dir => Kind::Dir,
                Op::Symlink(t) => Kind::Symlink(t.to_vec()),
                Op::File(_) => {
                    files += 1;
                    Kind::File(files - 1)
                }
                Op::Link { first, .. } => links
                    .get(&(h.devmajor, h.devminor, h.ino, kind))
                    .filter(|(p, _, _)| p == first)
                    .map_or(Kind::Other, |(_, n, _)| tree.kind(*n).clone()),
                Op::Node { .. } => Kind::Other,
            };
            let replace = match (&before, &node) {
                (None, _) | (Some(Kind::Dir), Kind::Dir) => false,
                (Some(Kind::Dir), _) => {
                    if existing.is_some_and(|id| tree.has_children(id)) {
                        return Err(refuse(
                            image,
                            place,
                            format!("`{shown}` would replace a directory that has content"),
                        ));
                    }
                    true
                }
                (Some(_), _) => true,
            };
            let (id, _) = tree.set(dir, last, node.clone());
            if let (Op::File(_), Kind::File(n)) = (&op, &node) {
                if h.nlink >= 2 {
                    links.insert(
                        (h.devmajor, h.devminor, h.ino, kind),
                        (path.clone(), id, *n),
                    );
                }
            }
            plan.actions.push(Action {
                path,
                op,
                mode: h.mode & 0o7777,
                uid: h.uid,
                gid: h.gid,
                mtime: h.mtime,
                replace,
            });
        }
    }
    Ok(plan)
}

fn os(b: &[u8]) -> &OsStr {
    OsStr::from_bytes(b)
}

fn split(path: &[u8]) -> (&[u8], &[u8]) {
    match path.iter().rposition(|&b| b == b'/') {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => (b".", path),
    }
}

/// Opens directory `rel` beneath `root` without following any symlink.
fn open_beneath(root: &OwnedFd, rel: &[u8]) -> rustix::io::Result<OwnedFd> {
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
    match rustix::fs::openat2(
        root,
        os(rel),
        flags,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    ) {
        Err(rustix::io::Errno::NOSYS) => {}
        other => return other,
    }
    // Older kernels: one component at a time, never following a symlink.
    let mut fd = rustix::fs::openat(root, ".", flags, Mode::empty())?;
    for c in rel
        .split(|&b| b == b'/')
        .filter(|c| !c.is_empty() && *c != b".")
    {
        if c == b".." {
            return Err(rustix::io::Errno::XDEV);
        }
        fd = rustix::fs::openat(&fd, os(c), flags | OFlags::NOFOLLOW, Mode::empty())?;
    }
    Ok(fd)
}

fn stamp(mtime: u32) -> Timestamps {
    let t = Timespec {
        tv_sec: mtime as i64,
        tv_nsec: 0,
    };
    Timestamps {
        last_access: t,
        last_modification: t,
    }
}

struct Runner<'a> {
    root: OwnedFd,
    dir_name: &'a Path,
    as_root: bool,
    /// The last parent opened, reused while entries stay in one directory.
    cache: Option<(Vec<u8>, OwnedFd)>,
}

impl Runner<'_> {
    fn fail(&self, path: &[u8], what: &str, e: impl std::fmt::Display) -> Error {
        Error::usage(format!(
            "{}: cannot {what} `{}`: {e}",
            self.dir_name.display(),
            escape(path)
        ))
        .with_hint("nothing was extracted")
    }

    fn parent(&mut self, path: &[u8]) -> Result<OwnedFd> {
        let (dir, _) = split(path);
        if let Some((d, fd)) = &self.cache {
            if d == dir {
                return fd.try_clone().map_err(|e| self.fail(path, "open", e));
            }
        }
        let fd = open_beneath(&self.root, dir).map_err(|e| {
            let why = match e {
                rustix::io::Errno::LOOP | rustix::io::Errno::XDEV => {
                    "its path goes through a symlink".to_string()
                }
                e => e.to_string(),
            };
            self.fail(path, "reach the directory of", why)
        })?;
        let copy = fd.try_clone().map_err(|e| self.fail(path, "open", e))?;
        self.cache = Some((dir.to_vec(), copy));
        Ok(fd)
    }

    fn owner(&self, fd: impl AsFd, name: &[u8], a: &Action) -> Result<()> {
        if self.as_root {
            rustix::fs::chownat(
                fd,
                os(name),
                Some(rustix::fs::Uid::from_raw(a.uid)),
                Some(rustix::fs::Gid::from_raw(a.gid)),
                AtFlags::SYMLINK_NOFOLLOW,
            )
            .map_err(|e| self.fail(&a.path, "set the owner of", e))?;
        }
        Ok(())
    }

    fn write_file(
        &self,
        dir: &OwnedFd,
        name: &[u8],
        a: &Action,
        data: Option<&mut dyn Read>,
        create: bool,
    ) -> Result<()> {
        let mut flags = OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        flags |= if create {
            OFlags::CREATE | OFlags::EXCL
        } else {
            OFlags::TRUNC
        };
        let fd = rustix::fs::openat(dir, os(name), flags, Mode::from_raw_mode(0o600))
            .map_err(|e| self.fail(&a.path, "create", e))?;
        let mut f = File::from(fd);
        if let Some(data) = data {
            std::io::copy(data, &mut f).map_err(|e| self.fail(&a.path, "write", e))?;
        }
        if self.as_root {
            rustix::fs::fchown(
                &f,
                Some(rustix::fs::Uid::from_raw(a.uid)),
                Some(rustix::fs::Gid::from_raw(a.gid)),
            )
            .map_err(|e| self.fail(&a.path, "set the owner of", e))?;
        }
        rustix::fs::fchmod(&f, Mode::from_raw_mode(a.mode))
            .map_err(|e| self.fail(&a.path, "set the mode of", e))?;
        rustix::fs::futimens(&f, &stamp(a.mtime))
            .map_err(|e| self.fail(&a.path, "set the mtime of", e))?;
        Ok(())
    }

    fn run(&mut self, a: &Action, data: Option<&mut dyn Read>) -> Result<()> {
        let dir = self.parent(&a.path)?;
        let (_, name) = split(&a.path);
        if a.replace {
            let is_dir = rustix::fs::statat(&dir, os(name), AtFlags::SYMLINK_NOFOLLOW)
                .map(|st| st.st_mode & S_IFMT == S_IFDIR)
                .unwrap_or(false);
            let flags = if is_dir {
                AtFlags::REMOVEDIR
            } else {
                AtFlags::empty()
            };
            rustix::fs::unlinkat(&dir, os(name), flags)
                .map_err(|e| self.fail(&a.path, "replace", e))?;
        }
        match &a.op {
            Op::Dir => match rustix::fs::mkdirat(&dir, os(name), Mode::from_raw_mode(0o700)) {
                Ok(()) => self.owner(&dir, name, a)?,
                Err(rustix::io::Errno::EXIST) => self.owner(&dir, name, a)?,
                Err(e) => return Err(self.fail(&a.path, "create the directory", e)),
            },
            Op::File(_) => {
                let exists = rustix::fs::statat(&dir, os(name), AtFlags::SYMLINK_NOFOLLOW)
                    .map(|st| st.st_mode & S_IFMT == S_IFREG)
                    .unwrap_or(false);
                self.write_file(&dir, name, a, data, !exists)?;
            }
            Op::Link { first, .. } => {
                let (_, first_name) = split(first);
                let from = self.parent(first)?;
                if rustix::fs::statat(&dir, os(name), AtFlags::SYMLINK_NOFOLLOW).is_ok() {
                    rustix::fs::unlinkat(&dir, os(name), AtFlags::empty())
                        .map_err(|e| self.fail(&a.path, "replace", e))?;
                }
                rustix::fs::linkat(&from, os(first_name), &dir, os(name), AtFlags::empty())
                    .map_err(|e| self.fail(&a.path, "link", e))?;
                if data.is_some() {
                    self.write_file(&dir, name, a, data, false)?;
                } else {
                    self.mode(&dir, name, a)?;
                }
            }
            Op::Symlink(target) => {
                rustix::fs::symlinkat(os(target), &dir, os(name))
                    .map_err(|e| self.fail(&a.path, "create the symlink", e))?;
                self.owner(&dir, name, a)?;
                self.mtime(&dir, name, a)?;
            }
            Op::Node { kind, rdev } => {
                let ft = rustix::fs::FileType::from_raw_mode(*kind);
                let dev = rustix::fs::makedev(rdev.0, rdev.1);
                rustix::fs::mknodat(&dir, os(name), ft, Mode::from_raw_mode(0o600), dev)
                    .map_err(|e| self.fail(&a.path, "create the node", e))?;
                self.owner(&dir, name, a)?;
                self.mode(&dir, name, a)?;
                self.mtime(&dir, name, a)?;
            }
        }
        Ok(())
    }

    /// Applies the entry's mode to `name` in `dir`.
    fn mode(&self, dir: &OwnedFd, name: &[u8], a: &Action) -> Result<()> {
        rustix::fs::chmodat(dir, os(name), Mode::from_raw_mode(a.mode), AtFlags::empty())
            .map_err(|e| self.fail(&a.path, "set the mode of", e))
    }

    /// Applies the entry's mtime to `name` in `dir` (not following a symlink).
    fn mtime(&self, dir: &OwnedFd, name: &[u8], a: &Action) -> Result<()> {
        rustix::fs::utimensat(dir, os(name), &stamp(a.mtime), AtFlags::SYMLINK_NOFOLLOW)
            .map_err(|e| self.fail(&a.path, "set the mtime of", e))
    }

    /// Final modes and mtimes of directories, deepest (latest) first.
    fn finish_dirs(&mut self, actions: &[Action]) -> Result<()> {
        for a in actions.iter().rev().filter(|a| matches!(a.op, Op::Dir)) {
            let dir = self.parent(&a.path)?;
            let (_, name) = split(&a.path);
            self.mode(&dir, name, a)?;
            self.mtime(&dir, name, a)?;
        }
        Ok(())
    }
}

/// Extracts `image` into `dir`, which must not exist or be empty.
pub fn extract(image: &Image, dir: &Path, opts: &ExtractOptions) -> Result<ExtractReport> {
    let as_root = rustix::process::geteuid().is_root();
    if opts.devices && !as_root {
        return Err(Error::usage("--devices needs root to create device nodes")
            .with_hint("run as root, or leave --devices out to skip them"));
    }
    match std::fs::symlink_metadata(dir) {
        Ok(m) if !m.is_dir() => {
            return Err(Error::usage(format!(
                "`{}` exists and is not a directory",
                dir.display()
            )))
        }
        Ok(_) => {
            let mut rd = std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
            if rd.next().is_some() {
                return Err(Error::usage(format!("`{}` is not empty", dir.display()))
                    .with_hint("extract into a new or empty directory"));
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(Error::io(dir, e)),
    }
    let plan = plan(image, opts, as_root)?;
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let temp = tempfile::Builder::new()
        .prefix(".composer-extract-")
        .tempdir_in(&parent)
        .map_err(|e| {
            Error::usage(format!(
                "cannot create a directory in `{}`: {e}",
                parent.display()
            ))
        })?;
    let root = rustix::fs::open(
        temp.path(),
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| Error::io(temp.path(), e.into()))?;
    let mut runner = Runner {
        root,
        dir_name: dir,
        as_root,
        cache: None,
    };
    // Actions in archive order; those that write data when the image's
    // data stream reaches their entry.
    let mut next = 0;
    let actions = &plan.actions;
    image.for_each_data(|seg, index, data| {
        while let Some(a) = actions.get(next) {
            match a.data() {
                Some(at) if at == (seg, index) => {
                    next += 1;
                    return runner.run(a, Some(data));
                }
                // A later entry's data: wait for it.
                Some(_) => return Ok(()),
                None => {
                    next += 1;
                    runner.run(a, None)?;
                }
            }
        }
        Ok(())
    })?;
    for a in &actions[next..] {
        runner.run(a, None)?;
    }
    runner.finish_dirs(&plan.actions)?;
    let (mode, uid, gid, mtime) = plan.root.unwrap_or((0o755, 0, 0, 0));
    if as_root && plan.root.is_some() {
        rustix::fs::fchown(
            &runner.root,
            Some(rustix::fs::Uid::from_raw(uid)),
            Some(rustix::fs::Gid::from_raw(gid)),
        )
        .map_err(|e| Error::io(dir, e.into()))?;
    }
    rustix::fs::fchmod(&runner.root, Mode::from_raw_mode(mode))
        .map_err(|e| Error::io(dir, e.into()))?;
    if plan.root.is_some() {
        rustix::fs::futimens(&runner.root, &stamp(mtime)).map_err(|e| Error::io(dir, e.into()))?;
    }
    // Rename onto the target: allowed when it is missing or an empty dir.
    let kept = temp.keep();
    if let Err(e) = std::fs::rename(&kept, dir) {
        let _ = std::fs::remove_dir_all(&kept);
        return Err(Error::usage(format!(
            "cannot move the extracted tree to `{}`: {e}",
            dir.display()
        )));
    }
    Ok(ExtractReport {
        created: plan.actions.len(),
        warnings: plan.warnings,
    })
}

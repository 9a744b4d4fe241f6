//! Lowering: from manifest rules to gen_init_cpio-level entries.
//!
//! Input: [`Loaded`] documents and the build's [`Policy`]. Output: an
//! [`ImageSpec`]: entries in archive order with parents before children,
//! every one carrying the manifest position and rule that produced it,
//! split into the segments `[[segment]]` asks for, with `[early]`'s files.
//!
//! Rules are expanded one by one (trees and globs walk the source root),
//! destinations are rewritten through the image's own directory symlinks
//! (merged /usr: with `bin -> usr/bin` in the image, `/bin/sh` lands in
//! `usr/bin/sh`), duplicates are merged or reported, missing parents are
//! created, and the result is ordered.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use globset::GlobSet;

use super::de::Spanned;
use super::item::FileModes;
use super::load::{expand, Doc, Loaded};
use super::model::{AlignSpec, ModeOrSource, Order, PathText};
use super::node::Pos;
use super::segments::Rules;
use crate::entry::{AlignHint, DeviceKind, Entry, Kind, Origin, PATH_MAX};
use crate::error::{Error, Result, Warning};
use crate::glob::{Below, Separator};
use crate::path::{escape, parent, ImagePath};
use crate::policy::Policy;
use crate::resolve::root::Root;
use crate::spec::ImageSpec;

/// The entries of a manifest, before they are split into segments.
struct Lowered {
    entries: Vec<Entry>,
    elf: Option<crate::resolve::elf::Resolution>,
    warnings: Vec<Warning>,
    /// The image's directory symlinks (merged /usr): link -> target.
    links: HashMap<Vec<u8>, Vec<u8>>,
}

/// How strongly an item claims its destination: an implied directory (a
/// parent, or one met while walking a tree) yields to a declared one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Claim {
    Declared,
    Implied,
}

#[derive(Clone, Debug)]
struct Item {
    dest: Vec<u8>,
    kind: Kind,
    mode: u32,
    uid: Option<u32>,
    gid: Option<u32>,
    mtime: Option<u32>,
    align: AlignHint,
    origin: Origin,
    claim: Claim,
}

impl Item {
    /// An entry a rule declares outright (not a directory met on a walk).
    fn declared(
        dest: Vec<u8>,
        kind: Kind,
        mode: u32,
        owner: (Option<u32>, Option<u32>),
        origin: Origin,
    ) -> Item {
        Item {
            dest,
            kind,
            mode,
            uid: owner.0,
            gid: owner.1,
            mtime: None,
            align: AlignHint::Default,
            origin,
            claim: Claim::Declared,
        }
    }
}

/// A document's rules of one kind, taken out of its manifest and given
/// out in the order they were written. The list shrinks as it empties, so
/// that the rules and the items made of them are not both held whole.
struct Queue<T>(Vec<Spanned<T>>);

impl<T> Queue<T> {
    fn new(mut rules: Vec<Spanned<T>>) -> Self {
        // Last written first: they are taken from the end.
        rules.sort_unstable_by_key(|r| std::cmp::Reverse(r.pos));
        Queue(rules)
    }

    fn next_pos(&self) -> Option<Pos> {
        self.0.last().map(|r| r.pos)
    }

    fn pop(&mut self) -> Spanned<T> {
        let r = self.0.pop().expect("a rule is left");
        if self.0.len() < self.0.capacity() / 2 {
            self.0.shrink_to_fit();
        }
        r
    }
}

/// The rules of a document that make entries, taken out of it: nothing
/// reads them after lowering.
struct Taken {
    binaries: Queue<String>,
    binary: Queue<super::model::BinaryRule>,
    file: Queue<super::model::FileRule>,
    dir: Queue<super::model::DirRule>,
    symlink: Queue<super::model::SymlinkRule>,
    hardlink: Queue<super::model::HardlinkRule>,
    node: Queue<super::model::NodeRule>,
    pipe: Queue<super::model::SpecialRule>,
    socket: Queue<super::model::SpecialRule>,
    tree: Queue<super::model::TreeRule>,
    glob: Queue<super::model::GlobRule>,
}

impl Taken {
    fn from(m: &mut super::model::Manifest) -> Taken {
        use std::mem::take;
        Taken {
            binaries: Queue::new(take(&mut m.binaries)),
            binary: Queue::new(take(&mut m.binary)),
            file: Queue::new(take(&mut m.file)),
            dir: Queue::new(take(&mut m.dir)),
            symlink: Queue::new(take(&mut m.symlink)),
            hardlink: Queue::new(take(&mut m.hardlink)),
            node: Queue::new(take(&mut m.node)),
            pipe: Queue::new(take(&mut m.pipe)),
            socket: Queue::new(take(&mut m.socket)),
            tree: Queue::new(take(&mut m.tree)),
            glob: Queue::new(take(&mut m.glob)),
        }
    }

    /// How many items the rules of one entry each make.
    fn items(&self) -> usize {
        self.file.0.len()
            + self.dir.0.len()
            + self.symlink.0.len()
            + self.node.0.len()
            + self.pipe.0.len()
            + self.socket.0.len()
    }
}

pub(super) struct Lowerer<'a> {
    loaded: &'a Loaded,
    root: Root,
    items: Vec<Item>,
    /// (link name, target image path, origin, where the target is named)
    hardlinks: Vec<(Vec<u8>, Vec<u8>, Origin, Origin)>,
    warnings: Vec<Warning>,
    /// Programs and libraries to resolve together once every rule is read.
    binary_requests: Vec<crate::resolve::elf::BinaryRequest>,
    file_modes: FileModes,
    dir_mode: u32,
    source_mtimes: bool,
    /// One shared copy of each fixed rule name ("dir", "symlink", ...) for
    /// the origins of the entries they make.
    words: Vec<(&'static str, Arc<str>)>,
}

/// A manifest path in normal form (see [`ImagePath::normalise`]).
fn normalise(path: &[u8], origin: &Origin) -> Result<Vec<u8>> {
    Ok(ImagePath::normalise(path, origin)?.into_bytes())
}

/// [`normalise`] of a path the caller owns: a path already in normal form
/// but for its leading `/` (as most are) keeps its allocation.
fn normalise_owned(mut path: Vec<u8>, origin: &Origin) -> Result<Vec<u8>> {
    let plain = path.len() > 1
        && path[0] == b'/'
        && path[1..]
            .split(|&b| b == b'/')
            .all(|c| !matches!(c, b"" | b"." | b".."));
    if !plain {
        return normalise(&path, origin);
    }
    path.remove(0);
    Ok(ImagePath::checked(path, origin)?.into_bytes())
}

fn clamp_mtime(t: i64) -> u32 {
    t.clamp(0, u32::MAX as i64) as u32
}

fn align_hint(spec: Option<AlignSpec>) -> AlignHint {
    match spec {
        None | Some(AlignSpec::Auto) => AlignHint::Default,
        Some(AlignSpec::None) => AlignHint::Never,
        Some(AlignSpec::Bytes(n)) => AlignHint::Bytes(n),
    }
}

fn compile_globs(pats: &[Spanned<String>], doc: &Doc) -> Result<Option<GlobSet>> {
    let pats: Vec<(String, Origin)> = pats
        .iter()
        .map(|p| (p.value.clone(), doc.origin(p.pos)))
        .collect();
    crate::glob::set(&pats, Separator::Literal, Below::Yes)
}

impl Lowerer<'_> {
    fn text(&self, doc: &Doc, t: &Spanned<PathText>) -> Result<Vec<u8>> {
        match std::str::from_utf8(&t.value.0) {
            Ok(s) => Ok(expand(s, t.pos, &doc.file, &self.loaded.vars)?.into_bytes()),
            Err(_) => Ok(t.value.0.clone()),
        }
    }

    /// [`Self::text`] of a rule's own path, keeping its bytes when there is
    /// nothing to expand.
    fn take_text(&self, doc: &Doc, t: Spanned<PathText>) -> Result<Spanned<Vec<u8>>> {
        let bytes = t.value.0;
        let value = match std::str::from_utf8(&bytes) {
            Ok(s) if s.contains("${") => {
                expand(s, t.pos, &doc.file, &self.loaded.vars)?.into_bytes()
            }
            _ => bytes,
        };
        Ok(Spanned::new(t.pos, value))
    }

    fn string(&self, doc: &Doc, t: &Spanned<String>) -> Result<String> {
        expand(t, t.pos, &doc.file, &self.loaded.vars)
    }

    /// Where a source lives on the host: an absolute path inside the root,
    /// a relative one beside the manifest that names it (for files that
    /// belong to the manifest, such as an /init script).
    fn source(&self, doc: &Doc, src: &[u8], pos: Pos) -> Result<PathBuf> {
        let path = Path::new(OsStr::from_bytes(src));
        if src.starts_with(b"/") {
            self.root
                .resolve(path, true)
                .map_err(|e| Error::at(doc.origin(pos), e.to_string()))
        } else {
            Ok(doc.dir.join(path))
        }
    }

    fn origin(doc: &Doc, pos: Pos, rule: &str) -> Origin {
        let mut o = doc.origin(pos);
        o.rule = Some(Arc::from(rule));
        o
    }

    /// [`Self::origin`] for a rule named by a fixed word, sharing one copy
    /// of the word between all its entries.
    fn word_origin(&mut self, doc: &Doc, pos: Pos, word: &'static str) -> Origin {
        let rule = match self.words.iter().find(|(w, _)| *w == word) {
            Some((_, name)) => name.clone(),
            None => {
                let name: Arc<str> = Arc::from(word);
                self.words.push((word, name.clone()));
                name
            }
        };
        let mut o = doc.origin(pos);
        o.rule = Some(rule);
        o
    }

    fn push(&mut self, item: Item) {
        self.items.push(item);
    }

    fn source_mtime(&self, meta: &std::fs::Metadata) -> Option<u32> {
        self.source_mtimes.then(|| clamp_mtime(meta.mtime()))
    }

    fn file_mode(&self, own: Option<super::model::Mode>, meta: &std::fs::Metadata) -> u32 {
        self.file_modes.of(own, meta)
    }

    /// An item for one filesystem object met by a tree or glob; `entry`'s
    /// metadata is an lstat, except for a tree's root given as a symlink.
    fn walked(
        &self,
        entry: &walkdir::DirEntry,
        meta: &std::fs::Metadata,
        dest: Vec<u8>,
        origin: &Origin,
        align: AlignHint,
    ) -> Result<Item> {
        let host = entry.path();
        let ft = meta.file_type();
        let (kind, mode, claim) = if ft.is_dir() {
            (Kind::Dir, meta.mode() & 0o7777, Claim::Implied)
        } else if ft.is_symlink() {
            let target = std::fs::read_link(host).map_err(|e| {
                Error::at(
                    origin.clone(),
                    format!("cannot read the symlink `{}`: {e}", host.display()),
                )
            })?;
            (
                Kind::Symlink {
                    target: target.as_os_str().as_bytes().to_vec(),
                },
                0o777,
                Claim::Declared,
            )
        } else if ft.is_file() {
            let st = crate::resolve::Stat {
                meta: meta.clone(),
                nofollow: !entry.path_is_symlink(),
            };
            let source = crate::resolve::file_source(host, &st, origin)?;
            (
                Kind::File {
                    source: source.into(),
                    links: vec![],
                },
                self.file_mode(None, meta),
                Claim::Declared,
            )
        } else if ft.is_fifo() {
            (Kind::Pipe, meta.mode() & 0o7777, Claim::Declared)
        } else if ft.is_socket() {
            (Kind::Socket, meta.mode() & 0o7777, Claim::Declared)
        } else {
            let rdev = meta.rdev();
            let kind = if ft.is_block_device() {
                DeviceKind::Block
            } else {
                DeviceKind::Char
            };
            let (major, minor) = (rustix::fs::major(rdev), rustix::fs::minor(rdev));
            (
                Kind::Node { kind, major, minor },
                meta.mode() & 0o7777,
                Claim::Declared,
            )
        };
        let mtime = match kind {
            Kind::File { .. } => None,
            _ => self.source_mtime(meta),
        };
        Ok(Item {
            dest,
            kind,
            mode,
            uid: None,
            gid: None,
            mtime,
            align,
            origin: origin.clone(),
            claim,
        })
    }

    fn rules(&mut self, doc: &Doc, mut t: Taken) -> Result<()> {
        if let Some(elf) = &doc.manifest.elf {
            for lib in &elf.libraries {
                let name = self.string(doc, lib)?;
                let origin = Self::origin(doc, lib.pos, &format!("library {name}"));
                self.binary_requests
                    .push(super::binaries::library(&name, origin));
            }
        }
        self.items.reserve(t.items());
        // Rules of every kind in the order they were written: the one
        // written first of those next in each kind.
        loop {
            let heads = [
                t.binaries.next_pos(),
                t.binary.next_pos(),
                t.file.next_pos(),
                t.dir.next_pos(),
                t.symlink.next_pos(),
                t.hardlink.next_pos(),
                t.node.next_pos(),
                t.pipe.next_pos(),
                t.socket.next_pos(),
                t.tree.next_pos(),
                t.glob.next_pos(),
            ];
            let Some((which, pos)) = heads
                .iter()
                .enumerate()
                .filter_map(|(i, p)| p.map(|p| (i, p)))
                .min_by_key(|&(i, p)| (p, i))
            else {
                return Ok(());
            };
            match which {
                0 => {
                    let name = self.string(doc, &t.binaries.pop())?;
                    let origin = Self::origin(doc, pos, &format!("binary {name}"));
                    self.binary(&name, false, origin)?;
                }
                1 => {
                    let r = t.binary.pop().value;
                    let name = self.string(doc, &r.name)?;
                    let origin = Self::origin(doc, pos, &format!("binary {name}"));
                    self.binary(&name, r.optional, origin)?;
                }
                2 => self.file(doc, pos, t.file.pop().value)?,
                3 => {
                    let r = t.dir.pop().value;
                    let path = self.take_text(doc, r.path)?;
                    let origin = self.word_origin(doc, pos, "dir");
                    let dest = normalise_owned(path.value, &doc.origin(path.pos))?;
                    self.push(Item::declared(
                        dest,
                        Kind::Dir,
                        r.mode.map_or(self.dir_mode, |m| m.0),
                        (r.uid, r.gid),
                        origin,
                    ));
                }
                4 => self.symlink(doc, pos, t.symlink.pop().value)?,
                5 => {
                    let r = t.hardlink.pop().value;
                    let origin = self.word_origin(doc, pos, "hardlink");
                    let path = self.take_text(doc, r.path)?;
                    let path = normalise_owned(path.value, &doc.origin(path.pos))?;
                    let target_at = self.word_origin(doc, r.target.pos, "hardlink");
                    let target = normalise_owned(self.take_text(doc, r.target)?.value, &target_at)?;
                    self.hardlinks.push((path, target, origin, target_at));
                }
                6 => {
                    let r = t.node.pop().value;
                    let origin = self.word_origin(doc, pos, "node");
                    let path = self.take_text(doc, r.path)?;
                    let dest = normalise_owned(path.value, &doc.origin(path.pos))?;
                    let kind = match r.kind {
                        super::model::NodeType::Char => DeviceKind::Char,
                        super::model::NodeType::Block => DeviceKind::Block,
                    };
                    let kind = Kind::Node {
                        kind,
                        major: r.major,
                        minor: r.minor,
                    };
                    let mode = r.mode.map_or(0o600, |m| m.0);
                    self.push(Item::declared(dest, kind, mode, (r.uid, r.gid), origin));
                }
                7 | 8 => {
                    let (r, kind, word) = match which {
                        7 => (t.pipe.pop().value, Kind::Pipe, "pipe"),
                        _ => (t.socket.pop().value, Kind::Socket, "socket"),
                    };
                    let origin = self.word_origin(doc, pos, word);
                    let path = self.take_text(doc, r.path)?;
                    let dest = normalise_owned(path.value, &doc.origin(path.pos))?;
                    self.push(Item::declared(
                        dest,
                        kind,
                        r.mode.map_or(0o644, |m| m.0),
                        (r.uid, r.gid),
                        origin,
                    ));
                }
                9 => self.tree(doc, pos, &t.tree.pop().value)?,
                _ => self.glob(doc, pos, &t.glob.pop().value)?,
            }
        }
    }

    fn file(&mut self, doc: &Doc, pos: Pos, r: super::model::FileRule) -> Result<()> {
        let src_at = r.src.pos;
        let src = self.take_text(doc, r.src)?.value;
        let origin = Self::origin(doc, pos, &format!("file {}", escape(&src)));
        let dst = r.dst.map(|d| self.take_text(doc, d)).transpose()?;
        let host = self.source(doc, &src, src_at)?;
        let st = match crate::resolve::stat(&host) {
            Ok(st) => st,
            Err(_) if r.optional => return Ok(()),
            Err(e) => {
                return Err(Error::at(
                    doc.origin(src_at),
                    format!("source `{}` cannot be read: {e}", escape(&src)),
                )
                .with_hint(format!(
                    "paths are looked up inside the root `{}`; set optional = true to skip a missing file",
                    self.root.path().display()
                )))
            }
        };
        if !st.meta.is_file() {
            return Err(Error::at(
                doc.origin(src_at),
                format!("source `{}` is not a regular file", escape(&src)),
            )
            .with_hint("use a [[tree]] for a directory, [[node]] for a device"));
        }
        let dest = match dst {
            Some(d) => normalise_owned(d.value, &doc.origin(d.pos))?,
            None => normalise_owned(src, &doc.origin(src_at))?,
        };
        let source = crate::resolve::file_source(&host, &st, &origin)?;
        let kind = Kind::File {
            source: source.into(),
            links: vec![],
        };
        let mode = self.file_mode(r.mode, &st.meta);
        let mut item = Item::declared(dest, kind, mode, (r.uid, r.gid), origin);
        item.align = align_hint(r.align);
        self.push(item);
        Ok(())
    }

    fn symlink(&mut self, doc: &Doc, pos: Pos, r: super::model::SymlinkRule) -> Result<()> {
        let path = self.take_text(doc, r.path)?;
        let target_at = r.target.pos;
        let target = self.take_text(doc, r.target)?.value;
        let origin = self.word_origin(doc, pos, "symlink");
        if target.is_empty() || target.len() + 1 > PATH_MAX {
            return Err(Error::at(
                doc.origin(target_at),
                "symlink target must be 1 to 4095 bytes",
            ));
        }
        if let Some(at) = target.iter().position(|&b| b == 0) {
            return Err(Error::at(
                doc.origin(target_at),
                format!(
                    "symlink target `{}` has a NUL byte at byte {}; the kernel reads \
                     a target up to its first NUL",
                    escape(&target),
                    at + 1
                ),
            )
            .with_hint("remove the NUL from the target"));
        }
        let dest = normalise_owned(path.value, &doc.origin(path.pos))?;
        self.push(Item::declared(
            dest,
            Kind::Symlink { target },
            r.mode.map_or(0o777, |m| m.0),
            (r.uid, r.gid),
            origin,
        ));
        Ok(())
    }

    fn tree(&mut self, doc: &Doc, pos: Pos, r: &super::model::TreeRule) -> Result<()> {
        let src = self.text(doc, &r.src)?;
        let origin = Self::origin(doc, pos, &format!("tree {}", escape(&src)));
        let dst = match &r.dst {
            Some(d) => self.text(doc, d)?,
            None => src.clone(),
        };
        let dst_at = r.dst.as_ref().map_or(r.src.pos, |d| d.pos);
        let dst = normalise(&dst, &doc.origin(dst_at))?;
        let host = self.source(doc, &src, r.src.pos)?;
        if !host.is_dir() {
            if r.optional && !host.exists() {
                return Ok(());
            }
            return Err(Error::at(
                doc.origin(r.src.pos),
                format!(
                    "tree source `{}` is not a directory inside the root",
                    escape(&src)
                ),
            )
            .with_hint(
                "use [[file]] for a single file; set optional = true to skip a missing tree",
            ));
        }
        let include = compile_globs(&r.include, doc)?;
        let exclude = compile_globs(&r.exclude, doc)?;
        let align = align_hint(r.align);
        let mut seen_inodes: HashMap<(u64, u64), Vec<u8>> = HashMap::new();
        let walker = walkdir::WalkDir::new(&host)
            .follow_links(false)
            .sort_by(|a, b| a.file_name().cmp(b.file_name()));
        let mut it = walker.into_iter();
        while let Some(next) = it.next() {
            let entry = next.map_err(|e| {
                Error::at(origin.clone(), format!("walking `{}`: {e}", host.display()))
            })?;
            let rel = entry.path().strip_prefix(&host).unwrap_or(Path::new(""));
            let rel_bytes = rel.as_os_str().as_bytes();
            let is_dir = entry.file_type().is_dir();
            if !rel_bytes.is_empty() {
                if exclude.as_ref().is_some_and(|g| g.is_match(rel)) {
                    if is_dir {
                        it.skip_current_dir();
                    }
                    continue;
                }
                if !is_dir && include.as_ref().is_some_and(|g| !g.is_match(rel)) {
                    continue;
                }
                if is_dir && include.is_some() {
                    continue; // created as parents of what is included
                }
            }
            let meta = entry.metadata().map_err(|e| {
                Error::at(
                    origin.clone(),
                    format!("reading `{}`: {e}", entry.path().display()),
                )
            })?;
            let mut dest = dst.clone();
            if !rel_bytes.is_empty() {
                if !dest.is_empty() {
                    dest.push(b'/');
                }
                dest.extend_from_slice(rel_bytes);
            }
            if dest.is_empty() {
                continue; // the image root itself
            }
            if meta.is_file() && meta.nlink() > 1 {
                let key = (meta.dev(), meta.ino());
                if let Some(first) = seen_inodes.get(&key) {
                    self.hardlinks
                        .push((dest, first.clone(), origin.clone(), origin.clone()));
                    continue;
                }
                seen_inodes.insert(key, dest.clone());
            }
            let item = self.walked(&entry, &meta, dest, &origin, align)?;
            crate::progress::advance(1);
            self.push(item);
        }
        Ok(())
    }

    fn glob(&mut self, doc: &Doc, pos: Pos, r: &super::model::GlobRule) -> Result<()> {
        let dst = match &r.dst {
            Some(d) => Some(normalise(&self.text(doc, d)?, &doc.origin(d.pos))?),
            None => None,
        };
        for pat in &r.patterns {
            let text = self.string(doc, pat)?;
            let origin = Self::origin(doc, pos, &format!("glob {text}"));
            if !text.starts_with('/') {
                return Err(Error::at(
                    doc.origin(pat.pos),
                    format!("glob `{text}` is not absolute"),
                )
                .with_hint("glob patterns start at the source root, e.g. \"/usr/lib/**/*.so\""));
            }
            let matcher = crate::glob::matcher(&text, Separator::Literal, &doc.origin(pat.pos))?;
            // The fixed leading directories: where the walk starts.
            let fixed: Vec<&str> = text
                .split('/')
                .take_while(|c| !c.contains(['*', '?', '[', '{', '\\']))
                .collect();
            let all: Vec<&str> = text.split('/').collect();
            let base = if fixed.len() == all.len() {
                fixed[..fixed.len() - 1].join("/")
            } else {
                fixed.join("/")
            };
            let base = if base.is_empty() {
                "/".to_string()
            } else {
                base
            };
            let host_base = self
                .root
                .resolve(Path::new(&base), true)
                .map_err(|e| Error::at(doc.origin(pat.pos), e.to_string()))?;
            let mut matched = 0;
            if host_base.is_dir() {
                for entry in walkdir::WalkDir::new(&host_base)
                    .follow_links(false)
                    .sort_by(|a, b| a.file_name().cmp(b.file_name()))
                    .into_iter()
                    .filter_map(|e| e.ok())
                {
                    let rel = entry
                        .path()
                        .strip_prefix(&host_base)
                        .unwrap_or(Path::new(""));
                    if rel.as_os_str().is_empty() {
                        continue;
                    }
                    let inside = Path::new(&base).join(rel);
                    if !matcher.is_match(&inside) {
                        continue;
                    }
                    let meta = entry.metadata().map_err(|e| {
                        Error::at(
                            origin.clone(),
                            format!("reading `{}`: {e}", entry.path().display()),
                        )
                    })?;
                    let dest = match &dst {
                        Some(d) => {
                            let mut p = d.clone();
                            if !p.is_empty() {
                                p.push(b'/');
                            }
                            p.extend_from_slice(rel.as_os_str().as_bytes());
                            p
                        }
                        None => normalise(inside.as_os_str().as_bytes(), &origin)?,
                    };
                    matched += 1;
                    let item = self.walked(&entry, &meta, dest, &origin, align_hint(r.align))?;
                    self.push(item);
                }
            }
            if matched == 0 && !r.optional {
                return Err(Error::at(doc.origin(pat.pos), format!("glob `{text}` matched nothing"))
                    .with_hint(format!(
                        "patterns are matched inside the root `{}`; set optional = true to allow no match",
                        self.root.path().display()
                    )));
            }
        }
        Ok(())
    }

    fn binary(&mut self, name: &str, optional: bool, origin: Origin) -> Result<()> {
        self.binary_requests
            .push(super::binaries::program(name, optional, origin));
        Ok(())
    }
}

/// Resolves `p` through the image's directory symlinks (merged /usr).
fn through_links(p: &[u8], links: &HashMap<Vec<u8>, Vec<u8>>) -> Vec<u8> {
    let mut cur = p.to_vec();
    for _ in 0..40 {
        let mut changed = false;
        let mut i = 0;
        while let Some(off) = cur[i..].iter().position(|&b| b == b'/') {
            let prefix = &cur[..i + off];
            if let Some(target) = links.get(prefix) {
                let mut next = target.clone();
                next.extend_from_slice(&cur[i + off..]);
                cur = next;
                changed = true;
                break;
            }
            i += off + 1;
        }
        if !changed {
            break;
        }
    }
    cur
}

fn describe(i: &Item) -> String {
    match &i.kind {
        Kind::File { source, .. } => format!("file from `{}`", source.path.display()),
        Kind::Symlink { target } => format!("symlink to `{}`", escape(target)),
        k => k.keyword().to_string(),
    }
}

fn same(a: &Item, b: &Item) -> bool {
    a.kind == b.kind && a.mode == b.mode && a.uid == b.uid && a.gid == b.gid
}

/// Lowers loaded documents to an image spec under `policy`.
/// The rules that make entries are taken out of `loaded` as they are read.
pub fn lower(loaded: &mut Loaded, policy: Policy) -> Result<ImageSpec> {
    let lowered = lower_entries(loaded, &policy)?;
    let loaded = &*loaded;
    let mut warnings = lowered.warnings;
    let mut rules = Rules::read(loaded, &mut warnings)?;
    let early = super::early::gather(loaded, &lowered.entries, &mut warnings)?;
    let (early_entries, scratch) = match early {
        Some(e) => {
            rules.take_early(&e.origin)?;
            (e.entries, e.scratch)
        }
        None => (Vec::new(), None),
    };
    let links = lowered.links;
    let merged =
        |p: &str| String::from_utf8_lossy(&through_links(p.as_bytes(), &links)).into_owned();
    let segments = rules.split(lowered.entries, early_entries, &merged, &mut warnings)?;
    Ok(ImageSpec {
        segments,
        policy,
        warnings,
        elf: lowered.elf,
        output: Some(loaded.output.clone()),
        _scratch: scratch,
    })
}

/// The manifest's own entries, in archive order.
fn lower_entries(loaded: &mut Loaded, policy: &Policy) -> Result<Lowered> {
    let taken: Vec<Taken> = loaded
        .docs
        .iter_mut()
        .map(|d| Taken::from(&mut d.manifest))
        .collect();
    let loaded = &*loaded;
    crate::progress::start(crate::progress::Step::Trees, 0);
    let d = &loaded.defaults;
    let fixed = policy.mtime.fixed;
    let file_modes = FileModes(d.file_mode.unwrap_or(ModeOrSource::Source));
    let mut lw = Lowerer {
        loaded,
        root: Root::new(&loaded.root),
        items: Vec::new(),
        hardlinks: Vec::new(),
        warnings: Vec::new(),
        binary_requests: Vec::new(),
        file_modes,
        dir_mode: d.dir_mode.map_or(0o755, |m| m.0),
        source_mtimes: fixed.is_none(),
        words: Vec::new(),
    };
    for (doc, t) in loaded.docs.iter().zip(taken) {
        lw.rules(doc, t)?;
    }
    let units = super::systemd::add_all(loaded)?;
    let mut requests = std::mem::take(&mut lw.binary_requests);
    requests.extend(units.programs);
    let mut warnings = units.warnings;
    let (binaries, elf) = super::binaries::add_all(
        &requests,
        &super::binaries::options(loaded),
        file_modes,
        &mut warnings,
    )?;
    let modules = super::modules::add_all(loaded, file_modes, &mut warnings)?;
    for a in units.added.into_iter().chain(binaries).chain(modules) {
        let dest = normalise(&a.dest, &a.origin)?;
        lw.push(Item::declared(dest, a.kind, a.mode, (None, None), a.origin));
    }
    lw.warnings.append(&mut warnings);
    let mut items = std::mem::take(&mut lw.items);

    // Merged /usr: rewrite destinations through directory symlinks of the image.
    let links = dir_links(&items);
    if !links.is_empty() {
        for i in &mut items {
            i.dest = through_links(&i.dest, &links);
        }
        for h in &mut lw.hardlinks {
            h.0 = through_links(&h.0, &links);
            h.1 = through_links(&h.1, &links);
        }
    }

    // Duplicates: merge identical ones, let declared directories win over
    // implied ones, report real conflicts (the first in manifest order).
    // The items are grouped by destination with an index sorted by it:
    // the first of each group is kept, in its place.
    let mut by_dest: Vec<u32> = (0..items.len() as u32).collect();
    by_dest.sort_unstable_by(|&a, &b| {
        (items[a as usize].dest.as_slice(), a).cmp(&(items[b as usize].dest.as_slice(), b))
    });
    let mut merged = vec![false; items.len()];
    let mut first_conflict: Option<(usize, Error)> = None;
    let mut g = 0;
    while g < by_dest.len() {
        let k = by_dest[g] as usize;
        let mut end = g + 1;
        while end < by_dest.len() && items[by_dest[end] as usize].dest == items[k].dest {
            end += 1;
        }
        let group = g..end;
        g = end;
        for r in group.skip(1).map(|i| by_dest[i] as usize) {
            let (head, tail) = items.split_at_mut(r);
            let (old, item) = (&mut head[k], &mut tail[0]);
            let conflict = if old.kind == Kind::Dir && item.kind == Kind::Dir {
                if item.claim == Claim::Declared && old.claim == Claim::Implied {
                    std::mem::swap(old, item);
                    false
                } else {
                    item.claim == Claim::Declared && !same(old, item)
                }
            } else {
                !same(old, item)
            };
            if conflict {
                if first_conflict.as_ref().is_none_or(|(at, _)| r < *at) {
                    first_conflict = Some((r, conflict_error(item, old)));
                }
                break;
            }
            merged[r] = true;
        }
    }
    if let Some((_, e)) = first_conflict {
        return Err(e);
    }
    let mut r = 0;
    items.retain(|_| {
        r += 1;
        !merged[r - 1]
    });
    drop(merged);
    items.shrink_to_fit();
    let mut kept = items;
    // The kept items by destination, and hardlink names.
    let mut by_dest: Vec<u32> = (0..kept.len() as u32).collect();
    by_dest.sort_unstable_by(|&a, &b| kept[a as usize].dest.cmp(&kept[b as usize].dest));
    let mut link_names: HashMap<Vec<u8>, usize> = HashMap::new();
    let find = |kept: &[Item], link_names: &HashMap<Vec<u8>, usize>, name: &[u8]| {
        by_dest
            .binary_search_by(|&i| kept[i as usize].dest.as_slice().cmp(name))
            .ok()
            .map(|i| by_dest[i] as usize)
            .or_else(|| link_names.get(name).copied())
    };

    // Hardlinks: each name joins the file it targets.
    for (name, target, origin, target_at) in std::mem::take(&mut lw.hardlinks) {
        let Some(k) = find(&kept, &link_names, &target) else {
            return Err(Error::at(
                target_at,
                format!(
                    "hardlink target `/{}` is not a file in the image",
                    escape(&target)
                ),
            )
            .with_hint("declare the file first (a [[file]], tree or glob)"));
        };
        if let Some(other) = find(&kept, &link_names, &name) {
            return Err(conflict_at(&origin, &name, &kept[other]));
        }
        match &mut kept[k].kind {
            Kind::File { links, .. } => links.push(ImagePath::checked(name.clone(), &origin)?),
            _ => {
                return Err(Error::at(
                    target_at,
                    format!(
                        "hardlink target `/{}` is not a regular file",
                        escape(&target)
                    ),
                ))
            }
        }
        link_names.insert(name, k);
    }

    // Parents: every missing directory above a name, made before it. An
    // item is written after those before it in `kept` (so a directory
    // declared later is not there yet in manifest order), and a parent made
    // for one item serves those after it.
    let parents = loaded.image.parents.unwrap_or(true);
    let order = loaded.image.order.unwrap_or(Order::Sorted);
    let uid = d.uid.unwrap_or(0);
    let gid = d.gid.unwrap_or(0);
    let entry = |i: Item| -> Entry {
        Entry {
            // Checked below, before any entry is made.
            name: ImagePath::generated(i.dest),
            mode: i.mode,
            uid: i.uid.unwrap_or(uid),
            gid: i.gid.unwrap_or(gid),
            mtime: fixed.or(i.mtime).or(match i.kind {
                Kind::File { .. } => None,
                _ => Some(0),
            }),
            kind: i.kind,
            align: i.align,
            origin: i.origin,
        }
    };
    // (the item it goes before, the directory)
    let mut made: Vec<(usize, Item)> = Vec::new();
    let mut implied: std::collections::HashSet<Vec<u8>> = std::collections::HashSet::new();
    for (k, item) in kept.iter().enumerate() {
        if parents {
            for name in names(item) {
                let mut missing = Vec::new();
                let mut p = parent(name);
                while let Some(dir) = p {
                    if dir.is_empty() {
                        break;
                    }
                    match find(&kept, &link_names, dir) {
                        Some(at) if at < k => break,
                        // Declared; sorting puts it first.
                        Some(at) if kept[at].kind == Kind::Dir && order == Order::Sorted => break,
                        Some(at) if kept[at].kind == Kind::Dir => {}
                        Some(_) => {
                            return Err(Error::at(
                                item.origin.clone(),
                                format!("`/{}` needs the directory `/{}`, but that path is not a directory in the image", escape(name), escape(dir)),
                            ))
                        }
                        None if implied.contains(dir) => break,
                        None => missing.push(dir.to_vec()),
                    }
                    p = parent(dir);
                }
                for dir in missing.into_iter().rev() {
                    if !implied.insert(dir.clone()) {
                        continue;
                    }
                    made.push((
                        k,
                        Item {
                            dest: dir,
                            kind: Kind::Dir,
                            mode: lw.dir_mode,
                            uid: None,
                            gid: None,
                            mtime: None,
                            align: AlignHint::Default,
                            origin: item.origin.clone(),
                            claim: Claim::Implied,
                        },
                    ));
                }
            }
        }
        ImagePath::check(&item.dest, &item.origin)?;
    }
    drop((by_dest, link_names, implied));
    // Made in place: an Item is no smaller than an Entry.
    let mut entries: Vec<Entry> = kept.into_iter().map(entry).collect();
    if order == Order::Sorted || made.is_empty() {
        entries.extend(made.into_iter().map(|(_, i)| entry(i)));
    } else {
        // Each made directory before the item it was made for: taken from
        // the front, the list shrunk as it empties.
        let mut all = Vec::with_capacity(entries.len() + made.len());
        entries.reverse();
        let mut made = made.into_iter().peekable();
        let mut k = 0;
        while let Some(e) = entries.pop() {
            if entries.len() < entries.capacity() / 2 {
                entries.shrink_to_fit();
            }
            while let Some((_, dir)) = made.next_if(|(at, _)| *at == k) {
                all.push(entry(dir));
            }
            all.push(e);
            k += 1;
        }
        entries = all;
    }
    if order == Order::Sorted {
        // A hardlink group sorts at its greatest name, after all its
        // parents. Names are unique: an unstable sort gives the one order,
        // without a copy.
        entries.sort_unstable_by(|a, b| a.names().max().cmp(&b.names().max()));
    }
    Ok(Lowered {
        entries,
        elf,
        warnings: lw.warnings,
        links,
    })
}

/// Every name of an item: its destination, and a file's hardlinks.
fn names(i: &Item) -> impl Iterator<Item = &[u8]> {
    let links: &[ImagePath] = match &i.kind {
        Kind::File { links, .. } => links,
        _ => &[],
    };
    std::iter::once(i.dest.as_slice()).chain(links.iter().map(|l| l.as_bytes()))
}

/// The image's directory symlinks (merged /usr): link -> target, for each
/// symlink to a directory of the image, or one that items are placed under.
fn dir_links(items: &[Item]) -> HashMap<Vec<u8>, Vec<u8>> {
    let dirs: std::collections::HashSet<&[u8]> = items
        .iter()
        .filter(|i| i.kind == Kind::Dir)
        .map(|i| i.dest.as_slice())
        .collect();
    // Every directory some item is placed under, and what each path is.
    let mut ancestors: std::collections::HashSet<&[u8]> = std::collections::HashSet::new();
    let mut non_dirs: std::collections::HashSet<&[u8]> = std::collections::HashSet::new();
    for i in items {
        let mut p = parent(&i.dest);
        while let Some(d) = p {
            if !ancestors.insert(d) {
                break;
            }
            p = parent(d);
        }
        if i.kind != Kind::Dir {
            non_dirs.insert(&i.dest);
        }
    }
    let mut links: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
    for i in items {
        if let Kind::Symlink { target } = &i.kind {
            let joined = if target.starts_with(b"/") {
                target.clone()
            } else {
                let mut j = parent(&i.dest).unwrap_or(b"").to_vec();
                j.push(b'/');
                j.extend_from_slice(target);
                j
            };
            if let Ok(t) = normalise(&joined, &i.origin) {
                // A link to a directory of the image, or one that entries are
                // placed under (its target then becomes their parent).
                let used = ancestors.contains(i.dest.as_slice());
                if dirs.contains(t.as_slice()) || (used && !non_dirs.contains(t.as_slice())) {
                    links.insert(i.dest.clone(), t);
                }
            }
        }
    }
    links
}

fn conflict_error(new: &Item, old: &Item) -> Error {
    Error::at(
        new.origin.clone(),
        format!(
            "`/{}` is declared twice: here as {} and at {} as {}",
            escape(&new.dest),
            describe(new),
            old.origin,
            describe(old)
        ),
    )
    .with_hint("remove one of them, or make both declare the same thing")
}

fn conflict_at(origin: &Origin, name: &[u8], old: &Item) -> Error {
    Error::at(
        origin.clone(),
        format!(
            "`/{}` is declared twice: here as a hardlink and at {} as {}",
            escape(name),
            old.origin,
            describe(old)
        ),
    )
    .with_hint("remove one of them")
}

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

    fn rules(&mut self, doc: &Doc) -> Result<()> {
        let m = &doc.manifest;
        // Every rule with its position, so rules of different kinds keep the
        // order they were written in.
        #[derive(Clone, Copy)]
        enum R {
            Binary(usize, bool),
            File(usize),
            Dir(usize),
            Symlink(usize),
            Hardlink(usize),
            Node(usize),
            Pipe(usize),
            Socket(usize),
            Tree(usize),
            Glob(usize),
        }
        let mut rules: Vec<(Pos, R)> = Vec::new();
        rules.extend(
            m.binaries
                .iter()
                .enumerate()
                .map(|(i, r)| (r.pos, R::Binary(i, true))),
        );
        rules.extend(
            m.binary
                .iter()
                .enumerate()
                .map(|(i, r)| (r.pos, R::Binary(i, false))),
        );
        rules.extend(m.file.iter().enumerate().map(|(i, r)| (r.pos, R::File(i))));
        rules.extend(m.dir.iter().enumerate().map(|(i, r)| (r.pos, R::Dir(i))));
        rules.extend(
            m.symlink
                .iter()
                .enumerate()
                .map(|(i, r)| (r.pos, R::Symlink(i))),
        );
        rules.extend(
            m.hardlink
                .iter()
                .enumerate()
                .map(|(i, r)| (r.pos, R::Hardlink(i))),
        );
        rules.extend(m.node.iter().enumerate().map(|(i, r)| (r.pos, R::Node(i))));
        rules.extend(m.pipe.iter().enumerate().map(|(i, r)| (r.pos, R::Pipe(i))));
        rules.extend(
            m.socket
                .iter()
                .enumerate()
                .map(|(i, r)| (r.pos, R::Socket(i))),
        );
        rules.extend(m.tree.iter().enumerate().map(|(i, r)| (r.pos, R::Tree(i))));
        rules.extend(m.glob.iter().enumerate().map(|(i, r)| (r.pos, R::Glob(i))));
        if let Some(elf) = &m.elf {
            for lib in &elf.libraries {
                let name = self.string(doc, lib)?;
                let origin = Self::origin(doc, lib.pos, &format!("library {name}"));
                self.binary_requests
                    .push(super::binaries::library(&name, origin));
            }
        }
        rules.sort_by_key(|(p, _)| *p);
        for (pos, rule) in rules {
            match rule {
                R::Binary(i, short) => {
                    let (name, optional) = if short {
                        (&m.binaries[i], false)
                    } else {
                        (&m.binary[i].name, m.binary[i].optional)
                    };
                    let name = self.string(doc, name)?;
                    self.binary(
                        &name,
                        optional,
                        Self::origin(doc, pos, &format!("binary {name}")),
                    )?;
                }
                R::File(i) => {
                    let r = &m.file[i].value;
                    let src = self.text(doc, &r.src)?;
                    let origin = Self::origin(doc, pos, &format!("file {}", escape(&src)));
                    let dst = match &r.dst {
                        Some(d) => self.text(doc, d)?,
                        None => src.clone(),
                    };
                    let host = self.source(doc, &src, r.src.pos)?;
                    let st = match crate::resolve::stat(&host) {
                        Ok(st) => st,
                        Err(_) if r.optional => continue,
                        Err(e) => {
                            return Err(Error::at(
                                doc.origin(r.src.pos),
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
                            doc.origin(r.src.pos),
                            format!("source `{}` is not a regular file", escape(&src)),
                        )
                        .with_hint("use a [[tree]] for a directory, [[node]] for a device"));
                    }
                    let dst_at = r.dst.as_ref().map_or(r.src.pos, |d| d.pos);
                    let dest = normalise(&dst, &doc.origin(dst_at))?;
                    let source = crate::resolve::file_source(&host, &st, &origin)?;
                    let kind = Kind::File {
                        source: source.into(),
                        links: vec![],
                    };
                    let mode = self.file_mode(r.mode, &st.meta);
                    let mut item = Item::declared(dest, kind, mode, (r.uid, r.gid), origin);
                    item.align = align_hint(r.align);
                    self.push(item);
                }
                R::Dir(i) => {
                    let r = &m.dir[i].value;
                    let path = self.text(doc, &r.path)?;
                    let origin = self.word_origin(doc, pos, "dir");
                    let dest = normalise(&path, &doc.origin(r.path.pos))?;
                    self.push(Item::declared(
                        dest,
                        Kind::Dir,
                        r.mode.map_or(self.dir_mode, |m| m.0),
                        (r.uid, r.gid),
                        origin,
                    ));
                }
                R::Symlink(i) => {
                    let r = &m.symlink[i].value;
                    let path = self.text(doc, &r.path)?;
                    let target = self.text(doc, &r.target)?;
                    let origin = self.word_origin(doc, pos, "symlink");
                    if target.is_empty() || target.len() + 1 > PATH_MAX {
                        return Err(Error::at(
                            doc.origin(r.target.pos),
                            "symlink target must be 1 to 4095 bytes",
                        ));
                    }
                    if let Some(at) = target.iter().position(|&b| b == 0) {
                        return Err(Error::at(
                            doc.origin(r.target.pos),
                            format!(
                                "symlink target `{}` has a NUL byte at byte {}; the kernel reads \
                                 a target up to its first NUL",
                                escape(&target),
                                at + 1
                            ),
                        )
                        .with_hint("remove the NUL from the target"));
                    }
                    let dest = normalise(&path, &doc.origin(r.path.pos))?;
                    self.push(Item::declared(
                        dest,
                        Kind::Symlink { target },
                        r.mode.map_or(0o777, |m| m.0),
                        (r.uid, r.gid),
                        origin,
                    ));
                }
                R::Hardlink(i) => {
                    let r = &m.hardlink[i].value;
                    let origin = self.word_origin(doc, pos, "hardlink");
                    let path = normalise(&self.text(doc, &r.path)?, &doc.origin(r.path.pos))?;
                    let target_at = self.word_origin(doc, r.target.pos, "hardlink");
                    let target = normalise(&self.text(doc, &r.target)?, &target_at)?;
                    self.hardlinks.push((path, target, origin, target_at));
                }
                R::Node(i) => {
                    let r = &m.node[i].value;
                    let origin = self.word_origin(doc, pos, "node");
                    let dest = normalise(&self.text(doc, &r.path)?, &doc.origin(r.path.pos))?;
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
                R::Pipe(i) | R::Socket(i) => {
                    let (r, kind, word) = match rule {
                        R::Pipe(_) => (&m.pipe[i].value, Kind::Pipe, "pipe"),
                        _ => (&m.socket[i].value, Kind::Socket, "socket"),
                    };
                    let origin = self.word_origin(doc, pos, word);
                    let dest = normalise(&self.text(doc, &r.path)?, &doc.origin(r.path.pos))?;
                    self.push(Item::declared(
                        dest,
                        kind,
                        r.mode.map_or(0o644, |m| m.0),
                        (r.uid, r.gid),
                        origin,
                    ));
                }
                R::Tree(i) => self.tree(doc, pos, &m.tree[i].value)?,
                R::Glob(i) => self.glob(doc, pos, &m.glob[i].value)?,
            }
        }
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
pub fn lower(loaded: &Loaded, policy: Policy) -> Result<ImageSpec> {
    let lowered = lower_entries(loaded, &policy)?;
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
fn lower_entries(loaded: &Loaded, policy: &Policy) -> Result<Lowered> {
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
    for doc in &loaded.docs {
        lw.rules(doc)?;
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
    // implied ones, report real conflicts. In place: the first `kept`
    // items are the ones kept, in their order.
    let mut index: HashMap<Vec<u8>, usize> = HashMap::with_capacity(items.len());
    let mut kept = 0;
    for r in 0..items.len() {
        let Some(&k) = index.get(&items[r].dest) else {
            index.insert(items[r].dest.clone(), kept);
            items.swap(kept, r);
            kept += 1;
            continue;
        };
        // k < kept <= r: the item kept before, and this one.
        let (head, tail) = items.split_at_mut(r);
        let (old, item) = (&mut head[k], &mut tail[0]);
        if old.kind == Kind::Dir && item.kind == Kind::Dir {
            if item.claim == Claim::Declared && old.claim == Claim::Implied {
                std::mem::swap(old, item);
            } else if item.claim == Claim::Declared && !same(old, item) {
                return Err(conflict(item, old));
            }
            continue;
        }
        if !same(old, item) {
            return Err(conflict(item, old));
        }
    }
    items.truncate(kept);
    let mut kept = items;

    // Hardlinks: each name joins the file it targets.
    for (name, target, origin, target_at) in std::mem::take(&mut lw.hardlinks) {
        let Some(&k) = index.get(&target) else {
            return Err(Error::at(
                target_at,
                format!(
                    "hardlink target `/{}` is not a file in the image",
                    escape(&target)
                ),
            )
            .with_hint("declare the file first (a [[file]], tree or glob)"));
        };
        if let Some(&other) = index.get(&name) {
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
        index.insert(name, k);
    }

    // Parents, and the entries. `index` names every path of a kept item
    // (hardlink names too); what is written so far is `emitted` for those
    // and `implied` for the parents created here.
    let parents = loaded.image.parents.unwrap_or(true);
    let order = loaded.image.order.unwrap_or(Order::Sorted);
    let is_dir: Vec<bool> = kept.iter().map(|i| i.kind == Kind::Dir).collect();
    let mut emitted = vec![false; kept.len()];
    let mut implied: std::collections::HashSet<Vec<u8>> = std::collections::HashSet::new();
    let uid = d.uid.unwrap_or(0);
    let gid = d.gid.unwrap_or(0);
    let entry = |i: Item| -> Result<Entry> {
        Ok(Entry {
            name: ImagePath::checked(i.dest, &i.origin)?,
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
        })
    };
    let mut entries: Vec<Entry> = Vec::with_capacity(kept.len());
    // Taken from the front, and the list shrunk as it empties, so that the
    // items and the entries made of them are not both held whole.
    kept.reverse();
    let mut k = 0;
    while let Some(item) = kept.pop() {
        if kept.len() < kept.capacity() / 2 {
            kept.shrink_to_fit();
        }
        if parents {
            for name in names(&item) {
                let mut missing = Vec::new();
                let mut p = parent(name);
                while let Some(dir) = p {
                    if dir.is_empty() {
                        break;
                    }
                    match index.get(dir) {
                        Some(&at) if emitted[at] => break,
                        // Declared; sorting puts it first.
                        Some(&at) if is_dir[at] && order == Order::Sorted => break,
                        Some(&at) if is_dir[at] => {}
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
                    entries.push(entry(Item {
                        dest: dir,
                        kind: Kind::Dir,
                        mode: lw.dir_mode,
                        uid: None,
                        gid: None,
                        mtime: None,
                        align: AlignHint::Default,
                        origin: item.origin.clone(),
                        claim: Claim::Implied,
                    })?);
                }
            }
        }
        emitted[k] = true;
        k += 1;
        entries.push(entry(item)?);
    }
    drop((index, implied));
    if order == Order::Sorted {
        // A hardlink group sorts at its greatest name, after all its parents.
        entries.sort_by(|a, b| a.names().max().cmp(&b.names().max()));
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

fn conflict(new: &Item, old: &Item) -> Error {
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

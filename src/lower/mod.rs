//! Lowering: from manifest rules to gen_init_cpio-level entries. What each
//! section of a manifest means for the image lives here; the format itself
//! (and how documents compose) in [`crate::manifest`].
//!
//! * this file: rules to entries (trees, globs, binaries, parents, merged
//!   /usr), and the order of the steps below;
//! * `binaries`, `modules`: what `binaries` and module rules add (`item`);
//! * `omit`: what `[omit]` takes out of what earlier documents selected;
//! * `segments`, `early`: `[[segment]]` and `[early]`;
//! * `systemd` (with `systemd_layers`, `systemd_handover`), `stack`:
//!   `[systemd]`, and `[stack]` (the running root's block stack, which
//!   `[[module]] rootfs` reads too);
//! * `keys`: the secrets an image holds (which make it private);
//! * `coldplug`: what each init learns of its cold plug from the build (none
//!   is needed when the image's /init loads every module it holds);
//! * `console`: `[console]` (the keymap and font loaded before a prompt).
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

mod arch;
mod binaries;
mod coldplug;
mod console;
mod early;
mod item;
mod keys;
mod modules;
mod omit;
mod segments;
mod stack;
mod systemd;
mod systemd_handover;
mod systemd_layers;

pub use early::DEFAULT_ACPI_DIR;
pub(crate) use stack::is_key_path;

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use globset::GlobSet;

use crate::entry::{AlignHint, DeviceKind, Entry, Kind, Origin, PATH_MAX};
use crate::error::{Error, Result, Warning};
use crate::glob::{Below, Separator};
use crate::manifest::de::Spanned;
use crate::manifest::load::{expand, Doc, Loaded};
use crate::manifest::model::{AlignSpec, ModeOrSource, Order, PathText};
use crate::manifest::node::Pos;
use crate::path::{escape, parent, ImagePath};
use crate::policy::Policy;
use crate::resolve::root::Root;
use crate::spec::ImageSpec;
use item::FileModes;
use segments::Rules;

/// The entries of a manifest, before they are split into segments.
struct Lowered {
    entries: Vec<Entry>,
    elf: Option<crate::resolve::elf::Resolution>,
    warnings: Vec<Warning>,
    /// The image's directory symlinks (merged /usr): link -> target.
    links: HashMap<Vec<u8>, Vec<u8>>,
    /// The files rules mark secret, by name, with the rule of each.
    secrets: Vec<(Vec<u8>, Origin)>,
    /// What `[omit]` took out.
    omitted: Vec<crate::spec::Omitted>,
}

/// How strongly an entry claims its name: an implied directory (a parent,
/// or one met while walking a tree) yields to a declared one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Claim {
    Declared,
    Implied,
}

/// The entries the rules make, in the order they are made, and how
/// strongly each claims its name (kept beside them: an entry is what the
/// image holds, and there are many).
#[derive(Default)]
struct Made {
    entries: Vec<Entry>,
    claims: Vec<Claim>,
}

impl Made {
    fn reserve(&mut self, n: usize) {
        self.entries.reserve(n);
        self.claims.reserve(n);
    }

    fn push(&mut self, entry: Entry, claim: Claim) {
        self.entries.push(entry);
        self.claims.push(claim);
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
    binary: Queue<crate::manifest::model::BinaryRule>,
    file: Queue<crate::manifest::model::FileRule>,
    dir: Queue<crate::manifest::model::DirRule>,
    symlink: Queue<crate::manifest::model::SymlinkRule>,
    hardlink: Queue<crate::manifest::model::HardlinkRule>,
    node: Queue<crate::manifest::model::NodeRule>,
    pipe: Queue<crate::manifest::model::SpecialRule>,
    socket: Queue<crate::manifest::model::SpecialRule>,
    tree: Queue<crate::manifest::model::TreeRule>,
    glob: Queue<crate::manifest::model::GlobRule>,
}

impl Taken {
    fn from(m: &mut crate::manifest::model::Manifest) -> Taken {
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
    made: Made,
    /// (link name, target image path, origin, where the target is named)
    hardlinks: Vec<(Vec<u8>, Vec<u8>, Origin, Origin)>,
    warnings: Vec<Warning>,
    /// Programs and libraries to resolve together once every rule is read.
    binary_requests: Vec<crate::resolve::elf::BinaryRequest>,
    file_modes: FileModes,
    dir_mode: u32,
    /// `defaults.uid` and `gid`: the owner of entries that name none.
    owner: (u32, u32),
    /// The mtime every entry gets (`SOURCE_DATE_EPOCH`, `mtime = N`); None:
    /// each file's own, and 0 for what has no source.
    fixed: Option<u32>,
    /// An origin of each fixed rule name ("dir", "symlink", ...) of each
    /// document, whose place the entries they make share.
    words: Vec<(&'static str, Origin)>,
    /// The regular files made by rules marked `secret = true` (names
    /// before merged /usr rewriting), with their rule.
    secrets: Vec<(Vec<u8>, Origin)>,
}

/// A manifest path in normal form (see [`ImagePath::normalise`]).
fn normalise(path: &[u8], origin: &Origin) -> Result<Vec<u8>> {
    Ok(ImagePath::normalise(path, origin)?.into_bytes())
}

/// [`ImagePath::normalise`] of a path the caller owns, without a copy for
/// one already in normal form but for its leading `/` (as most are).
fn normalise_owned(mut path: Vec<u8>, origin: &Origin) -> Result<ImagePath> {
    let plain = path.len() > 1
        && path[0] == b'/'
        && path[1..]
            .split(|&b| b == b'/')
            .all(|c| !matches!(c, b"" | b"." | b".."));
    if !plain {
        return ImagePath::normalise(&path, origin);
    }
    path.remove(0);
    ImagePath::checked(path, origin)
}

fn clamp_mtime(t: i64) -> u32 {
    t.clamp(0, u32::MAX as i64) as u32
}

fn align_hint(spec: Option<AlignSpec>) -> AlignHint {
    match spec {
        None | Some(AlignSpec::Auto) => AlignHint::Default,
        Some(AlignSpec::None) => AlignHint::Never,
        Some(AlignSpec::Bytes(n)) => AlignHint::bytes(n),
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
            Ok(s) => Ok(expand(s, t.pos, doc, &self.loaded.vars)?.into_bytes()),
            Err(_) => Ok(t.value.0.to_vec()),
        }
    }

    /// [`Self::text`] of a rule's own path, keeping its bytes when there is
    /// nothing to expand.
    fn take_text(&self, doc: &Doc, t: Spanned<PathText>) -> Result<Spanned<Vec<u8>>> {
        let bytes = t.value.0;
        let value = match std::str::from_utf8(&bytes) {
            Ok(s) if s.contains("${") => expand(s, t.pos, doc, &self.loaded.vars)?.into_bytes(),
            _ => bytes.into_vec(),
        };
        Ok(Spanned::new(t.pos, value))
    }

    fn string(&self, doc: &Doc, t: &Spanned<String>) -> Result<String> {
        expand(t, t.pos, doc, &self.loaded.vars)
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
        doc.origin(pos).with_rule(rule)
    }

    /// [`Self::origin`] for a rule named by a fixed word: the entries of
    /// one document's rules of that word share one place.
    fn word_origin(&mut self, doc: &Doc, pos: Pos, word: &'static str) -> Origin {
        let known = self
            .words
            .iter()
            .find(|(w, o)| *w == word && Arc::ptr_eq(o.file(), doc.origin_file()));
        match known {
            Some((_, o)) => o.at(pos.line, pos.column),
            None => {
                let o = Self::origin(doc, pos, word);
                self.words.push((word, o.clone()));
                o
            }
        }
    }

    /// An entry a rule declares outright (not a directory met on a walk),
    /// with the defaults for what the rule does not say.
    fn declared(
        &self,
        name: ImagePath,
        kind: Kind,
        mode: u32,
        owner: (Option<u32>, Option<u32>),
        origin: Origin,
    ) -> Entry {
        let mut e = self.entry(name, kind, mode, origin, None);
        e.uid = owner.0.unwrap_or(e.uid);
        e.gid = owner.1.unwrap_or(e.gid);
        e
    }

    /// Adds an entry a rule declares.
    fn declare(&mut self, e: Entry) {
        self.made.push(e, Claim::Declared);
    }

    /// An entry with the defaults; `mtime` as the source has it (None: a
    /// file's is its source's, anything else 0), unless the build fixes one.
    fn entry(
        &self,
        name: ImagePath,
        kind: Kind,
        mode: u32,
        origin: Origin,
        mtime: Option<u32>,
    ) -> Entry {
        let mtime = self.fixed.or(mtime).or(match kind {
            Kind::File { .. } => None,
            _ => Some(0),
        });
        Entry {
            name,
            kind,
            mode,
            uid: self.owner.0,
            gid: self.owner.1,
            mtime,
            align: AlignHint::Default,
            origin,
        }
    }

    fn source_mtime(&self, meta: &std::fs::Metadata) -> Option<u32> {
        self.fixed.is_none().then(|| clamp_mtime(meta.mtime()))
    }

    fn file_mode(
        &self,
        own: Option<crate::manifest::model::Mode>,
        meta: &std::fs::Metadata,
    ) -> u32 {
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
    ) -> Result<(Entry, Claim)> {
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
                    target: target.as_os_str().as_bytes().into(),
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
                    links: crate::entry::Links::default(),
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
        let name = ImagePath::checked(dest, origin)?;
        let mut e = self.entry(name, kind, mode, origin.clone(), mtime);
        e.align = align;
        Ok((e, claim))
    }

    fn rules(&mut self, doc: &Doc, mut t: Taken) -> Result<()> {
        if let Some(elf) = &doc.manifest.elf {
            let libs = elf.libraries.iter().map(|l| (l, false));
            let if_present = elf.libraries_if_present.iter().map(|l| (l, true));
            for (lib, if_present) in libs.chain(if_present) {
                let pattern = self.string(doc, lib)?;
                let at = Self::origin(doc, lib.pos, &format!("library {pattern}"));
                let names = binaries::expand_library(&self.root, &pattern, &at)?;
                if names.is_empty() && !if_present {
                    return Err(Error::at(
                        at,
                        format!("library pattern `{pattern}` names no file in the root"),
                    )
                    .with_hint("use libraries_if_present for libraries a root may lack"));
                }
                for name in names {
                    let origin = Self::origin(doc, lib.pos, &format!("library {name}"));
                    self.binary_requests
                        .push(binaries::library(&name, if_present, origin));
                }
            }
        }
        self.made.reserve(t.items());
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
                    if r.applet && self.applet(&name, &origin)? {
                        continue;
                    }
                    self.binary(&name, r.optional, origin)?;
                }
                2 => self.file(doc, pos, t.file.pop().value)?,
                3 => {
                    let r = t.dir.pop().value;
                    let path = self.take_text(doc, r.path)?;
                    let origin = self.word_origin(doc, pos, "dir");
                    let name = normalise_owned(path.value, &doc.origin(path.pos))?;
                    let mode = r.mode.map_or(self.dir_mode, |m| m.0);
                    let e = self.declared(name, Kind::Dir, mode, (r.uid, r.gid), origin);
                    self.declare(e);
                }
                4 => self.symlink(doc, pos, t.symlink.pop().value)?,
                5 => {
                    let r = t.hardlink.pop().value;
                    let origin = self.word_origin(doc, pos, "hardlink");
                    let path = self.take_text(doc, r.path)?;
                    let path = normalise_owned(path.value, &doc.origin(path.pos))?.into_bytes();
                    let target_at = self.word_origin(doc, r.target.pos, "hardlink");
                    let target = self.take_text(doc, r.target)?.value;
                    let target = normalise_owned(target, &target_at)?.into_bytes();
                    self.hardlinks.push((path, target, origin, target_at));
                }
                6 => {
                    let r = t.node.pop().value;
                    let origin = self.word_origin(doc, pos, "node");
                    let path = self.take_text(doc, r.path)?;
                    let name = normalise_owned(path.value, &doc.origin(path.pos))?;
                    let kind = match r.kind {
                        crate::manifest::model::NodeType::Char => DeviceKind::Char,
                        crate::manifest::model::NodeType::Block => DeviceKind::Block,
                    };
                    let kind = Kind::Node {
                        kind,
                        major: r.major,
                        minor: r.minor,
                    };
                    let mode = r.mode.map_or(0o600, |m| m.0);
                    let e = self.declared(name, kind, mode, (r.uid, r.gid), origin);
                    self.declare(e);
                }
                7 | 8 => {
                    let (r, kind, word) = match which {
                        7 => (t.pipe.pop().value, Kind::Pipe, "pipe"),
                        _ => (t.socket.pop().value, Kind::Socket, "socket"),
                    };
                    let origin = self.word_origin(doc, pos, word);
                    let path = self.take_text(doc, r.path)?;
                    let name = normalise_owned(path.value, &doc.origin(path.pos))?;
                    let mode = r.mode.map_or(0o644, |m| m.0);
                    let e = self.declared(name, kind, mode, (r.uid, r.gid), origin);
                    self.declare(e);
                }
                9 => self.tree(doc, pos, &t.tree.pop().value)?,
                _ => self.glob(doc, pos, &t.glob.pop().value)?,
            }
        }
    }

    fn file(&mut self, doc: &Doc, pos: Pos, r: crate::manifest::model::FileRule) -> Result<()> {
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
                .with_fix(
                    format!(
                        "paths are looked up inside the root `{}`; set optional = true to skip a missing file",
                        self.root.path().display()
                    ),
                    &omit::omit_line("files", dst.as_ref().map_or(&src, |d| &d.value)),
                ))
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
            links: crate::entry::Links::default(),
        };
        let mode = self.file_mode(r.mode, &st.meta);
        let mut e = self.declared(dest, kind, mode, (r.uid, r.gid), origin);
        e.align = align_hint(r.align);
        if r.secret {
            self.secret(&e);
        }
        self.declare(e);
        Ok(())
    }

    fn symlink(
        &mut self,
        doc: &Doc,
        pos: Pos,
        r: crate::manifest::model::SymlinkRule,
    ) -> Result<()> {
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
        let name = normalise_owned(path.value, &doc.origin(path.pos))?;
        let kind = Kind::Symlink {
            target: target.into(),
        };
        let mode = r.mode.map_or(0o777, |m| m.0);
        let e = self.declared(name, kind, mode, (r.uid, r.gid), origin);
        self.declare(e);
        Ok(())
    }

    fn tree(&mut self, doc: &Doc, pos: Pos, r: &crate::manifest::model::TreeRule) -> Result<()> {
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
            .with_fix(
                "use [[file]] for a single file; set optional = true to skip a missing tree",
                &omit::omit_line("files", &dst),
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
            let (e, claim) = self.walked(&entry, &meta, dest, &origin, align)?;
            if r.secret {
                self.secret(&e);
            }
            crate::progress::advance(1);
            self.made.push(e, claim);
        }
        Ok(())
    }

    fn glob(&mut self, doc: &Doc, pos: Pos, r: &crate::manifest::model::GlobRule) -> Result<()> {
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
                    let (e, claim) =
                        self.walked(&entry, &meta, dest, &origin, align_hint(r.align))?;
                    if r.secret {
                        self.secret(&e);
                    }
                    self.made.push(e, claim);
                }
            }
            if matched == 0 && !r.optional {
                return Err(Error::at(doc.origin(pat.pos), format!("glob `{text}` matched nothing"))
                    .with_fix(
                        format!(
                            "patterns are matched inside the root `{}`; set optional = true to allow no match",
                            self.root.path().display()
                        ),
                        &omit::omit_line("files", text.as_bytes()),
                    ));
            }
        }
        Ok(())
    }

    /// Notes `e` as a secret when it is a regular file (what a secret tree
    /// or glob also takes, its directories and symlinks, is none).
    fn secret(&mut self, e: &Entry) {
        if matches!(e.kind, Kind::File { .. }) {
            self.secrets.push((e.name.to_vec(), e.origin.clone()));
        }
    }

    /// Busybox's applet for program `name` when the root lacks the program
    /// (`[[binary]] applet = true`): busybox and a link to it, said; false
    /// when the root has the program or its busybox no such applet.
    fn applet(&mut self, name: &str, origin: &Origin) -> Result<bool> {
        let search = binaries::options(self.loaded).search_path;
        let Some(a) = binaries::applet(&self.root, &search, name) else {
            return Ok(false);
        };
        let (busybox, link) = (a.busybox.display(), a.link.display());
        let origin = origin.with_rule(format!("busybox's applet {name}"));
        self.binary(&busybox.to_string(), false, origin.clone())?;
        let path = normalise_owned(link.to_string().into_bytes(), &origin)?;
        let kind = Kind::Symlink {
            target: b"busybox".as_slice().into(),
        };
        let e = self.declared(path, kind, 0o777, (None, None), origin.clone());
        self.declare(e);
        self.warnings.push(Warning {
            origin: Some(origin),
            message: format!(
                "the root has no `{name}` program: busybox's applet taken ({link} -> busybox)"
            ),
            details: Vec::new(),
        });
        Ok(true)
    }

    fn binary(&mut self, name: &str, optional: bool, origin: Origin) -> Result<()> {
        self.binary_requests
            .push(binaries::program(name, optional, origin));
        Ok(())
    }
}

/// Resolves `p` through the image's directory symlinks (merged /usr).
fn through_links(p: &[u8], links: &HashMap<Vec<u8>, Vec<u8>>) -> Vec<u8> {
    through_links_changed(p, links).unwrap_or_else(|| p.to_vec())
}

/// [`through_links`], None when no link applies.
fn through_links_changed(p: &[u8], links: &HashMap<Vec<u8>, Vec<u8>>) -> Option<Vec<u8>> {
    let mut changed: Option<Vec<u8>> = None;
    for _ in 0..40 {
        let cur = changed.as_deref().unwrap_or(p);
        let mut next = None;
        let mut i = 0;
        while let Some(off) = cur[i..].iter().position(|&b| b == b'/') {
            let prefix = &cur[..i + off];
            if let Some(target) = links.get(prefix) {
                let mut n = target.clone();
                n.extend_from_slice(&cur[i + off..]);
                next = Some(n);
                break;
            }
            i += off + 1;
        }
        match next {
            Some(n) => changed = Some(n),
            None => break,
        }
    }
    changed
}

fn describe(e: &Entry) -> String {
    match &e.kind {
        Kind::File { source, .. } => format!("file from `{}`", source.path.display()),
        Kind::Symlink { target } => format!("symlink to `{}`", escape(target)),
        k => k.keyword().to_string(),
    }
}

fn same(a: &Entry, b: &Entry) -> bool {
    a.kind == b.kind && a.mode == b.mode && a.uid == b.uid && a.gid == b.gid
}

/// Lowers loaded documents to an image spec under `policy`.
/// The rules that make entries are taken out of `loaded` as they are read.
pub fn lower(loaded: &mut Loaded, policy: Policy) -> Result<ImageSpec> {
    let lowered = lower_entries(loaded, &policy)?;
    let loaded = &*loaded;
    let mut warnings = lowered.warnings;
    let mut rules = Rules::read(loaded, &mut warnings)?;
    let early = early::gather(loaded, &lowered.entries, &mut warnings)?;
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
    let secrets = keys::held(&lowered.entries, &lowered.secrets);
    for s in &secrets {
        warnings.push(Warning {
            origin: Some(s.origin.clone()),
            message: s.warning(),
            details: Vec::new(),
        });
    }
    let segments = rules.split(lowered.entries, early_entries, &merged, &mut warnings)?;
    Ok(ImageSpec {
        segments,
        policy,
        warnings,
        elf: lowered.elf,
        output: Some(loaded.output.clone()),
        private: !secrets.is_empty(),
        max_size: loaded.max_size.clone(),
        omitted: lowered.omitted,
        init_choice: loaded.init_choice.clone(),
        arch: Some(crate::spec::TargetArch {
            arch: loaded.arch,
            left_out: arch::left_out_by_arch(loaded)?,
        }),
        target: Some(crate::spec::BootTarget {
            root: loaded.root.clone(),
            kver: loaded.vars.get("kver").cloned().unwrap_or_default(),
            kmoddir: loaded.kmoddir.clone(),
            hostonly: stack::from_root(loaded),
            uki: loaded.uki.clone(),
            arch: loaded.arch,
        }),
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
    let file_modes = FileModes(d.file_mode.unwrap_or(ModeOrSource::Source));
    let mut lw = Lowerer {
        loaded,
        root: Root::new(&loaded.root),
        made: Made::default(),
        hardlinks: Vec::new(),
        warnings: Vec::new(),
        binary_requests: Vec::new(),
        file_modes,
        dir_mode: d.dir_mode.map_or(0o755, |m| m.0),
        owner: (d.uid.unwrap_or(0), d.gid.unwrap_or(0)),
        fixed: policy.mtime.fixed,
        words: Vec::new(),
        secrets: Vec::new(),
    };
    for (doc, t) in loaded.docs.iter().zip(taken) {
        lw.rules(doc, t)?;
    }
    let mut omits = omit::Omits::read(loaded)?;
    let mut omitted = Vec::new();
    let units = systemd::add_all(loaded)?;
    let stack = stack::add_all(loaded)?;
    let console = console::add_all(loaded)?;
    let mut requests = std::mem::take(&mut lw.binary_requests);
    requests.extend(units.programs);
    requests.extend(stack.programs);
    requests.extend(console.programs);
    if omits.has_files() {
        // A program left out before it is resolved: its libraries go too,
        // unless something else loads them.
        let search = binaries::options(loaded).search_path;
        requests.retain(|r| omits.keep_program(loaded, &lw.root, &search, r, &mut omitted));
    }
    let mut warnings = units.warnings;
    warnings.extend(stack.warnings);
    warnings.extend(console.warnings);
    let (binaries, elf) = binaries::add_all(
        &requests,
        &binaries::options(loaded),
        file_modes,
        &mut warnings,
    )?;
    let mut modules = modules::add_all(loaded, &omits, file_modes, &mut warnings)?;
    omitted.append(&mut modules.omitted);
    let coldplug = coldplug::add(loaded, modules.list_loads_all)?;
    for a in units
        .added
        .into_iter()
        .chain(stack.added)
        .chain(console.added)
        .chain(binaries)
        .chain(modules.added)
        .chain(coldplug)
    {
        let name = ImagePath::normalise(&a.dest, &a.origin)?;
        let e = lw.declared(name, a.kind, a.mode, (None, None), a.origin);
        lw.declare(e);
    }
    lw.warnings.append(&mut warnings);
    let Made {
        mut entries,
        mut claims,
    } = std::mem::take(&mut lw.made);

    // The entries by name (then in the order made): for the directory
    // symlinks, the duplicates and the lookups below.
    let by_name = |entries: &[Entry]| {
        let mut by_name: Vec<u32> = (0..entries.len() as u32).collect();
        by_name.sort_unstable_by(|&a, &b| {
            (entries[a as usize].name.as_bytes(), a).cmp(&(entries[b as usize].name.as_bytes(), b))
        });
        by_name
    };
    let mut by_dest = by_name(&entries);

    // Merged /usr: rewrite names through directory symlinks of the image
    // (segment patterns through all of them; names through those that
    // entries are placed under).
    let patterns = loaded
        .docs
        .iter()
        .any(|d| d.manifest.segment.iter().any(|s| !s.paths.is_empty()));
    let links = dir_links(&entries, &by_dest, patterns);
    if !links.is_empty() {
        for e in &mut entries {
            if let Some(p) = through_links_changed(&e.name, &links) {
                e.name = ImagePath::checked(p, &e.origin)?;
            }
        }
        for h in &mut lw.hardlinks {
            h.0 = through_links(&h.0, &links);
            h.1 = through_links(&h.1, &links);
        }
        by_dest = by_name(&entries);
    }

    // `[omit] files`: what the rules of a document and those before it put
    // at a path it names (as written, or through the directory links).
    if omits.has_files() {
        omits.rewrite_files(|p| {
            through_links_changed(p.as_bytes(), &links)
                .map(|r| String::from_utf8_lossy(&r).into_owned())
        })?;
        let keep = omits.keep_files(loaded, &entries, &mut omitted);
        if keep.contains(&false) {
            let mut i = 0;
            entries.retain(|_| {
                i += 1;
                keep[i - 1]
            });
            let mut i = 0;
            claims.retain(|_| {
                i += 1;
                keep[i - 1]
            });
            by_dest = by_name(&entries);
        }
    }

    // Duplicates: merge identical ones, let declared directories win over
    // implied ones, report real conflicts (the first in manifest order).
    // The first of each group of one name is kept, in its place.
    let mut merged = vec![false; entries.len()];
    let mut first_conflict: Option<(usize, Error)> = None;
    let mut g = 0;
    while g < by_dest.len() {
        let k = by_dest[g] as usize;
        let mut end = g + 1;
        while end < by_dest.len() && entries[by_dest[end] as usize].name == entries[k].name {
            end += 1;
        }
        let group = g..end;
        g = end;
        for r in group.skip(1).map(|i| by_dest[i] as usize) {
            let (head, tail) = entries.split_at_mut(r);
            let (old, new) = (&mut head[k], &mut tail[0]);
            let conflict = if old.kind == Kind::Dir && new.kind == Kind::Dir {
                if claims[r] == Claim::Declared && claims[k] == Claim::Implied {
                    std::mem::swap(old, new);
                    claims.swap(k, r);
                    false
                } else {
                    claims[r] == Claim::Declared && !same(old, new)
                }
            } else {
                !same(old, new)
            };
            if conflict {
                if first_conflict.as_ref().is_none_or(|(at, _)| r < *at) {
                    first_conflict = Some((r, conflict_error(new, old)));
                }
                break;
            }
            merged[r] = true;
        }
    }
    if let Some((_, e)) = first_conflict {
        return Err(e);
    }
    drop(claims);
    // Without duplicates the index still lists the entries by name.
    if merged.contains(&true) {
        let mut r = 0;
        entries.retain(|_| {
            r += 1;
            !merged[r - 1]
        });
        entries.shrink_to_fit();
        by_dest = by_name(&entries);
    }
    drop(merged);
    let mut kept = entries;
    let mut link_names: HashMap<Vec<u8>, usize> = HashMap::new();
    let find = |kept: &[Entry], link_names: &HashMap<Vec<u8>, usize>, name: &[u8]| {
        by_dest
            .binary_search_by(|&i| kept[i as usize].name.as_bytes().cmp(name))
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
    // entry is written after those before it in `kept` (so a directory
    // declared later is not there yet in manifest order), and a parent made
    // for one entry serves those after it.
    let parents = loaded.image.parents.unwrap_or(true);
    let order = loaded.image.order.unwrap_or(Order::Sorted);
    // (the entry it goes before, the directory)
    let mut made: Vec<(usize, Entry)> = Vec::new();
    let mut implied: std::collections::HashSet<Vec<u8>> = std::collections::HashSet::new();
    if parents {
        for (k, e) in kept.iter().enumerate() {
            for name in e.names() {
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
                                e.origin.clone(),
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
                    let name = ImagePath::generated(dir);
                    let dir = lw.entry(name, Kind::Dir, lw.dir_mode, e.origin.clone(), None);
                    made.push((k, dir));
                }
            }
        }
    }
    drop((by_dest, link_names, implied));
    let mut entries = kept;
    if order == Order::Sorted || made.is_empty() {
        entries.extend(made.into_iter().map(|(_, dir)| dir));
    } else {
        // Each made directory before the entry it was made for: taken from
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
                all.push(dir);
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
    let secrets = std::mem::take(&mut lw.secrets)
        .into_iter()
        .map(|(name, origin)| (through_links(&name, &links), origin))
        .collect();
    Ok(Lowered {
        entries,
        elf,
        warnings: lw.warnings,
        links,
        secrets,
        omitted,
    })
}

/// The image's directory symlinks (merged /usr): link -> target, for each
/// symlink to a directory of the image, or one that entries are placed
/// under (and that no other kind of entry has as its name). With `all`
/// false, only those that entries are placed under: the others change no
/// name. `by_name` lists the entries sorted by name.
fn dir_links(entries: &[Entry], by_name: &[u32], all: bool) -> HashMap<Vec<u8>, Vec<u8>> {
    // The kinds of the entries named `name`.
    let kinds = |name: &[u8]| -> Vec<&Kind> {
        let from = by_name.partition_point(|&i| entries[i as usize].name.as_bytes() < name);
        by_name[from..]
            .iter()
            .map(|&i| &entries[i as usize])
            .take_while(|e| e.name.as_bytes() == name)
            .map(|e| &e.kind)
            .collect()
    };
    // Whether some entry is placed under `dir`: the first name after
    // `dir/` in order starts with it.
    let placed_under = |dir: &[u8]| {
        let mut prefix = dir.to_vec();
        prefix.push(b'/');
        let from = by_name.partition_point(|&i| entries[i as usize].name.as_bytes() < &prefix[..]);
        by_name
            .get(from)
            .is_some_and(|&i| entries[i as usize].name.starts_with(&prefix))
    };
    let mut links: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
    for e in entries {
        let Kind::Symlink { target } = &e.kind else {
            continue;
        };
        let used = placed_under(&e.name);
        if !all && !used {
            continue;
        }
        let joined = if target.starts_with(b"/") {
            target.to_vec()
        } else {
            let mut j = e.name.parent().unwrap_or(b"").to_vec();
            j.push(b'/');
            j.extend_from_slice(target);
            j
        };
        let Ok(t) = normalise(&joined, &e.origin) else {
            continue;
        };
        // A link to a directory of the image, or one that entries are
        // placed under (its target then becomes their parent).
        let there = kinds(&t);
        let to_dir = there.contains(&&Kind::Dir);
        if to_dir || (used && there.iter().all(|k| **k == Kind::Dir)) {
            links.insert(e.name.to_vec(), t);
        }
    }
    links
}

fn conflict_error(new: &Entry, old: &Entry) -> Error {
    Error::at(
        new.origin.clone(),
        format!(
            "`/{}` is declared twice: here as {} and at {} as {}",
            escape(&new.name),
            describe(new),
            old.origin,
            describe(old)
        ),
    )
    .with_hint("remove one of them, or make both declare the same thing")
}

fn conflict_at(origin: &Origin, name: &[u8], old: &Entry) -> Error {
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

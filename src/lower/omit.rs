//! `[omit]`: what a document takes out of what it and the documents read
//! before it select. Each list is read once here; the modules, firmware and
//! file steps ask which omissions apply to a rule of a given document.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use globset::{GlobMatcher, GlobSet};

use crate::entry::{Entry, Origin};
use crate::error::Result;
use crate::glob::{Below, Separator};
use crate::manifest::load::{expand, Loaded};
use crate::resolve::elf::{BinaryRequest, RequestKind};
use crate::resolve::root::Root;
use crate::spec::{Omitted, OmittedKind};

/// One entry of an `[omit]` list.
pub(super) struct Omission {
    /// The rank of the document it is in ([`Loaded::rank`]): it applies to
    /// rules of this document and of those before it.
    pub doc: usize,
    pub text: String,
    pub origin: Origin,
    /// For modules: a pattern of module files; None for a module name.
    matcher: Option<GlobMatcher>,
}

impl Omission {
    /// Whether it takes out what a rule of the document of rank `doc`
    /// selects.
    pub fn applies_to(&self, doc: usize) -> bool {
        doc <= self.doc
    }

    /// For a module omission: whether it names module `name` (file
    /// `relpath` in the module tree).
    pub fn names_module(&self, name: &str, relpath: &str) -> bool {
        match &self.matcher {
            Some(g) => {
                g.is_match(relpath)
                    || g.is_match(crate::resolve::kmod::ko::uncompressed_name(relpath))
            }
            None => crate::resolve::kmod::normalize_modname(&self.text) == name,
        }
    }

    /// How it reads in messages: `[omit] modules "virtio_blk"`.
    pub fn label(&self, list: &str) -> String {
        format!("[omit] {list} {}", toml::Value::String(self.text.clone()))
    }
}

/// Every document's `[omit]` lists, in document order.
#[derive(Default)]
pub(super) struct Omits {
    pub modules: Vec<Omission>,
    pub firmware: Vec<Omission>,
    firmware_set: Option<(GlobSet, Vec<usize>)>,
    pub files: Vec<Omission>,
    files_set: Option<(GlobSet, Vec<usize>)>,
}

impl Omits {
    pub fn read(loaded: &Loaded) -> Result<Omits> {
        let mut o = Omits::default();
        for (i, doc) in loaded.docs.iter().enumerate() {
            let Some(omit) = &doc.manifest.omit else {
                continue;
            };
            let omit = &omit.value;
            for (list, into) in [
                (&omit.modules, &mut o.modules),
                (&omit.firmware, &mut o.firmware),
                (&omit.files, &mut o.files),
            ] {
                for v in list {
                    into.push(Omission {
                        doc: loaded.rank(i),
                        text: expand(v, v.pos, doc, &loaded.vars)?,
                        origin: doc.origin(v.pos),
                        matcher: None,
                    });
                }
            }
        }
        for m in &mut o.modules {
            if m.text.contains(['/', '*', '?', '[', '{']) {
                m.matcher = Some(crate::glob::matcher(
                    m.text.trim_start_matches('/'),
                    Separator::Literal,
                    &m.origin,
                )?);
            }
        }
        let pairs = |list: &[Omission], strip: bool| -> Vec<(String, Origin)> {
            list.iter()
                .map(|x| {
                    let t = if strip {
                        x.text.trim_start_matches('/')
                    } else {
                        &x.text
                    };
                    (t.to_string(), x.origin.clone())
                })
                .collect()
        };
        o.firmware_set =
            crate::glob::indexed(&pairs(&o.firmware, false), Separator::Any, Below::No)?;
        o.files_set = crate::glob::indexed(&pairs(&o.files, true), Separator::Literal, Below::Yes)?;
        Ok(o)
    }

    /// The firmware omission that takes firmware `name` out, if any
    /// (firmware is chosen for the image as a whole, not per document).
    pub fn firmware(&self, name: &str) -> Option<&Omission> {
        let (set, index) = self.firmware_set.as_ref()?;
        let first = set.matches(name).into_iter().min()?;
        Some(&self.firmware[index[first]])
    }

    /// The file omission that takes image path `path` (without its leading
    /// `/`) out of what a rule of the document of rank `doc` made, if any.
    pub fn file(&self, path: &str, doc: usize) -> Option<&Omission> {
        let (set, index) = self.files_set.as_ref()?;
        set.matches(path)
            .into_iter()
            .map(|k| &self.files[index[k]])
            .find(|o| o.applies_to(doc))
    }

    pub fn has_files(&self) -> bool {
        !self.files.is_empty()
    }

    /// Whether the program request `r` stays: false (with what it left out
    /// noted in `omitted`) when a file omission names the program, so that
    /// it is never resolved and takes no library with it.
    pub fn keep_program(
        &self,
        loaded: &Loaded,
        root: &Root,
        search: &[PathBuf],
        r: &BinaryRequest,
        omitted: &mut Vec<Omitted>,
    ) -> bool {
        let doc = r.origin.as_ref().map_or(0, |o| doc_of(loaded, o));
        for path in program_paths(root, search, r) {
            if let Some(o) = self.file(&path, doc) {
                omitted.push(Omitted {
                    kind: OmittedKind::File,
                    name: path,
                    by: o.origin.clone(),
                    rule: o.label("files"),
                });
                return false;
            }
        }
        true
    }

    /// For each of `entries`, whether it stays; what a file omission takes
    /// out is noted in `omitted`.
    pub fn keep_files(
        &self,
        loaded: &Loaded,
        entries: &[Entry],
        omitted: &mut Vec<Omitted>,
    ) -> Vec<bool> {
        let mut keep = Vec::with_capacity(entries.len());
        for e in entries {
            let name = String::from_utf8_lossy(e.name.as_bytes());
            let o = self.file(&name, doc_of(loaded, &e.origin));
            if let Some(o) = o {
                omitted.push(Omitted {
                    kind: OmittedKind::File,
                    name: name.into_owned(),
                    by: o.origin.clone(),
                    rule: o.label("files"),
                });
            }
            keep.push(o.is_none());
        }
        keep
    }

    /// Matches file omissions as `rewrite` places their paths (merged
    /// /usr: `/bin/less` names what the image holds at `usr/bin/less`), as
    /// well as written.
    pub fn rewrite_files(&mut self, rewrite: impl Fn(&str) -> Option<String>) -> Result<()> {
        let mut pairs = Vec::new();
        for o in &self.files {
            let t = o.text.trim_start_matches('/');
            pairs.push((t.to_string(), o.origin.clone()));
            if let Some(r) = rewrite(t) {
                pairs.push((r, o.origin.clone()));
            }
        }
        let index: Vec<usize> = self
            .files
            .iter()
            .enumerate()
            .flat_map(|(i, o)| {
                let n = 1 + usize::from(rewrite(o.text.trim_start_matches('/')).is_some());
                std::iter::repeat_n(i, n)
            })
            .collect();
        self.files_set = crate::glob::indexed(&pairs, Separator::Literal, Below::Yes)?
            .map(|(set, globs)| (set, globs.into_iter().map(|g| index[g]).collect()));
        Ok(())
    }
}

/// The rank ([`Loaded::rank`]) of the document an origin is in; 0 for one
/// of none (the command line), which every omission then applies to.
fn doc_of(loaded: &Loaded, o: &Origin) -> usize {
    loaded
        .docs
        .iter()
        .position(|d| Arc::ptr_eq(d.origin_file(), o.file()))
        .map_or(0, |i| loaded.rank(i))
}

/// The image paths (without their `/`) of the program a request names: its
/// path (for a bare name, where the search path finds it in the root), and
/// where the root's directory links place it (`sbin/lvm`, `usr/sbin/lvm`).
fn program_paths(root: &Root, search: &[PathBuf], r: &BinaryRequest) -> Vec<String> {
    if r.kind != RequestKind::Program {
        return Vec::new();
    }
    let path = if r.name.is_absolute() {
        Some(r.name.clone())
    } else {
        search
            .iter()
            .map(|d| d.join(&r.name))
            .find(|p| root.resolve(p, false).is_ok_and(|h| h.exists()))
    };
    let Some(path) = path else {
        return Vec::new();
    };
    let mut out: Vec<String> = path.to_str().map(str::to_string).into_iter().collect();
    // The directories on the way, through the root's links.
    if let (Some(dir), Some(name)) = (path.parent(), path.file_name()) {
        if let Ok(host) = root.resolve(dir, true) {
            if let Ok(inside) = host.strip_prefix(root.path()) {
                if let Some(p) = Path::new("/").join(inside).join(name).to_str() {
                    out.push(p.to_string());
                }
            }
        }
    }
    out.iter_mut()
        .map(|p| p.trim_start_matches('/').to_string())
        .collect()
}

/// An `[omit]` line that leaves out `path` (and what is under it), for hints.
pub(super) fn omit_line(key: &str, path: &[u8]) -> String {
    let path = crate::path::escape(path);
    format!(
        "{key} = [{}]",
        toml::Value::String(format!("/{}", path.trim_start_matches('/')))
    )
}

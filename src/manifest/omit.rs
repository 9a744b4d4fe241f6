//! `[omit]`: what a document takes out of what it and the documents read
//! before it select. Each list is read once here; the modules, firmware and
//! file steps ask which omissions apply to a rule of a given document.

use globset::{GlobMatcher, GlobSet};

use super::load::{expand, Loaded};
use crate::entry::Origin;
use crate::error::Result;
use crate::glob::{Below, Separator};

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

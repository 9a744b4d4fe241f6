//! Glue between `binaries` rules and ELF resolution: requests are
//! collected while rules are expanded, resolved together (one loader, one
//! cache), and their files and symlinks become items of the image.

use std::collections::HashMap;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::item::{Added, FileModes};
use super::load::Loaded;
use super::model::HwcapsSpec;
use crate::entry::{Kind, Origin};
use crate::error::{Error, Result, Warning};
use crate::resolve::elf::{self, BinaryRequest, ElfOptions, Hwcaps, Item};

/// The resolver's options from the merged `[elf]` settings.
pub(super) fn options(loaded: &Loaded) -> ElfOptions {
    let mut opts = ElfOptions::new(&loaded.root);
    for doc in &loaded.docs {
        let Some(e) = &doc.manifest.elf else { continue };
        if let Some(p) = &e.search_path {
            opts.search_path = p.iter().map(PathBuf::from).collect();
        }
        if let Some(h) = &e.hwcaps {
            opts.hwcaps = match h {
                HwcapsSpec::Enabled(false) => Hwcaps::Off,
                HwcapsSpec::Enabled(true) => Hwcaps::Host,
                HwcapsSpec::Only(names) => Hwcaps::Only(names.clone()),
            };
        }
        if let Some(d) = e.dlopen {
            opts.dlopen = d;
        }
    }
    opts
}

/// A program named by a `binaries` entry or a `[[binary]]` rule.
pub(super) fn program(name: &str, optional: bool, origin: Origin) -> BinaryRequest {
    BinaryRequest::program(name).optional(optional).at(origin)
}

/// A library named in `[elf] libraries`.
pub(super) fn library(soname: &str, origin: Origin) -> BinaryRequest {
    BinaryRequest::library(soname).at(origin)
}

/// Resolves every request: the files and symlinks they need, and the
/// resolution (for `composer why`).
pub(super) fn add_all(
    requests: &[BinaryRequest],
    opts: &ElfOptions,
    modes: FileModes,
    warnings: &mut Vec<Warning>,
) -> Result<(Vec<Added>, Option<elf::Resolution>)> {
    if requests.is_empty() {
        return Ok((Vec::new(), None));
    }
    let res = elf::resolve(requests, opts)?;
    warnings.extend(res.warnings.iter().cloned());
    // The first request that loaded a path is where the path comes from.
    let mut origin_of: HashMap<&Path, &Origin> = HashMap::new();
    for r in &res.requests {
        let Some(origin) = &r.request.origin else {
            continue;
        };
        for o in &r.objects {
            origin_of.entry(o.path.as_path()).or_insert(origin);
            origin_of.entry(o.real.as_path()).or_insert(origin);
            for (link, _) in &o.links {
                origin_of.entry(link.as_path()).or_insert(origin);
            }
        }
    }
    let fallback = requests
        .iter()
        .find_map(|r| r.origin.clone())
        .unwrap_or_default();
    let mut added = Vec::with_capacity(res.items.len());
    for (path, item) in &res.items {
        let origin = origin_of.get(path.as_path()).map_or(&fallback, |o| o);
        let dest = path.as_os_str().as_bytes().to_vec();
        let b = match item {
            Item::File { source } => {
                let st = crate::resolve::stat(source).map_err(|e| {
                    Error::at(origin.clone(), format!("`{}`: {e}", source.display()))
                })?;
                Added {
                    dest,
                    mode: modes.of(None, &st.meta),
                    kind: Kind::File {
                        source: crate::resolve::file_source(source, &st, origin)?.into(),
                        links: crate::entry::Links::default(),
                    },
                    origin: origin.clone(),
                }
            }
            Item::Symlink { target } => Added {
                dest,
                mode: 0o777,
                kind: Kind::Symlink {
                    target: target.as_os_str().as_bytes().into(),
                },
                origin: origin.clone(),
            },
        };
        added.push(b);
    }
    Ok((added, Some(res)))
}

//! Dependency-resolved binaries: what the dynamic loader would load, found
//! inside a root without running anything.
//!
//! Input: [`BinaryRequest`]s (programs by name or path, libraries by soname)
//! and [`ElfOptions`] (the root, the program search path, hwcaps, the dlopen
//! level). Output: a [`Resolution`]: every path the image needs (regular
//! files and the symlinks met on the way, as they appear inside the root),
//! plus, per request, the objects loaded and the edges that say why, for
//! `composer why`.
//!
//! How a program is resolved:
//! - a bare name is looked up on the search path, a name with a `/` is a
//!   path inside the root; symlinks are followed inside the root and kept;
//! - a `#!` script brings in its interpreter (resolved like a program; with
//!   `#!/usr/bin/env NAME`, NAME from the search path too);
//! - an ELF program with PT_INTERP brings in its interpreter and its
//!   DT_NEEDED libraries, recursively, in glibc's order:
//!   DT_RPATH of the loading object and its loaders unless it has
//!   DT_RUNPATH; DT_RUNPATH for the object's own needs; the root's
//!   `/etc/ld.so.conf`; the default directories of the object's ABI.
//!   Candidates of another class, byte order or machine are skipped.
//!   A musl program (interpreter `ld-musl-*`) follows musl's order instead;
//! - `.note.dlopen` dependencies are added by priority ([`DlopenLevel`]);
//! - a static program brings in nothing else.

mod dlopen;
mod fields;
mod load;
mod model;
pub(crate) mod parse;
pub(crate) mod search;

pub use dlopen::{parse_note, DlopenDep, DlopenLevel, Priority};
pub(crate) use fields::Fields;
pub use model::{
    Alias, BinaryRequest, Chain, Edge, ElfOptions, How, Item, Object, ObjectKind, Problem,
    RequestKind, Resolution, Resolved, Step, DEFAULT_SEARCH_PATH,
};
pub use parse::{parse, Abi, Class, Elf, Endian, HeadFile, ParseError, ET_DYN, ET_EXEC};
pub use search::Hwcaps;

use crate::error::{Result, Warning};

/// Resolves `requests` inside `opts.root`. A fatal problem of a request that
/// is not optional is an error naming every such problem with its chain.
pub fn resolve(requests: &[BinaryRequest], opts: &ElfOptions) -> Result<Resolution> {
    let res = resolve_all(requests, opts);
    match res.error() {
        Some(e) => Err(e),
        None => Ok(res),
    }
}

/// Like [`resolve`], but never fails: requests with fatal problems are left
/// out of `items` and their problems stay in [`Resolved::problems`].
pub fn resolve_all(requests: &[BinaryRequest], opts: &ElfOptions) -> Resolution {
    let mut loader = load::Loader::new(opts);
    let outs = loader.run(requests);
    let mut res = Resolution::default();
    for (r, out) in requests.iter().zip(outs) {
        let fatal = out.problems.iter().any(|p| p.fatal);
        let resolved = Resolved {
            request: r.clone(),
            included: !fatal,
            objects: out.objects,
            edges: out.edges,
            problems: out.problems,
        };
        if !fatal {
            for o in &resolved.objects {
                let names = std::iter::once((&o.real, &o.links))
                    .chain(o.aliases.iter().map(|a| (&a.real, &a.links)));
                for (real, links) in names {
                    for (link, target) in links {
                        res.items.insert(
                            link.clone(),
                            Item::Symlink {
                                target: target.clone(),
                            },
                        );
                    }
                    res.items.insert(
                        real.clone(),
                        Item::File {
                            source: loader.sys.host(real),
                        },
                    );
                }
            }
        }
        res.requests.push(resolved);
    }
    for i in 0..res.requests.len() {
        let r = &res.requests[i];
        let mut warnings = Vec::new();
        for p in &r.problems {
            // Mandatory failures are errors; a dropped optional request
            // reports only why it was dropped.
            if (p.fatal && !r.request.optional) || (!p.fatal && !r.included) {
                continue;
            }
            if p.fatal && p.from.is_none() && r.request.if_present {
                continue;
            }
            let mut message = format!("{}: {}", r.request.name.display(), res.describe(i, p));
            if p.fatal {
                message.push_str(" (optional entry left out)");
            }
            warnings.push(Warning {
                origin: r.request.origin.clone(),
                message,
                details: Vec::new(),
            });
        }
        res.warnings.extend(warnings);
    }
    res
}

#[cfg(test)]
mod tests;

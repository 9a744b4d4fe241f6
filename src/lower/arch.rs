//! The image's architecture in the rules: `[[module]] arch = [...]` and
//! `[early] microcode` (x86 only) are taken or left out by it, and what is
//! left out is listed for the build to say.

use crate::arch::Arch;
use crate::error::{Error, Result};
use crate::manifest::de::Spanned;
use crate::manifest::load::{Doc, Loaded};

/// Whether a rule with `arch = [...]` (empty: every architecture) is for
/// images of `arch`; an unknown name is an error at its place.
pub(super) fn for_arch(names: &[Spanned<String>], doc: &Doc, arch: Arch) -> Result<bool> {
    let mut hit = names.is_empty();
    for n in names {
        let Some(a) = Arch::from_name(n) else {
            let known: Vec<&str> = crate::arch::NAMES
                .iter()
                .chain(&crate::arch::DEBIAN_NAMES)
                .copied()
                .collect();
            let near = crate::suggest::nearest(n, &known);
            let mut e = Error::at(
                doc.origin(n.pos),
                format!("`{}` is not an architecture composer knows", n.value),
            );
            e = match near {
                Some(s) => e.with_hint(format!("did you mean `{s}`?")),
                None => e.with_hint(format!(
                    "name it as `uname -m` does ({}) or as Debian does (amd64, arm64, ...)",
                    crate::arch::NAMES.join(", ")
                )),
            };
            return Err(e);
        };
        hit |= a == arch;
    }
    Ok(hit)
}

/// What the documents ask for that the image's architecture leaves out:
/// `[[module]]` rules for other architectures, and `[early] microcode` for
/// a CPU other than x86's. One line each, with its place.
pub(super) fn left_out_by_arch(loaded: &Loaded) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for doc in &loaded.docs {
        let m = &doc.manifest;
        for r in &m.module {
            if !for_arch(&r.value.arch, doc, loaded.arch)? {
                let names: Vec<&str> = r.value.arch.iter().map(|a| a.value.as_str()).collect();
                out.push(format!(
                    "{}: [[module]] for {} only",
                    doc.origin(r.pos),
                    names.join(", ")
                ));
            }
        }
        if let Some(e) = &m.early {
            if e.value.microcode == Some(true) && !loaded.arch.is_x86() {
                out.push(format!(
                    "{}: [early] microcode (x86 CPUs only)",
                    doc.origin(e.pos)
                ));
            }
        }
    }
    Ok(out)
}

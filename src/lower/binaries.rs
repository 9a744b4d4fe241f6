//! Glue between `binaries` rules and ELF resolution: requests are
//! collected while rules are expanded, resolved together (one loader, one
//! cache), and their files and symlinks become items of the image.

use std::collections::HashMap;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::item::{Added, FileModes};
use crate::entry::{Kind, Origin};
use crate::error::{Error, Result, Warning};
use crate::manifest::load::Loaded;
use crate::manifest::model::HwcapsSpec;
use crate::resolve::elf::{self, BinaryRequest, ElfOptions, Hwcaps, Item};
use crate::resolve::root::Root;

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

/// The largest busybox read for its applet list.
const MAX_BUSYBOX: u64 = 32 << 20;

/// A busybox applet that stands for a program the root lacks.
pub(super) struct Applet {
    /// The root's busybox, inside it.
    pub busybox: PathBuf,
    /// The link to it that the image gets: the program's name beside it.
    pub link: PathBuf,
}

/// When the root has no program `name` on `search`, and its busybox (on
/// `search` too) has an applet of that name, the applet; else None (the
/// program is then resolved as any other, and said missing if it is).
/// Busybox's applet names are one NUL-separated table in the binary, so the
/// list is read without running it (the root may be another architecture's).
pub(super) fn applet(root: &Root, search: &[PathBuf], name: &str) -> Option<Applet> {
    if name.is_empty() || name.contains('/') {
        return None;
    }
    let find = |n: &str| {
        search
            .iter()
            .map(|d| d.join(n))
            .find(|p| root.resolve(p, true).is_ok_and(|h| h.is_file()))
    };
    if find(name).is_some() {
        return None;
    }
    let busybox = find("busybox")?;
    let host = root.resolve(&busybox, true).ok()?;
    let bytes = crate::io::read_regular(&host, MAX_BUSYBOX).ok()?;
    let needle = [b"\0", name.as_bytes(), b"\0"].concat();
    if !bytes.windows(needle.len()).any(|w| w == needle) {
        return None;
    }
    let link = busybox.with_file_name(name);
    Some(Applet { busybox, link })
}

/// A library named in `[elf] libraries` (or `libraries_if_present`).
pub(super) fn library(soname: &str, if_present: bool, origin: Origin) -> BinaryRequest {
    let r = BinaryRequest::library(soname).at(origin);
    if if_present {
        r.if_present()
    } else {
        r
    }
}

/// The most paths one library pattern names.
const MAX_LIBRARY_MATCHES: usize = 64;
/// The most paths a library pattern considers on its way.
const MAX_CANDIDATES: usize = 4096;
/// The most entries of one directory a library pattern reads.
const MAX_DIR_ENTRIES: usize = 100_000;

/// The paths inside `root` a library path with `*`, `?` or `[` in its
/// components names (cryptsetup's token plugins live in a directory named
/// after the architecture: `/usr/lib/*/cryptsetup/libcryptsetup-token-*.so`),
/// sorted, at most [`MAX_LIBRARY_MATCHES`]; a soname or a plain path is
/// itself. Directories are looked up inside the root, never out of it.
pub(super) fn expand_library(root: &Root, pattern: &str, origin: &Origin) -> Result<Vec<String>> {
    let wild = |c: &str| c.contains(['*', '?', '[']);
    if !pattern.starts_with('/') || !wild(pattern) {
        return Ok(vec![pattern.to_string()]);
    }
    let mut paths = vec![String::new()];
    for comp in pattern.split('/').filter(|c| !c.is_empty()) {
        if !wild(comp) {
            for p in &mut paths {
                p.push('/');
                p.push_str(comp);
            }
            continue;
        }
        let m = crate::glob::matcher(comp, crate::glob::Separator::Literal, origin)?;
        let mut next = Vec::new();
        for p in &paths {
            let dir = if p.is_empty() { "/" } else { p.as_str() };
            let Some(Ok(rd)) = root.host_of(Path::new(dir), true).map(std::fs::read_dir) else {
                continue;
            };
            let mut names: Vec<String> = rd
                .take(MAX_DIR_ENTRIES)
                .flatten()
                .filter_map(|e| e.file_name().to_str().map(str::to_string))
                .filter(|n| m.is_match(n))
                .collect();
            names.sort();
            next.extend(names.into_iter().map(|n| format!("{p}/{n}")));
        }
        next.truncate(MAX_CANDIDATES);
        paths = next;
    }
    // Only what is there: a directory the pattern matched may not hold the rest.
    paths.retain(|p| root.host_of(Path::new(p), true).is_some_and(|h| h.exists()));
    paths.truncate(MAX_LIBRARY_MATCHES);
    Ok(paths)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn library_patterns_name_what_the_root_has() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        for arch in ["aarch64-linux-gnu", "x86_64-linux-gnu", "zz-none"] {
            std::fs::create_dir_all(r.join("usr/lib").join(arch)).unwrap();
        }
        for arch in ["aarch64-linux-gnu", "x86_64-linux-gnu"] {
            let dir = r.join("usr/lib").join(arch).join("cryptsetup");
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("libcryptsetup-token-systemd-tpm2.so"), "").unwrap();
            std::fs::write(dir.join("libcryptsetup-token-systemd-fido2.so"), "").unwrap();
        }
        // A link out of the root is looked up inside it.
        std::os::unix::fs::symlink("/usr", r.join("usr/lib/escape")).unwrap();
        let root = Root::new(r);
        let o = Origin::new("m.toml".into(), 1, 1);
        let got = expand_library(
            &root,
            "/usr/lib/*/cryptsetup/libcryptsetup-token-*-tpm2.so",
            &o,
        )
        .unwrap();
        assert_eq!(
            got,
            [
                "/usr/lib/aarch64-linux-gnu/cryptsetup/libcryptsetup-token-systemd-tpm2.so",
                "/usr/lib/x86_64-linux-gnu/cryptsetup/libcryptsetup-token-systemd-tpm2.so"
            ]
        );
        // Sonames and plain paths are themselves; a pattern matching nothing is nothing.
        assert_eq!(
            expand_library(&root, "libfoo.so.1", &o).unwrap(),
            ["libfoo.so.1"]
        );
        assert!(expand_library(&root, "/usr/lib/*/none/*.so", &o)
            .unwrap()
            .is_empty());
        // A bad pattern is an error at its line.
        assert!(expand_library(&root, "/usr/lib/[/x.so", &o).is_err());
        // Many matches: at most MAX_LIBRARY_MATCHES.
        let many = r.join("usr/lib/many");
        std::fs::create_dir_all(&many).unwrap();
        for i in 0..200 {
            std::fs::write(many.join(format!("lib{i}.so")), "").unwrap();
        }
        assert_eq!(
            expand_library(&root, "/usr/lib/many/*.so", &o)
                .unwrap()
                .len(),
            MAX_LIBRARY_MATCHES
        );
    }
}

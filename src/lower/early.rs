//! `[early]`: CPU microcode and ACPI table overrides for the kernel's early
//! loaders, gathered from the root into an uncompressed first segment.
//!
//! Microcode goes to kernel/x86/microcode/GenuineIntel.bin and
//! AuthenticAMD.bin: a prebuilt file as it is, a single uncompressed file
//! as it is, or several (decompressed) concatenated into a scratch
//! directory that lives as long as the image spec. ACPI tables go to
//! kernel/firmware/acpi/*.aml.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::compress::{self, Compression};
use crate::entry::{Entry, Kind, Origin, Source};
use crate::error::{Error, Result, Warning};
use crate::manifest::de::Spanned;
use crate::manifest::load::{expand, Doc, Loaded};
use crate::manifest::model::PathText;
use crate::path::ImagePath;
use crate::resolve::root::Root;

/// Where `[early] acpi` looks for tables when `acpi_dir` is not set.
pub const DEFAULT_ACPI_DIR: &str = "/etc/composer/acpi";

/// `[early]` merged over the documents: for each key the last one wins.
#[derive(Default)]
struct EarlyDraft {
    microcode: bool,
    intel: Option<(PathBuf, Origin)>,
    amd: Option<(PathBuf, Origin)>,
    acpi: bool,
    acpi_dir: Option<(PathBuf, Origin)>,
    optional: bool,
    origin: Option<Origin>,
}

/// A host path for a path value: absolute inside the root, relative
/// beside the manifest that names it (as `src` is read).
fn host_path(
    doc: &Doc,
    loaded: &Loaded,
    root: &Root,
    t: &Spanned<PathText>,
) -> Result<(PathBuf, Origin)> {
    let origin = doc.origin(t.pos);
    let bytes = match std::str::from_utf8(&t.value.0) {
        Ok(s) => expand(s, t.pos, doc, &loaded.vars)?.into_bytes(),
        Err(_) => t.value.0.to_vec(),
    };
    let path = Path::new(OsStr::from_bytes(&bytes));
    let host = if bytes.starts_with(b"/") {
        root.resolve(path, true)
            .map_err(|e| Error::at(origin.clone(), e.to_string()))?
    } else {
        doc.dir.join(path)
    };
    Ok((host, origin))
}

#[derive(Clone, Copy)]
enum Vendor {
    Intel,
    Amd,
}

impl Vendor {
    fn file(self) -> &'static str {
        match self {
            Vendor::Intel => "GenuineIntel.bin",
            Vendor::Amd => "AuthenticAMD.bin",
        }
    }

    fn dir(self) -> &'static str {
        match self {
            Vendor::Intel => "intel-ucode",
            Vendor::Amd => "amd-ucode",
        }
    }

    /// Whether `name` (without a .xz or .zst suffix) is a microcode file of
    /// this vendor: Intel's `family-model-stepping` in hex (`06-8e-09`),
    /// AMD's `*.bin` containers.
    fn takes(self, name: &str) -> bool {
        match self {
            Vendor::Intel => {
                let parts: Vec<&str> = name.split('-').collect();
                parts.len() == 3
                    && parts
                        .iter()
                        .all(|p| p.len() == 2 && p.bytes().all(|b| b.is_ascii_hexdigit()))
            }
            Vendor::Amd => name.ends_with(".bin") && !name.starts_with('.'),
        }
    }
}

/// The compression of a firmware file by its suffix, and its name without it.
fn firmware_name(name: &str) -> (&str, Compression) {
    if let Some(n) = name.strip_suffix(".xz") {
        (n, Compression::Xz)
    } else if let Some(n) = name.strip_suffix(".zst") {
        (n, Compression::Zstd)
    } else {
        (name, Compression::None)
    }
}

/// Regular files of `dir` whose name `keep` accepts, by name.
fn files_in(dir: &Path, keep: impl Fn(&str) -> bool) -> Result<Vec<(PathBuf, std::fs::Metadata)>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let e = e.map_err(|e| Error::io(dir, e))?;
        let path = e.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if !keep(name) {
            continue;
        }
        match std::fs::metadata(&path) {
            Ok(m) if m.is_file() => out.push((path, m)),
            _ => {}
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// One vendor's microcode as a source file: a prebuilt file as it is, a
/// single uncompressed file as it is, or several (decompressed)
/// concatenated into `scratch`.
fn microcode(
    vendor: Vendor,
    chosen: Option<&(PathBuf, Origin)>,
    root: &Root,
    scratch: &mut Option<tempfile::TempDir>,
) -> Result<Option<(Source, Vec<PathBuf>)>> {
    let dir = match chosen {
        Some((path, origin)) => {
            let meta = std::fs::metadata(path).map_err(|e| {
                Error::at(
                    origin.clone(),
                    format!("{} microcode `{}`: {e}", vendor.dir(), path.display()),
                )
                .with_hint("name a directory of microcode files, or a prebuilt file")
            })?;
            if meta.is_file() {
                let source = Source::from_metadata(path.clone(), &meta);
                return Ok(Some((source, vec![path.clone()])));
            }
            path.clone()
        }
        None => {
            let found = ["/usr/lib/firmware", "/lib/firmware"]
                .iter()
                .find_map(|base| {
                    let inside = Path::new(base).join(vendor.dir());
                    root.resolve(&inside, true).ok().filter(|p| p.is_dir())
                });
            match found {
                Some(d) => d,
                None => return Ok(None),
            }
        }
    };
    let files = files_in(&dir, |n| vendor.takes(firmware_name(n).0))?;
    match files.as_slice() {
        [] => return Ok(None),
        [(path, meta)] if firmware_name(&path.to_string_lossy()).1 == Compression::None => {
            let source = Source::from_metadata(path.clone(), meta);
            return Ok(Some((source, vec![path.clone()])));
        }
        _ => {}
    }
    if scratch.is_none() {
        let dir = tempfile::Builder::new()
            .prefix("composer-early-")
            .tempdir()
            .map_err(|e| Error::io(std::env::temp_dir(), e))?;
        *scratch = Some(dir);
    }
    let target = scratch
        .as_ref()
        .map(|d| d.path().join(vendor.file()))
        .unwrap_or_default();
    let mut out = BufWriter::new(File::create(&target).map_err(|e| Error::io(&target, e))?);
    let mut mtime = 0;
    for (path, meta) in &files {
        let bytes = crate::io::read_regular(path, crate::io::MAX_INPUT).map_err(|e| {
            Error::io(
                path,
                std::io::Error::other(format!("cannot read the microcode: {e}")),
            )
        })?;
        let method = firmware_name(&path.to_string_lossy()).1;
        let data = match method {
            Compression::None => bytes,
            m => {
                compress::decode(m, &bytes, crate::io::MAX_INPUT as usize)
                    .map_err(|e| {
                        Error::io(
                            path,
                            io::Error::new(io::ErrorKind::InvalidData, e.to_string()),
                        )
                    })?
                    .data
            }
        };
        out.write_all(&data).map_err(|e| Error::io(&target, e))?;
        mtime = mtime.max(meta.mtime());
    }
    out.flush().map_err(|e| Error::io(&target, e))?;
    // The concatenation carries the newest part's mtime.
    let when = std::time::UNIX_EPOCH + std::time::Duration::from_secs(mtime.max(0) as u64);
    out.get_ref()
        .set_modified(when)
        .map_err(|e| Error::io(&target, e))?;
    drop(out);
    let meta = std::fs::metadata(&target).map_err(|e| Error::io(&target, e))?;
    let source = Source::from_metadata(target, &meta);
    Ok(Some((source, files.into_iter().map(|(p, _)| p).collect())))
}

/// The early files and their directories, sorted by name.
fn gather_early(
    early: &EarlyDraft,
    root: &Root,
    origin: &Origin,
    warnings: &mut Vec<Warning>,
) -> Result<(Vec<Entry>, Option<tempfile::TempDir>)> {
    let mut scratch = None;
    let mut list: Vec<Entry> = Vec::new();
    let with_rule = |rule: &str| origin.with_rule(rule);
    let dir = |name: &str, o: &Origin| {
        let mut e = Entry::new(ImagePath::generated(name), Kind::Dir, 0o755, o.clone());
        e.mtime = Some(0);
        e
    };
    let file = |name: Vec<u8>, source: Source, o: &Origin| {
        Entry::new(
            ImagePath::generated(name),
            Kind::File {
                source: source.into(),
                links: crate::entry::Links::default(),
            },
            0o644,
            o.clone(),
        )
    };
    if early.microcode {
        let o = with_rule("early microcode");
        let mut found = Vec::new();
        for (vendor, chosen) in [(Vendor::Amd, &early.amd), (Vendor::Intel, &early.intel)] {
            if let Some((src, parts)) = microcode(vendor, chosen.as_ref(), root, &mut scratch)? {
                let shown: Vec<String> = parts.iter().map(|p| p.display().to_string()).collect();
                let rule = match shown.as_slice() {
                    [one] => format!("early microcode: {one}"),
                    _ => format!(
                        "early microcode: {} files concatenated: {}",
                        shown.len(),
                        shown.join(", ")
                    ),
                };
                found.push(file(
                    format!("kernel/x86/microcode/{}", vendor.file()).into_bytes(),
                    src,
                    &with_rule(&rule),
                ));
            }
        }
        if found.is_empty() {
            // None at all: a warning unless the rule says a root may have none
            // (the profiles: a VM's root often has none). No empty early
            // segment either way.
            if !early.optional {
                warnings.push(Warning {
                    origin: Some(o.clone()),
                    message: format!(
                        "[early] microcode: no microcode in the root `{}` (looked in \
                     /usr/lib/firmware and /lib/firmware for intel-ucode and amd-ucode)",
                        root.path().display()
                    ),
                    details: Vec::new(),
                });
            }
        } else {
            for d in ["kernel/x86", "kernel/x86/microcode"] {
                list.push(dir(d, &o));
            }
            list.extend(found);
        }
    }
    if early.acpi {
        let o = with_rule("early acpi");
        let (path, explicit) = match &early.acpi_dir {
            Some((p, at)) => (p.clone(), Some(at)),
            // A symlink loop there: as if there were no such directory.
            None => (
                root.host_of(Path::new(DEFAULT_ACPI_DIR), true)
                    .unwrap_or_default(),
                None,
            ),
        };
        let tables = if path.is_dir() {
            files_in(&path, |n| n.ends_with(".aml"))?
        } else if let Some(at) = explicit {
            return Err(Error::at(
                at.clone(),
                format!("acpi_dir `{}` is not a directory", path.display()),
            )
            .with_hint("absolute paths are inside the root; relative ones beside the manifest"));
        } else {
            Vec::new()
        };
        if tables.is_empty() && !early.optional {
            warnings.push(Warning {
                origin: Some(o.clone()),
                message: format!("[early] acpi: no *.aml tables in `{}`", path.display()),
                details: Vec::new(),
            });
        } else {
            for d in ["kernel/firmware", "kernel/firmware/acpi"] {
                list.push(dir(d, &o));
            }
            for (p, meta) in tables {
                let mut name = b"kernel/firmware/acpi/".to_vec();
                name.extend_from_slice(p.file_name().unwrap_or_default().as_bytes());
                let source = Source::from_metadata(p.clone(), &meta);
                let rule = with_rule(&format!("early acpi: {}", p.display()));
                list.push(file(name, source, &rule));
            }
        }
    }
    if !list.is_empty() {
        list.push(dir("kernel", origin));
    }
    list.sort_by(|a, b| a.name.cmp(&b.name));
    Ok((list, scratch))
}

/// What `[early]` adds to an image.
pub(super) struct Early {
    /// The files and their directories, sorted by name.
    pub entries: Vec<Entry>,
    /// Where `[early]` is declared (the last document that has it).
    pub origin: Origin,
    /// Holds concatenated microcode files until the image is written.
    pub scratch: Option<tempfile::TempDir>,
}

/// Reads `[early]` of the loaded documents and gathers the early files from
/// the root; None when it asks for nothing. `entries` are the lowered
/// entries: a name both make is an error.
pub(super) fn gather(
    loaded: &Loaded,
    entries: &[Entry],
    warnings: &mut Vec<Warning>,
) -> Result<Option<Early>> {
    let root = Root::new(&loaded.root);
    let mut early = EarlyDraft::default();
    for doc in &loaded.docs {
        let Some(e) = &doc.manifest.early else {
            continue;
        };
        let v = &e.value;
        early.origin = Some(doc.origin(e.pos));
        early.microcode = v.microcode.unwrap_or(early.microcode);
        early.acpi = v.acpi.unwrap_or(early.acpi);
        early.optional = v.optional.unwrap_or(early.optional);
        if let Some(p) = &v.intel_microcode {
            early.intel = Some(host_path(doc, loaded, &root, p)?);
        }
        if let Some(p) = &v.amd_microcode {
            early.amd = Some(host_path(doc, loaded, &root, p)?);
        }
        if let Some(p) = &v.acpi_dir {
            early.acpi_dir = Some(host_path(doc, loaded, &root, p)?);
        }
    }
    // Microcode the kernel loads from the initrd is x86's alone
    // (`arch::left_out_by_arch` tells the build so).
    early.microcode &= loaded.arch.is_x86();
    if !(early.microcode || early.acpi) {
        return Ok(None);
    }
    let origin = early.origin.clone().unwrap_or_default();
    let (list, scratch) = gather_early(&early, &root, &origin, warnings)?;
    let made: std::collections::HashSet<&[u8]> = list
        .iter()
        .filter(|e| e.kind != Kind::Dir)
        .map(|e| e.name.as_bytes())
        .collect();
    for e in entries {
        for n in e.names() {
            if made.contains(n) {
                return Err(Error::at(
                    e.origin.clone(),
                    format!(
                        "`/{}` is also made by [early] at {origin}",
                        crate::path::escape(n)
                    ),
                )
                .with_hint("leave it to [early], or turn [early] off for it"));
            }
        }
    }
    Ok(Some(Early {
        entries: list,
        origin,
        scratch,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intel_and_amd_names() {
        assert!(Vendor::Intel.takes("06-8e-09"));
        assert!(!Vendor::Intel.takes("06-8e-09.initramfs"));
        assert!(!Vendor::Intel.takes("LICENSE"));
        assert!(Vendor::Amd.takes("microcode_amd_fam17h.bin"));
        assert!(!Vendor::Amd.takes("microcode_amd_fam17h.bin.asc"));
        assert_eq!(
            firmware_name("microcode_amd.bin.xz"),
            ("microcode_amd.bin", Compression::Xz)
        );
    }
}

//! Segments: an image written as several concatenated cpio archives, each
//! uncompressed or compressed on its own, as distributions ship initrds (an
//! uncompressed early archive with CPU microcode, then a compressed main
//! one).
//!
//! Input: the loaded manifest (its `[[segment]]` rules and `[early]`
//! settings) and the lowered entries. Output: the entries of each segment
//! ([`Segments::split`]) and the image, written into one temporary file
//! that is renamed into place at the end ([`write`]).
//!
//! The layout follows the kernel's unpacker (init/initramfs.c):
//! * every segment is a complete archive with its own trailer, and carries
//!   the parent directories of its entries (so each extracts on its own);
//! * an uncompressed archive starts at a 4-aligned file offset, and NULs
//!   between segments are skipped;
//! * data alignment counts from the start of the file: an uncompressed
//!   segment after others starts at a multiple of the largest alignment its
//!   files ask for, with zeros before it;
//! * a compressed stream is followed by NULs up to a 4-byte boundary when
//!   more follows; a legacy lz4 stream has no end marker, so four more NULs
//!   (an empty block) end it;
//! * the early loaders for CPU microcode and ACPI tables scan uncompressed
//!   archives from the start of the image only, so the early segment comes
//!   before every compressed one.

use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};

use crate::compress::{self, Compression, EncodeOptions};
use crate::cpio::header::pad_to;
use crate::cpio::writer;
use crate::entry::{display_name, AlignHint, Entry, Kind, Origin, Source};
use crate::error::{Error, Result, Warning};
use crate::manifest::de::Spanned;
use crate::manifest::load::{expand, Doc, Loaded};
use crate::manifest::model::{CompressionSpec, PathText};
use crate::output::Output;
use crate::pipeline::BuildReport;
use crate::plan::{self, AlignMode, Alignment, PlanOptions};
use crate::resolve::root::Root;

/// The segment that takes every entry no other segment takes.
pub const MAIN: &str = "main";
/// The segment `[early]`'s files go to.
pub const EARLY: &str = "early";
/// Where `[early] acpi` looks for tables when `acpi_dir` is not set.
pub const DEFAULT_ACPI_DIR: &str = "/etc/composer/acpi";

/// One segment, as the manifest configures it.
#[derive(Debug)]
pub struct SegmentSpec {
    pub name: String,
    pub compression: Compression,
    /// None: the method's default.
    pub level: Option<i32>,
    /// Encoder threads; 0: one per CPU.
    pub threads: u32,
    matcher: Option<GlobSet>,
}

impl SegmentSpec {
    fn new(name: &str, compression: Compression) -> SegmentSpec {
        SegmentSpec {
            name: name.to_string(),
            compression,
            level: None,
            threads: 0,
            matcher: None,
        }
    }

    /// The encoder options for this segment on a machine with `cpus` CPUs.
    /// By default at least two threads: multi-threaded zstd and xz write the
    /// same bytes for any number of threads, but not the same as with one,
    /// so the image does not depend on the machine that builds it.
    pub fn encode_options(&self, cpus: u32) -> EncodeOptions {
        let threads = match self.threads {
            0 => cpus.max(2),
            n => n,
        };
        EncodeOptions {
            method: self.compression,
            level: self.level,
            threads,
        }
    }
}

/// Every segment of an image, and the files `[early]` adds.
#[derive(Debug)]
pub struct Segments {
    pub specs: Vec<SegmentSpec>,
    /// Index of the segment that takes unassigned entries.
    pub main: usize,
    /// Index of the segment `early_entries` go to.
    pub early: Option<usize>,
    /// Microcode and ACPI tables with their directories, in archive order.
    pub early_entries: Vec<Entry>,
    /// Holds concatenated microcode files until the image is written.
    scratch: Option<tempfile::TempDir>,
}

impl Default for Segments {
    fn default() -> Self {
        Segments::plain()
    }
}

impl Segments {
    /// One uncompressed segment: a plain archive.
    pub fn plain() -> Segments {
        Segments {
            specs: vec![SegmentSpec::new(MAIN, Compression::None)],
            main: 0,
            early: None,
            early_entries: Vec::new(),
            scratch: None,
        }
    }

    /// Whether the image is one uncompressed archive of the entries alone.
    pub fn is_plain(&self) -> bool {
        self.specs.len() == 1
            && self.specs[0].compression == Compression::None
            && self.early_entries.is_empty()
    }

    /// The segment each entry goes to: the first whose `paths` match its
    /// name, else the main one. A directory no pattern matches goes only
    /// where its content goes (`None`), or to the main segment when nothing
    /// is below it.
    pub fn assign(&self, entries: &[Entry]) -> Vec<Option<usize>> {
        let mut nonempty: HashSet<&[u8]> = HashSet::new();
        for e in entries {
            for name in e.names() {
                let mut p = parent(name);
                while let Some(dir) = p {
                    if !nonempty.insert(dir) {
                        break;
                    }
                    p = parent(dir);
                }
            }
        }
        entries
            .iter()
            .map(|e| {
                let path = Path::new(OsStr::from_bytes(&e.name));
                let matched = self
                    .specs
                    .iter()
                    .position(|s| s.matcher.as_ref().is_some_and(|m| m.is_match(path)));
                match matched {
                    Some(k) => Some(k),
                    None if e.kind == Kind::Dir && nonempty.contains(e.name.as_slice()) => None,
                    None => Some(self.main),
                }
            })
            .collect()
    }

    /// The segments the image will have, with their entries: those that
    /// have entries, and the main one always (see [`Segments::split`]).
    pub fn present(&self, entries: &[Entry]) -> Vec<(usize, Vec<Entry>)> {
        self.split(entries)
            .into_iter()
            .enumerate()
            .filter(|(k, list)| *k == self.main || !list.is_empty())
            .collect()
    }

    /// The entries of each segment, in the order of `entries` (the early
    /// segment's own files first). A segment also gets a copy of every
    /// directory entry its entries are under.
    pub fn split(&self, entries: &[Entry]) -> Vec<Vec<Entry>> {
        let assigned = self.assign(entries);
        let dirs: HashMap<&[u8], usize> = entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.kind == Kind::Dir)
            .map(|(i, e)| (e.name.as_slice(), i))
            .collect();
        let mut wanted = vec![vec![false; entries.len()]; self.specs.len()];
        for (i, e) in entries.iter().enumerate() {
            let Some(k) = assigned[i] else {
                continue;
            };
            let w = &mut wanted[k];
            w[i] = true;
            for name in e.names() {
                let mut p = parent(name);
                while let Some(dir) = p {
                    match dirs.get(dir) {
                        Some(&d) if w[d] => break,
                        Some(&d) => w[d] = true,
                        None => {}
                    }
                    p = parent(dir);
                }
            }
        }
        let early_dirs: HashSet<&[u8]> = self
            .early_entries
            .iter()
            .filter(|e| e.kind == Kind::Dir)
            .map(|e| e.name.as_slice())
            .collect();
        wanted
            .iter()
            .enumerate()
            .map(|(k, w)| {
                let mut list = Vec::new();
                let early = self.early == Some(k);
                if early {
                    list.extend(self.early_entries.iter().cloned());
                }
                list.extend(
                    entries
                        .iter()
                        .zip(w)
                        .filter(|(e, &want)| {
                            want && !(early
                                && e.kind == Kind::Dir
                                && early_dirs.contains(e.name.as_slice()))
                        })
                        .map(|(e, _)| e.clone()),
                );
                list
            })
            .collect()
    }
}

fn parent(p: &[u8]) -> Option<&[u8]> {
    p.iter().rposition(|&b| b == b'/').map(|i| &p[..i])
}

fn method(spec: CompressionSpec) -> Compression {
    match spec {
        CompressionSpec::None => Compression::None,
        CompressionSpec::Gzip => Compression::Gzip,
        CompressionSpec::Zstd => Compression::Zstd,
        CompressionSpec::Xz => Compression::Xz,
        CompressionSpec::Lzma => Compression::Lzma,
        CompressionSpec::Bzip2 => Compression::Bzip2,
        CompressionSpec::Lz4 => Compression::Lz4,
    }
}

/// A segment as the documents describe it, merged by name.
struct Draft {
    name: Option<String>,
    compression: Option<CompressionSpec>,
    level: Option<(i32, Origin)>,
    threads: Option<u32>,
    paths: Vec<(String, Origin)>,
    origin: Origin,
}

/// `[early]` merged over the documents: for each key the last one wins.
#[derive(Default)]
struct EarlyDraft {
    microcode: bool,
    intel: Option<(PathBuf, Origin)>,
    amd: Option<(PathBuf, Origin)>,
    acpi: bool,
    acpi_dir: Option<(PathBuf, Origin)>,
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
        Ok(s) => expand(s, t.pos, &doc.file, &loaded.vars)?.into_bytes(),
        Err(_) => t.value.0.clone(),
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

fn globs(patterns: &[(String, Origin)]) -> Result<Option<GlobSet>> {
    if patterns.is_empty() {
        return Ok(None);
    }
    let mut b = GlobSetBuilder::new();
    for (p, origin) in patterns {
        let p = p.trim_start_matches('/');
        let g = GlobBuilder::new(p)
            .literal_separator(true)
            .build()
            .map_err(|e| Error::at(origin.clone(), format!("bad glob `{p}`: {}", e.kind())))?;
        b.add(g);
        // A directory's pattern also takes everything below it.
        let below = format!("{}/**", p.trim_end_matches('/'));
        if let Ok(g) = GlobBuilder::new(&below).literal_separator(true).build() {
            b.add(g);
        }
    }
    b.build()
        .map(Some)
        .map_err(|e| Error::usage(format!("bad glob set: {e}")))
}

/// Reads the segments and `[early]` of the loaded documents and gathers
/// the early files from the root. `entries` are the lowered entries (to
/// report names that `[early]` also makes).
pub fn prepare(
    loaded: &Loaded,
    entries: &[Entry],
    warnings: &mut Vec<Warning>,
) -> Result<Segments> {
    let root = Root::new(&loaded.root);
    let mut drafts: Vec<Draft> = Vec::new();
    let mut early = EarlyDraft::default();
    for doc in &loaded.docs {
        for rule in &doc.manifest.segment {
            let r = &rule.value;
            let origin = doc.origin(rule.pos);
            let name = match &r.name {
                Some(n) => {
                    let s = expand(n, n.pos, &doc.file, &loaded.vars)?;
                    if s.is_empty() {
                        return Err(Error::at(doc.origin(n.pos), "a segment name is empty"));
                    }
                    Some(s)
                }
                None => None,
            };
            let mut paths = Vec::new();
            for p in &r.paths {
                paths.push((
                    expand(p, p.pos, &doc.file, &loaded.vars)?,
                    doc.origin(p.pos),
                ));
            }
            let level = r.level.as_ref().map(|l| (l.value, doc.origin(l.pos)));
            let same = name
                .as_ref()
                .and_then(|n| drafts.iter().position(|d| d.name.as_ref() == Some(n)));
            match same {
                Some(i) => {
                    let d = &mut drafts[i];
                    d.compression = r.compression.or(d.compression);
                    d.level = level.or(d.level.take());
                    d.threads = r.threads.or(d.threads);
                    d.paths.extend(paths);
                }
                None => drafts.push(Draft {
                    name,
                    compression: r.compression,
                    level,
                    threads: r.threads,
                    paths,
                    origin,
                }),
            }
        }
        if let Some(e) = &doc.manifest.early {
            let v = &e.value;
            early.origin = Some(doc.origin(e.pos));
            early.microcode = v.microcode.unwrap_or(early.microcode);
            early.acpi = v.acpi.unwrap_or(early.acpi);
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
    }

    let mut segs = Segments::plain();
    if !drafts.is_empty() {
        segs.specs.clear();
        let named_main = drafts.iter().any(|d| d.name.as_deref() == Some(MAIN));
        let count = drafts.len();
        for (i, d) in drafts.into_iter().enumerate() {
            let compression = d.compression.map_or(Compression::None, method);
            let name = match d.name {
                Some(n) => n,
                None if i + 1 == count && !named_main => MAIN.to_string(),
                None => format!("segment {}", i + 1),
            };
            if let Some((level, origin)) = &d.level {
                match compression.levels() {
                    None => {
                        return Err(Error::at(
                            origin.clone(),
                            format!("segment `{name}`: {compression} has no levels"),
                        )
                        .with_hint("leave `level` out for none and lz4"))
                    }
                    Some((range, _)) if !range.contains(level) => {
                        return Err(Error::at(
                            origin.clone(),
                            format!(
                                "segment `{name}`: {compression} level {level} is out of range ({}..={})",
                                range.start(),
                                range.end()
                            ),
                        ))
                    }
                    Some(_) => {}
                }
            }
            let is_main = name == MAIN || (i + 1 == count && !named_main);
            if is_main && !d.paths.is_empty() {
                return Err(Error::at(
                    d.paths[0].1.clone(),
                    format!(
                        "segment `{name}` is the main segment: it takes every entry no other \
                         segment takes, so it has no `paths`"
                    ),
                )
                .with_hint(
                    "move the patterns to a segment before it, or add a segment after it \
                     (or one named \"main\") to be the main one",
                ));
            }
            if !is_main && d.paths.is_empty() && name != EARLY {
                warnings.push(Warning {
                    origin: Some(d.origin.clone()),
                    message: format!(
                        "segment `{name}` has no `paths` and is not the main segment: it stays empty"
                    ),
                });
            }
            segs.specs.push(SegmentSpec {
                name,
                compression,
                level: d.level.map(|(l, _)| l),
                threads: d.threads.unwrap_or(0),
                matcher: globs(&d.paths)?,
            });
            if is_main {
                segs.main = i;
            }
        }
    }

    if early.microcode || early.acpi {
        let origin = early.origin.clone().unwrap_or_default();
        let (list, scratch) = gather_early(&early, &root, &origin, warnings)?;
        let made: HashMap<&[u8], ()> = list
            .iter()
            .filter(|e| e.kind != Kind::Dir)
            .map(|e| (e.name.as_slice(), ()))
            .collect();
        for e in entries {
            for n in e.names() {
                if made.contains_key(n) {
                    return Err(Error::at(
                        e.origin.clone(),
                        format!("`/{}` is also made by [early] at {origin}", display_name(n)),
                    )
                    .with_hint("leave it to [early], or turn [early] off for it"));
                }
            }
        }
        let at = match segs.specs.iter().position(|s| s.name == EARLY) {
            Some(i) => i,
            None => {
                segs.specs
                    .insert(0, SegmentSpec::new(EARLY, Compression::None));
                segs.main += 1;
                0
            }
        };
        let spec = &segs.specs[at];
        if spec.compression != Compression::None {
            return Err(Error::at(
                origin,
                format!(
                    "the early segment is compressed ({}): the kernel's microcode and ACPI \
                     loaders read only uncompressed archives",
                    spec.compression
                ),
            )
            .with_hint("set compression = \"none\" on the segment named \"early\""));
        }
        if let Some(c) = segs.specs[..at]
            .iter()
            .find(|s| s.compression != Compression::None)
        {
            return Err(Error::at(
                origin,
                format!(
                    "segment `{}` is compressed and comes before the early segment: the \
                     kernel's early loaders stop at the first compressed archive",
                    c.name
                ),
            )
            .with_hint("declare the segment named \"early\" first"));
        }
        segs.early = Some(at);
        segs.early_entries = list;
        segs.scratch = scratch;
    }
    Ok(segs)
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
                let source = Source {
                    path: path.clone(),
                    size: meta.len(),
                    mtime: meta.mtime(),
                };
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
            let source = Source {
                path: path.clone(),
                size: meta.len(),
                mtime: meta.mtime(),
            };
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
        let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
        let method = firmware_name(&path.to_string_lossy()).1;
        let data = match method {
            Compression::None => bytes,
            m => {
                compress::decode(m, &bytes)
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
    drop(out);
    let size = std::fs::metadata(&target)
        .map_err(|e| Error::io(&target, e))?
        .len();
    let source = Source {
        path: target,
        size,
        mtime,
    };
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
    let with_rule = |rule: &str| {
        let mut o = origin.clone();
        o.rule = Some(Arc::from(rule));
        o
    };
    let dir = |name: &str, o: &Origin| {
        let mut e = Entry::new(name.as_bytes().to_vec(), Kind::Dir, 0o755, o.clone());
        e.mtime = Some(0);
        e
    };
    let file = |name: Vec<u8>, source: Source, o: &Origin| {
        Entry::new(
            name,
            Kind::File {
                source,
                links: vec![],
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
            warnings.push(Warning {
                origin: Some(o.clone()),
                message: format!(
                    "[early] microcode: no microcode in the root `{}` (looked in \
                     /usr/lib/firmware and /lib/firmware for intel-ucode and amd-ucode)",
                    root.path().display()
                ),
            });
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
            None => (
                root.resolve(Path::new(DEFAULT_ACPI_DIR), true)
                    .unwrap_or_else(|_| root.join(Path::new(DEFAULT_ACPI_DIR))),
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
        if tables.is_empty() {
            warnings.push(Warning {
                origin: Some(o.clone()),
                message: format!("[early] acpi: no *.aml tables in `{}`", path.display()),
            });
        } else {
            for d in ["kernel/firmware", "kernel/firmware/acpi"] {
                list.push(dir(d, &o));
            }
            for (p, meta) in tables {
                let mut name = b"kernel/firmware/acpi/".to_vec();
                name.extend_from_slice(p.file_name().unwrap_or_default().as_bytes());
                let source = Source {
                    path: p.clone(),
                    size: meta.len(),
                    mtime: meta.mtime(),
                };
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

/// The largest data alignment the files of a segment ask for.
fn data_alignment(entries: &[Entry], default: u32) -> u32 {
    entries
        .iter()
        .filter_map(|e| {
            let Kind::File { source, .. } = &e.kind else {
                return None;
            };
            let a = match e.align {
                AlignHint::Default => default,
                AlignHint::Never => 0,
                AlignHint::Bytes(n) => n,
            };
            (a > 0 && source.size > a as u64).then_some(a)
        })
        .max()
        .unwrap_or(0)
}

/// A reader that fills every buffer it is given (short only at the end),
/// so an encoder sees the same chunks whatever the pipe delivers.
struct FullReads<R>(R);

impl<R: Read> Read for FullReads<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut n = 0;
        while n < buf.len() {
            match self.0.read(&mut buf[n..]) {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(n)
    }
}

fn zeros(out: &File, out_name: &str, n: u64) -> Result<()> {
    const ZEROS: [u8; 4096] = [0; 4096];
    let mut left = n;
    let mut f = out;
    while left > 0 {
        let k = left.min(ZEROS.len() as u64) as usize;
        f.write_all(&ZEROS[..k])
            .map_err(|e| Error::io(out_name, e))?;
        left -= k as u64;
    }
    Ok(())
}

fn broken_pipe(e: &Error) -> bool {
    matches!(e, Error::Io { source, .. } if source.kind() == io::ErrorKind::BrokenPipe)
}

/// Writes the archive of `layout` compressed at the output's position: a
/// writer thread produces the archive into a pipe, this thread encodes it.
/// Returns the compressed size.
fn compress_layout(
    layout: &plan::Layout,
    out: &File,
    out_name: &str,
    opts: &EncodeOptions,
) -> Result<u64> {
    let (reader, pipe) = io::pipe().map_err(|e| Error::io(out_name, e))?;
    let pipe = File::from(OwnedFd::from(pipe));
    std::thread::scope(|scope| {
        let producer = scope.spawn(move || {
            let r = writer::write(layout, &pipe, out_name, 1);
            drop(pipe);
            r
        });
        let mut sink = BufWriter::with_capacity(1 << 20, out);
        let mut src = FullReads(reader);
        let encoded =
            compress::encode(opts, &mut src, &mut sink).and_then(|n| sink.flush().map(|()| n));
        // Unblock the producer before waiting for it.
        drop(src);
        let produced = producer
            .join()
            .unwrap_or_else(|_| Err(Error::usage("internal error: the archive writer panicked")));
        match (produced, encoded) {
            (Ok(_), Ok(n)) => Ok(n),
            (Err(e), Ok(_)) => Err(e),
            (Err(e), Err(_)) if !broken_pipe(&e) => Err(e),
            (_, Err(e)) => Err(Error::io(out_name, e)),
        }
    })
}

/// One segment of an image as it will be written: its entries (with
/// alignment turned off inside a compressed stream) and how they are planned.
pub struct Part {
    /// Index into [`Segments::specs`].
    pub spec: usize,
    pub entries: Vec<Entry>,
    pub opts: PlanOptions,
    /// An uncompressed segment starts at a multiple of this (its largest
    /// data alignment, at least 4), so offsets inside it keep their
    /// alignment in the image; 0 for a compressed segment.
    pub start_align: u64,
}

/// The segments an image is written as, in order: every segment that has
/// entries, and the main one always. `composer plan` and `composer build`
/// both start from here, so the plan is what the build writes.
pub fn parts(segs: &Segments, entries: &[Entry], opts: &PlanOptions) -> Vec<Part> {
    segs.present(entries)
        .into_iter()
        .map(|(k, list)| {
            if segs.specs[k].compression == Compression::None {
                Part {
                    spec: k,
                    start_align: data_alignment(&list, opts.align).max(4) as u64,
                    entries: list,
                    opts: *opts,
                }
            } else {
                // Alignment means nothing inside a compressed stream.
                let entries = list
                    .into_iter()
                    .map(|e| Entry {
                        align: AlignHint::Never,
                        ..e
                    })
                    .collect();
                Part {
                    spec: k,
                    entries,
                    opts: PlanOptions {
                        align: 0,
                        mode: AlignMode::GenInitCpio,
                        ..*opts
                    },
                    start_align: 0,
                }
            }
        })
        .collect()
}

/// NULs between the end of one segment at `pos` and the start of the next
/// (`next_align`: 0 for a compressed segment).
fn gap_before(pos: u64, prev: Option<Compression>, next_align: u64) -> u64 {
    let mut pad = pad_to(pos, 4);
    if prev == Some(Compression::Lz4) {
        // The kernel's lz4 decoder reads a 4-byte size after the last block.
        pad += 4;
    }
    let at = pos + pad;
    pad + pad_to(at, next_align.max(4))
}

/// The layout of one part, and where it starts in the image when that is
/// known before anything is compressed.
pub struct PlannedPart<'a> {
    pub part: &'a Part,
    pub layout: plan::Layout<'a>,
    /// None after a compressed segment, whose size is known only once written.
    pub start: Option<u64>,
}

/// Plans every part; starts are known up to the first compressed segment.
pub fn plan_parts<'a>(segs: &Segments, parts: &'a [Part]) -> Vec<PlannedPart<'a>> {
    let mut pos = Some(0u64);
    let mut prev: Option<Compression> = None;
    parts
        .iter()
        .map(|part| {
            let layout = plan::plan(&part.entries, &part.opts);
            let start = pos.map(|p| p + gap_before(p, prev, part.start_align));
            let method = segs.specs[part.spec].compression;
            pos = match (start, method) {
                (Some(s), Compression::None) => Some(s + layout.size),
                _ => None,
            };
            prev = Some(method);
            PlannedPart {
                part,
                layout,
                start,
            }
        })
        .collect()
}

/// Writes the image: every part in order, into one temporary file renamed
/// into place at the end.
pub fn write(
    segs: &Segments,
    entries: &[Entry],
    opts: &PlanOptions,
    output: &Path,
    sync: bool,
) -> Result<BuildReport> {
    if segs.is_plain() {
        return crate::pipeline::write_entries(entries, opts, output, sync);
    }
    let parts = parts(segs, entries, opts);
    let planned = plan_parts(segs, &parts);
    let out = Output::create(output)?;
    let name = out.name();
    let file = out.file();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
    let writers = cpus.min(4) as usize;
    let mut report = BuildReport::default();
    let mut pos: u64 = 0;
    let mut prev: Option<Compression> = None;
    for p in &planned {
        let spec = &segs.specs[p.part.spec];
        let pad = gap_before(pos, prev, p.part.start_align);
        zeros(file, &name, pad)?;
        pos += pad;
        debug_assert!(p.start.is_none_or(|s| s == pos));
        let layout = &p.layout;
        report.warnings.extend(layout.warnings.iter().cloned());
        if spec.compression == Compression::None {
            let stats = writer::write_at(layout, file, &name, writers, pos)?;
            report.stats.copy_file_range_bytes += stats.copy_file_range_bytes;
            report.stats.buffered_bytes += stats.buffered_bytes;
            report.stats.hole_bytes += stats.hole_bytes;
            report
                .misses
                .extend(layout.records.iter().filter_map(|r| match r.alignment {
                    Alignment::Missed(a) => Some((r.name.to_vec(), a)),
                    _ => None,
                }));
            pos += layout.size;
        } else {
            pos += compress_layout(layout, file, &name, &spec.encode_options(cpus))?;
        }
        prev = Some(spec.compression);
    }
    out.commit(sync)?;
    report.stats.bytes = pos;
    report.size = pos;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(name: &str, kind: Kind) -> Entry {
        Entry::new(name.as_bytes().to_vec(), kind, 0o644, Origin::default())
    }

    fn file(name: &str) -> Entry {
        e(
            name,
            Kind::File {
                source: Source::unresolved(PathBuf::from("/x")),
                links: vec![],
            },
        )
    }

    fn segs(patterns: &[&str]) -> Segments {
        let first = SegmentSpec {
            matcher: globs(
                &patterns
                    .iter()
                    .map(|p| (p.to_string(), Origin::default()))
                    .collect::<Vec<_>>(),
            )
            .unwrap(),
            ..SegmentSpec::new("firmware", Compression::None)
        };
        Segments {
            specs: vec![first, SegmentSpec::new(MAIN, Compression::Zstd)],
            main: 1,
            ..Segments::plain()
        }
    }

    fn names(list: &[Entry]) -> Vec<String> {
        list.iter().map(|e| display_name(&e.name)).collect()
    }

    #[test]
    fn entries_go_to_the_first_match_with_their_parents() {
        let entries = vec![
            e("lib", Kind::Dir),
            e("lib/firmware", Kind::Dir),
            file("lib/firmware/a.bin.xz"),
            file("lib/firmware/b.bin"),
            e("usr", Kind::Dir),
            file("usr/x.ko.zst"),
        ];
        let parts = segs(&["/lib/firmware/*.xz", "**/*.ko.zst"]).split(&entries);
        assert_eq!(
            names(&parts[0]),
            [
                "lib",
                "lib/firmware",
                "lib/firmware/a.bin.xz",
                "usr",
                "usr/x.ko.zst"
            ]
        );
        assert_eq!(
            names(&parts[1]),
            ["lib", "lib/firmware", "lib/firmware/b.bin"]
        );
    }

    #[test]
    fn empty_directories_go_to_the_main_segment() {
        let entries = vec![
            e("a", Kind::Dir),
            e("a/b", Kind::Dir),
            e("etc", Kind::Dir),
            file("etc/x.xz"),
        ];
        let parts = segs(&["**/*.xz"]).split(&entries);
        assert_eq!(names(&parts[0]), ["etc", "etc/x.xz"]);
        assert_eq!(names(&parts[1]), ["a", "a/b"]);
    }

    #[test]
    fn a_directory_pattern_takes_what_is_below() {
        let entries = vec![e("etc", Kind::Dir), file("etc/a"), file("b")];
        let parts = segs(&["etc"]).split(&entries);
        assert_eq!(names(&parts[0]), ["etc", "etc/a"]);
        assert_eq!(names(&parts[1]), ["b"]);
    }

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

    #[test]
    fn alignment_of_a_segment() {
        let mut big = file("big");
        if let Kind::File { source, .. } = &mut big.kind {
            source.size = 100_000;
        }
        let mut own = big.clone();
        own.align = AlignHint::Bytes(65536);
        assert_eq!(data_alignment(&[big.clone()], 4096), 4096);
        assert_eq!(data_alignment(&[big.clone(), own], 4096), 65536);
        assert_eq!(data_alignment(&[big], 0), 0);
    }
}

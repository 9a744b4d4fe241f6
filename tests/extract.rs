//! Archives of the legacy-list corpus (`tests/lists/*.list`) extract with GNU cpio
//! (`cpio -idm --no-absolute-filenames`) and with bsdtar (`bsdtar -xpf`) into exactly
//! the tree the list describes: type, content, permission bits (setuid, setgid, sticky
//! included), owner (as root), symlink target, device numbers, hardlinks sharing one
//! inode with the right link count, file mtimes, and nothing else.
//!
//! The expectation comes from the test's own list parser (`tests/corpus/mod.rs`), not
//! from composer. The same checks run on the kernel gen_init_cpio's archives as a
//! control, so a broken harness is told apart from a broken composer.
//!
//! libarchive cannot create sockets: bsdtar writes an empty regular file instead, which
//! is what the bsdtar checks expect.
//!
//! Paths can be longer than PATH_MAX once the scratch directory is prefixed, so every
//! path is resolved relative to an open directory through `/proc/self/fd/<fd>/...`.
//!
//! `COMPOSER_CORPUS_FILTER=<substring>` limits the run to some lists.

use crate::corpus;
use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::fs::{self, File, Metadata};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use corpus::{Kind, ListFile, MTIME};

// ---------------------------------------------------------------------------------------
// Producing archives
// ---------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug)]
enum Producer {
    Oracle,
    Composer,
    ComposerAligned(u32),
    /// `composer build --list` in readers mode (the manifests' default): reordered,
    /// names padded with `./`, symlink targets without their NUL.
    ComposerReaders(u32),
}

fn produce(
    p: Producer,
    l: &ListFile,
    fixtures: &Path,
    oracle: Option<&Path>,
) -> Result<Vec<u8>, String> {
    let t = MTIME.to_string();
    let mut cmd = match p {
        Producer::Oracle => {
            let mut c = Command::new(oracle.expect("oracle"));
            c.args(["-t", &t]);
            c
        }
        Producer::Composer => {
            let mut c = support::composer();
            c.args(l.composer_args("gen-init-cpio")).args(["-t", &t]);
            c
        }
        Producer::ComposerAligned(n) => {
            let mut c = support::composer();
            c.args(l.composer_args("gen-init-cpio"))
                .args(["-t", &t, "-a", &n.to_string()]);
            c
        }
        Producer::ComposerReaders(n) => {
            let mut c = support::composer();
            c.args(l.composer_args("build")).args([
                "-t",
                &t,
                "-a",
                &n.to_string(),
                "--align-mode",
                "readers",
                "-o",
                "-",
                "--list",
            ]);
            c
        }
    };
    cmd.arg(&l.path);
    corpus::apply_env(&mut cmd, fixtures);
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{p:?} failed with {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(out.stdout)
}

// ---------------------------------------------------------------------------------------
// Extracting
// ---------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Extractor {
    GnuCpio,
    Bsdtar,
    ThreeCpio,
}

impl Extractor {
    fn tool(self) -> Option<PathBuf> {
        match self {
            Extractor::GnuCpio => support::require_tool("cpio", "cpio"),
            Extractor::Bsdtar => support::require_tool("bsdtar", "libarchive-tools"),
            Extractor::ThreeCpio => support::require_tool("3cpio", "3cpio"),
        }
    }

    fn extract(self, tool: &Path, archive: &Path, dest: &Path) -> Result<(), String> {
        let mut cmd = Command::new(tool);
        match self {
            Extractor::GnuCpio => {
                cmd.args(["-idm", "--no-absolute-filenames", "--quiet", "-F"])
                    .arg(archive)
                    .current_dir(dest);
            }
            Extractor::Bsdtar => {
                cmd.arg("-xpf").arg(archive).arg("-C").arg(dest);
            }
            Extractor::ThreeCpio => {
                cmd.arg("-x").arg("-C").arg(dest).arg(archive);
            }
        }
        let out = cmd
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
        if !out.status.success() || !out.stderr.is_empty() {
            return Err(format!(
                "{self:?} exited with {}; stderr: {}",
                out.status,
                shorten(&String::from_utf8_lossy(&out.stderr))
            ));
        }
        Ok(())
    }
}

/// Shortens every word of more than 80 characters (long names in tool messages).
fn shorten(text: &str) -> String {
    let lines: Vec<String> = text
        .trim()
        .lines()
        .take(20)
        .map(|line| {
            line.split(' ')
                .map(|w| {
                    if w.chars().count() > 80 {
                        let head: String = w.chars().take(30).collect();
                        let tail: String = w
                            .chars()
                            .rev()
                            .take(30)
                            .collect::<Vec<_>>()
                            .into_iter()
                            .rev()
                            .collect();
                        format!("{head}...{tail}")
                    } else {
                        w.to_string()
                    }
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    lines.join("\n      ")
}

// ---------------------------------------------------------------------------------------
// Deep paths
// ---------------------------------------------------------------------------------------

/// A path usable with std::fs even when the full path would exceed PATH_MAX: directory
/// handles are opened along the way and the path goes through `/proc/self/fd/<fd>`.
struct Deep {
    _dirs: Vec<File>,
    path: PathBuf,
}

fn fd_path(dir: &File, rest: &[u8]) -> PathBuf {
    let mut p = format!("/proc/self/fd/{}", dir.as_raw_fd()).into_bytes();
    if !rest.is_empty() {
        p.push(b'/');
        p.extend_from_slice(rest);
    }
    PathBuf::from(OsStr::from_bytes(&p))
}

fn deep(root: &Path, rel: &[u8]) -> Result<Deep, String> {
    let mut dirs = vec![File::open(root).map_err(|e| format!("{}: {e}", root.display()))?];
    let comps: Vec<&[u8]> = rel
        .split(|&b| b == b'/')
        .filter(|c| !c.is_empty())
        .collect();
    let mut pending: Vec<u8> = Vec::new();
    for (i, c) in comps.iter().enumerate() {
        let last = i + 1 == comps.len();
        if !last && pending.len() + c.len() > 2000 {
            let p = fd_path(dirs.last().unwrap(), &pending);
            let f = File::open(&p)
                .map_err(|e| format!("opening a parent of {}: {e}", corpus::show(rel)))?;
            dirs.push(f);
            pending.clear();
        }
        if !pending.is_empty() {
            pending.push(b'/');
        }
        pending.extend_from_slice(c);
    }
    let path = fd_path(dirs.last().unwrap(), &pending);
    Ok(Deep { _dirs: dirs, path })
}

/// Every path below `root` (relative, bytes) with its metadata.
fn walk(root: &Path) -> Result<BTreeMap<Vec<u8>, Metadata>, String> {
    fn rec(dir: &File, prefix: &[u8], out: &mut BTreeMap<Vec<u8>, Metadata>) -> Result<(), String> {
        let rd = fs::read_dir(fd_path(dir, b""))
            .map_err(|e| format!("reading {}: {e}", corpus::show(prefix)))?;
        for ent in rd {
            let ent = ent.map_err(|e| e.to_string())?;
            let name = ent.file_name();
            let rel = if prefix.is_empty() {
                name.as_bytes().to_vec()
            } else {
                [prefix, b"/", name.as_bytes()].concat()
            };
            let p = fd_path(dir, name.as_bytes());
            let md = fs::symlink_metadata(&p)
                .map_err(|e| format!("lstat {}: {e}", corpus::show(&rel)))?;
            if md.is_dir() {
                let sub =
                    File::open(&p).map_err(|e| format!("open {}: {e}", corpus::show(&rel)))?;
                rec(&sub, &rel, out)?;
            }
            out.insert(rel, md);
        }
        Ok(())
    }
    let mut out = BTreeMap::new();
    let f = File::open(root).map_err(|e| e.to_string())?;
    rec(&f, b"", &mut out)?;
    Ok(out)
}

// ---------------------------------------------------------------------------------------
// Checking the tree against the list
// ---------------------------------------------------------------------------------------

fn dev_major(rdev: u64) -> u64 {
    ((rdev >> 8) & 0xfff) | ((rdev >> 32) & !0xfff)
}

fn dev_minor(rdev: u64) -> u64 {
    (rdev & 0xff) | ((rdev >> 12) & !0xff)
}

/// The normalized name an extractor uses: no leading slashes (both extractors strip
/// them).
fn normalize(name: &[u8]) -> Vec<u8> {
    let mut n = name;
    while let Some(rest) = n.strip_prefix(b"/") {
        n = rest;
    }
    n.to_vec()
}

struct Expect {
    entry: corpus::ListEntry,
    /// For files: index of the hardlink group (one per file line) and its size.
    group: Option<(usize, usize)>,
}

fn type_name(md: &Metadata) -> &'static str {
    let ft = md.file_type();
    if ft.is_file() {
        "file"
    } else if ft.is_dir() {
        "dir"
    } else if ft.is_symlink() {
        "slink"
    } else if ft.is_block_device() {
        "nod b"
    } else if ft.is_char_device() {
        "nod c"
    } else if ft.is_fifo() {
        "pipe"
    } else if ft.is_socket() {
        "sock"
    } else {
        "?"
    }
}

/// `sockets_as_files`: the extractor (libarchive) cannot make sockets and writes an empty
/// regular file instead; expect that.
fn check_tree(
    dest: &Path,
    l: &ListFile,
    fixtures: &Path,
    check_owner: bool,
    sockets_as_files: bool,
) -> Result<(), String> {
    let errors = tree_problems(dest, l, fixtures, check_owner, sockets_as_files);
    if errors.is_empty() {
        Ok(())
    } else {
        let n = errors.len();
        let mut s = errors
            .into_iter()
            .take(10)
            .collect::<Vec<_>>()
            .join("\n    ");
        if n > 10 {
            s.push_str(&format!("\n    ... and {} more", n - 10));
        }
        Err(format!("{n} problems in the extracted tree:\n    {s}"))
    }
}

/// Every difference between the tree at `dest` and what list `l` describes.
fn tree_problems(
    dest: &Path,
    l: &ListFile,
    fixtures: &Path,
    check_owner: bool,
    sockets_as_files: bool,
) -> Vec<String> {
    let vars = corpus::env_vars(fixtures);
    let entries = corpus::parse_list(&l.bytes, &vars);
    let mut expect: BTreeMap<Vec<u8>, Expect> = BTreeMap::new();
    let mut group_sizes = Vec::new();
    for e in entries {
        let names = e.all_names();
        let group = matches!(e.kind, Kind::File { .. }).then(|| {
            group_sizes.push(names.len());
            (group_sizes.len() - 1, names.len())
        });
        for n in names {
            expect.insert(
                normalize(&n),
                Expect {
                    entry: e.clone(),
                    group,
                },
            );
        }
    }
    let mut errors = Vec::new();
    let mut inodes: BTreeMap<usize, BTreeSet<u64>> = BTreeMap::new();
    for (path, x) in &expect {
        let e = &x.entry;
        let at = format!("{} (line {})", corpus::show(path), e.line);
        let d = match deep(dest, path) {
            Ok(d) => d,
            Err(msg) => {
                errors.push(format!("{at}: {msg}"));
                continue;
            }
        };
        let md = match fs::symlink_metadata(&d.path) {
            Ok(m) => m,
            Err(err) => {
                errors.push(format!("{at}: missing ({err})"));
                continue;
            }
        };
        let want_type = match &e.kind {
            Kind::File { .. } => "file",
            Kind::Dir => "dir",
            Kind::Slink { .. } => "slink",
            Kind::Nod { block: true, .. } => "nod b",
            Kind::Nod { block: false, .. } => "nod c",
            Kind::Pipe => "pipe",
            Kind::Sock if sockets_as_files => "file",
            Kind::Sock => "sock",
        };
        if type_name(&md) != want_type {
            errors.push(format!("{at}: is a {}, want a {want_type}", type_name(&md)));
            continue;
        }
        let perm = md.mode() & 0o7777;
        if !md.file_type().is_symlink() && perm != e.perm {
            errors.push(format!("{at}: mode {perm:04o}, want {:04o}", e.perm));
        }
        if check_owner {
            // -1 (0xFFFFFFFF) means "leave unchanged" to chown: no owner to check.
            if e.uid != u32::MAX && md.uid() != e.uid {
                errors.push(format!("{at}: uid {}, want {}", md.uid(), e.uid));
            }
            if e.gid != u32::MAX && md.gid() != e.gid {
                errors.push(format!("{at}: gid {}, want {}", md.gid(), e.gid));
            }
        }
        match &e.kind {
            Kind::File { location, .. } => {
                let want = corpus::content_of(location, fixtures);
                match fs::read(&d.path) {
                    Ok(got) if got == want => {}
                    Ok(got) => errors.push(format!(
                        "{at}: content differs ({} bytes, want {}; first difference at {})",
                        got.len(),
                        want.len(),
                        got.iter()
                            .zip(&want)
                            .position(|(a, b)| a != b)
                            .unwrap_or(got.len().min(want.len()))
                    )),
                    Err(err) => errors.push(format!("{at}: cannot read: {err}")),
                }
                if md.mtime() != MTIME as i64 {
                    errors.push(format!("{at}: mtime {}, want {MTIME}", md.mtime()));
                }
                let (g, size) = x.group.unwrap();
                if md.nlink() != size as u64 {
                    errors.push(format!("{at}: nlink {}, want {size}", md.nlink()));
                }
                inodes.entry(g).or_default().insert(md.ino());
            }
            Kind::Slink { target } => match fs::read_link(&d.path) {
                Ok(t) if t.as_os_str().as_bytes() == target.as_slice() => {}
                Ok(t) => errors.push(format!(
                    "{at}: symlink target {}, want {}",
                    corpus::show(t.as_os_str().as_bytes()),
                    corpus::show(target)
                )),
                Err(err) => errors.push(format!("{at}: readlink: {err}")),
            },
            Kind::Nod { major, minor, .. } => {
                let rdev = md.rdev();
                if dev_major(rdev) != *major as u64 || dev_minor(rdev) != *minor as u64 {
                    errors.push(format!(
                        "{at}: device {}:{}, want {major}:{minor}",
                        dev_major(rdev),
                        dev_minor(rdev)
                    ));
                }
            }
            Kind::Sock if md.len() != 0 => {
                errors.push(format!("{at}: socket replaced by a non-empty file"))
            }
            Kind::Dir | Kind::Pipe | Kind::Sock => {}
        }
    }
    for (g, inos) in &inodes {
        if inos.len() != 1 {
            errors.push(format!(
                "hardlink group #{g} has {} different inodes",
                inos.len()
            ));
        }
    }
    // Nothing else: every path found is listed or is a parent of a listed path.
    let mut allowed: BTreeSet<Vec<u8>> = expect.keys().cloned().collect();
    for p in expect.keys() {
        let mut q = p.as_slice();
        while let Some(i) = q.iter().rposition(|&b| b == b'/') {
            q = &q[..i];
            allowed.insert(q.to_vec());
        }
    }
    match walk(dest) {
        Ok(found) => {
            for p in found.keys() {
                if !allowed.contains(p) {
                    errors.push(format!(
                        "{}: extracted but not in the list",
                        corpus::show(p)
                    ));
                }
            }
        }
        Err(msg) => errors.push(format!("walking the tree: {msg}")),
    }
    errors
}

// ---------------------------------------------------------------------------------------
// The tests
// ---------------------------------------------------------------------------------------

fn has_nodes(l: &ListFile, fixtures: &Path) -> bool {
    corpus::parse_list(&l.bytes, &corpus::env_vars(fixtures))
        .iter()
        .any(|e| matches!(e.kind, Kind::Nod { .. }))
}

fn extract_corpus(producer: Producer, extractor: Extractor) {
    let oracle = match producer {
        Producer::Oracle => match support::kernel_gen_init_cpio() {
            Some(o) => Some(o),
            None => return,
        },
        _ => None,
    };
    let Some(tool) = extractor.tool() else { return };
    let root = support::is_root();
    if !root {
        // Owners cannot be set and device nodes cannot be made: say so (fails in strict
        // mode), then check the rest.
        support::require_root();
    }
    let fixtures = corpus::fixtures();
    let scratch = support::Scratch::new(&format!("extract-{producer:?}-{extractor:?}"));
    let lists = corpus::selected_lists();
    let mut failures = Vec::new();
    let mut checked = 0;
    for (i, l) in lists.iter().enumerate() {
        if l.no_extract
            || (!root && has_nodes(l, fixtures))
            || (extractor == Extractor::ThreeCpio && l.no_3cpio)
        {
            continue;
        }
        let archive = scratch.join(format!("{i}.cpio"));
        let dest = scratch.join(format!("{i}.d"));
        let result = produce(producer, l, fixtures, oracle.as_deref())
            .and_then(|bytes| fs::write(&archive, bytes).map_err(|e| e.to_string()))
            .and_then(|()| fs::create_dir(&dest).map_err(|e| e.to_string()))
            .and_then(|()| extractor.extract(&tool, &archive, &dest))
            .and_then(|()| {
                check_tree(
                    &dest,
                    l,
                    fixtures,
                    root,
                    matches!(extractor, Extractor::Bsdtar),
                )
            });
        match result {
            Ok(()) => {
                checked += 1;
                let _ = fs::remove_file(&archive);
                remove_tree(&dest);
            }
            Err(msg) => failures.push(format!("--- {}: {msg}", l.name)),
        }
    }
    if !failures.is_empty() {
        panic!(
            "{producer:?} archives extracted with {extractor:?}: {} of {} lists failed\n{}",
            failures.len(),
            failures.len() + checked,
            failures.join("\n")
        );
    }
    eprintln!("{producer:?} archives extracted with {extractor:?}: {checked} lists ok");
}

/// Removes an extracted tree (`remove_dir_all` copes with paths longer than PATH_MAX;
/// as root, also with 0000 directories).
fn remove_tree(dest: &Path) {
    let _ = fs::remove_dir_all(dest);
}

#[test]
fn oracle_archives_extract_with_gnu_cpio() {
    extract_corpus(Producer::Oracle, Extractor::GnuCpio);
}

#[test]
fn oracle_archives_extract_with_bsdtar() {
    extract_corpus(Producer::Oracle, Extractor::Bsdtar);
}

#[test]
fn composer_archives_extract_with_gnu_cpio() {
    extract_corpus(Producer::Composer, Extractor::GnuCpio);
}

#[test]
fn composer_archives_extract_with_bsdtar() {
    extract_corpus(Producer::Composer, Extractor::Bsdtar);
}

#[test]
fn composer_aligned_archives_extract_with_gnu_cpio() {
    extract_corpus(Producer::ComposerAligned(4096), Extractor::GnuCpio);
}

#[test]
fn composer_aligned_archives_extract_with_bsdtar() {
    extract_corpus(Producer::ComposerAligned(4096), Extractor::Bsdtar);
}

/// Readers mode, the manifests' default, keeps its promise: GNU cpio, bsdtar and 3cpio
/// (which takes neither NULs after a name nor a symlink target's NUL) extract the
/// corpus's archives aligned to 4096 and 65536, every name padded with `./` where it
/// needs padding.
#[test]
fn composer_readers_archives_extract_with_gnu_cpio() {
    extract_corpus(Producer::ComposerReaders(4096), Extractor::GnuCpio);
}

#[test]
fn composer_readers_archives_extract_with_bsdtar() {
    extract_corpus(Producer::ComposerReaders(4096), Extractor::Bsdtar);
}

#[test]
fn composer_readers_archives_extract_with_3cpio() {
    extract_corpus(Producer::ComposerReaders(4096), Extractor::ThreeCpio);
    extract_corpus(Producer::ComposerReaders(65536), Extractor::ThreeCpio);
}

/// The checker itself finds wrong modes, targets, contents, broken hardlinks and extra
/// entries (a tree extracted from the oracle's archive, then damaged).
#[test]
fn checker_detects_differences() {
    let Some(oracle) = support::kernel_gen_init_cpio() else {
        return;
    };
    let Some(tool) = Extractor::GnuCpio.tool() else {
        return;
    };
    if !support::require_root() {
        return;
    }
    let fixtures = corpus::fixtures();
    let l = corpus::lists()
        .into_iter()
        .find(|l| l.name.starts_with("09-"))
        .unwrap();
    let scratch = support::Scratch::new("extract-checker");
    let archive = scratch.join("a.cpio");
    let dest = scratch.join("d");
    fs::write(
        &archive,
        produce(Producer::Oracle, &l, fixtures, Some(&oracle)).unwrap(),
    )
    .unwrap();
    fs::create_dir(&dest).unwrap();
    Extractor::GnuCpio.extract(&tool, &archive, &dest).unwrap();
    check_tree(&dest, &l, fixtures, true, false).unwrap();

    use std::os::unix::fs::PermissionsExt;
    let g = dest.join("g");
    fs::set_permissions(g.join("plain"), fs::Permissions::from_mode(0o600)).unwrap();
    fs::remove_file(g.join("sl")).unwrap();
    std::os::unix::fs::symlink("a2", g.join("sl")).unwrap();
    let a2 = fs::read(g.join("a2")).unwrap();
    fs::remove_file(g.join("a2")).unwrap();
    fs::write(g.join("a2"), a2).unwrap();
    fs::write(g.join("extra"), b"x").unwrap();
    let mut c1 = fs::read(g.join("c1")).unwrap();
    c1[100] ^= 1;
    fs::write(g.join("c1"), c1).unwrap();
    fs::remove_file(g.join("null")).unwrap();
    let err = tree_problems(&dest, &l, fixtures, true, false).join("\n");
    for needle in [
        "\"g/plain\" (line 8): mode 0600, want 0644",
        "\"g/sl\" (line 6): symlink target \"a2\", want \"a1\"",
        "different inodes",
        "\"g/a2\" (line 3): nlink 1, want 2",
        "\"g/c1\" (line 7): content differs",
        "\"g/extra\": extracted but not in the list",
        "\"g/null\" (line 10): missing",
        "\"g/a2\" (line 3): mtime",
    ] {
        assert!(
            err.contains(needle),
            "checker did not report {needle:?}:\n{err}"
        );
    }
}

#![allow(dead_code)]
//! The legacy-list corpus (`tests/lists/*.list`) and what it needs: the fixture files the
//! lists refer to, the environment variables they use, and an independent parser of the
//! list format that tells the tests what each list describes.
//!
//! Every file location in the corpus starts with `${FIXTURES}` (possibly after other
//! variables), so the corpus does not depend on where it is checked out. The fixture
//! files are derived from their path, so the lists alone define them:
//!
//! - `bytes/<N>`: N bytes of a pseudo-random pattern; `bytes/<N>.<V>` is variant V
//!   (same size, other content);
//! - `ff/<N>`: N bytes of 0xFF (makes the 32-bit `-c` checksum wrap around);
//! - anything else: a pattern derived from the path bytes, 1 to 2000 bytes long.
//!
//! Every fixture gets a fixed mtime, derived from its path. The fixture directory is
//! generated once per corpus version (a hash of the lists) into the test asset cache.
//!
//! Markers (comment lines, ignored by the list readers):
//! - `#@ no-extract`: the archive cannot be extracted faithfully on Linux (e.g. device
//!   numbers wider than dev_t); only archive bytes are compared.
//! - `#@ compat`: composer must read the list with `--compat` (it relies on something
//!   composer reports as an error by default, e.g. an unset variable).
//! - `#@ no-3cpio`: 3cpio cannot extract the archive, whoever wrote it (the line says
//!   why); the other extractors still do.

use std::collections::BTreeSet;
use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::Write as _;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, UNIX_EPOCH};

use crate::support;

/// The mtime every test passes with `-t`.
pub const MTIME: u32 = 1_700_000_000;

/// Variables that must be unset in the environment of the tools under test.
pub const UNSET_VARS: &[&str] = &["FX_UNSET"];

/// `tests/lists`.
pub fn lists_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("lists")
}

/// One list file of the corpus.
#[derive(Clone, Debug)]
pub struct ListFile {
    /// File name, e.g. `01-minimal.list`.
    pub name: String,
    pub path: PathBuf,
    pub bytes: Vec<u8>,
    /// Marked `#@ no-extract`.
    pub no_extract: bool,
    /// Marked `#@ compat`.
    pub compat: bool,
    /// Marked `#@ no-3cpio`.
    pub no_3cpio: bool,
}

impl ListFile {
    /// composer's arguments up to the list options: `subcommand` and, for a list marked
    /// `#@ compat`, `--compat`.
    pub fn composer_args(&self, subcommand: &str) -> Vec<OsString> {
        let mut v = vec![OsString::from(subcommand)];
        if self.compat {
            v.push("--compat".into());
        }
        v
    }
}

/// All `tests/lists/*.list`, sorted by name.
pub fn lists() -> Vec<ListFile> {
    let mut out: Vec<ListFile> = fs::read_dir(lists_dir())
        .expect("tests/lists exists")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "list"))
        .map(|path| {
            let bytes = fs::read(&path).unwrap();
            let marked = |m: &[u8]| bytes.split(|&b| b == b'\n').any(|l| l.starts_with(m));
            ListFile {
                name: path.file_name().unwrap().to_string_lossy().into_owned(),
                no_extract: marked(b"#@ no-extract"),
                compat: marked(b"#@ compat"),
                no_3cpio: marked(b"#@ no-3cpio"),
                path,
                bytes,
            }
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// The list files selected by `COMPOSER_CORPUS_FILTER` (a substring of the file name),
/// or all of them. Handy when debugging one list.
pub fn selected_lists() -> Vec<ListFile> {
    let filter = std::env::var("COMPOSER_CORPUS_FILTER").unwrap_or_default();
    lists()
        .into_iter()
        .filter(|l| l.name.contains(&filter))
        .collect()
}

/// The variables the corpus uses, with their values for fixture directory `fixtures`.
pub fn env_vars(fixtures: &Path) -> Vec<(&'static str, OsString)> {
    let mut bytes_dir = fixtures.as_os_str().to_owned();
    bytes_dir.push("/bytes");
    vec![
        ("FIXTURES", fixtures.as_os_str().to_owned()),
        ("FX_BYTES", "bytes".into()),
        ("FX_TWO", "2".into()),
        ("FX_ZERO", "0".into()),
        ("FX_EMPTY", "".into()),
        ("FX_NESTED", "bytes/106".into()),
        ("FX_BYTES_DIR", bytes_dir),
    ]
}

/// Sets the corpus variables on `cmd` (and removes [`UNSET_VARS`]).
pub fn apply_env<'a>(cmd: &'a mut Command, fixtures: &Path) -> &'a mut Command {
    for (k, v) in env_vars(fixtures) {
        cmd.env(k, v);
    }
    for k in UNSET_VARS {
        cmd.env_remove(k);
    }
    cmd
}

/// Replaces every `${NAME}` in `s` by the variable's value (empty when not set), left
/// to right. (The corpus never puts `${` inside a value.)
pub fn expand(s: &[u8], vars: &[(&str, OsString)]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < s.len() {
        if s[i..].starts_with(b"${") {
            if let Some(close) = s[i + 2..].iter().position(|&b| b == b'}') {
                let name = &s[i + 2..i + 2 + close];
                if let Some((_, v)) = vars.iter().find(|(k, _)| k.as_bytes() == name) {
                    out.extend_from_slice(v.as_bytes());
                }
                i += 2 + close + 1;
                continue;
            }
        }
        out.push(s[i]);
        i += 1;
    }
    out
}

// ---------------------------------------------------------------------------------------
// The list format (an independent reading of the legacy gen_init_cpio format)
// ---------------------------------------------------------------------------------------

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `names[0]` is the entry name, the others its hardlinks; the data goes on the last.
    File {
        location: Vec<u8>,
        links: Vec<Vec<u8>>,
    },
    Dir,
    Slink {
        target: Vec<u8>,
    },
    Nod {
        block: bool,
        major: u32,
        minor: u32,
    },
    Pipe,
    Sock,
}

/// One line of a list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListEntry {
    /// 1-based line number.
    pub line: usize,
    pub kind: Kind,
    /// The name with one leading `/` removed.
    pub name: Vec<u8>,
    /// Permission bits (mode & 0o7777).
    pub perm: u32,
    pub uid: u32,
    pub gid: u32,
}

impl ListEntry {
    /// The entry name and, for files, all hardlink names (each without one leading `/`).
    pub fn all_names(&self) -> Vec<Vec<u8>> {
        let mut v = vec![self.name.clone()];
        if let Kind::File { links, .. } = &self.kind {
            v.extend(links.iter().cloned());
        }
        v
    }
}

fn strip_one_slash(n: &[u8]) -> Vec<u8> {
    n.strip_prefix(b"/").unwrap_or(n).to_vec()
}

fn num_u32(field: &[u8], radix: u32, what: &str, line: usize) -> u32 {
    let s = std::str::from_utf8(field).unwrap_or_else(|_| panic!("line {line}: {what} not ASCII"));
    let v = i64::from_str_radix(s, radix)
        .unwrap_or_else(|e| panic!("line {line}: bad {what} {s:?}: {e}"));
    assert!(
        (-(1i64 << 31)..(1i64 << 32)).contains(&v),
        "line {line}: {what} {v} out of range"
    );
    v as u32
}

/// Parses a list (bytes). `vars` expands `${...}` in file locations. Panics on anything
/// that is not a clean, valid line: the corpus holds only valid lists.
pub fn parse_list(text: &[u8], vars: &[(&str, OsString)]) -> Vec<ListEntry> {
    let mut out = Vec::new();
    for (i, raw) in text.split(|&b| b == b'\n').enumerate() {
        let line = i + 1;
        if raw.first() == Some(&b'#') {
            continue;
        }
        let f: Vec<&[u8]> = raw
            .split(|b| b" \t\r\x0b\x0c".contains(b))
            .filter(|w| !w.is_empty())
            .collect();
        if f.is_empty() {
            continue;
        }
        let want = |n: usize| {
            assert!(
                f.len() == n,
                "line {line}: {} expects {n} fields, got {}",
                String::from_utf8_lossy(f[0]),
                f.len()
            )
        };
        let owner = |k: usize| {
            (
                num_u32(f[k], 10, "uid", line),
                num_u32(f[k + 1], 10, "gid", line),
            )
        };
        let (kind, name, perm, (uid, gid)) = match f[0] {
            b"file" => {
                assert!(f.len() >= 6, "line {line}: short file line");
                let links = f[6..].iter().map(|n| strip_one_slash(n)).collect();
                (
                    Kind::File {
                        location: expand(f[2], vars),
                        links,
                    },
                    f[1],
                    num_u32(f[3], 8, "mode", line),
                    owner(4),
                )
            }
            b"dir" | b"pipe" | b"sock" => {
                want(5);
                let kind = match f[0] {
                    b"dir" => Kind::Dir,
                    b"pipe" => Kind::Pipe,
                    _ => Kind::Sock,
                };
                (kind, f[1], num_u32(f[2], 8, "mode", line), owner(3))
            }
            b"slink" => {
                want(6);
                (
                    Kind::Slink {
                        target: f[2].to_vec(),
                    },
                    f[1],
                    num_u32(f[3], 8, "mode", line),
                    owner(4),
                )
            }
            b"nod" => {
                want(8);
                let block = match f[5] {
                    b"b" => true,
                    b"c" => false,
                    t => panic!("line {line}: device type {t:?}"),
                };
                let major = num_u32(f[6], 10, "major", line);
                let minor = num_u32(f[7], 10, "minor", line);
                (
                    Kind::Nod {
                        block,
                        major,
                        minor,
                    },
                    f[1],
                    num_u32(f[2], 8, "mode", line),
                    owner(3),
                )
            }
            t => panic!("line {line}: unknown type {:?}", String::from_utf8_lossy(t)),
        };
        assert!(perm <= 0o7777, "line {line}: mode {perm:o} has type bits");
        out.push(ListEntry {
            line,
            kind,
            name: strip_one_slash(name),
            perm,
            uid,
            gid,
        });
    }
    out
}

// ---------------------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------------------

/// A small deterministic generator (splitmix64).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

fn fnv1a(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| {
        (h ^ x as u64).wrapping_mul(0x100_0000_01b3)
    })
}

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut r = Rng(seed);
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        v.extend_from_slice(&r.next().to_le_bytes());
    }
    v.truncate(len);
    v
}

/// The content of the fixture at `rel` (a path relative to the fixture directory).
pub fn fixture_content(rel: &[u8]) -> Vec<u8> {
    let s = String::from_utf8_lossy(rel);
    if let Some(spec) = s.strip_prefix("bytes/") {
        let (n, v) = spec.split_once('.').unwrap_or((spec, "0"));
        if let (Ok(n), Ok(v)) = (n.parse::<usize>(), v.parse::<u64>()) {
            return pattern(n, (n as u64) << 8 | v);
        }
    }
    if let Some(n) = s.strip_prefix("ff/").and_then(|n| n.parse::<usize>().ok()) {
        return vec![0xFF; n];
    }
    let h = fnv1a(rel);
    pattern(1 + (h % 2000) as usize, h)
}

/// The fixed mtime of the fixture at `rel`.
pub fn fixture_mtime(rel: &[u8]) -> u32 {
    1_600_000_000 + (fnv1a(rel) % 10_000_000) as u32
}

/// Every fixture (relative path) the corpus refers to.
fn referenced_fixtures(placeholder: &Path) -> BTreeSet<Vec<u8>> {
    let vars = env_vars(placeholder);
    let prefix = [placeholder.as_os_str().as_bytes(), b"/"].concat();
    let mut set = BTreeSet::new();
    for l in lists() {
        for e in parse_list(&l.bytes, &vars) {
            if let Kind::File { location, .. } = &e.kind {
                let rel = location.strip_prefix(prefix.as_slice()).unwrap_or_else(|| {
                    panic!(
                        "{}:{}: location {:?} is not under ${{FIXTURES}}",
                        l.name,
                        e.line,
                        String::from_utf8_lossy(location)
                    )
                });
                set.insert(rel.to_vec());
            }
        }
    }
    set
}

/// The fixture directory, generated on first use (once per corpus version, cached).
pub fn fixtures() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let placeholder = Path::new("/@FIXTURES@");
        let wanted = referenced_fixtures(placeholder);
        let mut key = 0u64;
        for rel in &wanted {
            key ^= fnv1a(rel).rotate_left(7);
            key = key.wrapping_mul(0x100_0000_01b3);
        }
        let name = format!("corpus-fixtures-v1-{key:016x}");
        let dir = support::cached_asset(&name, |tmp| {
            for rel in &wanted {
                let path = tmp.join(OsStr::from_bytes(rel));
                fs::create_dir_all(path.parent().unwrap()).map_err(|e| e.to_string())?;
                let mut f =
                    fs::File::create(&path).map_err(|e| format!("{}: {e}", path.display()))?;
                f.write_all(&fixture_content(rel))
                    .map_err(|e| e.to_string())?;
                f.set_modified(UNIX_EPOCH + Duration::from_secs(fixture_mtime(rel) as u64))
                    .map_err(|e| e.to_string())?;
            }
            Ok(())
        })
        .expect("fixture directory");
        // Fixture directories of earlier versions of the corpus are of no more use.
        if let Ok(rd) = fs::read_dir(dir.parent().unwrap()) {
            for e in rd.flatten() {
                let n = e.file_name().to_string_lossy().into_owned();
                if n.starts_with("corpus-fixtures-v1-") && !n.starts_with(&name) {
                    let _ = fs::remove_dir_all(e.path()).or_else(|_| fs::remove_file(e.path()));
                }
            }
        }
        dir
    })
}

/// The fixture content for an expanded location (absolute path under `fixtures`).
pub fn content_of(location: &[u8], fixtures: &Path) -> Vec<u8> {
    let prefix = [fixtures.as_os_str().as_bytes(), b"/"].concat();
    let rel = location
        .strip_prefix(prefix.as_slice())
        .expect("location under the fixtures");
    fixture_content(rel)
}

/// Lossy rendering of a byte name, for messages.
pub fn show(b: &[u8]) -> String {
    crate::newc::short_name(b)
}

/// An `OsString` from bytes.
pub fn os(b: &[u8]) -> OsString {
    OsString::from_vec(b.to_vec())
}

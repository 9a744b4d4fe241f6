//! `[console]`: the console keymap and font, so that a passphrase typed at
//! the image's prompt is the one the user means (a German or French
//! keyboard types other letters under the kernel's default US map).
//!
//! The settings come from the manifest (`keymap`, `font`: a name looked up
//! in the root's keymap and font directories, or a path) or, with
//! `from_root`, from the root's `/etc/vconsole.conf`, else from Debian's
//! console-setup (the keymap and font `setupcon` cached in
//! `/etc/console-setup`). The keymap is written into the image as one file
//! with its `include`s inlined and decompressed (kbd's loadkeys needs an
//! external gzip for a compressed map, and a keymap tree for includes),
//! the font decompressed, and `/etc/vconsole.conf` names both; the init
//! profiles' `/usr/lib/composer/console` loads them before anything asks
//! for a passphrase. loadkeys and setfont come from the root.

use std::path::{Path, PathBuf};

use super::item::{Added, Found};
use crate::compress::Compression;
use crate::entry::Origin;
use crate::error::{Error, Result, Warning};
use crate::manifest::load::Loaded;
use crate::resolve::elf::BinaryRequest;
use crate::resolve::root::Root;

/// Where the image keeps them.
pub const KEYMAP_DEST: &str = "/usr/lib/composer/keymap.map";
pub const FONT_DEST: &str = "/usr/lib/composer/font.psf";

/// The most of one keymap, font or configuration file read (compressed),
/// of one decompressed, and of a keymap with its includes inlined.
const MAX_READ: usize = 4 << 20;
const MAX_INLINED: usize = 8 << 20;
/// The most files one keymap includes (all levels), and how deep.
const MAX_INCLUDES: usize = 128;
const MAX_DEPTH: usize = 16;
/// The most directory entries a name lookup visits.
const MAX_VISITED: usize = 50_000;

const KEYMAP_DIRS: [&str; 4] = [
    "/usr/share/keymaps",
    "/usr/share/kbd/keymaps",
    "/usr/lib/kbd/keymaps",
    "/lib/kbd/keymaps",
];
const FONT_DIRS: [&str; 4] = [
    "/usr/share/consolefonts",
    "/usr/share/kbd/consolefonts",
    "/usr/lib/kbd/consolefonts",
    "/lib/kbd/consolefonts",
];
const COMPRESSED: [&str; 5] = ["", ".gz", ".bz2", ".xz", ".zst"];

/// A file a setting names: inside the root, or on the host (a path
/// relative to the manifest).
#[derive(Clone, Debug, PartialEq, Eq)]
enum At {
    Root(PathBuf),
    Host(PathBuf),
}

impl At {
    fn host(&self, root: &Root) -> Option<PathBuf> {
        match self {
            At::Root(p) => root.host_of(p, true),
            At::Host(p) => Some(p.clone()),
        }
    }

    fn path(&self) -> &Path {
        match self {
            At::Root(p) | At::Host(p) => p,
        }
    }

    fn with_path(&self, p: PathBuf) -> At {
        match self {
            At::Root(_) => At::Root(p),
            At::Host(_) => At::Host(p),
        }
    }

    fn is_file(&self, root: &Root) -> bool {
        self.host(root).is_some_and(|h| h.is_file())
    }
}

impl std::fmt::Display for At {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.path().display())
    }
}

/// `[console]` merged over the documents (a later setting replaces an
/// earlier one).
#[derive(Default)]
struct Asked {
    from_root: Option<Origin>,
    keymap: Option<(String, Origin, PathBuf)>,
    font: Option<(String, Origin, PathBuf)>,
}

fn asked(loaded: &Loaded) -> Asked {
    let mut a = Asked::default();
    for doc in &loaded.docs {
        let Some(c) = &doc.manifest.console else {
            continue;
        };
        let o = doc.origin(c.pos);
        if let Some(f) = c.value.from_root {
            a.from_root = f.then(|| o.clone());
        }
        if let Some(k) = &c.value.keymap {
            a.keymap = Some((k.clone(), o.clone(), doc.dir.clone()));
        }
        if let Some(f) = &c.value.font {
            a.font = Some((f.clone(), o.clone(), doc.dir.clone()));
        }
    }
    a
}

/// Reads at most [`MAX_READ`] bytes of `at` and decompresses them when
/// they start with a compressor's magic.
fn read_plain(root: &Root, at: &At) -> std::result::Result<Vec<u8>, String> {
    let host = at
        .host(root)
        .ok_or_else(|| format!("{at}: not in the root"))?;
    let raw = crate::stack::read_bounded(&host, MAX_READ + 1)
        .ok_or_else(|| format!("{at}: not a readable regular file"))?;
    if raw.len() > MAX_READ {
        return Err(format!("{at}: larger than {} MiB", MAX_READ >> 20));
    }
    match Compression::detect(&raw) {
        Some(method) if method != Compression::None => {
            crate::compress::decode(method, &raw, MAX_READ)
                .map(|d| d.data)
                .map_err(|e| format!("{at}: {}", e.message))
        }
        _ => Ok(raw),
    }
}

/// The first file (in name order, depth first) under the `dirs` of the
/// root whose name is one of `names`; `recursive` looks into
/// subdirectories.
fn find_named(root: &Root, dirs: &[&str], names: &[String], recursive: bool) -> Option<At> {
    let mut visited = 0usize;
    for d in dirs {
        let Some(host) = root.host_of(Path::new(d), true) else {
            continue;
        };
        if !host.is_dir() {
            continue;
        }
        let walk = walkdir::WalkDir::new(&host)
            .max_depth(if recursive { 6 } else { 1 })
            .follow_links(false)
            .sort_by_file_name();
        for e in walk.into_iter().filter_map(|e| e.ok()) {
            visited += 1;
            if visited > MAX_VISITED {
                return None;
            }
            if !e.file_type().is_file() {
                continue;
            }
            let name = e.file_name().to_string_lossy();
            if names.iter().any(|n| *n == name) {
                let rel = e.path().strip_prefix(&host).ok()?;
                return Some(At::Root(Path::new(d).join(rel)));
            }
        }
    }
    None
}

fn with_suffixes(name: &str, kinds: &[&str]) -> Vec<String> {
    kinds
        .iter()
        .flat_map(|k| COMPRESSED.iter().map(move |c| format!("{name}{k}{c}")))
        .collect()
}

/// A keymap or font setting: a path (with a `/`: absolute in the root,
/// else relative to the manifest's directory) or a name to look up.
fn locate(root: &Root, value: &str, dir: &Path, keymap: bool) -> Option<At> {
    if value.contains('/') {
        let at = if value.starts_with('/') {
            At::Root(PathBuf::from(value))
        } else {
            At::Host(dir.join(value))
        };
        return at.is_file(root).then_some(at);
    }
    if value.is_empty() || value.starts_with('.') {
        return None;
    }
    if keymap {
        let names = with_suffixes(value, &["", ".map", ".kmap"]);
        find_named(root, &KEYMAP_DIRS, &names, true)
    } else {
        let names = with_suffixes(value, &["", ".psfu", ".psf", ".cp", ".fnt"]);
        find_named(root, &FONT_DIRS, &names, false)
    }
}

/// The name a keymap line includes, when it is an include line.
fn include_of(line: &str) -> Option<&str> {
    let rest = line.trim_start().strip_prefix("include")?;
    let rest = rest.trim_start();
    let rest = rest.strip_prefix('"')?;
    let end = rest.find('"')?;
    Some(&rest[..end])
}

/// Where kbd looks for what `from` includes: the including file's
/// directory and the `include` directories beside it and above it.
fn include_candidates(from: &At, name: &str) -> Vec<At> {
    let dir = from.path().parent().unwrap_or(Path::new("/"));
    let mut dirs = vec![dir.to_path_buf()];
    let mut up = Some(dir);
    for _ in 0..3 {
        let Some(d) = up else { break };
        dirs.push(d.join("include"));
        up = d.parent();
    }
    let mut out = Vec::new();
    if name.starts_with('/') {
        for n in with_suffixes(name, &["", ".inc", ".map"]) {
            out.push(from.with_path(PathBuf::from(n)));
        }
        return out;
    }
    for d in dirs {
        for n in with_suffixes(name, &["", ".inc", ".map"]) {
            out.push(from.with_path(d.join(n)));
        }
    }
    out
}

/// The keymap at `at` with every `include` replaced by the included
/// file's text (as kbd's parser reads it), bounded.
fn inline_keymap(root: &Root, at: &At) -> std::result::Result<String, String> {
    let mut out = String::new();
    let mut files = 0usize;
    inline_into(root, at, 0, &mut files, &mut out)?;
    Ok(out)
}

fn inline_into(
    root: &Root,
    at: &At,
    depth: usize,
    files: &mut usize,
    out: &mut String,
) -> std::result::Result<(), String> {
    *files += 1;
    if *files > MAX_INCLUDES || depth > MAX_DEPTH {
        return Err(format!(
            "{at}: more than {MAX_INCLUDES} included files or {MAX_DEPTH} levels of includes"
        ));
    }
    let text = read_plain(root, at)?;
    let text = String::from_utf8_lossy(&text);
    for (n, line) in text.lines().enumerate() {
        match include_of(line) {
            Some(name) => {
                let found = include_candidates(at, name)
                    .into_iter()
                    .find(|c| c.is_file(root))
                    .ok_or_else(|| {
                        format!("{at} line {}: the included \"{name}\" is not found", n + 1)
                    })?;
                inline_into(root, &found, depth + 1, files, out)?;
            }
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
        if out.len() > MAX_INLINED {
            return Err(format!(
                "{at}: more than {} MiB with its includes",
                MAX_INLINED >> 20
            ));
        }
    }
    Ok(())
}

/// `KEY=VALUE` lines of a shell-like configuration file (quotes dropped).
fn assignments(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| {
            let l = l.trim();
            if l.starts_with('#') {
                return None;
            }
            let (k, v) = l.split_once('=')?;
            let v = v.trim();
            let v = v
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .or_else(|| v.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
                .unwrap_or(v);
            Some((k.trim().to_string(), v.to_string()))
        })
        .collect()
}

/// What the root's own configuration sets: (keymap, font, where it was read).
#[derive(Debug, Default, PartialEq)]
struct RootConsole {
    keymap: Option<At>,
    font: Option<At>,
    /// Settings named that were not found, said as warnings.
    missing: Vec<String>,
    source: Option<String>,
}

/// `/etc/vconsole.conf`, else Debian's console-setup cache.
fn from_root(root: &Root) -> RootConsole {
    let mut rc = RootConsole::default();
    let conf = At::Root(PathBuf::from("/etc/vconsole.conf"));
    if conf.is_file(root) {
        rc.source = Some("/etc/vconsole.conf".into());
        let text = read_plain(root, &conf).unwrap_or_default();
        for (k, v) in assignments(&String::from_utf8_lossy(&text)) {
            if v.is_empty() {
                continue;
            }
            match k.as_str() {
                "KEYMAP" => match locate(root, &v, Path::new("/"), true) {
                    Some(at) => rc.keymap = Some(at),
                    None => rc.missing.push(format!("KEYMAP={v}")),
                },
                "FONT" => match locate(root, &v, Path::new("/"), false) {
                    Some(at) => rc.font = Some(at),
                    None => rc.missing.push(format!("FONT={v}")),
                },
                _ => {}
            }
        }
        return rc;
    }
    // Debian: setupcon --save-only caches the keymap it compiled and a copy
    // of the font in /etc/console-setup.
    let Some(dir) = root.host_of(Path::new("/etc/console-setup"), true) else {
        return rc;
    };
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return rc;
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .take(MAX_VISITED)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("cached_"))
        .collect();
    names.sort();
    let charmap = At::Root(PathBuf::from("/etc/default/console-setup"));
    let charmap = read_plain(root, &charmap)
        .ok()
        .and_then(|t| {
            assignments(&String::from_utf8_lossy(&t))
                .into_iter()
                .find(|(k, _)| k == "CHARMAP")
        })
        .map(|(_, v)| v);
    let pick = |suffixes: &[&str]| -> Option<At> {
        let mut matching: Vec<&String> = names
            .iter()
            .filter(|n| suffixes.iter().any(|s| n.ends_with(s)))
            .collect();
        if let Some(cm) = &charmap {
            if matching.iter().any(|n| n.contains(cm.as_str())) {
                matching.retain(|n| n.contains(cm.as_str()));
            }
        }
        matching
            .first()
            .map(|n| At::Root(Path::new("/etc/console-setup").join(n)))
    };
    rc.keymap = pick(&[".kmap.gz", ".kmap"]);
    rc.font = pick(&[".psf.gz", ".psfu.gz", ".psf", ".psfu"]);
    if rc.keymap.is_some() || rc.font.is_some() {
        rc.source = Some("/etc/console-setup (setupcon's cache)".into());
    }
    rc
}

/// A program of kbd in the root's usual directories.
fn has_program(root: &Root, name: &str) -> bool {
    ["/usr/bin", "/bin", "/usr/sbin", "/sbin"]
        .iter()
        .any(|d| At::Root(Path::new(d).join(name)).is_file(root))
}

/// What `[console]` adds: the keymap and font files, `/etc/vconsole.conf`
/// naming them, and loadkeys and setfont.
pub(super) fn add_all(loaded: &Loaded) -> Result<Found> {
    let mut found = Found {
        added: Vec::new(),
        programs: Vec::new(),
        warnings: Vec::new(),
    };
    let asked = asked(loaded);
    let root = Root::new(&loaded.root);
    // (file, where it was named, whether the manifest named it)
    let mut keymap: Option<(At, Origin, bool)> = None;
    let mut font: Option<(At, Origin, bool)> = None;
    if let Some(o) = &asked.from_root {
        let rc = from_root(&root);
        let o = o.with_rule(format!(
            "[console] from_root: {}",
            rc.source.as_deref().unwrap_or("no console configuration")
        ));
        for m in &rc.missing {
            found.warnings.push(Warning {
                origin: Some(o.clone()),
                message: format!(
                    "[console]: the root's `{m}` is not found in its keymap or font directories; \
                     the image keeps the kernel's default"
                ),
                details: Vec::new(),
            });
        }
        keymap = rc.keymap.map(|k| (k, o.clone(), false));
        font = rc.font.map(|f| (f, o, false));
    }
    for (setting, slot, is_keymap) in [
        (&asked.keymap, &mut keymap, true),
        (&asked.font, &mut font, false),
    ] {
        let Some((value, o, dir)) = setting else {
            continue;
        };
        let what = if is_keymap { "keymap" } else { "font" };
        let o = o.with_rule(format!("[console] {what} = \"{value}\""));
        let at = locate(&root, value, dir, is_keymap).ok_or_else(|| {
            let dirs = if is_keymap { &KEYMAP_DIRS } else { &FONT_DIRS };
            Error::at(
                o.clone(),
                format!("[console] {what} `{value}` is not found"),
            )
            .with_hint(format!(
                "name a file (a path with a `/`: absolute in the root, else relative to the \
                     manifest) or a name found under {} in the root",
                dirs.join(", ")
            ))
        })?;
        *slot = Some((at, o, true));
    }

    let mut files: Vec<(String, Vec<u8>, &str, Origin)> = Vec::new();
    let mut conf =
        String::from("# Written by composer's [console]; loaded by /usr/lib/composer/console.\n");
    let mut fail = |o: &Origin, named: bool, message: String| -> Result<()> {
        if named {
            return Err(Error::at(o.clone(), message));
        }
        found.warnings.push(Warning {
            origin: Some(o.clone()),
            message: format!("{message}; the image keeps the kernel's default"),
            details: Vec::new(),
        });
        Ok(())
    };
    if let Some((at, o, named)) = &keymap {
        match inline_keymap(&root, at) {
            Ok(text) => {
                conf.push_str(&format!("KEYMAP={KEYMAP_DEST}\n"));
                files.push((
                    "keymap.map".into(),
                    text.into_bytes(),
                    KEYMAP_DEST,
                    o.clone(),
                ));
            }
            Err(e) => fail(o, *named, format!("[console] keymap: {e}"))?,
        }
    }
    if let Some((at, o, named)) = &font {
        match read_plain(&root, at) {
            Ok(bytes) => {
                conf.push_str(&format!("FONT={FONT_DEST}\n"));
                files.push(("font.psf".into(), bytes, FONT_DEST, o.clone()));
            }
            Err(e) => fail(o, *named, format!("[console] font: {e}"))?,
        }
    }
    if files.is_empty() {
        return Ok(found);
    }
    // The programs that load them: required when the manifest names the
    // files, else taken when the root has them (with a warning when not).
    for (dest, program, o, named) in files.iter().map(|(_, _, dest, o)| {
        let (program, named) = if *dest == KEYMAP_DEST {
            ("loadkeys", keymap.as_ref().is_some_and(|k| k.2))
        } else {
            ("setfont", font.as_ref().is_some_and(|f| f.2))
        };
        (*dest, program, o.clone(), named)
    }) {
        if !named && !has_program(&root, program) {
            found.warnings.push(Warning {
                origin: Some(o.clone()),
                message: format!(
                    "[console]: the root has no `{program}` (kbd) to load {dest} at boot"
                ),
                details: Vec::new(),
            });
            continue;
        }
        found
            .programs
            .push(BinaryRequest::program(program).optional(!named).at(o));
    }
    let first = files[0].3.clone();
    files.push((
        "vconsole.conf".into(),
        conf.into_bytes(),
        "/etc/vconsole.conf",
        first,
    ));
    let store: Vec<(String, Vec<u8>)> = files
        .iter()
        .map(|(n, b, _, _)| (n.clone(), b.clone()))
        .collect();
    let dir =
        crate::cache::store_in("console", &store, &[], std::time::UNIX_EPOCH).map_err(|e| {
            Error::at(
                files[0].3.clone(),
                format!("cannot write the console's files: {e}"),
            )
        })?;
    for (name, _, dest, o) in &files {
        found.added.push(Added::generated(&dir, name, dest, o)?);
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn write(root: &Path, path: &str, bytes: &[u8]) {
        let p = root.join(path.trim_start_matches('/'));
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, bytes).unwrap();
    }

    fn gz(bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let opts = crate::compress::EncodeOptions {
            method: Compression::Gzip,
            level: None,
            threads: 1,
        };
        crate::compress::encode(&opts, &mut &bytes[..], &mut out).unwrap();
        out
    }

    #[test]
    fn a_keymap_name_is_found_and_its_includes_inlined_from_compressed_files() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        write(
            r,
            "/usr/share/keymaps/i386/qwertz/de.kmap.gz",
            &gz(b"keymaps 0-2\ninclude \"qwertz-layout\"\nkeycode 21 = z\n"),
        );
        write(
            r,
            "/usr/share/keymaps/i386/include/qwertz-layout.inc",
            b"  include \"common\"\nkeycode 44 = y\n",
        );
        write(
            r,
            "/usr/share/keymaps/i386/include/common.map",
            b"keycode 1 = Escape\n",
        );
        let root = Root::new(r);
        let at = locate(&root, "de", Path::new("/"), true).unwrap();
        assert_eq!(
            at,
            At::Root(PathBuf::from("/usr/share/keymaps/i386/qwertz/de.kmap.gz"))
        );
        let text = inline_keymap(&root, &at).unwrap();
        assert_eq!(
            text,
            "keymaps 0-2\nkeycode 1 = Escape\nkeycode 44 = y\nkeycode 21 = z\n"
        );
    }

    #[test]
    fn a_missing_or_looping_include_is_an_error_not_a_hang() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        write(r, "/k/a.map", b"include \"b\"\n");
        write(r, "/k/b.map", b"include \"a\"\n");
        write(r, "/k/c.map", b"keycode 1 = Escape\ninclude \"nowhere\"\n");
        let root = Root::new(r);
        let e = inline_keymap(&root, &At::Root("/k/a.map".into())).unwrap_err();
        assert!(e.contains("levels of includes"), "{e}");
        let e = inline_keymap(&root, &At::Root("/k/c.map".into())).unwrap_err();
        assert!(e.contains("line 2") && e.contains("\"nowhere\""), "{e}");
    }

    #[test]
    fn a_keymap_path_does_not_leave_the_root() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path().join("root");
        fs::create_dir_all(r.join("etc")).unwrap();
        fs::write(t.path().join("outside.map"), "keycode 1 = Escape\n").unwrap();
        std::os::unix::fs::symlink("../../outside.map", r.join("etc/k.map")).unwrap();
        let root = Root::new(&r);
        assert_eq!(locate(&root, "/etc/k.map", Path::new("/"), true), None);
        assert_eq!(locate(&root, "/../outside.map", Path::new("/"), true), None);
    }

    #[test]
    fn vconsole_conf_comes_first_then_debians_cache() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        write(
            r,
            "/etc/console-setup/cached_UTF-8_del.kmap.gz",
            &gz(b"keycode 21 = z\n"),
        );
        write(r, "/etc/console-setup/cached_ISO-8859-1_del.kmap.gz", b"x");
        write(
            r,
            "/etc/console-setup/cached_Lat15-Fixed16.psf.gz",
            &gz(b"font"),
        );
        write(r, "/etc/default/console-setup", b"CHARMAP=\"UTF-8\"\n");
        let root = Root::new(r);
        let rc = from_root(&root);
        assert_eq!(
            rc.keymap,
            Some(At::Root(
                "/etc/console-setup/cached_UTF-8_del.kmap.gz".into()
            ))
        );
        assert_eq!(
            rc.font,
            Some(At::Root(
                "/etc/console-setup/cached_Lat15-Fixed16.psf.gz".into()
            ))
        );
        assert_eq!(
            read_plain(&root, rc.font.as_ref().unwrap()).unwrap(),
            b"font"
        );

        write(
            r,
            "/etc/vconsole.conf",
            b"# mine\nKEYMAP=\"fr\"\nFONT=eurlatgr\n",
        );
        write(
            r,
            "/usr/lib/kbd/keymaps/xkb/fr.map.gz",
            &gz(b"keycode 16 = a\n"),
        );
        let rc = from_root(&root);
        assert_eq!(
            rc.keymap,
            Some(At::Root("/usr/lib/kbd/keymaps/xkb/fr.map.gz".into()))
        );
        assert_eq!(rc.font, None);
        assert_eq!(rc.missing, vec!["FONT=eurlatgr".to_string()]);
    }

    #[test]
    fn a_compression_bomb_is_refused() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        write(r, "/k/bomb.map.gz", &gz(&vec![b'#'; MAX_READ + 10]));
        let root = Root::new(r);
        let e = read_plain(&root, &At::Root("/k/bomb.map.gz".into())).unwrap_err();
        assert!(e.contains("bomb.map.gz"), "{e}");
    }
}

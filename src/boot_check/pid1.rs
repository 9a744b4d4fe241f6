//! Whether a systemd image's PID 1 can start, judged from the image alone
//! (so it holds for an image of a root that is not this machine's): the
//! files its systemd version needs beyond its units
//! ([`crate::resolve::systemd::needs`]: `systemd-executor` from 255 on), the
//! units that the initrd's targets need, the programs those units run, and
//! every library those programs and PID 1 load, looked up in the image as
//! the dynamic loader would (DT_RPATH/DT_RUNPATH, the image's
//! `/etc/ld.so.conf` and `/etc/ld.so.cache`, the ABI's default directories).
//!
//! The build runs it before an image replaces the old one, and check-boot
//! shows it as a line of its verdict.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::io::Read;
use std::path::{Path, PathBuf};

use super::names::{components, Names};
use crate::cpio::reader::RawEntry;
use crate::error::Result;
use crate::image::Image;
use crate::resolve::elf::{self, Elf};
use crate::resolve::systemd::{
    exec_program, settings, template, BUILTIN_UNITS as BUILTIN, EXEC_KEYS as EXECS,
    PULLING_KEYS as PULLS, REQUIRING_KEYS as NEEDS,
};

/// The most bytes of one ELF object read from an image.
const MAX_OBJECT: u64 = 256 << 20;
/// The most bytes of a unit file, drop-in or loader configuration read.
const MAX_TEXT: u64 = 1 << 20;
/// The most units followed (a bound for a hostile image).
const MAX_UNITS: usize = 8000;
/// The most objects one program loads.
const MAX_OBJECTS: usize = 20_000;
/// The most objects loaded, summed over the programs (a bound for a hostile
/// image; an image composer builds loads a few thousand).
const MAX_LOADS: usize = 200_000;

const UNIT_DIRS: [&str; 3] = [
    "etc/systemd/system",
    "usr/lib/systemd/system",
    "lib/systemd/system",
];
const SYSTEMD: &str = "usr/lib/systemd/systemd";
/// Where the image's initrd starts, and what it switches to.
const TARGETS: [&str; 3] = [
    "initrd.target",
    "initrd-switch-root.target",
    "initrd-switch-root.service",
];
/// Unit types that generators, udev or systemd itself make at boot.
const MADE_AT_BOOT: [&str; 5] = [".mount", ".device", ".swap", ".slice", ".scope"];
/// Where the units' bare program names are looked for (systemd's own path).
const PROGRAM_DIRS: [&str; 4] = ["usr/sbin", "usr/bin", "sbin", "bin"];

/// What one pass over the image's data gives: its ELF objects (by entry)
/// and its small text files (units, drop-ins, loader configuration).
#[derive(Default)]
struct Contents {
    elves: HashMap<usize, Elf>,
    texts: HashMap<usize, String>,
    ld_cache: Vec<u8>,
    /// The names in each directory of the image (as its entries name them).
    children: HashMap<String, Vec<String>>,
}

/// The entry's identity, for maps keyed by entry.
fn key(e: &RawEntry) -> usize {
    e as *const RawEntry as usize
}

fn is_text(name: &str) -> bool {
    UNIT_DIRS
        .iter()
        .any(|d| name.strip_prefix(d).is_some_and(|r| r.starts_with('/')))
        || name == "etc/ld.so.conf"
        || name.starts_with("etc/ld.so.conf.d/")
}

/// Whether an entry's data may be an ELF object worth reading: not a module
/// or firmware (the bulk of an image, and never loaded by a program).
fn may_be_elf(name: &str) -> bool {
    ![
        "lib/modules/",
        "usr/lib/modules/",
        "lib/firmware/",
        "usr/lib/firmware/",
    ]
    .iter()
    .any(|p| name.starts_with(p))
}

fn read_contents(image: &Image, names: &Names) -> Result<Contents> {
    let mut c = Contents::default();
    for k in names.entries.keys() {
        let k = String::from_utf8_lossy(k);
        if let Some((dir, name)) = k.rsplit_once('/') {
            c.children
                .entry(dir.to_string())
                .or_default()
                .push(name.to_string());
        }
    }
    for v in c.children.values_mut() {
        v.sort();
    }
    // The entries that win their name, by place.
    let mut wanted: HashMap<(usize, usize), String> = HashMap::new();
    for seg in &image.segments {
        for (i, e) in seg.entries.iter().enumerate() {
            let name = String::from_utf8_lossy(&components(&e.name).join(&b'/')).into_owned();
            if names
                .entries
                .get(name.as_bytes())
                .is_some_and(|w| key(w) == key(e))
            {
                wanted.insert((seg.index, i), name);
            }
        }
    }
    image.for_each_data(|seg, i, data| {
        let Some(name) = wanted.get(&(seg, i)) else {
            return Ok(());
        };
        let entry = &image.segments[seg].entries[i];
        let io = |e| crate::error::Error::io(name, e);
        if is_text(name) {
            let mut buf = Vec::new();
            data.take(MAX_TEXT).read_to_end(&mut buf).map_err(io)?;
            c.texts
                .insert(key(entry), String::from_utf8_lossy(&buf).into_owned());
        } else if name == "etc/ld.so.cache" {
            data.take(MAX_OBJECT)
                .read_to_end(&mut c.ld_cache)
                .map_err(io)?;
        } else if may_be_elf(name) {
            let mut magic = [0u8; 4];
            if data.read_exact(&mut magic).is_err() || &magic != b"\x7fELF" {
                return Ok(());
            }
            let mut buf = magic.to_vec();
            data.take(MAX_OBJECT).read_to_end(&mut buf).map_err(io)?;
            if let Ok(elf) = elf::parse(buf.as_slice()) {
                c.elves.insert(key(entry), elf);
            }
        }
        Ok(())
    })?;
    Ok(c)
}

/// The systemd version of the image, from its shared library's name.
fn image_version(names: &Names) -> Option<u32> {
    names
        .entries
        .keys()
        .filter_map(|k| {
            let file = k.rsplit(|&b| b == b'/').next()?;
            crate::resolve::systemd::version_of_shared_library(std::str::from_utf8(file).ok()?)
        })
        .max()
}

/// What the check found and lacks.
#[derive(Default)]
struct Verdict {
    found: Vec<String>,
    missing: BTreeSet<String>,
}

/// What would give an image's PID 1 what it lacks.
pub(super) const FIX: &str =
    "a root whose systemd is whole (its package reinstalled), or `init = \"shell\"`";

/// The verdict on a systemd image's PID 1: its line of check-boot.
pub(super) struct Pid1 {
    /// `PID 1 (systemd NNN)`.
    pub layer: String,
    pub found: Vec<String>,
    pub missing: Vec<String>,
}

#[cfg(test)]
impl Pid1 {
    fn ok(&self) -> bool {
        self.missing.is_empty()
    }
}

/// The check of a systemd image's PID 1, or None for an image that has no
/// systemd as its init (the `init` line judges that one).
pub(super) fn check(image: &Image, names: &Names) -> Result<Option<Pid1>> {
    let systemd_image = names.executable(SYSTEMD) && names.resolve("etc/initrd-release").is_some();
    if !systemd_image {
        return Ok(None);
    }
    let contents = read_contents(image, names)?;
    let version = image_version(names);
    let mut v = Verdict::default();
    let mut programs: Vec<(String, String)> = vec![(format!("/{SYSTEMD}"), "PID 1".into())];
    if let Some(version) = version {
        for need in crate::resolve::systemd::needs(version) {
            if names.executable(need.path) {
                programs.push((need.path.to_string(), format!("systemd {version}")));
            } else {
                v.missing.insert(format!(
                    "{} (systemd {version} needs it since {}: {})",
                    need.path, need.since, need.why
                ));
            }
        }
    }
    let units = units(names, &contents, &mut v, &mut programs);
    let objects = libraries(names, &contents, &programs, &mut v);
    v.found.push(format!(
        "{} units, {} programs and libraries",
        units, objects
    ));
    Ok(Some(Pid1 {
        layer: match version {
            Some(n) => format!("PID 1 (systemd {n})"),
            None => "PID 1 (systemd)".into(),
        },
        found: v.found,
        missing: v.missing.into_iter().collect(),
    }))
}

/// The unit file of `unit` in the image, if any (an instance through its
/// template).
fn unit_file(names: &Names, unit: &str) -> Option<String> {
    for dir in UNIT_DIRS {
        for n in std::iter::once(unit.to_string()).chain(template(unit)) {
            let p = format!("{dir}/{n}");
            if names.resolve(&p).is_some_and(RawEntry::is_regular) {
                return Some(p);
            }
            // A link to /dev/null masks the unit: it is there, and runs nothing.
            if names
                .entries
                .get(p.as_bytes())
                .is_some_and(|e| e.link.as_deref() == Some(b"/dev/null"))
            {
                return Some(p);
            }
        }
    }
    None
}

/// The text of an image file, through its links.
fn text<'c>(names: &Names, contents: &'c Contents, path: &str) -> Option<&'c str> {
    let e = names.resolve(path)?;
    contents.texts.get(&key(e)).map(String::as_str)
}

/// Names in the image's directory `dir` (a `.wants/`, `.requires/` or `.d/`
/// directory of the units), sorted, with whether each resolves.
fn dir_entries(names: &Names, contents: &Contents, dir: &str) -> Vec<(String, bool)> {
    contents
        .children
        .get(dir)
        .into_iter()
        .flatten()
        .map(|n| (n.clone(), names.resolve(&format!("{dir}/{n}")).is_some()))
        .collect()
}

/// Follows the units the initrd's targets pull in; says the ones needed and
/// absent, and the programs they run that are absent; adds the programs
/// present to `programs`. The number of units followed.
fn units(
    names: &Names,
    contents: &Contents,
    v: &mut Verdict,
    programs: &mut Vec<(String, String)>,
) -> usize {
    let mut queue: VecDeque<(String, String, bool)> = TARGETS
        .iter()
        .map(|t| (t.to_string(), "the initrd".to_string(), true))
        .collect();
    let mut seen: HashSet<String> = HashSet::new();
    let mut taken_programs: HashSet<String> = HashSet::new();
    while let Some((unit, by, needed)) = queue.pop_front() {
        if BUILTIN.contains(&unit.as_str()) || unit.contains('%') || !seen.insert(unit.clone()) {
            continue;
        }
        if seen.len() > MAX_UNITS {
            v.missing.insert(format!(
                "more than {MAX_UNITS} units: the image's units were not all read"
            ));
            break;
        }
        let Some(path) = unit_file(names, &unit) else {
            if needed && !MADE_AT_BOOT.iter().any(|s| unit.ends_with(s)) {
                v.missing.insert(format!("unit {unit} (needed by {by})"));
            }
            continue;
        };
        let mut texts: Vec<&str> = text(names, contents, &path).into_iter().collect();
        let file = path.rsplit('/').next().unwrap_or(&unit).to_string();
        for dir in UNIT_DIRS {
            for n in [unit.clone(), file.clone()].iter().collect::<BTreeSet<_>>() {
                for (conf, _) in dir_entries(names, contents, &format!("{dir}/{n}.d")) {
                    if conf.ends_with(".conf") {
                        texts.extend(text(names, contents, &format!("{dir}/{n}.d/{conf}")));
                    }
                }
                for kind in ["wants", "requires"] {
                    for (w, resolves) in dir_entries(names, contents, &format!("{dir}/{n}.{kind}"))
                    {
                        if !resolves && kind == "requires" {
                            v.missing
                                .insert(format!("unit {w} (required by {unit}: a dangling link)"));
                            continue;
                        }
                        queue.push_back((w, unit.clone(), kind == "requires"));
                    }
                }
            }
        }
        for t in texts {
            for (k, val) in settings(t) {
                if PULLS.contains(&k.as_str()) {
                    let need = NEEDS.contains(&k.as_str());
                    for u in val.split_whitespace() {
                        queue.push_back((u.to_string(), unit.clone(), need));
                    }
                } else if EXECS.contains(&k.as_str()) {
                    let Some((p, ignore)) = exec_program(&val) else {
                        continue;
                    };
                    if !taken_programs.insert(p.clone()) {
                        continue;
                    }
                    match program_path(names, &p) {
                        Some(path) => programs.push((path, format!("{k}= of {unit}"))),
                        None if ignore => {}
                        None => {
                            v.missing.insert(format!("program {p} ({k}= of {unit})"));
                        }
                    }
                }
            }
        }
    }
    seen.len()
}

/// Where program `p` (a path, or a bare name on systemd's path) is in the image.
fn program_path(names: &Names, p: &str) -> Option<String> {
    if p.starts_with('/') {
        return names.executable(p).then(|| p.to_string());
    }
    PROGRAM_DIRS
        .iter()
        .map(|d| format!("/{d}/{p}"))
        .find(|path| names.executable(path))
}

/// The directories the image's `/etc/ld.so.conf` names (includes followed
/// one level of patterns: `*` in the last component).
fn ld_so_conf(names: &Names, contents: &Contents) -> Vec<String> {
    let mut dirs = Vec::new();
    let mut files = vec!["etc/ld.so.conf".to_string()];
    let mut read = HashSet::new();
    while let Some(f) = files.pop() {
        if !read.insert(f.clone()) || read.len() > 256 {
            continue;
        }
        let Some(t) = text(names, contents, &f) else {
            continue;
        };
        for line in t.lines().map(|l| l.split('#').next().unwrap_or("").trim()) {
            if let Some(pattern) = line.strip_prefix("include") {
                let pattern = pattern.trim().trim_start_matches('/');
                let (dir, last) = pattern.rsplit_once('/').unwrap_or(("etc", pattern));
                let m = crate::resolve::elf::search::fnmatch;
                let mut incl: Vec<String> = dir_entries(names, contents, dir)
                    .into_iter()
                    .filter(|(n, _)| m(last.as_bytes(), n.as_bytes()))
                    .map(|(n, _)| format!("{dir}/{n}"))
                    .collect();
                incl.sort();
                incl.reverse();
                files.extend(incl);
            } else if line.starts_with('/') {
                dirs.push(line.to_string());
            }
        }
    }
    dirs
}

/// The paths `/etc/ld.so.cache` holds for `soname` (the cache is a table of
/// NUL-terminated names and paths: every path ending in `/soname`).
fn cached_paths(cache: &[u8], soname: &[u8]) -> Vec<String> {
    if cache.is_empty() {
        return Vec::new();
    }
    cache
        .split(|&b| b == 0)
        .filter(|s| {
            s.starts_with(b"/")
                && s.len() > soname.len()
                && s.ends_with(soname)
                && s[s.len() - soname.len() - 1] == b'/'
        })
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect()
}

/// Resolves every program's interpreter and libraries in the image; says
/// what is absent. The number of objects followed.
fn libraries(
    names: &Names,
    contents: &Contents,
    programs: &[(String, String)],
    v: &mut Verdict,
) -> usize {
    let conf_dirs = ld_so_conf(names, contents);
    let mut all: HashSet<usize> = HashSet::new();
    let mut steps = 0;
    for (program, by) in programs {
        steps += load(names, contents, &conf_dirs, program, by, v, &mut all);
        if steps > MAX_LOADS {
            v.missing.insert(format!(
                "more than {MAX_LOADS} objects loaded: the image's libraries were not all read"
            ));
            break;
        }
    }
    all.len()
}

/// Loads `program` as the dynamic loader would, breadth first: a library
/// whose name an object already loaded has (as its soname) is that object,
/// as glibc reuses it (systemd's private libraries find each other so).
/// The number of objects loaded.
fn load(
    names: &Names,
    contents: &Contents,
    conf_dirs: &[String],
    program: &str,
    by: &str,
    v: &mut Verdict,
    all: &mut HashSet<usize>,
) -> usize {
    // (path as loaded, the RPATH chain of its loaders)
    let mut queue: VecDeque<(String, Vec<PathBuf>)> =
        VecDeque::from([(program.to_string(), Vec::new())]);
    let mut done: HashSet<usize> = HashSet::new();
    let mut loaded: HashSet<Vec<u8>> = HashSet::new();
    while let Some((path, rpaths)) = queue.pop_front() {
        if done.len() > MAX_OBJECTS {
            break;
        }
        let Some(entry) = names.resolve(&path) else {
            continue;
        };
        if !done.insert(key(entry)) {
            continue;
        }
        all.insert(key(entry));
        let Some(obj) = contents.elves.get(&key(entry)) else {
            // A script: its interpreter runs it.
            continue;
        };
        if let Some(interp) = &obj.interp {
            let interp = String::from_utf8_lossy(interp).into_owned();
            if names.resolve(&interp).is_none_or(|e| !e.is_regular()) {
                v.missing
                    .insert(format!("{interp} (the loader of {path}, {by})"));
            }
        }
        let Some(dynamic) = &obj.dynamic else {
            continue;
        };
        if let Some(so) = &dynamic.soname {
            loaded.insert(so.clone());
        }
        let origin = Path::new(&path).parent().unwrap_or(Path::new("/"));
        let lib = elf::search::biarch_lib(&obj.abi);
        let platform = elf::search::platform(&obj.abi);
        let list = |value: &Option<Vec<u8>>| {
            value
                .as_deref()
                .map(|x| elf::search::path_list(x, origin, lib, platform))
                .unwrap_or_default()
        };
        // DT_RPATH of the object and its loaders unless it has DT_RUNPATH.
        let mut chain = rpaths;
        chain.extend(list(&dynamic.rpath));
        let mut dirs: Vec<PathBuf> = if dynamic.runpath.is_some() {
            list(&dynamic.runpath)
        } else {
            chain.clone()
        };
        dirs.extend(conf_dirs.iter().map(PathBuf::from));
        if dynamic.flags_1 & elf::parse::DF_1_NODEFLIB == 0 {
            dirs.extend(elf::search::default_dirs(true, &obj.abi));
        }
        let loads = |candidate: &str| {
            names.resolve(candidate).is_some_and(|e| {
                contents
                    .elves
                    .get(&key(e))
                    .is_some_and(|lib| obj.abi.accepts(&lib.abi))
            })
        };
        for needed in dynamic.needed.iter().chain(&dynamic.filters) {
            if !loaded.insert(needed.clone()) {
                continue;
            }
            let soname = String::from_utf8_lossy(needed).into_owned();
            let found = if soname.contains('/') {
                let p = Path::new("/").join(&soname).display().to_string();
                loads(&p).then_some(p)
            } else {
                dirs.iter()
                    .map(|d| d.join(&soname).display().to_string())
                    .chain(cached_paths(&contents.ld_cache, needed))
                    .find(|p| loads(p))
            };
            match found {
                Some(p) => queue.push_back((p, chain.clone())),
                None => {
                    v.missing
                        .insert(format!("library {soname} (loaded by {path}, {by})"));
                }
            }
        }
    }
    done.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpio::{header::push_entry, Header, TRAILER_NAME};
    use crate::resolve::elf::parse::tests::{build, Spec};
    use crate::resolve::elf::parse::{Class, Endian, EM_X86_64};

    enum Item {
        File(Vec<u8>),
        Link(&'static str),
    }

    fn elf(spec: Spec) -> Item {
        Item::File(build(Class::Elf64, Endian::Little, EM_X86_64, &spec))
    }

    fn text(t: &str) -> Item {
        Item::File(t.as_bytes().to_vec())
    }

    fn image(items: &[(&str, &Item)]) -> Image {
        let mut out = Vec::new();
        let mut dirs = HashSet::new();
        for (i, (name, item)) in items.iter().enumerate() {
            // Its directories first, as an image has them.
            let mut at = 0;
            while let Some(slash) = name[at..].find('/') {
                let dir = &name[..at + slash];
                if dirs.insert(dir.to_string()) {
                    let h = Header {
                        ino: 10_000 + dirs.len() as u32,
                        mode: 0o40755,
                        nlink: 2,
                        namesize: dir.len() as u32 + 1,
                        ..Default::default()
                    };
                    push_entry(&mut out, &h, dir.as_bytes(), b"");
                }
                at += slash + 1;
            }
            let (mode, data): (u32, &[u8]) = match item {
                Item::File(d) => (0o100755, d),
                Item::Link(t) => (0o120777, t.as_bytes()),
            };
            let h = Header {
                ino: i as u32 + 1,
                mode,
                nlink: 1,
                filesize: data.len() as u32,
                namesize: name.len() as u32 + 1,
                ..Default::default()
            };
            push_entry(&mut out, &h, name.as_bytes(), data);
        }
        push_entry(&mut out, &Header::trailer(false), TRAILER_NAME, b"");
        Image::from_bytes("t", out)
    }

    const LD: &str = "/lib64/ld-linux-x86-64.so.2";
    const PRIVATE: &str = "/usr/lib/x86_64-linux-gnu/systemd";

    /// A systemd 257 image as composer makes one: PID 1 and its executor
    /// with their private libraries (the core one finding the shared one
    /// as glibc does, already loaded), the initrd's targets and a unit's
    /// helper.
    fn systemd_image() -> Vec<(&'static str, Item)> {
        let pid1 = || Spec {
            interp: Some(LD),
            needed: vec![
                "libsystemd-core-257.so",
                "libsystemd-shared-257.so",
                "libc.so.6",
            ],
            runpath: Some(PRIVATE),
            ..Spec::default()
        };
        let plain = |needed: Vec<&'static str>| Spec {
            interp: Some(LD),
            needed,
            ..Spec::default()
        };
        let lib = |soname: &'static str, needed: Vec<&'static str>| Spec {
            soname: Some(soname),
            needed,
            ..Spec::default()
        };
        vec![
            ("etc/initrd-release", text("NAME=composer\n")),
            (
                "lib64/ld-linux-x86-64.so.2",
                elf(lib("ld-linux-x86-64.so.2", vec![])),
            ),
            (
                "usr/lib/x86_64-linux-gnu/libc.so.6",
                elf(lib("libc.so.6", vec![])),
            ),
            (
                "usr/lib/x86_64-linux-gnu/systemd/libsystemd-core-257.so",
                elf(lib(
                    "libsystemd-core-257.so",
                    vec!["libsystemd-shared-257.so", "libc.so.6"],
                )),
            ),
            (
                "usr/lib/x86_64-linux-gnu/systemd/libsystemd-shared-257.so",
                elf(lib("libsystemd-shared-257.so", vec!["libc.so.6"])),
            ),
            ("usr/lib/systemd/systemd", elf(pid1())),
            ("usr/lib/systemd/systemd-executor", elf(pid1())),
            ("usr/bin/systemctl", elf(plain(vec!["libc.so.6"]))),
            (
                "usr/bin/helper",
                elf(plain(vec!["libhelper.so.1", "libc.so.6"])),
            ),
            (
                "usr/lib/x86_64-linux-gnu/libhelper.so.1",
                elf(lib("libhelper.so.1", vec![])),
            ),
            (
                "usr/lib/systemd/system/initrd.target",
                text("[Unit]\nRequires=basic.target\nWants=sysroot.mount\n"),
            ),
            ("usr/lib/systemd/system/basic.target", text("[Unit]\n")),
            (
                "usr/lib/systemd/system/initrd-switch-root.target",
                text("[Unit]\nWants=initrd-switch-root.service\n"),
            ),
            (
                "usr/lib/systemd/system/initrd-switch-root.service",
                text("[Service]\nExecStart=systemctl --no-block switch-root /sysroot\n"),
            ),
            (
                "usr/lib/systemd/system/initrd.target.wants/helper.service",
                Item::Link("../helper.service"),
            ),
            (
                "usr/lib/systemd/system/helper.service",
                text("[Service]\nExecStart=/usr/bin/helper --now\nExecStartPost=-/usr/bin/gone\n"),
            ),
        ]
    }

    fn verdict(items: &[(&'static str, Item)]) -> Option<Pid1> {
        let refs: Vec<(&str, &Item)> = items.iter().map(|(n, i)| (*n, i)).collect();
        let img = image(&refs);
        check(&img, &Names::of(&img)).unwrap()
    }

    fn without(path: &str) -> Vec<(&'static str, Item)> {
        let mut items = systemd_image();
        items.retain(|(n, _)| *n != path);
        items
    }

    #[test]
    fn a_whole_systemd_image_can_start() {
        let c = verdict(&systemd_image()).expect("a systemd image is checked");
        assert_eq!(c.layer, "PID 1 (systemd 257)");
        assert!(c.ok(), "{:?}", c.missing);
        // The image's units: the three the initrd starts from, basic.target and
        // the helper (sysroot.mount is made by a generator at boot).
        assert!(c.found[0].starts_with("6 units"), "{:?}", c.found);
    }

    #[test]
    fn what_pid1_cannot_start_without_is_named() {
        let missing = |items: Vec<(&'static str, Item)>| {
            let c = verdict(&items).expect("checked");
            assert!(!c.ok());
            c.missing
        };
        let m = missing(without("usr/lib/systemd/systemd-executor"));
        assert_eq!(m.len(), 1, "{m:?}");
        assert!(
            m[0].starts_with("/usr/lib/systemd/systemd-executor (systemd 257 needs it since 255"),
            "{m:?}"
        );
        let m = missing(without(
            "usr/lib/x86_64-linux-gnu/systemd/libsystemd-shared-257.so",
        ));
        assert!(
            m.iter().any(|x| x.starts_with(
                "library libsystemd-shared-257.so (loaded by /usr/lib/systemd/systemd, PID 1)"
            )),
            "{m:?}"
        );
        let m = missing(without("usr/lib/x86_64-linux-gnu/libhelper.so.1"));
        assert_eq!(
            m,
            ["library libhelper.so.1 (loaded by /usr/bin/helper, ExecStart= of helper.service)"]
        );
        // A program behind `-` may be missing; one without may not.
        let m = missing(without("usr/bin/helper"));
        assert_eq!(
            m,
            ["program /usr/bin/helper (ExecStart= of helper.service)"]
        );
        let m = missing(without("usr/lib/systemd/system/basic.target"));
        assert_eq!(m, ["unit basic.target (needed by initrd.target)"]);
        let m = missing(without("lib64/ld-linux-x86-64.so.2"));
        assert!(
            m.iter()
                .any(|x| x.starts_with("/lib64/ld-linux-x86-64.so.2 (the loader of")),
            "{m:?}"
        );
    }

    /// A hostile image's units are followed so far and no further, and said.
    #[test]
    fn a_unit_graph_past_the_bound_is_said_not_followed_forever() {
        let mut items = without("usr/lib/systemd/system/initrd.target");
        let wants: Vec<String> = (0..MAX_UNITS + 10)
            .map(|i| format!("u{i}.service"))
            .collect();
        let unit = format!("[Unit]\nRequires=basic.target\nWants={}\n", wants.join(" "));
        items.push(("usr/lib/systemd/system/initrd.target", text(&unit)));
        let c = verdict(&items).unwrap();
        assert!(
            c.missing
                .iter()
                .any(|m| m.starts_with(&format!("more than {MAX_UNITS} units"))),
            "{:?}",
            c.missing
        );
    }

    #[test]
    fn an_image_without_systemd_as_its_init_is_not_judged_here() {
        assert!(verdict(&without("etc/initrd-release")).is_none());
        assert!(verdict(&without("usr/lib/systemd/systemd")).is_none());
    }

    #[test]
    fn the_loader_cache_and_configuration_are_searched() {
        let mut items = systemd_image();
        for (n, _) in items.iter_mut() {
            if *n == "usr/lib/x86_64-linux-gnu/libhelper.so.1" {
                *n = "opt/helper/lib/libhelper.so.1";
            }
        }
        let c = verdict(&items).unwrap();
        assert!(!c.ok());
        items.push(("etc/ld.so.conf", text("include /etc/ld.so.conf.d/*.conf\n")));
        items.push(("etc/ld.so.conf.d/helper.conf", text("/opt/helper/lib\n")));
        assert!(verdict(&items).unwrap().ok());
        items.truncate(items.len() - 2);
        items.push((
            "etc/ld.so.cache",
            Item::File(
                b"glibc-ld.so.cache1.1\0libhelper.so.1\0/opt/helper/lib/libhelper.so.1\0".to_vec(),
            ),
        ));
        assert!(verdict(&items).unwrap().ok());
    }
}

//! Where a loader looks: `/etc/ld.so.conf` (with `include` globs), the
//! default directories for an object's ABI, musl's path file, the dynamic
//! string tokens (`$ORIGIN`, `$LIB`, `$PLATFORM`) and glibc-hwcaps
//! subdirectories.
//!
//! Input: a [`Sysroot`] and an ABI. Output: directory lists (absolute paths
//! inside the root, in search order).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::parse::*;
use crate::resolve::sysroot::{Node, Sysroot};

/// Which CPU-specific `glibc-hwcaps/<name>/` subdirectories to search.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Hwcaps {
    /// None: the image runs on any CPU of the architecture (the default).
    #[default]
    Off,
    /// Those the build machine's CPU supports (x86-64 levels v4, v3, v2), for
    /// objects of the build machine's architecture.
    Host,
    /// Exactly these subdirectory names, best first (e.g. `["x86-64-v3"]`).
    Only(Vec<String>),
}

/// The Debian multiarch tuple for an ABI, when there is one.
pub fn multiarch_triplet(abi: &Abi) -> Option<&'static str> {
    let le = abi.endian == Endian::Little;
    let b64 = abi.class == Class::Elf64;
    Some(match abi.machine {
        EM_X86_64 if b64 => "x86_64-linux-gnu",
        EM_X86_64 => "x86_64-linux-gnux32",
        EM_386 => "i386-linux-gnu",
        EM_AARCH64 if le => "aarch64-linux-gnu",
        EM_AARCH64 => "aarch64_be-linux-gnu",
        EM_ARM if abi.arm_hard_float() => {
            if le {
                "arm-linux-gnueabihf"
            } else {
                "armeb-linux-gnueabihf"
            }
        }
        EM_ARM if le => "arm-linux-gnueabi",
        EM_ARM => "armeb-linux-gnueabi",
        EM_PPC64 if le => "powerpc64le-linux-gnu",
        EM_PPC64 => "powerpc64-linux-gnu",
        EM_PPC => "powerpc-linux-gnu",
        EM_S390 if b64 => "s390x-linux-gnu",
        EM_S390 => "s390-linux-gnu",
        EM_RISCV if b64 => "riscv64-linux-gnu",
        EM_MIPS if b64 && le => "mips64el-linux-gnuabi64",
        EM_MIPS if b64 => "mips64-linux-gnuabi64",
        EM_MIPS if abi.mips_n32() && le => "mips64el-linux-gnuabin32",
        EM_MIPS if abi.mips_n32() => "mips64-linux-gnuabin32",
        EM_MIPS if le => "mipsel-linux-gnu",
        EM_MIPS => "mips-linux-gnu",
        EM_LOONGARCH if b64 => "loongarch64-linux-gnu",
        EM_SPARCV9 => "sparc64-linux-gnu",
        EM_SPARC => "sparc-linux-gnu",
        EM_ALPHA => "alpha-linux-gnu",
        EM_68K => "m68k-linux-gnu",
        EM_SH if le => "sh4-linux-gnu",
        EM_PARISC => "hppa-linux-gnu",
        EM_IA_64 => "ia64-linux-gnu",
        _ => return None,
    })
}

/// The biarch library directory name for an ABI (`lib64`, `libx32`, ...),
/// where the non-Debian convention puts its libraries; `lib` otherwise.
pub fn biarch_lib(abi: &Abi) -> &'static str {
    match (abi.machine, abi.class) {
        (EM_X86_64, Class::Elf32) => "libx32",
        (EM_MIPS, Class::Elf32) if abi.mips_n32() => "lib32",
        (EM_386 | EM_ARM | EM_PPC | EM_MIPS | EM_SPARC | EM_68K | EM_SH | EM_PARISC, _) => "lib",
        (EM_RISCV, Class::Elf64) => "lib64",
        (_, Class::Elf64) => "lib64",
        _ => "lib",
    }
}

/// `$PLATFORM`, as the kernel's AT_PLATFORM for a CPU of this ABI (the
/// baseline, never a model-specific name).
pub fn platform(abi: &Abi) -> Option<&'static str> {
    Some(match abi.machine {
        EM_X86_64 => "x86_64",
        EM_386 => "i686",
        EM_AARCH64 => "aarch64",
        EM_ARM => "v7l",
        EM_PPC64 if abi.endian == Endian::Little => "ppc64le",
        EM_PPC64 => "ppc64",
        EM_PPC => "ppc",
        EM_S390 => "s390x",
        EM_MIPS => "mips",
        EM_SPARCV9 | EM_SPARC => "sparc",
        EM_LOONGARCH => "loongarch",
        EM_ALPHA => "alpha",
        _ => return None,
    })
}

/// Whether the root uses the multiarch layout for this ABI (a
/// `/usr/lib/<triplet>` or `/lib/<triplet>` directory exists).
pub fn is_multiarch(sys: &mut Sysroot, abi: &Abi) -> bool {
    let Some(t) = multiarch_triplet(abi) else {
        return false;
    };
    ["/usr/lib", "/lib"].iter().any(|d| {
        sys.walk(&Path::new(d).join(t))
            .is_ok_and(|w| w.node == Node::Dir)
    })
}

/// `$LIB`: `lib/<triplet>` on a multiarch root (as Debian's glibc expands
/// it), else the biarch directory (`lib64` for 64-bit x86-64).
pub fn lib_token(multiarch: bool, abi: &Abi) -> String {
    match multiarch_triplet(abi) {
        Some(t) if multiarch => format!("lib/{t}"),
        _ => biarch_lib(abi).to_string(),
    }
}

/// glibc's trusted directories for an ABI: the multiarch pair (when the
/// root has it), the biarch pair (`/lib64`, `/usr/lib64` for 64-bit), then
/// `/lib`, `/usr/lib`. A union of Debian's and upstream's lists: a directory
/// the root lacks costs nothing, and a library of another class found in
/// `/usr/lib` is skipped like everywhere else.
pub fn default_dirs(multiarch: bool, abi: &Abi) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(t) = multiarch_triplet(abi).filter(|_| multiarch) {
        dirs.push(PathBuf::from(format!("/lib/{t}")));
        dirs.push(PathBuf::from(format!("/usr/lib/{t}")));
    }
    let bi = biarch_lib(abi);
    if bi != "lib" {
        dirs.push(PathBuf::from(format!("/{bi}")));
        dirs.push(PathBuf::from(format!("/usr/{bi}")));
    }
    dirs.push(PathBuf::from("/lib"));
    dirs.push(PathBuf::from("/usr/lib"));
    dirs
}

/// The directories `/etc/ld.so.conf` names inside the root, in order, with
/// `include` files expanded (patterns relative to the including file's
/// directory; matches in sorted order, as glob(3) returns them). `hwcap`
/// lines and relative directories are ignored, as ldconfig ignores them.
pub fn ld_so_conf(sys: &mut Sysroot) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    let mut seen_files = Vec::new();
    conf_file(
        sys,
        Path::new("/etc/ld.so.conf"),
        &mut dirs,
        &mut seen_files,
        0,
    );
    let mut unique = Vec::new();
    for d in dirs {
        if !unique.contains(&d) {
            unique.push(d);
        }
    }
    unique
}

fn conf_file(
    sys: &mut Sysroot,
    file: &Path,
    dirs: &mut Vec<PathBuf>,
    seen: &mut Vec<PathBuf>,
    depth: usize,
) {
    let Ok(w) = sys.walk(file) else {
        return;
    };
    if !matches!(w.node, Node::File { .. }) || seen.contains(&w.real) || depth > 16 {
        return;
    }
    seen.push(w.real.clone());
    let Ok(text) = std::fs::read(sys.host(&w.real)) else {
        return;
    };
    let here = file.parent().unwrap_or(Path::new("/")).to_path_buf();
    for line in text.split(|&b| b == b'\n') {
        let line = match line.iter().position(|&b| b == b'#') {
            Some(h) => &line[..h],
            None => line,
        };
        let line = line.trim_ascii();
        if line.is_empty() {
            continue;
        }
        if let Some(rest) = strip_keyword(line, b"include") {
            for pat in rest
                .split(|b| b.is_ascii_whitespace())
                .filter(|p| !p.is_empty())
            {
                let pat = Path::new(OsStr::from_bytes(pat));
                let pat = if pat.is_absolute() {
                    pat.to_path_buf()
                } else {
                    here.join(pat)
                };
                for f in glob(sys, &pat) {
                    conf_file(sys, &f, dirs, seen, depth + 1);
                }
            }
        } else if strip_keyword(line, b"hwcap").is_some() {
            continue;
        } else {
            // Old ldconfig allowed `dir=TYPE`; the type is ignored.
            let mut d = line;
            if let Some(eq) = d.iter().rposition(|&b| b == b'=') {
                d = &d[..eq];
            }
            while d.len() > 1 && d.ends_with(b"/") {
                d = &d[..d.len() - 1];
            }
            if d.starts_with(b"/") {
                dirs.push(PathBuf::from(OsStr::from_bytes(d)));
            }
        }
    }
}

fn strip_keyword<'a>(line: &'a [u8], kw: &[u8]) -> Option<&'a [u8]> {
    let rest = line.strip_prefix(kw)?;
    match rest.first() {
        Some(b' ' | b'\t') => Some(rest.trim_ascii()),
        _ => None,
    }
}

/// Expands a glob pattern (`*`, `?`, `[...]` in any component) inside the
/// root; matches sorted, names starting with `.` matched only explicitly.
pub fn glob(sys: &mut Sysroot, pattern: &Path) -> Vec<PathBuf> {
    let comps: Vec<Vec<u8>> = pattern
        .components()
        .filter_map(|c| match c {
            std::path::Component::Normal(n) => Some(n.as_bytes().to_vec()),
            std::path::Component::ParentDir => Some(b"..".to_vec()),
            _ => None,
        })
        .collect();
    let mut current = vec![PathBuf::from("/")];
    for c in &comps {
        let mut next = Vec::new();
        let magic = c.iter().any(|b| matches!(b, b'*' | b'?' | b'['));
        for base in &current {
            if !magic {
                next.push(base.join(OsStr::from_bytes(c)));
                continue;
            }
            let Ok(w) = sys.walk(base) else { continue };
            if w.node != Node::Dir {
                continue;
            }
            let mut names: Vec<Vec<u8>> = sys
                .list(&w.real)
                .into_iter()
                .filter(|n| (n[0] != b'.' || c[0] == b'.') && fnmatch(c, n))
                .collect();
            names.sort();
            next.extend(names.iter().map(|n| base.join(OsStr::from_bytes(n))));
        }
        current = next;
    }
    current.retain(|p| sys.walk(p).is_ok());
    current
}

/// Shell-style matching of one path component: `*`, `?`, `[abc]`, `[a-z]`,
/// `[!x]`, `\x`.
pub fn fnmatch(pat: &[u8], name: &[u8]) -> bool {
    let (mut p, mut n) = (0usize, 0usize);
    let (mut star_p, mut star_n) = (usize::MAX, 0usize);
    while n < name.len() {
        if p < pat.len() {
            match pat[p] {
                b'*' => {
                    star_p = p;
                    star_n = n;
                    p += 1;
                    continue;
                }
                b'?' => {
                    p += 1;
                    n += 1;
                    continue;
                }
                b'[' => {
                    if let Some((ok, len)) = class_match(&pat[p..], name[n]) {
                        if ok {
                            p += len;
                            n += 1;
                            continue;
                        }
                    } else if name[n] == b'[' {
                        p += 1;
                        n += 1;
                        continue;
                    }
                }
                b'\\' if p + 1 < pat.len() && pat[p + 1] == name[n] => {
                    p += 2;
                    n += 1;
                    continue;
                }
                c if c == name[n] => {
                    p += 1;
                    n += 1;
                    continue;
                }
                _ => {}
            }
        }
        if star_p == usize::MAX {
            return false;
        }
        p = star_p + 1;
        star_n += 1;
        n = star_n;
    }
    pat[p..].iter().all(|&c| c == b'*')
}

/// Matches `c` against the bracket expression at the start of `pat`;
/// returns (matched, length of the expression), or `None` when unclosed.
fn class_match(pat: &[u8], c: u8) -> Option<(bool, usize)> {
    let mut i = 1;
    let negate = matches!(pat.get(i), Some(b'!' | b'^'));
    if negate {
        i += 1;
    }
    let mut matched = false;
    let mut first = true;
    while i < pat.len() {
        if pat[i] == b']' && !first {
            return Some((matched != negate, i + 1));
        }
        first = false;
        if i + 2 < pat.len() && pat[i + 1] == b'-' && pat[i + 2] != b']' {
            if pat[i] <= c && c <= pat[i + 2] {
                matched = true;
            }
            i += 3;
        } else {
            if pat[i] == c {
                matched = true;
            }
            i += 1;
        }
    }
    None
}

/// Expands `$ORIGIN`, `$LIB` and `$PLATFORM` (also `${...}`) in one path
/// (an RPATH element or a DT_NEEDED name). `None` when it names a token we
/// cannot expand: the loader drops such an element.
pub fn expand_tokens(
    s: &[u8],
    origin: &Path,
    lib: &str,
    platform: Option<&str>,
) -> Option<Vec<u8>> {
    if !s.contains(&b'$') {
        return Some(s.to_vec());
    }
    let mut out = Vec::with_capacity(s.len() + 32);
    let mut i = 0;
    while i < s.len() {
        if s[i] != b'$' {
            out.push(s[i]);
            i += 1;
            continue;
        }
        let rest = &s[i + 1..];
        let (name, len) = if let Some(inner) = rest.strip_prefix(b"{") {
            let close = inner.iter().position(|&b| b == b'}')?;
            (&inner[..close], close + 2)
        } else {
            let end = rest
                .iter()
                .position(|&b| !(b.is_ascii_alphanumeric() || b == b'_'))
                .unwrap_or(rest.len());
            // glibc: an unbraced token must end the string or a component.
            if end < rest.len() && rest[end] != b'/' {
                return None;
            }
            (&rest[..end], end)
        };
        match name {
            b"ORIGIN" => out.extend_from_slice(origin.as_os_str().as_bytes()),
            b"LIB" => out.extend_from_slice(lib.as_bytes()),
            b"PLATFORM" => out.extend_from_slice(platform?.as_bytes()),
            _ => return None,
        }
        i += 1 + len;
    }
    Some(out)
}

/// Whether a path (an RPATH element, a DT_NEEDED name) uses `$ORIGIN`.
pub fn uses_origin(s: &[u8]) -> bool {
    s.windows(7).any(|w| w == b"$ORIGIN") || s.windows(9).any(|w| w == b"${ORIGIN}")
}

/// Splits a DT_RPATH / DT_RUNPATH value into directories with tokens
/// expanded. Empty elements are dropped; relative ones are taken from the
/// root (where a program in the image starts).
pub fn path_list(value: &[u8], origin: &Path, lib: &str, platform: Option<&str>) -> Vec<PathBuf> {
    value
        .split(|&b| b == b':')
        .filter(|e| !e.is_empty())
        .filter_map(|e| expand_tokens(e, origin, lib, platform))
        .map(|e| {
            let mut e = e.as_slice();
            while e.len() > 1 && e.ends_with(b"/") {
                e = &e[..e.len() - 1];
            }
            Path::new("/").join(OsStr::from_bytes(e))
        })
        .collect()
}

/// The `glibc-hwcaps` subdirectory names to try for an ABI, best first.
pub fn hwcaps_subdirs(hw: &Hwcaps, abi: &Abi) -> Vec<String> {
    match hw {
        Hwcaps::Off => Vec::new(),
        Hwcaps::Only(v) => v.clone(),
        Hwcaps::Host => host_hwcaps(abi),
    }
}

#[cfg(target_arch = "x86_64")]
fn host_hwcaps(abi: &Abi) -> Vec<String> {
    use std::arch::is_x86_feature_detected as has;
    if abi.machine != EM_X86_64 || abi.class != Class::Elf64 {
        return Vec::new();
    }
    let v2 = has!("cmpxchg16b")
        && has!("popcnt")
        && has!("sse3")
        && has!("sse4.1")
        && has!("sse4.2")
        && has!("ssse3");
    let v3 = v2
        && has!("avx")
        && has!("avx2")
        && has!("bmi1")
        && has!("bmi2")
        && has!("f16c")
        && has!("fma")
        && has!("lzcnt")
        && has!("movbe")
        && has!("xsave");
    let v4 = v3
        && has!("avx512f")
        && has!("avx512bw")
        && has!("avx512cd")
        && has!("avx512dq")
        && has!("avx512vl");
    let mut out = Vec::new();
    for (ok, name) in [(v4, "x86-64-v4"), (v3, "x86-64-v3"), (v2, "x86-64-v2")] {
        if ok {
            out.push(name.to_string());
        }
    }
    out
}

#[cfg(not(target_arch = "x86_64"))]
fn host_hwcaps(_abi: &Abi) -> Vec<String> {
    Vec::new()
}

/// The ABI of the machine composer runs on (used for library requests when
/// no program tells the ABI).
pub fn host_abi() -> Abi {
    let machine = if cfg!(target_arch = "x86_64") {
        EM_X86_64
    } else if cfg!(target_arch = "x86") {
        EM_386
    } else if cfg!(target_arch = "aarch64") {
        EM_AARCH64
    } else if cfg!(target_arch = "arm") {
        EM_ARM
    } else if cfg!(target_arch = "riscv64") {
        EM_RISCV
    } else if cfg!(target_arch = "powerpc64") {
        EM_PPC64
    } else if cfg!(target_arch = "s390x") {
        EM_S390
    } else if cfg!(target_arch = "loongarch64") {
        EM_LOONGARCH
    } else {
        0
    };
    Abi {
        class: if cfg!(target_pointer_width = "64") {
            Class::Elf64
        } else {
            Class::Elf32
        },
        endian: if cfg!(target_endian = "little") {
            Endian::Little
        } else {
            Endian::Big
        },
        machine,
        flags: 0,
    }
}

/// What glibc's loader reads at run time to find libraries in the
/// `/etc/ld.so.conf` directories (it never reads ld.so.conf itself).
pub const LD_SO_CACHE: &str = "/etc/ld.so.cache";

/// musl's directories when it has no path file.
pub const MUSL_DEFAULT_PATH: [&str; 3] = ["/lib", "/usr/local/lib", "/usr/lib"];

/// musl's system search path.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MuslPath {
    pub dirs: Vec<PathBuf>,
    /// The path file the directories come from, when the root has one (the
    /// loader reads it at run time, so the image needs it).
    pub file: Option<PathBuf>,
}

/// musl's search path: the path file `<prefix>/etc/ld-musl-<arch>.path`
/// next to the loader (`<prefix>` is the loader's directory's parent, empty
/// for `/lib/ld-musl-*.so.1`), elements separated by `:` or newlines;
/// without it `/lib:/usr/local/lib:/usr/lib`.
pub fn musl_sys_path(sys: &mut Sysroot, interp: &Path) -> MuslPath {
    let name = interp.file_name().map(|n| n.as_bytes()).unwrap_or_default();
    let arch = name
        .strip_prefix(b"ld-musl-")
        .and_then(|r| r.strip_suffix(b".so.1"))
        .unwrap_or(b"");
    let prefix = interp
        .parent()
        .and_then(Path::parent)
        .unwrap_or(Path::new("/"));
    let mut file = prefix.join("etc").as_os_str().as_bytes().to_vec();
    file.extend_from_slice(b"/ld-musl-");
    file.extend_from_slice(arch);
    file.extend_from_slice(b".path");
    let file = Path::new(OsStr::from_bytes(&file)).to_path_buf();
    let text = match sys.walk(&file) {
        Ok(w) if matches!(w.node, Node::File { .. }) => std::fs::read(sys.host(&w.real)).ok(),
        _ => None,
    };
    let Some(text) = text else {
        return MuslPath {
            dirs: MUSL_DEFAULT_PATH.iter().map(PathBuf::from).collect(),
            file: None,
        };
    };
    let dirs = text
        .split(|&b| b == b':' || b == b'\n')
        .map(|e| e.trim_ascii())
        .filter(|e| !e.is_empty())
        .map(|e| Path::new("/").join(OsStr::from_bytes(e)))
        .collect();
    MuslPath {
        dirs,
        file: Some(file),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    const X64: Abi = Abi {
        class: Class::Elf64,
        endian: Endian::Little,
        machine: EM_X86_64,
        flags: 0,
    };

    #[test]
    fn tokens() {
        let o = Path::new("/usr/bin");
        let t = |s: &str| {
            expand_tokens(s.as_bytes(), o, "lib/x86_64-linux-gnu", Some("x86_64"))
                .map(|v| String::from_utf8(v).unwrap())
        };
        assert_eq!(t("$ORIGIN/../lib").as_deref(), Some("/usr/bin/../lib"));
        assert_eq!(t("${ORIGIN}/x").as_deref(), Some("/usr/bin/x"));
        assert_eq!(
            t("/opt/$LIB/$PLATFORM").as_deref(),
            Some("/opt/lib/x86_64-linux-gnu/x86_64")
        );
        assert_eq!(t("/plain").as_deref(), Some("/plain"));
        assert_eq!(t("$ORIGINX"), None);
        assert_eq!(t("$ORIGIN.d"), None);
        assert_eq!(t("$UNKNOWN/x"), None);
        assert_eq!(
            path_list(b"$ORIGIN:/a/:$BAD:rel", o, "lib", None),
            vec![
                PathBuf::from("/usr/bin"),
                PathBuf::from("/a"),
                PathBuf::from("/rel")
            ]
        );
    }

    #[test]
    fn fnmatch_basics() {
        assert!(fnmatch(b"*.conf", b"libc.conf"));
        assert!(!fnmatch(b"*.conf", b"libc.conf~"));
        assert!(fnmatch(b"a?c", b"abc"));
        assert!(fnmatch(b"[a-c]x*", b"bxyz"));
        assert!(!fnmatch(b"[!a-c]x", b"bx"));
        assert!(fnmatch(b"*", b""));
        assert!(fnmatch(b"x*y*z", b"xaaybbz"));
        assert!(!fnmatch(b"x*y*z", b"xaaybb"));
    }

    #[test]
    fn conf_with_includes() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        fs::create_dir_all(r.join("etc/ld.so.conf.d")).unwrap();
        fs::write(
            r.join("etc/ld.so.conf"),
            "# comment\n/first/lib/\ninclude ld.so.conf.d/*.conf\nhwcap 0 nosegneg\nrelative/dir\n/last # tail\n",
        )
        .unwrap();
        fs::write(r.join("etc/ld.so.conf.d/b.conf"), "/b\n/first/lib\n").unwrap();
        fs::write(r.join("etc/ld.so.conf.d/a.conf"), "/a1\n\t/a2=libc6\n").unwrap();
        fs::write(r.join("etc/ld.so.conf.d/.hidden.conf"), "/hidden\n").unwrap();
        fs::write(r.join("etc/ld.so.conf.d/c.conf.bak"), "/bak\n").unwrap();
        let mut s = Sysroot::new(r);
        let dirs: Vec<String> = ld_so_conf(&mut s)
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        assert_eq!(dirs, ["/first/lib", "/a1", "/a2", "/b", "/last"]);
    }

    #[test]
    fn defaults_by_layout() {
        let d = |m| {
            default_dirs(m, &X64)
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            d(true),
            [
                "/lib/x86_64-linux-gnu",
                "/usr/lib/x86_64-linux-gnu",
                "/lib64",
                "/usr/lib64",
                "/lib",
                "/usr/lib"
            ]
        );
        assert_eq!(d(false), ["/lib64", "/usr/lib64", "/lib", "/usr/lib"]);
        assert_eq!(lib_token(true, &X64), "lib/x86_64-linux-gnu");
        assert_eq!(lib_token(false, &X64), "lib64");
        let i386 = Abi {
            class: Class::Elf32,
            machine: EM_386,
            ..X64
        };
        assert_eq!(lib_token(false, &i386), "lib");
        assert_eq!(platform(&i386), Some("i686"));
        assert_eq!(multiarch_triplet(&i386), Some("i386-linux-gnu"));
    }

    #[test]
    fn musl_path_file() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        let mut s = Sysroot::new(r);
        let p = |v: MuslPath| {
            v.dirs
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            p(musl_sys_path(&mut s, Path::new("/lib/ld-musl-x86_64.so.1"))),
            ["/lib", "/usr/local/lib", "/usr/lib"]
        );
        fs::create_dir_all(r.join("etc")).unwrap();
        fs::write(r.join("etc/ld-musl-x86_64.path"), "/opt/a:/opt/b\n/opt/c\n").unwrap();
        let mut s = Sysroot::new(r);
        let m = musl_sys_path(&mut s, Path::new("/lib/ld-musl-x86_64.so.1"));
        assert_eq!(
            m.file.as_deref(),
            Some(Path::new("/etc/ld-musl-x86_64.path"))
        );
        assert_eq!(p(m), ["/opt/a", "/opt/b", "/opt/c"]);
    }
}

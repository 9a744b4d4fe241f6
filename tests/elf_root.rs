//! ELF resolution inside a root that is not `/`: a small merged-/usr root is
//! built here with the C compiler (programs and libraries) plus copies of
//! the host's glibc loader, libc and `env`, and its resolution is checked
//! file by file.
//!
//! The root has its own etc/ld.so.conf (naming a directory the host lacks),
//! a library found through DT_RUNPATH with $ORIGIN, a 32-bit and an AArch64
//! library earlier on the search path than the x86-64 one, a glibc-hwcaps
//! directory with a different copy, symlink chains, DT_RPATH inheritance,
//! DT_RUNPATH non-inheritance, a `#!/usr/bin/env` script and `.note.dlopen`.

use crate::support;

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;

use composer::resolve::elf::{
    self, BinaryRequest, DlopenLevel, ElfOptions, How, Hwcaps, Item, ObjectKind,
};

/// A directory the host does not have, named by the root's ld.so.conf.
const CONF_DIR: &str = "/opt/composer-elf-test/lib";

const MULTIARCH: &str = "usr/lib/x86_64-linux-gnu";

struct TestRoot {
    _scratch: support::Scratch,
    root: PathBuf,
}

fn cc(args: &[&str], cwd: &Path) {
    let out = Command::new("cc")
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("cannot run cc");
    assert!(
        out.status.success(),
        "cc {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A shared library `lib<name>.so.1` (soname the same) built from one
/// function, with extra link arguments.
fn shared(build: &Path, name: &str, body: &str, extra: &[&str]) -> PathBuf {
    let src = build.join(format!("{name}.c"));
    fs::write(&src, body).unwrap();
    let out = build.join(format!("lib{name}.so.1"));
    let soname = format!("-Wl,-soname,lib{name}.so.1");
    let mut args = vec![
        "-shared",
        "-fPIC",
        "-o",
        out.to_str().unwrap(),
        src.to_str().unwrap(),
        &soname,
        "-Wl,--no-as-needed",
    ];
    args.extend_from_slice(extra);
    cc(&args, build);
    out
}

/// A minimal ELF header of another ABI, named like a real library: the
/// loader must skip it.
fn fake_elf(path: &Path, class64: bool, machine: u16) {
    let mut h = vec![0x7f, b'E', b'L', b'F', if class64 { 2 } else { 1 }, 1, 1];
    h.resize(16, 0);
    h.extend(3u16.to_le_bytes()); // ET_DYN
    h.extend(machine.to_le_bytes());
    h.extend(1u32.to_le_bytes());
    h.resize(if class64 { 64 } else { 52 }, 0);
    fs::write(path, h).unwrap();
}

fn host_file(path: &str) -> Option<PathBuf> {
    fs::canonicalize(path).ok()
}

fn build_root() -> Option<TestRoot> {
    support::require_tool("cc", "gcc")?;
    let ld = host_file("/lib64/ld-linux-x86-64.so.2");
    let libc = host_file("/lib/x86_64-linux-gnu/libc.so.6");
    let env = host_file("/usr/bin/env");
    let (Some(ld), Some(libc), Some(env)) = (ld, libc, env) else {
        support::skip("an x86-64 Debian-style glibc host (/lib64/ld-linux-x86-64.so.2, /lib/x86_64-linux-gnu/libc.so.6)");
        return None;
    };
    assert!(
        !Path::new(CONF_DIR).exists(),
        "the host must not have {CONF_DIR}"
    );
    let scratch = support::Scratch::new("elf-root");
    let build = scratch.join("build");
    let root = scratch.join("root");
    fs::create_dir_all(&build).unwrap();
    for d in [
        "usr/bin",
        "usr/lib/prog",
        "usr/lib64",
        "etc/ld.so.conf.d",
        "opt/composer-elf-test/lib",
        "opt/early/lib",
        &format!("{MULTIARCH}/glibc-hwcaps/x86-64-v3"),
    ] {
        fs::create_dir_all(root.join(d)).unwrap();
    }
    for (link, target) in [
        ("bin", "usr/bin"),
        ("lib", "usr/lib"),
        ("lib64", "usr/lib64"),
    ] {
        symlink(target, root.join(link)).unwrap();
    }
    // The host's loader, libc and env, laid out as Debian does.
    fs::copy(&ld, root.join(MULTIARCH).join("ld-linux-x86-64.so.2")).unwrap();
    symlink(
        "../lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
        root.join("usr/lib64/ld-linux-x86-64.so.2"),
    )
    .unwrap();
    fs::copy(&libc, root.join(MULTIARCH).join("libc.so.6")).unwrap();
    fs::copy(&env, root.join("usr/bin/env")).unwrap();

    // ld.so.conf: an include glob; the early directory first.
    fs::write(
        root.join("etc/ld.so.conf"),
        "include /etc/ld.so.conf.d/*.conf\n",
    )
    .unwrap();
    fs::write(
        root.join("etc/ld.so.conf.d/10-early.conf"),
        "/opt/early/lib\n",
    )
    .unwrap();
    fs::write(
        root.join("etc/ld.so.conf.d/20-test.conf"),
        format!("# the test's directory\n{CONF_DIR}\n"),
    )
    .unwrap();
    // The loader reads the cache, not ld.so.conf; composer only checks that
    // it exists (the chroot test makes a real one with ldconfig).
    fs::write(root.join("etc/ld.so.cache"), "placeholder").unwrap();

    // libweird: in the conf directory behind a symlink chain; a 32-bit copy
    // comes first on the search path, an AArch64 one in the test directory
    // shadows libhw's default location.
    let weird = shared(&build, "weird", "int weird(void){return 1;}", &[]);
    let conf = root.join(CONF_DIR.trim_start_matches('/'));
    fs::copy(&weird, conf.join("libweird.so.1.2.3")).unwrap();
    symlink("libweird.so.1.2.3", conf.join("libweird.so.1.2")).unwrap();
    symlink("libweird.so.1.2", conf.join("libweird.so.1")).unwrap();
    fake_elf(&root.join("opt/early/lib/libweird.so.1"), false, 3);
    fake_elf(&conf.join("libhw.so.1"), true, 183);

    // libhw: the baseline copy and a different x86-64-v3 copy.
    let hw = shared(&build, "hw", "int hw(void){return 1;}", &[]);
    fs::copy(&hw, root.join(MULTIARCH).join("libhw.so.1")).unwrap();
    let hw3 = shared(&build, "hw", "int hw(void){return 3;} int v3;", &[]);
    fs::copy(
        &hw3,
        root.join(MULTIARCH)
            .join("glibc-hwcaps/x86-64-v3/libhw.so.1"),
    )
    .unwrap();

    // libgamma and libbeta only in /usr/lib/prog; libalpha needs libbeta.
    let gamma = shared(&build, "gamma", "int gamma_fn(void){return 1;}", &[]);
    let beta = shared(&build, "beta", "int beta(void){return 1;}", &[]);
    let alpha = shared(
        &build,
        "alpha",
        "int beta(void); int alpha(void){return beta();}",
        &["-L.", "-l:libbeta.so.1"],
    );
    let delta = shared(&build, "delta", "int delta(void){return 1;}", &[]);
    let epsilon = shared(&build, "epsilon", "int epsilon(void){return 1;}", &[]);
    for f in [&gamma, &beta, &alpha, &delta, &epsilon] {
        fs::copy(f, root.join("usr/lib/prog").join(f.file_name().unwrap())).unwrap();
    }

    let link = |name: &str, src: &str, extra: &[&str]| {
        let c = build.join(format!("{name}.c"));
        fs::write(&c, src).unwrap();
        let out = root.join("usr/bin").join(name);
        let mut args = vec![
            "-o",
            out.to_str().unwrap(),
            c.to_str().unwrap(),
            "-L.",
            "-Wl,-rpath-link,.",
            "-Wl,--no-as-needed",
        ];
        args.extend_from_slice(extra);
        cc(&args, &build);
    };
    link(
        "prog",
        "int gamma_fn(void), weird(void), hw(void); int main(void){return gamma_fn()+weird()+hw();}",
        &[
            "-l:libgamma.so.1",
            "-l:libweird.so.1",
            "-l:libhw.so.1",
            "-Wl,--enable-new-dtags,-rpath,$ORIGIN/../lib/prog",
        ],
    );
    link(
        "prog-rpath",
        "int alpha(void); int main(void){return alpha();}",
        &[
            "-l:libalpha.so.1",
            "-Wl,--disable-new-dtags,-rpath,$ORIGIN/../lib/prog",
        ],
    );
    link(
        "prog-runpath",
        "int alpha(void); int main(void){return alpha();}",
        &[
            "-l:libalpha.so.1",
            "-Wl,--enable-new-dtags,-rpath,$ORIGIN/../lib/prog",
        ],
    );
    // .note.dlopen as systemd's macro lays it out.
    let note = r#"
#include <stdint.h>
#define NOTE(var, json) \
  __attribute__((used, section(".note.dlopen"))) _Alignas(4) static const struct { \
    struct { uint32_t n_namesz, n_descsz, n_type; } nhdr; char name[4]; \
    _Alignas(4) char json_[sizeof(json)]; \
  } var = { { 4, sizeof(json), 0x407c0c0a }, "FDO", json };
NOTE(n1, "[{\"feature\":\"delta\",\"description\":\"d\",\"priority\":\"required\",\"soname\":[\"libdelta.so.1\"]}]")
NOTE(n2, "[{\"feature\":\"epsilon\",\"priority\":\"suggested\",\"soname\":[\"libepsilon.so.0\",\"libepsilon.so.1\"]},{\"feature\":\"omega\",\"soname\":[\"libomega.so.7\"]}]")
int main(void){return 0;}
"#;
    link(
        "prog-dl",
        note,
        &["-Wl,--enable-new-dtags,-rpath,$ORIGIN/../lib/prog"],
    );
    fs::write(
        root.join("usr/bin/tool"),
        "#!/usr/bin/env -S prog --flag\necho\n",
    )
    .unwrap();
    let mut perm = fs::metadata(root.join("usr/bin/tool"))
        .unwrap()
        .permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
    fs::set_permissions(root.join("usr/bin/tool"), perm).unwrap();

    Some(TestRoot {
        _scratch: scratch,
        root,
    })
}

fn file(root: &Path, p: &str) -> (PathBuf, Item) {
    (
        PathBuf::from(p),
        Item::File {
            source: root.join(p.trim_start_matches('/')),
        },
    )
}

fn link(p: &str, target: &str) -> (PathBuf, Item) {
    (
        PathBuf::from(p),
        Item::Symlink {
            target: PathBuf::from(target),
        },
    )
}

/// What `prog` needs, with libhw from `hw_path`.
fn prog_items(root: &Path, hw_path: &str) -> BTreeMap<PathBuf, Item> {
    BTreeMap::from([
        file(root, "/usr/bin/prog"),
        link("/lib64", "usr/lib64"),
        link(
            "/usr/lib64/ld-linux-x86-64.so.2",
            "../lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
        ),
        file(root, "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"),
        file(root, "/usr/lib/prog/libgamma.so.1"),
        link(
            "/opt/composer-elf-test/lib/libweird.so.1",
            "libweird.so.1.2",
        ),
        link(
            "/opt/composer-elf-test/lib/libweird.so.1.2",
            "libweird.so.1.2.3",
        ),
        file(root, "/opt/composer-elf-test/lib/libweird.so.1.2.3"),
        link("/lib", "usr/lib"),
        file(root, hw_path),
        file(root, "/usr/lib/x86_64-linux-gnu/libc.so.6"),
        // libweird is found through ld.so.conf: the image needs the cache.
        file(root, "/etc/ld.so.cache"),
    ])
}

fn assert_inside(root: &Path, items: &BTreeMap<PathBuf, Item>) {
    for (p, item) in items {
        if let Item::File { source } = item {
            assert!(
                source.starts_with(root),
                "{} comes from outside the root: {}",
                p.display(),
                source.display()
            );
            assert!(source.is_file(), "{} is missing", source.display());
        }
    }
}

#[test]
fn resolves_inside_the_root_without_hwcaps() {
    let Some(t) = build_root() else { return };
    let opts = ElfOptions::new(&t.root);
    let res = elf::resolve(&[BinaryRequest::program("prog")], &opts).unwrap();
    let want = prog_items(&t.root, "/usr/lib/x86_64-linux-gnu/libhw.so.1");
    assert_eq!(res.items, want);
    assert_inside(&t.root, &res.items);
    // libgamma comes through the program's own $ORIGIN: fine for ldd, but
    // the loader needs /proc to expand it.
    assert_eq!(res.warnings.len(), 1, "{:?}", res.warnings);
    assert!(
        res.warnings[0]
            .message
            .contains("libgamma.so.1 is found through $ORIGIN of the program itself"),
        "{}",
        res.warnings[0].message
    );

    // The load paths as the loader forms them.
    let r = &res.requests[0];
    let paths: Vec<String> = r
        .objects
        .iter()
        .map(|o| o.path.display().to_string())
        .collect();
    assert_eq!(
        paths,
        [
            "/usr/bin/prog",
            "/lib64/ld-linux-x86-64.so.2",
            "/usr/bin/../lib/prog/libgamma.so.1",
            &format!("{CONF_DIR}/libweird.so.1"),
            "/etc/ld.so.cache",
            "/lib/x86_64-linux-gnu/libhw.so.1",
            "/lib/x86_64-linux-gnu/libc.so.6",
        ]
    );
    assert_eq!(r.objects[0].kind, ObjectKind::Dynamic);
}

#[test]
fn hwcaps_option_picks_the_cpu_specific_copy() {
    let Some(t) = build_root() else { return };
    let mut opts = ElfOptions::new(&t.root);
    opts.hwcaps = Hwcaps::Only(vec!["x86-64-v4".into(), "x86-64-v3".into()]);
    let res = elf::resolve(&[BinaryRequest::program("/usr/bin/prog")], &opts).unwrap();
    let want = prog_items(
        &t.root,
        "/usr/lib/x86_64-linux-gnu/glibc-hwcaps/x86-64-v3/libhw.so.1",
    );
    assert_eq!(res.items, want);
    // The copy really differs from the baseline one.
    assert_ne!(
        fs::read(t.root.join(MULTIARCH).join("libhw.so.1")).unwrap(),
        fs::read(
            t.root
                .join(MULTIARCH)
                .join("glibc-hwcaps/x86-64-v3/libhw.so.1")
        )
        .unwrap()
    );
}

#[test]
fn rpath_is_inherited_and_runpath_is_not() {
    let Some(t) = build_root() else { return };
    let opts = ElfOptions::new(&t.root);
    let res = elf::resolve(&[BinaryRequest::program("prog-rpath")], &opts).unwrap();
    let reals: Vec<String> = res.requests[0]
        .dependencies()
        .map(|o| o.real.display().to_string())
        .collect();
    assert!(
        reals.contains(&"/usr/lib/prog/libalpha.so.1".to_string()),
        "{reals:?}"
    );
    assert!(
        reals.contains(&"/usr/lib/prog/libbeta.so.1".to_string()),
        "{reals:?}"
    );

    // With DT_RUNPATH, libalpha's own need (libbeta) is not searched there.
    let err = elf::resolve(&[BinaryRequest::program("prog-runpath")], &opts).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("library libbeta.so.1 not found"), "{msg}");
    assert!(
        msg.contains("prog-runpath -> /usr/bin/prog-runpath -> [NEEDED libalpha.so.1] /usr/bin/../lib/prog/libalpha.so.1 -> [NEEDED libbeta.so.1]"),
        "{msg}"
    );
    assert!(
        msg.contains(CONF_DIR),
        "the searched directories are listed: {msg}"
    );

    // Optional: a warning, and nothing of it in the image.
    let res = elf::resolve(
        &[
            BinaryRequest::program("prog-runpath").optional(true),
            BinaryRequest::program("prog-rpath"),
        ],
        &opts,
    )
    .unwrap();
    assert!(!res.requests[0].included);
    let dropped: Vec<_> = res
        .warnings
        .iter()
        .filter(|w| w.message.contains("optional entry left out"))
        .collect();
    assert_eq!(dropped.len(), 1, "{:?}", res.warnings);
    assert!(dropped[0].message.contains("libbeta.so.1"));
    assert!(!res.items.contains_key(Path::new("/usr/bin/prog-runpath")));
    assert!(res
        .items
        .contains_key(Path::new("/usr/lib/prog/libbeta.so.1")));
}

#[test]
fn env_script_brings_env_and_its_command() {
    let Some(t) = build_root() else { return };
    let opts = ElfOptions::new(&t.root);
    let res = elf::resolve(&[BinaryRequest::program("tool")], &opts).unwrap();
    let r = &res.requests[0];
    assert_eq!(r.objects[0].kind, ObjectKind::Script);
    let hows: Vec<(String, How)> = r
        .edges
        .iter()
        .filter(|e| e.from == Some(0))
        .map(|e| (r.objects[e.to].path.display().to_string(), e.how.clone()))
        .collect();
    assert_eq!(
        hows,
        [
            ("/usr/bin/env".to_string(), How::Shebang),
            ("/usr/bin/prog".to_string(), How::Env("prog".into())),
        ]
    );
    let mut want = prog_items(&t.root, "/usr/lib/x86_64-linux-gnu/libhw.so.1");
    want.extend([
        file(&t.root, "/usr/bin/tool"),
        file(&t.root, "/usr/bin/env"),
    ]);
    assert_eq!(res.items, want);
}

#[test]
fn dlopen_notes_by_level() {
    let Some(t) = build_root() else { return };
    let mut opts = ElfOptions::new(&t.root);
    let has = |res: &elf::Resolution, p: &str| res.items.contains_key(Path::new(p));

    opts.dlopen = DlopenLevel::None;
    let res = elf::resolve(&[BinaryRequest::program("prog-dl")], &opts).unwrap();
    assert!(!has(&res, "/usr/lib/prog/libdelta.so.1"));
    assert!(res.warnings.is_empty());

    opts.dlopen = DlopenLevel::Recommended;
    let res = elf::resolve(&[BinaryRequest::program("prog-dl")], &opts).unwrap();
    assert!(has(&res, "/usr/lib/prog/libdelta.so.1"));
    assert!(!has(&res, "/usr/lib/prog/libepsilon.so.1"));
    // libomega (recommended by default) is missing: a warning, not an error
    // (the other warning: libdelta comes through the program's $ORIGIN).
    assert_eq!(res.warnings.len(), 2, "{:?}", res.warnings);
    assert!(res.warnings[0]
        .message
        .contains("libdelta.so.1 is found through $ORIGIN"));
    assert!(res.warnings[1].message.contains("libomega.so.7"));
    let chains = res.why(Path::new("/usr/lib/prog/libdelta.so.1"));
    assert_eq!(chains.len(), 1);
    assert_eq!(
        res.render_chain(&chains[0]),
        "prog-dl -> /usr/bin/prog-dl -> [dlopen libdelta.so.1 (required, feature delta)] /usr/bin/../lib/prog/libdelta.so.1"
    );

    opts.dlopen = DlopenLevel::Suggested;
    let res = elf::resolve(&[BinaryRequest::program("prog-dl")], &opts).unwrap();
    // The first alternative is absent, the second is taken.
    assert!(has(&res, "/usr/lib/prog/libepsilon.so.1"));
}

#[test]
fn why_lists_every_chain() {
    let Some(t) = build_root() else { return };
    let opts = ElfOptions::new(&t.root);
    let res = elf::resolve(
        &[
            BinaryRequest::program("prog"),
            BinaryRequest::program("prog-rpath"),
        ],
        &opts,
    )
    .unwrap();
    let chains: Vec<String> = res
        .why(Path::new("/usr/lib/x86_64-linux-gnu/libc.so.6"))
        .iter()
        .map(|c| res.render_chain(c))
        .collect();
    for want in [
        "prog -> /usr/bin/prog -> [NEEDED libc.so.6] /lib/x86_64-linux-gnu/libc.so.6",
        "prog -> /usr/bin/prog -> [NEEDED libgamma.so.1] /usr/bin/../lib/prog/libgamma.so.1 -> [NEEDED libc.so.6] /lib/x86_64-linux-gnu/libc.so.6",
        "prog-rpath -> /usr/bin/prog-rpath -> [NEEDED libalpha.so.1] /usr/bin/../lib/prog/libalpha.so.1 -> [NEEDED libbeta.so.1] /usr/bin/../lib/prog/libbeta.so.1 -> [NEEDED libc.so.6] /lib/x86_64-linux-gnu/libc.so.6",
    ] {
        assert!(chains.iter().any(|c| c == want), "missing chain {want}\nin {chains:#?}");
    }
    // A symlink on the way is explained by the object behind it.
    let via = res.why(Path::new("/lib64"));
    assert!(!via.is_empty());
    assert!(res
        .render_chain(&via[0])
        .ends_with("[PT_INTERP] /lib64/ld-linux-x86-64.so.2 (through the symlink /lib64)"));
}

#[test]
fn library_requests_and_missing_programs() {
    let Some(t) = build_root() else { return };
    let opts = ElfOptions::new(&t.root);
    let res = elf::resolve(
        &[
            BinaryRequest::program("prog"),
            BinaryRequest::library("libweird.so.1"),
            BinaryRequest::program("no-such-program").optional(true),
        ],
        &opts,
    )
    .unwrap();
    assert!(res.requests[1].included);
    assert_eq!(
        res.requests[1].objects[0].real,
        Path::new("/opt/composer-elf-test/lib/libweird.so.1.2.3")
    );
    assert!(!res.requests[2].included);
    assert!(res.warnings.iter().any(|w| w
        .message
        .contains("`no-such-program` not found on the search path")));
    let err = elf::resolve(&[BinaryRequest::program("no-such-program")], &opts).unwrap_err();
    assert!(err.to_string().contains("no-such-program"), "{err}");
    assert!(err.hint().is_some());
}

/// The real loader, run inside the root, loads exactly what composer
/// resolved (needs root for chroot; ldconfig builds the root's real cache).
#[test]
fn the_real_loader_in_the_root_agrees() {
    let Some(t) = build_root() else { return };
    if !support::require_root() {
        return;
    }
    let Some(ldconfig) = support::require_tool("ldconfig", "libc-bin") else {
        return;
    };
    let Some(chroot) = support::require_tool("chroot", "coreutils") else {
        return;
    };
    // -X: keep the test's symlink chains as they are.
    support::run_ok(Command::new(&ldconfig).arg("-X").arg("-r").arg(&t.root));
    let mut opts = ElfOptions::new(&t.root);
    // The loader picks the glibc-hwcaps copies this CPU supports, and
    // knows nothing of dlopen notes.
    opts.hwcaps = Hwcaps::Host;
    opts.dlopen = DlopenLevel::None;
    for prog in ["prog", "prog-rpath", "prog-dl", "env"] {
        let res = elf::resolve(&[BinaryRequest::program(prog)], &opts).unwrap();
        let ours: std::collections::BTreeSet<PathBuf> = res.requests[0]
            .dependencies()
            .map(|o| fs::canonicalize(t.root.join(o.real.strip_prefix("/").unwrap())).unwrap())
            .collect();
        let out = support::run_ok(
            Command::new(&chroot)
                .arg(&t.root)
                .arg("/lib64/ld-linux-x86-64.so.2")
                .arg("--list")
                .arg(format!("/usr/bin/{prog}")),
        );
        let listed = String::from_utf8_lossy(&out.stdout);
        let theirs: std::collections::BTreeSet<PathBuf> = listed
            .lines()
            .filter_map(|l| {
                let l = l.trim();
                let p = l.split_once(" => ").map_or(l, |(_, p)| p);
                let p = p.split(" (0x").next()?.trim();
                p.starts_with('/')
                    .then(|| fs::canonicalize(t.root.join(&p[1..])).unwrap())
            })
            .collect();
        assert_eq!(
            ours, theirs,
            "{prog}: composer vs the loader's list:\n{listed}"
        );
        // And it runs there, unless composer warned that it needs /proc
        // (the chroot has none, as /init has none): then the loader fails
        // (exit status 127).
        let needs_proc = res.warnings.iter().any(|w| w.message.contains("/proc"));
        let out = Command::new(&chroot)
            .arg(&t.root)
            .arg(format!("/usr/bin/{prog}"))
            .arg("--version")
            .output()
            .unwrap();
        let loader_failed = out.status.code() == Some(127)
            && String::from_utf8_lossy(&out.stderr)
                .contains("error while loading shared libraries");
        assert_eq!(
            loader_failed,
            needs_proc,
            "{prog}: {}; composer warnings: {:?}",
            String::from_utf8_lossy(&out.stderr),
            res.warnings
        );
    }
}

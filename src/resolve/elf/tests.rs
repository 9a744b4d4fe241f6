//! Loader emulation on roots of crafted ELF files (any class, byte order and
//! machine: nothing here is executed).

use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::Path;

use super::parse::tests::{build, Spec};
use super::parse::{Class, Endian, DF_1_NODEFLIB, EM_386, EM_S390, EM_X86_64};
use super::*;

fn put(root: &Path, path: &str, bytes: &[u8]) {
    let p = root.join(path.trim_start_matches('/'));
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(&p, bytes).unwrap();
    fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
}

fn sym(root: &Path, path: &str, target: &str) {
    let p = root.join(path.trim_start_matches('/'));
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    symlink(target, p).unwrap();
}

fn x64(spec: Spec) -> Vec<u8> {
    build(Class::Elf64, Endian::Little, EM_X86_64, &spec)
}

const LD: &str = "/lib64/ld-linux-x86-64.so.2";

/// A glibc-style x86-64 root (not multiarch) with the loader and libc.
fn glibc_root() -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    let r = t.path();
    put(
        r,
        LD,
        &x64(Spec {
            soname: Some("ld-linux-x86-64.so.2"),
            ..Spec::default()
        }),
    );
    put(
        r,
        "/lib64/libc.so.6",
        &x64(Spec {
            soname: Some("libc.so.6"),
            needed: vec!["ld-linux-x86-64.so.2"],
            ..Spec::default()
        }),
    );
    t
}

fn program(needed: Vec<&'static str>) -> Spec {
    Spec {
        interp: Some(LD),
        needed,
        ..Spec::default()
    }
}

fn reals(r: &Resolved) -> Vec<String> {
    r.objects
        .iter()
        .map(|o| o.real.display().to_string())
        .collect()
}

#[test]
fn glibc_basics_and_soname_reuse() {
    let t = glibc_root();
    let r = t.path();
    // The program needs the development name `libx.so`, whose soname is
    // libx.so.1; liby needs libx.so.1, which is never searched for: the
    // loaded object's soname matches (there is no file of that name).
    put(
        r,
        "/usr/bin/app",
        &x64(program(vec!["libx.so", "liby.so.1", "libc.so.6"])),
    );
    put(
        r,
        "/usr/lib64/libx.so",
        &x64(Spec {
            soname: Some("libx.so.1"),
            ..Spec::default()
        }),
    );
    put(
        r,
        "/usr/lib64/liby.so.1",
        &x64(Spec {
            needed: vec!["libx.so.1", "libc.so.6"],
            ..Spec::default()
        }),
    );
    let res = resolve(&[BinaryRequest::program("app")], &ElfOptions::new(r)).unwrap();
    assert_eq!(
        reals(&res.requests[0]),
        [
            "/usr/bin/app",
            LD,
            "/usr/lib64/libx.so",
            "/usr/lib64/liby.so.1",
            "/lib64/libc.so.6"
        ]
    );
    // libc's need of the loader is the loader (by soname), not a search.
    let r0 = &res.requests[0];
    let ld_edges: Vec<_> = r0.edges.iter().filter(|e| e.to == 1).collect();
    assert_eq!(ld_edges.len(), 2, "{ld_edges:?}");
}

#[test]
fn nodeflib_skips_default_directories() {
    let t = glibc_root();
    let r = t.path();
    put(
        r,
        "/usr/bin/app",
        &x64(Spec {
            flags_1: DF_1_NODEFLIB,
            ..program(vec!["libc.so.6"])
        }),
    );
    let err = resolve(&[BinaryRequest::program("app")], &ElfOptions::new(r)).unwrap_err();
    assert!(
        err.to_string().contains("library libc.so.6 not found"),
        "{err}"
    );
    // Through ld.so.conf it is found again (a conf directory that is not a
    // default one).
    put(r, "/etc/ld.so.conf", b"/opt/l\n");
    put(
        r,
        "/opt/l/libc.so.6",
        &x64(Spec {
            soname: Some("libc.so.6"),
            ..Spec::default()
        }),
    );
    let res = resolve(&[BinaryRequest::program("app")], &ElfOptions::new(r)).unwrap();
    assert!(reals(&res.requests[0]).contains(&"/opt/l/libc.so.6".to_string()));
    // The loader in the image finds /opt/l only through /etc/ld.so.cache,
    // which this root lacks.
    assert_eq!(res.warnings.len(), 1, "{:?}", res.warnings);
    assert!(res.warnings[0].message.contains("/etc/ld.so.cache"));
    assert!(!res.items.contains_key(Path::new("/etc/ld.so.cache")));
}

#[test]
fn ld_so_cache_comes_along_only_when_needed() {
    let t = glibc_root();
    let r = t.path();
    put(
        r,
        "/usr/bin/app",
        &x64(program(vec!["libo.so.1", "libc.so.6"])),
    );
    put(r, "/usr/bin/plain", &x64(program(vec!["libc.so.6"])));
    // /usr/lib64 is a default directory: found there, no cache is needed.
    put(r, "/etc/ld.so.conf", b"/usr/lib64\n/opt/o\n");
    put(r, "/etc/ld.so.cache", b"cache");
    put(r, "/opt/o/libo.so.1", &x64(Spec::default()));
    let opts = ElfOptions::new(r);
    let res = resolve(&[BinaryRequest::program("plain")], &opts).unwrap();
    assert!(!res.items.contains_key(Path::new("/etc/ld.so.cache")));
    let res = resolve(&[BinaryRequest::program("app")], &opts).unwrap();
    assert!(res.warnings.is_empty(), "{:?}", res.warnings);
    assert!(res.items.contains_key(Path::new("/etc/ld.so.cache")));
    assert_eq!(res.requests[0].dependencies().count(), 3);
    let why: Vec<String> = res
        .why(Path::new("/etc/ld.so.cache"))
        .iter()
        .map(|c| res.render_chain(c))
        .collect();
    assert_eq!(
        why,
        ["app -> /usr/bin/app -> [where the loader finds libo.so.1] /etc/ld.so.cache"]
    );
}

#[test]
fn same_file_by_another_path_is_one_object_with_an_alias() {
    let t = glibc_root();
    let r = t.path();
    put(
        r,
        "/usr/bin/app",
        &x64(Spec {
            runpath: Some("/opt/a"),
            ..program(vec!["libz.so.1", "libz-compat.so.1", "libc.so.6"])
        }),
    );
    put(r, "/opt/a/libz.so.1.2", &x64(Spec::default()));
    sym(r, "/opt/a/libz.so.1", "libz.so.1.2");
    sym(r, "/opt/a/libz-compat.so.1", "/opt/a/libz.so.1.2");
    let res = resolve(&[BinaryRequest::program("app")], &ElfOptions::new(r)).unwrap();
    let req = &res.requests[0];
    let z: Vec<_> = req
        .objects
        .iter()
        .filter(|o| o.real.ends_with("libz.so.1.2"))
        .collect();
    assert_eq!(z.len(), 1);
    assert_eq!(z[0].aliases.len(), 1);
    assert_eq!(z[0].aliases[0].path, Path::new("/opt/a/libz-compat.so.1"));
    // Both names are in the image.
    assert_eq!(
        res.items.get(Path::new("/opt/a/libz-compat.so.1")),
        Some(&Item::Symlink {
            target: "/opt/a/libz.so.1.2".into()
        })
    );
    assert!(res.items.contains_key(Path::new("/opt/a/libz.so.1")));
    assert_eq!(res.why(Path::new("/opt/a/libz-compat.so.1")).len(), 2);
}

#[test]
fn needed_paths_with_origin_and_non_elf_candidates() {
    let t = glibc_root();
    let r = t.path();
    put(
        r,
        "/usr/bin/app",
        &x64(program(vec!["$ORIGIN/../plug/libp.so", "libc.so.6"])),
    );
    put(r, "/usr/plug/libp.so", &x64(Spec::default()));
    let res = resolve(&[BinaryRequest::program("app")], &ElfOptions::new(r)).unwrap();
    assert!(res.items.contains_key(Path::new("/usr/plug/libp.so")));

    // A linker script where the loader looks first stops the load, as in glibc.
    put(r, "/etc/ld.so.conf", b"/opt/script\n");
    put(r, "/opt/script/libc.so.6", b"GROUP ( /lib64/libc.so.6 )\n");
    let err = resolve(&[BinaryRequest::program("app")], &ElfOptions::new(r)).unwrap_err();
    assert!(err.to_string().contains("is not an ELF object"), "{err}");
}

#[test]
fn wrong_abi_candidates_are_skipped_and_named() {
    let t = glibc_root();
    let r = t.path();
    put(
        r,
        "/usr/bin/app",
        &x64(program(vec!["libw.so.1", "libc.so.6"])),
    );
    put(
        r,
        "/lib64/libw.so.1",
        &build(Class::Elf32, Endian::Little, EM_386, &Spec::default()),
    );
    let err = resolve(&[BinaryRequest::program("app")], &ElfOptions::new(r)).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("/lib64/libw.so.1 (ELF32 LSB i386)"), "{msg}");
    assert!(
        msg.contains("searched: /lib64:/usr/lib64:/lib:/usr/lib"),
        "{msg}"
    );
    put(r, "/usr/lib/libw.so.1", &x64(Spec::default()));
    let res = resolve(&[BinaryRequest::program("app")], &ElfOptions::new(r)).unwrap();
    assert!(reals(&res.requests[0]).contains(&"/usr/lib/libw.so.1".to_string()));
}

#[test]
fn big_endian_multiarch_root() {
    let t = tempfile::tempdir().unwrap();
    let r = t.path();
    let s390 = |spec: Spec| build(Class::Elf64, Endian::Big, EM_S390, &spec);
    put(
        r,
        "/usr/lib/s390x-linux-gnu/ld64.so.1",
        &s390(Spec::default()),
    );
    sym(r, "/lib", "usr/lib");
    put(
        r,
        "/usr/bin/app",
        &s390(Spec {
            interp: Some("/lib/s390x-linux-gnu/ld64.so.1"),
            needed: vec!["libq.so.1", "libr.so.1"],
            rpath: Some("/opt/$LIB/$PLATFORM"),
            ..Spec::default()
        }),
    );
    put(
        r,
        "/usr/lib/s390x-linux-gnu/libq.so.1",
        &s390(Spec::default()),
    );
    // A little-endian x86-64 copy earlier on the path is skipped.
    put(
        r,
        "/opt/lib/s390x-linux-gnu/s390x/libq.so.1",
        &x64(Spec::default()),
    );
    put(
        r,
        "/opt/lib/s390x-linux-gnu/s390x/libr.so.1",
        &s390(Spec::default()),
    );
    let res = resolve(
        &[
            BinaryRequest::program("app"),
            BinaryRequest::library("libq.so.1"),
        ],
        &ElfOptions::new(r),
    )
    .unwrap();
    assert_eq!(
        reals(&res.requests[0]),
        [
            "/usr/bin/app",
            "/usr/lib/s390x-linux-gnu/ld64.so.1",
            "/usr/lib/s390x-linux-gnu/libq.so.1",
            "/opt/lib/s390x-linux-gnu/s390x/libr.so.1"
        ]
    );
    // The library request assumes the program's ABI.
    assert_eq!(
        reals(&res.requests[1]),
        ["/usr/lib/s390x-linux-gnu/libq.so.1"]
    );
}

#[test]
fn musl_search_order_and_libc_names() {
    let t = tempfile::tempdir().unwrap();
    let r = t.path();
    let ld = "/lib/ld-musl-x86_64.so.1";
    put(r, ld, &x64(Spec::default()));
    put(r, "/etc/ld-musl-x86_64.path", b"/opt/m\n");
    put(
        r,
        "/usr/bin/app",
        &x64(Spec {
            interp: Some(ld),
            needed: vec!["libc.so", "libfoo.so.1"],
            runpath: Some("/opt/r"),
            ..Spec::default()
        }),
    );
    // Not searched: the path file replaces the default directories.
    put(r, "/usr/lib/libfoo.so.1", &x64(Spec::default()));
    put(
        r,
        "/opt/m/libfoo.so.1",
        &x64(Spec {
            needed: vec!["libc.so", "libbar.so.1"],
            ..Spec::default()
        }),
    );
    // Only in the program's DT_RUNPATH: musl, unlike glibc, lets libfoo's
    // needs use it.
    put(r, "/opt/r/libbar.so.1", &x64(Spec::default()));
    let res = resolve(&[BinaryRequest::program("app")], &ElfOptions::new(r)).unwrap();
    assert_eq!(
        reals(&res.requests[0]),
        [
            "/usr/bin/app",
            ld,
            "/opt/m/libfoo.so.1",
            "/etc/ld-musl-x86_64.path",
            "/opt/r/libbar.so.1"
        ]
    );
    // The path file is read at run time: it goes into the image.
    assert!(res
        .items
        .contains_key(Path::new("/etc/ld-musl-x86_64.path")));
}

#[test]
fn script_problems() {
    let t = glibc_root();
    let r = t.path();
    put(r, "/usr/bin/loop", b"#!/usr/bin/loop\n");
    put(r, "/usr/bin/data", b"just text\n");
    put(r, "/usr/bin/empty", b"#!   \n");
    let opts = ElfOptions::new(r);
    let e = |name: &str| {
        resolve(&[BinaryRequest::program(name)], &opts)
            .unwrap_err()
            .to_string()
    };
    assert!(
        e("loop").contains("levels of #! interpreters"),
        "{}",
        e("loop")
    );
    assert!(e("data").contains("neither an ELF file nor a #! script"));
    assert!(e("empty").contains("names no interpreter"));
    // A program that is not executable is not found on the search path.
    fs::set_permissions(r.join("usr/bin/data"), fs::Permissions::from_mode(0o644)).unwrap();
    assert!(e("data").contains("not found on the search path"));
}

#[test]
fn static_programs_bring_nothing() {
    let t = tempfile::tempdir().unwrap();
    let r = t.path();
    put(r, "/sbin/init", &x64(Spec::default()));
    let res = resolve(&[BinaryRequest::program("init")], &ElfOptions::new(r)).unwrap();
    assert_eq!(res.requests[0].objects.len(), 1);
    assert_eq!(res.requests[0].objects[0].kind, ObjectKind::Static);
    assert_eq!(res.paths().collect::<Vec<_>>(), [Path::new("/sbin/init")]);
}

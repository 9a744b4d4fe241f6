//! Archives stay byte-identical: every list of the corpus (several option sets), a set
//! of manifests over a fake root made here (trees, globs, links, nodes, hardlinks, every
//! alignment mode, checksums, segments of every codec, early microcode and ACPI tables)
//! and every example are built, and the MD5 of each output is compared with the one
//! recorded in tests/golden/archives.txt.
//!
//! The examples take files from the host (its shell, libraries, /etc/passwd), so their
//! bytes depend on the machine. Each recorded example also carries a fingerprint of
//! what it holds (the name and MD5 of every regular file, read with the independent
//! parser of tests/support): where the host's files are the recorded ones, the archive
//! must be byte-identical; where they are not, the test checks the same names are there
//! and says which files differ.
//!
//! `COMPOSER_GOLDEN_RECORD=1 cargo test --test integration golden::` rewrites the file (only when a
//! change of bytes is intended; say why in the commit).

use crate::corpus;
use crate::md5;
use crate::support;

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};

use md5::md5_hex;
use support::Scratch;

const SDE: &str = "1700000000";

fn golden_file() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/archives.txt")
}

fn recording() -> bool {
    std::env::var("COMPOSER_GOLDEN_RECORD").is_ok_and(|v| v == "1")
}

/// `name -> (md5, fingerprint)` as recorded.
fn recorded() -> BTreeMap<String, (String, Option<String>)> {
    let text = fs::read_to_string(golden_file()).unwrap_or_default();
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let mut w = l.split_whitespace();
            let name = w.next().unwrap().to_string();
            let md5 = w.next().unwrap().to_string();
            (name, (md5, w.next().map(str::to_string)))
        })
        .collect()
}

fn save(all: &BTreeMap<String, (String, Option<String>)>, header: &str) {
    let mut text = String::from(header);
    for (name, (md5, fp)) in all {
        text.push_str(name);
        text.push(' ');
        text.push_str(md5);
        if let Some(f) = fp {
            text.push(' ');
            text.push_str(f);
        }
        text.push('\n');
    }
    fs::create_dir_all(golden_file().parent().unwrap()).unwrap();
    fs::write(golden_file(), text).unwrap();
}

const HEADER: &str = "# MD5 of every archive tests/golden.rs builds (name md5 [fingerprint of a host-dependent example]).\n# Rewrite with COMPOSER_GOLDEN_RECORD=1 only for an intended change of bytes.\n";

/// Compares (or records) `got` for every case; panics listing each difference.
fn check(section: &str, got: BTreeMap<String, (String, Option<String>)>) {
    check_except(section, got, &[]);
}

/// [`check`], but cases in `skipped` (which this host cannot build) may be missing.
fn check_except(
    section: &str,
    got: BTreeMap<String, (String, Option<String>)>,
    skipped: &[String],
) {
    static FILE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one_at_a_time = FILE.lock().unwrap_or_else(|e| e.into_inner());
    let mut all = recorded();
    if recording() {
        all.retain(|k, _| !k.starts_with(&format!("{section}:")));
        all.extend(got);
        save(&all, HEADER);
        eprintln!("recorded {section} into {}", golden_file().display());
        return;
    }
    let mut problems = Vec::new();
    for (name, (md5, _)) in &got {
        match all.get(name) {
            None => problems.push(format!("{name}: not recorded")),
            Some((want, _)) if want != md5 => {
                problems.push(format!("{name}: md5 {md5}, recorded {want}"))
            }
            Some(_) => {}
        }
    }
    for name in all.keys().filter(|k| k.starts_with(&format!("{section}:"))) {
        if !got.contains_key(name) && !skipped.contains(name) {
            problems.push(format!("{name}: recorded but not built"));
        }
    }
    assert!(
        problems.is_empty(),
        "{} archive(s) differ from tests/golden/archives.txt:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

fn output(cmd: &mut std::process::Command) -> Vec<u8> {
    support::run_ok(cmd).stdout
}

#[test]
fn list_corpus_archives_are_unchanged() {
    let fixtures = corpus::fixtures();
    let dir = Scratch::new("golden-lists");
    let mut got = BTreeMap::new();
    let sets: &[(&str, &[&str])] = &[
        ("t", &[]),
        ("c", &["-c"]),
        ("a4096", &["-a", "4096"]),
        ("a65536c", &["-a", "65536", "-c"]),
    ];
    for list in corpus::lists() {
        for (tag, extra) in sets {
            let mut cmd = support::composer();
            cmd.args(list.composer_args("gen-init-cpio"))
                .arg("-t")
                .arg(corpus::MTIME.to_string())
                .args(*extra)
                .arg(&list.path);
            corpus::apply_env(&mut cmd, fixtures);
            let bytes = output(&mut cmd);
            got.insert(
                format!("lists:{}:gen-init-cpio:{tag}", list.name),
                (md5_hex(&bytes), None),
            );
        }
        for (tag, extra) in [
            ("readers4096", ["--align-mode", "readers", "-a", "4096"]),
            (
                "kernel65536",
                ["--align-mode", "kernel-only", "-a", "65536"],
            ),
        ] {
            let out = dir.join(format!("{}.{tag}.img", list.name));
            let mut cmd = support::composer();
            cmd.arg("build")
                .args(&list.composer_args("build")[1..])
                .arg("--list")
                .arg(&list.path)
                .arg("-t")
                .arg(corpus::MTIME.to_string())
                .args(extra)
                .arg("--no-sync")
                .arg("-o")
                .arg(&out);
            corpus::apply_env(&mut cmd, fixtures);
            support::run_ok(&mut cmd);
            got.insert(
                format!("lists:{}:build:{tag}", list.name),
                (md5_hex(&fs::read(&out).unwrap()), None),
            );
        }
    }
    check("lists", got);
}

/// Deterministic, compressible bytes.
fn content(seed: u64, size: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..size)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if i % 3 == 0 {
                b'a' + (x % 7) as u8
            } else {
                b"golden data "[(x % 12) as usize]
            }
        })
        .collect()
}

fn put(path: &Path, data: &[u8], mtime: u64) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, data).unwrap();
    set_mtime(path, mtime);
}

fn set_mtime(path: &Path, mtime: u64) {
    fs::File::open(path)
        .unwrap()
        .set_modified(UNIX_EPOCH + Duration::from_secs(mtime))
        .unwrap();
}

fn xz(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let opts = composer::compress::EncodeOptions {
        method: composer::compress::Compression::Xz,
        level: Some(1),
        threads: 1,
    };
    composer::compress::encode(&opts, &mut &data[..], &mut out).unwrap();
    out
}

/// A fake root with every kind of thing the manifests below take, every mtime set.
fn fake_root(root: &Path) {
    let mut t = 1_600_000_000;
    let mut next = || {
        t += 1000;
        t
    };
    for (i, size) in [
        0usize, 1, 3, 4, 5, 4095, 4096, 4097, 8191, 65535, 65536, 65537, 200_000,
    ]
    .iter()
    .enumerate()
    {
        put(
            &root.join(format!("data/sizes/f{size}")),
            &content(i as u64, *size),
            next(),
        );
    }
    put(
        &root.join("data/deep/a/b/c/d/leaf"),
        &content(40, 5000),
        next(),
    );
    put(
        &root.join("data/deep/a/b/other"),
        &content(41, 70_000),
        next(),
    );
    put(&root.join("data/links/target"), &content(42, 9000), next());
    fs::hard_link(
        root.join("data/links/target"),
        root.join("data/links/second"),
    )
    .unwrap();
    for (target, link) in [
        ("target", "data/links/soft"),
        ("../sizes/f4097", "data/links/up"),
    ] {
        symlink(target, root.join(link)).unwrap();
        let t = rustix::fs::Timespec {
            tv_sec: next() as i64,
            tv_nsec: 0,
        };
        let times = rustix::fs::Timestamps {
            last_access: t,
            last_modification: t,
        };
        rustix::fs::utimensat(
            rustix::fs::CWD,
            root.join(link),
            &times,
            rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
        )
        .unwrap();
    }
    put(&root.join("data/skip.orig"), b"left out", next());
    put(&root.join("usr/bin/tool"), &content(50, 30_000), next());
    put(
        &root.join("usr/lib/libx.so.1"),
        &content(51, 120_000),
        next(),
    );
    put(&root.join("usr/lib/liby.so.2"), &content(52, 2000), next());
    put(&root.join("etc/conf"), b"key=value\n", next());
    let fw = root.join("usr/lib/firmware");
    put(&fw.join("intel-ucode/06-8e-09"), b"INTEL-8e-09\n", next());
    put(&fw.join("intel-ucode/06-9e-0a"), b"INTEL-9e-0a\n", next());
    put(
        &fw.join("amd-ucode/microcode_amd.bin"),
        b"AMD-fam10\n",
        next(),
    );
    put(
        &fw.join("amd-ucode/microcode_amd_fam17h.bin.xz"),
        &xz(b"AMD-fam17\n"),
        next(),
    );
    put(
        &fw.join("blob/big.bin.xz"),
        &xz(&content(60, 100_000)),
        next(),
    );
    put(
        &root.join("etc/composer/acpi/ssdt1.aml"),
        b"SSDT-one",
        next(),
    );
    put(
        &root.join("etc/composer/acpi/dsdt.aml"),
        b"DSDT-table",
        next(),
    );
    // Directories last, so that creating their content does not move their mtimes.
    let mut dirs: Vec<PathBuf> = walkdir::WalkDir::new(root)
        .into_iter()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().is_dir())
        .map(|e| e.into_path())
        .collect();
    dirs.sort();
    for d in dirs.iter().rev() {
        set_mtime(d, next());
    }
}

const BODY: &str = r#"root = "root"

[[symlink]]
path = "/bin"
target = "usr/bin"

[[symlink]]
path = "/lib"
target = "usr/lib"

[[tree]]
src = "/data"
exclude = ["**/*.orig"]

[[glob]]
patterns = ["/usr/lib/*.so.*", "/usr/bin/tool"]

[[file]]
src = "/etc/conf"
dst = "/etc/conf"
mode = "0600"
uid = 7
gid = 8

[[file]]
src = "/data/sizes/f65537"
dst = "/opt/never"
align = "none"

[[file]]
src = "/data/sizes/f8191"
dst = "/opt/own"
align = 16384

[[hardlink]]
path = "/etc/conf.link"
target = "/etc/conf"

[[dir]]
path = "/proc"
mode = "0555"

[[node]]
path = "/dev/console"
type = "char"
major = 5
minor = 1
mode = "0600"

[[node]]
path = "/dev/sda"
type = "block"
major = 8
minor = 0

[[pipe]]
path = "/run/fifo"

[[socket]]
path = "/run/sock"
"#;

fn manifest_cases() -> Vec<(&'static str, String, &'static [&'static str])> {
    let with = |tail: &str| format!("{BODY}\n{tail}");
    let mut v: Vec<(&'static str, String, &'static [&'static str])> = vec![
        ("plain", BODY.to_string(), &[]),
        ("readers4096", with("[defaults]\nalign = 4096\n"), &[]),
        ("readers65536", with("[defaults]\nalign = 65536\n"), &[]),
        (
            "kernel-only65536",
            with("[defaults]\nalign = 65536\n[image]\nalign_mode = \"kernel-only\"\n"),
            &[],
        ),
        (
            "gen-init-cpio4096",
            with("[defaults]\nalign = 4096\n[image]\nalign_mode = \"gen-init-cpio\"\n"),
            &[],
        ),
        ("crc4096", with("[defaults]\nalign = 4096\n"), &["-c"]),
        ("cli-a512", BODY.to_string(), &["-a", "512"]),
        (
            "manifest-order",
            with("[image]\norder = \"manifest\"\n"),
            &[],
        ),
        (
            "modes",
            with("[defaults]\nfile_mode = \"0640\"\ndir_mode = \"0700\"\nuid = 3\ngid = 4\n"),
            &[],
        ),
    ];
    for codec in ["gzip", "zstd", "xz", "lzma", "bzip2", "lz4"] {
        let text = with(&format!(
            "[defaults]\nalign = 4096\n\n[early]\nmicrocode = true\nacpi = true\n\n\
             [[segment]]\nname = \"firmware\"\npaths = [\"**/*.xz\", \"/usr/lib/*.so.*\"]\n\n\
             [[segment]]\nname = \"main\"\ncompression = \"{codec}\"\n\n\
             [[segment]]\nname = \"late\"\ncompression = \"zstd\"\nlevel = 3\npaths = [\"/etc/conf*\"]\n"
        ));
        let name: &'static str = Box::leak(format!("segments-{codec}").into_boxed_str());
        v.push((name, text, &[]));
    }
    v
}

#[test]
fn manifest_archives_are_unchanged() {
    let dir = Scratch::new("golden-manifests");
    fake_root(&dir.join("root"));
    let mut got = BTreeMap::new();
    for (name, text, extra) in manifest_cases() {
        let m = dir.join(format!("{name}.toml"));
        fs::write(&m, &text).unwrap();
        for (tag, sde) in [("sde", Some(SDE)), ("source", None)] {
            let out = dir.join(format!("{name}.{tag}.img"));
            let mut cmd = support::composer();
            cmd.arg("build")
                .arg(&m)
                .args(extra)
                .arg("--no-sync")
                .arg("-o")
                .arg(&out);
            match sde {
                Some(s) => cmd.env("SOURCE_DATE_EPOCH", s),
                None => cmd.env_remove("SOURCE_DATE_EPOCH"),
            };
            support::run_ok(&mut cmd);
            got.insert(
                format!("manifests:{name}:{tag}"),
                (md5_hex(&fs::read(&out).unwrap()), None),
            );
        }
        if !text.contains("[[segment]]") {
            let mut cmd = support::composer();
            cmd.env("SOURCE_DATE_EPOCH", SDE).arg("export-list").arg(&m);
            let list = String::from_utf8(output(&mut cmd)).unwrap();
            // The list names sources by absolute path: take the scratch directory out.
            let list = list.replace(&dir.display().to_string(), "@DIR@");
            got.insert(
                format!("manifests:{name}:export-list"),
                (md5_hex(list.as_bytes()), None),
            );
        }
    }
    check("manifests", got);
}

fn examples() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            matches!(
                p.extension().and_then(|e| e.to_str()),
                Some("toml" | "yaml")
            )
        })
        .collect();
    v.sort();
    v
}

/// The name and MD5 of every regular file with data, sorted.
fn contents(bytes: &[u8]) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = support::parse_newc(bytes)
        .unwrap()
        .into_iter()
        .filter(|e| e.mode & 0o170000 == 0o100000 && e.filesize > 0)
        .map(|e| (e.name_str(), md5_hex(&e.data)))
        .collect();
    v.sort();
    v
}

fn fingerprint(contents: &[(String, String)]) -> String {
    let text: String = contents
        .iter()
        .map(|(n, m)| format!("{n}\t{m}\n"))
        .collect();
    md5_hex(text.as_bytes())
}

#[test]
fn example_archives_are_unchanged_where_the_host_is_the_same() {
    let dir = Scratch::new("golden-examples");
    let all = recorded();
    let mut got = BTreeMap::new();
    let mut notes = Vec::new();
    let mut problems = Vec::new();
    let mut skipped = Vec::new();
    for m in examples() {
        let name = m.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with("busybox") && support::busybox_static().is_none() {
            // busybox_static() has said SKIP (or failed in strict mode).
            skipped.extend([format!("examples:{name}"), format!("examples:{name}:names")]);
            continue;
        }
        // An example of the generic profile holds a kernel's module tree: its bytes
        // follow the kernel package (tests/manifest_examples.rs builds it).
        let text = fs::read_to_string(&m).unwrap();
        if text.contains("include = [\"generic\"]") || text.contains("include: [generic]") {
            continue;
        }
        let out = dir.join(format!("{name}.img"));
        let mut cmd = support::composer();
        cmd.env("SOURCE_DATE_EPOCH", SDE)
            .arg("build")
            .arg(&m)
            .arg("--kver")
            .arg("6.1.0-golden")
            .arg("--no-sync")
            .arg("-o")
            .arg(&out);
        support::run_ok(&mut cmd);
        let bytes = fs::read(&out).unwrap();
        let files = contents(&bytes);
        let fp = fingerprint(&files);
        let key = format!("examples:{name}");
        let md5 = md5_hex(&bytes);
        if let Some((want, Some(want_fp))) = all.get(&key) {
            if *want_fp == fp {
                if *want != md5 {
                    problems.push(format!(
                        "{key}: same files as recorded, but md5 {md5}, recorded {want}"
                    ));
                }
            } else {
                notes.push(format!(
                    "{key}: the host's files differ from the recorded ones; names checked only"
                ));
            }
        }
        got.insert(key, (md5, Some(fp)));
        // Names are checked whatever the host: the same entries must be there.
        let names_key = format!("examples:{name}:names");
        let mut names: Vec<String> = support::parse_newc(&bytes)
            .unwrap()
            .iter()
            .map(|e| e.name_str())
            .collect();
        names.sort();
        got.insert(names_key, (md5_hex(names.join("\n").as_bytes()), None));
    }
    for n in &notes {
        eprintln!("note: {n}");
    }
    if !recording() {
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    }
    // Names (and, on the recorded host, everything) through the common check; the
    // md5 of a host-dependent example is compared above, where it means something.
    let comparable: BTreeMap<String, (String, Option<String>)> = got
        .iter()
        .map(|(k, v)| {
            if k.ends_with(":names") || recording() {
                (k.clone(), v.clone())
            } else {
                (k.clone(), all.get(k).cloned().unwrap_or_else(|| v.clone()))
            }
        })
        .collect();
    check_except("examples", comparable, &skipped);
}

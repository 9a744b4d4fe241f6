//! `composer inspect` reads what other tools write: GNU cpio, bsdtar, 3cpio (its own
//! multi-segment output included), the kernel's gen_init_cpio and composer itself with
//! padded (aligned) names; each compression the kernel accepts, made by the external
//! tools, after an uncompressed early segment; names that are not UTF-8.
//!
//! The expected entries come from the tests' own newc parser (`support::parse_newc`)
//! run on the uncompressed archive, not from composer.

use crate::support;

use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use support::{composer, require_tool, run, run_ok, Scratch};

/// A small tree: dirs, files (one of 100 KB), a symlink, a hardlink pair and, when
/// `non_utf8`, a name with a 0xff byte.
fn tree(root: &Path, non_utf8: bool) {
    fs::create_dir_all(root.join("bin")).unwrap();
    fs::create_dir_all(root.join("etc/sub")).unwrap();
    fs::write(root.join("bin/tool"), b"#!/bin/sh\necho hi\n").unwrap();
    fs::write(root.join("etc/big"), vec![b'z'; 100_000]).unwrap();
    fs::write(root.join("etc/sub/empty"), b"").unwrap();
    std::os::unix::fs::symlink("../bin/tool", root.join("etc/link")).unwrap();
    fs::hard_link(root.join("bin/tool"), root.join("etc/hard")).unwrap();
    if non_utf8 {
        let name = std::ffi::OsStr::from_bytes(b"etc/n\xffme");
        fs::write(root.join(name), b"x").unwrap();
    }
}

/// The relative paths of everything under `root`, parents first.
fn paths(root: &Path) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    fn walk(dir: &Path, prefix: &[u8], out: &mut Vec<Vec<u8>>) {
        let mut names: Vec<_> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        for n in names {
            let mut p = prefix.to_vec();
            if !p.is_empty() {
                p.push(b'/');
            }
            p.extend_from_slice(n.as_bytes());
            out.push(p.clone());
            let full = dir.join(&n);
            if full.symlink_metadata().unwrap().is_dir() {
                walk(&full, &p, out);
            }
        }
    }
    walk(root, b"", &mut out);
    out
}

fn pipe_in(cmd: &mut Command, input: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    child.stdin.take().unwrap().write_all(input).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// Escapes a name as composer's listings do.
fn escaped(name: &[u8]) -> String {
    let mut out = String::new();
    for chunk in name.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                c if c.is_control() => out.push_str(&format!("\\x{:02x}", c as u32)),
                c => out.push(c),
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

/// What an independent parser finds in an uncompressed archive (trailer left out).
fn expected_names(archive: &[u8]) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = archive;
    let mut base = 0;
    // Several archives may follow each other, with NULs between.
    while !rest.is_empty() {
        let entries = support::parse_newc(rest).expect("independent parser");
        let last = entries.last().unwrap();
        let end = (last.data_offset + last.data.len()).next_multiple_of(4);
        names.extend(
            entries
                .iter()
                .filter(|e| e.name != b"TRAILER!!!")
                .map(|e| escaped(&e.name)),
        );
        base += end;
        while base < archive.len() && archive[base] == 0 {
            base += 1;
        }
        rest = &archive[base..];
    }
    names
}

fn inspect(img: &Path) -> Vec<String> {
    let out = run_ok(composer().arg("inspect").arg(img));
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn check_same(img: &Path, archive: &[u8], tool: &str) {
    let want = expected_names(archive);
    assert!(want.len() >= 8, "{tool}: too few entries: {want:?}");
    assert_eq!(inspect(img), want, "{tool}");
    // The long listing has one line per entry, with the symlink target.
    let long = run_ok(composer().args(["inspect", "--long"]).arg(img)).stdout;
    let long = String::from_utf8(long).unwrap();
    assert_eq!(long.lines().count(), want.len(), "{tool}");
    assert!(
        long.lines()
            .any(|l| l.starts_with('l') && l.ends_with("etc/link -> ../bin/tool")),
        "{tool}:\n{long}"
    );
    assert!(
        long.lines()
            .any(|l| l.starts_with("-rw") && l.contains(" 100000 ") && l.ends_with("etc/big")),
        "{tool}:\n{long}"
    );
}

fn save(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    fs::write(&p, bytes).unwrap();
    p
}

fn list_for_stdin(root: &Path) -> Vec<u8> {
    let mut list = Vec::new();
    for p in paths(root) {
        list.extend_from_slice(&p);
        list.push(b'\n');
    }
    list
}

#[test]
fn reads_gnu_cpio() {
    let Some(cpio) = require_tool("cpio", "cpio") else {
        return;
    };
    let s = Scratch::new("inspect-gnu");
    let root = s.join("root");
    tree(&root, true);
    let bytes = pipe_in(
        Command::new(cpio)
            .args(["-o", "-H", "newc", "--quiet"])
            .current_dir(&root),
        &list_for_stdin(&root),
    );
    let img = save(&s, "gnu.cpio", &bytes);
    check_same(&img, &bytes, "GNU cpio");
    assert!(inspect(&img).contains(&"etc/n\\xffme".to_string()));
}

#[test]
fn reads_bsdtar() {
    let Some(bsdtar) = require_tool("bsdtar", "libarchive-tools") else {
        return;
    };
    let s = Scratch::new("inspect-bsdtar");
    let root = s.join("root");
    tree(&root, true);
    let bytes = pipe_in(
        Command::new(bsdtar)
            .args(["--format", "newc", "-n", "-cf", "-", "-T", "-"])
            .current_dir(&root),
        &list_for_stdin(&root),
    );
    let img = save(&s, "bsd.cpio", &bytes);
    check_same(&img, &bytes, "bsdtar");
}

#[test]
fn reads_3cpio_including_its_segments() {
    let Some(three) = require_tool("3cpio", "3cpio") else {
        return;
    };
    let s = Scratch::new("inspect-3cpio");
    let root = s.join("root");
    // 3cpio refuses names that are not UTF-8.
    tree(&root, false);
    let manifest = list_for_stdin(&root);
    let out = s.join("3.cpio");
    pipe_in(
        Command::new(&three)
            .arg("-c")
            .arg("-C")
            .arg(&root)
            .arg(&out),
        &manifest,
    );
    let bytes = fs::read(&out).unwrap();
    check_same(&out, &bytes, "3cpio");

    // Two segments: an uncompressed one and a zstd one, as 3cpio writes them.
    if require_tool("zstd", "zstd").is_none() {
        return;
    }
    let mut two = b"#cpio\nbin\nbin/tool\n#cpio: zstd -3\n".to_vec();
    for p in paths(&root).into_iter().filter(|p| p.starts_with(b"etc")) {
        two.extend_from_slice(&p);
        two.push(b'\n');
    }
    let img = s.join("two.img");
    pipe_in(
        Command::new(&three)
            .arg("-c")
            .arg("-C")
            .arg(&root)
            .arg(&img),
        &two,
    );
    let seg = run_ok(composer().args(["inspect", "--segments"]).arg(&img)).stdout;
    let seg = String::from_utf8(seg).unwrap();
    let kinds: Vec<&str> = seg
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().nth(3).unwrap())
        .collect();
    assert_eq!(kinds, ["none", "zstd"], "{seg}");
    let names = inspect(&img);
    assert_eq!(names.len(), 2 + 6, "{names:?}");
    assert!(names.contains(&"etc/big".to_string()));
}

#[test]
fn reads_the_kernels_gen_init_cpio() {
    let Some(gen) = support::kernel_gen_init_cpio() else {
        return;
    };
    let s = Scratch::new("inspect-gen");
    let root = s.join("root");
    tree(&root, false);
    let r = root.display();
    let list = format!(
        "dir /bin 755 0 0\nfile /bin/tool {r}/bin/tool 755 0 0\ndir /etc 755 0 0\n\
         file /etc/big {r}/etc/big 644 0 0\ndir /etc/sub 755 0 0\n\
         file /etc/sub/empty {r}/etc/sub/empty 644 0 0\nslink /etc/link ../bin/tool 777 0 0\n\
         file /etc/hard {r}/bin/tool 755 0 0 /etc/hard2\nnod /dev-console 600 0 0 c 5 1\n\
         pipe /fifo 644 0 0\nsock /sock 644 0 0\n"
    );
    let list_path = save(&s, "list", list.as_bytes());
    let bytes = run_ok(Command::new(gen).arg("-t").arg("0").arg(&list_path)).stdout;
    let img = save(&s, "gen.cpio", &bytes);
    check_same(&img, &bytes, "gen_init_cpio");
    let long = run_ok(composer().args(["inspect", "-l"]).arg(&img)).stdout;
    let long = String::from_utf8(long).unwrap();
    assert!(
        long.lines().any(|l| l.starts_with("crw-------")
            && l.contains(" 5, 1 1970-01-01 00:00:00 ")
            && l.ends_with(" dev-console")),
        "{long}"
    );
}

#[test]
fn reads_composers_padded_names() {
    let s = Scratch::new("inspect-padded");
    let root = s.join("root");
    tree(&root, true);
    let mut list = b"dir /bin 755 0 0\ndir /etc 755 0 0\ndir /etc/sub 755 0 0\n".to_vec();
    for (name, src) in [
        ("/bin/tool", "bin/tool"),
        ("/etc/big", "etc/big"),
        ("/etc/sub/empty", "etc/sub/empty"),
    ] {
        list.extend_from_slice(
            format!("file {name} {} 644 0 0\n", root.join(src).display()).as_bytes(),
        );
    }
    list.extend_from_slice(b"slink /etc/link ../bin/tool 777 0 0\n");
    list.extend_from_slice(
        format!(
            "file /etc/hard {} 755 0 0 /etc/hard2\n",
            root.join("bin/tool").display()
        )
        .as_bytes(),
    );
    list.extend_from_slice(b"file /etc/n\xffme ");
    list.extend_from_slice(format!("{} 644 0 0\n", root.join("etc/big").display()).as_bytes());
    let list_path = save(&s, "list", &list);
    let img = s.join("aligned.cpio");
    run_ok(
        composer()
            .args(["build", "-t", "0", "-a", "4096", "--list"])
            .arg(&list_path)
            .arg("-o")
            .arg(&img),
    );
    let bytes = fs::read(&img).unwrap();
    check_same(&img, &bytes, "composer -a 4096");
    let json: serde_json::Value =
        serde_json::from_slice(&run_ok(composer().args(["inspect", "--json"]).arg(&img)).stdout)
            .unwrap();
    let entries = json["segments"][0]["entries"].as_array().unwrap();
    let big: Vec<_> = entries.iter().filter(|e| e["size"] == 100_000).collect();
    assert_eq!(big.len(), 2);
    for e in big {
        assert_eq!(e["data_offset"].as_u64().unwrap() % 4096, 0, "{e}");
        assert!(e["namesize"].as_u64().unwrap() > e["name"].as_str().unwrap().len() as u64 + 1);
    }
}

/// Every method the kernel accepts and a crate decodes, made by the external tool,
/// after an uncompressed early segment.
#[test]
fn reads_every_compression_after_an_early_segment() {
    let Some(cpio) = require_tool("cpio", "cpio") else {
        return;
    };
    let s = Scratch::new("inspect-compressed");
    let root = s.join("root");
    tree(&root, true);
    let main = pipe_in(
        Command::new(cpio)
            .args(["-o", "-H", "newc", "--quiet"])
            .current_dir(&root),
        &list_for_stdin(&root),
    );
    let mut early = Vec::new();
    {
        // A minimal early archive: kernel/x86/microcode/GenuineIntel.bin.
        let dir = s.join("early");
        fs::create_dir_all(dir.join("kernel/x86/microcode")).unwrap();
        fs::write(dir.join("kernel/x86/microcode/GenuineIntel.bin"), b"ucode").unwrap();
        let list =
            b"kernel\nkernel/x86\nkernel/x86/microcode\nkernel/x86/microcode/GenuineIntel.bin\n";
        early.extend(pipe_in(
            Command::new(require_tool("cpio", "cpio").unwrap())
                .args(["-o", "-H", "newc", "--quiet"])
                .current_dir(&dir),
            list,
        ));
    }
    let tools: [(&str, &str, &[&str], &str); 6] = [
        ("gzip", "gzip", &["-9", "-n", "-c"], "gzip"),
        ("bzip2", "bzip2", &["-c"], "bzip2"),
        ("lzma", "xz-utils", &["-c"], "lzma"),
        ("xz", "xz-utils", &["--check=crc32", "-c"], "xz"),
        ("lz4", "lz4", &["-l", "-c"], "lz4"),
        ("zstd", "zstd", &["-q", "-19", "-c"], "zstd"),
    ];
    let mut want = expected_names(&early);
    want.extend(expected_names(&main));
    for (tool, package, args, method) in tools {
        let Some(exe) = require_tool(tool, package) else {
            continue;
        };
        let compressed = pipe_in(Command::new(exe).args(args), &main);
        let mut image = early.clone();
        image.extend_from_slice(&compressed);
        let img = save(&s, &format!("{method}.img"), &image);
        assert_eq!(inspect(&img), want, "{method}");
        let seg = run_ok(
            composer()
                .args(["inspect", "--segments", "--json"])
                .arg(&img),
        )
        .stdout;
        let seg: serde_json::Value = serde_json::from_slice(&seg).unwrap();
        let segs = seg["segments"].as_array().unwrap();
        assert_eq!(segs.len(), 2, "{method}: {seg}");
        assert_eq!(segs[0]["compression"], "none");
        assert_eq!(segs[1]["compression"], method);
        assert_eq!(segs[1]["offset"], early.len());
        assert_eq!(segs[1]["size"], main.len(), "{method}");
        assert_eq!(segs[1]["stored"], compressed.len(), "{method}");
        assert!(segs[1].get("entries").is_none());
        let v = run(composer().arg("verify").arg(&img));
        assert!(
            v.status.success(),
            "{method}: {}",
            String::from_utf8_lossy(&v.stdout)
        );
    }
}

#[test]
fn refuses_what_it_cannot_read_with_the_file_name() {
    let s = Scratch::new("inspect-errors");
    let missing = s.join("missing.img");
    let out = run(composer().arg("inspect").arg(&missing));
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing.img"));
    let junk = save(&s, "junk.img", b"this is not an initrd");
    let out = run(composer().arg("inspect").arg(&junk));
    assert!(!out.status.success());
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("junk.img: offset 0:") && err.contains("invalid magic"),
        "{err}"
    );
}

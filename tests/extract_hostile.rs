//! `composer extract IMAGE -C DIR` against hostile archives: each must fail with a
//! clear error naming the image and the offset, write nothing outside DIR, and leave
//! no DIR (nor a temporary directory) behind. And a friendly archive comes out as the
//! kernel would unpack it: modes, mtimes, hardlinks, symlinks, special files; device
//! nodes only with --devices as root.

use crate::craft;
use crate::support;

use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use craft::{dir, e, file, symlink, Craft, S_IFCHR, S_IFIFO, S_IFREG};
use support::{composer, run, Scratch};

/// Everything under `root` with its size and mode, to see that nothing changed.
fn snapshot(root: &Path) -> Vec<(PathBuf, u64, u32)> {
    let mut out = Vec::new();
    fn walk(p: &Path, out: &mut Vec<(PathBuf, u64, u32)>) {
        let m = fs::symlink_metadata(p).unwrap();
        out.push((p.to_path_buf(), m.len(), m.mode()));
        if m.is_dir() {
            let mut names: Vec<_> = fs::read_dir(p)
                .unwrap()
                .map(|e| e.unwrap().path())
                .collect();
            names.sort();
            for n in names {
                walk(&n, out);
            }
        }
    }
    walk(root, &mut out);
    out
}

struct Case {
    name: &'static str,
    archive: Vec<u8>,
    /// Words the error must contain.
    words: &'static str,
}

fn cases(outside: &Path) -> Vec<Case> {
    let out = outside.display().to_string();
    let abs_name = format!("{out}/evil");
    let mut huge = file("huge", b"");
    huge.namesize = Some(0xFFFF_FFF0);
    let mut past = file("past", b"tiny");
    past.filesize = Some(50_000_000);
    let mut unterminated = file("unterminated", b"");
    unterminated.no_nul = true;
    let mut badsum = file("badsum", b"payload");
    badsum.crc = true;
    badsum.check = Some(1);
    let mut first = file("first", b"");
    first.ino = 77;
    first.nlink = 2;
    let mut second = file("second", b"overwrite");
    second.ino = 77;
    second.nlink = 2;
    let gz_junk = [
        0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3, 0xde, 0xad, 0xbe, 0xef, 1, 2, 3,
    ];
    vec![
        Case {
            name: "dotdot",
            archive: Craft::new().add(file("../evil", b"x")).trailer().bytes(),
            words: "climbs out with `..`",
        },
        Case {
            name: "nested-dotdot",
            archive: Craft::new()
                .add(dir("a"))
                .add(file("a/../../evil", b"x"))
                .trailer()
                .bytes(),
            words: "climbs out with `..`",
        },
        Case {
            name: "absolute",
            archive: Craft::new().add(file(&abs_name, b"x")).trailer().bytes(),
            words: "is an absolute name",
        },
        Case {
            name: "symlink-then-file-through-it",
            archive: Craft::new()
                .add(symlink("link", &out))
                .add(file("link/evil", b"x"))
                .trailer()
                .bytes(),
            words: "through `link`, a symlink the archive created",
        },
        Case {
            name: "relative-symlink-escape",
            archive: Craft::new()
                .add(symlink("up", ".."))
                .add(file("up/evil", b"x"))
                .trailer()
                .bytes(),
            words: "through `up`, a symlink",
        },
        Case {
            name: "symlink-chain",
            archive: Craft::new()
                .add(symlink("b", &out))
                .add(symlink("a", "b"))
                .add(dir("a/sub"))
                .trailer()
                .bytes(),
            words: "through `a`, a symlink",
        },
        Case {
            name: "symlink-to-an-inside-dir",
            archive: Craft::new()
                .add(dir("d"))
                .add(symlink("s", "d"))
                .add(file("s/x", b"x"))
                .trailer()
                .bytes(),
            words: "through `s`, a symlink",
        },
        Case {
            name: "dir-replaced-by-symlink",
            archive: Craft::new()
                .add(dir("d"))
                .add(symlink("d", &out))
                .add(file("d/evil", b"x"))
                .trailer()
                .bytes(),
            words: "through `d`, a symlink",
        },
        Case {
            name: "hardlink-to-a-replaced-file",
            archive: Craft::new()
                .add(first)
                .add(symlink("first", &format!("{out}/target")))
                .add(second)
                .trailer()
                .bytes(),
            words: "hardlink of `first`, which is no longer that file",
        },
        Case {
            name: "huge-namesize",
            archive: Craft::new().add(huge).bytes(),
            words: "runs past the end",
        },
        Case {
            name: "size-past-eof",
            archive: Craft::new().add(past).bytes(),
            words: "runs past the end",
        },
        Case {
            name: "name-without-nul",
            archive: Craft::new().add(unterminated).trailer().bytes(),
            words: "malformed archive",
        },
        Case {
            name: "bad-checksum",
            archive: Craft::new().add(badsum).trailer().bytes(),
            words: "bad 070702 data checksum",
        },
        Case {
            name: "corrupt-gzip",
            archive: gz_junk.to_vec(),
            words: "decompressor failed",
        },
        Case {
            name: "file-named-dot",
            archive: Craft::new().add(file(".", b"x")).trailer().bytes(),
            words: "names the target directory itself",
        },
    ]
}

#[test]
fn hostile_archives_write_nothing_anywhere() {
    let s = Scratch::new("extract-hostile");
    let outside = s.join("outside");
    fs::create_dir(&outside).unwrap();
    fs::write(outside.join("target"), b"precious").unwrap();
    let work = s.join("work");
    fs::create_dir(&work).unwrap();
    let all = cases(&outside);
    assert!(all.len() >= 12);
    let before = snapshot(&s);
    for c in all {
        let img = s.join(format!("{}.img", c.name));
        fs::write(&img, &c.archive).unwrap();
        let dest = work.join(c.name);
        let out = run(composer().arg("extract").arg(&img).arg("-C").arg(&dest));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{}: extract succeeded", c.name);
        assert!(
            err.contains("composer: error:") && err.contains(c.words),
            "{}: expected `{}` in:\n{err}",
            c.name,
            c.words
        );
        assert!(
            err.contains(&format!("{}.img", c.name)),
            "{}: the error names the image:\n{err}",
            c.name
        );
        assert!(!dest.exists(), "{}: DIR was created", c.name);
        fs::remove_file(&img).unwrap();
        assert_eq!(snapshot(&s), before, "{}: something changed", c.name);
    }
}

#[test]
fn extracts_like_the_kernel_unpacks() {
    let s = Scratch::new("extract-friendly");
    let mut d = dir("etc");
    d.mode = 0o40750;
    d.mtime = 1_000_000;
    let mut setuid = e("bin-su", S_IFREG | 0o4755, b"#!/bin/sh\n");
    setuid.mtime = 2_000_000;
    let mut a = file("etc/a", b"");
    a.ino = 9;
    a.nlink = 2;
    let mut b = file("etc/b", b"shared content");
    b.ino = 9;
    b.nlink = 2;
    b.mtime = 3_000_000;
    let mut fifo = e("fifo", S_IFIFO | 0o640, b"");
    fifo.mtime = 4_000_000;
    let mut console = e("console", S_IFCHR | 0o600, b"");
    console.rdev = (5, 1);
    let mut skipped = file("long", b"");
    skipped.namesize = Some(5000);
    skipped.pad = 5000 - 5;
    let archive = Craft::new()
        .add(d)
        .add(setuid)
        .add(a)
        .add(b)
        .add(symlink("etc/link", "/etc/a"))
        .add(fifo)
        .add(console)
        .add(file("missing/parent", b"dropped"))
        .add(skipped)
        .trailer()
        .bytes();
    let img = s.join("good.img");
    fs::write(&img, archive).unwrap();

    let dest = s.join("out");
    let out = run(composer().arg("extract").arg(&img).arg("-C").arg(&dest));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("`console`: device node not created (use --devices"),
        "{err}"
    );
    assert!(
        err.contains("`missing/parent`: parent directory `missing`"),
        "{err}"
    );
    assert!(err.contains("namesize is over 4096"), "{err}");

    let m = fs::metadata(dest.join("etc")).unwrap();
    assert_eq!(m.permissions().mode() & 0o7777, 0o750);
    assert_eq!(m.mtime(), 1_000_000);
    let su = fs::metadata(dest.join("bin-su")).unwrap();
    assert_eq!(su.permissions().mode() & 0o7777, 0o4755);
    assert_eq!(su.mtime(), 2_000_000);
    let (ma, mb) = (
        fs::metadata(dest.join("etc/a")).unwrap(),
        fs::metadata(dest.join("etc/b")).unwrap(),
    );
    assert_eq!(ma.ino(), mb.ino(), "hardlinks kept");
    assert_eq!(ma.nlink(), 2);
    assert_eq!(fs::read(dest.join("etc/a")).unwrap(), b"shared content");
    assert_eq!(
        fs::read_link(dest.join("etc/link")).unwrap(),
        Path::new("/etc/a")
    );
    let f = fs::symlink_metadata(dest.join("fifo")).unwrap();
    assert!(f.file_type().is_fifo());
    assert_eq!(f.permissions().mode() & 0o777, 0o640);
    assert_eq!(f.mtime(), 4_000_000);
    assert!(!dest.join("console").exists());
    assert!(!dest.join("missing").exists());

    // An existing non-empty directory is refused; an empty one is used.
    let out = run(composer().arg("extract").arg(&img).arg("-C").arg(&dest));
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not empty"));
    let empty = s.join("empty");
    fs::create_dir(&empty).unwrap();
    let out = run(composer().arg("extract").arg(&img).arg("-C").arg(&empty));
    assert!(out.status.success());
    assert!(empty.join("etc/b").is_file());

    // Device nodes: only when asked, and only as root.
    let dev = s.join("dev");
    let out = run(composer()
        .args(["extract", "--devices"])
        .arg(&img)
        .arg("-C")
        .arg(&dev));
    if support::is_root() {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let c = fs::symlink_metadata(dev.join("console")).unwrap();
        assert!(c.file_type().is_char_device());
        assert_eq!(c.rdev(), (5 << 8) | 1);
        assert_eq!(c.uid(), 0);
    } else {
        assert!(!out.status.success());
        assert!(String::from_utf8_lossy(&out.stderr).contains("--devices needs root"));
        assert!(!dev.exists());
    }
}

#[test]
fn owners_are_applied_as_root() {
    if !support::require_root() {
        return;
    }
    let s = Scratch::new("extract-owners");
    let mut f = file("f", b"x");
    f.uid = 1234;
    f.gid = 5678;
    let mut l = symlink("l", "f");
    l.uid = 42;
    let img = s.join("o.img");
    fs::write(&img, Craft::new().add(f).add(l).trailer().bytes()).unwrap();
    let dest = s.join("out");
    let out = run(composer().arg("extract").arg(&img).arg("-C").arg(&dest));
    assert!(out.status.success());
    let m = fs::metadata(dest.join("f")).unwrap();
    assert_eq!((m.uid(), m.gid()), (1234, 5678));
    assert_eq!(fs::symlink_metadata(dest.join("l")).unwrap().uid(), 42);
}

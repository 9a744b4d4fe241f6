//! `composer diff A B`: entry by entry, across segments and compressions; exit 0 when
//! the images unpack to the same tree, non-zero with one line per difference otherwise.

use crate::craft;
use crate::support;

use std::fs;

use craft::{dir, e, file, symlink, Craft, S_IFREG};
use support::{composer, run, Scratch};

#[test]
fn reports_added_removed_content_mode_owner_target() {
    let s = Scratch::new("diff");
    let a = Craft::new()
        .add(dir("bin"))
        .add(file("bin/same", b"same"))
        .add(file("bin/content", b"old"))
        .add(e("bin/mode", S_IFREG | 0o644, b"m"))
        .add(file("bin/owner", b"o"))
        .add(symlink("bin/link", "same"))
        .add(file("gone", b""))
        .trailer()
        .bytes();
    let mut owner = file("bin/owner", b"o");
    owner.uid = 1000;
    let mut later = file("bin/same", b"same");
    later.mtime = 5;
    let b = Craft::new()
        .add(dir("bin"))
        .add(later)
        .add(file("bin/content", b"new!"))
        .add(e("bin/mode", S_IFREG | 0o755, b"m"))
        .add(owner)
        .add(symlink("bin/link", "content"))
        .add(dir("new"))
        .trailer()
        .bytes();
    let (pa, pb) = (s.join("a.img"), s.join("b.img"));
    fs::write(&pa, &a).unwrap();
    fs::write(&pb, &b).unwrap();
    let out = run(composer().arg("diff").arg(&pa).arg(&pb));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success());
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        [
            "~ bin/content: content (3 -> 4 bytes)",
            "~ bin/link: target same -> content",
            "~ bin/mode: mode 0644 -> 0755",
            "~ bin/owner: owner 0:0 -> 1000:0",
            "- file    gone",
            "+ dir     new",
        ]
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("differ in 6 entries"));
    let out = run(composer().args(["diff", "--mtime"]).arg(&pa).arg(&pb));
    assert!(String::from_utf8_lossy(&out.stdout).contains("~ bin/same: mtime 1700000000 -> 5"));

    // The same tree, written as two segments with the second compressed.
    let Some(gzip) = support::require_tool("gzip", "gzip") else {
        return;
    };
    let first = Craft::new()
        .add(dir("bin"))
        .add(file("bin/same", b"same"))
        .add(file("bin/content", b"old"))
        .trailer()
        .bytes();
    let second = Craft::new()
        .add(e("bin/mode", S_IFREG | 0o644, b"m"))
        .add(file("bin/owner", b"o"))
        .add(symlink("bin/link", "same"))
        .add(file("gone", b""))
        .trailer()
        .bytes();
    let second_path = s.join("second.cpio");
    fs::write(&second_path, &second).unwrap();
    let gz = support::run_ok(std::process::Command::new(gzip).arg("-c").arg(&second_path)).stdout;
    let mut split = first;
    split.extend_from_slice(&gz);
    let pc = s.join("c.img");
    fs::write(&pc, &split).unwrap();
    let out = run(composer().arg("diff").arg(&pa).arg(&pc));
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn refuses_broken_images_naming_them() {
    let s = Scratch::new("diff-broken");
    let good = s.join("good.img");
    fs::write(&good, Craft::new().add(file("f", b"x")).trailer().bytes()).unwrap();
    let bad = s.join("bad.img");
    fs::write(&bad, b"07070X").unwrap();
    let out = run(composer().arg("diff").arg(&good).arg(&bad));
    assert!(!out.status.success());
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.img: offset 0:"), "{err}");
}

//! `composer verify` and `composer inspect` against crafted archives: one for each case
//! of the kernel's own unpacker tests (init/initramfs_test.c: extract, fname_overrun,
//! data, csum, hardlink, many, fname_pad, fname_path_max, hdr_hex), plus the other
//! things the kernel drops or rejects silently. Each test states what the kernel does
//! with the archive and checks that both commands agree with it: accepted archives
//! verify clean and list every entry; dropped entries are reported with their offset;
//! rejected archives fail with the kernel's words and the offset.

use crate::craft;
use crate::support;

use std::path::Path;
use std::process::Output;

use craft::{dir, e, file, symlink, Craft, S_IFCHR, S_IFREG};
use support::{composer, run, Scratch};

fn write(dir: &Scratch, name: &str, bytes: &[u8]) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

fn verify(img: &Path) -> Output {
    run(composer().arg("verify").arg(img))
}

fn inspect_json(img: &Path) -> serde_json::Value {
    let out = run(composer().args(["inspect", "--json"]).arg(img));
    assert!(
        out.status.success(),
        "inspect failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("inspect --json prints JSON")
}

fn entries(json: &serde_json::Value) -> Vec<serde_json::Value> {
    json["segments"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["entries"].as_array().unwrap().clone())
        .collect()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The archive is accepted and every entry kept: verify exits 0 and says ok.
fn assert_clean(img: &Path) {
    let out = verify(img);
    assert!(
        out.status.success(),
        "verify should pass:\n{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert!(text(&out.stdout).contains(": ok:"), "{}", text(&out.stdout));
}

/// verify fails; stdout names the image and the offset and contains `words`.
fn assert_problem(img: &Path, offset: &str, words: &str) -> String {
    let out = verify(img);
    let stdout = text(&out.stdout);
    assert!(!out.status.success(), "verify should fail:\n{stdout}");
    let line = format!("{}: {offset}", img.display());
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with(&line) && l.contains(words)),
        "expected a line starting `{line}` containing `{words}`:\n{stdout}"
    );
    assert!(text(&out.stderr).contains("problem(s) found"));
    stdout
}

/// inspect refuses the archive with the kernel's words, the file and the offset,
/// and prints nothing on stdout.
fn assert_inspect_refuses(img: &Path, offset: &str, words: &str) {
    let out = run(composer().arg("inspect").arg(img));
    let stderr = text(&out.stderr);
    assert!(!out.status.success());
    assert!(out.stdout.is_empty(), "no partial listing");
    assert!(
        stderr.contains(&format!("{}: {offset}", img.display())) && stderr.contains(words),
        "{stderr}"
    );
}

#[test]
fn kunit_extract_keeps_owners_and_mtimes() {
    let s = Scratch::new("kunit-extract");
    let mut d = dir("dir");
    d.uid = 12;
    d.gid = 34;
    d.mtime = 56;
    let mut f = file("dir/file", b"");
    f.uid = 78;
    f.gid = 90;
    f.mtime = 1_234_567;
    let img = write(&s, "a.cpio", &Craft::new().add(d).add(f).trailer().bytes());
    assert_clean(&img);
    let list = entries(&inspect_json(&img));
    assert_eq!(list.len(), 2);
    assert_eq!(
        (&list[0]["uid"], &list[0]["gid"], &list[0]["mtime"]),
        (&12.into(), &34.into(), &56.into())
    );
    assert_eq!(list[1]["name"], "dir/file");
    assert_eq!(list[1]["mtime"], 1_234_567);
}

#[test]
fn kunit_fname_overrun_is_malformed() {
    let s = Scratch::new("kunit-overrun");
    let mut f = file("initramfs_test_fname_overrun", b"");
    f.no_nul = true;
    let img = write(&s, "a.cpio", &Craft::new().add(f).trailer().bytes());
    assert_problem(&img, "offset 0:", "\"malformed archive\"");
    assert_inspect_refuses(&img, "offset 0:", "malformed archive");
}

#[test]
fn kunit_data_is_read_back() {
    let s = Scratch::new("kunit-data");
    let body = b"ASDF".repeat(1000);
    let img = write(
        &s,
        "a.cpio",
        &Craft::new().add(file("f", &body)).trailer().bytes(),
    );
    assert_clean(&img);
    let list = entries(&inspect_json(&img));
    assert_eq!(list[0]["size"], 4000);
    let off = list[0]["data_offset"].as_u64().unwrap() as usize;
    assert_eq!(&std::fs::read(&img).unwrap()[off..off + 4000], &body[..]);
}

#[test]
fn kunit_csum_good_mixed_and_bad() {
    let s = Scratch::new("kunit-csum");
    let mut good = file("good", b"checksummed data");
    good.crc = true;
    let plain = file("plain", b"070701 data");
    let ok = write(
        &s,
        "ok.cpio",
        &Craft::new().add(good.clone()).add(plain).trailer().bytes(),
    );
    assert_clean(&ok);
    let mut bad = good;
    bad.name = b"bad".to_vec();
    bad.check = Some(0xdead);
    let img = write(&s, "bad.cpio", &Craft::new().add(bad).trailer().bytes());
    assert_problem(&img, "offset 0:", "bad data checksum");
}

#[test]
fn kunit_hardlink_with_data_on_the_second_is_fine() {
    let s = Scratch::new("kunit-hardlink");
    let mut a = file("initramfs_test_hardlink", b"");
    a.ino = 42;
    a.nlink = 2;
    let mut b = file("initramfs_test_hardlink_link", b"ASDF");
    b.ino = 42;
    b.nlink = 2;
    let img = write(&s, "a.cpio", &Craft::new().add(a).add(b).trailer().bytes());
    assert_clean(&img);
    assert_eq!(entries(&inspect_json(&img)).len(), 2);
}

#[test]
fn kunit_many_files() {
    let s = Scratch::new("kunit-many");
    let mut c = Craft::new();
    for i in 0..1000 {
        c = c.add(file(
            &format!("initramfs_test_many-{i}"),
            i.to_string().as_bytes(),
        ));
    }
    let img = write(&s, "a.cpio", &c.trailer().bytes());
    assert_clean(&img);
    let out = run(composer().arg("inspect").arg(&img));
    assert!(out.status.success());
    let lines: Vec<_> = text(&out.stdout).lines().map(str::to_owned).collect();
    assert_eq!(lines.len(), 1000);
    assert_eq!(lines[999], "initramfs_test_many-999");
}

#[test]
fn kunit_fname_pad_puts_data_at_4096() {
    let s = Scratch::new("kunit-pad");
    let mut f = file("initramfs_test_fname_pad", b"ASDF");
    f.pad = 4096 - 110 - f.name.len() - 1;
    let img = write(&s, "a.cpio", &Craft::new().add(f).trailer().bytes());
    assert_clean(&img);
    let list = entries(&inspect_json(&img));
    assert_eq!(list[0]["name"], "initramfs_test_fname_pad");
    assert_eq!(list[0]["namesize"], 4096 - 110);
    assert_eq!(list[0]["data_offset"], 4096);
}

#[test]
fn kunit_fname_path_max_4097_skipped_4096_kept() {
    let s = Scratch::new("kunit-pathmax");
    let long_dir = "a".repeat(4000);
    let name_4097 = format!("{long_dir}/{}", "b".repeat(4097 - 4001 - 1));
    let name_4096 = format!("{long_dir}/{}", "c".repeat(4096 - 4001 - 1));
    let img = write(
        &s,
        "a.cpio",
        &Craft::new()
            .add(dir(&long_dir))
            .add(file(&name_4097, b""))
            .add(file(&name_4096, b""))
            .trailer()
            .bytes(),
    );
    let second: usize = 4000 + 1 + 110;
    let second = second.next_multiple_of(4);
    let out = assert_problem(&img, &format!("offset {second}:"), "namesize is over 4096");
    assert_eq!(out.lines().count(), 1, "only the 4097 entry: {out}");
    let list = entries(&inspect_json(&img));
    assert_eq!(list.len(), 3);
    assert_eq!(list[1]["skip"], "long-namesize");
    assert!(list[2].get("skip").is_none(), "4096 is kept: {}", list[2]);
}

#[test]
fn kunit_hdr_hex_0x_is_refused() {
    let s = Scratch::new("kunit-hex");
    let mut bytes = Craft::new().add(file("f", b"x")).trailer().bytes();
    // filesize field: 0x000001
    bytes[6 + 6 * 8..6 + 7 * 8].copy_from_slice(b"0x000001");
    let img = write(&s, "a.cpio", &bytes);
    assert_problem(&img, "offset 54:", "damaged header");
    assert_inspect_refuses(&img, "offset 54:", "not 8 hex digits");
}

#[test]
fn silent_drops_are_reported_with_offsets() {
    let s = Scratch::new("drops");
    let mut zero = file("", b"");
    zero.no_nul = true;
    let mut pipe = e("fifo", craft::S_IFIFO | 0o644, b"data");
    pipe.nlink = 1;
    let img = write(
        &s,
        "a.cpio",
        &Craft::new()
            .add(dir("etc"))
            .add(file("sbin/init", b"#!/bin/sh\n"))
            .add(zero)
            .add(pipe)
            .add(e("dev/console", S_IFCHR | 0o600, b""))
            .trailer()
            .bytes(),
    );
    let out = assert_problem(
        &img,
        "offset 116:",
        "parent directory `sbin` does not exist",
    );
    assert!(out.contains("offset 248: ``: namesize is 0"), "{out}");
    assert!(
        out.contains("`fifo`: a non-regular entry carries data"),
        "{out}"
    );
    assert!(
        out.contains("`dev/console`: its parent directory `dev`"),
        "{out}"
    );
    assert_eq!(out.lines().count(), 4, "{out}");
}

#[test]
fn unrelated_entries_sharing_an_inode() {
    let s = Scratch::new("inode");
    let mut a = file("a", b"one");
    a.ino = 7;
    a.nlink = 2;
    let mut b = file("b", b"two");
    b.ino = 7;
    b.nlink = 2;
    let img = write(&s, "a.cpio", &Craft::new().add(a).add(b).trailer().bytes());
    assert_problem(&img, "offset 116:", "shares inode 7");
}

#[test]
fn junk_after_a_compressed_segment_and_data_past_the_end() {
    let Some(gzip) = support::require_tool("gzip", "gzip") else {
        return;
    };
    let s = Scratch::new("junk");
    let early = Craft::new().add(file("early", b"e")).trailer().bytes();
    let main = write(
        &s,
        "main.cpio",
        &Craft::new().add(file("main", b"m")).trailer().bytes(),
    );
    let gz = run(std::process::Command::new(gzip).arg("-c").arg(&main)).stdout;
    let mut bytes = early.clone();
    bytes.extend_from_slice(&gz);
    bytes.extend_from_slice(b"JUNK");
    let img = write(&s, "a.img", &bytes);
    let at = format!("offset {}:", early.len() + gz.len());
    assert_problem(&img, &at, "invalid magic at start of compressed archive");
    assert_inspect_refuses(&img, &at, "invalid magic");

    let mut f = file("big", b"short");
    f.filesize = Some(1 << 20);
    let img = write(&s, "b.cpio", &Craft::new().add(f).bytes());
    assert_problem(&img, "offset 0:", "runs past the end");
}

#[test]
fn symlinks_and_merged_usr_parents_are_followed_like_the_kernel() {
    let s = Scratch::new("symlinks");
    let img = write(
        &s,
        "a.cpio",
        &Craft::new()
            .add(dir("usr"))
            .add(dir("usr/bin"))
            .add(symlink("bin", "usr/bin"))
            .add(file("bin/sh", b"x"))
            .add(e("regular", S_IFREG | 0o755, b""))
            .trailer()
            .bytes(),
    );
    assert_clean(&img);
}

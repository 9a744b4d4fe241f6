//! Acceptance test of the alignment planner in a real kernel: Debian's kernel under qemu
//! boots a readers-mode archive (padded names, repeated directory entries) and a
//! kernel-only archive (NUL runs between entries), both built from a manifest at 64 KiB
//! alignment, and /init (a busybox shell script) checks the md5 and size of every file
//! against values computed here, then prints a marker the test looks for.

use crate::md5;
use crate::support;
use md5::md5_hex;

use crate::newc;

use std::fmt::Write as _;
use std::fs;
use std::path::Path;
use std::time::Duration;

use support::{DebianKernel, Scratch};

const ALIGN: usize = 65536;
const MARKER_OK: &str = "PLANNER-BOOT-OK";
const MARKER_FAIL: &str = "PLANNER-BOOT-FAIL";

// ---------------------------------------------------------------------------------------
// MD5 (RFC 1321), so that the expected values do not come from the guest's own tool
// ---------------------------------------------------------------------------------------

// ---------------------------------------------------------------------------------------
// The image
// ---------------------------------------------------------------------------------------

/// Deterministic, non-repeating content: a misplaced block changes the checksum.
fn content(seed: u64, size: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..size)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// (path in the image, size): files larger than 64 KiB to align, and small ones (one
/// exactly 64 KiB, which is not eligible) to fill the gaps, some with long names.
fn payload() -> Vec<(String, usize)> {
    let long = "n".repeat(180);
    vec![
        ("/data/big-just-over".into(), ALIGN + 1),
        ("/data/big-100k".into(), 100_000),
        ("/data/big-three-blocks-and-3".into(), 3 * ALIGN + 3),
        (format!("/data/sub/{long}-big"), 300_001),
        ("/data/sub/deeper/big-1m".into(), 1_000_000),
        ("/data/sub/deeper/big-odd".into(), 2 * ALIGN - 4),
        ("/data/exactly-64k".into(), ALIGN),
        ("/data/small-1".into(), 1),
        ("/data/small-100".into(), 100),
        ("/data/small-4095".into(), 4095),
        ("/data/sub/small-5000".into(), 5000),
        (format!("/data/sub/{long}-small"), 20_000),
        ("/data/sub/deeper/small-40000".into(), 40_000),
        ("/data/empty".into(), 0),
    ]
}

struct Image {
    /// (path, md5, size) of every file /init checks.
    files: Vec<(String, String, usize)>,
    /// The source of every payload file, beside the manifest.
    sources: Vec<(String, Vec<u8>)>,
}

/// Writes the payload, /init and a manifest for `mode` into `dir`; returns the manifest.
fn write_image(dir: &Path, busybox: &Path, mode: &str) -> (std::path::PathBuf, Image) {
    let mut image = Image {
        files: Vec::new(),
        sources: Vec::new(),
    };
    let bb = fs::read(busybox).unwrap();
    image
        .files
        .push(("/bin/busybox".into(), md5_hex(&bb), bb.len()));
    let mut manifest = format!(
        "# planner boot test, {mode} mode\n\
         [defaults]\nalign = {ALIGN}\nmtime = 0\n\
         [image]\nalign_mode = {}\n\n\
         [[file]]\nsrc = {}\ndst = \"/bin/busybox\"\nmode = \"0755\"\n\n\
         [[symlink]]\npath = \"/bin/sh\"\ntarget = \"busybox\"\n\n\
         [[file]]\nsrc = \"init\"\ndst = \"/init\"\nmode = \"0755\"\n\n\
         [[dir]]\npath = \"/proc\"\nmode = \"0555\"\n\n\
         [[dir]]\npath = \"/dev\"\n\n\
         [[node]]\npath = \"/dev/console\"\ntype = \"char\"\nmajor = 5\nminor = 1\nmode = \"0600\"\n",
        support::toml_str(mode),
        support::toml_str(busybox.to_str().unwrap()),
    );
    fs::create_dir_all(dir.join("payload")).unwrap();
    for (i, (path, size)) in payload().into_iter().enumerate() {
        let data = content(i as u64 + 1, size);
        let src = format!("payload/f{i}");
        fs::write(dir.join(&src), &data).unwrap();
        let _ = write!(
            manifest,
            "\n[[file]]\nsrc = {}\ndst = {}\nmode = \"0644\"\n",
            support::toml_str(&src),
            support::toml_str(&path)
        );
        image.files.push((path.clone(), md5_hex(&data), size));
        image.sources.push((path, data));
    }

    let mut init = format!(
        r#"#!/bin/busybox sh
bb=/bin/busybox
fail=0
n=0
check() {{
    got="$($bb md5sum "$1" 2>&1 | $bb cut -d' ' -f1) $($bb stat -c %s "$1" 2>&1)"
    if [ "$got" = "$2 $3" ]; then
        n=$((n + 1))
    else
        echo "{MARKER_FAIL}: $1: got '$got', expected '$2 $3'"
        fail=1
    fi
}}
echo "planner boot test ({mode}): /init running"
"#
    );
    for (path, md5, size) in &image.files {
        let _ = writeln!(init, "check '{path}' {md5} {size}");
    }
    let data_files = payload().len();
    let _ = write!(
        init,
        r#"count=$($bb find /data -type f | $bb wc -l)
if [ "$count" != {data_files} ]; then
    echo "{MARKER_FAIL}: $count files under /data, expected {data_files}"
    fail=1
fi
if [ "$fail" = 0 ]; then
    echo "{MARKER_OK} {mode} $n files"
fi
$bb poweroff -f
"#
    );
    fs::write(dir.join("init"), init).unwrap();
    let path = dir.join(format!("{mode}.toml"));
    fs::write(&path, manifest).unwrap();
    (path, image)
}

/// Host-side checks of the archive before booting it: the plan has no misses, the data
/// of every file larger than 64 KiB is aligned and equals its source. Returns the
/// number of records the plan repeats as fillers.
fn check_on_host(mode: &str, manifest: &Path, archive: &Path, image: &Image) -> usize {
    let out = support::run_ok(support::composer().arg("plan").arg(manifest).arg("--json"));
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let summary = &plan["summary"];
    println!("{mode}: plan summary {summary}");
    assert_eq!(summary["missed"], 0, "{mode}: misses in {summary}");
    assert_eq!(
        summary["aligned"].as_u64().unwrap() as usize,
        image.files.iter().filter(|f| f.2 > ALIGN).count(),
        "{mode}: every file larger than {ALIGN} is aligned"
    );
    let buf = fs::read(archive).unwrap();
    assert_eq!(summary["archive_bytes"].as_u64(), Some(buf.len() as u64));
    // Where each record says its data is, the archive holds the source's bytes.
    for r in plan["records"].as_array().unwrap() {
        let name = format!("/{}", r["name"].as_str().unwrap());
        let at = r["data_offset"].as_u64().unwrap() as usize;
        if let Some((_, data)) = image.sources.iter().find(|(p, _)| *p == name) {
            assert_eq!(
                &buf[at..at + data.len()],
                &data[..],
                "{mode}: data of {name} at {at}"
            );
            if data.len() > ALIGN {
                assert_eq!(at % ALIGN, 0, "{mode}: {name} not aligned");
            }
        }
    }
    let strict = newc::parse(&buf);
    if mode == "readers" {
        let a = strict.unwrap_or_else(|e| panic!("readers-mode archive: {e}"));
        for e in &a.entries {
            if e.hdr.is_regular() && e.hdr.filesize as usize > ALIGN {
                assert_eq!(e.data_offset() % ALIGN, 0, "{}", e.display_name());
            }
        }
    } else {
        // NULs between entries: what only the kernel reads.
        assert!(
            strict.is_err(),
            "the kernel-only archive has no NUL runs between entries"
        );
    }
    summary["fillers"].as_u64().unwrap() as usize
}

fn boot_and_check(mode: &str, kernel: &DebianKernel, initrd: &Path, files: usize) {
    let result = support::qemu_boot_logged(mode, kernel, initrd, Duration::from_secs(180));
    let want = format!("{MARKER_OK} {mode} {files} files");
    if let Err(e) = result.reported(&want, MARKER_FAIL) {
        panic!(
            "{mode}: {e}\n===== console =====\n{}\n===== end =====",
            result.console
        );
    }
}

fn boot_mode(mode: &str) {
    let Some((_qemu, kernel, busybox)) = support::require_boot_env() else {
        return;
    };
    let dir = Scratch::new(&format!("planner_boot_{mode}"));
    let (manifest, image) = write_image(&dir, &busybox, mode);
    let archive = dir.join("initrd.cpio");
    support::run_ok(
        support::composer()
            .arg("build")
            .arg(&manifest)
            .arg("-o")
            .arg(&archive)
            .arg("--no-sync"),
    );
    let fillers = check_on_host(mode, &manifest, &archive, &image);
    if mode == "readers" {
        assert!(
            fillers > 0,
            "the readers-mode plan repeats no directory: the test no longer covers fillers"
        );
    } else {
        assert_eq!(fillers, 0, "kernel-only plans need no fillers");
    }
    boot_and_check(mode, &kernel, &archive, image.files.len());
}

#[test]
fn readers_mode_archive_boots() {
    boot_mode("readers");
}

#[test]
fn kernel_only_archive_boots() {
    boot_mode("kernel-only");
}

//! Acceptance test of segments in a real kernel: Debian's kernel under qemu boots, for
//! every compression its config enables (CONFIG_RD_*), an image of four segments built
//! from one small manifest: the early segment `[early]` makes (microcode and an ACPI
//! table from a fake root), an uncompressed segment with an already-compressed firmware
//! file aligned to 4096 bytes in the file, the main segment compressed with the method's
//! default level, and an uncompressed segment after it. /init (busybox) checks the md5
//! and size of every file against values computed here and prints a marker. One boot
//! per method, and one more per method with the main segment in pieces
//! (`chunk_size`): several compressed archives one after another.

use crate::md5;
use crate::support;
use md5::md5_hex;

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use support::{DebianKernel, Scratch};

const MARKER_OK: &str = "SEGMENTS-BOOT-OK";
const MARKER_FAIL: &str = "SEGMENTS-BOOT-FAIL";

/// Every method composer writes, with the kernel option that enables its decompressor.
const METHODS: [(&str, &str); 6] = [
    ("gzip", "CONFIG_RD_GZIP"),
    ("bzip2", "CONFIG_RD_BZIP2"),
    ("lzma", "CONFIG_RD_LZMA"),
    ("xz", "CONFIG_RD_XZ"),
    ("lz4", "CONFIG_RD_LZ4"),
    ("zstd", "CONFIG_RD_ZSTD"),
];

/// Deterministic, non-repeating content.
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

fn put(path: &Path, data: &[u8]) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, data).unwrap();
}

fn xz(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let opts = composer::compress::EncodeOptions {
        method: composer::compress::Compression::Xz,
        level: Some(0),
        threads: 1,
    };
    composer::compress::encode(&opts, &mut &data[..], &mut out).unwrap();
    out
}

/// The fake root, /init and the manifest template (`@METHOD@`); returns the files /init
/// checks as (image path, md5, size).
fn write_sources(dir: &Path, busybox: &Path) -> Vec<(String, String, usize)> {
    let root = dir.join("root");
    let mut files = Vec::new();
    let mut add = |image: &str, data: &[u8]| {
        files.push((image.to_string(), md5_hex(data), data.len()));
    };
    let fw = root.join("usr/lib/firmware");
    put(
        &fw.join("intel-ucode/06-8e-09"),
        b"fake intel microcode 8e\n",
    );
    put(
        &fw.join("intel-ucode/06-9e-0a"),
        b"fake intel microcode 9e\n",
    );
    put(
        &fw.join("amd-ucode/microcode_amd.bin"),
        b"fake amd microcode\n",
    );
    put(
        &fw.join("amd-ucode/microcode_amd_fam17h.bin.xz"),
        &xz(b"fake amd fam17h microcode\n"),
    );
    add(
        "/kernel/x86/microcode/GenuineIntel.bin",
        b"fake intel microcode 8e\nfake intel microcode 9e\n",
    );
    add(
        "/kernel/x86/microcode/AuthenticAMD.bin",
        b"fake amd microcode\nfake amd fam17h microcode\n",
    );
    // Shorter than an ACPI header: the kernel's table upgrade skips it.
    put(&root.join("etc/composer/acpi/test.aml"), b"NOTATABL");
    add("/kernel/firmware/acpi/test.aml", b"NOTATABL");
    let blob = xz(&content(9, 150_000));
    put(&fw.join("fake/blob.bin.xz"), &blob);
    add("/usr/lib/firmware/fake/blob.bin.xz", &blob);
    let big = content(1, 200_000);
    put(&root.join("data/big"), &big);
    add("/data/big", &big);
    put(&root.join("data/small"), b"small\n");
    add("/data/small", b"small\n");
    put(&root.join("etc/late"), b"after the compressed segment\n");
    add("/etc/late", b"after the compressed segment\n");
    let bb = fs::read(busybox).unwrap();
    put(&root.join("bin/busybox"), &bb);
    add("/bin/busybox", &bb);

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
"#
    );
    for (path, md5, size) in &files {
        let _ = writeln!(init, "check '{path}' {md5} {size}");
    }
    let _ = write!(
        init,
        r#"if [ "$fail" = 0 ]; then
    echo "{MARKER_OK} $($bb cat /etc/method) $n files"
fi
$bb poweroff -f
"#
    );
    fs::write(dir.join("init"), init).unwrap();
    files
}

const MANIFEST: &str = r#"root = "root"

[defaults]
align = 4096
mtime = 0

[early]
microcode = true
acpi = true

[[file]]
src = "/bin/busybox"
mode = "0755"

[[symlink]]
path = "/bin/sh"
target = "busybox"

[[file]]
src = "init"
dst = "/init"
mode = "0755"

[[file]]
src = "method"
dst = "/etc/method"

[[dir]]
path = "/proc"
mode = "0555"

[[dir]]
path = "/dev"

[[node]]
path = "/dev/console"
type = "char"
major = 5
minor = 1

[[tree]]
src = "/data"

[[file]]
src = "/usr/lib/firmware/fake/blob.bin.xz"

[[file]]
src = "/etc/late"

[[segment]]
name = "firmware"
paths = ["**/*.xz"]

[[segment]]
name = "main"
compression = "@METHOD@"
@CHUNK@

[[segment]]
name = "late"
paths = ["/etc/late"]
"#;

/// The piece size of the chunked images: busybox (one entry of about 2 MB) and
/// what comes before it, and the data after it, end up in different pieces.
const CHUNK: u64 = 64 * 1024;

/// Builds the image for `method` and checks it on the host: four segments (the
/// main one in several pieces when `chunked`), the firmware file's data aligned in
/// the file.
fn build(dir: &Path, method: &str, chunked: bool) -> PathBuf {
    let tag = if chunked {
        format!("{method}-chunked")
    } else {
        method.to_string()
    };
    let m = dir.join(format!("{tag}.toml"));
    let chunk = if chunked {
        format!("chunk_size = {CHUNK}")
    } else {
        String::new()
    };
    fs::write(
        &m,
        MANIFEST
            .replace("@METHOD@", method)
            .replace("@CHUNK@", &chunk),
    )
    .unwrap();
    fs::write(dir.join("method"), format!("{method}\n")).unwrap();
    let img = dir.join(format!("{tag}.img"));
    support::run_ok(
        support::composer()
            .arg("build")
            .arg(&m)
            .arg("-o")
            .arg(&img)
            .arg("--no-sync"),
    );
    support::run_ok(support::composer().arg("verify").arg(&img));
    let out = support::run_ok(support::composer().arg("inspect").arg("--json").arg(&img));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let segs = v["segments"].as_array().unwrap();
    let methods: Vec<&str> = segs
        .iter()
        .map(|s| s["compression"].as_str().unwrap())
        .collect();
    if chunked {
        let n = methods.len();
        assert!(
            n >= 5,
            "{method}: the main segment is not in pieces: {methods:?}"
        );
        assert_eq!(
            (methods[0], methods[1], methods[n - 1]),
            ("none", "none", "none")
        );
        assert!(
            methods[2..n - 1].iter().all(|m| *m == method),
            "{methods:?}"
        );
    } else {
        assert_eq!(methods, ["none", "none", method, "none"]);
    }
    let blob = segs[1]["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "usr/lib/firmware/fake/blob.bin.xz")
        .expect("the firmware segment holds the blob");
    assert_eq!(blob["data_offset"].as_u64().unwrap() % 4096, 0);
    img
}

fn boot(kernel: &DebianKernel, method: &str, img: &Path, files: usize) -> Result<(), String> {
    let result = support::qemu_boot_logged(method, kernel, img, Duration::from_secs(120));
    let console = &result.console;
    let want = format!("{MARKER_OK} {method} {files} files");
    result
        .reported(&want, MARKER_FAIL)
        .map_err(|e| format!("{method}: {e}"))?;
    // The early ACPI loader scans the uncompressed archives at the start of the image
    // long before the initramfs is unpacked; it found the table (and refused it).
    let early = "ACPI OVERRIDE: Table smaller than ACPI header [kernel/firmware/acpi/test.aml]";
    if !console.contains(early) {
        return Err(format!(
            "{method}: the kernel's early loader did not find the early segment's table \
             (no `{early}` on the console)"
        ));
    }
    Ok(())
}

#[test]
fn every_compression_the_kernel_enables_boots() {
    let Some((_qemu, kernel, busybox)) = support::require_boot_env() else {
        return;
    };
    let dir = Scratch::new("segments_boot");
    let files = write_sources(&dir, &busybox);
    let mut failures = Vec::new();
    let mut booted = Vec::new();
    for (method, option) in METHODS {
        if !kernel.config_enabled(option) {
            eprintln!("{method}: {option} is not set in this kernel's config; not booted");
            continue;
        }
        for chunked in [false, true] {
            let img = build(&dir, method, chunked);
            match boot(&kernel, method, &img, files.len()) {
                Ok(()) => booted.push(format!(
                    "{method}{}",
                    if chunked { " in pieces" } else { "" }
                )),
                Err(e) => {
                    failures.push(format!("{e}{}", if chunked { " (in pieces)" } else { "" }))
                }
            }
        }
    }
    eprintln!("booted: {booted:?}");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(!booted.is_empty(), "the kernel enables no compression");
}

//! Images of several segments (issue 7): `[[segment]]` rules split the entries into
//! concatenated archives, each uncompressed or compressed in process; `[early]` builds
//! the uncompressed first segment from a root's CPU microcode and ACPI tables. Checked
//! with composer's own reader (`inspect`, `verify`, `extract`) on images built from fake
//! roots made here; the boot in Debian's kernel is in segments_boot.rs.

use crate::support;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use support::Scratch;

const SDE: &str = "1700000000";

/// Compressible, non-repeating bytes.
fn content(seed: u64, size: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..size)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Mostly text-like, so that every method compresses it.
            if i % 3 == 0 {
                b'a' + (x % 7) as u8
            } else {
                b"initramfs "[(x % 10) as usize]
            }
        })
        .collect()
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

fn write(path: &Path, data: &[u8]) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, data).unwrap();
}

/// A fake root: Intel microcode in two files, AMD microcode in one plain and one
/// xz-compressed container (and a signature that is not microcode), two ACPI tables, an
/// already-compressed firmware file and some data.
fn fake_root(root: &Path) {
    let fw = root.join("usr/lib/firmware");
    write(&fw.join("intel-ucode/06-8e-09"), b"INTEL-8e-09\n");
    write(&fw.join("intel-ucode/06-9e-0a"), b"INTEL-9e-0a\n");
    write(&fw.join("intel-ucode/LICENSE"), b"not microcode\n");
    write(&fw.join("amd-ucode/microcode_amd.bin"), b"AMD-fam10\n");
    write(
        &fw.join("amd-ucode/microcode_amd_fam17h.bin.xz"),
        &xz(b"AMD-fam17\n"),
    );
    write(&fw.join("amd-ucode/microcode_amd_fam17h.bin.asc"), b"sig\n");
    write(&fw.join("fake/blob.bin.xz"), &xz(&content(7, 100_000)));
    write(&root.join("etc/composer/acpi/ssdt1.aml"), b"SSDT-one");
    write(&root.join("etc/composer/acpi/dsdt.aml"), b"DSDT-table");
    write(&root.join("etc/composer/acpi/README"), b"not a table");
    write(&root.join("data/big"), &content(1, 300_000));
    write(&root.join("data/small"), b"small\n");
    write(&root.join("etc/late"), b"after the compressed segment\n");
}

const MICROCODE_INTEL: &[u8] = b"INTEL-8e-09\nINTEL-9e-0a\n";
const MICROCODE_AMD: &[u8] = b"AMD-fam10\nAMD-fam17\n";

fn build(manifest: &Path, out: &Path, envs: &[(&str, &str)]) -> Vec<u8> {
    let mut cmd = support::composer();
    cmd.arg("build")
        .arg(manifest)
        .arg("-o")
        .arg(out)
        .arg("--no-sync");
    for (k, v) in envs {
        cmd.env(k, v);
    }
    support::run_ok(&mut cmd);
    fs::read(out).unwrap()
}

fn json(cmd: &mut Command) -> serde_json::Value {
    let out = support::run_ok(cmd);
    serde_json::from_slice(&out.stdout).unwrap()
}

fn inspect(image: &Path) -> serde_json::Value {
    json(support::composer().arg("inspect").arg("--json").arg(image))
}

fn verify_ok(image: &Path) {
    support::run_ok(support::composer().arg("verify").arg(image));
}

fn extract(image: &Path, dir: &Path) -> PathBuf {
    support::run_ok(
        support::composer()
            .arg("extract")
            .arg(image)
            .arg("-C")
            .arg(dir),
    );
    dir.to_path_buf()
}

fn compressions(v: &serde_json::Value) -> Vec<String> {
    v["segments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["compression"].as_str().unwrap().to_string())
        .collect()
}

fn names(segment: &serde_json::Value) -> Vec<String> {
    segment["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_string())
        .collect()
}

fn manifest(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    fs::write(&p, text).unwrap();
    p
}

const FOUR_SEGMENTS: &str = r#"root = "root"

[defaults]
align = 4096

[early]
microcode = true
acpi = true

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
compression = "zstd"
level = 3

[[segment]]
name = "late"
paths = ["/etc/late"]
"#;

#[test]
fn early_firmware_main_and_late_segments() {
    let dir = Scratch::new("segments_four");
    fake_root(&dir.join("root"));
    let m = manifest(&dir, "four.toml", FOUR_SEGMENTS);
    let img = dir.join("four.img");
    let bytes = build(&m, &img, &[]);
    verify_ok(&img);
    let v = inspect(&img);
    assert_eq!(compressions(&v), ["none", "none", "zstd", "none"]);
    let segs = v["segments"].as_array().unwrap();
    assert_eq!(
        names(&segs[0]),
        [
            "kernel",
            "kernel/firmware",
            "kernel/firmware/acpi",
            "kernel/firmware/acpi/dsdt.aml",
            "kernel/firmware/acpi/ssdt1.aml",
            "kernel/x86",
            "kernel/x86/microcode",
            "kernel/x86/microcode/AuthenticAMD.bin",
            "kernel/x86/microcode/GenuineIntel.bin",
        ]
    );
    // Each segment carries the directories its entries are under.
    assert_eq!(
        names(&segs[1]),
        [
            "usr",
            "usr/lib",
            "usr/lib/firmware",
            "usr/lib/firmware/fake",
            "usr/lib/firmware/fake/blob.bin.xz"
        ]
    );
    assert_eq!(names(&segs[2]), ["data", "data/big", "data/small"]);
    assert_eq!(names(&segs[3]), ["etc", "etc/late"]);

    // Alignment counts from the start of the file, after the early segment.
    for s in segs.iter().filter(|s| s["compression"] == "none") {
        assert_eq!(s["offset"].as_u64().unwrap() % 4, 0);
        for e in s["entries"].as_array().unwrap() {
            if e["size"].as_u64().unwrap() > 4096 {
                let at = e["data_offset"].as_u64().unwrap();
                assert_eq!(at % 4096, 0, "{} at {at}", e["name"]);
            }
        }
    }
    let blob = &segs[1]["entries"][4];
    let at = blob["data_offset"].as_u64().unwrap() as usize;
    let want = fs::read(dir.join("root/usr/lib/firmware/fake/blob.bin.xz")).unwrap();
    assert_eq!(&bytes[at..at + want.len()], &want[..]);
    // The segment after the compressed one starts 4-aligned, after NULs only.
    let zstd_end = segs[2]["offset"].as_u64().unwrap() + segs[2]["stored"].as_u64().unwrap();
    let late = segs[3]["offset"].as_u64().unwrap();
    assert!(bytes[zstd_end as usize..late as usize]
        .iter()
        .all(|&b| b == 0));

    let out = extract(&img, &dir.join("x"));
    assert_eq!(
        fs::read(out.join("kernel/x86/microcode/GenuineIntel.bin")).unwrap(),
        MICROCODE_INTEL
    );
    assert_eq!(
        fs::read(out.join("kernel/x86/microcode/AuthenticAMD.bin")).unwrap(),
        MICROCODE_AMD
    );
    assert_eq!(
        fs::read(out.join("kernel/firmware/acpi/dsdt.aml")).unwrap(),
        b"DSDT-table"
    );
    assert!(!out.join("kernel/firmware/acpi/README").exists());
    assert_eq!(fs::read(out.join("data/big")).unwrap(), content(1, 300_000));
    assert_eq!(
        fs::read(out.join("etc/late")).unwrap(),
        b"after the compressed segment\n"
    );
}

/// `composer plan` of a segmented image is what `composer build` writes: for every
/// segment the same entries in the same order, and for uncompressed segments the same
/// data offsets, absolute where the plan knows the segment's start (before the first
/// compressed segment) and from the segment's start after it.
#[test]
fn plan_of_segments_is_what_build_writes() {
    let dir = Scratch::new("segments_plan");
    fake_root(&dir.join("root"));
    let m = manifest(&dir, "four.toml", FOUR_SEGMENTS);
    let img = dir.join("four.img");
    let env = [("SOURCE_DATE_EPOCH", SDE)];
    let bytes = build(&m, &img, &env);
    let plan = json(
        support::composer()
            .arg("plan")
            .arg("--json")
            .arg(&m)
            .env("SOURCE_DATE_EPOCH", SDE),
    );
    let image = inspect(&img);
    let planned = plan["segments"].as_array().unwrap();
    let written = image["segments"].as_array().unwrap();
    assert_eq!(planned.len(), written.len());
    assert_eq!(compressions(&plan), compressions(&image));
    let mut starts_known = 0;
    let mut aligned = 0;
    for (p, w) in planned.iter().zip(written) {
        let pnames: Vec<String> = p["records"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(pnames, names(w), "segment {}", p["name"]);
        if p["compression"] != "none" {
            continue;
        }
        let at = w["offset"].as_u64().unwrap();
        if let Some(start) = p["start"].as_u64() {
            assert_eq!(start, at, "start of segment {}", p["name"]);
            starts_known += 1;
        } else {
            assert_eq!(at % p["start_align"].as_u64().unwrap(), 0);
        }
        for (r, e) in p["records"]
            .as_array()
            .unwrap()
            .iter()
            .zip(w["entries"].as_array().unwrap())
        {
            let data = at + r["data_offset"].as_u64().unwrap();
            assert_eq!(data, e["data_offset"].as_u64().unwrap(), "{}", r["name"]);
            if r["alignment"] == "aligned" {
                assert_eq!(data % 4096, 0, "{}", r["name"]);
                aligned += 1;
            }
        }
    }
    assert_eq!(
        starts_known, 2,
        "early and firmware segments precede the zstd one"
    );
    assert!(aligned >= 1, "the firmware blob is planned aligned");
    let total = &plan["summary"];
    assert_eq!(total["missed"], 0);
    assert_eq!(
        total["eligible"].as_u64().unwrap(),
        aligned,
        "only uncompressed segments have eligible files"
    );
    assert!(!bytes.is_empty());

    // The table says the same, segment by segment.
    let text = support::run_ok(support::composer().arg("plan").arg(&m));
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(text.contains("segment early (none): starts at 0"), "{text}");
    assert!(text.contains("segment main (zstd)"), "{text}");
    assert!(
        text.contains("segment late (none): starts after a compressed segment"),
        "{text}"
    );
}

/// The early files are part of what `why`, `check` and `export-list` talk about:
/// `why` names the microcode files a blob concatenates and the ACPI table's source,
/// `check` lists the segments, and `export-list` warns that a list cannot hold them.
#[test]
fn early_files_are_explained() {
    let dir = Scratch::new("segments_why");
    fake_root(&dir.join("root"));
    let m = manifest(&dir, "four.toml", FOUR_SEGMENTS);
    let stdout = |args: &[&str]| {
        let out = support::run_ok(support::composer().args(args).arg(&m));
        (
            String::from_utf8(out.stdout).unwrap(),
            String::from_utf8(out.stderr).unwrap(),
        )
    };
    let (why, _) = stdout(&["why", "kernel/x86/microcode/GenuineIntel.bin"]);
    assert!(
        why.contains("/kernel/x86/microcode/GenuineIntel.bin (24 B)"),
        "{why}"
    );
    assert!(why.contains("four.toml:6:1"), "{why}");
    assert!(
        why.contains("early microcode: 2 files concatenated: "),
        "{why}"
    );
    for part in ["intel-ucode/06-8e-09", "intel-ucode/06-9e-0a"] {
        assert!(why.contains(part), "{part} missing from: {why}");
    }
    assert!(!why.contains("LICENSE"), "{why}");
    let (why, _) = stdout(&["why", "/kernel/firmware/acpi/dsdt.aml"]);
    assert!(why.contains("early acpi: "), "{why}");
    assert!(why.contains("etc/composer/acpi/dsdt.aml"), "{why}");

    let (check, _) = stdout(&["check"]);
    assert!(
        check.contains(
            "segments: early (none, 9 entries), firmware (none, 5 entries), \
             main (zstd, 3 entries), late (none, 2 entries); \
             the early segment adds 4 files"
        ),
        "{check}"
    );
    let (list, warning) = stdout(&["export-list"]);
    assert!(list.contains("file /data/big "), "{list}");
    assert!(!list.contains("microcode"), "{list}");
    assert!(
        warning.contains("without the early files and without segments"),
        "{warning}"
    );
}

#[test]
fn yaml_segments_build_the_same_image() {
    let dir = Scratch::new("segments_yaml");
    fake_root(&dir.join("root"));
    let toml = manifest(&dir, "four.toml", FOUR_SEGMENTS);
    let yaml = manifest(
        &dir,
        "four.yaml",
        r#"root: root
defaults: { align: 4096 }
early: { microcode: true, acpi: true }
tree:
  - src: /data
file:
  - src: /usr/lib/firmware/fake/blob.bin.xz
  - src: /etc/late
segment:
  - name: firmware
    paths: ["**/*.xz"]
  - { name: main, compression: zstd, level: 3 }
  - name: late
    paths: [/etc/late]
"#,
    );
    let env = [("SOURCE_DATE_EPOCH", SDE)];
    let a = build(&toml, &dir.join("a.img"), &env);
    let b = build(&yaml, &dir.join("b.img"), &env);
    assert!(a == b, "the TOML and YAML forms build different images");
}

/// Two builds from two copies of the same sources, with SOURCE_DATE_EPOCH, for every
/// method: the same bytes (no timestamps or names in stream headers, no dependence on
/// the scratch paths or the pipe's timing).
#[test]
fn every_compression_is_reproducible() {
    let dir = Scratch::new("segments_repro");
    for copy in ["one", "two"] {
        fake_root(&dir.join(copy).join("root"));
    }
    for method in ["gzip", "zstd", "xz", "lzma", "bzip2", "lz4"] {
        let text = format!(
            "root = \"root\"\n\
             [early]\nmicrocode = true\n\
             [[tree]]\nsrc = \"/data\"\n\
             [[segment]]\ncompression = \"{method}\"\n"
        );
        let mut images = Vec::new();
        for copy in ["one", "two"] {
            let m = manifest(&dir.join(copy), &format!("{method}.toml"), &text);
            let img = dir.join(copy).join(format!("{method}.img"));
            images.push(build(&m, &img, &[("SOURCE_DATE_EPOCH", SDE)]));
            verify_ok(&img);
            let v = inspect(&img);
            assert_eq!(compressions(&v), ["none", method], "{method}");
            for s in v["segments"].as_array().unwrap() {
                for e in s["entries"].as_array().unwrap() {
                    assert_eq!(e["mtime"].as_u64(), Some(SDE.parse().unwrap()));
                }
            }
        }
        assert!(
            images[0] == images[1],
            "{method}: two builds with SOURCE_DATE_EPOCH differ"
        );
    }
}

/// zstd and xz write the same bytes with 2 or 3 threads (the default is at least 2, so
/// the image does not depend on the number of CPUs of the machine that builds it).
#[test]
fn multithreaded_output_does_not_depend_on_the_thread_count() {
    let dir = Scratch::new("segments_threads");
    // Several zstd jobs (8 MiB at level 3) and xz blocks.
    write(&dir.join("root/big"), &content(3, 20 << 20));
    for method in ["zstd", "xz"] {
        let mut images = Vec::new();
        for threads in [2, 3] {
            let m = manifest(
                &dir,
                &format!("{method}-{threads}.toml"),
                &format!(
                    "root = \"root\"\n[[file]]\nsrc = \"/big\"\n\
                     [[segment]]\ncompression = \"{method}\"\nlevel = {}\nthreads = {threads}\n",
                    if method == "xz" { 0 } else { 3 }
                ),
            );
            let img = dir.join(format!("{method}-{threads}.img"));
            images.push(build(&m, &img, &[("SOURCE_DATE_EPOCH", SDE)]));
        }
        assert!(images[0] == images[1], "{method}: 2 and 3 threads differ");
    }
}

/// A segment in pieces (`chunk_size`): several compressed archives one after
/// another, cut at entries (a hardlink group stays whole), the same tree as one
/// stream, the same bytes on every build and for any thread count.
#[test]
fn chunked_segments_are_archives_one_after_another() {
    let dir = Scratch::new("segments_chunked");
    for i in 0..24u64 {
        write(
            &dir.join(format!("root/data/f{i:02}")),
            &content(i + 1, 40_000 + i as usize * 3_000),
        );
    }
    fs::hard_link(dir.join("root/data/f03"), dir.join("root/data/f03-again")).unwrap();
    for method in ["gzip", "bzip2", "lzma", "xz", "lz4", "zstd"] {
        let text = |chunk: &str, threads: u32| {
            format!(
                "root = \"root\"\n[[tree]]\nsrc = \"/data\"\n\
                 [[segment]]\ncompression = \"{method}\"\nthreads = {threads}\n{chunk}"
            )
        };
        let one = manifest(&dir, &format!("{method}-one.toml"), &text("", 2));
        let pieces = manifest(
            &dir,
            &format!("{method}-pieces.toml"),
            &text("chunk_size = 131072\n", 2),
        );
        let pieces3 = manifest(
            &dir,
            &format!("{method}-pieces3.toml"),
            &text("chunk_size = 131072\n", 3),
        );
        let (one_img, pieces_img) = (
            dir.join(format!("{method}-one.img")),
            dir.join(format!("{method}-pieces.img")),
        );
        build(&one, &one_img, &[("SOURCE_DATE_EPOCH", SDE)]);
        let bytes = build(&pieces, &pieces_img, &[("SOURCE_DATE_EPOCH", SDE)]);
        verify_ok(&pieces_img);
        let again = build(
            &pieces,
            &dir.join("again.img"),
            &[("SOURCE_DATE_EPOCH", SDE)],
        );
        assert!(bytes == again, "{method}: two builds differ");
        let three = build(
            &pieces3,
            &dir.join("three.img"),
            &[("SOURCE_DATE_EPOCH", SDE)],
        );
        assert!(bytes == three, "{method}: 2 and 3 threads differ");
        let v = inspect(&pieces_img);
        let methods = compressions(&v);
        assert!(methods.len() >= 6, "{method}: {methods:?}");
        assert!(methods.iter().all(|m| m == method), "{method}: {methods:?}");
        // Every entry once, in the original order; the hardlink pair in one piece.
        let entry_names = |v: &serde_json::Value| -> Vec<String> {
            v["segments"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(names)
                .filter(|n| n != "TRAILER!!!")
                .collect()
        };
        assert_eq!(entry_names(&v), entry_names(&inspect(&one_img)), "{method}");
        let with_pair = v["segments"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| names(s).iter().any(|n| n.starts_with("data/f03")))
            .count();
        assert_eq!(with_pair, 1, "{method}: the hardlink pair spans pieces");
        let a = extract(&one_img, &dir.join(format!("{method}-x1")));
        let b = extract(&pieces_img, &dir.join(format!("{method}-x2")));
        support::run_ok(Command::new("diff").arg("-r").arg(&a).arg(&b));
        use std::os::unix::fs::MetadataExt;
        assert_eq!(fs::metadata(b.join("data/f03-again")).unwrap().nlink(), 2);
    }
}

/// (image path, content) of the early files a case expects.
type Want = &'static [(&'static str, &'static [u8])];

#[test]
fn early_microcode_sources() {
    let dir = Scratch::new("segments_early");
    // Only /lib/firmware, AMD only.
    let r1 = dir.join("r1");
    write(
        &r1.join("lib/firmware/amd-ucode/microcode_amd_fam19h.bin"),
        b"A19",
    );
    write(
        &r1.join("lib/firmware/amd-ucode/microcode_amd_fam15h.bin"),
        b"A15",
    );
    // Prebuilt files named in the manifest: one inside the root, one beside it.
    let r2 = dir.join("r2");
    write(&r2.join("boot/GenuineIntel.bin"), b"prebuilt intel");
    write(
        &dir.join("ucode/amd/microcode_amd.bin"),
        b"from beside the manifest",
    );
    write(&dir.join("tables/x.aml"), b"X");
    let cases: [(&str, &str, Want); 2] = [
        (
            "r1",
            "[early]\nmicrocode = true\n",
            &[("kernel/x86/microcode/AuthenticAMD.bin", b"A15A19" as &[u8])],
        ),
        (
            "r2",
            "[early]\nmicrocode = true\nacpi = true\n\
             intel_microcode = \"/boot/GenuineIntel.bin\"\n\
             amd_microcode = \"ucode/amd\"\nacpi_dir = \"tables\"\n",
            &[
                ("kernel/x86/microcode/GenuineIntel.bin", b"prebuilt intel"),
                (
                    "kernel/x86/microcode/AuthenticAMD.bin",
                    b"from beside the manifest",
                ),
                ("kernel/firmware/acpi/x.aml", b"X"),
            ],
        ),
    ];
    for (root, early, want) in cases {
        let m = manifest(
            &dir,
            &format!("{root}.toml"),
            &format!("root = \"{root}\"\n[[dir]]\npath = \"/proc\"\n{early}"),
        );
        let img = dir.join(format!("{root}.img"));
        build(&m, &img, &[]);
        verify_ok(&img);
        let v = inspect(&img);
        assert_eq!(compressions(&v), ["none", "none"], "{root}");
        let out = extract(&img, &dir.join(format!("x-{root}")));
        for (name, data) in want {
            assert_eq!(fs::read(out.join(name)).unwrap(), *data, "{root}: {name}");
        }
        let files = names(&v["segments"][0])
            .into_iter()
            .filter(|n| n.ends_with(".bin") || n.ends_with(".aml"))
            .count();
        assert_eq!(files, want.len(), "{root}");
    }
}

#[test]
fn early_without_microcode_warns() {
    let dir = Scratch::new("segments_early_none");
    fs::create_dir_all(dir.join("root/etc")).unwrap();
    let m = manifest(
        &dir,
        "m.toml",
        "root = \"root\"\n[[dir]]\npath = \"/etc\"\n[early]\nmicrocode = true\n",
    );
    let out = support::run_ok(
        support::composer()
            .arg("build")
            .arg(&m)
            .arg("-o")
            .arg(dir.join("m.img")),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no microcode"), "{err}");
    // Nothing to put in it: no early segment.
    let v = inspect(&dir.join("m.img"));
    assert_eq!(compressions(&v), ["none"]);
}

fn build_err(dir: &Path, name: &str, text: &str) -> String {
    let m = manifest(dir, name, text);
    let out = support::run(
        support::composer()
            .arg("build")
            .arg(&m)
            .arg("-o")
            .arg(dir.join("never.img")),
    );
    assert!(!out.status.success(), "{name} built");
    assert!(!dir.join("never.img").exists());
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn segment_mistakes_are_reported_where_they_are() {
    let dir = Scratch::new("segments_errors");
    fs::create_dir_all(dir.join("root/usr/lib/firmware/intel-ucode")).unwrap();
    fs::write(dir.join("root/usr/lib/firmware/intel-ucode/06-00-01"), b"x").unwrap();
    let cases = [
        (
            "level.toml",
            "[[segment]]\ncompression = \"gzip\"\nlevel = 12\n",
            "m:3:9: segment `main`: gzip level 12 is out of range (1..=9)",
        ),
        (
            "lz4level.toml",
            "[[segment]]\ncompression = \"lz4\"\nlevel = 1\n",
            "lz4 has no levels",
        ),
        (
            "mainpaths.toml",
            "[[segment]]\ncompression = \"zstd\"\npaths = [\"/etc/**\"]\n",
            "is the main segment",
        ),
        ("lzo.toml", "[[segment]]\ncompression = \"lzo\"\n", "lzo"),
        (
            "earlyzstd.toml",
            "root = \"root\"\n[early]\nmicrocode = true\n\
             [[segment]]\nname = \"early\"\ncompression = \"zstd\"\n\
             [[segment]]\nname = \"main\"\n",
            "the early segment is compressed",
        ),
        (
            "earlylate.toml",
            "root = \"root\"\n[early]\nmicrocode = true\n\
             [[segment]]\nname = \"main\"\ncompression = \"zstd\"\n\
             [[segment]]\nname = \"early\"\n",
            "comes before the early segment",
        ),
        (
            "acpidir.toml",
            "root = \"root\"\n[early]\nacpi = true\nacpi_dir = \"/nowhere\"\n",
            "acpi_dir `",
        ),
        (
            "chunknone.toml",
            "[[segment]]\nchunk_size = 65536\n",
            "m:2:14: segment `main` is not compressed; `chunk_size` cuts compressed streams",
        ),
        (
            "chunksmall.toml",
            "[[segment]]\ncompression = \"gzip\"\nchunk_size = 100\n",
            "m:3:14: segment `main`: chunk_size 100 is below 4096 bytes",
        ),
    ];
    for (name, text, want) in cases {
        let err = build_err(&dir, name, text);
        let want = want.replace("m:", &format!("{}:", dir.join(name).display()));
        assert!(err.contains(&want), "{name}: {err}");
    }
}

/// The main segment can sit between others: segments named "main" take the rest.
#[test]
fn a_segment_after_a_legacy_lz4_stream() {
    let dir = Scratch::new("segments_lz4");
    fake_root(&dir.join("root"));
    let m = manifest(
        &dir,
        "m.toml",
        "root = \"root\"\n[[tree]]\nsrc = \"/data\"\n[[file]]\nsrc = \"/etc/late\"\n\
         [[segment]]\nname = \"main\"\ncompression = \"lz4\"\n\
         [[segment]]\nname = \"late\"\npaths = [\"etc\"]\n",
    );
    let img = dir.join("m.img");
    let bytes = build(&m, &img, &[]);
    verify_ok(&img);
    let v = inspect(&img);
    assert_eq!(compressions(&v), ["lz4", "none"]);
    let segs = v["segments"].as_array().unwrap();
    let end = segs[0]["stored"].as_u64().unwrap() as usize;
    let next = segs[1]["offset"].as_u64().unwrap() as usize;
    // An empty block (four NULs) ends the lz4 stream, then NULs to a 4-byte boundary.
    assert!(next >= end + 4 && next.is_multiple_of(4), "{end} {next}");
    assert!(bytes[end..next].iter().all(|&b| b == 0));
    let out = extract(&img, &dir.join("x"));
    assert_eq!(fs::read(out.join("data/small")).unwrap(), b"small\n");
    assert!(out.join("etc/late").is_file());
}

//! The generic profile's defaults for a kernel update, on a root made here: the root's
//! CPU microcode in an uncompressed early segment first; modules already compressed
//! (.ko.xz, .ko.zst) stored in an uncompressed segment of their own; everything else in
//! one zstd segment. And a profile's segment whose patterns match nothing is quiet,
//! while a user's is a warning.

use std::fs;
use std::path::Path;
use std::process::Command;

use crate::support::{self, Scratch};

/// A module tree with ext4 compressed by xz, xfs by zstd, and their dependencies
/// (jbd2, mbcache, crc16, libcrc32c) left as they are.
fn tree(from: &Path, to: &Path) {
    for m in [
        "kernel/fs/ext4/ext4.ko",
        "kernel/fs/jbd2/jbd2.ko",
        "kernel/fs/mbcache.ko",
        "kernel/lib/crc16.ko",
        "kernel/fs/xfs/xfs.ko",
        "kernel/lib/libcrc32c.ko",
    ] {
        let dst = to.join(m);
        fs::create_dir_all(dst.parent().unwrap()).unwrap();
        fs::copy(from.join(m), &dst).unwrap();
    }
    for f in [
        "modules.builtin",
        "modules.builtin.modinfo",
        "modules.order",
    ] {
        fs::copy(from.join(f), to.join(f)).unwrap();
    }
    support::run_ok(
        Command::new("xz")
            .args(["--check=crc32", "-q"])
            .arg(to.join("kernel/fs/ext4/ext4.ko")),
    );
    support::run_ok(
        Command::new("zstd")
            .args(["-q", "--rm"])
            .arg(to.join("kernel/fs/xfs/xfs.ko")),
    );
}

/// Each segment's compression and the regular files in it. `inspect -l` gives a file's
/// data offset as `@SEG:OFFSET` in a compressed segment and `@OFFSET` (in the image)
/// in an uncompressed one.
fn segments(image: &Path) -> Vec<(String, Vec<String>)> {
    let table = support::run_ok(
        support::composer()
            .args(["inspect", "--segments"])
            .arg(image),
    );
    let mut bounds = Vec::new();
    let mut segs: Vec<(String, Vec<String>)> = Vec::new();
    for line in String::from_utf8_lossy(&table.stdout).lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (offset, length): (u64, u64) = (f[1].parse().unwrap(), f[2].parse().unwrap());
        bounds.push(offset..offset + length);
        segs.push((f[3].to_string(), Vec::new()));
    }
    let out = support::run_ok(support::composer().args(["inspect", "-l"]).arg(image));
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if !line.starts_with('-') {
            continue;
        }
        let at = f.iter().find(|w| w.starts_with('@')).unwrap();
        let seg = match at[1..].split_once(':') {
            Some((seg, _)) => seg.parse().unwrap(),
            None => {
                let off: u64 = at[1..].parse().unwrap();
                bounds.iter().position(|b| b.contains(&off)).unwrap()
            }
        };
        segs[seg].1.push(f.last().unwrap().to_string());
    }
    segs
}

#[test]
fn the_generic_profile_keeps_microcode_early_and_compressed_modules_uncompressed() {
    let Some(kernel) = support::debian_kernel() else {
        return;
    };
    for (tool, pkg) in [("xz", "xz-utils"), ("zstd", "zstd")] {
        if support::require_tool(tool, pkg).is_none() {
            return;
        }
    }
    let dir = Scratch::new("profile-generic");
    let root = dir.join("root");
    let ucode = root.join("usr/lib/firmware/intel-ucode");
    fs::create_dir_all(&ucode).unwrap();
    fs::write(ucode.join("06-55-04"), vec![0x5a; 3072]).unwrap();
    let kmod = dir.join("modules");
    tree(&kernel.modules_dir(), &kmod);
    let m = dir.join("m.toml");
    // The init is the manifest's business here: the root has no programs.
    fs::write(&m, "include = [\"generic\"]\ninit = \"none\"\n").unwrap();
    let image = dir.join("initrd.img");
    let run = support::run_ok(
        support::build_for(&kernel.version, &kmod)
            .arg(&m)
            .arg("--root")
            .arg(&root)
            .arg("-o")
            .arg(&image),
    );
    let warnings = String::from_utf8_lossy(&run.stderr).into_owned();
    eprintln!("{warnings}");
    let segs = segments(&image);
    eprintln!("{segs:#?}");
    assert_eq!(segs.len(), 3, "early, compressed modules, main: {segs:?}");
    assert_eq!(segs[0].0, "none");
    assert_eq!(segs[0].1, ["kernel/x86/microcode/GenuineIntel.bin"]);
    assert_eq!(segs[1].0, "none");
    let mut stored = segs[1].1.clone();
    stored.sort();
    let kdir = format!("usr/lib/modules/{}/kernel", kernel.version);
    assert_eq!(
        stored,
        [
            format!("{kdir}/fs/ext4/ext4.ko.xz"),
            format!("{kdir}/fs/xfs/xfs.ko.zst")
        ]
    );
    assert_eq!(segs[2].0, "zstd");
    for m in [
        "fs/jbd2/jbd2.ko",
        "fs/mbcache.ko",
        "lib/crc16.ko",
        "lib/libcrc32c.ko",
    ] {
        let p = format!("{kdir}/{m}");
        assert!(segs[2].1.contains(&p), "{p} is not in the zstd segment");
    }
    // The profile's optional rules and segments say nothing about what this small
    // tree lacks.
    assert!(!warnings.contains("match"), "{warnings}");

    // A user's segment that names /lib: it takes what merged /usr moved to /usr/lib.
    // One that matches nothing is a warning, at its line.
    fs::write(
        &m,
        "include = [\"generic\"]\ninit = \"none\"\n\n\
         [[segment]]\nname = \"jbd2\"\npaths = [\"/lib/modules/*/kernel/fs/jbd2/**\"]\n\n\
         [[segment]]\nname = \"fw\"\npaths = [\"/lib/firmware/nothing/**\"]\n",
    )
    .unwrap();
    let run = support::run_ok(
        support::build_for(&kernel.version, &kmod)
            .arg(&m)
            .arg("--root")
            .arg(&root)
            .arg("-o")
            .arg(&image),
    );
    let warnings = String::from_utf8_lossy(&run.stderr);
    assert!(
        warnings.contains(&format!("{}:10:", m.display())) && warnings.contains("fw"),
        "no warning for the empty segment: {warnings}"
    );
    assert!(!warnings.contains("jbd2"), "{warnings}");
    let segs = segments(&image);
    let jbd2 = segs
        .iter()
        .find(|(_, paths)| paths.iter().any(|p| p.ends_with("jbd2.ko")))
        .unwrap();
    assert_eq!(jbd2.1, [format!("{kdir}/fs/jbd2/jbd2.ko")], "{segs:#?}");

    // A root without microcode: no early segment at all, and no warning.
    fs::remove_dir_all(root.join("usr/lib/firmware")).unwrap();
    fs::write(&m, "include = [\"generic\"]\ninit = \"none\"\n").unwrap();
    let run = support::run_ok(
        support::build_for(&kernel.version, &kmod)
            .arg(&m)
            .arg("--root")
            .arg(&root)
            .arg("-o")
            .arg(&image),
    );
    let warnings = String::from_utf8_lossy(&run.stderr);
    assert!(!warnings.contains("microcode"), "{warnings}");
    let segs = segments(&image);
    assert_eq!(segs.len(), 2, "no early segment: {segs:#?}");
    assert!(
        !segs[0].1.iter().any(|p| p.starts_with("kernel/")),
        "{segs:#?}"
    );
}

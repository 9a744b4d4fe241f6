//! Acceptance: an image built from `modules = ["ext4", "virtio_blk", ...]`
//! boots Debian's kernel in qemu, and both kmod's modprobe and busybox's
//! load the modules by name from the metadata composer wrote; /init then
//! mounts an ext4 virtio disk and prints a marker file from it. And the
//! metadata is what depmod itself writes for the image's modules.

use crate::support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use support::{BootOptions, DebianKernel};

const INIT: &str = r#"#!/bin/busybox sh
bb=/bin/busybox
$bb mount -t proc proc /proc
$bb mount -t sysfs sys /sys
$bb mount -t devtmpfs dev /dev
MODPROBE="${MODPROBE:-/sbin/modprobe}"
for m in $MODULES; do
  if $MODPROBE $m; then echo "MODPROBE-OK $m"; else echo "MODPROBE-FAILED $m"; fi
done
echo "LOADED: $($bb cut -d' ' -f1 /proc/modules | $bb sort | $bb tr '\n' ' ')"
i=0
while [ ! -b /dev/vda ] && [ $i -lt 100 ]; do $bb sleep 0.1; i=$((i+1)); done
if $bb mount -t ext4 -o ro /dev/vda /mnt; then
  echo "MARKER: $($bb cat /mnt/marker.txt)"
else
  echo "MOUNT-FAILED"
fi
$bb poweroff -f
"#;

/// The files `ldd` says a program loads (the interpreter included).
fn ldd(program: &Path) -> Vec<PathBuf> {
    let out = support::run_ok(Command::new("ldd").arg(program));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let path = match l.split_once("=> ") {
                Some((_, rest)) => rest.split_whitespace().next()?,
                None => l.split_whitespace().next()?,
            };
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect()
}

/// A manifest over Debian's kernel with kmod (and its libraries), busybox
/// and two /init scripts, its files copied beside it.
fn write_manifest(dir: &Path, kernel: &DebianKernel, busybox: &Path, kmod: &Path) -> PathBuf {
    let files = dir.join("files");
    std::fs::create_dir_all(&files).unwrap();
    let mut rules = String::new();
    let mut add = |src: &Path, dst: &str, mode: &str| {
        let name = dst.trim_start_matches('/').replace('/', "_");
        std::fs::copy(src, files.join(&name))
            .unwrap_or_else(|e| panic!("copy {}: {e}", src.display()));
        rules.push_str(&format!(
            "[[file]]\nsrc = \"files/{name}\"\ndst = \"{dst}\"\nmode = \"{mode}\"\n\n"
        ));
    };
    add(busybox, "/bin/busybox", "0755");
    add(kmod, "/usr/bin/kmod", "0755");
    for lib in ldd(kmod) {
        let dst = lib.display().to_string();
        add(&lib, &dst, "0755");
    }
    std::fs::write(files.join("init"), INIT.replace("${MODULES}", "")).unwrap();
    std::fs::write(
        files.join("init-busybox"),
        INIT.replace(
            "MODPROBE=\"${MODPROBE:-/sbin/modprobe}\"",
            "MODPROBE=\"/bin/busybox modprobe\"",
        ),
    )
    .unwrap();
    let manifest = format!(
        r#"root = "{root}"
modules = ["ext4", "virtio_blk", "virtio_pci"]

[[file]]
src = "files/init"
dst = "/init"
mode = "0755"

[[file]]
src = "files/init-busybox"
dst = "/init-busybox"
mode = "0755"

[[symlink]]
path = "/sbin/modprobe"
target = "/usr/bin/kmod"

[[dir]]
path = "/proc"
[[dir]]
path = "/sys"
[[dir]]
path = "/dev"
[[dir]]
path = "/mnt"

{rules}"#,
        root = kernel.root.display()
    );
    let path = dir.join("modules.toml");
    std::fs::write(&path, manifest).unwrap();
    path
}

fn build(manifest: &Path, kernel: &DebianKernel, out: &Path) {
    support::run_ok(
        support::composer()
            .arg("build")
            .arg(manifest)
            .args(["--kver", &kernel.version, "-o"])
            .arg(out),
    );
}

#[test]
fn kmod_and_busybox_modprobe_load_modules_in_qemu() {
    let Some((_qemu, kernel, busybox)) = support::require_boot_env() else {
        return;
    };
    let Some(kmod) = support::require_tool("kmod", "kmod") else {
        return;
    };
    let Some(mkfs) = support::require_tool("mkfs.ext4", "e2fsprogs") else {
        return;
    };
    if support::require_tool("ldd", "libc-bin").is_none() {
        return;
    }
    let dir = support::Scratch::new("kmod-boot");
    let manifest = write_manifest(&dir, &kernel, &busybox, &kmod);
    let initrd = dir.join("initrd.img");
    build(&manifest, &kernel, &initrd);

    let marker = format!("composer-marker-{}", std::process::id());
    let content = dir.join("disk");
    std::fs::create_dir_all(&content).unwrap();
    std::fs::write(content.join("marker.txt"), format!("{marker}\n")).unwrap();
    let disk = dir.join("disk.img");
    support::run_ok(
        Command::new(mkfs)
            .args(["-q", "-F", "-d"])
            .arg(&content)
            .arg(&disk)
            .arg("16M"),
    );
    let drive = format!("file={},if=virtio,format=raw,readonly=on", disk.display());

    for (init, modules, label) in [
        ("/init", "virtio_pci virtio_blk ext4", "kmod"),
        // busybox's modprobe does not read softdeps: ext4 needs crc32c first.
        (
            "/init-busybox",
            "crc32c virtio_pci virtio_blk ext4",
            "busybox",
        ),
    ] {
        let opts = BootOptions {
            extra_append: format!("rdinit={init} MODULES=\"{modules}\""),
            extra_args: vec!["-drive".into(), drive.clone().into()],
            ..BootOptions::default()
        };
        let boot = support::qemu_boot_with(&kernel, &initrd, &opts);
        let console = &boot.console;
        eprintln!("--- {label} boot ({:?}) ---\n{console}", boot.elapsed);
        for m in modules.split(' ') {
            assert!(
                console.contains(&format!("MODPROBE-OK {m}")),
                "{label}'s modprobe did not load {m}:\n{console}"
            );
        }
        let loaded = console
            .lines()
            .find_map(|l| l.strip_prefix("LOADED: "))
            .unwrap_or_else(|| panic!("no module list:\n{console}"));
        for m in [
            "ext4",
            "jbd2",
            "mbcache",
            "crc16",
            "virtio_blk",
            "virtio_pci",
            "crc32c_generic",
        ] {
            assert!(
                loaded.split(' ').any(|l| l == m),
                "{label}: {m} not loaded ({loaded})"
            );
        }
        assert!(
            console.contains(&format!("MARKER: {marker}")),
            "{label}: the marker was not read from the ext4 disk:\n{console}"
        );
    }
}

#[test]
fn image_metadata_is_what_depmod_writes() {
    let Some(kernel) = support::debian_kernel() else {
        return;
    };
    let Some(depmod) = support::require_tool("depmod", "kmod") else {
        return;
    };
    let Some(busybox) = support::busybox_static() else {
        return;
    };
    let Some(kmod) = support::require_tool("kmod", "kmod") else {
        return;
    };
    if support::require_tool("ldd", "libc-bin").is_none() {
        return;
    }
    let dir = support::Scratch::new("kmod-meta");
    let manifest = write_manifest(&dir, &kernel, &busybox, &kmod);
    let initrd = dir.join("initrd.img");
    build(&manifest, &kernel, &initrd);
    let archive = std::fs::read(&initrd).unwrap();
    let entries = support::parse_newc(&archive).unwrap();
    let prefix = format!("lib/modules/{}/", kernel.version);
    // The image's module directory, unpacked; and a copy for depmod.
    let ours = dir.join("ours");
    let theirs = dir.join("theirs");
    let mut module_files = 0;
    for e in &entries {
        let name = e.name_str();
        let Some(rel) = name.strip_prefix(&prefix) else {
            continue;
        };
        if e.mode & 0o170000 != 0o100000 {
            continue;
        }
        for base in [&ours, &theirs] {
            let p = base.join("lib/modules").join(&kernel.version).join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            if !(base == &theirs
                && rel.starts_with("modules.")
                && !matches!(
                    rel,
                    "modules.order" | "modules.builtin" | "modules.builtin.modinfo"
                ))
            {
                std::fs::write(&p, &e.data).unwrap();
            }
        }
        if rel.ends_with(".ko") {
            module_files += 1;
        }
    }
    assert!(module_files >= 9, "{module_files} modules in the image");
    support::run_ok(
        Command::new(depmod)
            .arg("-b")
            .arg(&theirs)
            .arg(&kernel.version),
    );
    let mdir = |b: &Path| b.join("lib/modules").join(&kernel.version);
    let mut problems = Vec::new();
    for name in [
        "modules.dep",
        "modules.dep.bin",
        "modules.alias",
        "modules.alias.bin",
        "modules.softdep",
        "modules.symbols.bin",
        "modules.devname",
        "modules.builtin.bin",
        "modules.builtin.alias.bin",
    ] {
        let a = std::fs::read(mdir(&ours).join(name))
            .unwrap_or_else(|e| panic!("image has no {name}: {e}"));
        let b = std::fs::read(mdir(&theirs).join(name)).unwrap();
        if a != b {
            problems.push(format!(
                "{name}: {} bytes in the image, depmod writes {}",
                a.len(),
                b.len()
            ));
        }
    }
    let lines = |p: PathBuf| -> BTreeSet<String> {
        std::fs::read_to_string(p)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect()
    };
    if lines(mdir(&ours).join("modules.symbols")) != lines(mdir(&theirs).join("modules.symbols")) {
        problems.push("modules.symbols: different lines".into());
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The /init of the firmware boots: test_firmware (the kernel's own module for
/// exercising its loader) asks the loader for `composer/test.bin` and shows what it got.
const FIRMWARE_INIT: &str = r#"#!/bin/busybox sh
bb=/bin/busybox
$bb mount -t proc proc /proc
$bb mount -t sysfs sys /sys
$bb mount -t devtmpfs dev /dev
$bb modprobe test_firmware || echo "MODPROBE-FAILED"
$bb printf composer/test.bin > /sys/devices/virtual/misc/test_firmware/trigger_request
echo "FIRMWARE: $($bb cat /dev/test_firmware)"
$bb poweroff -f
"#;

/// `kernel`'s module tree with test_firmware asking for `composer/test.bin` (its
/// `description=` or `author=` in `.modinfo` overwritten in place by `firmware=composer/test.bin`,
/// as a driver's MODULE_FIRMWARE reads; its signature taken off and written
/// uncompressed: the kernel loads it unsigned, as it does not enforce signatures
/// without Secure Boot), its configuration, and that firmware compressed
/// with zstd: a root under `dir`. The tree is hard links to the kernel's where the
/// file system allows (nothing in it is written in place: the module is replaced, and
/// depmod renames its files into place).
fn firmware_root(kernel: &DebianKernel, dir: &Path, depmod: &Path, firmware: &str) -> PathBuf {
    let root = dir.join("root");
    let tree = root.join("lib/modules").join(&kernel.version);
    std::fs::create_dir_all(tree.parent().unwrap()).unwrap();
    let linked = Command::new("cp")
        .arg("-al")
        .arg(kernel.modules_dir())
        .arg(&tree)
        .status()
        .unwrap();
    if !linked.success() {
        let _ = std::fs::remove_dir_all(&tree);
        support::run_ok(
            Command::new("cp")
                .arg("-a")
                .arg(kernel.modules_dir())
                .arg(&tree),
        );
    }
    let shipped = ["", ".xz", ".zst"]
        .iter()
        .map(|e| tree.join(format!("kernel/lib/test_firmware.ko{e}")))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("{}: no test_firmware module", kernel.version));
    let mut module = if shipped.extension().is_some_and(|e| e == "ko") {
        std::fs::read(&shipped).unwrap()
    } else {
        let tool = if shipped.extension().is_some_and(|e| e == "xz") {
            "xz"
        } else {
            "zstd"
        };
        support::run_ok(Command::new(tool).arg("-dc").arg(&shipped)).stdout
    };
    // The changed module's signature would be rejected: it goes (an unsigned module
    // loads, tainting the kernel, when signatures are not enforced). It is the
    // magic's 28 bytes, after a 12-byte header whose last four say the signature's
    // length (big-endian), after the signature.
    let magic = b"~Module signature appended~\n";
    if module.ends_with(magic) {
        let header = module.len() - magic.len() - 12;
        let sig = u32::from_be_bytes(module[header + 8..header + 12].try_into().unwrap());
        module.truncate(header - sig as usize);
    }
    // Its `description=` (6.12) or `author=` (6.1 has no description): text no
    // loader reads.
    let at = [&b"description="[..], b"author="]
        .iter()
        .find_map(|key| module.windows(key.len()).position(|w| w == *key))
        .expect("test_firmware has neither a description nor an author");
    let end = at + module[at..].iter().position(|&b| b == 0).unwrap();
    let want = b"firmware=composer/test.bin";
    assert!(end - at >= want.len(), "the text it replaces is too short");
    module[at..end].fill(0);
    module[at..at + want.len()].copy_from_slice(want);
    std::fs::remove_file(&shipped).unwrap();
    std::fs::write(tree.join("kernel/lib/test_firmware.ko"), &module).unwrap();
    support::run_ok(
        Command::new(depmod)
            .arg("-b")
            .arg(&root)
            .arg(&kernel.version),
    );
    std::fs::create_dir_all(root.join("boot")).unwrap();
    std::fs::copy(
        kernel.config(),
        root.join(format!("boot/config-{}", kernel.version)),
    )
    .unwrap();
    let fw = root.join("lib/firmware/composer");
    std::fs::create_dir_all(&fw).unwrap();
    std::fs::write(fw.join("test.bin"), firmware).unwrap();
    support::run_ok(
        Command::new("zstd")
            .args(["-q", "--rm"])
            .arg(fw.join("test.bin")),
    );
    root
}

/// A firmware file shipped compressed (`.zst`) reaches the kernel's loader from the
/// image: a module asks for it, and the kernel hands it over. Debian 13's kernel reads
/// zstd itself (the image keeps `test.bin.zst`); Debian 12's reads xz only (composer
/// decompresses it into `test.bin`).
#[test]
fn a_compressed_firmware_file_is_loaded_by_each_kernel() {
    let Some((_, platform, busybox)) = support::require_platform_env() else {
        return;
    };
    let Some(older) = support::debian_kernel() else {
        return;
    };
    let Some(depmod) = support::require_tool("depmod", "kmod") else {
        return;
    };
    for (tool, package) in [("zstd", "zstd"), ("xz", "xz-utils")] {
        if support::require_tool(tool, package).is_none() {
            return;
        }
    }
    let dir = support::Scratch::new("kmod-firmware-boot");
    std::fs::write(dir.join("init"), FIRMWARE_INIT).unwrap();
    std::fs::copy(&busybox, dir.join("busybox")).unwrap();
    for (kernel, kept, dropped) in [
        (&platform, "test.bin.zst", "test.bin"),
        (&older, "test.bin", "test.bin.zst"),
    ] {
        let sub = dir.join(&kernel.version);
        std::fs::create_dir_all(&sub).unwrap();
        let token = format!(
            "COMPOSER-FIRMWARE-{}-{}",
            kernel.version,
            std::process::id()
        );
        let root = firmware_root(kernel, &sub, &depmod, &token);
        let manifest = sub.join("fw.toml");
        std::fs::write(
            &manifest,
            format!(
                "root = {}\nmodules = [\"test_firmware\"]\n\n\
                 [[file]]\nsrc = \"../init\"\ndst = \"/init\"\nmode = \"0755\"\n\n\
                 [[file]]\nsrc = \"../busybox\"\ndst = \"/bin/busybox\"\nmode = \"0755\"\n\n\
                 [[dir]]\npath = \"/proc\"\n[[dir]]\npath = \"/sys\"\n[[dir]]\npath = \"/dev\"\n",
                support::toml_str(root.to_str().unwrap())
            ),
        )
        .unwrap();
        let image = sub.join("initrd.img");
        support::run_ok(
            support::composer()
                .args(["build", "--no-sync", "--kver", &kernel.version])
                .arg(&manifest)
                .arg("-o")
                .arg(&image),
        );
        let paths = support::image_paths(&image);
        let has = |name: &str| {
            paths
                .iter()
                .any(|p| p == &format!("lib/firmware/composer/{name}"))
        };
        assert!(
            has(kept) && !has(dropped),
            "{}: the image should hold {kept}, not {dropped}: {paths:?}",
            kernel.version
        );
        let boot = support::qemu_boot_with(
            kernel,
            &image,
            &BootOptions {
                timeout: std::time::Duration::from_secs(120),
                ..BootOptions::default()
            },
        );
        let console = &boot.console;
        eprintln!("--- {} ({:?}) ---\n{console}", kernel.version, boot.elapsed);
        assert!(
            console
                .lines()
                .any(|l| l.trim_end().ends_with(&format!("FIRMWARE: {token}"))),
            "{}: the loader did not hand test_firmware the file:\n{console}",
            kernel.version
        );
        assert!(
            !console.contains("Direct firmware load for composer/test.bin failed"),
            "{}: the loader found no form of the file it reads:\n{console}",
            kernel.version
        );
    }
}

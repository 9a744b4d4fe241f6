//! `composer check-boot` on this machine's own root (a filesystem on a virtio disk):
//! the complete image passes; an image without the disk's driver, without the
//! filesystem's module, without an init, or booted with a `root=` that names another
//! filesystem fails, naming exactly that layer. (The layers this build host cannot
//! make, md, LUKS and LVM, are checked inside the hostonly guest.)

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use crate::support::{self, Scratch};

/// The device the running root is mounted from, when it is a whole virtio disk or a
/// partition of one.
pub(crate) fn virtio_root() -> Option<String> {
    let info = fs::read_to_string("/proc/self/mountinfo").ok()?;
    let line = info.lines().find(|l| l.split(' ').nth(4) == Some("/"))?;
    let source = line.split(" - ").nth(1)?.split(' ').nth(1)?.to_string();
    source.starts_with("/dev/vd").then_some(source)
}

pub(crate) fn check(
    image: &Path,
    kernel: &support::DebianKernel,
    cmdline: &str,
    json: bool,
) -> Output {
    let mut cmd = support::composer();
    cmd.arg("check-boot")
        .arg("--kver")
        .arg(&kernel.version)
        .arg("--kmoddir")
        .arg(kernel.modules_dir())
        .arg("--kernel-cmdline")
        .arg(cmdline);
    if json {
        cmd.arg("--json");
    }
    support::run(cmd.arg(image))
}

#[test]
fn check_boot_names_the_layer_an_image_lacks() {
    let Some(kernel) = support::debian_kernel() else {
        return;
    };
    let Some(root) = virtio_root() else {
        eprintln!("skipped: this machine's root is not on a virtio disk");
        return;
    };
    let dir = Scratch::new("check-boot");
    let image = |name: &str, manifest: &str| {
        let m = dir.join(format!("{name}.toml"));
        fs::write(&m, manifest).unwrap();
        let out = dir.join(format!("{name}.img"));
        support::run_ok(
            support::build_for(&kernel.version, &kernel.modules_dir())
                .arg(&m)
                .arg("-o")
                .arg(&out),
        );
        out
    };
    let with = |modules: &str, init: &str| format!("init = \"{init}\"\nmodules = [{modules}]\n");
    let all = "\"virtio_pci\", \"virtio_blk\", \"ext4\"";
    let complete = image("complete", &with(all, "shell"));
    let cmdline = format!("root={root}");

    let o = check(&complete, &kernel, &cmdline, false);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "the complete image:\n{text}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        text.contains("bootable") && text.contains("virtio_blk"),
        "{text}"
    );

    // Each broken image fails, naming exactly its layer.
    let disk = root
        .trim_start_matches("/dev/")
        .trim_end_matches(char::is_numeric);
    let cases = [
        (
            "no-virtio-blk",
            image("no-virtio-blk", &with("\"virtio_pci\", \"ext4\"", "shell")),
            cmdline.clone(),
            format!("disk {disk}"),
            "virtio_blk",
        ),
        (
            "no-ext4",
            image("no-ext4", &with("\"virtio_pci\", \"virtio_blk\"", "shell")),
            cmdline.clone(),
            "ext4".to_string(),
            "module ext4",
        ),
        (
            "no-init",
            image("no-init", &with(all, "none")),
            cmdline.clone(),
            "init".to_string(),
            "/init",
        ),
        (
            "another-root",
            complete.clone(),
            "root=UUID=00000000-0000-4000-8000-000000000000".to_string(),
            "root=UUID=00000000".to_string(),
            "does not name the root filesystem",
        ),
    ];
    let mut verdicts = vec![(
        "complete".to_string(),
        complete.clone(),
        cmdline.clone(),
        true,
    )];
    for (what, img, cmdline, layer, missing) in &cases {
        verdicts.push((what.to_string(), img.clone(), cmdline.clone(), false));
        let o = check(img, &kernel, cmdline, true);
        assert_eq!(
            o.status.code(),
            Some(1),
            "{what}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(doc["bootable"], false, "{what}");
        let failed: Vec<&serde_json::Value> = doc["checks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| !c["missing"].as_array().unwrap().is_empty())
            .collect();
        assert_eq!(failed.len(), 1, "{what}: {failed:?}");
        let f = failed[0];
        assert!(
            f["layer"].as_str().unwrap().contains(layer.as_str()),
            "{what}: {f}"
        );
        assert!(f["missing"].to_string().contains(missing), "{what}: {f}");
    }
    agreement(&kernel, &root, &verdicts);
}

/// The same images booted: each on a test root attached where this machine's root
/// is (the first virtio disk), with the command line the check assumed; the check's
/// verdict must be the boot's outcome.
fn agreement(
    kernel: &support::DebianKernel,
    root: &str,
    verdicts: &[(String, PathBuf, String, bool)],
) {
    if root != "/dev/vda" {
        eprintln!(
            "the boots are skipped: this machine's root is {root}, not a whole first virtio disk"
        );
        return;
    }
    let Some(busybox) = support::busybox_static() else {
        return;
    };
    let Some(roots) = crate::boot_root::roots(&busybox) else {
        return;
    };
    let test_root = &roots[0];
    let disk = test_root
        .qemu
        .iter()
        .find(|a| a.contains("if=virtio"))
        .expect("a virtio root");
    let booted: Vec<(bool, Option<&str>)> = std::thread::scope(|s| {
        let handles: Vec<_> = verdicts
            .iter()
            .map(|(_, image, cmdline, _)| {
                let opts = support::BootOptions {
                    extra_append: format!("{cmdline} rd.timeout=15"),
                    extra_args: vec!["-drive".into(), disk.into()],
                    timeout: Duration::from_secs(180),
                    stop_when: Some("starting an emergency shell".to_string()),
                    ..support::BootOptions::default()
                };
                s.spawn(move || {
                    let r = support::qemu_boot_with(kernel, image, &opts);
                    let ok = r
                        .console
                        .contains(&format!("COMPOSER-ROOT-OK {}", test_root.token));
                    (ok, support::initrd_stop(&r.console, 0))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut table = String::from("| image | check-boot | boot |\n|:---|:---|:---|\n");
    for ((what, _, _, bootable), (ok, stop)) in verdicts.iter().zip(&booted) {
        let how = stop.unwrap_or(if *ok {
            ""
        } else {
            "the console does not say why"
        });
        table.push_str(&format!("| {what} | {bootable} | {ok} {how} |\n"));
    }
    eprintln!("check-boot against the boot:\n{table}");
    for ((what, _, _, bootable), (ok, stop)) in verdicts.iter().zip(&booted) {
        assert_eq!(
            bootable, ok,
            "{what}: check-boot and the boot disagree\n{table}"
        );
        // A boot that must fail shows where it stopped: a hang or a crash does not
        // count as the failure the check predicts.
        assert!(
            *ok || stop.is_some(),
            "{what}: the boot stopped without saying why\n{table}"
        );
    }
}

/// A disk controller whose driver asks for firmware the root has: the image without
/// that firmware fails the disk's layer naming it; with it the layer passes. The
/// driver is Debian's virtio_blk with a `firmware=` line added to its .modinfo (by
/// objcopy), in a small module tree; the firmware is in a test root (`--root`).
#[test]
fn check_boot_names_the_firmware_a_disk_driver_lacks() {
    let Some(kernel) = support::debian_kernel() else {
        return;
    };
    let Some(objcopy) = support::require_tool("objcopy", "binutils") else {
        return;
    };
    let Some(root) = virtio_root() else {
        eprintln!("skipped: this machine's root is not on a virtio disk");
        return;
    };
    let dir = Scratch::new("check-boot-firmware");
    // The small module tree: the virtio drivers, virtio_blk asking for firmware.
    let kver = &kernel.version;
    let from = kernel.modules_dir();
    let tree = dir.join("modules").join(kver);
    fs::create_dir_all(&tree).unwrap();
    for f in [
        "modules.builtin",
        "modules.builtin.modinfo",
        "modules.order",
    ] {
        fs::copy(from.join(f), tree.join(f)).unwrap();
    }
    let virtio = tree.join("kernel/drivers/virtio");
    fs::create_dir_all(&virtio).unwrap();
    for e in fs::read_dir(from.join("kernel/drivers/virtio"))
        .unwrap()
        .flatten()
    {
        fs::copy(e.path(), virtio.join(e.file_name())).unwrap();
    }
    let block = tree.join("kernel/drivers/block");
    fs::create_dir_all(&block).unwrap();
    let modinfo = dir.join("modinfo");
    support::run_ok(
        Command::new(&objcopy)
            .args(["-O", "binary", "--only-section=.modinfo"])
            .arg(from.join("kernel/drivers/block/virtio_blk.ko"))
            .arg(&modinfo),
    );
    let mut info = fs::read(&modinfo).unwrap();
    info.extend_from_slice(b"firmware=composer-test/controller.bin\0");
    fs::write(&modinfo, &info).unwrap();
    support::run_ok(
        Command::new(&objcopy)
            .arg(format!("--update-section=.modinfo={}", modinfo.display()))
            .arg(from.join("kernel/drivers/block/virtio_blk.ko"))
            .arg(block.join("virtio_blk.ko")),
    );
    // The root the check is for holds the firmware.
    let test_root = dir.join("root");
    let fw = test_root.join("lib/firmware/composer-test/controller.bin");
    fs::create_dir_all(fw.parent().unwrap()).unwrap();
    fs::write(&fw, b"controller firmware").unwrap();

    let image = |name: &str, extra: &str| {
        let m = dir.join(format!("{name}.toml"));
        fs::write(
            &m,
            format!("init = \"shell\"\nmodules = [\"virtio_pci\", \"virtio_blk\"]\n{extra}"),
        )
        .unwrap();
        let out = dir.join(format!("{name}.img"));
        support::run_ok(support::build_for(kver, &tree).arg(&m).arg("-o").arg(&out));
        out
    };
    let without = image("without", "");
    let with = image(
        "with",
        &format!(
            "[[file]]\nsrc = {}\ndst = \"/usr/lib/firmware/composer-test/controller.bin\"\n",
            support::toml_str(fw.to_str().unwrap())
        ),
    );
    let disk_layer = |img: &Path| {
        let o = support::run(
            support::composer()
                .args(["check-boot", "--json", "--kver", kver])
                .arg("--kmoddir")
                .arg(&tree)
                .arg("--root")
                .arg(&test_root)
                .args(["--kernel-cmdline", &format!("root={root}")])
                .arg(img),
        );
        let doc: serde_json::Value = serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stderr)));
        doc["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["layer"].as_str().unwrap_or("").starts_with("disk"))
            .cloned()
            .expect("no disk layer")
    };
    let failed = disk_layer(&without);
    assert!(
        failed["missing"]
            .to_string()
            .contains("firmware composer-test/controller.bin (virtio_blk asks for it)"),
        "{failed}"
    );
    let passed = disk_layer(&with);
    assert_eq!(
        passed["missing"].as_array().map(Vec::len),
        Some(0),
        "{passed}"
    );
    assert!(
        passed["found"]
            .to_string()
            .contains("firmware composer-test/controller.bin"),
        "{passed}"
    );
}

/// `--root DIR` on a mounted target reads the stack under that mount, not the running
/// root's: an ext4 filesystem on a loop device (its file on this machine's root) needs
/// `loop`, and its `root=` is the loop device, not this machine's root device.
#[test]
fn check_boot_reads_the_stack_of_a_mounted_target() {
    let Some(kernel) = support::debian_kernel() else {
        return;
    };
    let Some(root) = virtio_root() else {
        eprintln!("skipped: this machine's root is not on a virtio disk");
        return;
    };
    if !support::require_root() {
        return;
    }
    let Some(mkfs) = support::require_tool("mkfs.ext4", "e2fsprogs") else {
        return;
    };
    let Some(target) =
        crate::planner_reflink::LoopMount::create("check-boot-target", "ext4", &mkfs, 64 << 20)
    else {
        return;
    };
    let mnt = fs::canonicalize(&target.mnt).unwrap();
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let source = info
        .lines()
        .find(|l| l.split(' ').nth(4) == Some(&*mnt.to_string_lossy()))
        .and_then(|l| l.split(" - ").nth(1)?.split(' ').nth(1))
        .expect("the target's mount")
        .to_string();
    assert!(source.starts_with("/dev/loop"), "{source}");
    let dir = Scratch::new("check-boot-target-images");
    let image = |name: &str, modules: &str| {
        let m = dir.join(format!("{name}.toml"));
        fs::write(
            &m,
            format!(
                "init = \"shell\"\nmodules = [\"virtio_pci\", \"virtio_blk\", \"ext4\"{modules}]\n"
            ),
        )
        .unwrap();
        let out = dir.join(format!("{name}.img"));
        support::run_ok(
            support::build_for(&kernel.version, &kernel.modules_dir())
                .arg(&m)
                .arg("-o")
                .arg(&out),
        );
        out
    };
    let with_loop = image("with-loop", ", \"loop\"");
    let without = image("without-loop", "");
    let run = |img: &Path, cmdline: &str| {
        let o = support::run(
            support::composer()
                .arg("check-boot")
                .arg("--root")
                .arg(&target.mnt)
                .arg("--kver")
                .arg(&kernel.version)
                .arg("--kmoddir")
                .arg(kernel.modules_dir())
                .arg("--kernel-cmdline")
                .arg(cmdline)
                .arg("--json")
                .arg(img),
        );
        let doc: serde_json::Value = serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stderr)));
        let failing = support::failing_layers(&doc);
        (o.status.code(), doc, failing)
    };
    let here = format!("root={source}");
    let (code, doc, failing) = run(&with_loop, &here);
    assert_eq!((code, failing.as_slice()), (Some(0), &[][..]), "{doc}");
    let layers = doc["checks"].to_string();
    assert!(
        layers.contains(&source["/dev/".len()..]),
        "no loop layer: {layers}"
    );
    let (code, doc, failing) = run(&without, &here);
    assert_eq!(code, Some(1), "{doc}");
    assert!(
        failing.len() == 1 && failing[0].contains("loop"),
        "the image without loop should fail only the loop layer: {failing:?}"
    );
    // This machine's root device is not the target's root.
    let (code, _, failing) = run(&with_loop, &format!("root={root}"));
    assert_eq!(code, Some(1));
    assert!(
        failing.len() == 1 && failing[0].starts_with("root="),
        "{failing:?}"
    );
}

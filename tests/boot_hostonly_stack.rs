//! Hostonly, the real thing: a guest whose root is on md RAID1 -> LUKS2 -> LVM runs
//! `composer build` with the hostonly profile itself, and that image boots the guest
//! again.
//!
//! The root is made from this machine's programs by composer (the manifest
//! `tests/storage/hostonly-root.toml`: the shell init's programs, cryptsetup, lvm,
//! mdadm, busybox and composer, with their libraries), put on the stack by the makeroot
//! guest of the storage tests, and booted with the generic image and the passphrase
//! typed. Its /sbin/init runs the build script the test hands it with this build's
//! composer (on a third disk): the hostonly image for Debian's kernel (the module tree
//! on a second disk), asks `composer why` and `composer inspect`, and writes all of it
//! as a tar to a third disk the test reads. The test then checks what the image holds
//! and boots it on the same disks. The storage matrix's disks are attached after those
//! four, and the same guest checks the matrix's images against them (`check_matrix`).

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::support::{self, BootOptions, DebianKernel, Scratch};

const PASSPHRASE: &str = "cmp-Hostonly-Pass-2718";
const MD_UUID: &str = "1d0c00f1:2b3e4f50:61728394:a5b6c7d8";
const LUKS_UUID: &str = "5a1e0001-0000-4000-8000-00000000f001";

/// The root's /sbin/init, made once with the root: with composer.phase=build it runs
/// the script the output disk brings (this build's, with this build's composer), else
/// it prints the root's token.
fn guest_init() -> String {
    r#"#!/usr/bin/busybox sh
b=/usr/bin/busybox
$b mount -t proc proc /proc 2>/dev/null
$b mount -t sysfs sysfs /sys 2>/dev/null
$b mount -t devtmpfs devtmpfs /dev 2>/dev/null
DISK_FN
case "$($b cat /proc/cmdline)" in
*composer.phase=build*)
    $b mount -t tmpfs tmpfs /tmp
    $b tar -xf "$(disk out)" -C /tmp && $b sh /tmp/build.sh
    ;;
*)
    echo "COMPOSER-ROOT-OK $($b cat /token) pid=$$"
    ;;
esac
$b poweroff -f
"#
    .replace("DISK_FN\n", support::GUEST_DISK_FN)
}

/// The build the guest runs (from the output disk, beside this build's composer):
/// the hostonly image for Debian's kernel, `composer why` and `composer inspect`,
/// written as a tar over the same disk.
fn guest_build(kver: &str) -> String {
    let variants: Vec<String> = VARIANTS
        .iter()
        .map(|v| format!("{}:{}", v.name, v.exclude))
        .collect();
    let variants = variants.join(" ");
    let matrix = crate::check_matrix::guest_script("$k");
    let disk_fn = support::GUEST_DISK_FN;
    format!(
        r#"b=/usr/bin/busybox
export PATH=/usr/sbin:/usr/bin HOME=/tmp
{disk_fn}$b mount -t tmpfs tmpfs /out
$b mount -o ro "$(disk kmod)" /kmod || echo "HOSTONLY-GUEST: no module disk"
echo 'include = ["hostonly"]' > /tmp/initrd.toml
k="--kver {kver} --kmoddir /kmod/{kver}"
/tmp/composer build $k /tmp/initrd.toml -o /out/hostonly.img --no-sync >/out/build.log 2>&1
echo $? >/out/build.rc
/tmp/composer why $k /tmp/initrd.toml usr/sbin/cryptsetup usr/sbin/lvm usr/sbin/mdadm \
    raid1 dm_crypt etc/crypttab etc/mdadm/mdadm.conf >/out/why.txt 2>&1
/tmp/composer inspect /out/hostonly.img >/out/inspect.txt 2>&1
/tmp/composer check-boot $k --json /out/hostonly.img >/out/check.json 2>/out/check.err
echo $? >/out/check.rc
printf 'include = ["hostonly"]\n[stack]\nfrom_root = false\n' >/tmp/nostack.toml
/tmp/composer build $k /tmp/nostack.toml -o /tmp/nostack.img --no-sync >/out/nostack.log 2>&1
/tmp/composer check-boot $k --json /tmp/nostack.img >/out/check-nostack.json 2>/out/check-nostack.err
echo $? >/out/check-nostack.rc
# The agreement test's images: the hostonly image's tree repacked, each without one
# thing a layer needs, and each checked here, on the stack they are meant for.
$b mkdir -p /tmp/tree /out/variants
/tmp/composer extract --devices -C /tmp/tree /out/hostonly.img >/out/variants.log 2>&1
set -f
for v in {variants}; do
    name=${{v%%:*}} pattern=${{v#*:}}
    if [ "$name" = {NO_KEY_FILE} ]; then
        $b cp /tmp/tree/etc/crypttab /tmp/crypttab.orig
        echo "hostcrypt UUID={LUKS_UUID} /etc/keys/root.key luks,discard" >/tmp/tree/etc/crypttab
    fi
    {{
        printf '[[segment]]\nname = "main"\ncompression = "zstd"\n'
        printf '[[tree]]\nsrc = "/tmp/tree"\ndst = "/"\n'
        [ -z "$pattern" ] || printf 'exclude = ["%s"]\n' "$pattern"
    }} >/tmp/variant.toml
    /tmp/composer build --no-check --no-sync /tmp/variant.toml -o "/out/variants/$name.img" \
        >>/out/variants.log 2>&1 || echo "$name: the build failed" >>/out/variants.log
    /tmp/composer check-boot $k --json "/out/variants/$name.img" \
        >"/out/variants/$name.json" 2>>/out/variants.log
    echo $? >"/out/variants/$name.rc"
    [ "$name" != {NO_KEY_FILE} ] || $b cp /tmp/crypttab.orig /tmp/tree/etc/crypttab
done
set +f
/tmp/composer check-boot $k --any-cpu --json /out/variants/{NO_XTS}.img \
    >/out/variants/{NO_XTS}-any-cpu.json 2>>/out/variants.log
echo $? >/out/variants/{NO_XTS}-any-cpu.rc
{matrix}$b cat /proc/self/mountinfo >/out/mountinfo
out=$(disk out)
(cd /out && $b tar -cf "$out" .)
$b sync
echo "HOSTONLY-GUEST: built, rc $($b cat /out/build.rc)"
"#
    )
}

/// An image of the agreement test: the hostonly image without what `exclude` (a
/// `[[tree]]` pattern) names, and the layer check-boot must fail for it (none: it
/// passes).
struct Variant {
    name: &'static str,
    exclude: &'static str,
    fails: Option<&'static str>,
}

/// The variant whose crypttab names a key file the image lacks: it is booted with
/// no one at the console, as a key file's configuration means.
const NO_KEY_FILE: &str = "no-key-file";
/// The variant without the xts template module.
const NO_XTS: &str = "no-xts";
/// That variant checked with `--any-cpu` and booted on a CPU without AES-NI.
const NO_XTS_NO_AES: &str = "no-xts, no AES-NI";

const VARIANTS: [Variant; 10] = [
    Variant {
        name: "complete",
        exclude: "",
        fails: None,
    },
    Variant {
        name: "no-virtio-blk",
        exclude: "**/virtio_blk.ko*",
        fails: Some("disk"),
    },
    Variant {
        name: "no-raid1",
        exclude: "**/raid1.ko*",
        fails: Some("md array"),
    },
    Variant {
        name: "no-mdadm",
        exclude: "usr/sbin/mdadm",
        fails: Some("md array"),
    },
    Variant {
        name: "no-dm-crypt",
        exclude: "**/dm-crypt.ko*",
        fails: Some("LUKS"),
    },
    Variant {
        name: NO_XTS,
        exclude: "**/xts.ko*",
        fails: Some("LUKS"),
    },
    Variant {
        name: "no-cryptsetup",
        exclude: "usr/sbin/cryptsetup",
        fails: Some("LUKS"),
    },
    Variant {
        name: "no-lvm",
        exclude: "usr/sbin/lvm",
        fails: Some("LVM volume"),
    },
    Variant {
        name: NO_KEY_FILE,
        exclude: "",
        fails: Some("LUKS"),
    },
    Variant {
        name: "no-ext4",
        exclude: "**/ext4.ko*",
        fails: Some("root filesystem"),
    },
];

/// What the makeroot guest runs: md RAID1 -> LUKS2 -> LVM -> ext4 holding the root.
fn makeroot_script() -> String {
    format!(
        r#"n=0
while [ ! -b /dev/vdb ] && [ $n -lt 100 ]; do $b sleep 0.1; n=$((n + 1)); done
run /usr/sbin/mdadm --create --run --assume-clean --homehost=any /dev/md0 --metadata=1.2 \
    --name=hostonly --level=1 --raid-devices=2 --uuid={MD_UUID} /dev/vda /dev/vdb
run /usr/sbin/cryptsetup luksFormat --type luks2 --pbkdf pbkdf2 --pbkdf-force-iterations 1000 \
    --batch-mode --key-file /stage/passfile --uuid {LUKS_UUID} /dev/md0
run /usr/sbin/cryptsetup open --key-file /stage/passfile /dev/md0 hostcrypt
run /usr/sbin/lvm pvcreate -y /dev/mapper/hostcrypt
run /usr/sbin/lvm vgcreate cmphost /dev/mapper/hostcrypt
run /usr/sbin/lvm lvcreate -y -Zn -l 100%FREE -n root cmphost
run /usr/sbin/mke2fs -q -t ext4 -E nodiscard -L cmp-hostonly /dev/cmphost/root
run $b mount /dev/cmphost/root /mnt
cd /mnt && $b cpio -idm < /stage/root.cpio >/tmp/out 2>&1 || {{ $b cat /tmp/out; fail cpio; }}
cd /
run $b umount /mnt
run /usr/sbin/lvm vgchange -an cmphost
run /usr/sbin/cryptsetup close hostcrypt
run /usr/sbin/mdadm --stop /dev/md0
$b sync
echo MAKEROOT-OK
$b poweroff -f
"#
    )
}

/// The two RAID members with the root on them, and the module tree's disk; made once
/// into the test assets. Returns the assets' directory.
/// The guest's disks, made by a makeroot guest on `tool_kernel`, and a disk of
/// `kernel`'s module tree (the platform's, which the guest builds its image for).
fn make_disks(tool_kernel: &DebianKernel, kernel: &DebianKernel) -> Option<PathBuf> {
    for (tool, pkg) in [
        ("cryptsetup", "cryptsetup-bin"),
        ("lvm", "lvm2"),
        ("mdadm", "mdadm"),
        ("thin_check", "thin-provisioning-tools"),
        ("mke2fs", "e2fsprogs"),
        ("tar", "tar"),
    ] {
        support::require_tool(tool, pkg)?;
    }
    support::cached_asset(&format!("hostonly-stack-v4-{}", kernel.version), |dir| {
        fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        let work = dir.join("work");
        let stage = work.join("stage");
        fs::create_dir_all(&stage).map_err(|e| e.to_string())?;
        let token = crate::boot_root::token("hostonly");
        fs::write(work.join("token"), format!("{token}\n")).map_err(|e| e.to_string())?;
        fs::write(dir.join("token"), &token).map_err(|e| e.to_string())?;
        fs::write(work.join("init"), guest_init()).map_err(|e| e.to_string())?;
        // The root's crypttab names the volume as the administrator would.
        fs::write(
            work.join("crypttab"),
            format!("hostcrypt UUID={LUKS_UUID} none luks,discard\n"),
        )
        .map_err(|e| e.to_string())?;
        let manifest =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/storage/hostonly-root.toml");
        let mut build = support::composer();
        build.arg("build").arg(&manifest);
        for (k, v) in [
            ("composer", PathBuf::from(env!("CARGO_BIN_EXE_composer"))),
            ("init", work.join("init")),
            ("token", work.join("token")),
            ("crypttab", work.join("crypttab")),
        ] {
            build.arg("--set").arg(format!("{k}={}", v.display()));
        }
        support::try_run(build.args(["--no-sync", "-o"]).arg(stage.join("root.cpio")))?;
        fs::write(stage.join("passfile"), PASSPHRASE).map_err(|e| e.to_string())?;
        let mut args: Vec<std::ffi::OsString> = Vec::new();
        for name in ["raid-a", "raid-b"] {
            let disk = dir.join(format!("{name}.img"));
            fs::File::create(&disk)
                .and_then(|f| f.set_len(384 << 20))
                .map_err(|e| e.to_string())?;
            args.push("-drive".into());
            args.push(format!("file={},format=raw,if=virtio", disk.display()).into());
        }
        crate::boot_storage::makeroot(
            tool_kernel,
            "makeroot.toml",
            &work,
            &[
                "virtio_pci",
                "virtio_blk",
                "dm-mod",
                "dm-crypt",
                "raid1",
                "algif_skcipher",
                "xts",
                "ext4",
            ],
            &makeroot_script(),
            &stage,
            args,
            2048,
        )?;
        // The module tree, as the guest's composer reads it (`--kmoddir`).
        support::try_run(
            Command::new("mke2fs")
                .args(["-q", "-t", "ext4", "-d"])
                .arg(kernel.modules_dir().parent().unwrap())
                .arg(dir.join("kmod.img"))
                .arg("1G"),
        )?;
        fs::remove_dir_all(&work).map_err(|e| e.to_string())
    })
}

/// The modules an `composer inspect` listing holds.
fn modules(inspect: &str) -> BTreeSet<String> {
    inspect
        .lines()
        .filter(|l| l.contains("lib/modules/") && l.contains(".ko"))
        .filter_map(|l| {
            let file = l.split_whitespace().last()?.rsplit('/').next()?;
            Some(file.split(".ko").next()?.replace('-', "_"))
        })
        .collect()
}

#[test]
fn hostonly_inside_a_guest_on_raid1_luks_lvm_builds_an_image_that_boots_it() {
    let Some((_, tool_kernel, busybox)) = support::require_boot_env() else {
        return;
    };
    let Some((_, kernel, _)) = support::require_platform_env() else {
        return;
    };
    if !support::require_root() {
        return;
    }
    let Some(dir) = make_disks(&tool_kernel, &kernel) else {
        return;
    };
    // The storage matrix's disks, checked in the same guest (`check_matrix`).
    let Some(matrix_disks) = crate::boot_storage::disks(&tool_kernel, &busybox) else {
        return;
    };
    let token = fs::read_to_string(dir.join("token")).unwrap();
    let scratch = Scratch::new("hostonly-stack");
    // The output disk first brings the guest this build's composer and script.
    let out = scratch.join("out.tar");
    let tools = scratch.join("tools");
    fs::create_dir_all(&tools).unwrap();
    fs::copy(env!("CARGO_BIN_EXE_composer"), tools.join("composer")).unwrap();
    fs::write(tools.join("build.sh"), guest_build(&kernel.version)).unwrap();
    let matrix_images = crate::check_matrix::images(&kernel, &matrix_disks, &scratch);
    let matrix = tools.join("matrix");
    fs::create_dir_all(&matrix).unwrap();
    for (name, img) in &matrix_images {
        fs::copy(img, matrix.join(format!("{name}.img"))).unwrap();
    }
    fs::copy(matrix_disks.keyfile(), matrix.join("keyfile")).unwrap();
    crate::check_matrix::module_tree(&kernel, &scratch, &matrix.join("kroot"));
    support::run_ok(
        Command::new("tar")
            .arg("-cf")
            .arg(&out)
            .arg("-C")
            .arg(&tools)
            .args(["composer", "build.sh", "matrix"]),
    );
    fs::OpenOptions::new()
        .write(true)
        .open(&out)
        .and_then(|f| f.set_len(768 << 20))
        .unwrap();
    let mut args: Vec<std::ffi::OsString> = Vec::new();
    // The guest finds its disks by their serials: the generic image's init loads
    // the disks' drivers side by side, so their names may not follow this order.
    for name in ["raid-a", "raid-b", "kmod"] {
        let disk = dir.join(format!("{name}.img"));
        args.extend(support::virtio_disk(&disk, name, ",snapshot=on"));
    }
    args.extend(support::virtio_disk(&out, "out", ""));
    let mut build_args = args.clone();
    build_args.extend(crate::check_matrix::all_disks(&matrix_disks));
    let stack = format!("root=/dev/cmphost/root rd.luks.uuid={LUKS_UUID} rd.timeout=120");
    let answers = vec![(
        "Enter passphrase for".to_string(),
        format!("{PASSPHRASE}\n"),
    )];
    // The generic image boots the guest, whose init builds the hostonly image.
    let generic = support::generic_image(&kernel, "shell");
    let r = support::qemu_boot_with(
        &kernel,
        &generic,
        &BootOptions {
            memory_mib: 2048,
            // Only the guest's own stack comes up in its initrd; its build script
            // brings up the matrix's.
            extra_append: format!(
                "{stack} rd.md.uuid={MD_UUID} rd.lvm.vg=cmphost composer.phase=build"
            ),
            extra_args: build_args,
            timeout: Duration::from_secs(900),
            answers: answers.clone(),
            ..BootOptions::default()
        },
    );
    eprintln!(
        "--- build in the guest ({:.1} s) ---\n{}",
        r.elapsed.as_secs_f64(),
        r.console
    );
    assert!(
        r.console.contains("HOSTONLY-GUEST: built"),
        "the guest did not get to build"
    );
    let got = scratch.join("got");
    fs::create_dir_all(&got).unwrap();
    support::run_ok(Command::new("tar").arg("-xf").arg(&out).arg("-C").arg(&got));
    let read = |n: &str| fs::read_to_string(got.join(n)).unwrap_or_default();
    eprintln!(
        "--- build.log ---\n{}\n--- why ---\n{}\n--- mountinfo ---\n{}",
        read("build.log"),
        read("why.txt"),
        read("mountinfo")
    );
    assert_eq!(
        read("build.rc").trim(),
        "0",
        "the hostonly build failed in the guest"
    );
    let inspect = read("inspect.txt");
    // The stack's programs and modules, and no storage driver the guest lacks.
    for program in ["usr/sbin/cryptsetup", "usr/sbin/lvm", "usr/sbin/mdadm"] {
        assert!(
            inspect.lines().any(|l| l.trim_end().ends_with(program)),
            "the hostonly image has no {program}"
        );
    }
    for config in ["etc/crypttab", "etc/mdadm/mdadm.conf", "etc/lvm/lvm.conf"] {
        assert!(
            inspect.lines().any(|l| l.trim_end().ends_with(config)),
            "the hostonly image has no {config}"
        );
    }
    let mods = modules(&inspect);
    eprintln!("hostonly modules: {mods:?}");
    for m in ["dm_crypt", "raid1", "virtio_blk", "ext4"] {
        assert!(mods.contains(m), "the hostonly image lacks {m}");
    }
    for other in [
        "ahci",
        "nvme",
        "sd_mod",
        "virtio_scsi",
        "raid456",
        "raid10",
        "dm_thin_pool",
        "btrfs",
        "xfs",
        "usb_storage",
        "mptsas",
    ] {
        assert!(
            !mods.contains(other),
            "the hostonly image has {other}, which the guest does not use"
        );
    }
    // check-boot, in the guest, on its own stack: the hostonly image brings up every
    // layer; without `[stack]` (no cryptsetup, lvm, mdadm) the md, LUKS and LVM layers
    // fail, each naming its programs, and the disks and the filesystem still pass.
    eprintln!(
        "--- check-boot ---\n{}{}\n--- check-boot without [stack] ---\n{}",
        read("check.json"),
        read("check.err"),
        read("check-nostack.json")
    );
    assert_eq!(
        read("check.rc").trim(),
        "0",
        "check-boot fails the hostonly image"
    );
    assert_eq!(
        read("check-nostack.rc").trim(),
        "1",
        "check-boot passes the image without the stack's programs"
    );
    let doc: serde_json::Value = serde_json::from_str(&read("check-nostack.json")).unwrap();
    let checks = doc["checks"].as_array().unwrap();
    let failing = |prefix: &str, program: &str| {
        checks.iter().any(|c| {
            c["layer"].as_str().unwrap_or("").starts_with(prefix)
                && c["missing"]
                    .to_string()
                    .contains(&format!("program {program}"))
        })
    };
    assert!(failing("md array", "mdadm"), "no md layer naming mdadm");
    assert!(
        failing("LUKS", "cryptsetup"),
        "no LUKS layer naming cryptsetup"
    );
    assert!(failing("LVM volume", "lvm"), "no LVM layer naming lvm");
    for c in checks {
        let layer = c["layer"].as_str().unwrap_or("");
        if layer.starts_with("disk") || layer.starts_with("root filesystem") || layer == "init" {
            assert_eq!(
                c["missing"].as_array().map(Vec::len),
                Some(0),
                "{layer} fails: {c}"
            );
        }
    }
    // `composer why` names the layer behind the stack's modules, programs and files:
    // one block per target, from its `/path (size)` line to the next.
    let why = read("why.txt");
    let mut blocks: Vec<String> = Vec::new();
    for l in why.lines() {
        if l.starts_with('/') {
            blocks.push(String::new());
        }
        if let Some(b) = blocks.last_mut() {
            b.push_str(l);
            b.push('\n');
        }
    }
    for (target, layer) in [
        ("/usr/sbin/cryptsetup", "LUKS luks-"),
        ("/usr/sbin/lvm", "LVM volume cmphost/root"),
        ("/usr/sbin/mdadm", "md array md127 (raid1, 1.2)"),
        ("/raid1.ko", "md array md127 (raid1, 1.2)"),
        ("/dm-crypt.ko", "LUKS luks-"),
        ("/etc/crypttab", "[stack]"),
        ("/etc/mdadm/mdadm.conf", "[stack]"),
    ] {
        let block = blocks
            .iter()
            .find(|b| {
                // A module as its tree ships it: `raid1.ko`, or compressed `raid1.ko.xz`.
                b.lines().next().is_some_and(|h| {
                    let path = h.split(' ').next().unwrap_or("");
                    path.ends_with(target)
                        || target.ends_with(".ko") && path.contains(&format!("{target}."))
                })
            })
            .unwrap_or_else(|| panic!("`composer why` does not explain {target}:\n{why}"));
        assert!(
            block.contains(layer),
            "`composer why` gives {target} no `{layer}`:\n{block}"
        );
    }

    // The hostonly image boots the guest it was built in.
    let image = got.join("hostonly.img");
    let r = support::qemu_boot_with(
        &kernel,
        &image,
        &BootOptions {
            memory_mib: 1024,
            extra_append: stack,
            extra_args: args[..6].to_vec(),
            timeout: Duration::from_secs(600),
            answers: answers.clone(),
            ..BootOptions::default()
        },
    );
    eprintln!(
        "--- hostonly boot ({:.1} s) ---\n{}",
        r.elapsed.as_secs_f64(),
        r.console
    );
    assert!(
        r.console
            .contains(&format!("COMPOSER-ROOT-OK {token} pid=1")),
        "the hostonly image did not boot the guest it was built in"
    );
    assert!(
        !r.console.contains(PASSPHRASE),
        "the passphrase shows on the console"
    );

    agreement(&kernel, &got, &args[..6], &token, &answers);
    crate::check_matrix::agree(&kernel, &matrix_disks, &got, &matrix_images);
}

/// The agreement test: every variant image is both checked (in the guest, on its own
/// stack) and booted on that stack; check-boot's verdict must be the boot's outcome.
fn agreement(
    kernel: &DebianKernel,
    got: &Path,
    disks: &[std::ffi::OsString],
    token: &str,
    answers: &[(String, String)],
) {
    let read = |n: &str| fs::read_to_string(got.join(n)).unwrap_or_default();
    eprintln!("--- variants.log ---\n{}", read("variants.log"));
    // Each variant's check: bootable, or failing exactly the layer it lacks.
    let mut checked = Vec::new();
    for v in &VARIANTS {
        let json = read(&format!("variants/{}.json", v.name));
        let rc = read(&format!("variants/{}.rc", v.name));
        let doc: serde_json::Value = serde_json::from_str(&json)
            .unwrap_or_else(|e| panic!("{}: check-boot --json: {e}: {json}", v.name));
        let failing = support::failing_layers(&doc);
        // Without the xts template, a kernel that serves xts(aes) whole from a module
        // the image holds (aesni_intel on a CPU with AES-NI, as TCG's `-cpu max` is)
        // still opens the volume, and the check must say that instead.
        let served_whole = json.contains("served whole by");
        match v.fails {
            Some(_) if v.name == NO_XTS && served_whole => assert!(
                failing.is_empty(),
                "{}: served whole, yet fails {failing:?}",
                v.name
            ),
            None => assert!(failing.is_empty(), "{}: fails {failing:?}", v.name),
            Some(layer) => assert!(
                !failing.is_empty() && failing.iter().all(|f| f.starts_with(layer)),
                "{}: should fail only `{layer}`, fails {failing:?}:\n{json}",
                v.name
            ),
        }
        assert_eq!(
            rc.trim(),
            if failing.is_empty() { "0" } else { "1" },
            "{}",
            v.name
        );
        checked.push((v.name, doc["bootable"] == true, failing));
    }
    // Without AES-NI the kernel needs the xts template: `--any-cpu` checks for such a
    // CPU, and the image without xts must then fail the LUKS layer, naming xts.
    let json = read("variants/no-xts-any-cpu.json");
    let doc: serde_json::Value = serde_json::from_str(&json)
        .unwrap_or_else(|e| panic!("no-xts --any-cpu: check-boot --json: {e}: {json}"));
    let failing = support::failing_layers(&doc);
    assert!(
        failing.len() == 1 && failing[0].starts_with("LUKS") && json.contains("(crypto-xts)"),
        "no-xts --any-cpu should fail the LUKS layer naming xts: {json}"
    );
    assert_eq!(read("variants/no-xts-any-cpu.rc").trim(), "1");
    checked.push((NO_XTS_NO_AES, false, failing));
    // Each variant booted, two at a time; a failing one stops at the emergency shell.
    let append = format!("root=/dev/cmphost/root rd.luks.uuid={LUKS_UUID} rd.timeout=20");
    // The images booted, in `checked`'s order: each variant on TCG's `max` CPU (with
    // AES-NI), and the one without xts again on a CPU without AES-NI.
    let boots: Vec<(&str, &str, &str)> = VARIANTS
        .iter()
        .map(|v| (v.name, v.name, "max"))
        .chain([(NO_XTS_NO_AES, NO_XTS, "max,-aes")])
        .collect();
    let booted: Vec<(bool, Option<&str>, f64)> = std::thread::scope(|s| {
        let handles: Vec<_> = boots
            .iter()
            .map(|&(name, file, cpu)| {
                let image = got.join(format!("variants/{file}.img"));
                // A key file's configuration has no one to type: a prompt ends it.
                let unattended = name == NO_KEY_FILE;
                let opts = BootOptions {
                    memory_mib: 1024,
                    extra_append: append.clone(),
                    extra_args: disks.to_vec(),
                    // A good boot takes about 20 s; an unlock that fails asks for
                    // the passphrase again until the timeout ends it.
                    timeout: Duration::from_secs(120),
                    answers: if unattended {
                        Vec::new()
                    } else {
                        answers.to_vec()
                    },
                    stop_when: Some(
                        if unattended {
                            "Enter passphrase for"
                        } else {
                            "starting an emergency shell"
                        }
                        .to_string(),
                    ),
                    cpu: cpu.to_string(),
                    ..BootOptions::default()
                };
                s.spawn(move || {
                    let r = support::qemu_boot_with(kernel, &image, &opts);
                    let ok = r
                        .console
                        .contains(&format!("COMPOSER-ROOT-OK {token} pid=1"));
                    let stop = support::initrd_stop(&r.console, opts.answers.len());
                    if !ok {
                        let tail: Vec<&str> = r.console.lines().rev().take(15).collect();
                        let tail: Vec<&str> = tail.into_iter().rev().collect();
                        eprintln!("--- {name} boot ---\n{}", tail.join("\n"));
                    }
                    (ok, stop, r.elapsed.as_secs_f64())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut table = String::from("| image | check-boot | boot | agree |\n|:---|:---|:---|:---|\n");
    let mut disagree = Vec::new();
    let mut unexplained = Vec::new();
    for ((name, bootable, failing), (ok, stop, secs)) in checked.iter().zip(&booted) {
        let (verdict, boot, explained) =
            support::agreement_cells(*bootable, failing, *ok, *stop, *secs);
        if !explained {
            unexplained.push(*name);
        }
        table.push_str(&format!(
            "| {name} | {verdict} | {boot} | {} |\n",
            if bootable == ok { "yes" } else { "NO" }
        ));
        if bootable != ok {
            disagree.push(*name);
        }
    }
    eprintln!("--- check-boot against the boot ---\n{table}");
    assert!(
        disagree.is_empty(),
        "check-boot and the boot disagree on {disagree:?}"
    );
    // A boot that did not reach the root must show where it stopped: a hang or a
    // crash is not the failure the check predicts.
    assert!(
        unexplained.is_empty(),
        "boots that stopped without saying why: {unexplained:?}"
    );
}

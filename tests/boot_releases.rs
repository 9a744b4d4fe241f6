//! The releases people run, each booted with its own kernel in QEMU: Debian 13 (systemd
//! 257, kernel 6.12, modules `.ko.xz`; the platform of every other boot test), Debian
//! unstable (systemd 262, kernel 7.x, a util-linux without `switch_root`) and Debian 12
//! (systemd 252, kernel 6.1). The default image (the root's own systemd, with what
//! systemd 255 and later need beyond their units) and the shell init's image are built
//! from each root as it is, with no `[omit]` and no extra package, and must bring up the
//! root's own systemd on the release's kernel (the default image inside a UKI on the
//! release's own systemd-boot stub, started by OVMF). Unstable's and Debian 12's roots
//! are in a LUKS2 volume: each init asks for the passphrase and boots (Debian 12's smoke
//! set: a root by UUID, a LUKS2 prompt and a UKI, in both inits). A root whose systemd
//! lacks its executor, or a unit's program, is refused at build time (or given the shell
//! init under `init = "auto"`, which says why), and check-boot says "no" for an image
//! that lacks the executor, naming it.

use std::fs;
use std::path::Path;
use std::time::Duration;

use crate::support::release::{linked_copy, release_root, Release, ReleaseRoot, ROOT_UUID};
use crate::support::{self, BootOptions, Scratch};

fn drive(disk: &Path) -> String {
    format!("file={},format=raw,snapshot=on,if=virtio", disk.display())
}

/// The command line of every boot here.
fn cmdline() -> String {
    format!("root=UUID={ROOT_UUID} rd.timeout=240")
}

/// The LUKS2 volume of the unstable root's disk.
const LUKS_UUID: &str = "5a1e0014-0000-4000-8000-0000000014e1";

/// The disk the boots of `root` mount: its ext4 disk, or for a release whose boots
/// unlock their root, that filesystem inside a LUKS2 volume (made in a makeroot guest:
/// this host has no device-mapper), with the passphrase each init asks for.
struct Disk {
    path: std::path::PathBuf,
    luks: bool,
}

/// The root of `root` without what a boot does not read (its kernel's modules, /boot,
/// documentation, apt's lists), as ext4 inside a LUKS2 volume; made once.
fn luks_disk(root: &ReleaseRoot) -> Option<std::path::PathBuf> {
    let (_, host_kernel, _) = support::require_boot_env()?;
    let asset = root.disk.parent().and_then(|d| d.file_name()).map(|n| {
        n.to_string_lossy()
            .replace("release-root-", "release-luks-")
    })?;
    support::cached_asset(&asset, |tmp| {
        let work = tmp.join("work");
        let stage = work.join("stage");
        fs::create_dir_all(&stage).map_err(|e| e.to_string())?;
        let trim = linked_copy(&root.dir, &work);
        for d in [
            "usr/lib/modules",
            "boot",
            "usr/share/doc",
            "usr/share/man",
            "usr/share/locale",
            "var/cache/apt",
            "var/lib/apt/lists",
        ] {
            let _ = fs::remove_dir_all(trim.join(d));
        }
        let fs_img = work.join("fs.img");
        support::try_run(
            std::process::Command::new("mke2fs")
                .args(["-q", "-t", "ext4", "-d"])
                .arg(&trim)
                .args(["-U", ROOT_UUID, "-L", "cmp-release"])
                .arg(&fs_img)
                .arg("256M"),
        )?;
        fs::remove_dir_all(&trim).map_err(|e| e.to_string())?;
        fs::write(stage.join("passfile"), crate::boot_storage::PASSPHRASE)
            .map_err(|e| e.to_string())?;
        let disk = tmp.join("luks.img");
        fs::File::create(&disk)
            .and_then(|f| f.set_len((256 + 32) << 20))
            .map_err(|e| e.to_string())?;
        let body = format!(
            r#"n=0
while [ ! -b /dev/vdb ] && [ $n -lt 100 ]; do $b sleep 0.1; n=$((n + 1)); done
echo "makeroot: the release's root in LUKS2"
run /usr/sbin/cryptsetup luksFormat --type luks2 --pbkdf pbkdf2 --pbkdf-force-iterations 1000 --batch-mode --key-file /stage/passfile --uuid {LUKS_UUID} /dev/vda
run /usr/sbin/cryptsetup open --key-file /stage/passfile /dev/vda rel
run $b dd if=/dev/vdb of=/dev/mapper/rel bs=1M
run /usr/sbin/cryptsetup close rel
$b sync
echo MAKEROOT-OK
$b poweroff -f
"#
        );
        let args = vec![
            "-drive".into(),
            format!("file={},format=raw,if=virtio", disk.display()).into(),
            "-drive".into(),
            format!("file={},format=raw,if=virtio,readonly=on", fs_img.display()).into(),
        ];
        crate::boot_storage::makeroot(
            &host_kernel,
            "makeroot.toml",
            &work,
            &["virtio_pci", "virtio_blk", "dm-mod", "dm-crypt", "algif_skcipher", "xts"],
            &body,
            &stage,
            args,
            1024,
        )?;
        fs::remove_dir_all(&work).map_err(|e| e.to_string())
    })
    .map(|d| d.join("luks.img"))
}

/// Boots `image` (an initrd given to the kernel, or with `uefi` an ESP holding a UKI)
/// with the release's kernel and its root disk; asserts the root's own systemd came up
/// on it (after the passphrase, for a LUKS disk).
fn boots(
    root: &ReleaseRoot,
    disk: &Disk,
    image: &Path,
    init: &str,
    uefi: Option<support::Uefi>,
    what: &str,
) {
    let opts = BootOptions {
        memory_mib: 1024,
        extra_append: cmdline(),
        extra_args: vec!["-drive".into(), drive(&disk.path).into()],
        timeout: Duration::from_secs(600),
        answers: if disk.luks {
            crate::boot_storage::passphrase(init, 1)
        } else {
            Vec::new()
        },
        uefi,
        ..BootOptions::default()
    };
    let r = support::qemu_boot_with(&root.kernel, image, &opts);
    let want = root.marker();
    eprintln!(
        "--- {} {what} ({:.1} s) ---\n{}",
        root.release.suite(),
        r.elapsed.as_secs_f64(),
        r.console
    );
    assert!(
        support::console_shows(&r.console, &want),
        "{} {what}: no `{want}` on the console (timed out: {})",
        root.release.suite(),
        r.timed_out
    );
}

/// The default image and the shell init's image of `release`, built from its root as
/// it is, boot it; the default one is the systemd init with its executor, and boots
/// as a UKI on the release's own stub, started by OVMF from an ESP.
fn both_inits_boot(release: Release) {
    let Some(root) = release_root(release) else {
        return;
    };
    if support::require_qemu().is_none() || crate::uki::uefi_env().is_none() {
        return;
    }
    let dir = Scratch::new(&format!("release-{}", release.suite()));
    let default = dir.join("default.img");
    let out = support::run_ok(root.build().arg("-o").arg(&default));
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    let paths = support::image_paths(&default);
    let has = |p: &str| paths.iter().any(|x| x == p);
    let version = root.systemd_version().expect("the root's systemd version");
    // systemd 255 and later start their units through the executor.
    assert!(
        has("etc/initrd-release") && has("usr/lib/systemd/systemd-executor") == (version >= 255),
        "{}: the default image is not the systemd init of systemd {version}:\n{said}",
        release.suite()
    );
    assert!(
        version
            >= if release == Release::Bookworm {
                252
            } else {
                257
            },
        "systemd {version}"
    );
    // What these versions pull into sysinit.target that an initrd has no use for.
    assert!(
        !has("usr/lib/systemd/system/sysinit.target.wants/ldconfig.service"),
        "ldconfig.service would run in the initrd"
    );
    // The modules stay compressed as the release ships them (Debian 13 and later).
    let ext = if release == Release::Bookworm {
        ".ko"
    } else {
        ".ko.xz"
    };
    assert!(
        paths
            .iter()
            .any(|p| p.ends_with(&format!("/virtio_blk{ext}"))),
        "{}: no virtio_blk{ext} in the image",
        release.suite()
    );

    let manifest = dir.join("shell.toml");
    fs::write(&manifest, "include = [\"generic\"]\ninit = \"shell\"\n").unwrap();
    let shell = dir.join("shell.img");
    let out = support::run_ok(root.build().arg(&manifest).arg("-o").arg(&shell));
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    let has_switch_root = ["usr/sbin/switch_root", "sbin/switch_root"]
        .iter()
        .any(|p| root.dir.join(p).exists());
    if !has_switch_root {
        // The applet stands in for the program, and the build says so.
        assert!(
            said.contains("the root has no `switch_root` program: busybox's applet taken"),
            "{said}"
        );
        let paths = support::image_paths(&shell);
        assert!(
            paths.iter().any(|p| p == "usr/bin/switch_root")
                && paths.iter().any(|p| p == "usr/bin/busybox"),
            "no switch_root applet in the shell image"
        );
    }
    // The default image in a UKI on the release's stub (its .uname, .sbat and the
    // sections of its version), with the command line only the UKI carries.
    let stub = root.dir.join("usr/lib/systemd/boot/efi/linuxx64.efi.stub");
    let uki = dir.join("default.efi");
    let line = format!("console=ttyS0 panic=-1 {}", cmdline());
    support::run_ok(
        root.build()
            .args(["--uki", "--stub"])
            .arg(&stub)
            .arg("--kernel")
            .arg(&root.kernel.vmlinuz)
            .args(["--cmdline", &line])
            .arg("-o")
            .arg(&uki),
    );
    let listing = support::run_ok(support::composer().args(["inspect", "--json"]).arg(&uki));
    let doc: serde_json::Value = serde_json::from_slice(&listing.stdout).unwrap();
    assert_eq!(doc["uki"]["cmdline"], line.as_str());
    assert_eq!(doc["uki"]["uname"], root.kernel.version.as_str());
    let esp = crate::uki::esp(&dir, "default", &uki);
    let uefi = crate::uki::firmware(&dir, "default", false);
    let disk = match release {
        // Unstable's and Debian 12's boots unlock their root: their smoke set is a
        // LUKS2 root, prompted for in both inits, and the default image in a UKI.
        Release::Sid | Release::Bookworm => {
            let Some(path) = luks_disk(&root) else {
                return;
            };
            Disk { path, luks: true }
        }
        Release::Trixie => Disk {
            path: root.disk.clone(),
            luks: false,
        },
    };
    boots(
        &root,
        &disk,
        &esp,
        "systemd",
        Some(uefi),
        "default image (systemd) in a UKI",
    );
    boots(&root, &disk, &shell, "shell", None, "shell init");
}

#[test]
fn debian_13_boots_with_the_default_image_and_the_shell_init() {
    both_inits_boot(Release::Trixie);
}

#[test]
fn debian_12_boots_with_the_default_image_and_the_shell_init() {
    both_inits_boot(Release::Bookworm);
}

#[test]
fn debian_unstable_boots_with_the_default_image_and_the_shell_init() {
    both_inits_boot(Release::Sid);
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A Debian 13 root whose systemd lacks what it needs: its executor (systemd 255 and
/// later), a unit's program, or systemd-cryptsetup (a package of its own from Debian 13
/// on) with cryptsetup present. `init = "systemd"` is refused naming the file, `auto`
/// takes the shell init and says why, and no image is written where the build refuses
/// (an image already there is kept).
#[test]
fn a_root_whose_systemd_cannot_start_is_refused_or_given_the_shell_init() {
    let Some(root) = release_root(Release::Trixie) else {
        return;
    };
    let dir = Scratch::new("release-lacks");
    let systemd = dir.join("systemd.toml");
    fs::write(&systemd, "include = [\"generic\"]\ninit = \"systemd\"\n").unwrap();
    let out_path = dir.join("initrd.img");
    let build = |root_dir: &Path, manifest: Option<&Path>| {
        let mut cmd = support::composer();
        cmd.args(["build", "--no-sync", "--kver", &root.kernel.version])
            .arg("--root")
            .arg(root_dir);
        if let Some(m) = manifest {
            cmd.arg(m);
        }
        support::run(cmd.arg("-o").arg(&out_path))
    };

    for (file, package) in [
        ("usr/lib/systemd/systemd-executor", "systemd 257"),
        (
            "usr/lib/systemd/systemd-cryptsetup",
            "Debian's systemd-cryptsetup package",
        ),
    ] {
        let copy_dir = Scratch::new("release-lacks-root");
        let copy = linked_copy(&root.dir, copy_dir.path());
        fs::remove_file(copy.join(file)).unwrap();
        let _ = fs::remove_file(&out_path);
        let out = build(&copy, Some(&systemd));
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(
            err.contains(&format!("/{file}")) && err.contains(package),
            "the refusal does not name /{file} ({package}):\n{err}"
        );
        assert!(!out_path.exists(), "an image was written");
        // "auto" (the default configuration) takes the shell init and says why.
        let out = build(&copy, None);
        let err = stderr(&out);
        assert!(out.status.success(), "{err}");
        assert!(
            err.contains("init = \"auto\": the shell init") && err.contains(&format!("/{file}")),
            "auto does not say why it took the shell init:\n{err}"
        );
        let paths = support::image_paths(&out_path);
        assert!(
            paths.iter().any(|p| p == "usr/lib/composer/api.fstab")
                && !paths.iter().any(|p| p == "etc/initrd-release"),
            "not the shell init"
        );
    }

    // A unit's program the root lacks: the build is refused, naming it and its unit,
    // and the image already there is kept.
    let copy_dir = Scratch::new("release-lacks-root");
    let copy = linked_copy(&root.dir, copy_dir.path());
    fs::remove_file(copy.join("usr/lib/systemd/systemd-journald")).unwrap();
    fs::write(&out_path, b"the image before").unwrap();
    let out = build(&copy, None);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("not written: the image's PID 1 (systemd 257) cannot start")
            && err.contains("program /usr/lib/systemd/systemd-journald (ExecStart= of systemd-journald.service)"),
        "{err}"
    );
    assert_eq!(fs::read(&out_path).unwrap(), b"the image before");
}

/// check-boot judges an image without the executor (written to standard output, which
/// the build cannot read back) from the image alone: "no", naming it; and "yes" for
/// the whole one.
#[test]
fn check_boot_names_the_executor_a_debian_13_image_lacks() {
    let Some(root) = release_root(Release::Trixie) else {
        return;
    };
    let dir = Scratch::new("release-check-boot");
    let omit = dir.join("omit.toml");
    fs::write(
        &omit,
        "include = [\"generic\"]\ninit = \"systemd\"\n\n[omit]\nfiles = [\"/usr/lib/systemd/systemd-executor\"]\n",
    )
    .unwrap();
    let lacking = dir.join("lacking.img");
    let out = support::run_ok(
        root.build()
            .arg(&omit)
            .arg("-o")
            .arg("-")
            .stdout(fs::File::create(&lacking).unwrap()),
    );
    assert!(out.status.success());
    let whole = dir.join("whole.img");
    support::run_ok(root.build().arg("-o").arg(&whole));
    let pid1 = |image: &Path| {
        let out = support::run(
            support::composer()
                .args(["check-boot", "--json", "--kver", &root.kernel.version])
                .arg("--kmoddir")
                .arg(root.kernel.modules_dir())
                .arg("--kernel-cmdline")
                .arg(format!("root=UUID={ROOT_UUID}"))
                .arg(image),
        );
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("check-boot --json: {e}: {}", stderr(&out)));
        let check = doc["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["layer"].as_str().is_some_and(|l| l.starts_with("PID 1")))
            .cloned()
            .expect("a PID 1 line");
        (out.status.code(), doc["bootable"].as_bool(), check)
    };
    let (code, bootable, check) = pid1(&lacking);
    assert_eq!(code, Some(1), "{check}");
    assert_eq!(bootable, Some(false));
    assert_eq!(check["layer"], "PID 1 (systemd 257)");
    let missing = check["missing"].to_string();
    assert!(
        missing.contains("/usr/lib/systemd/systemd-executor (systemd 257 needs it since 255"),
        "{missing}"
    );
    let (_, _, check) = pid1(&whole);
    assert_eq!(check["missing"], serde_json::json!([]), "{check}");
}

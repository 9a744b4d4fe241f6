//! /usr on its own filesystem, mounted by the initrd before the switch: from the root's
//! fstab (both inits) and from `mount.usr=` (both inits). The root's /sbin/init runs from
//! the root filesystem and prints what is mounted on /usr and the token only the /usr
//! filesystem holds; a boot that switched without /usr prints `usr=none`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::support::{self, BootOptions, DebianKernel};

const ROOT_FSTAB_UUID: &str = "5d0c1b2a-3e4f-4a5b-8c6d-7e8f9a0b1c2d";
const ROOT_BARE_UUID: &str = "5d0c1b2a-3e4f-4a5b-8c6d-7e8f9a0b1c2e";
const USR_UUID: &str = "7a6b5c4d-3e2f-4a1b-9c8d-7e6f5a4b3c2d";

/// The three disks: a root whose fstab names /usr, a root whose fstab does not, and the
/// /usr filesystem. Made once into the test assets; returns (dir, usr token).
fn disks(busybox: &Path) -> Option<(PathBuf, String)> {
    support::require_tool("mke2fs", "e2fsprogs")?;
    let dir = support::cached_asset("usr-disks-v1", |tmp| {
        fs::create_dir_all(tmp).map_err(|e| e.to_string())?;
        let work = tmp.join("work");
        for (name, uuid, fstab) in [
            (
                "root-fstab",
                ROOT_FSTAB_UUID,
                format!("UUID={USR_UUID} /usr ext4 ro 0 2\n"),
            ),
            ("root-bare", ROOT_BARE_UUID, String::new()),
        ] {
            let s = crate::boot_root::staging(&work.join(name), busybox, name);
            fs::create_dir_all(s.join("usr")).map_err(|e| e.to_string())?;
            fs::write(s.join("etc/fstab"), fstab).map_err(|e| e.to_string())?;
            fs::write(
                s.join("sbin/init"),
                "#!/bin/busybox sh\n\
                 b=/bin/busybox\n\
                 $b mount -t proc proc /proc 2>/dev/null\n\
                 u=none\n\
                 $b test -f /usr/share/composer/usr-token && u=$($b cat /usr/share/composer/usr-token)\n\
                 f=$($b awk '$2 == \"/usr\" { t = $3 } END { print t }' /proc/mounts)\n\
                 echo \"COMPOSER-USR usr=$u usrfs=${f:-none} root=$($b cat /token) pid=$$\"\n\
                 $b poweroff -f\n",
            )
            .map_err(|e| e.to_string())?;
            support::run_ok(
                Command::new("mke2fs")
                    .args(["-q", "-t", "ext4", "-d"])
                    .arg(&s)
                    .args(["-U", uuid])
                    .arg(tmp.join(format!("{name}.img")))
                    .arg("16M"),
            );
        }
        let token = crate::boot_root::token("usr");
        let u = work.join("usr");
        fs::create_dir_all(u.join("share/composer")).map_err(|e| e.to_string())?;
        fs::write(u.join("share/composer/usr-token"), format!("{token}\n"))
            .map_err(|e| e.to_string())?;
        support::run_ok(
            Command::new("mke2fs")
                .args(["-q", "-t", "ext4", "-d"])
                .arg(&u)
                .args(["-U", USR_UUID])
                .arg(tmp.join("usr.img"))
                .arg("8M"),
        );
        fs::write(tmp.join("token"), &token).map_err(|e| e.to_string())?;
        fs::remove_dir_all(&work).map_err(|e| e.to_string())
    })?;
    let token = fs::read_to_string(dir.join("token")).unwrap();
    Some((dir, token))
}

fn drive(path: &Path) -> [String; 2] {
    [
        "-drive".into(),
        format!("file={},if=virtio,format=raw,snapshot=on", path.display()),
    ]
}

fn boot(
    kernel: &DebianKernel,
    image: &Path,
    dir: &Path,
    root: &str,
    append: &str,
    init: &str,
) -> String {
    let mut args: Vec<String> = Vec::new();
    args.extend(drive(&dir.join(format!("{root}.img"))));
    args.extend(drive(&dir.join("usr.img")));
    let sd = if init == "systemd" {
        " systemd.show_status=1 systemd.default_timeout_start_sec=120"
    } else {
        ""
    };
    let opts = BootOptions {
        memory_mib: 1024,
        extra_append: format!("{append} rd.timeout=60{sd}"),
        extra_args: args.iter().map(Into::into).collect(),
        timeout: Duration::from_secs(if init == "systemd" { 600 } else { 300 }),
        ..BootOptions::default()
    };
    let r = support::qemu_boot_with(kernel, image, &opts);
    eprintln!(
        "--- {init}: {root} {append} ({:.1} s) ---\n{}",
        r.elapsed.as_secs_f64(),
        r.console
    );
    r.console
}

fn usr_is_mounted_before_the_switch(init: &str) {
    let Some((_, kernel, busybox)) = support::require_platform_env() else {
        return;
    };
    if !support::require_root() {
        return;
    }
    if init == "systemd" && support::require_tool("udevadm", "udev").is_none() {
        return;
    }
    let Some((dir, token)) = disks(&busybox) else {
        return;
    };
    let image = support::generic_image(&kernel, init);
    let want = format!("COMPOSER-USR usr={token} usrfs=ext4 ");
    let mut failed = Vec::new();
    for (root, append) in [
        ("root-fstab", format!("root=UUID={ROOT_FSTAB_UUID}")),
        (
            "root-bare",
            format!("root=UUID={ROOT_BARE_UUID} mount.usr=UUID={USR_UUID} mount.usrfstype=ext4 mount.usrflags=ro"),
        ),
    ] {
        let console = boot(&kernel, &image, &dir, root, &append, init);
        if !console.lines().any(|l| l.contains(&want) && l.contains(&format!("root={root} pid=1"))) {
            failed.push(format!("{root} ({append}): no `{want}... root={root} pid=1`"));
        }
    }
    assert!(failed.is_empty(), "{init}: {}", failed.join("; "));
}

#[test]
fn shell_init_mounts_usr_from_fstab_and_mount_usr() {
    usr_is_mounted_before_the_switch("shell");
}

#[test]
fn systemd_mounts_usr_from_fstab_and_mount_usr() {
    usr_is_mounted_before_the_switch("systemd");
}

//! Booting real roots with the generic profile: Debian's kernel under qemu, roots made
//! here on four kinds of disks, each named on the command line another way, once with
//! composer's shell init and once with the root's systemd:
//!
//! | root | disk | root= |
//! |---|---|---|
//! | ext4 | virtio-blk | UUID= |
//! | xfs | virtio-scsi | LABEL= |
//! | btrfs in a GPT partition | NVMe | PARTUUID= |
//! | ext4 in a partition | AHCI (ich9) | /dev/sda1 |
//!
//! Each root's /sbin/init is a static busybox script that prints a token written only
//! into that root, the type of the filesystem mounted on /, and its PID (1 after
//! switch_root), then powers off: the marker cannot come from the image. Before it, the
//! static device nodes it finds and the drivers of the `xts(aes)` ciphers in use
//! (dm-crypt's, on a LUKS root). A root that
//! does not exist ends in the emergency shell, which answers what is typed into it.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::support::{self, BootOptions, DebianKernel, Scratch};

/// One test root on its disk.
pub(crate) struct Root {
    pub name: &'static str,
    pub fstype: &'static str,
    pub token: String,
    /// What root= says.
    pub root_arg: String,
    /// How qemu attaches the disk.
    pub qemu: Vec<String>,
}

fn run(cmd: &mut Command) {
    support::run_ok(cmd);
}

/// The directory every root holds: busybox, the marker init, the token.
pub(crate) fn staging(dir: &Path, busybox: &Path, token: &str) -> PathBuf {
    let s = dir.join("staging");
    for d in [
        "bin", "sbin", "etc", "proc", "sys", "dev", "run", "tmp", "root",
    ] {
        fs::create_dir_all(s.join(d)).unwrap();
    }
    // systemd switches only to a root that looks like an OS tree.
    fs::write(
        s.join("etc/os-release"),
        "ID=composer-test\nNAME=\"composer test root\"\n",
    )
    .unwrap();
    fs::copy(busybox, s.join("bin/busybox")).unwrap();
    fs::write(s.join("token"), format!("{token}\n")).unwrap();
    fs::write(
        s.join("sbin/init"),
        "#!/bin/busybox sh\n\
         b=/bin/busybox\n\
         $b mount -t proc proc /proc 2>/dev/null\n\
         fs=$($b awk '$2 == \"/\" { t = $3 } END { print t }' /proc/mounts)\n\
         nodes=\n\
         for n in mapper/control btrfs-control loop-control; do\n\
         [ -c /dev/$n ] && nodes=\"$nodes $n\"\n\
         done\n\
         echo \"COMPOSER-STATIC-NODES$nodes\"\n\
         xts=$($b awk '$1 == \"name\" { n = $3 } $1 == \"driver\" { d = $3 } \
         $1 == \"refcnt\" && n == \"xts(aes)\" && $3 > 1 { printf \" %s\", d }' /proc/crypto)\n\
         echo \"COMPOSER-CIPHER$xts\"\n\
         ssh=absent\n\
         [ -e /run/composer/ssh ] && ssh=present\n\
         echo \"COMPOSER-RUN-SSH $ssh\"\n\
         echo \"COMPOSER-ROOT-OK $($b cat /token) fs=$fs pid=$$\"\n\
         $b poweroff -f\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(s.join("sbin/init"), fs::Permissions::from_mode(0o755)).unwrap();
    s
}

pub(crate) fn token(name: &str) -> String {
    let mut buf = [0u8; 8];
    fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut buf))
        .unwrap();
    format!(
        "{name}-{}",
        buf.iter().map(|b| format!("{b:02x}")).collect::<String>()
    )
}

/// A GPT (or MBR, `dos`) disk with one partition from 1 MiB holding `fs`.
fn partitioned(disk: &Path, fs_image: &Path, label: &str, extra: &str) {
    let size = fs::metadata(fs_image).unwrap().len() + (2 << 20);
    fs::File::create(disk).unwrap().set_len(size).unwrap();
    support::sfdisk(disk, &format!("label: {label}\nstart=2048, {extra}\n"));
    run(Command::new("dd")
        .arg(format!("if={}", fs_image.display()))
        .arg(format!("of={}", disk.display()))
        .args(["bs=1M", "seek=1", "conv=notrunc,sparse", "status=none"]));
}

/// The four roots, made once into the test assets and shared by every boot (qemu opens
/// them with snapshot=on: a boot never changes them). A root's token is in the assets'
/// `tokens` file and on its disk only.
pub(crate) fn roots(busybox: &Path) -> Option<Vec<Root>> {
    let dir = roots_dir(busybox)?;
    let tokens = fs::read_to_string(dir.join("tokens")).unwrap();
    let mut roots = describe(&dir);
    assert_eq!(
        tokens.lines().count(),
        roots.len(),
        "{}: a token per root",
        dir.display()
    );
    for (r, t) in roots.iter_mut().zip(tokens.lines()) {
        r.token = t.to_string();
    }
    Some(roots)
}

/// The ext4 root's filesystem image (the whole disk is the filesystem) and its token,
/// for a server to export.
pub(crate) fn ext4_image(busybox: &Path) -> Option<(PathBuf, String)> {
    let dir = roots_dir(busybox)?;
    let tokens = fs::read_to_string(dir.join("tokens")).unwrap();
    let token = tokens.lines().next().expect("the ext4 root's token");
    assert!(token.starts_with("ext4-virtio-"), "{token}");
    Some((dir.join("ext4-virtio.img"), token.to_string()))
}

/// The directory of the roots' disks, made once.
fn roots_dir(busybox: &Path) -> Option<PathBuf> {
    for (tool, pkg) in [
        ("mke2fs", "e2fsprogs"),
        ("mkfs.xfs", "xfsprogs"),
        ("mkfs.btrfs", "btrfs-progs"),
        ("sfdisk", "fdisk"),
    ] {
        support::require_tool(tool, pkg)?;
    }
    if !support::require_root() {
        return None;
    }
    let dir = support::cached_asset("boot-roots-v3", |tmp| {
        fs::create_dir_all(tmp).map_err(|e| e.to_string())?;
        let tokens = make_roots(tmp, busybox);
        fs::write(tmp.join("tokens"), tokens.join("\n")).map_err(|e| e.to_string())
    })?;
    Some(dir)
}

fn drive(disk: &Path, rest: &str) -> String {
    format!("file={},format=raw,snapshot=on,{rest}", disk.display())
}

/// The roots in `dir`: their disks and how each is named and attached.
fn describe(dir: &Path) -> Vec<Root> {
    let root = |name, fstype, root_arg: String, qemu: Vec<String>| Root {
        name,
        fstype,
        token: String::new(),
        root_arg,
        qemu,
    };
    let d = |file: &str| dir.join(file);
    vec![
        root(
            "ext4 on virtio-blk by UUID",
            "ext4",
            format!("UUID={EXT4_UUID}"),
            vec!["-drive".into(), drive(&d("ext4-virtio.img"), "if=virtio")],
        ),
        root(
            "xfs on virtio-scsi by LABEL",
            "xfs",
            "LABEL=cmp-xfs".into(),
            vec![
                "-device".into(),
                "virtio-scsi-pci,id=scsi".into(),
                "-drive".into(),
                drive(&d("xfs-scsi.img"), "if=none,id=d0"),
                "-device".into(),
                "scsi-hd,drive=d0,bus=scsi.0".into(),
            ],
        ),
        root(
            "btrfs on NVMe (GPT) by PARTUUID",
            "btrfs",
            format!("PARTUUID={BTRFS_PARTUUID}"),
            vec![
                "-drive".into(),
                drive(&d("btrfs-nvme.img"), "if=none,id=nv"),
                "-device".into(),
                "nvme,serial=deadbeef,drive=nv".into(),
            ],
        ),
        root(
            "ext4 on AHCI by /dev/sda1",
            "ext4",
            "/dev/sda1".into(),
            vec![
                "-device".into(),
                "ich9-ahci,id=ahci".into(),
                "-drive".into(),
                drive(&d("ext4-ahci.img"), "if=none,id=s"),
                "-device".into(),
                "ide-hd,drive=s,bus=ahci.0".into(),
            ],
        ),
    ]
}

pub(crate) const EXT4_UUID: &str = "6f1c2a3b-0d4e-4c5f-8a9b-1c2d3e4f5a6b";
const BTRFS_PARTUUID: &str = "0a1b2c3d-4e5f-4a6b-9c7d-8e9f0a1b2c3d";

/// Makes the disks [`describe`] names in `dir`; returns their tokens in that order.
fn make_roots(dir: &Path, busybox: &Path) -> Vec<String> {
    let work = dir.join("work");
    let mut tokens = Vec::new();

    // ext4 on virtio-blk, by UUID.
    let t = token("ext4-virtio");
    let s = staging(&work.join("a"), busybox, &t);
    run(Command::new("mke2fs")
        .args(["-q", "-t", "ext4", "-d"])
        .arg(&s)
        .args(["-U", EXT4_UUID, "-L", "cmp-ext4"])
        .arg(dir.join("ext4-virtio.img"))
        .arg("48M"));
    tokens.push(t);

    // xfs on virtio-scsi, by LABEL (mkfs.xfs fills no directory: a loop mount).
    let t = token("xfs-scsi");
    let s = staging(&work.join("b"), busybox, &t);
    let disk = dir.join("xfs-scsi.img");
    fs::File::create(&disk).unwrap().set_len(320 << 20).unwrap();
    run(Command::new("mkfs.xfs")
        .args(["-q", "-L", "cmp-xfs"])
        .arg(&disk));
    let mnt = work.join("mnt");
    fs::create_dir_all(&mnt).unwrap();
    run(Command::new("mount")
        .args(["-o", "loop"])
        .arg(&disk)
        .arg(&mnt));
    let copied = Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", s.display()))
        .arg(&mnt)
        .status();
    let _ = Command::new("umount").arg(&mnt).status();
    assert!(copied.unwrap().success());
    tokens.push(t);

    // btrfs in a GPT partition on NVMe, by PARTUUID.
    let t = token("btrfs-nvme");
    let s = staging(&work.join("c"), busybox, &t);
    let part = work.join("btrfs.part");
    fs::File::create(&part).unwrap().set_len(160 << 20).unwrap();
    run(Command::new("mkfs.btrfs")
        .args(["-q", "--rootdir"])
        .arg(&s)
        .arg(&part));
    partitioned(
        &dir.join("btrfs-nvme.img"),
        &part,
        "gpt",
        &format!("type=linux, uuid={BTRFS_PARTUUID}"),
    );
    tokens.push(t);

    // ext4 in a partition on AHCI, by device name.
    let t = token("ext4-ahci");
    let s = staging(&work.join("d"), busybox, &t);
    let part = work.join("ext4.part");
    run(Command::new("mke2fs")
        .args(["-q", "-t", "ext4", "-d"])
        .arg(&s)
        .arg(&part)
        .arg("48M"));
    partitioned(&dir.join("ext4-ahci.img"), &part, "dos", "type=83");
    tokens.push(t);

    fs::remove_dir_all(&work).unwrap();
    tokens
}

fn boot(kernel: &DebianKernel, image: &Path, root: &Root, append: &str, timeout: u64) -> String {
    let opts = BootOptions {
        memory_mib: 1024,
        extra_append: format!("root={} {append}", root.root_arg),
        extra_args: root.qemu.iter().map(Into::into).collect(),
        timeout: Duration::from_secs(timeout),
        ..BootOptions::default()
    };
    let r = support::qemu_boot_with(kernel, image, &opts);
    eprintln!(
        "--- {} ({:.1} s) ---\n{}",
        root.name,
        r.elapsed.as_secs_f64(),
        r.console
    );
    r.console
}

/// Whether a line of `console` ends with `want`, or has it right before a kernel or
/// journald message that the console put on the same line (`[   11.2] ...`: the
/// initrd's journald still writes to the kernel's log while the root's init prints).
fn has_line(console: &str, want: &str) -> bool {
    console.lines().any(|l| {
        l.match_indices(want).any(|(i, _)| {
            let rest = l[i + want.len()..].trim_end();
            rest.is_empty() || rest.starts_with('[')
        })
    })
}

#[test]
fn a_marker_is_found_before_a_message_on_its_line_and_not_with_more_after_it() {
    let want = "COMPOSER-STATIC-NODES mapper/control btrfs-control loop-control";
    let line =
        format!("{want}[   11.225289] systemd-journald[96]: Failed to send stream file descriptor");
    assert!(has_line(&line, want));
    assert!(has_line(&format!("x\n{want}  \ny"), want));
    assert!(!has_line(&format!("{want} fuse"), want));
    assert!(!has_line("COMPOSER-STATIC-NODES mapper/control", want));
}

/// Every root booted with the generic image and `init`; with `static_nodes`, the
/// console must also show that the root found those device nodes in /dev before
/// their modules were loaded (the static nodes the image's modules.devname names).
fn boots_every_root(init: &str, append: &str, timeout: u64, static_nodes: Option<&str>) {
    let Some((_, kernel, busybox)) = support::require_platform_env() else {
        return;
    };
    let Some(roots) = roots(&busybox) else {
        return;
    };
    let image = support::generic_image(&kernel, init);
    let mut failed = Vec::new();
    for root in &roots {
        let console = boot(&kernel, &image, root, append, timeout);
        let want = format!("COMPOSER-ROOT-OK {} fs={} pid=1", root.token, root.fstype);
        if !has_line(&console, &want) {
            failed.push(format!("{}: no `{want}`", root.name));
        }
        if let Some(nodes) = static_nodes {
            let want = format!("COMPOSER-STATIC-NODES {nodes}");
            if !has_line(&console, &want) {
                failed.push(format!("{}: no `{want}`", root.name));
            }
        }
    }
    assert!(failed.is_empty(), "{init}: {}", failed.join("; "));
}

#[test]
fn the_generic_image_with_the_shell_init_boots_every_root() {
    boots_every_root("shell", "rd.timeout=60", 240, None);
}

#[test]
fn the_generic_image_with_systemd_boots_every_root() {
    if support::require_tool("udevadm", "udev").is_none() {
        return;
    }
    // kmod-static-nodes and systemd-tmpfiles-setup-dev made the nodes of the
    // image's device-mapper, btrfs and loop modules (a drop-in skips the latter
    // only when there is nothing to make).
    boots_every_root(
        "systemd",
        "systemd.show_status=1 systemd.default_timeout_start_sec=120",
        600,
        Some("mapper/control btrfs-control loop-control"),
    );
}

/// The systemd image's /init loads the modules of its modules-load.d lists (ext4 in
/// the generic image) before systemd-modules-load.service runs: with systemd's log on
/// the console (`loglevel=7` after the harness's `quiet`), that unit finishes without
/// inserting ext4 itself, and the root is reached.
#[test]
fn the_systemd_inits_first_modules_are_loaded_before_systemd_modules_load() {
    if support::require_tool("udevadm", "udev").is_none() {
        return;
    }
    let Some((_, kernel, busybox)) = support::require_platform_env() else {
        return;
    };
    let Some(roots) = roots(&busybox) else {
        return;
    };
    let root = &roots[0];
    assert_eq!(root.fstype, "ext4", "{}", root.name);
    let image = support::generic_image(&kernel, "systemd");
    assert!(
        support::modules_load(&image).iter().any(|m| m == "ext4"),
        "the generic image loads ext4 first"
    );
    let console = boot(
        &kernel,
        &image,
        root,
        "loglevel=7 systemd.log_target=kmsg systemd.log_level=info",
        300,
    );
    let want = format!("COMPOSER-ROOT-OK {} fs=ext4 pid=1", root.token);
    assert!(has_line(&console, &want), "no `{want}`");
    assert!(
        console
            .lines()
            .any(|l| l.contains("Finished systemd-modules-load.service")),
        "systemd-modules-load.service did not finish"
    );
    let late: Vec<&str> = console
        .lines()
        .filter(|l| l.contains("systemd-modules-load[") && l.contains("Inserted module 'ext4'"))
        .collect();
    assert!(
        late.is_empty(),
        "systemd-modules-load inserted ext4, /init had not: {late:?}"
    );
}

/// A root that is not there ends in the emergency shell, which answers, within the
/// configured wait (`rd.timeout=`) and well before systemd's own 90 s default.
fn missing_root(init: &str, rd_timeout: u64, append: &str, marker: &str) {
    let Some((_, kernel, _)) = support::require_platform_env() else {
        return;
    };
    let image = support::generic_image(&kernel, init);
    let uuid = "00000000-dead-beef-0000-000000000000";
    let opts = BootOptions {
        memory_mib: 1024,
        extra_append: format!("root=UUID={uuid} rd.timeout={rd_timeout} {append}"),
        timeout: Duration::from_secs(300),
        type_when: Some((marker.into(), "echo SHELL-ALIVE-$((6*7))\n".into())),
        stop_when: Some("SHELL-ALIVE-42".into()),
        ..BootOptions::default()
    };
    let r = support::qemu_boot_with(&kernel, &image, &opts);
    eprintln!(
        "--- no root, {init} ({:.1} s) ---\n{}",
        r.elapsed.as_secs_f64(),
        r.console
    );
    assert!(
        !r.timed_out,
        "{init}: no emergency shell before the timeout"
    );
    assert!(
        r.console.contains(&format!("looked for root=UUID={uuid}")),
        "{init}: the message does not say what was looked for"
    );
    assert!(
        r.console.contains("SHELL-ALIVE-42"),
        "{init}: the shell did not answer"
    );
    // "… (12.3 s after boot)" / "emergency mode, 12.3 s after boot": the guest's clock.
    let at: f64 = r
        .console
        .split(" s after boot")
        .next()
        .and_then(|s| s.rsplit([' ', '(']).next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{init}: no `s after boot` in the message"));
    eprintln!("{init}: the emergency shell opened {at:.1} s after boot (rd.timeout={rd_timeout})");
    assert!(
        at < (rd_timeout + 60) as f64,
        "{init}: the shell opened {at} s after boot, not within rd.timeout={rd_timeout} s"
    );
}

#[test]
fn a_missing_root_ends_in_the_shell_inits_emergency_shell() {
    missing_root("shell", 5, "rd.shell", "starting an emergency shell");
}

#[test]
fn a_missing_root_ends_in_systemds_emergency_shell() {
    if support::require_tool("udevadm", "udev").is_none() {
        return;
    }
    missing_root("systemd", 20, "", "composer: emergency mode");
}

/// A root that cannot be switched to (no /run, no os-release, no init) ends in the
/// systemd init's emergency shell within rd.timeout, which names what is missing in
/// one line, instead of systemd's switch failing in a loop.
#[test]
fn systemd_names_what_a_root_lacks_instead_of_switching_to_it() {
    let Some((_, kernel, busybox)) = support::require_platform_env() else {
        return;
    };
    if support::require_tool("udevadm", "udev").is_none()
        || support::require_tool("mke2fs", "e2fsprogs").is_none()
    {
        return;
    }
    let image = support::generic_image(&kernel, "systemd");
    let dir = Scratch::new("boot-unswitchable");
    let uuid = "6f1c2a3b-0d4e-4c5f-8a9b-00000000f00d";
    let mut failed = Vec::new();
    for (what, remove, missing) in [
        ("no /run", "run", "it has no /run directory"),
        (
            "no os-release",
            "etc/os-release",
            "it has no /etc/os-release",
        ),
        ("no init", "sbin/init", "it has no init"),
    ] {
        let case = dir.join(remove.replace('/', "-"));
        let s = staging(&case, &busybox, &token("unswitchable"));
        let gone = s.join(remove);
        if gone.is_dir() {
            fs::remove_dir(&gone).unwrap();
        } else {
            fs::remove_file(&gone).unwrap();
        }
        let img = case.join("root.img");
        run(Command::new("mke2fs")
            .args(["-q", "-t", "ext4", "-d"])
            .arg(&s)
            .args(["-U", uuid])
            .arg(&img)
            .arg("16M"));
        let opts = BootOptions {
            memory_mib: 1024,
            extra_append: format!(
                "root=UUID={uuid} rd.timeout=20 systemd.show_status=1 \
                 systemd.default_timeout_start_sec=120"
            ),
            extra_args: vec!["-drive".into(), drive(&img, "if=virtio").into()],
            timeout: Duration::from_secs(300),
            type_when: Some((
                "composer: emergency mode".into(),
                "echo SHELL-ALIVE-$((6*7))\n".into(),
            )),
            stop_when: Some("SHELL-ALIVE-42".into()),
            ..BootOptions::default()
        };
        let r = support::qemu_boot_with(&kernel, &image, &opts);
        eprintln!(
            "--- {what} ({:.1} s) ---\n{}",
            r.elapsed.as_secs_f64(),
            r.console
        );
        let named = r
            .console
            .lines()
            .any(|l| l.contains("cannot be switched to") && l.contains(missing));
        // The only unit that failed is the check (the root's console keymap and
        // font, when the build machine has them, load without a VGA card too).
        if r.console.contains("composer:   composer-console.service") {
            failed.push(format!("{what}: composer-console.service failed"));
        }
        if r.timed_out || !named || !r.console.contains("SHELL-ALIVE-42") {
            failed.push(format!(
                "{what}: {}",
                if r.timed_out {
                    "no emergency shell before the timeout"
                } else if !named {
                    "the emergency shell does not name what is missing"
                } else {
                    "the shell did not answer"
                }
            ));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("; "));
}

/// A real Debian 12 userspace (systemd, udev, kmod): the Debian 12 release root of
/// `boot_releases` (made once with mmdebstrap). Returns the directory holding it as
/// `root`, for `--root`, and its token.
pub(crate) fn debian_root() -> Option<(PathBuf, String)> {
    let r = crate::support::release::release_root(crate::support::release::Release::Bookworm)?;
    let dir = r.dir.parent()?.to_path_buf();
    Some((dir, r.token))
}

//! The shell init's names for the root and its failure policy, booted: Debian's kernel
//! under qemu with the generic image (shell init) and a root made here on a GPT
//! partition of a virtio disk with a serial, named each way udev names it
//! (PARTUUID=, /dev/disk/by-partuuid, by-partlabel, by-id, by-path, a label with a
//! space as `\x20`): no udev runs in the shell init, so each is computed from blkid and
//! sysfs. Then what a failure ends in: `rd.emergency=poweroff` powers off, `rd.shell=0`
//! gives no shell, `rd.break=pre-mount` a shell before the root is mounted, and a
//! modprobe that hangs holds the boot no longer than rd.timeout.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::boot_root::{staging, token};
use crate::support::{self, BootOptions, DebianKernel, Scratch};

const PARTUUID: &str = "3d2c1b0a-5f4e-4b6a-8c7d-9e0f1a2b3c4d";
const SERIAL: &str = "cmpnames";
/// The disk's PCI slot (its by-path name).
const SLOT: &str = "0000:00:05.0";
/// What a test types where no shell may answer.
const TYPED: &str = "echo SHELL-ALIVE-$((6*7))\n";

/// The names disk (cached in the test assets) and its root's token.
fn names_disk(busybox: &Path) -> Option<(PathBuf, String)> {
    for (tool, pkg) in [("mke2fs", "e2fsprogs"), ("sfdisk", "fdisk")] {
        support::require_tool(tool, pkg)?;
    }
    let dir = support::cached_asset("boot-names-v1", |tmp| {
        fs::create_dir_all(tmp).map_err(|e| e.to_string())?;
        let t = token("names");
        let s = staging(&tmp.join("work"), busybox, &t);
        let part = tmp.join("root.part");
        support::run_ok(
            Command::new("mke2fs")
                .args(["-q", "-t", "ext4", "-L", "my root", "-d"])
                .arg(&s)
                .arg(&part)
                .arg("40M"),
        );
        let disk = tmp.join("names.img");
        let size = fs::metadata(&part).unwrap().len() + (2 << 20);
        fs::File::create(&disk).unwrap().set_len(size).unwrap();
        let script =
            format!("label: gpt\nstart=2048, type=linux, uuid={PARTUUID}, name=\"root part\"\n");
        let mut child = Command::new("sfdisk")
            .args(["-q", "--no-reread", "--no-tell-kernel"])
            .arg(&disk)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
            .map_err(|e| e.to_string())?;
        std::io::Write::write_all(child.stdin.as_mut().unwrap(), script.as_bytes())
            .map_err(|e| e.to_string())?;
        drop(child.stdin.take());
        if !child.wait().map_err(|e| e.to_string())?.success() {
            return Err("sfdisk failed".into());
        }
        support::run_ok(
            Command::new("dd")
                .arg(format!("if={}", part.display()))
                .arg(format!("of={}", disk.display()))
                .args(["bs=1M", "seek=1", "conv=notrunc,sparse", "status=none"]),
        );
        fs::remove_file(&part).map_err(|e| e.to_string())?;
        fs::remove_dir_all(tmp.join("work")).map_err(|e| e.to_string())?;
        fs::write(tmp.join("token"), &t).map_err(|e| e.to_string())
    })?;
    let token = fs::read_to_string(dir.join("token")).unwrap();
    Some((dir.join("names.img"), token))
}

/// The disk on virtio-blk, with its serial, in its slot.
fn attach(disk: &Path) -> Vec<std::ffi::OsString> {
    vec![
        "-drive".into(),
        format!(
            "file={},format=raw,snapshot=on,if=none,id=nm",
            disk.display()
        )
        .into(),
        "-device".into(),
        format!("virtio-blk-pci,drive=nm,serial={SERIAL},addr=0x5").into(),
    ]
}

fn env() -> Option<(DebianKernel, PathBuf, String)> {
    let (_, kernel, busybox) = support::require_boot_env()?;
    if !support::require_root() {
        return None;
    }
    let (disk, token) = names_disk(&busybox)?;
    Some((kernel, disk, token))
}

/// Boots each (what, options) at once, two guests at a time; the consoles, in order.
fn boot_all(
    kernel: &DebianKernel,
    image: &Path,
    cases: Vec<(String, BootOptions)>,
) -> Vec<(String, support::BootResult)> {
    std::thread::scope(|s| {
        let handles: Vec<_> = cases
            .into_iter()
            .map(|(what, opts)| {
                s.spawn(move || {
                    let r = support::qemu_boot_with(kernel, image, &opts);
                    eprintln!(
                        "--- {what} ({:.1} s) ---\n{}",
                        r.elapsed.as_secs_f64(),
                        r.console
                    );
                    (what, r)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[test]
fn the_shell_init_finds_the_root_by_every_name_udev_gives_it() {
    let Some((kernel, disk, token)) = env() else {
        return;
    };
    let image = support::generic_image(&kernel, "shell");
    let names = [
        format!("PARTUUID={PARTUUID}"),
        format!("/dev/disk/by-partuuid/{PARTUUID}"),
        r"/dev/disk/by-partlabel/root\x20part".to_string(),
        format!("/dev/disk/by-id/virtio-{SERIAL}-part1"),
        format!("/dev/disk/by-path/pci-{SLOT}-part1"),
        format!("/dev/disk/by-path/virtio-pci-{SLOT}-part1"),
        r"LABEL=my\x20root".to_string(),
        r"/dev/disk/by-label/my\x20root".to_string(),
    ];
    let cases = names
        .iter()
        .map(|n| {
            (
                format!("root={n}"),
                BootOptions {
                    memory_mib: 1024,
                    extra_append: format!("root={n} rd.timeout=30"),
                    extra_args: attach(&disk),
                    timeout: Duration::from_secs(240),
                    ..BootOptions::default()
                },
            )
        })
        .collect();
    let want = format!("COMPOSER-ROOT-OK {token} fs=ext4 pid=1");
    let failed: Vec<String> = boot_all(&kernel, &image, cases)
        .into_iter()
        .filter(|(_, r)| !r.console.lines().any(|l| l.contains(&want)))
        .map(|(what, _)| what)
        .collect();
    assert!(failed.is_empty(), "no `{want}` with {failed:?}");
}

/// The whole seconds after boot at which the console's first `(N s after boot)` says
/// the failure was seen.
fn failed_at(console: &str) -> f64 {
    console
        .split(" s after boot")
        .next()
        .and_then(|s| s.rsplit([' ', '(']).next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no `s after boot` on the console"))
}

#[test]
fn the_shell_inits_failure_policy_follows_the_command_line() {
    let Some((kernel, disk, token)) = env() else {
        return;
    };
    let image = support::generic_image(&kernel, "shell");
    let missing = "root=UUID=00000000-dead-beef-0000-000000000000 rd.timeout=5";
    let cases = vec![
        // rd.emergency=poweroff: the guest powers off (qemu ends by itself), and
        // nothing answers what is typed before it does.
        (
            "rd.emergency=poweroff".to_string(),
            BootOptions {
                extra_append: format!("{missing} rd.emergency=poweroff"),
                timeout: Duration::from_secs(180),
                type_when: Some(("poweroff in 5 s".into(), TYPED.into())),
                ..BootOptions::default()
            },
        ),
        // rd.shell=0: no shell; with the harness's panic=-1 the init gives up (a
        // kernel panic, which reboots: qemu ends by itself).
        (
            "rd.shell=0".to_string(),
            BootOptions {
                extra_append: format!("{missing} rd.shell=0"),
                timeout: Duration::from_secs(180),
                ..BootOptions::default()
            },
        ),
        // rd.break=pre-mount: a shell with the root found but not mounted; leaving
        // it, the boot goes on to the root.
        (
            "rd.break=pre-mount".to_string(),
            BootOptions {
                extra_append: format!("root=PARTUUID={PARTUUID} rd.break=pre-mount"),
                extra_args: attach(&disk),
                timeout: Duration::from_secs(180),
                type_when: Some((
                    "rd.break=pre-mount: a shell".into(),
                    concat!(
                        "n=0; while read -r _ m _; do [ \"$m\" = /root ] && n=1; done ",
                        "</proc/mounts; echo ROOT-MOUNTS-$n; exit\n"
                    )
                    .into(),
                )),
                ..BootOptions::default()
            },
        ),
    ];
    let results = boot_all(&kernel, &image, cases);
    let (_, poweroff) = &results[0];
    assert!(
        !poweroff.timed_out && poweroff.console.contains("rd.emergency=poweroff"),
        "rd.emergency=poweroff: the guest did not power off by itself"
    );
    assert!(
        poweroff.console.contains("reboot: Power down"),
        "rd.emergency=poweroff: the kernel did not power down"
    );
    assert!(
        !poweroff.console.contains("SHELL-ALIVE-42"),
        "a shell answered"
    );
    assert!(
        !poweroff.console.contains("starting an emergency shell"),
        "rd.emergency=poweroff started a shell"
    );
    let (_, noshell) = &results[1];
    assert!(
        !noshell.timed_out && noshell.console.contains("panic=-1 is set: giving up"),
        "rd.shell=0: the init did not give up"
    );
    assert!(
        !noshell.console.contains("starting an emergency shell"),
        "rd.shell=0 started a shell"
    );
    let (_, pre_mount) = &results[2];
    assert!(
        pre_mount.console.contains("ROOT-MOUNTS-0"),
        "rd.break=pre-mount: no shell, or the root was mounted before it"
    );
    let want = format!("COMPOSER-ROOT-OK {token} fs=ext4 pid=1");
    assert!(
        pre_mount.console.contains(&want),
        "rd.break=pre-mount: the boot did not go on after the shell"
    );
}

/// A modprobe that hangs (a modprobe.d `install` line of the virtio RNG's driver that
/// sleeps 300 s, on a guest with that device and no root) holds the boot no longer
/// than rd.timeout: the failure's policy (the harness's panic=-1: giving up) acts
/// within 20 s of it.
#[test]
fn a_modprobe_that_hangs_holds_the_shell_init_no_longer_than_rd_timeout() {
    let Some((_, kernel, _)) = support::require_boot_env() else {
        return;
    };
    let dir = Scratch::new("hung-modprobe");
    let conf = dir.path().join("hang.conf");
    fs::write(&conf, "install virtio_rng /bin/sleep 300\n").unwrap();
    let image = support::shared_image(
        &kernel,
        "generic-shell-hung-modprobe",
        &format!(
            "include = [\"generic\"]\ninit = \"shell\"\n\n[[file]]\nsrc = {}\n\
             dst = \"/etc/modprobe.d/hang.conf\"\nmode = \"0644\"\n",
            support::toml_str(&conf.to_string_lossy())
        ),
    );
    let timeout = 10;
    let opts = BootOptions {
        extra_append: format!(
            "root=UUID=00000000-dead-beef-0000-000000000000 rd.timeout={timeout}"
        ),
        extra_args: vec!["-device".into(), "virtio-rng-pci".into()],
        timeout: Duration::from_secs(240),
        stop_when: Some("giving up".into()),
        ..BootOptions::default()
    };
    let r = support::qemu_boot_with(&kernel, &image, &opts);
    eprintln!(
        "--- hung modprobe ({:.1} s) ---\n{}",
        r.elapsed.as_secs_f64(),
        r.console
    );
    assert!(
        r.console.contains(&format!(
            "the root device did not appear within {timeout} s"
        )),
        "the wait for the root did not end"
    );
    // The kernel takes up to 15 s under emulation before /init starts.
    let at = failed_at(&r.console);
    assert!(
        at < (timeout + 20 + 15) as f64,
        "the failure was seen {at} s after boot, rd.timeout={timeout}"
    );
}

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

pub(crate) const PARTUUID: &str = "3d2c1b0a-5f4e-4b6a-8c7d-9e0f1a2b3c4d";
pub(crate) const SERIAL: &str = "cmpnames";
/// The disk's PCI slot (its by-path name).
const SLOT: &str = "0000:00:05.0";
/// What a test types where no shell may answer.
const TYPED: &str = "echo SHELL-ALIVE-$((6*7))\n";

/// The names disk (cached in the test assets) and its root's token.
pub(crate) fn names_disk(busybox: &Path) -> Option<(PathBuf, String)> {
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
    let (_, kernel, busybox) = support::require_platform_env()?;
    if !support::require_root() {
        return None;
    }
    let (disk, token) = names_disk(&busybox)?;
    Some((kernel, disk, token))
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
        r"LABEL=my\x20root".to_string(),
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
    let failed: Vec<String> = support::qemu_boot_all(&kernel, &image, cases)
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

/// What a failure ends in, as the command line says, in `init` (the harness always
/// appends `panic=-1`): `rd.emergency=poweroff` powers the guest off, nothing
/// answering what is typed; `rd.shell=0` gives no shell (the shell init gives up, which
/// with `panic=` is a kernel panic; the systemd init, where `panic=` is the kernel's,
/// halts); `rd.break=pre-mount` gives a shell with the root found but not mounted, and
/// leaving it the boot goes on to the root.
fn failure_policy(init: &str) {
    let Some((kernel, disk, token)) = env() else {
        return;
    };
    if init == "systemd" && support::require_tool("udevadm", "udev").is_none() {
        return;
    }
    let image = support::generic_image(&kernel, init);
    let missing = "root=UUID=00000000-dead-beef-0000-000000000000 rd.timeout=10";
    let (mountpoint, noshell) = match init {
        // It halts: what is typed gets no answer by then.
        "systemd" => (
            "/sysroot",
            BootOptions {
                memory_mib: 1024,
                extra_append: format!("{missing} rd.shell=0"),
                timeout: Duration::from_secs(90),
                // Halted, it waits out its timeout: a slot of the idle pool.
                idle: true,
                type_when: Some(("composer: halted".into(), TYPED.into())),
                stop_when: Some("SHELL-ALIVE-42".into()),
                ..BootOptions::default()
            },
        ),
        _ => (
            "/root",
            BootOptions {
                extra_append: format!("{missing} rd.shell=0"),
                timeout: Duration::from_secs(180),
                ..BootOptions::default()
            },
        ),
    };
    let cases = vec![
        (
            format!("{init}: rd.emergency=poweroff"),
            BootOptions {
                memory_mib: 1024,
                extra_append: format!("{missing} rd.emergency=poweroff"),
                timeout: Duration::from_secs(300),
                type_when: Some(("poweroff in 5 s".into(), TYPED.into())),
                ..BootOptions::default()
            },
        ),
        (format!("{init}: rd.shell=0"), noshell),
        (
            format!("{init}: rd.break=pre-mount"),
            BootOptions {
                memory_mib: 1024,
                extra_append: format!("root=PARTUUID={PARTUUID} rd.break=pre-mount"),
                extra_args: attach(&disk),
                timeout: Duration::from_secs(300),
                type_when: Some((
                    "rd.break=pre-mount: a shell".into(),
                    format!(
                        "n=0; while read -r _ m _; do [ \"$m\" = {mountpoint} ] && n=1; done \
                         </proc/mounts; echo ROOT-MOUNTS-$n; exit\n"
                    ),
                )),
                ..BootOptions::default()
            },
        ),
    ];
    let results = support::qemu_boot_all(&kernel, &image, cases);
    let (_, poweroff) = &results[0];
    assert!(
        !poweroff.timed_out
            && poweroff
                .console
                .contains("rd.emergency=poweroff: poweroff in 5 s"),
        "{init}: rd.emergency=poweroff: the guest did not power off by itself"
    );
    assert!(
        !poweroff.console.contains("SHELL-ALIVE-42"),
        "{init}: rd.emergency=poweroff: a shell answered"
    );
    let (_, noshell) = &results[1];
    let said = match init {
        "systemd" => "composer: halted",
        _ => "panic=-1 is set: giving up",
    };
    assert!(
        noshell.console.contains(said) && !noshell.console.contains("SHELL-ALIVE-42"),
        "{init}: rd.shell=0: no `{said}`, or a shell answered"
    );
    assert!(
        !noshell.console.contains("starting an emergency shell"),
        "{init}: rd.shell=0 started a shell"
    );
    let (_, pre_mount) = &results[2];
    assert!(
        pre_mount.console.contains("ROOT-MOUNTS-0"),
        "{init}: rd.break=pre-mount: no shell, or the root was mounted before it"
    );
    assert!(
        pre_mount
            .console
            .contains(&format!("COMPOSER-ROOT-OK {token} fs=ext4 pid=1")),
        "{init}: rd.break=pre-mount: the boot did not go on after the shell"
    );
}

#[test]
fn the_shell_inits_failure_policy_follows_the_command_line() {
    failure_policy("shell");
}

#[test]
fn the_systemd_inits_failure_policy_follows_the_command_line() {
    failure_policy("systemd");
}

/// A modprobe that hangs (a modprobe.d `install` line of the virtio balloon's driver
/// that sleeps 300 s, on a guest with that device and no root) holds the boot no
/// longer than rd.timeout, in both inits (not the virtio RNG's: systemd itself loads
/// that one as PID 1, before any unit, and would hang there in any initrd): the failure's policy (the shell init gives up, with
/// the harness's panic=-1; the systemd init's emergency mode) acts within 20 s of it.
#[test]
fn a_modprobe_that_hangs_holds_the_boot_no_longer_than_rd_timeout() {
    let Some((_, kernel, _)) = support::require_platform_env() else {
        return;
    };
    let dir = Scratch::new("hung-modprobe");
    let conf = dir.path().join("hang.conf");
    fs::write(&conf, "install virtio_balloon sleep 300\n").unwrap();
    let timeout = 10;
    let mut failed = Vec::new();
    for init in ["shell", "systemd"] {
        if init == "systemd" && support::require_tool("udevadm", "udev").is_none() {
            continue;
        }
        // The configuration beside the manifest (the programs are the platform's).
        let manifest = dir.join(format!("hung-{init}.toml"));
        fs::write(
            &manifest,
            format!(
                "include = [\"generic\"]\ninit = \"{init}\"\n\n[[file]]\nsrc = \"hang.conf\"\n\
                 dst = \"/etc/modprobe.d/hang.conf\"\nmode = \"0644\"\n"
            ),
        )
        .unwrap();
        let image = dir.join(format!("hung-{init}.img"));
        support::run_ok(
            support::build_with(&kernel)
                .arg(&manifest)
                .arg("-o")
                .arg(&image),
        );
        let (end, said) = match init {
            "systemd" => (
                "composer: block devices found:",
                "did not appear within 10 s",
            ),
            _ => ("giving up", "the root device did not appear within 10 s"),
        };
        let opts = BootOptions {
            memory_mib: 1024,
            extra_append: format!(
                "root=UUID=00000000-dead-beef-0000-000000000000 rd.timeout={timeout} {}",
                crate::boot_storage::extra_append(init)
            ),
            extra_args: vec!["-device".into(), "virtio-balloon-pci".into()],
            timeout: Duration::from_secs(240),
            stop_when: Some(end.into()),
            ..BootOptions::default()
        };
        let r = support::qemu_boot_with(&kernel, &image, &opts);
        eprintln!(
            "--- {init}: hung modprobe ({:.1} s) ---\n{}",
            r.elapsed.as_secs_f64(),
            r.console
        );
        if !r.console.contains(said) {
            failed.push(format!("{init}: the wait for the root did not end"));
            continue;
        }
        // The kernel takes up to 15 s under emulation before the init starts.
        let at = failed_at(&r.console);
        if at >= (timeout + 20 + 15) as f64 {
            failed.push(format!(
                "{init}: the failure was seen {at} s after boot, rd.timeout={timeout}"
            ));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("; "));
}

/// Plugs virtio disks into the guest through qemu's QMP socket `socket`: each of
/// `plugs` (when, after qemu made the socket; the drive's id, already given to qemu
/// with `if=none`; the disk's serial). What QMP answered.
pub(crate) fn plug_late(socket: &Path, plugs: &[(Duration, &str, &str)]) -> Result<String, String> {
    use std::io::{BufRead, BufReader, Write};
    // qemu makes the socket when it starts (it may wait for a slot first).
    let waited = std::time::Instant::now();
    while !socket.exists() {
        if waited.elapsed() > Duration::from_secs(600) {
            return Err("qemu did not start".into());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let started = std::time::Instant::now();
    let stream = std::os::unix::net::UnixStream::connect(socket)
        .map_err(|e| format!("QMP {}: {e}", socket.display()))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(|e| e.to_string())?;
    let mut reader = BufReader::new(stream.try_clone().map_err(|e| e.to_string())?);
    let mut w = stream;
    let mut said = String::new();
    let mut line = String::new();
    reader.read_line(&mut line).map_err(|e| e.to_string())?;
    said.push_str(&line);
    let mut cmds = vec![(
        Duration::ZERO,
        r#"{"execute":"qmp_capabilities"}"#.to_string(),
    )];
    for (i, (when, drive, serial)) in plugs.iter().enumerate() {
        cmds.push((
            *when,
            format!(
                r#"{{"execute":"device_add","arguments":{{"driver":"virtio-blk-pci","drive":"{drive}","id":"late{i}","serial":"{serial}"}}}}"#
            ),
        ));
    }
    for (when, cmd) in cmds {
        if let Some(rest) = when.checked_sub(started.elapsed()) {
            std::thread::sleep(rest);
        }
        writeln!(w, "{cmd}").map_err(|e| e.to_string())?;
        // Events may come before the answer.
        loop {
            line.clear();
            reader.read_line(&mut line).map_err(|e| e.to_string())?;
            said.push_str(&line);
            if line.contains("\"return\"") || line.contains("\"error\"") || line.is_empty() {
                break;
            }
        }
        if line.contains("\"error\"") {
            return Err(said);
        }
    }
    Ok(said)
}

/// `rd.timeout=0` waits forever: the root's disk, plugged in 45 s after the start
/// (QMP's device_add), is found and booted, in both inits.
#[test]
fn rd_timeout_0_waits_for_a_disk_plugged_in_45_s_late() {
    let Some((kernel, disk, token)) = env() else {
        return;
    };
    let want = format!("COMPOSER-ROOT-OK {token} fs=ext4 pid=1");
    let mut failed = Vec::new();
    for init in ["shell", "systemd"] {
        if init == "systemd" && support::require_tool("udevadm", "udev").is_none() {
            continue;
        }
        let image = support::generic_image(&kernel, init);
        let dir = Scratch::new(&format!("late-disk-{init}"));
        let socket = dir.path().join("qmp.sock");
        let opts = BootOptions {
            memory_mib: 1024,
            extra_append: format!("root=PARTUUID={PARTUUID} rd.timeout=0"),
            extra_args: vec![
                "-drive".into(),
                format!(
                    "file={},format=raw,snapshot=on,if=none,id=late",
                    disk.display()
                )
                .into(),
                "-qmp".into(),
                format!("unix:{},server=on,wait=off", socket.display()).into(),
            ],
            timeout: Duration::from_secs(300),
            ..BootOptions::default()
        };
        let (r, plugged) = std::thread::scope(|s| {
            let plug = s.spawn(|| plug_late(&socket, &[(Duration::from_secs(45), "late", SERIAL)]));
            let r = support::qemu_boot_with(&kernel, &image, &opts);
            (r, plug.join().unwrap())
        });
        eprintln!(
            "--- {init}: a disk 45 s late, rd.timeout=0 ({:.1} s) ---\n{}\n--- QMP ---\n{plugged:?}",
            r.elapsed.as_secs_f64(),
            r.console
        );
        if let Err(e) = plugged {
            failed.push(format!("{init}: the disk was not plugged in: {e}"));
        } else if !r.console.contains(&want) {
            failed.push(format!("{init}: no `{want}`"));
        } else if r.elapsed < Duration::from_secs(45) {
            failed.push(format!("{init}: booted before the disk was there"));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("; "));
}

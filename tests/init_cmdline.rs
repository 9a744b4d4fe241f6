//! The shell init's kernel command line, without booting a guest: its parser and pure
//! functions (profiles/init: composer-cmdline, with composer-storage,
//! composer-image-roots and composer-network sourced as /init sources them) run under busybox sh, driven by the
//! table in `tests/init/cmdline.tsv` (a command line and the state it must produce, as
//! dracut keeps in its TEST-98-GETARG). A row whose state changes fails; so does an
//! option of the book's command line tables that no row uses.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::{self, Scratch};

/// Every variable the parser sets (the init's, the storage's and the network's
/// options) and what the init derives from them, in the order they are shown.
const STATE: &[&str] = &[
    "root",
    "rootfstype",
    "rootflags",
    "mode",
    "rootwait",
    "rootdelay",
    "init",
    "panic",
    "shell",
    "emergency",
    "breaks",
    "debug",
    "timeout",
    "resume",
    "usr",
    "usrfstype",
    "usrflags",
    "coldplug_all",
    "cl_notes",
    "st_luks",
    "st_luks_uuids",
    "st_luks_names",
    "st_luks_options",
    "st_luks_keys",
    "st_luks_crypttab",
    "st_lvm",
    "st_lvm_vgs",
    "st_lvm_lvs",
    "st_md",
    "st_md_uuids",
    "st_md_conf",
    "st_retry",
    "st_requests",
    "nt_ips",
    "nt_need",
    "nt_bootif",
    "nt_netroot",
    "nt_root",
    "nt_want",
    "nt_server",
    "nt_port",
    "nt_export",
    "nt_target",
    "nt_lun",
    "nt_user",
    "nt_pass",
    "nt_nfs",
    "nt_path",
    "nt_opts",
    "nt_bad",
    "nt_initiator",
    "nt_ibft",
    "nt_nfsroot",
    "nt_nossh",
    "root_spec",
    "early",
    "forever",
    "action_boot",
    "action_unlock",
    "ir_gpt_off",
    "ir_live",
    "ir_live_dir",
    "ir_live_img",
    "ir_live_ram",
    "ir_live_overlay",
    "ir_overlayroot",
    "ir_verity",
    "ir_roothash",
    "ir_root_data",
    "ir_root_hash",
    "ir_root_opts",
    "ir_usrhash",
    "ir_usr_data",
    "ir_usr_hash",
    "ir_usr_opts",
    "verity_data",
    "verity_hash",
    "verity_flags",
];

fn init_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("profiles/init")
}

/// The harness: sources the init's files as /init does (say() quiet, the network's
/// state under `$3`), reads command line `$2`, and prints every variable of [`STATE`]
/// as NAME=VALUE, newlines as `|`.
fn harness_script() -> String {
    let mut s = String::from(
        r#"set -e
say() { :; }
. "$1/composer-storage"
. "$1/composer-network"
. "$1/composer-image-roots"
. "$1/composer-cmdline"
set +e
nt_dir=$3
parse_cmdline "$2"
net_setup
image_setup
ir_verity_devices "$ir_roothash" "$ir_root_data" "$ir_root_hash"
verity_data=$vdata
verity_hash=$vhash
ir_verity_flags "$ir_root_opts"
verity_flags=$vflags
dev_spec "$root"
root_spec=$dspec
storage_early "$root"
forever=
if waits_forever; then forever=1; fi
fail_action boot
action_boot=$action
fail_action unlock
action_unlock=$action
for v in"#,
    );
    for v in STATE {
        s.push(' ');
        s.push_str(v);
    }
    s.push_str(
        r#"; do
	eval "val=\${$v}"
	printf '%s=%s\n' "$v" "$(printf '%s' "$val" | tr '\n' '|')"
done
"#,
    );
    s
}

/// Runs the parser on `cmdline`; the state it printed, white space folded.
fn parse(busybox: &Path, cmdline: &str, scratch: &Path) -> BTreeMap<String, String> {
    let out = support::run_ok(
        Command::new(busybox)
            .args(["sh", "-c", &harness_script(), "harness"])
            .arg(init_dir())
            .arg(cmdline)
            .arg(scratch.join("net")),
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let state: BTreeMap<String, String> = text
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), fold(v)))
        .collect();
    assert_eq!(
        state.len(),
        STATE.len(),
        "the harness printed {state:?} for {cmdline:?}"
    );
    state
}

fn fold(v: &str) -> String {
    v.split(' ')
        .filter(|w| !w.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The table's rows: a command line and the variables that differ from the first
/// row's.
fn rows() -> Vec<(String, Vec<(String, String)>)> {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/init/cmdline.tsv"),
    )
    .unwrap();
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            let mut fields = l.split('\t');
            let cmdline = fields.next().unwrap().to_string();
            let want = fields
                .filter(|f| !f.is_empty())
                .map(|f| {
                    let (k, v) = f
                        .split_once('=')
                        .unwrap_or_else(|| panic!("{f:?} in row {l:?} is not NAME=VALUE"));
                    assert!(
                        STATE.contains(&k),
                        "{k} in row {l:?} is not a state variable"
                    );
                    (k.to_string(), fold(v))
                })
                .collect();
            (cmdline, want)
        })
        .collect()
}

#[test]
fn every_command_line_of_the_table_gives_its_state() {
    let Some(busybox) = support::busybox_static() else {
        return;
    };
    let scratch = Scratch::new("init-cmdline");
    let rows = rows();
    assert!(rows.len() >= 60, "the table has {} rows", rows.len());
    assert_eq!(rows[0].0, "", "the first row is the empty command line");
    let defaults = parse(&busybox, "", scratch.path());
    assert!(
        rows[0].1.is_empty(),
        "the empty command line's row lists no changes"
    );
    let mut wrong = Vec::new();
    for (cmdline, want) in &rows {
        let mut expected = defaults.clone();
        for (k, v) in want {
            expected.insert(k.clone(), v.clone());
        }
        let got = parse(&busybox, cmdline, scratch.path());
        for v in STATE {
            if got[*v] != expected[*v] {
                wrong.push(format!(
                    "{cmdline:?}: {v} is {:?}, the table says {:?}",
                    got[*v], expected[*v]
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    // The defaults themselves, as the book states them.
    assert_eq!(defaults["timeout"], "30");
    assert_eq!(defaults["mode"], "ro");
    // No init= given: the root's own, found at the switch (root_init).
    assert_eq!(defaults["init"], "");
    assert_eq!(defaults["action_boot"], "shell");
    assert_eq!(defaults["action_unlock"], "reboot");
}

/// The options of a command line table in the book: the first column's code spans,
/// each cut at its `=` (or `*`).
fn book_options(page: &str, heading: &str) -> Vec<String> {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("book/src")
            .join(page),
    )
    .unwrap();
    let start = text
        .find(heading)
        .unwrap_or_else(|| panic!("{page} has no {heading:?}"));
    let mut options = Vec::new();
    for line in text[start..]
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
    {
        let first = line.split('|').nth(1).unwrap_or("");
        for span in first.split('`').skip(1).step_by(2) {
            let key = span
                .split(['=', '*', '…'])
                .next()
                .unwrap_or("")
                .trim_end_matches('.');
            if !key.is_empty() {
                options.push(key.to_string());
            }
        }
    }
    assert!(!options.is_empty(), "{page}: no table after {heading:?}");
    options
}

#[test]
fn every_option_of_the_books_tables_is_in_the_table() {
    let rows = rows();
    let words: Vec<String> = rows
        .iter()
        .flat_map(|(c, _)| c.split(' ').map(str::to_string).collect::<Vec<_>>())
        .collect();
    let mut missing = Vec::new();
    for (page, heading) in [
        ("booting.md", "## Kernel command line"),
        ("storage.md", "## The kernel command line"),
        ("image-roots.md", "## The kernel command line"),
    ] {
        for option in book_options(page, heading) {
            // Options the kernel and kmod read, not the init.
            if option.starts_with("modprobe.") {
                continue;
            }
            let hit = words.iter().any(|w| {
                w == &option
                    || w.starts_with(&format!("{option}="))
                    || (option.ends_with('.') && w.starts_with(&option))
                    || w.starts_with(&format!("root={option}"))
                    || w.starts_with(&format!("root={option}="))
            });
            if !hit {
                missing.push(format!("{page}: {option}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "options in the book that no row of tests/init/cmdline.tsv uses:\n{}",
        missing.join("\n")
    );
}

/// The /dev/disk/by-id and by-path names the init computes from sysfs (udev's
/// 60-persistent-storage.rules and path_id), on a sysfs tree made here: a virtio disk
/// with a serial (root0) and a partition, an NVMe namespace.
#[test]
fn the_by_id_and_by_path_names_are_udevs() {
    let Some(busybox) = support::busybox_static() else {
        return;
    };
    let scratch = Scratch::new("init-links");
    let sys = scratch.path().join("sys");
    let vda = sys.join("devices/pci0000:00/0000:00:04.0/virtio1/block/vda");
    let nvme = sys.join("devices/pci0000:00/0000:00:05.0/nvme/nvme0");
    std::fs::create_dir_all(vda.join("vda2")).unwrap();
    std::fs::create_dir_all(nvme.join("nvme0n1")).unwrap();
    std::fs::create_dir_all(sys.join("class/block")).unwrap();
    std::fs::write(vda.join("serial"), "root0\n").unwrap();
    std::fs::write(nvme.join("nvme0n1/nsid"), "1\n").unwrap();
    std::fs::write(vda.join("vda2/partition"), "2\n").unwrap();
    std::fs::write(
        nvme.join("model"),
        "QEMU NVMe Ctrl                          \n",
    )
    .unwrap();
    std::fs::write(nvme.join("serial"), "deadbeef            \n").unwrap();
    std::fs::write(nvme.join("nvme0n1/wwid"), "eui.0011223344556677\n").unwrap();
    std::os::unix::fs::symlink("../../nvme0", nvme.join("nvme0n1/device")).unwrap();
    for (name, target) in [
        (
            "vda",
            "../../devices/pci0000:00/0000:00:04.0/virtio1/block/vda",
        ),
        (
            "vda2",
            "../../devices/pci0000:00/0000:00:04.0/virtio1/block/vda/vda2",
        ),
        (
            "nvme0n1",
            "../../devices/pci0000:00/0000:00:05.0/nvme/nvme0/nvme0n1",
        ),
    ] {
        std::os::unix::fs::symlink(target, sys.join("class/block").join(name)).unwrap();
    }
    let script = r#"storage_arg() { :; }
net_arg() { :; }
. "$1/composer-cmdline"
sys=$2
for d in vda vda2 nvme0n1 sdz; do
	dev_links "$d"
	echo "$d: $links"
done
"#;
    let out = support::run_ok(
        Command::new(&busybox)
            .args(["sh", "-c", script, "harness"])
            .arg(init_dir())
            .arg(&sys),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        text,
        "vda: virtio-root0 pci-0000:00:04.0 virtio-pci-0000:00:04.0\n\
         vda2: virtio-root0-part2 pci-0000:00:04.0-part2 virtio-pci-0000:00:04.0-part2\n\
         nvme0n1: nvme-QEMU_NVMe_Ctrl_deadbeef nvme-QEMU_NVMe_Ctrl_deadbeef_1 \
         nvme-eui.0011223344556677 pci-0000:00:05.0-nvme-1\n\
         sdz: \n"
    );
}

/// The init the switch runs (composer-cmdline's root_init): init= as given, else the
/// root's /sbin/init, else its systemd (a root without systemd-sysv, as Debian 13's
/// `mmdebstrap --variant=apt` makes one), else the kernel's fallbacks.
#[test]
fn the_init_switched_to_is_the_roots_own() {
    let Some(busybox) = support::busybox_static() else {
        return;
    };
    let scratch = Scratch::new("init-root-init");
    let put = |root: &str, path: &str| {
        let p = scratch.path().join(root).join(path.trim_start_matches('/'));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, "").unwrap();
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    };
    put("sysv", "/sbin/init");
    put("sysv", "/usr/lib/systemd/systemd");
    put("systemd", "/usr/lib/systemd/systemd");
    put("systemd", "/bin/sh");
    put("shell", "/bin/sh");
    std::fs::create_dir_all(scratch.path().join("empty")).unwrap();
    // /sbin/init as a link (to systemd, as systemd-sysv installs it) counts.
    std::fs::create_dir_all(scratch.path().join("link/sbin")).unwrap();
    std::os::unix::fs::symlink(
        "../lib/systemd/systemd",
        scratch.path().join("link/sbin/init"),
    )
    .unwrap();
    let script = r#"storage_arg() { :; }
net_arg() { :; }
. "$1/composer-cmdline"
for r in sysv systemd shell empty link; do
	init=
	root_init "$2/$r"
	echo "$r: $init"
done
init=/bin/sh
root_init "$2/sysv"
echo "given: $init"
"#;
    let out = support::run_ok(
        Command::new(&busybox)
            .args(["sh", "-c", script, "harness"])
            .arg(init_dir())
            .arg(scratch.path()),
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        concat!(
            "sysv: /sbin/init\nsystemd: /usr/lib/systemd/systemd\nshell: /bin/sh\n",
            "empty: /sbin/init\nlink: /sbin/init\ngiven: /bin/sh\n"
        )
    );
}

/// gpt-auto's choice among a disk's partitions (composer-image-roots' gpt_choose, the
/// partitions as blkid's probe gives them): the one of the machine's root type, /usr
/// from the first of the /usr type, no-auto (GPT attribute 63) passed over, and two
/// roots or none refused with a message naming them.
#[test]
fn gpt_auto_takes_the_one_root_partition_and_refuses_two() {
    let Some(busybox) = support::busybox_static() else {
        return;
    };
    let script = r#"say() { :; }
. "$1/composer-image-roots"
R=4f68bce3-e8cd-4db1-96e7-fbcaf984b709
U=8484680c-9521-48c6-9c11-b0720656f69e
A=b921b045-1df0-41c3-af44-4c6f280d3fae
show() {
	gpt_choose vda "$1"
	echo "$?|$dev|$rtype|$gpt_usr|$ir_why"
}
gpt_parts="/dev/vda1 c12a7328-f81f-11d2-ba4b-00a0c93ec93b 0x0 e5p vfat
/dev/vda2 $R 0x0 r00t ext4
/dev/vda3 $U 0x0 u5r ext4
/dev/vda4 $U 0x0 u5r2 ext4
"
show x86_64
show aarch64
gpt_parts="$gpt_parts/dev/vda5 $R 0x8000000000000000 n0auto xfs
"
show x86_64
gpt_parts="$gpt_parts/dev/vda6 $R 0x0 r00t2 xfs
"
show x86_64
gpt_parts="/dev/vda2 $A 0x1000000000000000 arm btrfs
"
show aarch64
show mips
"#;
    let out = support::run_ok(
        Command::new(&busybox)
            .args(["sh", "-c", script, "harness"])
            .arg(init_dir()),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 6, "{text}");
    assert_eq!(lines[0], "0|/dev/vda2|ext4|PARTUUID=u5r|");
    assert!(
        lines[1].starts_with("2||")
            && lines[1].contains("/dev/vda (the disk the firmware booted from) has no partition of the aarch64 root type (b921b045-1df0-41c3-af44-4c6f280d3fae)"),
        "{}",
        lines[1]
    );
    assert_eq!(
        lines[2], "0|/dev/vda2|ext4|PARTUUID=u5r|",
        "no-auto passed over"
    );
    assert!(
        lines[3].starts_with("2||")
            && lines[3].contains("has 2 partitions of the x86_64 root type (/dev/vda2 /dev/vda6)"),
        "{}",
        lines[3]
    );
    assert_eq!(
        lines[4], "0|/dev/vda2|btrfs||",
        "attribute 60 (read-only) is no no-auto"
    );
    assert!(
        lines[5].contains("the root partition type of this architecture (mips) is not known"),
        "{}",
        lines[5]
    );
}

/// composer-clevis with a stand-in for clevis (`COMPOSER_CLEVIS`): `bound` is true
/// only for a device `clevis luks list` shows a slot of; `key` writes the key of the
/// first listed slot `clevis luks pass` decrypts (slot 1's server fails here, slot
/// 2's answers) and nothing else, and is false with no output when none does.
#[test]
fn composer_clevis_finds_the_bound_slots_and_the_first_key_that_decrypts() {
    let Some(busybox) = support::busybox_static() else {
        return;
    };
    let scratch = Scratch::new("init-clevis");
    let fake = scratch.join("clevis");
    std::fs::write(
        &fake,
        r#"#!/bin/sh
case "$1 $2 $4" in
"luks list /dev/bound") printf '%s\n' "1: tang '{\"url\":\"http://10.0.0.1\"}'" "2: sss '{\"t\":1}'" ;;
"luks list /dev/plain") ;;
"luks pass /dev/bound") [ "$6" = 2 ] && printf 'key-of-slot-2' || exit 1 ;;
*) exit 1 ;;
esac
"#,
    )
    .unwrap();
    support::run_ok(Command::new("chmod").arg("0755").arg(&fake));
    let script = init_dir().join("composer-clevis");
    let run = |args: &[&str]| {
        Command::new(&busybox)
            .arg("sh")
            .arg(&script)
            .args(args)
            .env("COMPOSER_CLEVIS", &fake)
            .output()
            .unwrap()
    };
    assert!(run(&["bound", "/dev/bound"]).status.success());
    assert!(!run(&["bound", "/dev/plain"]).status.success());
    let key = run(&["key", "/dev/bound"]);
    assert!(key.status.success());
    assert_eq!(String::from_utf8_lossy(&key.stdout), "key-of-slot-2");
    let none = run(&["key", "/dev/plain"]);
    assert!(!none.status.success());
    assert!(none.stdout.is_empty());
    let usage = run(&["open", "/dev/bound"]);
    assert_eq!(usage.status.code(), Some(2));
    assert!(usage.stdout.is_empty());
}

/// Runs the systemd image's generator `name` under `shell` with `cmdline` as the kernel's
/// command line (bound over /proc/cmdline in a mount namespace of its own), writing
/// into `out`.
fn run_generator(shell: &[&str], name: &str, cmdline: &str, out: &Path) -> std::process::Output {
    std::fs::create_dir_all(out).unwrap();
    generator_command(shell, name, cmdline, &out.with_extension("cmdline"))
        .arg(out)
        .output()
        .unwrap()
}

/// The command that runs generator `name` (of profiles/init, or a path) under `shell`
/// with `cmdline` (written to `file`) bound over /proc/cmdline in a mount namespace of
/// its own; the caller adds the generator's directories.
fn generator_command(shell: &[&str], name: &str, cmdline: &str, file: &Path) -> Command {
    std::fs::write(file, format!("{cmdline}\n")).unwrap();
    let mut c = Command::new("unshare");
    c.args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg("mount --bind \"$1\" /proc/cmdline && shift && exec \"$@\"")
        .arg("sh")
        .arg(file)
        .args(shell)
        .arg(init_dir().join(name));
    c
}

/// The root device's timeout and deadline, written by composer-timeout-generator on
/// every boot: the device unit it names is the one `systemd-escape --path
/// --suffix=device` names (this machine's, as an oracle), escaped in the shell, with
/// systemd-escape itself only for a path the shell leaves to it; `rd.timeout=0` writes
/// no deadline; no root= writes nothing. Under dash (Debian's /bin/sh, which the
/// systemd image runs it with) and busybox's sh.
#[test]
fn the_timeout_generator_names_the_device_unit_systemd_escape_names() {
    if !support::require_root() {
        return;
    }
    let Some(escape) = support::require_tool("systemd-escape", "systemd") else {
        return;
    };
    let Some(busybox) = support::busybox_static() else {
        return;
    };
    let Some(dash) = support::require_tool("dash", "dash") else {
        return;
    };
    let scratch = Scratch::new("timeout-generator");
    let bb = busybox.to_str().unwrap().to_string();
    let shells: [Vec<&str>; 2] = [vec![dash.to_str().unwrap()], vec![&bb, "sh"]];
    let cases = [
        (
            "UUID=6c0f9d1e-5b7a-4c1f-9e0a-b00750000001",
            "/dev/disk/by-uuid/6c0f9d1e-5b7a-4c1f-9e0a-b00750000001",
        ),
        ("LABEL=my_root.fs:1", "/dev/disk/by-label/my_root.fs:1"),
        ("LABEL=.hidden", "/dev/disk/by-label/.hidden"),
        ("PARTLABEL=a+b,c", "/dev/disk/by-partlabel/a+b,c"),
        ("/dev/mapper/vg-root", "/dev/mapper/vg-root"),
        ("/dev/cmplm//root", "/dev/cmplm//root"),
        ("/dev/vda1", "/dev/vda1"),
    ];
    let mut n = 0;
    for shell in &shells {
        for (root, dev) in cases {
            n += 1;
            let out = scratch.join(format!("out{n}"));
            let o = run_generator(
                shell,
                "composer-timeout-generator",
                &format!("quiet root={root} rd.timeout=20"),
                &out,
            );
            assert!(
                o.status.success(),
                "{shell:?} {root}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            let want =
                support::run_ok(Command::new(&escape).args(["--path", "--suffix=device", dev]));
            let unit = String::from_utf8_lossy(&want.stdout).trim().to_string();
            let dropin = out.join(format!("{unit}.d/composer-timeout.conf"));
            assert!(
                std::fs::read_to_string(&dropin)
                    .is_ok_and(|t| t.contains("JobTimeoutSec=infinity")),
                "{shell:?} {root}: no {} (it wrote {:?})",
                dropin.display(),
                std::fs::read_dir(&out)
                    .unwrap()
                    .map(|e| e.unwrap().file_name())
                    .collect::<Vec<_>>()
            );
            let deadline = std::fs::read_to_string(out.join("composer-deadline.service")).unwrap();
            assert!(
                deadline.contains(&format!("ExecStart=/usr/lib/composer/deadline 20 {dev}\n")),
                "{deadline}"
            );
            let wants = std::fs::read_to_string(
                out.join("initrd-root-device.target.d/composer-deadline.conf"),
            )
            .unwrap();
            assert_eq!(wants, "[Unit]\nWants=composer-deadline.service\n");
        }
        // rd.timeout=0: the device waits forever, and no deadline is set.
        n += 1;
        let out = scratch.join(format!("out{n}"));
        let o = run_generator(
            shell,
            "composer-timeout-generator",
            "root=/dev/vda1 rd.timeout=0",
            &out,
        );
        assert!(o.status.success());
        assert!(out
            .join("dev-vda1.device.d/composer-timeout.conf")
            .is_file());
        assert!(!out.join("composer-deadline.service").exists());
        // No root=: nothing to wait for.
        n += 1;
        let out = scratch.join(format!("out{n}"));
        let o = run_generator(shell, "composer-timeout-generator", "quiet", &out);
        assert!(o.status.success());
        assert_eq!(
            std::fs::read_dir(&out).unwrap().count(),
            0,
            "{shell:?}: wrote for no root="
        );
    }
}

/// composer-image-generator, on every boot: nothing without a live medium or
/// overlayroot on the command line; root=live: wants the live root's service, and
/// overlayroot=tmpfs the overlay's. (A copy of it sources the libraries from here, not
/// from where the image installs them.)
#[test]
fn the_image_generator_acts_only_on_its_options() {
    if !support::require_root() {
        return;
    }
    let Some(busybox) = support::busybox_static() else {
        return;
    };
    let scratch = Scratch::new("image-generator");
    let dir = init_dir();
    let text = std::fs::read_to_string(dir.join("composer-image-generator"))
        .unwrap()
        .replace(
            "/usr/lib/composer/cmdline",
            dir.join("composer-cmdline").to_str().unwrap(),
        )
        .replace(
            "/usr/lib/composer/image-roots",
            dir.join("composer-image-roots").to_str().unwrap(),
        );
    let copy = scratch.join("composer-image-generator");
    std::fs::write(&copy, text).unwrap();
    let bb = busybox.to_str().unwrap().to_string();
    let shell = [bb.as_str(), "sh"];
    for (n, (cmdline, want)) in [
        ("root=UUID=x ro quiet", None),
        (
            "root=live:LABEL=media rd.live.image",
            Some("initrd-root-fs.target.requires/composer-live-root.service"),
        ),
        (
            "root=UUID=x overlayroot=tmpfs",
            Some("initrd-root-fs.target.requires/composer-overlayroot.service"),
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let out = scratch.join(format!("out{n}"));
        let o = run_generator(&shell, copy.to_str().unwrap(), cmdline, &out);
        assert!(
            o.status.success(),
            "{cmdline}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let wrote: Vec<_> = std::fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        match want {
            None => assert!(wrote.is_empty(), "{cmdline}: it wrote {wrote:?}"),
            Some(w) => assert!(
                std::fs::symlink_metadata(out.join(w)).is_ok(),
                "{cmdline}: no {w} (it wrote {wrote:?})"
            ),
        }
    }
}

/// The generators composer-generator-gate runs, and what each gets, for one boot:
/// `cmdline`, files under the case's directory (`etc/crypttab`, an EFI variable...),
/// and the environment systemd gives generators.
fn gate_runs(
    shell: &[&str],
    case: &Path,
    cmdline: &str,
    files: &[&str],
    env: &[(&str, &str)],
) -> Vec<String> {
    let gens = case.join("gens");
    let masks = case.join("masks");
    for d in [&gens, &masks, &case.join("etc"), &case.join("efivars")] {
        std::fs::create_dir_all(d).unwrap();
    }
    let log = case.join("ran");
    for name in GATED.iter().chain(&["systemd-other-generator"]) {
        let stub = gens.join(name);
        std::fs::write(
            &stub,
            format!("#!/bin/sh\necho \"{name} $*\" >>'{}'\n", log.display()),
        )
        .unwrap();
        std::fs::set_permissions(&stub, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        std::os::unix::fs::symlink("/dev/null", masks.join(name)).unwrap();
    }
    // A generator of systemd's that composer does not mask: systemd runs it, not the gate.
    std::fs::write(gens.join("systemd-fstab-generator"), "#!/bin/sh\nexit 1\n").unwrap();
    for f in files {
        let p = case.join(f);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, "x\n").unwrap();
    }
    let text = std::fs::read_to_string(init_dir().join("composer-generator-gate")).unwrap();
    let mut replaced = 0;
    let text: String = text
        .lines()
        .map(|l| {
            let to = match l.split_once('=').map(|(k, _)| k) {
                Some("masks") => masks.clone(),
                Some("gens") => gens.clone(),
                Some("etc") => case.join("etc"),
                Some("efivars") => case.join("efivars"),
                _ => return format!("{l}\n"),
            };
            replaced += 1;
            format!("{}={}\n", l.split_once('=').unwrap().0, to.display())
        })
        .collect();
    assert_eq!(replaced, 4, "the gate's four paths");
    let copy = case.join("composer-generator-gate");
    std::fs::write(&copy, text).unwrap();
    let out = case.join("out");
    std::fs::create_dir_all(&out).unwrap();
    let o = generator_command(
        shell,
        copy.to_str().unwrap(),
        cmdline,
        &case.join("cmdline"),
    )
    .args([out.join("normal"), out.join("early"), out.join("late")])
    .env_remove("CREDENTIALS_DIRECTORY")
    .env_remove("ENCRYPTED_CREDENTIALS_DIRECTORY")
    .env_remove("SYSTEMD_PROC_CMDLINE")
    .envs(env.iter().copied())
    .output()
    .unwrap();
    assert!(
        o.status.success(),
        "{cmdline}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let ran = std::fs::read_to_string(&log).unwrap_or_default();
    let args = format!(
        "{} {} {}",
        out.join("normal").display(),
        out.join("early").display(),
        out.join("late").display()
    );
    ran.lines()
        .map(|l| {
            let (name, got) = l.split_once(' ').unwrap();
            assert_eq!(got, args, "{cmdline}: {name} got other arguments");
            name.to_string()
        })
        .collect()
}

/// The generators of systemd's that composer's systemd image masks and
/// composer-generator-gate runs when the boot gives them work.
const GATED: [&str; 5] = [
    "systemd-cryptsetup-generator",
    "systemd-debug-generator",
    "systemd-gpt-auto-generator",
    "systemd-hibernate-resume-generator",
    "systemd-veritysetup-generator",
];

/// The systemd profile masks the generators composer-generator-gate knows, and only
/// those.
#[test]
fn the_systemd_profile_masks_the_generators_the_gate_knows() {
    let profile = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("profiles/init-systemd.toml"),
    )
    .unwrap();
    assert_eq!(
        profile
            .matches("path = \"/usr/local/lib/systemd/system-generators/")
            .count(),
        GATED.len(),
        "the systemd profile masks other generators"
    );
    for name in GATED {
        assert!(
            profile.contains(&format!(
                "path = \"/usr/local/lib/systemd/system-generators/{name}\"\ntarget = \"/dev/null\""
            )),
            "the systemd profile does not mask {name}"
        );
    }
    let gate = std::fs::read_to_string(init_dir().join("composer-generator-gate")).unwrap();
    for name in GATED {
        assert!(
            gate.contains(&format!("\t{name})")),
            "the gate has no case for {name}"
        );
    }
}

/// composer-generator-gate, on every boot of the systemd image: systemd's own
/// generators that composer masks run only when the command line, the image's /etc,
/// the firmware's variables or the system credentials give them work, each with the
/// gate's three directories; one it does not know always runs; one the image's /etc
/// overrides is left to systemd. Under dash and busybox's sh.
#[test]
fn the_generator_gate_runs_systemds_generators_only_with_work() {
    if !support::require_root() {
        return;
    }
    let Some(busybox) = support::busybox_static() else {
        return;
    };
    let Some(dash) = support::require_tool("dash", "dash") else {
        return;
    };
    let scratch = Scratch::new("generator-gate");
    let bb = busybox.to_str().unwrap().to_string();
    let shells: [Vec<&str>; 2] = [vec![dash.to_str().unwrap()], vec![&bb, "sh"]];
    let hibernate = "efivars/HibernateLocation-8cf2644b-4b0b-428f-9387-6d876050dc67";
    let options = "efivars/SystemdOptions-8cf2644b-4b0b-428f-9387-6d876050dc67";
    let creds = scratch.join("creds");
    std::fs::create_dir_all(creds.join("full")).unwrap();
    std::fs::create_dir_all(creds.join("empty")).unwrap();
    std::fs::write(creds.join("full/systemd.extra-unit.x.service"), "x").unwrap();
    let (full, empty) = (
        creds.join("full").display().to_string(),
        creds.join("empty").display().to_string(),
    );
    let gpt = "systemd-gpt-auto-generator";
    let verity = "systemd-veritysetup-generator";
    let resume = "systemd-hibernate-resume-generator";
    let crypt = "systemd-cryptsetup-generator";
    let debug = "systemd-debug-generator";
    #[allow(clippy::type_complexity)]
    let cases: Vec<(&str, Vec<&str>, Vec<(&str, &str)>, Vec<&str>)> = vec![
        ("root=UUID=x ro quiet", vec![], vec![], vec![]),
        ("ro quiet", vec![], vec![], vec![gpt]),
        ("root=gpt-auto", vec![], vec![], vec![gpt]),
        ("root=\"gpt-auto\"", vec![], vec![], vec![gpt]),
        ("root=UUID=x root=gpt-auto-force", vec![], vec![], vec![gpt]),
        ("root=gpt-auto root=UUID=x", vec![], vec![], vec![]),
        ("root=tmpfs mount.usr=dissect", vec![], vec![], vec![gpt]),
        (
            "root=/dev/mapper/root roothash=ab12",
            vec![],
            vec![],
            vec![verity],
        ),
        ("root=UUID=x usrhash=ab12", vec![], vec![], vec![verity]),
        ("root=UUID=x rd.luks.uuid=1234", vec![], vec![], vec![crypt]),
        ("root=UUID=x luks=no", vec![], vec![], vec![crypt]),
        ("root=UUID=x resume=UUID=y", vec![], vec![], vec![resume]),
        (
            "root=UUID=x rd.systemd.wants=a.service",
            vec![],
            vec![],
            vec![debug],
        ),
        (
            "root=UUID=x systemd.mask=a.service",
            vec![],
            vec![],
            vec![debug],
        ),
        (
            "root=UUID=x systemd.verity_root_data=/dev/vdb",
            vec![],
            vec![],
            vec![debug, verity],
        ),
        ("root=UUID=x", vec!["etc/crypttab"], vec![], vec![crypt]),
        ("root=UUID=x", vec!["etc/veritytab"], vec![], vec![verity]),
        ("root=UUID=x", vec![hibernate], vec![], vec![resume]),
        ("root=UUID=x", vec![options], vec![], GATED.to_vec()),
        (
            "ro",
            vec!["etc/systemd/system-generators/systemd-gpt-auto-generator"],
            vec![],
            vec![],
        ),
        (
            "root=UUID=x",
            vec![],
            vec![("CREDENTIALS_DIRECTORY", &full)],
            vec![debug],
        ),
        (
            "root=UUID=x",
            vec![],
            vec![("CREDENTIALS_DIRECTORY", &empty)],
            vec![],
        ),
        (
            "root=UUID=x",
            vec![],
            vec![("SYSTEMD_PROC_CMDLINE", "root=UUID=x")],
            GATED.to_vec(),
        ),
    ];
    for (s, shell) in shells.iter().enumerate() {
        for (n, (cmdline, files, env, want)) in cases.iter().enumerate() {
            let case = scratch.join(format!("s{s}-{n}"));
            let ran = gate_runs(shell, &case, cmdline, files, env);
            let mut want: Vec<String> = want.iter().map(|w| w.to_string()).collect();
            want.push("systemd-other-generator".into());
            want.sort();
            let mut got = ran.clone();
            got.sort();
            assert_eq!(
                got, want,
                "{shell:?}, {cmdline:?} with {files:?} {env:?}: ran {ran:?}"
            );
        }
    }
}

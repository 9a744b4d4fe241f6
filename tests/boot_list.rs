//! Acceptance test: an archive that composer builds from a legacy gen_init_cpio list
//! boots Debian's kernel under qemu, and /init (a busybox shell script inside the
//! archive) finds every entry as the list describes it: directories, owners, modes, a
//! hardlink pair, symlinks, device nodes, a fifo, a socket, file contents and mtimes.
//!
//! A control test boots the same list built by the kernel's own gen_init_cpio, so a
//! broken harness or guest is told apart from a broken composer.

use crate::support;

use std::fmt::Write as _;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use support::{DebianKernel, Scratch};

const MARKER_OK: &str = "COMPOSER-BOOT-OK";
const MARKER_FAIL: &str = "COMPOSER-BOOT-FAIL";
const MTIME: u32 = 1_700_000_000;
const BIG_SIZE: usize = 20_000;

/// What the guest needs: the list file and the md5 the guest must find for the big file.
struct Fixture {
    list: PathBuf,
}

/// Writes the payload files and the list into `dir`.
fn write_fixture(dir: &Path, busybox: &Path, kernel: &DebianKernel) -> Fixture {
    // A file larger than 4 KiB whose content is not a repeat of a 4 KiB block, so a
    // misplaced or misaligned data copy changes its checksum.
    let big: Vec<u8> = (0..BIG_SIZE as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8 ^ (i % 251) as u8)
        .collect();
    let big_path = dir.join("big.bin");
    fs::write(&big_path, &big).unwrap();
    let big_md5 = md5_hex(busybox, &big_path);

    fs::write(dir.join("hostname"), "composer-boot\n").unwrap();

    let check_mtime = kernel.config_enabled("CONFIG_INITRAMFS_PRESERVE_MTIME");
    let init = init_script(&big_md5, check_mtime);
    let init_path = dir.join("init.sh");
    fs::write(&init_path, init).unwrap();
    fs::set_permissions(&init_path, fs::Permissions::from_mode(0o755)).unwrap();

    let mut list = String::new();
    let l = &mut list;
    writeln!(l, "# composer boot test (legacy gen_init_cpio list)").unwrap();
    writeln!(l, "dir /bin 0755 0 0").unwrap();
    writeln!(l, "dir /dev 0755 0 0").unwrap();
    writeln!(l, "dir /proc 0555 0 0").unwrap();
    writeln!(l, "dir /sys 0555 0 0").unwrap();
    writeln!(l, "dir /etc 0755 0 0").unwrap();
    writeln!(l, "dir /data 0750 0 0").unwrap();
    writeln!(l, "nod /dev/console 0600 0 0 c 5 1").unwrap();
    writeln!(l, "nod /dev/null 0666 0 0 c 1 3").unwrap();
    writeln!(l, "nod /dev/ttyS0 0620 0 5 c 4 64").unwrap();
    writeln!(l, "nod /dev/loop0 0660 0 6 b 7 0").unwrap();
    writeln!(l, "file /bin/busybox {} 0755 0 0", busybox.display()).unwrap();
    writeln!(l, "slink /bin/sh /bin/busybox 0777 0 0").unwrap();
    writeln!(l, "file /init {} 0755 0 0", init_path.display()).unwrap();
    writeln!(
        l,
        "file /etc/hostname {} 0644 0 0",
        dir.join("hostname").display()
    )
    .unwrap();
    writeln!(
        l,
        "file /data/big {} 0640 1000 100 /data/big-link",
        big_path.display()
    )
    .unwrap();
    writeln!(l, "slink /data/sym big 0777 0 0").unwrap();
    writeln!(l, "pipe /data/fifo 0600 0 0").unwrap();
    writeln!(l, "sock /data/sock 0755 0 0").unwrap();
    let list_path = dir.join("list.txt");
    fs::write(&list_path, list).unwrap();
    Fixture { list: list_path }
}

fn md5_hex(busybox: &Path, file: &Path) -> String {
    let out = support::run_ok(Command::new(busybox).arg("md5sum").arg(file));
    let text = String::from_utf8(out.stdout).unwrap();
    let sum = text.split_whitespace().next().unwrap().to_string();
    assert_eq!(sum.len(), 32, "unexpected md5sum output {text:?}");
    sum
}

/// The guest's /init: checks every entry, prints MARKER_OK only if all checks pass.
fn init_script(big_md5: &str, check_mtime: bool) -> String {
    let mut s = String::from(
        r#"#!/bin/busybox sh
bb=/bin/busybox
fail=0
check() {
    if [ "$2" = "$3" ]; then
        echo "check ok: $1"
    else
        echo "COMPOSER-BOOT-FAIL: $1: expected '$2', got '$3'"
        fail=1
    fi
}
echo "composer boot test: /init running"
for d in /bin /dev /etc; do
    check "dir $d" "directory:755:0:0" "$($bb stat -c %F:%a:%u:%g $d 2>&1)"
done
check "dir /proc" "directory:555:0:0" "$($bb stat -c %F:%a:%u:%g /proc 2>&1)"
check "dir /sys" "directory:555:0:0" "$($bb stat -c %F:%a:%u:%g /sys 2>&1)"
check "dir /data" "directory:750:0:0" "$($bb stat -c %F:%a:%u:%g /data 2>&1)"
check "busybox" "regular file:755:0:0" "$($bb stat -c %F:%a:%u:%g /bin/busybox 2>&1)"
check "init" "regular file:755:0:0" "$($bb stat -c %F:%a:%u:%g /init 2>&1)"
check "hostname content" "composer-boot" "$($bb cat /etc/hostname 2>&1)"
check "hostname meta" "regular file:644:0:0:14" "$($bb stat -c %F:%a:%u:%g:%s /etc/hostname 2>&1)"
check "big meta" "regular file:640:1000:100:20000:2" "$($bb stat -c %F:%a:%u:%g:%s:%h /data/big 2>&1)"
check "big-link meta" "regular file:640:1000:100:20000:2" "$($bb stat -c %F:%a:%u:%g:%s:%h /data/big-link 2>&1)"
check "hardlink same inode" "$($bb stat -c %i /data/big 2>&1)" "$($bb stat -c %i /data/big-link 2>&1)"
check "big md5" "@BIG_MD5@" "$($bb md5sum /data/big 2>&1 | $bb cut -d' ' -f1)"
check "big-link md5" "@BIG_MD5@" "$($bb md5sum /data/big-link 2>&1 | $bb cut -d' ' -f1)"
check "symlink type" "symbolic link" "$($bb stat -c %F /data/sym 2>&1)"
check "symlink target" "big" "$($bb readlink /data/sym 2>&1)"
check "symlink md5" "@BIG_MD5@" "$($bb md5sum /data/sym 2>&1 | $bb cut -d' ' -f1)"
check "abs symlink target" "/bin/busybox" "$($bb readlink /bin/sh 2>&1)"
check "console" "character special file:5:1:600:0:0" "$($bb stat -c %F:%t:%T:%a:%u:%g /dev/console 2>&1)"
check "null" "character special file:1:3:666:0:0" "$($bb stat -c %F:%t:%T:%a:%u:%g /dev/null 2>&1)"
check "ttyS0" "character special file:4:40:620:0:5" "$($bb stat -c %F:%t:%T:%a:%u:%g /dev/ttyS0 2>&1)"
check "loop0" "block special file:7:0:660:0:6" "$($bb stat -c %F:%t:%T:%a:%u:%g /dev/loop0 2>&1)"
check "fifo" "fifo:600" "$($bb stat -c %F:%a /data/fifo 2>&1)"
check "sock" "socket:755" "$($bb stat -c %F:%a /data/sock 2>&1)"
"#,
    );
    if check_mtime {
        s.push_str(
            r#"for p in /data/big /data/big-link /init /etc/hostname /data /bin /etc; do
    check "mtime $p" "@MTIME@" "$($bb stat -c %Y $p 2>&1)"
done
check "symlink mtime" "@MTIME@" "$($bb stat -c %Y /data/sym 2>&1)"
check "node mtime" "@MTIME@" "$($bb stat -c %Y /dev/null 2>&1)"
"#,
        );
    } else {
        s.push_str("echo 'kernel lacks CONFIG_INITRAMFS_PRESERVE_MTIME: mtimes not checked'\n");
    }
    s.push_str(
        r#"if [ "$fail" = 0 ]; then
    echo "COMPOSER-BOOT-OK"
else
    echo "composer boot test: some checks failed"
fi
$bb poweroff -f
"#,
    );
    s.replace("@BIG_MD5@", big_md5)
        .replace("@MTIME@", &MTIME.to_string())
}

/// Boots `initrd` and asserts that /init reported success; prints the console otherwise.
fn boot_and_check(what: &str, kernel: &DebianKernel, initrd: &Path) {
    let result = support::qemu_boot_logged(what, kernel, initrd, Duration::from_secs(180));
    if let Err(e) = result.reported(MARKER_OK, MARKER_FAIL) {
        panic!(
            "{what}: {e}\n===== console =====\n{}\n===== end =====",
            result.console
        );
    }
}

#[test]
fn composer_list_archive_boots() {
    let Some((_qemu, kernel, busybox)) = support::require_boot_env() else {
        return;
    };
    let dir = Scratch::new("boot_list");
    let fx = write_fixture(&dir, &busybox, &kernel);
    let out = dir.join("initrd.cpio");
    support::run_ok(
        support::composer()
            .args(["build", "--list"])
            .arg(&fx.list)
            .arg("-o")
            .arg(&out)
            .args(["-a", "4096", "-t", &MTIME.to_string()]),
    );

    // Host-side sanity: the archive parses, and with -a 4096 the data of every regular
    // file larger than 4096 bytes starts at a multiple of 4096.
    let bytes =
        fs::read(&out).unwrap_or_else(|e| panic!("composer build wrote no {}: {e}", out.display()));
    let entries = support::parse_newc(&bytes).expect("composer's archive parses as newc");
    for e in &entries {
        if e.mode & 0o170000 == 0o100000 && e.filesize > 4096 {
            assert_eq!(
                e.data_offset % 4096,
                0,
                "{}: data not 4096-aligned",
                e.name_str()
            );
        }
    }
    let big = entries
        .iter()
        .filter(|e| e.name == b"data/big" || e.name == b"data/big-link");
    assert_eq!(
        big.clone().count(),
        2,
        "both hardlink names are in the archive"
    );
    assert_eq!(
        big.filter(|e| e.filesize > 0).count(),
        1,
        "one hardlink name carries the data"
    );

    boot_and_check("composer build --list", &kernel, &out);
}

/// Control: the same list through the kernel's own gen_init_cpio (which in 6.12 has no
/// `-a`) must boot too; if it does not, the harness or guest is at fault, not composer.
#[test]
fn oracle_list_archive_boots() {
    let Some((_qemu, kernel, busybox)) = support::require_boot_env() else {
        return;
    };
    let Some(gen) = support::kernel_gen_init_cpio() else {
        return;
    };
    let dir = Scratch::new("boot_list_oracle");
    let fx = write_fixture(&dir, &busybox, &kernel);
    let out = support::run_ok(
        Command::new(gen)
            .args(["-t", &MTIME.to_string()])
            .arg(&fx.list),
    );
    let initrd = dir.join("initrd.cpio");
    fs::write(&initrd, &out.stdout).unwrap();
    support::parse_newc(&out.stdout).expect("gen_init_cpio's archive parses as newc");
    boot_and_check("kernel gen_init_cpio", &kernel, &initrd);
}

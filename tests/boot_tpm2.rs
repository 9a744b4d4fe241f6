//! TPM2 unlock with the systemd init: a LUKS2 root enrolled with
//! `systemd-cryptenroll --tpm2-device=auto` inside a guest (swtpm as QEMU's TPM) opens
//! with no prompt when the TPM is there, and asks for the passphrase when it is not.
//!
//! The makeroot guest (`tests/storage/makeroot-tpm2.toml`: the storage tests' makeroot
//! with systemd-cryptenroll and the tpm2-tss libraries) formats the volume and enrolls
//! it with no PCR binding (the guests that boot it load other initrds, so their PCRs
//! differ from the makeroot guest's). The TPM's state is kept with the disk; each boot
//! runs on a copy of it.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{self, BootOptions, DebianKernel, Scratch};

const PASSPHRASE: &str = "cmp-Tpm2-Pass-1618";
const LUKS_UUID: &str = "5a1e0002-0000-4000-8000-0000000f7002";
const FS_UUID: &str = "5a1e0002-0000-4000-8000-0000000f5002";

/// A software TPM for one guest, stopped when dropped.
pub(crate) struct Swtpm {
    child: Child,
    socket: PathBuf,
}

impl Swtpm {
    /// Starts swtpm on the TPM state in `state`.
    pub(crate) fn start(swtpm: &Path, state: &Path) -> Result<Swtpm, String> {
        let socket = state.join("swtpm.sock");
        let _ = fs::remove_file(&socket);
        let child = Command::new(swtpm)
            .args(["socket", "--tpm2", "--tpmstate"])
            .arg(format!("dir={}", state.display()))
            .arg("--ctrl")
            .arg(format!("type=unixio,path={}", socket.display()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("swtpm: {e}"))?;
        let t = Swtpm { child, socket };
        let start = Instant::now();
        while !t.socket.exists() {
            if start.elapsed() > Duration::from_secs(10) {
                return Err("swtpm made no socket in 10 s".into());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(t)
    }

    /// Starts swtpm on a copy in `copy` of the TPM state in `state` (each boot on its
    /// own copy of the disk's TPM).
    pub(crate) fn start_on_copy(swtpm: &Path, state: &Path, copy: &Path) -> Result<Swtpm, String> {
        fs::create_dir_all(copy).map_err(|e| e.to_string())?;
        for e in fs::read_dir(state).map_err(|e| e.to_string())?.flatten() {
            if e.file_type().is_ok_and(|t| t.is_file()) {
                fs::copy(e.path(), copy.join(e.file_name())).map_err(|e| e.to_string())?;
            }
        }
        Swtpm::start(swtpm, copy)
    }

    /// qemu's arguments for a TIS TPM on this swtpm.
    pub(crate) fn qemu_args(&self) -> Vec<std::ffi::OsString> {
        [
            "-chardev".to_string(),
            format!("socket,id=chrtpm,path={}", self.socket.display()),
            "-tpmdev".into(),
            "emulator,id=tpm0,chardev=chrtpm".into(),
            "-device".into(),
            "tpm-tis,tpmdev=tpm0".into(),
        ]
        .into_iter()
        .map(Into::into)
        .collect()
    }
}

impl Drop for Swtpm {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn makeroot_script() -> String {
    format!(
        r#"n=0
while {{ [ ! -b /dev/vda ] || [ ! -c /dev/tpmrm0 ]; }} && [ $n -lt 100 ]; do $b sleep 0.1; n=$((n + 1)); done
[ -c /dev/tpmrm0 ] || fail "no TPM (/dev/tpmrm0)"
run /usr/sbin/cryptsetup luksFormat --type luks2 --pbkdf pbkdf2 --pbkdf-force-iterations 1000 \
    --batch-mode --key-file /stage/passfile --uuid {LUKS_UUID} /dev/vda
export PASSWORD="$($b cat /stage/passfile)"
run /usr/bin/systemd-cryptenroll --tpm2-device=auto --tpm2-pcrs= /dev/vda
unset PASSWORD
run /usr/sbin/cryptsetup luksDump /dev/vda
$b grep -q systemd-tpm2 /tmp/out || fail "no systemd-tpm2 token after enrolling"
run /usr/sbin/cryptsetup open --key-file /stage/passfile /dev/vda root
run /usr/sbin/mke2fs -q -t ext4 -E nodiscard -U {FS_UUID} -d /stage/root /dev/mapper/root
run /usr/sbin/cryptsetup close root
$b sync
echo MAKEROOT-OK
$b poweroff -f
"#
    )
}

/// A LUKS2 disk (`disk.img`, 64 MiB) that `script` formats and enrolls in the makeroot
/// guest (`tests/storage/makeroot-tpm2.toml`) with swtpm as its TPM, whose state is kept
/// in `tpm/`; made once into the test asset `asset`. The guest finds the passphrase in
/// /stage/passfile and the root's tree, holding a token named after `token_name`, in
/// /stage/root; `prepare` adds to the asset and the stage first (asset dir, stage
/// dir, the root's tree). (dir, token)
#[allow(clippy::too_many_arguments)]
pub(crate) fn enrolled_disk(
    kernel: &DebianKernel,
    busybox: &Path,
    swtpm: &Path,
    asset: &str,
    token_name: &str,
    passphrase: &str,
    script: &str,
    prepare: impl FnOnce(&Path, &Path, &Path) -> Result<(), String>,
) -> Option<(PathBuf, String)> {
    for (tool, pkg) in [
        ("cryptsetup", "cryptsetup-bin"),
        ("systemd-cryptenroll", "systemd"),
        ("mke2fs", "e2fsprogs"),
    ] {
        support::require_tool(tool, pkg)?;
    }
    let dir = support::cached_asset(asset, |dir| {
        let e = |e: std::io::Error| e.to_string();
        fs::create_dir_all(dir.join("tpm")).map_err(e)?;
        let work = dir.join("work");
        let stage = work.join("stage");
        fs::create_dir_all(&stage).map_err(e)?;
        let token = crate::boot_root::token(token_name);
        let s = crate::boot_root::staging(&work.join("root"), busybox, &token);
        prepare(dir, &stage, &s)?;
        fs::rename(&s, stage.join("root")).map_err(e)?;
        fs::write(stage.join("passfile"), passphrase).map_err(e)?;
        let disk = dir.join("disk.img");
        fs::File::create(&disk)
            .and_then(|f| f.set_len(64 << 20))
            .map_err(e)?;
        let tpm = Swtpm::start(swtpm, &dir.join("tpm"))?;
        let mut args: Vec<std::ffi::OsString> = vec![
            "-drive".into(),
            format!("file={},format=raw,if=virtio", disk.display()).into(),
        ];
        args.extend(tpm.qemu_args());
        crate::boot_storage::makeroot(
            kernel,
            "makeroot-tpm2.toml",
            &work,
            &[
                "virtio_pci",
                "virtio_blk",
                "dm-mod",
                "dm-crypt",
                "algif_skcipher",
                "xts",
                "ext4",
            ],
            script,
            &stage,
            args,
            1024,
        )?;
        drop(tpm);
        let _ = fs::remove_file(dir.join("tpm/swtpm.sock"));
        fs::write(dir.join("token"), &token).map_err(e)?;
        fs::remove_dir_all(&work).map_err(e)
    })?;
    let token = fs::read_to_string(dir.join("token")).unwrap();
    Some((dir, token))
}

/// qemu's arguments for the enrolled disk in `dir` (each boot on a snapshot of it).
pub(crate) fn disk_args(dir: &Path) -> Vec<std::ffi::OsString> {
    vec![
        "-drive".into(),
        format!(
            "file={},format=raw,if=virtio,snapshot=on",
            dir.join("disk.img").display()
        )
        .into(),
    ]
}

#[test]
fn systemd_opens_a_tpm2_enrolled_root_with_no_prompt_and_asks_without_the_tpm() {
    let Some((_, kernel, busybox)) = support::require_platform_env() else {
        return;
    };
    if !support::require_root() || support::require_tool("udevadm", "udev").is_none() {
        return;
    }
    let Some(swtpm) = support::require_tool("swtpm", "swtpm") else {
        return;
    };
    let Some((dir, token)) = enrolled_disk(
        &kernel,
        &busybox,
        &swtpm,
        "tpm2-disk-v2",
        "tpm2",
        PASSPHRASE,
        &makeroot_script(),
        |_, _, _| Ok(()),
    ) else {
        return;
    };
    let image = support::generic_image(&kernel, "systemd");
    let want = format!("COMPOSER-ROOT-OK {token} ");
    let append = format!(
        "root=UUID={FS_UUID} rd.luks.uuid={LUKS_UUID} rd.luks.options=tpm2-device=auto \
         rd.timeout=90 systemd.show_status=1 systemd.default_timeout_start_sec=120"
    );
    let prompt = "Please enter passphrase";
    let mut failed = Vec::new();
    for with_tpm in [true, false] {
        let scratch = Scratch::new("tpm2-boot");
        let mut args = disk_args(&dir);
        let tpm = if with_tpm {
            let t = Swtpm::start_on_copy(&swtpm, &dir.join("tpm"), &scratch.join("tpm")).unwrap();
            args.extend(t.qemu_args());
            Some(t)
        } else {
            None
        };
        let r = support::qemu_boot_with(
            &kernel,
            &image,
            &BootOptions {
                memory_mib: 1024,
                extra_append: append.clone(),
                extra_args: args,
                timeout: Duration::from_secs(600),
                answers: if with_tpm {
                    Vec::new()
                } else {
                    vec![(prompt.to_string(), format!("{PASSPHRASE}\n"))]
                },
                ..BootOptions::default()
            },
        );
        drop(tpm);
        let what = if with_tpm {
            "with the TPM"
        } else {
            "without a TPM"
        };
        eprintln!(
            "--- systemd, {what} ({:.1} s) ---\n{}",
            r.elapsed.as_secs_f64(),
            r.console
        );
        if !r.console.contains(&want) {
            failed.push(format!("{what}: no `{want}`"));
        }
        if with_tpm && r.console.contains(prompt) {
            failed.push(format!("{what}: asked for the passphrase"));
        }
        if !with_tpm && !r.console.contains(prompt) {
            failed.push(format!("{what}: never asked for the passphrase"));
        }
        if r.console.contains(PASSPHRASE) {
            failed.push(format!("{what}: the passphrase shows on the console"));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("; "));
}

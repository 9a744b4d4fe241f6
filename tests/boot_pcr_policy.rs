//! Signed PCR 11 policies: a LUKS2 root enrolled inside a guest with
//! `systemd-cryptenroll --tpm2-public-key=pub.pem --tpm2-public-key-pcrs=11` opens with
//! no prompt from UKIs of the generic systemd image signed with that key
//! (`--pcr-private-key`), including one with another command line (the update case);
//! a UKI whose policies are signed with another key, and the first UKI with one byte of
//! its `.cmdline` changed and re-signed for Secure Boot, ask for the passphrase. The
//! root reads PCR 11 from sysfs: it equals what `systemd-measure calculate` says for
//! the UKI's sections and the phases `enter-initrd:leave-initrd`. Each UKI boots under
//! OVMF with swtpm as its TPM (a copy of the TPM's state the disk was enrolled with).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::boot_tpm2::Swtpm;
use crate::support::{self, BootOptions, DebianKernel, Scratch};

const PASSPHRASE: &str = "cmp-Pcr11-Pass-2718";
const LUKS_UUID: &str = "5a1e0003-0000-4000-8000-0000000f7003";
const FS_UUID: &str = "5a1e0003-0000-4000-8000-0000000f5003";

/// The root's init: PCR 11 as the kernel shows it, then the token.
const INIT: &str = r#"#!/bin/busybox sh
b=/bin/busybox
$b mount -t proc proc /proc 2>/dev/null
$b mount -t sysfs sysfs /sys 2>/dev/null
echo "COMPOSER-PCR11 $($b cat /sys/class/tpm/tpm0/pcr-sha256/11 2>/dev/null | $b tr A-F a-f)"
echo "COMPOSER-ROOT-OK $($b cat /token) pid=$$"
$b poweroff -f
"#;

fn makeroot_script() -> String {
    format!(
        r#"n=0
while {{ [ ! -b /dev/vda ] || [ ! -c /dev/tpmrm0 ]; }} && [ $n -lt 100 ]; do $b sleep 0.1; n=$((n + 1)); done
[ -c /dev/tpmrm0 ] || fail "no TPM (/dev/tpmrm0)"
run /usr/sbin/cryptsetup luksFormat --type luks2 --pbkdf pbkdf2 --pbkdf-force-iterations 1000 \
    --batch-mode --key-file /stage/passfile --uuid {LUKS_UUID} /dev/vda
export PASSWORD="$($b cat /stage/passfile)"
run /usr/bin/systemd-cryptenroll --tpm2-device=auto --tpm2-pcrs= \
    --tpm2-public-key=/stage/pcr-pub.pem --tpm2-public-key-pcrs=11 /dev/vda
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

/// The enrolled disk, the TPM's state, the PCR key pair it trusts (`pcr.pem`) and
/// another key (`other.pem`), made once into the test assets: (dir, token).
fn disk(kernel: &DebianKernel, busybox: &Path, swtpm: &Path) -> Option<(PathBuf, String)> {
    support::require_tool("openssl", "openssl")?;
    crate::boot_tpm2::enrolled_disk(
        kernel,
        busybox,
        swtpm,
        "pcr-policy-disk-v2",
        "pcr11",
        PASSPHRASE,
        &makeroot_script(),
        |dir, stage, root| {
            for key in ["pcr", "other"] {
                support::try_run(
                    Command::new("openssl")
                        .args(["genrsa", "-out"])
                        .arg(dir.join(format!("{key}.pem")))
                        .arg("2048"),
                )?;
            }
            support::try_run(
                Command::new("openssl")
                    .args(["pkey", "-pubout", "-in"])
                    .arg(dir.join("pcr.pem"))
                    .arg("-out")
                    .arg(stage.join("pcr-pub.pem")),
            )?;
            fs::write(root.join("sbin/init"), INIT).map_err(|e| e.to_string())
        },
    )
}

/// PCR 11 as the platform's own `systemd-measure calculate` has it for the measured
/// sections of `uki` (dumped with objcopy) after the phases `enter-initrd:leave-initrd`.
fn expected_pcr11(kernel: &DebianKernel, uki: &Path, scratch: &Path) -> String {
    let measure = support::Userland::new(kernel, scratch);
    let mut cmd = measure.command("/usr/lib/systemd/systemd-measure");
    cmd.args([
        "calculate",
        "--bank=sha256",
        "--phase=enter-initrd:leave-initrd",
        "--json=short",
    ]);
    for s in crate::uki::measured_sections(uki) {
        let out = scratch.join(format!("section.{s}"));
        support::run_ok(
            Command::new("objcopy")
                .arg("--dump-section")
                .arg(format!(".{s}={}", out.display()))
                .arg(uki)
                .arg(scratch.join("objcopy.out")),
        );
        cmd.arg(format!("--{s}={}", measure.path(&out)));
    }
    let o = support::run_ok(&mut cmd);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    v["sha256"][0]["hash"].as_str().unwrap().to_string()
}

#[test]
fn a_signed_pcr_policy_unlocks_updates_and_nothing_else() {
    let Some((_, kernel, busybox)) = support::require_platform_env() else {
        return;
    };
    if !support::require_root() || support::require_tool("udevadm", "udev").is_none() {
        return;
    }
    if crate::uki::uefi_env().is_none() {
        return;
    }
    let stub = support::stub_of(&kernel);
    let Some(swtpm) = support::require_tool("swtpm", "swtpm") else {
        return;
    };
    if !crate::uki::has_measure(&kernel) {
        return;
    }
    let Some((dir, token)) = disk(&kernel, &busybox, &swtpm) else {
        return;
    };
    let scratch = Scratch::new("pcr-policy");
    let manifest = scratch.join("pcr.toml");
    fs::write(&manifest, "include = [\"generic\"]\ninit = \"systemd\"\n").unwrap();
    let base = format!(
        "console=ttyS0 panic=-1 root=UUID={FS_UUID} rd.luks.uuid={LUKS_UUID} \
         rd.luks.options=tpm2-device=auto rd.timeout=90 systemd.show_status=1 \
         systemd.default_timeout_start_sec=120"
    );
    let uki = |name: &str, cmdline: &str, key: &str| {
        let out = scratch.join(format!("{name}.efi"));
        support::run_ok(
            support::build_with(&kernel)
                .arg(&manifest)
                .args(["--uki", "--kernel"])
                .arg(&kernel.vmlinuz)
                .args(["--stub", stub.to_str().unwrap(), "--cmdline", cmdline])
                .arg("--pcr-private-key")
                .arg(dir.join(key))
                .arg("-o")
                .arg(&out),
        );
        out
    };
    let first = uki("first", &format!("{base} composer.test=0"), "pcr.pem");
    let update = uki(
        "update",
        &format!("{base} composer.test=update quiet"),
        "pcr.pem",
    );
    let other_key = uki("other-key", &format!("{base} composer.test=0"), "other.pem");
    // The first UKI with `composer.test=0` made `=1` in its .cmdline, then signed
    // for Secure Boot with the snakeoil key OVMF's snakeoil store trusts.
    let mut bytes = fs::read(&first).unwrap();
    let at = bytes
        .windows(15)
        .position(|w| w == b"composer.test=0")
        .unwrap();
    bytes[at + 14] = b'1';
    let edited_unsigned = scratch.join("edited-unsigned.efi");
    fs::write(&edited_unsigned, &bytes).unwrap();
    let passphrase = scratch.join("snakeoil-passphrase");
    fs::write(&passphrase, "snakeoil\n").unwrap();
    let plain_key = scratch.join("snakeoil.key");
    support::run_ok(
        Command::new("openssl")
            .args(["pkey", "-passin", "pass:snakeoil", "-in"])
            .arg("/usr/share/ovmf/PkKek-1-snakeoil.key")
            .arg("-out")
            .arg(&plain_key),
    );
    let edited = scratch.join("edited.efi");
    support::run_ok(
        Command::new("sbsign")
            .arg("--key")
            .arg(&plain_key)
            .args(["--cert", "/usr/share/ovmf/PkKek-1-snakeoil.pem", "--output"])
            .arg(&edited)
            .arg(&edited_unsigned),
    );
    let want_pcr = expected_pcr11(&kernel, &first, &scratch);

    let prompt = "Please enter passphrase";
    let boot = |name: &str, efi: &Path, secure: bool| {
        let tpm = Swtpm::start_on_copy(
            &swtpm,
            &dir.join("tpm"),
            &scratch.join(format!("tpm-{name}")),
        )
        .unwrap();
        let mut args = crate::boot_tpm2::disk_args(&dir);
        args.extend(tpm.qemu_args());
        let esp = crate::uki::esp(&scratch, name, efi);
        let r = support::qemu_boot_with(
            &kernel,
            &esp,
            &BootOptions {
                memory_mib: 1024,
                extra_args: args,
                timeout: Duration::from_secs(600),
                answers: vec![(prompt.to_string(), format!("{PASSPHRASE}\n"))],
                uefi: Some(crate::uki::firmware(&scratch, name, secure)),
                ..BootOptions::default()
            },
        );
        drop(tpm);
        eprintln!(
            "--- {name} ({:.1} s) ---\n{}",
            r.elapsed.as_secs_f64(),
            r.console
        );
        r.console
    };
    let mut failed = Vec::new();
    let want_root = format!("COMPOSER-ROOT-OK {token} ");
    let runs: [(&str, &Path, bool, bool); 4] = [
        ("first", &first, false, false),
        ("update", &update, false, false),
        ("other-key", &other_key, false, true),
        ("edited", &edited, true, true),
    ];
    for pair in runs.chunks(2) {
        let consoles: Vec<String> = std::thread::scope(|s| {
            let handles: Vec<_> = pair
                .iter()
                .map(|(name, efi, secure, _)| s.spawn(|| boot(name, efi, *secure)))
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for ((name, _, secure, asks), console) in pair.iter().zip(consoles) {
            if !console.contains(&want_root) {
                failed.push(format!("{name}: no `{want_root}`"));
            }
            if *secure && !console.contains("Secure boot enabled") {
                failed.push(format!("{name}: Secure Boot was not on"));
            }
            let asked = console.contains(prompt);
            if asked != *asks {
                failed.push(format!(
                    "{name}: {}",
                    if asked {
                        "asked for the passphrase"
                    } else {
                        "opened the volume with no prompt"
                    }
                ));
            }
            if console.contains(PASSPHRASE) {
                failed.push(format!("{name}: the passphrase shows on the console"));
            }
            if *name == "first" {
                let got = console
                    .lines()
                    .find_map(|l| l.split("COMPOSER-PCR11 ").nth(1))
                    .map(|v| v.trim().to_string());
                if got.as_deref() != Some(want_pcr.as_str()) {
                    failed.push(format!(
                        "first: PCR 11 in the root is {got:?}, systemd-measure says {want_pcr}"
                    ));
                }
            }
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("; "));
}

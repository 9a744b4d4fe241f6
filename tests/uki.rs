//! Unified kernel images: `composer build --uki` puts systemd's stub, Debian's kernel,
//! the image and the command line into one EFI program; OVMF starts it from an ESP made
//! here (no `-kernel`) and it reaches a root's token with the command line of its
//! `.cmdline`. Signed with the key Debian's OVMF ships enrolled (its "snakeoil" test
//! key), it passes `sbverify` and boots with Secure Boot enforced, where the unsigned
//! one is refused; so does one signed with the same key on a SoftHSM2 token, named by
//! its `pkcs11:` URI. A signed UKI that sbverify refuses is not written. `inspect` and
//! `extract` read the initrd inside. With Debian 13's stub (systemd 257) a UKI holds
//! profiles, each started by systemd-boot as its own entry, and CPU microcode in
//! `.ucode`; with Debian 12's (252) the profiles are refused and the microcode goes
//! first in `.initrd`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::support::{self, BootOptions, DebianKernel, Scratch, Uefi};

const OVMF: &str = "/usr/share/OVMF";
const SNAKEOIL: &str = "/usr/share/ovmf";

/// What a UKI test needs beyond a boot: the stub, OVMF and the ESP tools.
pub(crate) fn uefi_env() -> Option<PathBuf> {
    for (tool, pkg) in [
        ("mkfs.vfat", "dosfstools"),
        ("mcopy", "mtools"),
        ("sbverify", "sbsigntool"),
        ("sbsign", "sbsigntool"),
        ("openssl", "openssl"),
        ("objdump", "binutils"),
    ] {
        support::require_tool(tool, pkg)?;
    }
    let stub = Path::new("/usr/lib/systemd/boot/efi/linuxx64.efi.stub");
    for (file, pkg) in [
        (stub.to_path_buf(), "systemd-boot-efi"),
        (Path::new(OVMF).join("OVMF_CODE_4M.fd"), "ovmf"),
        (Path::new(OVMF).join("OVMF_CODE_4M.snakeoil.fd"), "ovmf"),
    ] {
        if !file.is_file() {
            let msg = format!("{} is missing (Debian package {pkg})", file.display());
            assert!(!support::strict(), "{msg}");
            support::skip(&msg);
            return None;
        }
    }
    Some(stub.to_path_buf())
}

/// The sections of `uki` that systemd-measure takes (as its options name them), those
/// the UKI has (objdump's section headers).
pub(crate) fn measured_sections(uki: &Path) -> Vec<&'static str> {
    let o = support::run_ok(Command::new("objdump").arg("-h").arg(uki));
    let headers = String::from_utf8_lossy(&o.stdout).into_owned();
    let names: Vec<&str> = headers
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .collect();
    [
        "linux", "osrel", "cmdline", "initrd", "ucode", "splash", "dtb", "uname", "sbat", "pcrpkey",
    ]
    .into_iter()
    .filter(|s| names.contains(&format!(".{s}").as_str()))
    .collect()
}

/// Whether `kernel`'s userland has systemd-measure; a skip (a failure in strict mode)
/// when it does not.
pub(crate) fn has_measure(kernel: &DebianKernel) -> bool {
    if kernel
        .userland
        .join("usr/lib/systemd/systemd-measure")
        .exists()
    {
        return true;
    }
    let msg = "the platform's /usr/lib/systemd/systemd-measure is missing (Debian package systemd)";
    assert!(!support::strict(), "{msg}");
    support::skip(msg);
    false
}

/// An ESP holding `efi` as the removable-media boot program.
pub(crate) fn esp(dir: &Path, name: &str, efi: &Path) -> PathBuf {
    let img = dir.join(format!("{name}.esp"));
    // 64 MiB, or room for a larger program (a UKI of the generic image).
    let size =
        (64 << 20).max((fs::metadata(efi).unwrap().len() + (16 << 20)).next_multiple_of(1 << 20));
    fs::File::create(&img)
        .and_then(|f| f.set_len(size))
        .unwrap();
    support::run_ok(Command::new("mkfs.vfat").arg(&img));
    let i = img.display().to_string();
    support::run_ok(Command::new("mmd").args(["-i", &i, "::/EFI", "::/EFI/BOOT"]));
    support::run_ok(
        Command::new("mcopy")
            .args(["-i", &i])
            .arg(efi)
            .arg("::/EFI/BOOT/BOOTX64.EFI"),
    );
    img
}

/// An ESP with systemd-boot (`loader`) as the removable-media boot program and `uki`
/// as its type #2 entry `EFI/Linux/composer.efi`, the menu hidden and `default` the
/// entry it starts (`composer.efi`, or a profile's `composer.efi@ID`).
fn esp_with_loader(dir: &Path, name: &str, loader: &Path, uki: &Path, default: &str) -> PathBuf {
    let img = esp(dir, name, loader);
    let i = img.display().to_string();
    let conf = dir.join(format!("{name}.loader.conf"));
    fs::write(&conf, format!("timeout 0\ndefault {default}\neditor no\n")).unwrap();
    support::run_ok(Command::new("mmd").args(["-i", &i, "::/EFI/Linux", "::/loader"]));
    support::run_ok(
        Command::new("mcopy")
            .args(["-i", &i])
            .arg(uki)
            .arg("::/EFI/Linux/composer.efi"),
    );
    support::run_ok(
        Command::new("mcopy")
            .args(["-i", &i])
            .arg(&conf)
            .arg("::/loader/loader.conf"),
    );
    img
}

/// A CPU microcode archive as Arch's `*-ucode.img` are (an uncompressed newc cpio of
/// `kernel/x86/microcode/*.bin`), holding `text` for the booted initrd to show: the
/// kernel unpacks it into the initrd's root with the image.
fn microcode_cpio(dir: &Path, text: &str) -> PathBuf {
    let tree = dir.join("ucode-tree");
    fs::create_dir_all(tree.join("kernel/x86/microcode")).unwrap();
    fs::write(tree.join("kernel/x86/microcode/AuthenticAMD.bin"), text).unwrap();
    let out = dir.join("ucode.cpio");
    let o = Command::new("sh")
        .arg("-c")
        .arg("find kernel | LC_ALL=C sort | cpio --quiet -o -H newc > \"$1\"")
        .arg("sh")
        .arg(&out)
        .current_dir(&tree)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    out
}

/// A copy of an OVMF variable store template for one boot.
pub(crate) fn firmware(dir: &Path, name: &str, secure: bool) -> Uefi {
    let (code, vars) = if secure {
        ("OVMF_CODE_4M.snakeoil.fd", "OVMF_VARS_4M.snakeoil.fd")
    } else {
        ("OVMF_CODE_4M.fd", "OVMF_VARS_4M.fd")
    };
    let copy = dir.join(format!("{name}.vars"));
    fs::copy(Path::new(OVMF).join(vars), &copy).unwrap();
    Uefi {
        code: Path::new(OVMF).join(code),
        vars: copy,
        secure,
    }
}

/// `composer build --uki` of a small image for the root on virtio, with `extra`.
fn build_uki(
    kernel: &DebianKernel,
    dir: &Path,
    name: &str,
    cmdline: &str,
    extra: &[&str],
) -> PathBuf {
    let manifest = dir.join("uki.toml");
    fs::write(
        &manifest,
        "init = \"shell\"\nmodules = [\"virtio_pci\", \"virtio_blk\", \"ext4\"]\n",
    )
    .unwrap();
    let out = dir.join(format!("{name}.efi"));
    support::run_ok(
        support::build_with(kernel)
            .arg(&manifest)
            .args(["--uki", "--kernel"])
            .arg(&kernel.vmlinuz)
            .args(["--cmdline", cmdline])
            .args(extra)
            .arg("-o")
            .arg(&out),
    );
    out
}

/// The last lines of a console, in order.
fn tail(console: &str) -> String {
    let lines: Vec<&str> = console.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

fn boot(kernel: &DebianKernel, esp: &Path, uefi: Uefi, disk: &[String], stop: &str) -> String {
    boot_typing(kernel, esp, uefi, disk, stop, None)
}

/// [`boot`], with `type_when` typed at the console.
fn boot_typing(
    kernel: &DebianKernel,
    esp: &Path,
    uefi: Uefi,
    disk: &[String],
    stop: &str,
    type_when: Option<(String, String)>,
) -> String {
    let r = support::qemu_boot_with(
        kernel,
        esp,
        &BootOptions {
            memory_mib: 1024,
            extra_args: disk.iter().map(Into::into).collect(),
            timeout: Duration::from_secs(300),
            stop_when: Some(stop.to_string()),
            uefi: Some(uefi),
            type_when,
            ..BootOptions::default()
        },
    );
    r.console
}

#[test]
fn a_uki_boots_from_the_firmware_with_its_own_command_line() {
    let Some((_, kernel, busybox)) = support::require_platform_env() else {
        return;
    };
    if uefi_env().is_none() {
        return;
    }
    let stub = support::stub_of(&kernel);
    let Some(roots) = crate::boot_root::roots(&busybox) else {
        return;
    };
    let root = &roots[0];
    // The PE checksum composer writes is the one the linker wrote into the stub and
    // the kernel (each recomputed over its own file), where the linker wrote one
    // (Debian 13's stub has none: 0).
    let mut checked = 0;
    for file in [stub.clone(), kernel.vmlinuz.clone()] {
        let data = fs::read(&file).unwrap();
        let pe = u32::from_le_bytes(data[0x3c..0x40].try_into().unwrap()) as usize;
        let field = pe + 24 + 64;
        let stored = u32::from_le_bytes(data[field..field + 4].try_into().unwrap());
        if stored == 0 {
            continue;
        }
        assert_eq!(
            composer::uki::pe::image_checksum(&data, field),
            stored,
            "{}",
            file.display()
        );
        checked += 1;
    }
    assert!(
        checked > 0,
        "neither the stub nor the kernel has a PE checksum"
    );
    let dir = Scratch::new("uki");
    // The command line only the UKI carries: the firmware is given none.
    let cmdline = format!(
        "console=ttyS0 root={} panic=-1 composer.uki-test=1",
        root.root_arg
    );
    // Two profiles (stub 257+): `main`, the UKI's command line, and `rescue`, which
    // adds words and a shell before the switch; CPU microcode in `.ucode` (256+).
    let manifest = dir.join("profiles.toml");
    fs::write(
        &manifest,
        "init = \"shell\"\nmodules = [\"virtio_pci\", \"virtio_blk\", \"ext4\"]\n\
         [uki]\nmicrocode = [\"ucode.cpio\"]\n\
         [[uki.profiles]]\nid = \"main\"\n\
         [[uki.profiles]]\nid = \"rescue\"\ntitle = \"Rescue\"\n\
         append = \"composer.profile=rescue rd.break=pre-pivot\"\n",
    )
    .unwrap();
    microcode_cpio(&dir, "COMPOSER-UCODE-SEEN\n");
    let uki = dir.join("plain.efi");
    let o = support::run_ok(
        support::build_with(&kernel)
            .arg(&manifest)
            .args(["--uki", "--kernel"])
            .arg(&kernel.vmlinuz)
            .args(["--cmdline", &cmdline, "--stub", stub.to_str().unwrap()])
            .arg("-o")
            .arg(&uki),
    );
    let said = String::from_utf8_lossy(&o.stderr);
    assert!(
        said.contains("profile `rescue`: command line `console=ttyS0")
            && said.contains("composer.profile=rescue rd.break=pre-pivot`"),
        "{said}"
    );

    // inspect: the sections, the command line, and the initrd's entries.
    let o = support::run_ok(support::composer().arg("inspect").arg(&uki));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("# profiles: main, rescue"), "{text}");
    for section in [
        ".osrel", ".cmdline", ".uname", ".ucode", ".initrd", ".linux", ".sdmagic", ".profile",
    ] {
        assert!(
            text.lines()
                .any(|l| l.starts_with(&format!("# {section} "))),
            "inspect shows no {section}:\n{text}"
        );
    }
    assert!(
        text.contains(&format!("# command line: {cmdline}")),
        "{text}"
    );
    assert!(
        text.contains(&format!("kernel {}", kernel.version)),
        "{text}"
    );
    assert!(
        text.lines().any(|l| l == "init"),
        "no /init listed:\n{text}"
    );
    let o = support::run_ok(support::composer().args(["inspect", "--json"]).arg(&uki));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["uki"]["cmdline"], cmdline.as_str());
    assert_eq!(doc["uki"]["uname"], kernel.version.as_str());
    // extract and verify read the initrd inside; objdump agrees on the sections.
    let unpacked = dir.join("unpacked");
    support::run_ok(
        support::composer()
            .arg("extract")
            .arg("-C")
            .arg(&unpacked)
            .arg(&uki),
    );
    assert!(unpacked.join("init").is_file(), "extract left no /init");
    // As the release ships it: `.ko` (Debian 12), `.ko.xz` (Debian 13).
    let module = ["", ".xz"]
        .map(|ext| {
            format!(
                "usr/lib/modules/{}/kernel/drivers/block/virtio_blk.ko{ext}",
                kernel.version
            )
        })
        .into_iter()
        .find(|m| unpacked.join(m).is_file());
    assert!(module.is_some(), "extract left no virtio_blk module");
    support::run_ok(support::composer().arg("verify").arg(&uki));
    let o = support::run_ok(Command::new("objdump").arg("-h").arg(&uki));
    let h = String::from_utf8_lossy(&o.stdout);
    assert!(h.contains(".linux") && h.contains(".initrd"), "{h}");

    profiles_boot_as_systemd_boot_selects_them(&kernel, &dir, &stub, &uki, root, &cmdline);
}

/// Debian 13's systemd-boot lists the UKI once a profile and starts the one its
/// loader.conf names (the firmware gives no command line): `composer.efi` runs the
/// kernel with the UKI's own command line `cmdline`; `composer.efi@rescue` with the
/// rescue profile's, whose shell before the switch reads the microcode archive the
/// stub put before the image.
fn profiles_boot_as_systemd_boot_selects_them(
    kernel: &DebianKernel,
    dir: &Path,
    stub: &Path,
    uki: &Path,
    root: &crate::boot_root::Root,
    cmdline: &str,
) {
    let loader = stub.with_file_name("systemd-bootx64.efi");
    assert!(loader.is_file(), "no {}", loader.display());
    let mut consoles = Vec::new();
    for (entry, name) in [("composer.efi", "main"), ("composer.efi@rescue", "rescue")] {
        let esp = esp_with_loader(dir, name, &loader, uki, entry);
        let typing = (name == "rescue").then(|| {
            (
                "rd.break=pre-pivot: a shell".to_string(),
                "cat /kernel/x86/microcode/AuthenticAMD.bin; exit\n".to_string(),
            )
        });
        consoles.push(boot_typing(
            kernel,
            &esp,
            firmware(dir, name, false),
            &root.qemu,
            "COMPOSER-ROOT-OK",
            typing,
        ));
    }
    for (console, want) in consoles.iter().zip([
        cmdline.to_string(),
        format!("{cmdline} composer.profile=rescue rd.break=pre-pivot"),
    ]) {
        let tail = tail(console);
        assert!(
            console
                .lines()
                .any(|l| l.trim_end().ends_with(&format!("Command line: {want}"))),
            "the kernel did not run with `{want}`:\n{tail}"
        );
        assert!(
            console.contains(&format!("COMPOSER-ROOT-OK {}", root.token)),
            "the UKI did not reach the root:\n{tail}"
        );
    }
    assert!(
        consoles[1].contains("COMPOSER-UCODE-SEEN"),
        "the initrd holds no microcode from `.ucode`:\n{}",
        tail(&consoles[1])
    );
}

#[test]
fn a_signed_uki_passes_sbverify_and_secure_boot_starts_only_it() {
    let Some((_, kernel, busybox)) = support::require_platform_env() else {
        return;
    };
    if uefi_env().is_none() {
        return;
    }
    let Some(roots) = crate::boot_root::roots(&busybox) else {
        return;
    };
    let root = &roots[0];
    let dir = Scratch::new("uki-signed");
    // Debian's OVMF test key, enrolled in its snakeoil variable store; its PEM is
    // encrypted with the passphrase the package documents, which composer reads
    // from a file.
    let key = Path::new(SNAKEOIL).join("PkKek-1-snakeoil.key");
    assert!(
        fs::read_to_string(&key).unwrap().contains("ENCRYPTED"),
        "the snakeoil key is not encrypted"
    );
    let passphrase = dir.join("passphrase");
    fs::write(&passphrase, "snakeoil\n").unwrap();
    let cert = Path::new(SNAKEOIL).join("PkKek-1-snakeoil.pem");
    let cmdline = format!("console=ttyS0 root={} panic=-1", root.root_arg);
    let signed = build_uki(
        &kernel,
        &dir,
        "signed",
        &cmdline,
        &[
            "--sign-key",
            key.to_str().unwrap(),
            "--sign-cert",
            cert.to_str().unwrap(),
            "--sign-passphrase-file",
            passphrase.to_str().unwrap(),
        ],
    );
    let unsigned = build_uki(&kernel, &dir, "unsigned", &cmdline, &[]);
    let sbverify = |f: &Path| {
        Command::new("sbverify")
            .arg("--cert")
            .arg(&cert)
            .arg(f)
            .output()
            .unwrap()
    };
    let o = sbverify(&signed);
    assert!(
        o.status.success(),
        "sbverify refuses the signed UKI: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        !sbverify(&unsigned).status.success(),
        "sbverify accepts the unsigned UKI"
    );
    // The signed one's initrd is the same to the readers.
    support::run_ok(support::composer().arg("verify").arg(&signed));

    let (signed_esp, unsigned_esp) = (
        esp(&dir, "signed", &signed),
        esp(&dir, "unsigned", &unsigned),
    );
    let (good, refused) = std::thread::scope(|s| {
        let a = s.spawn(|| {
            boot(
                &kernel,
                &signed_esp,
                firmware(&dir, "signed", true),
                &root.qemu,
                "COMPOSER-ROOT-OK",
            )
        });
        let b = s.spawn(|| {
            boot(
                &kernel,
                &unsigned_esp,
                firmware(&dir, "unsigned", true),
                &root.qemu,
                "No bootable option or device was found",
            )
        });
        (a.join().unwrap(), b.join().unwrap())
    });
    assert!(
        good.contains("Secure boot enabled")
            && good.contains(&format!("COMPOSER-ROOT-OK {}", root.token)),
        "the signed UKI did not boot with Secure Boot on:\n{}",
        tail(&good)
    );
    assert!(
        refused.contains("Access Denied") && !refused.contains("Linux version"),
        "the firmware did not refuse the unsigned UKI:\n{}",
        tail(&refused)
    );

    // The same key on a PKCS#11 token (SoftHSM2), named by its URI: sbsign signs
    // through OpenSSL's pkcs11 engine; the UKI verifies and boots with Secure Boot on.
    let Some(token) = snakeoil_token(&dir, &key) else {
        return;
    };
    let uri = format!("pkcs11:token={TOKEN};object=db;type=private;pin-value={TOKEN_PIN}");
    let on_token = dir.join("token.efi");
    let o = support::run_ok(
        support::build_for(&kernel.version, &kernel.modules_dir())
            .env("SOFTHSM2_CONF", &token)
            .arg(dir.join("uki.toml"))
            .args(["--uki", "--kernel"])
            .arg(&kernel.vmlinuz)
            .args(["--cmdline", &cmdline, "--sign-key", &uri, "--sign-cert"])
            .arg(&cert)
            .arg("-o")
            .arg(&on_token),
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains(TOKEN_PIN), "the PIN is shown: {err}");
    let o = sbverify(&on_token);
    assert!(
        o.status.success(),
        "sbverify refuses the UKI signed on the token: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let console = boot(
        &kernel,
        &esp(&dir, "token", &on_token),
        firmware(&dir, "token", true),
        &root.qemu,
        "COMPOSER-ROOT-OK",
    );
    assert!(
        console.contains("Secure boot enabled")
            && console.contains(&format!("COMPOSER-ROOT-OK {}", root.token)),
        "the UKI signed on the token did not boot with Secure Boot on:\n{}",
        tail(&console)
    );
}

/// The SoftHSM2 token's label and user PIN.
const TOKEN: &str = "composer-sb";
const TOKEN_PIN: &str = "4321";

/// A SoftHSM2 token in `dir` holding `key` (the snakeoil key, encrypted with the
/// passphrase Debian documents) as object `db`: the configuration file to point
/// SOFTHSM2_CONF at. None (a skip, a failure when strict) without softhsm2 or
/// OpenSSL's pkcs11 engine.
fn snakeoil_token(dir: &Path, key: &Path) -> Option<PathBuf> {
    let softhsm = support::require_tool("softhsm2-util", "softhsm2")?;
    let engine = Command::new("openssl")
        .args(["engine", "-t", "pkcs11"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !engine {
        support::skip("OpenSSL has no pkcs11 engine (Debian: libengine-pkcs11-openssl)");
        return None;
    }
    let tokens = dir.join("tokens");
    fs::create_dir_all(&tokens).unwrap();
    let conf = dir.join("softhsm2.conf");
    fs::write(
        &conf,
        format!(
            "directories.tokendir = {}\nobjectstore.backend = file\nlog.level = ERROR\n",
            tokens.display()
        ),
    )
    .unwrap();
    let plain = dir.join("db-pkcs8.pem");
    support::run_ok(
        Command::new("openssl")
            .args([
                "pkcs8",
                "-topk8",
                "-nocrypt",
                "-passin",
                "pass:snakeoil",
                "-in",
            ])
            .arg(key)
            .arg("-out")
            .arg(&plain),
    );
    support::run_ok(
        Command::new(&softhsm)
            .env("SOFTHSM2_CONF", &conf)
            .args([
                "--init-token",
                "--free",
                "--label",
                TOKEN,
                "--pin",
                TOKEN_PIN,
            ])
            .args(["--so-pin", "87654321"]),
    );
    support::run_ok(
        Command::new(&softhsm)
            .env("SOFTHSM2_CONF", &conf)
            .arg("--import")
            .arg(&plain)
            .args([
                "--token", TOKEN, "--label", "db", "--id", "01", "--pin", TOKEN_PIN,
            ]),
    );
    fs::remove_file(&plain).unwrap();
    Some(conf)
}

/// `[image] uki = true` and `[uki]` in a manifest: the build writes a UKI with the
/// manifest's command line and kernel; `--cmdline` replaces the manifest's; a key
/// without its certificate is an error and nothing is written.
#[test]
fn the_manifest_describes_the_uki() {
    let Some(kernel) = support::debian_kernel() else {
        return;
    };
    let Some(stub) = uefi_env() else {
        return;
    };
    let dir = Scratch::new("uki-manifest");
    let manifest = dir.join("uki.toml");
    fs::write(
        &manifest,
        format!(
            "init = \"shell\"\nmodules = [\"virtio_blk\"]\n[image]\nuki = true\n\
             [uki]\nstub = {}\nkernel = {}\ncmdline = \"root=LABEL=from-manifest ro\"\n",
            support::toml_str(stub.to_str().unwrap()),
            support::toml_str(kernel.vmlinuz.to_str().unwrap()),
        ),
    )
    .unwrap();
    let uki = |name: &str, extra: &[&str]| {
        let out = dir.join(name);
        let o = support::run(
            support::build_for(&kernel.version, &kernel.modules_dir())
                .arg(&manifest)
                .args(extra)
                .arg("-o")
                .arg(&out),
        );
        (out, o)
    };
    let read = |out: &Path| {
        let o = support::run_ok(support::composer().args(["inspect", "--json"]).arg(out));
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()
    };
    let (out, o) = uki("manifest.efi", &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let doc = read(&out);
    assert_eq!(doc["uki"]["cmdline"], "root=LABEL=from-manifest ro");
    let bytes = fs::read(&out).unwrap();
    let linux = doc["uki"]["sections"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == ".linux")
        .expect("no .linux");
    let at = linux["offset"].as_u64().unwrap() as usize;
    let size = linux["size"].as_u64().unwrap() as usize;
    assert_eq!(bytes[at..at + size], fs::read(&kernel.vmlinuz).unwrap()[..]);

    let (out, o) = uki("option.efi", &["--cmdline", "root=LABEL=from-option"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(read(&out)["uki"]["cmdline"], "root=LABEL=from-option");

    let (out, o) = uki(
        "half-signed.efi",
        &["--uki", "--sign-key", "/nonexistent.key"],
    );
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--sign-cert"), "{err}");
    assert!(!out.exists(), "a UKI was written");

    // This machine's stub (Debian 12's systemd 252) reads no `.ucode`: the microcode
    // archive goes first in `.initrd`, and the build says so.
    let ucode = microcode_cpio(&dir, "ucode\n");
    let (out, o) = uki(
        "ucode.efi",
        &["--uki", "--microcode", ucode.to_str().unwrap()],
    );
    let said = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{said}");
    let version = composer::uki::stub_version(&fs::read(&stub).unwrap());
    if version.is_some_and(|v| v < composer::uki::UCODE_SINCE) {
        assert!(said.contains("reads no `.ucode`"), "{said}");
        let doc = read(&out);
        let names: Vec<&str> = doc["uki"]["sections"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|s| s["name"].as_str())
            .collect();
        assert!(!names.contains(&".ucode"), "{names:?}");
        support::run_ok(Command::new("objcopy").args([
            "--dump-section",
            &format!(".initrd={}", dir.join("initrd").display()),
            out.to_str().unwrap(),
            dir.join("objcopy.out").to_str().unwrap(),
        ]));
        let initrd = fs::read(dir.join("initrd")).unwrap();
        let cpio = fs::read(&ucode).unwrap();
        assert_eq!(initrd[..cpio.len()], cpio[..], "the microcode is not first");

        // Profiles need systemd 257's stub: refused, naming it, and nothing written.
        let profiles = dir.join("profiles.toml");
        fs::write(
            &profiles,
            format!(
                "{}[[uki.profiles]]\nid = \"main\"\n",
                fs::read_to_string(&manifest).unwrap()
            ),
        )
        .unwrap();
        let out = dir.join("profiles.efi");
        let o = support::run(
            support::build_for(&kernel.version, &kernel.modules_dir())
                .arg(&profiles)
                .arg("-o")
                .arg(&out),
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(
            err.contains("has no UKI profiles: they need systemd 257's stub"),
            "{err}"
        );
        assert!(!out.exists(), "a UKI was written");
    }
    // A profile ID systemd-boot cannot list: the manifest's place, and what to do.
    let bad = dir.join("bad-profile.toml");
    fs::write(
        &bad,
        format!(
            "{}[[uki.profiles]]\nid = \"Rescue Me\"\n",
            fs::read_to_string(&manifest).unwrap()
        ),
    )
    .unwrap();
    let o = support::run(
        support::build_for(&kernel.version, &kernel.modules_dir())
            .arg(&bad)
            .arg("-o")
            .arg(dir.join("bad.efi")),
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("bad-profile.toml:")
            && err.contains("`Rescue Me` is not a profile ID")
            && err.contains("lower-case letters"),
        "{err}"
    );
}

/// A UKI carries the image: one whose image holds a secret is written 0600 even
/// over a 0644 file (as `/boot/EFI/Linux` may hold from an earlier install), and
/// the same UKI without the secret keeps the file's 0644.
#[test]
fn a_uki_holding_a_secret_is_private_even_over_a_wider_file() {
    use std::os::unix::fs::PermissionsExt;
    let Some(kernel) = support::debian_kernel() else {
        return;
    };
    let stub = Path::new("/usr/lib/systemd/boot/efi/linuxx64.efi.stub");
    if !stub.is_file() {
        support::skip("systemd's EFI stub is missing (Debian package systemd-boot-efi)");
        return;
    }
    let dir = Scratch::new("uki-secret");
    fs::write(dir.join("wifi.psk"), b"psk=hunter2\n").unwrap();
    let out = dir.join("linux.efi");
    for (secret, want) in [(true, 0o600), (false, 0o644)] {
        let manifest = dir.join("uki.toml");
        fs::write(
            &manifest,
            format!(
                "init = \"shell\"\n[image]\nuki = true\n\
                 [uki]\nstub = {}\nkernel = {}\ncmdline = \"root=LABEL=r ro\"\n\
                 [[file]]\nsrc = \"wifi.psk\"\ndst = \"/etc/wifi.psk\"\nsecret = {secret}\n",
                support::toml_str(stub.to_str().unwrap()),
                support::toml_str(kernel.vmlinuz.to_str().unwrap()),
            ),
        )
        .unwrap();
        fs::write(&out, b"an earlier UKI").unwrap();
        fs::set_permissions(&out, fs::Permissions::from_mode(0o644)).unwrap();
        let o = support::run_ok(
            support::build_for(&kernel.version, &kernel.modules_dir())
                .arg(&manifest)
                .arg("-o")
                .arg(&out),
        );
        let err = String::from_utf8_lossy(&o.stderr);
        let mode = fs::metadata(&out).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, want, "secret = {secret}: the UKI is {mode:o}:\n{err}");
        assert_eq!(
            err.contains("the image holds the secret /etc/wifi.psk"),
            secret,
            "{err}"
        );
        let doc = support::run_ok(support::composer().args(["inspect", "--json"]).arg(&out));
        let doc: serde_json::Value = serde_json::from_slice(&doc.stdout).unwrap();
        assert!(doc["uki"]["sections"].is_array(), "not a UKI: {doc}");
    }
}

/// An encrypted signing key whose passphrase is wrong, or missing off a terminal, is
/// refused before anything is built: the message says which, exit status 2, and the
/// UKI already at the output is left as it was.
#[test]
fn a_wrong_or_missing_passphrase_signs_and_installs_nothing() {
    let Some(kernel) = support::debian_kernel() else {
        return;
    };
    if uefi_env().is_none() {
        return;
    }
    let dir = Scratch::new("uki-passphrase");
    let manifest = dir.join("uki.toml");
    fs::write(&manifest, "init = \"shell\"\nmodules = [\"virtio_blk\"]\n").unwrap();
    let key = Path::new(SNAKEOIL).join("PkKek-1-snakeoil.key");
    let cert = Path::new(SNAKEOIL).join("PkKek-1-snakeoil.pem");
    let wrong = dir.join("wrong");
    fs::write(&wrong, "not-the-passphrase\n").unwrap();
    let out = dir.join("linux.efi");
    fs::write(&out, b"the UKI installed before").unwrap();
    // A UKI build with `args`, PATH set to `path` if given, off a terminal: refused
    // with a message saying `why`, the installed UKI left as it was.
    let refused = |args: &[&std::ffi::OsStr], path: Option<&str>, why: &str| {
        let mut cmd = support::build_for(&kernel.version, &kernel.modules_dir());
        if let Some(p) = path {
            cmd.env("PATH", p);
        }
        let o = support::run(
            cmd.arg(&manifest)
                .args(["--uki", "--kernel"])
                .arg(&kernel.vmlinuz)
                .args(["--cmdline", "root=/dev/vda"])
                .args(args)
                .arg("-o")
                .arg(&out)
                .stdin(std::process::Stdio::null()),
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(err.contains(why), "{err}");
        assert!(!err.contains("composer: wrote"), "it built: {err}");
        assert_eq!(fs::read(&out).unwrap(), b"the UKI installed before");
        err.into_owned()
    };
    let signing: [&std::ffi::OsStr; 4] = [
        "--sign-key".as_ref(),
        key.as_os_str(),
        "--sign-cert".as_ref(),
        cert.as_os_str(),
    ];
    refused(
        &[
            &signing[..],
            &["--sign-passphrase-file".as_ref(), wrong.as_os_str()],
        ]
        .concat(),
        None,
        "the passphrase does not open the signing key",
    );
    refused(
        &signing,
        None,
        "is encrypted, and there is no passphrase to open it",
    );

    // A PCR public key that is not the PCR private key's: refused before anything
    // is built (the policies would never verify).
    for name in ["pcr-a", "pcr-b"] {
        support::run_ok(
            Command::new("openssl")
                .args(["genrsa", "-out"])
                .arg(dir.join(format!("{name}.pem")))
                .arg("2048"),
        );
    }
    support::run_ok(
        Command::new("openssl")
            .args(["pkey", "-pubout", "-in"])
            .arg(dir.join("pcr-b.pem"))
            .arg("-out")
            .arg(dir.join("pcr-b.pub")),
    );
    let (pcr_a, pcr_b) = (dir.join("pcr-a.pem"), dir.join("pcr-b.pub"));
    refused(
        &[
            "--pcr-private-key".as_ref(),
            pcr_a.as_os_str(),
            "--pcr-public-key".as_ref(),
            pcr_b.as_os_str(),
            "--phases".as_ref(),
            "enter-initrd".as_ref(),
        ],
        None,
        "is not the public key of",
    );

    // A signed UKI that sbverify does not accept (an sbverify that says so, first
    // on PATH) is not written.
    let bin = dir.join("bin");
    fs::create_dir_all(&bin).unwrap();
    let fake = bin.join("sbverify");
    fs::write(
        &fake,
        "#!/bin/sh\necho 'Signature verification failed' >&2\nexit 1\n",
    )
    .unwrap();
    fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let right = dir.join("right");
    fs::write(&right, "snakeoil\n").unwrap();
    let err = refused(
        &[
            &signing[..],
            &["--sign-passphrase-file".as_ref(), right.as_os_str()],
        ]
        .concat(),
        Some(&path),
        "the signed UKI does not verify against",
    );
    assert!(err.contains("Signature verification failed"), "{err}");
    let left: Vec<_> = fs::read_dir(&*dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(".composer-"))
        .collect();
    assert!(left.is_empty(), "temporary files left: {left:?}");
}

/// A stub cut short (the first 3,000 bytes of systemd's), a signed stub and a
/// kernel that is neither a bzImage nor an EFI program are refused by name, and no
/// output is written; unsigned UKIs of the same inputs with SOURCE_DATE_EPOCH are
/// byte-identical.
#[test]
fn broken_inputs_are_refused_and_unsigned_ukis_are_reproducible() {
    let Some(kernel) = support::debian_kernel() else {
        return;
    };
    let Some(stub) = uefi_env() else {
        return;
    };
    let dir = Scratch::new("uki-inputs");
    let manifest = dir.join("uki.toml");
    fs::write(&manifest, "init = \"shell\"\nmodules = [\"virtio_blk\"]\n").unwrap();
    let build = |stub: &Path, kernel_image: &Path, out: &Path| {
        support::run(
            support::build_for(&kernel.version, &kernel.modules_dir())
                .arg(&manifest)
                .args(["--uki", "--stub"])
                .arg(stub)
                .arg("--kernel")
                .arg(kernel_image)
                .args(["--cmdline", "root=/dev/vda"])
                .env("SOURCE_DATE_EPOCH", "1700000000")
                .arg("-o")
                .arg(out),
        )
    };
    let stub_bytes = fs::read(&stub).unwrap();
    let cut = dir.join("cut.stub");
    fs::write(&cut, &stub_bytes[..3000]).unwrap();
    let out = dir.join("never.efi");
    let o = build(&cut, &kernel.vmlinuz, &out);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("cut.stub`: it is cut short"), "{err}");
    assert!(!out.exists());

    // The stub signed with the snakeoil key: a certificate table.
    let passphrase = dir.join("passphrase");
    fs::write(&passphrase, "snakeoil\n").unwrap();
    let plain_key = dir.join("plain.key");
    support::run_ok(
        Command::new("openssl")
            .args(["pkey", "-passin"])
            .arg(format!("file:{}", passphrase.display()))
            .arg("-in")
            .arg(Path::new(SNAKEOIL).join("PkKek-1-snakeoil.key"))
            .arg("-out")
            .arg(&plain_key),
    );
    let signed = dir.join("signed.stub");
    support::run_ok(
        Command::new("sbsign")
            .arg("--key")
            .arg(&plain_key)
            .arg("--cert")
            .arg(Path::new(SNAKEOIL).join("PkKek-1-snakeoil.pem"))
            .arg("--output")
            .arg(&signed)
            .arg(&stub),
    );
    let o = build(&signed, &kernel.vmlinuz, &out);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("it is signed (it has a certificate table)"),
        "{err}"
    );
    assert!(!out.exists());

    let not_kernel = dir.join("vmlinuz-text");
    fs::write(&not_kernel, "#!/bin/sh\necho not a kernel\n").unwrap();
    fs::write(&out, b"kept").unwrap();
    let o = build(&stub, &not_kernel, &out);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("is neither an x86 bzImage nor an EFI program"),
        "{err}"
    );
    assert_eq!(fs::read(&out).unwrap(), b"kept");

    let (a, b) = (dir.join("a.efi"), dir.join("b.efi"));
    for p in [&a, &b] {
        let o = build(&stub, &kernel.vmlinuz, p);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    assert!(
        fs::read(&a).unwrap() == fs::read(&b).unwrap(),
        "two UKIs of the same inputs differ"
    );
}

/// The UKI's `.sbat` holds the stub's lines, composer's and the user's, the version
/// line once and first (Debian's kernel has no `.sbat`); the stub's own section stays
/// as `.sbat-0`; and `objdump -h` shows every section inside the file, aligned to the
/// file alignment, none overlapping another in memory.
#[test]
fn the_ukis_sbat_merges_the_lines_and_no_section_overlaps() {
    let Some(kernel) = support::debian_kernel() else {
        return;
    };
    let Some(stub) = uefi_env() else {
        return;
    };
    for (tool, pkg) in [("objdump", "binutils"), ("objcopy", "binutils")] {
        if support::require_tool(tool, pkg).is_none() {
            return;
        }
    }
    let dir = Scratch::new("uki-sbat");
    let extra = "site,1,Example Site,site-initrd,2,-";
    // With signed PCR policies too: two more sections than the stub has header room
    // for, so the headers grow and every section's data moves on.
    let pcr_key = dir.join("pcr.pem");
    support::run_ok(
        Command::new("openssl")
            .args(["genrsa", "-out"])
            .arg(&pcr_key)
            .arg("2048"),
    );
    let uki = build_uki(
        &kernel,
        &dir,
        "sbat",
        "root=/dev/vda",
        &[
            "--sbat",
            extra,
            "--pcr-private-key",
            pcr_key.to_str().unwrap(),
            "--phases",
            "enter-initrd",
        ],
    );
    let sbat = dir.join("sbat.txt");
    support::run_ok(
        Command::new("objcopy")
            .args(["-O", "binary", "--only-section=.sbat"])
            .arg(&uki)
            .arg(&sbat),
    );
    let text = fs::read_to_string(&sbat).unwrap();
    let stub_sbat = dir.join("stub-sbat.txt");
    support::run_ok(
        Command::new("objcopy")
            .args(["-O", "binary", "--only-section=.sbat"])
            .arg(&stub)
            .arg(&stub_sbat),
    );
    let theirs = fs::read_to_string(&stub_sbat).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("sbat,1,"), "{text}");
    assert_eq!(
        lines.iter().filter(|l| l.starts_with("sbat,")).count(),
        1,
        "{text}"
    );
    for l in theirs
        .trim_end_matches('\0')
        .lines()
        .filter(|l| !l.is_empty())
    {
        assert!(
            lines.contains(&l),
            "the stub's `{l}` is not in the UKI's .sbat:\n{text}"
        );
    }
    assert!(lines.iter().any(|l| l.starts_with("composer,1,")), "{text}");
    assert_eq!(lines.last(), Some(&extra), "{text}");

    let o = support::run_ok(Command::new("objdump").arg("-h").arg(&uki));
    let table = String::from_utf8_lossy(&o.stdout);
    let len = fs::metadata(&uki).unwrap().len();
    // "  6 .sbat-0  000000e2  0000000000019000  0000000000019000  00011000  2**2"
    let mut sections: Vec<(String, u64, u64, u64)> = table
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 7 && f[0].parse::<u32>().is_ok()).then(|| {
                let hex = |s: &str| u64::from_str_radix(s, 16).unwrap();
                (f[1].to_string(), hex(f[2]), hex(f[3]), hex(f[5]))
            })
        })
        .collect();
    let names: Vec<&str> = sections.iter().map(|s| s.0.as_str()).collect();
    for want in [
        ".sbat", ".sbat-0", ".initrd", ".linux", ".cmdline", ".pcrpkey", ".pcrsig",
    ] {
        assert!(names.contains(&want), "no {want}: {names:?}");
    }
    for (name, size, _, off) in &sections {
        assert!(off + size <= len, "{name} ends past the file:\n{table}");
        assert_eq!(off % 512, 0, "{name} is not file-aligned:\n{table}");
    }
    sections.sort_by_key(|s| s.2);
    for w in sections.windows(2) {
        assert!(
            w[0].2 + w[0].1 <= w[1].2,
            "{} overlaps {} in memory:\n{table}",
            w[0].0,
            w[1].0
        );
    }
    // A line that is not SBAT is refused.
    let o = support::run(
        support::build_for(&kernel.version, &kernel.modules_dir())
            .arg(dir.join("uki.toml"))
            .args(["--uki", "--kernel"])
            .arg(&kernel.vmlinuz)
            .args([
                "--cmdline",
                "root=/dev/vda",
                "--sbat",
                "not an sbat line",
                "-o",
            ])
            .arg(dir.join("bad.efi")),
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--sbat: `not an sbat line` has 1 field;"),
        "{err}"
    );
    assert!(!dir.join("bad.efi").exists());
}

/// `.pcrsig` is what the platform's own `systemd-measure sign` (Debian 13's, run in its
/// root with swtpm as its TPM) writes for the UKI's measured sections (with systemd 257
/// `.uname`, `.sbat` and the microcode's `.ucode` too), the same key and phases, byte
/// for byte once parsed;
/// `.pcrpkey` is the key's public half.
#[test]
fn the_pcr_signature_is_systemd_measures() {
    let Some((_, kernel, _)) = support::require_platform_env() else {
        return;
    };
    if uefi_env().is_none() {
        return;
    }
    let Some(swtpm) = support::require_tool("swtpm", "swtpm") else {
        return;
    };
    if support::require_tool("objcopy", "binutils").is_none() {
        return;
    }
    if !has_measure(&kernel) {
        return;
    }
    let dir = Scratch::new("uki-pcrsig");
    let key = dir.join("pcr.pem");
    support::run_ok(
        Command::new("openssl")
            .args(["genrsa", "-out"])
            .arg(&key)
            .arg("2048"),
    );
    let phases = ["enter-initrd", "enter-initrd:leave-initrd"];
    let ucode = microcode_cpio(&dir, "ucode\n");
    let uki = build_uki(
        &kernel,
        &dir,
        "pcr",
        "root=/dev/vda quiet",
        &[
            "--pcr-private-key",
            key.to_str().unwrap(),
            "--phases",
            &phases.join(" "),
            "--microcode",
            ucode.to_str().unwrap(),
        ],
    );
    let section = |name: &str| {
        let out = dir.join(format!("section{name}"));
        support::run_ok(
            Command::new("objcopy")
                .arg("--dump-section")
                .arg(format!("{name}={}", out.display()))
                .arg(&uki)
                .arg(dir.join("objcopy.out")),
        );
        out
    };
    let ours: serde_json::Value =
        serde_json::from_slice(&fs::read(section(".pcrsig")).unwrap()).unwrap();
    let public = support::run_ok(
        Command::new("openssl")
            .args(["pkey", "-pubout", "-in"])
            .arg(&key),
    );
    assert_eq!(fs::read(section(".pcrpkey")).unwrap(), public.stdout);

    // swtpm as a TPM on a socket, for systemd-measure's trial sessions.
    let state = dir.join("tpm");
    fs::create_dir_all(&state).unwrap();
    let sock = state.join("tpm.sock");
    let mut tpm = Command::new(&swtpm)
        .args(["socket", "--tpm2", "--tpmstate"])
        .arg(format!("dir={}", state.display()))
        .arg("--server")
        .arg(format!("type=unixio,path={}", sock.display()))
        .arg("--ctrl")
        .arg(format!("type=unixio,path={}.ctrl", sock.display()))
        .args(["--flags", "not-need-init,startup-clear"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    while !sock.exists() && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let measure = support::Userland::new(&kernel, &dir);
    let mut cmd = measure.command("/usr/lib/systemd/systemd-measure");
    cmd.args(["sign", "--bank=sha256", "--json=short"])
        .arg(format!("--private-key={}", measure.path(&key)))
        .arg(format!("--tpm2-device=swtpm:path={}", measure.path(&sock)));
    for p in phases {
        cmd.arg(format!("--phase={p}"));
    }
    let sections = measured_sections(&uki);
    assert!(
        sections.contains(&"uname") && sections.contains(&"sbat") && sections.contains(&"ucode"),
        "{sections:?}"
    );
    for s in sections {
        cmd.arg(format!(
            "--{s}={}",
            measure.path(&section(&format!(".{s}")))
        ));
    }
    let o = support::run(&mut cmd);
    let _ = tpm.kill();
    let _ = tpm.wait();
    assert!(
        o.status.success(),
        "systemd-measure sign: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let theirs: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(ours, theirs);
    assert_eq!(ours["sha256"].as_array().unwrap().len(), 2);
}

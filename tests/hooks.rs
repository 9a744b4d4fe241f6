//! The distribution hooks in dist/, run the way their callers run them: systemd's
//! real `kernel-install` with composer's plugin (layouts bls and other, another
//! generator configured), Debian's /etc/kernel/postinst.d and postrm.d calling
//! convention (KVER, image path, DEB_MAINT_PARAMS), and pacman's NeedsTargets lines
//! on the alpm hook script's standard input. Each image they write is read back with
//! `composer verify` and `composer inspect`.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::support::{self, DebianKernel, Scratch};

fn dist(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("dist")
        .join(path)
}

/// A PATH whose first directory holds `composer` (the binary under test), as the
/// package installs it.
fn path_with_composer(dir: &Path) -> String {
    let bin = dir.join("bin");
    fs::create_dir_all(&bin).unwrap();
    let link = bin.join("composer");
    if !link.exists() {
        std::os::unix::fs::symlink(support::composer_bin(), &link).unwrap();
    }
    format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// The arguments every hook passes on to `composer build` here: the kernel's
/// module tree is not under this machine's /lib/modules.
fn build_args(kernel: &DebianKernel) -> String {
    format!("--kmoddir {} --no-sync", kernel.modules_dir().display())
}

/// The image is whole, passes verify, and holds the kernel's modules and an /init.
fn assert_initrd(image: &Path, kernel: &DebianKernel) {
    assert!(image.is_file(), "{} was not written", image.display());
    support::run_ok(support::composer().arg("verify").arg(image));
    let out = support::run_ok(support::composer().arg("inspect").arg(image));
    let list = String::from_utf8_lossy(&out.stdout);
    let ahci = format!(
        "usr/lib/modules/{}/kernel/drivers/ata/ahci.ko",
        kernel.version
    );
    assert!(
        list.lines().any(|l| l.starts_with(&ahci)),
        "{} has no {ahci}",
        image.display()
    );
    assert!(
        list.lines().any(|l| l == "init"),
        "{} has no /init",
        image.display()
    );
}

struct KernelInstall {
    conf: PathBuf,
    boot: PathBuf,
    path: String,
    args: String,
    /// Plugins run after systemd's 90-loaderentry.install and before composer's
    /// 95-composer-private.install.
    between: Vec<PathBuf>,
}

const MACHINE_ID: &str = "0123456789abcdef0123456789abcdef";

impl KernelInstall {
    fn new(dir: &Path, kernel: &DebianKernel, install_conf: &str) -> KernelInstall {
        let conf = dir.join("kernel");
        fs::create_dir_all(&conf).unwrap();
        fs::write(conf.join("install.conf"), install_conf).unwrap();
        let boot = dir.join("boot");
        fs::create_dir_all(&boot).unwrap();
        KernelInstall {
            conf,
            boot,
            path: path_with_composer(dir),
            args: build_args(kernel),
            between: Vec::new(),
        }
    }

    /// `kernel-install -v ARGS` with composer's plugin and, for the bls layout,
    /// systemd's own 90-loaderentry.install after it, then composer's
    /// 95-composer-private.install, as the package installs them.
    fn run(&self, args: &[&str]) -> std::process::Output {
        let out = self.try_run(args);
        assert!(out.status.success(), "kernel-install {args:?} failed");
        out
    }

    /// [`Self::run`], whatever its exit status.
    fn try_run(&self, args: &[&str]) -> std::process::Output {
        let mut plugins = vec![
            dist("kernel-install/50-composer.install"),
            PathBuf::from("/usr/lib/kernel/install.d/90-loaderentry.install"),
        ];
        plugins.extend(self.between.iter().cloned());
        plugins.push(dist("kernel-install/95-composer-private.install"));
        let plugins: Vec<String> = plugins.iter().map(|p| p.display().to_string()).collect();
        let plugins = plugins.join(" ");
        let out = support::run(
            Command::new("kernel-install")
                .arg("-v")
                .args(args)
                .env("PATH", &self.path)
                .env("KERNEL_INSTALL_CONF_ROOT", &self.conf)
                .env("KERNEL_INSTALL_PLUGINS", plugins)
                .env("BOOT_ROOT", &self.boot)
                .env("MACHINE_ID", MACHINE_ID)
                .env("COMPOSER_BUILD_ARGS", &self.args),
        );
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        eprintln!("kernel-install {args:?}:\n{text}");
        out
    }
}

fn kernel_install_env() -> Option<DebianKernel> {
    support::require_tool("kernel-install", "systemd")?;
    if !Path::new("/usr/lib/kernel/install.d/90-loaderentry.install").exists() {
        support::skip("systemd's 90-loaderentry.install is missing");
        return None;
    }
    support::debian_kernel()
}

#[test]
fn kernel_install_bls_stages_the_initrd_for_the_entry_and_remove_deletes_it() {
    if !support::generic_image_host() {
        return;
    }
    let Some(kernel) = kernel_install_env() else {
        return;
    };
    let dir = Scratch::new("hooks-ki-bls");
    let ki = KernelInstall::new(&dir, &kernel, "layout=bls\ninitrd_generator=composer\n");
    let vmlinuz = kernel.vmlinuz.to_str().unwrap();
    ki.run(&["add", &kernel.version, vmlinuz]);
    // 90-loaderentry copied composer's staged initrd into the entry directory and
    // named it in the boot loader entry.
    let entry_dir = ki.boot.join(MACHINE_ID).join(&kernel.version);
    assert_initrd(&entry_dir.join("initrd"), &kernel);
    // An image without secrets is left as systemd installs it.
    assert_eq!(mode(&entry_dir.join("initrd")), 0o644);
    let entry = fs::read_to_string(
        ki.boot
            .join("loader/entries")
            .join(format!("{MACHINE_ID}-{}.conf", kernel.version)),
    )
    .unwrap();
    assert!(
        entry.lines().any(|l| l.starts_with("initrd")
            && l.ends_with(&format!("/{}/initrd", kernel.version))),
        "the loader entry names no initrd:\n{entry}"
    );
    ki.run(&["remove", &kernel.version]);
    assert!(
        !entry_dir.exists(),
        "{} is still there",
        entry_dir.display()
    );
}

fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

/// layout=bls with an image that holds a secret: composer stages it 0600 (the
/// plugin starts the staged file 0644, which composer keeps for an image without
/// secrets), systemd's 90-loaderentry.install copies it into the entry with
/// `install -m 0644`, and 95-composer-private.install, after it, makes that copy
/// 0600 again. A plugin between the two records the staged file's mode.
#[test]
fn kernel_install_bls_keeps_a_private_image_0600_staged_and_installed() {
    if !support::generic_image_host() {
        return;
    }
    let Some(kernel) = kernel_install_env() else {
        return;
    };
    let dir = Scratch::new("hooks-ki-private");
    let secret = dir.join("wifi.psk");
    fs::write(&secret, b"psk=hunter2\n").unwrap();
    let manifest = dir.join("initrd.toml");
    fs::write(
        &manifest,
        format!(
            "include = [\"generic\"]\n\n[[file]]\nsrc = {}\ndst = \"/etc/wifi.psk\"\nsecret = true\n",
            support::toml_str(&secret.to_string_lossy())
        ),
    )
    .unwrap();
    let staged = dir.join("staged-modes");
    let recorder = dir.join("92-record.install");
    fs::write(
        &recorder,
        format!(
            "#!/bin/sh\n[ \"$1\" = add ] || exit 0\nfor f in \"$KERNEL_INSTALL_STAGING_AREA\"/initrd*; do\n    \
             [ -f \"$f\" ] && echo \"${{f##*/}} $(stat -L -c %a \"$f\")\" >>{}\ndone\nexit 0\n",
            staged.display()
        ),
    )
    .unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&recorder, fs::Permissions::from_mode(0o755)).unwrap();
    }
    let mut ki = KernelInstall::new(&dir, &kernel, "layout=bls\ninitrd_generator=composer\n");
    ki.args = format!("{} {}", build_args(&kernel), manifest.display());
    ki.between = vec![recorder];
    let vmlinuz = kernel.vmlinuz.to_str().unwrap();
    let out = ki.run(&["add", &kernel.version, vmlinuz]);
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(
        text.contains("the image holds the secret /etc/wifi.psk"),
        "the build did not name the secret:\n{text}"
    );
    let recorded = fs::read_to_string(&staged).unwrap_or_default();
    assert!(
        recorded.lines().any(|l| l == "initrd 600"),
        "the staged image is not 0600: {recorded:?}"
    );
    let installed = ki
        .boot
        .join(MACHINE_ID)
        .join(&kernel.version)
        .join("initrd");
    assert_initrd(&installed, &kernel);
    assert_eq!(
        support::image_bytes(&installed, "etc/wifi.psk"),
        b"psk=hunter2\n"
    );
    assert_eq!(
        mode(&installed),
        0o600,
        "the entry's copy of a private image is readable by others"
    );
    ki.run(&["remove", &kernel.version]);
    assert!(
        !installed.exists(),
        "{} is still there",
        installed.display()
    );
}

/// layout=uki: the plugin builds a unified kernel image and installs it as
/// `BOOT_ROOT/EFI/Linux/ENTRY_TOKEN-KVER.efi`, where systemd-boot finds UKIs, and
/// `remove` deletes it.
#[test]
fn kernel_install_uki_layout_installs_a_uki_and_remove_deletes_it() {
    if !support::generic_image_host() {
        return;
    }
    let Some(kernel) = kernel_install_env() else {
        return;
    };
    let stub = Path::new("/usr/lib/systemd/boot/efi/linuxx64.efi.stub");
    if !stub.is_file() {
        let msg = "systemd's EFI stub is missing (Debian package systemd-boot-efi)";
        assert!(!support::strict(), "{msg}");
        support::skip(msg);
        return;
    }
    // The hook checks the image against this machine's root: the UKI's command line
    // names it.
    let Some(root) = crate::check_boot::virtio_root() else {
        eprintln!("skipped: this machine's root is not on a virtio disk");
        return;
    };
    let cmdline = format!("root={root}");
    let dir = Scratch::new("hooks-ki-uki");
    let mut ki = KernelInstall::new(&dir, &kernel, "layout=uki\n");
    ki.args = format!("{} --cmdline {cmdline}", build_args(&kernel));
    let vmlinuz = kernel.vmlinuz.to_str().unwrap();
    ki.run(&["add", &kernel.version, vmlinuz]);
    let uki = ki
        .boot
        .join("EFI/Linux")
        .join(format!("{MACHINE_ID}-{}.efi", kernel.version));
    let o = support::run_ok(support::composer().args(["inspect", "--json"]).arg(&uki));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let names: Vec<&str> = doc["uki"]["sections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    for section in [".linux", ".initrd", ".cmdline", ".uname"] {
        assert!(
            names.contains(&section),
            "{uki:?} has no {section}: {names:?}"
        );
    }
    assert_eq!(doc["uki"]["uname"], kernel.version.as_str());
    assert_eq!(doc["uki"]["cmdline"], cmdline.as_str());
    // The kernel inside is the one kernel-install was given.
    let linux = doc["uki"]["sections"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == ".linux")
        .unwrap();
    let bytes = fs::read(&uki).unwrap();
    let at = linux["offset"].as_u64().unwrap() as usize;
    let size = linux["size"].as_u64().unwrap() as usize;
    assert_eq!(
        &bytes[at..at + size],
        fs::read(&kernel.vmlinuz).unwrap().as_slice()
    );
    assert_initrd(&uki, &kernel);
    ki.run(&["remove", &kernel.version]);
    assert!(!uki.exists(), "{} is still there", uki.display());
}

/// What the UKI tests of the plugin need: the stub, and a command line naming this
/// machine's root (the hook checks the image against it); None after a skip.
fn uki_install_env() -> Option<(DebianKernel, String)> {
    if !support::generic_image_host() {
        return None;
    }
    let kernel = kernel_install_env()?;
    let stub = Path::new("/usr/lib/systemd/boot/efi/linuxx64.efi.stub");
    if !stub.is_file() {
        let msg = "systemd's EFI stub is missing (Debian package systemd-boot-efi)";
        assert!(!support::strict(), "{msg}");
        support::skip(msg);
        return None;
    }
    let Some(root) = crate::check_boot::virtio_root() else {
        eprintln!("skipped: this machine's root is not on a virtio disk");
        return None;
    };
    Some((kernel, format!("root={root}")))
}

/// The files under BOOT_ROOT/EFI/Linux.
fn ukis(ki: &KernelInstall) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(ki.boot.join("EFI/Linux"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// A microcode initrd as a distribution's package passes it to kernel-install: an
/// uncompressed cpio with kernel/x86/microcode/GenuineIntel.bin (made by composer's
/// gen_init_cpio drop-in).
fn microcode_initrd(dir: &Path) -> PathBuf {
    let blob = dir.join("GenuineIntel.bin");
    fs::write(&blob, [0x5au8; 3000]).unwrap();
    let list = dir.join("ucode.list");
    fs::write(
        &list,
        format!(
            "dir /kernel 0755 0 0\ndir /kernel/x86 0755 0 0\ndir /kernel/x86/microcode 0755 0 0\n\
             file /kernel/x86/microcode/GenuineIntel.bin {} 0644 0 0\n",
            blob.display()
        ),
    )
    .unwrap();
    let out = dir.join("intel-ucode.img");
    support::run_ok(
        support::composer()
            .args(["gen-init-cpio", "-t", "0", "-o"])
            .arg(&out)
            .arg(&list),
    );
    out
}

/// layout=uki with a microcode initrd given and /etc/kernel/tries: the UKI is named
/// for boot counting (`+3`), its .initrd starts with the microcode, then composer's
/// image; `remove` leaves nothing in EFI/Linux, whatever count of tries is left in
/// the name.
#[test]
fn kernel_install_uki_takes_given_initrds_first_and_counts_tries() {
    let Some((kernel, cmdline)) = uki_install_env() else {
        return;
    };
    let dir = Scratch::new("hooks-ki-uki-tries");
    let mut ki = KernelInstall::new(&dir, &kernel, "layout=uki\n");
    ki.args = format!("{} --cmdline {cmdline}", build_args(&kernel));
    fs::write(ki.conf.join("tries"), "3\n").unwrap();
    let ucode = microcode_initrd(&dir);
    let vmlinuz = kernel.vmlinuz.to_str().unwrap();
    ki.run(&["add", &kernel.version, vmlinuz, ucode.to_str().unwrap()]);
    let name = format!("{MACHINE_ID}-{}+3.efi", kernel.version);
    assert_eq!(ukis(&ki), std::slice::from_ref(&name));
    let uki = ki.boot.join("EFI/Linux").join(&name);
    let o = support::run_ok(support::composer().args(["inspect", "--json"]).arg(&uki));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let initrd = doc["uki"]["sections"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == ".initrd")
        .unwrap();
    let bytes = fs::read(&uki).unwrap();
    let at = initrd["offset"].as_u64().unwrap() as usize;
    let ucode_bytes = fs::read(&ucode).unwrap();
    assert_eq!(
        &bytes[at..at + ucode_bytes.len()],
        ucode_bytes.as_slice(),
        "the UKI's .initrd does not start with the microcode"
    );
    assert_initrd(&uki, &kernel);
    let list = support::run_ok(support::composer().arg("inspect").arg(&uki));
    assert!(
        String::from_utf8_lossy(&list.stdout)
            .lines()
            .any(|l| l == "kernel/x86/microcode/GenuineIntel.bin"),
        "the microcode is not in the UKI's initrd"
    );
    // systemd-boot renamed it after a failed boot: +2-1.
    fs::rename(
        &uki,
        ki.boot
            .join("EFI/Linux")
            .join(format!("{MACHINE_ID}-{}+2-1.efi", kernel.version)),
    )
    .unwrap();
    ki.run(&["remove", &kernel.version]);
    assert_eq!(ukis(&ki), Vec::<String>::new());

    // Tries that are not a number: the plugin fails, nothing is installed.
    fs::write(ki.conf.join("tries"), "three\n").unwrap();
    let o = ki.try_run(&["add", &kernel.version, vmlinuz]);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("holds \"three\", not a number of tries"),
        "{o:?}"
    );
    assert_eq!(ukis(&ki), Vec::<String>::new());
}

/// With uki_generator= unset, systemd's 60-ukify.install (here a stand-in that records
/// what it was given) builds the UKI when it is installed: composer stages the initrd
/// for it and makes no UKI of its own. uki_generator=composer makes composer build it
/// all the same.
#[test]
fn kernel_install_uki_is_left_to_ukify_unless_composer_is_named() {
    let Some((kernel, cmdline)) = uki_install_env() else {
        return;
    };
    let dir = Scratch::new("hooks-ki-ukify");
    let seen = dir.join("ukify-saw");
    let ukify = dir.join("60-ukify.install");
    fs::write(
        &ukify,
        format!(
            "#!/bin/sh\n[ \"$1\" = add ] || exit 0\nls \"$KERNEL_INSTALL_STAGING_AREA\" >{}\n",
            seen.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&ukify, fs::Permissions::from_mode(0o755)).unwrap();
    let vmlinuz = kernel.vmlinuz.to_str().unwrap();

    let mut ki = KernelInstall::new(&dir, &kernel, "layout=uki\n");
    ki.args = format!("{} --cmdline {cmdline}", build_args(&kernel));
    ki.between.push(ukify.clone());
    ki.run(&["add", &kernel.version, vmlinuz]);
    assert_eq!(
        ukis(&ki),
        Vec::<String>::new(),
        "composer built a UKI for ukify's turn"
    );
    let staged = fs::read_to_string(&seen).unwrap();
    assert!(
        staged.lines().any(|l| l == "initrd"),
        "nothing staged for ukify: {staged}"
    );

    fs::remove_file(&seen).unwrap();
    let mut ki = KernelInstall::new(&dir, &kernel, "layout=uki\nuki_generator=composer\n");
    ki.args = format!("{} --cmdline {cmdline}", build_args(&kernel));
    ki.between.push(ukify);
    ki.run(&["add", &kernel.version, vmlinuz]);
    assert_eq!(ukis(&ki), [format!("{MACHINE_ID}-{}.efi", kernel.version)]);
    ki.run(&["remove", &kernel.version]);
    assert_eq!(ukis(&ki), Vec::<String>::new());
}

#[test]
fn kernel_install_other_layout_writes_next_to_the_kernel_and_remove_deletes_it() {
    if !support::generic_image_host() {
        return;
    }
    let Some(kernel) = kernel_install_env() else {
        return;
    };
    let dir = Scratch::new("hooks-ki-other");
    // No initrd_generator: composer acts, as dracut's plugin does.
    let ki = KernelInstall::new(&dir, &kernel, "layout=other\n");
    let vmlinuz = kernel.vmlinuz.to_str().unwrap();
    let image = ki.boot.join(format!("initrd.img-{}", kernel.version));
    fs::write(&image, b"the previous image").unwrap();
    ki.run(&["add", &kernel.version, vmlinuz]);
    assert_initrd(&image, &kernel);
    let others: Vec<_> = fs::read_dir(&ki.boot)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".composer-"))
        .collect();
    assert!(others.is_empty(), "temporary files left: {others:?}");
    ki.run(&["remove", &kernel.version]);
    assert!(!image.exists(), "{} is still there", image.display());
}

#[test]
fn kernel_install_leaves_other_generators_and_given_initrds_alone() {
    let Some(kernel) = kernel_install_env() else {
        return;
    };
    let dir = Scratch::new("hooks-ki-not-ours");
    let ki = KernelInstall::new(&dir, &kernel, "layout=other\ninitrd_generator=dracut\n");
    let vmlinuz = kernel.vmlinuz.to_str().unwrap();
    let image = ki.boot.join(format!("initrd.img-{}", kernel.version));
    ki.run(&["add", &kernel.version, vmlinuz]);
    assert!(
        !image.exists(),
        "composer built an initrd for dracut's turn"
    );

    // An initrd given on the command line is used as it is.
    let ki = KernelInstall::new(&dir, &kernel, "layout=other\ninitrd_generator=composer\n");
    let given = dir.join("given.img");
    fs::write(&given, b"given").unwrap();
    ki.run(&["add", &kernel.version, vmlinuz, given.to_str().unwrap()]);
    assert!(
        !image.exists(),
        "composer built an initrd though one was given"
    );
}

fn run_hook(hook: &str, dir: &Path, kernel: &DebianKernel, params: &str, args: &[&Path]) {
    let mut cmd = Command::new(dist(hook));
    cmd.arg(&kernel.version)
        .args(args)
        .env("PATH", path_with_composer(dir))
        .env("COMPOSER_BUILD_ARGS", build_args(kernel))
        .env(
            "DPKG_MAINTSCRIPT_PACKAGE",
            format!("linux-image-{}", kernel.version),
        );
    if params.is_empty() {
        cmd.env_remove("DEB_MAINT_PARAMS");
    } else {
        cmd.env("DEB_MAINT_PARAMS", params);
    }
    support::run_ok(&mut cmd);
}

#[test]
fn debian_kernel_hooks_build_on_configure_and_remove_on_remove() {
    if !support::generic_image_host() {
        return;
    }
    let Some(kernel) = support::debian_kernel() else {
        return;
    };
    let dir = Scratch::new("hooks-debian");
    let boot = dir.join("boot");
    fs::create_dir_all(&boot).unwrap();
    let vmlinuz = boot.join(format!("vmlinuz-{}", kernel.version));
    fs::copy(&kernel.vmlinuz, &vmlinuz).unwrap();
    let image = boot.join(format!("initrd.img-{}", kernel.version));
    let (postinst, postrm) = ("debian/postinst.d/composer", "debian/postrm.d/composer");

    // The kernel package's preinst-time and upgrade calls do nothing.
    run_hook(postinst, &dir, &kernel, "upgrade 6.1.0-1", &[&vmlinuz]);
    assert!(!image.exists(), "built outside configure");
    run_hook(postinst, &dir, &kernel, "configure ''", &[&vmlinuz]);
    assert_initrd(&image, &kernel);
    // Called by hand (no DEB_MAINT_PARAMS), it rebuilds: a new inode, whole.
    let before = fs::metadata(&image).unwrap();
    run_hook(postinst, &dir, &kernel, "", &[&vmlinuz]);
    assert_initrd(&image, &kernel);
    use std::os::unix::fs::MetadataExt;
    assert_ne!(
        fs::metadata(&image).unwrap().ino(),
        before.ino(),
        "the image was not replaced by rename"
    );

    run_hook(postrm, &dir, &kernel, "upgrade 6.1.0-1", &[&vmlinuz]);
    assert!(image.exists(), "removed on upgrade");
    run_hook(postrm, &dir, &kernel, "remove", &[&vmlinuz]);
    assert!(!image.exists(), "not removed on remove");
    // The purge that follows finds nothing to do.
    run_hook(postrm, &dir, &kernel, "purge", &[&vmlinuz]);

    // Without a version the kernel package is told what is wrong.
    let out = support::run(
        Command::new(dist(postinst))
            .env("PATH", path_with_composer(&dir))
            .env("DPKG_MAINTSCRIPT_PACKAGE", "linux-image-test"),
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("linux-image-test did not pass"));
}

/// Runs the alpm hook script as pacman does: Exec with the targets on stdin.
fn alpm(dir: &Path, root: &Path, kernel: &DebianKernel, op: &str, targets: &[&str]) -> bool {
    alpm_with(dir, root, &build_args(kernel), op, targets)
        .status
        .success()
}

/// [`alpm`] with `args` for `composer build`; what the script wrote.
fn alpm_with(
    dir: &Path,
    root: &Path,
    args: &str,
    op: &str,
    targets: &[&str],
) -> std::process::Output {
    let mut child = Command::new(dist("pacman/composer"))
        .arg(op)
        .env("PATH", path_with_composer(dir))
        .env("COMPOSER_ALPM_ROOT", root)
        .env("COMPOSER_BUILD_ARGS", args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for t in targets {
        writeln!(stdin, "{t}").unwrap();
    }
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    eprintln!(
        "pacman script {op}:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The hook files trigger on the paths the script handles.
#[test]
fn pacman_hooks_name_the_script_and_the_kernel_paths() {
    for (hook, op, when) in [
        (
            "pacman/90-composer-install.hook",
            "install",
            "PostTransaction",
        ),
        ("pacman/60-composer-remove.hook", "remove", "PreTransaction"),
    ] {
        let text = fs::read_to_string(dist(hook)).unwrap();
        let lines: Vec<&str> = text.lines().map(str::trim).collect();
        assert!(
            lines.contains(&"Target = usr/lib/modules/*/vmlinuz"),
            "{hook}"
        );
        assert!(lines.contains(&"NeedsTargets"), "{hook}");
        assert!(lines.contains(&format!("When = {when}").as_str()), "{hook}");
        assert!(
            lines.contains(&format!("Exec = /usr/share/libalpm/scripts/composer {op}").as_str()),
            "{hook}"
        );
    }
}

#[test]
fn pacman_script_builds_and_removes_per_pkgbase() {
    if !support::generic_image_host() {
        return;
    }
    let Some(kernel) = support::debian_kernel() else {
        return;
    };
    let dir = Scratch::new("hooks-pacman");
    let root = dir.join("root");
    let kdir = root.join("usr/lib/modules").join(&kernel.version);
    fs::create_dir_all(&kdir).unwrap();
    fs::copy(&kernel.vmlinuz, kdir.join("vmlinuz")).unwrap();
    fs::write(kdir.join("pkgbase"), "linux-test\n").unwrap();
    // A kernel tree without pkgbase (built by hand) is not touched.
    let own = root.join("usr/lib/modules/6.99.0-own/vmlinuz");
    fs::create_dir_all(own.parent().unwrap()).unwrap();
    fs::write(&own, b"not packaged").unwrap();
    let target = format!("usr/lib/modules/{}/vmlinuz", kernel.version);

    assert!(alpm(
        &dir,
        &root,
        &kernel,
        "install",
        &[&target, "usr/lib/modules/6.99.0-own/vmlinuz"]
    ));
    let vmlinuz = root.join("boot/vmlinuz-linux-test");
    let image = root.join("boot/initramfs-linux-test.img");
    assert_eq!(
        fs::read(&vmlinuz).unwrap(),
        fs::read(&kernel.vmlinuz).unwrap()
    );
    assert_initrd(&image, &kernel);
    let boot: Vec<_> = fs::read_dir(root.join("boot"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(boot.len(), 2, "/boot holds {boot:?}");

    assert!(alpm(&dir, &root, &kernel, "remove", &[&target]));
    assert!(!vmlinuz.exists() && !image.exists());

    // composer itself upgraded: the target is the package; every kernel is rebuilt.
    assert!(alpm(
        &dir,
        &root,
        &kernel,
        "install",
        &["initramfs-composer"]
    ));
    assert_initrd(&image, &kernel);

    // A pkgbase that would leave /boot is refused, and nothing is written for it.
    fs::write(kdir.join("pkgbase"), "../../etc/evil\n").unwrap();
    assert!(!alpm(&dir, &root, &kernel, "install", &[&target]));
    assert!(!root.join("etc").exists());
}

/// The real pacman (Debian's pacman-package-manager) installs and removes a
/// kernel package in a test root that holds composer's hooks and script where an
/// Arch package puts them. pacman runs the hooks chrooted into that root, so the
/// root gets the host's /usr through an overlay (writes stay in the test), /dev,
/// /proc, the kernel's modules read-only at /kmod, and composer in /usr/local/bin;
/// all of it in a private mount namespace that ends with the test.
#[test]
fn pacman_transactions_run_the_hooks() {
    if !support::generic_image_host() {
        return;
    }
    let Some(kernel) = support::debian_kernel() else {
        return;
    };
    let (Some(pacman), Some(bsdtar), Some(unshare)) = (
        support::require_tool("pacman", "pacman-package-manager"),
        support::require_tool("bsdtar", "libarchive-tools"),
        support::require_tool("unshare", "util-linux"),
    ) else {
        return;
    };
    if !support::require_root() {
        return;
    }
    let dir = Scratch::new("hooks-pacman-real");
    let v = &kernel.version;
    // The kernel package: what Arch's linux packages put under usr/lib/modules.
    let pkg = dir.join("pkg");
    let kdir = pkg.join("usr/lib/modules").join(v);
    fs::create_dir_all(&kdir).unwrap();
    fs::copy(&kernel.vmlinuz, kdir.join("vmlinuz")).unwrap();
    fs::write(kdir.join("pkgbase"), "linux-test\n").unwrap();
    fs::write(
        pkg.join(".PKGINFO"),
        "pkgname = linux-test\npkgbase = linux-test\npkgver = 6.1-1\npkgdesc = a test kernel\n\
         url = https://example.invalid\nbuilddate = 1700000000\npackager = composer tests\n\
         size = 8000000\narch = x86_64\n",
    )
    .unwrap();
    let archive = dir.join("linux-test-6.1-1-x86_64.pkg.tar.zst");
    support::run_ok(
        Command::new(&bsdtar)
            .current_dir(&pkg)
            .args(["--zstd", "-cf"])
            .arg(&archive)
            .args([".PKGINFO", "usr"]),
    );
    let conf = dir.join("pacman.conf");
    fs::write(
        &conf,
        "[options]\nArchitecture = auto\nSigLevel = Never\nLocalFileSigLevel = Never\n",
    )
    .unwrap();
    let root = dir.join("root");
    let saved = dir.join("after-install");
    let script = format!(
        r#"set -eu
R={root}
mkdir -p "$R/usr" {upper} {work} "$R/var/lib/pacman" "$R/dev" "$R/proc" "$R/tmp" "$R/kmod" "$R/etc" "$R/root" {saved}
mount -t overlay overlay -o lowerdir=/usr,upperdir={upper},workdir={work} "$R/usr"
for d in bin sbin lib lib64; do ln -s "usr/$d" "$R/$d"; done
mount --bind /dev "$R/dev"
mount -t proc proc "$R/proc"
mount --bind -o ro {kmod} "$R/kmod"
mkdir -p "$R/usr/share/libalpm/hooks" "$R/usr/share/libalpm/scripts" "$R/usr/local/bin"
cp {hooks}/90-composer-install.hook {hooks}/60-composer-remove.hook "$R/usr/share/libalpm/hooks/"
cp {hooks}/composer "$R/usr/share/libalpm/scripts/composer"
cp {bin} "$R/usr/local/bin/composer"
pm() {{ {pacman} --root "$R" --dbpath "$R/var/lib/pacman" --config {conf} --noconfirm "$@"; }}
pm -U {archive}
cp -a "$R/boot/." {saved}/
echo "installed: $(ls "$R/boot" | tr '\n' ' ')"
pm -R linux-test
echo "removed: $(ls "$R/boot" | tr '\n' ' ')"
"#,
        root = root.display(),
        upper = dir.join("upper").display(),
        work = dir.join("work").display(),
        saved = saved.display(),
        kmod = kernel.modules_dir().display(),
        hooks = dist("pacman").display(),
        bin = support::composer_bin().display(),
        pacman = pacman.display(),
        conf = conf.display(),
        archive = archive.display(),
    );
    let out = support::run(
        Command::new(&unshare)
            .args(["-m", "--propagation", "private", "sh", "-c"])
            .arg(&script)
            .env("HOME", "/root")
            .env_remove("XDG_CACHE_HOME")
            .env("PATH", "/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
            .env("COMPOSER_BUILD_ARGS", "--kmoddir /kmod --no-sync"),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    // pacman ran composer's hook, which said what it builds.
    assert!(
        stdout.contains("Building initrds with composer")
            || stderr.contains("Building initrds with composer"),
        "{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains("installed: initramfs-linux-test.img vmlinuz-linux-test"),
        "{stdout}"
    );
    assert_initrd(&saved.join("initramfs-linux-test.img"), &kernel);
    assert_eq!(
        fs::read(saved.join("vmlinuz-linux-test")).unwrap(),
        fs::read(&kernel.vmlinuz).unwrap()
    );
    // The remove transaction's pre-transaction hook deleted both.
    assert!(
        stdout.contains("removed: \n") || stdout.trim_end().ends_with("removed:"),
        "{stdout}"
    );
    assert_eq!(fs::read_dir(root.join("boot")).unwrap().count(), 0);
}

/// The kernel-install plugin, the Debian hook and the pacman script, given a configuration whose image
/// cannot bring up this machine's root (no driver for its disk), install the generic
/// image instead, with a warning; when the generic one cannot either (a command line
/// naming another root), they fail and the previous image stays byte for byte.
#[test]
fn hooks_fall_back_to_the_generic_image_and_keep_the_old_one_when_nothing_boots() {
    if !support::generic_image_host() {
        return;
    }
    let Some(kernel) = kernel_install_env() else {
        return;
    };
    if crate::check_boot::virtio_root().is_none() {
        eprintln!("skipped: this machine's root is not on a virtio disk");
        return;
    }
    let dir = Scratch::new("hooks-fallback");
    let broken = dir.join("broken.toml");
    fs::write(
        &broken,
        "init = \"shell\"\nmodules = [\"virtio_pci\", \"ext4\"]\n",
    )
    .unwrap();
    let args = format!("{} {}", build_args(&kernel), broken.display());
    let nothing = format!("{args} --kernel-cmdline root=UUID=00000000-0000-4000-8000-000000000000");
    let old = b"the previous image";
    let said = |o: &std::process::Output, what: &str| {
        String::from_utf8_lossy(&o.stderr).contains(what)
            || String::from_utf8_lossy(&o.stdout).contains(what)
    };

    // kernel-install, layout=other.
    let mut ki = KernelInstall::new(&dir, &kernel, "layout=other\n");
    let vmlinuz = kernel.vmlinuz.to_str().unwrap();
    let image = ki.boot.join(format!("initrd.img-{}", kernel.version));
    ki.args = args.clone();
    fs::write(&image, old).unwrap();
    let o = ki.run(&["add", &kernel.version, vmlinuz]);
    assert!(
        said(&o, "THE CONFIGURED IMAGE CANNOT BOOT THIS MACHINE"),
        "no warning"
    );
    assert!(said(&o, "disk vd"), "the failing layer is not named");
    assert_initrd(&image, &kernel);
    ki.args = nothing.clone();
    fs::write(&image, old).unwrap();
    let o = ki.try_run(&["add", &kernel.version, vmlinuz]);
    assert!(
        !o.status.success(),
        "kernel-install succeeded with no bootable image"
    );
    assert!(said(&o, "neither the configured image nor the generic one"));
    assert_eq!(fs::read(&image).unwrap(), old, "the previous image changed");

    // Debian's postinst.d hook.
    let boot = dir.join("deb-boot");
    fs::create_dir_all(&boot).unwrap();
    let deb_vmlinuz = boot.join(format!("vmlinuz-{}", kernel.version));
    fs::copy(&kernel.vmlinuz, &deb_vmlinuz).unwrap();
    let image = boot.join(format!("initrd.img-{}", kernel.version));
    let hook = |args: &str| {
        support::run(
            Command::new(dist("debian/postinst.d/composer"))
                .arg(&kernel.version)
                .arg(&deb_vmlinuz)
                .env("PATH", path_with_composer(&dir))
                .env("COMPOSER_BUILD_ARGS", args)
                .env("DEB_MAINT_PARAMS", "configure ''")
                .env(
                    "DPKG_MAINTSCRIPT_PACKAGE",
                    format!("linux-image-{}", kernel.version),
                ),
        )
    };
    fs::write(&image, old).unwrap();
    let o = hook(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(said(&o, "THE CONFIGURED IMAGE CANNOT BOOT THIS MACHINE"));
    assert_initrd(&image, &kernel);
    fs::write(&image, old).unwrap();
    let o = hook(&nothing);
    assert!(
        !o.status.success(),
        "the hook succeeded with no bootable image"
    );
    assert!(said(&o, "neither the configured image nor the generic one"));
    assert_eq!(fs::read(&image).unwrap(), old, "the previous image changed");

    // pacman's script.
    let root = dir.join("alpm-root");
    let kdir = root.join("usr/lib/modules").join(&kernel.version);
    fs::create_dir_all(&kdir).unwrap();
    fs::create_dir_all(root.join("boot")).unwrap();
    fs::copy(&kernel.vmlinuz, kdir.join("vmlinuz")).unwrap();
    fs::write(kdir.join("pkgbase"), "linux-test\n").unwrap();
    let target = format!("usr/lib/modules/{}/vmlinuz", kernel.version);
    let image = root.join("boot/initramfs-linux-test.img");
    fs::write(&image, old).unwrap();
    let o = alpm_with(&dir, &root, &args, "install", &[&target]);
    assert!(o.status.success(), "the pacman script failed");
    assert!(said(&o, "THE CONFIGURED IMAGE CANNOT BOOT THIS MACHINE"));
    assert_initrd(&image, &kernel);
    fs::write(&image, old).unwrap();
    let o = alpm_with(&dir, &root, &nothing, "install", &[&target]);
    assert!(
        !o.status.success(),
        "the pacman script succeeded with no bootable image"
    );
    assert!(said(&o, "neither the configured image nor the generic one"));
    assert_eq!(fs::read(&image).unwrap(), old, "the previous image changed");
}

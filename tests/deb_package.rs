//! The Debian package, installed for real: `dist/debian/build-deb` packages the binary
//! under test, `dpkg -i` installs it, then `dpkg -i` installs Debian's kernel package
//! (the one the other tests unpack), whose postinst runs composer's
//! /etc/kernel/postinst.d hook. The initrd it wrote must pass `composer verify`, come
//! from composer, and boot a root under qemu; `dpkg --purge` of the kernel package must
//! remove it.
//!
//! It installs and removes packages on the machine that runs it, so it runs only with
//! `COMPOSER_SYSTEM_TESTS=1` (which `.ci/run` sets under `CI=true`, on a throwaway
//! machine).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::boot_root;
use crate::support::{self, BootOptions, DebianKernel, Scratch};

/// Purges the packages it names when dropped, so a failed run leaves none behind.
struct Installed(Vec<String>);

impl Drop for Installed {
    fn drop(&mut self) {
        for p in self.0.iter().rev() {
            let _ = Command::new("dpkg").args(["--purge", p]).status();
        }
    }
}

fn dpkg_installed(package: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f", "${Status}", package])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
}

/// The package of the binary under test (`dist/debian/build-deb`), in `dir`.
fn build_deb(dir: &Path) -> PathBuf {
    let built = support::run_ok(
        Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("dist/debian/build-deb"))
            .arg("--binary")
            .arg(support::composer_bin())
            .arg("--out")
            .arg(dir),
    );
    PathBuf::from(String::from_utf8_lossy(&built.stdout).trim())
}

fn dpkg(args: &[&str]) {
    support::run_ok(
        Command::new("dpkg")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive"),
    );
}

#[test]
fn a_kernel_package_installed_beside_composers_package_gets_a_booting_initrd() {
    if std::env::var("COMPOSER_SYSTEM_TESTS").as_deref() != Ok("1") {
        eprintln!(
            "skipped: this test installs packages on the machine that runs it; \
             set COMPOSER_SYSTEM_TESTS=1 on a throwaway machine (.ci/run does under CI=true)"
        );
        return;
    }
    if !support::require_root() {
        return;
    }
    for (tool, pkg) in [
        ("dpkg-deb", "dpkg"),
        ("dpkg-shlibdeps", "dpkg-dev"),
        ("apt-get", "apt"),
    ] {
        if support::require_tool(tool, pkg).is_none() {
            return;
        }
    }
    let Some((_, unpacked, busybox)) = support::require_boot_env() else {
        return;
    };
    let Some(roots) = boot_root::roots(&busybox) else {
        return;
    };
    let package = support::debian_kernel_package().unwrap();
    assert!(
        !dpkg_installed(&package),
        "{package} is already installed here; this test installs and purges it"
    );
    assert!(
        !dpkg_installed("initramfs-composer"),
        "initramfs-composer is already installed here"
    );
    let Some(kernel_deb) = support::cached_asset(&format!("debian-kernel-deb-{package}"), |tmp| {
        fs::create_dir_all(tmp).map_err(|e| e.to_string())?;
        support::try_run(
            Command::new("apt-get")
                .args(["download", "-q"])
                .arg(&package)
                .current_dir(tmp),
        )
        .map(|_| ())
    }) else {
        return;
    };
    let kernel_deb: PathBuf = fs::read_dir(&kernel_deb)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "deb"))
        .expect("apt-get download left no .deb");

    let dir = Scratch::new("deb-package");
    let deb = build_deb(dir.path());
    let info = support::run_ok(Command::new("dpkg-deb").arg("--info").arg(&deb));
    let info = String::from_utf8_lossy(&info.stdout);
    assert!(info.contains("Provides: linux-initramfs-tool"), "{info}");
    let contents = support::run_ok(Command::new("dpkg-deb").arg("--contents").arg(&deb));
    let contents = String::from_utf8_lossy(&contents.stdout);
    for f in [
        "./usr/bin/composer",
        "./usr/lib/composer/profiles/generic.toml",
        "./usr/lib/kernel/install.d/50-composer.install",
        "./usr/lib/kernel/install.d/95-composer-private.install",
        "./etc/kernel/postinst.d/composer",
        "./etc/kernel/postrm.d/composer",
        "./usr/share/man/man1/composer-build.1.gz",
        "./usr/share/bash-completion/completions/composer",
    ] {
        assert!(contents.contains(f), "the package has no {f}:\n{contents}");
    }

    // It conflicts with the generators whose hooks would write the same file.
    if dpkg_installed("initramfs-tools") {
        eprintln!("removing initramfs-tools (it conflicts with initramfs-composer)");
        dpkg(&["--remove", "initramfs-tools"]);
    }
    let mut installed = Installed(Vec::new());
    installed.0.push("initramfs-composer".into());
    dpkg(&["--install", deb.to_str().unwrap()]);
    installed.0.push(package.clone());
    dpkg(&["--install", kernel_deb.to_str().unwrap()]);

    let version = &unpacked.version;
    let image = PathBuf::from(format!("/boot/initrd.img-{version}"));
    assert!(
        image.is_file(),
        "the kernel's postinst wrote no {}",
        image.display()
    );
    support::run_ok(Command::new("/usr/bin/composer").arg("verify").arg(&image));
    // composer's, not another generator's: its emergency script (systemd init) or its
    // own /init (shell init) is inside.
    let cat = |path: &str| {
        Command::new("/usr/bin/composer")
            .arg("cat")
            .arg(&image)
            .arg(path)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
    };
    assert!(
        cat("usr/lib/composer/emergency").is_some()
            || cat("init").is_some_and(|init| init.contains("composer")),
        "{} was not written by composer",
        image.display()
    );

    // The installed kernel boots the installed initrd to the first test root.
    let installed_kernel = DebianKernel {
        version: version.clone(),
        vmlinuz: PathBuf::from(format!("/boot/vmlinuz-{version}")),
        root: PathBuf::from("/"),
        userland: PathBuf::from("/"),
    };
    let root = &roots[0];
    let opts = BootOptions {
        memory_mib: 1024,
        extra_append: format!("root={}", root.root_arg),
        extra_args: root.qemu.iter().map(Into::into).collect(),
        timeout: Duration::from_secs(300),
        ..BootOptions::default()
    };
    let r = support::qemu_boot_with(&installed_kernel, &image, &opts);
    eprintln!(
        "--- {} ({:.1} s) ---\n{}",
        root.name,
        r.elapsed.as_secs_f64(),
        r.console
    );
    let want = format!("COMPOSER-ROOT-OK {} fs={} pid=1", root.token, root.fstype);
    assert!(
        support::console_shows(&r.console, &want),
        "no `{want}` on the console"
    );

    dpkg(&["--purge", &package]);
    assert!(
        !image.exists(),
        "{} is left after the purge",
        image.display()
    );
    installed.0.pop();
    dpkg(&["--purge", "initramfs-composer"]);
    installed.0.pop();
    assert!(!Path::new("/usr/bin/composer").exists());
}

/// The package on Debian 13, with Debian 13's own kernel-install (systemd 257): in a
/// copy of the platform's root (made with mmdebstrap; the package conflicts with
/// initramfs-tools, which is purged first, as apt would), `dpkg --install` sets it up,
/// and `kernel-install add` runs composer's plugin: an initrd beside the kernel
/// (layout=other, which kernel-install picks without an ESP), then with
/// `layout=uki` and `uki_generator=composer` a UKI on the ESP holding the root's
/// kernel and its `/etc/kernel/cmdline`. `kernel-install remove` takes each away. The
/// root is a copy in a scratch directory, run in a mount namespace of its own: nothing
/// of this machine is installed or changed.
#[test]
fn debian_13s_kernel_install_runs_the_packages_plugin_for_an_initrd_and_a_uki() {
    if !support::require_root() {
        return;
    }
    for (tool, pkg) in [("dpkg-deb", "dpkg"), ("dpkg-shlibdeps", "dpkg-dev")] {
        if support::require_tool(tool, pkg).is_none() {
            return;
        }
    }
    let Some(platform) = support::release::release_root(support::release::Release::Trixie) else {
        return;
    };
    let kver = platform.kernel.version.clone();
    let dir = Scratch::new("deb-trixie");
    let deb = build_deb(dir.path());
    let root = dir.join("root");
    support::run_ok(Command::new("cp").arg("-a").arg(&platform.dir).arg(&root));
    fs::copy(&deb, root.join("tmp/initramfs-composer.deb")).unwrap();
    let cmdline = format!("root=UUID={} ro console=ttyS0", support::release::ROOT_UUID);
    fs::write(root.join("etc/kernel/cmdline"), format!("{cmdline}\n")).unwrap();
    // Runs `script` in the root, with /proc, /sys and /dev as a chroot needs them.
    let in_root = |script: &str| {
        let out = support::run(
            Command::new("unshare")
                .args(["--mount", "--propagation", "private", "sh", "-c"])
                .arg(
                    r#"mount -t proc proc "$1/proc" && mount -t sysfs sysfs "$1/sys" &&
                       mount --rbind /dev "$1/dev" && exec chroot "$1" sh -c "$2""#,
                )
                .arg("sh")
                .arg(&root)
                .arg(format!(
                    "export PATH=/usr/sbin:/usr/bin DEBIAN_FRONTEND=noninteractive; {script}"
                )),
        );
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        eprintln!("--- {script} ---\n{text}");
        assert!(out.status.success(), "{script}: {text}");
        text
    };
    in_root("dpkg --purge --force-depends initramfs-tools initramfs-tools-core");
    in_root("dpkg --install /tmp/initramfs-composer.deb");
    let version = in_root("kernel-install --version");
    assert!(version.contains("systemd 257"), "{version}");

    // layout=other: the initrd beside the kernel, composer's.
    let initrd = root.join(format!("boot/initrd.img-{kver}"));
    let _ = fs::remove_file(&initrd);
    let said = in_root(&format!(
        "kernel-install -v add {kver} /boot/vmlinuz-{kver}"
    ));
    assert!(
        said.contains("50-composer.install") && said.contains("layout=other"),
        "{said}"
    );
    assert!(
        initrd.is_file(),
        "kernel-install wrote no {}",
        initrd.display()
    );
    support::run_ok(support::composer().arg("verify").arg(&initrd));
    let paths = support::image_paths(&initrd);
    assert!(
        paths
            .iter()
            .any(|p| p == "usr/lib/systemd/systemd-executor"),
        "not the Debian 13 systemd image"
    );
    in_root(&format!("kernel-install remove {kver}"));
    assert!(
        !initrd.exists(),
        "{} is left after remove",
        initrd.display()
    );

    // layout=uki with composer as its generator: a UKI on the ESP.
    fs::create_dir_all(root.join("boot/efi")).unwrap();
    fs::write(
        root.join("etc/kernel/install.conf"),
        "layout=uki\nuki_generator=composer\n",
    )
    .unwrap();
    in_root(&format!(
        "BOOT_ROOT=/boot/efi kernel-install -v add {kver} /boot/vmlinuz-{kver}"
    ));
    let linux = root.join("boot/efi/EFI/Linux");
    let ukis: Vec<PathBuf> = fs::read_dir(&linux)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert_eq!(ukis.len(), 1, "{}: {ukis:?}", linux.display());
    let uki = &ukis[0];
    assert!(
        uki.file_name()
            .unwrap()
            .to_string_lossy()
            .ends_with(&format!("-{kver}.efi")),
        "{}",
        uki.display()
    );
    let o = support::run_ok(support::composer().args(["inspect", "--json"]).arg(uki));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["uki"]["uname"], kver.as_str());
    assert_eq!(doc["uki"]["cmdline"], cmdline.as_str());
    let linux_section = doc["uki"]["sections"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == ".linux")
        .cloned()
        .expect("a .linux section");
    let bytes = fs::read(uki).unwrap();
    let at = linux_section["offset"].as_u64().unwrap() as usize;
    let size = linux_section["size"].as_u64().unwrap() as usize;
    assert_eq!(
        &bytes[at..at + size],
        fs::read(&platform.kernel.vmlinuz).unwrap().as_slice(),
        "the UKI's kernel is not the root's"
    );
    in_root(&format!("BOOT_ROOT=/boot/efi kernel-install remove {kver}"));
    assert!(!uki.exists(), "{} is left after remove", uki.display());
}

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
    let built = support::run_ok(
        Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("dist/debian/build-deb"))
            .arg("--binary")
            .arg(support::composer_bin())
            .arg("--out")
            .arg(dir.path()),
    );
    let deb = PathBuf::from(String::from_utf8_lossy(&built.stdout).trim());
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

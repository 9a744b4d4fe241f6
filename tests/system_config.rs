//! `composer build` with no manifest: the system configuration. Without one it builds
//! the generic image; in a root given by `--root`, /etc/composer/initrd.toml and the
//! drop-ins of /usr/lib/composer/initrd.d and /etc/composer/initrd.d change the result
//! as the book says: file-name order, an /etc drop-in replaces the /usr one of the same
//! name, a link to /dev/null masks it, and the image lands at `[image] output` inside
//! the root.

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;

use crate::support::{self, Scratch};

fn listing(image: &Path) -> BTreeSet<String> {
    let out = support::run_ok(support::composer().arg("inspect").arg(image));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

fn write(root: &Path, path: &str, text: &str) {
    let p = root.join(path);
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, text).unwrap();
}

#[test]
fn no_manifest_builds_the_generic_image() {
    if !support::generic_image_host() {
        return;
    }
    let Some(kernel) = support::debian_kernel() else {
        return;
    };
    if Path::new("/etc/composer/initrd.toml").exists() {
        support::skip("this machine has /etc/composer/initrd.toml: the default is not in force");
        return;
    }
    let dir = Scratch::new("sysconf-default");
    let out = dir.join("initrd.img");
    let run = support::run_ok(
        support::build_for(&kernel.version, &kernel.modules_dir())
            .arg("-o")
            .arg(&out),
    );
    eprintln!("{}", String::from_utf8_lossy(&run.stderr));
    let list = listing(&out);
    let kdir = format!("usr/lib/modules/{}/kernel", kernel.version);
    for m in [
        "drivers/ata/ahci.ko",
        "drivers/nvme/host/nvme.ko",
        "drivers/scsi/virtio_scsi.ko",
        "drivers/block/virtio_blk.ko",
        "drivers/md/dm-crypt.ko",
        "fs/xfs/xfs.ko",
        "fs/btrfs/btrfs.ko",
        "fs/ext4/ext4.ko",
        "drivers/usb/storage/usb-storage.ko",
        "drivers/hid/usbhid/usbhid.ko",
    ] {
        let path = format!("{kdir}/{m}");
        assert!(
            list.iter().any(|l| l.starts_with(&path)),
            "the default image has no {path}"
        );
    }
    assert!(list.contains("init"), "the default image has no /init");
    assert!(list.contains("bin"), "the default image has no /bin");
}

#[test]
fn the_configuration_and_drop_ins_of_the_root_change_the_image() {
    let Some(kernel) = support::debian_kernel() else {
        return;
    };
    let dir = Scratch::new("sysconf-root");
    let root = dir.join("root");
    fs::create_dir_all(root.join("boot")).unwrap();
    write(
        &root,
        "etc/composer/initrd.toml",
        "init = \"none\"\n[[dir]]\npath = \"/marker/main\"\n\
         [image]\noutput = \"/boot/from-main.img\"\n",
    );
    let usr = "usr/lib/composer/initrd.d";
    let etc = "etc/composer/initrd.d";
    write(
        &root,
        &format!("{usr}/10-usr.toml"),
        "[[dir]]\npath = \"/marker/usr-10\"\n",
    );
    write(
        &root,
        &format!("{usr}/20-replaced.toml"),
        "[[dir]]\npath = \"/marker/usr-20\"\n",
    );
    write(
        &root,
        &format!("{etc}/20-replaced.toml"),
        "[[dir]]\npath = \"/marker/etc-20\"\n",
    );
    write(
        &root,
        &format!("{usr}/30-masked.toml"),
        "[[dir]]\npath = \"/marker/usr-30\"\n",
    );
    symlink("/dev/null", root.join(etc).join("30-masked.toml")).unwrap();
    // Read last: its output wins over the main file's.
    write(
        &root,
        &format!("{etc}/40-etc.yaml"),
        "dir:\n  - path: /marker/etc-40\nimage:\n  output: /boot/composer-${kver}.img\n",
    );
    write(&root, &format!("{etc}/notes.txt"), "not a drop-in\n");
    write(
        &root,
        &format!("{usr}/50-module.toml"),
        "modules = [\"ext4\"]\n",
    );

    let run = support::run_ok(
        support::build_for(&kernel.version, &kernel.modules_dir())
            .arg("--root")
            .arg(&root),
    );
    eprintln!("{}", String::from_utf8_lossy(&run.stderr));
    let image = root.join(format!("boot/composer-{}.img", kernel.version));
    assert!(image.is_file(), "no image at {}", image.display());
    assert!(!root.join("boot/from-main.img").exists());
    let list = listing(&image);
    let markers: Vec<&str> = list
        .iter()
        .filter_map(|l| l.strip_prefix("marker/"))
        .collect();
    assert_eq!(markers, ["etc-20", "etc-40", "main", "usr-10"], "{list:?}");
    assert!(
        list.iter().any(|l| l.ends_with("kernel/fs/ext4/ext4.ko")),
        "the /usr drop-in's module is missing"
    );

    // The masked drop-in unmasked: it comes back.
    fs::remove_file(root.join(etc).join("30-masked.toml")).unwrap();
    support::run_ok(
        support::build_for(&kernel.version, &kernel.modules_dir())
            .arg("--root")
            .arg(&root),
    );
    assert!(listing(&image).contains("marker/usr-30"));

    // --profile on the command line with no configuration: that profile alone.
    fs::remove_file(root.join("etc/composer/initrd.toml")).unwrap();
    fs::remove_dir_all(root.join(etc)).unwrap();
    fs::remove_dir_all(root.join(usr)).unwrap();
    let out = dir.join("base.img");
    support::run_ok(
        support::composer()
            .args(["build", "--profile", "base", "--kver", &kernel.version])
            .arg("--root")
            .arg(&root)
            .arg("-o")
            .arg(&out)
            .arg("--no-sync"),
    );
    let list = listing(&out);
    assert!(
        list.contains("sysroot") && list.contains("dev/console"),
        "{list:?}"
    );
    assert!(
        !list.iter().any(|l| l.contains(".ko")),
        "base has no modules: {list:?}"
    );
}

/// `composer build --root ROOT MANIFEST -o OUT`.
fn build_in(root: &Path, manifest: &Path, out: &Path) -> std::process::Output {
    support::run(
        support::composer()
            .arg("build")
            .arg("--root")
            .arg(root)
            .arg(manifest)
            .arg("-o")
            .arg(out),
    )
}

/// `[console] from_root` in a root with Debian's console-setup cache and no kbd: the
/// cached keymap and font go in decompressed, `/etc/vconsole.conf` names them, the
/// build warns that nothing would load them, and `composer why` names the setting.
#[test]
fn the_roots_console_setup_cache_goes_in_decompressed() {
    let dir = Scratch::new("sysconf-console");
    let root = dir.join("root");
    let gz = |text: &[u8]| {
        let mut out = Vec::new();
        let mut e = flate2::write::GzEncoder::new(&mut out, flate2::Compression::default());
        std::io::Write::write_all(&mut e, text).unwrap();
        e.finish().unwrap();
        out
    };
    fs::create_dir_all(root.join("etc/console-setup")).unwrap();
    fs::create_dir_all(root.join("etc/default")).unwrap();
    let keymap = b"keymaps 0-2,4-6,8-9,12\nkeycode 16 = a A\n";
    fs::write(
        root.join("etc/console-setup/cached_UTF-8_del.kmap.gz"),
        gz(keymap),
    )
    .unwrap();
    fs::write(
        root.join("etc/console-setup/cached_Lat15-Fixed16.psf.gz"),
        gz(b"PSF font bytes"),
    )
    .unwrap();
    write(&root, "etc/default/console-setup", "CHARMAP=\"UTF-8\"\n");
    let m = dir.join("console.toml");
    fs::write(&m, "[console]\nfrom_root = true\n").unwrap();
    let out = dir.join("initrd.img");
    let run = build_in(&root, &m, &out);
    assert!(run.status.success());
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        stderr.contains("no `loadkeys`") && stderr.contains("no `setfont`"),
        "{stderr}"
    );
    let cat = |path: &str| support::image_bytes(&out, path);
    assert_eq!(cat("/usr/lib/composer/keymap.map"), keymap);
    assert_eq!(cat("/usr/lib/composer/font.psf"), b"PSF font bytes");
    let conf = String::from_utf8(cat("/etc/vconsole.conf")).unwrap();
    assert!(
        conf.contains("KEYMAP=/usr/lib/composer/keymap.map"),
        "{conf}"
    );
    let why = support::run_ok(
        support::composer()
            .arg("why")
            .arg("--root")
            .arg(&root)
            .arg(&m)
            .arg("/usr/lib/composer/keymap.map"),
    );
    let why = String::from_utf8_lossy(&why.stdout);
    assert!(
        why.contains("[console] from_root: /etc/console-setup"),
        "{why}"
    );
}

/// A keymap the manifest names and the root lacks is an error at its line, and no
/// image is written.
#[test]
fn a_named_keymap_that_is_not_found_is_an_error_at_its_line() {
    let dir = Scratch::new("sysconf-console-missing");
    let root = dir.join("root");
    fs::create_dir_all(root.join("etc")).unwrap();
    let m = dir.join("console.toml");
    fs::write(&m, "# a keyboard\n[console]\nkeymap = \"no-such-map\"\n").unwrap();
    let out = dir.join("initrd.img");
    let run = build_in(&root, &m, &out);
    assert!(!run.status.success());
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        stderr.contains("console.toml:2:1") && stderr.contains("`no-such-map` is not found"),
        "{stderr}"
    );
    assert!(!out.exists(), "a partial image was left");
}

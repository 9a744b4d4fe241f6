//! The generic profile's defaults for a kernel update, on a root made here: the root's
//! CPU microcode in an uncompressed early segment first; modules already compressed
//! (.ko.xz, .ko.zst) stored in an uncompressed segment of their own; everything else in
//! one zstd segment. And a profile's segment whose patterns match nothing is quiet,
//! while a user's is a warning.

use std::fs;
use std::path::Path;
use std::process::Command;

use crate::support::{self, Scratch};

/// A module tree with ext4 compressed by xz, xfs by zstd, and their dependencies
/// (jbd2, mbcache, crc16, libcrc32c) left as they are.
fn tree(from: &Path, to: &Path) {
    for m in [
        "kernel/fs/ext4/ext4.ko",
        "kernel/fs/jbd2/jbd2.ko",
        "kernel/fs/mbcache.ko",
        "kernel/lib/crc16.ko",
        "kernel/fs/xfs/xfs.ko",
        "kernel/lib/libcrc32c.ko",
    ] {
        let dst = to.join(m);
        fs::create_dir_all(dst.parent().unwrap()).unwrap();
        fs::copy(from.join(m), &dst).unwrap();
    }
    for f in [
        "modules.builtin",
        "modules.builtin.modinfo",
        "modules.order",
    ] {
        fs::copy(from.join(f), to.join(f)).unwrap();
    }
    support::run_ok(
        Command::new("xz")
            .args(["--check=crc32", "-q"])
            .arg(to.join("kernel/fs/ext4/ext4.ko")),
    );
    support::run_ok(
        Command::new("zstd")
            .args(["-q", "--rm"])
            .arg(to.join("kernel/fs/xfs/xfs.ko")),
    );
}

/// Each segment's compression and the regular files in it. `inspect -l` gives a file's
/// data offset as `@SEG:OFFSET` in a compressed segment and `@OFFSET` (in the image)
/// in an uncompressed one.
fn segments(image: &Path) -> Vec<(String, Vec<String>)> {
    let table = support::run_ok(
        support::composer()
            .args(["inspect", "--segments"])
            .arg(image),
    );
    let mut bounds = Vec::new();
    let mut segs: Vec<(String, Vec<String>)> = Vec::new();
    for line in String::from_utf8_lossy(&table.stdout).lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (offset, length): (u64, u64) = (f[1].parse().unwrap(), f[2].parse().unwrap());
        bounds.push(offset..offset + length);
        segs.push((f[3].to_string(), Vec::new()));
    }
    let out = support::run_ok(support::composer().args(["inspect", "-l"]).arg(image));
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if !line.starts_with('-') {
            continue;
        }
        let at = f.iter().find(|w| w.starts_with('@')).unwrap();
        let seg = match at[1..].split_once(':') {
            Some((seg, _)) => seg.parse().unwrap(),
            None => {
                let off: u64 = at[1..].parse().unwrap();
                bounds.iter().position(|b| b.contains(&off)).unwrap()
            }
        };
        segs[seg].1.push(f.last().unwrap().to_string());
    }
    segs
}

#[test]
fn the_generic_profile_keeps_microcode_early_and_compressed_modules_uncompressed() {
    let Some(kernel) = support::debian_kernel() else {
        return;
    };
    for (tool, pkg) in [("xz", "xz-utils"), ("zstd", "zstd")] {
        if support::require_tool(tool, pkg).is_none() {
            return;
        }
    }
    let dir = Scratch::new("profile-generic");
    let root = dir.join("root");
    let ucode = root.join("usr/lib/firmware/intel-ucode");
    fs::create_dir_all(&ucode).unwrap();
    fs::write(ucode.join("06-55-04"), vec![0x5a; 3072]).unwrap();
    let kmod = dir.join("modules");
    tree(&kernel.modules_dir(), &kmod);
    let m = dir.join("m.toml");
    // The init is the manifest's business here: the root has no programs.
    fs::write(&m, "include = [\"generic\"]\ninit = \"none\"\n").unwrap();
    let image = dir.join("initrd.img");
    let run = support::run_ok(
        support::build_for(&kernel.version, &kmod)
            .arg(&m)
            .arg("--root")
            .arg(&root)
            .arg("-o")
            .arg(&image),
    );
    let warnings = String::from_utf8_lossy(&run.stderr).into_owned();
    eprintln!("{warnings}");
    let segs = segments(&image);
    eprintln!("{segs:#?}");
    assert_eq!(segs.len(), 3, "early, compressed modules, main: {segs:?}");
    assert_eq!(segs[0].0, "none");
    assert_eq!(segs[0].1, ["kernel/x86/microcode/GenuineIntel.bin"]);
    assert_eq!(segs[1].0, "none");
    let mut stored = segs[1].1.clone();
    stored.sort();
    let kdir = format!("usr/lib/modules/{}/kernel", kernel.version);
    assert_eq!(
        stored,
        [
            format!("{kdir}/fs/ext4/ext4.ko.xz"),
            format!("{kdir}/fs/xfs/xfs.ko.zst")
        ]
    );
    assert_eq!(segs[2].0, "zstd");
    for m in [
        "fs/jbd2/jbd2.ko",
        "fs/mbcache.ko",
        "lib/crc16.ko",
        "lib/libcrc32c.ko",
    ] {
        let p = format!("{kdir}/{m}");
        assert!(segs[2].1.contains(&p), "{p} is not in the zstd segment");
    }
    // The profile's optional rules and segments say nothing about what this small
    // tree lacks.
    assert!(!warnings.contains("match"), "{warnings}");
    // ext4, the most common root's filesystem, is on the list the inits load from
    // the start (and only it: the drivers load as devices ask).
    assert_eq!(
        support::modules_load(&image),
        ["ext4"],
        "the generic image's modules-load.d list"
    );

    // A user's segment that names /lib: it takes what merged /usr moved to /usr/lib.
    // One that matches nothing is a warning, at its line.
    fs::write(
        &m,
        "include = [\"generic\"]\ninit = \"none\"\n\n\
         [[segment]]\nname = \"jbd2\"\npaths = [\"/lib/modules/*/kernel/fs/jbd2/**\"]\n\n\
         [[segment]]\nname = \"fw\"\npaths = [\"/lib/firmware/nothing/**\"]\n",
    )
    .unwrap();
    let run = support::run_ok(
        support::build_for(&kernel.version, &kmod)
            .arg(&m)
            .arg("--root")
            .arg(&root)
            .arg("-o")
            .arg(&image),
    );
    let warnings = String::from_utf8_lossy(&run.stderr);
    assert!(
        warnings.contains(&format!("{}:10:", m.display())) && warnings.contains("fw"),
        "no warning for the empty segment: {warnings}"
    );
    assert!(!warnings.contains("jbd2"), "{warnings}");
    let segs = segments(&image);
    let jbd2 = segs
        .iter()
        .find(|(_, paths)| paths.iter().any(|p| p.ends_with("jbd2.ko")))
        .unwrap();
    assert_eq!(jbd2.1, [format!("{kdir}/fs/jbd2/jbd2.ko")], "{segs:#?}");

    // A root without microcode: no early segment at all, and no warning.
    fs::remove_dir_all(root.join("usr/lib/firmware")).unwrap();
    fs::write(&m, "include = [\"generic\"]\ninit = \"none\"\n").unwrap();
    let run = support::run_ok(
        support::build_for(&kernel.version, &kmod)
            .arg(&m)
            .arg("--root")
            .arg(&root)
            .arg("-o")
            .arg(&image),
    );
    let warnings = String::from_utf8_lossy(&run.stderr);
    assert!(!warnings.contains("microcode"), "{warnings}");
    let segs = segments(&image);
    assert_eq!(segs.len(), 2, "no early segment: {segs:#?}");
    assert!(
        !segs[0].1.iter().any(|p| p.starts_with("kernel/")),
        "{segs:#?}"
    );
}

/// `[systemd] exclude_units`, by name and by glob: the unit is not taken, whatever
/// pulls it in (a `Wants=` or a `.wants/` link), and neither is the link; the others
/// are. Without the list, all of them are (so the exclusion is what leaves them out).
#[test]
fn excluded_units_are_left_out_with_the_links_to_them() {
    let dir = Scratch::new("profile-exclude-units");
    let root = dir.join("root");
    let sys = root.join("usr/lib/systemd/system");
    fs::create_dir_all(sys.join("initrd.target.wants")).unwrap();
    fs::write(
        sys.join("initrd.target"),
        "[Unit]\nWants=keep.service skip-me.service\n",
    )
    .unwrap();
    for unit in [
        "keep.service",
        "skip-me.service",
        "dev-hugepages.mount",
        "dracut-cmdline.service",
    ] {
        fs::write(sys.join(unit), "[Unit]\nDescription=test\n").unwrap();
    }
    for unit in ["dev-hugepages.mount", "dracut-cmdline.service"] {
        std::os::unix::fs::symlink(
            format!("../{unit}"),
            sys.join("initrd.target.wants").join(unit),
        )
        .unwrap();
    }
    let build = |exclude: &str| {
        let m = dir.join("m.toml");
        fs::write(
            &m,
            format!("[systemd]\nunits = [\"initrd.target\"]\n{exclude}"),
        )
        .unwrap();
        let image = dir.join("initrd.img");
        support::run_ok(
            support::composer()
                .arg("build")
                .arg("--root")
                .arg(&root)
                .arg(&m)
                .arg("-o")
                .arg(&image),
        );
        support::image_paths(&image)
    };
    let unit = |p: &str| format!("usr/lib/systemd/system/{p}");
    let all = build("");
    for p in [
        "initrd.target",
        "keep.service",
        "skip-me.service",
        "dev-hugepages.mount",
        "initrd.target.wants/dev-hugepages.mount",
        "dracut-cmdline.service",
        "initrd.target.wants/dracut-cmdline.service",
    ] {
        assert!(
            all.contains(&unit(p)),
            "without exclude_units, no {p}: {all:?}"
        );
    }
    let some =
        build("exclude_units = [\"skip-me.service\", \"dev-hugepages.mount\", \"dracut-*\"]\n");
    for p in ["initrd.target", "keep.service"] {
        assert!(some.contains(&unit(p)), "{p} was left out too: {some:?}");
    }
    for p in [
        "skip-me.service",
        "dev-hugepages.mount",
        "initrd.target.wants/dev-hugepages.mount",
        "dracut-cmdline.service",
        "initrd.target.wants/dracut-cmdline.service",
    ] {
        assert!(!some.contains(&unit(p)), "{p} is in the image: {some:?}");
    }
}

/// The systemd init's image has the units the initrd runs and none of those of a
/// general system the profile excludes (each would cost the boot a unit load or a
/// process); udev loads the root's filesystem module when it finds the filesystem.
#[test]
fn the_systemd_init_leaves_a_general_systems_units_out() {
    let Some(kernel) = support::debian_kernel() else {
        return;
    };
    if support::require_tool("udevadm", "udev").is_none() {
        return;
    }
    let image = support::generic_image(&kernel, "systemd");
    let all = support::image_paths(&image);
    let has = |p: &str| all.iter().any(|q| q.ends_with(p));
    for p in [
        "/initrd.target",
        "/systemd-udevd.service",
        "/systemd-fsck-root.service",
        "/initrd-switch-root.service",
        "/kmod-static-nodes.service",
        "rules.d/70-composer-fs.rules",
        "/composer-fs-module@.service",
        "/systemd-sysctl.service.d/composer.conf",
        "/systemd-tmpfiles-setup.service.d/composer.conf",
        "/systemd-tmpfiles-setup-dev.service.d/composer.conf",
        "/systemd-journald.service.d/composer.conf",
        "/systemd-ask-password-console.service.d/composer-console.conf",
        // The CPU's drivers load before a LUKS volume opens, not at cold plug.
        "rules.d/79-composer-cpu.rules",
        "/composer-cpu-drivers.service",
        "/systemd-cryptsetup@.service.d/composer.conf",
        "/systemd-udev-trigger.service.d/composer.conf",
    ] {
        assert!(has(p), "the systemd image has no {p}");
    }
    // Cold plug: the devices the initrd acts on and every device with a driver to
    // load, in place of systemd's trigger of every object in /sys. The drop-ins'
    // lines in the order systemd applies them (by name): the profile's resets
    // ExecStart=, the build's (the generic image holds modules its /init does not
    // load) adds the trigger by modalias.
    let dir = "etc/systemd/system/systemd-udev-trigger.service.d";
    let mut drop_ins: Vec<&String> = all
        .iter()
        .filter(|p| p.trim_start_matches('/').starts_with(&format!("{dir}/")))
        .collect();
    drop_ins.sort_by_key(|p| p.rsplit('/').next().map(str::to_string));
    let names: Vec<&str> = drop_ins
        .iter()
        .filter_map(|p| p.rsplit('/').next())
        .collect();
    assert_eq!(names, ["composer.conf", "modaliases.conf"], "{drop_ins:?}");
    let conf: String = names
        .iter()
        .map(|n| support::image_file(&image, &format!("{dir}/{n}")))
        .collect();
    let execs: Vec<&str> = conf
        .lines()
        .filter(|l| l.starts_with("ExecStart="))
        .collect();
    assert_eq!(
        execs.first(),
        Some(&"ExecStart="),
        "the trigger is not reset: {conf}"
    );
    let triggers = &execs[1..];
    assert_eq!(triggers.len(), 2, "{conf}");
    assert!(
        triggers.iter().all(
            |l| l.contains("udevadm trigger --type=devices --action=add")
                && !l.contains("--type=all")
        ),
        "{conf}"
    );
    for subsystem in ["block", "net", "input", "hidraw", "tpmrm"] {
        assert!(
            triggers[0]
                .split_whitespace()
                .any(|w| w == format!("--subsystem-match={subsystem}")),
            "no {subsystem} in the first trigger: {conf}"
        );
    }
    assert!(triggers[1].ends_with("--attr-match=modalias"), "{conf}");
    // initrd-parse-etc queues initrd-cleanup by OnSuccess=, not by a systemctl process
    // (where the root's unit has that step: systemd 249 and later have OnSuccess=).
    let vendor =
        fs::read_to_string("/usr/lib/systemd/system/initrd-parse-etc.service").unwrap_or_default();
    if vendor.contains("\nExecStart=systemctl --no-block start initrd-cleanup.service") {
        let conf = support::image_file(
            &image,
            "etc/systemd/system/initrd-parse-etc.service.d/composer.conf",
        );
        let lines: Vec<&str> = conf.lines().filter(|l| !l.starts_with('#')).collect();
        assert!(
            lines.contains(&"OnSuccess=initrd-cleanup.service"),
            "{conf}"
        );
        let execs: Vec<&&str> = lines
            .iter()
            .filter(|l| l.starts_with("ExecStart="))
            .collect();
        assert_eq!(execs.first(), Some(&&"ExecStart="), "{conf}");
        assert!(execs.len() >= 2, "{conf}");
        assert!(
            execs.iter().all(|l| !l.contains("initrd-cleanup")),
            "{conf}"
        );
        assert!(
            execs.iter().any(|l| l.contains("systemd-fstab-generator")),
            "the fstab check is gone: {conf}"
        );
    }
    // The filesystem's module: no modprobe when modules-load.d loaded it already.
    let unit = support::image_file(&image, "usr/lib/systemd/system/composer-fs-module@.service");
    assert!(
        unit.lines()
            .any(|l| l == "ConditionPathExists=!/sys/module/%i"),
        "{unit}"
    );
    for p in [
        "/dev-hugepages.mount",
        "/sys-kernel-debug.mount",
        "/systemd-update-utmp.service",
        "/systemd-firstboot.service",
        "/systemd-repart.service",
        "/dbus.socket",
        "/systemd-initctl.socket",
        "/systemd-journald-audit.socket",
    ] {
        assert!(!has(p), "the systemd image has {p}");
    }
    assert!(
        !all.iter().any(|p| p.contains("/dracut-")),
        "the systemd image has dracut's units"
    );
}

/// The systemd image's /init starts loading the modules of its modules-load.d lists
/// (with a /proc of their own from unshare, so that the command line's blacklists and
/// module options apply, or with /proc mounted where unshare is missing) and then runs
/// systemd as PID 1. boot_root's
/// `the_systemd_inits_first_modules_are_loaded_before_systemd_modules_load` boots it.
#[test]
fn the_systemd_inits_first_modules_load_beside_systemds_start() {
    let Some(kernel) = support::debian_kernel() else {
        return;
    };
    if support::require_tool("udevadm", "udev").is_none() {
        return;
    }
    let image = support::generic_image(&kernel, "systemd");
    let init = support::image_file(&image, "init");
    let lines: Vec<&str> = init
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let at = |prefix: &str| {
        lines
            .iter()
            .position(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no `{prefix}` in /init:\n{init}"))
    };
    let lists = at("for f in /etc/modules-load.d/*.conf /usr/lib/modules-load.d/*.conf");
    let unshare = at("PATH=$PATH unshare --mount-proc modprobe -q -b -a $mods &");
    let proc = at("mount -t proc -o nosuid,noexec,nodev proc /proc");
    let load = at("modprobe -q -b -a $mods &");
    let exec = at("exec /usr/lib/systemd/systemd \"$@\"");
    assert!(
        lists < unshare && unshare < proc && proc < load && load < exec,
        "{init}"
    );
    assert_eq!(
        exec,
        lines.len() - 1,
        "systemd is not the last step: {init}"
    );
    // unshare is in the image where the root has it (util-linux).
    if Path::new("/usr/bin/unshare").exists() {
        let entries = support::image_paths(&image);
        assert!(
            entries.iter().any(|p| p.ends_with("bin/unshare")),
            "no unshare in the image"
        );
    }
    // What it loads: the generic image's ext4.
    let list = support::modules_load(&image);
    assert!(list.iter().any(|m| m == "ext4"), "{list:?}");
}

/// An image with composer's shell init runs no units: `[systemd]` (which the network
/// profile has for the systemd init) is left out of it, and taken with `init = "none"`.
#[test]
fn systemd_units_stay_out_of_an_image_with_the_shell_init() {
    if support::require_tool("/usr/lib/systemd/systemd-networkd", "systemd").is_none() {
        return;
    }
    let dir = Scratch::new("profile-shell-no-units");
    let build = |init: &str| {
        let m = dir.join(format!("{init}.toml"));
        fs::write(
            &m,
            format!("init = \"{init}\"\n\n[systemd]\nunits = [\"systemd-networkd.service\"]\n"),
        )
        .unwrap();
        let image = dir.join(format!("{init}.img"));
        support::run_ok(
            support::composer()
                .arg("build")
                .arg(&m)
                .arg("-o")
                .arg(&image),
        );
        support::image_paths(&image)
    };
    let unit = "usr/lib/systemd/system/systemd-networkd.service";
    let with_units = build("none");
    assert!(
        with_units.iter().any(|p| p == unit),
        "init = \"none\" left the unit out: {with_units:?}"
    );
    let shell = build("shell");
    assert!(
        shell.iter().any(|p| p == "init"),
        "the shell image has no /init: {shell:?}"
    );
    assert!(
        !shell
            .iter()
            .any(|p| p.starts_with("usr/lib/systemd/system/")),
        "units in the shell init's image: {shell:?}"
    );
}

/// The cold plug (the systemd image's trigger by modalias, the shell init's rounds of
/// modprobes) is left out exactly when the image's /init loads every module it holds:
/// its load list, with the dependencies and soft dependencies modprobe loads beside
/// it (read from Debian's tree with kmod's modprobe), is every module of the image.
/// The images without one still reach their root.
#[test]
fn the_cold_plug_follows_what_init_loads() {
    let Some(kernel) = support::debian_kernel() else {
        return;
    };
    if support::require_tool("udevadm", "udev").is_none()
        || support::require_tool("modprobe", "kmod").is_none()
    {
        return;
    }
    let Some(depmod) = support::debian_kernel_depmod(&kernel) else {
        return;
    };
    let dir = Scratch::new("profile-coldplug");
    // (image, its modules, whether its init cold plugs)
    let build = |name: &str, init: &str, rules: &str| {
        let m = dir.join(format!("{name}-{init}.toml"));
        fs::write(&m, format!("init = \"{init}\"\n\n{rules}")).unwrap();
        let image = dir.join(format!("{name}-{init}.img"));
        support::run_ok(
            support::build_for(&kernel.version, &kernel.modules_dir())
                .arg(&m)
                .arg("-o")
                .arg(&image),
        );
        let paths = support::image_paths(&image);
        let has = |p: &str| paths.iter().any(|q| q.ends_with(p));
        let mut modules: Vec<String> = paths
            .iter()
            .filter(|p| p.contains("/kernel/") && p.contains(".ko"))
            .map(|p| support::module_name(p))
            .collect();
        modules.sort();
        let coldplug = if init == "systemd" {
            assert!(
                has("systemd-udev-trigger.service.d/composer.conf"),
                "{name}: no cold plug drop-in: {paths:?}"
            );
            assert!(!has("usr/lib/composer/list-loads-all"), "{paths:?}");
            has("systemd-udev-trigger.service.d/modaliases.conf")
        } else {
            assert!(!has("systemd-udev-trigger.service.d/modaliases.conf"));
            !has("usr/lib/composer/list-loads-all")
        };
        (image, modules, coldplug)
    };
    // What modprobe inserts for the names, in Debian's tree.
    let inserts = |names: &[&str]| -> Vec<String> {
        let mut all: Vec<String> = names
            .iter()
            .flat_map(|n| support::modprobe_inserts(&depmod, &kernel.version, n))
            .collect();
        all.sort();
        all.dedup();
        all
    };
    let list = ["virtio_pci", "virtio_blk", "ext4"];
    let loaded = inserts(&list);
    assert!(
        loaded.len() > list.len(),
        "no dependencies here: {loaded:?}"
    );
    let all_rules = "[[module]]\nnames = [\"virtio_pci\", \"virtio_blk\", \"ext4\"]\nload = true\n";
    let roots =
        support::require_boot_env().and_then(|(_, _, busybox)| crate::boot_root::roots(&busybox));
    for init in ["systemd", "shell"] {
        // The disk's drivers and ext4 loaded at boot, and their dependencies come
        // with them: nothing is left for a cold plug to load.
        let (image, modules, coldplug) = build("all", init, all_rules);
        assert_eq!(
            modules, loaded,
            "{init}: the image's modules are not the list's"
        );
        assert!(
            !coldplug,
            "{init}: a cold plug in an image whose /init loads all of {modules:?}"
        );

        // One more module, not loaded at boot (nor by the list's modprobes): a cold
        // plug may load it.
        let (_, modules, coldplug) = build(
            "more",
            init,
            &format!("{all_rules}\n[[module]]\nnames = [\"virtio_net\"]\n"),
        );
        assert!(modules.iter().any(|m| m == "virtio_net"), "{modules:?}");
        assert!(!loaded.iter().any(|m| m == "virtio_net"), "{loaded:?}");
        assert!(
            coldplug,
            "{init}: no cold plug in an image with a module its /init does not load"
        );

        // The image without a cold plug reaches an ext4 root on virtio-blk.
        let Some(roots) = &roots else {
            continue;
        };
        let root = &roots[0];
        assert_eq!(root.fstype, "ext4");
        let r = support::qemu_boot_with(
            &kernel,
            &image,
            &support::BootOptions {
                memory_mib: 1024,
                extra_append: format!("root={} rd.timeout=60", root.root_arg),
                extra_args: root.qemu.iter().map(Into::into).collect(),
                timeout: std::time::Duration::from_secs(300),
                ..support::BootOptions::default()
            },
        );
        let want = format!("COMPOSER-ROOT-OK {} fs=ext4 pid=1", root.token);
        assert!(
            support::console_shows(&r.console, &want),
            "{init}: the image without a cold plug did not boot {}:\n{}",
            root.name,
            r.console
        );
    }
}

/// The shell init loads dm-mod with its first modules when the command line names a
/// device-mapper root, and only then (composer-storage's `storage_early`, run by the
/// POSIX sh the init runs on).
#[test]
fn the_shell_init_loads_dm_mod_early_for_a_device_mapper_root() {
    let storage = Path::new(env!("CARGO_MANIFEST_DIR")).join("profiles/init/composer-storage");
    let early = |args: &[&str], root: &str| {
        let out = Command::new("sh")
            .arg("-c")
            .arg(
                ". \"$0\"; root=$1; shift; for a; do storage_arg \"$a\"; done; \
                 storage_early \"$root\"; printf '%s' \"$early\"",
            )
            .arg(&storage)
            .arg(root)
            .args(args)
            .output()
            .expect("run sh");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    for root in ["/dev/mapper/vg-root", "/dev/dm-0", "/dev/vg/root"] {
        assert_eq!(early(&[], root), "dm-mod", "root={root}");
    }
    for root in [
        "/dev/vda1",
        "/dev/md/root",
        "/dev/disk/by-uuid/6c0f9d1e",
        "UUID=6c0f9d1e",
        "LABEL=root",
    ] {
        assert_eq!(early(&[], root), "", "root={root}");
    }
    for arg in [
        "rd.lvm.vg=vg",
        "rd.lvm.lv=vg/root",
        "rd.luks.uuid=luks-0a1b",
        "rd.luks.name=0a1b=root",
    ] {
        assert_eq!(early(&[arg], "UUID=6c0f9d1e"), "dm-mod", "{arg}");
    }
    assert_eq!(early(&["rd.md.uuid=0a1b", "quiet"], "UUID=6c0f9d1e"), "");
}

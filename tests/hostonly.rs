//! The hostonly profile on this machine. The test derives, on its own, what the machine
//! needs to reach its root: the root's device and filesystem type from
//! /proc/self/mountinfo, every device with a modalias from the root's block device (its
//! partition's disk, device-mapper and md slaves) up to the bus, and the keyboards;
//! kmod's `modprobe --show-depends` turns those (and `fs-TYPE`) into modules of Debian's
//! kernel. The image must hold exactly those modules. The machine's root is ext4 on a
//! virtio disk, as a QEMU guest's: the image then boots such a guest, and is much
//! smaller than the generic image.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::support::{self, BootOptions, DebianKernel, Scratch};

/// The last mount on `/`: (`major:minor`, filesystem type).
fn root_mount() -> (String, String) {
    let text = fs::read_to_string("/proc/self/mountinfo").unwrap();
    text.lines()
        .rev()
        .find_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            let f: Vec<&str> = left.split(' ').collect();
            (f.get(4) == Some(&"/")).then(|| {
                (
                    f[2].to_string(),
                    right.split(' ').next().unwrap_or("").to_string(),
                )
            })
        })
        .expect("no mount on / in /proc/self/mountinfo")
}

/// Modaliases of `dir` and its parents below /sys/devices.
fn modaliases_up(dir: &Path, out: &mut BTreeMap<String, String>) {
    let mut at = Some(dir);
    while let Some(d) = at.filter(|d| d.starts_with("/sys/devices")) {
        if let Ok(a) = fs::read_to_string(d.join("modalias")) {
            let a = a.trim().to_string();
            if !a.is_empty() {
                out.entry(a).or_insert_with(|| d.display().to_string());
            }
        }
        at = d.parent();
    }
}

/// What the machine's root and keyboards ask for: query -> where it comes from.
fn queries() -> (String, BTreeMap<String, String>) {
    let (dev, fstype) = root_mount();
    let mut q = BTreeMap::new();
    q.insert(format!("fs-{fstype}"), format!("root filesystem {fstype}"));
    let mut todo = vec![fs::canonicalize(format!("/sys/dev/block/{dev}")).unwrap()];
    let mut seen = HashSet::new();
    while let Some(b) = todo.pop() {
        if !seen.insert(b.clone()) {
            continue;
        }
        modaliases_up(&b, &mut q);
        for d in [b.clone(), b.parent().unwrap().to_path_buf()] {
            for e in fs::read_dir(d.join("slaves"))
                .into_iter()
                .flatten()
                .flatten()
            {
                todo.push(fs::canonicalize(e.path()).unwrap());
            }
        }
    }
    for e in fs::read_dir("/sys/class/input")
        .into_iter()
        .flatten()
        .flatten()
    {
        let name = e.file_name().to_string_lossy().into_owned();
        let Ok(ev) = fs::read_to_string(e.path().join("capabilities/ev")) else {
            continue;
        };
        let ev = u64::from_str_radix(ev.trim(), 16).unwrap_or(0);
        // EV_KEY and EV_REP: a keyboard.
        if name.starts_with("input") && ev & (1 << 1) != 0 && ev & (1 << 20) != 0 {
            modaliases_up(&fs::canonicalize(e.path()).unwrap(), &mut q);
        }
    }
    (fstype, q)
}

/// The modules an image holds.
fn image_modules(image: &Path) -> BTreeSet<String> {
    let out = support::run_ok(support::composer().arg("inspect").arg(image));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("lib/modules/") && l.contains(".ko"))
        .map(support::module_name)
        .collect()
}

fn build(dir: &Path, kernel: &DebianKernel, profile: &str) -> PathBuf {
    let m = dir.join(format!("{profile}.toml"));
    fs::write(&m, format!("include = [\"{profile}\"]\n")).unwrap();
    let out = dir.join(format!("{profile}.img"));
    support::run_ok(
        support::build_for(&kernel.version, &kernel.modules_dir())
            .arg(&m)
            .arg("-o")
            .arg(&out),
    );
    out
}

#[test]
fn hostonly_takes_this_machines_root_stack_and_boots_a_guest_like_it() {
    let Some((_, kernel, busybox)) = support::require_boot_env() else {
        return;
    };
    if support::require_tool("modprobe", "kmod").is_none() {
        return;
    }
    let Some(depmod) = support::debian_kernel_depmod(&kernel) else {
        return;
    };
    let dir = Scratch::new("hostonly");
    let (fstype, queries) = queries();
    let mut expected = BTreeSet::new();
    for (q, from) in &queries {
        let mods = support::modprobe_inserts(&depmod, &kernel.version, q);
        eprintln!(
            "choice: {q} (from {from}) -> {}",
            if mods.is_empty() {
                "nothing (built in or no driver)".into()
            } else {
                mods.join(" ")
            }
        );
        expected.extend(mods);
    }
    let image = build(&dir, &kernel, "hostonly");
    let got = image_modules(&image);
    eprintln!(
        "hostonly image modules: {}",
        got.iter().cloned().collect::<Vec<_>>().join(" ")
    );
    let missing: Vec<_> = expected.difference(&got).collect();
    let extra: Vec<_> = got.difference(&expected).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "hostonly: missing {missing:?}, not asked for {extra:?}"
    );
    assert!(
        got.contains(&fstype),
        "hostonly: no module for the root's {fstype}"
    );
    // The init loads the root's modules first (`load = true` on the rootfs rule): the
    // list names the filesystem's module and only modules of the image.
    let order = support::modules_load(&image);
    eprintln!("hostonly modules-load: {order:?}");
    // In the order the boot needs them: the disk's drivers first, the
    // filesystem's module (the top layer of the stack) last.
    assert_eq!(
        order.last(),
        Some(&fstype),
        "hostonly: the load list does not end with the root's {fstype}: {order:?}"
    );
    let load: BTreeSet<String> = order.into_iter().collect();
    let strangers: Vec<_> = load.difference(&got).collect();
    assert!(
        strangers.is_empty(),
        "hostonly: the load list names modules the image lacks: {strangers:?}"
    );
    // The systemd image's cold plug by modalias (the build's drop-in beside the
    // profile's) is there unless the load list, with what modprobe loads beside
    // it, is every module of the image: then udev would find nothing to load.
    let paths = support::image_paths(&image);
    let has = |p: &str| paths.iter().any(|q| q.ends_with(p));
    if has("systemd-udev-trigger.service.d/composer.conf") {
        let inserted: BTreeSet<String> = load
            .iter()
            .flat_map(|m| support::modprobe_inserts(&depmod, &kernel.version, m))
            .collect();
        let all = inserted.is_superset(&got);
        eprintln!("hostonly: the load list loads every module of the image: {all}");
        assert_eq!(
            has("systemd-udev-trigger.service.d/modaliases.conf"),
            !all,
            "hostonly: the cold plug by modalias does not follow the load list (loads {inserted:?}, image {got:?})"
        );
    }
    // `composer why` gives each module's reason: the rule and the device or filesystem.
    let why = support::run_ok(
        support::composer()
            .arg("why")
            .arg(dir.join("hostonly.toml"))
            .args(["--kver", &kernel.version, "--kmoddir"])
            .arg(kernel.modules_dir()),
    );
    let why = String::from_utf8_lossy(&why.stdout);
    eprintln!("{why}");
    for m in &got {
        let line = why
            .lines()
            .find(|l| l.split_whitespace().nth(6) == Some(m.as_str()))
            .unwrap_or_else(|| panic!("`composer why` does not list {m}:\n{why}"));
        assert!(
            line.contains("[[module]] rootfs: ")
                && (line.contains("root filesystem") || line.contains("device /sys/")),
            "`composer why` gives {m} no root-stack reason: {line}"
        );
    }

    let generic = build(&dir, &kernel, "generic");
    let (h, g) = (
        fs::metadata(&image).unwrap().len(),
        fs::metadata(&generic).unwrap().len(),
    );
    eprintln!(
        "sizes: hostonly {h} bytes ({} modules), generic {g} bytes ({} modules)",
        got.len(),
        image_modules(&generic).len()
    );
    // Both carry the same init and its libraries (systemd's are most of the
    // hostonly image); the modules make the difference.
    eprintln!("generic / hostonly = {:.1}", g as f64 / h as f64);
    assert!(
        h * 2 < g,
        "hostonly ({h} bytes) is not much smaller than generic ({g} bytes)"
    );

    layer_parts_follow_the_machine(&image, &generic);

    // This machine's root is ext4 on virtio-blk: so is the guest's.
    if fstype != "ext4" || !got.contains("virtio_blk") {
        support::skip(&format!(
            "this machine's root is {fstype} without virtio_blk; the hostonly boot needs ext4 on virtio-blk"
        ));
        return;
    }
    let Some(roots) = crate::boot_root::roots(&busybox) else {
        return;
    };
    let root = &roots[0];
    let r = support::qemu_boot_with(
        &kernel,
        &image,
        &BootOptions {
            memory_mib: 1024,
            extra_append: format!("root={} rd.timeout=60", root.root_arg),
            extra_args: root.qemu.iter().map(Into::into).collect(),
            timeout: Duration::from_secs(300),
            ..BootOptions::default()
        },
    );
    eprintln!(
        "--- hostonly, {} ({:.1} s) ---\n{}",
        root.name,
        r.elapsed.as_secs_f64(),
        r.console
    );
    let want = format!("COMPOSER-ROOT-OK {} fs=ext4 pid=1", root.token);
    assert!(
        support::console_shows(&r.console, &want),
        "the hostonly image did not boot {}",
        root.name
    );
}

/// Whether the device `dev` (`major:minor`) is a plain block device: no
/// device-mapper or md device, nothing below it.
fn plain_device(dev: &str) -> bool {
    let d = Path::new("/sys/dev/block").join(dev);
    !d.join("dm").exists()
        && !d.join("md").exists()
        && fs::read_dir(d.join("slaves")).map_or(true, |r| r.count() == 0)
}

/// Whether this machine resumes from hibernation: a swap in use, `resume=` on its
/// command line, or a resume device set.
fn machine_resumes() -> bool {
    let swaps = fs::read_to_string("/proc/swaps").unwrap_or_default();
    let cmdline = fs::read_to_string("/proc/cmdline").unwrap_or_default();
    let resume = fs::read_to_string("/sys/power/resume").unwrap_or_default();
    swaps.lines().skip(1).any(|l| !l.trim().is_empty())
        || cmdline
            .split_whitespace()
            .any(|a| a.len() > "resume=".len() && a.starts_with("resume="))
        || !matches!(resume.trim(), "" | "0:0")
}

/// `[systemd.layers]`: on a plain root the hostonly systemd image leaves out the
/// units, generators and udev rules of LUKS, LVM, md and device-mapper (and of
/// hibernation, on a machine that cannot resume), which the generic image takes
/// where the root has them.
fn layer_parts_follow_the_machine(hostonly: &Path, generic: &Path) {
    let (dev, _) = root_mount();
    let entries =
        |image: &Path| -> BTreeSet<String> { support::image_paths(image).into_iter().collect() };
    let (h, g) = (entries(hostonly), entries(generic));
    if !h.contains("usr/lib/systemd/systemd") {
        support::skip("the hostonly image has no systemd: [systemd.layers] is not used");
        return;
    }
    let in_root = |dirs: &[&str], name: &str| dirs.iter().any(|d| Path::new(d).join(name).exists());
    let rules = ["/usr/lib/udev/rules.d", "/lib/udev/rules.d"];
    let generators = [
        "/usr/lib/systemd/system-generators",
        "/lib/systemd/system-generators",
    ];
    let storage = [
        (
            &rules[..],
            "69-lvm.rules",
            "usr/lib/udev/rules.d/69-lvm.rules",
        ),
        (
            &rules[..],
            "55-dm.rules",
            "usr/lib/udev/rules.d/55-dm.rules",
        ),
        (
            &rules[..],
            "64-md-raid-assembly.rules",
            "usr/lib/udev/rules.d/64-md-raid-assembly.rules",
        ),
        (
            &generators[..],
            "systemd-cryptsetup-generator",
            "usr/lib/systemd/system-generators/systemd-cryptsetup-generator",
        ),
    ];
    let mut checked = 0;
    for (dirs, name, inside) in storage {
        if !in_root(dirs, name) {
            continue;
        }
        checked += 1;
        assert!(g.contains(inside), "the generic image has no {inside}");
        if plain_device(&dev) {
            assert!(
                !h.contains(inside),
                "the hostonly image of a plain root ({dev}) has {inside}"
            );
        }
    }
    if support::strict() {
        assert!(
            checked > 0,
            "this machine has none of lvm2, mdadm, dmsetup, cryptsetup"
        );
    }
    let resume = "usr/lib/systemd/system-generators/systemd-hibernate-resume-generator";
    if in_root(&generators, "systemd-hibernate-resume-generator") {
        assert!(g.contains(resume), "the generic image has no {resume}");
        assert_eq!(
            h.contains(resume),
            machine_resumes(),
            "the hostonly image's resume generator against this machine's swap and resume="
        );
    }
}

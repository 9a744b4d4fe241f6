//! Images for another architecture: a Debian 13 arm64 root made on this x86-64 machine
//! without running any of its programs (mmdebstrap's extract variant unpacks the
//! packages and runs none of their scripts), with Debian's arm64 kernel package in it.
//! composer builds the generic image from it; independent tools read the result (GNU
//! cpio, pax-utils' lddtree for that architecture, kmod's modprobe on the arm64 tree),
//! and qemu-system-aarch64 boots it, from `-kernel` and as a UKI under AAVMF.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use crate::support::release::{self, Release};
use crate::support::{self, BootOptions, DebianKernel, Guest, Uefi};

/// The packages the root holds: what the generic image takes from a root (a shell
/// and the tools of the shell init, systemd and udev for the systemd init, kmod,
/// util-linux, e2fsprogs for the root's check, cryptsetup and systemd-cryptsetup with
/// its token plugins), the kernel and systemd's EFI stub.
const PACKAGES: &str = "busybox-static,libc6,libc-bin,dash,coreutils,findutils,grep,sed,mount,\
                        util-linux,systemd,udev,kmod,e2fsprogs,linux-image-arm64,\
                        systemd-boot-efi,cryptsetup,systemd-cryptsetup";

/// The ext4 root's UUID the arm64 guests boot by.
const ROOT_UUID: &str = "a64a64a6-4a64-4a64-8a64-a64a64a64a64";

/// The arm64 root and its kernel.
pub(crate) struct Arm64 {
    pub root: PathBuf,
    pub kernel: DebianKernel,
}

/// The arm64 root, made once into the test assets (about 480 MB, most of it the
/// kernel's modules).
pub(crate) fn arm64() -> Option<Arm64> {
    support::require_tool("mmdebstrap", "mmdebstrap")?;
    if !support::require_root() {
        return None;
    }
    // The platform's release, Debian 13, from this machine's apt source.
    let release = Release::Trixie;
    let name = format!(
        "debian-{}-arm64-root-{}-v5",
        release.suite(),
        release::month()
    );
    let root = support::cached_asset(&name, |tmp| {
        let list = PathBuf::from(format!("{}.sources", tmp.display()));
        fs::write(&list, release::sources(release)?).map_err(|e| e.to_string())?;
        let mut cmd = Command::new("mmdebstrap");
        cmd.args([
            "--quiet",
            "--variant=extract",
            "--arch=arm64",
            "--mode=root",
        ])
        .arg(format!("--include={PACKAGES}"))
        // /bin, /sbin and /lib as links into /usr, as every Debian 13 system has them
        // (the extract variant runs no package's script, and base-files makes none).
        .arg("--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr")
        .arg(release.suite())
        .arg(tmp)
        .arg(&list);
        let made = support::try_run(&mut cmd).map(|_| ());
        let _ = fs::remove_file(&list);
        made
    })?;
    let version = fs::read_dir(root.join("usr/lib/modules"))
        .ok()?
        .flatten()
        .find_map(|e| e.file_name().into_string().ok())?;
    let vmlinuz = root.join("boot").join(format!("vmlinuz-{version}"));
    assert!(vmlinuz.is_file(), "{} missing", vmlinuz.display());
    Some(Arm64 {
        kernel: DebianKernel {
            version,
            vmlinuz,
            root: root.clone(),
            userland: root.clone(),
        },
        root,
    })
}

/// `composer build` of `manifest` (text) from the arm64 root into `out`.
fn build(a: &Arm64, dir: &Path, name: &str, manifest: &str) -> PathBuf {
    let m = dir.join(format!("{name}.toml"));
    fs::write(&m, manifest).unwrap();
    let out = dir.join(format!("{name}.img"));
    let o = support::run_ok(
        support::composer()
            .arg("build")
            .arg(&m)
            .arg("--root")
            .arg(&a.root)
            .args(["--kver", &a.kernel.version, "--no-sync", "-t", "0", "-o"])
            .arg(&out),
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("built for aarch64, the root's architecture (this machine is x86_64)"),
        "{err}"
    );
    assert!(
        err.contains("left out for aarch64: profile generic, line ")
            && err.contains("[early] microcode (x86 CPUs only)")
            || !manifest.contains("generic"),
        "{err}"
    );
    out
}

/// The generic image of the arm64 root with `init`, built once per test run.
fn generic(a: &Arm64, init: &str) -> PathBuf {
    static BUILT: Mutex<BTreeMap<String, PathBuf>> = Mutex::new(BTreeMap::new());
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = built.get(init) {
        return p.clone();
    }
    let dir = support::scratch(&format!("arm64-generic-{init}"));
    let img = build(
        a,
        &dir,
        init,
        &format!("include = [\"generic\"]\ninit = \"{init}\"\n"),
    );
    built.insert(init.to_string(), img.clone());
    img
}

/// The image's entries, read segment by segment by this crate's own newc reader: an
/// uncompressed archive as it is (the generic image's first segment holds the modules
/// Debian 13 ships compressed), the zstd-compressed rest after `zstd -dc`.
fn entries(image: &Path) -> Vec<support::NewcEntry> {
    let raw = fs::read(image).unwrap();
    let mut out = Vec::new();
    let mut at = 0;
    while at < raw.len() {
        let rest = &raw[at..];
        if rest.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
            let mut zstd = Command::new("zstd")
                .args(["-dc", "-q"])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap();
            let mut stdin = zstd.stdin.take().unwrap();
            let data = rest.to_vec();
            let feed = std::thread::spawn(move || std::io::Write::write_all(&mut stdin, &data));
            let o = zstd.wait_with_output().unwrap();
            feed.join().unwrap().unwrap();
            assert!(o.status.success(), "zstd -dc of {}", image.display());
            out.extend(support::parse_newc(&o.stdout).unwrap());
            break;
        }
        assert!(
            rest.starts_with(b"070701"),
            "{}: no archive at {at}",
            image.display()
        );
        out.extend(support::parse_newc(rest).unwrap());
        // Past this archive's trailer (its name padded to 4 bytes) and the zeros after.
        let trailer = rest
            .windows(11)
            .position(|w| w == b"TRAILER!!!\0")
            .expect("a trailer");
        at += (trailer + 11).next_multiple_of(4);
        while at < raw.len() && raw[at] == 0 {
            at += 1;
        }
    }
    out
}

/// The soname of a library's file name: `libkmod.so.2` for `.../libkmod.so.2.5.1`.
fn soname(path: &str) -> String {
    let file = path.rsplit('/').next().unwrap_or(path);
    match file.find(".so.") {
        Some(i) => {
            let major = file[i + 4..].split('.').next().unwrap_or("");
            format!("{}.so.{major}", &file[..i])
        }
        None => file.to_string(),
    }
}

/// Whether `hay` holds `needle`.
fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// Whether an image path is a kernel module (`.ko`, or compressed: `.ko.xz`).
fn is_module(name: &str) -> bool {
    name.ends_with(".ko") || name.contains(".ko.")
}

/// The ELF machine of an entry's data, if it is an ELF file.
fn machine(data: &[u8]) -> Option<u16> {
    (data.len() >= 20 && data.starts_with(b"\x7fELF"))
        .then(|| u16::from_le_bytes([data[18], data[19]]))
}

/// `/usr/lib/x` and `/lib/x` are one file in a merged image: the path without /usr.
fn merged(p: &str) -> String {
    let p = format!("/{}", p.trim_start_matches('/'));
    p.strip_prefix("/usr").map(str::to_string).unwrap_or(p)
}

/// The file the root holds at image path `p` (the image is merged, the root not).
fn in_root(root: &Path, p: &str) -> Option<String> {
    let p = format!("/{}", p.trim_start_matches('/'));
    let twin = match p.strip_prefix("/usr") {
        Some(rest) => rest.to_string(),
        None => format!("/usr{p}"),
    };
    [Some(p), Some(twin)]
        .into_iter()
        .flatten()
        .find(|c| root.join(c.trim_start_matches('/')).exists())
}

/// The real file behind a path lddtree printed (under `root`), merged.
fn real_in_root(root: &Path, host: &str) -> String {
    let real = fs::canonicalize(host).unwrap_or_else(|e| panic!("{host}: {e}"));
    let root = fs::canonicalize(root).unwrap();
    merged(&real.strip_prefix(&root).unwrap().to_string_lossy())
}

/// The libraries (real files, merged paths) pax-utils' lddtree says the arm64 loader
/// loads for `objects` (paths inside the root), read from the files alone.
fn lddtree(root: &Path, objects: &[String]) -> BTreeSet<String> {
    let out = support::run_ok(
        Command::new("/usr/bin/python3")
            .arg("/usr/bin/lddtree")
            .arg("-R")
            .arg(root)
            .arg("-l")
            .args(objects),
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| real_in_root(root, l.trim()))
        .collect()
}

/// Every ELF file of the generic images (both inits) is an aarch64 one, and the
/// libraries are exactly those the arm64 loader loads for the image's programs (the
/// shell init's image), or those plus what the systemd init's profile names itself
/// (libcryptsetup's TPM2 token plugin and what it loads).
#[test]
fn an_arm64_image_holds_aarch64_programs_with_the_libraries_the_loader_loads() {
    let Some(a) = arm64() else { return };
    if support::require_tool("zstd", "zstd").is_none() {
        return;
    }
    // Debian's lddtree is Python with pyelftools; the system's Python runs it.
    let lddtree_runs = Command::new("/usr/bin/python3")
        .args(["/usr/bin/lddtree", "--help"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !lddtree_runs {
        if support::strict() {
            panic!("lddtree does not run (Debian packages pax-utils, python3-pyelftools)");
        }
        support::skip("lddtree does not run (Debian packages pax-utils, python3-pyelftools)");
        return;
    }
    for init in ["shell", "systemd"] {
        let image = generic(&a, init);
        let all = entries(&image);
        let elves: Vec<&support::NewcEntry> = all
            .iter()
            .filter(|e| e.mode & 0o170000 == 0o100000 && machine(&e.data).is_some())
            .collect();
        let wrong: Vec<String> = elves
            .iter()
            .filter(|e| machine(&e.data) != Some(183) || e.data[4] != 2)
            .map(|e| e.name_str())
            .collect();
        assert!(wrong.is_empty(), "{init}: not ELF64 AArch64: {wrong:?}");
        let modules = all.iter().filter(|e| is_module(&e.name_str())).count();
        let (libs, programs): (Vec<&&support::NewcEntry>, Vec<&&support::NewcEntry>) = elves
            .iter()
            .filter(|e| !is_module(&e.name_str()))
            .partition(|e| e.name_str().contains(".so"));
        assert!(
            modules > 300 && programs.len() > 15,
            "{init}: {modules} modules, {} programs",
            programs.len()
        );
        let programs: Vec<String> = programs
            .iter()
            .map(|e| {
                in_root(&a.root, &e.name_str())
                    .unwrap_or_else(|| panic!("{init}: {} is not in the root", e.name_str()))
            })
            .collect();
        let ours: BTreeSet<String> = libs.iter().map(|e| merged(&e.name_str())).collect();
        let theirs = lddtree(&a.root, &programs);
        let programs_real: BTreeSet<String> = programs
            .iter()
            .map(|q| {
                real_in_root(
                    &a.root,
                    &a.root.join(q.trim_start_matches('/')).to_string_lossy(),
                )
            })
            .collect();
        let theirs_libs: BTreeSet<String> = theirs.difference(&programs_real).cloned().collect();
        let missing: Vec<&String> = theirs_libs.difference(&ours).collect();
        assert!(
            missing.is_empty(),
            "{init}: the loader loads these, the image lacks them: {missing:?}"
        );
        let extra: Vec<String> = ours.difference(&theirs_libs).cloned().collect();
        if init == "shell" {
            assert!(
                extra.is_empty(),
                "shell: libraries no program loads: {extra:?}"
            );
        } else {
            // What the profile names itself, and what those load, per lddtree.
            let named: Vec<String> = extra
                .iter()
                .filter(|p| p.contains("/cryptsetup/"))
                .map(|p| in_root(&a.root, p).unwrap())
                .collect();
            assert!(
                !named.is_empty(),
                "systemd: no TPM2 token plugin: {extra:?}"
            );
            let loaded = lddtree(&a.root, &named);
            // And what the image's programs name in their `.note.dlopen` (a JSON list
            // of sonames: systemd 256 and later dlopen libkmod, libcryptsetup...).
            let noted = |p: &str| {
                let soname = soname(p);
                elves.iter().any(|e| {
                    let d = &e.data;
                    contains(d, b"\"soname\":[") && contains(d, format!("\"{soname}\"").as_bytes())
                })
            };
            let unexplained: Vec<&String> = extra
                .iter()
                .filter(|p| !loaded.contains(*p) && !noted(p))
                .collect();
            assert!(
                unexplained.is_empty(),
                "systemd: libraries nothing loads: {unexplained:?}"
            );
        }
        eprintln!(
            "{init}: {} programs, {} libraries, {modules} modules, all aarch64",
            programs.len(),
            ours.len()
        );
    }
}

/// The modules of a request are what kmod's `modprobe --show-depends` inserts for it
/// on the arm64 tree (after the host's depmod reads the arm64 modules: the package
/// ships no modules.dep, and extracting it ran no postinst), and the generic image
/// holds every module modprobe inserts for any of its own.
#[test]
fn an_arm64_images_modules_are_what_modprobe_inserts() {
    let Some(a) = arm64() else { return };
    let name = format!(
        "depmod-{}-{}",
        a.root.file_name().unwrap().to_string_lossy(),
        a.kernel.version
    );
    let Some(depmod) = support::depmod_tree(&a.kernel, &name) else {
        return;
    };
    let names = [
        "virtio_blk",
        "virtio_mmio",
        "ext4",
        "ahci_platform",
        "nvme",
        "sdhci_of_arasan",
        "xhci_plat_hcd",
        "usb_storage",
    ];
    let dir = support::scratch("cross-arch-modules");
    let image = build(
        &a,
        &dir,
        "mods",
        &format!(
            "modules = [{}]\n",
            names.map(|n| format!("\"{n}\"")).join(", ")
        ),
    );
    let ours: BTreeSet<String> = entries(&image)
        .iter()
        .map(|e| e.name_str())
        .filter(|n| is_module(n))
        .map(|n| support::module_name(&n))
        .collect();
    let theirs: BTreeSet<String> = names
        .iter()
        .flat_map(|n| support::modprobe_inserts(&depmod, &a.kernel.version, n))
        .collect();
    assert!(theirs.len() > names.len(), "{theirs:?}");
    assert_eq!(ours, theirs);

    // The generic image's modules are closed under what modprobe inserts for each.
    let generic: BTreeSet<String> = entries(&generic(&a, "shell"))
        .iter()
        .map(|e| e.name_str())
        .filter(|n| is_module(n))
        .map(|n| support::module_name(&n))
        .collect();
    let out = support::run_ok(
        Command::new("modprobe")
            .arg("-d")
            .arg(&depmod)
            .args(["-S", &a.kernel.version, "-a", "--show-depends"])
            .args(&generic),
    );
    let needed: BTreeSet<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("insmod "))
        .filter_map(|p| p.split_whitespace().next())
        .map(support::module_name)
        .collect();
    let missing: Vec<&String> = needed.difference(&generic).collect();
    assert!(
        needed.len() >= generic.len() && missing.is_empty(),
        "modprobe inserts modules the generic image lacks: {missing:?}"
    );
}

/// No program of the root runs: the build execs nothing (strace sees one execve, the
/// build's own), and a build with binfmt_misc unmounted (no way to run an arm64
/// program on this machine even if one tried) writes the same bytes as one with it
/// mounted.
#[test]
fn an_arm64_build_runs_none_of_the_roots_programs() {
    let Some(a) = arm64() else { return };
    let Some(strace) = support::require_tool("strace", "strace") else {
        return;
    };
    let Some(unshare) = support::require_tool("unshare", "util-linux") else {
        return;
    };
    let dir = support::scratch("cross-arch-binfmt");
    let m = dir.join("m.toml");
    fs::write(&m, "include = [\"generic\"]\ninit = \"systemd\"\n").unwrap();
    let composer = support::composer_bin();
    let args = |out: &Path| -> Vec<String> {
        vec![
            composer.display().to_string(),
            "build".into(),
            m.display().to_string(),
            "--root".into(),
            a.root.display().to_string(),
            "--kver".into(),
            a.kernel.version.clone(),
            "--no-sync".into(),
            "-q".into(),
            "-t".into(),
            "0".into(),
            "-o".into(),
            out.display().to_string(),
        ]
    };
    let binfmt = "/proc/sys/fs/binfmt_misc";
    // With binfmt_misc mounted (in a mount namespace of its own), and the build traced.
    let with = dir.join("with.img");
    let trace = dir.join("trace");
    let script = format!(
        "mountpoint -q {binfmt} || mount -t binfmt_misc binfmt_misc {binfmt} || exit 3\n\
         test -e {binfmt}/status || exit 4\n\
         exec \"$@\""
    );
    let o = support::run(
        Command::new(&unshare)
            .args([
                "--mount",
                "--propagation",
                "private",
                "sh",
                "-c",
                &script,
                "sh",
            ])
            .arg(&strace)
            .args(["-f", "-qq", "-e", "trace=execve,execveat", "-o"])
            .arg(&trace)
            .args(args(&with)),
    );
    assert!(o.status.success(), "{o:?}");
    let execs: Vec<String> = fs::read_to_string(&trace)
        .unwrap()
        .lines()
        .filter(|l| l.contains("execve"))
        .map(str::to_string)
        .collect();
    assert_eq!(execs.len(), 1, "the build ran programs: {execs:#?}");
    assert!(execs[0].contains(&*composer.to_string_lossy()), "{execs:?}");
    // Without it.
    let without = dir.join("without.img");
    let script = format!(
        "if mountpoint -q {binfmt}; then umount {binfmt} || exit 3; fi\n\
         test ! -e {binfmt}/status || exit 4\n\
         exec \"$@\""
    );
    let o = support::run(
        Command::new(&unshare)
            .args([
                "--mount",
                "--propagation",
                "private",
                "sh",
                "-c",
                &script,
                "sh",
            ])
            .args(args(&without)),
    );
    assert!(o.status.success(), "{o:?}");
    assert!(
        fs::read(&with).unwrap() == fs::read(&without).unwrap(),
        "the image differs with binfmt_misc mounted and without"
    );
}

/// `inspect` names the image's architecture; `check-boot` on this x86-64 machine refuses
/// to judge an arm64 image and says why (exit 2); a library of the wrong machine is
/// refused by name; a UKI's stub, kernel and image must agree on the machine.
#[test]
fn an_arm64_image_is_named_so_and_not_judged_against_this_machine() {
    let Some(a) = arm64() else { return };
    let image = generic(&a, "shell");
    let o = support::run_ok(support::composer().args(["inspect", "--arch"]).arg(&image));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.starts_with("aarch64 (")
            && text.ends_with(" modules)\n")
            && text.matches(" (").count() == 1,
        "{text}"
    );
    let o = support::run_ok(support::composer().args(["inspect", "--json"]).arg(&image));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["architecture"], "aarch64");
    assert_eq!(
        doc["architectures"].as_array().unwrap().len(),
        1,
        "{}",
        doc["architectures"]
    );

    let o = support::run(support::composer().arg("check-boot").arg(&image));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("the image is for aarch64 and this machine is x86_64"),
        "{err}"
    );

    // A root whose C library is x86-64's where the arm64 loader looks for it.
    let dir = support::scratch("cross-arch-wrong-machine");
    let r = dir.join("root");
    for d in ["usr/lib/aarch64-linux-gnu", "usr/bin"] {
        fs::create_dir_all(r.join(d)).unwrap();
    }
    std::os::unix::fs::symlink("usr/lib", r.join("lib")).unwrap();
    fs::copy(a.root.join("bin/cat"), r.join("usr/bin/cat")).unwrap();
    fs::copy(
        a.root.join("lib/ld-linux-aarch64.so.1"),
        r.join("usr/lib/ld-linux-aarch64.so.1"),
    )
    .unwrap();
    let x86_libc = [
        "/usr/lib/x86_64-linux-gnu/libc.so.6",
        "/lib/x86_64-linux-gnu/libc.so.6",
    ]
    .into_iter()
    .find(|p| Path::new(p).exists())
    .expect("this machine's libc.so.6");
    fs::copy(x86_libc, r.join("usr/lib/aarch64-linux-gnu/libc.so.6")).unwrap();
    let m = dir.join("m.toml");
    fs::write(&m, "binaries = [\"/usr/bin/cat\"]\n").unwrap();
    let out = dir.join("out.img");
    let o = support::run(
        support::composer()
            .arg("build")
            .arg(&m)
            .arg("--root")
            .arg(&r)
            .arg("-o")
            .arg(&out),
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("m.toml:1:13: /usr/bin/cat: library libc.so.6 not found (skipped, not ELF64 LSB AArch64: ")
            && err.contains("libc.so.6 (ELF64 LSB x86-64)"),
        "{err}"
    );
    assert!(!out.exists());

    // The stub of another architecture, and a kernel of another than the image's.
    let efi = dir.join("a.efi");
    let uki = |stub: &Path, kernel: &Path| {
        support::run(
            support::composer()
                .arg("build")
                .arg(dir.join("u.toml"))
                .arg("--root")
                .arg(&a.root)
                .args([
                    "--kver",
                    &a.kernel.version,
                    "--no-sync",
                    "--uki",
                    "--cmdline",
                    "root=/dev/vda",
                    "--stub",
                ])
                .arg(stub)
                .arg("--kernel")
                .arg(kernel)
                .arg("-o")
                .arg(&efi),
        )
    };
    fs::write(dir.join("u.toml"), "binaries = [\"/bin/busybox\"]\n").unwrap();
    let x64_stub = Path::new("/usr/lib/systemd/boot/efi/linuxx64.efi.stub");
    let aa64_stub = a.root.join("usr/lib/systemd/boot/efi/linuxaa64.efi.stub");
    if x64_stub.exists() {
        let o = uki(x64_stub, &a.kernel.vmlinuz);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(
            err.contains("is for x86_64 and the kernel") && err.contains("for aarch64"),
            "{err}"
        );
        assert!(err.contains("linuxaa64.efi.stub"), "{err}");
        assert!(!efi.exists());
    }
    if let Some(k) = support::debian_kernel() {
        let o = uki(&aa64_stub, &k.vmlinuz);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(err.contains("is for aarch64 and the kernel"), "{err}");
        assert!(!efi.exists());
    }
}

/// The arm64 root's ext4 disk: busybox's marker init (the root's own arm64 busybox)
/// and a token only this disk holds, by UUID; made once, beside its token.
fn root_disk(a: &Arm64) -> Option<(PathBuf, String)> {
    support::require_tool("mke2fs", "e2fsprogs")?;
    let dir = support::cached_asset("arm64-ext4-root-v1", |tmp| {
        fs::create_dir_all(tmp).map_err(|e| e.to_string())?;
        let token = crate::boot_root::token("arm64-ext4");
        let staging = crate::boot_root::staging(tmp, &a.root.join("bin/busybox"), &token);
        support::try_run(
            Command::new("mke2fs")
                .args(["-q", "-F", "-t", "ext4", "-U", ROOT_UUID, "-d"])
                .arg(&staging)
                .arg(tmp.join("disk.img"))
                .arg("64M"),
        )?;
        fs::remove_dir_all(&staging).map_err(|e| e.to_string())?;
        fs::write(tmp.join("token"), &token).map_err(|e| e.to_string())
    })?;
    let token = fs::read_to_string(dir.join("token")).unwrap();
    Some((dir.join("disk.img"), token))
}

fn arm64_guest(extra_append: &str, disk: &Path) -> BootOptions {
    BootOptions {
        memory_mib: 1024,
        extra_append: extra_append.to_string(),
        extra_args: vec![
            "-drive".into(),
            format!("file={},format=raw,if=virtio,snapshot=on", disk.display()).into(),
        ],
        timeout: Duration::from_secs(300),
        guest: Guest::Arm64Virt,
        ..BootOptions::default()
    }
}

/// qemu-system-aarch64 (TCG, `-M virt`) boots Debian's arm64 kernel with the generic
/// image to the ext4 root by UUID=, with either init; a UUID that is not there ends
/// in either init's emergency shell, naming it.
#[test]
fn an_arm64_image_boots_its_root_in_qemu_aarch64() {
    let Some(a) = arm64() else { return };
    support::require_tool("qemu-system-aarch64", "qemu-system-arm");
    let Some((disk, token)) = root_disk(&a) else {
        return;
    };
    let marker = format!("COMPOSER-ROOT-OK {token} fs=ext4 pid=1");
    let shell = generic(&a, "shell");
    let systemd = generic(&a, "systemd");
    let wrong = "00000000-dead-beef-0000-0000000a64a6";
    let gone = |append: &str, marker: &str| {
        let mut o = arm64_guest(&format!("root=UUID={wrong} {append}"), &disk);
        o.type_when = Some((marker.into(), "echo SHELL-ALIVE-$((6*7))\n".into()));
        o.stop_when = Some("SHELL-ALIVE-42".into());
        o
    };
    let found = || arm64_guest(&format!("root=UUID={ROOT_UUID}"), &disk);
    let cases = [
        ("shell", &shell, found()),
        ("systemd", &systemd, found()),
        (
            "shell, wrong UUID",
            &shell,
            gone("rd.timeout=5 rd.shell", "starting an emergency shell"),
        ),
        (
            "systemd, wrong UUID",
            &systemd,
            gone("rd.timeout=20", "composer: emergency mode"),
        ),
    ];
    let results: Vec<(String, support::BootResult)> = std::thread::scope(|s| {
        let handles: Vec<_> = cases
            .iter()
            .map(|(what, image, opts)| {
                let kernel = &a.kernel;
                s.spawn(move || {
                    let r = support::qemu_boot_with(kernel, image, opts);
                    eprintln!(
                        "--- arm64 {what} ({:.1} s) ---\n{}",
                        r.elapsed.as_secs_f64(),
                        r.console
                    );
                    (what.to_string(), r)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (what, r) in &results[..2] {
        r.reported(&marker, "composer-init: panic")
            .unwrap_or_else(|e| panic!("arm64 {what}: {e}"));
    }
    for (what, r) in &results[2..] {
        assert!(!r.timed_out, "arm64 {what}: no emergency shell");
        assert!(
            r.console.contains(&format!("looked for root=UUID={wrong}")),
            "arm64 {what}: the message does not name the UUID"
        );
        assert!(
            r.console.contains("SHELL-ALIVE-42"),
            "arm64 {what}: the shell did not answer"
        );
        assert!(!r.console.contains(&token), "arm64 {what}");
    }
}

/// An arm64 UKI (the root's linuxaa64.efi.stub, Debian's arm64 kernel, the generic
/// image) started by AAVMF from an ESP reaches the same root.
#[test]
fn an_arm64_uki_boots_under_aavmf() {
    let Some(a) = arm64() else { return };
    support::require_tool("qemu-system-aarch64", "qemu-system-arm");
    for (tool, pkg) in [
        ("mkfs.vfat", "dosfstools"),
        ("mcopy", "mtools"),
        ("mmd", "mtools"),
    ] {
        if support::require_tool(tool, pkg).is_none() {
            return;
        }
    }
    let aavmf = Path::new("/usr/share/AAVMF");
    if !aavmf.join("AAVMF_CODE.fd").exists() {
        if support::strict() {
            panic!("AAVMF not found (Debian package qemu-efi-aarch64)");
        }
        support::skip("AAVMF not found (Debian package qemu-efi-aarch64)");
        return;
    }
    let Some((disk, token)) = root_disk(&a) else {
        return;
    };
    let dir = support::scratch("cross-arch-uki");
    let m = dir.join("uki.toml");
    fs::write(&m, "include = [\"generic\"]\ninit = \"shell\"\n").unwrap();
    let efi = dir.join("arm64.efi");
    support::run_ok(
        support::composer()
            .arg("build")
            .arg(&m)
            .arg("--root")
            .arg(&a.root)
            .args([
                "--kver",
                &a.kernel.version,
                "--no-sync",
                "-q",
                "--uki",
                "--cmdline",
            ])
            .arg(format!(
                "console=ttyAMA0 root=UUID={ROOT_UUID} panic=-1 quiet"
            ))
            .arg("-o")
            .arg(&efi),
    );
    // The stub's PE machine: arm64.
    let pe = fs::read(&efi).unwrap();
    let at = u32::from_le_bytes(pe[0x3c..0x40].try_into().unwrap()) as usize;
    assert_eq!(&pe[at..at + 4], b"PE\0\0");
    assert_eq!(u16::from_le_bytes([pe[at + 4], pe[at + 5]]), 0xaa64);

    let esp = dir.join("esp.img");
    fs::File::create(&esp).unwrap().set_len(96 << 20).unwrap();
    support::run_ok(Command::new("mkfs.vfat").arg(&esp).stdout(Stdio::null()));
    let i = esp.display().to_string();
    support::run_ok(Command::new("mmd").args(["-i", &i, "::/EFI", "::/EFI/BOOT"]));
    support::run_ok(
        Command::new("mcopy")
            .args(["-i", &i])
            .arg(&efi)
            .arg("::/EFI/BOOT/BOOTAA64.EFI"),
    );
    let vars = dir.join("vars.fd");
    fs::copy(aavmf.join("AAVMF_VARS.fd"), &vars).unwrap();
    let mut opts = arm64_guest("", &disk);
    opts.uefi = Some(Uefi {
        code: aavmf.join("AAVMF_CODE.fd"),
        vars,
        secure: false,
    });
    let r = support::qemu_boot_with(&a.kernel, &esp, &opts);
    eprintln!(
        "--- arm64 UKI ({:.1} s) ---\n{}",
        r.elapsed.as_secs_f64(),
        r.console
    );
    r.reported(
        &format!("COMPOSER-ROOT-OK {token} fs=ext4 pid=1"),
        "composer-init: panic",
    )
    .unwrap();
}

//! Module rules in manifests: errors at the rule's file:line:column,
//! compressed modules (read in process, kept compressed in the image),
//! firmware lookup with include/exclude patterns and warnings.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Command;

use composer::resolve::kmod::ModuleTree;
use composer::resolve::kmod::Step;
use composer::resolve::root::Root;

/// A root holding a few of Debian's modules (compressed as asked) with the
/// package's builtin lists and order.
fn small_tree(kernel: &support::DebianKernel, into: &Path, modules: &[(&str, &str)]) -> PathBuf {
    let src = kernel.modules_dir();
    let dst = into.join("lib/modules").join(&kernel.version);
    std::fs::create_dir_all(&dst).unwrap();
    for f in [
        "modules.order",
        "modules.builtin",
        "modules.builtin.modinfo",
    ] {
        std::fs::copy(src.join(f), dst.join(f)).unwrap();
    }
    for (rel, how) in modules {
        let to = dst.join(rel);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(src.join(rel), &to).unwrap();
        match *how {
            "" => {}
            "xz" => {
                support::run_ok(Command::new("xz").args(["-q", "--check=crc32"]).arg(&to));
            }
            "zst" => {
                support::run_ok(Command::new("zstd").args(["-q", "--rm"]).arg(&to));
            }
            "gz" => {
                support::run_ok(Command::new("gzip").arg("-n").arg(&to));
            }
            other => panic!("{other}"),
        }
    }
    into.to_path_buf()
}

const EXT4: [&str; 7] = [
    "kernel/fs/ext4/ext4.ko",
    "kernel/fs/jbd2/jbd2.ko",
    "kernel/fs/mbcache.ko",
    "kernel/lib/crc16.ko",
    "kernel/crypto/crc32c_generic.ko",
    "kernel/arch/x86/crypto/crc32c-intel.ko",
    "kernel/drivers/block/loop.ko",
];

#[test]
fn compressed_modules_resolve_like_modprobe_and_stay_compressed() {
    for (tool, pkg) in [
        ("xz", "xz-utils"),
        ("zstd", "zstd"),
        ("gzip", "gzip"),
        ("depmod", "kmod"),
        ("modprobe", "kmod"),
    ] {
        if support::require_tool(tool, pkg).is_none() {
            return;
        }
    }
    let Some(kernel) = support::debian_kernel() else {
        return;
    };
    let dir = support::Scratch::new("kmod-compressed");
    // kmod here reads xz and zstd (not gzip): the oracle tree uses those two.
    let hows = ["xz", "zst", "xz", "zst", "xz", "zst", "xz"];
    let spec: Vec<(&str, &str)> = EXT4.iter().copied().zip(hows).collect();
    let root = small_tree(&kernel, &dir.join("root"), &spec);
    let tree = ModuleTree::open(&Root::new(&root), &kernel.version).unwrap();
    let ours: Vec<String> = tree
        .show_depends("ext4", false)
        .unwrap()
        .into_iter()
        .map(|p| match p.step {
            Step::Insmod { relpath, .. } => relpath,
            s => format!("{s:?}"),
        })
        .collect();
    // depmod + modprobe on a copy of the same compressed tree.
    let oracle = dir.join("oracle");
    support::run_ok(Command::new("cp").arg("-a").arg(&root).arg(&oracle));
    support::run_ok(
        Command::new("depmod")
            .arg("-b")
            .arg(&oracle)
            .arg(&kernel.version),
    );
    let conf = dir.join("conf");
    std::fs::create_dir_all(&conf).unwrap();
    let out = support::run_ok(
        Command::new("modprobe")
            .arg("-C")
            .arg(&conf)
            .arg("-d")
            .arg(&oracle)
            .args(["-S", &kernel.version, "--show-depends", "ext4"]),
    );
    let marker = format!("/lib/modules/{}/", kernel.version);
    let theirs: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            l.trim_end()
                .rsplit(marker.as_str())
                .next()
                .unwrap_or(l)
                .to_string()
        })
        .collect();
    assert_eq!(ours, theirs);
    assert!(
        ours.iter().any(|p| p.ends_with(".ko.xz")) && ours.iter().any(|p| p.ends_with(".ko.zst"))
    );

    // gzip too: the same answer as the uncompressed modules give.
    let plain = small_tree(&kernel, &dir.join("plain"), &EXT4.map(|m| (m, "")));
    let gz = small_tree(&kernel, &dir.join("gz"), &EXT4.map(|m| (m, "gz")));
    let names = |root: &Path| -> Vec<String> {
        let t = ModuleTree::open(&Root::new(root), &kernel.version).unwrap();
        t.show_depends("ext4", false)
            .unwrap()
            .iter()
            .map(|p| p.step.name().to_string())
            .collect()
    };
    assert_eq!(names(&gz), names(&plain));

    // In an image the files keep their compression.
    let manifest = dir.join("m.toml");
    std::fs::write(
        &manifest,
        format!("root = \"{}\"\nmodules = [\"ext4\"]\n", root.display()),
    )
    .unwrap();
    let out = support::run_ok(
        support::composer()
            .arg("export-list")
            .arg(&manifest)
            .args(["--kver", &kernel.version]),
    );
    let list = String::from_utf8_lossy(&out.stdout);
    assert!(list.contains("kernel/fs/ext4/ext4.ko.xz "), "{list}");
    assert!(list.contains("kernel/fs/jbd2/jbd2.ko.zst "), "{list}");
    assert!(
        !list.contains("loop.ko"),
        "loop is not needed by ext4:\n{list}"
    );
}

fn composer_fails(manifest: &Path, kver: &str) -> String {
    let out = support::run(
        support::composer()
            .arg("check")
            .arg(manifest)
            .args(["--kver", kver]),
    );
    assert!(!out.status.success(), "composer check should fail");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn errors_name_the_rule() {
    let Some(kernel) = support::debian_kernel() else {
        return;
    };
    let dir = support::Scratch::new("kmod-errors");
    let root = small_tree(&kernel, &dir.join("root"), &EXT4.map(|m| (m, "")));
    let m = dir.join("bad.toml");
    std::fs::write(
        &m,
        format!(
            "root = \"{}\"\nmodules = [\"loop\", \"ext5\"]\n",
            root.display()
        ),
    )
    .unwrap();
    let err = composer_fails(&m, &kernel.version);
    assert!(err.contains("bad.toml:2:20"), "{err}");
    assert!(
        err.contains("`ext5`") && err.contains("did you mean `ext4`"),
        "{err}"
    );

    std::fs::write(
        &m,
        format!(
            "root = \"{}\"\n\n[[module]]\npatterns = [\n  \"kernel/fs/**\",\n  \"kernel/drivers/nvme/**\",\n]\n",
            root.display()
        ),
    )
    .unwrap();
    let err = composer_fails(&m, &kernel.version);
    assert!(
        err.contains("bad.toml:6:3") && err.contains("matches no module"),
        "{err}"
    );

    let err = composer_fails(&m, "0.0.0-no-such-kernel");
    assert!(
        err.contains("bad.toml:6:3") || err.contains("bad.toml:5:3"),
        "{err}"
    );
    assert!(
        err.contains("no module directory for kernel 0.0.0-no-such-kernel"),
        "{err}"
    );

    // optional: a missing name is skipped.
    std::fs::write(
        &m,
        format!(
            "root = \"{}\"\n[[module]]\nnames = [\"ext5\", \"loop\"]\noptional = true\n",
            root.display()
        ),
    )
    .unwrap();
    support::run_ok(
        support::composer()
            .arg("check")
            .arg(&m)
            .args(["--kver", &kernel.version]),
    );
}

/// [`small_tree`] of iwlwifi and what it needs (a module that asks for firmware).
fn iwlwifi_tree(kernel: &support::DebianKernel, into: &Path) -> PathBuf {
    small_tree(
        kernel,
        into,
        &[
            ("kernel/drivers/net/wireless/intel/iwlwifi/iwlwifi.ko", ""),
            ("kernel/net/wireless/cfg80211.ko", ""),
            ("kernel/net/rfkill/rfkill.ko", ""),
        ],
    )
}

/// Firmware the root ships compressed goes into the image as the kernel's loader reads
/// it: a `.zst` file stays compressed for a kernel built with
/// CONFIG_FW_LOADER_COMPRESS_ZSTD (Debian 13's), and is decompressed under its plain
/// name for one without it (Debian 12's, whose loader reads xz only); an `.xz` file
/// stays as it is for both. The configuration is the root's /boot/config-<kver>.
#[test]
fn compressed_firmware_is_stored_in_a_form_the_kernels_loader_reads() {
    let Some(kernel) = support::debian_kernel() else {
        return;
    };
    if support::require_tool("zstd", "zstd").is_none()
        || support::require_tool("xz", "xz-utils").is_none()
    {
        return;
    }
    let dir = support::Scratch::new("kmod-firmware-compressed");
    let root = iwlwifi_tree(&kernel, &dir.join("root"));
    let fw = root.join("lib/firmware");
    std::fs::create_dir_all(&fw).unwrap();
    let zst_data: Vec<u8> = (0..20_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let xz_data: Vec<u8> = (0..9_000u32).map(|i| (i * 13 % 241) as u8).collect();
    std::fs::write(fw.join("iwlwifi-1000-5.ucode"), &zst_data).unwrap();
    support::run_ok(
        Command::new("zstd")
            .args(["-q", "--rm"])
            .arg(fw.join("iwlwifi-1000-5.ucode")),
    );
    std::fs::write(fw.join("iwlwifi-100-5.ucode"), &xz_data).unwrap();
    support::run_ok(
        Command::new("xz")
            .args(["-q", "--check=crc32"])
            .arg(fw.join("iwlwifi-100-5.ucode")),
    );
    let m = dir.join("fw.toml");
    std::fs::write(
        &m,
        format!("root = \"{}\"\nmodules = [\"iwlwifi\"]\n", root.display()),
    )
    .unwrap();
    std::fs::create_dir_all(root.join("boot")).unwrap();
    let config = root.join("boot").join(format!("config-{}", kernel.version));
    // An image path, whether or not /usr is merged in the image.
    let has = |paths: &[String], p: &str| paths.iter().any(|x| x == p || *x == format!("usr/{p}"));
    let build = |name: &str| {
        let out = dir.join(name);
        support::run_ok(
            support::composer()
                .args(["build", "--no-sync", "--kver", &kernel.version])
                .arg(&m)
                .arg("-o")
                .arg(&out),
        );
        out
    };

    // Debian 12's loader: xz only.
    std::fs::write(
        &config,
        "CONFIG_FW_LOADER_COMPRESS=y\nCONFIG_FW_LOADER_COMPRESS_XZ=y\n# CONFIG_FW_LOADER_COMPRESS_ZSTD is not set\n",
    )
    .unwrap();
    let image = build("xz-only.img");
    let paths = support::image_paths(&image);
    assert!(
        has(&paths, "lib/firmware/iwlwifi-1000-5.ucode")
            && !has(&paths, "lib/firmware/iwlwifi-1000-5.ucode.zst"),
        "the .zst firmware is not decompressed for a loader without zstd: {paths:?}"
    );
    assert_eq!(
        support::image_bytes(&image, "/lib/firmware/iwlwifi-1000-5.ucode"),
        zst_data
    );
    assert!(
        has(&paths, "lib/firmware/iwlwifi-100-5.ucode.xz"),
        "the .xz firmware is not kept for a loader that reads xz: {paths:?}"
    );

    // Debian 13's loader: both, so both stay compressed.
    std::fs::write(
        &config,
        "CONFIG_FW_LOADER_COMPRESS=y\nCONFIG_FW_LOADER_COMPRESS_XZ=y\nCONFIG_FW_LOADER_COMPRESS_ZSTD=y\n",
    )
    .unwrap();
    let image = build("both.img");
    let paths = support::image_paths(&image);
    assert!(
        has(&paths, "lib/firmware/iwlwifi-1000-5.ucode.zst")
            && has(&paths, "lib/firmware/iwlwifi-100-5.ucode.xz")
            && !has(&paths, "lib/firmware/iwlwifi-1000-5.ucode"),
        "{paths:?}"
    );
}

#[test]
fn firmware_is_found_filtered_and_reported() {
    let Some(kernel) = support::debian_kernel() else {
        return;
    };
    let dir = support::Scratch::new("kmod-firmware");
    let root = iwlwifi_tree(&kernel, &dir.join("root"));
    let fw = root.join("lib/firmware");
    std::fs::create_dir_all(fw.join("updates")).unwrap();
    std::fs::write(fw.join("iwlwifi-100-5.ucode"), vec![1u8; 3000]).unwrap();
    std::fs::write(fw.join("updates/iwlwifi-1000-5.ucode.zst"), vec![2u8; 100]).unwrap();
    std::fs::write(fw.join("iwlwifi-135-6.ucode"), vec![3u8; 10]).unwrap();
    std::fs::write(fw.join("regulatory.db"), vec![4u8; 10]).unwrap();
    let m = dir.join("fw.toml");
    std::fs::write(
        &m,
        format!(
            "root = \"{}\"\nmodules = [\"iwlwifi\"]\n\n[firmware]\nexclude = [\"iwlwifi-135-*\"]\n",
            root.display()
        ),
    )
    .unwrap();
    let out = support::run_ok(
        support::composer()
            .arg("export-list")
            .arg(&m)
            .args(["--kver", &kernel.version]),
    );
    let list = String::from_utf8_lossy(&out.stdout);
    let check = support::run_ok(
        support::composer()
            .arg("check")
            .arg(&m)
            .args(["--kver", &kernel.version]),
    );
    let stderr = String::from_utf8_lossy(&check.stderr);
    assert!(
        list.contains("file /lib/firmware/iwlwifi-100-5.ucode "),
        "{list}"
    );
    assert!(
        list.contains("file /lib/firmware/updates/iwlwifi-1000-5.ucode.zst "),
        "{list}"
    );
    assert!(
        list.contains("file /lib/firmware/regulatory.db "),
        "cfg80211's: {list}"
    );
    assert!(!list.contains("iwlwifi-135-6"), "excluded: {list}");
    assert!(
        stderr.contains("fw.toml:2:12")
            && stderr.contains("module `iwlwifi` asks for firmware not found"),
        "{stderr}"
    );

    let why = support::run_ok(support::composer().arg("why").arg(&m).args([
        "--kver",
        &kernel.version,
        "iwlwifi-1000-5.ucode",
    ]));
    let why = String::from_utf8_lossy(&why.stdout);
    assert!(
        why.contains("modules \"iwlwifi\" -> iwlwifi -> firmware iwlwifi-1000-5.ucode"),
        "{why}"
    );
    let report = support::run_ok(
        support::composer()
            .arg("why")
            .arg(&m)
            .args(["--kver", &kernel.version]),
    );
    let report = String::from_utf8_lossy(&report.stdout);
    assert!(report.contains("iwlwifi +2 fw"), "{report}");
    assert!(report.contains("3 firmware files"), "{report}");

    // firmware = false in a rule takes none.
    std::fs::write(
        &m,
        format!(
            "root = \"{}\"\n[[module]]\nnames = [\"iwlwifi\"]\nfirmware = false\n",
            root.display()
        ),
    )
    .unwrap();
    let out = support::run_ok(
        support::composer()
            .arg("export-list")
            .arg(&m)
            .args(["--kver", &kernel.version]),
    );
    assert!(!String::from_utf8_lossy(&out.stdout).contains("lib/firmware"));
}

/// Four modules without their firmware are one warning with a count; `-v`
/// gives each module its own line, naming its files. `why --json` gives the
/// same facts as its text.
#[test]
fn missing_firmware_is_one_line_unless_verbose() {
    let Some(kernel) = support::debian_kernel() else {
        return;
    };
    let dir = support::Scratch::new("kmod-firmware-grouped");
    let root = small_tree(
        &kernel,
        &dir.join("root"),
        &[
            ("kernel/drivers/net/ethernet/intel/e100.ko", ""),
            ("kernel/drivers/net/ethernet/broadcom/tg3.ko", ""),
            ("kernel/drivers/net/ethernet/broadcom/bnx2.ko", ""),
            ("kernel/drivers/net/ethernet/realtek/r8169.ko", ""),
            ("kernel/drivers/net/mii.ko", ""),
            ("kernel/drivers/net/phy/libphy.ko", ""),
            ("kernel/drivers/net/phy/mdio_devres.ko", ""),
        ],
    );
    let m = dir.join("nics.toml");
    std::fs::write(
        &m,
        format!(
            "root = \"{}\"\n[[module]]\npatterns = [\"kernel/drivers/net/ethernet/**\"]\n",
            root.display()
        ),
    )
    .unwrap();
    let check = |verbose: bool| {
        let mut cmd = support::composer();
        if verbose {
            cmd.arg("-v");
        }
        let o = support::run_ok(cmd.arg("check").arg(&m).args(["--kver", &kernel.version]));
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    let quiet = check(false);
    let fw_lines: Vec<&str> = quiet.lines().filter(|l| l.contains("firmware")).collect();
    assert_eq!(fw_lines.len(), 1, "{quiet}");
    assert!(
        fw_lines[0].contains("nics.toml:3:13: 4 modules ask for firmware not found"),
        "{quiet}"
    );
    let verbose = check(true);
    let fw_lines: Vec<&str> = verbose.lines().filter(|l| l.contains("firmware")).collect();
    assert_eq!(fw_lines.len(), 4, "{verbose}");
    for (module, file) in [
        ("e100", "e100/d10"),
        ("tg3", "tigon/tg3"),
        ("bnx2", "bnx2/bnx2-"),
        ("r8169", "rtl_nic/rtl8"),
    ] {
        assert!(
            fw_lines
                .iter()
                .any(|l| l.contains("nics.toml:3:13: module `")
                    && l.contains(&format!("`{module}` asks for firmware"))
                    && l.contains(file)),
            "{module}: {verbose}"
        );
    }
    let o = support::run(
        support::composer()
            .args(["-q", "-v", "check"])
            .arg(&m)
            .args(["--kver", &kernel.version]),
    );
    assert_eq!(o.status.code(), Some(2), "-q and -v conflict");

    // why --json: the same modules and sizes as the text, and a target's line.
    let text = support::run_ok(
        support::composer()
            .arg("why")
            .arg(&m)
            .args(["--kver", &kernel.version]),
    );
    let text = String::from_utf8_lossy(&text.stdout);
    let json = support::run_ok(
        support::composer()
            .args(["why", "--json"])
            .arg(&m)
            .args(["--kver", &kernel.version]),
    );
    let doc: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let modules = doc["modules"].as_array().unwrap();
    let names: Vec<&str> = modules
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    for want in [
        "e100",
        "tg3",
        "bnx2",
        "r8169",
        "mii",
        "libphy",
        "mdio_devres",
    ] {
        assert!(names.contains(&want), "{want}: {names:?}");
    }
    assert!(
        text.starts_with(&format!("{} modules (", names.len())),
        "{text}"
    );
    let sizes: Vec<u64> = modules
        .iter()
        .map(|m| m["module_bytes"].as_u64().unwrap() + m["firmware_bytes"].as_u64().unwrap())
        .collect();
    assert!(
        sizes.windows(2).all(|w| w[0] >= w[1]),
        "largest first: {sizes:?}"
    );
    let tg3 = modules.iter().find(|m| m["name"] == "tg3").unwrap();
    let on_disk = std::fs::metadata(
        root.join("lib/modules")
            .join(&kernel.version)
            .join("kernel/drivers/net/ethernet/broadcom/tg3.ko"),
    )
    .unwrap()
    .len();
    assert_eq!(tg3["module_bytes"].as_u64(), Some(on_disk));
    let json = support::run_ok(
        support::composer()
            .args(["why", "--json"])
            .arg(&m)
            .arg("libphy")
            .args(["--kver", &kernel.version]),
    );
    let doc: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(doc["target"], "libphy");
    let entries = doc["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 1, "{doc}");
    let e = &entries[0];
    assert!(
        e["path"]
            .as_str()
            .unwrap()
            .ends_with("/kernel/drivers/net/phy/libphy.ko"),
        "{doc}"
    );
    assert_eq!(
        e["origin"]["file"].as_str().unwrap(),
        m.display().to_string()
    );
    assert_eq!(
        (e["origin"]["line"].as_u64(), e["origin"]["column"].as_u64()),
        (Some(3), Some(13))
    );
    let rule = e["rule"].as_str().unwrap();
    assert!(rule.contains("libphy"), "{doc}");
}

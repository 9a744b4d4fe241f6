//! `[omit]`: a document takes out of the image what it and the documents before it
//! (its includes, the profiles) selected: modules of the generic profile (a module a
//! kept one needs stays, and the build says which and where), firmware, systemd units
//! and programs of a profile; documents read after it are not affected. `why` names
//! the omission, and `check-boot` sees the layer it takes away.

use std::fs;
use std::path::Path;
use std::process::Command;

use crate::support::{self, Scratch};

fn text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn omit_takes_a_module_out_of_the_generic_profile() {
    let Some(kernel) = support::debian_kernel() else {
        return;
    };
    let dir = Scratch::new("omit-generic");
    let m = dir.join("initrd.toml");
    fs::write(
        &m,
        "include = [\"generic\"]\ninit = \"shell\"\n\n[omit]\nmodules = [\"virtio_blk\", \"jbd2\"]\n",
    )
    .unwrap();
    let image = dir.join("initrd.img");
    let built = support::run_ok(
        support::build_for(&kernel.version, &kernel.modules_dir())
            .arg(&m)
            .arg("-o")
            .arg(&image),
    );
    let said = String::from_utf8_lossy(&built.stderr).into_owned();
    let paths = support::image_paths(&image);
    let has = |name: &str| {
        paths.iter().any(|p| {
            p.contains("/lib/modules/")
                && p.rsplit('/')
                    .next()
                    .unwrap()
                    .starts_with(&format!("{name}.ko"))
        })
    };
    // The generic image of the same kernel and init holds both.
    let generic = support::generic_image(&kernel, "shell");
    let generic_paths = support::image_paths(&generic);
    for name in ["virtio_blk", "jbd2"] {
        assert!(
            generic_paths.iter().any(|p| p.ends_with(&format!("/{name}.ko"))
                || p.contains(&format!("/{name}.ko."))),
            "the generic image has no {name}"
        );
    }
    assert!(!has("virtio_blk"), "virtio_blk is in the image: {paths:?}");
    // ext4 needs jbd2: it stays, and the build says why, at the omission's line.
    assert!(has("jbd2") && has("ext4"), "{paths:?}");
    let at = format!("{}:5:", m.display());
    let kept = said
        .lines()
        .find(|l| l.contains("[omit] modules \"jbd2\""))
        .unwrap_or_else(|| panic!("no word of jbd2 kept:\n{said}"));
    assert!(
        kept.contains(&at)
            && kept.contains("module `jbd2` is kept: module `ext4` needs it")
            && kept.contains("profile generic, line "),
        "{kept}"
    );

    // `why` names the omission's line.
    let why = support::run_ok(
        support::composer()
            .arg("why")
            .arg(&m)
            .arg("virtio_blk")
            .args(["--kver", &kernel.version, "--kmoddir"])
            .arg(kernel.modules_dir()),
    );
    let out = String::from_utf8_lossy(&why.stdout);
    assert!(
        out.contains(&format!("module virtio_blk: left out by {at}"))
            && out.contains("([omit] modules \"virtio_blk\")"),
        "{out}"
    );
    let why = support::run_ok(
        support::composer()
            .arg("why")
            .arg(&m)
            .arg("virtio_blk")
            .arg("--json")
            .args(["--kver", &kernel.version, "--kmoddir"])
            .arg(kernel.modules_dir()),
    );
    let doc: serde_json::Value = serde_json::from_slice(&why.stdout).unwrap();
    assert_eq!(doc["omitted"][0]["kind"], "module", "{doc}");
    assert_eq!(doc["omitted"][0]["by"]["line"], 5, "{doc}");

    // check-boot on this machine's virtio root: no, for the disk.
    let Some(root) = crate::check_boot::virtio_root() else {
        // As check_boot.rs: the machine's shape, not a missing tool.
        eprintln!("skipped: this machine's root is not on a virtio disk: no check-boot of it");
        return;
    };
    let o = support::run(
        support::composer()
            .arg("check-boot")
            .args(["--kver", &kernel.version, "--kmoddir"])
            .arg(kernel.modules_dir())
            .arg("--kernel-cmdline")
            .arg(format!("root={root}"))
            .arg("--json")
            .arg(&image),
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let disk = root
        .trim_start_matches("/dev/")
        .trim_end_matches(char::is_numeric);
    let failed: Vec<&serde_json::Value> = doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| !c["missing"].as_array().unwrap().is_empty())
        .collect();
    assert_eq!(failed.len(), 1, "{doc}");
    assert!(
        failed[0]["layer"]
            .as_str()
            .unwrap()
            .contains(&format!("disk {disk}"))
            && failed[0]["missing"].to_string().contains("virtio_blk"),
        "{doc}"
    );
}

/// A root with a profile of its own (`/etc/composer/profiles/parts.toml`) that takes
/// iwlwifi with its firmware, two units and a program (a `#!/bin/sh` script, with a
/// static busybox as /bin/sh).
fn parts_root(kernel: &support::DebianKernel, busybox: &Path, root: &Path) {
    let src = kernel.modules_dir();
    let dst = root.join("lib/modules").join(&kernel.version);
    for rel in [
        "kernel/drivers/net/wireless/intel/iwlwifi/iwlwifi.ko",
        "kernel/net/wireless/cfg80211.ko",
        "kernel/net/rfkill/rfkill.ko",
    ] {
        fs::create_dir_all(dst.join(rel).parent().unwrap()).unwrap();
        fs::copy(src.join(rel), dst.join(rel)).unwrap();
    }
    for f in [
        "modules.order",
        "modules.builtin",
        "modules.builtin.modinfo",
    ] {
        fs::copy(src.join(f), dst.join(f)).unwrap();
    }
    let fw = root.join("lib/firmware");
    fs::create_dir_all(&fw).unwrap();
    fs::write(fw.join("iwlwifi-100-5.ucode"), [1u8; 300]).unwrap();
    fs::write(fw.join("iwlwifi-1000-5.ucode"), [2u8; 300]).unwrap();
    let sys = root.join("usr/lib/systemd/system");
    fs::create_dir_all(&sys).unwrap();
    fs::write(
        sys.join("initrd.target"),
        "[Unit]\nWants=keep.service skip-me.service\n",
    )
    .unwrap();
    for unit in ["keep.service", "skip-me.service"] {
        fs::write(sys.join(unit), "[Unit]\nDescription=test\n").unwrap();
    }
    fs::create_dir_all(root.join("usr/bin")).unwrap();
    fs::create_dir_all(root.join("bin")).unwrap();
    fs::copy(busybox, root.join("bin/sh")).unwrap();
    let hello = root.join("usr/bin/hello");
    fs::write(&hello, "#!/bin/sh\necho hello\n").unwrap();
    support::run_ok(Command::new("chmod").arg("755").arg(&hello));
    let profiles = root.join("etc/composer/profiles");
    fs::create_dir_all(&profiles).unwrap();
    fs::write(
        profiles.join("parts.toml"),
        "modules = [\"iwlwifi\"]\nbinaries = [\"/usr/bin/hello\"]\n\n[systemd]\nunits = [\"initrd.target\"]\n",
    )
    .unwrap();
}

#[test]
fn omit_takes_firmware_units_and_programs_of_a_profile_out() {
    let Some(kernel) = support::debian_kernel() else {
        return;
    };
    let Some(busybox) = support::busybox_static() else {
        return;
    };
    let dir = Scratch::new("omit-parts");
    let root = dir.join("root");
    parts_root(&kernel, &busybox, &root);
    let build = |name: &str, manifest: &str, dropin: Option<&str>| {
        let m = dir.join(format!("{name}.toml"));
        let mut text = manifest.to_string();
        if let Some(d) = dropin {
            let dd = dir.join(format!("{name}.d"));
            fs::create_dir_all(&dd).unwrap();
            fs::write(dd.join("10-more.toml"), d).unwrap();
            text = format!("dropins = \"{name}.d\"\n{text}");
        }
        fs::write(&m, text).unwrap();
        let image = dir.join(format!("{name}.img"));
        support::run_ok(
            support::build_for(
                &kernel.version,
                &root.join("lib/modules").join(&kernel.version),
            )
            .arg("--root")
            .arg(&root)
            .arg(&m)
            .arg("-o")
            .arg(&image),
        );
        (m, support::image_paths(&image))
    };
    let unit = |u: &str| format!("usr/lib/systemd/system/{u}");
    let (_, all) = build("all", "include = [\"parts\"]\n", None);
    for p in [
        "lib/firmware/iwlwifi-100-5.ucode".to_string(),
        "lib/firmware/iwlwifi-1000-5.ucode".to_string(),
        unit("keep.service"),
        unit("skip-me.service"),
        "usr/bin/hello".to_string(),
        "bin/sh".to_string(),
    ] {
        assert!(all.contains(&p), "without [omit], no {p}: {all:?}");
    }
    let omit = "include = [\"parts\"]\n\n[omit]\nfirmware = [\"iwlwifi-100-*\"]\nunits = [\"skip-me.service\"]\nfiles = [\"/usr/bin/hello\"]\n";
    let (m, some) = build("some", omit, None);
    for p in [
        "lib/firmware/iwlwifi-1000-5.ucode".to_string(),
        unit("keep.service"),
        unit("initrd.target"),
    ] {
        assert!(some.contains(&p), "{p} was left out too: {some:?}");
    }
    // The program's interpreter went with it: nothing else runs /bin/sh.
    for p in [
        "lib/firmware/iwlwifi-100-5.ucode".to_string(),
        unit("skip-me.service"),
        "usr/bin/hello".to_string(),
        "bin/sh".to_string(),
    ] {
        assert!(!some.contains(&p), "{p} is in the image: {some:?}");
    }
    let why = support::run_ok(
        support::composer()
            .arg("why")
            .arg(&m)
            .args([
                "iwlwifi-100-5.ucode",
                "/usr/bin/hello",
                "--kver",
                &kernel.version,
            ])
            .arg("--root")
            .arg(&root)
            .arg("--kmoddir")
            .arg(root.join("lib/modules").join(&kernel.version)),
    );
    let out = String::from_utf8_lossy(&why.stdout);
    assert!(
        out.contains(&format!(
            "firmware iwlwifi-100-5.ucode: left out by {}:4:",
            m.display()
        )) && out.contains(&format!("/usr/bin/hello: left out by {}:6:", m.display())),
        "{out}"
    );

    // A document read after the omission is not affected: a drop-in that asks for the
    // program again has it.
    let (_, again) = build("again", omit, Some("binaries = [\"/usr/bin/hello\"]\n"));
    assert!(
        again.contains(&"usr/bin/hello".to_string()) && again.contains(&"bin/sh".to_string()),
        "{again:?}"
    );
    assert!(!again.contains(&unit("skip-me.service")), "{again:?}");
}

/// The book's example of `[omit]` (Composition, "Taking things out"), in TOML and in
/// YAML: each builds, the two images are byte for byte the same, and what it leaves out
/// is not in them while the generic image of the same kernel has it.
#[test]
fn the_books_omit_example_builds() {
    let Some(kernel) = support::debian_kernel() else {
        return;
    };
    let book =
        fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("book/src/manifest.md"))
            .unwrap();
    let start = book.find("### Taking things out").expect("the section");
    let end = start
        + book[start..]
            .find("\n### Showing the configuration")
            .expect("its end");
    let section = &book[start..end];
    let mut snippets = Vec::new();
    for (i, block) in section.split("```").enumerate() {
        if i % 2 == 1 {
            let (lang, body) = block.split_once('\n').unwrap();
            snippets.push((lang.trim().to_string(), body.to_string()));
        }
    }
    assert_eq!(
        snippets.iter().map(|(l, _)| l.as_str()).collect::<Vec<_>>(),
        ["toml", "yaml"],
        "{section}"
    );
    let dir = Scratch::new("omit-book");
    let mut images = Vec::new();
    for (lang, body) in &snippets {
        let m = dir.join(format!("initrd.{lang}"));
        fs::write(&m, body).unwrap();
        let image = dir.join(format!("{lang}.img"));
        support::run_ok(
            support::build_for(&kernel.version, &kernel.modules_dir())
                .args(["-t", "0"])
                .arg(&m)
                .arg("-o")
                .arg(&image),
        );
        images.push(image);
    }
    assert!(
        fs::read(&images[0]).unwrap() == fs::read(&images[1]).unwrap(),
        "the TOML and YAML examples build different images"
    );
    // The generic image as the example's init ("auto") makes it.
    let generic = support::image_paths(&support::shared_image(
        &kernel,
        "generic-auto",
        "include = [\"generic\"]\n",
    ));
    let paths = support::image_paths(&images[0]);
    let floppy = |p: &String| p.contains("/drivers/block/floppy.ko");
    let memstick = |p: &String| p.contains("/kernel/drivers/memstick/");
    assert!(generic.iter().any(floppy) && generic.iter().any(memstick));
    assert!(!paths.iter().any(floppy), "floppy is in the image");
    assert!(
        !paths.iter().any(memstick),
        "a memory-stick driver is in the image"
    );
    assert!(
        !paths.iter().any(|p| p.ends_with("bin/btrfs")),
        "btrfs is in the image"
    );
    assert!(paths.len() < generic.len(), "nothing was left out");
}

/// A module the generic profile has the init load from the start (ext4), left out: not
/// in the image, and not in the list the init loads (a name modprobe could not find).
#[test]
fn an_omitted_module_is_not_in_the_inits_load_list() {
    let Some(kernel) = support::debian_kernel() else {
        return;
    };
    let generic = support::generic_image(&kernel, "shell");
    assert!(support::modules_load(&generic).iter().any(|m| m == "ext4"));
    let dir = Scratch::new("omit-load-list");
    let m = dir.join("initrd.toml");
    fs::write(
        &m,
        "include = [\"generic\"]\ninit = \"shell\"\n\n[omit]\nmodules = [\"ext4\"]\n",
    )
    .unwrap();
    let image = dir.join("initrd.img");
    support::run_ok(
        support::build_for(&kernel.version, &kernel.modules_dir())
            .arg(&m)
            .arg("-o")
            .arg(&image),
    );
    let paths = support::image_paths(&image);
    // ext4 was the list's only name: the list is empty, so not written.
    if paths
        .iter()
        .any(|p| p == "etc/modules-load.d/composer.conf")
    {
        let load = support::modules_load(&image);
        assert!(!load.iter().any(|m| m == "ext4"), "{load:?}");
    }
    assert!(
        !paths
            .iter()
            .any(|p| p.ends_with("/ext4.ko") || p.contains("/ext4.ko.")),
        "ext4 is in the image"
    );
}

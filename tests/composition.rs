//! Composition speaks of what the user wrote: `init = "auto"` takes systemd only when
//! the root can carry the systemd init (and says so); a user's `init = "systemd"` on a
//! root without udev is an error at the user's line; messages about the profiles
//! composer carries name the profile and its line, never composer's cache, and their
//! hints say what to write in the user's own manifest.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::support::{self, Scratch};

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A copy of the Debian 12 root (hard links where the filesystem allows)
/// without udevadm: systemd is there, udev's program is not.
fn root_without_udevadm(debian: &Path, into: &Path) -> PathBuf {
    let root = into.join("root");
    let linked = Command::new("cp")
        .arg("-al")
        .arg(debian.join("root"))
        .arg(&root)
        .status()
        .is_ok_and(|s| s.success());
    if !linked {
        let _ = fs::remove_dir_all(&root);
        support::run_ok(
            Command::new("cp")
                .arg("-a")
                .arg(debian.join("root"))
                .arg(&root),
        );
    }
    for p in [
        "usr/bin/udevadm",
        "bin/udevadm",
        "usr/sbin/udevadm",
        "sbin/udevadm",
    ] {
        let f = root.join(p);
        if f.symlink_metadata()
            .is_ok_and(|m| !m.is_symlink() || p.starts_with("usr"))
        {
            let _ = fs::remove_file(&f);
        }
    }
    assert!(root.join("usr/lib/systemd/systemd").exists());
    assert!(!root.join("usr/bin/udevadm").exists() && !root.join("bin/udevadm").exists());
    root
}

#[test]
fn auto_takes_the_shell_init_for_a_root_with_systemd_and_no_udev() {
    let Some(kernel) = support::debian_kernel() else {
        return;
    };
    let Some((debian, _)) = crate::boot_root::debian_root() else {
        return;
    };
    let dir = Scratch::new("auto-no-udev");
    let root = root_without_udevadm(&debian, &dir);
    let cache = dir.join("cache");
    let build = |root: &Path, manifest: Option<&Path>, out: &Path| {
        let mut cmd = support::build_for(&kernel.version, &kernel.modules_dir());
        cmd.env("XDG_CACHE_HOME", &cache)
            .arg("-v")
            .arg("--root")
            .arg(root);
        if let Some(m) = manifest {
            cmd.arg(m);
        }
        support::run(cmd.arg("-o").arg(out))
    };
    // No manifest: the default configuration, init = "auto".
    let image = dir.join("auto.img");
    let o = build(&root, None, &image);
    let said = text(&o);
    assert!(o.status.success(), "{said}");
    assert!(
        said.contains("init = \"auto\": the shell init, as the root has systemd but not all the systemd init needs: udevadm")
            && said.contains("udev package"),
        "{said}"
    );
    let paths = support::image_paths(&image);
    assert!(
        !paths.iter().any(|p| p == "etc/initrd-release"),
        "a systemd image: {paths:?}"
    );
    assert!(
        support::image_file(&image, "init").contains("composer"),
        "/init is not composer's"
    );
    // The same root with udev: systemd, and -v says so.
    let image = dir.join("systemd.img");
    let o = build(&debian.join("root"), None, &image);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("init = \"auto\": the systemd init"),
        "{}",
        text(&o)
    );
    assert!(support::image_paths(&image)
        .iter()
        .any(|p| p == "etc/initrd-release"));

    // The user asks for systemd: the error is at the user's line, with what to install.
    let m = dir.join("initrd.toml");
    fs::write(&m, "include = [\"generic\"]\ninit = \"systemd\"\n").unwrap();
    let out = dir.join("asked.img");
    let o = build(&root, Some(&m), &out);
    let said = text(&o);
    assert_eq!(o.status.code(), Some(2), "{said}");
    assert!(
        said.contains(&format!(
            "{}:2:8: init = \"systemd\": the root",
            m.display()
        )) && said.contains("lacks what the systemd init needs: udevadm")
            && said.contains("Debian's udev package"),
        "{said}"
    );
    assert!(!out.exists(), "an image was written");
    assert!(
        !said.contains(&cache.display().to_string()),
        "a message names the cache: {said}"
    );
}

#[test]
fn messages_name_the_profile_never_the_cache() {
    let Some(kernel) = support::debian_kernel() else {
        return;
    };
    if !support::generic_image_host() {
        return;
    }
    let dir = Scratch::new("profile-messages");
    let cache = dir.join("cache");
    let cache_text = cache.display().to_string();
    let composer = || {
        let mut c = support::composer();
        c.env("XDG_CACHE_HOME", &cache);
        c
    };
    let mut said = Vec::new();

    // Warnings of the default build (firmware the generic profile's modules ask for).
    let image = dir.join("default.img");
    let o = support::run(
        composer()
            .args(["build", "--no-sync", "--kver", &kernel.version, "--kmoddir"])
            .arg(kernel.modules_dir())
            .arg("-o")
            .arg(&image),
    );
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("warning: profile generic, line "),
        "{}",
        text(&o)
    );
    said.push(("default build", text(&o)));

    // An error in a profile: a kernel with no module tree.
    let o = support::run(
        composer()
            .args(["build", "--no-sync", "--kver", "0.0.0-none", "-o"])
            .arg(dir.join("none.img")),
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("error: profile ") && text(&o).contains(", line "),
        "{}",
        text(&o)
    );
    said.push(("no module tree", text(&o)));

    // A program a profile needs that the root lacks: the hint says what to write in
    // one's own manifest, not to edit the profile.
    let root = dir.join("empty-root");
    fs::create_dir_all(&root).unwrap();
    let m = dir.join("shell.toml");
    fs::write(&m, "include = [\"init-shell\"]\n").unwrap();
    let o = support::run(
        composer()
            .args(["build", "--no-sync", "--root"])
            .arg(&root)
            .arg(&m)
            .arg("-o")
            .arg(dir.join("shell.img")),
    );
    let t = text(&o);
    assert_eq!(o.status.code(), Some(2), "{t}");
    assert!(
        t.contains("error: profile init-shell, line ")
            && t.contains("of composer's profile `init-shell` asks for it")
            && t.contains("[omit]")
            && !t.contains("mark the entry optional"),
        "{t}"
    );
    said.push(("missing program", t));

    // `why`, in text and JSON, on what a profile put in.
    let m = dir.join("why.toml");
    fs::write(&m, "include = [\"generic\"]\ninit = \"shell\"\n").unwrap();
    for json in [false, true] {
        let mut c = composer();
        c.arg("why")
            .arg(&m)
            .arg("/init")
            .args(["--kver", &kernel.version, "--kmoddir"])
            .arg(kernel.modules_dir());
        if json {
            c.arg("--json");
        }
        let o = support::run_ok(&mut c);
        if json {
            let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
            let origin = &doc["entries"][0]["origin"];
            assert_eq!(origin["profile"], "init-shell", "{doc}");
            assert!(origin["line"].as_u64().is_some_and(|l| l > 0), "{doc}");
        } else {
            assert!(
                text(&o).contains("profile init-shell, line "),
                "{}",
                text(&o)
            );
        }
        said.push(("why", text(&o)));
    }
    for (what, t) in said {
        assert!(
            !t.contains(&cache_text),
            "{what}: names composer's cache:\n{t}"
        );
        assert!(
            !t.contains("/profiles/"),
            "{what}: names a profile's path:\n{t}"
        );
    }
}

/// `composer config` of the default configuration: written to a file and built as a
/// manifest, it gives the same image byte for byte; `--json` names an origin for every
/// rule; `--files` lists the documents in the order read; a drop-in's setting shows
/// the drop-in as its origin, over the manifest's.
#[test]
fn config_shows_what_a_build_reads_and_builds_the_same_image() {
    let Some(kernel) = support::debian_kernel() else {
        return;
    };
    if !support::generic_image_host() {
        return;
    }
    let dir = Scratch::new("config");
    let kver = ["--kver", kernel.version.as_str()];
    let config = |extra: &[&str]| {
        let o = support::run_ok(
            support::composer()
                .arg("config")
                .args(kver)
                .arg("--kmoddir")
                .arg(kernel.modules_dir())
                .args(extra),
        );
        String::from_utf8(o.stdout).unwrap()
    };
    let text = config(&[]);
    assert!(
        text.contains("include = [\n    \"base\",") && text.contains("    \"generic\",\n"),
        "{text}"
    );
    assert!(text.contains("(profile generic, line "), "{text}");
    let m = dir.join("config.toml");
    fs::write(&m, &text).unwrap();
    let build = |manifest: Option<&Path>, out: &Path| {
        let mut cmd = support::build_for(&kernel.version, &kernel.modules_dir());
        cmd.args(["-t", "0"]);
        if let Some(m) = manifest {
            cmd.arg(m);
        }
        support::run_ok(cmd.arg("-o").arg(out));
        fs::read(out).unwrap()
    };
    let default = build(None, &dir.join("default.img"));
    let from_config = build(Some(&m), &dir.join("config.img"));
    assert!(
        default == from_config,
        "the configuration printed builds another image than the configuration"
    );

    let doc: serde_json::Value = serde_json::from_str(&config(&["--json"])).unwrap();
    let rules = doc["rules"].as_array().unwrap();
    assert!(rules.len() > 50, "{} rules", rules.len());
    for r in rules {
        let o = &r["origin"];
        assert!(
            (o["file"].is_string() || o["profile"].is_string())
                && o["line"].as_u64().is_some_and(|l| l > 0),
            "a rule without an origin: {r}"
        );
    }
    let files = config(&["--files"]);
    let names: Vec<&str> = files.lines().collect();
    let documents: Vec<&str> = doc["documents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), documents.len(), "{files}");
    assert!(names.iter().zip(&documents).all(|(n, d)| n.starts_with(d)));
    let at = |name: &str| names.iter().position(|n| *n == name);
    assert!(
        at("profile generic") < at("profile default") && at("profile base") < at("profile generic"),
        "{files}"
    );

    // An [omit] entry shows what it took out.
    let m = dir.join("omit.toml");
    fs::write(
        &m,
        "include = [\"generic\"]\n\n[omit]\nmodules = [\"floppy\"]\n",
    )
    .unwrap();
    let text = config(&[m.to_str().unwrap()]);
    assert!(
        text.contains(&format!(
            "#   [omit] modules \"floppy\"    ({}:4:12); left out: module floppy",
            m.display()
        )),
        "{text}"
    );
    let doc: serde_json::Value =
        serde_json::from_str(&config(&[m.to_str().unwrap(), "--json"])).unwrap();
    let omit: Vec<&serde_json::Value> = doc["rules"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["kind"] == "[omit] modules")
        .collect();
    assert_eq!(omit.len(), 1, "{doc}");
    assert_eq!(omit[0]["left_out"], serde_json::json!(["module floppy"]));

    // A drop-in's setting over the manifest's.
    let m = dir.join("initrd.toml");
    fs::write(
        &m,
        "include = [\"generic\"]\ndropins = \"initrd.d\"\n\n[vars]\nflavour = \"plain\"\n",
    )
    .unwrap();
    fs::create_dir_all(dir.join("initrd.d")).unwrap();
    let dropin = dir.join("initrd.d/50-flavour.toml");
    fs::write(&dropin, "[vars]\nflavour = \"salted\"\n").unwrap();
    let doc: serde_json::Value =
        serde_json::from_str(&config(&[m.to_str().unwrap(), "--json"])).unwrap();
    let set: Vec<&serde_json::Value> = doc["settings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["key"] == "vars.flavour")
        .collect();
    assert_eq!(set.len(), 2, "{doc}");
    assert_eq!(set[0]["origin"]["file"], m.display().to_string());
    assert_eq!(set[0]["overridden"], true);
    assert_eq!(set[1]["origin"]["file"], dropin.display().to_string());
    assert_eq!(
        (set[1]["value"].as_str(), &set[1]["overridden"]),
        (Some("\"salted\""), &serde_json::Value::Bool(false))
    );
}

/// The code blocks of the book's Composition section (manifest.md), each made to run:
/// the include/drop-ins example builds with both documents' entries; the duplicates
/// example merges the two same declarations and refuses the third, naming both places;
/// the `[omit]` examples are built by omit.rs, the `composer config` lines by the test
/// above.
#[test]
fn the_composition_sections_examples_run() {
    let book =
        fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("book/src/manifest.md"))
            .unwrap();
    let start = book.find("\n## Composition\n").expect("the section");
    let end = start + book[start..].find("\n## Merged /usr").expect("its end");
    let blocks: Vec<(String, String)> = book[start..end]
        .split("```")
        .enumerate()
        .filter(|(i, _)| i % 2 == 1)
        .map(|(_, b)| {
            let (lang, body) = b.split_once('\n').unwrap();
            (lang.trim().to_string(), body.to_string())
        })
        .collect();
    let langs: Vec<&str> = blocks.iter().map(|(l, _)| l.as_str()).collect();
    assert_eq!(
        langs,
        ["toml", "toml", "yaml", "sh", "toml"],
        "the section's blocks changed"
    );
    let dir = Scratch::new("composition-examples");

    // include and dropins.
    let (_, include) = &blocks[0];
    fs::create_dir_all(dir.join("common")).unwrap();
    fs::create_dir_all(dir.join("initrd.d")).unwrap();
    fs::write(
        dir.join("common/base.toml"),
        "[[dir]]\npath = \"/from-base\"\n",
    )
    .unwrap();
    fs::write(
        dir.join("initrd.d/10-net.toml"),
        "[[dir]]\npath = \"/from-dropin\"\n",
    )
    .unwrap();
    let m = dir.join("initrd.toml");
    fs::write(
        &m,
        format!("{include}\n[[dir]]\npath = \"/from-manifest\"\n"),
    )
    .unwrap();
    let image = dir.join("include.img");
    support::run_ok(
        support::composer()
            .arg("build")
            .arg(&m)
            .arg("-o")
            .arg(&image),
    );
    let paths = support::image_paths(&image);
    for p in ["from-base", "from-manifest", "from-dropin"] {
        assert!(paths.iter().any(|x| x == p), "no /{p}: {paths:?}");
    }

    // Duplicates: the first two merge, the third is refused naming both places.
    let (_, dups) = &blocks[4];
    let root = dir.join("root");
    fs::create_dir_all(root.join("etc")).unwrap();
    fs::write(root.join("etc/hostname"), "composer\n").unwrap();
    fs::create_dir_all(dir.join("files")).unwrap();
    fs::write(dir.join("files/hostname"), "other\n").unwrap();
    let m = dir.join("dups.toml");
    fs::write(&m, dups).unwrap();
    let o = support::run(
        support::composer()
            .arg("build")
            .arg("--root")
            .arg(&root)
            .arg(&m)
            .arg("-o")
            .arg(dir.join("dups.img")),
    );
    let said = text(&o);
    assert_eq!(o.status.code(), Some(2), "{said}");
    assert!(
        said.contains(&format!("{}:9:", m.display()))
            && said.contains("`/etc/hostname` is declared twice")
            && said.contains(&format!("{}:1:", m.display())),
        "{said}"
    );
    assert!(!dir.join("dups.img").exists());
    let two: String = dups.split("\n\n").take(2).collect::<Vec<_>>().join("\n\n");
    fs::write(&m, format!("{two}\n")).unwrap();
    let image = dir.join("two.img");
    support::run_ok(
        support::composer()
            .arg("build")
            .arg("--root")
            .arg(&root)
            .arg(&m)
            .arg("-o")
            .arg(&image),
    );
    let paths = support::image_paths(&image);
    assert_eq!(
        paths.iter().filter(|p| *p == "etc/hostname").count(),
        1,
        "{paths:?}"
    );
    assert_eq!(support::image_file(&image, "etc/hostname"), "composer\n");
}

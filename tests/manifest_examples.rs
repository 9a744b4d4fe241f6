//! Every example in examples/ builds; its TOML and YAML forms give the same
//! bytes; it validates against the committed JSON Schema; the schema has not
//! drifted from the code; export-list round-trips; SOURCE_DATE_EPOCH builds
//! are reproducible; the busybox example boots Debian's kernel.

use crate::support;

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// examples/*.toml and *.yaml (not the included pieces in subdirectories).
fn examples() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(root().join("examples"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            matches!(
                p.extension().and_then(|e| e.to_str()),
                Some("toml" | "yaml")
            )
        })
        .collect();
    v.sort();
    v
}

/// Whether this host can build example `m`: the busybox examples take the host's
/// static busybox (without one they are skipped, or fail in strict mode).
fn buildable(m: &Path) -> bool {
    let name = m.file_name().unwrap().to_string_lossy();
    !name.starts_with("busybox") || support::busybox_static().is_some()
}

/// The kernel arguments example `m` is built with: those that include the generic
/// profile take kernel modules, and this host may have no module tree of its own: they
/// are built for Debian's kernel (the boot tests' one).
fn kernel_args(m: &Path) -> Vec<String> {
    let text = fs::read_to_string(m).unwrap();
    if !text.contains("generic") {
        return Vec::new();
    }
    let kernel =
        support::debian_kernel().expect("Debian's kernel, for an example of the generic profile");
    vec![
        "--kver".into(),
        kernel.version.clone(),
        "--kmoddir".into(),
        kernel.modules_dir().display().to_string(),
    ]
}

fn build(manifest: &Path, out: &Path, extra: &[&str]) -> Vec<u8> {
    let mut cmd = support::composer();
    cmd.arg("build")
        .arg(manifest)
        .arg("-o")
        .arg(out)
        .args(extra);
    support::run_ok(&mut cmd);
    fs::read(out).unwrap()
}

#[test]
fn every_example_builds_and_yaml_equals_toml() {
    let dir = support::Scratch::new("examples");
    let all = examples();
    assert!(
        all.len() >= 6,
        "expected TOML and YAML examples, found {all:?}"
    );
    let (mut pairs, mut tomls) = (0, 0);
    for m in all.iter().filter(|m| buildable(m)) {
        let name = m.file_name().unwrap().to_string_lossy().into_owned();
        let kargs = kernel_args(m);
        let kargs: Vec<&str> = kargs.iter().map(String::as_str).collect();
        let bytes = build(m, &dir.join(format!("{name}.img")), &kargs);
        // The generic profile's images are compressed segments: composer reads them.
        let entries = if kargs.is_empty() {
            support::parse_newc(&bytes)
                .unwrap_or_else(|e| panic!("{name}: {e}"))
                .len()
        } else {
            support::image_paths(&dir.join(format!("{name}.img"))).len()
        };
        assert!(entries > 5, "{name}: only {entries} entries");
        if m.extension().unwrap() == "toml" {
            tomls += 1;
            let yaml = m.with_extension("yaml");
            if yaml.exists() {
                let other = build(&yaml, &dir.join(format!("{name}.yaml.img")), &kargs);
                assert!(
                    bytes == other,
                    "{} and its YAML form build different archives",
                    m.display()
                );
                pairs += 1;
            }
        }
    }
    assert!(
        pairs == tomls && pairs >= 2,
        "every example should have a YAML form ({pairs} pairs of {tomls})"
    );
}

fn schema() -> serde_json::Value {
    let text = fs::read_to_string(root().join("schema/composer.schema.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

#[test]
fn committed_schema_matches_the_code() {
    let out = support::run_ok(support::composer().arg("schema"));
    let committed = fs::read(root().join("schema/composer.schema.json")).unwrap();
    assert!(
        out.stdout == committed,
        "schema/composer.schema.json is stale: run `composer schema > schema/composer.schema.json`"
    );
}

fn as_json(path: &Path) -> serde_json::Value {
    let text = fs::read_to_string(path).unwrap();
    match path.extension().and_then(|e| e.to_str()) {
        Some("toml") => {
            let v: toml::Value = toml::from_str(&text).unwrap();
            serde_json::to_value(v).unwrap()
        }
        _ => {
            let v: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
            serde_json::to_value(v).unwrap()
        }
    }
}

/// Every manifest under examples/, included pieces and drop-ins too.
fn all_manifests(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            all_manifests(&p, out);
        } else if matches!(
            p.extension().and_then(|e| e.to_str()),
            Some("toml" | "yaml")
        ) {
            out.push(p);
        }
    }
}

#[test]
fn examples_validate_against_the_schema() {
    let validator = jsonschema::validator_for(&schema()).expect("the schema compiles");
    let mut files = Vec::new();
    all_manifests(&root().join("examples"), &mut files);
    assert!(files.len() >= 8, "{files:?}");
    for f in &files {
        let doc = as_json(f);
        let errors: Vec<String> = validator
            .iter_errors(&doc)
            .map(|e| format!("{}: {e}", e.instance_path()))
            .collect();
        assert!(errors.is_empty(), "{}:\n{}", f.display(), errors.join("\n"));
    }
    // And the schema does reject what the tool rejects.
    for bad in [
        r#"{"fiel": []}"#,
        r#"{"file": [{"src": "/x", "mode": 755}]}"#,
        r#"{"dir": [{"path": "/x", "mode": "0999"}]}"#,
        r#"{"node": [{"path": "/x", "type": "pipe", "major": 1, "minor": 1}]}"#,
    ] {
        let doc: serde_json::Value = serde_json::from_str(bad).unwrap();
        assert!(!validator.is_valid(&doc), "schema accepts {bad}");
    }
}

#[test]
fn export_list_round_trips() {
    let dir = support::Scratch::new("export-list");
    // The generic profile's examples build segments (early microcode, zstd), which a
    // gen_init_cpio list has no words for: the round trip is of the others.
    for m in examples()
        .into_iter()
        .filter(|m| buildable(m) && kernel_args(m).is_empty())
    {
        let name = m.file_name().unwrap().to_string_lossy().into_owned();
        let list = dir.join(format!("{name}.list"));
        support::run_ok(
            support::composer()
                .arg("export-list")
                .arg(&m)
                .arg("-o")
                .arg(&list),
        );
        let direct = build(&m, &dir.join(format!("{name}.a")), &["-t", "1234567"]);
        // A list is built in gen_init_cpio's mode unless told; the manifest was built
        // in readers mode (its symlinks without gen_init_cpio's NUL).
        let mut cmd = support::composer();
        cmd.args(["build", "-t", "1234567", "--align-mode", "readers", "-o"])
            .arg(dir.join(format!("{name}.b")))
            .arg("--list")
            .arg(&list);
        support::run_ok(&mut cmd);
        let via_list = fs::read(dir.join(format!("{name}.b"))).unwrap();
        assert!(
            direct == via_list,
            "{name}: building its exported list differs from building it"
        );
    }
}

/// Copies `from` to `to` recursively (files get the copy time as mtime).
fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &target);
        } else {
            fs::copy(e.path(), &target).unwrap();
        }
    }
}

#[test]
fn source_date_epoch_builds_are_reproducible() {
    let dir = support::Scratch::new("reproducible");
    let a = dir.join("a");
    copy_tree(&root().join("examples"), &a);
    std::thread::sleep(Duration::from_millis(1100));
    let b = dir.join("b");
    copy_tree(&root().join("examples"), &b);
    for name in ["busybox.toml", "full.toml", "full.yaml"] {
        if !buildable(Path::new(name)) {
            continue;
        }
        let mut outs = Vec::new();
        for (copy, tag) in [(&a, "a"), (&b, "b")] {
            let out = dir.join(format!("{name}.{tag}.img"));
            let mut cmd = support::composer();
            cmd.env("SOURCE_DATE_EPOCH", "1700000000")
                .arg("build")
                .arg(copy.join(name))
                .arg("-o")
                .arg(&out);
            support::run_ok(&mut cmd);
            outs.push(fs::read(&out).unwrap());
        }
        assert!(
            outs[0] == outs[1],
            "{name}: two copies build different bytes"
        );
        let entries = support::parse_newc(&outs[0]).unwrap();
        assert!(entries
            .iter()
            .filter(|e| e.name != b"TRAILER!!!")
            .all(|e| e.mtime == 1_700_000_000));
        // Without SOURCE_DATE_EPOCH the copies' own mtimes show through.
        let plain: Vec<Vec<u8>> = [(&a, "a"), (&b, "b")]
            .iter()
            .map(|(copy, tag)| {
                let out = dir.join(format!("{name}.{tag}.plain.img"));
                let mut cmd = support::composer();
                cmd.env_remove("SOURCE_DATE_EPOCH")
                    .arg("build")
                    .arg(copy.join(name))
                    .arg("-o")
                    .arg(&out);
                support::run_ok(&mut cmd);
                fs::read(&out).unwrap()
            })
            .collect();
        assert!(
            plain[0] != plain[1],
            "{name}: the test copies did not differ"
        );
    }
}

#[test]
fn busybox_example_boots() {
    let Some(_qemu) = support::require_qemu() else {
        return;
    };
    let Some(kernel) = support::debian_kernel() else {
        return;
    };
    if support::busybox_static().is_none() {
        return;
    }
    let dir = support::Scratch::new("boot-example");
    let img = dir.join("busybox.img");
    build(&root().join("examples/busybox.toml"), &img, &[]);
    let opts = support::BootOptions {
        extra_append: "composer.poweroff".into(),
        ..support::BootOptions::default()
    };
    let boot = support::qemu_boot_with(&kernel, &img, &opts);
    assert!(
        boot.console.contains("composer: busybox initramfs is up")
            && boot.console.contains("COMPOSER-EXAMPLE-OK"),
        "no marker on the console:\n{}",
        boot.console
    );
}

//! composer's in-process depmod against kmod's depmod, on Debian's kernel
//! package (about 4,000 modules, shipped without any metadata).

use crate::support;

use std::collections::BTreeSet;

use composer::resolve::kmod::{self, ModuleTree, TreeSource};
use composer::resolve::root::Root;

/// Compares two files, printing the first differing line (text) or offset.
fn same_file(name: &str, ours: &[u8], theirs: &[u8], problems: &mut Vec<String>) {
    if ours == theirs {
        eprintln!("{name}: identical ({} bytes)", ours.len());
        return;
    }
    let first = ours.iter().zip(theirs).position(|(a, b)| a != b);
    problems.push(format!(
        "{name}: differs: {} bytes vs depmod's {}; first difference at byte {:?}",
        ours.len(),
        theirs.len(),
        first
    ));
    if let (Ok(a), Ok(b)) = (std::str::from_utf8(ours), std::str::from_utf8(theirs)) {
        for (i, (x, y)) in a.lines().zip(b.lines()).enumerate() {
            if x != y {
                problems.push(format!(
                    "  line {}: ours   {x}\n  line {}: depmod {y}",
                    i + 1,
                    i + 1
                ));
                break;
            }
        }
    }
}

#[test]
fn scanned_tree_writes_what_depmod_writes() {
    let Some(kernel) = support::debian_kernel() else {
        return;
    };
    let Some(base) = support::debian_kernel_depmod(&kernel) else {
        return;
    };
    let oracle = base.join("lib/modules").join(&kernel.version);
    let root = Root::new(&kernel.root);
    let started = std::time::Instant::now();
    let tree = ModuleTree::open(&root, &kernel.version).expect("open the module tree");
    eprintln!("scanned in {:?}: {:?}", started.elapsed(), tree.source);
    assert!(
        matches!(tree.source, TreeSource::Scanned { .. }),
        "the package has no metadata"
    );
    let d = tree.depmod.as_ref().expect("scanned");
    assert!(d.mods.len() > 3000, "{} modules", d.mods.len());
    let read = |n: &str| std::fs::read(oracle.join(n)).unwrap_or_else(|e| panic!("{n}: {e}"));
    let mut problems = Vec::new();
    same_file(
        "modules.dep",
        &d.modules_dep(),
        &read("modules.dep"),
        &mut problems,
    );
    same_file(
        "modules.dep.bin",
        &d.dep_index().unwrap().to_bytes(),
        &read("modules.dep.bin"),
        &mut problems,
    );
    same_file(
        "modules.alias",
        &d.alias_text(),
        &read("modules.alias"),
        &mut problems,
    );
    same_file(
        "modules.alias.bin",
        &d.alias_index().unwrap().to_bytes(),
        &read("modules.alias.bin"),
        &mut problems,
    );
    // The same index files written straight from the sorted keys (as the
    // image's metadata is).
    for (name, bytes) in [
        ("modules.dep.bin", d.dep_index_bytes()),
        ("modules.alias.bin", d.alias_index_bytes()),
        ("modules.symbols.bin", d.symbols_index_bytes()),
    ] {
        same_file(
            &format!("{name} (written directly)"),
            &bytes.unwrap(),
            &read(name),
            &mut problems,
        );
    }
    same_file(
        "modules.softdep",
        &d.softdep_text(),
        &read("modules.softdep"),
        &mut problems,
    );
    same_file(
        "modules.symbols.bin",
        &d.symbols_index().unwrap().to_bytes(),
        &read("modules.symbols.bin"),
        &mut problems,
    );
    same_file(
        "modules.devname",
        &d.devname_text(),
        &read("modules.devname"),
        &mut problems,
    );
    let dir = kernel.modules_dir();
    let builtin = std::fs::read_to_string(dir.join("modules.builtin")).unwrap();
    same_file(
        "modules.builtin.bin",
        &kmod::builtin_index(&builtin).unwrap().to_bytes(),
        &read("modules.builtin.bin"),
        &mut problems,
    );
    same_file(
        "modules.builtin.bin (written directly)",
        &kmod::builtin_index_bytes(&builtin).unwrap(),
        &read("modules.builtin.bin"),
        &mut problems,
    );
    let modinfo = std::fs::read(dir.join("modules.builtin.modinfo")).unwrap();
    same_file(
        "modules.builtin.alias.bin",
        &kmod::builtin_alias_index(&modinfo).unwrap().to_bytes(),
        &read("modules.builtin.alias.bin"),
        &mut problems,
    );
    same_file(
        "modules.builtin.alias.bin (written directly)",
        &kmod::builtin_alias_index_bytes(&modinfo).unwrap(),
        &read("modules.builtin.alias.bin"),
        &mut problems,
    );
    // depmod writes modules.symbols in hash order: compare the lines as sets.
    let lines = |b: &[u8]| -> BTreeSet<String> {
        String::from_utf8_lossy(b)
            .lines()
            .map(str::to_string)
            .collect()
    };
    let (ours, theirs) = (lines(&d.symbols_text()), lines(&read("modules.symbols")));
    if ours != theirs {
        problems.push(format!(
            "modules.symbols: {} lines only ours, {} only depmod's, e.g. {:?} / {:?}",
            ours.difference(&theirs).count(),
            theirs.difference(&ours).count(),
            ours.difference(&theirs).next(),
            theirs.difference(&ours).next()
        ));
    }
    assert!(
        problems.is_empty(),
        "differences from depmod:\n{}",
        problems.join("\n")
    );
}

/// A scan kept for the next run gives the same tree, and only while the
/// tree is unchanged.
///
/// The tree is a copy of its own (most of Debian's, without the drivers no
/// test here boots): the kernel's shared tree is hard-linked by other tests
/// running beside this one, and a new link changes a file's ctime, which a
/// kept scan rightly takes for a change.
#[test]
fn kept_scan_is_the_same_tree() {
    let Some(kernel) = support::debian_kernel() else {
        return;
    };
    let scratch = support::Scratch::new("kmod-kept-scan");
    let scans = scratch.join("scans");
    let version = &kernel.version;
    let tree = scratch.join("root/lib/modules").join(version);
    let from = kernel.modules_dir();
    std::fs::create_dir_all(tree.join("kernel/drivers")).unwrap();
    for entry in std::fs::read_dir(&from).unwrap() {
        let name = entry.unwrap().file_name();
        if name != "kernel" {
            copy(&from.join(&name), &tree);
        }
    }
    for entry in std::fs::read_dir(from.join("kernel")).unwrap() {
        let name = entry.unwrap().file_name();
        if name != "drivers" && name != "sound" {
            copy(&from.join("kernel").join(&name), &tree.join("kernel"));
        }
    }
    for sub in ["block", "md", "scsi", "virtio", "net", "nvme"] {
        copy(
            &from.join("kernel/drivers").join(sub),
            &tree.join("kernel/drivers"),
        );
    }
    // A tree changed in the two seconds before its scan is not kept.
    std::thread::sleep(std::time::Duration::from_millis(2100));
    let root = Root::new(scratch.join("root"));
    let kept = |tree: &ModuleTree| matches!(tree.source, TreeSource::Scanned { kept: true, .. });
    let first = ModuleTree::open_with(&root, version, Some(&scans)).unwrap();
    assert!(!kept(&first));
    assert!(
        first.depmod.as_ref().unwrap().mods.len() > 1000,
        "{} modules copied",
        first.depmod.as_ref().unwrap().mods.len()
    );
    let first_dep = first.depmod.as_ref().unwrap().modules_dep();
    drop(first); // waits for the scan to be written
    let started = std::time::Instant::now();
    let second = ModuleTree::open_with(&root, version, Some(&scans)).unwrap();
    eprintln!("kept scan taken in {:?}", started.elapsed());
    assert!(kept(&second), "the unchanged tree's scan is used");
    let (a, b) = (ModuleTree::open(&root, version).unwrap(), &second);
    let (a, b) = (a.depmod.as_ref().unwrap(), b.depmod.as_ref().unwrap());
    assert_eq!(first_dep, b.modules_dep());
    assert_eq!(a.modules_dep(), b.modules_dep());
    assert_eq!(a.alias_text(), b.alias_text());
    assert_eq!(a.softdep_text(), b.softdep_text());
    assert_eq!(a.symbols_text(), b.symbols_text());
    for (x, y) in a.mods.iter().zip(&b.mods) {
        assert_eq!(x.relpath, y.relpath);
        assert_eq!(x.info, y.info, "{}", x.relpath);
    }
    // A module replaced by another file of the same size and times is a change.
    let module = a
        .mods
        .iter()
        .map(|m| tree.join(&m.relpath))
        .find(|p| p.extension().is_some_and(|e| e == "ko"))
        .expect("an uncompressed module");
    let times = std::fs::metadata(&module).unwrap();
    let bytes = std::fs::read(&module).unwrap();
    std::fs::remove_file(&module).unwrap();
    std::fs::write(&module, &bytes).unwrap();
    let file = std::fs::File::options().write(true).open(&module).unwrap();
    file.set_times(
        std::fs::FileTimes::new()
            .set_accessed(times.accessed().unwrap())
            .set_modified(times.modified().unwrap()),
    )
    .unwrap();
    drop(file);
    std::thread::sleep(std::time::Duration::from_millis(2100));
    let third = ModuleTree::open_with(&root, version, Some(&scans)).unwrap();
    assert!(!kept(&third), "a replaced module's tree is scanned again");
}

/// `cp -a` of `what` into the directory `into` (a copy, not links).
fn copy(what: &std::path::Path, into: &std::path::Path) {
    if what.exists() {
        support::run_ok(
            std::process::Command::new("cp")
                .arg("-a")
                .arg(what)
                .arg(into),
        );
    }
}

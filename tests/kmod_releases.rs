//! Compressed module trees of the current releases (Debian 13's 6.12 and unstable's
//! 7.x, every module `.ko.xz`): for every module the default image of the release's
//! root holds, composer's probe list is what the release's own `modprobe
//! --show-depends` (its kmod, run in the root) prints, with the root's own modprobe.d;
//! and every module a held module needs is held too (nothing missing), each stored as
//! the tree ships it (still `.ko.xz`, which the kernel decompresses itself).

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use composer::resolve::kmod::ModuleTree;
use composer::resolve::root::Root;

use crate::support::release::{release_root, Release};
use crate::support::{self, Scratch};

/// The release's modprobe, run in its root: the lines of `--show-depends`, the module
/// directory cut off the paths; None when it fails.
fn oracle(root: &Path, kver: &str, query: &str) -> Option<Vec<String>> {
    crate::kmod_modprobe::show_depends(
        Command::new("chroot")
            .arg(root)
            .args(["modprobe", "-S", kver, "--show-depends", query]),
        kver,
    )
}

fn resolves_like_the_releases_modprobe(release: Release) {
    let Some(root) = release_root(release) else {
        return;
    };
    if support::require_tool("chroot", "coreutils").is_none() {
        return;
    }
    let kver = &root.kernel.version;
    let dir = Scratch::new(&format!("kmod-{}", release.suite()));
    let image = dir.join("default.img");
    support::run_ok(root.build().arg("-o").arg(&image));
    let prefix = format!("usr/lib/modules/{kver}/");
    let held: Vec<String> = support::image_paths(&image)
        .into_iter()
        .filter_map(|p| p.strip_prefix(&prefix).map(str::to_string))
        .filter(|p| p.contains(".ko"))
        .collect();
    assert!(held.len() > 300, "{} modules in the image", held.len());
    let not_xz: Vec<&String> = held.iter().filter(|p| !p.ends_with(".ko.xz")).collect();
    assert!(
        not_xz.is_empty(),
        "modules not stored as shipped: {not_xz:?}"
    );

    let tree = ModuleTree::open(&Root::new(&root.dir), kver).unwrap();
    let queries: Vec<String> = held.iter().map(|p| support::module_name(p)).collect();
    let next = AtomicUsize::new(0);
    let want = Mutex::new(vec![None; queries.len()]);
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= queries.len() {
                    break;
                }
                let r = oracle(&root.dir, kver, &queries[i]);
                want.lock().unwrap()[i] = r;
            });
        }
    });
    let want = want.into_inner().unwrap();
    let mut diffs = Vec::new();
    let mut missing = Vec::new();
    for (q, w) in queries.iter().zip(&want) {
        // The modules and their order; the options the root's /etc/modprobe.d gives
        // them (nbd-client's max_part=, mdadm's start_ro=) are the root's, not what
        // the image's resolution is compared on.
        let modules = |v: &Option<Vec<String>>| {
            v.as_ref().map(|lines| {
                lines
                    .iter()
                    .map(|l| match l.strip_prefix("insmod ") {
                        Some(rel) => rel.split_whitespace().next().unwrap_or(rel).to_string(),
                        None => l.clone(),
                    })
                    .collect::<Vec<_>>()
            })
        };
        let got = crate::kmod_modprobe::ours(&tree, q);
        if modules(&got) != modules(w) {
            diffs.push(format!("{q}:\n  composer: {got:?}\n  modprobe: {w:?}"));
        }
        for line in w.iter().flatten() {
            if let Some(rel) = line.strip_prefix("insmod ") {
                let rel = rel.split_whitespace().next().unwrap_or(rel);
                if !held.iter().any(|h| h == rel) {
                    missing.push(format!("{rel} (for {q})"));
                }
            }
        }
    }
    missing.sort();
    missing.dedup();
    eprintln!(
        "{}: {} modules, {} differences from the release's modprobe, {} missing",
        release.suite(),
        queries.len(),
        diffs.len(),
        missing.len()
    );
    assert!(diffs.is_empty(), "{}", diffs.join("\n"));
    assert!(missing.is_empty(), "missing: {missing:?}");
}

#[test]
fn debian_13_modules_resolve_like_its_modprobe() {
    resolves_like_the_releases_modprobe(Release::Trixie);
}

#[test]
fn debian_unstable_modules_resolve_like_its_modprobe() {
    resolves_like_the_releases_modprobe(Release::Sid);
}

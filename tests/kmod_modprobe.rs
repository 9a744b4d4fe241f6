//! Acceptance: for every module of Debian's kernel package, composer's
//! probe list (dependencies and soft dependencies, in order) is what
//! `modprobe --show-depends` prints on the same tree after depmod.
//! Composer reads the package as shipped (no metadata: it computes the
//! dependencies itself), and also through depmod's indexes and through the
//! text files alone.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use composer::resolve::kmod::Step;
use composer::resolve::kmod::{ModuleTree, TreeSource};
use composer::resolve::root::Root;

/// modprobe's lines with the module directory cut off the paths.
fn oracle(base: &Path, kver: &str, conf: &Path, query: &str) -> Option<Vec<String>> {
    show_depends(
        Command::new("modprobe")
            .arg("-C")
            .arg(conf)
            .arg("-d")
            .arg(base)
            .args(["-S", kver, "--show-depends", query]),
        kver,
    )
}

/// The lines of a `modprobe --show-depends` run by `cmd` for kernel `kver`, the module
/// directory cut off the paths; None when it fails.
pub(crate) fn show_depends(cmd: &mut Command, kver: &str) -> Option<Vec<String>> {
    let out = cmd.output().expect("run modprobe");
    if !out.status.success() {
        return None;
    }
    let marker = format!("/lib/modules/{kver}/");
    Some(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| {
                let l = l.trim_end();
                match (l.strip_prefix("insmod "), l.rfind(&marker)) {
                    (Some(_), Some(at)) => format!("insmod {}", &l[at + marker.len()..]),
                    _ => l.to_string(),
                }
            })
            .collect(),
    )
}

/// composer's probe list for `query`, as [`show_depends`] prints modprobe's.
pub(crate) fn ours(tree: &ModuleTree, query: &str) -> Option<Vec<String>> {
    tree.show_depends(query, false).map(|list| {
        list.into_iter()
            .map(|p| match p.step {
                Step::Insmod { relpath, .. } => format!("insmod {relpath}"),
                Step::Builtin { name } => format!("builtin {name}"),
                Step::Install { command, .. } => format!("install {command}"),
            })
            .collect()
    })
}

/// Runs modprobe for every query on all cores.
fn oracle_all(
    base: &Path,
    kver: &str,
    conf: &Path,
    queries: &[String],
) -> Vec<Option<Vec<String>>> {
    let next = AtomicUsize::new(0);
    let out = Mutex::new(vec![None; queries.len()]);
    std::thread::scope(|s| {
        for _ in 0..std::thread::available_parallelism().map_or(2, |n| n.get()) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= queries.len() {
                    break;
                }
                let r = oracle(base, kver, conf, &queries[i]);
                out.lock().unwrap()[i] = r;
            });
        }
    });
    out.into_inner().unwrap()
}

fn compare(
    label: &str,
    tree: &ModuleTree,
    queries: &[String],
    want: &[Option<Vec<String>>],
) -> Vec<String> {
    let mut diffs = Vec::new();
    for (q, w) in queries.iter().zip(want) {
        let got = ours(tree, q);
        if &got != w {
            diffs.push(format!(
                "[{label}] {q}:\n  composer: {got:?}\n  modprobe: {w:?}"
            ));
        }
    }
    diffs
}

/// A copy of depmod's metadata without the .bin indexes (text only), with
/// a `kernel` link to the package's modules.
fn text_only_tree(base: &Path, kver: &str, into: &Path) -> PathBuf {
    let src = base.join("lib/modules").join(kver);
    let dst = into.join("lib/modules").join(kver);
    std::fs::create_dir_all(&dst).unwrap();
    for e in std::fs::read_dir(&src).unwrap().flatten() {
        let name = e.file_name().into_string().unwrap();
        if name == "kernel" {
            let target = std::fs::read_link(e.path()).unwrap();
            std::os::unix::fs::symlink(target, dst.join("kernel")).unwrap();
        } else if !name.ends_with(".bin") {
            std::fs::copy(e.path(), dst.join(&name)).unwrap();
        }
    }
    into.to_path_buf()
}

#[test]
fn every_module_probes_like_modprobe() {
    if support::require_tool("modprobe", "kmod").is_none() {
        return;
    }
    let Some(kernel) = support::debian_kernel() else {
        return;
    };
    let Some(base) = support::debian_kernel_depmod(&kernel) else {
        return;
    };
    let scratch = support::Scratch::new("kmod-modprobe");
    let conf = scratch.join("empty-modprobe.d");
    std::fs::create_dir_all(&conf).unwrap();

    let scanned = ModuleTree::open(&Root::new(&kernel.root), &kernel.version).unwrap();
    assert!(matches!(scanned.source, TreeSource::Scanned { .. }));
    let indexed = ModuleTree::open(&Root::new(&base), &kernel.version).unwrap();
    assert_eq!(indexed.source, TreeSource::Indexes);
    let text_root = text_only_tree(&base, &kernel.version, &scratch.join("text"));
    let text = ModuleTree::open(&Root::new(&text_root), &kernel.version).unwrap();
    assert_eq!(text.source, TreeSource::Text);

    let mut queries: Vec<String> = scanned.modules.iter().map(|m| m.name.clone()).collect();
    let n_modules = queries.len();
    assert!(n_modules > 3000, "{n_modules} modules");
    // Aliases without wildcards that people type: filesystems and crypto.
    let aliases = std::fs::read_to_string(
        base.join("lib/modules")
            .join(&kernel.version)
            .join("modules.alias"),
    )
    .unwrap();
    let mut extra: Vec<String> = aliases
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .filter(|a| {
            (a.starts_with("fs-") || a.starts_with("crypto-")) && !a.contains(['*', '?', '['])
        })
        .map(str::to_string)
        .collect();
    extra.sort();
    extra.dedup();
    queries.extend(extra);
    queries.extend(["sha256", "crc32c", "no-such-module-anywhere", "unix"].map(String::from));

    let started = std::time::Instant::now();
    let want = oracle_all(&base, &kernel.version, &conf, &queries);
    eprintln!(
        "modprobe --show-depends x{}: {:?}",
        queries.len(),
        started.elapsed()
    );
    let started = std::time::Instant::now();
    let mut diffs = compare("scanned", &scanned, &queries, &want);
    eprintln!("composer x{}: {:?}", queries.len(), started.elapsed());
    diffs.extend(compare("indexes", &indexed, &queries, &want));
    diffs.extend(compare("text", &text, &queries, &want));
    let softdep_modules = want
        .iter()
        .take(n_modules)
        .zip(&queries)
        .filter(|(w, q)| {
            w.as_ref().is_some_and(|w| {
                w.iter().filter(|l| l.starts_with("insmod")).count() > 1
                    && scanned.config.softdep(q).is_some()
            })
        })
        .count();
    eprintln!(
        "{} queries ({n_modules} modules, {softdep_modules} with soft dependencies), {} differences",
        queries.len(),
        diffs.len()
    );
    assert!(
        diffs.is_empty(),
        "{} differences:\n{}",
        diffs.len(),
        diffs.join("\n")
    );
}

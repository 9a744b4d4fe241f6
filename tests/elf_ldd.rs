//! composer's ELF resolution against the real loader: for every dynamically
//! linked ELF executable under /usr/bin, /usr/sbin and /usr/lib/systemd on
//! this machine, the libraries composer resolves inside the root `/` must be
//! exactly those `ldd` reports (linux-vdso aside, both sides canonicalised),
//! and the libraries it cannot find must be those ldd reports "not found".

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use composer::resolve::elf::{self, BinaryRequest, DlopenLevel, ElfOptions, How, Hwcaps};

/// Every regular file under `dir` (recursively), canonicalised.
fn files_under(dir: &Path, recursive: bool, out: &mut BTreeSet<PathBuf>) {
    let Ok(rd) = fs::read_dir(dir) else { return };
    for e in rd.flatten() {
        let p = e.path();
        let Ok(meta) = fs::metadata(&p) else { continue };
        if meta.is_dir() {
            if recursive && !e.file_type().is_ok_and(|t| t.is_symlink()) {
                files_under(&p, recursive, out);
            }
        } else if meta.is_file() {
            if let Ok(c) = fs::canonicalize(&p) {
                out.insert(c);
            }
        }
    }
}

/// The dynamically linked ELF executables (those with PT_INTERP) among
/// `files`, and how many were skipped as static or not ELF.
fn dynamic_executables(files: &BTreeSet<PathBuf>) -> (Vec<PathBuf>, usize, usize) {
    let (mut exes, mut statics, mut other) = (Vec::new(), 0, 0);
    for f in files {
        let Ok(file) = fs::File::open(f) else {
            other += 1;
            continue;
        };
        let Ok(hf) = elf::HeadFile::new(file) else {
            other += 1;
            continue;
        };
        match elf::parse(&hf) {
            Ok(e) if e.interp.is_some() => exes.push(f.clone()),
            Ok(e) if e.kind == elf::ET_EXEC || e.is_static() => statics += 1,
            // Shared libraries without PT_INTERP are not executables.
            _ => other += 1,
        }
    }
    (exes, statics, other)
}

#[derive(Debug, Default, PartialEq, Eq)]
struct Report {
    found: BTreeSet<PathBuf>,
    missing: BTreeSet<String>,
}

/// Parses ldd's output. `None` when ldd did not list libraries.
fn parse_ldd(stdout: &str) -> Option<Report> {
    let mut r = Report::default();
    let mut any = false;
    for line in stdout.lines() {
        let line = line.trim();
        if line.is_empty() || line.contains("statically linked") || line.contains("not a dynamic") {
            continue;
        }
        if let Some((name, rest)) = line.split_once(" => ") {
            any = true;
            let rest = rest.trim();
            if rest.starts_with("not found") {
                r.missing.insert(name.trim().to_string());
                continue;
            }
            let path = rest.split(" (0x").next().unwrap_or(rest).trim();
            if path.starts_with('/') {
                r.found.insert(canon(Path::new(path)));
            }
        } else {
            let path = line.split(" (0x").next().unwrap_or(line).trim();
            if path.starts_with('/') {
                any = true;
                r.found.insert(canon(Path::new(path)));
            }
            // Anything else without a slash is linux-vdso.so.1 / linux-gate.so.1.
        }
    }
    any.then_some(r)
}

fn canon(p: &Path) -> PathBuf {
    fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
}

fn run_ldd(ldd: &Path, exes: &[PathBuf]) -> BTreeMap<PathBuf, Result<Report, String>> {
    let chunks: Vec<&[PathBuf]> = exes.chunks(exes.len().div_ceil(2).max(1)).collect();
    std::thread::scope(|s| {
        let handles: Vec<_> = chunks
            .into_iter()
            .map(|chunk| {
                s.spawn(move || {
                    chunk
                        .iter()
                        .map(|exe| {
                            let out = Command::new(ldd).arg(exe).output();
                            let r = match out {
                                Err(e) => Err(format!("cannot run ldd: {e}")),
                                Ok(o) => {
                                    let stdout = String::from_utf8_lossy(&o.stdout);
                                    match parse_ldd(&stdout) {
                                        Some(r) => Ok(r),
                                        None => Err(format!(
                                            "ldd exited {} and listed nothing: {}",
                                            o.status,
                                            String::from_utf8_lossy(&o.stderr).trim()
                                        )),
                                    }
                                }
                            };
                            (exe.clone(), r)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("ldd thread panicked"))
            .collect()
    })
}

#[test]
fn libraries_match_ldd_for_every_executable() {
    let Some(ldd) = support::require_tool("ldd", "libc-bin") else {
        return;
    };
    let mut files = BTreeSet::new();
    files_under(Path::new("/usr/bin"), true, &mut files);
    files_under(Path::new("/usr/sbin"), true, &mut files);
    files_under(Path::new("/usr/lib/systemd"), true, &mut files);
    let (exes, statics, other) = dynamic_executables(&files);
    eprintln!(
        "{} files: {} dynamic ELF executables, {} static, {} other (scripts, data, libraries)",
        files.len(),
        exes.len(),
        statics,
        other
    );
    assert!(!exes.is_empty(), "no dynamically linked executable found");

    // composer: one resolution for all of them, as one manifest would do it.
    let mut opts = ElfOptions::new("/");
    opts.dlopen = DlopenLevel::None;
    // ldd uses the glibc-hwcaps subdirectories this CPU supports.
    opts.hwcaps = Hwcaps::Host;
    let requests: Vec<BinaryRequest> = exes
        .iter()
        .map(|e| BinaryRequest::program(e).optional(true))
        .collect();
    let started = std::time::Instant::now();
    let res = elf::resolve_all(&requests, &opts);
    eprintln!(
        "composer resolved {} executables in {:?}",
        exes.len(),
        started.elapsed()
    );

    let started = std::time::Instant::now();
    let ldd_reports = run_ldd(&ldd, &exes);
    eprintln!(
        "ldd ran on {} executables in {:?}",
        exes.len(),
        started.elapsed()
    );

    let mut compared = 0;
    let mut skipped = Vec::new();
    let mut differences = Vec::new();
    for (exe, r) in exes.iter().zip(&res.requests) {
        let theirs = match &ldd_reports[exe] {
            Ok(rep) => rep,
            Err(e) => {
                skipped.push(format!("{}: {e}", exe.display()));
                continue;
            }
        };
        compared += 1;
        let ours = Report {
            found: r
                .dependencies()
                .map(|o| canon(&Path::new("/").join(&o.real)))
                .collect(),
            missing: r
                .problems
                .iter()
                .filter(|p| p.fatal)
                .map(|p| match &p.how {
                    How::Needed(n) => n.clone(),
                    _ => p.message.clone(),
                })
                .collect(),
        };
        if ours != *theirs {
            let mut d = format!("{}:", exe.display());
            for p in ours.found.difference(&theirs.found) {
                d.push_str(&format!("\n    only composer: {}", p.display()));
            }
            for p in theirs.found.difference(&ours.found) {
                d.push_str(&format!("\n    only ldd:      {}", p.display()));
            }
            for n in ours.missing.difference(&theirs.missing) {
                d.push_str(&format!("\n    composer cannot find: {n}"));
            }
            for n in theirs.missing.difference(&ours.missing) {
                d.push_str(&format!("\n    ldd cannot find:      {n}"));
            }
            differences.push(d);
        }
    }
    for s in &skipped {
        eprintln!("note: skipped {s}");
    }
    for d in &differences {
        eprintln!("DIFFERENCE {d}");
    }
    eprintln!(
        "compared {compared} executables with ldd: {} differences, {} skipped",
        differences.len(),
        skipped.len()
    );
    assert!(compared > 0, "ldd could not be compared on any executable");
    assert!(
        differences.is_empty(),
        "{} of {compared} executables resolve differently from ldd (listed above)",
        differences.len()
    );
}

#[test]
fn ldd_output_parser() {
    let out = "\tlinux-vdso.so.1 (0x00007ffd)\n\tlibtinfo.so.6 => /lib/x86_64-linux-gnu/libtinfo.so.6 (0x00007f)\n\tlibgone.so.1 => not found\n\t/lib64/ld-linux-x86-64.so.2 (0x00007f)\n";
    let r = parse_ldd(out).unwrap();
    assert_eq!(r.missing, BTreeSet::from(["libgone.so.1".to_string()]));
    assert_eq!(r.found.len(), 2);
    assert_eq!(parse_ldd("\tstatically linked\n"), None);
}

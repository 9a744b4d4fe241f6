//! `composer why`: why an entry, a kernel module or a firmware file is in
//! an image (the manifest line and the rule that brought it in, and for
//! binaries every chain of loads), or without a target, the image's
//! modules and firmware by size.

use std::collections::HashMap;
use std::fmt::Write as _;

use crate::entry::{Entry, Kind, Origin};
use crate::error::{Error, Result};
use crate::resolve::kmod;
use crate::spec::{ImageSpec, Omitted, OmittedKind};

/// A size for people: `1.2 MiB`.
fn human(n: u64) -> String {
    if n >= 1 << 20 {
        format!("{:.1} MiB", n as f64 / (1u64 << 20) as f64)
    } else if n >= 1 << 10 {
        format!("{:.1} KiB", n as f64 / 1024.0)
    } else {
        format!("{n} B")
    }
}

fn size_of(e: &Entry) -> u64 {
    match &e.kind {
        Kind::File { source, .. } => source.size,
        _ => 0,
    }
}

/// The module name of an image path under `lib/modules/`, if it is one.
fn module_of(name: &str) -> Option<String> {
    if !name.contains("lib/modules/") {
        return None;
    }
    let base = name.rsplit('/').next()?;
    kmod::is_module_file(base).then(|| kmod::modname(base))
}

/// One entry that matches the target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hit {
    /// The image path, without the leading `/`.
    pub path: String,
    /// File data in bytes (0 for anything but a file).
    pub size: u64,
    /// The manifest line that brought it in.
    pub origin: Origin,
    /// The rule, or chain of rules, that brought it in.
    pub rule: Option<String>,
}

/// A module of the image with the firmware it brought in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModuleSize {
    pub name: String,
    pub module_bytes: u64,
    pub firmware_bytes: u64,
    pub firmware_files: usize,
    /// The chain of rules that took the module.
    pub why: String,
}

/// What `why` found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Explanation {
    /// The entries a target matches, and for a binary's file every chain
    /// of loads that brought it in.
    Target {
        target: String,
        hits: Vec<Hit>,
        chains: Vec<String>,
        /// What `[omit]` took out that the target names.
        omitted: Vec<Omitted>,
    },
    /// No target: the modules and firmware, largest first.
    Modules(Vec<ModuleSize>),
}

/// With a target (an image path, a module name or a firmware name), why
/// each matching entry is in the image, with every chain of loads that
/// brought a binary's file in; without one, the modules and firmware of
/// the image by size.
pub fn explain(spec: &ImageSpec, target: Option<&str>) -> Result<Explanation> {
    let entries: Vec<&Entry> = spec.entries().collect();
    let Some(t) = target else {
        return Ok(Explanation::Modules(modules_by_size(&entries)));
    };
    let omitted = omitted(&spec.omitted, t);
    let hits = match hits(&entries, t) {
        Err(_) if !omitted.is_empty() => Vec::new(),
        h => h?,
    };
    let mut chains = Vec::new();
    if let Some(res) = &spec.elf {
        let path = std::path::Path::new("/").join(t.trim_start_matches('/'));
        for chain in res.why(&path) {
            chains.push(res.render_chain(&chain));
        }
    }
    Ok(Explanation::Target {
        target: t.to_string(),
        hits,
        chains,
        omitted,
    })
}

/// What `[omit]` took out that target `t` names: a module by name, a
/// firmware file by name, or an image path.
fn omitted(all: &[Omitted], t: &str) -> Vec<Omitted> {
    let path = t.trim_start_matches('/');
    let modname = kmod::normalize_modname(path);
    all.iter()
        .filter(|o| match o.kind {
            OmittedKind::Module => !path.contains('/') && o.name == modname,
            OmittedKind::Firmware => o.name == path,
            OmittedKind::File => o.name == path,
        })
        .cloned()
        .collect()
}

impl Explanation {
    /// The explanation as `composer why` prints it.
    pub fn text(&self) -> String {
        let mut out = String::new();
        match self {
            Explanation::Target {
                hits,
                chains,
                omitted,
                ..
            } => {
                for o in omitted {
                    let what = match o.kind {
                        OmittedKind::Module => "module",
                        OmittedKind::Firmware => "firmware",
                        OmittedKind::File => "/",
                    };
                    let name = match o.kind {
                        OmittedKind::File => o.name.clone(),
                        _ => format!(" {}", o.name),
                    };
                    let _ = writeln!(out, "{what}{name}: left out by {} ({})", o.by, o.rule);
                }
                for h in hits {
                    let _ = writeln!(out, "/{} ({})", h.path, human(h.size));
                    let _ = writeln!(out, "  {}", h.origin);
                    if let Some(rule) = &h.rule {
                        let _ = writeln!(out, "  {rule}");
                    }
                }
                for c in chains {
                    let _ = writeln!(out, "  {c}");
                }
            }
            Explanation::Modules(report) => {
                let mods: u64 = report.iter().map(|r| r.module_bytes).sum();
                let fw: u64 = report.iter().map(|r| r.firmware_bytes).sum();
                let _ = writeln!(
                    out,
                    "{} modules ({}) and {} firmware files ({}), largest first:",
                    report.len(),
                    human(mods),
                    report.iter().map(|r| r.firmware_files).sum::<usize>(),
                    human(fw)
                );
                let _ = writeln!(
                    out,
                    "{:>10} {:>10} {:>10}  module  (why)",
                    "total", "module", "firmware"
                );
                for r in report {
                    let fwn = if r.firmware_files > 0 {
                        format!(" +{} fw", r.firmware_files)
                    } else {
                        String::new()
                    };
                    let _ = writeln!(
                        out,
                        "{:>10} {:>10} {:>10}  {}{fwn}  ({})",
                        human(r.module_bytes + r.firmware_bytes),
                        human(r.module_bytes),
                        human(r.firmware_bytes),
                        r.name,
                        r.why
                    );
                }
            }
        }
        out
    }

    /// The explanation as JSON: with a target `{target, entries: [{path,
    /// size, origin: {file, line, column} or {profile, line}, rule}], chains: [...]}`, without
    /// one `{modules: [{name, module_bytes, firmware_bytes,
    /// firmware_files, why}]}` (largest first).
    pub fn json(&self) -> serde_json::Value {
        match self {
            Explanation::Target {
                target,
                hits,
                chains,
                omitted,
            } => serde_json::json!({
                "omitted": omitted.iter().map(|o| serde_json::json!({
                    "kind": match o.kind {
                        OmittedKind::Module => "module",
                        OmittedKind::Firmware => "firmware",
                        OmittedKind::File => "file",
                    },
                    "name": o.name,
                    "by": origin_json(&o.by),
                    "rule": o.rule,
                })).collect::<Vec<_>>(),
                "target": target,
                "entries": hits.iter().map(|h| serde_json::json!({
                    "path": format!("/{}", h.path),
                    "size": h.size,
                    "origin": origin_json(&h.origin),
                    "rule": h.rule,
                })).collect::<Vec<_>>(),
                "chains": chains,
            }),
            Explanation::Modules(report) => serde_json::json!({
                "modules": report.iter().map(|r| serde_json::json!({
                    "name": r.name,
                    "module_bytes": r.module_bytes,
                    "firmware_bytes": r.firmware_bytes,
                    "firmware_files": r.firmware_files,
                    "why": r.why,
                })).collect::<Vec<_>>(),
            }),
        }
    }
}

/// An origin as JSON: `{file, line, column}`, and for a profile composer
/// carries `{profile, line}` (its copy in composer's cache is no file of the
/// user's).
pub fn origin_json(o: &Origin) -> serde_json::Value {
    match o.profile() {
        Some(p) => serde_json::json!({ "profile": p, "line": o.line }),
        None => serde_json::json!({
            "file": &**o.file(),
            "line": o.line,
            "column": o.column,
        }),
    }
}

fn hits(entries: &[&Entry], t: &str) -> Result<Vec<Hit>> {
    let path = t.trim_start_matches('/');
    let modname = kmod::normalize_modname(path.rsplit('/').next().unwrap_or(path));
    let mut hits = Vec::new();
    for e in entries {
        let name = e.name.to_string();
        let is_module = module_of(&name).is_some_and(|m| m == modname && !path.contains('/'));
        let is_fw = name.contains("lib/firmware/")
            && (name.ends_with(&format!("/{path}"))
                || [".zst", ".xz"]
                    .iter()
                    .any(|s| name.ends_with(&format!("/{path}{s}"))));
        if name != path && !is_module && !is_fw {
            continue;
        }
        let origin = e.origin.without_rule();
        let rule = e.origin.rule().map(str::to_string);
        hits.push(Hit {
            size: size_of(e),
            path: name,
            origin,
            rule,
        });
    }
    if hits.is_empty() {
        return Err(Error::usage(format!("nothing in the image matches `{t}`"))
            .with_hint("give an image path (/lib/modules/...), a module name or a firmware name"));
    }
    Ok(hits)
}

fn modules_by_size(entries: &[&Entry]) -> Vec<ModuleSize> {
    let mut report: Vec<ModuleSize> = Vec::new();
    let mut at: HashMap<String, usize> = HashMap::new();
    for e in entries {
        let name = e.name.to_string();
        if let Some(m) = module_of(&name) {
            at.insert(m.clone(), report.len());
            report.push(ModuleSize {
                name: m,
                module_bytes: size_of(e),
                firmware_bytes: 0,
                firmware_files: 0,
                why: e.origin.rule().unwrap_or("").to_string(),
            });
        }
    }
    for e in entries {
        let name = e.name.to_string();
        if !name.contains("lib/firmware/") || !matches!(e.kind, Kind::File { .. }) {
            continue;
        }
        let Some(rule) = e.origin.rule() else {
            continue;
        };
        let mut parts: Vec<&str> = rule.split(" -> ").collect();
        if parts.last().is_some_and(|p| p.starts_with("firmware ")) {
            parts.pop();
        }
        let owner = parts
            .last()
            .and_then(|p| p.split_whitespace().next())
            .unwrap_or("");
        if let Some(&i) = at.get(owner) {
            report[i].firmware_bytes += size_of(e);
            report[i].firmware_files += 1;
        }
    }
    report.sort_by(|a, b| {
        (b.module_bytes + b.firmware_bytes)
            .cmp(&(a.module_bytes + a.firmware_bytes))
            .then_with(|| a.name.cmp(&b.name))
    });
    report
}

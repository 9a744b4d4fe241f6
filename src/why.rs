//! `composer why`: why an entry, a kernel module or a firmware file is in
//! an image (the manifest line and the rule that brought it in, and for
//! binaries every chain of loads), or without a target, the image's
//! modules and firmware by size.

use std::collections::HashMap;
use std::fmt::Write as _;

use crate::entry::{Entry, Kind};
use crate::error::{Error, Result};
use crate::resolve::kmod;
use crate::spec::ImageSpec;

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

/// With a target (an image path, a module name or a firmware name), why
/// each matching entry is in the image, with every chain of loads that
/// brought a binary's file in; without one, the modules and firmware of
/// the image by size.
pub fn explain(spec: &ImageSpec, target: Option<&str>) -> Result<String> {
    let entries: Vec<&Entry> = spec.entries().collect();
    let mut out = entries_why(&entries, target)?;
    if let (Some(t), Some(res)) = (target, &spec.elf) {
        let path = std::path::Path::new("/").join(t.trim_start_matches('/'));
        for chain in res.why(&path) {
            out.push_str("  ");
            out.push_str(&res.render_chain(&chain));
            out.push('\n');
        }
    }
    Ok(out)
}

fn entries_why(entries: &[&Entry], target: Option<&str>) -> Result<String> {
    let mut out = String::new();
    match target {
        Some(t) => {
            let path = t.trim_start_matches('/');
            let modname = kmod::normalize_modname(path.rsplit('/').next().unwrap_or(path));
            let mut hits = 0;
            for e in entries {
                let name = e.name.to_string();
                let is_module =
                    module_of(&name).is_some_and(|m| m == modname && !path.contains('/'));
                let is_fw = name.contains("lib/firmware/")
                    && (name.ends_with(&format!("/{path}"))
                        || [".zst", ".xz"]
                            .iter()
                            .any(|s| name.ends_with(&format!("/{path}{s}"))));
                if name != path && !is_module && !is_fw {
                    continue;
                }
                hits += 1;
                let _ = writeln!(out, "/{name} ({})", human(size_of(e)));
                let _ = writeln!(out, "  {}", e.origin);
                if let Some(rule) = &e.origin.rule {
                    let _ = writeln!(out, "  {rule}");
                }
            }
            if hits == 0 {
                return Err(
                    Error::usage(format!("nothing in the image matches `{t}`")).with_hint(
                        "give an image path (/lib/modules/...), a module name or a firmware name",
                    ),
                );
            }
        }
        None => {
            // module name -> (module bytes, firmware bytes, firmware files)
            let mut report: Vec<(String, u64, u64, usize, String)> = Vec::new();
            let mut at: HashMap<String, usize> = HashMap::new();
            for e in entries {
                let name = e.name.to_string();
                if let Some(m) = module_of(&name) {
                    at.insert(m.clone(), report.len());
                    let chain = e.origin.rule.as_deref().unwrap_or("").to_string();
                    report.push((m, size_of(e), 0, 0, chain));
                }
            }
            for e in entries {
                let name = e.name.to_string();
                if !name.contains("lib/firmware/") || !matches!(e.kind, Kind::File { .. }) {
                    continue;
                }
                let Some(rule) = e.origin.rule.as_deref() else {
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
                    report[i].2 += size_of(e);
                    report[i].3 += 1;
                }
            }
            report.sort_by(|a, b| (b.1 + b.2).cmp(&(a.1 + a.2)).then_with(|| a.0.cmp(&b.0)));
            let (mods, fw): (u64, u64) = report.iter().fold((0, 0), |(m, f), r| (m + r.1, f + r.2));
            let _ = writeln!(
                out,
                "{} modules ({}) and {} firmware files ({}), largest first:",
                report.len(),
                human(mods),
                report.iter().map(|r| r.3).sum::<usize>(),
                human(fw)
            );
            let _ = writeln!(
                out,
                "{:>10} {:>10} {:>10}  module  (why)",
                "total", "module", "firmware"
            );
            for (name, m, f, n, chain) in &report {
                let fwn = if *n > 0 {
                    format!(" +{n} fw")
                } else {
                    String::new()
                };
                let _ = writeln!(
                    out,
                    "{:>10} {:>10} {:>10}  {name}{fwn}  ({chain})",
                    human(m + f),
                    human(*m),
                    human(*f)
                );
            }
        }
    }
    Ok(out)
}

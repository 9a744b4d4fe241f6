//! `[systemd]`: the root's own systemd in an image, with what its units need,
//! read from the unit files themselves.
//!
//! Every unit named is looked up in the root (`/etc/systemd/system`, then
//! `/usr/lib/systemd/system`, then `/lib/systemd/system`; an instance
//! `foo@bar.service` through its template `foo@.service`) and taken with:
//! the units it pulls in (`Requires=`, `Requisite=`, `Wants=`, `BindsTo=`,
//! `Upholds=`, `OnFailure=`, `OnSuccess=`, the `.wants/` and `.requires/`
//! directories of the vendor unit directories (not /etc's, which say what
//! the running system enables), a socket's, path's or timer's service), its drop-ins
//! (`foo.service.d/*.conf`), the alias it may be a link to, and the programs
//! its `Exec*=` lines run (resolved with their libraries like `binaries`;
//! a program behind `-` may be missing). Generators are programs of
//! `system-generators/`; udev rules files come with the helpers their
//! `PROGRAM`, `IMPORT{program}` and `RUN` keys run from `/usr/lib/udev`.

use std::collections::{BTreeSet, HashSet, VecDeque};
use std::path::Path;

use super::item::{Added, Found};
use crate::entry::{Kind, Origin};
use crate::error::{Error, Result, Warning};
use crate::manifest::load::{expand, Loaded};
use crate::resolve::elf::BinaryRequest;
use crate::resolve::root::Root;
use crate::resolve::systemd::{
    exec_program, settings, template, BUILTIN_UNITS as BUILTIN, EXEC_KEYS as EXECS,
    PULLING_KEYS as PULLS, REQUIRING_KEYS as NEEDS,
};

const UNIT_DIRS: [&str; 3] = [
    "/etc/systemd/system",
    "/usr/lib/systemd/system",
    "/lib/systemd/system",
];
const GENERATOR_DIRS: [&str; 2] = [
    "/usr/lib/systemd/system-generators",
    "/lib/systemd/system-generators",
];
const RULE_DIRS: [&str; 3] = [
    "/etc/udev/rules.d",
    "/usr/lib/udev/rules.d",
    "/lib/udev/rules.d",
];
const UDEV_DIRS: [&str; 2] = ["/usr/lib/udev", "/lib/udev"];

/// The most units one image takes (a bound for a hostile root).
const MAX_UNITS: usize = 4000;
/// The largest unit, drop-in or rules file read.
const MAX_FILE: u64 = 1 << 20;

fn with_rule(origin: &Origin, rule: String) -> Origin {
    origin.with_rule(rule)
}

/// A file or symlink of the root, as an item at the same path.
fn take(root: &Root, inside: &str, origin: &Origin, out: &mut Vec<Added>) -> Result<()> {
    // Its directories resolved inside the root: a host symlink on the way
    // (an absolute one of the root's) is not followed out of it.
    let host = root
        .resolve(Path::new(inside), false)
        .map_err(|e| Error::at(origin.clone(), format!("`{inside}`: {e}")))?;
    let meta = std::fs::symlink_metadata(&host)
        .map_err(|e| Error::at(origin.clone(), format!("`{inside}`: {e}")))?;
    let kind = if meta.file_type().is_symlink() {
        let target = std::fs::read_link(&host)
            .map_err(|e| Error::at(origin.clone(), format!("`{inside}`: {e}")))?;
        use std::os::unix::ffi::OsStrExt;
        Kind::Symlink {
            target: target.as_os_str().as_bytes().into(),
        }
    } else {
        Kind::File {
            source: crate::resolve::file_source(
                &host,
                &crate::resolve::Stat {
                    meta: meta.clone(),
                    nofollow: true,
                },
                origin,
            )?
            .into(),
            links: crate::entry::Links::default(),
        }
    };
    let mode = match &kind {
        Kind::Symlink { .. } => 0o777,
        _ => {
            use std::os::unix::fs::MetadataExt;
            meta.mode() & 0o7777
        }
    };
    out.push(Added {
        dest: inside.as_bytes().to_vec(),
        kind,
        mode,
        origin: origin.clone(),
    });
    Ok(())
}

/// Reads a small text file of the root.
fn read_text(root: &Root, inside: &str) -> Option<String> {
    let host = root.resolve(Path::new(inside), true).ok()?;
    let bytes = crate::io::read_regular(&host, MAX_FILE).ok()?;
    String::from_utf8(bytes).ok()
}

/// Where unit `name` is in the root, if anywhere.
fn unit_path(root: &Root, name: &str) -> Option<String> {
    for dir in UNIT_DIRS {
        for n in std::iter::once(name.to_string()).chain(template(name)) {
            let p = format!("{dir}/{n}");
            let host = root.host_of(Path::new(&p), false);
            if host.is_some_and(|h| std::fs::symlink_metadata(h).is_ok()) {
                return Some(p);
            }
        }
    }
    None
}

/// Entries of a directory of the root, sorted, as paths inside it.
fn entries(root: &Root, dir: &str) -> Vec<String> {
    let Some(Ok(rd)) = root.host_of(Path::new(dir), true).map(std::fs::read_dir) else {
        return Vec::new();
    };
    let mut names: Vec<String> = rd
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .collect();
    names.sort();
    names.into_iter().map(|n| format!("{dir}/{n}")).collect()
}

/// Settings of `[systemd]` merged over the documents: the lists add up.
#[derive(Default)]
struct Asked {
    units: Vec<(String, Origin)>,
    units_if_present: Vec<(String, Origin)>,
    exclude_units: Vec<(String, Origin)>,
    generators: Vec<(String, Origin)>,
    generators_if_present: Vec<(String, Origin)>,
    rules: Vec<(String, Origin)>,
    rules_if_present: Vec<(String, Origin)>,
}

fn asked(loaded: &Loaded) -> Result<Asked> {
    let mut a = Asked::default();
    for doc in &loaded.docs {
        let Some(s) = &doc.manifest.systemd else {
            continue;
        };
        let s = &s.value;
        for (list, into) in [
            (&s.units, &mut a.units),
            (&s.units_if_present, &mut a.units_if_present),
            (&s.exclude_units, &mut a.exclude_units),
            (&s.generators, &mut a.generators),
            (&s.generators_if_present, &mut a.generators_if_present),
            (&s.udev_rules, &mut a.rules),
            (&s.udev_rules_if_present, &mut a.rules_if_present),
        ] {
            for v in list {
                into.push((expand(v, v.pos, doc, &loaded.vars)?, doc.origin(v.pos)));
            }
        }
    }
    // `[omit] units`: as exclude_units (units are taken for the image as a
    // whole, not per document).
    for doc in &loaded.docs {
        for v in doc.manifest.omit.iter().flat_map(|o| &o.value.units) {
            a.exclude_units
                .push((expand(v, v.pos, doc, &loaded.vars)?, doc.origin(v.pos)));
        }
    }
    Ok(a)
}

/// Resolves `[systemd]` of the loaded documents. An image with composer's shell
/// init runs no units: a profile's `[systemd]` (the network profile's) is left out
/// of it.
pub(super) fn add_all(loaded: &Loaded) -> Result<Found> {
    let mut found = Found {
        added: Vec::new(),
        programs: Vec::new(),
        warnings: Vec::new(),
    };
    if loaded.init == crate::manifest::model::InitSpec::Shell {
        return Ok(found);
    }
    let asked = asked(loaded)?;
    let root = Root::new(&loaded.root);
    let mut programs: BTreeSet<String> = BTreeSet::new();
    let search = super::binaries::options(loaded).search_path;
    // A program a unit runs: optional (a missing one is a warning), or left
    // out quietly when the unit ignores its failure (`-`) and it is absent.
    let mut program = |name: String, ignore: bool, origin: &Origin, found: &mut Found| {
        if !programs.insert(name.clone()) {
            return;
        }
        let present = if name.starts_with('/') {
            root.resolve(Path::new(&name), true)
                .is_ok_and(|p| p.exists())
        } else {
            search
                .iter()
                .any(|d| root.resolve(&d.join(&name), true).is_ok_and(|p| p.exists()))
        };
        if ignore && !present {
            return;
        }
        let o = with_rule(origin, format!("program {name}"));
        found
            .programs
            .push(BinaryRequest::program(name).optional(true).at(o));
    };

    // Units never taken, nor the links that want them.
    let excluded = crate::glob::set(
        &asked.exclude_units,
        crate::glob::Separator::Literal,
        crate::glob::Below::No,
    )?;
    // And what only the layers a hostonly image's machine lacks would need.
    let layers_left_out = super::systemd_layers::left_out(loaded)?;
    let excluded = |unit: &str| {
        excluded.as_ref().is_some_and(|g| g.is_match(unit)) || layers_left_out.contains(unit)
    };

    // Units, breadth first, each once.
    // (unit, origin, chain, needed: one missing is said).
    let needed = asked.units.iter().map(|u| (u, true));
    let if_present = asked.units_if_present.iter().map(|u| (u, false));
    let mut queue: VecDeque<(String, Origin, String, bool)> = needed
        .chain(if_present)
        .map(|((u, o), needed)| (u.clone(), o.clone(), format!("[systemd] unit {u}"), needed))
        .collect();
    let mut seen: HashSet<String> = HashSet::new();
    let mut taken: HashSet<String> = HashSet::new();
    // initrd-parse-etc.service, when taken: its file, origin, text, and
    // whether the root has drop-ins for it.
    let mut parse_etc: Option<(String, Origin, String, bool)> = None;
    while let Some((unit, origin, chain, needed)) = queue.pop_front() {
        if BUILTIN.contains(&unit.as_str()) || excluded(&unit) || !seen.insert(unit.clone()) {
            continue;
        }
        if seen.len() > MAX_UNITS {
            return Err(Error::at(
                origin,
                format!("[systemd] pulls in more than {MAX_UNITS} units"),
            ));
        }
        let o = with_rule(&origin, chain.clone());
        let Some(path) = unit_path(&root, &unit) else {
            // A unit only wanted may be missing, as systemd itself allows;
            // one that is needed is said, once.
            if needed {
                found.warnings.push(Warning {
                    origin: Some(o),
                    message: format!("unit `{unit}` is not in the root; left out ({chain})"),
                    details: Vec::new(),
                });
            } else {
                seen.remove(&unit);
            }
            continue;
        };
        let mut texts = Vec::new();
        let mut follow = |inside: String, found: &mut Found| -> Result<()> {
            if taken.insert(inside.clone()) {
                take(&root, &inside, &o, &mut found.added)?;
            }
            Ok(())
        };
        follow(path.clone(), &mut found)?;
        // An alias: a link to the unit it names.
        let host = root.host_of(Path::new(&path), false);
        if let Some(host) =
            host.filter(|h| std::fs::symlink_metadata(h).is_ok_and(|m| m.file_type().is_symlink()))
        {
            if let Some(target) = std::fs::read_link(&host)
                .ok()
                .and_then(|t| t.file_name().and_then(|n| n.to_str()).map(str::to_string))
            {
                queue.push_back((
                    target.clone(),
                    origin.clone(),
                    format!("{chain} -> alias {target}"),
                    true,
                ));
            }
        }
        let unit_text = read_text(&root, &path);
        texts.extend(unit_text.clone());
        let mut drop_ins = 0;
        let file = path.rsplit('/').next().unwrap_or(&unit).to_string();
        for dir in UNIT_DIRS {
            for name in [unit.clone(), file.clone()].iter().collect::<BTreeSet<_>>() {
                for conf in entries(&root, &format!("{dir}/{name}.d")) {
                    if conf.ends_with(".conf") {
                        drop_ins += 1;
                        follow(conf.clone(), &mut found)?;
                        if let Some(t) = read_text(&root, &conf) {
                            texts.push(t);
                        }
                    }
                }
                // What the admin enabled in /etc is for the running system,
                // not the initrd: only the vendor directories' links count.
                for kind in ["wants", "requires"] {
                    if dir.starts_with("/etc/") {
                        continue;
                    }
                    for want in entries(&root, &format!("{dir}/{name}.{kind}")) {
                        let w = want.rsplit('/').next().unwrap_or_default().to_string();
                        if excluded(&w) {
                            continue;
                        }
                        follow(want.clone(), &mut found)?;
                        queue.push_back((
                            w.clone(),
                            origin.clone(),
                            format!("{chain} -> {kind} {w}"),
                            kind == "requires",
                        ));
                    }
                }
            }
        }
        if unit == "initrd-parse-etc.service" {
            if let Some(text) = unit_text {
                parse_etc = Some((path.clone(), o.clone(), text, drop_ins > 0));
            }
        }
        for text in &texts {
            for (k, v) in settings(text) {
                if PULLS.contains(&k.as_str()) {
                    for u in v.split_whitespace().filter(|u| !u.contains('%')) {
                        queue.push_back((
                            u.to_string(),
                            origin.clone(),
                            format!("{chain} -> {k} {u}"),
                            NEEDS.contains(&k.as_str()),
                        ));
                    }
                } else if EXECS.contains(&k.as_str()) {
                    if let Some((p, ignore)) = exec_program(&v) {
                        program(p, ignore, &origin, &mut found);
                    }
                } else if k == "Service" || k == "Unit" {
                    queue.push_back((
                        v.clone(),
                        origin.clone(),
                        format!("{chain} -> {k} {v}"),
                        true,
                    ));
                }
            }
        }
        // A socket, path or timer starts its service of the same name.
        if let Some(base) = [".socket", ".path", ".timer"]
            .iter()
            .find_map(|s| unit.strip_suffix(s))
        {
            let service = format!("{base}.service");
            if unit_path(&root, &service).is_some() {
                queue.push_back((
                    service.clone(),
                    origin.clone(),
                    format!("{chain} -> {service}"),
                    true,
                ));
            }
        }
    }

    if let Some((path, o, text, has_drop_ins)) = parse_etc {
        add_parse_etc_drop_in(&root, &path, &o, &text, has_drop_ins, &mut found)?;
    }
    if let Some((_, origin)) = asked.units.first() {
        version_needs(&root, origin, &mut found)?;
    }

    let needed = asked.generators.iter().map(|g| (g, true));
    let if_present = asked.generators_if_present.iter().map(|g| (g, false));
    for ((name, origin), needed) in needed.chain(if_present) {
        if layers_left_out.contains(name) {
            continue;
        }
        let inside = GENERATOR_DIRS
            .iter()
            .map(|d| format!("{d}/{name}"))
            .find(|p| root.host_of(Path::new(p), true).is_some_and(|h| h.exists()));
        match inside {
            Some(p) => program(p, false, origin, &mut found),
            None if !needed => {}
            None => {
                return Err(Error::at(
                    origin.clone(),
                    format!("generator `{name}` is not in the root's system-generators"),
                ))
            }
        }
    }

    let rules = asked.rules.iter().map(|r| (r, true));
    let if_present = asked.rules_if_present.iter().map(|r| (r, false));
    for ((name, origin), needed) in rules.chain(if_present) {
        if layers_left_out.contains(name) {
            continue;
        }
        let Some(inside) = RULE_DIRS.iter().map(|d| format!("{d}/{name}")).find(|p| {
            root.host_of(Path::new(p), true)
                .is_some_and(|h| h.is_file())
        }) else {
            if needed {
                found.warnings.push(Warning {
                    origin: Some(origin.clone()),
                    message: format!("udev rules `{name}` are not in the root; left out"),
                    details: Vec::new(),
                });
            }
            continue;
        };
        let o = with_rule(origin, format!("[systemd] udev rules {name}"));
        take(&root, &inside, &o, &mut found.added)?;
        for helper in rule_helpers(&read_text(&root, &inside).unwrap_or_default()) {
            let path = if helper.starts_with('/') {
                Some(helper.clone())
            } else {
                UDEV_DIRS.iter().map(|d| format!("{d}/{helper}")).find(|p| {
                    root.host_of(Path::new(p), true)
                        .is_some_and(|h| h.is_file())
                })
            };
            if let Some(p) = path {
                program(p, true, &o, &mut found);
            }
        }
    }
    Ok(found)
}

/// What the root's systemd version needs that no unit names
/// ([`crate::resolve::systemd::NEEDS`]): taken like a unit's program, and
/// one the root lacks is an error naming it.
fn version_needs(root: &Root, origin: &Origin, found: &mut Found) -> Result<()> {
    let Some(version) = crate::resolve::systemd::version(root) else {
        return Ok(());
    };
    for need in crate::resolve::systemd::needs(version) {
        let o = with_rule(
            origin,
            format!(
                "systemd {version} needs {} (since {})",
                need.path, need.since
            ),
        );
        if !root
            .resolve(Path::new(need.path), true)
            .is_ok_and(|p| p.is_file())
        {
            return Err(Error::at(
                o,
                format!(
                    "the root's systemd {version} needs `{}`, which the root lacks: {}",
                    need.path, need.why
                ),
            )
            .with_hint("reinstall the root's systemd package, or choose init = \"shell\""));
        }
        found.programs.push(BinaryRequest::program(need.path).at(o));
    }
    Ok(())
}

/// The drop-in that lets `initrd-parse-etc.service` (the root's file at `path`,
/// `text`; `has_drop_ins`: the root has drop-ins for it) queue `initrd-cleanup.service` without a systemctl process, when it applies
/// (see [`super::systemd_handover`]).
fn add_parse_etc_drop_in(
    root: &Root,
    path: &str,
    origin: &Origin,
    text: &str,
    has_drop_ins: bool,
    found: &mut Found,
) -> Result<()> {
    use super::systemd_handover::{parse_etc_drop_in, DROP_IN};
    let Some(version) = crate::resolve::systemd::version(root) else {
        return Ok(());
    };
    let Some(conf) = parse_etc_drop_in(text, has_drop_ins, version) else {
        return Ok(());
    };
    let name = "initrd-parse-etc.conf";
    let dir = crate::cache::store_in(
        "systemd",
        &[(name.to_string(), conf.into_bytes())],
        &[],
        std::time::UNIX_EPOCH,
    )
    .map_err(|e| Error::at(origin.clone(), format!("cannot write {DROP_IN}: {e}")))?;
    let o = origin.with_rule(format!("{DROP_IN} (from {path})"));
    found.added.push(Added::generated(&dir, name, DROP_IN, &o)?);
    Ok(())
}

/// The programs a rules file runs: `PROGRAM=`, `IMPORT{program}=`,
/// `RUN{program}=` and `RUN+=` values' first words (builtins and
/// substitutions left out).
fn rule_helpers(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in text.lines().filter(|l| !l.trim_start().starts_with('#')) {
        for key in ["PROGRAM", "IMPORT{program}", "RUN{program}", "RUN"] {
            let mut rest = line;
            while let Some(at) = rest.find(key) {
                rest = &rest[at + key.len()..];
                let Some(v) = rest.trim_start_matches(['+', '=', ':']).strip_prefix('"') else {
                    continue;
                };
                let value = v.split('"').next().unwrap_or("");
                if let Some(p) = value.split_whitespace().next() {
                    if !p.contains(['%', '$']) && !p.is_empty() {
                        out.insert(p.to_string());
                    }
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_syntax() {
        let s = settings(
            "[Unit]\n# c\nWants=a.target \\\n  b.service\n[Service]\nExecStart=-/bin/x --y\n",
        );
        assert_eq!(s[0], ("Wants".into(), "a.target  b.service".into()));
        assert_eq!(exec_program(&s[1].1), Some(("/bin/x".into(), true)));
        assert_eq!(
            exec_program("!!systemctl daemon-reload"),
            Some(("systemctl".into(), false))
        );
        assert_eq!(exec_program("/bin/%i"), None);
        assert_eq!(
            template("modprobe@drm.service").as_deref(),
            Some("modprobe@.service")
        );
        assert_eq!(template("plain.service"), None);
        let h = rule_helpers(
            "KERNEL==\"sd*\", IMPORT{program}=\"scsi_id --export\", PROGRAM=\"/bin/x\"\n\
             RUN+=\"/sbin/y %k\"\nIMPORT{builtin}=\"path_id\"\n# RUN+=\"no\"\n",
        );
        assert_eq!(
            h.into_iter().collect::<Vec<_>>(),
            ["/bin/x", "/sbin/y", "scsi_id"]
        );
    }
}

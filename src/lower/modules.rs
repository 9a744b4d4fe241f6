//! Glue between module rules (`modules`, `[[module]]`, `[firmware]`) and
//! kmod resolution: requests from every document are resolved together
//! against the kernel's module tree, and the modules, their firmware and
//! the metadata modprobe needs (as depmod would write it for exactly these
//! modules) become items of the image. Each item's origin says why it is
//! there, which `composer why` prints.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use globset::GlobMatcher;

use crate::glob::Separator;

use super::item::{Added, FileModes};
use crate::cache::{cache_dir, store};
use crate::entry::{Kind, Origin};
use crate::error::{shorten, Error, Result, Warning};
use crate::manifest::de::Spanned;
use crate::manifest::load::{expand, Doc, Loaded};
use crate::resolve::kmod::depmod::{self, Depmod, ModFile};
use crate::resolve::kmod::kconfig::KernelConfig;
use crate::resolve::kmod::probe::Step;
use crate::resolve::kmod::select::{Request, Selection};
use crate::resolve::kmod::{firmware, host, ko, ModuleTree};
use crate::resolve::root::Root;
use crate::spec::{Omitted, OmittedKind};

enum What {
    Name(String),
    Pattern(String, GlobMatcher),
    Host,
    RootFs,
}

struct Req {
    what: What,
    /// The rank of the rule's document ([`Loaded::rank`]).
    doc: usize,
    origin: Origin,
    label: String,
    optional: bool,
    firmware: bool,
    /// List the names it selects in /etc/modules-load.d/composer.conf.
    load: bool,
    exclude: Vec<(String, Option<GlobMatcher>)>,
}

fn glob(text: &str, origin: &Origin) -> Result<GlobMatcher> {
    crate::glob::matcher(text, Separator::Literal, origin)
}

/// Firmware name patterns (`*` matches `/` too: names are not paths here).
fn name_globs(
    pats: &[Spanned<String>],
    doc: &Doc,
    loaded: &Loaded,
) -> Result<Vec<(String, GlobMatcher, Origin)>> {
    let mut out = Vec::new();
    for p in pats {
        let text = expand(p, p.pos, doc, &loaded.vars)?;
        let origin = doc.origin(p.pos);
        let g = crate::glob::matcher(&text, Separator::Any, &origin)?;
        out.push((text, g, origin));
    }
    Ok(out)
}

/// The directories a glob's matches all lie in: its text up to the last `/`
/// before the first special character (`kernel/fs/**` -> `kernel/fs`), to
/// skip most module files without running the matcher.
fn fixed_dirs(glob: &str) -> &str {
    let special = glob.find(['*', '?', '[', '{', '\\']).unwrap_or(glob.len());
    glob[..special].rfind('/').map_or("", |at| &glob[..at])
}

/// `kernel/fs/ext4/ext4.ko.xz` matches `kernel/fs/**/*.ko` too.
fn path_matches(g: &GlobMatcher, relpath: &str) -> bool {
    g.is_match(relpath) || g.is_match(ko::uncompressed_name(relpath))
}

fn excluded(ex: &[(String, Option<GlobMatcher>)], name: &str, relpath: &str) -> bool {
    ex.iter().any(|(text, g)| match g {
        Some(g) => path_matches(g, relpath),
        None => crate::resolve::kmod::normalize_modname(text) == name,
    })
}

fn requests(loaded: &Loaded) -> Result<Vec<Req>> {
    let mut reqs = Vec::new();
    for (doc_index, doc) in loaded.docs.iter().enumerate() {
        let m = &doc.manifest;
        // Keep the order the rules were written in.
        let mut rules: Vec<(crate::manifest::node::Pos, Option<usize>)> =
            m.modules.iter().map(|r| (r.pos, None)).collect();
        rules.extend(m.module.iter().enumerate().map(|(i, r)| (r.pos, Some(i))));
        rules.sort_by_key(|(p, _)| *p);
        let mut short = m.modules.iter();
        for (pos, rule) in rules {
            match rule {
                None => {
                    let Some(name) = short.next() else { continue };
                    let text = expand(name, name.pos, doc, &loaded.vars)?;
                    let origin = doc.origin(pos).with_rule(format!("modules \"{text}\""));
                    reqs.push(Req {
                        label: format!("modules \"{text}\""),
                        what: What::Name(text),
                        doc: loaded.rank(doc_index),
                        origin,
                        optional: false,
                        firmware: true,
                        load: false,
                        exclude: Vec::new(),
                    });
                }
                Some(i) => {
                    let r = &m.module[i].value;
                    if !super::arch::for_arch(&r.arch, doc, loaded.arch)? {
                        continue;
                    }
                    let mut exclude = Vec::new();
                    for e in &r.exclude {
                        let text = expand(e, e.pos, doc, &loaded.vars)?;
                        let g = if text.contains(['/', '*', '?', '[', '{']) {
                            Some(glob(&text, &doc.origin(e.pos))?)
                        } else {
                            None
                        };
                        exclude.push((text, g));
                    }
                    let firmware = r.firmware.unwrap_or(true);
                    let mut push = |what: What, at: crate::manifest::node::Pos, label: String| {
                        let origin = doc.origin(at).with_rule(label.as_str());
                        reqs.push(Req {
                            what,
                            doc: loaded.rank(doc_index),
                            origin,
                            label,
                            optional: r.optional,
                            firmware,
                            load: r.load,
                            exclude: exclude.clone(),
                        });
                    };
                    for n in &r.names {
                        let text = expand(n, n.pos, doc, &loaded.vars)?;
                        push(
                            What::Name(text.clone()),
                            n.pos,
                            format!("[[module]] name \"{text}\""),
                        );
                    }
                    for p in &r.patterns {
                        let text = expand(p, p.pos, doc, &loaded.vars)?;
                        let g = glob(text.trim_start_matches('/'), &doc.origin(p.pos))?;
                        push(
                            What::Pattern(text.clone(), g),
                            p.pos,
                            format!("[[module]] pattern \"{text}\""),
                        );
                    }
                    if r.host {
                        push(What::Host, pos, "[[module]] host".to_string());
                    }
                    if r.rootfs {
                        push(What::RootFs, pos, "[[module]] rootfs".to_string());
                    }
                }
            }
        }
    }
    Ok(reqs)
}

/// Metadata files by name: generated bytes, or None to copy the tree's.
type Files = Vec<(String, Option<Vec<u8>>)>;

/// The metadata files modprobe (kmod's and busybox's) needs for exactly
/// the modules in `mods`, as depmod writes them; None for files to copy
/// from the tree unchanged.
fn metadata(tree: &ModuleTree, mods: Vec<ModFile>) -> std::result::Result<Files, String> {
    let order_text = std::fs::read_to_string(tree.dir.join("modules.order")).ok();
    let keep: HashSet<&str> = mods
        .iter()
        .map(|m| ko::uncompressed_name(&m.relpath))
        .collect();
    let filtered_order = order_text.as_ref().map(|t| {
        let mut s = String::new();
        for l in t.lines().filter(|l| keep.contains(l)) {
            s.push_str(l);
            s.push('\n');
        }
        s
    });
    drop(keep);
    let d = Depmod::new(mods, filtered_order.as_deref()).map_err(|e| e.to_string())?;
    let ix = |r: std::result::Result<Vec<u8>, crate::resolve::kmod::index::IndexError>| {
        r.map_err(|e| e.to_string())
    };
    let mut files: Files = vec![
        ("modules.dep".into(), Some(d.modules_dep())),
        ("modules.dep.bin".into(), Some(ix(d.dep_index_bytes())?)),
        ("modules.alias".into(), Some(d.alias_text())),
        ("modules.alias.bin".into(), Some(ix(d.alias_index_bytes())?)),
        ("modules.softdep".into(), Some(d.softdep_text())),
        ("modules.symbols".into(), Some(d.symbols_text())),
        (
            "modules.symbols.bin".into(),
            Some(ix(d.symbols_index_bytes())?),
        ),
        ("modules.devname".into(), Some(d.devname_text())),
    ];
    if let Some(w) = d.weakdep_text() {
        files.push(("modules.weakdep".into(), Some(w)));
    }
    if let Some(o) = filtered_order {
        files.push(("modules.order".into(), Some(o.into_bytes())));
    }
    if let Ok(b) = std::fs::read_to_string(tree.dir.join("modules.builtin")) {
        files.push(("modules.builtin".into(), None));
        files.push((
            "modules.builtin.bin".into(),
            Some(ix(depmod::builtin_index_bytes(&b))?),
        ));
    }
    if let Ok(b) = std::fs::read(tree.dir.join("modules.builtin.modinfo")) {
        files.push(("modules.builtin.modinfo".into(), None));
        files.push((
            "modules.builtin.alias.bin".into(),
            Some(ix(depmod::builtin_alias_index_bytes(&b))?),
        ));
    }
    Ok(files)
}

fn file_item(
    out: &mut Vec<Added>,
    modes: FileModes,
    host: &Path,
    dest: String,
    origin: &Origin,
) -> Result<std::fs::Metadata> {
    let st = crate::resolve::stat(host).map_err(|e| {
        Error::at(
            origin.clone(),
            format!("cannot read `{}`: {e}", host.display()),
        )
    })?;
    out.push(Added {
        dest: dest.into_bytes(),
        kind: Kind::File {
            source: crate::resolve::file_source(host, &st, origin)?.into(),
            links: crate::entry::Links::default(),
        },
        mode: modes.of(None, &st.meta),
        origin: origin.clone(),
    });
    Ok(st.meta)
}

/// The compression of a firmware file (`xz`, `zst`) that the kernel's loader
/// does not read, by its configuration; None when it does, when the file is
/// not compressed, or when the configuration is not found (the file is kept
/// as the root ships it).
fn unreadable_compression<'a>(config: Option<&KernelConfig>, dest: &'a str) -> Option<&'a str> {
    let config = config?;
    let ext = ["xz", "zst"]
        .into_iter()
        .find(|e| dest.ends_with(&format!(".{e}")))?;
    (!config.firmware_reads(ext)).then(|| &dest[dest.len() - ext.len()..])
}

/// Firmware is at most this large once decompressed (the largest in
/// linux-firmware is about 40 MiB).
const MAX_FIRMWARE: usize = 256 << 20;

/// `f`, compressed with `ext`, decompressed into the image under its name
/// without the extension (where the loader looks first), for a kernel whose
/// loader cannot read `ext`. None for a file that does not decompress (the
/// caller keeps it as it is), with a warning.
fn decompressed_firmware(
    f: &firmware::FirmwareFile,
    dest: &str,
    ext: &str,
    origin: &Origin,
    warnings: &mut Vec<Warning>,
) -> Result<Option<Added>> {
    let plain = dest[..dest.len() - ext.len() - 1].to_string();
    let method = match ext {
        "xz" => crate::compress::Compression::Xz,
        _ => crate::compress::Compression::Zstd,
    };
    let data = crate::io::read_regular(&f.host, MAX_FIRMWARE as u64).map_err(|e| {
        Error::at(
            origin.clone(),
            format!("cannot read `{}`: {e}", f.host.display()),
        )
    })?;
    let decoded = match crate::compress::decode(method, &data, MAX_FIRMWARE) {
        Ok(d) => d.data,
        Err(e) => {
            warnings.push(Warning {
                origin: Some(origin.clone()),
                message: format!(
                    "firmware {}: the kernel's loader does not read .{ext} files, and it does not decompress ({}): kept as it is",
                    f.name, e.message
                ),
                details: Vec::new(),
            });
            return Ok(None);
        }
    };
    let name = plain.rsplit('/').next().unwrap_or("firmware").to_string();
    let dir = crate::cache::store_in(
        "firmware",
        &[(name.clone(), decoded)],
        &[],
        std::time::UNIX_EPOCH,
    )
    .map_err(|e| {
        Error::at(
            origin.clone(),
            format!("cannot write firmware {}: {e}", f.name),
        )
    })?;
    Added::generated(&dir, &name, &plain, origin).map(Some)
}

fn with_rule(origin: &Origin, rule: String) -> Origin {
    origin.with_rule(rule)
}

/// What the module rules add: the files, and whether the image's `/init`,
/// loading its load list (`modprobe -b -a`, names of
/// `/etc/modules-load.d/composer.conf`), loads every module the image holds.
pub(super) struct Modules {
    pub added: Vec<Added>,
    /// True when the load list's modules, with what modprobe loads beside
    /// them (dependencies, soft dependencies), are all the image's modules:
    /// a cold plug by modalias then finds nothing more to load. False when
    /// the image has no module rules.
    pub list_loads_all: bool,
    /// The modules and firmware `[omit]` took out.
    pub omitted: Vec<Omitted>,
}

/// Resolves every module rule of the loaded documents: the modules, their
/// firmware and the metadata modprobe needs.
pub(super) fn add_all(
    loaded: &Loaded,
    omits: &super::omit::Omits,
    modes: FileModes,
    warnings: &mut Vec<Warning>,
) -> Result<Modules> {
    let reqs = requests(loaded)?;
    let mut out = Vec::new();
    if reqs.is_empty() {
        return Ok(Modules {
            added: out,
            list_loads_all: false,
            omitted: Vec::new(),
        });
    }
    let mut fw_include = Vec::new();
    let mut fw_exclude = Vec::new();
    for doc in &loaded.docs {
        if let Some(f) = &doc.manifest.firmware {
            fw_include.extend(name_globs(&f.include, doc, loaded)?);
            fw_exclude.extend(name_globs(&f.exclude, doc, loaded)?);
        }
    }
    let kver = loaded.vars.get("kver").cloned().unwrap_or_default();
    let root = Root::new(&loaded.root);
    let first = reqs[0].origin.clone();
    let scans = cache_dir().join("kmod-scan");
    let opened = match &loaded.kmoddir {
        Some(dir) => ModuleTree::open_in(&root, &kver, dir, Some(&scans)),
        None => ModuleTree::open_with(&root, &kver, Some(&scans)),
    };
    let tree = opened.map_err(|e| {
        Error::at(first.clone(), format!("kernel modules: {e}")).with_hint(e.hint())
    })?;

    let mut load_list: Vec<String> = Vec::new();
    // What rootfs rules with `load = true` ask the init to load.
    let mut rootfs_load: Vec<String> = Vec::new();
    let mut sel = Selection::new(&tree);
    // `[omit] modules` of the rule's document and those after it.
    let omitted = |r: &Req, name: &str, relpath: &str| {
        omits
            .modules
            .iter()
            .find(|o| o.applies_to(r.doc) && o.names_module(name, relpath))
    };
    for (tag, r) in reqs.iter().enumerate() {
        let ex = |name: &str, relpath: &str| {
            excluded(&r.exclude, name, relpath) || omitted(r, name, relpath).is_some()
        };
        let request = Request {
            tag,
            label: r.label.clone(),
            exclude: &ex,
            blacklist: matches!(r.what, What::Host | What::RootFs),
        };
        match &r.what {
            What::Name(q) => {
                if !sel.add_query(q, &request) && !r.optional {
                    let names: Vec<&str> = tree.modules.iter().map(|m| m.name.as_str()).collect();
                    let hint = match crate::suggest::nearest(&crate::resolve::kmod::normalize_modname(q), &names) {
                        Some(n) => format!("did you mean `{n}`? (set optional = true in a [[module]] rule to skip it)"),
                        None => "check the name: modprobe would not find it either".to_string(),
                    };
                    return Err(Error::at(
                        r.origin.clone(),
                        format!(
                            "module `{q}` is not a module, alias or built-in module of kernel {kver} (in {})",
                            tree.dir.display()
                        ),
                    )
                    .with_fix(hint, &format!("modules = [{}]", toml::Value::String(q.clone()))));
                }
            }
            What::Pattern(text, g) => {
                let dirs = fixed_dirs(text.trim_start_matches('/'));
                let matched: Vec<String> = tree
                    .modules
                    .iter()
                    .filter(|m| m.relpath.starts_with(dirs) && path_matches(g, &m.relpath))
                    .map(|m| m.name.clone())
                    .collect();
                if matched.is_empty() && !r.optional {
                    return Err(Error::at(
                        r.origin.clone(),
                        format!("pattern `{text}` matches no module file of kernel {kver}"),
                    )
                    .with_hint(format!(
                        "patterns are relative to {}, e.g. \"kernel/drivers/block/**\"",
                        tree.dir.display()
                    )));
                }
                for name in matched {
                    let head = format!(
                        "{} ~ {}",
                        r.label,
                        tree.module(&name).map_or("", |m| m.relpath.as_str())
                    );
                    sel.add_module(&name, &head, &request);
                }
            }
            What::Host => {
                let scan = host::scan(Path::new("/sys/devices"), Path::new("/proc/modules"))
                    .map_err(|e| {
                        Error::at(
                            r.origin.clone(),
                            format!("host mode cannot read the machine's devices: {e}"),
                        )
                        .with_hint(
                            "host mode reads /sys/devices and /proc/modules of the running machine",
                        )
                    })?;
                sel.add_host(&scan, &request);
            }
            What::RootFs => {
                let stack = crate::stack::running(&loaded.root).map_err(|e| {
                    Error::at(
                        r.origin.clone(),
                        format!("rootfs mode cannot follow the root filesystem down to its devices: {e}"),
                    )
                    .with_hint("rootfs mode reads /proc/self/mountinfo and /sys of the running machine")
                })?;
                for note in &stack.notes {
                    warnings.push(Warning {
                        origin: Some(r.origin.clone()),
                        message: format!("rootfs mode: {note}"),
                        details: Vec::new(),
                    });
                }
                // Each layer: a disk's drivers by its devices' modaliases,
                // the modules the layer itself needs by name. What the init
                // loads first lists the disks' drivers from the bus down (a
                // controller's before its disk's), then the layers' modules
                // from the disk up (the filesystem's last): the order the
                // boot needs them in.
                let mut layer_load: Vec<Vec<String>> = Vec::new();
                for need in crate::stack::needs(&stack) {
                    if r.load {
                        // Found as modprobe finds them.
                        layer_load.push(
                            need.modules
                                .iter()
                                .flat_map(|name| sel.tree.lookup(name))
                                .map(|f| f.obj.name)
                                .collect(),
                        );
                    }
                    if let crate::stack::Kind::Disk(d) = &stack.layers[need.layer].kind {
                        if r.load {
                            // A disk's drivers, by its devices' modaliases
                            // (listed from the disk up).
                            for b in d.devices.iter().rev() {
                                rootfs_load.extend(
                                    sel.tree.lookup(&b.modalias).into_iter().map(|f| f.obj.name),
                                );
                            }
                        }
                        let devices = d
                            .devices
                            .iter()
                            .map(|b| host::HostDevice {
                                path: b.path.clone(),
                                modalias: b.modalias.clone(),
                            })
                            .collect();
                        let scan = host::HostScan {
                            devices,
                            loaded: Vec::new(),
                            proc_modules: true,
                        };
                        let disk = Request {
                            label: format!("{}: {}", request.label, need.reason),
                            ..request
                        };
                        sel.add_host(&scan, &disk);
                    }
                    for name in &need.modules {
                        let head = format!("{}: {} ~ {name}", request.label, need.reason);
                        sel.add_query_head(name, &head, &request);
                    }
                }
                rootfs_load.extend(layer_load.into_iter().rev().flatten());
                // Keyboards, for an emergency shell.
                let scan = host::HostScan {
                    devices: host::keyboards(Path::new("/sys")),
                    loaded: Vec::new(),
                    proc_modules: true,
                };
                let keyboard = Request {
                    label: format!("{}: keyboard", request.label),
                    ..request
                };
                sel.add_host(&scan, &keyboard);
            }
        }
    }
    // The names rules with `load = true` selected, for the init to load
    // (not those an omission took out: the image has no file for them).
    for r in reqs.iter().filter(|r| r.load) {
        if let What::Name(q) = &r.what {
            let name = crate::resolve::kmod::normalize_modname(q);
            let relpath = tree.module(&name).map_or("", |m| m.relpath.as_str());
            let out = omitted(r, &name, relpath).is_some() && !sel.contains(&name);
            if !out && !load_list.contains(q) {
                load_list.push(q.clone());
            }
        }
    }
    // Of those, the modules the image holds (not the blacklisted or excluded
    // ones, nor those built into the kernel).
    for q in rootfs_load {
        if !load_list.contains(&q) && sel.modules.iter().any(|m| m.name == q) {
            load_list.push(q);
        }
    }
    // Weak dependencies (soft: an omission of any document leaves them out).
    sel.add_weakdeps(&|name, relpath| omits.modules.iter().any(|o| o.names_module(name, relpath)));
    // What the omissions took out, for `why`; and what they could not (a
    // module a kept module needs), said with the module that keeps it.
    let mut left_out = Vec::new();
    for n in &sel.notes {
        let Some(name) = &n.excluded else { continue };
        if sel.contains(name) || left_out.iter().any(|o: &Omitted| &o.name == name) {
            continue;
        }
        let relpath = tree.module(name).map_or("", |m| m.relpath.as_str());
        if let Some(o) = omitted(&reqs[n.tag], name, relpath) {
            left_out.push(Omitted {
                kind: OmittedKind::Module,
                name: name.clone(),
                by: o.origin.clone(),
                rule: o.label("modules"),
            });
        }
    }
    for m in &sel.modules {
        let r = &reqs[m.tag];
        if let Some(o) = omitted(r, &m.name, &m.relpath) {
            let links: Vec<&str> = m.chain.split(" -> ").collect();
            let needer = links
                .len()
                .checked_sub(2)
                .and_then(|i| links[i].split_whitespace().next())
                .unwrap_or("?");
            warnings.push(Warning {
                origin: Some(o.origin.clone()),
                message: format!(
                    "{}: module `{}` is kept: module `{needer}` needs it (a hard dependency: {}, at {})",
                    o.label("modules"),
                    m.name,
                    m.chain,
                    r.origin
                ),
                details: Vec::new(),
            });
        }
    }
    for n in &sel.notes {
        if n.message.contains("blacklisted") {
            warnings.push(Warning {
                origin: Some(reqs[n.tag].origin.clone()),
                message: n.message.clone(),
                details: Vec::new(),
            });
        }
    }

    let image_dir = format!("lib/modules/{kver}");
    let names: Vec<&str> = sel.modules.iter().map(|m| m.name.as_str()).collect();
    let list_loads_all = loads_all(&tree, &load_list, &names);
    tree.preload(&names)
        .map_err(|e| Error::at(first.clone(), e.to_string()).with_hint(e.hint()))?;

    // Modules and their firmware.
    let fw_search = firmware::Search::new(&root, &kver);
    let kconfig = KernelConfig::find(&root, &kver, &tree.dir);
    let mut mods = Vec::new();
    let mut newest = std::time::SystemTime::UNIX_EPOCH;
    let mut fw_seen: HashMap<String, ()> = HashMap::new();
    // Per rule: the modules whose firmware is missing, with the files.
    type Missing = Vec<(String, Vec<String>)>;
    let mut no_firmware: Vec<(Origin, Missing)> = Vec::new();
    for m in &sel.modules {
        let r = &reqs[m.tag];
        let origin = with_rule(&r.origin, m.chain.clone());
        let host = tree.dir.join(&m.relpath);
        let meta = file_item(
            &mut out,
            modes,
            &host,
            format!("{image_dir}/{}", m.relpath),
            &origin,
        )?;
        if let Ok(t) = meta.modified() {
            newest = newest.max(t);
        }
        let info = tree
            .info(&m.name)
            .map_err(|e| Error::at(origin.clone(), e.to_string()).with_hint(e.hint()))?;
        if r.firmware {
            let mut missing = Vec::new();
            for fw in info.values("firmware") {
                let take = (fw_include.is_empty()
                    || fw_include.iter().any(|(_, g, _)| g.is_match(fw)))
                    && !fw_exclude.iter().any(|(_, g, _)| g.is_match(fw));
                if !take {
                    continue;
                }
                if let Some(o) = omits.firmware(fw) {
                    // Said only of firmware the root has (what the image
                    // would have held).
                    if !left_out.iter().any(|x: &Omitted| x.name == fw)
                        && fw_search.find(&root, fw).is_some()
                    {
                        left_out.push(Omitted {
                            kind: OmittedKind::Firmware,
                            name: fw.to_string(),
                            by: o.origin.clone(),
                            rule: o.label("firmware"),
                        });
                    }
                    continue;
                }
                match fw_search.find(&root, fw) {
                    Some(f) => {
                        let dest = f
                            .image_path
                            .strip_prefix("usr/")
                            .unwrap_or(&f.image_path)
                            .to_string();
                        if fw_seen.insert(dest.clone(), ()).is_some() {
                            continue;
                        }
                        let o = with_rule(&r.origin, format!("{} -> firmware {fw}", m.chain));
                        let plain = match unreadable_compression(kconfig.as_ref(), &dest) {
                            Some(ext) => decompressed_firmware(&f, &dest, ext, &o, warnings)?,
                            None => None,
                        };
                        match plain {
                            Some(added) => out.push(added),
                            None => {
                                file_item(&mut out, modes, &f.host, dest, &o)?;
                            }
                        }
                    }
                    None => missing.push(fw.to_string()),
                }
            }
            if !missing.is_empty() {
                let at = |o: &Origin| (o.file().clone(), o.line, o.column);
                match no_firmware.iter_mut().find(|(o, _)| at(o) == at(&origin)) {
                    Some((_, list)) => list.push((m.name.clone(), missing)),
                    None => {
                        no_firmware.push((origin.without_rule(), vec![(m.name.clone(), missing)]));
                    }
                }
            }
        }
        mods.push(ModFile {
            relpath: m.relpath.clone(),
            name: m.name.clone(),
            info,
        });
    }

    // Missing firmware: said per module when up to three miss it, else once
    // per rule (a generic image names many drivers whose firmware is in
    // packages this root does not have).
    let one = |name: &str, files: &[String]| {
        format!(
            "module `{name}` asks for firmware not found under /lib/firmware in the root: {} (it may fail to load without it)",
            shorten(files)
        )
    };
    for (origin, list) in no_firmware {
        if list.len() <= 3 {
            for (name, files) in list {
                warnings.push(Warning {
                    origin: Some(origin.clone()),
                    message: one(&name, &files),
                    details: Vec::new(),
                });
            }
            continue;
        }
        warnings.push(Warning {
            origin: Some(origin),
            message: format!(
                "{} modules ask for firmware not found under /lib/firmware in the root: {} (they may fail to load without it; -v names each module and its files)",
                list.len(),
                shorten(&list.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>())
            ),
            details: list.iter().map(|(n, f)| one(n, f)).collect(),
        });
    }

    // Metadata for exactly these modules.
    let count = mods.len();
    let files = metadata(&tree, mods)
        .map_err(|e| Error::at(first.clone(), format!("module metadata: {e}")))?;
    let generated: Vec<(String, Vec<u8>)> = files
        .iter()
        .filter_map(|(n, b)| b.clone().map(|b| (n.clone(), b)))
        .collect();
    let stored = store(&generated, newest).map_err(|e| {
        Error::at(
            first.clone(),
            format!(
                "cannot write module metadata to {}: {e}",
                cache_dir().display()
            ),
        )
        .with_hint("set COMPOSER_CACHE_DIR to a writable directory")
    })?;
    let origin = with_rule(
        &first,
        format!("module metadata for the {count} modules of the image (as depmod writes it)"),
    );
    for (name, bytes) in &files {
        let host = match bytes {
            Some(_) => stored.join(name),
            None => tree.dir.join(name),
        };
        file_item(
            &mut out,
            modes,
            &host,
            format!("{image_dir}/{name}"),
            &origin,
        )?;
    }
    if !load_list.is_empty() {
        let mut text = String::from("# Modules composer's manifest asks to load at boot.\n");
        for n in &load_list {
            text.push_str(n);
            text.push('\n');
        }
        let dir = crate::cache::store_in(
            "modules-load",
            &[("composer.conf".to_string(), text.into_bytes())],
            &[],
            newest,
        )
        .map_err(|e| Error::at(first.clone(), format!("cannot write modules-load.d: {e}")))?;
        let origin = with_rule(&first, "modules with load = true".to_string());
        file_item(
            &mut out,
            modes,
            &dir.join("composer.conf"),
            "etc/modules-load.d/composer.conf".to_string(),
            &origin,
        )?;
    }
    drop(tree);
    Ok(Modules {
        added: out,
        list_loads_all,
        omitted: left_out,
    })
}

/// Whether `modprobe -b -a LIST` loads every module of `image`: each one is
/// inserted for a name of the list, as a dependency or a soft dependency
/// (a module the configuration replaces by an `install` command is not).
fn loads_all(tree: &ModuleTree, list: &[String], image: &[&str]) -> bool {
    let mut inserted: HashSet<String> = HashSet::new();
    for q in list {
        for p in tree.show_depends(q, true).unwrap_or_default() {
            if let Step::Insmod { name, .. } = p.step {
                inserted.insert(name);
            }
        }
    }
    image.iter().all(|m| inserted.contains(*m))
}

/// At most five names, then how many more.
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_glob_matches_only_below_its_fixed_directories() {
        assert_eq!(fixed_dirs("kernel/drivers/ata/**"), "kernel/drivers/ata");
        assert_eq!(fixed_dirs("kernel/fs/ext4/ext4.ko"), "kernel/fs/ext4");
        assert_eq!(fixed_dirs("kernel/fs/*/x.ko"), "kernel/fs");
        assert_eq!(fixed_dirs("kernel/dri[vb]ers/**"), "kernel");
        assert_eq!(fixed_dirs("kernel/{fs,lib}/**"), "kernel");
        assert_eq!(fixed_dirs("**/virtio*.ko"), "");
        assert_eq!(fixed_dirs("ext4.ko"), "");
        // Whatever the glob matches starts with them.
        for (pat, path) in [
            ("kernel/fs/**", "kernel/fs/ext4/ext4.ko.xz"),
            ("kernel/f?/**", "kernel/fs/ext4/ext4.ko"),
            ("kernel/**/ext4.ko", "kernel/fs/ext4/ext4.ko"),
        ] {
            let g = glob(pat, &Origin::default()).unwrap();
            assert!(path_matches(&g, path), "{pat} {path}");
            assert!(path.starts_with(fixed_dirs(pat)), "{pat}");
        }
    }
}

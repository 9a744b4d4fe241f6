//! Choosing the modules of an image: requests (names, aliases, path
//! patterns, the running machine's devices) become probe lists, and every
//! module keeps the first chain of reasons that brought it in, for
//! `composer why`.

use std::collections::HashMap;

use super::host::HostScan;
use super::probe::{Found, Reason, Step};
use super::tree::ModuleTree;

/// One request, as the caller describes it.
pub struct Request<'a> {
    /// The caller's handle for where the request comes from (e.g. the
    /// manifest rule); returned with every module it selects.
    pub tag: usize,
    /// How the request reads in explanations, e.g. `modules "ext4"`.
    pub label: String,
    /// Modules this request must not select or pull in as soft
    /// dependencies (hard dependencies are kept: without them the modules
    /// that need them cannot load).
    pub exclude: &'a dyn Fn(&str, &str) -> bool,
    /// Apply the configuration's blacklist to names too (modprobe -b).
    pub blacklist: bool,
}

/// A module chosen for the image.
#[derive(Clone, Debug)]
pub struct Selected {
    pub name: String,
    pub relpath: String,
    /// The request that first selected it.
    pub tag: usize,
    /// Why, from the request down to this module.
    pub chain: String,
}

/// Something a request chose not to take, or could not.
#[derive(Clone, Debug)]
pub struct Note {
    pub tag: usize,
    pub message: String,
    /// The module the request's exclusions left out, for a note of that.
    pub excluded: Option<String>,
}

/// The modules chosen so far.
pub struct Selection<'t> {
    pub tree: &'t ModuleTree,
    pub modules: Vec<Selected>,
    pub notes: Vec<Note>,
    index: HashMap<String, usize>,
}

/// Long modaliases (a CPU's lists every feature) cut for explanations.
fn short(s: &str) -> String {
    match s.char_indices().nth(72) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_string(),
    }
}

/// How an entry of a probe list reads in an explanation.
fn describe(r: &Reason) -> String {
    match r {
        Reason::Requested => String::new(),
        Reason::Dependency { .. } => " (dependency)".to_string(),
        Reason::SoftPre { spec, .. } => format!(" (softdep pre: {spec})"),
        Reason::SoftPost { spec, .. } => format!(" (softdep post: {spec})"),
    }
}

impl<'t> Selection<'t> {
    pub fn new(tree: &'t ModuleTree) -> Self {
        Selection {
            tree,
            modules: Vec::new(),
            notes: Vec::new(),
            index: HashMap::new(),
        }
    }

    /// True once `name` is selected.
    pub fn contains(&self, name: &str) -> bool {
        self.index.contains_key(name)
    }

    /// A name or alias, as `modprobe NAME`. Returns false when modprobe
    /// would not find it.
    pub fn add_query(&mut self, query: &str, req: &Request) -> bool {
        let found = self.tree.lookup(query);
        if found.is_empty() {
            return false;
        }
        let via = |f: &Found| match &f.via {
            super::probe::Via::Name => String::new(),
            v => format!(" ~ {v}"),
        };
        for f in &found {
            let head = format!("{}{}", req.label, via(f));
            self.add_found(f, &head, req);
        }
        true
    }

    /// A module file of the tree, by module name (as `modprobe PATH`: no
    /// alias lookup).
    pub fn add_module(&mut self, name: &str, head: &str, req: &Request) {
        if self.tree.module(name).is_some() {
            self.add_found(&Found::by_name(name), head, req);
        }
    }

    /// The running machine: each device's modalias looked up as udev does
    /// (`modprobe -b`), then each module `/proc/modules` lists.
    pub fn add_host(&mut self, scan: &HostScan, req: &Request) {
        for dev in &scan.devices {
            for f in self.tree.lookup(&dev.modalias) {
                let head = format!(
                    "{}: device {} (modalias {}) ~ {}",
                    req.label,
                    dev.path.display(),
                    short(&dev.modalias),
                    f.via
                );
                if let Some(at) = self.tree.config.blacklisted(&f.obj.name) {
                    self.notes.push(Note {
                        tag: req.tag,
                        message: format!("{head} -> {}: blacklisted at {at}, left out", f.obj.name),
                        excluded: None,
                    });
                    continue;
                }
                self.add_found(&f, &head, req);
            }
        }
        for name in &scan.loaded {
            let head = format!("{}: loaded now (/proc/modules)", req.label);
            if !self.add_query_head(name, &head, req) {
                self.notes.push(Note {
                    tag: req.tag,
                    message: format!(
                        "{head}: `{name}` is not a module of kernel {}, left out",
                        self.tree.kver
                    ),
                    excluded: None,
                });
            }
        }
    }

    pub fn add_query_head(&mut self, query: &str, head: &str, req: &Request) -> bool {
        let found = self.tree.lookup(query);
        for f in &found {
            self.add_found(f, head, req);
        }
        !found.is_empty()
    }

    fn add_found(&mut self, f: &Found, head: &str, req: &Request) {
        let name = &f.obj.name;
        let relpath = self
            .tree
            .module(name)
            .map(|m| m.relpath.as_str())
            .unwrap_or("");
        if (req.exclude)(name, relpath) {
            self.notes.push(Note {
                tag: req.tag,
                message: format!("{head} -> {name}: excluded"),
                excluded: Some(name.clone()),
            });
            return;
        }
        let list = self.tree.probe(f, req.blacklist);
        // Chains: each entry's parent is named by its reason.
        let mut chains: HashMap<String, String> = HashMap::new();
        let top = format!("{head} -> {name}");
        chains.insert(name.clone(), top.clone());
        // Parents come after their dependencies in a probe list: resolve
        // chains top-down, repeating until nothing changes.
        let mut pending: Vec<&super::probe::Probed> = list.iter().collect();
        for _ in 0..list.len() + 1 {
            let mut rest = Vec::new();
            for p in pending {
                let n = p.step.name().to_string();
                match p.reason.parent() {
                    None => {
                        chains.entry(n).or_insert_with(|| top.clone());
                    }
                    Some(of) => match chains.get(of).cloned() {
                        Some(c) => {
                            chains
                                .entry(n.clone())
                                .or_insert_with(|| format!("{c} -> {n}{}", describe(&p.reason)));
                        }
                        None => rest.push(p),
                    },
                }
            }
            if rest.is_empty() {
                break;
            }
            pending = rest;
        }
        for p in &list {
            let n = p.step.name();
            let chain = chains
                .get(n)
                .cloned()
                .unwrap_or_else(|| format!("{top} -> {n}{}", describe(&p.reason)));
            let soft = matches!(p.reason, Reason::SoftPre { .. } | Reason::SoftPost { .. });
            match &p.step {
                Step::Insmod { relpath, .. } => {
                    if self.index.contains_key(n) {
                        continue;
                    }
                    if soft && (req.exclude)(n, relpath) {
                        self.notes.push(Note {
                            tag: req.tag,
                            message: format!("{chain}: excluded"),
                            excluded: Some(n.to_string()),
                        });
                        continue;
                    }
                    self.index.insert(n.to_string(), self.modules.len());
                    self.modules.push(Selected {
                        name: n.to_string(),
                        relpath: relpath.clone(),
                        tag: req.tag,
                        chain,
                    });
                }
                // Built into the kernel: nothing to take.
                Step::Builtin { .. } => {}
                Step::Install { command, .. } => {
                    self.notes.push(Note {
                        tag: req.tag,
                        message: format!(
                            "{chain}: the configuration installs it with `{command}`; the module itself is included"
                        ),
                        excluded: None,
                    });
                    if let Some(m) = self.tree.module(n) {
                        if !self.index.contains_key(n) {
                            self.index.insert(n.to_string(), self.modules.len());
                            self.modules.push(Selected {
                                name: n.to_string(),
                                relpath: m.relpath.clone(),
                                tag: req.tag,
                                chain,
                            });
                        }
                    }
                }
            }
        }
    }

    /// Adds what the selected modules' `weakdep` lines name, with their own
    /// probe lists, until nothing new comes in.
    pub fn add_weakdeps(&mut self, exclude: &dyn Fn(&str, &str) -> bool) {
        let mut i = 0;
        while i < self.modules.len() {
            let (name, chain, tag) = {
                let m = &self.modules[i];
                (m.name.clone(), m.chain.clone(), m.tag)
            };
            for (spec, f) in self.tree.weakdeps(&name) {
                if self.contains(&f.obj.name) {
                    continue;
                }
                let head = format!("{chain} -> weakdep {spec}");
                let req = Request {
                    tag,
                    label: head.clone(),
                    exclude,
                    blacklist: false,
                };
                self.add_found(&f, &head, &req);
            }
            i += 1;
        }
    }
}

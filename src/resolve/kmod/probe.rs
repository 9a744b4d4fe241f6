//! modprobe's rules, as libkmod implements them: how a name becomes
//! modules (`kmod_module_new_from_lookup`) and what loading one entails
//! (`kmod_module_get_probe_list`), quirks included, so that the result is
//! what `modprobe --show-depends` prints.
//!
//! Quirks kept on purpose: a module reached through an alias is a
//! different object from the same module reached by name (so it can be
//! listed twice); only the first `softdep` line that matches a module
//! counts; the soft dependencies of a module's dependencies are expanded,
//! their dependencies are not re-walked.

use std::collections::HashSet;

use super::names::normalize_alias;
use super::tree::ModuleTree;

/// A module as libkmod pools it: by name, and by the alias it was found
/// through.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Obj {
    pub name: String,
    pub alias: Option<String>,
}

/// How a lookup found a module.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Via {
    /// An `alias` line of the configuration.
    Config { pattern: String, at: String },
    /// Its own name (a `modules.dep` entry).
    Name,
    /// `symbol:NAME`, through `modules.symbols`.
    Symbol { pattern: String },
    /// An `install` or `remove` command of the configuration.
    Command,
    /// An alias of the module (`modules.alias`).
    Alias { pattern: String },
    /// `modules.builtin`.
    Builtin,
    /// An alias of a built-in module (`modules.builtin.modinfo`).
    BuiltinAlias { pattern: String },
}

impl std::fmt::Display for Via {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Via::Config { pattern, at } => write!(f, "alias {pattern} ({at})"),
            Via::Name => f.write_str("name"),
            Via::Symbol { pattern } => write!(f, "{pattern}"),
            Via::Command => f.write_str("install command"),
            Via::Alias { pattern } => write!(f, "alias {pattern}"),
            Via::Builtin => f.write_str("built-in"),
            Via::BuiltinAlias { pattern } => write!(f, "built-in alias {pattern}"),
        }
    }
}

/// One result of a lookup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    pub obj: Obj,
    pub via: Via,
    builtin: bool,
}

/// What modprobe would do for one entry of a probe list.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Step {
    /// `insmod <module dir>/<relpath>`.
    Insmod { name: String, relpath: String },
    /// Built into the kernel: nothing to load.
    Builtin { name: String },
    /// An `install` command of the configuration runs instead.
    Install { name: String, command: String },
}

impl Step {
    pub fn name(&self) -> &str {
        match self {
            Step::Insmod { name, .. } | Step::Builtin { name } | Step::Install { name, .. } => name,
        }
    }
}

/// Why an entry is in a probe list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reason {
    /// The module asked for.
    Requested,
    /// A hard dependency (its symbols are used) of `of`.
    Dependency {
        of: String,
    },
    /// A soft dependency of `of`: `spec` is the name in the softdep line.
    SoftPre {
        of: String,
        spec: String,
    },
    SoftPost {
        of: String,
        spec: String,
    },
}

impl Reason {
    pub fn parent(&self) -> Option<&str> {
        match self {
            Reason::Requested => None,
            Reason::Dependency { of }
            | Reason::SoftPre { of, .. }
            | Reason::SoftPost { of, .. } => Some(of),
        }
    }
}

/// One line of `modprobe --show-depends`, with its reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Probed {
    pub step: Step,
    pub reason: Reason,
}

impl Found {
    /// A module named directly (modprobe given a module file's path).
    pub fn by_name(name: &str) -> Found {
        Found {
            obj: Obj {
                name: name.to_string(),
                alias: None,
            },
            via: Via::Name,
            builtin: false,
        }
    }
}

impl ModuleTree {
    /// `kmod_module_new_from_lookup`: the modules a name, alias or
    /// `symbol:` name stands for, in libkmod's order. Empty when unknown.
    pub fn lookup(&self, query: &str) -> Vec<Found> {
        let Some(q) = normalize_alias(query) else {
            return Vec::new();
        };
        let found = |name: &str, alias: Option<&str>, via: Via, builtin: bool| Found {
            obj: Obj {
                name: name.to_string(),
                alias: alias.map(str::to_string),
            },
            via,
            builtin,
        };
        // 1. alias lines of the configuration.
        let conf: Vec<Found> = self
            .config
            .aliases
            .iter()
            .filter(|a| super::index::fnmatch(a.pattern.as_bytes(), q.as_bytes()))
            .map(|a| {
                found(
                    &a.module,
                    Some(&a.pattern),
                    Via::Config {
                        pattern: a.pattern.clone(),
                        at: a.at.to_string(),
                    },
                    false,
                )
            })
            .collect();
        if !conf.is_empty() {
            return conf;
        }
        // 2. a module name.
        if !q.contains(':') && self.dep_line(&q).is_some() {
            return vec![found(&q, None, Via::Name, false)];
        }
        // 3. symbol:NAME.
        if q.starts_with("symbol:") {
            let hits = Self::found(
                self.symbol_matches(&q),
                &q,
                |p| Via::Symbol { pattern: p },
                false,
            );
            if !hits.is_empty() {
                return hits;
            }
        }
        // 4. install / remove commands.
        if self
            .config
            .install
            .iter()
            .chain(&self.config.remove)
            .any(|c| c.pattern == q)
        {
            return vec![found(&q, None, Via::Command, false)];
        }
        // 5. modules.alias.
        let hits = Self::found(
            self.alias_matches(&q),
            &q,
            |p| Via::Alias { pattern: p },
            false,
        );
        if !hits.is_empty() {
            return hits;
        }
        // 6. modules.builtin, 7. built-in aliases.
        if self.is_builtin(&q) {
            return vec![found(&q, None, Via::Builtin, true)];
        }
        if let Some(idx) = self.builtin_alias_index() {
            return Self::found(
                idx.search_wild(q.as_bytes()),
                &q,
                |p| Via::BuiltinAlias { pattern: p },
                true,
            );
        }
        Vec::new()
    }

    fn found(
        matches: Vec<super::index::Match>,
        q: &str,
        via: impl Fn(String) -> Via,
        builtin: bool,
    ) -> Vec<Found> {
        matches
            .into_iter()
            .map(|m| Found {
                obj: Obj {
                    name: String::from_utf8_lossy(&m.value).into_owned(),
                    alias: Some(q.to_string()),
                },
                via: via(String::from_utf8_lossy(&m.key).into_owned()),
                builtin,
            })
            .collect()
    }

    /// `modprobe --show-depends QUERY` (with `blacklist`, as `-b`): every
    /// module the query stands for with its probe list, concatenated.
    /// None when modprobe would say "not found".
    pub fn show_depends(&self, query: &str, blacklist: bool) -> Option<Vec<Probed>> {
        let found = self.lookup(query);
        if found.is_empty() {
            return None;
        }
        let mut out = Vec::new();
        for f in &found {
            out.extend(self.probe(f, blacklist));
        }
        Some(out)
    }

    /// The probe list of one looked-up module (empty when it is
    /// blacklisted: aliases always, names too with `blacklist`).
    pub fn probe(&self, f: &Found, blacklist: bool) -> Vec<Probed> {
        if self.config.blacklisted(&f.obj.name).is_some() && (f.obj.alias.is_some() || blacklist) {
            return Vec::new();
        }
        let mut p = Prober {
            tree: self,
            visited: HashSet::new(),
            builtin_objs: HashSet::new(),
            list: Vec::new(),
        };
        if f.builtin {
            p.builtin_objs.insert(f.obj.clone());
        }
        p.get_probe_list(f.obj.clone(), Reason::Requested);
        p.list
            .into_iter()
            .filter_map(|(obj, reason, ignorecmd)| {
                let step = self.step(&obj, ignorecmd, &p.builtin_objs)?;
                Some(Probed { step, reason })
            })
            .collect()
    }

    fn step(&self, obj: &Obj, ignorecmd: bool, builtin_objs: &HashSet<Obj>) -> Option<Step> {
        if !ignorecmd {
            if let Some(c) = self.config.install_command(&obj.name) {
                return Some(Step::Install {
                    name: obj.name.clone(),
                    command: c.command.clone(),
                });
            }
        }
        match self.dep_line(&obj.name) {
            Some((relpath, _)) => Some(Step::Insmod {
                name: obj.name.clone(),
                relpath,
            }),
            None if builtin_objs.contains(obj) || self.is_builtin(&obj.name) => {
                Some(Step::Builtin {
                    name: obj.name.clone(),
                })
            }
            None => None,
        }
    }

    /// The modules a module's `weakdep` line names (kmod 33): looked up,
    /// not loaded by modprobe, but wanted in an image.
    pub fn weakdeps(&self, name: &str) -> Vec<(String, Found)> {
        let Some(w) = self.config.weakdep(name) else {
            return Vec::new();
        };
        w.weak
            .iter()
            .flat_map(|spec| {
                self.lookup(spec)
                    .into_iter()
                    .map(move |f| (spec.clone(), f))
            })
            .collect()
    }
}

struct Prober<'t> {
    tree: &'t ModuleTree,
    visited: HashSet<Obj>,
    builtin_objs: HashSet<Obj>,
    /// (module, why, ignorecmd)
    list: Vec<(Obj, Reason, bool)>,
}

impl Prober<'_> {
    fn get_probe_list(&mut self, obj: Obj, reason: Reason) {
        if !self.visited.insert(obj.clone()) {
            return;
        }
        let deps = self
            .tree
            .dep_line(&obj.name)
            .map(|(_, deps)| deps)
            .unwrap_or_default();
        // libkmod prepends each dependency: the line is walked backwards.
        for d in deps.iter().rev() {
            let dep = Obj {
                name: super::ko::modname(d),
                alias: None,
            };
            self.fill_softdep(
                dep,
                Reason::Dependency {
                    of: obj.name.clone(),
                },
            );
        }
        self.fill_softdep(obj, reason);
    }

    fn fill_softdep(&mut self, obj: Obj, reason: Reason) {
        let (pre, post) = match self.tree.config.softdep(&obj.name) {
            Some(s) => (s.pre.clone(), s.post.clone()),
            None => (Vec::new(), Vec::new()),
        };
        let pre: Vec<(String, super::probe::Found)> = pre
            .iter()
            .flat_map(|spec| {
                self.tree
                    .lookup(spec)
                    .into_iter()
                    .map(move |f| (spec.clone(), f))
            })
            .collect();
        let post: Vec<(String, Found)> = post
            .iter()
            .flat_map(|spec| {
                self.tree
                    .lookup(spec)
                    .into_iter()
                    .map(move |f| (spec.clone(), f))
            })
            .collect();
        for (spec, f) in &pre {
            if f.builtin {
                self.builtin_objs.insert(f.obj.clone());
            }
            self.get_probe_list(
                f.obj.clone(),
                Reason::SoftPre {
                    of: obj.name.clone(),
                    spec: spec.clone(),
                },
            );
        }
        let ignorecmd = !pre.is_empty() || !post.is_empty();
        let name = obj.name.clone();
        self.list.push((obj, reason, ignorecmd));
        for (spec, f) in &post {
            if f.builtin {
                self.builtin_objs.insert(f.obj.clone());
            }
            self.get_probe_list(
                f.obj.clone(),
                Reason::SoftPost {
                    of: name.clone(),
                    spec: spec.clone(),
                },
            );
        }
    }
}

//! Kernel modules, resolved the way kmod's modprobe resolves them.
//!
//! Input: a source root and a kernel version. Output: a [`ModuleTree`]
//! that answers modprobe's questions (what does this name or alias load,
//! in which order, with which soft dependencies) and the files an image
//! needs so that modprobe works inside it.
//!
//! * `ko`: reading `.ko` files (compressed too): `.modinfo`, exports, imports;
//! * `depmod`: dependencies from the symbols, depmod's order and files;
//! * `index`: kmod's binary trie indexes, written and searched as kmod does;
//! * `config`: `modprobe.d` and `modules.softdep`;
//! * `probe`: modprobe's lookup and probe-list rules;
//! * `select`: a set of modules for an image, with the reason for each;
//! * `firmware`, `host`: firmware files, and what the running machine uses.
//!
//! A tree with kmod's indexes (`modules.dep.bin` and friends) is read
//! through them; a tree with only text metadata through that; a tree with
//! neither (Debian's linux-image package ships none) is scanned: every
//! module is read and depmod's computation runs in process.

pub mod config;
pub mod depmod;
pub mod firmware;
pub mod host;
pub mod index;
pub mod ko;
pub mod probe;
pub mod select;

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use config::Config;
use depmod::{Depmod, ModFile};
use index::{Index, IndexError};
use ko::KoInfo;

use crate::resolve::root::Root;

/// libkmod's `alias_normalize`: `-` becomes `_` outside `[...]`; None for
/// unbalanced brackets.
pub fn normalize_alias(s: &str) -> Option<String> {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '-' => out.push('_'),
            ']' => return None,
            '[' => {
                out.push('[');
                loop {
                    match chars.next() {
                        Some(']') => {
                            out.push(']');
                            break;
                        }
                        Some(c) => out.push(c),
                        None => return None,
                    }
                }
            }
            c => out.push(c),
        }
    }
    Some(out)
}

/// libkmod's `modname_normalize`: up to the first `.`, `-` as `_`.
pub fn normalize_modname(s: &str) -> String {
    s.split('.').next().unwrap_or(s).replace('-', "_")
}

/// Why a module tree cannot be used.
#[derive(Debug)]
pub enum KmodError {
    /// No `lib/modules/<kver>` directory in the root.
    NoModuleDir {
        kver: String,
        tried: Vec<String>,
    },
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A module file that cannot be read as a module.
    BadModule {
        path: PathBuf,
        message: String,
    },
    Index {
        path: PathBuf,
        error: IndexError,
    },
    Cycle(depmod::CycleError),
}

impl fmt::Display for KmodError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KmodError::NoModuleDir { kver, tried } => write!(
                f,
                "no module directory for kernel {kver} (looked for {})",
                tried.join(" and ")
            ),
            KmodError::Io { path, source } => write!(f, "{}: {source}", path.display()),
            KmodError::BadModule { path, message } => {
                write!(
                    f,
                    "{}: not a readable kernel module: {message}",
                    path.display()
                )
            }
            KmodError::Index { path, error } => write!(f, "{}: {error}", path.display()),
            KmodError::Cycle(c) => c.fmt(f),
        }
    }
}

impl std::error::Error for KmodError {}

impl KmodError {
    /// What the user can do about it.
    pub fn hint(&self) -> &'static str {
        match self {
            KmodError::NoModuleDir { .. } => {
                "pass --kver with a version installed in the root, or set `root` to where its modules are"
            }
            KmodError::Io { .. } => "check that the module tree is readable",
            KmodError::BadModule { .. } => {
                "remove or replace the file; modules must be ELF objects, optionally .xz, .zst or .gz"
            }
            KmodError::Index { .. } => "run depmod for this kernel, or delete its stale modules.*.bin files",
            KmodError::Cycle(_) => "a module tree with dependency cycles cannot be loaded by modprobe either",
        }
    }
}

/// Where the tree's answers come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TreeSource {
    /// kmod's binary indexes.
    Indexes,
    /// The text files (`modules.dep`, `modules.alias`, ...).
    Text,
    /// No metadata: every module was read and dependencies computed.
    Scanned { modules: usize, elapsed: Duration },
}

/// A module file of the tree.
#[derive(Clone, Debug)]
pub struct TreeModule {
    pub name: String,
    /// Relative to the module directory.
    pub relpath: String,
}

/// The modules of one kernel in a source root, with everything modprobe
/// consults.
pub struct ModuleTree {
    pub kver: String,
    /// Host path of the module directory.
    pub dir: PathBuf,
    /// The module directory inside the root, without a leading `/`
    /// (`lib/modules/<kver>` or `usr/lib/modules/<kver>`).
    pub image_dir: String,
    pub source: TreeSource,
    pub config: Config,
    /// Every module, in the tree's module order.
    pub modules: Vec<TreeModule>,
    by_name: HashMap<String, usize>,
    dep: Index,
    alias: Index,
    symbols: Index,
    builtin: Index,
    builtin_alias: Option<Index>,
    /// Set when the tree was scanned.
    pub depmod: Option<Depmod>,
    /// Scanned trees answer from the computed graph, without tries.
    direct: Option<Direct>,
    info_cache: Mutex<HashMap<usize, KoInfo>>,
}

/// Lookups straight from a computed [`Depmod`]: what the tries would
/// answer, without building them.
struct Direct {
    /// Normalized alias pattern and module index, in module order.
    aliases: Vec<(String, u32)>,
}

impl fmt::Debug for ModuleTree {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ModuleTree")
            .field("kver", &self.kver)
            .field("dir", &self.dir)
            .field("source", &self.source)
            .field("modules", &self.modules.len())
            .finish()
    }
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> KmodError + '_ {
    move |source| KmodError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn read_opt(path: &Path) -> Result<Option<Vec<u8>>, KmodError> {
    match std::fs::read(path) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_err(path)(e)),
    }
}

/// Finds `lib/modules/<kver>` (or `usr/lib/modules/<kver>`) in the root.
pub fn module_dir(root: &Root, kver: &str) -> Result<(PathBuf, String), KmodError> {
    let mut tried = Vec::new();
    for base in ["lib/modules", "usr/lib/modules"] {
        let inside = format!("{base}/{kver}");
        tried.push(format!("/{inside}"));
        if kver.is_empty() || kver.contains('/') || kver == ".." {
            continue;
        }
        if let Ok(host) = root.resolve(Path::new(&inside), true) {
            if host.is_dir() {
                return Ok((host, inside));
            }
        }
    }
    Err(KmodError::NoModuleDir {
        kver: kver.to_string(),
        tried,
    })
}

/// Every module file below `dir` (relative paths), as depmod finds them
/// (`build` and `source` are skipped), sorted.
pub fn list_module_files(dir: &Path) -> Result<Vec<String>, KmodError> {
    let mut out = Vec::new();
    let walker = walkdir::WalkDir::new(dir)
        .follow_links(true)
        .into_iter()
        .filter_entry(|e| {
            e.depth() != 1 || !matches!(e.file_name().to_str(), Some("build" | "source"))
        });
    for e in walker {
        let e = e.map_err(|e| KmodError::Io {
            path: e.path().unwrap_or(dir).to_path_buf(),
            source: e
                .into_io_error()
                .unwrap_or_else(|| std::io::Error::other("walk failed")),
        })?;
        if !e.file_type().is_file() {
            continue;
        }
        let Some(name) = e.file_name().to_str() else {
            continue;
        };
        if !ko::is_module_file(name) {
            continue;
        }
        if let Ok(rel) = e.path().strip_prefix(dir) {
            if let Some(rel) = rel.to_str() {
                out.push(rel.to_string());
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Reads many modules on all cores. Results keep the input order.
pub fn read_modules(dir: &Path, relpaths: &[String]) -> Result<Vec<KoInfo>, KmodError> {
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Result<KoInfo, KmodError>>>> =
        Mutex::new((0..relpaths.len()).map(|_| None).collect());
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 8);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                let mut local = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= relpaths.len() {
                        break;
                    }
                    let path = dir.join(&relpaths[i]);
                    let r = ko::read(&path).map_err(|e| match e.kind() {
                        std::io::ErrorKind::InvalidData => KmodError::BadModule {
                            path: path.clone(),
                            message: e.to_string(),
                        },
                        _ => KmodError::Io {
                            path: path.clone(),
                            source: e,
                        },
                    });
                    local.push((i, r));
                }
                if let Ok(mut all) = results.lock() {
                    for (i, r) in local {
                        all[i] = Some(r);
                    }
                }
            });
        }
    });
    let all = results.into_inner().unwrap_or_default();
    all.into_iter()
        .map(|r| {
            r.unwrap_or_else(|| {
                Err(KmodError::Io {
                    path: dir.to_path_buf(),
                    source: std::io::Error::other("a reader thread failed"),
                })
            })
        })
        .collect()
}

impl ModuleTree {
    /// Opens the modules of `kver` in `root`: through kmod's indexes when
    /// present, else the text metadata, else by scanning every module.
    pub fn open(root: &Root, kver: &str) -> Result<ModuleTree, KmodError> {
        let (dir, image_dir) = module_dir(root, kver)?;
        if dir.join("modules.dep.bin").is_file() {
            Self::from_indexes(root, kver, dir, image_dir)
        } else if dir.join("modules.dep").is_file() {
            Self::from_text(root, kver, dir, image_dir)
        } else {
            Self::scan_dir(root, kver, dir, image_dir)
        }
    }

    /// Opens the tree by reading every module, whatever metadata it has.
    pub fn scan(root: &Root, kver: &str) -> Result<ModuleTree, KmodError> {
        let (dir, image_dir) = module_dir(root, kver)?;
        Self::scan_dir(root, kver, dir, image_dir)
    }

    fn builtin_indexes(dir: &Path) -> Result<(Index, Option<Index>), KmodError> {
        let builtin = match read_opt(&dir.join("modules.builtin"))? {
            Some(b) => depmod::builtin_index(&String::from_utf8_lossy(&b)),
            None => Ok(Index::new()),
        }
        .map_err(|error| KmodError::Index {
            path: dir.join("modules.builtin"),
            error,
        })?;
        let alias = match read_opt(&dir.join("modules.builtin.modinfo"))? {
            Some(b) => Some(
                depmod::builtin_alias_index(&b).map_err(|error| KmodError::Index {
                    path: dir.join("modules.builtin.modinfo"),
                    error,
                })?,
            ),
            None => None,
        };
        Ok((builtin, alias))
    }

    fn scan_dir(
        root: &Root,
        kver: &str,
        dir: PathBuf,
        image_dir: String,
    ) -> Result<ModuleTree, KmodError> {
        let started = Instant::now();
        let relpaths = list_module_files(&dir)?;
        let infos = read_modules(&dir, &relpaths)?;
        let mods: Vec<ModFile> = relpaths
            .into_iter()
            .zip(infos)
            .map(|(relpath, info)| ModFile {
                name: ko::modname(&relpath),
                relpath,
                info,
            })
            .collect();
        let (mods, _shadowed) = depmod::dedupe(mods);
        let order =
            read_opt(&dir.join("modules.order"))?.map(|b| String::from_utf8_lossy(&b).into_owned());
        let d = Depmod::new(mods, order.as_deref()).map_err(KmodError::Cycle)?;
        let mut aliases = Vec::new();
        for (i, m) in d.mods.iter().enumerate() {
            for a in m.info.values("alias") {
                if let Some(key) = normalize_alias(a) {
                    aliases.push((key, i as u32));
                }
            }
        }
        let direct = Some(Direct { aliases });
        let (builtin, builtin_alias) = Self::builtin_indexes(&dir)?;
        let mut extra = vec![(
            format!("/{image_dir}/modules.softdep"),
            "modules.softdep".to_string(),
            String::from_utf8_lossy(&d.softdep_text()).into_owned(),
        )];
        if let Some(w) = d.weakdep_text() {
            extra.push((
                format!("/{image_dir}/modules.weakdep"),
                "modules.weakdep".to_string(),
                String::from_utf8_lossy(&w).into_owned(),
            ));
        }
        let config = Config::load(root, extra);
        let modules: Vec<TreeModule> = d
            .mods
            .iter()
            .map(|m| TreeModule {
                name: m.name.clone(),
                relpath: m.relpath.clone(),
            })
            .collect();
        let by_name = modules
            .iter()
            .enumerate()
            .map(|(i, m)| (m.name.clone(), i))
            .collect();
        let info_cache = Mutex::new(HashMap::new());
        Ok(ModuleTree {
            kver: kver.to_string(),
            source: TreeSource::Scanned {
                modules: modules.len(),
                elapsed: started.elapsed(),
            },
            dir,
            image_dir,
            config,
            modules,
            by_name,
            dep: Index::new(),
            alias: Index::new(),
            symbols: Index::new(),
            builtin,
            builtin_alias,
            depmod: Some(d),
            direct,
            info_cache,
        })
    }

    fn metadata_config(root: &Root, dir: &Path, image_dir: &str) -> Result<Config, KmodError> {
        let mut extra = Vec::new();
        for name in ["modules.softdep", "modules.weakdep"] {
            if let Some(b) = read_opt(&dir.join(name))? {
                extra.push((
                    format!("/{image_dir}/{name}"),
                    name.to_string(),
                    String::from_utf8_lossy(&b).into_owned(),
                ));
            }
        }
        Ok(Config::load(root, extra))
    }

    fn from_parts(
        kver: &str,
        dir: PathBuf,
        image_dir: String,
        source: TreeSource,
        config: Config,
        indexes: [Index; 4],
        builtin_alias: Option<Index>,
    ) -> ModuleTree {
        let [dep, alias, symbols, builtin] = indexes;
        let mut listed: Vec<(u32, TreeModule)> = dep
            .entries()
            .into_iter()
            .filter_map(|(key, v)| {
                let line = String::from_utf8_lossy(&v.value).into_owned();
                let relpath = line.split(':').next()?.to_string();
                Some((
                    v.priority,
                    TreeModule {
                        name: String::from_utf8_lossy(&key).into_owned(),
                        relpath,
                    },
                ))
            })
            .collect();
        listed.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.relpath.cmp(&b.1.relpath)));
        let modules: Vec<TreeModule> = listed.into_iter().map(|(_, m)| m).collect();
        let by_name = modules
            .iter()
            .enumerate()
            .map(|(i, m)| (m.name.clone(), i))
            .collect();
        ModuleTree {
            kver: kver.to_string(),
            dir,
            image_dir,
            source,
            config,
            modules,
            by_name,
            dep,
            alias,
            symbols,
            builtin,
            builtin_alias,
            depmod: None,
            direct: None,
            info_cache: Mutex::new(HashMap::new()),
        }
    }

    fn from_indexes(
        root: &Root,
        kver: &str,
        dir: PathBuf,
        image_dir: String,
    ) -> Result<ModuleTree, KmodError> {
        let load = |name: &str| -> Result<Option<Index>, KmodError> {
            let path = dir.join(name);
            match read_opt(&path)? {
                Some(b) => Index::from_bytes(&b)
                    .map(Some)
                    .map_err(|error| KmodError::Index { path, error }),
                None => Ok(None),
            }
        };
        let dep = load("modules.dep.bin")?.unwrap_or_default();
        let alias = load("modules.alias.bin")?.unwrap_or_default();
        let symbols = load("modules.symbols.bin")?.unwrap_or_default();
        let (builtin, builtin_alias) = match load("modules.builtin.bin")? {
            Some(b) => (b, load("modules.builtin.alias.bin")?),
            None => Self::builtin_indexes(&dir)?,
        };
        let config = Self::metadata_config(root, &dir, &image_dir)?;
        Ok(Self::from_parts(
            kver,
            dir,
            image_dir,
            TreeSource::Indexes,
            config,
            [dep, alias, symbols, builtin],
            builtin_alias,
        ))
    }

    fn from_text(
        root: &Root,
        kver: &str,
        dir: PathBuf,
        image_dir: String,
    ) -> Result<ModuleTree, KmodError> {
        let text = |name: &str| -> Result<String, KmodError> {
            Ok(read_opt(&dir.join(name))?
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_default())
        };
        let ix = |r: Result<bool, IndexError>, name: &str| {
            r.map(|_| ()).map_err(|error| KmodError::Index {
                path: dir.join(name),
                error,
            })
        };
        let mut dep = Index::new();
        let mut prio: HashMap<String, u32> = HashMap::new();
        for (i, line) in text("modules.dep")?.lines().enumerate() {
            let Some((path, _)) = line.split_once(':') else {
                continue;
            };
            let name = ko::modname(path);
            prio.insert(name.clone(), i as u32);
            ix(
                dep.insert(name.as_bytes(), line.as_bytes(), i as u32),
                "modules.dep",
            )?;
        }
        let mut alias = Index::new();
        for line in text("modules.alias")?.lines() {
            let mut w = line.split_whitespace();
            if let (Some("alias"), Some(a), Some(m)) = (w.next(), w.next(), w.next()) {
                if let Some(key) = normalize_alias(a) {
                    let p = prio.get(m).copied().unwrap_or(u32::MAX);
                    ix(
                        alias.insert(key.as_bytes(), m.as_bytes(), p),
                        "modules.alias",
                    )?;
                }
            }
        }
        let mut symbols = Index::new();
        for line in text("modules.symbols")?.lines() {
            let mut w = line.split_whitespace();
            if let (Some("alias"), Some(a), Some(m)) = (w.next(), w.next(), w.next()) {
                let p = prio.get(m).copied().unwrap_or(u32::MAX);
                ix(
                    symbols.insert(a.as_bytes(), m.as_bytes(), p),
                    "modules.symbols",
                )?;
            }
        }
        let (builtin, builtin_alias) = Self::builtin_indexes(&dir)?;
        let config = Self::metadata_config(root, &dir, &image_dir)?;
        Ok(Self::from_parts(
            kver,
            dir,
            image_dir,
            TreeSource::Text,
            config,
            [dep, alias, symbols, builtin],
            builtin_alias,
        ))
    }

    /// A module by (normalized) name.
    pub fn module(&self, name: &str) -> Option<&TreeModule> {
        self.by_name.get(name).map(|&i| &self.modules[i])
    }

    /// The host path of a module file.
    pub fn host_path(&self, m: &TreeModule) -> PathBuf {
        self.dir.join(&m.relpath)
    }

    /// The `modules.dep` line of a module: its file and its dependencies'
    /// files, in the line's order.
    pub fn dep_line(&self, name: &str) -> Option<(String, Vec<String>)> {
        if let (Some(d), Some(_)) = (&self.depmod, &self.direct) {
            let &i = self.by_name.get(name)?;
            let deps = d.lines[i]
                .iter()
                .map(|&x| d.mods[x].relpath.clone())
                .collect();
            return Some((d.mods[i].relpath.clone(), deps));
        }
        let line = self.dep.search(name.as_bytes())?;
        let line = String::from_utf8_lossy(line);
        let (path, deps) = line.split_once(':')?;
        Some((
            path.to_string(),
            deps.split_whitespace().map(str::to_string).collect(),
        ))
    }

    /// True when `modules.builtin` names the module.
    pub fn is_builtin(&self, name: &str) -> bool {
        self.builtin.search(name.as_bytes()).is_some()
    }

    /// What `modules.alias.bin` answers for `q` (a normalized alias).
    pub(crate) fn alias_matches(&self, q: &str) -> Vec<index::Match> {
        match (&self.direct, &self.depmod) {
            (Some(direct), Some(d)) => direct
                .aliases
                .iter()
                .filter(|(pat, _)| index::fnmatch(pat.as_bytes(), q.as_bytes()))
                .map(|(pat, i)| index::Match {
                    key: pat.clone().into_bytes(),
                    value: d.mods[*i as usize].name.clone().into_bytes(),
                    priority: *i,
                })
                .collect(),
            _ => self.alias.search_wild(q.as_bytes()),
        }
    }

    /// What `modules.symbols.bin` answers for `q` (`symbol:NAME`).
    pub(crate) fn symbol_matches(&self, q: &str) -> Vec<index::Match> {
        match (&self.direct, &self.depmod) {
            (Some(_), Some(d)) => q
                .strip_prefix("symbol:")
                .and_then(|sym| d.owner.get(sym))
                .map(|&o| index::Match {
                    key: q.as_bytes().to_vec(),
                    value: d.mods[o].name.clone().into_bytes(),
                    priority: o as u32,
                })
                .into_iter()
                .collect(),
            _ => self.symbols.search_wild(q.as_bytes()),
        }
    }

    pub(crate) fn builtin_alias_index(&self) -> Option<&Index> {
        self.builtin_alias.as_ref()
    }

    /// What a module's file says (read once, then cached).
    pub fn info(&self, name: &str) -> Result<KoInfo, KmodError> {
        let Some(&i) = self.by_name.get(name) else {
            return Ok(KoInfo::default());
        };
        if let Some(d) = &self.depmod {
            if let Some(m) = d.mods.iter().find(|m| m.name == name) {
                return Ok(m.info.clone());
            }
        }
        if let Some(info) = self.info_cache.lock().ok().and_then(|c| c.get(&i).cloned()) {
            return Ok(info);
        }
        let path = self.host_path(&self.modules[i]);
        let info = ko::read(&path).map_err(|e| KmodError::BadModule {
            path: path.clone(),
            message: e.to_string(),
        })?;
        if let Ok(mut c) = self.info_cache.lock() {
            c.insert(i, info.clone());
        }
        Ok(info)
    }

    /// Reads the named modules' files on all cores (to warm [`Self::info`]).
    pub fn preload(&self, names: &[&str]) -> Result<(), KmodError> {
        if self.depmod.is_some() {
            return Ok(());
        }
        let todo: Vec<usize> = {
            let cache = self
                .info_cache
                .lock()
                .map(|c| c.clone())
                .unwrap_or_default();
            names
                .iter()
                .filter_map(|n| self.by_name.get(*n).copied())
                .filter(|i| !cache.contains_key(i))
                .collect()
        };
        let rel: Vec<String> = todo
            .iter()
            .map(|&i| self.modules[i].relpath.clone())
            .collect();
        let infos = read_modules(&self.dir, &rel)?;
        if let Ok(mut c) = self.info_cache.lock() {
            for (i, info) in todo.into_iter().zip(infos) {
                c.insert(i, info);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_like_libkmod() {
        assert_eq!(
            normalize_alias("crypto-crc32c").as_deref(),
            Some("crypto_crc32c")
        );
        assert_eq!(
            normalize_alias("pci:v[0-9]d-x").as_deref(),
            Some("pci:v[0-9]d_x")
        );
        assert_eq!(normalize_alias("a]b"), None);
        assert_eq!(normalize_alias("a[b"), None);
        assert_eq!(normalize_modname("crc32c-intel.ko"), "crc32c_intel");
    }
}

//! A kernel's module tree, read the way modprobe reads it: through kmod's
//! indexes, its text metadata, or (with neither) a scan of every module.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::config::Config;
use super::depmod::{Depmod, ModFile};
use super::error::KmodError;
use super::index::{Index, IndexError};
use super::ko::KoInfo;
use super::names::{normalize_alias, normalize_alias_into};
use super::scan::read_modules;
use super::{cache, depmod, index, ko, scan};
use crate::resolve::root::Root;

/// Where the tree's answers come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TreeSource {
    /// kmod's binary indexes.
    Indexes,
    /// The text files (`modules.dep`, `modules.alias`, ...).
    Text,
    /// No metadata: every module was read (or, with `kept`, what they say
    /// was taken from an earlier scan of the unchanged tree) and the
    /// dependencies computed.
    Scanned {
        modules: usize,
        elapsed: Duration,
        kept: bool,
    },
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
    /// A scan being kept for the next run (finished when the tree is dropped).
    _saving: Pending,
}

/// Work on another thread, waited for when dropped.
#[derive(Default)]
struct Pending(Option<std::thread::JoinHandle<()>>);

impl Drop for Pending {
    fn drop(&mut self) {
        if let Some(s) = self.0.take() {
            let _ = s.join();
        }
    }
}

/// Lookups straight from a computed [`Depmod`]: what the tries would
/// answer, without building them.
struct Direct {
    /// Normalized alias patterns, end to end.
    text: String,
    /// (end of the pattern in `text`, module index), in module order.
    aliases: Vec<(u32, u32)>,
    /// Alias numbers grouped by the first byte of the pattern; group 256
    /// holds the patterns that may match any first byte (a wildcard or an
    /// escape first, or empty). Group `b` is `by_first[starts[b]..starts[b + 1]]`.
    by_first: Vec<u32>,
    starts: Vec<u32>,
}

impl Direct {
    fn new(d: &Depmod) -> Direct {
        let size = d
            .mods
            .iter()
            .flat_map(|m| m.info.values("alias"))
            .map(str::len)
            .sum();
        let mut text = String::with_capacity(size);
        let mut aliases = Vec::new();
        for (i, m) in d.mods.iter().enumerate() {
            for a in m.info.values("alias") {
                let start = text.len();
                if normalize_alias_into(a, &mut text) {
                    aliases.push((text.len() as u32, i as u32));
                } else {
                    text.truncate(start);
                }
            }
        }
        let mut direct = Direct {
            text,
            aliases,
            by_first: Vec::new(),
            starts: Vec::new(),
        };
        let group = |p: &[u8]| match p.first() {
            Some(b'*' | b'?' | b'[' | b'\\') | None => 256,
            Some(&b) => b as usize,
        };
        let mut count = vec![0u32; 258];
        for a in 0..direct.aliases.len() {
            count[group(direct.pattern(a).as_bytes()) + 1] += 1;
        }
        for g in 1..count.len() {
            count[g] += count[g - 1];
        }
        let mut fill = count.clone();
        direct.by_first = vec![0; direct.aliases.len()];
        for a in 0..direct.aliases.len() {
            let g = group(direct.pattern(a).as_bytes());
            direct.by_first[fill[g] as usize] = a as u32;
            fill[g] += 1;
        }
        direct.starts = count;
        direct
    }

    fn pattern(&self, a: usize) -> &str {
        let start = if a == 0 {
            0
        } else {
            self.aliases[a - 1].0 as usize
        };
        &self.text[start..self.aliases[a].0 as usize]
    }

    /// The aliases whose pattern matches `q`, in module order.
    fn matching(&self, q: &[u8]) -> Vec<usize> {
        let group =
            |g: usize| self.by_first[self.starts[g] as usize..self.starts[g + 1] as usize].iter();
        let first = q.first().map(|&b| group(b as usize));
        let mut hits: Vec<usize> = first
            .into_iter()
            .flatten()
            .chain(group(256))
            .map(|&a| a as usize)
            .filter(|&a| index::fnmatch(self.pattern(a).as_bytes(), q))
            .collect();
        hits.sort_unstable();
        hits
    }
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
    use crate::io::{read_regular, InputError, MAX_INPUT};
    match read_regular(path, MAX_INPUT) {
        Ok(b) => Ok(Some(b)),
        Err(InputError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(InputError::Io(e)) => Err(io_err(path)(e)),
        Err(e) => Err(io_err(path)(std::io::Error::other(e.to_string()))),
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

impl ModuleTree {
    /// Opens the modules of `kver` in `root`: through kmod's indexes when
    /// present, else the text metadata, else by scanning every module.
    pub fn open(root: &Root, kver: &str) -> Result<ModuleTree, KmodError> {
        Self::open_with(root, kver, None)
    }

    /// [`Self::open`]; a tree that has to be scanned is kept in (and taken
    /// from) `scans`, a directory for [`cache`].
    pub fn open_with(
        root: &Root,
        kver: &str,
        scans: Option<&Path>,
    ) -> Result<ModuleTree, KmodError> {
        let (dir, image_dir) = module_dir(root, kver)?;
        if dir.join("modules.dep.bin").is_file() {
            Self::from_indexes(root, kver, dir, image_dir)
        } else if dir.join("modules.dep").is_file() {
            Self::from_text(root, kver, dir, image_dir)
        } else {
            Self::scan_dir(root, kver, dir, image_dir, scans)
        }
    }

    /// [`Self::open_with`] for a module tree at `dir` outside the root
    /// (the root still gives the configuration and firmware); in the image
    /// it goes to `lib/modules/<kver>`.
    pub fn open_in(
        root: &Root,
        kver: &str,
        dir: &Path,
        scans: Option<&Path>,
    ) -> Result<ModuleTree, KmodError> {
        if !dir.is_dir() {
            return Err(KmodError::NoModuleDir {
                kver: kver.to_string(),
                tried: vec![dir.display().to_string()],
            });
        }
        let dir = dir.to_path_buf();
        let image_dir = format!("lib/modules/{kver}");
        if dir.join("modules.dep.bin").is_file() {
            Self::from_indexes(root, kver, dir, image_dir)
        } else if dir.join("modules.dep").is_file() {
            Self::from_text(root, kver, dir, image_dir)
        } else {
            Self::scan_dir(root, kver, dir, image_dir, scans)
        }
    }

    /// Opens the tree by reading every module, whatever metadata it has.
    pub fn scan(root: &Root, kver: &str) -> Result<ModuleTree, KmodError> {
        let (dir, image_dir) = module_dir(root, kver)?;
        Self::scan_dir(root, kver, dir, image_dir, None)
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
        scans: Option<&Path>,
    ) -> Result<ModuleTree, KmodError> {
        let started = Instant::now();
        let mut saving = Pending::default();
        let (found, kept) = match scans {
            None => (scan::scan(&dir, true)?, false),
            Some(scans) => {
                // Kept under the real path: another way to the same tree
                // finds the same scan.
                let real = std::fs::canonicalize(&dir).map_err(io_err(&dir))?;
                match cache::load(scans, &real) {
                    Some(found) => (found, true),
                    None => {
                        let now = std::time::SystemTime::now();
                        let s = scan::scan_tree(&dir, true, true)?;
                        let found = s
                            .modules
                            .iter()
                            .map(|(r, i, _)| (r.clone(), i.clone()))
                            .collect();
                        // Written meanwhile, on a core the rest leaves idle.
                        let scans = scans.to_path_buf();
                        saving = Pending(Some(std::thread::spawn(move || {
                            cache::save(&scans, &real, &s, now)
                        })));
                        (found, false)
                    }
                }
            }
        };
        let mods: Vec<ModFile> = found
            .into_iter()
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
        let direct = Some(Direct::new(&d));
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
                kept,
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
            _saving: saving,
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
            _saving: Pending::default(),
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
                .matching(q.as_bytes())
                .into_iter()
                .map(|a| {
                    let i = direct.aliases[a].1;
                    index::Match {
                        key: direct.pattern(a).as_bytes().to_vec(),
                        value: d.mods[i as usize].name.clone().into_bytes(),
                        priority: i,
                    }
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
                .and_then(|sym| d.owner_of(sym.as_bytes()))
                .map(|o| index::Match {
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
            // A scanned tree lists its modules in the graph's order.
            if let Some(m) = d.mods.get(i).filter(|m| m.name == name) {
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

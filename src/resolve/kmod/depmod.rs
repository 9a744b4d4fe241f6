//! depmod, in process: dependencies computed from the modules themselves
//! (each module's undefined symbols against the symbols other modules
//! export), ordered and written as kmod's depmod writes them.
//!
//! Input: [`ModFile`]s (what [`super::ko`] read) and `modules.order`.
//! Output: [`Depmod`], from which every `modules.*` file depmod writes can
//! be produced, byte for byte (except `modules.symbols`, whose line order
//! depmod takes from a hash table; here it is sorted).

use std::collections::HashMap;
use std::fmt::Write as _;

use std::sync::Arc;

use super::index::{self, Index, IndexError};
use super::ko::{self, uncompressed_name, KoInfo, SymbolTable};
use super::names::normalize_alias;

/// One module file of a tree.
#[derive(Clone, Debug)]
pub struct ModFile {
    /// Path relative to `lib/modules/<kver>/`.
    pub relpath: String,
    /// Module name (`crc32c-intel.ko` -> `crc32c_intel`).
    pub name: String,
    pub info: KoInfo,
}

/// The computed dependency graph, modules in depmod's order.
#[derive(Clone, Debug)]
pub struct Depmod {
    pub mods: Vec<ModFile>,
    /// Direct dependencies, sorted by topological rank.
    pub deps: Vec<Vec<usize>>,
    /// Topological rank: a module ranks before everything it depends on.
    pub rank: Vec<usize>,
    /// What a `modules.dep` line lists: every dependency, direct or not,
    /// by rank.
    pub lines: Vec<Vec<usize>>,
    /// The symbols of all modules, numbered.
    symbols: Arc<SymbolTable>,
    /// Symbol number -> the module that exports it (the last one in module
    /// order, as in depmod), or [`NOBODY`].
    owner: Vec<u32>,
}

const NOBODY: u32 = u32::MAX;

/// A quick hash for symbol names (eight bytes per multiply): hundreds of
/// thousands of lookups, no untrusted keys worth a DoS-resistant hash.
#[derive(Clone, Copy, Debug, Default)]
pub struct FastHash;

impl std::hash::BuildHasher for FastHash {
    type Hasher = Fast;
    fn build_hasher(&self) -> Fast {
        Fast(0x243f_6a88_85a3_08d3)
    }
}

pub struct Fast(u64);

/// Multiplies and folds the high half in: every input bit reaches every
/// output bit.
#[inline]
fn mix(x: u64) -> u64 {
    let m = (x as u128).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (m as u64) ^ ((m >> 64) as u64)
}

impl std::hash::Hasher for Fast {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut h = self.0;
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            h = mix(h ^ u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            h = mix(h ^ u64::from_le_bytes(w) ^ ((rest.len() as u64) << 60));
        }
        self.0 = h;
    }
    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.0 = mix(self.0 ^ i as u64);
    }
    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.0 = mix(self.0 ^ i as u64);
    }
}

/// Modules that depend on each other in a loop (depmod refuses them too).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CycleError(pub Vec<Vec<String>>);

impl std::fmt::Display for CycleError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let cycles: Vec<String> = self.0.iter().map(|c| c.join(" -> ")).collect();
        write!(f, "modules in dependency cycles: {}", cycles.join("; "))
    }
}

/// Keeps one file per module name, as depmod does: a module under
/// `updates/` wins, otherwise the first in path order. Returns the kept
/// files (in path order of the first file of each name) and the others.
pub fn dedupe(mut mods: Vec<ModFile>) -> (Vec<ModFile>, Vec<ModFile>) {
    if !mods.is_sorted_by(|a, b| a.relpath <= b.relpath) {
        mods.sort_by(|a, b| a.relpath.cmp(&b.relpath));
    }
    // name -> (first file with the name, the one kept)
    let mut by_name: HashMap<&str, (usize, usize), FastHash> =
        HashMap::with_capacity_and_hasher(mods.len(), FastHash);
    let updates = |m: &ModFile| m.relpath.starts_with("updates/");
    for (i, m) in mods.iter().enumerate() {
        let e = by_name.entry(m.name.as_str()).or_insert((i, i));
        if updates(m) && !updates(&mods[e.1]) {
            e.1 = i;
        }
    }
    let mut keep = vec![usize::MAX; mods.len()]; // first file -> kept one
    let mut kept_at = vec![false; mods.len()];
    for &(first, kept) in by_name.values() {
        keep[first] = kept;
        kept_at[kept] = true;
    }
    drop(by_name);
    let mut slots: Vec<Option<ModFile>> = mods.into_iter().map(Some).collect();
    let mut kept = Vec::with_capacity(slots.len());
    let mut dropped = Vec::new();
    for i in 0..slots.len() {
        if keep[i] != usize::MAX {
            kept.extend(slots[keep[i]].take());
        }
        if !kept_at[i] {
            dropped.extend(slots[i].take());
        }
    }
    (kept, dropped)
}

impl Depmod {
    /// Orders `mods` by `modules.order` (the rest after, by path), resolves
    /// symbols and sorts topologically. Module names must be unique
    /// ([`dedupe`]).
    pub fn new(mut mods: Vec<ModFile>, order: Option<&str>) -> Result<Depmod, CycleError> {
        let mut pos: HashMap<&str, usize, FastHash> = HashMap::default();
        if let Some(order) = order {
            for (i, line) in order.split('\n').enumerate() {
                pos.insert(line, i);
            }
        }
        // Sorted as numbers, moved once.
        let mut keyed: Vec<(usize, usize, usize)> = mods
            .iter()
            .enumerate()
            .map(|(j, m)| match pos.get(uncompressed_name(&m.relpath)) {
                Some(&i) => (0, i, j),
                None => (1, 0, j),
            })
            .collect();
        keyed.sort_by(|a, b| {
            (a.0, a.1)
                .cmp(&(b.0, b.1))
                .then_with(|| mods[a.2].relpath.cmp(&mods[b.2].relpath))
        });
        let mut slots: Vec<Option<ModFile>> = mods.drain(..).map(Some).collect();
        let mods: Vec<ModFile> = keyed.iter().filter_map(|k| slots[k.2].take()).collect();
        let n = mods.len();

        let mut mods = mods;
        let symbols = ko::share_table(mods.iter_mut().map(|m| &mut m.info).collect());
        let mut owner = vec![NOBODY; symbols.len()];
        for (i, m) in mods.iter().enumerate() {
            for &e in m.info.export_ids() {
                owner[e as usize] = i as u32;
            }
        }
        let mut deps = resolve_all(&mods, &symbols, &owner);
        let mut users = vec![0usize; n];
        for d in &deps {
            for &o in d {
                users[o] += 1;
            }
        }

        // Topological sort: modules nobody uses first, a stack of roots.
        let mut left = users.clone();
        let mut roots: Vec<usize> = (0..n).filter(|&i| left[i] == 0).collect();
        let mut rank = vec![usize::MAX; n];
        let mut sorted = 0;
        while let Some(src) = roots.pop() {
            rank[src] = sorted;
            sorted += 1;
            for &dst in &deps[src] {
                left[dst] -= 1;
                if left[dst] == 0 {
                    roots.push(dst);
                }
            }
        }
        if sorted < n {
            return Err(CycleError(find_cycles(&mods, &deps, &rank)));
        }
        for d in &mut deps {
            d.sort_by_key(|&x| rank[x]);
        }
        let mut lines = Vec::with_capacity(n);
        let mut mark = vec![usize::MAX; n];
        for i in 0..n {
            let mut all = Vec::new();
            let mut stack: Vec<usize> = deps[i].iter().rev().copied().collect();
            while let Some(d) = stack.pop() {
                if mark[d] == i {
                    continue;
                }
                mark[d] = i;
                all.push(d);
                stack.extend(deps[d].iter().rev().copied());
            }
            all.sort_by_key(|&x| rank[x]);
            lines.push(all);
        }
        Ok(Depmod {
            mods,
            deps,
            rank,
            lines,
            symbols,
            owner,
        })
    }

    /// `modules.dep`.
    pub fn modules_dep(&self) -> Vec<u8> {
        let mut out = String::new();
        for i in 0..self.mods.len() {
            out.push_str(&self.dep_line(i));
            out.push('\n');
        }
        out.into_bytes()
    }

    /// One `modules.dep` line, without the newline.
    pub fn dep_line(&self, i: usize) -> String {
        let mut line = format!("{}:", self.mods[i].relpath);
        for &d in &self.lines[i] {
            line.push(' ');
            line.push_str(&self.mods[d].relpath);
        }
        line
    }

    /// `modules.dep.bin`.
    pub fn dep_index(&self) -> Result<Index, IndexError> {
        self.dep_entries().index()
    }

    /// The bytes of [`Self::dep_index`] (written without building it).
    pub fn dep_index_bytes(&self) -> Result<Vec<u8>, IndexError> {
        self.dep_entries().bytes()
    }

    fn dep_entries(&self) -> Entries {
        let mut e = Entries::default();
        for (i, m) in self.mods.iter().enumerate() {
            e.push(&[m.name.as_bytes()], self.dep_line(i).as_bytes(), i as u32);
        }
        e
    }

    /// `modules.alias`.
    pub fn alias_text(&self) -> Vec<u8> {
        let mut out = String::from("# Aliases extracted from modules themselves.\n");
        for m in &self.mods {
            for a in m.info.values("alias") {
                let _ = writeln!(out, "alias {a} {}", m.name);
            }
        }
        out.into_bytes()
    }

    /// `modules.alias.bin`: keys with `-` as `_` outside brackets; aliases
    /// with unbalanced brackets are left out, as depmod does.
    pub fn alias_index(&self) -> Result<Index, IndexError> {
        self.alias_entries().index()
    }

    /// The bytes of [`Self::alias_index`] (written without building it).
    pub fn alias_index_bytes(&self) -> Result<Vec<u8>, IndexError> {
        self.alias_entries().bytes()
    }

    fn alias_entries(&self) -> Entries {
        let mut e = Entries::default();
        for (i, m) in self.mods.iter().enumerate() {
            for a in m.info.values("alias") {
                if let Some(key) = normalize_alias(a) {
                    e.push(&[key.as_bytes()], m.name.as_bytes(), i as u32);
                }
            }
        }
        e
    }

    /// `modules.softdep`.
    pub fn softdep_text(&self) -> Vec<u8> {
        let mut out = String::from("# Soft dependencies extracted from modules themselves.\n");
        for m in &self.mods {
            for v in m.info.values("softdep") {
                let _ = writeln!(out, "softdep {} {v}", m.name);
            }
        }
        out.into_bytes()
    }

    /// `modules.weakdep` (kmod 33 and later), or None when no module has one.
    pub fn weakdep_text(&self) -> Option<Vec<u8>> {
        let mut out = String::from("# Weak dependencies extracted from modules themselves.\n");
        let mut any = false;
        for m in &self.mods {
            for v in m.info.values("weakdep") {
                any = true;
                let _ = writeln!(out, "weakdep {} {v}", m.name);
            }
        }
        any.then(|| out.into_bytes())
    }

    /// The module that provides an exported symbol.
    pub fn owner_of(&self, sym: &[u8]) -> Option<usize> {
        let id = self.symbols.get(sym)?;
        let o = self.owner[id as usize];
        (o != NOBODY).then_some(o as usize)
    }

    /// Every exported symbol with the module that provides it, by symbol.
    pub fn exported(&self) -> Vec<(&[u8], usize)> {
        let mut syms: Vec<(&[u8], usize)> = self
            .owner
            .iter()
            .enumerate()
            .filter(|(_, &o)| o != NOBODY)
            .map(|(id, &o)| (self.symbols.name(id as u32), o as usize))
            .collect();
        syms.sort_unstable();
        syms
    }

    /// `modules.symbols`, sorted by symbol.
    pub fn symbols_text(&self) -> Vec<u8> {
        let mut out = String::from("# Aliases for symbols, used by symbol_request().\n");
        for (s, o) in self.exported() {
            let _ = writeln!(
                out,
                "alias symbol:{} {}",
                String::from_utf8_lossy(s),
                self.mods[o].name
            );
        }
        out.into_bytes()
    }

    /// `modules.symbols.bin`.
    pub fn symbols_index(&self) -> Result<Index, IndexError> {
        self.symbol_entries().index()
    }

    /// The bytes of [`Self::symbols_index`] (written without building it).
    pub fn symbols_index_bytes(&self) -> Result<Vec<u8>, IndexError> {
        self.symbol_entries().bytes()
    }

    fn symbol_entries(&self) -> Entries {
        let mut e = Entries::default();
        for (s, o) in self.exported() {
            e.push(&[b"symbol:", s], self.mods[o].name.as_bytes(), o as u32);
        }
        e
    }

    /// `modules.devname`: modules that name a device node to create for
    /// on-demand loading.
    pub fn devname_text(&self) -> Vec<u8> {
        // The header comes with the first entry: no entries, empty file.
        let mut out = String::new();
        for m in &self.mods {
            let mut devname: Option<&str> = None;
            let mut node: Option<(char, u32, u32)> = None;
            for a in m.info.values("alias") {
                if let Some(d) = a.strip_prefix("devname:") {
                    devname = Some(d);
                } else if let Some(r) = a.strip_prefix("char-major-") {
                    if let Some((ma, mi)) = major_minor(r) {
                        node = Some(('c', ma, mi));
                    }
                } else if let Some(r) = a.strip_prefix("block-major-") {
                    if let Some((ma, mi)) = major_minor(r) {
                        node = Some(('b', ma, mi));
                    }
                }
                if let (Some(d), Some((t, ma, mi))) = (devname, node) {
                    if out.is_empty() {
                        out.push_str("# Device nodes to trigger on-demand module loading.\n");
                    }
                    let _ = writeln!(out, "{} {d} {t}{ma}:{mi}", m.name);
                    break;
                }
            }
        }
        out.into_bytes()
    }

    /// Index of a module by name.
    pub fn find(&self, name: &str) -> Option<usize> {
        self.mods.iter().position(|m| m.name == name)
    }
}

/// `%u-%u` as sscanf reads it (trailing text is ignored).
fn major_minor(s: &str) -> Option<(u32, u32)> {
    let (a, rest) = s.split_once('-')?;
    let digits = |t: &str| -> Option<u32> {
        let end = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
        t[..end].parse().ok()
    };
    Some((digits(a)?, digits(rest)?))
}

/// `modules.builtin.bin`, from `modules.builtin`.
pub fn builtin_index(builtin: &str) -> Result<Index, IndexError> {
    builtin_entries(builtin).index()
}

/// The bytes of [`builtin_index`] (written without building it).
pub fn builtin_index_bytes(builtin: &str) -> Result<Vec<u8>, IndexError> {
    builtin_entries(builtin).bytes()
}

fn builtin_entries(builtin: &str) -> Entries {
    let mut e = Entries::default();
    for line in builtin.lines() {
        if line.starts_with(|c: char| c.is_ascii_alphabetic()) {
            e.push(&[super::ko::modname(line).as_bytes()], b"", 0);
        }
    }
    e
}

/// Entries of `modules.builtin.modinfo` (`module.key=value`, NUL-separated).
pub fn builtin_modinfo(data: &[u8]) -> Vec<(String, String, String)> {
    data.split(|&b| b == 0)
        .filter(|s| !s.is_empty())
        .filter_map(|s| {
            let s = String::from_utf8_lossy(s);
            let (module, rest) = s.split_once('.')?;
            let (key, value) = rest.split_once('=')?;
            Some((module.to_string(), key.to_string(), value.to_string()))
        })
        .collect()
}

/// `modules.builtin.alias.bin`, from `modules.builtin.modinfo`.
pub fn builtin_alias_index(modinfo: &[u8]) -> Result<Index, IndexError> {
    builtin_alias_entries(modinfo).index()
}

/// The bytes of [`builtin_alias_index`] (written without building it).
pub fn builtin_alias_index_bytes(modinfo: &[u8]) -> Result<Vec<u8>, IndexError> {
    builtin_alias_entries(modinfo).bytes()
}

fn builtin_alias_entries(modinfo: &[u8]) -> Entries {
    let mut e = Entries::default();
    for (module, key, value) in builtin_modinfo(modinfo) {
        if key == "alias" {
            if let Some(alias) = normalize_alias(&value) {
                e.push(&[alias.as_bytes()], module.as_bytes(), 0);
            }
        }
    }
    e
}

/// Keys and values of an index in insertion order, in one buffer.
#[derive(Default)]
struct Entries {
    bytes: Vec<u8>,
    /// (key end, value end, priority); each starts where the last ended.
    items: Vec<(usize, usize, u32)>,
}

impl Entries {
    /// Adds a key (the concatenation of `key`) with one value.
    fn push(&mut self, key: &[&[u8]], value: &[u8], priority: u32) {
        for k in key {
            self.bytes.extend_from_slice(k);
        }
        let key_end = self.bytes.len();
        self.bytes.extend_from_slice(value);
        self.items.push((key_end, self.bytes.len(), priority));
    }

    fn list(&self) -> Vec<index::Entry<'_>> {
        let mut start = 0;
        self.items
            .iter()
            .map(|&(k, v, priority)| {
                let e = index::Entry {
                    key: &self.bytes[start..k],
                    value: &self.bytes[k..v],
                    priority,
                };
                start = v;
                e
            })
            .collect()
    }

    fn index(&self) -> Result<Index, IndexError> {
        let mut idx = Index::new();
        for e in self.list() {
            idx.insert(e.key, e.value, e.priority)?;
        }
        Ok(idx)
    }

    fn bytes(&self) -> Result<Vec<u8>, IndexError> {
        index::write(&self.list())
    }
}

/// Each module's direct dependencies: the modules that own the symbols it
/// needs, in the order of first need (a leading `.` of a symbol is not
/// part of its name here, as in depmod).
fn resolve_all(mods: &[ModFile], symbols: &SymbolTable, owner: &[u32]) -> Vec<Vec<usize>> {
    // Who provides each name, looked up once per name, not per use.
    let provider: Vec<u32> = (0..symbols.len() as u32)
        .map(|id| match symbols.name(id).strip_prefix(b".") {
            Some(bare) => symbols.get(bare).map_or(NOBODY, |b| owner[b as usize]),
            None => owner[id as usize],
        })
        .collect();
    mods.iter()
        .map(|m| {
            let mut deps: Vec<usize> = Vec::new();
            for &id in m.info.import_ids() {
                let o = provider[id as usize];
                if o != NOBODY && !deps.contains(&(o as usize)) {
                    deps.push(o as usize);
                }
            }
            deps
        })
        .collect()
}

fn find_cycles(mods: &[ModFile], deps: &[Vec<usize>], rank: &[usize]) -> Vec<Vec<String>> {
    // Modules left unranked are in (or behind) a cycle; walk from each
    // until a module repeats.
    let mut cycles: Vec<Vec<String>> = Vec::new();
    let mut reported = vec![false; mods.len()];
    for start in 0..mods.len() {
        if rank[start] != usize::MAX || reported[start] {
            continue;
        }
        let mut path = vec![start];
        let mut cur = start;
        while let Some(&next) = deps[cur].iter().find(|&&d| rank[d] == usize::MAX) {
            if let Some(p) = path.iter().position(|&x| x == next) {
                let mut c: Vec<String> = path[p..].iter().map(|&x| mods[x].name.clone()).collect();
                c.push(mods[next].name.clone());
                for &x in &path[p..] {
                    reported[x] = true;
                }
                if !cycles.contains(&c) {
                    cycles.push(c);
                }
                break;
            }
            path.push(next);
            cur = next;
        }
        reported[start] = true;
    }
    cycles
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(relpath: &str, exports: &[&str], imports: &[&str], modinfo: &[(&str, &str)]) -> ModFile {
        ModFile {
            relpath: relpath.to_string(),
            name: super::super::ko::modname(relpath),
            info: KoInfo::new(
                &modinfo
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .iter()
                    .map(String::as_str)
                    .collect::<Vec<_>>(),
                exports,
                imports,
            ),
        }
    }

    #[test]
    fn computes_lines_like_depmod() {
        let mods = vec![
            m(
                "kernel/fs/ext4/ext4.ko",
                &[],
                &["jbd2_start", "mb_get", "crc16", "printk"],
                &[("alias", "fs-ext4"), ("softdep", "pre: crc32c")],
            ),
            m("kernel/fs/jbd2/jbd2.ko", &["jbd2_start"], &["printk"], &[]),
            m("kernel/fs/mbcache.ko", &["mb_get"], &[], &[]),
            m(
                "kernel/lib/crc16.ko",
                &["crc16"],
                &[],
                &[("alias", "char-major-10-99"), ("alias", "devname:crc")],
            ),
        ];
        let order = "kernel/fs/ext4/ext4.ko\nkernel/fs/jbd2/jbd2.ko\nkernel/fs/mbcache.ko\nkernel/lib/crc16.ko\n";
        let d = Depmod::new(mods, Some(order)).unwrap();
        let dep = String::from_utf8(d.modules_dep()).unwrap();
        assert_eq!(
            dep,
            "kernel/fs/ext4/ext4.ko: kernel/lib/crc16.ko kernel/fs/mbcache.ko kernel/fs/jbd2/jbd2.ko\n\
             kernel/fs/jbd2/jbd2.ko:\nkernel/fs/mbcache.ko:\nkernel/lib/crc16.ko:\n"
        );
        assert_eq!(
            String::from_utf8(d.softdep_text()).unwrap().lines().nth(1),
            Some("softdep ext4 pre: crc32c")
        );
        assert_eq!(
            String::from_utf8(d.devname_text()).unwrap().lines().nth(1),
            Some("crc16 crc c10:99")
        );
        let idx = d.dep_index().unwrap();
        assert_eq!(idx.search(b"ext4"), Some(d.dep_line(0).as_bytes()));
        assert_eq!(
            d.alias_index().unwrap().search(b"fs_ext4"),
            Some(&b"ext4"[..])
        );
    }

    #[test]
    fn reports_cycles() {
        let mods = vec![
            m("a.ko", &["a_sym"], &["b_sym"], &[]),
            m("b.ko", &["b_sym"], &["a_sym"], &[]),
            m("c.ko", &[], &["a_sym"], &[]),
        ];
        let err = Depmod::new(mods, None).unwrap_err();
        assert_eq!(err.0, vec![vec!["a".to_string(), "b".into(), "a".into()]]);
    }

    #[test]
    fn dedupe_prefers_updates() {
        let (kept, dropped) = dedupe(vec![
            m("kernel/x.ko", &[], &[], &[]),
            m("updates/x.ko", &[], &[], &[]),
            m("extra/x.ko", &[], &[], &[]),
        ]);
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].relpath, "updates/x.ko");
        assert_eq!(dropped.len(), 2);
    }

    #[test]
    fn builtin_indexes() {
        let b = builtin_index("kernel/crypto/sha256_generic.ko\nkernel/lib/xxhash.ko\n").unwrap();
        assert_eq!(b.search(b"xxhash"), Some(&b""[..]));
        let a = builtin_alias_index(
            b"sha256_generic.alias=crypto-sha256\0sha256_generic.file=crypto/sha256_generic\0",
        )
        .unwrap();
        assert_eq!(a.search(b"crypto_sha256"), Some(&b"sha256_generic"[..]));
    }
}

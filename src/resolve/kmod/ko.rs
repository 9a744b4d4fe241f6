//! Reading a kernel module (`.ko`, `.ko.xz`, `.ko.zst`, `.ko.gz`): its
//! `.modinfo` strings, the symbols it exports and the symbols it needs,
//! by the rules libkmod applies for depmod.
//!
//! Uncompressed modules are read with a handful of positioned reads (the
//! ELF header; the section headers with the section names next to them;
//! then `.modinfo`, `.symtab`, `.strtab`, `__versions` and
//! `__ksymtab_strings`, neighbours merged into one read), never the
//! code; compressed ones are decompressed in memory. Symbol names are
//! numbered in a [`SymbolTable`] that the modules read together share.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustix::fs::{Mode, OFlags};

use crate::compress::{self, Compression};

/// Byte strings packed end to end (one buffer, not one allocation per
/// name).
#[derive(Clone, Default, PartialEq, Eq)]
struct Names {
    bytes: Vec<u8>,
    ends: Vec<u32>,
}

impl Names {
    fn push(&mut self, name: &[u8]) {
        self.bytes.extend_from_slice(name);
        self.ends.push(self.bytes.len() as u32);
    }

    fn len(&self) -> usize {
        self.ends.len()
    }

    fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    fn get(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        &self.bytes[start..self.ends[i] as usize]
    }

    fn iter(&self) -> impl ExactSizeIterator<Item = &[u8]> + Clone + '_ {
        (0..self.len()).map(|i| self.get(i))
    }

    fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
    }
}

/// Symbol names, each kept once and numbered from 0. The modules of a
/// tree share one: thousands of modules need the same few thousand
/// symbols (4,000 modules of Debian's kernel name 18,000 different ones
/// 370,000 times), and numbers compare faster than names.
#[derive(Default)]
pub struct SymbolTable {
    names: Names,
    /// Open addressing: 0 for a free slot, else the name's number + 1 in
    /// the low half and the low half of its hash in the high half.
    slots: Vec<u64>,
}

/// A quick hash of a symbol name, eight bytes per multiply.
#[inline]
fn name_hash(b: &[u8]) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let word = |at: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&b[at..at + 8]);
        u64::from_le_bytes(w)
    };
    let n = b.len();
    let mut h = n as u64;
    if n >= 8 {
        let mut i = 0;
        while i + 8 < n {
            h = (h ^ word(i)).wrapping_mul(K);
            h ^= h >> 29;
            i += 8;
        }
        // The last eight bytes, overlapping what came before.
        h = (h ^ word(n - 8)).wrapping_mul(K);
    } else {
        let mut w = [0u8; 8];
        w[..n].copy_from_slice(b);
        h = (h ^ u64::from_le_bytes(w)).wrapping_mul(K);
    }
    h ^ (h >> 32)
}

/// `n` zeros, written rather than calloc'd: pages of fresh zeroed memory
/// are first mapped to the shared zero page when read, and the first write
/// after that costs a copy and a TLB flush on every core the process runs on.
fn written_zeros(n: usize) -> Vec<u64> {
    std::iter::repeat_n(0, n).collect()
}

impl SymbolTable {
    /// A table with room for `names` names before it grows.
    pub fn with_capacity(names: usize) -> SymbolTable {
        SymbolTable {
            names: Names {
                bytes: Vec::with_capacity(names * 20),
                ends: Vec::with_capacity(names),
            },
            slots: written_zeros((names * 2).next_power_of_two().max(16)),
        }
    }

    /// The slot of `name`: where it is, or the free one where it would go.
    #[inline]
    fn find(&self, name: &[u8], h: u64) -> (usize, Option<u32>) {
        let mask = self.slots.len() - 1;
        let tag = h << 32;
        let mut i = (h >> 16) as usize & mask;
        loop {
            let s = self.slots[i];
            if s == 0 {
                return (i, None);
            }
            if s & !0xffff_ffff == tag {
                let id = (s as u32) - 1;
                if self.names.get(id as usize) == name {
                    return (i, Some(id));
                }
            }
            i = (i + 1) & mask;
        }
    }

    /// The number of `name`, given one if it has none yet.
    pub fn intern(&mut self, name: &[u8]) -> u32 {
        if (self.names.len() + 1) * 2 > self.slots.len() {
            self.grow();
        }
        let h = name_hash(name);
        match self.find(name, h) {
            (_, Some(id)) => id,
            (slot, None) => {
                let id = self.names.len() as u32;
                self.names.push(name);
                self.slots[slot] = (h << 32) | (id as u64 + 1);
                id
            }
        }
    }

    fn grow(&mut self) {
        let size = (self.slots.len() * 2).max(16);
        self.slots = written_zeros(size);
        for id in 0..self.names.len() {
            let name = self.names.get(id);
            let h = name_hash(name);
            let (slot, _) = self.find(name, h);
            self.slots[slot] = (h << 32) | (id as u64 + 1);
        }
    }

    /// The number of `name`, if it has one.
    pub fn get(&self, name: &[u8]) -> Option<u32> {
        if self.slots.is_empty() {
            return None;
        }
        self.find(name, name_hash(name)).1
    }

    /// The name numbered `id`.
    pub fn name(&self, id: u32) -> &[u8] {
        self.names.get(id as usize)
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// Every name, by number.
    pub fn names(&self) -> impl ExactSizeIterator<Item = &[u8]> + '_ {
        self.names.iter()
    }

    /// Takes in every name of `other`: `other`'s numbers -> this table's.
    pub fn absorb(&mut self, other: &SymbolTable) -> Vec<u32> {
        other.names.iter().map(|n| self.intern(n)).collect()
    }
}

impl std::fmt::Debug for SymbolTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SymbolTable({} names)", self.len())
    }
}

/// A module as read: its `.modinfo` strings and its symbols, numbered in
/// the [`SymbolTable`] the reader was given.
#[derive(Clone, Debug, Default)]
pub(crate) struct Raw {
    text: String,
    text_ends: Vec<u32>,
    /// The exports, then the imports.
    ids: Vec<u32>,
    exports: usize,
}

impl Raw {
    /// The parts: `.modinfo` text, where its strings end, the symbol numbers
    /// (exports then imports) and how many are exports.
    pub(crate) fn parts(&self) -> (&str, &[u32], &[u32], usize) {
        (&self.text, &self.text_ends, &self.ids, self.exports)
    }

    /// A module from [`Self::parts`], if they fit together and the numbers
    /// are below `symbols`.
    pub(crate) fn from_parts(
        text: String,
        text_ends: Vec<u32>,
        ids: Vec<u32>,
        exports: usize,
        symbols: usize,
    ) -> Option<Raw> {
        let mut at = 0;
        for &e in &text_ends {
            if (e as usize) < at || !text.is_char_boundary(e as usize) {
                return None;
            }
            at = e as usize;
        }
        if exports > ids.len() || ids.iter().any(|&i| i as usize >= symbols) {
            return None;
        }
        Some(Raw {
            text,
            text_ends,
            ids,
            exports,
        })
    }

    /// Renumbers the symbols (`map`: old number -> new one).
    pub(crate) fn renumber(&mut self, map: &[u32]) {
        for id in &mut self.ids {
            *id = map[*id as usize];
        }
    }
}

/// What depmod and modprobe need from one module file.
#[derive(Clone, Default)]
pub struct KoInfo {
    /// Shared: a copy costs two counts.
    raw: Arc<Raw>,
    table: Arc<SymbolTable>,
}

impl KoInfo {
    /// A module description from its parts (for tests and tools): `.modinfo`
    /// strings (`key=value`), exports and imports.
    pub fn new(modinfo: &[&str], exports: &[&str], imports: &[&str]) -> KoInfo {
        let mut table = SymbolTable::default();
        let mut raw = Raw {
            ids: exports
                .iter()
                .chain(imports)
                .map(|s| table.intern(s.as_bytes()))
                .collect(),
            exports: exports.len(),
            ..Raw::default()
        };
        for m in modinfo {
            raw.text.push_str(m);
            raw.text_ends.push(raw.text.len() as u32);
        }
        KoInfo::from_raw(raw, Arc::new(table))
    }

    pub(crate) fn from_raw(raw: Raw, table: Arc<SymbolTable>) -> KoInfo {
        KoInfo {
            raw: Arc::new(raw),
            table,
        }
    }

    pub(crate) fn raw(&self) -> &Raw {
        &self.raw
    }

    /// `.modinfo` as (key, value) in section order; a string without `=`
    /// has no value.
    pub fn modinfo(&self) -> impl Iterator<Item = (&str, Option<&str>)> + '_ {
        let (text, ends) = (self.raw.text.as_str(), &self.raw.text_ends);
        (0..ends.len())
            .map(move |i| {
                let start = if i == 0 { 0 } else { ends[i - 1] as usize };
                &text[start..ends[i] as usize]
            })
            .map(|s| match s.split_once('=') {
                Some((k, v)) => (k, Some(v)),
                None => (s, None),
            })
    }

    /// Values of one `.modinfo` key, in order.
    pub fn values<'a>(&'a self, key: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        let (text, ends) = (self.raw.text.as_str(), &self.raw.text_ends);
        (0..ends.len()).filter_map(move |i| {
            let start = if i == 0 { 0 } else { ends[i - 1] as usize };
            text[start..ends[i] as usize]
                .strip_prefix(key)?
                .strip_prefix('=')
        })
    }

    /// Exported symbols: the `__crc_` symbols of `.symtab` without the
    /// prefix, or (when there are none) the strings of `__ksymtab_strings`.
    pub fn exports(&self) -> impl ExactSizeIterator<Item = &[u8]> + Clone + '_ {
        self.export_ids().iter().map(|&id| self.table.name(id))
    }

    /// Needed symbols, as libkmod lists them for depmod: the undefined
    /// symbols of `.symtab` in table order, then the `__versions` entries
    /// not among them (e.g. `module_layout`).
    pub fn imports(&self) -> impl ExactSizeIterator<Item = &[u8]> + Clone + '_ {
        self.import_ids().iter().map(|&id| self.table.name(id))
    }

    /// The numbers of [`Self::exports`] in [`Self::symbols`].
    pub fn export_ids(&self) -> &[u32] {
        &self.raw.ids[..self.raw.exports]
    }

    /// The numbers of [`Self::imports`] in [`Self::symbols`].
    pub fn import_ids(&self) -> &[u32] {
        &self.raw.ids[self.raw.exports..]
    }

    /// The table the symbols are numbered in (shared by the modules read
    /// together).
    pub fn symbols(&self) -> &Arc<SymbolTable> {
        &self.table
    }
}

/// Numbers the symbols of all `infos` in one table: the one they share
/// already, else a new one.
pub(crate) fn share_table(mut infos: Vec<&mut KoInfo>) -> Arc<SymbolTable> {
    let first = match infos.first() {
        Some(i) => i.table.clone(),
        None => return Arc::default(),
    };
    if infos.iter().all(|i| Arc::ptr_eq(&i.table, &first)) {
        return first;
    }
    let mut table = SymbolTable::default();
    for info in &mut infos {
        let old = info.table.clone();
        for id in &mut Arc::make_mut(&mut info.raw).ids {
            *id = table.intern(old.name(*id));
        }
    }
    let table = Arc::new(table);
    for info in infos {
        info.table = table.clone();
    }
    table
}

impl PartialEq for KoInfo {
    fn eq(&self, other: &Self) -> bool {
        self.raw.text == other.raw.text
            && self.raw.text_ends == other.raw.text_ends
            && self.exports().eq(other.exports())
            && self.imports().eq(other.imports())
    }
}

impl Eq for KoInfo {}

impl std::fmt::Debug for KoInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names = |it: &mut dyn Iterator<Item = &[u8]>| -> Vec<String> {
            it.map(|n| String::from_utf8_lossy(n).into_owned())
                .collect()
        };
        f.debug_struct("KoInfo")
            .field("modinfo", &self.modinfo().collect::<Vec<_>>())
            .field("exports", &names(&mut self.exports()))
            .field("imports", &names(&mut self.imports()))
            .finish()
    }
}

/// The compression a module file name announces.
pub fn compression_of(name: &str) -> Option<Compression> {
    if name.ends_with(".ko") {
        Some(Compression::None)
    } else if name.ends_with(".ko.xz") {
        Some(Compression::Xz)
    } else if name.ends_with(".ko.zst") {
        Some(Compression::Zstd)
    } else if name.ends_with(".ko.gz") {
        Some(Compression::Gzip)
    } else {
        None
    }
}

/// True for file names kmod treats as modules.
pub fn is_module_file(name: &str) -> bool {
    compression_of(name).is_some()
}

/// The module name of a path: the file name up to its first `.`, with `-`
/// turned into `_` (libkmod's `path_to_modname`).
pub fn modname(path: &str) -> String {
    let base = path.rsplit('/').next().unwrap_or(path);
    let stem = base.split('.').next().unwrap_or(base);
    stem.replace('-', "_")
}

/// `kernel/fs/ext4/ext4.ko.xz` -> `kernel/fs/ext4/ext4.ko`.
pub fn uncompressed_name(path: &str) -> &str {
    for ext in [".xz", ".zst", ".gz"] {
        if let Some(s) = path.strip_suffix(ext) {
            if s.ends_with(".ko") {
                return s;
            }
        }
    }
    path
}

/// The bytes before the first NUL (all of them without one).
fn until_nul(b: &[u8]) -> &[u8] {
    match std::ffi::CStr::from_bytes_until_nul(b) {
        Ok(c) => c.to_bytes(),
        Err(_) => b,
    }
}

fn truncated() -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, "truncated ELF file")
}

fn invalid(msg: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.to_string())
}

/// Reads a module file (any of the supported compressions).
pub fn read(path: &Path) -> io::Result<KoInfo> {
    Reader::default().read(path)
}

/// The largest module composer decompresses (the largest in a Debian
/// kernel is under 20 MiB).
const MAX_MODULE: usize = 512 << 20;

/// The uncompressed bytes of a module file.
pub fn decompress(method: Compression, data: &[u8]) -> io::Result<Vec<u8>> {
    if method == Compression::None {
        return Ok(data.to_vec());
    }
    compress::decode(method, data, MAX_MODULE)
        .map(|d| d.data)
        .map_err(|e| invalid(&format!("cannot decompress ({method}): {e}")))
}

/// Reads a module from memory (already decompressed).
pub fn parse_bytes(data: &[u8]) -> io::Result<KoInfo> {
    Reader::default().own_table(|r, t| r.parse(Src::Mem(data), t))
}

/// Reads modules one after the other, reusing its buffers (one per thread).
#[derive(Default)]
pub struct Reader {
    head: Vec<u8>,
    table: Vec<u8>,
    names: Vec<u8>,
    data: Vec<u8>,
    /// The symbols of the module being read, by kind.
    exports: Names,
    undefined: Names,
    versions: Names,
    /// Symbol numbers being collected, and which numbers the current
    /// module's undefined symbols have (`mark[id] == serial`).
    ids: Vec<u32>,
    mark: Vec<u32>,
    serial: u32,
    /// The directory of the last module read with [`Reader::read_raw_in`].
    dir: Option<(PathBuf, OwnedFd)>,
}

/// Reads closer than this are merged into one: copying a few pages more
/// costs less than another system call.
const MERGE_GAP: u64 = 4096;

/// Where a module's bytes come from.
#[derive(Clone, Copy)]
enum Src<'a> {
    File(&'a File),
    Mem(&'a [u8]),
}

impl<'a> Src<'a> {
    /// The byte ranges `(offset, length)`, one slice each; ranges close to
    /// each other are read with one `pread`. Empty ranges read nothing.
    fn fetch<'s, const N: usize>(
        self,
        buf: &'s mut Vec<u8>,
        ranges: [(u64, u64); N],
    ) -> io::Result<[&'s [u8]; N]>
    where
        'a: 's,
    {
        for &(off, len) in &ranges {
            let end = off.checked_add(len).ok_or_else(truncated)?;
            usize::try_from(end).map_err(|_| truncated())?;
        }
        match self {
            Src::Mem(data) => {
                let mut out: [&[u8]; N] = [&[]; N];
                for (o, &(off, len)) in out.iter_mut().zip(&ranges) {
                    if len > 0 {
                        *o = data
                            .get(off as usize..(off + len) as usize)
                            .ok_or_else(truncated)?;
                    }
                }
                Ok(out)
            }
            Src::File(f) => {
                // Sort by offset, merge neighbours, lay the merged reads out
                // one after the other in `buf`.
                let mut order: [usize; N] = std::array::from_fn(|i| i);
                order.sort_by_key(|&i| ranges[i].0);
                let mut runs: [(u64, u64, usize); N] = [(0, 0, 0); N]; // (start, end, at)
                let mut nruns = 0;
                let mut slot = [0usize; N]; // range -> run
                let mut total = 0usize;
                for &i in &order {
                    let (off, len) = ranges[i];
                    if len == 0 {
                        continue;
                    }
                    let end = off + len;
                    if nruns > 0 && off <= runs[nruns - 1].1.saturating_add(MERGE_GAP) {
                        let r = &mut runs[nruns - 1];
                        if end > r.1 {
                            total += (end - r.1) as usize;
                            r.1 = end;
                        }
                    } else {
                        runs[nruns] = (off, end, total);
                        total += len as usize;
                        nruns += 1;
                    }
                    slot[i] = nruns - 1;
                }
                if buf.len() < total {
                    buf.resize(total, 0);
                }
                for &(start, end, at) in &runs[..nruns] {
                    f.read_exact_at(&mut buf[at..at + (end - start) as usize], start)
                        .map_err(|e| match e.kind() {
                            io::ErrorKind::UnexpectedEof => truncated(),
                            _ => e,
                        })?;
                }
                let buf: &'s [u8] = buf;
                let mut out: [&[u8]; N] = [&[]; N];
                for (i, o) in out.iter_mut().enumerate() {
                    let (off, len) = ranges[i];
                    if len > 0 {
                        let (start, _, at) = runs[slot[i]];
                        let from = at + (off - start) as usize;
                        *o = &buf[from..from + len as usize];
                    }
                }
                Ok(out)
            }
        }
    }
}

use crate::resolve::elf::Fields as Elf;

/// The fields of a section header that matter here.
trait Sections {
    fn section(self, b: &[u8]) -> Shdr;
}

impl Sections for Elf {
    fn section(self, b: &[u8]) -> Shdr {
        if self.is64() {
            Shdr {
                name: self.u32(b, 0),
                kind: self.u32(b, 4),
                offset: self.u64(b, 0x18),
                size: self.u64(b, 0x20),
                link: self.u32(b, 0x28),
            }
        } else {
            Shdr {
                name: self.u32(b, 0),
                kind: self.u32(b, 4),
                offset: self.u32(b, 0x10) as u64,
                size: self.u32(b, 0x14) as u64,
                link: self.u32(b, 0x18),
            }
        }
    }
}

#[derive(Clone, Copy, Default)]
struct Shdr {
    name: u32,
    kind: u32,
    offset: u64,
    size: u64,
    link: u32,
}

impl Shdr {
    fn range(&self) -> (u64, u64) {
        (self.offset, self.size)
    }
}

const SHT_NOBITS: u32 = 8;

/// The sections a module is read for, in this order.
const WANTED: [&[u8]; 5] = [
    b".modinfo",
    b".symtab",
    b".strtab",
    b"__versions",
    b"__ksymtab_strings",
];

/// The section headers are read with this much before them: the linker
/// puts the section names there.
const NAMES_BEFORE_TABLE: u64 = 2048;

impl Reader {
    /// Reads a module file (any of the supported compressions).
    pub fn read(&mut self, path: &Path) -> io::Result<KoInfo> {
        let f = File::open(path)?;
        self.own_table(|r, t| r.read_file(&f, &path.to_string_lossy(), t))
    }

    /// Reads the module `relpath` of the module directory `dir` (opened
    /// relative to its own directory, which stays open for the next module
    /// of the same directory: a short path lookup instead of a long one),
    /// numbering the symbols in `table`.
    pub(crate) fn read_raw_in(
        &mut self,
        dir: &Path,
        relpath: &str,
        table: &mut SymbolTable,
    ) -> io::Result<Raw> {
        let (sub, file) = match relpath.rsplit_once('/') {
            Some((sub, file)) => (dir.join(sub), file),
            None => (dir.to_path_buf(), relpath),
        };
        if self.dir.as_ref().is_none_or(|(d, _)| *d != sub) {
            self.dir = None;
            let fd = rustix::fs::open(
                &sub,
                OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )?;
            self.dir = Some((sub, fd));
        }
        let f = match &self.dir {
            Some((_, dirfd)) => open_at(dirfd.as_fd(), file)?,
            None => return Err(io::Error::other("no directory")),
        };
        self.read_file(&f, file, table)
    }

    fn own_table(
        &mut self,
        read: impl FnOnce(&mut Self, &mut SymbolTable) -> io::Result<Raw>,
    ) -> io::Result<KoInfo> {
        let mut table = SymbolTable::default();
        let raw = read(self, &mut table)?;
        Ok(KoInfo::from_raw(raw, Arc::new(table)))
    }

    /// Reads an open module file; `name` tells its compression.
    pub(crate) fn read_file(
        &mut self,
        f: &File,
        name: &str,
        table: &mut SymbolTable,
    ) -> io::Result<Raw> {
        match compression_of(name) {
            Some(Compression::None) | None => self.parse(Src::File(f), table),
            Some(method) => {
                let data = crate::io::read_limited(&mut &*f, MAX_MODULE as u64)
                    .map_err(|e| invalid(&format!("cannot read the module: {e}")))?;
                let plain = decompress(method, &data)?;
                self.parse(Src::Mem(&plain), table)
            }
        }
    }

    /// Numbers the symbols just read: exports, undefined symbols, then the
    /// `__versions` names that are not undefined symbols too.
    fn number(&mut self, table: &mut SymbolTable) -> (Vec<u32>, usize) {
        self.serial = self.serial.wrapping_add(1);
        if self.serial == 0 {
            self.mark.fill(0);
            self.serial = 1;
        }
        self.ids.clear();
        for n in self.exports.iter() {
            self.ids.push(table.intern(n));
        }
        let exports = self.ids.len();
        for n in self.undefined.iter() {
            let id = table.intern(n);
            self.ids.push(id);
            if self.mark.len() <= id as usize {
                self.mark.resize(table.len().max(id as usize + 1) * 2, 0);
            }
            self.mark[id as usize] = self.serial;
        }
        for n in self.versions.iter() {
            let id = table.intern(n);
            if self.mark.get(id as usize) != Some(&self.serial) {
                self.ids.push(id);
            }
        }
        (self.ids.clone(), exports)
    }

    fn parse(&mut self, src: Src, symbols: &mut SymbolTable) -> io::Result<Raw> {
        let [eh] = src.fetch(&mut self.head, [(0, 64)])?;
        if &eh[..4] != b"\x7fELF" {
            return Err(invalid("not an ELF file"));
        }
        let elf = Elf::from_ident(eh[4], eh[5])
            .ok_or_else(|| invalid("unknown ELF class or byte order"))?;
        let (shoff, shentsize, mut shnum, mut shstrndx) = if elf.is64() {
            (
                elf.u64(eh, 0x28),
                elf.u16(eh, 0x3a) as u64,
                elf.u16(eh, 0x3c) as u64,
                elf.u16(eh, 0x3e) as u64,
            )
        } else {
            (
                elf.u32(eh, 0x20) as u64,
                elf.u16(eh, 0x2e) as u64,
                elf.u16(eh, 0x30) as u64,
                elf.u16(eh, 0x32) as u64,
            )
        };
        let min_ent = if elf.is64() { 64 } else { 40 };
        if shentsize < min_ent || shoff == 0 {
            return Err(invalid("no section headers"));
        }
        if shnum == 0 || shstrndx == 0xffff {
            // Extended numbering: the real values are in section 0.
            let [first] = src.fetch(&mut self.names, [(shoff, shentsize)])?;
            let s0 = elf.section(first);
            if shnum == 0 {
                shnum = s0.size;
            }
            if shstrndx == 0xffff {
                shstrndx = s0.link as u64;
            }
        }
        let table_len = shnum.checked_mul(shentsize).ok_or_else(truncated)?;
        let before = shoff.min(NAMES_BEFORE_TABLE);
        let area_len = table_len.checked_add(before).ok_or_else(truncated)?;
        let [table_area] = src.fetch(&mut self.table, [(shoff - before, area_len)])?;
        let area_start = shoff - before;
        let table = &table_area[before as usize..];
        let shdr = |i: u64| elf.section(&table[(i * shentsize) as usize..]);
        if shstrndx >= shnum {
            return Err(invalid("bad section name table index"));
        }
        let strs = shdr(shstrndx);
        let names: &[u8] = match strs.offset.checked_sub(area_start) {
            Some(at) if strs.offset.saturating_add(strs.size) <= shoff => {
                &table_area[at as usize..(at + strs.size) as usize]
            }
            _ => {
                let [n] = src.fetch(&mut self.names, [strs.range()])?;
                n
            }
        };
        let mut found: [Option<Shdr>; 5] = [None; 5];
        for i in 0..shnum {
            let s = shdr(i);
            if s.kind == SHT_NOBITS {
                continue;
            }
            let Some(rest) = names.get(s.name as usize..) else {
                continue;
            };
            let is = |w: &[u8]| rest.starts_with(w) && rest.get(w.len()).is_none_or(|&b| b == 0);
            if let Some(w) = WANTED.iter().position(|w| is(w)) {
                found[w].get_or_insert(s);
            }
        }
        let [modinfo_h, symtab_h, strtab_h, versions_h, ksym_h] = found;

        // Every symbol but the first (null) one: `__crc_` symbols are
        // local ones.
        let symlen: u64 = if elf.is64() { 24 } else { 16 };
        let symtab_range = match symtab_h {
            // A section header's offset is the file's word: one that runs
            // past the largest offset is a damaged module, not an overflow.
            Some(s) if s.size >= symlen => (
                s.offset.checked_add(symlen).ok_or_else(truncated)?,
                s.size / symlen * symlen - symlen,
            ),
            _ => (0, 0),
        };
        let range = |h: Option<Shdr>| h.map_or((0, 0), |s| s.range());
        let [modinfo, symtab, strtab, versions, ksym] = src.fetch(
            &mut self.data,
            [
                range(modinfo_h),
                symtab_range,
                range(strtab_h),
                range(versions_h),
                range(ksym_h),
            ],
        )?;

        let mut raw = Raw::default();
        if modinfo_h.is_some() {
            // Invalid bytes are replaced (a NUL ends any broken sequence:
            // replacing before splitting changes nothing).
            let text = String::from_utf8_lossy(modinfo);
            raw.text.reserve_exact(text.len());
            for s in text.split('\0').filter(|s| !s.is_empty()) {
                raw.text.push_str(s);
                raw.text_ends.push(raw.text.len() as u32);
            }
        }

        // One pass over the symbols: `__crc_` ones are exports, undefined
        // ones imports; then the names of `__versions`.
        self.exports.clear();
        self.undefined.clear();
        self.versions.clear();
        let has_symbols = symtab_h.is_some() && strtab_h.is_some();
        if has_symbols {
            let shndx_at = if elf.is64() { 6 } else { 14 };
            for e in symtab.chunks_exact(symlen as usize) {
                let off = elf.u32(e, 0) as usize;
                let rest = strtab
                    .get(off..)
                    .ok_or_else(|| invalid("symbol name outside .strtab"))?;
                if elf.u16(e, shndx_at) == 0 {
                    let name = until_nul(rest);
                    if !name.is_empty() {
                        self.undefined.push(name);
                    }
                } else if let Some(sym) = rest.strip_prefix(b"__crc_") {
                    self.exports.push(until_nul(sym));
                }
            }
            let crclen = if elf.is64() { 8 } else { 4 };
            for c in versions.chunks_exact(64) {
                self.versions.push(until_nul(&c[crclen..]));
            }
        }
        if self.exports.is_empty() && ksym_h.is_some() {
            for s in ksym.split(|&b| b == 0).filter(|s| !s.is_empty()) {
                self.exports.push(s);
            }
        }
        (raw.ids, raw.exports) = self.number(symbols);
        Ok(raw)
    }
}

/// Opens `name` in the directory `dir` for reading.
pub(crate) fn open_at(dir: BorrowedFd<'_>, name: &str) -> io::Result<File> {
    Ok(File::from(rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )?))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A minimal ELF64 relocatable object with the sections a module has.
    pub(crate) fn tiny_module(modinfo: &[&str], exports: &[&str], imports: &[&str]) -> Vec<u8> {
        let mut strtab = vec![0u8];
        let mut syms: Vec<(u32, u16)> = Vec::new(); // (name offset, shndx)
        for e in exports {
            syms.push((strtab.len() as u32, 2));
            strtab.extend_from_slice(format!("__crc_{e}").as_bytes());
            strtab.push(0);
        }
        for i in imports {
            syms.push((strtab.len() as u32, 0));
            strtab.extend_from_slice(i.as_bytes());
            strtab.push(0);
        }
        let mut symtab = vec![0u8; 24];
        for (n, shndx) in syms {
            let mut e = [0u8; 24];
            e[0..4].copy_from_slice(&n.to_le_bytes());
            e[4] = 0x10; // STB_GLOBAL
            e[6..8].copy_from_slice(&shndx.to_le_bytes());
            symtab.extend_from_slice(&e);
        }
        let mut mi = Vec::new();
        for s in modinfo {
            mi.extend_from_slice(s.as_bytes());
            mi.push(0);
        }
        let names = b"\0.modinfo\0.symtab\0.strtab\0.shstrtab\0";
        let bodies: Vec<(u32, u32, &[u8])> = vec![
            (1, 1, &mi),      // .modinfo PROGBITS
            (10, 2, &symtab), // .symtab SYMTAB
            (18, 3, &strtab), // .strtab STRTAB
            (26, 3, names),   // .shstrtab
        ];
        let mut out = vec![0u8; 64];
        let mut offsets = Vec::new();
        for (_, _, b) in &bodies {
            offsets.push(out.len() as u64);
            out.extend_from_slice(b);
        }
        while !out.len().is_multiple_of(8) {
            out.push(0);
        }
        let shoff = out.len() as u64;
        out.extend_from_slice(&[0u8; 64]); // null section
        for ((n, t, b), off) in bodies.iter().zip(&offsets) {
            let mut sh = [0u8; 64];
            sh[0..4].copy_from_slice(&n.to_le_bytes());
            sh[4..8].copy_from_slice(&t.to_le_bytes());
            sh[0x18..0x20].copy_from_slice(&off.to_le_bytes());
            sh[0x20..0x28].copy_from_slice(&(b.len() as u64).to_le_bytes());
            out.extend_from_slice(&sh);
        }
        out[0..4].copy_from_slice(b"\x7fELF");
        out[4] = 2;
        out[5] = 1;
        out[6] = 1;
        out[0x10] = 1; // ET_REL
        out[0x28..0x30].copy_from_slice(&shoff.to_le_bytes());
        out[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes());
        out[0x3c..0x3e].copy_from_slice(&5u16.to_le_bytes());
        out[0x3e..0x40].copy_from_slice(&4u16.to_le_bytes());
        out
    }

    #[test]
    fn reads_modinfo_exports_imports() {
        let ko = tiny_module(
            &[
                "alias=fs-foo",
                "softdep=pre: crc32c",
                "firmware=foo/bar.bin",
                "intree",
            ],
            &["foo_register"],
            &["printk", "bar_helper"],
        );
        let info = parse_bytes(&ko).unwrap();
        assert_eq!(info.values("alias").collect::<Vec<_>>(), ["fs-foo"]);
        assert_eq!(info.values("firmware").collect::<Vec<_>>(), ["foo/bar.bin"]);
        assert_eq!(info.modinfo().last(), Some(("intree", None)));
        assert_eq!(info.exports().collect::<Vec<_>>(), [b"foo_register"]);
        assert_eq!(
            info.imports().collect::<Vec<_>>(),
            [&b"printk"[..], &b"bar_helper"[..]]
        );
        assert_eq!(
            info,
            KoInfo::new(
                &[
                    "alias=fs-foo",
                    "softdep=pre: crc32c",
                    "firmware=foo/bar.bin",
                    "intree"
                ],
                &["foo_register"],
                &["printk", "bar_helper"]
            )
        );

        // From a file: the same, through positioned reads.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("foo.ko");
        std::fs::write(&path, &ko).unwrap();
        assert_eq!(read(&path).unwrap(), info);
    }

    #[test]
    fn rejects_garbage() {
        assert!(parse_bytes(b"not an elf at all, not even close").is_err());
        let mut ko = tiny_module(&["a=b"], &[], &[]);
        ko.truncate(100);
        assert!(parse_bytes(&ko).is_err());
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cut.ko");
        std::fs::write(&path, &ko).unwrap();
        let err = read(&path).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{err}");
    }

    #[test]
    fn merges_close_reads() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("data");
        let data: Vec<u8> = (0..20000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let f = File::open(&path).unwrap();
        let mut buf = Vec::new();
        let ranges = [(100, 10), (0, 0), (15000, 7), (50, 60), (19990, 10)];
        let got = Src::File(&f).fetch(&mut buf, ranges).unwrap();
        for (g, (off, len)) in got.iter().zip(ranges) {
            assert_eq!(*g, &data[off as usize..(off + len) as usize]);
        }
        assert!(Src::File(&f).fetch(&mut buf, [(19995, 10)]).is_err());
    }

    #[test]
    fn names() {
        assert_eq!(
            modname("kernel/arch/x86/crypto/crc32c-intel.ko.zst"),
            "crc32c_intel"
        );
        assert_eq!(uncompressed_name("a/b.ko.xz"), "a/b.ko");
        assert_eq!(uncompressed_name("a/b.ko"), "a/b.ko");
        assert!(is_module_file("x.ko.gz"));
        assert!(!is_module_file("x.ko.bz2"));
    }
}

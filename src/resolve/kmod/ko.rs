//! Reading a kernel module (`.ko`, `.ko.xz`, `.ko.zst`, `.ko.gz`): its
//! `.modinfo` strings, the symbols it exports and the symbols it needs,
//! by the rules libkmod applies for depmod.
//!
//! Uncompressed modules are read with positioned reads of the few sections
//! that matter (headers, `.symtab`, `.strtab`, `.modinfo`, `__versions`),
//! never the code; compressed ones are decompressed in memory.

use std::borrow::Cow;
use std::collections::HashSet;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::compress::{self, Compression};

/// What depmod and modprobe need from one module file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KoInfo {
    /// `.modinfo` as (key, value) in section order; a string without `=`
    /// has no value.
    pub modinfo: Vec<(String, Option<String>)>,
    /// Exported symbols: the `__crc_` symbols of `.symtab` without the
    /// prefix, or (when there are none) the strings of `__ksymtab_strings`.
    pub exports: Vec<String>,
    /// Needed symbols: the undefined symbols of `.symtab` in table order,
    /// then the `__versions` entries not among them (e.g. `module_layout`).
    pub imports: Vec<String>,
}

impl KoInfo {
    /// Values of one `.modinfo` key, in order.
    pub fn values<'a>(&'a self, key: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.modinfo
            .iter()
            .filter(move |(k, _)| k == key)
            .filter_map(|(_, v)| v.as_deref())
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

trait ReadAt {
    fn read_at(&self, off: u64, len: usize) -> io::Result<Cow<'_, [u8]>>;
}

impl ReadAt for File {
    fn read_at(&self, off: u64, len: usize) -> io::Result<Cow<'_, [u8]>> {
        let mut buf = vec![0u8; len];
        self.read_exact_at(&mut buf, off)?;
        Ok(Cow::Owned(buf))
    }
}

impl ReadAt for [u8] {
    fn read_at(&self, off: u64, len: usize) -> io::Result<Cow<'_, [u8]>> {
        let start = usize::try_from(off).map_err(|_| truncated())?;
        self.get(start..start.checked_add(len).ok_or_else(truncated)?)
            .map(Cow::Borrowed)
            .ok_or_else(truncated)
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
    let name = path.to_string_lossy();
    match compression_of(&name) {
        Some(Compression::None) | None => {
            let f = File::open(path)?;
            let len = f.metadata()?.len();
            parse(&f, len)
        }
        Some(method) => {
            let data = std::fs::read(path)?;
            let plain = decompress(method, &data)?;
            parse(plain.as_slice(), plain.len() as u64)
        }
    }
}

/// The uncompressed bytes of a module file.
pub fn decompress(method: Compression, data: &[u8]) -> io::Result<Vec<u8>> {
    if method == Compression::None {
        return Ok(data.to_vec());
    }
    compress::decode(method, data)
        .map(|d| d.data)
        .map_err(|e| invalid(&format!("cannot decompress ({method}): {e}")))
}

/// Reads a module from memory (already decompressed).
pub fn parse_bytes(data: &[u8]) -> io::Result<KoInfo> {
    parse(data, data.len() as u64)
}

struct Elf {
    is64: bool,
    le: bool,
}

impl Elf {
    fn u16(&self, b: &[u8], o: usize) -> u16 {
        let a = [b[o], b[o + 1]];
        if self.le {
            u16::from_le_bytes(a)
        } else {
            u16::from_be_bytes(a)
        }
    }
    fn u32(&self, b: &[u8], o: usize) -> u32 {
        let a = [b[o], b[o + 1], b[o + 2], b[o + 3]];
        if self.le {
            u32::from_le_bytes(a)
        } else {
            u32::from_be_bytes(a)
        }
    }
    fn u64(&self, b: &[u8], o: usize) -> u64 {
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[o..o + 8]);
        if self.le {
            u64::from_le_bytes(a)
        } else {
            u64::from_be_bytes(a)
        }
    }
}

struct Section {
    name: Vec<u8>,
    kind: u32,
    offset: u64,
    size: u64,
}

const SHT_NOBITS: u32 = 8;

fn parse<R: ReadAt + ?Sized>(r: &R, file_len: u64) -> io::Result<KoInfo> {
    let ident = r.read_at(0, 16)?;
    if &ident[..4] != b"\x7fELF" {
        return Err(invalid("not an ELF file"));
    }
    let elf = Elf {
        is64: match ident[4] {
            1 => false,
            2 => true,
            _ => return Err(invalid("unknown ELF class")),
        },
        le: match ident[5] {
            1 => true,
            2 => false,
            _ => return Err(invalid("unknown ELF byte order")),
        },
    };
    let ehsize = if elf.is64 { 64 } else { 52 };
    let eh = r.read_at(0, ehsize)?;
    let (shoff, shentsize, mut shnum, mut shstrndx) = if elf.is64 {
        (
            elf.u64(&eh, 0x28),
            elf.u16(&eh, 0x3a) as u64,
            elf.u16(&eh, 0x3c) as u64,
            elf.u16(&eh, 0x3e) as u64,
        )
    } else {
        (
            elf.u32(&eh, 0x20) as u64,
            elf.u16(&eh, 0x2e) as u64,
            elf.u16(&eh, 0x30) as u64,
            elf.u16(&eh, 0x32) as u64,
        )
    };
    let min_ent = if elf.is64 { 64 } else { 40 };
    if shentsize < min_ent || shoff == 0 {
        return Err(invalid("no section headers"));
    }
    let sh_field = |b: &[u8]| -> (u32, u32, u64, u64, u32) {
        // (name, type, offset, size, link)
        if elf.is64 {
            (
                elf.u32(b, 0),
                elf.u32(b, 4),
                elf.u64(b, 0x18),
                elf.u64(b, 0x20),
                elf.u32(b, 0x28),
            )
        } else {
            (
                elf.u32(b, 0),
                elf.u32(b, 4),
                elf.u32(b, 0x10) as u64,
                elf.u32(b, 0x14) as u64,
                elf.u32(b, 0x18),
            )
        }
    };
    if shnum == 0 || shstrndx == 0xffff {
        let first = r.read_at(shoff, shentsize as usize)?;
        let (_, _, _, size, link) = sh_field(&first);
        if shnum == 0 {
            shnum = size;
        }
        if shstrndx == 0xffff {
            shstrndx = link as u64;
        }
    }
    let table_len = shnum.checked_mul(shentsize).ok_or_else(truncated)?;
    if shoff
        .checked_add(table_len)
        .is_none_or(|end| end > file_len)
    {
        return Err(truncated());
    }
    let table = r.read_at(shoff, table_len as usize)?;
    let raw: Vec<(u32, u32, u64, u64)> = (0..shnum as usize)
        .map(|i| {
            let (n, t, o, s, _) = sh_field(&table[i * shentsize as usize..]);
            (n, t, o, s)
        })
        .collect();
    let read_section = |offset: u64, size: u64| -> io::Result<Cow<'_, [u8]>> {
        if offset.checked_add(size).is_none_or(|end| end > file_len) {
            return Err(truncated());
        }
        r.read_at(offset, size as usize)
    };
    let (_, _, stro, strs) = *raw
        .get(shstrndx as usize)
        .ok_or_else(|| invalid("bad section name table index"))?;
    let shstr = read_section(stro, strs)?;
    let sections: Vec<Section> = raw
        .iter()
        .map(|&(n, kind, offset, size)| {
            let name = shstr
                .get(n as usize..)
                .map(|s| s.split(|&b| b == 0).next().unwrap_or(b"").to_vec())
                .unwrap_or_default();
            Section {
                name,
                kind,
                offset,
                size,
            }
        })
        .collect();
    let find = |name: &str| {
        sections
            .iter()
            .find(|s| s.name == name.as_bytes() && s.kind != SHT_NOBITS)
    };
    let load = |name: &str| -> io::Result<Option<Cow<'_, [u8]>>> {
        match find(name) {
            Some(s) => read_section(s.offset, s.size).map(Some),
            None => Ok(None),
        }
    };

    let mut info = KoInfo::default();
    if let Some(modinfo) = load(".modinfo")? {
        for s in modinfo.split(|&b| b == 0).filter(|s| !s.is_empty()) {
            let text = String::from_utf8_lossy(s);
            match text.split_once('=') {
                Some((k, v)) => info.modinfo.push((k.to_string(), Some(v.to_string()))),
                None => info.modinfo.push((text.into_owned(), None)),
            }
        }
    }

    let symtab = load(".symtab")?;
    let strtab = load(".strtab")?;
    let symlen = if elf.is64 { 24 } else { 16 };
    let text = |b: &[u8]| -> String {
        match std::str::from_utf8(b) {
            Ok(t) => t.to_string(),
            Err(_) => String::from_utf8_lossy(b).into_owned(),
        }
    };

    // One pass over the symbol table: `__crc_` symbols are exports,
    // undefined ones imports.
    let mut imports: Vec<&[u8]> = Vec::new();
    if let (Some(symtab), Some(strtab)) = (&symtab, &strtab) {
        for e in symtab.chunks_exact(symlen).skip(1) {
            let off = elf.u32(e, 0) as usize;
            let rest = strtab
                .get(off..)
                .ok_or_else(|| invalid("symbol name outside .strtab"))?;
            let name = &rest[..rest.iter().position(|&b| b == 0).unwrap_or(rest.len())];
            let shndx = if elf.is64 {
                elf.u16(e, 6)
            } else {
                elf.u16(e, 14)
            };
            if shndx == 0 {
                if !name.is_empty() {
                    imports.push(name);
                }
            } else if let Some(sym) = name.strip_prefix(b"__crc_") {
                info.exports.push(text(sym));
            }
        }
    }
    if info.exports.is_empty() {
        if let Some(strings) = load("__ksymtab_strings")? {
            for s in strings.split(|&b| b == 0).filter(|s| !s.is_empty()) {
                info.exports.push(text(s));
            }
        }
    }
    if symtab.is_none() || strtab.is_none() {
        return Ok(info);
    }

    // Imports, then the `__versions` entries that are not among them.
    let versions = load("__versions")?;
    let crclen = if elf.is64 { 8 } else { 4 };
    let seen: HashSet<&[u8]> = if versions.is_some() {
        imports.iter().copied().collect()
    } else {
        HashSet::new()
    };
    info.imports = imports.iter().map(|n| text(n)).collect();
    if let Some(v) = versions.as_deref() {
        for c in v.chunks_exact(64) {
            let n = &c[crclen..];
            let n = &n[..n.iter().position(|&b| b == 0).unwrap_or(n.len())];
            if !seen.contains(n) {
                info.imports.push(text(n));
            }
        }
    }
    Ok(info)
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
        assert_eq!(info.modinfo.last(), Some(&("intree".to_string(), None)));
        assert_eq!(info.exports, ["foo_register"]);
        assert_eq!(info.imports, ["printk", "bar_helper"]);
    }

    #[test]
    fn rejects_garbage() {
        assert!(parse_bytes(b"not an elf at all, not even close").is_err());
        let mut ko = tiny_module(&["a=b"], &[], &[]);
        ko.truncate(100);
        assert!(parse_bytes(&ko).is_err());
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

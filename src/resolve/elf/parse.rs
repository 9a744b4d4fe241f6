//! ELF parsing: exactly what a dynamic loader reads, and nothing else.
//!
//! Input: something that reads bytes at offsets (a file, a slice). Output: an
//! [`Elf`] with the object's ABI (class, byte order, machine), its program
//! interpreter, its dynamic section's names (DT_NEEDED, DT_SONAME, DT_RPATH,
//! DT_RUNPATH, filters, DT_FLAGS_1) and the payloads of its `.note.dlopen`
//! notes.
//!
//! Everything is found through the program headers, as the loader finds it:
//! section headers may be stripped. The dynamic string table is located by
//! mapping DT_STRTAB's virtual address to a file offset through the PT_LOAD
//! segments. Both classes (32, 64 bit) and both byte orders are handled; a
//! malformed file gives an error, never a panic.

use std::fmt;
use std::fs::File;
use std::io;

pub const EM_SPARC: u16 = 2;
pub const EM_386: u16 = 3;
pub const EM_68K: u16 = 4;
pub const EM_MIPS: u16 = 8;
pub const EM_PARISC: u16 = 15;
pub const EM_PPC: u16 = 20;
pub const EM_PPC64: u16 = 21;
pub const EM_S390: u16 = 22;
pub const EM_ARM: u16 = 40;
pub const EM_SH: u16 = 42;
pub const EM_SPARCV9: u16 = 43;
pub const EM_IA_64: u16 = 50;
pub const EM_X86_64: u16 = 62;
pub const EM_AARCH64: u16 = 183;
pub const EM_RISCV: u16 = 243;
pub const EM_LOONGARCH: u16 = 258;
pub const EM_ALPHA: u16 = 0x9026;

pub const ET_EXEC: u16 = 2;
pub const ET_DYN: u16 = 3;

const PT_LOAD: u32 = 1;
const PT_DYNAMIC: u32 = 2;
const PT_INTERP: u32 = 3;
const PT_NOTE: u32 = 4;

const DT_NULL: u64 = 0;
const DT_NEEDED: u64 = 1;
const DT_STRTAB: u64 = 5;
const DT_STRSZ: u64 = 10;
const DT_SONAME: u64 = 14;
const DT_RPATH: u64 = 15;
const DT_RUNPATH: u64 = 29;
const DT_FLAGS_1: u64 = 0x6fff_fffb;
const DT_AUXILIARY: u64 = 0x7fff_fffd;
const DT_FILTER: u64 = 0x7fff_ffff;

/// DT_FLAGS_1 bit: do not search the default library directories.
pub const DF_1_NODEFLIB: u64 = 0x800;

/// The owner and type of a `.note.dlopen` note (freedesktop dlopen metadata).
pub const DLOPEN_NOTE_OWNER: &[u8] = b"FDO";
pub const DLOPEN_NOTE_TYPE: u32 = 0x407c_0c0a;

/// ARM e_flags: the float ABI bits a hard-float loader checks.
const EF_ARM_ABI_FLOAT_SOFT: u32 = 0x200;
const EF_ARM_ABI_FLOAT_HARD: u32 = 0x400;
/// MIPS e_flags: the n32 ABI (an ELFCLASS32 object that is not o32).
const EF_MIPS_ABI2: u32 = 0x20;

/// Upper bounds that keep a hostile file from making us allocate gigabytes.
const MAX_PHNUM: usize = 4096;
const MAX_DYNAMIC: u64 = 1 << 20;
const MAX_NOTE: u64 = 4 << 20;
const MAX_STRING: usize = 64 << 10;
const MAX_INTERP: u64 = 4096;

pub use super::fields::{Class, Endian};

/// What decides whether two objects can live in one process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Abi {
    pub class: Class,
    pub endian: Endian,
    pub machine: u16,
    /// The ABI-relevant e_flags bits for machines that have variants on one
    /// e_machine (ARM float ABI, MIPS n32); 0 elsewhere.
    pub flags: u32,
}

impl Abi {
    /// Whether a loader for `self` loads an object of ABI `other` (glibc's
    /// class check plus `elf_machine_matches_host`).
    pub fn accepts(&self, other: &Abi) -> bool {
        if self.class != other.class || self.endian != other.endian || self.machine != other.machine
        {
            return false;
        }
        match self.machine {
            // An object that says nothing about its float ABI loads anywhere.
            EM_ARM => self.flags == 0 || other.flags == 0 || self.flags == other.flags,
            _ => self.flags == other.flags,
        }
    }

    fn from_header(class: Class, endian: Endian, machine: u16, e_flags: u32) -> Abi {
        let flags = match machine {
            EM_ARM => e_flags & (EF_ARM_ABI_FLOAT_SOFT | EF_ARM_ABI_FLOAT_HARD),
            EM_MIPS if class == Class::Elf32 => e_flags & EF_MIPS_ABI2,
            _ => 0,
        };
        Abi {
            class,
            endian,
            machine,
            flags,
        }
    }

    /// True for an ARM object marked hard-float.
    pub fn arm_hard_float(&self) -> bool {
        self.machine == EM_ARM && self.flags & EF_ARM_ABI_FLOAT_HARD != 0
    }

    /// True for a MIPS n32 object.
    pub fn mips_n32(&self) -> bool {
        self.machine == EM_MIPS && self.flags & EF_MIPS_ABI2 != 0
    }
}

impl fmt::Display for Abi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bits = match self.class {
            Class::Elf32 => 32,
            Class::Elf64 => 64,
        };
        let order = match self.endian {
            Endian::Little => "LSB",
            Endian::Big => "MSB",
        };
        write!(f, "ELF{bits} {order} {}", machine_name(self.machine))
    }
}

/// A short name for an e_machine value, for messages.
pub fn machine_name(machine: u16) -> String {
    let name = match machine {
        EM_SPARC => "SPARC",
        EM_386 => "i386",
        EM_68K => "m68k",
        EM_MIPS => "MIPS",
        EM_PARISC => "PA-RISC",
        EM_PPC => "PowerPC",
        EM_PPC64 => "PowerPC64",
        EM_S390 => "S/390",
        EM_ARM => "ARM",
        EM_SH => "SuperH",
        EM_SPARCV9 => "SPARC V9",
        EM_IA_64 => "IA-64",
        EM_X86_64 => "x86-64",
        EM_AARCH64 => "AArch64",
        EM_RISCV => "RISC-V",
        EM_LOONGARCH => "LoongArch",
        EM_ALPHA => "Alpha",
        _ => return format!("machine {machine}"),
    };
    name.to_string()
}

/// The dynamic section's names, as raw bytes (no encoding assumed).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Dynamic {
    pub needed: Vec<Vec<u8>>,
    pub soname: Option<Vec<u8>>,
    /// DT_RPATH; `None` when the object also has DT_RUNPATH (the loader
    /// ignores DT_RPATH then).
    pub rpath: Option<Vec<u8>>,
    pub runpath: Option<Vec<u8>>,
    /// DT_FILTER and DT_AUXILIARY names (glibc loads them like DT_NEEDED).
    pub filters: Vec<Vec<u8>>,
    pub auxiliary: Vec<Vec<u8>>,
    pub flags_1: u64,
}

/// Everything composer reads from one ELF object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Elf {
    pub abi: Abi,
    /// e_type: [`ET_EXEC`], [`ET_DYN`], ...
    pub kind: u16,
    /// PT_INTERP, up to its NUL.
    pub interp: Option<Vec<u8>>,
    /// PT_DYNAMIC, when present.
    pub dynamic: Option<Dynamic>,
    /// The descriptors of every `FDO`/0x407c0c0a note in a PT_NOTE segment,
    /// trailing NULs removed (each is a JSON text).
    pub dlopen_notes: Vec<Vec<u8>>,
}

impl Elf {
    /// Needs no dynamic loading: no interpreter and no libraries.
    pub fn is_static(&self) -> bool {
        self.interp.is_none()
            && self.dynamic.as_ref().is_none_or(|d| {
                d.needed.is_empty() && d.filters.is_empty() && d.auxiliary.is_empty()
            })
    }

    pub fn soname(&self) -> Option<&[u8]> {
        self.dynamic.as_ref()?.soname.as_deref()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    #[error("not an ELF file")]
    NotElf,
    #[error("malformed ELF file: {0}")]
    Malformed(String),
    #[error("{0}")]
    Io(#[from] io::Error),
}

fn bad(msg: impl Into<String>) -> ParseError {
    ParseError::Malformed(msg.into())
}

/// Random-access reads.
pub trait ReadAt {
    /// Fills `buf` from `offset`, or fails (a short file is an error).
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    /// Reads up to `buf.len()` bytes from `offset`; returns how many.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
}

impl ReadAt for [u8] {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let n = self.read_at(buf, offset)?;
        if n < buf.len() {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        Ok(())
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let start = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(self.len());
        let n = buf.len().min(self.len() - start);
        buf[..n].copy_from_slice(&self[start..start + n]);
        Ok(n)
    }
}

/// A file with its first bytes kept in memory: most of what we read (the
/// headers, the interpreter, the notes) lies there, so one read serves it.
pub struct HeadFile {
    file: File,
    head: Vec<u8>,
    /// The head holds the whole file.
    complete: bool,
}

impl HeadFile {
    pub const HEAD: usize = 4096;

    pub fn new(file: File) -> io::Result<Self> {
        let mut head = vec![0u8; Self::HEAD];
        let n = crate::io::read_full_at(&file, &mut head, 0)?;
        head.truncate(n);
        let complete = n < Self::HEAD;
        Ok(HeadFile {
            file,
            head,
            complete,
        })
    }

    /// The first bytes of the file (up to [`Self::HEAD`]).
    pub fn head(&self) -> &[u8] {
        &self.head
    }
}

impl ReadAt for HeadFile {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let n = self.read_at(buf, offset)?;
        if n < buf.len() {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        Ok(())
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let end = offset.saturating_add(buf.len() as u64);
        if end <= self.head.len() as u64 || self.complete {
            return self.head.as_slice().read_at(buf, offset);
        }
        crate::io::read_full_at(&self.file, buf, offset)
    }
}

use super::fields::Fields as Fmt;

#[derive(Clone, Copy, Debug)]
struct Phdr {
    kind: u32,
    offset: u64,
    vaddr: u64,
    filesz: u64,
    align: u64,
}

/// Reads only the ELF header's identification and ABI (for quick checks).
#[cfg(test)]
pub fn parse_abi(bytes: &[u8]) -> Result<(Abi, u16), ParseError> {
    let (fmt, ehdr) = header(bytes)?;
    Ok((abi_of(fmt, &ehdr), fmt.u16(&ehdr, 16)))
}

fn header(bytes: &[u8]) -> Result<(Fmt, Vec<u8>), ParseError> {
    if bytes.len() < 16 || &bytes[..4] != b"\x7fELF" {
        return Err(ParseError::NotElf);
    }
    let class = match bytes[4] {
        1 => Class::Elf32,
        2 => Class::Elf64,
        c => return Err(bad(format!("unknown ELF class {c}"))),
    };
    let endian = match bytes[5] {
        1 => Endian::Little,
        2 => Endian::Big,
        d => return Err(bad(format!("unknown ELF data encoding {d}"))),
    };
    let size = match class {
        Class::Elf32 => 52,
        Class::Elf64 => 64,
    };
    let ehdr = bytes
        .get(..size)
        .ok_or_else(|| bad("truncated ELF header"))?
        .to_vec();
    Ok((Fmt { class, endian }, ehdr))
}

fn abi_of(fmt: Fmt, ehdr: &[u8]) -> Abi {
    let machine = fmt.u16(ehdr, 18);
    let flags_at = match fmt.class {
        Class::Elf32 => 36,
        Class::Elf64 => 48,
    };
    Abi::from_header(fmt.class, fmt.endian, machine, fmt.u32(ehdr, flags_at))
}

/// Parses the object `r`.
pub fn parse<R: ReadAt + ?Sized>(r: &R) -> Result<Elf, ParseError> {
    let mut ident = [0u8; 64];
    let n = r.read_at(&mut ident, 0)?;
    let (fmt, ehdr) = header(&ident[..n])?;
    let abi = abi_of(fmt, &ehdr);
    let kind = fmt.u16(&ehdr, 16);
    let (phoff, shoff, phentsize, mut phnum, shentsize) = match fmt.class {
        Class::Elf32 => (
            fmt.u32(&ehdr, 28) as u64,
            fmt.u32(&ehdr, 32) as u64,
            fmt.u16(&ehdr, 42) as usize,
            fmt.u16(&ehdr, 44) as usize,
            fmt.u16(&ehdr, 46) as usize,
        ),
        Class::Elf64 => (
            fmt.u64(&ehdr, 32),
            fmt.u64(&ehdr, 40),
            fmt.u16(&ehdr, 54) as usize,
            fmt.u16(&ehdr, 56) as usize,
            fmt.u16(&ehdr, 58) as usize,
        ),
    };
    // PN_XNUM: the real count is in section header 0's sh_info.
    if phnum == 0xffff {
        let info_at = match fmt.class {
            Class::Elf32 => 28,
            Class::Elf64 => 44,
        };
        if shoff == 0 || shentsize < info_at + 4 {
            return Err(bad("PN_XNUM program headers without a section header 0"));
        }
        let mut sh0 = vec![0u8; shentsize];
        r.read_exact_at(&mut sh0, shoff)
            .map_err(|_| bad("truncated section header 0"))?;
        phnum = fmt.u32(&sh0, info_at) as usize;
    }
    let min_phent = match fmt.class {
        Class::Elf32 => 32,
        Class::Elf64 => 56,
    };
    let mut elf = Elf {
        abi,
        kind,
        interp: None,
        dynamic: None,
        dlopen_notes: Vec::new(),
    };
    if phnum == 0 {
        return Ok(elf);
    }
    if phentsize < min_phent {
        return Err(bad(format!("program header size {phentsize} is too small")));
    }
    if phnum > MAX_PHNUM {
        return Err(bad(format!("{phnum} program headers")));
    }
    let mut table = vec![0u8; phentsize * phnum];
    r.read_exact_at(&mut table, phoff)
        .map_err(|_| bad("truncated program header table"))?;
    let phdrs: Vec<Phdr> = table
        .chunks_exact(phentsize)
        .map(|p| match fmt.class {
            Class::Elf32 => Phdr {
                kind: fmt.u32(p, 0),
                offset: fmt.u32(p, 4) as u64,
                vaddr: fmt.u32(p, 8) as u64,
                filesz: fmt.u32(p, 16) as u64,
                align: fmt.u32(p, 28) as u64,
            },
            Class::Elf64 => Phdr {
                kind: fmt.u32(p, 0),
                offset: fmt.u64(p, 8),
                vaddr: fmt.u64(p, 16),
                filesz: fmt.u64(p, 32),
                align: fmt.u64(p, 48),
            },
        })
        .collect();

    for ph in &phdrs {
        match ph.kind {
            PT_INTERP if elf.interp.is_none() => {
                if ph.filesz > MAX_INTERP {
                    return Err(bad("PT_INTERP is too long"));
                }
                let mut buf = vec![0u8; ph.filesz as usize];
                r.read_exact_at(&mut buf, ph.offset)
                    .map_err(|_| bad("truncated PT_INTERP"))?;
                let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
                buf.truncate(end);
                elf.interp = Some(buf);
            }
            PT_DYNAMIC if elf.dynamic.is_none() => {
                elf.dynamic = Some(dynamic(r, fmt, ph, &phdrs)?);
            }
            PT_NOTE => notes(r, fmt, ph, &mut elf.dlopen_notes)?,
            _ => {}
        }
    }
    Ok(elf)
}

fn dynamic<R: ReadAt + ?Sized>(
    r: &R,
    fmt: Fmt,
    ph: &Phdr,
    phdrs: &[Phdr],
) -> Result<Dynamic, ParseError> {
    if ph.filesz > MAX_DYNAMIC {
        return Err(bad("PT_DYNAMIC is too large"));
    }
    let mut buf = vec![0u8; ph.filesz as usize];
    r.read_exact_at(&mut buf, ph.offset)
        .map_err(|_| bad("truncated PT_DYNAMIC"))?;
    let w = fmt.word_size();
    let (mut needed, mut filters, mut auxiliary) = (Vec::new(), Vec::new(), Vec::new());
    let (mut soname, mut rpath, mut runpath) = (None, None, None);
    let (mut strtab, mut strsz, mut flags_1) = (None, None, 0u64);
    for e in buf.chunks_exact(2 * w) {
        let tag = fmt.word(e, 0);
        let val = fmt.word(e, w);
        // Tags are signed; in ELF32 they are 32-bit.
        let tag = match fmt.class {
            Class::Elf32 => tag as u32 as u64,
            Class::Elf64 => tag,
        };
        match tag {
            DT_NULL => break,
            DT_NEEDED => needed.push(val),
            DT_STRTAB => strtab = Some(val),
            DT_STRSZ => strsz = Some(val),
            DT_SONAME => soname = Some(val),
            DT_RPATH => rpath = Some(val),
            DT_RUNPATH => runpath = Some(val),
            DT_FLAGS_1 => flags_1 = val,
            DT_FILTER => filters.push(val),
            DT_AUXILIARY => auxiliary.push(val),
            _ => {}
        }
    }
    let uses_strings = !needed.is_empty()
        || soname.is_some()
        || rpath.is_some()
        || runpath.is_some()
        || !filters.is_empty()
        || !auxiliary.is_empty();
    let mut d = Dynamic {
        flags_1,
        ..Dynamic::default()
    };
    if !uses_strings {
        return Ok(d);
    }
    let strtab = strtab.ok_or_else(|| bad("dynamic section names strings but has no DT_STRTAB"))?;
    // Map the string table's address to a file offset through PT_LOAD.
    let seg = phdrs
        .iter()
        .find(|p| p.kind == PT_LOAD && strtab >= p.vaddr && strtab - p.vaddr < p.filesz)
        .ok_or_else(|| bad(format!("DT_STRTAB {strtab:#x} lies in no PT_LOAD segment")))?;
    let table_off = seg
        .offset
        .checked_add(strtab - seg.vaddr)
        .ok_or_else(|| bad("DT_STRTAB maps past the end of the file"))?;
    let in_segment = seg.filesz - (strtab - seg.vaddr);
    let table_len = strsz.map_or(in_segment, |s| s.min(in_segment));
    let string = |off: u64| -> Result<Vec<u8>, ParseError> {
        if off >= table_len {
            return Err(bad(format!(
                "string offset {off} beyond the dynamic string table ({table_len} bytes)"
            )));
        }
        let at = table_off
            .checked_add(off)
            .ok_or_else(|| bad("a dynamic string lies past the end of the file"))?;
        read_cstr(r, at, (table_len - off) as usize)
    };
    for v in needed {
        d.needed.push(string(v)?);
    }
    for v in filters {
        d.filters.push(string(v)?);
    }
    for v in auxiliary {
        d.auxiliary.push(string(v)?);
    }
    d.soname = soname.map(string).transpose()?;
    d.runpath = runpath.map(string).transpose()?;
    // When both are present the loader ignores DT_RPATH.
    if d.runpath.is_none() {
        d.rpath = rpath.map(string).transpose()?;
    }
    Ok(d)
}

/// A NUL-terminated string at `offset`, read in small chunks, at most `max`
/// bytes (the rest of the string table).
fn read_cstr<R: ReadAt + ?Sized>(r: &R, offset: u64, max: usize) -> Result<Vec<u8>, ParseError> {
    let mut out = Vec::new();
    let mut chunk = [0u8; 256];
    let limit = max.min(MAX_STRING);
    while out.len() < limit {
        let want = chunk.len().min(limit - out.len());
        let n = r.read_at(&mut chunk[..want], offset + out.len() as u64)?;
        if n == 0 {
            break;
        }
        if let Some(z) = chunk[..n].iter().position(|&b| b == 0) {
            out.extend_from_slice(&chunk[..z]);
            return Ok(out);
        }
        out.extend_from_slice(&chunk[..n]);
    }
    Err(bad("unterminated string in the dynamic string table"))
}

fn notes<R: ReadAt + ?Sized>(
    r: &R,
    fmt: Fmt,
    ph: &Phdr,
    out: &mut Vec<Vec<u8>>,
) -> Result<(), ParseError> {
    if ph.filesz > MAX_NOTE || ph.filesz < 12 {
        return Ok(());
    }
    let mut buf = vec![0u8; ph.filesz as usize];
    if r.read_exact_at(&mut buf, ph.offset).is_err() {
        return Err(bad("truncated PT_NOTE"));
    }
    // Notes in an 8-aligned segment (.note.gnu.property) pad to 8.
    let align = if ph.align == 8 { 8 } else { 4 };
    let pad = |n: usize| n.div_ceil(align) * align;
    let mut at = 0usize;
    while at + 12 <= buf.len() {
        let namesz = fmt.u32(&buf, at) as usize;
        let descsz = fmt.u32(&buf, at + 4) as usize;
        let kind = fmt.u32(&buf, at + 8);
        let name_at = at + 12;
        let Some(desc_at) = name_at.checked_add(pad(namesz)) else {
            break;
        };
        let Some(end) = desc_at.checked_add(descsz) else {
            break;
        };
        if end > buf.len() {
            break;
        }
        let name = &buf[name_at..name_at + namesz];
        let name = name.strip_suffix(b"\0").unwrap_or(name);
        if kind == DLOPEN_NOTE_TYPE && name == DLOPEN_NOTE_OWNER {
            let mut desc = buf[desc_at..end].to_vec();
            while desc.last() == Some(&0) {
                desc.pop();
            }
            out.push(desc);
        }
        at = desc_at + pad(descsz);
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// What [`build`] puts into a crafted ELF file.
    #[derive(Clone, Default)]
    pub(crate) struct Spec {
        pub interp: Option<&'static str>,
        pub needed: Vec<&'static str>,
        pub soname: Option<&'static str>,
        pub rpath: Option<&'static str>,
        pub runpath: Option<&'static str>,
        pub flags_1: u64,
        pub notes: Vec<String>,
        /// Give the dynamic section no PT_LOAD covering the string table.
        pub unmapped_strtab: bool,
    }

    /// Crafts a minimal ELF file: header, program headers (PT_LOAD covering
    /// the whole file at vaddr 0x10000, PT_INTERP, PT_DYNAMIC, PT_NOTE), then
    /// the interpreter, the notes, the string table and the dynamic section.
    pub(crate) fn build(class: Class, endian: Endian, machine: u16, spec: &Spec) -> Vec<u8> {
        let w = match class {
            Class::Elf32 => 4,
            Class::Elf64 => 8,
        };
        let ehsize = if w == 4 { 52 } else { 64 };
        let phentsize = if w == 4 { 32 } else { 56 };
        let put16 = |v: u16| match endian {
            Endian::Little => v.to_le_bytes().to_vec(),
            Endian::Big => v.to_be_bytes().to_vec(),
        };
        let put32 = |v: u32| match endian {
            Endian::Little => v.to_le_bytes().to_vec(),
            Endian::Big => v.to_be_bytes().to_vec(),
        };
        let putw = |v: u64| {
            if w == 4 {
                put32(v as u32)
            } else {
                match endian {
                    Endian::Little => v.to_le_bytes().to_vec(),
                    Endian::Big => v.to_be_bytes().to_vec(),
                }
            }
        };
        // Strings.
        let mut strtab = vec![0u8];
        let mut add = |s: &str| {
            let off = strtab.len() as u64;
            strtab.extend_from_slice(s.as_bytes());
            strtab.push(0);
            off
        };
        let mut dyns: Vec<(u64, u64)> = Vec::new();
        for n in &spec.needed {
            dyns.push((DT_NEEDED, add(n)));
        }
        if let Some(s) = spec.soname {
            dyns.push((DT_SONAME, add(s)));
        }
        if let Some(s) = spec.rpath {
            dyns.push((DT_RPATH, add(s)));
        }
        if let Some(s) = spec.runpath {
            dyns.push((DT_RUNPATH, add(s)));
        }
        if spec.flags_1 != 0 {
            dyns.push((DT_FLAGS_1, spec.flags_1));
        }
        // Notes.
        let mut note = Vec::new();
        for n in &spec.notes {
            let mut desc = n.as_bytes().to_vec();
            desc.push(0);
            note.extend(put32(4));
            note.extend(put32(desc.len() as u32));
            note.extend(put32(DLOPEN_NOTE_TYPE));
            note.extend_from_slice(b"FDO\0");
            let padded = desc.len().div_ceil(4) * 4;
            desc.resize(padded, 0);
            note.extend(desc);
        }
        // A foreign note first, to check that the walk skips it.
        let mut gnu = Vec::new();
        gnu.extend(put32(4));
        gnu.extend(put32(16));
        gnu.extend(put32(1));
        gnu.extend_from_slice(b"GNU\0");
        gnu.extend([0u8; 16]);
        let note = [gnu, note].concat();

        let nph = 4;
        let interp_off = ehsize + nph * phentsize;
        let interp: Vec<u8> = spec
            .interp
            .map(|s| [s.as_bytes(), b"\0"].concat())
            .unwrap_or_default();
        let note_off = (interp_off + interp.len()).div_ceil(8) * 8;
        let str_off = note_off + note.len();
        let dyn_off = (str_off + strtab.len()).div_ceil(8) * 8;
        let base = 0x10000u64;
        dyns.push((
            DT_STRTAB,
            if spec.unmapped_strtab {
                0x9000_0000
            } else {
                base + str_off as u64
            },
        ));
        dyns.push((DT_STRSZ, strtab.len() as u64));
        dyns.push((DT_NULL, 0));
        let mut dynamic = Vec::new();
        for (t, v) in &dyns {
            dynamic.extend(putw(*t));
            dynamic.extend(putw(*v));
        }
        let total = dyn_off + dynamic.len();

        let mut out = Vec::new();
        out.extend_from_slice(b"\x7fELF");
        out.push(if w == 4 { 1 } else { 2 });
        out.push(if endian == Endian::Little { 1 } else { 2 });
        out.push(1);
        out.resize(16, 0);
        out.extend(put16(ET_DYN));
        out.extend(put16(machine));
        out.extend(put32(1));
        out.extend(putw(0)); // entry
        out.extend(putw(ehsize as u64)); // phoff
        out.extend(putw(0)); // shoff
        out.extend(put32(0)); // flags
        out.extend(put16(ehsize as u16));
        out.extend(put16(phentsize as u16));
        out.extend(put16(nph as u16));
        out.extend(put16(0));
        out.extend(put16(0));
        out.extend(put16(0));
        assert_eq!(out.len(), ehsize);
        let phdr = |kind: u32, off: usize, size: usize, align: u64| {
            let mut p = Vec::new();
            let vaddr = base + off as u64;
            if w == 4 {
                p.extend(put32(kind));
                p.extend(put32(off as u32));
                p.extend(put32(vaddr as u32));
                p.extend(put32(vaddr as u32));
                p.extend(put32(size as u32));
                p.extend(put32(size as u32));
                p.extend(put32(4));
                p.extend(put32(align as u32));
            } else {
                p.extend(put32(kind));
                p.extend(put32(4));
                p.extend(putw(off as u64));
                p.extend(putw(vaddr));
                p.extend(putw(vaddr));
                p.extend(putw(size as u64));
                p.extend(putw(size as u64));
                p.extend(putw(align));
            }
            p
        };
        out.extend(phdr(PT_LOAD, 0, total, 0x1000));
        if spec.interp.is_some() {
            out.extend(phdr(PT_INTERP, interp_off, interp.len(), 1));
        } else {
            out.extend(phdr(6 /* PT_PHDR */, ehsize, nph * phentsize, 8));
        }
        out.extend(phdr(PT_NOTE, note_off, note.len(), 4));
        out.extend(phdr(PT_DYNAMIC, dyn_off, dynamic.len(), 8));
        out.extend(&interp);
        out.resize(note_off, 0);
        out.extend(&note);
        out.extend(&strtab);
        out.resize(dyn_off, 0);
        out.extend(&dynamic);
        out
    }

    fn all_formats() -> [(Class, Endian); 4] {
        [
            (Class::Elf32, Endian::Little),
            (Class::Elf32, Endian::Big),
            (Class::Elf64, Endian::Little),
            (Class::Elf64, Endian::Big),
        ]
    }

    #[test]
    fn parses_every_class_and_byte_order() {
        let spec = Spec {
            interp: Some("/lib/ld-test.so.1"),
            needed: vec!["libfoo.so.1", "libbar.so.2"],
            soname: Some("libself.so.3"),
            rpath: Some("$ORIGIN/../lib"),
            notes: vec![r#"[{"soname":["libz.so.1"],"priority":"required"}]"#.into()],
            flags_1: DF_1_NODEFLIB,
            ..Spec::default()
        };
        for (class, endian) in all_formats() {
            let bytes = build(class, endian, EM_PPC, &spec);
            let elf =
                parse(bytes.as_slice()).unwrap_or_else(|e| panic!("{class:?} {endian:?}: {e}"));
            assert_eq!(elf.abi.class, class);
            assert_eq!(elf.abi.endian, endian);
            assert_eq!(elf.abi.machine, EM_PPC);
            assert_eq!(elf.kind, ET_DYN);
            assert_eq!(elf.interp.as_deref(), Some(&b"/lib/ld-test.so.1"[..]));
            let d = elf.dynamic.as_ref().unwrap();
            assert_eq!(
                d.needed,
                vec![b"libfoo.so.1".to_vec(), b"libbar.so.2".to_vec()]
            );
            assert_eq!(d.soname.as_deref(), Some(&b"libself.so.3"[..]));
            assert_eq!(d.rpath.as_deref(), Some(&b"$ORIGIN/../lib"[..]));
            assert_eq!(d.runpath, None);
            assert_eq!(d.flags_1, DF_1_NODEFLIB);
            assert_eq!(
                elf.dlopen_notes,
                vec![br#"[{"soname":["libz.so.1"],"priority":"required"}]"#.to_vec()]
            );
            assert!(!elf.is_static());
            let (abi, kind) = parse_abi(&bytes).unwrap();
            assert_eq!((abi, kind), (elf.abi, ET_DYN));
        }
    }

    #[test]
    fn runpath_hides_rpath() {
        let spec = Spec {
            needed: vec!["libc.so.6"],
            rpath: Some("/old"),
            runpath: Some("/new"),
            ..Spec::default()
        };
        for (class, endian) in all_formats() {
            let elf = parse(build(class, endian, EM_X86_64, &spec).as_slice()).unwrap();
            let d = elf.dynamic.unwrap();
            assert_eq!(d.runpath.as_deref(), Some(&b"/new"[..]));
            assert_eq!(d.rpath, None, "{class:?} {endian:?}");
            assert_eq!(elf.interp, None);
        }
    }

    #[test]
    fn static_object_without_names() {
        let elf =
            parse(build(Class::Elf64, Endian::Little, EM_X86_64, &Spec::default()).as_slice())
                .unwrap();
        assert!(elf.is_static());
        assert_eq!(elf.dynamic, Some(Dynamic::default()));
        assert!(elf.dlopen_notes.is_empty());
    }

    #[test]
    fn several_dlopen_notes_are_all_read() {
        let spec = Spec {
            needed: vec!["libc.so.6"],
            notes: vec![
                r#"[{"soname":["liba.so.1"]}]"#.into(),
                r#"[{"soname":["libbb.so.22"],"priority":"suggested"}]"#.into(),
            ],
            ..Spec::default()
        };
        let elf = parse(build(Class::Elf64, Endian::Big, EM_S390, &spec).as_slice()).unwrap();
        assert_eq!(elf.dlopen_notes.len(), 2);
        assert!(elf.dlopen_notes[1].ends_with(b"}]"));
    }

    #[test]
    fn unmapped_string_table_is_an_error() {
        let spec = Spec {
            needed: vec!["libc.so.6"],
            unmapped_strtab: true,
            ..Spec::default()
        };
        let err =
            parse(build(Class::Elf64, Endian::Little, EM_X86_64, &spec).as_slice()).unwrap_err();
        assert!(err.to_string().contains("PT_LOAD"), "{err}");
    }

    #[test]
    fn garbage_and_truncation_never_panic() {
        assert!(matches!(
            parse(&b"#!/bin/sh\n"[..]),
            Err(ParseError::NotElf)
        ));
        assert!(matches!(parse(&b""[..]), Err(ParseError::NotElf)));
        let spec = Spec {
            interp: Some("/lib/ld.so"),
            needed: vec!["libc.so.6"],
            notes: vec!["{}".into()],
            ..Spec::default()
        };
        for (class, endian) in all_formats() {
            let full = build(class, endian, EM_ARM, &spec);
            for cut in 0..full.len() {
                let _ = parse(&full[..cut]);
            }
            // Flip every byte in turn: errors are fine, panics are not.
            for i in 0..full.len() {
                let mut b = full.clone();
                b[i] ^= 0xff;
                let _ = parse(b.as_slice());
            }
        }
    }

    #[test]
    fn abi_acceptance() {
        let x64 = Abi::from_header(Class::Elf64, Endian::Little, EM_X86_64, 0);
        let x32 = Abi::from_header(Class::Elf32, Endian::Little, EM_X86_64, 0);
        let i386 = Abi::from_header(Class::Elf32, Endian::Little, EM_386, 0);
        assert!(x64.accepts(&x64));
        assert!(!x64.accepts(&x32));
        assert!(!x32.accepts(&i386));
        let hard = Abi::from_header(Class::Elf32, Endian::Little, EM_ARM, 0x0500_0400);
        let soft = Abi::from_header(Class::Elf32, Endian::Little, EM_ARM, 0x0500_0200);
        let none = Abi::from_header(Class::Elf32, Endian::Little, EM_ARM, 0x0500_0000);
        assert!(hard.arm_hard_float());
        assert!(!hard.accepts(&soft));
        assert!(hard.accepts(&none));
        assert_eq!(x64.to_string(), "ELF64 LSB x86-64");
    }

    #[test]
    fn head_file_reads_past_its_head() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let f = HeadFile::new(File::open(&path).unwrap()).unwrap();
        assert_eq!(f.head(), &data[..HeadFile::HEAD]);
        let mut buf = [0u8; 100];
        f.read_exact_at(&mut buf, 4050).unwrap();
        assert_eq!(&buf[..], &data[4050..4150]);
        assert!(f.read_exact_at(&mut buf, 9950).is_err());
        assert_eq!(f.read_at(&mut buf, 9950).unwrap(), 50);
    }
}

#![allow(dead_code)]
//! A strict, independent reader and writer of newc cpio archives for the tests.
//!
//! Include it with `#[path = "support/newc.rs"] mod newc;`. It shares no code with
//! composer (nor with `support::parse_newc`): it is written from the format description
//! and is stricter than a kernel or a generic extractor, because the tests use it to
//! judge archives byte for byte:
//!
//! - magic `070701` or `070702`, then 13 fields of exactly 8 *uppercase* hex digits;
//! - the name field (namesize bytes) ends in a NUL, and every byte after the first NUL
//!   is a NUL too (padding for data alignment);
//! - the padding after the name and after the data consists of NULs, up to a multiple
//!   of 4;
//! - the archive ends with a `TRAILER!!!` entry whose fields are those gen_init_cpio
//!   writes, followed by NULs up to a multiple of 512 and nothing else.

use std::fmt::Write as _;
use std::ops::Range;

pub const HEADER_LEN: usize = 110;
pub const TRAILER_NAME: &[u8] = b"TRAILER!!!";
pub const FIELD_NAMES: [&str; 13] = [
    "ino",
    "mode",
    "uid",
    "gid",
    "nlink",
    "mtime",
    "filesize",
    "devmajor",
    "devminor",
    "rdevmajor",
    "rdevminor",
    "namesize",
    "check",
];

pub const S_IFMT: u32 = 0o170000;
pub const S_IFREG: u32 = 0o100000;
pub const S_IFDIR: u32 = 0o040000;
pub const S_IFLNK: u32 = 0o120000;
pub const S_IFCHR: u32 = 0o020000;
pub const S_IFBLK: u32 = 0o060000;
pub const S_IFIFO: u32 = 0o010000;
pub const S_IFSOCK: u32 = 0o140000;

/// The 13 numeric header fields, in archive order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Header {
    pub ino: u32,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub nlink: u32,
    pub mtime: u32,
    pub filesize: u32,
    pub devmajor: u32,
    pub devminor: u32,
    pub rdevmajor: u32,
    pub rdevminor: u32,
    pub namesize: u32,
    pub check: u32,
}

impl Header {
    pub fn fields(&self) -> [u32; 13] {
        [
            self.ino,
            self.mode,
            self.uid,
            self.gid,
            self.nlink,
            self.mtime,
            self.filesize,
            self.devmajor,
            self.devminor,
            self.rdevmajor,
            self.rdevminor,
            self.namesize,
            self.check,
        ]
    }
    pub fn from_fields(f: [u32; 13]) -> Header {
        Header {
            ino: f[0],
            mode: f[1],
            uid: f[2],
            gid: f[3],
            nlink: f[4],
            mtime: f[5],
            filesize: f[6],
            devmajor: f[7],
            devminor: f[8],
            rdevmajor: f[9],
            rdevminor: f[10],
            namesize: f[11],
            check: f[12],
        }
    }
    pub fn file_type(&self) -> u32 {
        self.mode & S_IFMT
    }
    pub fn is_regular(&self) -> bool {
        self.file_type() == S_IFREG
    }
}

/// One entry as found in an archive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Offset of the header.
    pub offset: usize,
    /// True for magic `070702`.
    pub crc: bool,
    pub hdr: Header,
    /// The name up to (excluding) its first NUL.
    pub name: Vec<u8>,
    /// Where the data lies in the archive (empty range for no data).
    pub data: Range<usize>,
}

impl Entry {
    /// NULs in the name field beyond the terminating one (alignment padding).
    pub fn name_pad(&self) -> usize {
        self.hdr.namesize as usize - self.name.len() - 1
    }
    pub fn data_offset(&self) -> usize {
        self.data.start
    }
    /// The name as a path: without the leading `./` pairs composer's readers mode pads
    /// names with (path lookup drops them).
    pub fn path(&self) -> &[u8] {
        path_of(&self.name)
    }
    pub fn display_name(&self) -> String {
        String::from_utf8_lossy(self.path()).into_owned()
    }
}

/// `name` without leading `./` pairs (`././x` is `x` to the kernel and every reader).
pub fn path_of(name: &[u8]) -> &[u8] {
    let mut n = name;
    while n.len() > 2 && n.starts_with(b"./") {
        n = &n[2..];
    }
    n
}

/// A whole archive: its entries (without the trailer) and the trailer.
#[derive(Clone, Debug)]
pub struct Archive {
    pub entries: Vec<Entry>,
    pub trailer: Entry,
    /// Offset just after the trailer's name padding (where the 512-tail starts).
    pub trailer_end: usize,
}

fn pad4(n: usize) -> usize {
    (4 - n % 4) % 4
}

/// Decodes the 110-byte header at `off`: (crc, header). Strict: uppercase hex only.
pub fn decode_header(buf: &[u8], off: usize) -> Result<(bool, Header), String> {
    let h = buf.get(off..off + HEADER_LEN).ok_or_else(|| {
        format!(
            "offset {off}: truncated header ({} bytes left)",
            buf.len().saturating_sub(off)
        )
    })?;
    let crc = match &h[..6] {
        b"070701" => false,
        b"070702" => true,
        m => {
            return Err(format!(
                "offset {off}: bad magic {:?}",
                String::from_utf8_lossy(m)
            ))
        }
    };
    let mut f = [0u32; 13];
    for (i, v) in f.iter_mut().enumerate() {
        let digits = &h[6 + 8 * i..14 + 8 * i];
        let mut x: u32 = 0;
        for &d in digits {
            let nib = match d {
                b'0'..=b'9' => d - b'0',
                b'A'..=b'F' => d - b'A' + 10,
                _ => {
                    return Err(format!(
                        "offset {off}: field {} is {:?}, not 8 uppercase hex digits",
                        FIELD_NAMES[i],
                        String::from_utf8_lossy(digits)
                    ))
                }
            };
            x = (x << 4) | nib as u32;
        }
        *v = x;
    }
    Ok((crc, Header::from_fields(f)))
}

/// Parses one entry at `off`; returns it and the offset of the next header.
pub fn parse_entry(buf: &[u8], off: usize) -> Result<(Entry, usize), String> {
    if !off.is_multiple_of(4) {
        return Err(format!("offset {off}: header not 4-aligned"));
    }
    let (crc, hdr) = decode_header(buf, off)?;
    let namesize = hdr.namesize as usize;
    if namesize == 0 {
        return Err(format!("offset {off}: namesize 0"));
    }
    let name_start = off + HEADER_LEN;
    let field = buf
        .get(name_start..name_start + namesize)
        .ok_or_else(|| format!("offset {off}: name field of {namesize} bytes runs past the end"))?;
    let nul = field.iter().position(|&b| b == 0).ok_or_else(|| {
        format!("offset {off}: name not NUL-terminated within namesize {namesize}")
    })?;
    if field[nul..].iter().any(|&b| b != 0) {
        return Err(format!("offset {off}: non-NUL bytes after the name's NUL"));
    }
    let name = field[..nul].to_vec();
    let name_end = name_start + namesize;
    let data_start = name_end + pad4(name_end);
    let pad = buf
        .get(name_end..data_start)
        .ok_or_else(|| format!("offset {off}: name padding runs past the end"))?;
    if pad.iter().any(|&b| b != 0) {
        return Err(format!("offset {off}: non-NUL name padding"));
    }
    let size = hdr.filesize as usize;
    let data_end = data_start + size;
    let next = data_end + pad4(data_end);
    let dpad = buf.get(data_end..next).ok_or_else(|| {
        format!("offset {off}: data ({size} bytes) or its padding runs past the end")
    })?;
    if dpad.iter().any(|&b| b != 0) {
        return Err(format!("offset {off}: non-NUL data padding"));
    }
    Ok((
        Entry {
            offset: off,
            crc,
            hdr,
            name,
            data: data_start..data_end,
        },
        next,
    ))
}

/// Parses as many entries as possible: (entries including a trailer if reached, error).
pub fn parse_prefix(buf: &[u8]) -> (Vec<Entry>, Option<(String, usize)>) {
    let mut out = Vec::new();
    let mut off = 0;
    loop {
        match parse_entry(buf, off) {
            Ok((e, next)) => {
                let done = e.name == TRAILER_NAME;
                out.push(e);
                if done {
                    return (out, None);
                }
                off = next;
            }
            Err(msg) => return (out, Some((msg, off))),
        }
    }
}

/// Parses a complete archive strictly (see the module documentation).
pub fn parse(buf: &[u8]) -> Result<Archive, String> {
    let (mut entries, err) = parse_prefix(buf);
    if let Some((msg, _)) = err {
        return Err(msg);
    }
    let trailer = entries.pop().expect("parse_prefix ends at a trailer");
    let expect = Header {
        nlink: 1,
        namesize: 11,
        ..Header::default()
    };
    if trailer.hdr != expect {
        return Err(format!(
            "trailer at {} has fields {:?}",
            trailer.offset, trailer.hdr
        ));
    }
    let trailer_end = trailer.data.end;
    let tail = &buf[trailer_end..];
    if tail.iter().any(|&b| b != 0) {
        return Err(format!(
            "non-NUL bytes after the trailer (from offset {trailer_end})"
        ));
    }
    if !buf.len().is_multiple_of(512) {
        return Err(format!(
            "archive length {} is not a multiple of 512",
            buf.len()
        ));
    }
    if tail.len() >= 512 {
        return Err(format!(
            "{} bytes of tail after the trailer: more than needed",
            tail.len()
        ));
    }
    for e in &entries {
        if e.crc != trailer.crc {
            return Err(format!(
                "entry at {} has a different magic than the trailer",
                e.offset
            ));
        }
    }
    Ok(Archive {
        entries,
        trailer,
        trailer_end,
    })
}

/// The 32-bit wrapping sum of the bytes (the 070702 check field of a regular file).
pub fn checksum(data: &[u8]) -> u32 {
    data.iter().fold(0u32, |s, &b| s.wrapping_add(b as u32))
}

/// Appends one entry: header (namesize = name + NUL + `name_pad`), name, NULs, data, NULs.
pub fn write_entry(
    out: &mut Vec<u8>,
    crc: bool,
    hdr: &Header,
    name: &[u8],
    name_pad: usize,
    data: &[u8],
) {
    let mut hdr = *hdr;
    hdr.namesize = (name.len() + 1 + name_pad) as u32;
    hdr.filesize = data.len() as u32;
    out.extend_from_slice(if crc { b"070702" } else { b"070701" });
    for f in hdr.fields() {
        write!(HexSink(out), "{f:08X}").unwrap();
    }
    out.extend_from_slice(name);
    out.resize(out.len() + 1 + name_pad, 0);
    out.resize(out.len() + pad4(out.len()), 0);
    out.extend_from_slice(data);
    out.resize(out.len() + pad4(out.len()), 0);
}

/// Appends the trailer and the NULs up to a multiple of 512.
pub fn write_trailer(out: &mut Vec<u8>, crc: bool) {
    let hdr = Header {
        nlink: 1,
        ..Header::default()
    };
    write_entry(out, crc, &hdr, TRAILER_NAME, 0, &[]);
    out.resize(out.len().next_multiple_of(512), 0);
}

struct HexSink<'a>(&'a mut Vec<u8>);
impl std::fmt::Write for HexSink<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

/// Rewrites `archive` (parsed from `buf`) with every name padding removed (namesize =
/// name + NUL), i.e. what gen_init_cpio writes without `-a`.
pub fn strip_name_padding(buf: &[u8], archive: &Archive) -> Vec<u8> {
    let mut out = Vec::with_capacity(buf.len());
    for e in &archive.entries {
        write_entry(&mut out, e.crc, &e.hdr, &e.name, 0, &buf[e.data.clone()]);
    }
    write_trailer(&mut out, archive.trailer.crc);
    out
}

/// A one-line rendering of a header for messages.
pub fn describe_header(crc: bool, h: &Header) -> String {
    let mut s = String::from(if crc { "070702" } else { "070701" });
    for (n, v) in FIELD_NAMES.iter().zip(h.fields()) {
        match *n {
            "mode" => write!(s, " {n}={v:o}").unwrap(),
            "check" | "ino" => write!(s, " {n}={v:#x}").unwrap(),
            _ => write!(s, " {n}={v}").unwrap(),
        }
    }
    s
}

/// A short rendering of a name (lossy UTF-8, long names shortened in the middle).
pub fn short_name(name: &[u8]) -> String {
    let s = String::from_utf8_lossy(name);
    if s.chars().count() <= 120 {
        return format!("{s:?}");
    }
    let head: String = s.chars().take(50).collect();
    let tail: String = s
        .chars()
        .rev()
        .take(50)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    format!("{head:?}...({} bytes)...{tail:?}", name.len())
}

/// The entry of `buf` containing offset `at` (as far as `buf` parses), and a description
/// of where in it `at` lies.
fn locate(buf: &[u8], at: usize) -> String {
    let (entries, err) = parse_prefix(buf);
    for e in &entries {
        let next = e.data.end + pad4(e.data.end);
        if at >= e.offset && at < next.max(e.offset + HEADER_LEN) {
            let part = if at < e.offset + HEADER_LEN {
                let fi = (at - e.offset).saturating_sub(6) / 8;
                if at - e.offset < 6 {
                    "magic".to_string()
                } else {
                    format!("header field {}", FIELD_NAMES[fi.min(12)])
                }
            } else if at < e.offset + HEADER_LEN + e.hdr.namesize as usize {
                format!("name byte {}", at - e.offset - HEADER_LEN)
            } else if at < e.data.start {
                "name padding".to_string()
            } else if at < e.data.end {
                format!("data byte {}", at - e.data.start)
            } else {
                "data padding".to_string()
            };
            return format!(
                "entry at {} {} ({part}):\n      {}",
                e.offset,
                short_name(&e.name),
                describe_header(e.crc, &e.hdr)
            );
        }
    }
    if let Some(last) = entries.last() {
        if last.name == TRAILER_NAME && at >= last.data.end {
            return format!(
                "512-byte tail after the trailer (trailer at {})",
                last.offset
            );
        }
    }
    match err {
        Some((msg, off)) if at >= off => format!("unparsable region ({msg})"),
        _ => "unknown region".to_string(),
    }
}

/// None if equal; else a multi-line explanation of the first difference, decoding the
/// entries of both archives at that offset.
pub fn explain_difference(
    expected: &[u8],
    actual: &[u8],
    what_expected: &str,
    what_actual: &str,
) -> Option<String> {
    if expected == actual {
        return None;
    }
    let at = expected
        .iter()
        .zip(actual)
        .position(|(a, b)| a != b)
        .unwrap_or(expected.len().min(actual.len()));
    let show = |b: &[u8]| -> String {
        let s = at.saturating_sub(8);
        let e = (at + 24).min(b.len());
        b.get(s..e)
            .map(|x| format!("{:?}", String::from_utf8_lossy(x)))
            .unwrap_or_default()
    };
    Some(format!(
        "archives differ: first difference at offset {at} (lengths {} vs {})\n  {what_expected}: {}\n      bytes near it: {}\n  {what_actual}: {}\n      bytes near it: {}",
        expected.len(),
        actual.len(),
        locate(expected, at),
        show(expected),
        locate(actual, at),
        show(actual),
    ))
}

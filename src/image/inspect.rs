//! `composer inspect`: what an image holds, as a listing, a long listing,
//! a table of segments, or JSON.
//!
//! Input: an [`Image`]. Output: text (or JSON) rendered into memory first,
//! so a failure never leaves half a listing on standard output.

use std::fmt::Write as _;

use serde::Serialize;

use super::{Image, Segment};
use crate::compress::Compression;
use crate::cpio::reader::{RawEntry, Skip};
use crate::entry::{S_IFBLK, S_IFCHR, S_IFDIR, S_IFIFO, S_IFLNK, S_IFMT, S_IFREG, S_IFSOCK};
use crate::error::Result;
use crate::path::escape;

#[derive(Clone, Debug, Default)]
pub struct InspectOptions {
    /// Mode, owner, size, mtime and data offset of every entry.
    pub long: bool,
    /// Only the segments: range, compression, sizes.
    pub segments: bool,
    pub json: bool,
    /// Only the image's architecture: that of its ELF files, with their
    /// counts.
    pub arch: bool,
    /// Only the entries these select (empty: all): a path selects itself
    /// and what is below it, a glob the names it matches.
    pub only: Vec<String>,
}

/// Which entries a listing shows.
struct Filter {
    prefixes: Vec<Vec<u8>>,
    globs: Option<globset::GlobSet>,
}

impl Filter {
    fn new(only: &[String]) -> Result<Option<Filter>> {
        if only.is_empty() {
            return Ok(None);
        }
        let mut prefixes = Vec::new();
        let mut patterns = Vec::new();
        for p in only {
            let norm = normalize(p.as_bytes());
            if p.contains(['*', '?', '[']) {
                patterns.push(String::from_utf8_lossy(&norm).into_owned());
            } else {
                prefixes.push(norm);
            }
        }
        let globs = crate::glob::command_line(&patterns)?;
        Ok(Some(Filter { prefixes, globs }))
    }

    fn takes(&self, name: &[u8]) -> bool {
        let name = normalize(name);
        let below = |p: &Vec<u8>| {
            p.is_empty() || name == *p || (name.starts_with(p) && name.get(p.len()) == Some(&b'/'))
        };
        self.prefixes.iter().any(below)
            || self
                .globs
                .as_ref()
                .is_some_and(|g| std::str::from_utf8(&name).is_ok_and(|n| g.is_match(n)))
    }
}

/// A name without a leading `/`, `./` or trailing `/`.
fn normalize(name: &[u8]) -> Vec<u8> {
    let mut n = name;
    loop {
        if let Some(r) = n.strip_prefix(b"./") {
            n = r;
        } else if let Some(r) = n.strip_prefix(b"/") {
            n = r;
        } else {
            break;
        }
    }
    while let Some(r) = n.strip_suffix(b"/") {
        n = r;
    }
    if n == b"." {
        n = b"";
    }
    n.to_vec()
}

/// Renders the listing of an image that has no fault.
pub fn render(image: &Image, opts: &InspectOptions) -> Result<String> {
    if let Some(e) = image.fault_error() {
        return Err(e);
    }
    let filter = Filter::new(&opts.only)?;
    let shown = |e: &RawEntry| filter.as_ref().is_none_or(|f| f.takes(e.path()));
    if opts.json {
        let census = super::arch::census(image)?;
        let mut s = serde_json::to_string_pretty(&json(image, opts, &shown, &census))
            .map_err(|e| crate::error::Error::usage(format!("internal error: {e}")))?;
        s.push('\n');
        return Ok(s);
    }
    if opts.arch {
        let census = super::arch::census(image)?;
        return Ok(format!("{}\n", census.describe()));
    }
    let mut out = String::new();
    if let Some(uki) = &image.uki {
        uki_block(&mut out, uki);
    }
    if opts.segments {
        let _ = writeln!(
            out,
            "{:>3}  {:>12}  {:>12}  {:<11}  {:>12}  {:>8}",
            "#", "offset", "length", "compression", "size", "entries"
        );
        for s in &image.segments {
            let _ = writeln!(
                out,
                "{:>3}  {:>12}  {:>12}  {:<11}  {:>12}  {:>8}",
                s.index,
                s.offset,
                s.end - s.offset,
                s.compression.name(),
                s.size(),
                count(s)
            );
        }
        return Ok(out);
    }
    for (seg, e) in image.entries().filter(|(_, e)| shown(e)) {
        if opts.long {
            long_line(&mut out, seg, e);
        } else {
            out.push_str(&escape(e.path()));
            out.push('\n');
        }
    }
    Ok(out)
}

fn count(s: &Segment) -> usize {
    s.entries.iter().filter(|e| !e.is_trailer()).count()
}

fn long_line(out: &mut String, seg: &Segment, e: &RawEntry) {
    let h = &e.header;
    let size = match h.mode & S_IFMT {
        S_IFCHR | S_IFBLK => format!("{}, {}", h.rdevmajor, h.rdevminor),
        _ => h.filesize.to_string(),
    };
    let at = match seg.compression {
        Compression::None => format!("@{}", e.data.start),
        _ => format!("@{}:{}", seg.index, e.data.start),
    };
    let _ = write!(
        out,
        "{} {:>3} {:>5}/{:<5} {:>10} {} {:>12} {}",
        mode_string(h.mode),
        h.nlink,
        h.uid,
        h.gid,
        size,
        format_time(h.mtime as i64),
        at,
        escape(e.path())
    );
    if e.is_symlink() && e.skip.is_none() {
        let _ = write!(out, " -> {}", escape(target(e)));
    }
    if let Some(skip) = e.skip {
        let _ = write!(out, "  [{}]", skip.describe());
    }
    out.push('\n');
}

/// A symlink's target: its data up to the first NUL, as the kernel reads it
/// (empty for an entry the kernel skips).
pub fn target(e: &RawEntry) -> &[u8] {
    e.link.as_deref().unwrap_or_default()
}

/// `ls -l` style: the type letter and nine permission characters.
pub fn mode_string(mode: u32) -> String {
    let t = match mode & S_IFMT {
        S_IFREG => '-',
        S_IFDIR => 'd',
        S_IFLNK => 'l',
        S_IFCHR => 'c',
        S_IFBLK => 'b',
        S_IFIFO => 'p',
        S_IFSOCK => 's',
        _ => '?',
    };
    let mut s = String::with_capacity(10);
    s.push(t);
    let bit = |b: u32, c: char| if mode & b != 0 { c } else { '-' };
    let special = |x: u32, sp: u32, on: char, off: char| match (mode & x != 0, mode & sp != 0) {
        (true, true) => on,
        (false, true) => off,
        (true, false) => 'x',
        (false, false) => '-',
    };
    s.push(bit(0o400, 'r'));
    s.push(bit(0o200, 'w'));
    s.push(special(0o100, 0o4000, 's', 'S'));
    s.push(bit(0o040, 'r'));
    s.push(bit(0o020, 'w'));
    s.push(special(0o010, 0o2000, 's', 'S'));
    s.push(bit(0o004, 'r'));
    s.push(bit(0o002, 'w'));
    s.push(special(0o001, 0o1000, 't', 'T'));
    s
}

/// The type of an entry, as a word.
pub fn type_name(mode: u32) -> &'static str {
    match mode & S_IFMT {
        S_IFREG => "file",
        S_IFDIR => "dir",
        S_IFLNK => "symlink",
        S_IFCHR => "char",
        S_IFBLK => "block",
        S_IFIFO => "pipe",
        S_IFSOCK => "socket",
        _ => "unknown",
    }
}

/// Seconds since the epoch as `YYYY-MM-DD HH:MM:SS` (UTC).
pub fn format_time(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

#[derive(Serialize)]
struct JsonImage<'a> {
    image: &'a str,
    size: u64,
    /// The unified kernel image the initrd is in.
    #[serde(skip_serializing_if = "Option::is_none")]
    uki: Option<&'a crate::uki::Info>,
    /// The architecture most of its ELF files are for (`aarch64`).
    architecture: Option<String>,
    /// Every architecture its ELF files are for, with their counts.
    architectures: Vec<JsonArch>,
    segments: Vec<JsonSegment>,
}

#[derive(Serialize)]
struct JsonArch {
    name: String,
    programs: usize,
    modules: usize,
}

#[derive(Serialize)]
struct JsonSegment {
    index: usize,
    offset: u64,
    /// Bytes in the file, NUL padding after it included.
    length: u64,
    /// Bytes of the archive or compressed stream itself.
    stored: u64,
    compression: Compression,
    /// Bytes of cpio data (after decompression).
    size: u64,
    entry_count: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    entries: Option<Vec<JsonEntry>>,
}

#[derive(Serialize)]
struct JsonEntry {
    /// Escaped as in listings (`\xHH` for bytes that are not UTF-8).
    name: String,
    #[serde(rename = "type")]
    kind: &'static str,
    /// Permission bits (without the type bits).
    mode: u32,
    uid: u32,
    gid: u32,
    nlink: u32,
    mtime: u32,
    size: u32,
    ino: u32,
    dev: [u32; 2],
    rdev: [u32; 2],
    /// `070702` header.
    crc: bool,
    check: u32,
    namesize: u32,
    /// Header offset: in the file, or in the segment's decompressed data.
    offset: usize,
    data_offset: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    target: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    skip: Option<Skip>,
}

/// What a unified kernel image holds besides its initrd: a block of `#` lines
/// before the listing (the initrd's offsets are inside its `.initrd`).
fn uki_block(out: &mut String, uki: &crate::uki::Info) {
    let _ = writeln!(
        out,
        "# unified kernel image{}{}",
        uki.os
            .as_deref()
            .map(|o| format!(": {o}"))
            .unwrap_or_default(),
        uki.uname
            .as_deref()
            .map(|u| format!(", kernel {u}"))
            .unwrap_or_default()
    );
    if let Some(c) = &uki.cmdline {
        let _ = writeln!(out, "# command line: {c}");
    }
    if !uki.profiles.is_empty() {
        let _ = writeln!(out, "# profiles: {}", uki.profiles.join(", "));
    }
    let _ = writeln!(
        out,
        "# {:<9} {:>10} {:>12} {:>12}",
        "section", "offset", "size", "address"
    );
    for s in &uki.sections {
        let _ = writeln!(
            out,
            "# {:<9} {:>10} {:>12} {:>#12x}",
            s.name, s.offset, s.size, s.virtual_address
        );
    }
    let _ = writeln!(out, "# the initrd (.initrd):");
}

fn json<'a>(
    image: &'a Image,
    opts: &InspectOptions,
    shown: &dyn Fn(&RawEntry) -> bool,
    census: &crate::arch::Census,
) -> JsonImage<'a> {
    let segments = image
        .segments
        .iter()
        .map(|s| JsonSegment {
            index: s.index,
            offset: s.offset,
            length: s.end - s.offset,
            stored: s.stream_end - s.offset,
            compression: s.compression,
            size: s.size(),
            entry_count: count(s),
            entries: (!opts.segments).then(|| {
                s.entries
                    .iter()
                    .filter(|e| !e.is_trailer() && shown(e))
                    .map(|e| {
                        let h = &e.header;
                        JsonEntry {
                            name: escape(e.path()),
                            kind: type_name(h.mode),
                            mode: h.mode & 0o7777,
                            uid: h.uid,
                            gid: h.gid,
                            nlink: h.nlink,
                            mtime: h.mtime,
                            size: h.filesize,
                            ino: h.ino,
                            dev: [h.devmajor, h.devminor],
                            rdev: [h.rdevmajor, h.rdevminor],
                            crc: h.crc,
                            check: h.check,
                            namesize: h.namesize,
                            offset: e.offset,
                            data_offset: e.data.start,
                            target: (e.is_symlink() && e.skip.is_none()).then(|| escape(target(e))),
                            skip: e.skip,
                        }
                    })
                    .collect()
            }),
        })
        .collect();
    JsonImage {
        image: &image.name,
        size: image.len(),
        uki: image.uki.as_ref(),
        architecture: census.main().map(|a| a.name()),
        architectures: census
            .all()
            .into_iter()
            .map(|a| JsonArch {
                name: a.name(),
                programs: census.programs.get(&a).copied().unwrap_or(0),
                modules: census.modules.get(&a).copied().unwrap_or(0),
            })
            .collect(),
        segments,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_and_modes() {
        assert_eq!(format_time(0), "1970-01-01 00:00:00");
        assert_eq!(format_time(951_782_400), "2000-02-29 00:00:00");
        assert_eq!(format_time(4_294_967_295), "2106-02-07 06:28:15");
        assert_eq!(mode_string(0o104755), "-rwsr-xr-x");
        assert_eq!(mode_string(0o041777), "drwxrwxrwt");
        assert_eq!(mode_string(0o120777), "lrwxrwxrwx");
        assert_eq!(mode_string(0o022644), "crw-r-Sr--");
    }
}

//! Read: newc entries out of a byte buffer, by the rules of the kernel's
//! unpacker (init/initramfs.c), not by those of a generic cpio tool.
//!
//! Input: the bytes of an uncompressed archive region (or a decompressed
//! stream) and the offset of its first byte in the stream the kernel counts
//! alignment in. Output: a [`Scan`]: every entry as stored, and why the scan
//! stopped. Nothing is skipped here: entries the kernel would drop are kept
//! and carry a [`Skip`] reason, so callers can list them or report them.
//!
//! The rules, as the kernel applies them:
//!
//! * between entries, and between archives, any number of NUL bytes may
//!   stand, as long as the next header starts at a 4-aligned offset;
//!   a non-NUL byte at an unaligned offset after an entry is "broken
//!   padding";
//! * a header is `070701` or `070702` and 13 fields of 8 hex digits;
//! * the data starts after the name field padded to 4 (counting from the
//!   header), and the next header after the data padded to 4;
//! * namesize 0 or above 4096, a symlink target above 4096 bytes and a
//!   non-regular, non-symlink entry carrying data are skipped silently;
//! * a name (of an entry the kernel reads) without a NUL at namesize - 1 is
//!   a fatal "malformed archive".

use std::ops::Range;

use super::header::{checksum, Header, HEADER_LEN, TRAILER_NAME};
use crate::entry::{PATH_MAX, S_IFDIR, S_IFLNK, S_IFMT, S_IFREG};

/// Where the scanner reads headers and names from: a byte slice, a file
/// read with pread through a small window (so that listing a large archive
/// reads only its headers, not its data), or a decoder read forward.
pub trait Source {
    /// The length; for a stream not yet read to its end, `usize::MAX`.
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Up to `n` bytes from `pos` (fewer at the end). The scanner asks for
    /// increasing positions only, so a stream may forget what is before.
    fn get(&mut self, pos: usize, n: usize) -> &[u8];
    /// Whether there are at least `end` bytes; once it says no, `len` is
    /// exact.
    fn reaches(&mut self, end: usize) -> bool {
        end <= self.len()
    }
}

impl Source for &[u8] {
    fn len(&self) -> usize {
        <[u8]>::len(self)
    }
    fn get(&mut self, pos: usize, n: usize) -> &[u8] {
        let end = pos.saturating_add(n).min(<[u8]>::len(self));
        &self[pos.min(end)..end]
    }
}

/// A file read through a window of at least [`FileSource::WINDOW`] bytes.
pub struct FileSource<'f> {
    file: &'f std::fs::File,
    len: usize,
    buf: Vec<u8>,
    start: usize,
    /// The first read error; the bytes after it read as missing.
    pub error: Option<std::io::Error>,
}

impl<'f> FileSource<'f> {
    pub const WINDOW: usize = 2048;

    pub fn new(file: &'f std::fs::File, len: usize) -> Self {
        FileSource {
            file,
            len,
            buf: Vec::new(),
            start: 0,
            error: None,
        }
    }
}

impl Source for FileSource<'_> {
    fn len(&self) -> usize {
        self.len
    }
    fn get(&mut self, pos: usize, n: usize) -> &[u8] {
        let end = pos.saturating_add(n).min(self.len);
        let pos = pos.min(end);
        if pos < self.start || end > self.start + self.buf.len() {
            let want = (end - pos).max(Self::WINDOW).min(self.len - pos);
            self.buf.resize(want, 0);
            let got = match crate::io::read_full_at(self.file, &mut self.buf, pos as u64) {
                Ok(n) => n,
                Err(e) => {
                    self.error.get_or_insert(e);
                    0
                }
            };
            self.buf.truncate(got);
            self.start = pos;
        }
        let a = pos - self.start;
        let b = (end - self.start).min(self.buf.len());
        &self.buf[a.min(b)..b]
    }
}

/// A stream (a decoder) read forward through a window: bytes before the
/// position last asked for are dropped as they go by, so scanning holds
/// only headers and names however large the stream is.
pub struct StreamSource<R> {
    reader: R,
    buf: Vec<u8>,
    /// The window: `buf[lo..hi]`, stream offsets `start..`.
    lo: usize,
    hi: usize,
    start: usize,
    /// The stream's length, once the reader has ended (or failed).
    end: Option<usize>,
    /// The reader's error; the bytes after it read as missing.
    pub error: Option<std::io::Error>,
}

impl<R: std::io::Read> StreamSource<R> {
    /// Reads go straight into the window, this much at a time.
    const CHUNK: usize = 256 << 10;

    pub fn new(reader: R) -> Self {
        StreamSource {
            reader,
            buf: vec![0; Self::CHUNK],
            lo: 0,
            hi: 0,
            start: 0,
            end: None,
            error: None,
        }
    }

    /// Bytes read from the stream so far (its length once it has ended).
    pub fn produced(&self) -> usize {
        self.start + (self.hi - self.lo)
    }

    /// Reads until the window holds `pos..pos + n` (or the stream ends),
    /// dropping everything before `pos`.
    fn fill(&mut self, pos: usize, n: usize) {
        loop {
            let drop = pos.saturating_sub(self.start).min(self.hi - self.lo);
            self.lo += drop;
            self.start += drop;
            if self.lo == self.hi {
                (self.lo, self.hi) = (0, 0);
            }
            if self.start == pos && self.produced() >= pos.saturating_add(n) {
                return;
            }
            if self.end.is_some() {
                return;
            }
            if self.hi == self.buf.len() {
                self.buf.copy_within(self.lo..self.hi, 0);
                (self.lo, self.hi) = (0, self.hi - self.lo);
                if self.hi == self.buf.len() {
                    // A name longer than the window: grow it.
                    self.buf.resize(self.buf.len() * 2, 0);
                }
            }
            match self.reader.read(&mut self.buf[self.hi..]) {
                Ok(0) => self.end = Some(self.produced()),
                Ok(k) => self.hi += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.error = Some(e);
                    self.end = Some(self.produced());
                }
            }
        }
    }
}

impl<R: std::io::Read> Source for StreamSource<R> {
    fn len(&self) -> usize {
        self.end.unwrap_or(usize::MAX)
    }
    fn get(&mut self, pos: usize, n: usize) -> &[u8] {
        self.fill(pos, n);
        if pos != self.start {
            // Past the end (or, against the contract, behind the window).
            return &[];
        }
        let k = n.min(self.hi - self.lo);
        &self.buf[self.lo..self.lo + k]
    }
    fn reaches(&mut self, end: usize) -> bool {
        self.fill(end, 0);
        self.produced() >= end
    }
}

/// Why the kernel skips an entry without a word.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Skip {
    /// namesize is 0.
    EmptyNamesize,
    /// namesize is larger than PATH_MAX (4096).
    LongNamesize,
    /// A symlink whose target is longer than PATH_MAX.
    LongSymlinkTarget,
    /// Not a regular file or symlink, but filesize > 0.
    DataOnSpecial,
}

impl Skip {
    pub fn describe(self) -> &'static str {
        match self {
            Skip::EmptyNamesize => "namesize is 0: the kernel skips this entry",
            Skip::LongNamesize => "namesize is over 4096: the kernel skips this entry",
            Skip::LongSymlinkTarget => {
                "symlink target is over 4096 bytes: the kernel skips this entry"
            }
            Skip::DataOnSpecial => {
                "a non-regular entry carries data: the kernel skips it (and its data)"
            }
        }
    }
}

/// One entry as stored in the buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawEntry {
    /// Where the header starts (buffer index).
    pub offset: usize,
    pub header: Header,
    /// The name up to its first NUL (or the whole field when it has none).
    pub name: Vec<u8>,
    /// The name field ends in a NUL at namesize - 1 (what the kernel checks).
    pub terminated: bool,
    /// The data bytes (buffer indices).
    pub data: Range<usize>,
    pub skip: Option<Skip>,
    /// A symlink's target as the kernel reads it (its data up to the first
    /// NUL), kept so that a listing of a stream can show it.
    pub link: Option<Vec<u8>>,
    /// The data's 070702 checksum, when [`Want::sums`] asked for it (a
    /// regular file the kernel reads, with a 070702 header).
    pub sum: Option<u32>,
    /// A 64-bit digest of the data, when [`Want::digests`] asked for it (a
    /// regular file the kernel reads, with data).
    pub digest: Option<u64>,
}

/// Which digests of regular files' data a scan computes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Digests {
    #[default]
    None,
    /// Of files that may be hardlinks (nlink >= 2).
    Hardlinks,
    All,
}

/// What a scan computes from file data on the way (it reads the data only
/// when something is asked).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Want {
    /// Checksums of 070702 regular files.
    pub sums: bool,
    pub digests: Digests,
}

impl Want {
    /// Everything.
    pub fn all() -> Want {
        Want {
            sums: true,
            digests: Digests::All,
        }
    }
}

impl RawEntry {
    /// The name as listings show it: without leading `./` pairs (composer's
    /// readers mode pads names with them; the kernel and every reader take
    /// `././x` as `x`).
    pub fn path(&self) -> &[u8] {
        let mut name = &self.name[..];
        while name.len() > 2 && name.starts_with(b"./") {
            name = &name[2..];
        }
        name
    }
    pub fn is_trailer(&self) -> bool {
        self.skip.is_none() && self.name == TRAILER_NAME
    }
    pub fn file_type(&self) -> u32 {
        self.header.mode & S_IFMT
    }
    pub fn is_regular(&self) -> bool {
        self.file_type() == S_IFREG
    }
    pub fn is_dir(&self) -> bool {
        self.file_type() == S_IFDIR
    }
    pub fn is_symlink(&self) -> bool {
        self.file_type() == S_IFLNK
    }
    /// Where the next header (or padding) starts.
    pub fn end(&self) -> usize {
        self.data.end + (4 - self.data.end % 4) % 4
    }
}

/// A fatal problem: the kernel stops unpacking here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fault {
    /// Buffer index the problem is at.
    pub offset: usize,
    /// The kernel's own words for it, e.g. "malformed archive".
    pub kernel: &'static str,
    /// What exactly is wrong, for people.
    pub detail: String,
}

/// Why a scan stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stop {
    /// The buffer ended between entries.
    End,
    /// At this (4-aligned) index stands a byte that starts neither a header
    /// nor padding: in an uncompressed region, a compressed stream follows.
    Other(usize),
    /// The buffer ends inside an entry (header, name or data).
    Truncated(Fault),
    /// The kernel would stop with an error here.
    Fault(Fault),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scan {
    pub entries: Vec<RawEntry>,
    pub stop: Stop,
}

/// The name field length rounded as the kernel does, so that the data
/// starts 4-aligned when the header does (110 is 2 mod 4).
fn n_align(namesize: usize) -> usize {
    ((namesize + 1) & !3) + 2
}

/// Scans entries from `start`, where the kernel is between entries (its
/// "Reset" state: NULs are skipped). `buf[0]` is the start of the stream
/// the kernel counts alignment in (the image file, or a decompressed
/// stream).
pub fn scan<S: Source + ?Sized>(buf: &mut S, start: usize, want: Want) -> Scan {
    let mut entries = Vec::new();
    let mut pos = start;
    let aligned = |p: usize| p.is_multiple_of(4);
    loop {
        let next = loop {
            let chunk = buf.get(pos, 512);
            match chunk.iter().position(|&b| b != 0) {
                Some(i) => break Some((pos + i, chunk[i])),
                None if chunk.is_empty() => break None,
                None => pos += chunk.len(),
            }
        };
        let Some((p, byte)) = next else {
            return Scan {
                entries,
                stop: Stop::End,
            };
        };
        pos = p;
        if pos >= buf.len() {
            return Scan {
                entries,
                stop: Stop::End,
            };
        }
        if !aligned(pos) {
            return Scan {
                entries,
                stop: Stop::Fault(Fault {
                    offset: pos,
                    kernel: "broken padding",
                    detail: format!(
                        "byte {byte:#04x} at an offset that is not a multiple of 4, where \
                         padding or the next 4-aligned header should be"
                    ),
                }),
            };
        }
        if byte != b'0' {
            return Scan {
                entries,
                stop: Stop::Other(pos),
            };
        }
        match entry_at(buf, pos, want) {
            Ok(e) => {
                pos = e.end();
                entries.push(e);
            }
            Err(stop) => return Scan { entries, stop },
        }
    }
}

/// Parses the entry whose header starts at `pos` (a `0` byte).
fn entry_at<S: Source + ?Sized>(buf: &mut S, pos: usize, want: Want) -> Result<RawEntry, Stop> {
    let truncated = |what: &str| {
        Stop::Truncated(Fault {
            offset: pos,
            kernel: "truncated archive",
            detail: what.to_string(),
        })
    };
    let raw: [u8; HEADER_LEN] = match buf.get(pos, HEADER_LEN).try_into() {
        Ok(raw) => raw,
        Err(_) => {
            return Err(truncated(&format!(
                "the archive ends inside a header ({} of {HEADER_LEN} bytes)",
                buf.len() - pos
            )))
        }
    };
    let magic = &raw[..6];
    if magic != b"070701" && magic != b"070702" {
        let (kernel, detail) = if magic == b"070707" {
            (
                "incorrect cpio method used: use -H newc option",
                "an old binary/odc cpio header (070707); the kernel reads only newc".to_string(),
            )
        } else {
            (
                "no cpio magic",
                format!(
                    "`{}` is not a newc magic (070701 or 070702)",
                    magic.escape_ascii()
                ),
            )
        };
        return Err(Stop::Fault(Fault {
            offset: pos,
            kernel,
            detail,
        }));
    }
    let Some(header) = Header::decode(&raw) else {
        let field = (0..13)
            .find(|i| !raw[6 + 8 * i..14 + 8 * i].iter().all(u8::is_ascii_hexdigit))
            .unwrap_or(0);
        return Err(Stop::Fault(Fault {
            offset: pos + 6 + 8 * field,
            kernel: "damaged header",
            detail: format!(
                "header field {} is `{}`, not 8 hex digits",
                FIELD_NAMES[field],
                raw[6 + 8 * field..14 + 8 * field].escape_ascii()
            ),
        }));
    };
    let namesize = header.namesize as usize;
    let size = header.filesize as usize;
    let name_start = pos + HEADER_LEN;
    let data_start = name_start + n_align(namesize);
    let end = data_start.saturating_add(size);
    // The kernel skips a longer name field: its start is enough to show.
    let name_field = buf.get(name_start, namesize.min(PATH_MAX + 1));
    let nul = name_field.iter().position(|&b| b == 0);
    let name = name_field[..nul.unwrap_or(name_field.len())].to_vec();
    let terminated = namesize > 0 && name_field.len() == namesize && name_field[namesize - 1] == 0;
    let kind = header.mode & S_IFMT;
    let skip = if namesize == 0 {
        Some(Skip::EmptyNamesize)
    } else if namesize > PATH_MAX {
        Some(Skip::LongNamesize)
    } else if kind == S_IFLNK && size > PATH_MAX {
        Some(Skip::LongSymlinkTarget)
    } else if kind != S_IFLNK && kind != S_IFREG && size > 0 {
        Some(Skip::DataOnSpecial)
    } else {
        None
    };
    let link = (kind == S_IFLNK && skip.is_none()).then(|| {
        let d = buf.get(data_start, size);
        d[..d.iter().position(|&b| b == 0).unwrap_or(d.len())].to_vec()
    });
    let readable = skip.is_none() && kind == S_IFREG && size > 0;
    let sum_it = want.sums && readable && header.crc;
    let digest_it = readable
        && match want.digests {
            Digests::None => false,
            Digests::Hardlinks => header.nlink >= 2,
            Digests::All => true,
        };
    let (mut sum, mut digest) = (None, None);
    if sum_it || digest_it {
        let (s, d) = sum_and_digest(buf, data_start, end);
        sum = sum_it.then_some(s);
        digest = digest_it.then_some(d);
    }
    if !buf.reaches(end) {
        let len = buf.len();
        let shown = if name.is_empty() {
            String::new()
        } else {
            format!("`{}` ", crate::path::escape(&name))
        };
        let what = if name_start + namesize > len {
            format!(
                "the name field of {shown}(namesize {namesize}) runs past the end of the archive"
            )
        } else {
            format!(
                "the data of {shown}({size} bytes at offset {data_start}) runs past the end \
                 of the archive ({} bytes remain)",
                len.saturating_sub(data_start)
            )
        };
        return Err(truncated(&what));
    }
    if skip.is_none() && !terminated {
        return Err(Stop::Fault(Fault {
            offset: pos,
            kernel: "malformed archive",
            detail: format!(
                "the name `{}` does not end with a NUL at namesize - 1 ({namesize} bytes)",
                crate::path::escape(&name)
            ),
        }));
    }
    Ok(RawEntry {
        offset: pos,
        header,
        name,
        terminated,
        data: data_start..end,
        skip,
        link,
        sum,
        digest,
    })
}

/// The 070702 checksum and a digest of `buf[start..end]` (as much of it as
/// there is), read in chunks.
fn sum_and_digest<S: Source + ?Sized>(buf: &mut S, start: usize, end: usize) -> (u32, u64) {
    use std::hash::Hasher;
    const CHUNK: usize = 64 << 10;
    let mut sum = 0u32;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    let mut at = start;
    while at < end {
        let chunk = buf.get(at, (end - at).min(CHUNK));
        if chunk.is_empty() {
            break;
        }
        sum = sum.wrapping_add(checksum(chunk));
        h.write(chunk);
        at += chunk.len();
    }
    (sum, h.finish())
}

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

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &[u8], mode: u32, data: &[u8], namesize: Option<u32>) -> Vec<u8> {
        let namesize = namesize.unwrap_or(name.len() as u32 + 1);
        let h = Header {
            mode,
            nlink: 1,
            filesize: data.len() as u32,
            namesize,
            ..Header::default()
        };
        let mut out = Vec::new();
        crate::cpio::header::push_entry(&mut out, &h, name, data);
        out
    }

    #[test]
    fn reads_entries_padded_names_and_nuls_between() {
        let mut buf = entry(b"a", S_IFREG | 0o644, b"hello", None);
        buf.extend_from_slice(&[0; 8]);
        buf.extend(entry(b"b", S_IFREG | 0o644, b"xy", Some(4096 - 110)));
        let s = scan(&mut &buf[..], 0, Want::default());
        assert_eq!(s.stop, Stop::End);
        assert_eq!(s.entries.len(), 2);
        assert_eq!(&buf[s.entries[0].data.clone()], b"hello");
        assert_eq!(s.entries[1].name, b"b");
        assert_eq!(s.entries[1].data.start, 128 + 4096);
        assert_eq!(&buf[s.entries[1].data.clone()], b"xy");
    }

    #[test]
    fn skips_what_the_kernel_skips() {
        let mut buf = entry(b"", S_IFREG, b"", Some(0));
        buf.extend(entry(b"dev", S_IFDIR | 0o755, b"data", None));
        buf.extend(entry(b"long", S_IFREG, b"", Some(4097)));
        let s = scan(&mut &buf[..], 0, Want::default());
        let skips: Vec<_> = s.entries.iter().map(|e| e.skip).collect();
        assert_eq!(
            skips,
            [
                Some(Skip::EmptyNamesize),
                Some(Skip::DataOnSpecial),
                Some(Skip::LongNamesize)
            ]
        );
        assert_eq!(s.stop, Stop::End);
    }

    #[test]
    fn faults() {
        let mut bad = entry(b"abc", S_IFREG, b"", Some(3));
        bad[HEADER_LEN + 2] = b'c';
        match scan(&mut &bad[..], 0, Want::default()).stop {
            Stop::Fault(f) => assert_eq!(f.kernel, "malformed archive"),
            s => panic!("{s:?}"),
        }
        let mut hex = entry(b"a", S_IFREG, b"", None);
        hex[6..8].copy_from_slice(b"0x");
        match scan(&mut &hex[..], 0, Want::default()).stop {
            Stop::Fault(f) => assert_eq!((f.kernel, f.offset), ("damaged header", 6)),
            s => panic!("{s:?}"),
        }
        let mut pad = entry(b"a", S_IFREG, b"", None);
        pad.extend_from_slice(&[0, 0, 0, 1]);
        match scan(&mut &pad[..], 0, Want::default()).stop {
            Stop::Fault(f) => assert_eq!(f.kernel, "broken padding"),
            s => panic!("{s:?}"),
        }
        let short = entry(b"a", S_IFREG, b"0123456789", None);
        assert!(matches!(
            scan(&mut &short[..short.len() - 4], 0, Want::default()).stop,
            Stop::Truncated(_)
        ));
        let mut other = entry(b"a", S_IFREG, b"", None);
        other.extend_from_slice(b"\x28\xb5\x2f\xfd");
        assert_eq!(
            scan(&mut &other[..], 0, Want::default()).stop,
            Stop::Other(112)
        );
    }
}

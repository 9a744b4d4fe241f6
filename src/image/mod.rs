//! Images as the kernel reads them: a sequence of NUL padding, uncompressed
//! newc archives and compressed streams of newc archives.
//!
//! Input: an initrd file (or bytes in memory). Output: an [`Image`]: its
//! segments (each uncompressed archive up to its trailer, or each
//! compressed stream), the entries found in each, and the fault that would
//! stop the kernel, if any. `inspect`, `verify`, `diff` and
//! [`crate::extract`] work on it.
//!
//! The walk is the kernel's (init/initramfs.c, unpack_to_rootfs): NULs are
//! skipped; a `0` at a 4-aligned file offset starts a header; anything else
//! must start a compressed stream of a method it knows, whose decompressed
//! content is itself scanned from offset 0.
//!
//! Nothing is held whole: the file is read with pread through small
//! windows, a compressed stream is decoded as it is scanned and forgotten
//! behind the scan, and what a command needs of file data (checksums,
//! digests) is computed on the way ([`Want`]). [`Image::for_each_data`]
//! streams the data once more for a command that writes it out. Memory
//! stays bounded by the entries' names and headers, whatever the data
//! decompresses to, and time is linear in it.

pub mod arch;
pub mod cat;
pub mod diff;
pub mod inspect;
pub(crate) mod tree;
pub mod verify;

use std::fmt;
use std::fs::File;
use std::io::Read;
use std::path::Path;

use crate::compress::{self, Compression, Input};
use crate::cpio::reader::{self, RawEntry, Source as _, Stop};
use crate::error::{Error, Result};

pub use crate::cpio::reader::{Digests, Want};

/// One segment: an uncompressed archive (up to and including its trailer)
/// or one compressed stream.
pub struct Segment {
    pub index: usize,
    /// File offset of its first byte.
    pub offset: u64,
    /// File offset where its stream (or its last entry) ends.
    pub stream_end: u64,
    /// File offset where the next segment starts (NUL padding included).
    pub end: u64,
    pub compression: Compression,
    /// Bytes of cpio data (decompressed).
    size: u64,
    pub entries: Vec<RawEntry>,
}

impl Segment {
    /// Bytes of cpio data (decompressed).
    pub fn size(&self) -> u64 {
        self.size
    }
}

/// Where something is in an image: a file offset, or an offset in the
/// decompressed data of a compressed segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Place {
    pub segment: usize,
    /// Set for compressed segments: (method, file offset of the stream).
    pub stream: Option<(Compression, u64)>,
    /// A file offset, or an offset in the decompressed data.
    pub offset: u64,
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.stream {
            None => write!(f, "offset {}", self.offset),
            Some((c, at)) => write!(
                f,
                "segment {} ({c} stream at offset {at}), offset {} of its decompressed data",
                self.segment, self.offset
            ),
        }
    }
}

/// Where the kernel would stop unpacking, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fault {
    pub place: Place,
    /// The kernel's message, or `None` when the image may be fine for the
    /// kernel but composer cannot read it (lzo).
    pub kernel: Option<&'static str>,
    pub detail: String,
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.place, self.detail)?;
        if let Some(k) = self.kernel {
            write!(f, " (the kernel: \"{k}\")")?;
        }
        Ok(())
    }
}

/// Where the image's bytes are.
enum Backing {
    File(File, u64),
    Memory(Vec<u8>),
}

impl Backing {
    fn len(&self) -> u64 {
        match self {
            Backing::File(_, len) => *len,
            Backing::Memory(v) => v.len() as u64,
        }
    }

    /// The compressed input from file offset `at` to the end.
    fn input(&self, at: u64) -> Input<'_> {
        match self {
            Backing::File(f, _) => Input::file(f, at),
            Backing::Memory(v) => Input::slice(&v[(at as usize).min(v.len())..]),
        }
    }
}

/// How compressed segments are read: decoded as they are scanned, or (for
/// the tests that check the two agree) decoded whole first.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Decode {
    Streaming,
    #[cfg(test)]
    Whole,
}

pub struct Image {
    /// The name used in messages.
    pub name: String,
    backing: Backing,
    pub segments: Vec<Segment>,
    /// What stops the kernel (and this reader), if anything.
    pub fault: Option<Fault>,
    /// When the file is a unified kernel image: what it holds besides the
    /// initrd (this image), whose offsets are then those inside its `.initrd`.
    pub uki: Option<crate::uki::Info>,
}

impl Image {
    /// Reads and parses the image at `path`, computing what `want` asks.
    pub fn open(path: &Path, want: Want) -> Result<Image> {
        let name = path.display().to_string();
        let file = File::open(path).map_err(|e| {
            Error::usage(format!("cannot open the image `{name}`: {e}"))
                .with_hint("check the path of the initrd")
        })?;
        Image::from_file(file, name, want)
    }

    /// Parses an open image file (from its start).
    pub fn from_file(file: File, name: String, want: Want) -> Result<Image> {
        let meta = file.metadata().map_err(|e| Error::io(&name, e))?;
        if meta.is_dir() {
            return Err(Error::usage(format!(
                "`{name}` is a directory, not an image"
            )));
        }
        let backing = if meta.is_file() {
            let mut head = [0u8; 2];
            let got = crate::io::read_full_at(&file, &mut head, 0).unwrap_or(0);
            if crate::uki::looks_like_pe(&head[..got]) {
                let (info, initrd) = crate::uki::read(&file, meta.len(), &name)?;
                let mut img = Image::parse(
                    format!("{name} (.initrd)"),
                    Backing::Memory(initrd),
                    want,
                    Decode::Streaming,
                );
                img.uki = Some(info);
                return Ok(img);
            }
            Backing::File(file, meta.len())
        } else {
            // A pipe or a device: read it whole (the commands copy standard
            // input into a file first).
            let mut v = Vec::new();
            (&file)
                .read_to_end(&mut v)
                .map_err(|e| Error::io(&name, e))?;
            Backing::Memory(v)
        };
        Ok(Image::parse(name, backing, want, Decode::Streaming))
    }

    /// Parses an image held in memory, computing everything [`Want`] can.
    pub fn from_bytes(name: impl Into<String>, bytes: Vec<u8>) -> Image {
        Image::from_bytes_with(name, bytes, Want::all())
    }

    /// [`Image::from_bytes`] computing what `want` asks.
    pub fn from_bytes_with(name: impl Into<String>, bytes: Vec<u8>, want: Want) -> Image {
        Image::parse(name.into(), Backing::Memory(bytes), want, Decode::Streaming)
    }

    /// The image's size in bytes.
    pub fn len(&self) -> u64 {
        self.backing.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Up to `n` bytes of the file from `offset`.
    pub fn read_at(&self, offset: u64, n: usize) -> Vec<u8> {
        match &self.backing {
            Backing::File(f, _) => {
                let mut buf = vec![0u8; n];
                let got = crate::io::read_full_at(f, &mut buf, offset).unwrap_or(0);
                buf.truncate(got);
                buf
            }
            Backing::Memory(v) => {
                let start = (offset as usize).min(v.len());
                v[start..v.len().min(start + n)].to_vec()
            }
        }
    }

    /// Where byte `offset` of a segment's data is.
    pub fn place(&self, seg: &Segment, offset: usize) -> Place {
        Place {
            segment: seg.index,
            stream: (seg.compression != Compression::None).then_some((seg.compression, seg.offset)),
            offset: offset as u64,
        }
    }

    /// Every entry with its segment, trailers left out, in archive order.
    pub fn entries(&self) -> impl Iterator<Item = (&Segment, &RawEntry)> {
        self.segments
            .iter()
            .flat_map(|s| s.entries.iter().map(move |e| (s, e)))
            .filter(|(_, e)| !e.is_trailer())
    }

    /// The fault as a user error naming the image, for commands that
    /// cannot go on.
    pub fn fault_error(&self) -> Option<Error> {
        self.fault.as_ref().map(|f| {
            Error::usage(format!("{}: {f}", self.name))
                .with_hint("`composer verify IMAGE` lists every problem it finds")
        })
    }

    /// Reads the image once more and hands `f` the data of every regular
    /// file entry that has any (the kernel's readable ones), in archive
    /// order, as `(segment index, entry index, data)`. A compressed segment
    /// is decoded once, forward.
    pub fn for_each_data(
        &self,
        mut f: impl FnMut(usize, usize, &mut dyn Read) -> Result<()>,
    ) -> Result<()> {
        let changed = |e: std::io::Error| {
            Error::usage(format!(
                "{}: cannot read the image a second time: {e}",
                self.name
            ))
            .with_hint("the image changed while composer read it")
        };
        for seg in &self.segments {
            let wanted = |e: &RawEntry| e.skip.is_none() && e.is_regular() && !e.data.is_empty();
            if seg.compression == Compression::None {
                for (i, e) in seg.entries.iter().enumerate().filter(|(_, e)| wanted(e)) {
                    let mut data = self.range(e.data.start as u64, e.data.len() as u64);
                    f(seg.index, i, &mut data)?;
                }
                continue;
            }
            let (mut stream, _) = compress::stream(seg.compression, self.backing.input(seg.offset))
                .map_err(|e| changed(std::io::Error::other(e.to_string())))?;
            let mut pos = 0usize;
            for (i, e) in seg.entries.iter().enumerate().filter(|(_, e)| wanted(e)) {
                let skip = (e.data.start - pos) as u64;
                let got = std::io::copy(&mut (&mut stream).take(skip), &mut std::io::sink())
                    .map_err(changed)?;
                if got < skip {
                    return Err(changed(std::io::ErrorKind::UnexpectedEof.into()));
                }
                let mut data = (&mut stream).take(e.data.len() as u64);
                f(seg.index, i, &mut data)?;
                std::io::copy(&mut data, &mut std::io::sink()).map_err(changed)?;
                pos = e.data.end;
            }
        }
        Ok(())
    }

    /// Bytes `offset..offset + len` of the file, as a reader.
    fn range(&self, offset: u64, len: u64) -> Box<dyn Read + '_> {
        match &self.backing {
            Backing::File(f, _) => Box::new(FileRange {
                file: f,
                at: offset,
                end: offset + len,
            }),
            Backing::Memory(v) => {
                let start = (offset as usize).min(v.len());
                let end = (start + len as usize).min(v.len());
                Box::new(&v[start..end])
            }
        }
    }

    fn parse(name: String, backing: Backing, want: Want, decode: Decode) -> Image {
        let mut img = Image {
            name,
            backing,
            segments: Vec::new(),
            fault: None,
            uki: None,
        };
        let (segments, fault) = walk(&img.backing, want, decode);
        img.segments = segments;
        img.fault = fault;
        img
    }
}

/// A range of a file read with pread.
struct FileRange<'f> {
    file: &'f File,
    at: u64,
    end: u64,
}

impl Read for FileRange<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = (buf.len() as u64).min(self.end - self.at) as usize;
        if n == 0 {
            return Ok(0);
        }
        let got = std::os::unix::fs::FileExt::read_at(self.file, &mut buf[..n], self.at)?;
        self.at += got as u64;
        Ok(got)
    }
}

/// The kernel's walk over the whole file.
fn walk(backing: &Backing, want: Want, decode: Decode) -> (Vec<Segment>, Option<Fault>) {
    match backing {
        Backing::File(f, len) => {
            let mut src = reader::FileSource::new(f, *len as usize);
            let r = walk_in(&mut src, backing, want, decode);
            match src.error.take() {
                Some(e) => {
                    let (segs, _) = r;
                    let fault = Fault {
                        place: Place {
                            segment: segs.len(),
                            stream: None,
                            offset: 0,
                        },
                        kernel: None,
                        detail: format!("cannot read the image: {e}"),
                    };
                    (segs, Some(fault))
                }
                None => r,
            }
        }
        Backing::Memory(v) => walk_in(&mut &v[..], backing, want, decode),
    }
}

fn walk_in<S: reader::Source + ?Sized>(
    src: &mut S,
    backing: &Backing,
    want: Want,
    decode: Decode,
) -> (Vec<Segment>, Option<Fault>) {
    let len = backing.len() as usize;
    let mut segments: Vec<Segment> = Vec::new();
    let mut fault = None;
    let mut pos = 0usize;
    let new_segment = |index: usize, offset: usize| Segment {
        index,
        offset: offset as u64,
        stream_end: offset as u64,
        end: offset as u64,
        compression: Compression::None,
        size: 0,
        entries: Vec::new(),
    };
    while pos < len {
        // NULs between segments, a chunk at a time.
        let chunk = src.get(pos, 4096);
        if chunk.is_empty() {
            break;
        }
        match chunk.iter().position(|&b| b != 0) {
            None => {
                pos += chunk.len();
                continue;
            }
            Some(i) => pos += i,
        }
        let byte = src.get(pos, 1)[0];
        if byte != b'0' || !pos.is_multiple_of(4) {
            continue_compressed(
                src,
                backing,
                &mut pos,
                &mut segments,
                &mut fault,
                want,
                decode,
            );
            if fault.is_some() {
                break;
            }
            continue;
        }
        // Uncompressed archives, one segment per trailer.
        let scan = reader::scan(src, pos, want);
        let mut open: Option<Segment> = None;
        for e in scan.entries {
            let seg = open.get_or_insert_with(|| new_segment(segments.len(), e.offset));
            let trailer = e.is_trailer();
            seg.stream_end = e.end() as u64;
            seg.size = seg.stream_end - seg.offset;
            seg.entries.push(e);
            if trailer {
                segments.extend(open.take());
            }
        }
        match scan.stop {
            Stop::End => {
                segments.extend(open.take());
                pos = len;
            }
            // A compressed stream follows.
            Stop::Other(p) => {
                segments.extend(open.take());
                pos = p;
            }
            Stop::Truncated(f) | Stop::Fault(f) => {
                let seg = open
                    .take()
                    .unwrap_or_else(|| new_segment(segments.len(), f.offset));
                fault = Some(Fault {
                    place: Place {
                        segment: seg.index,
                        stream: None,
                        offset: f.offset as u64,
                    },
                    kernel: Some(f.kernel)
                        .filter(|k| !["truncated archive", "read error"].contains(k)),
                    detail: f.detail,
                });
                segments.push(seg);
                break;
            }
        }
    }
    let total = len as u64;
    let starts: Vec<u64> = segments.iter().skip(1).map(|s| s.offset).collect();
    for (s, next) in segments.iter_mut().zip(starts.into_iter().chain([total])) {
        s.end = next.max(s.stream_end);
    }
    (segments, fault)
}

/// Reads the compressed stream at `pos` (a byte that is neither NUL nor a
/// 4-aligned `0`) as a segment, and moves `pos` past it.
fn continue_compressed<S: reader::Source + ?Sized>(
    src: &mut S,
    backing: &Backing,
    pos: &mut usize,
    segments: &mut Vec<Segment>,
    fault: &mut Option<Fault>,
    want: Want,
    decode: Decode,
) {
    let at = *pos;
    let index = segments.len();
    let file_place = Place {
        segment: index,
        stream: None,
        offset: at as u64,
    };
    let magic = src.get(at, 4).to_vec();
    let Some(method) = Compression::detect(&magic) else {
        *fault = Some(Fault {
            place: file_place,
            kernel: Some("invalid magic at start of compressed archive"),
            detail: format!(
                "bytes `{}` start neither a newc header at a 4-aligned offset nor a \
                 compressed stream the kernel knows",
                hex(&magic)
            ),
        });
        return;
    };
    let failed = |e: compress::DecodeError| Fault {
        place: file_place,
        kernel: if method == Compression::Lzo {
            None
        } else {
            Some("decompressor failed")
        },
        detail: format!("{method} stream: {e}"),
    };
    // The scan, the byte it stopped at (if any), the data's length, the
    // stream's length.
    let (scan, junk, size, consumed) = match decode {
        #[cfg(test)]
        Decode::Whole => {
            let Backing::Memory(v) = backing else {
                unreachable!("whole decodes are for images in memory")
            };
            let decoded = match compress::decode(method, &v[at..], usize::MAX) {
                Ok(d) => d,
                Err(e) => {
                    *fault = Some(failed(e));
                    return;
                }
            };
            let scan = reader::scan(&mut &decoded.data[..], 0, want);
            let junk = match scan.stop {
                Stop::Other(p) => decoded.data[p],
                _ => 0,
            };
            (scan, junk, decoded.data.len(), decoded.consumed)
        }
        Decode::Streaming => {
            let (stream, used) = match compress::stream(method, backing.input(at as u64)) {
                Ok(s) => s,
                Err(e) => {
                    *fault = Some(failed(e));
                    return;
                }
            };
            let mut src = reader::StreamSource::new(stream);
            let scan = reader::scan(&mut src, 0, want);
            let junk = match scan.stop {
                Stop::Other(p) => src.get(p, 1).first().copied().unwrap_or(0),
                _ => 0,
            };
            if scan.stop != Stop::End {
                // A full decode reports a damaged stream before what its
                // damaged data looks like: read to the end to know.
                src.reaches(usize::MAX);
            }
            if let Some(e) = src.error.take() {
                *fault = Some(failed(compress::DecodeError {
                    produced: src.produced(),
                    message: e.to_string(),
                }));
                return;
            }
            let len = src.produced();
            drop(src);
            let consumed = used.get();
            if consumed == 0 {
                *fault = Some(failed(compress::DecodeError {
                    produced: 0,
                    message: "the compressed stream is empty".into(),
                }));
                return;
            }
            (scan, junk, len, consumed)
        }
    };
    let place = |offset: usize| Place {
        segment: index,
        stream: Some((method, at as u64)),
        offset: offset as u64,
    };
    let problem = match scan.stop {
        Stop::End => None,
        Stop::Other(p) => Some(Fault {
            place: place(p),
            kernel: Some("junk within compressed archive"),
            detail: format!("byte {junk:#04x} where a header or NUL padding should be"),
        }),
        Stop::Truncated(f) => Some(Fault {
            place: place(f.offset),
            kernel: Some("junk at the end of compressed archive"),
            detail: f.detail,
        }),
        Stop::Fault(f) => Some(Fault {
            place: place(f.offset),
            kernel: Some(f.kernel),
            detail: f.detail,
        }),
    };
    segments.push(Segment {
        index,
        offset: at as u64,
        stream_end: (at + consumed) as u64,
        end: (at + consumed) as u64,
        compression: method,
        size: size as u64,
        entries: scan.entries,
    });
    *pos = at + consumed;
    *fault = problem;
}

fn hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compress::EncodeOptions;
    use crate::cpio::Header;

    fn archive(names: &[&str]) -> Vec<u8> {
        let mut out = Vec::new();
        for (i, n) in names.iter().enumerate() {
            entry(&mut out, i as u32 + 1, 0o100644, n.as_bytes(), b"abc");
        }
        entry(&mut out, 0, 0, b"TRAILER!!!", b"");
        while out.len() % 512 != 0 {
            out.push(0);
        }
        out
    }

    #[test]
    fn segments_of_every_kind() {
        let mut img = archive(&["early"]);
        for m in [Compression::Gzip, Compression::Zstd, Compression::Lz4] {
            let opts = EncodeOptions {
                method: m,
                level: None,
                threads: 1,
            };
            let a = archive(&[m.name(), "x"]);
            crate::compress::encode(&opts, &mut &a[..], &mut img).unwrap();
            // lz4 must be followed by NULs (or the end); pad to 4.
            img.extend_from_slice(&[0; 4]);
            while !img.len().is_multiple_of(4) {
                img.push(0);
            }
        }
        img.extend(archive(&["late"]));
        let image = Image::from_bytes("t", img);
        assert_eq!(image.fault, None);
        let kinds: Vec<_> = image.segments.iter().map(|s| s.compression).collect();
        assert_eq!(
            kinds,
            [
                Compression::None,
                Compression::Gzip,
                Compression::Zstd,
                Compression::Lz4,
                Compression::None
            ]
        );
        let names: Vec<_> = image.entries().map(|(_, e)| e.name.clone()).collect();
        assert_eq!(names.len(), 8);
        assert_eq!(image.segments.last().unwrap().end, image.len());
    }

    #[test]
    fn junk_after_a_compressed_segment() {
        let mut img = Vec::new();
        let opts = EncodeOptions {
            method: Compression::Gzip,
            level: None,
            threads: 1,
        };
        let a = archive(&["a"]);
        crate::compress::encode(&opts, &mut &a[..], &mut img).unwrap();
        img.extend_from_slice(b"junk");
        let image = Image::from_bytes("t", img);
        let f = image.fault.expect("fault");
        assert_eq!(
            f.kernel,
            Some("invalid magic at start of compressed archive")
        );
        assert_eq!(image.segments.len(), 1);
    }

    fn entry(out: &mut Vec<u8>, ino: u32, mode: u32, name: &[u8], data: &[u8]) {
        let h = Header {
            ino,
            mode,
            nlink: 1,
            filesize: data.len() as u32,
            namesize: name.len() as u32 + 1,
            ..Header::default()
        };
        crate::cpio::header::push_entry(out, &h, name, data);
    }

    /// An archive larger than the listing window, with names and data that
    /// straddle its chunks, long names, symlinks and a large file.
    fn big_archive() -> Vec<u8> {
        let mut out = Vec::new();
        let mut x: u32 = 1;
        for i in 0..3000u32 {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            let name = format!("d/{}{i}", "n".repeat((x >> 8) as usize % 300));
            let data: Vec<u8> = (0..(x >> 4) % 1500).map(|k| (k ^ i) as u8).collect();
            if i % 7 == 0 {
                let target = format!("../t/{}", "x".repeat(i as usize % 50));
                entry(
                    &mut out,
                    i + 1,
                    0o120777,
                    name.as_bytes(),
                    target.as_bytes(),
                );
            } else {
                entry(&mut out, i + 1, 0o100644, name.as_bytes(), &data);
            }
        }
        entry(
            &mut out,
            9000,
            0o100644,
            "l".repeat(4000).as_bytes(),
            b"long name",
        );
        entry(&mut out, 9001, 0o100644, b"big", &vec![7u8; 1 << 20]);
        entry(&mut out, 0, 0, b"TRAILER!!!", b"");
        while out.len() % 512 != 0 {
            out.push(0);
        }
        out
    }

    fn compressed(method: Compression, a: &[u8]) -> Vec<u8> {
        let opts = EncodeOptions {
            method,
            level: None,
            threads: 1,
        };
        let mut out = Vec::new();
        crate::compress::encode(&opts, &mut &a[..], &mut out).unwrap();
        out
    }

    /// The image read from a temporary file (pread, not memory).
    fn on_disk(bytes: &[u8]) -> Image {
        let mut f = tempfile::tempfile().unwrap();
        std::io::Write::write_all(&mut f, bytes).unwrap();
        Image::from_file(f, "t".into(), Want::all()).unwrap()
    }

    /// What a reader of the image sees: segments, entries, the fault.
    fn seen(image: &Image) -> String {
        let mut s = String::new();
        for seg in &image.segments {
            s += &format!(
                "{} {} {} {} {} {}\n",
                seg.index,
                seg.offset,
                seg.stream_end,
                seg.end,
                seg.compression,
                seg.size()
            );
            for e in &seg.entries {
                s += &format!("  {e:?}\n");
            }
        }
        s + &format!("{:?}", image.fault)
    }

    #[test]
    fn a_listing_reads_what_a_full_decode_reads() {
        let big = big_archive();
        let mut cases: Vec<(String, Vec<u8>)> = Vec::new();
        for m in [
            Compression::Gzip,
            Compression::Bzip2,
            Compression::Xz,
            Compression::Lzma,
            Compression::Zstd,
            Compression::Lz4,
        ] {
            let c = compressed(m, &big);
            let mut img = archive(&["early"]);
            img.extend_from_slice(&c);
            img.extend_from_slice(&[0; 8]);
            while !img.len().is_multiple_of(4) {
                img.push(0);
            }
            img.extend(archive(&["late"]));
            cases.push((format!("{m}"), img));

            // A truncated stream, and one with a damaged middle.
            cases.push((format!("{m} cut"), c[..c.len() / 2].to_vec()));
            let mut bad = c.clone();
            let mid = bad.len() / 2;
            for b in &mut bad[mid..mid + 16] {
                *b ^= 0x5a;
            }
            cases.push((format!("{m} damaged"), bad));

            // Junk, broken padding and a cut archive inside the stream.
            let mut junk = archive(&["a"]);
            junk.extend_from_slice(b"junk");
            cases.push((format!("{m} junk"), compressed(m, &junk)));
            let mut pad = archive(&["a"]);
            pad.extend_from_slice(b"\0x");
            cases.push((format!("{m} padding"), compressed(m, &pad)));
            cases.push((format!("{m} short"), compressed(m, &big[..300_000])));
        }
        for (what, img) in cases {
            let full = Image::parse(
                "t".into(),
                Backing::Memory(img.clone()),
                Want::all(),
                Decode::Whole,
            );
            let listing = Image::from_bytes("t", img.clone());
            let on_disk = on_disk(&img);
            assert!(
                seen(&listing) == seen(&on_disk),
                "{what}: a file reads as memory does"
            );
            let (a, b) = (seen(&full), seen(&listing));
            if let Some((x, y)) = a.lines().zip(b.lines()).find(|(x, y)| x != y) {
                let cut = |l: &str| l.chars().take(300).collect::<String>();
                panic!(
                    "{what}: a full decode sees\n{}\na listing\n{}",
                    cut(x),
                    cut(y)
                );
            }
            assert_eq!(a.lines().count(), b.lines().count(), "{what}");
            let want = match what.split_once(' ').map(|(_, case)| case) {
                None => None,
                Some("cut" | "damaged") => Some("decompressor failed"),
                Some("junk") => Some("junk within compressed archive"),
                Some("padding") => Some("broken padding"),
                Some(_) => Some("junk at the end of compressed archive"),
            };
            assert_eq!(
                listing.fault.as_ref().and_then(|f| f.kernel),
                want,
                "{what}"
            );
            if !what.contains(' ') {
                assert_eq!(full.fault, None, "{what}");
                let links = full.entries().filter(|(_, e)| e.link.is_some()).count();
                assert_eq!(links, 3000 / 7 + 1, "{what}");
            }
        }
    }

    /// Random damage anywhere in an image of several segments: a listing
    /// and a full decode never panic and always agree.
    #[test]
    fn damaged_images_list_as_they_decode() {
        let mut small = Vec::new();
        for i in 0..40u32 {
            let mode = if i % 5 == 0 { 0o120777 } else { 0o100644 };
            let data = vec![b'a' + (i % 26) as u8; (i as usize * 37) % 700];
            entry(&mut small, i + 1, mode, format!("f{i}").as_bytes(), &data);
        }
        entry(&mut small, 0, 0, b"TRAILER!!!", b"");
        let mut img = archive(&["early"]);
        for m in [
            Compression::Zstd,
            Compression::Gzip,
            Compression::Xz,
            Compression::Lz4,
        ] {
            img.extend(compressed(m, &small));
            img.extend_from_slice(&[0; 4]);
            while !img.len().is_multiple_of(4) {
                img.push(0);
            }
        }
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut faults = 0;
        for round in 0..400 {
            let mut bad = img.clone();
            for _ in 0..1 + round % 4 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let at = (x >> 16) as usize % bad.len();
                bad[at] = match round % 3 {
                    0 => 0,
                    1 => b'0',
                    _ => (x >> 8) as u8,
                };
            }
            if round % 7 == 0 {
                bad.truncate((x >> 24) as usize % bad.len());
            }
            let full = Image::parse(
                "t".into(),
                Backing::Memory(bad.clone()),
                Want::all(),
                Decode::Whole,
            );
            let listing = Image::from_bytes("t", bad);
            assert!(seen(&full) == seen(&listing), "round {round}");
            faults += full.fault.is_some() as usize;
        }
        assert!(
            (100..400).contains(&faults),
            "{faults} damaged images fault"
        );
    }

    #[test]
    fn escapes_names() {
        assert_eq!(
            crate::path::escape(b"a\xffb\\c\nd\xc3\xbc"),
            "a\\xffb\\\\c\\x0ad\u{fc}"
        );
    }
}

//! Images as the kernel reads them: a sequence of NUL padding, uncompressed
//! newc archives and compressed streams of newc archives.
//!
//! Input: the bytes of an initrd file. Output: an [`Image`]: its segments
//! (each uncompressed archive up to its trailer, or each compressed stream),
//! the entries found in each, and the fault that would stop the kernel, if
//! any. `inspect`, `verify`, `diff` and [`crate::extract`] work on it.
//!
//! The walk is the kernel's (init/initramfs.c, unpack_to_rootfs): NULs are
//! skipped; a `0` at a 4-aligned file offset starts a header; anything else
//! must start a compressed stream of a method it knows, whose decompressed
//! content is itself scanned from offset 0.

pub mod diff;
pub mod inspect;
pub mod verify;

use std::fmt;
use std::io::Read;
use std::ops::Deref;
use std::path::Path;

use crate::compress::{self, Compression};
use crate::cpio::reader::{self, RawEntry, Source as _, Stop};
use crate::error::{Error, Result};

/// A read-only private mapping of a whole file.
struct Mapped {
    ptr: *mut std::ffi::c_void,
    len: usize,
}

impl Mapped {
    fn new(file: &std::fs::File, len: usize) -> std::io::Result<Mapped> {
        // SAFETY: a fresh private, read-only mapping of `len` bytes of an
        // open file; it is unmapped only in Drop. The bytes can change (or
        // vanish, raising SIGBUS) if another process truncates the file
        // while we read it: the same contract as every mmap-based reader.
        let ptr = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                len,
                rustix::mm::ProtFlags::READ,
                rustix::mm::MapFlags::PRIVATE,
                file,
                0,
            )
        }?;
        Ok(Mapped { ptr, len })
    }
}

impl Deref for Mapped {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: the mapping covers `len` readable bytes for our lifetime.
        unsafe { std::slice::from_raw_parts(self.ptr as *const u8, self.len) }
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: `ptr` and `len` are exactly what mmap returned.
        let _ = unsafe { rustix::mm::munmap(self.ptr, self.len) };
    }
}

enum Bytes {
    /// A regular file: headers are read with pread (a listing then reads
    /// no data pages), data through the mapping.
    Mapped(Mapped, std::fs::File),
    Owned(Vec<u8>),
}

impl Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Mapped(m, _) => m,
            Bytes::Owned(v) => v,
        }
    }
}

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
    data: Held,
    pub entries: Vec<RawEntry>,
}

/// Where a segment's bytes are.
enum Held {
    /// In the image file: an uncompressed segment, whose entry offsets are
    /// file offsets.
    File,
    /// Decompressed in memory.
    Decoded(Vec<u8>),
    /// Decompressed once to list it, and not kept: `len` bytes.
    Streamed(usize),
}

impl Segment {
    /// Bytes of cpio data (decompressed).
    pub fn size(&self) -> u64 {
        match &self.data {
            Held::File => self.stream_end - self.offset,
            Held::Decoded(d) => d.len() as u64,
            Held::Streamed(len) => *len as u64,
        }
    }
}

/// What opening an image keeps of its compressed segments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keep {
    /// Their decompressed data, for commands that read file contents.
    Data,
    /// Headers, names and symlink targets only: each stream is decoded
    /// once, in a small window, while its headers are read.
    Listing,
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

pub struct Image {
    /// The name used in messages.
    pub name: String,
    bytes: Bytes,
    pub segments: Vec<Segment>,
    /// What stops the kernel (and this reader), if anything.
    pub fault: Option<Fault>,
}

impl Image {
    /// Reads and parses the image at `path`, keeping the decompressed data
    /// of compressed segments.
    pub fn open(path: &Path) -> Result<Image> {
        Image::open_with(path, Keep::Data)
    }

    /// Reads and parses the image at `path`; `keep` says whether
    /// [`Image::data`] of compressed segments will be wanted.
    pub fn open_with(path: &Path, keep: Keep) -> Result<Image> {
        let name = path.display().to_string();
        let bytes = {
            let file = std::fs::File::open(path).map_err(|e| {
                Error::usage(format!("cannot open the image `{name}`: {e}"))
                    .with_hint("check the path of the initrd")
            })?;
            let meta = file.metadata().map_err(|e| Error::io(path, e))?;
            if meta.is_dir() {
                return Err(Error::usage(format!(
                    "`{name}` is a directory, not an image"
                )));
            }
            let len = meta.len() as usize;
            if meta.is_file() && len > 0 {
                let map = Mapped::new(&file, len).map_err(|e| Error::io(path, e))?;
                Bytes::Mapped(map, file)
            } else {
                let mut v = Vec::new();
                (&file)
                    .read_to_end(&mut v)
                    .map_err(|e| Error::io(path, e))?;
                Bytes::Owned(v)
            }
        };
        Ok(Image::parse(name, bytes, keep))
    }

    /// Parses an image held in memory.
    pub fn from_bytes(name: impl Into<String>, bytes: Vec<u8>) -> Image {
        Image::from_bytes_with(name, bytes, Keep::Data)
    }

    /// [`Image::from_bytes`] keeping what `keep` says.
    pub fn from_bytes_with(name: impl Into<String>, bytes: Vec<u8>, keep: Keep) -> Image {
        Image::parse(name.into(), Bytes::Owned(bytes), keep)
    }

    /// The whole file.
    pub fn file_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The buffer a segment's entries index: the decompressed data, or the
    /// whole file for an uncompressed segment.
    ///
    /// # Panics
    ///
    /// For a compressed segment of an image opened with [`Keep::Listing`].
    pub fn data<'a>(&'a self, seg: &'a Segment) -> &'a [u8] {
        match &seg.data {
            Held::File => &self.bytes,
            Held::Decoded(d) => d,
            Held::Streamed(_) => panic!("the image was opened for a listing: no data kept"),
        }
    }

    /// Where byte `offset` of a segment's buffer is.
    pub fn place(&self, seg: &Segment, offset: usize) -> Place {
        Place {
            segment: seg.index,
            stream: (!matches!(seg.data, Held::File)).then_some((seg.compression, seg.offset)),
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

    fn parse(name: String, bytes: Bytes, keep: Keep) -> Image {
        let mut img = Image {
            name,
            bytes,
            segments: Vec::new(),
            fault: None,
        };
        let buf: &[u8] = &img.bytes;
        let mut segments: Vec<Segment> = Vec::new();
        let mut fault = None;
        let mut pos = 0usize;
        let new_segment = |index: usize, offset: usize| Segment {
            index,
            offset: offset as u64,
            stream_end: offset as u64,
            end: offset as u64,
            compression: Compression::None,
            data: Held::File,
            entries: Vec::new(),
        };
        while pos < buf.len() {
            if buf[pos] == 0 {
                pos += 1;
                continue;
            }
            if buf[pos] != b'0' || !pos.is_multiple_of(4) {
                continue_compressed(buf, &mut pos, &mut segments, &mut fault, keep);
                if fault.is_some() {
                    break;
                }
                continue;
            }
            // Uncompressed archives, one segment per trailer.
            let scan = match &img.bytes {
                Bytes::Mapped(_, file) => {
                    let mut src = reader::FileSource::new(file, buf.len());
                    let mut scan = reader::scan(&mut src, pos);
                    if let Some(e) = src.error {
                        scan.stop = Stop::Fault(reader::Fault {
                            offset: pos,
                            kernel: "read error",
                            detail: format!("cannot read the image: {e}"),
                        });
                    }
                    scan
                }
                Bytes::Owned(v) => reader::scan(&mut &v[..], pos),
            };
            let mut open: Option<Segment> = None;
            for e in scan.entries {
                let seg = open.get_or_insert_with(|| new_segment(segments.len(), e.offset));
                let trailer = e.is_trailer();
                seg.stream_end = e.end() as u64;
                seg.entries.push(e);
                if trailer {
                    segments.extend(open.take());
                }
            }
            match scan.stop {
                Stop::End => {
                    segments.extend(open.take());
                    pos = buf.len();
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
        let total = buf.len() as u64;
        let starts: Vec<u64> = segments.iter().skip(1).map(|s| s.offset).collect();
        for (s, next) in segments.iter_mut().zip(starts.into_iter().chain([total])) {
            s.end = next.max(s.stream_end);
        }
        img.segments = segments;
        img.fault = fault;
        img
    }
}

/// Reads the compressed stream at `pos` (a byte that is neither NUL nor a
/// 4-aligned `0`) as a segment, and moves `pos` past it.
fn continue_compressed(
    buf: &[u8],
    pos: &mut usize,
    segments: &mut Vec<Segment>,
    fault: &mut Option<Fault>,
    keep: Keep,
) {
    let at = *pos;
    let index = segments.len();
    let file_place = Place {
        segment: index,
        stream: None,
        offset: at as u64,
    };
    let Some(method) = Compression::detect(&buf[at..]) else {
        let shown = &buf[at..buf.len().min(at + 4)];
        *fault = Some(Fault {
            place: file_place,
            kernel: Some("invalid magic at start of compressed archive"),
            detail: format!(
                "bytes `{}` start neither a newc header at a 4-aligned offset nor a \
                 compressed stream the kernel knows",
                hex(shown)
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
    // The scan, the byte it stopped at (if any), the data, the stream's length.
    let (scan, junk, data, consumed) = match keep {
        Keep::Data => {
            let decoded = match compress::decode(method, &buf[at..]) {
                Ok(d) => d,
                Err(e) => {
                    *fault = Some(failed(e));
                    return;
                }
            };
            let scan = reader::scan(&mut &decoded.data[..], 0);
            let junk = match scan.stop {
                Stop::Other(p) => decoded.data[p],
                _ => 0,
            };
            (scan, junk, Held::Decoded(decoded.data), decoded.consumed)
        }
        Keep::Listing => {
            let (stream, used) = match compress::stream(method, &buf[at..]) {
                Ok(s) => s,
                Err(e) => {
                    *fault = Some(failed(e));
                    return;
                }
            };
            let mut src = reader::StreamSource::new(stream);
            let scan = reader::scan(&mut src, 0);
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
            (scan, junk, Held::Streamed(len), consumed)
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
        data,
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
        assert_eq!(
            image.segments.last().unwrap().end,
            image.file_bytes().len() as u64
        );
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
            let full = Image::from_bytes("t", img.clone());
            let listing = Image::parse("t".into(), Bytes::Owned(img), Keep::Listing);
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
            let full = Image::from_bytes("t", bad.clone());
            let listing = Image::parse("t".into(), Bytes::Owned(bad), Keep::Listing);
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

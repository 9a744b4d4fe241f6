//! Compression, in process: every method the kernel's initramfs unpacker
//! knows, detected by the same two magic bytes it looks at.
//!
//! Decoding reads exactly one compressed stream from the start of its
//! [`Input`] (a byte slice, or a range of a file read with pread) and
//! reports how many input bytes it used, because an initrd is a
//! concatenation: whatever follows the stream (NULs, another archive,
//! another stream) is the next segment. Decoders hand out their output as
//! it is read ([`stream`]); [`decode`] collects it, up to a limit. Encoding writes one stream, with
//! the options the kernel's decoders need (zstd windows of at most 8 MiB,
//! xz with CRC32 checks, lz4 in the legacy format of 8 MiB blocks).
//!
//! lzo is recognised but neither decoded nor written: no well-kept crate
//! reads the lzop container the kernel expects.

use std::cell::Cell;
use std::fmt;
use std::io::{self, BufRead, Read, Write};
use std::rc::Rc;

/// A compression method, as named in manifests and reports.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    None,
    Gzip,
    Bzip2,
    Lzma,
    Xz,
    /// Recognised in images, never written.
    #[schemars(skip)]
    Lzo,
    Lz4,
    Zstd,
}

/// The legacy lz4 format (`lz4 -l`): this magic, then blocks of at most
/// 8 MiB of input, each as a little-endian compressed length and the block.
pub const LZ4_LEGACY_MAGIC: u32 = 0x184C_2102;
pub const LZ4_LEGACY_BLOCK: usize = 8 << 20;
/// The largest zstd window the kernel's decoder accepts (log2).
pub const ZSTD_MAX_WINDOW_LOG: u32 = 23;

impl Compression {
    pub const ALL: [Compression; 8] = [
        Compression::None,
        Compression::Gzip,
        Compression::Bzip2,
        Compression::Lzma,
        Compression::Xz,
        Compression::Lzo,
        Compression::Lz4,
        Compression::Zstd,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Bzip2 => "bzip2",
            Compression::Lzma => "lzma",
            Compression::Xz => "xz",
            Compression::Lzo => "lzo",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
        }
    }

    pub fn from_name(name: &str) -> Option<Compression> {
        Compression::ALL.into_iter().find(|c| c.name() == name)
    }

    /// The method whose magic starts `bytes`, by the kernel's table
    /// (lib/decompress.c): two bytes decide.
    pub fn detect(bytes: &[u8]) -> Option<Compression> {
        match bytes.get(..2)? {
            [0x1f, 0x8b] | [0x1f, 0x9e] => Some(Compression::Gzip),
            [0x42, 0x5a] => Some(Compression::Bzip2),
            [0x5d, 0x00] => Some(Compression::Lzma),
            [0xfd, 0x37] => Some(Compression::Xz),
            [0x89, 0x4c] => Some(Compression::Lzo),
            [0x02, 0x21] => Some(Compression::Lz4),
            [0x28, 0xb5] => Some(Compression::Zstd),
            _ => None,
        }
    }

    /// Whether [`encode`] can write this method.
    pub fn can_encode(self) -> bool {
        !matches!(self, Compression::Lzo)
    }

    /// The accepted levels and the default, for methods that have levels.
    pub fn levels(self) -> Option<(std::ops::RangeInclusive<i32>, i32)> {
        match self {
            Compression::Gzip => Some((1..=9, 9)),
            Compression::Bzip2 => Some((1..=9, 9)),
            Compression::Lzma | Compression::Xz => Some((0..=9, 6)),
            // 3: zstd's own default, and where the measured table in the book
            // (benches/zstd-levels.sh) stops being cheap: 6 saves 8 % for twice
            // the time, 19 saves 22 % for 76 times.
            Compression::Zstd => Some((1..=19, 3)),
            Compression::None | Compression::Lzo | Compression::Lz4 => None,
        }
    }

    /// Whether the encoder uses more than one thread when asked to.
    pub fn multithreaded(self) -> bool {
        matches!(self, Compression::Xz | Compression::Zstd | Compression::Lz4)
    }
}

impl fmt::Display for Compression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One decoded stream.
#[derive(Debug)]
pub struct Decoded {
    pub data: Vec<u8>,
    /// Input bytes the stream occupies, from the start of the slice.
    pub consumed: usize,
}

/// Why a stream could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    /// Bytes of output produced before the failure.
    pub produced: usize,
    pub message: String,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// How many input bytes a stream's decoder has used so far.
#[derive(Clone, Debug, Default)]
pub struct Used(Rc<Cell<usize>>);

impl Used {
    pub fn get(&self) -> usize {
        self.0.get()
    }
    fn add(&self, n: usize) {
        self.0.set(self.0.get() + n);
    }
}

/// Where a compressed stream is read from: a slice, or a file from an
/// offset (pread, so the file position is untouched), through a buffer.
/// Counts the bytes its reader consumes: after the decoder reports the
/// end, that is the length of the stream.
pub struct Input<'a> {
    src: Src<'a>,
    buf: Vec<u8>,
    /// The unconsumed bytes: `buf[lo..hi]`, at source offset `at`.
    lo: usize,
    hi: usize,
    at: u64,
    used: Used,
}

enum Src<'a> {
    Slice(&'a [u8]),
    File(&'a std::fs::File),
}

impl<'a> Input<'a> {
    const CHUNK: usize = 256 << 10;

    pub fn slice(bytes: &'a [u8]) -> Input<'a> {
        Input {
            src: Src::Slice(bytes),
            buf: Vec::new(),
            lo: 0,
            hi: 0,
            at: 0,
            used: Used::default(),
        }
    }

    /// The file's bytes from `offset` to its end.
    pub fn file(file: &'a std::fs::File, offset: u64) -> Input<'a> {
        Input {
            src: Src::File(file),
            buf: vec![0; Self::CHUNK],
            lo: 0,
            hi: 0,
            at: offset,
            used: Used::default(),
        }
    }

    /// Up to `n` bytes from the current position (fewer at the end),
    /// without consuming them.
    pub fn peek(&mut self, n: usize) -> io::Result<&[u8]> {
        if let Src::Slice(s) = self.src {
            let start = (self.at as usize).min(s.len());
            return Ok(&s[start..s.len().min(start + n)]);
        }
        while self.hi - self.lo < n {
            if self.lo > 0 {
                self.buf.copy_within(self.lo..self.hi, 0);
                (self.lo, self.hi) = (0, self.hi - self.lo);
            }
            if self.hi == self.buf.len() {
                self.buf.resize(self.buf.len().max(n) * 2, 0);
            }
            let Src::File(f) = self.src else { break };
            let got = crate::io::read_full_at(
                f,
                &mut self.buf[self.hi..],
                self.at + (self.hi - self.lo) as u64,
            )?;
            if got == 0 {
                break;
            }
            self.hi += got;
        }
        Ok(&self.buf[self.lo..self.hi.min(self.lo + n)])
    }

    /// Reads exactly `buf.len()` bytes, or fails at the end of the input.
    fn take_exact(&mut self, buf: &mut [u8]) -> io::Result<()> {
        let mut done = 0;
        while done < buf.len() {
            let avail = self.fill_buf()?;
            if avail.is_empty() {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            let k = avail.len().min(buf.len() - done);
            buf[done..done + k].copy_from_slice(&avail[..k]);
            self.consume(k);
            done += k;
        }
        Ok(())
    }
}

impl Read for Input<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let avail = self.fill_buf()?;
        let n = avail.len().min(buf.len());
        buf[..n].copy_from_slice(&avail[..n]);
        self.consume(n);
        Ok(n)
    }
}

impl BufRead for Input<'_> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        match self.src {
            Src::Slice(s) => Ok(&s[(self.at as usize).min(s.len())..]),
            Src::File(f) => {
                if self.lo == self.hi {
                    (self.lo, self.hi) = (0, crate::io::read_full_at(f, &mut self.buf, self.at)?);
                }
                Ok(&self.buf[self.lo..self.hi])
            }
        }
    }
    fn consume(&mut self, n: usize) {
        if let Src::File(_) = self.src {
            self.lo += n;
        }
        self.at += n as u64;
        self.used.add(n);
    }
}

fn drain(mut r: impl Read, out: &mut Vec<u8>) -> Result<(), DecodeError> {
    r.read_to_end(out).map(|_| ()).map_err(|e| DecodeError {
        produced: out.len(),
        message: e.to_string(),
    })
}

/// A decoder that reads the one stream of `method` at the start of `input`
/// as it is read (nothing is held but the decoder's own window), with the
/// count of input bytes it has used: after the decoder reports the end,
/// the length of the stream.
/// The most memory an xz or lzma decoder may take (its dictionary): xz -9
/// needs 65 MiB; a header asking for more than this is refused, not obeyed.
pub const MAX_DECODER_MEMORY: u64 = 256 << 20;

pub fn stream<'a>(
    method: Compression,
    mut input: Input<'a>,
) -> Result<(Box<dyn Read + 'a>, Used), DecodeError> {
    let used = input.used.clone();
    let fail = |message: &str| DecodeError {
        produced: 0,
        message: message.to_string(),
    };
    let reader: Box<dyn Read + 'a> = match method {
        Compression::None => Box::new(input),
        Compression::Gzip => {
            let magic = input.peek(2).map_err(|e| fail(&e.to_string()))?;
            if magic.get(1) == Some(&0x9e) {
                return Err(fail(
                    "old-style gzip (magic 1f 9e) is not supported; recompress with gzip",
                ));
            }
            Box::new(flate2::bufread::GzDecoder::new(input))
        }
        Compression::Bzip2 => Box::new(bzip2::bufread::BzDecoder::new(input)),
        // A header may ask for any dictionary (up to 4 GiB): the decoders get
        // a memory limit instead of the header's word.
        Compression::Xz => {
            let stream = liblzma::stream::Stream::new_stream_decoder(MAX_DECODER_MEMORY, 0)
                .map_err(|e| fail(&e.to_string()))?;
            Box::new(liblzma::bufread::XzDecoder::new_stream(input, stream))
        }
        Compression::Lzma => {
            let stream = liblzma::stream::Stream::new_lzma_decoder(MAX_DECODER_MEMORY)
                .map_err(|e| fail(&e.to_string()))?;
            Box::new(liblzma::bufread::XzDecoder::new_stream(input, stream))
        }
        Compression::Zstd => Box::new(
            zstd::stream::read::Decoder::with_buffer(input)
                .map_err(|e| fail(&e.to_string()))?
                .single_frame(),
        ),
        Compression::Lz4 => Box::new(Lz4Legacy::new(input)?),
        Compression::Lzo => {
            return Err(fail(
                "lzo-compressed segments cannot be read by composer; \
                 recompress the image with another method",
            ))
        }
    };
    Ok((reader, used))
}

/// Decodes the one stream of method `method` at the start of `input`,
/// refusing more than `limit` bytes of output.
pub fn decode(method: Compression, input: &[u8], limit: usize) -> Result<Decoded, DecodeError> {
    if method == Compression::None {
        return Ok(Decoded {
            data: input.to_vec(),
            consumed: input.len(),
        });
    }
    let (mut reader, used) = stream(method, Input::slice(input))?;
    let mut data = Vec::new();
    drain(
        (&mut reader).take((limit as u64).saturating_add(1)),
        &mut data,
    )?;
    if data.len() > limit {
        return Err(DecodeError {
            produced: data.len(),
            message: format!("the stream decompresses to more than {limit} bytes"),
        });
    }
    drop(reader);
    let consumed = used.get();
    if consumed == 0 {
        return Err(DecodeError {
            produced: 0,
            message: "the compressed stream is empty".into(),
        });
    }
    Ok(Decoded { data, consumed })
}

/// The kernel's legacy lz4 reader: blocks until the input ends, a zero
/// length (padding follows), or fewer than 4 bytes remain. A repeated
/// magic is skipped, so `lz4 -l` output concatenated still reads.
struct Lz4Legacy<'a> {
    input: Input<'a>,
    /// Stream offset of the next block's length, for messages.
    pos: u64,
    chunk: Vec<u8>,
    block: Vec<u8>,
    /// The decoded block's unread bytes.
    ready: std::ops::Range<usize>,
    done: bool,
}

impl<'a> Lz4Legacy<'a> {
    fn new(mut input: Input<'a>) -> Result<Self, DecodeError> {
        let bad = DecodeError {
            produced: 0,
            message: "not a legacy lz4 stream (lz4 -l): bad magic".into(),
        };
        if Self::le32(&mut input).ok().flatten() != Some(LZ4_LEGACY_MAGIC) {
            return Err(bad);
        }
        input.consume(4);
        Ok(Lz4Legacy {
            input,
            pos: 4,
            chunk: Vec::new(),
            block: Vec::new(),
            ready: 0..0,
            done: false,
        })
    }

    /// The next 4 bytes as a little-endian number, not consumed.
    fn le32(input: &mut Input) -> io::Result<Option<u32>> {
        let b = input.peek(4)?;
        Ok((b.len() == 4).then(|| u32::from_le_bytes([b[0], b[1], b[2], b[3]])))
    }

    /// Decodes the next block; false at the end of the stream.
    fn next_block(&mut self) -> io::Result<bool> {
        let bad = |m: String| io::Error::new(io::ErrorKind::InvalidData, m);
        loop {
            let Some(len) = Self::le32(&mut self.input)? else {
                return Ok(false);
            };
            if len == LZ4_LEGACY_MAGIC {
                self.input.consume(4);
                self.pos += 4;
                continue;
            }
            if len == 0 {
                return Ok(false);
            }
            let (pos, len) = (self.pos, len as usize);
            // A block compresses at most 8 MiB: its length cannot be more
            // than lz4's bound for that.
            if len > LZ4_LEGACY_BLOCK + LZ4_LEGACY_BLOCK / 255 + 16 {
                return Err(bad(format!(
                    "lz4 block at stream offset {pos} claims {len} bytes, more than a block can take"
                )));
            }
            self.input.consume(4);
            self.chunk.resize(len, 0);
            self.input.take_exact(&mut self.chunk).map_err(|_| {
                bad(format!(
                    "lz4 block at stream offset {pos} claims {len} bytes; fewer remain"
                ))
            })?;
            if self.block.is_empty() {
                self.block = vec![0u8; LZ4_LEGACY_BLOCK];
            }
            let n = lz4_flex::block::decompress_into(&self.chunk, &mut self.block)
                .map_err(|e| bad(format!("lz4 block at stream offset {pos}: {e}")))?;
            self.pos += 4 + len as u64;
            self.ready = 0..n;
            return Ok(true);
        }
    }
}

impl Read for Lz4Legacy<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.ready.is_empty() {
            if self.done || !self.next_block()? {
                self.done = true;
                return Ok(0);
            }
        }
        let n = self.ready.len().min(buf.len());
        buf[..n].copy_from_slice(&self.block[self.ready.start..self.ready.start + n]);
        self.ready.start += n;
        Ok(n)
    }
}

/// The window size a zstd frame header asks for, when it can be read.
pub fn zstd_window_size(frame: &[u8]) -> Option<u64> {
    if frame.get(..4)? != [0x28, 0xb5, 0x2f, 0xfd] {
        return None;
    }
    let fhd = *frame.get(4)?;
    let single_segment = fhd & 0x20 != 0;
    let dict_id_len = [0usize, 1, 2, 4][(fhd & 3) as usize];
    let fcs_len = match fhd >> 6 {
        0 => usize::from(single_segment),
        1 => 2,
        2 => 4,
        _ => 8,
    };
    if single_segment {
        let at = 5 + dict_id_len;
        let bytes = frame.get(at..at + fcs_len)?;
        let mut v = 0u64;
        for (i, b) in bytes.iter().enumerate() {
            v |= (*b as u64) << (8 * i);
        }
        if fcs_len == 2 {
            v += 256;
        }
        return Some(v);
    }
    let wd = *frame.get(5)?;
    let log = 10 + (wd >> 3) as u32;
    let base = 1u64 << log;
    Some(base + (base / 8) * (wd & 7) as u64)
}

/// How to write one compressed stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EncodeOptions {
    pub method: Compression,
    /// None: the method's default.
    pub level: Option<i32>,
    /// Worker threads for methods that have them (at least 1).
    pub threads: u32,
}

fn other(e: impl fmt::Display) -> io::Error {
    io::Error::other(e.to_string())
}

/// Compresses everything `input` yields into `out` as one stream.
/// Returns the number of bytes written to `out`.
pub fn encode(opts: &EncodeOptions, input: &mut dyn Read, out: &mut dyn Write) -> io::Result<u64> {
    let mut counted = CountingWriter { inner: out, n: 0 };
    let level = match opts.method.levels() {
        Some((range, default)) => {
            let l = opts.level.unwrap_or(default);
            if !range.contains(&l) {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "{} level {l} is out of range ({}..={})",
                        opts.method,
                        range.start(),
                        range.end()
                    ),
                ));
            }
            l
        }
        None => 0,
    };
    let threads = opts.threads.max(1);
    match opts.method {
        Compression::None => {
            copy(input, &mut counted)?;
        }
        Compression::Gzip => {
            // No name and mtime 0 in the header: the same bytes every time.
            let mut e = flate2::GzBuilder::new()
                .mtime(0)
                .write(&mut counted, flate2::Compression::new(level as u32));
            copy(input, &mut e)?;
            e.finish()?;
        }
        Compression::Bzip2 => {
            let mut e =
                bzip2::write::BzEncoder::new(&mut counted, bzip2::Compression::new(level as u32));
            copy(input, &mut e)?;
            e.finish()?;
        }
        Compression::Xz => {
            let stream = if threads > 1 {
                liblzma::stream::MtStreamBuilder::new()
                    .preset(level as u32)
                    .threads(threads)
                    .check(liblzma::stream::Check::Crc32)
                    .encoder()
                    .map_err(other)?
            } else {
                liblzma::stream::Stream::new_easy_encoder(
                    level as u32,
                    liblzma::stream::Check::Crc32,
                )
                .map_err(other)?
            };
            let mut e = liblzma::write::XzEncoder::new_stream(&mut counted, stream);
            copy(input, &mut e)?;
            e.finish()?;
        }
        Compression::Lzma => {
            let o = liblzma::stream::LzmaOptions::new_preset(level as u32).map_err(other)?;
            let stream = liblzma::stream::Stream::new_lzma_encoder(&o).map_err(other)?;
            let mut e = liblzma::write::XzEncoder::new_stream(&mut counted, stream);
            copy(input, &mut e)?;
            e.finish()?;
        }
        Compression::Zstd => {
            let mut e = zstd::stream::write::Encoder::new(&mut counted, level)?;
            if threads > 1 {
                e.multithread(threads)?;
            }
            // The kernel refuses frames whose window is larger than 8 MiB.
            e.window_log(ZSTD_MAX_WINDOW_LOG.min(zstd_level_window_log(level)))?;
            e.include_checksum(true)?;
            copy(input, &mut e)?;
            e.finish()?;
        }
        Compression::Lz4 => encode_lz4_legacy(input, &mut counted, threads as usize)?,
        Compression::Lzo => {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "composer cannot write lzo; choose gzip, zstd, xz, lzma, bzip2 or lz4",
            ))
        }
    }
    Ok(counted.n)
}

/// `io::copy` with 1 MiB reads: fewer, larger calls into the encoders
/// (multi-threaded zstd and xz hand whole chunks to their workers).
fn copy(input: &mut dyn Read, out: &mut dyn Write) -> io::Result<u64> {
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0;
    loop {
        let n = match input.read(&mut buf) {
            Ok(0) => return Ok(total),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        out.write_all(&buf[..n])?;
        total += n as u64;
    }
}

/// zstd's own window for a level (never enlarged, only capped).
fn zstd_level_window_log(level: i32) -> u32 {
    match level {
        ..=2 => 19,
        3..=4 => 20,
        5..=7 => 21,
        8..=16 => 22,
        _ => 23,
    }
}

struct CountingWriter<'a> {
    inner: &'a mut dyn Write,
    n: u64,
}

impl Write for CountingWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.n += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Legacy lz4: independent 8 MiB blocks, so `threads` blocks at a time are
/// compressed in parallel and written in order.
fn encode_lz4_legacy(input: &mut dyn Read, out: &mut dyn Write, threads: usize) -> io::Result<()> {
    out.write_all(&LZ4_LEGACY_MAGIC.to_le_bytes())?;
    loop {
        let mut chunks = Vec::with_capacity(threads);
        for _ in 0..threads {
            let mut buf = vec![0u8; LZ4_LEGACY_BLOCK];
            let n = crate::io::read_full(input, &mut buf)?;
            if n == 0 {
                break;
            }
            buf.truncate(n);
            chunks.push(buf);
        }
        if chunks.is_empty() {
            return Ok(());
        }
        let last = chunks.last().is_some_and(|c| c.len() < LZ4_LEGACY_BLOCK);
        let blocks: Vec<Vec<u8>> = if chunks.len() == 1 {
            vec![lz4_flex::block::compress(&chunks[0])]
        } else {
            std::thread::scope(|s| {
                let handles: Vec<_> = chunks
                    .iter()
                    .map(|c| s.spawn(move || lz4_flex::block::compress(c)))
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().unwrap_or_default())
                    .collect()
            })
        };
        for (b, c) in blocks.iter().zip(&chunks) {
            if b.is_empty() && !c.is_empty() {
                return Err(io::Error::other("lz4 worker thread failed"));
            }
            out.write_all(&(b.len() as u32).to_le_bytes())?;
            out.write_all(b)?;
        }
        if last {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(method: Compression, threads: u32) {
        let mut input = Vec::new();
        for i in 0..200_000u32 {
            input.extend_from_slice(format!("line {i} {}\n", i % 7).as_bytes());
        }
        let mut out = Vec::new();
        let opts = EncodeOptions {
            method,
            level: None,
            threads,
        };
        let n = encode(&opts, &mut &input[..], &mut out).expect("encode");
        assert_eq!(n as usize, out.len());
        assert_eq!(Compression::detect(&out), Some(method));
        // Trailing bytes after the stream are left for the next segment.
        out.extend_from_slice(b"\0\0\0\x00070701");
        let d = decode(method, &out, usize::MAX).expect("decode");
        assert_eq!(d.data, input);
        assert_eq!(&out[d.consumed..], b"\0\0\0\x00070701", "{method}");
    }

    #[test]
    fn every_method_round_trips_and_stops_at_its_end() {
        for m in Compression::ALL {
            if m.can_encode() && m != Compression::None {
                round_trip(m, 1);
                if m.multithreaded() {
                    round_trip(m, 3);
                }
            }
        }
    }

    #[test]
    fn lz4_blocks_are_at_most_8_mib() {
        let input = vec![7u8; LZ4_LEGACY_BLOCK * 2 + 5];
        let mut out = Vec::new();
        let opts = EncodeOptions {
            method: Compression::Lz4,
            level: None,
            threads: 2,
        };
        encode(&opts, &mut &input[..], &mut out).unwrap();
        let d = decode(Compression::Lz4, &out, usize::MAX).unwrap();
        assert_eq!(d.data.len(), input.len());
        assert_eq!(d.consumed, out.len());
    }

    #[test]
    fn zstd_window_is_capped_for_the_kernel() {
        let input = vec![1u8; 20 << 20];
        let mut out = Vec::new();
        let opts = EncodeOptions {
            method: Compression::Zstd,
            level: Some(19),
            threads: 2,
        };
        encode(&opts, &mut &input[..], &mut out).unwrap();
        let w = zstd_window_size(&out).unwrap();
        assert!(w <= 1 << ZSTD_MAX_WINDOW_LOG, "window {w}");
    }

    /// A zstd segment without a level is level 3 (the measured choice),
    /// and the bytes do not depend on the thread count beyond one.
    #[test]
    fn zstd_defaults_to_level_3_with_the_same_bytes_on_any_core_count() {
        let mut input = Vec::new();
        for i in 0..300_000u32 {
            input.extend_from_slice(format!("entry {i} {}\n", i % 13).as_bytes());
        }
        let enc = |level: Option<i32>, threads: u32| {
            let mut out = Vec::new();
            let opts = EncodeOptions {
                method: Compression::Zstd,
                level,
                threads,
            };
            encode(&opts, &mut &input[..], &mut out).unwrap();
            out
        };
        assert_eq!(Compression::Zstd.levels().map(|l| l.1), Some(3));
        let default = enc(None, 2);
        assert_eq!(default, enc(Some(3), 2));
        assert_ne!(default, enc(Some(19), 2));
        assert_eq!(default, enc(None, 8));
    }

    #[test]
    fn detects_the_kernel_magics() {
        assert_eq!(Compression::detect(b"\x1f\x8b"), Some(Compression::Gzip));
        assert_eq!(Compression::detect(b"\x89\x4c"), Some(Compression::Lzo));
        assert_eq!(Compression::detect(b"07"), None);
        assert_eq!(Compression::detect(b"\x1f"), None);
    }

    #[test]
    fn truncated_streams_fail() {
        let input = vec![3u8; 100_000];
        for m in [Compression::Gzip, Compression::Zstd, Compression::Xz] {
            let mut out = Vec::new();
            let opts = EncodeOptions {
                method: m,
                level: Some(1),
                threads: 1,
            };
            encode(&opts, &mut &input[..], &mut out).unwrap();
            out.truncate(out.len() / 2);
            assert!(decode(m, &out, usize::MAX).is_err(), "{m}");
        }
    }
}

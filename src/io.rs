//! Reading until a buffer is full: the one loop every reader here needs
//! (pipes and decoders return short reads, and a signal may interrupt any).

use std::fs::File;
use std::io::{self, ErrorKind, Read};
use std::os::unix::fs::FileExt;

/// Reads into `buf` until it is full or the reader ends; returns the bytes
/// read (short only at the end).
pub fn read_full(r: &mut (impl Read + ?Sized), buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// [`read_full`] at a file offset (pread), leaving the file position alone.
pub fn read_full_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match file.read_at(&mut buf[n..], offset + n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// The largest manifest, include, drop-in or list composer reads.
pub const MAX_INPUT: u64 = 64 << 20;

/// Why an input file cannot be read.
#[derive(Debug)]
pub enum InputError {
    Io(io::Error),
    /// Not a regular file: a directory, a device, a FIFO, a socket.
    NotAFile(&'static str),
    /// Larger than the limit.
    TooLarge(u64),
}

impl std::fmt::Display for InputError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InputError::Io(e) => write!(f, "{e}"),
            InputError::NotAFile(what) => write!(f, "it is {what}, not a regular file"),
            InputError::TooLarge(limit) => {
                write!(f, "it is larger than {} MiB", limit >> 20)
            }
        }
    }
}

/// Reads a regular file of at most `limit` bytes: opened without blocking
/// (a FIFO with no writer would wait forever) and without taking a
/// terminal, checked with fstat, and read no further than the limit (a
/// file that grows while it is read is refused too).
pub fn read_regular(path: &std::path::Path, limit: u64) -> Result<Vec<u8>, InputError> {
    use rustix::fs::{Mode, OFlags};
    use std::os::unix::fs::FileTypeExt;
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NONBLOCK | OFlags::NOCTTY,
        Mode::empty(),
    )
    .map_err(|e| InputError::Io(e.into()))?;
    let file = File::from(fd);
    let meta = file.metadata().map_err(InputError::Io)?;
    let ft = meta.file_type();
    if !ft.is_file() {
        return Err(InputError::NotAFile(if ft.is_dir() {
            "a directory"
        } else if ft.is_fifo() {
            "a named pipe"
        } else if ft.is_socket() {
            "a socket"
        } else {
            "a device"
        }));
    }
    if meta.len() > limit {
        return Err(InputError::TooLarge(limit));
    }
    // Room for the size fstat gave (and a byte to see that it grew), so
    // that a large manifest is not held with twice its size reserved.
    read_into(
        &mut &file,
        limit,
        Vec::with_capacity(meta.len() as usize + 1),
    )
}

/// Reads `r` to its end, refusing more than `limit` bytes.
pub fn read_limited(r: &mut impl Read, limit: u64) -> Result<Vec<u8>, InputError> {
    read_into(r, limit, Vec::new())
}

fn read_into(r: &mut impl Read, limit: u64, mut out: Vec<u8>) -> Result<Vec<u8>, InputError> {
    r.take(limit.saturating_add(1))
        .read_to_end(&mut out)
        .map_err(InputError::Io)?;
    if out.len() as u64 > limit {
        return Err(InputError::TooLarge(limit));
    }
    Ok(out)
}

/// A reader that fills every buffer it is given (short only at the end),
/// so an encoder sees the same chunks whatever the pipe delivers.
pub struct FullReads<R>(pub R);

impl<R: Read> Read for FullReads<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        read_full(&mut self.0, buf)
    }
}

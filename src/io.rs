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

/// A reader that fills every buffer it is given (short only at the end),
/// so an encoder sees the same chunks whatever the pipe delivers.
pub struct FullReads<R>(pub R);

impl<R: Read> Read for FullReads<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        read_full(&mut self.0, buf)
    }
}

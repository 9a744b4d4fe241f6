//! A compressed segment: a writer thread produces the archive into a pipe,
//! the calling thread encodes it into the output at its position. A
//! segment in pieces ([`crate::plan::Chunk`]) is encoded a batch of pieces
//! at a time, one piece per thread, each into memory, and written in order.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::os::fd::OwnedFd;

use crate::compress::{self, EncodeOptions};
use crate::error::{Error, Result};
use crate::io::FullReads;
use crate::plan::{Chunk, Layout};

fn broken_pipe(e: &Error) -> bool {
    matches!(e, Error::Io { source, .. } if source.kind() == io::ErrorKind::BrokenPipe)
}

/// Writes the archive of `layout` compressed at the output's position.
/// Returns the compressed size.
pub(super) fn write(
    layout: &Layout,
    out: &File,
    out_name: &str,
    opts: &EncodeOptions,
) -> Result<u64> {
    let mut sink = BufWriter::with_capacity(1 << 20, out);
    let n = encode_into(layout, &mut sink, out_name, opts)?;
    sink.flush().map_err(|e| Error::io(out_name, e))?;
    Ok(n)
}

/// Writes a segment's pieces, each compressed on its own, one after
/// another from image offset `pos` with the NULs the kernel needs between
/// streams (to a 4-byte boundary; an empty block after legacy lz4), the
/// output positioned at `pos`. Pieces are encoded a batch at a time, one
/// thread each, each single-threaded, so the bytes are the same on any
/// machine and for any batch. A batch has at most as many pieces as the
/// segment has threads and at most [`IN_FLIGHT`] bytes of archive, whose
/// compressed bytes wait in memory for their turn; a piece larger than
/// that (one huge file) is a batch of its own and streams to the output.
/// Returns the image offset after the last piece.
pub(super) fn write_chunks(
    chunks: &[Chunk],
    out: &File,
    out_name: &str,
    opts: &EncodeOptions,
    mut pos: u64,
) -> Result<u64> {
    let one = EncodeOptions {
        threads: 1,
        ..*opts
    };
    let mut sink = BufWriter::with_capacity(1 << 20, out);
    let mut first = true;
    // The NULs before a piece (none before the first): what the kernel
    // needs between two streams of this method.
    let gap = |sink: &mut BufWriter<&File>, pos: u64, first: &mut bool| -> Result<u64> {
        let pad = if std::mem::take(first) {
            0
        } else {
            crate::plan::gap_before(pos, Some(opts.method), 0)
        };
        sink.write_all(&[0u8; 8][..pad as usize])
            .map_err(|e| Error::io(out_name, e))?;
        Ok(pad)
    };
    for group in batches(chunks, opts.threads.max(1) as usize) {
        if let [c] = group {
            pos += gap(&mut sink, pos, &mut first)?;
            pos += encode_into(&c.layout, &mut sink, out_name, &one)?;
            continue;
        }
        let encoded: Vec<Result<Vec<u8>>> = std::thread::scope(|scope| {
            let handles: Vec<_> = group
                .iter()
                .map(|c| {
                    let one = &one;
                    scope.spawn(move || {
                        let mut buf = Vec::new();
                        encode_into(&c.layout, &mut buf, out_name, one).map(|_| buf)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(Error::usage(
                            "internal error: a compressing thread panicked",
                        ))
                    })
                })
                .collect()
        });
        for bytes in encoded {
            let bytes = bytes?;
            pos += gap(&mut sink, pos, &mut first)?;
            sink.write_all(&bytes).map_err(|e| Error::io(out_name, e))?;
            pos += bytes.len() as u64;
        }
    }
    sink.flush().map_err(|e| Error::io(out_name, e))?;
    Ok(pos)
}

/// Archive bytes of the pieces one batch may hold in memory at once.
const IN_FLIGHT: u64 = 256 << 20;

/// Consecutive runs of pieces: at most `threads` each, and at most
/// [`IN_FLIGHT`] archive bytes unless a single piece is larger.
fn batches<'c, 'a>(chunks: &'c [Chunk<'a>], threads: usize) -> Vec<&'c [Chunk<'a>]> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut bytes = 0u64;
    for (i, c) in chunks.iter().enumerate() {
        let full = i - start == threads || (i > start && bytes + c.layout.size > IN_FLIGHT);
        if full {
            out.push(&chunks[start..i]);
            start = i;
            bytes = 0;
        }
        bytes += c.layout.size;
    }
    if start < chunks.len() {
        out.push(&chunks[start..]);
    }
    out
}

/// Encodes the archive of `layout` into `sink`; returns the compressed size.
fn encode_into(
    layout: &Layout,
    sink: &mut impl Write,
    out_name: &str,
    opts: &EncodeOptions,
) -> Result<u64> {
    let (reader, pipe) = io::pipe().map_err(|e| Error::io(out_name, e))?;
    let pipe = File::from(OwnedFd::from(pipe));
    std::thread::scope(|scope| {
        let producer = scope.spawn(move || {
            let r = super::archive::write(layout, &pipe, out_name, 1);
            drop(pipe);
            r
        });
        let mut src = FullReads(reader);
        let encoded = compress::encode(opts, &mut src, sink);
        // Unblock the producer before waiting for it.
        drop(src);
        let produced = producer
            .join()
            .unwrap_or_else(|_| Err(Error::usage("internal error: the archive writer panicked")));
        match (produced, encoded) {
            (Ok(_), Ok(n)) => Ok(n),
            (Err(e), Ok(_)) => Err(e),
            (Err(e), Err(_)) if !broken_pipe(&e) => Err(e),
            (_, Err(e)) => Err(Error::io(out_name, e)),
        }
    })
}

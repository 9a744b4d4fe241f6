//! A compressed segment: a writer thread produces the archive into a pipe,
//! the calling thread encodes it into the output at its position. A
//! segment in pieces ([`crate::plan::Chunk`]) is encoded a batch of pieces
//! at a time, one piece per thread, each into memory, and written in order.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::os::fd::OwnedFd;

use crate::compress::{self, EncodeOptions};
use crate::entry::Entry;
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
    entries: &[Entry],
    out: &File,
    out_name: &str,
    opts: &EncodeOptions,
) -> Result<u64> {
    let mut sink = BufWriter::with_capacity(1 << 20, out);
    let n = encode_into(layout, entries, &mut sink, out_name, opts)?;
    sink.flush().map_err(|e| Error::io(out_name, e))?;
    Ok(n)
}

/// Writes a segment's pieces, each compressed on its own, one after
/// another from image offset `pos` with the NULs the kernel needs between
/// streams (to a 4-byte boundary; an empty block after legacy lz4), the
/// output positioned at `pos`. As many pieces are encoded at
/// once as the segment has threads, each single-threaded, so the bytes are
/// the same on any machine. Returns the image offset after the last piece.
pub(super) fn write_chunks(
    chunks: &[Chunk],
    entries: &[Entry],
    out: &File,
    out_name: &str,
    opts: &EncodeOptions,
    mut pos: u64,
) -> Result<u64> {
    let one = EncodeOptions {
        threads: 1,
        ..*opts
    };
    let batch = (opts.threads.max(1) as usize).min(chunks.len());
    let mut sink = BufWriter::with_capacity(1 << 20, out);
    let mut first = true;
    for group in chunks.chunks(batch) {
        let encoded: Vec<Result<Vec<u8>>> = std::thread::scope(|scope| {
            let handles: Vec<_> = group
                .iter()
                .map(|c| {
                    let piece = &entries[c.entries.clone()];
                    let one = &one;
                    scope.spawn(move || {
                        let mut buf = Vec::new();
                        encode_into(&c.layout, piece, &mut buf, out_name, one).map(|_| buf)
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
            let pad = if first {
                0
            } else {
                crate::plan::gap_before(pos, Some(opts.method), 0)
            };
            first = false;
            sink.write_all(&[0u8; 8][..pad as usize])
                .and_then(|()| sink.write_all(&bytes))
                .map_err(|e| Error::io(out_name, e))?;
            pos += pad + bytes.len() as u64;
        }
    }
    sink.flush().map_err(|e| Error::io(out_name, e))?;
    Ok(pos)
}

/// Encodes the archive of `layout` into `sink`; returns the compressed size.
fn encode_into(
    layout: &Layout,
    entries: &[Entry],
    sink: &mut impl Write,
    out_name: &str,
    opts: &EncodeOptions,
) -> Result<u64> {
    let (reader, pipe) = io::pipe().map_err(|e| Error::io(out_name, e))?;
    let pipe = File::from(OwnedFd::from(pipe));
    std::thread::scope(|scope| {
        let producer = scope.spawn(move || {
            let r = super::archive::write(layout, entries, &pipe, out_name, 1);
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

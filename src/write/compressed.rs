//! A compressed segment: a writer thread produces the archive into a pipe,
//! the calling thread encodes it into the output at its position.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::os::fd::OwnedFd;

use crate::compress::{self, EncodeOptions};
use crate::entry::Entry;
use crate::error::{Error, Result};
use crate::io::FullReads;
use crate::plan::Layout;

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
    let (reader, pipe) = io::pipe().map_err(|e| Error::io(out_name, e))?;
    let pipe = File::from(OwnedFd::from(pipe));
    std::thread::scope(|scope| {
        let producer = scope.spawn(move || {
            let r = super::archive::write(layout, entries, &pipe, out_name, 1);
            drop(pipe);
            r
        });
        let mut sink = BufWriter::with_capacity(1 << 20, out);
        let mut src = FullReads(reader);
        let encoded =
            compress::encode(opts, &mut src, &mut sink).and_then(|n| sink.flush().map(|()| n));
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

//! One archive: a [`Layout`] becomes archive bytes in an output file.
//!
//! Headers, names and file data go through one buffer, except where the
//! output's filesystem can do better with copy_file_range (see
//! [`Offload`]): block-aligned data is cloned (shared with its source) on
//! XFS, Btrfs and their kind, and a file server copies on its own side.
//! Elsewhere (ext4, tmpfs) copy_file_range is an in-kernel copy through a
//! pipe, which measured slower than read and write, so it is not used.
//! Where copy_file_range is refused (a pipe, an old kernel, another
//! filesystem) the writer falls back to read/write.

use std::fs::File;
use std::io::{self, ErrorKind, Write};
use std::path::Path;

use crate::cpio::header::{checksum, pad_to, TRAILER_NAME};
use crate::entry::{Origin, Source, PATH_MAX};
use crate::error::{Error, Result};
use crate::io::read_full;
use crate::plan::{Alignment, Data, Layout, Record};

/// Files up to this size are read into the buffer instead of being copied
/// with copy_file_range by a file server: one read beats a flush and a
/// syscall per file. Aligned files are cloned whatever their size: their
/// whole blocks can be shared with the source.
const SMALL_FILE: u64 = 64 * 1024;

/// What copy_file_range does better than read and write on the output's
/// filesystem.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Offload {
    /// Nothing (ext4, tmpfs, ...): it copies through a pipe in the kernel,
    /// which is slower than read and write through one buffer (the
    /// module tree to ext4: 221 against 161 ms without fsync, 352 against
    /// 248 ms durable), so every byte goes through the buffer.
    None,
    /// Block-aligned ranges are cloned, so that the archive shares them
    /// with the sources (XFS, Btrfs, bcachefs, OCFS2, ZFS): aligned data
    /// goes by copy_file_range, the rest through the buffer.
    Clone,
    /// The file server copies on its side (NFS 4.2, SMB): the data of
    /// every file larger than [`SMALL_FILE`] goes by copy_file_range.
    Server,
}

impl Offload {
    /// What the filesystem of `out` offers (None for a pipe or terminal,
    /// or a filesystem that cannot be told).
    fn of(out: &File) -> Offload {
        // Magic numbers of statfs(2)'s f_type (linux/magic.h).
        const XFS: u64 = 0x5846_5342;
        const BTRFS: u64 = 0x9123_683e;
        const BCACHEFS: u64 = 0xca45_1a4e;
        const OCFS2: u64 = 0x7461_636f;
        const ZFS: u64 = 0x2fc1_2fc1;
        const NFS: u64 = 0x6969;
        const SMB2: u64 = 0xfe53_4d42;
        const CIFS: u64 = 0xff53_4d42;
        let Ok(st) = rustix::fs::fstatfs(out) else {
            return Offload::None;
        };
        #[allow(clippy::unnecessary_cast)] // f_type's type differs by target.
        match st.f_type as u64 {
            XFS | BTRFS | BCACHEFS | OCFS2 | ZFS => Offload::Clone,
            NFS | SMB2 | CIFS => Offload::Server,
            _ => Offload::None,
        }
    }

    /// Whether a file's data goes by copy_file_range: `share` says it is
    /// block-aligned in the archive.
    fn wants(self, share: bool, len: u64) -> bool {
        match self {
            Offload::None => false,
            Offload::Clone => share,
            Offload::Server => share || len > SMALL_FILE,
        }
    }
}
const BUFFER: usize = 1024 * 1024;

/// What the writer did, for reports and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteStats {
    pub bytes: u64,
    /// Data bytes moved by copy_file_range.
    pub copy_file_range_bytes: u64,
    /// Data bytes moved through our buffer.
    pub buffered_bytes: u64,
    /// Padding left as holes instead of written.
    pub hole_bytes: u64,
}

struct Sink<'o> {
    out: &'o File,
    out_name: &'o str,
    buf: Vec<u8>,
    /// Archive bytes handed to the sink so far (written or buffered): the
    /// archive offset of the next byte.
    pos: u64,
    /// The output file offset of the archive's start (positional writes).
    base: u64,
    /// Write at explicit offsets (pwrite, copy_file_range with an output
    /// offset) so that several sinks can fill one file; otherwise write at
    /// the file position (pipes, terminals).
    positional: bool,
    /// What copy_file_range is used for; None once it was refused.
    offload: Offload,
    /// Durable output: the archive offset from which written data has not
    /// been queued for writeback yet.
    writeback: Option<u64>,
    stats: WriteStats,
}

/// Where a writer writes: the file, its name for messages, the file offset
/// of the archive's start for positional writes (None: at the file
/// position), and whether to start writeback as it goes (the output will be
/// synced).
#[derive(Clone, Copy)]
struct Target<'o> {
    out: &'o File,
    name: &'o str,
    positional: Option<u64>,
    writeback: bool,
    offload: Offload,
}

/// Written data is queued for writeback in pieces this large while the
/// copy goes on, so that the fsync at the end waits on little.
const WRITEBACK_CHUNK: u64 = 8 << 20;

impl<'o> Sink<'o> {
    /// Queues what was written since the last call for writeback, once it
    /// is a chunk (or whatever there is, with `all`).
    fn start_writeback(&mut self, all: bool) -> Result<()> {
        let Some(from) = self.writeback else {
            return Ok(());
        };
        let len = self.pos - from;
        if len == 0 || (len < WRITEBACK_CHUNK && !all) {
            return Ok(());
        }
        self.flush()?;
        start_writeback(self.out, self.base + from, len);
        self.writeback = Some(self.pos);
        Ok(())
    }

    fn out_err(&self, err: io::Error) -> Error {
        Error::io(self.out_name, err)
    }

    fn flush(&mut self) -> Result<()> {
        if !self.buf.is_empty() {
            if self.positional {
                let start = self.base + self.pos - self.buf.len() as u64;
                std::os::unix::fs::FileExt::write_all_at(self.out, &self.buf, start)
                    .map_err(|e| self.out_err(e))?;
            } else {
                let mut out = self.out;
                out.write_all(&self.buf).map_err(|e| self.out_err(e))?;
            }
            self.buf.clear();
        }
        Ok(())
    }

    fn put(&mut self, bytes: &[u8]) -> Result<()> {
        self.buf.extend_from_slice(bytes);
        self.pos += bytes.len() as u64;
        if self.buf.len() >= BUFFER {
            self.flush()?;
        }
        Ok(())
    }

    fn zeros(&mut self, n: u64) -> Result<()> {
        const ZEROS: [u8; 4096] = [0; 4096];
        const BLOCK: u64 = 4096;
        let end = self.pos + n;
        // In a pre-sized (sparse) output, whole blocks of zeros are holes:
        // skip them instead of writing them.
        if self.positional {
            // Blocks of the file, not of the archive: it may start anywhere.
            let at = self.base + self.pos;
            let hole_start = at + pad_to(at, BLOCK) - self.base;
            let hole_end = (self.base + end) / BLOCK * BLOCK;
            let hole_end = hole_end.saturating_sub(self.base);
            if hole_end > hole_start {
                self.zeros(hole_start - self.pos)?;
                self.flush()?;
                self.stats.hole_bytes += hole_end - hole_start;
                self.pos = hole_end;
            }
        }
        let mut left = end - self.pos;
        while left > 0 {
            let k = left.min(ZEROS.len() as u64) as usize;
            self.put(&ZEROS[..k])?;
            left -= k as u64;
        }
        Ok(())
    }

    /// Copies `len` bytes of `src` from its start; returns an error if the
    /// file turns out shorter than planned. `share`: the data is
    /// block-aligned, so it can be cloned.
    fn copy(&mut self, src: &File, path: &Path, len: u64, share: bool) -> Result<()> {
        let mut done: u64 = 0;
        if self.offload.wants(share, len) {
            self.flush()?;
            while done < len {
                let want = (len - done).min(1 << 30) as usize;
                let mut off_in = done;
                let mut off_out = self.base + self.pos + done;
                let off_out = self.positional.then_some(&mut off_out);
                match rustix::fs::copy_file_range(src, Some(&mut off_in), self.out, off_out, want) {
                    Ok(0) => return Err(shrunk(path, len)),
                    Ok(n) => {
                        done += n as u64;
                        self.stats.copy_file_range_bytes += n as u64;
                    }
                    Err(e) if fallback_errno(e) && done == 0 => {
                        self.offload = Offload::None;
                        break;
                    }
                    Err(e) => return Err(self.out_err(e.into())),
                }
            }
            self.pos += done;
            if done == len {
                return Ok(());
            }
        }
        // read/write through the buffer, from where copy_file_range stopped.
        let mut reader = src;
        if done > 0 {
            use std::io::Seek;
            reader
                .seek(io::SeekFrom::Start(done))
                .map_err(|e| Error::io(path, e))?;
        }
        while done < len {
            let chunk = (len - done).min(BUFFER as u64) as usize;
            if self.buf.len() + chunk > self.buf.capacity() {
                // Out first, rather than grow the buffer (to twice its
                // size, for the rest of the build).
                self.flush()?;
            }
            let start = self.buf.len();
            self.buf.resize(start + chunk, 0);
            let n =
                read_full(&mut reader, &mut self.buf[start..]).map_err(|e| Error::io(path, e))?;
            self.buf.truncate(start + n);
            if n < chunk {
                return Err(shrunk(path, len));
            }
            done += n as u64;
            self.pos += n as u64;
            self.stats.buffered_bytes += n as u64;
            if self.buf.len() >= BUFFER {
                self.flush()?;
            }
        }
        Ok(())
    }
}

/// sync_file_range(SYNC_FILE_RANGE_WRITE): starts writeback of the dirty
/// pages of a range and returns without waiting. Only a head start for the
/// fsync that follows, so an error (a filesystem that does not support it)
/// changes nothing and is ignored.
fn start_writeback(out: &File, offset: u64, len: u64) {
    use std::os::fd::AsRawFd;
    let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else {
        return;
    };
    // SAFETY: the descriptor belongs to `out`, which is borrowed (so open)
    // for the whole call; the call takes integers and touches no memory of
    // this process.
    unsafe {
        libc::sync_file_range(out.as_raw_fd(), offset, len, libc::SYNC_FILE_RANGE_WRITE);
    }
}

/// copy_file_range errors that mean "not here", not "failed".
fn fallback_errno(e: rustix::io::Errno) -> bool {
    use rustix::io::Errno;
    [
        Errno::XDEV,
        Errno::INVAL,
        Errno::NOSYS,
        Errno::OPNOTSUPP,
        Errno::BADF,
        Errno::PERM,
        Errno::TXTBSY,
        Errno::OVERFLOW,
        Errno::IO,
    ]
    .contains(&e)
}

fn shrunk(path: &Path, len: u64) -> Error {
    Error::io(
        path,
        io::Error::new(
            ErrorKind::UnexpectedEof,
            format!("file is shorter than the {len} bytes it had when the build started"),
        ),
    )
}

/// Opens a planned source without following a symlink where there was
/// none, without blocking (a FIFO swapped in) and without taking a
/// terminal, and checks it is the file that was planned: a regular file
/// with the same device, inode, size and mtime. What changed, if anything,
/// is the error.
fn open_source(source: &Source) -> std::result::Result<File, String> {
    use rustix::fs::{Mode, OFlags};
    let mut flags = OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NONBLOCK | OFlags::NOCTTY;
    if source.nofollow {
        flags |= OFlags::NOFOLLOW;
    }
    let fd = rustix::fs::open(&source.path, flags, Mode::empty()).map_err(|e| match e {
        rustix::io::Errno::LOOP if source.nofollow => {
            "is now a symbolic link; it was a file when the build started".to_string()
        }
        e => format!("cannot be opened: {}", io::Error::from(e)),
    })?;
    let file = File::from(fd);
    let meta = file
        .metadata()
        .map_err(|e| format!("cannot be read: {e}"))?;
    still_planned(source, &meta)?;
    Ok(file)
}

/// Whether `meta` (of the open source) still describes the planned file.
fn still_planned(source: &Source, meta: &std::fs::Metadata) -> std::result::Result<(), String> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let ft = meta.file_type();
    if !ft.is_file() {
        let what = if ft.is_dir() {
            "a directory"
        } else if ft.is_fifo() {
            "a named pipe"
        } else if ft.is_socket() {
            "a socket"
        } else if ft.is_char_device() || ft.is_block_device() {
            "a device"
        } else {
            "not a regular file"
        };
        return Err(format!(
            "is now {what}; it was a regular file when the build started"
        ));
    }
    if source.ino != 0 && (meta.dev(), meta.ino()) != (source.dev, source.ino) {
        return Err("was replaced by another file after the build started".into());
    }
    if meta.len() != source.size {
        return Err(format!(
            "changed size after the build started: {} bytes then, {} now",
            source.size,
            meta.len()
        ));
    }
    if meta.mtime() != source.mtime {
        return Err("was modified after the build started".into());
    }
    Ok(())
}

/// An error about a source, at the manifest or list line that named it.
fn source_error(origin: &Origin, source: &Source, what: impl std::fmt::Display) -> Error {
    Error::at(
        origin.clone(),
        format!("source `{}` {what}", source.path.display()),
    )
    .with_hint("the sources changed while the image was built; build again once they are stable")
}

/// A failure reading a source (not writing the output), at its origin.
fn at_source<'a>(origin: &'a Origin, source: &'a Source) -> impl Fn(Error) -> Error + 'a {
    move |e| match e {
        Error::Io { path, source: err } if path == source.path => {
            source_error(origin, source, format_args!("cannot be read: {err}"))
        }
        e => e,
    }
}

/// Sums a file's bytes (for `070702`), reading it once.
fn checksum_file(src: &File, path: &Path, len: u64) -> Result<u32> {
    let mut reader = src;
    let mut buf = vec![0u8; BUFFER.min(len as usize).max(1)];
    let (mut sum, mut done) = (0u32, 0u64);
    while done < len {
        let want = (len - done).min(buf.len() as u64) as usize;
        let n = read_full(&mut reader, &mut buf[..want]).map_err(|e| Error::io(path, e))?;
        if n < want {
            return Err(shrunk(path, len));
        }
        sum = sum.wrapping_add(checksum(&buf[..n]));
        done += n as u64;
    }
    use std::io::Seek;
    reader
        .seek(io::SeekFrom::Start(0))
        .map_err(|e| Error::io(path, e))?;
    Ok(sum)
}

/// Writes the layout to `out` (positioned at the archive's start).
/// `out_name` names the output in error messages.
///
/// A regular file is written by up to `threads` writers at the layout's
/// offsets, each taking a contiguous share of the bytes; anything else (a
/// pipe, a terminal) is written in order.
pub fn write(layout: &Layout, out: &File, out_name: &str, threads: usize) -> Result<WriteStats> {
    let how = How {
        base: 0,
        writeback: false,
        reflink: true,
    };
    write_at(layout, out, out_name, threads, how)
}

/// How [`write_at`] writes an archive.
#[derive(Clone, Copy, Debug)]
pub struct How {
    /// The file offset of the archive's start (the file positioned there).
    pub base: u64,
    /// The output will be synced: start writing data back while copying.
    pub writeback: bool,
    /// Let copy_file_range move data where the filesystem does better
    /// with it than a copy (see [`Offload`]: sharing it with the source on
    /// XFS and Btrfs); false copies every byte through memory.
    pub reflink: bool,
}

/// [`write`] for an archive that starts at file offset `base` (the file
/// positioned there), after other archives of the same image. The
/// layout's offsets stay relative to the archive's start.
pub fn write_at(
    layout: &Layout,
    out: &File,
    out_name: &str,
    threads: usize,
    how: How,
) -> Result<WriteStats> {
    let How {
        base,
        writeback,
        reflink,
    } = how;
    let append = rustix::fs::fcntl_getfl(out)
        .map(|f| f.contains(rustix::fs::OFlags::APPEND))
        .unwrap_or(true);
    let regular = !append
        && out.metadata().map(|m| m.is_file()).unwrap_or(false)
        && rustix::fs::seek(out, rustix::fs::SeekFrom::Current(0)) == Ok(base);
    let offload = if reflink {
        Offload::of(out)
    } else {
        Offload::None
    };
    if !regular {
        let to = Target {
            out,
            name: out_name,
            positional: None,
            writeback: false,
            offload,
        };
        return write_range(layout, 0..layout.len(), &to, true);
    }
    let end = base + layout.size;
    // Sized up front: writers fill it at their offsets, padding stays holes.
    out.set_len(end).map_err(|e| Error::io(out_name, e))?;
    let to = Target {
        out,
        name: out_name,
        positional: Some(base),
        writeback,
        offload,
    };
    if threads <= 1 || layout.len() < 2 {
        let stats = write_range(layout, 0..layout.len(), &to, true)?;
        rustix::fs::seek(out, rustix::fs::SeekFrom::Start(end))
            .map_err(|e| Error::io(out_name, e.into()))?;
        return Ok(stats);
    }
    // Cut the records into `threads` runs of about equal size.
    let share = layout.size / threads as u64;
    let mut cuts = vec![0];
    for i in 0..layout.len() {
        if layout.offset(i) >= share * cuts.len() as u64 && cuts.len() < threads {
            cuts.push(i);
        }
    }
    cuts.push(layout.len());
    let results: Vec<Result<WriteStats>> = std::thread::scope(|scope| {
        let handles: Vec<_> = cuts
            .windows(2)
            .enumerate()
            .map(|(k, w)| {
                let records = w[0]..w[1];
                let last = k + 2 == cuts.len();
                let to = &to;
                scope.spawn(move || write_range(layout, records, to, last))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(Error::usage("internal error: a writer thread panicked"))
                })
            })
            .collect()
    });
    let mut total = WriteStats::default();
    for r in results {
        let s = r?;
        total.copy_file_range_bytes += s.copy_file_range_bytes;
        total.buffered_bytes += s.buffered_bytes;
        total.hole_bytes += s.hole_bytes;
    }
    total.bytes = layout.size;
    // Leave the file position at the end, as a sequential write would.
    rustix::fs::seek(out, rustix::fs::SeekFrom::Start(end))
        .map_err(|e| Error::io(out_name, e.into()))?;
    Ok(total)
}

/// Writes `records` (a run of the layout's) and, when `trailer`,
/// the trailer and the tail padding; at file offset `to.positional` +
/// archive offset when that is given, else at the file position.
fn write_range(
    layout: &Layout,
    records: std::ops::Range<usize>,
    to: &Target,
    trailer: bool,
) -> Result<WriteStats> {
    let Target {
        out,
        name: out_name,
        positional,
        writeback,
        offload,
    } = *to;
    let start = if records.is_empty() {
        layout.trailer_offset
    } else {
        layout.offset(records.start) - layout.record(records.start).lead as u64
    };
    let mut sink = Sink {
        out,
        out_name,
        buf: Vec::with_capacity(BUFFER + SMALL_FILE as usize),
        pos: start,
        base: positional.unwrap_or(0),
        positional: positional.is_some(),
        offload,
        writeback: (writeback && positional.is_some()).then_some(start),
        stats: WriteStats::default(),
    };
    let mut small = Vec::new();
    let mut ahead = Ahead::default();
    for i in records.clone() {
        let record = layout.record(i);
        sink.zeros(record.lead as u64)?;
        debug_assert_eq!(sink.pos, record.offset, "layout and writer disagree");
        let origin = &layout.entries()[record.entry].origin;
        let before = sink.pos;
        ahead.fill(layout, records.end, i);
        let opened = ahead.take(i);
        write_record(&mut sink, &record, opened, layout.crc(), origin, &mut small)?;
        crate::progress::advance(sink.pos - before + record.lead as u64);
        sink.start_writeback(false)?;
    }
    if trailer {
        debug_assert_eq!(sink.pos, layout.trailer_offset);
        sink.put(&layout.trailer().encode())?;
        sink.put(TRAILER_NAME)?;
        let end = sink.pos + 1;
        sink.zeros(1 + pad_to(end, 4))?;
        sink.zeros(pad_to(sink.pos, 512))?;
        debug_assert_eq!(sink.pos, layout.size);
    }
    sink.flush()?;
    sink.start_writeback(true)?;
    sink.stats.bytes = sink.pos;
    Ok(sink.stats)
}

/// Sources opened ahead of the writer, each with the kernel asked to read
/// it in (POSIX_FADV_WILLNEED), so that with a cold page cache the disk
/// reads the next files while the writer copies this one, instead of one
/// file at a time. Each source is still opened once: the writer takes the
/// descriptor opened here. An open that fails waits here, and is the
/// error when the writer reaches its record, as it would have been.
#[derive(Default)]
struct Ahead {
    /// (record index, what opening it gave, its size), in record order.
    queue: std::collections::VecDeque<(usize, std::result::Result<File, String>, u64)>,
    /// The next record to look at.
    next: usize,
    /// Data bytes in the queue.
    bytes: u64,
}

/// At most this many sources open ahead of the writer, and at most this
/// much data.
/// `./` pairs for readers-mode name padding (a name field is at most PATH_MAX bytes).
static DOT_SLASHES: [u8; PATH_MAX] = {
    let mut a = [b'/'; PATH_MAX];
    let mut i = 0;
    while i < a.len() {
        a[i] = b'.';
        i += 2;
    }
    a
};

const AHEAD_FILES: usize = 32;
const AHEAD_BYTES: u64 = 32 << 20;

impl Ahead {
    /// Opens sources of the layout's records from `at` on (up to `end`),
    /// within the bounds.
    fn fill(&mut self, layout: &Layout, end: usize, at: usize) {
        self.next = self.next.max(at);
        while self.next < end
            && self.queue.len() < AHEAD_FILES
            && (self.bytes < AHEAD_BYTES || self.queue.is_empty())
        {
            if let Some(source) = layout.source(self.next) {
                let opened = open_source(source);
                if let Ok(f) = &opened {
                    if source.size > 0 {
                        // Advice: an error changes nothing.
                        let _ = rustix::fs::fadvise(f, 0, None, rustix::fs::Advice::WillNeed);
                    }
                }
                self.bytes += source.size;
                self.queue.push_back((self.next, opened, source.size));
            }
            self.next += 1;
        }
    }

    /// What opening record `i`'s source gave, if it was opened ahead.
    fn take(&mut self, i: usize) -> Option<std::result::Result<File, String>> {
        if self.queue.front().is_some_and(|(k, _, _)| *k == i) {
            let (_, opened, size) = self.queue.pop_front()?;
            self.bytes -= size;
            return Some(opened);
        }
        None
    }
}

fn write_record(
    sink: &mut Sink,
    record: &Record,
    opened: Option<std::result::Result<File, String>>,
    crc: bool,
    origin: &Origin,
    small: &mut Vec<u8>,
) -> Result<()> {
    let mut header = record.header;
    let size = header.filesize as u64;
    let name_fill = record.name_field as u64 - record.prefix as u64 - record.name.len() as u64;
    let put_name = |sink: &mut Sink| -> Result<()> {
        sink.put(&DOT_SLASHES[..record.prefix as usize])?;
        sink.put(record.name)?;
        sink.zeros(name_fill)
    };
    match &record.data {
        Data::File(source) => {
            let path = source.path.as_path();
            let src = opened
                .unwrap_or_else(|| open_source(source))
                .map_err(|what| source_error(origin, source, what))?;
            let aligned = matches!(record.alignment, Alignment::Aligned(_));
            let read = at_source(origin, source);
            if size <= SMALL_FILE && !aligned {
                small.resize(size as usize, 0);
                let n = read_full(&mut &src, small).map_err(|e| read(Error::io(path, e)))?;
                if n < small.len() {
                    return Err(read(shrunk(path, size)));
                }
                if crc {
                    header.check = checksum(small);
                }
                sink.put(&header.encode())?;
                put_name(sink)?;
                sink.put(small)?;
                sink.stats.buffered_bytes += size;
            } else {
                if crc {
                    header.check = checksum_file(&src, path, size).map_err(&read)?;
                }
                sink.put(&header.encode())?;
                put_name(sink)?;
                sink.copy(&src, path, size, aligned).map_err(&read)?;
            }
            // What was copied is what was planned: the file did not change
            // (grow, or get rewritten) while it was read.
            let meta = src.metadata().map_err(|e| read(Error::io(path, e)))?;
            still_planned(source, &meta).map_err(|what| {
                source_error(origin, source, format_args!("{what} (while it was copied)"))
            })?;
        }
        Data::Target(target) => {
            sink.put(&header.encode())?;
            put_name(sink)?;
            sink.put(target)?;
            if size > target.len() as u64 {
                sink.put(&[0])?;
            }
        }
        Data::None => {
            sink.put(&header.encode())?;
            put_name(sink)?;
        }
    }
    sink.zeros(pad_to(size, 4))?;
    if sink.pos != record.data_offset() + size + pad_to(size, 4) {
        return Err(Error::usage(format!(
            "internal error: `{}` was written at the wrong place",
            crate::path::escape(record.name)
        )));
    }
    Ok(())
}

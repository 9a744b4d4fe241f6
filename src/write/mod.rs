//! Write: an [`ImageLayout`] becomes the image, in one temporary file
//! renamed into place at the end (or on a stream).
//!
//! * `archive`: one uncompressed archive, written by parallel writers at
//!   its planned offsets, aligned data shared (copy_file_range) where the
//!   filesystem clones blocks;
//! * `compressed`: one archive encoded on the fly;
//! * `output`: the atomic output file;
//! * `budget`: the room an image may take (free space, `max_size`).

mod archive;
mod budget;
mod compressed;
mod output;

pub use archive::WriteStats;
pub use budget::Limits;
pub use output::{remove_temporaries, Output};

use std::fs::File;
use std::io::{Seek, Write};

use crate::compress::Compression;
use crate::error::{Error, Result, Warning};
use crate::plan::{gap_before, Alignment, ImageLayout, Layout};

/// What a build did, for the caller to report.
#[derive(Debug, Default)]
pub struct BuildReport {
    pub warnings: Vec<Warning>,
    /// (name, alignment) of each file whose alignment was missed.
    pub misses: Vec<(Vec<u8>, u32)>,
    pub stats: WriteStats,
    /// The image's size in bytes.
    pub size: u64,
}

fn zeros(out: &File, out_name: &str, n: u64) -> Result<()> {
    const ZEROS: [u8; 4096] = [0; 4096];
    let mut left = n;
    let mut f = out;
    while left > 0 {
        let k = left.min(ZEROS.len() as u64) as usize;
        f.write_all(&ZEROS[..k])
            .map_err(|e| Error::io(out_name, e))?;
        left -= k as u64;
    }
    Ok(())
}

fn misses<'a>(layout: &'a Layout<'a>) -> impl Iterator<Item = (Vec<u8>, u32)> + 'a {
    layout.misses().filter_map(|r| match r.alignment {
        Alignment::Missed(a) => Some((r.name.to_vec(), a)),
        _ => None,
    })
}

/// Writes every segment in order into `out`, then commits it (fsync and
/// rename when `sync`). An image that does not fit its output's free space
/// or `max` is refused before anything is written (see [`budget`]).
/// A look at the finished image (its file and name) before it replaces
/// the old one; an error keeps the old one.
pub type BeforeCommit<'a> = &'a dyn Fn(&File, &str) -> Result<()>;

pub fn write_image(
    image: &ImageLayout,
    out: Output,
    sync: bool,
    max: Option<(u64, crate::entry::Origin)>,
    before_commit: Option<BeforeCommit>,
) -> Result<BuildReport> {
    let limits = Limits {
        free: out.free_space(),
        max,
    };
    let total = image.parts.iter().map(|p| p.layout.size).sum();
    crate::progress::start(crate::progress::Step::Writing, total);
    let report = match limits.bytes() {
        Some(limit) if budget::bound(image).0 > limit => {
            let (bound, exact) = budget::bound(image);
            if exact {
                return Err(budget::refuse(image, bound, &limits, true));
            }
            // Compressed: its size is known once written, in memory.
            let mem = memory_file()?;
            let report = write_parts(image, &mem, "the image in memory", false, false)?;
            if report.size > limit {
                return Err(budget::refuse(image, report.size, &limits, true));
            }
            let mut from = &mem;
            from.seek(std::io::SeekFrom::Start(0))
                .map_err(|e| Error::io("the image in memory", e))?;
            std::io::copy(&mut from, &mut out.file()).map_err(|e| Error::io(out.name(), e))?;
            report
        }
        _ => write_parts(image, out.file(), &out.name(), sync, image.reflink)?,
    };
    if let Some(check) = before_commit {
        check(out.file(), &out.name())?;
    }
    out.commit(sync)?;
    crate::progress::finish();
    Ok(report)
}

/// An anonymous file in memory.
fn memory_file() -> Result<File> {
    rustix::fs::memfd_create("composer-image", rustix::fs::MemfdFlags::CLOEXEC)
        .map(File::from)
        .map_err(|e| Error::io("a memory file for the image", e.into()))
}

/// Writes every segment in order into `file` from its start.
fn write_parts(
    image: &ImageLayout,
    file: &File,
    name: &str,
    sync: bool,
    reflink: bool,
) -> Result<BuildReport> {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
    let writers = cpus.min(4) as usize;
    let mut report = BuildReport::default();
    let mut pos: u64 = 0;
    let mut prev: Option<Compression> = None;
    for part in &image.parts {
        let segment = part.segment;
        let pad = gap_before(pos, prev, part.start_align);
        zeros(file, name, pad)?;
        pos += pad;
        debug_assert!(part.start.is_none_or(|s| s == pos));
        let layout = &part.layout;
        report.warnings.extend(layout.warnings.iter().cloned());
        if segment.compression == Compression::None {
            let how = archive::How {
                base: pos,
                writeback: sync,
                reflink,
            };
            let stats = archive::write_at(layout, file, name, writers, how)?;
            report.stats.copy_file_range_bytes += stats.copy_file_range_bytes;
            report.stats.buffered_bytes += stats.buffered_bytes;
            report.stats.hole_bytes += stats.hole_bytes;
            report.misses.extend(misses(layout));
            pos += layout.size;
        } else if !part.chunks.is_empty() {
            let opts = segment.encode_options(cpus);
            pos = compressed::write_chunks(&part.chunks, file, name, &opts, pos)?;
        } else {
            pos += compressed::write(layout, file, name, &segment.encode_options(cpus))?;
        }
        prev = Some(segment.compression);
    }
    report.stats.bytes = pos;
    report.size = pos;
    Ok(report)
}

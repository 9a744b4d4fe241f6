//! A whole image planned: each segment's layout and where it starts.
//!
//! The layout follows the kernel's unpacker (init/initramfs.c):
//! * an uncompressed archive starts at a 4-aligned file offset, and NULs
//!   between segments are skipped;
//! * data alignment counts from the start of the file: an uncompressed
//!   segment after others starts at a multiple of the largest alignment its
//!   files ask for, with zeros before it;
//! * a compressed stream is followed by NULs up to a 4-byte boundary when
//!   more follows; a legacy lz4 stream has no end marker, so four more NULs
//!   (an empty block) end it;
//! * alignment means nothing inside a compressed stream: its entries are
//!   laid out in order, unpadded;
//! * a compressed segment with a piece size (`chunk_size`) is cut at entry
//!   boundaries into archives of about that size, each with its own
//!   trailer (the kernel unpacks one compressed archive after another, and
//!   each must end where its stream ends); every name of a hardlinked file
//!   is one entry, so a hardlink group never spans two pieces.

use super::layout::{Layout, Options};
use crate::compress::Compression;
use crate::cpio::header::pad_to;
use crate::entry::{Entry, Kind};
use crate::policy::{AlignMode, Policy};
use crate::spec::{ImageSpec, SegmentSpec};

/// One segment as it will be written.
pub struct PartLayout<'a> {
    pub segment: &'a SegmentSpec,
    /// An uncompressed segment starts at a multiple of this (its largest
    /// data alignment, at least 4), so offsets inside it keep their
    /// alignment in the image; 0 for a compressed segment.
    pub start_align: u64,
    /// Where it starts in the image; None after a compressed segment, whose
    /// size is known only once written.
    pub start: Option<u64>,
    /// The whole segment as one archive (what `composer plan` shows).
    pub layout: Layout<'a>,
    /// The pieces the segment is written as, each an archive of its own
    /// compressed separately; empty when it is one stream.
    pub chunks: Vec<Chunk<'a>>,
}

/// One independently compressed piece of a segment.
pub struct Chunk<'a> {
    /// Its entries, a range of the segment's.
    pub entries: std::ops::Range<usize>,
    /// Those entries as an archive (record indices count from the range's start).
    pub layout: Layout<'a>,
}

/// Where a segment is cut into pieces of about `size` archive bytes: the
/// ranges of entries, cut only before the first record of an entry.
/// Depends on the layout alone, never on the machine.
fn chunk_ranges(layout: &Layout, entries: usize, size: u64) -> Vec<std::ops::Range<usize>> {
    // In order (a compressed segment keeps its entries' order); anything
    // else is not cut.
    if (1..layout.len()).any(|i| layout.entry(i) < layout.entry(i - 1)) {
        return std::iter::once(0..entries).collect();
    }
    let mut cuts = vec![0usize];
    let mut start = 0u64;
    let mut prev_entry = None;
    for i in 0..layout.len() {
        let (entry, offset) = (layout.entry(i), layout.offset(i));
        let new_entry = prev_entry != Some(entry);
        if new_entry && offset - start >= size && entry > *cuts.last().unwrap_or(&0) {
            cuts.push(entry);
            start = offset;
        }
        prev_entry = Some(entry);
    }
    cuts.push(entries);
    cuts.windows(2).map(|w| w[0]..w[1]).collect()
}

/// Every segment of an image, planned; what `composer plan` shows is what
/// `composer build` writes.
pub struct ImageLayout<'a> {
    pub parts: Vec<PartLayout<'a>>,
    /// The policy's choice: share data with the sources where the
    /// filesystem can.
    pub reflink: bool,
}

/// The largest data alignment the files of a segment ask for.
fn data_alignment(entries: &[Entry], default: u32) -> u32 {
    entries
        .iter()
        .filter_map(|e| {
            let Kind::File { source, .. } = &e.kind else {
                return None;
            };
            let a = e.align.resolve(default);
            (a > 0 && source.size > a as u64).then_some(a)
        })
        .max()
        .unwrap_or(0)
}

/// NULs between the end of one segment at `pos` and the start of the next
/// (`next_align`: 0 for a compressed segment).
pub fn gap_before(pos: u64, prev: Option<Compression>, next_align: u64) -> u64 {
    let mut pad = pad_to(pos, 4);
    if prev == Some(Compression::Lz4) {
        // The kernel's lz4 decoder reads a 4-byte size after the last block.
        pad += 4;
    }
    let at = pos + pad;
    pad + pad_to(at, next_align.max(4))
}

/// How the entries of `segment` are planned under `policy`.
fn options(segment: &SegmentSpec, policy: &Policy) -> Options {
    if segment.compression == Compression::None {
        Options {
            policy: *policy,
            hints: true,
        }
    } else {
        Options {
            policy: Policy {
                align: 0,
                mode: AlignMode::GenInitCpio,
                ..*policy
            },
            hints: false,
        }
    }
}

/// Plans every segment; starts are known up to the first compressed one.
pub fn plan(spec: &ImageSpec) -> ImageLayout<'_> {
    let mut pos = Some(0u64);
    let mut prev: Option<Compression> = None;
    let parts = spec
        .segments
        .iter()
        .map(|segment| {
            let opts = options(segment, &spec.policy);
            let layout = super::archive::plan(&segment.entries, &opts);
            let chunks = if segment.compression != Compression::None
                && segment.chunk > 0
                && layout.size > segment.chunk
            {
                chunk_ranges(&layout, segment.entries.len(), segment.chunk)
                    .into_iter()
                    .map(|range| Chunk {
                        layout: super::archive::plan(&segment.entries[range.clone()], &opts),
                        entries: range,
                    })
                    .collect()
            } else {
                Vec::new()
            };
            let start_align = match segment.compression {
                Compression::None => {
                    data_alignment(&segment.entries, spec.policy.align).max(4) as u64
                }
                _ => 0,
            };
            let start = pos.map(|p| p + gap_before(p, prev, start_align));
            pos = match (start, segment.compression) {
                (Some(s), Compression::None) => Some(s + layout.size),
                _ => None,
            };
            prev = Some(segment.compression);
            PartLayout {
                segment,
                start_align,
                start,
                layout,
                chunks,
            }
        })
        .collect();
    ImageLayout {
        parts,
        reflink: spec.policy.reflink,
    }
}

#[cfg(test)]
mod tests {
    use super::super::layout::test_file as file;
    use super::*;
    use crate::entry::AlignHint;

    #[test]
    fn alignment_of_a_segment() {
        let big = file("big", 100_000);
        let mut own = big.clone();
        own.align = AlignHint::bytes(65536);
        assert_eq!(data_alignment(std::slice::from_ref(&big), 4096), 4096);
        assert_eq!(data_alignment(&[big.clone(), own], 4096), 65536);
        assert_eq!(data_alignment(&[big], 0), 0);
    }

    #[test]
    fn chunks_cut_at_entries_and_cover_the_segment() {
        let entries: Vec<Entry> = (0..40)
            .map(|i| file(&format!("f{i:02}"), 1000 + i * 137))
            .collect();
        let opts = Options {
            policy: Policy {
                crc: false,
                align: 0,
                mtime: crate::policy::MtimePolicy {
                    fixed: Some(0),
                    now: 0,
                },
                mode: AlignMode::GenInitCpio,
                auto_align: false,
                reflink: true,
            },
            hints: false,
        };
        let layout = super::super::archive::plan(&entries, &opts);
        let ranges = chunk_ranges(&layout, entries.len(), 10_000);
        assert!(ranges.len() > 3, "{ranges:?}");
        assert_eq!(ranges.first().unwrap().start, 0);
        assert_eq!(ranges.last().unwrap().end, entries.len());
        for w in ranges.windows(2) {
            assert_eq!(w[0].end, w[1].start);
        }
        for r in &ranges[..ranges.len() - 1] {
            let piece = super::super::archive::plan(&entries[r.clone()], &opts);
            assert!(piece.size >= 10_000, "{r:?}: {}", piece.size);
            // About the size asked: at most one entry more.
            assert!(piece.size < 10_000 + 8192, "{r:?}: {}", piece.size);
        }
        let whole: Vec<_> = std::iter::once(0..40).collect();
        assert_eq!(chunk_ranges(&layout, entries.len(), 1 << 40), whole);
    }
}

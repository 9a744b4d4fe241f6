//! `composer plan`: the layout as a table or JSON, with totals and how far
//! the padding is from a lower bound.

use std::fmt::Write;

use super::image::ImageLayout;
use super::layout::{Alignment, Layout, Record};
use crate::compress::Compression;
use crate::cpio::header::{pad_to, HEADER_LEN};
use crate::entry::Entry;
use crate::path::escape;

/// Bytes of padding in a record: NULs before it, name NULs beyond the
/// minimum, or the whole record for a filler.
pub fn padding_of(r: &Record) -> u64 {
    if r.filler {
        return r.lead as u64 + r.data_offset() - r.offset;
    }
    let min_end = HEADER_LEN as u64 + r.name.len() as u64 + 1;
    let min_head = min_end + pad_to(min_end, 4);
    r.lead as u64 + (r.data_offset() - r.offset) - min_head
}

#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Summary {
    pub entries: usize,
    pub records: usize,
    /// Repeated directory entries used as padding.
    pub fillers: usize,
    pub eligible: usize,
    pub aligned: usize,
    pub missed: usize,
    pub padding_bytes: u64,
    pub archive_bytes: u64,
    /// No layout of these entries at these alignments needs less padding.
    pub padding_lower_bound: u64,
    /// What the planner has to say: why files missed, clamped times.
    pub notes: Vec<String>,
}

/// A lower bound for the padding of any layout of these records: before
/// the first aligned data there is at least one block; between consecutive
/// aligned data there is at least the tail of the first up to its next
/// block boundary (a block more when a header would not fit in the tail);
/// everything that is not aligned data can fill those spaces, and the rest
/// must be padding. The largest tail can be last, where it needs no filling.
pub fn lower_bound(layout: &Layout) -> u64 {
    let mut other: u64 = 0;
    let mut gaps: Vec<u64> = Vec::new();
    let mut first_block: u64 = 0;
    let min_head = layout
        .records()
        .filter(|r| r.alignment != Alignment::NotEligible)
        .map(|r| {
            let e = HEADER_LEN as u64 + r.name.len() as u64 + 1;
            e + pad_to(e, 4)
        })
        .min()
        .unwrap_or(0);
    for r in layout.records().filter(|r| !r.filler) {
        let size = r.header.filesize as u64;
        let min_end = HEADER_LEN as u64 + r.name.len() as u64 + 1;
        let head = min_end + pad_to(min_end, 4);
        match r.alignment {
            Alignment::Aligned(a) | Alignment::Missed(a) => {
                let a = a as u64;
                first_block = first_block.max(a);
                other += head;
                let tail = pad_to(size, a);
                gaps.push(if tail >= min_head { tail } else { tail + a });
            }
            Alignment::NotEligible => other += head + size + pad_to(size, 4),
        }
    }
    if gaps.is_empty() {
        return 0;
    }
    gaps.sort_unstable();
    gaps.pop();
    let needed = first_block + gaps.iter().sum::<u64>();
    needed.saturating_sub(other)
}

pub fn summarize(layout: &Layout, entries: &[Entry]) -> Summary {
    let mut s = Summary {
        entries: entries.len(),
        records: layout.len(),
        archive_bytes: layout.size,
        padding_lower_bound: lower_bound(layout),
        notes: layout.warnings.iter().map(|w| w.to_string()).collect(),
        ..Summary::default()
    };
    for r in layout.records() {
        s.padding_bytes += padding_of(&r);
        s.fillers += r.filler as usize;
        match r.alignment {
            Alignment::Aligned(_) => {
                s.eligible += 1;
                s.aligned += 1;
            }
            Alignment::Missed(_) => {
                s.eligible += 1;
                s.missed += 1;
            }
            Alignment::NotEligible => {}
        }
    }
    s
}

fn status(r: &Record) -> String {
    match r.alignment {
        _ if r.filler => "filler".into(),
        Alignment::Aligned(a) => format!("aligned {a}"),
        Alignment::Missed(a) => format!("MISSED {a}"),
        Alignment::NotEligible => "-".into(),
    }
}

/// A table, one line per record, then the totals.
pub fn render_text(layout: &Layout, summary: &Summary) -> String {
    let mut out = table(layout, 0);
    out.push_str(&summary_text(summary));
    out
}

/// One line per record, offsets counted from `base`.
fn table(layout: &Layout, base: u64) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>12} {:>12} {:>10} {:>8}  {:<14} name",
        "offset", "data", "size", "padding", "alignment"
    );
    for r in layout.records() {
        let _ = writeln!(
            out,
            "{:>12} {:>12} {:>10} {:>8}  {:<14} /{}",
            base + r.offset,
            base + r.data_offset(),
            r.header.filesize,
            padding_of(&r),
            status(&r),
            escape(r.name)
        );
    }
    out
}

pub fn summary_text(s: &Summary) -> String {
    let pct = |x: u64| {
        if s.archive_bytes == 0 {
            0.0
        } else {
            100.0 * x as f64 / s.archive_bytes as f64
        }
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} entries in {} records ({} fillers); {} eligible: {} aligned, {} missed",
        s.entries, s.records, s.fillers, s.eligible, s.aligned, s.missed
    );
    let distance = if s.missed > 0 {
        // A missed file needs no padding: the bound, which aligns every file,
        // does not compare.
        "which assumes every file aligned".to_string()
    } else {
        format!(
            "{} above it",
            s.padding_bytes.saturating_sub(s.padding_lower_bound)
        )
    };
    let _ = writeln!(
        out,
        "archive {} bytes; padding {} bytes ({:.3}%); lower bound {} bytes ({:.3}%), {distance}",
        s.archive_bytes,
        s.padding_bytes,
        pct(s.padding_bytes),
        s.padding_lower_bound,
        pct(s.padding_lower_bound),
    );
    for n in &s.notes {
        let _ = writeln!(out, "note: {n}");
    }
    if s.fillers > 0 {
        out.push_str(
            "note: fillers repeat a directory entry with identical metadata; listings show it more than once\n",
        );
    }
    out
}

#[derive(serde::Serialize)]
struct JsonRecord {
    name: String,
    offset: u64,
    data_offset: u64,
    size: u32,
    namesize: u32,
    padding: u64,
    alignment: String,
    filler: bool,
}

#[derive(serde::Serialize)]
struct JsonPlan {
    records: Vec<JsonRecord>,
    summary: Summary,
}

fn json_records(layout: &Layout) -> Vec<JsonRecord> {
    layout
        .records()
        .map(|r| JsonRecord {
            name: escape(r.name),
            offset: r.offset,
            data_offset: r.data_offset(),
            size: r.header.filesize,
            namesize: r.header.namesize,
            padding: padding_of(&r),
            alignment: match r.alignment {
                Alignment::Aligned(_) => "aligned",
                Alignment::Missed(_) => "missed",
                Alignment::NotEligible => "not-eligible",
            }
            .into(),
            filler: r.filler,
        })
        .collect()
}

pub fn render_json(layout: &Layout, summary: &Summary) -> String {
    let plan = JsonPlan {
        records: json_records(layout),
        summary: summary.clone(),
    };
    let mut s = serde_json::to_string_pretty(&plan).unwrap_or_default();
    s.push('\n');
    s
}

/// How `composer plan` shows a plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Table,
    /// Only the totals.
    Summary,
    Json,
}

/// An image's plan: for one plain archive its table (or JSON), else every
/// segment's; `plain` says which.
pub fn render(image: &ImageLayout, plain: bool, format: Format) -> String {
    if plain {
        if let [part] = image.parts.as_slice() {
            let summary = summarize(&part.layout, &part.segment.entries);
            return match format {
                Format::Json => render_json(&part.layout, &summary),
                Format::Summary => summary_text(&summary),
                Format::Table => render_text(&part.layout, &summary),
            };
        }
    }
    let views: Vec<SegmentView> = image
        .parts
        .iter()
        .map(|p| SegmentView {
            name: &p.segment.name,
            compression: p.segment.compression,
            start: p.start,
            start_align: p.start_align,
            layout: &p.layout,
            summary: summarize(&p.layout, &p.segment.entries),
        })
        .collect();
    match format {
        Format::Json => render_segments_json(&views),
        f => render_segments_text(&views, f == Format::Summary),
    }
}

/// One segment of an image's plan.
struct SegmentView<'a> {
    name: &'a str,
    compression: Compression,
    /// Where the segment starts in the image; None when a compressed
    /// segment comes before it (its size is known only once written).
    start: Option<u64>,
    /// The segment starts at a multiple of this (0: compressed).
    start_align: u64,
    layout: &'a Layout<'a>,
    summary: Summary,
}

/// The totals over every segment (archive bytes before compression).
fn total(views: &[SegmentView]) -> Summary {
    let mut t = Summary::default();
    for v in views {
        let s = &v.summary;
        t.entries += s.entries;
        t.records += s.records;
        t.fillers += s.fillers;
        t.eligible += s.eligible;
        t.aligned += s.aligned;
        t.missed += s.missed;
        t.padding_bytes += s.padding_bytes;
        t.archive_bytes += s.archive_bytes;
        t.padding_lower_bound += s.padding_lower_bound;
        t.notes.extend(s.notes.iter().cloned());
    }
    t
}

fn where_text(v: &SegmentView) -> String {
    match (v.compression, v.start) {
        (Compression::None, Some(s)) => format!("starts at {s}"),
        (Compression::None, None) => format!(
            "starts after a compressed segment, at a multiple of {}; offsets are from its start",
            v.start_align
        ),
        (_, Some(s)) => format!("starts at {s}; offsets are inside the uncompressed stream"),
        (_, None) => "offsets are inside the uncompressed stream".into(),
    }
}

/// Segment by segment: a heading, the table, the segment's totals; then
/// the image's totals.
fn render_segments_text(views: &[SegmentView], totals_only: bool) -> String {
    let mut out = String::new();
    for v in views {
        let _ = writeln!(
            out,
            "segment {} ({}): {}",
            v.name,
            v.compression,
            where_text(v)
        );
        if !totals_only {
            let base = if v.compression == Compression::None {
                v.start.unwrap_or(0)
            } else {
                0
            };
            out.push_str(&table(v.layout, base));
        }
        out.push_str(&summary_text(&v.summary));
        out.push('\n');
    }
    let t = total(views);
    let _ = writeln!(
        out,
        "image: {} segments; {} eligible: {} aligned, {} missed; padding {} bytes; {} bytes before compression",
        views.len(),
        t.eligible,
        t.aligned,
        t.missed,
        t.padding_bytes,
        t.archive_bytes
    );
    out
}

#[derive(serde::Serialize)]
struct JsonSegment {
    name: String,
    compression: &'static str,
    start: Option<u64>,
    start_align: u64,
    records: Vec<JsonRecord>,
    summary: Summary,
}

#[derive(serde::Serialize)]
struct JsonImage {
    segments: Vec<JsonSegment>,
    summary: Summary,
}

/// JSON of every segment; record offsets count from the segment's start.
fn render_segments_json(views: &[SegmentView]) -> String {
    let image = JsonImage {
        segments: views
            .iter()
            .map(|v| JsonSegment {
                name: v.name.to_string(),
                compression: v.compression.name(),
                start: v.start,
                start_align: v.start_align,
                records: json_records(v.layout),
                summary: v.summary.clone(),
            })
            .collect(),
        summary: total(views),
    };
    let mut s = serde_json::to_string_pretty(&image).unwrap_or_default();
    s.push('\n');
    s
}

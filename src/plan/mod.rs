//! Plan: decide every offset and every padding byte before anything is
//! written.
//!
//! Input: entries (sources already stat'ed) in archive order, and
//! [`PlanOptions`]. Output: a [`Layout`], a pure value that the writer turns
//! into bytes without further decisions. Nothing here touches the disk.

use crate::cpio::header::{pad_to, Header, HEADER_LEN, TRAILER_NAME};
use crate::entry::{AlignHint, Entry, Kind, Source, PATH_MAX};
use crate::error::Warning;

/// gen_init_cpio numbers inodes from here, one per entry.
pub const FIRST_INO: u32 = 721;

/// How entry mtimes are chosen when an entry has none of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MtimePolicy {
    /// `-t`: every entry, files included, gets this mtime.
    pub fixed: Option<u32>,
    /// Without `-t`: the mtime of non-file entries (gen_init_cpio uses the
    /// current time). Files keep their source's mtime, clamped to 32 bits.
    pub now: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlanOptions {
    /// Write `070702` headers with data checksums.
    pub crc: bool,
    /// Default data alignment in bytes; 0 for none.
    pub align: u32,
    pub mtime: MtimePolicy,
}

/// The data that follows a header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Data<'a> {
    None,
    /// Bytes held in memory (a symlink target and its NUL).
    Inline(Vec<u8>),
    /// The content of a source file, `size` bytes.
    File(&'a Source),
}

/// What the planner did about alignment for one record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Alignment {
    /// No alignment asked for, or the data is not larger than the alignment.
    NotEligible,
    Aligned(u32),
    Missed(u32),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record<'a> {
    /// Where the header starts in the archive.
    pub offset: u64,
    /// The header, except the checksum, which the writer fills in from the
    /// data it copies.
    pub header: Header,
    pub name: &'a [u8],
    /// Bytes from the end of the header to the start of the data: the name,
    /// its NUL, and every padding NUL.
    pub name_field: u32,
    pub data: Data<'a>,
    /// Index of the entry this record belongs to.
    pub entry: usize,
    pub alignment: Alignment,
}

impl Record<'_> {
    pub fn data_offset(&self) -> u64 {
        self.offset + HEADER_LEN as u64 + self.name_field as u64
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout<'a> {
    pub records: Vec<Record<'a>>,
    /// Where the trailer's header starts.
    pub trailer_offset: u64,
    /// The archive's size: the trailer, padded to a multiple of 512.
    pub size: u64,
    pub crc: bool,
    pub warnings: Vec<Warning>,
}

impl Layout<'_> {
    pub fn trailer(&self) -> Header {
        Header::trailer(self.crc)
    }

    pub fn misses(&self) -> impl Iterator<Item = &Record<'_>> {
        self.records
            .iter()
            .filter(|r| matches!(r.alignment, Alignment::Missed(_)))
    }
}

/// The alignment that applies to an entry's data.
fn alignment_for(entry: &Entry, default: u32) -> u32 {
    match entry.align {
        AlignHint::Default => default,
        AlignHint::Never => 0,
        AlignHint::Bytes(n) => n,
    }
}

fn clamp_mtime(entry: &Entry, secs: i64, warnings: &mut Vec<Warning>) -> u32 {
    let clamped = secs.clamp(0, u32::MAX as i64);
    if clamped != secs {
        warnings.push(Warning {
            origin: Some(entry.origin.clone()),
            message: format!(
                "source mtime {secs} does not fit the cpio header; clipped to {clamped}"
            ),
        });
    }
    clamped as u32
}

/// Lays the entries out in the given order with gen_init_cpio's alignment
/// rule: only the data-carrying name of a regular file larger than the
/// alignment is padded, by NULs after its own name, and the padding is
/// dropped (a miss) when it would push namesize past PATH_MAX.
pub fn layout_in_order<'a>(entries: &'a [Entry], opts: &PlanOptions) -> Layout<'a> {
    let mut records = Vec::with_capacity(entries.len());
    let mut warnings = Vec::new();
    let mut offset: u64 = 0;
    for (index, entry) in entries.iter().enumerate() {
        let ino = FIRST_INO.wrapping_add(index as u32);
        let mtime_default = |warnings: &mut Vec<Warning>| match (entry.mtime, opts.mtime.fixed) {
            (Some(t), _) | (None, Some(t)) => t,
            (None, None) => match &entry.kind {
                Kind::File { source, .. } => clamp_mtime(entry, source.mtime, warnings),
                _ => opts.mtime.now,
            },
        };
        let mtime = mtime_default(&mut warnings);
        let base = Header {
            crc: opts.crc,
            ino,
            mode: entry.mode_field(),
            uid: entry.uid,
            gid: entry.gid,
            nlink: 1,
            mtime,
            devmajor: 3,
            devminor: 1,
            ..Header::default()
        };
        let mut push = |name: &'a [u8], header: Header, data: Data<'a>, align: u32| {
            let namesize = name.len() as u64 + 1;
            let size = header.filesize as u64;
            let name_end = offset + HEADER_LEN as u64 + namesize;
            let mut alignment = Alignment::NotEligible;
            let mut pad = pad_to(name_end, 4);
            let mut namepad = 0;
            if align > 0 && size > align as u64 {
                let want = pad_to(name_end, align as u64);
                if namesize + want > PATH_MAX as u64 {
                    alignment = Alignment::Missed(align);
                } else {
                    alignment = Alignment::Aligned(align);
                    pad = want;
                    namepad = want;
                }
            }
            let record = Record {
                offset,
                header: Header {
                    namesize: (namesize + namepad) as u32,
                    ..header
                },
                name,
                name_field: (namesize + pad) as u32,
                data,
                entry: index,
                alignment,
            };
            offset = record.data_offset() + size + pad_to(size, 4);
            records.push(record);
        };
        match &entry.kind {
            Kind::File { source, links } => {
                let names: Vec<&'a [u8]> = entry.names().collect();
                let nlink = names.len() as u32;
                let align = alignment_for(entry, opts.align);
                for (i, name) in names.iter().enumerate() {
                    let last = i + 1 == names.len();
                    let header = Header {
                        nlink,
                        filesize: if last { source.size as u32 } else { 0 },
                        ..base
                    };
                    let data = if last { Data::File(source) } else { Data::None };
                    push(name, header, data, align);
                }
                debug_assert_eq!(names.len(), links.len() + 1);
            }
            Kind::Symlink { target } => {
                let mut data = target.clone();
                data.push(0);
                let header = Header {
                    filesize: data.len() as u32,
                    ..base
                };
                push(&entry.name, header, Data::Inline(data), 0);
            }
            Kind::Node { major, minor, .. } => {
                let header = Header {
                    rdevmajor: *major,
                    rdevminor: *minor,
                    ..base
                };
                push(&entry.name, header, Data::None, 0);
            }
            Kind::Dir | Kind::Pipe | Kind::Socket => {
                push(&entry.name, Header { nlink: 2, ..base }, Data::None, 0);
            }
        }
    }
    let trailer_offset = offset;
    let trailer_end = offset + HEADER_LEN as u64 + TRAILER_NAME.len() as u64 + 1;
    let trailer_end = trailer_end + pad_to(trailer_end, 4);
    let size = trailer_end + pad_to(trailer_end, 512);
    Layout {
        records,
        trailer_offset,
        size,
        crc: opts.crc,
        warnings,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entry::Origin;
    use std::path::PathBuf;

    fn file(name: &str, size: u64) -> Entry {
        let source = Source {
            path: PathBuf::from("/x"),
            size,
            mtime: 5,
        };
        Entry::new(
            name.as_bytes().to_vec(),
            Kind::File {
                source,
                links: vec![],
            },
            0o644,
            Origin::default(),
        )
    }

    fn opts(align: u32) -> PlanOptions {
        PlanOptions {
            crc: false,
            align,
            mtime: MtimePolicy {
                fixed: None,
                now: 9,
            },
        }
    }

    #[test]
    fn offsets_follow_gen_init_cpio() {
        let entries = vec![
            Entry::new(b"bin".to_vec(), Kind::Dir, 0o755, Origin::default()),
            file("bin/a", 5),
        ];
        let l = layout_in_order(&entries, &opts(0));
        // "bin\0" after the header: 110 + 4 = 114 -> padded to 116.
        assert_eq!(l.records[1].offset, 116);
        assert_eq!(l.records[1].data_offset(), 116 + 110 + 6);
        assert_eq!(l.records[0].header.mtime, 9);
        assert_eq!(l.records[1].header.mtime, 5);
        assert_eq!(l.records[0].header.nlink, 2);
        assert_eq!(l.size % 512, 0);
    }

    #[test]
    fn aligns_only_files_larger_than_the_alignment() {
        let entries = vec![file("a", 4096), file("b", 4097)];
        let l = layout_in_order(&entries, &opts(4096));
        assert_eq!(l.records[0].alignment, Alignment::NotEligible);
        assert_eq!(l.records[1].alignment, Alignment::Aligned(4096));
        assert_eq!(l.records[1].data_offset() % 4096, 0);
    }

    #[test]
    fn misses_when_namesize_would_pass_path_max() {
        let long = "n".repeat(4000);
        let entries = vec![file(&long, 70000), file(&long, 70000)];
        let l = layout_in_order(&entries, &opts(65536));
        assert_eq!(l.misses().count(), 2);
        assert!(l.records.iter().all(|r| r.header.namesize <= 4096));
    }
}

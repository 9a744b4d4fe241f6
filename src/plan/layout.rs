//! The layout of one archive: every record with its offset, its header
//! and its padding, as a pure value the writer turns into bytes. Also the
//! pieces the planners build it from ([`Proto`]: a record before it is
//! placed; [`Placed`]: with its padding decided; [`assemble`]).

use crate::cpio::header::{pad_to, Header, HEADER_LEN, TRAILER_NAME};
use crate::entry::{AlignHint, Entry, Kind, Source, PATH_MAX};
use crate::error::Warning;
use crate::policy::Policy;

/// gen_init_cpio numbers inodes from here, one per entry.
pub const FIRST_INO: u32 = 721;

/// How one archive is planned: the build's policy, and whether entries'
/// own alignment wishes count (they do not inside a compressed stream,
/// where alignment means nothing).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Options {
    pub policy: Policy,
    pub hints: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Data<'a> {
    None,
    /// A symlink's target: the data is these bytes and a NUL.
    Target(&'a [u8]),
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
    /// NUL bytes between the previous record and this header (kernel-only
    /// padding).
    pub lead: u32,
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
    /// A repeated directory entry that only fills space before an aligned
    /// file (same metadata as the directory's first entry).
    pub filler: bool,
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

/// The alignment that applies to an entry's data; `hints`: whether the
/// entry's own wish counts (not inside a compressed stream).
fn alignment_for(entry: &Entry, default: u32, hints: bool) -> u32 {
    if !hints {
        return 0;
    }
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
            details: Vec::new(),
        });
    }
    clamped as u32
}

/// One record before it is placed: everything but its offset and padding.
#[derive(Clone, Debug)]
pub(crate) struct Proto<'a> {
    /// The header with the minimal namesize (name + NUL).
    pub header: Header,
    pub name: &'a [u8],
    pub data: Data<'a>,
    pub entry: usize,
    /// The alignment asked for this record's data (0: none). Only the
    /// data-carrying name of a regular file asks.
    pub align: u32,
}

impl Proto<'_> {
    /// Whether its data must be aligned: data larger than the alignment, as
    /// gen_init_cpio decides.
    pub fn eligible(&self) -> bool {
        self.align > 0 && self.header.filesize as u64 > self.align as u64
    }

    /// Bytes from the header's start to the data's start, without padding.
    pub fn head(&self) -> u64 {
        let end = HEADER_LEN as u64 + self.header.namesize as u64;
        end + pad_to(end, 4)
    }

    /// The record's whole size without padding.
    pub fn size(&self) -> u64 {
        let data = self.header.filesize as u64;
        self.head() + data + pad_to(data, 4)
    }

    /// How many bytes padding the name can add to the record (namesize may
    /// grow to PATH_MAX); always a multiple of 4.
    pub fn slack(&self) -> u64 {
        let max_end = HEADER_LEN as u64 + PATH_MAX as u64;
        (max_end + pad_to(max_end, 4)).saturating_sub(self.head())
    }

    /// The extra name NULs that grow the record by `grow` bytes (a multiple
    /// of 4, at most [`Proto::slack`]).
    pub fn namepad_for(&self, grow: u64) -> u32 {
        if grow == 0 {
            return 0;
        }
        // Any namesize whose header end rounds up to the new head will do;
        // the largest such one may pass PATH_MAX by up to 3, so cap it.
        let namesize = (self.head() + grow - HEADER_LEN as u64).min(PATH_MAX as u64);
        (namesize - self.header.namesize as u64) as u32
    }
}

/// How many records the entries make: one per name.
pub(crate) fn records_of(entries: &[Entry]) -> usize {
    entries.iter().map(|e| e.names().count()).sum()
}

/// Whether the entry's data asks to be aligned: a regular file larger than
/// its alignment ([`Proto::eligible`] of its data-carrying record).
pub(crate) fn eligible(entry: &Entry, opts: &Options) -> bool {
    let Kind::File { source, .. } = &entry.kind else {
        return false;
    };
    let align = alignment_for(entry, opts.policy.align, opts.hints);
    align > 0 && source.size > align as u64
}

/// The records of one entry in write order: one per name (a hardlink group
/// has several; the data goes on the last).
pub(crate) fn protos<'a>(
    index: usize,
    entry: &'a Entry,
    opts: &Options,
    warnings: &mut Vec<Warning>,
) -> Vec<Proto<'a>> {
    let ino = FIRST_INO.wrapping_add(index as u32);
    // -t (or SOURCE_DATE_EPOCH) wins over everything, as in gen_init_cpio.
    let policy = &opts.policy;
    let mtime = match (policy.mtime.fixed, entry.mtime) {
        (Some(t), _) | (None, Some(t)) => t,
        (None, None) => match &entry.kind {
            Kind::File { source, .. } => clamp_mtime(entry, source.mtime, warnings),
            _ => policy.mtime.now,
        },
    };
    let base = Header {
        crc: policy.crc,
        ino,
        mode: entry.mode_field(),
        uid: entry.uid,
        gid: entry.gid,
        nlink: 1,
        mtime,
        devmajor: 3,
        devminor: 1,
        namesize: entry.name.len() as u32 + 1,
        ..Header::default()
    };
    let one = |header: Header, data: Data<'a>| Proto {
        header,
        name: &entry.name,
        data,
        entry: index,
        align: 0,
    };
    match &entry.kind {
        Kind::File { source, .. } => {
            let names: Vec<&'a [u8]> = entry.names().collect();
            let nlink = names.len() as u32;
            let align = alignment_for(entry, policy.align, opts.hints);
            names
                .iter()
                .enumerate()
                .map(|(i, name)| {
                    let last = i + 1 == names.len();
                    Proto {
                        header: Header {
                            nlink,
                            filesize: if last { source.size as u32 } else { 0 },
                            namesize: name.len() as u32 + 1,
                            ..base
                        },
                        name,
                        data: if last { Data::File(source) } else { Data::None },
                        entry: index,
                        align: if last { align } else { 0 },
                    }
                })
                .collect()
        }
        Kind::Symlink { target } => {
            let header = Header {
                filesize: target.len() as u32 + 1,
                ..base
            };
            vec![one(header, Data::Target(target))]
        }
        Kind::Node { major, minor, .. } => {
            let header = Header {
                rdevmajor: *major,
                rdevminor: *minor,
                ..base
            };
            vec![one(header, Data::None)]
        }
        Kind::Dir | Kind::Pipe | Kind::Socket => vec![one(Header { nlink: 2, ..base }, Data::None)],
    }
}

/// A record with its padding decided: `namepad` extra NULs in the name
/// (counted in namesize), `lead` NULs before the header.
#[derive(Clone, Debug)]
pub(crate) struct Placed<'a> {
    pub proto: Proto<'a>,
    pub namepad: u32,
    pub lead: u32,
    pub alignment: Alignment,
    pub filler: bool,
}

impl<'a> Placed<'a> {
    pub fn plain(proto: Proto<'a>) -> Self {
        Placed {
            proto,
            namepad: 0,
            lead: 0,
            alignment: Alignment::NotEligible,
            filler: false,
        }
    }
}

/// Computes every offset of placed records (`count` of them, as they
/// come) and the trailer.
pub(crate) fn assemble<'a>(
    placed: impl IntoIterator<Item = Placed<'a>>,
    count: usize,
    crc: bool,
    warnings: Vec<Warning>,
) -> Layout<'a> {
    let mut records = Vec::with_capacity(count);
    let mut offset: u64 = 0;
    for p in placed {
        offset += p.lead as u64;
        let namesize = p.proto.header.namesize as u64 + p.namepad as u64;
        let name_end = HEADER_LEN as u64 + namesize;
        let size = p.proto.header.filesize as u64;
        let record = Record {
            lead: p.lead,
            offset,
            header: Header {
                namesize: namesize as u32,
                ..p.proto.header
            },
            name: p.proto.name,
            name_field: (namesize + pad_to(name_end, 4)) as u32,
            data: p.proto.data,
            entry: p.proto.entry,
            alignment: p.alignment,
            filler: p.filler,
        };
        offset = record.data_offset() + size + pad_to(size, 4);
        records.push(record);
    }
    let trailer_offset = offset;
    let trailer_end = offset + HEADER_LEN as u64 + TRAILER_NAME.len() as u64 + 1;
    let trailer_end = trailer_end + pad_to(trailer_end, 4);
    let size = trailer_end + pad_to(trailer_end, 512);
    Layout {
        records,
        trailer_offset,
        size,
        crc,
        warnings,
    }
}

#[cfg(test)]
pub(crate) fn test_file(name: &str, size: u64) -> Entry {
    let mut source = Source::unresolved(std::path::PathBuf::from("/x"));
    source.size = size;
    source.mtime = 5;
    Entry::new(
        crate::path::ImagePath::generated(name),
        Kind::File {
            source: source.into(),
            links: vec![],
        },
        0o644,
        crate::entry::Origin::default(),
    )
}

//! The layout of one archive: every record with its offset, its header
//! and its padding, as a pure value the writer turns into bytes. Also the
//! pieces the planners build it from ([`Proto`]: a record before it is
//! placed; [`Placed`]: with its padding decided; [`assemble`]).

use crate::cpio::header::{pad_to, Header, HEADER_LEN, TRAILER_NAME};
use crate::entry::{Entry, Kind, Source, PATH_MAX};
use crate::error::Warning;
use crate::policy::{AlignMode, Policy};

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

/// One record of a layout, whole: what [`Layout::record`] makes of the
/// little the layout keeps of it and of its entry.
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
    /// Bytes of `./` written before the name (padding in readers mode: the
    /// same path to every reader, where NULs after the name are not to all;
    /// always even).
    pub prefix: u32,
    /// Bytes from the end of the header to the start of the data: the
    /// prefix, the name, its NUL, and every padding NUL.
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

/// One record as a layout keeps it: where it goes and the padding it got.
/// Its header, name and data follow from its entry ([`Layout::record`]):
/// 24 bytes a record, not a [`Record`]'s 136, so that an image of many
/// small entries is planned in little more memory than its entries take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Slot {
    offset: u64,
    /// Index of the entry (the format numbers inodes in 32 bits, so an
    /// image never has more entries than that).
    entry: u32,
    /// Which of the entry's names ([`Entry::names`]).
    name: u32,
    lead: u32,
    /// NULs added to the name (namesize stays within PATH_MAX, so this
    /// does too).
    namepad: u16,
    /// The alignment of [`Alignment::Aligned`] or [`Alignment::Missed`]
    /// (always a power of two), as its power.
    align: u8,
    /// [`Slot::ALIGNED`], [`Slot::MISSED`], [`Slot::FILLER`].
    flags: u8,
}

impl Slot {
    const ALIGNED: u8 = 1;
    const MISSED: u8 = 2;
    const FILLER: u8 = 4;

    fn alignment(&self) -> Alignment {
        if self.flags & Slot::ALIGNED != 0 {
            Alignment::Aligned(1 << self.align)
        } else if self.flags & Slot::MISSED != 0 {
            Alignment::Missed(1 << self.align)
        } else {
            Alignment::NotEligible
        }
    }

    fn filler(&self) -> bool {
        self.flags & Slot::FILLER != 0
    }
}

#[derive(Clone, Debug)]
pub struct Layout<'a> {
    /// The entries the records are of.
    entries: &'a [Entry],
    /// How they were planned (their headers follow from it).
    opts: Options,
    slots: Vec<Slot>,
    /// Where the trailer's header starts.
    pub trailer_offset: u64,
    /// The archive's size: the trailer, padded to a multiple of 512.
    pub size: u64,
    pub warnings: Vec<Warning>,
}

impl PartialEq for Layout<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.trailer_offset == other.trailer_offset
            && self.size == other.size
            && self.crc() == other.crc()
            && self.warnings == other.warnings
            && self.len() == other.len()
            && self.records().eq(other.records())
    }
}

impl Eq for Layout<'_> {}

impl<'a> Layout<'a> {
    pub fn trailer(&self) -> Header {
        Header::trailer(self.crc())
    }

    /// Whether the headers are `070702`, with data checksums.
    pub fn crc(&self) -> bool {
        self.opts.policy.crc
    }

    /// The entries the records are of.
    pub fn entries(&self) -> &'a [Entry] {
        self.entries
    }

    /// The source whose data record `i` carries, if any: what
    /// `record(i).data` names, without making the record.
    pub fn source(&self, i: usize) -> Option<&'a Source> {
        let s = &self.slots[i];
        match &self.entries[s.entry as usize].kind {
            Kind::File { source, links } if s.name as usize == links.len() => Some(source),
            _ => None,
        }
    }

    /// How many records the archive has (the trailer not counted).
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Record `i`, in archive order.
    pub fn record(&self, i: usize) -> Record<'a> {
        let s = &self.slots[i];
        let index = s.entry as usize;
        let p = proto(index, &self.entries[index], s.name as usize, &self.opts);
        let namesize = p.header.namesize as u64 + s.namepad as u64;
        let mut header = Header {
            namesize: namesize as u32,
            ..p.header
        };
        if s.filler() {
            header.nlink = 1;
        }
        // Readers mode pads names with `./` before them (an even count: the
        // planner asks for one); gen_init_cpio's rule with NULs after them.
        let prefix = match self.opts.policy.mode {
            AlignMode::Readers => s.namepad as u32,
            AlignMode::KernelOnly | AlignMode::GenInitCpio => 0,
        };
        Record {
            lead: s.lead,
            offset: s.offset,
            header,
            name: p.name,
            prefix,
            name_field: (namesize + pad_to(HEADER_LEN as u64 + namesize, 4)) as u32,
            data: p.data,
            entry: index,
            alignment: s.alignment(),
            filler: s.filler(),
        }
    }

    /// Every record, in archive order.
    pub fn records(&self) -> impl DoubleEndedIterator<Item = Record<'a>> + ExactSizeIterator + '_ {
        (0..self.slots.len()).map(|i| self.record(i))
    }

    /// Where record `i`'s header starts.
    pub fn offset(&self, i: usize) -> u64 {
        self.slots[i].offset
    }

    /// The index of the entry record `i` belongs to.
    pub fn entry(&self, i: usize) -> usize {
        self.slots[i].entry as usize
    }

    pub fn misses(&self) -> impl Iterator<Item = Record<'a>> + '_ {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.flags & Slot::MISSED != 0)
            .map(|(i, _)| self.record(i))
    }
}

/// The alignment that applies to an entry's data; `hints`: whether the
/// entry's own wish counts (not inside a compressed stream).
fn alignment_for(entry: &Entry, default: u32, hints: bool) -> u32 {
    if !hints {
        return 0;
    }
    entry.align.resolve(default)
}

/// One record before it is placed: everything but its offset and padding.
#[derive(Clone, Debug)]
pub(crate) struct Proto<'a> {
    /// The header with the minimal namesize (name + NUL).
    pub header: Header,
    pub name: &'a [u8],
    /// Which of the entry's names `name` is ([`Entry::names`]).
    pub k: u32,
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

    /// The extra name bytes that grow the record by `grow` bytes (a multiple
    /// of 4, at most [`Proto::slack`]): an even count, written as `./` pairs
    /// before the name in readers mode.
    pub fn namepad_for(&self, grow: u64) -> u32 {
        if grow == 0 {
            return 0;
        }
        // Any namesize whose header end rounds up to the new head will do
        // (four in a row do); the largest such one may pass PATH_MAX by up
        // to 3, so cap it, and one less is still one of them.
        let namesize = (self.head() + grow - HEADER_LEN as u64).min(PATH_MAX as u64);
        ((namesize - self.header.namesize as u64) as u32) & !1
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

/// The mtime of an entry's headers: -t (or SOURCE_DATE_EPOCH) wins over
/// everything, as in gen_init_cpio. With the source's own mtime when it
/// had to be clipped to fit the header.
fn mtime_of(entry: &Entry, policy: &Policy) -> (u32, Option<i64>) {
    match (policy.mtime.fixed, entry.mtime) {
        (Some(t), _) | (None, Some(t)) => (t, None),
        (None, None) => match &entry.kind {
            Kind::File { source, .. } => {
                let clipped = source.mtime.clamp(0, u32::MAX as i64);
                (
                    clipped as u32,
                    (clipped != source.mtime).then_some(source.mtime),
                )
            }
            _ => (policy.mtime.now, None),
        },
    }
}

/// The records of one entry in write order: one per name (a hardlink group
/// has several; the data goes on the last).
pub(crate) fn protos<'a>(
    index: usize,
    entry: &'a Entry,
    opts: &Options,
    warnings: &mut Vec<Warning>,
) -> Vec<Proto<'a>> {
    if let (t, Some(secs)) = mtime_of(entry, &opts.policy) {
        warnings.push(Warning {
            origin: Some(entry.origin.clone()),
            message: format!("source mtime {secs} does not fit the cpio header; clipped to {t}"),
            details: Vec::new(),
        });
    }
    (0..entry.names().count())
        .map(|k| proto(index, entry, k, opts))
        .collect()
}

/// Record `k` of an entry ([`protos`]).
fn proto<'a>(index: usize, entry: &'a Entry, k: usize, opts: &Options) -> Proto<'a> {
    let policy = &opts.policy;
    let base = Header {
        crc: policy.crc,
        ino: FIRST_INO.wrapping_add(index as u32),
        mode: entry.mode_field(),
        uid: entry.uid,
        gid: entry.gid,
        nlink: 1,
        mtime: mtime_of(entry, policy).0,
        devmajor: 3,
        devminor: 1,
        namesize: entry.name.len() as u32 + 1,
        ..Header::default()
    };
    let one = |header: Header, data: Data<'a>| Proto {
        header,
        name: &entry.name,
        k: 0,
        data,
        entry: index,
        align: 0,
    };
    match &entry.kind {
        Kind::File { source, links } => {
            let nlink = links.len() as u32 + 1;
            let name: &'a [u8] = match k {
                0 => &entry.name,
                k => &links[k - 1],
            };
            let last = k == links.len();
            Proto {
                header: Header {
                    nlink,
                    filesize: if last { source.size as u32 } else { 0 },
                    namesize: name.len() as u32 + 1,
                    ..base
                },
                name,
                k: k as u32,
                data: if last { Data::File(source) } else { Data::None },
                entry: index,
                align: if last {
                    alignment_for(entry, policy.align, opts.hints)
                } else {
                    0
                },
            }
        }
        Kind::Symlink { target } => {
            // gen_init_cpio stores the target with its NUL; GNU cpio and
            // bsdtar without, and 3cpio only extracts those. The kernel reads
            // both.
            let nul = u32::from(policy.mode == AlignMode::GenInitCpio);
            let header = Header {
                filesize: target.len() as u32 + nul,
                ..base
            };
            one(header, Data::Target(target))
        }
        Kind::Node { major, minor, .. } => {
            let header = Header {
                rdevmajor: *major,
                rdevminor: *minor,
                ..base
            };
            one(header, Data::None)
        }
        Kind::Dir | Kind::Pipe | Kind::Socket => one(Header { nlink: 2, ..base }, Data::None),
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
/// come, of `entries` planned with `opts`) and the trailer.
pub(crate) fn assemble<'a>(
    entries: &'a [Entry],
    opts: &Options,
    placed: impl IntoIterator<Item = Placed<'a>>,
    count: usize,
    warnings: Vec<Warning>,
) -> Layout<'a> {
    let mut slots = Vec::with_capacity(count);
    let mut offset: u64 = 0;
    for p in placed {
        offset += p.lead as u64;
        let namesize = p.proto.header.namesize as u64 + p.namepad as u64;
        let name_end = HEADER_LEN as u64 + namesize;
        let size = p.proto.header.filesize as u64;
        let (mut flags, align) = match p.alignment {
            Alignment::NotEligible => (0, 0),
            Alignment::Aligned(a) => (Slot::ALIGNED, a),
            Alignment::Missed(a) => (Slot::MISSED, a),
        };
        debug_assert!(align == 0 || align.is_power_of_two(), "alignment {align}");
        if p.filler {
            flags |= Slot::FILLER;
        }
        slots.push(Slot {
            offset,
            entry: u32::try_from(p.proto.entry).expect("cpio numbers inodes in 32 bits"),
            name: p.proto.k,
            lead: p.lead,
            namepad: u16::try_from(p.namepad).expect("namesize stays within PATH_MAX"),
            align: align.trailing_zeros() as u8,
            flags,
        });
        offset += name_end + pad_to(name_end, 4) + size + pad_to(size, 4);
    }
    let trailer_offset = offset;
    let trailer_end = offset + HEADER_LEN as u64 + TRAILER_NAME.len() as u64 + 1;
    let trailer_end = trailer_end + pad_to(trailer_end, 4);
    let size = trailer_end + pad_to(trailer_end, 512);
    Layout {
        entries,
        opts: *opts,
        slots,
        trailer_offset,
        size,
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
            links: crate::entry::Links::default(),
        },
        0o644,
        crate::entry::Origin::default(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A layout keeps a record per archive entry: keep it small.
    #[test]
    fn a_record_is_kept_in_24_bytes() {
        assert_eq!(std::mem::size_of::<Slot>(), 24);
    }
}

//! gen_init_cpio's rule, in the given order: only the data-carrying name
//! of a regular file larger than the alignment is padded, by NULs after
//! its own name, and the padding is dropped (a miss) when it would push
//! namesize past PATH_MAX.

use super::layout::{assemble, protos, records_of, Alignment, Layout, Options, Placed};
use crate::cpio::header::{pad_to, HEADER_LEN};
use crate::entry::{Entry, PATH_MAX};

/// Lays the entries out in the given order with gen_init_cpio's alignment
/// rule: only the data-carrying name of a regular file larger than the
/// alignment is padded, by NULs after its own name, and the padding is
/// dropped (a miss) when it would push namesize past PATH_MAX.
pub(crate) fn plan<'a>(entries: &'a [Entry], opts: &Options) -> Layout<'a> {
    let mut warnings = Vec::new();
    let mut offset: u64 = 0;
    // Placed as they are laid out: the records are the only list.
    let placed = entries
        .iter()
        .enumerate()
        .flat_map(|(index, entry)| protos(index, entry, opts, &mut warnings))
        .map(|proto| {
            let mut p = Placed::plain(proto);
            if p.proto.eligible() {
                let align = p.proto.align as u64;
                let namesize = p.proto.header.namesize as u64;
                let want = pad_to(offset + HEADER_LEN as u64 + namesize, align);
                if namesize + want > PATH_MAX as u64 {
                    p.alignment = Alignment::Missed(align as u32);
                } else {
                    p.alignment = Alignment::Aligned(align as u32);
                    p.namepad = want as u32;
                }
            }
            let namesize = p.proto.header.namesize as u64 + p.namepad as u64;
            let end = offset + HEADER_LEN as u64 + namesize;
            let size = p.proto.header.filesize as u64;
            offset = end + pad_to(end, 4) + size + pad_to(size, 4);
            p
        });
    let mut layout = assemble(entries, opts, placed, records_of(entries), Vec::new());
    layout.warnings = warnings;
    layout
}

#[cfg(test)]
mod tests {
    use super::super::layout::test_file as file;
    use super::*;
    use crate::entry::{Kind, Origin};
    use crate::path::ImagePath;
    use crate::policy::{AlignMode, MtimePolicy, Policy};

    fn opts(align: u32) -> Options {
        let policy = Policy {
            crc: false,
            mode: AlignMode::GenInitCpio,
            align,
            mtime: MtimePolicy {
                fixed: None,
                now: 9,
            },
            auto_align: false,
            reflink: true,
        };
        Options {
            policy,
            hints: true,
        }
    }

    #[test]
    fn offsets_follow_gen_init_cpio() {
        let entries = vec![
            Entry::new(
                ImagePath::generated("bin"),
                Kind::Dir,
                0o755,
                Origin::default(),
            ),
            file("bin/a", 5),
        ];
        let l = plan(&entries, &opts(0));
        // "bin\0" after the header: 110 + 4 = 114 -> padded to 116.
        assert_eq!(l.record(1).offset, 116);
        assert_eq!(l.record(1).data_offset(), 116 + 110 + 6);
        assert_eq!(l.record(0).header.mtime, 9);
        assert_eq!(l.record(1).header.mtime, 5);
        assert_eq!(l.record(0).header.nlink, 2);
        assert_eq!(l.size % 512, 0);
    }

    #[test]
    fn aligns_only_files_larger_than_the_alignment() {
        let entries = vec![file("a", 4096), file("b", 4097)];
        let l = plan(&entries, &opts(4096));
        assert_eq!(l.record(0).alignment, Alignment::NotEligible);
        assert_eq!(l.record(1).alignment, Alignment::Aligned(4096));
        assert_eq!(l.record(1).data_offset() % 4096, 0);
    }

    #[test]
    fn misses_when_namesize_would_pass_path_max() {
        let long = "n".repeat(4000);
        let entries = vec![file(&long, 70000), file(&long, 70000)];
        let l = plan(&entries, &opts(65536));
        assert_eq!(l.misses().count(), 2);
        assert!(l.records().all(|r| r.header.namesize <= 4096));
    }
}

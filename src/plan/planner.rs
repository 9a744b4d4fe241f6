//! The alignment planner: every eligible file's data block-aligned, with as
//! little padding as it can.
//!
//! The archive is built front to back. Directories go first (so every
//! entry's parent exists whatever order the rest takes, and their names can
//! take padding). Then each file that needs alignment ("big") is placed
//! after the gap its predecessor left: the gap is filled with whole small
//! entries (symlinks, devices, files not larger than the alignment), the
//! largest that still fits first, and whatever is left is padding:
//!
//! * readers mode: NULs in the names of the entries in the gap and of the
//!   big file itself (each namesize stays <= PATH_MAX), and when that is not
//!   enough, repeated entries of an existing directory with padded names
//!   (identical metadata, so every reader just sees the directory again);
//! * kernel-only mode: NUL bytes between entries, which the kernel skips and
//!   other readers reject.
//!
//! Small entries left over go last, in their original order.

use std::collections::BTreeMap;

use super::layout::{
    assemble, eligible, protos, records_of, Alignment, Layout, Options, Placed, Proto,
};
use crate::cpio::header::pad_to;
use crate::entry::{Entry, Kind};
use crate::policy::AlignMode;

struct Unit<'a> {
    protos: Vec<Proto<'a>>,
    size: u64,
}

impl<'a> Unit<'a> {
    fn new(protos: Vec<Proto<'a>>) -> Self {
        let size = protos.iter().map(Proto::size).sum();
        Unit { protos, size }
    }

    fn big(&self) -> bool {
        self.protos.last().is_some_and(Proto::eligible)
    }

    /// Bytes from the unit's start to its data (the data is on the last
    /// record).
    fn head(&self) -> u64 {
        self.size - self.protos.last().map_or(0, |p| p.size() - p.head())
    }
}

/// Small units by size, for "the largest that fits" in O(log n).
struct Pool {
    by_size: BTreeMap<u64, Vec<usize>>,
}

impl Pool {
    fn take_fitting(&mut self, room: u64) -> Option<usize> {
        let (&size, list) = self.by_size.range_mut(..=room).next_back()?;
        let i = list.pop();
        if list.is_empty() {
            self.by_size.remove(&size);
        }
        i
    }

    fn rest(self) -> Vec<usize> {
        let mut v: Vec<usize> = self.by_size.into_values().flatten().collect();
        v.sort_unstable();
        v
    }
}

pub(super) fn plan<'a>(entries: &'a [Entry], opts: &Options) -> Layout<'a> {
    let mut warnings = Vec::new();
    let count = records_of(entries);
    if !entries.iter().any(|e| eligible(e, opts)) {
        // Nothing to align: keep the order as given.
        let placed = entries
            .iter()
            .enumerate()
            .flat_map(|(i, e)| protos(i, e, opts, &mut warnings))
            .map(Placed::plain);
        let mut layout = assemble(entries, opts, placed, count, Vec::new());
        layout.warnings = warnings;
        return layout;
    }
    let mut dirs: Vec<Proto<'a>> = Vec::new();
    let mut units: Vec<Unit<'a>> = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        let ps = protos(i, e, opts, &mut warnings);
        if e.kind == Kind::Dir {
            dirs.extend(ps);
        } else {
            units.push(Unit::new(ps));
        }
    }

    // The directory to repeat as a filler: the shortest name holds the most
    // padding and costs the least. Its copies say nlink 1: readers that track
    // hardlinks by inode for every type (libarchive: bsdtar, 3cpio's peers)
    // would otherwise take a copy for a hardlink of the directory to itself
    // and fail ("Skipping hardlink pointing to itself"). The kernel and GNU
    // cpio ignore nlink on directories.
    let filler = dirs
        .iter()
        .min_by_key(|d| (d.header.namesize, d.entry))
        .cloned()
        .map(|mut d| {
            d.header.nlink = 1;
            d
        });

    let mut missed: Vec<usize> = Vec::new();
    let mut placed: Vec<Placed<'a>> = Vec::with_capacity(entries.len() + 16);
    let mut offset: u64 = 0;
    for d in dirs {
        offset += d.size();
        placed.push(Placed::plain(d));
    }

    let mut pool = Pool {
        by_size: BTreeMap::new(),
    };
    let mut bigs = Vec::new();
    for (i, u) in units.iter().enumerate().rev() {
        if u.big() {
            bigs.push(i);
        } else {
            pool.by_size.entry(u.size).or_default().push(i);
        }
    }
    bigs.reverse();

    for &b in &bigs {
        let unit = &units[b];
        let align = unit.protos.last().map_or(0, |p| p.align) as u64;
        let head = unit.head();
        // Whole small units into the gap, largest that fits first.
        let gap_start = placed.len();
        while let Some(i) = {
            let room = pad_to(offset + head, align);
            if room == 0 {
                None
            } else {
                pool.take_fitting(room)
            }
        } {
            offset += units[i].size;
            placed.extend(units[i].protos.iter().cloned().map(Placed::plain));
        }
        let mut need = pad_to(offset + head, align);
        let mut own: Vec<Placed<'a>> = unit.protos.iter().cloned().map(Placed::plain).collect();
        let mut fillers: Vec<Placed<'a>> = Vec::new();
        let mut alignment = Alignment::Aligned(align as u32);
        if need > 0 {
            match opts.policy.mode {
                AlignMode::KernelOnly => own[0].lead = need as u32,
                _ => {
                    let slack: u64 = own.iter().map(|p| p.proto.slack()).sum::<u64>()
                        + placed[gap_start..]
                            .iter()
                            .map(|p| p.proto.slack())
                            .sum::<u64>();
                    match fillers_for(&mut need, slack, align, filler.as_ref()) {
                        Some(k) => {
                            let f = filler.as_ref().map(|f| (f.size(), f.clone()));
                            if let Some((fsize, proto)) = f {
                                for _ in 0..k {
                                    let mut p = Placed::plain(proto.clone());
                                    p.filler = true;
                                    fillers.push(p);
                                }
                                let mut rest = need - k as u64 * fsize;
                                // Spread: the big file's own names, then the
                                // fillers, then the gap's entries, last first.
                                let targets = own
                                    .iter_mut()
                                    .rev()
                                    .chain(fillers.iter_mut())
                                    .chain(placed[gap_start..].iter_mut().rev());
                                for p in targets {
                                    if rest == 0 {
                                        break;
                                    }
                                    let grow = rest.min(p.proto.slack());
                                    p.namepad = p.proto.namepad_for(grow);
                                    rest -= grow;
                                }
                                debug_assert_eq!(rest, 0);
                            } else {
                                let mut rest = need;
                                let targets = own
                                    .iter_mut()
                                    .rev()
                                    .chain(placed[gap_start..].iter_mut().rev());
                                for p in targets {
                                    let grow = rest.min(p.proto.slack());
                                    p.namepad = p.proto.namepad_for(grow);
                                    rest -= grow;
                                }
                            }
                        }
                        None => {
                            alignment = Alignment::Missed(align as u32);
                            missed.push(b);
                            need = 0;
                        }
                    }
                }
            }
        }
        if let Some(last) = own.last_mut() {
            last.alignment = alignment;
        }
        offset += need + unit.size;
        placed.append(&mut fillers);
        placed.append(&mut own);
    }
    for i in pool.rest() {
        placed.extend(units[i].protos.iter().cloned().map(Placed::plain));
    }
    if let Some(&first) = missed.first() {
        let p = units[first].protos.last().expect("a unit has a record");
        warnings.push(crate::error::Warning {
            origin: Some(entries[p.entry].origin.clone()),
            message: format!(
                "{} of {} files cannot be aligned in readers mode (the first: /{}): \
                 the image has no directory entry to repeat as padding, and the names \
                 before each file hold at most 4,096 bytes of it; add a directory to \
                 the image, or use kernel-only mode (`--align-mode kernel-only`, or \
                 align_mode = \"kernel-only\" in [image]) if only the kernel reads it",
                missed.len(),
                bigs.len(),
                entries[p.entry].name
            ),
            details: missed
                .iter()
                .map(|&u| {
                    let p = units[u].protos.last().expect("a unit has a record");
                    format!(
                        "/{} cannot be aligned in readers mode (no directory entry to repeat as padding)",
                        entries[p.entry].name
                    )
                })
                .collect(),
        });
    }
    let count = placed.len();
    assemble(entries, opts, placed, count, warnings)
}

/// How many filler entries make `need` bytes of padding possible, given
/// `slack` bytes of name padding in place; raises `need` by whole blocks
/// when a filler would overshoot. `None` when there is no directory to
/// repeat and the names cannot hold the padding.
fn fillers_for(need: &mut u64, slack: u64, align: u64, filler: Option<&Proto>) -> Option<u32> {
    if *need <= slack {
        return Some(0);
    }
    let f = filler?;
    let (size, room) = (f.size(), f.slack());
    let mut k: u64 = 0;
    for _ in 0..1_000_000 {
        let fixed = k * size;
        if *need >= fixed && *need - fixed <= slack + k * room {
            return Some(k as u32);
        }
        if *need < fixed {
            *need += align;
        } else {
            k += 1;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::super::layout::{test_file as file, Options};
    use super::plan as plan_any;
    use crate::entry::{Entry, Kind, Origin};
    use crate::policy::{AlignMode, MtimePolicy, Policy};

    fn dir(name: &str) -> Entry {
        Entry::new(
            crate::path::ImagePath::generated(name),
            Kind::Dir,
            0o755,
            Origin::default(),
        )
    }

    fn opts(align: u32, mode: AlignMode) -> Options {
        Options {
            policy: Policy {
                crc: false,
                align,
                mode,
                mtime: MtimePolicy {
                    fixed: Some(0),
                    now: 0,
                },
                auto_align: false,
                reflink: true,
            },
            hints: true,
        }
    }

    /// A deterministic mix: a few dirs, many files of varied sizes, names
    /// of every length up to 4,000 bytes.
    fn corpus() -> Vec<Entry> {
        let mut v = vec![dir("d"), dir("d/e")];
        let mut x: u64 = 12345;
        for i in 0..400 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let size = (x >> 33) % 200_000;
            let len = 1 + ((x >> 20) % 3900) as usize * (i % 3 == 0) as usize;
            let name = format!("d/e/{}{}", "n".repeat(len), i);
            v.push(file(&name, size));
        }
        v
    }

    #[test]
    fn every_eligible_file_is_aligned_and_names_stay_within_path_max() {
        for align in [4096, 16384, 65536] {
            for mode in [AlignMode::Readers, AlignMode::KernelOnly] {
                let entries = corpus();
                let l = plan_any(&entries, &opts(align, mode));
                let mut eligible = 0;
                for r in l.records() {
                    assert!(r.header.namesize <= 4096);
                    if r.header.filesize as u64 > align as u64 {
                        eligible += 1;
                        assert_eq!(r.data_offset() % align as u64, 0, "{align} {mode:?}");
                    }
                    if mode == AlignMode::Readers {
                        assert_eq!(r.lead, 0);
                    }
                }
                assert!(eligible > 100);
                assert_eq!(l.misses().count(), 0);
                // Every entry is there once (fillers aside).
                let mut seen: Vec<usize> =
                    l.records().filter(|r| !r.filler).map(|r| r.entry).collect();
                seen.sort_unstable();
                assert_eq!(seen, (0..entries.len()).collect::<Vec<_>>());
                // Parents first.
                let pos = |n: &[u8]| l.records().position(|r| r.name == n).unwrap();
                assert!(pos(b"d") < pos(b"d/e"));
                for (i, r) in l.records().enumerate() {
                    if r.name.starts_with(b"d/e/") {
                        assert!(pos(b"d/e") < i);
                    }
                }
            }
        }
    }

    #[test]
    fn without_alignment_the_order_is_kept() {
        let entries = vec![dir("a"), file("a/x", 10), dir("b"), file("b/y", 5000)];
        let l = plan_any(&entries, &opts(0, AlignMode::Readers));
        let names: Vec<&[u8]> = l.records().map(|r| r.name).collect();
        assert_eq!(names, [&b"a"[..], b"a/x", b"b", b"b/y"]);
    }

    #[test]
    fn no_directory_and_no_room_is_a_miss() {
        // Two big files with no directory to repeat: the second one's gap
        // (almost a whole block) cannot fit in two names.
        let entries = vec![file("a", 4097 * 8 + 8), file("b", 70000)];
        let l = plan_any(&entries, &opts(65536, AlignMode::Readers));
        assert!(l.misses().count() >= 1);
        let why = l
            .warnings
            .iter()
            .map(|w| w.message.as_str())
            .collect::<String>();
        assert!(why.contains("no directory entry to repeat"), "{why}");
        assert!(why.contains("kernel-only"), "{why}");
        let l = plan_any(&entries, &opts(65536, AlignMode::KernelOnly));
        assert_eq!(l.misses().count(), 0);
    }
}

//! Property tests: random images of every entry type (hardlink groups, names that are
//! not UTF-8, sizes around alignment boundaries) are planned and written under random
//! policies; the plan keeps its invariants, composer's reader gives back the same
//! entries, and GNU cpio and bsdtar extract the same tree.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use composer::entry::{DeviceKind, Entry, Kind, Origin, Source};
use composer::image::{Image, Want};
use composer::path::ImagePath;
use composer::plan::Alignment;
use composer::policy::{AlignMode, MtimePolicy, Policy};
use composer::spec::ImageSpec;
use composer::write::Output;
use proptest::prelude::*;

use crate::support::{self, Scratch};

/// One entry to make, below a directory of the tree.
#[derive(Clone, Debug)]
enum Item {
    File { size: usize, links: usize },
    Dir,
    Symlink(Vec<u8>),
    Node(bool, u32, u32),
    Pipe,
    Socket,
}

fn name_strategy() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        // Plain names, some long enough that padding has little room.
        "[a-z]{1,12}".prop_map(String::into_bytes),
        "[a-z]{200,250}".prop_map(String::into_bytes),
        // Bytes that are not UTF-8, spaces and odd punctuation (never `/` or NUL).
        prop::collection::vec(
            prop_oneof![1u8..=46, 48u8..=255].prop_filter("no dots only", |b| *b != b'.'),
            1..10
        ),
    ]
}

fn size_strategy() -> impl Strategy<Value = usize> {
    prop_oneof![
        0usize..10,
        // Around the alignments the policies use.
        (0usize..4).prop_map(|k| [511, 512, 513, 4095, 4096, 4097, 8191, 65537][k * 2]),
        prop::sample::select(vec![
            511, 512, 513, 4095, 4096, 4097, 8191, 8193, 65536, 65537
        ]),
        10usize..20_000,
    ]
}

fn item_strategy() -> impl Strategy<Value = Item> {
    prop_oneof![
        4 => (size_strategy(), 0usize..3).prop_map(|(size, links)| Item::File { size, links }),
        2 => Just(Item::Dir),
        1 => name_strategy().prop_map(Item::Symlink),
        1 => (any::<bool>(), 0u32..300, 0u32..300).prop_map(|(b, ma, mi)| Item::Node(b, ma, mi)),
        1 => Just(Item::Pipe),
        1 => Just(Item::Socket),
    ]
}

fn policy_strategy() -> impl Strategy<Value = Policy> {
    (
        prop::sample::select(vec![0u32, 4, 512, 4096, 65536]),
        prop::sample::select(vec![
            AlignMode::Readers,
            AlignMode::KernelOnly,
            AlignMode::GenInitCpio,
        ]),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(align, mode, crc, reflink)| Policy {
            crc,
            align,
            mtime: MtimePolicy {
                fixed: Some(1_700_000_000),
                now: 0,
            },
            mode,
            auto_align: false,
            reflink,
        })
}

/// Entries in sorted order (parents first) over sources written into `dir`,
/// and the content each regular name must have.
fn entries(
    dir: &Path,
    items: &[(usize, Vec<u8>, Item)],
) -> (Vec<Entry>, BTreeMap<Vec<u8>, Vec<u8>>) {
    let origin = Origin::default();
    let name = |b: &[u8]| ImagePath::list(b, &origin).expect("a valid name");
    // Directories: the first of every three items' parents, nested.
    let mut dirs: Vec<Vec<u8>> = vec![b"top".to_vec()];
    let mut out: BTreeMap<Vec<u8>, Entry> = BTreeMap::new();
    let mut content = BTreeMap::new();
    out.insert(
        b"top".to_vec(),
        Entry::new(name(b"top"), Kind::Dir, 0o755, origin.clone()),
    );
    let mut taken: std::collections::HashSet<Vec<u8>> = [b"top".to_vec()].into();
    let mut n = 0;
    for (parent, leaf, item) in items {
        let base = dirs[*parent % dirs.len()].clone();
        let mut path = base.clone();
        path.push(b'/');
        path.extend_from_slice(leaf);
        if taken.contains(&path) || path.len() > 3000 {
            continue;
        }
        if matches!(item, Item::Node(..)) && !support::is_root() {
            continue; // only root may make device nodes
        }
        taken.insert(path.clone());
        n += 1;
        let kind = match item {
            Item::Dir => {
                dirs.push(path.clone());
                Kind::Dir
            }
            Item::File { size, links } => {
                let src = dir.join(format!("src{n}"));
                let data: Vec<u8> = (0..*size).map(|i| (i * 31 + n * 7) as u8).collect();
                fs::write(&src, &data).unwrap();
                let meta = fs::metadata(&src).unwrap();
                let mut link_names = Vec::new();
                for l in 0..*links {
                    let mut ln = base.clone();
                    ln.extend_from_slice(format!("/link{n}-{l}").as_bytes());
                    if taken.insert(ln.clone()) {
                        content.insert(ln.clone(), data.clone());
                        link_names.push(name(&ln));
                    }
                }
                content.insert(path.clone(), data);
                Kind::File {
                    source: Source::from_metadata(src, &meta).into(),
                    links: link_names.into(),
                }
            }
            Item::Symlink(t) => Kind::Symlink {
                target: t.as_slice().into(),
            },
            Item::Node(block, major, minor) => Kind::Node {
                kind: if *block {
                    DeviceKind::Block
                } else {
                    DeviceKind::Char
                },
                major: *major,
                minor: *minor,
            },
            Item::Pipe => Kind::Pipe,
            Item::Socket => Kind::Socket,
        };
        let mode = if matches!(kind, Kind::Dir) {
            0o755
        } else {
            0o640
        };
        let mut e = Entry::new(name(&path), kind, mode, origin.clone());
        e.uid = n as u32 % 3;
        e.gid = n as u32 % 5;
        out.insert(path, e);
    }
    // A hardlink group sorts at its greatest name, as lowering sorts it.
    let mut list: Vec<Entry> = out.into_values().collect();
    list.sort_by_key(|e| e.names().map(<[u8]>::to_vec).max().unwrap_or_default());
    (list, content)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 24,
        failure_persistence: None,
        .. ProptestConfig::default()
    })]

    #[test]
    fn random_images_read_back_and_extract_the_same(
        items in prop::collection::vec((0usize..8, name_strategy(), item_strategy()), 1..40),
        policy in policy_strategy(),
    ) {
        let dir = Scratch::new("prop");
        let (list, content) = entries(&dir, &items);
        // The plan's invariants.
        let layout = composer::plan::archive(&list, &policy);
        let mut seen_dirs: std::collections::HashSet<Vec<u8>> = Default::default();
        for r in layout.records() {
            prop_assert!(r.header.namesize <= 4096, "namesize {}", r.header.namesize);
            if let Some(cut) = r.name.iter().rposition(|&b| b == b'/') {
                prop_assert!(seen_dirs.contains(&r.name[..cut]), "parent of {:?} not first", r.name);
            }
            if r.header.mode & 0o170000 == 0o040000 {
                seen_dirs.insert(r.name.to_vec());
            }
            if let Alignment::Aligned(a) = r.alignment {
                prop_assert_eq!(r.data_offset() % a as u64, 0);
            }
        }
        // Written, and read back by composer's own reader.
        let out = dir.join("out.img");
        let spec = ImageSpec::plain(list.clone(), policy);
        composer::pipeline::build(&spec, Output::create(&out).unwrap(), false).unwrap();
        let image = Image::open(&out, Want::all()).unwrap();
        prop_assert!(image.fault.is_none(), "{:?}", image.fault);
        let mut read: BTreeMap<Vec<u8>, (u32, u32, u32, u64)> = BTreeMap::new();
        for (_, e) in image.entries() {
            read.insert(e.path().to_vec(), (e.header.mode, e.header.uid, e.header.gid, e.header.filesize as u64));
        }
        for e in &list {
            for n in e.names() {
                let got = read.get(n);
                prop_assert!(got.is_some(), "{:?} missing", n);
                let (mode, uid, gid, _) = *got.unwrap();
                prop_assert_eq!(mode, e.mode_field());
                prop_assert_eq!((uid, gid), (e.uid, e.gid));
            }
        }
        let findings = composer::image::verify::verify(&image);
        prop_assert!(findings.is_empty(), "{:?}", findings);
        // GNU cpio and bsdtar extract the same tree.
        for (tool, pkg) in [("cpio", "cpio"), ("bsdtar", "libarchive-tools")] {
            let Some(bin) = support::require_tool(tool, pkg) else { continue };
            if policy.mode == AlignMode::KernelOnly && policy.align > 0 {
                continue; // NULs between entries: only the kernel reads them
            }
            let x = dir.join(format!("x-{tool}"));
            fs::create_dir(&x).unwrap();
            let mut cmd = Command::new(bin);
            if tool == "cpio" {
                cmd.args(["-idm", "--quiet", "--no-absolute-filenames"])
                    .stdin(fs::File::open(&out).unwrap());
            } else {
                cmd.arg("-xf").arg(&out);
            }
            let o = cmd.current_dir(&x).output().unwrap();
            prop_assert!(o.status.success(), "{tool}: {}", String::from_utf8_lossy(&o.stderr));
            check_tree(&x, &list, &content)?;
        }
    }
}

/// The extracted tree at `x` holds every entry with its type and content.
fn check_tree(
    x: &Path,
    list: &[Entry],
    content: &BTreeMap<Vec<u8>, Vec<u8>>,
) -> Result<(), TestCaseError> {
    for e in list {
        for n in e.names() {
            let p: PathBuf = x.join(OsStr::from_bytes(n));
            let m = fs::symlink_metadata(&p);
            prop_assert!(m.is_ok(), "{} not extracted", p.display());
            let m = m.unwrap();
            let ft = m.file_type();
            let ok = match &e.kind {
                Kind::File { .. } => ft.is_file(),
                Kind::Dir => ft.is_dir(),
                Kind::Symlink { target } => {
                    ft.is_symlink()
                        && fs::read_link(&p).unwrap().as_os_str().as_bytes() == target.as_slice()
                }
                // Extractors make device nodes only as root; either way the
                // name is there.
                Kind::Node { .. } => ft.is_char_device() || ft.is_block_device() || ft.is_file(),
                Kind::Pipe => ft.is_fifo(),
                Kind::Socket => ft.is_socket() || ft.is_file() || ft.is_fifo() || m.nlink() > 0,
            };
            prop_assert!(ok, "{} has the wrong type", p.display());
            if let Some(data) = content.get(n) {
                prop_assert!(
                    fs::read(&p).unwrap() == *data,
                    "{} has other content",
                    p.display()
                );
            }
        }
    }
    Ok(())
}

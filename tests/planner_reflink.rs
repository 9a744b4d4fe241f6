//! Acceptance test of aligned archives sharing extents with their sources (root only):
//! on a loop-mounted XFS (`-m reflink=1`) and Btrfs, the module tree of Debian's
//! linux-image package is copied in, archives are built on the same filesystem in
//! readers mode, and FIEMAP (through `filefrag -v`) tells how many bytes of the eligible
//! files' data in the archive lie in extents flagged `shared`.
//!
//! Only whole blocks can be shared: a file's last, partial block holds the start of the
//! next entry in the archive but zeros in the source, so it is always copied (the
//! `*_partial_tail_blocks_cannot_stay_shared` tests show the kernel's rule). So:
//!
//! - with `align = "auto"` (the filesystem's 4 KiB block) at least 99% of the
//!   whole-block bytes of eligible files are shared; of all their bytes the tails cap the
//!   share at about 97.9% for the Debian tree;
//! - with `align = 65536` (eligible files are larger, tails a smaller part of them) at
//!   least 99% of all the bytes of eligible files are shared.
//!
//! Both print the archive's apparent and allocated sizes and how much the filesystem's
//! usage grew, which may not exceed the bytes that are not shared (plus a margin for
//! metadata): padding is holes or shared, never written.
//!
//! Every mount is undone by a guard, also when the test fails: unmount (lazily as a
//! last resort), detach any loop device left on the image, remove the directory.

use crate::support;

use crate::newc;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use support::DebianKernel;

const IMAGE_BYTES: u64 = 1536 * 1024 * 1024;

/// A filesystem image mounted on a loop device, undone on drop.
pub(crate) struct LoopMount {
    /// Unique to this run; holds the image, the mountpoint and the manifest.
    dir: PathBuf,
    image: PathBuf,
    pub(crate) mnt: PathBuf,
    mounted: bool,
}

impl LoopMount {
    fn new(name: &str) -> LoopMount {
        let dir = support::scratch(name);
        LoopMount {
            image: dir.join("fs.img"),
            mnt: dir.join("mnt"),
            dir,
            mounted: false,
        }
    }

    /// A fresh `fs_type` filesystem of `bytes` (sparse), made with `mkfs` and
    /// loop-mounted; `None` (after a skip) when the kernel cannot mount it.
    pub(crate) fn create(name: &str, fs_type: &str, mkfs: &Path, bytes: u64) -> Option<LoopMount> {
        let mut m = LoopMount::new(name);
        fs::File::create(&m.image)
            .and_then(|f| f.set_len(bytes))
            .unwrap();
        let mut cmd = Command::new(mkfs);
        match fs_type {
            "xfs" => cmd.args(["-q", "-f", "-m", "reflink=1"]),
            "ext4" => cmd.args(["-q", "-F"]),
            _ => cmd.args(["-q", "-f"]),
        };
        support::run_ok(cmd.arg(&m.image));
        fs::create_dir(&m.mnt).unwrap();
        let mount = support::run(
            Command::new("mount")
                .args(["-t", fs_type, "-o", "loop"])
                .arg(&m.image)
                .arg(&m.mnt),
        );
        if !mount.status.success() {
            support::skip(&format!(
                "cannot loop-mount {fs_type}: {}",
                String::from_utf8_lossy(&mount.stderr).trim()
            ));
            return None;
        }
        m.mounted = true;
        Some(m)
    }

    fn detach_loops(&self) {
        let Some(losetup) = support::find_tool("losetup") else {
            return;
        };
        let Ok(out) = Command::new(&losetup).arg("-j").arg(&self.image).output() else {
            return;
        };
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            if let Some((dev, _)) = line.split_once(':') {
                let _ = Command::new(&losetup).args(["-d", dev]).status();
            }
        }
    }
}

impl Drop for LoopMount {
    fn drop(&mut self) {
        if self.mounted {
            for _ in 0..10 {
                let ok = Command::new("umount")
                    .arg(&self.mnt)
                    .status()
                    .is_ok_and(|s| s.success());
                if ok {
                    self.mounted = false;
                    break;
                }
                std::thread::sleep(Duration::from_millis(500));
            }
            if self.mounted {
                eprintln!("note: {} busy; unmounting lazily", self.mnt.display());
                let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
            }
        }
        self.detach_loops();
        if let Err(e) = fs::remove_dir_all(&self.dir) {
            eprintln!("note: cannot remove {}: {e}", self.dir.display());
        }
    }
}

/// `filefrag -v`: the file's extents as (byte range, shared).
fn extents(filefrag: &Path, path: &Path) -> Vec<(u64, u64, bool)> {
    let out = support::run_ok(Command::new(filefrag).arg("-v").arg(path));
    let text = String::from_utf8_lossy(&out.stdout);
    // "File size of X is N (M blocks of B bytes)"
    let block: u64 = text
        .lines()
        .find_map(|l| {
            let l = l.strip_suffix(" bytes)")?;
            l.rsplit(' ').next()?.parse().ok()
        })
        .unwrap_or_else(|| panic!("filefrag -v printed no block size:\n{text}"));
    let mut v = Vec::new();
    for line in text.lines() {
        let parts: Vec<&str> = line.split(':').collect();
        if parts.len() < 4 || parts[0].trim().parse::<u64>().is_err() {
            continue;
        }
        let Some((a, b)) = parts[1].split_once("..") else {
            continue;
        };
        let (a, b): (u64, u64) = (a.trim().parse().unwrap(), b.trim().parse().unwrap());
        let shared = parts[4..]
            .iter()
            .flat_map(|p| p.split(|c: char| c == ',' || c.is_whitespace()))
            .any(|t| t == "shared");
        v.push((a * block, (b + 1) * block, shared));
    }
    assert!(!v.is_empty(), "filefrag -v listed no extents:\n{text}");
    v
}

/// Bytes of `range` inside shared extents (`ext` sorted by start).
fn shared_bytes(ext: &[(u64, u64, bool)], range: (u64, u64)) -> u64 {
    let first = ext.partition_point(|e| e.1 <= range.0);
    ext[first..]
        .iter()
        .take_while(|e| e.0 < range.1)
        .filter(|e| e.2)
        .map(|e| e.1.min(range.1) - e.0.max(range.0))
        .sum()
}

fn du(path: &Path, apparent: bool) -> u64 {
    let mut cmd = Command::new("du");
    cmd.arg("-B1");
    if apparent {
        cmd.arg("--apparent-size");
    }
    let out = support::run_ok(cmd.arg(path));
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .expect("du prints a number")
}

fn fs_used(path: &Path) -> u64 {
    support::run_ok(Command::new("sync").arg("-f").arg(path));
    let s = rustix::fs::statvfs(path).unwrap();
    (s.f_blocks - s.f_bfree) * s.f_frsize
}

#[derive(serde::Deserialize)]
struct Plan {
    records: Vec<PlanRecord>,
    summary: PlanSummary,
}

#[derive(serde::Deserialize)]
struct PlanRecord {
    name: String,
    data_offset: u64,
    size: u64,
    alignment: String,
}

#[derive(serde::Deserialize)]
struct PlanSummary {
    eligible: usize,
    missed: usize,
    archive_bytes: u64,
}

/// Root, the filesystem's mkfs and filefrag; `None` (after a skip) without them.
fn tools(fs_type: &str) -> Option<(PathBuf, PathBuf)> {
    if !support::require_root() {
        return None;
    }
    let mkfs = match fs_type {
        "xfs" => support::require_tool("mkfs.xfs", "xfsprogs"),
        _ => support::require_tool("mkfs.btrfs", "btrfs-progs"),
    }?;
    let filefrag = support::require_tool("filefrag", "e2fsprogs")?;
    Some((mkfs, filefrag))
}

fn reflink_on(fs_type: &str) {
    let Some((mkfs, filefrag)) = tools(fs_type) else {
        return;
    };
    let Some(kernel) = support::debian_kernel() else {
        return;
    };
    run(fs_type, &mkfs, &filefrag, &kernel);
}

fn run(fs_type: &str, mkfs: &Path, filefrag: &Path, kernel: &DebianKernel) {
    let Some(m) = LoopMount::create(
        &format!("planner_reflink_{fs_type}"),
        fs_type,
        mkfs,
        IMAGE_BYTES,
    ) else {
        return;
    };

    // The sources, on the filesystem under test.
    let src_root = m.mnt.join("src");
    let parent = src_root.join("lib/modules");
    fs::create_dir_all(&parent).unwrap();
    let started = Instant::now();
    support::run_ok(
        Command::new("cp")
            .arg("-a")
            .arg(kernel.modules_dir())
            .arg(&parent),
    );
    let copied = started.elapsed();
    let tree = parent.join(&kernel.version);

    // The sources: name in the archive -> path.
    let module_dir = format!("/lib/modules/{}", kernel.version);
    let mut sources = BTreeMap::new();
    collect_files(&tree, &module_dir[1..], &mut sources);
    let block = rustix::fs::statvfs(&m.mnt).unwrap().f_bsize;
    assert_eq!(block, 4096, "{fs_type}: block size");
    let mut reports = String::new();
    for (align, asserted) in [("\"auto\"", Share::WholeBlocks), ("65536", Share::AllBytes)] {
        let r = build_and_measure(
            &m,
            fs_type,
            filefrag,
            &src_root,
            &module_dir,
            &sources,
            align,
        );
        let _ = writeln!(reports, "{r}");
        let pct = |a: u64, b: u64| 100.0 * a as f64 / b.max(1) as f64;
        match asserted {
            Share::WholeBlocks => assert!(
                r.shared_whole * 100 >= r.whole * 99,
                "{fs_type}: only {:.3}% of the whole-block bytes of eligible files are \
                 shared; e.g. {:?}\n{reports}",
                pct(r.shared_whole, r.whole),
                &r.unshared[..r.unshared.len().min(10)]
            ),
            Share::AllBytes => assert!(
                r.shared * 100 >= r.data * 99,
                "{fs_type}: only {:.3}% of the bytes of eligible files are shared\n{reports}",
                pct(r.shared, r.data)
            ),
        }
        // New space: what is not shared (headers, small files, tails), plus a
        // margin for metadata; padding is holes or shared.
        let unshared = r.apparent - r.shared;
        assert!(
            r.grew < unshared + r.apparent / 20,
            "{fs_type}: the archive took {} bytes of new space, more than its {unshared} \
             unshared bytes and a margin\n{reports}",
            r.grew
        );
    }
    println!(
        "{fs_type}: copied the tree in {:.1} s\n{reports}",
        copied.as_secs_f64()
    );
}

/// What a run asserts: at least 99% of the bytes of eligible files that lie in whole
/// blocks, or of all their bytes.
enum Share {
    WholeBlocks,
    AllBytes,
}

/// One archive built on the filesystem and its extents measured.
struct Measured {
    text: String,
    /// Bytes of eligible files' data, and of them in whole blocks.
    data: u64,
    whole: u64,
    shared: u64,
    shared_whole: u64,
    unshared: Vec<String>,
    apparent: u64,
    grew: u64,
}

impl std::fmt::Display for Measured {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

/// Builds the module tree with `align` next to its sources, checks the archive's
/// content and alignment, and measures how much of the eligible data is shared.
fn build_and_measure(
    m: &LoopMount,
    fs_type: &str,
    filefrag: &Path,
    src_root: &Path,
    module_dir: &str,
    sources: &BTreeMap<String, PathBuf>,
    align: &str,
) -> Measured {
    let manifest = m.dir.join("modules.toml");
    fs::write(
        &manifest,
        format!(
            "root = {}\n[defaults]\nalign = {align}\n[image]\nalign_mode = \"readers\"\n\
             [[tree]]\nsrc = {}\n",
            support::toml_str(src_root.to_str().unwrap()),
            support::toml_str(module_dir)
        ),
    )
    .unwrap();

    let archive = m.mnt.join("initrd.img");
    let _ = fs::remove_file(&archive);
    let used_before = fs_used(&m.mnt);
    let started = Instant::now();
    support::run_ok(
        support::composer()
            .arg("build")
            .arg(&manifest)
            .arg("-o")
            .arg(&archive),
    );
    let built = started.elapsed();
    let used_after = fs_used(&m.mnt);

    let out = support::run_ok(
        support::composer()
            .arg("plan")
            .arg(&manifest)
            .arg("-o")
            .arg(&archive)
            .arg("--json"),
    );
    let plan: Plan = serde_json::from_slice(&out.stdout).unwrap();
    let block = rustix::fs::statvfs(&m.mnt).unwrap().f_bsize;
    let a = match align.parse::<u64>() {
        Ok(n) => n,
        Err(_) => block,
    };
    let eligible = sources
        .values()
        .filter(|p| fs::metadata(p).unwrap().len() > a)
        .count();
    assert_eq!(plan.summary.missed, 0, "{fs_type} {align}: misses");
    assert_eq!(
        plan.summary.eligible, eligible,
        "{fs_type}: align = {align} should mean {a}"
    );

    // Content: the archive parses strictly; every file's data equals its source.
    let buf = fs::read(&archive).unwrap();
    assert_eq!(buf.len() as u64, plan.summary.archive_bytes);
    let parsed = newc::parse(&buf).unwrap_or_else(|e| panic!("{fs_type}: {e}"));
    let mut checked = 0;
    for e in parsed.entries.iter().filter(|e| e.hdr.is_regular()) {
        let name = e.display_name();
        let src = sources
            .get(&name)
            .unwrap_or_else(|| panic!("{fs_type}: unexpected {name}"));
        if e.hdr.filesize as u64 > a {
            assert_eq!(e.data_offset() as u64 % a, 0, "{fs_type} {align}: {name}");
        }
        assert!(
            fs::read(src).unwrap() == buf[e.data.clone()],
            "{fs_type}: data of {name} differs from {}",
            src.display()
        );
        checked += 1;
    }
    assert_eq!(checked, sources.len(), "{fs_type}: every file is there");
    drop(buf);

    // Sharing.
    let ext = extents(filefrag, &archive);
    let (mut data, mut whole, mut shared, mut shared_whole) = (0u64, 0u64, 0u64, 0u64);
    let mut unshared = Vec::new();
    for r in plan.records.iter().filter(|r| r.alignment == "aligned") {
        let (a, b) = (r.data_offset, r.data_offset + r.size);
        let full = r.size / block * block;
        data += r.size;
        whole += full;
        shared += shared_bytes(&ext, (a, b));
        let s = shared_bytes(&ext, (a, a + full));
        shared_whole += s;
        if s < full {
            unshared.push(format!("{} ({} of {full} bytes shared)", r.name, s));
        }
    }
    let apparent = du(&archive, true);
    let allocated = du(&archive, false);
    let grew = used_after.saturating_sub(used_before);
    let pct = |a: u64, b: u64| 100.0 * a as f64 / b.max(1) as f64;
    let mut text = String::new();
    let _ = writeln!(
        text,
        "{fs_type}, align {a}: built the archive in {:.1} s; {} extents",
        built.as_secs_f64(),
        ext.len()
    );
    let _ = writeln!(
        text,
        "{fs_type}, align {a}: {} eligible files, {data} data bytes: {shared} shared ({:.3}%); \
         whole blocks {whole} bytes: {shared_whole} shared ({:.3}%)",
        plan.summary.eligible,
        pct(shared, data),
        pct(shared_whole, whole)
    );
    let _ = write!(
        text,
        "{fs_type}, align {a}: archive apparent {apparent} bytes, allocated {allocated} bytes \
         (du); filesystem usage grew by {} bytes ({:.2}% of the archive)",
        used_after as i64 - used_before as i64,
        pct(grew, apparent)
    );
    Measured {
        text,
        data,
        whole,
        shared,
        shared_whole,
        unshared,
        apparent,
        grew,
    }
}

fn collect_files(dir: &Path, name: &str, out: &mut BTreeMap<String, PathBuf>) {
    for e in fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let child = format!("{name}/{}", e.file_name().to_str().unwrap());
        let t = e.file_type().unwrap();
        if t.is_dir() {
            collect_files(&e.path(), &child, out);
        } else if t.is_file() {
            out.insert(child, e.path());
        }
    }
}

/// Why no cpio writer can share a file's last, partial block: the kernel refuses to
/// clone a partial end-of-file block into the middle of a file (copy_file_range stops
/// at the last whole block), and one cloned at the end of the archive is unshared as
/// soon as the next header is written after it. If a kernel ever lifts this, the test
/// fails and the planner should keep tails shareable.
fn partial_tail_limit_on(fs_type: &str) {
    let Some((mkfs, filefrag)) = tools(fs_type) else {
        return;
    };
    let Some(m) = LoopMount::create(
        &format!("planner_reflink_tail_{fs_type}"),
        fs_type,
        &mkfs,
        512 * 1024 * 1024,
    ) else {
        return;
    };

    const SIZE: u64 = 10_000; // two whole 4 KiB blocks and a partial one
    let data: Vec<u8> = (0..SIZE).map(|i| (i * 7 % 251) as u8).collect();
    let src_path = m.mnt.join("src");
    fs::write(&src_path, &data).unwrap();
    support::run_ok(Command::new("sync").arg("-f").arg(&src_path));
    let src = fs::File::open(&src_path).unwrap();
    let shared_blocks = |path: &Path| -> Vec<u64> {
        extents(&filefrag, path)
            .into_iter()
            .filter(|e| e.2)
            .flat_map(|e| (e.0 / 4096)..(e.1 / 4096))
            .collect()
    };
    let cfr = |dst: &fs::File, at: u64| -> usize {
        let (mut off_in, mut off_out) = (0u64, at);
        rustix::fs::copy_file_range(
            &src,
            Some(&mut off_in),
            dst,
            Some(&mut off_out),
            SIZE as usize,
        )
        .unwrap()
    };

    // Into the middle of a file: only the whole blocks are taken.
    let mid_path = m.mnt.join("mid");
    let mid = fs::File::options()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&mid_path)
        .unwrap();
    mid.set_len(65536).unwrap();
    let n = cfr(&mid, 4096);
    mid.sync_all().unwrap();
    let mid_shared = shared_blocks(&mid_path);

    // At the end: the partial block is shared until the file grows past it,
    // whether the next bytes go right after the data (the next header) or only
    // at the next block boundary (NULs up to it, as kernel-only mode could write).
    let clone_then_write = |name: &str, at: u64| {
        let path = m.mnt.join(name);
        let f = fs::File::options()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .unwrap();
        rustix::io::pwrite(&f, &[b'H'; 4096], 0).unwrap();
        let whole = cfr(&f, 4096);
        f.sync_all().unwrap();
        let before = shared_blocks(&path);
        rustix::io::pwrite(&f, b"0707", at).unwrap();
        f.sync_all().unwrap();
        (whole, before, shared_blocks(&path))
    };
    let (whole, before, after) = clone_then_write("end", 4096 + SIZE + 4);
    let (_, gap_before, gap_after) = clone_then_write("gap", 4 * 4096);
    println!(
        "{fs_type}: into the middle: {n} of {SIZE} bytes taken, shared blocks {mid_shared:?}; \
         at the end: {whole} bytes, shared blocks {before:?}, after the next write {after:?}, \
         after a write at the next block {gap_after:?}"
    );
    assert!(n as u64 <= SIZE);
    assert!(
        !mid_shared.contains(&3),
        "{fs_type}: a partial block was cloned into the middle of a file"
    );
    for b in [&before, &gap_before] {
        assert_eq!(
            b,
            &[1, 2, 3],
            "{fs_type}: the clone at the end shares all three"
        );
    }
    assert_eq!(
        after,
        [1, 2],
        "{fs_type}: writing after the cloned partial block should unshare it"
    );
    assert_eq!(
        gap_after,
        [1, 2],
        "{fs_type}: growing the file past the cloned partial block should unshare it"
    );
}

#[test]
fn xfs_partial_tail_blocks_cannot_stay_shared() {
    partial_tail_limit_on("xfs");
}

#[test]
fn btrfs_partial_tail_blocks_cannot_stay_shared() {
    partial_tail_limit_on("btrfs");
}

#[test]
fn xfs_reflink_shares_eligible_data() {
    reflink_on("xfs");
}

#[test]
fn btrfs_reflink_shares_eligible_data() {
    reflink_on("btrfs");
}

/// `--no-reflink` and `[image] reflink = false` copy every byte: the image
/// shares nothing with its sources, and holds the same bytes as the shared one.
fn no_reflink_on(fs_type: &str) {
    let Some((mkfs, filefrag)) = tools(fs_type) else {
        return;
    };
    let Some(m) = LoopMount::create(
        &format!("planner_no_reflink_{fs_type}"),
        fs_type,
        &mkfs,
        512 * 1024 * 1024,
    ) else {
        return;
    };
    let src = m.mnt.join("src");
    fs::create_dir(&src).unwrap();
    for i in 0..4u64 {
        let data: Vec<u8> = (0..(1u64 << 20))
            .map(|j| ((i * 131 + j * 7) % 251) as u8)
            .collect();
        fs::write(src.join(format!("f{i}")), data).unwrap();
    }
    support::run_ok(Command::new("sync").arg("-f").arg(&src));
    let manifest = |name: &str, extra: &str| {
        let p = m.mnt.join(name);
        fs::write(
            &p,
            format!(
                "[defaults]\nalign = 4096\n{extra}\n[[tree]]\nsrc = \"{}\"\ndst = \"/data\"\n",
                src.display()
            ),
        )
        .unwrap();
        p
    };
    let shared_of = |img: &Path| -> u64 {
        support::run_ok(Command::new("sync").arg("-f").arg(img));
        let ext = extents(&filefrag, img);
        ext.iter().filter(|e| e.2).map(|e| e.1 - e.0).sum()
    };
    let build = |m: &Path, out: &Path, args: &[&str]| {
        support::run_ok(
            support::composer()
                .arg("build")
                .arg(m)
                .arg("-o")
                .arg(out)
                .args(args),
        );
    };
    let plain = manifest("plain.toml", "");
    let shared = m.mnt.join("shared.img");
    build(&plain, &shared, &[]);
    let copied = m.mnt.join("copied.img");
    build(&plain, &copied, &["--no-reflink"]);
    let off = manifest("off.toml", "\n[image]\nreflink = false\n");
    let copied2 = m.mnt.join("copied2.img");
    build(&off, &copied2, &[]);
    let (s, c, c2) = (shared_of(&shared), shared_of(&copied), shared_of(&copied2));
    eprintln!("{fs_type}: shared {s} bytes; --no-reflink {c}; reflink = false {c2}");
    assert!(s >= 4 << 20, "the default shares the 4 MiB of data: {s}");
    assert_eq!((c, c2), (0, 0), "copies share nothing");
    let bytes = fs::read(&shared).unwrap();
    assert_eq!(bytes, fs::read(&copied).unwrap());
    assert_eq!(bytes, fs::read(&copied2).unwrap());
}

#[test]
fn xfs_no_reflink_copies_every_byte() {
    no_reflink_on("xfs");
}

#[test]
fn btrfs_no_reflink_copies_every_byte() {
    no_reflink_on("btrfs");
}

//! Acceptance test of the alignment planner on the module tree of Debian's
//! linux-image package (about 4,000 modules, 400 MB), at 4, 16 and 64 KiB:
//!
//! - `composer plan --json`: zero misses in readers mode (the default) and in
//!   kernel-only mode; at 64 KiB readers-mode padding is at most 1% of the archive.
//!   A table compares both modes with gen_init_cpio's rule on the same input.
//! - `composer build`: an independent reader written here, which follows the kernel's
//!   unpacker (NUL runs between entries are skipped when the next header is 4-aligned),
//!   checks every archive: each regular file larger than the alignment has its data at
//!   a multiple of it, every namesize is at most PATH_MAX, every directory comes before
//!   what it holds, the data equals the source file, the layout is exactly the plan's
//!   and the padding is what the plan reports. Readers-mode archives must also pass the
//!   strict reader of `support/newc.rs` (no NULs between entries).
//! - GNU cpio (`cpio -idm`), bsdtar and 3cpio extract the readers-mode archives to a
//!   tree equal to the source tree (content and modes; repeated directory entries are
//!   fine).

use crate::support;

use crate::newc;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::fs;
use std::ops::Range;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use support::{DebianKernel, Scratch};

const PATH_MAX: usize = 4096;
const HEADER_LEN: usize = 110;
const S_IFMT: u32 = 0o170000;
const S_IFREG: u32 = 0o100000;
const S_IFDIR: u32 = 0o040000;
const S_IFLNK: u32 = 0o120000;

// ---------------------------------------------------------------------------------------
// The input: a manifest over the module tree
// ---------------------------------------------------------------------------------------

/// Writes a manifest taking `lib/modules/<version>` of the unpacked package (through
/// `root` and an absolute `src`). `settings` are extra `[defaults]`/`[image]` lines.
fn write_manifest(dir: &Path, kernel: &DebianKernel, name: &str, settings: &str) -> PathBuf {
    let root = kernel.root.to_str().expect("kernel root is UTF-8");
    let tree = format!("/lib/modules/{}", kernel.version);
    let text = format!(
        "# The module tree of Debian's linux-image package.\nroot = {}\n{settings}\n\
         [[tree]]\nsrc = {}\ndst = {}\n",
        support::toml_str(root),
        support::toml_str(&tree),
        support::toml_str(&tree),
    );
    let path = dir.join(name);
    fs::write(&path, text).unwrap();
    path
}

/// What the archive must hold: archive name -> source path and metadata, for the tree
/// and the parent directories the manifest creates (`lib`, `lib/modules`).
struct Inventory {
    files: BTreeMap<Vec<u8>, SourceFile>,
    /// Directory name -> permission bits.
    dirs: BTreeMap<Vec<u8>, u32>,
}

struct SourceFile {
    path: PathBuf,
    size: u64,
    perm: u32,
}

fn inventory(kernel: &DebianKernel) -> Inventory {
    let mut inv = Inventory {
        files: BTreeMap::new(),
        dirs: BTreeMap::new(),
    };
    let base = format!("lib/modules/{}", kernel.version);
    // The parents the manifest creates get the default directory mode.
    for d in ["lib", "lib/modules"] {
        inv.dirs.insert(d.as_bytes().to_vec(), 0o755);
    }
    fn walk(dir: &Path, name: &str, inv: &mut Inventory) {
        let m = fs::symlink_metadata(dir).unwrap();
        inv.dirs
            .insert(name.as_bytes().to_vec(), m.permissions().mode() & 0o7777);
        let mut children: Vec<_> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        children.sort();
        for p in children {
            let child = format!("{name}/{}", p.file_name().unwrap().to_str().unwrap());
            let m = fs::symlink_metadata(&p).unwrap();
            if m.is_dir() {
                walk(&p, &child, inv);
            } else if m.is_file() {
                inv.files.insert(
                    child.into_bytes(),
                    SourceFile {
                        size: m.len(),
                        perm: m.permissions().mode() & 0o7777,
                        path: p,
                    },
                );
            } else {
                panic!("{}: unexpected file type in the module tree", p.display());
            }
        }
    }
    walk(&kernel.modules_dir(), &base, &mut inv);
    inv
}

// ---------------------------------------------------------------------------------------
// `composer plan --json`
// ---------------------------------------------------------------------------------------

#[derive(serde::Deserialize, Debug)]
struct Plan {
    records: Vec<PlanRecord>,
    summary: PlanSummary,
}

#[derive(serde::Deserialize, Debug)]
struct PlanRecord {
    name: String,
    offset: u64,
    data_offset: u64,
    size: u64,
    namesize: u64,
    padding: u64,
    alignment: String,
    filler: bool,
}

#[derive(serde::Deserialize, Debug, Clone)]
struct PlanSummary {
    entries: usize,
    records: usize,
    fillers: usize,
    eligible: usize,
    aligned: usize,
    missed: usize,
    padding_bytes: u64,
    archive_bytes: u64,
    padding_lower_bound: u64,
}

/// `composer plan MANIFEST --json [args]`.
fn plan_json(manifest: &Path, args: &[&str]) -> Plan {
    let out = support::run_ok(
        support::composer()
            .arg("plan")
            .arg(manifest)
            .arg("--json")
            .args(args),
    );
    let plan: Plan = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "composer plan --json {args:?}: bad JSON ({e}):\n{}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    // The totals agree with the records.
    let s = &plan.summary;
    assert_eq!(s.records, plan.records.len(), "{args:?}: record count");
    assert_eq!(
        s.padding_bytes,
        plan.records.iter().map(|r| r.padding).sum::<u64>(),
        "{args:?}: summary padding is the sum of the records' padding"
    );
    assert_eq!(
        s.fillers,
        plan.records.iter().filter(|r| r.filler).count(),
        "{args:?}: filler count"
    );
    assert_eq!(s.aligned + s.missed, s.eligible, "{args:?}: eligible");
    assert_eq!(
        s.missed,
        plan.records
            .iter()
            .filter(|r| r.alignment == "missed")
            .count(),
        "{args:?}: missed count"
    );
    plan
}

fn mode_args(align: u64, mode: &str) -> Vec<String> {
    vec![
        "-a".into(),
        align.to_string(),
        "--align-mode".into(),
        mode.into(),
    ]
}

fn pct(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        100.0 * part as f64 / whole as f64
    }
}

#[test]
fn module_tree_plans_have_no_misses() {
    let Some(kernel) = support::debian_kernel() else {
        return;
    };
    let dir = Scratch::new("planner_modules_plan");
    let manifest = write_manifest(&dir, &kernel, "modules.toml", "");
    let inv = inventory(&kernel);
    let source_bytes: u64 = inv.files.values().map(|f| f.size).sum();

    let mut table = String::new();
    let _ = writeln!(
        table,
        "Debian {} module tree: {} files, {} directories, {} bytes",
        kernel.version,
        inv.files.len(),
        inv.dirs.len(),
        source_bytes
    );
    let _ = writeln!(
        table,
        "{:>6} {:<14} {:>8} {:>7} {:>12} {:>8} {:>12} {:>8} {:>10} {:>7} {:>12}",
        "align",
        "mode",
        "eligible",
        "missed",
        "padding",
        "% arch",
        "lower bound",
        "% arch",
        "above",
        "fillers",
        "archive"
    );
    let mut failures = Vec::new();
    for align in [4096u64, 16384, 65536] {
        let eligible = inv.files.values().filter(|f| f.size > align).count();
        for mode in ["readers", "kernel-only", "gen-init-cpio"] {
            let args = mode_args(align, mode);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let started = Instant::now();
            let plan = plan_json(&manifest, &args);
            let elapsed = started.elapsed();
            let s = plan.summary.clone();
            let _ = writeln!(
                table,
                "{:>6} {:<14} {:>8} {:>7} {:>12} {:>7.3}% {:>12} {:>7.3}% {:>10} {:>7} {:>12}",
                format!("{}K", align / 1024),
                mode,
                s.eligible,
                s.missed,
                s.padding_bytes,
                pct(s.padding_bytes, s.archive_bytes),
                s.padding_lower_bound,
                pct(s.padding_lower_bound, s.archive_bytes),
                s.padding_bytes as i64 - s.padding_lower_bound as i64,
                s.fillers,
                s.archive_bytes
            );
            let what = format!("{}K {mode}", align / 1024);
            if s.eligible != eligible {
                failures.push(format!(
                    "{what}: {} eligible, the tree has {eligible} files larger than {align}",
                    s.eligible
                ));
            }
            if s.entries != inv.files.len() + inv.dirs.len() {
                failures.push(format!(
                    "{what}: {} entries, expected {}",
                    s.entries,
                    inv.files.len() + inv.dirs.len()
                ));
            }
            if plan.records.iter().any(|r| r.namesize > PATH_MAX as u64) {
                failures.push(format!("{what}: a namesize exceeds {PATH_MAX}"));
            }
            for r in &plan.records {
                let aligned = r.data_offset.is_multiple_of(align);
                match r.alignment.as_str() {
                    "aligned" if !aligned => failures.push(format!(
                        "{what}: {} reported aligned at data offset {}",
                        r.name, r.data_offset
                    )),
                    "aligned" | "missed" if r.size <= align => failures.push(format!(
                        "{what}: {} ({} bytes) is not larger than {align} but eligible",
                        r.name, r.size
                    )),
                    "not-eligible" if r.size > align && !r.filler => failures.push(format!(
                        "{what}: {} ({} bytes) is larger than {align} but not eligible",
                        r.name, r.size
                    )),
                    _ => {}
                }
            }
            if mode != "gen-init-cpio" {
                if s.missed != 0 {
                    failures.push(format!("{what}: {} misses", s.missed));
                }
                // Every eligible file is aligned, so no layout can do with less.
                if s.padding_bytes < s.padding_lower_bound {
                    failures.push(format!(
                        "{what}: padding {} is below the lower bound {}",
                        s.padding_bytes, s.padding_lower_bound
                    ));
                }
                if elapsed.as_secs() > 10 {
                    failures.push(format!(
                        "{what}: planning took {:.1} s",
                        elapsed.as_secs_f64()
                    ));
                }
            }
            if mode == "readers" && align == 65536 && s.padding_bytes * 100 > s.archive_bytes {
                failures.push(format!(
                    "{what}: padding {} is more than 1% of the archive ({})",
                    s.padding_bytes, s.archive_bytes
                ));
            }
            if mode == "kernel-only" && s.fillers != 0 {
                failures.push(format!("{what}: kernel-only plan has fillers"));
            }
        }
    }
    println!("{table}");
    assert!(failures.is_empty(), "{}\n\n{table}", failures.join("\n"));
}

// ---------------------------------------------------------------------------------------
// A reader that follows the kernel's unpacker (init/initramfs.c)
// ---------------------------------------------------------------------------------------

/// One entry as the kernel would see it.
#[derive(Debug)]
struct KEntry {
    /// Offset of the header.
    offset: usize,
    /// NUL bytes skipped right before this header.
    lead: usize,
    ino: u32,
    mode: u32,
    uid: u32,
    gid: u32,
    nlink: u32,
    mtime: u32,
    filesize: u32,
    namesize: u32,
    name: Vec<u8>,
    data: Range<usize>,
}

impl KEntry {
    fn file_type(&self) -> u32 {
        self.mode & S_IFMT
    }
    fn name_str(&self) -> String {
        self.name.escape_ascii().to_string()
    }
    /// Header, name and name padding, without padding NULs in the name.
    fn min_head(&self) -> usize {
        (HEADER_LEN + self.name.len() + 1).next_multiple_of(4)
    }
}

#[derive(Debug)]
struct KArchive {
    /// Entries in archive order, without the trailer.
    entries: Vec<KEntry>,
    /// Where the trailer's header starts.
    trailer: usize,
    /// NUL bytes skipped between entries (not counting the tail after the trailer).
    nul_bytes: usize,
    nul_runs: usize,
}

fn hex_field(h: &[u8], i: usize, off: usize) -> Result<u32, String> {
    let digits = &h[6 + 8 * i..14 + 8 * i];
    let text = std::str::from_utf8(digits).map_err(|_| format!("offset {off}: non-ASCII field"))?;
    u32::from_str_radix(text, 16).map_err(|_| format!("offset {off}: field {i} is {text:?}"))
}

/// Reads one uncompressed newc archive as the kernel does: NUL bytes before a header
/// are skipped when the header then starts 4-aligned ("broken padding" otherwise);
/// a name must end in a NUL at namesize - 1 ("malformed archive") and ends at its first
/// NUL. Entries the kernel would skip silently (namesize 0 or above PATH_MAX, data on
/// something neither a file nor a symlink) are errors here, as is a second archive
/// after the trailer. With `nul_runs` false, NULs between entries are an error too.
fn read_like_kernel(buf: &[u8], nul_runs: bool) -> Result<KArchive, String> {
    let mut entries = Vec::new();
    let mut off = 0usize;
    let (mut nul_bytes, mut runs) = (0usize, 0usize);
    loop {
        let start = off;
        while off < buf.len() && buf[off] == 0 {
            off += 1;
        }
        let lead = off - start;
        if off == buf.len() {
            return Err(format!("no trailer ({} entries read)", entries.len()));
        }
        if lead > 0 {
            if !nul_runs {
                return Err(format!(
                    "{lead} NUL bytes between entries at offset {start}"
                ));
            }
            nul_bytes += lead;
            runs += 1;
        }
        if !off.is_multiple_of(4) {
            return Err(format!("broken padding: header at offset {off}"));
        }
        let h = buf
            .get(off..off + HEADER_LEN)
            .ok_or_else(|| format!("offset {off}: truncated header"))?;
        if &h[..6] != b"070701" && &h[..6] != b"070702" {
            return Err(format!(
                "offset {off}: no cpio magic ({:?})",
                String::from_utf8_lossy(&h[..6])
            ));
        }
        let f = |i| hex_field(h, i, off);
        let (ino, mode, uid, gid, nlink, mtime, filesize) =
            (f(0)?, f(1)?, f(2)?, f(3)?, f(4)?, f(5)?, f(6)?);
        let namesize = f(11)?;
        let ns = namesize as usize;
        if ns == 0 || ns > PATH_MAX {
            return Err(format!(
                "offset {off}: namesize {ns} (the kernel would skip this entry)"
            ));
        }
        let field = buf
            .get(off + HEADER_LEN..off + HEADER_LEN + ns)
            .ok_or_else(|| format!("offset {off}: truncated name"))?;
        if field[ns - 1] != 0 {
            return Err(format!(
                "offset {off}: malformed archive (name without NUL)"
            ));
        }
        // The path the kernel makes: leading `./` pairs (readers-mode padding) dropped.
        let name =
            crate::newc::path_of(&field[..field.iter().position(|&b| b == 0).unwrap()]).to_vec();
        let data_start = (off + HEADER_LEN + ns).next_multiple_of(4);
        let data_end = data_start + filesize as usize;
        if data_end > buf.len() {
            return Err(format!("offset {off}: data runs past the end"));
        }
        let t = mode & S_IFMT;
        if filesize > 0 && t != S_IFREG && t != S_IFLNK {
            return Err(format!(
                "offset {off}: data on a non-file (the kernel would skip it)"
            ));
        }
        let next = data_end.next_multiple_of(4);
        if name == b"TRAILER!!!" {
            if buf[next.min(buf.len())..].iter().any(|&b| b != 0) {
                return Err(format!("non-NUL bytes after the trailer at {off}"));
            }
            return Ok(KArchive {
                entries,
                trailer: off,
                nul_bytes,
                nul_runs: runs,
            });
        }
        entries.push(KEntry {
            offset: off,
            lead,
            ino,
            mode,
            uid,
            gid,
            nlink,
            mtime,
            filesize,
            namesize,
            name,
            data: data_start..data_end,
        });
        off = next;
    }
}

#[test]
fn kernel_reader_skips_nul_runs_only_before_aligned_headers() {
    let mut a = Vec::new();
    newc::write_entry(
        &mut a,
        false,
        &newc::Header {
            mode: 0o100644,
            nlink: 1,
            ..Default::default()
        },
        b"f",
        0,
        b"abc",
    );
    let mut b = vec![0u8; 8];
    newc::write_trailer(&mut b, false);
    let mut joined = a.clone();
    joined.extend_from_slice(&b);
    let k = read_like_kernel(&joined, true).unwrap();
    assert_eq!((k.entries.len(), k.nul_bytes, k.nul_runs), (1, 8, 1));
    assert_eq!(&joined[k.entries[0].data.clone()], b"abc");
    assert!(read_like_kernel(&joined, false).is_err());
    // Six NULs put the trailer's header at an offset that is not 4-aligned.
    let mut broken = a;
    broken.extend_from_slice(&[0; 6]);
    newc::write_trailer(&mut broken, false);
    let err = read_like_kernel(&broken, true).unwrap_err();
    assert!(err.contains("broken padding"), "{err}");
}

// ---------------------------------------------------------------------------------------
// Checking a built archive
// ---------------------------------------------------------------------------------------

/// Checks `buf`, built for `align` in `mode`, against the source tree and its plan.
/// Returns the problems found (at most a few of each kind are worth reading).
fn check_archive(
    what: &str,
    buf: &[u8],
    align: u64,
    mode: &str,
    inv: &Inventory,
    plan: &Plan,
) -> Vec<String> {
    let mut bad = Vec::new();
    let kernel_only = mode == "kernel-only";
    let k = match read_like_kernel(buf, kernel_only) {
        Ok(k) => k,
        Err(e) => return vec![format!("{what}: {e}")],
    };
    if !kernel_only {
        // Every reader must accept it: the strict reader too.
        match newc::parse(buf) {
            Ok(a) => {
                if a.entries.len() != k.entries.len() {
                    bad.push(format!(
                        "{what}: strict reader sees {} entries, kernel-like reader {}",
                        a.entries.len(),
                        k.entries.len()
                    ));
                }
            }
            Err(e) => bad.push(format!("{what}: strict newc reader: {e}")),
        }
    }

    // The archive is the plan, record by record.
    if plan.summary.archive_bytes != buf.len() as u64 {
        bad.push(format!(
            "{what}: archive is {} bytes, the plan says {}",
            buf.len(),
            plan.summary.archive_bytes
        ));
    }
    if plan.records.len() != k.entries.len() {
        bad.push(format!(
            "{what}: {} entries, the plan has {} records",
            k.entries.len(),
            plan.records.len()
        ));
    }
    for (r, e) in plan.records.iter().zip(&k.entries) {
        let got = (
            e.name_str(),
            e.offset as u64,
            e.data.start as u64,
            e.namesize as u64,
            e.filesize as u64,
        );
        let want = (r.name.clone(), r.offset, r.data_offset, r.namesize, r.size);
        if got != want {
            bad.push(format!("{what}: entry {got:?} where the plan has {want:?}"));
            break;
        }
    }

    let mut seen_dirs: HashMap<&[u8], &KEntry> = HashMap::new();
    let mut seen_files: HashSet<&[u8]> = HashSet::new();
    let (mut eligible, mut misaligned) = (0usize, Vec::new());
    let mut padding: u64 = 0;
    for e in &k.entries {
        if e.namesize as usize > PATH_MAX {
            bad.push(format!(
                "{what}: {} has namesize {}",
                e.name_str(),
                e.namesize
            ));
        }
        // The kernel never creates parents: each directory must come first.
        if let Some(slash) = e.name.iter().rposition(|&b| b == b'/') {
            if !seen_dirs.contains_key(&e.name[..slash]) {
                bad.push(format!(
                    "{what}: {} comes before its directory",
                    e.name_str()
                ));
            }
        }
        let head = e.data.start - e.offset;
        match e.file_type() {
            S_IFDIR => {
                if let Some(first) = seen_dirs.get(e.name.as_slice()) {
                    // A filler: the same directory again, all of it padding.
                    padding += (e.lead + head) as u64;
                    if (first.ino, first.mode, first.uid, first.gid, first.mtime)
                        != (e.ino, e.mode, e.uid, e.gid, e.mtime)
                    {
                        bad.push(format!(
                            "{what}: repeated directory {} differs from its first entry",
                            e.name_str()
                        ));
                    }
                    continue;
                }
                padding += (e.lead + head - e.min_head()) as u64;
                seen_dirs.insert(&e.name, e);
                match inv.dirs.get(&e.name) {
                    Some(&perm) if perm == e.mode & 0o7777 => {}
                    Some(&perm) => bad.push(format!(
                        "{what}: directory {} has mode {:o}, source {perm:o}",
                        e.name_str(),
                        e.mode & 0o7777
                    )),
                    None => bad.push(format!("{what}: unexpected directory {}", e.name_str())),
                }
            }
            S_IFREG => {
                padding += (e.lead + head - e.min_head()) as u64;
                if e.filesize as u64 > align {
                    eligible += 1;
                    if !(e.data.start as u64).is_multiple_of(align) {
                        misaligned.push(format!("{} at {}", e.name_str(), e.data.start));
                    }
                }
                if !seen_files.insert(&e.name) {
                    bad.push(format!("{what}: file {} appears twice", e.name_str()));
                    continue;
                }
                let Some(src) = inv.files.get(&e.name) else {
                    bad.push(format!("{what}: unexpected file {}", e.name_str()));
                    continue;
                };
                if src.perm != e.mode & 0o7777 || e.nlink != 1 {
                    bad.push(format!(
                        "{what}: {} has mode {:o} nlink {}, source mode {:o}",
                        e.name_str(),
                        e.mode & 0o7777,
                        e.nlink,
                        src.perm
                    ));
                }
                let content = fs::read(&src.path).unwrap();
                if content != buf[e.data.clone()] {
                    bad.push(format!(
                        "{what}: data of {} ({} bytes at {}) differs from {}",
                        e.name_str(),
                        e.filesize,
                        e.data.start,
                        src.path.display()
                    ));
                }
            }
            t => bad.push(format!(
                "{what}: {} has unexpected type {t:o}",
                e.name_str()
            )),
        }
    }
    if !misaligned.is_empty() {
        bad.push(format!(
            "{what}: {} of {eligible} files larger than {align} are not aligned, e.g. {:?}",
            misaligned.len(),
            &misaligned[..misaligned.len().min(5)]
        ));
    }
    if eligible != inv.files.values().filter(|f| f.size > align).count() {
        bad.push(format!("{what}: {eligible} eligible files in the archive"));
    }
    for name in inv.files.keys() {
        if !seen_files.contains(name.as_slice()) {
            bad.push(format!("{what}: file {} missing", name.escape_ascii()));
        }
    }
    for name in inv.dirs.keys() {
        if !seen_dirs.contains_key(name.as_slice()) {
            bad.push(format!("{what}: directory {} missing", name.escape_ascii()));
        }
    }
    if padding != plan.summary.padding_bytes {
        bad.push(format!(
            "{what}: {padding} bytes of padding measured, the plan reports {}",
            plan.summary.padding_bytes
        ));
    }
    println!(
        "{what}: {} entries, {eligible} eligible, {} not aligned to {align}; padding \
         {padding} bytes ({:.3}%), of which {} in {} NUL runs; trailer at {}, archive {} bytes",
        k.entries.len(),
        misaligned.len(),
        pct(padding, buf.len() as u64),
        k.nul_bytes,
        k.nul_runs,
        k.trailer,
        buf.len()
    );
    bad
}

/// Differences between the source tree and an extracted one (type, permission bits,
/// content), both walked in full.
fn compare_trees(src: &Path, got: &Path, diffs: &mut Vec<String>) {
    let names = |d: &Path| -> Vec<std::ffi::OsString> {
        let mut v: Vec<_> = fs::read_dir(d)
            .map(|rd| rd.map(|e| e.unwrap().file_name()).collect())
            .unwrap_or_default();
        v.sort();
        v
    };
    let (a, b) = (names(src), names(got));
    if a != b {
        let a_set: HashSet<_> = a.iter().collect();
        let b_set: HashSet<_> = b.iter().collect();
        for n in a_set.difference(&b_set) {
            diffs.push(format!("missing {}", got.join(n).display()));
        }
        for n in b_set.difference(&a_set) {
            diffs.push(format!("extra {}", got.join(n).display()));
        }
    }
    for n in a.iter().filter(|n| b.contains(n)) {
        let (s, g) = (src.join(n), got.join(n));
        let (sm, gm) = (
            fs::symlink_metadata(&s).unwrap(),
            fs::symlink_metadata(&g).unwrap(),
        );
        let (sp, gp) = (sm.permissions().mode(), gm.permissions().mode());
        if sp != gp {
            diffs.push(format!("{}: mode {gp:o}, source {sp:o}", g.display()));
        }
        if sm.is_dir() && gm.is_dir() {
            compare_trees(&s, &g, diffs);
        } else if sm.is_file() && gm.is_file() {
            if sm.len() != gm.len() || fs::read(&s).unwrap() != fs::read(&g).unwrap() {
                diffs.push(format!("{}: content differs", g.display()));
            }
        } else if sm.file_type() != gm.file_type() {
            diffs.push(format!("{}: type differs", g.display()));
        }
    }
}

/// Extracts `archive` with `tool` (GNU cpio, bsdtar or 3cpio, at `exe`) into a fresh
/// directory and compares the result with the module tree.
fn extract_and_compare(
    tool: &str,
    exe: &Path,
    archive: &Path,
    scratch: &Path,
    kernel: &DebianKernel,
) -> Vec<String> {
    let dest = scratch.join(format!("x-{tool}"));
    fs::create_dir_all(&dest).unwrap();
    let out = match tool {
        "cpio" => support::run(
            Command::new(exe)
                .args(["-idm", "--quiet", "-F"])
                .arg(archive)
                .current_dir(&dest),
        ),
        "bsdtar" => support::run(
            Command::new(exe)
                .arg("-xpf")
                .arg(archive)
                .current_dir(&dest),
        ),
        "3cpio" => support::run(Command::new(exe).arg("-x").arg(archive).current_dir(&dest)),
        _ => unreachable!(),
    };
    let mut diffs = Vec::new();
    if !out.status.success() || !out.stderr.is_empty() {
        diffs.push(format!(
            "{tool} {}: {}: {}",
            archive.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let top = names_in(&dest);
    if top != ["lib"] {
        diffs.push(format!("{tool}: top level holds {top:?}"));
    }
    let under = names_in(&dest.join("lib/modules"));
    if under != [kernel.version.as_str()] {
        diffs.push(format!("{tool}: lib/modules holds {under:?}"));
    }
    compare_trees(
        &kernel.modules_dir(),
        &dest.join("lib/modules").join(&kernel.version),
        &mut diffs,
    );
    let _ = fs::remove_dir_all(&dest);
    println!(
        "{tool} -x {}: {} differences from the source tree",
        archive.display(),
        diffs.len()
    );
    diffs
        .into_iter()
        .map(|d| format!("{tool} of {}: {d}", archive.display()))
        .collect()
}

fn names_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .map(|rd| {
            rd.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Builds the readers-mode and the kernel-only archive at `align`, checks both with the
/// reader above, and extracts the readers-mode one with GNU cpio, bsdtar and 3cpio. With
/// `from_manifest` the alignment and mode come from the manifest (`[defaults] align`,
/// `[image] align_mode`) instead of the command line.
fn build_and_check(align: u64, from_manifest: bool) {
    let Some(kernel) = support::debian_kernel() else {
        return;
    };
    let dir = Scratch::new(&format!("planner_modules_{}k", align / 1024));
    let inv = inventory(&kernel);
    let mut problems = Vec::new();
    for mode in ["readers", "kernel-only"] {
        let what = format!("{}K {mode}", align / 1024);
        let (manifest, args) = if from_manifest {
            let settings =
                format!("[defaults]\nalign = {align}\n[image]\nalign_mode = \"{mode}\"\n");
            let m = write_manifest(&dir, &kernel, &format!("{mode}.toml"), &settings);
            (m, Vec::new())
        } else {
            (
                write_manifest(&dir, &kernel, "modules.toml", ""),
                mode_args(align, mode),
            )
        };
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let plan = plan_json(&manifest, &args);
        let archive = dir.join(format!("{mode}.cpio"));
        let started = Instant::now();
        support::run_ok(
            support::composer()
                .arg("build")
                .arg(&manifest)
                .arg("-o")
                .arg(&archive)
                .arg("--no-sync")
                .args(&args),
        );
        let built = started.elapsed();
        let buf = fs::read(&archive).unwrap();
        println!(
            "{what}: built {} bytes in {:.1} s",
            buf.len(),
            built.as_secs_f64()
        );
        problems.extend(check_archive(&what, &buf, align, mode, &inv, &plan));
        drop(buf);
        if mode == "readers" {
            for (tool, package) in [
                ("cpio", "cpio"),
                ("bsdtar", "libarchive-tools"),
                ("3cpio", "3cpio"),
            ] {
                if let Some(exe) = support::require_tool(tool, package) {
                    problems.extend(extract_and_compare(tool, &exe, &archive, &dir, &kernel));
                }
            }
        }
        let _ = fs::remove_file(&archive);
    }
    if problems.len() > 40 {
        let n = problems.len();
        problems.truncate(40);
        problems.push(format!("... {} more", n - 40));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn module_tree_archives_4k() {
    build_and_check(4096, false);
}

#[test]
fn module_tree_archives_16k() {
    build_and_check(16384, false);
}

#[test]
fn module_tree_archives_64k_from_manifest_settings() {
    build_and_check(65536, true);
}

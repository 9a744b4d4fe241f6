//! A scanned tree, kept between runs: what every module's file says
//! (`.modinfo`, exports, imports), with the identity (device, inode, size,
//! modification and change times) of every module file, of every
//! directory listed and of what followed links lead to, taken before
//! reading them.
//!
//! A kept scan is used only when every one of those paths still has the
//! identity it had: a changed, replaced, added or removed module changes a
//! file's identity or its directory's times, and a dangling link that now
//! leads somewhere shows too. A tree that changed in the two seconds
//! before the scan began is not kept (a change right after reading could
//! otherwise leave the same times). The file records the program version;
//! another version scans again.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustix::fs::{AtFlags, Mode, OFlags};

use super::ko::{KoInfo, Raw, SymbolTable};
use super::scan::{Ident, Scanned};

const MAGIC: &[u8] = b"composer kmod scan\n";
/// Raised when what is kept, or how modules are read, changes.
const FORMAT: u32 = 2;

/// Where the scan of `module_dir` is kept in `cache`.
fn file_for(cache: &Path, module_dir: &Path) -> PathBuf {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    module_dir.hash(&mut h);
    cache.join(format!("scan-{:016x}.bin", h.finish()))
}

fn header(module_dir: &Path) -> Vec<u8> {
    use std::os::unix::ffi::OsStrExt;
    let mut out = Vec::new();
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&FORMAT.to_le_bytes());
    put_bytes(&mut out, env!("CARGO_PKG_VERSION").as_bytes());
    put_bytes(&mut out, module_dir.as_os_str().as_bytes());
    out
}

fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_u32(out, b.len() as u32);
    out.extend_from_slice(b);
}

fn put_u32s(out: &mut Vec<u8>, v: &[u32]) {
    put_u32(out, v.len() as u32);
    for x in v {
        out.extend_from_slice(&x.to_le_bytes());
    }
}

fn put_ident(out: &mut Vec<u8>, i: &Ident) {
    for v in [i.dev, i.ino, i.size] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    for v in [i.mtime, i.mtime_nsec, i.ctime, i.ctime_nsec] {
        out.extend_from_slice(&v.to_le_bytes());
    }
}

/// Reads what the put_ functions wrote; None past the end.
struct Cursor<'a> {
    b: &'a [u8],
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if n > self.b.len() {
            return None;
        }
        let (head, rest) = self.b.split_at(n);
        self.b = rest;
        Some(head)
    }

    fn u32(&mut self) -> Option<u32> {
        self.take(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self) -> Option<u64> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Some(u64::from_le_bytes(a))
    }

    fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }

    fn string(&mut self) -> Option<String> {
        String::from_utf8(self.bytes()?.to_vec()).ok()
    }

    fn u32s(&mut self) -> Option<Vec<u32>> {
        let n = self.u32()? as usize;
        let b = self.take(n.checked_mul(4)?)?;
        Some(
            b.chunks_exact(4)
                .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
        )
    }

    fn ident(&mut self) -> Option<Ident> {
        Some(Ident {
            dev: self.u64()?,
            ino: self.u64()?,
            size: self.u64()?,
            mtime: self.u64()? as i64,
            mtime_nsec: self.u64()? as i64,
            ctime: self.u64()? as i64,
            ctime_nsec: self.u64()? as i64,
        })
    }
}

/// Keeps a scan of `module_dir` in `cache`, unless the tree changed in the
/// two seconds before `started` (or later). Failures are not errors: the
/// next run scans again.
pub(crate) fn save(cache: &Path, module_dir: &Path, scanned: &Scanned, started: SystemTime) {
    let since = started
        .checked_sub(Duration::from_secs(2))
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .unwrap_or_default();
    let limit = (since.as_secs() as i64, since.subsec_nanos() as i64);
    let recent = |i: &Ident| (i.ctime, i.ctime_nsec) >= limit;
    if scanned.paths.iter().any(|(_, i)| recent(i))
        || scanned.modules.iter().any(|(_, _, i)| recent(i))
    {
        return;
    }
    let table = match scanned.modules.first() {
        Some((_, info, _)) => info.symbols().clone(),
        None => Arc::new(SymbolTable::default()),
    };
    if scanned
        .modules
        .iter()
        .any(|(_, info, _)| !Arc::ptr_eq(info.symbols(), &table))
    {
        return;
    }
    // Sized first: growing a buffer of megabytes copies it again and again.
    const IDENT: usize = 56;
    let size = scanned
        .paths
        .iter()
        .map(|(rel, _)| 4 + rel.len() + IDENT)
        .sum::<usize>()
        + table.names().map(|n| 4 + n.len()).sum::<usize>()
        + scanned
            .modules
            .iter()
            .map(|(rel, info, _)| {
                let (text, ends, ids, _) = info.raw().parts();
                4 + rel.len() + IDENT + 4 + text.len() + 8 + 4 * (ends.len() + ids.len()) + 4
            })
            .sum::<usize>()
        + 12;
    // Identities first, with their length: checking them can start before
    // the rest is read.
    let mut out = header(module_dir);
    out.reserve_exact(size + 8);
    let length_at = out.len();
    out.extend_from_slice(&[0; 8]);
    put_u32(&mut out, scanned.paths.len() as u32);
    for (rel, id) in &scanned.paths {
        put_bytes(&mut out, rel.as_bytes());
        put_ident(&mut out, id);
    }
    put_u32(&mut out, scanned.modules.len() as u32);
    for (rel, _, id) in &scanned.modules {
        put_bytes(&mut out, rel.as_bytes());
        put_ident(&mut out, id);
    }
    let length = (out.len() - length_at - 8) as u64;
    out[length_at..length_at + 8].copy_from_slice(&length.to_le_bytes());
    put_u32(&mut out, table.len() as u32);
    for n in table.names() {
        put_bytes(&mut out, n);
    }
    for (_, info, _) in &scanned.modules {
        let (text, ends, ids, exports) = info.raw().parts();
        put_bytes(&mut out, text.as_bytes());
        put_u32s(&mut out, ends);
        put_u32s(&mut out, ids);
        put_u32(&mut out, exports as u32);
    }
    let _ = (|| -> std::io::Result<()> {
        std::fs::create_dir_all(cache)?;
        let mut tmp = tempfile::NamedTempFile::new_in(cache)?;
        tmp.write_all(&out)?;
        tmp.persist(file_for(cache, module_dir))
            .map_err(|e| e.error)?;
        Ok(())
    })();
}

/// The kept scan of `module_dir`, if there is one and the tree is as it
/// was: every module with what its file says, sorted by path.
pub(crate) fn load(cache: &Path, module_dir: &Path) -> Option<Vec<(String, KoInfo)>> {
    use std::os::unix::fs::FileExt;
    let file = std::fs::File::open(file_for(cache, module_dir)).ok()?;
    let size = file.metadata().ok()?.len();
    let head = header(module_dir);
    let mut start = vec![0; head.len() + 8];
    file.read_exact_at(&mut start, 0).ok()?;
    let length = Cursor {
        b: start.strip_prefix(head.as_slice())?,
    }
    .u64()?;
    let at = start.len() as u64;
    if at.checked_add(length)? > size {
        return None;
    }
    let mut idents = vec![0; usize::try_from(length).ok()?];
    file.read_exact_at(&mut idents, at).ok()?;
    let mut c = Cursor { b: &idents };
    let mut paths: Vec<(&str, Ident)> = Vec::new();
    let others = c.u32()? as usize;
    for _ in 0..others {
        let rel = std::str::from_utf8(c.bytes()?).ok()?;
        paths.push((rel, c.ident()?));
    }
    let count = c.u32()? as usize;
    for _ in 0..count {
        let rel = std::str::from_utf8(c.bytes()?).ok()?;
        paths.push((rel, c.ident()?));
    }
    if !c.b.is_empty() {
        return None;
    }
    // The files are checked on another core while the rest is read, then
    // on both.
    let check = Check {
        dir: rustix::fs::open(
            module_dir,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .ok()?,
        paths: &paths,
        next: AtomicUsize::new(0),
        same: AtomicBool::new(true),
    };
    let mods = std::thread::scope(|s| {
        s.spawn(|| check.run());
        let rest = (|| {
            let mut rest = vec![0; usize::try_from(size - at - length).ok()?];
            file.read_exact_at(&mut rest, at + length).ok()?;
            read_modules(&mut Cursor { b: &rest }, &paths[others..])
        })();
        check.run();
        rest
    });
    let same = check.same.into_inner();
    if !same {
        return None;
    }
    let (mods, table) = mods?;
    let table = Arc::new(table);
    Some(
        mods.into_iter()
            .map(|(rel, raw)| (rel, KoInfo::from_raw(raw, table.clone())))
            .collect(),
    )
}

type Kept = (Vec<(String, Raw)>, SymbolTable);

/// The symbol table and the modules (`paths` name them), all of `c`.
fn read_modules(c: &mut Cursor, paths: &[(&str, Ident)]) -> Option<Kept> {
    let names = c.u32()? as usize;
    let mut table = SymbolTable::with_capacity(names.min(1 << 20));
    for i in 0..names {
        // Distinct names: each takes the next number.
        if table.intern(c.bytes()?) as usize != i {
            return None;
        }
    }
    let mut mods = Vec::with_capacity(paths.len());
    for (rel, _) in paths {
        let text = c.string()?;
        let ends = c.u32s()?;
        let ids = c.u32s()?;
        let exports = c.u32()? as usize;
        let raw = Raw::from_parts(text, ends, ids, exports, names)?;
        mods.push((rel.to_string(), raw));
    }
    c.b.is_empty().then_some((mods, table))
}

/// Checks that every path (relative to `dir`) has the identity noted, on
/// as many threads as run [`Check::run`].
struct Check<'a> {
    dir: std::os::fd::OwnedFd,
    paths: &'a [(&'a str, Ident)],
    next: AtomicUsize,
    same: AtomicBool,
}

impl Check<'_> {
    fn run(&self) {
        const STEP: usize = 64;
        loop {
            let start = self.next.fetch_add(STEP, Ordering::Relaxed);
            if start >= self.paths.len() || !self.same.load(Ordering::Relaxed) {
                return;
            }
            let end = (start + STEP).min(self.paths.len());
            for (rel, id) in &self.paths[start..end] {
                let rel = if rel.is_empty() { "." } else { rel };
                let now = rustix::fs::statat(&self.dir, rel, AtFlags::empty());
                let same = match now {
                    Ok(st) => Ident::of(&st) == *id,
                    Err(_) => *id == Ident::ABSENT,
                };
                if !same {
                    self.same.store(false, Ordering::Relaxed);
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::ko;
    use super::super::scan::scan_tree;
    use super::*;

    fn tree() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        let ko = ko::tests::tiny_module(&["alias=fs-foo"], &["foo_sym"], &["printk"]);
        for rel in ["kernel/fs/foo.ko", "kernel/fs/bar.ko", "kernel/lib/baz.ko"] {
            let p = d.path().join("mods").join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, &ko).unwrap();
        }
        d
    }

    fn an_hour_later() -> SystemTime {
        SystemTime::now() + Duration::from_secs(3600)
    }

    #[test]
    fn keeps_and_checks_a_scan() {
        let d = tree();
        let (mods, cache) = (d.path().join("mods"), d.path().join("cache"));
        let scanned = scan_tree(&mods, true, true).unwrap();
        // Files written just now are not kept.
        save(&cache, &mods, &scanned, SystemTime::now());
        assert!(load(&cache, &mods).is_none());
        // As if the scan ran an hour from now.
        save(&cache, &mods, &scanned, an_hour_later());
        let kept = load(&cache, &mods).expect("kept");
        let fresh: Vec<(String, KoInfo)> = scanned
            .modules
            .iter()
            .map(|(r, i, _)| (r.clone(), i.clone()))
            .collect();
        assert_eq!(kept, fresh);
        assert!(Arc::ptr_eq(kept[0].1.symbols(), kept[2].1.symbols()));

        // A module rewritten (same size), added or removed: not used.
        std::thread::sleep(Duration::from_millis(20));
        let foo = mods.join("kernel/fs/foo.ko");
        let mut bytes = std::fs::read(&foo).unwrap();
        bytes[70] ^= 1;
        std::fs::write(&foo, &bytes).unwrap();
        assert!(load(&cache, &mods).is_none());
        save(
            &cache,
            &mods,
            &scan_tree(&mods, true, true).unwrap(),
            an_hour_later(),
        );
        assert!(load(&cache, &mods).is_some());
        std::fs::write(mods.join("kernel/lib/new.ko"), &bytes).unwrap();
        assert!(load(&cache, &mods).is_none());
        save(
            &cache,
            &mods,
            &scan_tree(&mods, true, true).unwrap(),
            an_hour_later(),
        );
        assert_eq!(load(&cache, &mods).unwrap().len(), 4);
        std::fs::remove_file(mods.join("kernel/lib/new.ko")).unwrap();
        assert!(load(&cache, &mods).is_none());

        // A dangling link that comes to lead to a module.
        std::os::unix::fs::symlink("../../../elsewhere/x.ko", mods.join("kernel/lib/x.ko"))
            .unwrap();
        save(
            &cache,
            &mods,
            &scan_tree(&mods, true, true).unwrap(),
            an_hour_later(),
        );
        assert_eq!(load(&cache, &mods).unwrap().len(), 3);
        std::fs::create_dir_all(d.path().join("elsewhere")).unwrap();
        std::fs::write(d.path().join("elsewhere/x.ko"), &bytes).unwrap();
        assert!(load(&cache, &mods).is_none());

        // Another tree does not read this one's scan; garbage is ignored.
        assert!(load(&cache, &d.path().join("other")).is_none());
        let file = file_for(&cache, &mods);
        let mut kept = std::fs::read(&file).unwrap();
        kept.truncate(kept.len() - 3);
        std::fs::write(&file, &kept).unwrap();
        assert!(load(&cache, &mods).is_none());
    }
}

//! Finding and reading the modules of a tree on all cores.
//!
//! [`scan`] walks the module directory and reads each module as it is
//! found: a thread takes a directory, lists it (the entry types come from
//! the directory itself; only symbolic links are looked at further), hands
//! its subdirectories and all but the first few of its modules back to the
//! queue, and reads those few, each opened relative to the directory it
//! listed (one short path lookup). Nobody waits for the walk to end before
//! reading, and big directories are shared out.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags};

use super::error::KmodError;
use super::ko::{self, KoInfo, Raw, Reader, SymbolTable};

/// Modules read by one piece of work, before the next is taken.
const CHUNK: usize = 8;

fn threads_for(items: usize) -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 8)
        .min(items.div_ceil(CHUNK).max(1))
}

fn io_at(path: PathBuf) -> impl FnOnce(std::io::Error) -> KmodError {
    move |source| KmodError::Io { path, source }
}

fn module_error(path: PathBuf, e: std::io::Error) -> KmodError {
    match e.kind() {
        std::io::ErrorKind::InvalidData => KmodError::BadModule {
            path,
            message: e.to_string(),
        },
        _ => KmodError::Io { path, source: e },
    }
}

/// Every module file below `dir` (relative paths), as depmod finds them
/// (`build` and `source` are skipped, symbolic links followed), sorted.
pub fn list_module_files(dir: &Path) -> Result<Vec<String>, KmodError> {
    Ok(scan(dir, false)?.into_iter().map(|(rel, _)| rel).collect())
}

/// Every module file below `dir`, read (with `read`), sorted by path. The
/// modules' symbols are numbered in one table.
pub fn scan(dir: &Path, read: bool) -> Result<Vec<(String, KoInfo)>, KmodError> {
    let s = scan_tree(dir, read, false)?;
    Ok(s.modules
        .into_iter()
        .map(|(rel, info, _)| (rel, info))
        .collect())
}

/// What identifies a file's state: where it is and when it last changed. A
/// file whose identity is the same has the same contents.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Ident {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub mtime: i64,
    pub mtime_nsec: i64,
    pub ctime: i64,
    pub ctime_nsec: i64,
}

impl Ident {
    /// Nothing there (or nothing that can be looked at).
    pub(crate) const ABSENT: Ident = Ident {
        dev: 0,
        ino: 0,
        size: 0,
        mtime: 0,
        mtime_nsec: 0,
        ctime: 0,
        ctime_nsec: 0,
    };

    // The field types of `Stat` differ between architectures.
    #[allow(clippy::unnecessary_cast)]
    pub(crate) fn of(st: &rustix::fs::Stat) -> Ident {
        Ident {
            dev: st.st_dev as u64,
            ino: st.st_ino as u64,
            size: st.st_size as u64,
            mtime: st.st_mtime as i64,
            mtime_nsec: st.st_mtime_nsec as i64,
            ctime: st.st_ctime as i64,
            ctime_nsec: st.st_ctime_nsec as i64,
        }
    }
}

/// A walked tree: its modules and, when asked for, the identities of the
/// module files and of the other paths the walk depends on: the
/// directories listed (taken before listing them) and what the links that
/// lead to neither a directory nor a module lead to ([`Ident::ABSENT`] for
/// nothing).
pub(crate) struct Scanned {
    pub modules: Vec<(String, KoInfo, Ident)>,
    pub paths: Vec<(String, Ident)>,
}

pub(crate) fn scan_tree(dir: &Path, read: bool, idents: bool) -> Result<Scanned, KmodError> {
    crate::progress::start(crate::progress::Step::Modules, 0);
    let queue = Queue {
        state: Mutex::new(State {
            work: vec![Work::Dir(String::new())],
            busy: 0,
        }),
        wake: Condvar::new(),
    };
    let threads = threads_for(usize::MAX);
    let run = || {
        let mut w = Walker {
            dir,
            read,
            idents,
            paths: Vec::new(),
            reader: Reader::default(),
            symbols: SymbolTable::with_capacity(1 << 14),
            found: Vec::new(),
            errors: Vec::new(),
        };
        while let Some(work) = queue.take() {
            let more = w.run(work);
            queue.done(more);
        }
        (w.found, w.errors, w.symbols, w.paths)
    };
    let parts: Vec<_> = if threads == 1 {
        vec![run()]
    } else {
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads).map(|_| s.spawn(run)).collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
                .collect()
        })
    };
    let mut read = Vec::new();
    let mut errors = Vec::new();
    let mut paths = Vec::new();
    for (found, e, symbols, p) in parts {
        read.push((found, symbols));
        errors.extend(e);
        paths.extend(p);
    }
    // The first problem in path order, whichever thread met it.
    if let Some((_, e)) = errors.into_iter().min_by(|a, b| a.0.cmp(&b.0)) {
        return Err(e);
    }
    let (mut found, table) = one_table(read);
    found.sort_unstable_by(|a, b| a.0 .0.cmp(&b.0 .0));
    paths.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    let table = Arc::new(table);
    Ok(Scanned {
        modules: found
            .into_iter()
            .map(|((rel, id), raw)| (rel, KoInfo::from_raw(raw, table.clone()), id))
            .collect(),
        paths,
    })
}

enum Work {
    /// A directory to list, relative to the module directory.
    Dir(String),
    /// Modules of a listed directory: (directory, its path, file names).
    Files(Arc<Dir>, String, Vec<String>),
}

struct State {
    work: Vec<Work>,
    /// Threads working on something that may bring more work.
    busy: usize,
}

struct Queue {
    state: Mutex<State>,
    wake: Condvar,
}

impl Queue {
    /// The next piece of work; None once there is none and nobody can make
    /// more.
    fn take(&self) -> Option<Work> {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(w) = s.work.pop() {
                s.busy += 1;
                return Some(w);
            }
            if s.busy == 0 {
                return None;
            }
            s = self.wake.wait(s).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn done(&self, more: Vec<Work>) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.busy -= 1;
        let wake = !more.is_empty() || s.busy == 0;
        s.work.extend(more);
        drop(s);
        if wake {
            self.wake.notify_all();
        }
    }
}

struct Walker<'a> {
    dir: &'a Path,
    read: bool,
    /// Whether to note identities (in `paths` and `found`).
    idents: bool,
    paths: Vec<(String, Ident)>,
    reader: Reader,
    symbols: SymbolTable,
    /// ((path, identity), what the file says)
    found: Vec<((String, Ident), Raw)>,
    /// (path relative to the module directory, error)
    errors: Vec<(String, KmodError)>,
}

fn join(rel: &str, name: &str) -> String {
    if rel.is_empty() {
        name.to_string()
    } else {
        format!("{rel}/{name}")
    }
}

impl Walker<'_> {
    fn run(&mut self, work: Work) -> Vec<Work> {
        match work {
            Work::Dir(rel) => match self.list(&rel) {
                Ok(more) => more,
                Err(e) => {
                    self.errors.push((rel, e));
                    Vec::new()
                }
            },
            Work::Files(dir, rel, names) => {
                self.files(&dir, &rel, &names);
                Vec::new()
            }
        }
    }

    /// Lists one directory: subdirectories and the modules past the first
    /// chunk become work; the first chunk is read here.
    fn list(&mut self, rel: &str) -> Result<Vec<Work>, KmodError> {
        let host = self.dir.join(rel);
        let fd = rustix::fs::open(
            &host,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| io_at(host.clone())(e.into()))?;
        if self.idents {
            let st = rustix::fs::fstat(&fd).map_err(|e| io_at(host.clone())(e.into()))?;
            self.paths.push((rel.to_string(), Ident::of(&st)));
        }
        let mut dir = Dir::new(fd).map_err(|e| io_at(host.clone())(e.into()))?;
        let mut more = Vec::new();
        let mut modules = Vec::new();
        while let Some(e) = dir.read() {
            let e = e.map_err(|e| io_at(host.clone())(e.into()))?;
            let Ok(name) = e.file_name().to_str() else {
                continue;
            };
            if name == "." || name == ".." {
                continue;
            }
            if rel.is_empty() && matches!(name, "build" | "source") {
                continue;
            }
            let mut kind = e.file_type();
            if !matches!(kind, FileType::Directory | FileType::RegularFile) {
                // Links are followed; a dangling one is no module. Where a
                // link leads to neither a directory nor a module, its
                // target is noted too: it could turn into one.
                let fd = dir.fd().map_err(|e| io_at(host.clone())(e.into()))?;
                let st = rustix::fs::statat(fd, name, AtFlags::empty());
                if let Ok(st) = &st {
                    kind = FileType::from_raw_mode(st.st_mode);
                }
                let walked = kind == FileType::Directory
                    || (kind == FileType::RegularFile && ko::is_module_file(name));
                if self.idents && (st.is_err() || !walked) {
                    let id = st.as_ref().map_or(Ident::ABSENT, Ident::of);
                    self.paths.push((join(rel, name), id));
                }
                if st.is_err() {
                    continue;
                }
                if kind == FileType::Directory {
                    check_loop(&host, &host.join(name))?;
                }
            }
            match kind {
                FileType::Directory => more.push(Work::Dir(join(rel, name))),
                FileType::RegularFile if ko::is_module_file(name) => {
                    modules.push(name.to_string());
                }
                _ => {}
            }
        }
        if !self.read {
            for m in modules {
                self.found
                    .push(((join(rel, &m), Ident::default()), Raw::default()));
            }
            return Ok(more);
        }
        let dir = Arc::new(dir);
        let mut chunks = modules.chunks(CHUNK);
        let first = chunks.next().unwrap_or_default().to_vec();
        for c in chunks {
            more.push(Work::Files(dir.clone(), rel.to_string(), c.to_vec()));
        }
        self.files(&dir, rel, &first);
        Ok(more)
    }

    fn files(&mut self, dir: &Dir, rel: &str, names: &[String]) {
        for name in names {
            let relpath = join(rel, name);
            let r = dir
                .fd()
                .map_err(std::io::Error::from)
                .and_then(|fd| ko::open_at(fd, name))
                .and_then(|f| {
                    // The identity first: a change while reading shows.
                    let id = match self.idents {
                        true => Ident::of(&rustix::fs::fstat(&f)?),
                        false => Ident::default(),
                    };
                    let raw = self.reader.read_file(&f, name, &mut self.symbols)?;
                    Ok((raw, id))
                });
            match r {
                Ok((raw, id)) => {
                    crate::progress::advance(1);
                    self.found.push(((relpath, id), raw))
                }
                Err(e) => {
                    let path = self.dir.join(&relpath);
                    self.errors.push((relpath, module_error(path, e)));
                }
            }
        }
    }
}

/// A symbolic link to a directory that contains it would be walked forever.
fn check_loop(dir: &Path, link: &Path) -> Result<(), KmodError> {
    let target = std::fs::canonicalize(link).map_err(io_at(link.to_path_buf()))?;
    let here = std::fs::canonicalize(dir).map_err(io_at(dir.to_path_buf()))?;
    if here.starts_with(&target) {
        return Err(KmodError::Io {
            path: link.to_path_buf(),
            source: std::io::Error::other("file system loop"),
        });
    }
    Ok(())
}

/// Reads the given modules (paths relative to `dir`) on all cores. Results
/// keep the input order.
pub fn read_modules(dir: &Path, relpaths: &[String]) -> Result<Vec<KoInfo>, KmodError> {
    crate::progress::start(crate::progress::Step::Modules, relpaths.len() as u64);
    let next = AtomicUsize::new(0);
    let threads = threads_for(relpaths.len());
    let work = || {
        let mut reader = Reader::default();
        let mut symbols = SymbolTable::default();
        let mut local: Vec<(usize, Raw)> = Vec::new();
        loop {
            let start = next.fetch_add(CHUNK, Ordering::Relaxed);
            if start >= relpaths.len() {
                break;
            }
            for (i, rel) in relpaths.iter().enumerate().skip(start).take(CHUNK) {
                match reader.read_raw_in(dir, rel, &mut symbols) {
                    Ok(raw) => {
                        crate::progress::advance(1);
                        local.push((i, raw))
                    }
                    Err(e) => return Err((i, module_error(dir.join(rel), e))),
                }
            }
        }
        Ok((local, symbols))
    };
    let parts: Vec<_> = if threads == 1 {
        vec![work()]
    } else {
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads).map(|_| s.spawn(work)).collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
                .collect()
        })
    };
    // The first problem in the given order, whichever thread met it.
    let mut ok = Vec::new();
    let mut first_error: Option<(usize, KmodError)> = None;
    for p in parts {
        match p {
            Ok(p) => ok.push(p),
            Err((i, e)) => {
                if first_error.as_ref().is_none_or(|(j, _)| i < *j) {
                    first_error = Some((i, e));
                }
            }
        }
    }
    if let Some((_, e)) = first_error {
        return Err(e);
    }
    let (mut read, table) = one_table(ok);
    read.sort_unstable_by_key(|(i, _)| *i);
    let table = Arc::new(table);
    Ok(read
        .into_iter()
        .map(|(_, raw)| KoInfo::from_raw(raw, table.clone()))
        .collect())
}

/// The modules read by several threads, each numbering symbols in its own
/// table, numbered in one: the first thread's, with the others' names added.
fn one_table<K>(parts: Vec<(Vec<(K, Raw)>, SymbolTable)>) -> (Vec<(K, Raw)>, SymbolTable) {
    let mut all = Vec::new();
    let mut table: Option<SymbolTable> = None;
    for (mut read, symbols) in parts {
        match &mut table {
            None => table = Some(symbols),
            Some(t) => {
                let map = t.absorb(&symbols);
                for (_, raw) in &mut read {
                    raw.renumber(&map);
                }
            }
        }
        all.extend(read);
    }
    (all, table.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_and_reads_modules_like_depmod() {
        let d = tempfile::tempdir().unwrap();
        let m = d.path();
        let ko = ko::tests::tiny_module(&["alias=fs-foo"], &["foo_sym"], &["printk"]);
        let mut want = Vec::new();
        for i in 0..40 {
            let rel = format!("kernel/drivers/many/m{i:02}.ko");
            want.push(rel.clone());
            std::fs::create_dir_all(m.join(&rel).parent().unwrap()).unwrap();
            std::fs::write(m.join(&rel), &ko).unwrap();
        }
        std::fs::create_dir_all(m.join("kernel/fs")).unwrap();
        std::fs::write(m.join("kernel/fs/notes.txt"), b"no module").unwrap();
        std::fs::create_dir_all(m.join("build/x")).unwrap();
        std::fs::write(m.join("build/x/skipped.ko"), &ko).unwrap();
        // A linked directory is followed, a dangling link ignored.
        std::os::unix::fs::symlink("kernel/drivers/many", m.join("extra")).unwrap();
        std::os::unix::fs::symlink("nowhere.ko", m.join("kernel/dangling.ko")).unwrap();
        for i in 0..40 {
            want.push(format!("extra/m{i:02}.ko"));
        }
        want.sort();

        let got = scan(m, true).unwrap();
        let paths: Vec<&str> = got.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(paths, want);
        assert!(got
            .iter()
            .all(|(_, i)| i.values("alias").eq(["fs-foo"]) && i.exports().count() == 1));
        assert_eq!(list_module_files(m).unwrap(), want);

        // A link back up is a loop, reported rather than walked.
        std::os::unix::fs::symlink("..", m.join("kernel/fs/up")).unwrap();
        assert!(scan(m, true).is_err());
    }

    #[test]
    fn reports_the_first_bad_module() {
        let d = tempfile::tempdir().unwrap();
        let m = d.path();
        std::fs::create_dir_all(m.join("kernel")).unwrap();
        let ko = ko::tests::tiny_module(&[], &[], &[]);
        for n in ["a", "c", "e"] {
            std::fs::write(m.join(format!("kernel/{n}.ko")), &ko).unwrap();
        }
        std::fs::write(m.join("kernel/b.ko"), b"not elf").unwrap();
        std::fs::write(m.join("kernel/d.ko"), b"not elf either").unwrap();
        match scan(m, true) {
            Err(KmodError::BadModule { path, .. }) => assert!(path.ends_with("kernel/b.ko")),
            other => panic!("{:?}", other.map(|v| v.len())),
        }
    }
}

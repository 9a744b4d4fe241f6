//! Where an image goes, and how it gets there without destroying anything.
//!
//! * A regular file, or a path that does not exist yet, is written through a
//!   temporary file in the same directory (`.composer-PID-XXXXXX.tmp`) and
//!   renamed into place only after it is complete (and synced); on any
//!   failure the temporary file is removed and an existing output is left as
//!   it was. A replaced file keeps its permission bits and, where the
//!   process may set them, its owner and group; a new one is 0600, as
//!   gen_init_cpio `-o` and dracut make theirs. An image that holds
//!   secrets ([`Output::private`]) is 0600 even when it replaces a file.
//! * A symlink is followed (a chain of them too, and one that dangles): the
//!   file it names is what gets replaced, as `install` and `cp` do; the
//!   link stays.
//! * A character device or a FIFO (`/dev/null`, `/dev/stdout`, `>(cmd)`) is
//!   written through, in order, as standard output would be; nothing is
//!   renamed over it.
//! * Directories, block devices and sockets are refused.
//!
//! Temporary files this process has open are listed in a registry, so that
//! a signal handler can remove them ([`remove_temporaries`]); one that a
//! killed build left behind is removed by the next build into the same
//! directory, once no process of its PID is alive.

use std::fs::{File, Metadata};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::error::{Error, Result};

pub enum Output {
    /// A stream (standard output, a device, a FIFO), written in order.
    Stream { file: File, name: String },
    Atomic {
        temp: Temporary,
        /// The file that will be replaced (symlinks resolved).
        target: PathBuf,
        /// What `-o` said, for messages.
        shown: PathBuf,
        /// The replaced file's mode and owner, to keep.
        keep: Option<(u32, u32, u32)>,
    },
}

/// Temporary files of this process not yet renamed or removed.
static TEMPORARIES: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Removes every temporary file this process is writing (for a signal
/// handler that is about to end the process). The registry stays locked
/// afterwards, so no thread creates another temporary file before the
/// process ends.
pub fn remove_temporaries() {
    let list = TEMPORARIES.lock().unwrap_or_else(|e| e.into_inner());
    for p in list.iter() {
        let _ = std::fs::remove_file(p);
    }
    std::mem::forget(list);
}

/// A temporary file in the registry while it exists.
pub struct Temporary(Option<tempfile::NamedTempFile>);

impl Temporary {
    /// Creates a temporary file in `dir` and registers it in one step under
    /// the registry's lock: a signal handler either runs before the file
    /// exists or sees it listed.
    fn create_in(dir: &Path) -> Result<Temporary> {
        let mut list = TEMPORARIES.lock().unwrap_or_else(|e| e.into_inner());
        let file = tempfile::Builder::new()
            .prefix(&temp_prefix())
            .suffix(".tmp")
            .tempfile_in(dir)
            .map_err(|e| Error::io(dir, e))?;
        list.push(file.path().to_path_buf());
        Ok(Temporary(Some(file)))
    }

    fn file(&self) -> &tempfile::NamedTempFile {
        self.0.as_ref().expect("a temporary file until it is taken")
    }

    /// Renames the file to `target` and takes it out of the registry in
    /// one step under the registry's lock, so a signal handler removes it
    /// until the moment it is renamed and never after.
    fn persist(mut self, target: &Path) -> std::io::Result<()> {
        let mut list = TEMPORARIES.lock().unwrap_or_else(|e| e.into_inner());
        let file = self.0.take().expect("a temporary file until it is renamed");
        let path = file.path().to_path_buf();
        // On failure the returned file is dropped, which removes it.
        let done = file.persist(target).map(drop).map_err(|e| e.error);
        list.retain(|p| *p != path);
        done
    }
}

impl Drop for Temporary {
    /// Removes the file and its registry entry under the lock.
    fn drop(&mut self) {
        if let Some(f) = self.0.take() {
            let mut list = TEMPORARIES.lock().unwrap_or_else(|e| e.into_inner());
            let path = f.path().to_path_buf();
            drop(f);
            list.retain(|p| *p != path);
        }
    }
}

/// The prefix of this process's temporary files.
fn temp_prefix() -> String {
    format!(".composer-{}-", std::process::id())
}

/// Removes `.composer-PID-*.tmp` files in `dir` whose process is gone.
fn remove_stale(dir: &Path) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    let me = std::process::id();
    for e in rd.flatten() {
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(rest) = name.strip_prefix(".composer-") else {
            continue;
        };
        if !name.ends_with(".tmp") {
            continue;
        }
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if pid == me || Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        if e.file_type().is_ok_and(|t| t.is_file()) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// The file a symlink chain ends at (which need not exist).
fn follow_links(path: &Path) -> Result<PathBuf> {
    let mut cur = path.to_path_buf();
    for _ in 0..40 {
        match std::fs::symlink_metadata(&cur) {
            Ok(m) if m.file_type().is_symlink() => {
                let target = std::fs::read_link(&cur).map_err(|e| Error::io(&cur, e))?;
                cur = match cur.parent() {
                    Some(dir) if target.is_relative() => dir.join(target),
                    _ => target,
                };
            }
            _ => return Ok(cur),
        }
    }
    Err(Error::usage(format!(
        "output `{}`: too many levels of symbolic links",
        path.display()
    )))
}

fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

impl Output {
    /// Writes to an open stream; `name` names it in messages.
    pub fn stream(file: File, name: &str) -> Output {
        Output::Stream {
            file,
            name: name.to_string(),
        }
    }

    /// Opens `target` for writing, as the module documentation says.
    pub fn create(target: &Path) -> Result<Output> {
        let shown = target.display();
        // The kernel follows every link (magic ones of /proc too) to tell
        // what the path names.
        match std::fs::metadata(target) {
            Ok(m) if m.is_dir() => {
                return Err(Error::usage(format!("output `{shown}` is a directory"))
                    .with_hint("name the archive file, e.g. -o initrd.img"))
            }
            Ok(m) if m.file_type().is_char_device() || m.file_type().is_fifo() => {
                let file = std::fs::OpenOptions::new()
                    .write(true)
                    .custom_flags(rustix::fs::OFlags::NOCTTY.bits() as i32)
                    .open(target)
                    .map_err(|e| Error::io(target, e))?;
                return Ok(Output::stream(file, &shown.to_string()));
            }
            Ok(m) if !m.is_file() => {
                let what = if m.file_type().is_block_device() {
                    "a block device"
                } else {
                    "a socket"
                };
                return Err(Error::usage(format!(
                    "output `{shown}` is {what}; composer writes images to files, character \
                     devices and pipes only"
                ))
                .with_hint("name a file, e.g. -o initrd.img"));
            }
            _ => {}
        }
        let resolved = match std::fs::metadata(target) {
            // A regular file: where it really is, through links (magic
            // ones too).
            Ok(_) => std::fs::canonicalize(target).map_err(|e| Error::io(target, e))?,
            // Missing, or a dangling link: where the link chain ends.
            Err(_) => follow_links(target)?,
        };
        let dir = parent_dir(&resolved);
        if !dir.is_dir() {
            return Err(Error::usage(format!(
                "the output directory `{}` does not exist",
                dir.display()
            ))
            .with_hint("create it first, or choose another -o path"));
        }
        remove_stale(&dir);
        let keep = std::fs::metadata(&resolved)
            .ok()
            .filter(Metadata::is_file)
            .map(|m| (m.mode() & 0o7777, m.uid(), m.gid()));
        Ok(Output::Atomic {
            temp: Temporary::create_in(&dir)?,
            target: resolved,
            shown: target.to_path_buf(),
            keep,
        })
    }

    /// For an image that holds secrets: written 0600 even when the file it
    /// replaces allowed more (its owner is still kept). A new file is 0600
    /// anyway; a stream is not a file composer may change.
    pub fn private(mut self) -> Self {
        if let Output::Atomic {
            keep: Some((mode, _, _)),
            ..
        } = &mut self
        {
            *mode = 0o600;
        }
        self
    }

    /// Bytes the output's filesystem has free for this file, and the
    /// directory it goes to; None for a stream.
    pub fn free_space(&self) -> Option<(u64, PathBuf)> {
        match self {
            Output::Stream { .. } => None,
            Output::Atomic { temp, target, .. } => {
                let st = rustix::fs::fstatvfs(temp.file().as_file()).ok()?;
                Some((st.f_bavail.saturating_mul(st.f_frsize), parent_dir(target)))
            }
        }
    }

    pub fn file(&self) -> &File {
        match self {
            Output::Stream { file, .. } => file,
            Output::Atomic { temp, .. } => temp.file().as_file(),
        }
    }

    /// A name for messages.
    pub fn name(&self) -> String {
        match self {
            Output::Stream { name, .. } => name.clone(),
            Output::Atomic { shown, .. } => shown.display().to_string(),
        }
    }

    /// Makes the output visible: syncs (when `sync`), renames into place,
    /// and syncs the directory so the rename itself is durable.
    pub fn commit(self, sync: bool) -> Result<()> {
        match self {
            Output::Stream { file, name } => {
                // fsync on a pipe or terminal fails with EINVAL; that is fine.
                if sync && file.metadata().map(|m| m.is_file()).unwrap_or(false) {
                    file.sync_all().map_err(|e| Error::io(name, e))?;
                }
                Ok(())
            }
            Output::Atomic {
                temp,
                target,
                shown,
                keep,
            } => finish(temp, &target, &shown, keep, sync),
        }
    }
}

fn finish(
    temp: Temporary,
    target: &Path,
    shown: &Path,
    keep: Option<(u32, u32, u32)>,
    sync: bool,
) -> Result<()> {
    if let Some((mode, uid, gid)) = keep {
        let f = temp.file().as_file();
        // An owner only root may give; a group the user may not have.
        let _ = rustix::fs::fchown(
            f,
            Some(rustix::fs::Uid::from_raw(uid)),
            Some(rustix::fs::Gid::from_raw(gid)),
        );
        f.set_permissions(std::fs::Permissions::from_mode(mode))
            .map_err(|e| Error::io(shown, e))?;
    }
    if sync {
        temp.file()
            .as_file()
            .sync_all()
            .map_err(|e| Error::io(shown, e))?;
    }
    temp.persist(target).map_err(|e| Error::io(shown, e))?;
    if sync {
        let dir = parent_dir(target);
        File::open(&dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| Error::io(&dir, e))?;
    }
    Ok(())
}

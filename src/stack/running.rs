//! The running machine's stack under a root: read once per process and root,
//! for every step of a build that asks (hostonly modules and programs, the
//! systemd init's layers, the loader's choice of the clevis profile).

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::model::{Kind as Layer, Stack};
use super::sysfs::{mount_holding, read, Sources};
use crate::resolve::root::Root;

/// The most of a crypttab read.
const MAX_CRYPTTAB: usize = 1 << 20;

/// The mount points whose stacks an image brings up.
pub const MOUNTS: [&str; 2] = ["/", "/usr"];

/// The running machine's stack under [`MOUNTS`] of `root`, with the crypttab
/// of that root; read once per process and root. For a root that is not
/// `/`, the filesystem holding it (a mounted target, or the running root
/// for a directory in it) and its own `usr` mount stand for `/` and `/usr`,
/// named so.
pub fn running(root: &Path) -> Result<Stack, String> {
    type Memo = Option<(PathBuf, Result<Stack, String>)>;
    static READ: Mutex<Memo> = Mutex::new(None);
    let mut memo = READ.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((at, stack)) = memo.as_ref() {
        if at == root {
            return stack.clone();
        }
    }
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let crypttab = Root::new(root)
        .resolve(Path::new("/etc/crypttab"), true)
        .ok()
        .and_then(|p| super::superblock::read_bounded(&p, MAX_CRYPTTAB))
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    let sources = Sources {
        sys: Path::new("/sys"),
        dev: Some(Path::new("/dev")),
        mountinfo: &mountinfo,
        crypttab: &crypttab,
    };
    let stack = if root == Path::new("/") {
        read(&sources, &MOUNTS)
    } else {
        let dir = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
        let dir = dir.to_string_lossy();
        let top = mount_holding(&mountinfo, &dir).unwrap_or_else(|| "/".into());
        let usr = format!("{}/usr", dir.trim_end_matches('/'));
        read(&sources, &[&top, &usr]).map(|mut s| {
            for l in &mut s.layers {
                if let Layer::Filesystem(f) = &mut l.kind {
                    if f.mountpoint == top {
                        f.mountpoint = MOUNTS[0].into();
                    } else if f.mountpoint == usr {
                        f.mountpoint = MOUNTS[1].into();
                    }
                }
            }
            s
        })
    }
    .map_err(|e| e.to_string());
    *memo = Some((root.to_path_buf(), stack.clone()));
    stack
}

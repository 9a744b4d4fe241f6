//! Firmware files a module asks for (`firmware=` in its `.modinfo`), looked
//! up where the kernel's loader looks: the updates and versioned
//! directories first, plain files before `.zst` and `.xz` ones.

use std::path::{Component, Path, PathBuf};

use crate::resolve::root::Root;

/// A firmware file found in the root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FirmwareFile {
    /// The name the module asked for.
    pub name: String,
    /// Where it goes in the image (also where it is in the root), without
    /// a leading `/`, e.g. `lib/firmware/updates/foo.bin.zst`.
    pub image_path: String,
    pub host: PathBuf,
    pub size: u64,
}

/// The directories searched, in the kernel's order, inside the root.
pub fn search_dirs(kver: &str) -> Vec<String> {
    let mut dirs = Vec::new();
    for base in ["lib/firmware", "usr/lib/firmware"] {
        dirs.push(format!("{base}/updates/{kver}"));
        dirs.push(format!("{base}/updates"));
        dirs.push(format!("{base}/{kver}"));
        dirs.push(base.to_string());
    }
    dirs
}

/// A firmware name that stays inside the firmware directory.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('/')
        && Path::new(name)
            .components()
            .all(|c| matches!(c, Component::Normal(_)))
}

/// The firmware directories of one root and kernel that exist, for many
/// lookups: a name is looked for only where it can be.
#[derive(Clone, Debug)]
pub struct Search {
    dirs: Vec<String>,
}

impl Search {
    pub fn new(root: &Root, kver: &str) -> Search {
        let dirs = search_dirs(kver)
            .into_iter()
            .filter(|d| {
                root.resolve(Path::new(d), true)
                    .is_ok_and(|host| host.is_dir())
            })
            .collect();
        Search { dirs }
    }

    /// [`find`] in the directories found by [`Search::new`] (with the same
    /// root).
    pub fn find(&self, root: &Root, name: &str) -> Option<FirmwareFile> {
        if !valid_name(name) {
            return None;
        }
        for suffix in ["", ".zst", ".xz"] {
            for dir in &self.dirs {
                let inside = format!("{dir}/{name}{suffix}");
                let Ok(host) = root.resolve(Path::new(&inside), true) else {
                    continue;
                };
                if let Ok(meta) = std::fs::metadata(&host) {
                    if meta.is_file() {
                        return Some(FirmwareFile {
                            name: name.to_string(),
                            image_path: inside,
                            host,
                            size: meta.len(),
                        });
                    }
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_search_order() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        for p in [
            "lib/firmware/vendor/a.bin",
            "lib/firmware/updates/vendor/a.bin.zst",
            "lib/firmware/6.1.0/vendor/b.bin",
            "lib/firmware/vendor/b.bin",
            "lib/firmware/vendor/c.bin.xz",
            "lib/firmware/updates/vendor/c.bin.zst",
        ] {
            std::fs::create_dir_all(r.join(p).parent().unwrap()).unwrap();
            std::fs::write(r.join(p), b"fw").unwrap();
        }
        let root = Root::new(r);
        let search = Search::new(&root, "6.1.0");
        let at = |n: &str| search.find(&root, n).map(|f| f.image_path);
        assert_eq!(
            at("vendor/a.bin").as_deref(),
            Some("lib/firmware/vendor/a.bin"),
            "plain beats compressed"
        );
        assert_eq!(
            at("vendor/b.bin").as_deref(),
            Some("lib/firmware/6.1.0/vendor/b.bin")
        );
        assert_eq!(
            at("vendor/c.bin").as_deref(),
            Some("lib/firmware/updates/vendor/c.bin.zst")
        );
        assert_eq!(at("vendor/missing.bin"), None);
        assert_eq!(at("../../etc/passwd"), None);
        assert!(!valid_name("/abs"));
    }
}

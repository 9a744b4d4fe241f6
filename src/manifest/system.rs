//! The system configuration `composer build` reads when it is given no
//! manifest, inside the root (`--root`, else `/`):
//!
//! * `/etc/composer/initrd.toml` (or `.yaml`), else the `default` profile
//!   (the generic image);
//! * drop-ins from `/usr/lib/composer/initrd.d/` and
//!   `/etc/composer/initrd.d/` (`*.toml`, `*.yaml`, `*.yml`), read after it
//!   in file-name order; a file in /etc replaces the /usr file of the same
//!   name, and one that links to /dev/null takes it away, as systemd's
//!   drop-ins do.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub const CONFIG: &str = "/etc/composer/initrd.toml";
pub const DROPINS: [&str; 2] = ["/usr/lib/composer/initrd.d", "/etc/composer/initrd.d"];

/// What to load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SystemConfig {
    /// The main manifest, or None for the `default` profile.
    pub main: Option<PathBuf>,
    pub dropins: Vec<PathBuf>,
}

fn inside(root: &Path, path: &str) -> PathBuf {
    root.join(path.trim_start_matches('/'))
}

/// The system configuration of `root`.
pub fn find(root: &Path) -> SystemConfig {
    let main = ["toml", "yaml", "yml"]
        .iter()
        .map(|e| inside(root, &CONFIG.replace(".toml", &format!(".{e}"))))
        .find(|p| p.is_file());
    let mut by_name: BTreeMap<String, Option<PathBuf>> = BTreeMap::new();
    for dir in DROPINS {
        let Ok(rd) = std::fs::read_dir(inside(root, dir)) else {
            continue;
        };
        for e in rd.flatten() {
            let Some(name) = e.file_name().to_str().map(str::to_string) else {
                continue;
            };
            if ![".toml", ".yaml", ".yml"].iter().any(|x| name.ends_with(x)) {
                continue;
            }
            let path = e.path();
            let masked = std::fs::read_link(&path).is_ok_and(|t| t == Path::new("/dev/null"));
            by_name.insert(name, (!masked).then_some(path));
        }
    }
    SystemConfig {
        main,
        dropins: by_name.into_values().flatten().collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etc_replaces_and_masks_usr() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        for dir in DROPINS {
            std::fs::create_dir_all(inside(r, dir)).unwrap();
        }
        let usr = inside(r, DROPINS[0]);
        let etc = inside(r, DROPINS[1]);
        for n in ["10-a.toml", "20-b.toml", "30-c.toml", "notes.txt"] {
            std::fs::write(usr.join(n), "").unwrap();
        }
        std::fs::write(etc.join("20-b.toml"), "").unwrap();
        std::fs::write(etc.join("25-e.yaml"), "").unwrap();
        std::os::unix::fs::symlink("/dev/null", etc.join("30-c.toml")).unwrap();
        let c = find(r);
        assert_eq!(c.main, None);
        assert_eq!(
            c.dropins,
            [
                usr.join("10-a.toml"),
                etc.join("20-b.toml"),
                etc.join("25-e.yaml")
            ]
        );
        std::fs::create_dir_all(inside(r, "/etc/composer")).unwrap();
        std::fs::write(inside(r, CONFIG), "").unwrap();
        assert_eq!(find(r).main, Some(inside(r, CONFIG)));
    }
}

//! The kernel's build configuration (`CONFIG_...=y`), for what only it can say:
//! which compressions its firmware loader reads.
//!
//! Looked for where distributions put it: `/boot/config-<kver>` in the root
//! (Debian, Ubuntu), `config` in the module directory (Fedora), and
//! `boot/config-<kver>` beside a module tree given with `--kmoddir` (an
//! unpacked kernel package: `<dir>/lib/modules/<kver>` and `<dir>/boot`).

use std::path::Path;

use crate::resolve::root::Root;

/// At most this much of a configuration file is read (Debian's is 280 KiB).
const MAX_CONFIG: u64 = 4 << 20;

/// The options a kernel was built with.
#[derive(Clone, Debug, Default)]
pub struct KernelConfig {
    text: String,
}

impl KernelConfig {
    /// The configuration of `kver`, whose modules are in `module_dir`, if one is
    /// found.
    pub fn find(root: &Root, kver: &str, module_dir: &Path) -> Option<KernelConfig> {
        let mut candidates = Vec::new();
        if let Ok(p) = root.resolve(Path::new(&format!("boot/config-{kver}")), true) {
            candidates.push(p);
        }
        candidates.push(module_dir.join("config"));
        if let Some(base) = module_dir
            .parent()
            .and_then(Path::parent)
            .and_then(Path::parent)
        {
            candidates.push(base.join("boot").join(format!("config-{kver}")));
        }
        candidates.into_iter().find_map(|p| Self::read(&p))
    }

    fn read(path: &Path) -> Option<KernelConfig> {
        use std::io::Read;
        let f = std::fs::File::open(path).ok()?;
        if !f.metadata().ok()?.is_file() {
            return None;
        }
        let mut text = String::new();
        f.take(MAX_CONFIG).read_to_string(&mut text).ok()?;
        Some(KernelConfig::parse(&text))
    }

    pub fn parse(text: &str) -> KernelConfig {
        KernelConfig {
            text: text.to_string(),
        }
    }

    /// Whether `option` (`CONFIG_...`) is built in (`=y`).
    pub fn enabled(&self, option: &str) -> bool {
        self.value(option) == Some("y")
    }

    fn value(&self, option: &str) -> Option<&str> {
        self.text
            .lines()
            .find_map(|l| l.strip_prefix(option)?.strip_prefix('='))
    }

    /// Whether the firmware loader reads files compressed with `ext` (`xz`,
    /// `zst`): `CONFIG_FW_LOADER_COMPRESS_XZ`/`_ZSTD` (5.19 and later), or before
    /// those existed `CONFIG_FW_LOADER_COMPRESS`, which meant xz.
    pub fn firmware_reads(&self, ext: &str) -> bool {
        let split = self.text.contains("CONFIG_FW_LOADER_COMPRESS_XZ")
            || self.text.contains("CONFIG_FW_LOADER_COMPRESS_ZSTD");
        match ext {
            "xz" if split => self.enabled("CONFIG_FW_LOADER_COMPRESS_XZ"),
            "xz" => self.enabled("CONFIG_FW_LOADER_COMPRESS"),
            "zst" => self.enabled("CONFIG_FW_LOADER_COMPRESS_ZSTD"),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn firmware_compressions_follow_the_loaders_options() {
        // Debian 13's kernel: both.
        let d13 = KernelConfig::parse(
            "CONFIG_FW_LOADER_COMPRESS=y\nCONFIG_FW_LOADER_COMPRESS_XZ=y\nCONFIG_FW_LOADER_COMPRESS_ZSTD=y\n",
        );
        assert!(d13.firmware_reads("xz") && d13.firmware_reads("zst"));
        // Debian 12's: xz only.
        let d12 = KernelConfig::parse(
            "CONFIG_FW_LOADER_COMPRESS=y\nCONFIG_FW_LOADER_COMPRESS_XZ=y\n# CONFIG_FW_LOADER_COMPRESS_ZSTD is not set\n",
        );
        assert!(d12.firmware_reads("xz") && !d12.firmware_reads("zst"));
        // Before 5.19 the one option was xz.
        let old = KernelConfig::parse("CONFIG_FW_LOADER_COMPRESS=y\n");
        assert!(old.firmware_reads("xz") && !old.firmware_reads("zst"));
        // None at all, and a value that is not `y`.
        let none = KernelConfig::parse("# CONFIG_FW_LOADER_COMPRESS is not set\n");
        assert!(!none.firmware_reads("xz") && !none.firmware_reads("zst"));
        let module = KernelConfig::parse(
            "CONFIG_FW_LOADER_COMPRESS_ZSTD=m\nCONFIG_FW_LOADER_COMPRESS_XZ=y\n",
        );
        assert!(!module.firmware_reads("zst"));
        // A longer option's name is not the option.
        let longer = KernelConfig::parse(
            "CONFIG_FW_LOADER_COMPRESS_XZ_EXTRA=y\nCONFIG_FW_LOADER_COMPRESS_ZSTD=y\n",
        );
        assert!(!longer.firmware_reads("xz"));
    }

    #[test]
    fn found_in_the_root_the_module_directory_or_beside_a_package() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("root");
        let pkg = d.path().join("pkg");
        let kver = "6.1.0-1-amd64";
        let mods = pkg.join("lib/modules").join(kver);
        std::fs::create_dir_all(&mods).unwrap();
        std::fs::create_dir_all(root.join("boot")).unwrap();
        std::fs::create_dir_all(pkg.join("boot")).unwrap();
        let r = Root::new(&root);
        assert!(KernelConfig::find(&r, kver, &mods).is_none());
        std::fs::write(
            pkg.join("boot").join(format!("config-{kver}")),
            "CONFIG_A=y\n",
        )
        .unwrap();
        assert!(KernelConfig::find(&r, kver, &mods)
            .unwrap()
            .enabled("CONFIG_A"));
        std::fs::write(mods.join("config"), "CONFIG_B=y\n").unwrap();
        assert!(KernelConfig::find(&r, kver, &mods)
            .unwrap()
            .enabled("CONFIG_B"));
        std::fs::write(
            root.join("boot").join(format!("config-{kver}")),
            "CONFIG_C=y\n",
        )
        .unwrap();
        let c = KernelConfig::find(&r, kver, &mods).unwrap();
        assert!(c.enabled("CONFIG_C") && !c.enabled("CONFIG_B"));
    }
}

//! Profiles: manifests included by name (`include = ["generic"]`).
//!
//! A name is looked up inside the root the build reads (`--root`, else
//! `/`): `/etc/composer/profiles/NAME.toml` (the administrator's), then
//! `/usr/lib/composer/profiles/NAME.toml` (the package's), then the copy
//! composer carries in its binary, written once into its cache so that the
//! files profiles name beside themselves (`init/composer-init`) are real
//! files and errors point at real lines.

use std::path::{Path, PathBuf};

/// The profiles directory as the repository ships it.
const FILES: &[(&str, &str)] = &[
    ("base.toml", include_str!("../../profiles/base.toml")),
    ("default.toml", include_str!("../../profiles/default.toml")),
    ("generic.toml", include_str!("../../profiles/generic.toml")),
    (
        "hostonly.toml",
        include_str!("../../profiles/hostonly.toml"),
    ),
    (
        "init-shell.toml",
        include_str!("../../profiles/init-shell.toml"),
    ),
    ("storage.toml", include_str!("../../profiles/storage.toml")),
    (
        "image-roots.toml",
        include_str!("../../profiles/image-roots.toml"),
    ),
    ("network.toml", include_str!("../../profiles/network.toml")),
    (
        "ssh-unlock.toml",
        include_str!("../../profiles/ssh-unlock.toml"),
    ),
    ("clevis.toml", include_str!("../../profiles/clevis.toml")),
    (
        "init-systemd.toml",
        include_str!("../../profiles/init-systemd.toml"),
    ),
    (
        "init/composer-init",
        include_str!("../../profiles/init/composer-init"),
    ),
    (
        "init/api.fstab",
        include_str!("../../profiles/init/api.fstab"),
    ),
    (
        "init/initrd-release",
        include_str!("../../profiles/init/initrd-release"),
    ),
    (
        "init/composer-emergency",
        include_str!("../../profiles/init/composer-emergency"),
    ),
    (
        "init/composer-timeout-generator",
        include_str!("../../profiles/init/composer-timeout-generator"),
    ),
    (
        "init/composer-deadline",
        include_str!("../../profiles/init/composer-deadline"),
    ),
    (
        "init/composer-break-generator",
        include_str!("../../profiles/init/composer-break-generator"),
    ),
    (
        "init/composer-generator-gate",
        include_str!("../../profiles/init/composer-generator-gate"),
    ),
    (
        "init/composer-break",
        include_str!("../../profiles/init/composer-break"),
    ),
    (
        "init/lvm.conf",
        include_str!("../../profiles/init/lvm.conf"),
    ),
    (
        "init/composer-storage-setup",
        include_str!("../../profiles/init/composer-storage-setup"),
    ),
    (
        "init/composer-storage-setup.service",
        include_str!("../../profiles/init/composer-storage-setup.service"),
    ),
    (
        "init/composer-cryptsetup@.service",
        include_str!("../../profiles/init/composer-cryptsetup@.service"),
    ),
    (
        "init/composer-storage",
        include_str!("../../profiles/init/composer-storage"),
    ),
    (
        "init/composer-image-roots",
        include_str!("../../profiles/init/composer-image-roots"),
    ),
    (
        "init/composer-image-generator",
        include_str!("../../profiles/init/composer-image-generator"),
    ),
    (
        "init/composer-live-root",
        include_str!("../../profiles/init/composer-live-root"),
    ),
    (
        "init/composer-live-root.service",
        include_str!("../../profiles/init/composer-live-root.service"),
    ),
    (
        "init/composer-pcr-signature.service",
        include_str!("../../profiles/init/composer-pcr-signature.service"),
    ),
    (
        "init/pcr-signature.conf",
        include_str!("../../profiles/init/pcr-signature.conf"),
    ),
    (
        "init/composer-overlayroot.service",
        include_str!("../../profiles/init/composer-overlayroot.service"),
    ),
    (
        "init/composer-cmdline",
        include_str!("../../profiles/init/composer-cmdline"),
    ),
    (
        "init/composer-network",
        include_str!("../../profiles/init/composer-network"),
    ),
    (
        "init/composer-dhcp",
        include_str!("../../profiles/init/composer-dhcp"),
    ),
    (
        "init/composer-network-generator",
        include_str!("../../profiles/init/composer-network-generator"),
    ),
    (
        "init/composer-net-root",
        include_str!("../../profiles/init/composer-net-root"),
    ),
    (
        "init/composer-net-root.service",
        include_str!("../../profiles/init/composer-net-root.service"),
    ),
    (
        "init/composer-ssh",
        include_str!("../../profiles/init/composer-ssh"),
    ),
    (
        "init/composer-ssh.service",
        include_str!("../../profiles/init/composer-ssh.service"),
    ),
    (
        "init/composer-ssh.path",
        include_str!("../../profiles/init/composer-ssh.path"),
    ),
    (
        "init/composer-clevis",
        include_str!("../../profiles/init/composer-clevis"),
    ),
    (
        "init/composer-clevis.path",
        include_str!("../../profiles/init/composer-clevis.path"),
    ),
    (
        "init/composer-clevis.service",
        include_str!("../../profiles/init/composer-clevis.service"),
    ),
    (
        "init/composer-unlock",
        include_str!("../../profiles/init/composer-unlock"),
    ),
    (
        "init/composer-console",
        include_str!("../../profiles/init/composer-console"),
    ),
    (
        "init/composer-console.service",
        include_str!("../../profiles/init/composer-console.service"),
    ),
    (
        "init/console-first.conf",
        include_str!("../../profiles/init/console-first.conf"),
    ),
    (
        "init/sysctl-if-configured.conf",
        include_str!("../../profiles/init/sysctl-if-configured.conf"),
    ),
    (
        "init/tmpfiles-if-configured.conf",
        include_str!("../../profiles/init/tmpfiles-if-configured.conf"),
    ),
    (
        "init/tmpfiles-dev-if-configured.conf",
        include_str!("../../profiles/init/tmpfiles-dev-if-configured.conf"),
    ),
    (
        "init/tmpfiles-dev-early-if-configured.conf",
        include_str!("../../profiles/init/tmpfiles-dev-early-if-configured.conf"),
    ),
    (
        "init/udev-credentials-if-any.conf",
        include_str!("../../profiles/init/udev-credentials-if-any.conf"),
    ),
    (
        "init/journald-gives-way.conf",
        include_str!("../../profiles/init/journald-gives-way.conf"),
    ),
    (
        "init/udevd-stops-soon.conf",
        include_str!("../../profiles/init/udevd-stops-soon.conf"),
    ),
    (
        "init/composer-switch-check",
        include_str!("../../profiles/init/composer-switch-check"),
    ),
    (
        "init/composer-switch-check.service",
        include_str!("../../profiles/init/composer-switch-check.service"),
    ),
    (
        "init/switch-root-check.conf",
        include_str!("../../profiles/init/switch-root-check.conf"),
    ),
    (
        "init/emergency-shell.conf",
        include_str!("../../profiles/init/emergency-shell.conf"),
    ),
    (
        "init/70-composer-fs.rules",
        include_str!("../../profiles/init/70-composer-fs.rules"),
    ),
    (
        "init/composer-fs-module@.service",
        include_str!("../../profiles/init/composer-fs-module@.service"),
    ),
    (
        "init/79-composer-cpu.rules",
        include_str!("../../profiles/init/79-composer-cpu.rules"),
    ),
    (
        "init/composer-cpu-drivers.service",
        include_str!("../../profiles/init/composer-cpu-drivers.service"),
    ),
    (
        "init/cpu-drivers-first.conf",
        include_str!("../../profiles/init/cpu-drivers-first.conf"),
    ),
    (
        "init/composer-systemd",
        include_str!("../../profiles/init/composer-systemd"),
    ),
    (
        "init/cold-plug-what-the-initrd-uses.conf",
        include_str!("../../profiles/init/cold-plug-what-the-initrd-uses.conf"),
    ),
];

/// Where the package installs them.
pub const INSTALLED: &str = "/usr/lib/composer/profiles";
/// Where an administrator's own go.
pub const LOCAL: &str = "/etc/composer/profiles";

/// Whether an `include` entry is a profile name rather than a path: no
/// `/`, no manifest extension, and only letters, digits, `-`, `_`, `.`.
pub fn is_name(include: &str) -> bool {
    !include.is_empty()
        && !include.contains('/')
        && ![".toml", ".yaml", ".yml"]
            .iter()
            .any(|e| include.ends_with(e))
        && include
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

/// The names of the profiles composer carries.
pub fn builtin_names() -> impl Iterator<Item = &'static str> {
    FILES
        .iter()
        .filter_map(|(f, _)| f.strip_suffix(".toml"))
        .filter(|n| !n.contains('/'))
}

/// The file of profile `name` for a build reading `root`.
pub fn find(name: &str, root: &Path) -> Result<PathBuf, String> {
    for dir in [LOCAL, INSTALLED] {
        let p = root
            .join(dir.trim_start_matches('/'))
            .join(format!("{name}.toml"));
        if p.is_file() {
            return Ok(p);
        }
    }
    if !builtin_names().any(|n| n == name) {
        let known: Vec<&str> = builtin_names().collect();
        return Err(format!(
            "no profile `{name}` (in {LOCAL}, {INSTALLED} or composer's own: {})",
            known.join(", ")
        ));
    }
    let dir = builtin_dir().map_err(|e| format!("cannot write composer's profiles: {e}"))?;
    Ok(dir.join(format!("{name}.toml")))
}

/// Where this process wrote the profiles composer carries.
static BUILTIN_DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// The name of the profile composer carries that `path` is this process's
/// copy of (`generic` for `<cache>/profiles/<hash>/generic.toml`): messages
/// name the profile, not composer's cache.
pub fn builtin_name(path: &Path) -> Option<&str> {
    let dir = BUILTIN_DIR.get()?;
    if path.parent()? != dir {
        return None;
    }
    let name = path.file_name()?.to_str()?.strip_suffix(".toml")?;
    builtin_names().find(|n| *n == name)
}

/// The profiles composer carries, as files in its cache.
fn builtin_dir() -> std::io::Result<PathBuf> {
    if let Some(d) = BUILTIN_DIR.get() {
        return Ok(d.clone());
    }
    let files: Vec<(String, Vec<u8>)> = FILES
        .iter()
        .map(|(n, t)| (n.to_string(), t.as_bytes().to_vec()))
        .collect();
    crate::cache::store_in(
        "profiles",
        &files,
        &[
            "init/composer-init",
            "init/composer-systemd",
            "init/composer-emergency",
            "init/composer-timeout-generator",
            "init/composer-deadline",
            "init/composer-break-generator",
            "init/composer-generator-gate",
            "init/composer-break",
            "init/composer-storage-setup",
            "init/composer-dhcp",
            "init/composer-network-generator",
            "init/composer-net-root",
            "init/composer-ssh",
            "init/composer-unlock",
            "init/composer-clevis",
            "init/composer-image-generator",
            "init/composer-live-root",
        ],
        std::time::UNIX_EPOCH,
    )
    .map(|d| BUILTIN_DIR.get_or_init(|| d).clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_paths() {
        assert!(is_name("generic"));
        assert!(is_name("my-profile_2"));
        assert!(!is_name("generic.toml"));
        assert!(!is_name("common/base.toml"));
        assert!(!is_name("../x"));
        assert!(builtin_names().any(|n| n == "hostonly"));
        assert!(!builtin_names().any(|n| n.contains('/')));
    }
}

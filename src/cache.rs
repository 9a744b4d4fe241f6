//! The cache: what composer generates for images (module metadata, the
//! profiles it carries), in directories named by their content.

use std::path::PathBuf;

/// Where composer keeps what it generates: `$COMPOSER_CACHE_DIR`, else
/// `$XDG_CACHE_HOME/composer`, else `~/.cache/composer`.
pub fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("COMPOSER_CACHE_DIR") {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("composer");
    }
    match std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        Some(h) => PathBuf::from(h).join(".cache/composer"),
        None => std::env::temp_dir().join("composer-cache"),
    }
}

/// Writes generated files into `cache_dir()/<kind>/<hash of the content>`,
/// so a build never rewrites a file another build may be reading. Every
/// file gets `mtime`, for reproducible archives; names may have
/// directories (`init/composer-init`); a name ending in `init` (or listed
/// in `executable`) is made executable.
pub fn store_in(
    kind: &str,
    files: &[(String, Vec<u8>)],
    executable: &[&str],
    mtime: std::time::SystemTime,
) -> std::io::Result<PathBuf> {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for (n, b) in files {
        n.hash(&mut h);
        b.hash(&mut h);
    }
    mtime.hash(&mut h);
    let dir = cache_dir().join(kind).join(format!("{:016x}", h.finish()));
    std::fs::create_dir_all(&dir)?;
    for (name, bytes) in files {
        let path = dir.join(name);
        let parent = path.parent().unwrap_or(&dir).to_path_buf();
        std::fs::create_dir_all(&parent)?;
        if std::fs::read(&path).is_ok_and(|b| &b == bytes) {
            continue;
        }
        let mut tmp = tempfile::NamedTempFile::new_in(&parent)?;
        std::io::Write::write_all(&mut tmp, bytes)?;
        use std::os::unix::fs::PermissionsExt;
        tmp.as_file()
            .set_permissions(std::fs::Permissions::from_mode(
                if executable.contains(&name.as_str()) {
                    0o755
                } else {
                    0o644
                },
            ))?;
        tmp.as_file().set_times(
            std::fs::FileTimes::new()
                .set_accessed(mtime)
                .set_modified(mtime),
        )?;
        tmp.persist(&path).map_err(|e| e.error)?;
    }
    Ok(dir)
}

/// Module metadata: [`store_in`] the `kmod` kind.
pub fn store(
    files: &[(String, Vec<u8>)],
    mtime: std::time::SystemTime,
) -> std::io::Result<PathBuf> {
    store_in("kmod", files, &[], mtime)
}

//! Key material in an image: the files the image's own `/etc/crypttab`
//! names as key files, and systemd's `/etc/cryptsetup-keys.d/`. Anyone who
//! can read such an image can open the volume: the build says so, and the
//! image is written 0600 whatever the file it replaces allowed.

use crate::entry::{Entry, Kind, Origin};

/// The most of the image's crypttab read.
const MAX_CRYPTTAB: usize = 1 << 20;

/// A key file the image holds.
pub(super) struct Key {
    /// Its name in the image, with a leading `/`.
    pub name: String,
    /// What names it as a key.
    pub why: String,
    pub origin: Origin,
}

/// The key files among `entries`.
pub(super) fn held(entries: &[Entry]) -> Vec<Key> {
    let find = |name: &str| {
        entries.iter().find(|e| {
            e.names()
                .any(|n| n == name.trim_start_matches('/').as_bytes())
        })
    };
    let mut keys: Vec<Key> = Vec::new();
    if let Some(Kind::File { source, .. }) = find("etc/crypttab").map(|e| &e.kind) {
        let text = crate::stack::read_bounded(&source.path, MAX_CRYPTTAB)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default();
        for line in crate::stack::parse_crypttab(&text).0 {
            let Some(key) = line
                .keyfile
                .as_deref()
                .filter(|k| super::stack::is_key_path(k))
            else {
                continue;
            };
            if let Some(e) = find(key).filter(|e| matches!(e.kind, Kind::File { .. })) {
                if !keys.iter().any(|k| k.name == key) {
                    keys.push(Key {
                        name: key.to_string(),
                        why: format!("/etc/crypttab line {} ({})", line.line, line.name),
                        origin: e.origin.clone(),
                    });
                }
            }
        }
    }
    for e in entries {
        if matches!(e.kind, Kind::File { .. })
            && e.name.as_bytes().starts_with(b"etc/cryptsetup-keys.d/")
        {
            let name = format!("/{}", String::from_utf8_lossy(e.name.as_bytes()));
            if !keys.iter().any(|k| k.name == name) {
                keys.push(Key {
                    name,
                    why: "systemd-cryptsetup looks for keys there".into(),
                    origin: e.origin.clone(),
                });
            }
        }
    }
    keys
}

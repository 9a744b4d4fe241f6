//! Secrets in an image: the files the image's own `/etc/crypttab` names as
//! key files, systemd's `/etc/cryptsetup-keys.d/`, SSH host private keys,
//! and what a manifest marks `secret = true`. Anyone who can read such an
//! image can open the volume or pose as the machine: the build says so, and
//! the image is written 0600 whatever the file it replaces allowed.

use std::collections::HashSet;

use crate::entry::{Entry, Kind, Origin};

/// The most of the image's crypttab read.
const MAX_CRYPTTAB: usize = 1 << 20;

/// What a secret is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum What {
    /// A key file the image's crypttab names, or one in
    /// `/etc/cryptsetup-keys.d/`.
    KeyFile,
    /// An SSH server's host private key (OpenSSH's `ssh_host_*_key`,
    /// dropbear's `dropbear_*_host_key`).
    HostKey,
    /// A file a rule marks `secret = true`.
    Marked,
}

/// A secret the image holds.
pub(super) struct Secret {
    /// Its name in the image, with a leading `/`.
    pub name: String,
    pub what: What,
    /// Why it is one.
    pub why: String,
    pub origin: Origin,
}

impl Secret {
    /// The build's warning about it.
    pub fn warning(&self) -> String {
        match self.what {
            What::KeyFile => format!(
                "the image holds the key file {} ({}): whoever can read the image can open \
                 the volume; it is written 0600",
                self.name, self.why
            ),
            What::HostKey => format!(
                "the image holds the SSH host private key {} ({}): whoever can read the image \
                 can pose as this machine; it is written 0600",
                self.name, self.why
            ),
            What::Marked => format!(
                "the image holds the secret {} ({}): whoever can read the image can read it; \
                 it is written 0600",
                self.name, self.why
            ),
        }
    }
}

/// Whether `base`, a file name, is one an SSH server keeps a host private
/// key under.
fn is_host_key(base: &[u8]) -> bool {
    let openssh = base.starts_with(b"ssh_host_") && base.ends_with(b"_key");
    let dropbear = base.starts_with(b"dropbear_") && base.ends_with(b"_host_key");
    openssh || dropbear
}

/// The secrets among `entries`; `marked` are the names (without a leading
/// `/`) of the files rules mark secret, with the rule that made each.
pub(super) fn held(entries: &[Entry], marked: &[(Vec<u8>, Origin)]) -> Vec<Secret> {
    let find = |name: &str| {
        entries.iter().find(|e| {
            e.names()
                .any(|n| n == name.trim_start_matches('/').as_bytes())
        })
    };
    let mut out: Vec<Secret> = Vec::new();
    let mut seen: HashSet<String> = HashSet::new();
    let mut add = |out: &mut Vec<Secret>, s: Secret| {
        if seen.insert(s.name.clone()) {
            out.push(s);
        }
    };
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
                let s = Secret {
                    name: key.to_string(),
                    what: What::KeyFile,
                    why: format!("/etc/crypttab line {} ({})", line.line, line.name),
                    origin: e.origin.clone(),
                };
                add(&mut out, s);
            }
        }
    }
    let slashed = |name: &[u8]| format!("/{}", String::from_utf8_lossy(name));
    let marked_names: HashSet<&[u8]> = marked.iter().map(|(n, _)| n.as_slice()).collect();
    for e in entries {
        if !matches!(e.kind, Kind::File { .. }) {
            continue;
        }
        for name in e.names() {
            let base = name.rsplit(|&b| b == b'/').next().unwrap_or(name);
            let (what, why) = if name.starts_with(b"etc/cryptsetup-keys.d/") {
                (What::KeyFile, "systemd-cryptsetup looks for keys there")
            } else if is_host_key(base) && marked_names.contains(name) {
                (What::HostKey, "marked secret = true")
            } else if is_host_key(base) {
                (What::HostKey, "an SSH server's host key, by its name")
            } else {
                continue;
            };
            let s = Secret {
                name: slashed(name),
                what,
                why: why.into(),
                origin: e.origin.clone(),
            };
            add(&mut out, s);
        }
    }
    for (name, origin) in marked {
        let s = Secret {
            name: slashed(name),
            what: What::Marked,
            why: "marked secret = true".into(),
            origin: origin.clone(),
        };
        add(&mut out, s);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_key_names() {
        for yes in [
            "ssh_host_ed25519_key",
            "ssh_host_rsa_key",
            "dropbear_ecdsa_host_key",
        ] {
            assert!(is_host_key(yes.as_bytes()), "{yes}");
        }
        for no in [
            "ssh_host_ed25519_key.pub",
            "authorized_keys",
            "ssh_config",
            "dropbear_rsa_host_key.pub",
        ] {
            assert!(!is_host_key(no.as_bytes()), "{no}");
        }
    }
}

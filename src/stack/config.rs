//! Configuration for the image's init, generated from the model alone (the
//! host's files are never copied: they may name devices, keys and arrays
//! this image has no business with).

use super::model::{CryptKind, Kind, Stack};

/// `/dev/mdN`, or `/dev/md/NAME` for a named array (`md_NAME` in sysfs).
fn md_device(name: &str) -> String {
    match name.strip_prefix("md_") {
        Some(n) => format!("/dev/md/{n}"),
        None => format!("/dev/{name}"),
    }
}

/// An mdadm.conf with one `ARRAY` line for each md array of the stack.
/// An array whose UUID is unknown is named in a comment, not listed.
pub fn mdadm_conf(stack: &Stack) -> String {
    let mut out = String::from("# The md arrays under the mounts, written by composer.\n");
    for id in stack.top_down() {
        let Kind::Md(m) = &stack.layers[id].kind else {
            continue;
        };
        match &m.uuid {
            Some(uuid) => {
                out.push_str(&format!(
                    "ARRAY {} metadata={} UUID={uuid}",
                    md_device(&m.name),
                    m.metadata
                ));
                if let Some(n) = m
                    .array_name
                    .as_deref()
                    .filter(|n| !n.contains(char::is_whitespace))
                {
                    out.push_str(&format!(" name={n}"));
                }
                out.push('\n');
            }
            None => out.push_str(&format!("# {}: UUID unknown, not listed\n", m.name)),
        }
    }
    out
}

/// A crypttab field, quoted when it holds white space or quotes.
fn field(s: &str) -> String {
    if !s.is_empty()
        && !s.contains(|c: char| c.is_whitespace() || c == '"' || c == '\'' || c == '\\')
    {
        return s.to_string();
    }
    let mut q = String::from("\"");
    for c in s.chars() {
        if c == '"' || c == '\\' {
            q.push('\\');
        }
        q.push(c);
    }
    q.push('"');
    q
}

/// A crypttab with one line for each LUKS layer of the stack:
/// `NAME UUID=<uuid> KEYFILE OPTIONS`. The host's line that names the
/// device (see [`super::model::Crypt::crypttab`]) gives the name, the key
/// file and the options; else the mapping's current name, `none` and
/// `luks`. A key file is kept only with `keyfiles`, else `none` (asking
/// for the passphrase). Plain dm-crypt has no UUID to find it by: it is
/// named in a comment.
pub fn crypttab(stack: &Stack, keyfiles: bool) -> String {
    let mut out = String::from("# The LUKS devices under the mounts, written by composer.\n");
    for id in stack.top_down() {
        let Kind::Crypt(c) = &stack.layers[id].kind else {
            continue;
        };
        let host = c.crypttab.and_then(|i| stack.crypttab.get(i));
        let Some(uuid) = c
            .luks_uuid
            .as_deref()
            .filter(|_| matches!(c.kind, CryptKind::Luks1 | CryptKind::Luks2))
        else {
            out.push_str(&format!(
                "# {}: not LUKS, no UUID to find it by, not listed\n",
                c.name
            ));
            continue;
        };
        let name = host.map_or(c.name.as_str(), |h| h.name.as_str());
        let key = host
            .and_then(|h| h.keyfile.as_deref())
            .filter(|_| keyfiles)
            .unwrap_or("none");
        let options = match host.map(|h| h.options.as_str()) {
            Some(o) if !o.is_empty() => o,
            _ => "luks",
        };
        out.push_str(&format!(
            "{} UUID={uuid} {} {}\n",
            field(name),
            field(key),
            field(options)
        ));
    }
    out
}

/// lvm.conf for the image's init: no metadata backups or archives (they
/// would go to the image's memory), no dmeventd. Device nodes and links
/// are udev's under the systemd init; the shell init runs lvm with
/// `DM_DISABLE_UDEV=1`, so lvm makes them itself. The generic profile
/// ships the same file.
pub fn lvm_conf() -> &'static str {
    include_str!("../../profiles/init/lvm.conf")
}

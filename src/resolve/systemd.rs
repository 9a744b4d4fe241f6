//! The root's systemd: its version, and what that version needs in an
//! initrd that none of its unit files names.
//!
//! Everything else the systemd init takes is read from the root itself (the
//! units, their drop-ins and the programs their `Exec*=` lines run, the
//! libraries those load): this is the one place for knowledge tied to a
//! systemd version, each piece with the version that brought it. A version
//! composer has not seen gets everything from the newest version before it,
//! and the image check ([`crate::boot_check`]) still judges the result.

use std::path::Path;

use crate::resolve::root::Root;

/// A file a systemd needs from a version on, that no unit names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Need {
    /// The first version that needs it.
    pub since: u32,
    /// Where the root and the image have it.
    pub path: &'static str,
    /// What fails without it, for messages.
    pub why: &'static str,
}

/// What each version needs beyond its units, oldest first.
pub const NEEDS: [Need; 1] = [Need {
    since: 255,
    path: "/usr/lib/systemd/systemd-executor",
    why: "systemd 255 and later start every unit's process through it; without it PID 1 \
          stops with \"Failed to allocate manager object\"",
}];

/// Units systemd makes itself, with no file.
pub const BUILTIN_UNITS: [&str; 4] = ["-.slice", "system.slice", "init.scope", "-.mount"];
/// The keys of a unit whose values are units it needs: it does not start
/// without them.
pub const REQUIRING_KEYS: [&str; 3] = ["Requires", "Requisite", "BindsTo"];
/// The keys of a unit whose values are units it pulls in.
pub const PULLING_KEYS: [&str; 7] = [
    "Requires",
    "Requisite",
    "Wants",
    "BindsTo",
    "Upholds",
    "OnFailure",
    "OnSuccess",
];
/// The keys of a service whose values are command lines it runs.
pub const EXEC_KEYS: [&str; 7] = [
    "ExecStart",
    "ExecStartPre",
    "ExecStartPost",
    "ExecStop",
    "ExecStopPost",
    "ExecReload",
    "ExecCondition",
];

/// The first systemd with `OnSuccess=` in units.
pub const ON_SUCCESS: u32 = 249;

/// What systemd `version` needs beyond its units.
pub fn needs(version: u32) -> impl Iterator<Item = &'static Need> {
    NEEDS.iter().filter(move |n| version >= n.since)
}

/// Where systemd's shared library lives in the usual layouts
/// (`libsystemd-shared-NNN.so`: NNN is the version); a multiarch
/// `/usr/lib/TRIPLET/systemd` is looked for too.
const SHARED_DIRS: [&str; 4] = [
    "/usr/lib/systemd",
    "/lib/systemd",
    "/usr/lib64/systemd",
    "/lib64/systemd",
];

/// The most entries of one directory read while looking for the library.
const MAX_DIR_ENTRIES: usize = 4096;

/// The version in a file name `libsystemd-shared-NNN[.anything].so`.
pub fn version_of_shared_library(name: &str) -> Option<u32> {
    let rest = name.strip_prefix("libsystemd-shared-")?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// The root's systemd version, from the name of its shared library.
pub fn version(root: &Root) -> Option<u32> {
    let names = |dir: &Path| -> Vec<String> {
        let Ok(host) = root.resolve(dir, true) else {
            return Vec::new();
        };
        let Ok(rd) = std::fs::read_dir(host) else {
            return Vec::new();
        };
        rd.take(MAX_DIR_ENTRIES)
            .flatten()
            .filter_map(|e| e.file_name().to_str().map(str::to_string))
            .collect()
    };
    let multiarch = names(Path::new("/usr/lib"))
        .into_iter()
        .filter(|n| n.contains("-linux-"))
        .map(|n| format!("/usr/lib/{n}/systemd"));
    SHARED_DIRS
        .iter()
        .map(|d| d.to_string())
        .chain(multiarch)
        .flat_map(|d| names(Path::new(&d)))
        .filter_map(|n| version_of_shared_library(&n))
        .max()
}

/// `key=value` pairs of a unit file (sections do not matter here), with
/// continued lines joined.
pub fn settings(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut pending = String::new();
    for line in text.lines() {
        let line = line.trim();
        if pending.is_empty() && (line.starts_with('#') || line.starts_with(';')) {
            continue;
        }
        if let Some(part) = line.strip_suffix('\\') {
            pending.push_str(part);
            pending.push(' ');
            continue;
        }
        pending.push_str(line);
        let full = std::mem::take(&mut pending);
        if let Some((k, v)) = full.split_once('=') {
            out.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    out
}

/// The program an `Exec*=` value runs, and whether its failure is ignored.
pub fn exec_program(value: &str) -> Option<(String, bool)> {
    let v = value.trim_start();
    let prefix_len = v.find(|c: char| !"-@:+!".contains(c)).unwrap_or(v.len());
    let ignore = v[..prefix_len].contains('-');
    let program = v[prefix_len..].split_whitespace().next()?;
    if program.contains(['%', '$']) || program.is_empty() {
        return None;
    }
    Some((program.to_string(), ignore))
}

/// The template a unit instance comes from (`foo@bar.service` -> `foo@.service`).
pub fn template(unit: &str) -> Option<String> {
    let (name, suffix) = unit.rsplit_once('.')?;
    let (base, instance) = name.split_once('@')?;
    (!instance.is_empty()).then(|| format!("{base}@.{suffix}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_is_read_from_the_shared_librarys_name() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("usr/lib/x86_64-linux-gnu/systemd");
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(version(&Root::new(t.path())), None);
        std::fs::write(dir.join("libsystemd-shared-252.so"), b"").unwrap();
        std::fs::write(dir.join("libsystemd-core-252.so"), b"").unwrap();
        assert_eq!(version(&Root::new(t.path())), Some(252));
        // Another architecture's layout (riscv64), found without a list of triplets.
        let riscv = t.path().join("usr/lib/riscv64-linux-gnu/systemd");
        std::fs::create_dir_all(&riscv).unwrap();
        std::fs::write(riscv.join("libsystemd-shared-262.so"), b"").unwrap();
        assert_eq!(version(&Root::new(t.path())), Some(262));
        let usr = t.path().join("usr/lib/systemd");
        std::fs::create_dir_all(&usr).unwrap();
        std::fs::write(usr.join("libsystemd-shared-263.5-1.fc41.so"), b"").unwrap();
        assert_eq!(version(&Root::new(t.path())), Some(263));
        assert_eq!(version_of_shared_library("libsystemd-shared-.so"), None);
    }

    #[test]
    fn the_executor_is_needed_from_255_on() {
        let paths = |v| needs(v).map(|n| n.path).collect::<Vec<_>>();
        assert!(paths(252).is_empty());
        assert!(paths(254).is_empty());
        assert_eq!(paths(255), ["/usr/lib/systemd/systemd-executor"]);
        assert_eq!(paths(262), ["/usr/lib/systemd/systemd-executor"]);
    }
}

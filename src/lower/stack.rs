//! The running root's block stack in an image: read once per build (for
//! `[[module]] rootfs` and `[stack]`), and what `[stack] from_root` adds
//! from it: the programs its layers need, and `/etc/crypttab`,
//! `/etc/mdadm/mdadm.conf` and `/etc/lvm/lvm.conf` written from the model
//! (the root's own files are read, never copied), with the key files the
//! root's crypttab names when `keyfiles` allows.

use std::path::Path;

use super::item::{Added, Found};
use crate::entry::{Kind, Links, Origin};
use crate::error::{Error, Result, Warning};
use crate::manifest::load::Loaded;
use crate::resolve::elf::BinaryRequest;
use crate::resolve::root::Root;
use crate::stack::{Kind as Layer, Remote, Stack};

/// `[stack]` merged over the documents: (keyfiles, where the table is)
/// when from_root is on.
fn asked(loaded: &Loaded) -> Option<(bool, Origin)> {
    crate::manifest::load::stack_asked(&loaded.docs)
}

/// Whether `[stack] from_root` is in effect.
pub(super) fn from_root(loaded: &Loaded) -> bool {
    asked(loaded).is_some()
}

/// What `[stack] from_root = true` adds.
pub(super) fn add_all(loaded: &Loaded) -> Result<Found> {
    let Some((keyfiles, origin)) = asked(loaded) else {
        return Ok(Found {
            added: Vec::new(),
            programs: Vec::new(),
            warnings: Vec::new(),
        });
    };
    let stack = crate::stack::running(&loaded.root).map_err(|e| {
        Error::at(
            origin.clone(),
            format!("[stack] cannot follow the root filesystem down to its devices: {e}"),
        )
        .with_hint("[stack] from_root reads /proc/self/mountinfo and /sys of the running machine")
    })?;
    let network = loaded.has_profile("network");
    let systemd = loaded.init == crate::manifest::model::InitSpec::Systemd;
    from_stack(&stack, keyfiles, network, systemd, &origin, &loaded.root)
}

/// The error for a root on the network in an image without the network
/// profile: nothing in it would bring up an interface or reach the server.
fn network_root_needs_the_profile(stack: &Stack, origin: &Origin) -> Result<()> {
    let fail = |what: String, boot: String| {
        Err(Error::at(
            origin.clone(),
            format!("[stack]: {what}: the image needs the network to reach it"),
        )
        .with_hint(format!(
            "add the network profile (include = [\"hostonly\", \"network\"]) and boot with \
             {boot} and ip= (see \"Network roots\" in the book)"
        )))
    };
    for &t in &stack.tops {
        let Layer::Filesystem(f) = &stack.layers[t].kind else {
            continue;
        };
        if crate::stack::is_network_fs(&f.fstype) {
            return fail(
                format!("{} is {} from {}", f.mountpoint, f.fstype, f.source),
                format!("root={}:{}", f.fstype, f.source),
            );
        }
    }
    for (id, l) in stack.layers.iter().enumerate() {
        let Layer::Disk(d) = &l.kind else { continue };
        let Some(remote) = &d.remote else { continue };
        let what = crate::stack::describe(stack, id);
        let boot = match remote {
            Remote::Iscsi {
                target,
                address,
                port,
                lun,
            } => format!(
                "netroot=iscsi:{}::{}:{lun}:{target}",
                address.as_deref().unwrap_or("SERVER"),
                port.as_deref().unwrap_or("3260"),
            ),
            Remote::Nbd => {
                "netroot=nbd:SERVER:PORT[/EXPORT] (sysfs does not name the server)".into()
            }
        };
        return fail(format!("the root's stack is on {what}"), boot);
    }
    Ok(())
}

/// What `[stack]` (at `origin`) adds for `stack`, with key files from
/// `root` when `keyfiles`; `network` when the image has the network
/// profile (a root on NFS needs it); `systemd` when its init is systemd
/// (which runs its own programs for some layers: see `Need::shell_programs`).
fn from_stack(
    stack: &Stack,
    keyfiles: bool,
    network: bool,
    systemd: bool,
    origin: &Origin,
    root: &Path,
) -> Result<Found> {
    if !network {
        network_root_needs_the_profile(stack, origin)?;
    }
    let mut found = Found {
        added: Vec::new(),
        programs: Vec::new(),
        warnings: Vec::new(),
    };
    for note in &stack.notes {
        found.warnings.push(Warning {
            origin: Some(origin.clone()),
            message: format!("[stack]: {note}"),
            details: Vec::new(),
        });
    }
    // Each program once, for the first layer that needs it; the libraries they
    // load at run time (TPM2) the same way, said when the root lacks them.
    let mut seen: Vec<String> = Vec::new();
    let lookup = Root::new(root);
    for need in crate::stack::needs(stack) {
        let o = origin.with_rule(format!("[stack] {}", need.reason));
        let shell = need.shell_programs.iter().filter(|_| !systemd);
        for p in need.programs.iter().chain(shell) {
            if !seen.contains(p) {
                seen.push(p.clone());
                found.programs.push(BinaryRequest::program(p).at(o.clone()));
            }
        }
        for l in &need.libraries {
            if seen.contains(l) {
                continue;
            }
            seen.push(l.clone());
            let names = super::binaries::expand_library(&lookup, l, &o)?;
            if names.is_empty() {
                found.warnings.push(Warning {
                    origin: Some(o.clone()),
                    message: format!("[stack]: no `{l}` in the root ({})", need.reason),
                    details: Vec::new(),
                });
            }
            for name in names {
                found
                    .programs
                    .push(BinaryRequest::library(name).optional(true).at(o.clone()));
            }
        }
    }
    let has = |f: fn(&Layer) -> bool| stack.layers.iter().any(|l| f(&l.kind));
    let mut files: Vec<(String, Vec<u8>, &str)> = Vec::new();
    if has(|k| matches!(k, Layer::Crypt(_))) {
        files.push((
            "crypttab".into(),
            crate::stack::crypttab(stack, keyfiles).into_bytes(),
            "/etc/crypttab",
        ));
    }
    if has(|k| matches!(k, Layer::Md(_))) {
        files.push((
            "mdadm.conf".into(),
            crate::stack::mdadm_conf(stack).into_bytes(),
            "/etc/mdadm/mdadm.conf",
        ));
    }
    if has(|k| matches!(k, Layer::Lvm(_))) {
        files.push((
            "lvm.conf".into(),
            crate::stack::lvm_conf().as_bytes().to_vec(),
            "/etc/lvm/lvm.conf",
        ));
    }
    if !files.is_empty() {
        let store: Vec<(String, Vec<u8>)> = files
            .iter()
            .map(|(n, b, _)| (n.clone(), b.clone()))
            .collect();
        let dir =
            crate::cache::store_in("stack", &store, &[], std::time::UNIX_EPOCH).map_err(|e| {
                Error::at(
                    origin.clone(),
                    format!("cannot write the stack's configuration: {e}"),
                )
            })?;
        for (name, _, dest) in &files {
            let o = origin.with_rule(format!("[stack] {dest} for the root's stack"));
            found.added.push(Added::generated(&dir, name, dest, &o)?);
        }
    }
    if keyfiles {
        add_keyfiles(root, stack, origin, &mut found)?;
    }
    Ok(found)
}

/// The key files the root's crypttab names for the stack's LUKS devices,
/// from the root, mode 0400.
fn add_keyfiles(root: &Path, stack: &Stack, origin: &Origin, found: &mut Found) -> Result<()> {
    let root = Root::new(root);
    for l in &stack.layers {
        let Layer::Crypt(c) = &l.kind else { continue };
        let Some(line) = c.crypttab.and_then(|i| stack.crypttab.get(i)) else {
            continue;
        };
        let Some(key) = line.keyfile.as_deref().filter(|k| is_key_path(k)) else {
            continue;
        };
        let o = origin.with_rule(format!(
            "[stack] keyfiles: /etc/crypttab line {} ({})",
            line.line, line.name
        ));
        let host = root
            .resolve(Path::new(key), true)
            .map_err(|e| Error::at(o.clone(), format!("key file `{key}`: {e}")))?;
        let meta = std::fs::metadata(&host).map_err(|e| {
            Error::at(
                o.clone(),
                format!("key file `{key}` is not in the root: {e}"),
            )
            .with_hint(
                "fix the crypttab line, or set `keyfiles = false` to be asked for the passphrase",
            )
        })?;
        if !meta.is_file() {
            return Err(Error::at(
                o,
                format!("key file `{key}` is not a regular file"),
            ));
        }
        let source = crate::resolve::file_source(
            &host,
            &crate::resolve::Stat {
                meta,
                nofollow: false,
            },
            &o,
        )?;
        found.added.push(Added {
            dest: key.as_bytes().to_vec(),
            kind: Kind::File {
                source: Box::new(source),
                links: Links::default(),
            },
            mode: 0o400,
            origin: o,
        });
    }
    Ok(())
}

/// A crypttab key field that names a file the image could hold: an
/// absolute path, not a device or kernel file system, not systemd's
/// `PATH:DEVICE` form (a key on another device).
pub(crate) fn is_key_path(k: &str) -> bool {
    k.starts_with('/')
        && !k.contains(':')
        && !["/dev/", "/proc/", "/sys/"]
            .iter()
            .any(|p| k.starts_with(p))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stack::tests::{root_on, Fake, LUKS_HEX, LUKS_UUID};

    fn file_text(a: &Added) -> String {
        match &a.kind {
            Kind::File { source, .. } => std::fs::read_to_string(&source.path).unwrap(),
            _ => panic!("not a file"),
        }
    }

    /// A root on the network: the program that reaches it, and without the
    /// network profile an error naming the server, with the root= or
    /// netroot= that reaches it as the hint.
    fn network_root(stack: &Stack, wants: &[&str], program: &str) {
        let origin = Origin::new("m.toml".into(), 3, 1);
        let root = tempfile::tempdir().unwrap();
        let err = from_stack(stack, false, false, false, &origin, root.path())
            .err()
            .expect("an error without the network profile");
        let err = format!("{err}\n{}", err.hint().unwrap_or_default());
        for want in [
            "m.toml:3:1",
            "the image needs the network to reach it",
            "include = [\"hostonly\", \"network\"]",
        ]
        .iter()
        .chain(wants)
        {
            assert!(err.contains(want), "{want}: {err}");
        }
        let found = from_stack(stack, false, true, false, &origin, root.path()).unwrap();
        let programs: Vec<String> = found
            .programs
            .iter()
            .map(|p| p.name.display().to_string())
            .collect();
        assert_eq!(programs, [program]);
        assert!(found.added.is_empty());
    }

    #[test]
    fn an_nfs_root_needs_mount_nfs_and_the_network_profile() {
        let f = Fake::new();
        network_root(
            &f.read(&root_on("0:53", "nfs4", "10.77.0.1:/export"), ""),
            &[
                "/ is nfs4 from 10.77.0.1:/export",
                "root=nfs4:10.77.0.1:/export",
            ],
            "mount.nfs",
        );
    }

    #[test]
    fn an_iscsi_root_needs_iscsistart_and_the_network_profile() {
        let f = Fake::new();
        f.iscsi_lun("iqn.2026-12.org.example:root");
        network_root(
            &f.read(&root_on("8:0", "ext4", "/dev/sda"), ""),
            &[
                "the root's stack is on iSCSI disk sda (LUN 1 of iqn.2026-12.org.example:root)",
                "netroot=iscsi:10.77.0.1::3260:1:iqn.2026-12.org.example:root",
            ],
            "iscsistart",
        );
    }

    /// md RAID1 -> LUKS -> LVM: the programs each layer needs, once each,
    /// and the three files written from the model.
    #[test]
    fn the_stack_gives_its_programs_and_configuration() {
        let f = Fake::new();
        let md = f.raid1_over_two_virtio_disks();
        let crypt = f.luks("dm-0", "253:0", LUKS_HEX, &md);
        f.lv("dm-1", "253:1", "vg", "root", "", &[&crypt]);
        let tab = format!("cryptroot UUID={LUKS_UUID} /etc/keys/root.key luks,discard\n");
        let stack = f.read(&root_on("253:1", "ext4", "/dev/mapper/vg-root"), &tab);
        let origin = Origin::new("m.toml".into(), 3, 1);
        let root = tempfile::tempdir().unwrap();
        let found = from_stack(&stack, false, false, false, &origin, root.path()).unwrap();
        let programs: Vec<String> = found
            .programs
            .iter()
            .map(|p| p.name.display().to_string())
            .collect();
        assert_eq!(programs, ["lvm", "dmsetup", "cryptsetup", "mdadm"]);
        assert!(found.programs.iter().all(|p| !p.optional));
        let why = found.programs[2]
            .origin
            .as_ref()
            .unwrap()
            .rule()
            .unwrap()
            .to_string();
        assert!(
            why.contains("LUKS luks-") && why.contains("under LVM volume vg/root"),
            "{why}"
        );
        let files: Vec<(String, String, u32)> = found
            .added
            .iter()
            .map(|a| {
                (
                    String::from_utf8(a.dest.clone()).unwrap(),
                    file_text(a),
                    a.mode,
                )
            })
            .collect();
        assert_eq!(files.len(), 3, "{files:?}");
        assert_eq!(files[0].0, "/etc/crypttab");
        assert!(files[0]
            .1
            .ends_with(&format!("cryptroot UUID={LUKS_UUID} none luks,discard\n")));
        assert_eq!(files[1].0, "/etc/mdadm/mdadm.conf");
        assert!(files[1]
            .1
            .contains("ARRAY /dev/md127 metadata=1.2 UUID=3b7ab5e9:4b9ca0a7:f6a23ee2:cf4e36e5"));
        assert_eq!(files[2].0, "/etc/lvm/lvm.conf");
        assert_eq!(files[2].1, crate::stack::lvm_conf());
        assert!(files.iter().all(|f| f.2 == 0o644));

        // With key files: the root's key, 0400, named by its crypttab line;
        // a key the root lacks is an error naming the line.
        let err = from_stack(&stack, true, false, false, &origin, root.path())
            .err()
            .unwrap();
        assert!(err.to_string().contains("/etc/keys/root.key"), "{err}");
        std::fs::create_dir_all(root.path().join("etc/keys")).unwrap();
        std::fs::write(root.path().join("etc/keys/root.key"), "k").unwrap();
        let found = from_stack(&stack, true, false, false, &origin, root.path()).unwrap();
        let key = found
            .added
            .iter()
            .find(|a| a.dest == b"/etc/keys/root.key")
            .unwrap();
        assert_eq!(key.mode, 0o400);
        assert!(key.origin.rule().unwrap().contains("/etc/crypttab line 1"));
        let tab = found
            .added
            .iter()
            .find(|a| a.dest == b"/etc/crypttab")
            .unwrap();
        assert!(file_text(tab).contains("/etc/keys/root.key"));

        // A volume bound to a Tang server (a clevis token): named for the
        // clevis profile the loader then takes; without the token, none is.
        assert!(crate::stack::bound_to_tang(&stack).is_empty());
        let mut tang = stack.clone();
        for l in &mut tang.layers {
            if let Layer::Crypt(c) = &mut l.kind {
                c.clevis_token = true;
            }
        }
        assert_eq!(
            crate::stack::bound_to_tang(&tang),
            [format!("luks-{LUKS_UUID}")]
        );

        // A volume the root's crypttab unlocks with the TPM: the TPM2 libraries
        // (said when missing) and drivers.
        let tab = format!("cryptroot UUID={LUKS_UUID} none luks,tpm2-device=auto\n");
        let tpm = f.read(&root_on("253:1", "ext4", "/dev/mapper/vg-root"), &tab);
        let found = from_stack(&tpm, false, false, false, &origin, root.path()).unwrap();
        let libs: Vec<String> = found
            .programs
            .iter()
            .filter(|p| p.kind == crate::resolve::elf::RequestKind::Library)
            .map(|p| p.name.display().to_string())
            .collect();
        // (The token plugin's pattern names nothing in this empty root: said.)
        assert_eq!(libs, crate::stack::TPM2_LIBRARIES[1..]);
        assert!(found
            .warnings
            .iter()
            .any(|w| w.message.contains("libcryptsetup-token-systemd-tpm2.so")));
        assert!(found
            .programs
            .iter()
            .all(|p| p.optional == (p.kind == crate::resolve::elf::RequestKind::Library)));
        let n = crate::stack::needs(&tpm);
        let c = n.iter().find(|n| n.reason.starts_with("LUKS ")).unwrap();
        assert!(
            c.modules.iter().any(|m| m == "tpm_tis") && c.modules.iter().any(|m| m == "tpm_crb")
        );
        assert!(n
            .iter()
            .filter(|n| !n.reason.starts_with("LUKS "))
            .all(|n| n.libraries.is_empty()));

        // A plain root: nothing.
        let plain = Fake::new();
        plain.virtio(4, "vda", "254:0");
        let stack = plain.read(&root_on("254:0", "ext4", "/dev/vda"), "");
        let found = from_stack(&stack, true, false, false, &origin, root.path()).unwrap();
        assert!(found.added.is_empty() && found.programs.is_empty());
    }

    /// A verity root: veritysetup for the shell init only (the systemd init
    /// runs systemd-veritysetup), and no crypttab (it is not a LUKS volume).
    #[test]
    fn a_verity_root_takes_veritysetup_for_the_shell_init_only() {
        let f = Fake::new();
        f.verity_root();
        let stack = f.read(&root_on("253:0", "ext4", "/dev/mapper/root"), "");
        let origin = Origin::new("m.toml".into(), 3, 1);
        let root = tempfile::tempdir().unwrap();
        for (systemd, want) in [(false, &["veritysetup"][..]), (true, &[][..])] {
            let found = from_stack(&stack, false, false, systemd, &origin, root.path()).unwrap();
            let programs: Vec<String> = found
                .programs
                .iter()
                .map(|p| p.name.display().to_string())
                .collect();
            assert_eq!(programs, want, "systemd: {systemd}");
            assert!(found.added.is_empty(), "systemd: {systemd}");
            if let Some(p) = found.programs.first() {
                let why = p.origin.as_ref().unwrap().rule().unwrap().to_string();
                assert!(
                    why.contains("dm-verity device root under root filesystem ext4"),
                    "{why}"
                );
            }
        }
    }

    #[test]
    fn key_paths() {
        assert!(is_key_path("/etc/keys/root.key"));
        for k in [
            "none",
            "-",
            "/dev/disk/by-label/key",
            "/proc/x",
            "/k.key:UUID=1",
            "rel.key",
        ] {
            assert!(!is_key_path(k), "{k}");
        }
    }
}

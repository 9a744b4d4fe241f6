//! What each layer needs in the image: kernel modules (as modprobe names
//! or aliases), programs, and a reason naming the layer.

use super::model::{Crypt, CryptKind, Kind, LayerId, LvKind, Remote, Stack};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Need {
    pub layer: LayerId,
    /// Module names or aliases for modprobe (`fs-ext4`, `dm-crypt`, `raid1`).
    /// A disk's drivers come from its devices' modaliases instead.
    pub modules: Vec<String>,
    /// Programs the init needs to bring the layer up (`cryptsetup`, `lvm`).
    pub programs: Vec<String>,
    /// Programs only the shell init runs for the layer: the systemd init
    /// runs its own (`veritysetup`: systemd-veritysetup, which the systemd
    /// init's profile carries).
    pub shell_programs: Vec<String>,
    /// Libraries by soname that those load at run time (the TPM2 ones for
    /// a volume unlocked by the TPM).
    pub libraries: Vec<String>,
    /// The layer and what sits on it:
    /// `md array md0 (raid1, 1.2) under LUKS luks-...`.
    pub reason: String,
}

/// A layer in a few words.
pub fn describe(stack: &Stack, id: LayerId) -> String {
    let l = &stack.layers[id];
    match &l.kind {
        Kind::Filesystem(f) => {
            let what = if f.mountpoint == "/" {
                "root filesystem".to_string()
            } else {
                format!("{} filesystem", f.mountpoint)
            };
            format!("{what} {}", f.fstype)
        }
        Kind::Lvm(v) => {
            let kind = match &v.kind {
                LvKind::Linear => String::new(),
                LvKind::Thin => " (thin)".into(),
                LvKind::ThinPool => " (thin pool)".into(),
                LvKind::ThinPoolData => " (thin pool data)".into(),
                LvKind::ThinPoolMeta => " (thin pool metadata)".into(),
                LvKind::Raid => " (raid)".into(),
                LvKind::Snapshot => " (snapshot)".into(),
                LvKind::SnapshotOrigin => " (snapshot origin)".into(),
                LvKind::SnapshotCow => " (snapshot store)".into(),
                LvKind::Other(s) => format!(" ({s})"),
            };
            format!("LVM volume {}/{}{kind}", v.vg, v.lv)
        }
        Kind::Crypt(c) => match &c.kind {
            CryptKind::Luks1 | CryptKind::Luks2 => format!("LUKS {}", c.name),
            CryptKind::Plain => format!("plain dm-crypt {}", c.name),
            CryptKind::Other(t) => format!("dm-crypt {} ({t})", c.name),
        },
        Kind::Md(m) => format!("md array {} ({}, {})", m.name, m.level, m.metadata),
        Kind::Partition(p) => format!("partition {}", p.name),
        Kind::Disk(d) => match &d.remote {
            Some(Remote::Iscsi { target, lun, .. }) => {
                format!("iSCSI disk {} (LUN {lun} of {target})", d.name)
            }
            Some(Remote::Nbd) => format!("NBD disk {}", d.name),
            None => format!("disk {}", d.name),
        },
        Kind::Loop(l) => match &l.backing_file {
            Some(f) => format!("loop device {} ({f})", l.name),
            None => format!("loop device {}", l.name),
        },
        Kind::Multipath(m) => format!("multipath map {}", m.name),
        Kind::Verity(v) => format!("dm-verity device {}", v.name),
        Kind::Mapper(m) => format!("device-mapper device {}", m.name),
    }
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// The md personality module of a level.
fn md_module(level: &str) -> Option<&'static str> {
    Some(match level {
        "raid0" => "raid0",
        "raid1" => "raid1",
        "raid4" | "raid5" | "raid6" => "raid456",
        "raid10" => "raid10",
        "linear" => "linear",
        "multipath" => "multipath",
        _ => return None,
    })
}

/// The libraries systemd-cryptsetup loads for TPM2 unlock: cryptsetup's
/// token plugin (a path pattern: its directory is named after the
/// architecture), the tpm2-tss libraries, and the device transport those
/// load by name.
pub const TPM2_LIBRARIES: [&str; 5] = [
    "/usr/lib/*/cryptsetup/libcryptsetup-token-systemd-tpm2.so",
    "libtss2-esys.so.0",
    "libtss2-rc.so.0",
    "libtss2-mu.so.0",
    "libtss2-tcti-device.so.0",
];

/// Whether the volume is unlocked with the TPM: its header holds a
/// systemd-tpm2 token, or the root's crypttab line asks for `tpm2-device=`.
fn uses_tpm2(stack: &Stack, c: &Crypt) -> bool {
    c.tpm2_token
        || c.crypttab
            .and_then(|i| stack.crypttab.get(i))
            .is_some_and(|l| {
                l.options
                    .split(',')
                    .any(|o| o.trim().starts_with("tpm2-device="))
            })
}

/// The LUKS volumes under the mounts whose header holds a clevis token
/// (bound to a Tang server): the image needs the clevis profile for them.
pub fn bound_to_tang(stack: &Stack) -> Vec<String> {
    stack
        .top_down()
        .into_iter()
        .filter_map(|id| match &stack.layers[id].kind {
            Kind::Crypt(c) if c.clevis_token => Some(c.name.clone()),
            _ => None,
        })
        .collect()
}

/// A LUKS layer's modules and programs: cryptsetup decrypts key slots
/// through the crypto user interface; dm-crypt asks for the data's cipher
/// by name. A header that could not be read: LUKS2's default cipher.
fn crypt_needs(c: &Crypt) -> (Vec<String>, Vec<String>) {
    let mut m = strings(&["dm-mod", "dm-crypt", "algif_skcipher"]);
    let ciphers = if c.ciphers.is_empty() {
        vec!["aes-xts-plain64".to_string()]
    } else {
        c.ciphers.clone()
    };
    for spec in &ciphers {
        for q in super::luks::modules_of(spec) {
            if !m.contains(&q) {
                m.push(q);
            }
        }
    }
    (m, strings(&["cryptsetup", "dmsetup"]))
}

/// One need for each layer under the mounts, top-down.
pub fn needs(stack: &Stack) -> Vec<Need> {
    stack
        .top_down()
        .into_iter()
        .map(|id| {
            let l = &stack.layers[id];
            let mut libraries = Vec::new();
            let mut shell_programs = Vec::new();
            let (modules, programs) = match &l.kind {
                // NFS: the client of its version (mount.nfs asks the kernel
                // for it by name) and the program that mounts it.
                Kind::Filesystem(f) if f.fstype == "nfs" => {
                    (strings(&["fs-nfs", "nfsv3"]), strings(&["mount.nfs"]))
                }
                Kind::Filesystem(f) if f.fstype == "nfs4" => {
                    (strings(&["fs-nfs4", "nfsv4"]), strings(&["mount.nfs"]))
                }
                // In memory: nothing to load (tmpfs is built in).
                Kind::Filesystem(f) if super::model::is_memory_fs(&f.fstype) => {
                    (Vec::new(), Vec::new())
                }
                Kind::Filesystem(f) => (
                    vec![format!("fs-{}", f.fstype)],
                    if f.fstype == "btrfs" && l.below.len() > 1 {
                        strings(&["btrfs"])
                    } else {
                        Vec::new()
                    },
                ),
                Kind::Lvm(v) => {
                    let mut m = strings(&["dm-mod"]);
                    // dmsetup: the device-mapper udev rules call it.
                    let mut p = strings(&["lvm", "dmsetup"]);
                    match v.kind {
                        LvKind::Thin | LvKind::ThinPool => {
                            m.push("dm-thin-pool".into());
                            p.push("thin_check".into());
                        }
                        LvKind::Raid => m.push("dm-raid".into()),
                        LvKind::Snapshot | LvKind::SnapshotOrigin | LvKind::SnapshotCow => {
                            m.push("dm-snapshot".into())
                        }
                        _ => {}
                    }
                    (m, p)
                }
                Kind::Crypt(c) if uses_tpm2(stack, c) => {
                    let (mut m, p) = crypt_needs(c);
                    m.extend(strings(&["tpm_tis", "tpm_crb"]));
                    libraries = strings(&TPM2_LIBRARIES);
                    (m, p)
                }
                Kind::Crypt(c) => crypt_needs(c),
                Kind::Md(m) => (
                    md_module(&m.level).into_iter().map(String::from).collect(),
                    strings(&["mdadm"]),
                ),
                // A disk on a server: its transport and the program that
                // connects it (the network comes from the network profile).
                Kind::Disk(d) => match &d.remote {
                    Some(Remote::Iscsi { .. }) => {
                        (strings(&["iscsi_tcp", "sd_mod"]), strings(&["iscsistart"]))
                    }
                    Some(Remote::Nbd) => (strings(&["nbd"]), strings(&["nbd-client"])),
                    None => (Vec::new(), Vec::new()),
                },
                Kind::Partition(_) => (Vec::new(), Vec::new()),
                Kind::Loop(_) => (strings(&["loop"]), Vec::new()),
                Kind::Multipath(_) => (
                    strings(&["dm-mod", "dm-multipath"]),
                    strings(&["multipath", "dmsetup"]),
                ),
                Kind::Verity(_) => {
                    shell_programs = strings(&["veritysetup"]);
                    (strings(&["dm-mod", "dm-verity"]), Vec::new())
                }
                Kind::Mapper(_) => (strings(&["dm-mod"]), strings(&["dmsetup"])),
            };
            let reason = match stack.above(id) {
                Some(up) => format!("{} under {}", describe(stack, id), describe(stack, up)),
                None => match &l.kind {
                    Kind::Filesystem(f) => {
                        format!("{} on {}", describe(stack, id), f.source)
                    }
                    _ => describe(stack, id),
                },
            };
            Need {
                layer: id,
                modules,
                programs,
                shell_programs,
                libraries,
                reason,
            }
        })
        .collect()
}

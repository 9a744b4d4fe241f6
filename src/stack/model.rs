//! The model: layers from a mounted filesystem down to the disks and the
//! controllers they hang off.

use std::path::PathBuf;

/// Whether a filesystem of type `fstype` is mounted from a server (its
/// layer has no block device below it): the NFS roots composer's inits
/// mount.
pub fn is_network_fs(fstype: &str) -> bool {
    matches!(fstype, "nfs" | "nfs4")
}

/// Whether a filesystem of type `fstype` lives in memory (its layer has no
/// block device below it): the tmpfs upper layer of a live root's overlay,
/// or the tmpfs a live image was copied into (`rd.live.ram`).
pub fn is_memory_fs(fstype: &str) -> bool {
    matches!(fstype, "tmpfs" | "ramfs")
}

/// A layer's index in [`Stack::layers`].
pub type LayerId = usize;

/// The block stack under one or more mounts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stack {
    /// Every layer once; a layer's `below` names layers by index. A layer
    /// shared by two mounts (a VG under `/` and `/usr`) is here once.
    pub layers: Vec<Layer>,
    /// The filesystem layers, in the order the mount points were asked for.
    pub tops: Vec<LayerId>,
    /// The crypttab lines read (see [`Crypt::crypttab`]).
    pub crypttab: Vec<CrypttabEntry>,
    /// What could not be read or was cut off (a limit, a cycle, a link out
    /// of sysfs), for the caller to pass on as warnings.
    pub notes: Vec<String>,
}

/// One layer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layer {
    pub kind: Kind,
    /// The block device's canonical directory in sysfs (none for a
    /// filesystem: its devices are the layers below).
    pub sys: Option<PathBuf>,
    /// `major:minor` as sysfs' `dev` (or mountinfo, for a filesystem) says.
    pub dev: String,
    /// The layers this one is built on: an md array's members, a VG's PVs,
    /// a partition's disk, a filesystem's devices.
    pub below: Vec<LayerId>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    Filesystem(Filesystem),
    Lvm(Lvm),
    Crypt(Crypt),
    Md(Md),
    Partition(Partition),
    Disk(Disk),
    Loop(Loop),
    Multipath(Multipath),
    /// A dm-verity device (`CRYPT-VERITY-` in dm/uuid): its data and hash
    /// devices are below it.
    Verity(Verity),
    /// Another device-mapper device (its `dm/uuid` names no known owner).
    Mapper(Mapper),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Filesystem {
    pub fstype: String,
    /// `major:minor` from mountinfo (btrfs gives an anonymous `0:N`).
    pub device: String,
    /// The mount source from mountinfo (`/dev/vda1`).
    pub source: String,
    pub mountpoint: String,
    /// From /sys/fs/btrfs (a btrfs fsid) or the `dev` directory's
    /// disk/by-uuid and disk/by-label links.
    pub uuid: Option<String>,
    pub label: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lvm {
    pub vg: String,
    pub lv: String,
    pub kind: LvKind,
    /// The VG's and the LV's UUIDs as dm/uuid holds them (32 characters
    /// each, no dashes).
    pub vg_uuid: String,
    pub lv_uuid: String,
}

/// What an LV is, as far as dm/uuid suffixes and the layers below tell.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LvKind {
    /// No sub-LVs and no suffix: linear or striped (the table is not read).
    Linear,
    /// A thin LV: it sits on a thin pool.
    Thin,
    /// The pool itself (`-tpool`), its data (`-tdata`) and metadata (`-tmeta`).
    ThinPool,
    ThinPoolData,
    ThinPoolMeta,
    /// An LV over `_rimage_N`/`_rmeta_N` sub-LVs (`lvcreate --type raid1`...).
    Raid,
    /// A snapshot (over `-real` and `-cow`), its origin (`-real`), its store (`-cow`).
    Snapshot,
    SnapshotOrigin,
    SnapshotCow,
    /// Another suffix LVM uses for hidden layers (`-vpool`, `-vdata`...).
    Other(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Crypt {
    /// The mapping's name (dm/name): what crypttab's first field names.
    pub name: String,
    pub kind: CryptKind,
    /// The LUKS header's UUID with dashes (from dm/uuid).
    pub luks_uuid: Option<String>,
    /// The index in [`Stack::crypttab`] of the line naming this device.
    pub crypttab: Option<usize>,
    /// The ciphers its LUKS header names (`aes-xts-plain64`): the data's
    /// and the key slots'. Empty when the header was not read.
    pub ciphers: Vec<String>,
    /// The header holds a systemd-tpm2 token (TPM2 unlock).
    pub tpm2_token: bool,
    /// The header holds a clevis token (Tang unlock).
    pub clevis_token: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CryptKind {
    Luks1,
    Luks2,
    Plain,
    /// Another `CRYPT-TYPE-` prefix (`INTEGRITY`, `TCRYPT`, `BITLK`...; a
    /// `VERITY` device is a [`Kind::Verity`]).
    Other(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Md {
    /// The kernel's name: `md0`, `md127`, or `md_NAME` for a named array.
    pub name: String,
    /// md/level: `raid0`, `raid1`, `raid4`, `raid5`, `raid6`, `raid10`, `linear`...
    pub level: String,
    /// md/metadata_version: `0.90`, `1.0`, `1.1`, `1.2`, `external:...`.
    pub metadata: String,
    /// mdadm's form, `xxxxxxxx:xxxxxxxx:xxxxxxxx:xxxxxxxx`.
    pub uuid: Option<String>,
    /// The array's name in a 1.x superblock (`host:name`), when read.
    pub array_name: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Partition {
    pub name: String,
    /// The disk's kernel name (`vda` for `vda1`).
    pub disk: String,
    pub number: u32,
    pub partuuid: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Disk {
    pub name: String,
    /// Devices with a modalias from the disk up to the bus: the disk's own
    /// device, its controller, the controller's bridge...
    pub devices: Vec<BusDevice>,
    /// The server, for a disk the kernel reaches over the network.
    pub remote: Option<Remote>,
}

/// A disk on a server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Remote {
    /// A LUN of an iSCSI session: its target's name, the connection's
    /// portal (as sysfs' `persistent_address` and `persistent_port` say,
    /// when they are there), and the LUN.
    Iscsi {
        target: String,
        address: Option<String>,
        port: Option<String>,
        lun: String,
    },
    /// An NBD device (sysfs does not say its server).
    Nbd,
}

/// A device in sysfs that names the driver it wants.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BusDevice {
    pub path: PathBuf,
    pub modalias: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Loop {
    pub name: String,
    /// loop/backing_file: the file the loop device reads (on another mount).
    pub backing_file: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Multipath {
    /// dm/name.
    pub name: String,
    /// The WWID after `mpath-` in dm/uuid.
    pub wwid: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verity {
    /// dm/name (`root` for `roothash=`, `usr` for `usrhash=`).
    pub name: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapper {
    pub name: String,
    pub uuid: String,
}

/// How a crypttab line names the encrypted device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeviceSpec {
    Uuid(String),
    PartUuid(String),
    Label(String),
    PartLabel(String),
    /// A path (`/dev/sda2`, `/dev/disk/by-id/...`).
    Path(String),
}

/// One line of crypttab(5): `name device [keyfile [options]]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CrypttabEntry {
    /// 1-based line number in the text.
    pub line: usize,
    pub name: String,
    pub device: DeviceSpec,
    /// None for a missing field, `none` or `-`.
    pub keyfile: Option<String>,
    /// The options as written (comma-separated), empty when absent.
    pub options: String,
}

impl Kind {
    /// The kernel's or the mapping's name of the layer, the mount point
    /// for a filesystem.
    pub fn name(&self) -> &str {
        match self {
            Kind::Filesystem(f) => &f.mountpoint,
            Kind::Lvm(l) => &l.lv,
            Kind::Crypt(c) => &c.name,
            Kind::Md(m) => &m.name,
            Kind::Partition(p) => &p.name,
            Kind::Disk(d) => &d.name,
            Kind::Loop(l) => &l.name,
            Kind::Multipath(m) => &m.name,
            Kind::Verity(v) => &v.name,
            Kind::Mapper(m) => &m.name,
        }
    }
}

impl Stack {
    /// The first layer built on `id`, if any.
    pub fn above(&self, id: LayerId) -> Option<LayerId> {
        self.layers.iter().position(|l| l.below.contains(&id))
    }

    /// Every layer reachable from the tops, each once, top-down (a layer
    /// before the layers below it, in the order first met).
    pub fn top_down(&self) -> Vec<LayerId> {
        let mut out = Vec::new();
        let mut seen = vec![false; self.layers.len()];
        let mut todo: Vec<LayerId> = self.tops.iter().rev().copied().collect();
        while let Some(id) = todo.pop() {
            if id >= self.layers.len() || std::mem::replace(&mut seen[id], true) {
                continue;
            }
            out.push(id);
            todo.extend(self.layers[id].below.iter().rev());
        }
        out
    }
}

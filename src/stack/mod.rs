//! The block stack under the root (and `/usr`): one model, read once from
//! the running machine, that hostonly module selection, `composer why` and
//! the generated configuration all read.
//!
//! # The model
//!
//! A [`Stack`] is a DAG of [`Layer`]s from each mounted [`Filesystem`] down
//! to the disks: LVM volumes, dm-crypt mappings, md arrays, partitions,
//! disks (with the devices up to the bus that name a driver by modalias),
//! loop devices, multipath maps, dm-verity devices and other
//! device-mapper devices (an NFS filesystem is a layer with nothing below:
//! its server is reached over the network, see [`is_network_fs`]; so is a
//! tmpfs, see [`is_memory_fs`]). An overlay sits on the filesystems holding
//! its lower and upper directories, a loop device on the filesystem holding
//! its file: a live root is overlay, squashfs, loop, the medium's
//! filesystem, its drive. A layer
//! may sit on several (an md array over two disks, a VG over two PVs, a
//! btrfs over two devices); a layer two mounts share is there once. Each
//! layer records the sysfs directory of its block device.
//!
//! # What is read, from where
//!
//! * mountinfo (normally `/proc/self/mountinfo`): the last mount on each
//!   mount point asked for: `major:minor`, type, source.
//! * sysfs (normally `/sys`): `dev/block/MAJ:MIN` for the mount's device
//!   (or `class/block/NAME` from the source); for btrfs,
//!   `fs/btrfs/<fsid>/devices/` (the fsid is the filesystem's UUID). From
//!   each block device: `dev`, `slaves/`, `partition` (a partition's disk
//!   is its parent directory), `uevent` (`PARTUUID=`), `dm/name` and
//!   `dm/uuid` (`CRYPT-LUKS2-<uuid>-<name>`, `CRYPT-PLAIN-<name>`,
//!   `LVM-<vg uuid><lv uuid>[-tpool|-tdata|-tmeta|-real|-cow]`,
//!   `mpath-<wwid>`, kpartx's `partN-`), `md/level`,
//!   `md/metadata_version`, `md/uuid` (Linux 5.9 and later),
//!   `md/dev-*/super`, `loop/backing_file` (whose filesystem is found in
//!   mountinfo, as an overlay's `lowerdir=` and `upperdir=` are), and
//!   `modalias` of the devices from a disk up to `devices/`.
//! * the `dev` directory (normally `/dev`), if given: `disk/by-uuid`,
//!   `disk/by-label` and `disk/by-partuuid` links (udev's), and an md
//!   member's superblock when sysfs has neither md/uuid nor the superblock
//!   image (version 1.x at 4 KiB, the start or 8 KiB from the end;
//!   0.90 in the last 64 KiB-aligned 64 KiB), and a LUKS device's header
//!   for its ciphers (see [`luks`]).
//! * a crypttab text (normally `/etc/crypttab`, see crypttab(5)): each
//!   crypt layer records which line names it, by name or device.
//!
//! An LV's kind comes from its dm/uuid suffix or what it sits on (a thin
//! pool: thin; `_rimage_` sub-LVs: raid; `-real`: snapshot); the dm table
//! is not read, so linear and striped LVs look alike.
//!
//! # Limits
//!
//! A hostile or broken sysfs cannot make the reader hang or wander: at
//! most [`MAX_NODES`] block devices are visited and chains deeper than
//! [`MAX_DEPTH`] are cut; a device met again while below itself (a cycle)
//! is not followed; every link is resolved and left alone if it points out
//! of the sysfs directory given; an attribute is read up to [`MAX_ATTR`]
//! bytes, only if it is a regular file, opened without blocking (a FIFO is
//! skipped); a directory gives at most [`MAX_ENTRIES`] entries; a
//! superblock read is one 4 KiB read at a computed offset. What was cut
//! off is said in [`Stack::notes`]. crypttab lines are cut at 4 KiB and at
//! most 1024 are taken.
//!
//! # What the layers need, and configuration
//!
//! [`needs`] gives each layer its modules (`fs-TYPE`, `dm-crypt`,
//! `dm-thin-pool`, `raid1`...), its programs (`cryptsetup`, `lvm`,
//! `thin_check`, `mdadm`, `btrfs`) and a reason naming it and what sits on
//! it. [`mdadm_conf`], [`crypttab`] and [`lvm_conf`] write the image's
//! configuration from the model alone: the host's files are read, never
//! copied.

mod config;
mod crypttab;
mod luks;
mod model;
mod needs;
mod running;
mod superblock;
mod sysfs;
#[cfg(test)]
pub(crate) mod tests;

pub use config::{crypttab, lvm_conf, mdadm_conf};
pub use crypttab::parse as parse_crypttab;
pub use luks::modules_of as cipher_modules;
pub use model::{
    is_memory_fs, is_network_fs, BusDevice, Crypt, CryptKind, CrypttabEntry, DeviceSpec, Disk,
    Filesystem, Kind, Layer, LayerId, Loop, LvKind, Lvm, Mapper, Md, Multipath, Partition, Remote,
    Stack, Verity,
};
pub use needs::{bound_to_tang, describe, needs, Need, TPM2_LIBRARIES};
pub use running::{running, MOUNTS};
pub use superblock::read_bounded;
pub use sysfs::{
    mount_holding, mount_of, read, split_lvm_name, Mount, Sources, StackError, MAX_ATTR, MAX_DEPTH,
    MAX_ENTRIES, MAX_NODES,
};

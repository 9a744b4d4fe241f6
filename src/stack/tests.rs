//! The reader over fake sysfs trees, and what the model gives.

use std::path::{Path, PathBuf};

use super::config::{crypttab, lvm_conf, mdadm_conf};
use super::model::{CryptKind, Kind, LayerId, LvKind, Stack};
use super::needs::needs;
use super::sysfs::{
    mount_holding, mount_of, overlay_dirs, read, split_lvm_name, Mount, Sources, StackError,
};

/// A sysfs tree (and a /dev) in a temporary directory.
pub(crate) struct Fake {
    dir: tempfile::TempDir,
}

pub(crate) const LUKS_HEX: &str = "0a1b2c3d4e5f67890a1b2c3d4e5f6789";
pub(crate) const LUKS_UUID: &str = "0a1b2c3d-4e5f-6789-0a1b-2c3d4e5f6789";
const VG: &str = "Vg0UUIDaaaaaaaaaaaaaaaaaaaaaaaaa";

impl Fake {
    pub(crate) fn new() -> Fake {
        let f = Fake {
            dir: tempfile::tempdir().unwrap(),
        };
        for d in ["sys/dev/block", "sys/class/block", "sys/devices", "dev"] {
            std::fs::create_dir_all(f.dir.path().join(d)).unwrap();
        }
        f
    }
    pub(crate) fn sys(&self) -> PathBuf {
        self.dir.path().join("sys")
    }
    pub(crate) fn dev(&self) -> PathBuf {
        self.dir.path().join("dev")
    }
    pub(crate) fn write(&self, dir: &Path, rel: &str, text: &str) {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    /// A block device at `devpath` (below sys) numbered `dev`.
    pub(crate) fn block(&self, devpath: &str, dev: &str) -> PathBuf {
        let p = self.sys().join(devpath);
        std::fs::create_dir_all(&p).unwrap();
        self.write(&p, "dev", &format!("{dev}\n"));
        let name = p.file_name().unwrap().to_owned();
        std::os::unix::fs::symlink(&p, self.sys().join("dev/block").join(dev)).unwrap();
        std::os::unix::fs::symlink(&p, self.sys().join("class/block").join(name)).unwrap();
        p
    }
    /// A virtio disk on its own PCI device.
    pub(crate) fn virtio(&self, slot: u32, name: &str, dev: &str) -> PathBuf {
        let pci = self
            .sys()
            .join(format!("devices/pci0000:00/0000:00:0{slot}.0"));
        self.write(
            &pci,
            "modalias",
            "pci:v00001AF4d00001001sv00001AF4sd00000002bc01sc00i00\n",
        );
        self.write(
            &pci,
            &format!("virtio{slot}/modalias"),
            "virtio:d00000002v00001AF4\n",
        );
        self.block(
            &format!("devices/pci0000:00/0000:00:0{slot}.0/virtio{slot}/block/{name}"),
            dev,
        )
    }
    pub(crate) fn partition(&self, disk: &Path, name: &str, n: u32, dev: &str) -> PathBuf {
        let rel = disk.strip_prefix(self.sys()).unwrap().join(name);
        let p = self.block(rel.to_str().unwrap(), dev);
        self.write(&p, "partition", &format!("{n}\n"));
        p
    }
    pub(crate) fn slave(&self, upper: &Path, lower: &Path) {
        let s = upper.join("slaves");
        std::fs::create_dir_all(&s).unwrap();
        std::os::unix::fs::symlink(lower, s.join(lower.file_name().unwrap())).unwrap();
    }
    pub(crate) fn dm(
        &self,
        kname: &str,
        dev: &str,
        name: &str,
        uuid: &str,
        lower: &[&Path],
    ) -> PathBuf {
        let p = self.block(&format!("devices/virtual/block/{kname}"), dev);
        self.write(&p, "dm/name", &format!("{name}\n"));
        self.write(&p, "dm/uuid", &format!("{uuid}\n"));
        for l in lower {
            self.slave(&p, l);
        }
        p
    }
    pub(crate) fn luks(&self, kname: &str, dev: &str, hex: &str, lower: &Path) -> PathBuf {
        let name = format!("luks-{}", dashed(hex));
        self.dm(
            kname,
            dev,
            &name,
            &format!("CRYPT-LUKS2-{hex}-{name}"),
            &[lower],
        )
    }
    pub(crate) fn lv(
        &self,
        kname: &str,
        dev: &str,
        vg: &str,
        lv: &str,
        suffix: &str,
        lower: &[&Path],
    ) -> PathBuf {
        let lv_uuid = format!("{:a<32}", lv.replace(['-', '_'], ""));
        let uuid = format!("LVM-{VG}{lv_uuid}{suffix}");
        let name = format!("{}-{}", vg.replace('-', "--"), lv.replace('-', "--"));
        self.dm(kname, dev, &name, &uuid, lower)
    }
    pub(crate) fn md(
        &self,
        name: &str,
        dev: &str,
        level: &str,
        meta: &str,
        lower: &[&Path],
    ) -> PathBuf {
        let p = self.block(&format!("devices/virtual/block/{name}"), dev);
        self.write(&p, "md/level", &format!("{level}\n"));
        self.write(&p, "md/metadata_version", &format!("{meta}\n"));
        for l in lower {
            self.slave(&p, l);
            std::fs::create_dir_all(
                p.join("md")
                    .join(format!("dev-{}", l.file_name().unwrap().to_str().unwrap())),
            )
            .unwrap();
        }
        p
    }
    /// sda, LUN 1 of an iSCSI session to `target` at 10.77.0.1:3260, as the
    /// kernel's iSCSI transport lays it out.
    pub(crate) fn iscsi_lun(&self, target: &str) -> PathBuf {
        let session = self.sys().join("devices/platform/host2/session1");
        self.write(
            &session,
            "iscsi_session/session1/targetname",
            &format!("{target}\n"),
        );
        let conn = "connection1:0/iscsi_connection/connection1:0";
        self.write(
            &session,
            &format!("{conn}/persistent_address"),
            "10.77.0.1\n",
        );
        self.write(&session, &format!("{conn}/persistent_port"), "3260\n");
        self.write(&session, "target2:0:0/2:0:0:1/modalias", "scsi:t-0x00\n");
        self.block(
            "devices/platform/host2/session1/target2:0:0/2:0:0:1/block/sda",
            "8:0",
        )
    }
    /// md127, RAID1 (1.2) over vda and vdb, with its UUID in sysfs.
    pub(crate) fn raid1_over_two_virtio_disks(&self) -> PathBuf {
        let vda = self.virtio(4, "vda", "254:0");
        let vdb = self.virtio(5, "vdb", "254:16");
        let md = self.md("md127", "9:127", "raid1", "1.2", &[&vda, &vdb]);
        self.write(&md, "md/uuid", "3b7ab5e9-4b9c-a0a7-f6a2-3ee2cf4e36e5\n");
        md
    }
    /// dm-0, the dm-verity device `root` over its data (vda1) and hash (vda2)
    /// partitions, as systemd-veritysetup names it.
    pub(crate) fn verity_root(&self) -> PathBuf {
        let vda = self.virtio(4, "vda", "254:0");
        let data = self.partition(&vda, "vda1", 1, "254:1");
        let hash = self.partition(&vda, "vda2", 2, "254:2");
        self.dm(
            "dm-0",
            "253:0",
            "root",
            &format!("CRYPT-VERITY-{LUKS_HEX}-root"),
            &[&data, &hash],
        )
    }
    pub(crate) fn read(&self, mountinfo: &str, crypttab: &str) -> Stack {
        let sys = self.sys();
        let dev = self.dev();
        read(
            &Sources {
                sys: &sys,
                dev: Some(&dev),
                mountinfo,
                crypttab,
            },
            &["/", "/usr"],
        )
        .unwrap()
    }
}

fn dashed(hex: &str) -> String {
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

pub(crate) fn root_on(dev: &str, fstype: &str, source: &str) -> String {
    format!(
        "20 1 0:20 / /proc rw - proc proc rw\n\
         27 1 {dev} / / rw,relatime shared:1 - {fstype} {source} rw\n"
    )
}

/// The stack as text: each layer top-down, indented by depth.
fn tree(s: &Stack) -> String {
    fn walk(s: &Stack, id: LayerId, depth: usize, out: &mut String) {
        let l = &s.layers[id];
        let what = match &l.kind {
            Kind::Filesystem(f) => format!(
                "fs {} {} uuid={:?} label={:?}",
                f.fstype, f.mountpoint, f.uuid, f.label
            ),
            Kind::Lvm(v) => format!("lvm {}/{} {:?}", v.vg, v.lv, v.kind),
            Kind::Crypt(c) => format!(
                "crypt {} {:?} {:?} line={:?}",
                c.name,
                c.kind,
                c.luks_uuid,
                c.crypttab.map(|i| s.crypttab[i].line)
            ),
            Kind::Md(m) => format!(
                "md {} {} {} {:?} {:?}",
                m.name, m.level, m.metadata, m.uuid, m.array_name
            ),
            Kind::Partition(p) => {
                format!(
                    "part {} of {} #{} {:?}",
                    p.name, p.disk, p.number, p.partuuid
                )
            }
            Kind::Disk(d) => format!("disk {} ({} devices)", d.name, d.devices.len()),
            Kind::Loop(l) => format!("loop {} {:?}", l.name, l.backing_file),
            Kind::Multipath(m) => format!("mpath {}", m.name),
            Kind::Verity(v) => format!("verity {}", v.name),
            Kind::Mapper(m) => format!("dm {} {}", m.name, m.uuid),
        };
        out.push_str(&format!("{}{what} [{}]\n", "  ".repeat(depth), l.dev));
        for &b in &l.below {
            walk(s, b, depth + 1, out);
        }
    }
    let mut out = String::new();
    for &t in &s.tops {
        walk(s, t, 0, &mut out);
    }
    out
}

fn need_of<'a>(all: &'a [super::needs::Need], reason_start: &str) -> &'a super::needs::Need {
    all.iter()
        .find(|n| n.reason.starts_with(reason_start))
        .unwrap_or_else(|| panic!("no need `{reason_start}`: {all:#?}"))
}

#[test]
fn a_partition_with_ext4_on_virtio() {
    let f = Fake::new();
    let vda = f.virtio(4, "vda", "254:0");
    let vda1 = f.partition(&vda, "vda1", 1, "254:1");
    f.write(
        &vda1,
        "uevent",
        "MAJOR=254\nMINOR=1\nDEVNAME=vda1\nDEVTYPE=partition\nPARTN=1\n",
    );
    std::fs::create_dir_all(f.dev().join("disk/by-uuid")).unwrap();
    std::fs::create_dir_all(f.dev().join("disk/by-label")).unwrap();
    std::fs::create_dir_all(f.dev().join("disk/by-partuuid")).unwrap();
    std::os::unix::fs::symlink("../../vda1", f.dev().join("disk/by-uuid/1111-aa")).unwrap();
    std::os::unix::fs::symlink("../../vda1", f.dev().join("disk/by-label/my\\x20root")).unwrap();
    std::os::unix::fs::symlink("../../vda1", f.dev().join("disk/by-partuuid/abcd-01")).unwrap();
    let s = f.read(&root_on("254:1", "ext4", "/dev/vda1"), "");
    assert_eq!(
        tree(&s),
        "fs ext4 / uuid=Some(\"1111-aa\") label=Some(\"my root\") [254:1]\n\
         \x20 part vda1 of vda #1 Some(\"abcd-01\") [254:1]\n\
         \x20   disk vda (2 devices) [254:0]\n"
    );
    assert!(s.notes.is_empty(), "{:?}", s.notes);
    let Kind::Disk(d) = &s.layers[s.layers.len() - 1 - 2].kind else {
        panic!("{s:#?}")
    };
    assert_eq!(d.devices[0].modalias, "virtio:d00000002v00001AF4");
    assert!(d.devices[1].modalias.starts_with("pci:v00001AF4"));
    assert_eq!(
        d.devices[1].path,
        f.sys().join("devices/pci0000:00/0000:00:04.0")
    );
    let n = needs(&s);
    assert_eq!(n[0].modules, ["fs-ext4"]);
    assert_eq!(n[0].reason, "root filesystem ext4 on /dev/vda1");
    assert_eq!(n[1].reason, "partition vda1 under root filesystem ext4");
    assert_eq!(n[2].reason, "disk vda under partition vda1");
    assert!(n.iter().all(|n| n.programs.is_empty()));
    // The source names the device when sysfs has no dev/block link for it.
    std::fs::remove_file(f.sys().join("dev/block/254:1")).unwrap();
    let s = f.read(&root_on("0:99", "ext4", "/dev/vda1"), "");
    assert_eq!(s.layers.len(), 3);
}

#[test]
fn luks2_then_lvm_then_ext4_on_a_partition() {
    let f = Fake::new();
    let sda = f.block(
        "devices/pci0000:00/0000:00:1f.2/ata1/host0/target0:0:0/0:0:0:0/block/sda",
        "8:0",
    );
    f.write(
        &f.sys().join("devices/pci0000:00/0000:00:1f.2"),
        "modalias",
        "pci:v00008086d00002922sv00001AF4sd00001100bc01sc06i01\n",
    );
    f.write(
        &f.sys()
            .join("devices/pci0000:00/0000:00:1f.2/ata1/host0/target0:0:0/0:0:0:0"),
        "modalias",
        "scsi:t-0x00\n",
    );
    let sda2 = f.partition(&sda, "sda2", 2, "8:2");
    let crypt = f.luks("dm-0", "253:0", LUKS_HEX, &sda2);
    f.lv("dm-1", "253:1", "vg-sys", "root", "", &[&crypt]);
    let tab = format!(
        "# host\ncryptroot UUID={} /etc/keys/root.key luks,discard\nother /dev/sdz none\n",
        LUKS_UUID.to_uppercase()
    );
    let s = f.read(&root_on("253:1", "ext4", "/dev/mapper/vg--sys-root"), &tab);
    assert_eq!(
        tree(&s),
        format!(
            "fs ext4 / uuid=None label=None [253:1]\n\
             \x20 lvm vg-sys/root Linear [253:1]\n\
             \x20   crypt luks-{LUKS_UUID} Luks2 Some(\"{LUKS_UUID}\") line=Some(2) [253:0]\n\
             \x20     part sda2 of sda #2 None [8:2]\n\
             \x20       disk sda (2 devices) [8:0]\n"
        )
    );
    let n = needs(&s);
    let lv = need_of(&n, "LVM volume vg-sys/root");
    assert_eq!(
        (lv.modules.as_slice(), lv.programs.as_slice()),
        (
            &["dm-mod".to_string()][..],
            &["lvm".to_string(), "dmsetup".to_string()][..]
        )
    );
    // No header to read (no /dev/sda2 here): LUKS2's default cipher.
    let c = need_of(&n, "LUKS ");
    assert_eq!(
        c.modules,
        [
            "dm-mod",
            "dm-crypt",
            "algif_skcipher",
            "crypto-aes",
            "crypto-xts"
        ]
    );
    assert_eq!(c.programs, ["cryptsetup", "dmsetup"]);
    assert_eq!(
        c.reason,
        format!("LUKS luks-{LUKS_UUID} under LVM volume vg-sys/root")
    );
    // The host's line gives name and options; its key file only when allowed.
    assert_eq!(
        crypttab(&s, false),
        format!("# The LUKS devices under the mounts, written by composer.\ncryptroot UUID={LUKS_UUID} none luks,discard\n")
    );
    assert!(crypttab(&s, true).ends_with(&format!(
        "cryptroot UUID={LUKS_UUID} /etc/keys/root.key luks,discard\n"
    )));
    // Without a host line: the mapping's own name.
    let s = f.read(&root_on("253:1", "ext4", "/dev/mapper/vg--sys-root"), "");
    assert!(crypttab(&s, true).ends_with(&format!("luks-{LUKS_UUID} UUID={LUKS_UUID} none luks\n")));
    // A line naming the partition by path matches too.
    let s = f.read(
        &root_on("253:1", "ext4", "/dev/mapper/vg--sys-root"),
        "root /dev/sda2 none luks\n",
    );
    assert!(crypttab(&s, false).ends_with(&format!("root UUID={LUKS_UUID} none luks\n")));
}

#[test]
fn md_raid1_then_luks_then_a_thin_lv() {
    let f = Fake::new();
    let md = f.raid1_over_two_virtio_disks();
    let crypt = f.luks("dm-0", "253:0", LUKS_HEX, &md);
    // The array's LUKS1 header names its cipher.
    let mut header = vec![0u8; 4096];
    header[..8].copy_from_slice(b"LUKS\xba\xbe\x00\x01");
    header[8..15].copy_from_slice(b"serpent");
    header[40..56].copy_from_slice(b"cbc-essiv:sha256");
    std::fs::write(f.dev().join("md127"), &header).unwrap();
    let tmeta = f.lv("dm-1", "253:1", "vg", "pool_tmeta", "-tmeta", &[&crypt]);
    let tdata = f.lv("dm-2", "253:2", "vg", "pool_tdata", "-tdata", &[&crypt]);
    let tpool = f.lv(
        "dm-3",
        "253:3",
        "vg",
        "pool-tpool",
        "-tpool",
        &[&tmeta, &tdata],
    );
    f.lv("dm-4", "253:4", "vg", "root", "", &[&tpool]);
    let mi = root_on("253:4", "xfs", "/dev/mapper/vg-root");
    let s = f.read(&mi, "");
    let t = tree(&s);
    assert!(
        t.starts_with(
            "fs xfs / uuid=None label=None [253:4]\n\
         \x20 lvm vg/root Thin [253:4]\n\
         \x20   lvm vg/pool-tpool ThinPool [253:3]\n\
         \x20     lvm vg/pool_tmeta ThinPoolMeta [253:1]\n\
         \x20       crypt luks-"
        ),
        "{t}"
    );
    assert!(
        t.contains(
            "md md127 raid1 1.2 Some(\"3b7ab5e9:4b9ca0a7:f6a23ee2:cf4e36e5\") None [9:127]\n\
         \x20           disk vda (2 devices) [254:0]\n\
         \x20           disk vdb (2 devices) [254:16]\n"
        ),
        "{t}"
    );
    // The crypt layer is one layer under both pool parts.
    assert_eq!(s.layers.len(), 9);
    let n = needs(&s);
    let thin = need_of(&n, "LVM volume vg/root (thin)");
    assert!(thin.modules.contains(&"dm-thin-pool".to_string()));
    assert_eq!(thin.programs, ["lvm", "dmsetup", "thin_check"]);
    let c = need_of(&n, "LUKS ");
    assert_eq!(
        c.modules,
        [
            "dm-mod",
            "dm-crypt",
            "algif_skcipher",
            "crypto-serpent",
            "crypto-cbc",
            "crypto-essiv",
            "crypto-sha256"
        ]
    );
    let pool = need_of(&n, "LVM volume vg/pool-tpool (thin pool)");
    assert!(pool.modules.contains(&"dm-thin-pool".to_string()));
    let m = need_of(&n, "md array");
    assert_eq!(m.modules, ["raid1"]);
    assert_eq!(m.programs, ["mdadm"]);
    assert_eq!(
        m.reason,
        format!("md array md127 (raid1, 1.2) under LUKS luks-{LUKS_UUID}")
    );
    assert_eq!(
        need_of(&n, "disk vdb").reason,
        "disk vdb under md array md127 (raid1, 1.2)"
    );
    assert_eq!(
        mdadm_conf(&s),
        "# The md arrays under the mounts, written by composer.\n\
         ARRAY /dev/md127 metadata=1.2 UUID=3b7ab5e9:4b9ca0a7:f6a23ee2:cf4e36e5\n"
    );

    // A kernel without md/uuid: the superblock image sysfs keeps.
    std::fs::remove_file(md.join("md/uuid")).unwrap();
    let uuid = [
        0x3b, 0x7a, 0xb5, 0xe9, 0x4b, 0x9c, 0xa0, 0xa7, 0xf6, 0xa2, 0x3e, 0xe2, 0xcf, 0x4e, 0x36,
        0xe5,
    ];
    let sb = super::superblock::tests::v1(uuid, "host:root");
    std::fs::write(md.join("md/dev-vdb/super"), &sb).unwrap();
    let s = f.read(&mi, "");
    assert_eq!(
        mdadm_conf(&s).lines().nth(1),
        Some(
            "ARRAY /dev/md127 metadata=1.2 UUID=3b7ab5e9:4b9ca0a7:f6a23ee2:cf4e36e5 name=host:root"
        )
    );
    // Nor that: the member itself, at 4 KiB for 1.2.
    std::fs::remove_file(md.join("md/dev-vdb/super")).unwrap();
    let mut img = vec![0u8; 64 * 1024];
    img[4096..8192].copy_from_slice(&sb);
    std::fs::write(f.dev().join("vdb"), &img).unwrap();
    f.write(&f.sys().join("class/block/vdb"), "size", "128\n");
    let s = f.read(&mi, "");
    assert!(mdadm_conf(&s).contains("UUID=3b7ab5e9:4b9ca0a7:f6a23ee2:cf4e36e5 name=host:root"));
    // Nothing at all: said, not guessed.
    std::fs::remove_file(f.dev().join("vdb")).unwrap();
    let s = f.read(&mi, "");
    assert!(mdadm_conf(&s).ends_with("# md127: UUID unknown, not listed\n"));
    assert!(s.notes.iter().any(|n| n.contains("md127")), "{:?}", s.notes);
}

#[test]
fn luks_on_each_disk_then_md_then_lvm() {
    let f = Fake::new();
    let sda = f.virtio(4, "vda", "254:0");
    let sdb = f.virtio(5, "vdb", "254:16");
    let hex_b = "ffeeddccbbaa99887766554433221100";
    let ca = f.luks("dm-0", "253:0", LUKS_HEX, &sda);
    let cb = f.luks("dm-1", "253:1", hex_b, &sdb);
    let md = f.md("md0", "9:0", "raid1", "0.90", &[&ca, &cb]);
    // md/uuid of a 0.90 array: the words as they lie in memory.
    let words = [0x1122_3344u32, 0x5566_7788, 0x99aa_bbcc, 0xddee_ff00];
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    f.write(&md, "md/uuid", &format!("{}\n", dashed(&hex)));
    f.lv("dm-2", "253:2", "vg", "root", "", &[&md]);
    let tab = "disk-b /dev/vdb /root/b.key luks,discard\n";
    let s = f.read(&root_on("253:2", "ext4", "/dev/mapper/vg-root"), tab);
    let t = tree(&s);
    assert!(
        t.contains("md md0 raid1 0.90 Some(\"11223344:55667788:99aabbcc:ddeeff00\")"),
        "{t}"
    );
    assert_eq!(
        mdadm_conf(&s).lines().nth(1),
        Some("ARRAY /dev/md0 metadata=0.90 UUID=11223344:55667788:99aabbcc:ddeeff00")
    );
    assert_eq!(
        crypttab(&s, false),
        format!(
            "# The LUKS devices under the mounts, written by composer.\n\
             luks-{LUKS_UUID} UUID={LUKS_UUID} none luks\n\
             disk-b UUID={} none luks,discard\n",
            dashed(hex_b)
        )
    );
    let n = needs(&s);
    assert_eq!(
        need_of(&n, &format!("LUKS luks-{}", dashed(hex_b))).reason,
        format!(
            "LUKS luks-{} under md array md0 (raid1, 0.90)",
            dashed(hex_b)
        )
    );
    assert_eq!(
        need_of(&n, "disk vda").reason,
        format!("disk vda under LUKS luks-{LUKS_UUID}")
    );
}

#[test]
fn btrfs_over_two_devices_and_a_vg_over_two_pvs() {
    let f = Fake::new();
    let vda = f.virtio(4, "vda", "254:0");
    let vdb = f.virtio(5, "vdb", "254:16");
    let fsid = "5e1f0000-0000-4000-8000-00000000abcd";
    let devs = f.sys().join("fs/btrfs").join(fsid).join("devices");
    std::fs::create_dir_all(&devs).unwrap();
    std::os::unix::fs::symlink(&vda, devs.join("vda")).unwrap();
    std::os::unix::fs::symlink(&vdb, devs.join("vdb")).unwrap();
    std::fs::create_dir_all(f.sys().join("fs/btrfs/features")).unwrap();
    std::fs::write(
        f.sys().join("fs/btrfs").join(fsid).join("label"),
        "cmp-raid1\n",
    )
    .unwrap();
    let s = f.read(&root_on("0:34", "btrfs", "/dev/vda"), "");
    assert_eq!(
        tree(&s),
        format!(
            "fs btrfs / uuid=Some(\"{fsid}\") label=Some(\"cmp-raid1\") [0:34]\n\
             \x20 disk vda (2 devices) [254:0]\n\
             \x20 disk vdb (2 devices) [254:16]\n"
        )
    );
    let n = needs(&s);
    assert_eq!(n[0].modules, ["fs-btrfs"]);
    assert_eq!(n[0].programs, ["btrfs"]);

    // A VG over two PVs, and /usr on another LV of it.
    let g = Fake::new();
    let vda = g.virtio(4, "vda", "254:0");
    let vdb = g.virtio(5, "vdb", "254:16");
    g.lv("dm-0", "253:0", "vg", "root", "", &[&vda, &vdb]);
    g.lv("dm-1", "253:1", "vg", "usr", "", &[&vdb]);
    let mi = format!(
        "{}28 27 253:1 / /usr rw - ext4 /dev/mapper/vg-usr rw\n",
        root_on("253:0", "ext4", "/dev/mapper/vg-root")
    );
    let s = g.read(&mi, "");
    assert_eq!(s.tops.len(), 2);
    assert_eq!(
        tree(&s),
        "fs ext4 / uuid=None label=None [253:0]\n\
         \x20 lvm vg/root Linear [253:0]\n\
         \x20   disk vda (2 devices) [254:0]\n\
         \x20   disk vdb (2 devices) [254:16]\n\
         fs ext4 /usr uuid=None label=None [253:1]\n\
         \x20 lvm vg/usr Linear [253:1]\n\
         \x20   disk vdb (2 devices) [254:16]\n"
    );
    // vdb is one layer; its need is given once.
    let n = needs(&s);
    assert_eq!(
        n.iter()
            .filter(|n| n.reason.starts_with("disk vdb"))
            .count(),
        1
    );
    assert_eq!(need_of(&n, "/usr filesystem ext4").modules, ["fs-ext4"]);
}

/// Disks on a server: an iSCSI LUN names its target, portal and LUN; an NBD
/// device is one; each needs its transport and the program that connects it.
#[test]
fn an_iscsi_lun_and_an_nbd_device() {
    use super::model::Remote;
    let f = Fake::new();
    f.iscsi_lun("iqn.2026-12.org.example:root");
    let nbd = f.block("devices/virtual/block/nbd0", "43:0");
    f.write(&nbd, "pid", "412\n");
    let s = f.read(&root_on("8:0", "ext4", "/dev/sda"), "");
    let Kind::Disk(d) = &s.layers[s.layers[s.tops[0]].below[0]].kind else {
        panic!("{}", tree(&s));
    };
    assert_eq!(
        d.remote,
        Some(Remote::Iscsi {
            target: "iqn.2026-12.org.example:root".into(),
            address: Some("10.77.0.1".into()),
            port: Some("3260".into()),
            lun: "1".into(),
        })
    );
    assert_eq!(d.devices.len(), 1, "the SCSI device's modalias");
    let all = needs(&s);
    let n = need_of(
        &all,
        "iSCSI disk sda (LUN 1 of iqn.2026-12.org.example:root) under",
    );
    assert_eq!(n.modules, ["iscsi_tcp", "sd_mod"]);
    assert_eq!(n.programs, ["iscsistart"]);

    let s = f.read(&root_on("43:0", "ext4", "/dev/nbd0"), "");
    let Kind::Disk(d) = &s.layers[s.layers[s.tops[0]].below[0]].kind else {
        panic!("{}", tree(&s));
    };
    assert_eq!(d.remote, Some(Remote::Nbd));
    let all = needs(&s);
    let n = need_of(&all, "NBD disk nbd0 under");
    assert_eq!(n.modules, ["nbd"]);
    assert_eq!(n.programs, ["nbd-client"]);

    // A local disk has no server.
    f.virtio(4, "vda", "254:0");
    let s = f.read(&root_on("254:0", "ext4", "/dev/vda"), "");
    let Kind::Disk(d) = &s.layers[s.layers[s.tops[0]].below[0]].kind else {
        panic!("{}", tree(&s));
    };
    assert_eq!(d.remote, None);
}

#[test]
fn a_loop_device() {
    let f = Fake::new();
    let l = f.block("devices/virtual/block/loop0", "7:0");
    f.write(&l, "loop/backing_file", "/run/images/root.squashfs\n");
    let s = f.read(&root_on("7:0", "squashfs", "/dev/loop0"), "");
    assert_eq!(
        tree(&s),
        "fs squashfs / uuid=None label=None [7:0]\n\
         \x20 loop loop0 Some(\"/run/images/root.squashfs\") [7:0]\n"
    );
    let n = needs(&s);
    assert_eq!(n[1].modules, ["loop"]);
    assert_eq!(
        n[1].reason,
        "loop device loop0 (/run/images/root.squashfs) under root filesystem squashfs"
    );
}

#[test]
fn a_cycle_a_deep_chain_and_links_out_stop() {
    // dm-0 on dm-1 on dm-0.
    let f = Fake::new();
    let a = f.block("devices/virtual/block/dm-0", "253:0");
    let b = f.block("devices/virtual/block/dm-1", "253:1");
    for (p, n) in [(&a, "a"), (&b, "b")] {
        f.write(p, "dm/name", n);
        f.write(p, "dm/uuid", "OTHER-x");
    }
    f.slave(&a, &b);
    f.slave(&b, &a);
    // And a slave link out of sysfs.
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("dev"), "8:0\n").unwrap();
    std::os::unix::fs::symlink(outside.path(), a.join("slaves/escape")).unwrap();
    // An attribute that is a link out of sysfs.
    std::os::unix::fs::symlink(outside.path().join("dev"), b.join("size")).unwrap();
    let s = f.read(&root_on("253:0", "ext4", "/dev/mapper/a"), "");
    assert_eq!(
        tree(&s),
        "fs ext4 / uuid=None label=None [253:0]\n\
         \x20 dm a OTHER-x [253:0]\n\
         \x20   dm b OTHER-x [253:1]\n"
    );
    assert!(s.notes.iter().any(|n| n.contains("cycle")), "{:?}", s.notes);
    assert!(
        s.notes.iter().any(|n| n.contains("out of sysfs")),
        "{:?}",
        s.notes
    );

    // 300 devices each on the next, and a wide fan-out.
    let g = Fake::new();
    let mut lower = g.virtio(4, "vda", "254:0");
    for i in (0..300).rev() {
        lower = g.dm(
            &format!("dm-{i}"),
            &format!("253:{i}"),
            &format!("n{i}"),
            "X",
            &[&lower],
        );
    }
    let s = g.read(&root_on("253:0", "ext4", "/dev/mapper/n0"), "");
    assert!(
        s.layers.len() <= super::sysfs::MAX_DEPTH + 2,
        "{}",
        s.layers.len()
    );
    assert!(
        s.notes.iter().any(|n| n.contains("deeper than")),
        "{:?}",
        s.notes
    );

    let h = Fake::new();
    let top = h.block("devices/virtual/block/dm-0", "253:0");
    h.write(&top, "dm/name", "wide");
    for i in 0..300 {
        let d = h.block(&format!("devices/virtual/block/x{i}"), &format!("9:{i}"));
        h.slave(&top, &d);
    }
    let s = h.read(&root_on("253:0", "ext4", "/dev/mapper/wide"), "");
    assert_eq!(s.layers.len(), super::sysfs::MAX_NODES + 1);
    assert!(
        s.notes.iter().any(|n| n.contains("left out")),
        "{:?}",
        s.notes
    );
}

#[test]
fn mounts_and_names() {
    let m = "22 1 8:2 / / rw,relatime shared:1 - ext4 /dev/sda2 rw\n\
             23 22 0:21 / /proc rw - proc proc rw\n\
             24 22 8:3 / /my\\040data rw - xfs /dev/sda3 rw\n\
             30 22 254:1 / / rw - xfs /dev/mapper/root rw\n";
    assert_eq!(
        mount_of(m, "/"),
        Some(Mount {
            device: "254:1".into(),
            mountpoint: "/".into(),
            fstype: "xfs".into(),
            source: "/dev/mapper/root".into(),
            options: "rw".into(),
        })
    );
    assert_eq!(mount_of(m, "/my data").unwrap().device, "8:3");
    assert_eq!(mount_of(m, "/usr"), None);
    // The filesystem holding a directory: the longest mount point above it.
    assert_eq!(mount_holding(m, "/").as_deref(), Some("/"));
    assert_eq!(mount_holding(m, "/my data").as_deref(), Some("/my data"));
    assert_eq!(
        mount_holding(m, "/my data/target").as_deref(),
        Some("/my data")
    );
    assert_eq!(mount_holding(m, "/my datas").as_deref(), Some("/"));
    assert_eq!(mount_holding(m, "/srv/chroot").as_deref(), Some("/"));
    assert_eq!(mount_holding("", "/srv"), None);
    assert_eq!(
        split_lvm_name("vg--sys-root"),
        ("vg-sys".into(), "root".into())
    );
    assert_eq!(split_lvm_name("a-b--c"), ("a".into(), "b-c".into()));
    assert_eq!(split_lvm_name("odd"), ("odd".into(), "".into()));

    let f = Fake::new();
    let sys = f.sys();
    let src = |mi: &'static str| Sources {
        sys: &sys,
        dev: None,
        mountinfo: mi,
        crypttab: "",
    };
    assert!(matches!(
        read(&src("23 22 0:21 / /proc rw - proc proc rw\n"), &["/"]),
        Err(StackError::NoMount(_))
    ));
    let e = read(&src("1 0 0:30 / / rw - overlay overlay rw\n"), &["/"]).unwrap_err();
    assert!(matches!(e, StackError::NoBlockDevice { .. }), "{e}");
    // An NFS root is a filesystem over the network: a layer with nothing
    // below, which needs its client modules and mount.nfs.
    for (fstype, modules) in [("nfs", ["fs-nfs", "nfsv3"]), ("nfs4", ["fs-nfs4", "nfsv4"])] {
        let mi = format!("1 0 0:53 / / rw - {fstype} 10.77.0.1:/export rw,vers=4.2\n");
        let nfs = Sources {
            sys: &sys,
            dev: None,
            mountinfo: &mi,
            crypttab: "",
        };
        let s = read(&nfs, &["/"]).unwrap();
        assert_eq!(
            tree(&s),
            format!("fs {fstype} / uuid=None label=None [0:53]\n")
        );
        let all = super::needs::needs(&s);
        let n = need_of(
            &all,
            &format!("root filesystem {fstype} on 10.77.0.1:/export"),
        );
        assert_eq!(n.modules, modules);
        assert_eq!(n.programs, ["mount.nfs"]);
    }
    // A later mount point that is not mounted is left out.
    let vda = f.virtio(4, "vda", "254:0");
    let _ = vda;
    let s = read(
        &src("1 0 254:0 / / rw - ext4 /dev/vda rw\n"),
        &["/", "/usr"],
    )
    .unwrap();
    assert_eq!(s.tops.len(), 1);
    assert!(lvm_conf().contains("backup = 0") && lvm_conf().contains("monitoring = 0"));
    let _ = CryptKind::Plain;
    let _ = LvKind::Raid;
}

/// A CD-ROM drive on a SCSI controller (sr0, 11:0).
fn cdrom(f: &Fake) -> PathBuf {
    let pci = f.sys().join("devices/pci0000:00/0000:00:05.0");
    f.write(
        &pci,
        "modalias",
        "pci:v00001AF4d00001004sv00001AF4sd00000008bc01sc00i00\n",
    );
    f.write(&pci, "host0/target0:0:0/0:0:0:0/modalias", "scsi:t-0x05\n");
    f.block(
        "devices/pci0000:00/0000:00:05.0/host0/target0:0:0/0:0:0:0/block/sr0",
        "11:0",
    )
}

/// dracut's live root as the booted system sees it: `/` an overlay over the
/// squashfs image (on a loop device over the file on the ISO 9660 medium in
/// the CD-ROM drive) with its changes in a tmpfs.
const LIVE: &str = "1 0 0:30 / / rw,relatime - overlay LiveOS_rootfs \
    rw,lowerdir=/run/rootfsbase,upperdir=/run/overlayfs,workdir=/run/ovlwork\n\
    20 1 0:25 / /run rw,nosuid - tmpfs tmpfs rw,mode=755\n\
    21 20 11:0 / /run/initramfs/live ro,relatime - iso9660 /dev/sr0 ro,nojoliet\n\
    22 20 7:0 / /run/rootfsbase ro,relatime - squashfs /dev/loop0 ro,errors=continue\n\
    23 1 0:21 / /proc rw - proc proc rw\n";

#[test]
fn a_live_root_is_an_overlay_over_a_loop_over_a_file_on_a_cdrom() {
    let f = Fake::new();
    cdrom(&f);
    let l = f.block("devices/virtual/block/loop0", "7:0");
    f.write(
        &l,
        "loop/backing_file",
        "/run/initramfs/live/LiveOS/squashfs.img\n",
    );
    let s = f.read(LIVE, "");
    assert_eq!(
        tree(&s),
        "fs overlay / uuid=None label=None [0:30]\n\
         \x20 fs squashfs /run/rootfsbase uuid=None label=None [7:0]\n\
         \x20   loop loop0 Some(\"/run/initramfs/live/LiveOS/squashfs.img\") [7:0]\n\
         \x20     fs iso9660 /run/initramfs/live uuid=None label=None [11:0]\n\
         \x20       disk sr0 (2 devices) [11:0]\n\
         \x20 fs tmpfs /run uuid=None label=None [0:25]\n"
    );
    assert!(s.notes.is_empty(), "{:?}", s.notes);
    let n = needs(&s);
    assert_eq!(
        need_of(&n, "root filesystem overlay").modules,
        ["fs-overlay"]
    );
    assert_eq!(
        need_of(
            &n,
            "/run/rootfsbase filesystem squashfs under root filesystem overlay"
        )
        .modules,
        ["fs-squashfs"]
    );
    assert_eq!(
        need_of(
            &n,
            "loop device loop0 (/run/initramfs/live/LiveOS/squashfs.img) under \
             /run/rootfsbase filesystem squashfs"
        )
        .modules,
        ["loop"]
    );
    assert_eq!(
        need_of(
            &n,
            "/run/initramfs/live filesystem iso9660 under loop device loop0"
        )
        .modules,
        ["fs-iso9660"]
    );
    assert!(need_of(&n, "/run filesystem tmpfs").modules.is_empty());
    assert!(n.iter().all(|n| n.programs.is_empty()));
    let Kind::Disk(d) = &s.layers[need_of(&n, "disk sr0").layer].kind else {
        panic!()
    };
    assert_eq!(d.devices[0].modalias, "scsi:t-0x05");

    // rd.live.ram: the image was copied into /run, the tmpfs the changes go
    // to as well: one layer under both.
    let ram = Fake::new();
    let l = ram.block("devices/virtual/block/loop0", "7:0");
    ram.write(&l, "loop/backing_file", "/run/initramfs/squashed.img\n");
    let s = ram.read(LIVE, "");
    assert_eq!(
        tree(&s),
        "fs overlay / uuid=None label=None [0:30]\n\
         \x20 fs squashfs /run/rootfsbase uuid=None label=None [7:0]\n\
         \x20   loop loop0 Some(\"/run/initramfs/squashed.img\") [7:0]\n\
         \x20     fs tmpfs /run uuid=None label=None [0:25]\n\
         \x20 fs tmpfs /run uuid=None label=None [0:25]\n"
    );
    assert_eq!(s.layers.len(), 4, "{s:#?}");

    // A loop device whose file is named by a relative path: said, and the
    // loop is the bottom.
    let lost = Fake::new();
    let l = lost.block("devices/virtual/block/loop0", "7:0");
    lost.write(&l, "loop/backing_file", "relative/file.img\n");
    let s = lost.read(LIVE, "");
    assert!(
        s.notes
            .iter()
            .any(|n| n.contains("loop0's file relative/file.img: not an absolute path")),
        "{:?}",
        s.notes
    );
}

#[test]
fn an_overlay_whose_layers_cannot_be_followed_has_no_block_device() {
    let f = Fake::new();
    let sys = f.sys();
    let read_root = |mi: &str| {
        read(
            &Sources {
                sys: &sys,
                dev: None,
                mountinfo: mi,
                crypttab: "",
            },
            &["/"],
        )
    };
    // overlayroot after the switch: its lower layer (the disk root, mounted
    // on /root in the initramfs) is not in this namespace; /root is on the
    // overlay itself.
    let e = read_root("1 0 0:30 / / rw - overlay overlayroot rw,lowerdir=/root,upperdir=/run/composer/overlayroot/upper\n")
        .unwrap_err();
    assert!(matches!(e, StackError::NoBlockDevice { .. }), "{e}");
    // A loop device over a file on the filesystem it holds.
    let l = f.block("devices/virtual/block/loop0", "7:0");
    f.write(&l, "loop/backing_file", "/images/root.img\n");
    let s = read_root("1 0 7:0 / / rw - ext4 /dev/loop0 rw\n").unwrap();
    assert_eq!(
        tree(&s),
        "fs ext4 / uuid=None label=None [7:0]\n\
         \x20 loop loop0 Some(\"/images/root.img\") [7:0]\n"
    );
    assert!(
        s.notes.iter().any(|n| n.contains("(a cycle)")),
        "{:?}",
        s.notes
    );
}

#[test]
fn overlay_options_name_the_layers_directories() {
    assert_eq!(
        overlay_dirs("rw,lowerdir=/a\\:b:/c,upperdir=/u,workdir=/w,uuid=on"),
        ["/a:b", "/c", "/u"]
    );
    assert_eq!(
        overlay_dirs("ro,lowerdir=/my\\054dir::/data,lowerdir+=/d2,datadir+=/x"),
        ["/my,dir", "/data", "/d2", "/x"]
    );
    assert!(overlay_dirs("rw,lowerdir=relative,upperdir=").is_empty());
    assert!(overlay_dirs("").is_empty());
}

#[test]
fn a_verity_root_is_its_data_and_hash_partitions() {
    let f = Fake::new();
    f.verity_root();
    let s = f.read(&root_on("253:0", "ext4", "/dev/mapper/root"), "");
    assert_eq!(
        tree(&s),
        "fs ext4 / uuid=None label=None [253:0]\n\
         \x20 verity root [253:0]\n\
         \x20   part vda1 of vda #1 None [254:1]\n\
         \x20     disk vda (2 devices) [254:0]\n\
         \x20   part vda2 of vda #2 None [254:2]\n\
         \x20     disk vda (2 devices) [254:0]\n"
    );
    let n = needs(&s);
    let v = need_of(&n, "dm-verity device root under root filesystem ext4");
    assert_eq!(v.modules, ["dm-mod", "dm-verity"]);
    assert!(v.programs.is_empty());
    assert_eq!(v.shell_programs, ["veritysetup"]);
}
